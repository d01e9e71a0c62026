/*
 * kind_deploy — a step that puts the model version registered above it in
 * front of users: it adds the version to its deployment (created at the
 * first deploy, named after the model unless `deployment:` says), starts
 * `replicas` replicas of the model server (`serve:`, handed FERRY_PORT,
 * FERRY_MODEL_PATH and FERRY_MODEL_NAME), waits until each answers
 * GET /v2/health/ready and a warm-up inference with the step's `sample`,
 * and only then moves `traffic` percent to it (the versions already
 * serving keep the rest in proportion) and has HAProxy apply it
 * (reconcile.c). A version that never gets ready is stopped and removed:
 * traffic stays exactly as it was, and the step fails with the reason.
 *
 * In a dev run (`ferry dev run`) the step checks what it would deploy and
 * deploys nothing: debugging a pipeline never moves the traffic users get
 * nor leaves a server running after the session.
 *
 * The step runs on a worker thread (SKF_DAEMON): its waits are bounded by
 * the step's timeout (2 minutes when it has none). A retried step finds
 * its version: one already serving is not deployed twice.
 */
#include "steps/steps.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/durations.h"
#include "plan/deploy.h"
#include "deploy/hap_log.h"
#include "deploy/loadtest.h"
#include "steps/keys.h"
#include "deploy/reconcile.h"
#include "deploy/fleet.h"
#include "deploy/replicas.h"
#include "exec/exec.h"
#include "steps/deploy_replicas.h"
#include "store/store.h"
#include "store/store_deploy.h"
#include "lib/util.h"

#define READY_TIMEOUT_MS (2 * 60 * 1000)
#define GANG_WAIT_MS (10 * 60 * 1000) /* a gang's wait for room for its replicas, when the step has no timeout */
#define STOP_GRACE_MS 5000

/* The version and artifact registered above the step for model (a register step's outputs). */
static int upstream_version(const struct step_run *r, const char *model, const char **version,
			    const char **artifact)
{
	const char *k;
	json_t *in;

	*version = *artifact = NULL;
	json_object_foreach((json_t *)r->inputs, k, in) {
		const json_t *o = json_object_get(in, "outputs");
		const char *m = json_string_value(json_object_get(o, "model"));
		if (m && strcmp(m, model) == 0 && json_string_value(json_object_get(o, "version")) &&
		    json_string_value(json_object_get(o, "artifact"))) {
			char *vj = NULL;
			json_t *v;
			*version = json_string_value(json_object_get(o, "version"));
			*artifact = json_string_value(json_object_get(o, "artifact"));
			/* an archived version is kept, never deployed (ferry models restore brings it back) */
			if (store_model_version(&vj, r->conn, model, *version) == FERRY_OK &&
			    (v = json_loads(vj, 0, NULL)) != NULL) {
				int archived = json_is_true(json_object_get(v, "archived"));
				json_decref(v);
				free(vj);
				if (archived) {
					ferry_error_set("%s %s is archived: it is not deployed (ferry models restore %s %s)",
							model, *version, model, *version);
					return FERRY_EINVALID;
				}
			} else {
				free(vj);
			}
			return FERRY_OK;
		}
	}
	ferry_error_set("no step above this deploy step registered a version of model %s: add a register "
			"step (kind: register, model: %s) to its needs", model, model);
	return FERRY_EINVALID;
}

/* The sample request: the file `sample` names (below the run's working directory), read whole. */
static int read_sample(const struct step_run *r, char **body)
{
	const char *s = json_string_value(json_object_get(r->spec, "sample"));
	char *path, *real;
	json_t *j;
	int error;

	*body = NULL;
	if (s == NULL)
		return FERRY_OK;
	path = s[0] == '/' || r->workdir == NULL ? xstrdup(s) : xasprintf("%s/%s", r->workdir, s);
	real = realpath(path, NULL);
	if (real == NULL && exec_user_missing(path, "sample", errno) == FERRY_EINVALID) {
		free(path);
		return FERRY_EINVALID; /* where the job user could not have looked: said as for a file there */
	}
	if (real == NULL || (s[0] != '/' && r->workdir && !path_within(real, r->workdir))) {
		ferry_error_set("sample %s: not a file inside the workflow's directory", s);
		free(path), free(real);
		return FERRY_EINVALID;
	}
	/* the daemon reads it for the run and sends it to the run's replica: only what its jobs could read */
	if (!exec_user_may_read(real, "sample", r->workdir, r->home)) {
		free(path), free(real);
		return FERRY_EINVALID;
	}
	error = file_read(body, NULL, real);
	free(path), free(real);
	if (error < 0)
		return error;
	if ((j = json_loads(*body, 0, NULL)) == NULL) {
		ferry_error_set("sample %s: not a JSON request", s);
		free(*body);
		*body = NULL;
		return FERRY_EINVALID;
	}
	json_decref(j);
	return FERRY_OK;
}


/* The load-test result of the version with the most traffic, or NULL (production's, for "production * F"). */
static json_t *production_load_test(PGconn *conn, int64_t dep, const char *version)
{
	struct deployment *d = NULL;
	json_t *best = NULL;
	int w = -1;

	if (store_deployment_get(&d, conn, dep) < 0)
		return NULL;
	for (size_t i = 0; i < d->nversions; i++) {
		const struct deploy_version *v = &d->versions[i];
		if (v->state != DEPLOY_V_SERVING || strcmp(v->version, version) == 0 || v->weight <= w)
			continue;
		w = v->weight;
		best = v->load_test;
	}
	best = json_is_object(best) ? json_incref(best) : NULL;
	deployment_free(d);
	return best;
}

/*
 * The load-test gate (loadtest.h): the sample request at each concurrency
 * level against the new version's replicas, before traffic moves; the
 * result stays with the version; a threshold missed fails with the numbers.
 */
static int load_test(const struct step_run *r, int64_t dep, const char *model, const char *version,
		     const char *sample, const struct dr_set *set)
{
	const json_t *lt = json_object_get(r->spec, "load_test"), *lv = json_object_get(lt, "levels"), *x;
	char *urls[DEPLOY_MAX_REPLICAS];
	pid_t pids[DEPLOY_MAX_REPLICAS];
	int levels[LOADTEST_MAX_LEVELS], nrep = set->n;
	size_t nlev = 0, i;
	json_t *result = NULL, *verdicts = NULL, *prod;
	char *reason = NULL;
	int error, pass;

	if (sample == NULL) {
		ferry_error_set("load_test needs sample: the request it sends");
		return FERRY_EINVALID;
	}
	json_array_foreach(lv, i, x)
		if (nlev < LOADTEST_MAX_LEVELS)
			levels[nlev++] = (int)json_integer_value(x);
	for (int k = 0; k < nrep; k++) {
		urls[k] = xasprintf("http://%s:%d/v2/models/%s/infer", set->addr[k], set->ports[k], model);
		/* the memory of this host's replicas (another host's pids mean nothing here) */
		pids[k] = (pid_t)json_integer_value(json_object_get(set->handles[k], "pid"));
	}
	{
		struct loadtest_opts o = {.urls = (const char *const *)urls, .nurls = (size_t)nrep, .body = sample,
					  .levels = nlev ? levels : NULL, .nlevels = nlev,
					  .requests = (int)json_integer_value(json_object_get(lt, "requests")),
					  .pids = pids, .npids = (size_t)nrep};
		error = loadtest_run(&o, &result);
	}
	for (int k = 0; k < nrep; k++)
		free(urls[k]);
	if (error < 0)
		return error;
	prod = production_load_test(r->conn, dep, version);
	pass = loadtest_judge(&verdicts, &reason, json_object_get(lt, "thresholds"), result, prod);
	if (pass >= 0)
		json_object_set_new(result, "verdicts", verdicts);
	store_deploy_version_load_test(r->conn, dep, version, result);
	{
		json_t *ev = json_pack("{s:s, s:b, s:O}", "version", version, "passed", pass == 1, "result", result);
		store_deploy_event(r->conn, dep, r->actor, "load-test", ev);
		json_decref(ev);
	}
	flog_info("run %lld step %s: load test of %s %s: %s", (long long)r->run_id, r->name, model, version,
		  pass == 1 ? "passed" : reason ? reason : ferry_error_last());
	{
		/* each level's figures in the step's log, then the verdict */
		size_t k;
		json_t *l;
		json_array_foreach(json_object_get(result, "levels"), k, l) {
			char *line = json_dumps(l, JSON_COMPACT);
			steps_log(r, "load test level %zu: %s", k + 1, line ? line : "?");
			free(line);
		}
		steps_log(r, "load test: %s", pass == 1 ? "passed" : reason ? reason : ferry_error_last());
	}
	json_decref(result);
	json_decref(prod);
	if (pass == 1)
		return FERRY_OK;
	if (pass == 0) {
		ferry_error_set("%s", reason);
		free(reason);
		return FERRY_EINVALID;
	}
	return pass;
}

/* Sums HAProxy's counters of one frontend's servers: those of version ord (canary) and the others. */
struct tally {
	int64_t req, err;
	double rtime_sum; /* rtime_ms × requests, for the weighted mean */
};

static int tally(const char *home, const char *frontend, int ord, struct tally *canary, struct tally *base)
{
	json_t *st = NULL, *s;
	char prefix[32];
	size_t i;

	memset(canary, 0, sizeof(*canary));
	memset(base, 0, sizeof(*base));
	snprintf(prefix, sizeof(prefix), "v%d-", ord);
	if (reconcile_haproxy_stats(home, &st) < 0)
		return FERRY_ERROR;
	json_array_foreach(st, i, s) {
		struct tally *t;
		const char *fe = json_string_value(json_object_get(s, "frontend"));
		const char *sv = json_string_value(json_object_get(s, "server"));
		if (fe == NULL || sv == NULL || strcmp(fe, frontend) != 0)
			continue;
		t = strncmp(sv, prefix, strlen(prefix)) == 0 ? canary : base;
		t->req += json_integer_value(json_object_get(s, "requests"));
		t->err += json_integer_value(json_object_get(s, "hrsp_5xx"));
		t->rtime_sum += json_number_value(json_object_get(s, "rtime_ms")) *
				(double)json_integer_value(json_object_get(s, "requests"));
	}
	json_decref(st);
	return FERRY_OK;
}

#define PROBE_REQUESTS 50

/*
 * The canary's p99 latency, which HAProxy's statistics cannot give (they
 * keep a mean per server): PROBE_REQUESTS sample requests, one at a time,
 * straight to the version's replicas (loadtest_run); -1 when none could
 * be made, a failed request counting as slow (the 5xx rate is judged
 * apart).
 */
static double probe_p99(const struct step_run *r, int64_t dep, const char *model, const char *version)
{
	struct deployment *d = NULL;
	const struct deploy_version *v;
	json_t *result = NULL, *lv;
	char *urls[DEPLOY_MAX_REPLICAS], *sample = NULL;
	int one = 1, n = 0;
	double p99 = -1;

	if (read_sample(r, &sample) < 0 || sample == NULL || store_deployment_get(&d, r->conn, dep) < 0) {
		free(sample);
		return -1;
	}
	if ((v = deployment_version(d, version)) != NULL) {
		/* each replica where it runs, on whichever host */
		json_t *hosts = fleet_hosts(r->conn);
		for (size_t j = 0; j < v->nreplicas && n < DEPLOY_MAX_REPLICAS; j++)
			urls[n++] = xasprintf("http://%s:%d/v2/models/%s/infer",
					      fleet_ip(hosts, json_string_value(json_object_get(v->replicas[j].handle, "host"))),
					      v->replicas[j].port, model);
		json_decref(hosts);
	}
	if (n > 0) {
		struct loadtest_opts o = {.urls = (const char *const *)urls, .nurls = (size_t)n, .body = sample,
					  .levels = &one, .nlevels = 1, .requests = PROBE_REQUESTS};
		if (loadtest_run(&o, &result) == 0) {
			lv = json_array_get(json_object_get(result, "levels"), 0);
			p99 = json_integer_value(json_object_get(lv, "errors")) > 0 ? 1e9
			      : json_number_value(json_object_get(lv, "p99_ms"));
		}
	}
	for (int k = 0; k < n; k++)
		free(urls[k]);
	free(sample);
	json_decref(result);
	deployment_free(d);
	return p99;
}

/* Sleeps ms in short slices (the step's worker; nothing else waits on it). */
/*
 * A canary's own traffic (canary.traffic: {rate, requests}): the sample, or
 * the recorded requests of a file (one JSON body a line) in turn, POSTed
 * through the deployment's front address at a steady rate, each request
 * marked X-Ferry-Synthetic: canary, on a thread of its own until stopped;
 * so a canary is judged with no outside clients. HAProxy's counters hold
 * them with the users' requests; its log captures the mark, so the live
 * figures and the canary-step events count ours apart.
 */
struct synth {
	pthread_t th;
	int started;
	char *url;
	char **bodies; /* the sample, or each request of canary.traffic.requests, in turn */
	size_t nbodies;
	char *header;  /* an A/B test's "NAME: VALUE", so that its requests reach the version, or NULL */
	double rps;
	atomic_int stop;
	atomic_long sent;
};

static size_t synth_discard(char *p, size_t size, size_t n, void *arg)
{
	(void)p, (void)arg;
	return size * n;
}

static void *synth_main(void *arg)
{
	struct synth *s = arg;
	CURL *h = curl_easy_init();
	struct curl_slist *hdr = NULL;
	int64_t t0 = clock_mono_us();
	long i = 0;

	if (h == NULL)
		return NULL;
	hdr = curl_slist_append(hdr, "Content-Type: application/json");
	hdr = curl_slist_append(hdr, "X-Ferry-Synthetic: canary");
	if (s->header)
		hdr = curl_slist_append(hdr, s->header);
	curl_easy_setopt(h, CURLOPT_URL, s->url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, synth_discard);
	while (!atomic_load(&s->stop)) {
		int64_t due = t0 + (int64_t)((double)i * 1e6 / s->rps), now = clock_mono_us();
		if (now < due) {
			usleep((useconds_t)(due - now < 50000 ? due - now : 50000));
			continue;
		}
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, s->bodies[i % (long)s->nbodies]);
		(void)curl_easy_perform(h); /* an error is the canary's to count (HAProxy does) */
		atomic_fetch_add(&s->sent, 1);
		i++;
	}
	curl_slist_free_all(hdr);
	curl_easy_cleanup(h);
	return NULL;
}

static void synth_stop(struct synth *s)
{
	if (s->started) {
		atomic_store(&s->stop, 1);
		pthread_join(s->th, NULL);
		s->started = 0;
	}
	free(s->url), free(s->header);
	s->url = s->header = NULL;
	for (size_t i = 0; i < s->nbodies; i++)
		free(s->bodies[i]);
	free(s->bodies);
	s->bodies = NULL, s->nbodies = 0;
}

#define REQUESTS_MAX 10000
#define REQUESTS_FILE_MAX (64 << 20)

/*
 * canary.traffic.requests: the recorded request bodies of FILE (inside the
 * workflow's directory, like the sample), one JSON document a line, blank
 * lines skipped; each checked, at most REQUESTS_MAX of them.
 */
static int read_requests(const struct step_run *r, const char *file, struct synth *s)
{
	char *path = file[0] == '/' || r->workdir == NULL ? xstrdup(file) : xasprintf("%s/%s", r->workdir, file);
	char *real = realpath(path, NULL), *text = NULL, *line, *next;
	size_t len = 0, lineno = 0;
	int error;

	if (real == NULL && exec_user_missing(path, "canary.traffic.requests", errno) == FERRY_EINVALID) {
		error = FERRY_EINVALID; /* where the job user could not have looked: said as for a file there */
		goto out;
	}
	if (real == NULL || (file[0] != '/' && r->workdir && !path_within(real, r->workdir))) {
		ferry_error_set("canary.traffic.requests %s: not a file inside the workflow's directory", file);
		error = FERRY_EINVALID;
		goto out;
	}
	if (!exec_user_may_read(real, "canary.traffic.requests", r->workdir, r->home)) {
		error = FERRY_EINVALID;
		goto out;
	}
	if ((error = file_read(&text, &len, real)) < 0)
		goto out;
	if (len > REQUESTS_FILE_MAX) {
		ferry_error_set("canary.traffic.requests %s: %zu bytes, more than %d MiB", file, len, REQUESTS_FILE_MAX >> 20);
		error = FERRY_EINVALID;
		goto out;
	}
	for (line = text; line && *line; line = next) {
		json_error_t je;
		json_t *j;
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		lineno++;
		if (line[strspn(line, " \t\r")] == '\0')
			continue;
		if ((j = json_loads(line, JSON_DECODE_ANY, &je)) == NULL) {
			ferry_error_set("canary.traffic.requests %s:%zu:%d: not a JSON request (%s)", file, lineno,
					je.column, je.text);
			error = FERRY_EINVALID;
			goto out;
		}
		json_decref(j);
		if (s->nbodies == REQUESTS_MAX) {
			ferry_error_set("canary.traffic.requests %s: more than %d requests", file, REQUESTS_MAX);
			error = FERRY_EINVALID;
			goto out;
		}
		s->bodies = xrealloc(s->bodies, (s->nbodies + 1) * sizeof(*s->bodies));
		s->bodies[s->nbodies++] = xstrdup(line);
	}
	if (s->nbodies == 0) {
		ferry_error_set("canary.traffic.requests %s: no request in it (one JSON body a line)", file);
		error = FERRY_EINVALID;
	}
out:
	free(path), free(real), free(text);
	return error;
}

/*
 * Starts the canary's own traffic when canary.traffic asks for it (the
 * sample, or the recorded requests of a file), with header (an A/B test's
 * "NAME: VALUE") on each request when not NULL. 0, or an error (set).
 */
static int synth_start(const struct step_run *r, const json_t *cn, int port, const char *model, const char *header,
		       struct synth *synth, char **synth_body)
{
	const char *file = json_string_value(json_object_get(cn, "traffic_requests"));
	int error;

	if (!(json_number_value(json_object_get(cn, "traffic_rps")) > 0))
		return FERRY_OK;
	if (file != NULL) {
		if ((error = read_requests(r, file, synth)) < 0)
			return error;
	} else if (read_sample(r, synth_body) < 0 || *synth_body == NULL) {
		ferry_error_set("canary.traffic sends the sample: the step needs sample: (a request file), or "
				"canary.traffic.requests: (a file of recorded requests)");
		return FERRY_EINVALID;
	} else {
		synth->bodies = xcalloc(1, sizeof(*synth->bodies));
		synth->bodies[synth->nbodies++] = *synth_body;
		*synth_body = NULL;
	}
	synth->url = xasprintf("http://%s:%d/v2/models/%s/infer", replica_address(), port, model);
	synth->header = header ? xstrdup(header) : NULL;
	synth->rps = json_number_value(json_object_get(cn, "traffic_rps"));
	if (pthread_create(&synth->th, NULL, synth_main, synth) == 0)
		synth->started = 1;
	if (file != NULL)
		steps_log(r, "sending the %zu recorded request%s of %s in turn at %g/s through http://%s:%d "
			  "(X-Ferry-Synthetic: canary%s%s)", synth->nbodies, synth->nbodies == 1 ? "" : "s", file,
			  synth->rps, replica_address(), port, header ? ", " : "", header ? header : "");
	else
		steps_log(r, "sending the sample at %g/s through http://%s:%d (X-Ferry-Synthetic: canary%s%s)",
			  synth->rps, replica_address(), port, header ? ", " : "", header ? header : "");
	return FERRY_OK;
}

static void nap(int64_t ms)
{
	int64_t until = clock_mono_ms() + ms;

	while (clock_mono_ms() < until)
		usleep(50 * 1000);
}

/*
 * The canary: traffic to the new version grows through canary.steps; after
 * each step, over canary.interval, HAProxy's per-server counters of the
 * canary are compared with those of the versions it replaces in the same
 * window (at least min_requests to the canary, waiting up to three more
 * intervals for them), and its replicas are probed for their p99. A 5xx
 * rate over max_error_rate (and over the others'), a p99 over max_p99_ms
 * or a mean response time over max_rtime_ms, rolls back: the
 * weights from before the canary, the version retired, an event with the
 * numbers, the step failed. 100% at the end moves the production alias.
 */
static int canary(const struct step_run *r, int64_t dep, const char *name, const char *model,
		  const char *version, int ord, int auto_stop_s, json_t **weights)
{
	const json_t *cn = json_object_get(r->spec, "canary"), *stp;
	int64_t interval = json_integer_value(json_object_get(cn, "interval_ms"));
	int64_t min_req = json_integer_value(json_object_get(cn, "min_requests"));
	/* waiting for min_requests: max_wait, or the interval and three more */
	int64_t max_wait = json_integer_value(json_object_get(cn, "max_wait_ms")) > 0
				   ? json_integer_value(json_object_get(cn, "max_wait_ms"))
				   : 4 * interval,
		since = 0;
	int first = 1; /* no version served before this one */
	int64_t max_rt = json_integer_value(json_object_get(cn, "max_rtime_ms"));
	int64_t max_p99 = json_integer_value(json_object_get(cn, "max_p99_ms"));
	double p99 = -1;
	double max_err = json_number_value(json_object_get(cn, "max_error_rate"));
	int64_t threshold = json_integer_value(json_object_get(cn, "threshold"));
	int failed = 0;
	struct deployment *d = NULL;
	json_t *before = json_object();
	struct synth synth = {0};
	char *synth_body = NULL;
	size_t i;
	int error = FERRY_OK;

	/* the weights to come back to */
	if ((error = store_deployment_get(&d, r->conn, dep)) < 0)
		goto out;
	if ((error = synth_start(r, cn, d->port, model, NULL, &synth, &synth_body)) < 0)
		goto out;
	for (i = 0; i < d->nversions; i++)
		if (d->versions[i].state == DEPLOY_V_SERVING) {
			json_object_set_new(before, d->versions[i].version, json_integer(d->versions[i].weight));
			first &= d->versions[i].weight == 0 || strcmp(d->versions[i].version, version) == 0;
		}
	json_object_set_new(before, version, json_integer(0));
	json_array_foreach(json_object_get(cn, "steps"), i, stp) {
		int pct = (int)json_integer_value(stp);
		struct tally c0, b0, c1, b1;
		char *why = xasprintf("canary step %zu of %zu: %d%%", i + 1, json_array_size(json_object_get(cn, "steps")), pct);
		json_decref(*weights);
		*weights = NULL;
		error = store_deploy_shift(r->conn, dep, version, pct, auto_stop_s, r->actor, why, weights);
		if (error == FERRY_OK)
			steps_log(r, "%s: %s %s takes %d%% of the traffic", why, model, version, pct);
		free(why);
		if (error < 0 || (error = reconcile_request(r->conn, r->home, r->actor, RECONCILE_MAY_RUN)) < 0)
			goto out;
		if (json_array_size(json_object_get(cn, "steps")) == i + 1 && pct == 100)
			break; /* the last step: nothing left to judge against */
		steps_log(r, "judging it over %lld ms (at least %lld requests to it; 5xx rate, p99, mean time)",
			  (long long)interval, (long long)min_req);
		if (tally(r->home, name, ord, &c0, &b0) < 0)
			goto judge_failed;
		since = clock_mono_ms();
		for (;;) {
			double cerr, berr, crt;
			int64_t creq, breq;
			struct hap_live live;
			int secs, have_live;
			nap(interval);
			if (tally(r->home, name, ord, &c1, &b1) < 0)
				goto judge_failed;
			if (c1.req < c0.req || b1.req < b0.req) { /* HAProxy reloaded: its counters restarted */
				c0 = c1, b0 = b1;
				continue;
			}
			creq = c1.req - c0.req, breq = b1.req - b0.req;
			if (creq < min_req) {
				/* another interval while it ends within max_wait of the judging's start */
				int more = clock_mono_ms() - since + interval <= max_wait;
				steps_log(r, "  %lld requests reached %s so far, %lld needed to judge it%s", (long long)creq,
					  version, (long long)min_req, more ? ": waiting another interval" : "");
				if (more)
					continue;
				ferry_error_set("canary at %d%%: only %lld requests reached %s %s in %.1f s (max_wait; at least "
						"%lld needed to judge it); %s. A canary judges requests: send "
						"traffic to http://%s:%d, or let the step send the sample itself "
						"(canary: {traffic: {rate: 20/s}}) or recorded requests (canary: {traffic: "
						"{rate: 20/s, requests: FILE}})", pct, (long long)creq, model, version,
						(double)(clock_mono_ms() - since) / 1000, (long long)min_req,
						first ? "not deployed (no version served before it)" : "rolled back",
						replica_address(), d->port);
				goto rollback;
			}
			/* min_requests 0 and none came: the counters judge nothing, the probe still does */
			cerr = creq > 0 ? (double)(c1.err - c0.err) / (double)creq : 0;
			berr = breq > 0 ? (double)(b1.err - b0.err) / (double)breq : 0;
			crt = creq > 0 ? (c1.rtime_sum - c0.rtime_sum) / (double)creq : 0;
			/* the proxy's log over the interval's whole seconds and the one under way (one slot a
			 * second): the live p99, and which of the requests were the step's own */
			secs = (int)((interval + 999) / 1000) + 1;
			have_live = hap_log_window(name, ord, secs, &live) == 0;
			{
				json_t *ev = json_pack("{s:s, s:i, s:I, s:f, s:I, s:f, s:f, s:I}", "version", version, "traffic", pct,
						       "requests", (json_int_t)creq, "error_rate", cerr, "baseline_requests",
						       (json_int_t)breq, "baseline_error_rate", berr, "rtime_ms", crt,
						       "synthetic_sent", (json_int_t)atomic_load(&synth.sent));
				if (have_live)
					json_object_set_new(ev, "live", json_pack("{s:I, s:I, s:i}", "requests",
										   (json_int_t)live.requests, "synthetic",
										   (json_int_t)live.synthetic, "seconds", secs));
				store_deploy_event(r->conn, dep, r->actor, "canary-step", ev);
				json_decref(ev);
				steps_log(r, "  %s: %lld requests, %.1f%% 5xx, %.1f ms mean; the others: %lld requests, %.1f%% 5xx",
					  version, (long long)creq, 100 * cerr, crt, (long long)breq, 100 * berr);
				if (have_live && live.synthetic > 0)
					steps_log(r, "  of %lld requests to %s through the proxy in %d s, %lld were the step's own",
						  (long long)live.requests, version, secs, (long long)live.synthetic);
			}
			if (cerr > max_err && cerr > berr) {
				ferry_error_set("canary at %d%%: %s %s answered 5xx to %.1f%% of %lld requests (limit %.1f%%, "
						"the other versions %.1f%% of %lld); rolled back", pct, model, version,
						100 * cerr, (long long)creq, 100 * max_err, 100 * berr, (long long)breq);
				goto check_failed;
			}
			if (max_p99 > 0) {
				/* the p99 of the users' (and the step's own) requests in the interval, from the proxy's
				 * log; probing the replicas only when too few came through it */
				if (have_live && live.requests >= (min_req > 0 ? min_req : 1)) {
					p99 = live.p99_ms;
					steps_log(r, "  live p99 of %s: %.1f ms over %lld requests in %d s (limit %lld ms)", version,
						  p99, (long long)live.requests, secs, (long long)max_p99);
				} else if ((p99 = probe_p99(r, dep, model, version)) >= 0) {
					steps_log(r, "  probed p99 of %s: %.1f ms (limit %lld ms; too few requests through the "
						  "proxy)", version, p99, (long long)max_p99);
				}
			}
			if (max_p99 > 0 && p99 > (double)max_p99) {
				ferry_error_set("canary at %d%%: %s %s answered with a p99 of %.1f ms (limit %lld ms); "
						"rolled back", pct, model, version, p99, (long long)max_p99);
				goto check_failed;
			}
			if (max_rt > 0 && crt > (double)max_rt) {
				ferry_error_set("canary at %d%%: %s %s answered in %.1f ms on average over %lld requests "
						"(limit %lld ms); rolled back", pct, model, version, crt, (long long)creq,
						(long long)max_rt);
				goto check_failed;
			}
			steps_log(r, "  passed");
			break;
		check_failed:
			/* threshold: this many failed checks roll back; fewer, and it is judged again at the same weight */
			if (++failed < threshold) {
				steps_log(r, "  check failed (%d of %lld before a rollback): %s", failed, (long long)threshold,
					  ferry_error_last());
				c0 = c1, b0 = b1, since = clock_mono_ms();
				continue;
			}
			goto rollback;
		}
	}
	steps_log(r, "canary done: %s %s serves 100%%; production follows", model, version);
	/* at 100% production moved with the weights (store_deploy.c's alias_follows) */
	goto out;
judge_failed:
	ferry_error_set("canary: HAProxy's statistics could not be read (%s); rolled back", ferry_error_last());
rollback:
	{
		char *why = xstrdup(ferry_error_last());
		json_t *after = NULL, *det = json_pack("{s:s}", "reason", why);
		synth_stop(&synth);
		steps_log(r, "%s: the weights from before the canary are back, %s is retired", why, version);
		if (store_deploy_weights(r->conn, dep, before, r->actor, "canary-rolled-back", &after) < 0)
			flog_error("canary rollback of %s: %s", version, ferry_error_last());
		store_deploy_version_retire(r->conn, dep, version, r->actor, det);
		reconcile_request(r->conn, r->home, r->actor, RECONCILE_MAY_RUN);
		flog_warn("run %lld step %s: %s", (long long)r->run_id, r->name, why);
		ferry_error_set("%s", why);
		free(why);
		json_decref(after), json_decref(det);
		error = FERRY_EINVALID;
	}
out:
	synth_stop(&synth);
	free(synth_body);
	deployment_free(d);
	json_decref(before);
	return error;
}

/* Ends the transaction store_deploy_tx(BEGIN) opened: committed when error is FERRY_OK, rolled back (error kept) otherwise. */
static int tx_end(PGconn *conn, int error)
{
	if (error == FERRY_OK)
		return store_deploy_tx(conn, "COMMIT");
	store_deploy_tx(conn, "ROLLBACK");
	return error;
}

/*
 * An A/B test (canary.match: {header, value}): the new version serves 0%
 * of the traffic, and every request that carries the header (with the
 * value) goes to it alone (store_deploy_match; HAProxy's NAME:ab backend),
 * with the step's own traffic marked so when canary.traffic asks for it.
 * Each of canary.iterations intervals is judged on the proxy's log of the
 * version's requests in it (at least min_requests, waiting up to
 * max_wait): a 5xx rate over max_error_rate or a p99 over max_p99_ms is a
 * failed check, threshold of them a rollback (routing ended, the version
 * retired, the weights untouched). All passed: the routing ends and the
 * version takes 100% (production follows, store_deploy.c).
 */
static int ab_test(const struct step_run *r, int64_t dep, const char *name, const char *model, const char *version,
		   int ord, int auto_stop_s, json_t **weights)
{
	const json_t *cn = json_object_get(r->spec, "canary");
	const char *header = json_string_value(json_object_get(cn, "match_header"));
	const char *value = json_string_value(json_object_get(cn, "match_value"));
	int64_t interval = json_integer_value(json_object_get(cn, "interval_ms"));
	int64_t min_req = json_integer_value(json_object_get(cn, "min_requests"));
	int64_t max_p99 = json_integer_value(json_object_get(cn, "max_p99_ms"));
	int64_t threshold = json_integer_value(json_object_get(cn, "threshold"));
	int64_t iterations = json_integer_value(json_object_get(cn, "iterations"));
	int64_t max_wait = json_integer_value(json_object_get(cn, "max_wait_ms")) > 0
				   ? json_integer_value(json_object_get(cn, "max_wait_ms"))
				   : 4 * interval;
	double max_err = json_number_value(json_object_get(cn, "max_error_rate"));
	struct deployment *d = NULL;
	struct synth synth = {0};
	char *synth_body = NULL, *hline = xasprintf("%s: %s", header, value ? value : "1"), *why;
	int others = 0, failed = 0, error;

	if ((error = store_deployment_get(&d, r->conn, dep)) < 0)
		goto out;
	for (size_t i = 0; i < d->nversions; i++)
		others += d->versions[i].state == DEPLOY_V_SERVING && d->versions[i].weight > 0 &&
			  strcmp(d->versions[i].version, version) != 0;
	if (others == 0) {
		ferry_error_set("an A/B test (canary.match) sends the matching requests to %s %s and the others to "
				"the versions serving now, and deployment %s has none: deploy a first version without "
				"match", model, version, name);
		goto rollback;
	}
	why = xasprintf("A/B test: requests with %s%s%s go to %s", header, value ? ": " : "", value ? value : "",
			version);
	/* one transaction: the version at 0% is never seen (or left by a crash) without its routing */
	if ((error = store_deploy_tx(r->conn, "BEGIN")) == FERRY_OK &&
	    (error = store_deploy_shift(r->conn, dep, version, 0, auto_stop_s, r->actor, why, weights)) == FERRY_OK)
		error = store_deploy_match(r->conn, dep, version, header, value, r->actor, why);
	error = tx_end(r->conn, error);
	free(why);
	if (error < 0 || (error = reconcile_request(r->conn, r->home, r->actor, RECONCILE_MAY_RUN)) < 0)
		goto out;
	steps_log(r, "A/B test: requests to http://%s:%d with %s%s%s go to %s %s, the others by the weights "
		  "as before; %lld interval%s of %lld ms", replica_address(), d->port, header, value ? ": " : " (any value)",
		  value ? value : "", model, version, (long long)iterations, iterations == 1 ? "" : "s",
		  (long long)interval);
	if ((error = synth_start(r, cn, d->port, model, hline, &synth, &synth_body)) < 0)
		goto rollback;
	for (int64_t it = 1; it <= iterations; it++) {
		int64_t since = clock_mono_ms();
		for (;;) {
			struct hap_live l;
			int secs, have;
			double err;
			nap(interval);
			secs = (int)((clock_mono_ms() - since + 999) / 1000) + 1;
			have = hap_log_window(name, ord, secs, &l) == 0;
			if (!have || l.requests < (min_req > 0 ? min_req : 1)) {
				int more = clock_mono_ms() - since + interval <= max_wait;
				steps_log(r, "  %lld matching requests reached %s so far, %lld needed to judge it%s",
					  (long long)(have ? l.requests : 0), version, (long long)min_req,
					  more ? ": waiting another interval" : "");
				if (more)
					continue;
				ferry_error_set("A/B test of %s %s: only %lld requests with %s reached it in %.1f s (max_wait; at "
						"least %lld needed to judge it); rolled back. Send requests with the header "
						"%s to http://%s:%d, or let the step send some itself (canary: "
						"{traffic: {rate: 20/s}})", model, version, (long long)(have ? l.requests : 0),
						header, (double)(clock_mono_ms() - since) / 1000, (long long)min_req, hline,
						replica_address(), d->port);
				goto rollback;
			}
			err = (double)l.errors_5xx / (double)l.requests;
			{
				json_t *ev = json_pack("{s:s, s:I, s:I, s:I, s:f, s:f}", "version", version, "iteration",
						       (json_int_t)it, "requests", (json_int_t)l.requests, "synthetic",
						       (json_int_t)l.synthetic, "error_rate", err, "p99_ms", l.p99_ms);
				store_deploy_event(r->conn, dep, r->actor, "ab-check", ev);
				json_decref(ev);
			}
			steps_log(r, "  iteration %lld of %lld: %lld requests (%lld the step's own), %.1f%% 5xx, p99 %.1f ms",
				  (long long)it, (long long)iterations, (long long)l.requests, (long long)l.synthetic,
				  100 * err, l.p99_ms);
			if (err > max_err)
				ferry_error_set("A/B test of %s %s: it answered 5xx to %.1f%% of %lld requests (limit %.1f%%); "
						"rolled back", model, version, 100 * err, (long long)l.requests, 100 * max_err);
			else if (max_p99 > 0 && l.p99_ms > (double)max_p99)
				ferry_error_set("A/B test of %s %s: it answered with a p99 of %.1f ms (limit %lld ms); "
						"rolled back", model, version, l.p99_ms, (long long)max_p99);
			else
				break;
			if (++failed < threshold) {
				steps_log(r, "  check failed (%d of %lld before a rollback): %s", failed, (long long)threshold,
					  ferry_error_last());
				since = clock_mono_ms();
				continue;
			}
			goto rollback;
		}
	}
	synth_stop(&synth);
	json_decref(*weights);
	*weights = NULL;
	why = xasprintf("A/B test passed: %s takes all the traffic", version);
	/*
	 * One transaction: between the routing's end and the 100%, the winner
	 * would serve 0% with the routing gone, since the test began — a
	 * leader's round could retire it there (past retire_after), a crash
	 * leave it so.
	 */
	if ((error = store_deploy_tx(r->conn, "BEGIN")) == FERRY_OK &&
	    (error = store_deploy_match(r->conn, dep, NULL, NULL, NULL, r->actor, why)) == FERRY_OK) {
		EXEC_FAULT("ab-ended"); /* tests/fault: the routing's end written, the 100% not yet */
		error = store_deploy_shift(r->conn, dep, version, 100, auto_stop_s, r->actor, why, weights);
	}
	error = tx_end(r->conn, error);
	free(why);
	if (error < 0 || (error = reconcile_request(r->conn, r->home, r->actor, RECONCILE_MAY_RUN)) < 0)
		goto out;
	steps_log(r, "A/B test passed: %s %s serves 100%%; production follows", model, version);
	goto out;
rollback:
	{
		char *reason = xstrdup(ferry_error_last());
		json_t *det = json_pack("{s:s}", "reason", reason);
		synth_stop(&synth);
		steps_log(r, "%s: the header routing ends, %s is retired, the weights stay as they were", reason, version);
		/* one transaction; a test that failed before its routing began has none to end */
		if (store_deploy_tx(r->conn, "BEGIN") == FERRY_OK) {
			int e = store_deploy_match(r->conn, dep, NULL, NULL, NULL, r->actor, reason);
			if (e == FERRY_OK || e == FERRY_ENOTFOUND)
				e = store_deploy_version_retire(r->conn, dep, version, r->actor, det);
			tx_end(r->conn, e);
		}
		reconcile_request(r->conn, r->home, r->actor, RECONCILE_MAY_RUN);
		flog_warn("run %lld step %s: %s", (long long)r->run_id, r->name, reason);
		ferry_error_set("%s", reason);
		free(reason);
		json_decref(det);
		error = FERRY_EINVALID;
	}
out:
	synth_stop(&synth);
	free(synth_body), free(hline);
	deployment_free(d);
	return error;
}

static int deploy_prepare(struct step_result *res, json_t **env, const struct step_run *r)
{
	const char *model = json_string_value(json_object_get(r->spec, "model"));
	const char *name = json_string_value(json_object_get(r->spec, "deployment"));
	const json_t *serve = json_object_get(r->spec, "serve");
	int traffic = (int)json_integer_value(json_object_get(r->spec, "traffic"));
	int nrep = (int)json_integer_value(json_object_get(r->spec, "replicas"));
	const char *version, *artifact;
	struct dr_set set = {0};
	json_t *weights = NULL, *spec = NULL, *as = json_object_get(r->spec, "auto_stop");
	char *sample = NULL, *state = NULL;
	int64_t dep = 0, until;
	int port = 0, created = 0, ord = 0, auto_stop_s = DEPLOY_AUTO_STOP_DEFAULT_S, error;

	(void)env;
	res->outcome = OUTCOME_FAILED;
	if (name == NULL)
		name = model;
	/*
	 * A dev run never touches what users get, and starts nothing that
	 * would outlive the session: the step checks what it would deploy and
	 * says so.
	 */
	if (json_is_true(json_object_get(r->run, "dev"))) {
		if ((error = upstream_version(r, model, &version, &artifact)) < 0 ||
		    (error = read_sample(r, &sample)) < 0)
			goto fail;
		free(sample);
		res->outcome = OUTCOME_SUCCEEDED;
		res->reason = xasprintf("not deployed: a dev run starts no replicas and moves no traffic (%s %s "
					"would go to deployment %s); submit the workflow to deploy", model, version, name);
		res->outputs = json_pack("{s:s, s:s, s:b}", "deployment", name, "version", version, "deployed", 0);
		return 1;
	}
	{
		/* traffic, replicas and the production alias are a deployer's to move (steps.h) */
		char *what = xasprintf("deploying to %s", name);
		error = steps_submitter_may_deploy(r, res, what);
		free(what);
		if (error <= 0)
			return error < 0 ? error : 1;
	}
	if (nrep < 1)
		nrep = 1;
	if ((error = upstream_version(r, model, &version, &artifact)) < 0 ||
	    (error = read_sample(r, &sample)) < 0 ||
	    (as && (error = deploy_check_auto_stop(as, "auto_stop", &auto_stop_s)) < 0))
		goto fail;
	/*
	 * approve: true — a person says go first (ferry continue RUN STEP, with
	 * traffic, replicas or auto_stop to override; checked by ferry_continue).
	 */
	if (json_is_true(json_object_get(r->spec, "approve"))) {
		json_t *own = store_step_outputs(r->conn, r->step_id), *ok = json_object_get(own, "approved"), *x;
		if (!json_is_object(ok)) {
			res->outcome = OUTCOME_WAITING;
			res->reason = xasprintf("waiting for approval to deploy %s %s to %s (%d%%, %d replica%s): ferry "
						"continue %lld %s [--data '{\"traffic\": N, \"replicas\": N, \"auto_stop\": \"2h\"}']",
						model, version, name, traffic, nrep, nrep == 1 ? "" : "s",
						(long long)r->run_id, r->name);
			res->outputs = json_pack("{s:b, s:{s:s, s:s, s:s, s:i, s:i}}", "resume_on_continue", 1, "deploy",
						 "model", model, "version", version, "deployment", name, "traffic", traffic,
						 "replicas", nrep);
			json_decref(own);
			free(sample);
			return 1;
		}
		if ((x = json_object_get(ok, "traffic")) != NULL)
			traffic = (int)json_integer_value(x);
		if ((x = json_object_get(ok, "replicas")) != NULL)
			nrep = (int)json_integer_value(x);
		if ((x = json_object_get(ok, "auto_stop")) != NULL && deploy_check_auto_stop(x, "auto_stop", &auto_stop_s) < 0) {
			json_decref(own);
			error = FERRY_EINVALID;
			goto fail;
		}
		flog_info("run %lld step %s: approved by %s", (long long)r->run_id, r->name,
			  json_string_value(json_object_get(own, "approved_by")));
		json_decref(own);
	}
	if (!json_is_array(serve) || json_array_size(serve) == 0) {
		ferry_error_set("a deploy step needs serve: the model server's command");
		error = FERRY_EINVALID;
		goto fail;
	}
	/* what a restart of a replica needs, kept with the version */
	spec = json_pack("{s:O, s:o, s:s?, s:{s:O?, s:O?, s:O?, s:O?, s:O?}}", "command", serve, "env",
			 json_object_get(r->spec, "env") ? json_incref(json_object_get(r->spec, "env")) : json_object(),
			 "workdir", r->workdir, "placement", "executor", json_object_get(r->spec, "executor"),
			 "image", json_object_get(r->spec, "image"), "resources", json_object_get(r->spec, "resources"),
			 "warm", json_object_get(r->spec, "warm"),
			 /* the labels a host must have to run them (fleet.c) */
			 "hosts", json_object_get(json_object_get(r->spec, "placement"), "hosts"));
	if ((error = store_deploy_ensure(r->conn, name, model, replica_free_port(r->conn), auto_stop_s, r->run_id,
					 r->actor, &dep, &port, &created)) < 0)
		goto fail;
	if (json_is_string(json_object_get(r->spec, "retire_after"))) {
		int secs = DEPLOY_RETIRE_AFTER_DEFAULT_S;
		deploy_check_retire_after(json_object_get(r->spec, "retire_after"), "retire_after", &secs);
		if ((error = store_deploy_retire_after(r->conn, dep, secs, r->actor)) < 0)
			goto fail;
	}
	if (!created) {
		char *why = xasprintf("run %lld step %s deploys %s %s", (long long)r->run_id, r->name, model, version);
		int woke = 0;

		error = store_deploy_wake(r->conn, dep, r->actor, why, &woke);
		free(why);
		if (error < 0)
			goto fail;
		if (woke)
			flog_info("run %lld step %s: deployment %s was stopped: started again", (long long)r->run_id,
				  r->name, name);
	}
	if ((error = store_deploy_version_add(r->conn, dep, version, artifact, nrep, spec, r->run_id, r->name,
					      &ord, &state)) < 0)
		goto fail;
	if (strcmp(state, "retired") == 0) {
		ferry_error_set("%s %s was rolled back in deployment %s (retired): deploy a newly registered version",
				model, version, name);
		error = FERRY_ECONFLICT;
		goto fail;
	}
	if (strcmp(state, "starting") != 0) {
		/* an earlier attempt of this step deployed it */
		res->outcome = OUTCOME_SUCCEEDED;
		res->reason = xasprintf("%s %s is %s in deployment %s (http://%s:%d)", model, version, state,
					name, replica_address(), port);
		res->outputs = json_pack("{s:s, s:s, s:s, s:I}", "deployment", name, "version", version, "url",
					 "", "id", (json_int_t)dep);
		json_object_set_new(res->outputs, "url", json_sprintf("http://%s:%d", replica_address(), port));
		free(state), free(sample);
		json_decref(spec);
		return 1;
	}
	/*
	 * Still starting: a first try, or one whose daemon died half-way
	 * (its attempt re-dispatched): that try's replicas here are stopped
	 * first, so none is left running unknown.
	 */
	dr_stop_earlier(&set, r, dep, version);
	steps_log(r, "deploying %s %s into deployment %s (http://%s:%d): %d replica%s", model, version, name,
		  replica_address(), port, nrep, nrep == 1 ? "" : "s");
	until = clock_mono_ms() + READY_TIMEOUT_MS;
	{
		struct dr_what w = {.dep = dep, .deployment = name, .model = model, .version = version,
				    .artifact = artifact, .ord = ord, .serve = serve, .spec = spec};
		set.n = nrep;
		/* gang: true waits for room for all its replicas, as long as the step's timeout allows (10 min) */
		json_int_t tmo = json_integer_value(json_object_get(r->spec, "timeout_ms"));
		int64_t room_until = clock_mono_ms() + (tmo > 0 ? (int64_t)tmo : GANG_WAIT_MS);
		if ((error = dr_start(&set, r, &w, room_until)) < 0)
			goto undo;
		until = clock_mono_ms() + READY_TIMEOUT_MS;
		if ((error = dr_wait(&set, r, &w, sample, until)) < 0)
			goto undo;
	}
	/* the load-test gate: before any traffic moves */
	if (json_is_object(json_object_get(r->spec, "load_test")) &&
	    (error = load_test(r, dep, model, version, sample, &set)) < 0)
		goto undo;
	if (json_is_object(json_object_get(r->spec, "canary"))) {
		/* traffic grows step by step; a failed step rolls back and retires the version */
		error = json_string_value(json_object_get(json_object_get(r->spec, "canary"), "match_header"))
				? ab_test(r, dep, name, model, version, ord, auto_stop_s, &weights)
				: canary(r, dep, name, model, version, ord, auto_stop_s, &weights);
		if (error < 0) {
			res->final = 1;
			res->reason = xstrdup(ferry_error_last());
			goto out_failed;
		}
	} else {
		char *why = xasprintf("deployed by run %lld step %s", (long long)r->run_id, r->name);
		error = store_deploy_shift(r->conn, dep, version, traffic, auto_stop_s, r->actor, why, &weights);
		free(why);
		if (error < 0)
			goto undo;
		{
			char *w = json_dumps(weights, JSON_COMPACT);
			steps_log(r, "traffic: %s", w ? w : "?");
			free(w);
		}
	}
	/* traffic moves when HAProxy has it: the step ends with the version live */
	if ((error = reconcile_request(r->conn, r->home, r->actor, RECONCILE_MAY_RUN)) < 0)
		flog_warn("run %lld step %s: HAProxy not updated yet (the reconcile task retries): %s",
			  (long long)r->run_id, r->name, ferry_error_last());
	res->outcome = OUTCOME_SUCCEEDED;
	res->reason = xasprintf("%s %s serves %d%% of deployment %s at http://%s:%d with %d replica%s",
				model, version, (int)json_integer_value(json_object_get(weights, version)), name,
				replica_address(), port, nrep, nrep == 1 ? "" : "s");
	res->outputs = json_pack("{s:s, s:s, s:I, s:O}", "deployment", name, "version", version, "id",
				 (json_int_t)dep, "weights", weights);
	json_object_set_new(res->outputs, "url", json_sprintf("http://%s:%d", replica_address(), port));
	flog_info("run %lld step %s: %s", (long long)r->run_id, r->name, res->reason);
	json_decref(weights);
	dr_free(&set);
	free(state), free(sample);
	json_decref(spec);
	return 1;
out_failed:
	json_decref(weights);
	dr_free(&set);
	free(state), free(sample);
	json_decref(spec);
	return 1;
undo:
	{
		char *why = xstrdup(ferry_error_last());
		steps_log(r, "%s: its replicas stopped, the version removed, traffic left as it was", why);
		dr_stop(&set, STOP_GRACE_MS);
		if (store_deploy_version_drop(r->conn, dep, version, r->actor, why) < 0)
			flog_error("deployment %s: removing version %s that never served: %s", name, version,
				   ferry_error_last());
		ferry_error_set("%s; traffic left as it was", why);
		free(why);
	}
fail:
	dr_free(&set);
	free(state), free(sample);
	json_decref(spec);
	if (error == FERRY_EDB)
		return error; /* the database: the engine retries the step */
	res->final = 1;
	res->reason = xstrdup(ferry_error_last());
	return 1;
}

const struct step_kind kind_deploy = {
	.name = "deploy", .flags = SKF_DAEMON | SKF_SERVICE | SKF_INPUTS,
	.command = SKC_FORBIDDEN, .no_command = "starts model servers (serve:) and runs no command",
	.keys = deploy_keys,
	.prepare = deploy_prepare,
};

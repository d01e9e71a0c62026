/*
 * engine — see engine.h. engine_tick() is the periodic function; every
 * iteration it, in order:
 *   - drains the wake pipe and reaps exited children (their DIR/status);
 *   - polls adopted jobs (not our children) for exit;
 *   - fires step timeouts (SIGTERM) and escalates to SIGKILL after the grace;
 *   - closes finished attempts in one ferry_finish() call; when that made
 *     steps ready, claims again at once instead of waiting for a poll;
 *   - claims up to claim_batch ready steps while it has capacity and starts
 *     them, recording pids in one statement;
 *   - renews leases every lease/3, looks for orphaned attempts every lease/2
 *     (and at start), and kills the jobs of stopping runs when told;
 *   - waits on the database socket (LISTEN ferry_ready, ferry_stop) and the
 *     wake pipe, never longer than the next thing due.
 * Results that could not be written (database down) stay queued and are
 * written after the reconnect; nothing is lost.
 */
#include "engine.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "db.h"
#include "exec.h"
#include "metrics.h"
#include "steps.h"
#include "store.h"
#include "util.h"

struct done {
	struct store_result r;
	char *reason;           /* owned; r.reason points here */
	struct step_result res; /* owned: outputs, metrics, gate, cached_from */
	char *cache_key;        /* owned */
};

struct engine {
	struct engine_opts o;
	char *conninfo, *owner, *host, *home;
	PGconn *conn;
	int noop;
	struct exec_job *jobs;
	int njobs, capjobs;
	struct done *done;
	int ndone, capdone;
	char **dirs;           /* attempt directories of steps finished at claim (claim scratch) */
	int ndirs, capdirs;
	int claim_now, stop_check, draining;
	int64_t next_poll, next_heartbeat, next_recover, next_adopt_check, next_reconnect, next_waits;
	int64_t retry_wall_ms; /* earliest known retry (wall clock), 0 none */
	int64_t last_analyze;  /* monotonic ms of our last ANALYZE, 0 never */
};

static int wake_pipe[2] = {-1, -1};

void engine_sigchld(void)
{
	int saved = errno;
	if (wake_pipe[1] >= 0)
		(void)!write(wake_pipe[1], "c", 1);
	errno = saved;
}

static void on_sigchld(int sig)
{
	(void)sig;
	engine_sigchld();
}

static int64_t env_int(const char *name, int64_t def)
{
	const char *v = getenv(name);
	int64_t n;
	return v && parse_int64(v, &n) == 0 && n >= 0 ? n : def;
}

void engine_opts_default(struct engine_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->home = getenv("FERRY_HOME") ? getenv("FERRY_HOME") : "./.ferry";
	o->executor = getenv("FERRY_EXECUTOR") ? getenv("FERRY_EXECUTOR") : "local";
	o->max_jobs = (int)env_int("FERRY_MAX_JOBS", 32);
	o->claim_batch = (int)env_int("FERRY_CLAIM_BATCH", 256);
	o->lease_ms = env_int("FERRY_LEASE_MS", 15000);
	o->poll_ms = env_int("FERRY_POLL_MS", 1000);
	o->kill_grace_ms = env_int("FERRY_KILL_GRACE_MS", 10000);
	if (o->max_jobs < 1)
		o->max_jobs = 1;
	if (o->claim_batch < 1)
		o->claim_batch = 1;
	if (o->lease_ms < 300)
		o->lease_ms = 300;
}

static int engine_connect(struct engine *e)
{
	PGresult *res;
	int ok;

	if (e->conn) {
		PQfinish(e->conn);
		e->conn = NULL;
	}
	if (db_connect(&e->conn, e->conninfo) < 0)
		return FERRY_EDB;
	res = PQexec(e->conn, "SET plan_cache_mode = force_generic_plan; LISTEN ferry_ready; LISTEN ferry_stop");
	ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	PQclear(res);
	if (!ok) {
		ferry_error_set("LISTEN: %s", PQerrorMessage(e->conn));
		return FERRY_EDB;
	}
	e->claim_now = 1;
	e->stop_check = 1;
	e->next_recover = 0;
	return FERRY_OK;
}

int engine_new(struct engine **out, const struct engine_opts *opts, const char *conninfo)
{
	struct engine *e = xcalloc(1, sizeof(*e));
	struct sigaction sa;
	char hostname[256] = "localhost";
	int error;

	*out = NULL;
	e->o = *opts;
	e->noop = opts->executor && strcmp(opts->executor, "noop") == 0;
	if (!e->noop && opts->executor && strcmp(opts->executor, "local") != 0) {
		ferry_error_set("unknown executor \"%s\" (known: local)", opts->executor);
		free(e);
		return FERRY_EINVALID;
	}
	e->conninfo = xstrdup(conninfo);
	gethostname(hostname, sizeof(hostname) - 1);
	e->host = xstrdup(hostname);
	e->owner = xasprintf("%s/%d/%lld", hostname, (int)getpid(),
			     (long long)exec_pid_start(getpid()));
	if (mkdir_p(opts->home, 0755) < 0) {
		error = FERRY_ERROR;
		goto fail;
	}
	e->home = realpath(opts->home, NULL);
	if (e->home == NULL) {
		ferry_error_set("FERRY_HOME %s: %s", opts->home, strerror(errno));
		error = FERRY_ERROR;
		goto fail;
	}
	if (wake_pipe[0] < 0) {
		if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
			ferry_error_set("pipe: %s", strerror(errno));
			error = FERRY_ERROR;
			goto fail;
		}
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigchld;
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGCHLD, &sa, NULL);
	/* processes a job leaves behind are reparented to us and reaped, not left as zombies */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if ((error = engine_connect(e)) < 0)
		goto fail;
	*out = e;
	return FERRY_OK;
fail:
	engine_free(e);
	return error;
}

void engine_free(struct engine *e)
{
	if (e == NULL)
		return;
	for (int i = 0; i < e->njobs; i++)
		exec_job_dispose(&e->jobs[i]);
	for (int i = 0; i < e->ndone; i++) {
		free(e->done[i].reason);
		step_result_dispose(&e->done[i].res);
		free(e->done[i].cache_key);
	}
	free(e->jobs);
	free(e->done);
	free(e->dirs);
	if (e->conn)
		PQfinish(e->conn);
	free(e->conninfo), free(e->owner), free(e->host), free(e->home);
	free(e);
}

int engine_wake_fd(struct engine *e)
{
	(void)e;
	return wake_pipe[1];
}

const char *engine_owner(const struct engine *e)
{
	return e->owner;
}

int engine_jobs(const struct engine *e)
{
	return e->njobs;
}

void engine_drain(struct engine *e)
{
	e->draining = 1;
}

/* Queues how an attempt ended; written by the next flush. */
static void push_done(struct engine *e, int64_t step_id, int attempt, const char *outcome,
		      int exit_code, int sig, char *reason)
{
	struct done *d;

	if (e->ndone == e->capdone) {
		e->capdone = e->capdone ? e->capdone * 2 : 64;
		e->done = xrealloc(e->done, (size_t)e->capdone * sizeof(*e->done));
	}
	d = &e->done[e->ndone++];
	memset(d, 0, sizeof(*d));
	d->reason = reason;
	d->r.step_id = step_id;
	d->r.attempt = attempt;
	d->r.outcome = outcome;
	d->r.exit_code = exit_code;
	d->r.signal = sig;
	d->r.reason = reason;
}

/* Queues what a step handler decided; takes res's contents and cache_key. */
static void push_result(struct engine *e, int64_t step_id, int attempt, struct step_result *res,
			char *cache_key, int exit_code)
{
	struct done *d;
	const char *outcome = res->outcome ? res->outcome : "failed";

	push_done(e, step_id, attempt, outcome, exit_code, 0, res->reason);
	d = &e->done[e->ndone - 1];
	d->res = *res;
	d->res.reason = NULL; /* d->reason owns it */
	d->cache_key = strcmp(outcome, "succeeded") == 0 ? cache_key : (free(cache_key), NULL);
	d->r.final = res->final;
	d->r.outputs = res->outputs;
	d->r.metrics = res->metrics;
	d->r.gate = res->gate;
	d->r.cached_from = res->cached_from;
	d->r.cache_key = d->cache_key;
	memset(res, 0, sizeof(*res));
}

/* The context a job's step handlers need later (steps_job_done). */
static json_t *job_ctx(const char *kind, const json_t *spec, const char *workdir, const json_t *inputs,
		       const json_t *run, const char *cache_key)
{
	return json_pack("{s:s, s:O, s:s?, s:O?, s:O?, s:s?}", "kind", kind, "spec", spec,
			 "workdir", workdir, "inputs", inputs, "run", run, "cache_key", cache_key);
}

/* A succeeded job: its outputs, metrics and gate decide how the step ends. */
static void job_succeeded(struct engine *e, int64_t step_id, int64_t run_id, int attempt,
			  const char *name, const char *dir, const json_t *ctx)
{
	struct step_result res;
	struct step_run sr = {
		.conn = e->conn, .home = e->home, .host = e->host, .actor = e->owner,
		.run_id = run_id, .step_id = step_id, .attempt = attempt, .name = name,
		.kind = json_string_value(json_object_get(ctx, "kind")), .dir = dir,
		.workdir = json_string_value(json_object_get(ctx, "workdir")),
		.spec = json_object_get(ctx, "spec"), .inputs = json_object_get(ctx, "inputs"),
		.run = json_object_get(ctx, "run"),
	};
	const char *key = json_string_value(json_object_get(ctx, "cache_key"));

	if (sr.kind == NULL || sr.spec == NULL) {
		push_done(e, step_id, attempt, "succeeded", 0, 0, NULL);
		return;
	}
	if (steps_job_done(&sr, &res) < 0) {
		step_result_dispose(&res);
		res.outcome = "failed";
		res.reason = xstrdup(ferry_error_last());
	}
	if (res.outcome && strcmp(res.outcome, "succeeded") != 0)
		flog_info("run %lld step %s attempt %d: %s", (long long)run_id, name, attempt,
			  res.reason ? res.reason : res.outcome);
	push_result(e, step_id, attempt, &res, key ? xstrdup(key) : NULL, 0);
}

/* Turns a finished job into a queued result and forgets it. */
static void job_finished(struct engine *e, int idx)
{
	struct exec_job *j = &e->jobs[idx];
	int code = -1, sig = 0, have = exec_read_status(j->dir, &code, &sig);
	const char *outcome;
	char *reason = NULL;

	if (j->kill_outcome) {
		outcome = j->kill_outcome;
		reason = j->kill_reason ? xstrdup(j->kill_reason) : NULL;
	} else if (!have) {
		/* counts as a try: a job that signals its own process group takes its supervisor with it */
		outcome = "failed";
		reason = xstrdup("the job's supervisor was killed before it could record the exit status "
				 "(did the job signal its own process group?)");
	} else if (sig) {
		outcome = "failed";
		reason = xasprintf("killed by signal %d (%s)", sig, strsignal(sig));
	} else if (code == 0) {
		outcome = "succeeded";
	} else {
		outcome = "failed";
		reason = xasprintf("exit code %d", code);
	}
	flog_debug("run %lld step %s attempt %d: %s", (long long)j->run_id, j->name, j->attempt, outcome);
	if (strcmp(outcome, "succeeded") == 0)
		job_succeeded(e, j->step_id, j->run_id, j->attempt, j->name, j->dir, j->ctx);
	else
		push_done(e, j->step_id, j->attempt, outcome, have ? code : -1, have ? sig : 0, reason);
	exec_job_dispose(j);
	e->jobs[idx] = e->jobs[--e->njobs];
	e->claim_now = 1; /* room for another job */
}

static int find_job_pid(const struct engine *e, pid_t pid)
{
	for (int i = 0; i < e->njobs; i++)
		if (e->jobs[i].child && e->jobs[i].pid == pid)
			return i;
	return -1;
}

static void reap_children(struct engine *e)
{
	char buf[64];
	pid_t pid;
	int st;

	while (read(wake_pipe[0], buf, sizeof(buf)) > 0)
		;
	while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
		int i = find_job_pid(e, pid);
		if (i >= 0)
			job_finished(e, i);
	}
}

static void check_adopted(struct engine *e, int64_t now)
{
	if (now < e->next_adopt_check)
		return;
	e->next_adopt_check = now + 200;
	for (int i = 0; i < e->njobs;) {
		struct exec_job *j = &e->jobs[i];
		if (!j->child && !exec_pid_alive(j->pid, j->pid_start))
			job_finished(e, i);
		else
			i++;
	}
}

static void kill_job(struct engine *e, struct exec_job *j, const char *outcome, char *reason)
{
	if (j->kill_outcome) {
		free(reason);
		return;
	}
	flog_info("run %lld step %s attempt %d: %s, sending SIGTERM", (long long)j->run_id,
		  j->name, j->attempt, reason);
	j->kill_outcome = outcome;
	j->kill_reason = reason;
	j->kill_at_ms = clock_mono_ms() + e->o.kill_grace_ms;
	exec_signal(j, SIGTERM);
}

static void check_timeouts(struct engine *e, int64_t now)
{
	for (int i = 0; i < e->njobs; i++) {
		struct exec_job *j = &e->jobs[i];
		if (j->kill_outcome == NULL && j->deadline_ms && now >= j->deadline_ms) {
			kill_job(e, j, "failed", xasprintf("timed out after %lld ms (timeout)",
							   (long long)j->timeout_ms));
		} else if (j->kill_outcome && !j->killed_hard && now >= j->kill_at_ms) {
			flog_warn("run %lld step %s attempt %d: still running %lld ms after SIGTERM, sending SIGKILL",
				  (long long)j->run_id, j->name, j->attempt, (long long)e->o.kill_grace_ms);
			exec_signal(j, SIGKILL);
			j->killed_hard = 1;
		}
	}
}

static int db_failed(struct engine *e, int error)
{
	metrics_add(M_DB_ERRORS, 1);
	if (error == FERRY_EDB && PQstatus(e->conn) != CONNECTION_OK) {
		flog_warn("database connection lost: %s", ferry_error_last());
		e->next_reconnect = 0;
	}
	return error;
}

static int flush_done(struct engine *e)
{
	int ready = 0, error;
	int64_t retry = 0, t0;
	struct store_result *v;

	if (e->ndone == 0)
		return FERRY_OK;
	v = xmalloc((size_t)e->ndone * sizeof(*v));
	for (int i = 0; i < e->ndone; i++)
		v[i] = e->done[i].r;
	t0 = clock_mono_us();
	error = store_finish(e->conn, e->owner, v, e->ndone, &ready, &retry);
	metrics_observe(H_FINISH, (double)(clock_mono_us() - t0) / 1e6);
	flog_debug("finished %d attempts in %lld us, %d steps ready", e->ndone,
		   (long long)(clock_mono_us() - t0), ready);
	free(v);
	if (error < 0) {
		flog_error("recording %d finished attempts: %s", e->ndone, ferry_error_last());
		return db_failed(e, error);
	}
	metrics_add(M_STEPS_FINISHED, (uint64_t)e->ndone);
	for (int i = 0; i < e->ndone; i++) {
		free(e->done[i].reason);
		step_result_dispose(&e->done[i].res);
		free(e->done[i].cache_key);
	}
	e->ndone = 0;
	if (ready > 0)
		e->claim_now = 1;
	if (retry > 0 && (e->retry_wall_ms == 0 || retry < e->retry_wall_ms))
		e->retry_wall_ms = retry;
	return FERRY_OK;
}

/*
 * A backlog just appeared. The functions' plans are cached per connection
 * and were likely made while the tables were small; autovacuum analyzes
 * them only on its own schedule. Refresh the statistics now (at most once a
 * minute) so the backlog is worked through with index plans.
 */
static void refresh_statistics(struct engine *e)
{
	int64_t now = clock_mono_ms();
	PGresult *res;

	if (e->last_analyze && now - e->last_analyze < 60000)
		return;
	e->last_analyze = now;
	res = PQexec(e->conn, "ANALYZE steps, step_queue, step_deps, attempts, runs");
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		flog_warn("ANALYZE: %s", PQerrorMessage(e->conn));
	else
		flog_debug("backlog: refreshed statistics in %lld ms", (long long)(clock_mono_ms() - now));
	PQclear(res);
}

/* Keeps dir until the end of this claim (the started-attempts record points at it). */
static const char *keep_dir(struct engine *e, char *dir)
{
	if (e->ndirs == e->capdirs) {
		e->capdirs = e->capdirs ? e->capdirs * 2 : 16;
		e->dirs = xrealloc(e->dirs, (size_t)e->capdirs * sizeof(char *));
	}
	e->dirs[e->ndirs++] = dir;
	return dir;
}

/*
 * A claimed step whose kind or templates need its ancestors: the step
 * handlers run here. Returns 1 when the step is finished (result queued),
 * 0 when its job is to start: c->spec is then the rendered spec and *key
 * the step-cache key to keep a success under (or NULL).
 */
static int prepare(struct engine *e, struct store_claim *c, const char *dir, char **key)
{
	struct step_result res;
	json_t *rendered = NULL, *env = NULL;
	struct step_run sr = {
		.conn = e->conn, .home = e->home, .host = e->host, .actor = e->owner,
		.run_id = c->run_id, .step_id = c->step_id, .attempt = c->attempt, .name = c->name,
		.kind = c->kind, .dir = dir, .workdir = c->workdir, .spec = c->spec,
		.inputs = c->inputs, .run = c->run,
	};
	char *out = xasprintf("%s/out", dir);
	int rc;

	*key = NULL;
	if (mkdir_p(out, 0755) < 0) {
		free(out);
		push_done(e, c->step_id, c->attempt, "failed", -1, 0,
			  xasprintf("cannot create %s: %s", dir, ferry_error_last()));
		return 1;
	}
	free(out);
	rc = steps_prepare(&rendered, &env, key, &res, &sr);
	if (rc != 0) {
		if (rc < 0) {
			step_result_dispose(&res);
			res.outcome = "failed";
			res.reason = xstrdup(ferry_error_last());
		}
		flog_debug("run %lld step %s attempt %d: %s%s%s", (long long)c->run_id, c->name,
			   c->attempt, res.outcome, res.reason ? ": " : "", res.reason ? res.reason : "");
		push_result(e, c->step_id, c->attempt, &res, NULL, -1);
		json_decref(rendered);
		json_decref(env);
		free(*key);
		*key = NULL;
		return 1;
	}
	if (env != NULL) {
		json_t *jenv = json_object_get(rendered, "env");
		if (!json_is_object(jenv))
			json_object_set_new(rendered, "env", jenv = json_object());
		json_object_update(jenv, env);
		json_decref(env);
	}
	json_decref(c->spec);
	c->spec = rendered;
	return 0;
}

static int claim(struct engine *e)
{
	struct store_claim *c = NULL;
	struct store_started *st = NULL;
	int n = 0, nst = 0, room, error;
	int64_t t0;

	room = e->noop ? e->o.claim_batch : e->o.max_jobs - e->njobs;
	if (room <= 0 || e->draining) {
		/* a job that finishes frees room and asks again (job_finished) */
		e->claim_now = 0;
		return FERRY_OK;
	}
	if (room > e->o.claim_batch)
		room = e->o.claim_batch;
	t0 = clock_mono_us();
	error = store_claim(&c, &n, e->conn, e->owner, e->host, room, e->o.lease_ms, e->o.run_filter);
	metrics_observe(H_CLAIM, (double)(clock_mono_us() - t0) / 1e6);
	flog_debug("claimed %d steps in %lld us", n, (long long)(clock_mono_us() - t0));
	if (error < 0) {
		flog_error("claiming ready steps: %s", ferry_error_last());
		return db_failed(e, error);
	}
	metrics_add(M_STEPS_DISPATCHED, (uint64_t)n);
	/* a full batch means there may be more: come back without waiting */
	e->claim_now = n == room;
	if (n == room && n >= 50)
		refresh_statistics(e);
	if (n > 0 && !e->noop)
		st = xcalloc((size_t)n, sizeof(*st));
	e->ndirs = 0;
	for (int i = 0; i < n; i++) {
		struct exec_job *j;
		char *key = NULL;
		if (e->noop) {
			push_done(e, c[i].step_id, c[i].attempt, "succeeded", 0, 0, NULL);
			continue;
		}
		if (c[i].inputs != NULL) {
			char *dir = xasprintf("%s/runs/%lld/%s/%d", e->home, (long long)c[i].run_id,
					      c[i].name, c[i].attempt);
			int done = prepare(e, &c[i], dir, &key);
			if (done) {
				/* the attempt's directory holds what the daemon wrote (a label task's log) */
				st[nst++] = (struct store_started){c[i].step_id, c[i].attempt, 0, 0,
								   keep_dir(e, dir)};
				continue;
			}
			free(dir);
		}
		if (e->njobs == e->capjobs) {
			e->capjobs = e->capjobs ? e->capjobs * 2 : 16;
			e->jobs = xrealloc(e->jobs, (size_t)e->capjobs * sizeof(*e->jobs));
		}
		j = &e->jobs[e->njobs];
		if (exec_local_start(j, &c[i], e->home) < 0) {
			flog_error("run %lld step %s: cannot start: %s", (long long)c[i].run_id,
				   c[i].name, ferry_error_last());
			push_done(e, c[i].step_id, c[i].attempt, "failed", -1, 0,
				  xasprintf("cannot start: %s", ferry_error_last()));
			exec_job_dispose(j);
			free(key);
			continue;
		}
		j->ctx = job_ctx(c[i].kind, c[i].spec, c[i].workdir, c[i].inputs, c[i].run, key);
		free(key);
		flog_debug("run %lld step %s attempt %d: started pid %d", (long long)j->run_id,
			   j->name, j->attempt, (int)j->pid);
		st[nst].step_id = j->step_id;
		st[nst].attempt = j->attempt;
		st[nst].pid = (int)j->pid;
		st[nst].pid_start = j->pid_start;
		st[nst].dir = j->dir;
		nst++;
		e->njobs++;
	}
	if (nst > 0 && (error = store_attempts_started(e->conn, e->owner, st, nst)) < 0)
		flog_error("recording started attempts: %s", ferry_error_last());
	free(st);
	for (int i = 0; i < e->ndirs; i++)
		free(e->dirs[i]);
	e->ndirs = 0;
	store_claims_free(c, n);
	return error < 0 ? db_failed(e, error) : FERRY_OK;
}

static void stop_jobs(struct engine *e)
{
	int64_t *steps = NULL;
	int *atts = NULL, n = 0;

	if (store_stopping(&steps, &atts, &n, e->conn, e->owner) < 0) {
		flog_error("looking for stopped runs: %s", ferry_error_last());
		return;
	}
	e->stop_check = 0;
	for (int k = 0; k < n; k++) {
		for (int i = 0; i < e->njobs; i++) {
			struct exec_job *j = &e->jobs[i];
			if (j->step_id == steps[k] && j->attempt == atts[k])
				kill_job(e, j, "stopped", xstrdup("run stopped"));
		}
	}
	free(steps);
	free(atts);
}

/* Whether another daemon on this host, named by owner "host/pid/start", lives. */
static int owner_alive(const struct engine *e, const char *owner)
{
	const char *a = strchr(owner, '/'), *b;
	int64_t pid, start;
	char *tmp;
	int alive;

	if (a == NULL || (size_t)(a - owner) != strlen(e->host) || strncmp(owner, e->host, strlen(e->host)) != 0)
		return 1; /* another host: trust its lease */
	b = strchr(a + 1, '/');
	if (b == NULL)
		return 0;
	tmp = xstrndup(a + 1, (size_t)(b - a - 1));
	alive = parse_int64(tmp, &pid) == 0 && parse_int64(b + 1, &start) == 0 &&
		exec_pid_alive((pid_t)pid, start);
	free(tmp);
	return alive;
}

static void recover(struct engine *e)
{
	struct store_orphan *o = NULL;
	int n = 0;

	if (store_orphans(&o, &n, e->conn, e->owner, e->host) < 0) {
		flog_error("looking for orphaned attempts: %s", ferry_error_last());
		return;
	}
	for (int i = 0; i < n; i++) {
		int code, sig, taken;
		if (e->o.run_filter && o[i].run_id != e->o.run_filter)
			continue;
		if (!o[i].expired && owner_alive(e, o[i].owner))
			continue;
		taken = store_adopt(e->conn, e->owner, &o[i], e->o.lease_ms);
		if (taken <= 0)
			continue;
		if (strcmp(o[i].host, e->host) == 0 && o[i].dir && exec_read_status(o[i].dir, &code, &sig)) {
			flog_info("run %lld step %s attempt %d finished while its owner %s was gone",
				  (long long)o[i].run_id, o[i].name, o[i].attempt, o[i].owner);
			if (sig || code) {
				push_done(e, o[i].step_id, o[i].attempt, "failed", code, sig,
					  sig ? xasprintf("killed by signal %d", sig) : xasprintf("exit code %d", code));
			} else {
				json_t *ctx = job_ctx(o[i].kind, o[i].spec, o[i].workdir, NULL, NULL, NULL);
				job_succeeded(e, o[i].step_id, o[i].run_id, o[i].attempt, o[i].name, o[i].dir, ctx);
				json_decref(ctx);
			}
		} else if (strcmp(o[i].host, e->host) == 0 && exec_pid_alive(o[i].pid, o[i].pid_start)) {
			struct exec_job *j;
			flog_info("run %lld step %s attempt %d: re-adopted pid %d from %s",
				  (long long)o[i].run_id, o[i].name, o[i].attempt, o[i].pid, o[i].owner);
			if (e->njobs == e->capjobs) {
				e->capjobs = e->capjobs ? e->capjobs * 2 : 16;
				e->jobs = xrealloc(e->jobs, (size_t)e->capjobs * sizeof(*e->jobs));
			}
			j = &e->jobs[e->njobs++];
			memset(j, 0, sizeof(*j));
			j->step_id = o[i].step_id;
			j->run_id = o[i].run_id;
			j->attempt = o[i].attempt;
			j->name = xstrdup(o[i].name);
			j->dir = xstrdup(o[i].dir);
			j->pid = o[i].pid;
			j->pid_start = o[i].pid_start;
			j->timeout_ms = o[i].timeout_ms;
			j->ctx = job_ctx(o[i].kind, o[i].spec, o[i].workdir, NULL, NULL, NULL);
			if (o[i].timeout_ms > 0)
				j->deadline_ms = clock_mono_ms() +
					(o[i].started_ms + o[i].timeout_ms - clock_wall_ms());
		} else {
			flog_warn("run %lld step %s attempt %d lost with its owner %s",
				  (long long)o[i].run_id, o[i].name, o[i].attempt, o[i].owner);
			push_done(e, o[i].step_id, o[i].attempt, "lost", -1, 0,
				  xasprintf("lost: its daemon %s went away (daemon restarted)", o[i].owner));
		}
	}
	store_orphans_free(o, n);
	e->stop_check = 1;
}

static void drain_notifies(struct engine *e)
{
	PGnotify *nt;

	if (PQconsumeInput(e->conn) == 0)
		return;
	while ((nt = PQnotifies(e->conn)) != NULL) {
		if (strcmp(nt->relname, "ferry_ready") == 0)
			e->claim_now = 1;
		else if (strcmp(nt->relname, "ferry_stop") == 0)
			e->stop_check = 1;
		PQfreemem(nt);
	}
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

int engine_tick(struct engine *e, int64_t max_wait_ms)
{
	struct pollfd pfd[2];
	int64_t now = clock_mono_ms(), wait;
	int nfd = 1;

	reap_children(e);
	check_adopted(e, now);
	check_timeouts(e, now);

	if (PQstatus(e->conn) != CONNECTION_OK) {
		if (now < e->next_reconnect) {
			wait = min64(max_wait_ms, e->next_reconnect - now);
			goto sleep;
		}
		e->next_reconnect = now + 1000;
		if (engine_connect(e) < 0) {
			flog_warn("database unreachable, retrying in 1 s: %s", ferry_error_last());
			wait = min64(max_wait_ms, 1000);
			goto sleep;
		}
		flog_info("database connection restored");
	}
	drain_notifies(e);
	if (flush_done(e) < 0)
		goto next;
	if (e->retry_wall_ms && clock_wall_ms() >= e->retry_wall_ms) {
		e->retry_wall_ms = 0;
		e->claim_now = 1;
	}
	if (e->claim_now || now >= e->next_poll) {
		e->next_poll = now + e->o.poll_ms;
		if (claim(e) < 0)
			goto next;
		if (e->noop && flush_done(e) < 0)
			goto next;
	}
	if (now >= e->next_heartbeat) {
		e->next_heartbeat = now + e->o.lease_ms / 3;
		if (e->njobs > 0 && store_heartbeat(e->conn, e->owner, e->o.lease_ms) < 0)
			flog_error("renewing leases: %s", ferry_error_last());
	}
	if (now >= e->next_recover) {
		e->next_recover = now + e->o.lease_ms / 2;
		recover(e);
	}
	if (now >= e->next_waits && !e->noop) {
		int ready = 0;
		e->next_waits = now + 1000;
		if (store_expire_waits(&ready, e->conn, e->owner) < 0)
			flog_error("ending timed-out waits: %s", ferry_error_last());
		else if (ready > 0)
			e->claim_now = 1;
	}
	if (e->stop_check && e->njobs > 0)
		stop_jobs(e);
	else
		e->stop_check = 0;
next:
	now = clock_mono_ms();
	if (e->claim_now || e->ndone > 0) {
		wait = 0;
	} else {
		wait = min64(max_wait_ms, e->next_poll - now);
		wait = min64(wait, e->next_heartbeat - now);
		wait = min64(wait, e->next_recover - now);
		if (e->retry_wall_ms)
			wait = min64(wait, e->retry_wall_ms - clock_wall_ms() + 1);
		for (int i = 0; i < e->njobs; i++) {
			const struct exec_job *j = &e->jobs[i];
			if (!j->child)
				wait = min64(wait, 200);
			if (j->deadline_ms && !j->kill_outcome)
				wait = min64(wait, j->deadline_ms - now);
			if (j->kill_outcome && !j->killed_hard)
				wait = min64(wait, j->kill_at_ms - now);
		}
	}
	if (PQstatus(e->conn) == CONNECTION_OK) {
		pfd[1].fd = PQsocket(e->conn);
		pfd[1].events = POLLIN;
		nfd = 2;
	}
sleep:
	if (wait < 0)
		wait = 0;
	pfd[0].fd = wake_pipe[0];
	pfd[0].events = POLLIN;
	if (poll(pfd, (nfds_t)nfd, (int)wait) < 0 && errno != EINTR)
		flog_error("poll: %s", strerror(errno));
	if (nfd == 2 && (pfd[1].revents & (POLLIN | POLLERR | POLLHUP)))
		drain_notifies(e);
	return PQstatus(e->conn) == CONNECTION_OK ? FERRY_OK : FERRY_EDB;
}

void engine_release(struct engine *e)
{
	reap_children(e);
	flush_done(e);
	if (e->njobs > 0) {
		flog_info("handing %d running job%s over through their leases", e->njobs,
			  e->njobs == 1 ? "" : "s");
		if (store_release(e->conn, e->owner) < 0)
			flog_error("releasing leases: %s", ferry_error_last());
	}
}

/*
 * loadtest — the load-test gate's engine: drive a version's replicas at
 * fixed concurrency levels, measure, and judge the numbers (loadtest.h).
 *
 * Concurrency is held exact with one libcurl multi handle and one easy
 * handle per slot, no threads: a level starts `concurrency` transfers and,
 * each time one completes, starts the next request on the same easy
 * handle before waiting again, so exactly `concurrency` requests are in
 * flight until fewer than that remain. Connections stay open between
 * requests (the multi handle's connection cache, sized for the largest
 * level), so a level measures the server, not TCP set-up. Requests go
 * round-robin over the replicas' URLs by request number. Every request is
 * bounded by timeout_ms, every level by what its requests can take
 * (requests / concurrency + 1 timeouts), and the whole test by max_ms;
 * what is not done by then counts as errors.
 *
 * Latency is curl's total time of a transfer (CURLINFO_TOTAL_TIME_T, in
 * microseconds). Percentiles are exact nearest-rank values over the sorted
 * latencies of the level's successful requests (the value at rank
 * ceil(q * n)), so p50 <= p90 <= p99 <= max always holds and every figure
 * is a latency some request really had; a failed request has no latency
 * worth ranking (a refused connection is fast), it counts in error_rate.
 *
 * Memory is each replica's resident set plus that of its descendants (a
 * replica started through a shell or a supervisor is the process tree
 * below the pid Ferry knows), read from /proc/PID/stat in one pass over
 * /proc. It is sampled at the start and end of each level and every
 * MEM_SAMPLE_MS in between, from the same loop that waits on the sockets
 * (the wait is cut short for a sample), and the largest sum is kept: the
 * peak a level drives a replica to is what decides whether it fits,
 * and a single reading at the end would miss memory freed when the load
 * stops. A container's processes are below its supervisor only for the
 * local executor; elsewhere memory_mb is null when no given pid is read.
 */
#include "deploy/loadtest.h"

#include <ctype.h>
#include <curl/curl.h>
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "plan/gate.h"
#include "lib/util.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define MEM_SAMPLE_MS 100   /* between memory samples during a level */
#define POLL_MAX_MS 100     /* longest wait on the sockets before looking at the clock */
#define LEVEL_SLACK_MS 2000 /* a level's bound beyond what its requests may take */

static const int default_levels[] = {1, 2, 4, 8, 16};

/* The metrics a threshold may name; percent: error_rate only, a fraction. */
static const struct lt_metric {
	const char *name;
	bool fraction;
} lt_metrics[] = {
	{"p50_ms", false}, {"p90_ms", false}, {"p99_ms", false}, {"max_ms", false},
	{"error_rate", true}, {"throughput_rps", false}, {"memory_mb", false},
};

#define METRICS_LIST "p50_ms, p90_ms, p99_ms, max_ms, error_rate, throughput_rps, memory_mb"

/* ---- memory ----------------------------------------------------------- */

struct proc_ent {
	pid_t pid, ppid;
	long rss_pages;
	bool mark;
};

/* Reads pid, ppid and rss (pages) of /proc/PID/stat; false when it is gone. */
static bool proc_stat(const char *pidname, struct proc_ent *e)
{
	char path[64], buf[1024], *p, *end;
	long v[22];
	size_t n;
	int i;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%s/stat", pidname);
	f = fopen(path, "re");
	if (f == NULL)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* the command name may hold spaces and parentheses: fields follow the last ')' */
	p = strrchr(buf, ')');
	if (p == NULL || p[1] != ' ')
		return false;
	p += 2;
	/* field 3 is the state (a letter); then 4 ppid … 24 rss */
	while (*p && *p != ' ')
		p++;
	for (i = 0; i < 21; i++) {
		v[i] = strtol(p, &end, 10);
		if (end == p)
			return false;
		p = end;
	}
	e->ppid = (pid_t)v[0];
	e->rss_pages = v[20];
	e->pid = (pid_t)strtol(pidname, NULL, 10);
	e->mark = false;
	return true;
}

/*
 * The summed RSS in bytes of pids and all their descendants, each process
 * once; -1 when none of pids could be read.
 */
static int64_t rss_tree_bytes(const pid_t *pids, size_t npids)
{
	struct proc_ent *ents = NULL;
	size_t n = 0, cap = 0, i, j;
	struct dirent *d;
	int64_t total = 0;
	bool found = false, grew;
	DIR *dir;

	if (npids == 0 || (dir = opendir("/proc")) == NULL)
		return -1;
	while ((d = readdir(dir)) != NULL) {
		if (!isdigit((unsigned char)d->d_name[0]))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 256;
			ents = xrealloc(ents, cap * sizeof(*ents));
		}
		if (proc_stat(d->d_name, &ents[n]))
			n++;
	}
	closedir(dir);
	for (i = 0; i < n; i++)
		for (j = 0; j < npids; j++)
			if (ents[i].pid == pids[j]) {
				ents[i].mark = true;
				found = true;
			}
	/* descendants: mark children of marked processes until nothing changes */
	do {
		grew = false;
		for (i = 0; i < n; i++) {
			if (ents[i].mark)
				continue;
			for (j = 0; j < n; j++)
				if (ents[j].mark && ents[j].pid == ents[i].ppid) {
					ents[i].mark = grew = true;
					break;
				}
		}
	} while (grew);
	for (i = 0; i < n; i++)
		if (ents[i].mark)
			total += (int64_t)ents[i].rss_pages * sysconf(_SC_PAGESIZE);
	free(ents);
	return found ? total : -1;
}

/* ---- one level -------------------------------------------------------- */

struct level {
	int concurrency, requests;
	int errors;
	int64_t *lat_us;  /* successful requests' latencies */
	size_t nlat;
	int64_t mem_max;  /* bytes; -1 when never read */
	int64_t wall_us;
	char *first_error;
};

struct slot {
	CURL *easy;
	bool busy;
	char errbuf[CURL_ERROR_SIZE];
};

static size_t discard(char *p, size_t size, size_t n, void *ctx)
{
	(void)p;
	(void)ctx;
	return size * n;
}

static void note_error(struct level *lv, char *text)
{
	lv->errors++;
	if (lv->first_error == NULL)
		lv->first_error = text;
	else
		free(text);
}

/* Records how a finished transfer went. */
static void finish(struct level *lv, struct slot *s, CURLcode rc)
{
	curl_off_t us = 0;
	long status = 0;

	if (rc != CURLE_OK) {
		note_error(lv, xasprintf("%s", s->errbuf[0] ? s->errbuf : curl_easy_strerror(rc)));
		return;
	}
	curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &status);
	if (status >= 400 || status < 100) {
		note_error(lv, xasprintf("HTTP %ld", status));
		return;
	}
	curl_easy_getinfo(s->easy, CURLINFO_TOTAL_TIME_T, &us);
	lv->lat_us[lv->nlat++] = (int64_t)us;
}

static void mem_sample(struct level *lv, const struct loadtest_opts *o)
{
	int64_t b = rss_tree_bytes(o->pids, o->pids ? o->npids : 0);

	if (b > lv->mem_max)
		lv->mem_max = b;
}

/* Starts request number k on slot s. */
static int start(CURLM *multi, struct slot *s, const struct loadtest_opts *o, long k)
{
	s->errbuf[0] = '\0';
	curl_easy_setopt(s->easy, CURLOPT_URL, o->urls[(size_t)k % o->nurls]);
	if (curl_multi_add_handle(multi, s->easy) != CURLM_OK) {
		ferry_error_set("load test: curl cannot start a request");
		return FERRY_ERROR;
	}
	s->busy = true;
	return FERRY_OK;
}

/*
 * Runs one level until its requests are done or deadline_ms (monotonic)
 * passes; what is not done then counts as errors.
 */
static int run_level(CURLM *multi, struct slot *slots, const struct loadtest_opts *o,
		     struct level *lv, int64_t deadline_ms)
{
	int64_t t0 = clock_mono_us(), next_sample = clock_mono_ms(), now;
	long issued = 0, done = 0;
	int running, i, pending, wait;
	bool started;
	CURLMsg *msg;

	lv->mem_max = -1;
	lv->lat_us = xcalloc((size_t)lv->requests, sizeof(int64_t));
	for (i = 0; i < lv->concurrency && issued < lv->requests && t0 / 1000 < deadline_ms;
	     i++, issued++)
		if (start(multi, &slots[i], o, issued) < 0)
			return FERRY_ERROR;
	while (done < lv->requests) {
		curl_multi_perform(multi, &running);
		started = false;
		while ((msg = curl_multi_info_read(multi, &pending)) != NULL) {
			struct slot *s;
			char *priv = NULL;

			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
			s = (struct slot *)priv;
			finish(lv, s, msg->data.result);
			curl_multi_remove_handle(multi, s->easy);
			s->busy = false;
			done++;
			if (issued < lv->requests && clock_mono_ms() < deadline_ms) {
				if (start(multi, s, o, issued++) < 0)
					return FERRY_ERROR;
				started = true;
			}
		}
		now = clock_mono_ms();
		if (now >= next_sample) {
			mem_sample(lv, o);
			next_sample = now + MEM_SAMPLE_MS;
		}
		if (now >= deadline_ms)
			break;
		if (done >= lv->requests || started)
			continue; /* perform at once: the new requests go out now */
		wait = (int)(next_sample - now);
		if (wait > POLL_MAX_MS)
			wait = POLL_MAX_MS;
		if (deadline_ms - now < wait)
			wait = (int)(deadline_ms - now);
		curl_multi_poll(multi, NULL, 0, wait < 1 ? 1 : wait, NULL);
	}
	mem_sample(lv, o);
	/* past the deadline: the transfers still out and the requests never sent are errors */
	for (i = 0; i < lv->concurrency; i++)
		if (slots[i].busy) {
			curl_multi_remove_handle(multi, slots[i].easy);
			slots[i].busy = false;
			note_error(lv, xstrdup("the load test's time limit passed before an answer"));
			done++;
		}
	for (; done < lv->requests; done++)
		note_error(lv, xstrdup("not sent: the load test's time limit passed"));
	lv->wall_us = clock_mono_us() - t0;
	return FERRY_OK;
}

/* ---- results ---------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* Milliseconds, rounded to the microsecond. */
static json_t *ms_json(int64_t us)
{
	return json_real((double)us / 1000.0);
}

/* The nearest-rank q-quantile (q in permille) of n sorted values: the one at rank ceil(q n). */
static int64_t quantile(const int64_t *v, size_t n, unsigned q_permille)
{
	size_t rank = ((size_t)q_permille * n + 999) / 1000;

	return v[rank > 0 ? rank - 1 : 0];
}

static json_t *level_json(struct level *lv)
{
	json_t *j;
	double secs = (double)lv->wall_us / 1e6;

	qsort(lv->lat_us, lv->nlat, sizeof(int64_t), cmp_i64);
	j = json_pack("{s:i,s:i,s:i,s:f}", "concurrency", lv->concurrency, "requests", lv->requests,
		      "errors", lv->errors, "error_rate", (double)lv->errors / lv->requests);
	if (lv->nlat > 0) {
		json_object_set_new(j, "p50_ms", ms_json(quantile(lv->lat_us, lv->nlat, 500)));
		json_object_set_new(j, "p90_ms", ms_json(quantile(lv->lat_us, lv->nlat, 900)));
		json_object_set_new(j, "p99_ms", ms_json(quantile(lv->lat_us, lv->nlat, 990)));
		json_object_set_new(j, "max_ms", ms_json(lv->lat_us[lv->nlat - 1]));
	} else {
		json_object_set_new(j, "p50_ms", json_null());
		json_object_set_new(j, "p90_ms", json_null());
		json_object_set_new(j, "p99_ms", json_null());
		json_object_set_new(j, "max_ms", json_null());
	}
	json_object_set_new(j, "throughput_rps",
			    json_real(secs > 0 ? round((double)lv->nlat / secs * 10) / 10 : 0));
	json_object_set_new(j, "memory_mb", lv->mem_max < 0 ? json_null() :
			    json_real(round((double)lv->mem_max / (1024.0 * 1024.0) * 10) / 10));
	json_object_set_new(j, "duration_ms", json_integer(lv->wall_us / 1000));
	if (lv->first_error)
		json_object_set_new(j, "first_error", json_string(lv->first_error));
	return j;
}

static void iso_time(char buf[32], int64_t ms)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	size_t n;

	gmtime_r(&t, &tm);
	n = strftime(buf, 32, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, 32 - n, ".%03dZ", (int)(ms % 1000));
}

static int opts_check(const struct loadtest_opts *o)
{
	size_t i;

	if (o->urls == NULL || o->nurls == 0) {
		ferry_error_set("load test: no replica URL to send requests to");
		return FERRY_EINVALID;
	}
	for (i = 0; i < o->nurls; i++)
		if (o->urls[i] == NULL || *o->urls[i] == '\0') {
			ferry_error_set("load test: replica URL %zu is empty", i + 1);
			return FERRY_EINVALID;
		}
	if (o->body == NULL) {
		ferry_error_set("load test: no sample request; declare `sample` on the deploy step");
		return FERRY_EINVALID;
	}
	if (o->levels != NULL && (o->nlevels == 0 || o->nlevels > LOADTEST_MAX_LEVELS)) {
		ferry_error_set("load test: %zu concurrency levels; give 1-%d", o->nlevels,
				LOADTEST_MAX_LEVELS);
		return FERRY_EINVALID;
	}
	for (i = 0; o->levels != NULL && i < o->nlevels; i++)
		if (o->levels[i] < 1 || o->levels[i] > LOADTEST_MAX_CONCURRENCY) {
			ferry_error_set("load test: concurrency %d is out of range; use 1-%d",
					o->levels[i], LOADTEST_MAX_CONCURRENCY);
			return FERRY_EINVALID;
		}
	if (o->requests < 0 || o->requests > LOADTEST_MAX_REQUESTS) {
		ferry_error_set("load test: %d requests per level; use 1-%d", o->requests,
				LOADTEST_MAX_REQUESTS);
		return FERRY_EINVALID;
	}
	if (o->timeout_ms < 0 || o->max_ms < 0) {
		ferry_error_set("load test: timeouts must be positive");
		return FERRY_EINVALID;
	}
	return FERRY_OK;
}

int loadtest_run(const struct loadtest_opts *o, json_t **result)
{
	const int *levels = o->levels ? o->levels : default_levels;
	size_t nlevels = o->levels ? o->nlevels : NELEM(default_levels), i;
	int requests = o->requests ? o->requests : LOADTEST_REQUESTS, maxc = 0, k;
	int64_t timeout = o->timeout_ms ? o->timeout_ms : LOADTEST_TIMEOUT_MS;
	int64_t t0 = clock_mono_ms(), wall0 = clock_wall_ms(), end, lim;
	struct curl_slist *headers = NULL;
	struct slot *slots = NULL;
	CURLM *multi = NULL;
	json_t *res = NULL, *arr;
	char when[32];
	int error;

	*result = NULL;
	if ((error = opts_check(o)) < 0)
		return error;
	end = t0 + (o->max_ms ? o->max_ms : LOADTEST_MAX_MS);
	for (i = 0; i < nlevels; i++)
		maxc = levels[i] > maxc ? levels[i] : maxc;
	error = FERRY_ERROR;
	multi = curl_multi_init();
	headers = curl_slist_append(NULL, "Content-Type: application/json");
	headers = curl_slist_append(headers, "Expect:"); /* no 100-continue round trip */
	if (multi == NULL || headers == NULL) {
		ferry_error_set("load test: curl cannot be set up");
		goto out;
	}
	curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long)maxc + (long)o->nurls);
	slots = xcalloc((size_t)maxc, sizeof(*slots));
	for (k = 0; k < maxc; k++) {
		struct slot *s = &slots[k];

		if ((s->easy = curl_easy_init()) == NULL) {
			ferry_error_set("load test: curl cannot be set up");
			goto out;
		}
		curl_easy_setopt(s->easy, CURLOPT_PRIVATE, (char *)s);
		curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, o->body);
		curl_easy_setopt(s->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(o->body));
		curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, headers);
		curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, discard);
		curl_easy_setopt(s->easy, CURLOPT_TIMEOUT_MS, (long)timeout);
		curl_easy_setopt(s->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout);
		curl_easy_setopt(s->easy, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(s->easy, CURLOPT_ERRORBUFFER, s->errbuf);
		curl_easy_setopt(s->easy, CURLOPT_PROTOCOLS_STR, "http,https");
	}
	res = json_object();
	arr = json_array();
	json_object_set_new(res, "levels", arr);
	for (i = 0; i < nlevels; i++) {
		struct level lv = {.concurrency = levels[i], .requests = requests};

		/* a level may take what its requests can: requests / concurrency rounds, plus one */
		lim = clock_mono_ms() + (requests / lv.concurrency + 1) * timeout + LEVEL_SLACK_MS;
		error = run_level(multi, slots, o, &lv, lim < end ? lim : end);
		if (error == 0)
			json_array_append_new(arr, level_json(&lv));
		free(lv.lat_us);
		free(lv.first_error);
		if (error < 0)
			goto out;
	}
	iso_time(when, wall0);
	json_object_set_new(res, "replicas", json_integer((json_int_t)o->nurls));
	json_object_set_new(res, "started_at", json_string(when));
	json_object_set_new(res, "duration_ms", json_integer(clock_mono_ms() - t0));
	*result = res;
	res = NULL;
	error = FERRY_OK;
out:
	for (k = 0; slots != NULL && k < maxc; k++)
		if (slots[k].easy) {
			if (slots[k].busy)
				curl_multi_remove_handle(multi, slots[k].easy);
			curl_easy_cleanup(slots[k].easy);
		}
	free(slots);
	if (multi)
		curl_multi_cleanup(multi);
	curl_slist_free_all(headers);
	json_decref(res);
	return error;
}

/* ---- thresholds ------------------------------------------------------- */

static const struct lt_metric *lt_metric(const char *name)
{
	size_t i;

	for (i = 0; i < NELEM(lt_metrics); i++)
		if (strcmp(name, lt_metrics[i].name) == 0)
			return &lt_metrics[i];
	return NULL;
}

/* Parses and range-checks one comparison of metric m. */
static int parse_threshold(struct gate_expr *e, const struct lt_metric *m, const char *expr)
{
	char *what = xasprintf("load_test %s", m->name), num[GATE_NUMBUF];
	int error;

	error = gate_expr_parse(e, what, expr, GATE_EXPR_FACTOR | GATE_EXPR_PERCENT);
	if (error < 0)
		goto out;
	error = FERRY_EINVALID;
	if (e->percent && !m->fraction) {
		ferry_error_set("%s \"%s\": %% is for error_rate only; %s is not a fraction", what,
				expr, m->name);
		goto out;
	}
	if (!e->production && e->value < 0) {
		ferry_error_set("%s \"%s\": %s is negative; %s is 0 or more", what, expr,
				gate_num(num, e->value), m->name);
		goto out;
	}
	if (!e->production && m->fraction && e->value > 1) {
		ferry_error_set("%s \"%s\": %s is more than 100%%; write the rate as a fraction "
				"(0.001) or a percentage (0.1%%)", what, expr, gate_num(num, e->value));
		goto out;
	}
	error = FERRY_OK;
out:
	free(what);
	return error;
}

/* Calls fn on every comparison of thresholds after validating it; stops at a negative return. */
static int each_threshold(const json_t *thresholds,
			  int (*fn)(void *ctx, const struct lt_metric *m, const struct gate_expr *e),
			  void *ctx)
{
	const struct lt_metric *m;
	struct gate_expr e;
	const char *key;
	json_t *v, *item;
	size_t i;
	int error;

	if (!json_is_object(thresholds)) {
		ferry_error_set("load_test thresholds must be an object of metric: \"OP VALUE\", "
				"e.g. {\"p99_ms\": \"< 50\"}");
		return FERRY_EINVALID;
	}
	json_object_foreach((json_t *)thresholds, key, v) {
		if ((m = lt_metric(key)) == NULL) {
			ferry_error_set("load_test: unknown metric \"%.64s\"; use " METRICS_LIST, key);
			return FERRY_EINVALID;
		}
		if (!json_is_string(v) && (!json_is_array(v) || json_array_size(v) == 0)) {
			ferry_error_set("load_test %s: expected a comparison such as \"< 50\" or a "
					"list of them", key);
			return FERRY_EINVALID;
		}
		for (i = 0; i < (json_is_array(v) ? json_array_size(v) : 1); i++) {
			item = json_is_array(v) ? json_array_get(v, i) : v;
			if (!json_is_string(item)) {
				ferry_error_set("load_test %s: item %zu is not a string; write comparisons "
						"such as \"< 50\"", key, i + 1);
				return FERRY_EINVALID;
			}
			if ((error = parse_threshold(&e, m, json_string_value(item))) < 0)
				return error;
			if (fn != NULL && (error = fn(ctx, m, &e)) < 0)
				return error;
		}
	}
	return FERRY_OK;
}

int loadtest_thresholds_check(const json_t *thresholds)
{
	return each_threshold(thresholds, NULL, NULL);
}

/* ---- judging ---------------------------------------------------------- */

struct judge {
	const json_t *levels, *prod_levels;
	bool have_prod;
	json_t *verdicts;
	char *reason;
};

/* A measured value as it reads in a reason: "73.2", "0.734", "2.0%". */
static const char *value_text(char buf[GATE_NUMBUF], const struct lt_metric *m, double v)
{
	double x = m->fraction ? v * 100 : v;
	const char *pct = m->fraction ? "%" : "";

	if (x == 0 || fabs(x) >= 0.1)
		snprintf(buf, GATE_NUMBUF, "%.1f%s", x, pct);
	else
		snprintf(buf, GATE_NUMBUF, "%.2g%s", x, pct);
	return buf;
}

/* A threshold as the user wrote it: "50", "0.1%" (12 digits: 0.001 * 100 is 0.1). */
static const char *threshold_text(char buf[GATE_NUMBUF], const struct lt_metric *m, double t)
{
	if (!m->fraction)
		return gate_num(buf, t);
	snprintf(buf, GATE_NUMBUF, "%.12g%%", t * 100);
	return buf;
}

/* The level of production with this concurrency, or NULL. */
static const json_t *prod_level(const json_t *prod_levels, json_int_t c)
{
	const json_t *l;
	size_t i;

	json_array_foreach(prod_levels, i, l)
		if (json_integer_value(json_object_get(l, "concurrency")) == c)
			return l;
	return NULL;
}

/* How far past its threshold v is (positive or zero when it fails, for most ops). */
static double margin(const char *op, double v, double t)
{
	if (op[0] == '<')
		return v - t;
	if (op[0] == '>')
		return t - v;
	if (op[0] == '=')
		return fabs(v - t);
	return -fabs(v - t);
}

static void append_reason(char **reason, const char *text)
{
	char *r = *reason ? xasprintf("%s; %s", *reason, text) :
		xasprintf("load test failed: %s", text);

	free(*reason);
	*reason = r;
}

/* A level a comparison was made at: the candidate for the verdict's worst level. */
struct pick {
	const json_t *level; /* NULL: none yet */
	double margin, value, threshold, production;
	bool no_value;       /* no successful request: no latency to compare */
};

static void pick_keep(struct pick *k, const json_t *lv, double mg, double v, double t, double p,
		      bool no_value)
{
	/* ties go to the later level, usually the higher concurrency */
	if (k->level != NULL && mg < k->margin)
		return;
	*k = (struct pick){lv, mg, v, t, p, no_value};
}

/* The failure text of comparison e at the worst level k (the caller frees it). */
static char *failure_text(const struct lt_metric *m, const struct gate_expr *e, const struct pick *k)
{
	char nv[GATE_NUMBUF], nt[GATE_NUMBUF], np[GATE_NUMBUF], nf[GATE_NUMBUF];
	long long c = (long long)json_integer_value(json_object_get(k->level, "concurrency"));

	if (k->no_value)
		return xasprintf("%s: no successful request at concurrency %lld", m->name, c);
	value_text(nv, m, k->value);
	if (!e->production)
		return xasprintf("%s %s %s %s at concurrency %lld", m->name, nv, e->negated,
				 threshold_text(nt, m, k->threshold), c);
	value_text(np, m, k->production);
	value_text(nt, m, k->threshold);
	if (e->factor != 1)
		return xasprintf("%s %s %s production %s * %s = %s at concurrency %lld", m->name, nv,
				 e->negated, np, gate_num(nf, e->factor), nt, c);
	if (e->offset != 0)
		return xasprintf("%s %s %s production %s %c %s = %s at concurrency %lld", m->name, nv,
				 e->negated, np, e->offset < 0 ? '-' : '+',
				 threshold_text(nf, m, fabs(e->offset)), nt, c);
	return xasprintf("%s %s %s production %s at concurrency %lld", m->name, nv, e->negated,
			 np, c);
}

/* Judges one comparison at every level; appends its verdict and, when it fails, the reason. */
static int judge_one(void *ctx, const struct lt_metric *m, const struct gate_expr *e)
{
	struct judge *J = ctx;
	struct pick any = {0}, fail = {0}, *k;
	const char *note = NULL;
	const json_t *lv;
	char *text;
	json_t *r;
	size_t i;

	json_array_foreach(J->levels, i, lv) {
		const json_t *jv = json_object_get(lv, m->name), *pl;
		double v, t = e->value, p = NAN, mg;

		if (e->production) {
			if (!J->have_prod) {
				note = "no production load test yet";
				continue;
			}
			pl = prod_level(J->prod_levels, json_integer_value(json_object_get(lv, "concurrency")));
			if (!json_is_number(json_object_get(pl, m->name))) {
				note = "production has no such figure at some levels; not compared there";
				continue;
			}
			p = json_number_value(json_object_get(pl, m->name));
			t = gate_threshold(p, e->offset, e->factor);
		}
		if (!json_is_number(jv)) {
			if (strcmp(m->name, "memory_mb") == 0) {
				note = "memory not measured (no replica process could be read)";
				continue;
			}
			/* no successful request, so no latency: the worst a level can be */
			pick_keep(&fail, lv, INFINITY, NAN, t, p, true);
			continue;
		}
		v = json_number_value(jv);
		mg = margin(e->op, v, t);
		if (!gate_compare(v, e->op, t))
			pick_keep(&fail, lv, mg, v, t, p, false);
		pick_keep(&any, lv, mg, v, t, p, false);
	}
	k = fail.level != NULL ? &fail : &any;
	r = json_pack("{s:s,s:s,s:n,s:n,s:n,s:b}", "metric", m->name, "op", e->op, "threshold",
		      "level", "value", "passed", fail.level == NULL);
	if (k->level != NULL) {
		json_object_set_new(r, "level", json_integer(json_integer_value(
			json_object_get(k->level, "concurrency"))));
		json_object_set_new(r, "threshold", json_real(k->threshold));
		if (!k->no_value)
			json_object_set_new(r, "value", json_real(k->value));
	} else if (!e->production) {
		json_object_set_new(r, "threshold", json_real(e->value));
	}
	if (e->production) {
		json_object_set_new(r, "against", json_string("production"));
		json_object_set_new(r, "production", k->level != NULL && !isnan(k->production) ?
				    json_real(k->production) : json_null());
		json_object_set_new(r, "factor", json_real(e->factor));
		json_object_set_new(r, "offset", json_real(e->offset));
	}
	if (k->no_value)
		note = "no successful request at this level";
	if (note != NULL)
		json_object_set_new(r, "note", json_string(note));
	json_array_append_new(J->verdicts, r);
	if (fail.level == NULL)
		return 0;
	text = failure_text(m, e, &fail);
	append_reason(&J->reason, text);
	free(text);
	return 0;
}

int loadtest_judge(json_t **verdicts, char **reason, const json_t *thresholds,
		   const json_t *result, const json_t *production)
{
	struct judge J = {0};
	const json_t *l;
	size_t i;
	int error;

	*verdicts = NULL;
	*reason = NULL;
	J.levels = json_object_get(result, "levels");
	if (!json_is_array(J.levels) || json_array_size(J.levels) == 0) {
		ferry_error_set("load test result: no levels to judge");
		return FERRY_EINVALID;
	}
	json_array_foreach(J.levels, i, l)
		if (!json_is_integer(json_object_get(l, "concurrency"))) {
			ferry_error_set("load test result: level %zu has no concurrency", i + 1);
			return FERRY_EINVALID;
		}
	J.have_prod = production != NULL && !json_is_null(production);
	J.prod_levels = J.have_prod ? json_object_get(production, "levels") : NULL;
	if (J.have_prod && !json_is_array(J.prod_levels)) {
		ferry_error_set("production load test result: no levels");
		return FERRY_EINVALID;
	}
	if ((error = loadtest_thresholds_check(thresholds)) < 0)
		return error;
	J.verdicts = json_array();
	each_threshold(thresholds, judge_one, &J);
	*verdicts = J.verdicts;
	*reason = J.reason;
	return J.reason == NULL ? 1 : 0;
}

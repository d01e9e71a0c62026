/*
 * monitor — see monitor.h and monitor.md. One struct mon_job per attempt
 * of this daemon that runs a job, found by (step, attempt) each round
 * (the engine's job array moves its entries, so nothing points into it
 * between rounds) and dropped when its job is no longer there.
 *
 * A round, for each job due: one look (exec sample, log size, heartbeat
 * and phase files, utilization from the CPU time or the GPU sampler),
 * fed to the hang rule; the metrics file followed for the watchpoints;
 * the low-utilization rule of train steps; the attempt's row written when
 * its state changed and at most once a second otherwise. A job declared
 * hung gets its evidence collected on the pool first; the action follows
 * when that item comes back, so the evidence is of the hung job, not of
 * its killing.
 */
#include "monitor/monitor.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plan/config.h"
#include "plan/kind.h"
#include "monitor/demand.h"
#include "monitor/evidence.h"
#include "monitor/gpu.h"
#include "monitor/hang.h"
#include "lib/jobfile.h"
#include "lib/metrics.h"
#include "store/store_monitor.h"
#include "lib/util.h"
#include "monitor/watchpoints.h"
#include "lib/webhook.h"

#define SAMPLES_KEPT 120        /* per attempt, in its row */
#define EVENT_SAMPLES 12        /* the last samples an event carries */
#define LU_POINTS 256           /* utilization points of the low-utilization window */
#define WRITE_EVERY_MS 1000     /* an attempt's row at most this often while nothing changes */
#define RESTARTS_MAX 3          /* restarts in a row for one cause, then the step fails */
#define EVIDENCE_TIMEOUT_MS 5000  /* per process: at most 16 stacks are collected */
#define EVIDENCE_LOG_LINES 20

struct lowutil_cfg {
	int64_t window_ms, every_ms;
	double below;
};

struct mon_job {
	int64_t step_id, run_id;
	int attempt;
	char *name, *dir, *log, *visible;
	int trains;             /* its kind trains a model (SKF_TRAINS): the low-utilization rule applies */
	struct hang_cfg cfg;
	struct hang_det det;
	struct demand demand;         /* its threads' runnable time at the last look */
	struct watch *watch;          /* follows its metrics file (rules, series, lines for the cadence) */
	double cpus;
	int gpus;
	int64_t next_ms, last_write_ms, start_ms;
	int64_t prev_t, prev_cpu, prev_io;
	int have_prev;
	double util, io_rate;         /* the last look's */
	json_t *samples;              /* the last SAMPLES_KEPT */
	json_t *gpus_now;             /* per GPU, when it has any */
	enum hang_state written;
	int written_once;
	int seen;                     /* the round that last found its job */
	int busy;                     /* its evidence is being collected */
	int acted;                    /* a kill was asked: nothing more to judge */
	int dirty;                    /* something to write now (a rule fired) */
	int marks;                    /* its metrics file or heartbeat has been seen */
	int64_t marks_checked_ms;     /* … last looked for (at most once a second) */
	struct {
		int64_t t;
		double u;
	} lu[LU_POINTS];
	int lu_n, lu_head;
	int64_t lu_warned_ms;
};

struct monitor {
	char *owner;
	struct monitor_host host;
	struct hang_cfg base;
	struct lowutil_cfg lowutil;
	struct gpu_sampler *gpu;
	struct mon_job **jobs;
	int njobs, capjobs;
	int round;
	int off;                      /* FERRY_MONITOR=off: nothing is sampled */
	PGconn *conn;                 /* the engine's, as of the last round (for items coming back) */
};

/* The pool's items: evidence of a hung job, or an alert to post. */
enum { MW_EVIDENCE, MW_ALERT };
struct mon_work {
	struct work w;
	int what;
	struct monitor *m;
	int64_t step_id;
	int attempt;
	/* MW_EVIDENCE */
	int *pids;
	int npids;
	char *log;
	const char *prefix;           /* the reason's prefix of this cause ("hung: ") */
	json_t *evidence;             /* the result */
	int restarts;                 /* … and the restarts in a row before this attempt */
	/* MW_ALERT */
	char *url;
	json_t *body;
};

static void mon_work_run(struct work *w, PGconn *conn);

/* ---- settings ------------------------------------------------------------ */

static int lowutil_parse(struct lowutil_cfg *c, const char *text)
{
	char *copy, *save = NULL, *item;
	int error = FERRY_OK;

	c->window_ms = 600000;
	c->every_ms = 3600000;
	c->below = 50;
	if (text == NULL || *text == '\0')
		return FERRY_OK;
	copy = xstrdup(text);
	for (item = strtok_r(copy, ",", &save); item && error == FERRY_OK; item = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(item, '='), *end = NULL;
		int64_t ms;
		if (eq == NULL) {
			ferry_error_set("FERRY_LOW_UTIL: \"%s\" is not KEY=VALUE (window, every, below)", item);
			error = FERRY_EINVALID;
			break;
		}
		*eq++ = '\0';
		if (strcmp(item, "below") == 0) {
			c->below = strtod(eq, &end);
			if (end == eq || *end != '\0' || c->below < 0 || c->below > 100) {
				ferry_error_set("FERRY_LOW_UTIL: below \"%s\" must be a percentage from 0 to 100", eq);
				error = FERRY_EINVALID;
			}
		} else if ((strcmp(item, "window") == 0 || strcmp(item, "every") == 0) &&
			   duration_parse(eq, &ms) == 0) {
			*(item[0] == 'w' ? &c->window_ms : &c->every_ms) = ms;
		} else {
			ferry_error_set("FERRY_LOW_UTIL: %s \"%s\": the settings are window and every (durations) "
					"and below (a percentage)", item, eq);
			error = FERRY_EINVALID;
		}
	}
	free(copy);
	return error;
}

int monitor_new(struct monitor **out, const char *owner, const struct monitor_host *host)
{
	struct monitor *m = xcalloc(1, sizeof(*m));
	const char *env = getenv("FERRY_HANG");

	*out = NULL;
	hang_cfg_default(&m->base);
	if (env && *env) {
		json_t *obj = hang_cfg_parse_text(env);
		int error = obj ? hang_cfg_apply(&m->base, obj) : FERRY_EINVALID;
		json_decref(obj);
		if (error < 0) {
			free(m);
			return FERRY_EINVALID;
		}
	}
	if (lowutil_parse(&m->lowutil, getenv("FERRY_LOW_UTIL")) < 0) {
		free(m);
		return FERRY_EINVALID;
	}
	m->owner = xstrdup(owner);
	m->host = *host;
	m->off = getenv("FERRY_MONITOR") && strcmp(getenv("FERRY_MONITOR"), "off") == 0;
	m->gpu = gpu_sampler_new();
	*out = m;
	return FERRY_OK;
}

static void job_free(struct mon_job *mj)
{
	free(mj->name), free(mj->dir), free(mj->log), free(mj->visible);
	watch_free(mj->watch);
	json_decref(mj->samples);
	json_decref(mj->gpus_now);
	free(mj);
}

void monitor_free(struct monitor *m)
{
	if (m == NULL)
		return;
	for (int i = 0; i < m->njobs; i++)
		job_free(m->jobs[i]);
	free(m->jobs);
	gpu_sampler_free(m->gpu);
	metrics_set_gauges(NULL);
	free(m->owner);
	free(m);
}

/* ---- one attempt ----------------------------------------------------------- */

static struct mon_job *job_find(struct monitor *m, int64_t step_id, int attempt)
{
	for (int i = 0; i < m->njobs; i++)
		if (m->jobs[i]->step_id == step_id && m->jobs[i]->attempt == attempt)
			return m->jobs[i];
	return NULL;
}

static struct mon_job *job_new(struct monitor *m, const struct exec_job *j, int64_t now)
{
	struct mon_job *mj = xcalloc(1, sizeof(*mj));
	const json_t *spec = json_object_get(j->ctx, "spec");
	const json_t *res = json_object_get(spec, "resources"), *env = json_object_get(spec, "env");
	const char *vis = json_string_value(json_object_get(env, "CUDA_VISIBLE_DEVICES"));
	json_t *watch = json_object_get(spec, "watch");
	const char *kind;
	const struct step_kind *k;

	mj->step_id = j->step_id;
	mj->run_id = j->run_id;
	mj->attempt = j->attempt;
	mj->name = xstrdup(j->name ? j->name : "");
	kind = json_string_value(json_object_get(j->ctx, "kind"));
	k = kind ? step_kind_find(kind) : step_kind_default();
	mj->trains = k != NULL && (k->flags & SKF_TRAINS);
	mj->dir = xstrdup(j->dir);
	mj->log = j->type->log_path ? j->type->log_path(j) : NULL;
	mj->visible = vis ? xstrdup(vis) : NULL;
	mj->cpus = json_number_value(json_object_get(res, "cpus"));
	mj->gpus = (int)json_integer_value(json_object_get(res, "gpus"));
	mj->cfg = m->base;
	/* the step's settings were checked when the workflow was; a bad one here keeps the daemon's */
	if (hang_cfg_apply(&mj->cfg, json_object_get(spec, "hang")) < 0)
		flog_warn("run %lld step %s: hang settings: %s", (long long)mj->run_id, mj->name, ferry_error_last());
	/* every job's metrics file is followed: the series, and the lines' cadence; rules where it has them */
	if (watch_new(&mj->watch, json_object_size(watch) > 0 ? watch : NULL) < 0) {
		flog_warn("run %lld step %s: watch: %s", (long long)mj->run_id, mj->name, ferry_error_last());
		if (watch_new(&mj->watch, NULL) < 0)
			mj->watch = NULL;
	}
	demand_init(&mj->demand);
	hang_det_init(&mj->det, now);
	mj->start_ms = mj->next_ms = now;
	mj->samples = json_array();
	if (m->njobs == m->capjobs)
		m->jobs = xrealloc(m->jobs, (size_t)(m->capjobs = m->capjobs ? 2 * m->capjobs : 16) *
					    sizeof(*m->jobs));
	m->jobs[m->njobs++] = mj;
	return mj;
}

static int64_t file_size(const char *path)
{
	struct stat sb;
	return path && stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

static int64_t file_mtime_ns(const char *dir, const char *name)
{
	char *p = xasprintf("%s/%s", dir, name);
	struct stat sb;
	int64_t ns = stat(p, &sb) == 0 ? (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec : -1;

	free(p);
	return ns;
}

/* The phase the job declared in DIR/phase: its first word, lower case; "" when none. */
/* The phases a job may write that mean "nothing declared" (phase names, not kinds). */
static const char *const ordinary_phases[] = {"train", "run"};

static void read_phase(const char *dir, char *out, size_t cap)
{
	char buf[64];
	int fd = jobfile_open(dir, "phase", NULL); /* the job's file: never a link, never waited on */
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	size_t k = 0, i = 0;

	if (fd >= 0)
		close(fd);
	out[0] = '\0';
	if (n <= 0)
		return;
	buf[n] = '\0';
	while (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n')
		i++;
	for (; buf[i] && k + 1 < cap; i++) {
		char c = buf[i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
			break;
		out[k++] = c;
	}
	out[k] = '\0';
	/* "train" (or "run") is the ordinary phase: nothing declared */
	for (size_t o = 0; o < sizeof(ordinary_phases) / sizeof(ordinary_phases[0]); o++)
		if (strcmp(out, ordinary_phases[o]) == 0)
			out[0] = '\0';
}

static void post_alert(struct monitor *m, const struct mon_job *mj, const char *kind, const json_t *detail)
{
	const char *url = getenv("FERRY_NOTIFY_WEBHOOK");
	struct mon_work *w;

	if (url == NULL || *url == '\0')
		return;
	w = xcalloc(1, sizeof(*w));
	w->w.run = mon_work_run;
	w->what = MW_ALERT;
	w->m = m;
	w->url = xstrdup(url);
	w->body = json_pack("{s:s,s:I,s:s,s:i,s:O}", "event", kind, "run", (json_int_t)mj->run_id, "step",
			    mj->name, "attempt", mj->attempt, "detail", detail);
	m->host.submit(m->host.arg, &w->w);
}

/* An event recorded: said in the log and posted as an alert (detail taken). */
static void tell(struct monitor *m, const struct mon_job *mj, const char *kind, json_t *detail)
{
	flog_info("run %lld step %s attempt %d: %s: %s", (long long)mj->run_id, mj->name, mj->attempt, kind,
		  json_string_value(json_object_get(detail, "message")) ?
			  json_string_value(json_object_get(detail, "message")) : "");
	post_alert(m, mj, kind, detail);
	json_decref(detail);
}

/* Records event kind of mj with detail (taken) and posts it. */
static void event(struct monitor *m, PGconn *conn, const struct mon_job *mj, const char *kind, json_t *detail)
{
	if (store_monitor_event(conn, mj->run_id, mj->name, mj->attempt, m->owner, kind, detail) < 0)
		flog_error("run %lld step %s: recording %s: %s", (long long)mj->run_id, mj->name, kind,
			   ferry_error_last());
	tell(m, mj, kind, detail);
}

/* The last n samples of mj (a new array). */
static json_t *last_samples(const struct mon_job *mj, size_t n)
{
	json_t *out = json_array();
	size_t len = json_array_size(mj->samples);

	for (size_t i = len > n ? len - n : 0; i < len; i++)
		json_array_append(out, json_array_get(mj->samples, i));
	return out;
}

/* mj's row (with its evidence when not NULL) and, kind not NULL, event kind (detail, not taken) with it. */
static void write_row_event(struct monitor *m, PGconn *conn, struct mon_job *mj, const json_t *evidence, int64_t now,
			    const char *kind, const json_t *detail)
{
	json_t *config = mj->written_once ? NULL : hang_cfg_json(&mj->cfg);
	json_t *series = mj->watch ? watch_series_json(mj->watch) : NULL;
	json_t *watch = mj->watch ? watch_results_json(mj->watch) : NULL;
	struct store_monitor_row f = {
		.step_id = mj->step_id, .run_id = mj->run_id, .attempt = mj->attempt,
		.state = hang_state_name(mj->det.state), .why = mj->det.why,
		.phase = mj->det.phase[0] ? mj->det.phase : NULL, .config = config, .samples = mj->samples,
		.gpus = mj->gpus_now, .series = series, .watch = watch, .evidence = evidence,
	};

	if ((kind ? store_monitor_put_event(conn, &f, mj->name, m->owner, kind, detail) : store_monitor_put(conn, &f)) < 0)
		flog_error("run %lld step %s: writing its monitor row%s%s: %s", (long long)mj->run_id, mj->name,
			   kind ? " and " : "", kind ? kind : "", ferry_error_last());
	else
		mj->written_once = 1;
	mj->written = mj->det.state;
	mj->last_write_ms = now;
	mj->dirty = 0;
	json_decref(config), json_decref(series), json_decref(watch);
}

static void write_row(struct monitor *m, PGconn *conn, struct mon_job *mj, const json_t *evidence, int64_t now)
{
	write_row_event(m, conn, mj, evidence, now, NULL, NULL);
}

/* Restart or fail attempt mj for cause prefix ("hung: ", "watchpoint: "), given the restarts in a row before it. */
static void act(struct monitor *m, struct mon_job *mj, int restart, int restarts, const char *prefix,
		const char *why)
{
	mj->acted = 1;
	if (restart && restarts < RESTARTS_MAX)
		m->host.kill(m->host.arg, mj->step_id, mj->attempt, OUTCOME_RESTART, 0,
			     xasprintf("%s%s (restart %d of %d)", prefix, why, restarts + 1, RESTARTS_MAX));
	else if (restart)
		m->host.kill(m->host.arg, mj->step_id, mj->attempt, OUTCOME_FAILED, 1,
			     xasprintf("%s%s (restarted %d times in a row; giving up)", prefix, why, restarts));
	else
		m->host.kill(m->host.arg, mj->step_id, mj->attempt, OUTCOME_FAILED, 1,
			     xasprintf("%s%s", prefix, why));
}

/* The job was declared hung: its evidence is collected on the pool, the action follows (monitor_work_done). */
static void hung(struct monitor *m, struct mon_job *mj, const struct exec_job *j)
{
	struct mon_work *w = xcalloc(1, sizeof(*w));

	w->w.run = mon_work_run;
	w->what = MW_EVIDENCE;
	w->m = m;
	w->step_id = mj->step_id;
	w->attempt = mj->attempt;
	w->prefix = "hung: ";
	w->log = mj->log ? xstrdup(mj->log) : NULL;
	if (j->type->pids == NULL || j->type->pids(j, &w->pids, &w->npids) < 0) {
		free(w->pids);
		w->pids = NULL;
		w->npids = 0;
	}
	mj->busy = 1;
	m->host.submit(m->host.arg, &w->w);
}

static void watch_fired(struct monitor *m, PGconn *conn, struct mon_job *mj)
{
	struct wp_fired f;

	while (!mj->acted && watch_take_fired(mj->watch, &f) == 1) {
		json_t *d = json_pack("{s:s,s:s,s:s,s:s,s:I}", "metric", f.metric, "rule", f.rule, "message",
				      f.message, "action", wp_action_name(f.action), "step", (json_int_t)f.step);
		int restarts = 0;

		json_object_set_new(d, "value", isfinite(f.value) ? json_real(f.value) : json_string(
					    isnan(f.value) ? "NaN" : f.value > 0 ? "Infinity" : "-Infinity"));
		event(m, conn, mj, "monitor.watch", d);
		mj->dirty = 1;
		if (f.action == WP_NOTIFY)
			continue;
		if (f.action == WP_RESTART &&
		    store_monitor_restarts(&restarts, conn, mj->step_id, mj->attempt, "watchpoint: ") < 0)
			flog_error("counting restarts: %s", ferry_error_last());
		act(m, mj, f.action == WP_RESTART, restarts, "watchpoint: ", f.message);
	}
}

/* A train step whose mean utilization stayed below the mark over the window: a warning, at most every `every`. */
static void lowutil(struct monitor *m, PGconn *conn, struct mon_job *mj, int64_t now)
{
	const struct lowutil_cfg *c = &m->lowutil;
	double sum = 0;
	int n = 0;

	if (!mj->trains || mj->util < 0 || now - mj->start_ms < mj->cfg.warmup_ms)
		return;
	mj->lu[mj->lu_head].t = now;
	mj->lu[mj->lu_head].u = mj->util;
	mj->lu_head = (mj->lu_head + 1) % LU_POINTS;
	if (mj->lu_n < LU_POINTS)
		mj->lu_n++;
	/* judged once a whole window after the warm-up has been seen */
	if (now - (mj->start_ms + mj->cfg.warmup_ms) < c->window_ms)
		return;
	if (mj->lu_warned_ms && now - mj->lu_warned_ms < c->every_ms)
		return;
	for (int i = 0; i < mj->lu_n; i++) {
		int k = (mj->lu_head - 1 - i + LU_POINTS) % LU_POINTS;
		if (mj->lu[k].t < now - c->window_ms)
			break;
		sum += mj->lu[k].u;
		n++;
	}
	if (n == 0 || sum / n >= c->below)
		return;
	mj->lu_warned_ms = now;
	{
		double mean = sum / n;
		char *msg = xasprintf("mean %s utilization %.1f%% over the last %lld s is below %.0f%%",
				      mj->gpus_now ? "GPU" : "CPU", mean, (long long)(c->window_ms / 1000), c->below);
		json_t *d = json_pack("{s:s,s:f,s:f,s:I,s:i,s:s}", "message", msg, "mean_pct", mean, "below_pct",
				      c->below, "window_s", (json_int_t)(c->window_ms / 1000), "samples", n,
				      "source", mj->gpus_now ? "gpu" : "cpu");
		if (mj->gpus_now)
			json_object_set(d, "gpus", mj->gpus_now);
		else
			json_object_set_new(d, "cpus", mj->cpus > 0 ? json_real(mj->cpus) : json_null());
		free(msg);
		event(m, conn, mj, "monitor.low_utilization", d);
	}
}

/* One look at job j (mj's): sampled, judged, written. */
static void look(struct monitor *m, PGconn *conn, struct mon_job *mj, const struct exec_job *j, int64_t now)
{
	struct exec_sample s;
	struct hang_obs o = {.t_ms = now, .util = -1, .demand = -1};
	char phase[HANG_PHASE_LEN];
	int have;
	enum hang_verdict v;
	json_t *sample;
	double gutil = -1;
	int64_t gmem = -1;

	/*
	 * While its evidence is collected the job is stopped by the stack
	 * collectors (a second for gdb's Python frames): not judged, or the
	 * stop would look like idleness and clear the verdict being recorded.
	 */
	if (mj->busy)
		return;
	have = j->type->sample && j->type->sample(j, &s) == 0;

	o.rchar = have ? s.rchar : -1;
	o.wchar = have ? s.wchar : -1;
	o.read_bytes = have ? s.read_bytes : -1;
	o.write_bytes = have ? s.write_bytes : -1;
	o.cpu_ms = have ? s.cpu_ms : -1;
	o.log_bytes = file_size(mj->log);
	o.heartbeat_ns = file_mtime_ns(mj->dir, "heartbeat");
	read_phase(mj->dir, phase, sizeof(phase));
	o.phase = phase;
	/* the metrics written since the last look: rules judged (acted on below), lines counted for the cadence */
	o.metrics_lines = o.metrics_ns = -1;
	if (mj->watch && !mj->acted) {
		char *path = xasprintf("%s/metrics.jsonl", mj->dir);
		if (watch_follow(mj->watch, path) < 0)
			flog_debug("run %lld step %s: metrics file: %s", (long long)mj->run_id, mj->name,
				   ferry_error_last());
		free(path);
		if ((o.metrics_ns = watch_mtime_ns(mj->watch)) >= 0)
			o.metrics_lines = watch_lines(mj->watch);
	}

	/* utilization: the job's GPUs where it has any, else its CPU time over the interval */
	if (have && s.have_gpu) {
		gutil = s.gpu_util;
		gmem = s.gpu_mem_mb;
	} else {
		int *pids = NULL, npids = 0;
		json_t *per = NULL;
		if (j->type->pids)
			(void)j->type->pids(j, &pids, &npids);
		if (gpu_sampler_available(m->gpu) &&
		    gpu_for_job(m->gpu, pids, npids, mj->gpus, mj->visible, &gutil, &gmem, &per) == 1) {
			json_decref(mj->gpus_now);
			mj->gpus_now = per;
		} else {
			json_decref(per);
			gutil = -1;
		}
		/* what its threads ask for (CPU jobs; a GPU's utilization is judged as it is) */
		if (gutil < 0 && npids > 0)
			o.demand = demand_look(&mj->demand, "/proc", pids, npids, -1);
		free(pids);
	}
	if (gutil >= 0) {
		o.util = gutil;
	} else if (have && mj->have_prev && now > mj->prev_t && s.cpu_ms >= mj->prev_cpu) {
		o.util = (double)(s.cpu_ms - mj->prev_cpu) * 100.0 / (double)(now - mj->prev_t);
		if (mj->cpus > 1)
			o.util /= mj->cpus;
	}
	mj->io_rate = have && mj->have_prev && now > mj->prev_t
			      ? (double)((s.rchar + s.wchar) - mj->prev_io) * 1000.0 / (double)(now - mj->prev_t) : 0;
	if (have) {
		mj->prev_t = now;
		mj->prev_cpu = s.cpu_ms;
		mj->prev_io = s.rchar + s.wchar;
		mj->have_prev = 1;
	}
	mj->util = o.util;
	v = hang_feed(&mj->det, &mj->cfg, &o);

	sample = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:s}", "at_ms", (json_int_t)clock_wall_ms(), "rchar",
			   (json_int_t)o.rchar, "wchar", (json_int_t)o.wchar, "read_bytes", (json_int_t)o.read_bytes,
			   "write_bytes", (json_int_t)o.write_bytes, "cpu_ms", (json_int_t)o.cpu_ms, "log_bytes",
			   (json_int_t)o.log_bytes, "state", hang_state_name(mj->det.state));
	json_object_set_new(sample, "util", o.util >= 0 ? json_real(round(o.util * 10) / 10) : json_null());
	if (o.demand >= 0)
		json_object_set_new(sample, "demand", json_real(round(o.demand * 10) / 10));
	if (gutil >= 0) {
		json_object_set_new(sample, "gpu_util", json_real(gutil));
		json_object_set_new(sample, "gpu_mem_mb", json_integer(gmem));
	}
	if (o.heartbeat_ns >= 0)
		json_object_set_new(sample, "heartbeat_ms", json_integer(o.heartbeat_ns / 1000000));
	if (phase[0])
		json_object_set_new(sample, "phase", json_string(phase));
	json_array_append_new(mj->samples, sample);
	while (json_array_size(mj->samples) > SAMPLES_KEPT)
		json_array_remove(mj->samples, 0);

	if (!mj->acted && !mj->busy) {
		if (v == HV_SUSPECTED || v == HV_CLEARED) {
			/* the row's new state and its event in one transaction: the event never shows beside the old state */
			const char *kind = v == HV_SUSPECTED ? "monitor.suspected" : "monitor.cleared";
			json_t *d = v == HV_SUSPECTED ? json_pack("{s:s,s:o}", "message", mj->det.why, "samples",
								  last_samples(mj, EVENT_SAMPLES))
						      : json_pack("{s:s}", "message", mj->det.why);
			write_row_event(m, conn, mj, NULL, now, kind, d);
			EXEC_FAULT("monitor-suspected-written"); /* tests/fault: right after the writes */
			tell(m, mj, kind, d);
		} else if (v == HV_HUNG) {
			hung(m, mj, j);
		}
	}
	if (mj->watch && !mj->acted)
		watch_fired(m, conn, mj);
	lowutil(m, conn, mj, now);
	if (!mj->written_once || mj->dirty || mj->det.state != mj->written || now - mj->last_write_ms >= WRITE_EVERY_MS)
		write_row(m, conn, mj, NULL, now);
}

/* ---- the pool's items ----------------------------------------------------- */

static void mon_work_run(struct work *w, PGconn *conn)
{
	struct mon_work *mw = (struct mon_work *)w;
	json_t *answer = NULL;

	if (mw->what == MW_ALERT) {
		if (webhook_post(&answer, mw->url, mw->body, WEBHOOK_TRIES) < 0)
			flog_warn("monitor webhook: %s", ferry_error_last());
		json_decref(answer);
		return;
	}
	mw->evidence = evidence_collect(mw->pids, mw->npids, mw->log, EVIDENCE_LOG_LINES, EVIDENCE_TIMEOUT_MS);
	/* a database that does not answer: counted as none, the cap is checked at the next hang */
	if (conn == NULL || store_monitor_restarts(&mw->restarts, conn, mw->step_id, mw->attempt, mw->prefix) < 0)
		mw->restarts = 0;
}

void monitor_work_free(struct work *w)
{
	struct mon_work *mw = (struct mon_work *)w;

	if (mw == NULL)
		return;
	free(mw->pids);
	free(mw->log);
	free(mw->url);
	json_decref(mw->evidence);
	json_decref(mw->body);
	free(mw);
}

void monitor_work_done(struct monitor *m, struct work *w)
{
	struct mon_work *mw = (struct mon_work *)w;
	struct mon_job *mj;

	if (mw->what == MW_EVIDENCE && (mj = job_find(m, mw->step_id, mw->attempt)) != NULL) {
		char *summary = evidence_summary(mw->evidence);
		json_t *d = json_pack("{s:s,s:s,s:s,s:O,s:o}", "message", mj->det.why, "action",
				      hang_action_name(mj->cfg.action), "summary", summary, "evidence", mw->evidence,
				      "samples", last_samples(mj, EVENT_SAMPLES));
		mj->busy = 0;
		/*
		 * the collectors' ptrace stopped and woke its threads: on a busy
		 * machine their wait for a CPU then (run_delay) is ours, not its
		 * demand, and the next look would count it (a sleeping job read
		 * at 5 % and more): that look starts the demand afresh instead
		 */
		demand_init(&mj->demand);
		/* still hung? the job may have shown life while its evidence was collected */
		if (mj->det.state == HS_HUNG && !mj->acted && m->conn) {
			/* the verdict and its event in one transaction: a daemon killed between them lost the event and its alert */
			write_row_event(m, m->conn, mj, mw->evidence, clock_mono_ms(), "monitor.hung", d);
			EXEC_FAULT("monitor-hung-written"); /* tests/fault: right after the writes */
			tell(m, mj, "monitor.hung", d);
			d = NULL;
			if (mj->cfg.action != HANG_NOTIFY)
				act(m, mj, mj->cfg.action == HANG_RESTART, mw->restarts, "hung: ", mj->det.why);
		}
		json_decref(d);
		free(summary);
	}
}

/* ---- the round ------------------------------------------------------------- */

static void gauges(struct monitor *m)
{
	char *buf = NULL;
	size_t len = 0, cap = 0;

	if (m->njobs == 0) {
		metrics_set_gauges(NULL);
		return;
	}
	metrics_appendf(&buf, &len, &cap,
			"# HELP ferry_job_utilization_percent A running attempt's utilization (GPU, else CPU) at its last sample.\n"
			"# TYPE ferry_job_utilization_percent gauge\n");
	for (int i = 0; i < m->njobs; i++)
		if (m->jobs[i]->util >= 0)
			metrics_appendf(&buf, &len, &cap,
					"ferry_job_utilization_percent{run=\"%lld\",step=\"%s\",attempt=\"%d\"} %.1f\n",
					(long long)m->jobs[i]->run_id, m->jobs[i]->name, m->jobs[i]->attempt,
					m->jobs[i]->util);
	metrics_appendf(&buf, &len, &cap,
			"# HELP ferry_job_io_bytes_per_second A running attempt's rchar+wchar rate at its last sample.\n"
			"# TYPE ferry_job_io_bytes_per_second gauge\n");
	for (int i = 0; i < m->njobs; i++)
		metrics_appendf(&buf, &len, &cap, "ferry_job_io_bytes_per_second{run=\"%lld\",step=\"%s\",attempt=\"%d\"} %.0f\n",
				(long long)m->jobs[i]->run_id, m->jobs[i]->name, m->jobs[i]->attempt,
				m->jobs[i]->io_rate);
	metrics_appendf(&buf, &len, &cap,
			"# HELP ferry_job_monitor_state The hang detector's state of a running attempt (1 for its state).\n"
			"# TYPE ferry_job_monitor_state gauge\n");
	for (int i = 0; i < m->njobs; i++)
		metrics_appendf(&buf, &len, &cap,
				"ferry_job_monitor_state{run=\"%lld\",step=\"%s\",attempt=\"%d\",state=\"%s\"} 1\n",
				(long long)m->jobs[i]->run_id, m->jobs[i]->name, m->jobs[i]->attempt,
				hang_state_name(m->jobs[i]->det.state));
	metrics_set_gauges(buf);
	free(buf);
}

int64_t monitor_round(struct monitor *m, PGconn *conn, struct exec_job *const *jobs, int njobs, int64_t now)
{
	int64_t next = MONITOR_TICK_MS;
	int changed = 0; /* a look was taken or an attempt went: the gauges are rendered again */

	if (m->off)
		return 1000;
	m->conn = conn;
	m->round++;
	gpu_sampler_poll(m->gpu, now, hang_sample_ms(&m->base));
	for (int i = 0; i < njobs; i++) {
		const struct exec_job *j = jobs[i];
		struct mon_job *mj;

		/* jobs that keep no directory (noop) have nothing to watch */
		if (j->dir == NULL || (j->type->flags & EXF_NO_DIR) || j->ctx == NULL)
			continue;
		if ((mj = job_find(m, j->step_id, j->attempt)) == NULL)
			mj = job_new(m, j, now);
		mj->seen = m->round;
		/* a job being killed is past judging */
		if (j->killing)
			continue;
		/*
		 * A job's first progress mark (its metrics file or heartbeat
		 * appearing) is looked at at once, in the round that sees it (looked
		 * for once a second): its cadence is learned from there
		 * (hang_look_ms), not a period later.
		 */
		if (!mj->marks && mj->cfg.cadence_k > 0 && now < mj->next_ms && now - mj->marks_checked_ms >= 1000) {
			mj->marks_checked_ms = now;
			if (file_mtime_ns(mj->dir, "metrics.jsonl") >= 0 || file_mtime_ns(mj->dir, "heartbeat") >= 0) {
				mj->marks = 1;
				mj->next_ms = now;
			}
		}
		if (now >= mj->next_ms) {
			look(m, conn, mj, j, now);
			changed = 1;
			mj->next_ms = now + hang_look_ms(&mj->det, &mj->cfg);
		}
		if (mj->next_ms - now < next)
			next = mj->next_ms - now;
	}
	/* attempts whose job is gone: their row keeps the last look; the step's state says it ended */
	for (int i = 0; i < m->njobs;) {
		struct mon_job *mj = m->jobs[i];
		if (mj->seen == m->round || mj->busy) {
			i++;
			continue;
		}
		if (mj->watch) {
			char *path = xasprintf("%s/metrics.jsonl", mj->dir);
			(void)watch_follow_end(mj->watch, path); /* the lines written last, a last one without its newline too */
			free(path);
			watch_fired(m, conn, mj); /* recorded; the job it would act on is gone */
		}
		write_row(m, conn, mj, NULL, now);
		job_free(mj);
		m->jobs[i] = m->jobs[--m->njobs];
		changed = 1;
	}
	if (changed)
		gauges(m);
	return next < 10 ? 10 : next;
}

/* ---- the periodic task ----------------------------------------------------- */

static void task_submit(void *arg, struct work *w)
{
	struct task_ctx *c = arg;

	c->submit(c, &monitor_task, w);
}

static void task_kill(void *arg, int64_t step_id, int attempt, enum attempt_outcome outcome, int final,
		      char *reason)
{
	struct task_ctx *c = arg;

	c->kill(c, step_id, attempt, outcome, final, reason);
}

static int task_open(void **state, struct task_ctx *c)
{
	struct monitor_host host = {.arg = c, .submit = task_submit, .kill = task_kill};
	struct monitor *m = NULL;
	int error = monitor_new(&m, c->owner, &host);

	*state = m;
	return error;
}

static void task_close(void *state)
{
	monitor_free(state);
}

/* Samples the running jobs that are due, judges them, acts. */
static struct work *task_round(struct task_ctx *c, void *state)
{
	(void)monitor_round(state, c->conn, c->jobs, c->njobs, clock_mono_ms());
	return NULL;
}

/* Evidence of a hang, a posted alert: came back. */
static void task_done(struct task_ctx *c, void *state, struct work *w)
{
	(void)c;
	monitor_work_done(state, w);
}

static int64_t every_tick(const struct task_ctx *c)
{
	(void)c;
	return MONITOR_TICK_MS;
}

const struct task monitor_task = {
	.name = "monitor",
	.period = every_tick,
	.open = task_open,
	.close = task_close,
	.start_round = task_round,
	.done = task_done,
	.free = monitor_work_free,
};

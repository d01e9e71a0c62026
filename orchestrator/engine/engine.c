/*
 * engine — see engine.h. engine_tick() is the periodic function; every
 * iteration it, in order:
 *   - drains the wake pipe, polls the jobs whose end may have come (on
 *     SIGCHLD those that are our children, every 200 ms all of them) through
 *     their executor type, and lets the types reap strays;
 *   - fires step timeouts (SIGTERM) and escalates to SIGKILL after the grace
 *     (engine_kill.c, with the stops a run's stop asks);
 *   - reconnects when the database went away (at most once a second);
 *   - writes the handles of started jobs that are not recorded yet and
 *     are due (a failed record is retried here, never only logged; a late
 *     record waits, and rides with its attempt's end if that comes first:
 *     LATE_RECORD_MS), then closes finished attempts in one ferry_finish() call (engine_finish.c: a large batch
 *     on the worker pool's connection), with the claim that would follow
 *     in the same call when one may be made (ferry_finish_claim: it claims
 *     when a job's end freed room or the finish made steps ready); then what jobs
 *     that cannot run yet wait for (exec_job_note) as their steps' reasons;
 *   - runs the periodic tasks that are due (tasks[] in engine_table.c, a table of
 *     rows of store/task.h: the polling fallback, lease renewal, leader
 *     election, adoption of this host's orphans, the leader's reaper of
 *     lost attempts, expired waits, completion webhooks, dev sessions'
 *     leases and ends, removal of old runs' logs, strays and orphaned
 *     containers, deployments' reconcile, the job monitor, schedules and
 *     triggers). A row's round runs on the loop and returns its slow part
 *     as worker-pool items, which the engine submits, counts per row (a
 *     TASK_POOL row starts no round while its items are out) and, back on
 *     the loop, hands to the row's done and free. The rows of other
 *     folders' duties live there (reconcile.c, monitor.c, schedules.c,
 *     exec_orphans.c), the engine's own here, in engine_tasks.c, notify.c
 *     and retention.c: adding a task is a file exporting its row and the
 *     row's pointer in tasks[];
 *   - claims up to claim_batch ready steps while it has capacity and starts
 *     them through the executor type, recording their handles in one
 *     statement; kills the jobs of stopping runs when told;
 *   - waits on the database socket (LISTEN ferry_ready, ferry_stop,
 *     ferry_reconcile: a follower asks the leader for a round, and
 *     ferry_replicas: the leader's round is over, each host's keeper runs
 *     its own) and the wake pipe, never longer than the next thing due.
 * Results that could not be written (database down) stay queued and are
 * written after the reconnect; nothing is lost. orchestrator/README.md says
 * how the three tables (executor types, step kinds, periodic tasks) plug in.
 */
#include "engine/engine.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/db.h"
#include "engine/engine_priv.h"
#include "exec/exec.h"
#include "exec/proc.h"
#include "engine/health.h"
#include "engine/host.h"
#include "lib/metrics.h"
#include "lib/seal.h"
#include "monitor/monitor.h"
#include "engine/notify.h"
#include "engine/retention.h"
#include "lib/states.h"
#include "plan/kind.h"
#include "store/store.h"
#include "lib/util.h"
#include "deploy/reconcile.h"
#include "schedule/schedules.h"
#include "store/workers.h"

/*
 * Step work done off the loop: PREPARE runs the step handlers of a claimed
 * step (then its job starts, or it is finished); JOB_DONE turns a succeeded
 * job of a kind the daemon finishes itself (a cache step's staging) into
 * its result. Only the worker touches the item between submit and take.
 */
struct step_work {
	struct work w;
	enum { PREPARE, JOB_DONE } what;
	const struct engine *e;  /* read only: home, host, owner */
	struct store_claim *c;   /* PREPARE: the claim, moved here; owned */
	char *dir;               /* owned */
	/* JOB_DONE: the job */
	int64_t step_id, run_id;
	int attempt;
	char *name;              /* owned */
	json_t *ctx;             /* owned */
	/* what the worker decided (w.again: it could not reach the database) */
	int finished;
	struct step_result res;
	char *key;
};

static void step_work_run(struct work *w, PGconn *conn);
static void step_work_free(struct work *w);
static void drop_work(struct work *w);
static void job_done_with(struct step_result *res, PGconn *conn, const struct engine *e, int64_t step_id,
			  int64_t run_id, int attempt, const char *name, const char *dir, const json_t *ctx);

static int wake_pipe[2] = {-1, -1};
static volatile sig_atomic_t sigchld_flag = 1;

void engine_sigchld(void)
{
	int saved = errno;
	sigchld_flag = 1;
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
	o->workers = (int)env_int("FERRY_WORKERS", 2);
	o->retention_days = retention_days_env();
	o->retention_period_ms = env_int("FERRY_RETENTION_PERIOD_MS", 3600000);
	if (o->retention_period_ms < 100)
		o->retention_period_ms = 100;
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
	/* bounded on our clock: a silent network never freezes the loop for more than a second */
	if (db_connect_ex(&e->conn, e->conninfo, 1000, 0) < 0)
		return FERRY_EDB;
	res = PQexec(e->conn, "SET plan_cache_mode = force_generic_plan; LISTEN ferry_ready; LISTEN ferry_stop; "
			     "LISTEN ferry_reconcile; LISTEN ferry_replicas");
	ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	PQclear(res);
	if (!ok) {
		ferry_error_set("LISTEN: %s", PQerrorMessage(e->conn));
		return FERRY_EDB;
	}
	e->claim_now = 1;
	e->stop_check = 1;
	engine_task_due_now(e, &recover_task);
	return FERRY_OK;
}


int engine_new(struct engine **out, const struct engine_opts *opts, const char *conninfo)
{
	struct engine *e = xcalloc(1, sizeof(*e));
	struct sigaction sa;
	char hostname[256] = "localhost";
	int error;

	*out = NULL;
	ferry_host_name(hostname, sizeof(hostname));
	if (getenv("FERRY_HOST") && *getenv("FERRY_HOST")) {
		/* the name this daemon's host goes by in the fleet (several "hosts" on one machine: tests) */
		const char *h = getenv("FERRY_HOST");
		size_t n = strlen(h);
		if (n >= sizeof(hostname) || strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") != n) {
			ferry_error_set("FERRY_HOST \"%.80s\": a host name (letters, digits, '.', '-', '_')", h);
			free(e);
			return FERRY_EINVALID;
		}
	}
	e->o = *opts;
	e->type = exec_type_find(opts->executor ? opts->executor : "local");
	if (e->type == NULL) {
		char *known = exec_type_names();
		ferry_error_set("unknown executor \"%s\" (known: %s)", opts->executor, known);
		free(known);
		free(e);
		return FERRY_EINVALID;
	}
	if (!(e->type->flags & (EXF_NO_SLOTS | EXF_ADMITS)) && !opts->run_filter) {
		json_t *cap = NULL, *labels = NULL;
		if ((error = host_detect_once(&cap, &labels)) < 0) {
			free(e);
			return error;
		}
		e->admission = host_admission(cap);
		e->gpus = json_incref(json_object_get(cap, "gpus"));
		json_decref(cap), json_decref(labels);
	}
	engine_tasks_init(e);
	if (opts->health && !opts->run_filter)
		health_set_leader(opts->health, 0); /* an election runs here: a follower until it wins */
	e->conninfo = xstrdup(conninfo);
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
	exec_types_init(e->home); /* the executors' per-daemon instances */
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
	/* step handlers use libcurl (label webhooks) on worker threads: initialise it before any starts */
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (opts->workers > 0 && (error = workers_new(&e->workers, opts->workers, conninfo, wake_pipe[1])) < 0)
		goto fail;
	if ((error = engine_tasks_open(e)) < 0)
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
	workers_free(e->workers, drop_work);
	while (e->deferred) {
		struct work *w = e->deferred;
		e->deferred = w->next;
		drop_work(w);
	}
	engine_tasks_close(e);
	for (int i = 0; i < e->njobs; i++)
		exec_job_free(e->jobs[i]);
	exec_types_fini();
	for (int i = 0; i < e->ndone; i++) {
		free(e->done[i].reason);
		step_result_dispose(&e->done[i].res);
		free(e->done[i].cache_key);
		free(e->done[i].rec_handle);
		free(e->done[i].rec_dir);
	}
	for (int i = 0; i < e->nrecs; i++) {
		free(e->recs[i].handle);
		free(e->recs[i].dir);
	}
	free(e->jobs);
	free(e->done);
	free(e->recs);
	free(e->task_next);
	free(e->task_slot);
	free(e->task_inflight);
	free(e->task_state);
	if (e->lead)
		PQfinish(e->lead);
	if (e->conn)
		PQfinish(e->conn);
	free(e->conninfo), free(e->owner), free(e->host), free(e->home);
	json_decref(e->admission), json_decref(e->gpus), json_decref(e->admission_net);
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
	return e->njobs + e->inflight;
}

void engine_claim_hold(struct engine *e, int hold)
{
	e->claim_held = hold;
	e->claim_step = 0;
}

void engine_claim_one(struct engine *e, int64_t step_id)
{
	e->claim_step = step_id;
	e->claim_now = 1;
}

void engine_drain(struct engine *e)
{
	e->draining = 1;
}

/* An outcome for the log: its name, or "none" (a result no step kind decided). */
static const char *outcome_label(enum attempt_outcome o)
{
	const char *name = attempt_outcome_name(o);

	return name ? name : "none";
}

/* Queues what a step handler decided; takes res's contents and cache_key. */
static void push_result(struct engine *e, int64_t step_id, int attempt, struct step_result *res,
			char *cache_key, int exit_code)
{
	struct done *d;
	/* the step handlers decide the outcome; none (or one with no name) is a failure */
	enum attempt_outcome outcome = attempt_outcome_name(res->outcome) ? res->outcome : OUTCOME_FAILED;

	engine_push_done(e, step_id, attempt, outcome, exit_code, 0, res->reason);
	d = &e->done[e->ndone - 1];
	d->res = *res;
	d->res.reason = NULL; /* d->reason owns it */
	d->cache_key = outcome == OUTCOME_SUCCEEDED ? cache_key : (free(cache_key), NULL);
	d->r.final = res->final;
	d->r.outputs = res->outputs;
	d->r.metrics = res->metrics;
	d->r.gate = res->gate;
	d->r.cached_from = res->cached_from;
	d->r.cache_key = d->cache_key;
	step_result_init(res);
}

/* The context a job's step handlers need later (steps_job_done). */
json_t *engine_job_ctx(const char *kind, const json_t *spec, const char *workdir, const json_t *inputs,
		       const json_t *run, const char *cache_key)
{
	return json_pack("{s:s, s:O, s:s?, s:O?, s:O?, s:s?}", "kind", kind, "spec", spec,
			 "workdir", workdir, "inputs", inputs, "run", run, "cache_key", cache_key);
}

static void submit_work(struct engine *e, struct step_work *w);

/*
 * A succeeded job: its outputs, metrics and gate decide how the step ends.
 * A kind the daemon finishes itself (a cache step stages the job's output)
 * does that on the worker pool.
 */
void engine_job_succeeded(struct engine *e, int64_t step_id, int64_t run_id, int attempt,
			  const char *name, const char *dir, const json_t *ctx)
{
	const char *kind = json_string_value(json_object_get(ctx, "kind"));
	const struct step_kind *k = kind ? step_kind_find(kind) : NULL;
	const char *key = json_string_value(json_object_get(ctx, "cache_key"));
	struct step_result res;

	if (kind == NULL || json_object_get(ctx, "spec") == NULL) {
		engine_push_done(e, step_id, attempt, OUTCOME_SUCCEEDED, 0, 0, NULL);
		return;
	}
	if (k && (k->flags & SKF_DAEMON) && e->workers) {
		struct step_work *w = xcalloc(1, sizeof(*w));
		step_result_init(&w->res);
		w->w.run = step_work_run;
		w->what = JOB_DONE;
		w->e = e;
		w->step_id = step_id;
		w->run_id = run_id;
		w->attempt = attempt;
		w->name = xstrdup(name);
		w->dir = xstrdup(dir);
		w->ctx = json_deep_copy(ctx);
		submit_work(e, w);
		return;
	}
	job_done_with(&res, e->conn, e, step_id, run_id, attempt, name, dir, ctx);
	if (res.outcome != OUTCOME_NONE && res.outcome != OUTCOME_SUCCEEDED)
		flog_info("run %lld step %s attempt %d: %s", (long long)run_id, name, attempt,
			  res.reason ? res.reason : outcome_label(res.outcome));
	push_result(e, step_id, attempt, &res, key ? xstrdup(key) : NULL, 0);
}

/* Turns a job that ended (as st says) into a queued result and forgets it. */
static void job_finished(struct engine *e, int idx, const struct exec_status *st)
{
	struct exec_job *j = e->jobs[idx];
	enum attempt_outcome outcome;
	char *reason = NULL;

	if (j->killing) {
		outcome = j->kill_outcome;
		reason = j->kill_reason ? xstrdup(j->kill_reason) : NULL;
	} else if (st->reason) {
		outcome = OUTCOME_FAILED;
		reason = xstrdup(st->reason);
	} else if (st->signal) {
		outcome = OUTCOME_FAILED;
		reason = xasprintf("killed by signal %d (%s)", st->signal, strsignal(st->signal));
	} else if (st->exit_code == 0) {
		outcome = OUTCOME_SUCCEEDED;
	} else {
		outcome = OUTCOME_FAILED;
		reason = exec_exit_reason(j, st->exit_code);
	}
	flog_debug("run %lld step %s attempt %d: %s", (long long)j->run_id, j->name, j->attempt,
		   attempt_outcome_name(outcome));
	if (outcome == OUTCOME_SUCCEEDED)
		engine_job_succeeded(e, j->step_id, j->run_id, j->attempt, j->name, j->dir, j->ctx);
	else {
		engine_push_done(e, j->step_id, j->attempt, outcome, st->exit_code, st->signal, reason);
		/* the monitor failed it for good (a hang, a watchpoint): no retry */
		e->done[e->ndone - 1].r.final = j->killing && j->kill_final;
	}
	if (j->type->cleanup)
		j->type->cleanup(j);
	exec_job_free(j);
	e->jobs[idx] = e->jobs[--e->njobs];
	e->claim_now = 1; /* room for another job */
}

/*
 * Asks the executor whether jobs ended: our children when a SIGCHLD came,
 * and every job every 200 ms (adopted ones, from a dead owner, or not our
 * processes, have no SIGCHLD; for our children it is the net under the
 * signal: a job whose SIGCHLD was lost stayed "running" for good — a make
 * test's run saw a one-line `sh -c` job so for 20 s, its end never looked
 * at). Then the types reap what jobs left behind.
 */
static void poll_jobs(struct engine *e, int64_t now)
{
	char buf[64];
	int chld, every = now >= e->next_adopted_poll;

	while (read(wake_pipe[0], buf, sizeof(buf)) > 0)
		;
	/* read and cleared in one instruction: a SIGCHLD between a read and a store was lost */
	chld = __atomic_exchange_n(&sigchld_flag, 0, __ATOMIC_SEQ_CST);
	if (chld && EXEC_FAULT("sigchld"))
		chld = 0; /* the crash tests' lost SIGCHLD (tests/fault) */
	if (every)
		e->next_adopted_poll = now + 200;
	for (int i = 0; i < e->njobs;) {
		struct exec_job *j = e->jobs[i];
		struct exec_status st;
		if ((every || (j->child && chld)) && j->type->poll && j->type->poll(j, &st) == 1) {
			job_finished(e, i, &st);
			exec_status_dispose(&st);
		} else {
			i++;
		}
	}
	if (chld)
		exec_tick_all(e->home);
}

/* The notes of running jobs that changed (what each waits for) as their steps' reasons; retried next tick while a write fails. */
static void write_notes(struct engine *e)
{
	if (e->conn == NULL || PQstatus(e->conn) != CONNECTION_OK)
		return;
	for (int i = 0; i < e->njobs; i++) {
		struct exec_job *j = e->jobs[i];
		if (!j->note_changed)
			continue;
		if (store_step_note(e->conn, j->step_id, j->attempt, j->note) < 0) {
			flog_warn("run %lld step %s attempt %d: cannot record what it waits for: %s", (long long)j->run_id,
				  j->name, j->attempt, ferry_error_last());
			return;
		}
		j->note_changed = 0;
	}
}

int engine_db_failed(struct engine *e, int error)
{
	metrics_add(M_DB_ERRORS, 1);
	/*
	 * again at the poll period, not at once: a statement that fails with the
	 * connection up (a function gone after a bad upgrade, a timeout) failed
	 * the same way thousands of times a second, a core busy and the log full
	 */
	e->db_retry_at = clock_mono_ms() + (e->o.poll_ms > 0 ? e->o.poll_ms : 1000);
	if (error == FERRY_EDB && PQstatus(e->conn) != CONNECTION_OK) {
		flog_warn("database connection lost: %s", ferry_error_last());
		e->next_reconnect = 0;
	}
	return error;
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

/*
 * A claimed step whose kind or templates need its ancestors: the step
 * handlers run here, with conn (the engine's, or a worker's). Returns 1 when
 * the step is finished (*res filled), 0 when its job is to start: c->spec is
 * then the rendered spec and *key the step-cache key to keep a success
 * under (or NULL).
 */
static int prepare_step(struct step_result *res, char **key, PGconn *conn, const struct engine *e,
			struct store_claim *c, const char *dir)
{
	json_t *rendered = NULL, *env = NULL;
	struct step_run sr = {
		.conn = conn, .home = e->home, .host = e->host, .actor = e->owner,
		.run_id = c->run_id, .step_id = c->step_id, .attempt = c->attempt, .name = c->name,
		.kind = c->kind, .dir = dir, .workdir = c->workdir, .spec = c->spec,
		.inputs = c->inputs, .run = c->run,
	};
	char *out = xasprintf("%s/out", dir);
	const struct exec_type *t = exec_type_for(c->spec, e->type);
	const struct step_kind *k = c->kind ? step_kind_find(c->kind) : NULL;
	/* a job an executor runs without a directory (noop) gets none: creating one per item of a
	 * 100,000-item fan-out was most of the daemon's time (ext4 inode allocation) */
	int dirless = t != NULL && (t->flags & EXF_NO_DIR) && k != NULL && (k->flags & SKF_DAEMON) == 0;
	int rc;

	*key = NULL;
	step_result_init(res);
	if (conn == NULL || (!dirless && mkdir_p(out, 0711) < 0)) {
		res->outcome = OUTCOME_FAILED;
		res->reason = conn ? xasprintf("cannot create %s: %s", dir, ferry_error_last())
				   : xasprintf("the database is unreachable: %s", ferry_error_last());
		free(out);
		return 1;
	}
	free(out);
	rc = steps_prepare(&rendered, &env, key, res, &sr);
	if (rc != 0) {
		if (rc < 0) {
			step_result_dispose(res);
			res->outcome = OUTCOME_FAILED;
			res->reason = xstrdup(ferry_error_last());
		}
		flog_debug("run %lld step %s attempt %d: %s%s%s", (long long)c->run_id, c->name,
			   c->attempt, outcome_label(res->outcome), res->reason ? ": " : "",
			   res->reason ? res->reason : "");
		json_decref(rendered);
		json_decref(env);
		free(*key);
		*key = NULL;
		return 1;
	}
	steps_env_merge(rendered, env);
	json_decref(c->spec);
	c->spec = rendered;
	return 0;
}

struct exec_job *engine_new_job(struct engine *e, const struct exec_type *t)
{
	if (e->njobs == e->capjobs) {
		e->capjobs = e->capjobs ? e->capjobs * 2 : 16;
		e->jobs = xrealloc(e->jobs, (size_t)e->capjobs * sizeof(*e->jobs));
	}
	e->jobs[e->njobs] = exec_job_new(t);
	return e->jobs[e->njobs];
}

/* A job that ended as soon as it started (the noop executor's): queues its result. */
static void ended_at_start(struct engine *e, const struct store_claim *c, const struct exec_status *st,
			   const char *key)
{
	if (st->exit_code != 0 || st->signal) {
		engine_push_done(e, c->step_id, c->attempt, OUTCOME_FAILED, st->exit_code, st->signal,
			  st->reason ? xstrdup(st->reason) : xasprintf("exit code %d", st->exit_code));
	} else if ((e->type->flags & EXF_NO_DIR) || c->kind == NULL) {
		engine_push_done(e, c->step_id, c->attempt, OUTCOME_SUCCEEDED, 0, 0, NULL);
	} else {
		char *dir = exec_attempt_dir(e->home, c->run_id, c->name, c->attempt);
		json_t *ctx = engine_job_ctx(c->kind, c->spec, c->workdir, c->inputs, c->run, key);
		engine_job_succeeded(e, c->step_id, c->run_id, c->attempt, c->name, dir, ctx);
		json_decref(ctx);
		free(dir);
	}
}

static void step_work_free(struct work *w)
{
	struct step_work *sw = (struct step_work *)w;

	if (sw->c)
		store_claims_free(sw->c, 1);
	free(sw->dir);
	free(sw->name);
	json_decref(sw->ctx);
	step_result_dispose(&sw->res);
	free(sw->key);
	free(sw);
}

/* The succeeded job's step_run and its result (job_succeeded's handler part). */
static void job_done_with(struct step_result *res, PGconn *conn, const struct engine *e, int64_t step_id,
			  int64_t run_id, int attempt, const char *name, const char *dir, const json_t *ctx)
{
	struct step_run sr = {
		.conn = conn, .home = e->home, .host = e->host, .actor = e->owner,
		.run_id = run_id, .step_id = step_id, .attempt = attempt, .name = name,
		.kind = json_string_value(json_object_get(ctx, "kind")), .dir = dir,
		.workdir = json_string_value(json_object_get(ctx, "workdir")),
		.spec = json_object_get(ctx, "spec"), .inputs = json_object_get(ctx, "inputs"),
		.run = json_object_get(ctx, "run"),
	};

	/* conn may be down (a plain job's end needs no database; a gate's lookup then fails) */
	if (steps_job_done(&sr, res) < 0) {
		step_result_dispose(res);
		res->outcome = OUTCOME_FAILED;
		res->reason = xstrdup(ferry_error_last());
	}
}

/* On a worker thread. */
static void step_work_run(struct work *w, PGconn *conn)
{
	struct step_work *sw = (struct step_work *)w;

	sw->w.again = conn == NULL || PQstatus(conn) != CONNECTION_OK;
	if (sw->w.again)
		return;
	if (sw->what == PREPARE) {
		store_claim_parse(sw->c); /* off the loop (store_claim) */
		sw->finished = prepare_step(&sw->res, &sw->key, conn, sw->e, sw->c, sw->dir);
	} else {
		job_done_with(&sw->res, conn, sw->e, sw->step_id, sw->run_id, sw->attempt, sw->name,
			      sw->dir, sw->ctx);
	}
}

static void start_job(struct engine *e, struct store_claim *c, char *key);

/* Back on the loop: a worker's decision becomes a result or a job. */
static void step_work_apply(struct engine *e, struct step_work *sw)
{
	if (sw->what == JOB_DONE) {
		const char *key = json_string_value(json_object_get(sw->ctx, "cache_key"));
		if (sw->res.outcome != OUTCOME_NONE && sw->res.outcome != OUTCOME_SUCCEEDED)
			flog_info("run %lld step %s attempt %d: %s", (long long)sw->run_id, sw->name,
				  sw->attempt, sw->res.reason ? sw->res.reason : outcome_label(sw->res.outcome));
		push_result(e, sw->step_id, sw->attempt, &sw->res, key ? xstrdup(key) : NULL, 0);
	} else if (sw->finished) {
		push_result(e, sw->c->step_id, sw->c->attempt, &sw->res, NULL, -1);
		/* the attempt's directory holds what the daemon wrote (a label task's log) */
		engine_push_record(e, sw->c->step_id, sw->c->attempt, NULL, NULL, sw->dir);
		sw->dir = NULL;
	} else {
		start_job(e, sw->c, sw->key);
		sw->key = NULL;
		e->stop_check = 1; /* its run may have been stopped meanwhile */
	}
}


/* Frees a pool item that is never taken back (shutdown): a periodic task's through its row. */
static void drop_work(struct work *w)
{
	if (w->task)
		w->task->free(w);
	else if (!engine_finish_work_drop(w) && !engine_dirs_ahead_drop(w))
		step_work_free(w);
}

/* Back on the loop (the pool's done callback): applies a step's work and frees it. */
static void step_work_done(struct work *w, void *ctx)
{
	struct engine *e = ctx;

	e->inflight--;
	step_work_apply(e, (struct step_work *)w);
	step_work_free(w);
}

/* Hands w to the pool, or does it now when the engine has none. */
static void submit_work(struct engine *e, struct step_work *w)
{
	w->w.done = step_work_done;
	if (e->workers) {
		workers_submit(e->workers, &w->w);
		e->inflight++;
		return;
	}
	step_work_run(&w->w, e->conn);
	step_work_apply(e, w);
	step_work_free(&w->w);
}


/* Takes the pool's finished items back. */
static void take_work(struct engine *e)
{
	struct work *w, *next;

	/* nothing of ours in the pool: no lock taken (steps and each periodic task count theirs) */
	if (e->workers == NULL ||
	    (e->inflight == 0 && !e->finishing && e->ahead_out == 0 && engine_tasks_inflight(e) == 0))
		return;
	for (w = workers_take(e->workers); w; w = next) {
		next = w->next;
		if (w->again) {
			/* a step's attempt stays ours (leases renewed); the work waits for the database */
			w->again = 0;
			w->next = e->deferred;
			e->deferred = w;
			continue;
		}
		if (w->task)
			engine_task_work_done(e, w);
		else
			w->done(w, e);
	}
}

/* Starts claimed step c's job through the executor type. */
static void start_job(struct engine *e, struct store_claim *c, char *key)
{
	struct exec_status st = {.exit_code = -1};
	const struct exec_type *t = exec_type_for(c->spec, e->type);
	struct exec_job *j = engine_new_job(e, t);
	const char *image = json_string_value(json_object_get(c->spec, "image"));
	int rc;

	if (t != NULL && image != NULL && strcmp(image, "host") != 0 && (t->flags & EXF_IMAGES) == 0) {
		char *names = exec_type_names_with(EXF_IMAGES, " or ");
		ferry_error_set("image \"%s\" needs an executor that runs images (executor: %s); "
				"this daemon's default is %s", image, names, t->name);
		free(names);
		t = NULL;
	}
	if (t != NULL && json_array_size(json_object_get(c->spec, "secrets")) > 0 && (t->flags & EXF_SECRETS) == 0) {
		char *names = exec_type_names_with(EXF_SECRETS, " or ");
		ferry_error_set("secrets: executor %s cannot mask them in its log; use %s", t->name, names);
		free(names);
		t = NULL;
	}
	if (t != NULL) {
		struct exec_spec s = {0};
		json_t *secrets = NULL, *genv = NULL;
		json_t *names = json_object_get(c->spec, "secrets");
		/* the step's secrets opened only now, for the job's environment (never in its spec) */
		if (json_array_size(names) > 0 &&
		    store_secrets_open(&secrets, e->conn, seal_key_of(e->home, 0), names) < 0) {
			rc = FERRY_EINVALID;
			goto started;
		}
		exec_spec_from_json(&s, c->spec, t);
		if (!(t->flags & EXF_ADMITS) && (genv = host_gpu_env(e->gpus, c->gpus, json_object_get(c->spec, "env"))) != NULL)
			s.env = genv;
		s.gpus = c->gpus;
		s.secrets = secrets;
		s.run_id = c->run_id;
		s.step_id = c->step_id;
		s.attempt = c->attempt;
		s.name = c->name;
		s.run_workdir = c->workdir;
		s.timeout_ms = c->timeout_ms;
		s.home = e->home;
		rc = t->start(j, &s, EXEC_ONESHOT, &st);
		seal_values_dispose(secrets);
		json_decref(genv);
	} else {
		rc = FERRY_EINVALID;
	}
started:

	if (rc < 0) {
		flog_error("run %lld step %s: cannot start: %s", (long long)c->run_id, c->name,
			   ferry_error_last());
		engine_push_done(e, c->step_id, c->attempt, OUTCOME_FAILED, -1, 0,
			  xasprintf("cannot start: %s", ferry_error_last()));
		exec_job_free(j);
	} else if (rc == 1) {
		ended_at_start(e, c, &st, key);
		exec_job_free(j);
	} else {
		j->type = t;
		j->ctx = engine_job_ctx(c->kind, c->spec, c->workdir, c->inputs, c->run, key);
		flog_debug("run %lld step %s attempt %d: started on %s", (long long)j->run_id,
			   j->name, j->attempt, t->name);
		engine_push_record(e, j->step_id, j->attempt, t->name,
			    j->handle ? json_dumps(j->handle, JSON_COMPACT) : NULL,
			    j->dir ? xstrdup(j->dir) : NULL);
		if (t->flags & EXF_LATE_RECORD)
			engine_record_later(e);
		e->njobs++;
		{
			/*
			 * a job whose metrics are drawn (a training, an evaluation, a
			 * step with watch: rules): the monitor's next round is now, so
			 * that it knows the job even if it ends within its tick, and
			 * reads the metrics it wrote once it has (the monitor reads a
			 * job's last lines when it sees it gone)
			 */
			const struct step_kind *k = c->kind ? step_kind_find(c->kind) : NULL;
			if ((k && (k->flags & (SKF_TRAINS | SKF_EVALUATES))) || json_object_get(c->spec, "watch"))
				engine_task_due_now(e, &monitor_task);
		}
		EXEC_FAULT("started");
	}
	exec_status_dispose(&st);
	free(key);
}

/*
 * Takes the notifications received. A ferry_ready asks for a claim, unless
 * one covers it already:
 *   BEFORE_CLAIM  a claim is about to be sent: whoever sent a ferry_ready
 *                 that is here had committed before it was delivered, and
 *                 the claim's snapshot sees what it made ready;
 *   AFTER_CLAIM   a claim has just been answered: a ferry_ready from this
 *                 engine's own session came from a statement that ran before
 *                 the claim (a session's notification is sent before it
 *                 reads its next statement, and the claim sends none); one
 *                 from another session may have committed after the claim's
 *                 snapshot and still asks.
 * The engine's own ferry_finish notifies, and the engine claims after it
 * anyway: honoured, its notification cost a second claim that found
 * nothing, for about one step in ten of a chain (1.2-1.5 ms of the loop
 * each; test_chain_claims_once_per_step).
 */
enum notify_mode { NOTIFY_HONOUR, NOTIFY_BEFORE_CLAIM, NOTIFY_AFTER_CLAIM };

static void drain_notifies(struct engine *e, enum notify_mode mode)
{
	PGnotify *nt;
	int self = PQbackendPID(e->conn);

	if (PQconsumeInput(e->conn) == 0)
		return;
	while ((nt = PQnotifies(e->conn)) != NULL) {
		if (strcmp(nt->relname, "ferry_ready") == 0) {
			if (mode == NOTIFY_HONOUR || (mode == NOTIFY_AFTER_CLAIM && nt->be_pid != self))
				e->claim_now = 1;
		} else if (strcmp(nt->relname, "ferry_stop") == 0)
			e->stop_check = 1;
		else if (strcmp(nt->relname, "ferry_reconcile") == 0 && e->leading)
			engine_task_due_now(e, &reconcile_task); /* another daemon asked (reconcile_request) */
		else if (strcmp(nt->relname, "ferry_replicas") == 0 && !e->leading)
			engine_task_due_now(e, &replicas_task); /* the leader's round is over: this host's turn */
		PQfreemem(nt);
	}
}

/* How many steps a claim may take now; 0: none (a job that finishes frees room and asks again). */
static int claim_room(const struct engine *e)
{
	int room = (e->type->flags & EXF_NO_SLOTS) ? e->o.claim_batch : e->o.max_jobs - e->njobs - e->inflight;

	if (room <= 0 || e->draining || (e->claim_held && e->claim_step == 0))
		return 0;
	return room > e->o.claim_batch ? e->o.claim_batch : room;
}

int engine_claim_ask(struct engine *e, struct store_claim_ask *ask)
{
	memset(ask, 0, sizeof(*ask));
	if ((ask->limit = claim_room(e)) == 0)
		return 0;
	/*
	 * a claim that will be made whatever the finish makes ready covers the
	 * notifications so far; one that may not (ferry_finish_claim's claim
	 * only when the finish made a step ready) honours them first, and is
	 * then made whatever: none is lost
	 */
	if (!e->claim_now)
		drain_notifies(e, NOTIFY_HONOUR);
	if (e->claim_now) {
		drain_notifies(e, NOTIFY_BEFORE_CLAIM);
		engine_task_due_later(e, &poll_task, clock_mono_ms()); /* a claim is made: the fallback's is not due */
	}
	ask->host = e->host;
	ask->always = e->claim_now;
	ask->lease_ms = e->o.lease_ms;
	ask->run_filter = e->o.run_filter;
	ask->step_filter = e->claim_held ? e->claim_step : 0;
	ask->capacity = host_admission_now(e->admission, &e->admission_net, &e->hold_seen);
	return 1;
}

int engine_claimed(struct engine *e, struct store_claim *c, int n, int room)
{
	if (n > 0 && e->claim_held)
		e->claim_step = 0; /* let go: held again */
	metrics_add(M_STEPS_DISPATCHED, (uint64_t)n);
	/* a full batch means there may be more: come back without waiting */
	e->claim_now = n == room;
	drain_notifies(e, NOTIFY_AFTER_CLAIM);
	if (n == room && n >= 50)
		refresh_statistics(e);
	engine_dirs_ahead(e, c, n);
	for (int i = 0; i < n; i++) {
		struct step_work *w;
		if (c[i].inputs_text == NULL) {
			store_claim_parse(&c[i]);
			start_job(e, &c[i], NULL);
			continue;
		}
		/* the step handlers may be slow (webhooks, copies, fingerprints): off the loop, its JSON parsed there too */
		w = xcalloc(1, sizeof(*w));
		step_result_init(&w->res);
		w->w.run = step_work_run;
		w->e = e;
		w->c = xmalloc(sizeof(*w->c));
		*w->c = c[i];
		memset(&c[i], 0, sizeof(c[i])); /* moved */
		w->dir = exec_attempt_dir(e->home, w->c->run_id, w->c->name, w->c->attempt);
		{
			/* one worker per outside service the kind's work waits on (workers.h) */
			const struct step_kind *k = w->c->kind ? step_kind_find(w->c->kind) : NULL;
			if (k && k->lane) {
				store_claim_parse(w->c);
				if (k->lane(w->c->spec, w->w.lane, sizeof(w->w.lane)) == NULL)
					w->w.lane[0] = '\0';
			}
		}
		submit_work(e, w);
	}
	store_claims_free(c, n);
	return engine_flush_records(e, 0);
}

static int claim(struct engine *e)
{
	struct store_claim_ask ask;
	struct store_claim *c = NULL;
	int n = 0, error;
	int64_t t0;

	if (!engine_claim_ask(e, &ask)) {
		e->claim_now = 0;
		return FERRY_OK;
	}
	t0 = clock_mono_us();
	error = store_claim(&c, &n, e->conn, e->owner, ask.host, ask.limit, ask.lease_ms, ask.run_filter,
			    ask.step_filter, ask.capacity);
	metrics_observe(H_CLAIM, (double)(clock_mono_us() - t0) / 1e6);
	flog_debug("claimed %d steps in %lld us", n, (long long)(clock_mono_us() - t0));
	if (error < 0) {
		flog_error("claiming ready steps: %s", ferry_error_last());
		return engine_db_failed(e, error);
	}
	return engine_claimed(e, c, n, ask.limit);
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

	poll_jobs(e, now);
	take_work(e);
	engine_check_timeouts(e, now);

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
	drain_notifies(e, NOTIFY_HONOUR);
	while (e->deferred && now >= e->next_deferred) {
		struct work *w = e->deferred;
		e->deferred = w->next;
		workers_submit(e->workers, w); /* still counted in flight */
		if (e->deferred == NULL)
			e->next_deferred = now + 1000; /* a worker that cannot connect: not in a loop */
	}
	if (now >= e->db_retry_at && (engine_flush_records(e, 0) < 0 || engine_flush_done(e) < 0))
		goto next;
	write_notes(e);
	if (e->retry_wall_ms && clock_wall_ms() >= e->retry_wall_ms) {
		e->retry_wall_ms = 0;
		e->claim_now = 1;
	}
	engine_run_tasks(e, now);
	if (PQstatus(e->conn) != CONNECTION_OK)
		goto next;
	if (e->claim_now && now >= e->db_retry_at) {
		if (claim(e) < 0)
			goto next;
		if ((e->type->flags & EXF_NO_SLOTS) && engine_flush_done(e) < 0)
			goto next;
	}
	if (e->stop_check && e->njobs > 0)
		engine_stop_jobs(e);
	else
		e->stop_check = 0;
next:
	now = clock_mono_ms();
	/* results to write, unless a batch is being closed on the pool: its end wakes the loop */
	if ((e->claim_now || (e->ndone > 0 && !e->finishing)) && now >= e->db_retry_at) {
		wait = 0;
	} else {
		if (e->claim_now || (e->ndone > 0 && !e->finishing))
			wait = min64(max_wait_ms, e->db_retry_at - now);
		else
			wait = max_wait_ms;
		wait = min64(wait, engine_next_task(e) - now);
		if (e->retry_wall_ms)
			wait = min64(wait, e->retry_wall_ms - clock_wall_ms() + 1);
		if (e->deferred)
			wait = min64(wait, e->next_deferred - now);
		if (e->nrecs > 0) /* a late record's own write, not before a failed write may be tried again */
			wait = min64(wait, (engine_records_due(e) > e->db_retry_at ? engine_records_due(e) : e->db_retry_at) - now);
		for (int i = 0; i < e->njobs; i++) {
			const struct exec_job *j = e->jobs[i];
			wait = min64(wait, e->next_adopted_poll - now); /* every job looked at every 200 ms */
			if (j->deadline_ms && !j->killing)
				wait = min64(wait, j->deadline_ms - now);
			if (j->killing && !j->killed_hard)
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
		drain_notifies(e, NOTIFY_HONOUR);
	return PQstatus(e->conn) == CONNECTION_OK ? FERRY_OK : FERRY_EDB;
}

void engine_release(struct engine *e)
{
	e->draining = 1; /* what is left is written here, on the loop's connection */
	poll_jobs(e, clock_mono_ms());
	take_work(e);
	/* a batch being closed on the pool is waited for (10 s at most): its results are written */
	for (int i = 0; i < 1000 && e->finishing; i++) {
		usleep(10 * 1000);
		take_work(e);
	}
	engine_flush_records(e, 1);
	engine_flush_done(e);
	if (e->njobs > 0) {
		flog_info("handing %d running job%s over through their leases", e->njobs,
			  e->njobs == 1 ? "" : "s");
		if (store_release(e->conn, e->owner) < 0)
			flog_error("releasing leases: %s", ferry_error_last());
	}
	/* a clean stop: this daemon's host row says so (the host task wrote it; a dev session has none) */
	if (!e->o.run_filter && store_host_stopped(e->conn, e->owner) < 0)
		flog_warn("marking this daemon stopped in daemons: %s", ferry_error_last());
	engine_step_down(e, "shutting down");
}

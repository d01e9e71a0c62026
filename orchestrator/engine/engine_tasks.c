/*
 * engine_tasks — the engine's periodic tasks that are not the loop's own
 * (claim, lease, election and recovery stay in engine.c): waits that time
 * out, completion webhooks, log retention, dev sessions' leases, stray and
 * orphaned containers, deployments' reconcile, schedules and triggers. Each
 * is one bounded round, run by engine.c's task table when due; what is slow
 * goes to the worker pool, one round of each kind at a time (its flag in
 * struct engine), and comes back through its done callback on the loop.
 * engine_task_work_free frees any of their pool items that never came back
 * (shutdown).
 */
#include "engine/engine_priv.h"

#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "engine/notify.h"
#include "deploy/reconcile.h"
#include "engine/retention.h"
#include "schedule/schedules.h"
#include "store/store.h"
#include "lib/util.h"
#include "store/workers.h"

void task_expire_waits(struct engine *e)
{
	int ready = 0;

	if (store_expire_waits(&ready, e->conn, e->owner) < 0)
		flog_error("ending timed-out waits: %s", ferry_error_last());
	else if (ready > 0)
		e->claim_now = 1;
}

/* A completion post came back (its worker recorded how it went). */
static void notify_done(struct work *w, void *ctx)
{
	struct engine *e = ctx;

	e->notifying--;
	notify_work_free(w);
}

/* FERRY_NOTIFY_WEBHOOK: posts the runs that ended (notify.h), one round at a time. */
void task_notify(struct engine *e)
{
	const char *url = getenv("FERRY_NOTIFY_WEBHOOK");
	json_t *runs = NULL, *run;
	size_t i;

	if (url == NULL || *url == '\0' || e->workers == NULL || e->notifying > 0)
		return;
	if (store_runs_to_notify(&runs, e->conn, 32) < 0) {
		flog_error("runs to notify: %s", ferry_error_last());
		return;
	}
	json_array_foreach(runs, i, run) {
		struct work *w = notify_work_new(url, e->o.public_url, json_deep_copy(run));
		w->done = notify_done;
		workers_submit(e->workers, w);
		e->notifying++;
	}
	json_decref(runs);
}

/* A retention round came back (its worker removed and marked what was due). */
static void retention_done(struct work *w, void *ctx)
{
	struct engine *e = ctx;

	e->retaining = 0;
	retention_work_free(w);
}

/*
 * FERRY_RETENTION_DAYS: hands a bounded batch of runs whose logs are due for
 * removal to the pool (retention.h); one round at a time. Without a pool
 * (FERRY_WORKERS=0) the round runs here.
 */
void task_retention(struct engine *e)
{
	struct work *w;
	int64_t *ids = NULL;
	int n = 0;

	if (e->o.retention_days <= 0 || e->retaining)
		return;
	if (store_runs_retention_due(&ids, &n, e->conn, e->o.retention_days, RETENTION_BATCH) < 0) {
		flog_error("runs due for retention: %s", ferry_error_last());
		return;
	}
	if (n == 0) {
		free(ids);
		return;
	}
	w = retention_work_new(e->home, e->o.retention_days, ids, n);
	w->done = retention_done;
	if (e->workers == NULL) {
		w->run(w, e->conn);
		retention_work_free(w);
		return;
	}
	workers_submit(e->workers, w);
	e->retaining = 1;
}

/* A dev session renews the lease it holds on its run while it lives. */
void task_dev_lease(struct engine *e)
{
	if (e->o.run_filter > 0 && store_dev_lease_renew(e->conn, e->o.run_filter, e->o.lease_ms) < 0)
		flog_error("renewing the dev session's lease: %s", ferry_error_last());
}

/* The leader stops dev runs whose `ferry dev` died (their lease expired). */
void task_dev_expire(struct engine *e)
{
	int n = 0;

	if (store_dev_expire(&n, e->conn, e->owner) < 0)
		flog_error("stopping dev runs whose session ended: %s", ferry_error_last());
	else if (n > 0) {
		flog_info("stopped %d dev run%s whose session ended", n, n == 1 ? "" : "s");
		e->stop_check = 1;
	}
}

static void orphans_done(struct work *w, void *ctx)
{
	struct engine *e = ctx;
	int n = exec_orphans_removed(w);

	if (n > 0)
		flog_info("removed %d container%s whose attempt was over", n, n == 1 ? "" : "s");
	e->orphaning = 0;
	exec_orphans_work_free(w);
}

/*
 * Containers still running whose attempt is over (exec_orphans.c): each
 * type lists its runtime's and the database judges, on the worker pool
 * (listing containers is slow); one sweep at a time.
 */
void task_orphans(struct engine *e)
{
	struct work *w;

	if (e->orphaning || e->workers == NULL)
		return;
	w = exec_orphans_work_new(e->home);
	w->done = orphans_done;
	workers_submit(e->workers, w);
	e->orphaning = 1;
}

static void reconcile_done(struct work *w, void *ctx)
{
	struct engine *e = ctx;

	e->reconciling = 0;
	reconcile_work_free(w);
}

/*
 * Deployments (reconcile.c): the replicas and HAProxy made to match the
 * database, on the worker pool; one round at a time, on the leader.
 */
void task_reconcile(struct engine *e)
{
	struct work *w;

	if (e->reconciling || e->workers == NULL) {
		flog_debug("reconcile: a round is still in the pool");
		return;
	}
	w = reconcile_work_new(e->home, e->owner);
	w->done = reconcile_done;
	workers_submit(e->workers, w);
	e->reconciling = 1;
}

static void schedules_done(struct work *w, void *ctx)
{
	struct engine *e = ctx;

	e->scheduling--;
	schedules_work_free(w);
}

/*
 * Schedules and triggers (schedules.c): the due ticks fired or skipped,
 * each once, on the worker pool; one round at a time, on the leader.
 */
void task_schedules(struct engine *e)
{
	/* as many parts in parallel as the pool has threads: 1,000 fires due at one minute go faster */
	int parts = e->o.workers > 0 ? (int)e->o.workers : 1;

	if (e->scheduling)
		return;
	for (int part = 0; part < parts; part++) {
		struct work *w = schedules_work_new(e->home, part, parts);
		if (e->workers == NULL) { /* no pool: done here */
			w->run(w, e->conn);
			schedules_work_free(w);
			continue;
		}
		w->done = schedules_done;
		workers_submit(e->workers, w);
		e->scheduling++;
	}
}

/*
 * Each executor type's tick also runs when no job of ours ended (it runs on
 * every SIGCHLD): after a restart with nothing running, the leftovers of
 * the jobs of a crash (a container that ended while no daemon was there)
 * are swept within seconds, not at the next job's end.
 */
void task_strays(struct engine *e)
{
	exec_tick_all(e->home);
}

void engine_task_work_free(struct work *w)
{
	if (w->done == retention_done)
		retention_work_free(w);
	else if (w->done == orphans_done)
		exec_orphans_work_free(w);
	else if (w->done == reconcile_done)
		reconcile_work_free(w);
	else if (w->done == schedules_done)
		schedules_work_free(w);
	else
		notify_work_free(w);
}

/*
 * engine_table — the periodic tasks' table (tasks[]: the rows of
 * store/task.h, in the order they run when due) and what runs it for
 * engine_tick(): when each row is due, which rows apply (TASK_LEADER,
 * TASK_NO_DEV), a round's items to the worker pool counted per row
 * (TASK_POOL: one round at a time), and each row's state from its open to
 * its close. The rows are elsewhere: the loop's own in engine_tasks.c,
 * the other folders' duties in their folders.
 */
#include "engine/engine_priv.h"
#include "engine/copies.h"
#include "engine/host.h"

#include <stdlib.h>

#include "deploy/reconcile.h"
#include "engine/notify.h"
#include "engine/preempt.h"
#include "engine/retention.h"
#include "exec/exec.h"
#include "lib/metrics.h"
#include "lib/util.h"
#include "monitor/monitor.h"
#include "schedule/schedules.h"
#include "store/workers.h"

/*
 * The periodic tasks, run in this order when due; each run is counted in
 * /metrics as ferry_periodic_runs_total{task="NAME"}. How to add one: a
 * file that exports its row (store/task.h: name, flags, period, a round
 * that does one bounded piece of work on the loop and returns the slow
 * part as pool items, their free) from the folder whose work it is, and
 * its pointer here. TASK_LEADER when exactly one replica may do it at a
 * time (cron, auto-stop, deployment reconcile); TASK_NO_DEV when a `ferry
 * dev` session must not; TASK_POOL for one round at a time.
 */
static const struct task *const tasks[] = {
	&poll_task,
	&heartbeat_task,
	&host_task,         /* this daemon's host: capacity, address, heartbeat (host.c) */
	&copies_task,       /* FERRY_ARTIFACT_COPIES: blobs kept on that many hosts (copies.c) */
	&elect_task,
	&recover_task,
	&reap_task,
	&expire_waits_task,
	&notify_task,       /* FERRY_NOTIFY_WEBHOOK (notify.c) */
	&dev_lease_task,    /* a dev session: renew its run's lease */
	&dev_expire_task,   /* dead dev sessions */
	&retention_task,    /* FERRY_RETENTION_DAYS (retention.c) */
	&strays_task,       /* each executor type's leftovers (exited containers) */
	&exec_orphans_task, /* running containers of finished attempts (exec_orphans.c) */
	&reconcile_task,    /* deployments: replicas, HAProxy, auto-stop (reconcile.c) */
	&replicas_task,     /* this host's replicas, kept by one daemon per host (reconcile.c) */
	&monitor_task,      /* hang detection, watchpoints, low utilization (monitor.c) */
	&preempt_task,      /* preemptible steps stopped for a higher-priority one (preempt.c) */
	&schedules_task,    /* cron, data and git triggers (schedules.c) */
};
#define NTASKS (sizeof(tasks) / sizeof(tasks[0]))

/* The row's place in tasks[] (the engine's per-row arrays). */
static size_t task_index(const struct task *t)
{
	for (size_t i = 0; i < NTASKS; i++)
		if (tasks[i] == t)
			return i;
	abort(); /* a row that is not in the table made an item: a programming error */
}

/* The round's context, as of now. */
static struct task_ctx *task_ctx(struct engine *e)
{
	e->tc.conn = e->conn;
	e->tc.jobs = e->jobs;
	e->tc.njobs = e->njobs;
	return &e->tc;
}

/* A row's item back on the loop (or done at once without a pool): its row applies and frees it. */
void engine_task_work_done(struct engine *e, struct work *w)
{
	const struct task *t = w->task;
	size_t i = task_index(t);

	if (e->workers)
		e->task_inflight[i]--;
	if (t->done)
		t->done(task_ctx(e), e->task_state[i], w);
	t->free(w);
}

/* task_ctx.submit: item w of row t to the pool, counted for t; done here without a pool. */
static void task_submit(struct task_ctx *c, const struct task *t, struct work *w)
{
	struct engine *e = engine_of(c);

	w->task = t;
	w->done = NULL;
	w->next = NULL;
	if (e->workers == NULL) {
		w->run(w, e->conn);
		engine_task_work_done(e, w);
		return;
	}
	workers_submit(e->workers, w);
	e->task_inflight[task_index(t)]++;
}

/* task_ctx.kill: the monitor's verdict on a job (restart or fail it), with the reason recorded. */
static void task_kill(struct task_ctx *c, int64_t step_id, int attempt, enum attempt_outcome outcome, int final,
		      char *reason)
{
	struct engine *e = engine_of(c);

	for (int i = 0; i < e->njobs; i++) {
		struct exec_job *j = e->jobs[i];
		if (j->step_id == step_id && j->attempt == attempt && !j->killing) {
			engine_kill_job(e, j, outcome, reason);
			j->kill_final = final;
			return;
		}
	}
	free(reason);
}

int engine_tasks_inflight(const struct engine *e)
{
	int n = 0;

	for (size_t i = 0; i < NTASKS; i++)
		n += e->task_inflight[i];
	return n;
}

void engine_tasks_init(struct engine *e)
{
	e->task_next = xcalloc(NTASKS, sizeof(*e->task_next));
	e->task_slot = xcalloc(NTASKS, sizeof(*e->task_slot));
	e->task_inflight = xcalloc(NTASKS, sizeof(*e->task_inflight));
	e->task_state = xcalloc(NTASKS, sizeof(*e->task_state));
	for (size_t i = 0; i < NTASKS; i++)
		e->task_slot[i] = metrics_task_slot(tasks[i]->name);
}

/* The rounds' context, then each row's state (a row's open may fail the start). */
int engine_tasks_open(struct engine *e)
{
	int error;

	e->tc = (struct task_ctx){
		.home = e->home, .owner = e->owner, .host = e->host, .dev = e->o.run_filter != 0,
		.admits = e->admission != NULL,
		.public_url = e->o.public_url,
		.poll_ms = e->o.poll_ms, .lease_ms = e->o.lease_ms,
		.retention_days = e->o.retention_days, .retention_period_ms = e->o.retention_period_ms,
		.nworkers = e->o.workers, .workers = e->workers,
		.submit = task_submit, .kill = task_kill,
	};
	for (size_t i = 0; i < NTASKS; i++)
		if (tasks[i]->open && (error = tasks[i]->open(&e->task_state[i], task_ctx(e))) < 0)
			return error;
	return FERRY_OK;
}

/* After the pool's items were freed: each row's state. */
void engine_tasks_close(struct engine *e)
{
	for (size_t i = 0; e->task_state && i < NTASKS; i++)
		if (tasks[i]->close && e->task_state[i])
			tasks[i]->close(e->task_state[i]);
}

void engine_task_due_now(struct engine *e, const struct task *t)
{
	e->task_next[task_index(t)] = 0;
}

/* A claim just happened: the polling fallback is due a full period from now. */
void engine_task_due_later(struct engine *e, const struct task *t, int64_t now)
{
	e->task_next[task_index(t)] = now + t->period(&e->tc);
}

static int task_applies(const struct engine *e, const struct task *t)
{
	if ((t->flags & TASK_NO_DEV) && e->o.run_filter)
		return 0;
	return !(t->flags & TASK_LEADER) || e->leading;
}

/* Runs the tasks that are due; returns the monotonic ms the next one is. */
int64_t engine_run_tasks(struct engine *e, int64_t now)
{
	int64_t next = INT64_MAX;

	for (size_t i = 0; i < NTASKS; i++) {
		const struct task *t = tasks[i];
		if (!task_applies(e, t))
			continue;
		if (now >= e->task_next[i]) {
			int64_t p = t->period(&e->tc);
			e->task_next[i] = now + (p > 0 ? p : 1);
			if ((t->flags & TASK_POOL) && e->task_inflight[i] > 0) {
				flog_debug("%s: a round is still in the pool", t->name);
			} else {
				struct task_ctx *c = task_ctx(e);
				struct work *w = t->start_round(c, e->task_state[i]), *next_w;
				for (; w; w = next_w) {
					next_w = w->next;
					task_submit(c, t, w);
				}
			}
			metrics_task_ran(e->task_slot[i]);
			if (PQstatus(e->conn) != CONNECTION_OK)
				break;
		}
		if (e->task_next[i] < next)
			next = e->task_next[i];
	}
	return next;
}

/* The monotonic ms the next applicable task is due. */
int64_t engine_next_task(const struct engine *e)
{
	int64_t next = INT64_MAX;

	for (size_t i = 0; i < NTASKS; i++)
		if (task_applies(e, tasks[i]) && e->task_next[i] < next)
			next = e->task_next[i];
	return next;
}

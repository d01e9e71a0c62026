/*
 * engine_priv — what the engine's files (engine.c: the loop, the claim, the
 * jobs and the task table; engine_tasks.c: the periodic tasks beyond the
 * loop's own; engine_recover.c: orphaned attempts) share:
 * the engine's state and the queues results and handles wait in until one
 * statement writes them. Not for use outside the engine.
 */
#ifndef FERRY_ENGINE_PRIV_H
#define FERRY_ENGINE_PRIV_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

#include "engine/engine.h"
#include "exec/exec.h"
#include "plan/kind.h"
#include "lib/states.h"
#include "store/store.h"

struct done {
	struct store_result r;
	char *reason;           /* owned; r.reason points here */
	struct step_result res; /* owned: outputs, metrics, gate, cached_from */
	char *cache_key;        /* owned */
};

/* A started job's handle (or a finished-at-claim attempt's directory) to record. */
struct record {
	int64_t step_id;
	int attempt;
	const char *executor; /* a type's name (static) or NULL */
	char *handle;         /* JSON text or NULL; owned */
	char *dir;            /* owned, or NULL */
};

struct engine_task;

struct engine {
	struct engine_opts o;
	char *conninfo, *owner, *host, *home;
	PGconn *conn;
	PGconn *lead;          /* the election's own session: holds the leader lock when leading */
	int leading;
	const struct exec_type *type; /* the executor of this daemon's jobs */
	struct exec_job **jobs; /* by pointer: a job never moves (its type's priv stays valid) */
	int njobs, capjobs;
	struct done *done;
	int ndone, capdone;
	struct record *recs;   /* handles not yet in the database */
	int nrecs, caprecs;
	struct workers *workers; /* the pool for slow step work, or NULL (done inline) */
	int inflight;          /* items in the pool: claimed steps not yet started or finished */
	int notifying;         /* completion posts in the pool (notify.h) */
	int retaining;         /* a retention round in the pool (retention.h) */
	int reconciling;       /* a deployments' reconcile round in the pool (reconcile.c) */
	int orphaning;         /* an orphan-container sweep in the pool (exec_orphans.c) */
	int monitoring;        /* the job monitor's items in the pool (monitor.c) */
	int scheduling;        /* rounds of schedules and triggers in the pool (schedules.c), one per part */
	struct monitor *monitor;
	struct work *deferred; /* items that found the database unreachable: submitted again */
	int64_t next_deferred; /* … at most once a second */
	int claim_now, stop_check, draining;
	int claim_held;        /* engine_claim_hold: claim nothing… */
	int64_t claim_step;    /* … but this step (> 0), once (ferry dev run --step) */
	int64_t next_reconnect, next_adopted_poll;
	int64_t *task_next;    /* per periodic task: monotonic ms it is due */
	int *task_slot;        /* … and its counter in /metrics */
	int64_t retry_wall_ms; /* earliest known retry (wall clock), 0 none */
	int64_t last_analyze;  /* monotonic ms of our last ANALYZE, 0 never */
};

/* Queues how an attempt ended (written with the next ferry_finish); takes reason. */
void engine_push_done(struct engine *e, int64_t step_id, int attempt, enum attempt_outcome outcome,
		      int exit_code, int signal, char *reason);

/* Queues a record of a started attempt's handle and directory; takes handle and dir. */
void engine_push_record(struct engine *e, int64_t step_id, int attempt, const char *executor,
			char *handle, char *dir);

/* A new job of type t in e->jobs (counted once the caller increments njobs; else exec_job_free it). */
struct exec_job *engine_new_job(struct engine *e, const struct exec_type *t);

/* What a job's end needs: {kind, spec, workdir, inputs, run, cache_key}; a new reference. */
json_t *engine_job_ctx(const char *kind, const json_t *spec, const char *workdir, const json_t *inputs,
		       const json_t *run, const char *cache_key);

/* A job exited 0: its kind's job_done (inline or on the pool), then its result queued. */
void engine_job_succeeded(struct engine *e, int64_t step_id, int64_t run_id, int attempt, const char *name,
			  const char *dir, const json_t *ctx);

/* engine_recover.c: adopts this host's orphans (mine) or reaps other hosts' expired ones. */
void engine_orphans(struct engine *e, int mine);

/* engine_tasks.c: the periodic tasks in engine.c's table, each one bounded round */
void task_expire_waits(struct engine *e);
void task_notify(struct engine *e);
void task_retention(struct engine *e);
void task_dev_lease(struct engine *e);
void task_dev_expire(struct engine *e);
void task_orphans(struct engine *e);
void task_reconcile(struct engine *e);
void task_schedules(struct engine *e);
void task_strays(struct engine *e);
/* Frees a pool item of those tasks that never came back (shutdown). */
struct work;
void engine_task_work_free(struct work *w);

#endif

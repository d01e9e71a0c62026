/*
 * engine_priv — what the engine's files (engine.c: the loop, the claim, the
 * jobs and the task table; engine_tasks.c: the engine's own periodic tasks
 * beyond the loop's; engine_recover.c: orphaned attempts) share:
 * the engine's state and the queues results and handles wait in until one
 * statement writes them. Not for use outside the engine.
 */
#ifndef FERRY_ENGINE_PRIV_H
#define FERRY_ENGINE_PRIV_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "exec/exec.h"
#include "plan/kind.h"
#include "lib/states.h"
#include "store/store.h"
#include "store/task.h"

struct done {
	struct store_result r;
	char *reason;           /* owned; r.reason points here */
	struct step_result res; /* owned: outputs, metrics, gate, cached_from */
	char *cache_key;        /* owned */
	char *rec_handle, *rec_dir; /* owned: the start record written with it (r.handle, r.dir) */
};

/* A started job's handle (or a finished-at-claim attempt's directory) to record. */
struct record {
	int64_t step_id;
	int attempt;
	const char *executor; /* a type's name (static) or NULL */
	char *handle;         /* JSON text or NULL; owned */
	char *dir;            /* owned, or NULL */
	int64_t due_ms;       /* written on its own from then (mono ms; 0: at once), else with its result */
};

struct engine {
	struct task_ctx tc;    /* what a periodic task's round sees (engine_of: back to the engine) */
	struct engine_opts o;
	char *conninfo, *owner, *host, *home;
	PGconn *conn;
	PGconn *lead;          /* the election's own session: holds the leader lock when leading */
	int leading;
	const struct exec_type *type; /* the executor of this daemon's jobs */
	/*
	 * What the claim admits against (host_admission: this host's CPUs,
	 * memory, GPU ids), or NULL: no admission (a type that admits its own
	 * jobs or takes no slot, a dev session). gpus: the host's GPUs as
	 * detected ([{"index", "uuid"?}]), for the jobs' environment.
	 * admission_net: admission less what this host's replicas ask for
	 * (host_replicas_hold, version hold_seen), NULL while they ask for none.
	 */
	json_t *admission, *gpus, *admission_net;
	unsigned hold_seen;
	struct exec_job **jobs; /* by pointer: a job never moves (its type's priv stays valid) */
	int njobs, capjobs;
	struct done *done;
	int ndone, capdone;
	struct record *recs;   /* handles not yet in the database */
	int nrecs, caprecs;
	struct workers *workers; /* the pool for slow step work, or NULL (done inline) */
	int inflight;          /* items in the pool: claimed steps not yet started or finished */
	int finishing;         /* a batch of results being closed on the pool (engine_finish.c) */
	int finish_on_loop;    /* the pool failed a batch: the loop writes the next */
	struct work *deferred; /* items that found the database unreachable: submitted again */
	int64_t next_deferred; /* … at most once a second */
	/* dirs_ahead.c: the runs whose steps' directories were made ahead, and its items out */
#define AHEAD_RUNS 256
	int64_t ahead_runs[AHEAD_RUNS];
	int ahead_next, ahead_out;
	int claim_now, stop_check, draining;
	int claim_held;        /* engine_claim_hold: claim nothing… */
	int64_t claim_step;    /* … but this step (> 0), once (ferry dev run --step) */
	int64_t next_reconnect, next_adopted_poll;
	/* a claim or a write failed with the connection up: neither is tried again before this (mono ms) */
	int64_t db_retry_at;
	/* per periodic task, parallel to engine_table.c's tasks[]: */
	int64_t *task_next;    /* the monotonic ms it is due */
	int *task_slot;        /* its counter in /metrics */
	int *task_inflight;    /* its items in the pool (deferred ones too) */
	void **task_state;     /* what its open made, or NULL */
	int64_t retry_wall_ms; /* earliest known retry (wall clock), 0 none */
	int64_t last_analyze;  /* monotonic ms of our last ANALYZE, 0 never */
};

/* Queues how an attempt ended (written with the next ferry_finish); takes reason. */
void engine_push_done(struct engine *e, int64_t step_id, int attempt, enum attempt_outcome outcome,
		      int exit_code, int signal, char *reason);

/*
 * Writes the queued results (engine_finish.c): one ferry_finish on the loop's
 * connection, or a large batch handed to the pool; FERRY_OK or the error
 * (engine_db_failed has delayed the next try).
 */
int engine_flush_done(struct engine *e);

/*
 * engine.c: what a claim now would ask (*ask), with the notifications before
 * it taken; 0 when no claim may be made now (no room, draining, held).
 */
int engine_claim_ask(struct engine *e, struct store_claim_ask *ask);
/* engine.c: steps c (n, of room asked) just claimed: started or handed to the pool; frees c. */
int engine_claimed(struct engine *e, struct store_claim *c, int n, int room);
/* Frees w when it is a batch of results the pool did not hand back; 0 when it is not one. */
int engine_finish_work_drop(struct work *w);

/*
 * dirs_ahead.c: for each of the n steps just claimed that is the first of
 * its run claimed here, the directories of the run's other steps made on
 * the pool, ahead of their claims.
 */
void engine_dirs_ahead(struct engine *e, const struct store_claim *c, int n);
/* Frees w when it is one of those items the pool did not hand back; 0 when it is not one. */
int engine_dirs_ahead_drop(struct work *w);

/* A statement failed: counts it, delays the next try by the poll period, notes a lost connection. */
int engine_db_failed(struct engine *e, int error);

/* engine_records.c: queues a record of a started attempt's handle and directory; takes handle and dir. */
void engine_push_record(struct engine *e, int64_t step_id, int attempt, const char *executor,
			char *handle, char *dir);

/* engine_records.c: the record just pushed is a late one (LATE_RECORD_MS). */
void engine_record_later(struct engine *e);

/* engine_records.c: the queued start records of results d (n) move into them, to be written with them. */
void engine_attach_records(struct engine *e, struct done *d, int n);

/* engine_records.c: when the first queued record is due (mono ms; 0: now), INT64_MAX when none is queued. */
int64_t engine_records_due(const struct engine *e);

/*
 * engine_records.c: writes the queued records that are due (all of them
 * with all) in one statement; late records not yet due stay queued. On
 * failure they stay queued and the next tick (after a reconnect) writes
 * them again: a handle is never only logged, and recovery can also find it
 * in the attempt directory.
 */
int engine_flush_records(struct engine *e, int all);

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

/* The engine a periodic task's round context belongs to (the engine's own rows). */
static inline struct engine *engine_of(struct task_ctx *c)
{
	return (struct engine *)(void *)((char *)c - offsetof(struct engine, tc));
}

/* Kills job j (SIGTERM, SIGKILL after the grace); its attempt ends as outcome; takes reason. */
void engine_kill_job(struct engine *e, struct exec_job *j, enum attempt_outcome outcome, char *reason);

/* engine_kill.c: each job past its timeout is killed; one killed past its grace gets SIGKILL. */
void engine_check_timeouts(struct engine *e, int64_t now);

/* engine_kill.c: the jobs of attempts whose runs were stopped are killed (their attempts end stopped). */
void engine_stop_jobs(struct engine *e);

/* engine_tasks.c: the engine's own periodic tasks, rows of engine_table.c's table */
extern const struct task poll_task, heartbeat_task, elect_task, recover_task, reap_task;
extern const struct task expire_waits_task, dev_lease_task, dev_expire_task, strays_task;
/* … the periods they share */
int64_t task_every_third_lease(const struct task_ctx *c);
int64_t task_every_half_lease(const struct task_ctx *c);
/* … and leadership given up (the election's session closed): why is logged */
void engine_step_down(struct engine *e, const char *why);

/* engine_table.c: the table's per-row arrays (init), each row's state (open, close) */
void engine_tasks_init(struct engine *e);
int engine_tasks_open(struct engine *e);
void engine_tasks_close(struct engine *e);
/* Runs the rows that are due; returns the monotonic ms the next one is. */
int64_t engine_run_tasks(struct engine *e, int64_t now);
/* The monotonic ms the next applicable row is due. */
int64_t engine_next_task(const struct engine *e);
/* Row t due at once, or a full period after now. */
void engine_task_due_now(struct engine *e, const struct task *t);
void engine_task_due_later(struct engine *e, const struct task *t, int64_t now);
/* The rows' items in the pool; one back on the loop: its row applies and frees it. */
int engine_tasks_inflight(const struct engine *e);
void engine_task_work_done(struct engine *e, struct work *w);

#endif

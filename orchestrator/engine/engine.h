/*
 * engine — the dispatcher loop of one ferryd (or of `ferry dev`): claims
 * ready steps in batches, starts them on an executor, reaps and times them
 * out, closes finished attempts in batched transactions, renews leases,
 * re-adopts or re-dispatches the attempts of dead owners, and kills the jobs
 * of stopped runs. Single-threaded; woken by LISTEN/NOTIFY, SIGCHLD and a
 * polling fallback.
 */
#ifndef FERRY_ENGINE_H
#define FERRY_ENGINE_H

#include <signal.h>
#include <stdint.h>

struct engine_opts {
	const char *home;      /* state directory: runs/ live here */
	const char *executor;  /* an executor type's name (exec.h): "local" (default), "noop"
	                        * (benchmarks only), … */
	int max_jobs;          /* concurrent jobs of this daemon */
	int claim_batch;       /* steps claimed per statement */
	int64_t lease_ms;      /* attempt lease; renewed every lease/3 */
	int64_t poll_ms;       /* polling fallback */
	int64_t kill_grace_ms; /* SIGTERM → SIGKILL */
	int64_t run_filter;    /* only this run's steps (dev mode); 0 = all */
	int workers;           /* threads for slow step work (FERRY_WORKERS); 0 = on the loop */
	struct health *health; /* where to say whether this replica leads (/readyz, /metrics); may be NULL */
	const char *public_url; /* where the API answers (links in notifications); may be NULL */
	double retention_days; /* FERRY_RETENTION_DAYS: finished runs' logs go after this; 0 never, < 0 invalid */
	int64_t retention_period_ms; /* FERRY_RETENTION_PERIOD_MS: how often the leader looks (an hour) */
};

struct engine;

/* Fills opts with defaults, overridden by FERRY_* environment variables. */
void engine_opts_default(struct engine_opts *opts);

/* Connects (LISTEN) and sets up; *out is the caller's (engine_free). */
int engine_new(struct engine **out, const struct engine_opts *opts, const char *conninfo);
void engine_free(struct engine *e);

/* The fd to watch for signals: write a byte to wake the engine. */
int engine_wake_fd(struct engine *e);

/*
 * One iteration: does what is due, then waits at most max_wait_ms for work.
 * Returns 0, or FERRY_EDB while the database is unreachable (it keeps trying).
 */
int engine_tick(struct engine *e, int64_t max_wait_ms);

/*
 * Stepping through a dev run: while held, the engine claims nothing, except
 * the one step engine_claim_one() lets go (once it is claimed the engine is
 * held again). Not held by default.
 */
void engine_claim_hold(struct engine *e, int hold);
void engine_claim_one(struct engine *e, int64_t step_id);

/* Stops claiming; engine_jobs() tells how many jobs are still running. */
void engine_drain(struct engine *e);
int engine_jobs(const struct engine *e);

/* Gives the leases of running jobs up so another daemon adopts them. */
void engine_release(struct engine *e);


/* Our owner id: "host/pid/start". */
const char *engine_owner(const struct engine *e);

/* Tells the engine a child may have exited (call from a SIGCHLD handler). */
void engine_sigchld(void);

#endif

/*
 * task — the row type of the engine's table of periodic tasks, and the
 * context a round receives. It sits here, beside the worker pool, so that
 * the folders below the engine (deploy/ reconcile, monitor/, schedule/,
 * exec/ orphans) declare their own rows without knowing the engine; the
 * table (an array of row pointers) is the engine's (engine.c), and
 * orchestrator/README.md ("Table 3") lists it.
 *
 * A round starts on the engine's loop when the row is due: start_round
 * does what is quick there and returns the slow part as worker-pool items
 * (workers.h), a list through their next, or NULL. The engine submits
 * them tagged with their row (work.task), counts them per row, and when
 * one comes back calls the row's done (on the loop) and then its free;
 * items never taken back (shutdown) go to free alone. Without a pool
 * (FERRY_WORKERS=0) the engine runs each item at once on its own
 * connection, then done and free. A row that must not do its work on the
 * loop returns NULL when ctx->workers is NULL.
 */
#ifndef FERRY_TASK_H
#define FERRY_TASK_H

#include <libpq-fe.h>
#include <stdint.h>

#include "lib/states.h"
#include "store/workers.h"

struct exec_job; /* exec/exec.h: the engine's running jobs, a read-only view */
struct task;

/*
 * What a round may use: the engine's state it reads, and two ways back
 * into the engine. Owned by the engine; valid while it lives (conn, jobs
 * and njobs as of this call).
 */
struct task_ctx {
	PGconn *conn;                /* the engine's connection, up when a round starts */
	const char *home;            /* FERRY_HOME, absolute */
	const char *owner;           /* this daemon's owner id: the actor of what its tasks change */
	const char *host;            /* this daemon's host name (FERRY_HOST, else the machine's) */
	int dev;                     /* a `ferry dev` session (it runs one run; TASK_NO_DEV rows do not) */
	int admits;                  /* whether its claims admit by this host's room (engine.h: not Slurm's) */
	const char *public_url;      /* FERRY_PUBLIC_URL (links in posts), or NULL */
	int64_t poll_ms, lease_ms;   /* FERRY_POLL_MS, FERRY_LEASE_MS */
	double retention_days;       /* FERRY_RETENTION_DAYS (0: keep forever) */
	int64_t retention_period_ms; /* FERRY_RETENTION_PERIOD_MS */
	int nworkers;                /* FERRY_WORKERS: the pool's threads */
	struct workers *workers;     /* the pool, or NULL */
	struct exec_job *const *jobs; /* the running jobs of this daemon (read only) */
	int njobs;
	/* Hands item w of row t to the pool now, counted for t (or runs it here without a pool). */
	void (*submit)(struct task_ctx *c, const struct task *t, struct work *w);
	/* Kills the running attempt (step_id, attempt) with outcome; final: no retry; takes reason. */
	void (*kill)(struct task_ctx *c, int64_t step_id, int attempt, enum attempt_outcome outcome, int final,
		     char *reason);
};

enum {
	TASK_LEADER = 1u << 0, /* runs on the elected leader alone */
	TASK_NO_DEV = 1u << 1, /* not in a dev session (`ferry dev`: the engine's run filter set) */
	TASK_POOL = 1u << 2,   /* one round at a time: none starts while the last one's items are out */
};

/* A row of the table. Each callback but start_round and period may be NULL. */
struct task {
	const char *name; /* ferry_periodic_runs_total{task="NAME"} in /metrics */
	unsigned flags;
	/* How long until the row is due again (ms, >= 1). */
	int64_t (*period)(const struct task_ctx *c);
	/* At the engine's start: the row's state (*state, NULL by default); < 0 with the message fails the start. */
	int (*open)(void **state, struct task_ctx *c);
	/* At the engine's end, after every item came back or was freed: releases state. */
	void (*close)(void *state);
	/* One bounded round on the loop; returns the items for the pool (a list through next), or NULL. */
	struct work *(*start_round)(struct task_ctx *c, void *state);
	/* On the loop, an item of the row came back (done on the pool): applies its result. */
	void (*done)(struct task_ctx *c, void *state, struct work *w);
	/* Frees an item of the row, whether done or not. */
	void (*free)(struct work *w);
};

#endif

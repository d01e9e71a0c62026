/*
 * health — what this daemon says about itself beyond "the process answers":
 * a few flags set by whoever knows them (ferryd's start-up while it waits
 * for the database, the engine, later the leader election) and read by the
 * API's /readyz and /metrics. Setting and reading never block: every flag
 * is an atomic, the reason text is behind a mutex held for a copy.
 */
#ifndef FERRY_HEALTH_H
#define FERRY_HEALTH_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/util.h"

struct health {
	atomic_int engine_running;  /* 1 once the engine runs (database reached and migrated) */
	atomic_int leader;          /* -1 no election on this replica (yet); 0 a follower; 1 the leader */
	atomic_llong db_attempts;   /* start-up attempts to reach the database so far */
	pthread_mutex_t mu;
	char waiting[512];          /* why the engine is not running ("" once it is) */
};

/* Starts h: not running, no election, waiting for the database. */
void health_init(struct health *h);
void health_dispose(struct health *h);

/* Records why the engine does not run yet (one more start-up attempt failed). */
void health_waiting(struct health *h, const char *fmt, ...) FERRY_PRINTF(2, 3);

/* The engine runs (or, with 0, no longer does: shutting down). */
void health_set_running(struct health *h, int running);

/* Leader election: 1 leads, 0 follows, -1 none. */
void health_set_leader(struct health *h, int leader);

/*
 * Whether the daemon itself is ready to serve (what /readyz asks before it
 * pings the database): 1, or 0 with the reason copied into why.
 */
int health_ready(struct health *h, char *why, size_t n);

/* Appends its Prometheus lines (ferry_engine_running, ferry_leader, …) to *buf (metrics_appendf). */
void health_render(struct health *h, char **buf, size_t *len, size_t *cap);

#endif

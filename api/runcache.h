/*
 * runcache — the JSON of finished runs (succeeded, failed, stopped), kept in
 * the daemon so GET /api/v1/runs/{id} of a finished run needs no database
 * round trip. Bounded in entries and bytes (least recently used goes first),
 * safe to use from every API thread.
 *
 * Coherence: a finished run changes only when it is retried, deleted
 * (DELETE /runs/{id}) or its logs are removed by retention (logs_removed_at),
 * each of which updates or deletes its row. Migration 0005_run_cache adds a trigger that
 * then sends NOTIFY ferry_run with the run id; a listener thread with its own
 * connection (application_name ferryd-run-cache) drops that entry. While the
 * listener is not connected, nothing is cached and the cache is empty: it is
 * flushed on every disconnect and re-enabled only once LISTEN is in place.
 *
 * Whatever changes a finished run's steps or attempts without updating its
 * runs row must update the row too (or NOTIFY ferry_run with its id), or the
 * cache keeps the old JSON; today nothing does (a finished run has no open
 * step, and a retry updates the row).
 *
 * The read race (a reader fetches a finished run, a retry commits and its
 * notification is processed, then the reader inserts the stale JSON) is
 * closed by an epoch: every invalidation bumps it; a reader takes it with
 * runcache_epoch() before its database fetch and runcache_put() refuses the
 * insert when it has moved since.
 */
#ifndef FERRY_RUNCACHE_H
#define FERRY_RUNCACHE_H

#include <stddef.h>
#include <stdint.h>

struct runcache;

/* One cached JSON text: immutable, reference-counted (runcache_json_release). */
struct runcache_json {
	size_t len;
	const char *data; /* NUL-terminated */
};

/*
 * Creates a cache of at most max_entries runs and max_bytes of JSON (0 and
 * 0: a cache that never holds anything). It starts disabled: nothing is
 * stored until runcache_listen_start() has its LISTEN in place, or
 * runcache_enable() is called (tests). *out is the caller's (runcache_free).
 */
int runcache_new(struct runcache **out, size_t max_entries, size_t max_bytes);

/* Stops the listener if any and frees everything; accepts NULL. */
void runcache_free(struct runcache *c);

/*
 * Starts the listener thread on its own connection to conninfo; it
 * reconnects with backoff by itself. Returns 0 even when the database is
 * down (the cache then stays disabled until the listener gets through).
 */
int runcache_listen_start(struct runcache *c, const char *conninfo);

/* The current epoch: read it before fetching a run from the database. */
uint64_t runcache_epoch(struct runcache *c);

/*
 * The cached JSON of run id with one reference taken for the caller, or
 * NULL. The caller releases it with runcache_json_release().
 */
const struct runcache_json *runcache_get(struct runcache *c, int64_t id);
void runcache_json_release(const struct runcache_json *j);

/*
 * Stores a copy of json (len bytes) for run id if the cache is enabled and
 * no invalidation happened since epoch was read; replaces an older entry.
 * The caller must only put runs in a terminal state. 1 if stored, else 0.
 */
int runcache_put(struct runcache *c, int64_t id, const char *json, size_t len, uint64_t epoch);

/* Drops run id (this daemon changed it, or a notification said so). */
void runcache_invalidate(struct runcache *c, int64_t id);

/*
 * Turns caching on or off. Both bump the epoch; off also drops everything
 * (the listener turns it off whenever its connection is not up).
 */
void runcache_enable(struct runcache *c, int enabled);

/* Counters for /metrics and tests. */
struct runcache_stats {
	uint64_t hits, misses, inserts, invalidations, flushes, evictions;
	size_t entries, bytes;
	int enabled;
};
void runcache_stats(struct runcache *c, struct runcache_stats *out);

#endif

/*
 * workers — a small bounded pool of threads for the work the daemon does
 * itself and that may be slow: a label step's webhook with its retries, a
 * registry copy of a large artifact, a dataset's fingerprint, and later
 * HAProxy changes and health checks. The dispatcher hands such work over
 * and keeps dispatching; a finished item comes back through workers_take()
 * after a byte on the engine's wake pipe, and the engine queues its result
 * like a job's (so it is fenced by ferry_finish like a job's).
 *
 * Each worker keeps its own database connection (db_connect, reconnected
 * before an item when it broke), so an item may read and write through the
 * store while the dispatcher uses its own.
 */
#ifndef FERRY_WORKERS_H
#define FERRY_WORKERS_H

#include <libpq-fe.h>

/*
 * One item. Embed it first in a struct of your own. run is called on a
 * worker thread; done, on the thread that takes the item back (the
 * engine's), with the context it passes to workers_take's caller. An item
 * whose run set again (the database was unreachable) is handed back to be
 * submitted again later rather than done. An item of a periodic task
 * (task.h) has task set, by the engine, and no done: its row applies and
 * frees it.
 */
struct task;
struct work {
	/* Does the work with the worker's connection (NULL when the database is unreachable). */
	void (*run)(struct work *w, PGconn *conn);
	/* Applies the result and frees the item. */
	void (*done)(struct work *w, void *ctx);
	const struct task *task; /* the periodic task whose round made it (task.h), or NULL */
	/*
	 * What outside service the item waits on ("" for none): at most one item
	 * per lane runs at a time, and one whose lane is busy waits in the queue
	 * without a worker, so a service that never answers holds one worker,
	 * not all of them (a label webhook's host: kind.h's lane hook).
	 */
	char lane[160];
	int again;
	struct work *next;
};

struct workers;

/*
 * Starts n threads (n >= 1) connecting with conninfo; a finished item
 * writes a byte to wake_fd. *out is the caller's (workers_free).
 */
int workers_new(struct workers **out, int n, const char *conninfo, int wake_fd);

/* Queues w (the pool holds it until workers_take returns it). */
void workers_submit(struct workers *p, struct work *w);

/* The finished items, oldest first, as a list the caller owns; NULL when none. */
struct work *workers_take(struct workers *p);

/* Items submitted and not yet taken back. */
int workers_pending(struct workers *p);

/*
 * Finishes the queued items, stops the threads and frees the pool; items
 * not taken back are handed to drop (may be NULL) so their owner frees them.
 */
void workers_free(struct workers *p, void (*drop)(struct work *w));

#endif

/*
 * engine_finish — the results of attempts: queued as jobs end or step
 * handlers decide (engine_push_done), then closed in batches by one
 * ferry_finish (engine_flush_done): on the loop's connection, together
 * with the claim the loop would make next (ferry_finish_claim, one
 * transaction: a chain of 40 /bin/true steps, its jobs' directories on
 * tmpfs, paired: median 132 -> 122 ms), or, for a large batch (a fan-out's
 * items), on a worker's while the loop claims the next batch. Moved out of
 * engine.c (past 1,200 lines) with the batch on the pool; see the design
 * note at FINISH_ON_POOL.
 */
#include "engine/engine_priv.h"

#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "lib/metrics.h"
#include "lib/states.h"
#include "lib/util.h"
#include "store/store.h"
#include "store/workers.h"

/* A new slot at the end of the queue, its contents the caller's to fill. */
static struct done *done_slot(struct engine *e)
{
	if (e->ndone == e->capdone) {
		e->capdone = e->capdone ? e->capdone * 2 : 64;
		e->done = xrealloc(e->done, (size_t)e->capdone * sizeof(*e->done));
	}
	return &e->done[e->ndone++];
}

/* Queues how an attempt ended; written by the next flush. */
void engine_push_done(struct engine *e, int64_t step_id, int attempt, enum attempt_outcome outcome,
		      int exit_code, int sig, char *reason)
{
	struct done *d = done_slot(e);

	memset(d, 0, sizeof(*d));
	step_result_init(&d->res);
	d->reason = reason;
	d->r.step_id = step_id;
	d->r.attempt = attempt;
	d->r.outcome = outcome;
	d->r.exit_code = exit_code;
	d->r.signal = sig;
	d->r.reason = reason;
}

/* The results of d (n of them) written: their owned parts freed (not the array). */
static void done_dispose(struct done *d, int n)
{
	for (int i = 0; i < n; i++) {
		free(d[i].reason);
		step_result_dispose(&d[i].res);
		free(d[i].cache_key);
		free(d[i].rec_handle);
		free(d[i].rec_dir);
	}
}

/* What a ferry_finish that closed results asks of the loop: a claim, a retry's wake-up. */
static void finished(struct engine *e, int n, int ready, int64_t retry)
{
	metrics_add(M_STEPS_FINISHED, (uint64_t)n);
	if (ready > 0)
		e->claim_now = 1;
	if (retry > 0 && (e->retry_wall_ms == 0 || retry < e->retry_wall_ms))
		e->retry_wall_ms = retry;
}

/*
 * A large batch of results (a fan-out's items: FINISH_ON_POOL or more) is
 * closed on a worker's connection, so that the loop claims the next batch on
 * its own while PostgreSQL closes this one: two backends at work where one
 * alternated between the two statements. One batch at a time (e->finishing);
 * results that come meanwhile wait for the next flush. A batch that could not
 * be written goes back to the queue, for the loop to write (the next batch
 * too: the pool is tried again once the loop has written one). Small batches (a
 * chain's one result) stay on the loop: a hand-over would only add to a hop.
 */
#define FINISH_ON_POOL 64

struct finish_work {
	struct work w;
	const char *owner;       /* the engine's */
	struct done *d;          /* owned: the batch */
	int n;
	int error, ready;
	int64_t retry, us;
	char *why;               /* owned: the error's message */
};

static void finish_work_run(struct work *w, PGconn *conn)
{
	struct finish_work *f = (struct finish_work *)w;
	struct store_result *v = xmalloc((size_t)f->n * sizeof(*v));
	int64_t t0 = clock_mono_us();

	for (int i = 0; i < f->n; i++)
		v[i] = f->d[i].r;
	if (EXEC_FAULT("finish-pool")) {
		f->error = FERRY_EDB;
		f->why = xstrdup("fault injected: closing results on the pool failed");
	} else if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
		f->error = FERRY_EDB;
		f->why = xstrdup("the worker's connection is down");
	} else if ((f->error = store_finish(conn, f->owner, v, f->n, &f->ready, &f->retry)) < 0) {
		f->why = xstrdup(ferry_error_last());
	}
	f->us = clock_mono_us() - t0;
	free(v);
}

static void finish_work_free(struct finish_work *f)
{
	if (f->d)
		done_dispose(f->d, f->n);
	free(f->d);
	free(f->why);
	free(f);
}

/* Back on the loop: the batch is closed, or back in the queue. */
static void finish_work_done(struct work *w, void *ctx)
{
	struct engine *e = ctx;
	struct finish_work *f = (struct finish_work *)w;

	e->finishing = 0;
	metrics_observe(H_FINISH, (double)f->us / 1e6);
	flog_debug("finished %d attempts in %lld us on the pool, %d steps ready", f->n, (long long)f->us, f->ready);
	if (f->error < 0) {
		flog_error("recording %d finished attempts: %s", f->n, f->why ? f->why : "?");
		for (int i = 0; i < f->n; i++)
			*done_slot(e) = f->d[i];
		free(f->d);
		f->d = NULL;
		e->finish_on_loop = 1; /* until the loop has written a batch: a pool that keeps failing is not tried again and again */
		engine_db_failed(e, f->error);
	} else {
		finished(e, f->n, f->ready, f->retry);
	}
	finish_work_free(f);
}

/*
 * The results on the loop's connection: with the claim the tick would make
 * next when one may be made (ferry_finish_claim: one transaction, one round
 * trip), else alone.
 */
int engine_flush_done(struct engine *e)
{
	int ready = 0, error, nc = 0, ask_claim;
	int64_t retry = 0, t0, claim_us = -1;
	struct store_result *v;
	struct store_claim_ask ask;
	struct store_claim *c = NULL;

	if (e->ndone == 0 || e->finishing)
		return FERRY_OK;
	/* the start records of the attempts closed here that are not written yet: written with them */
	engine_attach_records(e, e->done, e->ndone);
	if (e->ndone >= FINISH_ON_POOL && e->workers && !e->draining && !e->finish_on_loop) {
		struct finish_work *f = xcalloc(1, sizeof(*f));
		f->w.run = finish_work_run;
		f->w.done = finish_work_done;
		f->owner = e->owner;
		f->d = e->done;
		f->n = e->ndone;
		e->done = NULL;
		e->ndone = e->capdone = 0;
		e->finishing = 1;
		workers_submit(e->workers, &f->w);
		return FERRY_OK;
	}
	v = xmalloc((size_t)e->ndone * sizeof(*v));
	for (int i = 0; i < e->ndone; i++)
		v[i] = e->done[i].r;
	ask_claim = engine_claim_ask(e, &ask);
	t0 = clock_mono_us();
	if (ask_claim && EXEC_FAULT("finish-claim")) {
		ferry_error_set("fault injected: closing results with a claim failed");
		error = FERRY_EDB;
	} else if (ask_claim)
		error = store_finish_claim(e->conn, e->owner, v, e->ndone, &ready, &retry, &ask, &c, &nc, &claim_us);
	else
		error = store_finish(e->conn, e->owner, v, e->ndone, &ready, &retry);
	t0 = clock_mono_us() - t0;
	metrics_observe(H_FINISH, (double)(claim_us > 0 ? t0 - claim_us : t0) / 1e6);
	if (claim_us >= 0)
		metrics_observe(H_CLAIM, (double)claim_us / 1e6);
	/* (not "claimed 0 steps": the idle polls' words, which failure logs leave out) */
	if (nc > 0)
		flog_debug("finished %d attempts, %d steps ready, and claimed %d steps in %lld us (one call: %lld us)",
			   e->ndone, ready, nc, (long long)claim_us, (long long)t0);
	else
		flog_debug("finished %d attempts in %lld us, %d steps ready%s", e->ndone, (long long)t0, ready,
			   claim_us >= 0 ? ", none claimed" : "");
	free(v);
	if (error < 0) {
		flog_error("recording %d finished attempts: %s", e->ndone, ferry_error_last());
		return engine_db_failed(e, error);
	}
	done_dispose(e->done, e->ndone);
	finished(e, e->ndone, ready, retry);
	e->ndone = 0;
	e->finish_on_loop = 0;
	if (!ask_claim)
		return FERRY_OK;
	if (nc > 0)
		EXEC_FAULT("claimed"); /* committed: steps claimed, their jobs not started */
	return engine_claimed(e, c, nc, ask.limit);
}

/* Frees w when it is a batch of results (at shutdown, not taken back); 0 when it is not one. */
int engine_finish_work_drop(struct work *w)
{
	if (w->done != finish_work_done)
		return 0;
	finish_work_free((struct finish_work *)w);
	return 1;
}

/*
 * engine_records — the records of started attempts (executor, handle,
 * directory) on their way to the database: queued as jobs start, written in
 * one statement per tick (store_attempts_started), or with their attempts'
 * ends (engine_attach_records). Moved out of engine.c with the late records.
 */
#include "engine/engine_priv.h"

#include <stdint.h>
#include <stdlib.h>

#include "exec/exec.h"
#include "lib/util.h"
#include "store/store.h"

/*
 * Late records: the start of a job whose executor finds it without its
 * handle (EXF_LATE_RECORD: local) is not written on its own at once but
 * LATE_RECORD_MS later, and only if the job still runs then; a job that
 * ended sooner has it written by the statement that closes it
 * (ferry_finish's p_executor, p_handle, p_dir), in the same transaction.
 * A chain of short steps paid a transaction, a WAL flush and a round
 * trip more per step for a record that its end followed within a
 * millisecond (bench_dispatch --chain 40, job directories on tmpfs,
 * paired: median 164 -> 136 ms with every record left out, the bound;
 * 185 -> 142 ms with this and the spare shim, exec_spare.c). While it waits, the attempt's directory is where
 * exec_attempt_dir says (the API's log reads it there), and a daemon killed
 * meanwhile leaves the job to be found there, as one killed between the
 * start and the record always could (t_seams).
 */
#define LATE_RECORD_MS 100

/* Queues a record of a started attempt; takes handle and dir. */
void engine_push_record(struct engine *e, int64_t step_id, int attempt, const char *executor,
			char *handle, char *dir)
{
	struct record *r;

	if (e->nrecs == e->caprecs) {
		e->caprecs = e->caprecs ? e->caprecs * 2 : 64;
		e->recs = xrealloc(e->recs, (size_t)e->caprecs * sizeof(*e->recs));
	}
	r = &e->recs[e->nrecs++];
	r->step_id = step_id;
	r->attempt = attempt;
	r->executor = executor;
	r->handle = handle;
	r->dir = dir;
	r->due_ms = 0;
}

void engine_record_later(struct engine *e)
{
	e->recs[e->nrecs - 1].due_ms = clock_mono_ms() + LATE_RECORD_MS;
}

void engine_attach_records(struct engine *e, struct done *d, int n)
{
	int k = 0;

	if (e->nrecs == 0)
		return;
	for (int i = 0; i < n; i++) {
		if (d[i].r.executor || d[i].r.handle || d[i].r.dir)
			continue;
		for (int j = 0; j < e->nrecs; j++) {
			struct record *r = &e->recs[j];
			if (r->step_id != d[i].r.step_id || r->attempt != d[i].r.attempt)
				continue;
			d[i].rec_handle = r->handle;
			d[i].rec_dir = r->dir;
			d[i].r.executor = r->executor;
			d[i].r.handle = r->handle;
			d[i].r.dir = r->dir;
			r->step_id = 0; /* taken */
			r->handle = r->dir = NULL;
			k++;
			break;
		}
	}
	if (k == 0)
		return;
	k = 0;
	for (int j = 0; j < e->nrecs; j++)
		if (e->recs[j].step_id != 0)
			e->recs[k++] = e->recs[j];
	e->nrecs = k;
}

int64_t engine_records_due(const struct engine *e)
{
	int64_t due = INT64_MAX;

	for (int i = 0; i < e->nrecs; i++)
		if (e->recs[i].due_ms < due)
			due = e->recs[i].due_ms;
	return due;
}

int engine_flush_records(struct engine *e, int all)
{
	struct store_started *st;
	int64_t now = clock_mono_ms();
	int error, n = 0, k = 0;

	if (e->nrecs == 0 || (!all && engine_records_due(e) > now))
		return FERRY_OK;
	st = xmalloc((size_t)e->nrecs * sizeof(*st));
	for (int i = 0; i < e->nrecs; i++)
		if (all || e->recs[i].due_ms <= now)
			st[n++] = (struct store_started){e->recs[i].step_id, e->recs[i].attempt, e->recs[i].executor,
							 e->recs[i].handle, e->recs[i].dir};
	if (EXEC_FAULT("record")) {
		ferry_error_set("fault injected: recording started attempts failed");
		error = FERRY_EDB;
	} else {
		error = store_attempts_started(e->conn, e->owner, st, n);
	}
	free(st);
	if (error < 0) {
		flog_error("recording %d started attempts (kept, written again after the reconnect): %s",
			   n, ferry_error_last());
		EXEC_FAULT("record-failed");
		return engine_db_failed(e, error);
	}
	for (int i = 0; i < e->nrecs; i++) {
		if (all || e->recs[i].due_ms <= now) {
			free(e->recs[i].handle);
			free(e->recs[i].dir);
		} else {
			e->recs[k++] = e->recs[i];
		}
	}
	e->nrecs = k;
	return FERRY_OK;
}


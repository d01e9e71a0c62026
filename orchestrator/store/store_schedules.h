/*
 * store_schedules — the SQL of schedules and triggers (schedules.md): the
 * rows a registered workflow's schedule: and triggers: become, the due
 * schedules the leader reads, the ticks and fires it writes (each under its
 * occasion's unique key, in the transaction that creates the run: see
 * runs_create's occasion hook, called by store_run_write), and what the
 * API shows. Times are unix seconds; JSON answers are text the caller
 * frees.
 */
#ifndef FERRY_STORE_SCHEDULES_H
#define FERRY_STORE_SCHEDULES_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

/* A schedule as the leader and the API read it. */
struct sched_row {
	int64_t id;
	char *workflow, *name, *source, *cron, *timezone, *gap, *overlap, *concurrency, *catchup;
	int max_catchup, paused;
	json_t *params;
	int64_t next_at; /* 0: never again */
	char *created_by, *updated_by; /* who made it, who changed it last (NULL: nobody yet) */
};
void sched_row_dispose(struct sched_row *r);

/*
 * The schedules with a tick due at the database's now (*now), oldest
 * first, at most limit, of those whose id % parts is part (rounds in
 * parallel take one part each); *rows the caller's (sched_row_dispose
 * each, free).
 */
int store_sched_due(struct sched_row **rows, int *n, int64_t *now, PGconn *conn, int limit, int part, int parts);

/*
 * Accounts ticks [0, n) of schedule id as skipped, each with its reason,
 * and moves next_at from at[0] to next (0: never) — if it still is at[0]
 * (else 1: someone else accounted for them or the schedule changed;
 * nothing written). One transaction.
 */
int store_sched_skip(PGconn *conn, int64_t id, const int64_t *at, const char *const *reasons, int n,
		     int64_t next);

/*
 * The occasion hook of a scheduled run (store.h): inserts the fired tick
 * (schedule, nominal) with the run and moves next_at from nominal to next.
 * Answers 1 when the tick exists (another leader fired it: *dup set) or
 * next_at moved (the schedule changed), so the run is rolled back.
 */
struct sched_occasion {
	int64_t id, nominal, next;
	const char *reason; /* "caught up" or NULL */
	int dup;            /* set: the tick was there already */
};
int store_sched_occasion(PGconn *conn, int64_t run_id, void *arg);

/* BEGIN, COMMIT or ROLLBACK of a round's batch of fires (schedules.c). */
int store_sched_tx(PGconn *conn, const char *cmd);

/* A later try at a tick already accounted for: counted on its row (the bench's duplicates), and the schedule moved past it to next (0: never). */
int store_sched_duplicate(PGconn *conn, int64_t id, int64_t nominal, int64_t next);

/* The unfinished runs of schedule id; *ids the caller's. */
int store_sched_running(int64_t **ids, int *n, PGconn *conn, int64_t id);

/*
 * Registration: the source='workflow' schedules and the triggers of
 * workflow made to match its spec's "schedules" and "triggers" (rows of
 * names no longer there deleted). next_of(cron, tz, gap, overlap) gives a
 * new or changed schedule's first fire (0: never). In the caller's
 * transaction.
 */
int store_sched_sync(PGconn *conn, const char *workflow, const json_t *spec, const char *actor,
		     int64_t (*next_of)(const json_t *sched));

/* API: a schedule from POST /schedules (fields checked by the caller); *id. */
int store_sched_create(int64_t *id, PGconn *conn, const struct sched_row *r, const char *actor);
/* API: one schedule by id (FERRY_ENOTFOUND). */
int store_sched_get(struct sched_row *r, PGconn *conn, int64_t id);
/*
 * API: the editable fields of r written; next_at as given when set_next
 * (a new timing), else as the database has it (the leader may have moved
 * it since r was read); FERRY_ENOTFOUND.
 */
int store_sched_update(PGconn *conn, const struct sched_row *r, int set_next, const char *actor);
/* API: deletes schedule id, leaving what it was in the audit trail under actor; FERRY_ENOTFOUND. */
int store_sched_delete(PGconn *conn, int64_t id, const char *actor);
/* API: {"schedules":[…]} newest first. */
int store_sched_list(char **out, PGconn *conn);
/* API: the ticks of schedule id, newest first, at most limit, nominal before `before` (0: any). */
int store_sched_ticks(json_t **out, PGconn *conn, int64_t id, int limit, int64_t before);
/* The schedule's row as JSON (no ticks). */
json_t *sched_row_json(const struct sched_row *r);

/* ---- triggers ---- */

/*
 * Every trigger with its workflow's registered directory: [{"id",
 * "workflow","name","kind","spec","state","paused","workdir","running"}],
 * running true while a run it started is unfinished; a new reference.
 */
int store_triggers_load(json_t **out, PGconn *conn);

/*
 * The occasion hook of a triggered run (store.h): the fire (trigger, key)
 * inserted with the run, and the trigger's state moved from seq to state
 * (which holds seq + 1). Answers 1 when the key was taken (*dup set) or the
 * state moved (another leader fired), so the run is rolled back.
 */
struct trigger_occasion {
	int64_t id, seq;
	const char *key, *state, *detail, *via;
	int dup;
};
int store_trigger_occasion(PGconn *conn, int64_t run_id, void *arg);

/* The state moved from seq to state without a run (a baseline, a touch): 1 when it had moved. */
int store_trigger_state(PGconn *conn, int64_t id, int64_t seq, const char *state);

/* A fire not made (key, why): recorded once, with the state moved from seq to state when state is not NULL. */
int store_trigger_skip(PGconn *conn, int64_t id, const char *key, const char *reason, const char *detail,
		       const char *via, int64_t seq, const char *state);

/* A later try at a key already fired, counted on its row. */
int store_trigger_duplicate(PGconn *conn, int64_t id, const char *key);

/*
 * API: {"triggers":[{id, workflow, name, kind, spec, paused, since,
 * watching (its baseline is taken), fingerprint, files, commit, fires:
 * the newest `fires` fires}]}.
 */
int store_triggers_list(char **out, PGconn *conn, int fires);
/* API: pause or resume trigger id; *out its JSON as listed. FERRY_ENOTFOUND. */
int store_trigger_pause(char **out, PGconn *conn, int64_t id, int paused, const char *actor);

#endif

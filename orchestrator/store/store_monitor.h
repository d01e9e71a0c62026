/*
 * store_monitor — the job monitor's statements (monitor.md, migration
 * 0016): the row that says what the monitor sees of an attempt now, its
 * monitor.* events, the count of hang restarts in a row, and the API's
 * read of it all.
 */
#ifndef FERRY_STORE_MONITOR_H
#define FERRY_STORE_MONITOR_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

/*
 * Writes attempt (step_id, attempt)'s row: every field of f that is not
 * NULL (json fields: objects or arrays, not taken). state and why always.
 */
struct store_monitor_row {
	int64_t step_id, run_id;
	int attempt;
	const char *state, *why, *phase;
	const json_t *config, *samples, *gpus, *series, *watch, *evidence;
};
int store_monitor_put(PGconn *conn, const struct store_monitor_row *f);

/*
 * The row and event kind of its attempt of step (detail, not taken) in one
 * transaction (its own, or the caller's when conn is in one): a verdict
 * (monitor.hung) is never in the row without its event, or the other way.
 */
int store_monitor_put_event(PGconn *conn, const struct store_monitor_row *f, const char *step, const char *actor,
			    const char *kind, const json_t *detail);

/* Appends event kind (monitor.suspected, monitor.hung, …) of a step's attempt with detail (not taken). */
int store_monitor_event(PGconn *conn, int64_t run_id, const char *step, int attempt, const char *actor,
			const char *kind, const json_t *detail);

/*
 * How many attempts of step_id right before attempt were ended by the
 * monitor for the same cause (their reason begins with prefix: "hung: ").
 */
int store_monitor_restarts(int *n, PGconn *conn, int64_t step_id, int attempt, const char *prefix);

/*
 * The monitor's view of run's step (its attempt, or the latest when
 * attempt <= 0): {"run","step","attempt","state","why","phase","config",
 * "samples","gpus","series","watch","evidence","started_at","updated_at",
 * "step_state","events":[…monitor.* events of the step…]}. FERRY_ENOTFOUND
 * when the run or step does not exist; a step never monitored answers
 * with state "none".
 */
int store_monitor_get(json_t **out, PGconn *conn, int64_t run_id, const char *step, int attempt);

/* The latest monitor state of each step of a run: {"STEP":{"state","why","attempt"}}. */
int store_monitor_states(json_t **out, PGconn *conn, int64_t run_id);

#endif

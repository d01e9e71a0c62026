/*
 * store_ui — what the web console's server side (api/api_stream.c) reads that
 * no other statement gives cheaply: a run's change marker and workflow hash,
 * and a step's resolved spec (the command as it ran).
 */
#ifndef FERRY_STORE_UI_H
#define FERRY_STORE_UI_H

#include <libpq-fe.h>
#include <stdint.h>

/*
 * What changes whenever the run's JSON (store_run_json) changes state: the
 * run's state and open step count, and its newest event id (every step
 * transition, continue, retry and stop writes an event in the transaction
 * that makes it). One row by primary key plus one index probe
 * (events_run): cheap enough to ask five times a second per stream.
 */
struct store_run_marker {
	char state[16];        /* pending, running, stopping, succeeded, failed, stopped */
	int64_t open_steps;
	int64_t last_event;    /* 0: none yet */
	char workflow_hash[72]; /* the workflow version the run runs (hex sha256) */
};

/* Fills *out for run id: 0, FERRY_ENOTFOUND, or FERRY_EDB (message set). */
int store_run_marker(struct store_run_marker *out, PGconn *conn, int64_t id);

/* *last: the newest event id of all runs (0: none): what the runs list's stream watches. 0 or FERRY_EDB. */
int store_events_marker(int64_t *last, PGconn *conn);

/*
 * *json (caller frees): {"run", "name", "kind", "state", "spec"} of step
 * `step` of run id, spec being what the plan resolved for it (command with
 * params rendered, env, workdir, executor and placement): 0,
 * FERRY_ENOTFOUND (no such run or step), or FERRY_EDB.
 */
int store_step_spec(char **json, PGconn *conn, int64_t id, const char *step);

/*
 * *json (caller frees): the items of foreach step `step` of run id —
 * {"run", "step", "total", "done", "succeeded", "failed", "active",
 * "offset", "items": [{"index", "name", "state", "attempts", "item",
 * "reason", "exit_code", "outputs", "cached", "started_at",
 * "finished_at"}]} — limit of them in item order from offset, only those
 * in state when it is not NULL: 0, FERRY_ENOTFOUND (no such run or step,
 * or a step with no items), or FERRY_EDB.
 */
int store_step_items(char **json, PGconn *conn, int64_t id, const char *step, int64_t offset, int limit,
		     const char *state);

/*
 * *json (caller frees): run id's timeline for the console's Gantt chart,
 * db/functions/timeline.sql's ferry_run_timeline — {"run", "state",
 * "created_at", "started_at", "finished_at", "now", "rows": [{"step",
 * "kind", "state", "attempts_left_out", "items", "bars": [{"kind",
 * "attempt", "state", "from", "to"}]}]}, one row per step, a fan-out's
 * items collapsed into its row: 0, FERRY_ENOTFOUND (no such run), or
 * FERRY_EDB.
 */
int store_run_timeline(char **json, PGconn *conn, int64_t id);

#endif

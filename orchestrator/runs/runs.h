/*
 * runs — the runs service: the one way runs are made. POST /runs, `ferry
 * dev run`, the benchmark, schedules and triggers all call runs_create,
 * which reserves the run's id, has the planner make the run (plan.h) and
 * has the store write it (store.h) in one transaction. It sits above the
 * store and below everything that makes runs (orchestrator/runs/README.md).
 */
#ifndef FERRY_RUNS_H
#define FERRY_RUNS_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

#include "plan/config.h"

/*
 * A run to create: the workflow, params and dev subset go to the planner
 * (plan.h); the rest says who starts it and how (the store's
 * struct store_run_row). Nothing here is taken over.
 */
struct runs_new {
	const char *yaml;     /* workflow text, or NULL with workflow set */
	size_t yaml_len;
	const char *filename; /* for messages */
	const char *workflow; /* name of a registered workflow (its newest version); the run
	                       * runs in its registered directory when workdir is NULL */
	const json_t *params; /* object or NULL */
	const char *trigger;  /* api, cli, dev, schedule, data, git, bench */
	const char *actor;
	const char *workdir;  /* directory commands run in, or NULL */
	const char *only, *from, *to; /* dev subset: at most one; NULL for all */
	const char *idem_key;  /* Idempotency-Key, or NULL */
	const char *idem_hash; /* sha256 of the request body, with idem_key */
	int no_cache;          /* no step of this run comes from the step cache */
	int no_retries;        /* its steps are not tried again when they fail, whatever their
	                        * retry: says (a dev run fails fast unless --retries) */
	int *retries_dropped;  /* with no_retries: where to write how many steps had a retry:
	                        * that was not applied, or NULL */
	/* --only/--from dev subsets: the steps above the selection (plan.h's
	 * reuse) take their results from run reuse_run, or, when 0, from the
	 * newest run of the same workflow in which they all succeeded. */
	int64_t reuse_run;
	int reuse_anyway;      /* reuse results made from other inputs (params, the step's
	                        * command, …) too, marked so in their reason; else such a run
	                        * is not reused and the error says what differs */
	int64_t *reused_from;  /* where to write the run reused (0: none), or NULL */
	int64_t dev_lease_ms;  /* > 0: a dev session's lease on the run, renewed by
	                        * store_dev_lease_renew (dev runs only) */
	/* Schedules and triggers (schedules.h): what started the run
	 * (runs.origin, shown by ferry get) and which schedule or trigger it
	 * belongs to, or NULL and 0. */
	const json_t *origin;
	const json_t *offered; /* values for the declared params of these names (plan.h) */
	int64_t schedule_id, trigger_id;
	/* Called in the run's transaction once the run is written: 0 goes on
	 * to commit; > 0 rolls back and runs_create returns 2 with *out_id 0
	 * (the occasion was someone else's already); < 0 rolls back with that
	 * error. NULL: none. */
	int (*occasion)(PGconn *conn, int64_t run_id, void *arg);
	void *occasion_arg;
	/* The caller holds a transaction (BEGIN … COMMIT around several
	 * runs): the run is written under a savepoint and released, not
	 * committed; nothing of it is kept when it fails or its occasion is
	 * taken, and the caller's other writes stay; the caller sends
	 * NOTIFY ferry_ready before it commits (once for all its runs: the
	 * dispatchers claim them then). Not with idem_key. */
	int in_tx;
	const char **bad_field; /* where to write the request field a FERRY_EINVALID is
	                         * about when it is not the YAML nor the params
	                         * ("workdir": a command's file is not there), or NULL */
};

/*
 * Creates a run. Reserves the run's id from the runs sequence
 * (store_run_id_reserve), plans the run with it (run_plan_make: parse,
 * validate, render, initial states; no SQL) and writes the plan in one
 * transaction (store_run_write): workflow version, run, steps with their
 * waits/restage flags, edges, the run.created event. Before writing, the
 * files the steps' commands name are looked for where the steps will run
 * (run_plan_check_files): one missing is FERRY_EINVALID with *bad_field
 * "workdir". Invalid YAML: FERRY_EINVALID with errs filled; other bad
 * input: FERRY_EINVALID or FERRY_ENOTFOUND with the message in
 * ferry_error_last(); nothing stored (an id may have been taken from the
 * sequence). With an idempotency key already used (checked before
 * planning, and again at commit for a concurrent request with the same
 * key, which waits for the first): *out_id is that run and the return is
 * 1 (same body), or FERRY_ECONFLICT (another body). An occasion hook that
 * answers > 0: nothing stored, the return is 2.
 */
int runs_create(int64_t *out_id, PGconn *conn, const struct runs_new *rn, cfg_errors *errs);

/*
 * Retries finished run id (store_run_retry: its failed, stopped and
 * skipped steps, or from step `from` down), with params (an object of
 * name: value, or NULL) over the run's own: the run is planned again with
 * them, and every step whose definition changes (its command, env, …)
 * runs again too, with the steps below it; the new params are recorded
 * with the retry's event. FERRY_EINVALID for params the workflow does not
 * take (the message names the param), or that change nothing.
 */
int runs_retry(PGconn *conn, int64_t id, const char *from, const char *actor, int no_cache, const json_t *params);

#endif

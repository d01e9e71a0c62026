/*
 * store — every SQL statement Ferry runs, parameterised, one function per
 * purpose. The state transitions themselves are PL/pgSQL functions in
 * db/functions (ferry_claim, ferry_finish, ferry_stop, ferry_retry) so each
 * is one round trip and one transaction; this module marshals their inputs
 * and outputs. What a new run's rows hold is decided by the planner
 * (plan.h), without SQL, in the runs service above the store (runs/);
 * the store only writes the plan it is given.
 */
#ifndef FERRY_STORE_H
#define FERRY_STORE_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

#include "lib/states.h"

/* ---- engine side ---- */

/* A step claimed for execution; owned by the array from store_claim. */
struct store_claim {
	int64_t step_id, run_id;
	int attempt;
	char *name, *kind, *workdir; /* workdir: the run's, may be NULL */
	int64_t timeout_ms;
	json_t *spec;                /* resolved command, env, workdir and the kind's fields */
	json_t *inputs;              /* succeeded ancestors {"NAME":{kind,outputs,metrics}}, or
	                              * NULL when the spec lists no "ancestors" */
	json_t *run;                 /* {params, workflow, workflow_hash, no_cache} or NULL (ditto) */
	char *gpus;                  /* the GPUs given to the attempt ("0,1", as the host lists them) or NULL */
	/*
	 * spec, inputs and run as PostgreSQL sent them, until store_claim_parse():
	 * store_claim() leaves them unparsed, so that a claim handed to the worker
	 * pool is parsed there, off the engine's loop
	 */
	char *spec_text, *inputs_text, *run_text;
};

/* Parses c's spec, inputs and run from their texts (once: the texts are freed). */
void store_claim_parse(struct store_claim *c);

/*
 * Claims up to limit ready steps (of run_filter when > 0; only step
 * step_filter when > 0) for owner in one statement, admitted against
 * capacity ({"cpus", "memory_mb", "gpus": [ids], "default_cpus",
 * "starve_s"}: this host's, db/functions/claim.sql) or, when NULL, not
 * admitted (Slurm admits its own). *out (n entries) is the caller's:
 * store_claims_free(). Their JSON is not parsed yet (store_claim_parse);
 * inputs_text is NULL exactly when inputs will be.
 */
int store_claim(struct store_claim **out, int *n, PGconn *conn, const char *owner,
		const char *host, int limit, int64_t lease_ms, int64_t run_filter, int64_t step_filter,
		const json_t *capacity);
void store_claims_free(struct store_claim *v, int n);

/*
 * `ferry dev step` and `ferry dev run --step`: a step of a run as the engine
 * would claim it (spec, run workdir, the succeeded ancestors' outputs and
 * metrics, the run's context; c->attempt is the attempts so far), read
 * without claiming or changing anything, and how its last attempt went.
 * FERRY_ENOTFOUND when the run or the step does not exist. Both are the
 * caller's: store_claims_free(c, 1) or free the fields, and
 * store_step_last_dispose.
 */
struct store_step_last {
	char *state;    /* the step's state */
	int exit_code;  /* of its last attempt, -1 when none */
	char *reason;   /* may be NULL */
	char *dir;      /* its last attempt's directory, NULL when it never ran */
};
int store_step_view(struct store_claim *c, struct store_step_last *last, PGconn *conn, int64_t run_id,
		    const char *step);
void store_step_last_dispose(struct store_step_last *last);

/*
 * Where a started attempt runs: its executor type and handle (JSON text),
 * recorded so another daemon can re-adopt it, and its directory. NULL
 * fields keep what is recorded.
 */
struct store_started {
	int64_t step_id;
	int attempt;
	const char *executor;
	const char *handle;
	const char *dir;
};
int store_attempts_started(PGconn *conn, const char *owner, const struct store_started *v, int n);

/* How an attempt ended (states.h: waiting is a label step that opened its task). */
struct store_result {
	int64_t step_id;
	int attempt;
	enum attempt_outcome outcome;
	int exit_code; /* -1 when none */
	int signal;    /* 0 when none */
	const char *reason; /* NULL when none */
	int final;     /* failed for good: not retried (a gate, a bad metrics.json) */
	const json_t *outputs, *metrics, *gate; /* NULL when none */
	const char *cache_key;     /* step-cache key to keep this success under, or NULL */
	const json_t *cached_from; /* {"run","step","attempt"} when it came from cache */
	/* the attempt's start record (store_attempts_started's) when not written yet, else NULL */
	const char *executor, *handle, *dir;
};

/*
 * Closes a batch of attempts in one transaction (fenced). *ready_now is how
 * many steps became ready; *next_retry_ms the wall-clock time of the earliest
 * scheduled retry (0 when none).
 */
int store_finish(PGconn *conn, const char *owner, const struct store_result *v, int n,
		 int *ready_now, int64_t *next_retry_ms);

/* What a claim after a finish asks (store_finish_claim): store_claim's arguments. */
struct store_claim_ask {
	const char *host;
	int limit;                 /* 0: no claim */
	int always;                /* claim even when the finish made nothing ready */
	int64_t lease_ms, run_filter, step_filter;
	const json_t *capacity;
};

/*
 * store_finish, then store_claim as ask says, in one transaction and one
 * round trip (ferry_finish_claim): the engine's turn after jobs ended.
 * *out and *nclaimed as store_claim's; *claim_us the claim's own time
 * (-1: no claim was made: nothing was ready and ask->always was 0). On an
 * error nothing was written.
 */
int store_finish_claim(PGconn *conn, const char *owner, const struct store_result *v, int n,
		       int *ready_now, int64_t *next_retry_ms, const struct store_claim_ask *ask,
		       struct store_claim **out, int *nclaimed, int64_t *claim_us);

/*
 * The step cache: a succeeded attempt kept under key. 1 with *outputs,
 * *metrics, *gate (may be NULL) and *from ({"run","step","attempt"}), all the
 * caller's, when there is one; 0 when not.
 */
int store_step_cache_get(json_t **outputs, json_t **metrics, json_t **gate, json_t **from,
			 PGconn *conn, const char *key);

/* Ends the waits of label and gate steps whose timeout passed; *ready_now as above. */
int store_expire_waits(int *ready_now, PGconn *conn, const char *actor);

/* Renews the leases of owner's running attempts. */
int store_heartbeat(PGconn *conn, const char *owner, int64_t lease_ms);

/*
 * Hosts (store_hosts.c): this daemon's row — its host's name, the address
 * others reach it at (may be NULL), the capacity it detected and its
 * labels (JSON objects), its lease — written again (a heartbeat), with
 * what the live replicas on its host ask for in all (*hold_cpus,
 * *hold_memory_mb: their deploy steps' resources) read in the same
 * statement; marked stopped at a clean shutdown; rows dead a day removed (*removed:
 * how many); every host as GET /hosts answers ({"hosts": […]}, *out the
 * caller's).
 */
int store_host_beat(PGconn *conn, const char *owner, const char *host, const char *address,
		    const json_t *capacity, const json_t *labels, int64_t lease_ms, double *hold_cpus,
		    int64_t *hold_memory_mb);
int store_host_stopped(PGconn *conn, const char *owner);
int store_hosts_prune(PGconn *conn, int *removed);
int store_hosts_list(char **out, PGconn *conn);
/*
 * What a run's requests are checked against when it is submitted (runs.c):
 * *hosts {"HOST": capacity} of the hosts up (their newest live daemon's
 * capacity, with "admits": false for a daemon whose executor admits its
 * own jobs), *queues {"NAME": {"max_running", "max_gpus", "max_cpus"}}
 * of every queue. Both the caller's.
 */
int store_admission_facts(json_t **hosts, json_t **queues, PGconn *conn);
/*
 * Where host answers: its newest daemon's address (NULL: no daemon ever
 * named it, or none published one), whether that daemon is live (its
 * lease), when it was last seen (NULL when none). All the caller's.
 */
int store_host_address(char **address, int *live, char **last_seen, PGconn *conn, const char *host);
/*
 * Takes or keeps host's lock on conn (a session lock: held while the
 * session lives): *held whether this session has it — the daemon that keeps
 * the host's deployment replicas (deploy/reconcile.h replicas_task).
 */
int store_host_keeper(PGconn *conn, const char *host, int *held);
/*
 * Blobs held by hosts (store_blobs.c): records that host holds blob hex;
 * the addresses of the live daemons of the other hosts that hold it
 * (*urls, a JSON array of base URLs, the caller's, newest first); and
 * *path (the caller's), blob hex in home's store, fetched from a holder
 * first when this host lacks it (its hash checked; with tree, every file
 * its manifest lists too). FERRY_ENOTFOUND when no live host holds it.
 */
int store_blob_held(PGconn *conn, const char *hex, const char *host);
int store_blob_sources(json_t **urls, PGconn *conn, const char *hex, const char *host);
int store_blob_ensure(char **path, PGconn *conn, const char *home, const char *hex, int tree);
/*
 * The registered artifacts whose blobs are in home's store but not yet
 * recorded as held by host (registered before blob_holders, or on a shared
 * FERRY_HOME), recorded: up to limit artifacts a call after *cursor (the
 * caller's; NULL at first), *scanned how many were looked at (fewer than
 * limit: done), *held how many blobs were recorded.
 */
/*
 * The blobs (*blobs, a JSON array of sha256 strings, the caller's; at most
 * limit) this host should fetch so that each is kept on copies live hosts
 * (engine/copies.h says how the hosts share the work).
 */
int store_blobs_to_copy(json_t **blobs, PGconn *conn, const char *host, int copies, int limit);
int store_blobs_announce(int *held, int *scanned, char **cursor, PGconn *conn, const char *home, const char *host,
			 int limit);
/* Expires owner's leases now, so another daemon takes the attempts over. */
int store_release(PGconn *conn, const char *owner);

/* A running attempt whose owner is gone or whose lease expired. */
struct store_orphan {
	int64_t step_id, run_id;
	int attempt;
	int64_t timeout_ms, started_ms;
	char *owner, *host, *dir, *name, *kind, *workdir;
	char *executor;   /* NULL when no handle was recorded */
	json_t *handle;   /* the executor's handle, or NULL */
	json_t *spec;
	int expired; /* lease expired (else: same host, owner to be checked) */
};
/* Lists candidates: expired leases anywhere, or any other owner on host. */
int store_orphans(struct store_orphan **out, int *n, PGconn *conn, const char *owner,
		  const char *host);
void store_orphans_free(struct store_orphan *v, int n);
/*
 * A running attempt's note (exec_job_note: "waiting for Slurm: …") as its
 * step's reason while the attempt is the step's latest and running; NULL
 * clears it.
 */
int store_step_note(PGconn *conn, int64_t step_id, int attempt, const char *note);
/* Whether attempt of step (by name) of run is running: 1, 0, or a negative FERRY_E* code. */
int store_attempt_is_running(PGconn *conn, int64_t run, const char *step, int attempt);
/* Takes an attempt over from prev_owner; 1 if taken, 0 if someone else did. */
int store_adopt(PGconn *conn, const char *owner, const struct store_orphan *o, int64_t lease_ms);
/*
 * Gives an attempt owner adopted back to o's (gone) owner: this host's
 * next recovery round finds it an orphan again (its executor could not be
 * asked this time). Its lease is renewed, so no other host's reaper calls
 * it lost meanwhile: it runs on this host, which is up.
 */
int store_unadopt(PGconn *conn, const char *owner, const struct store_orphan *o, int64_t lease_ms);

/*
 * owner's running attempts whose run is stopping, with the reason each
 * killed step is given ("run stopped by ana", "dev session ended"): parallel
 * arrays, the caller frees them (and each reason).
 */
int store_stopping(int64_t **steps, int **attempts, char ***reasons, int *n, PGconn *conn, const char *owner);

/* ---- API side ---- */

/*
 * A run's rows beside its plan (store_run_write): who starts it and how.
 * The runs service (runs/runs.h) fills it from its request. Nothing here
 * is taken over.
 */
struct store_run_row {
	const char *trigger;  /* api, cli, dev, schedule, data, git, bench */
	const char *actor;
	const char *workdir;  /* directory commands run in, or NULL */
	const char *filename; /* the workflow's file, for messages, or NULL */
	int new_workflow;     /* the plan's workflow came as YAML: its version is
	                       * written too (once per hash); 0 for a registered one */
	const char *idem_key;  /* Idempotency-Key, or NULL */
	const char *idem_hash; /* sha256 of the request body, with idem_key */
	int no_cache;          /* no step of this run comes from the step cache */
	/* the plan's reused steps (plan.h's reuse) take their results from run
	 * reuse_run, or, when 0, from the newest run of the same workflow in
	 * which they all succeeded with the same inputs (command, env — so the
	 * params —, workdir, image, dataset; reuse_anyway: with any) */
	int64_t reuse_run;
	int reuse_anyway;
	int64_t dev_lease_ms;  /* > 0: a dev session's lease on the run, renewed by
	                        * store_dev_lease_renew (dev runs only) */
	/* Schedules and triggers (schedules.h): what started the run
	 * (runs.origin, shown by ferry get) and which schedule or trigger it
	 * belongs to, or NULL and 0. */
	const json_t *origin;
	int64_t schedule_id, trigger_id;
	/* Called in the run's transaction once the run is written: 0 goes on
	 * to commit; > 0 rolls back and store_run_write returns 2 with
	 * *out_id 0 (the occasion was someone else's already); < 0 rolls
	 * back with that error. NULL: none. */
	int (*occasion)(PGconn *conn, int64_t run_id, void *arg);
	void *occasion_arg;
	/* The caller holds a transaction (BEGIN … COMMIT around several
	 * runs): the run is written under a savepoint and released, not
	 * committed; nothing of it is kept when it fails or its occasion is
	 * taken, and the caller's other writes stay; the caller sends
	 * NOTIFY ferry_ready before it commits (once for all its runs: the
	 * dispatchers claim them then). Not with idem_key. */
	int in_tx;
};

struct run_plan;

/*
 * Looks an Idempotency-Key up: 0 when it is unused; 1 with *out_id its run
 * when it was used with the same body; FERRY_ECONFLICT (message set) when
 * it was used with another body.
 */
int store_run_idem_lookup(int64_t *out_id, PGconn *conn, const char *key, const char *body_hash);

/* Takes the next run id from the runs sequence, so a plan can render {{run.id}}. */
int store_run_id_reserve(int64_t *out, PGconn *conn);

/*
 * Writes an already-made plan (plan.h; its run_id from
 * store_run_id_reserve) as a run in one transaction, or under a savepoint
 * of the caller's (row->in_tx): the workflow version when new, the run,
 * its steps with their waits/restage flags, edges, the run.created event;
 * the reused steps' results and the dev lease; then the occasion hook, and
 * the Idempotency-Key again with ON CONFLICT, so a concurrent request with
 * the same key, which waits for the first, makes no second run. 0 with
 * *out_id the run (and, when reused_from is not NULL, *reused_from the
 * run its reused steps came from, 0 when none); 1 with *out_id the run the key made
 * first (same body) or FERRY_ECONFLICT; 2 when the occasion hook answered
 * > 0; else a negative code. Nothing is kept unless it returns 0. A run
 * of STORE_ANALYZE_STEPS steps or more has the step tables' statistics
 * taken again before it commits (see store_runs.c).
 */
#define STORE_ANALYZE_STEPS 1000
int store_run_write(int64_t *out_id, int64_t *reused_from, PGconn *conn, const struct run_plan *plan,
		    const struct store_run_row *row);

/*
 * A `ferry dev` session renews the lease it holds on its run (runs.
 * dev_lease_until) for lease_ms more.
 */
int store_dev_lease_renew(PGconn *conn, int64_t run_id, int64_t lease_ms);

/*
 * The leader stops the unfinished dev runs whose session's lease expired
 * (their `ferry dev` process died) with the reason "dev session ended";
 * their running jobs are killed by whoever holds them. *stopped is how
 * many runs it stopped.
 */
int store_dev_expire(int *stopped, PGconn *conn, const char *actor);

/*
 * `ferry dev run --step` (store_dev.c). store_dev_next: the step of the run
 * the engine would claim next (*step_id 0 and *name NULL when none is
 * ready; *name is the caller's). store_dev_skip: the ready step step_id is
 * done without running, with the outputs, metrics and gate of the same step
 * in run reuse_run, or (0) the newest other run of the workflow in which it
 * succeeded (*from_run); claimed for owner and finished as succeeded with
 * the reason "reused from run N", so the steps below it go on.
 * FERRY_ENOTFOUND (no such run, with a message), FERRY_ECONFLICT (the step
 * is not ready any more).
 */
int store_dev_next(int64_t *step_id, char **name, PGconn *conn, int64_t run_id);
int store_dev_skip(int64_t *from_run, PGconn *conn, const char *owner, const char *host, int64_t run_id,
		   int64_t step_id, int64_t reuse_run, int64_t lease_ms);

/* The run object as JSON text (*out is the caller's); FERRY_ENOTFOUND. */
int store_run_json(char **out, PGconn *conn, int64_t id);

/* {"runs":[…],"next_cursor":…} newest first; filters may be NULL. */
int store_runs_list(char **out, PGconn *conn, const char *state, const char *workflow,
		    const char *trigger, const char *not_trigger, int limit, int64_t before);

/* Stops a run; *state_out is the new state. FERRY_ENOTFOUND, FERRY_ECONFLICT. */
int store_run_stop(char **state_out, PGconn *conn, int64_t id, const char *actor);
/* Whether run id is stopping or stopped (a step's long wait gives up): 1, 0, or a negative FERRY_E* code. */
int store_run_stopping(PGconn *conn, int64_t id);

/*
 * Retries a run (from a step when from is set; no step from cache when
 * no_cache). FERRY_ENOTFOUND, FERRY_ECONFLICT.
 */
int store_run_retry(PGconn *conn, int64_t id, const char *from, const char *actor, int no_cache);
/*
 * The same with the run's new params (all of them) and its steps' specs
 * planned with them ({"STEP": spec}, runs_retry): the steps whose spec
 * changes run again too, with what is below them; the params are recorded.
 */
int store_run_retry_params(PGconn *conn, int64_t id, const char *from, const char *actor, int no_cache,
			   const json_t *run_params, const json_t *specs);
/* What run id was planned from: its workflow version (spec, hash, YAML), params, origin, workdir (the caller's). */
int store_run_plan_source(PGconn *conn, int64_t id, json_t **spec, char **hash, char **yaml, json_t **params,
			  json_t **origin, char **workdir);

/*
 * Stores a workflow version (spec and hash from cfg_workflow_parse, yaml
 * its len bytes of text) registered from directory workdir (NULL: none)
 * and makes it its name's newest: registering content already stored
 * (from another directory, say) records this workdir and moves it to the
 * front. *out is {"name","hash","created","steps","workdir"} JSON text,
 * created false for such a re-registration. then(conn, arg), when not
 * NULL, runs in the same transaction after the write (registration syncs
 * the version's schedules and triggers there: schedule/workflows.h); an
 * error from it rolls everything back and is returned.
 */
int store_workflow_write(char **out, PGconn *conn, const char *hash, const json_t *spec, const char *yaml,
			 size_t len, const char *workdir, int (*then)(PGconn *conn, void *arg), void *arg);

/*
 * The newest registered version of workflow name: its spec and the
 * directory it was registered from (*workdir, NULL when none; pass NULL
 * to skip it). FERRY_ENOTFOUND when it is not registered.
 */
int store_workflow_spec(json_t **spec, char **workdir, PGconn *conn, const char *name);

/*
 * The newest registered version of workflow name as the planner takes it:
 * its spec, hash and YAML, and the directory it was registered from
 * (*workdir, NULL when none); all the caller's. FERRY_ENOTFOUND, with a
 * message saying how to register it, when it is not registered.
 */
int store_workflow_latest(json_t **spec, char **hash, char **yaml, char **workdir, PGconn *conn,
			  const char *name);

/* {"events":[…]} of a run, oldest first, after event id after (0: all). */
int store_run_events(char **out, PGconn *conn, int64_t id, int64_t after);

/*
 * The names of run run_id's written-out steps (a fan-out's items are not)
 * that were never claimed, at most limit of them, in the order they were
 * written (*names: NULL-terminated, the caller's, each freed with it);
 * none while a daemon of a host other than host is live (a fleet: any
 * host may claim them).
 */
int store_run_steps_unstarted(char ***names, int *n, PGconn *conn, int64_t run_id, const char *host, int limit);

/*
 * Where an attempt's log is: attempt 0 means the latest. *dir is the
 * caller's; NULL (and *running 1) for an attempt claimed whose job has not
 * started yet: its log is empty so far. *host (when host is not NULL; the
 * caller's) is the host the attempt runs or ran on.
 */
int store_step_log(char **dir, int *attempt, int *running, char **host, PGconn *conn, int64_t run,
		   const char *step, int want_attempt);

/*
 * The attempt of run whose directory (attempts.dir, on the host that ran
 * it) is dir: its step's name, number and host (both strings the
 * caller's). FERRY_ENOTFOUND when no attempt of the run has it.
 */
int store_attempt_of_dir(char **step, int *attempt, char **host, PGconn *conn, int64_t run, const char *dir);

/* Continues a waiting step for actor with optional data (JSON text or NULL). */
int store_step_continue(PGconn *conn, int64_t run, const char *step, const char *actor,
			const char *data);
/*
 * A person says no to a waiting step (ferry_reject): it fails, final, with
 * "rejected by ACTOR: REASON", a step.rejected event; the run moves on as
 * after a failure. FERRY_ENOTFOUND, FERRY_ECONFLICT (not waiting).
 */
int store_step_reject(PGconn *conn, int64_t run, const char *step, const char *actor, const char *reason);

/* Appends gauges (runs by state, open steps by state, queue depth) in the
 * Prometheus text format to the growing buffer *buf. */
int store_metrics(char **buf, size_t *len, size_t *cap, PGconn *conn);

/* {"workflows":[{name, hash, steps, workdir, created_at}]} newest first (created_at is
 * when the version was last registered). */
int store_workflows_list(char **out, PGconn *conn);

/* A trivial round trip: 0 while the database answers. */
int store_ping(PGconn *conn);

/* ---- completion webhook (store_notify.c; orchestrator/engine/notify.c is the user) ---- */

/*
 * Up to limit ended runs due for their completion post, oldest first, as a
 * JSON array of {run, workflow, state, trigger, reason, finished_at} (*out,
 * the caller's); runs that ended more than a day ago are marked instead.
 */
int store_runs_to_notify(json_t **out, PGconn *conn, int limit);
/* How run's post went: NULL posted; else why not (tried again later, five times in all). */
int store_run_notified(PGconn *conn, int64_t run, const char *failure);

/* ---- housekeeping (store_housekeep.c): deleting runs, retention of their logs ---- */

/*
 * Deletes finished run id and every row of it (steps, attempts, events,
 * outputs, metrics, cache sessions: ON DELETE CASCADE) in one statement;
 * the model versions it registered stay, with its id in their lineage.
 * FERRY_ENOTFOUND when there is no such run; FERRY_ECONFLICT when it has
 * not finished (the message says to stop it first). A tombstone stays in
 * the audit trail: actor, the workflow, state, who started it, its params
 * and times. Its files are the caller's to remove, after this returned 0.
 */
int store_run_delete(PGconn *conn, int64_t id, const char *actor);

/*
 * The audit trail, newest first, as {"audit":[{id, at, actor, object,
 * object_id, action, detail}]}: object (run, schedule, trigger; NULL any),
 * object_id (0 any), entries older than id before (0: from the newest), at
 * most limit (store_audit.c). *out the caller's.
 */
int store_audit_list(char **out, PGconn *conn, const char *object, int64_t object_id, int64_t before, int limit);

/*
 * Up to limit runs (ids, oldest finished first) that finished more than days
 * ago and whose logs are still there: *ids (*n) is the caller's (free).
 */
int store_runs_retention_due(int64_t **ids, int *n, PGconn *conn, double days, int limit);

/*
 * Removes the logs of run id if it is still due (as above): in one
 * transaction that holds the run's row, so a retry cannot start a new
 * attempt in between, calls rm(id, arg) to remove its files, then sets
 * logs_removed_at. 1 removed, 0 no longer due, or a negative code.
 */
int store_run_logs_remove(PGconn *conn, int64_t id, double days, void (*rm)(int64_t id, void *arg),
			  void *arg);

/*
 * When retention removed run id's logs: *at (the caller's) is a UTC ISO 8601
 * time, or NULL when they were not removed. FERRY_ENOTFOUND: no such run.
 */
int store_run_logs_removed(char **at, PGconn *conn, int64_t id);

/* ---- model registry (store_models.c) ---- */

/* A version to register: the artifact is already in the blob store. */
struct store_model_reg {
	const char *model;
	const char *bump;             /* patch, minor or major */
	const char *sha256, *kind;    /* the blob (kind "file") or manifest ("tree") */
	int64_t bytes;
	const char *path;             /* where the blob is, under $FERRY_HOME/artifacts */
	const char *name, *source;    /* the file name it came as, and from where */
	const json_t *metrics, *params; /* NULL when none */
	int64_t run_id;               /* 0 when not from a run */
	const char *step, *data_fingerprint; /* NULL when none */
	const json_t *aliases;        /* array of names to point at the new version, or NULL */
	const char *actor;
	const char *description;      /* the version's, or NULL (checked by the caller) */
	const json_t *tags;           /* {NAME: "value"} for the version, or NULL (checked by the caller) */
};

/*
 * Registers a version in one transaction (model created on first use,
 * number from the latest by bump, aliases moved, events written, and its
 * description and tags set as store_model_edit does). The same run, step
 * and bytes again: *created 0 and the version registered before.
 * *version and *version_json are the caller's.
 */
int store_model_register(char **version, int *created, json_t **version_json, PGconn *conn,
			 const struct store_model_reg *m);

/* The version alias points at and its metrics (both the caller's); FERRY_ENOTFOUND. */
int store_model_alias_get(char **version, json_t **metrics, PGconn *conn, const char *model,
			  const char *alias);

/* JSON text (*out the caller's): {"models":[{name, versions, latest, aliases:{A:V}, …}]}. */
int store_models_list(char **out, PGconn *conn);
/* One model with its aliases and its history of events; FERRY_ENOTFOUND. */
int store_model_get(char **out, PGconn *conn, const char *name);
/* {"model":NAME,"versions":[…]} newest first, only those with every tag of tags (NULL: all); FERRY_ENOTFOUND. */
int store_model_versions(char **out, PGconn *conn, const char *name, const json_t *tags);
/* One version, named by its number or by an alias; FERRY_ENOTFOUND. */
int store_model_version(char **out, PGconn *conn, const char *name, const char *version);
/* Points alias at version (one event when it moves); the version's JSON. */
int store_model_alias_set(char **out, PGconn *conn, const char *name, const char *alias,
			  const char *version, const char *actor);
/*
 * The deployment whose traffic alias of model follows ("production" while
 * one serves the model: it moves with the weights, nothing else moves it),
 * or *deployment NULL. *deployment is the caller's.
 */
/* Removes alias of model (an event; one bound to a deployment refused); *out: the aliases after. */
int store_model_alias_delete(char **out, PGconn *conn, const char *name, const char *alias, const char *actor);
/*
 * Edits model name (version NULL) or one version: description (NULL
 * unchanged, "" cleared), tags merged (a JSON null value removes one; NULL
 * unchanged), archived (-1 unchanged, 1 archive, 0 restore). An event; *out
 * the model's or version's JSON. db/functions/registry.sql ferry_model_edit.
 */
int store_model_edit(char **out, PGconn *conn, const char *name, const char *version, const char *description,
		     const json_t *tags, int archived, const char *actor);
int store_alias_bound(char **deployment, PGconn *conn, const char *model, const char *alias);
/* ---- data cache (store_cache.c; steps/datacache.c is the user) ---- */

/* A complete entry to record; nothing here is taken over. */
struct store_cache_entry {
	const char *host, *key, *fingerprint;
	const char *path;     /* the entry's directory */
	const char *dataset;  /* where it was staged from */
	const json_t *command; /* the preprocessing command, or NULL: a plain copy */
	int64_t bytes;
};

/*
 * Looks key up on host; on a hit marks it used, counts the hit and opens
 * (or re-opens) the session of (run, step). 1 with *session, *path (the
 * caller's) and *bytes; 0 when there is no such entry (nothing counted).
 */
int store_cache_hit(char **session, char **path, int64_t *bytes, PGconn *conn, const char *host,
		    const char *key, int64_t run, int64_t step, int attempt);
/* Counts a miss on host. */
int store_cache_miss(PGconn *conn, const char *host);
/* Drops the row of an entry whose directory is gone. */
int store_cache_forget(PGconn *conn, const char *host, const char *key);
/*
 * Deletes least-recently-used unpinned entries of host (key excepted) until
 * bytes more fit under cap; *paths (n entries, NULL-terminated, the
 * caller's: free each and the array) are the directories to remove.
 */
int store_cache_evict(char ***paths, int *n, PGconn *conn, const char *host, const char *key,
		      int64_t bytes, int64_t cap);
/* Bytes held by host's entries. */
int store_cache_used(int64_t *used, PGconn *conn, const char *host);
/* Records a complete entry and opens the session of (run, step) on it; *session is the caller's. */
int store_cache_commit(char **session, PGconn *conn, const struct store_cache_entry *e, int64_t run,
		       int64_t step, int attempt);
/* GET /api/v1/cache: {"entries":[…],"stats":{…}} of host (NULL: all hosts); *out is the caller's. */
int store_cache_json(char **out, PGconn *conn, const char *host);
/* Appends the cache counters and gauges (Prometheus text) to *buf. */
int store_cache_metrics(char **buf, size_t *len, size_t *cap, PGconn *conn);

/* ---- end of data cache ---- */

/* ---- named API tokens (store_tokens.c) ---- */

/* One named API token; a field not asked for is NULL. */
struct store_token {
	char *name, *role;        /* role: viewer, operator or admin */
	char *hash;               /* sha256 of the token, 64 hex digits (store_token_live only) */
	char *created_at, *revoked_at; /* UTC, ISO 8601 (store_token_list only; revoked_at NULL when live) */
};

/* Stores a token by its sha256 hex; FERRY_ECONFLICT when the name is taken (revoked ones included). */
int store_token_create(PGconn *conn, const char *name, const char *role, const char *hash);
/* Every token, revoked ones too, by name, without hashes. *out (n) is the caller's: store_tokens_free. */
int store_token_list(struct store_token **out, int *n, PGconn *conn);
/* The tokens not revoked, with name, role and hash, ordered by hash. *out (n) is the caller's. */
int store_token_live(struct store_token **out, int *n, PGconn *conn);
/* Revokes name: FERRY_ENOTFOUND when there is none, FERRY_ECONFLICT when it already was. */
int store_token_revoke(PGconn *conn, const char *name);
/*
 * Who a run acts for and that one's role now ("viewer", "operator",
 * "admin", or "none" for a revoked or unknown token): the token that
 * submitted it, the last editor of the schedule or the registrar of the
 * trigger that started it; `ferry dev` runs are admin's. *who and *role
 * are the caller's.
 */
int store_run_submitter(PGconn *conn, int64_t run_id, char **who, char **role);

/* ---- fan-outs (store_fanout.c) ---- */

#define STORE_FANOUT_BATCH 2000 /* children written in one transaction */

/*
 * Writes children of foreach step step_id, one per item of items (a JSON
 * array of at most STORE_FANOUT_BATCH), the first at index from, in one
 * transaction fenced on attempt (running, of owner) and idempotent (a child
 * written before is kept, its item set to this one). Returns 0, FERRY_ECONFLICT when the attempt is no
 * longer owner's (the message says so), or FERRY_EDB.
 */
int store_fanout_expand(PGconn *conn, int64_t step_id, int attempt, const char *owner, const json_t *items,
			size_t from);

/*
 * After writing many children (STORE_ANALYZE_STEPS or more): the steps
 * table's statistics taken again, as for a large run's creation, so the
 * claims of the children are not planned from a table a fraction of its
 * size (the first claim of 256 children of a 10,000-item fan-out took
 * 0.9 s, the next ones 35 ms). 0 or FERRY_EDB.
 */
int store_fanout_analyze(PGconn *conn, size_t children);
/* Frees n tokens from the functions above; accepts NULL. */
void store_tokens_free(struct store_token *v, int n);

/* ---- step secrets (store_secrets.c) ---- */

#define SECRET_MIN_LEN 4     /* shorter values would mask ordinary text in logs */

/* Whether name suits a secret: an environment name ([A-Za-z_][A-Za-z0-9_]*, at most 128), not FERRY_*. */
int store_secret_name_ok(const char *name);
/*
 * Seals value (n bytes) under key (lib/seal.h) and stores it as name for
 * actor, with an audit entry (object "secret", the name, never the value);
 * FERRY_EINVALID for a bad name or value.
 */
int store_secret_set(PGconn *conn, const unsigned char *key, const char *name, const char *value, size_t n,
		     const char *actor);
/* Removes name for actor (audited): FERRY_ENOTFOUND when there is none. */
int store_secret_delete(PGconn *conn, const char *name, const char *actor);
/* [{"name", "updated_by", "updated_at"}] by name, never a value; *out is the caller's. */
int store_secret_list(json_t **out, PGconn *conn);
/* Of names (a JSON array of strings), those not set, sorted; *missing is the caller's. */
int store_secrets_missing(json_t **missing, PGconn *conn, const json_t *names);
/*
 * {"NAME": "value"} of names, opened with key (NULL: the daemon has none);
 * FERRY_ENOTFOUND naming one not set, FERRY_EINVALID when one does not open.
 * *values is the caller's (a job's environment): never log it.
 */
int store_secrets_open(json_t **values, PGconn *conn, const unsigned char *key, const json_t *names);

/* ---- end of step secrets ---- */

#endif

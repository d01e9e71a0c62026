/*
 * store_deploy — the deployments' rows (db/migrations/0015_deployments.sql):
 * what the deploy step, the reconcile task and the API read and change.
 * Every change that moves traffic is one transaction with its event, so
 * the database never holds weights that do not sum to 100 or a change
 * nobody can account for.
 */
#ifndef FERRY_STORE_DEPLOY_H
#define FERRY_STORE_DEPLOY_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

/*
 * Finds deployment name, or creates it serving model at a new front port
 * (port_hint, free when asked). *created 1 when it was made now.
 */
int store_deploy_ensure(PGconn *conn, const char *name, const char *model, int port_hint, int auto_stop_s,
			int64_t run_id, const char *actor, int64_t *id, int *port, int *created);

/*
 * Starts deployment dep again if it is stopped (a deploy step means to
 * serve: its new version would otherwise start only to be stopped), as
 * PATCH {"action": "start"} does: state running, the auto-stop deadline
 * from now, a 'started' event by actor saying why. *started: 1 when it
 * was stopped.
 */
int store_deploy_wake(PGconn *conn, int64_t dep, const char *actor, const char *why, int *started);

/*
 * Adds version (state starting, weight 0, `replicas` replicas) to
 * deployment dep; when it is there already (a retried deploy step) *state
 * says how it stands. *ord: its ordinal.
 */
int store_deploy_version_add(PGconn *conn, int64_t dep, const char *version, const char *artifact,
			     int replicas, const json_t *serve, int64_t run_id, const char *step, int *ord,
			     char **state);

/* Records replica idx of version: its port, handle, generation and health. */
int store_deploy_replica_put(PGconn *conn, int64_t dep, const char *version, int idx, int port,
			     const json_t *handle, int generation, const char *health, const char *error);

/* Sets a replica's health (and error) without touching the rest. */
int store_deploy_replica_health(PGconn *conn, int64_t dep, const char *version, int idx, const char *health,
				const char *error, int restarted, int64_t backoff_ms);

/* Keeps a version's load-test result (loadtest_run's JSON). */
int store_deploy_version_load_test(PGconn *conn, int64_t dep, const char *version, const json_t *result);

/* Retires a version (a rolled-back canary): weight 0, its replicas stopped by the reconcile task. */
int store_deploy_version_retire(PGconn *conn, int64_t dep, const char *version, const char *actor,
				const json_t *detail);

/* Removes a version that never served (its replicas' rows go with it), with an event. */
int store_deploy_version_drop(PGconn *conn, int64_t dep, const char *version, const char *actor,
			      const char *reason);

/*
 * Moves traffic in one transaction: version gets `traffic` percent and
 * becomes serving, the other serving versions share the rest in
 * proportion (deploy_weights_add/set), the deadline is reset from
 * auto_stop_s (0: never) when it is >= 0, and an event records the
 * weights before and after. *weights: {"VERSION": pct, …} after.
 */
int store_deploy_shift(PGconn *conn, int64_t dep, const char *version, int traffic, int auto_stop_s,
		       const char *actor, const char *why, json_t **weights);

/*
 * Every deployment (only_id > 0: that one) with its versions and their
 * replicas, as the API shows them and the reconcile task reads them:
 * [{"id","name","model","port","url","state","auto_stop_s","deadline",
 *   "versions":[{"version","ord","weight","replicas","state","artifact",
 *   "serve","load_test","replica_list":[{"idx","port","health","restarts",
 *   "generation","handle","last_error","next_start_in_ms"}]}]}]
 * FERRY_ENOTFOUND when only_id names none.
 */
int store_deploy_list(PGconn *conn, int64_t only_id, json_t **out);

/* Appends an event to deployment dep. */
int store_deploy_event(PGconn *conn, int64_t dep, const char *actor, const char *kind, const json_t *detail);

/* The events of dep, oldest first (at most limit). */
int store_deploy_events(PGconn *conn, int64_t dep, int limit, json_t **out);

/*
 * Deployments whose auto-stop deadline passed: each is switched to stopped
 * in the statement that finds it (so with several daemons each fires once),
 * with an event; *ids (the caller's) lists them. First, those within
 * deploy_warn_lead_s of it get their warning event, once per deadline:
 * *warned (the caller's) is [{"id","deployment","deadline"}] of those.
 */
int store_deploy_due(PGconn *conn, const char *actor, int64_t **ids, int *n, json_t **warned);

/*
 * Sets the weights of serving versions (the API's traffic, promote,
 * rollback): want holds one version's percentage (the others share the
 * rest in proportion) or every serving version's, summing to 100. One
 * transaction with an event of `kind` holding before and after.
 * FERRY_EINVALID naming what is wrong.
 */
int store_deploy_weights(PGconn *conn, int64_t dep, const json_t *want, const char *actor, const char *kind,
			 json_t **after);

/* The weights before the last traffic change (what rollback restores). */
int store_deploy_last_weights(PGconn *conn, int64_t dep, json_t **before);

/* stopped or running (start: the deadline counts again from now), with an event. */
int store_deploy_set_state(PGconn *conn, int64_t dep, const char *state, const char *actor);

/* auto-stop set to secs (0: never) from now, or with extend the deadline moved by secs. */
int store_deploy_auto_stop(PGconn *conn, int64_t dep, int secs, int extend, const char *actor);

/*
 * Sets a serving version's replica count (1–5): rows for new replicas
 * (ports[i] for replica count+1+i, health stopped: the reconcile task starts
 * them), and the count that makes the reconcile task stop and remove the
 * extra ones. With an event.
 */
int store_deploy_set_replicas(PGconn *conn, int64_t dep, const char *version, int n, const int *ports,
			      const char *actor);

/* Forgets replica idx of version (the reconcile task stopped it). */
int store_deploy_replica_delete(PGconn *conn, int64_t dep, const char *version, int idx);

/* Deletes the deployment's rows (its replicas must be stopped first). */
int store_deploy_delete(PGconn *conn, int64_t dep);

/* The outputs a step holds now (a deploy step's approval), or NULL; the caller's. */
json_t *store_step_outputs(PGconn *conn, int64_t step_id);

#endif

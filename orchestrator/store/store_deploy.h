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

/*
 * What the reconcile round writes of one replica, with the event that says
 * so, in one transaction (store_deploy_replica_change): nothing reads the
 * row without its event, and a daemon that dies between them leaves
 * neither. write: REPLICA_PUT records port, handle and generation, then
 * sets health as REPLICA_HEALTH does (error kept where NULL, restarted
 * added to the restarts, the next start backoff_ms away when > 0);
 * REPLICA_DELETE forgets the replica (scaled down).
 */
enum store_replica_write { REPLICA_PUT, REPLICA_HEALTH, REPLICA_DELETE };
struct store_replica_change {
	enum store_replica_write write;
	int64_t dep;
	const char *version;
	int idx;
	int port, generation;        /* REPLICA_PUT */
	const json_t *handle;        /* REPLICA_PUT */
	const char *health, *error;  /* REPLICA_PUT, REPLICA_HEALTH */
	int restarted;
	int64_t backoff_ms;
};

/*
 * c's write and, when kind is not NULL, the event (kind, detail); nothing
 * written on an error. Its own transaction, or the caller's when conn is in
 * one.
 */
int store_deploy_replica_change(PGconn *conn, const struct store_replica_change *c, const char *actor,
				const char *kind, const json_t *detail);

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
 * weights before and after. *weights: {"VERSION": pct, …} after. Inside
 * a caller's transaction (store_deploy_tx) it is part of it: the caller
 * commits, or rolls back on an error.
 */
int store_deploy_shift(PGconn *conn, int64_t dep, const char *version, int traffic, int auto_stop_s,
		       const char *actor, const char *why, json_t **weights);

/*
 * The deployments as their rows hold them, parsed once (deployments_from_json)
 * and read by the reconcile task, the deploy step and the API. Strings and
 * JSON belong to the struct; deployment_free releases it all. Only what is
 * opaque to Ferry stays JSON: a replica's executor handle, how a version's
 * replicas start (serve) and its load-test result.
 */
enum deploy_state { DEPLOY_RUNNING, DEPLOY_STOPPED };
enum deploy_version_state { DEPLOY_V_STARTING, DEPLOY_V_SERVING, DEPLOY_V_RETIRED };
enum deploy_health { DEPLOY_H_STARTING, DEPLOY_H_HEALTHY, DEPLOY_H_UNHEALTHY, DEPLOY_H_STOPPED };
/* What the leader last said of a version's health (migration 0040): nothing, served, unserved. */
enum deploy_said { DEPLOY_SAID_NONE, DEPLOY_SAID_SERVED, DEPLOY_SAID_UNSERVED };

/* The names the rows, the events and the API use ("running", "serving", "healthy", …). */
const char *deploy_state_name(enum deploy_state s);
const char *deploy_version_state_name(enum deploy_version_state s);
const char *deploy_health_name(enum deploy_health h);

struct deploy_replica {
	int idx;                  /* 1–5 */
	int port;                 /* where it listens on 127.0.0.1 */
	enum deploy_health health;
	int restarts;
	int generation;           /* starts so far; 0: never started (scaled up, not yet started) */
	json_t *handle;           /* its executor type's handle (replicas.h), or NULL: none */
	char *last_error;         /* or NULL */
	int64_t next_start_in_ms; /* the restart backoff left; 0: it may start now */
};

struct deploy_version {
	char *version;
	int ord;                  /* 1, 2, … in the order versions were added: servers are vORD-rIDX */
	int weight;               /* its percentage of the deployment's traffic */
	int want_replicas;        /* how many replicas it should have ("replicas" in the API) */
	enum deploy_version_state state;
	char *artifact;
	json_t *serve;            /* how a replica starts: {"command","env","workdir","placement"} */
	json_t *load_test;        /* the load test's result, or NULL */
	int64_t run_id;           /* the run that deployed it; 0: none */
	char *step;               /* that run's step, or NULL */
	char *zero_since;         /* serving at 0% since (it retires retire_after_s later), or NULL */
	enum deploy_said said;    /* what the leader last said of its health (its version-* events) */
	struct deploy_replica *replicas; /* by idx */
	size_t nreplicas;
};

struct deployment {
	int64_t id;
	char *name;
	char *model;
	int port;                 /* the front address: http://127.0.0.1:port */
	enum deploy_state state;
	int auto_stop_s;          /* 0: never */
	int retire_after_s;       /* a version at 0% that long retires; 0: never */
	char *deadline;           /* when it stops (a timestamp as PostgreSQL writes it in JSON), or NULL */
	char *created_at;
	int64_t run_id;           /* the run whose deploy step created it; 0: none */
	/* an A/B test (migration 0025): requests with header match_header (= match_value, or any
	 * value when NULL) go to match_version alone; NULL when none runs */
	char *match_version, *match_header, *match_value;
	struct deploy_version *versions; /* by ord */
	size_t nversions;
};

/*
 * What is said of version's health now (said), with event kind (detail,
 * not taken) when kind is not NULL, in one statement; nothing when that
 * was said already (two leaders in a hand-over say it once).
 */
int store_deploy_version_said(PGconn *conn, int64_t dep, const char *version, enum deploy_said said,
			      const char *actor, const char *kind, const json_t *detail);

/*
 * "BEGIN", "COMMIT" or "ROLLBACK" on conn: several of this file's changes
 * as one — the statements that are one (store_deploy_match,
 * store_deploy_version_retire) and those that join a caller's
 * (store_deploy_shift, store_deploy_replica_change). An A/B test's end
 * (the routing ends, the winner takes 100%) must never be seen half done.
 */
int store_deploy_tx(PGconn *conn, const char *cmd);

/*
 * Starts (version not NULL) or ends (NULL) deployment dep's A/B routing:
 * requests with header (equal to value, or any value when value is NULL)
 * go to version alone. An event each ("ab-started", "ab-ended") with the
 * actor and why. FERRY_ENOTFOUND when dep or version is not there.
 * (store_deploy_ab.c)
 */
int store_deploy_match(PGconn *conn, int64_t dep, const char *version, const char *header, const char *value,
		       const char *actor, const char *why);

/* Releases d's members (d itself stays: an element of an array); NULL is fine. */
void deployment_dispose(struct deployment *d);
/* Releases d and what it holds; NULL is fine. */
void deployment_free(struct deployment *d);
/* Releases an array of n deployments (store_deployments_list's); NULL is fine. */
void deployments_free(struct deployment *list, size_t n);

/*
 * Parses one deployment from its JSON aggregate (the shape below, as the
 * store's query builds it): *out is the caller's. FERRY_EDB naming the
 * field when a field is missing or of the wrong type. No database: pure.
 */
int deployment_from_json(struct deployment **out, const json_t *j);

/* Parses an array of them: *out (n elements) is the caller's (deployments_free). */
int deployments_from_json(struct deployment **out, size_t *n, const json_t *j);

/*
 * The JSON the API shows for d, new (the caller's), with the fields in the
 * order PostgreSQL's jsonb gave them:
 * {"id","url","name","port","model","state","run_id","deadline","versions",
 *  "created_at","auto_stop_s"}, each version {"ord","step","serve","state",
 *  "run_id","weight","version","artifact","replicas","load_test",
 *  "replica_list"}, each replica {"idx","port","handle","health","restarts",
 *  "generation","last_error","next_start_in_ms"}; absent values are null.
 * "url" is the front at address front (the answering host's; NULL: 127.0.0.1).
 */
json_t *deployment_to_json(const struct deployment *d, const char *front);

/* The version called version in d, or NULL. */
const struct deploy_version *deployment_version(const struct deployment *d, const char *version);

/*
 * Every deployment with its versions and their replicas, by id: *out
 * (*n of them) is the caller's (deployments_free).
 */
int store_deployments_list(struct deployment **out, size_t *n, PGconn *conn);

/* Deployment id with its versions and replicas; *out is the caller's. FERRY_ENOTFOUND when there is none. */
int store_deployment_get(struct deployment **out, PGconn *conn, int64_t id);

/* Appends an event to deployment dep. */
int store_deploy_event(PGconn *conn, int64_t dep, const char *actor, const char *kind, const json_t *detail);

/* The events of dep, oldest first (at most limit). */
int store_deploy_events(PGconn *conn, int64_t dep, int limit, json_t **out);

/*
 * Deployment dep's replicas' health since the unix time since
 * (db/functions/replica_health.sql's ferry_replica_health): [{"version",
 * "replica", "health", "before", "changes": [[unix_s, health], …]}]; *out
 * is the caller's.
 */
int store_deploy_health_history(PGconn *conn, int64_t dep, int64_t since, json_t **out);

/*
 * Deployments whose auto-stop deadline passed: each is switched to stopped
 * in the statement that finds it (so with several daemons each fires once),
 * with an event; *ids (the caller's) lists them. First, those within
 * deploy_warn_lead_s of it get their warning event, once per deadline:
 * *warned (*nwarned of them, the caller's: deploy_warnings_free) are those.
 */
struct deploy_warning {
	int64_t id;
	char *deployment;         /* its name */
	char *deadline;           /* a timestamp as PostgreSQL writes it in JSON */
};

/* Releases n warnings (store_deploy_due's); NULL is fine. */
void deploy_warnings_free(struct deploy_warning *w, size_t n);

int store_deploy_due(PGconn *conn, const char *actor, int64_t **ids, int *n, struct deploy_warning **warned,
		     size_t *nwarned);

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
 * Retires every serving version at 0% for longer than its deployment's
 * retire_after_s while another takes traffic (the reconcile round's first
 * step: its replicas stop in the same round); *n of them, an event each.
 */
int store_deploy_retire_due(PGconn *conn, const char *actor, int *n);

/* Sets deployment dep's retire_after_s (secs 0: never), an event when it changes; FERRY_ENOTFOUND. */
int store_deploy_retire_after(PGconn *conn, int64_t dep, int secs, const char *actor);

/*
 * Sets a serving version's replica count (1–5): rows for new replicas
 * (ports[i] for replica count+1+i, health stopped: the reconcile task starts
 * them), and the count that makes the reconcile task stop and remove the
 * extra ones. With an event.
 */
int store_deploy_set_replicas(PGconn *conn, int64_t dep, const char *version, int n, const int *ports,
			      const char *actor);

/*
 * Every port a row gives to a deployment's front or to a replica (any
 * host's, any state): sorted, in *ports (the caller's, NULL when none).
 * A port is taken from its row's writing, not from its binding: a front
 * is bound by each host's HAProxy a round later, a stopped replica binds
 * its port again when it starts.
 */
int store_deploy_ports_taken(PGconn *conn, int **ports, size_t *n);

/* Deletes the deployment's rows (its replicas must be stopped first). */
int store_deploy_delete(PGconn *conn, int64_t dep);

/* The outputs a step holds now (a deploy step's approval), or NULL; the caller's. */
json_t *store_step_outputs(PGconn *conn, int64_t step_id);

#endif

/*
 * reconcile — makes the replicas and HAProxy match the deployments'
 * desired state in PostgreSQL (store_deploy.h), and records every
 * difference it repaired as a deployment event. It runs on the leader
 * only: as a task on its worker pool every RECONCILE_EVERY_MS, at once
 * when another daemon asks for a round (reconcile_request: NOTIFY
 * ferry_reconcile), and in the leader's own deploy steps and API calls
 * after a change, so traffic moves without waiting for the next round.
 * One round at a time per process (a mutex): the task and a step never
 * interleave their changes.
 *
 * A round: deployments whose auto-stop deadline passed become stopped
 * (once, in the statement that finds them); each replica of a serving
 * version is checked (alive, then GET /v2/health/ready) and restarted with
 * backoff when it died; HAProxy gets one frontend per running deployment
 * with each healthy replica weighted by its version's share
 * (deploy_server_weight) and the others at 0; replicas of stopped
 * deployments are stopped after HAProxy stopped sending them requests.
 */
#ifndef FERRY_RECONCILE_H
#define FERRY_RECONCILE_H

#include <libpq-fe.h>

#include "store/task.h"

#define RECONCILE_EVERY_MS 2000

/* One round for home's deployments; may block (bounded): worker threads only. */
int reconcile_now(PGconn *conn, const char *home, const char *actor);

/*
 * What a change of the desired state (a deploy step, the API) calls to have
 * it applied before it answers. Rounds run on the leader only. With
 * RECONCILE_MAY_RUN (a deploy step, on a worker thread) the leader's own
 * process runs one here (as reconcile_now), and so does any process when
 * none leads (a `ferry dev` session on its own database). Otherwise — the
 * API always, a follower's deploy step — it asks the leader for one (a
 * ticket and a NOTIFY ferry_reconcile, migration 0030; the leader's engine
 * makes its reconcile task due at once) and waits, at most
 * RECONCILE_WAIT_MS, until a round that began after the ask is over: it
 * never touches a replica or HAProxy itself — but a deploy step's process
 * that keeps its host then brings its own host's front up to date at once
 * (a keeper's round) rather than within a round. The API with no leader up
 * does not wait (the next leader applies the change). FERRY_ERROR (saying
 * so) when the leader ran no round in time; the change stays written and
 * its next round applies it.
 */
#define RECONCILE_WAIT_MS 30000
enum { RECONCILE_MAY_RUN = 1 }; /* run the round here on the leader, or when none leads (not the API) */
int reconcile_request(PGconn *conn, const char *home, const char *actor, int flags);

/*
 * Whether this process leads (the engine says so when it wins or loses the
 * election): 0, 1, or RECONCILE_LEADS_NO_POOL — it leads with no worker
 * pool (FERRY_WORKERS=0), so its task runs no round and every ask of this
 * process runs it where it is asked.
 */
#define RECONCILE_LEADS_NO_POOL 2
void reconcile_set_leading(int how);

/*
 * The `reconcile` periodic task (task.h): every RECONCILE_EVERY_MS on the
 * leader, one round for FERRY_HOME on the worker pool (none without one).
 */
extern const struct task reconcile_task;
/*
 * Every daemon's (not dev sessions): one daemon per host — the one that
 * holds the host's lock (store_host_keeper) — keeps the replicas whose
 * handle names its host: checks them, restarts them with backoff, stops
 * and removes them as the deployments say, every RECONCILE_EVERY_MS; the
 * leader's round does the same for its own host when it keeps it, and
 * leaves another host's replicas to their keeper (their recorded health
 * weighs them in HAProxy, reached at their host's address) unless that
 * host is lost: then it starts a replacement on its own host.
 */
extern const struct task replicas_task;

/* What home's HAProxy applies now (hap_read); FERRY_ENOTFOUND when it does not run. */
struct json_t;
int reconcile_haproxy_read(const char *home, struct json_t **out);

/* Per-server statistics of home's HAProxy (hap_stats). */
int reconcile_haproxy_stats(const char *home, struct json_t **out);

/* Stops home's HAProxy (a test's or `ferryd haproxy stop`'s end); replicas are left alone. */
void reconcile_haproxy_stop(const char *home);

#endif

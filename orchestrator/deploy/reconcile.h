/*
 * reconcile — makes the replicas and HAProxy match the deployments'
 * desired state in PostgreSQL (store_deploy.h), and records every
 * difference it repaired as a deployment event. It runs as a leader task
 * on the worker pool every RECONCILE_EVERY_MS, and at once after a change
 * (a deploy step, the API) so traffic moves without waiting for the next
 * round. One round at a time per process (a mutex): the task and a step
 * never interleave their changes.
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
 * The `reconcile` periodic task (task.h): every RECONCILE_EVERY_MS on the
 * leader, one round for FERRY_HOME on the worker pool (none without one).
 */
extern const struct task reconcile_task;

/* What home's HAProxy applies now (hap_read); FERRY_ENOTFOUND when it does not run. */
struct json_t;
int reconcile_haproxy_read(const char *home, struct json_t **out);

/* Per-server statistics of home's HAProxy (hap_stats). */
int reconcile_haproxy_stats(const char *home, struct json_t **out);

/* Stops home's HAProxy (a test's or `ferryd haproxy stop`'s end); replicas are left alone. */
void reconcile_haproxy_stop(const char *home);

#endif

/*
 * store_reconcile — the rounds a daemon asks of the leader (migration 0030,
 * deploy/reconcile.c reconcile_request): a ticket with a NOTIFY
 * ferry_reconcile, the `requested` a round starts from and its end, and
 * whether an ask was answered or any leader holds the lock at all.
 */
#include "store/store_reconcile.h"

#include <stdio.h>

#include "store/store_priv.h"
#include "lib/util.h"


int store_reconcile_request(PGconn *conn, int64_t *ticket)
{
	PGresult *res = NULL;
	int error;

	*ticket = 0;
	error = store_q(&res, conn,
			"WITH u AS (UPDATE reconcile_rounds SET requested = requested + 1 RETURNING requested) "
			"SELECT u.requested, pg_notify('ferry_reconcile', '') FROM u", 0, NULL);
	if (error == FERRY_OK)
		*ticket = store_intval(res, 0, 0);
	PQclear(res);
	return error;
}

int store_reconcile_requested(PGconn *conn, int64_t *requested)
{
	PGresult *res = NULL;
	int error = store_q(&res, conn, "SELECT requested FROM reconcile_rounds", 0, NULL);

	*requested = error == FERRY_OK && PQntuples(res) == 1 ? store_intval(res, 0, 0) : 0;
	PQclear(res);
	return error;
}

int store_reconcile_done(PGconn *conn, int64_t requested)
{
	char buf[24];
	const char *params[1] = {buf};

	snprintf(buf, sizeof(buf), "%lld", (long long)requested);
	/* and every host's keeper runs its round now (ferry_replicas): the fleet's fronts follow at once */
	return store_q(NULL, conn,
		       "WITH u AS (UPDATE reconcile_rounds SET done = greatest(done, $1::bigint), done_at = now()) "
		       "SELECT pg_notify('ferry_replicas', '')",
		       1, params);
}

int store_reconcile_check(PGconn *conn, int64_t ticket, int *done, int *leader)
{
	char buf[24], key[24];
	const char *params[2] = {buf, key};
	PGresult *res = NULL;
	int error;

	snprintf(buf, sizeof(buf), "%lld", (long long)ticket);
	snprintf(key, sizeof(key), "%d", STORE_LEADER_LOCK_KEY);
	/* the leader holds a session advisory lock on the key (engine_tasks.c): objid is its low 32 bits */
	error = store_q(&res, conn,
			"SELECT (SELECT done >= $1::bigint FROM reconcile_rounds), "
			"       EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
			"               AND objid = $2::bigint AND objsubid = 1)",
			2, params);
	*done = *leader = 0;
	if (error == FERRY_OK) {
		*done = PQgetvalue(res, 0, 0)[0] == 't';
		*leader = PQgetvalue(res, 0, 1)[0] == 't';
	}
	PQclear(res);
	return error;
}

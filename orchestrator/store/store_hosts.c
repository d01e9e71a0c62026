/*
 * store_hosts — the daemons' rows (migration 0029): each daemon's host
 * task writes its own every lease/3 (what the machine offers, where it
 * answers), a clean shutdown marks it stopped, the leader prunes the dead
 * ones a day old, and GET /hosts reads them through ferry_hosts()
 * (db/functions/hosts.sql).
 */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>

#include "store/store_priv.h"
#include "lib/util.h"

int store_host_beat(PGconn *conn, const char *owner, const char *host, const char *address,
		    const json_t *capacity, const json_t *labels, int64_t lease_ms, double *hold_cpus,
		    int64_t *hold_memory_mb)
{
	char lease[24], *cap = json_dumps(capacity, JSON_COMPACT), *lab = json_dumps(labels, JSON_COMPACT);
	const char *params[6] = {owner, host, address, cap, lab, lease};
	PGresult *res = NULL;
	int error;

	*hold_cpus = 0, *hold_memory_mb = 0;
	snprintf(lease, sizeof(lease), "%lld", (long long)lease_ms);
	/* the heartbeat, and in the same statement what this host's live replicas ask for (admission's room) */
	error = store_q(&res, conn,
			"WITH beat AS (INSERT INTO daemons (owner, host, address, capacity, labels, lease_ms) "
			"  VALUES ($1, $2, $3, $4, $5, $6) "
			"  ON CONFLICT (owner) DO UPDATE SET address = $3, capacity = $4, labels = $5, lease_ms = $6, "
			"    last_seen = now(), stopped_at = NULL) "
			"SELECT coalesce(sum(cpus), 0), coalesce(sum(memory_mb), 0) FROM ferry_host_replicas($2)",
			6, params);
	free(cap), free(lab);
	if (error < 0)
		return error;
	*hold_cpus = strtod(PQgetvalue(res, 0, 0), NULL);
	*hold_memory_mb = store_intval(res, 0, 1);
	PQclear(res);
	return FERRY_OK;
}

int store_host_stopped(PGconn *conn, const char *owner)
{
	const char *params[1] = {owner};

	return store_q(NULL, conn, "UPDATE daemons SET stopped_at = now() WHERE owner = $1", 1, params);
}

int store_hosts_prune(PGconn *conn, int *removed)
{
	PGresult *res = NULL;
	int error;

	*removed = 0;
	/* dead a day: stopped, or silent past their lease */
	error = store_q(&res, conn,
			"WITH x AS (DELETE FROM daemons WHERE last_seen < now() - interval '1 day' RETURNING 1) "
			"SELECT count(*) FROM x", 0, NULL);
	if (error == FERRY_OK)
		*removed = (int)store_intval(res, 0, 0);
	PQclear(res);
	return error;
}

int store_hosts_list(char **out, PGconn *conn)
{
	PGresult *res = NULL;
	int error;

	*out = NULL;
	if ((error = store_q(&res, conn, "SELECT ferry_hosts()", 0, NULL)) < 0)
		return error;
	*out = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return FERRY_OK;
}

int store_admission_facts(json_t **hosts, json_t **queues, PGconn *conn)
{
	PGresult *res = NULL;
	int error;

	*hosts = *queues = NULL;
	error = store_q(&res, conn,
			"SELECT (SELECT coalesce(jsonb_object_agg(host, capacity), '{}') FROM ("
			"  SELECT DISTINCT ON (host) host, capacity FROM daemons "
			"  WHERE stopped_at IS NULL AND last_seen + lease_ms * interval '1 millisecond' > now() "
			"  ORDER BY host, last_seen DESC) d), "
			"  (SELECT coalesce(jsonb_object_agg(name, jsonb_build_object('max_running', max_running, "
			"     'max_gpus', max_gpus, 'max_cpus', max_cpus)), '{}') FROM queues)",
			0, NULL);
	if (error < 0)
		return error;
	*hosts = store_jsonval(res, 0, 0);
	*queues = store_jsonval(res, 0, 1);
	PQclear(res);
	if (*hosts == NULL || *queues == NULL) {
		json_decref(*hosts), json_decref(*queues);
		*hosts = *queues = NULL;
		ferry_error_set("the hosts' and queues' JSON did not parse");
		return FERRY_ERROR;
	}
	return FERRY_OK;
}

int store_host_address(char **address, int *live, char **last_seen, PGconn *conn, const char *host)
{
	const char *params[1] = {host};
	PGresult *res = NULL;
	int error;

	*address = *last_seen = NULL;
	*live = 0;
	/* its newest daemon: the one that heartbeat last */
	error = store_q(&res, conn,
			"SELECT address, stopped_at IS NULL AND last_seen + lease_ms * interval '1 millisecond' > now(), "
			"       ferry_ts(last_seen) "
			"FROM daemons WHERE host = $1 ORDER BY last_seen DESC LIMIT 1",
			1, params);
	if (error == FERRY_OK && PQntuples(res) == 1) {
		*address = store_dupval(res, 0, 0);
		*live = PQgetvalue(res, 0, 1)[0] == 't';
		*last_seen = store_dupval(res, 0, 2);
	}
	PQclear(res);
	return error;
}

/*
 * The host's lock: a session-level advisory lock in the two-key space
 * (class 1179800153, "FRRY"; the host's hashtext), so it never meets the
 * one-key locks (the leader's, the migrations'). Taken again each round on the same
 * session (re-entrant: it stays held while the session lives, and is
 * released when the daemon or its connection dies).
 */
int store_host_keeper(PGconn *conn, const char *host, int *held)
{
	const char *params[1] = {host};
	PGresult *res = NULL;
	int error;

	*held = 0;
	if (conn == NULL)
		return FERRY_EDB;
	error = store_q(&res, conn, "SELECT pg_try_advisory_lock(1179800153, hashtext($1))", 1, params);
	if (error == FERRY_OK)
		*held = PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't';
	PQclear(res);
	return error;
}

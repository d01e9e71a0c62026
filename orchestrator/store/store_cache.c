/*
 * store_cache — the SQL of the data cache (steps/datacache.c): looking up,
 * committing and evicting node-local entries, the sessions that pin them,
 * and the statistics the API and /metrics report. The transitions are the
 * PL/pgSQL functions of db/migrations/0004_datacache.sql (one round trip
 * each); sessions are released by a trigger on runs when a run finishes.
 */
#include "store/store.h"
#include "store/store_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/metrics.h"
#include "lib/util.h"

int store_cache_hit(char **session, char **path, int64_t *bytes, PGconn *conn, const char *host,
		    const char *key, int64_t run, int64_t step, int attempt)
{
	char rb[24], sb[24], ab[16];
	const char *params[] = {host, key, rb, sb, ab};
	PGresult *res = NULL;
	int error;

	*session = *path = NULL;
	*bytes = 0;
	snprintf(rb, sizeof(rb), "%lld", (long long)run);
	snprintf(sb, sizeof(sb), "%lld", (long long)step);
	snprintf(ab, sizeof(ab), "%d", attempt);
	if ((error = store_q(&res, conn, "SELECT session, path, bytes FROM ferry_cache_hit($1, $2, $3, $4, $5)",
			5, params)) < 0)
		return error;
	if (PQntuples(res) == 1) {
		*session = xstrdup(PQgetvalue(res, 0, 0));
		*path = xstrdup(PQgetvalue(res, 0, 1));
		parse_int64(PQgetvalue(res, 0, 2), bytes);
		error = 1;
	}
	PQclear(res);
	return error;
}

int store_cache_miss(PGconn *conn, const char *host)
{
	const char *params[] = {host};

	return store_q(NULL, conn,
		  "INSERT INTO cache_stats AS s (host, misses) VALUES ($1, 1) "
		  "ON CONFLICT (host) DO UPDATE SET misses = s.misses + 1", 1, params);
}

int store_cache_forget(PGconn *conn, const char *host, const char *key)
{
	const char *params[] = {host, key};

	return store_q(NULL, conn, "DELETE FROM cache_entries WHERE host = $1 AND key = $2", 2, params);
}

int store_cache_evict(char ***paths, int *n, PGconn *conn, const char *host, const char *key,
		      int64_t bytes, int64_t cap)
{
	char bb[24], cb[24];
	const char *params[] = {host, key, bb, cb};
	PGresult *res = NULL;
	int error;

	*paths = NULL;
	*n = 0;
	snprintf(bb, sizeof(bb), "%lld", (long long)bytes);
	snprintf(cb, sizeof(cb), "%lld", (long long)cap);
	if ((error = store_q(&res, conn, "SELECT key, path, bytes FROM ferry_cache_evict($1, $2, $3, $4)", 4,
			params)) < 0)
		return error;
	*n = PQntuples(res);
	*paths = xcalloc((size_t)*n + 1, sizeof(char *));
	for (int i = 0; i < *n; i++)
		(*paths)[i] = xstrdup(PQgetvalue(res, i, 1));
	PQclear(res);
	return FERRY_OK;
}

int store_cache_used(int64_t *used, PGconn *conn, const char *host)
{
	const char *params[] = {host};
	PGresult *res = NULL;
	int error;

	*used = 0;
	if ((error = store_q(&res, conn, "SELECT coalesce(sum(bytes), 0) FROM cache_entries WHERE host = $1", 1,
			params)) < 0)
		return error;
	parse_int64(PQgetvalue(res, 0, 0), used);
	PQclear(res);
	return FERRY_OK;
}

int store_cache_commit(char **session, PGconn *conn, const struct store_cache_entry *e, int64_t run,
		       int64_t step, int attempt)
{
	char bb[24], rb[24], sb[24], ab[16], *cmd = NULL;
	const char *params[10];
	PGresult *res = NULL;
	int error;

	*session = NULL;
	snprintf(bb, sizeof(bb), "%lld", (long long)e->bytes);
	snprintf(rb, sizeof(rb), "%lld", (long long)run);
	snprintf(sb, sizeof(sb), "%lld", (long long)step);
	snprintf(ab, sizeof(ab), "%d", attempt);
	cmd = e->command ? json_dumps(e->command, JSON_COMPACT) : NULL;
	params[0] = e->host, params[1] = e->key, params[2] = e->fingerprint, params[3] = e->path;
	params[4] = e->dataset, params[5] = cmd, params[6] = bb, params[7] = rb, params[8] = sb;
	params[9] = ab;
	error = store_q(&res, conn,
		   "SELECT ferry_cache_commit($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10)", 10, params);
	if (error == FERRY_OK)
		*session = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	free(cmd);
	return error;
}

int store_cache_json(char **out, PGconn *conn, const char *host)
{
	const char *params[] = {host};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	if ((error = store_q(&res, conn,
			"WITH e AS ("
			"  SELECT e.*, (SELECT coalesce(json_agg(json_build_object('id', c.id, 'run', c.run_id, "
			"      'step', s.name, 'hit', c.hit, 'opened_at', ferry_ts(c.opened_at)) "
			"      ORDER BY c.opened_at), '[]') "
			"    FROM cache_sessions c LEFT JOIN steps s ON s.id = c.step_id "
			"    WHERE c.host = e.host AND c.key = e.key AND c.released_at IS NULL) AS sessions "
			"  FROM cache_entries e WHERE $1::text IS NULL OR e.host = $1"
			"), st AS ("
			"  SELECT coalesce(sum(hits), 0) AS hits, coalesce(sum(misses), 0) AS misses, "
			"         coalesce(sum(evictions), 0) AS evictions, "
			"         coalesce(sum(evicted_bytes), 0) AS evicted_bytes, "
			"         coalesce(sum(staged_bytes), 0) AS staged_bytes "
			"  FROM cache_stats WHERE $1::text IS NULL OR host = $1"
			") "
			"SELECT json_build_object("
			"  'entries', (SELECT coalesce(json_agg(json_build_object('host', host, 'key', key, "
			"      'fingerprint', fingerprint, 'path', path, 'dataset', dataset, 'command', command, "
			"      'bytes', bytes, 'hits', hits, 'created_at', ferry_ts(created_at), "
			"      'last_used_at', ferry_ts(last_used_at), 'sessions', sessions) "
			"      ORDER BY last_used_at DESC, key), '[]') FROM e), "
			"  'stats', (SELECT json_build_object('hits', st.hits, 'misses', st.misses, "
			"      'hit_ratio', CASE WHEN st.hits + st.misses > 0 "
			"                   THEN round(st.hits::numeric / (st.hits + st.misses), 4) END, "
			"      'evictions', st.evictions, 'evicted_bytes', st.evicted_bytes, "
			"      'staged_bytes', st.staged_bytes, "
			"      'entries', (SELECT count(*) FROM e), "
			"      'bytes', (SELECT coalesce(sum(bytes), 0) FROM e), "
			"      'open_sessions', (SELECT count(*) FROM cache_sessions c WHERE c.released_at IS NULL "
			"                        AND ($1::text IS NULL OR c.host = $1))) FROM st))",
			1, params)) < 0)
		return error;
	*out = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return FERRY_OK;
}

int store_cache_metrics(char **buf, size_t *len, size_t *cap, PGconn *conn)
{
	static const struct {
		const char *name, *type, *help;
	} m[] = {
		{"ferry_cache_hits_total", "counter", "Cache steps served from a complete entry"},
		{"ferry_cache_misses_total", "counter", "Cache steps that had to stage their dataset"},
		{"ferry_cache_evictions_total", "counter", "Entries evicted (least recently used) to make room"},
		{"ferry_cache_evicted_bytes_total", "counter", "Bytes of the entries evicted"},
		{"ferry_cache_staged_bytes_total", "counter", "Bytes copied or produced into new entries"},
		{"ferry_cache_entries", "gauge", "Complete entries"},
		{"ferry_cache_bytes", "gauge", "Bytes held by complete entries"},
		{"ferry_cache_open_sessions", "gauge", "Sessions of unfinished runs pinning entries"},
	};
	PGresult *res = NULL;
	int error;

	if ((error = store_q(&res, conn,
			"SELECT (SELECT coalesce(sum(hits), 0) FROM cache_stats), "
			"       (SELECT coalesce(sum(misses), 0) FROM cache_stats), "
			"       (SELECT coalesce(sum(evictions), 0) FROM cache_stats), "
			"       (SELECT coalesce(sum(evicted_bytes), 0) FROM cache_stats), "
			"       (SELECT coalesce(sum(staged_bytes), 0) FROM cache_stats), "
			"       (SELECT count(*) FROM cache_entries), "
			"       (SELECT coalesce(sum(bytes), 0) FROM cache_entries), "
			"       (SELECT count(*) FROM cache_sessions WHERE released_at IS NULL)",
			0, NULL)) < 0)
		return error;
	for (int i = 0; i < (int)(sizeof(m) / sizeof(m[0])); i++)
		metrics_appendf(buf, len, cap, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", m[i].name, m[i].help,
				m[i].name, m[i].type, m[i].name, PQgetvalue(res, 0, i));
	PQclear(res);
	return FERRY_OK;
}

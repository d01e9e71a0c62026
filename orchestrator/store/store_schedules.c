/*
 * store_schedules — the SQL of schedules (store_schedules.h). Every write
 * that accounts for a tick moves the schedule's next_at forward only if it
 * still is where the writer read it (a compare-and-set), and the tick's
 * row is keyed by (schedule, nominal time): so a second leader, or one that
 * lost its lock in the middle of a round, writes nothing twice.
 */
#include "store/store_schedules.h"

#include <stdlib.h>
#include <string.h>

#include "store/store_priv.h"
#include "lib/util.h"

/* What the audit trail keeps of schedule row R (a CTE's name): what it runs, when, with what. */
#define SCHED_AUDIT(R)                                                                                  \
	"jsonb_build_object('workflow', " R ".workflow, 'name', " R ".name, 'cron', " R ".cron, "         \
	"'timezone', " R ".timezone, 'concurrency', " R ".concurrency, 'catchup', " R ".catchup, "        \
	"'params', " R ".params, 'paused', " R ".paused)"

#define SCHED_COLS                                                                                    \
	"id, workflow, name, source, cron, timezone, gap, overlap, concurrency, catchup, max_catchup, " \
	"paused, params, coalesce(extract(epoch FROM next_at)::bigint, 0), created_by, updated_by"

void sched_row_dispose(struct sched_row *r)
{
	free(r->workflow), free(r->name), free(r->source), free(r->cron), free(r->timezone);
	free(r->gap), free(r->overlap), free(r->concurrency), free(r->catchup);
	free(r->created_by), free(r->updated_by);
	json_decref(r->params);
	memset(r, 0, sizeof(*r));
}

static int64_t int_at(PGresult *res, int row, int col)
{
	int64_t v = 0;

	parse_int64(PQgetvalue(res, row, col), &v);
	return v;
}

static void row_read(struct sched_row *r, PGresult *res, int i)
{
	r->id = int_at(res, i, 0);
	r->workflow = xstrdup(PQgetvalue(res, i, 1));
	r->name = xstrdup(PQgetvalue(res, i, 2));
	r->source = xstrdup(PQgetvalue(res, i, 3));
	r->cron = xstrdup(PQgetvalue(res, i, 4));
	r->timezone = xstrdup(PQgetvalue(res, i, 5));
	r->gap = xstrdup(PQgetvalue(res, i, 6));
	r->overlap = xstrdup(PQgetvalue(res, i, 7));
	r->concurrency = xstrdup(PQgetvalue(res, i, 8));
	r->catchup = xstrdup(PQgetvalue(res, i, 9));
	r->max_catchup = (int)int_at(res, i, 10);
	r->paused = PQgetvalue(res, i, 11)[0] == 't';
	r->params = json_loads(PQgetvalue(res, i, 12), 0, NULL);
	if (r->params == NULL)
		r->params = json_object();
	r->next_at = int_at(res, i, 13);
	r->created_by = xstrdup(PQgetvalue(res, i, 14));
	r->updated_by = PQgetisnull(res, i, 15) ? NULL : xstrdup(PQgetvalue(res, i, 15));
}

int store_sched_due(struct sched_row **rows, int *n, int64_t *now, PGconn *conn, int limit, int part, int parts)
{
	char lim[16], pa[16], pas[16];
	const char *p[3] = {lim, pa, pas};
	PGresult *res = NULL;
	int error;

	*rows = NULL;
	*n = 0;
	snprintf(lim, sizeof(lim), "%d", limit);
	snprintf(pa, sizeof(pa), "%d", part);
	snprintf(pas, sizeof(pas), "%d", parts > 0 ? parts : 1);
	if ((error = store_q(&res, conn,
			     "SELECT " SCHED_COLS " FROM schedules "
			     "WHERE next_at IS NOT NULL AND next_at <= now() AND id % $3::int = $2::int "
			     "ORDER BY next_at LIMIT $1",
			     3, p)) < 0)
		return error;
	*n = PQntuples(res);
	*rows = xcalloc((size_t)*n + 1, sizeof(**rows));
	for (int i = 0; i < *n; i++)
		row_read(&(*rows)[i], res, i);
	PQclear(res);
	if ((error = store_q(&res, conn, "SELECT floor(extract(epoch FROM now()))::bigint", 0, NULL)) < 0)
		return error;
	*now = int_at(res, 0, 0);
	PQclear(res);
	return FERRY_OK;
}

/* "{1,2,3}" of n integers; the caller frees it. */
static char *int_array(const int64_t *v, int n)
{
	struct sbuf b = {0};
	char *out;

	for (int i = 0; i < n; i++) {
		sbuf_sep(&b, i);
		sbuf_int(&b, v[i]);
	}
	out = xstrdup(sbuf_close(&b, n));
	free(b.p);
	return out;
}

static char *text_array(const char *const *v, int n)
{
	struct sbuf b = {0};
	char *out;

	for (int i = 0; i < n; i++) {
		sbuf_sep(&b, i);
		sbuf_elem(&b, v[i]);
	}
	out = xstrdup(sbuf_close(&b, n));
	free(b.p);
	return out;
}

int store_sched_skip(PGconn *conn, int64_t id, const int64_t *at, const char *const *reasons, int n,
		     int64_t next)
{
	char idb[32], first[32], nextb[32], *ats = int_array(at, n), *why = text_array(reasons, n);
	const char *p[5] = {idb, ats, why, first, next > 0 ? nextb : NULL};
	PGresult *res = NULL;
	int error;

	snprintf(idb, sizeof(idb), "%lld", (long long)id);
	snprintf(first, sizeof(first), "%lld", (long long)at[0]);
	snprintf(nextb, sizeof(nextb), "%lld", (long long)next);
	/* one statement, so one transaction: the ticks and the move of next_at */
	error = store_q(&res, conn,
			"WITH s AS (UPDATE schedules SET next_at = to_timestamp($5::bigint) "
			"           WHERE id = $1 AND next_at = to_timestamp($4::bigint) RETURNING id) "
			"INSERT INTO schedule_ticks (schedule_id, nominal_at, outcome, reason) "
			"SELECT s.id, to_timestamp(t.at), 'skipped', t.why "
			"FROM s, unnest($2::bigint[], $3::text[]) AS t(at, why) "
			"ON CONFLICT DO NOTHING RETURNING 1",
			5, p);
	if (error == FERRY_OK && PQntuples(res) == 0)
		error = 1;
	PQclear(res);
	free(ats), free(why);
	return error;
}

int store_sched_occasion(PGconn *conn, int64_t run_id, void *arg)
{
	struct sched_occasion *o = arg;
	char idb[32], nom[32], nextb[32], run[32];
	const char *p[5] = {idb, nom, o->next > 0 ? nextb : NULL, o->reason, run};
	PGresult *res = NULL;
	int error;

	snprintf(idb, sizeof(idb), "%lld", (long long)o->id);
	snprintf(nom, sizeof(nom), "%lld", (long long)o->nominal);
	snprintf(nextb, sizeof(nextb), "%lld", (long long)o->next);
	snprintf(run, sizeof(run), "%lld", (long long)run_id);
	o->dup = 0;
	if ((error = store_q(&res, conn,
			     "WITH t AS (INSERT INTO schedule_ticks (schedule_id, nominal_at, outcome, reason, run_id) "
			     "           VALUES ($1, to_timestamp($2::bigint), 'fired', $4, $5) "
			     "           ON CONFLICT DO NOTHING RETURNING 1), "
			     "s AS (UPDATE schedules SET next_at = to_timestamp($3::bigint) "
			     "      WHERE id = $1 AND next_at = to_timestamp($2::bigint) RETURNING 1) "
			     "SELECT (SELECT count(*) FROM t), (SELECT count(*) FROM s)",
			     5, p)) < 0)
		return error;
	if (strcmp(PQgetvalue(res, 0, 0), "0") == 0) {
		o->dup = 1;
		error = 1;
	} else if (strcmp(PQgetvalue(res, 0, 1), "0") == 0) {
		error = 1; /* the schedule moved on: edited, or accounted by another leader */
	}
	PQclear(res);
	return error;
}

int store_sched_tx(PGconn *conn, const char *cmd)
{
	return store_q(NULL, conn, cmd, 0, NULL);
}

int store_sched_duplicate(PGconn *conn, int64_t id, int64_t nominal, int64_t next)
{
	char idb[32], nom[32], nextb[32];
	const char *p[3] = {idb, nom, next > 0 ? nextb : NULL};

	snprintf(idb, sizeof(idb), "%lld", (long long)id);
	snprintf(nom, sizeof(nom), "%lld", (long long)nominal);
	snprintf(nextb, sizeof(nextb), "%lld", (long long)next);
	/*
	 * The tick is accounted for already: counted again, and the schedule
	 * moved past it, as the fire would have (an edit that wrote back a
	 * next_at read before the tick left it there, and every round found
	 * the same tick again and never fired another).
	 */
	return store_q(NULL, conn,
		       "WITH d AS (UPDATE schedule_ticks SET duplicates = duplicates + 1 "
		       "  WHERE schedule_id = $1 AND nominal_at = to_timestamp($2::bigint) RETURNING 1) "
		       "UPDATE schedules SET next_at = to_timestamp($3::bigint) "
		       "WHERE id = $1 AND next_at = to_timestamp($2::bigint)",
		       3, p);
}

int store_sched_running(int64_t **ids, int *n, PGconn *conn, int64_t id)
{
	char idb[32];
	const char *p[1] = {idb};
	PGresult *res = NULL;
	int error;

	*ids = NULL;
	*n = 0;
	snprintf(idb, sizeof(idb), "%lld", (long long)id);
	if ((error = store_q(&res, conn,
			     "SELECT id FROM runs WHERE schedule_id = $1 "
			     "AND state IN ('pending', 'running', 'stopping') ORDER BY id",
			     1, p)) < 0)
		return error;
	*n = PQntuples(res);
	*ids = xcalloc((size_t)*n + 1, sizeof(**ids));
	for (int i = 0; i < *n; i++)
		(*ids)[i] = int_at(res, i, 0);
	PQclear(res);
	return FERRY_OK;
}

/* The fields of a schedule that decide its fire times: a change re-plans next_at. */
static int timing_same(const json_t *a, const json_t *b)
{
	static const char *const keys[] = {"cron", "timezone", "gap", "overlap"};

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (!json_equal(json_object_get(a, keys[i]), json_object_get(b, keys[i])))
			return 0;
	return 1;
}

static int sync_schedules(PGconn *conn, const char *workflow, const json_t *list, const char *actor,
			  int64_t (*next_of)(const json_t *sched))
{
	const char *p1[1] = {workflow};
	PGresult *res = NULL;
	json_t *old = json_object(), *s;
	size_t i;
	int error;

	/* the current timing of each of the workflow's schedules, by name */
	if ((error = store_q(&res, conn,
			     "SELECT name, json_build_object('cron', cron, 'timezone', timezone, 'gap', gap, "
			     "'overlap', overlap)::text FROM schedules WHERE workflow = $1 AND source = 'workflow'",
			     1, p1)) < 0)
		goto out;
	for (int r = 0; r < PQntuples(res); r++)
		json_object_set_new(old, PQgetvalue(res, r, 0), json_loads(PQgetvalue(res, r, 1), 0, NULL));
	PQclear(res);
	res = NULL;
	json_array_foreach(list, i, s) {
		const json_t *was = json_object_get(old, json_string_value(json_object_get(s, "name")));
		int64_t next = was && timing_same(was, s) ? -1 : next_of(s);
		char maxc[16], nextb[32], *params = json_dumps(json_object_get(s, "params"), JSON_COMPACT);
		const char *p[14] = {workflow,
				     json_string_value(json_object_get(s, "name")),
				     json_string_value(json_object_get(s, "cron")),
				     json_string_value(json_object_get(s, "timezone")),
				     json_string_value(json_object_get(s, "gap")),
				     json_string_value(json_object_get(s, "overlap")),
				     json_string_value(json_object_get(s, "concurrency")),
				     json_string_value(json_object_get(s, "catchup")),
				     maxc,
				     params,
				     json_is_true(json_object_get(s, "paused")) ? "t" : "f",
				     next >= 0 ? "t" : "f",
				     next > 0 ? nextb : NULL,
				     actor};
		snprintf(maxc, sizeof(maxc), "%lld", (long long)json_integer_value(json_object_get(s, "max_catchup")));
		snprintf(nextb, sizeof(nextb), "%lld", (long long)next);
		/* paused is the YAML's for a new schedule; an existing one keeps
		 * what pause/resume made it */
		error = store_q(NULL, conn,
				"INSERT INTO schedules (workflow, name, source, cron, timezone, gap, overlap, "
				"  concurrency, catchup, max_catchup, params, paused, next_at, created_by) "
				"VALUES ($1, $2, 'workflow', $3, $4, $5, $6, $7, $8, $9, $10, $11, "
				"        to_timestamp($13::bigint), $14) "
				"ON CONFLICT (workflow, name) DO UPDATE SET source = 'workflow', cron = $3, "
				"  timezone = $4, gap = $5, overlap = $6, concurrency = $7, catchup = $8, "
				"  max_catchup = $9, params = $10, updated_at = now(), "
				"  next_at = CASE WHEN $12::boolean THEN to_timestamp($13::bigint) "
				"                 ELSE schedules.next_at END",
				14, p);
		free(params);
		if (error < 0)
			goto out;
	}
	{
		char *names = NULL;
		struct sbuf b = {0};
		const char *p[2] = {workflow, NULL};
		json_array_foreach(list, i, s) {
			sbuf_sep(&b, (int)i);
			sbuf_elem(&b, json_string_value(json_object_get(s, "name")));
		}
		names = xstrdup(sbuf_close(&b, (int)json_array_size(list)));
		free(b.p);
		p[1] = names;
		error = store_q(NULL, conn,
				"DELETE FROM schedules WHERE workflow = $1 AND source = 'workflow' "
				"AND name <> ALL ($2::text[])",
				2, p);
		free(names);
	}
out:
	PQclear(res);
	json_decref(old);
	return error;
}

/*
 * A trigger whose watched thing changed (another path, repository or
 * branch) starts over: its state, the baseline of what was seen, is
 * dropped, and the next look takes a new one without starting a run.
 */
/* A trigger still watches the same thing: its state (baseline) and since stay. */
#define SAME_WATCH                                                                      \
	"(triggers.kind = $3 "                                                          \
	" AND triggers.spec->>'path' IS NOT DISTINCT FROM $4::jsonb->>'path' "          \
	" AND triggers.spec->>'repo' IS NOT DISTINCT FROM $4::jsonb->>'repo' "          \
	" AND triggers.spec->>'branch' IS NOT DISTINCT FROM $4::jsonb->>'branch')"

static int sync_triggers(PGconn *conn, const char *workflow, const json_t *list, const char *actor)
{
	json_t *s;
	size_t i;
	int error = FERRY_OK;
	struct sbuf b = {0};
	char *names;

	json_array_foreach(list, i, s) {
		char *spec = json_dumps(s, JSON_COMPACT);
		const char *p[5] = {workflow, json_string_value(json_object_get(s, "name")),
				    json_string_value(json_object_get(s, "kind")), spec, actor};
		error = store_q(NULL, conn,
				"INSERT INTO triggers (workflow, name, kind, spec, updated_by) VALUES ($1, $2, $3, $4, $5) "
				"ON CONFLICT (workflow, name) DO UPDATE SET kind = $3, spec = $4, updated_at = now(), "
				"  updated_by = $5, "
				"  state = CASE WHEN " SAME_WATCH " THEN triggers.state END, "
				"  since = CASE WHEN " SAME_WATCH " THEN triggers.since ELSE now() END",
				5, p);
		free(spec);
		if (error < 0)
			return error;
		sbuf_sep(&b, (int)i);
		sbuf_elem(&b, json_string_value(json_object_get(s, "name")));
	}
	names = xstrdup(sbuf_close(&b, (int)json_array_size(list)));
	free(b.p);
	{
		const char *p[2] = {workflow, names};
		error = store_q(NULL, conn, "DELETE FROM triggers WHERE workflow = $1 AND name <> ALL ($2::text[])",
				2, p);
	}
	free(names);
	return error;
}

int store_sched_sync(PGconn *conn, const char *workflow, const json_t *spec, const char *actor,
		     int64_t (*next_of)(const json_t *sched))
{
	json_t *empty = json_array();
	const json_t *sl = json_object_get(spec, "schedules"), *tl = json_object_get(spec, "triggers");
	int error;

	error = sync_schedules(conn, workflow, sl ? sl : empty, actor, next_of);
	if (error == FERRY_OK)
		error = sync_triggers(conn, workflow, tl ? tl : empty, actor);
	json_decref(empty);
	return error;
}

static void row_params(const struct sched_row *r, char *maxc, size_t maxcn, char *nextb, size_t nextn,
		       char **params)
{
	snprintf(maxc, maxcn, "%d", r->max_catchup);
	snprintf(nextb, nextn, "%lld", (long long)r->next_at);
	*params = json_dumps(r->params ? r->params : json_object(), JSON_COMPACT);
}

int store_sched_create(int64_t *id, PGconn *conn, const struct sched_row *r, const char *actor)
{
	char maxc[16], nextb[32], *params;
	PGresult *res = NULL;
	int error;

	row_params(r, maxc, sizeof(maxc), nextb, sizeof(nextb), &params);
	{
		const char *p[13] = {r->workflow, r->name, r->cron, r->timezone, r->gap, r->overlap,
				     r->concurrency, r->catchup, maxc, params, r->paused ? "t" : "f",
				     r->next_at > 0 ? nextb : NULL, actor};
		/* no name given: api-ID */
		error = store_q(&res, conn,
				"WITH i AS (SELECT nextval('schedules_id_seq') AS id), "
				"c AS (INSERT INTO schedules (id, workflow, name, source, cron, timezone, gap, overlap, "
				"  concurrency, catchup, max_catchup, params, paused, next_at, created_by) "
				"SELECT i.id, $1, coalesce($2, 'api-' || i.id), 'api', $3, $4, $5, $6, $7, $8, $9, $10, "
				"       $11, to_timestamp($12::bigint), $13 FROM i "
				"ON CONFLICT (workflow, name) DO NOTHING RETURNING *), "
				"a AS (INSERT INTO audit (actor, object, object_id, action, detail) "
				"  SELECT $13, 'schedule', c.id, 'created', " SCHED_AUDIT("c") " FROM c) "
				"SELECT id FROM c",
				13, p);
	}
	free(params);
	*id = 0;
	if (error == FERRY_OK && PQntuples(res) == 0) {
		ferry_error_set("workflow %s already has a schedule named %s", r->workflow, r->name ? r->name : "so");
		error = FERRY_ECONFLICT;
	} else if (error == FERRY_OK) {
		*id = int_at(res, 0, 0);
	}
	PQclear(res);
	return error;
}

int store_sched_get(struct sched_row *r, PGconn *conn, int64_t id)
{
	char idb[32];
	const char *p[1] = {idb};
	PGresult *res = NULL;
	int error;

	memset(r, 0, sizeof(*r));
	snprintf(idb, sizeof(idb), "%lld", (long long)id);
	if ((error = store_q(&res, conn, "SELECT " SCHED_COLS " FROM schedules WHERE id = $1", 1, p)) < 0)
		return error;
	if (PQntuples(res) == 0) {
		ferry_error_set("schedule %lld not found", (long long)id);
		error = FERRY_ENOTFOUND;
	} else {
		row_read(r, res, 0);
	}
	PQclear(res);
	return error;
}

int store_sched_update(PGconn *conn, const struct sched_row *r, int set_next, const char *actor)
{
	char idb[32], maxc[16], nextb[32], *params;
	int error;
	PGresult *res = NULL;

	snprintf(idb, sizeof(idb), "%lld", (long long)r->id);
	row_params(r, maxc, sizeof(maxc), nextb, sizeof(nextb), &params);
	{
		const char *p[14] = {idb, r->cron, r->timezone, r->gap, r->overlap, r->concurrency, r->catchup,
				     maxc, params, r->paused ? "t" : "f", r->next_at > 0 ? nextb : NULL, r->name,
				     actor, set_next ? "t" : "f"};
		/* the audit row holds the schedule before and after: an edit is never without a trace */
		error = store_q(&res, conn,
				"WITH o AS (SELECT * FROM schedules WHERE id = $1), "
				"u AS (UPDATE schedules SET cron = $2, timezone = $3, gap = $4, overlap = $5, "
				"  concurrency = $6, catchup = $7, max_catchup = $8, params = $9, paused = $10, "
				"  next_at = CASE WHEN $14::bool THEN to_timestamp($11::bigint) ELSE next_at END, "
				"  name = $12, updated_at = now(), updated_by = $13 "
				"WHERE id = $1 RETURNING *), "
				"a AS (INSERT INTO audit (actor, object, object_id, action, detail) "
				"  SELECT $13, 'schedule', u.id, CASE WHEN o.paused = u.paused THEN 'changed' "
				"    WHEN u.paused THEN 'paused' ELSE 'resumed' END, "
				"    jsonb_build_object('before', " SCHED_AUDIT("o") ", 'after', " SCHED_AUDIT("u") ") "
				"  FROM u, o) "
				"SELECT 1 FROM u",
				14, p);
	}
	free(params);
	if (error == FERRY_OK && PQntuples(res) == 0) {
		ferry_error_set("schedule %lld not found", (long long)r->id);
		error = FERRY_ENOTFOUND;
	}
	PQclear(res);
	return error;
}

int store_sched_delete(PGconn *conn, int64_t id, const char *actor)
{
	char idb[32];
	const char *p[2] = {idb, actor};
	PGresult *res = NULL;
	int error;

	snprintf(idb, sizeof(idb), "%lld", (long long)id);
	if ((error = store_q(&res, conn,
			     "WITH d AS (DELETE FROM schedules WHERE id = $1 RETURNING *), "
			     "a AS (INSERT INTO audit (actor, object, object_id, action, detail) "
			     "  SELECT $2, 'schedule', d.id, 'deleted', " SCHED_AUDIT("d") " FROM d) "
			     "SELECT 1 FROM d",
			     2, p)) < 0)
		return error;
	if (PQntuples(res) == 0) {
		ferry_error_set("schedule %lld not found", (long long)id);
		error = FERRY_ENOTFOUND;
	}
	PQclear(res);
	return error;
}

#define SCHED_JSON                                                                                     \
	"json_build_object('id', s.id, 'workflow', s.workflow, 'name', s.name, 'source', s.source, "     \
	"'cron', s.cron, 'timezone', s.timezone, 'gap', s.gap, 'overlap', s.overlap, "                   \
	"'concurrency', s.concurrency, 'catchup', s.catchup, 'max_catchup', s.max_catchup, "             \
	"'params', s.params, 'paused', s.paused, 'next_at', ferry_ts(s.next_at), "                       \
	"'created_by', s.created_by, 'created_at', ferry_ts(s.created_at), 'updated_by', s.updated_by, " \
	"'last', (SELECT json_build_object('nominal_at', ferry_ts(t.nominal_at), 'outcome', t.outcome, " \
	"         'reason', t.reason, 'run', t.run_id, 'at', ferry_ts(t.at)) FROM schedule_ticks t "     \
	"         WHERE t.schedule_id = s.id ORDER BY t.nominal_at DESC LIMIT 1))"

int store_sched_list(char **out, PGconn *conn)
{
	PGresult *res = NULL;
	int error;

	*out = NULL;
	if ((error = store_q(&res, conn,
			     "SELECT json_build_object('schedules', coalesce(json_agg(" SCHED_JSON
			     " ORDER BY s.workflow, s.name), '[]')) FROM schedules s",
			     0, NULL)) < 0)
		return error;
	*out = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return FERRY_OK;
}

int store_sched_ticks(json_t **out, PGconn *conn, int64_t id, int limit, int64_t before)
{
	char idb[32], lim[16], bef[32];
	const char *p[3] = {idb, lim, before > 0 ? bef : NULL};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	snprintf(idb, sizeof(idb), "%lld", (long long)id);
	snprintf(lim, sizeof(lim), "%d", limit);
	snprintf(bef, sizeof(bef), "%lld", (long long)before);
	if ((error = store_q(&res, conn,
			     "SELECT coalesce(json_agg(json_build_object('nominal_at', ferry_ts(nominal_at), "
			     "  'outcome', outcome, 'reason', reason, 'run', run_id, 'at', ferry_ts(at), "
			     "  'late_ms', round(extract(epoch FROM at - nominal_at) * 1000), "
			     "  'duplicates', duplicates) ORDER BY nominal_at DESC), '[]') "
			     "FROM (SELECT * FROM schedule_ticks WHERE schedule_id = $1 "
			     "      AND ($3::bigint IS NULL OR nominal_at < to_timestamp($3::bigint)) "
			     "      ORDER BY nominal_at DESC LIMIT $2) t",
			     3, p)) < 0)
		return error;
	*out = json_loads(PQgetvalue(res, 0, 0), 0, NULL);
	PQclear(res);
	return *out ? FERRY_OK : FERRY_EDB;
}

json_t *sched_row_json(const struct sched_row *r)
{
	return json_pack("{s:I,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:i,s:O,s:b,s:s?,s:s?}", "id", (json_int_t)r->id,
			 "workflow", r->workflow, "name", r->name, "source", r->source ? r->source : "api",
			 "cron", r->cron, "timezone", r->timezone, "gap", r->gap, "overlap", r->overlap,
			 "concurrency", r->concurrency, "catchup", r->catchup, "max_catchup", r->max_catchup,
			 "params", r->params, "paused", r->paused, "created_by", r->created_by,
			 "updated_by", r->updated_by);
}

/* ---- triggers ------------------------------------------------------------- */

int store_triggers_load(json_t **out, PGconn *conn)
{
	PGresult *res = NULL;
	int error;

	*out = NULL;
	if ((error = store_q(&res, conn,
			     "SELECT coalesce(json_agg(json_build_object('id', t.id, 'workflow', t.workflow, "
			     "  'name', t.name, 'kind', t.kind, 'spec', t.spec, 'state', t.state, 'paused', t.paused, "
			     "  'since_ns', (extract(epoch FROM t.since) * 1000000)::bigint * 1000, "
			     "  'workdir', (SELECT w.workdir FROM workflows w WHERE w.name = t.workflow "
			     "              ORDER BY w.created_at DESC LIMIT 1), "
			     "  'running', EXISTS (SELECT 1 FROM runs r WHERE r.trigger_id = t.id "
			     "                     AND r.state IN ('pending', 'running', 'stopping'))) "
			     "  ORDER BY t.id), '[]') FROM triggers t",
			     0, NULL)) < 0)
		return error;
	*out = json_loads(PQgetvalue(res, 0, 0), 0, NULL);
	PQclear(res);
	return *out ? FERRY_OK : FERRY_EDB;
}

int store_trigger_occasion(PGconn *conn, int64_t run_id, void *arg)
{
	struct trigger_occasion *o = arg;
	char idb[32], seqb[32], run[32];
	const char *p[7] = {idb, o->key, run, o->detail, o->via, seqb, o->state};
	PGresult *res = NULL;
	int error;

	snprintf(idb, sizeof(idb), "%lld", (long long)o->id);
	snprintf(seqb, sizeof(seqb), "%lld", (long long)o->seq);
	snprintf(run, sizeof(run), "%lld", (long long)run_id);
	o->dup = 0;
	if ((error = store_q(&res, conn,
			     "WITH f AS (INSERT INTO trigger_fires (trigger_id, key, outcome, run_id, detail, via) "
			     "           VALUES ($1, $2, 'fired', $3, $4, $5) ON CONFLICT DO NOTHING RETURNING 1), "
			     "s AS (UPDATE triggers SET state = $7::jsonb, updated_at = now() "
			     "      WHERE id = $1 AND coalesce((state->>'seq')::bigint, -1) = $6::bigint RETURNING 1) "
			     "SELECT (SELECT count(*) FROM f), (SELECT count(*) FROM s)",
			     7, p)) < 0)
		return error;
	if (strcmp(PQgetvalue(res, 0, 0), "0") == 0) {
		o->dup = 1;
		error = 1;
	} else if (strcmp(PQgetvalue(res, 0, 1), "0") == 0) {
		error = 1;
	}
	PQclear(res);
	return error;
}

int store_trigger_state(PGconn *conn, int64_t id, int64_t seq, const char *state)
{
	char idb[32], seqb[32];
	const char *p[3] = {idb, seqb, state};
	PGresult *res = NULL;
	int error;

	snprintf(idb, sizeof(idb), "%lld", (long long)id);
	snprintf(seqb, sizeof(seqb), "%lld", (long long)seq);
	if ((error = store_q(&res, conn,
			     "UPDATE triggers SET state = $3::jsonb, updated_at = now() "
			     "WHERE id = $1 AND coalesce((state->>'seq')::bigint, -1) = $2::bigint RETURNING 1",
			     3, p)) < 0)
		return error;
	error = PQntuples(res) == 0;
	PQclear(res);
	return error;
}

int store_trigger_skip(PGconn *conn, int64_t id, const char *key, const char *reason, const char *detail,
		       const char *via, int64_t seq, const char *state)
{
	char idb[32], seqb[32];
	const char *p[7] = {idb, key, reason, detail, via, seqb, state};

	snprintf(idb, sizeof(idb), "%lld", (long long)id);
	snprintf(seqb, sizeof(seqb), "%lld", (long long)seq);
	return store_q(NULL, conn,
		       "WITH f AS (INSERT INTO trigger_fires (trigger_id, key, outcome, reason, detail, via) "
		       "           VALUES ($1, $2, 'skipped', $3, $4, $5) ON CONFLICT DO NOTHING RETURNING 1) "
		       "UPDATE triggers SET state = $7::jsonb, updated_at = now() "
		       "WHERE $7::jsonb IS NOT NULL AND id = $1 "
		       "AND coalesce((state->>'seq')::bigint, -1) = $6::bigint",
		       7, p);
}

int store_trigger_duplicate(PGconn *conn, int64_t id, const char *key)
{
	char idb[32];
	const char *p[2] = {idb, key};

	snprintf(idb, sizeof(idb), "%lld", (long long)id);
	return store_q(NULL, conn, "UPDATE trigger_fires SET duplicates = duplicates + 1 WHERE trigger_id = $1 AND key = $2",
		       2, p);
}

#define TRIGGER_JSON                                                                                    \
	"json_build_object('id', t.id, 'workflow', t.workflow, 'name', t.name, 'kind', t.kind, "         \
	"'spec', t.spec, 'paused', t.paused, 'since', ferry_ts(t.since), "                              \
	"'watching', t.state IS NOT NULL, 'fingerprint', t.state->>'fingerprint', "                     \
	"'files', (SELECT count(*) FROM jsonb_object_keys(coalesce(t.state->'files', '{}'))), "         \
	"'commit', t.state->>'commit', "                                                                 \
	"'fires', (SELECT coalesce(json_agg(json_build_object('key', f.key, 'outcome', f.outcome, "      \
	"          'reason', f.reason, 'run', f.run_id, 'via', f.via, 'at', ferry_ts(f.at), "           \
	"          'duplicates', f.duplicates, 'detail', f.detail) ORDER BY f.at DESC), '[]') "          \
	"          FROM (SELECT * FROM trigger_fires WHERE trigger_id = t.id ORDER BY at DESC LIMIT $1) f))"

int store_triggers_list(char **out, PGconn *conn, int fires)
{
	char lim[16];
	const char *p[1] = {lim};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	snprintf(lim, sizeof(lim), "%d", fires);
	if ((error = store_q(&res, conn,
			     "SELECT json_build_object('triggers', coalesce(json_agg(" TRIGGER_JSON
			     " ORDER BY t.workflow, t.name), '[]')) FROM triggers t",
			     1, p)) < 0)
		return error;
	*out = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return FERRY_OK;
}

int store_trigger_pause(char **out, PGconn *conn, int64_t id, int paused, const char *actor)
{
	char idb[32];
	const char *p[4] = {"20", idb, paused ? "t" : "f", actor};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	snprintf(idb, sizeof(idb), "%lld", (long long)id);
	if ((error = store_q(&res, conn,
			     "WITH u AS (UPDATE triggers SET paused = $3, updated_at = now() WHERE id = $2 RETURNING *), "
			     "a AS (INSERT INTO audit (actor, object, object_id, action, detail) "
			     "  SELECT $4, 'trigger', u.id, CASE WHEN $3 THEN 'paused' ELSE 'resumed' END, "
			     "    jsonb_build_object('workflow', u.workflow, 'name', u.name) FROM u) "
			     "SELECT " TRIGGER_JSON " FROM u t",
			     4, p)) < 0)
		return error;
	if (PQntuples(res) == 0) {
		ferry_error_set("trigger %lld not found", (long long)id);
		error = FERRY_ENOTFOUND;
	} else {
		*out = xstrdup(PQgetvalue(res, 0, 0));
	}
	PQclear(res);
	return error;
}

/*
 * store — all of Ferry's SQL. Statements are parameterised (PQexecParams);
 * arrays travel as PostgreSQL text-array literals built by sbuf_* below, and
 * the multi-row transitions are single calls of the PL/pgSQL functions in
 * db/migrations/0001_core.sql. SQLSTATEs map onto the error enum: P0002 is
 * "not found", 55000 "not in the right state", a lost connection FERRY_EDB.
 * This file holds what the store's files share (store_priv.h) and the
 * gauges; the rest is by concern: store_claim.c (the engine's claim and
 * finish), store_runs.c (a run's rows), store_workflows.c (registered
 * versions), and store_models.c, store_cache.c, … beside them.
 */
#include "store/store.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/metrics.h"
#include "store/store_priv.h"
#include "lib/util.h"

/* ---- small string builder for array literals ---- */

static void sbuf_grow(struct sbuf *b, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->p = xrealloc(b->p, b->cap);
	}
}

void sbuf_add(struct sbuf *b, const char *s, size_t n)
{
	sbuf_grow(b, n);
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void sbuf_str(struct sbuf *b, const char *s)
{
	sbuf_add(b, s, strlen(s));
}

void sbuf_int(struct sbuf *b, int64_t v)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof(tmp), "%lld", (long long)v);
	sbuf_add(b, tmp, (size_t)n);
}

/* Appends one element of a text array literal: quoted, or NULL. */
void sbuf_elem(struct sbuf *b, const char *s)
{
	if (s == NULL) {
		sbuf_str(b, "NULL");
		return;
	}
	sbuf_add(b, "\"", 1);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			sbuf_add(b, "\\", 1);
		sbuf_add(b, s, 1);
	}
	sbuf_add(b, "\"", 1);
}

void sbuf_sep(struct sbuf *b, int i)
{
	sbuf_str(b, i == 0 ? "{" : ",");
}

const char *sbuf_close(struct sbuf *b, int n)
{
	sbuf_str(b, n == 0 ? "{}" : "}");
	return b->p;
}

/* ---- query helpers ---- */

static int map_error(PGconn *conn, PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;

	ferry_error_set("%s", msg ? msg : PQerrorMessage(conn));
	if (PQstatus(conn) != CONNECTION_OK || state == NULL)
		return FERRY_EDB;
	if (strcmp(state, "P0002") == 0)
		return FERRY_ENOTFOUND;
	if (strcmp(state, "55000") == 0)
		return FERRY_ECONFLICT;
	if (strncmp(state, "22", 2) == 0)
		return FERRY_EINVALID;
	return FERRY_EDB;
}

/*
 * Whether a failed statement may simply run again: PostgreSQL broke a
 * deadlock (40P01) or a serialization conflict (40001) by aborting it, and
 * it ran as its own transaction (the connection is idle again), so nothing
 * of it was kept. Inside an explicit transaction the caller's BEGIN is lost
 * with it: the caller decides. The transitions take their locks in orders
 * that cannot all agree (a stop locks its run then the run's open steps; a
 * finish the steps it releases then their run), so a rare deadlock between
 * two of them is expected, and the one PostgreSQL aborts goes again.
 */
static int retryable(PGconn *conn, PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	return state && (strcmp(state, "40P01") == 0 || strcmp(state, "40001") == 0) &&
	       PQstatus(conn) == CONNECTION_OK && PQtransactionStatus(conn) == PQTRANS_IDLE;
}

enum { Q_TRIES = 4 };

/*
 * Which connections have which statements prepared, by the connection and
 * its server process (a connection made again, even at the same address,
 * has another: it prepares again). Asking the server instead costs a round
 * trip, and executing blind to learn it (SQLSTATE 26000) puts an ERROR in
 * the server's log at every connection. Bounded: past PREP_MAX entries the
 * oldest goes (its statement, if its connection lives, is found prepared:
 * 42P05, taken as done). names are string literals.
 */
enum { PREP_MAX = 64 };
static struct prep {
	const PGconn *conn;
	int pid;
	const char *name;
	int unusable; /* executing by name failed after preparing (a pooler): sent with its params */
} prep[PREP_MAX];
static int prep_n, prep_next;
static pthread_mutex_t prep_lock = PTHREAD_MUTEX_INITIALIZER;

/* conn's entry for name (-1: none); under prep_lock. */
static int prep_find(const PGconn *conn, int pid, const char *name)
{
	for (int i = 0; i < prep_n; i++)
		if (prep[i].conn == conn && prep[i].pid == pid && strcmp(prep[i].name, name) == 0)
			return i;
	return -1;
}

/* 1 prepared, -1 not to be prepared on conn, 0 not yet. */
static int prep_state(const PGconn *conn, const char *name)
{
	int i, st;

	pthread_mutex_lock(&prep_lock);
	i = prep_find(conn, PQbackendPID(conn), name);
	st = i < 0 ? 0 : prep[i].unusable ? -1 : 1;
	pthread_mutex_unlock(&prep_lock);
	return st;
}

static void prep_set(const PGconn *conn, const char *name, int unusable)
{
	int pid = PQbackendPID(conn), i;

	pthread_mutex_lock(&prep_lock);
	if ((i = prep_find(conn, pid, name)) < 0) {
		if (prep_n < PREP_MAX) {
			i = prep_n++;
		} else {
			i = prep_next;
			prep_next = (prep_next + 1) % PREP_MAX;
		}
		prep[i] = (struct prep){conn, pid, name, 0};
	}
	prep[i].unusable = unusable;
	pthread_mutex_unlock(&prep_lock);
}

static int sqlstate_is(const PGresult *res, const char *code)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	return state && strcmp(state, code) == 0;
}

/*
 * sql executed as the prepared statement name of conn, prepared first when
 * it is not yet. Inside a transaction block it is sent as it is (a failed
 * Parse there would abort the block), and so when preparing fails, or when
 * the statement prepared is then not found (a pooler that moves sessions
 * between server connections: from then on, on that connection).
 */
static PGresult *exec_prepared(PGconn *conn, const char *name, const char *sql, int n, const char *const *params)
{
	PGresult *res;
	int st, fresh = 0;

	if (PQtransactionStatus(conn) != PQTRANS_IDLE || (st = prep_state(conn, name)) < 0)
		return PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
again:
	if (st == 0) {
		res = PQprepare(conn, name, sql, n, NULL);
		st = PQresultStatus(res) == PGRES_COMMAND_OK || sqlstate_is(res, "42P05");
		PQclear(res);
		if (!st)
			return PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
		prep_set(conn, name, 0);
		fresh = 1;
	}
	res = PQexecPrepared(conn, name, n, params, NULL, NULL, 0);
	if (PQresultStatus(res) == PGRES_FATAL_ERROR && sqlstate_is(res, "26000")) {
		PQclear(res);
		if (!fresh) { /* what the table said is stale (a server pid used again): prepared once more */
			st = 0;
			goto again;
		}
		prep_set(conn, name, 1);
		return PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
	}
	return res;
}

/* sql, prepared under name when name is not NULL (exec_prepared); NULL: sent with its params. */
static PGresult *run(PGconn *conn, const char *name, const char *sql, int n, const char *const *params)
{
	return name ? exec_prepared(conn, name, sql, n, params) : PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
}

/* Runs sql with text params (prepared as name, when not NULL); *out holds the result when it succeeded. */
static int q(PGresult **out, PGconn *conn, const char *name, const char *sql, int n, const char *const *params)
{
	PGresult *res = run(conn, name, sql, n, params);
	ExecStatusType st = PQresultStatus(res);
	int error;

	for (int tries = 1; tries < Q_TRIES && st == PGRES_FATAL_ERROR && retryable(conn, res); tries++) {
		metrics_add(M_DB_RETRIES, 1);
		PQclear(res);
		res = run(conn, name, sql, n, params);
		st = PQresultStatus(res);
	}
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
		if (out)
			*out = res;
		else
			PQclear(res);
		return FERRY_OK;
	}
	error = map_error(conn, res);
	PQclear(res);
	if (out)
		*out = NULL;
	return error;
}

int store_q(PGresult **out, PGconn *conn, const char *sql, int n, const char *const *params)
{
	return q(out, conn, NULL, sql, n, params);
}

int store_qp(PGresult **out, PGconn *conn, const char *name, const char *sql, int n, const char *const *params)
{
	return q(out, conn, name, sql, n, params);
}

int store_tx(PGconn *conn, const char *cmd)
{
	return q(NULL, conn, NULL, cmd, 0, NULL);
}

char *store_dupval(PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? NULL : xstrdup(PQgetvalue(res, row, col));
}

int64_t store_intval(PGresult *res, int row, int col)
{
	int64_t v = 0;
	if (!PQgetisnull(res, row, col))
		parse_int64(PQgetvalue(res, row, col), &v);
	return v;
}

json_t *store_jsonval(PGresult *res, int row, int col)
{
	if (PQgetisnull(res, row, col))
		return NULL;
	return json_loads(PQgetvalue(res, row, col), JSON_DECODE_ANY, NULL);
}

void sbuf_json(struct sbuf *b, const json_t *v)
{
	/* 15 digits: 0.82 is stored as 0.82, not 0.81999999999999995 */
	char *txt = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15)) : NULL;
	sbuf_elem(b, txt);
	free(txt);
}


int store_metrics(char **buf, size_t *len, size_t *cap, PGconn *conn)
{
	PGresult *res = NULL;
	int error;
	const char *last = "";

	if ((error = q(&res, conn, NULL,
		       "SELECT 'ferry_runs', state, count(*) FROM runs GROUP BY state "
		       "UNION ALL SELECT 'ferry_open_steps', s.state, count(*) FROM steps s "
		       "  JOIN runs r ON r.id = s.run_id WHERE r.state IN ('pending', 'running', 'stopping') "
		       "  GROUP BY s.state "
		       "UNION ALL SELECT 'ferry_queue_depth', NULL, count(*) FROM step_queue "
		       "ORDER BY 1, 2", 0, NULL)) < 0)
		return error;
	for (int i = 0; i < PQntuples(res); i++) {
		const char *name = PQgetvalue(res, i, 0);
		if (strcmp(name, last) != 0) {
			/* what promtool check metrics asks of each family: its help, then its type */
			const char *help = strcmp(name, "ferry_runs") == 0 ? "Runs in the database, by state."
					   : strcmp(name, "ferry_open_steps") == 0
						   ? "Steps of unfinished runs, by state."
						   : "Ready steps waiting to be claimed.";
			metrics_appendf(buf, len, cap, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
			last = name;
		}
		if (PQgetisnull(res, i, 1))
			metrics_appendf(buf, len, cap, "%s %s\n", name, PQgetvalue(res, i, 2));
		else
			metrics_appendf(buf, len, cap, "%s{state=\"%s\"} %s\n", name,
					PQgetvalue(res, i, 1), PQgetvalue(res, i, 2));
	}
	PQclear(res);
	return store_cache_metrics(buf, len, cap, conn);
}


int store_ping(PGconn *conn)
{
	return q(NULL, conn, NULL, "SELECT 1", 0, NULL);
}

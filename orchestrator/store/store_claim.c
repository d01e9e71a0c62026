/*
 * store_claim — the engine's side of the store: claiming ready steps
 * (ferry_claim), recording where started attempts run, closing attempts in
 * batches (ferry_finish), the step cache, leases and the adoption of
 * orphaned attempts. Moved out of store.c with its behaviour unchanged.
 */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_priv.h"
#include "lib/util.h"

/* The ancestors' inputs in the order of names (nearest first); takes in. */
static json_t *ordered_inputs(json_t *in, const json_t *names)
{
	json_t *out, *nm;
	size_t i;

	if (in == NULL)
		return NULL;
	out = json_object();
	json_array_foreach(names, i, nm) {
		json_t *v = json_object_get(in, json_string_value(nm));
		if (v)
			json_object_set(out, json_string_value(nm), v);
	}
	json_decref(in);
	return out;
}

/* ---- engine side ---- */

/*
 * One row of ferry_claim's shape (step_id, run_id, name, attempt, kind,
 * timeout_ms, spec, workdir, inputs, run), its JSON left as text: parsing
 * a fan-out's batch of 256 items took two fifths of the engine loop's time
 * (bench_dispatch --foreach, perf), which the worker pool can do instead.
 */
static void claim_row_text_at(struct store_claim *c, PGresult *res, int i, int at)
{
	c->step_id = store_intval(res, i, at + 0);
	c->run_id = store_intval(res, i, at + 1);
	c->name = store_dupval(res, i, at + 2);
	c->attempt = (int)store_intval(res, i, at + 3);
	c->kind = store_dupval(res, i, at + 4);
	c->timeout_ms = store_intval(res, i, at + 5);
	c->spec_text = store_dupval(res, i, at + 6);
	c->workdir = store_dupval(res, i, at + 7);
	c->inputs_text = store_dupval(res, i, at + 8);
	c->run_text = store_dupval(res, i, at + 9);
	c->gpus = PQgetisnull(res, i, at + 10) ? NULL : store_dupval(res, i, at + 10);
}

static void claim_row_text(struct store_claim *c, PGresult *res, int i)
{
	claim_row_text_at(c, res, i, 0);
}

void store_claim_parse(struct store_claim *c)
{
	json_error_t jerr;

	if (c->spec == NULL) {
		c->spec = c->spec_text ? json_loads(c->spec_text, 0, &jerr) : NULL;
		if (c->spec == NULL)
			c->spec = json_object();
	}
	if (c->inputs == NULL && c->inputs_text)
		c->inputs = ordered_inputs(json_loads(c->inputs_text, JSON_DECODE_ANY, NULL),
					   json_object_get(c->spec, "ancestors"));
	if (c->run == NULL && c->run_text)
		c->run = json_loads(c->run_text, JSON_DECODE_ANY, NULL);
	free(c->spec_text), free(c->inputs_text), free(c->run_text);
	c->spec_text = c->inputs_text = c->run_text = NULL;
}

static void claim_row(struct store_claim *c, PGresult *res, int i)
{
	claim_row_text(c, res, i);
	store_claim_parse(c);
}

/* ferry_claim's arguments after its owner (host, limit, lease, run, step, capacity) as text. */
struct claim_params {
	char lim[16], lease[32], run[32], step[32];
	char *cap; /* owned: the caller frees it */
	const char *p[6];
};

static void claim_params(struct claim_params *cp, const struct store_claim_ask *a)
{
	snprintf(cp->lim, sizeof(cp->lim), "%d", a->limit);
	snprintf(cp->lease, sizeof(cp->lease), "%lld", (long long)a->lease_ms);
	snprintf(cp->run, sizeof(cp->run), "%lld", (long long)a->run_filter);
	snprintf(cp->step, sizeof(cp->step), "%lld", (long long)a->step_filter);
	cp->cap = a->capacity ? json_dumps(a->capacity, JSON_COMPACT) : NULL;
	cp->p[0] = a->host;
	cp->p[1] = cp->lim;
	cp->p[2] = cp->lease;
	cp->p[3] = a->run_filter > 0 ? cp->run : NULL;
	cp->p[4] = a->step_filter > 0 ? cp->step : NULL;
	cp->p[5] = cp->cap;
}

int store_claim(struct store_claim **out, int *n, PGconn *conn, const char *owner,
		const char *host, int limit, int64_t lease_ms, int64_t run_filter, int64_t step_filter,
		const json_t *capacity)
{
	const struct store_claim_ask ask = {.host = host, .limit = limit, .always = 1, .lease_ms = lease_ms,
					    .run_filter = run_filter, .step_filter = step_filter, .capacity = capacity};
	struct claim_params cp;
	const char *params[7];
	PGresult *res = NULL;
	struct store_claim *v;
	int error, rows;

	*out = NULL;
	*n = 0;
	claim_params(&cp, &ask);
	params[0] = owner;
	memcpy(params + 1, cp.p, sizeof(cp.p));
	error = store_qp(&res, conn, "ferry_claim", "SELECT * FROM ferry_claim($1, $2, $3, $4, $5, $6, $7)", 7, params);
	free(cp.cap);
	if (error < 0)
		return error;
	rows = PQntuples(res);
	v = rows ? xcalloc((size_t)rows, sizeof(*v)) : NULL;
	for (int i = 0; i < rows; i++)
		claim_row_text(&v[i], res, i);
	PQclear(res);
	*out = v;
	*n = rows;
	return FERRY_OK;
}

void store_claims_free(struct store_claim *v, int n)
{
	for (int i = 0; v && i < n; i++) {
		free(v[i].name);
		free(v[i].kind);
		free(v[i].workdir);
		json_decref(v[i].spec);
		json_decref(v[i].inputs);
		json_decref(v[i].run);
		free(v[i].gpus);
		free(v[i].spec_text), free(v[i].inputs_text), free(v[i].run_text);
	}
	free(v);
}

int store_step_view(struct store_claim *out, struct store_step_last *last, PGconn *conn, int64_t run_id,
		    const char *step)
{
	char run[32];
	const char *params[2] = {run, step};
	PGresult *res = NULL;
	int error;

	memset(out, 0, sizeof(*out));
	memset(last, 0, sizeof(*last));
	snprintf(run, sizeof(run), "%lld", (long long)run_id);
	/* the claim's columns as ferry_claim hands them out, but the inputs always and nothing locked */
	error = store_q(&res, conn,
		        "SELECT s.id, s.run_id, s.name, s.attempts, s.kind, s.timeout_ms, s.spec, r.workdir, "
		        "       coalesce((SELECT jsonb_object_agg(x.name, jsonb_build_object('kind', x.kind, "
		        "                    'outputs', x.outputs, 'metrics', x.metrics)) "
		        "                 FROM steps x WHERE x.run_id = s.run_id AND x.state = 'succeeded' "
		        "                   AND x.name IN (SELECT jsonb_array_elements_text(s.spec -> 'ancestors'))), '{}'), "
		        "       jsonb_build_object('params', r.params, 'workflow', r.workflow_name, "
		        "                          'workflow_hash', r.workflow_hash, 'no_cache', r.no_cache, 'dev', r.trigger = 'dev'), "
		        "       s.state, s.exit_code, s.reason, "
		        "       (SELECT a.dir FROM attempts a WHERE a.step_id = s.id ORDER BY a.attempt DESC LIMIT 1) "
		        "FROM runs r LEFT JOIN steps s ON s.run_id = r.id AND s.name = $2 WHERE r.id = $1::bigint",
		        2, params);
	if (error < 0)
		return error;
	if (PQntuples(res) == 0) {
		PQclear(res);
		ferry_error_set("run %lld not found", (long long)run_id);
		return FERRY_ENOTFOUND;
	}
	if (PQgetisnull(res, 0, 0)) {
		PQclear(res);
		ferry_error_set("run %lld has no step \"%s\"", (long long)run_id, step);
		return FERRY_ENOTFOUND;
	}
	claim_row(out, res, 0);
	/* column 10 is the step's state here, not GPUs: a view claims none (it was read as its GPUs and leaked) */
	free(out->gpus);
	out->gpus = NULL;
	if (out->inputs == NULL)
		out->inputs = json_object();
	last->state = store_dupval(res, 0, 10);
	last->exit_code = PQgetisnull(res, 0, 11) ? -1 : (int)store_intval(res, 0, 11);
	last->reason = store_dupval(res, 0, 12);
	last->dir = store_dupval(res, 0, 13);
	PQclear(res);
	return FERRY_OK;
}

void store_step_last_dispose(struct store_step_last *last)
{
	free(last->state);
	free(last->reason);
	free(last->dir);
	memset(last, 0, sizeof(*last));
}

int store_attempts_started(PGconn *conn, const char *owner, const struct store_started *v, int n)
{
	struct sbuf ids = {0}, att = {0}, exe = {0}, handle = {0}, dir = {0};
	const char *params[6];
	int error;

	if (n == 0)
		return FERRY_OK;
	for (int i = 0; i < n; i++) {
		sbuf_sep(&ids, i), sbuf_int(&ids, v[i].step_id);
		sbuf_sep(&att, i), sbuf_int(&att, v[i].attempt);
		sbuf_sep(&exe, i), sbuf_elem(&exe, v[i].executor);
		sbuf_sep(&handle, i), sbuf_elem(&handle, v[i].handle);
		sbuf_sep(&dir, i), sbuf_elem(&dir, v[i].dir);
	}
	params[0] = owner;
	params[1] = sbuf_close(&ids, n);
	params[2] = sbuf_close(&att, n);
	params[3] = sbuf_close(&exe, n);
	params[4] = sbuf_close(&handle, n);
	params[5] = sbuf_close(&dir, n);
	error = store_qp(NULL, conn, "ferry_started",
		         "SELECT ferry_started($1, $2::bigint[], $3::int[], $4::text[], $5::jsonb[], $6::text[])",
		        6, params);
	free(ids.p), free(att.p), free(exe.p), free(handle.p), free(dir.p);
	return error;
}

/*
 * ferry_finish's sixteen parameters for results v (n > 0): the thirteen of
 * the results, then the three of their start records (NULL arrays when
 * none has one); finish_params_free() after.
 */
struct finish_params {
	struct sbuf ids, att, out, code, sig, why, fin, outs, mets, gates, keys, from, exe, handle, dir;
	const char *p[16];
};

static void finish_params(struct finish_params *f, const char *owner, const struct store_result *v, int n)
{
	int recs = 0;

	memset(f, 0, sizeof(*f));
	for (int i = 0; i < n; i++) {
		sbuf_sep(&f->ids, i), sbuf_int(&f->ids, v[i].step_id);
		sbuf_sep(&f->att, i), sbuf_int(&f->att, v[i].attempt);
		sbuf_sep(&f->out, i), sbuf_elem(&f->out, attempt_outcome_name(v[i].outcome));
		sbuf_sep(&f->code, i);
		if (v[i].exit_code < 0)
			sbuf_str(&f->code, "NULL");
		else
			sbuf_int(&f->code, v[i].exit_code);
		sbuf_sep(&f->sig, i);
		if (v[i].signal == 0)
			sbuf_str(&f->sig, "NULL");
		else
			sbuf_int(&f->sig, v[i].signal);
		sbuf_sep(&f->why, i), sbuf_elem(&f->why, v[i].reason);
		sbuf_sep(&f->fin, i), sbuf_str(&f->fin, v[i].final ? "t" : "f");
		sbuf_sep(&f->outs, i), sbuf_json(&f->outs, v[i].outputs);
		sbuf_sep(&f->mets, i), sbuf_json(&f->mets, v[i].metrics);
		sbuf_sep(&f->gates, i), sbuf_json(&f->gates, v[i].gate);
		sbuf_sep(&f->keys, i), sbuf_elem(&f->keys, v[i].cache_key);
		sbuf_sep(&f->from, i), sbuf_json(&f->from, v[i].cached_from);
		recs += v[i].executor || v[i].handle || v[i].dir;
	}
	for (int i = 0; recs > 0 && i < n; i++) {
		sbuf_sep(&f->exe, i), sbuf_elem(&f->exe, v[i].executor);
		sbuf_sep(&f->handle, i), sbuf_elem(&f->handle, v[i].handle);
		sbuf_sep(&f->dir, i), sbuf_elem(&f->dir, v[i].dir);
	}
	f->p[0] = owner;
	f->p[1] = sbuf_close(&f->ids, n);
	f->p[2] = sbuf_close(&f->att, n);
	f->p[3] = sbuf_close(&f->out, n);
	f->p[4] = sbuf_close(&f->code, n);
	f->p[5] = sbuf_close(&f->sig, n);
	f->p[6] = sbuf_close(&f->why, n);
	f->p[7] = sbuf_close(&f->fin, n);
	f->p[8] = sbuf_close(&f->outs, n);
	f->p[9] = sbuf_close(&f->mets, n);
	f->p[10] = sbuf_close(&f->gates, n);
	f->p[11] = sbuf_close(&f->keys, n);
	f->p[12] = sbuf_close(&f->from, n);
	f->p[13] = recs > 0 ? sbuf_close(&f->exe, n) : NULL;
	f->p[14] = recs > 0 ? sbuf_close(&f->handle, n) : NULL;
	f->p[15] = recs > 0 ? sbuf_close(&f->dir, n) : NULL;
}

static void finish_params_free(struct finish_params *f)
{
	free(f->ids.p), free(f->att.p), free(f->out.p), free(f->code.p), free(f->sig.p), free(f->why.p);
	free(f->fin.p), free(f->outs.p), free(f->mets.p), free(f->gates.p), free(f->keys.p), free(f->from.p);
	free(f->exe.p), free(f->handle.p), free(f->dir.p);
}

#define FINISH_ARGS "$2::bigint[], $3::int[], $4::text[], $5::int[], $6::int[], $7::text[], " \
		    "$8::boolean[], $9::jsonb[], $10::jsonb[], $11::jsonb[], $12::text[], $13::jsonb[]"

int store_finish(PGconn *conn, const char *owner, const struct store_result *v, int n,
		 int *ready_now, int64_t *next_retry_ms)
{
	struct finish_params f;
	PGresult *res = NULL;
	int error;

	*ready_now = 0;
	*next_retry_ms = 0;
	if (n == 0)
		return FERRY_OK;
	finish_params(&f, owner, v, n);
	error = store_qp(&res, conn, "ferry_finish",
		         "SELECT ready_now, (extract(epoch FROM next_retry) * 1000)::bigint "
		         "FROM ferry_finish($1, " FINISH_ARGS ", $14::text[], $15::jsonb[], $16::text[])", 16, f.p);
	if (error == FERRY_OK) {
		*ready_now = (int)store_intval(res, 0, 0);
		*next_retry_ms = store_intval(res, 0, 1);
	}
	PQclear(res);
	finish_params_free(&f);
	return error;
}

int store_finish_claim(PGconn *conn, const char *owner, const struct store_result *v, int n,
		       int *ready_now, int64_t *next_retry_ms, const struct store_claim_ask *ask,
		       struct store_claim **out, int *nclaimed, int64_t *claim_us)
{
	struct finish_params f;
	struct claim_params cp;
	const char *params[23];
	PGresult *res = NULL;
	int error, rows, k = 0;
	struct store_claim *c = NULL;

	*ready_now = 0;
	*next_retry_ms = 0;
	*out = NULL;
	*nclaimed = 0;
	*claim_us = -1;
	finish_params(&f, owner, v, n);
	claim_params(&cp, ask);
	memcpy(params, f.p, 13 * sizeof(f.p[0]));
	memcpy(params + 13, cp.p, sizeof(cp.p));
	params[19] = ask->always ? "t" : "f";
	memcpy(params + 20, f.p + 13, 3 * sizeof(f.p[0]));
	error = store_qp(&res, conn, "ferry_finish_claim",
		         "SELECT ready_now, (extract(epoch FROM next_retry) * 1000)::bigint, claim_us, step_id, run_id, name, "
		         "       attempt, kind, timeout_ms, spec, workdir, inputs, run, gpus "
		         "FROM ferry_finish_claim($1, " FINISH_ARGS ", $14, $15, $16, $17, $18, $19, $20, "
		         "$21::text[], $22::jsonb[], $23::text[])", 23, params);
	free(cp.cap);
	finish_params_free(&f);
	if (error < 0)
		return error;
	rows = PQntuples(res);
	c = rows ? xcalloc((size_t)rows, sizeof(*c)) : NULL;
	for (int i = 0; i < rows; i++) {
		if (!PQgetisnull(res, i, 3)) {
			claim_row_text_at(&c[k++], res, i, 3);
			continue;
		}
		/* the last row: the finish's and the claim's figures */
		*ready_now = (int)store_intval(res, i, 0);
		*next_retry_ms = store_intval(res, i, 1);
		*claim_us = PQgetisnull(res, i, 2) ? -1 : store_intval(res, i, 2);
	}
	PQclear(res);
	if (k == 0) {
		free(c);
		c = NULL;
	}
	*out = c;
	*nclaimed = k;
	return FERRY_OK;
}

int store_step_cache_get(json_t **outputs, json_t **metrics, json_t **gate, json_t **from,
			 PGconn *conn, const char *key)
{
	const char *params[1] = {key};
	PGresult *res = NULL;
	int error;

	*outputs = *metrics = *gate = *from = NULL;
	if ((error = store_q(&res, conn,
		             "UPDATE step_cache SET hits = hits + 1, last_hit_at = now() WHERE key = $1 "
		             "RETURNING outputs, metrics, gate, "
		             "          jsonb_build_object('run', run_id, 'step', step, 'attempt', attempt)",
		             1, params)) < 0)
		return error;
	if (PQntuples(res) == 1) {
		*outputs = store_jsonval(res, 0, 0);
		*metrics = store_jsonval(res, 0, 1);
		*gate = store_jsonval(res, 0, 2);
		*from = store_jsonval(res, 0, 3);
		error = 1;
	}
	PQclear(res);
	return error;
}

int store_expire_waits(int *ready_now, PGconn *conn, const char *actor)
{
	const char *params[1] = {actor};
	PGresult *res = NULL;
	int error;

	*ready_now = 0;
	if ((error = store_q(&res, conn, "SELECT ferry_expire_waits($1)", 1, params)) < 0)
		return error;
	*ready_now = (int)store_intval(res, 0, 0);
	PQclear(res);
	return FERRY_OK;
}

int store_heartbeat(PGconn *conn, const char *owner, int64_t lease_ms)
{
	char lease[32];
	const char *params[2] = {owner, lease};

	snprintf(lease, sizeof(lease), "%lld", (long long)lease_ms);
	return store_q(NULL, conn,
		       "UPDATE attempts SET lease_until = now() + $2::bigint * interval '1 millisecond' "
		       "WHERE owner = $1 AND state = 'running'", 2, params);
}

int store_release(PGconn *conn, const char *owner)
{
	const char *params[1] = {owner};
	return store_q(NULL, conn,
		       "UPDATE attempts SET lease_until = now() WHERE owner = $1 AND state = 'running'",
		       1, params);
}

int store_orphans(struct store_orphan **out, int *n, PGconn *conn, const char *owner,
		  const char *host)
{
	const char *params[2] = {owner, host};
	PGresult *res = NULL;
	struct store_orphan *v;
	int error, rows;

	*out = NULL;
	*n = 0;
	if ((error = store_q(&res, conn,
		             "SELECT a.step_id, s.run_id, a.attempt, a.executor, a.handle, s.timeout_ms, "
		             "       (extract(epoch FROM a.started_at) * 1000)::bigint, a.owner, a.host, a.dir, "
		             "       s.name, a.lease_until < now(), s.kind, s.spec, r.workdir "
		             "FROM attempts a JOIN steps s ON s.id = a.step_id JOIN runs r ON r.id = s.run_id "
		             "WHERE a.state = 'running' AND a.owner <> $1 "
		             "  AND (a.lease_until < now() OR a.host = $2) "
		             "ORDER BY a.step_id LIMIT 200", 2, params)) < 0)
		return error;
	rows = PQntuples(res);
	v = rows ? xcalloc((size_t)rows, sizeof(*v)) : NULL;
	for (int i = 0; i < rows; i++) {
		v[i].step_id = store_intval(res, i, 0);
		v[i].run_id = store_intval(res, i, 1);
		v[i].attempt = (int)store_intval(res, i, 2);
		v[i].executor = PQgetisnull(res, i, 3) ? NULL : store_dupval(res, i, 3);
		v[i].handle = PQgetisnull(res, i, 4) ? NULL : store_jsonval(res, i, 4);
		v[i].timeout_ms = store_intval(res, i, 5);
		v[i].started_ms = store_intval(res, i, 6);
		v[i].owner = store_dupval(res, i, 7);
		v[i].host = store_dupval(res, i, 8);
		v[i].dir = store_dupval(res, i, 9);
		v[i].name = store_dupval(res, i, 10);
		v[i].expired = PQgetvalue(res, i, 11)[0] == 't';
		v[i].kind = store_dupval(res, i, 12);
		v[i].spec = store_jsonval(res, i, 13);
		v[i].workdir = store_dupval(res, i, 14);
	}
	PQclear(res);
	*out = v;
	*n = rows;
	return FERRY_OK;
}

void store_orphans_free(struct store_orphan *v, int n)
{
	for (int i = 0; v && i < n; i++) {
		free(v[i].owner);
		free(v[i].host);
		free(v[i].executor);
		json_decref(v[i].handle);
		free(v[i].dir);
		free(v[i].name);
		free(v[i].kind);
		free(v[i].workdir);
		json_decref(v[i].spec);
	}
	free(v);
}

int store_step_note(PGconn *conn, int64_t step_id, int attempt, const char *note)
{
	char st[32], att[16];
	const char *params[3] = {st, att, note};

	snprintf(st, sizeof(st), "%lld", (long long)step_id);
	snprintf(att, sizeof(att), "%d", attempt);
	/* only the attempt that is still the step's, still running: a late note changes nothing else */
	return store_q(NULL, conn,
		       "UPDATE steps SET reason = $3 WHERE id = $1::bigint AND attempts = $2::int AND state = 'running' "
		       "AND reason IS DISTINCT FROM $3",
		       3, params);
}

int store_attempt_is_running(PGconn *conn, int64_t run, const char *step, int attempt)
{
	char r[32], att[16];
	const char *params[3] = {r, step, att};
	PGresult *res = NULL;
	int error, yes;

	snprintf(r, sizeof(r), "%lld", (long long)run);
	snprintf(att, sizeof(att), "%d", attempt);
	if ((error = store_q(&res, conn,
		             "SELECT 1 FROM attempts a JOIN steps s ON s.id = a.step_id "
		             "WHERE s.run_id = $1 AND s.name = $2 AND a.attempt = $3 AND a.state = 'running'",
		             3, params)) < 0)
		return error;
	yes = PQntuples(res) > 0;
	PQclear(res);
	return yes;
}

int store_adopt(PGconn *conn, const char *owner, const struct store_orphan *o, int64_t lease_ms)
{
	char step[32], att[16], lease[32];
	const char *params[5] = {owner, step, att, o->owner, lease};
	PGresult *res = NULL;
	int error, taken;

	snprintf(step, sizeof(step), "%lld", (long long)o->step_id);
	snprintf(att, sizeof(att), "%d", o->attempt);
	snprintf(lease, sizeof(lease), "%lld", (long long)lease_ms);
	if ((error = store_q(&res, conn,
		             "WITH u AS (UPDATE attempts SET owner = $1, "
		             "           lease_until = now() + $5::bigint * interval '1 millisecond' "
		             "         WHERE step_id = $2 AND attempt = $3 AND owner = $4 AND state = 'running' "
		             "         RETURNING step_id, attempt) "
		             "INSERT INTO events (run_id, step, attempt, actor, kind, detail) "
		             "SELECT s.run_id, s.name, u.attempt, $1, 'attempt.adopted', "
		             "       jsonb_build_object('from', $4::text) "
		             "FROM u JOIN steps s ON s.id = u.step_id RETURNING 1", 5, params)) < 0)
		return error;
	taken = PQntuples(res) > 0;
	PQclear(res);
	return taken;
}

int store_unadopt(PGconn *conn, const char *owner, const struct store_orphan *o, int64_t lease_ms)
{
	char step[32], att[16], lease[32];
	const char *params[5] = {owner, step, att, o->owner, lease};

	snprintf(step, sizeof(step), "%lld", (long long)o->step_id);
	snprintf(att, sizeof(att), "%d", o->attempt);
	snprintf(lease, sizeof(lease), "%lld", (long long)lease_ms);
	return store_q(NULL, conn,
		       "UPDATE attempts SET owner = $4, lease_until = now() + $5::bigint * interval '1 millisecond' "
		       "WHERE step_id = $2 AND attempt = $3 AND owner = $1 AND state = 'running'",
		       5, params);
}

int store_stopping(int64_t **steps, int **attempts, char ***reasons, int *n, PGconn *conn, const char *owner)
{
	const char *params[1] = {owner};
	PGresult *res = NULL;
	int error, rows;

	*steps = NULL;
	*attempts = NULL;
	*reasons = NULL;
	*n = 0;
	/* the step's reason says why its run stopped: "run stopped by ana", "dev session ended" */
	if ((error = store_q(&res, conn,
		             "SELECT a.step_id, a.attempt, "
		             "       CASE WHEN r.reason LIKE 'stopped by %' THEN 'run ' || r.reason "
		             "            ELSE coalesce(r.reason, 'run stopped') END "
		             "FROM attempts a "
		             "JOIN steps s ON s.id = a.step_id JOIN runs r ON r.id = s.run_id "
		             "WHERE a.owner = $1 AND a.state = 'running' AND r.state = 'stopping'",
		             1, params)) < 0)
		return error;
	rows = PQntuples(res);
	if (rows > 0) {
		*steps = xcalloc((size_t)rows, sizeof(int64_t));
		*attempts = xcalloc((size_t)rows, sizeof(int));
		*reasons = xcalloc((size_t)rows, sizeof(char *));
		for (int i = 0; i < rows; i++) {
			(*steps)[i] = store_intval(res, i, 0);
			(*attempts)[i] = (int)store_intval(res, i, 1);
			(*reasons)[i] = store_dupval(res, i, 2);
		}
	}
	*n = rows;
	PQclear(res);
	return FERRY_OK;
}

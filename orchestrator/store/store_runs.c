/*
 * store_runs — a run's rows: writing an already-made plan (runs/runs.c
 * makes it) in one transaction with its Idempotency-Key, reused steps and
 * occasion hook; reading runs, their events and logs; stopping, retrying
 * and continuing them. Nothing here plans: the plan arrives made.
 */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/kind.h"
#include "plan/plan.h"
#include "store/store_priv.h"
#include "lib/util.h"

/*
 * Looks an Idempotency-Key up: 0 when it is unused; 1 with *out_id its run
 * when it was used with the same body; FERRY_ECONFLICT (message set) when it
 * was used with another body.
 */
int store_run_idem_lookup(int64_t *out_id, PGconn *conn, const char *key, const char *body_hash)
{
	const char *p[2] = {key, body_hash};
	PGresult *res = NULL;
	int64_t id;
	int error, same;

	if ((error = store_q(&res, conn, "SELECT run_id, body_hash = $2 FROM idempotency_keys WHERE key = $1",
		             2, p)) < 0)
		return error;
	if (PQntuples(res) == 0) {
		PQclear(res);
		return 0;
	}
	id = store_intval(res, 0, 0);
	same = PQgetvalue(res, 0, 1)[0] == 't';
	PQclear(res);
	if (!same) {
		ferry_error_set("Idempotency-Key \"%s\" was used for run %lld with another body", key,
				(long long)id);
		return FERRY_ECONFLICT;
	}
	*out_id = id;
	return 1;
}

/* Takes the next run id from the runs sequence, so the plan can render {{run.id}}. */
int store_run_id_reserve(int64_t *out, PGconn *conn)
{
	PGresult *res = NULL;
	int error;

	if ((error = store_q(&res, conn, "SELECT nextval(pg_get_serial_sequence('runs', 'id'))", 0, NULL)) < 0)
		return error;
	*out = store_intval(res, 0, 0);
	PQclear(res);
	return FERRY_OK;
}

/*
 * Writes plan p as run p->run_id inside the caller's transaction: the
 * workflow version (once per hash), the run (already running when a step
 * waits at the start), its steps (ready ones queued, waiting ones with their
 * deadline), their edges and the run.created event.
 */
static int run_write(PGconn *conn, const struct run_plan *p, const struct store_run_row *rn)
{
	struct sbuf names = {0}, idx = {0}, kinds = {0}, states = {0}, pend = {0}, lim = {0},
		    back = {0}, maxb = {0}, tmo = {0}, specs = {0}, why = {0}, waits = {0},
		    restage = {0}, e_step = {0}, e_need = {0}, e_any = {0};
	char run_id[32], open[16], final[16], *spec_txt = NULL, *params_txt = NULL, *origin_txt = NULL;
	int error, n = (int)p->nsteps;

	snprintf(run_id, sizeof(run_id), "%lld", (long long)p->run_id);
	snprintf(open, sizeof(open), "%d", p->open_steps);
	snprintf(final, sizeof(final), "%d", p->final_steps);
	spec_txt = json_dumps(p->spec, JSON_COMPACT);
	params_txt = json_dumps(p->params, JSON_COMPACT);
	origin_txt = rn->origin ? json_dumps(rn->origin, JSON_COMPACT) : NULL;
	if (rn->new_workflow) { /* a registered version (by name) is stored already */
		const char *prm[4] = {p->hash, p->workflow, p->yaml, spec_txt};
		if ((error = store_q(NULL, conn,
			             "INSERT INTO workflows (hash, name, yaml, spec) VALUES ($1, $2, $3, $4) "
			             "ON CONFLICT (hash) DO NOTHING", 4, prm)) < 0)
			goto out;
	}
	{
		char sched[32], trig[32];
		const char *prm[14] = {run_id, p->hash, p->workflow, params_txt, rn->trigger, rn->actor,
				       rn->workdir, open, rn->no_cache ? "t" : "f",
				       p->starts_running ? "t" : "f", origin_txt,
				       rn->schedule_id > 0 ? sched : NULL, rn->trigger_id > 0 ? trig : NULL, final};
		snprintf(sched, sizeof(sched), "%lld", (long long)rn->schedule_id);
		snprintf(trig, sizeof(trig), "%lld", (long long)rn->trigger_id);
		if ((error = store_q(NULL, conn,
			             "INSERT INTO runs (id, workflow_hash, workflow_name, params, trigger, actor, "
			             "                  workdir, open_steps, no_cache, state, started_at, origin, "
			             "                  schedule_id, trigger_id, final_steps) "
			             "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, "
			             "        CASE WHEN $10::boolean THEN 'running' ELSE 'pending' END, "
			             "        CASE WHEN $10::boolean THEN now() END, $11, $12, $13, $14)", 14, prm)) < 0)
			goto out;
	}
	for (int i = 0; i < n; i++) {
		const struct plan_step *s = &p->steps[i];
		char *txt = json_dumps(s->spec, JSON_COMPACT | JSON_REAL_PRECISION(15)); /* a grid's 0.05 as 0.05 */

		sbuf_sep(&names, i), sbuf_elem(&names, s->name);
		sbuf_sep(&idx, i), sbuf_int(&idx, s->idx);
		sbuf_sep(&kinds, i), sbuf_elem(&kinds, s->kind->name);
		sbuf_sep(&states, i), sbuf_elem(&states, step_state_name(s->state));
		sbuf_sep(&pend, i), sbuf_int(&pend, s->deps_pending);
		sbuf_sep(&lim, i), sbuf_int(&lim, s->retry_limit);
		sbuf_sep(&back, i), sbuf_int(&back, s->backoff_ms);
		sbuf_sep(&maxb, i), sbuf_int(&maxb, s->max_backoff_ms);
		sbuf_sep(&tmo, i), sbuf_int(&tmo, s->timeout_ms);
		sbuf_sep(&specs, i), sbuf_elem(&specs, txt);
		sbuf_sep(&why, i), sbuf_elem(&why, s->reason);
		sbuf_sep(&waits, i), sbuf_str(&waits, s->waits ? "t" : "f");
		sbuf_sep(&restage, i), sbuf_str(&restage, s->restage ? "t" : "f");
		free(txt);
	}
	{
		const char *prm[15] = {run_id, sbuf_close(&names, n), sbuf_close(&idx, n),
				       sbuf_close(&kinds, n), sbuf_close(&states, n),
				       sbuf_close(&pend, n), sbuf_close(&lim, n),
				       sbuf_close(&back, n), sbuf_close(&maxb, n),
				       sbuf_close(&tmo, n), sbuf_close(&specs, n),
				       sbuf_close(&why, n), strcmp(rn->trigger, "dev") == 0 ? "t" : "f",
				       sbuf_close(&waits, n), sbuf_close(&restage, n)};
		if ((error = store_q(NULL, conn,
			             "WITH s AS ("
			             "  INSERT INTO steps (run_id, dev, name, idx, kind, state, deps_pending, retry_limit, "
			             "                     backoff_ms, max_backoff_ms, timeout_ms, spec, reason, "
			             "                     waits, restage) "
			             "  SELECT $1, $13, * FROM unnest($2::text[], $3::int[], $4::text[], $5::text[], $6::int[], "
			             "         $7::int[], $8::bigint[], $9::bigint[], $10::bigint[], $11::jsonb[], $12::text[], "
			             "         $14::boolean[], $15::boolean[]) "
			             "  RETURNING id, run_id, dev, state, timeout_ms, spec ->> 'on_timeout' AS on_timeout, "
			             "            CASE WHEN state = 'ready' THEN spec END AS qspec), "
			             /* what each asks for, from its spec (db/functions/queues.sql) */
			             "q AS (INSERT INTO step_queue (step_id, run_id, dev, queue, priority, cpus, memory_mb, gpus, named, gpu_shared) "
			             "      SELECT id, run_id, dev, ferry_req_queue(qspec), ferry_req_priority(qspec), "
			             "             ferry_req_cpus(qspec), ferry_req_memory_mb(qspec), ferry_req_gpus(qspec), ferry_req_named(qspec), ferry_req_gpu_shared(qspec) "
			             "      FROM s WHERE state = 'ready') "
			             "INSERT INTO step_waits (step_id, run_id, deadline, on_timeout) "
			             "SELECT id, run_id, now() + timeout_ms * interval '1 millisecond', "
			             "       coalesce(on_timeout, 'fail') "
			             "FROM s WHERE state = 'waiting' AND timeout_ms > 0",
			             15, prm)) < 0)
			goto out;
	}
	for (size_t k = 0; k < p->nedges; k++) {
		sbuf_sep(&e_step, (int)k), sbuf_elem(&e_step, p->steps[p->edges[k].step].name);
		sbuf_sep(&e_need, (int)k), sbuf_elem(&e_need, p->steps[p->edges[k].needs].name);
		sbuf_sep(&e_any, (int)k), sbuf_str(&e_any, p->edges[k].any ? "t" : "f");
	}
	if (p->nedges > 0) {
		const char *prm[4] = {run_id, sbuf_close(&e_step, (int)p->nedges),
				      sbuf_close(&e_need, (int)p->nedges), sbuf_close(&e_any, (int)p->nedges)};
		if ((error = store_q(NULL, conn,
			             "INSERT INTO step_deps (needs_id, step_id, if_any) "
			             "SELECT n.id, s.id, e.if_any FROM unnest($2::text[], $3::text[], $4::boolean[]) "
			             "  AS e(step, needs, if_any) "
			             "JOIN steps s ON s.run_id = $1 AND s.name = e.step "
			             "JOIN steps n ON n.run_id = $1 AND n.name = e.needs", 4, prm)) < 0)
			goto out;
	}
	{
		const char *prm[5] = {run_id, rn->actor, rn->trigger, params_txt, origin_txt};
		if ((error = store_q(NULL, conn,
			             "INSERT INTO events (run_id, actor, kind, detail) VALUES ($1, $2, 'run.created', "
			             "jsonb_strip_nulls(jsonb_build_object('trigger', $3::text, 'params', $4::jsonb, "
			             "                                     'origin', $5::jsonb)))", 5, prm)) < 0)
			goto out;
	}
out:
	free(spec_txt), free(params_txt), free(origin_txt);
	free(names.p), free(idx.p), free(kinds.p), free(states.p), free(pend.p), free(lim.p);
	free(back.p), free(maxb.p), free(tmo.p), free(specs.p), free(why.p), free(waits.p);
	free(restage.p), free(e_step.p), free(e_need.p), free(e_any.p);
	return error;
}

/*
 * Records the Idempotency-Key of the run being written: 0 when recorded; 1
 * when a concurrent request with the same key committed first (this insert
 * waited for it on the key's unique index).
 */
static int idem_record(PGconn *conn, const char *key, const char *body_hash, int64_t run)
{
	char id[32];
	const char *p[3] = {key, body_hash, id};
	PGresult *res = NULL;
	int error, taken;

	snprintf(id, sizeof(id), "%lld", (long long)run);
	if ((error = store_q(&res, conn,
		             "INSERT INTO idempotency_keys (key, body_hash, run_id) VALUES ($1, $2, $3) "
		             "ON CONFLICT (key) DO NOTHING RETURNING run_id", 3, p)) < 0)
		return error;
	taken = PQntuples(res) == 0;
	PQclear(res);
	return taken;
}

/* The names of the plan's reused steps as a text[] literal (into b), and the
 * one of them a selected step needs directly when there is exactly one. */
static const char *reuse_names(struct sbuf *b, const char **frontier, const struct run_plan *p)
{
	int n = 0, nfront = 0;

	*frontier = NULL;
	for (size_t i = 0; i < p->nsteps; i++) {
		if (!p->steps[i].reuse)
			continue;
		sbuf_sep(b, n), sbuf_elem(b, p->steps[i].name);
		n++;
	}
	for (size_t i = 0; i < p->nsteps; i++) {
		int needed = 0;
		for (size_t k = 0; k < p->nedges; k++)
			needed |= p->edges[k].needs == (int)i && p->steps[p->edges[k].step].state != STEP_SKIPPED &&
				  !p->steps[p->edges[k].step].reuse;
		if (p->steps[i].reuse && needed) {
			*frontier = p->steps[i].name;
			nfront++;
		}
	}
	if (nfront != 1)
		*frontier = NULL;
	return sbuf_close(b, n);
}

/* What of a step's spec makes its results (the step cache's key, less the inputs: steps.c). */
#define INPUT_FIELDS "command", "env", "workdir", "image", "dataset"
#define INPUTS_SQL(s)                                                                                      \
	"jsonb_build_object('command', " s ".spec->'command', 'env', " s ".spec->'env', 'workdir', " s     \
	".spec->'workdir', 'image', " s ".spec->'image', 'dataset', " s ".spec->'dataset')"

/* {"STEP": {command, env, workdir, image, dataset}} of the plan's reused steps, as JSON text. */
static char *reuse_inputs(const struct run_plan *p)
{
	static const char *const fields[] = {INPUT_FIELDS};
	json_t *all = json_object();
	char *txt;

	for (size_t i = 0; i < p->nsteps; i++) {
		json_t *one = json_object();
		if (!p->steps[i].reuse) {
			json_decref(one);
			continue;
		}
		for (size_t k = 0; k < sizeof(fields) / sizeof(fields[0]); k++) {
			json_t *v = json_object_get(p->steps[i].spec, fields[k]);
			json_object_set(one, fields[k], v ? v : json_null());
		}
		json_object_set_new(all, p->steps[i].name, one);
	}
	txt = json_dumps(all, JSON_COMPACT);
	json_decref(all);
	return txt;
}

/* "rows=3 there, rows=100 here" for the params in which run src and the plan differ, or NULL. */
static char *params_differ(PGconn *conn, int64_t src, const json_t *mine)
{
	char id[32];
	const char *prm[1] = {id};
	PGresult *res = NULL;
	json_t *theirs = NULL, *v;
	const char *key;
	char *there = xstrdup(""), *here = xstrdup(""), *out = NULL;

	snprintf(id, sizeof(id), "%lld", (long long)src);
	if (store_q(&res, conn, "SELECT coalesce(params, '{}')::text FROM runs WHERE id = $1::bigint", 1, prm) < 0 ||
	    PQntuples(res) != 1 || (theirs = json_loads(PQgetvalue(res, 0, 0), 0, NULL)) == NULL)
		goto out;
	json_object_foreach((json_t *)mine, key, v) {
		json_t *t = json_object_get(theirs, key);
		if (t != NULL && json_equal(t, v))
			continue;
		char *a = xasprintf("%s%s%s=%.40s", there, *there ? ", " : "", key, t ? json_string_value(t) : "(unset)");
		char *b = xasprintf("%s%s%s=%.40s", here, *here ? ", " : "", key, json_string_value(v) ? json_string_value(v) : "?");
		free(there), free(here);
		there = a, here = b;
	}
	if (*there)
		out = xasprintf("params %s there, %s here", there, here);
out:
	PQclear(res);
	json_decref(theirs);
	free(there), free(here);
	return out;
}

/*
 * The run whose results the plan's reused steps take: rn->reuse_run when it
 * is a run of the same workflow in which they all succeeded, else the
 * newest such run — in either case with the same inputs as this run's
 * steps (command, env and so the params, workdir, image, dataset: what
 * the step cache keys on, less the inputs above them), unless
 * reuse_anyway. FERRY_ENOTFOUND, with a message showing the command that
 * makes one or saying which params differ, when there is none.
 */
static int reuse_source(int64_t *out, PGconn *conn, const struct run_plan *p,
			const struct store_run_row *rn)
{
	struct sbuf names = {0};
	const char *frontier = NULL, *arr = reuse_names(&names, &frontier, p);
	char self[32], want[32], list[512], *inputs = reuse_inputs(p);
	const char *prm[6] = {p->workflow, self, rn->reuse_run > 0 ? want : NULL, arr, inputs, "true"};
	PGresult *res = NULL;
	size_t len = 0;
	int64_t other = 0;
	int error;
	static const char *const q =
		"SELECT r.id FROM runs r "
		"WHERE r.workflow_name = $1 AND r.id <> $2::bigint "
		"  AND ($3::bigint IS NULL OR r.id = $3::bigint) "
		"  AND (SELECT count(*) FROM steps s WHERE s.run_id = r.id AND s.state = 'succeeded' "
		"       AND s.name = ANY ($4::text[]) "
		"       AND ($6::boolean OR " INPUTS_SQL("s") " = ($5::jsonb -> s.name))) = cardinality($4::text[]) "
		"ORDER BY r.id DESC LIMIT 1";

	*out = 0;
	snprintf(self, sizeof(self), "%lld", (long long)p->run_id);
	snprintf(want, sizeof(want), "%lld", (long long)rn->reuse_run);
	prm[5] = rn->reuse_anyway ? "true" : "false";
	if ((error = store_q(&res, conn, q, 6, prm)) < 0)
		goto out;
	if (PQntuples(res) == 1) {
		error = parse_int64(PQgetvalue(res, 0, 0), out) < 0 ? FERRY_ERROR : FERRY_OK;
		goto out;
	}
	list[0] = '\0';
	for (size_t i = 0; i < p->nsteps && len < sizeof(list); i++) {
		if (p->steps[i].reuse)
			len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", len ? ", " : "",
						p->steps[i].name);
	}
	/* a run with those steps succeeded, but from other inputs: say what differs */
	PQclear(res);
	res = NULL;
	prm[5] = "true";
	if (!rn->reuse_anyway && (error = store_q(&res, conn, q, 6, prm)) == FERRY_OK && PQntuples(res) == 1 &&
	    parse_int64(PQgetvalue(res, 0, 0), &other) == 0) {
		char *d = params_differ(conn, other, p->params);
		ferry_error_set("run %lld ran %s with other inputs than this run's (%s): its results were made "
				"for those. Make them with this run's (ferry dev run %s%s%s and the same params), "
				"or reuse them anyway with --reuse-anyway", (long long)other, list,
				d ? d : "the step's command, env, workdir, image or dataset changed since",
				rn->filename ? rn->filename : "FILE", frontier ? " --to " : "", frontier ? frontier : "");
		free(d);
	} else if (rn->reuse_run > 0) {
		ferry_error_set("run %lld is not a run of workflow \"%s\" in which %s succeeded, so "
				"their outputs cannot be reused; leave out --reuse to take the newest "
				"such run, or make one with: ferry dev run %s%s%s",
				(long long)rn->reuse_run, p->workflow, list, rn->filename ? rn->filename : "FILE",
				frontier ? " --to " : "", frontier ? frontier : "");
	} else {
		ferry_error_set("no earlier run of workflow \"%s\" in which %s succeeded, so there are no "
				"outputs to reuse; make one with: ferry dev run %s%s%s",
				p->workflow, list, rn->filename ? rn->filename : "FILE",
				frontier ? " --to " : "", frontier ? frontier : "");
	}
	error = FERRY_ENOTFOUND;
out:
	PQclear(res);
	free(names.p);
	free(inputs);
	return error;
}

/*
 * Fills the plan's reused steps (written as succeeded) with the outputs,
 * metrics and gate results of the same steps of run src, records where
 * they came from (reason "reused from run N", a step.reused event with the
 * source attempt) and adds their metrics to the run's. cached_from stays
 * the step cache's. A reused step that staged data (a cache step) opens a
 * session of its own on the source's entry, so the entry stays pinned while
 * this run uses it (released when the run ends), and hands that session on.
 */
static int reuse_copy(PGconn *conn, const struct run_plan *p, int64_t src, const char *actor)
{
	struct sbuf names = {0};
	const char *frontier = NULL;
	char self[32], from[32], *inputs = reuse_inputs(p);
	const char *prm[5] = {self, from, reuse_names(&names, &frontier, p), actor, inputs};
	int error;

	snprintf(self, sizeof(self), "%lld", (long long)p->run_id);
	snprintf(from, sizeof(from), "%lld", (long long)src);
	error = store_q(NULL, conn,
		        "WITH u AS ("
		        "  UPDATE steps d SET outputs = s.outputs, metrics = s.metrics, gate = s.gate, "
		        "         reason = 'reused from run ' || s.run_id || CASE WHEN " INPUTS_SQL("s")
		        "           = ($5::jsonb -> s.name) THEN '' ELSE ' (made from other inputs: --reuse-anyway)' END, "
		        "         started_at = now(), finished_at = now() "
		        "  FROM steps s "
		        "  WHERE d.run_id = $1::bigint AND d.name = ANY ($3::text[]) "
		        "    AND s.run_id = $2::bigint AND s.name = d.name "
		        "  RETURNING d.name, d.metrics, "
		        "            jsonb_build_object('run', s.run_id, 'step', s.name, 'attempt', s.attempts, "
		        "              'same_inputs', " INPUTS_SQL("s") " = ($5::jsonb -> s.name)) AS src), "
		        "m AS (UPDATE runs SET metrics = coalesce(runs.metrics, '{}'::jsonb) || "
		        "        (SELECT coalesce(jsonb_object_agg(u.name, u.metrics) FILTER (WHERE u.metrics IS NOT NULL), '{}') FROM u) "
		        "      WHERE runs.id = $1::bigint) "
		        "INSERT INTO events (run_id, step, actor, kind, detail) "
		        "SELECT $1::bigint, u.name, $4, 'step.reused', jsonb_build_object('reused_from', u.src) FROM u",
		        5, prm);
	if (error == FERRY_OK)
		error = store_q(NULL, conn,
			        "WITH n AS ("
			        "  INSERT INTO cache_sessions (run_id, step_id, attempt, host, key, hit) "
			        "  SELECT $1::bigint, d.id, 0, c.host, c.key, true "
			        "  FROM steps d JOIN steps s ON s.run_id = $2::bigint AND s.name = d.name "
			        "  JOIN cache_sessions c ON c.run_id = s.run_id AND c.step_id = s.id "
			        "  JOIN cache_entries e ON e.host = c.host AND e.key = c.key "
			        "  WHERE d.run_id = $1::bigint AND d.name = ANY ($3::text[]) AND d.restage "
			        "  RETURNING id, step_id) "
			        "UPDATE steps d SET outputs = coalesce(d.outputs, '{}'::jsonb) || "
			        "       jsonb_build_object('session', n.id::text) "
			        "FROM n WHERE d.id = n.step_id", 3, prm);
	free(names.p);
	free(inputs);
	return error;
}

int store_dev_lease_renew(PGconn *conn, int64_t run_id, int64_t lease_ms)
{
	char id[32], ms[32];
	const char *prm[2] = {id, ms};

	snprintf(id, sizeof(id), "%lld", (long long)run_id);
	snprintf(ms, sizeof(ms), "%lld", (long long)lease_ms);
	return store_q(NULL, conn,
		       "UPDATE runs SET dev_lease_until = now() + $2::bigint * interval '1 millisecond' "
		       "WHERE id = $1::bigint AND trigger = 'dev'", 2, prm);
}

int store_dev_expire(int *stopped, PGconn *conn, const char *actor)
{
	const char *prm[1] = {actor};
	PGresult *res = NULL;
	int error;

	*stopped = 0;
	if ((error = store_q(&res, conn, "SELECT ferry_dev_expire($1)", 1, prm)) < 0)
		return error;
	{
		int64_t n = 0;
		if (parse_int64(PQgetvalue(res, 0, 0), &n) == 0)
			*stopped = (int)n;
	}
	PQclear(res);
	return FERRY_OK;
}

/* Undoes a run being written: its transaction, or (in the caller's) its savepoint. */
static void rollback(PGconn *conn, int savepoint)
{
	if (savepoint) {
		store_tx(conn, "ROLLBACK TO SAVEPOINT run_create");
		store_tx(conn, "RELEASE SAVEPOINT run_create");
	} else {
		store_tx(conn, "ROLLBACK");
	}
}

int store_run_write(int64_t *out_id, int64_t *reused_from, PGconn *conn, const struct run_plan *plan,
		    const struct store_run_row *rn)
{
	int64_t id = plan->run_id, src = 0;
	int error, in_tx = 0;

	*out_id = 0;
	/* in the caller's transaction: a savepoint of its own, so a run that
	 * cannot be written leaves the caller's other writes standing */
	if ((error = store_tx(conn, rn->in_tx ? "SAVEPOINT run_create" : "BEGIN")) < 0)
		goto out;
	in_tx = 1;
	if ((error = run_write(conn, plan, rn)) < 0)
		goto out;
	if (plan->nreuse > 0 && ((error = reuse_source(&src, conn, plan, rn)) < 0 ||
				 (error = reuse_copy(conn, plan, src, rn->actor)) < 0))
		goto out;
	if (rn->dev_lease_ms > 0 && (error = store_dev_lease_renew(conn, id, rn->dev_lease_ms)) < 0)
		goto out;
	if (rn->occasion && (error = rn->occasion(conn, id, rn->occasion_arg)) != 0) {
		if (error > 0) { /* the occasion is taken: nothing of this run is kept */
			rollback(conn, rn->in_tx);
			in_tx = 0;
			error = 2;
		}
		goto out;
	}
	if (rn->idem_key && (error = idem_record(conn, rn->idem_key, rn->idem_hash, id)) != 0) {
		if (error < 0)
			goto out;
		/* a concurrent request with this key made its run first: answer with that one */
		store_tx(conn, "ROLLBACK");
		in_tx = 0;
		if ((error = store_run_idem_lookup(out_id, conn, rn->idem_key, rn->idem_hash)) == 0) {
			ferry_error_set("Idempotency-Key \"%s\" is in use by another request; try again",
					rn->idem_key);
			error = FERRY_ECONFLICT;
		}
		goto out;
	}
	/*
	 * A run this large changes what the step tables hold: thousands of
	 * blocked steps where the statistics may say there are none. They are
	 * taken again in this transaction (ANALYZE samples its own uncommitted
	 * rows, and its commit makes every session plan again), so the first
	 * release of the run's steps is not planned from the old ones: a
	 * 5,000-step fan-out's first ferry_release took 3.7 s — a nested loop
	 * over 12.5 M rows, steps WHERE state = 'blocked' estimated at 1 row
	 * from statistics taken when a finished 1,000-step run was all the
	 * table held. (The engine's own refresh comes later: after a full
	 * claim batch, at most once a minute.)
	 */
	if (plan->nsteps >= STORE_ANALYZE_STEPS && (error = store_tx(conn, "ANALYZE steps, step_deps")) < 0)
		goto out;
	if (plan->any_ready && !rn->in_tx && (error = store_tx(conn, "NOTIFY ferry_ready")) < 0)
		goto out;
	if ((error = store_tx(conn, rn->in_tx ? "RELEASE SAVEPOINT run_create" : "COMMIT")) < 0)
		goto out;
	in_tx = 0;
	*out_id = id;
	if (reused_from)
		*reused_from = src;
out:
	if (in_tx) {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", ferry_error_last());
		rollback(conn, rn->in_tx);
		ferry_error_set("%s", msg);
	}
	if (error < 0)
		*out_id = 0;
	return error;
}

/* Takes the one JSON value of res (freed here): NULL means run id does not exist. */
static int run_json_result(char **out, PGresult *res, int64_t id)
{
	int error = FERRY_OK;

	if (PQgetisnull(res, 0, 0)) {
		ferry_error_set("run %lld not found", (long long)id);
		error = FERRY_ENOTFOUND;
	} else {
		*out = xstrdup(PQgetvalue(res, 0, 0));
	}
	PQclear(res);
	return error;
}

int store_run_json(char **out, PGconn *conn, int64_t id)
{
	char idbuf[32];
	const char *params[1] = {idbuf};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	snprintf(idbuf, sizeof(idbuf), "%lld", (long long)id);
	if ((error = store_q(&res, conn, "SELECT ferry_run_json($1)", 1, params)) < 0)
		return error;
	return run_json_result(out, res, id);
}

int store_runs_list(char **out, PGconn *conn, const char *state, const char *workflow,
		    const char *trigger, const char *not_trigger, int limit, int64_t before)
{
	char lim[16], bef[32];
	const char *params[6] = {state, workflow, trigger, lim, before > 0 ? bef : NULL, not_trigger};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	snprintf(lim, sizeof(lim), "%d", limit);
	snprintf(bef, sizeof(bef), "%lld", (long long)before);
	if ((error = store_q(&res, conn,
		             "WITH page AS ("
		             "  SELECT * FROM runs WHERE ($1::text IS NULL OR state = $1 "
		             "      OR ($1 = 'waiting' AND state = 'running' AND EXISTS "
		             "          (SELECT 1 FROM steps w WHERE w.run_id = runs.id AND w.state = 'waiting'))) "
		             "    AND ($2::text IS NULL OR workflow_name = $2) "
		             "    AND ($3::text IS NULL OR trigger = $3) "
		             "    AND ($6::text IS NULL OR trigger <> $6) "
		             "    AND ($5::bigint IS NULL OR id < $5) "
		             "  ORDER BY id DESC LIMIT $4::int + 1) "
		             "SELECT json_build_object('runs', coalesce((SELECT json_agg(json_build_object("
		             "    'id', id, 'workflow', workflow_name, 'state', state, 'trigger', trigger, 'dev', trigger = 'dev', "
		             "    'actor', actor, 'waiting', (SELECT coalesce(json_agg(w.name ORDER BY w.idx), '[]') "
		             "      FROM steps w WHERE w.run_id = p.id AND w.state = 'waiting'), "
		             "    'created_at', ferry_ts(created_at), "
		             "    'started_at', ferry_ts(started_at), 'finished_at', ferry_ts(finished_at)) "
		             "    ORDER BY id DESC) FROM (SELECT * FROM page ORDER BY id DESC LIMIT $4::int) p), '[]'), "
		             "  'next_cursor', CASE WHEN (SELECT count(*) FROM page) > $4::int "
		             "    THEN (SELECT min(id) FROM (SELECT id FROM page ORDER BY id DESC LIMIT $4::int) p)::text END)",
		             6, params)) < 0)
		return error;
	*out = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return FERRY_OK;
}

int store_run_stop(char **state_out, PGconn *conn, int64_t id, const char *actor)
{
	char idbuf[32];
	const char *params[2] = {idbuf, actor};
	PGresult *res = NULL;
	int error;

	*state_out = NULL;
	snprintf(idbuf, sizeof(idbuf), "%lld", (long long)id);
	if ((error = store_q(&res, conn, "SELECT ferry_stop($1, $2)", 2, params)) < 0)
		return error;
	*state_out = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return FERRY_OK;
}

int store_run_stopping(PGconn *conn, int64_t id)
{
	char idbuf[32];
	const char *params[1] = {idbuf};
	PGresult *res = NULL;
	int error, yes;

	snprintf(idbuf, sizeof(idbuf), "%lld", (long long)id);
	if ((error = store_q(&res, conn, "SELECT 1 FROM runs WHERE id = $1 AND state IN ('stopping', 'stopped')", 1,
			     params)) < 0)
		return error;
	yes = PQntuples(res) > 0;
	PQclear(res);
	return yes;
}

int store_run_retry(PGconn *conn, int64_t id, const char *from, const char *actor, int no_cache)
{
	return store_run_retry_params(conn, id, from, actor, no_cache, NULL, NULL);
}

int store_run_retry_params(PGconn *conn, int64_t id, const char *from, const char *actor, int no_cache,
			   const json_t *run_params, const json_t *specs)
{
	char idbuf[32];
	char *pj = run_params ? json_dumps(run_params, JSON_COMPACT) : NULL, *sj = specs ? json_dumps(specs, JSON_COMPACT) : NULL;
	const char *params[6] = {idbuf, from, actor, no_cache ? "t" : "f", pj, sj};
	int error;

	snprintf(idbuf, sizeof(idbuf), "%lld", (long long)id);
	error = store_q(NULL, conn, "SELECT ferry_retry($1, $2, $3, $4, $5::jsonb, $6::jsonb)", 6, params);
	free(pj), free(sj);
	return error;
}

int store_run_plan_source(PGconn *conn, int64_t id, json_t **spec, char **hash, char **yaml, json_t **params,
			  json_t **origin, char **workdir)
{
	char idbuf[32];
	const char *p[1] = {idbuf};
	PGresult *res = NULL;
	int error;

	*spec = *params = *origin = NULL;
	*hash = *yaml = *workdir = NULL;
	snprintf(idbuf, sizeof(idbuf), "%lld", (long long)id);
	if ((error = store_q(&res, conn,
			     "SELECT w.spec::text, w.hash, w.yaml, r.params::text, r.origin::text, r.workdir "
			     "FROM runs r JOIN workflows w ON w.hash = r.workflow_hash WHERE r.id = $1::bigint",
			     1, p)) < 0)
		return error;
	if (PQntuples(res) != 1) {
		PQclear(res);
		ferry_error_set("run %lld not found", (long long)id);
		return FERRY_ENOTFOUND;
	}
	*spec = json_loads(PQgetvalue(res, 0, 0), 0, NULL);
	*hash = xstrdup(PQgetvalue(res, 0, 1));
	*yaml = xstrdup(PQgetvalue(res, 0, 2));
	*params = json_loads(PQgetvalue(res, 0, 3), 0, NULL);
	*origin = PQgetisnull(res, 0, 4) ? NULL : json_loads(PQgetvalue(res, 0, 4), 0, NULL);
	*workdir = PQgetisnull(res, 0, 5) ? NULL : xstrdup(PQgetvalue(res, 0, 5));
	PQclear(res);
	return *spec && *params ? FERRY_OK : FERRY_EDB;
}

int store_run_events(char **out, PGconn *conn, int64_t id, int64_t after)
{
	char idbuf[32], afterbuf[32];
	const char *params[2] = {idbuf, afterbuf};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	snprintf(idbuf, sizeof(idbuf), "%lld", (long long)id);
	snprintf(afterbuf, sizeof(afterbuf), "%lld", (long long)after);
	if ((error = store_q(&res, conn,
		             "SELECT CASE WHEN EXISTS (SELECT 1 FROM runs WHERE id = $1) THEN "
		             "  json_build_object('events', coalesce((SELECT json_agg(json_build_object("
		             "    'id', id, 'at', ferry_ts(at), 'actor', actor, 'kind', kind, 'step', step, "
		             "    'attempt', attempt, 'detail', detail) ORDER BY id) "
		             "  FROM events WHERE run_id = $1 AND id > $2), '[]')) END",
		             2, params)) < 0)
		return error;
	return run_json_result(out, res, id);
}

int store_run_steps_unstarted(char ***names, int *n, PGconn *conn, int64_t run_id, const char *host, int limit)
{
	char idbuf[32], limbuf[16];
	const char *params[3] = {idbuf, limbuf, host};
	PGresult *res = NULL;
	int error;

	*names = NULL;
	*n = 0;
	snprintf(idbuf, sizeof(idbuf), "%lld", (long long)run_id);
	snprintf(limbuf, sizeof(limbuf), "%d", limit);
	/*
	 * a run's written-out steps (not a fan-out's items) never claimed yet, in the order they were
	 * written; none where another host's daemon is live
	 */
	if ((error = store_q(&res, conn,
			     "SELECT name FROM steps WHERE run_id = $1::bigint AND parent_id IS NULL AND attempts = 0 "
			     "AND state IN ('blocked', 'ready') "
			     "AND NOT EXISTS (SELECT 1 FROM daemons d WHERE d.host <> $3 AND d.stopped_at IS NULL "
			     "                AND d.last_seen + d.lease_ms * interval '1 millisecond' > now()) "
			     "ORDER BY id LIMIT $2::int",
			     3, params)) < 0)
		return error;
	*n = PQntuples(res);
	*names = xcalloc((size_t)*n + 1, sizeof(**names));
	for (int i = 0; i < *n; i++)
		(*names)[i] = xstrdup(PQgetvalue(res, i, 0));
	PQclear(res);
	return FERRY_OK;
}

int store_step_log(char **dir, int *attempt, int *running, char **host, PGconn *conn, int64_t run,
		   const char *step, int want_attempt)
{
	char runbuf[32], attbuf[16];
	const char *params[3] = {runbuf, step, attbuf};
	PGresult *res = NULL;
	int error;

	*dir = NULL;
	if (host)
		*host = NULL;
	snprintf(runbuf, sizeof(runbuf), "%lld", (long long)run);
	snprintf(attbuf, sizeof(attbuf), "%d", want_attempt);
	if ((error = store_q(&res, conn,
		             "SELECT s.id IS NOT NULL, a.attempt, a.dir, a.state = 'running', a.host "
		             "FROM (SELECT 1) one "
		             "LEFT JOIN steps s ON s.run_id = $1 AND s.name = $2 "
		             "LEFT JOIN LATERAL (SELECT * FROM attempts a WHERE a.step_id = s.id "
		             "  AND ($3::int = 0 OR a.attempt = $3::int) ORDER BY a.attempt DESC LIMIT 1) a ON true",
		             3, params)) < 0)
		return error;
	if (PQgetvalue(res, 0, 0)[0] != 't') {
		ferry_error_set("run %lld has no step \"%s\"", (long long)run, step);
		error = FERRY_ENOTFOUND;
	} else if (!PQgetisnull(res, 0, 1) && PQgetisnull(res, 0, 2)) {
		/* claimed, its job not started yet: no directory, an empty log for now */
		*attempt = (int)store_intval(res, 0, 1);
		*running = 1;
	} else if (PQgetisnull(res, 0, 1)) {
		if (want_attempt)
			ferry_error_set("step \"%s\" of run %lld has no attempt %d", step, (long long)run, want_attempt);
		else
			ferry_error_set("step \"%s\" of run %lld has not started yet", step, (long long)run);
		error = FERRY_ENOTFOUND;
	} else {
		*attempt = (int)store_intval(res, 0, 1);
		*dir = xstrdup(PQgetvalue(res, 0, 2));
		*running = PQgetvalue(res, 0, 3)[0] == 't';
	}
	if (error == FERRY_OK && host && !PQgetisnull(res, 0, 4))
		*host = xstrdup(PQgetvalue(res, 0, 4));
	PQclear(res);
	return error;
}

int store_attempt_of_dir(char **step, int *attempt, char **host, PGconn *conn, int64_t run, const char *dir)
{
	char runbuf[32], *name, *att;
	const char *params[4] = {runbuf, dir, NULL, NULL};
	PGresult *res = NULL;
	int error;

	*step = *host = NULL;
	*attempt = 0;
	snprintf(runbuf, sizeof(runbuf), "%lld", (long long)run);
	/* .../runs/RUN/STEP/ATTEMPT (exec_attempt_dir): looked up by its step and number, then compared whole */
	name = xstrdup(dir);
	att = strrchr(name, '/');
	if (att == NULL || att == name) {
		free(name);
		ferry_error_set("%s is no attempt's directory", dir);
		return FERRY_ENOTFOUND;
	}
	*att++ = '\0';
	params[3] = att;
	params[2] = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
	error = strspn(att, "0123456789") == strlen(att) && att[0] && strlen(att) < 10
			? store_q(&res, conn,
				  "SELECT s.name, a.attempt, coalesce(a.host, '') FROM steps s "
				  "JOIN attempts a ON a.step_id = s.id AND a.attempt = $4::int "
				  "WHERE s.run_id = $1::bigint AND s.name = $3 AND a.dir = $2",
				  4, params)
			: FERRY_ENOTFOUND;
	free(name);
	if (error == FERRY_ENOTFOUND)
		ferry_error_set("%s is no attempt's directory", dir);
	if (error < 0)
		return error;
	if (PQntuples(res) == 0) {
		ferry_error_set("no attempt of run %lld ran in %s", (long long)run, dir);
		error = FERRY_ENOTFOUND;
	} else {
		*step = store_dupval(res, 0, 0);
		*attempt = (int)store_intval(res, 0, 1);
		*host = store_dupval(res, 0, 2);
	}
	PQclear(res);
	return error;
}

int store_step_continue(PGconn *conn, int64_t run, const char *step, const char *actor,
			const char *data)
{
	char runbuf[32];
	const char *params[4] = {runbuf, step, actor, data};

	snprintf(runbuf, sizeof(runbuf), "%lld", (long long)run);
	return store_q(NULL, conn, "SELECT ferry_continue($1, $2, $3, $4::jsonb)", 4, params);
}

int store_step_reject(PGconn *conn, int64_t run, const char *step, const char *actor, const char *reason)
{
	char runbuf[32];
	const char *params[4] = {runbuf, step, actor, reason};

	snprintf(runbuf, sizeof(runbuf), "%lld", (long long)run);
	return store_q(NULL, conn, "SELECT ferry_reject($1, $2, $3, $4)", 4, params);
}

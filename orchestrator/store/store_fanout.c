/*
 * store_fanout — writing a foreach step's children (db/functions/fanout.sql
 * has the rest of a fan-out's life). The children are written in batches
 * (steps/foreach.c cuts them), each its own transaction of at most
 * STORE_FANOUT_BATCH rows, never the whole list in one; each batch is fenced on the claiming attempt (still
 * running and ours) and idempotent (ON CONFLICT on parent and index), so a
 * daemon killed halfway leaves some children written and the next claim of
 * the step writes the rest: no child twice, none missing.
 */
#include "store/store.h"
#include "store/store_priv.h"

#include <stdio.h>
#include <stdlib.h>

#include "lib/util.h"

int store_fanout_expand(PGconn *conn, int64_t step_id, int attempt, const char *owner, const json_t *items,
			size_t from)
{
	char id[24], att[16], off[24], *txt;
	PGresult *res = NULL;
	int error;

	if (json_array_size(items) > STORE_FANOUT_BATCH) {
		ferry_error_set("%zu children in one batch; at most %d", json_array_size(items), STORE_FANOUT_BATCH);
		return FERRY_EINVALID;
	}
	snprintf(id, sizeof(id), "%lld", (long long)step_id);
	snprintf(att, sizeof(att), "%d", attempt);
	snprintf(off, sizeof(off), "%zu", from);
	/* 15 digits, as outputs and metrics (sbuf_json): an item 0.05 is stored as 0.05 */
	txt = json_dumps(items, JSON_COMPACT | JSON_REAL_PRECISION(15));
	{
		const char *p[5] = {id, att, owner, txt, off};
		error = store_q(&res, conn,
				"WITH f AS ("
				"  SELECT 1 FROM attempts a WHERE a.step_id = $1 AND a.attempt = $2 AND a.owner = $3 "
				"  AND a.state = 'running'), "
				"w AS ("
				"  INSERT INTO steps (run_id, dev, name, idx, kind, state, deps_pending, retry_limit, "
				"                     backoff_ms, max_backoff_ms, timeout_ms, spec, parent_id, item_index) "
				"  SELECT p.run_id, p.dev, p.name || '[' || x.i || ']', p.idx, p.kind, 'blocked', 0, "
				"         p.retry_limit, p.backoff_ms, p.max_backoff_ms, p.timeout_ms, "
				"         jsonb_build_object('item', e.item, 'item_index', x.i), p.id, x.i "
				"  FROM steps p, jsonb_array_elements($4::jsonb) WITH ORDINALITY AS e(item, ord), "
				"       LATERAL (SELECT $5::int + e.ord::int - 1 AS i) x "
				"  WHERE p.id = $1 AND EXISTS (SELECT 1 FROM f) "
				/* written before: kept, its item the list's now (a retry from above may change it) */
				"  ON CONFLICT (parent_id, item_index) WHERE parent_id IS NOT NULL DO UPDATE "
				"  SET spec = excluded.spec WHERE steps.spec IS DISTINCT FROM excluded.spec "
				"  RETURNING 1) "
				"SELECT EXISTS (SELECT 1 FROM f), (SELECT count(*) FROM w)",
				5, p);
	}
	free(txt);
	if (error < 0)
		return error;
	if (PQgetvalue(res, 0, 0)[0] != 't') {
		PQclear(res);
		ferry_error_set("step %lld attempt %d is no longer this daemon's (stopped, or taken over): "
				"its children were not all written", (long long)step_id, attempt);
		return FERRY_ECONFLICT;
	}
	PQclear(res);
	return FERRY_OK;
}

int store_fanout_analyze(PGconn *conn, size_t children)
{
	if (children < STORE_ANALYZE_STEPS)
		return FERRY_OK;
	return store_tx(conn, "ANALYZE steps");
}

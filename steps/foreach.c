/*
 * foreach — a foreach step when it is claimed: its list resolved (a literal
 * list, a range, a param, or an upstream step's output: plan/foreach.h
 * reads it), its children written (store_fanout_expand: in batches,
 * fenced, idempotent), and the step finished as expanded — it runs on
 * through its children (db/functions/fanout.sql). A list that cannot be
 * read fails the step for good, saying why.
 */
#include "steps/steps.h"

#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "plan/foreach.h"
#include "store/store.h"

/* The list of r's foreach, or NULL with res failed. */
static json_t *resolve(struct step_result *res, const struct step_run *r, const json_t *fe)
{
	const json_t *v;
	json_t *items = NULL;
	char *what = NULL;

	if (json_object_get(r->spec, "sweep") != NULL) {
		/* drawn again as the config drew them: the same list (a grid's "{{params.P}}" from the run's) */
		json_t *sweep = NULL;
		if (sweep_resolve(&sweep, json_object_get(r->spec, "sweep"), json_object_get(r->run, "params")) < 0 ||
		    sweep_items(&items, sweep) < 0) {
			step_result_fail_final(res, "%s%s", strncmp(ferry_error_last(), "sweep", 5) ? "sweep: " : "",
					       ferry_error_last());
			json_decref(sweep);
			return NULL;
		}
		json_decref(sweep);
		return items;
	}
	if ((v = json_object_get(fe, "items")) != NULL) {
		what = xstrdup("foreach");
	} else if ((v = json_object_get(fe, "range")) != NULL) {
		items = foreach_range((long)json_integer_value(v));
		return items;
	} else if ((v = json_object_get(fe, "param")) != NULL) {
		what = xasprintf("params.%s", json_string_value(v));
		v = json_object_get(json_object_get(r->run, "params"), json_string_value(v));
	} else if ((v = json_object_get(fe, "ref")) != NULL) {
		const char *step = json_string_value(json_object_get(v, "step"));
		const char *key = json_string_value(json_object_get(v, "key"));
		const json_t *in = json_object_get(r->inputs, step ? step : "");
		what = xasprintf("steps.%s.outputs.%s", step ? step : "?", key ? key : "?");
		if (in == NULL) {
			step_result_fail_final(res, "foreach %s: step %s did not succeed", what, step);
			free(what);
			return NULL;
		}
		v = json_object_get(json_object_get(in, "outputs"), key ? key : "");
		if (v == NULL) {
			step_result_fail_final(res, "foreach %s: step %s wrote no output %s (a file %s.* in its "
					       "FERRY_OUTPUT_DIR, or a key of its outputs.json)", what, step, key, key);
			free(what);
			return NULL;
		}
	} else {
		step_result_fail_final(res, "foreach: nothing to fan out over");
		return NULL;
	}
	if (v == NULL || foreach_items(&items, v, what) < 0) {
		step_result_fail_final(res, "%s", v == NULL ? "foreach: the param has no value" : ferry_error_last());
		items = NULL;
	}
	free(what);
	return items;
}

int steps_foreach_expand(struct step_result *res, const struct step_run *r)
{
	json_t *items = resolve(res, r, json_object_get(r->spec, "foreach"));
	int64_t t0 = clock_mono_ms();
	int rc;

	if (items == NULL)
		return 1;
	rc = FERRY_OK;
	for (size_t at = 0; at < json_array_size(items) && rc == FERRY_OK; at += STORE_FANOUT_BATCH) {
		json_t *batch = json_array();
		for (size_t k = at; k < at + STORE_FANOUT_BATCH && k < json_array_size(items); k++)
			json_array_append(batch, json_array_get(items, k));
		if (at > 0)
			EXEC_FAULT("expanding"); /* the crash tests: killed with some children written */
		rc = store_fanout_expand(r->conn, r->step_id, r->attempt, r->actor, batch, at);
		json_decref(batch);
	}
	if (rc == FERRY_ECONFLICT) {
		/* someone else has the step now: nothing to report for this attempt but that */
		res->outcome = OUTCOME_LOST;
		res->reason = xstrdup(ferry_error_last());
	} else if (rc < 0) {
		res->outcome = OUTCOME_FAILED; /* the database: the next try writes the rest */
		res->reason = xasprintf("writing the items: %s", ferry_error_last());
	} else {
		if (store_fanout_analyze(r->conn, json_array_size(items)) < 0)
			steps_log(r, "ferry: refreshing statistics after the items: %s", ferry_error_last());
		res->outcome = OUTCOME_EXPANDED;
		res->outputs = json_pack("{s:I}", "items", (json_int_t)json_array_size(items));
		res->reason = xasprintf("%zu items", json_array_size(items));
		steps_log(r, "ferry: fanned out over %zu items in %lld ms", json_array_size(items),
			  (long long)(clock_mono_ms() - t0));
	}
	json_decref(items);
	return 1;
}

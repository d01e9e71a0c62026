/*
 * when — a step's `when:` condition (plan/cond.h), evaluated when the step
 * is claimed, before its cache or its kind: params from the run, outputs
 * and metrics from the succeeded steps above it (a step above that did
 * not succeed — skipped, with needs if: any — has none: its references
 * are null), production's metrics from the registry (the spec's
 * when_model, found by the config). A condition that does not hold skips
 * the step, with the condition and the values in its reason; one that
 * cannot be evaluated fails it for good, saying why.
 */
#include "steps/steps.h"

#include <stdlib.h>
#include <string.h>

#include "plan/cond.h"
#include "store/store.h"

struct when_ctx {
	const struct step_run *r;
	const char *model;
	int prod_read;   /* production looked up (once per evaluation) */
	json_t *prod;    /* its metrics, NULL when there is no production version */
	char *prod_version;
};

/* An output by its key: the key as it is, else a path of its dotted parts. */
static json_t *output_at(const json_t *outputs, const char *key)
{
	const json_t *v = json_object_get(outputs, key);
	char *path, *part, *save = NULL;

	if (v != NULL || strchr(key, '.') == NULL)
		return (json_t *)v;
	path = xstrdup(key);
	v = outputs;
	for (part = strtok_r(path, ".", &save); part && v; part = strtok_r(NULL, ".", &save))
		v = json_object_get(v, part);
	free(path);
	return (json_t *)v;
}

static int lookup(json_t **val, char **why, const struct cond_ref *ref, void *arg)
{
	struct when_ctx *w = arg;
	const json_t *in, *v;

	switch (ref->kind) {
	case CREF_PARAM:
		v = json_object_get(json_object_get(w->r->run, "params"), ref->key);
		if (v == NULL) {
			*why = xasprintf("the run has no param %s", ref->key);
			return 1;
		}
		*val = json_incref((json_t *)v);
		return 0;
	case CREF_OUTPUT:
	case CREF_METRIC:
		if ((in = json_object_get(w->r->inputs, ref->step)) == NULL) {
			*val = json_null(); /* it did not succeed: nothing of it to read */
			*why = xasprintf("step %s did not succeed", ref->step);
			return 0;
		}
		v = ref->kind == CREF_OUTPUT ? output_at(json_object_get(in, "outputs"), ref->key)
					     : json_object_get(json_object_get(in, "metrics"), ref->key);
		if (v == NULL) {
			*why = xasprintf("step %s wrote no %s %s", ref->step,
					 ref->kind == CREF_OUTPUT ? "output" : "metric", ref->key);
			return 1;
		}
		*val = json_incref((json_t *)v);
		return 0;
	case CREF_PRODUCTION:
		if (w->model == NULL) {
			*why = xstrdup("the step names no model");
			return 1;
		}
		if (!w->prod_read) {
			int rc = store_model_alias_get(&w->prod_version, &w->prod, w->r->conn, w->model, "production");
			if (rc < 0 && rc != FERRY_ENOTFOUND)
				return rc;
			w->prod_read = 1;
		}
		if (w->prod == NULL) {
			*why = xasprintf("no production version of %s", w->model);
			return 1;
		}
		if ((v = json_object_get(w->prod, ref->key)) == NULL) {
			*why = xasprintf("production version %s of %s has no metric %s", w->prod_version, w->model,
					 ref->key);
			*val = NULL;
			return 2;
		}
		*val = json_incref((json_t *)v);
		*why = xasprintf("%s %s", w->model, w->prod_version);
		return 0;
	}
	return 1;
}

int steps_when(struct step_result *res, const struct step_run *r)
{
	const char *text = json_string_value(json_object_get(r->spec, "when"));
	struct when_ctx w = {.r = r, .model = json_string_value(json_object_get(r->spec, "when_model"))};
	struct cond *c = NULL;
	char *explain = NULL;
	bool holds = false;
	int rc;

	if (text == NULL)
		return 0;
	if (strcmp(text, "true") == 0 || strcmp(text, "false") == 0) {
		holds = text[0] == 't';
		rc = FERRY_OK;
	} else if ((rc = cond_parse(&c, text)) == FERRY_OK) {
		rc = cond_eval(c, lookup, &w, &holds, &explain);
	}
	if (rc == FERRY_EDB || (rc < 0 && rc != FERRY_EINVALID)) {
		/* the registry could not be read: a retry may do */
		res->outcome = OUTCOME_FAILED;
		res->reason = xasprintf("when: reading the production version of %s: %s", w.model ? w.model : "?",
					ferry_error_last());
		rc = 1;
	} else if (rc < 0) {
		step_result_fail_final(res, "when \"%s\": %s", text, ferry_error_last());
		rc = 1;
	} else if (!holds) {
		res->outcome = OUTCOME_SKIPPED;
		res->reason = xasprintf("when \"%s\" did not hold%s%s%s", text, explain ? " (" : "",
					explain ? explain : "", explain ? ")" : "");
		rc = 1;
	} else {
		steps_log(r, "ferry: when \"%s\" holds%s%s%s", text, explain ? " (" : "", explain ? explain : "",
			  explain ? ")" : "");
		rc = 0;
	}
	free(explain);
	cond_free(c);
	json_decref(w.prod);
	free(w.prod_version);
	return rc;
}

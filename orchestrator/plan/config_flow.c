/*
 * config_flow — the keys of a step that shape the run's flow rather than
 * its job: when: (a condition, plan/cond.h), foreach: and sweep: (a
 * fan-out and its list, plan/foreach.h) with max_parallel and min_success,
 * and what a step under finally: may say (fail_run). Checked here, kept in
 * the step's spec as written or normalised; evaluated at claim time by
 * steps/ (when.c, foreach.c). needs: with if: any is the needs parser's
 * (config.c).
 */
#include "plan/config_priv.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/cond.h"
#include "plan/foreach.h"
#include "plan/gate.h"
#include "plan/template.h"

/* A literal foreach item: a scalar (a string), or a mapping of scalars (an object of strings). */
static json_t *foreach_literal_item(struct ctx *c, const yaml_node_t *n)
{
	const yaml_node_t *key, *val;
	json_t *obj;
	size_t k = 0;
	const char *ks, *vs;

	if (n->type == YAML_SCALAR_NODE)
		return json_string(sval(n));
	if (n->type != YAML_MAPPING_NODE) {
		err_node(c, n, "a foreach item is a value or a mapping of values, not a %s", ntype(n));
		return NULL;
	}
	obj = json_object();
	while (cfg_next_pair(c, n, &k, &key, &val)) {
		if ((ks = cfg_text(c, key, "a foreach item key")) == NULL ||
		    (vs = cfg_text(c, val, "a foreach item value")) == NULL)
			continue;
		if (!tmpl_ident_ok(ks, strlen(ks)))
			err_node(c, key, "foreach item key %s is not a name {{item.KEY}} can use (letters, digits, _)",
				 cfg_q(c, ks));
		json_object_set_new(obj, ks, json_string(vs));
	}
	return obj;
}

/*
 * foreach: what a step fans out over — a literal list, "{{steps.X.outputs.K}}"
 * (a list an upstream step wrote), "{{params.P}}" (a param holding a JSON
 * list, or lines), or {range: N}. Into the spec as {"items": […]},
 * {"ref": {"step", "key"}}, {"param": P} or {"range": N}.
 */
static json_t *parse_foreach(struct ctx *c, size_t i, const yaml_node_t *n)
{
	static const char *const range_keys[] = {"range"};
	const yaml_node_t *v[1] = {NULL};
	const char *s, *expr = NULL, *end = NULL;
	size_t elen = 0;
	json_t *items, *out;

	if (n->type == YAML_SEQUENCE_NODE) {
		const yaml_node_t *it;
		size_t k = 0;
		items = json_array();
		while (cfg_next_item(c, n, &k, &it)) {
			json_t *item = foreach_literal_item(c, it);
			if (item != NULL)
				json_array_append_new(items, item);
		}
		if (foreach_items(&out, items, "foreach") < 0)
			err_node(c, n, "%s", ferry_error_last());
		json_decref(out);
		return json_pack("{s:o}", "items", items);
	}
	if (n->type == YAML_MAPPING_NODE) {
		int64_t r = 0;
		if (!cfg_map_fields(c, n, "foreach", range_keys, 1, v, NULL) || !present(v[0])) {
			err_node(c, n, "foreach is a list, \"{{steps.STEP.outputs.KEY}}\", \"{{params.NAME}}\" or "
				 "{range: N}");
			return NULL;
		}
		if ((s = cfg_text(c, v[0], "foreach range")) == NULL)
			return NULL;
		if (parse_int64(s, &r) < 0 || r < 1 || r > FOREACH_MAX_ITEMS) {
			err_node(c, v[0], "foreach range %s must be a whole number from 1 to %d", cfg_q(c, s),
				 FOREACH_MAX_ITEMS);
			return NULL;
		}
		return json_pack("{s:I}", "range", (json_int_t)r);
	}
	if ((s = cfg_text(c, n, "foreach")) == NULL)
		return NULL;
	if (tmpl_next(s, &expr, &elen, &end) == s && end != NULL && *end == '\0') {
		struct tmpl_expr t = tmpl_expr_parse(expr, elen);
		if (t.kind == TMPL_PARAM && json_object_getn(c->params, t.a, t.alen) != NULL)
			return json_pack("{s:s%}", "param", t.a, t.alen);
		if (t.kind == TMPL_STEP) {
			char *step = xstrndup(t.a, t.alen);
			const char *key = t.a + t.alen + strlen(".outputs.");
			if (c->ntrefs == c->captrefs) {
				c->captrefs = c->captrefs ? c->captrefs * 2 : 8;
				c->trefs = xrealloc(c->trefs, c->captrefs * sizeof(*c->trefs));
			}
			c->trefs[c->ntrefs++] = (struct tref){i, n, xstrdup(step)};
			out = json_pack("{s:{s:s,s:s%}}", "ref", "step", step, "key", key, (size_t)(expr + elen - key));
			free(step);
			return out;
		}
	}
	err_node(c, n, "foreach %s: use a list, one reference \"{{steps.STEP.outputs.KEY}}\" or "
		 "\"{{params.NAME}}\" (a declared param), or {range: N}", cfg_q(c, s));
	return NULL;
}

/* A YAML value as JSON, for sweeps: plain scalars that read as numbers or booleans as such, else strings. */
static json_t *yaml_value(struct ctx *c, const yaml_node_t *n, int depth)
{
	const yaml_node_t *key, *val, *it;
	json_t *out;
	size_t k = 0;
	char *end;

	if (depth > 6) {
		err_node(c, n, "nested too deep for a sweep");
		return json_null();
	}
	if (n->type == YAML_SCALAR_NODE) {
		const char *t = sval(n);
		if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && *t) {
			int64_t i;
			double d;
			if (parse_int64(t, &i) == 0)
				return json_integer((json_int_t)i);
			d = strtod(t, &end);
			if (*end == '\0' && end != t && isfinite(d) && (isdigit((unsigned char)*t) || *t == '-' || *t == '.'))
				return json_real(d);
			if (strcmp(t, "true") == 0 || strcmp(t, "false") == 0)
				return json_boolean(t[0] == 't');
		}
		return json_string(t);
	}
	if (n->type == YAML_SEQUENCE_NODE) {
		out = json_array();
		while (cfg_next_item(c, n, &k, &it))
			json_array_append_new(out, yaml_value(c, it, depth + 1));
		return out;
	}
	out = json_object();
	while (cfg_next_pair(c, n, &k, &key, &val)) {
		const char *ks = cfg_text(c, key, "a sweep key");
		if (ks != NULL)
			json_object_set_new(out, ks, yaml_value(c, val, depth + 1));
	}
	return out;
}

/*
 * stop_when: "METRIC OP NUMBER" (a gate's comparison, gate.h): the sweep
 * stops starting items once one that succeeded reported METRIC meeting it
 * (db/functions/fanout.sql ferry_fanout_stop_when). Into the sweep as
 * "stop_when": {"metric", "op", "value"}.
 */
static void parse_stop_when(struct ctx *c, const yaml_node_t *n, json_t *sweep)
{
	const char *s = cfg_text(c, n, "stop_when");
	struct gate_expr e = {0};
	size_t k;
	char *name;

	if (s == NULL)
		return;
	k = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-/:");
	name = xstrndup(s, k);
	if (!metrics_name_ok(name) || gate_expr_parse(&e, "stop_when", s + k, 0) < 0) {
		err_node(c, n, "stop_when %s: a metric, a comparison and a number, e.g. \"accuracy >= 0.99\"", cfg_q(c, s));
	} else if (e.production) {
		err_node(c, n, "stop_when %s: compares with a number, not production", cfg_q(c, s));
	} else {
		json_object_set_new(sweep, "stop_when", json_pack("{s:s,s:s,s:f}", "metric", name, "op", e.op,
								  "value", e.value));
	}
	free(name);
}

/*
 * A grid's "{{params.NAME}}" values name declared params; *resolved is the
 * sweep with them replaced by the params' defaults (sweep_resolve; a param
 * with no default stands as one value) for sweep_items to check. False
 * after an error.
 */
static bool check_grid_params(struct ctx *c, const yaml_node_t *at, json_t *sweep, json_t **resolved)
{
	json_t *defs = json_object(), *p, *v;
	const char *name;
	bool ok = true;

	json_object_foreach(json_object_get(sweep, "grid"), name, v) {
		const char *s = json_string_value(v), *expr = NULL, *end = NULL;
		size_t elen = 0;
		if (s == NULL)
			continue;
		if (tmpl_next(s, &expr, &elen, &end) == s && end != NULL && *end == '\0') {
			struct tmpl_expr t = tmpl_expr_parse(expr, elen);
			if (t.kind == TMPL_PARAM && json_object_getn(c->params, t.a, t.alen) == NULL) {
				struct sbuf decl = {0};
				cfg_list_keys(c->params, &decl);
				err_node(c, at, "sweep grid %s: params.%.*s is not a declared param (declared: %s)",
					 name, (int)t.alen, t.a, decl.len ? decl.p : "none");
				free(decl.p);
				ok = false;
			}
		}
	}
	json_object_foreach(c->params, name, p) {
		const json_t *d = json_object_get(p, "default");
		json_object_set_new(defs, name, d ? json_incref((json_t *)d) : json_integer(0));
	}
	if (ok && sweep_resolve(resolved, sweep, defs) < 0) {
		err_node(c, at, "%s", ferry_error_last());
		ok = false;
	}
	json_decref(defs);
	return ok;
}

/*
 * sweep: grid: or random: over named parameters (plan/foreach.h
 * sweep_items, checked here by drawing them), and select: {metric, goal}
 * to pick the best item. Into the spec as "sweep" (items drawn again at
 * claim time: the same) and "select".
 */
static json_t *parse_sweep(struct ctx *c, size_t i, const yaml_node_t *n, json_t *js)
{
	static const char *const keys[] = {"grid", "random", "select", "stop_when"};
	static const char *const sel_keys[] = {"metric", "goal"};
	const yaml_node_t *v[4] = {NULL, NULL, NULL, NULL}, *sv[2] = {NULL, NULL};
	json_t *sweep, *items = NULL, *resolved = NULL;
	const char *metric = NULL, *goal = "max";

	(void)i;
	if (!cfg_map_fields(c, n, "sweep", keys, 4, v, NULL))
		return NULL;
	if (present(v[0]) == present(v[1])) {
		err_node(c, n, "a sweep has one of grid: {NAME: [values]} or random: {n, seed, params}");
		return NULL;
	}
	sweep = json_object();
	if (present(v[0]))
		json_object_set_new(sweep, "grid", yaml_value(c, v[0], 0));
	else
		json_object_set_new(sweep, "random", yaml_value(c, v[1], 0));
	if (check_grid_params(c, v[0], sweep, &resolved) && sweep_items(&items, resolved) < 0)
		err_node(c, present(v[0]) ? v[0] : v[1], "%s", ferry_error_last());
	json_decref(resolved);
	json_decref(items);
	if (present(v[2]) && cfg_map_fields(c, v[2], "sweep select", sel_keys, 2, sv, NULL)) {
		if (present(sv[0]) && (metric = cfg_text(c, sv[0], "select metric")) != NULL && !metrics_name_ok(metric))
			err_node(c, sv[0], "select metric %s is not a metric name", cfg_q(c, metric));
		if (!present(sv[0]))
			err_node(c, v[2], "select names the metric of metrics.json to pick the best item by: "
				 "{metric: accuracy, goal: max}");
		if (present(sv[1]) && (goal = cfg_text(c, sv[1], "select goal")) != NULL &&
		    strcmp(goal, "max") != 0 && strcmp(goal, "min") != 0) {
			err_node(c, sv[1], "select goal %s: max (the highest wins) or min", cfg_q(c, goal));
			goal = "max";
		}
		if (metric != NULL)
			json_object_set_new(js, "select", json_pack("{s:s,s:s}", "metric", metric, "goal", goal ? goal : "max"));
	}
	if (present(v[3]))
		parse_stop_when(c, v[3], sweep);
	return sweep;
}

/* A YAML boolean (true/false in their three spellings); false after an error. */
static bool cfg_bool(struct ctx *c, const yaml_node_t *n, const char *what)
{
	const char *s = cfg_text(c, n, what);

	if (s != NULL && (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0))
		return true;
	if (s != NULL && strcmp(s, "false") != 0 && strcmp(s, "False") != 0 && strcmp(s, "FALSE") != 0)
		err_node(c, n, "%s must be true or false, not %s", what, cfg_q(c, s));
	return false;
}

/*
 * when: a condition (plan/cond.h) checked here — its grammar, its params
 * declared, its steps upstream (with the templates' references, once the
 * graph is known), production's model found after the graph — and kept as
 * written for the claim to evaluate.
 */
static json_t *parse_when(struct ctx *c, size_t i, const yaml_node_t *n)
{
	struct cond *cd = NULL;
	const char *s;

	if (n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
	    (strcmp(sval(n), "true") == 0 || strcmp(sval(n), "false") == 0))
		return json_string(sval(n));
	if ((s = cfg_text(c, n, "when")) == NULL)
		return NULL;
	if (cond_parse(&cd, s) < 0) {
		err_node(c, n, "when %s: %s", cfg_q(c, s), ferry_error_last());
		return NULL;
	}
	for (size_t k = 0; k < cond_nrefs(cd); k++) {
		const struct cond_ref *r = cond_ref_at(cd, k);
		if (r->kind == CREF_PARAM && json_object_get(c->params, r->key) == NULL) {
			struct sbuf decl = {0};
			cfg_list_keys(c->params, &decl);
			err_node(c, n, "when refers to undeclared parameter %s; declared: %s", cfg_q(c, r->key),
				 decl.p);
			free(decl.p);
		} else if (r->kind == CREF_OUTPUT || r->kind == CREF_METRIC) {
			if (c->ntrefs == c->captrefs) {
				c->captrefs = c->captrefs ? c->captrefs * 2 : 8;
				c->trefs = xrealloc(c->trefs, c->captrefs * sizeof(*c->trefs));
			}
			c->trefs[c->ntrefs++] = (struct tref){i, n, xstrdup(r->step)};
		} else if (r->kind == CREF_PRODUCTION && c->steps[i].when_prod == NULL) {
			c->steps[i].when_prod = n;
		}
	}
	cond_free(cd);
	return json_string(s);
}

void cfg_flow_fields(struct ctx *c, size_t i, const struct step_kind *kind, const struct cfg_flow_nodes *f,
		     json_t *js)
{
	if (present(f->when)) {
		json_t *w = parse_when(c, i, f->when);
		if (w != NULL)
			json_object_set_new(js, "when", w);
	}
	if (present(f->foreach) && present(f->sweep))
		err_node(c, f->sweep, "a step has foreach: or sweep:, not both (a sweep is a foreach over its "
			 "combinations)");
	if (present(f->foreach) || present(f->sweep)) {
		json_t *fe = present(f->sweep) ? parse_sweep(c, i, f->sweep, js) : parse_foreach(c, i, f->foreach);
		const char *key = present(f->sweep) ? "sweep" : "foreach";
		const char *t;
		int64_t mp = 0;
		const yaml_node_t *at = present(f->sweep) ? f->sweep : f->foreach;
		if (kind != NULL && ((kind->flags & SKF_JOB) == 0 || (kind->flags & SKF_DAEMON) != 0))
			err_node(c, at, "%s applies to the kinds that run a job (run, train, evaluate), not to a %s step",
				 key, kind->name);
		if (c->steps[i].final)
			err_node(c, at, "a finally step cannot fan out");
		/* a sweep is a foreach over its items: "foreach" says so to the rest, "sweep" what they are */
		if (fe != NULL && present(f->sweep)) {
			json_object_set_new(js, "sweep", fe);
			json_object_set_new(js, "foreach", json_pack("{s:b}", "sweep", 1));
		} else if (fe != NULL) {
			json_object_set_new(js, "foreach", fe);
		}
		if (present(f->max_parallel) && (t = cfg_text(c, f->max_parallel, "max_parallel")) != NULL) {
			if (parse_int64(t, &mp) < 0 || mp < 1 || mp > 100000)
				err_node(c, f->max_parallel, "max_parallel %s must be a whole number from 1 to 100000",
					 cfg_q(c, t));
			json_object_set_new(js, "max_parallel", json_integer((json_int_t)mp));
		}
		if (present(f->min_success) && (t = cfg_text(c, f->min_success, "min_success")) != NULL) {
			double frac = foreach_min_success(t);
			if (frac < 0)
				err_node(c, f->min_success, "min_success %s must be a percentage (95%%) or a fraction "
					 "in (0, 1]: the part of the items that must succeed", cfg_q(c, t));
			json_object_set_new(js, "min_success", json_real(frac < 0 ? 1 : frac));
		}
		/* gang: the items are admitted all at once or not at all (db/functions/claim.sql) */
		if (present(f->gang) && cfg_bool(c, f->gang, "gang")) {
			if (present(f->max_parallel))
				err_node(c, f->gang, "gang: true starts every item at once; remove max_parallel");
			json_object_set_new(js, "gang", json_true());
		}
	} else if (present(f->gang) && kind && (kind->flags & SKF_SERVICE)) {
		/* a deploy step's replicas: placed all at once, or the step waits for room (steps/deploy_replicas.c) */
		if (cfg_bool(c, f->gang, "gang"))
			json_object_set_new(js, "gang", json_true());
	} else {
		if (present(f->gang))
			err_node(c, f->gang, "gang applies to a step with foreach: or sweep: (its items start together) "
				 "or to a deploy step (its replicas are placed together)");
		if (present(f->max_parallel))
			err_node(c, f->max_parallel, "max_parallel applies to a step with foreach: or sweep:");
		if (present(f->min_success))
			err_node(c, f->min_success, "min_success applies to a step with foreach: or sweep:");
	}
	/* preemptible: a higher-priority step may stop its job and requeue it (engine/preempt.c) */
	if (present(f->preemptible)) {
		if (kind && !(kind->flags & SKF_JOB))
			err_node(c, f->preemptible, "preemptible applies to a step that runs a job (run, train, "
				 "evaluate): its job is what is stopped and started again");
		else if (cfg_bool(c, f->preemptible, "preemptible"))
			json_object_set_new(js, "preemptible", json_true());
	}
	if (c->steps[i].final) {
		json_object_set_new(js, "finally", json_true());
		if (present(f->fail_run))
			json_object_set_new(js, "fail_run", json_boolean(cfg_bool(c, f->fail_run, "fail_run")));
	} else if (present(f->fail_run)) {
		err_node(c, f->fail_run, "fail_run applies to the steps under finally: (whether their failure "
			 "fails a run that succeeded); a step of steps: fails its run anyway");
	}
}

/*
 * config_kinds — the step kinds of a workflow and the keys that only some
 * kinds take. The kinds are the rows of the step-kind table (kind.h,
 * steps/kinds.c): each row says whether the kind has a command, which kind
 * keys it takes and which it needs. config.c parses what every step has
 * (name, needs, command, env, …) and calls cfg_kind_fields() for the rest:
 * cache, gate, model, dataset, labels, webhook, on_timeout, artifact,
 * version and alias, each checked for its type and values and for whether
 * the step's kind takes it, and each written to the normalised spec with
 * its default when absent. Once the step graph is known, cfg_kind_models()
 * gives an evaluate step that compares against production the model of the
 * register steps downstream of it.
 *
 * A new kind is a row of the table (the recipe is in steps/kinds.c); a new
 * kind key is an SK_ value in kind.h, its name in cfg_step_keys[], its bit
 * in the rows of the kinds that take it and its parsing in cfg_kind_fields().
 */
#include "plan/config_priv.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "plan/deploy.h"
#include "plan/gate.h"
#include "deploy/loadtest.h"

const char *const cfg_step_keys[SK_N] = {
	"name", "kind", "needs", "command", "env", "image", "workdir", "timeout", "retry",
	"executor", "resources", "network", "slurm", "cache", "gate", "model", "dataset", "labels", "webhook", "on_timeout", "artifact",
	"version", "alias", "serve", "traffic", "replicas", "sample", "deployment", "auto_stop",
	"load_test", "canary", "approve", "hang", "watch",
};

static const char *const on_timeout_values[] = {"fail", "continue"};
static const char *const version_values[] = {"patch", "minor", "major"};

const struct step_kind *cfg_kind_parse(struct ctx *c, const yaml_node_t *n, const char **name)
{
	const struct step_kind *kind = step_kind_default();
	struct sbuf known = {0};
	size_t k;

	*name = kind->name;
	if (!present(n) || (*name = cfg_text(c, n, "kind")) == NULL)
		return kind;
	if ((kind = step_kind_find(*name)) != NULL)
		return kind;
	for (k = 0; (kind = step_kind_at(k)) != NULL; k++)
		cfg_sb_addf(&known, "%s%s", k ? ", " : "", kind->name);
	err_node(c, n, "unknown kind %s; known kinds: %s", cfg_q(c, *name), known.p);
	free(known.p);
	return NULL;
}

/* Appends "evaluate and register" (the kinds that take key sk) to b. */
static void kinds_taking(struct sbuf *b, int sk)
{
	const struct step_kind *kind;
	size_t k, n = 0, shown = 0;

	for (k = 0; (kind = step_kind_at(k)) != NULL; k++)
		n += (kind->keys & SK_BIT(sk)) != 0;
	for (k = 0; (kind = step_kind_at(k)) != NULL; k++) {
		if ((kind->keys & SK_BIT(sk)) == 0)
			continue;
		shown++;
		cfg_sb_addf(b, "%s%s", shown == 1 ? "" : shown == n ? " and " : ", ", kind->name);
	}
}

/* ---- values ----------------------------------------------------------- */

/* A YAML boolean (plain true or false); false after an error. */
static bool parse_bool(struct ctx *c, const yaml_node_t *n, const char *what)
{
	static const char *const words[] = {"false", "False", "FALSE", "true", "True", "TRUE"};
	size_t k;

	if (n->type != YAML_SCALAR_NODE) {
		err_node(c, n, "%s must be true or false, not a %s", what, ntype(n));
		return false;
	}
	for (k = 0; k < NELEM(words) && strcmp(sval(n), words[k]) != 0; k++)
		;
	if (k < NELEM(words) && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
		return k >= 3;
	if (k < NELEM(words))
		err_node(c, n, "%s must be true or false, not the string %s; remove the quotes",
			 what, cfg_q(c, sval(n)));
	else
		err_node(c, n, "%s must be true or false, not %s", what, cfg_q(c, sval(n)));
	return false;
}

/* One of choices (n of them, the first the default) as a JSON string. */
static json_t *parse_choice(struct ctx *c, const yaml_node_t *n, const char *what,
			    const char *const *choices, size_t nchoices)
{
	struct sbuf list = {0};
	const char *s;
	size_t k;

	if (!present(n) || (s = cfg_text(c, n, what)) == NULL)
		return json_string(choices[0]);
	for (k = 0; k < nchoices; k++)
		if (strcmp(s, choices[k]) == 0)
			return json_string(s);
	for (k = 0; k < nchoices; k++)
		cfg_sb_addf(&list, "%s%s", k == 0 ? "" : k + 1 == nchoices ? " or " : ", ",
			    choices[k]);
	err_node(c, n, "%s %s is not valid; use %s", what, cfg_q(c, s), list.p);
	free(list.p);
	return json_string(choices[0]);
}

/* A non-empty string, its templates checked when step is not SIZE_MAX; or null. */
static json_t *parse_string(struct ctx *c, size_t step, const yaml_node_t *n, const char *what)
{
	const char *s;

	if (!present(n) || (s = cfg_text(c, n, what)) == NULL)
		return json_null();
	if (s[strspn(s, " \t\r\n")] == '\0') {
		err_node(c, n, "%s must not be empty", what);
		return json_null();
	}
	if (step != SIZE_MAX)
		cfg_check_templates(c, n, s, step);
	return json_string(s);
}

static json_t *parse_name(struct ctx *c, const yaml_node_t *n, const char *what)
{
	const char *s;

	if (!present(n) || (s = cfg_text(c, n, what)) == NULL)
		return json_null();
	if (!cfg_name_ok(s)) {
		err_node(c, n, "%s name %s is not valid; use 1-63 of a-z, 0-9, _, . and -, "
			 "starting with a letter or digit", what, cfg_q(c, s));
		return json_null();
	}
	return json_string(s);
}

/* labels: a path below the dataset directory; "labels.csv" when absent. */
static json_t *parse_labels(struct ctx *c, const yaml_node_t *n)
{
	json_t *v = parse_string(c, SIZE_MAX, n, "labels");
	const char *s = json_string_value(v);
	char *padded;

	if (s == NULL) {
		json_decref(v);
		return json_string("labels.csv");
	}
	padded = xasprintf("/%s/", s);
	if (s[0] == '/')
		err_node(c, n, "labels %s must be a path relative to the dataset directory",
			 cfg_q(c, s));
	else if (strstr(padded, "/../") != NULL)
		err_node(c, n, "labels %s must not contain \"..\"; use a path below the dataset "
			 "directory", cfg_q(c, s));
	free(padded);
	return v;
}

/* webhook: an http:// or https:// URL with a host, no blanks or controls. */
static json_t *parse_webhook(struct ctx *c, const yaml_node_t *n)
{
	json_t *v = parse_string(c, SIZE_MAX, n, "webhook");
	const char *s = json_string_value(v), *host;
	size_t k;
	bool ok;

	if (s == NULL)
		return v;
	host = strncasecmp(s, "https://", 8) == 0 ? s + 8 :
	       strncasecmp(s, "http://", 7) == 0 ? s + 7 : NULL;
	ok = host != NULL && *host != '\0' && *host != '/';
	for (k = 0; ok && s[k] != '\0'; k++)
		ok = (unsigned char)s[k] > 0x20 && s[k] != 0x7f;
	if (!ok)
		err_node(c, n, "webhook %s must be an http:// or https:// URL, e.g. "
			 "https://labels.example.com/tasks", cfg_q(c, s));
	return v;
}

/* alias: one name or a list of names, as an array. */
static json_t *parse_aliases(struct ctx *c, const yaml_node_t *n)
{
	json_t *arr = json_array(), *name;
	const yaml_node_t *it;
	size_t k = 0, j;

	if (!present(n))
		return arr;
	if (n->type == YAML_MAPPING_NODE) {
		err_node(c, n, "alias must be a name or a list of names, not a mapping");
		return arr;
	}
	while (cfg_next_item(c, n, &k, &it)) {
		if ((name = parse_name(c, it, "alias")) == NULL || json_is_null(name)) {
			json_decref(name);
			continue;
		}
		if (!isalpha((unsigned char)json_string_value(name)[0])) {
			err_node(c, it, "alias %s must start with a letter, so that it never looks like a "
				 "version number", cfg_q(c, json_string_value(name)));
			json_decref(name);
			continue;
		}
		for (j = 0; j < json_array_size(arr); j++)
			if (json_equal(json_array_get(arr, j), name))
				break;
		if (j < json_array_size(arr))
			err_node(c, it, "alias %s is listed twice", cfg_q(c, json_string_value(name)));
		else
			json_array_append(arr, name);
		json_decref(name);
	}
	return arr;
}

/* gate: METRIC: "OP VALUE" pairs, in file order, as gate_parse() items. */
static json_t *parse_gate(struct ctx *c, size_t i, const yaml_node_t *n)
{
	json_t *arr = json_array(), *item;
	const yaml_node_t *key, *val;
	const char *metric, *expr;
	size_t k = 0;

	if (!present(n))
		return arr;
	if (n->type != YAML_MAPPING_NODE) {
		err_node(c, n, "gate must be a mapping of METRIC: \"OP VALUE\" (e.g. accuracy: "
			 "\">= 0.9\"), not a %s", ntype(n));
		return arr;
	}
	while (cfg_next_pair(c, n, &k, &key, &val)) {
		if ((metric = cfg_text(c, key, "a gate metric name")) == NULL ||
		    (expr = cfg_text(c, val, "a gate comparison")) == NULL)
			continue;
		if (gate_parse(&item, metric, expr) < 0) {
			err_node(c, metrics_name_ok(metric) ? val : key, "%s", ferry_error_last());
			continue;
		}
		if (json_is_true(json_object_get(item, "production")) && c->steps[i].prod_gate == NULL)
			c->steps[i].prod_gate = val;
		json_array_append_new(arr, item);
	}
	return arr;
}

/* serve: the model server's command, a list of strings (templates checked), or null. */
static json_t *parse_serve(struct ctx *c, size_t i, const yaml_node_t *n)
{
	json_t *arr;
	const yaml_node_t *it;
	const char *s;
	size_t k = 0;

	if (!present(n))
		return json_null();
	arr = json_array();
	if (n->type != YAML_SEQUENCE_NODE || nitems(n) == 0) {
		err_node(c, n, "serve must be a non-empty list of strings: the model server's command "
			 "(it gets FERRY_PORT, FERRY_MODEL_PATH and FERRY_MODEL_NAME)");
		return arr;
	}
	while (cfg_next_item(c, n, &k, &it)) {
		if ((s = cfg_text(c, it, "a serve item")) == NULL)
			continue;
		cfg_check_templates(c, it, s, i);
		json_array_append_new(arr, json_string(s));
	}
	return arr;
}

/* A list of integers lo..hi (levels, canary steps) into a JSON array; NULL after an error. */
static json_t *int_list(struct ctx *c, const yaml_node_t *n, const char *what, int64_t lo, int64_t hi)
{
	json_t *arr = json_array();
	const yaml_node_t *it;
	const char *s;
	size_t k = 0;
	int64_t v;

	if (n->type != YAML_SEQUENCE_NODE || nitems(n) == 0) {
		err_node(c, n, "%s must be a non-empty list of integers from %lld to %lld", what, (long long)lo,
			 (long long)hi);
		json_decref(arr);
		return NULL;
	}
	while (cfg_next_item(c, n, &k, &it)) {
		if ((s = cfg_text(c, it, what)) == NULL)
			continue;
		if (parse_int64(s, &v) < 0 || v < lo || v > hi) {
			err_node(c, it, "%s: %s is not an integer from %lld to %lld", what, cfg_q(c, s), (long long)lo,
				 (long long)hi);
			continue;
		}
		json_array_append_new(arr, json_integer(v));
	}
	return arr;
}

/*
 * load_test: {levels: [1, 2, 4, 8, 16], requests: 200, METRIC: "OP VALUE"
 * | [comparisons…]}: the load-test gate (loadtest.h); the thresholds are
 * checked here, so a typo fails validation rather than the deploy.
 */
static json_t *parse_load_test(struct ctx *c, const yaml_node_t *n)
{
	json_t *lt = json_object(), *th = json_object();
	const yaml_node_t *key, *val, *it;
	const char *name, *s;
	size_t k = 0, j;
	int64_t v;

	if (!present(n)) {
		json_decref(lt), json_decref(th);
		return json_null();
	}
	if (n->type != YAML_MAPPING_NODE) {
		err_node(c, n, "load_test must be a mapping: levels, requests and thresholds such as "
			 "p99_ms: \"< 50\", error_rate: \"< 0.1%%\"");
		json_decref(th);
		return lt;
	}
	while (cfg_next_pair(c, n, &k, &key, &val)) {
		if ((name = cfg_text(c, key, "a load_test key")) == NULL)
			continue;
		if (strcmp(name, "levels") == 0) {
			json_t *l = int_list(c, val, "load_test.levels", 1, LOADTEST_MAX_CONCURRENCY);
			if (l)
				json_object_set_new(lt, "levels", l);
		} else if (strcmp(name, "requests") == 0) {
			if ((s = cfg_text(c, val, "load_test.requests")) == NULL)
				continue;
			if (parse_int64(s, &v) < 0 || v < 1 || v > LOADTEST_MAX_REQUESTS)
				err_node(c, val, "load_test.requests: %s is not an integer from 1 to %d", cfg_q(c, s),
					 LOADTEST_MAX_REQUESTS);
			else
				json_object_set_new(lt, "requests", json_integer(v));
		} else if (val->type == YAML_SEQUENCE_NODE) {
			json_t *arr = json_array();
			j = 0;
			while (cfg_next_item(c, val, &j, &it))
				if ((s = cfg_text(c, it, "a load_test comparison")) != NULL)
					json_array_append_new(arr, json_string(s));
			json_object_set_new(th, name, arr);
		} else if ((s = cfg_text(c, val, "a load_test comparison")) != NULL) {
			json_object_set_new(th, name, json_string(s));
		}
	}
	if (loadtest_thresholds_check(th) < 0)
		err_node(c, n, "load_test: %s", ferry_error_last());
	json_object_set_new(lt, "thresholds", th);
	return lt;
}

/*
 * canary: {steps: [10, 50, 100], interval: 2m, max_error_rate: 1%,
 * max_p99_ms: 200, max_rtime_ms: 100, min_requests: 50}: traffic grows step
 * by step, each judged from HAProxy's counters over the interval and a
 * probe of the canary's replicas (kind_deploy.c).
 */
static json_t *parse_canary(struct ctx *c, const yaml_node_t *n)
{
	json_t *cn = json_pack("{s:[i,i,i], s:I, s:f, s:n, s:i}", "steps", 10, 50, 100, "interval_ms",
			       (json_int_t)120000, "max_error_rate", 0.01, "max_rtime_ms", "min_requests", 20);
	const yaml_node_t *key, *val;
	const char *name, *s;
	size_t k = 0;
	int64_t v;

	if (!present(n)) {
		json_decref(cn);
		return json_null();
	}
	if (n->type != YAML_MAPPING_NODE) {
		err_node(c, n, "canary must be a mapping: steps, interval, max_error_rate, max_p99_ms, max_rtime_ms, "
			 "min_requests");
		return cn;
	}
	while (cfg_next_pair(c, n, &k, &key, &val)) {
		if ((name = cfg_text(c, key, "a canary key")) == NULL)
			continue;
		if (strcmp(name, "steps") == 0) {
			json_t *l = int_list(c, val, "canary.steps", 1, 100);
			if (l)
				json_object_set_new(cn, "steps", l);
			continue;
		}
		if ((s = cfg_text(c, val, name)) == NULL)
			continue;
		if (strcmp(name, "interval") == 0) {
			if (cfg_duration_parse(s, &v) < 0 || v < 100)
				err_node(c, val, "canary.interval: %s is not a duration (e.g. 30s, 2m)", cfg_q(c, s));
			else
				json_object_set_new(cn, "interval_ms", json_integer(v));
		} else if (strcmp(name, "max_error_rate") == 0) {
			char *end;
			double x = strtod(s, &end);
			if (end == s || (*end != '\0' && strcmp(end, "%") != 0) || x < 0 || x > 100)
				err_node(c, val, "canary.max_error_rate: %s is not a percentage (e.g. 1%%)", cfg_q(c, s));
			else
				json_object_set_new(cn, "max_error_rate", json_real(*end == '%' ? x / 100 : x));
		} else if (strcmp(name, "max_rtime_ms") == 0 || strcmp(name, "min_requests") == 0 ||
			   strcmp(name, "max_p99_ms") == 0) {
			if (parse_int64(s, &v) < 0 || v < 0)
				err_node(c, val, "canary.%s: %s is not a non-negative integer", name, cfg_q(c, s));
			else
				json_object_set_new(cn, name, json_integer(v));
		} else {
			err_node(c, key, "unknown canary key %s; known: steps, interval, max_error_rate, max_p99_ms, "
				 "max_rtime_ms, min_requests", cfg_q(c, name));
		}
	}
	return cn;
}

/* An integer key checked by check (deploy.c), or dflt when absent. */
static json_t *parse_deploy_int(struct ctx *c, const yaml_node_t *n, const char *what, int dflt,
				int (*check)(const json_t *v, const char *field, int *out))
{
	json_t *v;
	int x = dflt;

	if (!present(n))
		return json_integer(dflt);
	v = n->type == YAML_SCALAR_NODE ? json_string(sval(n)) : json_null();
	if (check(v, what, &x) < 0)
		err_node(c, n, "%s", ferry_error_last());
	json_decref(v);
	return json_integer(x);
}

/* ---- per step --------------------------------------------------------- */

void cfg_kind_fields(struct ctx *c, size_t i, const struct step_kind *kind,
		     const yaml_node_t *const *keys, const yaml_node_t *const *vals, json_t *js)
{
	const yaml_node_t *v[SK_N] = {NULL};
	/* a kind that takes labels has them, by default in labels.csv */
	bool labels = kind != NULL && (kind->keys & SK_BIT(SK_LABELS)) != 0;
	int sk;

	for (sk = SK_FIRST_KIND_KEY; sk < SK_N; sk++) {
		struct sbuf which = {0};

		if (kind == NULL || !present(vals[sk]) || (kind->keys & SK_BIT(sk)) != 0) {
			v[sk] = vals[sk];
			continue;
		}
		kinds_taking(&which, sk);
		err_node(c, keys[sk], "\"%s\" applies to %s steps; remove it from this %s step",
			 cfg_step_keys[sk], which.p, kind->name);
		free(which.p);
	}
	for (sk = SK_FIRST_KIND_KEY; kind != NULL && sk < SK_N; sk++)
		if ((kind->required & SK_BIT(sk)) != 0 && !present(v[sk]))
			err_node(c, c->steps[i].node, "a %s step needs \"%s\"%s%s%s", kind->name,
				 cfg_step_keys[sk], kind->key_hint[sk] ? " (" : "",
				 kind->key_hint[sk] ? kind->key_hint[sk] : "", kind->key_hint[sk] ? ")" : "");
	json_object_set_new(js, "cache", json_boolean(present(v[SK_CACHE]) &&
						      parse_bool(c, v[SK_CACHE], "cache")));
	json_object_set_new(js, "gate", parse_gate(c, i, v[SK_GATE]));
	json_object_set_new(js, "model", parse_name(c, v[SK_MODEL], "model"));
	if (present(v[SK_MODEL])) /* named, even if wrongly: nothing to infer */
		c->steps[i].prod_gate = NULL;
	json_object_set_new(js, "dataset", parse_string(c, i, v[SK_DATASET], "dataset"));
	json_object_set_new(js, "labels", labels || present(v[SK_LABELS]) ?
			    parse_labels(c, v[SK_LABELS]) : json_null());
	json_object_set_new(js, "webhook", parse_webhook(c, v[SK_WEBHOOK]));
	json_object_set_new(js, "on_timeout", parse_choice(c, v[SK_ON_TIMEOUT], "on_timeout",
							   on_timeout_values,
							   NELEM(on_timeout_values)));
	json_object_set_new(js, "artifact", parse_string(c, i, v[SK_ARTIFACT], "artifact"));
	json_object_set_new(js, "version", parse_choice(c, v[SK_VERSION], "version",
							version_values, NELEM(version_values)));
	json_object_set_new(js, "aliases", parse_aliases(c, v[SK_ALIAS]));
	cfg_monitor_fields(c, v[SK_HANG], v[SK_WATCH], js);
	if (kind == NULL || (kind->keys & SK_BIT(SK_SERVE)) == 0)
		return;
	/* a deploy step's */
	json_object_set_new(js, "serve", parse_serve(c, i, v[SK_SERVE]));
	json_object_set_new(js, "traffic", parse_deploy_int(c, v[SK_TRAFFIC], "traffic", 100, deploy_check_traffic));
	json_object_set_new(js, "replicas", parse_deploy_int(c, v[SK_REPLICAS], "replicas", 1, deploy_check_replicas));
	json_object_set_new(js, "sample", parse_string(c, i, v[SK_SAMPLE], "sample"));
	json_object_set_new(js, "deployment", parse_name(c, v[SK_DEPLOYMENT], "deployment"));
	{
		json_t *a = present(v[SK_AUTO_STOP]) && v[SK_AUTO_STOP]->type == YAML_SCALAR_NODE
				    ? json_string(sval(v[SK_AUTO_STOP])) : NULL;
		int secs = DEPLOY_AUTO_STOP_DEFAULT_S;
		if (present(v[SK_AUTO_STOP]) && deploy_check_auto_stop(a ? a : json_null(), "auto_stop", &secs) < 0)
			err_node(c, v[SK_AUTO_STOP], "%s", ferry_error_last());
		json_decref(a);
		json_object_set_new(js, "load_test", parse_load_test(c, v[SK_LOAD_TEST]));
		json_object_set_new(js, "canary", parse_canary(c, v[SK_CANARY]));
		json_object_set_new(js, "approve", json_boolean(present(v[SK_APPROVE]) &&
								parse_bool(c, v[SK_APPROVE], "approve")));
		/* the setting as written: the hour's length is the daemon's to apply (tests shorten it) */
		json_object_set_new(js, "auto_stop", present(v[SK_AUTO_STOP]) && v[SK_AUTO_STOP]->type == YAML_SCALAR_NODE
							      ? json_string(sval(v[SK_AUTO_STOP])) : json_string("1h"));
	}
}

/* ---- after the graph -------------------------------------------------- */

void cfg_kind_models(struct ctx *c)
{
	struct sbuf found = {0};
	json_t *models;
	size_t i, r, j;
	bool takes_model;

	for (i = 0; i < c->nsteps; i++) {
		const struct step *st = &c->steps[i];

		if (st->prod_gate == NULL || st->kind == NULL ||
		    !json_is_null(json_object_get(st->spec, "model")))
			continue;
		/* the message asks for model: where the kind takes it, else for a kind that does */
		takes_model = (st->kind->keys & SK_BIT(SK_MODEL)) != 0;
		models = json_array();
		for (r = 0; r < c->nsteps; r++) {
			const struct step *reg = &c->steps[r];
			json_t *m = json_object_get(reg->spec, "model");

			if (r == i || reg->kind == NULL || (reg->kind->flags & SKF_REGISTERS) == 0 ||
			    !json_is_string(m) || !cfg_has_up(c, r, i))
				continue;
			for (j = 0; j < json_array_size(models); j++)
				if (json_equal(json_array_get(models, j), m))
					break;
			if (j == json_array_size(models))
				json_array_append(models, m);
		}
		if (json_array_size(models) == 1) {
			json_object_set(st->spec, "model", json_array_get(models, 0));
			json_decref(models);
			continue;
		}
		for (j = 0; j < json_array_size(models); j++)
			cfg_sb_addf(&found, "%s%s", j ? ", " : "",
				    cfg_q(c, json_string_value(json_array_get(models, j))));
		if (json_array_size(models) == 0)
			err_node(c, st->prod_gate, "step %s compares against production, but no "
				 "register step downstream of it names the model; %s",
				 cfg_sname(c, i), takes_model ?
				 "add \"model: NAME\" to this step" :
				 "compare in an evaluate step that has \"model: NAME\"");
		else
			err_node(c, st->prod_gate, "step %s compares against production, but the "
				 "register steps downstream of it register different models (%s); %s",
				 cfg_sname(c, i), found.p, takes_model ?
				 "add \"model: NAME\" to this step to say which" :
				 "compare in an evaluate step that has \"model: NAME\"");
		found.len = 0;
		json_decref(models);
	}
	free(found.p);
}

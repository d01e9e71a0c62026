/*
 * keys_job — the keys of the kinds whose steps run a job (run, train,
 * evaluate; where it runs also for cache and deploy): rows of their key
 * tables through steps/keys.h.
 *
 *   executor:   a row of the executor table (exec.h: local, podman, docker,
 *               slurm, …); absent: the daemon's default (FERRY_EXECUTOR).
 *               An image other than host needs one that runs images.
 *   resources:  {cpus: 1.5, memory: 512Mi, gpus: 1}, each optional: limits
 *               for containers, the request of a Slurm job, what a host
 *               admits; gpus: {count: 1, shared: true} for a GPU others
 *               may share; any other key a count of a host's named
 *               resource (FERRY_RESOURCES=license=2: license: 1)
 *   network:    none (the default for containers) or host
 *   OPTIONS:    an executor's own block (exec.h options_key, e.g. slurm:),
 *               parsed by that executor; only beside it (or the daemon's
 *               default when none is named)
 *   secrets:    [NAME, …]: secrets (`ferryd secret set NAME`) put in the
 *               job's environment under their names when it starts, masked
 *               in its log; names only here (submit refuses one not set)
 *   cache:      keep a success in the step result cache
 *   gate:       METRIC: "OP VALUE" pairs (gate.h), in file order
 *   hang:, watch:  what the job monitor applies (monitor.md), only when
 *               given, normalized, so that the monitor merges them over
 *               the daemon's settings at run time:
 *     hang: off | {period: 30s, periods: 4, window: 2m, confirm: 1m,
 *                  warmup: 5m, variance: 25, low: 10, high: 90, clear: 3,
 *                  cadence: 10, on_hang: notify|restart|fail, phases: {checkpoint: 30m}}
 *       → {"period_ms":…, …, "phases":{"checkpoint":1800000}} (hang_setting)
 *     watch: {METRIC: [RULE | {rule: RULE, action: notify|fail|restart}]}
 *       → {"METRIC":[{"rule":"…","action":"notify"}, …]} (wp_rule_parse)
 *
 * Normalised spec: "executor" (string or null), "resources" ({"cpus":
 * number|null, "memory_mb": int|null, "gpus": int, "gpus_shared": true
 * and "named": {NAME: count} when given, and "admit": false
 * where the executor's own scheduler admits the job (Slurm) or the kind
 * is a service's (deploy: the request is each replica's)} or null), "network"
 * ("none", "host" or null when not given), the options block's (absent
 * when not given), "cache", "gate", "hang" and "watch".
 */
#include "steps/keys.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "monitor/hang.h"
#include "monitor/watchpoints.h"
#include "plan/config.h"
#include "plan/gate.h"
#include "store/store.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const char *const resource_keys[] = {"cpus", "memory", "gpus"};

/* ---- where the job runs --------------------------------------------------- */

int keys_executor(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	const struct exec_type *t = NULL;
	const char *ex = NULL, *image = json_string_value(json_object_get(cfg_key_spec(c), "image"));

	if (present(n) && (ex = cfg_key_text(c, n, "executor")) != NULL && (t = exec_type_find(ex)) == NULL) {
		char *known = exec_type_names();
		cfg_key_err(c, n, "unknown executor %s; known executors: %s", cfg_key_q(c, ex), known);
		free(known);
		ex = NULL;
	}
	if (t != NULL && image != NULL && strcmp(image, "host") != 0 && (t->flags & EXF_IMAGES) == 0)
		cfg_key_err(c, cfg_key_value(c, "image"), "image %s: executor %s runs commands on the host; an "
			    "image needs an executor that runs images (podman, docker, slurm)",
			    cfg_key_q(c, image), t->name);
	*out = ex ? json_string(ex) : json_null();
	return 0;
}

/* A number in n within [lo, hi]; NAN after an error. */
static double number_field(struct cfg_key_ctx *c, const yaml_node_t *n, const char *what, double lo, double hi,
			   int whole)
{
	const char *s = cfg_key_text(c, n, what);
	char *end = NULL;
	double v;

	if (s == NULL)
		return NAN;
	v = strtod(s, &end);
	if (*s == '\0' || *end != '\0' || !(v >= lo && v <= hi) || (whole && v != floor(v))) {
		cfg_key_err(c, n, "%s %s must be a %s from %g to %g", what, cfg_key_q(c, s),
			 whole ? "whole number" : "number", lo, hi);
		return NAN;
	}
	return v;
}

/* A name of the host's resources (FERRY_RESOURCES): a letter, then letters, digits, _ . - / (64 at most). */
static int named_resource_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 64 || !isalpha((unsigned char)s[0]))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && strchr("_.-/", s[i]) == NULL)
			return 0;
	return 1;
}

/* gpus: N, or {count: N, shared: true} (a GPU other shared requests may use too); the count, NAN after an error. */
static double parse_gpus(struct cfg_key_ctx *c, const yaml_node_t *n, int *shared)
{
	static const char *const keys[] = {"count", "shared"};
	const yaml_node_t *v[NELEM(keys)] = {NULL};
	double count = 1;
	json_t *b;

	*shared = 0;
	if (n->type != YAML_MAPPING_NODE)
		return number_field(c, n, "resources gpus", 0, 64, 1);
	if (!cfg_key_map_fields(c, n, "resources gpus", keys, NELEM(keys), v))
		return NAN;
	if (present(v[0]) && isnan(count = number_field(c, v[0], "resources gpus count", 0, 64, 1)))
		return NAN;
	if (present(v[1]) && (b = keys_bool(c, v[1], "resources gpus shared")) != NULL) {
		*shared = json_is_true(b);
		json_decref(b);
	}
	return count;
}

/*
 * resources: {cpus, memory, gpus} and any named resource of the hosts
 * (FERRY_RESOURCES=license=2 offers "license: 1"): a whole count each,
 * under "named" in the spec. A name no host offers is refused at submit
 * (runs.c); one that looks like a misspelt builtin is refused here.
 */
static json_t *parse_resources(struct cfg_key_ctx *c, const yaml_node_t *n)
{
	static const char *const near[][2] = {{"cpu", "cpus"}, {"gpu", "gpus"}, {"mem", "memory"},
					      {"memory_mb", "memory"}, {"ram", "memory"}, {"vcpus", "cpus"}};
	const yaml_node_t *key, *val;
	json_t *r, *named = NULL;
	double cpus = NAN, gpus = 0;
	int64_t mb = -1;
	int shared = 0;
	size_t k = 0;

	if (!present(n))
		return json_null();
	if (n->type != YAML_MAPPING_NODE) {
		cfg_key_err(c, n, "resources must be a mapping such as {cpus: 2, memory: 4Gi, gpus: 1}");
		return json_null();
	}
	while (cfg_key_next_pair(c, n, &k, &key, &val)) {
		const char *name = cfg_key_text(c, key, "a resource name"), *s;
		double v;
		if (name == NULL)
			continue;
		if (strcmp(name, resource_keys[0]) == 0) {
			cpus = number_field(c, val, "resources cpus", 0.01, 1024, 0);
		} else if (strcmp(name, resource_keys[1]) == 0) {
			if ((s = cfg_key_text(c, val, "resources memory")) != NULL && (mb = cfg_memory_mb(s)) < 0)
				cfg_key_err(c, val, "resources memory %s must be a size such as 512Mi, 2Gi or 1G",
					    cfg_key_q(c, s));
		} else if (strcmp(name, resource_keys[2]) == 0) {
			if (isnan(gpus = parse_gpus(c, val, &shared)))
				gpus = 0;
		} else {
			size_t i;
			for (i = 0; i < NELEM(near) && strcmp(name, near[i][0]) != 0; i++)
				;
			if (i < NELEM(near)) {
				cfg_key_err(c, key, "unknown resources key %s (did you mean \"%s\"?); known keys: cpus, "
					    "memory, gpus, or a named resource of the hosts (FERRY_RESOURCES)",
					    cfg_key_q(c, name), near[i][1]);
				continue;
			}
			if (!named_resource_ok(name)) {
				cfg_key_err(c, key, "resource name %s must start with a letter and hold only letters, "
					    "digits, _ . - / (64 at most)", cfg_key_q(c, name));
				continue;
			}
			/* a count of one of the hosts' named resources (FERRY_RESOURCES) */
			v = number_field(c, val, "a named resource's count", 0, 100000, 1);
			if (isnan(v) || v == 0)
				continue;
			if (named == NULL)
				named = json_object();
			json_object_set_new(named, name, json_integer((json_int_t)v));
		}
	}
	r = json_object();
	json_object_set_new(r, "cpus", isnan(cpus) ? json_null() : json_real(cpus));
	json_object_set_new(r, "memory_mb", mb < 0 ? json_null() : json_integer(mb));
	json_object_set_new(r, "gpus", json_integer((json_int_t)gpus));
	if (shared && gpus > 0)
		json_object_set_new(r, "gpus_shared", json_true());
	if (named)
		json_object_set_new(r, "named", named);
	return r;
}

int keys_resources(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	/* parsed after executor: (the table's order) */
	const struct exec_type *t = exec_type_find(json_string_value(json_object_get(cfg_key_spec(c), "executor")));

	const struct step_kind *k = cfg_key_kind(c);

	*out = parse_resources(c, n);
	/*
	 * an executor whose own scheduler admits its jobs (Slurm): the request is its, not the fleet's (issue 30);
	 * a service kind's (deploy): what each of its replicas asks for — placement's room, and the room a
	 * host admits jobs into less theirs —, not the step's own (the daemon's work, on a worker thread)
	 */
	if (json_is_object(*out) && ((t != NULL && (t->flags & EXF_ADMITS)) || (k != NULL && (k->flags & SKF_SERVICE))))
		json_object_set_new(*out, "admit", json_false());
	return 0;
}

int keys_network(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	const char *net = NULL;

	if (present(n) && (net = cfg_key_text(c, n, "network")) != NULL && strcmp(net, "none") != 0 &&
	    strcmp(net, "host") != 0) {
		cfg_key_err(c, n, "network %s must be none or host", cfg_key_q(c, net));
		net = NULL;
	}
	*out = net ? json_string(net) : json_null();
	return 0;
}

const char *keys_exec_options_name(size_t i)
{
	const struct exec_type *t;

	for (size_t k = 0; (t = exec_type_at(k)) != NULL; k++)
		if (t->options_key != NULL && i-- == 0)
			return t->options_key;
	return NULL;
}

/* The options block of the executor that owns it, only beside that executor (or none named). */
int keys_exec_options(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	const char *key = cfg_key_name(c);
	const char *ex = json_string_value(json_object_get(cfg_key_spec(c), "executor"));
	const struct exec_type *t, *owner = NULL;

	*out = NULL;
	if (!present(n)) /* absent: no field, so specs without it read as before */
		return 0;
	for (size_t k = 0; (t = exec_type_at(k)) != NULL && owner == NULL; k++)
		if (t->options_key != NULL && strcmp(t->options_key, key) == 0)
			owner = t;
	if (owner == NULL || owner->options_parse == NULL)
		return 0;
	if (ex != NULL && strcmp(ex, owner->name) != 0) {
		cfg_key_err(c, n, "%s: applies to executor: %s, not %s; remove it or set executor: %s", key,
			    owner->name, cfg_key_q(c, ex), owner->name);
		*out = json_null();
		return 0;
	}
	return owner->options_parse(c, n, out);
}

/* ---- warm starts ------------------------------------------------------------ */

static const char *const warm_keys[] = {"python", "preload"};

/* A dotted module name: identifiers joined by dots (data, never code: the server imports it by name). */
static int module_name_ok(const char *s)
{
	int start = 1;

	if (*s == '\0' || strlen(s) > 200)
		return 0;
	for (; *s; s++) {
		if (*s == '.') {
			if (start)
				return 0;
			start = 1;
		} else if (isalpha((unsigned char)*s) || *s == '_' || (!start && isdigit((unsigned char)*s))) {
			start = 0;
		} else {
			return 0;
		}
	}
	return !start;
}

/*
 * warm: {python: /usr/bin/python3, preload: [numpy, sklearn.svm]} — start
 * the job as a fork of a server that imported those (exec/exec_warm.c); local
 * executor only. Normalised {"python": PATH, "preload": [NAME, …]}; a
 * field only when given.
 */
int keys_warm(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	const yaml_node_t *v[NELEM(warm_keys)] = {NULL}, *it;
	const char *ex = json_string_value(json_object_get(cfg_key_spec(c), "executor")), *py = "/usr/bin/python3";
	json_t *mods;
	size_t k = 0;

	*out = NULL;
	if (!present(n))
		return 0;
	if (ex != NULL && strcmp(ex, "local") != 0) {
		cfg_key_err(c, n, "warm: applies to executor: local, not %s (a warm server runs on the host)",
			    cfg_key_q(c, ex));
		return 0;
	}
	if (!cfg_key_map_fields(c, n, "warm", warm_keys, NELEM(warm_keys), v))
		return 0;
	if (present(v[0]) && (py = cfg_key_text(c, v[0], "warm python")) != NULL && py[0] != '/') {
		cfg_key_err(c, v[0], "warm python %s must be an absolute path (the interpreter the command runs)",
			    cfg_key_q(c, py));
		return 0;
	}
	if (py == NULL)
		return 0;
	mods = json_array();
	if (!present(v[1])) {
		cfg_key_err(c, n, "warm needs preload: the modules to import once, e.g. [numpy, sklearn.svm]");
	} else {
		while (cfg_key_next_item(c, v[1], &k, &it)) {
			const char *m = cfg_key_text(c, it, "warm preload");
			if (m == NULL)
				continue;
			if (!module_name_ok(m))
				cfg_key_err(c, it, "warm preload %s must be a module name such as sklearn.svm",
					    cfg_key_q(c, m));
			else
				json_array_append_new(mods, json_string(m));
		}
	}
	*out = json_pack("{s:s, s:o}", "python", py, "preload", mods);
	return 0;
}

/* ---- secrets ---------------------------------------------------------------- */

/* secrets: a list of names, each an environment name not in env:, on an executor that masks them. */
int keys_secrets(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	const json_t *spec = cfg_key_spec(c);
	json_t *names = json_array();
	const char *ex = json_string_value(json_object_get(spec, "executor"));
	const struct exec_type *t = ex ? exec_type_find(ex) : NULL;
	const yaml_node_t *it;
	const char *name;
	size_t k = 0;

	*out = NULL;
	if (!present(n)) { /* absent: no field */
		json_decref(names);
		return 0;
	}
	*out = names;
	if (n->type != YAML_SEQUENCE_NODE) {
		cfg_key_err(c, n, "secrets must be a list of secret names (e.g. [HF_TOKEN, DB_PASSWORD]), not a %s",
			    ntype(n));
		return 0;
	}
	if (t != NULL && (t->flags & EXF_SECRETS) == 0) {
		char *ok = exec_type_names_with(EXF_SECRETS, " or ");
		cfg_key_err(c, n, "secrets: executor %s cannot mask them in its log; use %s", t->name, ok);
		free(ok);
	}
	while (cfg_key_next_item(c, n, &k, &it)) {
		if ((name = cfg_key_text(c, it, "a secret name")) == NULL)
			continue;
		if (!store_secret_name_ok(name))
			cfg_key_err(c, it, "secret name %s is not valid: letters, digits and _, not starting with a "
				    "digit or FERRY_ (it is the job's environment variable)", cfg_key_q(c, name));
		else if (json_object_get(json_object_get(spec, "env"), name) != NULL)
			cfg_key_err(c, it, "%s is in env: too; a secret is its own variable, remove it from env:",
				    cfg_key_q(c, name));
		else {
			size_t i;
			json_t *v;
			int dup = 0;
			json_array_foreach(names, i, v)
				dup |= strcmp(json_string_value(v), name) == 0;
			if (dup)
				cfg_key_err(c, it, "secret %s is listed twice", cfg_key_q(c, name));
			else
				json_array_append_new(names, json_string(name));
		}
	}
	return 0;
}

/* ---- cache and gate --------------------------------------------------------- */

int keys_cache(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = keys_bool(c, n, "cache");
	return 0;
}

/* on_fail: fail (the default: the step fails, and its run) or skip (the step and what needs it are skipped). */
int keys_on_fail(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	static const char *const values[] = {"fail", "skip"};

	*out = NULL;
	if (!present(n))
		return 0; /* a field only when given */
	if (!present(cfg_key_value(c, "gate")))
		cfg_key_err(c, n, "on_fail says what a failed gate does; this step has no gate");
	*out = keys_choice(c, n, "on_fail", values, 2);
	return 0;
}

/* gate: METRIC: "OP VALUE" pairs, in file order, as gate_parse() items. */
int keys_gate(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	json_t *arr = json_array(), *item;
	const yaml_node_t *key, *val;
	const char *metric, *expr;
	size_t k = 0;

	*out = arr;
	if (!present(n))
		return 0;
	if (n->type != YAML_MAPPING_NODE) {
		cfg_key_err(c, n, "gate must be a mapping of METRIC: \"OP VALUE\" (e.g. accuracy: "
			    "\">= 0.9\"), not a %s", ntype(n));
		return 0;
	}
	while (cfg_key_next_pair(c, n, &k, &key, &val)) {
		if ((metric = cfg_key_text(c, key, "a gate metric name")) == NULL ||
		    (expr = cfg_key_text(c, val, "a gate comparison")) == NULL)
			continue;
		if (gate_parse(&item, metric, expr) < 0) {
			cfg_key_err(c, metrics_name_ok(metric) ? val : key, "%s", ferry_error_last());
			continue;
		}
		if (json_is_true(json_object_get(item, "production")))
			cfg_key_production(c, val);
		json_array_append_new(arr, item);
	}
	return 0;
}

/* ---- the monitor's ------------------------------------------------------------ */

static json_t *parse_hang(struct cfg_key_ctx *c, const yaml_node_t *n)
{
	json_t *obj = json_object();
	const yaml_node_t *key, *val, *pk, *pv;
	const char *name, *s;
	size_t k = 0, j;

	if (n->type == YAML_SCALAR_NODE) {
		s = sval(n);
		if (strcmp(s, "off") == 0 || strcmp(s, "false") == 0) {
			json_object_set_new(obj, "enabled", json_false());
			return obj;
		}
		cfg_key_err(c, n, "hang must be off or a mapping of settings (period, periods, window, confirm, "
			 "warmup, on_hang, …), not %s", cfg_key_q(c, s));
		return obj;
	}
	if (n->type != YAML_MAPPING_NODE) {
		cfg_key_err(c, n, "hang must be off or a mapping of settings, not a %s", ntype(n));
		return obj;
	}
	while (cfg_key_next_pair(c, n, &k, &key, &val)) {
		if ((name = cfg_key_text(c, key, "a hang setting")) == NULL)
			continue;
		if (strcmp(name, "phases") == 0) {
			if (val->type != YAML_MAPPING_NODE) {
				cfg_key_err(c, val, "hang phases must be a mapping of phase names to durations "
					 "(checkpoint: 30m)");
				continue;
			}
			j = 0;
			while (cfg_key_next_pair(c, val, &j, &pk, &pv)) {
				const char *ph = cfg_key_text(c, pk, "a phase name"), *d = cfg_key_text(c, pv, "a phase's allowance");
				char *full;
				if (ph == NULL || d == NULL)
					continue;
				full = xasprintf("phase.%s", ph);
				if (hang_setting(obj, full, d) < 0)
					cfg_key_err(c, pv, "%s", ferry_error_last());
				free(full);
			}
			continue;
		}
		if ((s = cfg_key_text(c, val, name)) == NULL)
			continue;
		if (hang_setting(obj, name, s) < 0)
			cfg_key_err(c, strncmp(ferry_error_last(), "hang has no setting", 19) == 0 ? key : val, "%s",
				 ferry_error_last());
	}
	return obj;
}

/* One watch rule: a string, or {rule, action}. */
static json_t *parse_rule(struct cfg_key_ctx *c, const char *metric, const yaml_node_t *n)
{
	const yaml_node_t *key, *val, *rn = NULL;
	const char *rule = NULL, *action = "notify", *name;
	size_t k = 0;

	if (n->type == YAML_MAPPING_NODE) {
		while (cfg_key_next_pair(c, n, &k, &key, &val)) {
			if ((name = cfg_key_text(c, key, "a watch rule key")) == NULL)
				continue;
			if (strcmp(name, "rule") == 0) {
				rule = cfg_key_text(c, val, "watch rule");
				rn = val;
			} else if (strcmp(name, "action") == 0) {
				if ((action = cfg_key_text(c, val, "watch action")) != NULL && wp_action_parse(action) < 0)
					cfg_key_err(c, val, "watch action %s is not valid; use notify, fail or restart",
						 cfg_key_q(c, action));
			} else {
				cfg_key_err(c, key, "a watch rule has rule and action, not %s", cfg_key_q(c, name));
			}
		}
		if (rule == NULL) {
			cfg_key_err(c, n, "a watch rule of %s needs \"rule\" (nan_or_inf, \"> 10 * min\", …)",
				 cfg_key_q(c, metric));
			return NULL;
		}
	} else if ((rule = cfg_key_text(c, n, "watch rule")) == NULL) {
		return NULL;
	} else {
		rn = n;
	}
	if (wp_rule_parse(rule, NULL) < 0) {
		cfg_key_err(c, rn, "%s (watching %s)", ferry_error_last(), cfg_key_q(c, metric));
		return NULL;
	}
	return json_pack("{s:s,s:s}", "rule", rule, "action", action ? action : "notify");
}

static json_t *parse_watch(struct cfg_key_ctx *c, const yaml_node_t *n)
{
	json_t *obj = json_object();
	const yaml_node_t *key, *val, *it;
	const char *metric;
	size_t k = 0, j;

	if (n->type != YAML_MAPPING_NODE) {
		cfg_key_err(c, n, "watch must be a mapping of metric names to rules (loss: [nan_or_inf])");
		return obj;
	}
	while (cfg_key_next_pair(c, n, &k, &key, &val)) {
		json_t *rules = json_array(), *r;
		if ((metric = cfg_key_text(c, key, "a metric name")) == NULL) {
			json_decref(rules);
			continue;
		}
		j = 0;
		if (val->type == YAML_MAPPING_NODE) { /* one rule written as a mapping */
			if ((r = parse_rule(c, metric, val)) != NULL)
				json_array_append_new(rules, r);
		} else {
			while (cfg_key_next_item(c, val, &j, &it))
				if ((r = parse_rule(c, metric, it)) != NULL)
					json_array_append_new(rules, r);
		}
		json_object_set_new(obj, metric, rules);
	}
	return obj;
}

int keys_hang(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = present(n) ? parse_hang(c, n) : NULL;
	return 0;
}

int keys_watch(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = present(n) ? parse_watch(c, n) : NULL;
	return 0;
}

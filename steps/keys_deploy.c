/*
 * keys_deploy — the keys of a deploy step (kind_deploy.c runs it): a row
 * each in deploy_keys, parsed into the step's normalised spec.
 *
 *   serve:        the model server's command (a list; templates checked)
 *   traffic:      its share at the end, 0..100 (default 100)
 *   replicas:     1..DEPLOY_MAX_REPLICAS (default 1)
 *   sample:       a request file (JSON) for probes, load tests and a
 *                 canary's own traffic; inside the workflow's directory
 *   deployment:   the deployment's name (default: the model's)
 *   auto_stop:    a duration or never (default 1h), kept as written
 *   retire_after: a duration or never; absent, the deployment's stays
 *   load_test:    levels and thresholds before traffic moves (loadtest.h)
 *   canary:       steps (or step_weight/max_weight), interval, checks,
 *                 threshold, max_wait and traffic {rate, requests}; or,
 *                 an A/B test, match {header, value} and iterations
 *   approve:      wait for a person before traffic moves
 *
 * May include what steps/ may (its README); adding a key is a parser here
 * and a row in deploy_keys, its use in kind_deploy.c.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "lib/durations.h"
#include "plan/deploy.h"
#include "deploy/loadtest.h"
#include "steps/keys.h"
#include "lib/util.h"

/* serve: the model server's command, a list of strings (templates checked), or null. */
static json_t *parse_serve(struct cfg_key_ctx *c, const yaml_node_t *n)
{
	json_t *arr;
	const yaml_node_t *it;
	const char *s;
	size_t k = 0;

	if (!present(n))
		return json_null();
	arr = json_array();
	if (n->type != YAML_SEQUENCE_NODE || nitems(n) == 0) {
		cfg_key_err(c, n, "serve must be a non-empty list of strings: the model server's command "
			 "(it gets FERRY_PORT, FERRY_MODEL_PATH and FERRY_MODEL_NAME)");
		return arr;
	}
	while (cfg_key_next_item(c, n, &k, &it)) {
		if ((s = cfg_key_text(c, it, "a serve item")) == NULL)
			continue;
		cfg_key_templates(c, it, s);
		json_array_append_new(arr, json_string(s));
	}
	return arr;
}

/* A list of integers lo..hi (levels, canary steps) into a JSON array; NULL after an error. */
static json_t *int_list(struct cfg_key_ctx *c, const yaml_node_t *n, const char *what, int64_t lo, int64_t hi)
{
	json_t *arr = json_array();
	const yaml_node_t *it;
	const char *s;
	size_t k = 0;
	int64_t v;

	if (n->type != YAML_SEQUENCE_NODE || nitems(n) == 0) {
		cfg_key_err(c, n, "%s must be a non-empty list of integers from %lld to %lld", what, (long long)lo,
			 (long long)hi);
		json_decref(arr);
		return NULL;
	}
	while (cfg_key_next_item(c, n, &k, &it)) {
		if ((s = cfg_key_text(c, it, what)) == NULL)
			continue;
		if (parse_int64(s, &v) < 0 || v < lo || v > hi) {
			cfg_key_err(c, it, "%s: %s is not an integer from %lld to %lld", what, cfg_key_q(c, s), (long long)lo,
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
static json_t *parse_load_test(struct cfg_key_ctx *c, const yaml_node_t *n)
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
		cfg_key_err(c, n, "load_test must be a mapping: levels, requests and thresholds such as "
			 "p99_ms: \"< 50\", error_rate: \"< 0.1%%\"");
		json_decref(th);
		return lt;
	}
	while (cfg_key_next_pair(c, n, &k, &key, &val)) {
		if ((name = cfg_key_text(c, key, "a load_test key")) == NULL)
			continue;
		if (strcmp(name, "levels") == 0) {
			json_t *l = int_list(c, val, "load_test.levels", 1, LOADTEST_MAX_CONCURRENCY);
			if (l)
				json_object_set_new(lt, "levels", l);
		} else if (strcmp(name, "requests") == 0) {
			if ((s = cfg_key_text(c, val, "load_test.requests")) == NULL)
				continue;
			if (parse_int64(s, &v) < 0 || v < 1 || v > LOADTEST_MAX_REQUESTS)
				cfg_key_err(c, val, "load_test.requests: %s is not an integer from 1 to %d", cfg_key_q(c, s),
					 LOADTEST_MAX_REQUESTS);
			else
				json_object_set_new(lt, "requests", json_integer(v));
		} else if (val->type == YAML_SEQUENCE_NODE) {
			json_t *arr = json_array();
			j = 0;
			while (cfg_key_next_item(c, val, &j, &it))
				if ((s = cfg_key_text(c, it, "a load_test comparison")) != NULL)
					json_array_append_new(arr, json_string(s));
			json_object_set_new(th, name, arr);
		} else if ((s = cfg_key_text(c, val, "a load_test comparison")) != NULL) {
			json_object_set_new(th, name, json_string(s));
		}
	}
	if (loadtest_thresholds_check(th) < 0)
		cfg_key_err(c, n, "load_test: %s", ferry_error_last());
	json_object_set_new(lt, "thresholds", th);
	return lt;
}

/*
 * canary: {steps: [10, 50, 100], interval: 2m, max_error_rate: 1%,
 * max_p99_ms: 200, max_rtime_ms: 100, min_requests: 50}: traffic grows step
 * by step, each judged from HAProxy's counters over the interval and a
 * probe of the canary's replicas (kind_deploy.c).
 */
/* 1-64 letters, digits and the characters of extra: what HAProxy's config takes unquoted (haproxy.c). */
static int match_token(const char *s, const char *extra)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (!isalnum((unsigned char)s[n]) && strchr(extra, s[n]) == NULL)
			return 0;
	return n >= 1 && n <= 64;
}

static json_t *parse_canary(struct cfg_key_ctx *c, const yaml_node_t *n)
{
	json_t *cn = json_pack("{s:[i,i,i], s:I, s:f, s:n, s:i, s:i}", "steps", 10, 50, 100, "interval_ms",
			       (json_int_t)120000, "max_error_rate", 0.01, "max_rtime_ms", "min_requests", 20,
			       "threshold", 1);
	int64_t step_weight = 0, max_weight = 50;
	const yaml_node_t *steps_node = NULL, *sw_node = NULL, *match_node = NULL;
	const yaml_node_t *key, *val;
	const char *name, *s;
	size_t k = 0;
	int64_t v;

	if (!present(n)) {
		json_decref(cn);
		return json_null();
	}
	if (n->type != YAML_MAPPING_NODE) {
		cfg_key_err(c, n, "canary must be a mapping: steps (or step_weight, max_weight), interval, "
			 "max_error_rate (or min_success_rate), max_p99_ms, max_rtime_ms, min_requests, max_wait, threshold, traffic, "
			 "match and iterations (an A/B test)");
		return cn;
	}
	while (cfg_key_next_pair(c, n, &k, &key, &val)) {
		if ((name = cfg_key_text(c, key, "a canary key")) == NULL)
			continue;
		if (strcmp(name, "steps") == 0) {
			json_t *l = int_list(c, val, "canary.steps", 1, 100);
			if (l)
				json_object_set_new(cn, "steps", l);
			steps_node = val;
			continue;
		}
		if (strcmp(name, "match") == 0) {
			/* match: {header: X-Canary, value: insider}: an A/B test (kind_deploy.c's ab_test) */
			static const char *const mkeys[] = {"header", "value"};
			const yaml_node_t *mv[2] = {NULL, NULL};
			const char *h = NULL, *mval = NULL;
			match_node = val;
			if (!cfg_key_map_fields(c, val, "canary.match", mkeys, 2, mv))
				continue;
			if (!present(mv[0]) || (h = cfg_key_text(c, mv[0], "canary.match.header")) == NULL) {
				cfg_key_err(c, val, "canary.match needs a header: {header: X-Canary, value: insider}");
				continue;
			}
			if (!match_token(h, "-")) {
				cfg_key_err(c, mv[0], "canary.match.header %s is not a header name (1-64 of letters, "
					    "digits and -)", cfg_key_q(c, h));
				continue;
			}
			if (present(mv[1]) && ((mval = cfg_key_text(c, mv[1], "canary.match.value")) == NULL ||
					       !match_token(mval, "._~-"))) {
				if (mval)
					cfg_key_err(c, mv[1], "canary.match.value %s: 1-64 of letters, digits and . _ ~ - "
						    "(it is matched exactly)", cfg_key_q(c, mval));
				continue;
			}
			json_object_set_new(cn, "match_header", json_string(h));
			if (mval)
				json_object_set_new(cn, "match_value", json_string(mval));
			continue;
		}
		if (strcmp(name, "traffic") == 0) {
			/* traffic: {rate: 20/s, requests: FILE}: the step sends the sample (or the recorded
			 * requests of FILE) itself: no outside clients needed */
			const yaml_node_t *tk, *tv;
			size_t tk_i = 0;
			if (val->type != YAML_MAPPING_NODE) {
				cfg_key_err(c, val, "canary.traffic must be a mapping: {rate: 20/s, requests: FILE}");
				continue;
			}
			while (cfg_key_next_pair(c, val, &tk_i, &tk, &tv)) {
				const char *tn = cfg_key_text(c, tk, "a canary.traffic key"), *ts;
				char *end;
				double rate;
				if (tn == NULL || (ts = cfg_key_text(c, tv, tn)) == NULL)
					continue;
				if (strcmp(tn, "requests") == 0) {
					/* recorded request bodies, one JSON document a line; read when the step runs */
					json_object_set_new(cn, "traffic_requests", json_string(ts));
					if (json_object_get(cn, "traffic_rps") == NULL)
						json_object_set_new(cn, "traffic_rps", json_real(20));
					continue;
				}
				if (strcmp(tn, "rate") != 0) {
					cfg_key_err(c, tk, "unknown canary.traffic key %s; known: rate, requests", cfg_key_q(c, tn));
					continue;
				}
				rate = strtod(ts, &end);
				if (end == ts || (*end != '\0' && strcmp(end, "/s") != 0) || !(rate > 0) || rate > 1000)
					cfg_key_err(c, tv, "canary.traffic.rate: %s is not a rate from 0 to 1000 requests a "
						    "second (e.g. 20/s)", cfg_key_q(c, ts));
				else
					json_object_set_new(cn, "traffic_rps", json_real(rate));
			}
			continue;
		}
		if ((s = cfg_key_text(c, val, name)) == NULL)
			continue;
		if (strcmp(name, "interval") == 0) {
			if (duration_parse(s, &v) < 0 || v < 100)
				cfg_key_err(c, val, "canary.interval: %s is not a duration (e.g. 30s, 2m)", cfg_key_q(c, s));
			else
				json_object_set_new(cn, "interval_ms", json_integer(v));
		} else if (strcmp(name, "max_wait") == 0) {
			/* how long a step waits for min_requests (absent: the interval and three more) */
			if (duration_parse(s, &v) < 0 || v < 100)
				cfg_key_err(c, val, "canary.max_wait: %s is not a duration (e.g. 10m)", cfg_key_q(c, s));
			else
				json_object_set_new(cn, "max_wait_ms", json_integer(v));
		} else if (strcmp(name, "max_error_rate") == 0) {
			char *end;
			double x = strtod(s, &end);
			if (end == s || (*end != '\0' && strcmp(end, "%") != 0) || x < 0 || x > 100)
				cfg_key_err(c, val, "canary.max_error_rate: %s is not a percentage (e.g. 1%%)", cfg_key_q(c, s));
			else
				json_object_set_new(cn, "max_error_rate", json_real(*end == '%' ? x / 100 : x));
		} else if (strcmp(name, "min_success_rate") == 0) {
			/* Flagger's request-success-rate: the same check as max_error_rate, written the other way */
			char *end;
			double x = strtod(s, &end);
			if (end == s || (*end != '\0' && strcmp(end, "%") != 0) || x < 0 || x > 100 ||
			    (*end != '%' && x > 1))
				cfg_key_err(c, val, "canary.min_success_rate: %s is not a percentage (e.g. 99%%)", cfg_key_q(c, s));
			else
				json_object_set_new(cn, "max_error_rate", json_real(1 - (*end == '%' ? x / 100 : x)));
		} else if (strcmp(name, "step_weight") == 0 || strcmp(name, "max_weight") == 0 ||
			   strcmp(name, "threshold") == 0 || strcmp(name, "iterations") == 0) {
			int64_t lo = 1, hi = strcmp(name, "threshold") == 0 ? 20 : strcmp(name, "iterations") == 0 ? 100 : 99;
			if (parse_int64(s, &v) < 0 || v < lo || v > hi)
				cfg_key_err(c, val, "canary.%s: %s is not an integer from %lld to %lld", name, cfg_key_q(c, s),
					    (long long)lo, (long long)hi);
			else if (strcmp(name, "threshold") == 0 || strcmp(name, "iterations") == 0)
				json_object_set_new(cn, name, json_integer(v));
			else if (strcmp(name, "step_weight") == 0)
				step_weight = v, sw_node = val;
			else
				max_weight = v;
		} else if (strcmp(name, "max_rtime_ms") == 0 || strcmp(name, "min_requests") == 0 ||
			   strcmp(name, "max_p99_ms") == 0) {
			if (parse_int64(s, &v) < 0 || v < 0)
				cfg_key_err(c, val, "canary.%s: %s is not a non-negative integer", name, cfg_key_q(c, s));
			else
				json_object_set_new(cn, name, json_integer(v));
		} else {
			cfg_key_err(c, key, "unknown canary key %s; known: steps (or step_weight and max_weight), interval, "
				 "max_error_rate (or min_success_rate), max_p99_ms, max_rtime_ms, min_requests, "
				 "max_wait, threshold, traffic, match, iterations", cfg_key_q(c, name));
		}
	}
	if (match_node != NULL) {
		/* an A/B test: the matching requests for `iterations` intervals, then all; no steps */
		if (steps_node != NULL || step_weight > 0)
			cfg_key_err(c, match_node, "canary.match (an A/B test) takes iterations, not steps or step_weight");
		if (json_object_get(cn, "iterations") == NULL)
			json_object_set_new(cn, "iterations", json_integer(3));
		json_object_set_new(cn, "steps", json_pack("[i]", 100));
	} else if (json_object_get(cn, "iterations") != NULL) {
		cfg_key_err(c, n, "canary.iterations goes with match (an A/B test); a canary by weight takes steps");
	}
	if (step_weight > 0 && match_node == NULL) {
		/* Flagger's stepWeight/maxWeight: step_weight, 2 × step_weight, … up to max_weight, then 100 */
		json_t *l = json_array();
		if (steps_node != NULL)
			cfg_key_err(c, sw_node, "canary: give steps or step_weight (with max_weight), not both");
		for (int64_t w = step_weight; w <= max_weight && w < 100; w += step_weight)
			json_array_append_new(l, json_integer(w));
		json_array_append_new(l, json_integer(100));
		json_object_set_new(cn, "steps", l);
	}
	return cn;
}

/* An integer key checked by check (deploy.c), or dflt when absent. */
static json_t *parse_deploy_int(struct cfg_key_ctx *c, const yaml_node_t *n, const char *what, int dflt,
				int (*check)(const json_t *v, const char *field, int *out))
{
	json_t *v;
	int x = dflt;

	if (!present(n))
		return json_integer(dflt);
	v = n->type == YAML_SCALAR_NODE ? json_string(sval(n)) : json_null();
	if (check(v, what, &x) < 0)
		cfg_key_err(c, n, "%s", ferry_error_last());
	json_decref(v);
	return json_integer(x);
}

static int keys_serve(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = parse_serve(c, n);
	return 0;
}

static int keys_traffic(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = parse_deploy_int(c, n, "traffic", 100, deploy_check_traffic);
	return 0;
}

static int keys_replicas(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = parse_deploy_int(c, n, "replicas", 1, deploy_check_replicas);
	return 0;
}

static int keys_sample(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = keys_string(c, n, "sample", 1);
	return 0;
}

static int keys_deployment(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = keys_name(c, n, "deployment");
	return 0;
}

/* auto_stop: checked, and kept as written: the hour's length is the daemon's to apply (tests shorten it). */
static int keys_auto_stop(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	json_t *a = present(n) && n->type == YAML_SCALAR_NODE ? json_string(sval(n)) : NULL;
	int secs = DEPLOY_AUTO_STOP_DEFAULT_S;

	if (present(n) && deploy_check_auto_stop(a ? a : json_null(), "auto_stop", &secs) < 0)
		cfg_key_err(c, n, "%s", ferry_error_last());
	*out = a ? a : json_string("1h");
	return 0;
}

/* retire_after: a duration or never, checked, kept as written (absent: the deployment's stays) */
static int keys_retire_after(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	json_t *a = present(n) && n->type == YAML_SCALAR_NODE ? json_string(sval(n)) : NULL;
	int secs;

	*out = NULL;
	if (!present(n))
		return 0;
	if (deploy_check_retire_after(a ? a : json_null(), "retire_after", &secs) < 0)
		cfg_key_err(c, n, "%s", ferry_error_last());
	*out = a ? a : json_null();
	return 0;
}

static int keys_load_test(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = parse_load_test(c, n);
	return 0;
}

static int keys_canary(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = parse_canary(c, n);
	return 0;
}

static int keys_approve(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = keys_bool(c, n, "approve");
	return 0;
}

/*
 * placement: {hosts: {LABEL: VALUE, …}}: the replicas go only to hosts
 * whose FERRY_HOST_LABELS hold every pair (deploy/fleet.c); a value is a
 * label's text (gpu: true is the label "true").
 */
static int keys_placement(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	static const char *const pkeys[] = {"hosts"};
	const yaml_node_t *pv[1] = {NULL}, *key, *val;
	json_t *hosts = json_object();
	size_t k = 0;

	*out = NULL;
	if (!present(n)) {
		json_decref(hosts);
		return 0;
	}
	if (!cfg_key_map_fields(c, n, "placement", pkeys, 1, pv) || !present(pv[0])) {
		if (!present(pv[0]))
			cfg_key_err(c, n, "placement needs hosts: the labels a host must have, e.g. {hosts: {gpu: \"true\"}}");
		json_decref(hosts);
		return 0;
	}
	if (pv[0]->type != YAML_MAPPING_NODE) {
		cfg_key_err(c, pv[0], "placement.hosts must be a mapping of host labels, e.g. {gpu: \"true\", zone: eu-1}");
		json_decref(hosts);
		return 0;
	}
	while (cfg_key_next_pair(c, pv[0], &k, &key, &val)) {
		const char *name = cfg_key_text(c, key, "a host label"), *text;
		if (name == NULL)
			continue;
		if (val->type != YAML_SCALAR_NODE) {
			cfg_key_err(c, val, "placement.hosts.%s: a label's value is text, e.g. \"true\"", name);
			continue;
		}
		if ((text = cfg_key_text(c, val, "a host label's value")) != NULL)
			json_object_set_new(hosts, name, json_string(text));
	}
	*out = json_pack("{s:o}", "hosts", hosts);
	return 0;
}

const struct step_key deploy_keys[] = {
	KEYS_PLACEMENT,
	{KEY_WARM}, /* the replicas' model server started warm */
	{KEY_MODEL, .required = 1, .hint = "the model whose registered version to deploy"},
	{.name = "serve", .flags = STK_PLAN, .required = 1, .hint = "the model server's command", .parse = keys_serve},
	{.name = "traffic", .flags = STK_PLAN, .parse = keys_traffic},
	{.name = "replicas", .flags = STK_PLAN, .parse = keys_replicas},
	{.name = "sample", .flags = STK_PLAN, .parse = keys_sample},
	{.name = "deployment", .flags = STK_PLAN, .parse = keys_deployment},
	{.name = "auto_stop", .flags = STK_PLAN, .parse = keys_auto_stop},
	{.name = "retire_after", .flags = STK_PLAN, .parse = keys_retire_after},
	{.name = "load_test", .flags = STK_PLAN, .parse = keys_load_test},
	{.name = "canary", .flags = STK_PLAN, .parse = keys_canary},
	{.name = "approve", .flags = STK_PLAN, .parse = keys_approve},
	{.name = "placement", .flags = STK_PLAN, .parse = keys_placement},
	{0},
};

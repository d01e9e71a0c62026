/*
 * config_monitor — a job step's `hang:` and `watch:` (monitor.md): what
 * the job monitor applies to it. Both are written to the step's spec only
 * when present, normalized, so the monitor merges them over the daemon's
 * settings at run time (a spec without them reads as before they
 * existed).
 *
 *   hang: off | {period: 30s, periods: 4, window: 2m, confirm: 1m,
 *                warmup: 5m, variance: 25, low: 10, high: 90,
 *                on_hang: notify|restart|fail, phases: {checkpoint: 30m}}
 *     → {"period_ms":…, …, "phases":{"checkpoint":1800000}} (hang_setting)
 *   watch: {METRIC: [RULE | {rule: RULE, action: notify|fail|restart}]}
 *     → {"METRIC":[{"rule":"…","action":"notify"}, …]} (wp_rule_parse)
 */
#include "plan/config_priv.h"

#include <string.h>

#include "monitor/hang.h"
#include "monitor/watchpoints.h"

static json_t *parse_hang(struct ctx *c, const yaml_node_t *n)
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
		err_node(c, n, "hang must be off or a mapping of settings (period, periods, window, confirm, "
			 "warmup, on_hang, …), not %s", cfg_q(c, s));
		return obj;
	}
	if (n->type != YAML_MAPPING_NODE) {
		err_node(c, n, "hang must be off or a mapping of settings, not a %s", ntype(n));
		return obj;
	}
	while (cfg_next_pair(c, n, &k, &key, &val)) {
		if ((name = cfg_text(c, key, "a hang setting")) == NULL)
			continue;
		if (strcmp(name, "phases") == 0) {
			if (val->type != YAML_MAPPING_NODE) {
				err_node(c, val, "hang phases must be a mapping of phase names to durations "
					 "(checkpoint: 30m)");
				continue;
			}
			j = 0;
			while (cfg_next_pair(c, val, &j, &pk, &pv)) {
				const char *ph = cfg_text(c, pk, "a phase name"), *d = cfg_text(c, pv, "a phase's allowance");
				char *full;
				if (ph == NULL || d == NULL)
					continue;
				full = xasprintf("phase.%s", ph);
				if (hang_setting(obj, full, d) < 0)
					err_node(c, pv, "%s", ferry_error_last());
				free(full);
			}
			continue;
		}
		if ((s = cfg_text(c, val, name)) == NULL)
			continue;
		if (hang_setting(obj, name, s) < 0)
			err_node(c, strncmp(ferry_error_last(), "hang has no setting", 19) == 0 ? key : val, "%s",
				 ferry_error_last());
	}
	return obj;
}

/* One watch rule: a string, or {rule, action}. */
static json_t *parse_rule(struct ctx *c, const char *metric, const yaml_node_t *n)
{
	const yaml_node_t *key, *val, *rn = NULL;
	const char *rule = NULL, *action = "notify", *name;
	size_t k = 0;

	if (n->type == YAML_MAPPING_NODE) {
		while (cfg_next_pair(c, n, &k, &key, &val)) {
			if ((name = cfg_text(c, key, "a watch rule key")) == NULL)
				continue;
			if (strcmp(name, "rule") == 0) {
				rule = cfg_text(c, val, "watch rule");
				rn = val;
			} else if (strcmp(name, "action") == 0) {
				if ((action = cfg_text(c, val, "watch action")) != NULL && wp_action_parse(action) < 0)
					err_node(c, val, "watch action %s is not valid; use notify, fail or restart",
						 cfg_q(c, action));
			} else {
				err_node(c, key, "a watch rule has rule and action, not %s", cfg_q(c, name));
			}
		}
		if (rule == NULL) {
			err_node(c, n, "a watch rule of %s needs \"rule\" (nan_or_inf, \"> 10 * min\", …)",
				 cfg_q(c, metric));
			return NULL;
		}
	} else if ((rule = cfg_text(c, n, "watch rule")) == NULL) {
		return NULL;
	} else {
		rn = n;
	}
	if (wp_rule_parse(rule, NULL) < 0) {
		err_node(c, rn, "%s (watching %s)", ferry_error_last(), cfg_q(c, metric));
		return NULL;
	}
	return json_pack("{s:s,s:s}", "rule", rule, "action", action ? action : "notify");
}

static json_t *parse_watch(struct ctx *c, const yaml_node_t *n)
{
	json_t *obj = json_object();
	const yaml_node_t *key, *val, *it;
	const char *metric;
	size_t k = 0, j;

	if (n->type != YAML_MAPPING_NODE) {
		err_node(c, n, "watch must be a mapping of metric names to rules (loss: [nan_or_inf])");
		return obj;
	}
	while (cfg_next_pair(c, n, &k, &key, &val)) {
		json_t *rules = json_array(), *r;
		if ((metric = cfg_text(c, key, "a metric name")) == NULL) {
			json_decref(rules);
			continue;
		}
		j = 0;
		if (val->type == YAML_MAPPING_NODE) { /* one rule written as a mapping */
			if ((r = parse_rule(c, metric, val)) != NULL)
				json_array_append_new(rules, r);
		} else {
			while (cfg_next_item(c, val, &j, &it))
				if ((r = parse_rule(c, metric, it)) != NULL)
					json_array_append_new(rules, r);
		}
		json_object_set_new(obj, metric, rules);
	}
	return obj;
}

void cfg_monitor_fields(struct ctx *c, const yaml_node_t *hang, const yaml_node_t *watch, json_t *js)
{
	if (present(hang))
		json_object_set_new(js, "hang", parse_hang(c, hang));
	if (present(watch))
		json_object_set_new(js, "watch", parse_watch(c, watch));
}

/*
 * keys — the keys several step kinds share, as rows for their key tables
 * (kind.h struct step_key): a kind's table lists {KEY_X} for each, or
 * {KEY_X, .required = 1, .hint = "…"} when its steps must have it. The
 * parsers are in keys.c (model, dataset, on_timeout and the small value
 * parsers the kinds' own keys use too) and keys_job.c (the keys of a
 * job: where it runs, its cache, gate and the monitor's hang and watch).
 */
#ifndef FERRY_KEYS_H
#define FERRY_KEYS_H

#include "plan/config_keys.h"
#include "plan/kind.h"

/* ---- value parsers (keys.c) ------------------------------------------- */

/* A YAML boolean (plain true or false); false when absent or after an error. */
json_t *keys_bool(struct cfg_key_ctx *c, const yaml_node_t *n, const char *what);
/* One of choices (the first the default) as a JSON string. */
json_t *keys_choice(struct cfg_key_ctx *c, const yaml_node_t *n, const char *what,
		    const char *const *choices, size_t nchoices);
/* A non-empty string, its templates checked when templates; or null. */
json_t *keys_string(struct cfg_key_ctx *c, const yaml_node_t *n, const char *what, int templates);
/* A model, deployment or alias name (cfg_name_ok), or null. */
json_t *keys_name(struct cfg_key_ctx *c, const yaml_node_t *n, const char *what);

/* ---- shared keys ---------------------------------------------------------- */

int keys_model(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
int keys_dataset(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
int keys_on_timeout(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
/* keys_job.c */
int keys_cache(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
int keys_gate(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
int keys_on_fail(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
int keys_hang(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
int keys_watch(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
int keys_executor(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
int keys_resources(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
int keys_network(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
int keys_exec_options(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
int keys_secrets(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
int keys_warm(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
/* keys_deploy.c: a deploy step's key table */
extern const struct step_key deploy_keys[];
/* The names of the executors' options blocks (exec.h options_key), NULL past the last. */
const char *keys_exec_options_name(size_t i);

#define KEY_MODEL .name = "model", .flags = STK_PLAN, .absent = "null", .parse = keys_model
#define KEY_DATASET .name = "dataset", .flags = STK_PLAN, .absent = "null", .parse = keys_dataset
#define KEY_ON_TIMEOUT .name = "on_timeout", .flags = STK_PLAN, .absent = "\"fail\"", .parse = keys_on_timeout
#define KEY_CACHE .name = "cache", .flags = STK_PLAN, .absent = "false", .parse = keys_cache
#define KEY_GATE .name = "gate", .flags = STK_PLAN, .absent = "[]", .parse = keys_gate
/* what a failed gate does: fail (the default) or skip what follows; a field only when given */
#define KEY_ON_FAIL .name = "on_fail", .flags = STK_PLAN, .parse = keys_on_fail
/* the monitor's (monitor.md): a field only when given */
/* a job's secrets by name (a field only when given: specs without it hash as before) */
#define KEY_SECRETS .name = "secrets", .flags = STK_JOB | STK_PLAN, .parse = keys_secrets
#define KEY_HANG .name = "hang", .flags = STK_PLAN | STK_LAST, .parse = keys_hang
#define KEY_WATCH .name = "watch", .flags = STK_PLAN | STK_LAST, .parse = keys_watch

/* Where a job runs: the rows every kind with a job (or a service) lists first. */
#define KEYS_PLACEMENT \
	{.name = "executor", .flags = STK_JOB | STK_PLAN, .absent = "null", .parse = keys_executor}, \
	{.name = "resources", .flags = STK_JOB | STK_PLAN, .absent = "null", .parse = keys_resources}, \
	{.name = "network", .flags = STK_JOB | STK_PLAN, .absent = "null", .parse = keys_network}, \
	{.names = keys_exec_options_name, .flags = STK_JOB | STK_PLAN, .parse = keys_exec_options}

/* a warm Python start (exec/warm.h): a field only when given */
#define KEY_WARM .name = "warm", .flags = STK_JOB | STK_PLAN, .parse = keys_warm

/* A job kind's keys beside its own: where it runs, its secrets, how it starts, then its cache. */
#define KEYS_JOB KEYS_PLACEMENT, {KEY_SECRETS}, {KEY_WARM}, {KEY_CACHE}

#endif

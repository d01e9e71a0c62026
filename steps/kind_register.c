/*
 * kind_register — a step that registers a version of its `model` in the
 * model registry: the artifact (its `artifact`, else the `model` output of
 * a train step above it) is stored in the blob store and the version
 * recorded with its lineage (registry.c does the work). The config gives
 * an evaluate step above it that compares against production its model.
 */
#include "steps/steps.h"

#include "steps/registry.h"

#include <ctype.h>

#include "exec/exec.h"
#include "steps/keys.h"

/* Claimed: the version is registered (or was by an earlier attempt), or the step fails. */
static int register_prepare(struct step_result *res, json_t **env, const struct step_run *r)
{
	int error;

	(void)env;
	EXEC_FAULT("registering"); /* bin/ferryd-test's window: the work in progress (tests/fault) */
	error = registry_step(r, res);
	return error < 0 ? error : 1;
}

static const char *const version_values[] = {"patch", "minor", "major"};

/* artifact: what to register, a path or {{steps.X.outputs.Y}} (templates checked), or null. */
static int keys_artifact(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = keys_string(c, n, "artifact", 1);
	return 0;
}

/* version: the part of the version number a new version bumps. */
static int keys_version(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = keys_choice(c, n, "version", version_values, sizeof(version_values) / sizeof(version_values[0]));
	return 0;
}

/* alias: one name or a list of names, as an array. */
static json_t *parse_aliases(struct cfg_key_ctx *c, const yaml_node_t *n)
{
	json_t *arr = json_array(), *name;
	const yaml_node_t *it;
	size_t k = 0, j;

	if (!present(n))
		return arr;
	if (n->type == YAML_MAPPING_NODE) {
		cfg_key_err(c, n, "alias must be a name or a list of names, not a mapping");
		return arr;
	}
	while (cfg_key_next_item(c, n, &k, &it)) {
		if ((name = keys_name(c, it, "alias")) == NULL || json_is_null(name)) {
			json_decref(name);
			continue;
		}
		if (!isalpha((unsigned char)json_string_value(name)[0])) {
			cfg_key_err(c, it, "alias %s must start with a letter, so that it never looks like a "
				 "version number", cfg_key_q(c, json_string_value(name)));
			json_decref(name);
			continue;
		}
		for (j = 0; j < json_array_size(arr); j++)
			if (json_equal(json_array_get(arr, j), name))
				break;
		if (j < json_array_size(arr))
			cfg_key_err(c, it, "alias %s is listed twice", cfg_key_q(c, json_string_value(name)));
		else
			json_array_append(arr, name);
		json_decref(name);
	}
	return arr;
}

static int keys_alias(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = parse_aliases(c, n);
	return 0;
}

static const struct step_key register_keys[] = {
	{KEY_MODEL, .required = 1, .hint = "the name of the model to register a version of"},
	{.name = "artifact", .flags = STK_PLAN, .absent = "null", .parse = keys_artifact},
	{.name = "version", .flags = STK_PLAN, .absent = "\"patch\"", .parse = keys_version},
	{.name = "alias", .field = "aliases", .flags = STK_PLAN, .absent = "[]", .parse = keys_alias},
	{0},
};

const struct step_kind kind_register = {
	.name = "register", .flags = SKF_DAEMON | SKF_INPUTS | SKF_REGISTERS,
	.command = SKC_FORBIDDEN, .no_command = "registers an artifact and runs no command",
	.keys = register_keys,
	.prepare = register_prepare,
};

/*
 * kind_register — a step that registers a version of its `model` in the
 * model registry: the artifact (its `artifact`, else the `model` output of
 * a train step above it) is stored in the blob store and the version
 * recorded with its lineage (registry.c does the work). The config gives
 * an evaluate step above it that compares against production its model.
 */
#include "steps/steps.h"

#include "steps/registry.h"

/* Claimed: the version is registered (or was by an earlier attempt), or the step fails. */
static int register_prepare(struct step_result *res, json_t **env, const struct step_run *r)
{
	int error = registry_step(r, res);

	(void)env;
	return error < 0 ? error : 1;
}

const struct step_kind kind_register = {
	.name = "register", .flags = SKF_DAEMON | SKF_INPUTS | SKF_REGISTERS,
	.command = SKC_FORBIDDEN, .no_command = "registers an artifact and runs no command",
	.keys = SK_BIT(SK_MODEL) | SK_BIT(SK_ARTIFACT) | SK_BIT(SK_VERSION) | SK_BIT(SK_ALIAS),
	.required = SK_BIT(SK_MODEL),
	.key_hint = {[SK_MODEL] = "the name of the model to register a version of"},
	.prepare = register_prepare,
};

/*
 * kinds — the table of step kinds (orchestrator/kind.h). PROVISIONAL: names
 * and flags only; the step-kinds work gives each kind its own file with its
 * config keys and hooks, and this file becomes the list of those rows.
 */
#include "kind.h"

#include <stddef.h>
#include <string.h>

static const struct step_kind kind_run = {"run", SKF_JOB};
static const struct step_kind kind_train = {"train", SKF_JOB | SKF_INPUTS};
static const struct step_kind kind_evaluate = {"evaluate", SKF_JOB | SKF_INPUTS};
static const struct step_kind kind_gate = {"gate", SKF_WAITS};
static const struct step_kind kind_label = {"label", SKF_DAEMON | SKF_INPUTS};
static const struct step_kind kind_register = {"register", SKF_DAEMON | SKF_INPUTS};
static const struct step_kind kind_cache = {"cache", SKF_DAEMON | SKF_JOB | SKF_STAGES | SKF_INPUTS};

const struct step_kind *const step_kinds[] = {
	&kind_run, &kind_train, &kind_evaluate, &kind_gate, &kind_label, &kind_register, &kind_cache,
	NULL,
};

const struct step_kind *step_kind_find(const char *name)
{
	for (size_t i = 0; name && step_kinds[i]; i++)
		if (strcmp(step_kinds[i]->name, name) == 0)
			return step_kinds[i];
	return NULL;
}

const struct step_kind *step_kind_default(void)
{
	return step_kinds[0];
}

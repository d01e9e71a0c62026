/*
 * kinds — the table of step kinds (orchestrator/plan/kind.h): the list of the
 * built-in rows, each defined in its own file, and the look-ups. The order
 * is the one users see: the config's "known kinds" and "applies to …"
 * messages list kinds in it, and the first row is the default kind.
 *
 * How to add a kind (steps/README.md, "Adding a kind with a key"):
 *   1. steps/kind_X.c: an opening comment on what the kind does, its hooks
 *      (static), its key table (struct step_key rows, kind.h: each key's
 *      name, parser and whether the plan carries it; shared keys from
 *      steps/keys.h) and its row,
 *        const struct step_kind kind_x = {
 *                .name = "x", .flags = SKF_DAEMON | SKF_INPUTS,
 *                .command = SKC_FORBIDDEN, .no_command = "… and runs no command",
 *                .keys = x_keys, .prepare = x_prepare,
 *        };
 *      flags say what the engine, the planner and the store do with its
 *      steps (kind.h); prepare runs when a step of it is claimed, job_done
 *      when its job exited 0 (either may be NULL, see kind.h).
 *   2. List it in step_kinds[] below, declared extern beside it (steps.h
 *      declares only the rows other code names), after the rows there:
 *      the first row is the kind of a step that names none.
 *   3. Tests: its row's invariants are checked for every row by
 *      tests/unit/test_kinds.c; add its hooks' tests there or beside them,
 *      and a workflow using it to the integration tests.
 * Nothing else compares the kind's name: code that treats some kinds
 * specially tests a flag (add one to kind.h when none says it).
 *
 * A kind defined outside steps/ (a test's) is added at start-up with
 * step_kind_register() and is found like the built-in ones.
 */
#include "steps/steps.h"

#include <stddef.h>
#include <string.h>

#define MAX_ADDED 8

const struct step_kind *const step_kinds[] = {
	&kind_run, &kind_train, &kind_evaluate, &kind_gate, &kind_label, &kind_register, &kind_cache,
	&kind_deploy, NULL,
};

#define NBUILTIN (sizeof(step_kinds) / sizeof(step_kinds[0]) - 1)

/* Kinds added by step_kind_register(), before any thread reads the table. */
static const struct step_kind *added[MAX_ADDED];
static size_t nadded;

const struct step_kind *step_kind_at(size_t i)
{
	if (i < NBUILTIN)
		return step_kinds[i];
	return i - NBUILTIN < nadded ? added[i - NBUILTIN] : NULL;
}

const struct step_kind *step_kind_find(const char *name)
{
	const struct step_kind *k = name ? step_kind_at(0) : NULL;

	for (size_t i = 1; k != NULL && strcmp(k->name, name) != 0; i++)
		k = step_kind_at(i);
	return k;
}

const struct step_kind *step_kind_default(void)
{
	return step_kinds[0];
}

int step_kind_register(const struct step_kind *k)
{
	if (k == NULL || k->name == NULL || k->name[0] == '\0') {
		ferry_error_set("a step kind needs a name");
		return FERRY_EINVALID;
	}
	if (step_kind_find(k->name) != NULL) {
		ferry_error_set("step kind \"%s\" exists already", k->name);
		return FERRY_ECONFLICT;
	}
	if (nadded == MAX_ADDED) {
		ferry_error_set("step kind \"%s\": no room for more than %d added kinds", k->name,
				MAX_ADDED);
		return FERRY_ERROR;
	}
	added[nadded++] = k;
	return FERRY_OK;
}

int step_key_is(const struct step_key *k, const char *name)
{
	const char *n;

	if (k->name != NULL)
		return strcmp(k->name, name) == 0;
	for (size_t i = 0; k->names != NULL && (n = k->names(i)) != NULL; i++)
		if (strcmp(n, name) == 0)
			return 1;
	return 0;
}

const struct step_key *step_kind_key(const struct step_kind *kind, const char *name)
{
	const struct step_key *k;

	for (k = kind->keys; k != NULL && (k->name != NULL || k->names != NULL); k++)
		if (step_key_is(k, name))
			return k;
	return NULL;
}

/*
 * states — the one name table of each enum in states.h: run, step and
 * attempt states and attempt outcomes, spelled as PostgreSQL stores them.
 * Tables are indexed by the enum, so a name and its value cannot drift
 * apart; the unit test checks these names against the SQL.
 */
#include "lib/states.h"

#include <stddef.h>
#include <string.h>

static const char *const run_names[RUN_STATE_COUNT] = {
	[RUN_PENDING] = "pending",
	[RUN_RUNNING] = "running",
	[RUN_STOPPING] = "stopping",
	[RUN_SUCCEEDED] = "succeeded",
	[RUN_FAILED] = "failed",
	[RUN_STOPPED] = "stopped",
};

static const char *const step_names[STEP_STATE_COUNT] = {
	[STEP_BLOCKED] = "blocked",
	[STEP_READY] = "ready",
	[STEP_RUNNING] = "running",
	[STEP_WAITING] = "waiting",
	[STEP_SUCCEEDED] = "succeeded",
	[STEP_FAILED] = "failed",
	[STEP_SKIPPED] = "skipped",
	[STEP_STOPPED] = "stopped",
};

static const char *const attempt_names[ATTEMPT_STATE_COUNT] = {
	[ATTEMPT_RUNNING] = "running",
	[ATTEMPT_SUCCEEDED] = "succeeded",
	[ATTEMPT_FAILED] = "failed",
	[ATTEMPT_STOPPED] = "stopped",
	[ATTEMPT_LOST] = "lost",
};

static const char *const outcome_names[ATTEMPT_OUTCOME_COUNT] = {
	[OUTCOME_SUCCEEDED] = "succeeded",
	[OUTCOME_FAILED] = "failed",
	[OUTCOME_STOPPED] = "stopped",
	[OUTCOME_LOST] = "lost",
	[OUTCOME_WAITING] = "waiting",
	[OUTCOME_RESTART] = "restart",
	[OUTCOME_SKIPPED] = "skipped",
	[OUTCOME_EXPANDED] = "expanded",
};

static const char *name_of(const char *const *names, int n, int v)
{
	return v >= 0 && v < n ? names[v] : NULL;
}

static int parse_in(const char *const *names, int n, const char *name)
{
	for (int i = 0; name && i < n; i++)
		if (strcmp(names[i], name) == 0)
			return i;
	return -1;
}

const char *run_state_name(enum run_state s)
{
	return name_of(run_names, RUN_STATE_COUNT, (int)s);
}

const char *step_state_name(enum step_state s)
{
	return name_of(step_names, STEP_STATE_COUNT, (int)s);
}

const char *attempt_state_name(enum attempt_state s)
{
	return name_of(attempt_names, ATTEMPT_STATE_COUNT, (int)s);
}

const char *attempt_outcome_name(enum attempt_outcome o)
{
	return name_of(outcome_names, ATTEMPT_OUTCOME_COUNT, (int)o);
}

int run_state_parse(const char *name)
{
	return parse_in(run_names, RUN_STATE_COUNT, name);
}

int step_state_parse(const char *name)
{
	return parse_in(step_names, STEP_STATE_COUNT, name);
}

int attempt_state_parse(const char *name)
{
	return parse_in(attempt_names, ATTEMPT_STATE_COUNT, name);
}

int attempt_outcome_parse(const char *name)
{
	return parse_in(outcome_names, ATTEMPT_OUTCOME_COUNT, name);
}

int run_state_finished(enum run_state s)
{
	return s == RUN_SUCCEEDED || s == RUN_FAILED || s == RUN_STOPPED;
}

int step_state_open(enum step_state s)
{
	return s == STEP_BLOCKED || s == STEP_READY || s == STEP_RUNNING || s == STEP_WAITING;
}

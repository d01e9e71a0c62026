/*
 * states — the names of the state machine's states, once. Runs, steps and
 * attempts each have an enum here and one name table (states.c); the names
 * are the ones stored in PostgreSQL (the CHECK constraints of runs.state,
 * steps.state and attempts.state in db/migrations) and moved by the
 * functions in db/functions. tests/unit/test_states.c checks that the
 * tables and the SQL agree, so adding a state means adding it to both.
 *
 *   run:     pending → running → succeeded | failed | stopped, with stopping
 *            while its jobs are being killed
 *   step:    blocked → ready → running → succeeded | failed | skipped | stopped,
 *            plus waiting (for a person, or for its deadline)
 *   attempt: running → succeeded | failed | stopped | lost
 *   outcome: how the engine reports an attempt's end to ferry_finish:
 *            succeeded, failed, stopped, lost (its owner vanished: re-run
 *            without counting a try), waiting (the step now waits for a
 *            person: the attempt itself succeeded), restart (the monitor
 *            killed a hung job to run it again: the attempt failed, the
 *            step is ready at once without counting a try), skipped
 *            (its when: condition did not hold, or its gate failed with
 *            on_fail: skip: the step is skipped and so is what needs it,
 *            but for needs with if: any; the attempt succeeded), expanded
 *            (a foreach step wrote its children: it stays running until
 *            they are all terminal; the attempt succeeded); the step
 *            kinds decide one of succeeded, failed and waiting in their
 *            step_result, which starts as none
 */
#ifndef FERRY_STATES_H
#define FERRY_STATES_H

enum run_state {
	RUN_PENDING,
	RUN_RUNNING,
	RUN_STOPPING,
	RUN_SUCCEEDED,
	RUN_FAILED,
	RUN_STOPPED,
};
#define RUN_STATE_COUNT (RUN_STOPPED + 1)

enum step_state {
	STEP_BLOCKED,
	STEP_READY,
	STEP_RUNNING,
	STEP_WAITING,
	STEP_SUCCEEDED,
	STEP_FAILED,
	STEP_SKIPPED,
	STEP_STOPPED,
};
#define STEP_STATE_COUNT (STEP_STOPPED + 1)

enum attempt_state {
	ATTEMPT_RUNNING,
	ATTEMPT_SUCCEEDED,
	ATTEMPT_FAILED,
	ATTEMPT_STOPPED,
	ATTEMPT_LOST,
};
#define ATTEMPT_STATE_COUNT (ATTEMPT_LOST + 1)

/*
 * OUTCOME_FAILED is 0, so a zeroed outcome never reads as a success.
 * OUTCOME_NONE is no outcome yet: a step_result (plan/kind.h) that no step
 * kind has decided. It has no name, is never stored, and the engine
 * finishes such a result as failed; it is -1, what attempt_outcome_parse
 * answers for a name that is not an outcome.
 */
enum attempt_outcome {
	OUTCOME_NONE = -1,
	OUTCOME_FAILED,
	OUTCOME_SUCCEEDED,
	OUTCOME_STOPPED,
	OUTCOME_LOST,
	OUTCOME_WAITING,
	OUTCOME_RESTART,
	OUTCOME_SKIPPED,
	OUTCOME_EXPANDED,
};
#define ATTEMPT_OUTCOME_COUNT (OUTCOME_EXPANDED + 1)

/*
 * The name of a value as stored in the database ("pending", "blocked", …),
 * a static string; NULL for a value outside the enum, and for OUTCOME_NONE.
 */
const char *run_state_name(enum run_state s);
const char *step_state_name(enum step_state s);
const char *attempt_state_name(enum attempt_state s);
const char *attempt_outcome_name(enum attempt_outcome o);

/*
 * The value called name (exactly, as stored), or -1 when there is none (or
 * name is NULL): for an outcome, OUTCOME_NONE.
 */
int run_state_parse(const char *name);
int step_state_parse(const char *name);
int attempt_state_parse(const char *name);
int attempt_outcome_parse(const char *name);

/* Whether a run in state s has finished: succeeded, failed or stopped. */
int run_state_finished(enum run_state s);

/* Whether a step in state s is open (counted in runs.open_steps): blocked, ready, running or waiting. */
int step_state_open(enum step_state s);

#endif

/*
 * kind_gate — a manual gate: the step enters `waiting` when its needs are
 * met and a person continues it (`ferry continue`, the API), or its
 * `timeout` expires (`on_timeout: fail|continue`). The state machine does
 * all of it (SKF_WAITS): a gate step is never claimed, so it has no hooks.
 */
#include "steps/steps.h"

#include "steps/keys.h"

static const struct step_key gate_keys[] = {{KEY_ON_TIMEOUT}, {0}};

const struct step_kind kind_gate = {
	.name = "gate", .flags = SKF_WAITS,
	.command = SKC_FORBIDDEN, .no_command = "waits for a person and runs no command",
	.keys = gate_keys,
};

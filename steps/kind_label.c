/*
 * kind_label — a step that opens a labelling task on a dataset and waits
 * for a person to continue it (label.c does the work: counting unlabelled
 * items, the webhook). Its `dataset` output is the data a model version
 * registered below it was trained on.
 */
#include "steps/steps.h"

#include "steps/label.h"

/* Claimed: the task is opened and the step left waiting, or it fails. */
static int label_prepare(struct step_result *res, json_t **env, const struct step_run *r)
{
	int error = label_step(r, res);

	(void)env;
	return error < 0 ? error : 1;
}

const struct step_kind kind_label = {
	.name = "label", .flags = SKF_DAEMON | SKF_INPUTS | SKF_DATASET,
	.command = SKC_FORBIDDEN, .no_command = "waits for a person and runs no command",
	.keys = SK_BIT(SK_DATASET) | SK_BIT(SK_LABELS) | SK_BIT(SK_WEBHOOK) | SK_BIT(SK_ON_TIMEOUT),
	.required = SK_BIT(SK_DATASET),
	.key_hint = {[SK_DATASET] = "the directory or file of items to label"},
	.prepare = label_prepare,
};

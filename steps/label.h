/*
 * label — a step that opens a labelling task: it counts the items of a
 * directory dataset that have no entry in the labels file, optionally POSTs
 * the task to a webhook (retried with backoff), and leaves the step waiting
 * for a person to continue it (`ferry continue`, the API).
 */
#ifndef FERRY_LABEL_H
#define FERRY_LABEL_H

#include "steps/steps.h"

/* The label step handler: res->outcome OUTCOME_WAITING with the task as outputs, or OUTCOME_FAILED. */
int label_step(const struct step_run *r, struct step_result *res);

/*
 * Counts the regular files under dataset (hidden ones and the labels file
 * excepted) and those without a line in the labels file (CSV: the first
 * field is the item's path relative to dataset, or its file name; a header
 * line is skipped). A missing labels file labels nothing.
 */
int label_count(int64_t *items, int64_t *unlabelled, const char *dataset, const char *labels);

/* The step_kind lane of a label step: "webhook SCHEME://HOST[:PORT]" of its webhook, or NULL. */
const char *label_lane(const json_t *spec, char *buf, size_t n);

#endif

/*
 * notify — the completion webhook: when FERRY_NOTIFY_WEBHOOK is set, every
 * run that ends is POSTed there once, as {"run","workflow","state",
 * "trigger","reason","finished_at","link"}, by the leader (a periodic task
 * of the engine) on the worker pool. A failed post is tried again in later
 * rounds (10 s, 20 s, … apart) and given up after five, with the error kept
 * on the run; runs that ended more than a day before notifications were on
 * are not posted. Delivery is at least once: a receiver dedupes by run id.
 */
#ifndef FERRY_NOTIFY_H
#define FERRY_NOTIFY_H

#include "store/task.h"

/*
 * The `notify` periodic task (task.h): every second on the leader, the
 * runs due (store_runs_to_notify, 32 at most) as one pool item each, with
 * FERRY_PUBLIC_URL + "/api/v1/runs/ID" as the link; nothing without a
 * pool. An item records its outcome through its worker's connection.
 */
extern const struct task notify_task;

#endif

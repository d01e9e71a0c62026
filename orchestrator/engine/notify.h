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

#include <jansson.h>

#include "store/workers.h"

/*
 * A work item posting run (an object from store_runs_to_notify, taken) to
 * url, with link_base + "/api/v1/runs/ID" as its link (link_base may be
 * NULL). Its run records the outcome through the worker's connection; the
 * caller sets done and frees it with notify_work_free.
 */
struct work *notify_work_new(const char *url, const char *link_base, json_t *run);
void notify_work_free(struct work *w);

#endif

/*
 * schedules — cron schedules: what fires a registered workflow's runs at
 * their times, each occasion exactly once (schedules.md). The leader runs
 * a round every SCHEDULES_TICK_MS on the worker pool: every schedule with
 * a tick due has each due tick accounted for — fired (a run created in
 * the transaction that records the tick), or skipped with its reason
 * (paused, forbid, the catch-up policy) — and its next_at moved past them.
 */
#ifndef FERRY_SCHEDULES_H
#define FERRY_SCHEDULES_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

#include "store/task.h"

/* How often the leader looks for due ticks: a fire is at most this late, plus the run's creation. */
#define SCHEDULES_TICK_MS 200

/*
 * One round: the due ticks of every schedule whose id % parts is part
 * accounted for, for at most budget_ms (the rest waits for the next
 * round). Rounds of different parts run in parallel on the pool, each on
 * its own connection. Returns the number of runs started, or a negative
 * error (the database went away).
 */
int schedules_round(PGconn *conn, int64_t budget_ms, int part, int parts);

/*
 * The `schedules` periodic task (task.h): every SCHEDULES_TICK_MS on the
 * leader, one item per pool thread, each a round of its part of the
 * schedules (schedules_round), then for part 0 triggers_round; on the
 * loop, as one part, without a pool.
 */
extern const struct task schedules_task;

/*
 * Registration (workflows_register, workflows.h): workflow's schedules
 * and triggers made to match spec, in the caller's transaction.
 */
int schedules_sync(PGconn *conn, const char *workflow, const json_t *spec, const char *actor);

/*
 * The first n fire times after `after` of a schedule's fields ({cron,
 * timezone, gap, overlap}): [{"at":ISO UTC,"local":"2027-03-28 03:00 CEST"
 * ,"note":…}], a note where a DST change moves or merges the fire. NULL
 * with the error set when the fields are not valid.
 */
json_t *schedules_next(const json_t *fields, int64_t after, int n);

/* The first fire after `after` of fields, in unix seconds; 0 never, < 0 invalid. */
int64_t schedules_next_at(const json_t *fields, int64_t after);

#endif

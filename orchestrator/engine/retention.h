/*
 * retention — FERRY_RETENTION_DAYS: the logs and attempt directories
 * ($FERRY_HOME/runs/RUN) of runs that finished more than that many days ago
 * are removed, the runs' rows and metadata kept and marked
 * (runs.logs_removed_at: `ferry get` shows it, `ferry logs` says so). The
 * engine's leader-only `retention` task picks a bounded batch of due runs
 * (store_runs_retention_due) every FERRY_RETENTION_PERIOD_MS (an hour) and
 * at its start, and hands it to the worker pool as one item: file removal
 * may be slow and must not hold up dispatching.
 */
#ifndef FERRY_RETENTION_H
#define FERRY_RETENTION_H

#include <stdint.h>

#include "store/task.h"

/* Runs a round removes at most. */
#define RETENTION_BATCH 32

/*
 * The `retention` periodic task (task.h): with FERRY_RETENTION_DAYS set,
 * the runs due (RETENTION_BATCH at most) as one pool item, run on the loop
 * without a pool.
 */
extern const struct task retention_task;

/*
 * FERRY_RETENTION_DAYS as a number of days: 0 when unset or empty (keep
 * forever); fractions allowed (0.5: twelve hours). -1 with the message set
 * when it is not a number >= 0.
 */
double retention_days_env(void);

#endif

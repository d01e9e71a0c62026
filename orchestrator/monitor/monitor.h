/*
 * monitor — the job monitor (monitor.md): every running attempt of this
 * daemon is sampled through its executor type (IO counters, CPU time),
 * its log, heartbeat and phase files, and where it has GPUs the GPU
 * sampler; the two-stage hang rule (hang.h) and the step's watchpoints
 * (watchpoints.h) judge it; a low-utilization warning is raised for train
 * steps. What the monitor sees is written to attempt_monitor, what
 * happens to events (monitor.*), and posted to FERRY_NOTIFY_WEBHOOK.
 *
 * Its periodic task (monitor_task, task.h) calls monitor_round() with the
 * engine's running jobs; the round is bounded and never blocks (sampling reads /proc and cgroup
 * files, the GPU and Slurm samplers are children polled, evidence of a
 * hang is collected on the worker pool). What the monitor decides to do
 * to a job — restart it, fail it — goes back through host->kill (for the
 * task, the round's context's kill).
 */
#ifndef FERRY_MONITOR_H
#define FERRY_MONITOR_H

#include <libpq-fe.h>
#include <stdint.h>

#include "exec/exec.h"
#include "lib/states.h"
#include "store/task.h"
#include "store/workers.h"

struct monitor;

/* What the monitor needs from its host (the task: the round's context). */
struct monitor_host {
	void *arg;
	/* Hands w to the worker pool (back on the host's thread: monitor_work_done, then monitor_work_free). */
	void (*submit)(void *arg, struct work *w);
	/* Kills attempt (step_id, attempt) with outcome (OUTCOME_RESTART or OUTCOME_FAILED), final, reason (taken). */
	void (*kill)(void *arg, int64_t step_id, int attempt, enum attempt_outcome outcome, int final, char *reason);
};

/*
 * Reads the daemon's settings (FERRY_HANG, FERRY_LOW_UTIL) and finds the
 * GPU sampler. FERRY_EINVALID with the message when a setting is bad.
 */
int monitor_new(struct monitor **out, const char *owner, const struct monitor_host *host);
void monitor_free(struct monitor *m);

/*
 * One round at monotonic time now over the engine's jobs: samples those
 * due, judges them, writes what changed through conn. Returns how many ms
 * until the next sample is due (the task's period caps it).
 */
int64_t monitor_round(struct monitor *m, PGconn *conn, struct exec_job *const *jobs, int njobs, int64_t now);

/* Back on the host's thread: applies a finished pool item of the monitor (monitor_work_free frees it). */
void monitor_work_done(struct monitor *m, struct work *w);
void monitor_work_free(struct work *w);

/* How long the task waits between rounds at most. */
#define MONITOR_TICK_MS 250

/*
 * The `monitor` periodic task (task.h): every MONITOR_TICK_MS on every
 * replica, monitor_round over the engine's running jobs; its state is the
 * monitor (monitor_new at the engine's start: a bad FERRY_HANG or
 * FERRY_LOW_UTIL fails it).
 */
extern const struct task monitor_task;

#endif

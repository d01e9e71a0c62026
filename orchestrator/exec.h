/*
 * exec — executors run a claimed step's job. The local executor forks a
 * small shim per attempt: the shim starts a new session (so the job is one
 * process group the engine can signal), forks the command with stdout and
 * stderr appended to the attempt's log, waits for it and writes how it ended
 * to DIR/status. Because the shim outlives a killed daemon, a restarted
 * daemon re-adopts the job (same pid and start time) or reads its status.
 * The noop executor completes every job at once; it exists only for the
 * dispatch benchmark.
 */
#ifndef FERRY_EXEC_H
#define FERRY_EXEC_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "store.h"

struct exec_job {
	int64_t step_id, run_id;
	int attempt;
	char *name;
	char *dir;          /* attempt directory: log, status, out/ */
	pid_t pid;          /* the shim: leader of the job's process group */
	int64_t pid_start;  /* its start time in clock ticks since boot */
	int child;          /* ours to reap (else adopted from a dead owner) */
	int64_t deadline_ms; /* monotonic time the timeout fires; 0 = none */
	int64_t timeout_ms;
	/* set once the engine decided to kill it */
	const char *kill_outcome; /* failed (timeout) or stopped */
	char *kill_reason;
	int64_t kill_at_ms;       /* when SIGKILL follows SIGTERM */
	int killed_hard;
	json_t *ctx;        /* the engine's: {kind, spec, workdir, inputs, run, cache_key} */
};

/* Starts a claimed step under the local executor; fills job. */
int exec_local_start(struct exec_job *job, const struct store_claim *c, const char *home);

/* Sends sig to the job's process group. */
void exec_signal(const struct exec_job *job, int sig);

/* Whether pid is alive and started at start (0 start: any). */
int exec_pid_alive(pid_t pid, int64_t start);

/* Start time of pid from /proc (clock ticks since boot), or 0. */
int64_t exec_pid_start(pid_t pid);

/*
 * Reads DIR/status written by the shim: 1 when present, with *exit_code
 * (or -1) and *signal (or 0); 0 when absent.
 */
int exec_read_status(const char *dir, int *exit_code, int *signal);

void exec_job_dispose(struct exec_job *job);

#endif

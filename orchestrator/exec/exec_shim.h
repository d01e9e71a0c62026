/*
 * exec_shim — the executors' supervisors of one job (the shim of an
 * attempt: exec_local.c, exec_podman.c) and the async-signal-safe pieces
 * they use between fork() and exit in a possibly multi-threaded daemon:
 * decimal formatting, its own start time, the "pid PID START" line it
 * writes to DIR/status before its job can run (the handle, exec.h), the
 * switch to the job user, and the local executor's whole supervisor
 * (exec_shim_run), which bin/ferry-shim runs (orchestrator/daemon/ferry_shim.c).
 */
#ifndef FERRY_EXEC_SHIM_H
#define FERRY_EXEC_SHIM_H

#include <stddef.h>
#include <sys/types.h>

struct logmask;

/* Decimal text of v into buf (at least 21 bytes); returns the length. */
size_t exec_shim_fmt(char *buf, long long v);

/*
 * Our start time (field 22 of /proc/self/stat, clock ticks since boot) as
 * decimal text into out (at least 24 bytes); its length, 0 when unknown.
 */
size_t exec_shim_self_start(char *out);

/* Writes "pid PID START\n" to fd. */
void exec_shim_write_pid(int fd);

/*
 * Reads this process's start time now, for exec_shim_write_pid later (a
 * spare, ahead of its job: /proc/self/stat took 0.1 ms here, on the
 * path to the job's start). Only in the process that writes the line.
 */
void exec_shim_remember_start(void);

/* Writes "WORD N\n" to fd ("WORD\n" without with_n). */
void exec_shim_put_line(int fd, const char *word, long long n, int with_n);

/* The job user a supervisor's job runs as (NULL where it runs as the daemon's user). */
struct exec_shim_user {
	uid_t uid;
	gid_t gid;
	int ngroups;
	const gid_t *groups; /* its supplementary groups */
};

/* In a child between fork and exec (async-signal-safe): drops to u, if any; -1 and errno on failure. */
int exec_shim_drop(const struct exec_shim_user *u);

/*
 * A supervisor's first act (exec_shim_run's, once): every signal unblocked
 * and at its default, a session of its own (the job is one process group),
 * no descriptor above 2 left open. Async-signal-safe.
 */
void exec_shim_detach(void);

/*
 * A spare's request (exec_spare.c writes it, bin/ferry-shim --spare reads
 * it from descriptor 0): "LENGTH\n" (EXEC_SPARE_HEAD bytes: LENGTH in
 * decimal, zero-padded), then LENGTH bytes: "ARGC\0", the ARGC
 * arguments the shim would have been started with, each ending in \0
 * (from "ferry-shim" to the command's last), "ENVC\0", the ENVC entries
 * of its environment, each ending in \0. At most EXEC_SPARE_MAX bytes (an
 * exec takes about 2 MiB of them at most).
 */
#define EXEC_SPARE_MAX (16L << 20)
#define EXEC_SPARE_HEAD 11

/*
 * The local executor's supervisor of one job; never returns. It starts a
 * new session (the job is one process group), writes its pid and start time
 * to STATUS, starts argv (vfork + exec, as u, in cwd, with envp; PATH looked
 * up in this process's environment) with stdout and stderr appended to LOG,
 * through a pipe it copies with mask's values masked when mask is not NULL,
 * waits for it and appends how it ended ("exit N", "signal N") to STATUS.
 * Run by bin/ferry-shim, or in a fork of the daemon where that is missing.
 */
_Noreturn void exec_shim_run(char **argv, char **envp, const char *cwd, const char *log, const char *status,
			     struct logmask *mask, const struct exec_shim_user *u);

#endif

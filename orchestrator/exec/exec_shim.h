/*
 * exec_shim — the async-signal-safe pieces every executor's supervisor
 * (the shim a type forks per attempt: exec_local.c, exec_podman.c) uses
 * between fork() and exit in a possibly multi-threaded daemon: decimal
 * formatting, its own start time, and the "pid PID START" line it writes
 * to DIR/status before its job can run (the handle, exec.h).
 */
#ifndef FERRY_EXEC_SHIM_H
#define FERRY_EXEC_SHIM_H

#include <stddef.h>

/* Decimal text of v into buf (at least 21 bytes); returns the length. */
size_t exec_shim_fmt(char *buf, long long v);

/*
 * Our start time (field 22 of /proc/self/stat, clock ticks since boot) as
 * decimal text into out (at least 24 bytes); its length, 0 when unknown.
 */
size_t exec_shim_self_start(char *out);

/* Writes "pid PID START\n" to fd. */
void exec_shim_write_pid(int fd);

/* Writes "WORD N\n" to fd ("WORD\n" without with_n). */
void exec_shim_put_line(int fd, const char *word, long long n, int with_n);

#endif

/*
 * logmask — a job's output with its secrets' values masked as it is
 * written: the shim of an executor that runs a step with `secrets:` gives
 * the job a pipe instead of DIR/log and copies what comes through it to
 * DIR/log, each exact value of a secret (and each line of a multi-line
 * one) replaced by "***" — also when a value arrives split over reads.
 *
 * Only a possible start of a value is held back (the longest tail of what
 * came that begins a value), so the log stays live; what is held is
 * written when more data shows it is not a value, or at the end.
 *
 * logmask_new allocates everything; the rest runs in a shim (a fork of a
 * threaded daemon): no allocation, only read, write, poll and waitpid.
 * logmask.c needs no library but libc (bin/ferry-shim links it, built
 * with musl where it can be: Makefile); the JSON side, logmask_new and
 * logmask_values, is logmask_json.c's (jansson), the daemon's alone.
 */
#ifndef FERRY_EXEC_LOGMASK_H
#define FERRY_EXEC_LOGMASK_H

#include <stddef.h>
#include <sys/types.h>

#define LOGMASK_MARK "***"
/* values shorter than this are refused when set (they would mask ordinary text) */
#define LOGMASK_MIN_LEN 4

struct logmask;
typedef struct json_t json_t; /* jansson's: logmask_json.c */

/* A masker for the values of secrets ({"NAME": "value"}); NULL when there is nothing to mask. */
struct logmask *logmask_new(const json_t *secrets);
/* The same for the values themselves (the shim's: bin/ferry-shim reads them from its environment). */
struct logmask *logmask_new_values(const char *const *values, size_t n);
void logmask_free(struct logmask *m);
/* The values masked (each secret's, and each line of a multi-line one), longest first: a JSON array of strings. */
json_t *logmask_values(const struct logmask *m);
/* How many values m masks (0 for NULL), and the i-th: not NUL-terminated, len bytes. */
size_t logmask_count(const struct logmask *m);
const char *logmask_value(const struct logmask *m, size_t i, size_t *len);

/* Copies p (n bytes) to fd, masked; a possible start of a value is held back. */
void logmask_feed(struct logmask *m, int fd, const char *p, size_t n);
/* Writes what is held back (the end of the output). */
void logmask_flush(struct logmask *m, int fd);

/*
 * Copies what comes through in (the read end of the job's pipe) to out,
 * masked, until child has ended and in has nothing more for a moment
 * (a grandchild that keeps the pipe open does not hold the shim), then
 * flushes and closes in. Returns child's wait status, or -1.
 */
int logmask_pump(struct logmask *m, int in, int out, pid_t child);

#endif

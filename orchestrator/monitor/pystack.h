/*
 * pystack — the Python frames of a hung CPython process, for its evidence.
 *
 * A native stack of a Python job says `__poll` inside
 * `_PyEval_EvalFrameDefault`: true, and no help finding the blocked line of
 * a training script. gdb with CPython's own extension (python3-gdb.py,
 * installed with Debian's python3-dbg, which also brings the interpreter's
 * debug symbols) prints each thread's Python traceback (`py-bt`) and can
 * read which thread holds the GIL from the interpreter's runtime state.
 * The process is stopped while gdb reads it (about a second here), once,
 * for a job already declared hung.
 *
 * pystack_parse is pure (tests/unit/test_pystack.c gives it gdb's output);
 * pystack_collect runs gdb as evidence.c runs its native collectors.
 */
#ifndef FERRY_PYSTACK_H
#define FERRY_PYSTACK_H

#include <jansson.h>
#include <stdint.h>

#define PYSTACK_MAX 16384 /* bytes of the tracebacks' text */
/*
 * gdb's budget per process: reading the interpreter's debug symbols costs
 * 1.3 s of CPU on an idle machine here (2.4 s with py-bt), and more than
 * 10 s of wall time on one whose two cores run ten other things (and more
 * than 30 s in a clean clone's make test). The job is already hung and this
 * runs on a worker thread, so the budget is long.
 */
#define PYSTACK_TIMEOUT_MS 60000

/* 1 when pid runs a CPython interpreter (its executable is named python…). */
int pystack_is_python(int pid);

/*
 * gdb's output of `thread apply all py-bt` and the two GIL prints (locked,
 * last holder's pthread id) as
 *   {"stack": "Thread 1 (…LWP 42…):\nTraceback …", "threads": [{"lwp": 42,
 *    "where": "main_loop (/tmp/train.py:9)"}, …], "gil": "held by LWP 42"
 *    | "not held …" | "unknown", "gil_lwp": 42 | null}
 * "where" is each thread's innermost frame outside the standard library
 * (else its innermost). NULL with *why (the caller's) when no Python frame
 * was shown.
 */
json_t *pystack_parse(const char *out, char **why);

/* Runs gdb on pid within left_ms and parses its output; NULL with *why when it cannot. */
json_t *pystack_collect(int pid, int64_t left_ms, char **why);

#endif

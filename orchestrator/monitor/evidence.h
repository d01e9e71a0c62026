/*
 * evidence — what a person needs to debug a job the monitor declared hung,
 * collected before any action is taken: each process's state, wchan and
 * native stack (elfutils eu-stack, else gdb), and the last lines of its
 * log. It blocks (each step bounded), so the engine runs it on a worker
 * thread as an evidence_work item (see evidence.c).
 */
#ifndef FERRY_EVIDENCE_H
#define FERRY_EVIDENCE_H

#include <jansson.h>
#include <stdint.h>

#include "store/workers.h"

#define EVIDENCE_MAX_STACKS 16      /* processes that get a native stack; the rest state and wchan */
#define EVIDENCE_MAX_PYTHON 4       /* … of which CPython ones that get their Python frames (pystack.h) */
#define EVIDENCE_MAX_PROCS 256      /* processes listed at all ("processes_omitted" counts the rest) */
#define EVIDENCE_STACK_MAX 16384    /* bytes of one process's stack text */
#define EVIDENCE_LOG_BYTES 65536    /* the log tail is taken from the file's last this many bytes */
#define EVIDENCE_LOG_LINES_MAX 200
#define EVIDENCE_LINE_MAX 500       /* bytes of one log line */
#define EVIDENCE_SUMMARY_MAX 2048

/*
 * Collects evidence on pids (the job's processes, host pids; npids >= 0)
 * and the last log_lines lines of log_path (NULL: none). Each process's
 * stack takes at most timeout_ms (eu-stack, then gdb in what is left of
 * it); a process left stopped by a collector killed mid-way is continued.
 * Returns, the caller's:
 * {"collector":"eu-stack"|"gdb"|"none",
 *  "processes":[{"pid","ppid","comm","cmdline","state","wchan","threads","threads_running",
 *                "stack":"TEXT"|null,"stack_error":"…" (only on failure),
 *                "collector":"gdb" (only where the fallback answered)}
 *               | {"pid","error":"…","stack":null} for a process that is gone],
 *  "processes_omitted":N (only when over EVIDENCE_MAX_PROCS),
 *  "log_tail":["…",…], "log_error":"…" (only when the log could not be read),
 *  "at":"2026-11-24T08:30:00.123Z"}
 */
json_t *evidence_collect(const int *pids, int npids, const char *log_path, int log_lines, int64_t timeout_ms);

/*
 * A short human text of ev for an event, the caller's: one line per
 * process, "pid 1234 (python3) S wchan=futex_wait_queue: #0 f #1 g #2 h"
 * (the first 3 frames of its first thread), at most EVIDENCE_SUMMARY_MAX
 * bytes ("… N more" ends a cut text). "" when ev has no processes.
 */
char *evidence_summary(const json_t *ev);

/*
 * evidence_collect as a worker-pool item: evidence_work_new copies the
 * inputs; w.run (set) collects into ev on a worker thread; the caller sets
 * w.done, submits &item->w, and reads ev when it is done. ev belongs to
 * the item: take it (set ev to NULL) to keep it past evidence_work_free.
 */
struct evidence_work {
	struct work w;
	int *pids;
	int npids;
	char *log_path;
	int log_lines;
	int64_t timeout_ms;
	json_t *ev; /* the result */
};
struct evidence_work *evidence_work_new(const int *pids, int npids, const char *log_path, int log_lines,
					int64_t timeout_ms);
void evidence_work_free(struct evidence_work *w);

#endif

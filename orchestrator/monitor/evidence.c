/*
 * evidence — the debugging record of a job declared hung (see evidence.h).
 *
 * For each of the job's processes it reads /proc (stat for the state and
 * parent, wchan, comm, cmdline, the task count) and, for the first
 * EVIDENCE_MAX_STACKS, a native stack of every thread: elfutils `eu-stack
 * -p PID` (fast, no symbols needed beyond the ELF's), else `gdb -p PID
 * -batch -nx -ex 'thread apply all bt'` when eu-stack is missing or gives
 * no frame. Both attach with ptrace, which stops the process for a moment;
 * both run as children in their own process group, killed with it past
 * the process's budget (timeout_ms, shared by the two; see capture), with
 * their output bounded, and a collector killed between its
 * attach and detach can leave the process stopped — so a process found
 * stopped afterwards that was not before is sent SIGCONT. Stack texts are
 * cut to EVIDENCE_STACK_MAX bytes, so the record of any job is bounded:
 * at most 16 × 16 KiB of stacks, EVIDENCE_MAX_PROCS entries, and
 * EVIDENCE_LOG_LINES_MAX log lines of EVIDENCE_LINE_MAX bytes.
 *
 * The log tail is the last N non-empty lines of the file's last 64 KiB,
 * with control characters and terminal escapes removed as
 * exec_log_last_line removes them.
 *
 * Everything here blocks (bounded), so the engine runs it on a worker
 * thread through evidence_work.
 */
#include "monitor/evidence.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec/exec.h"
#include "lib/util.h"
#include "monitor/pystack.h"

#define PROC_TEXT_MAX 4096 /* bytes read of one /proc file (cmdline is cut there) */
#define UNSTOP_WATCH_MS 200 /* how long a process a collector left stopped is watched (unstop) */

extern char **environ;

/* ---- /proc ------------------------------------------------------------------- */

/* Reads at most cap - 1 bytes of path into buf, NUL-terminated; the length, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
	size_t n = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	while (n + 1 < cap) {
		ssize_t r = read(fd, buf + n, cap - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
	return (ssize_t)n;
}

static ssize_t read_proc(int pid, const char *what, char *buf, size_t cap)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/%s", pid, what);
	return read_small(path, buf, cap);
}

/* The state letter of pid ('R', 'S', 'D', 'T', 'Z', …) and its parent; 0 when it is gone. */
static char proc_state(int pid, int *ppid)
{
	char buf[1024], *p, *end;
	long v;

	if (read_proc(pid, "stat", buf, sizeof(buf)) <= 0)
		return 0;
	/* "pid (comm) S ppid …": comm may hold spaces and parentheses, so from the last ')' */
	if ((p = strrchr(buf, ')')) == NULL || p[1] != ' ' || p[2] == '\0')
		return 0;
	if (ppid) {
		errno = 0;
		v = strtol(p + 4, &end, 10);
		*ppid = errno == 0 && end != p + 4 ? (int)v : -1;
	}
	return p[2];
}

/* How many threads pid has, and how many of them are running or runnable (R); -1 when unknown. */
static int count_threads(int pid, int *running)
{
	char path[64];
	struct dirent *e;
	DIR *d;
	int n = 0;

	*running = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	if ((d = opendir(path)) == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		int64_t tid;
		if (e->d_name[0] == '.')
			continue;
		n++;
		/* the states of the first 1024 are read: a spinning collective shows as R threads */
		if (n <= 1024 && parse_int64(e->d_name, &tid) == 0) {
			char sp[96], buf[512], *p;
			snprintf(sp, sizeof(sp), "/proc/%d/task/%lld/stat", pid, (long long)tid);
			if (read_small(sp, buf, sizeof(buf)) > 0 && (p = strrchr(buf, ')')) != NULL && p[1] == ' ' &&
			    p[2] == 'R')
				(*running)++;
		}
	}
	closedir(d);
	return n;
}

static json_t *string_or_null(char *s)
{
	json_t *v = s ? json_string(s) : json_null();

	free(s);
	return v ? v : json_null(); /* invalid UTF-8 from a process: null rather than nothing */
}

/* ---- stacks ------------------------------------------------------------------ */

static int on_path(const char *name)
{
	const char *path = getenv("PATH"), *p;
	int found = 0;

	for (p = path ? path : "/usr/bin:/bin"; *p && !found;) {
		size_t n = strcspn(p, ":");
		char *cand = xasprintf("%.*s/%s", (int)n, n ? p : ".", name);
		struct stat sb;
		found = stat(cand, &sb) == 0 && S_ISREG(sb.st_mode) && access(cand, X_OK) == 0;
		free(cand);
		p += n;
		if (*p == ':')
			p++;
	}
	return found;
}

/* A collector's output as a stack: cut to EVIDENCE_STACK_MAX (at a line), or NULL when it shows no frame. */
static char *as_stack(char *out)
{
	size_t n;

	if (out == NULL || strstr(out, "#0 ") == NULL) {
		return NULL;
	}
	n = strlen(out);
	if (n > EVIDENCE_STACK_MAX) {
		char *nl = memrchr(out, '\n', EVIDENCE_STACK_MAX - 40);
		size_t keep = nl ? (size_t)(nl - out) + 1 : EVIDENCE_STACK_MAX - 40;
		snprintf(out + keep, n + 1 - keep, "... (cut at %d bytes)\n", EVIDENCE_STACK_MAX);
	}
	return xstrdup(out);
}

/* The first line of out, for an error message (at most 160 bytes). */
static char *first_line(const char *out)
{
	const char *p = out ? out : "";

	return exec_clean_text(p, p + strcspn(p, "\n"), 160);
}

/*
 * A process a collector left stopped is continued; before is its state
 * before the attach (a process stopped then is left as it was).
 *
 * A collector killed at its budget (killed) may have attached a moment
 * before: PTRACE_ATTACH sends SIGSTOP, and once the tracer is gone a stop
 * still pending stops the process for good, after any look at its state
 * (a unit test saw the job neither running nor asleep right after them). SIGCONT
 * discards a pending stop and ends one in effect, so it is sent at once;
 * then the state is watched for a little while, the tracer's exit (its
 * tracing stop, 't', ends with it) and a stop that came anyway.
 */
static void unstop(int pid, char before, int killed)
{
	char now;
	int said = 0;

	if (before == 'T' || before == 't')
		return;
	if (killed)
		kill(pid, SIGCONT); /* a stop its attach left pending is discarded */
	now = proc_state(pid, NULL);
	/* a tracing stop ('t') ends by itself when its tracer is gone: 20 ms for that, then continued */
	for (int i = 0; i < UNSTOP_WATCH_MS / 5 && (now == 'T' || now == 't'); i++) {
		usleep(5000);
		now = proc_state(pid, NULL);
		if (now == 'T' || (now == 't' && i >= 3)) {
			kill(pid, SIGCONT);
			if (!said++)
				flog_info("evidence: process %d was left stopped by a stack collector; continued", pid);
		}
	}
}

/*
 * Runs one collector on pid within left_ms: 1 with *stack, or 0 with *why
 * appended to (the caller's).
 */
static int run_collector(const char *tool, int pid, int64_t left_ms, char before, char **stack, char **why)
{
	char pidstr[16], *out = NULL, *line, *msg;
	int rc, status;

	snprintf(pidstr, sizeof(pidstr), "%d", pid);
	if (strcmp(tool, "eu-stack") == 0) {
		char *argv[] = {"eu-stack", "-p", pidstr, NULL};
		rc = exec_capture_ex(argv, &out, EVIDENCE_STACK_MAX + 1, 1, &status, left_ms);
	} else {
		char *argv[] = {"gdb", "-p", pidstr, "-batch", "-nx", "-ex", "thread apply all bt", NULL};
		rc = exec_capture_ex(argv, &out, EVIDENCE_STACK_MAX + 1, 1, &status, left_ms);
	}
	unstop(pid, before, rc == FERRY_ETIMEDOUT_CAPTURE);
	if (rc == 0 && (*stack = as_stack(out)) != NULL) {
		free(out);
		return 1;
	}
	if (rc < 0) {
		msg = xasprintf("%s", ferry_error_last());
	} else {
		line = first_line(out);
		msg = xasprintf("%s gave no stack: %s", tool, line ? line : "no output");
		free(line);
	}
	if (*why) {
		char *both = xasprintf("%s; %s", *why, msg);
		free(*why), free(msg);
		msg = both;
	}
	*why = msg;
	free(out);
	return 0;
}

/* ---- one process ------------------------------------------------------------- */

struct tools {
	int eu_stack, gdb;
	int py_left; /* CPython processes that may still get their Python frames */
};

static json_t *process_entry(int pid, int want_stack, struct tools *t, int64_t timeout_ms)
{
	char buf[PROC_TEXT_MAX], *stack = NULL, *why = NULL;
	const char *by = NULL;
	int64_t until = clock_mono_ms() + timeout_ms;
	int ppid = -1, threads, running;
	char state = proc_state(pid, &ppid), st[2] = {state, '\0'};
	ssize_t n;
	json_t *e;

	if (state == 0) {
		char msg[64];
		snprintf(msg, sizeof(msg), "process %d does not exist", pid);
		return json_pack("{s:i,s:s,s:n}", "pid", pid, "error", msg, "stack");
	}
	e = json_pack("{s:i,s:i,s:s}", "pid", pid, "ppid", ppid, "state", st);
	n = read_proc(pid, "comm", buf, sizeof(buf));
	json_object_set_new(e, "comm", string_or_null(n > 0 ? exec_clean_text(buf, buf + n, 64) : NULL));
	/* cmdline: arguments separated by NULs; a kernel thread or zombie has none */
	n = read_proc(pid, "cmdline", buf, sizeof(buf));
	for (ssize_t i = 0; i < n; i++)
		if ((unsigned char)buf[i] < 0x20)
			buf[i] = ' '; /* NULs between arguments, newlines inside a python -c */
	json_object_set_new(e, "cmdline", string_or_null(n > 0 ? exec_clean_text(buf, buf + n, PROC_TEXT_MAX) : NULL));
	/* "0" (or nothing) when it runs, or the kernel hides the symbol */
	n = read_proc(pid, "wchan", buf, sizeof(buf));
	json_object_set_new(e, "wchan",
			    string_or_null(n > 0 && strcmp(buf, "0") != 0 ? exec_clean_text(buf, buf + n, 64) : NULL));
	threads = count_threads(pid, &running);
	json_object_set_new(e, "threads", json_integer(threads));
	if (threads >= 0)
		json_object_set_new(e, "threads_running", json_integer(running));

	if (want_stack) {
		if (state == 'Z' || state == 'X') {
			why = xstrdup("a zombie has no stack");
		} else if (!t->eu_stack && !t->gdb) {
			why = xstrdup("neither eu-stack (elfutils) nor gdb is installed");
		} else {
			if (t->eu_stack && run_collector("eu-stack", pid, timeout_ms, state, &stack, &why))
				by = "eu-stack";
			/* the fallback gets what is left of this process's budget */
			if (stack == NULL && t->gdb && until - clock_mono_ms() > 0 &&
			    run_collector("gdb", pid, until - clock_mono_ms(), state, &stack, &why))
				by = "gdb";
		}
		if (stack) {
			/* symbol names are ASCII; anything else would make the record invalid JSON */
			for (unsigned char *c = (unsigned char *)stack; *c; c++)
				if (*c >= 0x80)
					*c = '?';
			json_object_set_new(e, "stack", json_string(stack));
		} else {
			json_object_set_new(e, "stack", json_null());
			json_object_set_new(e, "stack_error", json_string(why ? why : "no stack"));
		}
		if (by && strcmp(by, "gdb") == 0 && t->eu_stack)
			json_object_set_new(e, "collector", json_string("gdb"));
		/*
		 * a CPython process: its Python frames too (pystack.h), with a budget
		 * of their own (PYSTACK_TIMEOUT_MS: gdb loads the interpreter's debug
		 * symbols, seconds of CPU)
		 */
		if (state != 'Z' && state != 'X' && t->gdb && t->py_left > 0 && pystack_is_python(pid)) {
			char *pwhy = NULL;
			json_t *py = pystack_collect(pid, PYSTACK_TIMEOUT_MS, &pwhy);
			t->py_left--;
			unstop(pid, state, py == NULL); /* (no frames: gdb may have been killed at its budget) */
			if (py)
				json_object_set_new(e, "python", py);
			else
				json_object_set_new(e, "python_error",
						    json_string(pwhy ? pwhy : "no time was left for its Python frames"));
			free(pwhy);
		}
	} else {
		json_object_set_new(e, "stack", json_null());
	}
	free(stack);
	free(why);
	return e;
}

/* ---- the log tail ---------------------------------------------------------- */

/* The last lines non-empty lines of path's last EVIDENCE_LOG_BYTES, cleaned, in file order; *why on failure. */
static json_t *log_tail(const char *path, int lines, char **why)
{
	json_t *tail = json_array();
	char *buf = NULL, **got = NULL;
	const char *start, *end, *first;
	struct stat sb;
	ssize_t n;
	off_t from;
	int fd, k = 0;

	if (lines <= 0)
		return tail;
	if (lines > EVIDENCE_LOG_LINES_MAX)
		lines = EVIDENCE_LOG_LINES_MAX;
	/* O_NONBLOCK: a FIFO in its place must not hang the worker */
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		*why = xasprintf("cannot read the log %s: %s", path, fd < 0 ? strerror(errno) : "not a regular file");
		if (fd >= 0)
			close(fd);
		return tail;
	}
	from = sb.st_size > EVIDENCE_LOG_BYTES ? sb.st_size - EVIDENCE_LOG_BYTES : 0;
	buf = xmalloc(EVIDENCE_LOG_BYTES);
	n = pread(fd, buf, EVIDENCE_LOG_BYTES, from);
	close(fd);
	if (n < 0) {
		*why = xasprintf("cannot read the log %s: %s", path, strerror(errno));
		free(buf);
		return tail;
	}
	first = buf;
	if (from > 0) { /* the first line is only the end of one */
		const char *nl = memchr(buf, '\n', (size_t)n);
		first = nl ? nl + 1 : buf + n;
	}
	got = xcalloc((size_t)lines, sizeof(char *));
	end = buf + n;
	while (end > first && k < lines) {
		char *line;
		start = end;
		while (start > first && start[-1] != '\n')
			start--;
		if ((line = exec_clean_text(start, end, EVIDENCE_LINE_MAX)) != NULL)
			got[k++] = line;
		end = start > first ? start - 1 : first;
	}
	while (k > 0) {
		char *line = got[--k];
		json_t *s = json_string(line);
		json_array_append_new(tail, s ? s : json_string("(not UTF-8)"));
		free(line);
	}
	free(got);
	free(buf);
	return tail;
}

/* ---- the record ------------------------------------------------------------ */

static json_t *iso_now(void)
{
	int64_t ms = clock_wall_ms();
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	char buf[40];

	gmtime_r(&t, &tm);
	strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
	return json_sprintf("%s.%03dZ", buf, (int)(ms % 1000));
}

json_t *evidence_collect(const int *pids, int npids, const char *log_path, int log_lines, int64_t timeout_ms)
{
	struct tools t = {on_path("eu-stack"), on_path("gdb"), EVIDENCE_MAX_PYTHON};
	json_t *ev, *procs = json_array();
	char *why = NULL;
	int listed = 0;

	for (int i = 0; i < npids; i++) {
		if (listed == EVIDENCE_MAX_PROCS)
			break;
		json_array_append_new(procs, process_entry(pids[i], listed < EVIDENCE_MAX_STACKS, &t, timeout_ms));
		listed++;
	}
	ev = json_pack("{s:s,s:o}", "collector", t.eu_stack ? "eu-stack" : t.gdb ? "gdb" : "none", "processes", procs);
	if (npids > listed)
		json_object_set_new(ev, "processes_omitted", json_integer(npids - listed));
	json_object_set_new(ev, "log_tail", log_path ? log_tail(log_path, log_lines, &why) : json_array());
	if (why)
		json_object_set_new(ev, "log_error", json_string(why));
	free(why);
	json_object_set_new(ev, "at", iso_now());
	return ev;
}

/* ---- the summary ----------------------------------------------------------- */

/*
 * Appends the names of the first 3 frames of stack's first thread:
 * eu-stack's "#0  0x00007f… clock_nanosleep@GLIBC_2.2.5" and gdb's
 * "#0  0x00007f… in clock_nanosleep () from …" or "#1  main (argc=1) at …"
 * both give the name.
 */
static void frames(char *out, size_t cap, size_t *n, const char *stack)
{
	const char *p = stack;
	int got = 0;

	while (*p && got < 3) {
		const char *line = p, *q = p + strspn(p, " \t");
		size_t len = strcspn(line, "\n");
		p = line + len + (line[len] == '\n');
		if (got > 0 && (strncmp(q, "TID ", 4) == 0 || strncmp(q, "Thread ", 7) == 0))
			break; /* the next thread */
		if (*q != '#' || q[1] < '0' || q[1] > '9')
			continue;
		q++;
		q += strspn(q, "0123456789");
		q += strspn(q, " ");
		if (strncmp(q, "0x", 2) == 0) {
			q += strcspn(q, " \n");
			q += strspn(q, " ");
		}
		if (strncmp(q, "in ", 3) == 0)
			q += 3;
		len = strcspn(q, " (\n");
		if (len == 0)
			continue;
		if (*n < cap)
			*n += (size_t)snprintf(out + *n, cap - *n, " #%d %.*s", got, (int)(len > 64 ? 64 : len), q);
		got++;
	}
}

/* Appends where a Python process's threads are (the GIL's holder first, at most 3): " python: f (x.py:9) [LWP 42, GIL]" */
static void python_where(char *out, size_t cap, size_t *n, const json_t *py)
{
	const json_t *threads = json_object_get(py, "threads"), *t;
	json_int_t gil = json_integer_value(json_object_get(py, "gil_lwp"));
	size_t i;
	int shown = 0;

	if (py == NULL || *n >= cap)
		return;
	*n += (size_t)snprintf(out + *n, cap - *n, " python:");
	for (int pass = 0; pass < 2; pass++) {
		json_array_foreach(threads, i, t) {
			json_int_t lwp = json_integer_value(json_object_get(t, "lwp"));
			const char *where = json_string_value(json_object_get(t, "where"));
			if (where == NULL || (pass == 0) != (gil > 0 && lwp == gil) || shown == 3 || *n >= cap)
				continue;
			*n += (size_t)snprintf(out + *n, cap - *n, "%s %.160s [LWP %lld%s]", shown ? ";" : "", where,
					       (long long)lwp, gil > 0 && lwp == gil ? ", GIL" : "");
			shown++;
		}
	}
}

char *evidence_summary(const json_t *ev)
{
	const json_t *procs = json_object_get(ev, "processes");
	char *out = xcalloc(1, EVIDENCE_SUMMARY_MAX + 1);
	size_t used = 0, total = json_array_size(procs);

	for (size_t i = 0; i < total; i++) {
		const json_t *e = json_array_get(procs, i);
		const char *err = json_string_value(json_object_get(e, "error"));
		const char *stack = json_string_value(json_object_get(e, "stack"));
		const char *serr = json_string_value(json_object_get(e, "stack_error"));
		const char *comm = json_string_value(json_object_get(e, "comm"));
		const char *wchan = json_string_value(json_object_get(e, "wchan"));
		const char *state = json_string_value(json_object_get(e, "state"));
		int pid = (int)json_integer_value(json_object_get(e, "pid"));
		char line[512];
		size_t n;
		if (err) {
			n = (size_t)snprintf(line, sizeof(line), "pid %d: %.200s", pid, err);
		} else {
			n = (size_t)snprintf(line, sizeof(line), "pid %d (%.32s) %s wchan=%.64s:", pid, comm ? comm : "?",
					     state ? state : "?", wchan ? wchan : "-");
			if (stack)
				frames(line, sizeof(line) - 1, &n, stack);
			else if (n < sizeof(line))
				n += (size_t)snprintf(line + n, sizeof(line) - n, " no stack (%.200s)",
						      serr ? serr : "not collected");
			python_where(line, sizeof(line) - 1, &n, json_object_get(e, "python"));
		}
		if (n >= sizeof(line))
			n = sizeof(line) - 1;
		/* room for this line and, after it, the "… N more" of a cut */
		if (used + n + 1 + 32 > EVIDENCE_SUMMARY_MAX) {
			snprintf(out + used, EVIDENCE_SUMMARY_MAX + 1 - used, "... %zu more processes", total - i);
			return out;
		}
		memcpy(out + used, line, n);
		used += n;
		out[used++] = '\n';
	}
	if (used > 0)
		used--; /* no newline after the last line */
	out[used] = '\0';
	return out;
}

/* ---- the worker item ------------------------------------------------------- */

static void evidence_run(struct work *w, PGconn *conn)
{
	struct evidence_work *e = (struct evidence_work *)w;

	(void)conn;
	e->ev = evidence_collect(e->pids, e->npids, e->log_path, e->log_lines, e->timeout_ms);
}

struct evidence_work *evidence_work_new(const int *pids, int npids, const char *log_path, int log_lines,
					int64_t timeout_ms)
{
	struct evidence_work *e = xcalloc(1, sizeof(*e));

	e->w.run = evidence_run;
	if (npids > 0) {
		e->pids = xcalloc((size_t)npids, sizeof(int));
		memcpy(e->pids, pids, (size_t)npids * sizeof(int));
		e->npids = npids;
	}
	e->log_path = log_path ? xstrdup(log_path) : NULL;
	e->log_lines = log_lines;
	e->timeout_ms = timeout_ms;
	return e;
}

void evidence_work_free(struct evidence_work *w)
{
	if (w == NULL)
		return;
	free(w->pids);
	free(w->log_path);
	json_decref(w->ev);
	free(w);
}

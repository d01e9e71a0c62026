/*
 * pystack — see pystack.h. gdb runs as evidence.c's collectors do
 * (exec_capture_ex: its own process group, killed past the budget, output
 * bounded); the caller continues a process a killed gdb left stopped.
 * `set auto-solib-add off` spares gdb the shared libraries' symbols: the
 * interpreter is one executable on Debian, and py-bt needs only its own.
 */
#include "monitor/pystack.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec.h"
#include "lib/util.h"

int pystack_is_python(int pid)
{
	char link[64], exe[PATH_MAX];
	ssize_t n;
	const char *base;

	snprintf(link, sizeof(link), "/proc/%d/exe", pid);
	if ((n = readlink(link, exe, sizeof(exe) - 1)) <= 0)
		return 0;
	exe[n] = '\0';
	base = strrchr(exe, '/');
	base = base ? base + 1 : exe;
	return strncmp(base, "python", 6) == 0;
}

/* A frame line `  File "PATH", line N, in FUNC` as "FUNC (PATH:N)"; NULL when line is not one. */
static char *frame_where(const char *line, size_t len, int *stdlib)
{
	const char *p = line, *end = line + len, *path, *pe, *fn;
	long no;

	while (p < end && *p == ' ')
		p++;
	if (end - p < 7 || strncmp(p, "File \"", 6) != 0)
		return NULL;
	path = p + 6;
	if ((pe = memchr(path, '"', (size_t)(end - path))) == NULL || end - pe < 9 || strncmp(pe, "\", line ", 8) != 0)
		return NULL;
	no = strtol(pe + 8, NULL, 10);
	if ((fn = strstr(pe, ", in ")) == NULL || fn >= end)
		return NULL;
	fn += 5;
	*stdlib = strncmp(path, "/usr/lib/python", 15) == 0 || strncmp(path, "<frozen", 7) == 0;
	return xasprintf("%.*s (%.*s:%ld)", (int)(end - fn > 128 ? 128 : end - fn), fn,
			 (int)(pe - path > 256 ? 256 : pe - path), path, no);
}

/* "$N = VALUE" lines: the value of the k-th print (1-based), or NULL */
static const char *print_value(const char *out, int k)
{
	char tag[16];
	const char *p;

	snprintf(tag, sizeof(tag), "$%d = ", k);
	p = strstr(out, tag);
	return p ? p + strlen(tag) : NULL;
}

json_t *pystack_parse(const char *out, char **why)
{
	const char *p = out ? out : "", *first = NULL, *last = NULL, *locked, *holder;
	json_t *threads = json_array(), *r;
	json_t *cur = NULL;          /* the thread being read */
	int cur_best_stdlib = 1, frames = 0;
	char *stack, holder_hex[32] = "";
	long long gil_lwp = -1;

	/* the tracebacks: from the first thread header (or traceback) to the last frame line */
	while (*p) {
		const char *line = p;
		size_t len = strcspn(line, "\n");
		const char *lwp;
		char *where;
		int stdlib;
		p = line + len + (line[len] == '\n');
		if (strncmp(line, "Thread ", 7) == 0 && (lwp = strstr(line, "(LWP ")) != NULL && lwp < line + len) {
			const char *t = strstr(line, "(Thread ");
			cur = json_pack("{s:I,s:n,s:s#}", "lwp", (json_int_t)strtoll(lwp + 5, NULL, 10), "where",
					"pthread", t && t < lwp ? t + 8 : "", t && t < lwp ? (int)strcspn(t + 8, " ") : 0);
			json_array_append_new(threads, cur);
			cur_best_stdlib = 1;
			if (!first)
				first = line;
			continue;
		}
		if (strncmp(line, "Traceback (most recent call first):", 35) == 0) {
			if (!first)
				first = line;
			if (cur == NULL) { /* no thread header: one thread */
				cur = json_pack("{s:n,s:n,s:s}", "lwp", "where", "pthread", "");
				json_array_append_new(threads, cur);
				cur_best_stdlib = 1;
			}
			continue;
		}
		if (first && (strncmp(line, "  ", 2) == 0))
			last = line + len;
		if (cur && (where = frame_where(line, len, &stdlib)) != NULL) {
			frames++;
			/* the innermost frame outside the standard library, else the innermost */
			if (json_is_null(json_object_get(cur, "where")) || (cur_best_stdlib && !stdlib)) {
				json_object_set_new(cur, "where", json_string(where));
				cur_best_stdlib = stdlib;
			}
			free(where);
		}
	}
	if (frames == 0) {
		const char *u = strstr(out ? out : "", "Undefined command: \"py-bt\"");
		*why = xstrdup(u ? "gdb has no py-bt: CPython's gdb extension is not installed (Debian: python3-dbg)"
				 : "gdb showed no Python frame (an interpreter without its debug symbols?)");
		json_decref(threads);
		return NULL;
	}
	stack = xasprintf("%.*s\n", (int)(last - first), first);
	if (strlen(stack) > PYSTACK_MAX)
		snprintf(stack + PYSTACK_MAX - 40, 40, "\n... (cut at %d bytes)\n", PYSTACK_MAX);
	for (unsigned char *c = (unsigned char *)stack; *c; c++)
		if (*c >= 0x80 || (*c < 0x20 && *c != '\n'))
			*c = '?'; /* paths and code are the job's: keep the record valid, printable JSON */
	/* the GIL: locked, and its last holder's pthread id, matched to a thread's header */
	locked = print_value(out, 1);
	holder = print_value(out, 2);
	if (holder)
		snprintf(holder_hex, sizeof(holder_hex), "%.*s", (int)strcspn(holder, "\n "), holder);
	if (locked && *locked == '1' && holder_hex[0]) {
		size_t i;
		json_t *t;
		json_array_foreach(threads, i, t) {
			if (strcmp(json_string_value(json_object_get(t, "pthread")), holder_hex) == 0)
				gil_lwp = json_integer_value(json_object_get(t, "lwp"));
		}
	}
	{
		size_t i;
		json_t *t;
		json_array_foreach(threads, i, t)
			json_object_del(t, "pthread");
	}
	r = json_pack("{s:s,s:o}", "stack", stack, "threads", threads);
	if (gil_lwp > 0) {
		char *g = xasprintf("held by LWP %lld", gil_lwp);
		json_object_set_new(r, "gil", json_string(g));
		json_object_set_new(r, "gil_lwp", json_integer(gil_lwp));
		free(g);
	} else {
		json_object_set_new(r, "gil", json_string(locked && *locked == '0'
				    ? "not held: every thread released it (waiting on IO, a lock or a sleep)"
				    : "unknown"));
		json_object_set_new(r, "gil_lwp", json_null());
	}
	free(stack);
	return r;
}

json_t *pystack_collect(int pid, int64_t left_ms, char **why)
{
	char pidstr[16], *out = NULL;
	int status, rc;
	json_t *r;
	char *argv[] = {"gdb", "-p", pidstr, "-batch", "-nx", "-iex", "set auto-solib-add off",
			"-ex", "thread apply all py-bt",
			"-ex", "p (int)_PyRuntime.ceval.gil.locked._value",
			"-ex", "p/x (unsigned long)((PyThreadState *)_PyRuntime.ceval.gil.last_holder._value)->thread_id",
			NULL};

	snprintf(pidstr, sizeof(pidstr), "%d", pid);
	rc = exec_capture_ex(argv, &out, PYSTACK_MAX * 2, 1, &status, left_ms);
	if (rc < 0) {
		*why = xasprintf("gdb for Python frames: %s", ferry_error_last());
		free(out);
		return NULL;
	}
	r = pystack_parse(out, why);
	free(out);
	return r;
}

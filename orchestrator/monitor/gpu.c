/*
 * gpu — GPU readings for the job monitor (see gpu.h).
 *
 * nvidia-smi takes 50–500 ms to answer and can hang outright when the
 * driver is in trouble, so the engine never waits for it. One sampler per
 * daemon runs it as a child (`sh -c` running both queries, the compute
 * apps after a marker line) with its stdout on a non-blocking pipe.
 * gpu_sampler_poll, called every monitor round, reads what is there, takes
 * the readings once the pipe reaches its end, kills the child's process
 * group when it runs past the timeout, and starts the next run when a
 * period passed since the last start. A killed run's process group must be
 * gone before another starts (a driver stuck in the kernel would otherwise
 * collect one unkillable nvidia-smi per period), for at most
 * STUCK_WAIT_MS. The engine's stray reaper (the local type's tick) may reap
 * the child first: the pipe's end, not waitpid, says a run ended, and the
 * output is judged by its parse.
 *
 * One run answers for every job: gpu_for_job maps a job to its GPUs by the
 * pids running compute apps, else by its CUDA_VISIBLE_DEVICES-style list.
 * Memory is bounded: GPU_MAX GPUs, GPU_MAX_PROCS apps, OUT_MAX bytes of
 * output per run.
 */
#include "monitor/gpu.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/exec.h"
#include "exec/proc.h"
#include "lib/util.h"

extern char **environ;

#define OUT_MAX (256 * 1024)      /* one run's output; more is an error */
#define LINE_MAX_LEN 512          /* one CSV line; nvidia-smi's are under 120 bytes */
#define STUCK_WAIT_MS 60000       /* how long a killed run may linger before the next starts anyway */
#define APPS_MARK "#ferry-apps"

struct gpu_sampler {
	char *prog;            /* NULL: off */
	int64_t timeout_ms;
	/* the run in flight */
	pid_t pid;             /* 0: none */
	int64_t pid_start;     /* its start time (ticks), so a reused pid is never signalled */
	int fd;                /* the pipe's read end; -1 when none */
	int64_t started_ms;
	char *buf;
	size_t len;
	int overflow;
	int eof;               /* its output ended; its exit status is awaited (at most GPU_REAP_MS) */
	int64_t eof_ms;
	/* a killed run not yet gone */
	pid_t stuck;
	int64_t stuck_since_ms;
	int64_t last_start_ms;
	int started;           /* whether a run ever started (the first is due at once) */
	int failing;           /* the last run failed (log the next success or failure only once) */
	/* the latest readings */
	struct gpu_reading *gpus;
	int ngpus;
	struct gpu_proc *apps;
	int napps;
	int64_t at_ms, at_wall_ms; /* 0: no readings */
	char err[256];
};

/* ---- the parsers ------------------------------------------------------------ */

/* Copies the next line of *p (without its newline) into line; 0, or -1 when over LINE_MAX_LEN. */
static int next_line(const char **p, char line[LINE_MAX_LEN + 1])
{
	const char *s = *p, *nl = strchr(s, '\n');
	size_t n = nl ? (size_t)(nl - s) : strlen(s);

	*p = nl ? nl + 1 : s + n;
	if (n > 0 && s[n - 1] == '\r')
		n--;
	if (n > LINE_MAX_LEN)
		return -1;
	memcpy(line, s, n);
	line[n] = '\0';
	return 0;
}

static char *trim(char *s)
{
	size_t n;

	while (*s == ' ' || *s == '\t')
		s++;
	n = strlen(s);
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		s[--n] = '\0';
	return s;
}

/* Splits line at commas into at most max trimmed fields; returns how many there were. */
static int split(char *line, char **fields, int max)
{
	int n = 0;
	char *p = line;

	for (;;) {
		char *c = strchr(p, ',');
		if (c)
			*c = '\0';
		if (n < max)
			fields[n] = trim(p);
		n++;
		if (c == NULL)
			break;
		p = c + 1;
	}
	return n;
}

/* "[N/A]", "[Not Supported]", "[Unknown Error]", "N/A": nvidia-smi has no value there. */
static int no_value(const char *f)
{
	return f[0] == '[' || strcmp(f, "N/A") == 0;
}

/* A percentage: 0 with *out (-1 for no value), or -1 when f is not one. */
static int field_pct(const char *f, double *out)
{
	char *end;
	double v;

	if (no_value(f)) {
		*out = -1;
		return 0;
	}
	if (*f == '\0')
		return -1;
	errno = 0;
	v = strtod(f, &end);
	if (errno != 0 || *end != '\0' || !isfinite(v) || v < 0 || v > 100)
		return -1;
	*out = v;
	return 0;
}

/* A count of MiB (or a pid): 0 with *out (-1 for no value when na_ok), or -1. */
static int field_int(const char *f, int64_t *out, int na_ok)
{
	int64_t v;

	if (na_ok && no_value(f)) {
		*out = -1;
		return 0;
	}
	if (parse_int64(f, &v) < 0 || v < 0)
		return -1;
	*out = v;
	return 0;
}

static int field_uuid(const char *f, char uuid[64])
{
	size_t n = strlen(f);

	if (no_value(f)) {
		uuid[0] = '\0';
		return 0;
	}
	if (n == 0 || n >= 64 || strpbrk(f, " \t\"") != NULL)
		return -1;
	memcpy(uuid, f, n + 1);
	return 0;
}

int gpu_parse_query(const char *csv, struct gpu_reading **out, int *n)
{
	static const char fields_want[] = "index, uuid, utilization.gpu, memory.used, memory.total";
	struct gpu_reading *r = NULL;
	char line[LINE_MAX_LEN + 1], *f[5];
	const char *p = csv;
	int count = 0, lineno = 0;

	*out = NULL;
	*n = 0;
	while (*p) {
		struct gpu_reading g;
		int64_t idx;
		int nf;
		lineno++;
		if (next_line(&p, line) < 0) {
			ferry_error_set("nvidia-smi line %d: longer than %d bytes", lineno, LINE_MAX_LEN);
			goto invalid;
		}
		if (*trim(line) == '\0')
			continue;
		if ((nf = split(line, f, 5)) != 5) {
			ferry_error_set("nvidia-smi line %d: %d fields, expected 5 (%s)", lineno, nf, fields_want);
			goto invalid;
		}
		memset(&g, 0, sizeof(g));
		if (field_int(f[0], &idx, 0) < 0 || idx > 1000000) {
			ferry_error_set("nvidia-smi line %d: index \"%s\" is not a GPU index", lineno, f[0]);
			goto invalid;
		}
		g.index = (int)idx;
		if (field_uuid(f[1], g.uuid) < 0) {
			ferry_error_set("nvidia-smi line %d: uuid \"%.80s\" is not a GPU UUID", lineno, f[1]);
			goto invalid;
		}
		if (field_pct(f[2], &g.util) < 0) {
			ferry_error_set("nvidia-smi line %d: utilization.gpu \"%.80s\" is not a percentage", lineno,
					f[2]);
			goto invalid;
		}
		if (field_int(f[3], &g.mem_used_mb, 1) < 0 || field_int(f[4], &g.mem_total_mb, 1) < 0) {
			ferry_error_set("nvidia-smi line %d: memory \"%.80s\", \"%.80s\" is not a number of MiB",
					lineno, f[3], f[4]);
			goto invalid;
		}
		if (count == GPU_MAX) {
			ferry_error_set("nvidia-smi line %d: more than %d GPUs", lineno, GPU_MAX);
			goto invalid;
		}
		if (r == NULL)
			r = xcalloc(GPU_MAX, sizeof(*r));
		r[count++] = g;
	}
	*out = r;
	*n = count;
	return FERRY_OK;
invalid:
	free(r);
	return FERRY_EINVALID;
}

int gpu_parse_apps(const char *csv, struct gpu_proc **out, int *n)
{
	struct gpu_proc *r = NULL;
	char line[LINE_MAX_LEN + 1], *f[3], *t;
	const char *p = csv;
	int count = 0, cap = 0, lineno = 0;

	*out = NULL;
	*n = 0;
	while (*p) {
		struct gpu_proc a;
		int64_t pid;
		int nf;
		lineno++;
		if (next_line(&p, line) < 0) {
			ferry_error_set("nvidia-smi line %d: longer than %d bytes", lineno, LINE_MAX_LEN);
			goto invalid;
		}
		t = trim(line);
		/* older drivers say so in words even with noheader */
		if (*t == '\0' || strncmp(t, "No running", 10) == 0)
			continue;
		if ((nf = split(t, f, 3)) != 3) {
			ferry_error_set("nvidia-smi line %d: %d fields, expected 3 (pid, gpu_uuid, used_memory)",
					lineno, nf);
			goto invalid;
		}
		memset(&a, 0, sizeof(a));
		if (field_int(f[0], &pid, 0) < 0 || pid == 0 || pid > 0x7fffffff) {
			ferry_error_set("nvidia-smi line %d: pid \"%.80s\" is not a process id", lineno, f[0]);
			goto invalid;
		}
		a.pid = (int)pid;
		if (field_uuid(f[1], a.uuid) < 0) {
			ferry_error_set("nvidia-smi line %d: gpu_uuid \"%.80s\" is not a GPU UUID", lineno, f[1]);
			goto invalid;
		}
		if (field_int(f[2], &a.mem_mb, 1) < 0) {
			ferry_error_set("nvidia-smi line %d: used_memory \"%.80s\" is not a number of MiB", lineno,
					f[2]);
			goto invalid;
		}
		if (count == GPU_MAX_PROCS) {
			ferry_error_set("nvidia-smi line %d: more than %d compute processes", lineno, GPU_MAX_PROCS);
			goto invalid;
		}
		if (count == cap) {
			cap = cap ? cap * 2 : 16;
			r = xrealloc(r, (size_t)cap * sizeof(*r));
		}
		r[count++] = a;
	}
	*out = r;
	*n = count;
	return FERRY_OK;
invalid:
	free(r);
	return FERRY_EINVALID;
}

/* ---- the sampler ---------------------------------------------------------- */

/* name when it holds a slash, else the first executable name on PATH; NULL when none. */
static char *find_program(const char *name)
{
	const char *path = getenv("PATH"), *p;

	if (strchr(name, '/'))
		return access(name, X_OK) == 0 ? xstrdup(name) : NULL;
	for (p = path ? path : "/usr/bin:/bin"; *p;) {
		size_t n = strcspn(p, ":");
		char *cand = xasprintf("%.*s/%s", (int)n, n ? p : ".", name);
		struct stat sb;
		if (stat(cand, &sb) == 0 && S_ISREG(sb.st_mode) && access(cand, X_OK) == 0)
			return cand;
		free(cand);
		p += n;
		if (*p == ':')
			p++;
	}
	return NULL;
}

struct gpu_sampler *gpu_sampler_new(void)
{
	struct gpu_sampler *s = xcalloc(1, sizeof(*s));
	const char *env = getenv("FERRY_NVIDIA_SMI");

	s->fd = -1;
	s->timeout_ms = GPU_TIMEOUT_MS;
	if (env && *env == '\0') {
		flog_debug("gpu: FERRY_NVIDIA_SMI is empty: GPU sampling off");
	} else if (env) {
		if ((s->prog = find_program(env)) == NULL)
			flog_warn("gpu: FERRY_NVIDIA_SMI=%s is not an executable; GPU sampling off", env);
	} else if ((s->prog = find_program("nvidia-smi")) == NULL) {
		flog_debug("gpu: no nvidia-smi on PATH (no GPU on this host): GPU sampling off");
	}
	if (s->prog)
		flog_debug("gpu: sampling with %s", s->prog);
	return s;
}

int gpu_sampler_available(const struct gpu_sampler *s)
{
	return s && s->prog != NULL;
}

void gpu_sampler_set_timeout(struct gpu_sampler *s, int64_t timeout_ms)
{
	s->timeout_ms = timeout_ms > 0 ? timeout_ms : GPU_TIMEOUT_MS;
}

int gpu_sampler_busy(const struct gpu_sampler *s)
{
	return s && s->pid > 0;
}

int64_t gpu_sampler_readings_at(const struct gpu_sampler *s)
{
	return s ? s->at_ms : 0;
}

const char *gpu_sampler_error(const struct gpu_sampler *s)
{
	return s ? s->err : "";
}

static void clear_readings(struct gpu_sampler *s)
{
	free(s->gpus);
	free(s->apps);
	s->gpus = NULL;
	s->apps = NULL;
	s->ngpus = s->napps = 0;
	s->at_ms = s->at_wall_ms = 0;
}

/* Records why this run gave nothing, drops the readings, and warns when it is news. */
static void run_failed(struct gpu_sampler *s, const char *why)
{
	snprintf(s->err, sizeof(s->err), "%s", why);
	clear_readings(s);
	if (!s->failing)
		flog_warn("gpu: %s: %s (GPU readings off until it answers)", s->prog, s->err);
	s->failing = 1;
}

/*
 * Forgets the run in flight: the pipe closed, its output dropped. When it
 * was not reaped here (still exiting, or the engine's reaper took it), it
 * is remembered as stuck until its process group is gone.
 */
static void run_close(struct gpu_sampler *s, int64_t now_ms, int reaped)
{
	close(s->fd);
	s->fd = -1;
	if (!reaped) {
		s->stuck = s->pid;
		s->stuck_since_ms = now_ms;
	}
	s->pid = 0;
	free(s->buf);
	s->buf = NULL;
	s->len = 0;
	s->overflow = 0;
	s->eof = 0;
}

/*
 * Takes the readings from a finished run's output; have: whether its exit
 * status st is known (not when the engine's reaper took it).
 */
static void run_done(struct gpu_sampler *s, int64_t now_ms, int st, int have)
{
	struct gpu_reading *g = NULL;
	struct gpu_proc *a = NULL;
	char *out = s->buf ? s->buf : xstrdup(""), *mark, why[256];
	int ng = 0, na = 0, overflow = s->overflow;

	s->buf = NULL; /* out is ours now */
	run_close(s, now_ms, have);
	mark = strstr(out, APPS_MARK "\n");
	if (overflow) {
		snprintf(why, sizeof(why), "its output is over %d bytes", OUT_MAX);
		run_failed(s, why);
	} else if (have && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
		int n = (int)strcspn(out, "\n");
		if (WIFEXITED(st))
			snprintf(why, sizeof(why), "exit code %d: %.*s", WEXITSTATUS(st), n > 160 ? 160 : n, out);
		else
			snprintf(why, sizeof(why), "killed by signal %d", WTERMSIG(st));
		run_failed(s, why);
	} else if (mark == NULL) {
		run_failed(s, "its output lacks the compute-apps part (the GPU query failed)");
	} else {
		*mark = '\0';
		if (gpu_parse_query(out, &g, &ng) < 0 || gpu_parse_apps(mark + strlen(APPS_MARK) + 1, &a, &na) < 0) {
			run_failed(s, ferry_error_last());
			free(g);
		} else {
			clear_readings(s);
			s->gpus = g, s->ngpus = ng, s->apps = a, s->napps = na;
			s->at_ms = now_ms;
			s->at_wall_ms = clock_wall_ms();
			s->err[0] = '\0';
			if (s->failing)
				flog_info("gpu: %s answers again (%d GPUs)", s->prog, ng);
			s->failing = 0;
		}
	}
	free(out);
}

/*
 * Reads what the run wrote (non-blocking): 1 at the end of its output, 0
 * while more may come.
 */
static int run_drain(struct gpu_sampler *s)
{
	char chunk[8192];

	for (;;) {
		ssize_t n = read(s->fd, chunk, sizeof(chunk));
		if (n == 0)
			return 1;
		if (n < 0)
			return errno == EINTR ? 0 : errno == EAGAIN ? 0 : 1;
		if (s->len + (size_t)n > OUT_MAX) {
			s->overflow = 1; /* keep reading to its end, keep nothing more */
			continue;
		}
		s->buf = xrealloc(s->buf, s->len + (size_t)n + 1);
		memcpy(s->buf + s->len, chunk, (size_t)n);
		s->len += (size_t)n;
		s->buf[s->len] = '\0';
	}
}

/* Starts one run: both queries, the apps after a marker line; stdout on a pipe. */
static void run_start(struct gpu_sampler *s, int64_t now_ms)
{
	static const char script[] =
		"\"$1\" --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total "
		"--format=csv,noheader,nounits || exit $?; echo '" APPS_MARK "'; "
		"exec \"$1\" --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits";
	char *av[] = {"sh", "-c", (char *)script, "sh", s->prog, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	int fds[2], err;
	pid_t pid;

	s->last_start_ms = now_ms;
	s->started = 1;
	if (pipe2(fds, O_CLOEXEC) != 0) {
		char why[128];
		snprintf(why, sizeof(why), "pipe: %s", strerror(errno));
		run_failed(s, why);
		return;
	}
	/* only our end is non-blocking: nvidia-smi writes as it always does */
	fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	/* its own process group: a timeout kills nvidia-smi with the shell */
	exec_spawnattr_child(&at);
	err = posix_spawn(&pid, "/bin/sh", &fa, &at, av, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(fds[1]);
	if (err != 0) {
		char why[160];
		close(fds[0]);
		snprintf(why, sizeof(why), "cannot run /bin/sh: %s", strerror(err));
		run_failed(s, why);
		return;
	}
	s->pid = pid;
	s->pid_start = exec_pid_start(pid);
	s->fd = fds[0];
	s->started_ms = now_ms;
	s->len = 0;
	s->overflow = 0;
	s->eof = 0;
}

/*
 * Whether the last run is still around: not reaped, or its process group
 * still has members (a killed nvidia-smi stuck in the driver). Reaps it
 * when it can; gives up waiting after STUCK_WAIT_MS.
 */
static int stuck_run(struct gpu_sampler *s, int64_t now_ms)
{
	if (s->stuck == 0)
		return 0;
	if (now_ms - s->stuck_since_ms < STUCK_WAIT_MS &&
	    (waitpid(s->stuck, NULL, WNOHANG) == 0 || kill(-s->stuck, 0) == 0))
		return 1;
	if (now_ms - s->stuck_since_ms >= STUCK_WAIT_MS)
		flog_warn("gpu: a killed %s (process group %d) is still there after %d s; starting another",
			  s->prog, (int)s->stuck, STUCK_WAIT_MS / 1000);
	s->stuck = 0;
	return 0;
}

void gpu_sampler_poll(struct gpu_sampler *s, int64_t now_ms, int64_t period_ms)
{
	if (s == NULL || s->prog == NULL)
		return;
	if (s->pid > 0) {
		if (!s->eof && run_drain(s)) {
			s->eof = 1;
			s->eof_ms = now_ms;
		}
		if (s->eof) {
			/*
			 * The pipe ends while the child is still exiting: its
			 * status comes on this poll or a later one.
			 */
			int st = 0;
			pid_t r = waitpid(s->pid, &st, WNOHANG);
			if (r == s->pid)
				run_done(s, now_ms, st, 1);
			else if (r < 0 || now_ms - s->eof_ms >= GPU_REAP_MS)
				run_done(s, now_ms, 0, 0);
		}
		if (s->pid > 0 && now_ms - s->started_ms >= s->timeout_ms) {
			char why[128];
			/* the start time guards against a pid the engine's reaper freed and the kernel reused
			   (a zombie still has it: then the group is still ours) */
			if (s->pid_start != 0 && exec_pid_start(s->pid) == s->pid_start)
				kill(-s->pid, SIGKILL);
			run_close(s, now_ms, 0);
			snprintf(why, sizeof(why), "no answer within %lld ms; killed", (long long)s->timeout_ms);
			run_failed(s, why);
		}
	}
	if (s->pid == 0 && !stuck_run(s, now_ms) && (!s->started || now_ms - s->last_start_ms >= period_ms))
		run_start(s, now_ms);
}

void gpu_sampler_free(struct gpu_sampler *s)
{
	pid_t pid;
	int64_t until;

	if (s == NULL)
		return;
	if (s->pid > 0) {
		pid = s->pid;
		if (s->pid_start != 0 && exec_pid_start(s->pid) == s->pid_start)
			kill(-s->pid, SIGKILL);
		close(s->fd);
		until = clock_mono_ms() + GPU_REAP_MS;
		/* bounded: a child stuck in the driver is left to the engine's reaper */
		while (waitpid(pid, NULL, WNOHANG) == 0 && clock_mono_ms() < until)
			usleep(2000);
	}
	if (s->stuck > 0)
		waitpid(s->stuck, NULL, WNOHANG);
	free(s->buf);
	clear_readings(s);
	free(s->prog);
	free(s);
}

/* ---- what the readings say ------------------------------------------------ */

static json_t *int_or_null(int64_t v)
{
	return v < 0 ? json_null() : json_integer(v);
}

static json_t *gpu_json(const struct gpu_reading *g)
{
	return json_pack("{s:i,s:s,s:o,s:o,s:o}", "index", g->index, "uuid", g->uuid, "util",
			 g->util < 0 ? json_null() : json_real(g->util), "mem_used_mb", int_or_null(g->mem_used_mb),
			 "mem_total_mb", int_or_null(g->mem_total_mb));
}

/* The GPU whose UUID is tok or starts with it (unique), or -1; CUDA accepts such prefixes. */
static int find_uuid(const struct gpu_sampler *s, const char *tok)
{
	size_t n = strlen(tok);
	int found = -1;

	for (int i = 0; i < s->ngpus; i++) {
		if (strcmp(s->gpus[i].uuid, tok) == 0)
			return i;
		if (n >= 5 && strncmp(s->gpus[i].uuid, tok, n) == 0) {
			if (found >= 0)
				return -1; /* ambiguous */
			found = i;
		}
	}
	return found;
}

/*
 * Marks the GPUs visible names. Indexes are matched against nvidia-smi's
 * (PCI bus order); CUDA orders by speed unless CUDA_DEVICE_ORDER=PCI_BUS_ID,
 * which differs only on machines with mixed GPU models.
 */
static void mark_visible(const struct gpu_sampler *s, const char *visible, char *sel)
{
	const char *p = visible;

	if (visible == NULL) {
		memset(sel, 1, (size_t)s->ngpus);
		return;
	}
	while (*p) {
		size_t n = strcspn(p, ",");
		char tok[80];
		int64_t idx;
		if (n < sizeof(tok)) {
			char *t;
			memcpy(tok, p, n);
			tok[n] = '\0';
			t = trim(tok);
			if (parse_int64(t, &idx) == 0) {
				for (int i = 0; i < s->ngpus; i++)
					if (s->gpus[i].index == idx)
						sel[i] = 1;
			} else if (*t) {
				int i = find_uuid(s, t);
				if (i >= 0)
					sel[i] = 1;
			}
		}
		p += n;
		if (*p == ',')
			p++;
	}
}

int gpu_for_job(const struct gpu_sampler *s, const int *pids, int npids, int want_gpus, const char *visible,
		double *util, int64_t *mem_mb, json_t **per_gpu)
{
	char sel[GPU_MAX] = {0};
	int any = 0, nutil = 0, nmem = 0;
	double usum = 0;
	int64_t msum = 0;
	json_t *list = NULL;

	if (per_gpu)
		*per_gpu = NULL;
	if (s == NULL || s->at_ms == 0 || s->ngpus == 0)
		return 0;
	for (int a = 0; a < s->napps; a++) {
		for (int k = 0; k < npids; k++) {
			if (s->apps[a].pid != pids[k])
				continue;
			for (int i = 0; i < s->ngpus; i++)
				if (strcmp(s->gpus[i].uuid, s->apps[a].uuid) == 0)
					sel[i] = 1, any = 1;
		}
	}
	if (!any && want_gpus > 0)
		mark_visible(s, visible, sel);
	if (per_gpu)
		list = json_array();
	for (int i = 0; i < s->ngpus; i++) {
		if (!sel[i])
			continue;
		if (s->gpus[i].util >= 0)
			usum += s->gpus[i].util, nutil++;
		if (s->gpus[i].mem_used_mb >= 0)
			msum += s->gpus[i].mem_used_mb, nmem++;
		if (list)
			json_array_append_new(list, gpu_json(&s->gpus[i]));
	}
	if (nutil == 0) {
		json_decref(list);
		return 0;
	}
	*util = usum / nutil;
	*mem_mb = nmem ? msum : -1;
	if (per_gpu)
		*per_gpu = list;
	return 1;
}

json_t *gpu_snapshot(const struct gpu_sampler *s)
{
	json_t *gpus, *apps;

	if (s == NULL || s->at_ms == 0)
		return NULL;
	gpus = json_array();
	apps = json_array();
	for (int i = 0; i < s->ngpus; i++)
		json_array_append_new(gpus, gpu_json(&s->gpus[i]));
	for (int i = 0; i < s->napps; i++)
		json_array_append_new(apps, json_pack("{s:i,s:s,s:o}", "pid", s->apps[i].pid, "uuid",
						      s->apps[i].uuid, "mem_mb", int_or_null(s->apps[i].mem_mb)));
	return json_pack("{s:o,s:o,s:I}", "gpus", gpus, "apps", apps, "at_ms", (json_int_t)s->at_wall_ms);
}

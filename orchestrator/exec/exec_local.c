/*
 * exec_local — the local process executor, the `local` row of the executor
 * table (see exec.h). It starts a small supervisor (the shim, bin/ferry-shim,
 * exec_shim_run) per attempt with posix_spawn, which copies nothing of the
 * daemon (a fork copied its page tables: +1-3 ms a job at 20-50 MB
 * resident, paid on the engine loop and growing with the daemon's memory;
 * a fork is still the fallback where ferry-shim is missing), or hands the
 * attempt to the spare shim started ahead of it (exec_spare.c). The shim
 * starts a new session (so the job is one process group the engine can
 * signal), writes its pid and start time to DIR/status, starts the
 * command (vfork + exec) with stdout and stderr appended to DIR/log (through
 * a pipe it copies with the step's secrets masked, logmask.h, when the
 * step has any), waits for it and appends how it ended to DIR/status. Because the shim outlives
 * a killed daemon, and its pid is in DIR/status before the command runs, a restarted daemon re-adopts the job (same
 * pid and start time) or reads its status even when the daemon died before
 * it could record the handle in the database. The handle is
 * {"pid": PID, "start": TICKS}.
 *
 * The child side of the fallback's fork() runs in a possibly
 * multi-threaded process, so between fork and exec it only makes
 * async-signal-safe calls on data prepared beforehand.
 */
#include "exec/exec.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/exec_shim.h"
#include "exec/exec_spare.h"
#include "exec/logmask.h"
#include "exec/proc.h"
#include "lib/jobfile.h"
#include "lib/util.h"

extern char **environ;

/*
 * The daemon's own FERRY_* variables (its settings and secrets: the API
 * token, the database URL, the listen address, …) are not the job's: a job
 * sees the FERRY_* variables Ferry sets for it and nothing else of that
 * name, so it reads the same values under any daemon, and under `ferry dev
 * step` (which runs a job again from the shell's environment).
 */
static int env_hide(const char *entry, int switched)
{
	if (strncmp(entry, "FERRY_", 6) == 0 || strncmp(entry, "PGPASSWORD=", 11) == 0 ||
	    strncmp(entry, "PGPASSFILE=", 11) == 0)
		return 1;
	/* a job run as the job user gets that user's HOME and names, not the daemon's */
	return switched && (strncmp(entry, "HOME=", 5) == 0 || strncmp(entry, "USER=", 5) == 0 ||
			    strncmp(entry, "LOGNAME=", 8) == 0 || strncmp(entry, "PATH=", 5) == 0);
}

/*
 * One entry a variable in envp (k of them): the last of those that name it,
 * so what is added later (the step's env:, then its secrets) replaces what
 * it inherited, except Ferry's own, envp[fixed_from, fixed_to) (where its
 * outputs go, its attempt, …), which nothing replaces. Left twice, a
 * program saw either (getenv the first: a step's PATH did not reach the
 * command's lookup; Python's os.environ the last). Returns the new count.
 */
static size_t env_one_each(char **envp, size_t k, size_t fixed_from, size_t fixed_to)
{
	size_t n = 0;

	for (size_t i = 0; i < k; i++) {
		size_t len = strcspn(envp[i], "=");
		int fixed = i >= fixed_from && i < fixed_to, drop = 0;
		for (size_t j = 0; j < k && !fixed && !drop; j++)
			drop = j != i && (j > i || (j >= fixed_from && j < fixed_to)) &&
			       strncmp(envp[i], envp[j], len + 1) == 0;
		if (drop)
			free(envp[i]);
		else
			envp[n++] = envp[i];
	}
	envp[n] = NULL;
	return n;
}

/* Builds envp: the daemon's environment less its FERRY_* settings, Ferry's, then the step's (env_one_each). */
static char **build_env(const struct exec_spec *c, const char *dir, const char *out,
			 const char *ckpt)
{
	json_t *env = c->env, *v;
	size_t n = 0, k = 0, fixed, fixed_end;
	const char *key;
	const struct exec_user *u = exec_user_get();
	char **envp;

	while (environ[n])
		n++;
	envp = xcalloc(n + json_object_size(env) + json_object_size(c->secrets) + 16, sizeof(char *));
	for (size_t i = 0; i < n; i++) {
		if (env_hide(environ[i], u != NULL))
			continue;
		envp[k++] = xstrdup(environ[i]);
	}
	if (u) {
		envp[k++] = xasprintf("HOME=%s", u->home);
		envp[k++] = xasprintf("USER=%s", u->name);
		envp[k++] = xasprintf("LOGNAME=%s", u->name);
		if (getenv("PATH"))
			envp[k++] = xasprintf("PATH=%s", u->path);
	}
	fixed = k;
	envp[k++] = xasprintf("FERRY_RUN_ID=%lld", (long long)c->run_id);
	envp[k++] = xasprintf("FERRY_STEP=%s", c->name);
	envp[k++] = xasprintf("FERRY_ATTEMPT=%d", c->attempt);
	envp[k++] = xasprintf("FERRY_OUTPUT_DIR=%s", out);
	envp[k++] = xasprintf("FERRY_ATTEMPT_DIR=%s", dir);
	envp[k++] = xasprintf("FERRY_CHECKPOINT_DIR=%s", ckpt);
	/* what the monitor reads (monitor.md): touched, a phase named, metrics appended */
	envp[k++] = xasprintf("FERRY_HEARTBEAT=%s/heartbeat", dir);
	envp[k++] = xasprintf("FERRY_PHASE=%s/phase", dir);
	envp[k++] = xasprintf("FERRY_METRICS_FILE=%s/metrics.jsonl", dir);
	fixed_end = k;
	json_object_foreach(env, key, v)
		envp[k++] = xasprintf("%s=%s", key, json_string_value(v));
	/* the step's secrets, opened by the engine (never in its spec or env:) */
	json_object_foreach(c->secrets, key, v)
		envp[k++] = xasprintf("%s=%s", key, json_string_value(v));
	envp[k] = NULL;
	env_one_each(envp, k, fixed, fixed_end);
	return envp;
}

static void free_vec(char **v)
{
	for (size_t i = 0; v && v[i]; i++) {
		explicit_bzero(v[i], strlen(v[i])); /* an environment may hold a secret's value */
		free(v[i]);
	}
	free(v);
}

static int read_status_file(const char *dir, pid_t *pid, int64_t *start, int *exit_code, int *sig);

int exec_local_cmd_make(struct exec_local_cmd *x, const struct exec_spec *c, const char *dir,
			const char *out, const char *ckpt)
{
	json_t *cmd = c->command, *v;
	const char *wd = c->workdir;
	size_t i;

	memset(x, 0, sizeof(*x));
	if (json_array_size(cmd) == 0) {
		ferry_error_set("step %s has no command", c->name);
		return FERRY_EINVALID;
	}
	if (wd && wd[0] == '/')
		x->cwd = xstrdup(wd);
	else if (wd && c->run_workdir)
		x->cwd = xasprintf("%s/%s", c->run_workdir, wd);
	else if (wd)
		x->cwd = xasprintf("%s/%s", dir, wd);
	else
		x->cwd = xstrdup(c->run_workdir ? c->run_workdir : dir);
	if (wd) {
		/* a step's own workdir: inside FERRY_ALLOWED_ROOTS when set (the run's directory counts) */
		char *real = realpath(x->cwd, NULL);
		int ok = real == NULL || exec_user_may_read(real, "workdir", c->run_workdir, c->home);
		free(real);
		if (!ok) {
			free(x->cwd);
			x->cwd = NULL;
			return FERRY_EINVALID;
		}
	}
	x->argv = xcalloc(json_array_size(cmd) + 1, sizeof(char *));
	json_array_foreach(cmd, i, v)
		x->argv[i] = xstrdup(json_string_value(v));
	x->envp = build_env(c, dir, out, ckpt);
	return FERRY_OK;
}

void exec_local_cmd_dispose(struct exec_local_cmd *x)
{
	free_vec(x->argv);
	free_vec(x->envp);
	free(x->cwd);
	memset(x, 0, sizeof(*x));
}

/*
 * A step with warm: started as a fork of its warm server (exec_warm.c): 1 with
 * the supervisor's pid and start time; else 0, the reason it starts cold
 * appended to its log. A server that took the request but did not answer
 * may have started the job all the same: DIR/status then names it.
 */
static int warm_or_note(const struct exec_spec *c, const struct exec_local_cmd *x, const char *dir,
			const char *log, const char *status, const struct logmask *mask, pid_t *pid,
			int64_t *start)
{
	char *note = NULL;
	int code, sig, fd;

	(void)unlink(status);
	if (warm_start(c, x, log, status, mask, pid, start, &note))
		return 1;
	*pid = 0;
	read_status_file(dir, pid, start, &code, &sig);
	if (*pid > 0) {
		free(note);
		return 1;
	}
	if (note && (fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) >= 0) {
		char *line = xasprintf("ferry: this attempt starts cold: %s\n", note);
		(void)fd_write_all(fd, line, strlen(line));
		free(line);
		close(fd);
	}
	free(note);
	return 0;
}

static const char *shim_path;
static pthread_once_t shim_once = PTHREAD_ONCE_INIT;

/* bin/ferry-shim beside this program (ferryd, or ferry for `ferry dev`), if it is there. */
static void find_shim(void)
{
	static char path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - sizeof("/ferry-shim"));
	char *slash;

	if (n <= 0)
		return;
	path[n] = '\0';
	if ((slash = strrchr(path, '/')) == NULL)
		return;
	snprintf(slash, sizeof(path) - (size_t)(slash - path), "/ferry-shim");
	if (access(path, X_OK) == 0)
		shim_path = path;
	else
		flog_warn("%s is missing: each local job's supervisor is a fork of this process instead "
			  "(slower as its memory grows; make install puts ferry-shim beside ferryd)", path);
}

/* The type's per-daemon state: none; the shim looked for at the start, where its absence is said once. */
static void *local_init(const char *home)
{
	(void)home;
	pthread_once(&shim_once, find_shim);
	return NULL;
}

/* The shim as a fork of this process (ferry-shim missing, or its exec refused). */
static pid_t fork_shim(const struct exec_local_cmd *x, const char *log, const char *status, struct logmask *mask,
		       int64_t *start)
{
	const struct exec_user *u = exec_user_get();
	pid_t pid = fork();

	if (pid < 0) {
		ferry_error_set("fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		struct exec_shim_user su = {u ? u->uid : 0, u ? u->gid : 0, u ? u->ngroups : 0, u ? u->groups : NULL};
		exec_shim_run(x->argv, x->envp, x->cwd, log, status, mask, u ? &su : NULL);
	}
	setpgid(pid, pid); /* also done by the shim's setsid; closes the race for kill(-pid) */
	*start = exec_pid_start(pid);
	return pid;
}

/*
 * Starts the shim of command x: bin/ferry-shim through posix_spawn (the
 * kernel's vfork: nothing of the daemon's memory is copied), its own
 * session from the start (so kill(-pid) reaches it at once), every signal
 * unblocked and at its default; a fork of the daemon where ferry-shim is
 * missing, or where the kernel refuses the command's arguments and
 * environment (E2BIG: that shim's exec of the command fails, and its log
 * says why). Its pid, or -1 with the error set.
 */
static pid_t start_shim(const struct exec_local_cmd *x, const struct exec_spec *c, const char *log,
			const char *status, struct logmask *mask, int64_t *start)
{
	const struct exec_user *u = exec_user_get();
	posix_spawnattr_t attr;
	size_t nargs = 0, k = 0;
	char **argv;
	const char *key;
	json_t *v;
	pid_t pid;
	int rc = 0;

	pthread_once(&shim_once, find_shim);
	if (shim_path == NULL)
		return fork_shim(x, log, status, mask, start);
	while (x->argv[nargs])
		nargs++;
	argv = xcalloc(nargs + 2 * json_object_size(c->secrets) + 16, sizeof(*argv));
	argv[k++] = xstrdup("ferry-shim");
	if (u) {
		char groups[sizeof(u->groups) / sizeof(u->groups[0]) * 12 + 1];
		size_t len = 0;
		for (int i = 0; i < u->ngroups; i++)
			len += (size_t)snprintf(groups + len, sizeof(groups) - len, "%s%d", i ? "," : "", (int)u->groups[i]);
		argv[k++] = xstrdup("-u"), argv[k++] = xasprintf("%d", (int)u->uid);
		argv[k++] = xstrdup("-g"), argv[k++] = xasprintf("%d", (int)u->gid);
		if (u->ngroups > 0)
			argv[k++] = xstrdup("-G"), argv[k++] = xstrdup(groups);
	}
	/* the secrets by name: the shim reads their values from the job's environment (build_env put them last) */
	json_object_foreach(c->secrets, key, v)
		argv[k++] = xstrdup("-m"), argv[k++] = xstrdup(key);
	argv[k++] = xstrdup("--");
	argv[k++] = xstrdup(log), argv[k++] = xstrdup(status), argv[k++] = xstrdup(x->cwd);
	for (size_t i = 0; i < nargs; i++)
		argv[k++] = xstrdup(x->argv[i]);
	/* the spare, if one is ready (exec_spare.c): the same shim with the same arguments, started already */
	if ((pid = exec_spare_take(argv, x->envp, start)) <= 0) {
		exec_spawnattr_session(&attr);
		rc = posix_spawn(&pid, shim_path, NULL, &attr, argv, x->envp);
		posix_spawnattr_destroy(&attr);
		*start = rc == 0 ? exec_pid_start(pid) : 0;
		exec_spare_enable(shim_path); /* the next job's shim is started ahead from now on */
	}
	for (size_t i = 0; i < k; i++)
		free(argv[i]);
	free(argv);
	/* too large for the kernel: the fork's shim fails the command's exec and says so in its log (E2BIG) */
	if (rc == E2BIG)
		return fork_shim(x, log, status, mask, start);
	if (rc != 0) {
		ferry_error_set("starting %s: %s", shim_path, strerror(rc));
		return -1;
	}
	return pid;
}

int exec_local_start(struct exec_job *job, const struct exec_spec *c)
{
	struct exec_local_cmd x = {0};
	char *dir = NULL, *out = NULL, *log = NULL, *status = NULL, *ckpt = NULL;
	struct logmask *mask = NULL;
	pid_t pid;
	int error = FERRY_ERROR;

	exec_job_begin(job, &exec_local, c);
	if (exec_attempt_dirs(c, &dir, &out, &ckpt) < 0)
		goto out;
	log = xasprintf("%s/log", dir);
	status = xasprintf("%s/status", dir);

	if ((error = exec_local_cmd_make(&x, c, dir, out, ckpt)) < 0)
		goto out;
	error = FERRY_ERROR;

	mask = logmask_new(c->secrets);
	if (c->warm && warm_or_note(c, &x, dir, log, status, mask, &pid, &job->pid_start)) {
		/* reparented to us (the subreaper) as the server's middle fork exited: a child, unless gone already */
		char st[1024];
		long long ppid = 0;
		job->child = exec_proc_stat(st, sizeof(st), pid) == 0 && exec_stat_field(st, 4, &ppid) == 0 &&
			     ppid == (long long)getpid();
	} else {
		if ((pid = start_shim(&x, c, log, status, mask, &job->pid_start)) < 0)
			goto out;
		job->child = 1;
	}
	job->pid = pid;
	job->handle = json_pack("{s:i, s:I}", "pid", (int)pid, "start", (json_int_t)job->pid_start);
	job->dir = dir;
	dir = NULL;
	if (c->timeout_ms > 0)
		job->deadline_ms = clock_mono_ms() + c->timeout_ms;
	error = FERRY_OK;
out:
	free(dir), free(out), free(log), free(status), free(ckpt);
	exec_local_cmd_dispose(&x);
	logmask_free(mask);
	return error;
}

static int local_start(struct exec_job *job, const struct exec_spec *c, enum exec_mode mode, struct exec_status *st)
{
	(void)mode, (void)st; /* a service is a process that keeps running: nothing differs */
	return exec_local_start(job, c);
}

/* The job ended: how, from DIR/status. */
static void local_ended(const struct exec_job *job, struct exec_status *st)
{
	memset(st, 0, sizeof(*st));
	if (!exec_read_status(job->dir, &st->exit_code, &st->signal)) {
		/* counts as a try: a job that signals its own process group takes its supervisor with it */
		st->exit_code = -1;
		st->reason = xstrdup("the job's supervisor was killed before it could record the exit "
				     "status (did the job signal its own process group?)");
		/*
		 * and what is left of the job goes with it (its process group, the supervisor's pid, which
		 * no new process can take while a member lives): an attempt called failed whose command
		 * runs on would run beside its retry, on the same directories
		 */
		if (job->pid > 0 && kill(-job->pid, SIGKILL) == 0)
			flog_warn("run %lld step %s attempt %d: its supervisor is gone: what was left of its job "
				  "was killed", (long long)job->run_id, job->name, job->attempt);
	}
}

static int local_poll(struct exec_job *job, struct exec_status *st)
{
	if (job->child) {
		int wst;
		pid_t r = waitpid(job->pid, &wst, WNOHANG);
		if (r == 0)
			return 0;
		if (r < 0 && errno != ECHILD)
			return 0;
		/* reaped now, or earlier by the strays' reaper: either way it is gone */
		job->child = 0;
	} else if (exec_pid_alive(job->pid, job->pid_start)) {
		return 0;
	}
	local_ended(job, st);
	return 1;
}

static void local_signal(const struct exec_job *job, int sig)
{
	if (job->pid > 0)
		kill(-job->pid, sig);
}

/*
 * The lines of DIR/status: "pid PID START" (written before the command
 * runs), then "exit N" or "signal N". Fills what it finds; the caller's
 * defaults stay otherwise. Returns whether an end line was there.
 */
static int read_status_file(const char *dir, pid_t *pid, int64_t *start, int *exit_code, int *sig)
{
	char *buf = NULL, *line, *next;
	int ended = 0;

	if (jobfile_read(&buf, NULL, dir, "status", EXEC_STATUS_MAX) == FERRY_OK) {
		for (line = buf; line && *line; line = next) {
			int64_t v, t;
			pid_t p;
			next = strchr(line, '\n');
			if (next == NULL)
				break; /* a line still being written */
			*next++ = '\0';
			if (exec_status_pid(line, &p, &t)) {
				if (pid)
					*pid = p, *start = t;
			} else if (strncmp(line, "exit ", 5) == 0 && parse_int64(line + 5, &v) == 0) {
				*exit_code = (int)v;
				ended = 1;
			} else if (strncmp(line, "signal ", 7) == 0 && parse_int64(line + 7, &v) == 0) {
				*sig = (int)v;
				ended = 1;
			}
		}
	}
	free(buf);
	return ended;
}

static int local_adopt(struct exec_job *job, struct exec_status *st)
{
	json_t *h = job->handle;

	job->child = 0;
	if (json_integer_value(json_object_get(h, "pid")) > 0) {
		job->pid = (pid_t)json_integer_value(json_object_get(h, "pid"));
		job->pid_start = json_integer_value(json_object_get(h, "start"));
	} else {
		int code, sig;
		job->pid = 0;
		if (job->dir)
			read_status_file(job->dir, &job->pid, &job->pid_start, &code, &sig);
		if (job->pid <= 0) {
			ferry_error_set("no handle was recorded and the attempt directory holds no pid");
			return FERRY_ENOTFOUND;
		}
		json_decref(job->handle);
		job->handle = json_pack("{s:i, s:I}", "pid", (int)job->pid, "start",
					(json_int_t)job->pid_start);
	}
	/* alive first, then the status: the shim writes the status before it exits */
	if (exec_pid_alive(job->pid, job->pid_start))
		return 1;
	memset(st, 0, sizeof(*st));
	if (job->dir && exec_read_status(job->dir, &st->exit_code, &st->signal))
		return 0;
	ferry_error_set("its supervisor (pid %d) is gone and left no exit status", (int)job->pid);
	return FERRY_ENOTFOUND;
}

/* Adds the IO counters and CPU time (its own and its reaped children's) of pid to out; 0 when readable. */
static int add_process(struct exec_sample *out, pid_t pid, long ticks)
{
	static const struct {
		const char *key;
		size_t off;
	} io[] = {
		{"rchar: ", offsetof(struct exec_sample, rchar)},
		{"wchar: ", offsetof(struct exec_sample, wchar)},
		{"read_bytes: ", offsetof(struct exec_sample, read_bytes)},
		{"write_bytes: ", offsetof(struct exec_sample, write_bytes)},
	};
	char path[64], buf[1024];
	long long ut, st, cut, cst;
	FILE *f;
	int ok = 0;

	snprintf(path, sizeof(path), "/proc/%d/io", (int)pid);
	f = fopen(path, "re");
	if (f) {
		while (fgets(buf, sizeof(buf), f)) {
			for (size_t k = 0; k < sizeof(io) / sizeof(io[0]); k++) {
				size_t n = strlen(io[k].key);
				if (strncmp(buf, io[k].key, n) == 0)
					*(int64_t *)((char *)out + io[k].off) += strtoll(buf + n, NULL, 10);
			}
		}
		fclose(f);
		ok = 1;
	}
	/* utime 14, stime 15, cutime 16, cstime 17 */
	if (exec_proc_stat(buf, sizeof(buf), pid) == 0 && exec_stat_field(buf, 14, &ut) == 0 &&
	    exec_stat_field(buf, 15, &st) == 0 && exec_stat_field(buf, 16, &cut) == 0 &&
	    exec_stat_field(buf, 17, &cst) == 0)
		out->cpu_ms += (ut + st + cut + cst) * 1000 / ticks;
	return ok ? 0 : -1;
}

/*
 * Which process group each process is in, from one pass over /proc shared
 * by every job a monitor round samples: with N jobs and P processes a
 * round reads P stat files, not N × P. Kept PROCS_FRESH_MS; engine thread
 * only (the monitor's look, the evidence's pids).
 */
#define PROCS_FRESH_MS 100
static struct {
	int64_t at_ms;
	int n, cap;
	struct { pid_t pid, pgid; } *v;
} procs;

static void procs_refresh(void)
{
	int64_t now = clock_mono_ms();
	DIR *d;
	struct dirent *de;

	if (procs.at_ms && now - procs.at_ms < PROCS_FRESH_MS)
		return;
	procs.n = 0;
	procs.at_ms = now;
	if ((d = opendir("/proc")) == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		char buf[1024];
		int64_t pid;
		long long pg;
		if (de->d_name[0] < '1' || de->d_name[0] > '9' || parse_int64(de->d_name, &pid) < 0 ||
		    exec_proc_stat(buf, sizeof(buf), (pid_t)pid) < 0 || exec_stat_field(buf, 5, &pg) < 0)
			continue;
		if (procs.n == procs.cap)
			procs.v = xrealloc(procs.v, (size_t)(procs.cap = procs.cap ? 2 * procs.cap : 256) * sizeof(*procs.v));
		procs.v[procs.n].pid = (pid_t)pid;
		procs.v[procs.n].pgid = (pid_t)pg;
		procs.n++;
	}
	closedir(d);
}

/* Sums every process of the job's process group (the shim leads it). */
static int local_sample(const struct exec_job *job, struct exec_sample *out)
{
	long ticks = sysconf(_SC_CLK_TCK);
	int found = 0;

	memset(out, 0, sizeof(*out));
	if (job->pid <= 0 || ticks <= 0)
		return FERRY_ENOTFOUND;
	procs_refresh();
	for (int i = 0; i < procs.n; i++)
		if (procs.v[i].pgid == job->pid && add_process(out, procs.v[i].pid, ticks) == 0)
			found = 1;
	if (!found) {
		ferry_error_set("no process of the job is left");
		return FERRY_ENOTFOUND;
	}
	return FERRY_OK;
}

/* The processes of the job's process group. */
static int local_pids(const struct exec_job *job, int **out, int *n)
{
	int cap = 0;

	*out = NULL;
	*n = 0;
	if (job->pid <= 0)
		return FERRY_ENOTFOUND;
	procs_refresh();
	for (int i = 0; i < procs.n; i++) {
		if (procs.v[i].pgid != job->pid)
			continue;
		if (*n == cap)
			*out = xrealloc(*out, (size_t)(cap = cap ? 2 * cap : 8) * sizeof(**out));
		(*out)[(*n)++] = (int)procs.v[i].pid;
	}
	if (*n == 0) {
		ferry_error_set("no process of the job is left");
		return FERRY_ENOTFOUND;
	}
	return FERRY_OK;
}

static char *local_log_path(const struct exec_job *job)
{
	return job->dir ? xasprintf("%s/log", job->dir) : NULL;
}

/* The daemon stops: no more spares (the ready one exits). */
static void local_fini(void *inst)
{
	(void)inst;
	exec_spare_stop();
}

/* Reaps what jobs left behind: their orphans are reparented to us (a subreaper). */
static void local_tick(void *inst, const char *home)
{
	(void)inst, (void)home;
	int st;

	while (waitpid(-1, &st, WNOHANG) > 0)
		;
	warm_tick();
}

const struct exec_type exec_local = {
	.name = "local",
	.flags = EXF_SERVICES | EXF_SECRETS | EXF_LATE_RECORD,
	.init = local_init,
	.fini = local_fini,
	.start = local_start,
	.poll = local_poll,
	.signal = local_signal,
	.adopt = local_adopt,
	.sample = local_sample,
	.pids = local_pids,
	.log_path = local_log_path,
	.tick = local_tick,
};

int exec_read_status(const char *dir, int *exit_code, int *signal_out)
{
	*exit_code = -1;
	*signal_out = 0;
	return read_status_file(dir, NULL, NULL, exit_code, signal_out);
}

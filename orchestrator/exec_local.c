/*
 * exec_local — the local process executor (see exec.h). The child side of
 * fork() runs in a possibly multi-threaded process, so between fork and exec
 * it only makes async-signal-safe calls on data prepared beforehand.
 */
#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

extern char **environ;

/* Environment variables of the daemon a job must not see. */
static const char *const env_hidden[] = {"FERRY_API_TOKEN", "FERRY_DATABASE_URL", NULL};

static int env_hide(const char *entry)
{
	for (int i = 0; env_hidden[i]; i++) {
		size_t n = strlen(env_hidden[i]);
		if (strncmp(entry, env_hidden[i], n) == 0 && entry[n] == '=')
			return 1;
	}
	return 0;
}

/* Builds envp: the daemon's environment less secrets, Ferry's, then the step's. */
static char **build_env(const struct store_claim *c, const char *dir, const char *out,
			 const char *ckpt)
{
	json_t *env = json_object_get(c->spec, "env"), *v;
	size_t n = 0, k = 0;
	const char *key;
	char **envp;

	while (environ[n])
		n++;
	envp = xcalloc(n + json_object_size(env) + 8, sizeof(char *));
	for (size_t i = 0; i < n; i++) {
		if (env_hide(environ[i]) || strncmp(environ[i], "FERRY_OUTPUT_DIR=", 17) == 0 ||
		    strncmp(environ[i], "FERRY_CHECKPOINT_DIR=", 21) == 0 ||
		    strncmp(environ[i], "FERRY_CACHE_DIR=", 16) == 0)
			continue;
		envp[k++] = xstrdup(environ[i]);
	}
	envp[k++] = xasprintf("FERRY_RUN_ID=%lld", (long long)c->run_id);
	envp[k++] = xasprintf("FERRY_STEP=%s", c->name);
	envp[k++] = xasprintf("FERRY_ATTEMPT=%d", c->attempt);
	envp[k++] = xasprintf("FERRY_OUTPUT_DIR=%s", out);
	envp[k++] = xasprintf("FERRY_ATTEMPT_DIR=%s", dir);
	envp[k++] = xasprintf("FERRY_CHECKPOINT_DIR=%s", ckpt);
	json_object_foreach(env, key, v)
		envp[k++] = xasprintf("%s=%s", key, json_string_value(v));
	envp[k] = NULL;
	return envp;
}

static void free_vec(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

/* Async-signal-safe decimal formatting into buf; returns the length. */
static size_t fmt_int(char *buf, long v)
{
	char tmp[24];
	size_t n = 0, len = 0;
	int neg = v < 0;
	unsigned long u = neg ? (unsigned long)(-v) : (unsigned long)v;

	do {
		tmp[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (neg)
		buf[len++] = '-';
	while (n)
		buf[len++] = tmp[--n];
	return len;
}

/* The shim: runs in the forked child, never returns. */
static void shim(char **argv, char **envp, const char *cwd, const char *log,
		 const char *status, const char *status_tmp)
{
	sigset_t none;
	int logfd, nullfd, st = 0, fd;
	pid_t pid;
	char buf[64];
	size_t n;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	setsid();
	/* none of the daemon's descriptors (listening socket, database) leak into jobs */
	close_range(3, ~0U, 0);
	logfd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
	nullfd = open("/dev/null", O_RDONLY);
	pid = fork();
	if (pid == 0) {
		if (nullfd >= 0)
			dup2(nullfd, 0);
		if (logfd >= 0) {
			dup2(logfd, 1);
			dup2(logfd, 2);
		}
		close_range(3, ~0U, 0);
		if (chdir(cwd) < 0) {
			static const char msg[] = "ferry: cannot enter the working directory\n";
			(void)fd_write_all(2, msg, sizeof(msg) - 1);
			_exit(126);
		}
		execvpe(argv[0], argv, envp);
		{
			static const char msg1[] = "ferry: cannot execute ";
			static const char msg2[] = ": command not found or not executable\n";
			(void)fd_write_all(2, msg1, sizeof(msg1) - 1);
			(void)fd_write_all(2, argv[0], strlen(argv[0]));
			(void)fd_write_all(2, msg2, sizeof(msg2) - 1);
		}
		_exit(127);
	}
	close_range(3, ~0U, 0);
	/* the shim stays to record the result, whatever the group is sent */
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	if (pid < 0) {
		st = 127 << 8;
	} else {
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
	}
	if (WIFSIGNALED(st)) {
		memcpy(buf, "signal ", 7);
		n = 7 + fmt_int(buf + 7, WTERMSIG(st));
	} else {
		memcpy(buf, "exit ", 5);
		n = 5 + fmt_int(buf + 5, WEXITSTATUS(st));
	}
	buf[n++] = '\n';
	fd = open(status_tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		(void)fd_write_all(fd, buf, n);
		close(fd);
		rename(status_tmp, status);
	}
	_exit(0);
}

int exec_local_start(struct exec_job *job, const struct store_claim *c, const char *home)
{
	json_t *cmd = json_object_get(c->spec, "command"), *v;
	const char *wd = json_string_value(json_object_get(c->spec, "workdir"));
	char *dir = NULL, *out = NULL, *log = NULL, *status = NULL, *status_tmp = NULL, *cwd = NULL;
	char *ckpt = NULL;
	char **argv = NULL, **envp = NULL;
	size_t i;
	pid_t pid;
	int error = FERRY_ERROR;

	memset(job, 0, sizeof(*job));
	job->step_id = c->step_id;
	job->run_id = c->run_id;
	job->attempt = c->attempt;
	job->name = xstrdup(c->name);
	job->timeout_ms = c->timeout_ms;
	dir = xasprintf("%s/runs/%lld/%s/%d", home, (long long)c->run_id, c->name, c->attempt);
	out = xasprintf("%s/out", dir);
	/* one checkpoint directory for every attempt of the step: a retry resumes from it */
	ckpt = xasprintf("%s/runs/%lld/%s/checkpoint", home, (long long)c->run_id, c->name);
	if (mkdir_p(out, 0755) < 0 || mkdir_p(ckpt, 0755) < 0)
		goto out;
	log = xasprintf("%s/log", dir);
	status = xasprintf("%s/status", dir);
	status_tmp = xasprintf("%s/status.tmp", dir);
	unlink(status);
	if (wd && wd[0] == '/')
		cwd = xstrdup(wd);
	else if (wd && c->workdir)
		cwd = xasprintf("%s/%s", c->workdir, wd);
	else if (wd)
		cwd = xasprintf("%s/%s", dir, wd);
	else
		cwd = xstrdup(c->workdir ? c->workdir : dir);
	if (json_array_size(cmd) == 0) {
		ferry_error_set("step %s has no command", c->name);
		goto out;
	}
	argv = xcalloc(json_array_size(cmd) + 1, sizeof(char *));
	json_array_foreach(cmd, i, v)
		argv[i] = xstrdup(json_string_value(v));
	envp = build_env(c, dir, out, ckpt);

	pid = fork();
	if (pid < 0) {
		ferry_error_set("fork: %s", strerror(errno));
		goto out;
	}
	if (pid == 0)
		shim(argv, envp, cwd, log, status, status_tmp);
	setpgid(pid, pid); /* also done by the shim's setsid; closes the race for kill(-pid) */
	job->pid = pid;
	job->pid_start = exec_pid_start(pid);
	job->child = 1;
	job->dir = dir;
	dir = NULL;
	if (c->timeout_ms > 0)
		job->deadline_ms = clock_mono_ms() + c->timeout_ms;
	error = FERRY_OK;
out:
	free(dir), free(out), free(log), free(status), free(status_tmp), free(cwd), free(ckpt);
	free_vec(argv);
	free_vec(envp);
	return error;
}

void exec_signal(const struct exec_job *job, int sig)
{
	if (job->pid > 0)
		kill(-job->pid, sig);
}

int64_t exec_pid_start(pid_t pid)
{
	char path[64], buf[1024], *p;
	int fd, field;
	ssize_t n;
	long long v = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* field 2 is "(comm)" and may hold spaces: start after the last ')' */
	p = strrchr(buf, ')');
	if (p == NULL)
		return 0;
	for (field = 2; *p && field < 22; p++) {
		if (*p == ' ')
			field++;
	}
	v = strtoll(p, NULL, 10);
	return v;
}

int exec_pid_alive(pid_t pid, int64_t start)
{
	char path[64], state = 0;
	FILE *f;
	int64_t s;

	if (pid <= 0)
		return 0;
	s = exec_pid_start(pid);
	if (s == 0 || (start != 0 && s != start))
		return 0;
	/* a zombie is not alive */
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (f) {
		char buf[512];
		if (fgets(buf, sizeof(buf), f)) {
			char *p = strrchr(buf, ')');
			if (p && p[1] == ' ')
				state = p[2];
		}
		fclose(f);
	}
	return state != 'Z' && state != 'X';
}

int exec_read_status(const char *dir, int *exit_code, int *signal_out)
{
	char *path = xasprintf("%s/status", dir), *buf = NULL;
	int64_t v;
	int found = 0;

	*exit_code = -1;
	*signal_out = 0;
	if (file_read(&buf, NULL, path) == FERRY_OK) {
		char *nl = strchr(buf, '\n');
		if (nl)
			*nl = '\0';
		if (strncmp(buf, "exit ", 5) == 0 && parse_int64(buf + 5, &v) == 0) {
			*exit_code = (int)v;
			found = 1;
		} else if (strncmp(buf, "signal ", 7) == 0 && parse_int64(buf + 7, &v) == 0) {
			*signal_out = (int)v;
			found = 1;
		}
	}
	free(buf);
	free(path);
	return found;
}

void exec_job_dispose(struct exec_job *job)
{
	if (job == NULL)
		return;
	free(job->name);
	free(job->dir);
	free(job->kill_reason);
	json_decref(job->ctx);
	memset(job, 0, sizeof(*job));
}

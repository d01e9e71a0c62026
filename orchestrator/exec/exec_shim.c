/*
 * exec_shim — async-signal-safe helpers of the executors' supervisors (see
 * exec_shim.h). Nothing here allocates, locks or uses stdio: these run in a
 * child of a multi-threaded process between fork() and exec or _exit.
 */
#include "exec/exec_shim.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/logmask.h"
#include "lib/util.h"

/*
 * close_range(2) by its number: musl (the shim's libc where musl-gcc is
 * installed, Makefile) has no wrapper; the number is the same on every
 * architecture (Linux 5.9 and later; on an older kernel nothing is closed).
 */
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
static void close_from_3(void)
{
	(void)syscall(SYS_close_range, 3U, ~0U, 0U);
}

/* path (which the kernel would not execute: ENOEXEC) run by /bin/sh with argv's arguments, as execvp does. */
static void exec_as_script(const char *path, char **argv, char **envp)
{
	int n = 0;

	while (argv[n])
		n++;
	{
		char *sh[n + 2]; /* on the stack: no allocation in a vfork child */
		sh[0] = (char *)"sh";
		sh[1] = (char *)path;
		for (int i = 1; i <= n; i++) /* argv[1..], and its NULL */
			sh[i + 1] = argv[i];
		execve("/bin/sh", sh, envp);
	}
}

/*
 * execvpe as POSIX describes execvp, in a vfork child (no allocation): file
 * searched in envp's PATH (the job's; "/bin:/usr/bin" without one) unless
 * it has a slash, and a file the kernel does not execute (ENOEXEC: a script
 * without a #! line) run by /bin/sh, as a shell runs it. glibc's execvpe
 * does the same; musl's, the shim's libc where it is built with musl, runs
 * no sh. Returns on failure, errno set: EACCES if a match was not
 * executable, else the last error.
 */
static void shim_execvpe(const char *file, char **argv, char **envp)
{
	const char *path = "/bin:/usr/bin", *p, *end;
	char buf[4096];
	size_t flen = strlen(file);
	int eacces = 0;

	if (strchr(file, '/')) {
		execve(file, argv, envp);
		if (errno == ENOEXEC) {
			exec_as_script(file, argv, envp);
			errno = ENOEXEC;
		}
		return;
	}
	for (char **e = envp; *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0)
			path = *e + 5;
	if (*file == '\0' || flen + 2 > sizeof(buf)) {
		errno = *file ? ENAMETOOLONG : ENOENT;
		return;
	}
	for (p = path;; p = end + 1) {
		size_t dlen;
		end = strchrnul(p, ':');
		dlen = (size_t)(end - p);
		if (dlen == 0) /* an empty entry is the working directory */
			p = ".", dlen = 1;
		if (dlen + 1 + flen + 1 <= sizeof(buf)) {
			memcpy(buf, p, dlen);
			buf[dlen] = '/';
			memcpy(buf + dlen + 1, file, flen + 1);
			execve(buf, argv, envp);
			switch (errno) {
			case ENOEXEC:
				exec_as_script(buf, argv, envp);
				errno = ENOEXEC;
				return;
			case EACCES:
				eacces = 1;
				break;
			case ENOENT:
			case ENOTDIR:
			case ENAMETOOLONG:
			case ESTALE:
			case ENODEV:
			case ETIMEDOUT:
				break;
			default:
				return;
			}
		}
		if (*end == '\0')
			break;
	}
	errno = eacces ? EACCES : ENOENT;
}

size_t exec_shim_fmt(char *buf, long long v)
{
	char tmp[24];
	size_t n = 0, len = 0;
	unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;

	do {
		tmp[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		buf[len++] = '-';
	while (n)
		buf[len++] = tmp[--n];
	return len;
}

size_t exec_shim_self_start(char *out)
{
	char buf[1024];
	ssize_t n;
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC), field = 2;
	char *p = NULL;
	size_t len = 0;

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* field 2 is "(comm)" and may hold spaces: start after the last ')' */
	for (ssize_t i = n - 1; i >= 0; i--)
		if (buf[i] == ')') {
			p = buf + i;
			break;
		}
	if (p == NULL)
		return 0;
	for (; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	while (*p >= '0' && *p <= '9' && len < 23)
		out[len++] = *p++;
	return len;
}

/* this process's start time, read ahead (exec_shim_remember_start), or none */
static char self_start[24];
static size_t self_start_len;

void exec_shim_remember_start(void)
{
	self_start_len = exec_shim_self_start(self_start);
}

void exec_shim_write_pid(int fd)
{
	char buf[64];
	size_t n;

	memcpy(buf, "pid ", 4);
	n = 4 + exec_shim_fmt(buf + 4, (long long)getpid());
	buf[n++] = ' ';
	if (self_start_len > 0) {
		memcpy(buf + n, self_start, self_start_len);
		n += self_start_len;
	} else {
		n += exec_shim_self_start(buf + n);
	}
	buf[n++] = '\n';
	(void)fd_write_all(fd, buf, n);
}

void exec_shim_put_line(int fd, const char *word, long long n, int with_n)
{
	char buf[64];
	size_t len = strlen(word);

	if (len > sizeof(buf) - 24)
		len = sizeof(buf) - 24;
	memcpy(buf, word, len);
	if (with_n) {
		buf[len++] = ' ';
		len += exec_shim_fmt(buf + len, n);
	}
	buf[len++] = '\n';
	(void)fd_write_all(fd, buf, len);
}

int exec_shim_drop(const struct exec_shim_user *u)
{
	/* raw system calls: glibc's set*id wrappers synchronise threads, which a vfork child must not */
	if (u == NULL)
		return 0;
	if (syscall(SYS_setgroups, (size_t)u->ngroups, u->groups) < 0 ||
	    syscall(SYS_setresgid, u->gid, u->gid, u->gid) < 0 ||
	    syscall(SYS_setresuid, u->uid, u->uid, u->uid) < 0)
		return -1;
	return 0;
}

void exec_shim_detach(void)
{
	static int done;
	sigset_t none;

	if (done)
		return;
	done = 1;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	setsid();
	/* none of the daemon's descriptors (listening socket, database) leak into jobs */
	close_from_3();
}

_Noreturn void exec_shim_run(char **argv, char **envp, const char *cwd, const char *log, const char *status,
		   struct logmask *mask, const struct exec_shim_user *u)
{
	int logfd, nullfd, st = 0, fd, pipefd[2] = {-1, -1};
	pid_t pid;
	char buf[64];
	size_t n;

	exec_shim_detach();
	logfd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
	nullfd = open("/dev/null", O_RDONLY);
	/*
	 * DIR/status: one line with the handle before the command can run
	 * (exec.h), one with how it ended after; a reader that finds no end
	 * line while the shim lives knows the job runs. One file, no rename:
	 * a job's files cost inodes, and inode creation is what bounds the
	 * local executor's rate (the dispatch_local benchmark).
	 */
	fd = open(status, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	if (fd >= 0)
		exec_shim_write_pid(fd);
	/* a job with secrets writes into a pipe; the shim masks their values on the way to DIR/log */
	if (mask && logfd >= 0 && pipe2(pipefd, O_CLOEXEC) < 0) {
		static const char msg[] = "ferry: cannot make the pipe that masks secrets in this log\n";
		(void)fd_write_all(logfd, msg, sizeof(msg) - 1);
		if (fd >= 0)
			(void)fd_write_all(fd, "exit 126\n", 9);
		_exit(0);
	}
	/* vfork: the child only rearranges descriptors and execs, so nothing is copied */
	pid = vfork();
	if (pid == 0) {
		if (nullfd >= 0)
			dup2(nullfd, 0);
		if (pipefd[1] >= 0) {
			dup2(pipefd[1], 1);
			dup2(pipefd[1], 2);
		} else if (logfd >= 0) {
			dup2(logfd, 1);
			dup2(logfd, 2);
		}
		close_from_3(); /* the status descriptor too */
		if (exec_shim_drop(u) < 0) {
			static const char msg[] = "ferry: cannot switch to the job user (FERRY_JOB_USER)\n";
			(void)fd_write_all(2, msg, sizeof(msg) - 1);
			_exit(126);
		}
		if (chdir(cwd) < 0) {
			static const char msg[] = "ferry: cannot enter the working directory (it must be "
						  "readable and searchable by the job's user)\n";
			(void)fd_write_all(2, msg, sizeof(msg) - 1);
			_exit(126);
		}
		shim_execvpe(argv[0], argv, envp);
		{
			/* what execve said, in words (no strerror: this is a vfork child) */
			static const char msg1[] = "ferry: cannot execute ";
			static const char e2big[] = ": its arguments and environment are too large for the kernel "
						    "(E2BIG: at most 128 KiB a value, about 2 MiB in all); pass large "
						    "inputs in a file, not a param or env value\n";
			static const char eacces[] = ": permission denied (not executable, or a directory on its "
						     "path is not searchable by the job's user)\n";
			static const char enoexec[] = ": not an executable format (a script needs a #! line)\n";
			static const char enoent[] = ": command not found or not executable\n";
			int e = errno;
			const char *m = e == E2BIG ? e2big : e == EACCES ? eacces : e == ENOEXEC ? enoexec : enoent;
			(void)fd_write_all(2, msg1, sizeof(msg1) - 1);
			(void)fd_write_all(2, argv[0], strlen(argv[0]));
			(void)fd_write_all(2, m, strlen(m));
			_exit(e == ENOENT || e == ENOTDIR ? 127 : 126);
		}
	}
	/* the shim stays to record the result, whatever the group is sent */
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	if (pipefd[1] >= 0)
		close(pipefd[1]);
	if (pid < 0) {
		st = 127 << 8;
		if (pipefd[0] >= 0)
			close(pipefd[0]);
	} else if (pipefd[0] >= 0) {
		st = logmask_pump(mask, pipefd[0], logfd, pid);
	} else {
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
	}
	if (WIFSIGNALED(st)) {
		memcpy(buf, "signal ", 7);
		n = 7 + exec_shim_fmt(buf + 7, WTERMSIG(st));
	} else {
		memcpy(buf, "exit ", 5);
		n = 5 + exec_shim_fmt(buf + 5, WEXITSTATUS(st));
	}
	buf[n++] = '\n';
	if (fd >= 0) {
		(void)fd_write_all(fd, buf, n);
		close(fd);
	}
	_exit(0);
}

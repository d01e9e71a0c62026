/*
 * exec_spare — a local job's supervisor started before its job is known:
 * the spare (exec_spare.h).
 *
 * Starting bin/ferry-shim is most of what Ferry itself adds to a short
 * local job: the daemon's posix_spawn (a clone, the child's signal
 * resets, the exec) and the shim's own start-up (an exec of a static
 * program: page faults, dear on a virtual machine) come before the
 * command can start, on the path from one step's end to the next one's
 * start. A spare has done all of that already: a keeper thread starts
 * one `ferry-shim --spare` ahead of need and keeps one ready; a start
 * hands it the job's arguments and environment through a socket (the
 * format in exec_shim.h) and the next spare is started off the engine's
 * loop, while the job runs. What the job sees does not change: the spare
 * is the same program doing the same things with the same arguments, in
 * its own session; its pid and start time, read when it was started, are
 * the job's handle as a cold shim's are.
 *
 * What a spare may not do is run a job half-told or run one twice: it
 * runs nothing unless the whole request (its length first) arrived, and
 * a request is written once, with a bounded wait, to one spare that is
 * then forgotten. A spare that died idle (killed, out of memory) shows as
 * a closed socket when it is handed its job: that job starts cold. One
 * that dies after its request was written is a shim killed at its start:
 * the job ends without an exit status, as it would have then. An idle
 * spare whose daemon is gone reads end-of-file and exits having run
 * nothing; the strays' reaper (local_tick) reaps it like any child.
 *
 * One spare at a time: a chain of steps starts one job after another, and
 * a batch of starts gets its first from the spare and the rest cold.
 */
#include "exec/exec_spare.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/exec_shim.h"
#include "exec/proc.h"
#include "lib/util.h"

enum {
	PAD = 4096,	   /* the room a spare's command line has for its job's (ferry_shim.c) */
	WRITE_MS = 2000,   /* the longest a request is waited on before the job starts cold */
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
	int running;	/* the keeper thread was started */
	int stopping;
	int want;	/* a spare is to be started */
	const char *path;
	pid_t pid;	/* the ready spare, 0 for none */
	int fd;		/* its socket */
	int64_t start;
} sp = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .fd = -1};

/* A new spare of sp.path: its pid with *fd its socket and *start its start time, or -1. */
static pid_t spawn_spare(int *fd, int64_t *start)
{
	static char pad[PAD];
	char *argv[] = {(char *)"ferry-shim", (char *)"--spare", pad, NULL}, *envp[] = {NULL};
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	int s[2], rc;
	pid_t pid;

	if (pad[0] == '\0')
		memset(pad, ' ', sizeof(pad) - 1);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s) < 0)
		return -1;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, s[1], 0); /* the dup is not close-on-exec */
	exec_spawnattr_session(&attr);
	rc = posix_spawn(&pid, sp.path, &fa, &attr, argv, envp);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	close(s[1]);
	if (rc != 0) {
		close(s[0]);
		return -1;
	}
	(void)fcntl(s[0], F_SETFL, fcntl(s[0], F_GETFL) | O_NONBLOCK);
	*fd = s[0];
	*start = exec_pid_start(pid);
	return pid;
}

/* The keeper: starts a spare whenever one is wanted, until stopped. */
static void *keeper(void *arg)
{
	sigset_t all;

	(void)arg;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL); /* SIGCHLD and the rest go to the engine's thread */
	pthread_mutex_lock(&sp.mu);
	for (;;) {
		int fd = -1;
		int64_t start = 0;
		pid_t pid;

		while (!sp.want && !sp.stopping)
			pthread_cond_wait(&sp.cv, &sp.mu);
		if (sp.stopping)
			break;
		sp.want = 0;
		pthread_mutex_unlock(&sp.mu);
		pid = spawn_spare(&fd, &start);
		pthread_mutex_lock(&sp.mu);
		if (pid <= 0)
			continue; /* asked again at the next start */
		if (sp.pid == 0 && !sp.stopping) {
			sp.pid = pid, sp.fd = fd, sp.start = start;
		} else {
			close(fd); /* not needed after all: it reads end-of-file and exits */
		}
	}
	pthread_mutex_unlock(&sp.mu);
	return NULL;
}

/* Writes n bytes of buf to non-blocking fd within WRITE_MS; 0 when all went. */
static int write_bounded(int fd, const char *buf, size_t n)
{
	int64_t until = clock_mono_ms() + WRITE_MS;

	while (n > 0) {
		ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
		if (w > 0) {
			buf += w, n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			int64_t left = until - clock_mono_ms();
			if (left > 0 && poll(&p, 1, (int)left) >= 0 && !(p.revents & (POLLERR | POLLHUP)))
				continue;
		}
		return -1;
	}
	return 0;
}

/*
 * The vector's count and strings ("N\0S\0...", exec_shim.h) written at
 * buf + off when buf is not NULL; returns the offset after them.
 */
static size_t put_vector(char *buf, size_t off, char *const v[])
{
	char num[24];
	size_t n = 0, k;

	while (v[n])
		n++;
	k = (size_t)snprintf(num, sizeof(num), "%zu", n) + 1;
	if (buf)
		memcpy(buf + off, num, k);
	off += k;
	for (size_t i = 0; i < n; i++) {
		k = strlen(v[i]) + 1;
		if (buf)
			memcpy(buf + off, v[i], k);
		off += k;
	}
	return off;
}

void exec_spare_enable(const char *shim_path)
{
	pthread_mutex_lock(&sp.mu);
	if (!sp.running && !sp.stopping && shim_path) {
		sp.path = shim_path;
		sp.want = 1;
		sp.running = pthread_create(&sp.thread, NULL, keeper, NULL) == 0;
	}
	pthread_mutex_unlock(&sp.mu);
}

pid_t exec_spare_take(char *const argv[], char *const envp[], int64_t *start)
{
	size_t len = put_vector(NULL, put_vector(NULL, 0, argv), envp);
	char *req;
	pid_t pid;
	int fd, ok;

	if (len > (size_t)EXEC_SPARE_MAX)
		return 0;
	pthread_mutex_lock(&sp.mu);
	pid = sp.pid, fd = sp.fd, *start = sp.start;
	if (pid > 0) {
		sp.pid = 0, sp.fd = -1;
		sp.want = 1; /* the next one, started while this job runs */
		pthread_cond_signal(&sp.cv);
	}
	pthread_mutex_unlock(&sp.mu);
	if (pid <= 0)
		return 0;
	/* one write: the length (EXEC_SPARE_HEAD bytes), then the vectors */
	req = xmalloc(EXEC_SPARE_HEAD + 1 + len);
	snprintf(req, EXEC_SPARE_HEAD + 1, "%0*zu\n", EXEC_SPARE_HEAD - 1, len);
	put_vector(req, put_vector(req, EXEC_SPARE_HEAD, argv), envp);
	ok = write_bounded(fd, req, EXEC_SPARE_HEAD + len) == 0;
	close(fd); /* a request cut short: the spare runs nothing and exits */
	explicit_bzero(req, EXEC_SPARE_HEAD + len); /* the environment may hold a secret's value */
	free(req);
	if (!ok) {
		kill(pid, SIGKILL);
		return 0;
	}
	return pid;
}

void exec_spare_stop(void)
{
	pthread_mutex_lock(&sp.mu);
	sp.stopping = 1;
	pthread_cond_signal(&sp.cv);
	pthread_mutex_unlock(&sp.mu);
	if (sp.running)
		pthread_join(sp.thread, NULL);
	pthread_mutex_lock(&sp.mu);
	if (sp.pid > 0) {
		/* it reads end-of-file and exits: reaped here (100 ms at most), not left to init */
		close(sp.fd);
		for (int i = 0; i < 100 && waitpid(sp.pid, NULL, WNOHANG) == 0; i++)
			usleep(1000);
		if (waitpid(sp.pid, NULL, WNOHANG) == 0) {
			kill(sp.pid, SIGKILL);
			waitpid(sp.pid, NULL, 0);
		}
	}
	sp.pid = 0, sp.fd = -1;
	sp.running = 0, sp.stopping = 0, sp.want = 0;
	pthread_mutex_unlock(&sp.mu);
}

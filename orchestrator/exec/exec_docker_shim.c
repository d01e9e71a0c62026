/*
 * exec_docker_shim — the supervisor of one container attempt (see
 * exec_docker.c's design note): a fork of the daemon that creates and
 * starts the container, follows its log stream into DIR/log, waits for
 * its end, records it in DIR/status and removes the container. It takes
 * no lock another daemon thread could hold (no logging, no libpq).
 */
#include "exec/exec_docker.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/proc.h"
#include "lib/util.h"

/* ---- the shim ---------------------------------------------------------------- */

struct shim {
	const char *sock, *name;
	int logfd, statusfd;
	/* the multiplexed log stream: the 8-byte header being read, the frame left */
	unsigned char hdr[8];
	size_t hdr_have, frame_left;
	int64_t skip; /* payload bytes DIR/log already holds (following again from the start) */
	int forwarded; /* the strongest signal sent to the container: 0, SIGTERM, SIGKILL */
	int kmsgfd;    /* /dev/kmsg from before the start on, or -1 */
	int64_t heard_ms; /* when the request being followed last brought bytes (clock_mono_ms) */
	int not_log;      /* the answer being read is no log stream (a frame header no engine writes) */
};

/*
 * A stream or wait that stays silent this long has the container
 * inspected: one that is no longer running ends it. Podman's service has
 * been known to keep a log stream (or a wait) open after its container
 * exited (podman#6627, #11461, both fast-exiting containers); the shim
 * must not outlive its container on that.
 */
#define SHIM_SILENT_MS 3000

static volatile sig_atomic_t shim_sig;

static void shim_on_signal(int s)
{
	if (s == SIGUSR1)
		shim_sig = SIGKILL;
	else if (shim_sig == 0)
		shim_sig = SIGTERM;
}

static void shim_line(struct shim *s, const char *fmt, ...) FERRY_PRINTF(2, 3);
static void shim_line(struct shim *s, const char *fmt, ...)
{
	va_list ap;
	char buf[512];
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	/* one line: a message from the engine may hold newlines */
	for (int i = 0; i < n; i++)
		if (buf[i] == '\n' || buf[i] == '\r')
			buf[i] = ' ';
	buf[n++] = '\n';
	if (s->statusfd >= 0)
		(void)fd_write_all(s->statusfd, buf, (size_t)n);
}

/* Writes what the shim has to say about the container into the log too (people read it). */
static void shim_log(struct shim *s, const char *msg)
{
	char *line = xasprintf("ferry: %s\n", msg);

	if (s->logfd >= 0)
		(void)fd_write_all(s->logfd, line, strlen(line));
	free(line);
}

/* Decodes the multiplexed stream: frames of [stream, 0, 0, 0, size (4 bytes, big-endian)] + payload. */
static size_t shim_log_write(char *p, size_t size, size_t n, void *arg)
{
	struct shim *s = arg;
	size_t len = size * n, i = 0;

	s->heard_ms = clock_mono_ms();
	while (i < len) {
		if (s->frame_left == 0) {
			s->hdr[s->hdr_have++] = (unsigned char)p[i++];
			/* stdin, stdout, stderr or an engine error (3), three zeros: else no log (an error after a 200) */
			if ((s->hdr_have == 1 && s->hdr[0] > 3) || (s->hdr_have > 1 && s->hdr_have < 5 &&
								   s->hdr[s->hdr_have - 1] != 0)) {
				s->not_log = 1;
				return 0; /* the transfer stops here */
			}
			if (s->hdr_have == 8) {
				s->frame_left = (size_t)s->hdr[4] << 24 | (size_t)s->hdr[5] << 16 |
						(size_t)s->hdr[6] << 8 | s->hdr[7];
				s->hdr_have = 0;
			}
		} else {
			size_t k = len - i < s->frame_left ? len - i : s->frame_left, w = k;
			if (s->skip > 0) {
				w = (int64_t)k <= s->skip ? 0 : k - (size_t)s->skip;
				s->skip -= (int64_t)(k - w);
			}
			if (s->logfd >= 0 && w > 0)
				(void)fd_write_all(s->logfd, p + i + (k - w), w);
			i += k;
			s->frame_left -= k;
		}
	}
	return len;
}

/* Sends the container the signal asked of the shim, once per strength. */
static void shim_forward(struct shim *s)
{
	int want = shim_sig;
	char *path;
	long code;

	if (want == 0 || s->forwarded == SIGKILL || s->forwarded == want)
		return;
	path = xasprintf("/containers/%s/kill?signal=%s", s->name, want == SIGKILL ? "KILL" : "TERM");
	/* 409: not running (yet or any more); either way nothing to signal */
	(void)dk_call(&code, NULL, s->sock, "POST", path, NULL, 10000);
	free(path);
	s->forwarded = want;
}

/* Whether the engine says the container is not running (exited, or gone): a short inspect. */
static int shim_container_ended(struct shim *s)
{
	char *path = xasprintf("/containers/%s/json", s->name);
	json_t *ans = NULL, *state;
	long code = 0;
	int ended = 0;

	if (dk_call(&code, &ans, s->sock, "GET", path, NULL, 5000) == 0) {
		state = json_object_get(ans, "State");
		ended = code == 404 || (code == 200 && !json_is_true(json_object_get(state, "Running")) &&
					!json_is_true(json_object_get(state, "Restarting")));
	}
	json_decref(ans);
	free(path);
	return ended;
}

/*
 * Runs easy handle h to its end, forwarding signals meanwhile (the log
 * stream and the wait last as long as the container). 0 when it completed
 * with *code; FERRY_ERROR when the engine went away. SHIM_ENDED when it
 * was silent for SHIM_SILENT_MS and the container had ended meanwhile
 * (the request is dropped: the engine would have ended it).
 */
#define SHIM_ENDED 1
static int shim_perform(struct shim *s, CURL *h, long *code)
{
	CURLM *m = curl_multi_init();
	CURLMsg *msg;
	CURLcode rc = CURLE_OK;
	int running = 1, left, ended = 0;

	curl_multi_add_handle(m, h);
	s->heard_ms = clock_mono_ms();
	while (running) {
		shim_forward(s);
		curl_multi_perform(m, &running);
		if (running)
			curl_multi_poll(m, NULL, 0, 200, NULL); /* a signal cuts it short */
		if (running && clock_mono_ms() - s->heard_ms >= SHIM_SILENT_MS) {
			if (shim_container_ended(s)) {
				ended = 1;
				break;
			}
			s->heard_ms = clock_mono_ms();
		}
	}
	while ((msg = curl_multi_info_read(m, &left)) != NULL)
		if (msg->msg == CURLMSG_DONE)
			rc = msg->data.result;
	curl_multi_remove_handle(m, h);
	curl_multi_cleanup(m);
	*code = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
	if (ended)
		return SHIM_ENDED;
	return rc == CURLE_OK ? 0 : FERRY_ERROR;
}

/*
 * An answer to a log request that is no log stream is asked again, this
 * many times, a moment apart: podman's service (4.3) answers 200 and then
 * writes an error as the body when the container ends as its log is asked
 * ({"cause":"no such process","message":"failed to obtain logs for
 * Container '…': read /proc/…/cgroup: no such process","response":500}).
 * That error is not the job's log; asked again, the log is there.
 */
#define SHIM_NOT_LOG_TRIES 5

/*
 * Follows the container's log into DIR/log until the container stops (or
 * the engine goes). Again after a lost stream: from the start, less the
 * bytes DIR/log holds (exact, where a `since` time would repeat or lose
 * the lines of its instant).
 */
static void shim_follow(struct shim *s, int again)
{
	struct stat sb;
	long code;
	int not_log = 0;

	for (int follow = 1; follow >= 0; follow--) {
		char *path = xasprintf("/containers/%s/logs?follow=%d&stdout=1&stderr=1", s->name, follow);
		CURL *h = dk_easy(s->sock, "GET", path, NULL, NULL, NULL, follow ? 0 : 30000);
		int rc;

		free(path);
		if (h == NULL)
			return;
		curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L); /* an error's body is no stream */
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, shim_log_write);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
		s->hdr_have = s->frame_left = 0;
		s->not_log = 0;
		s->skip = (again || !follow) && fstat(s->logfd, &sb) == 0 ? (int64_t)sb.st_size : 0;
		rc = shim_perform(s, h, &code);
		curl_easy_cleanup(h);
		if (s->not_log && not_log++ < SHIM_NOT_LOG_TRIES) {
			usleep(200 * 1000);
			again = 1; /* past what DIR/log holds */
			follow++;  /* the same request again */
			continue;
		}
		/* a stream kept open past its container's end: what it had not brought, read whole */
		if (rc != SHIM_ENDED)
			return;
	}
}

/*
 * Whether the kernel logged a memory-cgroup OOM kill in the cgroup of
 * container id (its full id is in the cgroup's path) since the shim opened
 * /dev/kmsg: podman's service never sets OOMKilled on this cgroup layout,
 * dockerd does. Reads the records logged since, without waiting.
 */
static int shim_kmsg_oom(int fd, const char *id)
{
	char rec[8192];
	ssize_t n;
	int found = 0;

	if (fd < 0 || id == NULL || strlen(id) < 32)
		return 0;
	for (;;) {
		n = read(fd, rec, sizeof(rec) - 1);
		if (n < 0 && (errno == EINTR || errno == EPIPE))
			continue; /* EPIPE: records overwritten meanwhile; the next are there */
		if (n <= 0)
			break; /* EAGAIN: no more */
		rec[n] = '\0';
		if (strstr(rec, "oom_memcg=") != NULL && strstr(rec, id) != NULL)
			found = 1;
	}
	return found;
}

/* Waits until the container is not running (POST /containers/NAME/wait), forwarding signals. */
static void shim_wait(struct shim *s)
{
	char *path = xasprintf("/containers/%s/wait", s->name);
	struct dk_buf b = {0};
	CURL *h = dk_easy(s->sock, "POST", path, NULL, NULL, &b, 0);
	long code;

	free(path);
	if (h == NULL)
		return;
	(void)shim_perform(s, h, &code);
	curl_easy_cleanup(h);
	free(b.p);
}

/*
 * How the container ended, from GET /containers/NAME/json, retried while
 * the engine does not answer or the container still runs (up to
 * DK_LOST_MS). Writes the end lines to DIR/status.
 */
static void shim_finish(struct shim *s)
{
	char *path = xasprintf("/containers/%s/json", s->name);
	int64_t give_up = clock_mono_ms() + DK_LOST_MS;
	json_t *ans = NULL;
	long code = 0;

	for (;;) {
		shim_wait(s);
		json_decref(ans);
		ans = NULL;
		if (dk_call(&code, &ans, s->sock, "GET", path, NULL, 10000) == 0) {
			json_t *state = json_object_get(ans, "State");
			if (code == 404) {
				shim_line(s, "reason the container %s was removed outside Ferry before it "
					     "reported its end", s->name);
				shim_line(s, "exit 125");
				break;
			}
			if (code == 200 && !json_is_true(json_object_get(state, "Running")) &&
			    !json_is_true(json_object_get(state, "Restarting"))) {
				json_int_t ec = json_integer_value(json_object_get(state, "ExitCode"));
				/* OOMKilled: some process of it was; the job failed of it only when it failed */
				json_int_t mem = json_integer_value(
					json_object_get(json_object_get(ans, "HostConfig"), "Memory"));
				if (ec != 0 && (json_is_true(json_object_get(state, "OOMKilled")) ||
						(ec == 137 && mem > 0 &&
						 shim_kmsg_oom(s->kmsgfd, json_string_value(json_object_get(ans, "Id"))))))
					shim_line(s, "reason out of memory (limit %lld MiB)", (long long)(mem / 1048576));
				shim_line(s, "exit %lld", (long long)ec);
				break;
			}
			if (code == 200) {
				/* the stream ended (the engine restarted?) while it runs: follow again */
				shim_follow(s, 1);
				continue;
			}
		}
		if (clock_mono_ms() > give_up) {
			shim_line(s, "reason the container engine did not answer for %d s: the end of %s "
				     "is unknown", DK_LOST_MS / 1000, s->name);
			shim_line(s, "exit 125");
			break;
		}
		sleep(1);
	}
	json_decref(ans);
	free(path);
}

/* Fails the attempt from the shim: reason and exit 125 (the engine's refusal, as `docker run` says it). */
static void shim_refused(struct shim *s, const char *what, long code, const json_t *ans)
{
	char *m = code ? dk_message(code, ans) : xstrdup(ferry_error_last());

	shim_line(s, "reason cannot %s container %s: %s", what, s->name, m);
	shim_log(s, m);
	shim_line(s, "exit 125");
	free(m);
}

/*
 * The shim: runs in the forked child, never returns. body: the create
 * request, or NULL to follow an existing container again (adoption).
 */
static void shim_main(struct shim *s, const json_t *body, const char *log, const char *status)
{
	struct sigaction sa;
	sigset_t none;
	json_t *ans = NULL;
	char *path = NULL;
	long code;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sg = 1; sg < NSIG; sg++)
		signal(sg, SIG_DFL);
	setsid();
	close_range(3, ~0U, 0); /* the daemon's sockets and database connection are not ours */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = shim_on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	/* following again, the job has had these files: never opened through a link it left */
	s->logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
	/* the kernel's log from here on: how an OOM kill is told where the engine does not say */
	s->kmsgfd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (s->kmsgfd >= 0)
		lseek(s->kmsgfd, 0, SEEK_END);
	s->statusfd = open(status, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK |
				   (body ? O_TRUNC : 0), 0644);
	/* the latest "pid" line names the supervisor (one that follows a container again adds its own) */
	shim_line(s, "pid %d %lld", (int)getpid(), (long long)exec_pid_start(getpid()));
	if (body) {
		shim_line(s, "container %s", s->name);
		path = xasprintf("/containers/create?name=%s", s->name);
		if (dk_call(&code, &ans, s->sock, "POST", path, body, DK_SHIM_MS) == 0 && dk_name_taken(code, ans)) {
			/* a container of this name left by a crashed earlier try: removed, never a 409 */
			if (dk_remove(s->sock, s->name, DK_SHIM_MS) < 0) {
				shim_refused(s, "replace the stale", 0, NULL);
				_exit(0);
			}
			json_decref(ans);
			ans = NULL;
			(void)dk_call(&code, &ans, s->sock, "POST", path, body, DK_SHIM_MS);
		}
		if (code != 201) {
			shim_refused(s, "create", code, ans);
			_exit(0);
		}
		free(path);
		json_decref(ans);
		ans = NULL;
		if (shim_sig) {
			/* stopped before it started: the command never runs */
			shim_line(s, "exit 143");
		} else {
			path = xasprintf("/containers/%s/start", s->name);
			if (dk_call(&code, &ans, s->sock, "POST", path, NULL, DK_SHIM_MS) < 0 ||
			    (code != 204 && code != 304)) {
				shim_refused(s, "start", code, ans);
				(void)dk_remove(s->sock, s->name, DK_SHIM_MS);
				shim_line(s, "removed");
				_exit(0);
			}
			shim_follow(s, 0);
			shim_finish(s);
		}
	} else {
		shim_follow(s, 1);
		shim_finish(s);
	}
	/* the end is in DIR/status: the container holds nothing more */
	if (dk_remove(s->sock, s->name, DK_SHIM_MS) == 0)
		shim_line(s, "removed");
	_exit(0);
}

/* Forks the shim for job; fills the job's pid and handle. */
int dk_spawn(struct exec_job *job, const char *sock, const char *name,
		    const json_t *body)
{
	char *log = xasprintf("%s/log", job->dir), *status = xasprintf("%s/status", job->dir);
	struct shim s = {.sock = sock, .name = name, .logfd = -1, .statusfd = -1, .kmsgfd = -1};
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		ferry_error_set("fork: %s", strerror(errno));
		free(log), free(status);
		return FERRY_ERROR;
	}
	if (pid == 0)
		shim_main(&s, body, log, status);
	free(log), free(status);
	job->pid = pid;
	job->pid_start = exec_pid_start(pid);
	job->child = 1;
	json_decref(job->handle);
	job->handle = json_pack("{s:i, s:I, s:s}", "pid", (int)pid, "start",
				(json_int_t)job->pid_start, "container", name);
	return FERRY_OK;
}

/*
 * exec_warm — warm Python starts (exec.h: warm_entry, warm_start). Design note:
 *
 * An ML step spends most of a short run importing its libraries
 * (`import sklearn.svm` 0.76 s here, against 10 ms for an empty
 * interpreter). A step that says `warm: {python, preload}` is started as a
 * fork of a Python process that imported them already. One server per
 * (interpreter, preload list, job user, the environment that imports read),
 * started by the first step that asks — that step starts cold, with a note
 * in its log, as does any step while its server is starting, failed, or
 * busy past a bound: a warm start is an optimisation, never a wait.
 *
 * The server is exec_warm_server.py, built into ferryd (exec_warm_source.c) and run
 * as `python -c SOURCE 3 MODULE…` under the job user, in its own session,
 * with the daemon's end of a socket pair: nobody else can reach it, and it
 * exits when the daemon closes its end (idle for FERRY_WARM_IDLE, or the
 * daemon gone). Its environment is the one a cold job of that step would
 * get less the variables set per attempt and the step's secrets; only the
 * variables that shape what an import does (PYTHON*, LD_*, LANG and LC_*,
 * the thread-count settings of the numeric libraries, CUDA_*, PATH) are
 * in its key, the rest the fork sets per job. Per job the server forks a
 * supervisor that does what the C shim does (session, DIR/status, DIR/log,
 * secrets masked) and forks the job from it; the engine then treats the
 * supervisor as it treats an adopted shim (pid and start time, signalled
 * and sampled as the process group it leads). Forking per job and never
 * reusing a process keeps jobs from sharing state; what they do share is
 * what a fork shares: the preloaded modules' state as imported, the hash
 * seed (PYTHONHASHSEED), the interpreter's flags. Random generators
 * (random, numpy.random) are seeded afresh in each job.
 *
 * Containers: the server would run inside the step's image (one
 * long-lived container per key, `podman exec` replaced by a request), with
 * the job's limits set on the forked process's cgroup — not built; the
 * other executors start cold and say so.
 *
 * Locking: one mutex over the table; a request holds it while it writes
 * and reads its reply (a fork of the server, a few ms, bounded by
 * WARM_REPLY_MS).
 */
#include "exec/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/logmask.h"
#include "exec/proc.h"
#include "lib/durations.h"
#include "lib/metrics.h"
#include "lib/util.h"

#define WARM_MAX 8             /* servers at once; the idlest goes for a new one */
#define WARM_REPLY_MS 5000     /* a request's reply, at most (two forks of a big process on a loaded machine) */
#define WARM_FAILED_MS 60000   /* a server that failed is not tried again for this long */
#define WARM_IDLE_MS 600000    /* FERRY_WARM_IDLE's default */

extern const char warm_server_source[]; /* exec_warm_server.py (the Makefile builds exec_warm_source.c) */

enum warm_state { W_FREE, W_STARTING, W_READY, W_FAILED };

struct warm_server {
	enum warm_state state;
	char key[65];
	char *python, *preload; /* for notes and the log: the path, "a, b" */
	pid_t pid;
	int fd;
	char *error;            /* W_FAILED: why */
	int64_t used_ms;        /* started, or last asked: the idle clock */
	long preload_ms;
	char *rbuf;             /* what was read past the last line */
	size_t rlen;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct warm_server servers[WARM_MAX];
static uint64_t warm_starts, cold_starts; /* under lock: /metrics */

/* ---- which commands run warm ------------------------------------------------ */

/* The file name resolves to: NAME with a '/' as it is, else the first executable on path. */
static char *resolve(const char *name, const char *path)
{
	char buf[PATH_MAX];
	const char *p = path, *end;

	if (strchr(name, '/'))
		return realpath(name, NULL);
	for (; p && *p; p = *end ? end + 1 : end) {
		size_t n;
		end = p + strcspn(p, ":");
		n = (size_t)(end - p);
		if (snprintf(buf, sizeof(buf), "%.*s/%s", (int)(n ? n : 1), n ? p : ".", name) >= (int)sizeof(buf))
			continue;
		if (access(buf, X_OK) == 0)
			return realpath(buf, NULL);
	}
	return NULL;
}

int warm_entry(char *const *argv, const char *path, const char *cwd, const char *python,
	       const char **why)
{
	char *a = NULL, *b = NULL;
	int same, i = 1;

	if (argv == NULL || argv[0] == NULL) {
		*why = "the step has no command";
		return -1;
	}
	a = resolve(argv[0], path);
	b = realpath(python, NULL);
	same = a && b && strcmp(a, b) == 0;
	free(a), free(b);
	if (!same) {
		*why = "its command does not start the warm interpreter (command[0] is another program "
		       "than warm.python)";
		return -1;
	}
	if (argv[i] && strcmp(argv[i], "-u") == 0)
		i++;
	if (argv[i] && (strcmp(argv[i], "-m") == 0 || strcmp(argv[i], "-c") == 0)) {
		if (argv[i + 1] == NULL) {
			*why = "-m or -c needs an argument";
			return -1;
		}
		return 0;
	}
	if (argv[i] == NULL || argv[i][0] == '-') {
		*why = "a warm start runs `python SCRIPT`, `python -m MODULE` or `python -c CODE` (with -u at "
		       "most before it), not other interpreter options";
		return -1;
	}
	{
		char *full = argv[i][0] == '/' ? xstrdup(argv[i]) : xasprintf("%s/%s", cwd, argv[i]);
		struct stat st;
		int ok = stat(full, &st) == 0 && S_ISREG(st.st_mode);
		free(full);
		if (!ok) {
			*why = "its script is not a file (the cold interpreter says why)";
			return -1;
		}
	}
	return 0;
}

/* Whether an environment entry shapes what an import does (exec_warm.c's note). */
static int import_var(const char *e)
{
	static const char *const prefixes[] = {"PYTHON", "LD_", "LANG=", "LC_", "OMP_", "MKL_", "OPENBLAS_",
					       "NUMEXPR_", "CUDA_", "PATH=", "HOME="};
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (strncmp(e, prefixes[i], strlen(prefixes[i])) == 0)
			return 1;
	return 0;
}

/* ---- the servers -------------------------------------------------------------- */

static void server_close(struct warm_server *s)
{
	if (s->fd >= 0)
		close(s->fd); /* EOF: the server exits; the engine's reaper takes it */
	free(s->python), free(s->preload), free(s->error), free(s->rbuf);
	memset(s, 0, sizeof(*s));
	s->fd = -1;
	s->state = W_FREE;
}

static void server_fail(struct warm_server *s, char *why)
{
	flog_warn("warm: server %d for %s [%s] failed: %s", (int)s->pid, s->python, s->preload, why);
	if (s->fd >= 0)
		close(s->fd);
	if (s->pid > 0)
		kill(-s->pid, SIGKILL);
	s->fd = -1;
	s->pid = 0;
	free(s->error);
	s->error = why;
	s->state = W_FAILED;
	s->used_ms = clock_mono_ms();
}

/*
 * A server that was ready and went away or stuck: killed, its slot freed
 * (warm_start starts a new one at once). Unlike an import that failed,
 * nothing says the next one would fail too.
 */
static void server_gone(struct warm_server *s, const char *what)
{
	flog_warn("warm: server %d for %s [%s] %s: starting a new one", (int)s->pid, s->python, s->preload, what);
	if (s->pid > 0)
		kill(-s->pid, SIGKILL);
	server_close(s);
}

/*
 * The next line from the server within ms (0: only what is there now):
 * 1 with *out (the caller's), 0 when none came, -1 when the server is gone.
 */
static int server_line(struct warm_server *s, int ms, json_t **out)
{
	int64_t until = clock_mono_ms() + ms;

	*out = NULL;
	for (;;) {
		char *nl = s->rbuf ? memchr(s->rbuf, '\n', s->rlen) : NULL;
		char chunk[4096];
		struct pollfd pf = {.fd = s->fd, .events = POLLIN};
		int64_t left;
		ssize_t k;

		if (nl) {
			size_t n = (size_t)(nl - s->rbuf);
			*out = json_loadb(s->rbuf, n, 0, NULL);
			memmove(s->rbuf, nl + 1, s->rlen - n - 1);
			s->rlen -= n + 1;
			return *out ? 1 : -1;
		}
		left = until - clock_mono_ms();
		if ((k = poll(&pf, 1, left > 0 ? (int)left : 0)) < 0 && errno == EINTR && left > 0)
			continue; /* a signal (another job's SIGCHLD), not the deadline */
		if (k <= 0)
			return 0;
		k = read(s->fd, chunk, sizeof(chunk));
		if (k < 0 && (errno == EINTR || errno == EAGAIN))
			continue; /* the deadline is looked at above */
		if (k <= 0)
			return -1;
		if (s->rlen + (size_t)k > 1 << 20)
			return -1; /* no line of ours is this long */
		s->rbuf = xrealloc(s->rbuf, s->rlen + (size_t)k);
		memcpy(s->rbuf + s->rlen, chunk, (size_t)k);
		s->rlen += (size_t)k;
	}
}

/* A starting server that said it is ready (or failed) is noted so; returns its state. */
static enum warm_state server_check(struct warm_server *s)
{
	json_t *msg;
	int r;

	if (s->state != W_STARTING)
		return s->state;
	if ((r = server_line(s, 0, &msg)) == 0)
		return s->state;
	if (r < 0) {
		server_fail(s, xstrdup("the server exited while importing (its log: warm/KEY.log)"));
	} else if (json_is_integer(json_object_get(msg, "ready"))) {
		s->state = W_READY;
		s->preload_ms = (long)json_integer_value(json_object_get(msg, "ready"));
		flog_info("warm: server %d for %s [%s] ready, imports took %ld ms", (int)s->pid, s->python,
			  s->preload, s->preload_ms);
	} else {
		const char *e = json_string_value(json_object_get(msg, "error"));
		server_fail(s, xstrdup(e ? e : "the server said something else than ready"));
	}
	json_decref(msg);
	return s->state;
}

/* Starts a server for key in s (free): W_STARTING, or W_FAILED with why. */
static void server_start(struct warm_server *s, const char *key, const char *python, json_t *preload,
			 char **envp, const char *home)
{
	size_t n = json_array_size(preload), i;
	char **argv = xcalloc(n + 5, sizeof(char *)), *logpath, *dir;
	int sv[2], logfd, nullfd;
	json_t *m;
	pid_t pid;

	memset(s, 0, sizeof(*s));
	memcpy(s->key, key, 65);
	s->python = xstrdup(python);
	s->preload = xstrdup("");
	json_array_foreach(preload, i, m) {
		char *t = xasprintf("%s%s%s", s->preload, i ? ", " : "", json_string_value(m));
		free(s->preload);
		s->preload = t;
	}
	s->used_ms = clock_mono_ms();
	s->fd = -1;
	argv[0] = (char *)python;
	argv[1] = "-c";
	argv[2] = (char *)warm_server_source;
	argv[3] = "3";
	json_array_foreach(preload, i, m)
		argv[4 + i] = (char *)json_string_value(m);
	dir = xasprintf("%s/warm", home);
	logpath = xasprintf("%s/%.16s.log", dir, key);
	(void)mkdir(dir, 0700);
	logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		server_fail(s, xasprintf("socketpair: %s", strerror(errno)));
		goto out;
	}
	pid = fork();
	if (pid == 0) {
		/* the child of a threaded process: async-signal-safe calls only, as the shim */
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		for (int sig = 1; sig < NSIG; sig++)
			signal(sig, SIG_DFL);
		setsid();
		if (nullfd >= 0)
			dup2(nullfd, 0);
		if (logfd >= 0) {
			dup2(logfd, 1);
			dup2(logfd, 2);
		}
		/* fd 3 the server's end; dup2 onto itself would keep its close-on-exec */
		if (sv[1] == 3)
			fcntl(3, F_SETFD, 0);
		else
			dup2(sv[1], 3);
		close_range(4, ~0U, 0);
		if (exec_user_drop() < 0 || chdir("/") < 0)
			_exit(126);
		execve(python, argv, envp);
		_exit(127);
	}
	close(sv[1]);
	if (pid < 0) {
		close(sv[0]);
		server_fail(s, xasprintf("fork: %s", strerror(errno)));
		goto out;
	}
	s->pid = pid;
	s->fd = sv[0];
	s->state = W_STARTING;
	flog_info("warm: starting server %d for %s [%s] (log %s)", (int)pid, python, s->preload, logpath);
out:
	if (logfd >= 0)
		close(logfd);
	if (nullfd >= 0)
		close(nullfd);
	free(argv), free(dir), free(logpath);
}

/* The slot for key: its server, else a free slot (the idlest server closed when none is free). */
static struct warm_server *slot_for(const char *key)
{
	struct warm_server *idlest = NULL;

	for (int i = 0; i < WARM_MAX; i++)
		if (servers[i].state != W_FREE && strcmp(servers[i].key, key) == 0)
			return &servers[i];
	for (int i = 0; i < WARM_MAX; i++)
		if (servers[i].state == W_FREE)
			return &servers[i];
	for (int i = 0; i < WARM_MAX; i++)
		if (idlest == NULL || servers[i].used_ms < idlest->used_ms)
			idlest = &servers[i];
	server_close(idlest);
	return idlest;
}

/* One request to a ready server: 1 with *pid and *start, 0 with *note. Under lock. */
static int server_request(struct warm_server *s, const struct exec_local_cmd *x, const char *log,
			  const char *status, const struct logmask *mask, pid_t *pid, int64_t *start,
			  char **note)
{
	json_t *req = json_object(), *argv = json_array(), *env = json_array(), *reply = NULL;
	char *text;
	size_t len, off = 0;
	int64_t until = clock_mono_ms() + WARM_REPLY_MS;
	int r, ok = 0;

	for (size_t i = 0; x->argv[i]; i++)
		json_array_append_new(argv, json_string(x->argv[i]));
	for (size_t i = 0; x->envp[i]; i++)
		json_array_append_new(env, json_string(x->envp[i]));
	json_object_set_new(req, "argv", argv);
	json_object_set_new(req, "env", env);
	json_object_set_new(req, "cwd", json_string(x->cwd));
	json_object_set_new(req, "log", json_string(log));
	json_object_set_new(req, "status", json_string(status));
	if (mask)
		json_object_set_new(req, "mask", logmask_values(mask));
	text = json_dumps(req, JSON_COMPACT | JSON_ENSURE_ASCII);
	json_decref(req);
	if (text == NULL) {
		*note = xstrdup("its environment or arguments are not valid UTF-8");
		return 0;
	}
	len = strlen(text);
	text[len++] = '\n'; /* over the NUL: the length is kept */
	while (off < len) {
		struct pollfd pf = {.fd = s->fd, .events = POLLOUT};
		int64_t left = until - clock_mono_ms();
		ssize_t k;
		if (left <= 0)
			break;
		if ((k = poll(&pf, 1, (int)left)) < 0 && errno == EINTR)
			continue; /* a signal, not the deadline */
		if (k <= 0)
			break;
		k = send(s->fd, text + off, len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (k < 0 && errno != EINTR && errno != EAGAIN)
			break;
		if (k > 0)
			off += (size_t)k;
	}
	explicit_bzero(text, len); /* the environment holds the step's secrets */
	free(text);
	if (off < len) {
		*note = xasprintf("the warm server for %s [%s] did not take the request (a new one is starting)",
				  s->python, s->preload);
		server_gone(s, "did not take the request");
		return 0;
	}
	r = server_line(s, (int)(until - clock_mono_ms()), &reply);
	if (r == 1 && json_integer_value(json_object_get(reply, "pid")) > 0) {
		*pid = (pid_t)json_integer_value(json_object_get(reply, "pid"));
		*start = json_integer_value(json_object_get(reply, "start"));
		ok = 1;
	} else if (r == 1) {
		const char *e = json_string_value(json_object_get(reply, "error"));
		*note = xasprintf("the warm server could not start it: %s", e ? e : "no reason given");
	} else {
		/* no answer: it may have forked the job before it stuck; its status file says (exec_local.c) */
		*note = xasprintf("the warm server for %s [%s] %s (a new one is starting)", s->python, s->preload,
				  r == 0 ? "did not answer in time" : "exited");
		server_gone(s, r == 0 ? "did not answer in time" : "exited");
		return 0;
	}
	json_decref(reply);
	s->used_ms = clock_mono_ms();
	return ok;
}

int warm_start(const struct exec_spec *c, const struct exec_local_cmd *x, const char *log,
	       const char *status, const struct logmask *mask, pid_t *pid, int64_t *start, char **note)
{
	json_t *w = c->warm, *preload = json_object_get(w, "preload");
	const char *python = json_string_value(json_object_get(w, "python")), *why = NULL, *path = NULL;
	const struct exec_user *u = exec_user_get();
	char **senv, key[65], *keytext, *k;
	size_t n = 0, m = 0, len;
	struct warm_server *s;
	int started = 0;

	*note = NULL;
	if (python == NULL)
		return 0;
	for (size_t i = 0; x->envp[i]; i++)
		if (strncmp(x->envp[i], "PATH=", 5) == 0)
			path = x->envp[i] + 5;
	if (warm_entry(x->argv, path, x->cwd, python, &why) < 0) {
		*note = xasprintf("%s", why);
		pthread_mutex_lock(&lock);
		cold_starts++;
		pthread_mutex_unlock(&lock);
		return 0;
	}
	/* the server's environment: the job's less what the attempt sets, its secrets and the step's other variables */
	while (x->envp[n])
		n++;
	senv = xcalloc(n + 1, sizeof(char *));
	keytext = xasprintf("%s\n%u", python, u ? (unsigned)u->uid : (unsigned)getuid());
	for (size_t i = 0; i < n; i++) {
		const char *e = x->envp[i];
		int from_step = 0;
		if (strncmp(e, "FERRY_", 6) == 0)
			continue;
		len = strcspn(e, "=");
		if (c->secrets && json_object_getn(c->secrets, e, len))
			continue;
		from_step = c->env && json_object_getn(c->env, e, len) != NULL;
		if (from_step && !import_var(e))
			continue;
		senv[m++] = (char *)e;
		if (import_var(e)) {
			k = xasprintf("%s\n%s", keytext, e);
			free(keytext);
			keytext = k;
		}
	}
	for (size_t i = 0; i < json_array_size(preload); i++) {
		k = xasprintf("%s\n%s", keytext, json_string_value(json_array_get(preload, i)));
		free(keytext);
		keytext = k;
	}
	sha256_hex(key, keytext, strlen(keytext));
	free(keytext);

	pthread_mutex_lock(&lock);
	s = slot_for(key);
	if (s->state == W_FREE)
		server_start(s, key, python, preload, senv, c->home);
	if (s->state == W_FAILED && clock_mono_ms() - s->used_ms >= WARM_FAILED_MS) {
		server_close(s);
		server_start(s, key, python, preload, senv, c->home);
	}
	switch (server_check(s)) {
	case W_READY:
		started = server_request(s, x, log, status, mask, pid, start, note);
		if (s->state == W_FREE) /* it was gone: a new one for the next step */
			server_start(s, key, python, preload, senv, c->home);
		break;
	case W_STARTING:
		*note = xasprintf("the warm server for %s [%s] is still importing", s->python, s->preload);
		break;
	default:
		*note = xasprintf("the warm server for %s [%s] failed: %s", python, s->preload ? s->preload : "",
				  s->error ? s->error : "no reason given");
		break;
	}
	if (started)
		warm_starts++;
	else
		cold_starts++;
	pthread_mutex_unlock(&lock);
	free(senv);
	return started;
}

void warm_tick(void)
{
	int64_t idle = WARM_IDLE_MS, now = clock_mono_ms();
	const char *v = getenv("FERRY_WARM_IDLE");

	if (v)
		(void)duration_parse(v, &idle);
	pthread_mutex_lock(&lock);
	for (int i = 0; i < WARM_MAX; i++) {
		struct warm_server *s = &servers[i];
		if (s->state == W_STARTING)
			server_check(s);
		if ((s->state == W_READY && now - s->used_ms >= idle) ||
		    (s->state == W_FAILED && now - s->used_ms >= WARM_FAILED_MS)) {
			flog_info("warm: closing server %d for %s [%s]", (int)s->pid, s->python, s->preload);
			server_close(s);
		}
	}
	pthread_mutex_unlock(&lock);
}

void warm_metrics(char **buf, size_t *len, size_t *cap)
{
	static const char *const names[] = {"starting", "ready", "failed"};
	int count[3] = {0};

	pthread_mutex_lock(&lock);
	for (int i = 0; i < WARM_MAX; i++)
		if (server_check(&servers[i]) != W_FREE) /* a starting one that said it is ready counts as ready */
			count[servers[i].state - W_STARTING]++;
	metrics_appendf(buf, len, cap,
			"# HELP ferry_warm_servers Warm Python servers of this daemon (warm: on a step), by state.\n"
			"# TYPE ferry_warm_servers gauge\n");
	for (int i = 0; i < 3; i++)
		metrics_appendf(buf, len, cap, "ferry_warm_servers{state=\"%s\"} %d\n", names[i], count[i]);
	metrics_appendf(buf, len, cap,
			"# HELP ferry_warm_starts_total Jobs with warm: started as a fork of their warm server.\n"
			"# TYPE ferry_warm_starts_total counter\nferry_warm_starts_total %llu\n"
			"# HELP ferry_warm_cold_starts_total Jobs with warm: that started cold (the reason is in their log).\n"
			"# TYPE ferry_warm_cold_starts_total counter\nferry_warm_cold_starts_total %llu\n",
			(unsigned long long)warm_starts, (unsigned long long)cold_starts);
	pthread_mutex_unlock(&lock);
}

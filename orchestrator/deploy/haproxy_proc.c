/*
 * haproxy_proc — the HAProxy module's side that talks to haproxy (see
 * haproxy.c for the design): its admin socket, one bounded command at a
 * time, and its process — found again from its pid file (a live haproxy
 * whose command line names this directory's config), started daemonised
 * from freshly written files, reloaded (SIGUSR2 to the master, then a
 * bounded wait for a worker with the new layout) and stopped. Children are
 * forked with only async-signal-safe calls before exec.
 */
#include "deploy/haproxy_priv.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*
 * Writes text to path through path.tmp and rename, so haproxy never reads
 * half a file. No fsync: the files are derived from the database and
 * rewritten by the next hap_apply, so a power loss costs nothing.
 */
static int write_atomic(const char *path, const char *text)
{
	char *tmp = xasprintf("%s.tmp", path);
	size_t len = strlen(text);
	int fd, rc = FERRY_ERROR;

	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		ferry_error_set("%s: %s", tmp, strerror(errno));
		goto out;
	}
	if (fd_write_all(fd, text, len) < 0) {
		ferry_error_set("%s: %s", tmp, strerror(errno));
		close(fd);
		goto out;
	}
	close(fd);
	if (rename(tmp, path) < 0) {
		ferry_error_set("rename %s: %s", tmp, strerror(errno));
		goto out;
	}
	rc = 0;
out:
	if (rc < 0)
		unlink(tmp);
	free(tmp);
	return rc;
}

/* ---- the admin socket ---- */

static int deadline_left(int64_t deadline)
{
	int64_t left = deadline - clock_mono_ms();
	return left > 0 ? (int)left : 0;
}

/* poll on one descriptor until it is ready or the deadline: a signal (a job's SIGCHLD) is not the deadline. */
static int poll_ready(struct pollfd *p, int64_t deadline)
{
	int r;

	while ((r = poll(p, 1, deadline_left(deadline))) < 0 && errno == EINTR && deadline_left(deadline) > 0)
		;
	return r;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/*
 * Sends one command line on the admin socket and reads the answer until
 * haproxy closes (non-interactive mode), within CLI_TIMEOUT_MS in all.
 * *out is the answer (the caller's). FERRY_ENOTFOUND when nothing listens.
 */
int hap_cli(const struct hap *h, const char *cmd, char **out)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int64_t deadline = clock_mono_ms() + CLI_TIMEOUT_MS;
	struct buf b = {0};
	char *line = xasprintf("%s\n", cmd), chunk[8192];
	size_t sent = 0, len = strlen(line);
	int fd, rc = FERRY_ERROR;

	*out = NULL;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", h->sock);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		ferry_error_set("socket: %s", strerror(errno));
		goto out;
	}
	/* a non-blocking unix connect fails with EAGAIN while the backlog is full: try again */
	while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno == EAGAIN && deadline_left(deadline) > 0) {
			sleep_ms(2);
			continue;
		}
		if (errno == ENOENT || errno == ECONNREFUSED) {
			ferry_error_set("haproxy is not running (%s: %s)", h->sock, strerror(errno));
			rc = FERRY_ENOTFOUND;
		} else {
			ferry_error_set("%s: %s", h->sock, strerror(errno));
		}
		goto out;
	}
	while (sent < len) {
		struct pollfd p = {fd, POLLOUT, 0};
		ssize_t w;
		if (poll_ready(&p, deadline) <= 0) {
			ferry_error_set("haproxy admin socket: no room to send '%s' within %d ms", cmd,
					CLI_TIMEOUT_MS);
			goto out;
		}
		w = send(fd, line + sent, len - sent, MSG_NOSIGNAL);
		if (w < 0 && errno != EINTR && errno != EAGAIN) {
			ferry_error_set("haproxy admin socket: send: %s", strerror(errno));
			goto out;
		}
		if (w > 0)
			sent += (size_t)w;
	}
	for (;;) {
		struct pollfd p = {fd, POLLIN, 0};
		ssize_t r;
		if (poll_ready(&p, deadline) <= 0) {
			ferry_error_set("haproxy admin socket: no answer to '%s' within %d ms", cmd,
					CLI_TIMEOUT_MS);
			goto out;
		}
		r = recv(fd, chunk, sizeof(chunk), 0);
		if (r == 0)
			break;
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			ferry_error_set("haproxy admin socket: recv: %s", strerror(errno));
			goto out;
		}
		if (b.len + (size_t)r > CLI_MAX_BYTES) {
			ferry_error_set("haproxy admin socket: answer to '%s' is over %u bytes", cmd,
					CLI_MAX_BYTES);
			goto out;
		}
		buf_add(&b, chunk, (size_t)r);
	}
	*out = b.p ? b.p : xstrdup("");
	b.p = NULL;
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	free(line);
	free(b.p);
	return rc;
}

/*
 * Runs a "set" command: success prints nothing but blank lines, except
 * for an address change, which says what changed "by 'stats socket
 * command'".
 */
int hap_cli_set(const struct hap *h, const char *cmd)
{
	char *ans = NULL;
	int rc = hap_cli(h, cmd, &ans);

	if (rc == 0 && strstr(ans, "by 'stats socket command'") == NULL) {
		for (const char *p = ans; *p; p++)
			if (!isspace((unsigned char)*p)) {
				size_t n = strcspn(ans, "\n");
				ferry_error_set("haproxy: %s: %.*s", cmd, (int)n, ans);
				rc = FERRY_ERROR;
				break;
			}
	}
	free(ans);
	return rc;
}

/* The value of "Key: value" in a "show info" answer (the caller's), or NULL. */
static char *info_field(const char *info, const char *key)
{
	size_t klen = strlen(key);

	for (const char *p = info; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, key, klen) == 0 && p[klen] == ':') {
			const char *v = p + klen + 1;
			while (*v == ' ')
				v++;
			return xstrndup(v, strcspn(v, "\r\n"));
		}
	}
	return NULL;
}

/* The worker's pid and node name from "show info" (each may be NULL; node is the caller's). */
int hap_read_info(const struct hap *h, long *pid, char **node)
{
	char *info = NULL, *p;
	int64_t v;
	int rc;

	if ((rc = hap_cli(h, "show info", &info)) < 0)
		return rc;
	if (pid) {
		p = info_field(info, "Pid");
		*pid = p && parse_int64(p, &v) == 0 ? (long)v : -1;
		free(p);
	}
	if (node)
		*node = info_field(info, "node");
	free(info);
	return 0;
}

/* ---- the process ---- */

/*
 * Whether pid lives (not a zombie); its start time (clock ticks after boot,
 * which exec keeps) into *start.
 */
static int pid_alive(pid_t pid, unsigned long long *start)
{
	char path[64], *stat = NULL, *p;
	size_t len = 0;
	int alive = 0;

	/* a zombie that is our child (a subreaper's) is reaped here; others are skipped below */
	waitpid(pid, NULL, WNOHANG);
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (file_read(&stat, &len, path) < 0) {
		ferry_error_clear();
		return 0;
	}
	p = strrchr(stat, ')');
	if (p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X') {
		/* after ") ": state is field 3, starttime field 22 */
		alive = 1;
		p += 2;
		for (int field = 3; field < 22 && p; field++)
			p = strchr(p, ' '), p = p ? p + 1 : NULL;
		*start = p ? strtoull(p, NULL, 10) : 0;
	}
	free(stat);
	return alive;
}

/* Whether pid's command line names our config file (empty while it execs). */
static int pid_runs_our_config(const struct hap *h, pid_t pid)
{
	char path[64], *cmdline = NULL;
	size_t len = 0;
	int ours = 0;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	if (file_read(&cmdline, &len, path) < 0) {
		ferry_error_clear();
		return 0;
	}
	for (size_t off = 0; off < len; off += strlen(cmdline + off) + 1)
		if (strcmp(cmdline + off, h->cfg) == 0) {
			ours = 1;
			break;
		}
	free(cmdline);
	return ours;
}

/*
 * The master's pid when this directory's haproxy runs, else 0. The pid
 * file names it; it must live and run our config. A reload re-executes
 * the master (same pid and start time) and rewrites the pid file in place
 * meanwhile, and its command line is empty for a moment, so the master
 * once found is known again by its start time, and the pid file and the
 * command line are read again for a moment when they are empty.
 */
pid_t hap_running_pid(struct hap *h)
{
	unsigned long long start = 0;
	char *text = NULL;
	size_t len = 0;
	int64_t v;

	if (h->master > 0 && pid_alive(h->master, &start) && start == h->master_start)
		return h->master;
	h->master = 0;
	for (int tries = 0; tries < 20; tries++, sleep_ms(5)) {
		int rc;
		free(text);
		text = NULL;
		if ((rc = file_read(&text, &len, h->pidfile)) < 0) {
			ferry_error_clear();
			if (rc == FERRY_ENOTFOUND)
				break;
			continue;
		}
		text[strcspn(text, "\r\n")] = '\0';
		if (parse_int64(text, &v) < 0 || v <= 1 || v >= 1 << 30)
			continue;
		if (!pid_alive((pid_t)v, &start))
			break;
		if (pid_runs_our_config(h, (pid_t)v)) {
			h->master = (pid_t)v;
			h->master_start = start;
			break;
		}
	}
	free(text);
	return h->master;
}

/* Whether pid is gone (or a zombie). */
static int pid_gone(pid_t pid)
{
	char path[64], *stat = NULL;
	size_t len;
	int gone;

	waitpid(pid, NULL, WNOHANG);
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (file_read(&stat, &len, path) < 0) {
		ferry_error_clear();
		return 1;
	}
	{
		const char *rp = strrchr(stat, ')');
		gone = rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
	}
	free(stat);
	return gone;
}

/* The pids whose parent is ppid (the master's workers), at most max. */
static size_t children_of(pid_t ppid, pid_t *out, size_t max)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	size_t n = 0;

	if (d == NULL)
		return 0;
	while (n < max && (e = readdir(d)) != NULL) {
		char path[300], *stat = NULL;
		size_t len;
		int64_t pid;
		if (parse_int64(e->d_name, &pid) < 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		if (file_read(&stat, &len, path) < 0) {
			ferry_error_clear();
			continue;
		}
		/* fields after the command: state ppid … */
		const char *rp = strrchr(stat, ')');
		if (rp && rp[1] == ' ' && rp[2] && rp[3] == ' ') {
			long pp = strtol(rp + 4, NULL, 10);
			if (pp == (long)ppid)
				out[n++] = (pid_t)pid;
		}
		free(stat);
	}
	closedir(d);
	return n;
}

/* The haproxy binary: $FERRY_HAPROXY, else haproxy on PATH, else in /usr/sbin or /usr/local/sbin. */
char *hap_find_binary(void)
{
	const char *env = getenv("FERRY_HAPROXY"), *path = getenv("PATH");
	static const char *const fallback[] = {"/usr/sbin/haproxy", "/usr/local/sbin/haproxy", NULL};

	if (env && *env)
		return xstrdup(env);
	for (const char *p = path; p && *p;) {
		size_t n = strcspn(p, ":");
		char *cand = xasprintf("%.*s/haproxy", (int)n, p);
		if (n > 0 && access(cand, X_OK) == 0)
			return cand;
		free(cand);
		p += n;
		if (*p == ':')
			p++;
	}
	for (size_t i = 0; fallback[i]; i++)
		if (access(fallback[i], X_OK) == 0)
			return xstrdup(fallback[i]);
	return xstrdup("haproxy");
}

/*
 * Runs argv with stdout and stderr into logpath (truncated when trunc) and
 * waits for it, at most timeout_ms (then SIGKILL). Returns its exit status,
 * 0x100 when it cannot be known (the daemon's reaper took it first; the
 * callers then judge by its effects), or FERRY_ERROR.
 */
static int spawn_wait(char *const argv[], const char *logpath, int trunc, int64_t timeout_ms)
{
	int64_t deadline = clock_mono_ms() + timeout_ms;
	int logfd, nullfd, st;
	sigset_t all, old;
	pid_t pid, r;

	logfd = open(logpath, O_WRONLY | O_CREAT | O_CLOEXEC | (trunc ? O_TRUNC : O_APPEND), 0600);
	nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (logfd < 0 || nullfd < 0) {
		ferry_error_set("%s: %s", logpath, strerror(errno));
		if (logfd >= 0)
			close(logfd);
		if (nullfd >= 0)
			close(nullfd);
		return FERRY_ERROR;
	}
	/* no signal handler of the daemon may run in the child before exec */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid = fork();
	if (pid == 0) {
		sigset_t none;
		for (int s = 1; s < NSIG; s++)
			signal(s, SIG_DFL);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(nullfd, 0);
		dup2(logfd, 1);
		dup2(logfd, 2);
		/* none of the daemon's descriptors (its listening socket) may live on in haproxy */
		close_range(3, ~0U, 0);
		execv(argv[0], argv);
		_exit(127);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close(logfd);
	close(nullfd);
	if (pid < 0) {
		ferry_error_set("fork: %s", strerror(errno));
		return FERRY_ERROR;
	}
	while ((r = waitpid(pid, &st, WNOHANG)) == 0 && clock_mono_ms() < deadline)
		sleep_ms(2);
	if (r == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		ferry_error_set("%s did not finish within %lld ms", argv[0], (long long)timeout_ms);
		return FERRY_ERROR;
	}
	if (r < 0)
		return errno == ECHILD ? 0x100 : FERRY_ERROR;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* The last lines of a log, for an error message (the caller frees it). */
static char *log_tail(const char *path)
{
	char *text = NULL, *p;
	size_t len = 0;
	int lines = 0;

	if (file_read(&text, &len, path) < 0) {
		ferry_error_clear();
		return xstrdup("");
	}
	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' '))
		text[--len] = '\0';
	for (p = text + len; p > text; p--)
		if (p[-1] == '\n' && ++lines == 4)
			break;
	for (char *q = p; *q; q++)
		if (*q == '\n')
			*q = ' ';
	p = xstrdup(p);
	free(text);
	return p;
}

/* Checks the config file path with haproxy -c. */
int hap_check_config(const struct hap *h, const char *path)
{
	char *checklog = xasprintf("%s/check.log", h->dir), *tail = NULL, *out = NULL;
	char *argv[] = {h->bin, "-c", "-f", (char *)path, NULL};
	size_t len;
	int st, rc = FERRY_ERROR;

	st = spawn_wait(argv, checklog, 1, START_TIMEOUT_MS);
	if (st < 0)
		goto out;
	/* when the exit status was lost to the daemon's reaper, haproxy's own words decide */
	if (st == 0x100 && file_read(&out, &len, checklog) == 0 && strstr(out, "Configuration file is valid"))
		st = 0;
	if (st != 0) {
		tail = log_tail(checklog);
		ferry_error_set("haproxy -c %s failed: %s", path, tail);
		goto out;
	}
	rc = 0;
out:
	if (rc == 0)
		ferry_error_clear();
	free(checklog), free(tail), free(out);
	return rc;
}

/* Writes the config (checked by haproxy -c first when check) and the state file. */
int hap_write_files(const struct hap *h, const char *cfg, const char *state, int check)
{
	char *tmp = xasprintf("%s.new", h->cfg);
	int rc;

	if (check) {
		if ((rc = write_atomic(tmp, cfg)) < 0 || (rc = hap_check_config(h, tmp)) < 0)
			goto out;
	}
	/* the state file first: a config that names a server always finds its state */
	if ((rc = write_atomic(h->state, state)) < 0 || (rc = write_atomic(h->cfg, cfg)) < 0)
		goto out;
out:
	unlink(tmp);
	free(tmp);
	return rc;
}

/* Starts haproxy from the files and waits until its worker answers with node. */
int hap_start_locked(struct hap *h, const char *node)
{
	char *argv[] = {h->bin, "-D", "-f", h->cfg, NULL};
	int64_t deadline = clock_mono_ms() + START_TIMEOUT_MS;
	char *tail, *got = NULL;
	int st;

	/* never two masters on one directory: one that answers but that the pid file misses is an error */
	if (hap_read_info(h, NULL, NULL) == 0) {
		ferry_error_set("a haproxy answers on %s but %s does not name it; stop it first", h->sock,
				h->pidfile);
		return FERRY_ECONFLICT;
	}
	unlink(h->pidfile);
	st = spawn_wait(argv, h->log, 0, START_TIMEOUT_MS);
	if (st < 0)
		return st;
	if (st != 0 && st != 0x100) {
		tail = log_tail(h->log);
		ferry_error_set("haproxy did not start (exit %d): %s", st, tail);
		free(tail);
		return FERRY_ERROR;
	}
	/* -D: the launcher returned once the master forked; the worker may not answer yet */
	while (clock_mono_ms() < deadline) {
		if (hap_running_pid(h) > 0 && hap_read_info(h, NULL, &got) == 0 && got && strcmp(got, node) == 0) {
			free(got);
			ferry_error_clear();
			return 0;
		}
		free(got);
		got = NULL;
		sleep_ms(5);
	}
	tail = log_tail(h->log);
	ferry_error_set("haproxy did not answer on %s within %d ms: %s", h->sock, START_TIMEOUT_MS, tail);
	free(tail);
	return FERRY_ERROR;
}

static int master_reloading(pid_t master);

/*
 * Reloads the master (SIGUSR2: it starts a new worker from the files,
 * which takes the listening sockets over) and waits until a worker other
 * than old_worker answers, with node when node is not NULL.
 *
 * A SIGUSR2 that reaches the master while it is still starting or
 * re-executing is lost (HAProxy 2.6: the new image has not installed its
 * handler yet), and then no reload ever comes. So the signal waits until
 * the master is not in the middle of one, and is sent again when, two
 * seconds later, no reload began (a second reload is harmless).
 */
#define RELOAD_RESEND_MS 2000
int hap_reload_locked(struct hap *h, pid_t master, long old_worker, const char *node)
{
	int64_t deadline = clock_mono_ms() + START_TIMEOUT_MS, resend;
	char *got = NULL, *tail;
	long pid = -1;
	int began = 0;

	while (master_reloading(master) && clock_mono_ms() < deadline)
		sleep_ms(5);
	if (kill(master, SIGUSR2) < 0) {
		ferry_error_set("kill -USR2 %d: %s", (int)master, strerror(errno));
		return FERRY_ERROR;
	}
	resend = clock_mono_ms() + RELOAD_RESEND_MS;
	/*
	 * The old worker keeps accepting on the shared admin socket until it
	 * has handled its soft-stop signal: the new one must answer several
	 * times in a row before the next command can be sure to reach it.
	 */
	for (int in_a_row = 0; clock_mono_ms() < deadline; sleep_ms(in_a_row ? 5 : 2)) {
		began = began || master_reloading(master);
		if (hap_read_info(h, &pid, &got) == 0 && pid != old_worker && pid > 0 &&
		    (node == NULL || (got && strcmp(got, node) == 0))) {
			began = 1;
			if (++in_a_row == 4) {
				free(got);
				ferry_error_clear();
				return 0;
			}
		} else {
			in_a_row = 0;
		}
		free(got);
		got = NULL;
		if (!began && clock_mono_ms() >= resend) {
			flog_debug("haproxy: no reload began within %d ms of SIGUSR2; sending it again", RELOAD_RESEND_MS);
			kill(master, SIGUSR2);
			resend = clock_mono_ms() + RELOAD_RESEND_MS;
		}
	}
	tail = log_tail(h->log);
	ferry_error_set("haproxy did not reload within %d ms: %s", START_TIMEOUT_MS, tail);
	free(tail);
	return FERRY_ERROR;
}

static size_t workers_of(pid_t master, pid_t *out, size_t max);

/*
 * Whether the master is in the middle of a reload. On SIGUSR2 the master
 * re-executes itself with "-sf OLD_WORKERS" on its command line, reads the
 * config and server-state files, forks the new worker, then re-executes
 * into its wait mode without "-sf" (seen with HAProxy 2.6). So a reload is
 * under way while every worker of the master is one "-sf" names (the new
 * one is not forked yet); a version that kept "-sf" after the fork would
 * still read as settled. An empty command line is the moment between two
 * execs: a reload too.
 */
static int master_reloading(pid_t master)
{
	char path[64], *cmdline = NULL;
	pid_t kids[64];
	size_t len = 0, nk, sf = 0;
	int reloading = 0;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)master);
	if (file_read(&cmdline, &len, path) < 0) {
		ferry_error_clear();
		return 1;
	}
	for (size_t i = 0; i < len && sf == 0; i += strlen(cmdline + i) + 1)
		if (strcmp(cmdline + i, "-sf") == 0)
			sf = i + 4;
	if (len == 0) {
		reloading = 1;
	} else if (sf > 0) {
		nk = workers_of(master, kids, sizeof(kids) / sizeof(kids[0]));
		reloading = 1;
		for (size_t k = 0; k < nk && reloading; k++) {
			int named = 0;
			/* the pids after "-sf", up to the next option */
			for (size_t i = sf; i < len && cmdline[i] != '-' && !named; i += strlen(cmdline + i) + 1)
				named = strtol(cmdline + i, NULL, 10) == (long)kids[k];
			reloading = named;
		}
	}
	free(cmdline);
	return reloading;
}

/* The master's workers (its children; /proc/M/task/M/children, else a scan of /proc). */
static size_t workers_of(pid_t master, pid_t *out, size_t max)
{
	char path[64], *text = NULL, *p, *end;
	size_t len = 0, n = 0;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)master, (int)master);
	if (file_read(&text, &len, path) < 0) {
		ferry_error_clear();
		return children_of(master, out, max);
	}
	for (p = text; n < max; p = end) {
		long v = strtol(p, &end, 10);
		if (end == p)
			break;
		out[n++] = (pid_t)v;
	}
	free(text);
	return n;
}

int hap_settle_locked(struct hap *h, pid_t master, struct hap_workers *w)
{
	int64_t deadline = clock_mono_ms() + START_TIMEOUT_MS;
	char *tail;

	for (int in_a_row = 0; clock_mono_ms() < deadline; sleep_ms(in_a_row ? 5 : 2)) {
		pid_t newest = 0;
		unsigned long long newest_start = 0, start;
		long pid = -1;

		if (master_reloading(master)) {
			in_a_row = 0;
			continue;
		}
		w->n = workers_of(master, w->pid, sizeof(w->pid) / sizeof(w->pid[0]));
		for (size_t i = 0; i < w->n; i++)
			if (pid_alive(w->pid[i], &start) && start >= newest_start)
				newest = w->pid[i], newest_start = start;
		if (newest == 0 || hap_read_info(h, &pid, NULL) < 0 || pid != (long)newest) {
			in_a_row = 0;
			continue;
		}
		/* an old worker may still take commands on the shared socket until it handles its soft stop */
		if (w->n == 1 || ++in_a_row == 4) {
			ferry_error_clear();
			return 0;
		}
	}
	tail = log_tail(h->log);
	ferry_error_set("haproxy did not settle on one worker within %d ms: %s", START_TIMEOUT_MS, tail);
	free(tail);
	return FERRY_ERROR;
}

int hap_reloaded_since(pid_t master, const struct hap_workers *w)
{
	pid_t now[64];
	size_t n;

	if (master_reloading(master))
		return 1;
	n = workers_of(master, now, sizeof(now) / sizeof(now[0]));
	for (size_t i = 0; i < n; i++) {
		size_t k = 0;
		while (k < w->n && w->pid[k] != now[i])
			k++;
		if (k == w->n)
			return 1;
	}
	return 0;
}

void hap_stop_locked(struct hap *h)
{
	pid_t master = hap_running_pid(h), kids[64];
	size_t nk;
	int64_t deadline;

	if (master <= 0)
		return;
	nk = children_of(master, kids, sizeof(kids) / sizeof(kids[0]));
	/* soft stop: the workers finish their requests, the master exits after them */
	kill(master, SIGUSR1);
	deadline = clock_mono_ms() + STOP_SOFT_MS;
	while (!pid_gone(master) && clock_mono_ms() < deadline)
		sleep_ms(5);
	if (!pid_gone(master))
		kill(master, SIGKILL);
	deadline = clock_mono_ms() + 1000;
	for (size_t i = 0; i < nk; i++) {
		while (!pid_gone(kids[i]) && clock_mono_ms() < deadline)
			sleep_ms(5);
		if (!pid_gone(kids[i]))
			kill(kids[i], SIGKILL);
	}
	while (!pid_gone(master) && clock_mono_ms() < deadline)
		sleep_ms(5);
	unlink(h->pidfile);
}

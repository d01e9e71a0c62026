/*
 * exec_orphans — containers that still run although their attempt is over.
 *
 * A container outlives the daemon that started it, by design: a restarted
 * daemon adopts it (exec_type.adopt). But an attempt can end while its
 * daemon is away — another replica reaps it as lost, a person stops the
 * run — and then nobody adopts the container: recovery only looks at
 * attempts the database still calls running. Left alone it would run to
 * its end, holding CPU, memory and GPUs (Airflow's orphan container).
 *
 * Every ORPHANS_EVERY_MS (and once soon after the daemon starts) the
 * engine hands this work to its worker pool: each executor type with an
 * orphans hook lists the containers of this home its runtime still runs
 * (a bounded call to podman or dockerd) and asks, for each, whether its
 * attempt is running in the database; those that are not are killed and
 * removed. The order matters: the listing comes first and the question
 * second. A container exists only after its attempt's claim committed, so
 * one the listing saw has its attempt in the database when the question is
 * asked; a container started after the listing is not asked about at all.
 * When the database does not answer, nothing is killed.
 */
#include "exec/exec.h"
#include "exec/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/store.h"
#include "lib/util.h"
#include "store/workers.h"

#define CAPTURE_REAP_MS 100 /* how long a finished or killed tool is waited for */

extern char **environ;

int exec_capture_ex(char *const argv[], char **out, size_t max_out, int with_stderr, int *status,
		    int64_t timeout_ms)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	int64_t until = clock_mono_ms() + timeout_ms;
	size_t len = 0;
	int fds[2], err, error = FERRY_OK, st = -1;
	char *buf;
	pid_t pid;

	*out = NULL;
	if (status)
		*status = -1;
	if (pipe2(fds, O_CLOEXEC) != 0) {
		ferry_error_set("pipe: %s", strerror(errno));
		return FERRY_ERROR;
	}
	fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
	if (with_stderr)
		posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
	else
		posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	/* none of the daemon's descriptors (sockets, the database) go to the tool */
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	exec_spawnattr_child(&at);
	err = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(fds[1]);
	if (err != 0) {
		close(fds[0]);
		ferry_error_set("cannot run %s: %s", argv[0], strerror(err));
		return FERRY_ERROR;
	}
	buf = xmalloc(max_out + 1);
	for (;;) {
		struct pollfd p = {.fd = fds[0], .events = POLLIN};
		int64_t left = until - clock_mono_ms();
		char chunk[4096];
		ssize_t n;
		if (left <= 0) {
			kill(-pid, SIGKILL);
			ferry_error_set("%s did not finish within %lld ms", argv[0], (long long)timeout_ms);
			error = FERRY_ETIMEDOUT_CAPTURE;
			break;
		}
		if (poll(&p, 1, (int)left) <= 0)
			continue; /* timed out (judged above) or interrupted: never a blocking read */
		n = read(fds[0], chunk, sizeof(chunk));
		if (n == 0)
			break; /* it closed its output: it ended */
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			break;
		}
		/* past max_out the rest is read and dropped, so the tool never blocks on a full pipe */
		if (len < max_out) {
			size_t take = (size_t)n < max_out - len ? (size_t)n : max_out - len;
			memcpy(buf + len, chunk, take);
			len += take;
		}
	}
	close(fds[0]);
	buf[len] = '\0';
	*out = buf;
	/*
	 * Reaped here when it ends within CAPTURE_REAP_MS (a killed process
	 * still in the kernel may take longer, and the engine's stray reaper
	 * may take it first).
	 */
	for (int i = 0; i < CAPTURE_REAP_MS / 5; i++) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r != 0) {
			if (r < 0)
				st = -1;
			break;
		}
		usleep(5000);
	}
	if (status)
		*status = st;
	return error;
}

int exec_capture(char *const argv[], char **out, int64_t timeout_ms)
{
	int error = exec_capture_ex(argv, out, EXEC_CAPTURE_MAX, 0, NULL, timeout_ms);

	return error < 0 ? FERRY_ERROR : error;
}

/* ---- the work item ----------------------------------------------------------- */

struct orphans_work {
	struct work w;
	char *home;
	int removed;
};

struct ask {
	PGconn *conn;
	int asked, failed;
};

/* Whether run/step/attempt is running in the database; 1 (keep it) when the database does not say. */
static int wanted(int64_t run, const char *step, int attempt, void *arg)
{
	struct ask *a = arg;
	int rc;

	if (a->conn == NULL)
		return 1;
	a->asked++;
	rc = store_attempt_is_running(a->conn, run, step, attempt);
	if (rc < 0) {
		a->failed++;
		return 1;
	}
	return rc;
}

static void orphans_run(struct work *w, PGconn *conn)
{
	struct orphans_work *o = (struct orphans_work *)w;
	struct ask a = {.conn = conn};
	const struct exec_type *t;

	if (conn == NULL)
		return; /* no database: nothing can be known, nothing is killed */
	for (size_t i = 0; (t = exec_type_at(i)) != NULL; i++)
		if (t->orphans)
			o->removed += t->orphans(o->home, wanted, &a);
}

static struct work *orphans_work_new(const char *home)
{
	struct orphans_work *o = xcalloc(1, sizeof(*o));

	o->w.run = orphans_run;
	o->home = xstrdup(home);
	return &o->w;
}

static void orphans_work_free(struct work *w)
{
	struct orphans_work *o = (struct orphans_work *)w;

	if (o) {
		free(o->home);
		free(o);
	}
}

/* One sweep at a time, on the pool: listing containers is slow. */
static struct work *orphans_round(struct task_ctx *c, void *state)
{
	(void)state;
	return c->workers ? orphans_work_new(c->home) : NULL;
}

/* Back on the loop: says what the sweep removed. */
static void orphans_done(struct task_ctx *c, void *state, struct work *w)
{
	int n = ((const struct orphans_work *)w)->removed;

	(void)c, (void)state;
	if (n > 0)
		flog_info("removed %d container%s whose attempt was over", n, n == 1 ? "" : "s");
}

static int64_t every_orphan_sweep(const struct task_ctx *c)
{
	(void)c;
	return ORPHANS_EVERY_MS;
}

const struct task exec_orphans_task = {
	.name = "orphans",
	.flags = TASK_NO_DEV | TASK_POOL,
	.period = every_orphan_sweep,
	.start_round = orphans_round,
	.done = orphans_done,
	.free = orphans_work_free,
};

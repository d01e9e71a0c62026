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
#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store.h"
#include "util.h"
#include "workers.h"

extern char **environ;

int exec_capture(char *const argv[], char **out, int64_t timeout_ms)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	int fds[2], err, error = FERRY_OK;
	int64_t until = clock_mono_ms() + timeout_ms;
	size_t len = 0, cap = 4096;
	char *buf;
	pid_t pid;

	*out = NULL;
	if (pipe2(fds, O_CLOEXEC) != 0) {
		ferry_error_set("pipe: %s", strerror(errno));
		return FERRY_ERROR;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	posix_spawnattr_init(&at);
	posix_spawnattr_setpgroup(&at, 0);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
	err = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(fds[1]);
	if (err != 0) {
		close(fds[0]);
		ferry_error_set("cannot run %s: %s", argv[0], strerror(err));
		return FERRY_ERROR;
	}
	buf = xcalloc(1, cap);
	for (;;) {
		struct pollfd p = {.fd = fds[0], .events = POLLIN};
		int64_t left = until - clock_mono_ms();
		ssize_t n;
		if (left <= 0) {
			kill(-pid, SIGKILL);
			ferry_error_set("%s did not finish within %lld ms", argv[0], (long long)timeout_ms);
			error = FERRY_ERROR;
			break;
		}
		int ready = poll(&p, 1, (int)left);
		if (ready < 0 && errno != EINTR)
			break;
		if (ready <= 0)
			continue; /* nothing to read yet: the deadline is checked above, never a blocking read */
		if (len + 1 >= cap)
			buf = xrealloc(buf, cap *= 2);
		n = read(fds[0], buf + len, cap - len - 1);
		if (n == 0)
			break; /* EOF: it closed its output (it ended) */
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			break;
		}
		len += (size_t)n;
	}
	close(fds[0]);
	buf[len] = '\0';
	/*
	 * Its exit status is not needed (the output says it all), and the
	 * engine's stray reaper may take it first; reap it here when it can.
	 */
	for (int i = 0; i < 20 && waitpid(pid, NULL, WNOHANG) == 0; i++)
		usleep(5000);
	*out = buf;
	return error;
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

struct work *exec_orphans_work_new(const char *home)
{
	struct orphans_work *o = xcalloc(1, sizeof(*o));

	o->w.run = orphans_run;
	o->home = xstrdup(home);
	return &o->w;
}

int exec_orphans_removed(const struct work *w)
{
	return ((const struct orphans_work *)w)->removed;
}

void exec_orphans_work_free(struct work *w)
{
	struct orphans_work *o = (struct orphans_work *)w;

	if (o) {
		free(o->home);
		free(o);
	}
}

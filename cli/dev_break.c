/*
 * dev_break — stepping through a dev run: `ferry dev run FILE --step`
 * pauses before every step, `--break STEP` before the named ones. The
 * engine is held (engine_claim_hold: it claims nothing); each turn of the
 * dev loop asks the database which step of the run the engine would claim
 * next. A step not to pause at is let go at once (engine_claim_one); before
 * one to pause at, the person sees its rendered command, working directory,
 * FERRY_* and step environment and the upstream outputs it reads, and
 * answers on stdin, one line per answer:
 *
 *   r, run, or an empty line   let the step go (the engine claims it)
 *   s, skip                    do not run it: take its results from an
 *                              earlier run (--reuse RUN, else the newest run
 *                              of the workflow in which it succeeded)
 *   h, shell                   a shell ($SHELL, else /bin/sh) in the step's
 *                              working directory with its environment; the
 *                              question comes back when it exits
 *   q, quit                    stop the run
 *
 * Nothing here blocks the engine: stdin is read without waiting, and the
 * shell runs as a child the loop checks on, so the session's leases are
 * renewed meanwhile. Answers are read one byte at a time, so a script that
 * pipes answers and shell commands leaves the shell the lines meant for it.
 */
#include "cli/dev.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/engine.h"
#include "lib/util.h"

void dev_stepper_dispose(struct dev_stepper *s)
{
	for (size_t i = 0; i < s->nbreaks; i++)
		free(s->breaks[i]);
	free(s->breaks);
	free(s->asking_name);
	memset(s, 0, sizeof(*s));
}

int dev_stepper_add_breaks(struct dev_stepper *s, const char *list)
{
	char *copy = xstrdup(list), *save = NULL;

	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		s->breaks = xrealloc(s->breaks, (s->nbreaks + 1) * sizeof(*s->breaks));
		s->breaks[s->nbreaks++] = xstrdup(t);
	}
	free(copy);
	return s->nbreaks > 0 ? FERRY_OK : FERRY_EINVALID;
}

static int breaks_at(const struct dev_stepper *s, const char *name)
{
	if (s->all)
		return 1;
	for (size_t i = 0; i < s->nbreaks; i++)
		if (strcmp(s->breaks[i], name) == 0)
			return 1;
	return 0;
}

/* Shows the step about to run and asks. */
static void ask(struct dev_stepper *s, PGconn *conn, const char *home, int64_t run_id)
{
	struct dev_job j;

	printf("── before %s\n", s->asking_name);
	if (dev_job_make(&j, conn, home, run_id, s->asking_name, 1) == 0) {
		dev_job_show(stdout, &j);
		s->can_shell = 1;
	} else {
		printf("  %s\n", ferry_error_last());
		s->can_shell = 0;
	}
	dev_job_dispose(&j);
	printf("%s: [r]un, [s]kip (reuse an earlier result), %s[q]uit? ", s->asking_name,
	       s->can_shell ? "s[h]ell, " : "");
	fflush(stdout);
}

/*
 * Reads one line from stdin if one is there, byte by byte (so a shell
 * started next reads the lines after it): 1 a line into out, 0 none yet,
 * -1 end of input.
 */
static int read_answer(struct dev_stepper *s, char *out, size_t n)
{
	struct pollfd pfd = {.fd = 0, .events = POLLIN};
	ssize_t r;
	char ch;

	while (poll(&pfd, 1, 0) == 1) {
		r = read(0, &ch, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 && s->inlen == 0)
			return -1;
		if (r <= 0 || ch == '\n') {
			/* a line, or the last one without its newline */
			s->inbuf[s->inlen] = '\0';
			snprintf(out, n, "%s", s->inbuf);
			s->inlen = 0;
			return 1;
		}
		if (s->inlen + 1 < sizeof(s->inbuf))
			s->inbuf[s->inlen++] = ch;
	}
	return 0;
}

/* Starts the shell for the step being asked about; the loop waits for it. */
static void start_shell(struct dev_stepper *s, PGconn *conn, const char *home, int64_t run_id)
{
	const char *sh = getenv("SHELL") && getenv("SHELL")[0] ? getenv("SHELL") : "/bin/sh";
	struct dev_job j;
	pid_t pid;

	if (dev_job_make(&j, conn, home, run_id, s->asking_name, 1) < 0) {
		printf("no shell: %s\n", ferry_error_last());
		dev_job_dispose(&j);
		return;
	}
	printf("a shell in %s with the step's environment; exit it to come back\n", j.cmd.cwd);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		char *argv[] = {(char *)sh, NULL};
		signal(SIGINT, SIG_DFL);
		signal(SIGQUIT, SIG_DFL);
		if (chdir(j.cmd.cwd) < 0)
			_exit(126);
		execvpe(sh, argv, j.cmd.envp);
		_exit(127);
	}
	dev_job_dispose(&j);
	if (pid < 0) {
		printf("no shell: fork: %s\n", strerror(errno));
		return;
	}
	/* the terminal's Ctrl-C is the shell's while it runs, not a stop of the run */
	signal(SIGINT, SIG_IGN);
	s->shell = pid;
}

int dev_stepper_turn(struct dev_stepper *s, struct engine *e, PGconn *conn, const char *home,
		     int64_t run_id, int64_t lease_ms)
{
	char answer[256];
	int rc;

	if (s->shell > 0) {
		pid_t r = waitpid(s->shell, NULL, WNOHANG);
		if (r == 0 || (r < 0 && errno == EINTR))
			return 0;
		s->shell = 0; /* ended (reaped here, or by the engine's reaper of strays) */
		signal(SIGINT, s->on_interrupt);
		ask(s, conn, home, run_id);
		return 0;
	}
	if (s->asking == 0) {
		int64_t id = 0;
		char *name = NULL;
		if (store_dev_next(&id, &name, conn, run_id) < 0 || id == 0) {
			free(name);
			return 0;
		}
		if (!breaks_at(s, name)) {
			engine_claim_one(e, id);
			free(name);
			return 0;
		}
		s->asking = id;
		free(s->asking_name);
		s->asking_name = name;
		ask(s, conn, home, run_id);
	}
	while ((rc = read_answer(s, answer, sizeof(answer))) != 0) {
		const char *a = answer + strspn(answer, " \t");
		if (rc > 0 && !s->tty)
			printf("%s\n", answer); /* answers from a script: show them after the question */
		if (rc < 0) {
			printf("\nno more answers on stdin: quitting\n");
			return 1;
		}
		if (*a == '\0' || strcmp(a, "r") == 0 || strcmp(a, "run") == 0) {
			printf("running %s\n", s->asking_name);
			engine_claim_one(e, s->asking);
			s->asking = 0;
			return 0;
		}
		if (strcmp(a, "s") == 0 || strcmp(a, "skip") == 0) {
			int64_t from = 0;
			if (store_dev_skip(&from, conn, engine_owner(e), "dev", run_id, s->asking, s->reuse_run,
					   lease_ms) < 0) {
				printf("cannot skip: %s\n", ferry_error_last());
				ask(s, conn, home, run_id);
				continue;
			}
			printf("skipped %s: its results are run %lld's\n", s->asking_name, (long long)from);
			s->asking = 0;
			return 0;
		}
		if ((strcmp(a, "h") == 0 || strcmp(a, "shell") == 0) && s->can_shell) {
			start_shell(s, conn, home, run_id);
			if (s->shell > 0)
				return 0;
			ask(s, conn, home, run_id);
			continue;
		}
		if (strcmp(a, "q") == 0 || strcmp(a, "quit") == 0)
			return 1;
		printf("answer r (run), s (skip), %sq (quit)\n", s->can_shell ? "h (shell), " : "");
		ask(s, conn, home, run_id);
	}
	return 0;
}

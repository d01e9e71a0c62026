/*
 * exec_podman_ops — the podman row's upkeep of its containers, each a
 * podman command the engine does not wait on or a bound one (exec_podman.h;
 * the row and its design note are exec_podman.c's): a stop's signal, the
 * sweep of containers a crash left behind, and the running containers of
 * attempts that are over (the orphans hook).
 */
#include "exec/exec_podman.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/util.h"

void exec_podman_child_exec(char **argv, int own_session)
{
	int nullfd = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (own_session) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		setsid();
	}
	if (nullfd >= 0) {
		dup2(nullfd, 0);
		dup2(nullfd, 1);
		dup2(nullfd, 2);
	}
	close_range(3, ~0U, 0);
	execv(argv[0], argv);
	_exit(127);
}

/* Runs argv in the background, its output to /dev/null; its end is reaped with the strays. */
static void run_detached(char **argv)
{
	if (argv[0][0] != '/')
		return;
	if (fork() == 0)
		exec_podman_child_exec(argv, 1);
}

/*
 * The signal's delivery (a shell the daemon does not wait for): `podman
 * kill`, retried while the container is not there yet or not yet running
 * (a stop right after the start: podman run may still be creating it), for
 * at most about 10 s; done when the kill went through or the container
 * ended.
 */
static const char kill_script[] =
	"podman=$1 sig=$2 name=$3\n"
	"for i in $(seq 1 50); do\n"
	"  \"$podman\" kill --signal \"$sig\" \"$name\" >/dev/null 2>&1 && exit 0\n"
	"  case $(\"$podman\" inspect --format '{{.State.Status}}' \"$name\" 2>/dev/null) in\n"
	"  exited|stopped|removing) exit 0 ;;\n"
	"  esac\n"
	"  sleep 0.2\n"
	"done\n";

void exec_podman_signal(const struct exec_job *job, int sig)
{
	const char *name = json_string_value(json_object_get(job->handle, "container"));
	char *podman;

	if (name == NULL || (podman = exec_podman_path()) == NULL)
		return;
	{
		char *argv[] = {"/bin/sh", "-c", (char *)kill_script, "ferry-podman-kill", podman,
				sig == SIGKILL ? "KILL" : sig == SIGTERM ? "TERM" : "INT", (char *)name, NULL};
		run_detached(argv);
	}
	free(podman);
}

/*
 * The sweep (a shell the daemon does not wait for): containers of this home
 * that are not running and whose supervisor (the pid line of the status in
 * their ferry.dir) is gone are removed with their cgroups. Running ones are
 * left to adoption. An exited one whose status has no end yet (its
 * supervisor was killed before the container ended) has its exit code
 * written there first: the container is the only record of it, and an
 * adoption that found neither the supervisor, nor an end, nor the
 * container called the attempt lost and ran its work again (one created
 * and never started is removed as before: its attempt never ran; one
 * podman cannot tell about is left to the next sweep).
 */
static const char sweep_script[] =
	"podman=$1 home=$2\n"
	"\"$podman\" ps -a --filter \"label=ferry.home=$home\" --filter status=exited "
	"--filter status=created --format '{{.Names}} {{index .Labels \"ferry.dir\"}}' 2>/dev/null |\n"
	"while read -r name dir; do\n"
	"  set -- $(sed -n 's/^pid \\([0-9]*\\) \\([0-9]*\\)$/\\1 \\2/p' \"$dir/status\" 2>/dev/null | tail -n 1)\n"
	"  if [ -n \"${1:-}\" ] && [ -r \"/proc/$1/stat\" ] &&\n"
	"     [ \"$(sed 's/.*) //' \"/proc/$1/stat\" | cut -d' ' -f20)\" = \"${2:-}\" ]; then continue; fi\n"
	"  if [ -f \"$dir/status\" ] && ! grep -qE '^(exit|gone)( |$)' \"$dir/status\"; then\n"
	"    set -- $(\"$podman\" inspect --format '{{.State.Status}} {{.State.ExitCode}}' \"$name\" 2>/dev/null)\n"
	"    if [ \"${1:-}\" = exited ] && [ -n \"${2:-}\" ]; then echo \"exit $2\" >>\"$dir/status\";\n"
	"    elif [ \"${1:-}\" != created ]; then continue; fi\n"
	"  fi\n"
	"  \"$podman\" rm -f \"$name\" >/dev/null 2>&1\n"
	"  for d in /sys/fs/cgroup/*/ferry/\"$name\" /sys/fs/cgroup/ferry/\"$name\"; do\n"
	"    [ -d \"$d\" ] && rmdir \"$d\" 2>/dev/null\n"
	"  done\n"
	"done\n";

void exec_podman_sweep(const char *podman, const char *home)
{
	char *argv[] = {"/bin/sh", "-c", (char *)sweep_script, "ferry-podman-sweep", (char *)podman, (char *)home, NULL};

	run_detached(argv);
}

/*
 * Running containers of home whose attempt is over (exec_orphans.c):
 * `podman ps` lists them with their labels, then wanted() asks the
 * database, and `podman rm -f` kills and removes the others (the shim that
 * followed one records its end in a status file nobody reads any more).
 * Only where podman jobs ever ran under home (the marker), so a daemon
 * that never runs containers never starts podman.
 */
int exec_podman_orphans(const char *home, int (*want)(int64_t run, const char *step, int attempt, void *arg),
			void *arg)
{
	char *podman, *marker = xasprintf("%s/runs/.podman", home), *filter = xasprintf("label=ferry.home=%s", home);
	char *text = NULL, *line, *save = NULL;
	int removed = 0;

	if (access(marker, F_OK) != 0 || (podman = exec_podman_path()) == NULL) {
		free(marker), free(filter);
		return 0;
	}
	{
		char *argv[] = {podman, "ps", "--filter", filter, "--filter", "status=running", "--format",
				"{{.Names}} {{index .Labels \"ferry.run\"}} {{index .Labels \"ferry.attempt\"}} "
				"{{index .Labels \"ferry.step\"}}", NULL};
		if (exec_capture(argv, &text, 30000) < 0)
			flog_warn("listing podman containers for orphans: %s", ferry_error_last());
	}
	for (line = strtok_r(text ? text : (char *)"", "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *f[4], *p = line, *sp;
		int64_t run, att;
		int n = 0;
		while (n < 3 && (sp = strchr(p, ' ')) != NULL) {
			f[n++] = p;
			*sp = '\0';
			p = sp + 1;
		}
		f[n++] = p; /* the step name last: the rest of the line */
		if (n != 4 || parse_int64(f[1], &run) < 0 || parse_int64(f[2], &att) < 0 || want(run, f[3], (int)att, arg))
			continue;
		{
			char *out = NULL, *rm[] = {podman, "rm", "-f", "-t", "5", f[0], NULL};
			if (exec_capture(rm, &out, 30000) == 0) {
				flog_info("removed container %s: run %s step %s attempt %s is no longer running",
					  f[0], f[1], f[3], f[2]);
				removed++;
			} else {
				flog_warn("removing orphan container %s: %s", f[0], ferry_error_last());
			}
			free(out);
		}
	}
	free(text), free(podman), free(marker), free(filter);
	return removed;
}

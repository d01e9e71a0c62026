/*
 * dev_step — `ferry dev step RUN STEP [-- COMMAND...]`: runs one step of an
 * existing run (a failed production run, typically) again on this machine,
 * as its job ran: the step's spec rendered against the outputs its
 * ancestors left in that run, the same FERRY_* environment, params and
 * working directory, but in a fresh attempt directory under
 * $FERRY_HOME/dev/run-RUN/STEP/N (its own out/ and checkpoint/), so nothing
 * of the original run changes: no row is written, no file of the run is
 * touched. The log streams to the terminal and into the new directory.
 * With `-- COMMAND...` that command runs instead, with the terminal
 * attached (stdin too, and Ctrl-C goes to it), for a debugger:
 * `ferry dev step 12 train -- python3 -m pdb train.py`.
 *
 * dev_job_make() is also what `ferry dev run --step` shows before a step
 * and what its "shell" answer runs a shell with.
 */
#include "cli/dev.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/engine.h"
#include "exec/exec.h"
#include "plan/kind.h"
#include "store/store.h"
#include "lib/util.h"

void dev_job_dispose(struct dev_job *j)
{
	free(j->c.name);
	free(j->c.kind);
	free(j->c.workdir);
	json_decref(j->c.spec);
	json_decref(j->c.inputs);
	json_decref(j->c.run);
	store_step_last_dispose(&j->last);
	exec_local_cmd_dispose(&j->cmd);
	free(j->dir);
	memset(j, 0, sizeof(*j));
}

/* A fresh directory $home/dev/run-RUN/STEP/N (the first N free); the caller frees it. */
static char *fresh_dir(const char *home, int64_t run_id, const char *step)
{
	char *base = xasprintf("%s/dev/run-%lld/%s", home, (long long)run_id, step);

	if (mkdir_p(base, 0755) < 0) {
		free(base);
		return NULL;
	}
	for (int n = 1; n < 100000; n++) {
		char *d = xasprintf("%s/%d", base, n);
		if (mkdir(d, 0755) == 0) {
			free(base);
			return d;
		}
		if (errno != EEXIST) {
			ferry_error_set("cannot create %s: %s", d, strerror(errno));
			free(d);
			break;
		}
		free(d);
	}
	free(base);
	return NULL;
}

int dev_job_make(struct dev_job *j, PGconn *conn, const char *home, int64_t run_id, const char *step,
		 int next)
{
	const struct step_kind *kind;
	struct step_result res;
	json_t *rendered = NULL, *env = NULL;
	char *key = NULL, *out = NULL, *ckpt = NULL;
	int error, rc;

	memset(j, 0, sizeof(*j));
	if ((error = store_step_view(&j->c, &j->last, conn, run_id, step)) < 0)
		return error;
	kind = step_kind_find(j->c.kind);
	if (kind == NULL || (kind->flags & SKF_JOB) == 0) {
		ferry_error_set("step %s is a %s step: %s, so there is no command to run again", step,
				j->c.kind ? j->c.kind : "?",
				kind && (kind->flags & SKF_WAITS) ? "it waits for a person"
								  : "the daemon does its work itself");
		return FERRY_EINVALID;
	}
	/* the step runs, whatever the step cache holds */
	if (!json_is_object(j->c.run))
		j->c.run = json_object();
	json_object_set_new(j->c.run, "no_cache", json_true());
	if (next) {
		/* the attempt the engine will start: its directory, the step's checkpoint directory */
		j->c.attempt++;
		j->dir = exec_attempt_dir(home, run_id, j->c.name, j->c.attempt);
		ckpt = xasprintf("%s/runs/%lld/%s/checkpoint", home, (long long)run_id, j->c.name);
	} else {
		if (j->c.attempt < 1)
			j->c.attempt = 1;
		if ((j->dir = fresh_dir(home, run_id, step)) == NULL)
			return FERRY_ERROR;
		ckpt = xasprintf("%s/checkpoint", j->dir);
	}
	out = xasprintf("%s/out", j->dir);
	if (mkdir_p(out, 0755) < 0 || mkdir_p(ckpt, 0755) < 0) {
		error = FERRY_ERROR;
		goto done;
	}
	{
		struct step_run sr = {
			.conn = conn, .home = home, .host = "dev", .actor = "dev",
			.run_id = j->c.run_id, .step_id = j->c.step_id, .attempt = j->c.attempt,
			.name = j->c.name, .kind = j->c.kind, .dir = j->dir, .workdir = j->c.workdir,
			.spec = j->c.spec, .inputs = j->c.inputs, .run = j->c.run,
		};
		rc = steps_prepare(&rendered, &env, &key, &res, &sr);
	}
	free(key);
	if (rc != 0) {
		/* the step could not start as a job: an upstream output is missing, a staged dataset is gone */
		ferry_error_set("%s", rc < 0 ? ferry_error_last() : res.reason ? res.reason : "it would not run a job");
		step_result_dispose(&res);
		json_decref(rendered);
		json_decref(env);
		error = FERRY_EINVALID;
		goto done;
	}
	steps_env_merge(rendered, env);
	json_decref(j->c.spec);
	j->c.spec = rendered;
	{
		struct exec_spec x = {0};
		exec_spec_from_json(&x, j->c.spec, NULL);
		x.run_id = j->c.run_id;
		x.step_id = j->c.step_id;
		x.attempt = j->c.attempt;
		x.name = j->c.name;
		x.run_workdir = j->c.workdir;
		x.timeout_ms = j->c.timeout_ms;
		x.home = home;
		error = exec_local_cmd_make(&j->cmd, &x, j->dir, out, ckpt);
	}
done:
	free(out);
	free(ckpt);
	return error;
}

/* One argv as a shell would read it back: words with specials single-quoted. */
static void print_argv(FILE *f, char **argv)
{
	for (size_t i = 0; argv[i]; i++) {
		const char *a = argv[i];
		int plain = a[0] != '\0' && a[strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
						     "0123456789_-+=.,/:@%")] == '\0';
		if (i)
			fputc(' ', f);
		if (plain) {
			fputs(a, f);
			continue;
		}
		fputc('\'', f);
		for (; *a; a++)
			*a == '\'' ? fputs("'\\''", f) : fputc(*a, f);
		fputc('\'', f);
	}
}

void dev_job_show(FILE *f, const struct dev_job *j)
{
	json_t *env = json_object_get(j->c.spec, "env"), *in, *v;
	const char *name, *k;

	fprintf(f, "  command  ");
	print_argv(f, j->cmd.argv);
	fprintf(f, "\n  cwd      %s\n", j->cmd.cwd);
	/* what Ferry sets and what the step sets; the rest is this environment's */
	for (size_t i = 0; j->cmd.envp[i]; i++) {
		const char *e = j->cmd.envp[i], *eq = strchr(e, '=');
		if (eq == NULL)
			continue;
		if (strncmp(e, "FERRY_", 6) == 0 ||
		    json_object_getn(env, e, (size_t)(eq - e)) != NULL)
			fprintf(f, "  env      %s\n", e);
	}
	json_object_foreach(j->c.inputs, name, in) {
		json_t *outs = json_object_get(in, "outputs");
		if (json_object_size(outs) == 0)
			fprintf(f, "  input    %s: no outputs\n", name);
		json_object_foreach(outs, k, v) {
			char *txt = json_is_string(v) ? xstrdup(json_string_value(v))
						      : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
			fprintf(f, "  input    steps.%s.outputs.%s = %s\n", name, k, txt ? txt : "?");
			free(txt);
		}
	}
}

/* Where the child's output goes while it runs: the terminal and DIR/log. */
static int stream_child(int rd, const char *log)
{
	int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	char buf[8192];
	ssize_t n;

	for (;;) {
		n = read(rd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		(void)fd_write_all(1, buf, (size_t)n);
		if (fd >= 0)
			(void)fd_write_all(fd, buf, (size_t)n);
	}
	if (fd >= 0)
		close(fd);
	return 0;
}

int dev_run_child(char **argv, char **envp, const char *cwd, const char *log)
{
	struct sigaction ign, old_int, old_quit;
	int p[2] = {-1, -1}, st = 0;
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	if (log && pipe2(p, O_CLOEXEC) < 0) {
		ferry_error_set("pipe: %s", strerror(errno));
		return -1;
	}
	/* like system(): the terminal's Ctrl-C is the child's to handle (a debugger's break) */
	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	sigemptyset(&ign.sa_mask);
	sigaction(SIGINT, &ign, &old_int);
	sigaction(SIGQUIT, &ign, &old_quit);
	pid = fork();
	if (pid == 0) {
		signal(SIGINT, SIG_DFL);
		signal(SIGQUIT, SIG_DFL);
		if (log) {
			int nul = open("/dev/null", O_RDONLY);
			if (nul >= 0)
				dup2(nul, 0);
			dup2(p[1], 1);
			dup2(p[1], 2);
		}
		if (chdir(cwd) < 0) {
			fprintf(stderr, "ferry dev: cannot enter %s: %s\n", cwd, strerror(errno));
			_exit(126);
		}
		execvpe(argv[0], argv, envp);
		fprintf(stderr, "ferry dev: cannot execute %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	if (log) {
		close(p[1]);
		if (pid > 0)
			stream_child(p[0], log);
		close(p[0]);
	}
	if (pid > 0)
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGQUIT, &old_quit, NULL);
	if (pid < 0) {
		ferry_error_set("fork: %s", strerror(errno));
		return -1;
	}
	return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

static void step_usage(FILE *f)
{
	fprintf(f, "usage: ferry dev step RUN STEP [-- COMMAND...]\n\n"
		   "Runs step STEP of run RUN again on this machine as its job ran: the same\n"
		   "rendered command, FERRY_* environment, params and upstream outputs, in a\n"
		   "fresh attempt directory under $FERRY_HOME/dev/run-RUN/STEP/ (its own out/\n"
		   "and checkpoint/). The run itself is not changed. The log streams here and\n"
		   "to the new directory. With -- COMMAND..., that command runs instead in the\n"
		   "step's working directory and environment, attached to this terminal.\n"
		   "Exit status: the command's (128+N when killed by signal N); 2 when the step\n"
		   "cannot be prepared.\n\n"
		   "examples:\n"
		   "  ferry dev step 12 train\n"
		   "  ferry dev step 12 train -- python3 -m pdb train.py\n"
		   "  ferry dev step 12 train -- sh -c 'env | grep ^FERRY_'\n");
}

int dev_step_main(int argc, char **argv)
{
	struct engine_opts eo;
	struct dev_job j = {0};
	char *conninfo = NULL, *log = NULL;
	char **cmd = NULL;
	PGconn *conn = NULL;
	int64_t run_id = 0, started;
	int status = 2, pg_started = 0, i;

	memset(&j, 0, sizeof(j));
	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			cmd = argv + i + 1;
			argc = i;
			break;
		}
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			step_usage(stdout);
			return 0;
		}
	}
	if (argc != 3 || parse_int64(argv[1], &run_id) < 0 || run_id <= 0 || (cmd && cmd[0] == NULL)) {
		if (argc == 3 && (run_id <= 0))
			fprintf(stderr, "ferry dev step: RUN is a run id, got \"%s\"\n", argv[1]);
		else if (cmd && cmd[0] == NULL)
			fprintf(stderr, "ferry dev step: -- must be followed by a command\n");
		step_usage(stderr);
		return 2;
	}
	engine_opts_default(&eo);
	if (dev_db_open(&conninfo, &conn, &pg_started, eo.home) < 0) {
		status = 1;
		goto out;
	}
	if (dev_job_make(&j, conn, eo.home, run_id, argv[2], 0) < 0) {
		fprintf(stderr, "ferry dev step: %s\n", ferry_error_last());
		goto out;
	}
	printf("run %lld step %s", (long long)run_id, j.c.name);
	if (j.last.dir)
		printf(" (%s, attempt %d%s%s)", j.last.state, j.c.attempt, j.last.reason ? ": " : "",
		       j.last.reason ? j.last.reason : "");
	else
		printf(" (%s, never ran)", j.last.state);
	printf(" again in %s\n", j.dir);
	{
		const char *image = json_string_value(json_object_get(j.c.spec, "image"));
		const char *ex = json_string_value(json_object_get(j.c.spec, "executor"));
		if ((image && strcmp(image, "host") != 0) || (ex && strcmp(ex, "local") != 0))
			printf("  note     it runs here, on this machine's root filesystem, not on %s%s%s\n",
			       ex ? ex : "its executor", image && strcmp(image, "host") != 0 ? " in image " : "",
			       image && strcmp(image, "host") != 0 ? image : "");
	}
	dev_job_show(stdout, &j);
	if (cmd) {
		printf("  instead  ");
		print_argv(stdout, cmd);
		printf("\n");
	}
	fflush(stdout);
	/* the database is not needed while the job runs: a long debugging session holds no connection */
	dev_db_close(&conn, pg_started, eo.home);
	pg_started = 0;
	started = clock_mono_ms();
	log = xasprintf("%s/log", j.dir);
	status = dev_run_child(cmd ? cmd : j.cmd.argv, j.cmd.envp, j.cmd.cwd, cmd ? NULL : log);
	if (status < 0) {
		fprintf(stderr, "ferry dev step: %s\n", ferry_error_last());
		status = 1;
		goto out;
	}
	fprintf(stderr, "ferry dev step: %s %s %d in %.1fs%s%s\n", j.c.name,
		status > 128 ? "killed, status" : "exit code", status,
		(double)(clock_mono_ms() - started) / 1000.0, cmd ? "" : "; log and outputs in ",
		cmd ? "" : j.dir);
out:
	dev_job_dispose(&j);
	dev_db_close(&conn, pg_started, eo.home);
	free(conninfo);
	free(log);
	return status;
}

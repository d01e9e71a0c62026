/*
 * dev — `ferry dev run FILE [--only STEP | --from STEP | --to STEP] [-p k=v]…`
 * runs a workflow on this machine without a daemon: the engine is linked in
 * and works in-process on the embedded database (or FERRY_DATABASE_URL),
 * claiming only this run's steps. It prints one line per step transition
 * and streams each attempt's log as it is written, prefixed with the step
 * name. Ctrl-C stops the run (its jobs get SIGTERM) and exits when stopped.
 * While it lives the session renews a lease on its run (a ferryd's leader
 * stops the run when it expires: the process died); an embedded PostgreSQL
 * it started is stopped when it exits.
 */
#include "cli/dev.h"

#include <getopt.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/db.h"
#include "engine/engine.h"
#include "runs/runs.h"
#include "store/store.h"
#include "lib/util.h"

static volatile sig_atomic_t interrupted;
static int dev_wake_fd = -1;

static void on_interrupt(int sig)
{
	(void)sig;
	interrupted = 1;
	if (dev_wake_fd >= 0)
		(void)!write(dev_wake_fd, "i", 1);
}

/* What was last printed for one step, and how far its log was streamed. */
struct seen {
	char *name, *state;
	int attempts;
	int log_attempt;
	long log_off;
	char *log_path;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: ferry dev run FILE [--only STEP | --from STEP | --to STEP] [--reuse RUN]\n"
		   "                      [--reuse-anyway] [--step | --break STEP]... [--retries]\n"
		   "                      [-p NAME=VALUE]...\n\n"
		   "Runs the workflow in-process on the embedded database, printing each step\n"
		   "transition and streaming step logs. With --only or --from, the steps above\n"
		   "the selection are not run: their outputs, metrics and cache sessions come\n"
		   "from run RUN (--reuse), or from the newest run of the workflow in which\n"
		   "they succeeded with the same inputs as now (their command and env, so the\n"
		   "params, workdir, image, dataset). A run whose results were made from other\n"
		   "inputs is named with the params that differ, and reused only with\n"
		   "--reuse-anyway (the reused steps' reason says so). Exit status: 0\n"
		   "succeeded, 1 failed or stopped, 2 usage or validation error.\n\n"
		   "A dev run fails fast: a step that fails is not tried again whatever its\n"
		   "retry: says (the failure is what is being debugged); --retries keeps\n"
		   "the steps' retries, as a run submitted to the daemon has them.\n\n"
		   "--step pauses before every step, --break STEP (repeatable, or NAME,NAME)\n"
		   "before the named ones: it shows the step's rendered command, working\n"
		   "directory, environment and the upstream outputs it reads, and reads an\n"
		   "answer on stdin: r (run; also an empty line), s (skip: take its results\n"
		   "from --reuse RUN or the newest run in which it succeeded), h (a shell in\n"
		   "its working directory with its environment), q (quit: stop the run).\n\n"
		   "examples:\n"
		   "  ferry dev run workflows/hello.yaml --retries\n"
		   "  ferry dev run workflows/hello.yaml --only greet -p who=ferry\n"
		   "  ferry dev run workflows/hello.yaml --from join\n"
		   "  ferry dev run workflows/digits.yaml --only train --reuse 12\n"
		   "  ferry dev run workflows/digits.yaml --break train\n");
}

static void now_hms(char *buf, size_t n)
{
	time_t t = time(NULL);
	struct tm tm;
	localtime_r(&t, &tm);
	strftime(buf, n, "%H:%M:%S", &tm);
}

/* Prints new bytes of a log file, each line prefixed with the step name. */
static void stream_log(struct seen *s, const char *path)
{
	FILE *f = fopen(path, "r");
	char line[4096];

	if (f == NULL)
		return;
	if (fseek(f, s->log_off, SEEK_SET) == 0) {
		while (fgets(line, sizeof(line), f)) {
			size_t n = strlen(line);
			if (line[n - 1] != '\n' && !feof(f))
				; /* long line: print the part we have */
			else if (line[n - 1] != '\n')
				break; /* a partial last line: wait for the rest */
			printf("  %-12s| %s%s", s->name, line, line[n - 1] == '\n' ? "" : "\n");
			s->log_off += (long)n;
		}
	}
	fclose(f);
	fflush(stdout);
}

/* Prints what changed since the last look; returns 1 once the run is over. */
static int report(struct seen **seen, size_t *nseen, PGconn *conn, int64_t run_id, const char **final)
{
	char *txt = NULL, hms[16];
	json_t *run, *steps, *st;
	size_t i;
	int over = 0;

	if (store_run_json(&txt, conn, run_id) < 0)
		return 0;
	run = json_loads(txt, 0, NULL);
	free(txt);
	if (run == NULL)
		return 0;
	steps = json_object_get(run, "steps");
	if (*seen == NULL) {
		*nseen = json_array_size(steps);
		*seen = xcalloc(*nseen + 1, sizeof(**seen));
	}
	now_hms(hms, sizeof(hms));
	json_array_foreach(steps, i, st) {
		struct seen *s = &(*seen)[i];
		const char *state = json_string_value(json_object_get(st, "state"));
		const char *reason = json_string_value(json_object_get(st, "reason"));
		int attempts = (int)json_integer_value(json_object_get(st, "attempts"));
		json_t *atts = json_object_get(st, "attempt_list");
		json_t *last = json_array_get(atts, json_array_size(atts) - 1);
		const char *log = json_string_value(json_object_get(last, "log"));

		if (i >= *nseen)
			break;
		if (s->name == NULL)
			s->name = xstrdup(json_string_value(json_object_get(st, "name")));
		if (log && (int)json_integer_value(json_object_get(last, "attempt")) != s->log_attempt) {
			/* finish the previous attempt's log first */
			if (s->log_path)
				stream_log(s, s->log_path);
			free(s->log_path);
			s->log_path = xstrdup(log);
			s->log_attempt = (int)json_integer_value(json_object_get(last, "attempt"));
			s->log_off = 0;
		}
		if (log)
			stream_log(s, log);
		if (s->state == NULL || strcmp(s->state, state) != 0 || s->attempts != attempts) {
			if (s->state == NULL && reason && strncmp(reason, "reused from run ", 16) == 0)
				printf("%s  %-12s %s\n", hms, s->name, reason);
			else if (strcmp(state, "blocked") != 0 || s->state != NULL)
				printf("%s  %-12s %-9s%s%.0d%s%s\n", hms, s->name, state,
				       attempts ? "  attempt " : "", attempts, reason ? "  " : "",
				       reason ? reason : "");
			if (strcmp(state, "waiting") == 0)
				printf("%s  %-12s waits for a person: ferry continue %lld %s "
				       "(through a ferryd on this FERRY_HOME)\n", hms, s->name,
				       (long long)run_id, s->name);
			free(s->state);
			s->state = xstrdup(state);
			s->attempts = attempts;
		}
	}
	{
		const char *rs = json_string_value(json_object_get(run, "state"));
		static char final_state[16];
		if (strcmp(rs, "succeeded") == 0 || strcmp(rs, "failed") == 0 || strcmp(rs, "stopped") == 0) {
			snprintf(final_state, sizeof(final_state), "%s", rs);
			*final = final_state;
			over = 1;
		}
	}
	fflush(stdout);
	json_decref(run);
	return over;
}

/*
 * This session started the embedded PostgreSQL: stops it, unless another
 * client (a ferryd, another `ferry dev`) has come to use it meanwhile.
 * *conn (ours, may be NULL) is not counted; it is closed when the server
 * is stopped (and *conn set to NULL).
 */
static void embedded_done(PGconn **conn, const char *home)
{
	int others = 0;

	/* the sessions this process just closed (the engine's) take a moment to go */
	for (int i = 0; i < 20; i++) {
		if (*conn == NULL || db_other_sessions(&others, *conn) < 0 || others == 0)
			break;
		usleep(50 * 1000);
	}
	if (*conn && others > 0) {
		fprintf(stderr, "ferry dev: leaving the embedded PostgreSQL running: %d other session%s use it\n",
			others, others == 1 ? "" : "s");
		return;
	}
	if (*conn)
		PQfinish(*conn);
	*conn = NULL;
	if (db_embedded_stop(home) < 0)
		fprintf(stderr, "ferry dev: stopping the embedded PostgreSQL: %s\n", ferry_error_last());
}

/* Every --break names a step of the workflow (a typo would never pause). */
static int breaks_check(const struct dev_stepper *st, const char *yaml, size_t len, const char *file)
{
	cfg_errors errs = {0};
	json_t *spec = NULL, *steps, *s;
	char hash[65];
	size_t i, bad = 0;

	if (st->nbreaks == 0)
		return FERRY_OK;
	if (cfg_workflow_parse(&spec, hash, yaml, len, file, &errs) < 0) {
		cfg_errors_dispose(&errs);
		return FERRY_OK; /* runs_create reports it */
	}
	steps = json_object_get(spec, "steps");
	for (size_t b = 0; b < st->nbreaks; b++) {
		int found = 0;
		json_array_foreach(steps, i, s)
			found |= strcmp(json_string_value(json_object_get(s, "name")), st->breaks[b]) == 0;
		if (!found) {
			fprintf(stderr, "ferry dev: --break %s: %s has no step of that name (steps:", st->breaks[b], file);
			json_array_foreach(steps, i, s)
				fprintf(stderr, " %s", json_string_value(json_object_get(s, "name")));
			fprintf(stderr, ")\n");
			bad++;
		}
	}
	json_decref(spec);
	return bad ? FERRY_EINVALID : FERRY_OK;
}

int dev_db_open(char **conninfo, PGconn **conn, int *pg_started, const char *home)
{
	*conn = NULL;
	/* migrations on a connection of their own, with no statement timeout */
	if (db_conninfo_ex(conninfo, pg_started, home) < 0 ||
	    db_connect_ex(conn, *conninfo, -1, DB_NO_STATEMENT_TIMEOUT) < 0 || db_migrate(*conn) < 0) {
		fprintf(stderr, "ferry dev: database: %s\n", ferry_error_last());
		return FERRY_EDB;
	}
	PQfinish(*conn);
	*conn = NULL;
	if (db_connect(conn, *conninfo) < 0) {
		fprintf(stderr, "ferry dev: database: %s\n", ferry_error_last());
		return FERRY_EDB;
	}
	return FERRY_OK;
}

void dev_db_close(PGconn **conn, int pg_started, const char *home)
{
	if (pg_started)
		embedded_done(conn, home);
	if (*conn)
		PQfinish(*conn);
	*conn = NULL;
}

int dev_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"only", required_argument, NULL, 'o'},
		{"from", required_argument, NULL, 'f'},
		{"to", required_argument, NULL, 't'},
		{"reuse", required_argument, NULL, 'r'},
		{"reuse-anyway", no_argument, NULL, 'A'},
		{"step", no_argument, NULL, 'S'},
		{"break", required_argument, NULL, 'B'},
		{"retries", no_argument, NULL, 'R'},
		{"param", required_argument, NULL, 'p'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct runs_new rn;
	struct engine_opts eo;
	struct engine *e = NULL;
	struct seen *seen = NULL;
	size_t nseen = 0;
	cfg_errors errs = {0};
	json_t *params = json_object();
	char *yaml = NULL, *conninfo = NULL, *dir = NULL, *path_copy = NULL, absdir[PATH_MAX];
	const char *final = NULL, *file;
	PGconn *conn = NULL;
	size_t len = 0;
	int64_t run_id = 0, reused_from = 0, started;
	int c, status = 2, subsets = 0, stop_sent = 0, pg_started = 0, stepping = 0, keep_retries = 0;
	int retries_dropped = 0;
	struct sigaction sa;
	struct dev_stepper stepper;

	memset(&rn, 0, sizeof(rn));
	memset(&stepper, 0, sizeof(stepper));
	if (argc >= 1 && strcmp(argv[0], "step") == 0) {
		json_decref(params);
		return dev_step_main(argc, argv);
	}
	if (argc < 1 || strcmp(argv[0], "run") != 0) {
		if (argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
			usage(stdout);
			status = 0;
		} else {
			usage(stderr);
		}
		goto out;
	}
	optind = 1;
	while ((c = getopt_long(argc, argv, "p:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': rn.only = optarg; subsets++; break;
		case 'f': rn.from = optarg; subsets++; break;
		case 't': rn.to = optarg; subsets++; break;
		case 'r':
			if (parse_int64(optarg, &rn.reuse_run) < 0 || rn.reuse_run <= 0) {
				fprintf(stderr, "ferry dev: --reuse takes a run id, got \"%s\"\n", optarg);
				goto out;
			}
			break;
		case 'A': rn.reuse_anyway = 1; break;
		case 'R': keep_retries = 1; break;
		case 'S': stepper.all = 1; break;
		case 'B':
			if (dev_stepper_add_breaks(&stepper, optarg) < 0) {
				fprintf(stderr, "ferry dev: --break takes a step name (or NAME,NAME…)\n");
				goto out;
			}
			break;
		case 'p': {
			char *eq = strchr(optarg, '=');
			if (eq == NULL || eq == optarg) {
				fprintf(stderr, "ferry dev: -p takes NAME=VALUE, got \"%s\"\n", optarg);
				goto out;
			}
			json_object_set_new(params, (*eq = '\0', optarg), json_string(eq + 1));
			*eq = '=';
			break;
		}
		case 'h':
			usage(stdout);
			status = 0;
			goto out;
		default:
			usage(stderr);
			goto out;
		}
	}
	if ((rn.reuse_run > 0 || rn.reuse_anyway) && rn.only == NULL && rn.from == NULL) {
		fprintf(stderr, "ferry dev: --reuse and --reuse-anyway go with --only or --from (the steps they "
				"skip take their results from an earlier run)\n");
		goto out;
	}
	if (optind != argc - 1 || subsets > 1) {
		fprintf(stderr, subsets > 1 ? "ferry dev: give at most one of --only, --from, --to\n"
					    : "ferry dev: expected one workflow FILE\n");
		usage(stderr);
		goto out;
	}
	file = argv[optind];
	if (file_read(&yaml, &len, file) < 0) {
		fprintf(stderr, "ferry dev: %s\n", ferry_error_last());
		goto out;
	}
	path_copy = xstrdup(file);
	dir = dirname(path_copy);
	if (realpath(dir, absdir) == NULL) {
		fprintf(stderr, "ferry dev: cannot resolve %s\n", dir);
		goto out;
	}
	engine_opts_default(&eo);
	status = 1;
	if (dev_db_open(&conninfo, &conn, &pg_started, eo.home) < 0)
		goto out;
	if (breaks_check(&stepper, yaml, len, file) < 0) {
		status = 2;
		goto out;
	}
	rn.yaml = yaml;
	rn.yaml_len = len;
	rn.filename = file;
	rn.params = params;
	rn.trigger = "dev";
	rn.actor = getenv("USER") ? getenv("USER") : "dev";
	rn.workdir = absdir;
	rn.reused_from = &reused_from;
	rn.no_retries = !keep_retries;
	rn.retries_dropped = &retries_dropped;
	rn.dev_lease_ms = eo.lease_ms;
	if (runs_create(&run_id, conn, &rn, &errs) < 0) {
		for (size_t i = 0; i < errs.len; i++)
			fprintf(stderr, "%s\n", errs.items[i]);
		if (errs.len == 0)
			fprintf(stderr, "ferry dev: %s\n", ferry_error_last());
		status = 2;
		goto out;
	}
	if (reused_from > 0)
		printf("run %lld (dev) of %s, reusing the results of run %lld for the steps it skips\n",
		       (long long)run_id, file, (long long)reused_from);
	else
		printf("run %lld (dev) of %s\n", (long long)run_id, file);
	if (retries_dropped > 0)
		printf("a dev run fails fast: the retry: of %d step%s is not applied (--retries applies it)\n",
		       retries_dropped, retries_dropped == 1 ? "" : "s");
	eo.run_filter = run_id;
	eo.poll_ms = 200;
	if (engine_new(&e, &eo, conninfo) < 0) {
		fprintf(stderr, "ferry dev: %s\n", ferry_error_last());
		goto out;
	}
	dev_wake_fd = engine_wake_fd(e);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_interrupt;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	stepping = stepper.all || stepper.nbreaks > 0;
	stepper.reuse_run = rn.reuse_run;
	stepper.on_interrupt = on_interrupt;
	stepper.tty = isatty(0);
	if (stepping)
		engine_claim_hold(e, 1);
	started = clock_mono_ms();
	while (!report(&seen, &nseen, conn, run_id, &final)) {
		if (interrupted && !stop_sent) {
			char *st = NULL;
			printf("stopping run %lld…\n", (long long)run_id);
			store_run_stop(&st, conn, run_id, rn.actor);
			free(st);
			stop_sent = 1;
		}
		engine_tick(e, 100);
		if (stepping && !stop_sent && dev_stepper_turn(&stepper, e, conn, eo.home, run_id, eo.lease_ms))
			interrupted = 1; /* quit: stopped on the next turn */
	}
	printf("run %lld %s in %.1fs\n", (long long)run_id, final,
	       (double)(clock_mono_ms() - started) / 1000.0);
	status = strcmp(final, "succeeded") == 0 ? 0 : 1;
out:
	for (size_t i = 0; seen && i < nseen; i++) {
		free(seen[i].name);
		free(seen[i].state);
		free(seen[i].log_path);
	}
	free(seen);
	dev_stepper_dispose(&stepper);
	engine_free(e);
	dev_db_close(&conn, pg_started, eo.home);
	cfg_errors_dispose(&errs);
	json_decref(params);
	free(yaml);
	free(conninfo);
	free(path_copy);
	return status;
}

/*
 * logs — `ferry logs RUN [STEP] [-f] [--attempt N]`: copies a step's log (or
 * every step's, in step order, each after a "==> STEP (attempt N) <==" line)
 * to stdout as it arrives; with -f follows the attempt, its retries and the
 * steps not started yet until the run is over, riding out a daemon restart.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* ---- logs ---- */

enum { OPT_HOST = 512 };

/*
 * How long a followed log or run may be unreachable (daemon restarting)
 * before `ferry logs -f` gives up; the wait between looks at a run whose
 * steps have not started yet.
 */
#define LOGS_RECONNECT_MS WATCH_RECONNECT_MS
#define LOGS_POLL_MS WATCH_POLL_MS

/* One attempt's log being copied to stdout as it arrives. */
struct log_copy {
	const char *step;   /* named in a "==> STEP (attempt N) <==" header; NULL: no header */
	bool *printed;      /* shared by every section: something was printed before */
	bool begun;         /* the header (if any) is out */
	bool write_failed;  /* stdout refused the bytes */
	bool host;          /* the header names the host the job ran on (X-Ferry-Host; --host) */
	int attempt;        /* X-Ferry-Attempt of the answer; 0 until known */
	int64_t bytes;      /* received so far, counted from the start of the log */
	char last;          /* the last byte written */
};

/* At the answer's headers: learns the attempt and prints the section header once. */
static int log_copy_begin(void *arg, ferry_client *c)
{
	struct log_copy *lc = arg;
	const char *att = client_last_header(c, "X-Ferry-Attempt");
	int64_t n;

	if (att != NULL && parse_int64(att, &n) == 0 && n > 0 && n <= INT_MAX)
		lc->attempt = (int)n;
	if (lc->begun)
		return 0; /* a reconnect: the header is already out */
	lc->begun = true;
	if (lc->step == NULL)
		return 0;
	if (lc->printed != NULL && *lc->printed)
		fputc('\n', stdout);
	{
		const char *host = lc->host ? client_last_header(c, "X-Ferry-Host") : NULL;
		if (lc->attempt > 0 && host)
			printf("==> %s (attempt %d, host %s) <==\n", lc->step, lc->attempt, host);
		else if (lc->attempt > 0)
			printf("==> %s (attempt %d) <==\n", lc->step, lc->attempt);
		else
			printf("==> %s <==\n", lc->step);
	}
	fflush(stdout);
	if (lc->printed != NULL)
		*lc->printed = true;
	return 0;
}

static int log_copy_data(void *arg, const char *buf, size_t len)
{
	struct log_copy *lc = arg;

	if (len == 0)
		return 0;
	if (fwrite(buf, 1, len, stdout) != len || fflush(stdout) != 0) {
		ferry_error_set("cannot write to standard output: %s", strerror(errno));
		lc->write_failed = true;
		return -1;
	}
	lc->bytes += (int64_t)len;
	lc->last = buf[len - 1];
	if (lc->printed != NULL)
		*lc->printed = true;
	return 0;
}

/* Ends a section that did not end its last line, so the next header starts a line. */
static void log_copy_finish(const struct log_copy *lc)
{
	if (lc->step != NULL && lc->bytes > 0 && lc->last != '\n') {
		fputc('\n', stdout);
		fflush(stdout);
	}
}

/* One `ferry logs` invocation: the daemon, the run, and whether it ever answered. */
struct logs {
	ferry_client *c;
	int64_t id;
	bool answered; /* a request got an answer: a later loss is worth riding out */
	bool show_host; /* --host: each section's header names the host its job ran on */
};

/*
 * After a failed request while following: true (after a pause) while a
 * retry is worth it, false to give up. Only a daemon that answered before
 * and now does not answer at all (restarting) is waited for, up to
 * LOGS_RECONNECT_MS from the first failure in a row; lost_since is 0 while
 * all is well.
 */
static bool follow_retry(const struct logs *lg, int64_t *lost_since)
{
	int64_t now = clock_mono_ms();

	if (!lg->answered || client_last_status(lg->c) != 0)
		return false; /* never reached, or it answered: not a restart */
	if (*lost_since == 0) {
		*lost_since = now;
		fprintf(stderr, "ferry: %s\nferry: retrying for %ds\n", ferry_error_last(),
			LOGS_RECONNECT_MS / 1000);
	}
	if (now - *lost_since >= LOGS_RECONNECT_MS)
		return false;
	sleep_ms(LOGS_POLL_MS * 5);
	client_refresh_url(lg->c); /* restarted on another port? */
	return true;
}

static void follow_recovered(struct logs *lg, int64_t lost_since)
{
	lg->answered = true;
	if (lost_since != 0)
		fprintf(stderr, "ferry: reconnected to %s\n", client_url(lg->c));
}

/*
 * Copies the log of step (attempt 0: the latest) to stdout. With follow,
 * keeps copying until the attempt ends, and picks up where it was (same
 * attempt, next byte) when the connection drops. Returns 0 or the client's
 * negative code (message set).
 */
static int logs_copy(struct logs *lg, const char *step, int attempt, bool follow,
		     struct log_copy *lc)
{
	char *esc = client_escape(step);
	int64_t lost_since = 0;
	int rc;

	for (;;) {
		struct client_sink sink = {log_copy_begin, log_copy_data, lc};
		int want = lc->attempt > 0 ? lc->attempt : attempt;
		char att[32] = "", off[48] = "";
		char *path;

		if (want > 0)
			snprintf(att, sizeof(att), "&attempt=%d", want);
		if (lc->bytes > 0)
			snprintf(off, sizeof(off), "&offset=%" PRId64, lc->bytes);
		path = xasprintf("/runs/%" PRId64 "/steps/%s/logs?follow=%d%s%s", lg->id, esc,
				 follow ? 1 : 0, att, off);
		rc = client_stream(lg->c, path, follow, &sink);
		free(path);
		if (lc->begun)
			lg->answered = true;
		if (rc == 0 || !follow || lc->write_failed || !follow_retry(lg, &lost_since))
			break;
	}
	if (rc == 0)
		follow_recovered(lg, lost_since);
	free(esc);
	return rc;
}

/* Fetches the run; while following, rides out a daemon that is briefly away. */
static int logs_fetch_run(json_t **run, struct logs *lg, bool follow)
{
	char *path = xasprintf("/runs/%" PRId64, lg->id);
	int64_t lost_since = 0;
	int rc;

	do {
		json_decref(*run);
		*run = NULL;
		rc = client_request(run, lg->c, "GET", path, NULL);
	} while (rc < 0 && follow && follow_retry(lg, &lost_since));
	if (rc == 0)
		follow_recovered(lg, lost_since);
	free(path);
	return rc;
}

/* The step called name in run["steps"], or NULL. */
static const json_t *run_step(const json_t *run, const char *name)
{
	const json_t *step;
	size_t i;

	json_array_foreach(json_object_get(run, "steps"), i, step)
		if (strcmp(jstr(step, "name", ""), name) == 0)
			return step;
	return NULL;
}

/* A step in one of these states starts no further attempt. */
static bool step_state_settled(const char *state)
{
	return strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
	       strcmp(state, "skipped") == 0 || strcmp(state, "stopped") == 0;
}

/*
 * Waits until step name has attempt `want` (returns 1), or will never have
 * it (0: the step settled without it, or the run ended), or the daemon
 * fails (its negative code, message set). Says on stderr when the step is a
 * gate waiting for `ferry continue`; chatty, also (once) what else it waits for.
 */
static int logs_wait_attempt(struct logs *lg, const char *name, int want, bool chatty)
{
	json_t *run = NULL;
	char *said = NULL;
	int rc;

	for (;;) {
		const json_t *step;
		const char *state;

		if ((rc = logs_fetch_run(&run, lg, true)) < 0)
			break;
		step = run_step(run, name);
		if (step == NULL) {
			ferry_error_set("run %" PRId64 " has no step \"%s\"", lg->id, name);
			rc = FERRY_ENOTFOUND;
			break;
		}
		state = jstr(step, "state", "?");
		if (jint(step, "attempts", 0) >= want) {
			rc = 1;
			break;
		}
		if (step_state_settled(state) || run_state_final(jstr(run, "state", ""))) {
			rc = 0;
			break;
		}
		if (strcmp(state, "waiting") == 0 ? said == NULL || strcmp(said, state) != 0 :
		    chatty && said == NULL && strcmp(state, "running") != 0) {
			if (strcmp(state, "waiting") == 0)
				fprintf(stderr, "ferry: step %s is waiting; continue it with: "
					"ferry continue %" PRId64 " %s\n", name, lg->id, name);
			else if (want == 1)
				fprintf(stderr, "ferry: step %s is %s; waiting for it to start\n", name, state);
			else
				fprintf(stderr, "ferry: step %s is %s; waiting for attempt %d\n", name,
					state, want);
			free(said);
			said = xstrdup(state);
		}
		sleep_ms(LOGS_POLL_MS);
	}
	free(said);
	json_decref(run);
	return rc;
}

/*
 * Follows one attempt that the run says exists. Right after a step starts,
 * the log route may not know the attempt for a moment: a 404 is retried for
 * a few polls before it counts.
 */
static int logs_follow_attempt(struct logs *lg, const char *step, int attempt,
			       struct log_copy *lc)
{
	int rc;

	for (int tries = 0;; tries++) {
		rc = logs_copy(lg, step, attempt, true, lc);
		if (rc != FERRY_ENOTFOUND || lc->begun || tries >= 10)
			return rc;
		sleep_ms(LOGS_POLL_MS);
	}
}

/*
 * After a step turned out to have no log: when it waits for a person (a
 * gate runs nothing), says so and how to continue it in the error message
 * instead of the daemon's "has not started yet". Returns rc, the error.
 */
static int logs_explain_missing(struct logs *lg, const char *name, int rc)
{
	json_t *run = NULL;
	const json_t *step;

	if (logs_fetch_run(&run, lg, false) < 0) {
		json_decref(run);
		return rc; /* the first error says enough */
	}
	step = run_step(run, name);
	if (step != NULL && strcmp(jstr(step, "state", ""), "waiting") == 0)
		ferry_error_set("step \"%s\" of run %" PRId64 " is waiting for a person "
				"(kind %s) and has run nothing, so it has no log; continue it with: "
				"ferry continue %" PRId64 " %s", name, lg->id,
				jstr(step, "kind", "gate"), lg->id, name);
	json_decref(run);
	return rc;
}

/* `ferry logs RUN STEP [-f] [--attempt N]`. */
static int logs_one(struct logs *lg, const char *step, int attempt, bool follow)
{
	/* --host: a header even for one step, to name the host */
	struct log_copy lc = {.step = lg->show_host ? step : NULL, .host = lg->show_host};
	int rc;

	if (follow && attempt == 0) {
		/* wait for the step to start; then follow the attempt running (or last run) */
		rc = logs_wait_attempt(lg, step, 1, true);
		if (rc == 0) {
			ferry_error_set("step \"%s\" of run %" PRId64 " ended without running, "
					"so it has no log", step, lg->id);
			return FERRY_ENOTFOUND;
		}
		if (rc < 0)
			return rc;
		return logs_follow_attempt(lg, step, 0, &lc);
	}
	rc = logs_copy(lg, step, attempt, follow, &lc);
	if (rc == FERRY_ENOTFOUND && !lc.begun && attempt == 0)
		rc = logs_explain_missing(lg, step, rc);
	return rc;
}

/* `ferry logs RUN`: the latest attempt of every step that ran, in step order. */
static int logs_all(struct logs *lg)
{
	json_t *run = NULL;
	const json_t *step;
	bool printed = false;
	size_t i;
	int rc;

	if ((rc = logs_fetch_run(&run, lg, false)) < 0)
		return rc;
	json_array_foreach(json_object_get(run, "steps"), i, step) {
		struct log_copy lc = {.step = jstr(step, "name", "?"), .printed = &printed, .host = lg->show_host};

		if (jint(step, "attempts", 0) <= 0)
			continue;
		rc = logs_copy(lg, lc.step, 0, false, &lc);
		log_copy_finish(&lc);
		if (rc == FERRY_ENOTFOUND && !lc.begun)
			rc = 0; /* no attempt after all (a retry being set up): nothing to show */
		if (rc < 0)
			break;
	}
	if (rc == 0 && !printed)
		fprintf(stderr, "ferry: no step of run %" PRId64 " has run yet\n", lg->id);
	json_decref(run);
	return rc;
}

/*
 * `ferry logs RUN -f`: every attempt of every step, in step order, each
 * followed until it ends, until the run is over.
 */
static int logs_all_follow(struct logs *lg)
{
	json_t *run = NULL, *names = json_array();
	const json_t *step;
	bool printed = false;
	size_t i;
	int rc;

	if ((rc = logs_fetch_run(&run, lg, true)) < 0)
		goto out;
	json_array_foreach(json_object_get(run, "steps"), i, step)
		json_array_append_new(names, json_string(jstr(step, "name", "?")));
	json_array_foreach(names, i, step) {
		const char *name = json_string_value(step);

		for (int attempt = 1;; attempt++) {
			struct log_copy lc = {.step = name, .printed = &printed, .host = lg->show_host};

			rc = logs_wait_attempt(lg, name, attempt, false);
			if (rc <= 0)
				break;
			rc = logs_follow_attempt(lg, name, attempt, &lc);
			log_copy_finish(&lc);
			if (rc < 0)
				break;
		}
		if (rc < 0)
			goto out;
	}
	rc = 0;
out:
	json_decref(names);
	json_decref(run);
	return rc;
}

int cmd_logs(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"follow", no_argument, NULL, 'f'},
		{"attempt", required_argument, NULL, OPT_ATTEMPT},
		{"host", no_argument, NULL, OPT_HOST},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct logs lg = {0};
	const char *step = NULL;
	bool follow = false;
	int64_t attempt = 0;
	int ch, rc, status;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":fh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'f':
			follow = true;
			break;
		case OPT_ATTEMPT:
			if (parse_int64(optarg, &attempt) < 0 || attempt <= 0 || attempt > 1000000)
				return usage_error(x, "--attempt wants an attempt number such as 1, "
						   "not '%s'", optarg);
			break;
		case OPT_HOST:
			lg.show_host = true;
			break;
		case 'h':
			return print_help(x->cmd);
		default:
			return option_error(x, ch, argv);
		}
	}
	if (argc == optind)
		return usage_error(x, "missing RUN");
	if (argc - optind > 2)
		return usage_error(x, "unexpected argument '%s'", argv[optind + 2]);
	if (parse_run_id(x, argv[optind], &lg.id) != 0)
		return FX_USAGE;
	if (argc - optind == 2) {
		step = argv[optind + 1];
		if (*step == '\0')
			return usage_error(x, "STEP is empty");
	}
	if (attempt > 0 && step == NULL)
		return usage_error(x, "--attempt needs a STEP");
	if ((status = open_client(&lg.c)) != FX_OK)
		return status;
	if (step != NULL)
		rc = logs_one(&lg, step, (int)attempt, follow);
	else if (follow)
		rc = logs_all_follow(&lg);
	else
		rc = logs_all(&lg);
	status = FX_OK;
	if (rc < 0) {
		/* a 400 here is the daemon refusing what was checked above: not a usage error */
		status = report_request_error(lg.c, rc == FERRY_EINVALID ? FERRY_ERROR : rc);
	}
	client_free(lg.c);
	return status;
}


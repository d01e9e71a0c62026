/*
 * runs — the verbs that show runs: `ferry get RUN` (a run's steps, their
 * results, params and origin, and the monitor's view of its running and
 * train steps) and `ferry list` (runs, newest first, with filters), as
 * text for people (format.h) or the server's JSON (-o json).
 */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/client.h"
#include "lib/util.h"

/* ---- get ---- */

#define PARAM_SHOWN 80 /* bytes of a param's value ferry get prints */

static void print_params(const json_t *params)
{
	const char *key;
	const json_t *val;
	bool first = true;

	json_object_foreach((json_t *)params, key, val) {
		char *text = json_is_string(val) ? NULL : json_dumps(val, JSON_ENCODE_ANY | JSON_COMPACT);
		const char *v = json_is_string(val) ? json_string_value(val) : text ? text : "?";
		/* a long value cut (whole in -o json), with its size; a newline shown as \n */
		size_t n = strlen(v), shown = n > PARAM_SHOWN ? PARAM_SHOWN : n;
		while (shown < n && shown > 0 && ((unsigned char)v[shown] & 0xC0) == 0x80)
			shown--; /* not inside a UTF-8 character */
		printf("%s%s=", first ? "" : ", ", key);
		for (size_t i = 0; i < shown; i++)
			fputs(v[i] == '\n' ? "\\n" : (char[2]){v[i], '\0'}, stdout);
		if (shown < n)
			printf("… (%zu bytes; ferry get -o json has it whole)", n);
		free(text);
		first = false;
	}
	if (first)
		fputs("none", stdout);
	fputc('\n', stdout);
}

/* Metrics and gate results of the steps that have them, one line per step. */
static void print_results(const struct cli *cli, const json_t *steps)
{
	static const char *const known[] = {"accuracy", "precision", "recall", "f1", "mae", "mse", "rmse"};
	const json_t *step, *v, *g;
	const char *key;
	bool head = false;
	size_t i, k;

	json_array_foreach(steps, i, step) {
		const json_t *m = json_object_get(step, "metrics");
		if (!json_is_object(m) || json_object_size(m) == 0)
			continue;
		if (!head)
			printf("Metrics:\n");
		head = true;
		printf("  %-14s", jstr(step, "name", "?"));
		/* the metrics Ferry knows first, in their usual order, then the others */
		for (k = 0; k < sizeof(known) / sizeof(known[0]); k++)
			if ((v = json_object_get(m, known[k])) != NULL)
				printf(" %s=%.4g", known[k], json_number_value(v));
		json_object_foreach((json_t *)m, key, v) {
			bool seen = false;
			for (size_t j = 0; j < sizeof(known) / sizeof(known[0]) && !seen; j++)
				seen = strcmp(key, known[j]) == 0;
			if (!seen)
				printf(" %s=%.4g", key, json_number_value(v));
		}
		fputc('\n', stdout);
	}
	head = false;
	json_array_foreach(steps, i, step) {
		const json_t *gate = json_object_get(step, "gate");
		if (json_array_size(gate) == 0)
			continue;
		if (!head)
			printf("Gates:\n");
		head = true;
		printf("  %-14s", jstr(step, "name", "?"));
		json_array_foreach(gate, k, g) {
			bool ok = json_is_true(json_object_get(g, "passed"));
			const char *against = jstr(g, "against", NULL);
			if (!json_is_number(json_object_get(g, "threshold"))) {
				/* nothing to compare with (no production version yet) */
				printf("%s %s %s %.4g (%s)", k ? " " : "", state_marker(cli, ok ? "succeeded" : "failed"),
				       jstr(g, "metric", "?"), json_number_value(json_object_get(g, "value")),
				       jstr(g, "note", "not compared"));
				continue;
			}
			printf("%s %s %s %.4g %s %.4g%s%s%s", k ? " " : "",
			       state_marker(cli, ok ? "succeeded" : "failed"), jstr(g, "metric", "?"),
			       json_number_value(json_object_get(g, "value")), jstr(g, "op", "?"),
			       json_number_value(json_object_get(g, "threshold")),
			       against ? " (" : "", against ? against : "", against ? ")" : "");
		}
		fputc('\n', stdout);
	}
}

/* What started a run a schedule or trigger started: the occasion, the files, the commit. */
static void print_origin(const json_t *o)
{
	const json_t *v;
	size_t i;

	if ((v = json_object_get(o, "schedule")) != NULL)
		printf("Occasion:  %s of schedule %s%s\n", jstr(v, "nominal", "?"), jstr(v, "name", "?"),
		       json_is_true(json_object_get(v, "caught_up")) ? " (caught up)" : "");
	if ((v = json_object_get(o, "data")) != NULL) {
		static const char *const lists[] = {"added", "changed", "removed"};
		printf("Data:      %s, fingerprint %.12s", jstr(v, "path", "?"), jstr(v, "fingerprint", "?"));
		for (i = 0; i < 3; i++) {
			size_t n = json_array_size(json_object_get(v, lists[i]));
			if (n > 0)
				printf(", %zu %s", n, lists[i]);
		}
		printf("\n");
	}
	if ((v = json_object_get(o, "git")) != NULL) {
		printf("Commit:    %.12s", jstr(v, "commit", "?"));
		if (jstr(v, "branch", NULL))
			printf(" on %s", jstr(v, "branch", ""));
		printf(" of %s", jstr(v, "repo", "?"));
		if (jstr(v, "subject", NULL))
			printf(" %s %s", "-", jstr(v, "subject", ""));
		printf("\n");
	}
}

static void print_run(const struct cli *cli, const json_t *run, int64_t now)
{
	const char *hash = jstr(run, "workflow_hash", NULL);
	const char *reason = jstr(run, "reason", NULL);
	const char *state = run_display_state(run);
	const json_t *steps = json_object_get(run, "steps");
	char id[32], buf[64];
	int64_t t;
	struct table tab;

	id_text(id, sizeof(id), run);
	printf("Run:       %s\n", id);
	printf("Workflow:  %s", jstr(run, "workflow", "?"));
	if (hash != NULL)
		printf(" (%.12s)", hash);
	printf("\nState:     %s %s", state_marker(cli, state), state);
	if (reason != NULL && *reason != '\0')
		printf(" %s %s", dash(cli), reason);
	printf("\nTrigger:   %s", jstr(run, "trigger", "?"));
	if (jstr(run, "actor", NULL) != NULL)
		printf(" by %s", jstr(run, "actor", NULL));
	fputc('\n', stdout);
	print_origin(json_object_get(run, "origin"));
	if (jtime(run, "created_at", &t)) {
		fmt_local(buf, sizeof(buf), t, true);
		printf("Created:   %s\n", buf);
	}
	if (jtime(run, "started_at", &t))
		fmt_local(buf, sizeof(buf), t, true);
	else
		snprintf(buf, sizeof(buf), "-");
	printf("Started:   %s\n", buf);
	fmt_span(buf, sizeof(buf), run, now);
	printf("Duration:  %s%s\n", buf,
	       strcmp(buf, "-") != 0 && !jtime(run, "finished_at", &t) ? " (so far)" : "");
	if (jtime(run, "logs_removed_at", &t)) {
		fmt_local(buf, sizeof(buf), t, true);
		printf("Logs:      removed by retention on %s (the run's record stays)\n", buf);
	}
	printf("Params:    ");
	print_params(json_object_get(run, "params"));
	printf("Steps:\n");
	table_init(&tab, 5);
	table_add_steps(&tab, cli, run, now);
	table_print(&tab, stdout, "  ");
	table_dispose(&tab);
	print_results(cli, steps);
}

/*
 * A verb that takes "RUN" (and -o): METHOD /runs/{id}. Returns -1 with
 * *answer (the caller's) to go on, else the exit status to return now
 * (usage, or the request's error reported).
 */
int run_request(const struct ctx *x, int argc, char **argv, const char *method, json_t **answer,
		int64_t *id, bool *json)
{
	ferry_client *c = NULL;
	char *path;
	int rc, status;

	*answer = NULL;
	if ((status = parse_run_args(x, argc, argv, id, json)) >= 0)
		return status;
	if ((status = open_client(&c)) != FX_OK)
		return status;
	path = xasprintf("/runs/%" PRId64, *id);
	rc = client_request(answer, c, method, path, NULL);
	status = rc < 0 ? report_request_error(c, rc) : -1;
	free(path);
	client_free(c);
	return status;
}

/*
 * The monitor's view of the steps that run jobs and are running, or are
 * train steps (their metric series): at most MONITORS_SHOWN of them, each
 * one request (`ferry monitor` has the whole of one). Quiet when the
 * daemon has none of it.
 */
#define MONITORS_SHOWN 8
static void print_monitors(const json_t *run, int64_t id)
{
	const json_t *st;
	ferry_client *c = NULL;
	size_t i;
	int shown = 0;

	json_array_foreach(json_object_get(run, "steps"), i, st) {
		const char *state = jstr(st, "state", ""), *kind = jstr(st, "kind", "");
		json_t *doc = NULL;
		char *path, *name;

		if (shown >= MONITORS_SHOWN || jint(st, "attempts", 0) < 1 ||
		    (strcmp(state, "running") != 0 && strcmp(kind, "train") != 0))
			continue;
		if (c == NULL && open_client(&c) != FX_OK)
			return;
		name = client_escape(jstr(st, "name", ""));
		path = xasprintf("/runs/%" PRId64 "/steps/%s/monitor", id, name);
		if (client_request(&doc, c, "GET", path, NULL) >= 0 && strcmp(jstr(doc, "state", "none"), "none") != 0) {
			if (shown++ == 0)
				printf("Monitor:\n");
			monitor_print_brief(doc);
		}
		json_decref(doc);
		free(path), free(name);
	}
	client_free(c);
}

int cmd_get(const struct ctx *x, int argc, char **argv)
{
	json_t *run = NULL;
	bool json = false;
	int64_t id;
	int status;

	if ((status = run_request(x, argc, argv, "GET", &run, &id, &json)) >= 0)
		return status;
	if (json)
		print_json(run);
	else {
		print_run(x->cli, run, clock_wall_ms());
		print_monitors(run, id);
	}
	json_decref(run);
	return FX_OK;
}

/* ---- list ---- */

static void print_run_list(const json_t *runs, int64_t now)
{
	static const char *const header[] = {
		"ID", "WORKFLOW", "STATE", "TRIGGER", "STARTED", "DURATION",
	};
	const json_t *run;
	struct table t;
	size_t i;

	table_init(&t, 6);
	table_add(&t, header);
	json_array_foreach(runs, i, run) {
		char id[32], started[32], dur[32];
		const char *row[6];
		int64_t ts;

		id_text(id, sizeof(id), run);
		if (jtime(run, "started_at", &ts))
			fmt_local(started, sizeof(started), ts, true);
		else
			snprintf(started, sizeof(started), "-");
		fmt_span(dur, sizeof(dur), run, now);
		row[0] = id;
		row[1] = jstr(run, "workflow", "?");
		row[2] = run_display_state(run);
		row[3] = jstr(run, "trigger", "-");
		row[4] = started;
		row[5] = dur;
		table_add(&t, row);
	}
	table_print(&t, stdout, "");
	table_dispose(&t);
}

/* Appends "&name=escaped(value)" (or "?…" first) to *query. */
static void query_add(char **query, const char *name, const char *value)
{
	char *esc = client_escape(value);
	char *q = xasprintf("%s%c%s=%s", *query, **query ? '&' : '?', name, esc);

	free(esc);
	free(*query);
	*query = q;
}

int cmd_list(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"state", required_argument, NULL, OPT_STATE},
		{"workflow", required_argument, NULL, OPT_WORKFLOW},
		{"trigger", required_argument, NULL, OPT_TRIGGER},
		{"dev", no_argument, NULL, OPT_DEV},
		{"limit", required_argument, NULL, OPT_LIMIT},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	static const char *const triggers[] = {"api", "cli", "dev", "schedule", "data", "git", "bench"};
	ferry_client *c = NULL;
	json_t *answer = NULL, *runs;
	char *query = xstrdup(""), *path = NULL;
	const char *trigger = NULL;
	bool json = false, dev = false;
	int64_t limit;
	int ch, rc, status = FX_USAGE;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_STATE:
			/* waiting: running with a step waiting for a person, as the list shows it */
			if (!run_state_known(optarg) && strcmp(optarg, "waiting") != 0) {
				usage_error(x, "unknown state '%s' (one of pending, running, waiting, "
					    "stopping, succeeded, failed, stopped)", optarg);
				goto out;
			}
			query_add(&query, "state", optarg);
			break;
		case OPT_WORKFLOW:
			query_add(&query, "workflow", optarg);
			break;
		case OPT_TRIGGER: {
			size_t i;
			for (i = 0; i < sizeof(triggers) / sizeof(triggers[0]) && strcmp(triggers[i], optarg) != 0; i++)
				;
			if (i == sizeof(triggers) / sizeof(triggers[0])) {
				usage_error(x, "unknown trigger '%s' (one of api, cli, dev, schedule, data, git, bench)",
					    optarg);
				goto out;
			}
			trigger = optarg;
			query_add(&query, "trigger", optarg);
			break;
		}
		case OPT_DEV:
			dev = true;
			break;
		case OPT_LIMIT:
			/* the API's cap: it answers 400 above it rather than a short page */
			if (parse_int64(optarg, &limit) < 0 || limit <= 0 || limit > 500) {
				usage_error(x, "--limit wants a number from 1 to 500, not '%s'", optarg);
				goto out;
			}
			query_add(&query, "limit", optarg);
			break;
		case 'o':
			if (parse_output(x, optarg, &json) != 0)
				goto out;
			break;
		case 'h':
			status = print_help(x->cmd);
			goto out;
		default:
			status = option_error(x, ch, argv);
			goto out;
		}
	}
	if (argc > optind) {
		status = usage_error(x, "unexpected argument '%s'", argv[optind]);
		goto out;
	}
	/* dev runs (ferry dev) are a person's experiments: shown with --dev or --trigger dev */
	if (!dev && trigger == NULL)
		query_add(&query, "exclude_trigger", "dev");
	if ((status = open_client(&c)) != FX_OK)
		goto out;
	path = xasprintf("/runs%s", query);
	rc = client_request(&answer, c, "GET", path, NULL);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	if (json) {
		print_json(answer);
		goto out;
	}
	runs = json_object_get(answer, "runs");
	if (json_array_size(runs) == 0) {
		fprintf(stderr, "no runs\n");
		goto out;
	}
	print_run_list(runs, clock_wall_ms());
	fflush(stdout);
	if (json_is_string(json_object_get(answer, "next_cursor")))
		fprintf(stderr, "(more runs not shown; raise --limit to see them)\n");
out:
	free(path);
	free(query);
	json_decref(answer);
	client_free(c);
	return status;
}

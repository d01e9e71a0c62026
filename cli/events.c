/*
 * ferry events — a run's audit trail as GET /api/v1/runs/{id}/events has
 * it: every transition and every human action, oldest first, one line each
 * (time, actor, what, step and attempt, detail); -o json prints the answer
 * as is. --after ID prints only the events after that one (for scripts that
 * poll).
 *
 * ferry audit — the trail of what has no events of its own and what
 * outlives a run (GET /api/v1/audit): schedules and triggers changed,
 * runs deleted, newest first.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

enum { OPT_AFTER = 640, OPT_OBJECT, OPT_ID };

static void print_events(const json_t *answer)
{
	static const char *const head[] = {"ID", "AT", "ACTOR", "EVENT", "STEP", "DETAIL"};
	const json_t *events = json_object_get(answer, "events"), *ev;
	struct table t;
	size_t i;

	if (json_array_size(events) == 0) {
		fprintf(stderr, "no events\n");
		return;
	}
	table_init(&t, 6);
	table_add(&t, head);
	json_array_foreach(events, i, ev) {
		const json_t *detail = json_object_get(ev, "detail");
		char id[24], step[160], at[40];
		char *d = detail && !json_is_null(detail) ? json_dumps(detail, JSON_COMPACT) : NULL;
		int64_t ts;

		snprintf(id, sizeof(id), "%lld", (long long)jint(ev, "id", 0));
		if (jtime(ev, "at", &ts))
			fmt_local(at, sizeof(at), ts, true);
		else
			snprintf(at, sizeof(at), "%s", jstr(ev, "at", "-"));
		if (json_integer_value(json_object_get(ev, "attempt")) > 0)
			snprintf(step, sizeof(step), "%s #%lld", jstr(ev, "step", "-"),
				 (long long)jint(ev, "attempt", 0));
		else
			snprintf(step, sizeof(step), "%s", jstr(ev, "step", "-"));
		const char *row[] = {id, at, jstr(ev, "actor", "-"), jstr(ev, "kind", "?"), step, d ? d : ""};
		table_add(&t, row);
		free(d);
	}
	table_print(&t, stdout, "");
	table_dispose(&t);
}

int cmd_events(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"after", required_argument, NULL, OPT_AFTER},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	ferry_client *c = NULL;
	json_t *answer = NULL;
	char *path = NULL;
	bool json = false;
	int64_t id, after = 0;
	int ch, rc, status;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_AFTER:
			if (parse_int64(optarg, &after) < 0 || after < 0)
				return usage_error(x, "--after takes an event id (a number >= 0), not \"%s\"", optarg);
			break;
		case 'o':
			if ((status = parse_output(x, optarg, &json)) != FX_OK)
				return status;
			break;
		case 'h':
			return print_help(x->cmd);
		default:
			return option_error(x, ch, argv);
		}
	}
	if ((status = parse_run_operand(x, argc, argv, &id)) >= 0)
		return status;
	if ((status = open_client(&c)) != FX_OK)
		return status;
	path = xasprintf("/runs/%" PRId64 "/events?after=%" PRId64, id, after);
	rc = client_request(&answer, c, "GET", path, NULL);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	if (json)
		print_json(answer);
	else
		print_events(answer);
	status = FX_OK;
out:
	free(path);
	json_decref(answer);
	client_free(c);
	return status;
}

static void print_audit(const json_t *answer)
{
	static const char *const head[] = {"ID", "AT", "ACTOR", "OBJECT", "ACTION", "DETAIL"};
	const json_t *entries = json_object_get(answer, "audit"), *e;
	struct table t;
	size_t i;

	if (json_array_size(entries) == 0) {
		fprintf(stderr, "no audit entries\n");
		return;
	}
	table_init(&t, 6);
	table_add(&t, head);
	json_array_foreach(entries, i, e) {
		char id[24], at[40], obj[64];
		char *d = json_dumps(json_object_get(e, "detail"), JSON_COMPACT);
		int64_t ts;

		snprintf(id, sizeof(id), "%lld", (long long)jint(e, "id", 0));
		if (jtime(e, "at", &ts))
			fmt_local(at, sizeof(at), ts, true);
		else
			snprintf(at, sizeof(at), "%s", jstr(e, "at", "-"));
		snprintf(obj, sizeof(obj), "%s %lld", jstr(e, "object", "?"), (long long)jint(e, "object_id", 0));
		const char *row[] = {id, at, jstr(e, "actor", "-"), obj, jstr(e, "action", "?"), d ? d : ""};
		table_add(&t, row);
		free(d);
	}
	table_print(&t, stdout, "");
	table_dispose(&t);
}

int cmd_audit(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"object", required_argument, NULL, OPT_OBJECT},
		{"id", required_argument, NULL, OPT_ID},
		{"limit", required_argument, NULL, OPT_LIMIT},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	ferry_client *c = NULL;
	json_t *answer = NULL;
	const char *object = NULL;
	char *path = NULL;
	bool json = false;
	int64_t id = 0, limit = 50;
	int ch, rc, status;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_OBJECT:
			if (strcmp(optarg, "run") != 0 && strcmp(optarg, "schedule") != 0 && strcmp(optarg, "trigger") != 0)
				return usage_error(x, "--object takes run, schedule or trigger, not \"%s\"", optarg);
			object = optarg;
			break;
		case OPT_ID:
			if (parse_int64(optarg, &id) < 0 || id <= 0)
				return usage_error(x, "--id takes a positive number, not \"%s\"", optarg);
			break;
		case OPT_LIMIT:
			if (parse_int64(optarg, &limit) < 0 || limit < 1 || limit > 500)
				return usage_error(x, "--limit takes a number from 1 to 500, not \"%s\"", optarg);
			break;
		case 'o':
			if ((status = parse_output(x, optarg, &json)) != FX_OK)
				return status;
			break;
		case 'h':
			return print_help(x->cmd);
		default:
			return option_error(x, ch, argv);
		}
	}
	if (optind < argc)
		return usage_error(x, "unexpected argument \"%s\"", argv[optind]);
	if (id > 0 && object == NULL)
		return usage_error(x, "--id needs --object (run, schedule or trigger)");
	if ((status = open_client(&c)) != FX_OK)
		return status;
	path = xasprintf("/audit?limit=%" PRId64 "%s%s", limit, object ? "&object=" : "", object ? object : "");
	if (id > 0) {
		char *p = xasprintf("%s&object_id=%" PRId64, path, id);
		free(path);
		path = p;
	}
	rc = client_request(&answer, c, "GET", path, NULL);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	if (json)
		print_json(answer);
	else
		print_audit(answer);
	status = FX_OK;
out:
	free(path);
	json_decref(answer);
	client_free(c);
	return status;
}

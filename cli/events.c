/*
 * ferry events — a run's audit trail as GET /api/v1/runs/{id}/events has
 * it: every transition and every human action, oldest first, one line each
 * (time, actor, what, step and attempt, detail); -o json prints the answer
 * as is. --after ID prints only the events after that one (for scripts that
 * poll).
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

enum { OPT_AFTER = 640 };

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

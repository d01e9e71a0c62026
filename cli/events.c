/*
 * ferry events — a run's audit trail as GET /api/v1/runs/{id}/events has
 * it: every transition and every human action, oldest first, one line each
 * (time, actor, what, step and attempt, and the detail's telling fields as
 * KEY=VALUE, cut to a line); -o json prints the answer as is. --after ID prints only the events after that one (for scripts that
 * poll).
 *
 * ferry audit — the trail of what has no events of its own and what
 * outlives a run (GET /api/v1/audit): schedules and triggers changed,
 * secrets set and removed, queues made, changed and deleted, runs
 * deleted, newest first.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

enum { OPT_AFTER = 640, OPT_OBJECT, OPT_ID };

#define DETAIL_SHOWN 110 /* characters of an event's detail on its line (-o json has it all) */

/* The keys that say most, first when an event's detail has them. */
static const char *const first_keys[] = {"reason", "outcome", "state", "exit_code", "signal", "error", "version",
					 "alias", "from", "to", "message", "note"};

/* Writes " KEY=VALUE" for one member (a nested value by its size; the first without the blank). */
static void detail_member(FILE *f, int *n, const char *key, const json_t *v)
{
	fprintf(f, "%s%s=", (*n)++ ? " " : "", key);
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		int quote = *s == '\0' || strpbrk(s, " \t=\"") != NULL;
		size_t i = 0;
		if (quote)
			fputc('"', f);
		for (; s[i] && i < DETAIL_SHOWN; i++) /* a newline shown as \n */
			fputs(s[i] == '\n' ? "\\n" : (char[2]){s[i], '\0'}, f);
		if (quote)
			fputc('"', f);
	} else if (json_is_object(v)) {
		fprintf(f, "{%zu}", json_object_size(v));
	} else if (json_is_array(v)) {
		fprintf(f, "[%zu]", json_array_size(v));
	} else {
		char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
		fputs(t ? t : "?", f);
		free(t);
	}
}

static int is_first_key(const char *key)
{
	for (size_t k = 0; k < sizeof(first_keys) / sizeof(first_keys[0]); k++)
		if (strcmp(key, first_keys[k]) == 0)
			return 1;
	return 0;
}

/*
 * An event's detail on one readable line: its members as KEY=VALUE (the
 * telling ones first: reason, outcome, state, …), a nested member by its
 * size, the whole cut after DETAIL_SHOWN bytes with "…".
 */
static char *detail_line(const json_t *d)
{
	char *p = NULL;
	size_t len = 0;
	FILE *f;
	const char *key;
	const json_t *v;
	int n = 0;

	if (d == NULL || json_is_null(d) || (f = open_memstream(&p, &len)) == NULL)
		return xstrdup("");
	if (!json_is_object(d)) {
		char *t = json_dumps(d, JSON_ENCODE_ANY | JSON_COMPACT);
		fputs(t ? t : "", f);
		free(t);
	} else {
		for (size_t i = 0; i < sizeof(first_keys) / sizeof(first_keys[0]); i++)
			if ((v = json_object_get(d, first_keys[i])) != NULL && !json_is_null(v))
				detail_member(f, &n, first_keys[i], v);
		json_object_foreach((json_t *)d, key, v)
			if (!is_first_key(key) && !json_is_null(v))
				detail_member(f, &n, key, v);
	}
	fclose(f);
	if (p && len > DETAIL_SHOWN) {
		size_t cut = DETAIL_SHOWN;
		char *q;
		while (cut > 0 && ((unsigned char)p[cut] & 0xC0) == 0x80)
			cut--; /* not inside a UTF-8 character */
		p[cut] = '\0';
		q = xasprintf("%s…", p);
		free(p);
		p = q;
	}
	return p ? p : xstrdup("");
}

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
		char id[24], step[160], at[40];
		char *d = detail_line(json_object_get(ev, "detail"));
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
		char *d = detail_line(json_object_get(e, "detail"));
		int64_t ts;

		snprintf(id, sizeof(id), "%lld", (long long)jint(e, "id", 0));
		if (jtime(e, "at", &ts))
			fmt_local(at, sizeof(at), ts, true);
		else
			snprintf(at, sizeof(at), "%s", jstr(e, "at", "-"));
		/* a secret or a queue is known by its name (its object_id is 0) */
		if (jint(e, "object_id", 0) == 0 && json_is_string(json_object_get(json_object_get(e, "detail"), "name")))
			snprintf(obj, sizeof(obj), "%s %s", jstr(e, "object", "?"),
				 jstr(json_object_get(e, "detail"), "name", "?"));
		else
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
			if (strcmp(optarg, "run") != 0 && strcmp(optarg, "schedule") != 0 && strcmp(optarg, "trigger") != 0 &&
			    strcmp(optarg, "secret") != 0 && strcmp(optarg, "queue") != 0)
				return usage_error(x, "--object takes run, schedule, trigger, secret or queue, not \"%s\"",
						   optarg);
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

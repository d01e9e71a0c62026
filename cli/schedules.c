/*
 * schedules — `ferry schedules`: the cron schedules of registered
 * workflows (orchestrator/schedule/schedules.md): list them, show one with its next
 * fire times (and the DST notes) and its tick history, create one for a
 * workflow, pause, resume and delete. Each subcommand is one request to
 * the API (api/api_schedules.c).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

enum { S_LIST, S_GET, S_NEXT, S_PAUSE, S_RESUME, S_DELETE, S_CREATE };

struct sub {
	const char *name;
	int operands; /* -1: none */
	const char *usage;
};

static const struct sub subs[] = {
	[S_LIST] = {"list", -1, ""},
	[S_GET] = {"get", 1, "SCHEDULE"},
	[S_NEXT] = {"next", 1, "SCHEDULE"},
	[S_PAUSE] = {"pause", 1, "SCHEDULE"},
	[S_RESUME] = {"resume", 1, "SCHEDULE"},
	[S_DELETE] = {"delete", 1, "SCHEDULE"},
	[S_CREATE] = {"create", 2, "WORKFLOW CRON"},
	{NULL, 0, NULL},
};

static void print_row(const json_t *s)
{
	const json_t *last = json_object_get(s, "last");

	int paused = json_is_true(json_object_get(s, "paused"));

	/* paused: no next fire time until it is resumed (not "never": it has upcoming times once resumed) */
	printf("%-4lld %-16s %-12s %-18s %-16s %-7s next %s", (long long)json_integer_value(json_object_get(s, "id")),
	       jstr(s, "workflow", "?"), jstr(s, "name", "?"), jstr(s, "cron", "?"), jstr(s, "timezone", "UTC"),
	       paused ? "paused" : jstr(s, "concurrency", "allow"),
	       paused ? "none while paused (ferry schedules resume)" : jstr(s, "next_at", "never"));
	if (json_is_object(last))
		printf("  last %s %s%s%s", jstr(last, "nominal_at", "?"), jstr(last, "outcome", "?"),
		       json_is_string(json_object_get(last, "reason")) ? ": " : "", jstr(last, "reason", ""));
	printf("\n");
}

static void print_next(const json_t *s)
{
	const json_t *n;
	size_t i;

	json_array_foreach(json_object_get(s, "next"), i, n) {
		printf("  %s  (%s %s)", jstr(n, "at", "?"), jstr(n, "local", "?"), jstr(s, "timezone", "UTC"));
		if (json_is_string(json_object_get(n, "note")))
			printf("  note: %s", jstr(n, "note", ""));
		printf("\n");
	}
}

static void print_one(const json_t *s)
{
	const json_t *t;
	size_t i;

	print_row(s);
	printf("  gap %s, overlap %s, catchup %s (max %lld), source %s\n", jstr(s, "gap", "?"), jstr(s, "overlap", "?"),
	       jstr(s, "catchup", "?"), (long long)json_integer_value(json_object_get(s, "max_catchup")),
	       jstr(s, "source", "?"));
	printf(json_is_true(json_object_get(s, "paused")) ? "Next, once resumed (paused now: none fires):\n" : "Next:\n");
	print_next(s);
	printf("Ticks (newest first):\n");
	json_array_foreach(json_object_get(s, "ticks"), i, t) {
		printf("  %s  %-7s", jstr(t, "nominal_at", "?"), jstr(t, "outcome", "?"));
		if (json_is_integer(json_object_get(t, "run")))
			printf(" run %lld", (long long)json_integer_value(json_object_get(t, "run")));
		if (json_is_string(json_object_get(t, "reason")))
			printf(" (%s)", jstr(t, "reason", ""));
		if (json_is_integer(json_object_get(t, "late_ms")) && !strcmp(jstr(t, "outcome", ""), "fired"))
			printf("  +%lld ms", (long long)json_integer_value(json_object_get(t, "late_ms")));
		printf("\n");
	}
}

int cmd_schedules(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'},
		{"timezone", required_argument, NULL, 'z'},
		{"name", required_argument, NULL, 'n'},
		{"concurrency", required_argument, NULL, 'c'},
		{"catchup", required_argument, NULL, 'u'},
		{"param", required_argument, NULL, 'p'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	ferry_client *c = NULL;
	json_t *answer = NULL, *body = NULL, *params = NULL;
	char *path = NULL;
	const char *method = "GET", *tz = NULL, *name = NULL, *conc = NULL, *catchup = NULL;
	bool json = false;
	int ch, rc, status = FX_USAGE, k, nops;
	int64_t id = 0;
	char **ops;

	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		if (argc < 2)
			return usage_error(x, "which one: list, get, next, create, pause, resume or delete?");
		return print_help(x->cmd);
	}
	for (k = 0; subs[k].name && strcmp(subs[k].name, argv[1]) != 0; k++)
		;
	if (subs[k].name == NULL)
		return usage_error(x, "unknown subcommand '%s'", argv[1]);
	params = json_object();
	optind = 0;
	while ((ch = getopt_long(argc - 1, argv + 1, ":o:p:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'o':
			if (parse_output(x, optarg, &json) != 0)
				goto out;
			break;
		case 'z':
			tz = optarg;
			break;
		case 'n':
			name = optarg;
			break;
		case 'c':
			conc = optarg;
			break;
		case 'u':
			catchup = optarg;
			break;
		case 'p': {
			const char *eq = strchr(optarg, '=');
			if (eq == NULL || eq == optarg) {
				status = usage_error(x, "--param takes NAME=VALUE, not '%s'", optarg);
				goto out;
			}
			json_object_set_new(params, xstrndup(optarg, (size_t)(eq - optarg)), json_string(eq + 1));
			break;
		}
		case 'h':
			status = print_help(x->cmd);
			goto out;
		default:
			status = option_error(x, ch, argv + 1);
			goto out;
		}
	}
	ops = argv + 1 + optind;
	nops = argc - 1 - optind;
	if ((subs[k].operands < 0 && nops != 0) || (subs[k].operands >= 0 && nops != subs[k].operands)) {
		status = usage_error(x, "schedules %s takes %s", subs[k].name,
				     subs[k].operands < 0 ? "no operands" : subs[k].usage);
		goto out;
	}
	if (k != S_LIST && k != S_CREATE && parse_run_id(x, ops[0], &id) != 0)
		goto out;
	switch (k) {
	case S_LIST:
		path = xstrdup("/schedules");
		break;
	case S_GET:
	case S_NEXT:
		path = xasprintf("/schedules/%lld", (long long)id);
		break;
	case S_PAUSE:
	case S_RESUME:
		method = "PATCH";
		path = xasprintf("/schedules/%lld", (long long)id);
		body = json_pack("{s:b}", "paused", k == S_PAUSE);
		break;
	case S_DELETE:
		method = "DELETE";
		path = xasprintf("/schedules/%lld", (long long)id);
		break;
	default: /* create */
		method = "POST";
		path = xstrdup("/schedules");
		body = json_pack("{s:s,s:s,s:O}", "workflow", ops[0], "cron", ops[1], "params", params);
		if (tz)
			json_object_set_new(body, "timezone", json_string(tz));
		if (name)
			json_object_set_new(body, "name", json_string(name));
		if (conc)
			json_object_set_new(body, "concurrency", json_string(conc));
		if (catchup)
			json_object_set_new(body, "catchup", json_string(catchup));
	}
	if ((status = open_client(&c)) != FX_OK)
		goto out;
	rc = client_request(&answer, c, method, path, body);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	status = FX_OK;
	if (json) {
		print_json(answer);
	} else if (k == S_LIST) {
		size_t i;
		json_t *s, *list = json_object_get(answer, "schedules");
		if (json_array_size(list) == 0)
			printf("no schedules\n");
		json_array_foreach(list, i, s)
			print_row(s);
	} else if (k == S_NEXT) {
		print_next(answer);
	} else if (k == S_DELETE) {
		printf("schedule %lld deleted\n", (long long)id);
	} else {
		print_one(answer);
	}
out:
	free(path);
	json_decref(answer), json_decref(body), json_decref(params);
	client_free(c);
	return status;
}

/* ---- ferry triggers ---- */

static void print_trigger(const json_t *t)
{
	const json_t *spec = json_object_get(t, "spec"), *f = json_array_get(json_object_get(t, "fires"), 0);
	const char *kind = jstr(t, "kind", "?");

	printf("%-4lld %-16s %-10s %-4s %-28s %s", (long long)json_integer_value(json_object_get(t, "id")),
	       jstr(t, "workflow", "?"), jstr(t, "name", "?"), kind,
	       strcmp(kind, "git") == 0 ? jstr(spec, "repo", "?") : jstr(spec, "path", "?"),
	       json_is_true(json_object_get(t, "paused")) ? "paused" : json_is_true(json_object_get(t, "watching")) ? "watching" : "starting");
	if (strcmp(kind, "git") == 0 && json_is_string(json_object_get(t, "commit")))
		printf("  at %.12s on %s", jstr(t, "commit", ""), jstr(spec, "branch", "?"));
	else if (json_is_string(json_object_get(t, "fingerprint")))
		printf("  %lld files, %.12s", (long long)json_integer_value(json_object_get(t, "files")),
		       jstr(t, "fingerprint", ""));
	if (json_is_object(f)) {
		printf("  last %s %s", jstr(f, "at", "?"), jstr(f, "outcome", "?"));
		if (json_is_integer(json_object_get(f, "run")))
			printf(" run %lld", (long long)json_integer_value(json_object_get(f, "run")));
		if (json_is_string(json_object_get(f, "reason")))
			printf(" (%s)", jstr(f, "reason", ""));
	}
	printf("\n");
}

int cmd_triggers(const struct ctx *x, int argc, char **argv)
{
	ferry_client *c = NULL;
	json_t *answer = NULL, *body = NULL;
	char *path = NULL;
	bool json = false;
	int rc, status = FX_USAGE, list;
	int64_t id = 0;

	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		if (argc < 2)
			return usage_error(x, "which one: list, pause or resume?");
		return print_help(x->cmd);
	}
	list = strcmp(argv[1], "list") == 0;
	if (!list && strcmp(argv[1], "pause") != 0 && strcmp(argv[1], "resume") != 0)
		return usage_error(x, "unknown subcommand '%s'", argv[1]);
	if ((rc = parse_output_args(x, argc - 1, argv + 1, &json)) >= 0)
		return rc;
	if (argc - 1 - optind != (list ? 0 : 1)) {
		status = usage_error(x, "triggers %s takes %s", argv[1], list ? "no operands" : "TRIGGER");
		goto out;
	}
	if (!list) {
		if (parse_run_id(x, argv[1 + optind], &id) != 0)
			goto out;
		path = xasprintf("/triggers/%lld", (long long)id);
		body = json_pack("{s:b}", "paused", strcmp(argv[1], "pause") == 0);
	}
	if ((status = open_client(&c)) != FX_OK)
		goto out;
	rc = client_request(&answer, c, list ? "GET" : "PATCH", list ? "/triggers" : path, body);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	status = FX_OK;
	if (json) {
		print_json(answer);
	} else if (list) {
		size_t i;
		json_t *t, *all = json_object_get(answer, "triggers");
		if (json_array_size(all) == 0)
			printf("no triggers\n");
		json_array_foreach(all, i, t)
			print_trigger(t);
	} else {
		print_trigger(answer);
	}
out:
	free(path);
	json_decref(answer), json_decref(body);
	client_free(c);
	return status;
}

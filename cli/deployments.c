/*
 * deployments — `ferry deployments`: list and show deployments (versions,
 * weights, replicas with their health, the auto-stop deadline), change
 * their traffic or a version's replica count, extend or stop and start them, promote or roll back,
 * send an online prediction through the front address, and delete them.
 * Each subcommand is one request to the API (api/api_deploy.c).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

struct sub {
	const char *name;
	int operands;       /* after DEPLOYMENT */
	const char *usage;  /* the operands, for messages */
};

static const struct sub subs[] = {
	{"list", -1, ""},
	{"get", 0, "DEPLOYMENT"},
	{"traffic", 2, "DEPLOYMENT VERSION PERCENT"},
	{"extend", 1, "DEPLOYMENT HOURS (1h-24h, or never)"},
	{"stop", 0, "DEPLOYMENT"},
	{"start", 0, "DEPLOYMENT"},
	{"promote", 1, "DEPLOYMENT VERSION"},
	{"rollback", 0, "DEPLOYMENT"},
	{"predict", 1, "DEPLOYMENT REQUEST.json"},
	{"delete", 0, "DEPLOYMENT"},
	{"scale", 2, "DEPLOYMENT VERSION REPLICAS (1-5)"},
	{"retire", 1, "DEPLOYMENT VERSION"},
	{NULL, 0, NULL},
};

static void print_one(const json_t *d)
{
	const json_t *v, *r;
	size_t i, j;

	printf("%-4lld %-16s %-10s %-8s %-24s deadline %s\n", (long long)json_integer_value(json_object_get(d, "id")),
	       jstr(d, "name", "?"), jstr(d, "model", "?"), jstr(d, "state", "?"), jstr(d, "url", "?"),
	       jstr(d, "deadline", "never"));
	printf("     %-10s %4s  %-8s  %s\n", "VERSION", "SHARE", "STATE", "REPLICAS (idx:port health)");
	json_array_foreach(json_object_get(d, "versions"), i, v) {
		if (strcmp(jstr(v, "state", ""), "retired") == 0)
			continue; /* listed apart below */
		printf("     %-10s %3lld%%  %-8s", jstr(v, "version", "?"),
		       (long long)json_integer_value(json_object_get(v, "weight")), jstr(v, "state", "?"));
		json_array_foreach(json_object_get(v, "replica_list"), j, r)
			printf("  r%lld:%lld %s%s", (long long)json_integer_value(json_object_get(r, "idx")),
			       (long long)json_integer_value(json_object_get(r, "port")), jstr(r, "health", "?"),
			       json_integer_value(json_object_get(r, "restarts")) > 0 ? " (restarted)" : "");
		if (json_is_string(json_object_get(v, "zero_since")))
			printf("  (at 0%% since %s)", jstr(v, "zero_since", "?"));
		printf("\n");
	}
	{
		int any = 0;
		json_array_foreach(json_object_get(d, "versions"), i, v) {
			if (strcmp(jstr(v, "state", ""), "retired") != 0)
				continue;
			printf("%s%s", any++ ? ", " : "     retired (traffic brings one back): ", jstr(v, "version", "?"));
		}
		if (any)
			printf("\n");
	}
}

static int log_begin(void *arg, ferry_client *c)
{
	(void)arg, (void)c;
	return 0;
}

static int log_data(void *arg, const char *buf, size_t len)
{
	(void)arg;
	if (fwrite(buf, 1, len, stdout) != len)
		return -1;
	fflush(stdout);
	return 0;
}

/* `ferry deployments logs DEPLOYMENT [VERSION] [REPLICA] [-f]`: a replica's log, followed with -f. */
static int replica_logs(const struct ctx *x, int argc, char **argv)
{
	ferry_client *c = NULL;
	struct client_sink sink = {log_begin, log_data, NULL};
	const char *ops[3] = {NULL, NULL, NULL};
	int follow = 0, n = 0, rc, status;
	int64_t id = 0, idx = 0;
	char *path = NULL, *vesc = NULL;

	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--follow") == 0)
			follow = 1;
		else if (argv[i][0] == '-' || n == 3)
			return usage_error(x, "deployments logs takes DEPLOYMENT [VERSION] [REPLICA] [-f], not '%s'", argv[i]);
		else
			ops[n++] = argv[i];
	}
	if (n == 0)
		return usage_error(x, "deployments logs takes DEPLOYMENT [VERSION] [REPLICA] [-f]");
	if (parse_run_id(x, ops[0], &id) != 0)
		return FX_USAGE;
	if (ops[2] && (parse_int64(ops[2], &idx) < 0 || idx < 1 || idx > 5))
		return usage_error(x, "REPLICA must be a replica's number, 1-5, not '%s'", ops[2]);
	if (ops[1])
		vesc = client_escape(ops[1]);
	path = xasprintf("/deployments/%lld/logs?replica=%lld%s%s%s", (long long)id, (long long)(idx ? idx : 1),
			 vesc ? "&version=" : "", vesc ? vesc : "", follow ? "&follow=1" : "");
	free(vesc);
	if ((status = open_client(&c)) != FX_OK)
		goto out;
	rc = client_stream(c, path, follow, &sink);
	status = rc < 0 ? report_request_error(c, rc) : FX_OK;
out:
	free(path);
	client_free(c);
	return status;
}

/*
 * `ferry deployments get`'s rest: per version HAProxy's counters (requests,
 * 5xx, mean time) and its load test, then the last events.
 */
static void print_details(const json_t *d)
{
	const json_t *stats = json_object_get(json_object_get(d, "stats"), "versions"), *v, *e;
	const json_t *events = json_object_get(d, "events");
	size_t i, n = json_array_size(events);

	printf("     %-10s %10s %8s %10s  %s\n", "VERSION", "REQUESTS", "5XX", "MEAN MS", "LOAD TEST");
	json_array_foreach(json_object_get(d, "versions"), i, v) {
		const char *ver = jstr(v, "version", "?");
		const json_t *st = json_object_get(stats, ver), *lt = json_object_get(v, "load_test"), *lv;
		char lts[160] = "-";
		size_t j;
		if (strcmp(jstr(v, "state", ""), "retired") == 0)
			continue;
		if (json_is_object(lt)) {
			/* the worst level's p99 and the verdict */
			double worst = -1;
			int64_t conc = 0, errs = 0;
			json_array_foreach(json_object_get(lt, "levels"), j, lv) {
				errs += json_integer_value(json_object_get(lv, "errors"));
				if (json_number_value(json_object_get(lv, "p99_ms")) > worst) {
					worst = json_number_value(json_object_get(lv, "p99_ms"));
					conc = json_integer_value(json_object_get(lv, "concurrency"));
				}
			}
			snprintf(lts, sizeof(lts), "%zu levels, worst p99 %.1f ms at concurrency %lld, %lld errors",
				 json_array_size(json_object_get(lt, "levels")), worst, (long long)conc, (long long)errs);
		}
		if (st)
			printf("     %-10s %10lld %8lld %10.1f  %s\n", ver,
			       (long long)json_integer_value(json_object_get(st, "requests")),
			       (long long)json_integer_value(json_object_get(st, "errors_5xx")),
			       json_number_value(json_object_get(st, "rtime_ms")), lts);
		else
			printf("     %-10s %10s %8s %10s  %s\n", ver, "-", "-", "-", lts);
	}
	if (n > 0) {
		printf("     last events:\n");
		for (i = n > 8 ? n - 8 : 0; i < n; i++) {
			char *det;
			e = json_array_get(events, i);
			det = json_dumps(json_object_get(e, "detail"), JSON_COMPACT);
			printf("       %s  %-22s %-20s %.100s\n", jstr(e, "at", "?"), jstr(e, "kind", "?"), jstr(e, "actor", "?"),
			       det ? det : "");
			free(det);
		}
	}
}

int cmd_deployments(const struct ctx *x, int argc, char **argv)
{
	ferry_client *c = NULL;
	json_t *answer = NULL, *body = NULL;
	char *path = NULL, *text = NULL;
	const char *method = "GET";
	bool json = false;
	int rc, status = FX_USAGE, k, nops;
	int64_t id = 0;
	char **ops;

	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		if (argc < 2)
			return usage_error(x, "which one: list, get, traffic, scale, extend, stop, start, promote, "
					      "rollback, retire, logs, predict or delete?");
		return print_help(x->cmd);
	}
	if (strcmp(argv[1], "logs") == 0)
		return replica_logs(x, argc, argv);
	for (k = 0; subs[k].name && strcmp(subs[k].name, argv[1]) != 0; k++)
		;
	if (subs[k].name == NULL)
		return usage_error(x, "unknown subcommand '%s'", argv[1]);
	if ((rc = parse_output_args(x, argc - 1, argv + 1, &json)) >= 0)
		return rc;
	ops = argv + 1 + optind;
	nops = argc - 1 - optind;
	if ((subs[k].operands < 0 && nops != 0) || (subs[k].operands >= 0 && nops != subs[k].operands + 1)) {
		status = usage_error(x, "deployments %s takes %s", subs[k].name,
				     subs[k].operands < 0 ? "no operands" : subs[k].usage);
		goto out;
	}
	if (nops > 0 && parse_run_id(x, ops[0], &id) != 0)
		goto out;
	switch (k) {
	case 0:
		path = xstrdup("/deployments");
		break;
	case 1:
		path = xasprintf("/deployments/%lld", (long long)id);
		break;
	case 2: {
		int64_t pct;
		if (parse_int64(ops[2], &pct) < 0) {
			status = usage_error(x, "PERCENT must be an integer from 0 to 100, not '%s'", ops[2]);
			goto out;
		}
		body = json_pack("{s:{s:I}}", "traffic", ops[1], (json_int_t)pct);
		break;
	}
	case 3:
		body = json_pack("{s:s}", "extend", ops[1]);
		break;
	case 4:
	case 5:
	case 7:
		body = json_pack("{s:s}", "action", subs[k].name);
		break;
	case 6:
		body = json_pack("{s:s, s:s}", "action", "promote", "version", ops[1]);
		break;
	case 11:
		body = json_pack("{s:s, s:s}", "action", "retire", "version", ops[1]);
		break;
	case 8:
		if (file_read(&text, NULL, ops[1]) < 0 || (body = json_loads(text, 0, NULL)) == NULL) {
			fprintf(stderr, "ferry deployments predict: %s: not a readable JSON request\n", ops[1]);
			status = FX_USAGE;
			goto out;
		}
		method = "POST";
		path = xasprintf("/deployments/%lld/predict", (long long)id);
		break;
	case 10: {
		int64_t n;
		if (parse_int64(ops[2], &n) < 0) {
			status = usage_error(x, "REPLICAS must be an integer from 1 to 5, not '%s'", ops[2]);
			goto out;
		}
		body = json_pack("{s:{s:I}}", "replicas", ops[1], (json_int_t)n);
		break;
	}
	default:
		method = "DELETE";
		path = xasprintf("/deployments/%lld", (long long)id);
	}
	if (path == NULL) {
		method = "PATCH";
		path = xasprintf("/deployments/%lld", (long long)id);
	}
	if ((status = open_client(&c)) != FX_OK)
		goto out;
	rc = client_request(&answer, c, method, path, body);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	status = FX_OK;
	if (json || k == 8 || k == 9) {
		print_json(answer);
	} else if (k == 0) {
		size_t i;
		json_t *d;
		if (json_array_size(answer) == 0)
			printf("no deployments\n");
		json_array_foreach(answer, i, d)
			print_one(d);
	} else {
		print_one(answer);
		if (k == 1)
			print_details(answer);
	}
out:
	free(path), free(text);
	json_decref(answer);
	json_decref(body);
	client_free(c);
	return status;
}

/*
 * queues — `ferry queues`: the queues ready steps wait in (api/api_queues.c).
 * With no subcommand (or list) one line per queue: its priority, quotas,
 * running attempts, waiting steps and GPUs held. show NAME adds its running
 * attempts (host, GPUs) and its waiting steps in the claim's order, each
 * with what it asks for and why it waits. create, set and delete change
 * them (admin). Each subcommand is one request; -o json prints the answer.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

enum { Q_LIST, Q_SHOW, Q_CREATE, Q_SET, Q_DELETE };
enum { OPT_PRIORITY = 700, OPT_MAX_RUNNING, OPT_MAX_GPUS, OPT_MAX_CPUS, OPT_DESCRIPTION, OPT_NO_MAX_RUNNING,
       OPT_NO_MAX_GPUS, OPT_NO_MAX_CPUS, OPT_QLIMIT };

static const char *const subs[] = {[Q_LIST] = "list", [Q_SHOW] = "show", [Q_CREATE] = "create", [Q_SET] = "set",
				   [Q_DELETE] = "delete"};

/* "running<=1 gpus<=2 cpus<=8", or "-" without quotas; buf of n bytes. */
static void quotas_text(char *buf, size_t n, const json_t *q)
{
	const json_t *r = json_object_get(q, "max_running"), *g = json_object_get(q, "max_gpus");
	const json_t *c = json_object_get(q, "max_cpus");
	size_t len = 0;

	buf[0] = '\0';
	if (json_is_integer(r))
		len += (size_t)snprintf(buf + len, n - len, "running<=%lld", (long long)json_integer_value(r));
	if (json_is_integer(g) && len < n)
		len += (size_t)snprintf(buf + len, n - len, "%sgpus<=%lld", len ? " " : "", (long long)json_integer_value(g));
	if (json_is_number(c) && len < n)
		snprintf(buf + len, n - len, "%scpus<=%g", len ? " " : "", json_number_value(c));
	if (buf[0] == '\0')
		snprintf(buf, n, "-");
}

/* One line per queue of list (an array of GET /queues' objects). */
static void print_queues(const json_t *list)
{
	static const char *const head[] = {"NAME", "PRIORITY", "QUOTAS", "RUNNING", "WAITING", "GPUS-HELD", "DESCRIPTION"};
	const json_t *q;
	struct table t;
	size_t i;

	table_init(&t, 7);
	table_add(&t, head);
	json_array_foreach(list, i, q) {
		char prio[16], quotas[96], run[24], wait[48], gpus[24];
		snprintf(prio, sizeof(prio), "%lld", (long long)jint(q, "priority", 0));
		quotas_text(quotas, sizeof(quotas), q);
		snprintf(run, sizeof(run), "%lld", (long long)jint(q, "running", 0));
		if (jint(q, "retrying", 0) > 0)
			snprintf(wait, sizeof(wait), "%lld (%lld retrying)", (long long)jint(q, "waiting", 0),
				 (long long)jint(q, "retrying", 0));
		else
			snprintf(wait, sizeof(wait), "%lld", (long long)jint(q, "waiting", 0));
		snprintf(gpus, sizeof(gpus), "%lld", (long long)jint(q, "gpus_held", 0));
		const char *row[] = {jstr(q, "name", "?"), prio, quotas, run, wait, gpus, jstr(q, "description", "")};
		table_add(&t, row);
	}
	table_print(&t, stdout, "");
	table_dispose(&t);
}

/* "1 GPU, 2 CPUs, 512 MiB" of a request {cpus, memory_mb, gpus}; "-" for nothing. */
static void needs_text(char *buf, size_t n, const json_t *req)
{
	json_int_t g = jint(req, "gpus", 0), m = jint(req, "memory_mb", 0);
	double c = json_number_value(json_object_get(req, "cpus"));
	size_t len = 0;

	buf[0] = '\0';
	if (g > 0)
		len += (size_t)snprintf(buf, n, "%lld GPU%s", (long long)g, g == 1 ? "" : "s");
	if (c > 0 && len < n)
		len += (size_t)snprintf(buf + len, n - len, "%s%g CPU%s", len ? ", " : "", c, c == 1 ? "" : "s");
	if (m > 0 && len < n)
		snprintf(buf + len, n - len, "%s%lld MiB", len ? ", " : "", (long long)m);
	if (buf[0] == '\0')
		snprintf(buf, n, "-");
}

/* The local time of o[key] (HH:MM:SS), else as the answer has it. */
static void since_text(char *buf, size_t n, const json_t *o, const char *key)
{
	int64_t ms;

	if (jtime(o, key, &ms))
		fmt_local(buf, n, ms, false);
	else
		snprintf(buf, n, "%s", jstr(o, key, "-"));
}

/* GET /queues/{name}: the queue's line, its running attempts, its waiting steps with why. */
static void print_detail(const json_t *d)
{
	static const char *const rhead[] = {"RUN/STEP", "HOST", "GPUS", "CPUS", "SINCE"};
	static const char *const whead[] = {"#", "RUN/STEP", "NEEDS", "SINCE", "WHY"};
	const json_t *q = json_object_get(d, "queue"), *running = json_object_get(d, "running");
	const json_t *waiting = json_object_get(d, "waiting"), *e, *g;
	json_t *one = json_array();
	struct table t;
	size_t i, k;

	json_array_append(one, (json_t *)q);
	print_queues(one);
	json_decref(one);
	if (json_array_size(running) == 0) {
		printf("\nRunning: none\n");
	} else {
		printf("\nRunning:\n");
		table_init(&t, 5);
		table_add(&t, rhead);
		json_array_foreach(running, i, e) {
			char who[160], gpus[128] = "", cpus[24], since[40];
			size_t len = 0;
			snprintf(who, sizeof(who), "%lld/%s", (long long)jint(e, "run", 0), jstr(e, "step", "?"));
			json_array_foreach(json_object_get(e, "gpu_ids"), k, g)
				if (len < sizeof(gpus))
					len += (size_t)snprintf(gpus + len, sizeof(gpus) - len, "%s%s", len ? "," : "",
								json_string_value(g) ? json_string_value(g) : "?");
			snprintf(cpus, sizeof(cpus), "%g", json_number_value(json_object_get(e, "cpus")));
			since_text(since, sizeof(since), e, "since");
			const char *row[] = {who, jstr(e, "host", "?"), gpus[0] ? gpus : "-", cpus, since};
			table_add(&t, row);
		}
		table_print(&t, stdout, "  ");
		table_dispose(&t);
	}
	if (json_array_size(waiting) == 0) {
		printf("\nWaiting: none\n");
		return;
	}
	printf("\nWaiting, in the order the next claims take them:\n");
	table_init(&t, 5);
	table_add(&t, whead);
	json_array_foreach(waiting, i, e) {
		char pos[16], who[160], needs[64], since[40];
		snprintf(pos, sizeof(pos), "%lld", (long long)jint(e, "position", 0));
		snprintf(who, sizeof(who), "%lld/%s", (long long)jint(e, "run", 0), jstr(e, "step", "?"));
		needs_text(needs, sizeof(needs), json_object_get(e, "request"));
		since_text(since, sizeof(since), e, "since");
		const char *row[] = {pos, who, needs, since, jstr(e, "why", "")};
		table_add(&t, row);
	}
	table_print(&t, stdout, "  ");
	table_dispose(&t);
	if ((json_int_t)json_array_size(waiting) < jint(q, "waiting", 0))
		printf("  (the first %zu of %lld; --limit N shows more)\n", json_array_size(waiting),
		       (long long)jint(q, "waiting", 0));
}

/* A whole number, or "none" (null: no quota) when nullable; NULL (a usage error) otherwise. */
static json_t *int_value(const char *s, int nullable)
{
	int64_t v;

	if (nullable && strcmp(s, "none") == 0)
		return json_null();
	if (parse_int64(s, &v) < 0)
		return NULL;
	return json_integer((json_int_t)v);
}

/* A number of CPUs, or "none"; NULL when it is neither. */
static json_t *cpus_value(const char *s)
{
	char *end = NULL;
	double v;

	if (strcmp(s, "none") == 0)
		return json_null();
	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !isfinite(v))
		return NULL;
	return json_real(v);
}

int cmd_queues(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'},
		{"priority", required_argument, NULL, OPT_PRIORITY},
		{"max-running", required_argument, NULL, OPT_MAX_RUNNING},
		{"max-gpus", required_argument, NULL, OPT_MAX_GPUS},
		{"max-cpus", required_argument, NULL, OPT_MAX_CPUS},
		{"description", required_argument, NULL, OPT_DESCRIPTION},
		{"no-max-running", no_argument, NULL, OPT_NO_MAX_RUNNING},
		{"no-max-gpus", no_argument, NULL, OPT_NO_MAX_GPUS},
		{"no-max-cpus", no_argument, NULL, OPT_NO_MAX_CPUS},
		{"limit", required_argument, NULL, OPT_QLIMIT},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	ferry_client *c = NULL;
	json_t *answer = NULL, *body = json_object(), *v;
	char *path = NULL, *name_esc = NULL;
	const char *method = "GET", *name = NULL, *field;
	bool json = false;
	int ch, li, rc, status = FX_USAGE, k = Q_LIST, sub_args = 0, nops;
	int64_t limit = 0;

	if (argc >= 2 && argv[1][0] != '-') {
		for (k = 0; k < (int)(sizeof(subs) / sizeof(subs[0])) && strcmp(subs[k], argv[1]) != 0; k++)
			;
		if (k == (int)(sizeof(subs) / sizeof(subs[0]))) {
			status = usage_error(x, "unknown subcommand '%s' (list, show, create, set or delete)", argv[1]);
			goto out;
		}
		sub_args = 1;
	}
	optind = 0;
	while ((li = -1, ch = getopt_long(argc - sub_args, argv + sub_args, ":o:h", longopts, &li)) != -1) {
		field = NULL;
		v = NULL;
		switch (ch) {
		case 'o':
			if (parse_output(x, optarg, &json) != 0)
				goto out;
			continue;
		case 'h':
			status = print_help(x->cmd);
			goto out;
		case OPT_QLIMIT:
			if (k != Q_SHOW || parse_int64(optarg, &limit) < 0 || limit < 1) {
				status = usage_error(x, k != Q_SHOW ? "--limit is for queues show"
								    : "--limit takes a number from 1 to 500, not '%s'", optarg);
				goto out;
			}
			continue;
		case OPT_PRIORITY:
			field = "priority";
			v = int_value(optarg, 0);
			break;
		case OPT_MAX_RUNNING:
			field = "max_running";
			v = int_value(optarg, 1);
			break;
		case OPT_MAX_GPUS:
			field = "max_gpus";
			v = int_value(optarg, 1);
			break;
		case OPT_MAX_CPUS:
			field = "max_cpus";
			v = cpus_value(optarg);
			break;
		case OPT_DESCRIPTION:
			field = "description";
			v = json_string(optarg);
			break;
		case OPT_NO_MAX_RUNNING:
			field = "max_running";
			v = json_null();
			break;
		case OPT_NO_MAX_GPUS:
			field = "max_gpus";
			v = json_null();
			break;
		case OPT_NO_MAX_CPUS:
			field = "max_cpus";
			v = json_null();
			break;
		default:
			status = option_error(x, ch, argv + sub_args);
			goto out;
		}
		if (k != Q_CREATE && k != Q_SET) {
			json_decref(v);
			status = usage_error(x, "--%s is for queues create and set", longopts[li].name);
			goto out;
		}
		if (v == NULL) {
			status = usage_error(x, "--%s takes %s, not '%s'", longopts[li].name,
					     strcmp(field, "max_cpus") == 0 ? "a number of CPUs (such as 2.5) or none"
					     : strcmp(field, "priority") == 0 ? "a whole number from -1000 to 1000"
									       : "a whole number or none",
					     optarg ? optarg : "");
			goto out;
		}
		json_object_set_new(body, field, v);
	}
	nops = argc - sub_args - optind;
	if ((k == Q_LIST && nops != 0) || (k != Q_LIST && nops != 1)) {
		status = usage_error(x, k == Q_LIST ? "queues takes no operands (show NAME for one)"
						    : "queues %s takes NAME", subs[k]);
		goto out;
	}
	if (k != Q_LIST) {
		name = argv[sub_args + optind];
		name_esc = client_escape(name);
	}
	if (k == Q_SET && json_object_size(body) == 0) {
		status = usage_error(x, "queues set NAME needs what to change (--priority, --max-running, "
				     "--max-gpus, --max-cpus, --description)");
		goto out;
	}
	switch (k) {
	case Q_LIST:
		path = xstrdup("/queues");
		break;
	case Q_SHOW:
		path = limit > 0 ? xasprintf("/queues/%s?limit=%lld", name_esc, (long long)limit)
				 : xasprintf("/queues/%s", name_esc);
		break;
	case Q_CREATE:
		method = "POST";
		path = xstrdup("/queues");
		json_object_set_new(body, "name", json_string(name));
		break;
	case Q_SET:
		method = "PATCH";
		path = xasprintf("/queues/%s", name_esc);
		break;
	default:
		method = "DELETE";
		path = xasprintf("/queues/%s", name_esc);
	}
	if ((status = open_client(&c)) != FX_OK)
		goto out;
	rc = client_request(&answer, c, method, path, k == Q_CREATE || k == Q_SET ? body : NULL);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	status = FX_OK;
	if (json) {
		print_json(answer);
	} else if (k == Q_LIST) {
		print_queues(json_object_get(answer, "queues"));
	} else if (k == Q_SHOW) {
		print_detail(answer);
	} else if (k == Q_DELETE) {
		printf("queue %s deleted\n", name);
	} else {
		json_t *one = json_array();
		printf("queue %s %s\n", name, k == Q_CREATE ? "created" : "changed");
		json_array_append(one, answer);
		print_queues(one);
		json_decref(one);
	}
out:
	free(path), free(name_esc);
	json_decref(answer), json_decref(body);
	client_free(c);
	return status;
}

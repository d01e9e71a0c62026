/*
 * ferry hosts — the fleet as GET /api/v1/hosts reports it: one line per
 * host (its state, when it was last heard from, what it offers, its
 * running jobs and replicas, its labels); -o json prints the answer as is.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void print_hosts(const json_t *answer)
{
	static const char *const head[] = {"HOST", "STATE", "LAST SEEN", "CPUS", "MEMORY", "GPUS", "JOBS",
					   "REPLICAS", "ADDRESS", "LABELS"};
	const json_t *hosts = json_object_get(answer, "hosts"), *h;
	struct table t;
	size_t i;

	if (json_array_size(hosts) == 0) {
		fprintf(stderr, "no hosts: no daemon has written its row yet\n");
		return;
	}
	table_init(&t, 10);
	table_add(&t, head);
	json_array_foreach(hosts, i, h) {
		char cpus[24] = "-", mem[32] = "-", gpus[24], jobs[24], reps[24], *labels = xstrdup("");
		const json_t *c = json_object_get(h, "cpus"), *m = json_object_get(h, "memory_bytes"), *v;
		const char *k;
		if (json_is_number(c))
			snprintf(cpus, sizeof(cpus), "%g", json_number_value(c));
		if (json_is_integer(m))
			snprintf(mem, sizeof(mem), "%.1f GiB", (double)json_integer_value(m) / (1024.0 * 1024 * 1024));
		snprintf(gpus, sizeof(gpus), "%zu", json_array_size(json_object_get(h, "gpus")));
		snprintf(jobs, sizeof(jobs), "%lld", (long long)jint(h, "running_jobs", 0));
		snprintf(reps, sizeof(reps), "%lld", (long long)jint(h, "replicas", 0));
		json_object_foreach((json_t *)json_object_get(h, "labels"), k, v) {
			char *l = xasprintf("%s%s%s=%s", labels, labels[0] ? "," : "", k, json_string_value(v));
			free(labels);
			labels = l;
		}
		const char *row[] = {jstr(h, "name", "?"), jstr(h, "state", "?"), jstr(h, "last_seen", "?"), cpus, mem,
				     gpus, jobs, reps, jstr(h, "address", "-"), labels[0] ? labels : "-"};
		table_add(&t, row);
		free(labels);
	}
	table_print(&t, stdout, "");
	table_dispose(&t);
}

int cmd_hosts(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	ferry_client *c = NULL;
	json_t *answer = NULL;
	bool json = false;
	int ch, rc, status = FX_USAGE;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
		switch (ch) {
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
	if ((status = open_client(&c)) != FX_OK)
		goto out;
	rc = client_request(&answer, c, "GET", "/hosts", NULL);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	if (json)
		print_json(answer);
	else
		print_hosts(answer);
	status = FX_OK;
out:
	json_decref(answer);
	client_free(c);
	return status;
}

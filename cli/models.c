/*
 * models — `ferry models`: the model registry from the command line.
 *   ferry models list                        models, latest version, aliases
 *   ferry models versions NAME               versions newest first, with metrics
 *   ferry models get NAME VERSION|ALIAS      one version: artifact, metrics, lineage
 *   ferry models alias NAME ALIAS VERSION    point ALIAS at VERSION (recorded)
 * Every read takes -o json (the server's answer).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* "accuracy=0.9822 f1=0.9819" for the classification and regression metrics, else all. */
static char *metrics_line(const json_t *m)
{
	static const char *const known[] = {"accuracy", "precision", "recall", "f1", "mae", "mse", "rmse"};
	size_t len = 0, shown = 0;
	char *buf = NULL;
	FILE *f = open_memstream(&buf, &len);
	const char *key;
	json_t *v;

	if (f == NULL)
		abort();
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (json_is_number(v = json_object_get(m, known[i])))
			fprintf(f, "%s%s=%.4g", shown++ ? " " : "", known[i], json_number_value(v));
	if (shown == 0)
		json_object_foreach((json_t *)m, key, v)
			if (json_is_number(v))
				fprintf(f, "%s%s=%.4g", shown++ ? " " : "", key, json_number_value(v));
	fclose(f);
	return buf;
}

/* "production, canary" from an array of names. */
static char *names_line(const json_t *arr)
{
	size_t len = 0, i;
	char *buf = NULL;
	FILE *f = open_memstream(&buf, &len);
	json_t *v;

	if (f == NULL)
		abort();
	json_array_foreach(arr, i, v)
		fprintf(f, "%s%s", i ? ", " : "", json_string_value(v));
	fclose(f);
	return buf;
}

static void print_models(const struct ctx *x, const json_t *answer)
{
	const json_t *models = json_object_get(answer, "models");
	struct table t;
	json_t *m;
	size_t i;

	if (json_array_size(models) == 0) {
		fprintf(stderr, "no models yet: a workflow's register step creates one\n");
		return;
	}
	table_init(&t, 4);
	table_add(&t, (const char *const[]){"MODEL", "VERSIONS", "LATEST", "ALIASES"});
	json_array_foreach(models, i, m) {
		const json_t *aliases = json_object_get(m, "aliases");
		char n[32], *al = NULL;
		size_t alen = 0;
		FILE *f = open_memstream(&al, &alen);
		const char *key;
		json_t *v;
		int k = 0;

		if (f == NULL)
			abort();
		json_object_foreach((json_t *)aliases, key, v)
			fprintf(f, "%s%s→%s", k++ ? ", " : "", key, json_string_value(v));
		fclose(f);
		snprintf(n, sizeof(n), "%lld", (long long)jint(m, "versions", 0));
		table_add(&t, (const char *const[]){jstr(m, "name", "?"), n, jstr(m, "latest", dash(x->cli)),
						     alen ? al : dash(x->cli)});
		free(al);
	}
	table_print(&t, stdout, "");
	table_dispose(&t);
}

static void print_versions(const struct ctx *x, const json_t *answer)
{
	const json_t *versions = json_object_get(answer, "versions");
	struct table t;
	json_t *v;
	size_t i;

	table_init(&t, 6);
	table_add(&t, (const char *const[]){"VERSION", "ALIASES", "CREATED", "RUN", "SHA256", "METRICS"});
	json_array_foreach(versions, i, v) {
		const json_t *lineage = json_object_get(v, "lineage"), *art = json_object_get(v, "artifact");
		char created[64] = "", run[32], sha[16];
		char *al = names_line(json_object_get(v, "aliases"));
		char *mt = metrics_line(json_object_get(v, "metrics"));
		int64_t ms;

		if (jtime(v, "created_at", &ms))
			fmt_local(created, sizeof(created), ms, true);
		if (json_is_integer(json_object_get(lineage, "run")))
			snprintf(run, sizeof(run), "%lld", (long long)jint(lineage, "run", 0));
		else
			snprintf(run, sizeof(run), "%s", dash(x->cli));
		snprintf(sha, sizeof(sha), "%.12s", jstr(art, "sha256", ""));
		if (json_is_true(json_object_get(v, "dev")))
			snprintf(run + strlen(run), sizeof(run) - strlen(run), " (dev)");
		table_add(&t, (const char *const[]){jstr(v, "version", "?"), *al ? al : dash(x->cli), created, run,
						     sha, *mt ? mt : dash(x->cli)});
		free(al), free(mt);
	}
	table_print(&t, stdout, "");
	table_dispose(&t);
}

static void print_version(const struct ctx *x, const json_t *v)
{
	const json_t *art = json_object_get(v, "artifact"), *lin = json_object_get(v, "lineage");
	const json_t *metrics = json_object_get(v, "metrics"), *params = json_object_get(v, "params");
	char created[64] = "", *al = names_line(json_object_get(v, "aliases"));
	const char *key;
	json_t *val;
	int64_t ms;

	if (jtime(v, "created_at", &ms))
		fmt_local(created, sizeof(created), ms, true);
	printf("Model:     %s\n", jstr(v, "model", "?"));
	printf("Version:   %s%s\n", jstr(v, "version", "?"),
	       json_is_true(json_object_get(v, "dev")) ? " (dev: registered by a dev run; never takes an alias)" : "");
	printf("Aliases:   %s\n", *al ? al : dash(x->cli));
	printf("Created:   %s by %s\n", created, jstr(v, "actor", "?"));
	printf("Artifact:  %s (%s, %lld bytes)\n", jstr(art, "name", "?"), jstr(art, "kind", "?"),
	       (long long)jint(art, "bytes", 0));
	printf("  sha256:  %s\n", jstr(art, "sha256", "?"));
	printf("  stored:  %s\n", jstr(art, "path", "?"));
	printf("Lineage:\n");
	if (json_is_integer(json_object_get(lin, "run")))
		printf("  run:      %lld (step %s)\n", (long long)jint(lin, "run", 0), jstr(lin, "step", "?"));
	printf("  workflow: %s (%.12s)\n", jstr(lin, "workflow", dash(x->cli)), jstr(lin, "workflow_hash", ""));
	printf("  data:     %s\n", jstr(lin, "data_fingerprint", dash(x->cli)));
	if (json_object_size(params) > 0) {
		printf("Params:\n");
		json_object_foreach((json_t *)params, key, val) {
			char *s = json_is_string(val) ? xstrdup(json_string_value(val))
						      : json_dumps(val, JSON_ENCODE_ANY | JSON_COMPACT);
			printf("  %s=%s\n", key, s);
			free(s);
		}
	}
	if (json_object_size(metrics) > 0) {
		printf("Metrics:\n");
		json_object_foreach((json_t *)metrics, key, val)
			if (json_is_number(val))
				printf("  %-14s %.6g\n", key, json_number_value(val));
	}
	free(al);
}

int cmd_models(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	static const char *const subs[] = {"list", "versions", "get", "alias"};
	static const int operands[] = {0, 1, 2, 3};
	ferry_client *c = NULL;
	json_t *answer = NULL, *body = NULL;
	char *path = NULL, *e1 = NULL, *e2 = NULL;
	const char *sub;
	bool json = false;
	int ch, rc, status = FX_USAGE, k, nops;
	char **ops;

	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		if (argc < 2)
			return usage_error(x, "which one: list, versions, get or alias?");
		return print_help(x->cmd);
	}
	sub = argv[1];
	for (k = 0; k < 4 && strcmp(sub, subs[k]) != 0; k++)
		;
	if (k == 4)
		return usage_error(x, "unknown subcommand '%s' (list, versions, get or alias)", sub);
	optind = 0;
	while ((ch = getopt_long(argc - 1, argv + 1, ":o:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'o':
			if (parse_output(x, optarg, &json) != 0)
				goto out;
			break;
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
	if (nops != operands[k]) {
		static const char *const want[] = {"no operands", "NAME", "NAME VERSION|ALIAS",
						   "NAME ALIAS VERSION"};
		status = usage_error(x, "models %s takes %s", sub, want[k]);
		goto out;
	}
	if (nops > 0)
		e1 = client_escape(ops[0]);
	if (nops > 1)
		e2 = client_escape(ops[1]);
	if ((status = open_client(&c)) != FX_OK)
		goto out;
	switch (k) {
	case 0:
		path = xstrdup("/models");
		break;
	case 1:
		path = xasprintf("/models/%s/versions", e1);
		break;
	case 2:
		path = xasprintf("/models/%s/versions/%s", e1, e2);
		break;
	default:
		path = xasprintf("/models/%s/aliases/%s", e1, e2);
		body = json_pack("{s:s}", "version", ops[2]);
	}
	rc = client_request(&answer, c, body ? "PUT" : "GET", path, body);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	status = FX_OK;
	if (json)
		print_json(answer);
	else if (k == 0)
		print_models(x, answer);
	else if (k == 1)
		print_versions(x, answer);
	else if (k == 2)
		print_version(x, answer);
	else
		printf("%s %s: %s now points at %s\n", ops[0], ops[1], ops[1], jstr(answer, "version", "?"));
out:
	free(path), free(e1), free(e2);
	json_decref(answer);
	json_decref(body);
	client_free(c);
	return status;
}

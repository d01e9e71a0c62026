/*
 * workflow — `ferry workflow`: registered workflows from the command line.
 *   ferry workflow register FILE   store FILE's version with the daemon, with
 *                                  FILE's directory as where its runs run
 *   ferry workflow list            registered versions, newest first
 * A registered workflow is then run by name (ferry submit --workflow NAME,
 * or POST /runs {"workflow": NAME}) in the directory it was registered
 * from, so `python3 train.py` finds train.py as it does for ferry submit
 * FILE. Both take -o json (the server's answer).
 */
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/*
 * Builds the POST /workflows body for path: its text, its file name and
 * its directory, absolute. Returns FX_OK and *out, or the exit status
 * after printing why.
 */
static int register_body(json_t **out, const char *path)
{
	char *text = NULL, *dir = NULL, *copy = NULL;
	size_t len = 0;
	json_t *yaml;
	int status = FX_USAGE;

	if (file_read(&text, &len, path) < 0) {
		fprintf(stderr, "ferry: %s\n", ferry_error_last());
		goto out;
	}
	if ((yaml = json_stringn(text, len)) == NULL) {
		fprintf(stderr, "ferry: %s is not valid UTF-8 text\n", path);
		goto out;
	}
	/* the daemon runs the workflow's commands here: it must be the file's real directory */
	if ((dir = abs_dir_of(path)) == NULL) {
		fprintf(stderr, "ferry: cannot resolve the directory of %s\n", path);
		json_decref(yaml);
		status = FX_FAIL;
		goto out;
	}
	copy = xstrdup(path);
	*out = json_pack("{s:o, s:s, s:s}", "yaml", yaml, "filename", basename(copy), "workdir", dir);
	if (*out == NULL) {
		fprintf(stderr, "ferry: cannot encode the request for %s\n", path);
		status = FX_FAIL;
		goto out;
	}
	status = FX_OK;
out:
	free(text), free(dir), free(copy);
	return status;
}

static void print_registered(const json_t *a)
{
	printf("%s %.12s %s (%s)\n", jstr(a, "name", "?"), jstr(a, "hash", "?"),
	       jstr(a, "workdir", "-"),
	       json_is_true(json_object_get(a, "created")) ? "registered" : "registered again; now the newest");
}

static void print_workflows(const json_t *a)
{
	static const char *const head[] = {"NAME", "HASH", "STEPS", "WORKDIR", "REGISTERED"};
	const json_t *wfs = json_object_get(a, "workflows"), *w;
	struct table t;
	size_t i;

	if (json_array_size(wfs) == 0) {
		fprintf(stderr, "no registered workflows\n");
		return;
	}
	table_init(&t, 5);
	table_add(&t, head);
	json_array_foreach(wfs, i, w) {
		char hash[16], steps[24];
		snprintf(hash, sizeof(hash), "%.12s", jstr(w, "hash", "?"));
		snprintf(steps, sizeof(steps), "%lld", (long long)jint(w, "steps", 0));
		const char *row[] = {jstr(w, "name", "?"), hash, steps, jstr(w, "workdir", "-"),
				     jstr(w, "created_at", "?")};
		table_add(&t, row);
	}
	table_print(&t, stdout, "");
	table_dispose(&t);
}

int cmd_workflow(const struct ctx *x, int argc, char **argv)
{
	ferry_client *c = NULL;
	json_t *answer = NULL, *body = NULL;
	const char *sub;
	bool json = false, reg;
	int rc, status = FX_USAGE, nops;

	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		if (argc < 2)
			return usage_error(x, "which one: register or list?");
		return print_help(x->cmd);
	}
	sub = argv[1];
	if (strcmp(sub, "register") != 0 && strcmp(sub, "list") != 0)
		return usage_error(x, "unknown subcommand '%s' (register or list)", sub);
	reg = strcmp(sub, "register") == 0;
	if ((rc = parse_output_args(x, argc - 1, argv + 1, &json)) >= 0)
		return rc;
	nops = argc - 1 - optind;
	if (nops != (reg ? 1 : 0)) {
		status = usage_error(x, "workflow %s takes %s", sub, reg ? "one FILE" : "no operands");
		goto out;
	}
	if (reg && (status = register_body(&body, argv[1 + optind])) != FX_OK)
		goto out;
	if ((status = open_client(&c)) != FX_OK)
		goto out;
	rc = client_request(&answer, c, reg ? "POST" : "GET", "/workflows", body);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	status = FX_OK;
	if (json)
		print_json(answer);
	else if (reg)
		print_registered(answer);
	else
		print_workflows(answer);
out:
	json_decref(answer);
	json_decref(body);
	client_free(c);
	return status;
}

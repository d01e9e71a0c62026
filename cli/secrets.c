/*
 * secrets — `ferry secrets`: the secrets steps name under `secrets:`
 * (api/api_secrets.c). list shows names and who set each; set reads a
 * value from stdin (without echo on a terminal; one trailing newline
 * dropped) and sends it once; rm removes one. No subcommand prints a value.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "lib/seal.h"
#include "lib/util.h"

int cmd_secrets(const struct ctx *x, int argc, char **argv)
{
	ferry_client *c = NULL;
	json_t *answer = NULL, *body = NULL;
	char *path = NULL, *value = NULL;
	size_t n = 0;
	bool json = false;
	int rc, status = FX_USAGE, list, set;

	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		if (argc < 2)
			return usage_error(x, "which one: list, set or rm?");
		return print_help(x->cmd);
	}
	list = strcmp(argv[1], "list") == 0;
	set = strcmp(argv[1], "set") == 0;
	if (!list && !set && strcmp(argv[1], "rm") != 0)
		return usage_error(x, "unknown subcommand '%s'", argv[1]);
	if ((rc = parse_output_args(x, argc - 1, argv + 1, &json)) >= 0)
		return rc;
	if (argc - 1 - optind != (list ? 0 : 1))
		return usage_error(x, "secrets %s takes %s", argv[1], list ? "no operands" : "NAME");
	if (!list) {
		const char *name = argv[1 + optind];
		if (name[0] == '\0' || strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") !=
						strlen(name))
			return usage_error(x, "a secret's name is an environment name: letters, digits and _");
		path = xasprintf("/secrets/%s", name);
		if (set) {
			if (seal_read_stdin(&value, &n, name) < 0) {
				fprintf(stderr, "ferry: secrets set: %s\n", ferry_error_last());
				status = FX_FAIL;
				goto out;
			}
			body = json_object();
			json_object_set_new(body, "value", json_stringn(value, n));
		}
	}
	if ((status = open_client(&c)) != FX_OK)
		goto out;
	rc = client_request(&answer, c, list ? "GET" : set ? "PUT" : "DELETE", list ? "/secrets" : path, body);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	status = FX_OK;
	if (json) {
		print_json(answer);
	} else if (list) {
		size_t i;
		json_t *s, *all = json_object_get(answer, "secrets");
		if (json_array_size(all) == 0)
			printf("no secrets\n");
		else
			printf("%-32s %-24s %s\n", "NAME", "UPDATED BY", "UPDATED AT");
		json_array_foreach(all, i, s)
			printf("%-32s %-24s %s\n", jstr(s, "name", "?"), jstr(s, "updated_by", "?"),
			       jstr(s, "updated_at", "?"));
	} else {
		printf("secret %s %s\n", argv[1 + optind], set ? "set" : "removed");
	}
out:
	if (value) {
		explicit_bzero(value, n);
		free(value);
	}
	if (body) {
		json_t *v = json_object_get(body, "value");
		if (json_is_string(v))
			explicit_bzero((char *)json_string_value(v), json_string_length(v));
	}
	free(path);
	json_decref(answer), json_decref(body);
	client_free(c);
	return status;
}

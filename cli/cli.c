/*
 * cli — what every verb of the ferry command shares: usage errors that show
 * the synopsis, --help, -o json|text, the RUN operand, reporting a failed
 * request (with a hint about the token on 401), opening the client.
 */
#include "cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lib/util.h"

/* ---- errors and usage ---- */

static void print_synopsis(const struct command *cmd, FILE *f)
{
	fprintf(f, "usage: %s\n", cmd->synopsis);
}


int usage_error(const struct ctx *x, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "ferry %s: ", x->cmd->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	print_synopsis(x->cmd, stderr);
	fprintf(stderr, "Run 'ferry %s --help' for more.\n", x->cmd->name);
	return FX_USAGE;
}

int print_help(const struct command *cmd)
{
	print_synopsis(cmd, stdout);
	fprintf(stdout, "\n%s\n\n%s", cmd->summary, cmd->help);
	return FX_OK;
}

/* Reports a getopt failure (optstring starts with ':'). */
int option_error(const struct ctx *x, int ch, char **argv)
{
	const char *arg = argv[optind - 1];

	if (ch == ':')
		return usage_error(x, "option '%s' needs a value", arg);
	if (optopt != 0 && strncmp(arg, "--", 2) != 0)
		return usage_error(x, "unknown option '-%c'", optopt);
	return usage_error(x, "unknown option '%.*s'", (int)strcspn(arg, "="), arg);
}

int parse_output(const struct ctx *x, const char *arg, bool *json)
{
	if (strcmp(arg, "json") == 0) {
		*json = true;
		return 0;
	}
	if (strcmp(arg, "text") == 0) {
		*json = false;
		return 0;
	}
	return usage_error(x, "unknown output format '%s' (use json or text)", arg);
}

/* Accepts "12" (a positive integer); anything else is a usage error. */
int parse_run_id(const struct ctx *x, const char *s, int64_t *id)
{
	if (parse_int64(s, id) < 0 || *id <= 0)
		return usage_error(x, "invalid run id '%s' (expected a number such as 12)", s);
	return 0;
}

/* The single RUN operand left after the options: -1 to go on, else an exit status. */
int parse_run_operand(const struct ctx *x, int argc, char **argv, int64_t *id)
{
	if (argc - optind != 1)
		return usage_error(x, argc == optind ? "missing RUN" : "expected one RUN");
	if (parse_run_id(x, argv[optind], id) != 0)
		return FX_USAGE;
	return -1;
}

int parse_output_args(const struct ctx *x, int argc, char **argv, bool *json)
{
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	static const struct option longopts_help_only[] = {
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *optstring = json != NULL ? ":o:h" : ":h";
	int ch;

	optind = 0;
	while ((ch = getopt_long(argc, argv, optstring, json != NULL ? longopts : longopts_help_only,
				 NULL)) != -1) {
		switch (ch) {
		case 'o':
			if (parse_output(x, optarg, json) != 0)
				return FX_USAGE;
			break;
		case 'h':
			return print_help(x->cmd);
		default:
			return option_error(x, ch, argv);
		}
	}
	return -1;
}

/*
 * Parses the arguments of a verb that takes "RUN" plus -o FORMAT when json is
 * not NULL. Returns -1 to go on, else the exit status to return now.
 */
int parse_run_args(const struct ctx *x, int argc, char **argv, int64_t *id, bool *json)
{
	int status = parse_output_args(x, argc, argv, json);

	return status >= 0 ? status : parse_run_operand(x, argc, argv, id);
}

/* Prints the failure of the last request; returns the exit status for it. */
int report_request_error(const ferry_client *c, int rc)
{
	const json_t *details = client_last_details(c), *d;
	size_t i;

	fprintf(stderr, "ferry: %s\n", ferry_error_last());
	json_array_foreach(details, i, d)
		if (json_is_string(d))
			fprintf(stderr, "%s\n", json_string_value(d));
	if (client_last_status(c) == 401) {
		const char *why = NULL, *src = client_token_source(c, &why);
		if (src != NULL)
			fprintf(stderr, "ferry: the API token was read from %s and must match "
				"the daemon's\n", src);
		else
			fprintf(stderr, "ferry: no API token: %s\n", why);
		fprintf(stderr, "ferry: set FERRY_API_TOKEN, or FERRY_HOME to the daemon's "
			"state directory (it writes api-token there)\n");
	}
	return rc == FERRY_EINVALID ? FX_USAGE : FX_FAIL;
}

int open_client(ferry_client **out)
{
	if (client_open(out) < 0) {
		fprintf(stderr, "ferry: %s\n", ferry_error_last());
		return FX_FAIL;
	}
	return FX_OK;
}

void sleep_ms(int64_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}


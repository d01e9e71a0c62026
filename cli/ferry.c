/*
 * ferry — the command-line client. Each verb (validate, submit, list, get,
 * watch, logs, stop, retry, continue, dev) is one cmd_* function that parses its own options
 * with getopt_long, talks to ferryd through the client module and prints
 * either text for people or the server's JSON (-o json). Text formatting
 * (durations, local times, state markers, aligned tables, the live watch
 * view) lives in small static helpers below so every verb renders the same
 * way. Exit status: 0 success, 1 the run failed or stopped or the daemon or
 * network failed, 2 a usage or validation error.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "config.h"
#include "dev.h"
#include "util.h"

enum { FX_OK = 0, FX_FAIL = 1, FX_USAGE = 2 };

/* Long-only option values. */
enum { OPT_WORKFLOW = 256, OPT_STATE, OPT_LIMIT, OPT_FROM, OPT_ATTEMPT, OPT_DATA };

#define WATCH_POLL_MS 200
#define WATCH_RECONNECT_MS 30000

/* How output should look, decided once from the environment. */
struct cli {
	bool utf8; /* LC_ALL/LC_CTYPE/LANG name a UTF-8 locale */
	bool tty;  /* stdout is a terminal that understands ANSI */
};

struct command;

/* What a verb gets: the output settings and its own table entry. */
struct ctx {
	const struct cli *cli;
	const struct command *cmd;
};

struct command {
	const char *name;
	const char *summary;
	const char *synopsis;
	const char *help; /* options and an example, after the synopsis */
	int (*run)(const struct ctx *x, int argc, char **argv);
};

static const struct command *find_command(const char *name);

/* ---- small JSON accessors ---- */

static const char *jstr(const json_t *o, const char *key, const char *dflt)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s != NULL ? s : dflt;
}

static json_int_t jint(const json_t *o, const char *key, json_int_t dflt)
{
	const json_t *v = json_object_get(o, key);
	return json_is_integer(v) ? json_integer_value(v) : dflt;
}

/* Writes the run id of obj (an integer, or a string) into buf. */
static void id_text(char *buf, size_t n, const json_t *obj)
{
	const json_t *v = json_object_get(obj, "id");

	if (json_is_integer(v))
		snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	else if (json_is_string(v))
		snprintf(buf, n, "%s", json_string_value(v));
	else
		snprintf(buf, n, "?");
}

static void print_json(const json_t *v)
{
	json_dumpf(v, stdout, JSON_INDENT(2));
	fputc('\n', stdout);
}

/* ---- times and durations ---- */

static int read_digits(const char **p, int n, int *out)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)(*p)[i]))
			return -1;
		v = v * 10 + ((*p)[i] - '0');
	}
	*p += n;
	*out = v;
	return 0;
}

static int expect_char(const char **p, const char *any)
{
	if (**p == '\0' || strchr(any, **p) == NULL)
		return -1;
	(*p)++;
	return 0;
}

/*
 * Parses an ISO-8601 timestamp ("2026-11-22T00:00:00.123Z", also with a
 * space for T and a +HH[:MM] offset) into wall-clock milliseconds.
 */
static int parse_time_ms(const char *s, int64_t *out)
{
	const char *p = s;
	struct tm tm = {0};
	int y, mo, d, h, mi, sec, ms = 0, oh = 0, om = 0, sign = 1;
	time_t t;

	if (read_digits(&p, 4, &y) < 0 || expect_char(&p, "-") < 0 ||
	    read_digits(&p, 2, &mo) < 0 || expect_char(&p, "-") < 0 ||
	    read_digits(&p, 2, &d) < 0 || expect_char(&p, "Tt ") < 0 ||
	    read_digits(&p, 2, &h) < 0 || expect_char(&p, ":") < 0 ||
	    read_digits(&p, 2, &mi) < 0 || expect_char(&p, ":") < 0 ||
	    read_digits(&p, 2, &sec) < 0)
		return -1;
	if (*p == '.') {
		int scale = 100;
		p++;
		if (!isdigit((unsigned char)*p))
			return -1;
		for (; isdigit((unsigned char)*p); p++) {
			ms += (*p - '0') * scale;
			scale /= 10;
		}
	}
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		sign = *p == '-' ? -1 : 1;
		p++;
		if (read_digits(&p, 2, &oh) < 0)
			return -1;
		if (*p == ':')
			p++;
		if (*p != '\0' && read_digits(&p, 2, &om) < 0)
			return -1;
	}
	if (*p != '\0')
		return -1;
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -1;
	*out = (int64_t)t * 1000 + ms - (int64_t)sign * (oh * 60 + om) * 60000;
	return 0;
}

/* Reads the timestamp obj[key]; returns false when null, absent or malformed. */
static bool jtime(const json_t *obj, const char *key, int64_t *out)
{
	const char *s = jstr(obj, key, NULL);
	return s != NULL && parse_time_ms(s, out) == 0;
}

/* "0.3s", "59.9s", "2m05s", "1h02m". */
static void fmt_duration(char *buf, size_t n, int64_t ms)
{
	int64_t secs;

	if (ms < 0)
		ms = 0;
	if (ms < 59950) {
		int64_t tenths = (ms + 50) / 100;
		snprintf(buf, n, "%" PRId64 ".%" PRId64 "s", tenths / 10, tenths % 10);
		return;
	}
	secs = ms / 1000;
	if (secs < 3600)
		snprintf(buf, n, "%" PRId64 "m%02" PRId64 "s", secs / 60, secs % 60);
	else
		snprintf(buf, n, "%" PRId64 "h%02" PRId64 "m", secs / 3600, secs / 60 % 60);
}

/* Local time of a wall-clock instant: "HH:MM:SS" or "YYYY-MM-DD HH:MM:SS". */
static void fmt_local(char *buf, size_t n, int64_t ms, bool with_date)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	if (localtime_r(&t, &tm) == NULL ||
	    strftime(buf, n, with_date ? "%Y-%m-%d %H:%M:%S" : "%H:%M:%S", &tm) == 0)
		snprintf(buf, n, "?");
}

/*
 * How long obj (a run or a step) has taken: finished_at (or now while it
 * has not finished) minus started_at. Returns false when it never started.
 */
static bool span_ms(const json_t *obj, int64_t now, int64_t *out)
{
	int64_t start, end;

	if (!jtime(obj, "started_at", &start))
		return false;
	if (!jtime(obj, "finished_at", &end))
		end = now;
	*out = end - start;
	return true;
}

static void fmt_span(char *buf, size_t n, const json_t *obj, int64_t now)
{
	int64_t ms;

	if (span_ms(obj, now, &ms))
		fmt_duration(buf, n, ms);
	else
		snprintf(buf, n, "-");
}

/* ---- states and markers ---- */

static bool run_state_final(const char *state)
{
	return strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
	       strcmp(state, "stopped") == 0;
}

static bool run_state_known(const char *state)
{
	static const char *const states[] = {
		"pending", "running", "stopping", "succeeded", "failed", "stopped",
	};
	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++)
		if (strcmp(state, states[i]) == 0)
			return true;
	return false;
}

static const char *state_marker(const struct cli *cli, const char *state)
{
	static const struct {
		const char *state, *utf8, *ascii;
	} marks[] = {
		{"succeeded", "\u2714", "+"}, {"failed", "\u2716", "x"},
		{"running", "\u25cf", "*"},   {"waiting", "\u25cf", "?"},
		{"stopping", "\u25cf", "*"},  {"skipped", "\u2298", "-"},
		{"stopped", "\u2298", "-"},
	};
	for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
		if (strcmp(state, marks[i].state) == 0)
			return cli->utf8 ? marks[i].utf8 : marks[i].ascii;
	return cli->utf8 ? "\u25cb" : "."; /* blocked, ready, pending */
}

static const char *dash(const struct cli *cli)
{
	return cli->utf8 ? "\u2014" : "-";
}

/* The last element of step["attempt_list"], or NULL. */
static const json_t *last_attempt(const json_t *step)
{
	const json_t *list = json_object_get(step, "attempt_list");
	size_t n = json_array_size(list);
	return n > 0 ? json_array_get(list, n - 1) : NULL;
}

/*
 * Why a step is where it is, for people: its reason, else how its last
 * attempt ended ("exit 1", "signal 9"); for a step waiting to be retried,
 * when. "" when there is nothing to say.
 */
static void step_why(char *buf, size_t n, const json_t *step)
{
	const json_t *att = last_attempt(step);
	const char *state = jstr(step, "state", "");
	const char *reason = jstr(step, "reason", NULL);
	const json_t *sig = json_object_get(att, "signal");
	const json_t *code = json_object_get(step, "exit_code");
	bool running = strcmp(state, "running") == 0;
	size_t len = 0;
	int64_t t;

	buf[0] = '\0';
	if (strcmp(state, "ready") == 0 && jtime(step, "not_before", &t)) {
		char when[32];
		fmt_local(when, sizeof(when), t, false);
		len = (size_t)snprintf(buf, n, "retry at %s", when);
		if (len >= n)
			return;
	}
	if (reason == NULL)
		reason = jstr(att, "reason", NULL);
	if (reason != NULL && *reason != '\0')
		snprintf(buf + len, n - len, "%s%s", len ? "; " : "", reason);
	else if (json_is_integer(sig) && !running)
		snprintf(buf + len, n - len, "%ssignal %" JSON_INTEGER_FORMAT, len ? "; " : "",
			 json_integer_value(sig));
	else if (json_is_integer(code) && json_integer_value(code) != 0 && !running)
		snprintf(buf + len, n - len, "%sexit %" JSON_INTEGER_FORMAT, len ? "; " : "",
			 json_integer_value(code));
}

/* ---- aligned tables ---- */

/* Terminal columns taken by a UTF-8 string (one per code point). */
static size_t display_width(const char *s)
{
	size_t w = 0;

	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			w++;
	return w;
}

struct table {
	size_t ncols, nrows;
	char **cells; /* row-major, each owned */
};

static void table_init(struct table *t, size_t ncols)
{
	t->ncols = ncols;
	t->nrows = 0;
	t->cells = NULL;
}

/* Appends a row of t->ncols cells (NULL means empty); copies them. */
static void table_add(struct table *t, const char *const *row)
{
	size_t base = t->nrows * t->ncols;

	t->cells = xrealloc(t->cells, (base + t->ncols) * sizeof(char *));
	for (size_t i = 0; i < t->ncols; i++)
		t->cells[base + i] = xstrdup(row[i] != NULL ? row[i] : "");
	t->nrows++;
}

/* Prints t with columns two spaces apart and no trailing blanks. */
static void table_print(const struct table *t, FILE *f, const char *indent)
{
	size_t width[16] = {0};
	size_t ncols = t->ncols < 16 ? t->ncols : 16;

	for (size_t r = 0; r < t->nrows; r++)
		for (size_t c = 0; c < ncols; c++) {
			size_t w = display_width(t->cells[r * t->ncols + c]);
			if (w > width[c])
				width[c] = w;
		}
	for (size_t r = 0; r < t->nrows; r++) {
		char **row = t->cells + r * t->ncols;
		size_t last = 0;

		for (size_t c = 0; c < ncols; c++)
			if (row[c][0] != '\0')
				last = c;
		fputs(indent, f);
		for (size_t c = 0; c <= last; c++) {
			fputs(row[c], f);
			if (c < last)
				fprintf(f, "%*s", (int)(width[c] - display_width(row[c]) + 2), "");
		}
		fputc('\n', f);
	}
}

static void table_dispose(struct table *t)
{
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	t->cells = NULL;
	t->nrows = 0;
}

/* One row per step: "marker name", state, attempts, duration, why. */
static void table_add_steps(struct table *t, const struct cli *cli,
			    const json_t *steps, int64_t now)
{
	const json_t *step;
	size_t i;

	json_array_foreach(steps, i, step) {
		const char *state = jstr(step, "state", "?");
		json_int_t attempts = jint(step, "attempts", 0);
		char att[32], dur[32], why[512], *name;
		const char *row[5];

		if (attempts > 0)
			snprintf(att, sizeof(att), "%" JSON_INTEGER_FORMAT " attempt%s",
				 attempts, attempts == 1 ? "" : "s");
		else
			snprintf(att, sizeof(att), "-");
		fmt_span(dur, sizeof(dur), step, now);
		step_why(why, sizeof(why), step);
		name = xasprintf("%s %s", state_marker(cli, state), jstr(step, "name", "?"));
		row[0] = name;
		row[1] = state;
		row[2] = att;
		row[3] = dur;
		row[4] = why;
		table_add(t, row);
		free(name);
	}
}

/* ---- errors and usage ---- */

static void print_synopsis(const struct command *cmd, FILE *f)
{
	fprintf(f, "usage: %s\n", cmd->synopsis);
}

static int usage_error(const struct ctx *x, const char *fmt, ...) FERRY_PRINTF(2, 3);

static int usage_error(const struct ctx *x, const char *fmt, ...)
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

static int print_help(const struct command *cmd)
{
	print_synopsis(cmd, stdout);
	fprintf(stdout, "\n%s\n\n%s", cmd->summary, cmd->help);
	return FX_OK;
}

/* Reports a getopt failure (optstring starts with ':'). */
static int option_error(const struct ctx *x, int ch, char **argv)
{
	const char *arg = argv[optind - 1];

	if (ch == ':')
		return usage_error(x, "option '%s' needs a value", arg);
	if (optopt != 0 && strncmp(arg, "--", 2) != 0)
		return usage_error(x, "unknown option '-%c'", optopt);
	return usage_error(x, "unknown option '%.*s'", (int)strcspn(arg, "="), arg);
}

static int parse_output(const struct ctx *x, const char *arg, bool *json)
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
static int parse_run_id(const struct ctx *x, const char *s, int64_t *id)
{
	if (parse_int64(s, id) < 0 || *id <= 0)
		return usage_error(x, "invalid run id '%s' (expected a number such as 12)", s);
	return 0;
}

/* The single RUN operand left after the options: -1 to go on, else an exit status. */
static int parse_run_operand(const struct ctx *x, int argc, char **argv, int64_t *id)
{
	if (argc - optind != 1)
		return usage_error(x, argc == optind ? "missing RUN" : "expected one RUN");
	if (parse_run_id(x, argv[optind], id) != 0)
		return FX_USAGE;
	return -1;
}

/*
 * Parses the arguments of a verb that takes "RUN" plus -o FORMAT when json is
 * not NULL. Returns -1 to go on, else the exit status to return now.
 */
static int parse_run_args(const struct ctx *x, int argc, char **argv, int64_t *id, bool *json)
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
	return parse_run_operand(x, argc, argv, id);
}

/* Prints the failure of the last request; returns the exit status for it. */
static int report_request_error(const ferry_client *c, int rc)
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

static int open_client(ferry_client **out)
{
	if (client_open(out) < 0) {
		fprintf(stderr, "ferry: %s\n", ferry_error_last());
		return FX_FAIL;
	}
	return FX_OK;
}

static void sleep_ms(int64_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- workflow files ---- */

/* A workflow read from disk and checked with the config parser. */
struct workflow_file {
	char *text;
	size_t len;
	json_t *spec;
	char hash[65];
	cfg_errors errs;
};

static void workflow_file_dispose(struct workflow_file *wf)
{
	free(wf->text);
	json_decref(wf->spec);
	cfg_errors_dispose(&wf->errs);
	memset(wf, 0, sizeof(*wf));
}

/*
 * Reads and parses path. Returns 0; FERRY_EINVALID with wf->errs filled; or
 * another negative code with the message in ferry_error_last() (unreadable).
 */
static int workflow_file_load(struct workflow_file *wf, const char *path)
{
	int error;

	memset(wf, 0, sizeof(*wf));
	ferry_error_clear();
	if ((error = file_read(&wf->text, &wf->len, path)) < 0)
		return error;
	error = cfg_workflow_parse(&wf->spec, wf->hash, wf->text, wf->len, path, &wf->errs);
	if (error < 0 && wf->errs.len == 0 && ferry_error_last()[0] == '\0')
		ferry_error_set("%s: invalid workflow", path);
	return error;
}

/* Prints every parse error of wf (or the one message) to stderr. */
static void workflow_file_report(const struct workflow_file *wf)
{
	if (wf->errs.len == 0) {
		fprintf(stderr, "ferry: %s\n", ferry_error_last());
		return;
	}
	for (size_t i = 0; i < wf->errs.len; i++)
		fprintf(stderr, "%s\n", wf->errs.items[i]);
}

/* ---- validate ---- */

static int cmd_validate(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct workflow_file wf = {0};
	bool json = false;
	const char *path;
	json_t *report = NULL, *errors;
	size_t nsteps = 0;
	int ch, rc, status;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'o':
			if (parse_output(x, optarg, &json) != 0)
				return FX_USAGE;
			break;
		case 'h':
			return print_help(x->cmd);
		default:
			return option_error(x, ch, argv);
		}
	}
	if (argc - optind != 1)
		return usage_error(x, argc == optind ? "missing FILE" : "expected one FILE");
	path = argv[optind];

	rc = workflow_file_load(&wf, path);
	status = rc == 0 ? FX_OK : FX_USAGE;
	if (rc == 0)
		nsteps = json_array_size(json_object_get(wf.spec, "steps"));
	if (!json) {
		if (rc == 0)
			printf("%s: ok %s workflow %s, %zu step%s, hash %.12s\n", path, dash(x->cli),
			       jstr(wf.spec, "name", "?"), nsteps, nsteps == 1 ? "" : "s", wf.hash);
		else
			workflow_file_report(&wf);
		goto out;
	}
	errors = json_array();
	if (rc != 0 && wf.errs.len == 0)
		json_array_append_new(errors, json_string(ferry_error_last()));
	for (size_t i = 0; i < wf.errs.len; i++)
		json_array_append_new(errors, json_string(wf.errs.items[i]));
	report = json_pack("{s:s?, s:b, s:s?, s:o, s:s?, s:o}",
			   "file", path, "valid", rc == 0,
			   "name", rc == 0 ? jstr(wf.spec, "name", NULL) : NULL,
			   "steps", rc == 0 ? json_integer((json_int_t)nsteps) : json_null(),
			   "hash", rc == 0 ? wf.hash : NULL, "errors", errors);
	if (report == NULL) {
		fprintf(stderr, "ferry: cannot encode the report as JSON\n");
		status = FX_FAIL;
		goto out;
	}
	print_json(report);
out:
	json_decref(report);
	workflow_file_dispose(&wf);
	return status;
}

/* ---- watch ---- */

/* When a step entered its current state, best known; else now. */
static int64_t step_event_ms(const json_t *step, int64_t now)
{
	const json_t *att = last_attempt(step);
	const json_t *src = att != NULL ? att : step;
	const char *state = jstr(step, "state", "");
	int64_t t;

	if (strcmp(state, "running") == 0 && jtime(src, "started_at", &t))
		return t;
	if ((strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
	     strcmp(state, "stopped") == 0 || strcmp(state, "skipped") == 0) &&
	    (jtime(step, "finished_at", &t) || jtime(src, "finished_at", &t)))
		return t;
	return now;
}

/*
 * "attempt 2, exit 1" or "attempt 2, REASON" (the reason, when there is one,
 * says more than the exit status); "" when there is nothing to say.
 */
static void step_change_detail(char *buf, size_t n, const json_t *step)
{
	const char *state = jstr(step, "state", "");
	json_int_t attempts = jint(step, "attempts", 0);
	const json_t *code = json_object_get(step, "exit_code");
	const json_t *sig = json_object_get(last_attempt(step), "signal");
	const char *reason = jstr(step, "reason", NULL);
	bool ended = strcmp(state, "failed") == 0 || strcmp(state, "stopped") == 0 ||
		     strcmp(state, "ready") == 0; /* ready again: waiting to retry */
	size_t len = 0;

	buf[0] = '\0';
	if (attempts > 0 && strcmp(state, "blocked") != 0 && strcmp(state, "skipped") != 0)
		len += (size_t)snprintf(buf, n, "attempt %" JSON_INTEGER_FORMAT, attempts);
	if (len >= n)
		return;
	if (reason != NULL && *reason != '\0')
		snprintf(buf + len, n - len, "%s%s", len ? ", " : "", reason);
	else if (ended && json_is_integer(sig))
		snprintf(buf + len, n - len, "%ssignal %" JSON_INTEGER_FORMAT,
			 len ? ", " : "", json_integer_value(sig));
	else if (ended && json_is_integer(code))
		snprintf(buf + len, n - len, "%sexit %" JSON_INTEGER_FORMAT,
			 len ? ", " : "", json_integer_value(code));
}

/*
 * Line mode: prints one line per step whose state or attempt changed since
 * the last poll. seen maps step name -> "state#attempts" printed so far.
 */
static void watch_print_changes(const json_t *run, json_t *seen, int64_t now)
{
	const json_t *steps = json_object_get(run, "steps"), *step;
	size_t i, name_w = 4;

	json_array_foreach(steps, i, step) {
		size_t w = display_width(jstr(step, "name", "?"));
		if (w > name_w)
			name_w = w;
	}
	json_array_foreach(steps, i, step) {
		const char *name = jstr(step, "name", "?");
		const char *state = jstr(step, "state", "?");
		const char *prev = json_string_value(json_object_get(seen, name));
		char *key = xasprintf("%s#%" JSON_INTEGER_FORMAT, state, jint(step, "attempts", 0));
		char when[32], detail[600];

		if (prev != NULL && strcmp(prev, key) == 0)
			goto next;
		json_object_set_new(seen, name, json_string(key));
		if (prev == NULL && strcmp(state, "blocked") == 0)
			goto next; /* the initial state is not news */
		fmt_local(when, sizeof(when), step_event_ms(step, now), false);
		step_change_detail(detail, sizeof(detail), step);
		if (detail[0] != '\0')
			printf("%s  %s%*s  %-9s  (%s)\n", when, name,
			       (int)(name_w - display_width(name)), "", state, detail);
		else
			printf("%s  %s%*s  %s\n", when, name,
			       (int)(name_w - display_width(name)), "", state);
next:
		free(key);
	}
}

/* "run 12 succeeded in 3.2s" (plus the reason when there is one). */
static void print_run_outcome(const json_t *run, int64_t now)
{
	char id[32], dur[32];
	const char *reason = jstr(run, "reason", NULL);
	int64_t start, end;

	id_text(id, sizeof(id), run);
	printf("run %s %s", id, jstr(run, "state", "?"));
	if ((jtime(run, "started_at", &start) || jtime(run, "created_at", &start))) {
		if (!jtime(run, "finished_at", &end))
			end = now;
		fmt_duration(dur, sizeof(dur), end - start);
		printf(" in %s", dur);
	}
	if (reason != NULL && *reason != '\0')
		printf(": %s", reason);
	fputc('\n', stdout);
}

/* The compact live view: a header line and the step table. */
static void watch_render_frame(FILE *f, const struct cli *cli, const json_t *run, int64_t now)
{
	struct table t;
	char id[32], dur[32];

	id_text(id, sizeof(id), run);
	fmt_span(dur, sizeof(dur), run, now);
	fprintf(f, "run %s  %s  %s  %s\n", id, jstr(run, "workflow", "?"),
		jstr(run, "state", "?"), dur);
	table_init(&t, 5);
	table_add_steps(&t, cli, json_object_get(run, "steps"), now);
	table_print(&t, f, "  ");
	table_dispose(&t);
}

/*
 * TTY mode: redraws the frame in place when it changed. *prev holds the
 * last frame drawn (owned), *prev_lines its height.
 */
static void watch_redraw(const struct cli *cli, const json_t *run, int64_t now,
			 char **prev, size_t *prev_lines)
{
	char *frame = NULL;
	size_t size = 0, lines = 0;
	FILE *f = open_memstream(&frame, &size);

	if (f == NULL)
		return;
	watch_render_frame(f, cli, run, now);
	fclose(f);
	if (*prev != NULL && strcmp(*prev, frame) == 0) {
		free(frame);
		return;
	}
	for (const char *p = frame; *p; p++)
		if (*p == '\n')
			lines++;
	if (*prev_lines > 0)
		printf("\033[%zuA\r\033[J", *prev_lines);
	fputs(frame, stdout);
	free(*prev);
	*prev = frame;
	*prev_lines = lines;
}

/*
 * Polls run id until it is final, showing progress (lines, or the live view
 * on a terminal; nothing with json, which prints the final run object).
 * Returns 0 when the run succeeded, 1 otherwise.
 */
static int watch_run(const struct cli *cli, ferry_client *c, int64_t id, bool json)
{
	char *path = xasprintf("/runs/%" PRId64, id);
	json_t *seen = json_object(), *run = NULL;
	char *frame = NULL;
	size_t frame_lines = 0;
	int64_t lost_since = 0;
	bool ever_ok = false;
	const char *state = "";
	int rc, status = FX_FAIL;

	for (;;) {
		json_decref(run);
		run = NULL;
		rc = client_request(&run, c, "GET", path, NULL);
		if (rc < 0 && ever_ok && client_last_status(c) == 0) {
			int64_t now = clock_mono_ms();
			if (lost_since == 0) {
				lost_since = now;
				fprintf(stderr, "ferry: %s\nferry: retrying for %ds\n",
					ferry_error_last(), WATCH_RECONNECT_MS / 1000);
			}
			if (now - lost_since < WATCH_RECONNECT_MS) {
				sleep_ms(WATCH_POLL_MS * 5);
				continue;
			}
		}
		if (rc < 0) {
			status = report_request_error(c, rc);
			goto out;
		}
		if (!json_is_object(run)) {
			fprintf(stderr, "ferry: ferryd sent something other than a run for %s\n", path);
			goto out;
		}
		if (lost_since != 0)
			fprintf(stderr, "ferry: reconnected to %s\n", client_url(c));
		lost_since = 0;
		ever_ok = true;
		state = jstr(run, "state", "");
		if (!json && cli->tty)
			watch_redraw(cli, run, clock_wall_ms(), &frame, &frame_lines);
		else if (!json)
			watch_print_changes(run, seen, clock_wall_ms());
		fflush(stdout);
		if (run_state_final(state))
			break;
		sleep_ms(WATCH_POLL_MS);
	}
	if (json)
		print_json(run);
	else
		print_run_outcome(run, clock_wall_ms());
	status = strcmp(state, "succeeded") == 0 ? FX_OK : FX_FAIL;
out:
	fflush(stdout);
	free(frame);
	free(path);
	json_decref(seen);
	json_decref(run);
	return status;
}

static int cmd_watch(const struct ctx *x, int argc, char **argv)
{
	ferry_client *c = NULL;
	int64_t id;
	int status;

	if ((status = parse_run_args(x, argc, argv, &id, NULL)) >= 0)
		return status;
	if ((status = open_client(&c)) != FX_OK)
		return status;
	status = watch_run(x->cli, c, id, false);
	client_free(c);
	return status;
}

/* ---- submit ---- */

/* Adds "k=v" to params; a usage error (2) when it has no '=' or no key. */
static int add_param(const struct ctx *x, json_t *params, const char *arg)
{
	const char *eq = strchr(arg, '=');
	char *key;
	json_t *val;

	if (eq == NULL)
		return usage_error(x, "parameter '%s' must be NAME=VALUE", arg);
	if (eq == arg)
		return usage_error(x, "parameter '%s' has no name", arg);
	val = json_string(eq + 1);
	if (val == NULL)
		return usage_error(x, "parameter '%s' is not valid UTF-8", arg);
	key = xstrndup(arg, (size_t)(eq - arg));
	json_object_set_new(params, key, val);
	free(key);
	return 0;
}

/* The directory holding path, absolute; the caller frees it. */
static char *abs_dir_of(const char *path)
{
	char *real = realpath(path, NULL), *slash;

	if (real == NULL)
		return NULL;
	slash = strrchr(real, '/');
	if (slash == real)
		slash[1] = '\0';
	else if (slash != NULL)
		*slash = '\0';
	return real;
}

/*
 * Builds the POST /runs body for a workflow file, checking it locally first.
 * Returns FX_OK and *out, or the exit status after printing why.
 */
static int submit_body_from_file(json_t **out, const char *path, json_t *params)
{
	struct workflow_file wf = {0};
	json_t *body = NULL, *yaml, *resolved = NULL;
	char *dir = NULL, *copy = NULL;
	int rc, status = FX_USAGE;

	rc = workflow_file_load(&wf, path);
	if (rc < 0) {
		workflow_file_report(&wf);
		goto out;
	}
	if (cfg_params_resolve(&resolved, wf.spec, params) < 0) {
		fprintf(stderr, "ferry: %s: %s\n", path, ferry_error_last());
		goto out;
	}
	yaml = json_stringn(wf.text, wf.len);
	if (yaml == NULL) {
		fprintf(stderr, "ferry: %s is not valid UTF-8 text\n", path);
		goto out;
	}
	dir = abs_dir_of(path);
	if (dir == NULL) {
		fprintf(stderr, "ferry: cannot resolve the directory of %s\n", path);
		json_decref(yaml);
		status = FX_FAIL;
		goto out;
	}
	copy = xstrdup(path);
	body = json_pack("{s:o, s:s, s:O, s:s, s:s}", "yaml", yaml, "filename", basename(copy),
			 "params", params, "workdir", dir, "trigger", "cli");
	if (body == NULL) {
		fprintf(stderr, "ferry: cannot encode the request for %s\n", path);
		status = FX_FAIL;
		goto out;
	}
	*out = body;
	status = FX_OK;
out:
	free(copy);
	free(dir);
	json_decref(resolved);
	workflow_file_dispose(&wf);
	return status;
}

static int cmd_submit(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"param", required_argument, NULL, 'p'},
		{"watch", no_argument, NULL, 'w'},
		{"workflow", required_argument, NULL, OPT_WORKFLOW},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	ferry_client *c = NULL;
	json_t *params = json_object(), *body = NULL, *run = NULL;
	const char *workflow = NULL;
	bool json = false, watch = false;
	char id[32];
	int64_t run_id;
	int ch, rc, status = FX_USAGE;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":p:wo:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'p':
			if (add_param(x, params, optarg) != 0)
				goto out;
			break;
		case 'w':
			watch = true;
			break;
		case OPT_WORKFLOW:
			workflow = optarg;
			break;
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
	if (workflow != NULL && argc > optind) {
		status = usage_error(x, "give either FILE or --workflow NAME, not both");
		goto out;
	}
	if (workflow == NULL && argc - optind != 1) {
		status = usage_error(x, argc == optind ? "missing FILE" : "expected one FILE");
		goto out;
	}
	if (workflow != NULL) {
		body = json_pack("{s:s, s:O, s:s}", "workflow", workflow, "params", params,
				 "trigger", "cli");
		if (body == NULL) {
			status = usage_error(x, "workflow name '%s' is not valid UTF-8", workflow);
			goto out;
		}
	} else if ((status = submit_body_from_file(&body, argv[optind], params)) != FX_OK) {
		goto out;
	}

	if ((status = open_client(&c)) != FX_OK)
		goto out;
	rc = client_request(&run, c, "POST", "/runs", body);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	status = FX_OK;
	if (!watch || !json) {
		if (json) {
			print_json(run);
		} else {
			id_text(id, sizeof(id), run);
			printf("%s\n", id);
		}
		fflush(stdout);
	}
	if (!watch)
		goto out;
	if (!json_is_integer(json_object_get(run, "id"))) {
		id_text(id, sizeof(id), run);
		if (parse_int64(id, &run_id) < 0) {
			fprintf(stderr, "ferry: ferryd answered without a usable run id\n");
			status = FX_FAIL;
			goto out;
		}
	} else {
		run_id = json_integer_value(json_object_get(run, "id"));
	}
	status = watch_run(x->cli, c, run_id, json);
out:
	json_decref(run);
	json_decref(body);
	json_decref(params);
	client_free(c);
	return status;
}

/* ---- get ---- */

static void print_params(const json_t *params)
{
	const char *key;
	const json_t *val;
	bool first = true;

	json_object_foreach((json_t *)params, key, val) {
		char *text = json_is_string(val) ? NULL : json_dumps(val, JSON_ENCODE_ANY | JSON_COMPACT);
		printf("%s%s=%s", first ? "" : ", ", key,
		       json_is_string(val) ? json_string_value(val) : text ? text : "?");
		free(text);
		first = false;
	}
	if (first)
		fputs("none", stdout);
	fputc('\n', stdout);
}

static void print_run(const struct cli *cli, const json_t *run, int64_t now)
{
	const char *hash = jstr(run, "workflow_hash", NULL);
	const char *reason = jstr(run, "reason", NULL);
	const char *state = jstr(run, "state", "?");
	const json_t *steps = json_object_get(run, "steps");
	char id[32], buf[64];
	int64_t t;
	struct table tab;

	id_text(id, sizeof(id), run);
	printf("Run:       %s\n", id);
	printf("Workflow:  %s", jstr(run, "workflow", "?"));
	if (hash != NULL)
		printf(" (%.12s)", hash);
	printf("\nState:     %s %s", state_marker(cli, state), state);
	if (reason != NULL && *reason != '\0')
		printf(" %s %s", dash(cli), reason);
	printf("\nTrigger:   %s", jstr(run, "trigger", "?"));
	if (jstr(run, "actor", NULL) != NULL)
		printf(" by %s", jstr(run, "actor", NULL));
	fputc('\n', stdout);
	if (jtime(run, "created_at", &t)) {
		fmt_local(buf, sizeof(buf), t, true);
		printf("Created:   %s\n", buf);
	}
	if (jtime(run, "started_at", &t))
		fmt_local(buf, sizeof(buf), t, true);
	else
		snprintf(buf, sizeof(buf), "-");
	printf("Started:   %s\n", buf);
	fmt_span(buf, sizeof(buf), run, now);
	printf("Duration:  %s%s\n", buf,
	       strcmp(buf, "-") != 0 && !jtime(run, "finished_at", &t) ? " (so far)" : "");
	printf("Params:    ");
	print_params(json_object_get(run, "params"));
	printf("Steps:\n");
	table_init(&tab, 5);
	table_add_steps(&tab, cli, steps, now);
	table_print(&tab, stdout, "  ");
	table_dispose(&tab);
}

static int cmd_get(const struct ctx *x, int argc, char **argv)
{
	ferry_client *c = NULL;
	json_t *run = NULL;
	char *path = NULL;
	bool json = false;
	int64_t id;
	int rc, status;

	if ((status = parse_run_args(x, argc, argv, &id, &json)) >= 0)
		return status;
	if ((status = open_client(&c)) != FX_OK)
		return status;
	path = xasprintf("/runs/%" PRId64, id);
	rc = client_request(&run, c, "GET", path, NULL);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	if (json)
		print_json(run);
	else
		print_run(x->cli, run, clock_wall_ms());
out:
	free(path);
	json_decref(run);
	client_free(c);
	return status;
}

/* ---- list ---- */

static void print_run_list(const json_t *runs, int64_t now)
{
	static const char *const header[] = {
		"ID", "WORKFLOW", "STATE", "TRIGGER", "STARTED", "DURATION",
	};
	const json_t *run;
	struct table t;
	size_t i;

	table_init(&t, 6);
	table_add(&t, header);
	json_array_foreach(runs, i, run) {
		char id[32], started[32], dur[32];
		const char *row[6];
		int64_t ts;

		id_text(id, sizeof(id), run);
		if (jtime(run, "started_at", &ts))
			fmt_local(started, sizeof(started), ts, true);
		else
			snprintf(started, sizeof(started), "-");
		fmt_span(dur, sizeof(dur), run, now);
		row[0] = id;
		row[1] = jstr(run, "workflow", "?");
		row[2] = jstr(run, "state", "?");
		row[3] = jstr(run, "trigger", "-");
		row[4] = started;
		row[5] = dur;
		table_add(&t, row);
	}
	table_print(&t, stdout, "");
	table_dispose(&t);
}

/* Appends "&name=escaped(value)" (or "?…" first) to *query. */
static void query_add(char **query, const char *name, const char *value)
{
	char *esc = client_escape(value);
	char *q = xasprintf("%s%c%s=%s", *query, **query ? '&' : '?', name, esc);

	free(esc);
	free(*query);
	*query = q;
}

static int cmd_list(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"state", required_argument, NULL, OPT_STATE},
		{"workflow", required_argument, NULL, OPT_WORKFLOW},
		{"limit", required_argument, NULL, OPT_LIMIT},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	ferry_client *c = NULL;
	json_t *answer = NULL, *runs;
	char *query = xstrdup(""), *path = NULL;
	bool json = false;
	int64_t limit;
	int ch, rc, status = FX_USAGE;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_STATE:
			if (!run_state_known(optarg)) {
				usage_error(x, "unknown state '%s' (one of pending, running, stopping, "
					    "succeeded, failed, stopped)", optarg);
				goto out;
			}
			query_add(&query, "state", optarg);
			break;
		case OPT_WORKFLOW:
			query_add(&query, "workflow", optarg);
			break;
		case OPT_LIMIT:
			if (parse_int64(optarg, &limit) < 0 || limit <= 0 || limit > 100000) {
				usage_error(x, "--limit wants a positive number, not '%s'", optarg);
				goto out;
			}
			query_add(&query, "limit", optarg);
			break;
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
	path = xasprintf("/runs%s", query);
	rc = client_request(&answer, c, "GET", path, NULL);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	if (json) {
		print_json(answer);
		goto out;
	}
	runs = json_object_get(answer, "runs");
	if (json_array_size(runs) == 0) {
		fprintf(stderr, "no runs\n");
		goto out;
	}
	print_run_list(runs, clock_wall_ms());
	fflush(stdout);
	if (json_is_string(json_object_get(answer, "next_cursor")))
		fprintf(stderr, "(more runs not shown; raise --limit to see them)\n");
out:
	free(path);
	free(query);
	json_decref(answer);
	client_free(c);
	return status;
}

/* ---- stop, retry ---- */

/* Shared by stop and retry: POST /runs/{id}/VERB and print the outcome. */
static int run_action(const struct ctx *x, int64_t id, const char *verb, const json_t *body,
		      const char *from, bool json, bool watch)
{
	ferry_client *c = NULL;
	json_t *run = NULL;
	char *path = xasprintf("/runs/%" PRId64 "/%s", id, verb);
	const char *state;
	int rc, status;

	if ((status = open_client(&c)) != FX_OK)
		goto out;
	rc = client_request(&run, c, "POST", path, body);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	state = jstr(run, "state", "?");
	if (json && !watch) {
		print_json(run);
	} else if (!json) {
		bool retrying = strcmp(verb, "retry") == 0 &&
				(strcmp(state, "pending") == 0 || strcmp(state, "running") == 0);
		if (retrying && from != NULL)
			printf("run %" PRId64 " retrying from %s\n", id, from);
		else
			printf("run %" PRId64 " %s\n", id, retrying ? "retrying" : state);
		fflush(stdout);
	}
	if (watch)
		status = watch_run(x->cli, c, id, json);
out:
	free(path);
	json_decref(run);
	client_free(c);
	return status;
}

static int cmd_stop(const struct ctx *x, int argc, char **argv)
{
	bool json = false;
	int64_t id;
	int status;

	if ((status = parse_run_args(x, argc, argv, &id, &json)) >= 0)
		return status;
	return run_action(x, id, "stop", NULL, NULL, json, false);
}

static int cmd_retry(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"from", required_argument, NULL, OPT_FROM},
		{"watch", no_argument, NULL, 'w'},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *from = NULL;
	json_t *body = NULL;
	bool json = false, watch = false;
	int64_t id;
	int ch, status;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":wo:h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_FROM:
			from = optarg;
			break;
		case 'w':
			watch = true;
			break;
		case 'o':
			if (parse_output(x, optarg, &json) != 0)
				return FX_USAGE;
			break;
		case 'h':
			return print_help(x->cmd);
		default:
			return option_error(x, ch, argv);
		}
	}
	if ((status = parse_run_operand(x, argc, argv, &id)) >= 0)
		return status;
	if (from != NULL && *from == '\0')
		return usage_error(x, "--from needs a step name");
	body = from != NULL ? json_pack("{s:s}", "from", from) : json_object();
	if (body == NULL)
		return usage_error(x, "step name '%s' is not valid UTF-8", from);
	status = run_action(x, id, "retry", body, from, json, watch);
	json_decref(body);
	return status;
}

/* ---- logs ---- */

/*
 * How long a followed log or run may be unreachable (daemon restarting)
 * before `ferry logs -f` gives up; the wait between looks at a run whose
 * steps have not started yet.
 */
#define LOGS_RECONNECT_MS WATCH_RECONNECT_MS
#define LOGS_POLL_MS WATCH_POLL_MS

/* One attempt's log being copied to stdout as it arrives. */
struct log_copy {
	const char *step;   /* named in a "==> STEP (attempt N) <==" header; NULL: no header */
	bool *printed;      /* shared by every section: something was printed before */
	bool begun;         /* the header (if any) is out */
	bool write_failed;  /* stdout refused the bytes */
	int attempt;        /* X-Ferry-Attempt of the answer; 0 until known */
	int64_t bytes;      /* received so far, counted from the start of the log */
	char last;          /* the last byte written */
};

/* At the answer's headers: learns the attempt and prints the section header once. */
static int log_copy_begin(void *arg, ferry_client *c)
{
	struct log_copy *lc = arg;
	const char *att = client_last_header(c, "X-Ferry-Attempt");
	int64_t n;

	if (att != NULL && parse_int64(att, &n) == 0 && n > 0 && n <= INT_MAX)
		lc->attempt = (int)n;
	if (lc->begun)
		return 0; /* a reconnect: the header is already out */
	lc->begun = true;
	if (lc->step == NULL)
		return 0;
	if (lc->printed != NULL && *lc->printed)
		fputc('\n', stdout);
	if (lc->attempt > 0)
		printf("==> %s (attempt %d) <==\n", lc->step, lc->attempt);
	else
		printf("==> %s <==\n", lc->step);
	fflush(stdout);
	if (lc->printed != NULL)
		*lc->printed = true;
	return 0;
}

static int log_copy_data(void *arg, const char *buf, size_t len)
{
	struct log_copy *lc = arg;

	if (len == 0)
		return 0;
	if (fwrite(buf, 1, len, stdout) != len || fflush(stdout) != 0) {
		ferry_error_set("cannot write to standard output: %s", strerror(errno));
		lc->write_failed = true;
		return -1;
	}
	lc->bytes += (int64_t)len;
	lc->last = buf[len - 1];
	if (lc->printed != NULL)
		*lc->printed = true;
	return 0;
}

/* Ends a section that did not end its last line, so the next header starts a line. */
static void log_copy_finish(const struct log_copy *lc)
{
	if (lc->step != NULL && lc->bytes > 0 && lc->last != '\n') {
		fputc('\n', stdout);
		fflush(stdout);
	}
}

/* One `ferry logs` invocation: the daemon, the run, and whether it ever answered. */
struct logs {
	ferry_client *c;
	int64_t id;
	bool answered; /* a request got an answer: a later loss is worth riding out */
};

/*
 * After a failed request while following: true (after a pause) while a
 * retry is worth it, false to give up. Only a daemon that answered before
 * and now does not answer at all (restarting) is waited for, up to
 * LOGS_RECONNECT_MS from the first failure in a row; lost_since is 0 while
 * all is well.
 */
static bool follow_retry(const struct logs *lg, int64_t *lost_since)
{
	int64_t now = clock_mono_ms();

	if (!lg->answered || client_last_status(lg->c) != 0)
		return false; /* never reached, or it answered: not a restart */
	if (*lost_since == 0) {
		*lost_since = now;
		fprintf(stderr, "ferry: %s\nferry: retrying for %ds\n", ferry_error_last(),
			LOGS_RECONNECT_MS / 1000);
	}
	if (now - *lost_since >= LOGS_RECONNECT_MS)
		return false;
	sleep_ms(LOGS_POLL_MS * 5);
	return true;
}

static void follow_recovered(struct logs *lg, int64_t lost_since)
{
	lg->answered = true;
	if (lost_since != 0)
		fprintf(stderr, "ferry: reconnected to %s\n", client_url(lg->c));
}

/*
 * Copies the log of step (attempt 0: the latest) to stdout. With follow,
 * keeps copying until the attempt ends, and picks up where it was (same
 * attempt, next byte) when the connection drops. Returns 0 or the client's
 * negative code (message set).
 */
static int logs_copy(struct logs *lg, const char *step, int attempt, bool follow,
		     struct log_copy *lc)
{
	char *esc = client_escape(step);
	int64_t lost_since = 0;
	int rc;

	for (;;) {
		struct client_sink sink = {log_copy_begin, log_copy_data, lc};
		int want = lc->attempt > 0 ? lc->attempt : attempt;
		char att[32] = "", off[48] = "";
		char *path;

		if (want > 0)
			snprintf(att, sizeof(att), "&attempt=%d", want);
		if (lc->bytes > 0)
			snprintf(off, sizeof(off), "&offset=%" PRId64, lc->bytes);
		path = xasprintf("/runs/%" PRId64 "/steps/%s/logs?follow=%d%s%s", lg->id, esc,
				 follow ? 1 : 0, att, off);
		rc = client_stream(lg->c, path, follow, &sink);
		free(path);
		if (lc->begun)
			lg->answered = true;
		if (rc == 0 || !follow || lc->write_failed || !follow_retry(lg, &lost_since))
			break;
	}
	if (rc == 0)
		follow_recovered(lg, lost_since);
	free(esc);
	return rc;
}

/* Fetches the run; while following, rides out a daemon that is briefly away. */
static int logs_fetch_run(json_t **run, struct logs *lg, bool follow)
{
	char *path = xasprintf("/runs/%" PRId64, lg->id);
	int64_t lost_since = 0;
	int rc;

	do {
		json_decref(*run);
		*run = NULL;
		rc = client_request(run, lg->c, "GET", path, NULL);
	} while (rc < 0 && follow && follow_retry(lg, &lost_since));
	if (rc == 0)
		follow_recovered(lg, lost_since);
	free(path);
	return rc;
}

/* The step called name in run["steps"], or NULL. */
static const json_t *run_step(const json_t *run, const char *name)
{
	const json_t *step;
	size_t i;

	json_array_foreach(json_object_get(run, "steps"), i, step)
		if (strcmp(jstr(step, "name", ""), name) == 0)
			return step;
	return NULL;
}

/* A step in one of these states starts no further attempt. */
static bool step_state_settled(const char *state)
{
	return strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
	       strcmp(state, "skipped") == 0 || strcmp(state, "stopped") == 0;
}

/*
 * Waits until step name has attempt `want` (returns 1), or will never have
 * it (0: the step settled without it, or the run ended), or the daemon
 * fails (its negative code, message set). Says on stderr when the step is a
 * gate waiting for `ferry continue`; chatty, also (once) what else it waits for.
 */
static int logs_wait_attempt(struct logs *lg, const char *name, int want, bool chatty)
{
	json_t *run = NULL;
	char *said = NULL;
	int rc;

	for (;;) {
		const json_t *step;
		const char *state;

		if ((rc = logs_fetch_run(&run, lg, true)) < 0)
			break;
		step = run_step(run, name);
		if (step == NULL) {
			ferry_error_set("run %" PRId64 " has no step \"%s\"", lg->id, name);
			rc = FERRY_ENOTFOUND;
			break;
		}
		state = jstr(step, "state", "?");
		if (jint(step, "attempts", 0) >= want) {
			rc = 1;
			break;
		}
		if (step_state_settled(state) || run_state_final(jstr(run, "state", ""))) {
			rc = 0;
			break;
		}
		if (strcmp(state, "waiting") == 0 ? said == NULL || strcmp(said, state) != 0 :
		    chatty && said == NULL && strcmp(state, "running") != 0) {
			if (strcmp(state, "waiting") == 0)
				fprintf(stderr, "ferry: step %s is waiting; continue it with: "
					"ferry continue %" PRId64 " %s\n", name, lg->id, name);
			else if (want == 1)
				fprintf(stderr, "ferry: step %s is %s; waiting for it to start\n", name, state);
			else
				fprintf(stderr, "ferry: step %s is %s; waiting for attempt %d\n", name,
					state, want);
			free(said);
			said = xstrdup(state);
		}
		sleep_ms(LOGS_POLL_MS);
	}
	free(said);
	json_decref(run);
	return rc;
}

/*
 * Follows one attempt that the run says exists. Right after a step starts,
 * the log route may not know the attempt for a moment: a 404 is retried for
 * a few polls before it counts.
 */
static int logs_follow_attempt(struct logs *lg, const char *step, int attempt,
			       struct log_copy *lc)
{
	int rc;

	for (int tries = 0;; tries++) {
		rc = logs_copy(lg, step, attempt, true, lc);
		if (rc != FERRY_ENOTFOUND || lc->begun || tries >= 10)
			return rc;
		sleep_ms(LOGS_POLL_MS);
	}
}

/* `ferry logs RUN STEP [-f] [--attempt N]`. */
static int logs_one(struct logs *lg, const char *step, int attempt, bool follow)
{
	struct log_copy lc = {0};
	int rc;

	if (follow && attempt == 0) {
		/* wait for the step to start; then follow the attempt running (or last run) */
		rc = logs_wait_attempt(lg, step, 1, true);
		if (rc == 0) {
			ferry_error_set("step \"%s\" of run %" PRId64 " ended without running, "
					"so it has no log", step, lg->id);
			return FERRY_ENOTFOUND;
		}
		if (rc < 0)
			return rc;
		return logs_follow_attempt(lg, step, 0, &lc);
	}
	return logs_copy(lg, step, attempt, follow, &lc);
}

/* `ferry logs RUN`: the latest attempt of every step that ran, in step order. */
static int logs_all(struct logs *lg)
{
	json_t *run = NULL;
	const json_t *step;
	bool printed = false;
	size_t i;
	int rc;

	if ((rc = logs_fetch_run(&run, lg, false)) < 0)
		return rc;
	json_array_foreach(json_object_get(run, "steps"), i, step) {
		struct log_copy lc = {.step = jstr(step, "name", "?"), .printed = &printed};

		if (jint(step, "attempts", 0) <= 0)
			continue;
		rc = logs_copy(lg, lc.step, 0, false, &lc);
		log_copy_finish(&lc);
		if (rc == FERRY_ENOTFOUND && !lc.begun)
			rc = 0; /* no attempt after all (a retry being set up): nothing to show */
		if (rc < 0)
			break;
	}
	if (rc == 0 && !printed)
		fprintf(stderr, "ferry: no step of run %" PRId64 " has run yet\n", lg->id);
	json_decref(run);
	return rc;
}

/*
 * `ferry logs RUN -f`: every attempt of every step, in step order, each
 * followed until it ends, until the run is over.
 */
static int logs_all_follow(struct logs *lg)
{
	json_t *run = NULL, *names = json_array();
	const json_t *step;
	bool printed = false;
	size_t i;
	int rc;

	if ((rc = logs_fetch_run(&run, lg, true)) < 0)
		goto out;
	json_array_foreach(json_object_get(run, "steps"), i, step)
		json_array_append_new(names, json_string(jstr(step, "name", "?")));
	json_array_foreach(names, i, step) {
		const char *name = json_string_value(step);

		for (int attempt = 1;; attempt++) {
			struct log_copy lc = {.step = name, .printed = &printed};

			rc = logs_wait_attempt(lg, name, attempt, false);
			if (rc <= 0)
				break;
			rc = logs_follow_attempt(lg, name, attempt, &lc);
			log_copy_finish(&lc);
			if (rc < 0)
				break;
		}
		if (rc < 0)
			goto out;
	}
	rc = 0;
out:
	json_decref(names);
	json_decref(run);
	return rc;
}

static int cmd_logs(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"follow", no_argument, NULL, 'f'},
		{"attempt", required_argument, NULL, OPT_ATTEMPT},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct logs lg = {0};
	const char *step = NULL;
	bool follow = false;
	int64_t attempt = 0;
	int ch, rc, status;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":fh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'f':
			follow = true;
			break;
		case OPT_ATTEMPT:
			if (parse_int64(optarg, &attempt) < 0 || attempt <= 0 || attempt > 1000000)
				return usage_error(x, "--attempt wants an attempt number such as 1, "
						   "not '%s'", optarg);
			break;
		case 'h':
			return print_help(x->cmd);
		default:
			return option_error(x, ch, argv);
		}
	}
	if (argc == optind)
		return usage_error(x, "missing RUN");
	if (argc - optind > 2)
		return usage_error(x, "unexpected argument '%s'", argv[optind + 2]);
	if (parse_run_id(x, argv[optind], &lg.id) != 0)
		return FX_USAGE;
	if (argc - optind == 2) {
		step = argv[optind + 1];
		if (*step == '\0')
			return usage_error(x, "STEP is empty");
	}
	if (attempt > 0 && step == NULL)
		return usage_error(x, "--attempt needs a STEP");
	if ((status = open_client(&lg.c)) != FX_OK)
		return status;
	if (step != NULL)
		rc = logs_one(&lg, step, (int)attempt, follow);
	else if (follow)
		rc = logs_all_follow(&lg);
	else
		rc = logs_all(&lg);
	status = FX_OK;
	if (rc < 0) {
		/* a 400 here is the daemon refusing what was checked above: not a usage error */
		status = report_request_error(lg.c, rc == FERRY_EINVALID ? FERRY_ERROR : rc);
	}
	client_free(lg.c);
	return status;
}

/* ---- continue ---- */

static int cmd_continue(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"data", required_argument, NULL, OPT_DATA},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	ferry_client *c = NULL;
	json_t *data = NULL, *body = NULL, *run = NULL;
	const char *step;
	char *esc = NULL, *path = NULL;
	json_error_t jerr;
	bool json = false;
	int64_t id;
	int ch, rc, status = FX_USAGE;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_DATA:
			json_decref(data);
			data = json_loads(optarg, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
			if (data == NULL) {
				usage_error(x, "--data is not valid JSON: %s (line %d, column %d)",
					    jerr.text, jerr.line, jerr.column);
				goto out;
			}
			break;
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
	if (argc - optind != 2) {
		status = usage_error(x, argc == optind ? "missing RUN and STEP" :
				     argc - optind == 1 ? "missing STEP" :
				     "expected RUN and STEP only");
		goto out;
	}
	if (parse_run_id(x, argv[optind], &id) != 0)
		goto out;
	step = argv[optind + 1];
	if (*step == '\0') {
		status = usage_error(x, "STEP is empty");
		goto out;
	}
	body = data != NULL ? json_pack("{s:O}", "data", data) : json_object();
	if (body == NULL) {
		fprintf(stderr, "ferry: cannot encode the request body\n");
		status = FX_FAIL;
		goto out;
	}
	if ((status = open_client(&c)) != FX_OK)
		goto out;
	esc = client_escape(step);
	path = xasprintf("/runs/%" PRId64 "/steps/%s/continue", id, esc);
	rc = client_request(&run, c, "POST", path, body);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	if (json)
		print_json(run);
	else
		printf("run %" PRId64 " step %s continued\n", id, step);
	status = FX_OK;
out:
	fflush(stdout);
	free(path);
	free(esc);
	json_decref(run);
	json_decref(body);
	json_decref(data);
	client_free(c);
	return status;
}

/* ---- dev, help ---- */

static int cmd_dev(const struct ctx *x, int argc, char **argv)
{
	if (argc < 2)
		return usage_error(x, "missing subcommand (run)");
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)
		return print_help(x->cmd);
	/* dev.h: argv[0] is "run". */
	return dev_main(argc - 1, argv + 1);
}

static void print_main_help(FILE *f);

static int cmd_help(const struct ctx *x, int argc, char **argv)
{
	const struct command *cmd;

	if (argc < 2) {
		print_main_help(stdout);
		return FX_OK;
	}
	cmd = find_command(argv[1]);
	if (cmd == NULL)
		return usage_error(x, "unknown command '%s'", argv[1]);
	return print_help(cmd);
}

/* ---- the command table and main ---- */

static const struct command commands[] = {
	{"validate", "Check a workflow file locally, without the daemon.",
	 "ferry validate FILE [-o json]",
	 "Options:\n"
	 "  -o, --output FORMAT   text (default) or json\n"
	 "\nExit status: 0 valid, 2 invalid (each error as FILE:LINE:COL: message on stderr).\n"
	 "\nExample:\n  ferry validate workflows/hello.yaml\n",
	 cmd_validate},
	{"submit", "Validate a workflow file, start a run of it and print the run id.",
	 "ferry submit FILE [-p NAME=VALUE]... [--watch] [-o json]\n"
	 "       ferry submit --workflow NAME [-p NAME=VALUE]... [--watch] [-o json]",
	 "Options:\n"
	 "  -p, --param NAME=VALUE  set a workflow parameter (repeatable; sent as a string)\n"
	 "  -w, --watch             follow the run until it ends; exit 1 if it fails\n"
	 "      --workflow NAME     run a workflow registered with the daemon instead of FILE\n"
	 "  -o, --output FORMAT     text (default: the run id alone) or json (the run object;\n"
	 "                          with --watch, the final run object)\n"
	 "\nExample:\n  ferry submit workflows/digits.yaml -p C=0.5 --watch\n",
	 cmd_submit},
	{"list", "List runs, newest first.",
	 "ferry list [--state STATE] [--workflow NAME] [--limit N] [-o json]",
	 "Options:\n"
	 "      --state STATE     pending, running, stopping, succeeded, failed or stopped\n"
	 "      --workflow NAME   only runs of this workflow\n"
	 "      --limit N         at most N runs\n"
	 "  -o, --output FORMAT   text (default) or json (the server's answer)\n"
	 "\nExample:\n  ferry list --state failed --limit 10\n",
	 cmd_list},
	{"get", "Show a run and its steps.",
	 "ferry get RUN [-o json]",
	 "Options:\n"
	 "  -o, --output FORMAT   text (default) or json (the run object)\n"
	 "\nExample:\n  ferry get 12\n",
	 cmd_get},
	{"watch", "Follow a run until it ends; exit 0 if it succeeded, 1 otherwise.",
	 "ferry watch RUN",
	 "Prints one line per step state change, or a live table on a terminal.\n"
	 "\nExample:\n  ferry watch 12\n",
	 cmd_watch},
	{"logs", "Print the log of a step, or of every step of a run.",
	 "ferry logs RUN [STEP] [-f] [--attempt N]",
	 "With STEP, prints the log of its latest attempt (or of attempt N). Without\n"
	 "STEP, prints the latest attempt of every step that ran, in step order, each\n"
	 "after a '==> STEP (attempt N) <==' line.\n"
	 "\nOptions:\n"
	 "  -f, --follow          keep printing as the job writes, until the attempt ends;\n"
	 "                        without STEP, follow each step in turn (and its retries)\n"
	 "                        until the run is over; waits for steps not started yet\n"
	 "      --attempt N       the log of attempt N of STEP (default: the latest)\n"
	 "\nExit status: 0 printed, 1 no such run, step or attempt, or ferryd failed,\n"
	 "2 usage error. The step's own outcome does not change it.\n"
	 "\nExamples:\n"
	 "  ferry logs 12 train -f\n"
	 "  ferry logs 12 train --attempt 1\n"
	 "  ferry logs 12\n",
	 cmd_logs},
	{"stop", "Stop a run: kill its running jobs, start nothing new.",
	 "ferry stop RUN [-o json]",
	 "Options:\n"
	 "  -o, --output FORMAT   text (default) or json (the run object)\n"
	 "\nExample:\n  ferry stop 12\n",
	 cmd_stop},
	{"retry", "Retry a failed or stopped run, or rerun a finished one from a step.",
	 "ferry retry RUN [--from STEP] [--watch] [-o json]",
	 "Options:\n"
	 "      --from STEP       rerun STEP and everything after it (any finished run)\n"
	 "  -w, --watch           follow the run until it ends; exit 1 if it fails\n"
	 "  -o, --output FORMAT   text (default) or json (the run object)\n"
	 "\nExample:\n  ferry retry 12 --from train\n",
	 cmd_retry},
	{"continue", "Let a waiting step (a gate) go on, optionally handing it data.",
	 "ferry continue RUN STEP [--data JSON] [-o json]",
	 "Options:\n"
	 "      --data JSON       any JSON value, recorded with the step's continuation\n"
	 "                        (checked here: invalid JSON is a usage error)\n"
	 "  -o, --output FORMAT   text (default) or json (the run object)\n"
	 "\nExit status: 0 continued, 1 no such run or step, the step is not waiting,\n"
	 "or ferryd failed, 2 usage error.\n"
	 "\nExamples:\n"
	 "  ferry continue 12 label\n"
	 "  ferry continue 12 approve --data '{\"approved_by\": \"ana\", \"ok\": true}'\n",
	 cmd_continue},
	{"dev", "Run a workflow in-process on this machine, for debugging.",
	 "ferry dev run FILE [--only STEP | --from STEP | --to STEP] [-p NAME=VALUE]...",
	 "Runs the engine inside the ferry process on the embedded database; no daemon\n"
	 "needed. See 'ferry dev run --help'.\n"
	 "\nExample:\n  ferry dev run workflows/hello.yaml --only greet\n",
	 cmd_dev},
	{"help", "Show help for ferry or one of its commands.",
	 "ferry help [COMMAND]",
	 "Example:\n  ferry help submit\n",
	 cmd_help},
};

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

static void print_main_help(FILE *f)
{
	fprintf(f, "usage: ferry COMMAND [OPTIONS] [ARGS]\n\n"
		   "Ferry runs ML workflows; this is its command-line client.\n\nCommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\nOptions:\n"
		   "  -h, --help      show this help ('ferry COMMAND --help' for a command)\n"
		   "      --version   show the version\n"
		   "\nEnvironment:\n"
		   "  FERRY_URL        where ferryd listens (default " CLIENT_DEFAULT_URL ")\n"
		   "  FERRY_API_TOKEN  API token (default: read from $FERRY_HOME/api-token)\n"
		   "  FERRY_HOME       state directory (default ./.ferry)\n"
		   "\nExit status: 0 success, 1 the run failed or ferryd could not be reached,\n"
		   "2 usage or validation error.\n"
		   "\nExample:\n  ferry submit workflows/hello.yaml --watch\n");
}

/* True when the locale named by LC_ALL, LC_CTYPE or LANG is UTF-8. */
static bool locale_is_utf8(void)
{
	static const char *const vars[] = {"LC_ALL", "LC_CTYPE", "LANG"};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);
		if (v != NULL && *v != '\0')
			return strcasestr(v, "utf-8") != NULL || strcasestr(v, "utf8") != NULL;
	}
	return false;
}

static bool stdout_is_ansi_tty(void)
{
	const char *term = getenv("TERM");
	return isatty(STDOUT_FILENO) && term != NULL && *term != '\0' &&
	       strcmp(term, "dumb") != 0;
}

int main(int argc, char **argv)
{
	struct cli cli = {.utf8 = locale_is_utf8(), .tty = stdout_is_ansi_tty()};
	const struct command *cmd;
	struct ctx x;

	if (argc < 2) {
		print_main_help(stderr);
		return FX_USAGE;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		print_main_help(stdout);
		return FX_OK;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
		printf("ferry %s\n", FERRY_VERSION);
		return FX_OK;
	}
	cmd = find_command(argv[1]);
	if (cmd == NULL) {
		fprintf(stderr, "ferry: unknown %s '%s'\nRun 'ferry --help' for the list of commands.\n",
			argv[1][0] == '-' ? "option" : "command", argv[1]);
		return FX_USAGE;
	}
	x.cli = &cli;
	x.cmd = cmd;
	return cmd->run(&x, argc - 1, argv + 1);
}

/*
 * format — see format.h. Times arrive as ISO-8601 UTC with milliseconds
 * ("2026-01-02T03:04:05.678Z", the API's one format) and are parsed by hand
 * so no locale or TZ quirk of strptime gets in the way.
 */
#include "cli/format.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/util.h"

/* ---- small JSON accessors ---- */

const char *jstr(const json_t *o, const char *key, const char *dflt)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s != NULL ? s : dflt;
}

json_int_t jint(const json_t *o, const char *key, json_int_t dflt)
{
	const json_t *v = json_object_get(o, key);
	return json_is_integer(v) ? json_integer_value(v) : dflt;
}

/* Writes the run id of obj (an integer, or a string) into buf. */
void id_text(char *buf, size_t n, const json_t *obj)
{
	const json_t *v = json_object_get(obj, "id");

	if (json_is_integer(v))
		snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	else if (json_is_string(v))
		snprintf(buf, n, "%s", json_string_value(v));
	else
		snprintf(buf, n, "?");
}

void print_json(const json_t *v)
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
bool jtime(const json_t *obj, const char *key, int64_t *out)
{
	const char *s = jstr(obj, key, NULL);
	return s != NULL && parse_time_ms(s, out) == 0;
}

/* "0.3s", "59.9s", "2m05s", "1h02m". */
void fmt_duration(char *buf, size_t n, int64_t ms)
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
void fmt_local(char *buf, size_t n, int64_t ms, bool with_date)
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

void fmt_span(char *buf, size_t n, const json_t *obj, int64_t now)
{
	int64_t ms;

	if (span_ms(obj, now, &ms))
		fmt_duration(buf, n, ms);
	else
		snprintf(buf, n, "-");
}

/* ---- states and markers ---- */

bool run_state_final(const char *state)
{
	return strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
	       strcmp(state, "stopped") == 0;
}

bool run_state_known(const char *state)
{
	static const char *const states[] = {
		"pending", "running", "stopping", "succeeded", "failed", "stopped",
	};
	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++)
		if (strcmp(state, states[i]) == 0)
			return true;
	return false;
}

const char *state_marker(const struct cli *cli, const char *state)
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

const char *dash(const struct cli *cli)
{
	return cli->utf8 ? "\u2014" : "-";
}

/* The last element of step["attempt_list"], or NULL. */
const json_t *last_attempt(const json_t *step)
{
	const json_t *list = json_object_get(step, "attempt_list");
	size_t n = json_array_size(list);
	return n > 0 ? json_array_get(list, n - 1) : NULL;
}

const char *run_display_state(const json_t *run)
{
	const char *state = jstr(run, "state", "?");

	if (strcmp(state, "running") == 0 && json_array_size(json_object_get(run, "waiting")) > 0)
		return "waiting";
	return state;
}

/* The labelling task a label step's outputs hold: "labelling task: …; " or "". */
static void label_task_text(char *buf, size_t n, const json_t *out)
{
	const json_t *task = json_object_get(out, "task");
	size_t len;

	buf[0] = '\0';
	if (!json_is_object(out) || jstr(out, "dataset", NULL) == NULL)
		return;
	len = (size_t)snprintf(buf, n, "labelling task: %" JSON_INTEGER_FORMAT " of %"
			       JSON_INTEGER_FORMAT " items in %s have no label in %s",
			       jint(out, "unlabelled", 0), jint(out, "items", 0),
			       jstr(out, "dataset", "?"), jstr(out, "labels", "?"));
	if (len < n && task != NULL && !json_is_null(task)) {
		/* the webhook's answer: its url when it has one, else the answer itself */
		const char *url = json_is_string(task) ? json_string_value(task) : jstr(task, "url", NULL);
		char *dump = url ? NULL : json_dumps(task, JSON_COMPACT);
		len += (size_t)snprintf(buf + len, n - len, " (task %.200s)", url ? url : dump ? dump : "?");
		free(dump);
	}
	if (len < n)
		snprintf(buf + len, n - len, "; ");
}

void step_waiting_hint(char *buf, size_t n, const json_t *run, const json_t *step)
{
	char id[32];
	size_t len;

	buf[0] = '\0';
	if (strcmp(jstr(step, "state", ""), "waiting") != 0)
		return;
	id_text(id, sizeof(id), run);
	label_task_text(buf, n, json_object_get(step, "outputs"));
	len = strlen(buf);
	if (len < n)
		snprintf(buf + len, n - len, "continue: ferry continue %s %s", id,
			 jstr(step, "name", "?"));
}

/*
 * Why a step is where it is, for people: its reason, else how its last
 * attempt ended ("exit 1", "signal 9"); for a step waiting to be retried,
 * when; for one waiting for a person, how to continue it. "" when there is
 * nothing to say.
 */
static void step_why(char *buf, size_t n, const json_t *run, const json_t *step)
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
	if (strcmp(state, "waiting") == 0) {
		step_waiting_hint(buf, n, run, step);
		return;
	}
	if (json_is_object(json_object_get(step, "items")) && running) {
		/* a fan-out under way: its items, not its (expansion) attempt */
		const json_t *it = json_object_get(step, "items");
		snprintf(buf, n, "items: %" JSON_INTEGER_FORMAT " of %" JSON_INTEGER_FORMAT " done, %"
			 JSON_INTEGER_FORMAT " running, %" JSON_INTEGER_FORMAT " failed", jint(it, "done", 0),
			 jint(it, "total", 0), jint(it, "active", 0), jint(it, "failed", 0));
		return;
	}
	if ((strcmp(state, "blocked") == 0 || strcmp(state, "ready") == 0) && json_is_string(json_object_get(step, "when"))) {
		/* not evaluated yet: the condition it waits to check */
		snprintf(buf, n, "when %s", jstr(step, "when", ""));
		return;
	}
	if (strcmp(state, "ready") == 0 && jtime(step, "not_before", &t)) {
		char when[32];
		fmt_local(when, sizeof(when), t, false);
		len = (size_t)snprintf(buf, n, "retry at %s", when);
		if (len >= n)
			return;
	}
	if (json_is_true(json_object_get(step, "cached"))) {
		const json_t *from = json_object_get(step, "cached_from");
		len = (size_t)snprintf(buf, n, "from cache (run %" JSON_INTEGER_FORMAT ")",
				       json_integer_value(json_object_get(from, "run")));
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
size_t display_width(const char *s)
{
	size_t w = 0;

	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			w++;
	return w;
}

void table_init(struct table *t, size_t ncols)
{
	t->ncols = ncols;
	t->nrows = 0;
	t->cells = NULL;
}

/* Appends a row of t->ncols cells (NULL means empty); copies them. */
void table_add(struct table *t, const char *const *row)
{
	size_t base = t->nrows * t->ncols;

	t->cells = xrealloc(t->cells, (base + t->ncols) * sizeof(char *));
	for (size_t i = 0; i < t->ncols; i++)
		t->cells[base + i] = xstrdup(row[i] != NULL ? row[i] : "");
	t->nrows++;
}

/* Prints t with columns two spaces apart and no trailing blanks. */
void table_print(const struct table *t, FILE *f, const char *indent)
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

void table_dispose(struct table *t)
{
	for (size_t i = 0; i < t->nrows * t->ncols; i++)
		free(t->cells[i]);
	free(t->cells);
	t->cells = NULL;
	t->nrows = 0;
}

/* One row per step: "marker name", state, attempts, duration, why. */
void table_add_steps(struct table *t, const struct cli *cli, const json_t *run, int64_t now)
{
	const json_t *steps = json_object_get(run, "steps");
	const json_t *step;
	size_t i;

	json_array_foreach(steps, i, step) {
		const char *state = jstr(step, "state", "?");
		json_int_t attempts = jint(step, "attempts", 0);
		char att[32], dur[32], why[1024], *name;
		const char *row[5];

		if (attempts > 0)
			snprintf(att, sizeof(att), "%" JSON_INTEGER_FORMAT " attempt%s",
				 attempts, attempts == 1 ? "" : "s");
		else
			snprintf(att, sizeof(att), "-");
		fmt_span(dur, sizeof(dur), step, now);
		step_why(why, sizeof(why), run, step);
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


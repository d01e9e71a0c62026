/*
 * monitor — `ferry monitor RUN STEP [-f] [--attempt N] [-o json]`: what the
 * job monitor sees of a step's attempt (GET …/steps/{step}/monitor,
 * orchestrator/monitor/monitor.md): the hang detector's state and why, its recent
 * samples as a table and utilization as a sparkline, the metric series the
 * job writes as small text charts with the watchpoints' results, the
 * evidence of a hang and the monitor's events. -f follows it: new samples
 * and events are printed as they come until the attempt ends. `ferry get`
 * shows the short form (monitor_print_brief) under its steps.
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

enum { OPT_MON_ATTEMPT = 660 };

#define FOLLOW_MS 1000
#define SPARK_WIDTH 40

/* values (NAN: shown as "!", a value that is not a number; INFINITY: a gap) as a line of block characters scaled from lo to hi, at most width wide. */
static void sparkline(FILE *out, const double *v, size_t n, size_t width)
{
	static const char *const blocks[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
	double lo = INFINITY, hi = -INFINITY;
	size_t from = n > width ? n - width : 0;

	for (size_t i = from; i < n; i++)
		if (isfinite(v[i])) {
			lo = v[i] < lo ? v[i] : lo;
			hi = v[i] > hi ? v[i] : hi;
		}
	for (size_t i = from; i < n; i++) {
		if (!isfinite(v[i])) {
			fputs(isnan(v[i]) ? "!" : " ", out);
			continue;
		}
		fputs(blocks[hi > lo ? (int)((v[i] - lo) / (hi - lo) * 7.0 + 0.5) : 0], out);
	}
}

/* A value of the document as text: a number, or NaN/Infinity/-Infinity as written (never a null read as 0). */
static void value_text(char *buf, size_t n, const json_t *x)
{
	if (json_is_number(x))
		snprintf(buf, n, "%.4g", json_number_value(x));
	else if (json_is_string(x))
		snprintf(buf, n, "%s", json_string_value(x));
	else
		snprintf(buf, n, "?");
}

/* One metric's series {"points":[[step,value],…],"min","last",…} as "NAME ▁▂▃ last X at step S (min …)". */
static void print_series(const char *indent, const char *name, const json_t *s)
{
	const json_t *pts = json_object_get(s, "points"), *p;
	size_t n = json_array_size(pts), i;
	double *v = xcalloc(n ? n : 1, sizeof(*v));
	char last[32];

	json_array_foreach(pts, i, p) {
		const json_t *x = json_array_get(p, 1);
		v[i] = json_is_number(x) ? json_number_value(x) : NAN; /* NaN, ±Infinity: drawn as "!" */
	}
	printf("%s%-12s ", indent, name);
	if (json_integer_value(json_object_get(s, "count")) == 0) {
		/* a watched metric the job never wrote: said so, not "last 0 at step 0" */
		printf("never written\n");
		free(v);
		return;
	}
	sparkline(stdout, v, n, SPARK_WIDTH);
	value_text(last, sizeof(last), json_object_get(s, "last"));
	printf("  last %s at step %lld", last, (long long)json_integer_value(json_object_get(s, "last_step")));
	if (json_is_number(json_object_get(s, "min")))
		printf(", min %.4g at step %lld", json_number_value(json_object_get(s, "min")),
		       (long long)json_integer_value(json_object_get(s, "min_step")));
	printf(" (%lld values)\n", (long long)json_integer_value(json_object_get(s, "count")));
	free(v);
}

static void print_watch(const char *indent, const json_t *watch)
{
	const json_t *w;
	size_t i;

	json_array_foreach(watch, i, w) {
		const char *state = jstr(w, "state", "ok");
		printf("%s%-12s %-32s %s", indent, jstr(w, "metric", "?"), jstr(w, "rule", "?"),
		       strcmp(state, "fired") == 0 ? "FIRED" : "ok");
		if (strcmp(state, "fired") == 0)
			printf(" (%s): %s", jstr(w, "action", "notify"), jstr(w, "message", ""));
		fputc('\n', stdout);
	}
}

/* Utilization of the samples as a sparkline with its last value. */
static void print_util(const char *indent, const json_t *samples)
{
	size_t n = json_array_size(samples), i;
	double *v = xcalloc(n ? n : 1, sizeof(*v)), last = NAN;
	const json_t *s;

	json_array_foreach(samples, i, s) {
		const json_t *u = json_object_get(s, "util");
		v[i] = json_is_number(u) ? json_number_value(u) : INFINITY; /* not measured yet: a gap */
		if (json_is_number(u))
			last = v[i];
	}
	if (n > 0 && isfinite(last)) {
		printf("%sutilization  ", indent);
		sparkline(stdout, v, n, SPARK_WIDTH);
		printf("  %.1f%%\n", last);
	} else if (n > 0) {
		/* no sample had a rate yet (the first one has none): said, not drawn as an empty line */
		printf("%sutilization  not measured (%zu sample%s, none with a rate yet)\n", indent, n, n == 1 ? "" : "s");
	}
	free(v);
}

static bool step_over(const json_t *doc)
{
	const char *st = jstr(doc, "step_state", "");
	return strcmp(st, "succeeded") == 0 || strcmp(st, "failed") == 0 || strcmp(st, "stopped") == 0 ||
	       strcmp(st, "skipped") == 0;
}

/*
 * What the hang detector concluded, said for the state the step is in: its
 * state and why while the step runs; once it is over, "never judged" for an
 * attempt that ended within the warm-up (not "warmup: not judged until …"),
 * else its last verdict before the end. The caller's to free.
 */
static char *verdict(const json_t *doc)
{
	const char *state = jstr(doc, "state", "?"), *why = jstr(doc, "why", ""), *until;

	if (!step_over(doc))
		return xasprintf("%s: %s", state, why);
	if (strcmp(state, "warmup") == 0) {
		long secs = (until = strstr(why, "until ")) != NULL ? strtol(until + 6, NULL, 10) : 0;
		return secs > 0 ? xasprintf("never judged: it ended within the first %ld s, the warm-up", secs)
				: xstrdup("never judged: it ended within the warm-up");
	}
	if (strstr(why, "detection is off") != NULL)
		return xstrdup("hang detection was off for this step");
	return xasprintf("last verdict before it ended: %s (%s)", state, why);
}

void monitor_print_brief(const json_t *doc)
{
	const json_t *series = json_object_get(doc, "series"), *s;
	const char *name;
	char *v = verdict(doc);

	printf("  %-12s %s\n", jstr(doc, "step", "?"), v);
	free(v);
	print_util("    ", json_object_get(doc, "samples"));
	json_object_foreach((json_t *)series, name, s)
		print_series("    ", name, s);
	print_watch("    ", json_object_get(doc, "watch"));
}

static void sample_row(struct table *t, const json_t *s)
{
	char at[40], util[16], dem[16], cpu[24], rc[24], wc[24], lg[24];
	const json_t *u = json_object_get(s, "util"), *d = json_object_get(s, "demand");

	fmt_local(at, sizeof(at), jint(s, "at_ms", 0), false);
	snprintf(util, sizeof(util), json_is_number(u) ? "%.1f%%" : "-", json_number_value(u));
	snprintf(dem, sizeof(dem), json_is_number(d) ? "%.1f%%" : "-", json_number_value(d));
	snprintf(cpu, sizeof(cpu), "%lld", (long long)jint(s, "cpu_ms", -1));
	snprintf(rc, sizeof(rc), "%lld", (long long)jint(s, "rchar", -1));
	snprintf(wc, sizeof(wc), "%lld", (long long)jint(s, "wchar", -1));
	snprintf(lg, sizeof(lg), "%lld", (long long)jint(s, "log_bytes", -1));
	const char *row[] = {at, util, dem, cpu, rc, wc, lg, jstr(s, "phase", "-"), jstr(s, "state", "?")};
	table_add(t, row);
}

/* UTIL: the CPU (or GPU) share the job got; DEMAND: what its busiest thread asked for (monitor.md) */
static const char *const sample_head[] = {"AT", "UTIL", "DEMAND", "CPU_MS", "RCHAR", "WCHAR", "LOG", "PHASE", "STATE"};

static void print_event(const json_t *ev)
{
	char at[40];
	int64_t ts;
	const json_t *d = json_object_get(ev, "detail");

	if (jtime(ev, "at", &ts))
		fmt_local(at, sizeof(at), ts, false);
	else
		snprintf(at, sizeof(at), "%s", jstr(ev, "at", "-"));
	printf("  %s  #%lld %-24s %s\n", at, (long long)jint(ev, "attempt", 0), jstr(ev, "kind", "?"),
	       jstr(d, "message", ""));
	if (jstr(d, "summary", NULL))
		printf("      %s\n", jstr(d, "summary", ""));
}

static void print_doc(const json_t *doc)
{
	const json_t *samples = json_object_get(doc, "samples"), *s, *series = json_object_get(doc, "series");
	const json_t *events = json_object_get(doc, "events");
	size_t n = json_array_size(samples), i;
	const char *name;
	struct table t;

	char *v = verdict(doc);

	printf("Run %lld step %s attempt %lld, %s; the monitor: %s\n", (long long)jint(doc, "run", 0),
	       jstr(doc, "step", "?"), (long long)jint(doc, "attempt", 0), jstr(doc, "step_state", "?"), v);
	free(v);
	if (jstr(doc, "phase", NULL))
		printf("  phase: %s\n", jstr(doc, "phase", ""));
	if (n > 0) {
		print_util("  ", samples);
		table_init(&t, sizeof(sample_head) / sizeof(sample_head[0]));
		table_add(&t, sample_head);
		for (i = n > 10 ? n - 10 : 0; i < n; i++)
			sample_row(&t, json_array_get(samples, i));
		table_print(&t, stdout, "  ");
		table_dispose(&t);
	}
	if (json_object_size(series) > 0) {
		printf("Metrics:\n");
		json_object_foreach((json_t *)series, name, s)
			print_series("  ", name, s);
	}
	if (json_array_size(json_object_get(doc, "watch")) > 0) {
		printf("Watchpoints:\n");
		print_watch("  ", json_object_get(doc, "watch"));
	}
	if (json_array_size(events) > 0) {
		printf("Events:\n");
		json_array_foreach(events, i, s)
			print_event(s);
	}
}

/* -f: prints what is new in each answer until the step is over. */
static int follow(ferry_client *c, const char *path, json_t *doc)
{
	int64_t last_at = 0;
	size_t events_seen = 0;
	int rc;

	print_doc(doc);
	if (json_array_size(json_object_get(doc, "samples")) > 0)
		last_at = jint(json_array_get(json_object_get(doc, "samples"),
					     json_array_size(json_object_get(doc, "samples")) - 1), "at_ms", 0);
	events_seen = json_array_size(json_object_get(doc, "events"));
	fflush(stdout);
	while (!step_over(doc)) {
		const json_t *s;
		size_t i;
		json_t *next = NULL;

		sleep_ms(FOLLOW_MS);
		if ((rc = client_request(&next, c, "GET", path, NULL)) < 0)
			return report_request_error(c, rc);
		json_decref(doc);
		doc = next;
		json_array_foreach(json_object_get(doc, "samples"), i, s) {
			const json_t *u = json_object_get(s, "util");
			char at[40], util[16];
			if (jint(s, "at_ms", 0) <= last_at)
				continue;
			last_at = jint(s, "at_ms", 0);
			fmt_local(at, sizeof(at), last_at, false);
			snprintf(util, sizeof(util), json_is_number(u) ? "%.1f%%" : "-", json_number_value(u));
			printf("  %s  %-9s util %-6s cpu_ms %lld  rchar %lld  wchar %lld  log %lld%s%s\n", at,
			       jstr(s, "state", "?"), util, (long long)jint(s, "cpu_ms", -1),
			       (long long)jint(s, "rchar", -1), (long long)jint(s, "wchar", -1),
			       (long long)jint(s, "log_bytes", -1), jstr(s, "phase", NULL) ? "  phase " : "",
			       jstr(s, "phase", ""));
		}
		for (i = events_seen; i < json_array_size(json_object_get(doc, "events")); i++)
			print_event(json_array_get(json_object_get(doc, "events"), i));
		events_seen = json_array_size(json_object_get(doc, "events"));
		fflush(stdout);
	}
	printf("step %s %s: %s\n", jstr(doc, "step", "?"), jstr(doc, "step_state", "?"), jstr(doc, "why", ""));
	json_decref(doc);
	return FX_OK;
}

int cmd_monitor(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"follow", no_argument, NULL, 'f'},
		{"attempt", required_argument, NULL, OPT_MON_ATTEMPT},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	ferry_client *c = NULL;
	json_t *doc = NULL;
	char *path = NULL, *step;
	bool json = false, fol = false;
	int64_t id, attempt = 0;
	int ch, rc, status;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":fo:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'f':
			fol = true;
			break;
		case OPT_MON_ATTEMPT:
			if (parse_int64(optarg, &attempt) < 0 || attempt < 1)
				return usage_error(x, "--attempt takes a number >= 1, not \"%s\"", optarg);
			break;
		case 'o':
			if ((status = parse_output(x, optarg, &json)) != FX_OK)
				return status;
			break;
		case 'h':
			return print_help(x->cmd);
		default:
			return option_error(x, ch, argv);
		}
	}
	if (argc - optind != 2)
		return usage_error(x, "expected RUN and STEP");
	if ((status = parse_run_id(x, argv[optind], &id)) != FX_OK)
		return status;
	step = client_escape(argv[optind + 1]);
	if ((status = open_client(&c)) != FX_OK) {
		free(step);
		return status;
	}
	path = attempt > 0 ? xasprintf("/runs/%" PRId64 "/steps/%s/monitor?attempt=%" PRId64, id, step, attempt)
			   : xasprintf("/runs/%" PRId64 "/steps/%s/monitor", id, step);
	free(step);
	rc = client_request(&doc, c, "GET", path, NULL);
	if (rc < 0) {
		status = report_request_error(c, rc);
	} else if (json) {
		print_json(doc);
		status = FX_OK;
	} else if (fol) {
		status = follow(c, path, doc);
		doc = NULL;
	} else {
		print_doc(doc);
		status = FX_OK;
	}
	json_decref(doc);
	free(path);
	client_free(c);
	return status;
}

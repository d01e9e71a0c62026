/*
 * Unit tests for orchestrator/watchpoints: the rule grammar and its error
 * messages, each rule firing and not firing at its boundary, the metrics
 * file followed as a job writes it (Python's real NaN output, partial
 * lines, truncation and replacement, long lines, the per-call read bound),
 * the downsampled series and the metric cap. Real files in a scratch
 * directory; the one child process (python3) is waited for by system(),
 * under timeout(1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/util.h"
#include "monitor/watchpoints.h"

static char dir[] = "/tmp/ferry-unit-wp.XXXXXX";

static int setup(void **state)
{
	(void)state;
	flog_level = FLOG_ERROR; /* each fired rule logs a line at info */
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char *cmd = xasprintf("rm -rf %s", dir);

	(void)state;
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
	free(cmd);
	return 0;
}

/* ---- helpers ---------------------------------------------------------- */

/* A watch for spec (JSON text, or NULL); fails the test when refused. */
static struct watch *mk(const char *spec)
{
	json_t *j = NULL;
	struct watch *w = NULL;

	if (spec != NULL) {
		j = json_loads(spec, 0, NULL);
		assert_non_null(j);
	}
	if (watch_new(&w, j) != 0)
		fail_msg("watch_new: %s", ferry_error_last());
	json_decref(j);
	return w;
}

/* Asserts that watch_new refuses spec with exactly message want. */
static void mk_bad(const char *spec, const char *want)
{
	json_t *j = json_loads(spec, 0, NULL);
	struct watch *w = (struct watch *)&w;

	assert_non_null(j);
	assert_int_equal(watch_new(&w, j), FERRY_EINVALID);
	assert_null(w);
	assert_string_equal(ferry_error_last(), want);
	json_decref(j);
}

static int feed(struct watch *w, const char *text)
{
	return watch_feed(w, text, strlen(text));
}

/* The next fired rule's message, or NULL; checks the metric when want_metric is set. */
static const char *take(struct watch *w, const char *want_metric)
{
	struct wp_fired f;

	if (watch_take_fired(w, &f) == 0)
		return NULL;
	if (want_metric != NULL)
		assert_string_equal(f.metric, want_metric);
	return f.message;
}

/* One counter of watch_stats_json. */
static long long stat_of(const struct watch *w, const char *key)
{
	json_t *s = watch_stats_json(w);
	long long v;

	assert_true(json_is_integer(json_object_get(s, key)));
	v = json_integer_value(json_object_get(s, key));
	json_decref(s);
	return v;
}

/* watch_series_json of one metric as compact text (the caller frees). */
static char *series_text(const struct watch *w, const char *metric)
{
	json_t *all = watch_series_json(w);
	char *s = json_dumps(json_object_get(all, metric), JSON_COMPACT | JSON_REAL_PRECISION(15));

	json_decref(all);
	assert_non_null(s);
	return s;
}

static char *path_of(const char *name)
{
	return xasprintf("%s/%s", dir, name);
}

/* Writes (mode "w") or appends (mode "a") text to path. */
static void put(const char *path, const char *mode, const char *text, size_t n)
{
	FILE *f = fopen(path, mode);

	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

static void puts_(const char *path, const char *mode, const char *text)
{
	put(path, mode, text, strlen(text));
}

/* ---- the grammar ------------------------------------------------------ */

static void test_wp__parse_good(void **state)
{
	static const struct {
		const char *text;
		enum wp_kind kind;
		enum wp_op op;
		enum wp_ref ref;
		double value;
		int64_t steps;
	} cases[] = {
		{"nan_or_inf", WP_NAN_OR_INF, 0, 0, 0, 0},
		{"  nan_or_inf \t", WP_NAN_OR_INF, 0, 0, 0, 0},
		{"not decreasing over 500 steps", WP_NOT_DECREASING, 0, 0, 0, 500},
		{" not  increasing\tover 1 step ", WP_NOT_INCREASING, 0, 0, 0, 1},
		{"not decreasing over 1000000000000 steps", WP_NOT_DECREASING, 0, 0, 0,
		 1000000000000LL},
		{"> 10", WP_COMPARE, WP_GT, 0, 10, 0},
		{">= -1e-3", WP_COMPARE, WP_GE, 0, -0.001, 0},
		{"<0.1", WP_COMPARE, WP_LT, 0, 0.1, 0},
		{"<= +2.5 ", WP_COMPARE, WP_LE, 0, 2.5, 0},
		{"> 10 * min", WP_COMPARE_REF, WP_GT, WP_REF_MIN, 10, 0},
		{">10*min", WP_COMPARE_REF, WP_GT, WP_REF_MIN, 10, 0},
		{"< 0.5 * max", WP_COMPARE_REF, WP_LT, WP_REF_MAX, 0.5, 0},
		{">= .5*first", WP_COMPARE_REF, WP_GE, WP_REF_FIRST, 0.5, 0},
	};
	struct wp_rule r;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(&r, 0xff, sizeof(r));
		if (wp_rule_parse(cases[i].text, &r) != 0)
			fail_msg("%s: %s", cases[i].text, ferry_error_last());
		assert_int_equal(r.kind, cases[i].kind);
		if (r.kind == WP_COMPARE || r.kind == WP_COMPARE_REF) {
			assert_int_equal(r.op, cases[i].op);
			assert_true(r.value == cases[i].value);
		}
		if (r.kind == WP_COMPARE_REF)
			assert_int_equal(r.ref, cases[i].ref);
		if (r.kind == WP_NOT_DECREASING || r.kind == WP_NOT_INCREASING)
			assert_int_equal(r.steps, cases[i].steps);
		assert_int_equal(wp_rule_parse(cases[i].text, NULL), 0); /* validation only */
	}
}

#define ANY "expected nan_or_inf, \"not decreasing over N steps\", \"not increasing over N " \
	"steps\", \"OP NUMBER\" or \"OP K * min|max|first\" (OP one of >, >=, <, <=)"

static void test_wp__parse_bad(void **state)
{
	static const struct {
		const char *text, *want;
	} cases[] = {
		{"", "watch rule \"\": " ANY ", but the rule ends there"},
		{"   ", "watch rule \"   \": " ANY ", but the rule ends there"},
		{"nan", "watch rule \"nan\": " ANY ", not \"nan\""},
		{"nan_or_inf\x01", "watch rule \"nan_or_inf\\x01\": " ANY ", not \"nan_or_inf\\x01\""},
		{"nan_or_inf x", "watch rule \"nan_or_inf x\": unexpected \"x\" after nan_or_inf; "
				 "expected the end of the rule"},
		{"not shrinking", "watch rule \"not shrinking\": expected \"decreasing\" or "
				  "\"increasing\" after \"not\", not \"shrinking\""},
		{"not", "watch rule \"not\": expected \"decreasing\" or \"increasing\" after \"not\", "
			"but the rule ends there"},
		{"not decreasing 500 steps", "watch rule \"not decreasing 500 steps\": expected "
					     "\"over\" after \"not decreasing\", not \"500\""},
		{"not decreasing over x steps", "watch rule \"not decreasing over x steps\": expected "
			"a whole number of steps from 1 to 1000000000000 after \"over\", not \"x\""},
		{"not decreasing over 0 steps", "watch rule \"not decreasing over 0 steps\": expected "
			"a whole number of steps from 1 to 1000000000000 after \"over\", not \"0\""},
		{"not decreasing over -5 steps", "watch rule \"not decreasing over -5 steps\": "
			"expected a whole number of steps from 1 to 1000000000000 after \"over\", "
			"not \"-5\""},
		{"not decreasing over 1000000000001 steps", "watch rule \"not decreasing over "
			"1000000000001 steps\": expected a whole number of steps from 1 to "
			"1000000000000 after \"over\", not \"1000000000001\""},
		{"not increasing over 500", "watch rule \"not increasing over 500\": expected "
					    "\"steps\" after 500, but the rule ends there"},
		{"not increasing over 500 epochs", "watch rule \"not increasing over 500 epochs\": "
			"expected \"steps\" after 500, not \"epochs\""},
		{"not increasing over 500 steps now", "watch rule \"not increasing over 500 steps "
			"now\": unexpected \"now\" after \"steps\"; expected the end of the rule"},
		{"== 3", "watch rule \"== 3\": \"==\" is not a watch operator; expected one of >, >=, "
			 "<, <="},
		{"=> 3", "watch rule \"=> 3\": \"=>\" is not a watch operator; expected one of >, >=, "
			 "<, <="},
		{"!= 3", "watch rule \"!= 3\": \"!=\" is not a watch operator; expected one of >, >=, "
			 "<, <="},
		{">> 3", "watch rule \">> 3\": \">>\" is not a watch operator; expected one of >, >=, "
			 "<, <="},
		{"> abc", "watch rule \"> abc\": expected a number after \">\", not \"abc\""},
		{">", "watch rule \">\": expected a number after \">\", but the rule ends there"},
		{"<= -", "watch rule \"<= -\": expected a number after \"<=\", not \"-\""},
		{"> 1e999", "watch rule \"> 1e999\": expected a finite number after \">\", not "
			    "\"1e999\""},
		{"> nan", "watch rule \"> nan\": expected a number after \">\", not \"nan\""},
		{"> 10 junk", "watch rule \"> 10 junk\": expected the end of the rule or \"* min\", "
			      "\"* max\" or \"* first\" after 10, not \"junk\""},
		{"> 1.50min", "watch rule \"> 1.50min\": expected the end of the rule or \"* min\", "
			      "\"* max\" or \"* first\" after 1.50, not \"min\""},
		{"> 10 * mean", "watch rule \"> 10 * mean\": expected min, max or first after \"*\", "
				"not \"mean\""},
		{"> 10 *", "watch rule \"> 10 *\": expected min, max or first after \"*\", but the "
			   "rule ends there"},
		{"> 10 * min please", "watch rule \"> 10 * min please\": unexpected \"please\" after "
				      "min; expected the end of the rule"},
	};
	char longer[201];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ferry_error_clear();
		if (wp_rule_parse(cases[i].text, NULL) != FERRY_EINVALID)
			fail_msg("accepted: %s", cases[i].text);
		assert_string_equal(ferry_error_last(), cases[i].want);
	}
	assert_int_equal(wp_rule_parse(NULL, NULL), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "watch rule \"\": " ANY ", but the rule ends there");
	memset(longer, 'x', 200);
	longer[200] = '\0';
	assert_int_equal(wp_rule_parse(longer, NULL), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "watch rule \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
			    "xxxxxxxxxxxxxxxxxxxxxxxx...\": the rule is 200 bytes; a rule is at most 128");
}

static void test_wp__actions(void **state)
{
	(void)state;
	assert_int_equal(wp_action_parse("notify"), WP_NOTIFY);
	assert_int_equal(wp_action_parse("fail"), WP_FAIL);
	assert_int_equal(wp_action_parse("restart"), WP_RESTART);
	assert_int_equal(wp_action_parse("Fail"), -1);
	assert_int_equal(wp_action_parse(""), -1);
	assert_int_equal(wp_action_parse(NULL), -1);
	assert_string_equal(wp_action_name(WP_NOTIFY), "notify");
	assert_string_equal(wp_action_name(WP_FAIL), "fail");
	assert_string_equal(wp_action_name(WP_RESTART), "restart");
}

static void test_wp__spec(void **state)
{
	struct watch *w;
	json_t *r;
	char *s, *big;
	size_t o = 0;

	(void)state;
	w = mk(NULL);
	watch_free(w);
	w = mk("{}");
	watch_free(w);
	mk_bad("[1]", "watch: expected an object of metric: [rules]");
	mk_bad("{\"a b\": []}", "watch: metric name \"a b\" is not valid; use 1-64 letters, digits, "
				"_ . - / or :, other than step");
	mk_bad("{\"step\": [\"> 1\"]}", "watch: metric name \"step\" is not valid; use 1-64 "
					"letters, digits, _ . - / or :, other than step");
	mk_bad("{\"loss\": 3}", "watch loss: expected a list of rules");
	mk_bad("{\"loss\": [{\"action\": \"fail\"}]}", "watch loss[0]: expected a rule, or "
		"{\"rule\": \"...\", \"action\": \"notify|fail|restart\"}");
	mk_bad("{\"loss\": [\"nan_or_inf\", {\"rule\": \"> 3\", \"action\": \"kill\"}]}",
	       "watch loss[1]: action \"kill\" is not one of notify, fail, restart");
	mk_bad("{\"loss\": [{\"rule\": \"> 3\", \"action\": 1}]}",
	       "watch loss[0]: action \"\" is not one of notify, fail, restart");
	mk_bad("{\"loss\": [{\"rule\": \"> x\", \"action\": \"fail\"}]}",
	       "watch loss rule \"> x\": expected a number after \">\", not \"x\"");
	/* 65 metrics, and 129 rules on one */
	big = xmalloc(65 * 32 + 16);
	o += (size_t)snprintf(big + o, 65 * 32 + 16 - o, "{");
	for (int i = 0; i < 65; i++)
		o += (size_t)snprintf(big + o, 65 * 32 + 16 - o, "%s\"m%d\": []", i ? "," : "", i);
	snprintf(big + o, 65 * 32 + 16 - o, "}");
	mk_bad(big, "watch: 65 metrics are watched; at most 64");
	free(big);
	big = xmalloc(129 * 16 + 32);
	o = (size_t)snprintf(big, 129 * 16 + 32, "{\"loss\": [");
	for (int i = 0; i < 129; i++)
		o += (size_t)snprintf(big + o, 129 * 16 + 32 - o, "%s\"> %d\"", i ? "," : "", i);
	snprintf(big + o, 129 * 16 + 32 - o, "]}");
	mk_bad(big, "watch: 129 rules; at most 128");
	free(big);

	/* string items, a bare string, and actions kept */
	w = mk("{\"loss\": [\"nan_or_inf\", {\"rule\": \"> 10 * min\", \"action\": \"fail\"}],"
	       " \"accuracy\": \"< 0.1\"}");
	r = watch_results_json(w);
	s = json_dumps(r, JSON_COMPACT);
	assert_string_equal(s, "[{\"metric\":\"loss\",\"rule\":\"nan_or_inf\",\"action\":\"notify\","
		"\"state\":\"ok\",\"step\":null,\"value\":null,\"message\":null},"
		"{\"metric\":\"loss\",\"rule\":\"> 10 * min\",\"action\":\"fail\",\"state\":\"ok\","
		"\"step\":null,\"value\":null,\"message\":null},"
		"{\"metric\":\"accuracy\",\"rule\":\"< 0.1\",\"action\":\"notify\",\"state\":\"ok\","
		"\"step\":null,\"value\":null,\"message\":null}]");
	free(s);
	json_decref(r);
	/* the watched metrics have their series before any value */
	assert_int_equal(stat_of(w, "metrics"), 2);
	s = series_text(w, "loss");
	assert_string_equal(s, "{\"points\":[],\"stride\":1,\"min\":null,\"min_step\":null,"
		"\"max\":null,\"max_step\":null,\"first\":null,\"first_step\":null,\"last\":null,"
		"\"last_step\":null,\"count\":0}");
	free(s);
	watch_free(w);
	watch_free(NULL);
}

/* ---- each rule at its boundary ---------------------------------------- */

static void test_wp__nan_or_inf(void **state)
{
	struct watch *w = mk("{\"loss\": [{\"rule\": \"nan_or_inf\", \"action\": \"fail\"}],"
			     " \"acc\": [\"nan_or_inf\"]}");
	struct wp_fired f;

	(void)state;
	assert_int_equal(feed(w, "{\"step\": 700, \"loss\": 0.5, \"acc\": 1e308}\n"), 0);
	assert_null(take(w, NULL));
	assert_int_equal(feed(w, "{\"step\": 800, \"loss\": NaN, \"acc\": 0.5}\n"), 1);
	assert_int_equal(watch_take_fired(w, &f), 1);
	assert_string_equal(f.metric, "loss");
	assert_string_equal(f.rule, "nan_or_inf");
	assert_string_equal(f.message, "loss is NaN at step 800");
	assert_int_equal(f.action, WP_FAIL);
	assert_int_equal(f.step, 800);
	assert_true(isnan(f.value));
	assert_int_equal(watch_take_fired(w, &f), 0);
	/* latched: a second NaN does not fire again */
	assert_int_equal(feed(w, "{\"step\": 801, \"loss\": NaN}\n"), 0);
	/* the strings "inf" and "-Infinity" are numbers too */
	assert_int_equal(feed(w, "{\"step\": 900, \"acc\": \"-inf\"}\n"), 1);
	assert_string_equal(take(w, "acc"), "acc is -Inf at step 900");
	watch_free(w);

	w = mk("{\"loss\": [\"nan_or_inf\"]}");
	assert_int_equal(feed(w, "{\"step\": 3, \"loss\": Infinity}\n"), 1);
	assert_string_equal(take(w, "loss"), "loss is Inf at step 3");
	watch_free(w);
	w = mk("{\"loss\": [\"nan_or_inf\"]}");
	assert_int_equal(feed(w, "{\"step\": 4, \"loss\": \"NAN\"}\n"), 1);
	assert_string_equal(take(w, "loss"), "loss is NaN at step 4");
	watch_free(w);
}

static void test_wp__compare(void **state)
{
	struct watch *w = mk("{\"a\": [\"> 10\"], \"b\": [\">= 10\"], \"c\": [\"< 0.1\"],"
			     " \"d\": [\"<= 0.1\"]}");

	(void)state;
	/* at the constant: only the inclusive operators fire */
	assert_int_equal(feed(w, "{\"step\": 1, \"a\": 10, \"b\": 9.99, \"c\": 0.1, \"d\": 0.11}\n"),
			 0);
	assert_int_equal(feed(w, "{\"step\": 2, \"a\": 10, \"b\": 10, \"c\": 0.1, \"d\": 0.1}\n"), 2);
	assert_string_equal(take(w, "b"), "b = 10 at step 2 >= 10");
	assert_string_equal(take(w, "d"), "d = 0.1 at step 2 <= 0.1");
	assert_null(take(w, NULL));
	/* NaN is no number to compare */
	assert_int_equal(feed(w, "{\"step\": 3, \"a\": NaN, \"c\": NaN}\n"), 0);
	assert_int_equal(feed(w, "{\"step\": 4, \"a\": 10.5, \"c\": 0.09}\n"), 2);
	assert_string_equal(take(w, "a"), "a = 10.5 at step 4 > 10");
	assert_string_equal(take(w, "c"), "c = 0.09 at step 4 < 0.1");
	watch_free(w);
}

static void test_wp__compare_ref(void **state)
{
	struct watch *w = mk("{\"loss\": [{\"rule\": \"> 10 * min\", \"action\": \"fail\"}],"
			     " \"acc\": [\"< 0.5 * max\", \">= 2 * first\"]}");

	(void)state;
	assert_int_equal(feed(w, "{\"step\": 10, \"loss\": 1.0, \"acc\": 0.3}\n"
				 "{\"step\": 40, \"loss\": 0.25, \"acc\": 0.5}\n"
				 "{\"step\": 100, \"loss\": 2.5, \"acc\": 0.25}\n"), 0);
	/* 2.5 is 10 * min exactly; 0.25 is 0.5 * max exactly; 0.5 < 2 * 0.3 */
	assert_null(take(w, NULL));
	assert_int_equal(feed(w, "{\"step\": 300, \"loss\": 12.5, \"acc\": 0.6}\n"), 2);
	assert_string_equal(take(w, "loss"), "loss = 12.5 at step 300 > 10 * min "
					      "(min 0.25 at step 40)");
	assert_string_equal(take(w, "acc"), "acc = 0.6 at step 300 >= 2 * first "
					     "(first 0.3 at step 10)");
	assert_int_equal(feed(w, "{\"step\": 301, \"acc\": 0.2999}\n"), 1);
	assert_string_equal(take(w, "acc"), "acc = 0.2999 at step 301 < 0.5 * max "
					     "(max 0.6 at step 300)");
	watch_free(w);

	/* the reference is the history before the value: a first value never fires */
	w = mk("{\"x\": [\"> 10 * min\"]}");
	assert_int_equal(feed(w, "{\"x\": -1}\n"), 0);
	assert_int_equal(feed(w, "{\"x\": -9}\n"), 1);
	assert_string_equal(take(w, "x"), "x = -9 at step 2 > 10 * min (min -1 at step 1)");
	watch_free(w);
}

static void test_wp__not_decreasing(void **state)
{
	struct watch *w = mk("{\"loss\": [\"not decreasing over 500 steps\"]}");
	char line[128];

	(void)state;
	assert_int_equal(feed(w, "{\"step\": 0, \"loss\": 1.0}\n{\"step\": 1200, \"loss\": 0.3}\n"),
			 0);
	for (int s = 1300; s < 1700; s += 100) {
		snprintf(line, sizeof(line), "{\"step\": %d, \"loss\": 0.31}\n", s);
		assert_int_equal(feed(w, line), 0);
	}
	assert_int_equal(feed(w, "{\"step\": 1699, \"loss\": 0.3}\n"), 0); /* equal is no progress */
	assert_int_equal(feed(w, "{\"step\": 1700, \"loss\": 0.31}\n"), 1);
	assert_string_equal(take(w, "loss"), "loss did not decrease over 500 steps (best 0.3 at step "
					      "1200, now 0.31 at step 1700)");
	watch_free(w);

	/* only after N steps of history; a flat series fires at exactly N */
	w = mk("{\"loss\": [\"not decreasing over 500 steps\"]}");
	assert_int_equal(feed(w, "{\"step\": 0, \"loss\": 1}\n{\"step\": 499, \"loss\": 1}\n"), 0);
	assert_int_equal(feed(w, "{\"step\": 500, \"loss\": 1}\n"), 1);
	watch_free(w);

	/* progress resets the clock; NaN is no progress */
	w = mk("{\"loss\": [\"not decreasing over 500 steps\"]}");
	assert_int_equal(feed(w, "{\"step\": 0, \"loss\": 1}\n{\"step\": 400, \"loss\": 0.9}\n"
				 "{\"step\": 899, \"loss\": NaN}\n"), 0);
	assert_int_equal(feed(w, "{\"step\": 900, \"loss\": NaN}\n"), 1);
	assert_string_equal(take(w, "loss"), "loss did not decrease over 500 steps (best 0.9 at step "
					      "400, now NaN at step 900)");
	watch_free(w);

	/* no "step": the line's ordinal is the step */
	w = mk("{\"acc\": [\"not increasing over 3 steps\"]}");
	assert_int_equal(feed(w, "{\"acc\": 0.5}\n{\"acc\": 0.6}\n{\"acc\": 0.6}\n{\"acc\": 0.1}\n"),
			 0);
	assert_int_equal(feed(w, "{\"acc\": 0.55}\n"), 1);
	assert_string_equal(take(w, "acc"), "acc did not increase over 3 steps (best 0.6 at step 2, "
					     "now 0.55 at step 5)");
	watch_free(w);
}

static void test_wp__take_order(void **state)
{
	struct watch *w = mk("{\"a\": [\"> 1\"], \"b\": [{\"rule\": \"> 1\", \"action\": \"restart\"}]}");
	struct wp_fired f;
	json_t *r;
	char *s;

	(void)state;
	/* b fires first, though a's rule comes first in the spec */
	assert_int_equal(feed(w, "{\"step\": 5, \"b\": 2}\n{\"step\": 6, \"a\": 3}\n"), 2);
	assert_int_equal(watch_take_fired(w, &f), 1);
	assert_string_equal(f.metric, "b");
	assert_int_equal(f.action, WP_RESTART);
	assert_int_equal(f.step, 5);
	assert_true(f.value == 2);
	assert_int_equal(watch_take_fired(w, &f), 1);
	assert_string_equal(f.metric, "a");
	assert_int_equal(watch_take_fired(w, &f), 0);
	r = watch_results_json(w);
	s = json_dumps(r, JSON_COMPACT);
	assert_string_equal(s, "[{\"metric\":\"a\",\"rule\":\"> 1\",\"action\":\"notify\","
		"\"state\":\"fired\",\"step\":6,\"value\":3.0,\"message\":\"a = 3 at step 6 > 1\"},"
		"{\"metric\":\"b\",\"rule\":\"> 1\",\"action\":\"restart\",\"state\":\"fired\","
		"\"step\":5,\"value\":2.0,\"message\":\"b = 2 at step 5 > 1\"}]");
	free(s);
	json_decref(r);
	watch_free(w);
}

/* ---- the file --------------------------------------------------------- */

static void test_wp__python_nan(void **state)
{
	char *path = path_of("python.jsonl"), *cmd, *text = NULL;
	struct watch *w = mk("{\"loss\": [\"nan_or_inf\"], \"acc\": [\"nan_or_inf\"]}");
	size_t len;

	(void)state;
	/* the real format: what json.dumps writes for non-finite floats */
	cmd = xasprintf("timeout 30 python3 -c 'import json; "
			"print(json.dumps({\"step\": 1, \"loss\": float(\"nan\")})); "
			"print(json.dumps({\"step\": 2, \"loss\": 0.5, \"acc\": float(\"-inf\")})); "
			"print(json.dumps({\"step\": 3, \"loss\": float(\"inf\"), \"note\": \"x\"}))'"
			" > %s", path);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(file_read(&text, &len, path), 0);
	assert_string_equal(text, "{\"step\": 1, \"loss\": NaN}\n"
				  "{\"step\": 2, \"loss\": 0.5, \"acc\": -Infinity}\n"
				  "{\"step\": 3, \"loss\": Infinity, \"note\": \"x\"}\n");
	assert_int_equal(watch_follow(w, path), 2);
	assert_string_equal(take(w, "loss"), "loss is NaN at step 1");
	assert_string_equal(take(w, "acc"), "acc is -Inf at step 2");
	assert_int_equal(stat_of(w, "lines"), 3);
	assert_int_equal(stat_of(w, "malformed"), 0);
	assert_int_equal(stat_of(w, "offset"), (long long)len);
	free(text);
	text = series_text(w, "loss");
	/* non-finite values are "NaN", "Infinity" (as the events say them); min and max over the finite ones; "note" is no series */
	assert_string_equal(text, "{\"points\":[[1,\"NaN\"],[2,0.5],[3,\"Infinity\"]],\"stride\":1,\"min\":0.5,"
		"\"min_step\":2,\"max\":0.5,\"max_step\":2,\"first\":0.5,\"first_step\":2,"
		"\"last\":\"Infinity\",\"last_step\":3,\"count\":3}");
	assert_int_equal(stat_of(w, "metrics"), 2);
	free(text);
	free(cmd);
	free(path);
	watch_free(w);
}

static void test_wp__malformed(void **state)
{
	struct watch *w = mk(NULL);
	char *s;

	(void)state;
	assert_int_equal(feed(w, "not json\n"
				 "[1, 2]\n"
				 "{\"loss\":\n"
				 "{\"loss\": NaNx}\n"
				 "\n  \r\n"
				 "{\"name\": \"x\", \"ok\": true, \"nested\": {\"loss\": 7}, \"loss\": 1,"
				 " \"tags\": [1], \"nil\": null}\n"
				 "{\"note\": \"Infinity and NaN\", \"loss\": 2, \"step\": \"three\"}\n"
				 "{\"loss\": 3, \"big\": 123456789012345678901234567890}\n"),
			 0);
	assert_int_equal(stat_of(w, "lines"), 7); /* blank lines are not lines */
	assert_int_equal(stat_of(w, "malformed"), 4);
	assert_int_equal(stat_of(w, "metrics"), 2); /* loss and big */
	s = series_text(w, "loss");
	/* a "step" that is no number leaves the line's ordinal */
	assert_string_equal(s, "{\"points\":[[5,1.0],[6,2.0],[7,3.0]],\"stride\":1,\"min\":1.0,"
		"\"min_step\":5,\"max\":3.0,\"max_step\":7,\"first\":1.0,\"first_step\":5,"
		"\"last\":3.0,\"last_step\":7,\"count\":3}");
	free(s);
	watch_free(w);
}

static void test_wp__partial_line(void **state)
{
	char *path = path_of("partial.jsonl"), *s;
	struct watch *w = mk("{\"loss\": [\"< 0.45\"]}");
	const char *l1 = "{\"step\": 1, \"loss\": 0.5}\n";

	(void)state;
	assert_int_equal(watch_follow(w, path), 0); /* not there yet */
	assert_int_equal(stat_of(w, "offset"), 0);
	puts_(path, "w", l1);
	puts_(path, "a", "{\"step\": 2, \"lo");
	assert_int_equal(watch_follow(w, path), 0);
	assert_int_equal(stat_of(w, "lines"), 1);
	assert_int_equal(stat_of(w, "offset"), (long long)strlen(l1));
	assert_int_equal(watch_follow(w, path), 0); /* nothing new: the half line still waits */
	assert_int_equal(stat_of(w, "lines"), 1);
	puts_(path, "a", "ss\": 0.4}\n");
	assert_int_equal(watch_follow(w, path), 1);
	assert_string_equal(take(w, "loss"), "loss = 0.4 at step 2 < 0.45");
	assert_int_equal(stat_of(w, "lines"), 2);
	assert_int_equal(stat_of(w, "malformed"), 0);
	/* the job ended with a line and no newline: follow_end takes it */
	puts_(path, "a", "{\"step\": 3, \"loss\": 0.3}");
	assert_int_equal(watch_follow(w, path), 0);
	assert_int_equal(stat_of(w, "lines"), 2);
	assert_int_equal(watch_follow_end(w, path), 0);
	assert_int_equal(stat_of(w, "lines"), 3);
	s = series_text(w, "loss");
	assert_non_null(strstr(s, "\"points\":[[1,0.5],[2,0.4],[3,0.3]]"));
	free(s);
	free(path);
	watch_free(w);
}

static void test_wp__truncate_and_replace(void **state)
{
	char *path = path_of("trunc.jsonl"), *other = path_of("trunc.new"), *s;
	struct watch *w = mk(NULL);
	const char *two = "{\"step\": 1, \"loss\": 1}\n{\"step\": 2, \"loss\": 2}\n";
	const char *one = "{\"step\": 9, \"loss\": 9}\n";

	(void)state;
	assert_true(watch_mtime_ns(w) < 0); /* no file read yet */
	puts_(path, "w", two);
	assert_int_equal(watch_follow(w, path), 0);
	assert_int_equal(stat_of(w, "offset"), (long long)strlen(two));
	{
		/* the mtime of the file read: the hang rule's cadence of metrics lines */
		struct stat st;
		assert_int_equal(stat(path, &st), 0);
		assert_true(watch_mtime_ns(w) == (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
	}
	/* truncated and rewritten shorter: read again from 0 */
	puts_(path, "w", one);
	assert_int_equal(watch_follow(w, path), 0);
	assert_int_equal(stat_of(w, "restarts"), 1);
	assert_int_equal(stat_of(w, "offset"), (long long)strlen(one));
	assert_int_equal(stat_of(w, "lines"), 3);
	/* replaced by another file of the same size or more: a new inode, read from 0 */
	puts_(other, "w", two);
	assert_int_equal(rename(other, path), 0);
	assert_int_equal(watch_follow(w, path), 0);
	assert_int_equal(stat_of(w, "restarts"), 2);
	assert_int_equal(stat_of(w, "lines"), 5);
	assert_int_equal(stat_of(w, "offset"), (long long)strlen(two));
	s = series_text(w, "loss");
	assert_non_null(strstr(s, "\"points\":[[1,1.0],[2,2.0],[9,9.0],[1,1.0],[2,2.0]]"));
	free(s);
	/* removed: not an error, nothing changes; no mtime */
	assert_int_equal(unlink(path), 0);
	assert_int_equal(watch_follow(w, path), 0);
	assert_int_equal(stat_of(w, "lines"), 5);
	assert_true(watch_mtime_ns(w) < 0);
	free(other);
	free(path);
	watch_free(w);
}

static void test_wp__not_a_file(void **state)
{
	char *fifo = path_of("fifo"), *want;
	struct watch *w = mk(NULL);

	(void)state;
	assert_int_equal(watch_follow(w, dir), FERRY_ERROR);
	want = xasprintf("metrics file %s: not a regular file", dir);
	assert_string_equal(ferry_error_last(), want);
	free(want);
	/* a FIFO with no writer: the open must not wait for one */
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(watch_follow(w, fifo), FERRY_ERROR);
	want = xasprintf("metrics file %s: not a regular file", fifo);
	assert_string_equal(ferry_error_last(), want);
	free(want);
	assert_true(watch_mtime_ns(w) < 0);
	/* a link is not followed (the job's file: lib/jobfile.h), and gives no mtime */
	{
		char *target = path_of("linked.jsonl"), *link = path_of("link.jsonl");
		puts_(target, "w", "{\"loss\": 1}\n");
		unlink(link);
		assert_int_equal(symlink(target, link), 0);
		assert_int_equal(watch_follow(w, link), FERRY_ERROR);
		assert_true(watch_mtime_ns(w) < 0);
		assert_int_equal(stat_of(w, "lines"), 0);
		free(target), free(link);
	}
	free(fifo);
	watch_free(w);
}

static void test_wp__long_line(void **state)
{
	char *path = path_of("long.jsonl"), *big = xmalloc(WP_LINE_MAX + 2);
	struct watch *w = mk("{\"loss\": [\"> 1\"]}");

	(void)state;
	/* a complete line one byte over the limit, then a good one */
	memset(big, ' ', WP_LINE_MAX + 1);
	memcpy(big, "{\"loss\": 5", 10);
	big[WP_LINE_MAX] = '}';
	big[WP_LINE_MAX + 1] = '\n';
	put(path, "w", big, WP_LINE_MAX + 2);
	puts_(path, "a", "{\"loss\": 0.5}\n");
	assert_int_equal(watch_follow(w, path), 0);
	assert_int_equal(stat_of(w, "skipped_long"), 1);
	assert_int_equal(stat_of(w, "lines"), 1);
	/* exactly the limit is a line */
	watch_free(w);
	w = mk("{\"loss\": [\"> 1\"]}");
	big[WP_LINE_MAX - 1] = '}';
	big[WP_LINE_MAX] = '\n';
	put(path, "w", big, WP_LINE_MAX + 1);
	assert_int_equal(watch_follow(w, path), 1);
	assert_int_equal(stat_of(w, "skipped_long"), 0);
	watch_free(w);

	/* a long line arriving in pieces: dropped as soon as it is too long, its tail later */
	w = mk("{\"loss\": [\"> 1\"]}");
	memset(big, 'x', WP_LINE_MAX);
	put(path, "w", big, 40000);
	assert_int_equal(watch_follow(w, path), 0);
	assert_int_equal(stat_of(w, "offset"), 0); /* could still be a line */
	put(path, "a", big, 40000);
	assert_int_equal(watch_follow(w, path), 0);
	assert_int_equal(stat_of(w, "skipped_long"), 1);
	assert_int_equal(stat_of(w, "offset"), 80000);
	put(path, "a", big, 30000);
	assert_int_equal(watch_follow(w, path), 0);
	assert_int_equal(stat_of(w, "offset"), 110000);
	puts_(path, "a", "xyz\n{\"loss\": 2}\n");
	assert_int_equal(watch_follow(w, path), 1);
	assert_string_equal(take(w, "loss"), "loss = 2 at step 1 > 1");
	assert_int_equal(stat_of(w, "skipped_long"), 1);
	assert_int_equal(stat_of(w, "lines"), 1);
	assert_int_equal(stat_of(w, "malformed"), 0);
	free(big);
	free(path);
	watch_free(w);
}

static void test_wp__read_bounded(void **state)
{
	char *path = path_of("big.jsonl"), line[64];
	struct watch *w = mk(NULL);
	FILE *f;
	long long size = 0, off;
	int n = 0;

	(void)state;
	f = fopen(path, "w");
	assert_non_null(f);
	while (size < WP_READ_MAX + WP_READ_MAX / 2) {
		int k = snprintf(line, sizeof(line), "{\"step\": %d, \"loss\": %d.5}\n", n, n);

		assert_int_equal(fwrite(line, 1, (size_t)k, f), (size_t)k);
		size += k;
		n++;
	}
	assert_int_equal(fclose(f), 0);
	assert_int_equal(watch_follow(w, path), 0);
	off = stat_of(w, "offset");
	assert_true(off <= WP_READ_MAX);
	assert_true(off > WP_READ_MAX - 64); /* up to the last whole line in the budget */
	assert_true(stat_of(w, "lines") < n);
	assert_int_equal(watch_follow(w, path), 0);
	assert_int_equal(stat_of(w, "offset"), size);
	assert_int_equal(stat_of(w, "lines"), n);
	assert_int_equal(stat_of(w, "malformed"), 0);
	free(path);
	watch_free(w);
}

/* ---- bounds ----------------------------------------------------------- */

static void test_wp__downsample(void **state)
{
	struct watch *w = mk("{\"loss\": [\"nan_or_inf\"]}");
	json_t *all, *s, *pts, *p;
	char line[64];
	size_t i;
	int64_t stride;

	(void)state;
	for (int k = 0; k < 511; k++) {
		snprintf(line, sizeof(line), "{\"step\": %d, \"loss\": %d}\n", k, k);
		feed(w, line);
	}
	all = watch_series_json(w);
	s = json_object_get(all, "loss");
	assert_int_equal(json_integer_value(json_object_get(s, "stride")), 1);
	assert_int_equal(json_array_size(json_object_get(s, "points")), 511);
	json_decref(all);
	/* the 512th value halves the grid: 256 points at stride 2, then the newest */
	feed(w, "{\"step\": 511, \"loss\": 511}\n");
	all = watch_series_json(w);
	s = json_object_get(all, "loss");
	pts = json_object_get(s, "points");
	assert_int_equal(json_integer_value(json_object_get(s, "stride")), 2);
	assert_int_equal(json_array_size(pts), 257);
	assert_int_equal(json_integer_value(json_array_get(json_array_get(pts, 255), 0)), 510);
	assert_int_equal(json_integer_value(json_array_get(json_array_get(pts, 256), 0)), 511);
	json_decref(all);

	/* 100000 values, a NaN among them off the grid: the rule sees it */
	for (int k = 512; k < 100000; k++) {
		if (k == 77777)
			snprintf(line, sizeof(line), "{\"step\": %d, \"loss\": NaN}\n", k);
		else
			snprintf(line, sizeof(line), "{\"step\": %d, \"loss\": %d}\n", k, k);
		feed(w, line);
	}
	assert_string_equal(take(w, "loss"), "loss is NaN at step 77777");
	all = watch_series_json(w);
	s = json_object_get(all, "loss");
	pts = json_object_get(s, "points");
	stride = json_integer_value(json_object_get(s, "stride"));
	assert_int_equal(json_integer_value(json_object_get(s, "count")), 100000);
	assert_true(json_array_size(pts) <= WP_MAX_POINTS);
	assert_true(json_array_size(pts) > WP_MAX_POINTS / 2);
	assert_int_equal(stride, 256); /* 100000 / 256 = 390 grid points: the first power that fits */
	/* a regular grid from the first value, and the newest at the end */
	json_array_foreach(pts, i, p) {
		if (i + 1 < json_array_size(pts))
			assert_int_equal(json_integer_value(json_array_get(p, 0)), (int64_t)i * stride);
	}
	p = json_array_get(pts, json_array_size(pts) - 1);
	assert_int_equal(json_integer_value(json_array_get(p, 0)), 99999);
	assert_true(json_real_value(json_array_get(p, 1)) == 99999);
	assert_true(json_real_value(json_object_get(s, "max")) == 99999);
	assert_int_equal(json_integer_value(json_object_get(s, "min_step")), 0);
	json_decref(all);
	watch_free(w);
}

static void test_wp__metric_cap(void **state)
{
	struct watch *w = mk("{\"zz_watched\": [\"> 100\"]}");
	json_t *all;
	char *line = xmalloc(4096);
	size_t o;

	(void)state;
	o = (size_t)snprintf(line, 4096, "{\"step\": 1");
	for (int i = 0; i < 70; i++)
		o += (size_t)snprintf(line + o, 4096 - o, ", \"m%d\": %d", i, i);
	snprintf(line + o, 4096 - o, ", \"a b\": 1, \"zz_watched\": 101}\n");
	assert_int_equal(feed(w, line), 1);
	assert_string_equal(take(w, "zz_watched"), "zz_watched = 101 at step 1 > 100");
	assert_int_equal(stat_of(w, "metrics"), 64);
	/* m63..m69 found no room, "a b" is no metric name */
	assert_int_equal(stat_of(w, "ignored_metrics"), 8);
	all = watch_series_json(w);
	assert_int_equal(json_object_size(all), 64);
	assert_non_null(json_object_get(all, "m62"));
	assert_null(json_object_get(all, "m63"));
	json_decref(all);
	/* the same line again: the kept metrics take their values, the rest are counted again */
	assert_int_equal(feed(w, line), 0);
	assert_int_equal(stat_of(w, "ignored_metrics"), 16);
	free(line);
	watch_free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wp__parse_good),
		cmocka_unit_test(test_wp__parse_bad),
		cmocka_unit_test(test_wp__actions),
		cmocka_unit_test(test_wp__spec),
		cmocka_unit_test(test_wp__nan_or_inf),
		cmocka_unit_test(test_wp__compare),
		cmocka_unit_test(test_wp__compare_ref),
		cmocka_unit_test(test_wp__not_decreasing),
		cmocka_unit_test(test_wp__take_order),
		cmocka_unit_test(test_wp__python_nan),
		cmocka_unit_test(test_wp__malformed),
		cmocka_unit_test(test_wp__partial_line),
		cmocka_unit_test(test_wp__truncate_and_replace),
		cmocka_unit_test(test_wp__not_a_file),
		cmocka_unit_test(test_wp__long_line),
		cmocka_unit_test(test_wp__read_bounded),
		cmocka_unit_test(test_wp__downsample),
		cmocka_unit_test(test_wp__metric_cap),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * Unit tests for the table of step kinds (orchestrator/plan/kind.h, steps/):
 * every row is well formed and found by name, each built-in kind has the
 * flags the engine, the planner and the store rely on, the config takes
 * exactly the kind keys each row lists, the engine's entry points dispatch
 * through the rows (no database needed for the paths tested here), and a
 * kind registered only in these tests is parsed and prepared like a
 * built-in one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "plan/config.h"
#include "plan/kind.h"
#include "steps/keys.h"
#include "lib/util.h"

/* ---- a kind that exists only here ---------------------------------------- */

/* Claimed: succeeds at once with its (rendered) dataset as output `seen`. */
static int probe_prepare(struct step_result *res, json_t **env, const struct step_run *r)
{
	(void)env;
	res->outcome = OUTCOME_SUCCEEDED;
	res->outputs = json_pack("{s:O}", "seen", json_object_get(r->spec, "dataset"));
	return 1;
}

static const struct step_key probe_keys[] = {
	{KEY_DATASET, .required = 1, .hint = "what to probe"},
	{KEY_ON_TIMEOUT},
	{0},
};

static const struct step_kind kind_probe = {
	.name = "probe", .flags = SKF_DAEMON | SKF_INPUTS,
	.command = SKC_FORBIDDEN, .no_command = "probes and runs no command",
	.keys = probe_keys,
	.prepare = probe_prepare,
};

static int setup(void **state)
{
	(void)state;
	return step_kind_register(&kind_probe);
}

/* ---- helpers ------------------------------------------------------------- */

static size_t nkinds(void)
{
	size_t n = 0;

	while (step_kind_at(n) != NULL)
		n++;
	return n;
}

/* Parses yaml; returns the code, with *errs (all joined, the caller frees) on failure. */
static int parse(const char *yaml, json_t **spec, char **errs)
{
	cfg_errors e = {0};
	char hash[65];
	int rc = cfg_workflow_parse(spec, hash, yaml, strlen(yaml), "w.yaml", &e);

	*errs = xstrdup("");
	for (size_t i = 0; i < e.len; i++) {
		char *joined = xasprintf("%s%s\n", *errs, e.items[i]);
		free(*errs);
		*errs = joined;
	}
	cfg_errors_dispose(&e);
	return rc;
}

/* A value in YAML for each kind key, valid for it. */
static const char *key_value(const char *name)
{
	{
	if (strcmp(name, "cache") == 0) return "true";
	if (strcmp(name, "gate") == 0) return "{accuracy: \">= 0.5\"}";
	if (strcmp(name, "model") == 0) return "m";
	if (strcmp(name, "dataset") == 0) return "data";
	if (strcmp(name, "labels") == 0) return "l.csv";
	if (strcmp(name, "webhook") == 0) return "https://labels.example.com/tasks";
	if (strcmp(name, "on_timeout") == 0) return "continue";
	if (strcmp(name, "artifact") == 0) return "a.pkl";
	if (strcmp(name, "version") == 0) return "minor";
	if (strcmp(name, "alias") == 0) return "staging";
	if (strcmp(name, "serve") == 0) return "[python3, serve.py]";
	if (strcmp(name, "traffic") == 0) return "20";
	if (strcmp(name, "replicas") == 0) return "2";
	if (strcmp(name, "sample") == 0) return "sample.json";
	if (strcmp(name, "deployment") == 0) return "prod";
	if (strcmp(name, "auto_stop") == 0) return "4h";
	if (strcmp(name, "load_test") == 0) return "{levels: [1, 2], requests: 10, p99_ms: \"< 50\"}";
	if (strcmp(name, "approve") == 0) return "true";
	if (strcmp(name, "canary") == 0) return "{steps: [10, 100], interval: 30s, max_error_rate: 1%}";
	if (strcmp(name, "hang") == 0) return "{period: 10s, on_hang: restart}";
	if (strcmp(name, "watch") == 0) return "{loss: [nan_or_inf]}";
	}
	return NULL;
}

/* The kind keys (those beside the generic ones and where a job runs), in the order of the messages. */
static const char *const key_names[] = {
	"cache", "gate", "model", "dataset", "labels", "webhook", "on_timeout", "artifact", "version", "alias",
	"serve", "traffic", "replicas", "sample", "deployment", "auto_stop", "load_test", "canary", "approve",
	"hang", "watch",
};
#define NKEYS (int)(sizeof(key_names) / sizeof(key_names[0]))

/* Whether kind k must have key name. */
static bool requires(const struct step_kind *k, const char *name)
{
	const struct step_key *row = step_kind_key(k, name);

	return row != NULL && row->required;
}

/*
 * A one-step workflow of kind k: a command when it needs one (or when
 * with_command), its required keys but `omit`, and key `extra` (-1: none).
 */
static char *workflow(const struct step_kind *k, int extra, int omit, bool with_command)
{
	char *y = xasprintf("name: w\nsteps:\n  - name: s\n    kind: %s\n", k->name), *t;

	if (k->command == SKC_REQUIRED || with_command) {
		t = xasprintf("%s    command: [\"true\"]\n", y);
		free(y);
		y = t;
	}
	for (int sk = 0; sk < NKEYS; sk++) {
		if (sk == omit || (sk != extra && !requires(k, key_names[sk])))
			continue;
		t = xasprintf("%s    %s: %s\n", y, key_names[sk], key_value(key_names[sk]));
		free(y);
		y = t;
	}
	return y;
}

/* ---- the table ----------------------------------------------------------- */

static void test_kinds__names_unique_and_found(void **state)
{
	const struct step_kind *k;
	size_t n = nkinds();

	(void)state;
	assert_true(n >= 9); /* eight built-in kinds and the probe */
	for (size_t i = 0; step_kinds[i] != NULL; i++)
		assert_ptr_equal(step_kind_at(i), step_kinds[i]);
	for (size_t i = 0; i < n; i++) {
		k = step_kind_at(i);
		assert_non_null(k->name);
		assert_true(k->name[0] != '\0');
		assert_ptr_equal(step_kind_find(k->name), k);
		for (size_t j = i + 1; j < n; j++)
			assert_string_not_equal(k->name, step_kind_at(j)->name);
	}
	assert_null(step_kind_at(n));
	assert_null(step_kind_find("nope"));
	assert_null(step_kind_find(""));
	assert_null(step_kind_find(NULL));
	assert_null(step_kind_find("RUN")); /* names are exact */
}

static void test_kinds__default_is_run(void **state)
{
	(void)state;
	assert_string_equal(step_kind_default()->name, "run");
	assert_ptr_equal(step_kind_default(), step_kinds[0]);
}

/* What a row promises is what its hooks and keys can keep. */
static void test_kinds__rows_consistent(void **state)
{
	const struct step_kind *k;

	(void)state;
	for (size_t i = 0; (k = step_kind_at(i)) != NULL; i++) {
		print_message("  kind %s\n", k->name);
		/* only kind keys, and what it must have it takes */
		for (const struct step_key *row = k->keys; row && (row->name || row->names); row++) {
			assert_non_null(row->parse);
			/* a generic key is config.c's, never a kind's */
			for (const char *const *g = (const char *const[]){"name", "kind", "needs", "command", "env",
									  "image", "workdir", "timeout", "retry", NULL};
			     *g; g++)
				assert_false(step_key_is(row, *g));
			/* what it must have it names, and says what for */
			if (row->required)
				assert_true(row->name != NULL && row->hint != NULL);
		}
		/* a command means a job, and a job its job_done */
		assert_int_equal(k->command == SKC_FORBIDDEN, (k->flags & SKF_JOB) == 0);
		assert_int_equal(k->no_command != NULL, k->command == SKC_FORBIDDEN);
		assert_int_equal(k->job_done != NULL, (k->flags & SKF_JOB) != 0);
		/* a kind that waits is never claimed; one the daemon does has work when claimed */
		if (k->flags & SKF_WAITS)
			assert_true(k->prepare == NULL && (k->flags & (SKF_JOB | SKF_DAEMON)) == 0);
		if (k->flags & SKF_DAEMON)
			assert_non_null(k->prepare);
	}
}

/* The flags the engine, the planner, the store and the registry's lineage rely on. */
static void test_kinds__builtin_flags(void **state)
{
	static const struct {
		const char *name;
		unsigned flags;
	} want[] = {
		{"run", SKF_JOB},
		{"train", SKF_JOB | SKF_INPUTS | SKF_TRAINS},
		{"evaluate", SKF_JOB | SKF_INPUTS | SKF_EVALUATES},
		{"gate", SKF_WAITS},
		{"label", SKF_DAEMON | SKF_INPUTS | SKF_DATASET},
		{"register", SKF_DAEMON | SKF_INPUTS | SKF_REGISTERS},
		{"cache", SKF_DAEMON | SKF_JOB | SKF_STAGES | SKF_INPUTS},
		{"deploy", SKF_DAEMON | SKF_SERVICE | SKF_INPUTS},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const struct step_kind *k = step_kind_find(want[i].name);
		assert_non_null(k);
		assert_ptr_equal(step_kinds[i], k); /* the order users see in messages */
		assert_int_equal(k->flags, want[i].flags);
	}
	assert_null(step_kinds[i]);
	/* deploy alone keeps its work running (replicas) */
	for (i = 0; step_kinds[i] != NULL; i++)
		assert_int_equal((step_kinds[i]->flags & SKF_SERVICE) != 0, strcmp(step_kinds[i]->name, "deploy") == 0);
}

static void test_kinds__register_rejects(void **state)
{
	static const struct step_kind unnamed = {.name = NULL};
	static const struct step_kind again = {.name = "probe"};
	static const struct step_kind builtin = {.name = "gate"};

	(void)state;
	assert_int_equal(step_kind_register(&unnamed), FERRY_EINVALID);
	assert_int_equal(step_kind_register(NULL), FERRY_EINVALID);
	assert_int_equal(step_kind_register(&again), FERRY_ECONFLICT);
	assert_int_equal(step_kind_register(&builtin), FERRY_ECONFLICT);
	assert_ptr_equal(step_kind_find("probe"), &kind_probe);
}

/* ---- the config takes what the rows say ---------------------------------- */

static void test_kinds__config_takes_the_rows_keys(void **state)
{
	const struct step_kind *k;

	(void)state;
	for (size_t i = 0; (k = step_kind_at(i)) != NULL; i++) {
		for (int sk = 0; sk < NKEYS; sk++) {
			char *y = workflow(k, sk, -1, false), *errs = NULL;
			json_t *spec = NULL;
			int rc = parse(y, &spec, &errs);

			print_message("  kind %s key %s\n", k->name, key_names[sk]);
			if (step_kind_key(k, key_names[sk]) != NULL) {
				if (rc != 0)
					print_message("%s%s", y, errs);
				assert_int_equal(rc, 0);
			} else {
				char *want = xasprintf("\"%s\" applies to ", key_names[sk]);
				assert_int_equal(rc, FERRY_EINVALID);
				assert_non_null(strstr(errs, want));
				free(want);
			}
			json_decref(spec);
			free(errs);
			free(y);
		}
	}
}

static void test_kinds__config_required_keys_and_command(void **state)
{
	const struct step_kind *k;

	(void)state;
	for (size_t i = 0; (k = step_kind_at(i)) != NULL; i++) {
		json_t *spec = NULL;
		char *y, *errs = NULL, *want;

		print_message("  kind %s\n", k->name);
		for (int sk = 0; sk < NKEYS; sk++) {
			if (!requires(k, key_names[sk]))
				continue;
			y = workflow(k, -1, sk, false);
			want = xasprintf("a %s step needs \"%s\" (%s)", k->name, key_names[sk],
					 step_kind_key(k, key_names[sk])->hint);
			assert_int_equal(parse(y, &spec, &errs), FERRY_EINVALID);
			assert_non_null(strstr(errs, want));
			free(want), free(errs), free(y);
		}
		y = workflow(k, -1, -1, true);
		if (k->command == SKC_FORBIDDEN) {
			want = xasprintf("a %s step %s; remove \"command\"", k->name, k->no_command);
			assert_int_equal(parse(y, &spec, &errs), FERRY_EINVALID);
			assert_non_null(strstr(errs, want));
			free(want);
		} else {
			assert_int_equal(parse(y, &spec, &errs), 0);
			assert_string_equal(json_string_value(json_object_get(
				json_array_get(json_object_get(spec, "steps"), 0), "kind")), k->name);
			json_decref(spec);
			spec = NULL;
		}
		free(errs), free(y);
	}
}

static void test_kinds__config_lists_every_kind(void **state)
{
	const char *y = "name: w\nsteps:\n  - name: s\n    kind: nope\n    command: [\"true\"]\n";
	json_t *spec = NULL;
	char *errs = NULL;

	(void)state;
	assert_int_equal(parse(y, &spec, &errs), FERRY_EINVALID);
	assert_non_null(strstr(errs, "known kinds: run, train, evaluate, gate, label, register, "
				     "cache, deploy, probe"));
	free(errs);
}

/* ---- the engine's entry points -------------------------------------------- */

/* A claimed step of kind, with spec (a JSON text) and inputs (a JSON text). */
struct claimed {
	json_t *spec, *inputs, *run;
	struct step_run r;
};

static void claimed_init(struct claimed *c, const char *kind, const char *spec, const char *inputs,
			 const char *dir)
{
	c->spec = json_loads(spec, 0, NULL);
	c->inputs = json_loads(inputs, 0, NULL);
	c->run = json_pack("{s:{}, s:s, s:b}", "params", "workflow", "w", "no_cache", 0);
	assert_non_null(c->spec);
	assert_non_null(c->inputs);
	c->r = (struct step_run){
		.home = dir, .host = "h", .actor = "test", .run_id = 1, .step_id = 2, .attempt = 1,
		.name = "s", .kind = kind, .dir = dir, .spec = c->spec, .inputs = c->inputs,
		.run = c->run,
	};
}

static void claimed_dispose(struct claimed *c)
{
	json_decref(c->spec), json_decref(c->inputs), json_decref(c->run);
}

static void test_kinds__prepare_dispatches_to_the_row(void **state)
{
	struct claimed c;
	struct step_result res;
	json_t *rendered = NULL, *env = NULL;
	char *key = NULL;

	(void)state;
	claimed_init(&c, "probe", "{\"dataset\":\"{{steps.up.outputs.path}}\"}",
		     "{\"up\":{\"kind\":\"run\",\"outputs\":{\"path\":\"/data/x\"}}}", "/nonexistent");
	assert_int_equal(steps_prepare(&rendered, &env, &key, &res, &c.r), 1);
	assert_string_equal(attempt_outcome_name(res.outcome), "succeeded");
	assert_string_equal(json_string_value(json_object_get(res.outputs, "seen")), "/data/x");
	assert_null(env);
	assert_null(key);
	step_result_dispose(&res);
	json_decref(rendered);
	claimed_dispose(&c);
}

static void test_kinds__prepare_gate_and_unknown_fail(void **state)
{
	static const char *const kinds[] = {"gate", "gone"};
	struct step_result res;
	json_t *rendered = NULL, *env = NULL;
	char *key = NULL;

	(void)state;
	for (size_t i = 0; i < 2; i++) {
		struct claimed c;
		claimed_init(&c, kinds[i], "{}", "{}", "/nonexistent");
		assert_int_equal(steps_prepare(&rendered, &env, &key, &res, &c.r), 1);
		assert_string_equal(attempt_outcome_name(res.outcome), "failed");
		assert_non_null(res.reason);
		step_result_dispose(&res);
		json_decref(rendered);
		rendered = NULL;
		claimed_dispose(&c);
	}
	/* a gate with when: is claimed for its condition: it waits when it holds, else it is skipped */
	for (size_t i = 0; i < 2; i++) {
		struct claimed c;
		claimed_init(&c, "gate", i == 0 ? "{\"when\":\"true\"}" : "{\"when\":\"params.go == 1\"}", "{}",
			     "/nonexistent");
		assert_int_equal(steps_prepare(&rendered, &env, &key, &res, &c.r), 1);
		assert_string_equal(attempt_outcome_name(res.outcome), i == 0 ? "waiting" : "failed");
		if (i == 1) /* the claim handed no params: said so */
			assert_non_null(strstr(res.reason, "params.go: the run has no param go"));
		step_result_dispose(&res);
		json_decref(rendered);
		rendered = NULL;
		claimed_dispose(&c);
	}
}

/* A job below a staging step (a cache step) gets its FERRY_CACHE_DIR, or fails when it is gone. */
static void test_kinds__job_below_stager_gets_cache_dir(void **state)
{
	char dir[] = "/tmp/ferry-kinds.XXXXXX";
	struct step_result res;
	struct claimed c;
	json_t *rendered = NULL, *env = NULL;
	char *key = NULL, *inputs;

	(void)state;
	assert_non_null(mkdtemp(dir));
	inputs = xasprintf("{\"c\":{\"kind\":\"cache\",\"outputs\":{\"cache_dir\":\"%s\","
			   "\"session\":\"7\"}}}", dir);
	claimed_init(&c, "train", "{\"command\":[\"{{steps.c.outputs.cache_dir}}\"]}", inputs, dir);
	assert_int_equal(steps_prepare(&rendered, &env, &key, &res, &c.r), 0);
	assert_string_equal(json_string_value(json_object_get(env, "FERRY_CACHE_DIR")), dir);
	assert_string_equal(json_string_value(json_object_get(env, "FERRY_CACHE_SESSION")), "7");
	assert_string_equal(json_string_value(json_array_get(json_object_get(rendered, "command"), 0)),
			    dir);
	json_decref(rendered), json_decref(env);
	claimed_dispose(&c);

	assert_int_equal(rmdir(dir), 0);
	claimed_init(&c, "run", "{}", inputs, dir);
	assert_int_equal(steps_prepare(&rendered, &env, &key, &res, &c.r), 1);
	assert_string_equal(attempt_outcome_name(res.outcome), "failed");
	assert_non_null(strstr(res.reason, "is gone from this host"));
	step_result_dispose(&res);
	json_decref(rendered);
	claimed_dispose(&c);
	free(inputs);
}

/* Writes text into dir/name. */
static void put(const char *dir, const char *name, const char *text)
{
	char *path = xasprintf("%s/%s", dir, name);
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	free(path);
}

static void test_kinds__job_done_outputs_metrics_and_gate(void **state)
{
	char dir[] = "/tmp/ferry-kinds.XXXXXX";
	struct step_result res;
	struct claimed c;
	char *out, *model;

	(void)state;
	assert_non_null(mkdtemp(dir));
	out = xasprintf("%s/out", dir);
	assert_int_equal(mkdir_p(out, 0755), 0);
	put(out, "model.pkl", "m");
	put(out, "metrics.json", "{\"accuracy\": 0.5}");
	model = xasprintf("%s/model.pkl", out);

	claimed_init(&c, "evaluate", "{\"gate\":[]}", "{}", dir);
	assert_int_equal(steps_job_done(&c.r, &res), 0);
	assert_string_equal(attempt_outcome_name(res.outcome), "succeeded");
	assert_string_equal(json_string_value(json_object_get(res.outputs, "model")), model);
	assert_true(json_number_value(json_object_get(res.metrics, "accuracy")) == 0.5);
	step_result_dispose(&res);
	claimed_dispose(&c);

	claimed_init(&c, "train", "{\"gate\":[{\"metric\":\"accuracy\",\"op\":\">=\",\"value\":0.9}]}",
		     "{}", dir);
	assert_int_equal(steps_job_done(&c.r, &res), 0);
	assert_string_equal(attempt_outcome_name(res.outcome), "failed");
	assert_int_equal(res.final, 1);
	assert_non_null(strstr(res.reason, "accuracy 0.5 < 0.9"));
	step_result_dispose(&res);
	claimed_dispose(&c);

	/* a kind without a job has nothing to be done with */
	claimed_init(&c, "probe", "{}", "{}", dir);
	assert_true(steps_job_done(&c.r, &res) < 0);
	step_result_dispose(&res);
	claimed_dispose(&c);

	assert_int_equal(unlink(model), 0);
	free(model);
	model = xasprintf("%s/metrics.json", out);
	assert_int_equal(unlink(model), 0);
	assert_int_equal(rmdir(out), 0);
	assert_int_equal(rmdir(dir), 0);
	free(out), free(model);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kinds__names_unique_and_found),
		cmocka_unit_test(test_kinds__default_is_run),
		cmocka_unit_test(test_kinds__rows_consistent),
		cmocka_unit_test(test_kinds__builtin_flags),
		cmocka_unit_test(test_kinds__register_rejects),
		cmocka_unit_test(test_kinds__config_takes_the_rows_keys),
		cmocka_unit_test(test_kinds__config_required_keys_and_command),
		cmocka_unit_test(test_kinds__config_lists_every_kind),
		cmocka_unit_test(test_kinds__prepare_dispatches_to_the_row),
		cmocka_unit_test(test_kinds__prepare_gate_and_unknown_fail),
		cmocka_unit_test(test_kinds__job_below_stager_gets_cache_dir),
		cmocka_unit_test(test_kinds__job_done_outputs_metrics_and_gate),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}

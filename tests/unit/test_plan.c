/*
 * Unit tests for plan: a run planned without a database — initial states
 * (chain, diamond, a gate first), dev subsets, params, rendered templates,
 * which steps are handed their ancestors, the kind flags, bad YAML, and the
 * same plan every time (from YAML or from a registered spec).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plan.h"

/* Plans yaml as "w.yaml" for run 42; the plan must come out. */
static struct run_plan *plan_sub(const char *yaml, const json_t *params, const char *only,
				 const char *from, const char *to)
{
	struct run_plan_in in;
	struct run_plan *p = NULL;
	cfg_errors errs = {0};
	int rc;

	memset(&in, 0, sizeof(in));
	in.yaml = yaml;
	in.yaml_len = strlen(yaml);
	in.filename = "w.yaml";
	in.params = params;
	in.only = only, in.from = from, in.to = to;
	in.run_id = 42;
	rc = run_plan_make(&p, &in, &errs);
	for (size_t k = 0; k < errs.len; k++)
		print_message("  unexpected: %s\n", errs.items[k]);
	if (rc < 0)
		print_message("  error: %s\n", ferry_error_last());
	assert_int_equal(rc, 0);
	assert_int_equal(errs.len, 0);
	assert_non_null(p);
	cfg_errors_dispose(&errs);
	return p;
}

static struct run_plan *plan_ok(const char *yaml)
{
	return plan_sub(yaml, NULL, NULL, NULL, NULL);
}

/* Plans what must fail with FERRY_EINVALID and no YAML error; returns the message. */
static const char *plan_fails(const char *yaml, const json_t *params, const char *only,
			      const char *from, const char *to)
{
	struct run_plan_in in;
	struct run_plan *p = (struct run_plan *)&in; /* must be reset to NULL */
	cfg_errors errs = {0};

	memset(&in, 0, sizeof(in));
	in.yaml = yaml;
	in.yaml_len = strlen(yaml);
	in.params = params;
	in.only = only, in.from = from, in.to = to;
	in.run_id = 1;
	assert_int_equal(run_plan_make(&p, &in, &errs), FERRY_EINVALID);
	assert_null(p);
	assert_int_equal(errs.len, 0);
	return ferry_error_last();
}

static const struct plan_step *step(const struct run_plan *p, const char *name)
{
	for (size_t i = 0; i < p->nsteps; i++)
		if (strcmp(p->steps[i].name, name) == 0)
			return &p->steps[i];
	fail_msg("no step %s", name);
	return NULL;
}

static const char *state_of(const struct run_plan *p, const char *name)
{
	return step_state_name(step(p, name)->state);
}

/* The step's "ancestors" as compact JSON, or "-" when it has none. */
static char *ancestors_of(const struct run_plan *p, const char *name)
{
	json_t *a = json_object_get(step(p, name)->spec, "ancestors");

	return a ? json_dumps(a, JSON_COMPACT) : strdup("-");
}

static void assert_ancestors(const struct run_plan *p, const char *name, const char *want)
{
	char *got = ancestors_of(p, name);

	assert_string_equal(got, want);
	free(got);
}

/* Everything in a plan as one JSON text, to compare plans. */
static char *plan_dump(const struct run_plan *p)
{
	json_t *o = json_object(), *steps = json_array(), *edges = json_array();
	char *txt;

	for (size_t i = 0; i < p->nsteps; i++) {
		const struct plan_step *s = &p->steps[i];
		json_array_append_new(steps, json_pack("{s:s,s:i,s:s,s:s,s:s?,s:i,s:i,s:I,s:I,s:I,s:O,s:b,s:b}",
						       "name", s->name, "idx", s->idx, "kind", s->kind->name,
						       "state", step_state_name(s->state), "reason", s->reason,
						       "pending", s->deps_pending, "limit", s->retry_limit,
						       "backoff", (json_int_t)s->backoff_ms,
						       "max", (json_int_t)s->max_backoff_ms,
						       "timeout", (json_int_t)s->timeout_ms, "spec", s->spec,
						       "waits", s->waits, "restage", s->restage));
	}
	for (size_t i = 0; i < p->nedges; i++)
		json_array_append_new(edges, json_pack("[i,i]", p->edges[i].step, p->edges[i].needs));
	json_object_set_new(o, "run", json_integer(p->run_id));
	json_object_set_new(o, "workflow", json_string(p->workflow));
	json_object_set_new(o, "hash", json_string(p->hash));
	json_object_set_new(o, "yaml", json_string(p->yaml));
	json_object_set(o, "spec", p->spec);
	json_object_set(o, "params", p->params);
	json_object_set_new(o, "steps", steps);
	json_object_set_new(o, "edges", edges);
	json_object_set_new(o, "open", json_integer(p->open_steps));
	json_object_set_new(o, "ready", json_boolean(p->any_ready));
	json_object_set_new(o, "running", json_boolean(p->starts_running));
	txt = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return txt;
}

static const char chain[] = "name: chain\n"
			    "steps:\n"
			    "  - {name: a, command: [echo, a]}\n"
			    "  - {name: b, needs: a, command: [echo, b], retry: {limit: 2, backoff: 2s},"
			    " timeout: 1m}\n"
			    "  - {name: c, needs: b, command: [echo, c]}\n";

static void test_plan__chain(void **state)
{
	struct run_plan *p;

	(void)state;
	p = plan_ok(chain);
	assert_int_equal(p->run_id, 42);
	assert_string_equal(p->workflow, "chain");
	assert_int_equal(strlen(p->hash), 64);
	assert_string_equal(p->yaml, chain);
	assert_int_equal(p->nsteps, 3);
	assert_string_equal(state_of(p, "a"), "ready");
	assert_string_equal(state_of(p, "b"), "blocked");
	assert_string_equal(state_of(p, "c"), "blocked");
	assert_int_equal(step(p, "a")->deps_pending, 0);
	assert_int_equal(step(p, "b")->deps_pending, 1);
	assert_int_equal(step(p, "c")->idx, 2);
	assert_string_equal(step(p, "c")->kind->name, "run");
	assert_null(step(p, "a")->reason);
	assert_int_equal(step(p, "b")->retry_limit, 2);
	assert_int_equal(step(p, "b")->backoff_ms, 2000);
	assert_int_equal(step(p, "b")->max_backoff_ms, 300000);
	assert_int_equal(step(p, "b")->timeout_ms, 60000);
	assert_int_equal(step(p, "a")->timeout_ms, 0);
	assert_int_equal(p->nedges, 2);
	assert_int_equal(p->edges[0].step, 1);
	assert_int_equal(p->edges[0].needs, 0);
	assert_int_equal(p->edges[1].step, 2);
	assert_int_equal(p->edges[1].needs, 1);
	assert_int_equal(p->open_steps, 3);
	assert_true(p->any_ready);
	assert_false(p->starts_running);
	run_plan_free(p);
}

static void test_plan__diamond(void **state)
{
	struct run_plan *p;

	(void)state;
	p = plan_ok("name: diamond\n"
		    "steps:\n"
		    "  - {name: top, command: t}\n"
		    "  - {name: l, needs: top, command: l}\n"
		    "  - {name: r, needs: top, command: r}\n"
		    "  - {name: bottom, needs: [l, r], command: b}\n");
	assert_string_equal(state_of(p, "top"), "ready");
	assert_string_equal(state_of(p, "l"), "blocked");
	assert_string_equal(state_of(p, "r"), "blocked");
	assert_string_equal(state_of(p, "bottom"), "blocked");
	assert_int_equal(step(p, "bottom")->deps_pending, 2);
	assert_int_equal(p->nedges, 4);
	assert_int_equal(p->edges[2].step, 3);
	assert_int_equal(p->edges[2].needs, 1);
	assert_int_equal(p->edges[3].needs, 2);
	assert_int_equal(p->open_steps, 4);
	run_plan_free(p);
}

static void test_plan__gate_first(void **state)
{
	struct run_plan *p;

	(void)state;
	p = plan_ok("name: g\n"
		    "steps:\n"
		    "  - {name: approve, kind: gate, timeout: 10m}\n"
		    "  - {name: go, needs: approve, command: [echo, \"{{steps.approve.outputs.x}}\"]}\n");
	assert_string_equal(state_of(p, "approve"), "waiting");
	assert_string_equal(state_of(p, "go"), "blocked");
	assert_true(step(p, "approve")->waits);
	assert_false(step(p, "go")->waits);
	assert_int_equal(step(p, "approve")->timeout_ms, 600000);
	assert_true(p->starts_running);
	assert_false(p->any_ready);
	assert_int_equal(p->open_steps, 2);
	run_plan_free(p);

	/* a gate with a step above it is blocked, and the run starts pending */
	p = plan_ok("name: g\n"
		    "steps:\n"
		    "  - {name: a, command: a}\n"
		    "  - {name: approve, kind: gate, needs: a}\n");
	assert_string_equal(state_of(p, "approve"), "blocked");
	assert_false(p->starts_running);
	assert_true(p->any_ready);
	run_plan_free(p);
}

static void test_plan__dev_subsets(void **state)
{
	static const char wf[] = "name: sub\n"
				 "steps:\n"
				 "  - {name: a, command: a}\n"
				 "  - {name: b, needs: a, command: b}\n"
				 "  - {name: c, needs: b, command: c}\n"
				 "  - {name: d, command: d}\n";
	struct run_plan *p;

	(void)state;
	p = plan_sub(wf, NULL, "b", NULL, NULL);
	/* above the selection: succeeded at once, results from an earlier run (the store's) */
	assert_string_equal(state_of(p, "a"), "succeeded");
	assert_int_equal(step(p, "a")->reuse, 1);
	assert_int_equal(p->nreuse, 1);
	assert_string_equal(state_of(p, "b"), "ready");
	assert_null(step(p, "b")->reason);
	assert_int_equal(step(p, "b")->deps_pending, 0);
	assert_string_equal(state_of(p, "c"), "skipped");
	assert_string_equal(state_of(p, "d"), "skipped");
	assert_int_equal(p->open_steps, 1);
	assert_int_equal(p->nedges, 2); /* edges to skipped steps are kept */
	run_plan_free(p);

	p = plan_sub(wf, NULL, NULL, "b", NULL);
	assert_string_equal(state_of(p, "a"), "succeeded");
	assert_int_equal(step(p, "a")->reuse, 1);
	assert_string_equal(state_of(p, "b"), "ready");
	assert_string_equal(state_of(p, "c"), "blocked");
	assert_int_equal(step(p, "c")->deps_pending, 1);
	assert_string_equal(state_of(p, "d"), "skipped");
	assert_string_equal(step(p, "d")->reason, "not selected for this dev run");
	assert_int_equal(step(p, "d")->reuse, 0);
	assert_int_equal(p->open_steps, 2);
	run_plan_free(p);

	p = plan_sub(wf, NULL, NULL, NULL, "b");
	assert_string_equal(state_of(p, "a"), "ready");
	assert_string_equal(state_of(p, "b"), "blocked");
	assert_string_equal(state_of(p, "c"), "skipped");
	assert_string_equal(step(p, "c")->reason, "not selected for this dev run");
	assert_string_equal(state_of(p, "d"), "skipped");
	assert_int_equal(p->open_steps, 2);
	assert_int_equal(p->nreuse, 0); /* --to runs everything it needs */
	run_plan_free(p);

	assert_string_equal(plan_fails(wf, NULL, "zz", NULL, NULL), "the workflow has no step \"zz\"");
	assert_string_equal(plan_fails(wf, NULL, "a", "b", NULL),
			    "give at most one of --only, --from and --to");
}

static const char with_params[] = "name: p\n"
				  "params:\n"
				  "  who: {default: world}\n"
				  "  n:\n"
				  "steps:\n"
				  "  - name: a\n"
				  "    command: [echo, \"hello {{ params.who }}\", \"{{params.n}}\", \"run-{{run.id}}\"]\n"
				  "    env: {N: \"{{params.n}}\", R: \"{{ run.id }}\"}\n"
				  "    workdir: \"w/{{params.who}}\"\n";

static void test_plan__params_and_templates(void **state)
{
	json_t *given = json_pack("{s:i}", "n", 7), *spec;
	struct run_plan *p;
	char *dump;

	(void)state;
	p = plan_sub(with_params, given, NULL, NULL, NULL);
	dump = json_dumps(p->params, JSON_COMPACT);
	assert_string_equal(dump, "{\"who\":\"world\",\"n\":\"7\"}");
	free(dump);
	spec = step(p, "a")->spec;
	dump = json_dumps(json_object_get(spec, "command"), JSON_COMPACT);
	assert_string_equal(dump, "[\"echo\",\"hello world\",\"7\",\"run-42\"]");
	free(dump);
	dump = json_dumps(json_object_get(spec, "env"), JSON_COMPACT);
	assert_string_equal(dump, "{\"FERRY_PARAM_WHO\":\"world\",\"FERRY_PARAM_N\":\"7\","
				  "\"N\":\"7\",\"R\":\"42\"}");
	free(dump);
	assert_string_equal(json_string_value(json_object_get(spec, "workdir")), "w/world");
	assert_null(json_object_get(spec, "ancestors")); /* {{run.id}} is rendered: nothing to hand */
	run_plan_free(p);
	json_decref(given);

	given = json_pack("{s:s,s:s}", "n", "x", "who", "you");
	p = plan_sub(with_params, given, NULL, NULL, NULL);
	dump = json_dumps(json_object_get(step(p, "a")->spec, "command"), JSON_COMPACT);
	assert_string_equal(dump, "[\"echo\",\"hello you\",\"x\",\"run-42\"]");
	free(dump);
	run_plan_free(p);
	json_decref(given);

	given = json_pack("{s:i,s:s}", "n", 1, "other", "y");
	assert_string_equal(plan_fails(with_params, given, NULL, NULL, NULL),
			    "unknown parameter \"other\"; declared: who, n");
	json_decref(given);
	assert_string_equal(plan_fails(with_params, NULL, NULL, NULL, NULL),
			    "parameter \"n\" has no default and was not given a value");
}

static void test_plan__shell_params_quoted_and_in_env(void **state)
{
	static const char wf[] = "name: q\n"
				 "params: {who: world, Max_len: {type: integer, default: 3}}\n"
				 "steps:\n"
				 "  - name: a\n"
				 "    command: [sh, -c, 'echo \"hi {{params.who}}\" {{params.who}}', '{{params.who}}']\n"
				 "    env: {FERRY_PARAM_WHO: mine}\n"
				 "  - {name: b, command: 'echo {{params.Max_len}}'}\n"
				 "  - {name: c, command: [echo, '{{params.who}}']}\n";
	json_t *given = json_pack("{s:s}", "who", "x'; id; '"), *spec;
	struct run_plan *p;
	char *dump;

	(void)state;
	p = plan_sub(wf, given, NULL, NULL, NULL);
	spec = step(p, "a")->spec;
	assert_string_equal(json_string_value(json_array_get(json_object_get(spec, "command"), 2)),
			    "echo \"hi \"'x'\\''; id; '\\'''\"\" 'x'\\''; id; '\\'''");
	assert_string_equal(json_string_value(json_array_get(json_object_get(spec, "command"), 3)),
			    "x'; id; '");
	/* the step's own env wins over the param's */
	dump = json_dumps(json_object_get(spec, "env"), JSON_COMPACT);
	assert_string_equal(dump, "{\"FERRY_PARAM_WHO\":\"mine\",\"FERRY_PARAM_MAX_LEN\":\"3\"}");
	free(dump);
	dump = json_dumps(json_object_get(step(p, "b")->spec, "command"), JSON_COMPACT);
	assert_string_equal(dump, "[\"/bin/sh\",\"-c\",\"echo '3'\"]");
	free(dump);
	dump = json_dumps(json_object_get(step(p, "c")->spec, "command"), JSON_COMPACT);
	assert_string_equal(dump, "[\"echo\",\"x'; id; '\"]");
	free(dump);
	dump = json_dumps(json_object_get(step(p, "c")->spec, "env"), JSON_COMPACT);
	assert_string_equal(dump, "{\"FERRY_PARAM_WHO\":\"x'; id; '\",\"FERRY_PARAM_MAX_LEN\":\"3\"}");
	free(dump);
	run_plan_free(p);
	json_decref(given);

	given = json_pack("{s:s}", "Max_len", "many");
	assert_string_equal(plan_fails(wf, given, NULL, NULL, NULL),
			    "parameter \"Max_len\" must be an integer, not \"many\"");
	json_decref(given);
}

static void test_plan__ancestors(void **state)
{
	struct run_plan *p;

	(void)state;
	p = plan_ok("name: anc\n"
		    "steps:\n"
		    "  - {name: a, command: [echo, a]}\n"
		    "  - {name: b, needs: a, command: [echo, \"{{run.id}}\"]}\n"
		    "  - {name: c, needs: b, command: [echo, \"{{steps.a.outputs.x}}\"]}\n"
		    "  - {name: d, needs: a, command: [echo], cache: true}\n"
		    "  - {name: t, kind: train, needs: a, command: [train]}\n"
		    "  - {name: e, kind: evaluate, needs: [t, d], command: [eval]}\n"
		    "  - {name: g, kind: gate, needs: e}\n"
		    "  - {name: s, kind: cache, dataset: /srv/data}\n"
		    "  - {name: u, needs: s, command: [use]}\n"
		    "  - {name: v, needs: u, command: [use]}\n"
		    "  - {name: r, kind: register, needs: [g], model: m,"
		    " artifact: \"{{steps.t.outputs.model}}\"}\n");
	assert_ancestors(p, "a", "-");                  /* a plain job with nothing to hand */
	assert_ancestors(p, "b", "-");                  /* {{run.id}} rendered away */
	assert_ancestors(p, "c", "[\"b\",\"a\"]");      /* refers to a step: nearest first */
	assert_ancestors(p, "d", "[\"a\"]");            /* keeps its result in the step cache */
	assert_ancestors(p, "t", "[\"a\"]");            /* a kind that takes inputs */
	assert_ancestors(p, "e", "[\"t\",\"d\",\"a\"]"); /* breadth-first, each once */
	assert_ancestors(p, "g", "-");                  /* one that waits: never */
	assert_ancestors(p, "s", "[]");                 /* a staging kind takes inputs, has none */
	assert_ancestors(p, "u", "[\"s\"]");            /* data staged above it */
	assert_ancestors(p, "v", "[\"u\",\"s\"]");      /* … anywhere above it */
	assert_ancestors(p, "r", "[\"g\",\"e\",\"t\",\"d\",\"a\"]");
	assert_string_equal(json_string_value(json_object_get(step(p, "r")->spec, "artifact")),
			    "{{steps.t.outputs.model}}"); /* left for the engine */

	/* the flags come from the kind table */
	for (size_t i = 0; i < p->nsteps; i++) {
		const struct plan_step *s = &p->steps[i];
		assert_int_equal(s->waits, strcmp(s->name, "g") == 0);
		assert_int_equal(s->restage, strcmp(s->name, "s") == 0);
		assert_int_equal(s->waits, (s->kind->flags & SKF_WAITS) != 0);
		assert_int_equal(s->restage, (s->kind->flags & SKF_STAGES) != 0);
	}
	assert_string_equal(step(p, "s")->kind->name, "cache");
	assert_string_equal(json_string_value(json_object_get(step(p, "s")->spec, "dataset")), "/srv/data");
	run_plan_free(p);
}

static void test_plan__bad_yaml(void **state)
{
	static const char bad[] = "name: bad\nsteps:\n  - {name: a, command: [x], nope: 1}\n  - {name: b, needs: zz, command: y}\n";
	struct run_plan_in in;
	struct run_plan *p = NULL;
	cfg_errors errs = {0};

	(void)state;
	memset(&in, 0, sizeof(in));
	in.yaml = bad;
	in.yaml_len = strlen(bad);
	in.filename = "bad.yaml";
	in.run_id = 3;
	assert_int_equal(run_plan_make(&p, &in, &errs), FERRY_EINVALID);
	assert_null(p);
	assert_int_equal(errs.len, 2);
	assert_true(strncmp(errs.items[0], "bad.yaml:3:", 11) == 0);
	assert_true(strncmp(errs.items[1], "bad.yaml:4:", 11) == 0);
	assert_string_equal(ferry_error_last(), "invalid workflow: 2 errors");
	cfg_errors_dispose(&errs);

	/* no YAML and no registered spec */
	memset(&in, 0, sizeof(in));
	assert_int_equal(run_plan_make(&p, &in, &errs), FERRY_EINVALID);
	assert_null(p);
	run_plan_free(NULL);
}

static void test_plan__deterministic_and_registered(void **state)
{
	static const char wf[] = "name: det\n"
				 "params: {x: {default: 1}}\n"
				 "steps:\n"
				 "  - {name: s, kind: cache, dataset: \"/d/{{params.x}}\"}\n"
				 "  - {name: a, needs: s, command: [a, \"{{params.x}}\"], env: {B: b, A: a}}\n"
				 "  - {name: g, kind: gate, needs: a}\n"
				 "  - {name: t, kind: train, needs: [g, a], command: [t]}\n";
	struct run_plan *p1, *p2, *p3 = NULL;
	struct run_plan_in in;
	cfg_errors errs = {0};
	char *d1, *d2, *d3;

	(void)state;
	p1 = plan_ok(wf);
	p2 = plan_ok(wf);
	d1 = plan_dump(p1);
	d2 = plan_dump(p2);
	assert_string_equal(d1, d2);

	/* a registered version (spec, hash and YAML from the store) plans the same */
	memset(&in, 0, sizeof(in));
	in.spec = p1->spec;
	in.hash = p1->hash;
	in.spec_yaml = p1->yaml;
	in.run_id = 42;
	assert_int_equal(run_plan_make(&p3, &in, &errs), 0);
	d3 = plan_dump(p3);
	assert_string_equal(d1, d3);
	assert_ptr_not_equal(p3->spec, p1->spec); /* the plan owns its copy */
	free(d1), free(d2), free(d3);
	run_plan_free(p1);
	run_plan_free(p2);
	run_plan_free(p3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plan__chain),
		cmocka_unit_test(test_plan__diamond),
		cmocka_unit_test(test_plan__gate_first),
		cmocka_unit_test(test_plan__dev_subsets),
		cmocka_unit_test(test_plan__params_and_templates),
		cmocka_unit_test(test_plan__shell_params_quoted_and_in_env),
		cmocka_unit_test(test_plan__ancestors),
		cmocka_unit_test(test_plan__bad_yaml),
		cmocka_unit_test(test_plan__deterministic_and_registered),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

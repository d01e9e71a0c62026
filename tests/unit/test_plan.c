/*
 * Unit tests for plan: a run planned without a database — initial states
 * (chain, diamond, a gate first), dev subsets, params, rendered templates,
 * which steps are handed their ancestors, the kind flags, bad YAML, the
 * same plan every time (from YAML or from a registered spec), and the
 * submit-time look for the files commands name (run_plan_check_files).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plan/plan.h"
#include "lib/util.h"

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

/* when:, needs with if: any and finally: as the plan carries them (the state machine is release.sql's) */
static void test_plan__conditions_and_finally(void **state)
{
	struct run_plan *p;
	const json_t *anc;

	(void)state;
	p = plan_ok("name: c\n"
		    "params: {deploy: true}\n"
		    "steps:\n"
		    "  - {name: a, command: a}\n"
		    "  - {name: ok, kind: gate, when: 'params.deploy == true'}\n"
		    "  - {name: b, needs: a, when: \"steps.a.outputs.n > 1\", command: b}\n"
		    "  - {name: c, needs: [a, {step: b, if: any}], command: c}\n"
		    "finally:\n"
		    "  - {name: tidy, command: [sh, -c, 'echo $FERRY_RUN_STATE'], fail_run: true}\n"
		    "  - {name: last, needs: tidy, command: z}\n");
	/* a gate with a condition is claimed to evaluate it: it does not wait at once */
	assert_string_equal(state_of(p, "ok"), "ready");
	assert_false(step(p, "ok")->waits);
	assert_string_equal(json_string_value(json_object_get(step(p, "b")->spec, "when")), "steps.a.outputs.n > 1");
	assert_non_null(json_object_get(step(p, "b")->spec, "ancestors"));
	/* the edges: c -> b is if: any, c -> a is not */
	for (size_t k = 0; k < p->nedges; k++) {
		const char *from = p->steps[p->edges[k].step].name, *to = p->steps[p->edges[k].needs].name;
		assert_int_equal(p->edges[k].any, strcmp(from, "c") == 0 && strcmp(to, "b") == 0);
	}
	/* finally steps: blocked on the rest (one dependency more), handed every other step */
	assert_true(step(p, "tidy")->final);
	assert_int_equal(step(p, "tidy")->deps_pending, 1);
	assert_int_equal(step(p, "last")->deps_pending, 2);
	assert_string_equal(state_of(p, "tidy"), "blocked");
	assert_true(json_is_true(json_object_get(step(p, "tidy")->spec, "fail_run")));
	anc = json_object_get(step(p, "tidy")->spec, "ancestors");
	assert_int_equal(json_array_size(anc), 4);
	assert_int_equal(p->final_steps, 2);
	assert_int_equal(p->open_steps, 6);
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

/*
 * The biggest workflow config.c takes (5,000 steps: 99 layers of 50, a step
 * needing the same one of the layer before and, when odd, another; then one
 * evaluate step needing the whole last layer) plans in well under the time
 * a submit may take: names were looked up by a scan of the steps and each
 * step's ancestors deduplicated by a scan of the list, so this took minutes.
 * The evaluate step is handed all 4,950 others, nearest first.
 */
static void test_plan__5000_steps(void **state)
{
	enum { LAYERS = 99, WIDTH = 50 };
	size_t cap = 1 << 20, len = 0, edges = 0;
	char *yaml = xmalloc(cap);
	struct run_plan *p;
	const json_t *anc;
	int64_t t0;

	(void)state;
	len += (size_t)snprintf(yaml + len, cap - len, "name: big\nsteps:\n");
	for (int l = 0; l < LAYERS; l++)
		for (int i = 0; i < WIDTH; i++) {
			int other = (7 * i + 3) % WIDTH;
			if (l == 0)
				len += (size_t)snprintf(yaml + len, cap - len, "  - {name: s%02d_%02d, command: [\"true\"]}\n", l, i);
			else if (i % 2 == 1 && other != i)
				len += (size_t)snprintf(yaml + len, cap - len,
							"  - {name: s%02d_%02d, needs: [s%02d_%02d, s%02d_%02d], command: [\"true\"]}\n",
							l, i, l - 1, i, l - 1, other), edges += 2;
			else
				len += (size_t)snprintf(yaml + len, cap - len,
							"  - {name: s%02d_%02d, needs: [s%02d_%02d], command: [\"true\"]}\n",
							l, i, l - 1, i), edges += 1;
			assert_true(len < cap);
		}
	len += (size_t)snprintf(yaml + len, cap - len, "  - name: eval\n    kind: evaluate\n    command: [eval]\n    needs: [");
	for (int i = 0; i < WIDTH; i++)
		len += (size_t)snprintf(yaml + len, cap - len, "%ss%02d_%02d", i ? ", " : "", LAYERS - 1, i);
	len += (size_t)snprintf(yaml + len, cap - len, "]\n");
	assert_true(len < cap);
	edges += WIDTH;

	t0 = clock_mono_ms();
	p = plan_ok(yaml);
	print_message("  5,000 steps planned in %lld ms\n", (long long)(clock_mono_ms() - t0));
	assert_true(clock_mono_ms() - t0 < 5000);
	assert_int_equal(p->nsteps, LAYERS * WIDTH + 1);
	assert_int_equal(p->nedges, edges);
	assert_int_equal(p->open_steps, LAYERS * WIDTH + 1);
	assert_string_equal(state_of(p, "s00_49"), "ready");
	assert_string_equal(state_of(p, "s98_49"), "blocked");
	assert_int_equal(step(p, "s98_01")->deps_pending, 2);
	assert_int_equal(step(p, "eval")->deps_pending, WIDTH);
	anc = json_object_get(step(p, "eval")->spec, "ancestors");
	assert_int_equal(json_array_size(anc), LAYERS * WIDTH);
	assert_string_equal(json_string_value(json_array_get(anc, 0)), "s98_00");
	assert_string_equal(json_string_value(json_array_get(anc, WIDTH)), "s97_00");
	assert_memory_equal(json_string_value(json_array_get(anc, LAYERS * WIDTH - 1)), "s00_", 4);
	assert_null(json_object_get(step(p, "s98_00")->spec, "ancestors")); /* a plain job: nothing to hand */
	run_plan_free(p);
	free(yaml);
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

static const char *const scratch_files[] = {"train.py", "bin/run.sh", "sub/prep.sh"};
static const char *const scratch_dirs[] = {"bin", "sub"};

/* A scratch directory with train.py, bin/run.sh and sub/prep.sh in it. */
static char *files_dir(void)
{
	char *dir = xstrdup("/tmp/ferry-plan-XXXXXX"), *p;
	size_t i;

	assert_non_null(mkdtemp(dir));
	for (i = 0; i < sizeof(scratch_dirs) / sizeof(scratch_dirs[0]); i++) {
		p = xasprintf("%s/%s", dir, scratch_dirs[i]);
		assert_int_equal(mkdir(p, 0755), 0);
		free(p);
	}
	for (i = 0; i < sizeof(scratch_files) / sizeof(scratch_files[0]); i++) {
		FILE *f;
		p = xasprintf("%s/%s", dir, scratch_files[i]);
		assert_non_null(f = fopen(p, "w"));
		fclose(f);
		free(p);
	}
	return dir;
}

static void files_dir_remove(char *dir)
{
	size_t i;

	for (i = 0; i < sizeof(scratch_files) / sizeof(scratch_files[0]); i++) {
		char *p = xasprintf("%s/%s", dir, scratch_files[i]);
		unlink(p);
		free(p);
	}
	for (i = 0; i < sizeof(scratch_dirs) / sizeof(scratch_dirs[0]); i++) {
		char *p = xasprintf("%s/%s", dir, scratch_dirs[i]);
		rmdir(p);
		free(p);
	}
	rmdir(dir);
	free(dir);
}

/* Plans a one-step workflow with the given step body and checks its files in workdir. */
static int check_step(char **msg, const char *body, const char *workdir, const char *only)
{
	char *yaml = xasprintf("name: f\nsteps:\n  - {name: a, command: [echo]}\n"
			       "  - {name: s, needs: [a], %s}\n", body);
	struct run_plan *p = plan_sub(yaml, NULL, only, NULL, NULL);
	int rc = run_plan_check_files(p, workdir);

	*msg = xstrdup(rc < 0 ? ferry_error_last() : "");
	run_plan_free(p);
	free(yaml);
	return rc;
}

static void assert_check_ok(const char *body, const char *workdir)
{
	char *msg = NULL;

	if (check_step(&msg, body, workdir, NULL) != 0)
		fail_msg("%s: unexpected: %s", body, msg);
	free(msg);
}

/* The check fails for body; the message must hold each of the want strings. */
static void assert_check_fails(const char *body, const char *workdir, const char *want1,
			       const char *want2)
{
	char *msg = NULL;

	if (check_step(&msg, body, workdir, NULL) != FERRY_EINVALID)
		fail_msg("%s: passed the check", body);
	if (strstr(msg, want1) == NULL || (want2 && strstr(msg, want2) == NULL))
		fail_msg("%s: message \"%s\" lacks \"%s\" or \"%s\"", body, msg, want1,
			 want2 ? want2 : "");
	if (strstr(msg, "workdir") == NULL || strstr(msg, "step \"s\"") == NULL)
		fail_msg("%s: message \"%s\" names neither the step nor workdir", body, msg);
	free(msg);
}

static void test_plan__command_files(void **state)
{
	char *dir = files_dir(), *sub, *msg = NULL, *gone;

	(void)state;
	sub = xasprintf("%s/sub", dir);
	/* the files are there: argv[0] paths, interpreter scripts, one-line shell strings */
	assert_check_ok("command: [python3, train.py]", dir);
	assert_check_ok("command: [python3, -u, train.py, --C, '0.5']", dir);
	assert_check_ok("command: [/usr/bin/python3.11, ./train.py]", dir);
	assert_check_ok("command: [./bin/run.sh, x]", dir);
	assert_check_ok("command: [bin/run.sh]", dir);
	assert_check_ok("command: 'python3 train.py --C 0.5'", dir);
	assert_check_ok("command: [sh, prep.sh], workdir: sub", dir);
	{
		char *body = xasprintf("command: [sh, prep.sh], workdir: %s", sub);
		assert_check_ok(body, dir);
		assert_check_ok(body, NULL); /* an absolute step workdir needs no run workdir */
		free(body);
	}
	/* nothing to look for: code, modules, plain programs, shell lines, unsettled words */
	assert_check_ok("command: [python3, -c, 'import nope']", dir);
	assert_check_ok("command: [python3, -m, nope.train]", dir);
	assert_check_ok("command: [bash, -ec, 'nope.sh']", dir);
	assert_check_ok("command: [perl, -e, 'print 1']", dir);
	assert_check_ok("command: [node, --eval, 'x.js']", dir);
	assert_check_ok("command: [echo, nope.py]", dir);
	assert_check_ok("command: [python3, /abs/nope.py]", dir);
	assert_check_ok("command: [python3, -W, ignore, nope.py]", dir);
	assert_check_ok("command: 'python3 nope.py | tee log'", dir);
	assert_check_ok("command: 'python3 \"$F\"'", dir);
	assert_check_ok("command: [python3, '$HOME/nope.py']", dir);
	assert_check_ok("command: [python3, '{{steps.a.outputs.x}}']", dir);
	assert_check_ok("command: [python3, nope.py], workdir: '{{steps.a.outputs.d}}'", dir);
	assert_check_ok("command: [echo, hi]", NULL);
	assert_check_ok("command: [sh, -c, 'echo hi']", NULL);
	/* a step left out of a dev subset is not looked at */
	assert_int_equal(check_step(&msg, "command: [python3, nope.py]", dir, "a"), 0);
	free(msg);

	/* missing: the message names the step, the file, the directory and workdir: */
	assert_check_fails("command: [python3, nope.py]", dir, "command file nope.py not found in ", dir);
	assert_check_fails("command: [python3.12, -u, nope.py]", dir, "nope.py", "run's working directory");
	assert_check_fails("command: [Rscript, nope.R]", dir, "nope.R", NULL);
	assert_check_fails("command: [./bin/nope.sh]", dir, "./bin/nope.sh", NULL);
	assert_check_fails("command: [python3, --, nope.py]", dir, "nope.py", NULL);
	assert_check_fails("command: 'python3 nope.py --C 0.5'", dir, "nope.py", NULL);
	assert_check_fails("command: [sh, train.py], workdir: sub", dir, sub, "step's workdir: sub");
	assert_check_fails("command: [python3, train.py]", NULL, "train.py", "no working directory");
	assert_check_fails("command: [sh, prep.sh], workdir: sub", NULL, "prep.sh", "no working directory");
	/* a registered workflow's directory that has gone since */
	gone = xasprintf("%s/gone", dir);
	assert_int_equal(check_step(&msg, "command: [echo, hi]", gone, NULL), FERRY_EINVALID);
	assert_non_null(strstr(msg, gone));
	free(msg);
	free(gone);
	free(sub);
	files_dir_remove(dir);
}

/* The shipped workflows pass the check from their own directory. */
static void test_plan__command_files_of_shipped_workflows(void **state)
{
	static const char *const files[] = {"workflows/hello.yaml", "workflows/digits.yaml"};
	char dir[PATH_MAX];

	(void)state;
	assert_non_null(realpath("workflows", dir));
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char *yaml = NULL;
		struct run_plan *p;

		assert_int_equal(file_read(&yaml, NULL, files[i]), 0);
		p = plan_ok(yaml);
		if (run_plan_check_files(p, dir) != 0)
			fail_msg("%s: %s", files[i], ferry_error_last());
		run_plan_free(p);
		free(yaml);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plan__chain),
		cmocka_unit_test(test_plan__diamond),
		cmocka_unit_test(test_plan__gate_first),
		cmocka_unit_test(test_plan__conditions_and_finally),
		cmocka_unit_test(test_plan__dev_subsets),
		cmocka_unit_test(test_plan__params_and_templates),
		cmocka_unit_test(test_plan__shell_params_quoted_and_in_env),
		cmocka_unit_test(test_plan__ancestors),
		cmocka_unit_test(test_plan__5000_steps),
		cmocka_unit_test(test_plan__bad_yaml),
		cmocka_unit_test(test_plan__deterministic_and_registered),
		cmocka_unit_test(test_plan__command_files),
		cmocka_unit_test(test_plan__command_files_of_shipped_workflows),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * Unit tests for config: workflow parsing and validation (every error with
 * FILE:LINE:COL, all of them, in order), durations, placement and limits.
 * Parameters and templates: test_config_params.c; the step kinds' keys:
 * test_config_kinds.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plan/config.h"

#include "cfg_test.h"

static void test_config__valid_fan_out_fan_in(void **state)
{
	json_t *spec, *st, *retry;
	char *dump;

	(void)state;
	spec = parse_ok("name: train.v2\n"
			"description: fan out and in\n"
			"params:\n"
			"  who: world\n"
			"  epochs: {default: 3, description: passes}\n"
			"  seed:\n"
			"steps:\n"
			"  - name: prep\n"
			"    command: echo {{ params.who }}\n"
			"  - name: train-a\n"
			"    needs: prep\n"
			"    command: [python, train.py, \"--epochs={{params.epochs}}\"]\n"
			"    env: {RUN: \"{{ run.id }}\", DATA: \"{{ steps.prep.outputs.path }}\"}\n"
			"    timeout: 1h30m\n"
			"  - name: train-b\n"
			"    needs: [prep]\n"
			"    command: [python, train.py, \"--seed={{ params.seed }}\"]\n"
			"    workdir: models/b\n"
			"  - name: eval\n"
			"    needs: [train-a, train-b]\n"
			"    command: [python, eval.py, \"{{ steps.prep.outputs.path }}\"]\n"
			"    retry: {limit: 2, backoff: 10s, max_backoff: 1m}\n");
	assert_string_equal(str_at(spec, "name"), "train.v2");
	assert_string_equal(str_at(spec, "description"), "fan out and in");
	dump = json_dumps(json_object_get(spec, "params"), JSON_COMPACT);
	assert_string_equal(dump, "{\"who\":{\"default\":\"world\"},\"epochs\":{\"default\":\"3\"},"
				  "\"seed\":{}}");
	free(dump);
	assert_int_equal(json_array_size(json_object_get(spec, "steps")), 4);

	st = step_at(spec, 0);
	assert_string_equal(str_at(st, "kind"), "run");
	assert_string_equal(str_at(st, "image"), "host");
	assert_true(json_is_null(json_object_get(st, "workdir")));
	assert_int_equal(json_array_size(json_object_get(st, "needs")), 0);
	assert_int_equal(int_at(st, "timeout_ms"), 0);
	assert_int_equal(int_at(st, "line"), 8);
	assert_int_equal(int_at(st, "col"), 5);
	retry = json_object_get(st, "retry");
	assert_int_equal(int_at(retry, "limit"), 0);
	assert_int_equal(int_at(retry, "backoff_ms"), 1000);
	assert_int_equal(int_at(retry, "max_backoff_ms"), 300000);

	st = step_at(spec, 1);
	dump = json_dumps(st, JSON_COMPACT);
	assert_string_equal(dump,
		"{\"name\":\"train-a\",\"kind\":\"run\",\"needs\":[\"prep\"],"
		"\"command\":[\"python\",\"train.py\",\"--epochs={{params.epochs}}\"],"
		"\"env\":{\"RUN\":\"{{ run.id }}\",\"DATA\":\"{{ steps.prep.outputs.path }}\"},"
		"\"executor\":null,\"image\":\"host\",\"resources\":null,\"network\":null,"
		"\"workdir\":null,\"timeout_ms\":5400000,"
		"\"retry\":{\"limit\":0,\"backoff_ms\":1000,\"max_backoff_ms\":300000},"
		"\"cache\":false,\"gate\":[],\"model\":null,\"dataset\":null,\"labels\":null,"
		"\"webhook\":null,\"on_timeout\":\"fail\",\"artifact\":null,\"version\":\"patch\","
		"\"aliases\":[],\"line\":10,\"col\":5}");
	free(dump);

	assert_string_equal(str_at(step_at(spec, 2), "workdir"), "models/b");
	st = step_at(spec, 3);
	assert_string_equal(json_string_value(json_array_get(json_object_get(st, "needs"), 1)),
			    "train-b");
	retry = json_object_get(st, "retry");
	assert_int_equal(int_at(retry, "limit"), 2);
	assert_int_equal(int_at(retry, "backoff_ms"), 10000);
	assert_int_equal(int_at(retry, "max_backoff_ms"), 60000);
	json_decref(spec);
}

/* hang: and watch: (steps/keys_job.c): normalized into the spec when present, errors at file:line:col. */
/* schedule: and triggers: (config_schedule.c): normalised, and every mistake at its place. */
static void test_config__schedule_and_triggers(void **state)
{
	json_t *spec, *s;
	char *txt;

	(void)state;
	spec = parse_ok("name: w\nparams:\n  C: {default: \"1\"}\nschedule: \"0 3 * * *\"\nsteps:\n  - name: a\n    command: [\"true\"]\n");
	txt = json_dumps(json_object_get(spec, "schedules"), JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(txt, "[{\"catchup\":\"all\",\"concurrency\":\"allow\",\"cron\":\"0 3 * * *\",\"gap\":\"shift\","
				 "\"max_catchup\":10,\"name\":\"schedule\",\"overlap\":\"first\",\"params\":{},"
				 "\"paused\":false,\"timezone\":\"UTC\"}]");
	free(txt);
	assert_null(json_object_get(spec, "triggers"));
	json_decref(spec);
	spec = parse_ok("name: w\nparams:\n  C: {default: \"1\"}\n"
			"schedule:\n  - {cron: \"30 2 * * *\", timezone: Europe/Berlin, gap: skip, overlap: last,\n"
			"     concurrency: forbid, catchup: latest, max_catchup: 3, params: {C: \"2\"}, name: nightly}\n"
			"  - \"@hourly\"\n"
			"triggers:\n  - data: {path: data/incoming, quiet: 5s, ignore: [\"*.lock\"]}\n"
			"  - git: {repo: /srv/r.git, branch: dev, path: wf.yaml}\n  - data: in2\n"
			"steps:\n  - name: a\n    command: [\"true\"]\n");
	s = json_array_get(json_object_get(spec, "schedules"), 0);
	assert_string_equal(json_string_value(json_object_get(s, "name")), "nightly");
	assert_string_equal(json_string_value(json_object_get(s, "timezone")), "Europe/Berlin");
	assert_string_equal(json_string_value(json_object_get(s, "gap")), "skip");
	assert_string_equal(json_string_value(json_object_get(s, "overlap")), "last");
	assert_string_equal(json_string_value(json_object_get(s, "catchup")), "latest");
	assert_int_equal(json_integer_value(json_object_get(s, "max_catchup")), 3);
	assert_string_equal(json_string_value(json_object_get(json_object_get(s, "params"), "C")), "2");
	assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(spec, "schedules"), 1), "name")),
			    "schedule-2");
	txt = json_dumps(json_object_get(spec, "triggers"), JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(txt, "[{\"ignore\":[\"*.lock\"],\"kind\":\"data\",\"name\":\"data\",\"path\":\"data/incoming\","
				 "\"quiet_ms\":5000},{\"branch\":\"dev\",\"kind\":\"git\",\"name\":\"git\",\"path\":\"wf.yaml\","
				 "\"repo\":\"/srv/r.git\"},{\"ignore\":[],\"kind\":\"data\",\"name\":\"data-2\",\"path\":\"in2\","
				 "\"quiet_ms\":30000}]");
	free(txt);
	json_decref(spec);

	/* a bad cron field is shown at its column inside the string */
	expect_errors("name: w\nschedule: \"0 25 * * *\"\nsteps:\n  - name: a\n    command: [\"true\"]\n",
		      "w.yaml:2:14: cron \"0 25 * * *\": field 2 (hour): 25 is out of range 0-23", NULL);
	expect_errors("name: w\nschedule: {cron: \"@daily\", timezone: Mars/Olympus, concurrency: sometimes, params: {X: \"1\"}}\n"
		      "triggers:\n  - data: {quiet: 5s}\n  - data: {path: ../../etc}\n  - cron: x\n"
		      "steps:\n  - name: a\n    command: [\"true\"]\n",
		      "w.yaml:2:38: unknown time zone \"Mars/Olympus\": use an IANA zone id such as \"UTC\" or "
		      "\"Europe/Berlin\" (names are case-sensitive)",
		      "w.yaml:2:65: concurrency \"sometimes\" is not valid; use one of: allow forbid replace",
		      "w.yaml:2:85: schedule params: \"X\" is not a parameter of this workflow (declare it under params:)",
		      "w.yaml:4:11: a data trigger needs \"path\", the directory to watch",
		      "w.yaml:5:18: data trigger path \"../../etc\" climbs out of the workflow's directory with \"..\"",
		      "w.yaml:6:5: unknown trigger \"cron\"; use data or git", NULL);

}

static void test_config__hang_and_watch(void **state)
{
	json_t *spec, *st;

	(void)state;
	spec = parse_ok("name: w\nsteps:\n  - name: t\n    kind: train\n    command: [\"true\"]\n"
			"    hang: {period: 10s, periods: 5, on_hang: restart, phases: {checkpoint: 20m}}\n"
			"    watch:\n      loss: [nan_or_inf, {rule: \"> 10 * min\", action: fail}]\n"
			"  - name: plain\n    command: [\"true\"]\n  - name: off\n    command: [\"true\"]\n    hang: off\n");
	st = json_array_get(json_object_get(spec, "steps"), 0);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "hang"), "period_ms")), 10000);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "hang"), "periods")), 5);
	assert_string_equal(json_string_value(json_object_get(json_object_get(st, "hang"), "on_hang")), "restart");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(json_object_get(st, "hang"), "phases"),
							    "checkpoint")), 1200000);
	{
		char *w = json_dumps(json_object_get(st, "watch"), JSON_COMPACT | JSON_SORT_KEYS);
		assert_string_equal(w, "{\"loss\":[{\"action\":\"notify\",\"rule\":\"nan_or_inf\"},"
				       "{\"action\":\"fail\",\"rule\":\"> 10 * min\"}]}");
		free(w);
	}
	/* absent: no key at all (specs read as before) */
	st = json_array_get(json_object_get(spec, "steps"), 1);
	assert_null(json_object_get(st, "hang"));
	assert_null(json_object_get(st, "watch"));
	st = json_array_get(json_object_get(spec, "steps"), 2);
	assert_true(json_is_false(json_object_get(json_object_get(st, "hang"), "enabled")));
	json_decref(spec);

	expect_errors("name: w\nsteps:\n  - name: t\n    command: [\"true\"]\n    hang: {period: 5, windw: 1m, on_hang: panic}\n",
		      "w.yaml:5:20: hang period: duration \"5\": missing unit (use e.g. 30s, 5m, 2h)",
		      "w.yaml:5:23: hang has no setting \"windw\"; the settings are period, periods, window, confirm, "
		      "warmup, variance, low, high, clear, cadence, on_hang, enabled and phases",
		      "w.yaml:5:43: hang on_hang \"panic\" is not valid; use notify, restart or fail", NULL);
	expect_errors("name: w\nsteps:\n  - name: t\n    command: [\"true\"]\n    watch: {loss: [\"> ten * min\"]}\n",
		      "w.yaml:5:20: watch rule \"> ten * min\": expected a number after \">\", not \"ten\" (watching \"loss\")",
		      NULL);
	expect_errors("name: w\nsteps:\n  - name: l\n    kind: label\n    dataset: d\n    hang: off\n",
		      "w.yaml:6:5: \"hang\" applies to run, train and evaluate steps; remove it from this label step", NULL);
}

/* a sweep's stop_when: "METRIC OP NUMBER" into {"metric", "op", "value"}; anything else refused with its place */
static void test_config__sweep_stop_when(void **state)
{
	json_t *spec, *sw;

	(void)state;
	spec = parse_ok("name: w\nsteps:\n  - name: s\n    sweep: {grid: {x: [1, 2]}, stop_when: \"val_loss <= 0.25\"}\n"
			"    command: [\"true\"]\n");
	sw = json_object_get(json_object_get(json_array_get(json_object_get(spec, "steps"), 0), "sweep"), "stop_when");
	assert_string_equal(json_string_value(json_object_get(sw, "metric")), "val_loss");
	assert_string_equal(json_string_value(json_object_get(sw, "op")), "<=");
	assert_true(json_real_value(json_object_get(sw, "value")) == 0.25);
	json_decref(spec);
	expect_errors("name: w\nsteps:\n  - name: s\n    sweep: {grid: {x: [1]}, stop_when: \"acc >= lots\"}\n"
		      "    command: [\"true\"]\n",
		      "w.yaml:4:40: stop_when \"acc >= lots\": a metric, a comparison and a number, e.g. \"accuracy >= 0.99\"",
		      NULL);
	expect_errors("name: w\nsteps:\n  - name: s\n    sweep: {grid: {x: [1]}, stop_when: \"0.9\"}\n"
		      "    command: [\"true\"]\n",
		      "w.yaml:4:40: stop_when \"0.9\": a metric, a comparison and a number, e.g. \"accuracy >= 0.99\"", NULL);
}

/* queue:, priority: (a step's own, else the workflow's) and gang: (items all at once), each checked at its place */
static void test_config__queue_priority_gang(void **state)
{
	json_t *spec, *st;

	(void)state;
	spec = parse_ok("name: w\nqueue: nightly\npriority: 3\nsteps:\n  - name: a\n    command: [\"true\"]\n"
			"  - name: b\n    queue: urgent\n    priority: -2\n    foreach: {range: 3}\n    gang: true\n"
			"    command: [\"true\"]\n");
	st = step_at(spec, 0);
	assert_string_equal(str_at(st, "queue"), "nightly");
	assert_int_equal(int_at(st, "priority"), 3);
	st = step_at(spec, 1);
	assert_string_equal(str_at(st, "queue"), "urgent");
	assert_int_equal(int_at(st, "priority"), -2);
	assert_true(json_is_true(json_object_get(st, "gang")));
	json_decref(spec);
	expect_errors("name: w\npriority: 5000\nsteps:\n  - name: a\n    queue: Bad Name\n    command: [\"true\"]\n"
		      "  - name: b\n    gang: true\n    command: [\"true\"]\n"
		      "  - name: c\n    foreach: {range: 2}\n    max_parallel: 1\n    gang: true\n    command: [\"true\"]\n",
		      "w.yaml:2:11: priority \"5000\" must be a whole number from -1000 to 1000 (higher runs first)",
		      "w.yaml:5:12: queue name \"Bad Name\" is not valid; use 1-63 of a-z, 0-9, _, . and -, starting with a "
		      "letter or digit",
		      "w.yaml:8:11: gang applies to a step with foreach: or sweep: (its items start together) or to a "
		      "deploy step (its replicas are placed together)",
		      "w.yaml:13:11: gang: true starts every item at once; remove max_parallel", NULL);
	/* preemptible: a job's step only (its job is what is stopped), true or false */
	spec = parse_ok("name: w\nsteps:\n  - {name: a, command: [\"true\"], preemptible: true}\n"
			"  - {name: b, command: [\"true\"], preemptible: false}\n");
	assert_true(json_is_true(json_object_get(step_at(spec, 0), "preemptible")));
	assert_null(json_object_get(step_at(spec, 1), "preemptible"));
	json_decref(spec);
	expect_errors("name: w\nsteps:\n  - {name: a, command: [\"true\"], preemptible: maybe}\n"
		      "  - {name: r, kind: register, model: m, preemptible: true}\n",
		      "w.yaml:3:47: preemptible must be true or false, not \"maybe\"",
		      "w.yaml:4:54: preemptible applies to a step that runs a job (run, train, evaluate): its job is what "
		      "is stopped and started again", NULL);
}

/* resources: a named resource of the hosts (license: 1) and a shared GPU (gpus: {count, shared}) */
static void test_config__named_resources_shared_gpus(void **state)
{
	json_t *spec, *res;

	(void)state;
	spec = parse_ok("name: w\nsteps:\n  - name: a\n    command: [\"true\"]\n"
			"    resources: {cpus: 1, license: 2, nvidia.com/mig-1g: 1, gpus: {count: 1, shared: true}}\n"
			"  - name: b\n    command: [\"true\"]\n    resources: {gpus: {count: 2}}\n");
	res = json_object_get(step_at(spec, 0), "resources");
	assert_int_equal(json_integer_value(json_object_get(res, "gpus")), 1);
	assert_true(json_is_true(json_object_get(res, "gpus_shared")));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(res, "named"), "license")), 2);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(res, "named"), "nvidia.com/mig-1g")), 1);
	res = json_object_get(step_at(spec, 1), "resources");
	assert_int_equal(json_integer_value(json_object_get(res, "gpus")), 2);
	assert_null(json_object_get(res, "gpus_shared"));
	assert_null(json_object_get(res, "named"));
	json_decref(spec);
	expect_errors("name: w\nsteps:\n  - name: a\n    command: [\"true\"]\n"
		      "    resources: {license: 1.5, 9lives: 1, mem: 1G, gpus: {count: 1, shared: maybe, split: 2}}\n",
		      "w.yaml:5:26: a named resource's count \"1.5\" must be a whole number from 0 to 100000",
		      "w.yaml:5:31: resource name \"9lives\" must start with a letter and hold only letters, digits, _ . - / "
		      "(64 at most)",
		      "w.yaml:5:42: unknown resources key \"mem\" (did you mean \"memory\"?); known keys: cpus, memory, gpus, "
		      "or a named resource of the hosts (FERRY_RESOURCES)",
		      "w.yaml:5:76: resources gpus shared must be true or false, not \"maybe\"",
		      "w.yaml:5:83: unknown resources gpus key \"split\"; known keys: count, shared", NULL);
}

/* a grid dimension "{{params.NAME}}": kept as written, checked against the declared default */
static void test_config__sweep_grid_from_params(void **state)
{
	json_t *spec, *grid;

	(void)state;
	spec = parse_ok("name: w\nparams: {C: \"[1, 10]\", g: \"0.05\", k: {description: none given}}\nsteps:\n  - name: s\n"
			"    sweep: {grid: {C: \"{{params.C}}\", g: \"{{params.g}}\", k: \"{{params.k}}\", d: [2, 3]}}\n"
			"    command: [echo, \"{{item.C}}\"]\n");
	grid = json_object_get(json_object_get(json_array_get(json_object_get(spec, "steps"), 0), "sweep"), "grid");
	assert_string_equal(json_string_value(json_object_get(grid, "C")), "{{params.C}}");
	assert_int_equal(json_array_size(json_object_get(grid, "d")), 2);
	json_decref(spec);
	expect_errors("name: w\nparams: {C: \"[1, 10]\"}\nsteps:\n  - name: s\n    sweep: {grid: {x: \"{{params.nope}}\"}}\n"
		      "    command: [\"true\"]\n",
		      "w.yaml:5:19: sweep grid x: params.nope is not a declared param (declared: C)", NULL);
	expect_errors("name: w\nparams: {C: \"[]\"}\nsteps:\n  - name: s\n    sweep: {grid: {C: \"{{params.C}}\"}}\n"
		      "    command: [\"true\"]\n",
		      "w.yaml:5:19: sweep grid C: params.C: the list is empty; a grid dimension needs at least one value", NULL);
	expect_errors("name: w\nsteps:\n  - name: s\n    sweep: {grid: {C: \"1, 10\"}}\n    command: [\"true\"]\n",
		      "w.yaml:4:19: sweep grid C: a list of values or \"{{params.NAME}}\", not \"1, 10\"", NULL);
}

static void test_config__syntax_error_line_col(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - name: a\n"
		      "    command: [a, b\n"
		      "  - name: b\n",
		      "w.yaml:5:9: syntax error: did not find expected ',' or ']' "
		      "(while parsing a flow sequence at line 4, column 14)", NULL);
	expect_errors("name: x\n  bad: indent\n",
		      "w.yaml:2:6: syntax error: mapping values are not allowed in this context",
		      NULL);
}

static void test_config__document_count_and_size(void **state)
{
	json_t *spec = NULL;
	cfg_errors errs;
	char *big;

	(void)state;
	expect_errors("# nothing here\n",
		      "w.yaml:1:1: empty document; a workflow needs at least name and steps", NULL);
	expect_errors("",
		      "w.yaml:1:1: empty document; a workflow needs at least name and steps", NULL);
	expect_errors("name: x\nsteps: [{name: a, command: a}]\n---\nname: y\n",
		      "w.yaml:3:1: more than one document; a workflow file holds exactly one "
		      "(remove the second \"---\")", NULL);
	big = malloc(CFG_MAX_YAML + 2);
	memset(big, '#', CFG_MAX_YAML + 1);
	big[CFG_MAX_YAML + 1] = '\0';
	assert_int_equal(parse(big, &spec, &errs), FERRY_EINVALID);
	assert_int_equal(errs.len, 1);
	assert_non_null(strstr(errs.items[0], "w.yaml:1:1: the file is 1048577 bytes"));
	cfg_errors_dispose(&errs);
	free(big);
}

static void test_config__duplicate_key(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - name: a\n"
		      "    command: one\n"
		      "    command: two\n",
		      "w.yaml:5:5: duplicate key \"command\" (first defined at line 4)", NULL);
}

static void test_config__unknown_top_level_key(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "stpes:\n"
		      "  - {name: a, command: a}\n",
		      "w.yaml:1:1: missing required key \"steps\" (a list of steps)",
		      "w.yaml:2:1: unknown top-level key \"stpes\" (did you mean \"steps\"?); "
		      "known keys: name, description, params, steps, schedule, triggers, finally, queue, priority", NULL);
}

static void test_config__unknown_kind(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: a, kind: docker, command: a}\n",
		      "w.yaml:3:21: unknown kind \"docker\"; known kinds: run, train, evaluate, "
		      "gate, label, register, cache, deploy", NULL);
}

static void test_config__gate_runs_no_command(void **state)
{
	json_t *spec = NULL;
	cfg_errors errs;

	(void)state;
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: a, kind: gate, command: [echo]}\n",
		      "w.yaml:3:36: a gate step waits for a person and runs no command; remove \"command\"", NULL);
	assert_int_equal(parse("name: x\nsteps:\n  - {name: a, kind: gate}\n  - {name: b, needs: [a], command: c}\n",
			       &spec, &errs), 0);
	assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(spec, "steps"), 0), "kind")),
			    "gate");
	json_decref(spec);
}

static void test_config__unknown_step_key(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: a, comand: a}\n",
		      "w.yaml:3:5: step is missing required key \"command\" (a list like "
		      "[python, train.py] or one shell string)",
		      "w.yaml:3:15: unknown step key \"comand\" (did you mean \"command\"?); known "
		      "keys: name, kind, needs, command, env, image, workdir, timeout, retry, when, fail_run, foreach, sweep, max_parallel, min_success, gang, queue, priority, preemptible, executor, "
		      "resources, network, slurm, secrets, warm, cache, gate, on_fail, model, dataset, labels, webhook, on_timeout, "
		      "artifact, version, alias, serve, traffic, replicas, sample, deployment, auto_stop, retire_after, load_test, canary, approve, placement, hang, watch",
		      NULL);
}

static void test_config__unknown_needs(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: a, command: a}\n"
		      "  - {name: b, command: b, needs: [a, x]}\n"
		      "  - {name: c, command: c}\n",
		      "w.yaml:4:38: step \"b\" needs unknown step \"x\"; known steps: a, c", NULL);
}

static void test_config__self_need(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - name: a\n"
		      "    needs: a\n"
		      "    command: a\n",
		      "w.yaml:4:12: step \"a\" needs itself; remove it from needs", NULL);
}

static void test_config__cycle_named(void **state)
{
	(void)state;
	/* b needs a, c needs b, a needs c: in run order a -> b -> c -> a */
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: start, command: s}\n"
		      "  - {name: a, command: a, needs: [start, c]}\n"
		      "  - {name: b, command: b, needs: a}\n"
		      "  - {name: c, command: c, needs: b}\n"
		      "  - {name: d, command: d, needs: c}\n"
		      "  - {name: e, command: e, needs: f}\n"
		      "  - {name: f, command: f, needs: e}\n",
		      "w.yaml:4:5: cycle: a -> b -> c -> a",
		      "w.yaml:8:5: cycle: e -> f -> e", NULL);
}

static void test_config__duplicate_step_name(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - name: a\n"
		      "    command: a\n"
		      "  - name: a\n"
		      "    command: b\n",
		      "w.yaml:5:11: duplicate step name \"a\" (first defined at line 3)", NULL);
}

static void test_config__bad_durations(void **state)
{
	int64_t ms = -1;

	(void)state;
	assert_int_equal(duration_parse("30", &ms), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(),
			    "duration \"30\": missing unit (use e.g. 30s, 5m, 2h)");
	assert_int_equal(duration_parse("5x", &ms), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(),
			    "duration \"5x\": unknown unit \"x\" (use ms, s, m, h or d)");
	assert_int_equal(duration_parse("0s", &ms), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "duration \"0s\" must be greater than zero");
	assert_int_equal(duration_parse("", &ms), FERRY_EINVALID);
	assert_int_equal(duration_parse("-5s", &ms), FERRY_EINVALID);
	assert_int_equal(duration_parse("1.5h", &ms), FERRY_EINVALID);
	assert_int_equal(duration_parse("1h 30m", &ms), FERRY_EINVALID);
	assert_int_equal(duration_parse("9223372036854775807d", &ms), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "duration \"9223372036854775807d\" is too large");
	assert_int_equal(duration_parse("99999999999999999999s", &ms), FERRY_EINVALID);
	assert_int_equal(ms, -1);

	expect_errors("name: x\n"
		      "steps:\n"
		      "  - name: a\n"
		      "    command: a\n"
		      "    timeout: 30\n"
		      "    retry: {backoff: 5x, max_backoff: 0s}\n",
		      "w.yaml:5:14: timeout: duration \"30\": missing unit (use e.g. 30s, 5m, 2h)",
		      "w.yaml:6:22: retry backoff: duration \"5x\": unknown unit \"x\" "
		      "(use ms, s, m, h or d)",
		      "w.yaml:6:39: retry max_backoff: duration \"0s\" must be greater than zero",
		      NULL);
}

static void test_config__good_durations(void **state)
{
	int64_t ms = 0;

	(void)state;
	assert_int_equal(duration_parse("1h30m", &ms), 0);
	assert_int_equal(ms, 5400000);
	assert_int_equal(duration_parse("250ms", &ms), 0);
	assert_int_equal(ms, 250);
	assert_int_equal(duration_parse("2d", &ms), 0);
	assert_int_equal(ms, 172800000);
	assert_int_equal(duration_parse("1m5s10ms", &ms), 0);
	assert_int_equal(ms, 65010);
}

static void test_config__retry_shorthand_and_mapping(void **state)
{
	json_t *spec, *retry;

	(void)state;
	spec = parse_ok("name: x\n"
			"steps:\n"
			"  - {name: a, command: a, retry: 3}\n"
			"  - {name: b, command: b, retry: {limit: 5, backoff: 2s}}\n"
			"  - {name: c, command: c, retry: {max_backoff: 1h}}\n");
	retry = json_object_get(step_at(spec, 0), "retry");
	assert_int_equal(int_at(retry, "limit"), 3);
	assert_int_equal(int_at(retry, "backoff_ms"), 1000);
	assert_int_equal(int_at(retry, "max_backoff_ms"), 300000);
	retry = json_object_get(step_at(spec, 1), "retry");
	assert_int_equal(int_at(retry, "limit"), 5);
	assert_int_equal(int_at(retry, "backoff_ms"), 2000);
	retry = json_object_get(step_at(spec, 2), "retry");
	assert_int_equal(int_at(retry, "limit"), 0);
	assert_int_equal(int_at(retry, "max_backoff_ms"), 3600000);
	json_decref(spec);

	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: a, command: a, retry: 101}\n"
		      "  - {name: b, command: b, retry: {limit: 1, backoff: 10m, max_backoff: 1m}}\n"
		      "  - {name: c, command: c, retry: {limt: 1}}\n",
		      "w.yaml:3:34: retry limit \"101\" must be a whole number from 0 to 100",
		      "w.yaml:4:54: retry backoff \"10m\" must not exceed max_backoff \"1m\"",
		      "w.yaml:5:35: unknown retry key \"limt\" (did you mean \"limit\"?); known keys: "
		      "limit, backoff, max_backoff", NULL);
}

static void test_config__command_shorthand(void **state)
{
	json_t *spec;
	char *dump;

	(void)state;
	spec = parse_ok("name: x\n"
			"steps:\n"
			"  - name: a\n"
			"    command: echo hi | wc -c\n");
	dump = json_dumps(json_object_get(step_at(spec, 0), "command"), JSON_COMPACT);
	assert_string_equal(dump, "[\"/bin/sh\",\"-c\",\"echo hi | wc -c\"]");
	free(dump);
	json_decref(spec);
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: a, command: \"\"}\n"
		      "  - {name: b, command: []}\n"
		      "  - {name: c, command: {a: b}}\n"
		      "  - {name: d}\n",
		      "w.yaml:3:24: command must not be empty",
		      "w.yaml:4:24: command must not be empty",
		      "w.yaml:5:24: command must be a list of strings or one shell string, "
		      "not a mapping",
		      "w.yaml:6:5: step is missing required key \"command\" (a list like "
		      "[python, train.py] or one shell string)", NULL);
}

static void test_config__template_undeclared_param(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "params: {a: 1, b: 2}\n"
		      "steps:\n"
		      "  - name: s\n"
		      "    command: [echo, \"{{ params.a }}\", \"x{{params.c}}\"]\n"
		      "    env: {K: \"{{ nope }}\"}\n"
		      "    workdir: \"{{ params.b\"\n",
		      "w.yaml:5:39: template refers to undeclared parameter \"c\"; declared: a, b",
		      "w.yaml:6:14: unknown template expression \"nope\"; use params.NAME, run.id, "
		      "steps.STEP.outputs.KEY, steps.STEP.outputs or (under foreach:) item, item.KEY",
		      "w.yaml:7:14: unclosed \"{{\" in \"{{ params.b\"; close it with \"}}\"", NULL);
}

static void test_config__template_non_upstream_step(void **state)
{
	json_t *spec;

	(void)state;
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: a, command: a}\n"
		      "  - {name: b, command: \"{{ steps.a.outputs.k }}\"}\n"
		      "  - {name: c, command: \"{{ steps.c.outputs.k }} {{ steps.zz.outputs.k }}\"}\n",
		      "w.yaml:4:24: step \"b\" uses outputs of \"a\", which is not upstream of it; "
		      "add \"a\" to its needs",
		      "w.yaml:5:24: step \"c\" cannot use its own outputs",
		      "w.yaml:5:24: template refers to unknown step \"zz\"", NULL);
	/* transitive upstream is fine, and step names may hold dots */
	spec = parse_ok("name: x\n"
			"steps:\n"
			"  - {name: v1.prep, command: a}\n"
			"  - {name: b, command: b, needs: v1.prep}\n"
			"  - {name: c, command: \"{{steps.v1.prep.outputs.out_1}}\", needs: b}\n");
	json_decref(spec);
}

/* executor, image, resources, network: where and how a job runs */
static void test_config__placement(void **state)
{
	json_t *spec, *st;
	char hash[65];
	cfg_errors errs = {0};
	const char *ok = "name: x\n"
			 "steps:\n"
			 "  - name: a\n"
			 "    command: [true]\n"
			 "    executor: local\n"
			 "    resources: {cpus: 1.5, memory: 512Mi, gpus: 1}\n"
			 "    network: host\n"
			 "  - {name: b, command: [true], resources: {memory: 1G}}\n";

	(void)state;
	assert_int_equal(cfg_workflow_parse(&spec, hash, ok, strlen(ok), "w.yaml", &errs), 0);
	st = json_array_get(json_object_get(spec, "steps"), 0);
	assert_string_equal(json_string_value(json_object_get(st, "executor")), "local");
	assert_string_equal(json_string_value(json_object_get(st, "network")), "host");
	assert_true(json_real_value(json_object_get(json_object_get(st, "resources"), "cpus")) == 1.5);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "resources"), "memory_mb")), 512);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "resources"), "gpus")), 1);
	st = json_array_get(json_object_get(spec, "steps"), 1);
	assert_true(json_is_null(json_object_get(st, "executor")));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "resources"), "memory_mb")), 954);
	json_decref(spec);
	cfg_errors_dispose(&errs);

	expect_errors("name: x\n"
		      "steps:\n"
		      "  - name: a\n"
		      "    command: [true]\n"
		      "    executor: kubernetes\n"
		      "    resources: {cpus: 0, memory: lots, gpu: 1}\n"
		      "  - {name: b, command: [true], executor: local, image: 'debian:12'}\n"
		      "  - {name: c, kind: gate, executor: local}\n"
		      "  - {name: d, command: [true], image: '--privileged'}\n",
		      "w.yaml:5:15: unknown executor \"kubernetes\"; known executors: local, noop, podman, docker, slurm",
		      "w.yaml:6:23: resources cpus \"0\" must be a number from 0.01 to 1024",
		      "w.yaml:6:34: resources memory \"lots\" must be a size such as 512Mi, 2Gi or 1G",
		      "w.yaml:6:40: unknown resources key \"gpu\" (did you mean \"gpus\"?); known keys: cpus, memory, gpus, "
		      "or a named resource of the hosts (FERRY_RESOURCES)",
		      "w.yaml:7:56: image \"debian:12\": executor local runs commands on the host; an image "
		      "needs an executor that runs images (podman, docker, slurm)",
		      "w.yaml:8:37: a gate step runs no job; remove \"executor\"",
		      "w.yaml:9:39: image \"--privileged\" is not an image name (letters, digits and . _ - / : @)",
		      NULL);
	/* slurm: how a slurm job is submitted; only beside executor: slurm */
	{
		const char *sl = "name: x\n"
				 "steps:\n"
				 "  - {name: a, command: [true], executor: slurm, slurm: {via: cli, partition: debug}}\n";
		assert_int_equal(cfg_workflow_parse(&spec, hash, sl, strlen(sl), "w.yaml", &errs), 0);
		st = json_object_get(json_array_get(json_object_get(spec, "steps"), 0), "slurm");
		assert_string_equal(json_string_value(json_object_get(st, "via")), "cli");
		assert_string_equal(json_string_value(json_object_get(st, "partition")), "debug");
		json_decref(spec);
		cfg_errors_dispose(&errs);
	}
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: a, command: [true], executor: local, slurm: {via: cli}}\n"
		      "  - {name: b, command: [true], executor: slurm, slurm: {via: ssh}}\n",
		      "w.yaml:3:56: slurm: applies to executor: slurm, not \"local\"; remove it or set executor: slurm",
		      "w.yaml:4:62: slurm via \"ssh\" must be rest (slurmrestd) or cli (sbatch)",
		      NULL);
	assert_int_equal(cfg_memory_mb("512Mi"), 512);
	assert_int_equal(cfg_memory_mb("2Gi"), 2048);
	assert_int_equal(cfg_memory_mb("1048577"), 2);
	assert_int_equal(cfg_memory_mb("1.5Gi"), 1536);
	assert_int_equal(cfg_memory_mb("12X"), -1);
	assert_int_equal(cfg_memory_mb("-1G"), -1);
	assert_int_equal(cfg_memory_mb(""), -1);
}

static void test_config__multiple_errors_in_order(void **state)
{
	(void)state;
	expect_errors("name: Bad Name\n"
		      "params:\n"
		      "  1p: x\n"
		      "steps:\n"
		      "  - name: a\n"
		      "    command: a\n"
		      "    network: wifi\n"
		      "    env: {OK: 1, 9X: 2}\n"
		      "  - name: b\n"
		      "    needs: [nope]\n"
		      "    workdir: ../up\n"
		      "    timeout: 5\n"
		      "    extra: 1\n",
		      "w.yaml:1:7: workflow name \"Bad Name\" is not valid; use 1-63 of a-z, 0-9, _, "
		      ". and -, starting with a letter or digit",
		      "w.yaml:3:3: parameter name \"1p\" is not valid; use letters, digits and _, "
		      "not starting with a digit",
		      "w.yaml:7:14: network \"wifi\" must be none or host",
		      "w.yaml:8:18: env name \"9X\" is not valid; use letters, digits and _, not "
		      "starting with a digit",
		      "w.yaml:9:5: step is missing required key \"command\" (a list like "
		      "[python, train.py] or one shell string)",
		      "w.yaml:10:13: step \"b\" needs unknown step \"nope\"; known steps: a",
		      "w.yaml:11:14: workdir \"../up\" must not contain \"..\"; use a path below the "
		      "run directory or an absolute path",
		      "w.yaml:12:14: timeout: duration \"5\": missing unit (use e.g. 30s, 5m, 2h)",
		      "w.yaml:13:5: unknown step key \"extra\"; known keys: name, kind, needs, "
		      "command, env, image, workdir, timeout, retry, when, fail_run, foreach, sweep, max_parallel, min_success, gang, queue, priority, preemptible, executor, resources, network, slurm, secrets, warm, cache, "
		      "gate, on_fail, model, "
		      "dataset, labels, webhook, on_timeout, artifact, version, alias, serve, traffic, replicas, sample, deployment, auto_stop, retire_after, load_test, canary, approve, placement, hang, watch", NULL);
}

/* when:, needs if: any, finally: and on_fail: mistakes, each at its place with its rule */
static void test_config__conditions_and_finally(void **state)
{
	json_t *spec;

	(void)state;
	expect_errors("name: w\n"
		      "params: {n: 1}\n"
		      "steps:\n"
		      "  - {name: a, command: a, when: 'params.n = 1'}\n"
		      "  - {name: b, command: b, when: 'params.m == 1'}\n"
		      "  - {name: c, command: c, when: 'steps.d.outputs.x > 1'}\n"
		      "  - {name: d, command: d, needs: [{step: a, if: maybe}, {if: any}]}\n"
		      "  - {name: e, command: e, when: 'production.f1 < 1'}\n"
		      "  - {name: f, command: f, needs: z1, fail_run: true}\n"
		      "  - {name: g, kind: evaluate, command: g, on_fail: skip}\n"
		      "finally:\n"
		      "  - {name: z1, command: z, needs: a}\n",
		      "w.yaml:4:33: when \"params.n = 1\": at column 10: \"=\" is not an operator; compare with \"==\"",
		      "w.yaml:5:33: when refers to undeclared parameter \"m\"; declared: n",
		      "w.yaml:6:33: step \"c\" uses outputs of \"d\", which is not upstream of it; add \"d\" to its needs",
		      "w.yaml:7:49: if: \"maybe\" is not a needs condition; use succeeded (the default: run only when "
		      "\"a\" succeeded) or any (also when it was skipped)",
		      "w.yaml:7:57: a needs item that is a mapping names its step: {step: NAME, if: any}",
		      "w.yaml:8:33: step \"e\"'s when reads production, but no register step above or below it names "
		      "a model; production is the production version of the model a register step above or below it "
		      "registers",
		      "w.yaml:9:34: step \"f\" needs \"z1\", a finally step: finally steps run after every other step; "
		      "move \"f\" under finally: too, or \"z1\" under steps:",
		      "w.yaml:9:48: fail_run applies to the steps under finally: (whether their failure fails a run that "
		      "succeeded); a step of steps: fails its run anyway",
		      "w.yaml:10:52: on_fail says what a failed gate does; this step has no gate",
		      "w.yaml:12:35: finally step \"z1\" needs \"a\": a finally step runs after every step of steps: "
		      "already (and may use their outputs); its needs name only other finally steps", NULL);
	/* what comes out: the condition as written, the model production means, finally steps last */
	spec = parse_ok("name: w\n"
			"steps:\n"
			"  - {name: t, kind: train, command: t, gate: {accuracy: '>= 0.9'}, on_fail: skip}\n"
			"  - {name: r, kind: register, needs: t, model: digits}\n"
			"  - {name: d, needs: [{step: r, if: any}], command: d,\n"
			"     when: '{{steps.t.metrics.accuracy}} >= production.accuracy'}\n"
			"finally:\n"
			"  - {name: z, command: [sh, -c, 'echo {{steps.t.outputs.model}}']}\n");
	assert_string_equal(str_at(step_at(spec, 0), "on_fail"), "skip");
	assert_string_equal(str_at(step_at(spec, 2), "when"), "{{steps.t.metrics.accuracy}} >= production.accuracy");
	assert_string_equal(str_at(step_at(spec, 2), "when_model"), "digits");
	assert_string_equal(json_string_value(json_array_get(json_object_get(step_at(spec, 2), "needs_any"), 0)), "r");
	assert_string_equal(str_at(step_at(spec, 3), "name"), "z");
	assert_true(json_is_true(json_object_get(step_at(spec, 3), "finally")));
	assert_null(json_object_get(step_at(spec, 1), "finally"));
	json_decref(spec);
}

static void test_config__aliases(void **state)
{
	json_t *spec;
	char *dump;

	(void)state;
	/* an aliased node is just that node */
	spec = parse_ok("name: x\n"
			"steps:\n"
			"  - name: a\n"
			"    command: &cmd [python, run.py]\n"
			"    env: &env {A: \"1\"}\n"
			"  - {name: b, command: *cmd, env: *env, needs: a}\n");
	dump = json_dumps(json_object_get(step_at(spec, 1), "command"), JSON_COMPACT);
	assert_string_equal(dump, "[\"python\",\"run.py\"]");
	free(dump);
	json_decref(spec);
	/* a self-referencing anchor does not loop */
	expect_errors("name: x\nsteps: &s [*s]\n",
		      "w.yaml:2:8: a step must be a mapping with at least name and command, "
		      "not a list", NULL);
}

/* Appends printf output at *p, never past end. */
static void appendf(char **p, const char *end, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void appendf(char **p, const char *end, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(*p, (size_t)(end - *p), fmt, ap);
	va_end(ap);
	assert_true(n >= 0 && n < end - *p);
	*p += n;
}

static void test_config__alias_amplification_bounded(void **state)
{
	json_t *spec = NULL;
	cfg_errors errs;
	char *yaml = NULL, *p;
	size_t cap = 64 * 1024, i;
	int rc;

	(void)state;
	/* a 4000-item list reused by 1000 steps would be 4 million items */
	yaml = malloc(cap);
	p = yaml;
	appendf(&p, yaml + cap, "name: x\nsteps:\n  - name: s0\n    command: &c [");
	for (i = 0; i < 4000; i++)
		appendf(&p, yaml + cap, "%sa", i ? "," : "");
	appendf(&p, yaml + cap, "]\n");
	for (i = 1; i < 1000; i++)
		appendf(&p, yaml + cap, "  - {name: s%zu, command: *c}\n", i);
	assert_true((size_t)(p - yaml) < cap);
	rc = parse(yaml, &spec, &errs);
	assert_int_equal(rc, FERRY_EINVALID);
	assert_int_equal(errs.len, 1);
	assert_non_null(strstr(errs.items[0], "aliases expand this document too much"));
	cfg_errors_dispose(&errs);
	free(yaml);
}

/* 5,000 steps are taken (a 2,000-step DAG is a use the console is benchmarked on); one more is refused */
static void test_config__step_limit(void **state)
{
	json_t *spec = NULL;
	cfg_errors errs;
	size_t cap = 512 * 1024;
	char *yaml = malloc(cap), *p;
	int n;

	(void)state;
	for (n = 5000; n <= 5001; n++) {
		p = yaml;
		appendf(&p, yaml + cap, "name: x\nsteps:\n  - {name: s0, command: [\"true\"]}\n");
		for (int i = 1; i < n; i++)
			appendf(&p, yaml + cap, "  - {name: s%d, needs: [s%d], command: [\"true\"]}\n", i, i / 2);
		spec = NULL;
		if (n == 5000) {
			spec = parse_ok(yaml);
			assert_int_equal(json_array_size(json_object_get(spec, "steps")), 5000);
			json_decref(spec);
			continue;
		}
		assert_int_equal(parse(yaml, &spec, &errs), FERRY_EINVALID);
		assert_int_equal(errs.len, 1);
		assert_non_null(strstr(errs.items[0], "too many steps (5001); at most 5000 are allowed"));
		cfg_errors_dispose(&errs);
	}
	free(yaml);
}

/*
 * 10,000 needs: items in all are taken, one more is refused at that item:
 * a list of 100 step names anchored once and named by 101 steps (anchors
 * made 90,000 edges of 46 KB before, and drawing them took a core for
 * minutes).
 */
static void test_config__edge_limit(void **state)
{
	json_t *spec = NULL;
	cfg_errors errs;
	size_t cap = 512 * 1024;
	char *yaml = malloc(cap), *p;

	(void)state;
	for (int extra = 0; extra <= 1; extra++) {
		p = yaml;
		appendf(&p, yaml + cap, "name: x\nsteps:\n");
		for (int i = 0; i < 100; i++)
			appendf(&p, yaml + cap, "  - {name: a%d, command: [\"true\"]}\n", i);
		appendf(&p, yaml + cap, "  - {name: b0, command: [\"true\"], needs: &all [");
		for (int i = 0; i < 100; i++)
			appendf(&p, yaml + cap, "%sa%d", i ? ", " : "", i);
		appendf(&p, yaml + cap, "]}\n");
		for (int i = 1; i < 100; i++)
			appendf(&p, yaml + cap, "  - {name: b%d, command: [\"true\"], needs: *all}\n", i);
		if (extra)
			appendf(&p, yaml + cap, "  - {name: last, command: [\"true\"], needs: [b0]}\n");
		spec = NULL;
		if (!extra) {
			spec = parse_ok(yaml);
			assert_int_equal(json_array_size(json_object_get(spec, "steps")), 200);
			json_decref(spec);
			continue;
		}
		assert_int_equal(parse(yaml, &spec, &errs), FERRY_EINVALID);
		assert_int_equal(errs.len, 1);
		assert_non_null(strstr(errs.items[0], "w.yaml:203:45: "));
		assert_non_null(strstr(errs.items[0], "too many dependencies: the needs of the steps up to \"last\" name "
						      "10001 steps in all; at most 10000 are allowed"));
		cfg_errors_dispose(&errs);
	}
	free(yaml);
}

static void test_config__nesting_and_anchor_limits(void **state)
{
	json_t *spec = NULL;
	cfg_errors errs;
	char *yaml = malloc(64 * 1024), *p;
	int i;

	(void)state;
	/* libyaml is quadratic in flow depth and in anchors: both are capped */
	p = yaml;
	appendf(&p, yaml + 64 * 1024, "name: x\nsteps: ");
	for (i = 0; i < 20000; i++)
		*p++ = '[';
	for (i = 0; i < 20000; i++)
		*p++ = ']';
	*p = '\0';
	assert_int_equal(parse(yaml, &spec, &errs), FERRY_EINVALID);
	assert_int_equal(errs.len, 1);
	assert_string_equal(errs.items[0], "w.yaml:2:71: nested more than 64 levels deep; "
					   "a workflow needs far fewer");
	cfg_errors_dispose(&errs);

	p = yaml;
	appendf(&p, yaml + 64 * 1024, "name: x\nsteps:\n");
	for (i = 0; i < 300; i++)
		appendf(&p, yaml + 64 * 1024, "  - &a%d {name: s%d, command: c}\n", i, i);
	assert_int_equal(parse(yaml, &spec, &errs), FERRY_EINVALID);
	assert_int_equal(errs.len, 1);
	assert_string_equal(errs.items[0], "w.yaml:259:5: more than 256 anchors (&name); "
					   "a workflow needs far fewer");
	cfg_errors_dispose(&errs);
	free(yaml);
}

static void test_config__hash_stability(void **state)
{
	const char *a = "name: x\nsteps: [{name: a, command: a}]\n";
	const char *b = "name: x\nsteps: [{name: a, command: b}]\n";
	char h1[65], h2[65], h3[65];
	json_t *s1 = NULL, *s2 = NULL, *s3 = NULL;
	cfg_errors errs = {0};

	(void)state;
	assert_int_equal(cfg_workflow_parse(&s1, h1, a, strlen(a), NULL, &errs), 0);
	assert_int_equal(cfg_workflow_parse(&s2, h2, a, strlen(a), "other.yaml", &errs), 0);
	assert_int_equal(cfg_workflow_parse(&s3, h3, b, strlen(b), NULL, &errs), 0);
	assert_int_equal(strlen(h1), 64);
	assert_int_equal(strspn(h1, "0123456789abcdef"), 64);
	assert_string_equal(h1, h2);
	assert_string_not_equal(h1, h3);
	json_decref(s3);
	/* sha256 of the empty input, a known value; errors do not skip the hash */
	assert_int_equal(cfg_workflow_parse(&s3, h3, "", 0, NULL, &errs), FERRY_EINVALID);
	assert_string_equal(h3, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	json_decref(s1);
	json_decref(s2);
	cfg_errors_dispose(&errs);
}

/* ---- step kinds and their keys ------------------------------------------ */

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config__valid_fan_out_fan_in),
		cmocka_unit_test(test_config__syntax_error_line_col),
		cmocka_unit_test(test_config__sweep_stop_when),
		cmocka_unit_test(test_config__queue_priority_gang),
		cmocka_unit_test(test_config__named_resources_shared_gpus),
		cmocka_unit_test(test_config__sweep_grid_from_params),
		cmocka_unit_test(test_config__hang_and_watch),
		cmocka_unit_test(test_config__schedule_and_triggers),
		cmocka_unit_test(test_config__document_count_and_size),
		cmocka_unit_test(test_config__duplicate_key),
		cmocka_unit_test(test_config__unknown_top_level_key),
		cmocka_unit_test(test_config__unknown_kind),
		cmocka_unit_test(test_config__gate_runs_no_command),
		cmocka_unit_test(test_config__unknown_step_key),
		cmocka_unit_test(test_config__unknown_needs),
		cmocka_unit_test(test_config__self_need),
		cmocka_unit_test(test_config__cycle_named),
		cmocka_unit_test(test_config__duplicate_step_name),
		cmocka_unit_test(test_config__bad_durations),
		cmocka_unit_test(test_config__good_durations),
		cmocka_unit_test(test_config__retry_shorthand_and_mapping),
		cmocka_unit_test(test_config__command_shorthand),
		cmocka_unit_test(test_config__template_undeclared_param),
		cmocka_unit_test(test_config__template_non_upstream_step),
		cmocka_unit_test(test_config__multiple_errors_in_order),
		cmocka_unit_test(test_config__placement),
		cmocka_unit_test(test_config__aliases),
		cmocka_unit_test(test_config__conditions_and_finally),
		cmocka_unit_test(test_config__alias_amplification_bounded),
		cmocka_unit_test(test_config__step_limit),
		cmocka_unit_test(test_config__edge_limit),
		cmocka_unit_test(test_config__nesting_and_anchor_limits),
		cmocka_unit_test(test_config__hash_stability),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

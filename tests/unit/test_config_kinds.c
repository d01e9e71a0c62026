/*
 * Unit tests for config: the step kinds' keys — the ML pipeline's kinds
 * (train, evaluate, gate, label, register, cache, deploy) with their keys'
 * values, keys given to a kind that does not take them, required keys and
 * commands, bad values, label paths and webhooks, gate entries, templates
 * in kind keys, and which model a production gate compares against.
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

/* The kind-specific part of step i as compact JSON (the caller frees it). */
static char *kind_part(json_t *spec, size_t i)
{
	static const char *const keys[] = {"kind", "command", "timeout_ms", "cache", "gate", "model",
					   "dataset", "labels", "webhook", "on_timeout", "artifact",
					   "version", "aliases"};
	json_t *st = step_at(spec, i), *part = json_object();
	char *s;
	size_t k;

	for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		assert_non_null(json_object_get(st, keys[k]));
		json_object_set(part, keys[k], json_object_get(st, keys[k]));
	}
	s = json_dumps(part, JSON_COMPACT | JSON_REAL_PRECISION(15));
	json_decref(part);
	return s;
}

static void expect_kind_part(json_t *spec, size_t i, const char *want)
{
	char *s = kind_part(spec, i);

	assert_string_equal(s, want);
	free(s);
}

static void test_config__ml_pipeline(void **state)
{
	json_t *spec;

	(void)state;
	spec = parse_ok("name: digits\n"
			"params:\n"
			"  data: data/digits\n"
			"steps:\n"
			"  - name: stage\n"
			"    kind: cache\n"
			"    dataset: \"{{params.data}}\"\n"
			"  - name: label\n"
			"    kind: label\n"
			"    needs: stage\n"
			"    dataset: \"{{ steps.stage.outputs.cache_dir }}/images\"\n"
			"    webhook: https://labels.example.com/tasks\n"
			"    timeout: 1h\n"
			"    on_timeout: continue\n"
			"  - name: train\n"
			"    kind: train\n"
			"    needs: label\n"
			"    command: [python3, train.py]\n"
			"    cache: true\n"
			"    gate: {accuracy: \">= 0.5\"}\n"
			"  - name: evaluate\n"
			"    kind: evaluate\n"
			"    needs: train\n"
			"    command: [python3, evaluate.py, \"{{steps.train.outputs.model}}\"]\n"
			"    cache: false\n"
			"    gate:\n"
			"      accuracy: \">= 0.9\"\n"
			"      f1: \">= production + 0.01\"\n"
			"      rmse: \"<production-0.5\"\n"
			"  - name: approve\n"
			"    kind: gate\n"
			"    needs: evaluate\n"
			"    timeout: 30m\n"
			"  - name: register\n"
			"    kind: register\n"
			"    needs: approve\n"
			"    model: digits\n"
			"    artifact: \"{{steps.train.outputs.model}}\"\n"
			"    version: minor\n"
			"    alias: [production, canary]\n");
	expect_kind_part(spec, 0, "{\"kind\":\"cache\",\"command\":[],\"timeout_ms\":0,"
			 "\"cache\":false,\"gate\":[],\"model\":null,\"dataset\":\"{{params.data}}\","
			 "\"labels\":null,\"webhook\":null,\"on_timeout\":\"fail\",\"artifact\":null,"
			 "\"version\":\"patch\",\"aliases\":[]}");
	expect_kind_part(spec, 1, "{\"kind\":\"label\",\"command\":[],\"timeout_ms\":3600000,"
			 "\"cache\":false,\"gate\":[],\"model\":null,"
			 "\"dataset\":\"{{ steps.stage.outputs.cache_dir }}/images\","
			 "\"labels\":\"labels.csv\",\"webhook\":\"https://labels.example.com/tasks\","
			 "\"on_timeout\":\"continue\",\"artifact\":null,\"version\":\"patch\","
			 "\"aliases\":[]}");
	expect_kind_part(spec, 2, "{\"kind\":\"train\",\"command\":[\"python3\",\"train.py\"],"
			 "\"timeout_ms\":0,\"cache\":true,"
			 "\"gate\":[{\"metric\":\"accuracy\",\"op\":\">=\",\"value\":0.5}],"
			 "\"model\":null,\"dataset\":null,\"labels\":null,\"webhook\":null,"
			 "\"on_timeout\":\"fail\",\"artifact\":null,\"version\":\"patch\","
			 "\"aliases\":[]}");
	/* the model comes from the register step downstream */
	expect_kind_part(spec, 3, "{\"kind\":\"evaluate\",\"command\":[\"python3\",\"evaluate.py\","
			 "\"{{steps.train.outputs.model}}\"],\"timeout_ms\":0,\"cache\":false,"
			 "\"gate\":[{\"metric\":\"accuracy\",\"op\":\">=\",\"value\":0.9},"
			 "{\"metric\":\"f1\",\"op\":\">=\",\"production\":true,\"offset\":0.01},"
			 "{\"metric\":\"rmse\",\"op\":\"<\",\"production\":true,\"offset\":-0.5}],"
			 "\"model\":\"digits\",\"dataset\":null,\"labels\":null,\"webhook\":null,"
			 "\"on_timeout\":\"fail\",\"artifact\":null,\"version\":\"patch\","
			 "\"aliases\":[]}");
	expect_kind_part(spec, 4, "{\"kind\":\"gate\",\"command\":[],\"timeout_ms\":1800000,"
			 "\"cache\":false,\"gate\":[],\"model\":null,\"dataset\":null,\"labels\":null,"
			 "\"webhook\":null,\"on_timeout\":\"fail\",\"artifact\":null,"
			 "\"version\":\"patch\",\"aliases\":[]}");
	expect_kind_part(spec, 5, "{\"kind\":\"register\",\"command\":[],\"timeout_ms\":0,"
			 "\"cache\":false,\"gate\":[],\"model\":\"digits\",\"dataset\":null,"
			 "\"labels\":null,\"webhook\":null,\"on_timeout\":\"fail\","
			 "\"artifact\":\"{{steps.train.outputs.model}}\",\"version\":\"minor\","
			 "\"aliases\":[\"production\",\"canary\"]}");
	json_decref(spec);
}

static void test_config__kind_key_values(void **state)
{
	json_t *spec;

	(void)state;
	/* a cache step with a command, labels given, one alias, explicit model, nulls */
	spec = parse_ok("name: x\n"
			"steps:\n"
			"  - {name: s, kind: cache, dataset: /srv/data, command: ./prep.sh, cache: }\n"
			"  - {name: l, kind: label, dataset: d, labels: sub/labels.csv, webhook: ~,"
			" on_timeout: fail}\n"
			"  - {name: t, kind: train, command: t, cache: True, gate: {}}\n"
			"  - {name: e, kind: evaluate, needs: t, command: e, model: other,"
			" gate: {f1: '>= production'}}\n"
			"  - {name: r, kind: register, needs: e, model: m, version: major,"
			" alias: production}\n"
			"  - {name: r2, kind: register, needs: e, model: m2, alias: []}\n");
	expect_kind_part(spec, 0, "{\"kind\":\"cache\",\"command\":[\"/bin/sh\",\"-c\",\"./prep.sh\"],"
			 "\"timeout_ms\":0,\"cache\":false,\"gate\":[],\"model\":null,"
			 "\"dataset\":\"/srv/data\",\"labels\":null,\"webhook\":null,"
			 "\"on_timeout\":\"fail\",\"artifact\":null,\"version\":\"patch\","
			 "\"aliases\":[]}");
	assert_string_equal(str_at(step_at(spec, 1), "labels"), "sub/labels.csv");
	assert_true(json_is_null(json_object_get(step_at(spec, 1), "webhook")));
	assert_true(json_is_true(json_object_get(step_at(spec, 2), "cache")));
	assert_int_equal(json_array_size(json_object_get(step_at(spec, 2), "gate")), 0);
	/* an explicit model is kept even with two register steps of other models */
	assert_string_equal(str_at(step_at(spec, 3), "model"), "other");
	expect_kind_part(spec, 4, "{\"kind\":\"register\",\"command\":[],\"timeout_ms\":0,"
			 "\"cache\":false,\"gate\":[],\"model\":\"m\",\"dataset\":null,"
			 "\"labels\":null,\"webhook\":null,\"on_timeout\":\"fail\",\"artifact\":null,"
			 "\"version\":\"major\",\"aliases\":[\"production\"]}");
	assert_int_equal(json_array_size(json_object_get(step_at(spec, 5), "aliases")), 0);
	json_decref(spec);

	/* a train step comparing against production takes the model downstream too */
	spec = parse_ok("name: x\n"
			"steps:\n"
			"  - {name: t, kind: train, command: t, gate: {accuracy: '> production'}}\n"
			"  - {name: e, kind: evaluate, needs: t, command: e}\n"
			"  - {name: r, kind: register, needs: e, model: m}\n"
			"  - {name: r2, kind: register, needs: e, model: m}\n");
	assert_string_equal(str_at(step_at(spec, 0), "model"), "m");
	assert_true(json_is_null(json_object_get(step_at(spec, 1), "model")));
	json_decref(spec);
}

static void test_config__kind_keys_not_for_this_kind(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - name: t\n"
		      "    kind: train\n"
		      "    command: t\n"
		      "    model: digits\n"
		      "    on_timeout: continue\n"
		      "  - {name: r, command: r, dataset: d, labels: l.csv, webhook: 'http://h'}\n"
		      "  - {name: g, kind: gate, cache: true, gate: {f1: '> 0.5'}, version: minor}\n"
		      "  - {name: c, kind: cache, dataset: d, artifact: a, alias: prod}\n",
		      "w.yaml:6:5: \"model\" applies to evaluate, register and deploy steps; remove it from "
		      "this train step",
		      "w.yaml:7:5: \"on_timeout\" applies to gate and label steps; remove it from "
		      "this train step",
		      "w.yaml:8:27: \"dataset\" applies to label and cache steps; remove it from this "
		      "run step",
		      "w.yaml:8:39: \"labels\" applies to label steps; remove it from this run step",
		      "w.yaml:8:54: \"webhook\" applies to label steps; remove it from this run step",
		      "w.yaml:9:27: \"cache\" applies to run, train and evaluate steps; remove it "
		      "from this gate step",
		      "w.yaml:9:40: \"gate\" applies to train and evaluate steps; remove it from this "
		      "gate step",
		      "w.yaml:9:61: \"version\" applies to register steps; remove it from this gate "
		      "step",
		      "w.yaml:10:40: \"artifact\" applies to register steps; remove it from this "
		      "cache step",
		      "w.yaml:10:53: \"alias\" applies to register steps; remove it from this cache "
		      "step", NULL);
}

static void test_config__kind_required_and_command(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: l, kind: label}\n"
		      "  - {name: c, kind: cache, dataset: ~}\n"
		      "  - {name: r, kind: register, command: [cp, a, b]}\n"
		      "  - {name: l2, kind: label, dataset: d, command: label.sh}\n"
		      "  - {name: e, kind: evaluate}\n",
		      "w.yaml:3:5: a label step needs \"dataset\" (the directory or file of items to "
		      "label)",
		      "w.yaml:4:5: a cache step needs \"dataset\" (the directory or file to stage)",
		      "w.yaml:5:5: a register step needs \"model\" (the name of the model to "
		      "register a version of)",
		      "w.yaml:5:40: a register step registers an artifact and runs no command; "
		      "remove \"command\"",
		      "w.yaml:6:50: a label step waits for a person and runs no command; remove "
		      "\"command\"",
		      "w.yaml:7:5: step is missing required key \"command\" (a list like "
		      "[python, train.py] or one shell string)", NULL);
}

static void test_config__kind_key_bad_values(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: a, command: a, cache: yes}\n"
		      "  - {name: b, command: b, cache: 'true'}\n"
		      "  - {name: c, command: c, cache: [true]}\n"
		      "  - {name: d, kind: gate, on_timeout: stop}\n"
		      "  - {name: e, kind: register, model: Digits, version: huge}\n"
		      "  - {name: f, kind: register, model: [m], artifact: ''}\n"
		      "  - {name: g, kind: register, model: m, alias: [prod, Bad!, prod]}\n"
		      "  - {name: h, kind: register, model: m, alias: {a: b}}\n"
		      "  - {name: i, kind: register, model: m, alias: 1prod}\n",
		      "w.yaml:3:34: cache must be true or false, not \"yes\"",
		      "w.yaml:4:34: cache must be true or false, not the string \"true\"; remove the "
		      "quotes",
		      "w.yaml:5:34: cache must be true or false, not a list",
		      "w.yaml:6:39: on_timeout \"stop\" is not valid; use fail or continue",
		      "w.yaml:7:38: model name \"Digits\" is not valid; use 1-63 of a-z, 0-9, _, . "
		      "and -, starting with a letter or digit",
		      "w.yaml:7:55: version \"huge\" is not valid; use patch, minor or major",
		      "w.yaml:8:38: model must be a string, not a list",
		      "w.yaml:8:53: artifact must not be empty",
		      "w.yaml:9:55: alias name \"Bad!\" is not valid; use 1-63 of a-z, 0-9, _, . and "
		      "-, starting with a letter or digit",
		      "w.yaml:9:61: alias \"prod\" is listed twice",
		      "w.yaml:10:48: alias must be a name or a list of names, not a mapping",
		      "w.yaml:11:48: alias \"1prod\" must start with a letter, so that it never looks "
		      "like a version number", NULL);
}

static void test_config__label_paths_and_webhook(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: a, kind: label, dataset: d, labels: /etc/passwd}\n"
		      "  - {name: b, kind: label, dataset: d, labels: ../up.csv}\n"
		      "  - {name: c, kind: label, dataset: d, labels: a/../../b.csv}\n"
		      "  - {name: d, kind: label, dataset: '', webhook: ftp://h/x}\n"
		      "  - {name: e, kind: label, dataset: d, webhook: 'https://'}\n"
		      "  - {name: f, kind: label, dataset: d, webhook: 'http://h/a b'}\n",
		      "w.yaml:3:48: labels \"/etc/passwd\" must be a path relative to the dataset "
		      "directory",
		      "w.yaml:4:48: labels \"../up.csv\" must not contain \"..\"; use a path below the "
		      "dataset directory",
		      "w.yaml:5:48: labels \"a/../../b.csv\" must not contain \"..\"; use a path below "
		      "the dataset directory",
		      "w.yaml:6:37: dataset must not be empty",
		      "w.yaml:6:50: webhook \"ftp://h/x\" must be an http:// or https:// URL, e.g. "
		      "https://labels.example.com/tasks",
		      "w.yaml:7:49: webhook \"https://\" must be an http:// or https:// URL, e.g. "
		      "https://labels.example.com/tasks",
		      "w.yaml:8:49: webhook \"http://h/a b\" must be an http:// or https:// URL, e.g. "
		      "https://labels.example.com/tasks", NULL);
}

static void test_config__gate_entries(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - name: e\n"
		      "    kind: evaluate\n"
		      "    model: m\n"
		      "    command: e\n"
		      "    gate:\n"
		      "      accuracy: 0.9\n"
		      "      f1: \">= 1.5\"\n"
		      "      rmse: \"< production * 2\"\n"
		      "      \"bad name\": \">= 1\"\n"
		      "      recall: [\">= 0.5\"]\n"
		      "  - {name: t, kind: train, command: t, gate: [accuracy]}\n",
		      "w.yaml:8:17: gate accuracy \"0.9\": no comparison; write OP VALUE with OP one "
		      "of >=, >, <=, <, ==, != (e.g. \">= 0.9\" or \">= production\")",
		      "w.yaml:9:11: gate f1 \">= 1.5\": 1.5 is out of range; f1 is between 0 and 1",
		      "w.yaml:10:13: gate rmse \"< production * 2\": expected a number, production, "
		      "or production + N / production - N after \"<\"",
		      "w.yaml:11:7: gate metric name \"bad name\" is not valid; use 1-64 letters, "
		      "digits, _ . - / or :",
		      "w.yaml:12:15: a gate comparison must be a string, not a list",
		      "w.yaml:13:46: gate must be a mapping of METRIC: \"OP VALUE\" (e.g. accuracy: "
		      "\">= 0.9\"), not a list", NULL);
}

static void test_config__kind_templates(void **state)
{
	(void)state;
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: t, command: t}\n"
		      "  - {name: l, kind: label, dataset: '{{steps.t.outputs.dir}}/{{params.nope}}'}\n"
		      "  - {name: r, kind: register, model: m, artifact: '{{steps.t.outputs.model}}'}\n"
		      "  - {name: c, kind: cache, dataset: '{{steps.zz.outputs.d}}', needs: t}\n"
		      "  - {name: r2, kind: register, model: m, needs: t, artifact: '{{ oops }}'}\n",
		      "w.yaml:4:37: template refers to undeclared parameter \"nope\"; declared: none",
		      "w.yaml:4:37: step \"l\" uses outputs of \"t\", which is not upstream of it; "
		      "add \"t\" to its needs",
		      "w.yaml:5:51: step \"r\" uses outputs of \"t\", which is not upstream of it; "
		      "add \"t\" to its needs",
		      "w.yaml:6:37: template refers to unknown step \"zz\"",
		      "w.yaml:7:62: unknown template expression \"oops\"; use params.NAME, run.id, "
		      "steps.STEP.outputs.KEY, steps.STEP.outputs or (under foreach:) item, item.KEY", NULL);
}

static void test_config__production_model_inference(void **state)
{
	(void)state;
	/* no register step downstream, or two with different models */
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: e, kind: evaluate, command: e, gate: {f1: '>= production'}}\n"
		      "  - {name: r, kind: register, model: m}\n"
		      "  - {name: e2, kind: evaluate, command: e,\n"
		      "     gate: {accuracy: '> 0.5', f1: '>= production + 0.01'}}\n"
		      "  - {name: r1, kind: register, model: a, needs: e2}\n"
		      "  - {name: r2, kind: register, model: b, needs: r1}\n"
		      "  - {name: r3, kind: register, model: a, needs: e2}\n"
		      "  - {name: t, kind: train, command: t, gate: {f1: '>= production'}}\n"
		      "  - {name: e3, kind: evaluate, command: e, model: Bad, gate: {f1: '> production'}}\n",
		      "w.yaml:3:54: step \"e\" compares against production, but no register step "
		      "downstream of it names the model; add \"model: NAME\" to this step",
		      "w.yaml:6:36: step \"e2\" compares against production, but the register steps "
		      "downstream of it register different models (\"a\", \"b\"); add \"model: NAME\" "
		      "to this step to say which",
		      "w.yaml:10:51: step \"t\" compares against production, but no register step "
		      "downstream of it names the model; compare in an evaluate step that has "
		      "\"model: NAME\"",
		      "w.yaml:11:51: model name \"Bad\" is not valid; use 1-63 of a-z, 0-9, _, . and "
		      "-, starting with a letter or digit", NULL);
}

/* A deploy step's resources are each replica's (not admitted for the step itself), and gang: its replicas placed together. */
static void test_config__deploy_resources_and_gang(void **state)
{
	json_t *spec, *st;

	(void)state;
	spec = parse_ok("name: x\n"
			"steps:\n"
			"  - {name: r, kind: register, model: m}\n"
			"  - {name: d, kind: deploy, needs: [r], model: m, serve: [serve.sh], replicas: 3, gang: true,\n"
			"     resources: {cpus: 2, memory: 1Gi}}\n"
			"  - {name: t, command: [\"true\"], resources: {cpus: 2}}\n");
	st = json_array_get(json_object_get(spec, "steps"), 1);
	assert_true(json_is_true(json_object_get(st, "gang")));
	assert_true(json_is_false(json_object_get(json_object_get(st, "resources"), "admit")));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "resources"), "memory_mb")), 1024);
	/* a job's resources are admitted by the host, as before */
	st = json_array_get(json_object_get(spec, "steps"), 2);
	assert_null(json_object_get(json_object_get(st, "resources"), "admit"));
	json_decref(spec);
}

/* A canary written Flagger's way: step_weight up to max_weight then 100, min_success_rate, threshold. */
static void test_config__canary_flagger_knobs(void **state)
{
	json_t *spec, *cn;
	char *steps;

	(void)state;
	spec = parse_ok("name: x\n"
			"steps:\n"
			"  - {name: r, kind: register, model: m}\n"
			"  - name: d\n"
			"    kind: deploy\n"
			"    needs: [r]\n"
			"    model: m\n"
			"    serve: [serve.sh]\n"
			"    canary: {step_weight: 20, max_weight: 60, min_success_rate: 99%, threshold: 3, interval: 1s}\n");
	cn = json_object_get(json_array_get(json_object_get(spec, "steps"), 1), "canary");
	steps = json_dumps(json_object_get(cn, "steps"), JSON_COMPACT);
	assert_string_equal(steps, "[20,40,60,100]");
	free(steps);
	assert_true(json_number_value(json_object_get(cn, "max_error_rate")) > 0.0099 &&
		    json_number_value(json_object_get(cn, "max_error_rate")) < 0.0101);
	assert_int_equal(json_integer_value(json_object_get(cn, "threshold")), 3);
	json_decref(spec);
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: r, kind: register, model: m}\n"
		      "  - {name: d, kind: deploy, needs: [r], model: m, serve: [s], canary: {steps: [50, 100], step_weight: 10}}\n"
		      "  - {name: e, kind: deploy, needs: [r], model: m, serve: [s], canary: {threshold: 0, min_success_rate: 120%}}\n",
		      "w.yaml:4:103: canary: give steps or step_weight (with max_weight), not both",
		      "w.yaml:5:83: canary.threshold: \"0\" is not an integer from 1 to 20",
		      "w.yaml:5:104: canary.min_success_rate: \"120%\" is not a percentage (e.g. 99%)", NULL);
}

/* placement: {hosts: labels}: kept as text (gpu: true is the label "true"); a bad one said where */
static void test_config__deploy_placement(void **state)
{
	json_t *spec, *pl;

	(void)state;
	spec = parse_ok("name: x\n"
			"steps:\n"
			"  - {name: r, kind: register, model: m}\n"
			"  - {name: d, kind: deploy, needs: [r], model: m, serve: [s], placement: {hosts: {gpu: true, zone: eu-1}}}\n");
	pl = json_object_get(json_array_get(json_object_get(spec, "steps"), 1), "placement");
	assert_string_equal(json_string_value(json_object_get(json_object_get(pl, "hosts"), "gpu")), "true");
	assert_string_equal(json_string_value(json_object_get(json_object_get(pl, "hosts"), "zone")), "eu-1");
	json_decref(spec);
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: r, kind: register, model: m}\n"
		      "  - {name: d, kind: deploy, needs: [r], model: m, serve: [s], placement: {hosts: [gpu]}}\n"
		      "  - {name: e, kind: deploy, needs: [r], model: m, serve: [s], placement: {host: {gpu: true}}}\n"
		      "  - {name: f, kind: deploy, needs: [r], model: m, serve: [s], placement: {hosts: {gpu: [1]}}}\n",
		      "w.yaml:4:82: placement.hosts must be a mapping of host labels, e.g. {gpu: \"true\", zone: eu-1}",
		      "w.yaml:5:74: placement needs hosts: the labels a host must have, e.g. {hosts: {gpu: \"true\"}}",
		      "w.yaml:5:75: unknown placement key \"host\" (did you mean \"hosts\"?); known keys: hosts",
		      "w.yaml:6:88: placement.hosts.gpu: a label's value is text, e.g. \"true\"", NULL);
}

/* A canary's own traffic from recorded requests (rate 20/s unless given) and how long it waits for requests. */
static void test_config__canary_recorded_requests_and_max_wait(void **state)
{
	json_t *spec, *cn;

	(void)state;
	spec = parse_ok("name: x\n"
			"steps:\n"
			"  - {name: r, kind: register, model: m}\n"
			"  - {name: d, kind: deploy, needs: [r], model: m, serve: [s], canary: {max_wait: 2m, traffic: {requests: rec.jsonl}}}\n"
			"  - {name: e, kind: deploy, needs: [r], model: m, serve: [s], canary: {traffic: {rate: 5/s, requests: rec.jsonl}}}\n");
	cn = json_object_get(json_array_get(json_object_get(spec, "steps"), 1), "canary");
	assert_string_equal(json_string_value(json_object_get(cn, "traffic_requests")), "rec.jsonl");
	assert_true(json_number_value(json_object_get(cn, "traffic_rps")) == 20);
	assert_int_equal(json_integer_value(json_object_get(cn, "max_wait_ms")), 120000);
	cn = json_object_get(json_array_get(json_object_get(spec, "steps"), 2), "canary");
	assert_true(json_number_value(json_object_get(cn, "traffic_rps")) == 5);
	json_decref(spec);
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: r, kind: register, model: m}\n"
		      "  - {name: d, kind: deploy, needs: [r], model: m, serve: [s], canary: {max_wait: soon, traffic: {replay: f}}}\n",
		      "w.yaml:4:82: canary.max_wait: \"soon\" is not a duration (e.g. 10m)",
		      "w.yaml:4:98: unknown canary.traffic key \"replay\"; known: rate, requests", NULL);
}

/* An A/B test: match {header, value}, iterations (3 unless given), no steps; bad names refused. */
static void test_config__canary_ab_match(void **state)
{
	json_t *spec, *cn;

	(void)state;
	spec = parse_ok("name: x\n"
			"steps:\n"
			"  - {name: r, kind: register, model: m}\n"
			"  - {name: d, kind: deploy, needs: [r], model: m, serve: [s], canary: {match: {header: X-Canary, value: insider}}}\n"
			"  - {name: e, kind: deploy, needs: [r], model: m, serve: [s], canary: {match: {header: X-Beta}, iterations: 5}}\n");
	cn = json_object_get(json_array_get(json_object_get(spec, "steps"), 1), "canary");
	assert_string_equal(json_string_value(json_object_get(cn, "match_header")), "X-Canary");
	assert_string_equal(json_string_value(json_object_get(cn, "match_value")), "insider");
	assert_int_equal(json_integer_value(json_object_get(cn, "iterations")), 3);
	cn = json_object_get(json_array_get(json_object_get(spec, "steps"), 2), "canary");
	assert_null(json_object_get(cn, "match_value"));
	assert_int_equal(json_integer_value(json_object_get(cn, "iterations")), 5);
	json_decref(spec);
	expect_errors("name: x\n"
		      "steps:\n"
		      "  - {name: r, kind: register, model: m}\n"
		      "  - {name: d, kind: deploy, needs: [r], model: m, serve: [s], canary: {steps: [50, 100], match: {header: X-C}}}\n"
		      "  - {name: e, kind: deploy, needs: [r], model: m, serve: [s], canary: {match: {header: 'X C', value: 'a}'}}}\n"
		      "  - {name: f, kind: deploy, needs: [r], model: m, serve: [s], canary: {iterations: 2}}\n",
		      "w.yaml:4:97: canary.match (an A/B test) takes iterations, not steps or step_weight",
		      "w.yaml:5:88: canary.match.header \"X C\" is not a header name (1-64 of letters, digits and -)",
		      "w.yaml:6:71: canary.iterations goes with match (an A/B test); a canary by weight takes steps", NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_config__ml_pipeline),
		cmocka_unit_test(test_config__kind_key_values),
		cmocka_unit_test(test_config__kind_keys_not_for_this_kind),
		cmocka_unit_test(test_config__kind_required_and_command),
		cmocka_unit_test(test_config__kind_key_bad_values),
		cmocka_unit_test(test_config__label_paths_and_webhook),
		cmocka_unit_test(test_config__gate_entries),
		cmocka_unit_test(test_config__kind_templates),
		cmocka_unit_test(test_config__production_model_inference),
		cmocka_unit_test(test_config__canary_flagger_knobs),
		cmocka_unit_test(test_config__deploy_resources_and_gang),
		cmocka_unit_test(test_config__canary_recorded_requests_and_max_wait),
		cmocka_unit_test(test_config__canary_ab_match),
		cmocka_unit_test(test_config__deploy_placement),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * steps — the engine's entry points into the step kinds (orchestrator/plan/kind.h)
 * and what every kind shares. steps_prepare() runs when a step is claimed
 * with its inputs: the step result cache is consulted (for `cache: true`
 * steps of the kinds that take it), {{steps.X.outputs.Y}} references are
 * rendered from the ancestors' outputs, and the kind's prepare hook decides
 * whether the step is done (by the daemon: label, register, a staged
 * dataset) or its job runs. steps_job_done() runs when a job exited 0 and
 * calls the kind's job_done hook.
 */
#include "steps/steps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/fingerprint.h"
#include "lib/jobfile.h"
#include "plan/template.h"
#include "store/store.h"

void step_result_init(struct step_result *res)
{
	memset(res, 0, sizeof(*res));
	res->outcome = OUTCOME_NONE;
}

void step_result_dispose(struct step_result *res)
{
	if (res == NULL)
		return;
	free(res->reason);
	json_decref(res->cached_from);
	json_decref(res->outputs);
	json_decref(res->metrics);
	json_decref(res->gate);
	step_result_init(res);
}

int steps_submitter_may_deploy(const struct step_run *r, struct step_result *res, const char *what)
{
	char *who = NULL, *role = NULL;
	int error = store_run_submitter(r->conn, r->run_id, &who, &role);

	if (error < 0)
		return error;
	error = strcmp(role, "deployer") == 0 || strcmp(role, "admin") == 0;
	if (!error && (strncmp(who, "trigger:", 8) == 0 || strncmp(who, "schedule:", 9) == 0))
		/* a trigger registered before its registrar was recorded (migration 0019) */
		step_result_fail_final(res, "%s needs role deployer or above; run %lld was started by %s, whose "
				       "registrar is not recorded: register the workflow again (ferry workflow "
				       "register) as a deployer or an admin", what, (long long)r->run_id, who);
	else if (!error)
		step_result_fail_final(res, "%s needs role deployer or above; run %lld acts for %s, whose role is %s",
				       what, (long long)r->run_id, who, role);
	free(who);
	free(role);
	return error;
}

void steps_log(const struct step_run *r, const char *fmt, ...)
{
	/* the log is the job's too: never through a link it left, never blocked on a FIFO (lib/jobfile.h) */
	int fd = jobfile_append(r->dir, "log");
	FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
	va_list ap;

	if (f == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
	fclose(f);
}

void step_result_fail_final(struct step_result *res, const char *fmt, ...)
{
	va_list ap;
	char *msg = NULL;

	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		abort();
	va_end(ap);
	free(res->reason);
	res->reason = msg;
	res->outcome = OUTCOME_FAILED;
	res->final = 1;
}

int steps_input_has(const json_t *in, unsigned flags)
{
	const struct step_kind *k = step_kind_find(json_string_value(json_object_get(in, "kind")));

	return k != NULL && (k->flags & flags) == flags;
}

/* ---- {{steps.X.outputs.Y}} ---------------------------------------------- */

/*
 * The value of the reference e…end ("steps.X.outputs.K", trimmed) from
 * inputs into *val (newly allocated). 1 when e…end is not a step reference,
 * FERRY_EINVALID when the step or output is missing or
 * not a string or number (the message names it).
 */
/* What a claim-time reference reads: the succeeded ancestors, and a foreach child's item (or NULL). */
struct refs {
	const json_t *inputs;
	const json_t *item;
};

/*
 * v as a reference writes it: a string as it is, a number as the shortest
 * text that reads back the same (0.05, as {{item.K}} writes it — not
 * 0.050000000000000003), a list or object as compact JSON with its numbers
 * at the 15 digits they are stored with (sbuf_json).
 */
static char *value_text(const json_t *v)
{
	if (json_is_string(v))
		return xstrdup(json_string_value(v));
	if (json_is_number(v) || json_is_boolean(v))
		return tmpl_value_text(v);
	return json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
}

/* {{item}}, {{item.KEY}}, {{steps.X.outputs}}: 0 with *val, 1 when e…end is none of them, or an error. */
static int ref_item_or_all(char **val, const char *e, const char *end, const struct refs *rf)
{
	size_t n = (size_t)(end - e);
	const char *at;
	const json_t *v;

	if ((n == 4 && memcmp(e, "item", 4) == 0) || (n > 5 && memcmp(e, "item.", 5) == 0)) {
		if (rf->item == NULL) {
			ferry_error_set("{{%.*s}}: this step has no item (only the children of a foreach step do)", (int)n, e);
			return FERRY_EINVALID;
		}
		v = n == 4 ? rf->item : json_object_getn(rf->item, e + 5, n - 5);
		if (v == NULL) {
			ferry_error_set("{{%.*s}}: the item has no key \"%.*s\"", (int)n, e, (int)(n - 5), e + 5);
			return FERRY_EINVALID;
		}
		*val = value_text(v);
		return FERRY_OK;
	}
	if (n > 6 && memcmp(e, "steps.", 6) == 0 && ((at = memmem(e, n, ".best.outputs.", 14)) != NULL ||
						      (at = memmem(e, n, ".best.params.", 13)) != NULL)) {
		/* a sweep's best item: its outputs, or its parameters (its item) */
		int params = at[6] == 'p';
		const char *key = at + (params ? 13 : 14);
		char *step = xstrndup(e + 6, (size_t)(at - (e + 6)));
		const json_t *best = json_object_get(json_object_get(rf->inputs, step), "best");
		v = json_object_getn(json_object_get(best, params ? "item" : "outputs"), key, (size_t)(end - key));
		if (best == NULL || json_is_null(best) || v == NULL) {
			ferry_error_set("{{%.*s}}: %s", (int)n, e, best == NULL || json_is_null(best) ?
					"the sweep has no best item (did it "
					"finish, with select:?)" : "the best item has no such key");
			free(step);
			return FERRY_EINVALID;
		}
		free(step);
		*val = value_text(v);
		return FERRY_OK;
	}
	if (n > 6 + 8 && memcmp(e, "steps.", 6) == 0 && memcmp(end - 8, ".outputs", 8) == 0) {
		char *step = xstrndup(e + 6, n - 6 - 8);
		const json_t *in = json_object_get(rf->inputs, step);
		if (in == NULL) {
			ferry_error_set("{{steps.%s.outputs}}: step %s has not succeeded in this run", step, step);
			free(step);
			return FERRY_EINVALID;
		}
		free(step);
		v = json_object_get(in, "outputs");
		*val = value_text(v ? v : json_null());
		return FERRY_OK;
	}
	return 1;
}

static int ref_value(char **val, const char *e, const char *end, const struct refs *rf)
{
	const json_t *inputs = rf->inputs;
	const char *key;
	const json_t *in, *outs, *v;
	char *step, *k;
	int rc;

	*val = NULL;
	if ((rc = ref_item_or_all(val, e, end, rf)) != 1)
		return rc;
	for (key = end; key > e && key[-1] != '.'; key--)
		;
	if (end - e <= 6 || strncmp(e, "steps.", 6) != 0 || key - e < 6 + 9 ||
	    strncmp(key - 9, ".outputs.", 9) != 0)
		return 1;
	step = xstrndup(e + 6, (size_t)(key - 9 - (e + 6)));
	in = json_object_get(inputs, step);
	outs = json_object_get(in, "outputs");
	v = json_object_getn(outs, key, (size_t)(end - key));
	if (json_is_string(v) || json_is_number(v) || json_is_boolean(v)) {
		*val = value_text(v);
		free(step);
		return FERRY_OK;
	}
	k = xstrndup(key, (size_t)(end - key));
	if (in == NULL)
		ferry_error_set("{{steps.%s.outputs.%s}}: step %s has not succeeded in this run", step, k, step);
	else if (v == NULL || json_is_null(v))
		ferry_error_set("{{steps.%s.outputs.%s}}: step %s has no output \"%s\"; write the "
				"file %s.* into its FERRY_OUTPUT_DIR or the key into outputs.json",
				step, k, step, k, k);
	else
		ferry_error_set("{{steps.%s.outputs.%s}}: the output is not a string or number", step, k);
	free(k);
	free(step);
	return FERRY_EINVALID;
}

/* The tmpl_ref_fn of a step's fields: arg is a struct refs. */
static int output_ref(char **val, const char *expr, size_t len, void *arg)
{
	int rc = ref_value(val, expr, expr + len, arg);

	if (rc == 1) {
		ferry_error_set("{{%.*s}} is not a step output reference", (int)len, expr);
		return FERRY_EINVALID;
	}
	return rc;
}

static int render_value(json_t *obj, const char *key, json_t *v, const struct refs *inputs)
{
	char *r = NULL;
	int error;

	if (!json_is_string(v) || strstr(json_string_value(v), "{{") == NULL)
		return FERRY_OK;
	if ((error = tmpl_render_refs(&r, json_string_value(v), output_ref, (void *)inputs)) < 0)
		return error;
	json_object_set_new(obj, key, json_string(r));
	free(r);
	return FERRY_OK;
}

/*
 * The strings the plan kept whole (the spec's "templated": [field] or
 * [field, index or key]), each rendered once with the run's params and the
 * step outputs together: a value's own "{{…}}" stays text.
 */
static int render_templated(json_t *s, const json_t *templated, const json_t *params, int64_t run_id,
			    const struct refs *inputs)
{
	json_t *cmd = json_object_get(s, "command"), *where;
	int script = tmpl_shell_script_index(cmd);
	char id[24];
	size_t i;

	snprintf(id, sizeof(id), "%lld", (long long)run_id);
	json_array_foreach(templated, i, where) {
		const char *field = json_string_value(json_array_get(where, 0));
		json_t *key = json_array_get(where, 1), *holder = s, *v;
		char *r = NULL;
		int shell = 0, error;
		if (field == NULL)
			continue;
		if (key) {
			holder = json_object_get(s, field);
			v = json_is_integer(key) ? json_array_get(holder, (size_t)json_integer_value(key))
						 : json_object_get(holder, json_string_value(key));
			shell = strcmp(field, "command") == 0 && json_is_integer(key) && json_integer_value(key) == script;
		} else {
			v = json_object_get(s, field);
		}
		if (!json_is_string(v))
			continue;
		if ((error = tmpl_render_all(&r, json_string_value(v), shell, params, id, output_ref,
					     (void *)inputs)) < 0)
			return error;
		if (key && json_is_integer(key))
			json_array_set_new(holder, (size_t)json_integer_value(key), json_string(r));
		else if (key)
			json_object_set_new(holder, json_string_value(key), json_string(r));
		else
			json_object_set_new(s, field, json_string(r));
		free(r);
	}
	json_object_del(s, "templated");
	return FERRY_OK;
}

/* A copy of spec with the step references rendered; *out is the caller's. */
static int render_spec(json_t **out, const json_t *spec, const json_t *inputs_obj, const json_t *run, int64_t run_id)
{
	struct refs rf = {inputs_obj, json_object_get(spec, "item")}, *inputs = &rf;
	static const char *const fields[] = {"workdir", "dataset", "artifact", "labels", "webhook"};
	json_t *s = json_deep_copy(spec), *cmd = json_object_get(s, "command"), *env, *v;
	int script = tmpl_shell_script_index(cmd);
	const char *key;
	size_t i;
	int error = FERRY_OK;

	if (json_object_get(spec, "templated")) {
		/* planned by this version: only what the plan kept, params and outputs in one pass */
		error = render_templated(s, json_object_get(spec, "templated"), json_object_get(run, "params"),
					 run_id, inputs);
		goto out;
	}
	/* a spec planned before: params are in already, the step references left */
	json_array_foreach(cmd, i, v) {
		char *r = NULL;
		if (!json_is_string(v) || strstr(json_string_value(v), "{{") == NULL)
			continue;
		/* in a shell script an output is written quoted: it is data, never code */
		if ((int)i == script)
			error = tmpl_render_shell_refs(&r, json_string_value(v), output_ref, (void *)inputs);
		else
			error = tmpl_render_refs(&r, json_string_value(v), output_ref, (void *)inputs);
		if (error < 0)
			goto out;
		json_array_set_new(cmd, i, json_string(r));
		free(r);
	}
	env = json_object_get(s, "env");
	json_object_foreach(env, key, v)
		if ((error = render_value(env, key, v, inputs)) < 0)
			goto out;
	for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if ((error = render_value(s, fields[i], json_object_get(s, fields[i]), inputs)) < 0)
			goto out;
out:
	if (error < 0) {
		json_decref(s);
		s = NULL;
	}
	*out = s;
	return error;
}

/* ---- the step result cache -------------------------------------------- */

/*
 * What an input value contributes to a cache key: an absolute path of a file
 * or directory stands for its content, anything else for itself. A new
 * reference, the caller's.
 */
static json_t *canon_value(json_t *v)
{
	const char *s = json_string_value(v);
	struct stat st;
	char hex[65];

	if (s == NULL || s[0] != '/' || stat(s, &st) != 0)
		return json_incref(v);
	/* a file's fingerprint is the sha256 of its bytes; both are remembered while unchanged */
	if ((S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) && fingerprint_path(hex, s) == FERRY_OK)
		return json_sprintf("%s:%s", S_ISREG(st.st_mode) ? "sha256" : "tree-sha256", hex);
	return json_incref(v);
}

/*
 * What an ancestor contributes: its outputs by content; a step that stages
 * data (a cache step) only its dataset fingerprint and entry key (the key
 * differs when the cache step preprocesses: another command, other staged
 * data).
 */
static json_t *canon_input(const json_t *in)
{
	const json_t *outs = json_object_get(in, "outputs");
	json_t *c = json_object(), *v;
	const char *key;

	if (steps_input_has(in, SKF_STAGES)) {
		json_object_set(c, "fingerprint", json_object_get(outs, "fingerprint"));
		if (json_object_get(outs, "key"))
			json_object_set(c, "key", json_object_get(outs, "key"));
		return c;
	}
	if (!json_is_object(outs)) {
		json_decref(c);
		return json_incref((json_t *)outs ?: json_null());
	}
	json_object_foreach((json_t *)outs, key, v)
		json_object_set_new(c, key, canon_value(v));
	return c;
}

/*
 * The step-cache key of a claimed step: sha256 of its kind, its definition
 * (command, env, workdir, image, dataset as resolved with the run's params,
 * step references unrendered) and its ancestors' outputs by content.
 */
static void cache_key(char out[65], const struct step_run *r)
{
	/* "item": a fan-out's child is its item as much as its command */
	static const char *const fields[] = {"command", "env", "workdir", "image", "dataset", "item"};
	json_t *k = json_object(), *ins = json_object(), *in;
	const char *name;
	char *txt;

	json_object_set_new(k, "kind", json_string(r->kind));
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		json_t *v = json_object_get(r->spec, fields[i]);
		if (v)
			json_object_set(k, fields[i], v);
	}
	json_object_foreach((json_t *)r->inputs, name, in)
		json_object_set_new(ins, name, canon_input(in));
	json_object_set_new(k, "inputs", ins);
	txt = json_dumps(k, JSON_COMPACT | JSON_SORT_KEYS);
	sha256_hex(out, txt, strlen(txt));
	free(txt);
	json_decref(k);
}

/* Whether every absolute path among outputs still exists (a cached result may point at removed files). */
static int outputs_present(const json_t *outputs)
{
	const char *key;
	json_t *v;

	json_object_foreach((json_t *)outputs, key, v) {
		const char *s = json_string_value(v);
		if (s && s[0] == '/' && access(s, F_OK) != 0)
			return 0;
	}
	return 1;
}

/* 1 with res filled when the cache holds this step's result. */
static int cache_lookup(struct step_result *res, const struct step_run *r, const char *key)
{
	json_t *outputs = NULL, *metrics = NULL, *gate = NULL, *from = NULL;
	int hit = store_step_cache_get(&outputs, &metrics, &gate, &from, r->conn, key);

	if (hit == 1 && outputs_present(outputs)) {
		res->outcome = OUTCOME_SUCCEEDED;
		res->outputs = outputs;
		res->metrics = metrics;
		res->gate = gate;
		res->reason = xasprintf("from cache: run %lld step %s attempt %lld",
					(long long)json_integer_value(json_object_get(from, "run")),
					json_string_value(json_object_get(from, "step")),
					(long long)json_integer_value(json_object_get(from, "attempt")));
		res->cached_from = from;
		return 1;
	}
	if (hit < 0)
		flog_warn("run %lld step %s: step cache lookup: %s", (long long)r->run_id, r->name,
			  ferry_error_last());
	json_decref(outputs), json_decref(metrics), json_decref(gate), json_decref(from);
	return 0;
}

/* ---- entry points ------------------------------------------------------ */

/* Fails res with the last error's message (a retry may do). */
static void fail_last(struct step_result *res)
{
	step_result_dispose(res);
	res->outcome = OUTCOME_FAILED;
	res->reason = xstrdup(ferry_error_last());
}

void steps_env_merge(json_t *spec, json_t *env)
{
	json_t *jenv;

	if (env == NULL)
		return;
	jenv = json_object_get(spec, "env");
	if (!json_is_object(jenv))
		json_object_set_new(spec, "env", jenv = json_object());
	json_object_update(jenv, env);
	json_decref(env);
}

int steps_prepare(json_t **rendered, json_t **env, char **key_out, struct step_result *res,
		  const struct step_run *r)
{
	const struct step_kind *kind = step_kind_find(r->kind);
	struct step_run rr = *r;
	json_t *flow_env = NULL, *local_inputs = NULL;
	char key[65];
	int rc;

	*rendered = NULL;
	*env = NULL;
	*key_out = NULL;
	step_result_init(res);
	if (kind == NULL) {
		step_result_fail_final(res, "unknown step kind \"%s\"", r->kind ? r->kind : "");
		return 1;
	}
	if (steps_when(res, r) != 0)
		return 1;
	if (json_object_get(r->spec, "foreach") != NULL) {
		/* the step itself runs no job: its children do; its list may be a file another host's step wrote */
		if (steps_inputs_localize(&local_inputs, r) < 0) {
			fail_last(res);
			return 1;
		}
		if (local_inputs != NULL)
			rr.inputs = local_inputs;
		rc = steps_foreach_expand(res, &rr);
		json_decref(local_inputs);
		return rc;
	}
	if ((kind->flags & SKF_WAITS) && json_object_get(r->spec, "when") != NULL) {
		/* claimed for its condition only (plan.c): it holds, so the step waits for its person now */
		res->outcome = OUTCOME_WAITING;
		return 1;
	}
	if (step_kind_key(kind, "cache") != NULL && json_is_true(json_object_get(r->spec, "cache"))) {
		cache_key(key, r);
		if (!json_is_true(json_object_get(r->run, "no_cache")) && cache_lookup(res, r, key))
			return 1;
		*key_out = xstrdup(key);
	}
	/* the files of steps that ran on another host, fetched here first: the templates name them here */
	if ((rc = steps_inputs_localize(&local_inputs, r)) < 0) {
		fail_last(res);
		return 1;
	}
	if (local_inputs != NULL)
		rr.inputs = local_inputs;
	if ((rc = render_spec(rendered, r->spec, rr.inputs, r->run, r->run_id)) < 0) {
		step_result_fail_final(res, "%s", ferry_error_last());
		json_decref(local_inputs);
		return 1;
	}
	rr.spec = *rendered;
	if (json_object_get(r->spec, "item") != NULL) {
		/* a fan-out's child: its item, as {{item}} writes it, and its index */
		char *item = value_text(json_object_get(r->spec, "item")), idx[24];
		snprintf(idx, sizeof(idx), "%lld", (long long)json_integer_value(json_object_get(r->spec, "item_index")));
		flow_env = json_pack("{s:s,s:s}", "FERRY_ITEM", item, "FERRY_ITEM_INDEX", idx);
		free(item);
	}
	if (json_is_true(json_object_get(r->spec, "finally"))) {
		/* how the run's other steps went: succeeded, failed or stopped */
		const char *st = json_string_value(json_object_get(r->run, "body_state"));
		flow_env = json_pack("{s:s}", "FERRY_RUN_STATE", st ? st : "");
	}
	if (kind->prepare != NULL)
		rc = kind->prepare(res, env, &rr);
	else if ((kind->flags & SKF_JOB) != 0)
		rc = 0;
	else {
		ferry_error_set("a %s step is never claimed", kind->name);
		rc = FERRY_ERROR;
	}
	json_decref(local_inputs);
	if (flow_env != NULL && *env != NULL) {
		json_object_update(*env, flow_env);
		json_decref(flow_env);
	} else if (flow_env != NULL) {
		*env = flow_env;
	}
	if (rc == 0 && (kind->flags & SKF_JOB) == 0) {
		ferry_error_set("a %s step runs no job", kind->name);
		rc = FERRY_ERROR;
	}
	if (rc < 0)
		fail_last(res);
	if (rc != 0) {
		json_decref(*env);
		*env = NULL;
		return 1;
	}
	return 0;
}

int steps_job_done(const struct step_run *r, struct step_result *res)
{
	const struct step_kind *kind = step_kind_find(r->kind);

	step_result_init(res);
	res->outcome = OUTCOME_SUCCEEDED;
	if (kind == NULL || kind->job_done == NULL) {
		ferry_error_set("a %s step runs no job", r->kind ? r->kind : "(no kind)");
		return FERRY_ERROR;
	}
	return kind->job_done(res, r);
}

/*
 * steps — the engine's entry points into the step kinds. steps_prepare()
 * runs when a step is claimed: the step result cache is consulted (for
 * `cache: true` steps), {{steps.X.outputs.Y}} references are rendered from
 * the ancestors' outputs, and the kinds the daemon does itself (label,
 * register, cache) are done there. steps_job_done() runs when a job
 * succeeded: its output directory becomes outputs and metrics, and its
 * gate is evaluated.
 */
#include "steps.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "datacache.h"
#include "label.h"
#include "gate.h"
#include "registry.h"
#include "store.h"
#include "util.h"

void step_result_dispose(struct step_result *res)
{
	if (res == NULL)
		return;
	free(res->reason);
	json_decref(res->cached_from);
	json_decref(res->outputs);
	json_decref(res->metrics);
	json_decref(res->gate);
	memset(res, 0, sizeof(*res));
}

void steps_log(const struct step_run *r, const char *fmt, ...)
{
	char *path = xasprintf("%s/log", r->dir);
	FILE *f = fopen(path, "a");
	va_list ap;

	if (f) {
		va_start(ap, fmt);
		vfprintf(f, fmt, ap);
		va_end(ap);
		fputc('\n', f);
		fclose(f);
	}
	free(path);
}

/* Fails res for good with a formatted reason. */
static void fail_final(struct step_result *res, const char *fmt, ...) FERRY_PRINTF(2, 3);
static void fail_final(struct step_result *res, const char *fmt, ...)
{
	va_list ap;
	char *msg = NULL;

	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		abort();
	va_end(ap);
	free(res->reason);
	res->reason = msg;
	res->outcome = "failed";
	res->final = 1;
}

/* ---- {{steps.X.outputs.Y}} ---------------------------------------------- */

/*
 * Renders the step references in s from inputs. *out is the caller's.
 * FERRY_EINVALID when a step or output is missing (the message names it).
 */
static int render_refs(char **out, const char *s, const json_t *inputs)
{
	char *buf = NULL;
	size_t blen = 0;
	FILE *b = open_memstream(&buf, &blen);
	const char *p = s, *open;

	if (b == NULL)
		abort();

	while ((open = strstr(p, "{{")) != NULL) {
		const char *close = strstr(open + 2, "}}"), *e = open + 2, *end, *key;
		const json_t *in, *outs, *v;
		char *step = NULL;

		fwrite(p, 1, (size_t)(open - p), b);
		if (close == NULL)
			break;
		while (*e == ' ' || *e == '\t')
			e++;
		end = close;
		while (end > e && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		for (key = end; key > e && key[-1] != '.'; key--)
			;
		if (end - e <= 6 || strncmp(e, "steps.", 6) != 0 || key - e < 6 + 9 ||
		    strncmp(key - 9, ".outputs.", 9) != 0) {
			fwrite(open, 1, (size_t)(close + 2 - open), b); /* not ours: left as written */
			p = close + 2;
			continue;
		}
		step = xstrndup(e + 6, (size_t)(key - 9 - (e + 6)));
		in = json_object_get(inputs, step);
		outs = json_object_get(in, "outputs");
		v = json_object_getn(outs, key, (size_t)(end - key));
		if (in == NULL || v == NULL || json_is_null(v) || json_is_object(v) || json_is_array(v)) {
			char *k = xstrndup(key, (size_t)(end - key));
			if (in == NULL)
				ferry_error_set("{{steps.%s.outputs.%s}}: step %s has not succeeded in this run",
						step, k, step);
			else if (v == NULL || json_is_null(v))
				ferry_error_set("{{steps.%s.outputs.%s}}: step %s has no output \"%s\"; write the "
						"file %s.* into its FERRY_OUTPUT_DIR or the key into outputs.json",
						step, k, step, k, k);
			else
				ferry_error_set("{{steps.%s.outputs.%s}}: the output is not a string or number",
						step, k);
			free(k);
			free(step);
			fclose(b);
			free(buf);
			return FERRY_EINVALID;
		}
		if (json_is_string(v)) {
			fputs(json_string_value(v), b);
		} else {
			char *txt = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
			fputs(txt, b);
			free(txt);
		}
		free(step);
		p = close + 2;
	}
	fputs(p, b);
	fclose(b);
	*out = buf;
	return FERRY_OK;
}

static int render_value(json_t *obj, const char *key, json_t *v, const json_t *inputs)
{
	char *r = NULL;
	int error;

	if (!json_is_string(v) || strstr(json_string_value(v), "{{") == NULL)
		return FERRY_OK;
	if ((error = render_refs(&r, json_string_value(v), inputs)) < 0)
		return error;
	json_object_set_new(obj, key, json_string(r));
	free(r);
	return FERRY_OK;
}

/* A copy of spec with the step references rendered; *out is the caller's. */
static int render_spec(json_t **out, const json_t *spec, const json_t *inputs)
{
	static const char *const fields[] = {"workdir", "dataset", "artifact", "labels", "webhook"};
	json_t *s = json_deep_copy(spec), *cmd = json_object_get(s, "command"), *env, *v;
	const char *key;
	size_t i;
	int error = FERRY_OK;

	json_array_foreach(cmd, i, v) {
		char *r = NULL;
		if (!json_is_string(v) || strstr(json_string_value(v), "{{") == NULL)
			continue;
		if ((error = render_refs(&r, json_string_value(v), inputs)) < 0)
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
	if ((S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) && datacache_fingerprint(hex, s) == FERRY_OK)
		return json_sprintf("%s:%s", S_ISREG(st.st_mode) ? "sha256" : "tree-sha256", hex);
	return json_incref(v);
}

/*
 * What an ancestor contributes: its outputs by content; a cache step only
 * its dataset fingerprint and entry key (the key differs when the cache
 * step preprocesses: another command, other staged data).
 */
static json_t *canon_input(const json_t *in)
{
	const json_t *outs = json_object_get(in, "outputs");
	json_t *c = json_object(), *v;
	const char *key;

	if (strcmp(json_string_value(json_object_get(in, "kind")) ?: "", "cache") == 0) {
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
	static const char *const fields[] = {"command", "env", "workdir", "image", "dataset"};
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
		res->outcome = "succeeded";
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

/*
 * A job below a cache step finds the staged dataset through FERRY_CACHE_DIR
 * (the nearest). FERRY_ENOTFOUND when the entry is gone (evicted after its
 * session ended, or staged on another host).
 */
static int cache_env(json_t **env, const json_t *inputs)
{
	const char *name;
	json_t *in;

	json_object_foreach((json_t *)inputs, name, in) {
		const json_t *outs = json_object_get(in, "outputs");
		const char *dir = json_string_value(json_object_get(outs, "cache_dir"));
		const char *session = json_string_value(json_object_get(outs, "session"));
		if (strcmp(json_string_value(json_object_get(in, "kind")) ?: "", "cache") != 0 || dir == NULL)
			continue;
		if (access(dir, F_OK) != 0) {
			ferry_error_set("the data cache entry %s staged by step %s is gone from this host "
					"(evicted after its run ended, or staged on another host): retry "
					"the run from step %s", dir, name, name);
			return FERRY_ENOTFOUND;
		}
		*env = json_pack("{s:s, s:s?}", "FERRY_CACHE_DIR", dir, "FERRY_CACHE_SESSION", session);
		break;
	}
	return 0;
}

static int is_job_kind(const char *kind)
{
	return strcmp(kind, "run") == 0 || strcmp(kind, "train") == 0 || strcmp(kind, "evaluate") == 0;
}

int steps_prepare(json_t **rendered, json_t **env, char **key_out, struct step_result *res,
		  const struct step_run *r)
{
	struct step_run rr = *r;
	char key[65];
	int error;

	*rendered = NULL;
	*env = NULL;
	*key_out = NULL;
	memset(res, 0, sizeof(*res));
	if (is_job_kind(r->kind) && json_is_true(json_object_get(r->spec, "cache"))) {
		cache_key(key, r);
		if (!json_is_true(json_object_get(r->run, "no_cache")) && cache_lookup(res, r, key))
			return 1;
		*key_out = xstrdup(key);
	}
	if ((error = render_spec(rendered, r->spec, r->inputs)) < 0) {
		fail_final(res, "%s", ferry_error_last());
		return 1;
	}
	rr.spec = *rendered;
	if (strcmp(r->kind, "label") == 0)
		error = label_step(&rr, res);
	else if (strcmp(r->kind, "register") == 0)
		error = registry_step(&rr, res);
	else if (strcmp(r->kind, "cache") == 0)
		error = datacache_claimed(&rr, res, env);
	else if ((error = cache_env(env, r->inputs)) == 0)
		return 0;
	if (error < 0) {
		step_result_dispose(res);
		res->outcome = "failed";
		res->reason = xstrdup(ferry_error_last());
		return 1;
	}
	/* a cache step returns 0 when its command must run */
	return strcmp(r->kind, "cache") == 0 && error == 0 ? 0 : 1;
}

/* Outputs of a job: the files directly in out/ by name less extension, then outputs.json. */
static int collect_outputs(json_t **out, struct step_result *res, const char *outdir)
{
	json_t *o = json_object(), *extra;
	struct dirent **names = NULL;
	char *path;
	int n = scandir(outdir, &names, NULL, alphasort);

	for (int i = 0; i < n; i++) {
		const char *f = names[i]->d_name;
		const char *dot = strrchr(f, '.');
		struct stat st;
		char *stem;

		path = xasprintf("%s/%s", outdir, f);
		if (f[0] != '.' && strcmp(f, "metrics.json") != 0 && strcmp(f, "outputs.json") != 0 &&
		    stat(path, &st) == 0 && (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) {
			stem = dot && dot != f ? xstrndup(f, (size_t)(dot - f)) : xstrdup(f);
			/* model.pkl and model.txt: both keep their full names */
			if (json_object_get(o, stem) != NULL)
				json_object_set_new(o, f, json_string(path));
			else
				json_object_set_new(o, stem, json_string(path));
			free(stem);
		}
		free(path);
		free(names[i]);
	}
	free(names);
	path = xasprintf("%s/outputs.json", outdir);
	if (access(path, F_OK) == 0) {
		json_error_t jerr;
		extra = json_load_file(path, 0, &jerr);
		if (extra == NULL || !json_is_object(extra)) {
			fail_final(res, "outputs.json: %s", extra ? "must be a JSON object of name: value"
								   : jerr.text);
			json_decref(extra);
			json_decref(o);
			free(path);
			return FERRY_EINVALID;
		}
		json_object_update(o, extra);
		json_decref(extra);
	}
	free(path);
	*out = o;
	return FERRY_OK;
}

/* Evaluates the gate of r against res->metrics; fails res (final) when it does not hold. */
static void check_gate(struct step_result *res, const struct step_run *r, const json_t *gate)
{
	const char *model = json_string_value(json_object_get(r->spec, "model"));
	json_t *prod = NULL, *item;
	char *version = NULL, *label = NULL, *reason = NULL;
	int needs_prod = 0, rc;
	size_t i;

	if (res->metrics == NULL) {
		fail_final(res, "the step has a gate but wrote no metrics.json into its FERRY_OUTPUT_DIR");
		return;
	}
	json_array_foreach(gate, i, item)
		needs_prod |= json_is_true(json_object_get(item, "production"));
	if (needs_prod && model) {
		rc = store_model_alias_get(&version, &prod, r->conn, model, "production");
		if (rc == FERRY_OK)
			label = xasprintf("%s %s", model, version);
		else if (rc != FERRY_ENOTFOUND) {
			res->outcome = "failed"; /* the database, not the gate: a retry may do */
			res->reason = xasprintf("reading the production version of %s: %s", model,
						ferry_error_last());
			goto out;
		}
	}
	rc = gate_eval(&res->gate, &reason, gate, res->metrics, prod, label);
	if (rc == 0) {
		fail_final(res, "%s", reason);
	} else if (rc < 0) {
		fail_final(res, "gate: %s", ferry_error_last());
	}
out:
	free(reason), free(version), free(label);
	json_decref(prod);
}

int steps_job_done(const struct step_run *r, struct step_result *res)
{
	const json_t *gate = json_object_get(r->spec, "gate");
	char *outdir = xasprintf("%s/out", r->dir), *mpath = NULL, *text = NULL;
	size_t len = 0;
	int error = FERRY_OK;

	memset(res, 0, sizeof(*res));
	res->outcome = "succeeded";
	if (strcmp(r->kind, "cache") == 0) {
		error = datacache_job_done(r, res);
		goto out;
	}
	if (collect_outputs(&res->outputs, res, outdir) < 0)
		goto out;
	mpath = xasprintf("%s/metrics.json", outdir);
	error = file_read(&text, &len, mpath);
	if (error == FERRY_OK) {
		if (metrics_parse(&res->metrics, text, len) < 0) {
			fail_final(res, "%s", ferry_error_last());
			goto out;
		}
	} else if (error < 0 && error != FERRY_ENOTFOUND) {
		fail_final(res, "metrics.json: %s", ferry_error_last());
		goto out;
	}
	error = FERRY_OK;
	if (json_array_size(gate) > 0)
		check_gate(res, r, gate);
out:
	free(outdir), free(mpath), free(text);
	return error;
}

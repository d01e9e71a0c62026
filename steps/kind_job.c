/*
 * kind_job — the kinds whose work is a command run as a job: `run` (any
 * command), `train` (its `model` output is what a register step below it
 * registers) and `evaluate` (its metrics judge the model and may compare it
 * with the production version). Claimed with its inputs, a job below a
 * cache step gets FERRY_CACHE_DIR; when the job exited 0, the files of its
 * output directory become outputs, its metrics.json the step's metrics,
 * and its gate (train and evaluate) is evaluated against them: a malformed
 * metrics.json or a gate that does not hold fails the step for good (or,
 * with on_fail: skip, skips it and what needs it).
 */
#include "steps/steps.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/jobfile.h"
#include "plan/gate.h"
#include "steps/keys.h"
#include "store/store.h"

/*
 * A job below a cache step finds the staged dataset through FERRY_CACHE_DIR
 * (the nearest). FERRY_ENOTFOUND when the entry is gone (evicted after its
 * session ended, or staged on another host).
 */
static int job_prepare(struct step_result *res, json_t **env, const struct step_run *r)
{
	const char *name;
	json_t *in;

	(void)res;
	json_object_foreach((json_t *)r->inputs, name, in) {
		const json_t *outs = json_object_get(in, "outputs");
		const char *dir = json_string_value(json_object_get(outs, "cache_dir"));
		const char *session = json_string_value(json_object_get(outs, "session"));
		if (!steps_input_has(in, SKF_STAGES) || dir == NULL)
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

#define OUTPUTS_MAX_BYTES (1024 * 1024) /* outputs.json: names and values, not data */

/*
 * Outputs of a job: the files directly in out/ by name less extension, then
 * outputs.json. *metrics: whether out/ may hold a metrics.json (0 when its
 * listing had none: not looked for again, as outputs.json is not).
 */
static int collect_outputs(json_t **out, int *metrics, struct step_result *res, const struct step_run *r,
			   const char *outdir)
{
	json_t *o = json_object(), *extra;
	struct dirent **names = NULL;
	char *path, *text = NULL;
	size_t len = 0;
	int dfd = open(outdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), n = -1, error, listed_json = 0;

	/* out/ replaced by a link (to /etc, say) would make the files there this step's outputs */
	if (dfd < 0 && errno != ENOENT) {
		step_result_fail_final(res, "out (FERRY_OUTPUT_DIR) is %s; the job must write its outputs "
				       "into the directory Ferry made", errno == ELOOP || errno == ENOTDIR ?
				       "not a directory (a symbolic link?)" : strerror(errno));
		json_decref(o);
		return FERRY_EINVALID;
	}
	if (dfd >= 0)
		n = scandirat(dfd, ".", &names, NULL, alphasort);
	for (int i = 0; i < n; i++) {
		const char *f = names[i]->d_name;
		const char *dot = strrchr(f, '.');
		struct stat st;
		char *stem;

		path = xasprintf("%s/%s", outdir, f);
		if (strcmp(f, "outputs.json") == 0)
			listed_json = 1;
		else if (strcmp(f, "metrics.json") == 0)
			*metrics = 1;
		if (f[0] != '.' && strcmp(f, "metrics.json") != 0 && strcmp(f, "outputs.json") != 0 &&
		    fstatat(dfd, f, &st, 0) == 0 && (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) {
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
	if (dfd >= 0)
		close(dfd);
	if (n < 0) /* out/ unlisted: both are looked for */
		listed_json = *metrics = 1;
	/* outputs.json, like every file a job leaves, is read as hostile (lib/jobfile.h): never waited on */
	error = listed_json ? jobfile_read(&text, &len, r->dir, "out/outputs.json", OUTPUTS_MAX_BYTES) : FERRY_ENOTFOUND;
	if (error == FERRY_OK) {
		json_error_t jerr;
		extra = json_loadb(text, len, 0, &jerr);
		free(text);
		if (extra == NULL || !json_is_object(extra)) {
			step_result_fail_final(res, "outputs.json: %s",
					       extra ? "must be a JSON object of name: value" : jerr.text);
			json_decref(extra);
			json_decref(o);
			return FERRY_EINVALID;
		}
		json_object_update(o, extra);
		json_decref(extra);
	} else if (error != FERRY_ENOTFOUND) {
		step_result_fail_final(res, "%s", ferry_error_last());
		json_decref(o);
		return FERRY_EINVALID;
	}
	*out = o;
	return FERRY_OK;
}

/* Evaluates the gate of r against res->metrics; fails res (final) when it does not hold. */
static void check_gate(struct step_result *res, const struct step_run *r, const json_t *gate)
{
	const char *model = json_string_value(json_object_get(r->spec, "model")), *on_fail;
	json_t *prod = NULL, *item;
	char *version = NULL, *label = NULL, *reason = NULL;
	int needs_prod = 0, rc;
	size_t i;

	if (res->metrics == NULL) {
		step_result_fail_final(res, "the step has a gate but wrote no metrics.json into its "
				       "FERRY_OUTPUT_DIR");
		return;
	}
	json_array_foreach(gate, i, item)
		needs_prod |= json_is_true(json_object_get(item, "production"));
	if (needs_prod && model) {
		rc = store_model_alias_get(&version, &prod, r->conn, model, "production");
		if (rc == FERRY_OK)
			label = xasprintf("%s %s", model, version);
		else if (rc != FERRY_ENOTFOUND) {
			res->outcome = OUTCOME_FAILED; /* the database, not the gate: a retry may do */
			res->reason = xasprintf("reading the production version of %s: %s", model,
						ferry_error_last());
			goto out;
		}
	}
	rc = gate_eval(&res->gate, &reason, gate, res->metrics, prod, label);
	on_fail = json_string_value(json_object_get(r->spec, "on_fail"));
	if (rc == 0 && on_fail != NULL && strcmp(on_fail, "skip") == 0) {
		/* the run goes on without what follows: skipped, as a when: that does not hold */
		res->outcome = OUTCOME_SKIPPED;
		res->reason = xasprintf("%s; what needs it is skipped (on_fail: skip)", reason);
	} else if (rc == 0) {
		step_result_fail_final(res, "%s", reason);
	} else if (rc < 0) {
		step_result_fail_final(res, "gate: %s", ferry_error_last());
	}
out:
	free(reason), free(version), free(label);
	json_decref(prod);
}

/* The job exited 0: outputs from r->dir/out (files by name less extension, outputs.json), metrics.json, the gate. */
static int job_done(struct step_result *res, const struct step_run *r)
{
	const json_t *gate = json_object_get(r->spec, "gate");
	char *outdir = xasprintf("%s/out", r->dir), *text = NULL;
	size_t len = 0;
	int error, metrics = 0;

	if (collect_outputs(&res->outputs, &metrics, res, r, outdir) < 0)
		goto out;
	error = metrics ? jobfile_read(&text, &len, r->dir, "out/metrics.json", METRICS_MAX_BYTES) : FERRY_ENOTFOUND;
	if (error == FERRY_OK) {
		if (metrics_parse(&res->metrics, text, len) < 0) {
			step_result_fail_final(res, "%s", ferry_error_last());
			goto out;
		}
	} else if (error < 0 && error != FERRY_ENOTFOUND) {
		step_result_fail_final(res, "%s", ferry_error_last());
		goto out;
	}
	if (json_array_size(gate) > 0)
		check_gate(res, r, gate);
out:
	free(outdir), free(text);
	return FERRY_OK;
}

/* Their keys (steps/keys.h): where the job runs, its cache, the gate of train and evaluate, the monitor's. */
static const struct step_key run_keys[] = {KEYS_JOB, {KEY_HANG}, {KEY_WATCH}, {0}};
static const struct step_key train_keys[] = {KEYS_JOB, {KEY_GATE}, {KEY_ON_FAIL}, {KEY_HANG}, {KEY_WATCH}, {0}};
static const struct step_key evaluate_keys[] = {KEYS_JOB, {KEY_GATE}, {KEY_ON_FAIL}, {KEY_MODEL}, {KEY_HANG}, {KEY_WATCH},
					       {0}};

const struct step_kind kind_run = {
	.name = "run", .flags = SKF_JOB,
	.command = SKC_REQUIRED, .keys = run_keys,
	.prepare = job_prepare, .job_done = job_done,
};

const struct step_kind kind_train = {
	.name = "train", .flags = SKF_JOB | SKF_INPUTS | SKF_TRAINS,
	.command = SKC_REQUIRED, .keys = train_keys,
	.prepare = job_prepare, .job_done = job_done,
};

const struct step_kind kind_evaluate = {
	.name = "evaluate", .flags = SKF_JOB | SKF_INPUTS | SKF_EVALUATES,
	.command = SKC_REQUIRED, .keys = evaluate_keys,
	.prepare = job_prepare, .job_done = job_done,
};

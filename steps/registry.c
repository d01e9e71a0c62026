/*
 * registry — the `register` step kind and the artifact store behind the
 * model registry. A register step takes its artifact (a file or a
 * directory: the step's `artifact`, else the `model` output of an upstream
 * train step), stores it content-addressed under $FERRY_HOME/artifacts,
 * and registers a new version of its model with the lineage that produced
 * it: run, step, workflow hash, params, the metrics of the steps above it
 * and the data fingerprint (a cache step's, an upstream `data_fingerprint`
 * output, or the fingerprint of a label step's dataset).
 *
 * Blob store layout: lib/blobs.h (artifacts/sha256/AB/ABCDEF…, read-only,
 * written once: the same bytes registered twice are stored once). A
 * directory becomes a manifest (JSON: each regular file's relative path,
 * sha256 and size, sorted by path), itself stored as a blob; its files are
 * stored as blobs too. Symbolic
 * links are not followed.
 */
#include "steps/registry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/blobs.h"
#include "lib/fingerprint.h"
#include "store/store.h"
#include "exec/exec.h"
#include "lib/util.h"
#include "plan/template.h"

#define TREE_MAX_FILES 100000

/* Stores every regular file below dir (rel is its path in the tree) and lists it in files. */
static int tree_walk(json_t *files, int64_t *bytes, const char *home, const char *dir, const char *rel)
{
	struct dirent **names = NULL;
	int n = scandir(dir, &names, NULL, alphasort), error = FERRY_OK;

	if (n < 0) {
		ferry_error_set("artifact directory %s: %s", dir, strerror(errno));
		return FERRY_ERROR;
	}
	for (int i = 0; i < n; i++) {
		const char *f = names[i]->d_name;
		char *path = xasprintf("%s/%s", dir, f);
		char *sub = rel[0] ? xasprintf("%s/%s", rel, f) : xstrdup(f);
		struct stat st;

		if (error == 0 && strcmp(f, ".") != 0 && strcmp(f, "..") != 0 && lstat(path, &st) == 0) {
			if (S_ISDIR(st.st_mode)) {
				error = tree_walk(files, bytes, home, path, sub);
			} else if (S_ISREG(st.st_mode)) {
				char hex[65], *blob = NULL;
				int64_t size = 0;
				if (json_array_size(files) >= TREE_MAX_FILES) {
					ferry_error_set("artifact directory has more than %d files", TREE_MAX_FILES);
					error = FERRY_EINVALID;
				} else if ((error = blobs_put_file(hex, &size, &blob, home, path)) == 0) {
					json_array_append_new(files, json_pack("{s:s, s:s, s:I}", "path", sub,
									       "sha256", hex, "bytes", (json_int_t)size));
					*bytes += size;
				}
				free(blob);
			}
		}
		free(path), free(sub), free(names[i]);
	}
	free(names);
	return error;
}

int registry_artifact_put(struct registry_artifact *out, const char *home, const char *src)
{
	struct stat st;
	json_t *manifest = NULL;
	char *text = NULL;
	int error;

	memset(out, 0, sizeof(*out));
	if (stat(src, &st) < 0) {
		ferry_error_set("artifact %s: %s", src, strerror(errno));
		return errno == ENOENT ? FERRY_ENOTFOUND : FERRY_ERROR;
	}
	if (S_ISREG(st.st_mode)) {
		out->kind = "file";
		if ((error = blobs_put_file(out->sha256, &out->bytes, &out->path, home, src)) == FERRY_OK)
			out->blobs = json_pack("[s]", out->sha256);
		return error;
	}
	if (!S_ISDIR(st.st_mode)) {
		ferry_error_set("artifact %s is neither a file nor a directory", src);
		return FERRY_EINVALID;
	}
	out->kind = "tree";
	manifest = json_pack("{s:s, s:[]}", "format", "ferry-tree-1", "files");
	if ((error = tree_walk(json_object_get(manifest, "files"), &out->bytes, home, src, "")) < 0)
		goto out;
	text = json_dumps(manifest, JSON_COMPACT | JSON_SORT_KEYS);
	if ((error = blobs_put_bytes(out->sha256, &out->path, home, text, strlen(text))) == FERRY_OK) {
		json_t *f;
		size_t i;
		out->blobs = json_pack("[s]", out->sha256);
		json_array_foreach(json_object_get(manifest, "files"), i, f)
			json_array_append(out->blobs, json_object_get(f, "sha256"));
	}
out:
	free(text);
	json_decref(manifest);
	return error;
}

void registry_artifact_dispose(struct registry_artifact *a)
{
	if (a == NULL)
		return;
	free(a->path);
	a->path = NULL;
	json_decref(a->blobs);
	a->blobs = NULL;
}

int registry_artifact_held(PGconn *conn, const struct registry_artifact *a)
{
	char host[256];
	json_t *b;
	size_t i;
	int error = FERRY_OK;

	ferry_host_name(host, sizeof(host));
	json_array_foreach(a->blobs, i, b)
		if (error == FERRY_OK)
			error = store_blob_held(conn, json_string_value(b), host);
	return error;
}

/* ---- the register step ---------------------------------------------- */

/*
 * An upstream step's outputs as the lineage reads them: a sweep with
 * select: stands for its best item (the claim hands it as "best"; its own
 * "outputs" are the list of every item's).
 */
static const json_t *input_outputs(const json_t *in)
{
	const json_t *best = json_object_get(in, "best");

	return json_is_object(best) ? json_object_get(best, "outputs") : json_object_get(in, "outputs");
}

/*
 * The params a version was made with: the run's, with the item of each
 * upstream sweep's best over them (a sweep over params C and gamma
 * registers the C and gamma of the model it picked, not the lists it
 * searched). A new object, the caller's.
 */
static json_t *lineage_params(const struct step_run *r)
{
	json_t *p = json_deep_copy(json_object_get(r->run, "params")), *in;
	const char *name;

	if (p == NULL)
		p = json_object();
	json_object_foreach((json_t *)r->inputs, name, in) {
		const json_t *item = json_object_get(json_object_get(in, "best"), "item");
		const char *k;
		json_t *v;
		json_object_foreach((json_t *)item, k, v) {
			char *t = tmpl_value_text(v);
			json_object_set_new(p, k, t ? json_string(t) : json_deep_copy(v));
			free(t);
		}
	}
	return p;
}

/* Whether the absolute path p lies lexically in dir, as given or resolved (a root reached through a link). */
static int within_root(const char *p, const char *dir)
{
	char base[PATH_MAX];

	return dir && (path_within_lexical(p, dir) || (realpath(dir, base) && path_within_lexical(p, base)));
}

/*
 * The artifact's absolute, resolved path: the spec's (relative to the run's
 * directory), else an upstream `model` output (a train step's first: SKF_TRAINS;
 * a sweep's: its best item's). It
 * must lie below the run's directory or below $FERRY_HOME/runs (what steps
 * wrote, this run's or, for a step from cache, an earlier one's): a
 * workflow does not register files from anywhere on the machine. *out is
 * the caller's.
 */
static int artifact_source(char **out, const struct step_run *r)
{
	const char *given = json_string_value(json_object_get(r->spec, "artifact"));
	const char *name, *found = NULL;
	char real[PATH_MAX], *path, *runs;
	json_t *in;
	int ok;

	*out = NULL;
	if (given == NULL) {
		json_object_foreach((json_t *)r->inputs, name, in) {
			const char *m = json_string_value(json_object_get(input_outputs(in), "model"));
			if (m && (found == NULL || steps_input_has(in, SKF_TRAINS)))
				found = m;
		}
		if (found == NULL) {
			ferry_error_set("nothing to register: no upstream step has a \"model\" output; write "
					"model.* into the train step's FERRY_OUTPUT_DIR or set artifact: on this step");
			return FERRY_EINVALID;
		}
		given = found;
	}
	if (given[0] != '/' && r->workdir == NULL) {
		ferry_error_set("artifact %s is relative but the run has no working directory; give an "
				"absolute path or a {{steps.X.outputs.Y}} reference", given);
		return FERRY_EINVALID;
	}
	path = given[0] == '/' ? xstrdup(given) : xasprintf("%s/%s", r->workdir, given);
	runs = xasprintf("%s/runs", r->home);
	/*
	 * By its text first: a path that leaves both is refused before the
	 * file system is asked about it, so the answer does not tell whether
	 * it exists (the daemon sees what the job user may not). Its links
	 * are judged after realpath, below.
	 */
	if (!within_root(path, r->workdir) && !within_root(path, runs)) {
		char *lex = path_lexical(path);
		ferry_error_set("artifact %s is %s, which leaves the run's directory%s%s and Ferry's run outputs "
				"(%s); register a file a step wrote or one below the run's directory", path,
				lex ? lex : path, r->workdir ? " " : "", r->workdir ? r->workdir : "", runs);
		free(lex);
		free(path);
		free(runs);
		return FERRY_EINVALID;
	}
	if (realpath(path, real) == NULL) {
		/* "cannot be read by the job user" where it could not have looked: nothing said of what is there */
		int error = exec_user_missing(path, "artifact", errno);
		free(path);
		free(runs);
		return error;
	}
	ok = path_within(real, r->workdir) || path_within(real, runs);
	if (!ok)
		ferry_error_set("artifact %s resolves to %s, which leaves the run's directory%s%s and "
				"Ferry's run outputs (%s); register a file a step wrote or one below "
				"the run's directory", path, real, r->workdir ? " " : "",
				r->workdir ? r->workdir : "", runs);
	free(path);
	free(runs);
	/* and nothing the run's own jobs could not read (FERRY_ALLOWED_ROOTS, the job user) */
	if (!ok || !exec_user_may_read(real, "artifact", r->workdir, r->home))
		return FERRY_EINVALID;
	*out = xstrdup(real);
	return FERRY_OK;
}

/* The metrics that led to this version: every upstream step's, evaluate steps' (SKF_EVALUATES) last: they win. */
static json_t *lineage_metrics(const json_t *inputs)
{
	json_t *m = json_object(), *in;
	const char *name;

	for (int pass = 0; pass < 2; pass++)
		json_object_foreach((json_t *)inputs, name, in) {
			const json_t *mm = json_object_get(in, "metrics");
			int eval = steps_input_has(in, SKF_EVALUATES);
			if (json_is_object(mm) && eval == pass)
				json_object_update(m, (json_t *)mm);
		}
	if (json_object_size(m) == 0) {
		json_decref(m);
		return NULL;
	}
	return m;
}

/*
 * The data fingerprint: a cache step's (SKF_STAGES), else an upstream output
 * named data_fingerprint, else the fingerprint of a label step's dataset
 * (SKF_DATASET). NULL
 * when none (the caller frees it).
 */
static char *lineage_data(const json_t *inputs)
{
	const char *name, *fp = NULL, *dataset = NULL;
	json_t *in;
	char hex[65];

	json_object_foreach((json_t *)inputs, name, in) {
		const json_t *outs = input_outputs(in);
		int stages = steps_input_has(in, SKF_STAGES);
		const char *f = json_string_value(json_object_get(outs, stages ? "fingerprint" : "data_fingerprint"));
		if (f && (fp == NULL || stages))
			fp = f;
		if (steps_input_has(in, SKF_DATASET) && json_string_value(json_object_get(outs, "dataset")))
			dataset = json_string_value(json_object_get(outs, "dataset"));
	}
	if (fp)
		return xstrdup(fp);
	if (dataset && fingerprint_path(hex, dataset) == FERRY_OK)
		return xasprintf("sha256:%s", hex);
	return NULL;
}

int registry_step(const struct step_run *r, struct step_result *res)
{
	struct registry_artifact art = {0};
	struct store_model_reg reg = {0};
	const char *model = json_string_value(json_object_get(r->spec, "model"));
	const char *bump = json_string_value(json_object_get(r->spec, "version"));
	const char *base;
	char *src = NULL, *version = NULL, *data_fp = NULL;
	json_t *metrics = NULL, *vjson = NULL, *params = NULL;
	int created = 0, error;

	if (model == NULL) {
		ferry_error_set("register step has no model: set model: NAME");
		return FERRY_EINVALID;
	}
	if (json_array_size(json_object_get(r->spec, "aliases")) > 0) {
		char *what = xasprintf("moving alias %s of %s",
				       json_string_value(json_array_get(json_object_get(r->spec, "aliases"), 0)), model);
		error = steps_submitter_may_deploy(r, res, what);
		free(what);
		if (error <= 0)
			return error < 0 ? error : FERRY_OK; /* res says why */
	}
	if ((error = artifact_source(&src, r)) < 0)
		goto out;
	if ((error = registry_artifact_put(&art, r->home, src)) < 0 ||
	    (error = registry_artifact_held(r->conn, &art)) < 0)
		goto out;
	metrics = lineage_metrics(r->inputs);
	data_fp = lineage_data(r->inputs);
	params = lineage_params(r);
	base = strrchr(src, '/') ? strrchr(src, '/') + 1 : src;
	reg = (struct store_model_reg){
		.model = model, .bump = bump ? bump : "patch", .sha256 = art.sha256, .kind = art.kind,
		.bytes = art.bytes, .path = art.path, .name = base, .source = src, .metrics = metrics,
		.params = params, .run_id = r->run_id, .step = r->name,
		.data_fingerprint = data_fp, .aliases = json_object_get(r->spec, "aliases"), .actor = r->actor,
	};
	if ((error = store_model_register(&version, &created, &vjson, r->conn, &reg)) < 0) {
		char *msg = xasprintf("registering %s: %s", model, ferry_error_last());
		ferry_error_set("%s", msg);
		free(msg);
		goto out;
	}
	res->outcome = OUTCOME_SUCCEEDED;
	res->outputs = json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:b}", "model", model, "version", version,
				 "sha256", art.sha256, "artifact", art.path, "bytes", (json_int_t)art.bytes,
				 "kind", art.kind, "created", created);
	{
		const json_t *want = json_object_get(r->spec, "aliases");
		size_t got = json_array_size(json_object_get(vjson, "aliases"));
		res->reason = xasprintf(created ? "registered %s %s (sha256 %.12s…)%s"
						: "%s %s was registered by this step before (sha256 %.12s…)%s",
					model, version, art.sha256,
					created && json_array_size(want) > 0 && got == 0
						? "; aliases not moved: dev runs never move them" : "");
	}
	flog_info("run %lld step %s: %s", (long long)r->run_id, r->name, res->reason);
out:
	registry_artifact_dispose(&art);
	free(src), free(version), free(data_fp);
	json_decref(metrics);
	json_decref(params);
	json_decref(vjson);
	return error;
}

/*
 * inputs — the files of the steps above a step, when they ran on another
 * host of the fleet (issue 29). A job's outputs name files of its
 * attempt's output directory on the host that ran it (DIR/out/NAME). A
 * step claimed on another host — the fleet shares a database, not a disk —
 * gets each such file fetched from that host's API (GET
 * /runs/{id}/steps/{step}/outputs/NAME, the bytes checked against the
 * sha256 the host names: blobs_download) into its own directory for the
 * same attempt ($FERRY_HOME/runs/RUN/STEP/ATTEMPT/out/NAME here), and its
 * inputs are rewritten to name them before its templates are rendered:
 * {{steps.train.outputs.model}} is a path on the host that runs the step.
 *
 * A path under this host's runs/ that is readable here is its own and
 * costs no query (a run on one host never asks the database); a copy
 * fetched for an earlier step is not fetched again; any value that is no
 * output file of another host's attempt is left as it is. Only the files
 * the step's inputs name travel, when a step needs them: nothing is
 * copied ahead. Another host's path readable here (a shared directory) is
 * still copied into this host's runs/: its job reads what this host
 * holds, not a disk it merely happens to see.
 */
#include "steps/steps.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/exec.h"
#include "lib/blobs.h"
#include "lib/envsecret.h"
#include "lib/jobfile.h"
#include "lib/util.h"
#include "store/store.h"

struct localize {
	const struct step_run *r;
	char *token, *runs;
	int changed;
};

/* Whether path lies under this host's $FERRY_HOME/runs/. */
static int under_home(struct localize *l, const char *path)
{
	if (l->runs == NULL)
		l->runs = xasprintf("%s/runs/", l->r->home);
	return strncmp(path, l->runs, strlen(l->runs)) == 0;
}

/* The path part of a URL: percent-escaped. The caller frees it. */
static char *escape(const char *s)
{
	char *e = curl_easy_escape(NULL, s, 0), *out;

	if (e == NULL)
		abort();
	out = xstrdup(e);
	curl_free(e);
	return out;
}

/* Fetches the output file NAME of attempt ATTEMPT of STEP (on HOST) to local. */
static int fetch(struct localize *l, const char *step, int attempt, const char *host, const char *name,
		 const char *local)
{
	const struct step_run *r = l->r;
	char *address = NULL, *last_seen = NULL, *url, *es, *en, got[65], *outdir;
	int live = 0, error;
	int64_t bytes = 0, t0 = clock_mono_ms();

	if ((error = store_host_address(&address, &live, &last_seen, r->conn, host)) < 0)
		return error;
	if (address == NULL || !live) {
		if (address == NULL)
			ferry_error_set("output %s of step %s (attempt %d) is on host %s, which no daemon of the fleet "
					"has named (GET /hosts)", name, step, attempt, host);
		else
			ferry_error_set("output %s of step %s (attempt %d) is on host %s, which is lost (last seen %s); "
					"a retry fetches it when a daemon of %s is up, or retry from %s to make it again",
					name, step, attempt, host, last_seen ? last_seen : "?", host, step);
		free(address), free(last_seen);
		return FERRY_ERROR;
	}
	if (l->token == NULL)
		l->token = envsecret_fleet_token(r->home);
	outdir = xstrdup(local);
	*strrchr(outdir, '/') = '\0';
	if (mkdir_p(outdir, 0711) < 0) {
		free(outdir), free(address), free(last_seen);
		return FERRY_ERROR;
	}
	free(outdir);
	es = escape(step);
	en = escape(name);
	url = xasprintf("%s/api/v1/runs/%lld/steps/%s/outputs/%s?attempt=%d", address, (long long)r->run_id, es, en,
			attempt);
	error = blobs_download(local, url, l->token, got, &bytes);
	if (error == FERRY_OK && chmod(local, 0644) < 0) /* the job reads it, as it reads its own inputs */
		error = FERRY_ERROR;
	if (error == FERRY_OK)
		flog_info("run %lld step %s: output %s of step %s attempt %d fetched from host %s: %lld bytes, "
			  "sha256 %.12s…, in %lld ms", (long long)r->run_id, r->name, name, step, attempt, host,
			  (long long)bytes, got, (long long)(clock_mono_ms() - t0));
	else
		ferry_error_set("output %s of step %s (attempt %d, on host %s) could not be fetched: %s", name, step,
				attempt, host, ferry_error_last());
	free(url), free(es), free(en), free(address), free(last_seen);
	return error;
}

/*
 * *path here for v when v is an output file of another host's attempt
 * (fetched now unless it is here already): 1 with *path, 0 when v is left
 * as it is, or an error.
 */
static int localize_one(struct localize *l, const char *v, char **path)
{
	const struct step_run *r = l->r;
	const char *out = NULL, *p;
	char *dir, *step = NULL, *host = NULL, *base;
	int attempt = 0, error;

	*path = NULL;
	if (v[0] != '/')
		return 0;
	/*
	 * Under this host's runs/ and readable: its own (no query; a run on one
	 * host never asks). Elsewhere, or missing here (another host with the
	 * same FERRY_HOME path): the database says whose attempt it is.
	 */
	if (under_home(l, v) && (access(v, F_OK) == 0 || errno != ENOENT))
		return 0;
	for (p = v; (p = strstr(p, "/out/")) != NULL; p++)
		out = p;
	if (out == NULL || !jobfile_output_name_ok(out + 5))
		return 0;
	dir = xstrndup(v, (size_t)(out - v));
	error = store_attempt_of_dir(&step, &attempt, &host, r->conn, r->run_id, dir);
	free(dir);
	if (error == FERRY_ENOTFOUND || (error == FERRY_OK && (host[0] == '\0' || strcmp(host, r->host) == 0))) {
		/* no attempt's output, or this host's own (missing: the job finds it missing, as before) */
		free(step), free(host);
		return 0;
	}
	if (error < 0)
		return error;
	base = exec_attempt_dir(r->home, r->run_id, step, attempt);
	*path = xasprintf("%s/out/%s", base, out + 5);
	free(base);
	if (access(*path, F_OK) != 0 && (error = fetch(l, step, attempt, host, out + 5, *path)) < 0) {
		free(*path);
		*path = NULL;
	}
	free(step), free(host);
	return error < 0 ? error : 1;
}

static int localize_tree(struct localize *l, json_t *v);

/* x made local: *now a new string when it changed (NULL when not, or a tree changed in place); 0 or an error. */
static int localize_value(struct localize *l, json_t *x, json_t **now)
{
	char *path = NULL;
	int rc;

	*now = NULL;
	if (!json_is_string(x))
		return localize_tree(l, x);
	if ((rc = localize_one(l, json_string_value(x), &path)) == 1) {
		*now = json_string(path);
		l->changed = 1;
	}
	free(path);
	return rc < 0 ? rc : 0;
}

/* Every string under v (an output value, a fan-out's list of them) made local in place. */
static int localize_tree(struct localize *l, json_t *v)
{
	const char *key;
	json_t *x, *now;
	size_t i;
	int rc;

	if (json_is_object(v)) {
		json_object_foreach(v, key, x) {
			if ((rc = localize_value(l, x, &now)) < 0)
				return rc;
			if (now)
				json_object_set_new(v, key, now);
		}
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, x) {
			if ((rc = localize_value(l, x, &now)) < 0)
				return rc;
			if (now)
				json_array_set_new(v, i, now);
		}
	}
	return 0;
}

int steps_inputs_localize(json_t **out, const struct step_run *r)
{
	struct localize l = {r, NULL, NULL, 0};
	json_t *copy, *in;
	const char *name;
	int error = 0;

	*out = NULL;
	if (r->inputs == NULL || r->conn == NULL || r->host == NULL || json_object_size(r->inputs) == 0)
		return 0;
	copy = json_deep_copy(r->inputs);
	json_object_foreach(copy, name, in) {
		if ((error = localize_tree(&l, json_object_get(in, "outputs"))) < 0 ||
		    (error = localize_tree(&l, json_object_get(in, "best"))) < 0)
			break;
	}
	free(l.token), free(l.runs);
	if (error < 0 || !l.changed) {
		json_decref(copy);
		return error;
	}
	*out = copy;
	return 0;
}

/*
 * kind_deploy — a step that puts the model version registered above it in
 * front of users: it adds the version to its deployment (created at the
 * first deploy, named after the model unless `deployment:` says), starts
 * `replicas` replicas of the model server (`serve:`, handed FERRY_PORT,
 * FERRY_MODEL_PATH and FERRY_MODEL_NAME), waits until each answers
 * GET /v2/health/ready and a warm-up inference with the step's `sample`,
 * and only then moves `traffic` percent to it (the versions already
 * serving keep the rest in proportion) and has HAProxy apply it
 * (reconcile.c). A version that never gets ready is stopped and removed:
 * traffic stays exactly as it was, and the step fails with the reason.
 *
 * In a dev run (`ferry dev run`) the step checks what it would deploy and
 * deploys nothing: debugging a pipeline never moves the traffic users get
 * nor leaves a server running after the session.
 *
 * The step runs on a worker thread (SKF_DAEMON): its waits are bounded by
 * the step's timeout (2 minutes when it has none). A retried step finds
 * its version: one already serving is not deployed twice.
 */
#include "steps.h"

#include <stdlib.h>
#include <string.h>

#include "deploy.h"
#include "reconcile.h"
#include "replicas.h"
#include "store_deploy.h"
#include "util.h"

#define READY_TIMEOUT_MS (2 * 60 * 1000)
#define STOP_GRACE_MS 5000

/* The version and artifact registered above the step for model (a register step's outputs). */
static int upstream_version(const struct step_run *r, const char *model, const char **version,
			    const char **artifact)
{
	const char *k;
	json_t *in;

	*version = *artifact = NULL;
	json_object_foreach((json_t *)r->inputs, k, in) {
		const json_t *o = json_object_get(in, "outputs");
		const char *m = json_string_value(json_object_get(o, "model"));
		if (m && strcmp(m, model) == 0 && json_string_value(json_object_get(o, "version")) &&
		    json_string_value(json_object_get(o, "artifact"))) {
			*version = json_string_value(json_object_get(o, "version"));
			*artifact = json_string_value(json_object_get(o, "artifact"));
			return FERRY_OK;
		}
	}
	ferry_error_set("no step above this deploy step registered a version of model %s: add a register "
			"step (kind: register, model: %s) to its needs", model, model);
	return FERRY_EINVALID;
}

/* The sample request: the file `sample` names (below the run's working directory), read whole. */
static int read_sample(const struct step_run *r, char **body)
{
	const char *s = json_string_value(json_object_get(r->spec, "sample"));
	char *path, *real;
	json_t *j;
	int error;

	*body = NULL;
	if (s == NULL)
		return FERRY_OK;
	path = s[0] == '/' || r->workdir == NULL ? xstrdup(s) : xasprintf("%s/%s", r->workdir, s);
	real = realpath(path, NULL);
	if (real == NULL || (s[0] != '/' && r->workdir && !path_within(real, r->workdir))) {
		ferry_error_set("sample %s: not a file inside the workflow's directory", s);
		free(path), free(real);
		return FERRY_EINVALID;
	}
	error = file_read(body, NULL, real);
	free(path), free(real);
	if (error < 0)
		return error;
	if ((j = json_loads(*body, 0, NULL)) == NULL) {
		ferry_error_set("sample %s: not a JSON request", s);
		free(*body);
		*body = NULL;
		return FERRY_EINVALID;
	}
	json_decref(j);
	return FERRY_OK;
}

static void stop_all(json_t **handles, int n)
{
	for (int i = 0; i < n; i++)
		if (handles[i])
			replica_stop(handles[i], STOP_GRACE_MS);
}

static int deploy_prepare(struct step_result *res, json_t **env, const struct step_run *r)
{
	const char *model = json_string_value(json_object_get(r->spec, "model"));
	const char *name = json_string_value(json_object_get(r->spec, "deployment"));
	const json_t *serve = json_object_get(r->spec, "serve");
	int traffic = (int)json_integer_value(json_object_get(r->spec, "traffic"));
	int nrep = (int)json_integer_value(json_object_get(r->spec, "replicas"));
	const char *version, *artifact;
	json_t *handles[DEPLOY_MAX_REPLICAS] = {NULL}, *weights = NULL, *spec = NULL, *as = json_object_get(r->spec, "auto_stop");
	char *sample = NULL, *state = NULL;
	int64_t dep = 0, until;
	int port = 0, created = 0, ord = 0, auto_stop_s = DEPLOY_AUTO_STOP_DEFAULT_S, error;

	(void)env;
	res->outcome = "failed";
	if (name == NULL)
		name = model;
	/*
	 * A dev run never touches what users get, and starts nothing that
	 * would outlive the session: the step checks what it would deploy and
	 * says so.
	 */
	if (json_is_true(json_object_get(r->run, "dev"))) {
		if ((error = upstream_version(r, model, &version, &artifact)) < 0 ||
		    (error = read_sample(r, &sample)) < 0)
			goto fail;
		free(sample);
		res->outcome = "succeeded";
		res->reason = xasprintf("not deployed: a dev run starts no replicas and moves no traffic (%s %s "
					"would go to deployment %s); submit the workflow to deploy", model, version, name);
		res->outputs = json_pack("{s:s, s:s, s:b}", "deployment", name, "version", version, "deployed", 0);
		return 1;
	}
	if (nrep < 1)
		nrep = 1;
	if ((error = upstream_version(r, model, &version, &artifact)) < 0 ||
	    (error = read_sample(r, &sample)) < 0 ||
	    (as && (error = deploy_check_auto_stop(as, "auto_stop", &auto_stop_s)) < 0))
		goto fail;
	if (!json_is_array(serve) || json_array_size(serve) == 0) {
		ferry_error_set("a deploy step needs serve: the model server's command");
		error = FERRY_EINVALID;
		goto fail;
	}
	/* what a restart of a replica needs, kept with the version */
	spec = json_pack("{s:O, s:O, s:s?}", "command", serve, "env",
			 json_object_get(r->spec, "env") ? json_object_get(r->spec, "env") : json_object(),
			 "workdir", r->workdir);
	if ((error = store_deploy_ensure(r->conn, name, model, replica_free_port(), auto_stop_s, r->run_id,
					 r->actor, &dep, &port, &created)) < 0 ||
	    (error = store_deploy_version_add(r->conn, dep, version, artifact, nrep, spec, r->run_id, r->name,
					      &ord, &state)) < 0)
		goto fail;
	if (strcmp(state, "starting") != 0) {
		/* an earlier attempt of this step deployed it */
		res->outcome = "succeeded";
		res->reason = xasprintf("%s %s is %s in deployment %s (http://127.0.0.1:%d)", model, version, state,
					name, port);
		res->outputs = json_pack("{s:s, s:s, s:s, s:I}", "deployment", name, "version", version, "url",
					 "", "id", (json_int_t)dep);
		json_object_set_new(res->outputs, "url", json_sprintf("http://127.0.0.1:%d", port));
		free(state), free(sample);
		json_decref(spec);
		return 1;
	}
	until = clock_mono_ms() + READY_TIMEOUT_MS;
	for (int i = 0; i < nrep; i++) {
		struct replica_spec s = {.home = r->home, .deployment = name, .ord = ord, .idx = i + 1,
					 .generation = 1, .port = replica_free_port(), .model = model,
					 .version = version, .artifact = artifact, .serve = serve,
					 .env = json_object_get(r->spec, "env"), .workdir = r->workdir};
		if (s.port == 0) {
			ferry_error_set("no free port for a replica");
			error = FERRY_ERROR;
			goto undo;
		}
		if ((error = replica_start(&s, &handles[i])) < 0 ||
		    (error = store_deploy_replica_put(r->conn, dep, version, i + 1, s.port, handles[i], 1, "starting",
						      NULL)) < 0)
			goto undo;
	}
	{
		json_t *list = NULL, *v, *rep;
		size_t k, j;
		if ((error = store_deploy_list(r->conn, dep, &list)) < 0)
			goto undo;
		json_array_foreach(json_object_get(json_array_get(list, 0), "versions"), k, v) {
			if (strcmp(json_string_value(json_object_get(v, "version")), version) != 0)
				continue;
			json_array_foreach(json_object_get(v, "replica_list"), j, rep) {
				int idx = (int)json_integer_value(json_object_get(rep, "idx"));
				int rport = (int)json_integer_value(json_object_get(rep, "port"));
				if (idx < 1 || idx > nrep)
					continue;
				if ((error = replica_wait_ready(rport, model, sample, handles[idx - 1], until)) < 0) {
					json_decref(list);
					goto undo;
				}
				store_deploy_replica_health(r->conn, dep, version, idx, "healthy", NULL, 0, 0);
			}
		}
		json_decref(list);
	}
	{
		char *why = xasprintf("deployed by run %lld step %s", (long long)r->run_id, r->name);
		error = store_deploy_shift(r->conn, dep, version, traffic, auto_stop_s, r->actor, why, &weights);
		free(why);
		if (error < 0)
			goto undo;
	}
	/* traffic moves when HAProxy has it: the step ends with the version live */
	if ((error = reconcile_now(r->conn, r->home, r->actor)) < 0)
		flog_warn("run %lld step %s: HAProxy not updated yet (the reconcile task retries): %s",
			  (long long)r->run_id, r->name, ferry_error_last());
	res->outcome = "succeeded";
	res->reason = xasprintf("%s %s serves %d%% of deployment %s at http://127.0.0.1:%d with %d replica%s",
				model, version, (int)json_integer_value(json_object_get(weights, version)), name,
				port, nrep, nrep == 1 ? "" : "s");
	res->outputs = json_pack("{s:s, s:s, s:I, s:O}", "deployment", name, "version", version, "id",
				 (json_int_t)dep, "weights", weights);
	json_object_set_new(res->outputs, "url", json_sprintf("http://127.0.0.1:%d", port));
	flog_info("run %lld step %s: %s", (long long)r->run_id, r->name, res->reason);
	json_decref(weights);
	for (int i = 0; i < nrep; i++)
		json_decref(handles[i]);
	free(state), free(sample);
	json_decref(spec);
	return 1;
undo:
	{
		char *why = xstrdup(ferry_error_last());
		stop_all(handles, nrep);
		if (store_deploy_version_drop(r->conn, dep, version, r->actor, why) < 0)
			flog_error("deployment %s: removing version %s that never served: %s", name, version,
				   ferry_error_last());
		ferry_error_set("%s; traffic left as it was", why);
		free(why);
	}
fail:
	for (int i = 0; i < nrep && i < DEPLOY_MAX_REPLICAS; i++)
		json_decref(handles[i]);
	free(state), free(sample);
	json_decref(spec);
	if (error == FERRY_EDB)
		return error; /* the database: the engine retries the step */
	res->final = 1;
	res->reason = xstrdup(ferry_error_last());
	return 1;
}

const struct step_kind kind_deploy = {
	.name = "deploy", .flags = SKF_DAEMON | SKF_SERVICE | SKF_INPUTS,
	.command = SKC_FORBIDDEN, .no_command = "starts model servers (serve:) and runs no command",
	.keys = SK_BIT(SK_MODEL) | SK_BIT(SK_SERVE) | SK_BIT(SK_TRAFFIC) | SK_BIT(SK_REPLICAS) |
		SK_BIT(SK_SAMPLE) | SK_BIT(SK_DEPLOYMENT) | SK_BIT(SK_AUTO_STOP),
	.required = SK_BIT(SK_MODEL) | SK_BIT(SK_SERVE),
	.key_hint = {[SK_MODEL] = "the model whose registered version to deploy",
		     [SK_SERVE] = "the model server's command"},
	.prepare = deploy_prepare,
};

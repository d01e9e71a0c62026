/*
 * runs — the runs service (runs.h). A run is made in three moves, in this
 * order: its id is taken from the runs sequence (so the plan can render
 * {{run.id}}), the planner makes it (run_plan_make, without SQL), and the
 * store writes the plan in one transaction (store_run_write). The
 * Idempotency-Key is looked up here before anything is planned, and again
 * by the store at commit. Nothing here speaks SQL.
 */
#include "runs/runs.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "store/store.h"
#include "lib/util.h"

/* Whether plan's step i will run here (not left out of a dev subset, not reused). */
static int step_runs(const struct run_plan *plan, size_t i)
{
	return plan->steps[i].state != STEP_SKIPPED && plan->steps[i].state != STEP_SUCCEEDED;
}

/* Adds "FILE:LINE:COL: step "NAME": MESSAGE" to errs, at step name's place in the workflow. */
static void step_error(cfg_errors *errs, const struct run_plan *plan, const char *filename, const char *name,
		       const char *fmt, ...) FERRY_PRINTF(5, 6);
static void step_error(cfg_errors *errs, const struct run_plan *plan, const char *filename, const char *name,
		       const char *fmt, ...)
{
	json_t *st, *at = NULL;
	char *msg = NULL;
	va_list ap;
	size_t i;

	json_array_foreach(json_object_get(plan->spec, "steps"), i, st)
		if (strcmp(json_string_value(json_object_get(st, "name")), name) == 0)
			at = st;
	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		abort();
	va_end(ap);
	cfg_errors_add(errs, xasprintf("%s:%lld:%lld: step \"%s\": %s", filename ? filename : "<inline>",
				       (long long)json_integer_value(json_object_get(at, "line")),
				       (long long)json_integer_value(json_object_get(at, "col")), name, msg));
	free(msg);
}

/*
 * Every secret the steps that will run name must be set: one that is not
 * is an error at its step (FILE:LINE:COL), as a YAML error is, and the run
 * is not made. Names only: no value is read here.
 */
static int check_secrets(PGconn *conn, const struct run_plan *plan, const char *filename, cfg_errors *errs)
{
	json_t *names = json_array(), *missing = NULL, *v, *x;
	size_t i, k, m, n = 0;
	int error;

	for (i = 0; i < plan->nsteps; i++)
		if (step_runs(plan, i))
			json_array_extend(names, json_object_get(plan->steps[i].spec, "secrets"));
	if (json_array_size(names) == 0) {
		json_decref(names);
		return FERRY_OK;
	}
	error = store_secrets_missing(&missing, conn, names);
	json_decref(names);
	if (error < 0 || json_array_size(missing) == 0)
		goto out;
	for (i = 0; i < plan->nsteps; i++) {
		if (!step_runs(plan, i))
			continue;
		json_array_foreach(json_object_get(plan->steps[i].spec, "secrets"), k, v)
			json_array_foreach(missing, m, x)
				if (json_equal(x, v)) {
					step_error(errs, plan, filename, plan->steps[i].name, "secret %s is not set; an admin "
						   "sets it with `ferry secrets set %s`", json_string_value(v),
						   json_string_value(v));
					n++;
				}
	}
	ferry_error_set("%zu secret%s not set", n, n == 1 ? "" : "s");
	error = FERRY_EINVALID;
out:
	json_decref(missing);
	return error;
}

/* "3 GPUs, 2 CPUs, 512 MiB, license 1": what a request or a host's capacity counts (the parts not 0). */
static char *room_text(double gpus, double cpus, double mem_mb, const json_t *named)
{
	char *t = xstrdup(""), *n;
	const char *k;
	json_t *v;

	if (gpus > 0 || (cpus <= 0 && mem_mb <= 0 && json_object_size(named) == 0)) {
		n = xasprintf("%g GPU%s", gpus, gpus == 1 ? "" : "s");
		free(t);
		t = n;
	}
	if (cpus > 0) {
		n = xasprintf("%s%s%g CPU%s", t, *t ? ", " : "", cpus, cpus == 1 ? "" : "s");
		free(t);
		t = n;
	}
	if (mem_mb > 0) {
		n = xasprintf("%s%s%.0f MiB", t, *t ? ", " : "", mem_mb);
		free(t);
		t = n;
	}
	json_object_foreach((json_t *)named, k, v) {
		n = xasprintf("%s%s%s %lld", t, *t ? ", " : "", k, (long long)json_integer_value(v));
		free(t);
		t = n;
	}
	return t;
}

/*
 * Every step that will run waits in a queue that exists, and asks for no
 * more than its queue's quotas allow at once and than some host of the
 * fleet that is up offers (issue 30: refused at submit with the numbers,
 * not after hours in the queue). The hosts are not asked when none is up
 * that admits by its room (no daemon yet, or a Slurm one: Slurm admits),
 * nor for a step that runs on Slurm or for a dev run (its own engine).
 */
static int check_admission(PGconn *conn, const struct run_plan *plan, const char *filename, cfg_errors *errs,
			   int dev)
{
	json_t *hosts = NULL, *queues = NULL, *cap;
	const char *hn;
	int error, bounded = 0, unbounded = 0;
	size_t n = 0;

	if ((error = store_admission_facts(&hosts, &queues, conn)) < 0)
		return error;
	json_object_foreach(hosts, hn, cap) {
		if (json_is_false(json_object_get(cap, "admits")))
			unbounded = 1;
		else
			bounded = 1;
	}
	for (size_t i = 0; i < plan->nsteps; i++) {
		const json_t *spec = plan->steps[i].spec, *res = json_object_get(spec, "resources");
		const char *qn = json_string_value(json_object_get(spec, "queue"));
		const json_t *q;
		double gpus = (double)json_integer_value(json_object_get(res, "gpus"));
		double cpus = json_number_value(json_object_get(res, "cpus"));
		double mem = (double)json_integer_value(json_object_get(res, "memory_mb"));
		const json_t *named = json_object_get(res, "named"); /* {NAME: count} of the hosts' FERRY_RESOURCES */
		if (!step_runs(plan, i))
			continue;
		if (qn == NULL)
			qn = "default";
		if ((q = json_object_get(queues, qn)) == NULL) {
			char *known = NULL;
			const char *k;
			json_t *x;
			json_object_foreach(queues, k, x) {
				char *m = xasprintf("%s%s%s", known ? known : "", known ? ", " : "", k);
				free(known);
				known = m;
			}
			step_error(errs, plan, filename, plan->steps[i].name, "queue %s does not exist (queues: %s); "
				   "an admin creates it with `ferry queues create %s`", qn, known ? known : "none", qn);
			free(known);
			n++;
			continue;
		}
		if (json_is_false(json_object_get(res, "admit")))
			continue; /* its executor's scheduler admits it (Slurm): keys_job.c */
		if (json_is_integer(json_object_get(q, "max_gpus")) && gpus > (double)json_integer_value(json_object_get(q, "max_gpus"))) {
			step_error(errs, plan, filename, plan->steps[i].name, "resources ask for %g GPU%s; queue %s "
				   "allows at most %lld at once (max_gpus), so it could never start", gpus, gpus == 1 ? "" : "s",
				   qn, (long long)json_integer_value(json_object_get(q, "max_gpus")));
			n++;
			continue;
		}
		if (json_is_number(json_object_get(q, "max_cpus")) && cpus > json_number_value(json_object_get(q, "max_cpus"))) {
			step_error(errs, plan, filename, plan->steps[i].name, "resources ask for %g CPUs; queue %s "
				   "allows at most %g at once (max_cpus), so it could never start", cpus, qn,
				   json_number_value(json_object_get(q, "max_cpus")));
			n++;
			continue;
		}
		if (dev || !bounded || unbounded || (gpus <= 0 && cpus <= 0 && mem <= 0 && json_object_size(named) == 0))
			continue;
		{
			int fits = 0, shown = 0;
			char *list = NULL, *want = room_text(gpus, cpus, mem, named);
			json_object_foreach(hosts, hn, cap) {
				double hg = (double)json_array_size(json_object_get(cap, "gpus"));
				double hc = json_number_value(json_object_get(cap, "cpus"));
				double hm = (double)json_integer_value(json_object_get(cap, "memory_bytes")) / 1048576.0;
				const json_t *hr = json_object_get(cap, "resources");
				int named_fit = 1;
				const char *k;
				json_t *v;
				json_object_foreach((json_t *)named, k, v)
					if (json_integer_value(json_object_get(hr, k)) < json_integer_value(v))
						named_fit = 0;
				if (hg >= gpus && hc + 1e-6 >= cpus && (mem <= 0 || hm <= 0 || hm >= mem) && named_fit)
					fits = 1;
				if (shown++ < 5) {
					char *has = room_text(hg, hc, hm, hr), *m;
					m = xasprintf("%s%s%s has %s", list ? list : "", list ? "; " : "", hn, has);
					free(list), free(has);
					list = m;
				}
			}
			if (!fits) {
				step_error(errs, plan, filename, plan->steps[i].name, "resources ask for %s and no host of "
					   "the fleet that is up can ever give that (%s%s)", want, list ? list : "",
					   shown > 5 ? "; …" : "");
				n++;
			}
			free(list), free(want);
		}
	}
	json_decref(hosts), json_decref(queues);
	if (n == 0)
		return FERRY_OK;
	ferry_error_set("%zu step%s cannot be admitted", n, n == 1 ? "" : "s");
	return FERRY_EINVALID;
}

/*
 * An alias that follows a deployment's traffic (store_alias_bound:
 * "production" while a deployment serves the model) is not a step's to
 * set: a step that would (its "model" and "aliases") is an error at its
 * line naming the deployment, and the run is not made.
 */
static int check_bound_aliases(PGconn *conn, const struct run_plan *plan, const char *filename, cfg_errors *errs)
{
	size_t n = 0;
	int error = FERRY_OK;

	for (size_t i = 0; i < plan->nsteps && error == FERRY_OK; i++) {
		const json_t *spec = plan->steps[i].spec, *v;
		const char *model = json_string_value(json_object_get(spec, "model"));
		size_t k;
		if (model == NULL || !step_runs(plan, i))
			continue;
		json_array_foreach(json_object_get(spec, "aliases"), k, v) {
			char *dep = NULL;
			if ((error = store_alias_bound(&dep, conn, model, json_string_value(v))) < 0)
				break;
			if (dep == NULL) /* this one is free; the next may not be */
				continue;
			step_error(errs, plan, filename, plan->steps[i].name, "alias %s of model %s follows the traffic of "
				   "deployment %s (it names the version that serves); register with another alias, "
				   "such as candidate", json_string_value(v), model, dep);
			n++;
			free(dep);
		}
	}
	if (error == FERRY_OK && n > 0) {
		ferry_error_set("%zu alias%s bound to a deployment", n, n == 1 ? "" : "es");
		error = FERRY_EINVALID;
	}
	return error;
}

/*
 * What every job of a run from a git commit (a git trigger, or a run
 * submitted by repo and ref) is told: FERRY_GIT_COMMIT, FERRY_GIT_REPO and
 * FERRY_GIT_REF (the trigger's branch or the ref asked for), and git's
 * safe.directory for the checkout (the run's working directory: a work tree
 * of that commit, gitsrc.c); NULL for other runs.
 */
static json_t *run_git_env(const json_t *origin, const char *workdir)
{
	const json_t *g = json_object_get(origin, "git");
	const char *ref;
	json_t *env;

	if (!json_is_object(g) || !json_string_value(json_object_get(g, "commit")))
		return NULL;
	env = json_pack("{s:O}", "FERRY_GIT_COMMIT", json_object_get(g, "commit"));
	if (json_string_value(json_object_get(g, "repo")))
		json_object_set(env, "FERRY_GIT_REPO", json_object_get(g, "repo"));
	ref = json_string_value(json_object_get(g, "branch")) ? json_string_value(json_object_get(g, "branch"))
							      : json_string_value(json_object_get(g, "ref"));
	if (ref)
		json_object_set_new(env, "FERRY_GIT_REF", json_string(ref));
	/* the checkout is the daemon's, the job another user's: git trusts it only when told (a
	 * command-scope setting, as `git -c safe.directory=DIR` would be) */
	if (workdir)
		json_object_set_new(env, "GIT_CONFIG_COUNT", json_string("1")),
		json_object_set_new(env, "GIT_CONFIG_KEY_0", json_string("safe.directory")),
		json_object_set_new(env, "GIT_CONFIG_VALUE_0", json_string(workdir));
	return env;
}

int runs_create(int64_t *out_id, PGconn *conn, const struct runs_new *rn, cfg_errors *errs)
{
	struct store_run_row row;
	struct run_plan_in in;
	struct run_plan *plan = NULL;
	json_t *spec = NULL, *git_env = NULL;
	char *hash = NULL, *yaml = NULL, *reg_workdir = NULL;
	const char *workdir = rn->workdir;
	int64_t id = 0;
	int error;

	*out_id = 0;
	if (rn->idem_key && (error = store_run_idem_lookup(out_id, conn, rn->idem_key, rn->idem_hash)) != 0)
		goto out; /* 1: the run made with this key; or a conflict */
	if (rn->yaml == NULL &&
	    (error = store_workflow_latest(&spec, &hash, &yaml, &reg_workdir, conn, rn->workflow)) < 0)
		goto out;
	/* a run by name runs where the workflow was registered from, unless told otherwise */
	if (workdir == NULL)
		workdir = reg_workdir;
	if ((error = store_run_id_reserve(&id, conn)) < 0)
		goto out;
	memset(&in, 0, sizeof(in));
	in.yaml = rn->yaml;
	in.yaml_len = rn->yaml_len;
	in.filename = rn->filename;
	in.spec = spec;
	in.hash = hash;
	in.spec_yaml = yaml;
	in.params = rn->params;
	in.offered = rn->offered;
	in.only = rn->only;
	in.from = rn->from;
	in.to = rn->to;
	in.run_id = id;
	in.env = git_env = run_git_env(rn->origin, rn->workdir);
	if ((error = run_plan_make(&plan, &in, errs)) < 0)
		goto out;
	if (rn->no_retries)
		for (size_t i = 0; i < plan->nsteps; i++) {
			if (plan->steps[i].retry_limit > 0 && rn->retries_dropped)
				(*rn->retries_dropped)++;
			plan->steps[i].retry_limit = 0;
		}
	if ((error = run_plan_check_files(plan, workdir)) < 0) {
		if (rn->bad_field)
			*rn->bad_field = "workdir";
		goto out;
	}
	if ((error = check_secrets(conn, plan, rn->filename ? rn->filename : rn->workflow, errs)) < 0 ||
	    (error = check_admission(conn, plan, rn->filename ? rn->filename : rn->workflow, errs,
				     rn->trigger != NULL && strcmp(rn->trigger, "dev") == 0)) < 0 ||
	    /* a dev run moves no alias (db/functions/registry.sql): nothing to refuse */
	    ((rn->trigger == NULL || strcmp(rn->trigger, "dev") != 0) &&
	     (error = check_bound_aliases(conn, plan, rn->filename ? rn->filename : rn->workflow, errs)) < 0))
		goto out;

	memset(&row, 0, sizeof(row));
	row.trigger = rn->trigger;
	row.actor = rn->actor;
	row.workdir = workdir;
	row.filename = rn->filename;
	row.new_workflow = rn->yaml != NULL;
	row.idem_key = rn->idem_key;
	row.idem_hash = rn->idem_hash;
	row.no_cache = rn->no_cache;
	row.reuse_run = rn->reuse_run;
	row.reuse_anyway = rn->reuse_anyway;
	row.dev_lease_ms = rn->dev_lease_ms;
	row.origin = rn->origin;
	row.schedule_id = rn->schedule_id;
	row.trigger_id = rn->trigger_id;
	row.occasion = rn->occasion;
	row.occasion_arg = rn->occasion_arg;
	row.in_tx = rn->in_tx;
	error = store_run_write(out_id, rn->reused_from, conn, plan, &row);
out:
	if (error < 0)
		*out_id = 0;
	run_plan_free(plan);
	json_decref(spec), json_decref(git_env);
	free(hash), free(yaml), free(reg_workdir);
	return error;
}

int runs_retry(PGconn *conn, int64_t id, const char *from, const char *actor, int no_cache, const json_t *params)
{
	struct run_plan_in in;
	struct run_plan *plan = NULL;
	json_t *spec = NULL, *old = NULL, *origin = NULL, *given = NULL, *env = NULL, *specs = NULL, *v;
	char *hash = NULL, *yaml = NULL, *workdir = NULL;
	const char *key;
	cfg_errors errs = {0};
	int error;

	if (params == NULL)
		return store_run_retry(conn, id, from, actor, no_cache);
	if (!json_is_object(params) || json_object_size(params) == 0) {
		ferry_error_set("params must be an object of name: value, at least one");
		return FERRY_EINVALID;
	}
	if ((error = store_run_plan_source(conn, id, &spec, &hash, &yaml, &old, &origin, &workdir)) < 0)
		goto out;
	/* the run's params, the given ones over them, resolved (typed, checked) as at submit */
	given = json_deep_copy(old);
	json_object_foreach((json_t *)params, key, v)
		json_object_set(given, key, v);
	memset(&in, 0, sizeof(in));
	in.spec = spec;
	in.hash = hash;
	in.spec_yaml = yaml;
	in.params = given;
	in.run_id = id;
	in.env = env = run_git_env(origin, workdir);
	if ((error = run_plan_make(&plan, &in, &errs)) < 0)
		goto out;
	specs = json_object();
	for (size_t i = 0; i < plan->nsteps; i++)
		json_object_set(specs, plan->steps[i].name, plan->steps[i].spec);
	error = store_run_retry_params(conn, id, from, actor, no_cache, plan->params, specs);
out:
	run_plan_free(plan);
	cfg_errors_dispose(&errs);
	json_decref(spec), json_decref(old), json_decref(origin), json_decref(given), json_decref(env);
	json_decref(specs);
	free(hash), free(yaml), free(workdir);
	return error;
}

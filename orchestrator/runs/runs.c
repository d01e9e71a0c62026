/*
 * runs — the runs service (runs.h). A run is made in three moves, in this
 * order: its id is taken from the runs sequence (so the plan can render
 * {{run.id}}), the planner makes it (run_plan_make, without SQL), and the
 * store writes the plan in one transaction (store_run_write). The
 * Idempotency-Key is looked up here before anything is planned, and again
 * by the store at commit. Nothing here speaks SQL.
 */
#include "runs/runs.h"

#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "store/store.h"
#include "lib/util.h"

int runs_create(int64_t *out_id, PGconn *conn, const struct runs_new *rn, cfg_errors *errs)
{
	struct store_run_row row;
	struct run_plan_in in;
	struct run_plan *plan = NULL;
	json_t *spec = NULL;
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
	if ((error = run_plan_make(&plan, &in, errs)) < 0)
		goto out;
	if ((error = run_plan_check_files(plan, workdir)) < 0) {
		if (rn->bad_field)
			*rn->bad_field = "workdir";
		goto out;
	}

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
	json_decref(spec);
	free(hash), free(yaml), free(reg_workdir);
	return error;
}

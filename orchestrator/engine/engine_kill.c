/*
 * engine_kill — stopping the engine's jobs: one job's kill (SIGTERM, then
 * SIGKILL after FERRY_KILL_GRACE_MS; the outcome its attempt ends with),
 * the steps' timeouts and the kills they escalate to, and the stops a run's
 * stop asks for through the database.
 * The engine's loop calls them each tick (engine.c); see engine_priv.h.
 */
#include "engine/engine_priv.h"

#include <signal.h>
#include <stdlib.h>

#include "exec/exec.h"
#include "store/store.h"
#include "lib/util.h"

void engine_kill_job(struct engine *e, struct exec_job *j, enum attempt_outcome outcome, char *reason)
{
	if (j->killing) {
		free(reason);
		return;
	}
	flog_info("run %lld step %s attempt %d: %s, sending SIGTERM", (long long)j->run_id,
		  j->name, j->attempt, reason);
	j->killing = 1;
	j->kill_outcome = outcome;
	j->kill_reason = reason;
	j->kill_at_ms = clock_mono_ms() + e->o.kill_grace_ms;
	exec_signal(j, SIGTERM);
}

void engine_check_timeouts(struct engine *e, int64_t now)
{
	for (int i = 0; i < e->njobs; i++) {
		struct exec_job *j = e->jobs[i];
		if (!j->killing && j->deadline_ms && now >= j->deadline_ms) {
			engine_kill_job(e, j, OUTCOME_FAILED, xasprintf("timed out after %lld ms (timeout)",
							   (long long)j->timeout_ms));
		} else if (j->killing && !j->killed_hard && now >= j->kill_at_ms) {
			flog_warn("run %lld step %s attempt %d: still running %lld ms after SIGTERM, sending SIGKILL",
				  (long long)j->run_id, j->name, j->attempt, (long long)e->o.kill_grace_ms);
			exec_signal(j, SIGKILL);
			j->killed_hard = 1;
		}
	}
}

void engine_stop_jobs(struct engine *e)
{
	int64_t *steps = NULL;
	int *atts = NULL, n = 0;
	char **why = NULL;

	if (store_stopping(&steps, &atts, &why, &n, e->conn, e->owner) < 0) {
		flog_error("looking for stopped runs: %s", ferry_error_last());
		return;
	}
	e->stop_check = 0;
	for (int k = 0; k < n; k++) {
		for (int i = 0; i < e->njobs; i++) {
			struct exec_job *j = e->jobs[i];
			if (j->step_id == steps[k] && j->attempt == atts[k])
				engine_kill_job(e, j, OUTCOME_STOPPED, xstrdup(why[k] ? why[k] : "run stopped"));
		}
		free(why[k]);
	}
	free(steps);
	free(atts);
	free(why);
}

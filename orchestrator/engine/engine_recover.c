/*
 * engine_recover — the engine's recovery of orphaned attempts (the recover
 * and reap periodic tasks): running attempts whose owner is gone or whose
 * lease expired. Those of this host are taken over and their executor type
 * is asked what became of the job (adopt: still running, ended meanwhile,
 * or gone); those of other hosts whose lease expired are lost and retried,
 * since their jobs cannot be reached from here.
 */
#include "engine/engine_priv.h"

#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "exec/proc.h"
#include "store/store.h"
#include "lib/util.h"

/* Whether another daemon on this host, named by owner "host/pid/start", lives. */
static int owner_alive(const struct engine *e, const char *owner)
{
	const char *a = strchr(owner, '/'), *b;
	int64_t pid, start;
	char *tmp;
	int alive;

	if (a == NULL || (size_t)(a - owner) != strlen(e->host) || strncmp(owner, e->host, strlen(e->host)) != 0)
		return 1; /* another host: trust its lease */
	b = strchr(a + 1, '/');
	if (b == NULL)
		return 0;
	tmp = xstrndup(a + 1, (size_t)(b - a - 1));
	alive = parse_int64(tmp, &pid) == 0 && parse_int64(b + 1, &start) == 0 &&
		exec_pid_alive((pid_t)pid, start);
	free(tmp);
	return alive;
}

/* Adds the job of orphan o, found running by its executor, to ours. */
static void adopted(struct engine *e, const struct store_orphan *o, struct exec_job *j)
{
	flog_info("run %lld step %s attempt %d: re-adopted %s job %sfrom %s", (long long)o->run_id,
		  o->name, o->attempt, j->type->name, o->handle ? "" : "(found in its directory) ", o->owner);
	j->timeout_ms = o->timeout_ms;
	j->ctx = engine_job_ctx(o->kind, o->spec, o->workdir, NULL, NULL, NULL);
	if (o->timeout_ms > 0)
		j->deadline_ms = clock_mono_ms() + (o->started_ms + o->timeout_ms - clock_wall_ms());
	if (o->handle == NULL)
		/* never recorded (its daemon died right after the fork): record it now */
		engine_push_record(e, j->step_id, j->attempt, j->type->name,
			    j->handle ? json_dumps(j->handle, JSON_COMPACT) : NULL, xstrdup(j->dir));
	e->njobs++;
}

/* Takes orphan o over and asks its executor what became of its job. */
static void adopt_orphan(struct engine *e, struct store_orphan *o)
{
	/* no executor recorded (its daemon died before the record): the step's own, as start_job chose */
	const struct exec_type *t = o->executor ? exec_type_find(o->executor) : exec_type_for(o->spec, e->type);
	struct exec_status st = {.exit_code = -1};
	struct exec_job *j;
	int rc = FERRY_ENOTFOUND;

	if (store_adopt(e->conn, e->owner, o, e->o.lease_ms) <= 0)
		return;
	j = engine_new_job(e, t);
	if (t != NULL && t->adopt != NULL) {
		j->type = t;
		j->step_id = o->step_id;
		j->run_id = o->run_id;
		j->attempt = o->attempt;
		j->name = xstrdup(o->name);
		/* the directory is deterministic: found even when its daemon died before recording it */
		j->dir = o->dir ? xstrdup(o->dir) : exec_attempt_dir(e->home, o->run_id, o->name, o->attempt);
		j->handle = json_incref(o->handle);
		rc = t->adopt(j, &st);
	}
	if (rc == 1) {
		adopted(e, o, j);
	} else if (rc == 0) {
		flog_info("run %lld step %s attempt %d finished while its owner %s was gone%s",
			  (long long)o->run_id, o->name, o->attempt, o->owner,
			  o->handle == NULL && j->handle ? " (found in its directory)" : "");
		if (o->handle == NULL && j->handle)
			/* never recorded (its daemon died right after the start): kept, as for a job adopted running */
			engine_push_record(e, o->step_id, o->attempt, t->name, json_dumps(j->handle, JSON_COMPACT),
					   xstrdup(j->dir));
		if (st.signal || st.exit_code) {
			/* the executor's own explanation first (out of memory), as for a job we watched end */
			engine_push_done(e, o->step_id, o->attempt, OUTCOME_FAILED, st.exit_code, st.signal,
				  st.reason ? xstrdup(st.reason)
				  : st.signal ? xasprintf("killed by signal %d", st.signal)
					      : exec_exit_reason(j, st.exit_code));
		} else {
			json_t *ctx = engine_job_ctx(o->kind, o->spec, o->workdir, NULL, NULL, NULL);
			engine_job_succeeded(e, o->step_id, o->run_id, o->attempt, o->name, j->dir, ctx);
			json_decref(ctx);
		}
		exec_job_free(j);
	} else if (rc == FERRY_EXEC_EAGAIN) {
		/* it may still run: asked again at the next round, never retried on a guess */
		flog_warn("run %lld step %s attempt %d: its %s could not be asked (%s); asking again at the next "
			  "recovery round", (long long)o->run_id, o->name, o->attempt, t->name, ferry_error_last());
		if (store_unadopt(e->conn, e->owner, o, e->o.lease_ms) < 0)
			flog_error("giving attempt %d of run %lld step %s back: %s", o->attempt, (long long)o->run_id,
				   o->name, ferry_error_last());
		exec_job_free(j);
	} else {
		flog_warn("run %lld step %s attempt %d lost with its owner %s: %s", (long long)o->run_id,
			  o->name, o->attempt, o->owner, t ? ferry_error_last() : "unknown executor");
		engine_push_done(e, o->step_id, o->attempt, OUTCOME_LOST, -1, 0,
			  xasprintf("lost: its daemon %s went away (daemon restarted)", o->owner));
		exec_job_free(j);
	}
	exec_status_dispose(&st);
}

/*
 * Orphans: running attempts whose owner is gone or whose lease expired.
 * mine: those of this host (every replica adopts its own host's jobs); else
 * those of other hosts whose lease expired (the leader's reaper: their jobs
 * cannot be reached from here, so they are lost and retried).
 */
void engine_orphans(struct engine *e, int mine)
{
	struct store_orphan *o = NULL;
	int n = 0;

	if (store_orphans(&o, &n, e->conn, e->owner, e->host) < 0) {
		flog_error("looking for orphaned attempts: %s", ferry_error_last());
		return;
	}
	for (int i = 0; i < n; i++) {
		int here = strcmp(o[i].host, e->host) == 0;
		if (e->o.run_filter && o[i].run_id != e->o.run_filter)
			continue;
		if (here != mine || (!o[i].expired && owner_alive(e, o[i].owner)))
			continue;
		if (here) {
			adopt_orphan(e, &o[i]);
		} else if (store_adopt(e->conn, e->owner, &o[i], e->o.lease_ms) > 0) {
			flog_warn("run %lld step %s attempt %d lost with its owner %s on %s",
				  (long long)o[i].run_id, o[i].name, o[i].attempt, o[i].owner, o[i].host);
			engine_push_done(e, o[i].step_id, o[i].attempt, OUTCOME_LOST, -1, 0,
				  xasprintf("lost: its daemon %s went away (lease expired)", o[i].owner));
		}
	}
	store_orphans_free(o, n);
	e->stop_check = 1;
}


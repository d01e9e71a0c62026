/*
 * dirs_ahead — a run's step directories made ahead of its steps, on the
 * worker pool.
 *
 * A job's attempt directory, its out/ and its step's checkpoint/ are made
 * when the step is claimed (exec_attempt_dirs), and its log and status
 * when its shim starts, between the end of the step before it and its own
 * start. On the ext4 of these machines making an inode (a directory, or a
 * file's first open) costs ~0.27 ms: the four directories were ~1 ms of
 * each hop of a chain (the 40-step chain of bench_dispatch, 7 pairs in one
 * sitting: a median of 163 ms with them on the hop, 137 ms with them made
 * here), the two files another ~0.4 ms (4 pairs: 131–139 ms, 113–123 ms
 * with them made here too; 95 ms with the jobs' directories on tmpfs). So
 * the first time this daemon claims a step of a run, one pool item makes
 * the directories of attempt 1 of the run's steps not claimed yet (the
 * first AHEAD_STEPS, in the order they were written), exactly as
 * exec_attempt_dirs does (the same call: owner, modes, no link followed),
 * and their empty log and status, the job user's like the directory (a
 * job could replace either there anyway; its writers — the shim as root,
 * a warm server or a Slurm script as the job user — append or truncate,
 * and their readers take an empty status for none). Each step's own
 * claim then finds them there (EEXIST, a lookup; O_EXCL leaves a file
 * its writer made first as it is).
 *
 * Nothing depends on it: a directory not made yet (the item still
 * running, a step past AHEAD_STEPS, a retry's attempt 2, a fan-out's
 * items) is made at the claim as before, and two makers of one directory
 * agree (mkdir_p takes EEXIST, the hand-over is idempotent). What it
 * costs: a step that never runs here (skipped, its run stopped or failed
 * first) leaves its empty directories, removed with the run's
 * (retention.c). In a fleet (a daemon of another host live) none are
 * made ahead: any host may claim the run's next step, and every host
 * that had claimed one of its steps made them all, left empty where
 * the steps ran elsewhere. Once per run per daemon (the last
 * AHEAD_RUNS runs remembered); none for an executor without directories
 * (noop) or without a worker pool (FERRY_WORKERS=0: never on the loop).
 */
#include "engine/engine_priv.h"

#include <stdio.h>
#include <stdlib.h>

#include "exec/exec.h"
#include "store/store.h"
#include "lib/util.h"

#define AHEAD_STEPS 256 /* directories of at most this many steps a run (4 inodes each) */

struct ahead_work {
	struct work w;
	char *home;
	int64_t run_id;
};

/* On a worker thread: the directories of the run's steps not claimed yet. */
static void ahead_run(struct work *w, PGconn *conn)
{
	struct ahead_work *a = (struct ahead_work *)w;
	char **names = NULL, me[256];
	int n = 0;

	if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
		return; /* an optimisation: not waited for */
	ferry_host_name(me, sizeof(me));
	if (store_run_steps_unstarted(&names, &n, conn, a->run_id, me, AHEAD_STEPS) < 0) {
		flog_debug("run %lld: its steps' directories are made at their claims: %s", (long long)a->run_id,
			   ferry_error_last());
		return;
	}
	for (int i = 0; i < n; i++) {
		struct exec_spec s = {.run_id = a->run_id, .attempt = 1, .name = names[i], .home = a->home};
		char *dir = NULL, *out = NULL, *ckpt = NULL;
		if (exec_attempt_dirs(&s, &dir, &out, &ckpt) < 0) {
			flog_debug("run %lld step %s: %s", (long long)a->run_id, names[i], ferry_error_last());
		} else {
			/* its log and status: the job user's, as the directory (it could replace either there) */
			char *log = xasprintf("%s/log", dir), *status = xasprintf("%s/status", dir);
			if (exec_user_give_new_file(log) < 0 || exec_user_give_new_file(status) < 0)
				flog_debug("run %lld step %s: %s", (long long)a->run_id, names[i], ferry_error_last());
			free(log), free(status);
		}
		free(dir), free(out), free(ckpt);
		free(names[i]);
	}
	free(names);
}

static void ahead_free(struct ahead_work *a)
{
	free(a->home);
	free(a);
}

/* Back on the loop. */
static void ahead_done(struct work *w, void *ctx)
{
	struct engine *e = ctx;

	e->ahead_out--;
	ahead_free((struct ahead_work *)w);
}

void engine_dirs_ahead(struct engine *e, const struct store_claim *c, int n)
{
	if (e->workers == NULL || (e->type->flags & EXF_NO_DIR))
		return;
	for (int i = 0; i < n; i++) {
		struct ahead_work *a;
		int seen = 0;
		if (c[i].attempt != 1)
			continue;
		for (int k = 0; k < AHEAD_RUNS && !seen; k++)
			seen = e->ahead_runs[k] == c[i].run_id;
		if (seen)
			continue;
		e->ahead_runs[e->ahead_next] = c[i].run_id;
		e->ahead_next = (e->ahead_next + 1) % AHEAD_RUNS;
		a = xcalloc(1, sizeof(*a));
		a->w.run = ahead_run;
		a->w.done = ahead_done;
		snprintf(a->w.lane, sizeof(a->w.lane), "dirs-ahead"); /* one at a time: a worker stays free */
		a->home = xstrdup(e->home);
		a->run_id = c[i].run_id;
		workers_submit(e->workers, &a->w);
		e->ahead_out++;
	}
}

int engine_dirs_ahead_drop(struct work *w)
{
	if (w->done != ahead_done)
		return 0;
	ahead_free((struct ahead_work *)w);
	return 1;
}

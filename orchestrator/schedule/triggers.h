/*
 * triggers — data and git triggers of registered workflows (schedules.md):
 * a run when files in a watched directory are added, changed or removed
 * (after a quiet period, coalesced while a triggered run is going), and a
 * run for each new commit on a watched branch (found by polling, or at once
 * by POST /hooks/git). Each occasion is a trigger_fires row under a unique
 * key written in the transaction that creates its run, and the trigger's
 * state (what its last run covered) moves in that transaction too, only
 * from where the round read it: one change, one run, whichever leader.
 */
#ifndef FERRY_TRIGGERS_H
#define FERRY_TRIGGERS_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

#include "plan/config.h"

/* How often the leader looks at a watched directory. */
#define TRIGGERS_DATA_EVERY_MS 1000
/* … and at a watched branch (FERRY_GIT_POLL_MS overrides it). */
#define TRIGGERS_GIT_EVERY_MS 30000

/*
 * One round over the triggers (the leader, on the pool, after the
 * schedules' round): those due looked at, runs started. home is
 * FERRY_HOME (git mirrors and checkouts live under it). Returns the runs
 * started or a negative error.
 */
int triggers_round(PGconn *conn, const char *home, int64_t budget_ms);

/*
 * POST /hooks/git: a push of commit `after` to ref (refs/heads/BRANCH) of
 * a repository named by urls (the payload's clone_url, url, ssh_url…; a
 * local path in tests). Each git trigger watching that repository and
 * branch is looked at now (via "webhook"). *out: {"started":[{trigger,
 * run}],"duplicates":[…],"skipped":[{trigger,reason}],"matched":N}.
 */
int triggers_git_push(json_t **out, PGconn *conn, const char *home, const json_t *urls, const char *ref,
		      const char *after);

/*
 * A run of the workflow at path in repository repo at ref (ferry submit
 * --repo): the commit pinned, its tree checked out under home, the run
 * made from that file in that tree. The rn fields are the caller's
 * (params, actor, trigger); *run the new id. The origin records the
 * commit.
 */
struct runs_new;
int triggers_submit_from_git(int64_t *run, PGconn *conn, const char *home, const char *repo, const char *ref,
			     const char *path, struct runs_new *rn, cfg_errors *errs);

#endif

/*
 * plan — what a new run is, decided before anything is stored. From a
 * workflow (YAML text, or a registered version already parsed), the given
 * params, an optional dev subset and the run's id, run_plan_make() parses
 * and validates, resolves the params, renders the templates it can
 * ({{params.X}}, {{run.id}}) and decides each step's initial state, so a
 * run is the same whoever creates it (the API, the CLI, dev mode, schedules,
 * triggers). It touches no database and no file: runs_create (runs/)
 * calls it and the store writes the plan it is given (store_run_write),
 * and unit tests exercise it alone. The one look at files,
 * run_plan_check_files(), is separate and comes after.
 *
 * A step with when: is claimed to have its condition evaluated, even one
 * of a kind that waits for a person (which then waits once it holds): its
 * waits is 0. Steps under finally: start blocked on the run's other steps.
 *
 * Kinds are looked up in the step-kind table (kind.h) and only their flags
 * are consulted: SKF_WAITS (enters waiting, never claimed), SKF_STAGES
 * (stages data for the steps below), SKF_INPUTS (needs its ancestors at
 * claim time).
 */
#ifndef FERRY_PLAN_H
#define FERRY_PLAN_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "plan/config.h"
#include "plan/kind.h"
#include "lib/states.h"

/* What to plan; nothing here is taken over. */
struct run_plan_in {
	/* The workflow: its YAML text, parsed and validated here … */
	const char *yaml;
	size_t yaml_len;
	const char *filename;   /* for messages; "<inline>" when NULL */
	/* … or, with yaml NULL, a registered version: its normalised spec
	 * (cfg_workflow_parse), content hash and YAML text. */
	const json_t *spec;
	const char *hash, *spec_yaml;
	const json_t *params;   /* the given values, an object, or NULL for none */
	/* Values a schedule or trigger offers (scheduled_time, data_added,
	 * git_commit, …): each is the value of a parameter of that name when
	 * the workflow declares one and params does not give it; the others
	 * are left out. An object or NULL. */
	const json_t *offered;
	const char *only, *from, *to; /* dev subset: at most one, NULL for the whole run */
	int64_t run_id;         /* rendered into {{run.id}} */
	/* Variables every job of the run gets under the step's own env (a git
	 * run's FERRY_GIT_COMMIT, FERRY_GIT_REPO, FERRY_GIT_REF), or NULL. */
	const json_t *env;
};

/* One step of the plan, as its steps row will hold it. */
struct plan_step {
	char *name;
	int idx;                      /* position in the workflow */
	const struct step_kind *kind; /* a row of the kind table (static) */
	enum step_state state;        /* STEP_SKIPPED (left out of a dev subset), STEP_SUCCEEDED
	                               * (reused: see reuse), STEP_BLOCKED
	                               * (deps_pending > 0), STEP_READY, or STEP_WAITING (a
	                               * kind that waits for a person, nothing above it) */
	const char *reason;           /* why it is skipped (static), or NULL */
	int deps_pending;             /* selected steps it needs */
	int retry_limit;
	int64_t backoff_ms, max_backoff_ms, timeout_ms;
	json_t *spec;   /* resolved: command, env, workdir, image and the kind's fields
	                 * rendered; "ancestors" (names, nearest first) when the step
	                 * is handed its ancestors' outputs at claim time */
	int waits;      /* the kind waits for a person (steps.waits) */
	int restage;    /* the kind stages data for steps below (steps.restage) */
	int final;      /* listed under finally: (its spec says "finally": true): blocked with
	                 * one dependency more, on the run's other steps, released when
	                 * they are all terminal (db/functions/release.sql) */
	int reuse;      /* left out of an --only/--from dev subset but above a selected
	                 * step: succeeded at once, its outputs, metrics and gate taken
	                 * from an earlier run (the store picks which) */
};

/*
 * step needs `needs` (indices into run_plan.steps), one per entry of needs:, in
 * file order; any: it runs when needs succeeded or was skipped (needs: [{step:
 * X, if: any}]), not only when it succeeded.
 */
struct plan_edge {
	int step, needs, any;
};

/* A planned run; all of it belongs to the plan and goes with run_plan_free(). */
struct run_plan {
	int64_t run_id;
	char *workflow;         /* the workflow's name */
	char *hash;             /* sha256 of its YAML, lowercase hex */
	char *yaml;             /* its YAML text */
	json_t *spec;           /* its normalised spec */
	json_t *params;         /* resolved: name -> string, defaults filled */
	struct plan_step *steps;
	size_t nsteps;
	struct plan_edge *edges;
	size_t nedges;
	int open_steps;         /* steps not skipped nor reused */
	int final_steps;        /* of those, the ones under finally: */
	int nreuse;             /* steps with reuse set */
	int any_ready;          /* a step is ready at once (wake the dispatchers) */
	int starts_running;     /* a waiting step at the start: the run is under way at once */
};

/*
 * Plans a run from in. On success returns 0 and *out is the caller's
 * (run_plan_free). Invalid YAML: FERRY_EINVALID, errs holds every
 * "FILE:LINE:COL: message" and ferry_error_last() counts them; bad params,
 * an unknown subset step, a template that cannot render or an unknown kind:
 * FERRY_EINVALID with the message in ferry_error_last() and errs untouched.
 * On error *out is NULL. The same input always gives the same plan.
 */
int run_plan_make(struct run_plan **out, const struct run_plan_in *in, cfg_errors *errs);

/*
 * Checks, on this machine, that the file each job step's command names is
 * where the step will run, so a run that cannot start its commands is
 * refused at submit rather than failing a step later. The directory is the
 * one exec_local chooses: the step's workdir: (absolute, or under the
 * run's), else the run's workdir; with neither it is the attempt
 * directory, made empty at claim time, so no relative file can be there.
 * The file is argv[0] when it is a relative path with a '/', or the script
 * an interpreter (sh, bash, python, python3, python3.N, Rscript, node,
 * perl, ruby) is given as its first operand when that looks like a file
 * (a '/' or an extension); an option that takes code or a module (-c, -m,
 * -e) ends the search. A one-string command (sh -c SCRIPT) is read the same
 * way when SCRIPT is one plain command line (no quotes, variables,
 * operators). Steps that will not run (skipped, reused), steps with an
 * image other than "host" (their files are the image's) and words still
 * holding a template or a shell variable are not checked. A workdir that
 * is no directory here (a registered one since removed) is refused too;
 * workdir may be NULL.
 * Returns 0, or FERRY_EINVALID with a message naming the step, the path
 * and what to do (the step's workdir:, where to submit from).
 */
int run_plan_check_files(const struct run_plan *p, const char *workdir);

/* Frees a plan and everything in it; NULL is fine. */
void run_plan_free(struct run_plan *p);

#endif

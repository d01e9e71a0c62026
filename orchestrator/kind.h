/*
 * kind — the table of step kinds, as the engine, the planner and the store
 * see it. Each kind (run, train, evaluate, gate, label, register, cache, and
 * later deploy) is one row defined in its own file under steps/; this header
 * is the interface those files implement, so nothing in orchestrator/
 * includes steps/. No code outside a kind's row compares a kind's name:
 * callers look the row up once (step_kind_find) and test its flags.
 *
 * PROVISIONAL (seams issue, phase 1): only name and flags are fixed here;
 * the step-kinds work extends struct step_kind with the config keys,
 * validation, prepare and job_done hooks and moves the rows into steps/.
 */
#ifndef FERRY_KIND_H
#define FERRY_KIND_H

/* What a kind is, as bits of step_kind.flags. */
enum step_kind_flag {
	SKF_JOB = 1u << 0,     /* runs a command as a job on an executor (run, train, evaluate;
	                        * a cache step's optional preprocessing command) */
	SKF_WAITS = 1u << 1,   /* enters `waiting` instead of `ready` and is never claimed:
	                        * a manual gate that a person continues (stored as steps.waits) */
	SKF_DAEMON = 1u << 2,  /* the daemon does its work itself, off the dispatcher loop
	                        * (label, register, cache staging) */
	SKF_SERVICE = 1u << 3, /* its job is meant to keep running (deploy replicas) */
	SKF_STAGES = 1u << 4,  /* stages data for the steps below it (FERRY_CACHE_DIR); re-run
	                        * when a step below it is retried (stored as steps.restage) */
	SKF_INPUTS = 1u << 5,  /* needs its ancestors' outputs and the run at claim time even
	                        * with no {{steps.…}} reference in its spec */
};

struct step_kind {
	const char *name;
	unsigned flags;
};

/* The kind called name, or NULL. */
const struct step_kind *step_kind_find(const char *name);

/* The default kind of a step that names none ("run"). */
const struct step_kind *step_kind_default(void);

/* Every kind, NULL-terminated (defined in steps/). */
extern const struct step_kind *const step_kinds[];

#endif

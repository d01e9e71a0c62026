/*
 * steps — what the files of steps/ share: the rows of the built-in kinds
 * (each defined in its steps/kind_*.c, listed in kinds.c) and the helpers
 * their hooks use. The types and the engine's entry points are in
 * orchestrator/plan/kind.h.
 */
#ifndef FERRY_STEPS_H
#define FERRY_STEPS_H

#include "plan/kind.h"
#include "lib/util.h"

/* The built-in kinds, in the order of step_kinds[] (kinds.c). */
extern const struct step_kind kind_run, kind_train, kind_evaluate; /* kind_job.c */
extern const struct step_kind kind_gate;                            /* kind_gate.c */
extern const struct step_kind kind_label;                           /* kind_label.c */
extern const struct step_kind kind_register;                        /* kind_register.c */
extern const struct step_kind kind_deploy;                          /* kind_deploy.c */
extern const struct step_kind kind_cache;                           /* kind_cache.c */

/* Appends one line (printf format) to the attempt's log, r->dir/log, for ferry logs. */
void steps_log(const struct step_run *r, const char *fmt, ...) FERRY_PRINTF(2, 3);

/* Fails res for good (retrying cannot fix it) with a formatted reason. */
void step_result_fail_final(struct step_result *res, const char *fmt, ...) FERRY_PRINTF(2, 3);

/*
 * Whether run r acts for a deployer or an admin now (store_run_submitter):
 * moving an alias or traffic is a deployer's action (the API's routes say
 * so), and a run does it for whoever submitted it, checked when the step
 * does it, not when the run was submitted. 1: yes; 0: res failed for good,
 * saying WHAT needed the role and who the run acts for; <0: the database
 * failed.
 */
int steps_submitter_may_deploy(const struct step_run *r, struct step_result *res, const char *what);

/*
 * A claimed step's when: (steps/when.c): 0 when it has none or it holds
 * (the step goes on), 1 when res is decided: skipped (it did not hold,
 * the values in the reason), failed for good (it could not be evaluated)
 * or failed (the registry could not be read).
 */
int steps_when(struct step_result *res, const struct step_run *r);

/*
 * A claimed foreach step (steps/foreach.c): its list read, its children
 * written; res is expanded (outputs {"items": N}), or failed saying why.
 * Returns 1 (res is decided).
 */
int steps_foreach_expand(struct step_result *res, const struct step_run *r);

/*
 * The step's inputs with every output file of an attempt that ran on
 * another host fetched here (steps/inputs.c): *out a copy that names the
 * files on this host (the caller's), NULL when nothing had to change. An
 * error (a file's host lost, its bytes not what it said) with the message
 * set.
 */
int steps_inputs_localize(json_t **out, const struct step_run *r);

/* Whether the kind of in, an entry of r->inputs ({"kind":"…",…}), has every flag of flags. */
int steps_input_has(const json_t *in, unsigned flags);

#endif

/*
 * kind — the table of step kinds, as the config, the engine, the planner
 * and the store see it. Each kind (run, train, evaluate, gate, label,
 * register, cache, and later deploy) is one row, struct step_kind, defined
 * in its own file under steps/ (steps/kind_*.c) and listed in steps/kinds.c;
 * this header is the interface those files implement, so nothing in
 * orchestrator/ includes steps/. A row says what the kind is (flags), which
 * keys a step of it takes (its own table of struct step_key: name,
 * parser, whether the plan carries it) and what it does when
 * claimed (prepare) and when its job is done (job_done). No code outside a
 * kind's row compares a kind's name: callers look the row up once
 * (step_kind_find) and test its flags and fields.
 *
 * The engine's entry points into the kinds are declared here too:
 * steps_prepare() and steps_job_done() (steps/steps.c) do what every kind
 * shares (the step result cache, {{steps.X.outputs.Y}} references) and
 * call the row's hooks.
 */
#ifndef FERRY_KIND_H
#define FERRY_KIND_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "lib/states.h"

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
	                        * when a step below it is retried (stored as steps.restage).
	                        * Its outputs cache_dir and session reach the jobs below it;
	                        * its fingerprint (and key) stand for it in their cache keys
	                        * and in the lineage of a model version registered below it */
	SKF_INPUTS = 1u << 5,  /* needs its ancestors' outputs and the run at claim time even
	                        * with no {{steps.…}} reference in its spec */
	/* What a register step below it takes from a step of the kind (the lineage): */
	SKF_TRAINS = 1u << 6,    /* its `model` output is the artifact, before any other step's */
	SKF_EVALUATES = 1u << 7, /* its metrics win over the other steps' */
	SKF_DATASET = 1u << 8,   /* its `dataset` output is the data, fingerprinted when no step
	                          * above gives a fingerprint (a label step's) */
	/* What the config infers from it: */
	SKF_REGISTERS = 1u << 9, /* registers a version of its `model`: a step above it that
	                          * compares against production without `model` takes that one */
};

/*
 * The keys a kind takes beside the generic ones (name, kind, needs,
 * command, env, image, workdir, timeout, retry: plan/config.c's): a table
 * of rows, each the key's name, how its YAML value becomes a value of the
 * step's spec, and whether the planner copies that value into the plan.
 * A kind's table is its own (steps/kind_*.c); keys several kinds share are
 * written once in steps/keys.h and their rows repeat them.
 */
struct cfg_key_ctx; /* the config's parse of one key of one step (plan/config_keys.h) */

enum step_key_flag {
	STK_JOB = 1u << 0,  /* where the job runs (executor, resources, …): a step of a kind
	                     * that runs no job (no SKF_JOB or SKF_SERVICE) is told so */
	STK_PLAN = 1u << 1, /* the planner copies the value into the step's resolved spec,
	                     * a string with its {{params.X}} and {{run.id}} rendered */
	STK_LAST = 1u << 2, /* listed after the other keys in the config's messages */
};

struct step_key {
	const char *name;   /* the YAML key; NULL ends a table (with names NULL) */
	const char *field;  /* the spec field its value goes to; NULL: name */
	unsigned flags;     /* STK_… */
	int required;       /* a step of the kind must have it … */
	const char *hint;   /* … and what it is for, in the message when it is missing */
	/*
	 * The field's value (JSON text) in the spec of every step whose kind
	 * does not take the key (every step carries the fields of the first
	 * kinds' keys); NULL: such a step has no field.
	 */
	const char *absent;
	/*
	 * Instead of name, a family of keys: the i-th name or NULL past the last
	 * (the executors' options blocks, exec.h options_key).
	 */
	const char *(*names)(size_t i);
	/*
	 * Parses the key's value n (NULL when the step does not have it) into
	 * *out, the value of the spec field (NULL: no field); errors are
	 * reported through c (file:line:col) and the parse goes on. Returns 0.
	 */
	int (*parse)(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
};

/* Whether a step of the kind has a command. */
enum step_kind_command {
	SKC_REQUIRED,  /* the command is its job */
	SKC_OPTIONAL,  /* a command is an extra job (a cache step's preprocessing) */
	SKC_FORBIDDEN, /* it runs nothing (step_kind.no_command says why) */
};

/* A claimed step, as a kind's hooks see it. Nothing here is the hook's to free. */
struct step_run {
	PGconn *conn;           /* the engine's connection (no transaction open) */
	const char *home;       /* $FERRY_HOME */
	const char *host;       /* this machine's name */
	const char *actor;      /* the daemon's owner id, for events */
	int64_t run_id, step_id;
	int attempt;
	const char *name, *kind;
	const char *dir;        /* attempt directory (exists): log, out/ */
	const char *workdir;    /* the run's working directory, or NULL */
	const json_t *spec;     /* the step's resolved spec: command, env, workdir, image and
	                         * the kind's fields (model, dataset, gate, …), templates
	                         * {{steps.X.outputs.Y}} already rendered */
	const json_t *inputs;   /* succeeded upstream steps (all ancestors):
	                         * {"NAME":{"kind":"train","outputs":{…}|null,"metrics":{…}|null}} */
	const json_t *run;      /* {"params":{…},"workflow":"digits","workflow_hash":"…","no_cache":false} */
};

/*
 * What a hook decided. Starts as step_result_init() leaves it (outcome
 * OUTCOME_NONE); owned by the engine after the call: step_result_dispose().
 */
struct step_result {
	enum attempt_outcome outcome; /* OUTCOME_SUCCEEDED, OUTCOME_FAILED or OUTCOME_WAITING
	                               * (label, deploy); OUTCOME_NONE: undecided, which the
	                               * engine finishes as failed */
	int final;              /* a failure retrying cannot fix (gate, bad metrics.json) */
	char *reason;           /* shown with the step; NULL when none */
	json_t *outputs;        /* object or NULL */
	json_t *metrics;        /* object or NULL */
	json_t *gate;           /* array of gate results or NULL */
	json_t *cached_from;    /* {"run","step","attempt"}: it came from the step cache */
};

struct step_kind {
	const char *name;
	unsigned flags;               /* SKF_… */

	/* Its configuration, checked by config_kinds.c. */
	enum step_kind_command command;
	const char *no_command;       /* with SKC_FORBIDDEN: why ("waits for a person and
	                               * runs no command"), after "a KIND step " */
	const struct step_key *keys;  /* the keys it takes beside the generic ones, ended by
	                               * a row with no name; NULL: none */

	/*
	 * Called by steps_prepare() when a step of the kind is claimed with
	 * its inputs (r->spec rendered; the step result cache missed). Returns
	 * 1 when the step is finished (res filled: done by the daemon, waiting,
	 * or failed), 0 when its job must run (SKF_JOB kinds only; *env, the
	 * caller's, is extra environment for it or NULL), or a negative
	 * FERRY_E* code with the message set. NULL: the job runs as it is
	 * (SKF_JOB), or the step fails (a kind that is never claimed).
	 */
	int (*prepare)(struct step_result *res, json_t **env, const struct step_run *r);

	/*
	 * Called by steps_job_done() when a step's job exited 0: what the job
	 * wrote becomes the result; res->outcome says whether the step
	 * succeeded after all. Negative with the message set on an error
	 * (the step fails, may be retried). NULL for kinds without a job.
	 */
	int (*job_done)(struct step_result *res, const struct step_run *r);

	/*
	 * The outside service a claimed step's daemon work waits on (SKF_DAEMON
	 * kinds), written into buf (n bytes), or NULL for none: the daemon's
	 * worker pool runs one such item per service at a time (workers.h), so
	 * one that never answers holds one worker. NULL hook: no lane.
	 */
	const char *(*lane)(const json_t *spec, char *buf, size_t n);
};

/* The kind called name, or NULL. */
const struct step_kind *step_kind_find(const char *name);

/* Whether key row k is called name (a family: one of its names). */
int step_key_is(const struct step_key *k, const char *name);

/* The row of key name in kind's table, or NULL when the kind does not take it. */
const struct step_key *step_kind_key(const struct step_kind *kind, const char *name);

/* The default kind of a step that names none ("run"). */
const struct step_kind *step_kind_default(void);

/* Every built-in kind, NULL-terminated (steps/kinds.c). */
extern const struct step_kind *const step_kinds[];

/*
 * The i-th kind (the built-in ones, then those added by step_kind_register)
 * or NULL past the last: how the config lists and searches them all.
 */
const struct step_kind *step_kind_at(size_t i);

/*
 * Adds kind k (not copied: it must outlive the process) after the built-in
 * ones: a kind defined outside steps/, such as a test's. Call it before any
 * thread parses a workflow or claims a step. FERRY_EINVALID when k has no
 * name, FERRY_ECONFLICT when its name is taken, FERRY_ERROR when the table
 * of added kinds is full.
 */
int step_kind_register(const struct step_kind *k);

/* ---- the engine's entry points (steps/steps.c) -------------------------- */

/* Empties res: no outputs, no reason, outcome OUTCOME_NONE. Frees nothing. */
void step_result_init(struct step_result *res);

/* Frees what res holds and leaves it as step_result_init() does. NULL is fine. */
void step_result_dispose(struct step_result *res);

/*
 * Called for every claimed step whose spec lists "ancestors" (r->inputs and
 * r->run set). Returns 1 when the step is finished (res filled: from the
 * step cache, a label task opened, a version registered, a dataset staged,
 * or a failure), 0 when its job must run: *rendered is the spec with the
 * step references rendered, *env extra environment for the job (or NULL),
 * *cache_key the key to keep a success under (or NULL); all the caller's.
 */
/* Adds env (steps_prepare's, may be NULL; taken) to the "env" of spec. */
void steps_env_merge(json_t *spec, json_t *env);

int steps_prepare(json_t **rendered, json_t **env, char **cache_key, struct step_result *res,
		  const struct step_run *r);

/*
 * Called when a job exited 0: the kind's job_done hook turns what it wrote
 * into the result (a job kind: outputs from r->dir/out, metrics.json, the
 * gate). res->outcome says whether the step succeeded after all.
 */
int steps_job_done(const struct step_run *r, struct step_result *res);

#endif

/*
 * steps — what the step kinds do beyond running a command. The engine calls
 * steps_claimed() for every step it claims: kinds the daemon does itself
 * (label, register, a cache hit) finish there; the others run a job, and
 * steps_job_done() turns a successful job's output directory into outputs,
 * metrics and gate results. Kind handlers live in their own files
 * (label.c, registry.c, datacache.c, metrics.c) and share these types.
 */
#ifndef FERRY_STEPS_H
#define FERRY_STEPS_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

/* A claimed step, as its handler sees it. Nothing here is the handler's to free. */
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

/* What a handler decided. Owned by the engine after the call. */
struct step_result {
	const char *outcome;    /* "succeeded", "failed" or "waiting" (label) */
	int final;              /* a failure retrying cannot fix (gate, bad metrics.json) */
	char *reason;           /* shown with the step; NULL when none */
	json_t *outputs;        /* object or NULL */
	json_t *metrics;        /* object or NULL */
	json_t *gate;           /* array of gate results or NULL */
	json_t *cached_from;    /* {"run","step","attempt"}: it came from the step cache */
};

void step_result_dispose(struct step_result *res);

/* Appends one line (printf format) to the attempt's log, r->dir/log, for ferry logs. */
void steps_log(const struct step_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Called for every claimed step whose spec lists "ancestors" (r->inputs and
 * r->run set). Returns 1 when the step is finished (res filled: from the
 * step cache, a label task opened, a version registered, a dataset staged,
 * or a failure), 0 when its job must run: *rendered is the spec with the
 * step references rendered, *env extra environment for the job (or NULL),
 * *cache_key the key to keep a success under (or NULL); all the caller's.
 */
int steps_prepare(json_t **rendered, json_t **env, char **cache_key, struct step_result *res,
		  const struct step_run *r);

/*
 * Called when a job exited 0: outputs from r->dir/out (files by name less
 * extension, outputs.json), metrics.json, the gate. res->outcome says
 * whether the step succeeded after all.
 */
int steps_job_done(const struct step_run *r, struct step_result *res);

#endif

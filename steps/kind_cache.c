/*
 * kind_cache — a step that stages its `dataset` into the node-local data
 * cache for the steps below it (datacache.c does the work): a hit or a
 * copy by the daemon finishes it when claimed; with a preprocessing
 * `command`, the command runs as a job that fills the entry, committed
 * when it exits 0. Jobs below it get FERRY_CACHE_DIR (kind_job.c).
 */
#include "steps/steps.h"

#include "steps/datacache.h"
#include "steps/keys.h"

static int cache_prepare(struct step_result *res, json_t **env, const struct step_run *r)
{
	return datacache_claimed(r, res, env);
}

static int cache_job_done(struct step_result *res, const struct step_run *r)
{
	return datacache_job_done(r, res);
}

/* Where its optional preprocessing job runs, and what it stages. */
static const struct step_key cache_keys[] = {
	KEYS_PLACEMENT,
	{KEY_DATASET, .required = 1, .hint = "the directory or file to stage"},
	{0},
};

const struct step_kind kind_cache = {
	.name = "cache", .flags = SKF_DAEMON | SKF_JOB | SKF_STAGES | SKF_INPUTS,
	.command = SKC_OPTIONAL,
	.keys = cache_keys,
	.prepare = cache_prepare, .job_done = cache_job_done,
};

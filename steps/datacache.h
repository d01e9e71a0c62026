/*
 * datacache — the `cache` step kind: a dataset staged into a node-local
 * cache directory keyed by its content fingerprint (and its preprocessing
 * command, when it has one), so that a run on unchanged data neither copies
 * nor preprocesses it again. Entries live under $FERRY_CACHE_ROOT (default
 * $FERRY_HOME/cache) with a size cap (FERRY_CACHE_MAX_MB) and
 * least-recently-used eviction of entries no open session pins; the index,
 * sessions and statistics are in PostgreSQL (store_cache.c).
 */
#ifndef FERRY_DATACACHE_H
#define FERRY_DATACACHE_H

#include <jansson.h>

#include "steps/steps.h"

/* FERRY_CACHE_MAX_MB when unset: 10 GiB. */
#define DATACACHE_DEFAULT_MAX_MB 10240

/*
 * A cache step was claimed (r->spec rendered). Returns 1 when the step is
 * finished: res filled (succeeded from a hit or a completed copy, or
 * failed); 0 when its command must run as a job, *env (the caller's) its
 * extra environment: FERRY_CACHE_DIR (the entry being built, empty) and
 * FERRY_DATASET (the source); negative with ferry_error_last() on error.
 */
int datacache_claimed(const struct step_run *r, struct step_result *res, json_t **env);

/*
 * A cache step's command exited 0: what it wrote into FERRY_CACHE_DIR
 * becomes the entry (renamed into place), the session is opened and
 * res->outputs filled: cache_dir, session, fingerprint, key, hit, bytes.
 */
int datacache_job_done(const struct step_run *r, struct step_result *res);

#endif

/*
 * copies — FERRY_ARTIFACT_COPIES (default 2): each blob of the registry's
 * artifact store is kept on at least that many hosts of the fleet, or on
 * every live host when there are fewer, so a model outlives the disk of
 * the host that registered it. Every daemon's `copies` task looks, every
 * COPIES_PERIOD_MS, for blobs with too few live holders that its host
 * lacks and that its host is among the ones chosen to take (the live
 * hosts that lack a blob, ordered by md5(sha256 || host): as many as are
 * missing, so two hosts do not both fetch what one copy makes up), and
 * fetches up to COPIES_BATCH of them on the worker pool from a holder
 * (store_blob_ensure: the hash checked, the host then recorded).
 */
#ifndef FERRY_ENGINE_COPIES_H
#define FERRY_ENGINE_COPIES_H

#include "store/task.h"

#define COPIES_PERIOD_MS 5000
#define COPIES_BATCH 4

/* The `copies` periodic task (task.h). */
extern const struct task copies_task;

/* FERRY_ARTIFACT_COPIES: 2 when unset; -1 with the message set when not an integer from 1 to 100. */
int copies_env(void);

#endif

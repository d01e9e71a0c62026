/*
 * workflows — registering a workflow version: the store writes the
 * version (store_workflow_write) and, in the same transaction, its
 * schedule: and triggers: become the workflow's schedules and triggers
 * (schedules_sync). POST /api/v1/workflows is the caller.
 */
#ifndef FERRY_WORKFLOWS_H
#define FERRY_WORKFLOWS_H

#include <libpq-fe.h>
#include <stddef.h>

#include "plan/config.h"

/*
 * Parses yaml (len bytes; filename for messages) and stores it as a
 * workflow version registered from directory workdir (NULL: none), made
 * by actor, with its schedules and triggers synced in the same
 * transaction. *out is {"name","hash","created","steps","workdir"} JSON
 * text, the caller's (store_workflow_write says what created means).
 * Invalid YAML: FERRY_EINVALID with errs filled and nothing stored.
 */
int workflows_register(char **out, PGconn *conn, const char *yaml, size_t len, const char *filename,
		       const char *workdir, const char *actor, cfg_errors *errs);

#endif

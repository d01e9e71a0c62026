/*
 * workflows — workflow registration above the store (workflows.h): the
 * YAML is parsed here (cfg_workflow_parse), the store writes the version,
 * and schedules_sync, run by the store inside its transaction, makes the
 * workflow's schedules and triggers match it, so a version is never
 * stored without them nor they without it.
 */
#include "schedule/workflows.h"

#include <jansson.h>

#include "schedule/schedules.h"
#include "store/store.h"
#include "lib/util.h"

struct sync_arg {
	const json_t *spec;
	const char *actor;
};

/* store_workflow_write's then: in its transaction, after the version is written. */
static int sync_in_tx(PGconn *conn, void *arg)
{
	const struct sync_arg *a = arg;

	return schedules_sync(conn, json_string_value(json_object_get(a->spec, "name")), a->spec, a->actor);
}

int workflows_register(char **out, PGconn *conn, const char *yaml, size_t len, const char *filename,
		       const char *workdir, const char *actor, cfg_errors *errs)
{
	struct sync_arg a = {0};
	json_t *spec = NULL;
	char hash[65];
	int error;

	*out = NULL;
	if ((error = cfg_workflow_parse(&spec, hash, yaml, len, filename, errs)) < 0) {
		ferry_error_set("invalid workflow: %zu error%s", errs->len, errs->len == 1 ? "" : "s");
		return error;
	}
	a.spec = spec;
	a.actor = actor;
	error = store_workflow_write(out, conn, hash, spec, yaml, len, workdir, sync_in_tx, &a);
	json_decref(spec);
	return error;
}

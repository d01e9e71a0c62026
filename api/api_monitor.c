/*
 * api_monitor — GET /api/v1/runs/{id}/steps/{step}/monitor: what the job
 * monitor sees of a step's attempt (orchestrator/monitor/monitor.md): the
 * detector's state and why, the last samples, the GPUs, the metric series
 * and the watchpoints' results, the evidence of a hang, and the step's
 * monitor.* events. Read from attempt_monitor, so any replica answers for
 * a job another replica runs.
 */
#include <microhttpd.h>
#include <string.h>

#include "api/api_priv.h"
#include "store/store_monitor.h"
#include "lib/util.h"

void api_step_monitor(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	const char *att_s = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "attempt");
	int64_t want = 0;
	json_t *out = NULL;
	int error;

	(void)a;
	if (att_s && (parse_int64(att_s, &want) < 0 || want < 1 || want > 1000000)) {
		reply_error(r, 400, "invalid_field", "attempt", "attempt must be a positive integer", NULL);
		return;
	}
	if ((error = store_monitor_get(&out, db, q->id, q->caps[1], (int)want)) < 0) {
		reply_store_error(r, error);
		return;
	}
	reply_json(r, 200, json_dumps(out, JSON_COMPACT));
	json_decref(out);
}

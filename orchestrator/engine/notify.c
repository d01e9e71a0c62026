/*
 * notify — see notify.h. The engine's leader-only task picks the runs due
 * (store_runs_to_notify) and submits one item per run to the worker pool;
 * this file is what an item does there.
 */
#include "engine/notify.h"

#include <stdlib.h>

#include "store/store.h"
#include "lib/util.h"
#include "lib/webhook.h"

struct notify_work {
	struct work w;
	char *url;
	json_t *body; /* what is posted */
	int64_t run_id;
};

static void notify_run(struct work *w, PGconn *conn)
{
	struct notify_work *n = (struct notify_work *)w;
	json_t *answer = NULL;
	int error;

	w->again = conn == NULL || PQstatus(conn) != CONNECTION_OK;
	if (w->again)
		return;
	error = webhook_post(&answer, n->url, n->body, WEBHOOK_TRIES);
	json_decref(answer);
	if (error < 0)
		flog_warn("run %lld: completion webhook: %s", (long long)n->run_id, ferry_error_last());
	else
		flog_debug("run %lld: completion posted to %s", (long long)n->run_id, n->url);
	if (store_run_notified(conn, n->run_id, error < 0 ? ferry_error_last() : NULL) < 0)
		flog_error("run %lld: recording its notification: %s", (long long)n->run_id, ferry_error_last());
}

struct work *notify_work_new(const char *url, const char *link_base, json_t *run)
{
	struct notify_work *n = xcalloc(1, sizeof(*n));
	json_int_t id = json_integer_value(json_object_get(run, "run"));

	n->w.run = notify_run;
	n->url = xstrdup(url);
	n->run_id = id;
	n->body = run;
	if (link_base)
		json_object_set_new(run, "link", json_sprintf("%s/api/v1/runs/%lld", link_base, (long long)id));
	return &n->w;
}

void notify_work_free(struct work *w)
{
	struct notify_work *n = (struct notify_work *)w;

	if (n == NULL)
		return;
	free(n->url);
	json_decref(n->body);
	free(n);
}

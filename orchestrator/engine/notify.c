/*
 * notify — see notify.h. The leader-only task's round picks the runs due
 * (store_runs_to_notify) and hands one item per run to the worker pool;
 * the rest of this file is what an item does there.
 */
#include "engine/notify.h"

#include <jansson.h>
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

/* An item posting run (taken) to url, linked below link_base (may be NULL). */
static struct work *notify_work_new(const char *url, const char *link_base, json_t *run)
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

static void notify_work_free(struct work *w)
{
	struct notify_work *n = (struct notify_work *)w;

	if (n == NULL)
		return;
	free(n->url);
	json_decref(n->body);
	free(n);
}

/* FERRY_NOTIFY_WEBHOOK: one item per run that ended and is not posted yet. */
static struct work *notify_round(struct task_ctx *c, void *state)
{
	const char *url = getenv("FERRY_NOTIFY_WEBHOOK");
	json_t *runs = NULL, *run;
	struct work *list = NULL, **tail = &list;
	size_t i;

	(void)state;
	if (url == NULL || *url == '\0' || c->workers == NULL)
		return NULL;
	if (store_runs_to_notify(&runs, c->conn, 32) < 0) {
		flog_error("runs to notify: %s", ferry_error_last());
		return NULL;
	}
	json_array_foreach(runs, i, run) {
		*tail = notify_work_new(url, c->public_url, json_deep_copy(run));
		tail = &(*tail)->next;
	}
	json_decref(runs);
	return list;
}

static int64_t every_second(const struct task_ctx *c)
{
	(void)c;
	return 1000;
}

const struct task notify_task = {
	.name = "notify",
	.flags = TASK_LEADER | TASK_POOL,
	.period = every_second,
	.start_round = notify_round,
	.free = notify_work_free,
};

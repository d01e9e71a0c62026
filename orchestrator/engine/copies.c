/*
 * copies — see copies.h. The round (one query on the loop) names the blobs
 * this host should take; the fetches run as one pool item, since a
 * transfer may take seconds.
 */
#include "engine/copies.h"

#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "lib/util.h"

struct copies_state {
	int copies;
};

struct copies_work {
	struct work w;
	char *home;
	json_t *blobs; /* sha256 strings */
};

int copies_env(void)
{
	const char *v = getenv("FERRY_ARTIFACT_COPIES");
	int64_t n;

	if (v == NULL || *v == '\0')
		return 2;
	if (parse_int64(v, &n) < 0 || n < 1 || n > 100) {
		ferry_error_set("FERRY_ARTIFACT_COPIES \"%s\" must be an integer from 1 to 100 (the hosts each "
				"registered artifact is kept on; 1: only where it was registered)", v);
		return -1;
	}
	return (int)n;
}

static int copies_open(void **state, struct task_ctx *c)
{
	struct copies_state *s;
	int n = copies_env();

	if (n < 0)
		return FERRY_EINVALID;
	if (c->dev)
		return FERRY_OK;
	s = xcalloc(1, sizeof(*s));
	s->copies = n;
	*state = s;
	return FERRY_OK;
}

static void copies_close(void *state)
{
	free(state);
}

static void copies_run(struct work *w, PGconn *conn)
{
	struct copies_work *cw = (struct copies_work *)w;
	json_t *b;
	size_t i;

	if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
		return;
	json_array_foreach(cw->blobs, i, b) {
		char *path = NULL;
		if (store_blob_ensure(&path, conn, cw->home, json_string_value(b), 0) < 0)
			flog_warn("copies: blob %.12s…: %s", json_string_value(b), ferry_error_last());
		else
			flog_info("copies: blob %.12s… now also kept on this host", json_string_value(b));
		free(path);
	}
}

static void copies_free(struct work *w)
{
	struct copies_work *cw = (struct copies_work *)w;

	if (cw == NULL)
		return;
	free(cw->home);
	json_decref(cw->blobs);
	free(cw);
}

static struct work *copies_round(struct task_ctx *c, void *state)
{
	struct copies_state *s = state;
	struct copies_work *cw;
	json_t *blobs = NULL;

	/* a transfer may take minutes: never on the loop (FERRY_WORKERS=0 copies nothing ahead of need) */
	if (s == NULL || s->copies < 2 || c->workers == NULL)
		return NULL;
	if (store_blobs_to_copy(&blobs, c->conn, c->host, s->copies, COPIES_BATCH) < 0) {
		flog_warn("copies: %s", ferry_error_last());
		return NULL;
	}
	if (json_array_size(blobs) == 0) {
		json_decref(blobs);
		return NULL;
	}
	cw = xcalloc(1, sizeof(*cw));
	cw->w.run = copies_run;
	cw->home = xstrdup(c->home);
	cw->blobs = blobs;
	return &cw->w;
}

static int64_t every_copies_period(const struct task_ctx *c)
{
	(void)c;
	return COPIES_PERIOD_MS;
}

/* every daemon but dev sessions, one round at a time */
const struct task copies_task = {
	.name = "copies",
	.flags = TASK_NO_DEV | TASK_POOL,
	.period = every_copies_period,
	.open = copies_open,
	.close = copies_close,
	.start_round = copies_round,
	.free = copies_free,
};

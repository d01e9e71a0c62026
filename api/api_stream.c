/*
 * api_stream — the web console's run page, server side: GET /runs/{id}/stream,
 * the run as Server-Sent Events, and GET /runs/{id}/dag.svg, the whole DAG
 * of the run's workflow laid out by Graphviz (dag_svg.h); GET
 * /runs/stream, the runs list's stream: `event: runs` whenever any run
 * changed (at most one a second), so a list re-reads its page; and GET
 * /runs/{id}/steps/{step}, a step's resolved spec for its detail panel;
 * GET /runs/{id}/timeline, the steps' attempts as bars in time (the run
 * page's Gantt chart; db/functions/timeline.sql).
 *
 * The list's stream is a stream of "run 0": its marker is the newest event
 * id of all runs (every run's creation and every transition writes one),
 * the primary key's last entry; the poller reads it once a tick for all the
 * list streams together, as it reads a run's marker once for its streams.
 *
 * The stream. On connect (a database worker) it sends `event: run` with the
 * run's JSON (the object of GET /runs/{id}, on one line); then one more each
 * time the run changes; `: keepalive` after 15 s of quiet; and once the run
 * is finished its last `event: run` and `event: end`, and it closes. A
 * reconnect simply gets the whole state again (no Last-Event-ID replay: the
 * state is one object).
 *
 * How a change is learnt: by polling a marker, not by NOTIFY. The run-change
 * NOTIFY (migration 0005) fires only for runs already finished (so the hot
 * path of the engine sends nothing), and a running run is exactly what a
 * stream watches. The marker (store_run_marker: state, open steps and the
 * newest event id of the run; every transition writes an event in its
 * transaction) is one primary-key row and one index probe, asked by one
 * poller thread every TICK_MS for every stream whose last event the client
 * has taken, once per run however many streams watch it; the whole JSON is
 * fetched only when the marker moved. That also coalesces: at most one event
 * per stream per TICK_MS (5 a second), and a client that reads slowly gets
 * the newest state when it has taken the previous one, never a backlog.
 * The poller has its own connection (not the API's pool, which serves
 * requests), made again after a failure with a backoff up to 5 s.
 *
 * Bounds. At most FERRY_UI_STREAMS streams (default 64; more: 503); a
 * stream holds at most one pending event (one run JSON, refused over
 * MAX_EVENT bytes) plus the end. No MHD worker waits: a stream with nothing
 * to send suspends its connection ("parks" it, as api_logs.c does) and the
 * poller resumes it when it has put an event in it, when the client has
 * gone (looked at every tick), or on api_stop, which ends every stream at
 * once (and cancels the poller's query in flight).
 */
#include "api/api_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/dag_svg.h"
#include "store/db.h"
#include "store/store.h"
#include "store/store_ui.h"
#include "lib/util.h"

#define TICK_MS 200            /* how often the poller looks at the runs of the streams */
#define KEEPALIVE_MS 15000     /* a comment after this long without an event */
#define LIST_MIN_MS 1000       /* a list stream gets at most one event this often */
#define MAX_EVENT (32u << 20)  /* a run JSON bigger than this is not streamed */
#define STREAMS_DEFAULT 64
#define STREAMS_MAX 100000
#define DAG_ENTRIES 64
#define DAG_BYTES (256u << 20)
#define CONNECT_MS 3000
#define BACKOFF_MAX_MS 5000

struct ui_stream {
	struct api_streams *ui;
	atomic_int refs; /* MHD's response holds one, the poller one while it works on the stream */
	struct ui_stream *prev, *next; /* the streams' list, under ui->mu */
	struct MHD_Connection *conn;
	int sock; /* the client's socket, to notice it leave */
	int64_t run_id; /* 0: the runs list's stream */

	/* under ui->mu */
	char *buf;           /* the bytes not sent yet: at most one event, and the end */
	size_t len, off;
	int parked;          /* suspended by stream_read, waiting for the poller */
	int done;            /* the end is in buf: nothing more is added */
	int gone;            /* the client left or the API stops: the stream ends */
	int registered;      /* in the list (until MHD frees the response) */

	/* the poller's alone */
	struct store_run_marker seen; /* what the last event sent showed */
	int64_t last_sent_ms;
};

struct api_streams {
	pthread_mutex_t mu;
	struct ui_stream *streams;
	int nstreams, max_streams;
	int stopping;
	PGcancel *cancel; /* the poller's connection's, to cut a query short on stop (under mu) */

	pthread_t poller;
	int poller_started;
	int wake[2];
	char *conninfo;
	struct dag_cache *dags;
};

static void stream_unref(struct ui_stream *s)
{
	if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1) {
		free(s->buf);
		free(s);
	}
}

/* MHD is done with the response (the connection closed): the stream leaves the list. */
static void stream_free(void *cls)
{
	struct ui_stream *s = cls;
	struct api_streams *ui = s->ui;

	pthread_mutex_lock(&ui->mu);
	if (s->registered) {
		if (s->prev)
			s->prev->next = s->next;
		else
			ui->streams = s->next;
		if (s->next)
			s->next->prev = s->prev;
		s->registered = 0;
		ui->nstreams--;
	}
	pthread_mutex_unlock(&ui->mu);
	stream_unref(s);
}

/* Appends text to s's pending bytes (under ui->mu). */
static void stream_put(struct ui_stream *s, const char *text, size_t n)
{
	if (s->off == s->len)
		s->off = s->len = 0;
	s->buf = xrealloc(s->buf, s->len + n + 1);
	memcpy(s->buf + s->len, text, n);
	s->len += n;
}

/* Resumes s if it is parked (under ui->mu). */
static void stream_wake(struct ui_stream *s)
{
	if (s->parked) {
		s->parked = 0;
		MHD_resume_connection(s->conn);
	}
}

/*
 * Called by the MHD worker that serves the connection; it must not wait.
 * With nothing pending the connection is parked and this returns 0; the
 * poller resumes it.
 */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct ui_stream *s = cls;
	struct api_streams *ui = s->ui;
	ssize_t n;

	(void)pos;
	pthread_mutex_lock(&ui->mu);
	if (s->off < s->len) {
		n = (ssize_t)(s->len - s->off < max ? s->len - s->off : max);
		memcpy(buf, s->buf + s->off, (size_t)n);
		s->off += (size_t)n;
		pthread_mutex_unlock(&ui->mu);
		return n;
	}
	if (s->done) {
		pthread_mutex_unlock(&ui->mu);
		return MHD_CONTENT_READER_END_OF_STREAM;
	}
	if (ui->stopping || s->gone) {
		pthread_mutex_unlock(&ui->mu);
		return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	s->parked = 1;
	MHD_suspend_connection(s->conn);
	pthread_mutex_unlock(&ui->mu);
	return 0;
}

static int state_finished(const char *state)
{
	return strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 || strcmp(state, "stopped") == 0;
}

/*
 * The text of `event: run` for json (taken over), followed by `event: end`
 * when the run is finished; NULL with the message set when it is too big.
 * SSE data is one line: raw line breaks (only ever between JSON tokens,
 * never inside strings) become spaces.
 */
static char *event_text(char *json, int finished, size_t *len)
{
	size_t n = strlen(json);
	char *out;

	if (n > MAX_EVENT) {
		ferry_error_set("the run's JSON is %zu bytes, over the stream's %u", n, MAX_EVENT);
		free(json);
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		if (json[i] == '\n' || json[i] == '\r')
			json[i] = ' ';
	out = xasprintf("event: run\ndata: %s\n\n%s", json, finished ? "event: end\ndata: {}\n\n" : "");
	free(json);
	*len = strlen(out);
	return out;
}

static int marker_same(const struct store_run_marker *a, const struct store_run_marker *b)
{
	return strcmp(a->state, b->state) == 0 && a->open_steps == b->open_steps && a->last_event == b->last_event;
}

static int by_run(const void *x, const void *y)
{
	const struct ui_stream *a = *(struct ui_stream *const *)x, *b = *(struct ui_stream *const *)y;

	return a->run_id < b->run_id ? -1 : a->run_id > b->run_id;
}

/* What one run looked like this tick, shared by the streams that watch it. */
struct tick_run {
	int64_t id;
	int error;                  /* of the marker: 0, FERRY_ENOTFOUND, or another (the connection is dropped) */
	struct store_run_marker m;
	char *event;                /* the event text when some stream needed it, else NULL */
	size_t event_len;
	int fetched;                /* event was asked for (it may have failed: NULL) */
	int too_big;                /* … because the JSON is over MAX_EVENT */
};

static void tick_fetch_event(struct tick_run *t, PGconn *conn)
{
	char *json = NULL;

	t->fetched = 1;
	if (store_run_json(&json, conn, t->id) < 0) {
		flog_warn("ui stream: run %lld: %s", (long long)t->id, ferry_error_last());
		return;
	}
	t->event = event_text(json, state_finished(t->m.state), &t->event_len);
	t->too_big = t->event == NULL;
	if (t->event == NULL)
		flog_warn("ui stream: run %lld: %s", (long long)t->id, ferry_error_last());
}

/* Decides what s gets this tick from t (or a keepalive) and hands it over. */
static void tick_stream(struct api_streams *ui, struct ui_stream *s, struct tick_run *t, PGconn *conn, int64_t now)
{
	static const char end_gone[] = "event: end\ndata: {\"reason\":\"the run was deleted\"}\n\n";
	static const char end_big[] = "event: end\ndata: {\"reason\":\"the run is too big to stream\"}\n\n";
	const char *text = NULL;
	size_t len = 0;
	int done = 0, sent_run = 0;

	char list_event[96];

	if (s->run_id == 0) {
		/* the list: that something changed, at most once per LIST_MIN_MS; the page reads what */
		if (t && t->error == 0 && t->m.last_event != s->seen.last_event && now - s->last_sent_ms >= LIST_MIN_MS) {
			len = (size_t)snprintf(list_event, sizeof(list_event), "event: runs\ndata: {\"last_event\":%lld}\n\n",
					       (long long)t->m.last_event);
			text = list_event, sent_run = 1;
		}
	} else if (t && t->error == FERRY_ENOTFOUND) {
		text = end_gone, len = sizeof(end_gone) - 1, done = 1;
	} else if (t && t->error == 0 && !marker_same(&t->m, &s->seen)) {
		if (!t->fetched)
			tick_fetch_event(t, conn);
		if (t->event) {
			text = t->event, len = t->event_len, sent_run = 1;
			done = state_finished(t->m.state);
		} else if (t->too_big) {
			text = end_big, len = sizeof(end_big) - 1, done = 1;
		}
	}
	if (text == NULL && now - s->last_sent_ms >= KEEPALIVE_MS)
		text = ": keepalive\n\n", len = 13;
	if (text == NULL)
		return;
	if (sent_run)
		s->seen = t->m;
	s->last_sent_ms = now;
	pthread_mutex_lock(&ui->mu);
	if (s->registered && !s->done) {
		stream_put(s, text, len);
		s->done = done;
		stream_wake(s);
	}
	pthread_mutex_unlock(&ui->mu);
}

/* Connects the poller (bounded by CONNECT_MS); NULL after a failure, logged. */
static PGconn *poller_connect(struct api_streams *ui)
{
	PGconn *conn = NULL;

	if (db_connect_ex(&conn, ui->conninfo, CONNECT_MS, 0) < 0) {
		flog_warn("ui streams: cannot connect to the database: %s", ferry_error_last());
		return NULL;
	}
	pthread_mutex_lock(&ui->mu);
	ui->cancel = PQgetCancel(conn);
	pthread_mutex_unlock(&ui->mu);
	return conn;
}

static void poller_disconnect(struct api_streams *ui, PGconn *conn)
{
	pthread_mutex_lock(&ui->mu);
	if (ui->cancel)
		PQfreeCancel(ui->cancel);
	ui->cancel = NULL;
	pthread_mutex_unlock(&ui->mu);
	PQfinish(conn);
}

/*
 * The poller, every TICK_MS: ends the streams whose client left; for every
 * stream whose last event was taken, reads its run's marker (once per run)
 * and, when it moved, the run's JSON (once per run), and hands each stream
 * its event, its end, or a keepalive; resumes the streams it gave something.
 */
static void *poller_main(void *arg)
{
	struct api_streams *ui = arg;
	struct pollfd p = {.fd = ui->wake[0], .events = POLLIN};
	struct ui_stream **snap = NULL;
	struct tick_run *runs = NULL;
	PGconn *conn = NULL;
	int64_t next_connect = 0, backoff = 100;
	int cap = 0;

	for (;;) {
		int n = 0, nruns = 0;
		int64_t now;

		if (poll(&p, 1, TICK_MS) > 0)
			break;
		pthread_mutex_lock(&ui->mu);
		if (ui->stopping) {
			pthread_mutex_unlock(&ui->mu);
			break;
		}
		if (ui->nstreams > cap) {
			cap = ui->nstreams;
			snap = xrealloc(snap, (size_t)cap * sizeof(*snap));
			runs = xrealloc(runs, (size_t)cap * sizeof(*runs));
		}
		for (struct ui_stream *s = ui->streams; s; s = s->next) {
			if (s->done || s->gone)
				continue;
			if (s->parked && api_client_gone(s->sock)) {
				s->gone = 1;
				stream_wake(s);
				continue;
			}
			if (s->off < s->len || n == cap)
				continue; /* the client has not taken the last event yet */
			atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
			snap[n++] = s;
		}
		pthread_mutex_unlock(&ui->mu);
		if (n == 0)
			continue;
		now = clock_mono_ms();
		if (conn == NULL && now >= next_connect) {
			if ((conn = poller_connect(ui)) == NULL) {
				next_connect = now + backoff;
				backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
			} else {
				backoff = 100;
			}
		}
		qsort(snap, (size_t)n, sizeof(*snap), by_run);
		for (int i = 0; i < n; i++) {
			struct tick_run *t = NULL;

			if (conn && (nruns == 0 || runs[nruns - 1].id != snap[i]->run_id)) {
				t = &runs[nruns++];
				memset(t, 0, sizeof(*t));
				t->id = snap[i]->run_id;
				t->error = t->id == 0 ? store_events_marker(&t->m.last_event, conn)
						      : store_run_marker(&t->m, conn, t->id);
				if (t->error < 0 && t->error != FERRY_ENOTFOUND) {
					flog_warn("ui streams: %s", ferry_error_last());
					poller_disconnect(ui, conn);
					conn = NULL;
					next_connect = now + backoff;
				}
			} else if (conn && nruns > 0) {
				t = &runs[nruns - 1];
			}
			if (t && conn == NULL)
				t = NULL;
			tick_stream(ui, snap[i], t, conn, now);
			if (conn && PQstatus(conn) != CONNECTION_OK) {
				poller_disconnect(ui, conn);
				conn = NULL;
				next_connect = now + backoff;
			}
		}
		for (int i = 0; i < nruns; i++)
			free(runs[i].event);
		for (int i = 0; i < n; i++)
			stream_unref(snap[i]);
	}
	if (conn)
		poller_disconnect(ui, conn);
	free(snap);
	free(runs);
	return NULL;
}

int api_stream_start(struct api *a)
{
	struct api_streams *ui = xcalloc(1, sizeof(*ui));
	const char *env = getenv("FERRY_UI_STREAMS");
	int64_t max = STREAMS_DEFAULT;
	int error;

	if (env && *env && (parse_int64(env, &max) < 0 || max < 0 || max > STREAMS_MAX)) {
		ferry_error_set("FERRY_UI_STREAMS=%s: not a number of streams from 0 to %d", env, STREAMS_MAX);
		free(ui);
		return FERRY_EINVALID;
	}
	pthread_mutex_init(&ui->mu, NULL);
	ui->max_streams = (int)max;
	ui->wake[0] = ui->wake[1] = -1;
	ui->conninfo = xstrdup(a->conninfo);
	dag_cache_new(&ui->dags, DAG_ENTRIES, DAG_BYTES);
	a->ui = ui;
	if (pipe2(ui->wake, O_CLOEXEC) < 0) {
		ferry_error_set("pipe: %s", strerror(errno));
		return FERRY_ERROR;
	}
	if ((error = pthread_create(&ui->poller, NULL, poller_main, ui)) != 0) {
		ferry_error_set("cannot start a thread: %s", strerror(error));
		return FERRY_ERROR;
	}
	ui->poller_started = 1;
	return FERRY_OK;
}

void api_stream_stop(struct api *a)
{
	struct api_streams *ui = a->ui;

	if (ui == NULL)
		return;
	pthread_mutex_lock(&ui->mu);
	ui->stopping = 1;
	for (struct ui_stream *s = ui->streams; s; s = s->next) {
		s->gone = 1;
		stream_wake(s);
	}
	if (ui->cancel) {
		char err[256];
		(void)PQcancel(ui->cancel, err, sizeof(err));
	}
	pthread_mutex_unlock(&ui->mu);
	if (ui->poller_started) {
		(void)!write(ui->wake[1], "s", 1);
		pthread_join(ui->poller, NULL);
		ui->poller_started = 0;
	}
}

void api_stream_free(struct api *a)
{
	struct api_streams *ui = a->ui;

	if (ui == NULL)
		return;
	api_stream_stop(a);
	if (ui->wake[0] >= 0)
		close(ui->wake[0]);
	if (ui->wake[1] >= 0)
		close(ui->wake[1]);
	dag_cache_free(ui->dags);
	free(ui->conninfo);
	pthread_mutex_destroy(&ui->mu);
	free(ui);
	a->ui = NULL;
}

/* Takes a stream slot, or answers 503: 0 or -1. The slot is given back by stream_free, or by slot_release. */
static int slot_take(struct api_streams *ui, struct reply *r)
{
	char msg[160];

	pthread_mutex_lock(&ui->mu);
	if (ui->stopping || ui->nstreams >= ui->max_streams) {
		pthread_mutex_unlock(&ui->mu);
		snprintf(msg, sizeof(msg),
			 "%d streams (run events and followed logs) are open, the most this daemon serves "
			 "(FERRY_UI_STREAMS); try again later",
			 ui->max_streams);
		reply_error(r, 503, "too_many_streams", NULL, msg, NULL);
		return -1;
	}
	ui->nstreams++; /* the slot is taken now, so that a burst cannot pass the bound */
	pthread_mutex_unlock(&ui->mu);
	return 0;
}

static void slot_release(struct api_streams *ui)
{
	pthread_mutex_lock(&ui->mu);
	ui->nstreams--;
	pthread_mutex_unlock(&ui->mu);
}

int api_stream_slot_take(struct api *a, struct reply *r)
{
	return a->ui ? slot_take(a->ui, r) : 0;
}

void api_stream_slot_release(struct api *a)
{
	if (a->ui)
		slot_release(a->ui);
}

void api_stream_counts(struct api *a, int *open, int *max)
{
	*open = *max = 0;
	if (a->ui) {
		pthread_mutex_lock(&a->ui->mu);
		*open = a->ui->nstreams;
		*max = a->ui->max_streams;
		pthread_mutex_unlock(&a->ui->mu);
	}
}

static void stream_headers(struct reply *r, struct MHD_Response *resp)
{
	MHD_add_response_header(resp, "Content-Type", "text/event-stream; charset=utf-8");
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no"); /* a proxy in front must not hold events back */
	r->status = 200;
	r->resp = resp;
}

/* A stream of run_id (0: the list) holding the slot taken, starting with text (taken over), seen m. */
static void stream_begin(struct api_streams *ui, struct reply *r, struct req *q, int64_t run_id,
			 const struct store_run_marker *m, char *text, int finished)
{
	const union MHD_ConnectionInfo *ci;
	struct MHD_Response *resp;
	struct ui_stream *s = xcalloc(1, sizeof(*s));

	s->ui = ui;
	atomic_init(&s->refs, 1);
	s->conn = q->conn;
	ci = MHD_get_connection_info(q->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	s->sock = ci ? ci->connect_fd : -1;
	s->run_id = run_id;
	s->seen = *m;
	s->last_sent_ms = clock_mono_ms();
	/* the client waits 2 s before it reconnects; then it gets the whole state again */
	s->buf = xasprintf("retry: 2000\n%s", text);
	s->len = strlen(s->buf);
	s->done = finished;
	free(text);
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, stream_read, s, stream_free);
	pthread_mutex_lock(&ui->mu);
	s->registered = 1; /* it holds the slot taken; stream_free gives it back */
	s->next = ui->streams;
	if (ui->streams)
		ui->streams->prev = s;
	ui->streams = s;
	pthread_mutex_unlock(&ui->mu);
	stream_headers(r, resp);
}

void api_run_stream(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	struct api_streams *ui = a->ui;
	struct store_run_marker m;
	char *json = NULL, *text;
	size_t len = 0;
	int error, finished;

	if (slot_take(ui, r) < 0)
		return;
	if ((error = store_run_marker(&m, db, q->id)) < 0 || (error = store_run_json(&json, db, q->id)) < 0) {
		reply_store_error(r, error);
		slot_release(ui);
		return;
	}
	finished = state_finished(m.state);
	if (q->head) {
		free(json);
		stream_headers(r, MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT));
		slot_release(ui);
		return;
	}
	if ((text = event_text(json, finished, &len)) == NULL) {
		reply_error(r, 413, "too_big", NULL, ferry_error_last(), NULL);
		slot_release(ui);
		return;
	}
	stream_begin(ui, r, q, q->id, &m, text, finished);
}

/* GET /runs/stream: `event: runs` with the newest event id at once, then whenever it moves (at most 1/s). */
void api_runs_stream(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	struct api_streams *ui = a->ui;
	struct store_run_marker m;
	int error;

	if (slot_take(ui, r) < 0)
		return;
	memset(&m, 0, sizeof(m));
	if ((error = store_events_marker(&m.last_event, db)) < 0) {
		reply_store_error(r, error);
		slot_release(ui);
		return;
	}
	if (q->head) {
		stream_headers(r, MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT));
		slot_release(ui);
		return;
	}
	stream_begin(ui, r, q, 0, &m, xasprintf("event: runs\ndata: {\"last_event\":%lld}\n\n", (long long)m.last_event), 0);
}

static void svg_release(void *cls)
{
	dag_svg_release(cls);
}

/* Whether If-None-Match (a list of entity tags, or *) names etag. */
static int etag_matches(const char *inm, const char *etag)
{
	size_t n = strlen(etag);

	if (inm == NULL)
		return 0;
	for (const char *p = inm; *p;) {
		p += strspn(p, " \t,");
		if (strncmp(p, "W/", 2) == 0)
			p += 2;
		if (*p == '*' || (strncmp(p, etag, n) == 0 && (p[n] == '\0' || p[n] == ',' || p[n] == ' ')))
			return 1;
		p += strcspn(p, ",");
	}
	return 0;
}

void api_run_dag_svg(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	struct api_streams *ui = a->ui;
	struct store_run_marker m;
	const struct dag_svg *svg = NULL;
	struct MHD_Response *resp;
	json_t *run = NULL;
	char *json = NULL, etag[120];
	int error, hit = 0;

	if ((error = store_run_marker(&m, db, q->id)) < 0) {
		reply_store_error(r, error);
		return;
	}
	snprintf(etag, sizeof(etag), "\"%s.L%d\"", m.workflow_hash, DAG_SVG_LAYOUT_VERSION);
	if (etag_matches(MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "If-None-Match"), etag)) {
		resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
		r->status = 304;
		goto headers;
	}
	svg = dag_cache_get(ui->dags, m.workflow_hash);
	hit = svg != NULL;
	if (svg == NULL) {
		/* the steps of the run are the workflow's, every one of them, with kind and needs */
		if ((error = store_run_json(&json, db, q->id)) < 0) {
			reply_store_error(r, error);
			return;
		}
		run = json_loads(json, 0, NULL);
		free(json);
		error = dag_cache_render(&svg, &hit, ui->dags, m.workflow_hash, json_object_get(run, "steps"));
		json_decref(run);
		if (error < 0) {
			reply_error(r, error == FERRY_EINVALID ? 422 : 500, error == FERRY_EINVALID ? "invalid" : "internal",
				    NULL, ferry_error_last(), NULL);
			return;
		}
	}
	resp = MHD_create_response_from_buffer_with_free_callback_cls(svg->len, (void *)svg->data, svg_release,
								      (void *)svg);
	r->status = 200;
	MHD_add_response_header(resp, "Content-Type", "image/svg+xml");
	MHD_add_response_header(resp, "X-Ferry-Dag-Cache", hit ? "hit" : "miss");
headers:
	MHD_add_response_header(resp, "ETag", etag);
	MHD_add_response_header(resp, "Cache-Control", "private, max-age=86400");
	r->resp = resp;
}

/* GET /runs/{id}/steps/{step}: the step's resolved spec (the command as it ran), read when a step is opened. */
void api_step_get(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *json = NULL;
	int error;

	(void)a;
	if ((error = store_step_spec(&json, db, q->id, q->caps[1])) < 0) {
		reply_store_error(r, error);
		return;
	}
	reply_json(r, 200, json);
}

/* GET /runs/{id}/steps/{step}/items?offset=&limit=&state=: a fan-out's items, a page at a time. */
void api_step_items(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	static const char *const states[] = {"blocked", "ready", "running", "succeeded", "failed", "skipped",
					     "stopped", NULL};
	const char *offset = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "offset");
	const char *limit = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "limit");
	const char *state = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "state");
	int64_t off = 0, lim = 100;
	char *json = NULL;
	int error, known = state == NULL;

	(void)a;
	if (offset && (parse_int64(offset, &off) < 0 || off < 0 || off > 100000)) {
		reply_error(r, 400, "invalid_field", "offset", "offset must be a whole number from 0 to 100000", NULL);
		return;
	}
	if (limit && (parse_int64(limit, &lim) < 0 || lim < 1 || lim > 1000)) {
		reply_error(r, 400, "invalid_field", "limit", "limit must be a whole number from 1 to 1000", NULL);
		return;
	}
	for (int i = 0; state && states[i]; i++)
		known |= strcmp(state, states[i]) == 0;
	if (!known) {
		reply_error(r, 400, "invalid_field", "state",
			    "state must be blocked, ready, running, succeeded, failed, skipped or stopped", NULL);
		return;
	}
	if ((error = store_step_items(&json, db, q->id, q->caps[1], off, (int)lim, state)) < 0) {
		reply_store_error(r, error);
		return;
	}
	reply_json(r, 200, json);
}

/* GET /runs/{id}/timeline: the run's steps as bars in time for the run
 * page's Gantt chart (store_run_timeline), a fan-out one row. */
void api_run_timeline(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *json = NULL;
	int error;

	(void)a;
	if ((error = store_run_timeline(&json, db, q->id)) < 0) {
		reply_store_error(r, error);
		return;
	}
	reply_json(r, 200, json);
}

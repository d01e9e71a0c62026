/*
 * workers — see workers.h. One mutex guards both lists (queued, finished);
 * a condition variable wakes idle threads. The queue is bounded by its
 * producer: the engine submits only what it has claimed, and counts items in
 * flight against its max_jobs.
 */
#include "store/workers.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/db.h"
#include "lib/util.h"

struct worker_arg {
	struct workers *p;
	int slot;
};

struct workers {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct work *queue, *queue_tail; /* submitted, not started */
	struct work *done, *done_tail;   /* finished, not taken */
	int pending;                     /* submitted and not taken */
	int stopping;
	int wake_fd;
	char *conninfo;
	int n;
	pthread_t *threads;
	const char **busy; /* the lanes running now: one per thread at most */
	struct worker_arg *args;
};

/* Under mu: whether lane is running now. */
static int lane_busy(const struct workers *p, const char *lane)
{
	if (lane[0] == '\0')
		return 0;
	for (int i = 0; i < p->n; i++)
		if (p->busy[i] && strcmp(p->busy[i], lane) == 0)
			return 1;
	return 0;
}

/* Under mu: the first queued item whose lane is free, unlinked; NULL when none is. */
static struct work *take_runnable(struct workers *p)
{
	for (struct work *w = p->queue, *prev = NULL; w; prev = w, w = w->next) {
		if (lane_busy(p, w->lane))
			continue;
		if (prev)
			prev->next = w->next;
		else
			p->queue = w->next;
		if (p->queue_tail == w)
			p->queue_tail = prev;
		w->next = NULL;
		return w;
	}
	return NULL;
}

static void append(struct work **head, struct work **tail, struct work *w)
{
	w->next = NULL;
	if (*tail)
		(*tail)->next = w;
	else
		*head = w;
	*tail = w;
}

static void *worker_main(void *arg)
{
	struct workers *p = ((struct worker_arg *)arg)->p;
	int slot = ((struct worker_arg *)arg)->slot;
	PGconn *conn = NULL;

	/*
	 * Not niced: what a worker starts (HAProxy, a model server, gdb, podman)
	 * would inherit it. The bulk CPU work that must yield to the dispatcher
	 * (hashing an artifact or a dataset) runs niced by itself (run_niced in
	 * lib/util.h; dispatch_slow_neighbour measures it).
	 */
	for (;;) {
		struct work *w;
		pthread_mutex_lock(&p->mu);
		while ((w = take_runnable(p)) == NULL && !(p->stopping && p->queue == NULL))
			pthread_cond_wait(&p->cv, &p->mu);
		if (w == NULL) { /* stopping, and nothing left */
			pthread_mutex_unlock(&p->mu);
			break;
		}
		p->busy[slot] = w->lane[0] ? w->lane : NULL;
		pthread_mutex_unlock(&p->mu);

		if (conn && PQstatus(conn) != CONNECTION_OK) {
			PQfinish(conn);
			conn = NULL;
		}
		if (conn == NULL && db_connect(&conn, p->conninfo) < 0)
			flog_warn("worker: %s", ferry_error_last());
		w->run(w, conn);

		pthread_mutex_lock(&p->mu);
		p->busy[slot] = NULL;
		append(&p->done, &p->done_tail, w);
		pthread_cond_broadcast(&p->cv); /* an item waiting for this lane may go */
		pthread_mutex_unlock(&p->mu);
		(void)!write(p->wake_fd, "w", 1);
	}
	if (conn)
		PQfinish(conn);
	return NULL;
}

int workers_new(struct workers **out, int n, const char *conninfo, int wake_fd)
{
	struct workers *p = xcalloc(1, sizeof(*p));

	*out = NULL;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->wake_fd = wake_fd;
	p->conninfo = xstrdup(conninfo);
	p->threads = xcalloc((size_t)n, sizeof(*p->threads));
	p->busy = xcalloc((size_t)n, sizeof(*p->busy));
	p->args = xcalloc((size_t)n, sizeof(*p->args));
	for (p->n = 0; p->n < n; p->n++) {
		p->args[p->n] = (struct worker_arg){p, p->n};
		if (pthread_create(&p->threads[p->n], NULL, worker_main, &p->args[p->n]) != 0) {
			ferry_error_set("cannot start worker thread %d of %d", p->n + 1, n);
			workers_free(p, NULL);
			return FERRY_ERROR;
		}
	}
	*out = p;
	return FERRY_OK;
}

void workers_submit(struct workers *p, struct work *w)
{
	pthread_mutex_lock(&p->mu);
	append(&p->queue, &p->queue_tail, w);
	p->pending++;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

struct work *workers_take(struct workers *p)
{
	struct work *list, *w;

	pthread_mutex_lock(&p->mu);
	list = p->done;
	p->done = p->done_tail = NULL;
	for (w = list; w; w = w->next)
		p->pending--;
	pthread_mutex_unlock(&p->mu);
	return list;
}

int workers_pending(struct workers *p)
{
	int n;

	pthread_mutex_lock(&p->mu);
	n = p->pending;
	pthread_mutex_unlock(&p->mu);
	return n;
}

void workers_free(struct workers *p, void (*drop)(struct work *w))
{
	struct work *w, *next;

	if (p == NULL)
		return;
	pthread_mutex_lock(&p->mu);
	p->stopping = 1;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->n; i++)
		pthread_join(p->threads[i], NULL);
	for (w = p->done; w; w = next) {
		next = w->next;
		if (drop)
			drop(w);
	}
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p->threads);
	free(p->busy);
	free(p->args);
	free(p->conninfo);
	free(p);
}

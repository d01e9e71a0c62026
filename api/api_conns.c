/*
 * api_conns — see api_conns.h: a deadline for a request's headers and a
 * cap on connections waiting for them, against slow header senders.
 */
#include "api/api_conns.h"

#include <stdlib.h>
#include <sys/socket.h>

#include "lib/metrics.h"
#include "lib/util.h"

struct api_conn {
	int fd;
	int64_t deadline_ms;
	int linked; /* on the waiting list */
	struct api_conn *prev, *next;
};

void api_conns_init(struct api_conns *c, int64_t header_ms, int64_t idle_ms)
{
	pthread_mutex_init(&c->mu, NULL);
	c->head = c->tail = NULL;
	c->waiting = 0;
	c->header_ms = header_ms;
	c->idle_ms = idle_ms;
	atomic_init(&c->cut, 0);
}

void api_conns_dispose(struct api_conns *c)
{
	pthread_mutex_destroy(&c->mu);
}

static void unlink_one(struct api_conns *c, struct api_conn *x)
{
	if (!x->linked)
		return;
	if (x->prev)
		x->prev->next = x->next;
	else
		c->head = x->next;
	if (x->next)
		x->next->prev = x->prev;
	else
		c->tail = x->prev;
	x->prev = x->next = NULL;
	x->linked = 0;
	c->waiting--;
}

static void link_tail(struct api_conns *c, struct api_conn *x, int64_t deadline_ms)
{
	unlink_one(c, x);
	x->deadline_ms = deadline_ms;
	x->prev = c->tail;
	x->next = NULL;
	if (c->tail)
		c->tail->next = x;
	else
		c->head = x;
	c->tail = x;
	x->linked = 1;
	c->waiting++;
}

/* Under c->mu: the socket ends (MHD closes it once it reads the end), and x waits no more. */
static void cut(struct api_conns *c, struct api_conn *x)
{
	shutdown(x->fd, SHUT_RDWR);
	unlink_one(c, x);
	atomic_fetch_add(&c->cut, 1);
	metrics_add(M_API_CONNS_CUT, 1);
}

void api_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
		      enum MHD_ConnectionNotificationCode toe)
{
	struct api_conns *c = cls;
	struct api_conn *x = *socket_context;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		x = xcalloc(1, sizeof(*x));
		x->fd = ci ? ci->connect_fd : -1;
		*socket_context = x;
		if (x->fd < 0)
			return;
		pthread_mutex_lock(&c->mu);
		link_tail(c, x, clock_mono_ms() + c->header_ms);
		if (c->waiting > API_CONNS_WAITING)
			cut(c, c->head); /* the longest waiter: a real client's headers come at once */
		pthread_mutex_unlock(&c->mu);
		return;
	}
	if (x == NULL)
		return;
	/* CLOSED: MHD closes the socket after this returns, so a sweep holding the lock never shuts another */
	pthread_mutex_lock(&c->mu);
	unlink_one(c, x);
	pthread_mutex_unlock(&c->mu);
	free(x);
	*socket_context = NULL;
}

static struct api_conn *of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

void api_conns_headers_in(struct api_conns *c, struct MHD_Connection *conn)
{
	struct api_conn *x = of(conn);

	if (x == NULL)
		return;
	pthread_mutex_lock(&c->mu);
	unlink_one(c, x);
	pthread_mutex_unlock(&c->mu);
}

void api_conns_request_done(struct api_conns *c, struct MHD_Connection *conn)
{
	struct api_conn *x = of(conn);

	if (x == NULL || x->fd < 0)
		return;
	pthread_mutex_lock(&c->mu);
	link_tail(c, x, clock_mono_ms() + c->idle_ms + c->header_ms);
	if (c->waiting > API_CONNS_WAITING)
		cut(c, c->head);
	pthread_mutex_unlock(&c->mu);
}

void api_conns_sweep(struct api_conns *c)
{
	int64_t now = clock_mono_ms();

	pthread_mutex_lock(&c->mu);
	/* not in deadline order (keep-alive waits longer), so the whole list: at most API_CONNS_WAITING */
	for (struct api_conn *x = c->head, *next; x; x = next) {
		next = x->next;
		if (x->deadline_ms <= now)
			cut(c, x);
	}
	pthread_mutex_unlock(&c->mu);
}

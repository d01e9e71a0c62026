/*
 * api_conns — connections that have not yet said what they want, bounded.
 *
 * A client that opens a connection and sends its headers a line at a time
 * (slowloris) is never idle, so MHD's idle timeout never closes it; 300 of
 * them from 127.0.0.1 took every connection the per-address limit allowed
 * and /healthz failed for as long as they kept on (issue 24). Here every
 * connection is tracked from its accept (MHD_OPTION_NOTIFY_CONNECTION)
 * until its request's headers are complete (the first call of the request
 * handler), and again from the end of each request until the next one's
 * headers (keep-alive). Two bounds hold:
 *  - a deadline: headers complete within FERRY_API_HEADER_TIMEOUT_MS of
 *    the accept (default 10 s; an idle keep-alive connection gets the idle
 *    timeout on top), or the connection is shut down;
 *  - a cap: at most API_CONNS_WAITING connections waiting at once; past it
 *    the one that has waited longest is shut down. A real client sends its
 *    headers in one write, so it is never the oldest waiter: capacity stays
 *    for requests that arrive whole, authenticated or not.
 * Shutting down is shutdown(2) of the socket, under the list's lock, so MHD
 * (which closes the socket only after its CLOSED notification, which takes
 * the same lock) sees the end of the stream and closes it itself; the
 * sweep runs on the API's ticker thread (api_logs.c).
 */
#ifndef FERRY_API_CONNS_H
#define FERRY_API_CONNS_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define API_CONNS_WAITING 128 /* a quarter of the 512 connections MHD takes */

struct api_conn;

struct api_conns {
	pthread_mutex_t mu;
	struct api_conn *head, *tail; /* in the order they began to wait; done ones unlinked */
	int waiting;
	int64_t header_ms, idle_ms;
	atomic_long cut; /* shut down: over the deadline or the cap */
};

/* header_ms: the deadline for headers; idle_ms: MHD's idle timeout, allowed on top between requests. */
void api_conns_init(struct api_conns *c, int64_t header_ms, int64_t idle_ms);
void api_conns_dispose(struct api_conns *c);

/* MHD_OPTION_NOTIFY_CONNECTION's callback; cls is the struct api_conns. */
void api_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
		      enum MHD_ConnectionNotificationCode toe);

/* The request handler's first call: conn's headers are in, it waits no more. */
void api_conns_headers_in(struct api_conns *c, struct MHD_Connection *conn);

/* A request on conn completed: it waits for the next one's headers (keep-alive). */
void api_conns_request_done(struct api_conns *c, struct MHD_Connection *conn);

/* Shuts down the connections past their deadline; the ticker calls it a few times a second. */
void api_conns_sweep(struct api_conns *c);

#endif

/*
 * api_forward — a request for something another host holds (a step's log
 * or output file its job wrote there) answered by that host's API, through this one: the
 * fleet's daemons share one database, not a disk (issue 29).
 *
 * The host's address is its newest live daemon's (daemons, GET /hosts).
 * A thread per forwarded request runs the GET with libcurl — the client's
 * own Authorization (tokens live in the database: every daemon knows
 * them; the daemons' own token, FERRY_API_TOKEN, is shared by a fleet) and
 * X-Ferry-Forwarded, so the host serves it locally and never forwards it
 * again — and writes the body into a pipe. The answer is streamed from
 * that pipe by the MHD worker, which never waits: with nothing to read
 * the connection is parked like a followed log (api_logs.c) and resumed
 * as soon as the thread has written more (or at the ticker's next round,
 * PARK_MS, when the two crossed). The pipe (1 MiB) bounds memory whatever the size of
 * the log; a followed log streams as long as the host streams it. A host
 * with no live daemon, or one that does not answer within FWD_CONNECT_MS,
 * is a 503 naming it.
 */
#include "api/api_priv.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "lib/util.h"

#define FWD_CONNECT_MS 5000     /* the host answers its headers within this, or it is unreachable */
#define FWD_WHOLE_MS 300000     /* a transfer that is not followed ends within this */
#define FWD_PIPE_BYTES (1 << 20)

struct fwd {
	atomic_int refs; /* the thread and the response */
	atomic_int cancel;
	int rd, wr;      /* the pipe: the thread writes, the MHD worker reads */
	struct api *api;
	struct MHD_Connection *conn;
	int sock;        /* the client's socket (to notice it leave) */
	int follow;      /* a followed log: it takes a stream slot */
	char *url, *auth;
	CURL *curl;      /* the thread's handle (the header callback reads the status from it) */
	/* filled by the thread before it signals headers_done */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int headers_done, finished;
	long status;
	char ctype[128], attempt[32], size[32], sha[72];
	CURLcode result;
	char err[CURL_ERROR_SIZE];
};

char *api_path_escape(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = xmalloc(strlen(s) * 3 + 1), *o = out;

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("-._~", c)) {
			*o++ = (char)c;
		} else {
			*o++ = '%';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
	}
	*o = '\0';
	return out;
}

static void fwd_unref(struct fwd *f)
{
	if (atomic_fetch_sub(&f->refs, 1) != 1)
		return;
	if (f->rd >= 0)
		close(f->rd);
	if (f->wr >= 0)
		close(f->wr);
	pthread_mutex_destroy(&f->mu);
	pthread_cond_destroy(&f->cv);
	if (f->auth)
		explicit_bzero(f->auth, strlen(f->auth));
	free(f->url), free(f->auth);
	free(f);
}

/* Copies header value v (len n, CRLF trimmed) into dst. */
static void take(char *dst, size_t cap, const char *v, size_t n)
{
	while (n > 0 && (v[n - 1] == '\r' || v[n - 1] == '\n'))
		n--;
	while (n > 0 && *v == ' ')
		v++, n--;
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, v, n);
	dst[n] = '\0';
}

static size_t on_header(char *buf, size_t size, size_t n, void *cls)
{
	struct fwd *f = cls;
	size_t len = size * n;
	static const struct {
		const char *name;
		size_t off, cap;
	} keep[] = {
		{"content-type:", offsetof(struct fwd, ctype), sizeof(((struct fwd *)0)->ctype)},
		{"x-ferry-attempt:", offsetof(struct fwd, attempt), sizeof(((struct fwd *)0)->attempt)},
		{"x-ferry-log-size:", offsetof(struct fwd, size), sizeof(((struct fwd *)0)->size)},
		{"x-ferry-sha256:", offsetof(struct fwd, sha), sizeof(((struct fwd *)0)->sha)},
	};

	if (len <= 2 && (len == 0 || buf[0] == '\r' || buf[0] == '\n')) {
		/* the end of the headers (of the last response: redirects are not followed) */
		pthread_mutex_lock(&f->mu);
		curl_easy_getinfo(f->curl, CURLINFO_RESPONSE_CODE, &f->status);
		f->headers_done = 1;
		pthread_cond_broadcast(&f->cv);
		pthread_mutex_unlock(&f->mu);
		return len;
	}
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
		size_t kl = strlen(keep[i].name);
		if (len > kl && strncasecmp(buf, keep[i].name, kl) == 0)
			take((char *)f + keep[i].off, keep[i].cap, buf + kl, len - kl);
	}
	return len;
}

/* The body into the pipe, waiting while it is full (the client reads slowly), until cancelled. */
static size_t on_body(char *buf, size_t size, size_t n, void *cls)
{
	struct fwd *f = cls;
	size_t len = size * n, done = 0;

	while (done < len) {
		struct pollfd p = {.fd = f->wr, .events = POLLOUT};
		ssize_t w;
		if (atomic_load(&f->cancel))
			return 0; /* the client left: the transfer ends */
		if (poll(&p, 1, 200) <= 0)
			continue;
		w = write(f->wr, buf + done, len - done);
		if (w < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (w < 0)
			return 0;
		done += (size_t)w;
	}
	/* the MHD worker parked the client while the pipe was empty: on at once */
	api_logs_unpark(f->api, f->conn);
	return len;
}

static void *fwd_thread(void *arg)
{
	struct fwd *f = arg;
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;

	if (c == NULL) {
		f->result = CURLE_OUT_OF_MEMORY; /* before anyone reads it: headers_done stays 0 */
		snprintf(f->err, sizeof(f->err), "curl_easy_init failed");
	} else {
		f->curl = c;
		h = curl_slist_append(h, f->auth);
		h = curl_slist_append(h, "X-Ferry-Forwarded: 1");
		curl_easy_setopt(c, CURLOPT_URL, f->url);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)FWD_CONNECT_MS);
		if (!f->follow)
			curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)FWD_WHOLE_MS);
		curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(c, CURLOPT_HEADERDATA, f);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
		curl_easy_setopt(c, CURLOPT_ERRORBUFFER, f->err);
		CURLcode res = curl_easy_perform(c);
		pthread_mutex_lock(&f->mu);
		f->result = res;
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &f->status);
		pthread_mutex_unlock(&f->mu);
		curl_slist_free_all(h);
		curl_easy_cleanup(c);
	}
	pthread_mutex_lock(&f->mu);
	f->finished = 1;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	close(f->wr); /* EOF for the reader */
	f->wr = -1;
	if (!atomic_load(&f->cancel))
		api_logs_unpark(f->api, f->conn);
	fwd_unref(f);
	return NULL;
}

/* The MHD worker: what the pipe holds, parked when it holds nothing yet; never waits. */
static ssize_t fwd_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct fwd *f = cls;
	ssize_t n;

	(void)pos;
	for (;;) {
		n = read(f->rd, buf, max);
		if (n > 0)
			return n;
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0) {
			/* EOF: the thread is done; how the transfer ended, read under its lock */
			CURLcode res;
			pthread_mutex_lock(&f->mu);
			res = f->result;
			pthread_mutex_unlock(&f->mu);
			return res == CURLE_OK ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
		}
		if (errno != EAGAIN)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (f->api->stopping || api_client_gone(f->sock) || !api_logs_park(f->api, f->conn))
			return MHD_CONTENT_READER_END_WITH_ERROR;
		return 0;
	}
}

static void fwd_free(void *cls)
{
	struct fwd *f = cls;

	atomic_store(&f->cancel, 1);
	if (f->follow)
		api_stream_slot_release(f->api);
	fwd_unref(f);
}

int api_forward(struct api *a, struct reply *r, PGconn *db, struct req *q, const char *host, const char *path_query,
		const char *what, int have_here)
{
	char self[256], *address = NULL, *last_seen = NULL, *msg;
	const char *auth = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "Authorization");
	const char *fwd_hdr = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "X-Ferry-Forwarded");
	int live = 0, error, follow = strstr(path_query, "follow=1") != NULL, headers;
	char why[CURL_ERROR_SIZE];
	struct fwd *f;
	pthread_t th;
	struct MHD_Response *resp;

	ferry_host_name(self, sizeof(self));
	if (host == NULL || strcmp(host, self) == 0 || fwd_hdr != NULL)
		return 0; /* ours, or forwarded to us already: served here */
	if ((error = store_host_address(&address, &live, &last_seen, db, host)) < 0) {
		reply_store_error(r, error);
		return 1;
	}
	if ((address == NULL || !live) && have_here) {
		/* its host is down, and a copy is here (a shared FERRY_HOME, a host renamed): served here */
		free(address), free(last_seen);
		return 0;
	}
	if (address == NULL || !live) {
		if (address == NULL)
			msg = xasprintf("%s is on host %s, which no daemon of the fleet has named (GET /hosts)", what, host);
		else
			msg = xasprintf("%s is on host %s, which is lost (last seen %s); it is served again when a "
					"daemon of %s is up", what, host, last_seen ? last_seen : "?", host);
		reply_error(r, 503, "host_unavailable", NULL, msg, NULL);
		free(msg), free(address), free(last_seen);
		return 1;
	}
	if (follow && api_stream_slot_take(a, r) < 0) {
		free(address), free(last_seen);
		return 1;
	}
	f = xcalloc(1, sizeof(*f));
	atomic_init(&f->refs, 2);
	f->rd = f->wr = -1;
	f->api = a;
	f->conn = q->conn;
	f->follow = follow;
	f->url = xasprintf("%s%s", address, path_query);
	f->auth = xasprintf("Authorization: %s", auth ? auth : "");
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	{
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(q->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		f->sock = ci ? ci->connect_fd : -1;
	}
	{
		int p[2];
		if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
			reply_error(r, 500, "internal", NULL, "cannot make a pipe for the forwarded answer", NULL);
			goto fail;
		}
		f->rd = p[0];
		f->wr = p[1];
		(void)fcntl(f->wr, F_SETPIPE_SZ, FWD_PIPE_BYTES);
	}
	if (pthread_create(&th, NULL, fwd_thread, f) != 0) {
		reply_error(r, 500, "internal", NULL, "cannot start the forwarding thread", NULL);
		goto fail;
	}
	pthread_detach(th);
	/* the host's status and headers (bounded: connect + its first answer) */
	pthread_mutex_lock(&f->mu);
	{
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += FWD_CONNECT_MS / 1000 + 1;
		while (!f->headers_done && !f->finished)
			if (pthread_cond_timedwait(&f->cv, &f->mu, &until) != 0)
				break;
	}
	headers = f->headers_done;
	/* curl's message is complete once the thread is finished (its buffer is written during the transfer) */
	snprintf(why, sizeof(why), "%s", f->finished && f->err[0] ? f->err : "no answer in time");
	pthread_mutex_unlock(&f->mu);
	if (!headers) {
		atomic_store(&f->cancel, 1);
		msg = xasprintf("%s is on host %s, whose API at %s did not answer: %s", what, host, address, why);
		reply_error(r, 503, "host_unreachable", NULL, msg, NULL);
		free(msg);
		if (follow)
			api_stream_slot_release(a);
		fwd_unref(f);
		free(address), free(last_seen);
		return 1;
	}
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, fwd_read, f, fwd_free);
	MHD_add_response_header(resp, "Content-Type", f->ctype[0] ? f->ctype : "application/octet-stream");
	if (f->attempt[0])
		MHD_add_response_header(resp, "X-Ferry-Attempt", f->attempt);
	if (f->size[0])
		MHD_add_response_header(resp, "X-Ferry-Log-Size", f->size);
	if (f->sha[0])
		MHD_add_response_header(resp, "X-Ferry-Sha256", f->sha);
	MHD_add_response_header(resp, "X-Ferry-Host", host);
	r->status = (unsigned)(f->status >= 100 && f->status < 600 ? f->status : 502);
	r->resp = resp;
	free(address), free(last_seen);
	return 1;
fail:
	if (follow)
		api_stream_slot_release(a);
	atomic_store(&f->refs, 1);
	fwd_unref(f);
	free(address), free(last_seen);
	return 1;
}

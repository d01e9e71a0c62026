/*
 * suite_calls — the integration suite's `sql QUERY` and `api METHOD PATH
 * [BODY]` (lib.sh) as a server: one process for the whole run instead of a
 * psql or a curl per call. A psql costs about 21 ms of CPU on the 2-core
 * test machine (15 ms of its own: loading libpq and its libraries, SCRAM's
 * 4,096 rounds; 6 ms for the server's new backend), a curl about 7 ms, and
 * a run makes some 1,800 of the first and thousands of the second; bash
 * reaches this over /dev/tcp with no process started (as json_eval.py
 * serves `json`).
 *
 * Usage: suite_calls FILE — listens on 127.0.0.1 (a port the kernel
 * picks), writes "PORT TOKEN" to FILE (mode 0600) and serves until killed.
 * A request: TOKEN "\n" KIND " " LEN_1 " " … LEN_n "\n" FIELD_1 … FIELD_n
 * (lengths in bytes); a request without the token, or malformed, is closed
 * unanswered. The answer: STATUS " " LEN_OUT "\n", what goes to stdout,
 * then what goes to stderr; the connection closes.
 *
 *   sql CONNINFO QUERY: what `psql -qAt -v ON_ERROR_STOP=1 -c QUERY` does.
 *     STATUS and both outputs are psql's: every result of a command string
 *     of several statements (one transaction), rows as fields joined by
 *     "|" (NULL empty), notices and errors as the server words them; 1 for
 *     an error, 2 when the database cannot be reached. The connection is
 *     kept per database and reused only idle and outside a transaction,
 *     checked first (one a test terminated or a restarted server closed is
 *     dropped, never written to). A session differs from psql's only in
 *     what a query leaves in it (SET, temporary tables, session advisory
 *     locks: none of the tests' `sql` calls does; those that need a session
 *     of their own run psql). COPY is not served (status 1). Idle
 *     connections are closed after IDLE_S seconds or beyond KEEP.
 *   http METHOD URL TOKEN BODY: what api's curl does (-X METHOD, the bearer
 *     TOKEN, JSON content type, X-Ferry-Actor: tester, BODY when not
 *     empty, no redirect followed, a new connection each time). STATUS is
 *     the HTTP code (0 when there was no answer: curl's 000, its message on
 *     stderr), stdout the body.
 *
 * Each request has a thread of its own: a slow call never holds another.
 */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lib/util.h"

#define KEEP 24      /* idle database connections kept, over all databases */
#define IDLE_S 30    /* an idle connection older than this is closed */
#define MAX_IN (64ul << 20) /* bytes of one field */

struct conn {
	char *conninfo;
	PGconn *pg;
	time_t used;
	struct conn *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct conn *idle; /* most recently used first */
static char token[33];

/* A growing buffer. */
struct buf {
	char *p;
	size_t n, cap;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		b->cap = (b->n + n + 1) * 2;
		b->p = realloc(b->p, b->cap);
		if (b->p == NULL)
			abort();
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static void puts_(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

static void notice(void *arg, const char *message)
{
	puts_(arg, message);
}

/* Between requests a kept connection's notices go nowhere (its buffer is gone). */
static void no_notice(void *arg, const char *message)
{
	(void)arg, (void)message;
}

/* An idle connection to conninfo that is still good, or NULL; closes the stale ones it meets. */
static PGconn *take(const char *conninfo)
{
	struct conn **pp, *c, *dead = NULL;
	PGconn *pg = NULL;
	time_t now = time(NULL);
	int kept = 0;

	pthread_mutex_lock(&lock);
	for (pp = &idle; (c = *pp) != NULL;) {
		if (pg == NULL && strcmp(c->conninfo, conninfo) == 0) {
			*pp = c->next;
			pg = c->pg;
			free(c->conninfo);
			free(c);
			continue;
		}
		if (now - c->used > IDLE_S || ++kept > KEEP) {
			*pp = c->next;
			c->next = dead;
			dead = c;
			continue;
		}
		pp = &c->next;
	}
	pthread_mutex_unlock(&lock);
	for (c = dead; c; c = dead) {
		dead = c->next;
		PQfinish(c->pg);
		free(c->conninfo);
		free(c);
	}
	/*
	 * An idle session is sent nothing (no LISTEN here): anything to read, or
	 * the end, is what a terminated backend or a restarted server left. Such
	 * a connection is dropped before anything is written to it.
	 */
	if (pg) {
		struct pollfd p = {.fd = PQsocket(pg), .events = POLLIN};
		if (PQstatus(pg) != CONNECTION_OK || p.fd < 0 || poll(&p, 1, 0) != 0) {
			PQfinish(pg);
			pg = NULL;
		}
	}
	return pg;
}

static void give_back(const char *conninfo, PGconn *pg)
{
	struct conn *c;

	if (PQstatus(pg) != CONNECTION_OK || PQtransactionStatus(pg) != PQTRANS_IDLE) {
		PQfinish(pg);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL || (c->conninfo = strdup(conninfo)) == NULL)
		abort();
	c->pg = pg;
	c->used = time(NULL);
	pthread_mutex_lock(&lock);
	c->next = idle;
	idle = c;
	pthread_mutex_unlock(&lock);
}

/* Runs query as psql -qAt -c would; its status. */
static int run(const char *conninfo, const char *query, struct buf *out, struct buf *err)
{
	PGconn *pg = take(conninfo);
	PGresult *r;
	int status = 0;

	if (pg == NULL) {
		const char *keys[] = {"dbname", "application_name", NULL};
		const char *vals[] = {conninfo, "ferry-test-sql", NULL};
		pg = PQconnectdbParams(keys, vals, 1);
		if (PQstatus(pg) != CONNECTION_OK) {
			puts_(err, "psql: error: ");
			puts_(err, PQerrorMessage(pg));
			PQfinish(pg);
			return 2;
		}
	}
	PQsetNoticeProcessor(pg, notice, err);
	if (!PQsendQuery(pg, query)) {
		puts_(err, PQerrorMessage(pg));
		PQfinish(pg);
		return 2;
	}
	while ((r = PQgetResult(pg)) != NULL) {
		switch (PQresultStatus(r)) {
		case PGRES_TUPLES_OK:
			for (int i = 0; i < PQntuples(r); i++) {
				for (int k = 0; k < PQnfields(r); k++) {
					if (k)
						put(out, "|", 1);
					if (!PQgetisnull(r, i, k))
						put(out, PQgetvalue(r, i, k), (size_t)PQgetlength(r, i, k));
				}
				put(out, "\n", 1);
			}
			break;
		case PGRES_COMMAND_OK:
		case PGRES_EMPTY_QUERY:
			break;
		case PGRES_COPY_OUT:
		case PGRES_COPY_IN:
		case PGRES_COPY_BOTH:
			puts_(err, "suite_calls: COPY is not served: run psql\n");
			PQclear(r);
			PQfinish(pg);
			return 1;
		default:
			puts_(err, PQresultErrorMessage(r));
			status = 1;
		}
		PQclear(r);
	}
	PQsetNoticeProcessor(pg, no_notice, NULL);
	give_back(conninfo, pg);
	return status;
}

static int read_all(int fd, char *p, size_t n)
{
	while (n > 0) {
		ssize_t k = read(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p += k, n -= (size_t)k;
	}
	return 0;
}

/* One line (at most cap - 1 bytes, without its newline) read byte by byte: the body follows it. */
static int read_line(int fd, char *line, size_t cap)
{
	size_t n = 0;

	while (n + 1 < cap) {
		if (read_all(fd, line + n, 1) < 0)
			return -1;
		if (line[n] == '\n') {
			line[n] = '\0';
			return 0;
		}
		n++;
	}
	return -1;
}

/* http: see the header. */
static size_t http_body(char *p, size_t size, size_t n, void *arg)
{
	put(arg, p, size * n);
	return size * n;
}

static int http(const char *method, const char *url, const char *bearer, const char *body, size_t nbody,
		struct buf *out, struct buf *err)
{
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;
	char *auth = NULL, msg[CURL_ERROR_SIZE] = "";
	long code = 0;
	CURLcode rc;

	if (c == NULL || asprintf(&auth, "Authorization: Bearer %s", bearer) < 0)
		abort();
	h = curl_slist_append(h, auth);
	h = curl_slist_append(h, "Content-Type: application/json");
	h = curl_slist_append(h, "X-Ferry-Actor: tester");
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "curl/" LIBCURL_VERSION);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, msg);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_FORBID_REUSE, 1L);
	if (nbody > 0) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)nbody);
	}
	rc = curl_easy_perform(c);
	if (rc == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	else {
		char line[CURL_ERROR_SIZE + 32];
		snprintf(line, sizeof(line), "curl: (%d) %s\n", (int)rc, msg[0] ? msg : curl_easy_strerror(rc));
		puts_(err, line);
	}
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	free(auth);
	return (int)code;
}

/* "KIND N1 N2 …": the kind and up to max lengths; how many, or -1. */
static int request_line(char *line, const char **kind, unsigned long *len, int max)
{
	char *p = strchr(line, ' '), *end;
	int n = 0;

	if (p == NULL)
		return -1;
	*p++ = '\0';
	*kind = line;
	while (*p && n < max) {
		errno = 0;
		len[n] = strtoul(p, &end, 10);
		if (end == p || errno || len[n] > MAX_IN || (*end != ' ' && *end != '\0'))
			return -1;
		n++;
		p = *end ? end + 1 : end;
	}
	return *p ? -1 : n;
}

static void *serve(void *arg)
{
	int fd = (int)(intptr_t)arg, n, status;
	char line[128], head[48], *field[4] = {NULL};
	const char *kind;
	unsigned long len[4];
	struct buf out = {0}, err = {0};

	if (read_line(fd, line, sizeof(line)) < 0 || strcmp(line, token) != 0 ||
	    read_line(fd, line, sizeof(line)) < 0 || (n = request_line(line, &kind, len, 4)) < 0)
		goto out;
	for (int i = 0; i < n; i++)
		if ((field[i] = calloc(1, len[i] + 1)) == NULL || read_all(fd, field[i], len[i]) < 0)
			goto out;
	if (strcmp(kind, "sql") == 0 && n == 2 && len[0] > 0)
		status = run(field[0], field[1], &out, &err);
	else if (strcmp(kind, "http") == 0 && n == 4 && len[0] > 0 && len[1] > 0)
		status = http(field[0], field[1], field[2], field[3], len[3], &out, &err);
	else
		goto out;
	snprintf(head, sizeof(head), "%d %zu\n", status, out.n);
	if (fd_write_all(fd, head, strlen(head)) == 0 && fd_write_all(fd, out.p ? out.p : "", out.n) == 0)
		(void)fd_write_all(fd, err.p ? err.p : "", err.n);
out:
	close(fd);
	for (int i = 0; i < 4; i++)
		free(field[i]);
	free(out.p), free(err.p);
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	unsigned char raw[16];
	char *tmp;
	FILE *f;
	int s, fd;

	if (argc != 2) {
		fprintf(stderr, "usage: suite_calls FILE\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return 1;
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(token + 2 * i, 3, "%02x", raw[i]);
	s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 64) < 0 ||
	    getsockname(s, (struct sockaddr *)&a, &len) < 0) {
		perror("suite_calls: listen");
		return 1;
	}
	if (asprintf(&tmp, "%s.tmp", argv[1]) < 0)
		return 1;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || (f = fdopen(fd, "w")) == NULL || fprintf(f, "%d %s\n", ntohs(a.sin_port), token) < 0 ||
	    fclose(f) != 0 || rename(tmp, argv[1]) < 0) {
		perror("suite_calls: address file");
		return 1;
	}
	for (;;) {
		pthread_t t;
		pthread_attr_t at;
		int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
				continue;
			perror("suite_calls: accept");
			return 1;
		}
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &at, serve, (void *)(intptr_t)c) != 0)
			close(c);
		pthread_attr_destroy(&at);
	}
}

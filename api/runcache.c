/*
 * runcache — see runcache.h. A hash table of entries keyed by run id, chained,
 * with a doubly linked list in recency order (head: most recent) to evict
 * from the tail; one mutex guards both, held only for pointer work. Entries
 * are immutable and reference-counted (the table holds one reference, each
 * reader one), so a reply may still be sending an entry that was dropped.
 *
 * The listener is a thread with its own libpq connection driven
 * non-blocking: connect, LISTEN ferry_run, then wait on the socket (and a
 * pipe that stop writes to) at most a second at a time; every notification
 * drops one run; every 10 s of quiet a SELECT 1 checks the connection. On
 * any failure the cache is turned off (and so emptied), the connection
 * closed, and it reconnects after 100 ms, doubling to 5 s.
 */
#include "api/runcache.h"

#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/util.h"

#define LISTEN_CHANNEL "ferry_run"
#define APP_NAME "ferryd-run-cache"
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define IDLE_CHECK_MS 10000
#define QUERY_TIMEOUT_MS 5000

struct entry {
	struct runcache_json pub; /* first: runcache_json_release finds the entry from it */
	atomic_int refs;
	int64_t id;
	struct entry *hnext;       /* hash chain */
	struct entry *prev, *next; /* recency list */
	char data[];
};

struct runcache {
	pthread_mutex_t mu;
	struct entry **buckets;
	size_t nbuckets; /* a power of two */
	struct entry *head, *tail;
	size_t max_entries, max_bytes, max_entry_bytes;
	size_t entries, bytes;
	uint64_t epoch;
	int enabled;
	uint64_t hits, misses, inserts, invalidations, flushes, evictions;

	/* the listener */
	pthread_t thread;
	int thread_started;
	int wake[2]; /* stop writes to wake[1] */
	atomic_int stopping;
	char *conninfo;
};

static size_t bucket_of(const struct runcache *c, int64_t id)
{
	uint64_t h = (uint64_t)id * UINT64_C(0x9E3779B97F4A7C15);
	return (size_t)(h >> 32) & (c->nbuckets - 1);
}

static void entry_unref(struct entry *e)
{
	if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1)
		free(e);
}

/* Unlinks e from the table and the list; the caller drops the table's reference. Under mu. */
static void entry_unlink(struct runcache *c, struct entry *e)
{
	struct entry **pp = &c->buckets[bucket_of(c, e->id)];

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	if (e->prev)
		e->prev->next = e->next;
	else
		c->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		c->tail = e->prev;
	c->entries--;
	c->bytes -= e->pub.len;
}

static struct entry *find(struct runcache *c, int64_t id)
{
	struct entry *e = c->buckets[bucket_of(c, id)];

	while (e && e->id != id)
		e = e->hnext;
	return e;
}

static void push_front(struct runcache *c, struct entry *e)
{
	e->prev = NULL;
	e->next = c->head;
	if (c->head)
		c->head->prev = e;
	c->head = e;
	if (c->tail == NULL)
		c->tail = e;
}

/* Unlinks every entry into a list the caller unrefs outside the lock. Under mu. */
static struct entry *take_all(struct runcache *c)
{
	struct entry *all = c->head;

	memset(c->buckets, 0, c->nbuckets * sizeof(*c->buckets));
	c->head = c->tail = NULL;
	c->entries = c->bytes = 0;
	return all;
}

static void unref_list(struct entry *e)
{
	while (e) {
		struct entry *next = e->next;
		entry_unref(e);
		e = next;
	}
}

int runcache_new(struct runcache **out, size_t max_entries, size_t max_bytes)
{
	struct runcache *c = xcalloc(1, sizeof(*c));

	c->max_entries = max_entries;
	c->max_bytes = max_bytes;
	/* one entry may take an eighth of the budget: a huge run does not empty the cache */
	c->max_entry_bytes = max_bytes / 8;
	c->nbuckets = 64;
	while (c->nbuckets < max_entries && c->nbuckets < ((size_t)1 << 20))
		c->nbuckets <<= 1;
	c->buckets = xcalloc(c->nbuckets, sizeof(*c->buckets));
	c->wake[0] = c->wake[1] = -1;
	pthread_mutex_init(&c->mu, NULL);
	*out = c;
	return FERRY_OK;
}

void runcache_free(struct runcache *c)
{
	if (c == NULL)
		return;
	if (c->thread_started) {
		atomic_store(&c->stopping, 1);
		(void)!write(c->wake[1], "s", 1);
		pthread_join(c->thread, NULL);
	}
	if (c->wake[0] >= 0)
		close(c->wake[0]);
	if (c->wake[1] >= 0)
		close(c->wake[1]);
	unref_list(take_all(c));
	pthread_mutex_destroy(&c->mu);
	free(c->buckets);
	free(c->conninfo);
	free(c);
}

uint64_t runcache_epoch(struct runcache *c)
{
	uint64_t epoch;

	pthread_mutex_lock(&c->mu);
	epoch = c->epoch;
	pthread_mutex_unlock(&c->mu);
	return epoch;
}

const struct runcache_json *runcache_get(struct runcache *c, int64_t id)
{
	struct entry *e;

	pthread_mutex_lock(&c->mu);
	e = c->enabled ? find(c, id) : NULL;
	if (e) {
		atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
		if (c->head != e) {
			/* move to the front of the recency list */
			e->prev->next = e->next;
			if (e->next)
				e->next->prev = e->prev;
			else
				c->tail = e->prev;
			push_front(c, e);
		}
		c->hits++;
	} else {
		c->misses++;
	}
	pthread_mutex_unlock(&c->mu);
	return e ? &e->pub : NULL;
}

void runcache_json_release(const struct runcache_json *j)
{
	if (j)
		entry_unref((struct entry *)(void *)j);
}

int runcache_put(struct runcache *c, int64_t id, const char *json, size_t len, uint64_t epoch)
{
	struct entry *e, *old, *evicted = NULL;

	if (len > c->max_entry_bytes || c->max_entries == 0)
		return 0;
	e = xmalloc(sizeof(*e) + len + 1);
	memcpy(e->data, json, len);
	e->data[len] = '\0';
	e->pub.data = e->data;
	e->pub.len = len;
	atomic_init(&e->refs, 1);
	e->id = id;

	pthread_mutex_lock(&c->mu);
	if (!c->enabled || c->epoch != epoch) {
		pthread_mutex_unlock(&c->mu);
		free(e);
		return 0;
	}
	if ((old = find(c, id)) != NULL) {
		entry_unlink(c, old);
		old->next = evicted;
		evicted = old;
	}
	while (c->tail && (c->entries + 1 > c->max_entries || c->bytes + len > c->max_bytes)) {
		struct entry *t = c->tail;
		entry_unlink(c, t);
		t->next = evicted;
		evicted = t;
		c->evictions++;
	}
	e->hnext = c->buckets[bucket_of(c, id)];
	c->buckets[bucket_of(c, id)] = e;
	push_front(c, e);
	c->entries++;
	c->bytes += len;
	c->inserts++;
	pthread_mutex_unlock(&c->mu);
	unref_list(evicted);
	return 1;
}

void runcache_invalidate(struct runcache *c, int64_t id)
{
	struct entry *e;

	pthread_mutex_lock(&c->mu);
	c->epoch++;
	c->invalidations++;
	if ((e = find(c, id)) != NULL)
		entry_unlink(c, e);
	pthread_mutex_unlock(&c->mu);
	if (e)
		entry_unref(e);
}

void runcache_enable(struct runcache *c, int enabled)
{
	struct entry *all = NULL;

	pthread_mutex_lock(&c->mu);
	c->epoch++;
	if (!enabled) {
		all = take_all(c);
		c->flushes++;
	}
	c->enabled = enabled;
	pthread_mutex_unlock(&c->mu);
	unref_list(all);
}

void runcache_stats(struct runcache *c, struct runcache_stats *out)
{
	pthread_mutex_lock(&c->mu);
	out->hits = c->hits;
	out->misses = c->misses;
	out->inserts = c->inserts;
	out->invalidations = c->invalidations;
	out->flushes = c->flushes;
	out->evictions = c->evictions;
	out->entries = c->entries;
	out->bytes = c->bytes;
	out->enabled = c->enabled;
	pthread_mutex_unlock(&c->mu);
}

/* ---- the listener ---- */

/* Sets the error message from libpq's text, on one line (its messages end in newlines). */
static void set_pq_error(const char *msg)
{
	char line[512];
	size_t n = 0;

	for (; *msg && n < sizeof(line) - 1; msg++) {
		char ch = *msg == '\n' || *msg == '\t' ? ' ' : *msg;
		if (ch != ' ' || (n > 0 && line[n - 1] != ' '))
			line[n++] = ch;
	}
	while (n > 0 && line[n - 1] == ' ')
		n--;
	line[n] = '\0';
	ferry_error_set("%s", line);
}

/*
 * Waits until fd is ready for events (or the stop pipe is written) at most
 * until deadline (monotonic ms). 1 ready, 0 timed out, -1 stopping.
 */
static int wait_fd(struct runcache *c, int fd, short events, int64_t deadline)
{
	struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = c->wake[0], .events = POLLIN}};
	int64_t left = deadline - clock_mono_ms();
	int n;

	if (atomic_load(&c->stopping))
		return -1;
	if (left < 0)
		left = 0;
	n = poll(p, 2, (int)(left > 1000 ? 1000 : left));
	if (atomic_load(&c->stopping))
		return -1;
	if (n < 0 && errno != EINTR)
		return -1;
	return n > 0 && p[0].revents ? 1 : 0;
}

/* Drops the run of every notification that has arrived. */
static void drain_notifies(struct runcache *c, PGconn *conn)
{
	PGnotify *n;

	while ((n = PQnotifies(conn)) != NULL) {
		int64_t id;
		if (parse_int64(n->extra, &id) == 0)
			runcache_invalidate(c, id);
		else { /* not a run id: forget everything to be safe */
			runcache_enable(c, 0);
			runcache_enable(c, 1);
		}
		PQfreemem(n);
	}
}

/* Connects without blocking past QUERY_TIMEOUT_MS or a stop. NULL on failure. */
static PGconn *listener_connect(struct runcache *c)
{
	const char *keys[] = {"dbname", "application_name", NULL};
	const char *vals[] = {c->conninfo, APP_NAME, NULL};
	int64_t deadline = clock_mono_ms() + QUERY_TIMEOUT_MS;
	PGconn *conn = PQconnectStartParams(keys, vals, 1);
	PostgresPollingStatusType st = PGRES_POLLING_WRITING;

	if (conn == NULL)
		return NULL;
	while (PQstatus(conn) != CONNECTION_BAD && st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED) {
		int r = 0;
		while (r == 0 && clock_mono_ms() < deadline)
			r = wait_fd(c, PQsocket(conn), st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline);
		if (r <= 0) {
			ferry_error_set("timed out");
			PQfinish(conn);
			return NULL;
		}
		st = PQconnectPoll(conn);
	}
	if (PQstatus(conn) != CONNECTION_OK) {
		set_pq_error(PQerrorMessage(conn));
		PQfinish(conn);
		return NULL;
	}
	if (PQsetnonblocking(conn, 1) != 0) {
		set_pq_error(PQerrorMessage(conn));
		PQfinish(conn);
		return NULL;
	}
	return conn;
}

/* Sends sql and waits for all its results, at most QUERY_TIMEOUT_MS. 0 or -1. */
static int listener_query(struct runcache *c, PGconn *conn, const char *sql)
{
	int64_t deadline = clock_mono_ms() + QUERY_TIMEOUT_MS;
	int error = 0, flushed = 0;

	if (!PQsendQuery(conn, sql)) {
		set_pq_error(PQerrorMessage(conn));
		return -1;
	}
	for (;;) {
		PGresult *res;
		int f;
		if (!flushed) {
			if ((f = PQflush(conn)) < 0) {
				set_pq_error(PQerrorMessage(conn));
				return -1;
			}
			flushed = f == 0;
		}
		if (!PQconsumeInput(conn)) {
			set_pq_error(PQerrorMessage(conn));
			return -1;
		}
		drain_notifies(c, conn);
		while (!PQisBusy(conn)) {
			if ((res = PQgetResult(conn)) == NULL)
				return error;
			if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
				set_pq_error(PQresultErrorMessage(res));
				error = -1;
			}
			PQclear(res);
		}
		if (clock_mono_ms() >= deadline) {
			ferry_error_set("no answer in %d ms", QUERY_TIMEOUT_MS);
			return -1;
		}
		if (wait_fd(c, PQsocket(conn), flushed ? POLLIN : POLLIN | POLLOUT, deadline) < 0) {
			ferry_error_set("stopping");
			return -1;
		}
	}
}

/* Serves one connection until it fails or stop is asked. */
static void listener_serve(struct runcache *c, PGconn *conn)
{
	int64_t quiet_until = clock_mono_ms() + IDLE_CHECK_MS;

	while (!atomic_load(&c->stopping)) {
		int r = wait_fd(c, PQsocket(conn), POLLIN, quiet_until);
		if (r < 0)
			return;
		if (r > 0) {
			if (!PQconsumeInput(conn)) {
				set_pq_error(PQerrorMessage(conn));
				return;
			}
			drain_notifies(c, conn);
		}
		if (PQstatus(conn) != CONNECTION_OK) {
			set_pq_error(PQerrorMessage(conn));
			return;
		}
		if (clock_mono_ms() >= quiet_until) {
			if (listener_query(c, conn, "SELECT 1") < 0)
				return;
			quiet_until = clock_mono_ms() + IDLE_CHECK_MS;
		}
	}
}

static void *listener_main(void *arg)
{
	struct runcache *c = arg;
	int64_t backoff = BACKOFF_MIN_MS;

	while (!atomic_load(&c->stopping)) {
		PGconn *conn = listener_connect(c);
		if (conn && listener_query(c, conn, "LISTEN " LISTEN_CHANNEL) == 0) {
			/* notifications of commits from now on reach us: caching is safe */
			runcache_enable(c, 1);
			flog_info("run cache: listening for changes to finished runs");
			backoff = BACKOFF_MIN_MS;
			listener_serve(c, conn);
			runcache_enable(c, 0);
			if (!atomic_load(&c->stopping))
				flog_warn("run cache: listener connection lost (%s); not caching until it is back",
					  ferry_error_last());
		} else if (!atomic_load(&c->stopping)) {
			flog_warn("run cache: cannot listen for run changes (%s); retrying in %lld ms",
				  ferry_error_last(), (long long)backoff);
		}
		if (conn)
			PQfinish(conn);
		if (atomic_load(&c->stopping))
			break;
		{
			int64_t until = clock_mono_ms() + backoff;
			while (clock_mono_ms() < until && wait_fd(c, -1, 0, until) == 0)
				;
		}
		backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
	}
	return NULL;
}

int runcache_listen_start(struct runcache *c, const char *conninfo)
{
	int error;

	if (c->thread_started)
		return FERRY_OK;
	if (pipe2(c->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		ferry_error_set("pipe: %s", strerror(errno));
		return FERRY_ERROR;
	}
	c->conninfo = xstrdup(conninfo);
	if ((error = pthread_create(&c->thread, NULL, listener_main, c)) != 0) {
		ferry_error_set("cannot start the run cache listener: %s", strerror(error));
		return FERRY_ERROR;
	}
	c->thread_started = 1;
	return FERRY_OK;
}

/*
 * tokens — see tokens.h. The named tokens are an array sorted by hash,
 * replaced whole by the reloader; a lookup takes the mutex, searches, and
 * copies out the name and role. The reloader holds its own connection,
 * LISTENs on ferry_tokens (migration 0024: every change of api_tokens
 * notifies at commit) and reads the live tokens again when told, so a
 * token created or revoked on any daemon counts everywhere at once; it
 * reads them anyway every RELOAD_MS (a notification missed while the
 * connection was being made again) and after each reconnect. It waits on
 * the connection's socket and a pipe (tokens_free writes to it).
 */
#include "api/tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/db.h"
#include "lib/util.h"

#define RELOAD_MS 30000        /* read again without a notification at least this often (FERRY_TOKENS_RELOAD_MS) */
#define RETRY_MS 1000          /* after a failed connect or read */
#define CONNECT_MS 2000        /* the reloader's connection attempt is bounded by this */
#define WARN_AFTER 5           /* failed reads in a row before a warning */

struct named {
	char hash[65];
	char name[TOKEN_NAME_MAX];
	enum token_role role;
};

struct tokens {
	char *own; /* the daemon's own token: admin */
	pthread_mutex_t mu;
	struct named *v; /* sorted by hash */
	int n;

	char *conninfo;
	pthread_t thread;
	int thread_started;
	int wake[2];
};

enum token_role token_role_parse(const char *s)
{
	if (s == NULL)
		return 0;
	if (strcmp(s, "viewer") == 0)
		return ROLE_VIEWER;
	if (strcmp(s, "operator") == 0)
		return ROLE_OPERATOR;
	if (strcmp(s, "deployer") == 0)
		return ROLE_DEPLOYER;
	if (strcmp(s, "admin") == 0)
		return ROLE_ADMIN;
	return 0;
}

const char *token_role_name(enum token_role role)
{
	switch (role) {
	case ROLE_VIEWER:
		return "viewer";
	case ROLE_OPERATOR:
		return "operator";
	case ROLE_DEPLOYER:
		return "deployer";
	case ROLE_ADMIN:
		return "admin";
	}
	return "none";
}

static int named_cmp(const void *a, const void *b)
{
	return strcmp(((const struct named *)a)->hash, ((const struct named *)b)->hash);
}

void tokens_set(struct tokens *t, const struct store_token *v, int n)
{
	struct named *nv = xcalloc(n > 0 ? (size_t)n : 1, sizeof(*nv)), *old;
	int m = 0;

	for (int i = 0; i < n; i++) {
		enum token_role role = token_role_parse(v[i].role);
		if (role == 0 || v[i].hash == NULL || strlen(v[i].hash) != 64 || v[i].name == NULL)
			continue; /* the table's checks make this unreachable */
		memcpy(nv[m].hash, v[i].hash, 65);
		snprintf(nv[m].name, sizeof(nv[m].name), "%s", v[i].name);
		nv[m].role = role;
		m++;
	}
	qsort(nv, (size_t)m, sizeof(*nv), named_cmp);
	pthread_mutex_lock(&t->mu);
	old = t->v;
	t->v = nv;
	t->n = m;
	pthread_mutex_unlock(&t->mu);
	free(old);
}

/* Constant-time comparison of the NUL-terminated given with want. */
static int same_token(const char *want, const char *given)
{
	size_t n = strlen(given), m = strlen(want);
	unsigned char diff = (unsigned char)(n != m);

	for (size_t i = 0; i < m; i++)
		diff |= (unsigned char)(want[i] ^ (i < n ? given[i] : 0));
	return diff == 0;
}

int tokens_check(struct tokens *t, const char *header, enum token_role *role, char name[TOKEN_NAME_MAX],
		 int *own)
{
	struct named key, *hit;
	const char *given;
	int found = 0;

	*role = 0;
	name[0] = '\0';
	*own = 0;
	if (header == NULL || strncmp(header, "Bearer ", 7) != 0)
		return 0;
	given = header + 7;
	if (same_token(t->own, given)) {
		*role = ROLE_ADMIN;
		snprintf(name, TOKEN_NAME_MAX, "admin");
		*own = 1;
		return 1;
	}
	/* a hash compared is a hash of the token, so the search leaks nothing usable about it */
	sha256_hex(key.hash, given, strlen(given));
	pthread_mutex_lock(&t->mu);
	hit = t->n > 0 ? bsearch(&key, t->v, (size_t)t->n, sizeof(*t->v), named_cmp) : NULL;
	if (hit) {
		*role = hit->role;
		memcpy(name, hit->name, TOKEN_NAME_MAX);
		found = 1;
	}
	pthread_mutex_unlock(&t->mu);
	return found;
}

/*
 * Waits up to ms for tokens_free (1), a notification on conn (0, consumed)
 * or the time (0); -1 when the connection broke.
 */
static int wait_event(struct tokens *t, PGconn *conn, int ms)
{
	struct pollfd p[2] = {{.fd = t->wake[0], .events = POLLIN}, {.fd = conn ? PQsocket(conn) : -1, .events = POLLIN}};
	PGnotify *nt;

	if (poll(p, conn ? 2 : 1, ms) < 0 && errno != EINTR)
		return -1;
	if (p[0].revents)
		return 1;
	if (conn && p[1].revents) {
		if (!PQconsumeInput(conn))
			return -1;
		/* told or not (a spurious wake-up), the tokens are read again */
		while ((nt = PQnotifies(conn)) != NULL)
			PQfreemem(nt);
	}
	return 0;
}

static int reload_ms(void)
{
	const char *s = getenv("FERRY_TOKENS_RELOAD_MS");
	int64_t v;

	return s && parse_int64(s, &v) == 0 && v >= 100 && v <= 3600000 ? (int)v : RELOAD_MS;
}

static void *reloader_main(void *arg)
{
	struct tokens *t = arg;
	PGconn *conn = NULL;
	int failures = 0, rc;

	for (;;) {
		struct store_token *v = NULL;
		int n = 0;

		if (conn == NULL) {
			PGresult *res;
			if (db_connect_ex(&conn, t->conninfo, CONNECT_MS, 0) < 0) {
				conn = NULL;
				goto retry;
			}
			/* listening before the read: a change committed in between is read or notified */
			res = PQexec(conn, "LISTEN ferry_tokens");
			if (PQresultStatus(res) != PGRES_COMMAND_OK) {
				flog_debug("api tokens: LISTEN ferry_tokens: %s", PQerrorMessage(conn));
				PQclear(res);
				PQfinish(conn);
				conn = NULL;
				goto retry;
			}
			PQclear(res);
		}
		if (store_token_live(&v, &n, conn) < 0) {
			/* quiet while the daemon migrates a fresh database; once when it lasts */
			if (++failures == WARN_AFTER)
				flog_warn("api tokens: cannot read the named tokens (the last ones read stay in force): %s",
					  ferry_error_last());
			else
				flog_debug("api tokens: cannot read the named tokens: %s", ferry_error_last());
			PQfinish(conn);
			conn = NULL;
			goto retry;
		}
		failures = 0;
		tokens_set(t, v, n);
		store_tokens_free(v, n);
		if ((rc = wait_event(t, conn, reload_ms())) == 1)
			break;
		if (rc < 0) {
			PQfinish(conn);
			conn = NULL;
		}
		continue;
	retry:
		if (wait_event(t, NULL, RETRY_MS) == 1)
			break;
	}
	PQfinish(conn);
	return NULL;
}

int tokens_new(struct tokens **out, const char *own_token, const char *conninfo)
{
	struct tokens *t = xcalloc(1, sizeof(*t));
	int error;

	*out = NULL;
	t->own = xstrdup(own_token);
	t->wake[0] = t->wake[1] = -1;
	pthread_mutex_init(&t->mu, NULL);
	if (conninfo) {
		t->conninfo = xstrdup(conninfo);
		if (pipe2(t->wake, O_CLOEXEC) < 0) {
			ferry_error_set("pipe: %s", strerror(errno));
			goto fail;
		}
		if ((error = pthread_create(&t->thread, NULL, reloader_main, t)) != 0) {
			ferry_error_set("cannot start a thread: %s", strerror(error));
			goto fail;
		}
		t->thread_started = 1;
	}
	*out = t;
	return FERRY_OK;
fail:
	tokens_free(t);
	return FERRY_ERROR;
}

void tokens_free(struct tokens *t)
{
	if (t == NULL)
		return;
	if (t->thread_started) {
		(void)!write(t->wake[1], "s", 1);
		pthread_join(t->thread, NULL);
	}
	if (t->wake[0] >= 0)
		close(t->wake[0]);
	if (t->wake[1] >= 0)
		close(t->wake[1]);
	pthread_mutex_destroy(&t->mu);
	free(t->v);
	free(t->own);
	free(t->conninfo);
	free(t);
}

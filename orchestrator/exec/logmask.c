/*
 * logmask — see logmask.h. The values are few and short, so a position is
 * compared with each value whose first byte it holds (a 256-bit table
 * says which bytes start one), longest value first: where a longer value
 * could still begin, the tail is held back rather than a shorter value
 * inside it masked alone.
 */
#include "exec/logmask.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/util.h"

#define LOGMASK_BUF 65536
#define LOGMASK_LINGER_MS 1000 /* after the job ended: what a grandchild still writes, for at most this */

struct logmask {
	size_t n;
	char **v;
	size_t *len;
	size_t maxlen;
	unsigned char first[32]; /* bit b: some value starts with byte b */
	char *buf;
	size_t cap, have;
};

static int by_length_desc(const void *a, const void *b)
{
	size_t la = strlen(*(char *const *)a), lb = strlen(*(char *const *)b);

	return la < lb ? 1 : la > lb ? -1 : strcmp(*(char *const *)a, *(char *const *)b);
}

static void add_value(struct logmask *m, const char *s, size_t n)
{
	if (n == 0)
		return;
	for (size_t i = 0; i < m->n; i++)
		if (m->len[i] == n && memcmp(m->v[i], s, n) == 0)
			return;
	m->v = xrealloc(m->v, (m->n + 1) * sizeof(*m->v));
	m->len = xrealloc(m->len, (m->n + 1) * sizeof(*m->len));
	m->v[m->n] = xstrndup(s, n);
	m->len[m->n++] = n;
}

/* A secret's value, and each line of a multi-line one (a key file: a program may print one). */
static void add_secret(struct logmask *m, const char *s)
{
	const char *line, *end;

	add_value(m, s, strlen(s));
	for (line = s; strchr(s, '\n') && *line; line = *end ? end + 1 : end) {
		size_t k;
		end = line + strcspn(line, "\n");
		k = (size_t)(end - line);
		if (k > 0 && line[k - 1] == '\r')
			k--;
		if (k >= LOGMASK_MIN_LEN)
			add_value(m, line, k);
	}
}

/* The masker of what m holds, ready to copy; NULL (m freed) when it holds nothing. */
static struct logmask *ready(struct logmask *m)
{
	if (m->n == 0) {
		logmask_free(m);
		return NULL;
	}
	/* longest first; lengths follow the sorted values */
	qsort(m->v, m->n, sizeof(*m->v), by_length_desc);
	for (size_t i = 0; i < m->n; i++) {
		m->len[i] = strlen(m->v[i]);
		if (m->len[i] > m->maxlen)
			m->maxlen = m->len[i];
		m->first[(unsigned char)m->v[i][0] >> 3] |= (unsigned char)(1u << ((unsigned char)m->v[i][0] & 7));
	}
	m->cap = LOGMASK_BUF + m->maxlen;
	m->buf = xmalloc(m->cap);
	return m;
}

struct logmask *logmask_new_values(const char *const *values, size_t n)
{
	struct logmask *m;

	if (n == 0)
		return NULL;
	m = xcalloc(1, sizeof(*m));
	for (size_t i = 0; i < n; i++)
		if (values[i])
			add_secret(m, values[i]);
	return ready(m);
}

void logmask_free(struct logmask *m)
{
	if (m == NULL)
		return;
	for (size_t i = 0; i < m->n; i++) {
		explicit_bzero(m->v[i], m->len[i]);
		free(m->v[i]);
	}
	if (m->buf)
		explicit_bzero(m->buf, m->cap);
	free(m->v), free(m->len), free(m->buf), free(m);
}

size_t logmask_count(const struct logmask *m)
{
	return m ? m->n : 0;
}

const char *logmask_value(const struct logmask *m, size_t i, size_t *len)
{
	*len = m->len[i];
	return m->v[i];
}

/* Writes buf up to where a value may still begin (all of it when final), masked; keeps the rest. */
static void process(struct logmask *m, int fd, int final)
{
	size_t start = 0, i = 0, hold = m->have;

	while (i < m->have) {
		unsigned char b = (unsigned char)m->buf[i];
		size_t matched = 0, left = m->have - i;
		int partial = 0;

		if ((m->first[b >> 3] & (1u << (b & 7))) == 0) {
			i++;
			continue;
		}
		for (size_t j = 0; j < m->n; j++) {
			if (left >= m->len[j]) {
				if (memcmp(m->buf + i, m->v[j], m->len[j]) == 0) {
					matched = m->len[j];
					break;
				}
			} else if (!final && memcmp(m->buf + i, m->v[j], left) == 0) {
				partial = 1; /* a longer value may follow: wait for it */
				break;
			}
		}
		if (partial) {
			hold = i;
			break;
		}
		if (matched == 0) {
			i++;
			continue;
		}
		(void)fd_write_all(fd, m->buf + start, i - start);
		(void)fd_write_all(fd, LOGMASK_MARK, sizeof(LOGMASK_MARK) - 1);
		i += matched;
		start = i;
	}
	if (hold > start)
		(void)fd_write_all(fd, m->buf + start, hold - start);
	if (hold < start) /* a value matched past the held point: nothing held */
		hold = start;
	memmove(m->buf, m->buf + hold, m->have - hold);
	m->have -= hold;
}

void logmask_feed(struct logmask *m, int fd, const char *p, size_t n)
{
	while (n > 0) {
		size_t k = m->cap - m->have;
		if (k > n)
			k = n;
		memcpy(m->buf + m->have, p, k);
		m->have += k;
		p += k, n -= k;
		process(m, fd, 0);
	}
}

void logmask_flush(struct logmask *m, int fd)
{
	process(m, fd, 1);
}

static long long mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int logmask_pump(struct logmask *m, int in, int out, pid_t child)
{
	char chunk[16384];
	int st = 0, ended = 0;
	long long until = 0;

	for (;;) {
		struct pollfd pf = {.fd = in, .events = POLLIN};
		int r;

		if (!ended && child > 0 && waitpid(child, &st, WNOHANG) == child) {
			ended = 1;
			until = mono_ms() + LOGMASK_LINGER_MS;
		}
		if (ended && mono_ms() >= until)
			break;
		r = poll(&pf, 1, ended ? 100 : 250);
		if (r < 0 && errno != EINTR)
			break;
		if (r == 0) {
			if (ended) /* the job is gone and nothing more came for a moment */
				break;
			continue;
		}
		if (r > 0) {
			ssize_t k = read(in, chunk, sizeof(chunk));
			if (k > 0)
				logmask_feed(m, out, chunk, (size_t)k);
			else if (k == 0 || (errno != EINTR && errno != EAGAIN))
				break; /* every writer closed its end */
		}
	}
	logmask_flush(m, out);
	explicit_bzero(chunk, sizeof(chunk));
	close(in);
	if (!ended && child > 0) {
		while (waitpid(child, &st, 0) < 0)
			if (errno != EINTR)
				return -1;
	}
	return child > 0 ? st : -1;
}

/*
 * demand — see demand.h. A look reads two small files per thread (its
 * schedstat's two numbers, its stat's state letter), each thread timed on
 * its own (so the reader's being descheduled between threads or before
 * the look costs nothing), builds the new table
 * sorted by thread id and finds each thread's previous figure by binary
 * search: O(T log T) for T threads, no allocation. Threads that appeared
 * since the previous look have no interval to judge and are skipped; those
 * gone are forgotten.
 */
#include "monitor/demand.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/util.h"

void demand_init(struct demand *d)
{
	memset(d, 0, sizeof(*d));
}

static int cmp_tid(const void *a, const void *b)
{
	const struct demand_thread *x = a, *y = b;
	return (x->tid > y->tid) - (x->tid < y->tid);
}

/* "run_ns wait_ns slices": the first two summed, -1 when unreadable */
static int64_t read_schedstat(const char *path)
{
	char buf[128], *end;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	long long run, wait;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	errno = 0;
	run = strtoll(buf, &end, 10);
	if (end == buf || *end != ' ')
		return -1;
	wait = strtoll(end + 1, &end, 10);
	if (errno != 0 || (*end != ' ' && *end != '\n') || run < 0 || wait < 0)
		return -1;
	return (int64_t)run + (int64_t)wait;
}

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* the thread's state letter from its stat file ("TID (comm) S …"; comm may hold ") "), '?' when unreadable */
static char read_state(const char *path)
{
	char buf[512], *p;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return '?';
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return '?';
	buf[n] = '\0';
	if ((p = strrchr(buf, ')')) == NULL || p[1] != ' ' || p[2] == '\0')
		return '?';
	return p[2];
}

/*
 * One thread's figure, its state and the time they were read: the clock
 * read just before and after its files, the midpoint kept; a read that
 * took longer than READ_SLOP_NS (this thread was descheduled in between)
 * is done once more.
 */
#define READ_SLOP_NS 2000000
static int64_t read_timed(const char *dir, int64_t fixed_ns, int64_t *at, char *state)
{
	char path[352];
	int64_t ns = -1, t0, t1;

	for (int k = 0; k < 2; k++) {
		t0 = fixed_ns >= 0 ? fixed_ns : mono_ns();
		snprintf(path, sizeof(path), "%s/schedstat", dir);
		ns = read_schedstat(path);
		snprintf(path, sizeof(path), "%s/stat", dir);
		*state = ns < 0 ? '?' : read_state(path);
		t1 = fixed_ns >= 0 ? fixed_ns : mono_ns();
		*at = t0 + (t1 - t0) / 2;
		if (ns < 0 || t1 - t0 <= READ_SLOP_NS)
			break;
	}
	return ns;
}

double demand_look(struct demand *d, const char *proc_root, const int *pids, int npids, int64_t now_ns)
{
	struct demand_thread prev[DEMAND_THREADS]; /* 12 KiB */
	int nprev = d->n, n = 0, seen = 0;
	double best = -1;

	memcpy(prev, d->t, (size_t)nprev * sizeof(prev[0]));
	for (int i = 0; i < npids && n < DEMAND_THREADS; i++) {
		char dir[256];
		DIR *td;
		struct dirent *de;

		snprintf(dir, sizeof(dir), "%s/%d/task", proc_root, pids[i]);
		if ((td = opendir(dir)) == NULL)
			continue;
		while ((de = readdir(td)) != NULL && n < DEMAND_THREADS) {
			char tdir[288], state;
			int64_t tid, ns, at;
			if (de->d_name[0] < '1' || de->d_name[0] > '9' || parse_int64(de->d_name, &tid) < 0)
				continue;
			snprintf(tdir, sizeof(tdir), "%s/%lld", dir, (long long)tid);
			if ((ns = read_timed(tdir, now_ns, &at, &state)) < 0)
				continue;
			d->t[n].tid = (int)tid;
			d->t[n].ns = ns;
			d->t[n].at_ns = at;
			d->t[n].state = state;
			n++;
		}
		closedir(td);
	}
	qsort(d->t, (size_t)n, sizeof(d->t[0]), cmp_tid);
	for (int i = 0; i < n; i++) {
		struct demand_thread *p = bsearch(&d->t[i], prev, (size_t)nprev, sizeof(prev[0]), cmp_tid);
		double pct;
		if (p == NULL || d->t[i].ns < p->ns || d->t[i].at_ns <= p->at_ns)
			continue;
		seen = 1;
		if (d->t[i].ns == p->ns && d->t[i].state == 'R' && p->state == 'R')
			pct = 100; /* runnable at both looks and never ran: it waited the whole interval */
		else
			pct = (double)(d->t[i].ns - p->ns) * 100.0 / (double)(d->t[i].at_ns - p->at_ns);
		if (pct > best)
			best = pct;
	}
	d->n = n;
	if (!seen)
		return -1;
	return best > 100 ? 100 : best;
}

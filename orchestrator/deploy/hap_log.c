/*
 * hap_log — see hap_log.h. One table of up to HAP_LOG_KEYS (frontend,
 * version) rings under one mutex; a slot is reused when its second comes
 * round again (its second is stored with it, so a stale slot counts for
 * nothing); each key's history ring of 10-second buckets is closed from
 * those slots when a line or a reader comes after the bucket's end
 * (roll). A histogram bucket b holds times in [lo(b), lo(b+1)): 1 ms
 * steps below 100 ms, then steps of 5%, so a percentile is within 5% (or
 * 1 ms) of the exact one; it answers with the bucket's middle.
 */
#include "deploy/hap_log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lib/util.h"

#define HAP_LOG_KEYS 64
#define READ_PAUSE_MS 10
#define HAP_LOG_MIN_QLEN 128 /* datagrams; see warn_small_queue */
#define LINEAR_MS 100
#define GROWTH 1.05
#define NBUCKETS 300 /* 100 linear + 200 × 5% reaches past 1.7 × 10^6 ms */

struct slot {
	int64_t second;
	uint32_t requests, errors, synthetic;
	uint32_t hist[NBUCKETS];
};

#define NHISTORY (HAP_LOG_HISTORY_S / HAP_LOG_BUCKET_S)

struct key {
	char frontend[64];
	int ord;
	struct slot slots[HAP_LOG_SLOTS];
	/* the history's ring: bucket t / HAP_LOG_BUCKET_S at its index modulo NHISTORY */
	struct hap_point history[NHISTORY];
	int64_t closed; /* every bucket before this one (a bucket number) is closed */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct key *keys[HAP_LOG_KEYS];
static int nkeys;
static atomic_uint_fast64_t nlines, nbad;

static pthread_t reader;
static int running, sockfd = -1, wake[2] = {-1, -1};
static char *sockpath;

static int bucket_of(double ms)
{
	int b;

	if (ms < 0)
		ms = 0;
	if (ms < LINEAR_MS)
		return (int)ms;
	b = LINEAR_MS + (int)(log(ms / LINEAR_MS) / log(GROWTH));
	return b < NBUCKETS ? b : NBUCKETS - 1;
}

/* The lower bound of bucket b, in ms. */
static double bucket_lo(int b)
{
	return b < LINEAR_MS ? (double)b : LINEAR_MS * pow(GROWTH, b - LINEAR_MS);
}

/* The key of (frontend, ord), made when create; NULL when absent or the table is full. Under mu. */
static struct key *key_of(const char *frontend, int ord, int create)
{
	for (int i = 0; i < nkeys; i++)
		if (keys[i]->ord == ord && strcmp(keys[i]->frontend, frontend) == 0)
			return keys[i];
	if (!create || nkeys == HAP_LOG_KEYS || strlen(frontend) >= sizeof(keys[0]->frontend))
		return NULL;
	keys[nkeys] = xcalloc(1, sizeof(struct key));
	snprintf(keys[nkeys]->frontend, sizeof(keys[nkeys]->frontend), "%s", frontend);
	keys[nkeys]->ord = ord;
	return keys[nkeys++];
}

/* The next blank-separated word of *p into out (cap bytes); 0 when none or too long. */
static int word(const char **p, char *out, size_t cap)
{
	size_t n;

	*p += strspn(*p, " ");
	n = strcspn(*p, " ");
	if (n == 0 || n >= cap)
		return 0;
	memcpy(out, *p, n);
	out[n] = '\0';
	*p += n;
	return 1;
}

static void roll(struct key *k, int64_t now);

void hap_log_feed(const char *line, int64_t now_s)
{
	char frontend[64], server[64], st[16], tas[32], mark[64], *end;
	const char *p = line;
	int64_t status, ord, idx;
	double ta;
	struct key *k;
	struct slot *s;

	atomic_fetch_add(&nlines, 1);
	/* "FRONTEND SERVER STATUS TA {MARK}"; a request that reached no server names <NOSRV>, which is not
	 * counted; MARK, HAProxy's capture of X-Ferry-Synthetic, is "{}" for users' requests (or absent,
	 * with a template of before it) */
	if (!word(&p, frontend, sizeof(frontend)) || !word(&p, server, sizeof(server)) || !word(&p, st, sizeof(st)) ||
	    !word(&p, tas, sizeof(tas)) || parse_int64(st, &status) < 0 || server[0] != 'v' ||
	    (ta = strtod(tas, &end), end == tas || *end != '\0') || strchr(server, '-') == NULL ||
	    strncmp(strchr(server, '-'), "-r", 2) != 0) {
		atomic_fetch_add(&nbad, 1);
		return;
	}
	*strchr(server, '-') = '\0';
	if (parse_int64(server + 1, &ord) < 0 || ord < 1 || ord > 1000000 ||
	    parse_int64(server + strlen(server) + 2, &idx) < 0) {
		atomic_fetch_add(&nbad, 1);
		return;
	}
	pthread_mutex_lock(&mu);
	if ((k = key_of(frontend, (int)ord, 1)) != NULL) {
		roll(k, now_s); /* before this line may reuse a slot the history has not read */
		s = &k->slots[now_s % HAP_LOG_SLOTS];
		if (s->second != now_s) {
			memset(s, 0, sizeof(*s));
			s->second = now_s;
		}
		s->requests++;
		s->errors += status >= 500;
		s->synthetic += word(&p, mark, sizeof(mark)) && strcmp(mark, "{}") != 0 && strcmp(mark, "{-}") != 0;
		(void)idx;
		s->hist[bucket_of(ta)]++;
	}
	pthread_mutex_unlock(&mu);
}

static double quantile(const uint64_t *hist, uint64_t n, double q);

/* The figures of seconds [from, from + n) of k's second slots into *out (hist: their times). Under mu. */
static void sum_seconds(const struct key *k, int64_t from, int n, struct hap_live *out, uint64_t *hist)
{
	for (int64_t t = from; t < from + n; t++) {
		const struct slot *s = &k->slots[t % HAP_LOG_SLOTS];
		if (s->second != t)
			continue;
		out->requests += s->requests;
		out->errors_5xx += s->errors;
		out->synthetic += s->synthetic;
		for (int b = 0; b < NBUCKETS; b++)
			hist[b] += s->hist[b];
	}
}

/*
 * Closes k's history buckets that are over at unix second now: their
 * seconds are still in the slots (a slot is reused only by a line of its
 * second come round, and a line rolls first), so the figures are exact.
 * Under mu.
 */
static void roll(struct key *k, int64_t now)
{
	int64_t cur = now / HAP_LOG_BUCKET_S;

	if (k->closed == 0 || k->closed < cur - NHISTORY)
		k->closed = cur - HAP_LOG_SLOTS / HAP_LOG_BUCKET_S; /* no older second is in the slots */
	for (; k->closed < cur; k->closed++) {
		struct hap_point *p = &k->history[k->closed % NHISTORY];
		struct hap_live l = {0};
		uint64_t hist[NBUCKETS] = {0};
		sum_seconds(k, k->closed * HAP_LOG_BUCKET_S, HAP_LOG_BUCKET_S, &l, hist);
		memset(p, 0, sizeof(*p));
		p->t = k->closed * HAP_LOG_BUCKET_S;
		if (l.requests == 0) {
			p->t = -1; /* nothing in it: not kept */
			continue;
		}
		p->requests = l.requests;
		p->errors_5xx = l.errors_5xx;
		p->synthetic = l.synthetic;
		p->p50_ms = quantile(hist, (uint64_t)l.requests, 0.50);
		p->p99_ms = quantile(hist, (uint64_t)l.requests, 0.99);
	}
}

/* The time (ms) at quantile q of hist (total n): the middle of its bucket. */
static double quantile(const uint64_t *hist, uint64_t n, double q)
{
	uint64_t rank = (uint64_t)ceil(q * (double)n), seen = 0;

	if (rank == 0)
		rank = 1;
	for (int b = 0; b < NBUCKETS; b++) {
		seen += hist[b];
		if (seen >= rank)
			return b < LINEAR_MS ? (double)b + 0.5 : (bucket_lo(b) + bucket_lo(b + 1)) / 2;
	}
	return -1;
}

int hap_log_window(const char *frontend, int ord, int secs, struct hap_live *out)
{
	uint64_t hist[NBUCKETS] = {0};
	int64_t now = (int64_t)time(NULL);
	struct key *k;

	memset(out, 0, sizeof(*out));
	out->p50_ms = out->p90_ms = out->p99_ms = -1;
	if (secs < 1)
		secs = 1;
	if (secs > HAP_LOG_SLOTS)
		secs = HAP_LOG_SLOTS;
	out->seconds = secs;
	pthread_mutex_lock(&mu);
	if ((k = key_of(frontend, ord, 0)) != NULL)
		sum_seconds(k, now - secs + 1, secs, out, hist);
	pthread_mutex_unlock(&mu);
	if (out->requests == 0)
		return FERRY_ENOTFOUND;
	out->p50_ms = quantile(hist, (uint64_t)out->requests, 0.50);
	out->p90_ms = quantile(hist, (uint64_t)out->requests, 0.90);
	out->p99_ms = quantile(hist, (uint64_t)out->requests, 0.99);
	return FERRY_OK;
}

int hap_log_history_at(const char *frontend, int ord, int64_t since, int64_t now_s, struct hap_point *out, int cap)
{
	struct key *k;
	int n = 0;

	if (cap <= 0)
		return 0;
	pthread_mutex_lock(&mu);
	if ((k = key_of(frontend, ord, 0)) != NULL) {
		int64_t cur = now_s / HAP_LOG_BUCKET_S;
		roll(k, now_s);
		for (int64_t b = cur - NHISTORY; b < cur; b++) {
			const struct hap_point *p = &k->history[((b % NHISTORY) + NHISTORY) % NHISTORY];
			if (p->t != b * HAP_LOG_BUCKET_S || p->t < since)
				continue;
			if (n == cap) { /* the newest kept */
				memmove(out, out + 1, (size_t)(cap - 1) * sizeof(*out));
				n--;
			}
			out[n++] = *p;
		}
	}
	pthread_mutex_unlock(&mu);
	return n;
}

int hap_log_history(const char *frontend, int ord, int64_t since, struct hap_point *out, int cap)
{
	return hap_log_history_at(frontend, ord, since, (int64_t)time(NULL), out, cap);
}

void hap_log_counts(uint64_t *lines, uint64_t *bad)
{
	*lines = atomic_load(&nlines);
	*bad = atomic_load(&nbad);
}

static void *reader_main(void *arg)
{
	struct pollfd p[2] = {{.fd = sockfd, .events = POLLIN}, {.fd = wake[0], .events = POLLIN}};
	char buf[1024];

	(void)arg;
	for (;;) {
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (p[0].revents & POLLIN) {
			/* every datagram waiting, then one poll again: a wake-up per burst, not per request */
			int64_t now = (int64_t)time(NULL);
			ssize_t n;
			while ((n = recv(sockfd, buf, sizeof(buf) - 1, MSG_DONTWAIT)) > 0) {
				buf[n] = '\0';
				buf[strcspn(buf, "\n")] = '\0';
				hap_log_feed(buf, now);
			}
			/* then a pause, so that a busy proxy's lines are read in bursts (at most 100
			 * wake-ups a second, not one a request); the socket's queue (net.unix.max_dgram_qlen
			 * datagrams: 512 where systemd sets it, as on Debian) holds READ_PAUSE_MS of lines up
			 * to ~50,000 requests/s */
			usleep(READ_PAUSE_MS * 1000);
		}
	}
	return NULL;
}

/*
 * A unix datagram socket queues at most net.unix.max_dgram_qlen datagrams,
 * whatever its buffer's size: the kernel's default is 10, which systemd
 * raises to 512. With 10, a reader held up for a second (a loaded host, its
 * pages read back from disk) loses the lines of any proxy serving over ten
 * requests a second, and the live figures count fewer requests than were
 * served: said once, at start.
 */
static void warn_small_queue(void)
{
	static int said;
	FILE *f;
	long qlen = -1;

	if (said || (f = fopen("/proc/sys/net/unix/max_dgram_qlen", "r")) == NULL)
		return;
	if (fscanf(f, "%ld", &qlen) != 1)
		qlen = -1;
	fclose(f);
	if (qlen >= 0 && qlen < HAP_LOG_MIN_QLEN) {
		said = 1;
		flog_warn("deploy: net.unix.max_dgram_qlen is %ld: HAProxy drops its request log's lines once %ld "
			 "wait to be read (ferryd held up), and the live figures undercount; set it to 512 "
			 "(sysctl -w net.unix.max_dgram_qlen=512, systemd's default)",
			 qlen, qlen + 1);
	}
}

int hap_log_start(const char *dir)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char *path = xasprintf("%s/log.sock", dir);

	if (running && sockpath && strcmp(sockpath, path) == 0) {
		free(path);
		return FERRY_OK;
	}
	hap_log_stop();
	if (strlen(path) >= sizeof(sa.sun_path)) {
		ferry_error_set("HAProxy's log socket %s: the path is too long for a unix socket", path);
		free(path);
		return FERRY_EINVALID;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	unlink(path);
	sockfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sockfd < 0 || bind(sockfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || pipe2(wake, O_CLOEXEC) < 0) {
		ferry_error_set("HAProxy's log socket %s: %s", path, strerror(errno));
		if (sockfd >= 0)
			close(sockfd);
		sockfd = -1;
		free(path);
		return FERRY_ERROR;
	}
	{
		/* room for a burst: lines that find it full are dropped by HAProxy, never waited for */
		int sz = 4 << 20;
		(void)setsockopt(sockfd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	}
	warn_small_queue();
	if (pthread_create(&reader, NULL, reader_main, NULL) != 0) {
		ferry_error_set("HAProxy's log reader: cannot start a thread");
		close(sockfd), close(wake[0]), close(wake[1]);
		sockfd = wake[0] = wake[1] = -1;
		unlink(path);
		free(path);
		return FERRY_ERROR;
	}
	sockpath = path;
	running = 1;
	return FERRY_OK;
}

void hap_log_stop(void)
{
	if (!running)
		return;
	(void)!write(wake[1], "x", 1);
	pthread_join(reader, NULL);
	close(sockfd), close(wake[0]), close(wake[1]);
	sockfd = wake[0] = wake[1] = -1;
	unlink(sockpath);
	free(sockpath);
	sockpath = NULL;
	running = 0;
}

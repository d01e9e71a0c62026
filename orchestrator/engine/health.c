/*
 * health — see health.h. The flags are written rarely (start-up, state
 * changes) and read by every /readyz and /metrics, so they are plain
 * atomics; only the reason text, a few hundred bytes, takes the mutex.
 */
#include "engine/health.h"

#include <stdio.h>
#include <string.h>

#include "lib/metrics.h"

void health_init(struct health *h)
{
	memset(h, 0, sizeof(*h));
	atomic_init(&h->engine_running, 0);
	atomic_init(&h->leader, -1);
	atomic_init(&h->db_attempts, 0);
	pthread_mutex_init(&h->mu, NULL);
	snprintf(h->waiting, sizeof(h->waiting), "starting: the database has not been reached yet");
}

void health_dispose(struct health *h)
{
	if (h)
		pthread_mutex_destroy(&h->mu);
}

void health_waiting(struct health *h, const char *fmt, ...)
{
	va_list ap;

	atomic_fetch_add(&h->db_attempts, 1);
	pthread_mutex_lock(&h->mu);
	va_start(ap, fmt);
	vsnprintf(h->waiting, sizeof(h->waiting), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&h->mu);
}

void health_set_running(struct health *h, int running)
{
	if (running) {
		pthread_mutex_lock(&h->mu);
		h->waiting[0] = '\0';
		pthread_mutex_unlock(&h->mu);
	}
	atomic_store(&h->engine_running, running ? 1 : 0);
}

void health_set_leader(struct health *h, int leader)
{
	atomic_store(&h->leader, leader < 0 ? -1 : leader ? 1 : 0);
}

int health_ready(struct health *h, char *why, size_t n)
{
	if (atomic_load(&h->engine_running))
		return 1;
	pthread_mutex_lock(&h->mu);
	snprintf(why, n, "%s", h->waiting[0] ? h->waiting : "the engine is not running");
	pthread_mutex_unlock(&h->mu);
	return 0;
}

void health_render(struct health *h, char **buf, size_t *len, size_t *cap)
{
	int leader = atomic_load(&h->leader);

	metrics_appendf(buf, len, cap,
			"# HELP ferry_engine_running 1 once the engine runs (the database was reached and migrated).\n"
			"# TYPE ferry_engine_running gauge\nferry_engine_running %d\n"
			"# HELP ferry_db_start_attempts_total Failed attempts to reach the database while starting.\n"
			"# TYPE ferry_db_start_attempts_total counter\nferry_db_start_attempts_total %lld\n",
			atomic_load(&h->engine_running), (long long)atomic_load(&h->db_attempts));
	if (leader >= 0)
		metrics_appendf(buf, len, cap,
				"# HELP ferry_leader 1 while this replica is the elected leader.\n"
				"# TYPE ferry_leader gauge\nferry_leader %d\n", leader);
}

/*
 * preempt — see preempt.h. The round is one statement on the loop
 * (ferry_preempt: what to stop, chosen and marked in the database, so two
 * daemons of one host or a restarted one never stop more than needed),
 * then the kills through the engine (task_ctx.kill: the job's grace, then
 * the restart outcome).
 */
#include "engine/preempt.h"

#include <stdlib.h>

#include "store/store_queues.h"
#include "lib/util.h"

#define PREEMPT_PERIOD_MS 2000
#define PREEMPT_AFTER_S_DEFAULT 30.0

struct preempt_state {
	double after_s;      /* how long the head of the queue waits before it may take others' room */
	double default_cpus; /* FERRY_DEFAULT_CPUS: a step's request when it states none (host_admission's) */
};

static int preempt_open(void **state, struct task_ctx *c)
{
	struct preempt_state *s;
	const char *a = getenv("FERRY_PREEMPT_AFTER_S"), *dc = getenv("FERRY_DEFAULT_CPUS");
	char *end = NULL;
	double after = PREEMPT_AFTER_S_DEFAULT;

	if (c->dev || !c->admits)
		return FERRY_OK; /* nothing admitted here by the host's room: nothing to preempt */
	if (a && *a) {
		after = strtod(a, &end);
		if (end == a || *end != '\0' || after < 0 || after > 86400) {
			ferry_error_set("FERRY_PREEMPT_AFTER_S \"%.40s\": seconds from 0 (off) to 86400", a);
			return FERRY_EINVALID;
		}
		if (after == 0)
			return FERRY_OK;
	}
	s = xcalloc(1, sizeof(*s));
	s->after_s = after;
	s->default_cpus = dc && *dc ? strtod(dc, NULL) : 0;
	if (!(s->default_cpus > 0))
		s->default_cpus = 0;
	*state = s;
	return FERRY_OK;
}

static void preempt_close(void *state)
{
	free(state);
}

static struct work *preempt_round(struct task_ctx *c, void *state)
{
	struct preempt_state *s = state;
	struct store_victim *v = NULL;
	int n = 0;

	if (s == NULL || c->njobs == 0)
		return NULL; /* off, or no job of this daemon to stop */
	if (store_preempt(&v, &n, c->conn, c->owner, c->host, s->after_s, s->default_cpus) < 0) {
		flog_warn("preempt: %s", ferry_error_last());
		return NULL;
	}
	for (int i = 0; i < n; i++) {
		flog_info("preempt: step %lld attempt %d: %s", (long long)v[i].step_id, v[i].attempt, v[i].reason);
		c->kill(c, v[i].step_id, v[i].attempt, OUTCOME_RESTART, 0, v[i].reason);
		v[i].reason = NULL; /* kill took it */
	}
	store_victims_free(v, n);
	return NULL;
}

static int64_t every_two_seconds(const struct task_ctx *c)
{
	(void)c;
	return PREEMPT_PERIOD_MS;
}

const struct task preempt_task = {
	.name = "preempt",
	.flags = TASK_NO_DEV,
	.period = every_two_seconds,
	.open = preempt_open,
	.close = preempt_close,
	.start_round = preempt_round,
};

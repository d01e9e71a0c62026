/*
 * engine_tasks — the engine's own periodic tasks that are not the loop's
 * (claim, lease, election and recovery stay in engine.c): waits that time
 * out, dev sessions' leases, and the executor types' strays. Each is a row
 * of engine.c's table (store/task.h) whose round is done on the loop and
 * hands nothing to the pool. The duties of other folders export their own
 * rows: notify.c and retention.c here, reconcile.c (deploy/), monitor.c
 * (monitor/), schedules.c (schedule/), exec_orphans.c (exec/).
 */
#include "engine/engine_priv.h"


#include "exec/exec.h"
#include "store/store.h"
#include "lib/util.h"

int64_t task_every_third_lease(const struct task_ctx *c)
{
	return c->lease_ms / 3;
}

int64_t task_every_half_lease(const struct task_ctx *c)
{
	return c->lease_ms / 2;
}

static int64_t every_second(const struct task_ctx *c)
{
	(void)c;
	return 1000;
}

static int64_t every_ten_seconds(const struct task_ctx *c)
{
	(void)c;
	return 10000;
}

/* Gates and label steps whose timeout passed are ended; steps they made ready are claimed at once. */
static struct work *expire_waits_round(struct task_ctx *c, void *state)
{
	struct engine *e = engine_of(c);
	int ready = 0;

	(void)state;
	if (store_expire_waits(&ready, e->conn, e->owner) < 0)
		flog_error("ending timed-out waits: %s", ferry_error_last());
	else if (ready > 0)
		e->claim_now = 1;
	return NULL;
}

const struct task expire_waits_task = {
	.name = "expire-waits",
	.period = every_second,
	.start_round = expire_waits_round,
};

/* A dev session renews the lease it holds on its run while it lives. */
static struct work *dev_lease_round(struct task_ctx *c, void *state)
{
	struct engine *e = engine_of(c);

	(void)state;
	if (e->o.run_filter > 0 && store_dev_lease_renew(e->conn, e->o.run_filter, e->o.lease_ms) < 0)
		flog_error("renewing the dev session's lease: %s", ferry_error_last());
	return NULL;
}

const struct task dev_lease_task = {
	.name = "dev-lease",
	.period = task_every_third_lease,
	.start_round = dev_lease_round,
};

/* The leader stops dev runs whose `ferry dev` died (their lease expired). */
static struct work *dev_expire_round(struct task_ctx *c, void *state)
{
	struct engine *e = engine_of(c);
	int n = 0;

	(void)state;
	if (store_dev_expire(&n, e->conn, e->owner) < 0)
		flog_error("stopping dev runs whose session ended: %s", ferry_error_last());
	else if (n > 0) {
		flog_info("stopped %d dev run%s whose session ended", n, n == 1 ? "" : "s");
		e->stop_check = 1;
	}
	return NULL;
}

const struct task dev_expire_task = {
	.name = "dev-expire",
	.flags = TASK_LEADER | TASK_NO_DEV,
	.period = task_every_half_lease,
	.start_round = dev_expire_round,
};

/*
 * Each executor type's tick also runs when no job of ours ended (it runs on
 * every SIGCHLD): after a restart with nothing running, the leftovers of
 * the jobs of a crash (a container that ended while no daemon was there)
 * are swept within seconds, not at the next job's end.
 */
static struct work *strays_round(struct task_ctx *c, void *state)
{
	(void)state;
	exec_tick_all(c->home);
	return NULL;
}

const struct task strays_task = {
	.name = "strays",
	.period = every_ten_seconds,
	.start_round = strays_round,
};

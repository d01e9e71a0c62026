/*
 * engine_tasks — the engine's own periodic tasks: the loop's (the polling
 * fallback, lease renewal, leader election, adoption of this host's
 * orphans, the leader's reaper), waits that time out, dev sessions'
 * leases, and the executor types' strays. Each is a row of the table in
 * engine_table.c (store/task.h) whose round is done on the loop and hands
 * nothing to the pool. The duties of other folders export their own
 * rows: notify.c and retention.c here, reconcile.c (deploy/), monitor.c
 * (monitor/), schedules.c (schedule/), exec_orphans.c (exec/).
 */
#include "engine/engine_priv.h"

#include <stdio.h>

#include "deploy/reconcile.h"
#include "engine/health.h"
#include "exec/exec.h"
#include "lib/util.h"
#include "store/db.h"
#include "store/store.h"
#include "store/store_reconcile.h"

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

/*
 * The leader: one replica holds a session-level advisory lock on its own
 * connection. Every replica tries to take it each lease/3; the leader checks
 * its session each lease/3 and steps down when the check fails, so when the
 * leader dies (its session ends, the lock is released) or loses the
 * database, another replica leads within one lease. Dev sessions never lead.
 */
#define LEADER_LOCK_KEY STORE_LEADER_LOCK_KEY /* "ferry" (store_deploy.h: a follower asks whether a leader is up) */

void engine_step_down(struct engine *e, const char *why)
{
	if (e->leading)
		flog_warn("no longer the leader: %s", why);
	e->leading = 0;
	reconcile_set_leading(0);
	if (e->o.health && !e->o.run_filter)
		health_set_leader(e->o.health, 0);
	if (e->lead) {
		PQfinish(e->lead);
		e->lead = NULL;
	}
}

static void elect(struct engine *e)
{
	PGresult *res;
	int ok;

	if (e->lead == NULL) {
		if (db_connect_ex(&e->lead, e->conninfo, 1000, 0) < 0)
			return;
		/* a server that never hears from a vanished leader frees its lock within ~10 s */
		res = PQexec(e->lead, "SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2; "
				      "SET tcp_keepalives_count = 3");
		PQclear(res);
	}
	if (e->leading) {
		/* bounded on our clock: a leader cut off from its database steps down within the period */
		if (db_ping(e->lead, 1000) < 0)
			engine_step_down(e, ferry_error_last());
		return;
	}
	{
		char key[24];
		const char *params[1] = {key};
		snprintf(key, sizeof(key), "%d", LEADER_LOCK_KEY);
		res = PQexecParams(e->lead, "SELECT pg_try_advisory_lock($1::bigint)", 1, NULL, params,
				   NULL, NULL, 0);
	}
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		PQclear(res);
		engine_step_down(e, "");
		return;
	}
	ok = PQgetvalue(res, 0, 0)[0] == 't';
	PQclear(res);
	if (ok) {
		e->leading = 1;
		reconcile_set_leading(e->workers ? 1 : RECONCILE_LEADS_NO_POOL);
		if (e->o.health)
			health_set_leader(e->o.health, 1);
		flog_info("elected leader (owner %s)", e->owner);
	}
}

static struct work *elect_round(struct task_ctx *c, void *state)
{
	(void)state;
	elect(engine_of(c));
	return NULL;
}

static struct work *poll_round(struct task_ctx *c, void *state)
{
	(void)state;
	engine_of(c)->claim_now = 1;
	return NULL;
}

static struct work *heartbeat_round(struct task_ctx *c, void *state)
{
	struct engine *e = engine_of(c);

	(void)state;
	if (e->njobs + e->inflight > 0 && store_heartbeat(e->conn, e->owner, e->o.lease_ms) < 0)
		flog_error("renewing leases: %s", ferry_error_last());
	return NULL;
}

static struct work *recover_round(struct task_ctx *c, void *state)
{
	(void)state;
	engine_orphans(engine_of(c), 1);
	return NULL;
}

static struct work *reap_round(struct task_ctx *c, void *state)
{
	(void)state;
	engine_orphans(engine_of(c), 0);
	return NULL;
}

static int64_t every_poll(const struct task_ctx *c)
{
	return c->poll_ms;
}

/* claim even when no NOTIFY came */
const struct task poll_task = {.name = "poll", .period = every_poll, .start_round = poll_round};
/* renew our attempts' leases */
const struct task heartbeat_task = {
	.name = "heartbeat", .period = task_every_third_lease, .start_round = heartbeat_round,
};
const struct task elect_task = {
	.name = "elect", .flags = TASK_NO_DEV, .period = task_every_third_lease, .start_round = elect_round,
};
/* adopt this host's orphans */
const struct task recover_task = {
	.name = "recover", .period = task_every_half_lease, .start_round = recover_round,
};
/* other hosts' expired attempts: lost */
const struct task reap_task = {
	.name = "reap", .flags = TASK_LEADER, .period = task_every_half_lease, .start_round = reap_round,
};

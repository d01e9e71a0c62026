/*
 * Unit tests for the decisions of a reconcile round (deploy/reconcile_plan.c),
 * each repair from deployments built in memory and what the round saw:
 * a missing replica started (not before its backoff), health recorded
 * both ways, an extra replica removed after HAProxy left it, weights from
 * shares over healthy replicas (a 0% version and an unhealthy replica
 * weigh 0), a draining (retired) version's replicas stopped, a stopped
 * deployment's stopped but not a version its deploy step is starting,
 * the events of a version losing and regaining its last healthy replica
 * (judged against what was last said of it, so one a crash kept from being
 * written is said at the next round),
 * an A/B test's header routing only while its version has a healthy
 * replica, and replicas on other hosts (left to a host that is up,
 * started again when their host is lost).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "deploy/fleet.h"
#include "deploy/reconcile_plan.h"
#include "plan/deploy.h"
#include "lib/util.h"

/* A replica: started (a handle) or not, its health as the row says, its backoff left. */
static struct deploy_replica rep(int idx, int started, enum deploy_health h, int64_t backoff_ms)
{
	return (struct deploy_replica){
		.idx = idx, .port = 9000 + idx, .health = h, .generation = started,
		.handle = started ? json_pack("{s:i,s:i}", "pid", 100 + idx, "start", 1) : NULL,
		.next_start_in_ms = backoff_ms,
	};
}

static struct deploy_version ver(const char *name, int ord, int weight, int want, enum deploy_version_state st,
				 size_t n, const struct deploy_replica *reps)
{
	struct deploy_version v = {
		.version = xstrdup(name), .ord = ord, .weight = weight, .want_replicas = want, .state = st,
		.replicas = xcalloc(n + 1, sizeof(*v.replicas)), .nreplicas = n,
		/* a serving version has served: said so (a test of what is said sets its own) */
		.said = st == DEPLOY_V_SERVING ? DEPLOY_SAID_SERVED : DEPLOY_SAID_NONE,
	};
	if (n > 0) /* reps may be NULL for none: memcpy's source must not be (UBSan) */
		memcpy(v.replicas, reps, n * sizeof(*reps));
	return v;
}

static struct deployment dep(const char *name, enum deploy_state st, size_t n, const struct deploy_version *vs)
{
	struct deployment d = {.id = 1, .name = xstrdup(name), .model = xstrdup("m"), .port = 8080, .state = st,
			       .versions = xcalloc(n + 1, sizeof(*d.versions)), .nversions = n};
	if (n > 0)
		memcpy(d.versions, vs, n * sizeof(*vs));
	return d;
}

static void dep_free(struct deployment *d)
{
	for (size_t j = 0; j < d->nversions; j++) {
		for (size_t k = 0; k < d->versions[j].nreplicas; k++)
			json_decref(d->versions[j].replicas[k].handle);
		free(d->versions[j].replicas);
		free(d->versions[j].version);
	}
	free(d->versions), free(d->name), free(d->model), free(d->match_version);
}

/* The actions as "WHAT:vORD-rIDX" words in order (HEALTH: with the new health). */
static char *actions(const struct rc_plan *p, const struct deployment *d)
{
	static const char *const what[] = {"HEALTH", "START", "UNSERVED", "SERVED", "SAID", "REMOVE", "STOP"};
	static const char *const said[] = {"none", "served", "unserved"};
	char *s = xstrdup("");

	for (size_t i = 0; i < p->nactions; i++) {
		const struct rc_action *a = &p->actions[i];
		const struct deploy_version *v = &d[a->dep].versions[a->ver];
		char *t;
		if (a->what == RC_VERSION_UNSERVED || a->what == RC_VERSION_SERVED)
			t = xasprintf("%s%s%s:v%d(%d)", s, *s ? " " : "", what[a->what], v->ord, a->healthy);
		else if (a->what == RC_VERSION_SAID)
			t = xasprintf("%s%s%s:v%d=%s", s, *s ? " " : "", what[a->what], v->ord, said[a->said]);
		else if (a->what == RC_HEALTH)
			t = xasprintf("%s%s%s:v%d-r%d=%s", s, *s ? " " : "", what[a->what], v->ord, v->replicas[a->rep].idx,
				      deploy_health_name(a->health));
		else
			t = xasprintf("%s%s%s:v%d-r%d", s, *s ? " " : "", what[a->what], v->ord, v->replicas[a->rep].idx);
		free(s);
		s = t;
	}
	return s;
}

/* HAProxy's servers of frontend i as "NAME=WEIGHT" words. */
static char *servers(const struct rc_plan *p, size_t i)
{
	char *s = xstrdup("");

	for (size_t k = 0; k < p->fe[i].nservers; k++) {
		char *t = xasprintf("%s%s%s=%d", s, *s ? " " : "", p->fe[i].servers[k].name, p->fe[i].servers[k].weight);
		free(s);
		s = t;
	}
	return s;
}

static void check(const char *got_actions, const char *want_actions, char *got_servers, const char *want_servers)
{
	assert_string_equal(got_actions, want_actions);
	if (want_servers)
		assert_string_equal(got_servers, want_servers);
	free((char *)got_actions);
	free(got_servers);
}

/* a missing replica starts; one that crashed waits for its backoff; neither takes traffic this round */
static void test_reconcile_plan__missing_replica(void **state)
{
	struct deploy_replica r[] = {rep(1, 1, DEPLOY_H_HEALTHY, 0), rep(2, 0, DEPLOY_H_STARTING, 0),
				     rep(3, 1, DEPLOY_H_UNHEALTHY, 4000)};
	struct deploy_version v[] = {ver("1.0", 1, 100, 3, DEPLOY_V_SERVING, 3, r)};
	struct deployment d = dep("d", DEPLOY_RUNNING, 1, v);
	struct rc_seen seen[] = {{1, 1, 0, NULL}, {0, 0, 0, NULL}, {0, 0, 0, NULL}};
	struct rc_plan p;
	char buf[64];

	(void)state;
	reconcile_plan(&p, &d, 1, seen);
	snprintf(buf, sizeof(buf), "v1-r1=%d v1-r2=0 v1-r3=0", deploy_server_weight(100, 1));
	check(actions(&p, &d), "START:v1-r2", servers(&p, 0), buf);
	assert_int_equal(p.nfe, 1);
	assert_string_equal(p.fe[0].name, "d");
	assert_int_equal(p.fe[0].port, 8080);
	assert_int_equal(p.fe[0].servers[1].port, 9002);
	rc_plan_free(&p);
	/* the backoff passed: the crashed one starts too */
	d.versions[0].replicas[2].next_start_in_ms = 0;
	reconcile_plan(&p, &d, 1, seen);
	check(actions(&p, &d), "START:v1-r2 START:v1-r3", servers(&p, 0), NULL);
	rc_plan_free(&p);
	dep_free(&d);
}

/* health recorded when it changes, both ways; unchanged: nothing */
static void test_reconcile_plan__health(void **state)
{
	struct deploy_replica r[] = {rep(1, 1, DEPLOY_H_STARTING, 0), rep(2, 1, DEPLOY_H_HEALTHY, 0),
				     rep(3, 1, DEPLOY_H_HEALTHY, 0)};
	struct deploy_version v[] = {ver("1.0", 1, 100, 3, DEPLOY_V_SERVING, 3, r)};
	struct deployment d = dep("d", DEPLOY_RUNNING, 1, v);
	struct rc_seen seen[] = {{1, 1, 0, NULL}, {1, 0, 0, NULL}, {1, 1, 0, NULL}};
	struct rc_plan p;
	char buf[64];
	int w = deploy_server_weight(100, 2);

	(void)state;
	reconcile_plan(&p, &d, 1, seen);
	snprintf(buf, sizeof(buf), "v1-r1=%d v1-r2=0 v1-r3=%d", w, w);
	check(actions(&p, &d), "HEALTH:v1-r1=healthy HEALTH:v1-r2=unhealthy", servers(&p, 0), buf);
	rc_plan_free(&p);
	dep_free(&d);
}

/* a replica past its version's count: out of HAProxy, removed after it */
static void test_reconcile_plan__extra_replica(void **state)
{
	struct deploy_replica r[] = {rep(1, 1, DEPLOY_H_HEALTHY, 0), rep(2, 1, DEPLOY_H_HEALTHY, 0)};
	struct deploy_version v[] = {ver("1.0", 1, 100, 1, DEPLOY_V_SERVING, 2, r)};
	struct deployment d = dep("d", DEPLOY_RUNNING, 1, v);
	struct rc_seen seen[] = {{1, 1, 0, NULL}, {1, 1, 0, NULL}};
	struct rc_plan p;
	char buf[64];

	(void)state;
	reconcile_plan(&p, &d, 1, seen);
	snprintf(buf, sizeof(buf), "v1-r1=%d", deploy_server_weight(100, 1));
	check(actions(&p, &d), "REMOVE:v1-r2", servers(&p, 0), buf);
	rc_plan_free(&p);
	dep_free(&d);
}

/* weights: each version's share over its healthy replicas; a 0% version and an unhealthy replica weigh 0 */
static void test_reconcile_plan__weights(void **state)
{
	struct deploy_replica r1[] = {rep(1, 1, DEPLOY_H_HEALTHY, 0), rep(2, 1, DEPLOY_H_HEALTHY, 0)};
	struct deploy_replica r2[] = {rep(1, 1, DEPLOY_H_HEALTHY, 0), rep(2, 1, DEPLOY_H_UNHEALTHY, 0)};
	struct deploy_replica r3[] = {rep(1, 1, DEPLOY_H_HEALTHY, 0)};
	struct deploy_version v[] = {ver("1.0", 1, 80, 2, DEPLOY_V_SERVING, 2, r1), ver("1.1", 2, 20, 2, DEPLOY_V_SERVING, 2, r2),
				     ver("1.2", 3, 0, 1, DEPLOY_V_SERVING, 1, r3)};
	struct deployment d = dep("d", DEPLOY_RUNNING, 3, v);
	struct rc_seen seen[] = {{1, 1, 0, NULL}, {1, 1, 0, NULL}, {1, 1, 0, NULL}, {1, 0, 0, NULL}, {1, 1, 0, NULL}};
	struct rc_plan p;
	char buf[128];
	int a = deploy_server_weight(80, 2), b = deploy_server_weight(20, 1);

	(void)state;
	assert_true(a > 0 && b > 0);
	reconcile_plan(&p, &d, 1, seen);
	snprintf(buf, sizeof(buf), "v1-r1=%d v1-r2=%d v2-r1=%d v2-r2=0 v3-r1=0", a, a, b);
	check(actions(&p, &d), "", servers(&p, 0), buf);
	rc_plan_free(&p);
	dep_free(&d);
}

/* a draining version (retired): its live replicas stop after HAProxy left them; one stopped already: nothing */
static void test_reconcile_plan__draining_version(void **state)
{
	struct deploy_replica r1[] = {rep(1, 1, DEPLOY_H_HEALTHY, 0)};
	struct deploy_replica r2[] = {rep(1, 1, DEPLOY_H_HEALTHY, 0), rep(2, 1, DEPLOY_H_STOPPED, 0)};
	struct deploy_version v[] = {ver("1.0", 1, 100, 1, DEPLOY_V_SERVING, 1, r1),
				     ver("0.9", 2, 0, 2, DEPLOY_V_RETIRED, 2, r2)};
	struct deployment d = dep("d", DEPLOY_RUNNING, 2, v);
	struct rc_seen seen[] = {{1, 1, 0, NULL}, {1, 0, 0, NULL}, {0, 0, 0, NULL}};
	struct rc_plan p;
	char buf[64];

	(void)state;
	reconcile_plan(&p, &d, 1, seen);
	snprintf(buf, sizeof(buf), "v1-r1=%d", deploy_server_weight(100, 1));
	check(actions(&p, &d), "STOP:v2-r1", servers(&p, 0), buf);
	rc_plan_free(&p);
	dep_free(&d);
}

/* a stopped deployment: no frontend, its replicas stop — but not a version its deploy step is starting */
static void test_reconcile_plan__stopped_deployment(void **state)
{
	struct deploy_replica r1[] = {rep(1, 1, DEPLOY_H_HEALTHY, 0), rep(2, 1, DEPLOY_H_STOPPED, 0)};
	struct deploy_replica r2[] = {rep(1, 1, DEPLOY_H_STARTING, 0)};
	struct deploy_version v[] = {ver("1.0", 1, 100, 2, DEPLOY_V_SERVING, 2, r1),
				     ver("1.1", 2, 0, 1, DEPLOY_V_STARTING, 1, r2)};
	struct deployment d = dep("d", DEPLOY_STOPPED, 2, v);
	struct rc_seen seen[] = {{1, 0, 0, NULL}, {1, 0, 0, NULL}, {1, 0, 0, NULL}};
	struct rc_plan p;

	(void)state;
	reconcile_plan(&p, &d, 1, seen);
	/* r2 says stopped but its process lives: stopped again; 1.0 served, nothing is said of it now */
	check(actions(&p, &d), "SAID:v1=none STOP:v1-r1 STOP:v1-r2", xstrdup(""), NULL);
	assert_int_equal(p.nfe, 0);
	rc_plan_free(&p);
	dep_free(&d);
}

/* a version with a share losing its last healthy replica, and regaining one; a 0% version: no event */
static void test_reconcile_plan__version_events(void **state)
{
	struct deploy_replica r1[] = {rep(1, 1, DEPLOY_H_HEALTHY, 0)};
	struct deploy_replica r2[] = {rep(1, 1, DEPLOY_H_UNHEALTHY, 0)};
	struct deploy_replica r3[] = {rep(1, 1, DEPLOY_H_HEALTHY, 0)};
	struct deploy_version v[] = {ver("1.0", 1, 60, 1, DEPLOY_V_SERVING, 1, r1), ver("1.1", 2, 40, 1, DEPLOY_V_SERVING, 1, r2),
				     ver("1.2", 3, 0, 1, DEPLOY_V_SERVING, 1, r3)};
	struct deployment d;
	struct rc_seen seen[] = {{1, 0, 0, NULL}, {1, 1, 0, NULL}, {1, 0, 0, NULL}};
	struct rc_plan p;

	(void)state;
	v[1].said = DEPLOY_SAID_UNSERVED; /* 1.1 lost its last replica before */
	d = dep("d", DEPLOY_RUNNING, 3, v);
	reconcile_plan(&p, &d, 1, seen);
	check(actions(&p, &d),
	      "HEALTH:v1-r1=unhealthy UNSERVED:v1(0) HEALTH:v2-r1=healthy SERVED:v2(1) HEALTH:v3-r1=unhealthy",
	      servers(&p, 0), NULL);
	rc_plan_free(&p);
	dep_free(&d);
}

/*
 * what is said of a version is judged against what was said, not against
 * its replicas' rows: a daemon killed after writing a replica's change and
 * before its version's event (the row says unhealthy already) says it at
 * the next round; said once, not again; a version's first healthy replica
 * is said without an event, one that never served says nothing; a stopped
 * deployment's versions are said nothing again (its start is no loss)
 */
static void test_reconcile_plan__version_said(void **state)
{
	struct deploy_replica r1[] = {rep(1, 1, DEPLOY_H_UNHEALTHY, 0)};
	struct deploy_replica r2[] = {rep(1, 1, DEPLOY_H_STARTING, 0)};
	struct deploy_replica r3[] = {rep(1, 1, DEPLOY_H_STARTING, 0)};
	struct deploy_version v[] = {ver("1.0", 1, 50, 1, DEPLOY_V_SERVING, 1, r1),
				     ver("1.1", 2, 50, 1, DEPLOY_V_SERVING, 1, r2),
				     ver("1.2", 3, 0, 1, DEPLOY_V_SERVING, 1, r3)};
	struct deployment d;
	struct rc_seen seen[] = {{1, 0, 0, NULL}, {1, 1, 0, NULL}, {1, 0, 0, NULL}};
	struct rc_plan p;

	(void)state;
	v[1].said = DEPLOY_SAID_NONE, v[2].said = DEPLOY_SAID_NONE;
	d = dep("d", DEPLOY_RUNNING, 3, v);
	/* 1.0: its row unhealthy already, still not ready, said served: unserved now (its event) */
	reconcile_plan(&p, &d, 1, seen);
	check(actions(&p, &d), "UNSERVED:v1(0) HEALTH:v2-r1=healthy SAID:v2=served HEALTH:v3-r1=unhealthy",
	      servers(&p, 0), NULL);
	rc_plan_free(&p);
	/* as written: nothing more to say */
	d.versions[0].said = DEPLOY_SAID_UNSERVED, d.versions[1].said = DEPLOY_SAID_SERVED;
	d.versions[1].replicas[0].health = DEPLOY_H_HEALTHY, d.versions[2].replicas[0].health = DEPLOY_H_UNHEALTHY;
	reconcile_plan(&p, &d, 1, seen);
	check(actions(&p, &d), "", servers(&p, 0), NULL);
	rc_plan_free(&p);
	/* stopped: what was said is forgotten, without an event */
	d.state = DEPLOY_STOPPED;
	reconcile_plan(&p, &d, 1, seen);
	check(actions(&p, &d), "SAID:v1=none SAID:v2=none STOP:v1-r1 STOP:v2-r1 STOP:v3-r1", servers(&p, 0), NULL);
	rc_plan_free(&p);
	dep_free(&d);
}

/* an A/B test: its version's healthy replicas in the header-routed backend, routing only while it has one */
static void test_reconcile_plan__ab_routing(void **state)
{
	struct deploy_replica r1[] = {rep(1, 1, DEPLOY_H_HEALTHY, 0)};
	struct deploy_replica r2[] = {rep(1, 1, DEPLOY_H_HEALTHY, 0), rep(2, 1, DEPLOY_H_HEALTHY, 0)};
	struct deploy_version v[] = {ver("1.0", 1, 100, 1, DEPLOY_V_SERVING, 1, r1),
				     ver("2.0", 2, 0, 2, DEPLOY_V_SERVING, 2, r2)};
	struct deployment d = dep("d", DEPLOY_RUNNING, 2, v);
	struct rc_seen seen[] = {{1, 1, 0, NULL}, {1, 1, 0, NULL}, {1, 0, 0, NULL}};
	struct rc_plan p;

	(void)state;
	d.match_version = xstrdup("2.0");
	d.match_header = "X-Canary";
	reconcile_plan(&p, &d, 1, seen);
	free(actions(&p, &d));
	assert_int_equal(p.fe[0].nab, 1);
	assert_string_equal(p.fe[0].ab_servers[0].name, "v2-r1");
	assert_int_equal(p.fe[0].ab_servers[0].weight, 1);
	assert_string_equal(p.fe[0].match_header, "X-Canary");
	rc_plan_free(&p);
	seen[1].ready = 0;
	reconcile_plan(&p, &d, 1, seen);
	free(actions(&p, &d));
	assert_int_equal(p.fe[0].nab, 0);
	assert_null(p.fe[0].match_header);
	rc_plan_free(&p);
	d.match_header = NULL;
	dep_free(&d);
}

/* two deployments: a frontend each, their replicas found by offset */
static void test_reconcile_plan__two_deployments(void **state)
{
	struct deploy_replica r1[] = {rep(1, 1, DEPLOY_H_HEALTHY, 0)};
	struct deploy_replica r2[] = {rep(1, 0, DEPLOY_H_STARTING, 0)};
	struct deploy_version v1[] = {ver("1.0", 1, 100, 1, DEPLOY_V_SERVING, 1, r1)};
	struct deploy_version v2[] = {ver("1.0", 1, 100, 1, DEPLOY_V_SERVING, 1, r2)};
	struct deployment d[2];
	struct rc_seen seen[] = {{1, 1, 0, NULL}, {0, 0, 0, NULL}};
	struct rc_plan p;

	(void)state;
	v2[0].said = DEPLOY_SAID_NONE; /* never served yet: its replica has not started */
	d[0] = dep("a", DEPLOY_RUNNING, 1, v1), d[1] = dep("b", DEPLOY_RUNNING, 1, v2);
	d[1].port = 8081;
	reconcile_plan(&p, d, 2, seen);
	assert_int_equal(p.nfe, 2);
	assert_string_equal(p.fe[1].name, "b");
	assert_int_equal(p.fe[1].port, 8081);
	assert_int_equal(p.nactions, 1);
	assert_int_equal(p.actions[0].what, RC_START);
	assert_int_equal(p.actions[0].dep, 1);
	check(xstrdup(""), "", servers(&p, 1), "v1-r1=0");
	rc_plan_free(&p);
	dep_free(&d[0]);
	dep_free(&d[1]);
}

/*
 * replicas on other hosts: one whose host is up is not judged by a pid here
 * (no start, no health change; its row's health weighs it, at its host's
 * address); one whose host is lost is not alive: started again here
 */
static void test_reconcile_plan__lost_host(void **state)
{
	struct deploy_replica r[] = {rep(1, 1, DEPLOY_H_HEALTHY, 0), rep(2, 1, DEPLOY_H_HEALTHY, 0),
				     rep(3, 1, DEPLOY_H_UNHEALTHY, 0)};
	struct deploy_version v[] = {ver("1.0", 1, 100, 3, DEPLOY_V_SERVING, 3, r)};
	struct deployment d = dep("d", DEPLOY_RUNNING, 1, v);
	/* r1 here and ready; r2 on host 10.0.0.2 (up); r3 on 10.0.0.3 (up, its row says unhealthy) */
	struct rc_seen seen[] = {{1, 1, 0, NULL}, {0, 0, 1, "10.0.0.2"}, {0, 0, 1, "10.0.0.3"}};
	struct rc_plan p;
	char buf[64];
	int w = deploy_server_weight(100, 2);

	(void)state;
	reconcile_plan(&p, &d, 1, seen);
	snprintf(buf, sizeof(buf), "v1-r1=%d v1-r2=%d v1-r3=0", w, w);
	check(actions(&p, &d), "", servers(&p, 0), buf);
	assert_string_equal(p.fe[0].servers[0].addr, "127.0.0.1");
	assert_string_equal(p.fe[0].servers[1].addr, "10.0.0.2");
	assert_int_equal(p.fe[0].servers[1].port, 9002);
	rc_plan_free(&p);
	/* r2's host is lost: not alive, not remote — started again (here), no traffic meanwhile */
	seen[1] = (struct rc_seen){0, 0, 0, NULL};
	reconcile_plan(&p, &d, 1, seen);
	snprintf(buf, sizeof(buf), "v1-r1=%d v1-r2=0 v1-r3=0", deploy_server_weight(100, 1));
	check(actions(&p, &d), "START:v1-r2", servers(&p, 0), buf);
	rc_plan_free(&p);
	/* a stopped deployment: the remote replica is stopped too (its host is told to) */
	d.state = DEPLOY_STOPPED;
	seen[1] = (struct rc_seen){0, 0, 1, "10.0.0.2"};
	reconcile_plan(&p, &d, 1, seen);
	check(actions(&p, &d), "SAID:v1=none STOP:v1-r1 STOP:v1-r2 STOP:v1-r3", servers(&p, 0), NULL);
	assert_int_equal(p.nfe, 0);
	rc_plan_free(&p);
	dep_free(&d);
}

/*
 * a version still starting (its deploy step's): its replicas placed on a
 * host are started by that host (not remote, not alive: START), a placed
 * one on another host that is up is left to it (remote), and the step's
 * own started replicas are never touched; none is in HAProxy yet
 */
static void test_reconcile_plan__placed(void **state)
{
	struct deploy_replica r[] = {rep(1, 1, DEPLOY_H_STARTING, 0), rep(2, 0, DEPLOY_H_STARTING, 0),
				     rep(3, 0, DEPLOY_H_STARTING, 0), rep(4, 0, DEPLOY_H_UNHEALTHY, 2000)};
	struct deploy_version v[] = {ver("1.0", 1, 100, 1, DEPLOY_V_SERVING, 0, NULL),
				     ver("2.0", 2, 0, 4, DEPLOY_V_STARTING, 4, r)};
	struct deployment d;
	/* 2.0: r1 the step's own (alive), r2 placed here, r3 placed on an up host, r4 placed here, in its backoff */
	struct rc_seen seen[] = {{1, 0, 0, NULL}, {0, 0, 0, NULL}, {0, 0, 1, "10.0.0.3"}, {0, 0, 0, NULL}};
	struct rc_plan p;

	(void)state;
	v[0].said = DEPLOY_SAID_NONE; /* no replica: it never served */
	for (int k = 1; k < 4; k++)
		v[1].replicas[k].handle = fleet_placed_handle(k == 2 ? "host-c" : "host-b");
	d = dep("d", DEPLOY_RUNNING, 2, v);
	reconcile_plan(&p, &d, 1, seen);
	check(actions(&p, &d), "START:v2-r2", servers(&p, 0), "");
	rc_plan_free(&p);
	/* its backoff over: r4 starts too; r3's host is lost (not remote): started (the leader places it again) */
	d.versions[1].replicas[3].next_start_in_ms = 0;
	seen[2] = (struct rc_seen){0, 0, 0, NULL};
	reconcile_plan(&p, &d, 1, seen);
	check(actions(&p, &d), "START:v2-r2 START:v2-r3 START:v2-r4", servers(&p, 0), "");
	rc_plan_free(&p);
	/* a version starting in a stopped deployment is still its step's: no STOP, its placed ones start */
	d.state = DEPLOY_STOPPED;
	reconcile_plan(&p, &d, 1, seen);
	check(actions(&p, &d), "START:v2-r2 START:v2-r3 START:v2-r4", servers(&p, 0), NULL);
	rc_plan_free(&p);
	assert_true(fleet_placed(d.versions[1].replicas[1].handle));
	assert_false(fleet_placed(d.versions[1].replicas[0].handle));
	assert_false(fleet_placed(NULL));
	dep_free(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reconcile_plan__missing_replica),
		cmocka_unit_test(test_reconcile_plan__health),
		cmocka_unit_test(test_reconcile_plan__extra_replica),
		cmocka_unit_test(test_reconcile_plan__weights),
		cmocka_unit_test(test_reconcile_plan__draining_version),
		cmocka_unit_test(test_reconcile_plan__stopped_deployment),
		cmocka_unit_test(test_reconcile_plan__version_events),
		cmocka_unit_test(test_reconcile_plan__version_said),
		cmocka_unit_test(test_reconcile_plan__ab_routing),
		cmocka_unit_test(test_reconcile_plan__two_deployments),
		cmocka_unit_test(test_reconcile_plan__lost_host),
		cmocka_unit_test(test_reconcile_plan__placed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * reconcile_plan — the decisions of a reconcile round, with no I/O: from
 * the deployments as the database holds them (what is wanted: versions,
 * weights, replica counts, and what was last seen of each replica) and
 * what this round observed of each replica (its process alive, its health
 * check answered), what to do: replicas' health changes, (re)starts,
 * versions that lost or regained their last healthy replica, the HAProxy
 * configuration (a frontend per running deployment, a server per replica
 * of a serving version, weighted by its version's share over its healthy
 * replicas), and the replicas to remove (past their version's count) or
 * stop (a stopped deployment's, a retired version's) once HAProxy has
 * left them. A replica on another host that is up (rc_seen.remote) is
 * never restarted or judged here: its recorded health decides its weight,
 * and HAProxy reaches it at its host's address; one whose host is lost
 * is not alive, so it is started again here (a replacement).
 * reconcile.c observes, calls it and applies the result;
 * tests/unit/test_reconcile_plan.c covers each repair.
 */
#ifndef FERRY_RECONCILE_PLAN_H
#define FERRY_RECONCILE_PLAN_H

#include <stddef.h>

#include "deploy/haproxy.h"
#include "store/store_deploy.h"

/* What a round saw of one replica. */
struct rc_seen {
	unsigned char alive;  /* its process lives (replica_alive of its handle) */
	unsigned char ready;  /* it answered GET /v2/health/ready with 200 (asked of live serving replicas only) */
	unsigned char remote; /* it runs on another host that is up: not observed from here, its row's health holds */
	const char *addr;     /* the IP address HAProxy reaches it at; NULL: 127.0.0.1 (this host) */
};

enum rc_what {
	/* before HAProxy is changed */
	RC_HEALTH,           /* a live replica's health is now .health: record it, with an event */
	RC_START,            /* a serving replica's process is gone and its backoff passed, or one placed here */
			     /* (fleet_placed): start it (generation + 1), placing it first when it needs a host */
	RC_VERSION_UNSERVED, /* a version with a share lost its last healthy replica: it gets no traffic (event) */
	RC_VERSION_SERVED,   /* … has a healthy replica again (event) */
	RC_VERSION_SAID,     /* what is said of a version's health is now .said, no event: its first healthy */
			     /* replica (served), or it no longer serves (none: its deployment stopped, retired) */
	/* after */
	RC_REMOVE,           /* a replica past its serving version's count: stop it and forget its row */
	RC_STOP,             /* a replica of a stopped deployment or a retired version: stop it, health stopped */
};

struct rc_action {
	enum rc_what what;
	size_t dep, ver, rep;      /* list[dep].versions[ver].replicas[rep] (rep unused for RC_VERSION_*) */
	enum deploy_health health; /* RC_HEALTH: the new health */
	int healthy;               /* RC_VERSION_*: its healthy replicas this round */
	enum deploy_said said;     /* RC_VERSION_*: what is said of it now */
};

struct rc_plan {
	struct rc_action *actions; /* the RC_HEALTH … RC_VERSION_* ones first, then RC_REMOVE and RC_STOP */
	size_t nactions;
	/* HAProxy: a frontend per running deployment (names and servers point into the plan and the list) */
	struct hap_frontend *fe;
	size_t nfe;
	struct hap_server *sv, *absv;
	char **names;
	size_t nnames;
};

/*
 * The plan for list[0..n-1] with seen parallel to their replicas (the
 * replicas of list[0].versions[0], then of its versions[1], …, then of
 * list[1], …). *out is the caller's to free with rc_plan_free; it points
 * into list, which must outlive it.
 */
void reconcile_plan(struct rc_plan *out, const struct deployment *list, size_t n, const struct rc_seen *seen);
void rc_plan_free(struct rc_plan *p);

/* Whether version v of deployment d serves: its replicas are checked and take traffic. */
int rc_serves(const struct deployment *d, const struct deploy_version *v);
/* Whether rep is past its serving version's count (scaled down): it goes once HAProxy left it. */
int rc_scaled_away(const struct deployment *d, const struct deploy_version *v, const struct deploy_replica *rep);

#endif

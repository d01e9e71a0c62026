/*
 * deploy — the rules of deployments that need no database, no process and
 * no network: how traffic is shared when a version is added, how a
 * version's percentage becomes HAProxy weights on its replicas, and the
 * validation of what users ask for (traffic, replicas, auto-stop, names).
 * The deploy step (steps/kind_deploy.c), the API and the reconcile task
 * (orchestrator/deploy/reconcile.c) all go through these, so the three agree.
 * Design note: orchestrator/deploy/DEPLOY.md.
 */
#ifndef FERRY_DEPLOY_H
#define FERRY_DEPLOY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define DEPLOY_MAX_REPLICAS 5
#define DEPLOY_MAX_VERSIONS 16
#define DEPLOY_AUTO_STOP_DEFAULT_S 3600
/* HAProxy's weight of a version at 100% (over its replicas); HAProxy takes 0–256 per server */
#define DEPLOY_HAP_SCALE 250

/*
 * The weights after a version is added with traffic t (0–100) to versions
 * whose weights are cur[0..n-1] (each 0–100, summing to 100 or all 0):
 * out[0..n-1] keep the rest (100 - t) in proportion to what they had
 * (largest remainder, so the sum is exactly 100), out[n] = t. With no
 * version taking traffic (n == 0 or all 0) the new one gets 100 whatever t.
 */
void deploy_weights_add(const int *cur, size_t n, int t, int *out);

/*
 * The weights after one version (index i) is set to t: the others share
 * 100 - t in proportion to what they had; when they had nothing, it goes
 * to the one added last (the highest index other than i).
 */
void deploy_weights_set(const int *cur, size_t n, size_t i, int t, int *out);

/*
 * HAProxy weight of each of a version's `healthy` replicas when the
 * version has pct percent: DEPLOY_HAP_SCALE * pct / 100 shared between
 * them (at least 1 when pct > 0), 0 when pct is 0 or none is healthy. The
 * split between versions stays pct's because HAProxy's round robin is
 * weighted by the server weights' sum per version.
 */
int deploy_server_weight(int pct, int healthy);

/* Checks a value from a user; FERRY_EINVALID with a message naming field. */
int deploy_check_traffic(const json_t *v, const char *field, int *out);
int deploy_check_replicas(const json_t *v, const char *field, int *out);
/*
 * auto_stop: "1h" … "24h" (whole hours), an integer number of hours, or
 * "never" (*secs 0). FERRY_TEST_AUTO_STOP_UNIT_S, when set, is the length
 * of an "hour" in seconds (tests stop deployments in seconds).
 */
int deploy_check_auto_stop(const json_t *v, const char *field, int *secs);

/*
 * retire_after (a deploy step's key, PATCH's field): how long a version may
 * stay at 0% before it retires — a duration from 1s to 30d, or "never"
 * (*secs 0). FERRY_EINVALID naming field otherwise.
 */
#define DEPLOY_RETIRE_AFTER_DEFAULT_S 3600
int deploy_check_retire_after(const json_t *v, const char *field, int *secs);
/* How long before its deadline a deployment's auto-stop is announced: 10 minutes of an "hour" (see above). */
int deploy_warn_lead_s(void);

/* A deployment name: [A-Za-z0-9][A-Za-z0-9_.-]{0,63}. */
int deploy_check_name(const char *name, const char *field);

/* A host a replica may go to, as placement sees it (issue 29: a fleet). */
struct deploy_host {
	const char *name;
	int up;               /* a daemon of it heartbeat within its lease */
	const json_t *labels; /* FERRY_HOST_LABELS as an object of strings, or NULL */
	int gpus;             /* GPUs it has */
	double cpus;          /* CPUs it has; 0: not known (bounds nothing) */
	int64_t memory_mb;    /* memory it has, MiB; 0: not known (bounds nothing) */
	int replicas;         /* replicas placed there now, of every deployment */
	int same;             /* of those, replicas of the version being placed */
	/* what those replicas ask for in all (their deploy steps' resources) */
	double held_cpus;
	int64_t held_memory_mb;
	int held_gpus;
};

/* What one replica asks for: its deploy step's resources (0: nothing). */
struct deploy_req {
	double cpus;
	int64_t memory_mb;
	int gpus;
};

/*
 * Where one more replica of a version goes: among the up hosts whose labels
 * hold every pair of want (a deploy step's placement.hosts; NULL: any host)
 * and where need fits beside what the replicas already there ask for (a
 * host's CPUs or memory not known bound nothing), the one with the fewest
 * replicas of that version (spread across hosts first), then the fewest
 * replicas in all, then prefer (the placer's own host: no hop, the model
 * likely there; NULL: none), then the first by name. Its index, or
 * FERRY_ENOTFOUND with a message that says why no host fits (none up,
 * none with the labels, no room: each such host's free CPUs, memory and
 * GPUs). need NULL asks for nothing. The caller counts the replica in
 * (same, replicas, held_*) before placing the next one.
 */
int deploy_place(const struct deploy_host *hosts, size_t n, const json_t *want, const struct deploy_req *need,
		 const char *prefer);

#endif

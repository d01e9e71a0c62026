/*
 * replicas — the model-server processes of a deployment's versions: start
 * one through an executor type as a service job (local processes, or a
 * podman or docker container on the host's network; each under a
 * supervisor that outlives the daemon like any job's and is found again
 * from its handle), ask whether it lives,
 * ask it over HTTP whether it is ready (Open Inference Protocol v2:
 * GET /v2/health/ready, then a warm-up POST /v2/models/NAME/infer with the
 * deploy step's sample), and stop it (SIGTERM, a grace period, SIGKILL).
 * Every call may block for a bounded time: they run on worker threads
 * (the deploy step's prepare, the reconcile task), never on the engine's loop.
 */
#ifndef FERRY_REPLICAS_H
#define FERRY_REPLICAS_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

struct replica_spec {
	const char *home;        /* $FERRY_HOME */
	const char *deployment;  /* its name: the replica lives in $FERRY_HOME/deployments/NAME/ */
	int ord;                 /* the version's ordinal in the deployment */
	int idx;                 /* 1–5 */
	int generation;          /* 1 + restarts: each start has its own directory and log */
	int port;                /* where it listens (FERRY_PORT) */
	const char *model, *version, *artifact; /* FERRY_MODEL_NAME, FERRY_MODEL_VERSION, FERRY_MODEL_PATH */
	const json_t *serve;     /* the command: an array of strings */
	const json_t *env;       /* extra environment (object) or NULL */
	const char *workdir;     /* where it runs (the run's working directory) or NULL */
	const json_t *placement; /* {executor, image, resources} of the deploy step, or NULL: local */
	PGconn *conn;            /* to fetch the model from another host when this one lacks it (NULL: never) */
};

/*
 * Starts a replica; *handle (the caller's) is its executor type's handle
 * (its supervisor's "pid" and "start", a container's name) plus
 * "executor" and "dir" (the replica's directory: log, status).
 */
int replica_start(const struct replica_spec *s, json_t **handle);

/* Whether the replica with handle runs (its supervisor is alive). */
int replica_alive(const json_t *handle);

/* Stops it through its executor type: SIGTERM, up to grace_ms, then SIGKILL; then its cleanup. */
void replica_stop(const json_t *handle, int64_t grace_ms);

/*
 * Fences this host's stale replicas: each local replica under
 * home/deployments whose supervisor lives and whose directory is none of
 * keep[0..nkeep-1] (the directories the deployments' rows name on this
 * host) is stopped as replica_stop does when its slot
 * ("NAME/runs/ORD/rIDX") is among slots[0..nslots-1] (the slots whose row
 * names a process on another host: one a lost host ran while the leader
 * replaced it elsewhere), or when it is not and its status file is at
 * least min_age_s old (a replica just started has no row yet); never
 * one whose status file is younger than 5 s (a deploy step's start, on
 * another thread, writes its row right after). Container replicas are left
 * (their handle names the container). How many it stopped.
 */
int replica_fence(const char *home, char *const *keep, size_t nkeep, char *const *slots, size_t nslots, int min_age_s,
		  int64_t grace_ms);

/*
 * The address this host's replicas listen on (FERRY_BIND_ADDR in their
 * environment) and are reached at from every host: the IPv4 host part of
 * this daemon's public URL (FERRY_PUBLIC_URL, else its API's address), or
 * 127.0.0.1 when that is a name, IPv6 or 0.0.0.0. Set once at start.
 */
void replica_set_address(const char *public_url);
const char *replica_address(void);

/* The IPv4 host part of url into ip[0..n-1]: 1, or 0 (ip "") when it has none (a name, IPv6, 0.0.0.0). */
int replica_url_ip(const char *url, char *ip, size_t n);

/*
 * One HTTP request to addr:port (addr NULL: this host's replica address;
 * body NULL: GET); *status the HTTP status, *resp (may be NULL) the
 * answer's body, the caller's. FERRY_ERROR (message set) when no answer
 * came within timeout_ms.
 */
int replica_http(const char *method, const char *addr, int port, const char *path, const char *body,
		 int64_t timeout_ms, long *status, char **resp);

/*
 * Waits until the replica at addr:port (addr NULL: this host's) answers
 * ready and a warm-up inference with sample (a JSON request; NULL: none)
 * succeeds, or it dies (handle: one of this host's; NULL: another host's,
 * not watched), or until_ms (monotonic) passes: 0, or FERRY_ERROR with
 * the reason in the message.
 */
int replica_wait_ready(const char *addr, int port, const char *model, const char *sample, const json_t *handle,
		       int64_t until_ms);

/*
 * n (at most 8) different TCP ports that no address of this machine holds
 * now and, with conn, that no deployment's row gives to its front or a
 * replica (store_deploy_ports_taken: a front is bound a round after its
 * port is picked, and on every host; a stopped replica binds its port
 * again): from FERRY_DEPLOY_PORTS ("LO-HI") when it is set, else the
 * kernel's ephemeral ports (bind port 0); FERRY_ERROR when short,
 * FERRY_EDB when the rows could not be read.
 */
int replica_free_ports(PGconn *conn, int *out, int n);

/* One such port; 0 on error. */
int replica_free_port(PGconn *conn);

/* Whether port can be bound on every address now (0: another program holds it on one). */
int replica_port_free(int port);

/*
 * FERRY_DEPLOY_PORTS checked: 0 when unset or "LO-HI" with 1024 <= LO,
 * LO + 15 <= HI <= 65535; FERRY_EINVALID with the message otherwise.
 */
int replica_ports_check(void);

#endif

/*
 * haproxy — the traffic split of deployments: one HAProxy process per
 * FERRY_HOME (files in $FERRY_HOME/haproxy), one frontend and one backend
 * per deployment, each server a replica with a weight. hap_apply makes
 * HAProxy serve a desired state (run-time commands when only weights,
 * states or addresses changed; a seamless reload when the frontends or the
 * set of servers changed) and reports what it repaired; hap_read and
 * hap_stats read back what HAProxy has and counts. Calls may block (they
 * run on the worker pool), every wait is bounded, and one struct hap may be
 * shared by threads (calls are serialised inside).
 */
#ifndef FERRY_HAPROXY_H
#define FERRY_HAPROXY_H

#include <jansson.h>
#include <stddef.h>

/* Largest server weight HAProxy accepts. */
#define HAP_WEIGHT_MAX 256

struct hap_server {
	const char *name; /* unique within its backend: [A-Za-z0-9_.-]{1,64}, e.g. "v3-r1" */
	const char *addr; /* an IPv4 address, "127.0.0.1" */
	int port;
	int weight;       /* 0..256; 0 = receives no request */
	int drain;        /* 1: state drain (no new requests, in-flight finish); 0: ready */
};

struct hap_frontend {
	const char *name; /* the deployment's name: [A-Za-z0-9_.-]{1,64} */
	int port;         /* front port on the fronts' address (hap_set_front) */
	const struct hap_server *servers;
	size_t nservers;
	/*
	 * Header routing (an A/B test), or match_header NULL: a request with
	 * header match_header (equal to match_value, or any value when NULL)
	 * goes to ab_servers (backend NAME:ab), the others by the weights.
	 * Header: [A-Za-z0-9-]{1,64}; value: [A-Za-z0-9._~-]{1,64}. Part of
	 * the layout: a change reloads HAProxy.
	 */
	const char *match_header, *match_value;
	const struct hap_server *ab_servers;
	size_t nab;
};

struct hap;

/*
 * Opens the HAProxy of dir ($FERRY_HOME/haproxy, created 0700 when
 * missing): finds a running haproxy from its pid file, starts nothing.
 * The binary is $FERRY_HAPROXY, else haproxy on PATH (then /usr/sbin); the
 * template is $FERRY_HAPROXY_TEMPLATE, else the copy of
 * deploy/haproxy.cfg.tmpl built into the binary. *out is the caller's
 * (hap_close).
 */
int hap_open(struct hap **out, const char *dir);

/*
 * The address the fronts listen on ({{front_addr}} in the template; 127.0.0.1
 * until set): an IPv4 address, else FERRY_EINVALID. Part of the layout: a
 * change reloads at the next hap_apply.
 */
int hap_set_front(struct hap *h, const char *addr);

/* Frees h (NULL is fine); haproxy keeps running. */
void hap_close(struct hap *h);

/*
 * Makes HAProxy serve exactly fe[0..n-1]: starts haproxy when it is not
 * running and n > 0 (daemonised: it outlives the daemon), changes weights,
 * drain/ready states and server addresses at run time through the admin
 * socket, and reloads (seamless: no connection refused) only when
 * frontends or the set of servers changed. The config file and the
 * server-state file are rewritten (atomically) on every change, so a
 * reload or a restart of haproxy reproduces exactly this state. Each
 * difference repaired is appended to changes (a JSON array; may be NULL)
 * as an object such as
 *   {"frontend":"digits","server":"v3-r1","what":"weight","from":40,"to":80}
 * with what one of "started", "reloaded", "stopped", "weight", "state",
 * "addr", "port" (a frontend's), "server-added", "server-removed",
 * "frontend-added", "frontend-removed". n == 0 stops haproxy. Bad input
 * (a name, port, weight or address out of range, a duplicate) is
 * FERRY_EINVALID and changes nothing.
 */
int hap_apply(struct hap *h, const struct hap_frontend *fe, size_t n, json_t *changes);

/*
 * What haproxy has now, from the admin socket: *out is a new array (the
 * caller's) of {"frontend","server","addr","port","weight","state"} with
 * state "ready", "drain" or "maint", in HAProxy's order. FERRY_ENOTFOUND
 * when haproxy is not running.
 */
int hap_read(struct hap *h, json_t **out);

/*
 * Per-server statistics ("show stat"): *out is a new array of
 * {"frontend","server","requests","hrsp_2xx","hrsp_5xx","rtime_ms",
 * "qtime_ms","ttime_ms","scur","status"}. requests and hrsp_* count since
 * the worker started (a reload or restart sets them back to 0); the times
 * are HAProxy's averages over the server's last 1024 requests.
 * FERRY_ENOTFOUND when haproxy is not running.
 */
int hap_stats(struct hap *h, json_t **out);

/* 1 when the haproxy of h's directory runs, else 0. */
int hap_running(struct hap *h);

/*
 * Reloads haproxy from its files as they are (checked first with
 * haproxy -c) and waits, bounded, for the new worker. FERRY_ENOTFOUND when
 * not running.
 */
int hap_reload(struct hap *h);

/* Stops haproxy: SIGUSR1 (soft stop), a bounded wait, then SIGKILL. */
void hap_stop(struct hap *h);

/* The template built into the binary (deploy/haproxy.cfg.tmpl). */
extern const char hap_template_builtin[];

#endif

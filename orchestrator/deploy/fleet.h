/*
 * fleet — the hosts as deployments see them (issue 29): which are up,
 * the address their replicas are reached at, their labels and GPUs, how
 * many replicas each runs; and where one more replica of a version goes
 * (plan/deploy.c's deploy_place: spread across hosts first, then the
 * least loaded, then this host, respecting the deploy step's placement.hosts labels and
 * the room its resources need beside the replicas a host runs already). Read once per round or per deploy step (one query,
 * ferry_hosts()); a placement counts itself in, so the next one of the
 * same round sees it.
 */
#ifndef FERRY_FLEET_H
#define FERRY_FLEET_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stddef.h>

#include "store/store_deploy.h"

/*
 * The hosts by name: {"state", "ip", "labels", "gpus", "replicas", "cpus",
 * "memory_mb", "held"} (ip: the IPv4 host part of its address, "" when it
 * has none; gpus: how many it declared; cpus, memory_mb: 0 when not
 * known; held: {cpus, memory_mb, gpus} its live replicas ask for). NULL when they could not be read (message set).
 */
json_t *fleet_hosts(PGconn *conn);

/*
 * The address a replica on host is reached at: that host's ip in hosts,
 * this host's replica address (replica_address) when host is this one or
 * unknown (NULL hosts, no ip).
 */
const char *fleet_ip(const json_t *hosts, const char *host);

/*
 * Where one more replica of the version ord of deployment dep goes (v:
 * its rows, or NULL for a version with none yet): a host's name into out. serve is
 * the version's serve object (its placement: hosts labels; resources, what
 * one replica asks for).
 * Counts the replica in hosts (its "replicas", and this version's on that
 * host), so the next call of the round places the next one. With no
 * hosts (NULL: not read) it is this host. FERRY_ENOTFOUND with a
 * message that says why no host fits.
 */
int fleet_place(json_t *hosts, int64_t dep, int ord, const struct deploy_version *v, const json_t *serve, char *out,
		size_t outsz);

/* Whether a replica's handle is a placement only: a host was chosen, its daemon has not started it yet. */
int fleet_placed(const json_t *handle);

/* The handle of a replica placed on host, to be started by that host's daemon. */
json_t *fleet_placed_handle(const char *host);

#endif

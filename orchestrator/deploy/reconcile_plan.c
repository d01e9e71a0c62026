/*
 * reconcile_plan — see reconcile_plan.h. The rules, in the order a round
 * applies them:
 *   - a replica of a serving version (its deployment running), not past
 *     the version's count: alive and ready → healthy, alive and not →
 *     unhealthy (an RC_HEALTH when that differs from its row); gone →
 *     RC_START once its restart backoff passed (counted unhealthy this
 *     round: it is healthy at a later round, once it answers); one on
 *     another host that is up (remote): its row's health, no action;
 *   - a replica of a version still starting (its deploy step's) that was
 *     placed on a host (fleet_placed) and is not remote: RC_START (that
 *     host's daemon starts it; the leader re-places it when the host is
 *     lost); the step's own replicas are left to it;
 *   - a version's health against what was last said of it (its row's
 *     health_said, written with the event), not against its replicas'
 *     recorded health (a daemon killed between a replica's change and its
 *     version's event lost the event): said served, no healthy replica
 *     and a share (weight > 0): RC_VERSION_UNSERVED; said unserved and a
 *     healthy replica: RC_VERSION_SERVED; said nothing and a healthy
 *     replica: RC_VERSION_SAID served (its first, no event); not serving
 *     (its deployment stopped, retired) and something said: RC_VERSION_SAID
 *     none (so a deployment started again says nothing until it served);
 *   - HAProxy: one frontend per running deployment; each such replica a
 *     server vORD-rIDX weighted deploy_server_weight(share, healthy) when
 *     healthy, else 0; an A/B test's version's healthy replicas also in
 *     the header-routed backend, the header routing only while it has one;
 *   - after HAProxy: RC_REMOVE for replicas past their serving version's
 *     count; RC_STOP for the live replicas of a stopped deployment (every
 *     version but one still starting: its deploy step owns it) and of
 *     retired versions.
 */
#include "deploy/reconcile_plan.h"

#include <stdlib.h>
#include <string.h>

#include "plan/deploy.h"
#include "deploy/fleet.h"
#include "lib/util.h"

int rc_serves(const struct deployment *d, const struct deploy_version *v)
{
	return d->state == DEPLOY_RUNNING && v->state == DEPLOY_V_SERVING;
}

int rc_scaled_away(const struct deployment *d, const struct deploy_version *v, const struct deploy_replica *rep)
{
	return rc_serves(d, v) && rep->idx > v->want_replicas;
}

static void add(struct rc_plan *p, size_t *cap, struct rc_action a)
{
	if (p->nactions == *cap) {
		*cap = *cap ? *cap * 2 : 16;
		p->actions = xrealloc(p->actions, *cap * sizeof(*p->actions));
	}
	p->actions[p->nactions++] = a;
}

/* An action on replica k of version j of deployment i. */
static struct rc_action replica_action(enum rc_what what, size_t i, size_t j, size_t k, enum deploy_health health)
{
	return (struct rc_action){.what = what, .dep = i, .ver = j, .rep = k, .health = health};
}

/* An RC_VERSION_* action on version j of deployment i. */
static struct rc_action version_action(enum rc_what what, size_t i, size_t j, int healthy, enum deploy_said said)
{
	return (struct rc_action){.what = what, .dep = i, .ver = j, .healthy = healthy, .said = said};
}

void reconcile_plan(struct rc_plan *out, const struct deployment *list, size_t n, const struct rc_seen *seen)
{
	size_t i, j, k, off, total = 0, cap = 0;
	unsigned char *ok;

	memset(out, 0, sizeof(*out));
	for (i = 0; i < n; i++)
		for (j = 0; j < list[i].nversions; j++)
			total += list[i].versions[j].nreplicas;
	ok = xcalloc(total + 1, 1); /* each replica healthy this round */

	/* replicas first: their health decides the weights */
	off = 0;
	for (i = 0; i < n; i++) {
		const struct deployment *d = &list[i];
		for (j = 0; j < d->nversions; off += d->versions[j++].nreplicas) {
			const struct deploy_version *v = &d->versions[j];
			int healthy = 0;
			if (v->state == DEPLOY_V_STARTING) {
				/* a deploy step's replicas placed on other hosts: each host's daemon starts its own */
				for (k = 0; k < v->nreplicas; k++)
					if (fleet_placed(v->replicas[k].handle) && !seen[off + k].remote &&
					    !seen[off + k].alive && v->replicas[k].next_start_in_ms <= 0)
						add(out, &cap, replica_action(RC_START, i, j, k, DEPLOY_H_STARTING));
				continue;
			}
			if (!rc_serves(d, v)) {
				if (v->said != DEPLOY_SAID_NONE)
					add(out, &cap, version_action(RC_VERSION_SAID, i, j, 0, DEPLOY_SAID_NONE));
				continue;
			}
			for (k = 0; k < v->nreplicas; k++) {
				const struct deploy_replica *rep = &v->replicas[k];
				const struct rc_seen *s = &seen[off + k];
				if (rc_scaled_away(d, v, rep))
					continue;
				if (rep->handle && s->remote) {
					/* another host's, that host up: its recorded health holds */
					ok[off + k] = rep->health == DEPLOY_H_HEALTHY;
				} else if (rep->handle && s->alive) {
					enum deploy_health now = s->ready ? DEPLOY_H_HEALTHY : DEPLOY_H_UNHEALTHY;
					ok[off + k] = s->ready;
					if (rep->health != now)
						add(out, &cap, replica_action(RC_HEALTH, i, j, k, now));
				} else if (rep->next_start_in_ms <= 0) {
					add(out, &cap, replica_action(RC_START, i, j, k, DEPLOY_H_STARTING));
				}
				healthy += ok[off + k];
			}
			if (healthy > 0 && v->said != DEPLOY_SAID_SERVED)
				add(out, &cap, version_action(v->said == DEPLOY_SAID_UNSERVED ? RC_VERSION_SERVED
											       : RC_VERSION_SAID,
							      i, j, healthy, DEPLOY_SAID_SERVED));
			else if (healthy == 0 && v->weight > 0 && v->said == DEPLOY_SAID_SERVED)
				add(out, &cap, version_action(RC_VERSION_UNSERVED, i, j, 0, DEPLOY_SAID_UNSERVED));
		}
	}

	/* HAProxy: one frontend per running deployment, each replica of a serving version a server */
	out->fe = xcalloc(n + 1, sizeof(*out->fe));
	out->sv = xcalloc(total + 1, sizeof(*out->sv));
	out->absv = xcalloc(total + 1, sizeof(*out->absv));
	out->names = xcalloc(total + 1, sizeof(*out->names));
	off = 0;
	{
		size_t nsv = 0, nab = 0;
		for (i = 0; i < n; i++) {
			const struct deployment *d = &list[i];
			struct hap_frontend *fe = &out->fe[out->nfe];
			int running = d->state == DEPLOY_RUNNING;
			if (running) {
				fe->name = d->name;
				fe->port = d->port;
				fe->servers = out->sv + nsv;
			}
			for (j = 0; j < d->nversions; off += d->versions[j++].nreplicas) {
				const struct deploy_version *v = &d->versions[j];
				int healthy = 0;
				if (!rc_serves(d, v))
					continue;
				for (k = 0; k < v->nreplicas; k++)
					healthy += ok[off + k]; /* 0 for those scaled away */
				for (k = 0; k < v->nreplicas; k++) {
					const struct deploy_replica *rep = &v->replicas[k];
					struct hap_server *s = &out->sv[nsv];
					if (rc_scaled_away(d, v, rep))
						continue;
					out->names[out->nnames] = xasprintf("v%d-r%d", v->ord, rep->idx);
					s->name = out->names[out->nnames++];
					s->addr = seen[off + k].addr ? seen[off + k].addr : "127.0.0.1";
					s->port = rep->port;
					s->weight = ok[off + k] ? deploy_server_weight(v->weight, healthy) : 0;
					/* an A/B test's version: its healthy replicas also take the requests that match */
					if (ok[off + k] && d->match_version && strcmp(d->match_version, v->version) == 0) {
						if (fe->nab == 0)
							fe->ab_servers = out->absv + nab;
						out->absv[nab] = *s;
						out->absv[nab++].weight = 1;
						fe->nab++;
					}
					nsv++;
					fe->nservers++;
				}
			}
			/* the header routes only while the tested version has a healthy replica to route to */
			if (running && fe->nab > 0) {
				fe->match_header = d->match_header;
				fe->match_value = d->match_value;
			}
			out->nfe += running;
		}
	}

	/* after HAProxy: replicas scaled away go; a stopped deployment's and retired versions' stop */
	off = 0;
	for (i = 0; i < n; i++) {
		const struct deployment *d = &list[i];
		int all = d->state == DEPLOY_STOPPED;
		for (j = 0; j < d->nversions; off += d->versions[j++].nreplicas) {
			const struct deploy_version *v = &d->versions[j];
			for (k = 0; k < v->nreplicas; k++)
				if (rc_scaled_away(d, v, &v->replicas[k]))
					add(out, &cap, replica_action(RC_REMOVE, i, j, k, DEPLOY_H_STOPPED));
			if (!all && v->state != DEPLOY_V_RETIRED)
				continue;
			/*
			 * a version starting belongs to its deploy step, which starts a
			 * stopped deployment again when it is done: stopping its replicas
			 * here killed a rollout that an auto-stop reached first ("exited
			 * before it was ready", seen under load)
			 */
			if (v->state == DEPLOY_V_STARTING)
				continue;
			for (k = 0; k < v->nreplicas; k++) {
				const struct deploy_replica *rep = &v->replicas[k];
				if (rep->health == DEPLOY_H_STOPPED &&
				    !(rep->handle && (seen[off + k].alive || seen[off + k].remote)))
					continue;
				add(out, &cap, replica_action(RC_STOP, i, j, k, DEPLOY_H_STOPPED));
			}
		}
	}
	free(ok);
}

void rc_plan_free(struct rc_plan *p)
{
	for (size_t i = 0; i < p->nnames; i++)
		free(p->names[i]);
	free(p->names), free(p->sv), free(p->absv), free(p->fe), free(p->actions);
	memset(p, 0, sizeof(*p));
}

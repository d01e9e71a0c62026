/*
 * deploy_replicas — a deploy step's replicas across the fleet (issue 29):
 * each is placed on a host (deploy/fleet.c: spread first, the step's
 * placement.hosts labels and GPUs respected); one placed on the step's own
 * host is started here at once, one placed on another host gets a row
 * naming that host (fleet_placed) and that host's daemon starts it (its
 * `replicas` task, within a round); then every one is waited for at the
 * address it is reached at — ready, then the warm-up sample — wherever it
 * runs. The kind itself is kind_deploy.c.
 */
#ifndef FERRY_DEPLOY_REPLICAS_H
#define FERRY_DEPLOY_REPLICAS_H

#include <jansson.h>
#include <stdint.h>

#include "plan/deploy.h"
#include "steps/steps.h"

struct dr_set {
	int n;
	int ports[DEPLOY_MAX_REPLICAS];      /* where each listens (a placed one's once its host started it) */
	json_t *handles[DEPLOY_MAX_REPLICAS]; /* this host's replicas' handles; NULL: another host's */
	char *host[DEPLOY_MAX_REPLICAS];      /* the host each is placed on */
	char addr[DEPLOY_MAX_REPLICAS][64];   /* the address each is reached at */
	int prev_gen[DEPLOY_MAX_REPLICAS];    /* an earlier try's generation of each slot (0: none) */
	json_t *hosts;                       /* the fleet as this step read it (fleet_hosts), or NULL */
};

/* What the replicas start with (the deploy step's). */
struct dr_what {
	int64_t dep;
	const char *deployment, *model, *version, *artifact;
	int ord;
	const json_t *serve;  /* the command */
	const json_t *spec;   /* the version's serve object: {command, env, workdir, placement} */
};

/*
 * An earlier try of this step (its daemon died half-way) left replicas of
 * the version: this host's are stopped, and each slot's generation kept,
 * so a replica placed again on another host starts in a directory of its
 * own (that host fences the earlier one once no row names it).
 */
void dr_stop_earlier(struct dr_set *s, const struct step_run *r, int64_t dep, const char *version);

/*
 * Places and starts s->n replicas (n set by the caller): 0, or an error (s
 * holds what started). All are placed before any starts: when one fits
 * nowhere nothing starts and the step fails saying why, or, with the
 * step's gang: true, it waits for room for all of them (until until_ms,
 * monotonic, or the run's stop).
 */
int dr_start(struct dr_set *s, const struct step_run *r, const struct dr_what *w, int64_t until_ms);

/*
 * Waits until each is ready and answered the warm-up sample (NULL: none),
 * a placed one first started by its host, until until_ms (monotonic), and
 * marks each healthy: 0, or FERRY_ERROR naming the replica and its host.
 */
int dr_wait(struct dr_set *s, const struct step_run *r, const struct dr_what *w, const char *sample,
	    int64_t until_ms);

/* This host's replicas stopped (another host's stop there: its daemon fences them once their rows go). */
void dr_stop(struct dr_set *s, int64_t grace_ms);

void dr_free(struct dr_set *s);

#endif

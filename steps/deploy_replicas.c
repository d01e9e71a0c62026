/*
 * deploy_replicas — see deploy_replicas.h. A replica placed on another
 * host is a row whose handle names that host and nothing else
 * (fleet_placed_handle); that host's `replicas` task starts it within a
 * round (reconcile_plan: a starting version's placed replica is its
 * host's to start) and writes its handle and port; the step reads the row
 * until then, and fails at once with that host's reason when its start
 * failed. When the host is lost first, the leader places it again.
 */
#include "steps/deploy_replicas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deploy/fleet.h"
#include "deploy/replicas.h"
#include "exec/exec.h"
#include "store/store.h"
#include "store/store_deploy.h"
#include "lib/util.h"

#define PLACED_POLL_MS 200

void dr_stop_earlier(struct dr_set *s, const struct step_run *r, int64_t dep, const char *version)
{
	struct deployment *d = NULL;
	const struct deploy_version *v;
	char me[256];

	ferry_host_name(me, sizeof(me));
	if (store_deployment_get(&d, r->conn, dep) < 0 || (v = deployment_version(d, version)) == NULL) {
		deployment_free(d);
		return;
	}
	for (size_t j = 0; j < v->nreplicas; j++) {
		const struct deploy_replica *rep = &v->replicas[j];
		const char *on = json_string_value(json_object_get(rep->handle, "host"));
		if (rep->idx >= 1 && rep->idx <= DEPLOY_MAX_REPLICAS)
			s->prev_gen[rep->idx - 1] = rep->generation;
		if (rep->handle == NULL || fleet_placed(rep->handle))
			continue;
		if (on && strcmp(on, me) != 0) {
			flog_info("run %lld step %s: replica %d of an earlier try runs on host %s: its daemon stops it",
				  (long long)r->run_id, r->name, rep->idx, on);
			continue;
		}
		flog_info("run %lld step %s: stopping replica %d of an earlier try", (long long)r->run_id, r->name,
			  rep->idx);
		replica_stop(rep->handle, 5000);
	}
	deployment_free(d);
}

/*
 * A replica's start or first health as the reconcile task writes them: its
 * row (c, for replica idx of w's version) and its event (kind: version,
 * replica and what det adds; det is taken) in one transaction
 * (store_deploy_replica_change): its health over time
 * (db/functions/replica_health.sql) begins at the deploy step.
 */
static int replica_change(const struct step_run *r, const struct dr_what *w, struct store_replica_change *c,
			  const char *kind, json_t *det, int idx)
{
	int error;

	c->dep = w->dep, c->version = w->version, c->idx = idx;
	json_object_set_new(det, "version", json_string(w->version));
	json_object_set_new(det, "replica", json_integer(idx));
	if ((error = store_deploy_replica_change(r->conn, c, r->actor, kind, det)) < 0)
		flog_warn("run %lld step %s: recording %s: %s", (long long)r->run_id, r->name, kind, ferry_error_last());
	json_decref(det);
	return error;
}

/* Whether all s->n replicas can be placed on the hosts as read (a copy is counted in, not s->hosts). */
static int place_all(const struct dr_set *s, const struct dr_what *w)
{
	json_t *dry = json_deep_copy(s->hosts);
	char where[256];
	int error = FERRY_OK;

	for (int i = 0; i < s->n && error == FERRY_OK; i++)
		if ((error = fleet_place(dry, w->dep, w->ord, NULL, w->spec, where, sizeof(where))) < 0)
			ferry_error_set("replica %d of %d: %s", i + 1, s->n, ferry_error_last());
	json_decref(dry);
	return error;
}

/*
 * Every replica is placed before any starts: one that fits nowhere fails
 * the step with nothing started; with gang: true the step waits instead
 * (the hosts read again every GANG_POLL_MS) until all fit, the run stops,
 * or until_ms passes.
 */
enum { GANG_POLL_MS = 2000 };

static int room_for_all(struct dr_set *s, const struct step_run *r, const struct dr_what *w, int64_t until_ms)
{
	int gang = json_is_true(json_object_get(r->spec, "gang"));
	char *said = NULL;
	int error;

	while ((error = place_all(s, w)) < 0) {
		const char *why = ferry_error_last();
		if (!gang)
			break;
		if (said == NULL || strcmp(said, why) != 0) {
			steps_log(r, "gang: waiting for room for all %d replicas at once: %s", s->n, why);
			free(said);
			said = xstrdup(why);
		}
		if (store_run_stopping(r->conn, r->run_id) == 1) {
			ferry_error_set("the run is stopping: none of the %d replicas started (gang: %s)", s->n, said);
			break;
		}
		if (clock_mono_ms() + GANG_POLL_MS > until_ms) {
			ferry_error_set("no room for all %d replicas at once within the step's wait (gang: true): %s",
					s->n, said);
			break;
		}
		{
			struct timespec ts = {GANG_POLL_MS / 1000, (GANG_POLL_MS % 1000) * 1000000L};
			nanosleep(&ts, NULL);
		}
		json_decref(s->hosts);
		if ((s->hosts = fleet_hosts(r->conn)) == NULL) {
			error = FERRY_EDB;
			break;
		}
	}
	if (error == FERRY_OK && said)
		steps_log(r, "gang: room for all %d replicas: placing them", s->n);
	free(said);
	return error;
}

int dr_start(struct dr_set *s, const struct step_run *r, const struct dr_what *w, int64_t until_ms)
{
	char me[256];
	int error;

	ferry_host_name(me, sizeof(me));
	if (s->hosts == NULL && (s->hosts = fleet_hosts(r->conn)) == NULL)
		flog_warn("run %lld step %s: the hosts could not be read (%s): every replica starts here",
			  (long long)r->run_id, r->name, ferry_error_last());
	if (s->hosts && (error = room_for_all(s, r, w, until_ms)) < 0)
		return error == FERRY_EDB ? error : FERRY_EINVALID; /* the message says why none fits */
	if ((error = replica_free_ports(r->conn, s->ports, s->n)) < 0) {
		ferry_error_set("no free ports for %d replicas: %s", s->n, ferry_error_last());
		return error;
	}
	for (int i = 0; i < s->n; i++) {
		char where[256];
		if (fleet_place(s->hosts, w->dep, w->ord, NULL, w->spec, where, sizeof(where)) < 0)
			return FERRY_EINVALID; /* no host fits: the message says why */
		s->host[i] = xstrdup(where);
		if (strcmp(where, me) != 0) {
			/* its row and a replica-placed event (as the leader's placements have) in one transaction */
			json_t *h = fleet_placed_handle(where);
			struct store_replica_change c = {.write = REPLICA_PUT, .health = "starting", .handle = h,
							 .port = s->ports[i], .generation = s->prev_gen[i]};
			error = replica_change(r, w, &c, "replica-placed", json_pack("{s:s}", "host", where), i + 1);
			json_decref(h);
			if (error < 0)
				return error;
			steps_log(r, "replica %d placed on host %s: its daemon starts it", i + 1, where);
			continue;
		}
		{
			struct replica_spec rs = {.home = r->home, .deployment = w->deployment, .ord = w->ord,
						  .idx = i + 1, .generation = s->prev_gen[i] + 1, .port = s->ports[i],
						  .model = w->model, .version = w->version, .artifact = w->artifact,
						  .serve = w->serve, .env = json_object_get(w->spec, "env"),
						  .workdir = r->workdir,
						  .placement = json_object_get(w->spec, "placement"), .conn = r->conn};
			struct store_replica_change c = {.write = REPLICA_PUT, .health = "starting"};
			if ((error = replica_start(&rs, &s->handles[i])) < 0)
				return error;
			c.port = rs.port, c.generation = rs.generation, c.handle = s->handles[i];
			if ((error = replica_change(r, w, &c, "replica-started",
						    json_pack("{s:i, s:i, s:s}", "port", s->ports[i], "generation",
							      rs.generation, "host", where),
						    i + 1)) < 0)
				return error;
			EXEC_FAULT("replica-written"); /* tests/fault: a window right after the writes */
		}
		snprintf(s->addr[i], sizeof(s->addr[i]), "%s", replica_address());
		steps_log(r, "replica %d started on port %d on host %s (its log: ferry deployments logs %lld %s %d)",
			  i + 1, s->ports[i], where, (long long)w->dep, w->version, i + 1);
	}
	return FERRY_OK;
}

/*
 * A replica placed on another host: until that host started it (its row
 * names a process, the port it listens on), or failed to (its error), or
 * until_ms. Follows the row where the leader placed it again.
 */
static int wait_started(struct dr_set *s, int i, const struct step_run *r, const struct dr_what *w,
			int64_t until_ms)
{
	for (;;) {
		struct deployment *d = NULL;
		const struct deploy_version *v;
		const struct deploy_replica *rep = NULL;
		if (store_deployment_get(&d, r->conn, w->dep) == 0 && (v = deployment_version(d, w->version)) != NULL)
			for (size_t j = 0; j < v->nreplicas; j++)
				if (v->replicas[j].idx == i + 1)
					rep = &v->replicas[j];
		if (rep == NULL) {
			deployment_free(d);
			ferry_error_set("replica %d: its row is gone (the version was removed meanwhile)", i + 1);
			return FERRY_ERROR;
		}
		if (rep->handle && !fleet_placed(rep->handle) && rep->generation > s->prev_gen[i]) {
			const char *on = json_string_value(json_object_get(rep->handle, "host"));
			free(s->host[i]);
			s->host[i] = xstrdup(on ? on : "?");
			s->ports[i] = rep->port;
			snprintf(s->addr[i], sizeof(s->addr[i]), "%s", fleet_ip(s->hosts, on));
			deployment_free(d);
			steps_log(r, "replica %d started on port %d on host %s", i + 1, s->ports[i], s->host[i]);
			return FERRY_OK;
		}
		if (fleet_placed(rep->handle) && rep->last_error) {
			const char *on = json_string_value(json_object_get(rep->handle, "host"));
			ferry_error_set("replica %d did not start on host %s: %s", i + 1, on ? on : "?", rep->last_error);
			deployment_free(d);
			return FERRY_ERROR;
		}
		if (clock_mono_ms() >= until_ms) {
			const char *on = json_string_value(json_object_get(rep->handle, "host"));
			ferry_error_set("replica %d placed on host %s was not started there in time (is a daemon with "
					"workers up on it? ferry hosts)", i + 1, on ? on : "?");
			deployment_free(d);
			return FERRY_ERROR;
		}
		deployment_free(d);
		{
			struct timespec ts = {0, PLACED_POLL_MS * 1000000L};
			nanosleep(&ts, NULL);
		}
	}
}

int dr_wait(struct dr_set *s, const struct step_run *r, const struct dr_what *w, const char *sample,
	    int64_t until_ms)
{
	int error;

	for (int i = 0; i < s->n; i++) {
		if (s->handles[i] == NULL && (error = wait_started(s, i, r, w, until_ms)) < 0)
			return error;
		if ((error = replica_wait_ready(s->addr[i], s->ports[i], w->model, sample, s->handles[i], until_ms)) < 0) {
			char *why = xstrdup(ferry_error_last());
			ferry_error_set("replica %d on host %s: %s", i + 1, s->host[i] ? s->host[i] : "?", why);
			free(why);
			return error;
		}
		{
			struct store_replica_change c = {.write = REPLICA_HEALTH, .health = "healthy"};
			(void)replica_change(r, w, &c, "replica-healthy",
					     json_pack("{s:s, s:s}", "from", "starting", "to", "healthy"), i + 1);
		}
		steps_log(r, "replica %d ready: it answered its health check and the sample request", i + 1);
	}
	return FERRY_OK;
}

void dr_stop(struct dr_set *s, int64_t grace_ms)
{
	for (int i = 0; i < s->n; i++)
		if (s->handles[i])
			replica_stop(s->handles[i], grace_ms);
}

void dr_free(struct dr_set *s)
{
	for (int i = 0; i < DEPLOY_MAX_REPLICAS; i++) {
		json_decref(s->handles[i]);
		free(s->host[i]);
		s->handles[i] = NULL, s->host[i] = NULL;
	}
	json_decref(s->hosts);
	s->hosts = NULL;
}

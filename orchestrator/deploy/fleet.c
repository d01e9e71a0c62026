/*
 * fleet — see fleet.h. The hosts come from ferry_hosts() (GET /hosts'
 * body); placement itself is plan/deploy.c's pure deploy_place, fed with
 * what is counted here.
 */
#include "deploy/fleet.h"

#include <string.h>

#include "plan/deploy.h"
#include "deploy/replicas.h"
#include "store/store.h"
#include "lib/util.h"

json_t *fleet_hosts(PGconn *conn)
{
	char *text = NULL;
	json_t *all, *h, *out;
	size_t i;

	if (store_hosts_list(&text, conn) < 0)
		return NULL;
	all = json_loads(text, 0, NULL);
	free(text);
	if (all == NULL) {
		ferry_error_set("the hosts' list is not JSON");
		return NULL;
	}
	out = json_object();
	json_array_foreach(json_object_get(all, "hosts"), i, h) {
		const char *name = json_string_value(json_object_get(h, "name"));
		char ip[64] = "";
		if (name == NULL)
			continue;
		replica_url_ip(json_string_value(json_object_get(h, "address")), ip, sizeof(ip));
		const json_t *hold = json_object_get(h, "replicas_hold");
		json_object_set_new(out, name,
				    json_pack("{s:s?, s:s, s:O?, s:i, s:I, s:{}, s:f, s:I, s:{s:f, s:I, s:I}}", "state",
					      json_string_value(json_object_get(h, "state")), "ip", ip, "labels",
					      json_is_object(json_object_get(h, "labels")) ? json_object_get(h, "labels")
											   : NULL,
					      "gpus", (int)json_array_size(json_object_get(h, "gpus")), "replicas",
					      json_integer_value(json_object_get(h, "replicas")), "placed", "cpus",
					      json_number_value(json_object_get(h, "cpus")), "memory_mb",
					      (json_int_t)(json_number_value(json_object_get(h, "memory_bytes")) / 1048576.0),
					      "held", "cpus", json_number_value(json_object_get(hold, "cpus")), "memory_mb",
					      (json_int_t)json_number_value(json_object_get(hold, "memory_mb")), "gpus",
					      (json_int_t)json_number_value(json_object_get(hold, "gpus"))));
	}
	json_decref(all);
	return out;
}

const char *fleet_ip(const json_t *hosts, const char *host)
{
	const char *ip = host ? json_string_value(json_object_get(json_object_get(hosts, host), "ip")) : NULL;

	return ip && *ip ? ip : replica_address();
}

int fleet_placed(const json_t *handle)
{
	return json_is_true(json_object_get(handle, "placed"));
}

json_t *fleet_placed_handle(const char *host)
{
	return json_pack("{s:s, s:b}", "host", host, "placed", 1);
}

int fleet_place(json_t *hosts, int64_t dep, int ord, const struct deploy_version *v, const json_t *serve, char *out,
		size_t outsz)
{
	const json_t *placement = json_object_get(serve, "placement");
	const json_t *want = json_object_get(placement, "hosts");
	const json_t *res = json_object_get(placement, "resources");
	/* what one replica asks for: the deploy step's resources, as the planner wrote them */
	struct deploy_req need = {.cpus = json_number_value(json_object_get(res, "cpus")),
				  .memory_mb = (int64_t)json_number_value(json_object_get(res, "memory_mb")),
				  .gpus = (int)json_number_value(json_object_get(res, "gpus"))};
	size_t n = json_object_size(hosts), i = 0;
	struct deploy_host *h;
	char key[48], me[256];
	const char *name;
	json_t *x, *held;
	int pick;

	if (hosts == NULL || n == 0) {
		ferry_host_name(out, outsz);
		return FERRY_OK;
	}
	snprintf(key, sizeof(key), "%lld:%d", (long long)dep, ord);
	h = xcalloc(n, sizeof(*h));
	json_object_foreach(hosts, name, x) {
		const char *state = json_string_value(json_object_get(x, "state"));
		h[i].name = name;
		h[i].up = state && strcmp(state, "up") == 0;
		h[i].labels = json_object_get(x, "labels");
		h[i].gpus = (int)json_integer_value(json_object_get(x, "gpus"));
		h[i].replicas = (int)json_integer_value(json_object_get(x, "replicas"));
		h[i].cpus = json_number_value(json_object_get(x, "cpus"));
		h[i].memory_mb = (int64_t)json_number_value(json_object_get(x, "memory_mb"));
		held = json_object_get(x, "held");
		h[i].held_cpus = json_number_value(json_object_get(held, "cpus"));
		h[i].held_memory_mb = (int64_t)json_number_value(json_object_get(held, "memory_mb"));
		h[i].held_gpus = (int)json_number_value(json_object_get(held, "gpus"));
		h[i].same = (int)json_integer_value(json_object_get(json_object_get(x, "placed"), key));
		for (size_t k = 0; v && k < v->nreplicas; k++) {
			const char *on = json_string_value(json_object_get(v->replicas[k].handle, "host"));
			h[i].same += on && strcmp(on, name) == 0 && v->replicas[k].health != DEPLOY_H_STOPPED;
		}
		i++;
	}
	ferry_host_name(me, sizeof(me));
	pick = deploy_place(h, n, json_is_object(want) && json_object_size(want) ? want : NULL, &need, me);
	if (pick >= 0) {
		json_t *at = json_object_get(hosts, h[pick].name), *placed = json_object_get(at, "placed");
		snprintf(out, outsz, "%s", h[pick].name);
		json_object_set_new(at, "replicas", json_integer(h[pick].replicas + 1));
		json_object_set_new(placed, key, json_integer(json_integer_value(json_object_get(placed, key)) + 1));
		json_object_set_new(at, "held",
				    json_pack("{s:f, s:I, s:I}", "cpus", h[pick].held_cpus + need.cpus, "memory_mb",
					      (json_int_t)(h[pick].held_memory_mb + need.memory_mb), "gpus",
					      (json_int_t)(h[pick].held_gpus + need.gpus)));
	}
	free(h);
	return pick >= 0 ? FERRY_OK : pick;
}

/*
 * config_placement — where and how a step's job runs, the keys every job
 * step may have beside its command:
 *
 *   executor:   a row of the executor table (exec.h: local, podman, docker,
 *               slurm, …); absent: the daemon's default (FERRY_EXECUTOR)
 *   image:      `host` (the default: the host's root filesystem) or an image
 *               the executor runs; anything but host needs an executor that
 *               runs images (EXF_IMAGES)
 *   resources:  {cpus: 1.5, memory: 512Mi, gpus: 1}, each optional: limits
 *               for containers, the request of a Slurm job
 *   network:    none (the default for containers) or host
 *   slurm:      {via: rest|cli, partition: NAME}: how a slurm job is
 *               submitted (slurmrestd, the default, or sbatch & co.) and where
 *
 * Normalised spec: "executor" (string or null), "image" (string),
 * "resources" ({"cpus": number|null, "memory_mb": int|null, "gpus": int} or
 * null), "network" ("none", "host" or null when not given), "slurm"
 * ({"via": "rest"|"cli", "partition": string|null}; absent when not given).
 */
#include "plan/config_priv.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"

static const char *const resource_keys[] = {"cpus", "memory", "gpus"};
static const char *const slurm_keys[] = {"via", "partition"};

/*
 * A memory size: a whole number with an optional unit (K, Ki, M, Mi, G, Gi,
 * T, Ti; no unit is bytes), in MiB rounded up. -1 when malformed.
 */
int64_t cfg_memory_mb(const char *s)
{
	static const struct { const char *unit; double bytes; } units[] = {
		{"", 1}, {"K", 1e3}, {"Ki", 1024.0}, {"M", 1e6}, {"Mi", 1048576.0},
		{"G", 1e9}, {"Gi", 1073741824.0}, {"T", 1e12}, {"Ti", 1099511627776.0},
	};
	char *end = NULL;
	double v;

	if (s == NULL || !isdigit((unsigned char)s[0]))
		return -1;
	v = strtod(s, &end);
	for (size_t k = 0; k < NELEM(units); k++)
		if (strcmp(end, units[k].unit) == 0) {
			double mb = ceil(v * units[k].bytes / 1048576.0);
			return mb >= 1 && mb <= 1e9 ? (int64_t)mb : -1;
		}
	return -1;
}

/* A number in n within [lo, hi]; NAN after an error. */
static double number_field(struct ctx *c, const yaml_node_t *n, const char *what, double lo, double hi,
			   int whole)
{
	const char *s = cfg_text(c, n, what);
	char *end = NULL;
	double v;

	if (s == NULL)
		return NAN;
	v = strtod(s, &end);
	if (*s == '\0' || *end != '\0' || !(v >= lo && v <= hi) || (whole && v != floor(v))) {
		err_node(c, n, "%s %s must be a %s from %g to %g", what, cfg_q(c, s),
			 whole ? "whole number" : "number", lo, hi);
		return NAN;
	}
	return v;
}

static json_t *parse_resources(struct ctx *c, const yaml_node_t *n)
{
	const yaml_node_t *v[NELEM(resource_keys)] = {NULL};
	json_t *r;
	double cpus = NAN, gpus = 0;
	int64_t mb = -1;

	if (!present(n))
		return json_null();
	if (!cfg_map_fields(c, n, "resources", resource_keys, NELEM(resource_keys), v, NULL))
		return json_null();
	if (present(v[0]))
		cpus = number_field(c, v[0], "resources cpus", 0.01, 1024, 0);
	if (present(v[1])) {
		const char *s = cfg_text(c, v[1], "resources memory");
		if (s != NULL && (mb = cfg_memory_mb(s)) < 0)
			err_node(c, v[1], "resources memory %s must be a size such as 512Mi, 2Gi or 1G",
				 cfg_q(c, s));
	}
	if (present(v[2]) && isnan(gpus = number_field(c, v[2], "resources gpus", 0, 64, 1)))
		gpus = 0;
	r = json_object();
	json_object_set_new(r, "cpus", isnan(cpus) ? json_null() : json_real(cpus));
	json_object_set_new(r, "memory_mb", mb < 0 ? json_null() : json_integer(mb));
	json_object_set_new(r, "gpus", json_integer((json_int_t)gpus));
	return r;
}

/* An image reference: registry/name:tag@digest characters only (no spaces, no options). */
static int image_ok(const char *s)
{
	if (*s == '\0' || *s == '-')
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && strchr("._-/:@", *s) == NULL)
			return 0;
	return 1;
}

/* slurm: {via, partition}; only for the slurm executor (or the daemon's default when none is named). */
static json_t *parse_slurm(struct ctx *c, const yaml_node_t *n, const char *ex)
{
	const yaml_node_t *v[NELEM(slurm_keys)] = {NULL};
	const char *via = "rest", *part = NULL;

	if (!present(n))
		return json_null();
	if (ex != NULL && strcmp(ex, "slurm") != 0) {
		err_node(c, n, "slurm: applies to executor: slurm, not %s; remove it or set executor: slurm",
			 cfg_q(c, ex));
		return json_null();
	}
	if (!cfg_map_fields(c, n, "slurm", slurm_keys, NELEM(slurm_keys), v, NULL))
		return json_null();
	if (present(v[0]) && (via = cfg_text(c, v[0], "slurm via")) != NULL && strcmp(via, "rest") != 0 &&
	    strcmp(via, "cli") != 0) {
		err_node(c, v[0], "slurm via %s must be rest (slurmrestd) or cli (sbatch)", cfg_q(c, via));
		via = "rest";
	}
	if (present(v[1]) && (part = cfg_text(c, v[1], "slurm partition")) != NULL && !image_ok(part)) {
		err_node(c, v[1], "slurm partition %s is not a partition name", cfg_q(c, part));
		part = NULL;
	}
	return json_pack("{s:s, s:o}", "via", via ? via : "rest", "partition",
			 part ? json_string(part) : json_null());
}

void cfg_placement_fields(struct ctx *c, const struct step_kind *kind, const yaml_node_t *const *v,
			  json_t *js)
{
	const struct exec_type *t = NULL;
	const char *ex = NULL, *image = "host", *net = NULL;

	/* a job's, or a service's (a deploy step's replicas) */
	if (kind != NULL && (kind->flags & (SKF_JOB | SKF_SERVICE)) == 0) {
		for (int k = SK_EXECUTOR; k <= SK_SLURM; k++)
			if (present(v[k]))
				err_node(c, v[k], "a %s step runs no job; remove \"%s\"", kind->name,
					 cfg_step_keys[k]);
	}
	if (present(v[SK_EXECUTOR]) && (ex = cfg_text(c, v[SK_EXECUTOR], "executor")) != NULL &&
	    (t = exec_type_find(ex)) == NULL) {
		char *known = exec_type_names();
		err_node(c, v[SK_EXECUTOR], "unknown executor %s; known executors: %s", cfg_q(c, ex), known);
		free(known);
		ex = NULL;
	}
	json_object_set_new(js, "executor", ex ? json_string(ex) : json_null());
	if (present(v[SK_IMAGE]) && (image = cfg_text(c, v[SK_IMAGE], "image")) != NULL) {
		if (!image_ok(image)) {
			err_node(c, v[SK_IMAGE], "image %s is not an image name (letters, digits and . _ - / : @)",
				 cfg_q(c, image));
			image = "host";
		} else if (t != NULL && strcmp(image, "host") != 0 && (t->flags & EXF_IMAGES) == 0) {
			err_node(c, v[SK_IMAGE], "image %s: executor %s runs commands on the host; an image "
				 "needs an executor that runs images (podman, docker, slurm)",
				 cfg_q(c, image), t->name);
		}
	}
	json_object_set_new(js, "image", json_string(image ? image : "host"));
	json_object_set_new(js, "resources", parse_resources(c, v[SK_RESOURCES]));
	if (present(v[SK_NETWORK]) && (net = cfg_text(c, v[SK_NETWORK], "network")) != NULL &&
	    strcmp(net, "none") != 0 && strcmp(net, "host") != 0) {
		err_node(c, v[SK_NETWORK], "network %s must be none or host", cfg_q(c, net));
		net = NULL;
	}
	json_object_set_new(js, "network", net ? json_string(net) : json_null());
	if (present(v[SK_SLURM])) /* absent: no key, so specs without it read as before */
		json_object_set_new(js, "slurm", parse_slurm(c, v[SK_SLURM], ex));
}

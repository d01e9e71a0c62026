/*
 * exec_slurm_opts — the slurm executor's options block in a step, parsed
 * for the config (exec.h options_key, options_parse):
 *
 *   slurm:      {via: rest|cli, partition: NAME, submit_timeout: 10m}: how
 *               a slurm job is submitted (slurmrestd, the default, or
 *               sbatch & co.), where, and how long a submit waits for a
 *               Slurm that does not answer before the attempt fails
 *               (absent: as long as it takes)
 *
 * Normalised: {"via": "rest"|"cli", "partition": string|null,
 * "submit_timeout_ms": N (only when given)}, or null
 * after an error in its shape. The job kinds' key table (steps/keys_job.c)
 * calls it only beside executor: slurm (or none named).
 */
#include "exec/exec.h"

#include <ctype.h>
#include <string.h>

#include "lib/durations.h"
#include "plan/config_keys.h"

static const char *const slurm_keys[] = {"via", "partition", "submit_timeout"};

/* A partition name: the characters of an image reference (no spaces, no options). */
static int partition_ok(const char *s)
{
	if (*s == '\0' || *s == '-')
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && strchr("._-/:@", *s) == NULL)
			return 0;
	return 1;
}

int exec_slurm_options_parse(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	const yaml_node_t *v[sizeof(slurm_keys) / sizeof(slurm_keys[0])] = {NULL};
	const char *via = "rest", *part = NULL, *t;
	int64_t timeout_ms = 0;

	*out = json_null();
	if (!present(n) || !cfg_key_map_fields(c, n, "slurm", slurm_keys, 3, v))
		return 0;
	if (present(v[0]) && (via = cfg_key_text(c, v[0], "slurm via")) != NULL && strcmp(via, "rest") != 0 &&
	    strcmp(via, "cli") != 0) {
		cfg_key_err(c, v[0], "slurm via %s must be rest (slurmrestd) or cli (sbatch)", cfg_key_q(c, via));
		via = "rest";
	}
	if (present(v[1]) && (part = cfg_key_text(c, v[1], "slurm partition")) != NULL && !partition_ok(part)) {
		cfg_key_err(c, v[1], "slurm partition %s is not a partition name", cfg_key_q(c, part));
		part = NULL;
	}
	if (present(v[2]) && (t = cfg_key_text(c, v[2], "slurm submit_timeout")) != NULL &&
	    (duration_parse(t, &timeout_ms) < 0 || timeout_ms < 1000)) {
		cfg_key_err(c, v[2], "slurm submit_timeout %s is not a duration of a second or more (e.g. 10m)",
			    cfg_key_q(c, t));
		timeout_ms = 0;
	}
	json_decref(*out);
	*out = json_pack("{s:s, s:o}", "via", via ? via : "rest", "partition",
			 part ? json_string(part) : json_null());
	if (timeout_ms > 0)
		json_object_set_new(*out, "submit_timeout_ms", json_integer(timeout_ms));
	return 0;
}

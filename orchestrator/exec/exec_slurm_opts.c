/*
 * exec_slurm_opts — the slurm executor's options block in a step, parsed
 * for the config (exec.h options_key, options_parse):
 *
 *   slurm:      {via: rest|cli, partition: NAME}: how a slurm job is
 *               submitted (slurmrestd, the default, or sbatch & co.) and where
 *
 * Normalised: {"via": "rest"|"cli", "partition": string|null}, or null
 * after an error in its shape. The job kinds' key table (steps/keys_job.c)
 * calls it only beside executor: slurm (or none named).
 */
#include "exec/exec.h"

#include <ctype.h>
#include <string.h>

#include "plan/config_keys.h"

static const char *const slurm_keys[] = {"via", "partition"};

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
	const char *via = "rest", *part = NULL;

	*out = json_null();
	if (!present(n) || !cfg_key_map_fields(c, n, "slurm", slurm_keys, 2, v))
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
	json_decref(*out);
	*out = json_pack("{s:s, s:o}", "via", via ? via : "rest", "partition",
			 part ? json_string(part) : json_null());
	return 0;
}

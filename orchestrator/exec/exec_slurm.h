/*
 * exec_slurm — what the `slurm` row (exec_slurm.c) shares beyond its row:
 * the pure half of it (exec_slurm_text.c), what it writes for Slurm and
 * reads in its answers; the unit tests call these too.
 */
#ifndef FERRY_EXEC_SLURM_H
#define FERRY_EXEC_SLURM_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "exec/exec.h"

/*
 * The batch script of attempt c: records the job id in DIR/status, runs
 * x's command in x's directory (in `podman run`, the attempt's directories
 * mounted at their own paths, when c names an image) and records its exit
 * code. Newly allocated.
 */
char *exec_slurm_script(const struct exec_spec *c, const struct exec_local_cmd *x, const char *dir,
			const char *ckpt, const json_t *env);

/*
 * The job's environment: the FERRY_* variables and the step's env from x,
 * and a plain PATH unless the step sets one (the compute node's own
 * environment is not the daemon's). A new object.
 */
json_t *exec_slurm_env(const struct exec_spec *c, const struct exec_local_cmd *x);

/* slurmrestd's submit request {script, job} for c's resources and options; takes env. */
json_t *exec_slurm_request(const struct exec_spec *c, const char *script, json_t *env, const char *cwd,
			  const char *dir, const char *name);

/*
 * sstat's "TRESUsageInTot|TRESUsageOutTot" line as a sample (cpu_ms,
 * rchar, wchar; read_bytes and write_bytes -1: Slurm does not count them).
 * 0, or -1 when the line is not that.
 */
int exec_slurm_parse_sstat(const char *text, struct exec_sample *out);

/* Whether Slurm's message says it cannot answer now (an outage), not that the request is wrong. */
int exec_slurm_transient(const char *text);

/* Whether a job state (COMPLETED, FAILED, …, with or without a suffix) is final. */
int exec_slurm_state_final(const char *state);

/* The first error of a REST answer: its number (0 when none, -1 when unnumbered) and *text. */
int exec_slurm_rest_error(const json_t *j, const char **text);

/* Whether a REST error means slurmctld was not reached. */
int exec_slurm_rest_outage(int num, const char *text);

/* The job id in sbatch --parsable's answer ("ID" or "ID;CLUSTER"), or -1. */
int64_t exec_slurm_parse_sbatch(const char *text);

/* KEY=VALUE of `scontrol show job -o`: VALUE into out (len bytes at most); 1 when found. */
int exec_slurm_show_field(const char *text, const char *key, char *out, size_t len);

/* Slurm's "EXIT:SIGNAL" pair as a raw wait status: the signal when there is one, else the exit code. */
int exec_slurm_exit_pair_wstatus(const char *s);

#endif

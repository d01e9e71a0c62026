/*
 * exec_slurm — what the `slurm` row (exec_slurm.c) exports beyond its row:
 * its parsers, for the unit tests.
 */
#ifndef FERRY_EXEC_SLURM_H
#define FERRY_EXEC_SLURM_H

#include "exec/exec.h"

/*
 * sstat's "TRESUsageInTot|TRESUsageOutTot" line as a sample (cpu_ms,
 * rchar, wchar; read_bytes and write_bytes -1: Slurm does not count them).
 * 0, or -1 when the line is not that.
 */
int exec_slurm_parse_sstat(const char *text, struct exec_sample *out);

#endif

/*
 * exec_noop — the benchmark's executor: every job ends at once with exit 0,
 * so the dispatch benchmark measures orchestration alone (claim, finish,
 * the next claim). Its jobs take no slot and write nothing. Not for users.
 */
#include "exec/exec.h"

#include <string.h>

#include "lib/util.h"

static int noop_start(struct exec_job *job, const struct exec_spec *c, enum exec_mode mode, struct exec_status *st)
{
	(void)mode;
	memset(job, 0, sizeof(*job));
	job->step_id = c->step_id;
	job->run_id = c->run_id;
	job->attempt = c->attempt;
	memset(st, 0, sizeof(*st));
	st->exit_code = 0;
	return 1;
}

static int noop_adopt(struct exec_job *job, struct exec_status *st)
{
	(void)job, (void)st;
	return FERRY_ENOTFOUND; /* a noop job leaves no trace */
}

const struct exec_type exec_noop = {
	.name = "noop",
	.flags = EXF_NO_SLOTS | EXF_NO_DIR,
	.start = noop_start,
	.adopt = noop_adopt,
};

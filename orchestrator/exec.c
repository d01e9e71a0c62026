/*
 * exec — the registry of executor types (see exec.h). The built-in rows are
 * listed here; a test build or a plug-in adds its own with
 * exec_type_register() before the engine starts. Looking a type up is a
 * short linear scan: there are a handful, and the engine does it once.
 *
 * How to add an executor type: write exec_NAME.c with a const struct
 * exec_type exec_NAME whose hooks follow exec.h (start fills job->handle
 * before the job's command can run, or adopt can find the job without it),
 * declare it in exec.h, add &exec_NAME to builtin[] below, and give it a
 * unit test and an integration test that kills the daemon mid-job.
 */
#include "exec.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

static const struct exec_type *const builtin[] = {&exec_local, &exec_noop};

#define MAX_EXTRA 8
static const struct exec_type *extra[MAX_EXTRA];
static int nextra;

int (*exec_fault_hook)(const char *point);

const struct exec_type *exec_type_find(const char *name)
{
	if (name == NULL)
		return NULL;
	for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++)
		if (strcmp(builtin[i]->name, name) == 0)
			return builtin[i];
	for (int i = 0; i < nextra; i++)
		if (strcmp(extra[i]->name, name) == 0)
			return extra[i];
	return NULL;
}

int exec_type_register(const struct exec_type *t)
{
	if (exec_type_find(t->name) != NULL) {
		ferry_error_set("executor type \"%s\" is already registered", t->name);
		return FERRY_ECONFLICT;
	}
	if (nextra == MAX_EXTRA) {
		ferry_error_set("too many executor types (at most %d added)", MAX_EXTRA);
		return FERRY_ERROR;
	}
	extra[nextra++] = t;
	return FERRY_OK;
}

char *exec_type_names(void)
{
	char *s = xstrdup(""), *n;

	for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++) {
		n = xasprintf("%s%s%s", s, *s ? ", " : "", builtin[i]->name);
		free(s);
		s = n;
	}
	for (int i = 0; i < nextra; i++) {
		n = xasprintf("%s%s%s", s, *s ? ", " : "", extra[i]->name);
		free(s);
		s = n;
	}
	return s;
}

char *exec_attempt_dir(const char *home, int64_t run_id, const char *step, int attempt)
{
	return xasprintf("%s/runs/%lld/%s/%d", home, (long long)run_id, step, attempt);
}

void exec_signal(const struct exec_job *job, int sig)
{
	if (job->type && job->type->signal)
		job->type->signal(job, sig);
}

void exec_status_dispose(struct exec_status *st)
{
	if (st == NULL)
		return;
	free(st->reason);
	memset(st, 0, sizeof(*st));
	st->exit_code = -1;
}

void exec_job_dispose(struct exec_job *job)
{
	if (job == NULL)
		return;
	free(job->name);
	free(job->dir);
	free(job->kill_reason);
	json_decref(job->handle);
	json_decref(job->ctx);
	memset(job, 0, sizeof(*job));
}

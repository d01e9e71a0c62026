/*
 * ferry-shim — main() of bin/ferry-shim, the local executor's supervisor of
 * one job (exec_shim_run in exec/exec_shim.c says what it does). The daemon
 * starts it with posix_spawn (exec_local.c): a fork of the daemon copied
 * the daemon's page tables for every job, and its child then tore them down
 * again — 1-3 ms a job at 20-50 MB resident on this machine, growing with
 * the daemon's memory, on the loop's critical path.
 *
 *   ferry-shim [-u UID -g GID [-G GID,GID...]] [-m NAME]... -- LOG STATUS CWD COMMAND [ARG]...
 *
 * Its environment is the job's. -u/-g/-G: the job user the command runs
 * as; -m NAME: the last variable NAME in the environment is a secret, whose
 * value is masked in LOG (the daemon appends the step's secrets after its
 * env; values never go on a command line, which any local user can read).
 *
 * Linked statically (the Makefile): it starts as the daemon's user with an
 * environment the workflow chose, which a dynamic loader would obey
 * (LD_PRELOAD, LD_LIBRARY_PATH). It reads nothing else of it. Built with
 * musl where musl-gcc is installed: one starts with every local job, and
 * musl's start-up took it from ~450 to ~230 us here (glibc's static
 * start-up touches 26 pages, each fault costly on this virtual machine).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec_shim.h"
#include "exec/logmask.h"

extern char **environ;

enum { MAX_GROUPS = 32 }; /* exec_user's: a user's first 32 groups */

static _Noreturn void usage(const char *why)
{
	fprintf(stderr, "ferry-shim: %s\nusage: ferry-shim [-u UID -g GID [-G GID,...]] [-m NAME]... "
			"-- LOG STATUS CWD COMMAND [ARG]...\n(the local executor's supervisor, started by ferryd)\n",
		why);
	exit(2);
}

static long number(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*s == '\0' || *end != '\0' || v < 0)
		usage("a user or group id is not a number");
	return v;
}

/* The value of the last NAME=... in the environment, or NULL. */
static const char *last_value(const char *name)
{
	size_t k = strlen(name);
	const char *v = NULL;

	for (char **e = environ; *e; e++)
		if (strncmp(*e, name, k) == 0 && (*e)[k] == '=')
			v = *e + k + 1;
	return v;
}

int main(int argc, char **argv)
{
	const char **secrets = calloc((size_t)argc, sizeof(*secrets)); /* at most one per option */
	gid_t groups[MAX_GROUPS];
	struct exec_shim_user user = {0, 0, 0, groups};
	int nsecrets = 0, has_user = 0, i;

	if (secrets == NULL)
		usage("out of memory");
	for (i = 1; i < argc && strcmp(argv[i], "--") != 0; i += 2) {
		const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		if (val == NULL)
			usage("an option without its value");
		if (strcmp(opt, "-u") == 0) {
			user.uid = (uid_t)number(val);
			has_user = 1;
		} else if (strcmp(opt, "-g") == 0) {
			user.gid = (gid_t)number(val);
		} else if (strcmp(opt, "-G") == 0) {
			char *list = strdup(val), *save = NULL;
			if (list == NULL)
				usage("out of memory");
			for (char *g = strtok_r(list, ",", &save); g; g = strtok_r(NULL, ",", &save)) {
				if (user.ngroups == MAX_GROUPS)
					usage("more than 32 groups");
				groups[user.ngroups++] = (gid_t)number(g);
			}
			free(list);
		} else if (strcmp(opt, "-m") == 0) {
			secrets[nsecrets++] = last_value(val);
		} else {
			usage("an unknown option");
		}
	}
	if (i + 4 >= argc)
		usage("LOG, STATUS, CWD and COMMAND are needed after --");
	exec_shim_run(argv + i + 4, environ, argv[i + 3], argv[i + 1], argv[i + 2],
		      logmask_new_values(secrets, (size_t)nsecrets), has_user ? &user : NULL);
}

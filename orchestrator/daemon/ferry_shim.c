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
 *   ferry-shim --spare PAD
 *
 * A spare (exec_spare.c): started before its job is known, it waits on
 * descriptor 0 for one request that holds the arguments and environment
 * above (exec_shim.h, "A spare's request"), then goes on exactly as if it
 * had been started with them, its command line (ps, /proc/PID/cmdline)
 * rewritten to theirs over PAD's room. It exits at once, having run
 * nothing, when the request is cut short (the daemon is gone).
 *
 * Linked statically (the Makefile): it starts as the daemon's user with an
 * environment the workflow chose, which a dynamic loader would obey
 * (LD_PRELOAD, LD_LIBRARY_PATH). It reads nothing else of it. Built with
 * musl where musl-gcc is installed: one starts with every local job, and
 * musl's start-up took it from ~450 to ~230 us here (glibc's static
 * start-up touches 26 pages, each fault costly on this virtual machine).
 */
#include <fcntl.h>
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

/* Reads all of n bytes from fd into buf; 0 when it got them. */
static int read_all(int fd, char *buf, size_t n)
{
	while (n > 0) {
		ssize_t r = read(fd, buf, n);
		if (r <= 0)
			return -1;
		buf += r, n -= (size_t)r;
	}
	return 0;
}

/* A count ("N\0") at *p, below end; moves *p past it. -1 when there is none. */
static long take_count(char **p, const char *end)
{
	const char *z = memchr(*p, '\0', (size_t)(end - *p));
	char *stop;
	long v;

	if (z == NULL || z == *p)
		return -1;
	v = strtol(*p, &stop, 10);
	if (stop != z || v < 0 || v > (long)(end - *p))
		return -1;
	*p = (char *)z + 1;
	return v;
}

/* n strings ("S\0" each) at *p, below end, into a NULL-terminated vector; NULL when they are not all there. */
static char **take_strings(char **p, const char *end, long n)
{
	char **v = calloc((size_t)n + 1, sizeof(*v));

	for (long i = 0; v && i < n; i++) {
		const char *z = *p < end ? memchr(*p, '\0', (size_t)(end - *p)) : NULL;
		if (z == NULL) {
			free(v);
			return NULL;
		}
		v[i] = *p;
		*p = (char *)z + 1;
	}
	return v;
}

/*
 * A spare's request from descriptor 0 (exec_shim.h): its arguments into
 * *argc and *argv, its environment into environ; the command line shown
 * for this process becomes the arguments', over the room argv held (room
 * bytes from title). Exits when the request is cut short or malformed.
 */
static void spare_request(int *argc, char ***argv, char *title, size_t room)
{
	char head[EXEC_SPARE_HEAD], *buf, *p, *end;
	size_t off = 0;
	long n;
	int fd;

	exec_shim_detach();
	exec_shim_remember_start();
	if (read_all(0, head, sizeof(head)) < 0 || head[sizeof(head) - 1] != '\n')
		_exit(0);
	head[sizeof(head) - 1] = '\0';
	n = strtol(head, &p, 10);
	if (*p != '\0' || n <= 0 || n > EXEC_SPARE_MAX || (buf = malloc((size_t)n)) == NULL ||
	    read_all(0, buf, (size_t)n) < 0)
		_exit(0);
	/* descriptor 0 stays taken (by /dev/null), so the log is never opened as 0 */
	if ((fd = open("/dev/null", O_RDONLY)) >= 0 && fd != 0) {
		dup2(fd, 0);
		close(fd);
	}
	p = buf, end = buf + n;
	if ((n = take_count(&p, end)) < 1 || (*argv = take_strings(&p, end, n)) == NULL)
		_exit(0);
	*argc = (int)n;
	if ((n = take_count(&p, end)) < 0 || (environ = take_strings(&p, end, n)) == NULL || p != end)
		_exit(0);
	/* the title: the arguments, NUL-separated as on a command line, cut to the room there is */
	memset(title, 0, room);
	for (int i = 0; i < *argc && off + 1 < room; i++) {
		size_t k = strlen((*argv)[i]);
		if (k > room - 1 - off)
			k = room - 1 - off;
		memcpy(title + off, (*argv)[i], k);
		off += k + 1;
	}
}

int main(int argc, char **argv)
{
	const char **secrets;
	gid_t groups[MAX_GROUPS];
	struct exec_shim_user user = {0, 0, 0, groups};
	int nsecrets = 0, has_user = 0, i;

	if (argc == 3 && strcmp(argv[1], "--spare") == 0)
		spare_request(&argc, &argv, argv[0], (size_t)(argv[2] + strlen(argv[2]) + 1 - argv[0]));
	secrets = calloc(argc > 0 ? (size_t)argc : 1, sizeof(*secrets)); /* at most one per option */
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

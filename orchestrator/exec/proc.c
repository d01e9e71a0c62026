/*
 * proc — see proc.h.
 */
#include "exec/proc.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/util.h"

int exec_stat_field(const char *line, int n, long long *out)
{
	const char *p = strrchr(line, ')');
	char *end;
	int field = 2;

	if (p == NULL || n < 3)
		return -1;
	for (p++; *p && field < n; p++)
		if (*p == ' ')
			field++;
	if (field != n)
		return -1;
	*out = strtoll(p, &end, 10);
	return end == p ? -1 : 0;
}

int exec_proc_stat(char *buf, size_t len, pid_t pid)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

int64_t exec_pid_start(pid_t pid)
{
	char buf[1024];
	long long v;

	return exec_proc_stat(buf, sizeof(buf), pid) == 0 && exec_stat_field(buf, 22, &v) == 0 ? v : 0;
}

int exec_pid_alive(pid_t pid, int64_t start)
{
	char buf[1024], *p;
	long long s;

	if (pid <= 0 || exec_proc_stat(buf, sizeof(buf), pid) < 0 || exec_stat_field(buf, 22, &s) < 0)
		return 0;
	if (s == 0 || (start != 0 && s != start))
		return 0;
	/* a zombie is not alive: field 3 is the state letter */
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

/* Appends the pids of cgroup dir and its children to the vector (*cap its room); whether dir had cgroup.procs. */
static int cgroup_pids(const char *dir, int depth, int **pids, int *n, int *cap)
{
	char *path = xasprintf("%s/cgroup.procs", dir), line[32];
	FILE *f = fopen(path, "re");
	DIR *d;
	struct dirent *de;

	free(path);
	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		int64_t pid;
		line[strcspn(line, "\n")] = '\0';
		if (parse_int64(line, &pid) < 0 || pid <= 0)
			continue;
		if (*n == *cap)
			*pids = xrealloc(*pids, (size_t)(*cap = *cap ? 2 * *cap : 8) * sizeof(**pids));
		(*pids)[(*n)++] = (int)pid;
	}
	fclose(f);
	if (depth < 3 && (d = opendir(dir)) != NULL) {
		while ((de = readdir(d)) != NULL) {
			char *sub;
			if (de->d_name[0] == '.' || de->d_type != DT_DIR)
				continue;
			sub = xasprintf("%s/%s", dir, de->d_name);
			cgroup_pids(sub, depth + 1, pids, n, cap);
			free(sub);
		}
		closedir(d);
	}
	return 1;
}

int exec_cgroup_pids(const char *dir, int **pids, int *n)
{
	int cap = *n;

	return cgroup_pids(dir, 0, pids, n, &cap) ? FERRY_OK : FERRY_ENOTFOUND;
}

int exec_status_pid(const char *line, pid_t *pid, int64_t *start)
{
	const char *sp;
	char num[24];
	int64_t v, t;

	if (strncmp(line, "pid ", 4) != 0 || (sp = strchr(line + 4, ' ')) == NULL ||
	    (size_t)(sp - (line + 4)) >= sizeof(num))
		return 0;
	memcpy(num, line + 4, (size_t)(sp - (line + 4)));
	num[sp - (line + 4)] = '\0';
	if (parse_int64(num, &v) < 0 || v <= 0 || v > INT32_MAX || parse_int64(sp + 1, &t) < 0)
		return 0;
	*pid = (pid_t)v;
	*start = t;
	return 1;
}

/* A child's spawn attributes: signals unblocked and at their default, in a group (SETPGROUP) or session (SETSID). */
static void spawnattr_own(posix_spawnattr_t *at, short own)
{
	sigset_t none, all;

	posix_spawnattr_init(at);
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(at, &none);
	posix_spawnattr_setsigdefault(at, &all);
	posix_spawnattr_setpgroup(at, 0);
	posix_spawnattr_setflags(at, (short)(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | own));
}

void exec_spawnattr_child(posix_spawnattr_t *at)
{
	spawnattr_own(at, POSIX_SPAWN_SETPGROUP);
}

void exec_spawnattr_session(posix_spawnattr_t *at)
{
	spawnattr_own(at, POSIX_SPAWN_SETSID);
}

/*
 * exec_podman_cgroup — what a podman container used, read from its cgroup
 * (exec_podman_cgroup_sample, exec_podman.h): CPU time, disk bytes, and
 * rchar/wchar summed over the processes of its sub-cgroups, on cgroup v1,
 * v2 or the hybrid layout. Files under /sys/fs/cgroup and /proc, written
 * by the kernel, not by the job.
 */
#include "exec/exec_podman.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* Reads "KEY N" lines of path: the sum of the values of key; -1 when unreadable. */
static int64_t sum_key(const char *path, const char *key)
{
	FILE *f = fopen(path, "re");
	char line[512];
	int64_t sum = 0;
	size_t kl = strlen(key);

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *p = line;
		/* io.stat: "MAJ:MIN rbytes=N wbytes=N …"; blkio: "MAJ:MIN Read N"; cpu.stat: "usage_usec N" */
		while ((p = strstr(p, key)) != NULL) {
			if (p == line || p[-1] == ' ') {
				long long v = strtoll(p + kl, NULL, 10);
				if (v > 0)
					sum += v;
			}
			p += kl;
		}
	}
	fclose(f);
	return sum;
}

/* Adds rchar and wchar of the processes in cgroup directory dir and below (depth ≤ 3). */
static int add_procs(struct exec_sample *out, const char *dir, int depth)
{
	char *path = xasprintf("%s/cgroup.procs", dir), line[64], io[256];
	FILE *f = fopen(path, "re");
	DIR *d;
	struct dirent *de;
	int found = 0;

	free(path);
	if (f) {
		while (fgets(line, sizeof(line), f)) {
			char *p = xasprintf("/proc/%lld/io", strtoll(line, NULL, 10));
			FILE *g = fopen(p, "re");
			free(p);
			if (g == NULL)
				continue;
			while (fgets(io, sizeof(io), g)) {
				if (strncmp(io, "rchar: ", 7) == 0)
					out->rchar += strtoll(io + 7, NULL, 10);
				else if (strncmp(io, "wchar: ", 7) == 0)
					out->wchar += strtoll(io + 7, NULL, 10);
			}
			fclose(g);
		}
		fclose(f);
		found = 1;
	}
	if (depth < 3 && (d = opendir(dir)) != NULL) {
		while ((de = readdir(d)) != NULL) {
			char *sub;
			if (de->d_name[0] == '.' || de->d_type != DT_DIR)
				continue;
			sub = xasprintf("%s/%s", dir, de->d_name);
			found |= add_procs(out, sub, depth + 1);
			free(sub);
		}
		closedir(d);
	}
	return found;
}

int exec_podman_cgroup_sample(const char *root, const char *rel, struct exec_sample *out, int *cpu_read)
{
	static const char *const cpuacct[] = {"cpuacct", "cpu,cpuacct", "cpuacct,cpu"};
	static const char *const v2[] = {"unified/", ""};
	char *p;
	int64_t v;
	int found = 0, cpu = 0, io = 0;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < NELEM(cpuacct) && !cpu; i++) {
		char buf[64];
		p = xasprintf("%s/%s/%s/cpuacct.usage", root, cpuacct[i], rel);
		if (exec_podman_read_small(p, buf, sizeof(buf)) > 0 && (v = exec_podman_parse_ll(buf)) >= 0)
			out->cpu_ms = v / 1000000, cpu = 1;
		free(p);
	}
	p = xasprintf("%s/blkio/%s/blkio.throttle.io_service_bytes_recursive", root, rel);
	if ((v = sum_key(p, "Read ")) >= 0) {
		out->read_bytes = v;
		out->write_bytes = sum_key(p, "Write ");
		io = 1;
	}
	free(p);
	for (size_t i = 0; i < NELEM(v2); i++) {
		if (!cpu) {
			p = xasprintf("%s/%s%s/cpu.stat", root, v2[i], rel);
			if ((v = sum_key(p, "usage_usec ")) >= 0)
				out->cpu_ms = v / 1000, cpu = 1;
			free(p);
		}
		if (!io) {
			p = xasprintf("%s/%s%s/io.stat", root, v2[i], rel);
			if ((v = sum_key(p, "rbytes=")) >= 0) {
				out->read_bytes = v;
				out->write_bytes = sum_key(p, "wbytes=");
				io = 1;
			}
			free(p);
		}
	}
	/* the processes: from the pids hierarchy (v1), else the unified one */
	{
		static const char *const procs[] = {"pids/", "unified/", ""};
		for (size_t i = 0; i < NELEM(procs) && !found; i++) {
			p = xasprintf("%s/%s%s", root, procs[i], rel);
			found = add_procs(out, p, 0);
			free(p);
		}
	}
	if (cpu_read)
		*cpu_read = cpu;
	if (!cpu && !io && !found) {
		ferry_error_set("no cgroup %s under %s", rel, root);
		return FERRY_ENOTFOUND;
	}
	return FERRY_OK;
}

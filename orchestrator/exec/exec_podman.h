/*
 * exec_podman — the `podman` executor type (exec_podman.c): its pieces that
 * the unit tests reach. The engine knows it only as exec_podman (exec.h).
 */
#ifndef FERRY_EXEC_PODMAN_H
#define FERRY_EXEC_PODMAN_H

#include "exec/exec.h"

/*
 * The container of an attempt: "ferry-HASH-RUN-STEP-ATTEMPT", HASH the
 * first 8 hex digits of sha256(home), so daemons with different homes on
 * one host never share a name. The caller frees it.
 */
char *exec_podman_name(const char *home, int64_t run_id, const char *step, int attempt);

/*
 * What the supervisor runs for claimed step c in attempt directory dir:
 * argv is `podman … run …` (name, labels, mounts, limits, network, image and
 * the command), envp podman's environment (PATH and the job's variables,
 * passed on with `--env NAME` so no value shows in argv). FERRY_EINVALID
 * when the step has no command. Free both with exec_podman_vec_free.
 */
int exec_podman_argv(char ***argv, char ***envp, const struct exec_spec *c, const char *home,
		     const char *dir);
void exec_podman_vec_free(char **v);

/*
 * Resource use of the cgroup REL (e.g. "ferry/NAME") under the cgroup
 * mount root (normally /sys/fs/cgroup): CPU time from cpuacct.usage (v1)
 * or cpu.stat usage_usec (v2, or the hybrid layout's unified/), disk bytes
 * from blkio.throttle.io_service_bytes_recursive (v1) or io.stat (v2),
 * rchar/wchar summed over the processes of its sub-cgroups. 0, or
 * FERRY_ENOTFOUND when no hierarchy holds REL. *cpu (when not NULL):
 * whether the CPU time was read (else out->cpu_ms is 0, not a figure).
 */
int exec_podman_cgroup_sample(const char *root, const char *rel, struct exec_sample *out, int *cpu_read);

/*
 * The row's small readers, async-signal-safe (its shim uses them after
 * fork): the number at the start of s after blanks (-1 when none), and up
 * to len-1 bytes of path into buf, terminated (the count, or -1).
 */
long long exec_podman_parse_ll(const char *s);
ssize_t exec_podman_read_small(const char *path, char *buf, size_t len);

/* Where podman is: FERRY_PODMAN, else the first podman on PATH; NULL when none (free it). */
char *exec_podman_path(void);

/*
 * exec_podman_ops.c: the row's signal hook (a background `podman kill`,
 * retried while the container is being made), a background sweep of
 * home's containers that a crash left behind, and its orphans hook.
 */
void exec_podman_signal(const struct exec_job *job, int sig);
/*
 * The child side of a fork that runs a podman command: stdio on /dev/null,
 * no other descriptor, in its own session with no signal blocked when
 * own_session (a command the daemon does not wait for); async-signal-safe
 * calls only (the daemon has threads). Never returns.
 */
__attribute__((noreturn)) void exec_podman_child_exec(char **argv, int own_session);
void exec_podman_sweep(const char *podman, const char *home);
int exec_podman_orphans(const char *home, int (*want)(int64_t run, const char *step, int attempt, void *arg),
			void *arg);

#endif

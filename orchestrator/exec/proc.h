/*
 * proc — what the executors read of this host's processes: /proc/PID/stat
 * (a process's start time, its state, its group), whether a recorded pid is
 * still the same process, and the processes of a cgroup. Shared by the
 * local, podman and docker rows, the engine's recovery (is a recorded
 * supervisor alive?), the deploy replicas and the monitor's GPU mapping;
 * and the spawn attributes of the children the executors start. Nothing
 * here keeps state.
 */
#ifndef FERRY_EXEC_PROC_H
#define FERRY_EXEC_PROC_H

#include <spawn.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Reads /proc/PID/stat into buf (len bytes, NUL-terminated); 0 or -1. */
int exec_proc_stat(char *buf, size_t len, pid_t pid);

/*
 * Field n (numbered as in proc(5): 1 is the pid) of a /proc/PID/stat line;
 * 0 with *out, or -1. Field 2, "(comm)", may hold spaces: counted after
 * the last ')'.
 */
int exec_stat_field(const char *line, int n, long long *out);

/* Whether pid is alive and started at start (0 start: any). */
int exec_pid_alive(pid_t pid, int64_t start);

/* Start time of pid from /proc (clock ticks since boot), or 0. */
int64_t exec_pid_start(pid_t pid);

/*
 * A job's status file line "pid PID START" (its supervisor: written by
 * every executor type's supervisor, appended again by a follower): 1 with
 * *pid (> 0) and *start when line is one, else 0 (another line, or a
 * malformed one: a job may write its directory). Readers take the last.
 */
int exec_status_pid(const char *line, pid_t *pid, int64_t *start);

/*
 * The processes of cgroup directory dir and of its children (depth <= 3),
 * appended to *pids (*n of them; the caller frees it): a container's, for
 * the monitor. FERRY_ENOTFOUND when dir has no cgroup.procs.
 */
int exec_cgroup_pids(const char *dir, int **pids, int *n);

/*
 * Sets *at (initialised here; the caller destroys it) for a child tool:
 * no signal blocked or ignored (the daemon's mask and SIG_IGNs are not
 * its), in a process group of its own, so a timeout kills it with its
 * children.
 */
void exec_spawnattr_child(posix_spawnattr_t *at);

/* The same for a job's supervisor: in a session of its own (so kill(-pid) reaches its job at once). */
void exec_spawnattr_session(posix_spawnattr_t *at);

#endif

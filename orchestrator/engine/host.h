/*
 * host — what this daemon's machine offers, and the `host` periodic task
 * that writes it to the database with a heartbeat (store_hosts.c,
 * GET /hosts). Capacity is detected once, when the engine starts:
 *   cpus          FERRY_CPUS (declared), else the CPUs this process may use
 *                 (sched_getaffinity), less where a cgroup v2 cpu.max
 *                 quota on its way up says fewer
 *   memory_bytes  MemTotal, less where a cgroup's memory.max says less
 *   gpus          FERRY_GPUS (a declared list: "0,1", or UUIDs; "none"),
 *                 else what `nvidia-smi` ($FERRY_NVIDIA_SMI, else on PATH)
 *                 lists, asked once with a 5 s bound; none without either
 *   resources     FERRY_RESOURCES, named counts ("license=2,fpga=1")
 * and the labels are FERRY_HOST_LABELS ("gpu=true,zone=eu-1"); host_admission
 * and host_gpu_env are what the claim admits against and the GPUs a job
 * sees. A setting
 * that does not parse stops the daemon's start with the reason. The
 * parsers are pure (tests/unit/test_host.c).
 */
#ifndef FERRY_HOST_H
#define FERRY_HOST_H

#include <jansson.h>
#include <stdint.h>

#include "store/task.h"

/* cgroup v2 cpu.max ("QUOTA PERIOD" or "max PERIOD"): CPUs as a fraction, or -1 for no limit or bad text. */
double host_parse_cpu_max(const char *text);
/* cgroup v2 memory.max ("max" or bytes): bytes, or -1 for no limit or bad text. */
int64_t host_parse_memory_max(const char *text);
/* /proc/meminfo: MemTotal in bytes, or -1. */
int64_t host_parse_meminfo(const char *text);
/*
 * "NAME=VALUE,NAME=VALUE" (blanks around either trimmed) into an object of
 * strings (labels) or, with counts, of whole numbers >= 0 (resources).
 * Names: letters, digits, '_', '-', '.', '/'. An empty text is an empty
 * object. FERRY_EINVALID naming what (the setting) and the part.
 */
int host_parse_pairs(json_t **out, const char *text, int counts, const char *what);
/*
 * FERRY_GPUS: "0,1,3" (indices), "GPU-…,GPU-…" (UUIDs, indexed by their
 * place), "none" or "" (no GPU) into [{"index", "uuid"?}]. FERRY_EINVALID
 * for anything else, naming the part.
 */
int host_parse_gpus(json_t **out, const char *text);

/*
 * The capacity of this machine as above ({"cpus", "memory_bytes", "gpus",
 * "resources"}) and its labels; FERRY_EINVALID with the message for a
 * setting that does not parse. Blocks up to 5 s (nvidia-smi): at start.
 */
int host_detect(json_t **capacity, json_t **labels);
/* host_detect's first successful answer, kept for the process (the engine's admission and the host task); copies. */
int host_detect_once(json_t **capacity, json_t **labels);

/*
 * What the claim admits against on this host (db/functions/claim.sql):
 * {"cpus", "memory_mb", "gpus": the GPUs' ids (their index, as text),
 * "default_cpus": FERRY_DEFAULT_CPUS (the request of a step that states
 * no resources.cpus; 0 by default), "starve_s": FERRY_QUEUE_STARVE_S
 * (600), "resources": the named resources (FERRY_RESOURCES, {} for none),
 * "gpu_shares": how many shared requests one GPU takes (FERRY_GPU_SHARES,
 * 4)} from a capacity as host_detect gives it. The caller's.
 */
json_t *host_admission(const json_t *capacity);

/*
 * What this host's model-server replicas ask for (their deploy steps'
 * resources), as the host task read it with its last heartbeat: the
 * engine admits jobs against the host's room less this, so a replica's
 * CPUs and memory are not given to a job too (GPUs are counted by
 * placement only: a replica is given no GPU of its own). Any thread.
 */
void host_replicas_hold_set(double cpus, int64_t memory_mb);
/* The hold as above, and a number that changes when it does (0: never set). */
unsigned host_replicas_hold(double *cpus, int64_t *memory_mb);
/*
 * admission (host_admission's) less a hold: its cpus and memory_mb
 * reduced, never below 0. A new object, the caller's.
 */
json_t *host_admission_less(const json_t *admission, double cpus, int64_t memory_mb);
/*
 * What a claim admits against now: admission (NULL: none) less the hold
 * above. *net caches the reduced copy (made again only when the hold's
 * version, *seen, changed; NULL while nothing is held); the answer is
 * admission or *net, owned by the caller's engine.
 */
const json_t *host_admission_now(const json_t *admission, json_t **net, unsigned *seen);

/*
 * A job's env: spec_env (a step's "env", may be NULL) with the GPUs the
 * claim gave it (given: "0,1", the host's indices, or NULL) named in
 * CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES (by UUID where
 * host_gpus, the host's [{"index", "uuid"?}], has one), FERRY_GPUS; none
 * visible on a host with GPUs when given is NULL. NULL when the host has
 * no GPU and none were given; else the caller's.
 */
json_t *host_gpu_env(const json_t *host_gpus, const char *given, const json_t *spec_env);

/* The `host` task row: this daemon's row written every lease/3 (every replica but dev sessions). */
extern const struct task host_task;

#endif

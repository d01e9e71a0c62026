/*
 * gpu — GPU readings for the job monitor, from nvidia-smi, without ever
 * blocking the engine loop. One sampler per daemon answers for every job:
 * each period it runs nvidia-smi once (as a child whose output comes back
 * through a pipe) and keeps the latest readings; the monitor then asks
 * which GPUs a job uses and how busy they are (see gpu.c).
 */
#ifndef FERRY_GPU_H
#define FERRY_GPU_H

#include <jansson.h>
#include <stdint.h>

/* One line of `nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total`. */
struct gpu_reading {
	int index;
	char uuid[64];
	double util;                       /* percent; -1 when nvidia-smi does not say ([N/A]) */
	int64_t mem_used_mb, mem_total_mb; /* MiB; -1 when unknown */
};

/* One line of `nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory`. */
struct gpu_proc {
	int pid;       /* in nvidia-smi's pid namespace (the host's) */
	char uuid[64];
	int64_t mem_mb; /* -1 when unknown */
};

/* At most this many GPUs and compute processes are kept from one reading. */
#define GPU_MAX 64
#define GPU_MAX_PROCS 4096

/*
 * Parsers of the two CSV outputs (--format=csv,noheader,nounits): 0 with
 * *out (the caller's, to free; NULL when no lines) and *n, or
 * FERRY_EINVALID naming the line ("nvidia-smi line 3: …"). "[N/A]",
 * "[Not Supported]" and other bracketed fields give -1, not an error;
 * blank lines and "No running processes found" are skipped.
 */
int gpu_parse_query(const char *csv, struct gpu_reading **out, int *n);
int gpu_parse_apps(const char *csv, struct gpu_proc **out, int *n);

struct gpu_sampler;

/*
 * A sampler running $FERRY_NVIDIA_SMI when set, else nvidia-smi found on
 * PATH; with neither it is off (gpu_sampler_available 0) and every call
 * returns at once. Never NULL; gpu_sampler_free releases it.
 */
struct gpu_sampler *gpu_sampler_new(void);
/* Kills a child in flight and reaps it (waiting at most GPU_REAP_MS); NULL is fine. */
void gpu_sampler_free(struct gpu_sampler *s);
int gpu_sampler_available(const struct gpu_sampler *s);

/* How long one nvidia-smi run may take before it is killed. */
#define GPU_TIMEOUT_MS 5000
#define GPU_REAP_MS 1000 /* also how long a run that closed its output may take to exit */
/* Changes that bound (tests; a slow driver). */
void gpu_sampler_set_timeout(struct gpu_sampler *s, int64_t timeout_ms);

/*
 * Called every monitor round with the monotonic clock: reads what the
 * child in flight wrote, takes its readings when it ended (a failed or
 * killed run clears the readings: stale figures would look like a flat,
 * hung GPU), kills it past the timeout, and starts the next run when
 * period_ms passed since the last start. Never blocks.
 */
void gpu_sampler_poll(struct gpu_sampler *s, int64_t now_ms, int64_t period_ms);

/* Whether a child is running now (started and not yet read to its end). */
int gpu_sampler_busy(const struct gpu_sampler *s);
/* The monotonic time (poll's now_ms) of the latest readings; 0 when there are none. */
int64_t gpu_sampler_readings_at(const struct gpu_sampler *s);
/* Why the last run gave no readings ("" when it did); valid until the next poll. */
const char *gpu_sampler_error(const struct gpu_sampler *s);

/*
 * The job's GPUs in the latest readings: those where any of pids runs a
 * compute app; when none of the pids shows up and the job asked for GPUs
 * (want_gpus > 0), the GPUs listed in visible (a CUDA_VISIBLE_DEVICES-style
 * list of indexes or UUIDs, a unique UUID prefix accepted; NULL: every GPU;
 * "" or "-1": none). Returns 1 when the job has GPUs and at least one of
 * them reports a utilization: *util is the mean of those reported (percent),
 * *mem_mb the sum of their memory.used (-1 when none says), and *per_gpu
 * (may be NULL; the caller's) [{"index","uuid","util","mem_used_mb",
 * "mem_total_mb"}] with null for what nvidia-smi did not say. 0 otherwise
 * (no readings, no GPU of the job, none reporting): the outputs untouched
 * but *per_gpu, set to NULL.
 */
int gpu_for_job(const struct gpu_sampler *s, const int *pids, int npids, int want_gpus, const char *visible,
		double *util, int64_t *mem_mb, json_t **per_gpu);

/*
 * The whole latest reading for evidence, the caller's:
 * {"gpus":[…as per_gpu…],"apps":[{"pid","uuid","mem_mb"}],"at_ms":WALL}
 * (at_ms: wall-clock milliseconds of the reading), or NULL when none.
 */
json_t *gpu_snapshot(const struct gpu_sampler *s);

#endif

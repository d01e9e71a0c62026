/*
 * exec — the table of executor types: how a claimed step's job is started,
 * watched, signalled, adopted after a daemon restart, sampled and cleaned
 * up. The engine knows executors only through struct exec_type; each type
 * is one file (exec_local.c, exec_noop.c, and later podman, docker, slurm)
 * and one row of exec_types[] in exec.c. A job may be one-shot (a step) or a
 * service meant to keep running (a deployment's replica: EXEC_SERVICE).
 *
 * An attempt records its executor's name and an opaque handle (jsonb): for
 * local jobs {"pid":…, "start":…} (the supervisor's pid and start time),
 * later a container id or a Slurm job id. The handle is known before the
 * job's command runs: the local supervisor writes it to DIR/status before
 * it starts the command, so a daemon killed between fork and the database record
 * leaves a job that recovery still finds (see adopt).
 */
#ifndef FERRY_EXEC_H
#define FERRY_EXEC_H

#include <jansson.h>
#include <spawn.h>
#include <stdint.h>
#include <sys/types.h>
#include <yaml.h>

#include "lib/states.h"
#include "store/store.h"

struct cfg_key_ctx; /* a step key being parsed (plan/config_keys.h): options_parse */

struct exec_type;

struct exec_job {
	const struct exec_type *type;
	int64_t step_id, run_id;
	int attempt;
	char *name;
	char *dir;          /* attempt directory: log, status, out/ */
	json_t *handle;     /* the type's handle (recorded in attempts.handle); owned */
	/* the local executor's handle, also in handle: */
	pid_t pid;          /* the supervisor: leader of the job's process group */
	int64_t pid_start;  /* its start time in clock ticks since boot */
	int child;          /* ours to reap, its end signalled by SIGCHLD (else polled) */
	int64_t deadline_ms; /* monotonic time the timeout fires; 0 = none */
	int64_t timeout_ms;
	/* set once the engine decided to kill it */
	int killing;
	enum attempt_outcome kill_outcome; /* OUTCOME_FAILED (timeout) or OUTCOME_STOPPED */
	char *kill_reason;
	int64_t kill_at_ms;       /* when SIGKILL follows SIGTERM */
	int kill_final;           /* failed for good: not retried (the monitor's fail) */
	int killed_hard;
	int recorded;       /* its handle is in the database */
	json_t *ctx;        /* the engine's: {kind, spec, workdir, inputs, run, cache_key} */
};

/* How a job ended, as its executor saw it. */
struct exec_status {
	int exit_code;      /* -1 when none */
	int signal;         /* 0 when none */
	char *reason;       /* the executor's explanation (out of memory, …) or NULL; owned */
};

/* Resource use of a running job since it started (the monitor's input). */
struct exec_sample {
	int64_t rchar, wchar, read_bytes, write_bytes; /* IO counters, summed over the job */
	int64_t cpu_ms;     /* user + system CPU time */
	int have_gpu;       /* whether the next two are known */
	double gpu_util;    /* percent, 0–100, averaged over the job's GPUs */
	int64_t gpu_mem_mb;
};

/* What a type says about its jobs, as bits of exec_type.flags. */
enum exec_type_flag {
	EXF_NO_SLOTS = 1u << 0, /* its jobs take no slot of max_jobs (they end at once: noop) */
	EXF_NO_DIR = 1u << 1,   /* it writes nothing under the attempt directory */
	EXF_IMAGES = 1u << 2,   /* it runs a step's image (containers): image: other than host */
};

/* A job's kind of life. */
enum exec_mode {
	EXEC_ONESHOT = 0, /* a step: runs until its command exits */
	EXEC_SERVICE = 1, /* meant to keep running until stopped (deploy replicas) */
};

/*
 * One executor type. Every hook gets the job the engine keeps for the
 * attempt; start fills it, the others read it (and may update handle).
 * Hooks return 0 or a negative FERRY_E* code with the message set.
 */
struct exec_type {
	const char *name;
	unsigned flags;
	/*
	 * Starts the job of claimed step c with spec c->spec (command, env,
	 * workdir, image, resources) in dir. Returns 0 with job filled (handle
	 * set), or 1 when the job already ended (*st filled; noop).
	 */
	int (*start)(struct exec_job *job, const struct store_claim *c, const char *home,
		     enum exec_mode mode, struct exec_status *st);
	/* 1 when the job ended (*st filled), 0 while it runs. */
	int (*poll)(struct exec_job *job, struct exec_status *st);
	/* Sends sig (SIGTERM, SIGKILL) to every process of the job. */
	void (*signal)(const struct exec_job *job, int sig);
	/*
	 * After a daemon restart: finds the job of an attempt from its recorded
	 * handle, or when none was recorded from what the type left behind (the
	 * attempt directory, a label on the container). 1: it runs, job is
	 * filled and now ours; 0: it ended, *st filled; FERRY_ENOTFOUND: no
	 * trace of it (it never started, or its host is another).
	 */
	int (*adopt)(struct exec_job *job, struct exec_status *st);
	/* Resource use so far; FERRY_ENOTFOUND when the type cannot tell. */
	int (*sample)(const struct exec_job *job, struct exec_sample *out);
	/*
	 * The job's processes on this host (host pids; the caller frees
	 * *out): for the monitor's GPU mapping and its evidence of a hang.
	 * FERRY_ENOTFOUND when none is left. NULL: the type cannot tell (a
	 * Slurm job runs elsewhere).
	 */
	int (*pids)(const struct exec_job *job, int **out, int *n);
	/* Releases what the job held once its end is recorded (a container, a scratch dir). */
	void (*cleanup)(struct exec_job *job);
	/* Where the job's log is; the caller frees it. NULL when it keeps none. */
	char *(*log_path)(const struct exec_job *job);
	/*
	 * Called on every SIGCHLD and every 10 s with the daemon's home: reaps
	 * strays (processes jobs left behind), sweeps what a crash left (exited
	 * containers of that home).
	 */
	void (*tick)(const char *home);
	/*
	 * Containers still running whose attempt is over (exec_orphans.c):
	 * lists the jobs of home that the type's runtime runs, asks
	 * wanted(run, step, attempt, arg) for each — after the listing — and
	 * kills and removes those not wanted. Called on a worker thread: it may
	 * block, each call bounded. Returns how many it removed. May be NULL.
	 */
	int (*orphans)(const char *home, int (*wanted)(int64_t run, const char *step, int attempt, void *arg),
		       void *arg);
	/*
	 * (optional) the step key of its own options block (slurm's `slurm:`)
	 * and its parser: the block's YAML value n into *out, the spec field
	 * of that name, errors reported through c (plan/config_keys.h).
	 */
	const char *options_key;
	int (*options_parse)(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);
};

/* The slurm executor's options block (exec_slurm_opts.c). */
int exec_slurm_options_parse(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out);

/* The type called name, or NULL. */
const struct exec_type *exec_type_find(const char *name);

/* Adds a type (tests, plug-ins); FERRY_ECONFLICT when the name is taken. */
int exec_type_register(const struct exec_type *t);

/*
 * The type that runs a step with spec: its "executor", else dflt (the
 * daemon's default). NULL when the spec names a type that is not
 * registered (the message set).
 */
const struct exec_type *exec_type_for(const json_t *spec, const struct exec_type *dflt);

/* The i-th registered type (builtin, then added), NULL past the last. */
const struct exec_type *exec_type_at(size_t i);

/*
 * Runs argv (PATH searched) with its output captured into *out (the
 * caller's, also on error), stdin and stderr /dev/null, in its own process
 * group that is killed when it has not closed its output within timeout_ms
 * (FERRY_ERROR then). Blocks the caller: for worker threads and rare paths.
 */
int exec_capture(char *const argv[], char **out, int64_t timeout_ms);

/*
 * Sets *at (initialised here; the caller destroys it) for a child tool:
 * no signal blocked or ignored (the daemon's mask and SIG_IGNs are not
 * its), in a process group of its own, so a timeout kills it with its
 * children.
 */
void exec_spawnattr_child(posix_spawnattr_t *at);

/*
 * exec_capture with more said: at most max_out bytes of output kept (the
 * rest read and dropped), stderr captured too when with_stderr, *status
 * (when not NULL) waitpid's status or -1 when it was not reaped here.
 * FERRY_ETIMEDOUT_CAPTURE when it was killed at the timeout. The child
 * starts with no signal blocked or ignored and none of our descriptors.
 */
#define EXEC_CAPTURE_MAX (16 << 20)
#define FERRY_ETIMEDOUT_CAPTURE (-100)
int exec_capture_ex(char *const argv[], char **out, size_t max_out, int with_stderr, int *status,
		    int64_t timeout_ms);

/*
 * The orphan sweep as a worker-pool item (exec_orphans.c): run() asks
 * every type's orphans hook with the database as the judge. The caller
 * sets done; exec_orphans_removed tells how many containers went.
 */
#define ORPHANS_EVERY_MS 30000
struct work;
struct work *exec_orphans_work_new(const char *home);
int exec_orphans_removed(const struct work *w);
void exec_orphans_work_free(struct work *w);

/* Calls every type's tick hook (strays of each kind of job) for home. */
void exec_tick_all(const char *home);

/* "local, noop": the known names, for messages; the caller frees it. */
char *exec_type_names(void);

/* The rows, defined in their own files. */
extern const struct exec_type exec_local;
extern const struct exec_type exec_noop;
extern const struct exec_type exec_podman; /* exec_podman.c */
extern const struct exec_type exec_slurm;   /* exec_slurm.c: Slurm batch jobs (slurmrestd or the CLI) */
extern const struct exec_type exec_docker;

/*
 * exec_slurm.c: sstat's "TRESUsageInTot|TRESUsageOutTot" line as a sample
 * (cpu_ms, rchar, wchar; read_bytes and write_bytes -1: Slurm does not
 * count them). 0, or -1 when the line is not that.
 */
int exec_slurm_parse_sstat(const char *text, struct exec_sample *out);

/* What every type's start does first: job zeroed and filled from claim c for type t. */
void exec_job_begin(struct exec_job *job, const struct exec_type *t, const struct store_claim *c);

/*
 * Makes claim c's attempt directory under home with its out/, and the
 * step's checkpoint directory (one for every attempt of the step: a retry
 * resumes from it). *dir, *out and *ckpt are the caller's, also on error.
 */
int exec_attempt_dirs(const char *home, const struct store_claim *c, char **dir, char **out, char **ckpt);

/* The attempt directory of a step's attempt under home; the caller frees it. */
char *exec_attempt_dir(const char *home, int64_t run_id, const char *step, int attempt);

/* Starts a claimed step under the local executor; fills job (kept for tests). */
int exec_local_start(struct exec_job *job, const struct store_claim *c, const char *home);

/*
 * What a local job runs, as exec_local_start runs it: argv (the rendered
 * command), envp (the daemon's environment less its secrets, FERRY_* for
 * the attempt with its directory dir, out/ and the checkpoint directory
 * ckpt, then the step's env) and cwd (the step's workdir: below the run's,
 * else the run's, else dir). `ferry dev step` runs a step again from it.
 * FERRY_EINVALID when the step has no command; dispose it either way.
 */
struct exec_local_cmd {
	char **argv, **envp;
	char *cwd;
};
int exec_local_cmd_make(struct exec_local_cmd *x, const struct store_claim *c, const char *dir,
			const char *out, const char *ckpt);
void exec_local_cmd_dispose(struct exec_local_cmd *x);

/*
 * The processes of cgroup directory dir and of its children (depth <= 3),
 * appended to *pids (*n of them; the caller frees it): a container's, for
 * the monitor. FERRY_ENOTFOUND when dir has no cgroup.procs.
 */
int exec_cgroup_pids(const char *dir, int **pids, int *n);

/* Sends sig to the job through its type. */
void exec_signal(const struct exec_job *job, int sig);

/* Whether pid is alive and started at start (0 start: any). */
int exec_pid_alive(pid_t pid, int64_t start);

/* Start time of pid from /proc (clock ticks since boot), or 0. */
int64_t exec_pid_start(pid_t pid);

/*
 * Reads DIR/status written by the shim: 1 when present, with *exit_code
 * (or -1) and *signal (or 0); 0 when absent.
 */
int exec_read_status(const char *dir, int *exit_code, int *signal);

/*
 * The last non-empty line of the job's log (through its type's log_path),
 * read from the file's last EXEC_TAIL_BYTES, with control characters and
 * terminal escapes removed and cut to EXEC_LINE_MAX bytes; NULL when the
 * type keeps no log or it holds no text. The caller frees it.
 */
#define EXEC_TAIL_BYTES 4096
/*
 * Copies the text [p, end) into a new string without control characters
 * (a tab becomes a space) or terminal escape sequences, trimmed, cut at a
 * UTF-8 boundary to max bytes ("..." marks the cut). NULL when nothing
 * printable is left. A log line for people (here, in evidence.c).
 */
char *exec_clean_text(const char *p, const char *end, size_t max);
#define EXEC_LINE_MAX 200
char *exec_log_last_line(const struct exec_job *job);

/*
 * Why a job that exited with a non-zero code failed, for people:
 * "exit code N: LAST LOG LINE", or "exit code N" when its log says nothing.
 * The caller frees it.
 */
char *exec_exit_reason(const struct exec_job *job, int exit_code);

void exec_status_dispose(struct exec_status *st);
void exec_job_dispose(struct exec_job *job);

/*
 * Fault injection for the crash tests: NULL in ferryd; a test build sets it
 * (tests/fault/) and the engine calls it at named points ("started",
 * "record"). A nonzero return at "record" makes the handle record fail.
 */
extern int (*exec_fault_hook)(const char *point);
#define EXEC_FAULT(point) (exec_fault_hook ? exec_fault_hook(point) : 0)

#endif

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
#include <stdint.h>
#include <sys/types.h>
#include <yaml.h>

#include "lib/states.h"
#include "store/task.h"

struct cfg_key_ctx; /* a step key being parsed (plan/config_keys.h): options_parse */

struct exec_type;

/*
 * One job of an attempt, held by pointer (exec_job_new): never copied or
 * moved, so a type may keep its per-job state in priv.
 */
struct exec_job {
	const struct exec_type *type;
	void *inst;         /* the type's per-daemon instance (exec_type_instance); borrowed */
	void *priv;         /* the type's per-job state or NULL; released by its cleanup or dispose hook */
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
	/*
	 * What the job waits for while it cannot run yet ("waiting for Slurm:
	 * …"), set by its type through exec_job_note; the engine shows it as
	 * the step's reason while it runs (note_changed: not written yet).
	 */
	char *note;
	int note_changed;
	json_t *ctx;        /* the engine's: {kind, spec, workdir, inputs, run, cache_key} */
};

/*
 * What to start: one attempt of a step (or a deployment's replica), built
 * by the engine from its claim (deploy/replicas.c and `ferry dev step`
 * build their own). Executors read this, never the database's row. All
 * borrowed from the builder for the duration of start; the JSON values
 * are the step's resolved spec's (plan.h), not copied.
 */
struct exec_spec {
	/* the ids names are made of (attempt directory, container, Slurm job) */
	int64_t run_id, step_id;
	int attempt;
	const char *name;        /* the step's (a replica's: rIDX) */
	/* what runs */
	json_t *command;         /* the rendered argv: an array of strings (none: cannot start) */
	json_t *env;             /* the step's {"NAME": "value"} or NULL */
	const char *workdir;     /* the step's working directory (below the run's) or NULL */
	const char *run_workdir; /* the run's working directory or NULL */
	const char *image;       /* NULL or "host": the host's root filesystem */
	json_t *resources;       /* {cpus, memory_mb, gpus} or NULL */
	const char *gpus;        /* the GPUs the claim gave the job ("0,1": the host's indices) or NULL */
	const char *network;     /* "host", else none */
	json_t *options;         /* the executor's own options (slurm: the step's slurm: block) or NULL */
	json_t *warm;            /* {"python": PATH, "preload": [MODULE, …]} or NULL (warm.h; local only) */
	int64_t timeout_ms;      /* 0: none */
	/*
	 * The step's secrets opened ({"NAME": "value"}) or NULL: a row with
	 * EXF_SECRETS puts them in the job's environment and masks them in its
	 * log; never logged, never in a handle or an error.
	 */
	json_t *secrets;
	/*
	 * Where: the attempt directory is HOME/runs/RUN/NAME/ATTEMPT (its log
	 * DIR/log, its outputs DIR/out), the step's checkpoint directory
	 * HOME/runs/RUN/NAME/checkpoint (exec_attempt_dirs makes them); a
	 * replica's home is its deployment's. Container names hash it.
	 */
	const char *home;
};

/*
 * Fills the "what runs" fields of *s from a step's resolved spec JSON
 * (command, env, workdir, image, resources, network, and as options the
 * member named after type t, when t is not NULL); the ids and home are
 * left as they are. spec stays the caller's: s borrows from it.
 */
void exec_spec_from_json(struct exec_spec *s, json_t *spec, const struct exec_type *t);

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
	EXF_SERVICES = 1u << 3, /* it runs EXEC_SERVICE jobs on this host (deploy replicas) */
	EXF_SECRETS = 1u << 4,  /* it gives a job its spec's secrets and masks them in DIR/log (logmask.h) */
	EXF_ADMITS = 1u << 5,   /* its own scheduler admits its jobs (Slurm): no admission by this host's room */
	/*
	 * adopt finds a job whose handle was never recorded from its attempt
	 * directory alone (local: DIR/status names its supervisor before the
	 * command runs), so the record of its start may wait for its end
	 * (the engine's late records)
	 */
	EXF_LATE_RECORD = 1u << 6,
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
	 * (Optional) the type's per-daemon state (a client, a sweep's
	 * schedule), made once per daemon with its home and handed to the
	 * hooks as job->inst and tick's inst; fini releases it. Without init
	 * inst is NULL.
	 */
	void *(*init)(const char *home);
	void (*fini)(void *inst);
	/*
	 * Starts the job that s describes (its directory under s->home).
	 * Returns 0 with job filled (handle set), or 1 when the job already
	 * ended (*st filled; noop).
	 */
	int (*start)(struct exec_job *job, const struct exec_spec *s, enum exec_mode mode,
		     struct exec_status *st);
	/* 1 when the job ended (*st filled), 0 while it runs. */
	int (*poll)(struct exec_job *job, struct exec_status *st);
	/* Sends sig (SIGTERM, SIGKILL) to every process of the job. */
	void (*signal)(const struct exec_job *job, int sig);
	/*
	 * After a daemon restart: finds the job of an attempt from its recorded
	 * handle, or when none was recorded from what the type left behind (the
	 * attempt directory, a label on the container). 1: it runs, job is
	 * filled and now ours; 0: it ended, *st filled; FERRY_ENOTFOUND: no
	 * trace of it (it never started, or its host is another);
	 * FERRY_EXEC_EAGAIN: what would tell (the container engine) did not
	 * answer in time — the job may still run, so it is asked again later,
	 * never called lost on that.
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
	/* Releases what the job held once its end is recorded (a container, a scratch dir), and priv. */
	void (*cleanup)(struct exec_job *job);
	/*
	 * (Optional) frees job->priv and nothing else: the job itself goes
	 * on (the daemon stops, the job is handed over). exec_job_dispose
	 * calls it when priv is left.
	 */
	void (*dispose)(struct exec_job *job);
	/* Where the job's log is; the caller frees it. NULL when it keeps none. */
	char *(*log_path)(const struct exec_job *job);
	/*
	 * Called on every SIGCHLD and every 10 s with the type's instance and
	 * the daemon's home: reaps strays (processes jobs left behind), sweeps
	 * what a crash left (exited containers of that home).
	 */
	void (*tick)(void *inst, const char *home);
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
 * The daemon's instances of the rows: exec_types_init makes every row's
 * (its init hook with home) once; exec_type_instance(t) is t's, made then
 * (with a NULL home) when it is asked for first (tests, `ferry dev`);
 * exec_types_fini releases them all, once no job holds one. Thread-safe.
 */
void exec_types_init(const char *home);
void *exec_type_instance(const struct exec_type *t);
void exec_types_fini(void);

/* A new job of type t (may be NULL) with its instance, otherwise zeroed; exec_job_free releases it. */
struct exec_job *exec_job_new(const struct exec_type *t);
void exec_job_free(struct exec_job *job);
/* Sets job's note (a copy; NULL clears it), marked changed when it differs. */
void exec_job_note(struct exec_job *job, const char *note);

/*
 * Runs argv (PATH searched) with its output captured into *out (the
 * caller's, also on error), stdin and stderr /dev/null, in its own process
 * group that is killed when it has not closed its output within timeout_ms
 * (FERRY_ERROR then). Blocks the caller: for worker threads and rare paths.
 */
int exec_capture(char *const argv[], char **out, int64_t timeout_ms);

/*
 * exec_capture with more said: at most max_out bytes of output kept (the
 * rest read and dropped), stderr captured too when with_stderr, *status
 * (when not NULL) waitpid's status or -1 when it was not reaped here.
 * FERRY_ETIMEDOUT_CAPTURE when it was killed at the timeout. The child
 * starts with no signal blocked or ignored and none of our descriptors.
 */
#define EXEC_CAPTURE_MAX (16 << 20)
#define FERRY_ETIMEDOUT_CAPTURE (-100)
/* adopt: the job's executor could not be asked now; ask again at the next recovery round */
#define FERRY_EXEC_EAGAIN (-101)
int exec_capture_ex(char *const argv[], char **out, size_t max_out, int with_stderr, int *status,
		    int64_t timeout_ms);

/*
 * The `orphans` periodic task (exec_orphans.c, task.h): every
 * ORPHANS_EVERY_MS a sweep on the worker pool (none without one) asks
 * every type's orphans hook with the database as the judge.
 */
#define ORPHANS_EVERY_MS 30000
extern const struct task exec_orphans_task;

/* Calls every type's tick hook (strays of each kind of job) for home. */
void exec_tick_all(const char *home);

/* "local, noop": the known names, for messages; the caller frees it. */
char *exec_type_names(void);

/*
 * The names of the types whose flags include all of flags, for messages:
 * "podman, docker or slurm" with last " or " ("a, b" with ", "); "" when
 * none. The caller frees it.
 */
char *exec_type_names_with(unsigned flags, const char *last);

/* The rows, defined in their own files. */
extern const struct exec_type exec_local;
extern const struct exec_type exec_noop;
extern const struct exec_type exec_podman; /* exec_podman.c */
extern const struct exec_type exec_slurm;   /* exec_slurm.c: Slurm batch jobs (slurmrestd or the CLI) */
extern const struct exec_type exec_docker;

/* What every type's start does first: job zeroed and filled from s for type t (its instance too). */
void exec_job_begin(struct exec_job *job, const struct exec_type *t, const struct exec_spec *s);

/*
 * Who jobs run as (exec_user.c): as root, FERRY_JOB_USER (default
 * ferry-job); otherwise the daemon's own user. exec_user_setup runs once
 * in main before any thread, with getenv("FERRY_JOB_USER").
 */
struct exec_user {
	int active; /* jobs switch to uid/gid: ferryd is root and the user is not */
	uid_t uid;
	gid_t gid;
	int ngroups; /* the user's supplementary groups (a GPU's render group, say) */
	gid_t groups[32];
	char name[64];
	char home[256]; /* the job's HOME */
	char path[4096]; /* the job's PATH: the daemon's, less what this user cannot search */
};
int exec_user_setup(const char *name);
/* The job user, or NULL when jobs run as the daemon's user. */
const struct exec_user *exec_user_get(void);
/* Hands directory PATH (never through a link) to the job user when there is one, and sets MODE unless 0. */
int exec_user_give(const char *path, mode_t mode);
/*
 * Makes the empty file PATH (0644, never through a link) and hands it to
 * the job user; one that is there already is left as it is (FERRY_OK). A
 * job's writers (the shim as root, a warm server or a Slurm script as the
 * job user) append to it or truncate it.
 */
int exec_user_give_new_file(const char *path);
/* Whether the job user can search every directory down to DIR; the error says which one it cannot. */
int exec_user_reaches(const char *dir);
/*
 * Whether the daemon may read the resolved path REAL on a run's behalf (a
 * dataset, labels, an artifact to register, a run's working directory):
 * inside FERRY_ALLOWED_ROOTS when that is set (the run's workdir and
 * $FERRY_HOME/runs count as roots too; either may be NULL), and readable by
 * the job user (a directory: searchable). 0 with the error set (naming WHAT) if not.
 */
int exec_user_may_read(const char *real, const char *what, const char *workdir, const char *home);
/*
 * For PATH that realpath() could not resolve (its errno ERR), what a run's
 * reader answers: "WHAT PATH cannot be read by the job user" — as for a
 * file that is there — when the job user could not have looked (a
 * directory on the way it cannot search), so the answer does not tell what
 * exists where only the daemon sees; else "WHAT PATH: <ERR>". Sets the
 * error; returns FERRY_EINVALID, FERRY_ENOTFOUND (ENOENT) or FERRY_ERROR.
 */
int exec_user_missing(const char *path, const char *what, int err);
/* In a child between fork and exec (async-signal-safe): drops to the job user; -1 and errno on failure. */
int exec_user_drop(void);

/*
 * Makes s's attempt directory under s->home with its out/, and the step's
 * checkpoint directory (one for every attempt of the step: a retry
 * resumes from it), handed to the job user (exec_user_give: the attempt
 * directory 0700). *dir, *out and *ckpt are the caller's, also on error.
 */
int exec_attempt_dirs(const struct exec_spec *s, char **dir, char **out, char **ckpt);

/* The attempt directory of a step's attempt under home; the caller frees it. */
char *exec_attempt_dir(const char *home, int64_t run_id, const char *step, int attempt);

/* Starts s under the local executor; fills job (kept for tests). */
int exec_local_start(struct exec_job *job, const struct exec_spec *s);

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
int exec_local_cmd_make(struct exec_local_cmd *x, const struct exec_spec *s, const char *dir,
			const char *out, const char *ckpt);
void exec_local_cmd_dispose(struct exec_local_cmd *x);

/*
 * Warm Python starts (exec_warm.c, exec_warm_server.py): a step's
 * `warm: {python: PATH, preload: [MODULE, …]}` names an interpreter and
 * the modules it imports once; the daemon keeps a fork server per such
 * pair and the local executor starts the step's Python entry point as a
 * fork of it.
 */
struct logmask;
/*
 * Whether argv is a Python entry point the warm server for python (an
 * absolute path) can run: argv[0] found on path (the job's PATH; a name
 * with a '/' as it is) is python itself (same file once resolved), then
 * -u, then SCRIPT (a readable file, relative to cwd), -m MODULE or
 * -c CODE. 0 when it can, else -1 with *why saying what differs. Pure
 * but for the file system; unit-tested.
 */
int warm_entry(char *const *argv, const char *path, const char *cwd, const char *python,
	       const char **why);

/*
 * Starts x warm when c->warm allows: 1 with *pid and *start (the
 * supervisor's, which leads the job's process group and writes DIR/status
 * as the shim does), or 0 with *note (the caller's) saying why it starts
 * cold — written to the job's log by the caller. log and status are the
 * attempt's files; mask the step's secrets (NULL: none). Any thread.
 */
int warm_start(const struct exec_spec *c, const struct exec_local_cmd *x, const char *log,
	       const char *status, const struct logmask *mask, pid_t *pid, int64_t *start, char **note);

/* Closes the servers idle for FERRY_WARM_IDLE (default 10m); the engine's tick. */
void warm_tick(void);

/* The warm servers by state and the jobs started warm and cold, for /metrics (Prometheus text appended). */
void warm_metrics(char **buf, size_t *len, size_t *cap);

/* Sends sig to the job through its type. */
void exec_signal(const struct exec_job *job, int sig);

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
 * The most of an attempt's status file (DIR/status) a row reads: its
 * supervisor writes a few short lines; the job can write there too, so it
 * is read as hostile (lib/jobfile.h), up to this.
 */
#define EXEC_STATUS_MAX (64 * 1024)
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

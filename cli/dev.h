/*
 * dev — `ferry dev run FILE [--only STEP|--from STEP|--to STEP] [-p k=v]…`
 * runs the engine in-process on the embedded database; `ferry dev step RUN
 * STEP` runs one step of an existing run again, as it ran.
 */
#ifndef FERRY_DEV_H
#define FERRY_DEV_H

#include <libpq-fe.h>
#include <stdint.h>
#include <sys/types.h>
#include <stdio.h>

#include "engine/engine.h"
#include "exec/exec.h"
#include "store/store.h"

/* argv[0] is "run" or "step"; returns the process exit status. */
int dev_main(int argc, char **argv);

/*
 * `ferry dev step RUN STEP [-- COMMAND...]` (dev_step.c), argv[0] "step":
 * the step's job again on this machine; exits with its exit status.
 */
int dev_step_main(int argc, char **argv);

/*
 * The database a dev session uses: FERRY_DATABASE_URL, or the embedded
 * PostgreSQL under home (started when not running: *pg_started), migrated.
 * Prints what failed. dev_db_close closes *conn and stops a server this
 * session started unless other sessions use it.
 */
int dev_db_open(char **conninfo, PGconn **conn, int *pg_started, const char *home);
void dev_db_close(PGconn **conn, int pg_started, const char *home);

/*
 * A step of a run made ready to run here (dev_step.c): c is the step as
 * the engine would claim it (spec rendered), last how its last attempt
 * went, cmd what to exec, dir its attempt directory: with next, the
 * attempt the engine will start next (its directory under runs/, the
 * step's checkpoint directory); else a fresh directory
 * $home/dev/run-RUN/STEP/N for running its last attempt again. FERRY_EINVALID
 * when the step runs no job or cannot be rendered (an upstream output is
 * missing); the message says why. dev_job_dispose() either way.
 */
struct dev_job {
	struct store_claim c;
	struct store_step_last last;
	struct exec_local_cmd cmd;
	char *dir;
};
int dev_job_make(struct dev_job *j, PGconn *conn, const char *home, int64_t run_id, const char *step,
		 int next);
void dev_job_dispose(struct dev_job *j);

/* Prints the job's command, working directory, FERRY_* and step env, and its inputs. */
void dev_job_show(FILE *f, const struct dev_job *j);

/*
 * Runs argv in cwd with envp, attached to this terminal, or, with log,
 * stdin from /dev/null and its output copied to stdout and appended to
 * log. Returns its exit status (128+N for signal N), -1 when it could not
 * be started.
 */
int dev_run_child(char **argv, char **envp, const char *cwd, const char *log);

/*
 * Stepping through a dev run (dev_break.c): --step pauses before every
 * step (all), --break STEP before the named ones; the person answers run,
 * skip, shell or quit on stdin. The caller holds the engine
 * (engine_claim_hold) and calls dev_stepper_turn after each engine tick;
 * it returns 1 when the person quit (the caller stops the run).
 */
struct dev_stepper {
	int all;
	char **breaks;
	size_t nbreaks;
	int64_t reuse_run;            /* where a skipped step's results come from; 0: newest */
	void (*on_interrupt)(int);    /* the session's SIGINT handler, restored after a shell */
	/* state */
	int64_t asking;               /* the step asked about, 0: none */
	char *asking_name;
	int can_shell;
	int tty;                      /* stdin is a terminal (answers echo themselves) */
	pid_t shell;                  /* a shell the person is in, 0: none */
	char inbuf[256];
	size_t inlen;
};
int dev_stepper_add_breaks(struct dev_stepper *s, const char *comma_list);
int dev_stepper_turn(struct dev_stepper *s, struct engine *e, PGconn *conn, const char *home,
		     int64_t run_id, int64_t lease_ms);
void dev_stepper_dispose(struct dev_stepper *s);

#endif

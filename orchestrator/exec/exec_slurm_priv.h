/*
 * exec_slurm_priv — the slurm executor's state shared by exec_slurm.c (the
 * state machine and the hooks) and exec_slurm_ops.c (one request in flight:
 * an HTTP transfer to slurmrestd or a CLI child). Not for anything outside
 * exec/exec_slurm*.c.
 */
#ifndef FERRY_EXEC_SLURM_PRIV_H
#define FERRY_EXEC_SLURM_PRIV_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#include "exec/exec.h"
#include "lib/util.h"

#define API "slurm/v0.0.38"
#define DEFAULT_URL "http://127.0.0.1:6820"
#define CLI_TIMEOUT_S 10       /* a CLI call that takes longer is killed (slurmctld down) */
#define ACCT_TRIES 30          /* accounting asked this often before the job counts as lost */
#define ESLURM_INVALID_JOB_ID 2017
#define SLURM_OUT_MAX (1024 * 1024) /* the most of a CLI answer or slurm.json read back */

enum phase { PH_SUBMIT, PH_WATCH, PH_GONE };
enum op_kind { OP_NONE, OP_SUBMIT, OP_LOOKUP, OP_QUERY, OP_ACCT, OP_CANCEL };

/* The answer to one request. */
enum answer {
	ANS_OK,        /* answered; the text is the response */
	ANS_OUTAGE,    /* no answer (down, timed out): ask again later */
	ANS_REFUSED,   /* answered with an error; the text says which */
};

/* One request in flight: an HTTP transfer or a CLI child. */
struct op {
	enum op_kind kind;
	int sig;               /* OP_CANCEL: the signal sent */
	CURL *easy;
	struct curl_slist *hdrs;
	char *post;
	pid_t pid;             /* CLI */
	int64_t pid_start, deadline_ms;
	int done;
	enum answer ans;
	long http;             /* HTTP status, 0 when none */
	char *text;            /* response body or the CLI's output */
	size_t len;
	int rc;                /* CLI exit code */
};

/* The row's per-daemon instance: what every job's requests share. */
struct slurm {
	CURLM *multi;
	/* until when Slurm counts as away (its last answer was an outage): start waits for nothing then */
	int64_t away_until;
};

struct sljob {
	struct slurm *sl;      /* the instance (the job's inst) */
	int64_t step_id;
	int attempt;
	int cli;
	char *dir, *name, *comment;
	json_t *req;           /* the REST submit body: {"script":…, "job":{…}} */
	int64_t job_id;
	enum phase phase;
	int maybe_submitted;   /* an earlier submit may have reached slurmctld unanswered */
	int acct_tries;
	int want_sig, sent_sig; /* cancel: wanted and accepted signals (SIGTERM < SIGKILL) */
	int64_t next_ms;       /* when the next request may go */
	int outages;           /* in a row, for the log */
	int64_t waiting_since; /* the first outage of the submit now waiting (monotonic ms), 0: none */
	int64_t submit_timeout_ms; /* slurm.submit_timeout: how long a submit waits for Slurm; 0: forever */
	char *note;            /* what the step waits for (exec_job_note), NULL: nothing */
	struct op op;
	int ended;
	struct exec_status end;
	json_t *handle;        /* the engine job's handle (borrowed): job_id added when known */
	struct op sop;         /* an sstat call in flight (sample) */
	int64_t sample_next_ms; /* when the next sstat may go */
	int have_sample;
	struct exec_sample last; /* what the last sstat said */
};

static inline int64_t env_ms(const char *name, int64_t dflt)
{
	const char *s = getenv(name);
	int64_t v;

	return s && parse_int64(s, &v) == 0 && v > 0 ? v : dflt;
}

static inline int64_t poll_ms(void) { return env_ms("FERRY_SLURM_POLL_MS", 1000); }
static inline int64_t http_timeout_ms(void) { return env_ms("FERRY_SLURM_TIMEOUT_MS", 2000); }

/* ---- one request (exec_slurm_ops.c) ---- */

/* Ends o's request (a transfer removed, a child left to its own end) and clears it. */
void op_reset(struct slurm *sl, struct op *o);
/* Starts an HTTP request of kind to slurmrestd (path under its base, body or NULL); 0 or an error. */
int http_begin(struct sljob *s, enum op_kind kind, const char *method, const char *path, const char *body);
/* Starts a CLI child (argv, environment env or NULL) writing its answer under the attempt's directory. */
int cli_begin(struct sljob *s, struct op *o, const char *tag, enum op_kind kind, char *const *argv, char **env);
/* Marks the CLI request o done when its exit code appeared (or its child vanished, or its time passed). */
void cli_check(struct sljob *s, struct op *o, const char *tag);
/* Drives s's request one step without waiting; 1 when it is done (its answer in s->op). */
int op_drive(struct sljob *s);

#endif

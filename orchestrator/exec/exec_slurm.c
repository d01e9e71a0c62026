/*
 * exec_slurm — the `slurm` row of the executor table (exec.h): a step runs
 * as a Slurm batch job, submitted through slurmrestd (/slurm/v0.0.38, JWT;
 * libcurl) or, with `slurm: {via: cli}`, through sbatch, scontrol, sacct
 * and scancel.
 *
 * The batch script (DIR/job.sh) writes "slurm JOBID" to DIR/status, runs
 * the command (inside `podman run` when the step names an image) with its
 * output in DIR/log, and appends "exit N": the same status file the local
 * executor keeps, and the completion source that needs no Slurm daemon.
 * The request itself (the REST body; the CLI derives sbatch's flags from
 * it) is kept in DIR/slurm.json before it is sent, so a restarted daemon
 * can finish the job's submission or find it again.
 *
 * Nothing here blocks the engine's loop for long: every request is
 * asynchronous (a curl multi handle for REST, a child process bounded by
 * timeout(1) for the CLI) and each job asks Slurm at most every
 * FERRY_SLURM_POLL_MS. A job's state machine:
 *
 *   SUBMIT  → the request is sent (or, when an earlier try may have reached
 *             slurmctld, the job is first looked up by name and comment);
 *   WATCH   → job/{id} (scontrol show job) until a final state;
 *   GONE    → no longer listed: accounting (slurmdb / sacct), else the
 *             status file, else the job failed without a status.
 *
 * DIR/status is read first on every poll: a job whose script recorded its
 * exit ends even while slurmctld or slurmrestd is down. An outage (no
 * connection, a time-out, slurmctld unreachable) only delays the next
 * request — a job not submitted yet notes "waiting for Slurm: …" as its
 * step's reason (exec_job_note) and fails after slurm.submit_timeout when
 * nothing can have reached slurmctld; what Slurm refuses (a bad request,
 * a bad token, a partition it does not have: a REST error number that is
 * not an outage, whatever the HTTP status) fails the step.
 *
 * Each job's state (struct sljob) is its exec_job's priv, freed by
 * cleanup (or dispose); what all jobs share — the curl multi handle, when
 * Slurm last failed to answer — is the row's per-daemon instance (struct
 * slurm, made by init). One request in flight is exec_slurm_ops.c's; the
 * state both files share is in exec_slurm_priv.h.
 */
#include "exec/exec_slurm.h"
#include "exec/exec_slurm_priv.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/proc.h"
#include "lib/jobfile.h"
#include "lib/envsecret.h"
#include "lib/util.h"

/* ---- what Slurm says (exec_slurm_text.c reads it) ------------------------- */

/* The job's end from the status file, when the script recorded it. */
static int from_status_file(struct sljob *s)
{
	int code, sig;

	if (!exec_read_status(s->dir, &code, &sig))
		return 0;
	s->end.exit_code = code;
	s->end.signal = sig;
	s->ended = 1;
	return 1;
}

/*
 * Whether slurmstepd wrote to the job's log (DIR/log, its output file)
 * that it killed the job for its memory: "Exceeded job memory limit" from
 * jobacct_gather's OverMemoryKill (Slurm without task/cgroup, as
 * deploy/slurm.sh sets it up: the state is then FAILED with signal 9) or
 * "oom-kill event" from task/cgroup (OUT_OF_MEMORY in Slurm's state too).
 * Only slurmstepd's own lines count, from the log's last 16 KiB.
 */
static int log_says_oom(const char *dir)
{
	char buf[16384], *line, *save = NULL;
	int fd = jobfile_open(dir, "log", NULL), oom = 0;
	FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
	size_t n = 0;

	if (f == NULL) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	if (fseek(f, 0, SEEK_END) == 0) {
		long size = ftell(f);
		if (size > (long)sizeof(buf) - 1)
			fseek(f, size - (long)sizeof(buf) + 1, SEEK_SET);
		else
			rewind(f);
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	for (line = strtok_r(buf, "\n", &save); line && !oom; line = strtok_r(NULL, "\n", &save))
		oom = strncmp(line, "slurmstepd", 10) == 0 &&
		      (strstr(line, "Exceeded job memory limit") || strstr(line, "oom-kill event"));
	return oom;
}

/*
 * The job's end from a final Slurm state and its raw wait status; the
 * status file, when the script got to write it, is preferred (it holds the
 * command's own exit code).
 */
static void from_state(struct sljob *s, const char *state, int wstatus)
{
	json_t *job = json_object_get(s->req, "job");
	int64_t mb = json_integer_value(json_object_get(job, "memory_per_node"));

	if (from_status_file(s))
		return;
	s->ended = 1;
	s->end.exit_code = -1;
	if (strncmp(state, "OUT_OF_MEMORY", 13) == 0 ||
	    (mb > 0 && strncmp(state, "COMPLETED", 9) != 0 && log_says_oom(s->dir))) {
		s->end.signal = SIGKILL;
		s->end.reason = mb > 0 ? xasprintf("out of memory (limit %lld MiB)", (long long)mb)
				       : xstrdup("out of memory");
	} else if (strncmp(state, "TIMEOUT", 7) == 0) {
		s->end.reason = xasprintf("Slurm's time limit (%lld min) was reached",
					  (long long)json_integer_value(json_object_get(job, "time_limit")));
	} else if (strncmp(state, "CANCELLED", 9) == 0) {
		s->end.signal = SIGTERM;
		s->end.reason = xasprintf("Slurm job %lld was cancelled", (long long)s->job_id);
	} else if (strncmp(state, "COMPLETED", 9) == 0 || strncmp(state, "FAILED", 6) == 0) {
		if (WIFSIGNALED(wstatus))
			s->end.signal = WTERMSIG(wstatus);
		else
			s->end.exit_code = WEXITSTATUS(wstatus);
	} else {
		s->end.reason = xasprintf("Slurm job %lld ended %s", (long long)s->job_id, state);
	}
}

static void set_job_id(struct sljob *s, int64_t id)
{
	s->job_id = id;
	s->phase = PH_WATCH;
	s->waiting_since = 0;
	free(s->note);
	s->note = NULL;
	if (s->handle)
		json_object_set_new(s->handle, "job_id", json_integer(id));
	flog_debug("step %lld attempt %d: Slurm job %lld", (long long)s->step_id, s->attempt, (long long)id);
}

/* An answer that failed the step: the Slurm message as its reason. */
static void refused(struct sljob *s, const char *what, const char *msg)
{
	char *m = xstrndup(msg ? msg : "", 300);
	size_t n = strlen(m);

	while (n > 0 && isspace((unsigned char)m[n - 1]))
		m[--n] = '\0';
	s->ended = 1;
	s->end.exit_code = -1;
	s->end.reason = xasprintf("Slurm refused %s: %s", what, *m ? m : "no reason given");
	free(m);
}

/* Acts on the finished request of s. */
static void op_done(struct sljob *s)
{
	struct op *o = &s->op;
	json_t *j = s->cli ? NULL : json_loads(o->text ? o->text : "", 0, NULL);
	const char *etext = NULL;
	int enum_ = j ? exec_slurm_rest_error(j, &etext) : 0;
	/*
	 * An outage is an answer that never came, or one whose Slurm error says
	 * slurmctld was not reached; when slurmrestd names the error, that
	 * decides, whatever its HTTP status (it answers 500 to an invalid
	 * partition, which is Slurm's final word, not an outage).
	 */
	int outage = !s->cli && enum_ != 0 ? exec_slurm_rest_outage(enum_, etext) : o->ans == ANS_OUTAGE;
	enum op_kind kind = o->kind;
	int64_t now = clock_mono_ms();

	s->next_ms = now + poll_ms();
	s->sl->away_until = outage ? now + 5000 : 0;
	if (outage) {
		char *why = xstrndup(etext ? etext : o->text ? o->text : "", 200);
		why[strcspn(why, "\n")] = '\0';
		if (s->outages++ % 10 == 0)
			flog_warn("step %lld attempt %d: Slurm did not answer (%s); asking again",
				  (long long)s->step_id, s->attempt, why);
		if (kind == OP_SUBMIT)
			/* connection refused: nothing was sent; anything else may have reached slurmctld */
			s->maybe_submitted = !(o->text && (strstr(o->text, "Couldn't connect") ||
							   strstr(o->text, "contact slurm controller") ||
							   strstr(o->text, "Connection refused")));
		if (s->phase == PH_SUBMIT) {
			/* not submitted yet: the step says so, and gives up after slurm.submit_timeout */
			if (s->waiting_since == 0)
				s->waiting_since = now;
			if (s->submit_timeout_ms > 0 && now - s->waiting_since >= s->submit_timeout_ms &&
			    !s->maybe_submitted) {
				s->ended = 1;
				s->end.exit_code = -1;
				s->end.reason = xasprintf("Slurm did not answer for %lld s (slurm.submit_timeout): %s",
							  (long long)(s->submit_timeout_ms / 1000), why);
			} else {
				free(s->note);
				s->note = xasprintf("waiting for Slurm: %s", why);
			}
		}
		free(why);
		goto out;
	}
	s->outages = 0;
	if (!s->cli && o->http == 401) {
		refused(s, "the request", "slurmrestd did not accept the token (HTTP 401): renew "
			"FERRY_SLURM_TOKEN (scontrol token)");
		goto out;
	}
	switch (kind) {
	case OP_SUBMIT: {
		int64_t id = s->cli ? (o->ans == ANS_OK ? exec_slurm_parse_sbatch(o->text) : -1)
				    : json_integer_value(json_object_get(j, "job_id"));
		if (id > 0 && enum_ == 0)
			set_job_id(s, id);
		else
			refused(s, "the job", s->cli ? o->text : etext ? etext : o->text);
		break;
	}
	case OP_LOOKUP: {
		int64_t id = -1;
		if (s->cli) {
			/* squeue -o "%i|%k": our comment identifies the attempt (run ids repeat across databases) */
			char *save = NULL;
			for (char *l = strtok_r(o->text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
				char *bar = strchr(l, '|');
				if (bar && strcmp(bar + 1, s->comment) == 0) {
					*bar = '\0';
					parse_int64(l, &id);
				}
			}
		} else {
			size_t i;
			json_t *v;
			json_array_foreach(json_object_get(j, "jobs"), i, v)
				if (json_string_value(json_object_get(v, "name")) &&
				    strcmp(json_string_value(json_object_get(v, "name")), s->name) == 0 &&
				    json_string_value(json_object_get(v, "comment")) &&
				    strcmp(json_string_value(json_object_get(v, "comment")), s->comment) == 0)
					id = json_integer_value(json_object_get(v, "job_id"));
		}
		if (o->ans != ANS_OK || enum_ != 0)
			break; /* asked again later */
		if (id > 0) {
			flog_info("step %lld attempt %d: found Slurm job %lld by its name", (long long)s->step_id,
				  s->attempt, (long long)id);
			set_job_id(s, id);
		} else {
			s->maybe_submitted = 0; /* never reached Slurm: submit it now */
			s->next_ms = 0;
		}
		break;
	}
	case OP_QUERY: {
		char state[64] = "", code[32] = "";
		int gone, wst = 0;
		if (s->cli) {
			gone = o->ans != ANS_OK && strstr(o->text, "Invalid job id") != NULL;
			if (!gone && o->ans == ANS_OK && exec_slurm_show_field(o->text, "JobState", state, sizeof(state)) &&
			    exec_slurm_show_field(o->text, "ExitCode", code, sizeof(code))) {
				wst = exec_slurm_exit_pair_wstatus(code);
			}
		} else {
			json_t *job = json_array_get(json_object_get(j, "jobs"), 0);
			gone = enum_ == ESLURM_INVALID_JOB_ID || (enum_ == 0 && j && job == NULL);
			if (job) {
				snprintf(state, sizeof(state), "%s", json_string_value(json_object_get(job, "job_state"))
								       ? json_string_value(json_object_get(job, "job_state")) : "");
				wst = (int)json_integer_value(json_object_get(job, "exit_code"));
			}
		}
		if (gone) {
			flog_info("step %lld attempt %d: Slurm job %lld is no longer listed; asking accounting",
				  (long long)s->step_id, s->attempt, (long long)s->job_id);
			s->phase = PH_GONE;
			s->next_ms = 0;
		} else if (exec_slurm_state_final(state)) {
			from_state(s, state, wst);
		}
		break;
	}
	case OP_ACCT: {
		char state[64] = "";
		int wst = 0, have = 0;
		if (s->cli) {
			/* sacct -P -o State,ExitCode: "COMPLETED|3:0" */
			char *bar = o->ans == ANS_OK ? strchr(o->text, '|') : NULL;
			if (bar) {
				snprintf(state, sizeof(state), "%.*s", (int)(bar - o->text), o->text);
				wst = exec_slurm_exit_pair_wstatus(bar + 1);
				have = exec_slurm_state_final(state);
			}
		} else if (o->ans == ANS_OK && enum_ == 0) {
			json_t *job = json_array_get(json_object_get(j, "jobs"), 0);
			json_t *ex = json_object_get(job, "exit_code");
			const char *st = json_string_value(json_object_get(json_object_get(job, "state"), "current"));
			if (st) {
				snprintf(state, sizeof(state), "%s", st);
				wst = (int)(json_integer_value(json_object_get(ex, "return_code")) & 0xff) << 8;
				if (json_integer_value(json_object_get(json_object_get(ex, "signal"), "signal_id")))
					wst = (int)json_integer_value(json_object_get(json_object_get(ex, "signal"), "signal_id"));
				have = exec_slurm_state_final(state);
			}
		}
		if (have) {
			from_state(s, state, wst);
		} else if (!from_status_file(s) && ++s->acct_tries >= ACCT_TRIES) {
			s->ended = 1;
			s->end.exit_code = -1;
			s->end.reason = xasprintf("Slurm job %lld is no longer listed, accounting has no record "
						  "of it and its script recorded no exit status in %s/status",
						  (long long)s->job_id, s->dir);
		}
		break;
	}
	case OP_CANCEL:
		/* a job that already ended cannot be cancelled: nothing left to stop */
		if (o->ans == ANS_OK || (s->cli ? strstr(o->text, "Invalid job id") != NULL
						: enum_ == ESLURM_INVALID_JOB_ID || enum_ == 2021))
			s->sent_sig = o->sig;
		s->next_ms = 0; /* watch it end */
		break;
	case OP_NONE:
		break;
	}
out:
	json_decref(j);
	op_reset(s->sl, o);
}

/* ---- the requests by name ------------------------------------------------- */

static char *idstr(int64_t id) { return xasprintf("%lld", (long long)id); }

/* The job's environment for sbatch: exactly the request's (sbatch exports what it sees), plus SLURM_CONF. */
static char **cli_env(const struct sljob *s)
{
	json_t *env = json_object_get(json_object_get(s->req, "job"), "environment"), *v;
	const char *k, *conf = getenv("SLURM_CONF");
	char **envp = xcalloc(json_object_size(env) + 2, sizeof(char *));
	size_t n = 0;

	json_object_foreach(env, k, v)
		envp[n++] = xasprintf("%s=%s", k, json_string_value(v));
	if (conf && !json_object_get(env, "SLURM_CONF"))
		envp[n++] = xasprintf("SLURM_CONF=%s", conf);
	return envp;
}

static void free_vec(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

/* sbatch's flags for the request's job properties (the same job the REST body describes). */
static char **sbatch_argv(const struct sljob *s)
{
	json_t *job = json_object_get(s->req, "job");
	char **av = xcalloc(20, sizeof(char *));
	size_t n = 0;
	const char *p;

	av[n++] = xstrdup("sbatch");
	av[n++] = xstrdup("--parsable");
	av[n++] = xstrdup("--no-requeue");
	av[n++] = xasprintf("--job-name=%s", json_string_value(json_object_get(job, "name")));
	av[n++] = xasprintf("--comment=%s", json_string_value(json_object_get(job, "comment")));
	av[n++] = xasprintf("--chdir=%s", json_string_value(json_object_get(job, "current_working_directory")));
	av[n++] = xasprintf("--output=%s", json_string_value(json_object_get(job, "standard_output")));
	av[n++] = xasprintf("--error=%s", json_string_value(json_object_get(job, "standard_error")));
	av[n++] = xasprintf("--cpus-per-task=%lld", (long long)json_integer_value(json_object_get(job, "cpus_per_task")));
	if (json_integer_value(json_object_get(job, "memory_per_node")) > 0)
		av[n++] = xasprintf("--mem=%lldM", (long long)json_integer_value(json_object_get(job, "memory_per_node")));
	if (json_integer_value(json_object_get(job, "time_limit")) > 0)
		av[n++] = xasprintf("--time=%lld", (long long)json_integer_value(json_object_get(job, "time_limit")));
	if ((p = json_string_value(json_object_get(job, "gres"))) != NULL)
		av[n++] = xasprintf("--gres=%s", p);
	if ((p = json_string_value(json_object_get(job, "partition"))) != NULL)
		av[n++] = xasprintf("--partition=%s", p);
	if (exec_user_get()) {
		/* ferryd is root: the job runs as the job user (exec_user.c), as root may ask Slurm */
		av[n++] = xasprintf("--uid=%d", (int)exec_user_get()->uid);
		av[n++] = xasprintf("--gid=%d", (int)exec_user_get()->gid);
	}
	av[n++] = xasprintf("%s/job.sh", s->dir);
	return av;
}

static int begin_submit(struct sljob *s)
{
	int error;

	if (s->cli) {
		char **av = sbatch_argv(s), **envp = cli_env(s);
		error = cli_begin(s, &s->op, "op", OP_SUBMIT, av, envp);
		free_vec(av), free_vec(envp);
		return error;
	}
	{
		char *body = json_dumps(s->req, JSON_COMPACT);
		error = http_begin(s, OP_SUBMIT, "POST", API "/job/submit", body);
		free(body);
	}
	return error;
}

static int begin_lookup(struct sljob *s)
{
	if (s->cli) {
		char *name = xasprintf("--name=%s", s->name);
		char *av[] = {"squeue", "-h", "-t", "all", name, "-o", "%i|%k", NULL};
		int error = cli_begin(s, &s->op, "op", OP_LOOKUP, av, NULL);
		free(name);
		return error;
	}
	return http_begin(s, OP_LOOKUP, "GET", API "/jobs", NULL);
}

static int begin_query(struct sljob *s)
{
	char *id = idstr(s->job_id), *path;
	int error;

	if (s->cli) {
		char *av[] = {"scontrol", "show", "job", "-o", id, NULL};
		error = cli_begin(s, &s->op, "op", OP_QUERY, av, NULL);
	} else {
		path = xasprintf(API "/job/%s", id);
		error = http_begin(s, OP_QUERY, "GET", path, NULL);
		free(path);
	}
	free(id);
	return error;
}

static int begin_acct(struct sljob *s)
{
	char *id = idstr(s->job_id), *path;
	int error;

	if (s->cli) {
		char *av[] = {"sacct", "-n", "-X", "-P", "-j", id, "-o", "State,ExitCode", NULL};
		error = cli_begin(s, &s->op, "op", OP_ACCT, av, NULL);
	} else {
		path = xasprintf("slurmdb/v0.0.38/job/%s", id);
		error = http_begin(s, OP_ACCT, "GET", path, NULL);
		free(path);
	}
	free(id);
	return error;
}

static int begin_cancel(struct sljob *s, int sig)
{
	char *id = idstr(s->job_id), *path;
	const char *name = sig == SIGKILL ? "KILL" : "TERM";
	int error;

	if (s->cli) {
		char *sflag = xasprintf("--signal=%s", name);
		char *av[] = {"scancel", sflag, "--full", id, NULL};
		/* SIGTERM: a plain scancel (TERM, then KILL after KillWait) */
		if (sig != SIGKILL)
			av[1] = id, av[2] = NULL;
		error = cli_begin(s, &s->op, "op", OP_CANCEL, av, NULL);
		free(sflag);
	} else {
		path = sig == SIGKILL ? xasprintf(API "/job/%s?signal=KILL", id) : xasprintf(API "/job/%s", id);
		error = http_begin(s, OP_CANCEL, "DELETE", path, NULL);
		free(path);
	}
	s->op.sig = sig;
	free(id);
	return error;
}

/*
 * One step of s's state machine: acts on a finished request, reads the
 * status file, and starts the next request when one is due. Never waits.
 */
static void advance(struct sljob *s)
{
	int64_t now = clock_mono_ms();
	int error = FERRY_OK;

	if (s->ended)
		return;
	if (op_drive(s))
		op_done(s);
	if (s->ended)
		return;
	/* the cheap source first: the script's own record (no Slurm daemon needed) */
	if (s->phase != PH_SUBMIT && from_status_file(s))
		return;
	if (s->op.kind != OP_NONE || now < s->next_ms)
		return;
	if (s->want_sig > s->sent_sig) {
		if (s->phase == PH_SUBMIT && !s->maybe_submitted) {
			/* stopped before Slurm had it: nothing to cancel */
			s->ended = 1;
			s->end.signal = s->want_sig;
			s->end.exit_code = -1;
			return;
		}
		if (s->phase != PH_SUBMIT) {
			error = begin_cancel(s, s->want_sig);
			goto out;
		}
	}
	switch (s->phase) {
	case PH_SUBMIT:
		error = s->maybe_submitted ? begin_lookup(s) : begin_submit(s);
		break;
	case PH_WATCH:
		error = begin_query(s);
		break;
	case PH_GONE:
		error = begin_acct(s);
		break;
	}
out:
	if (error < 0) {
		/* a missing token or an unstartable tool: no request will ever work */
		s->ended = 1;
		s->end.exit_code = -1;
		s->end.reason = xasprintf("cannot reach Slurm: %s", ferry_error_last());
	}
}

static int str_is(const char *a, const char *b)
{
	return a != NULL && strcmp(a, b) == 0;
}

/* Writes text to path through a temporary file and a rename: a reader sees all or nothing. */
static int write_file(const char *path, const char *text, unsigned mode)
{
	char *tmp = xasprintf("%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode), error = FERRY_ERROR;

	if (fd < 0 || fd_write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0) {
		ferry_error_set("cannot write %s: %s", tmp, strerror(errno));
		goto out;
	}
	if (rename(tmp, path) < 0) {
		ferry_error_set("cannot rename %s: %s", tmp, strerror(errno));
		goto out;
	}
	error = FERRY_OK;
out:
	if (fd >= 0)
		close(fd);
	free(tmp);
	return error;
}

/* The state of job (its priv from now on) in dir for the request saved. */
static struct sljob *sljob_new(struct exec_job *ej, const char *dir, json_t *saved)
{
	struct sljob *s = xcalloc(1, sizeof(*s));
	json_t *job = json_object_get(json_object_get(saved, "request"), "job");

	s->step_id = ej->step_id;
	s->attempt = ej->attempt;
	s->dir = xstrdup(dir);
	s->cli = str_is(json_string_value(json_object_get(saved, "via")), "cli");
	s->req = json_incref(json_object_get(saved, "request"));
	s->name = xstrdup(json_string_value(json_object_get(job, "name")) ? json_string_value(json_object_get(job, "name")) : "");
	s->comment = xstrdup(json_string_value(json_object_get(job, "comment")) ? json_string_value(json_object_get(job, "comment")) : dir);
	s->end.exit_code = -1;
	s->submit_timeout_ms = json_integer_value(json_object_get(saved, "submit_timeout_ms"));
	if (ej->inst == NULL) /* a job the caller made itself (a test, a replica) */
		ej->inst = exec_type_instance(&exec_slurm);
	s->sl = ej->inst;
	ej->priv = s;
	return s;
}

/* Frees job's state (none: nothing). */
static void sljob_free(struct exec_job *job)
{
	struct sljob *s = job->priv;

	if (s == NULL)
		return;
	job->priv = NULL;
	op_reset(s->sl, &s->op);
	op_reset(s->sl, &s->sop);
	free(s->dir), free(s->name), free(s->comment);
	json_decref(s->req);
	free(s->end.reason);
	free(s->note);
	free(s);
}

/* Copies s's end into st (the reason duplicated). */
static void give_end(const struct sljob *s, struct exec_status *st)
{
	memset(st, 0, sizeof(*st));
	st->exit_code = s->end.exit_code;
	st->signal = s->end.signal;
	st->reason = s->end.reason ? xstrdup(s->end.reason) : NULL;
}

/*
 * Waits a short, bounded while (one request's time-out) for s to leave
 * PH_SUBMIT: submitted, or found by name after a restart, so the handle the
 * engine records holds the job id. On an outage it returns at once with the
 * job still to be submitted by poll.
 */
static void settle(struct sljob *s)
{
	int64_t until = clock_mono_ms() + http_timeout_ms() + 100;

	advance(s);
	/*
	 * While Slurm is away each start would wait the whole time-out: a
	 * backlog of steps would hold the loop that long each. Then start only
	 * sends the request and poll takes the answer.
	 */
	if (clock_mono_ms() < s->sl->away_until)
		return;
	while (!s->ended && s->phase == PH_SUBMIT && clock_mono_ms() < until) {
		if (s->op.kind == OP_NONE && s->next_ms > clock_mono_ms())
			break; /* Slurm did not answer: poll asks again later */
		if (!s->cli && s->sl->multi)
			curl_multi_poll(s->sl->multi, NULL, 0, 20, NULL);
		else
			usleep(5000);
		advance(s);
	}
}

/* ---- the hooks --------------------------------------------------------------- */

static int slurm_start(struct exec_job *job, const struct exec_spec *c, enum exec_mode mode, struct exec_status *st)
{
	struct exec_local_cmd x = {0};
	char *dir = NULL, *out = NULL, *ckpt = NULL, *script = NULL, *path = NULL, *name = NULL, *text = NULL;
	json_t *env = NULL, *saved = NULL, *sl = c->options;
	const char *via = json_string_value(json_object_get(sl, "via"));
	struct sljob *s = NULL;
	int error = FERRY_ERROR;

	(void)mode, (void)st; /* a service is a job that keeps running: nothing differs */
	exec_job_begin(job, &exec_slurm, c);
	if (exec_attempt_dirs(c, &dir, &out, &ckpt) < 0)
		goto out;
	if ((error = exec_local_cmd_make(&x, c, dir, out, ckpt)) < 0)
		goto out;
	error = FERRY_ERROR;
	env = exec_slurm_env(c, &x);
	script = exec_slurm_script(c, &x, dir, ckpt, env);
	path = xasprintf("%s/job.sh", dir);
	if (write_file(path, script, 0755) < 0)
		goto out;
	/* name: for people (squeue); comment: the attempt directory, unique across daemons sharing Slurm */
	name = xasprintf("ferry-%lld-%s-%d", (long long)c->run_id, c->name, c->attempt);
	saved = json_pack("{s:s, s:o, s:I}", "via", via && strcmp(via, "cli") == 0 ? "cli" : "rest", "request",
			  exec_slurm_request(c, script, json_incref(env), x.cwd, dir, name), "submit_timeout_ms",
			  json_integer_value(json_object_get(sl, "submit_timeout_ms")));
	/* before it is sent: a restarted daemon finds the request (and so the job) from the directory */
	free(path);
	path = xasprintf("%s/slurm.json", dir);
	text = json_dumps(saved, JSON_COMPACT);
	if (write_file(path, text, 0644) < 0)
		goto out;
	s = sljob_new(job, dir, saved);
	job->handle = json_pack("{s:s, s:s}", "via", s->cli ? "cli" : "rest", "name", name);
	s->handle = job->handle;
	job->dir = dir;
	dir = NULL;
	if (c->timeout_ms > 0)
		job->deadline_ms = clock_mono_ms() + c->timeout_ms;
	/*
	 * Submit now and wait a short, bounded while for the id, so the
	 * recorded handle holds it; on an outage the job stays to be
	 * submitted by poll.
	 */
	settle(s);
	if (s->ended && s->phase == PH_SUBMIT && s->job_id == 0 && s->end.reason) {
		ferry_error_set("%s", s->end.reason);
		error = FERRY_EINVALID;
		goto out;
	}
	error = FERRY_OK;
out:
	if (error < 0 && s) {
		sljob_free(job);
		json_decref(job->handle);
		job->handle = NULL;
	}
	free(dir), free(out), free(ckpt), free(script), free(path), free(name), free(text);
	json_decref(env);
	json_decref(saved);
	exec_local_cmd_dispose(&x);
	return error;
}

static int slurm_adopt(struct exec_job *job, struct exec_status *st);

static int slurm_poll(struct exec_job *job, struct exec_status *st)
{
	struct sljob *s = job->priv;
	int rc;

	if (s == NULL) {
		/* its state is gone (never expected): take it up again from its directory */
		if ((rc = slurm_adopt(job, st)) == 0)
			return 1;
		if (rc < 0 || (s = job->priv) == NULL) {
			memset(st, 0, sizeof(*st));
			st->exit_code = -1;
			st->reason = xasprintf("the Slurm executor lost track of this job: %s", ferry_error_last());
			return 1;
		}
	}
	s->handle = job->handle;
	advance(s);
	exec_job_note(job, s->ended ? NULL : s->note);
	if (!s->ended)
		return 0;
	give_end(s, st);
	return 1;
}

/*
 * Cancels the job: SIGTERM as a plain cancel (Slurm sends TERM, then KILL
 * after KillWait), SIGKILL as a KILL signal. Only noted here; the request
 * goes out from advance (now, unless one is in flight) and is repeated
 * through an outage until Slurm accepts it.
 */
static void slurm_signal(const struct exec_job *job, int sig)
{
	struct sljob *s = job->priv;

	if (s == NULL || sig <= s->want_sig)
		return;
	s->want_sig = sig == SIGKILL ? SIGKILL : SIGTERM;
	s->next_ms = 0;
	advance(s);
}

static int slurm_adopt(struct exec_job *job, struct exec_status *st)
{
	char *text = NULL, *line, *save = NULL;
	json_t *saved = NULL;
	struct sljob *s;
	int64_t id = json_integer_value(json_object_get(job->handle, "job_id"));
	int rc = FERRY_ENOTFOUND;

	if (jobfile_read(&text, NULL, job->dir, "slurm.json", SLURM_OUT_MAX) < 0 ||
	    (saved = json_loads(text, 0, NULL)) == NULL) {
		ferry_error_set("no Slurm request in %s (the job was never submitted)", job->dir);
		goto out;
	}
	sljob_free(job);
	s = sljob_new(job, job->dir, saved);
	if (job->handle == NULL)
		job->handle = json_pack("{s:s, s:s}", "via", s->cli ? "cli" : "rest", "name", s->name);
	s->handle = job->handle;
	free(text);
	text = NULL;
	/* the script's first line names the job when the handle never reached the database */
	if (id <= 0 && jobfile_read(&text, NULL, job->dir, "status", EXEC_STATUS_MAX) == FERRY_OK)
		for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
			if (strncmp(line, "slurm ", 6) == 0)
				parse_int64(line + 6, &id);
	if (from_status_file(s)) {
		/* ended while no daemon watched it: its handle still names the job (kept with the attempt) */
		if (id > 0)
			json_object_set_new(job->handle, "job_id", json_integer(id));
		give_end(s, st);
		sljob_free(job);
		rc = 0;
		goto out;
	}
	if (id > 0) {
		set_job_id(s, id);
	} else {
		/* submitted or not: ask Slurm by name first, submit only if it has none */
		s->maybe_submitted = 1;
		settle(s);
	}
	rc = 1;
out:
	free(text);
	json_decref(saved);
	return rc;
}

/*
 * Resource use: CPU time and IO from sstat, the job step's accounting
 * (jobacct_gather, which deploy/slurm.sh configures). sstat is a blocking
 * call into slurmctld and slurmd, so it runs as a child like the CLI's
 * other requests: each call collects the last child's answer and starts
 * the next one at most every FERRY_SLURM_POLL_MS; the figures are that
 * old at most (one poll period plus sstat's own time). Before the first
 * answer, and for a job Slurm has not started, FERRY_ENOTFOUND.
 */
static int slurm_sample(const struct exec_job *job, struct exec_sample *out)
{
	struct sljob *s = job->priv;
	int64_t now = clock_mono_ms();

	memset(out, 0, sizeof(*out));
	if (s == NULL || s->job_id <= 0 || s->ended) {
		ferry_error_set("the Slurm job is not running");
		return FERRY_ENOTFOUND;
	}
	if (s->sop.kind != OP_NONE) {
		cli_check(s, &s->sop, "sample");
		if (s->sop.done) {
			struct exec_sample x;
			if (s->sop.ans == ANS_OK && exec_slurm_parse_sstat(s->sop.text, &x) == 0)
				s->last = x, s->have_sample = 1;
			op_reset(s->sl, &s->sop);
		}
	}
	if (s->sop.kind == OP_NONE && now >= s->sample_next_ms) {
		char *id = xasprintf("%lld.batch", (long long)s->job_id);
		char *av[] = {"sstat", "-j", id, "--noheader", "--parsable2",
			      "--format=TRESUsageInTot,TRESUsageOutTot", NULL};
		if (cli_begin(s, &s->sop, "sample", OP_QUERY, av, NULL) == FERRY_OK)
			s->sample_next_ms = now + poll_ms();
		free(id);
	}
	if (!s->have_sample) {
		ferry_error_set("no accounting for Slurm job %lld yet (sstat; jobacct_gather)", (long long)s->job_id);
		return FERRY_ENOTFOUND;
	}
	*out = s->last;
	return FERRY_OK;
}

static void slurm_cleanup(struct exec_job *job)
{
	struct sljob *s = job->priv;
	char *p;

	if (s && s->op.pid > 0 && s->op.kind != OP_NONE && exec_pid_alive(s->op.pid, s->op.pid_start))
		kill(-s->op.pid, SIGKILL);
	if (s && s->sop.pid > 0 && s->sop.kind != OP_NONE && exec_pid_alive(s->sop.pid, s->sop.pid_start))
		kill(-s->sop.pid, SIGKILL);
	sljob_free(job);
	if (job->dir) {
		static const char *const files[] = {"op.out", "op.rc", "sample.out", "sample.rc"};
		for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
			p = xasprintf("%s/.slurm-%s", job->dir, files[i]);
			unlink(p);
			free(p);
		}
	}
}

static char *slurm_log_path(const struct exec_job *job)
{
	return job->dir ? xasprintf("%s/log", job->dir) : NULL;
}

static void *slurm_init(const char *home)
{
	(void)home;
	return xcalloc(1, sizeof(struct slurm));
}

static void slurm_fini(void *inst)
{
	struct slurm *sl = inst;

	if (sl && sl->multi)
		curl_multi_cleanup(sl->multi);
	free(sl);
}

/* The daemon goes on without this job (it stops): its state goes, the Slurm job stays. */
static void slurm_dispose(struct exec_job *job)
{
	sljob_free(job);
}

const struct exec_type exec_slurm = {
	.name = "slurm",
	.flags = EXF_IMAGES | EXF_ADMITS,
	.init = slurm_init,
	.fini = slurm_fini,
	.dispose = slurm_dispose,
	.start = slurm_start,
	.poll = slurm_poll,
	.signal = slurm_signal,
	.adopt = slurm_adopt,
	.sample = slurm_sample,
	.cleanup = slurm_cleanup,
	.log_path = slurm_log_path,
	.options_key = "slurm", .options_parse = exec_slurm_options_parse,
};

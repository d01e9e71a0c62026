/*
 * exec_slurm_ops — one request of the slurm executor in flight (see
 * exec_slurm.c's design note): an HTTP transfer to slurmrestd on the
 * instance's curl multi handle, or a CLI child (sbatch, scontrol, sacct,
 * scancel under timeout(1)) whose output and exit code land in files of the
 * attempt's directory, read back as hostile (lib/jobfile.h). Nothing here
 * waits: op_drive moves a request one step and says when it is done.
 */
#include "exec/exec_slurm_priv.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/exec_slurm.h"
#include "exec/proc.h"
#include "lib/envsecret.h"
#include "lib/jobfile.h"

extern char **environ;

void op_reset(struct slurm *sl, struct op *o)
{
	if (o->easy) {
		if (sl && sl->multi)
			curl_multi_remove_handle(sl->multi, o->easy);
		curl_easy_cleanup(o->easy);
	}
	curl_slist_free_all(o->hdrs);
	free(o->post);
	free(o->text);
	memset(o, 0, sizeof(*o));
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct op *o = arg;
	size_t len = size * n;

	if (o->len + len > (16u << 20))
		return 0; /* no answer of ours is this large */
	o->text = xrealloc(o->text, o->len + len + 1);
	memcpy(o->text + o->len, p, len);
	o->len += len;
	o->text[o->len] = '\0';
	return len;
}

/* The token: FERRY_SLURM_TOKEN, else FERRY_SLURM_TOKEN_FILE (read each time: it may be renewed). */
static char *token_get(void)
{
	const char *t = envsecret_get("FERRY_SLURM_TOKEN"), *f = getenv("FERRY_SLURM_TOKEN_FILE");
	char *buf = NULL;
	size_t n;

	if (t && *t)
		return xstrdup(t);
	if (f && *f && file_read(&buf, &n, f) == FERRY_OK) {
		while (n > 0 && isspace((unsigned char)buf[n - 1]))
			buf[--n] = '\0';
		if (strncmp(buf, "SLURM_JWT=", 10) == 0)
			memmove(buf, buf + 10, n - 9);
		return buf;
	}
	ferry_error_set("no Slurm token: set FERRY_SLURM_TOKEN or FERRY_SLURM_TOKEN_FILE "
			"(scontrol token username=%s)", getenv("FERRY_SLURM_USER") ? getenv("FERRY_SLURM_USER") : "root");
	return NULL;
}

/* Starts an HTTP request (method, path below the URL, body or NULL) for s. */
int http_begin(struct sljob *s, enum op_kind kind, const char *method, const char *path,
		      const char *body)
{
	const char *base = getenv("FERRY_SLURM_URL"), *user = getenv("FERRY_SLURM_USER");
	struct op *o = &s->op;
	char *token = token_get(), *h, *url;
	int running;

	if (token == NULL)
		return FERRY_EINVALID;
	if (s->sl->multi == NULL && (s->sl->multi = curl_multi_init()) == NULL) {
		free(token);
		ferry_error_set("curl_multi_init failed");
		return FERRY_ERROR;
	}
	op_reset(s->sl, o);
	o->kind = kind;
	o->easy = curl_easy_init();
	h = xasprintf("X-SLURM-USER-NAME: %s", user && *user ? user : "root");
	o->hdrs = curl_slist_append(o->hdrs, h);
	free(h);
	h = xasprintf("X-SLURM-USER-TOKEN: %s", token);
	o->hdrs = curl_slist_append(o->hdrs, h);
	free(h);
	free(token);
	o->hdrs = curl_slist_append(o->hdrs, "Content-Type: application/json");
	url = xasprintf("%s/%s", base && *base ? base : DEFAULT_URL, path);
	curl_easy_setopt(o->easy, CURLOPT_URL, url);
	free(url);
	curl_easy_setopt(o->easy, CURLOPT_HTTPHEADER, o->hdrs);
	curl_easy_setopt(o->easy, CURLOPT_CUSTOMREQUEST, method);
	if (body) {
		o->post = xstrdup(body);
		curl_easy_setopt(o->easy, CURLOPT_POSTFIELDS, o->post);
	}
	curl_easy_setopt(o->easy, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(o->easy, CURLOPT_WRITEDATA, o);
	curl_easy_setopt(o->easy, CURLOPT_PRIVATE, s);
	curl_easy_setopt(o->easy, CURLOPT_NOSIGNAL, 1L);
	/* an outage must cost a bounded wait, never a hung step */
	curl_easy_setopt(o->easy, CURLOPT_TIMEOUT_MS, (long)http_timeout_ms());
	curl_easy_setopt(o->easy, CURLOPT_CONNECTTIMEOUT_MS, (long)http_timeout_ms());
	curl_multi_add_handle(s->sl->multi, o->easy);
	curl_multi_perform(s->sl->multi, &running);
	return FERRY_OK;
}

/* Moves every HTTP transfer along; those that ended are marked done. Never waits. */
static void http_drive(struct slurm *sl)
{
	CURLMsg *m;
	int running, left;

	if (sl->multi == NULL)
		return;
	curl_multi_perform(sl->multi, &running);
	while ((m = curl_multi_info_read(sl->multi, &left)) != NULL) {
		struct sljob *s = NULL;
		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&s);
		if (s == NULL || s->op.easy != m->easy_handle)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &s->op.http);
		s->op.done = 1;
		if (m->data.result != CURLE_OK) {
			s->op.ans = ANS_OUTAGE;
			free(s->op.text);
			s->op.text = xstrdup(curl_easy_strerror(m->data.result));
		} else if (s->op.http >= 500 || s->op.http == 0) {
			s->op.ans = ANS_OUTAGE; /* slurmrestd up, slurmctld not: answered as a server error */
		} else {
			s->op.ans = s->op.http >= 400 ? ANS_REFUSED : ANS_OK;
		}
		if (s->op.text == NULL)
			s->op.text = xstrdup("");
	}
}

/* The CLI op's files in the attempt directory: its output and, once it ended, its exit code. */
/* DIR/.slurm-TAG.WHAT: a CLI request's files (TAG "op": the job's requests, "sample": sstat) */
static char *op_file(const struct sljob *s, const char *tag, const char *what)
{
	return xasprintf("%s/.slurm-%s.%s", s->dir, tag, what);
}

/*
 * Starts a CLI request: argv[0] (sbatch, scontrol, …) under timeout(1),
 * its output to DIR/.slurm-op.out and its exit code, once it ended, to
 * DIR/.slurm-op.rc (renamed into place). The engine's reaper (the local
 * type's tick) may reap the child: the rc file, not waitpid, says it ended.
 * envp NULL: the daemon's environment.
 */
int cli_begin(struct sljob *s, struct op *o, const char *tag, enum op_kind kind, char *const *argv,
		     char **envp)
{
	static const char script[] =
		"o=$1 r=$2 t=$3; shift 3; timeout -k 1 \"$t\" \"$@\" >\"$o\" 2>&1; "
		"echo $? >\"$r.tmp\"; mv -f \"$r.tmp\" \"$r\"";
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	char *out = op_file(s, tag, "out"), *rc = op_file(s, tag, "rc"), *rctmp = op_file(s, tag, "rc.tmp");
	char tbuf[16];
	char **av;
	size_t n = 0;
	pid_t pid;
	int err;

	op_reset(s->sl, o);
	unlink(out), unlink(rc), unlink(rctmp);
	while (argv[n])
		n++;
	av = xcalloc(n + 8, sizeof(char *)); /* sh -c SCRIPT sh OUT RC T argv… NULL */
	snprintf(tbuf, sizeof(tbuf), "%d", CLI_TIMEOUT_S);
	av[0] = "sh", av[1] = "-c", av[2] = (char *)script, av[3] = "sh";
	av[4] = out, av[5] = rc, av[6] = tbuf;
	for (size_t i = 0; i < n; i++)
		av[7 + i] = argv[i];
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	/* none of the daemon's descriptors (sockets, the database) go to Slurm's tools */
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	exec_spawnattr_child(&at);
	err = posix_spawn(&pid, "/bin/sh", &fa, &at, av, envp ? envp : environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	free(av), free(out), free(rc), free(rctmp);
	if (err != 0) {
		ferry_error_set("cannot run %s: %s", argv[0], strerror(err));
		return FERRY_ERROR;
	}
	o->kind = kind;
	o->pid = pid;
	o->pid_start = exec_pid_start(pid);
	o->deadline_ms = clock_mono_ms() + (CLI_TIMEOUT_S + 5) * 1000;
	return FERRY_OK;
}

/* Whether a CLI call's output says Slurm's controller could not be reached (an outage). */
static int cli_outage(const char *text, int rc)
{
	return rc == 124 || rc == 137 /* killed by timeout(1) */ || exec_slurm_transient(text);
}

/* Marks the CLI op done when its rc file appeared (or its child vanished without one). */
void cli_check(struct sljob *s, struct op *o, const char *tag)
{
	/* in the attempt's directory, where the job writes too: read as hostile (lib/jobfile.h) */
	char *rc = xasprintf(".slurm-%s.rc", tag), *out = NULL, *buf = NULL;
	int64_t v = -1;

	if (jobfile_read(&buf, NULL, s->dir, rc, 64) == FERRY_OK) {
		buf[strcspn(buf, "\n")] = '\0';
		parse_int64(buf, &v);
		out = xasprintf(".slurm-%s.out", tag);
		if (jobfile_read(&o->text, &o->len, s->dir, out, SLURM_OUT_MAX) < 0) {
			o->text = xstrdup("");
			o->len = 0;
		}
		o->rc = (int)v;
		o->ans = v == 0 ? ANS_OK : cli_outage(o->text, (int)v) ? ANS_OUTAGE : ANS_REFUSED;
		o->done = 1;
	} else if (clock_mono_ms() > o->deadline_ms) {
		if (exec_pid_alive(o->pid, o->pid_start))
			kill(-o->pid, SIGKILL);
		o->text = xstrdup("the Slurm command did not finish");
		o->ans = ANS_OUTAGE;
		o->done = 1;
	}
	if (o->done && o->pid > 0)
		waitpid(o->pid, NULL, WNOHANG); /* ours to reap unless the local tick did */
	free(rc), free(out), free(buf);
}

/* Moves s's request along; 1 when it is done. */
int op_drive(struct sljob *s)
{
	if (s->op.kind == OP_NONE)
		return 0;
	if (s->cli)
		cli_check(s, &s->op, "op");
	else
		http_drive(s->sl);
	return s->op.done;
}


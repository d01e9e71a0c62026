/*
 * exec — the registry of executor types (see exec.h). The built-in rows are
 * listed here; a test build or a plug-in adds its own with
 * exec_type_register() before the engine starts. Looking a type up is a
 * short linear scan: there are a handful, and the engine does it once.
 *
 * How to add an executor type: write exec_NAME.c with a const struct
 * exec_type exec_NAME whose hooks follow exec.h (start fills job->handle
 * before the job's command can run, or adopt can find the job without it),
 * add &exec_NAME to builtin[] below (declared extern beside it), and give it a
 * unit test and an integration test that kills the daemon mid-job.
 */
#include "exec/exec.h"

#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/util.h"

static const struct exec_type *const builtin[] = {&exec_local, &exec_noop, &exec_podman, &exec_docker, &exec_slurm};

#define MAX_EXTRA 8
static const struct exec_type *extra[MAX_EXTRA];
static int nextra;

int (*exec_fault_hook)(const char *point);

const struct exec_type *exec_type_find(const char *name)
{
	if (name == NULL)
		return NULL;
	for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++)
		if (strcmp(builtin[i]->name, name) == 0)
			return builtin[i];
	for (int i = 0; i < nextra; i++)
		if (strcmp(extra[i]->name, name) == 0)
			return extra[i];
	return NULL;
}

const struct exec_type *exec_type_for(const json_t *spec, const struct exec_type *dflt)
{
	const char *name = json_string_value(json_object_get(spec, "executor"));
	const struct exec_type *t;

	if (name == NULL)
		return dflt;
	if ((t = exec_type_find(name)) == NULL)
		ferry_error_set("the step's executor \"%s\" is not known to this daemon", name);
	return t;
}

const struct exec_type *exec_type_at(size_t i)
{
	size_t nb = sizeof(builtin) / sizeof(builtin[0]);

	if (i < nb)
		return builtin[i];
	return i - nb < (size_t)nextra ? extra[i - nb] : NULL;
}

/* The rows' instances, by the row's index in exec_type_at's order. */
#define MAX_ROWS (sizeof(builtin) / sizeof(builtin[0]) + MAX_EXTRA)
static void *inst[MAX_ROWS];
static int made[MAX_ROWS];
static pthread_mutex_t inst_lock = PTHREAD_MUTEX_INITIALIZER;

/* Row i's instance (lock held): made with home when it has none yet. */
static void *instance_at(size_t i, const char *home)
{
	const struct exec_type *t = exec_type_at(i);

	if (!made[i] && t != NULL) {
		inst[i] = t->init ? t->init(home) : NULL;
		made[i] = 1;
	}
	return inst[i];
}

void exec_types_init(const char *home)
{
	pthread_mutex_lock(&inst_lock);
	for (size_t i = 0; exec_type_at(i) != NULL; i++)
		instance_at(i, home);
	pthread_mutex_unlock(&inst_lock);
}

void *exec_type_instance(const struct exec_type *t)
{
	const struct exec_type *r;
	void *p = NULL;

	if (t == NULL)
		return NULL;
	pthread_mutex_lock(&inst_lock);
	for (size_t i = 0; (r = exec_type_at(i)) != NULL; i++)
		if (r == t) {
			p = instance_at(i, NULL);
			break;
		}
	pthread_mutex_unlock(&inst_lock);
	return p;
}

void exec_types_fini(void)
{
	const struct exec_type *t;

	pthread_mutex_lock(&inst_lock);
	for (size_t i = 0; (t = exec_type_at(i)) != NULL; i++) {
		if (made[i] && t->fini)
			t->fini(inst[i]);
		inst[i] = NULL;
		made[i] = 0;
	}
	pthread_mutex_unlock(&inst_lock);
}

void exec_tick_all(const char *home)
{
	const struct exec_type *t;

	for (size_t i = 0; (t = exec_type_at(i)) != NULL; i++)
		if (t->tick)
			t->tick(exec_type_instance(t), home);
}

struct exec_job *exec_job_new(const struct exec_type *t)
{
	struct exec_job *job = xcalloc(1, sizeof(*job));

	job->type = t;
	job->inst = exec_type_instance(t);
	return job;
}

void exec_job_free(struct exec_job *job)
{
	exec_job_dispose(job);
	free(job);
}

int exec_type_register(const struct exec_type *t)
{
	if (exec_type_find(t->name) != NULL) {
		ferry_error_set("executor type \"%s\" is already registered", t->name);
		return FERRY_ECONFLICT;
	}
	if (nextra == MAX_EXTRA) {
		ferry_error_set("too many executor types (at most %d added)", MAX_EXTRA);
		return FERRY_ERROR;
	}
	extra[nextra++] = t;
	return FERRY_OK;
}

char *exec_type_names_with(unsigned flags, const char *last)
{
	const struct exec_type *t;
	char *s = xstrdup(""), *n;
	const char *prev = NULL;

	/* each name is added once the next is known: the last one takes `last` */
	for (size_t i = 0; (t = exec_type_at(i)) != NULL; i++) {
		if ((t->flags & flags) != flags)
			continue;
		if (prev) {
			n = xasprintf("%s%s%s", s, *s ? ", " : "", prev);
			free(s);
			s = n;
		}
		prev = t->name;
	}
	if (prev) {
		n = xasprintf("%s%s%s", s, *s ? last : "", prev);
		free(s);
		s = n;
	}
	return s;
}

char *exec_type_names(void)
{
	return exec_type_names_with(0, ", ");
}

char *exec_attempt_dir(const char *home, int64_t run_id, const char *step, int attempt)
{
	return xasprintf("%s/runs/%lld/%s/%d", home, (long long)run_id, step, attempt);
}

void exec_job_begin(struct exec_job *job, const struct exec_type *t, const struct exec_spec *c)
{
	memset(job, 0, sizeof(*job));
	job->type = t;
	job->inst = exec_type_instance(t);
	job->step_id = c->step_id;
	job->run_id = c->run_id;
	job->attempt = c->attempt;
	job->name = xstrdup(c->name);
	job->timeout_ms = c->timeout_ms;
}

int exec_attempt_dirs(const struct exec_spec *c, char **dir, char **out, char **ckpt)
{
	*dir = exec_attempt_dir(c->home, c->run_id, c->name, c->attempt);
	*out = xasprintf("%s/out", *dir);
	*ckpt = xasprintf("%s/runs/%lld/%s/checkpoint", c->home, (long long)c->run_id, c->name);
	if (mkdir_p(*out, 0711) < 0 || mkdir_p(*ckpt, 0711) < 0)
		return FERRY_ERROR;
	/* the job's own: its attempt directory, its outputs, the step's checkpoints */
	if (exec_user_give(*dir, 0700) < 0 || exec_user_give(*out, 0) < 0 || exec_user_give(*ckpt, 0700) < 0)
		return FERRY_ERROR;
	return FERRY_OK;
}

void exec_spec_from_json(struct exec_spec *s, json_t *spec, const struct exec_type *t)
{
	s->command = json_object_get(spec, "command");
	s->env = json_object_get(spec, "env");
	s->workdir = json_string_value(json_object_get(spec, "workdir"));
	s->image = json_string_value(json_object_get(spec, "image"));
	s->resources = json_object_get(spec, "resources");
	s->network = json_string_value(json_object_get(spec, "network"));
	s->options = t ? json_object_get(spec, t->name) : NULL;
	s->warm = json_object_get(spec, "warm");
}

void exec_signal(const struct exec_job *job, int sig)
{
	if (job->type && job->type->signal)
		job->type->signal(job, sig);
}

char *exec_clean_text(const char *p, const char *end, size_t max)
{
	char *out = xmalloc(max + 4);
	size_t n = 0;
	int cut = 0;

	while (p < end) {
		unsigned char ch = (unsigned char)*p++;
		if (ch == 0x1b) { /* ESC [ params final: a colour or cursor sequence */
			if (p < end && *p == '[')
				for (p++; p < end && !(*p >= 0x40 && *p <= 0x7e); p++)
					;
			if (p < end)
				p++;
			continue;
		}
		if (ch == '\t')
			ch = ' ';
		if (ch < 0x20 || ch == 0x7f || (ch == ' ' && n == 0))
			continue;
		if (n == max) {
			cut = 1;
			if ((ch & 0xc0) == 0x80) { /* inside a UTF-8 sequence: drop its start */
				while (n > 0 && ((unsigned char)out[n - 1] & 0xc0) == 0x80)
					n--;
				if (n > 0)
					n--;
			}
			break;
		}
		out[n++] = (char)ch;
	}
	while (n > 0 && out[n - 1] == ' ')
		n--;
	if (n == 0) {
		free(out);
		return NULL;
	}
	if (cut) {
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = '\0';
	return out;
}

char *exec_log_last_line(const struct exec_job *job)
{
	char *path = NULL, *line = NULL, buf[EXEC_TAIL_BYTES];
	const char *end, *start;
	struct stat sb;
	ssize_t got;
	off_t from;
	int fd = -1;

	if (job == NULL || job->type == NULL || job->type->log_path == NULL ||
	    (path = job->type->log_path(job)) == NULL)
		goto out;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW)) < 0 || fstat(fd, &sb) < 0 ||
	    !S_ISREG(sb.st_mode))
		goto out;
	from = sb.st_size > EXEC_TAIL_BYTES ? sb.st_size - EXEC_TAIL_BYTES : 0;
	if ((got = pread(fd, buf, sizeof(buf), from)) <= 0)
		goto out;
	/* from the end: skip blank lines, then take the line that ends there */
	end = buf + got;
	while (end > buf && line == NULL) {
		while (end > buf && (end[-1] == '\n' || end[-1] == '\r'))
			end--;
		start = end;
		while (start > buf && start[-1] != '\n')
			start--;
		line = exec_clean_text(start, end, EXEC_LINE_MAX);
		end = start;
	}
out:
	if (fd >= 0)
		close(fd);
	free(path);
	return line;
}

char *exec_exit_reason(const struct exec_job *job, int exit_code)
{
	char *line = exec_log_last_line(job), *reason;

	reason = line ? xasprintf("exit code %d: %s", exit_code, line)
		      : xasprintf("exit code %d", exit_code);
	free(line);
	return reason;
}

void exec_status_dispose(struct exec_status *st)
{
	if (st == NULL)
		return;
	free(st->reason);
	memset(st, 0, sizeof(*st));
	st->exit_code = -1;
}

void exec_job_dispose(struct exec_job *job)
{
	if (job == NULL)
		return;
	if (job->priv && job->type && job->type->dispose)
		job->type->dispose(job);
	free(job->name);
	free(job->dir);
	free(job->kill_reason);
	free(job->note);
	json_decref(job->handle);
	json_decref(job->ctx);
	memset(job, 0, sizeof(*job));
}

void exec_job_note(struct exec_job *job, const char *note)
{
	if (note == NULL ? job->note == NULL : job->note != NULL && strcmp(job->note, note) == 0)
		return;
	free(job->note);
	job->note = note ? xstrdup(note) : NULL;
	job->note_changed = 1;
}


/*
 * exec_user — who a job runs as, and what of $FERRY_HOME it may touch.
 *
 * A job is not the daemon: it must not read the daemon's secrets (its
 * environment, the database's password file, the API token) nor write the
 * database. As root, ferryd runs every job (and model-server replica) as an
 * unprivileged user, FERRY_JOB_USER, by default the `ferry-job` system user
 * that `make deps` creates: the local shim drops to it between vfork and
 * exec, containers get `--user UID:GID`, Slurm jobs are submitted for it.
 * FERRY_JOB_USER=root keeps the old behaviour, explicitly and with a
 * warning. Not as root, the daemon cannot switch users: jobs run as the
 * daemon's own user, and the start-up log says what that costs.
 *
 * The file layout that makes the switch mean something: $FERRY_HOME and
 * runs/ are 0711 (a job reaches its own attempt directory by name, lists
 * nothing), pg/, artifacts/ and api-token are the daemon's alone, and
 * exec_attempt_dirs hands the attempt directory (0700), its out/ and the
 * step's checkpoint directory to the job user. Upstream outputs a step
 * reads are other attempt directories of the same job user. Jobs of
 * different runs share that one user: keeping runs apart from each other
 * would need a user per run, which this does not do.
 */
#include "exec/exec.h"
#include "exec/exec_shim.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/util.h"

static struct exec_user job_user; /* written once by exec_user_setup, before any thread */
static char **allowed_roots;      /* FERRY_ALLOWED_ROOTS, resolved; NULL: not set. Same life. */

static void job_path(void);

/* FERRY_ALLOWED_ROOTS: directories separated by ':', each resolved now; one that does not exist is an error. */
static int roots_setup(const char *spec)
{
	char *copy, *save = NULL;
	size_t n = 0;

	if (spec == NULL || *spec == '\0')
		return FERRY_OK;
	copy = xstrdup(spec);
	allowed_roots = xcalloc(strlen(spec) / 2 + 2, sizeof(char *));
	for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		char *real = realpath(d, NULL);
		if (real == NULL || d[0] != '/') {
			ferry_error_set("FERRY_ALLOWED_ROOTS: %s is not an existing absolute directory%s%s", d,
					real ? "" : ": ", real ? "" : strerror(errno));
			free(real);
			free(copy);
			return FERRY_EINVALID;
		}
		allowed_roots[n++] = real;
	}
	free(copy);
	return FERRY_OK;
}

int exec_user_setup(const char *name)
{
	struct passwd *pw;

	memset(&job_user, 0, sizeof(job_user));
	if (roots_setup(getenv("FERRY_ALLOWED_ROOTS")) < 0)
		return FERRY_EINVALID;
	if (geteuid() != 0) {
		pw = getpwuid(geteuid());
		if (name && *name && (pw == NULL || strcmp(name, pw->pw_name) != 0)) {
			ferry_error_set("FERRY_JOB_USER=%s: running jobs as another user needs ferryd to run as "
					"root (it runs as uid %d); unset FERRY_JOB_USER to run them as this user",
					name, (int)geteuid());
			return FERRY_EINVALID;
		}
		flog_warn("jobs run as this daemon's own user (uid %d): a job can read what ferryd can read "
			  "under FERRY_HOME, its database password included; start ferryd as root to run "
			  "them as an unprivileged FERRY_JOB_USER (default ferry-job)",
			  (int)geteuid());
		return FERRY_OK;
	}
	if (name == NULL || *name == '\0')
		name = "ferry-job";
	if (strcmp(name, "root") == 0 || strcmp(name, "0") == 0) {
		flog_warn("FERRY_JOB_USER=root: jobs run as root and can read every secret of this daemon and "
			  "write its database; unset it to run them as the unprivileged ferry-job user");
		return FERRY_OK;
	}
	errno = 0;
	pw = getpwnam(name);
	if (pw == NULL) {
		ferry_error_set("FERRY_JOB_USER: there is no user '%s' to run jobs as (make deps creates "
				"ferry-job: useradd --system --user-group --home-dir /var/lib/ferry-job "
				"--create-home ferry-job); FERRY_JOB_USER=root runs jobs as root instead, "
				"which gives them this daemon's secrets", name);
		return FERRY_EINVALID;
	}
	if (pw->pw_uid == 0) {
		ferry_error_set("FERRY_JOB_USER=%s has uid 0; name an unprivileged user, or root explicitly",
				name);
		return FERRY_EINVALID;
	}
	job_user.active = 1;
	job_user.uid = pw->pw_uid;
	job_user.gid = pw->pw_gid;
	job_user.ngroups = (int)(sizeof(job_user.groups) / sizeof(job_user.groups[0]));
	if (getgrouplist(pw->pw_name, pw->pw_gid, job_user.groups, &job_user.ngroups) < 0)
		job_user.ngroups = 1, job_user.groups[0] = pw->pw_gid; /* more than 32: the primary only */
	snprintf(job_user.name, sizeof(job_user.name), "%s", pw->pw_name);
	snprintf(job_user.home, sizeof(job_user.home), "%s", pw->pw_dir && *pw->pw_dir ? pw->pw_dir : "/");
	job_path();
	flog_info("jobs run as %s (uid %d, gid %d)", job_user.name, (int)job_user.uid, (int)job_user.gid);
	return FERRY_OK;
}

const struct exec_user *exec_user_get(void)
{
	return job_user.active ? &job_user : NULL;
}

int exec_user_give(const char *path, mode_t mode)
{
	/* through a descriptor opened without following a link: a path a job could have swapped */
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), error = FERRY_OK;
	struct stat st;

	/*
	 * Only what differs is changed: a directory made ahead (dirs_ahead.c)
	 * is the job user's with its mode already, and a chown or chmod that
	 * changes nothing still writes the inode (its ctime) — three inode
	 * writes on each hop of a chain, between the claim's answer and the
	 * job's start, beside the inodes dirs_ahead writes.
	 */
	if (fd >= 0 && fstat(fd, &st) < 0)
		st.st_uid = (uid_t)-1, st.st_mode = 0;
	if (fd < 0 ||
	    (job_user.active && (st.st_uid != job_user.uid || st.st_gid != job_user.gid) &&
	     fchown(fd, job_user.uid, job_user.gid) < 0) ||
	    (mode && (st.st_mode & 07777) != mode && fchmod(fd, mode) < 0)) {
		ferry_error_set("cannot hand %s to %s: %s", path, job_user.active ? job_user.name : "the job",
				strerror(errno));
		error = FERRY_ERROR;
	}
	if (fd >= 0)
		close(fd);
	return error;
}

int exec_user_give_new_file(const char *path)
{
	/* never through a link, never over a file that is there (its writer made it first) */
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644), error = FERRY_OK;

	if (fd < 0) {
		if (errno == EEXIST)
			return FERRY_OK;
		ferry_error_set("cannot make %s: %s", path, strerror(errno));
		return FERRY_ERROR;
	}
	if (job_user.active && fchown(fd, job_user.uid, job_user.gid) < 0) {
		ferry_error_set("cannot hand %s to %s: %s", path, job_user.name, strerror(errno));
		error = FERRY_ERROR;
	}
	close(fd);
	return error;
}

/*
 * The first directory from / down to the absolute PATH (itself included)
 * that the job user cannot search (owner, group or other x bit, by its
 * uid and groups), as an offset into path (0 for "/"), or -1 when none.
 * *st is that directory's stat.
 */
static long first_closed(char *path, struct stat *st)
{
	for (char *p = path;; p++) {
		if (*p == '/' || *p == '\0') {
			char save = *p;
			int closed = 0;
			*p = '\0';
			if (stat(*path ? path : "/", st) == 0) {
				int in_group = st->st_gid == job_user.gid;
				for (int i = 0; i < job_user.ngroups && !in_group; i++)
					in_group = st->st_gid == job_user.groups[i];
				mode_t bit = st->st_uid == job_user.uid ? S_IXUSR : in_group ? S_IXGRP : S_IXOTH;
				closed = !(st->st_mode & bit);
			}
			*p = save;
			if (closed)
				return p - path;
			if (save == '\0')
				return -1;
		}
	}
}

/*
 * Whether the job user can reach DIR: every directory from / down to it
 * searchable by that user. Called at start on $FERRY_HOME/runs, so a home
 * under a 0700 directory is said at once, not as a failed first step.
 */
int exec_user_reaches(const char *dir)
{
	char *path;
	struct stat st;
	long at;
	int error = FERRY_OK;

	if (!job_user.active)
		return FERRY_OK;
	path = realpath(dir, NULL);
	if (path == NULL) {
		ferry_error_set("%s: %s", dir, strerror(errno));
		return FERRY_ERROR;
	}
	if ((at = first_closed(path, &st)) >= 0) {
		path[at ? at : 1] = '\0';
		ferry_error_set("the job user %s cannot enter %s (mode %04o, owner uid %d): jobs could not "
				"reach their attempt directories under %s; make it searchable (chmod o+x %s) "
				"or choose another FERRY_HOME",
				job_user.name, path, (unsigned)(st.st_mode & 07777), (int)st.st_uid, dir, path);
		error = FERRY_EINVALID;
	}
	free(path);
	return error;
}

/*
 * The daemon's PATH less the directories the job user cannot search (a
 * version manager's shims under /root, say): through one of those,
 * `python3` would not be "not found" but "Permission denied", and a
 * program of the same name later in PATH would never be tried by a shell.
 */
static void job_path(void)
{
	const char *path = getenv("PATH");
	char *copy, *save = NULL;
	size_t n = 0;

	job_user.path[0] = '\0';
	if (path == NULL)
		return;
	copy = xstrdup(path);
	for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		struct stat st;
		char *abs = realpath(d, NULL);
		int open_ = abs && first_closed(abs, &st) < 0;
		size_t len = strlen(d);
		free(abs);
		if (!open_ || n + len + 2 > sizeof(job_user.path))
			continue;
		if (n)
			job_user.path[n++] = ':';
		memcpy(job_user.path + n, d, len + 1);
		n += len;
	}
	free(copy);
}

int exec_user_drop(void)
{
	struct exec_shim_user u = {job_user.uid, job_user.gid, job_user.ngroups, job_user.groups};

	return exec_shim_drop(job_user.active ? &u : NULL);
}

/* Whether the job user may read REAL (resolved): every directory above it searchable, itself readable (and searchable if a directory). */
static int job_user_reads(const char *real, const struct stat *st)
{
	char *dir = xstrdup(real), *slash = strrchr(dir, '/');
	struct stat dst;
	int in_group = st->st_gid == job_user.gid, ok;

	if (slash)
		*(slash == dir ? slash + 1 : slash) = '\0';
	ok = first_closed(dir, &dst) < 0;
	free(dir);
	for (int i = 0; i < job_user.ngroups && !in_group; i++)
		in_group = st->st_gid == job_user.groups[i];
	if (ok) {
		mode_t r = st->st_uid == job_user.uid ? S_IRUSR : in_group ? S_IRGRP : S_IROTH;
		mode_t x = st->st_uid == job_user.uid ? S_IXUSR : in_group ? S_IXGRP : S_IXOTH;
		ok = S_ISDIR(st->st_mode) ? (st->st_mode & x) != 0 : (st->st_mode & r) != 0;
	}
	return ok;
}

int exec_user_missing(const char *path, const char *what, int err)
{
	char *lex = job_user.active ? path_lexical(path) : NULL;
	int closed = 0;

	if (lex) {
		/*
		 * The deepest directory of the path that exists (a file on the way,
		 * "Not a directory", counts as its directory): could the job user
		 * have looked in it?
		 */
		struct stat st;
		for (;;) {
			char *cut = strrchr(lex, '/');
			if (cut == lex) {
				lex[1] = '\0';
				break;
			}
			*cut = '\0';
			if (stat(lex, &st) == 0 && S_ISDIR(st.st_mode))
				break;
		}
		closed = first_closed(lex, &st) >= 0;
		free(lex);
	}
	if (closed) {
		ferry_error_set("%s %s cannot be read by the job user %s: Ferry reads for a run only what "
				"its jobs could read themselves", what, path, job_user.name);
		return FERRY_EINVALID;
	}
	ferry_error_set("%s %s: %s", what, path, strerror(err));
	return err == ENOENT ? FERRY_ENOTFOUND : FERRY_ERROR;
}

int exec_user_may_read(const char *real, const char *what, const char *workdir, const char *home)
{
	struct stat st;

	if (allowed_roots) {
		int in = (workdir && path_within(real, workdir)) != 0;
		char *runs = home ? xasprintf("%s/runs", home) : NULL;
		in = in || (runs && path_within(real, runs));
		free(runs);
		for (size_t i = 0; allowed_roots[i] && !in; i++)
			in = path_within(real, allowed_roots[i]);
		if (!in) {
			char *list = NULL;
			for (size_t i = 0; allowed_roots[i]; i++) {
				char *l = xasprintf("%s%s%s", list ? list : "", list ? ":" : "", allowed_roots[i]);
				free(list);
				list = l;
			}
			ferry_error_set("%s %s lies outside FERRY_ALLOWED_ROOTS (%s)%s%s", what, real, list,
					workdir ? " and the run's directory " : "", workdir ? workdir : "");
			free(list);
			return 0;
		}
	}
	if (!job_user.active)
		return 1;
	if (stat(real, &st) < 0) {
		ferry_error_set("%s %s: %s", what, real, strerror(errno));
		return 0;
	}
	if (!job_user_reads(real, &st)) {
		ferry_error_set("%s %s cannot be read by the job user %s: Ferry reads for a run only what "
				"its jobs could read themselves", what, real, job_user.name);
		return 0;
	}
	return 1;
}

/*
 * datacache — the `cache` step kind. When a cache step is claimed its
 * dataset (a file or directory, relative to the run's working directory)
 * is fingerprinted by content; the entry key is that fingerprint, or the
 * sha256 of it with the step's command, env and image when the step
 * preprocesses (its output is not the raw copy), and with the file name
 * for a single-file dataset. A complete entry is the directory
 * $FERRY_CACHE_ROOT/entries/KEY: a hit opens a session on it and finishes
 * the step at once. A miss builds the entry in $FERRY_CACHE_ROOT/tmp
 * (copied here, or written by the step's command running as a job with
 * FERRY_CACHE_DIR pointing there), makes room under the cap by evicting
 * least-recently-used entries no open session pins, and renames it into
 * place — so an entry is either complete or absent. Sessions are released
 * by the database when their run finishes (0004_datacache.sql).
 *
 * The fingerprint (lib/fingerprint.c, with its stat memo) and the copy
 * run inside the dispatcher loop: they take as long as reading (and on a
 * miss copying) the dataset takes, bounded by the cap for copies. Symbolic links are never followed: a link inside
 * the dataset is recreated when its target stays inside it and fails the
 * step when it points out.
 */
#include "steps/datacache.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/exec.h"
#include "lib/fingerprint.h"
#include "store/store.h"
#include "lib/util.h"

/* The copy's read size. */
#define IO_CHUNK (1 << 20)

/* ---- files ---- */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	if (remove(path) != 0 && errno != ENOENT)
		flog_warn("data cache: cannot remove %s: %s", path, strerror(errno));
	return 0;
}

/* Removes a directory tree (links not followed); a missing one is fine. */
static void rm_tree(const char *path)
{
	struct stat st;

	if (lstat(path, &st) != 0)
		return;
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* Whether a link at rel with target text stays inside the tree (lexically). */
static int link_inside(const char *rel, const char *target)
{
	int depth = 0;
	const char *p;

	if (target[0] == '/' || target[0] == '\0')
		return 0;
	for (p = rel; *p; p++) /* the link's own directory */
		depth += *p == '/';
	for (p = target; *p;) {
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n == 2 && p[0] == '.' && p[1] == '.') {
			if (--depth < 0)
				return 0;
		} else if (n > 0 && !(n == 1 && p[0] == '.')) {
			depth++;
		}
		p += n;
		while (*p == '/')
			p++;
	}
	return 1;
}

static int copy_fd(int in, int out, const char *what)
{
	char *buf = xmalloc(IO_CHUNK);
	ssize_t n;
	int error = FERRY_OK;

	while ((n = read(in, buf, IO_CHUNK)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			ferry_error_set("cannot read %s: %s", what, strerror(errno));
			error = FERRY_ERROR;
			break;
		}
		if (fd_write_all(out, buf, (size_t)n) < 0) {
			ferry_error_set("cannot write the copy of %s: %s", what, strerror(errno));
			error = FERRY_ERROR;
			break;
		}
	}
	free(buf);
	return error;
}

/* Copies the loaded tree (src root rootfd) into the new directory dst. */
static int tree_copy(const struct fingerprint_tree *t, int rootfd, const char *src, const char *dst)
{
	int error = FERRY_OK;

	if (mkdir_p(dst, 0755) < 0)
		return FERRY_ERROR;
	for (size_t i = 0; i < t->n && error == FERRY_OK; i++) {
		const struct fingerprint_ent *e = &t->v[i];
		char *to = xasprintf("%s/%s", dst, e->rel), *what = xasprintf("%s/%s", src, e->rel);
		int in = -1, out = -1;

		if (e->type == 'd') {
			if (mkdir(to, (e->mode & 0777) | 0700) != 0) {
				ferry_error_set("cannot create %s: %s", to, strerror(errno));
				error = FERRY_ERROR;
			}
		} else if (e->type == 'l') {
			if (!link_inside(e->rel, e->link)) {
				ferry_error_set("%s is a symbolic link to %s, outside the dataset: copy the data "
						"into the dataset or remove the link", what, e->link);
				error = FERRY_EINVALID;
			} else if (symlink(e->link, to) != 0) {
				ferry_error_set("cannot create the link %s: %s", to, strerror(errno));
				error = FERRY_ERROR;
			}
		} else {
			in = openat(rootfd, e->rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
			if (in < 0) {
				ferry_error_set("cannot open %s: %s", what, strerror(errno));
				error = FERRY_ERROR;
			} else if ((out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
					       (e->mode & 0777) | 0600)) < 0) {
				ferry_error_set("cannot create %s: %s", to, strerror(errno));
				error = FERRY_ERROR;
			} else {
				error = copy_fd(in, out, what);
			}
			if (in >= 0)
				close(in);
			if (out >= 0 && close(out) != 0 && error == FERRY_OK) {
				ferry_error_set("cannot write %s: %s", to, strerror(errno));
				error = FERRY_ERROR;
			}
		}
		free(to);
		free(what);
	}
	return error;
}

/* ---- settings and paths ---- */

static char *cache_root(const struct step_run *r)
{
	const char *root = getenv("FERRY_CACHE_ROOT");

	if (root && root[0])
		return xstrdup(root);
	return xasprintf("%s/cache", r->home);
}

/* The cap in bytes (FERRY_CACHE_MAX_MB; a bad value is reported once and the default used). */
static int64_t cache_cap(void)
{
	static int warned;
	const char *v = getenv("FERRY_CACHE_MAX_MB");
	int64_t mb = DATACACHE_DEFAULT_MAX_MB;

	if (v && v[0] && (parse_int64(v, &mb) < 0 || mb < 1 || mb > ((int64_t)1 << 40))) {
		if (!warned)
			flog_warn("FERRY_CACHE_MAX_MB=%s is not a number of megabytes in 1..2^40: using %d",
				  v, DATACACHE_DEFAULT_MAX_MB);
		warned = 1;
		mb = DATACACHE_DEFAULT_MAX_MB;
	}
	return mb * 1024 * 1024;
}

/* Whether rel has a ".." component (it would leave the directory it is relative to). */
static int has_dotdot(const char *rel)
{
	const char *p = rel;

	while (*p) {
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return 1;
		p += n;
		while (*p == '/')
			p++;
	}
	return 0;
}

/*
 * The dataset's real path. A relative one is resolved against the run's
 * working directory and must stay inside it, links included: a step that
 * names one outside fails for good (res filled, 1 returned). Missing: a
 * plain failure (the data may yet arrive; the retry policy decides).
 */
static int resolve_dataset(char **out, struct step_result *res, const struct step_run *r, const char *ds)
{
	char *joined = NULL, *real = NULL;
	int e;

	*out = NULL;
	if (ds == NULL || ds[0] == '\0') {
		ferry_error_set("a cache step needs \"dataset\": the file or directory to stage");
		return FERRY_EINVALID;
	}
	if (ds[0] != '/') {
		if (r->workdir == NULL) {
			res->outcome = OUTCOME_FAILED;
			res->final = 1;
			res->reason = xasprintf("dataset \"%s\" is relative but the run has no working "
						"directory: submit it with one (ferry submit does; the API "
						"takes \"workdir\") or give an absolute path", ds);
			return 1;
		}
		if (has_dotdot(ds)) {
			res->outcome = OUTCOME_FAILED;
			res->final = 1;
			res->reason = xasprintf("dataset \"%s\" leaves the run's working directory %s (\"..\"): "
						"name a path inside it, or an absolute path", ds, r->workdir);
			return 1;
		}
		joined = xasprintf("%s/%s", r->workdir, ds);
	} else {
		joined = xstrdup(ds);
	}
	real = realpath(joined, NULL);
	e = errno;
	if (real == NULL && exec_user_missing(joined, "dataset", e) == FERRY_EINVALID) {
		/* where the job user could not have looked: said as for a file there (exec.h) */
		res->outcome = OUTCOME_FAILED;
		res->final = 1;
		res->reason = xstrdup(ferry_error_last());
		free(joined);
		return 1;
	}
	if (real == NULL) {
		ferry_error_set("dataset %s does not exist or cannot be read (%s): create it before the "
				"run, or fix the step's \"dataset\"", joined, strerror(e));
		free(joined);
		return FERRY_ENOTFOUND;
	}
	if (ds[0] != '/' && !path_within(real, r->workdir)) {
		res->outcome = OUTCOME_FAILED;
		res->final = 1;
		res->reason = xasprintf("dataset \"%s\" resolves to %s, outside the run's working "
					"directory %s (through a symbolic link): name a path inside "
					"it, or an absolute path", ds, real, r->workdir);
		free(joined), free(real);
		return 1;
	}
	free(joined);
	if (!exec_user_may_read(real, "dataset", r->workdir, r->home)) {
		res->outcome = OUTCOME_FAILED;
		res->final = 1;
		res->reason = xstrdup(ferry_error_last());
		free(real);
		return 1;
	}
	*out = real;
	return FERRY_OK;
}

/*
 * The entry key: the fingerprint alone for a plain copy of a directory;
 * otherwise sha256 of it with what else shapes the entry (the file's name,
 * the preprocessing command, its env and image).
 */
static void entry_key(char out[65], const char *fp, const char *file_name, const json_t *spec)
{
	const json_t *cmd = json_object_get(spec, "command");
	json_t *k;
	char *txt;

	if (json_array_size(cmd) == 0 && file_name == NULL) {
		memcpy(out, fp, 65);
		return;
	}
	k = json_pack("{s:s, s:s?}", "fingerprint", fp, "file", file_name);
	if (json_array_size(cmd) > 0) {
		json_object_set(k, "command", (json_t *)cmd);
		json_object_set(k, "env", json_object_get(spec, "env") ?: json_null());
		json_object_set(k, "image", json_object_get(spec, "image") ?: json_null());
	}
	txt = json_dumps(k, JSON_COMPACT | JSON_SORT_KEYS);
	sha256_hex(out, txt, strlen(txt));
	free(txt);
	json_decref(k);
}

static json_t *outputs(const char *dir, const char *session, const char *fp, const char *key, int hit,
		       int64_t bytes)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:b, s:I}", "cache_dir", dir, "session", session,
			 "fingerprint", fp, "key", key, "hit", hit, "bytes", (json_int_t)bytes);
}

/* Bytes of the regular files below dir. */
static int tree_bytes(int64_t *bytes, const char *dir)
{
	struct fingerprint_tree t;
	int fd = -1, error;

	*bytes = 0;
	if ((error = fingerprint_tree_load(&t, &fd, dir)) < 0)
		return error;
	*bytes = t.bytes;
	close(fd);
	fingerprint_tree_dispose(&t);
	return FERRY_OK;
}

/*
 * Makes room for bytes under the cap and moves the built directory tmp to
 * final (removing tmp when another daemon committed the same key first),
 * then records the entry and opens the session. Fills res on success;
 * a dataset larger than the whole cap fails for good.
 */
static int commit_entry(struct step_result *res, const struct step_run *r, const char *tmp,
			const char *final, const char *key, const char *fp, const char *dataset,
			const json_t *command, int64_t bytes)
{
	int64_t cap = cache_cap(), used = 0;
	char **gone = NULL, *session = NULL;
	int n = 0, error;
	struct store_cache_entry e = {r->host, key, fp, final, dataset, command, bytes};

	if (bytes > cap && tmp != NULL) {
		rm_tree(tmp);
		res->outcome = OUTCOME_FAILED;
		res->final = 1;
		res->reason = xasprintf("the staged dataset is %lld bytes, more than the whole data cache "
					"(FERRY_CACHE_MAX_MB=%lld): raise FERRY_CACHE_MAX_MB, or read the "
					"dataset in place without a cache step", (long long)bytes,
					(long long)(cap / (1024 * 1024)));
		return FERRY_OK;
	}
	if (tmp == NULL)
		goto commit; /* adopting an entry already in place: nothing to make room for */
	if ((error = store_cache_evict(&gone, &n, r->conn, r->host, key, bytes, cap)) < 0)
		goto out;
	for (int i = 0; i < n; i++) {
		steps_log(r, "evicted %s (least recently used)", gone[i]);
		flog_info("data cache: evicted %s to make room for %lld bytes", gone[i], (long long)bytes);
		rm_tree(gone[i]);
	}
	if (store_cache_used(&used, r->conn, r->host) == FERRY_OK && used + bytes > cap)
		flog_warn("data cache: %lld bytes in use by open sessions; entry %s goes over the cap of "
			  "%lld bytes until they are released", (long long)used, key, (long long)cap);
	if (tmp != NULL && rename(tmp, final) != 0) {
		if (errno != EEXIST && errno != ENOTEMPTY) {
			ferry_error_set("cannot move %s to %s: %s", tmp, final, strerror(errno));
			error = FERRY_ERROR;
			rm_tree(tmp);
			goto out;
		}
		rm_tree(tmp); /* the same content is already there */
	}
commit:
	if ((error = store_cache_commit(&session, r->conn, &e, r->run_id, r->step_id, r->attempt)) < 0)
		goto out;
	res->outcome = OUTCOME_SUCCEEDED;
	res->outputs = outputs(final, session, fp, key, 0, bytes);
	steps_log(r, "cache miss: staged %lld bytes into %s (session %s)", (long long)bytes, final, session);
out:
	for (int i = 0; i < n; i++)
		free(gone[i]);
	free(gone);
	free(session);
	return error;
}

/* ---- the step ---- */

int datacache_claimed(const struct step_run *r, struct step_result *res, json_t **env)
{
	const char *ds = json_string_value(json_object_get(r->spec, "dataset"));
	const json_t *cmd = json_object_get(r->spec, "command");
	char *dataset = NULL, *root = NULL, *final = NULL, *tmp = NULL, *session = NULL, *path = NULL;
	char *state = NULL, *entries = NULL, fp[65], key[65];
	const char *file_name = NULL;
	struct fingerprint_tree t = {0};
	struct stat st, fst;
	int64_t bytes = 0, t0 = clock_mono_ms(), since = fingerprint_clock_ns();
	int rootfd = -1, error, rc;

	*env = NULL;
	step_result_init(res);
	if ((error = resolve_dataset(&dataset, res, r, ds)) != FERRY_OK)
		return error; /* 1: res says why; < 0: the message does */
	if (stat(dataset, &st) != 0 || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))) {
		ferry_error_set("dataset %s is neither a file nor a directory", dataset);
		error = FERRY_EINVALID;
		goto out;
	}
	if (S_ISDIR(st.st_mode) && (error = fingerprint_tree_load(&t, &rootfd, dataset)) < 0)
		goto out;
	if ((error = fingerprint_of(fp, dataset, &st, &t, rootfd, since)) < 0)
		goto out;
	if (S_ISREG(st.st_mode)) {
		file_name = strrchr(dataset, '/') + 1;
		bytes = (int64_t)st.st_size;
	} else {
		bytes = t.bytes;
	}
	entry_key(key, fp, file_name, r->spec);
	root = cache_root(r);
	final = xasprintf("%s/entries/%s", root, key);

	/* a hit: the directory is there and the index knows it */
	if (stat(final, &fst) == 0 && S_ISDIR(fst.st_mode)) {
		int64_t b = 0;
		rc = store_cache_hit(&session, &path, &b, r->conn, r->host, key, r->run_id, r->step_id,
				     r->attempt);
		if (rc < 0) {
			error = rc;
			goto out;
		}
		if (rc == 1) {
			res->outcome = OUTCOME_SUCCEEDED;
			res->outputs = outputs(final, session, fp, key, 1, b);
			steps_log(r, "cache hit: %s is staged in %s (session %s, %lld ms)", dataset, final,
				 session, (long long)(clock_mono_ms() - t0));
			error = 1;
			goto out;
		}
		/*
		 * Complete (only complete directories are renamed in) but not in the
		 * index: a crash between the rename and the commit, or an eviction
		 * whose removal failed. Its content is what the key says: adopt it.
		 */
		if ((error = store_cache_miss(r->conn, r->host)) < 0 || (error = tree_bytes(&b, final)) < 0)
			goto out;
		error = commit_entry(res, r, NULL, final, key, fp, dataset,
				     json_array_size(cmd) > 0 ? cmd : NULL, b);
		error = error < 0 ? error : 1;
		goto out;
	} else if ((error = store_cache_forget(r->conn, r->host, key)) < 0) {
		goto out; /* the index knew an entry whose files are gone */
	}
	if ((error = store_cache_miss(r->conn, r->host)) < 0)
		goto out;

	entries = xasprintf("%s/entries", root);
	if ((error = mkdir_p(entries, 0755)) < 0)
		goto out;
	tmp = xasprintf("%s/tmp/%s.%lld.%lld", root, key, (long long)r->run_id, (long long)r->step_id);
	rm_tree(tmp); /* an earlier attempt's leftovers */
	if (json_array_size(cmd) > 0) {
		/* the command builds the entry as a job; datacache_job_done commits it */
		json_t *st_json = json_pack("{s:s, s:s, s:s, s:s, s:s, s:O}", "key", key, "fingerprint", fp,
					    "tmp", tmp, "final", final, "dataset", dataset, "command", cmd);
		/* the job (as the job user, exec_user.c) writes it; taken back at the commit */
		if (mkdir_p(tmp, 0755) < 0 || exec_user_give(tmp, 0) < 0) {
			json_decref(st_json);
			error = FERRY_ERROR;
			goto out;
		}
		state = xasprintf("%s/cache.json", r->dir);
		rc = json_dump_file(st_json, state, JSON_COMPACT);
		json_decref(st_json);
		if (rc != 0) {
			ferry_error_set("cannot write %s", state);
			error = FERRY_ERROR;
			goto out;
		}
		steps_log(r, "cache miss: preprocessing %s into %s", dataset, tmp);
		*env = json_pack("{s:s, s:s}", "FERRY_CACHE_DIR", tmp, "FERRY_DATASET", dataset);
		error = 0;
		goto out;
	}
	if (bytes > cache_cap()) {
		error = commit_entry(res, r, tmp, final, key, fp, dataset, NULL, bytes);
		error = error < 0 ? error : 1;
		goto out;
	}
	if (file_name != NULL) {
		/* one file: the entry is a directory holding it under its name */
		struct fingerprint_tree one = {0};
		char *dir = xstrndup(dataset, (size_t)(file_name - 1 - dataset));
		int dfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0 || lstat(dataset, &fst) != 0) {
			ferry_error_set("cannot open %s: %s", dir, strerror(errno));
			error = FERRY_ERROR;
		} else {
			fingerprint_tree_add(&one, xstrdup(file_name), 'f', &fst);
			error = tree_copy(&one, dfd, dir, tmp);
		}
		if (dfd >= 0)
			close(dfd);
		fingerprint_tree_dispose(&one);
		free(dir);
	} else {
		error = tree_copy(&t, rootfd, dataset, tmp);
	}
	if (error < 0) {
		rm_tree(tmp);
		if (error == FERRY_EINVALID) { /* a link out of the dataset: no retry will fix it */
			res->outcome = OUTCOME_FAILED;
			res->final = 1;
			res->reason = xstrdup(ferry_error_last());
			error = 1;
		}
		goto out;
	}
	if ((error = commit_entry(res, r, tmp, final, key, fp, dataset, NULL, bytes)) < 0)
		goto out;
	if (res->outputs)
		steps_log(r, "copied %lld files in %lld ms", (long long)(file_name ? 1 : t.files),
			 (long long)(clock_mono_ms() - t0));
	error = 1;
out:
	if (rootfd >= 0)
		close(rootfd);
	fingerprint_tree_dispose(&t);
	free(dataset), free(root), free(final), free(tmp), free(session), free(path), free(state);
	free(entries);
	return error;
}

static int take_back_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)flag, (void)ftw;
	if ((st->st_uid != geteuid() || st->st_gid != getegid()) && lchown(path, geteuid(), getegid()) < 0)
		return -1;
	/* no set-id bits (a root-owned set-uid file!), nothing writable by others */
	if (!S_ISLNK(st->st_mode) && (st->st_mode & 07777) != (st->st_mode & 0755) &&
	    chmod(path, st->st_mode & 0755) < 0)
		return -1;
	return 0;
}

/* A preprocessed entry's files, written by the job user, made the daemon's (never through a link). */
static int take_back(const char *tmp)
{
	if (exec_user_get() == NULL)
		return FERRY_OK;
	if (nftw(tmp, take_back_one, 16, FTW_PHYS) != 0) {
		ferry_error_set("cannot take %s back from the job user: %s", tmp, strerror(errno));
		return FERRY_ERROR;
	}
	return FERRY_OK;
}

int datacache_job_done(const struct step_run *r, struct step_result *res)
{
	char *path = xasprintf("%s/cache.json", r->dir);
	json_t *st = json_load_file(path, 0, NULL);
	const char *key = json_string_value(json_object_get(st, "key"));
	const char *fp = json_string_value(json_object_get(st, "fingerprint"));
	const char *tmp = json_string_value(json_object_get(st, "tmp"));
	const char *final = json_string_value(json_object_get(st, "final"));
	const char *dataset = json_string_value(json_object_get(st, "dataset"));
	char *parent = NULL;
	int64_t bytes = 0;
	int error;

	step_result_init(res);
	if (key == NULL || fp == NULL || tmp == NULL || final == NULL || dataset == NULL) {
		ferry_error_set("%s is missing or damaged: retry the step", path);
		error = FERRY_ERROR;
		goto out;
	}
	if ((error = tree_bytes(&bytes, tmp)) < 0) {
		ferry_error_set("the step's command left no entry in FERRY_CACHE_DIR (%s): %s", tmp,
				ferry_error_last());
		goto out;
	}
	parent = xstrndup(final, (size_t)(strrchr(final, '/') - final));
	if ((error = mkdir_p(parent, 0755)) < 0)
		goto out;
	/* an entry every later run reads: the daemon's from now on, never changed by a job again */
	if ((error = take_back(tmp)) < 0)
		goto out;
	error = commit_entry(res, r, tmp, final, key, fp, dataset, json_object_get(st, "command"), bytes);
out:
	json_decref(st);
	free(path);
	free(parent);
	return error;
}

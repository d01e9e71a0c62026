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
 * The fingerprint and the copy run inside the dispatcher loop: they take
 * as long as reading (and on a miss copying) the dataset takes, bounded
 * by the cap for copies. Symbolic links are never followed: a link inside
 * the dataset is recreated when its target stays inside it and fails the
 * step when it points out.
 */
#include "steps/datacache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/metrics.h" /* the daemon's counters */
#include "store/store.h"
#include "lib/util.h"

#define TREE_MAX_DEPTH 64
#define TREE_MAX_ENTRIES 5000000
#define IO_CHUNK (1 << 20)

/* ---- the tree of a dataset ---- */

struct tree_ent {
	char *rel;  /* path relative to the root */
	char type;  /* 'd', 'f' or 'l' */
	mode_t mode;
	int64_t size;
	char *link; /* a link's target text */
	/* what the stat memo compares (see fingerprint_memo below) */
	uint64_t dev, ino;
	int64_t mtime_ns, ctime_ns;
};

struct tree {
	struct tree_ent *v;
	size_t n, cap;
	int64_t bytes; /* of the regular files */
	int64_t files;
};

static void tree_dispose(struct tree *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->v[i].rel);
		free(t->v[i].link);
	}
	free(t->v);
	memset(t, 0, sizeof(*t));
}

static struct tree_ent *tree_add(struct tree *t, char *rel, char type, const struct stat *st)
{
	struct tree_ent *e;

	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 64;
		t->v = xrealloc(t->v, t->cap * sizeof(*t->v));
	}
	e = &t->v[t->n++];
	memset(e, 0, sizeof(*e));
	e->rel = rel;
	e->type = type;
	e->mode = st->st_mode & 07777;
	e->dev = (uint64_t)st->st_dev;
	e->ino = (uint64_t)st->st_ino;
	e->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
	e->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
	if (type == 'f') {
		e->size = (int64_t)st->st_size;
		t->bytes += e->size;
		t->files++;
	}
	return e;
}

/* Lists the entries below the directory dfd (taken over and closed), without following links. */
static int tree_walk(struct tree *t, int dfd, const char *prefix, const char *root, int depth)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;
	int error = FERRY_OK;

	if (d == NULL) {
		close(dfd);
		ferry_error_set("cannot read %s/%s: %s", root, prefix, strerror(errno));
		return FERRY_ERROR;
	}
	if (depth > TREE_MAX_DEPTH) {
		ferry_error_set("%s: directories nested deeper than %d levels", root, TREE_MAX_DEPTH);
		error = FERRY_ERROR;
		goto out;
	}
	errno = 0;
	while ((de = readdir(d)) != NULL) {
		const char *name = de->d_name;
		struct stat st;
		char *rel;

		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			continue;
		if (t->n >= TREE_MAX_ENTRIES) {
			ferry_error_set("%s holds more than %d entries", root, TREE_MAX_ENTRIES);
			error = FERRY_ERROR;
			goto out;
		}
		if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue; /* removed while we read */
		rel = prefix[0] ? xasprintf("%s/%s", prefix, name) : xstrdup(name);
		if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			tree_add(t, rel, 'd', &st);
			if (sub < 0) {
				ferry_error_set("cannot open %s/%s: %s", root, rel, strerror(errno));
				error = FERRY_ERROR;
				goto out;
			}
			if ((error = tree_walk(t, sub, rel, root, depth + 1)) < 0)
				goto out;
		} else if (S_ISREG(st.st_mode)) {
			tree_add(t, rel, 'f', &st);
		} else if (S_ISLNK(st.st_mode)) {
			char buf[PATH_MAX];
			ssize_t n = readlinkat(dirfd(d), name, buf, sizeof(buf) - 1);
			if (n < 0) {
				free(rel);
				continue;
			}
			buf[n] = '\0';
			tree_add(t, rel, 'l', &st)->link = xstrdup(buf);
		} else {
			free(rel); /* fifos, sockets, devices: not data */
		}
		errno = 0;
	}
	if (errno != 0) {
		ferry_error_set("cannot read %s/%s: %s", root, prefix, strerror(errno));
		error = FERRY_ERROR;
	}
out:
	closedir(d);
	return error;
}

static int ent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct tree_ent *)a)->rel, ((const struct tree_ent *)b)->rel);
}

/* The sorted tree below dir (a directory, followed if it is itself a link). */
static int tree_load(struct tree *t, int *rootfd, const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), error;

	memset(t, 0, sizeof(*t));
	*rootfd = -1;
	if (fd < 0) {
		ferry_error_set("cannot open %s: %s", dir, strerror(errno));
		return errno == ENOENT ? FERRY_ENOTFOUND : FERRY_ERROR;
	}
	*rootfd = dup(fd);
	if (*rootfd < 0) {
		close(fd);
		ferry_error_set("dup: %s", strerror(errno));
		return FERRY_ERROR;
	}
	if ((error = tree_walk(t, fd, "", dir, 0)) < 0) {
		tree_dispose(t);
		close(*rootfd);
		*rootfd = -1;
		return error;
	}
	qsort(t->v, t->n, sizeof(*t->v), ent_cmp);
	return FERRY_OK;
}

/* ---- fingerprints ---- */

/* Feeds the bytes of fd (closed here) into ctx; FERRY_ERROR when unreadable. */
static int digest_fd(EVP_MD_CTX *ctx, int fd, const char *what)
{
	unsigned char *buf = xmalloc(IO_CHUNK);
	ssize_t n;
	int error = FERRY_OK;

	while ((n = read(fd, buf, IO_CHUNK)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			ferry_error_set("cannot read %s: %s", what, strerror(errno));
			error = FERRY_ERROR;
			break;
		}
		EVP_DigestUpdate(ctx, buf, (size_t)n);
	}
	free(buf);
	close(fd);
	return error;
}

static int tree_fingerprint(char out[65], const struct tree *t, int rootfd, const char *root)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int error = FERRY_OK;

	if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
		abort();
	EVP_DigestUpdate(ctx, "ferry-tree-v1", 14);
	for (size_t i = 0; i < t->n; i++) {
		const struct tree_ent *e = &t->v[i];
		EVP_DigestUpdate(ctx, &e->type, 1);
		EVP_DigestUpdate(ctx, e->rel, strlen(e->rel) + 1);
		if (e->type == 'l') {
			EVP_DigestUpdate(ctx, e->link, strlen(e->link) + 1);
		} else if (e->type == 'f') {
			char size[24];
			int n = snprintf(size, sizeof(size), "%lld", (long long)e->size);
			int fd = openat(rootfd, e->rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
			char *what = xasprintf("%s/%s", root, e->rel);
			EVP_DigestUpdate(ctx, size, (size_t)n + 1);
			if (fd < 0) {
				ferry_error_set("cannot open %s: %s", what, strerror(errno));
				error = FERRY_ERROR;
			} else {
				error = digest_fd(ctx, fd, what);
			}
			free(what);
			if (error < 0)
				goto out;
		}
	}
	EVP_DigestFinal_ex(ctx, md, &mdlen);
	hex_encode(out, md, mdlen);
out:
	EVP_MD_CTX_free(ctx);
	return error;
}

static int file_fingerprint(char out[65], const char *path)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC), error;

	if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
		abort();
	if (fd < 0) {
		ferry_error_set("cannot open %s: %s", path, strerror(errno));
		EVP_MD_CTX_free(ctx);
		return errno == ENOENT ? FERRY_ENOTFOUND : FERRY_ERROR;
	}
	if ((error = digest_fd(ctx, fd, path)) == FERRY_OK) {
		EVP_DigestFinal_ex(ctx, md, &mdlen);
		hex_encode(out, md, mdlen);
	}
	EVP_MD_CTX_free(ctx);
	return error;
}

/*
 * The stat memo. Reading every byte of a large dataset on every claim of a
 * cache step (and of every step below one whose result is cached) would
 * make a hit cost as much as a copy, so a fingerprint is remembered with a
 * signature of the metadata it was computed from: each entry's path, type,
 * size, device, inode, mtime and ctime (and the link's target). A write to
 * a file changes its ctime, which nobody can set back, so an unchanged
 * signature means unchanged bytes — unless a write landed within the
 * timestamp granularity of the read (the kernel stamps with a coarse clock).
 * Fingerprints of trees with an entry changed less than FP_RACY_NS before
 * the walk began are therefore not remembered ("racily clean", as git calls
 * it). The memo lives in this process, FP_MEMO_N paths, least recently
 * used replaced first.
 */
#define FP_MEMO_N 64
#define FP_RACY_NS 2000000000LL

static struct {
	char *path;
	char sig[65], fp[65];
	uint64_t used;
} fp_memo[FP_MEMO_N];
static uint64_t fp_memo_clock;
static pthread_mutex_t fp_memo_mu = PTHREAD_MUTEX_INITIALIZER;

static void sig_add_ent(EVP_MD_CTX *ctx, char type, const char *rel, const char *link, int64_t size,
			uint64_t dev, uint64_t ino, int64_t mtime_ns, int64_t ctime_ns)
{
	char num[128];
	int n = snprintf(num, sizeof(num), "%lld %llu %llu %lld %lld", (long long)size, (unsigned long long)dev,
			 (unsigned long long)ino, (long long)mtime_ns, (long long)ctime_ns);

	EVP_DigestUpdate(ctx, &type, 1);
	EVP_DigestUpdate(ctx, rel, strlen(rel) + 1);
	EVP_DigestUpdate(ctx, link ? link : "", link ? strlen(link) + 1 : 1);
	EVP_DigestUpdate(ctx, num, (size_t)n + 1);
}

/* The metadata signature of a tree (or, t NULL, of the file st); 0 when racy. */
static int fp_signature(char out[65], const struct tree *t, const struct stat *st, int64_t since_ns)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int64_t m = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
	int64_t c = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
	int clean = t != NULL || (m < since_ns - FP_RACY_NS && c < since_ns - FP_RACY_NS);

	if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
		abort();
	sig_add_ent(ctx, t ? 'D' : 'F', "", NULL, (int64_t)st->st_size, (uint64_t)st->st_dev,
		    (uint64_t)st->st_ino, t ? 0 : m, t ? 0 : c);
	for (size_t i = 0; t && i < t->n; i++) {
		const struct tree_ent *e = &t->v[i];
		sig_add_ent(ctx, e->type, e->rel, e->link, e->size, e->dev, e->ino, e->mtime_ns, e->ctime_ns);
		if (e->mtime_ns >= since_ns - FP_RACY_NS || e->ctime_ns >= since_ns - FP_RACY_NS)
			clean = 0;
	}
	EVP_DigestFinal_ex(ctx, md, &mdlen);
	EVP_MD_CTX_free(ctx);
	hex_encode(out, md, mdlen);
	return clean;
}

/* 1 with out filled when path's fingerprint is known for this signature. */
static int fp_memo_get(char out[65], const char *path, const char *sig)
{
	int found = 0;

	pthread_mutex_lock(&fp_memo_mu);
	for (int i = 0; i < FP_MEMO_N && !found; i++)
		if (fp_memo[i].path && strcmp(fp_memo[i].path, path) == 0 && strcmp(fp_memo[i].sig, sig) == 0) {
			memcpy(out, fp_memo[i].fp, 65);
			fp_memo[i].used = ++fp_memo_clock;
			found = 1;
		}
	pthread_mutex_unlock(&fp_memo_mu);
	if (found)
		metrics_add(M_FP_MEMO_HITS, 1);
	return found;
}

static void fp_memo_put(const char *path, const char *sig, const char *fp)
{
	int slot = 0;

	pthread_mutex_lock(&fp_memo_mu);
	for (int i = 0; i < FP_MEMO_N; i++) {
		if (fp_memo[i].path && strcmp(fp_memo[i].path, path) == 0) {
			slot = i; /* the path's old signature is of no more use */
			break;
		}
		if (fp_memo[i].used < fp_memo[slot].used)
			slot = i;
	}
	free(fp_memo[slot].path);
	fp_memo[slot].path = xstrdup(path);
	memcpy(fp_memo[slot].sig, sig, 65);
	memcpy(fp_memo[slot].fp, fp, 65);
	fp_memo[slot].used = ++fp_memo_clock;
	pthread_mutex_unlock(&fp_memo_mu);
}

/* The wall clock in nanoseconds: taken before anything is read (see FP_RACY_NS). */
static int64_t wall_ns(void)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/*
 * The fingerprint of path through the stat memo: st is its stat and, for a
 * directory, t its loaded tree below rootfd; since is wall_ns() from before
 * either was taken.
 */
static int fingerprint_of(char out[65], const char *path, const struct stat *st, const struct tree *t,
			  int rootfd, int64_t since)
{
	char sig[65];
	int dir = S_ISDIR(st->st_mode), clean = fp_signature(sig, dir ? t : NULL, st, since), error;

	if (fp_memo_get(out, path, sig))
		return FERRY_OK;
	metrics_add(M_FP_READS, 1);
	error = dir ? tree_fingerprint(out, t, rootfd, path) : file_fingerprint(out, path);
	if (error == FERRY_OK && clean)
		fp_memo_put(path, sig, out);
	return error;
}

int datacache_fingerprint(char out[65], const char *path)
{
	struct tree t = {0};
	struct stat st;
	int64_t since = wall_ns();
	int rootfd = -1, error;

	if (stat(path, &st) != 0) {
		ferry_error_set("cannot read %s: %s", path, strerror(errno));
		return errno == ENOENT ? FERRY_ENOTFOUND : FERRY_ERROR;
	}
	if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
		ferry_error_set("%s is neither a file nor a directory", path);
		return FERRY_ERROR;
	}
	if (S_ISDIR(st.st_mode) && (error = tree_load(&t, &rootfd, path)) < 0)
		return error;
	error = fingerprint_of(out, path, &st, &t, rootfd, since);
	if (rootfd >= 0)
		close(rootfd);
	tree_dispose(&t);
	return error;
}

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
static int tree_copy(const struct tree *t, int rootfd, const char *src, const char *dst)
{
	int error = FERRY_OK;

	if (mkdir_p(dst, 0755) < 0)
		return FERRY_ERROR;
	for (size_t i = 0; i < t->n && error == FERRY_OK; i++) {
		const struct tree_ent *e = &t->v[i];
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
	if (real == NULL) {
		ferry_error_set("dataset %s does not exist or cannot be read (%s): create it before the "
				"run, or fix the step's \"dataset\"", joined, strerror(errno));
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
	struct tree t;
	int fd = -1, error;

	*bytes = 0;
	if ((error = tree_load(&t, &fd, dir)) < 0)
		return error;
	*bytes = t.bytes;
	close(fd);
	tree_dispose(&t);
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
	struct tree t = {0};
	struct stat st, fst;
	int64_t bytes = 0, t0 = clock_mono_ms(), since = wall_ns();
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
	if (S_ISDIR(st.st_mode) && (error = tree_load(&t, &rootfd, dataset)) < 0)
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
		if (mkdir_p(tmp, 0755) < 0) {
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
		struct tree one = {0};
		char *dir = xstrndup(dataset, (size_t)(file_name - 1 - dataset));
		int dfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0 || lstat(dataset, &fst) != 0) {
			ferry_error_set("cannot open %s: %s", dir, strerror(errno));
			error = FERRY_ERROR;
		} else {
			tree_add(&one, xstrdup(file_name), 'f', &fst);
			error = tree_copy(&one, dfd, dir, tmp);
		}
		if (dfd >= 0)
			close(dfd);
		tree_dispose(&one);
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
	tree_dispose(&t);
	free(dataset), free(root), free(final), free(tmp), free(session), free(path), free(state);
	free(entries);
	return error;
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
	error = commit_entry(res, r, tmp, final, key, fp, dataset, json_object_get(st, "command"), bytes);
out:
	json_decref(st);
	free(path);
	free(parent);
	return error;
}

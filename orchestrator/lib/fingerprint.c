/*
 * fingerprint — the content fingerprint of a file or directory tree
 * (sha256, lowercase hex), with a stat memo so an unchanged path is not read
 * again. Moved down from steps/datacache.c so that the `cache` step kind
 * (steps/), the registry and labels (steps/) and data triggers (schedule/)
 * share it: it includes nothing above lib/.
 *
 * A regular file's fingerprint is the sha256 of its bytes. A directory's is
 * of its tree — every entry's path relative to it (sorted bytewise, so
 * readdir order does not matter), its type, and a file's size and bytes, a
 * symbolic link's target text (links are never followed), a directory's
 * name; other file types are ignored.
 */
#include "lib/fingerprint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/metrics.h" /* the daemon's counters */
#include "lib/util.h"

#define TREE_MAX_DEPTH 64
#define TREE_MAX_ENTRIES 5000000
#define IO_CHUNK (1 << 20)

/* ---- the tree of a dataset ---- */

void fingerprint_tree_dispose(struct fingerprint_tree *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->v[i].rel);
		free(t->v[i].link);
	}
	free(t->v);
	memset(t, 0, sizeof(*t));
}

struct fingerprint_ent *fingerprint_tree_add(struct fingerprint_tree *t, char *rel, char type,
					     const struct stat *st)
{
	struct fingerprint_ent *e;

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
static int tree_walk(struct fingerprint_tree *t, int dfd, const char *prefix, const char *root, int depth)
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
			fingerprint_tree_add(t, rel, 'd', &st);
			if (sub < 0) {
				ferry_error_set("cannot open %s/%s: %s", root, rel, strerror(errno));
				error = FERRY_ERROR;
				goto out;
			}
			if ((error = tree_walk(t, sub, rel, root, depth + 1)) < 0)
				goto out;
		} else if (S_ISREG(st.st_mode)) {
			fingerprint_tree_add(t, rel, 'f', &st);
		} else if (S_ISLNK(st.st_mode)) {
			char buf[PATH_MAX];
			ssize_t n = readlinkat(dirfd(d), name, buf, sizeof(buf) - 1);
			if (n < 0) {
				free(rel);
				continue;
			}
			buf[n] = '\0';
			fingerprint_tree_add(t, rel, 'l', &st)->link = xstrdup(buf);
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
	return strcmp(((const struct fingerprint_ent *)a)->rel, ((const struct fingerprint_ent *)b)->rel);
}

int fingerprint_tree_load(struct fingerprint_tree *t, int *rootfd, const char *dir)
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
		fingerprint_tree_dispose(t);
		close(*rootfd);
		*rootfd = -1;
		return error;
	}
	if (t->n > 1) /* an empty tree leaves t->v NULL, which qsort may not take */
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

static int tree_fingerprint(char out[65], const struct fingerprint_tree *t, int rootfd, const char *root)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int error = FERRY_OK;

	if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
		abort();
	EVP_DigestUpdate(ctx, "ferry-tree-v1", 14);
	for (size_t i = 0; i < t->n; i++) {
		const struct fingerprint_ent *e = &t->v[i];
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
static int fp_signature(char out[65], const struct fingerprint_tree *t, const struct stat *st, int64_t since_ns)
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
		const struct fingerprint_ent *e = &t->v[i];
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

int64_t fingerprint_clock_ns(void)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

int fingerprint_of(char out[65], const char *path, const struct stat *st, const struct fingerprint_tree *t,
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

static int path_here(char out[65], const char *path)
{
	struct fingerprint_tree t = {0};
	struct stat st;
	int64_t since = fingerprint_clock_ns();
	int rootfd = -1, error;

	if (stat(path, &st) != 0) {
		ferry_error_set("cannot read %s: %s", path, strerror(errno));
		return errno == ENOENT ? FERRY_ENOTFOUND : FERRY_ERROR;
	}
	if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
		ferry_error_set("%s is neither a file nor a directory", path);
		return FERRY_ERROR;
	}
	if (S_ISDIR(st.st_mode) && (error = fingerprint_tree_load(&t, &rootfd, path)) < 0)
		return error;
	error = fingerprint_of(out, path, &st, &t, rootfd, since);
	if (rootfd >= 0)
		close(rootfd);
	fingerprint_tree_dispose(&t);
	return error;
}

struct path_args {
	char *out;
	const char *path;
};

static int path_call(void *p)
{
	struct path_args *a = p;
	return path_here(a->out, a->path);
}

/* niced: reading and hashing a large dataset yields to dispatch and jobs (run_niced) */
int fingerprint_path(char out[65], const char *path)
{
	struct path_args a = {out, path};
	return run_niced(path_call, &a);
}

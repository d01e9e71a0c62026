/*
 * gitsrc_checkout — a commit's tree written to a directory (gitsrc.h's
 * gitsrc_checkout), then made a work tree of that commit. Split from
 * gitsrc.c (mirrors, refs, reading a tree), whose helpers it shares
 * through gitsrc_priv.h. The bounds are gitsrc.c's: one blob in memory at a
 * time, each at most GITSRC_CHECKOUT_FILE_MAX, directories 256 deep; links
 * that would leave the checkout are refused; the directory appears whole
 * (written beside it, renamed) or not at all.
 */
#include "schedule/gitsrc.h"
#include "schedule/gitsrc_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/util.h"

static int name_ok(const char *name)
{
	return name[0] && strcmp(name, ".") != 0 && strcmp(name, "..") != 0 && !strchr(name, '/') &&
	       strcasecmp(name, ".git") != 0;
}

/* Writes all of buf to a new file name in dfd with mode; never through a link (O_EXCL | O_NOFOLLOW). */
static int file_write_at(int dfd, const char *name, const char *buf, size_t n, mode_t mode, const char *rel)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0 || fd_write_all(fd, buf, n) < 0 || fchmod(fd, mode) < 0) {
		ferry_error_set("cannot write %s: %s", rel, strerror(errno));
		if (fd >= 0)
			close(fd);
		return FERRY_ERROR;
	}
	if (close(fd) < 0) {
		ferry_error_set("cannot write %s: %s", rel, strerror(errno));
		return FERRY_ERROR;
	}
	return FERRY_OK;
}

/* Writes tree's entries into the directory dfd; rel is the tree's path in the commit ("" at the top). */
static int tree_write(git_repository *r, const git_tree *tree, int dfd, const char *rel, int depth)
{
	size_t count = git_tree_entrycount(tree);
	int error = FERRY_OK;

	if (depth > TREE_DEPTH_MAX) {
		ferry_error_set("%s: directories nest more than %d deep", rel, TREE_DEPTH_MAX);
		return FERRY_EINVALID;
	}
	for (size_t i = 0; i < count && error == 0; i++) {
		const git_tree_entry *e = git_tree_entry_byindex(tree, i);
		const char *name = git_tree_entry_name(e);
		git_filemode_t mode = git_tree_entry_filemode(e);
		char *path = rel[0] ? xasprintf("%s/%s", rel, name) : xstrdup(name);
		char *buf = NULL, *norm = NULL;
		git_tree *sub = NULL;
		size_t n = 0;
		int fd, gerr;

		if (!name_ok(name)) {
			ferry_error_set("the commit has an entry %s that cannot be written safely", path);
			error = FERRY_EINVALID;
			goto next;
		}
		switch (mode) {
		case GIT_FILEMODE_TREE:
			if (mkdirat(dfd, name, 0755) < 0) {
				ferry_error_set("cannot create %s: %s", path, strerror(errno));
				error = FERRY_ERROR;
				goto next;
			}
			fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0) {
				ferry_error_set("cannot open %s: %s", path, strerror(errno));
				error = FERRY_ERROR;
				goto next;
			}
			gerr = git_tree_lookup(&sub, r, git_tree_entry_id(e));
			error = gerr < 0 ? gitsrc_fail(gerr, path) : tree_write(r, sub, fd, path, depth + 1);
			close(fd);
			break;
		case GIT_FILEMODE_BLOB:
		case GIT_FILEMODE_BLOB_EXECUTABLE:
			error = gitsrc_blob_read(&buf, &n, r, git_tree_entry_id(e), GITSRC_CHECKOUT_FILE_MAX, path);
			if (error == 0)
				error = file_write_at(dfd, name, buf, n,
						      mode == GIT_FILEMODE_BLOB_EXECUTABLE ? 0755 : 0644, path);
			break;
		case GIT_FILEMODE_LINK: {
			char *dir = gitsrc_path_dir(path);

			error = gitsrc_blob_read(&buf, &n, r, git_tree_entry_id(e), LINK_MAX_BYTES, path);
			if (error == 0 && (buf[0] == '\0' || buf[0] == '/' || strlen(buf) != n ||
					   gitsrc_path_norm(&norm, dir, buf, DOTDOT_LEADING) < 0)) {
				ferry_error_set("the symlink %s points outside the checkout; Ferry writes "
						"only links that stay inside it", path);
				error = FERRY_EINVALID;
			}
			free(dir);
			if (error == 0 && symlinkat(buf, dfd, name) < 0) {
				ferry_error_set("cannot create the symlink %s: %s", path, strerror(errno));
				error = FERRY_ERROR;
			}
			break;
		}
		case GIT_FILEMODE_COMMIT:
			break; /* a submodule: not part of this repository's content */
		default:
			ferry_error_set("%s has an unknown file mode %o", path, (unsigned)mode);
			error = FERRY_EINVALID;
			break;
		}
next:
		git_tree_free(sub);
		free(buf);
		free(norm);
		free(path);
	}
	return error;
}

static int chmod_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)ftw;
	if (type == FTW_D || type == FTW_DP)
		return chmod(path, 0755) < 0 ? -1 : 0;
	if (type == FTW_F)
		return chmod(path, (st->st_mode & 0111) ? 0755 : 0644) < 0 ? -1 : 0;
	return 0;
}

/*
 * Makes dir (an exported checkout of commit c) a work tree of it, as `git
 * clone --depth 1` would: a .git of its own holding the commit and its tree
 * (one pack from a pack builder; .git/shallow names the commit, whose
 * parents are not there), HEAD detached at it, an index of its tree and
 * `origin` the repository. So `git rev-parse HEAD`, `git status` and `git
 * log -1` in a job name the commit of its run. Self-contained and readable
 * by the job user (nothing points back into Ferry's mirrors); git's own
 * ownership check is the job's environment's (runs.c: safe.directory).
 */
static int worktree_git(git_repository *src, const git_commit *c, const char *dir, const char *url)
{
	git_repository *w = NULL;
	git_packbuilder *pb = NULL;
	git_index *idx = NULL;
	git_tree *tree = NULL;
	git_config *cfg = NULL;
	git_odb *odb = NULL;
	const git_oid *id = git_commit_id(c);
	char hex[GIT_OID_HEXSZ + 1], *path = NULL;
	int gerr, error = FERRY_OK;

	if ((gerr = git_repository_init(&w, dir, 0)) < 0) {
		error = gitsrc_fail(gerr, "making the checkout's .git");
		goto out;
	}
	path = xasprintf("%s/.git/objects/pack", dir);
	if ((gerr = git_packbuilder_new(&pb, src)) < 0 || (gerr = git_packbuilder_insert_commit(pb, id)) < 0 ||
	    (gerr = git_packbuilder_write(pb, path, 0444, NULL, NULL)) < 0) {
		error = gitsrc_fail(gerr, "packing the commit into the checkout's .git");
		goto out;
	}
	if ((gerr = git_repository_odb(&odb, w)) < 0 || (gerr = git_odb_refresh(odb)) < 0 ||
	    (gerr = git_repository_set_head_detached(w, id)) < 0 ||
	    (gerr = git_tree_lookup(&tree, w, git_commit_tree_id(c))) < 0 ||
	    (gerr = git_repository_index(&idx, w)) < 0 || (gerr = git_index_read_tree(idx, tree)) < 0 ||
	    (gerr = git_index_write(idx)) < 0) {
		error = gitsrc_fail(gerr, "writing the checkout's HEAD and index");
		goto out;
	}
	/* origin by two config entries, not git_remote_create: libgit2 1.5's regexp search (its
	 * multivar write) leaks its pcre2 match data on every no-match (LeakSanitizer saw it) */
	if (url && ((gerr = git_repository_config(&cfg, w)) < 0 ||
		    (gerr = git_config_set_string(cfg, "remote.origin.url", url)) < 0 ||
		    (gerr = git_config_set_string(cfg, "remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*")) < 0)) {
		error = gitsrc_fail(gerr, "naming the checkout's origin");
		goto out;
	}
	free(path);
	path = xasprintf("%s/.git/shallow", dir);
	git_oid_tostr(hex, sizeof(hex), id);
	{
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		hex[GIT_OID_HEXSZ] = '\n';
		if (fd < 0 || fd_write_all(fd, hex, sizeof(hex)) < 0) {
			ferry_error_set("cannot write %s: %s", path, strerror(errno));
			error = FERRY_ERROR;
		}
		if (fd >= 0)
			close(fd);
		if (error < 0)
			goto out;
	}
	free(path);
	path = xasprintf("%s/.git", dir);
	if (nftw(path, chmod_entry, 16, FTW_PHYS) < 0) {
		ferry_error_set("cannot open %s to the job's user: %s", path, strerror(errno));
		error = FERRY_ERROR;
	}
out:
	git_config_free(cfg);
	git_index_free(idx);
	git_tree_free(tree);
	git_odb_free(odb);
	git_packbuilder_free(pb);
	git_repository_free(w);
	free(path);
	return error;
}

int gitsrc_checkout(const char *repo, const char *cache_dir, const char *commit, const char *dir)
{
	git_repository *r = NULL;
	git_commit *c = NULL;
	git_tree *tree = NULL;
	char *tmp = NULL, *parent = NULL;
	struct stat st;
	int error, dfd = -1, made = 0;

	if (!dir || !dir[0]) {
		ferry_error_set("no checkout directory given");
		return FERRY_EINVALID;
	}
	if (lstat(dir, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return FERRY_OK; /* the same commit, written before */
		ferry_error_set("%s exists and is not a directory", dir);
		return FERRY_EINVALID;
	}
	if ((error = gitsrc_commit_open(&r, &c, &tree, repo, cache_dir, commit)) < 0)
		goto out;
	parent = gitsrc_path_dir(dir);
	if (parent[0] && mkdir_p(parent, 0755) < 0) {
		error = FERRY_ERROR;
		goto out;
	}
	tmp = xasprintf("%s.tmp-XXXXXX", dir);
	if (!mkdtemp(tmp)) {
		ferry_error_set("cannot create %s: %s", tmp, strerror(errno));
		error = FERRY_ERROR;
		goto out;
	}
	made = 1;
	dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0 || fchmod(dfd, 0755) < 0) {
		ferry_error_set("cannot open %s: %s", tmp, strerror(errno));
		error = FERRY_ERROR;
		goto out;
	}
	error = tree_write(r, tree, dfd, "", 0);
	if (error < 0 || (error = worktree_git(r, c, tmp, repo)) < 0)
		goto out;
	if (rename(tmp, dir) < 0) {
		/* another caller renamed the same commit's tree first: theirs is as good */
		if ((errno == ENOTEMPTY || errno == EEXIST) && lstat(dir, &st) == 0 && S_ISDIR(st.st_mode))
			goto out;
		ferry_error_set("cannot move the checkout to %s: %s", dir, strerror(errno));
		error = FERRY_ERROR;
		goto out;
	}
	made = 0;
out:
	if (dfd >= 0)
		close(dfd);
	if (made)
		gitsrc_tree_remove(tmp);
	free(tmp);
	free(parent);
	git_tree_free(tree);
	git_commit_free(c);
	git_repository_free(r);
	return error;
}


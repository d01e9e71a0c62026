/*
 * gitsrc_priv — what gitsrc.c (mirrors, refs, reading a tree) shares with
 * gitsrc_checkout.c (writing a commit's tree as a work tree). Not for
 * anything outside schedule/gitsrc*.c.
 */
#ifndef FERRY_GITSRC_PRIV_H
#define FERRY_GITSRC_PRIV_H

#include <stddef.h>
#include <git2.h>

#define LINK_MAX_BYTES 4096 /* the longest symlink target read from a tree */
#define TREE_DEPTH_MAX 256  /* the deepest a checkout's directories nest */

/* A libgit2 failure as the error (what it was doing, libgit2's message); a FERRY_E* code. */
int gitsrc_fail(int gerr, const char *what);
/* Opens repo: a local path as it is, a URL through its mirror under cache_dir (fetched when fetch). */
int gitsrc_repo_open(git_repository **out, const char *repo, const char *cache_dir, int fetch);
/* The commit named by hex (40 hex digits) in r; FERRY_ENOTFOUND naming repo when absent. */
int gitsrc_commit_lookup(git_commit **out, git_repository *r, const char *hex, const char *repo);
/*
 * repo opened (not fetched), its commit hex looked up and, when tree is not
 * NULL, that commit's tree: each set when reached, the caller's to free
 * whatever the result.
 */
int gitsrc_commit_open(git_repository **r, git_commit **c, git_tree **tree, const char *repo,
		       const char *cache_dir, const char *hex);

enum {
	DOTDOT_NO,      /* a user's path: ".." is refused */
	DOTDOT_LEXICAL, /* a link followed through tree objects: ".." pops a name */
	DOTDOT_LEADING, /* a link written to disk: ".." only before the first name */
};

/* base joined with rel, normalised as dotdot says; *out the caller's. */
int gitsrc_path_norm(char **out, const char *base, const char *rel, int dotdot);
/* The directory part of path ("" for none); the caller's. */
char *gitsrc_path_dir(const char *path);
/* Blob id's content (at most max bytes, else an error naming rel) into *out, *len. */
int gitsrc_blob_read(char **out, size_t *len, git_repository *r, const git_oid *id, size_t max, const char *rel);
/* Removes dir and everything below it, links not followed. */
void gitsrc_tree_remove(const char *dir);

#endif

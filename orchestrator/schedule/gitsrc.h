/*
 * gitsrc — reading git repositories with libgit2, for git triggers (a run
 * per new commit on a branch), `POST /hooks/git` (a push webhook signed with
 * HMAC-SHA256) and `ferry submit --repo R --ref REF --path FILE` (a workflow
 * run straight from a repository at a pinned commit).
 *
 * A repository is a local path (a bare or non-bare repository, read in
 * place and never written) or a URL (file://, https://, ssh://, git@host:…).
 * For a URL a bare mirror is kept under cache_dir/<sha256 of the url>:
 * gitsrc_resolve fetches it (bounded by the fetch timeout); the other calls
 * use it as it is (fetching it once when it does not exist yet).
 *
 * Every call opens its own git_repository, so calls are safe from any
 * number of threads at once; the updates of one mirror are serialized by an
 * flock on cache_dir/<sha256>.lock, across threads and processes alike.
 * The calls are slow (disk, network): call them from worker-pool threads,
 * never from the engine loop.
 *
 * Errors follow util.h: 0 or a negative FERRY_E* code with the message set.
 */
#ifndef FERRY_GITSRC_H
#define FERRY_GITSRC_H

#include <stddef.h>

#include <jansson.h>

/* The largest file gitsrc_read returns (a workflow, a script). */
#define GITSRC_READ_MAX (16u << 20)
/* The largest file gitsrc_checkout writes: one blob is in memory at a time. */
#define GITSRC_CHECKOUT_FILE_MAX (256u << 20)
/* Default bound of one mirror fetch (gitsrc_set_fetch_timeout). */
#define GITSRC_FETCH_TIMEOUT_MS 60000

/* Once per process (ferryd main, tests); idempotent and thread-safe. */
int gitsrc_init(void);

/*
 * Bounds each mirror fetch to ms milliseconds (default GITSRC_FETCH_TIMEOUT_MS):
 * the transfer is cancelled from libgit2's progress callbacks once the time
 * is up. libgit2 1.5 has no socket timeout, so a peer that accepts the
 * connection and then sends nothing at all is bounded only by TCP.
 */
void gitsrc_set_fetch_timeout(int ms);

/*
 * The path of the mirror of url under cache_dir (whether or not it exists
 * yet); the caller frees it.
 */
char *gitsrc_mirror_path(const char *url, const char *cache_dir);

/* 1 when repo is a URL (mirrored under cache_dir), 0 when it is a local path. */
int gitsrc_is_url(const char *repo);

/*
 * The commit id (40 lowercase hex) a ref names: a branch name ("main" →
 * refs/heads/main; a mirror keeps the remote's branches under refs/heads),
 * a tag (peeled to its commit), a full refname ("refs/heads/x"), a full or
 * abbreviated commit id (4 hex digits or more), "HEAD". For a URL the
 * mirror is fetched first. FERRY_ENOTFOUND when the repository or the ref
 * does not exist; FERRY_EINVALID for a ref that is not a ref (an
 * expression like main~1, spaces, an ambiguous abbreviation, a tag of a
 * tree).
 */
int gitsrc_resolve(char oid[41], const char *repo, const char *ref, const char *cache_dir);

/*
 * 1 if commit a is a descendant of b (strictly newer on b's history), 0 if
 * a == b, 0 if not a descendant (older or unrelated: the caller never
 * starts a run for it), <0 error (FERRY_ENOTFOUND for an unknown commit).
 */
int gitsrc_descends(const char *repo, const char *cache_dir, const char *a, const char *b);

/*
 * The bytes of path in commit (malloc'd, NUL-terminated, *len without the
 * NUL; *out is the caller's). path is relative ("a/./b" and "a//b" are
 * "a/b"); one that is absolute or has a ".." component → FERRY_EINVALID;
 * missing → FERRY_ENOTFOUND; a directory or a submodule → FERRY_EINVALID.
 * A symlink inside the commit is followed (8 hops at most) when it stays
 * inside the commit's tree. Files over GITSRC_READ_MAX → FERRY_EINVALID
 * (checked from the object header, before the file is loaded).
 */
int gitsrc_read(char **out, size_t *len, const char *repo, const char *cache_dir,
		const char *commit, const char *path);

/*
 * Writes the commit's tree under dir (its parents created): an exported
 * checkout, no .git; regular files with their executable bit, symlinks as
 * symlinks, submodules skipped. Writing never follows a link (every file
 * and directory is made with *at calls and O_NOFOLLOW on fresh names); a
 * symlink whose target leaves dir (absolute, or too many "..") fails the
 * checkout with FERRY_EINVALID, as does an entry named ".git", "." or
 * "..". Atomic: written into dir.tmp-XXXXXX then renamed, so a concurrent
 * caller or a crash never sees half a tree. If dir exists (the caller
 * names dirs by commit id) it is reused as is.
 */
int gitsrc_checkout(const char *repo, const char *cache_dir, const char *commit, const char *dir);

/*
 * {"commit","short","author","email","time":"YYYY-MM-DDTHH:MM:SSZ" (author
 * time, UTC),"subject"} of a commit; *out is a new reference. Texts that
 * are not UTF-8 have their bad bytes replaced by U+FFFD; the subject is
 * clipped at 1,000 bytes.
 */
int gitsrc_commit_info(json_t **out, const char *repo, const char *cache_dir, const char *commit);

/*
 * 1 if header ("sha256=<64 hex>", as GitHub's X-Hub-Signature-256) is the
 * HMAC-SHA256 of body (len bytes) under secret, compared in constant time
 * (CRYPTO_memcmp); 0 otherwise, including a malformed or missing header
 * and an empty or missing secret.
 */
int gitsrc_signature_ok(const char *secret, const void *body, size_t len, const char *header);

#endif

/*
 * gitsrc — git sources through libgit2: which commit a ref names, whether
 * one commit descends from another, a file at a commit, an exported
 * checkout of a commit, a commit's summary, and the HMAC check of a push
 * webhook (gitsrc.h); the checkout is gitsrc_checkout.c's.
 *
 * Why mirrors: a git trigger polls a repository every minute and a run
 * reads its workflow and checks out its code at a pinned commit. For a
 * remote repository that must not mean a clone per call, nor depend on the
 * network while a run reads its files: a bare mirror under
 * cache_dir/<sha256 of the url> holds the remote's branches (under
 * refs/heads, force-updated and pruned, so a force-push shows as it is)
 * and tags. gitsrc_resolve fetches it; every other call reads it as it is.
 * A new mirror is made in a temporary directory and renamed into place
 * after its first fetch, so a mirror that exists is always whole.
 *
 * Concurrency: calls come from worker-pool threads and API threads at
 * once. libgit2 is initialised once (pthread_once); each call opens its own
 * git_repository and frees it before returning. Two fetches of one mirror
 * must never race (ref updates, pack writes): each takes an exclusive flock
 * on cache_dir/<sha256>.lock, which serializes threads of this process too
 * (each opens the file anew, and flock locks open file descriptions) and
 * other daemons sharing the cache, and is released by the kernel if the
 * process dies. Readers take no lock: libgit2 replaces refs and packs by
 * rename, so a reader sees the mirror before or after a fetch.
 *
 * Bounds: the lock is waited for at most the fetch timeout and 1 s
 * (the holder's fetch is bounded by the same timeout); a fetch
 * is cancelled from its progress callbacks once the fetch timeout has
 * passed; a file read is at most GITSRC_READ_MAX, checked from the object
 * header before it is inflated; a checkout holds one blob at a time, each
 * at most GITSRC_CHECKOUT_FILE_MAX, and nests directories 256 deep at most.
 */
#include "schedule/gitsrc.h"
#include "schedule/gitsrc_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <git2.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "lib/util.h"

#define SYMLINK_HOPS 8
#define SUBJECT_MAX 1000

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_result;
static atomic_int fetch_timeout_ms = GITSRC_FETCH_TIMEOUT_MS;

static void init_libgit2(void)
{
	init_result = git_libgit2_init() < 0 ? FERRY_ERROR : FERRY_OK;
}

int gitsrc_init(void)
{
	pthread_once(&init_once, init_libgit2);
	if (init_result < 0)
		ferry_error_set("cannot initialise libgit2");
	return init_result;
}

void gitsrc_set_fetch_timeout(int ms)
{
	atomic_store(&fetch_timeout_ms, ms > 0 ? ms : GITSRC_FETCH_TIMEOUT_MS);
}

/* Sets the message "what: libgit2's message" and maps libgit2's code to ours. */
int gitsrc_fail(int gerr, const char *what)
{
	const git_error *e = git_error_last();
	const char *msg = e && e->message ? e->message : "unknown libgit2 error";

	ferry_error_set("%s: %s", what, msg);
	switch (gerr) {
	case GIT_ENOTFOUND:
		return FERRY_ENOTFOUND;
	case GIT_EAMBIGUOUS:
	case GIT_EINVALIDSPEC:
	case GIT_EINVALID:
		return FERRY_EINVALID;
	default:
		return FERRY_ERROR;
	}
}

int gitsrc_is_url(const char *repo)
{
	const char *at, *colon, *slash;

	if (strstr(repo, "://"))
		return 1;
	/* scp-like user@host:path, as git reads it; a local path never has '@' before its first ':' and no '/' */
	at = strchr(repo, '@');
	colon = strchr(repo, ':');
	slash = strchr(repo, '/');
	return at && colon && at < colon && (!slash || colon < slash) && at > repo && colon > at + 1;
}

char *gitsrc_mirror_path(const char *url, const char *cache_dir)
{
	char hex[65];

	sha256_hex(hex, url, strlen(url));
	return xasprintf("%s/%s", cache_dir, hex);
}

/* ---- mirrors ---- */

struct fetch_ctx {
	int64_t deadline;
	int timed_out;
	int cred_tries;
};

static int fetch_check(struct fetch_ctx *f)
{
	if (clock_mono_ms() > f->deadline) {
		f->timed_out = 1;
		return -1;
	}
	return 0;
}

static int cb_transfer(const git_indexer_progress *stats, void *payload)
{
	(void)stats;
	return fetch_check(payload);
}

static int cb_sideband(const char *str, int len, void *payload)
{
	(void)str;
	(void)len;
	return fetch_check(payload);
}

static int cb_tips(const char *refname, const git_oid *a, const git_oid *b, void *payload)
{
	(void)refname;
	(void)a;
	(void)b;
	return fetch_check(payload);
}

/* ssh: the agent's keys, once (libgit2 asks again after each refusal), with FERRY_GIT_SSH_AGENT=1. Nothing else is offered. */
static int cb_credentials(git_credential **out, const char *url, const char *user, unsigned int allowed,
			  void *payload)
{
	struct fetch_ctx *f = payload;

	(void)url;
	if (fetch_check(f) < 0)
		return -1;
	/* the daemon's own agent keys only when its operator says so: a submitted ssh URL is anyone's */
	if ((allowed & GIT_CREDENTIAL_SSH_KEY) && f->cred_tries++ == 0 && getenv("FERRY_GIT_SSH_AGENT") &&
	    strcmp(getenv("FERRY_GIT_SSH_AGENT"), "1") == 0)
		return git_credential_ssh_key_from_agent(out, user ? user : "git");
	return GIT_PASSTHROUGH;
}

/* Takes the mirror's lock (an exclusive flock), waiting at most ms; the descriptor, or <0. */
static int mirror_lock(const char *mirror, int ms)
{
	char *path = xasprintf("%s.lock", mirror);
	int64_t deadline = clock_mono_ms() + ms;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

	if (fd < 0) {
		ferry_error_set("cannot open the mirror lock %s: %s", path, strerror(errno));
		free(path);
		return FERRY_ERROR;
	}
	for (;;) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			break;
		if (errno != EWOULDBLOCK && errno != EINTR) {
			ferry_error_set("cannot lock %s: %s", path, strerror(errno));
			goto fail;
		}
		if (clock_mono_ms() > deadline) {
			ferry_error_set("the mirror %s stayed locked for %d ms (another fetch of it); "
					"try again later", mirror, ms);
			goto fail;
		}
		nanosleep(&(struct timespec){ .tv_nsec = 20 * 1000 * 1000 }, NULL);
	}
	free(path);
	return fd;
fail:
	close(fd);
	free(path);
	return FERRY_ERROR;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

/* Removes a tree we wrote; links are removed, never followed (FTW_PHYS). */
void gitsrc_tree_remove(const char *dir)
{
	if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT)
		flog_warn("gitsrc: cannot remove %s: %s", dir, strerror(errno));
}

/*
 * What a mirror keeps: the remote's branches as its own (forced, so a
 * force-push shows as it is) and its tags.
 */
static char *mirror_refspecs[] = { "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*" };

/*
 * Fetches url into the bare repository r with the deadline; then points HEAD
 * at the remote's default branch. The remote is anonymous, made without
 * reading the mirror's configuration: libgit2 1.5 leaks a PCRE2 match block
 * (about 20 KB) per configuration entry a regex is tried on
 * (git_regexp_match returns before freeing it when nothing matches), and
 * both git_remote_lookup and the url.*.insteadOf rewriting do that, which
 * in a daemon that polls every minute is memory that only grows.
 */
static int mirror_fetch(git_repository *r, const char *url)
{
	git_remote_create_options ro;
	git_strarray specs = { mirror_refspecs, 2 };
	git_fetch_options opts;
	git_remote *remote = NULL;
	git_buf head = { 0 };
	struct fetch_ctx f = { 0 };
	int ms = atomic_load(&fetch_timeout_ms), gerr, error = FERRY_OK;

	git_fetch_options_init(&opts, GIT_FETCH_OPTIONS_VERSION);
	f.deadline = clock_mono_ms() + ms;
	opts.callbacks.transfer_progress = cb_transfer;
	opts.callbacks.sideband_progress = cb_sideband;
	opts.callbacks.update_tips = cb_tips;
	opts.callbacks.credentials = cb_credentials;
	opts.callbacks.payload = &f;
	opts.prune = GIT_FETCH_PRUNE;
	opts.download_tags = GIT_REMOTE_DOWNLOAD_TAGS_ALL;
	git_remote_create_options_init(&ro, GIT_REMOTE_CREATE_OPTIONS_VERSION);
	ro.repository = r;
	ro.flags = GIT_REMOTE_CREATE_SKIP_INSTEADOF | GIT_REMOTE_CREATE_SKIP_DEFAULT_FETCHSPEC;
	gerr = git_remote_create_with_opts(&remote, url, &ro);
	if (gerr < 0) {
		char *what = xasprintf("the remote %s", url);
		error = gitsrc_fail(gerr, what);
		free(what);
		goto out;
	}
	gerr = git_remote_fetch(remote, &specs, &opts, "ferry mirror fetch");
	if (gerr < 0) {
		if (f.timed_out) {
			ferry_error_set("fetching %s: timed out after %d ms", url, ms);
			error = FERRY_ERROR;
		} else {
			char *what = xasprintf("fetching %s", url);
			error = gitsrc_fail(gerr, what);
			free(what);
		}
		goto out;
	}
	/* the remote's HEAD, learnt during the fetch: the mirror's HEAD names the same branch */
	if (git_remote_default_branch(&head, remote) == 0 && strncmp(head.ptr, "refs/heads/", 11) == 0)
		(void)git_repository_set_head(r, head.ptr);
out:
	git_buf_dispose(&head);
	git_remote_free(remote);
	return error;
}

/* Makes a new mirror of url at mirror: init and fetch in mirror.tmp-XXXXXX, then rename. Under the lock. */
static int mirror_create(const char *url, const char *mirror)
{
	git_repository_init_options init;
	git_repository *r = NULL;
	char *tmp = xasprintf("%s.tmp-XXXXXX", mirror), *url_file = NULL;
	int gerr, error = FERRY_OK, made = 0, fd;

	if (!mkdtemp(tmp)) {
		ferry_error_set("cannot create %s: %s", tmp, strerror(errno));
		error = FERRY_ERROR;
		goto out;
	}
	made = 1;
	git_repository_init_options_init(&init, GIT_REPOSITORY_INIT_OPTIONS_VERSION);
	init.flags = GIT_REPOSITORY_INIT_BARE | GIT_REPOSITORY_INIT_MKPATH;
	gerr = git_repository_init_ext(&r, tmp, &init);
	if (gerr < 0) {
		error = gitsrc_fail(gerr, "creating a mirror");
		goto out;
	}
	/* for a person looking at the cache: whose mirror this is */
	url_file = xasprintf("%s/ferry-url", tmp);
	fd = open(url_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || fd_write_all(fd, url, strlen(url)) < 0 || fd_write_all(fd, "\n", 1) < 0) {
		ferry_error_set("cannot write %s: %s", url_file, strerror(errno));
		error = FERRY_ERROR;
		if (fd >= 0)
			close(fd);
		goto out;
	}
	close(fd);
	error = mirror_fetch(r, url);
	if (error < 0)
		goto out;
	git_repository_free(r);
	r = NULL;
	if (chmod(tmp, 0755) < 0 || rename(tmp, mirror) < 0) {
		ferry_error_set("cannot move the new mirror to %s: %s", mirror, strerror(errno));
		error = FERRY_ERROR;
		goto out;
	}
	made = 0;
out:
	git_repository_free(r);
	if (made)
		gitsrc_tree_remove(tmp);
	free(url_file);
	free(tmp);
	return error;
}

/* Fetches the mirror of url (creating it when missing) under its lock; always = 0 only creates a missing one. */
static int mirror_update(const char *url, const char *mirror, int always)
{
	git_repository *r = NULL;
	struct stat st;
	int fd, gerr, error;

	fd = mirror_lock(mirror, atomic_load(&fetch_timeout_ms) + 1000);
	if (fd < 0)
		return fd;
	if (stat(mirror, &st) < 0) {
		error = mirror_create(url, mirror);
	} else if (!always) {
		error = FERRY_OK; /* another caller made it while we waited */
	} else {
		gerr = git_repository_open_bare(&r, mirror);
		error = gerr < 0 ? gitsrc_fail(gerr, "opening the mirror") : mirror_fetch(r, url);
	}
	git_repository_free(r);
	close(fd); /* releases the flock */
	return error;
}

/*
 * Opens repo for one call: a local path in place, a URL's mirror (fetched
 * first when fetch is set, made when missing). *out is the caller's.
 */
int gitsrc_repo_open(git_repository **out, const char *repo, const char *cache_dir, int fetch)
{
	char *mirror = NULL;
	struct stat st;
	int gerr, error;

	*out = NULL;
	if (gitsrc_init() < 0)
		return FERRY_ERROR;
	if (!repo || !repo[0]) {
		ferry_error_set("no repository given");
		return FERRY_EINVALID;
	}
	if (!gitsrc_is_url(repo)) {
		gerr = git_repository_open_ext(out, repo, GIT_REPOSITORY_OPEN_NO_SEARCH, NULL);
		if (gerr == GIT_ENOTFOUND) {
			ferry_error_set("no git repository at %s", repo);
			return FERRY_ENOTFOUND;
		}
		if (gerr == GIT_EOWNER) {
			ferry_error_set("%s belongs to another user, and libgit2 refuses it "
					"(git's safe.directory); run ferryd as its owner", repo);
			return FERRY_ERROR;
		}
		if (gerr < 0) {
			char *what = xasprintf("opening %s", repo);
			error = gitsrc_fail(gerr, what);
			free(what);
			return error;
		}
		return FERRY_OK;
	}
	if (!cache_dir || !cache_dir[0]) {
		ferry_error_set("%s is a URL and no cache directory is set for its mirror", repo);
		return FERRY_EINVALID;
	}
	if (mkdir_p(cache_dir, 0755) < 0)
		return FERRY_ERROR;
	mirror = gitsrc_mirror_path(repo, cache_dir);
	error = FERRY_OK;
	if (fetch || stat(mirror, &st) < 0)
		error = mirror_update(repo, mirror, fetch);
	if (error == 0) {
		gerr = git_repository_open_bare(out, mirror);
		if (gerr < 0)
			error = gitsrc_fail(gerr, "opening the mirror");
	}
	free(mirror);
	return error;
}

/* ---- refs and commits ---- */

static int is_hex(const char *s, size_t min, size_t max)
{
	size_t n = strlen(s);

	if (n < min || n > max)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
		      (s[i] >= 'A' && s[i] <= 'F')))
			return 0;
	return 1;
}

/* Whether ref is a name we accept: HEAD, a full refname, a valid short name, or hex. */
static int ref_ok(const char *ref)
{
	char *full;
	int valid = 0;

	if (!ref || !ref[0] || strlen(ref) > 255)
		return 0;
	if (strcmp(ref, "HEAD") == 0 || is_hex(ref, 4, 40))
		return 1;
	full = strncmp(ref, "refs/", 5) == 0 ? xstrdup(ref) : xasprintf("refs/heads/%s", ref);
	if (git_reference_name_is_valid(&valid, full) < 0)
		valid = 0;
	free(full);
	return valid;
}

/* Peels obj to a commit into *id; FERRY_EINVALID when it names something else. */
static int peel_commit(git_oid *id, git_object *obj, const char *what)
{
	git_object *c = NULL;

	if (git_object_peel(&c, obj, GIT_OBJECT_COMMIT) < 0) {
		ferry_error_set("%s names a %s, not a commit", what, git_object_type2string(git_object_type(obj)));
		return FERRY_EINVALID;
	}
	git_oid_cpy(id, git_object_id(c));
	git_object_free(c);
	return FERRY_OK;
}

/* The message and code of a failed ref lookup or peel. */
static int resolve_fail(int gerr, const char *repo, const char *ref)
{
	char *what;
	int error;

	if (gerr == GIT_ENOTFOUND || gerr == GIT_EUNBORNBRANCH) {
		ferry_error_set("%s: %s names no commit (an empty repository?)", repo, ref);
		return FERRY_ENOTFOUND;
	}
	what = xasprintf("%s: resolving %s", repo, ref);
	error = gitsrc_fail(gerr, what);
	free(what);
	return error;
}

/* The commit the reference names into *id; takes ref_obj (freed here). */
static int ref_peel(git_oid *id, git_reference *ref_obj, const char *repo, const char *ref)
{
	git_object *obj = NULL;
	int gerr = git_reference_peel(&obj, ref_obj, GIT_OBJECT_ANY), error;

	git_reference_free(ref_obj);
	if (gerr < 0)
		return resolve_fail(gerr, repo, ref);
	error = peel_commit(id, obj, ref);
	git_object_free(obj);
	return error;
}

/*
 * The commit a ref names, in gitsrc_resolve's order: HEAD or a full
 * refname as given; then refs/heads/, refs/tags/, refs/remotes/origin/ +
 * ref (a full commit id skips these, as in git); then a commit id.
 */
static int ref_resolve(git_oid *id, git_repository *r, const char *ref, const char *repo)
{
	static const char *const forms[] = { "refs/heads/", "refs/tags/", "refs/remotes/origin/" };
	git_reference *ref_obj = NULL;
	git_object *obj = NULL;
	git_oid prefix;
	int gerr, error;

	if (strcmp(ref, "HEAD") == 0 || strncmp(ref, "refs/", 5) == 0) {
		gerr = git_reference_lookup(&ref_obj, r, ref);
		if (gerr == 0)
			return ref_peel(id, ref_obj, repo, ref);
		if (strcmp(ref, "HEAD") == 0 || gerr != GIT_ENOTFOUND)
			return resolve_fail(gerr, repo, ref);
	}
	if (!is_hex(ref, 40, 40)) {
		for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
			char *name = xasprintf("%s%s", forms[i], ref);

			gerr = git_reference_lookup(&ref_obj, r, name);
			free(name);
			if (gerr == 0)
				return ref_peel(id, ref_obj, repo, ref);
			if (gerr != GIT_ENOTFOUND && gerr != GIT_EINVALIDSPEC)
				return resolve_fail(gerr, repo, ref);
		}
	}
	if (is_hex(ref, 4, 40)) {
		gerr = git_oid_fromstrn(&prefix, ref, strlen(ref));
		if (gerr == 0)
			gerr = git_object_lookup_prefix(&obj, r, &prefix, strlen(ref), GIT_OBJECT_ANY);
		if (gerr == GIT_EAMBIGUOUS) {
			ferry_error_set("%s is an ambiguous abbreviation in %s; give more digits", ref, repo);
			return FERRY_EINVALID;
		}
		if (gerr == 0) {
			error = peel_commit(id, obj, ref);
			git_object_free(obj);
			return error;
		}
		if (gerr != GIT_ENOTFOUND)
			return resolve_fail(gerr, repo, ref);
	}
	ferry_error_set("%s: no branch, tag or commit named %s", repo, ref);
	return FERRY_ENOTFOUND;
}

int gitsrc_resolve(char oid[41], const char *repo, const char *ref, const char *cache_dir)
{
	git_repository *r = NULL;
	git_oid id;
	char buf[256];
	int error;

	oid[0] = '\0';
	if (!ref_ok(ref)) {
		ferry_error_set("%s is not a branch, tag or commit id (give a name like main or v1.2, "
				"or a commit id)", ref ? quote_clip(buf, sizeof(buf), ref, strlen(ref), 24) : "(null)");
		return FERRY_EINVALID;
	}
	error = gitsrc_repo_open(&r, repo, cache_dir, 1);
	if (error < 0)
		return error;
	error = ref_resolve(&id, r, ref, repo);
	if (error == 0)
		git_oid_tostr(oid, 41, &id);
	git_repository_free(r);
	return error;
}

/* Looks up the commit whose id (4 to 40 hex) is hex. *out is the caller's (git_commit_free). */
int gitsrc_commit_lookup(git_commit **out, git_repository *r, const char *hex, const char *repo)
{
	git_oid prefix;
	char buf[256];
	int gerr;

	*out = NULL;
	if (!hex || !is_hex(hex, 4, 40)) {
		ferry_error_set("%s is not a commit id (4 to 40 hex digits)",
				hex ? quote_clip(buf, sizeof(buf), hex, strlen(hex), 48) : "(null)");
		return FERRY_EINVALID;
	}
	gerr = git_oid_fromstrn(&prefix, hex, strlen(hex));
	if (gerr == 0)
		gerr = git_commit_lookup_prefix(out, r, &prefix, strlen(hex));
	if (gerr == GIT_ENOTFOUND) {
		ferry_error_set("%s: no commit %s", repo, hex);
		return FERRY_ENOTFOUND;
	}
	if (gerr == GIT_EAMBIGUOUS) {
		ferry_error_set("%s: %s is an ambiguous abbreviation; give more digits", repo, hex);
		return FERRY_EINVALID;
	}
	if (gerr < 0) {
		char *what = xasprintf("%s: commit %s", repo, hex);
		int error = gitsrc_fail(gerr, what);
		free(what);
		return error;
	}
	return FERRY_OK;
}

int gitsrc_commit_open(git_repository **r, git_commit **c, git_tree **tree, const char *repo,
		       const char *cache_dir, const char *hex)
{
	int error, gerr;

	if ((error = gitsrc_repo_open(r, repo, cache_dir, 0)) < 0 ||
	    (error = gitsrc_commit_lookup(c, *r, hex, repo)) < 0)
		return error;
	if (tree && (gerr = git_commit_tree(tree, *c)) < 0)
		return gitsrc_fail(gerr, "reading the commit's tree");
	return FERRY_OK;
}

int gitsrc_descends(const char *repo, const char *cache_dir, const char *a, const char *b)
{
	git_repository *r = NULL;
	git_commit *ca = NULL, *cb = NULL;
	int error;

	error = gitsrc_repo_open(&r, repo, cache_dir, 0);
	if (error < 0)
		return error;
	error = gitsrc_commit_lookup(&ca, r, a, repo);
	if (error == 0)
		error = gitsrc_commit_lookup(&cb, r, b, repo);
	if (error < 0)
		goto out;
	if (git_oid_equal(git_commit_id(ca), git_commit_id(cb))) {
		error = 0;
		goto out;
	}
	error = git_graph_descendant_of(r, git_commit_id(ca), git_commit_id(cb));
	if (error < 0)
		error = gitsrc_fail(error, "comparing commits");
out:
	git_commit_free(ca);
	git_commit_free(cb);
	git_repository_free(r);
	return error;
}

/* ---- paths in a tree ---- */


/*
 * Normalises base (a normalised directory in the tree, "" for the top)
 * joined with rel: "" and "." components dropped, ".." handled as dotdot
 * says, popping above the top refused. *out is the caller's ("" for the top
 * itself).
 *
 * Why DOTDOT_LEADING for links on disk: the kernel resolves "a/l/.." by
 * entering a/l first, so when l is itself a link (to ".." say) the result
 * is not the lexical "a". With ".." only leading, a link climbs real
 * directories of the checkout (no more than its own depth) and then only
 * descends, and every link it descends through obeys the same rule, so no
 * chain of links leaves the checkout.
 */
int gitsrc_path_norm(char **out, const char *base, const char *rel, int dotdot)
{
	const char *parts[2] = { base, rel };
	size_t n = 0;
	char *buf = xmalloc(strlen(base) + strlen(rel) + 2);
	int named = 0;

	*out = NULL;
	for (int k = 0; k < 2; k++) {
		const char *p = parts[k], *end;

		for (; *p; p = end) {
			size_t len;

			while (*p == '/')
				p++;
			if (!*p)
				break;
			end = strchr(p, '/');
			if (!end)
				end = p + strlen(p);
			len = (size_t)(end - p);
			if (len == 1 && p[0] == '.')
				continue;
			if (len == 2 && p[0] == '.' && p[1] == '.') {
				if (k == 0 || dotdot == DOTDOT_NO || n == 0 || (dotdot == DOTDOT_LEADING && named))
					goto bad;
				while (n > 0 && buf[n - 1] != '/')
					n--;
				if (n > 0)
					n--; /* the separator */
				continue;
			}
			named |= k == 1;
			if (n > 0)
				buf[n++] = '/';
			memcpy(buf + n, p, len);
			n += len;
		}
	}
	buf[n] = '\0';
	*out = buf;
	return FERRY_OK;
bad:
	free(buf);
	return FERRY_EINVALID;
}

/* The directory part of a normalised path ("" for a top-level name); the caller frees it. */
char *gitsrc_path_dir(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? xstrndup(path, (size_t)(slash - path)) : xstrdup("");
}

/* The bytes of the blob id into *out (NUL-terminated), refusing more than max. */
int gitsrc_blob_read(char **out, size_t *len, git_repository *r, const git_oid *id, size_t max,
		     const char *path)
{
	git_odb *odb = NULL;
	git_blob *blob = NULL;
	git_object_t type;
	size_t size = 0;
	int gerr, error = FERRY_OK;

	*out = NULL;
	gerr = git_repository_odb(&odb, r);
	if (gerr == 0)
		gerr = git_odb_read_header(&size, &type, odb, id);
	if (gerr < 0) {
		error = gitsrc_fail(gerr, path);
		goto out;
	}
	if (size > max) {
		ferry_error_set("%s is %zu bytes; files are limited to %zu bytes here", path, size, max);
		error = FERRY_EINVALID;
		goto out;
	}
	gerr = git_blob_lookup(&blob, r, id);
	if (gerr < 0) {
		error = gitsrc_fail(gerr, path);
		goto out;
	}
	size = (size_t)git_blob_rawsize(blob);
	if (size > max) { /* the header said otherwise: a corrupt object */
		ferry_error_set("%s is %zu bytes; files are limited to %zu bytes here", path, size, max);
		error = FERRY_EINVALID;
		goto out;
	}
	*out = xmalloc(size + 1);
	memcpy(*out, git_blob_rawcontent(blob), size);
	(*out)[size] = '\0';
	*len = size;
out:
	git_blob_free(blob);
	git_odb_free(odb);
	return error;
}

int gitsrc_read(char **out, size_t *len, const char *repo, const char *cache_dir, const char *commit,
		const char *path)
{
	git_repository *r = NULL;
	git_commit *c = NULL;
	git_tree *tree = NULL;
	git_tree_entry *e = NULL;
	char *cur = NULL, *target = NULL, buf[256];
	size_t n;
	int gerr, error;

	*out = NULL;
	*len = 0;
	if (!path || !path[0] || path[0] == '/' || gitsrc_path_norm(&cur, "", path, DOTDOT_NO) < 0 || !cur[0]) {
		ferry_error_set("%s: give a relative path inside the repository, without \"..\"",
				path ? quote_clip(buf, sizeof(buf), path, strlen(path), 48) : "(null)");
		free(cur);
		return FERRY_EINVALID;
	}
	if ((error = gitsrc_commit_open(&r, &c, &tree, repo, cache_dir, commit)) < 0)
		goto out;
	for (int hop = 0;; hop++) {
		char *dir, *next;

		gerr = git_tree_entry_bypath(&e, tree, cur);
		if (gerr == GIT_ENOTFOUND) {
			ferry_error_set("%s: no file %s in commit %.12s", repo, cur, commit);
			error = FERRY_ENOTFOUND;
			goto out;
		}
		if (gerr < 0) {
			error = gitsrc_fail(gerr, cur);
			goto out;
		}
		if (git_tree_entry_type(e) == GIT_OBJECT_TREE) {
			ferry_error_set("%s: %s is a directory in commit %.12s; give a file", repo, cur, commit);
			error = FERRY_EINVALID;
			goto out;
		}
		if (git_tree_entry_type(e) != GIT_OBJECT_BLOB) {
			ferry_error_set("%s: %s is a submodule in commit %.12s; give a file", repo, cur, commit);
			error = FERRY_EINVALID;
			goto out;
		}
		if (git_tree_entry_filemode(e) != GIT_FILEMODE_LINK) {
			error = gitsrc_blob_read(out, len, r, git_tree_entry_id(e), GITSRC_READ_MAX, cur);
			goto out;
		}
		/* a symlink: followed inside the tree only */
		if (hop == SYMLINK_HOPS) {
			ferry_error_set("%s: more than %d symlinks to follow at %s", repo, SYMLINK_HOPS, cur);
			error = FERRY_EINVALID;
			goto out;
		}
		error = gitsrc_blob_read(&target, &n, r, git_tree_entry_id(e), LINK_MAX_BYTES, cur);
		if (error < 0)
			goto out;
		dir = gitsrc_path_dir(cur);
		next = NULL;
		if (target[0] == '/' || strlen(target) != n || gitsrc_path_norm(&next, dir, target, DOTDOT_LEXICAL) < 0 || !next[0]) {
			ferry_error_set("%s: %s is a symlink that leaves the repository", repo, cur);
			error = FERRY_EINVALID;
			free(dir);
			free(next);
			goto out;
		}
		free(dir);
		free(target);
		target = NULL;
		free(cur);
		cur = next;
		git_tree_entry_free(e);
		e = NULL;
	}
out:
	free(cur);
	free(target);
	git_tree_entry_free(e);
	git_tree_free(tree);
	git_commit_free(c);
	git_repository_free(r);
	return error;
}

/* ---- commit info ---- */

/* Length of the valid UTF-8 sequence at s (of n bytes), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	size_t len;
	unsigned char lo = 0x80, hi = 0xbf;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4;
	else
		return 0;
	if (s[0] == 0xe0)
		lo = 0xa0; /* overlong */
	else if (s[0] == 0xed)
		hi = 0x9f; /* surrogates */
	else if (s[0] == 0xf0)
		lo = 0x90; /* overlong */
	else if (s[0] == 0xf4)
		hi = 0x8f; /* above U+10FFFF */
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

/* s as valid UTF-8 (bad bytes → U+FFFD), clipped at max bytes on a character boundary; the caller frees it. */
static char *utf8_clean(const char *s, size_t max)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	size_t n = strlen((const char *)p), k = 0;
	char *out = xmalloc(3 * n + 1);

	for (size_t i = 0; i < n;) {
		size_t len = utf8_seq(p + i, n - i);
		size_t add = len ? len : 3;

		if (k + add > max)
			break;
		if (len) {
			memcpy(out + k, p + i, len);
			i += len;
		} else {
			memcpy(out + k, "\xef\xbf\xbd", 3);
			i++;
		}
		k += add;
	}
	out[k] = '\0';
	return out;
}

int gitsrc_commit_info(json_t **out, const char *repo, const char *cache_dir, const char *commit)
{
	git_repository *r = NULL;
	git_commit *c = NULL;
	git_buf shortid = { 0 };
	const git_signature *a;
	char id[41], when[32], *name = NULL, *email = NULL, *subject = NULL;
	struct tm tm;
	time_t t;
	int gerr, error;

	*out = NULL;
	if ((error = gitsrc_commit_open(&r, &c, NULL, repo, cache_dir, commit)) < 0)
		goto out;
	gerr = git_object_short_id(&shortid, (const git_object *)c);
	if (gerr < 0) {
		error = gitsrc_fail(gerr, "abbreviating the commit id");
		goto out;
	}
	a = git_commit_author(c);
	t = (time_t)a->when.time;
	if (!gmtime_r(&t, &tm) || strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		when[0] = '\0';
	git_oid_tostr(id, sizeof(id), git_commit_id(c));
	name = utf8_clean(a->name, SUBJECT_MAX);
	email = utf8_clean(a->email, SUBJECT_MAX);
	subject = utf8_clean(git_commit_summary(c), SUBJECT_MAX);
	*out = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "commit", id, "short", shortid.ptr, "author", name,
			 "email", email, "time", when, "subject", subject);
	if (!*out) {
		ferry_error_set("cannot build the commit's summary");
		error = FERRY_ERROR;
	}
out:
	free(name);
	free(email);
	free(subject);
	git_buf_dispose(&shortid);
	git_commit_free(c);
	git_repository_free(r);
	return error;
}

/* ---- webhook signatures ---- */

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int gitsrc_signature_ok(const char *secret, const void *body, size_t len, const char *header)
{
	unsigned char want[32], mac[EVP_MAX_MD_SIZE];
	unsigned int maclen = 0;
	static const unsigned char empty[1];

	if (!secret || !secret[0] || !header || strncmp(header, "sha256=", 7) != 0 ||
	    strlen(header + 7) != 64)
		return 0;
	for (size_t i = 0; i < 32; i++) {
		int hi = hex_digit(header[7 + 2 * i]), lo = hex_digit(header[8 + 2 * i]);

		if (hi < 0 || lo < 0)
			return 0;
		want[i] = (unsigned char)(hi << 4 | lo);
	}
	if (!HMAC(EVP_sha256(), secret, (int)strlen(secret), body ? body : empty, body ? len : 0, mac,
		  &maclen) || maclen != 32)
		return 0;
	return CRYPTO_memcmp(mac, want, 32) == 0;
}

/*
 * Unit tests of orchestrator/gitsrc: real repositories made with the git
 * CLI in a temporary directory (a bare origin, a work clone, commits, a
 * branch, an orphan branch, tags, an executable script, a symlink, a nested
 * directory, a force-push), read back through libgit2: refs resolved,
 * ancestry, files at commits, exported checkouts, commit summaries, file://
 * mirrors kept in a cache directory, and webhook signatures.
 *
 * The fixture (group setup) has, on the origin's main: C1 "first commit"
 * (README "one", run.sh executable, link → README, data/nested/deep.txt,
 * workflows/x.yaml; annotated tag v1), C2 (README "two"), C3 (new.txt).
 * Branch dev: C4 on C2 (an escaping symlink evil → /etc/passwd, a 17 MB
 * file). Branch other: U, an orphan commit with a subject that is not UTF-8.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include "schedule/gitsrc.h"
#include "lib/util.h"

static char T[64];                       /* the temporary directory */
static char C1[41], C2[41], C3[41], C4[41], U[41];
static char *origin, *work;

/* Runs a shell command (printf format) in T; asserts it exits 0, showing its output when not. */
static void FERRY_PRINTF(1, 2) sh(const char *fmt, ...)
{
	char cmd[4096], *full, *log;
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	full = xasprintf("cd '%s' && { %s ; } >'%s/sh.log' 2>&1", T, cmd, T);
	st = system(full);
	if (st != 0) {
		log = xasprintf("cat '%s/sh.log' >&2", T);
		fprintf(stderr, "command failed: %s\n", cmd);
		(void)system(log);
		free(log);
	}
	free(full);
	assert_int_equal(st, 0);
}

/* The first line of a command's output into out (41 bytes: a commit id). */
static void FERRY_PRINTF(2, 3) capture(char out[41], const char *fmt, ...)
{
	char cmd[4096], *full;
	va_list ap;
	FILE *p;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	full = xasprintf("cd '%s' && %s", T, cmd);
	p = popen(full, "r");
	assert_non_null(p);
	memset(out, 0, 41);
	assert_non_null(fgets(out, 41, p));
	assert_int_equal(pclose(p), 0);
	free(full);
	assert_int_equal(strlen(out), 40);
}

static void commit(const char *date, const char *subject)
{
	sh("GIT_AUTHOR_DATE='%s' GIT_COMMITTER_DATE='%s' git -C work commit -q -m \"%s\"", date, date, subject);
}

static int setup(void **state)
{
	(void)state;
	snprintf(T, sizeof(T), "/tmp/ferry-unit-git.XXXXXX");
	if (!mkdtemp(T))
		return -1;
	/* the tests' identity and no user or system configuration */
	setenv("HOME", T, 1);
	setenv("GIT_CONFIG_NOSYSTEM", "1", 1);
	setenv("GIT_AUTHOR_NAME", "Test Author", 1);
	setenv("GIT_AUTHOR_EMAIL", "author@example.org", 1);
	setenv("GIT_COMMITTER_NAME", "Test Committer", 1);
	setenv("GIT_COMMITTER_EMAIL", "committer@example.org", 1);
	origin = xasprintf("%s/origin.git", T);
	work = xasprintf("%s/work", T);
	sh("git init -q --bare -b main origin.git && git clone -q origin.git work 2>/dev/null");
	sh("mkdir -p work/data/nested work/workflows && printf 'one\\n' > work/README && "
	   "printf '#!/bin/sh\\necho hi\\n' > work/run.sh && chmod 755 work/run.sh && "
	   "ln -s README work/link && printf 'deep\\n' > work/data/nested/deep.txt && "
	   "printf 'name: x\\n' > work/workflows/x.yaml && git -C work add -A");
	commit("2026-01-02T03:04:05Z", "first commit");
	sh("GIT_COMMITTER_DATE='2026-01-02T03:04:05Z' git -C work tag -a v1 -m 'version 1'");
	sh("printf 'two\\n' > work/README && git -C work add -A");
	commit("2026-01-03T00:00:00Z", "second");
	sh("printf 'new\\n' > work/new.txt && git -C work add -A");
	commit("2026-01-04T00:00:00Z", "third");
	sh("git -C work push -q origin main v1");
	sh("git -C work checkout -q -b dev HEAD~1 && ln -s /etc/passwd work/evil && "
	   "head -c 17000000 /dev/zero > work/big.bin && git -C work add -A");
	commit("2026-01-05T00:00:00Z", "dev work");
	sh("git -C work push -q origin dev");
	sh("git -C work checkout -q --orphan other && git -C work rm -q -rf . && "
	   "printf 'u\\n' > work/u.txt && git -C work add -A");
	commit("2026-01-06T00:00:00Z", "unrelated");
	sh("git -C work push -q origin other && git -C work checkout -q main");
	capture(C1, "git -C work rev-parse v1^{commit}");
	capture(C2, "git -C work rev-parse main~1");
	capture(C3, "git -C work rev-parse main");
	capture(C4, "git -C work rev-parse dev");
	capture(U, "git -C work rev-parse other");
	return gitsrc_init();
}

static int teardown(void **state)
{
	char *cmd = xasprintf("rm -rf '%s'", T);
	int rc = system(cmd);

	(void)state;
	free(cmd);
	free(origin);
	free(work);
	return rc == 0 ? 0 : -1;
}

/* Asserts that resolving ref in repo (a URL's mirror in cache) gives want. */
static void resolves_in(const char *repo, const char *cache, const char *ref, const char *want)
{
	char oid[41];

	if (gitsrc_resolve(oid, repo, ref, cache) != 0)
		fail_msg("resolve %s %s: %s", repo, ref, ferry_error_last());
	assert_string_equal(oid, want);
}

static void resolves(const char *repo, const char *ref, const char *want)
{
	resolves_in(repo, NULL, ref, want);
}

static void test_gitsrc__resolve(void **state)
{
	char oid[41], abbrev[8], *missing;

	(void)state;
	resolves(origin, "main", C3);
	resolves(origin, "dev", C4);
	resolves(origin, "other", U);
	resolves(origin, "v1", C1); /* an annotated tag, peeled to its commit */
	resolves(origin, "HEAD", C3);
	resolves(origin, "refs/heads/dev", C4);
	resolves(origin, C2, C2);
	memcpy(abbrev, C2, 7);
	abbrev[7] = '\0';
	resolves(origin, abbrev, C2);
	/* a work clone, read in place */
	resolves(work, "main", C3);
	resolves(work, "HEAD", C3);

	assert_int_equal(gitsrc_resolve(oid, origin, "nope", NULL), FERRY_ENOTFOUND);
	assert_string_equal(oid, "");
	assert_non_null(strstr(ferry_error_last(), "no branch, tag or commit named nope"));
	assert_int_equal(gitsrc_resolve(oid, origin, "main~1", NULL), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "is not a branch, tag or commit id"));
	assert_int_equal(gitsrc_resolve(oid, origin, "a b", NULL), FERRY_EINVALID);
	assert_int_equal(gitsrc_resolve(oid, origin, "", NULL), FERRY_EINVALID);
	assert_int_equal(gitsrc_resolve(oid, origin, "main..dev", NULL), FERRY_EINVALID);
	assert_int_equal(gitsrc_resolve(oid, origin, "ffffffffff", NULL), FERRY_ENOTFOUND);
	/* a tag of a tree names no commit */
	sh("git -C origin.git tag treetag %s^{tree}", C1);
	assert_int_equal(gitsrc_resolve(oid, origin, "treetag", NULL), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "treetag names a tree, not a commit");
	sh("git -C origin.git tag -d treetag");
	missing = xasprintf("%s/no-such-repo", T);
	assert_int_equal(gitsrc_resolve(oid, missing, "main", NULL), FERRY_ENOTFOUND);
	assert_non_null(strstr(ferry_error_last(), "no git repository at"));
	/* an empty repository: HEAD names no commit */
	sh("git init -q --bare -b main empty.git");
	free(missing);
	missing = xasprintf("%s/empty.git", T);
	assert_int_equal(gitsrc_resolve(oid, missing, "HEAD", NULL), FERRY_ENOTFOUND);
	assert_int_equal(gitsrc_resolve(oid, missing, "main", NULL), FERRY_ENOTFOUND);
	free(missing);
	/* a URL needs a cache directory */
	assert_int_equal(gitsrc_resolve(oid, "file:///nowhere.git", "main", NULL), FERRY_EINVALID);
}

static void test_gitsrc__descends(void **state)
{
	(void)state;
	assert_int_equal(gitsrc_descends(origin, NULL, C3, C1), 1);
	assert_int_equal(gitsrc_descends(origin, NULL, C2, C1), 1);
	assert_int_equal(gitsrc_descends(origin, NULL, C4, C1), 1);
	assert_int_equal(gitsrc_descends(origin, NULL, C2, C2), 0);  /* equal */
	assert_int_equal(gitsrc_descends(origin, NULL, C1, C3), 0);  /* older */
	assert_int_equal(gitsrc_descends(origin, NULL, C4, C3), 0);  /* a sibling */
	assert_int_equal(gitsrc_descends(origin, NULL, U, C3), 0);   /* unrelated */
	assert_int_equal(gitsrc_descends(origin, NULL, C3, U), 0);
	assert_int_equal(gitsrc_descends(origin, NULL, "0123456789abcdef0123456789abcdef01234567", C1),
			 FERRY_ENOTFOUND);
	assert_int_equal(gitsrc_descends(origin, NULL, C1, "main"), FERRY_EINVALID);
}

/* Asserts that path at commit reads as want. */
static void reads(const char *repo, const char *cache, const char *commit_id, const char *path,
		  const char *want)
{
	char *out = NULL;
	size_t len = 0;

	if (gitsrc_read(&out, &len, repo, cache, commit_id, path) != 0)
		fail_msg("read %s at %.8s: %s", path, commit_id, ferry_error_last());
	assert_int_equal(len, strlen(want));
	assert_string_equal(out, want);
	free(out);
}

static void reads_not(int want, const char *commit_id, const char *path)
{
	char *out = (char *)&out;
	size_t len = 7;

	assert_int_equal(gitsrc_read(&out, &len, origin, NULL, commit_id, path), want);
	assert_null(out);
	assert_int_equal(len, 0);
}

static void test_gitsrc__read(void **state)
{
	(void)state;
	reads(origin, NULL, C1, "README", "one\n");
	reads(origin, NULL, C3, "README", "two\n");
	reads(origin, NULL, C1, "data/nested/deep.txt", "deep\n");
	reads(origin, NULL, C1, "./data//nested/deep.txt", "deep\n");
	reads(origin, NULL, C1, "workflows/x.yaml", "name: x\n");
	reads(origin, NULL, C1, "link", "one\n"); /* a symlink inside the tree, followed */
	reads(origin, NULL, C3, "run.sh", "#!/bin/sh\necho hi\n");
	reads(work, NULL, C3, "new.txt", "new\n");

	reads_not(FERRY_ENOTFOUND, C1, "new.txt"); /* only from C3 on */
	assert_non_null(strstr(ferry_error_last(), "no file new.txt in commit"));
	reads_not(FERRY_ENOTFOUND, C1, "data/missing");
	reads_not(FERRY_EINVALID, C1, "../x");
	assert_non_null(strstr(ferry_error_last(), "give a relative path inside the repository"));
	reads_not(FERRY_EINVALID, C1, "/etc/passwd");
	reads_not(FERRY_EINVALID, C1, "data/../README");
	reads_not(FERRY_EINVALID, C1, "");
	reads_not(FERRY_EINVALID, C1, ".");
	reads_not(FERRY_EINVALID, C1, "data");
	assert_non_null(strstr(ferry_error_last(), "data is a directory in commit"));
	reads_not(FERRY_EINVALID, C4, "evil"); /* a symlink to /etc/passwd is not followed */
	assert_non_null(strstr(ferry_error_last(), "evil is a symlink that leaves the repository"));
	reads_not(FERRY_EINVALID, C4, "big.bin");
	assert_non_null(strstr(ferry_error_last(),
			       "big.bin is 17000000 bytes; files are limited to 16777216 bytes here"));
	reads_not(FERRY_ENOTFOUND, "0123456789abcdef0123456789abcdef01234567", "README");
}

/* Counts the entries of dir whose names start with prefix. */
static int count_prefixed(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	closedir(d);
	return n;
}

static void test_gitsrc__checkout(void **state)
{
	char *dir = xasprintf("%s/co/%s", T, C1), *p, *text = NULL, *parent = xasprintf("%s/co", T);
	char link[64];
	struct stat st;
	size_t len;
	ssize_t n;
	int fd;

	(void)state;
	if (gitsrc_checkout(origin, NULL, C1, dir) != 0)
		fail_msg("checkout: %s", ferry_error_last());
	p = xasprintf("%s/README", dir);
	assert_int_equal(file_read(&text, &len, p), 0);
	assert_string_equal(text, "one\n");
	assert_int_equal(lstat(p, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0644);
	free(text);
	free(p);
	p = xasprintf("%s/run.sh", dir);
	assert_int_equal(lstat(p, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0755);
	free(p);
	p = xasprintf("%s/link", dir);
	assert_int_equal(lstat(p, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	n = readlink(p, link, sizeof(link) - 1);
	assert_int_equal(n, 6);
	link[n] = '\0';
	assert_string_equal(link, "README");
	free(p);
	p = xasprintf("%s/data/nested/deep.txt", dir);
	assert_int_equal(file_read(&text, &len, p), 0);
	assert_string_equal(text, "deep\n");
	free(text);
	free(p);
	/* a work tree of C1 (a shallow clone's): git answers for it, with nothing changed */
	{
		char head[41];
		capture(head, "git -C '%s' rev-parse HEAD", dir);
		assert_string_equal(head, C1);
		/* (capture reads 40 characters: no line of git status is 40 zeros) */
		capture(head, "git -C '%s' status --porcelain | wc -l | tr -d ' ' | "
			"sed 's/^0$/0000000000000000000000000000000000000000/'", dir);
		assert_string_equal(head, "0000000000000000000000000000000000000000");
		p = xasprintf("%s/.git/shallow", dir);
		assert_int_equal(file_read(&text, &len, p), 0);
		assert_int_equal(strncmp(text, C1, 40), 0);
		free(text);
		free(p);
	}
	p = xasprintf("%s/new.txt", dir); /* C3's file is not in C1 */
	assert_int_equal(lstat(p, &st), -1);
	free(p);
	assert_int_equal(count_prefixed(parent, C1), 1); /* no temporary left */

	/* a second call reuses the directory as it is */
	p = xasprintf("%s/marker", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(fd_write_all(fd, "m", 1), 0);
	close(fd);
	assert_int_equal(gitsrc_checkout(origin, NULL, C1, dir), 0);
	assert_int_equal(lstat(p, &st), 0);
	free(p);
	free(dir);

	/* an escaping symlink fails the checkout and leaves nothing behind */
	dir = xasprintf("%s/co/%s", T, C4);
	assert_int_equal(gitsrc_checkout(origin, NULL, C4, dir), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "the symlink evil points outside the checkout; Ferry "
			    "writes only links that stay inside it");
	assert_int_equal(lstat(dir, &st), -1);
	assert_int_equal(count_prefixed(parent, C4), 0);
	free(dir);
	dir = xasprintf("%s/co/missing", T);
	assert_int_equal(gitsrc_checkout(origin, NULL, "0123456789abcdef0123456789abcdef01234567", dir),
			 FERRY_ENOTFOUND);
	assert_int_equal(lstat(dir, &st), -1);
	free(dir);
	free(parent);
}

/*
 * Links written to disk: "../README" and a path through a link to ".." stay
 * inside; "sub/up/.." is "sub" by its letters but the parent of the
 * checkout by the kernel's reading (sub/up is ".."), so it is refused.
 */
static void test_gitsrc__checkout_link_chains(void **state)
{
	char links[41], links2[41], *dir, *p, *text = NULL;
	struct stat st;
	size_t len;

	(void)state;
	sh("git -C work checkout -q -b links main && mkdir -p work/sub && ln -s .. work/sub/up && "
	   "ln -s ../README work/sub/ok && ln -s sub/up/README work/ok2 && ln -s loop2 work/loop1 && ln -s loop1 work/loop2 && git -C work add -A && "
	   "git -C work commit -q -m links && git -C work checkout -q -b links2 && "
	   "ln -s sub/up/.. work/trick && git -C work add -A && git -C work commit -q -m trick && "
	   "git -C work push -q origin links links2 && git -C work checkout -q main");
	capture(links, "git -C work rev-parse links");
	capture(links2, "git -C work rev-parse links2");
	dir = xasprintf("%s/co/%s", T, links);
	if (gitsrc_checkout(origin, NULL, links, dir) != 0)
		fail_msg("checkout: %s", ferry_error_last());
	p = xasprintf("%s/ok2", dir);
	assert_int_equal(file_read(&text, &len, p), 0);
	assert_string_equal(text, "two\n");
	free(text);
	free(p);
	p = xasprintf("%s/sub/ok", dir);
	assert_int_equal(file_read(&text, &len, p), 0);
	assert_string_equal(text, "two\n");
	free(text);
	free(p);
	reads(origin, NULL, links, "sub/ok", "two\n");
	reads_not(FERRY_EINVALID, links, "loop1");
	assert_non_null(strstr(ferry_error_last(), "more than 8 symlinks to follow"));
	free(dir);
	dir = xasprintf("%s/co/%s", T, links2);
	assert_int_equal(gitsrc_checkout(origin, NULL, links2, dir), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "the symlink trick points outside the checkout"));
	assert_int_equal(lstat(dir, &st), -1);
	free(dir);
}

struct co_race {
	const char *dir;
	int rc;
};

static void *race_checkout(void *arg)
{
	struct co_race *r = arg;

	r->rc = gitsrc_checkout(origin, NULL, C3, r->dir);
	return NULL;
}

/* Four threads check out one commit into one directory at once: all succeed, one tree, no temporaries. */
static void test_gitsrc__checkout_concurrent(void **state)
{
	char *parent = xasprintf("%s/co-race", T), *dir = xasprintf("%s/%s", parent, C3), *p, *text = NULL;
	struct co_race r[4];
	pthread_t th[4];
	size_t len;

	(void)state;
	for (int i = 0; i < 4; i++) {
		r[i] = (struct co_race){ .dir = dir };
		assert_int_equal(pthread_create(&th[i], NULL, race_checkout, &r[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(r[i].rc, 0);
	assert_int_equal(count_prefixed(parent, C3), 1);
	p = xasprintf("%s/new.txt", dir);
	assert_int_equal(file_read(&text, &len, p), 0);
	assert_string_equal(text, "new\n");
	free(text);
	free(p);
	free(dir);
	free(parent);
}

static void test_gitsrc__commit_info(void **state)
{
	json_t *info = NULL;
	char *s, B[41];

	(void)state;
	assert_int_equal(gitsrc_commit_info(&info, origin, NULL, C1), 0);
	s = xasprintf("{\"commit\": \"%s\", \"short\": \"%.7s\", \"author\": \"Test Author\", "
		      "\"email\": \"author@example.org\", \"time\": \"2026-01-02T03:04:05Z\", "
		      "\"subject\": \"first commit\"}", C1, C1);
	{
		char *got = json_dumps(info, JSON_SORT_KEYS), *want;
		json_t *w = json_loads(s, 0, NULL);

		want = json_dumps(w, JSON_SORT_KEYS);
		assert_string_equal(got, want);
		free(got);
		free(want);
		json_decref(w);
	}
	free(s);
	json_decref(info);
	/*
	 * bytes that are not UTF-8 become U+FFFD, so the JSON stays valid; git
	 * commit would re-encode them as Latin-1, so the object is written raw
	 */
	capture(B, "printf 'tree %%s\\nauthor A <a@x> 1767657600 +0000\\ncommitter A <a@x> 1767657600 +0000"
		"\\n\\nunrelated \\377 bytes\\n' $(git -C work rev-parse %s^{tree}) | "
		"git -C origin.git hash-object -t commit -w --stdin", U);
	assert_int_equal(gitsrc_commit_info(&info, origin, NULL, B), 0);
	assert_string_equal(json_string_value(json_object_get(info, "subject")), "unrelated \xef\xbf\xbd bytes");
	assert_string_equal(json_string_value(json_object_get(info, "time")), "2026-01-06T00:00:00Z");
	json_decref(info);
	info = NULL;
	assert_int_equal(gitsrc_commit_info(&info, origin, NULL, "0123456789abcdef0123456789abcdef01234567"),
			 FERRY_ENOTFOUND);
	assert_null(info);
}

static void test_gitsrc__mirror(void **state)
{
	char *url, *cache = xasprintf("%s/cache", T), *mirror, *p, oid[41], hex[65], C5[41];
	struct stat st;
	char *out = NULL;
	size_t len;

	(void)state;
	sh("cp -r origin.git mo.git");
	url = xasprintf("file://%s/mo.git", T);
	mirror = gitsrc_mirror_path(url, cache);
	sha256_hex(hex, url, strlen(url));
	p = xasprintf("%s/%s", cache, hex);
	assert_string_equal(mirror, p);
	free(p);
	assert_int_equal(gitsrc_is_url(url), 1);
	assert_int_equal(gitsrc_is_url("git@github.com:org/repo.git"), 1);
	assert_int_equal(gitsrc_is_url(origin), 0);
	assert_int_equal(gitsrc_is_url("./dir:with@colon"), 0);

	assert_int_equal(stat(mirror, &st), -1);
	if (gitsrc_resolve(oid, url, "main", cache) != 0)
		fail_msg("resolve: %s", ferry_error_last());
	assert_string_equal(oid, C3);
	/* a bare mirror under cache_dir/<sha256 of the url>, and nothing else but its lock */
	p = xasprintf("%s/HEAD", mirror);
	assert_int_equal(stat(p, &st), 0);
	free(p);
	assert_int_equal(count_prefixed(cache, hex), 2);
	resolves_in(url, cache, "HEAD", C3);
	resolves_in(url, cache, "v1", C1);
	resolves_in(url, cache, "dev", C4);
	assert_int_equal(gitsrc_read(&out, &len, url, cache, C1, "README"), 0);
	assert_string_equal(out, "one\n");
	free(out);

	/* a new commit pushed to the origin: unseen until the next resolve fetches it */
	sh("git -C work checkout -q -b five main && printf 'five\\n' > work/README && git -C work commit -q -am five"
	   " && git -C work push -q '%s' five:main && git -C work checkout -q main", url);
	capture(C5, "git -C work rev-parse five");
	assert_int_equal(gitsrc_read(&out, &len, url, cache, C5, "README"), FERRY_ENOTFOUND);
	assert_int_equal(gitsrc_resolve(oid, url, "main", cache), 0);
	assert_string_equal(oid, C5);
	assert_int_equal(gitsrc_descends(url, cache, C5, C3), 1);
	assert_int_equal(gitsrc_read(&out, &len, url, cache, C5, "README"), 0);
	assert_string_equal(out, "five\n");
	free(out);

	/* a force-push back to an older commit and a deleted branch show as they are */
	sh("git -C work push -q -f '%s' %s:refs/heads/main :refs/heads/dev", url, C1);
	assert_int_equal(gitsrc_resolve(oid, url, "main", cache), 0);
	assert_string_equal(oid, C1);
	assert_int_equal(gitsrc_descends(url, cache, oid, C5), 0); /* older: never a run */
	assert_int_equal(gitsrc_resolve(oid, url, "dev", cache), FERRY_ENOTFOUND);

	/* a URL with no repository behind it */
	free(url);
	url = xasprintf("file://%s/no-such.git", T);
	assert_int_not_equal(gitsrc_resolve(oid, url, "main", cache), 0);
	free(mirror);
	mirror = gitsrc_mirror_path(url, cache);
	assert_int_equal(stat(mirror, &st), -1); /* no half mirror left */
	sha256_hex(hex, url, strlen(url));
	assert_int_equal(count_prefixed(cache, hex), 1); /* the lock file only */
	free(mirror);
	free(url);
	free(cache);
}

struct race {
	const char *url, *cache;
	char oid[41];
	int rc;
};

static void *race_resolve(void *arg)
{
	struct race *r = arg;

	r->rc = gitsrc_resolve(r->oid, r->url, "main", r->cache);
	return NULL;
}

/* Six threads resolve one URL at once on an empty cache: one mirror, all answers equal. */
static void test_gitsrc__mirror_concurrent(void **state)
{
	char *url = xasprintf("file://%s", origin), *cache = xasprintf("%s/cache-race", T), hex[65];
	struct race r[6];
	pthread_t th[6];

	(void)state;
	for (int i = 0; i < 6; i++) {
		r[i] = (struct race){ .url = url, .cache = cache };
		assert_int_equal(pthread_create(&th[i], NULL, race_resolve, &r[i]), 0);
	}
	for (int i = 0; i < 6; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(r[i].rc, 0);
		assert_string_equal(r[i].oid, C3);
	}
	sha256_hex(hex, url, strlen(url));
	assert_int_equal(count_prefixed(cache, hex), 2); /* the mirror and its lock, no temporaries */
	free(url);
	free(cache);
}

/* A mirror whose lock another holder keeps: the fetch gives up after its bound, with a clear message. */
static void test_gitsrc__mirror_lock_bounded(void **state)
{
	char *url = xasprintf("file://%s", origin), *cache = xasprintf("%s/cache-lock", T);
	char *mirror = gitsrc_mirror_path(url, cache), *lock = xasprintf("%s.lock", mirror), oid[41];
	int64_t t0;
	int fd;

	(void)state;
	assert_int_equal(mkdir_p(cache, 0755), 0);
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_EX), 0);
	gitsrc_set_fetch_timeout(200);
	t0 = clock_mono_ms();
	assert_int_equal(gitsrc_resolve(oid, url, "main", cache), FERRY_ERROR);
	assert_true(clock_mono_ms() - t0 >= 1200);
	assert_true(clock_mono_ms() - t0 < 5000);
	assert_non_null(strstr(ferry_error_last(), "stayed locked for 1200 ms"));
	close(fd); /* released: the next call goes through */
	gitsrc_set_fetch_timeout(0);
	assert_int_equal(gitsrc_resolve(oid, url, "main", cache), 0);
	assert_string_equal(oid, C3);
	free(url);
	free(cache);
	free(mirror);
	free(lock);
}

/* A fetch that outlives its bound is cancelled, and leaves no half mirror. */
static void test_gitsrc__mirror_fetch_timeout(void **state)
{
	char *url = xasprintf("file://%s", origin), *cache = xasprintf("%s/cache-timeout", T);
	char *mirror = gitsrc_mirror_path(url, cache), hex[65], oid[41];
	struct stat st;

	(void)state;
	gitsrc_set_fetch_timeout(1);
	assert_int_equal(gitsrc_resolve(oid, url, "main", cache), FERRY_ERROR);
	gitsrc_set_fetch_timeout(0);
	assert_non_null(strstr(ferry_error_last(), "timed out after 1 ms"));
	assert_int_equal(stat(mirror, &st), -1);
	sha256_hex(hex, url, strlen(url));
	assert_int_equal(count_prefixed(cache, hex), 1); /* the lock file only */
	assert_int_equal(gitsrc_resolve(oid, url, "main", cache), 0);
	assert_string_equal(oid, C3);
	free(url);
	free(cache);
	free(mirror);
}

/* A force-push on a local bare repository, read in place. */
static void test_gitsrc__force_push_local(void **state)
{
	char *forced = xasprintf("%s/forced.git", T);

	(void)state;
	sh("cp -r origin.git forced.git");
	resolves(forced, "main", C3);
	sh("git -C work push -q -f '%s' %s:refs/heads/main", forced, C1);
	resolves(forced, "main", C1);
	assert_int_equal(gitsrc_descends(forced, NULL, C1, C3), 0);
	assert_int_equal(gitsrc_descends(forced, NULL, C3, C1), 1);
	free(forced);
}

static void test_gitsrc__signature(void **state)
{
	/*
	 * GitHub's documented example, and openssl's answer:
	 * printf %s 'Hello, World!' | openssl dgst -sha256 -hmac "It's a Secret to Everybody"
	 * → 757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17
	 */
	const char *secret = "It's a Secret to Everybody", *body = "Hello, World!";
	const char *good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
	const char *upper = "sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17";
	/* printf %s '{"ref":"refs/heads/main","after":"abc"}' | openssl dgst -sha256 -hmac s3cret */
	const char *push = "{\"ref\":\"refs/heads/main\",\"after\":\"abc\"}";
	const char *push_sig = "sha256=b869a7e1cb2f62fadd867287913b93eef322e319d9f3db070d38e49715868343";

	(void)state;
	assert_int_equal(gitsrc_signature_ok(secret, body, strlen(body), good), 1);
	assert_int_equal(gitsrc_signature_ok(secret, body, strlen(body), upper), 1);
	assert_int_equal(gitsrc_signature_ok("s3cret", push, strlen(push), push_sig), 1);
	assert_int_equal(gitsrc_signature_ok("wrong secret", body, strlen(body), good), 0);
	/* one digit off, at the end and at the start */
	assert_int_equal(gitsrc_signature_ok(secret, body, strlen(body),
					     "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e16"),
			 0);
	assert_int_equal(gitsrc_signature_ok(secret, body, strlen(body),
					     "sha256=857107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"),
			 0);
	assert_int_equal(gitsrc_signature_ok(secret, "Hello, World?", 13, good), 0); /* body changed */
	assert_int_equal(gitsrc_signature_ok(secret, body, strlen(body) - 1, good), 0);
	assert_int_equal(gitsrc_signature_ok(secret, body, strlen(body),
					     "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1"),
			 0); /* truncated */
	assert_int_equal(gitsrc_signature_ok(secret, body, strlen(body),
					     "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"),
			 0); /* no prefix */
	assert_int_equal(gitsrc_signature_ok(secret, body, strlen(body),
					     "sha1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"),
			 0);
	assert_int_equal(gitsrc_signature_ok(secret, body, strlen(body),
					     "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17 "),
			 0); /* trailing bytes */
	assert_int_equal(gitsrc_signature_ok(secret, body, strlen(body),
					     "sha256=z57107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"),
			 0);
	assert_int_equal(gitsrc_signature_ok(secret, body, strlen(body), NULL), 0);
	assert_int_equal(gitsrc_signature_ok(secret, body, strlen(body), ""), 0);
	assert_int_equal(gitsrc_signature_ok("", body, strlen(body), good), 0);
	assert_int_equal(gitsrc_signature_ok(NULL, body, strlen(body), good), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gitsrc__resolve),
		cmocka_unit_test(test_gitsrc__descends),
		cmocka_unit_test(test_gitsrc__read),
		cmocka_unit_test(test_gitsrc__checkout),
		cmocka_unit_test(test_gitsrc__checkout_link_chains),
		cmocka_unit_test(test_gitsrc__checkout_concurrent),
		cmocka_unit_test(test_gitsrc__commit_info),
		cmocka_unit_test(test_gitsrc__mirror),
		cmocka_unit_test(test_gitsrc__mirror_concurrent),
		cmocka_unit_test(test_gitsrc__mirror_lock_bounded),
		cmocka_unit_test(test_gitsrc__mirror_fetch_timeout),
		cmocka_unit_test(test_gitsrc__force_push_local),
		cmocka_unit_test(test_gitsrc__signature),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}

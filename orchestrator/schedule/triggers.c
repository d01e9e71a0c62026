/*
 * triggers — data and git triggers (triggers.h; the design is in
 * schedules.md).
 *
 * Data. Each look lists the directory (path, size, mtime; names starting
 * with "." and ending in .tmp, .part, .partial, .crdownload or "~", and the
 * trigger's ignore patterns, are left out: that is how copy tools name a
 * file before it is whole). A listing that differs from the previous look
 * restarts the quiet period; once it has held still for `quiet`, it is
 * compared with the trigger's state — what its last run covered, with each
 * file's sha256 — and the files whose size or mtime moved are hashed. Only
 * a change of content counts (a touch updates the state quietly). While a
 * run the trigger started is unfinished nothing fires: the changes pile up
 * against the state and start one run when it ends, which lists them all.
 * The first look at a directory takes its baseline: files written since the
 * trigger started watching (its registration) are new and start a run, the
 * others start nothing.
 *
 * Git. Each look resolves the branch (fetching a mirror for a URL); a
 * commit that descends from the one last handled starts a run of the
 * workflow in a checkout of that commit, keyed by the commit id; a commit
 * that does not (a force-push back) is recorded as skipped and never run.
 * The webhook makes the look happen at once.
 *
 * The looks' memory (the previous listing, when it last changed) lives
 * here, on the leader, for the rounds to come; a new leader starts it
 * afresh, which costs one quiet period and can never fire twice, since
 * the state in the database is the judge.
 */
#include "schedule/triggers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/fingerprint.h"
#include "schedule/gitsrc.h"
#include "runs/runs.h"
#include "store/store.h"
#include "store/store_schedules.h"
#include "exec/exec.h"
#include "lib/util.h"

/* Most files a watched directory may hold, and how deep it may nest. */
#define DATA_MAX_FILES 100000
#define DATA_MAX_DEPTH 32
/* Most file names a run's params and origin list per kind of change. */
#define LIST_MAX 1000

/* The text of a JSON string, or def. */
static const char *text_or(const json_t *v, const char *def)
{
	const char *s = json_string_value(v);
	return s ? s : def;
}

/* ---- a directory's listing -------------------------------------------------- */

struct fent {
	char *rel;
	int64_t size, mtime_ns;
};

struct listing {
	struct fent *v;
	size_t n, cap;
};

static void listing_dispose(struct listing *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].rel);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static int ignored(const char *name, const char *rel, const json_t *ignore)
{
	static const char *const partial[] = {".tmp", ".part", ".partial", ".crdownload", "~"};
	size_t n = strlen(name), i;
	const json_t *g;

	if (name[0] == '.')
		return 1;
	for (i = 0; i < sizeof(partial) / sizeof(partial[0]); i++) {
		size_t m = strlen(partial[i]);
		if (n > m && strcmp(name + n - m, partial[i]) == 0)
			return 1;
	}
	json_array_foreach(ignore, i, g) {
		const char *pat = json_string_value(g);
		if (pat && (fnmatch(pat, rel, FNM_PATHNAME) == 0 || fnmatch(pat, name, 0) == 0))
			return 1;
	}
	return 0;
}

static int list_dir(struct listing *l, int dfd, const char *prefix, const json_t *ignore, int depth)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;
	int error = FERRY_OK;

	if (d == NULL) {
		close(dfd);
		ferry_error_set("cannot read %s: %s", prefix[0] ? prefix : ".", strerror(errno));
		return FERRY_ERROR;
	}
	while (error == FERRY_OK && (de = readdir(d)) != NULL) {
		struct stat st;
		char *rel;
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue; /* gone since readdir */
		rel = prefix[0] ? xasprintf("%s/%s", prefix, de->d_name) : xstrdup(de->d_name);
		if (ignored(de->d_name, rel, ignore)) {
			free(rel);
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			int sub;
			if (depth >= DATA_MAX_DEPTH) {
				ferry_error_set("directories nested deeper than %d levels at %s", DATA_MAX_DEPTH, rel);
				error = FERRY_ERROR;
			} else if ((sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0) {
				error = list_dir(l, sub, rel, ignore, depth + 1);
			}
			free(rel);
			continue;
		}
		if (!S_ISREG(st.st_mode)) { /* links are not followed out of the directory */
			free(rel);
			continue;
		}
		if (l->n >= DATA_MAX_FILES) {
			ferry_error_set("more than %d files", DATA_MAX_FILES);
			free(rel);
			error = FERRY_ERROR;
			break;
		}
		if (l->n == l->cap) {
			l->cap = l->cap ? l->cap * 2 : 64;
			l->v = xrealloc(l->v, l->cap * sizeof(*l->v));
		}
		l->v[l->n].rel = rel;
		l->v[l->n].size = (int64_t)st.st_size;
		l->v[l->n].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
		l->n++;
	}
	closedir(d);
	return error;
}

static int fent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct fent *)a)->rel, ((const struct fent *)b)->rel);
}

static int listing_read(struct listing *l, const char *dir, const json_t *ignore)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), error;

	if (dfd < 0) {
		ferry_error_set("cannot open %s: %s", dir, strerror(errno));
		return errno == ENOENT ? FERRY_ENOTFOUND : FERRY_ERROR;
	}
	if ((error = list_dir(l, dfd, "", ignore, 0)) < 0)
		return error;
	if (l->n > 1) /* an empty directory leaves l->v NULL, which qsort may not take */
		qsort(l->v, l->n, sizeof(*l->v), fent_cmp);
	return FERRY_OK;
}

static int listing_equal(const struct listing *a, const struct listing *b)
{
	if (a->n != b->n)
		return 0;
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->v[i].rel, b->v[i].rel) != 0 || a->v[i].size != b->v[i].size ||
		    a->v[i].mtime_ns != b->v[i].mtime_ns)
			return 0;
	return 1;
}

/* ---- the looks' memory, per trigger, on the leader -------------------------- */

struct watch {
	int64_t id;
	char *spec;              /* the spec the memory is about: another one starts afresh */
	struct listing prev;     /* the last look's listing (data) */
	int64_t changed_mono;    /* when it last differed from the look before */
	int64_t next_mono;       /* when to look again */
	char *warned;            /* the last problem logged, so it is logged once */
};

static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static struct watch *watches;
static size_t nwatches, capwatches;

/* The memory of trigger id about spec (created or reset); under watch_mu. */
static struct watch *watch_of(int64_t id, const char *spec)
{
	struct watch *w = NULL;

	for (size_t i = 0; i < nwatches; i++)
		if (watches[i].id == id)
			w = &watches[i];
	if (w == NULL) {
		if (nwatches == capwatches) {
			capwatches = capwatches ? capwatches * 2 : 16;
			watches = xrealloc(watches, capwatches * sizeof(*watches));
		}
		w = &watches[nwatches++];
		memset(w, 0, sizeof(*w));
		w->id = id;
	}
	if (w->spec == NULL || strcmp(w->spec, spec) != 0) {
		free(w->spec), free(w->warned);
		listing_dispose(&w->prev);
		w->spec = xstrdup(spec);
		w->warned = NULL;
		w->changed_mono = 0;
		w->next_mono = 0;
	}
	return w;
}

/* Logs a trigger's problem once (until it changes). */
static void warn_once(struct watch *w, const char *workflow, const char *name, const char *msg)
{
	if (w->warned && strcmp(w->warned, msg) == 0)
		return;
	free(w->warned);
	w->warned = xstrdup(msg);
	flog_warn("trigger %s/%s: %s", workflow, name, msg);
}

/* dir of a trigger: absolute, or under the workflow's registered directory. */
static char *resolve_path(const char *p, const char *workdir)
{
	if (p == NULL)
		return NULL;
	if (p[0] == '/')
		return xstrdup(p);
	if (workdir == NULL)
		return NULL;
	return xasprintf("%s/%s", workdir, p);
}

/* ---- data triggers ------------------------------------------------------------ */

static json_t *str_list(json_t *a)
{
	json_t *out = json_array();
	size_t i;
	json_t *v;

	json_array_foreach(a, i, v) {
		if (i >= LIST_MAX)
			break;
		json_array_append(out, v);
	}
	return out;
}

/*
 * The new state from the listing and the old state: each file's sha256
 * (hashed only where size or mtime moved), and the lists of what was
 * added, changed (content) and removed. *any: some content changed.
 */
static int data_diff(json_t **state, json_t **added, json_t **changed, json_t **removed, int *any, const char *dir,
		     const struct listing *l, const json_t *old)
{
	const json_t *ofiles = json_object_get(old, "files");
	json_t *files = json_object(), *seen = json_object();
	struct sbuf_fp {
		char *p;
		size_t len, cap;
	} fp = {0};
	char digest[65];
	const char *k;
	json_t *v;

	*added = json_array(), *changed = json_array(), *removed = json_array();
	*any = 0;
	for (size_t i = 0; i < l->n; i++) {
		const struct fent *f = &l->v[i];
		const json_t *o = json_object_get(ofiles, f->rel);
		char sha[65];
		char *path, *line;
		size_t n;
		if (o && json_integer_value(json_array_get(o, 0)) == f->size &&
		    json_integer_value(json_array_get(o, 1)) == f->mtime_ns) {
			snprintf(sha, sizeof(sha), "%s", text_or(json_array_get(o, 2), ""));
		} else {
			path = xasprintf("%s/%s", dir, f->rel);
			int error = fingerprint_path(sha, path);
			free(path);
			if (error == FERRY_ENOTFOUND)
				continue; /* removed since the listing: the next look sees it */
			if (error < 0) {
				json_decref(files), json_decref(seen);
				free(fp.p);
				return error;
			}
			if (o == NULL)
				json_array_append_new(*added, json_string(f->rel));
			else if (strcmp(text_or(json_array_get(o, 2), ""), sha) != 0)
				json_array_append_new(*changed, json_string(f->rel));
		}
		json_object_set_new(files, f->rel, json_pack("[I,I,s]", (json_int_t)f->size, (json_int_t)f->mtime_ns, sha));
		json_object_set_new(seen, f->rel, json_true());
		line = xasprintf("%s\t%lld\t%s\n", f->rel, (long long)f->size, sha);
		n = strlen(line);
		if (fp.len + n + 1 > fp.cap) {
			fp.cap = (fp.len + n + 1) * 2;
			fp.p = xrealloc(fp.p, fp.cap);
		}
		memcpy(fp.p + fp.len, line, n);
		fp.len += n;
		free(line);
	}
	json_object_foreach((json_t *)ofiles, k, v)
		if (json_object_get(seen, k) == NULL)
			json_array_append_new(*removed, json_string(k));
	*any = json_array_size(*added) + json_array_size(*changed) + json_array_size(*removed) > 0;
	sha256_hex(digest, fp.p ? fp.p : "", fp.len);
	*state = json_pack("{s:I,s:s,s:o}", "seq", (json_int_t)(json_integer_value(json_object_get(old, "seq")) +
								    (old != NULL && *any ? 1 : 0)),
			   "fingerprint", digest, "files", files);
	json_decref(seen);
	free(fp.p);
	return FERRY_OK;
}

/* Starts the triggered run; 1 started, 0 not, < 0 error. */
static int data_fire(PGconn *conn, const json_t *t, const char *dir, json_t *state, json_t *added, json_t *changed,
		     json_t *removed, int64_t seq)
{
	const char *workflow = json_string_value(json_object_get(t, "workflow"));
	const char *name = json_string_value(json_object_get(t, "name"));
	const char *fp = json_string_value(json_object_get(state, "fingerprint"));
	char *key = xasprintf("%s:%lld", fp, (long long)(seq + 1)), *state_txt, *detail_txt;
	char *actor = xasprintf("trigger:%s/%s", workflow, name), *a_txt, *c_txt, *r_txt;
	json_t *detail = json_pack("{s:s,s:s,s:o,s:o,s:o}", "path", dir, "fingerprint", fp, "added", str_list(added),
				   "changed", str_list(changed), "removed", str_list(removed));
	json_t *origin = json_pack("{s:O}", "data", detail), *offered;
	struct trigger_occasion o = {.id = json_integer_value(json_object_get(t, "id")), .seq = seq, .key = key,
				     .via = "poll"};
	struct runs_new rn;
	cfg_errors errs = {0};
	int64_t run = 0;
	int error;

	a_txt = json_dumps(json_object_get(detail, "added"), JSON_COMPACT);
	c_txt = json_dumps(json_object_get(detail, "changed"), JSON_COMPACT);
	r_txt = json_dumps(json_object_get(detail, "removed"), JSON_COMPACT);
	offered = json_pack("{s:s,s:s,s:s,s:s,s:s}", "data_path", dir, "data_fingerprint", fp, "data_added", a_txt,
			    "data_changed", c_txt, "data_removed", r_txt);
	state_txt = json_dumps(state, JSON_COMPACT);
	detail_txt = json_dumps(detail, JSON_COMPACT);
	o.state = state_txt;
	o.detail = detail_txt;
	memset(&rn, 0, sizeof(rn));
	rn.workflow = workflow;
	rn.offered = offered;
	rn.trigger = "data";
	rn.actor = actor;
	rn.origin = origin;
	rn.trigger_id = o.id;
	rn.occasion = store_trigger_occasion;
	rn.occasion_arg = &o;
	error = runs_create(&run, conn, &rn, &errs);
	if (error == 2) {
		error = o.dup ? store_trigger_duplicate(conn, o.id, key) : FERRY_OK;
	} else if (error < 0 && error != FERRY_EDB) {
		char why[512];
		snprintf(why, sizeof(why), "not started: %s%s%s", ferry_error_last(), errs.len ? ": " : "",
			 errs.len ? errs.items[0] : "");
		flog_warn("trigger %s/%s: %s", workflow, name, why);
		/* the change is accounted for: the next change starts the next run */
		error = store_trigger_skip(conn, o.id, key, why, detail_txt, "poll", seq, state_txt);
	} else if (error == FERRY_OK) {
		flog_info("trigger %s/%s: run %lld for %zu added, %zu changed, %zu removed in %s", workflow, name,
			  (long long)run, json_array_size(added), json_array_size(changed), json_array_size(removed), dir);
		error = 1;
	}
	cfg_errors_dispose(&errs);
	json_decref(origin), json_decref(detail), json_decref(offered);
	free(key), free(actor), free(a_txt), free(c_txt), free(r_txt), free(state_txt), free(detail_txt);
	return error;
}

/* A trigger's state: NULL before its first look (SQL NULL comes as JSON null). */
static const json_t *state_of(const json_t *t)
{
	const json_t *s = json_object_get(t, "state");
	return json_is_object(s) ? s : NULL;
}

static int data_look(PGconn *conn, const json_t *t, struct watch *w, int64_t now)
{
	const json_t *spec = json_object_get(t, "spec"), *old = state_of(t);
	const char *workflow = json_string_value(json_object_get(t, "workflow"));
	const char *name = json_string_value(json_object_get(t, "name"));
	char *dir = resolve_path(json_string_value(json_object_get(spec, "path")),
				 json_string_value(json_object_get(t, "workdir")));
	int64_t quiet = json_integer_value(json_object_get(spec, "quiet_ms"));
	struct listing l = {0};
	json_t *state = NULL, *added = NULL, *changed = NULL, *removed = NULL;
	int error = FERRY_OK, any = 0;
	int64_t seq = old ? json_integer_value(json_object_get(old, "seq")) : -1;

	w->next_mono = now + TRIGGERS_DATA_EVERY_MS;
	if (dir == NULL) {
		warn_once(w, workflow, name, "a relative path needs the workflow registered from a directory");
		return FERRY_OK;
	}
	{
		/* what a run would be started from: only what its jobs could read (exec_user.c) */
		char *real = realpath(dir, NULL);
		int ok = real == NULL || exec_user_may_read(real, "data trigger path",
							    json_string_value(json_object_get(t, "workdir")), NULL);
		free(real);
		if (!ok) {
			warn_once(w, workflow, name, ferry_error_last());
			free(dir);
			return FERRY_OK;
		}
	}
	if ((error = listing_read(&l, dir, json_object_get(spec, "ignore"))) < 0) {
		warn_once(w, workflow, name, ferry_error_last());
		listing_dispose(&l);
		free(dir);
		return FERRY_OK; /* a missing directory is watched until it exists */
	}
	if (w->changed_mono == 0 || !listing_equal(&l, &w->prev)) {
		listing_dispose(&w->prev);
		w->prev = l;
		w->changed_mono = now;
		free(dir);
		return FERRY_OK; /* moving: the quiet period starts again */
	}
	listing_dispose(&l);
	if (now - w->changed_mono < quiet || json_is_true(json_object_get(t, "paused")))
		goto out;
	if (json_is_true(json_object_get(t, "running")))
		goto out; /* coalesced: what changes now goes into the run after this one */
	if (old != NULL) { /* nothing moved since the state: no hashing */
		const json_t *files = json_object_get(old, "files");
		size_t same = 0;
		for (size_t i = 0; i < w->prev.n; i++) {
			const json_t *o = json_object_get(files, w->prev.v[i].rel);
			same += o && json_integer_value(json_array_get(o, 0)) == w->prev.v[i].size &&
				json_integer_value(json_array_get(o, 1)) == w->prev.v[i].mtime_ns;
		}
		if (same == w->prev.n && same == json_object_size(files))
			goto out;
	}
	if ((error = data_diff(&state, &added, &changed, &removed, &any, dir, &w->prev, old)) < 0) {
		warn_once(w, workflow, name, ferry_error_last());
		error = FERRY_OK;
		goto out;
	}
	if (old == NULL && any) {
		/*
		 * The first look: files written since the trigger started watching
		 * (its registration) are new — a file dropped right after `ferry
		 * workflow register` starts a run — and the rest is the baseline.
		 */
		/* a second's leeway: file times come from the kernel's coarse clock, ms behind */
		int64_t since = json_integer_value(json_object_get(t, "since_ns")) - 1000000000;
		json_t *fresh = json_array(), *v;
		size_t i;
		json_array_foreach(added, i, v) {
			const json_t *f = json_object_get(json_object_get(state, "files"), json_string_value(v));
			if (json_integer_value(json_array_get(f, 1)) > since)
				json_array_append(fresh, v);
		}
		json_decref(added);
		added = fresh;
		any = json_array_size(added) > 0;
		if (any) {
			error = data_fire(conn, t, dir, state, added, changed, removed, seq);
			goto out;
		}
	}
	if (old == NULL || !any) { /* the baseline, or only touched: recorded, nothing started */
		json_object_set_new(state, "seq", json_integer(seq < 0 ? 0 : seq));
		char *txt = json_dumps(state, JSON_COMPACT);
		error = store_trigger_state(conn, json_integer_value(json_object_get(t, "id")), seq, txt);
		if (old == NULL && error == FERRY_OK)
			flog_info("trigger %s/%s: watching %s (%zu files as they are now)", workflow, name, dir,
				  w->prev.n);
		free(txt);
		error = error < 0 ? error : 0;
		goto out;
	}
	error = data_fire(conn, t, dir, state, added, changed, removed, seq);
out:
	json_decref(state), json_decref(added), json_decref(changed), json_decref(removed);
	free(dir);
	return error;
}

/* ---- git triggers ------------------------------------------------------------- */

static char *git_cache(const char *home)
{
	return xasprintf("%s/git/mirrors", home);
}

/* Where a commit's tree is checked out (one per commit, reused). */
static char *git_checkout_dir(const char *home, const char *commit)
{
	return xasprintf("%s/git/checkouts/%s", home, commit);
}

/* What a run from a commit records of it (runs.origin.git): author, subject, time, repo, commit, path. */
static json_t *commit_info(const char *repo, const char *cache, const char *commit, const char *path)
{
	json_t *info = NULL;

	if (gitsrc_commit_info(&info, repo, cache, commit) < 0)
		info = json_object();
	json_object_set_new(info, "repo", json_string(repo));
	json_object_set_new(info, "commit", json_string(commit));
	if (path)
		json_object_set_new(info, "path", json_string(path));
	return info;
}

static int64_t git_poll_ms(void)
{
	const char *s = getenv("FERRY_GIT_POLL_MS");
	int64_t v;

	if (s && parse_int64(s, &v) == 0 && v >= 100)
		return v;
	return TRIGGERS_GIT_EVERY_MS;
}

/*
 * Looks at a git trigger: commit `want` (the webhook's), or the branch's
 * head. Fills *result ("started", "duplicate", "skipped", "unchanged") and
 * *run. Returns 1 when a run started, 0 not, < 0 error.
 */
static int git_look(PGconn *conn, const char *home, const json_t *t, const char *via, const char *want,
		    const char **result, int64_t *run_out, char **why)
{
	const json_t *spec = json_object_get(t, "spec"), *old = state_of(t);
	const char *workflow = json_string_value(json_object_get(t, "workflow"));
	const char *name = json_string_value(json_object_get(t, "name"));
	const char *branch = json_string_value(json_object_get(spec, "branch"));
	const char *path = json_string_value(json_object_get(spec, "path"));
	const char *had = json_string_value(json_object_get(old, "commit"));
	int64_t id = json_integer_value(json_object_get(t, "id"));
	int64_t seq = old ? json_integer_value(json_object_get(old, "seq")) : -1;
	char *repo = NULL, *cache = git_cache(home), *dir = NULL, *yaml = NULL, *state = NULL, *detail = NULL;
	char *actor = NULL;
	size_t yaml_len = 0;
	char head[41];
	json_t *info = NULL, *origin = NULL, *offered = NULL;
	int error = FERRY_OK, d;

	*result = "unchanged";
	*run_out = 0;
	*why = NULL;
	repo = strstr(text_or(json_object_get(spec, "repo"), ""), "://")
		       ? xstrdup(json_string_value(json_object_get(spec, "repo")))
		       : resolve_path(json_string_value(json_object_get(spec, "repo")),
				      json_string_value(json_object_get(t, "workdir")));
	if (repo == NULL) {
		*why = xstrdup("a relative repo needs the workflow registered from a directory");
		goto out;
	}
	if ((error = gitsrc_resolve(head, repo, want ? want : branch, cache)) < 0) {
		*why = xstrdup(ferry_error_last());
		error = FERRY_OK;
		goto out;
	}
	if (want) { /* the pushed commit must be on the branch now */
		char tip[41];
		if (gitsrc_resolve(tip, repo, branch, cache) < 0 ||
		    (strcmp(tip, head) != 0 && gitsrc_descends(repo, cache, tip, head) != 1)) {
			*why = xasprintf("commit %.12s is not on %s", head, branch);
			*result = "skipped";
			goto out;
		}
	}
	if (had && strcmp(had, head) == 0) {
		*result = want ? "duplicate" : "unchanged";
		if (want)
			store_trigger_duplicate(conn, id, head);
		goto out;
	}
	state = xasprintf("{\"seq\":%lld,\"commit\":\"%s\"}", (long long)(seq + 1), head);
	if (had == NULL && !want) { /* the first look: the baseline */
		error = store_trigger_state(conn, id, seq, state);
		if (error == FERRY_OK)
			flog_info("trigger %s/%s: watching %s %s at %.12s", workflow, name, repo, branch, head);
		error = error < 0 ? error : 0;
		goto out;
	}
	if (had && (d = gitsrc_descends(repo, cache, head, had)) != 1) {
		if (d < 0) {
			*why = xstrdup(ferry_error_last());
			goto out;
		}
		*why = xasprintf("commit %.12s is not newer than %.12s, handled already", head, had);
		*result = "skipped";
		store_trigger_skip(conn, id, head, *why, NULL, via, seq, NULL);
		goto out;
	}
	dir = git_checkout_dir(home, head);
	if ((error = gitsrc_checkout(repo, cache, head, dir)) < 0 ||
	    (path && (error = gitsrc_read(&yaml, &yaml_len, repo, cache, head, path)) < 0)) {
		*why = xstrdup(ferry_error_last());
		*result = "skipped";
		error = store_trigger_skip(conn, id, head, *why, NULL, via, seq, state);
		goto out;
	}
	info = commit_info(repo, cache, head, path);
	json_object_set_new(info, "branch", json_string(branch));
	json_object_set_new(info, "via", json_string(via));
	origin = json_pack("{s:O}", "git", info);
	offered = json_pack("{s:s,s:s,s:s}", "git_commit", head, "git_branch", branch, "git_repo", repo);
	detail = json_dumps(info, JSON_COMPACT);
	actor = xasprintf("trigger:%s/%s", workflow, name);
	{
		struct trigger_occasion o = {.id = id, .seq = seq, .key = head, .state = state, .detail = detail,
					     .via = via};
		struct runs_new rn;
		cfg_errors errs = {0};
		memset(&rn, 0, sizeof(rn));
		rn.workflow = path ? NULL : workflow;
		rn.yaml = yaml;
		rn.yaml_len = yaml_len;
		rn.filename = path;
		rn.workdir = dir;
		rn.offered = offered;
		rn.trigger = "git";
		rn.actor = actor;
		rn.origin = origin;
		rn.trigger_id = id;
		rn.occasion = store_trigger_occasion;
		rn.occasion_arg = &o;
		error = runs_create(run_out, conn, &rn, &errs);
		if (error == 2) {
			*result = "duplicate";
			error = o.dup ? store_trigger_duplicate(conn, id, head) : FERRY_OK;
		} else if (error < 0 && error != FERRY_EDB) {
			*why = xasprintf("not started: %s%s%s", ferry_error_last(), errs.len ? ": " : "",
					 errs.len ? errs.items[0] : "");
			*result = "skipped";
			error = store_trigger_skip(conn, id, head, *why, detail, via, seq, state);
		} else if (error == FERRY_OK) {
			*result = "started";
			flog_info("trigger %s/%s: run %lld for commit %.12s of %s (%s)", workflow, name,
				  (long long)*run_out, head, branch, via);
			error = 1;
		}
		cfg_errors_dispose(&errs);
	}
out:
	if (*why && strcmp(*result, "skipped") == 0)
		flog_warn("trigger %s/%s: %s", workflow, name, *why);
	json_decref(info), json_decref(origin), json_decref(offered);
	free(repo), free(cache), free(dir), free(yaml), free(state), free(detail), free(actor);
	return error;
}

/* ---- rounds ------------------------------------------------------------------------ */

int triggers_round(PGconn *conn, const char *home, int64_t budget_ms)
{
	int64_t deadline = clock_mono_ms() + budget_ms;
	json_t *list = NULL, *t;
	size_t i;
	int started = 0, error;

	if ((error = store_triggers_load(&list, conn)) < 0)
		return error;
	pthread_mutex_lock(&watch_mu);
	json_array_foreach(list, i, t) {
		int64_t now = clock_mono_ms();
		char *spec = json_dumps(json_object_get(t, "spec"), JSON_COMPACT | JSON_SORT_KEYS);
		struct watch *w = watch_of(json_integer_value(json_object_get(t, "id")), spec);
		const char *kind = json_string_value(json_object_get(t, "kind"));
		free(spec);
		if (now < w->next_mono || now >= deadline)
			continue;
		if (strcmp(kind, "data") == 0) {
			error = data_look(conn, t, w, now);
		} else if (json_is_true(json_object_get(t, "paused"))) {
			w->next_mono = now + git_poll_ms();
			error = FERRY_OK;
		} else { /* each new commit its run, a run of the last one going or not */
			const char *result;
			int64_t run;
			char *why = NULL;
			w->next_mono = now + git_poll_ms();
			error = git_look(conn, home, t, "poll", NULL, &result, &run, &why);
			if (why)
				warn_once(w, json_string_value(json_object_get(t, "workflow")),
					  json_string_value(json_object_get(t, "name")), why);
			free(why);
		}
		if (error < 0)
			break;
		started += error;
	}
	/* the memory of triggers no longer there (their workflow dropped them) goes */
	for (size_t k = 0; k < nwatches;) {
		int found = 0;
		json_array_foreach(list, i, t)
			found |= json_integer_value(json_object_get(t, "id")) == watches[k].id;
		if (found) {
			k++;
			continue;
		}
		free(watches[k].spec), free(watches[k].warned);
		listing_dispose(&watches[k].prev);
		watches[k] = watches[--nwatches];
	}
	pthread_mutex_unlock(&watch_mu);
	json_decref(list);
	return error < 0 ? error : started;
}

/* Whether a trigger's repo is one of the payload's names for the repository. */
static int repo_matches(const char *repo, const json_t *urls)
{
	size_t i;
	const json_t *u;

	json_array_foreach(urls, i, u) {
		const char *s = json_string_value(u);
		size_t n;
		if (s == NULL)
			continue;
		n = strlen(s);
		if (strcmp(repo, s) == 0)
			return 1;
		/* "…/x.git" and "…/x" name one repository */
		if (n > 4 && strcmp(s + n - 4, ".git") == 0 && strlen(repo) == n - 4 && strncmp(repo, s, n - 4) == 0)
			return 1;
		if (strlen(repo) > 4 && strcmp(repo + strlen(repo) - 4, ".git") == 0 && strlen(repo) - 4 == n &&
		    strncmp(repo, s, n) == 0)
			return 1;
	}
	return 0;
}

int triggers_git_push(json_t **out, PGconn *conn, const char *home, const json_t *urls, const char *ref,
		      const char *after)
{
	json_t *list = NULL, *t, *started = json_array(), *dups = json_array(), *skipped = json_array();
	size_t i;
	int matched = 0, error;

	*out = NULL;
	if ((error = store_triggers_load(&list, conn)) < 0)
		goto fail;
	json_array_foreach(list, i, t) {
		const json_t *spec = json_object_get(t, "spec");
		const char *branch = json_string_value(json_object_get(spec, "branch"));
		const char *repo_s = json_string_value(json_object_get(spec, "repo"));
		char *repo, *full_ref, *why = NULL;
		const char *result;
		int64_t run = 0;
		if (strcmp(json_string_value(json_object_get(t, "kind")), "git") != 0 || branch == NULL || repo_s == NULL)
			continue;
		full_ref = xasprintf("refs/heads/%s", branch);
		repo = strstr(repo_s, "://") ? xstrdup(repo_s)
					    : resolve_path(repo_s, json_string_value(json_object_get(t, "workdir")));
		if (repo == NULL || strcmp(ref, full_ref) != 0 || (!repo_matches(repo, urls) && !repo_matches(repo_s, urls))) {
			free(repo), free(full_ref);
			continue;
		}
		free(repo), free(full_ref);
		matched++;
		if (json_is_true(json_object_get(t, "paused"))) {
			json_array_append_new(skipped, json_pack("{s:s,s:s}", "trigger", json_string_value(json_object_get(t, "name")),
								 "reason", "paused"));
			continue;
		}
		pthread_mutex_lock(&watch_mu); /* one look at a trigger at a time: the round's or this */
		error = git_look(conn, home, t, "webhook", after, &result, &run, &why);
		pthread_mutex_unlock(&watch_mu);
		if (error < 0) {
			free(why);
			goto fail;
		}
		if (strcmp(result, "started") == 0)
			json_array_append_new(started, json_pack("{s:s,s:s,s:I}", "workflow",
								 json_string_value(json_object_get(t, "workflow")), "trigger",
								 json_string_value(json_object_get(t, "name")), "run", (json_int_t)run));
		else if (strcmp(result, "duplicate") == 0)
			json_array_append_new(dups, json_pack("{s:s,s:s}", "trigger", json_string_value(json_object_get(t, "name")),
							      "commit", after));
		else
			json_array_append_new(skipped, json_pack("{s:s,s:s}", "trigger", json_string_value(json_object_get(t, "name")),
								 "reason", why ? why : result));
		free(why);
	}
	*out = json_pack("{s:O,s:O,s:O,s:i}", "started", started, "duplicates", dups, "skipped", skipped, "matched", matched);
	error = FERRY_OK;
fail:
	json_decref(list), json_decref(started), json_decref(dups), json_decref(skipped);
	return error;
}

int triggers_submit_from_git(int64_t *run, PGconn *conn, const char *home, const char *repo, const char *ref,
			     const char *path, struct runs_new *rn, cfg_errors *errs)
{
	char *cache = git_cache(home), *dir = NULL, *yaml = NULL;
	size_t yaml_len = 0;
	char commit[41];
	json_t *info = NULL, *origin = NULL;
	int error;

	*run = 0;
	/* what the user named and is not there is bad input, said of its field */
	if ((error = gitsrc_resolve(commit, repo, ref, cache)) < 0) {
		if (rn->bad_field)
			*rn->bad_field = strstr(ferry_error_last(), "repositor") ? "repo" : "ref";
		error = error == FERRY_ENOTFOUND ? FERRY_EINVALID : error;
		goto out;
	}
	dir = git_checkout_dir(home, commit);
	if ((error = gitsrc_read(&yaml, &yaml_len, repo, cache, commit, path)) < 0) {
		if (rn->bad_field)
			*rn->bad_field = "path";
		error = error == FERRY_ENOTFOUND ? FERRY_EINVALID : error;
		goto out;
	}
	if ((error = gitsrc_checkout(repo, cache, commit, dir)) < 0)
		goto out;
	info = commit_info(repo, cache, commit, path);
	json_object_set_new(info, "ref", json_string(ref));
	origin = json_pack("{s:O}", "git", info);
	rn->yaml = yaml;
	rn->yaml_len = yaml_len;
	rn->filename = path;
	rn->workflow = NULL;
	rn->workdir = dir;
	rn->origin = origin;
	error = runs_create(run, conn, rn, errs);
	rn->yaml = NULL, rn->workdir = NULL, rn->origin = NULL;
out:
	json_decref(info), json_decref(origin);
	free(cache), free(dir), free(yaml);
	return error;
}

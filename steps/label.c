/*
 * label — opens a labelling task and leaves the step waiting for a person.
 * The dataset is a directory; its items are the regular files below it and
 * an item is labelled when the labels file (CSV, first field the item's
 * relative path or file name) has a line for it. The task may be POSTed to
 * a webhook (JSON; three tries with backoff, short timeouts so the
 * dispatcher is not held long); the webhook's answer is kept as "task".
 */
#include "steps/label.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/fingerprint.h"
#include "exec/exec.h"
#include "lib/util.h"
#include "lib/webhook.h"

#define MAX_ITEMS 10000000 /* a walk stops there: the dataset is not a directory of items */

struct names {
	char **v;
	size_t n, cap;
};

static void names_add(struct names *s, char *name)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 256;
		s->v = xrealloc(s->v, s->cap * sizeof(char *));
	}
	s->v[s->n++] = name;
}

static void names_dispose(struct names *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int names_has(const struct names *s, const char *name)
{
	return s->n > 0 && bsearch(&name, s->v, s->n, sizeof(char *), cmp_str) != NULL;
}

/* Lists the regular files under root (relative paths), hidden entries and skip excepted. */
static int walk(struct names *out, const char *root, const char *rel, const char *skip)
{
	char *dir = rel[0] ? xasprintf("%s/%s", root, rel) : xstrdup(root);
	DIR *d = opendir(dir);
	struct dirent *de;
	int error = FERRY_OK;

	if (d == NULL) {
		ferry_error_set("cannot read the dataset directory %s: %s", dir, strerror(errno));
		free(dir);
		return FERRY_ERROR;
	}
	while (error == FERRY_OK && (de = readdir(d)) != NULL) {
		char *r, *full;
		struct stat st;

		if (de->d_name[0] == '.')
			continue;
		r = rel[0] ? xasprintf("%s/%s", rel, de->d_name) : xstrdup(de->d_name);
		full = xasprintf("%s/%s", root, r);
		if (lstat(full, &st) == 0 && S_ISDIR(st.st_mode)) {
			error = walk(out, root, r, skip);
			free(r);
		} else if (lstat(full, &st) == 0 && S_ISREG(st.st_mode) && strcmp(full, skip) != 0) {
			names_add(out, r);
			if (out->n > MAX_ITEMS) {
				ferry_error_set("the dataset %s has more than %d files", root, MAX_ITEMS);
				error = FERRY_EINVALID;
			}
		} else {
			free(r);
		}
		free(full);
	}
	closedir(d);
	free(dir);
	return error;
}

/* The first CSV field of each line of path (unquoted, trimmed); a missing file gives none. */
static int read_labels(struct names *out, const char *path)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int first = 1;

	if (f == NULL)
		return errno == ENOENT ? FERRY_OK
				       : (ferry_error_set("cannot read %s: %s", path, strerror(errno)), FERRY_ERROR);
	while ((n = getline(&line, &cap, f)) >= 0) {
		char *s = line, *e;
		while (*s == ' ' || *s == '\t')
			s++;
		e = s + strcspn(s, ",\r\n");
		while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		if (e - s >= 2 && *s == '"' && e[-1] == '"')
			s++, e--;
		if (e == s || *s == '#')
			continue;
		*e = '\0';
		if (first && (strcmp(s, "file") == 0 || strcmp(s, "path") == 0 ||
			      strcmp(s, "filename") == 0 || strcmp(s, "item") == 0)) {
			first = 0;
			continue;
		}
		first = 0;
		names_add(out, xstrdup(s));
	}
	free(line);
	fclose(f);
	if (out->n > 1) /* no names leaves out->v NULL, which qsort may not take */
		qsort(out->v, out->n, sizeof(char *), cmp_str);
	return FERRY_OK;
}

int label_count(int64_t *items, int64_t *unlabelled, const char *dataset, const char *labels)
{
	struct names files = {0}, lab = {0};
	int error;

	*items = *unlabelled = 0;
	if ((error = walk(&files, dataset, "", labels)) < 0 || (error = read_labels(&lab, labels)) < 0)
		goto out;
	for (size_t i = 0; i < files.n; i++) {
		const char *base = strrchr(files.v[i], '/');
		if (!names_has(&lab, files.v[i]) && !(base && names_has(&lab, base + 1)))
			(*unlabelled)++;
	}
	*items = (int64_t)files.n;
out:
	names_dispose(&files);
	names_dispose(&lab);
	return error;
}

/* The step's webhook, else the daemon's default labelling service (FERRY_LABEL_WEBHOOK), or NULL. */
static const char *hook_of(const json_t *spec)
{
	const char *hook = json_string_value(json_object_get(spec, "webhook"));

	if (hook == NULL && getenv("FERRY_LABEL_WEBHOOK") && *getenv("FERRY_LABEL_WEBHOOK"))
		hook = getenv("FERRY_LABEL_WEBHOOK");
	return hook;
}

const char *label_lane(const json_t *spec, char *buf, size_t n)
{
	const char *hook = hook_of(spec), *host, *end;

	if (hook == NULL || (host = strstr(hook, "://")) == NULL)
		return NULL;
	/* the service is the scheme and authority: every path on it shares the lane */
	end = host + 3 + strcspn(host + 3, "/?#");
	snprintf(buf, n, "webhook %.*s", (int)(end - hook), hook);
	return buf;
}

/* Appends a line to the attempt's log so `ferry logs` shows what the step did. */
int label_step(const struct step_run *r, struct step_result *res)
{
	const char *ds = json_string_value(json_object_get(r->spec, "dataset"));
	const char *lf = json_string_value(json_object_get(r->spec, "labels"));
	const char *hook = hook_of(r->spec);
	char *joined = NULL, *dataset = NULL, *labels = NULL, *msg = NULL;
	json_t *task = NULL, *answer = NULL;
	int64_t items = 0, unlabelled = 0;
	char fp[65];
	struct stat st;
	int error = FERRY_OK, e;

	step_result_init(res);
	if (ds == NULL) {
		ferry_error_set("a label step needs \"dataset\"");
		return FERRY_EINVALID;
	}
	joined = ds[0] == '/' || r->workdir == NULL ? xstrdup(ds) : xasprintf("%s/%s", r->workdir, ds);
	dataset = realpath(joined, NULL);
	e = errno;
	if (dataset == NULL && exec_user_missing(joined, "dataset", e) == FERRY_EINVALID) {
		/* where the job user could not have looked: said as for a directory there (exec.h) */
		res->outcome = OUTCOME_FAILED;
		res->reason = xstrdup(ferry_error_last());
		goto out;
	}
	if (dataset == NULL || stat(dataset, &st) != 0 || !S_ISDIR(st.st_mode)) {
		res->outcome = OUTCOME_FAILED;
		res->reason = xasprintf("dataset %s is not a directory%s%s", joined,
					dataset ? "" : ": ", dataset ? "" : strerror(e));
		goto out;
	}
	if (!exec_user_may_read(dataset, "dataset", r->workdir, r->home)) {
		res->outcome = OUTCOME_FAILED;
		res->reason = xstrdup(ferry_error_last());
		goto out;
	}
	lf = lf ? lf : "labels.csv";
	labels = lf[0] == '/' ? xstrdup(lf) : xasprintf("%s/%s", dataset, lf);
	{
		/* the labels file is read for the run as well: the same rule */
		char *real = realpath(labels, NULL);
		int ok = real ? exec_user_may_read(real, "labels", r->workdir, r->home)
			      : exec_user_missing(labels, "labels", errno) != FERRY_EINVALID;
		free(real);
		if (!ok) {
			res->outcome = OUTCOME_FAILED;
			res->reason = xstrdup(ferry_error_last());
			goto out;
		}
	}
	if ((error = label_count(&items, &unlabelled, dataset, labels)) < 0)
		goto out;
	/*
	 * The dataset's content fingerprint: the steps below it key their
	 * step cache on this step's outputs, so new data (a data trigger's
	 * files) is trained on, never answered from the cache.
	 */
	if ((error = fingerprint_path(fp, dataset)) < 0)
		goto out;
	task = json_pack("{s:s, s:s, s:I, s:I, s:s+}", "dataset", dataset, "labels", labels,
			 "items", (json_int_t)items, "unlabelled", (json_int_t)unlabelled, "fingerprint", "sha256:", fp);
	msg = xasprintf("labelling task: %lld of %lld items in %s have no label in %s; waiting for "
			"`ferry continue %lld %s [--data JSON]`", (long long)unlabelled, (long long)items,
			dataset, labels, (long long)r->run_id, r->name);
	steps_log(r, "%s", msg);
	if (hook) {
		json_t *post = json_deep_copy(task);
		json_object_set_new(post, "run", json_integer(r->run_id));
		json_object_set_new(post, "step", json_string(r->name));
		json_object_set_new(post, "workflow", json_incref(json_object_get(r->run, "workflow")));
		json_object_set_new(post, "continue", json_sprintf("/api/v1/runs/%lld/steps/%s/continue",
								   (long long)r->run_id, r->name));
		error = webhook_post(&answer, hook, post, WEBHOOK_TRIES);
		json_decref(post);
		if (error < 0) {
			/* not final: the step's retry policy decides */
			res->outcome = OUTCOME_FAILED;
			res->reason = xstrdup(ferry_error_last());
			steps_log(r, "%s", res->reason);
			error = FERRY_OK;
			goto out;
		}
		steps_log(r, "webhook accepted the task");
	}
	json_object_set_new(task, "task", answer ? answer : json_null());
	res->outcome = OUTCOME_WAITING;
	res->outputs = task;
	task = NULL;
out:
	free(joined), free(dataset), free(labels), free(msg);
	json_decref(task);
	return error;
}

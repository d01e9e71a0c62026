/*
 * models — `ferry models`: the model registry from the command line.
 *   ferry models list                        models, latest version, aliases
 *   ferry models versions NAME               versions newest first, with metrics
 *   ferry models get NAME VERSION|ALIAS      one version: artifact, metrics, lineage
 *   ferry models alias NAME ALIAS VERSION    point ALIAS at VERSION (recorded)
 *   ferry models download NAME VERSION DIR   the artifact's files into DIR
 * Every read takes -o json (the server's answer). download rebuilds a
 * directory artifact from its manifest (GET …/artifact, then …/artifact?path=
 * for each file), checking the manifest against the version's sha256 and
 * each file against the manifest's, and writes nothing outside DIR: a
 * manifest path that is absolute or has a '..' segment is refused before
 * anything is written, links already in DIR are never followed, and each
 * file is written to a temporary name and renamed into place once verified.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include "cli/cli.h"

/* "accuracy=0.9822 f1=0.9819" for the classification and regression metrics, else all. */
static char *metrics_line(const json_t *m)
{
	static const char *const known[] = {"accuracy", "precision", "recall", "f1", "mae", "mse", "rmse"};
	size_t len = 0, shown = 0;
	char *buf = NULL;
	FILE *f = open_memstream(&buf, &len);
	const char *key;
	json_t *v;

	if (f == NULL)
		abort();
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (json_is_number(v = json_object_get(m, known[i])))
			fprintf(f, "%s%s=%.4g", shown++ ? " " : "", known[i], json_number_value(v));
	if (shown == 0)
		json_object_foreach((json_t *)m, key, v)
			if (json_is_number(v))
				fprintf(f, "%s%s=%.4g", shown++ ? " " : "", key, json_number_value(v));
	fclose(f);
	return buf;
}

/* "production, canary" from an array of names. */
static char *names_line(const json_t *arr)
{
	size_t len = 0, i;
	char *buf = NULL;
	FILE *f = open_memstream(&buf, &len);
	json_t *v;

	if (f == NULL)
		abort();
	json_array_foreach(arr, i, v)
		fprintf(f, "%s%s", i ? ", " : "", json_string_value(v));
	fclose(f);
	return buf;
}

static void print_models(const struct ctx *x, const json_t *answer)
{
	const json_t *models = json_object_get(answer, "models");
	struct table t;
	json_t *m;
	size_t i;

	if (json_array_size(models) == 0) {
		fprintf(stderr, "no models yet: a workflow's register step creates one\n");
		return;
	}
	table_init(&t, 4);
	table_add(&t, (const char *const[]){"MODEL", "VERSIONS", "LATEST", "ALIASES"});
	json_array_foreach(models, i, m) {
		const json_t *aliases = json_object_get(m, "aliases");
		char n[32], *al = NULL;
		size_t alen = 0;
		FILE *f = open_memstream(&al, &alen);
		const char *key;
		json_t *v;
		int k = 0;

		if (f == NULL)
			abort();
		json_object_foreach((json_t *)aliases, key, v)
			fprintf(f, "%s%s→%s", k++ ? ", " : "", key, json_string_value(v));
		fclose(f);
		snprintf(n, sizeof(n), "%lld", (long long)jint(m, "versions", 0));
		table_add(&t, (const char *const[]){jstr(m, "name", "?"), n, jstr(m, "latest", dash(x->cli)),
						     alen ? al : dash(x->cli)});
		free(al);
	}
	table_print(&t, stdout, "");
	table_dispose(&t);
}

static void print_versions(const struct ctx *x, const json_t *answer)
{
	const json_t *versions = json_object_get(answer, "versions");
	struct table t;
	json_t *v;
	size_t i;

	table_init(&t, 6);
	table_add(&t, (const char *const[]){"VERSION", "ALIASES", "CREATED", "RUN", "SHA256", "METRICS"});
	json_array_foreach(versions, i, v) {
		const json_t *lineage = json_object_get(v, "lineage"), *art = json_object_get(v, "artifact");
		char created[64] = "", run[32], sha[16];
		char *al = names_line(json_object_get(v, "aliases"));
		char *mt = metrics_line(json_object_get(v, "metrics"));
		int64_t ms;

		if (jtime(v, "created_at", &ms))
			fmt_local(created, sizeof(created), ms, true);
		if (json_is_integer(json_object_get(lineage, "run")))
			snprintf(run, sizeof(run), "%lld", (long long)jint(lineage, "run", 0));
		else
			snprintf(run, sizeof(run), "%s", dash(x->cli));
		snprintf(sha, sizeof(sha), "%.12s", jstr(art, "sha256", ""));
		if (json_is_true(json_object_get(v, "dev")))
			snprintf(run + strlen(run), sizeof(run) - strlen(run), " (dev)");
		if (json_is_true(json_object_get(v, "archived"))) {
			char *a2 = xasprintf("%s%s(archived)", al, *al ? " " : "");
			free(al);
			al = a2;
		}
		table_add(&t, (const char *const[]){jstr(v, "version", "?"), *al ? al : dash(x->cli), created, run,
						     sha, *mt ? mt : dash(x->cli)});
		free(al), free(mt);
	}
	table_print(&t, stdout, "");
	table_dispose(&t);
}

static void print_version(const struct ctx *x, const json_t *v)
{
	const json_t *art = json_object_get(v, "artifact"), *lin = json_object_get(v, "lineage");
	const json_t *metrics = json_object_get(v, "metrics"), *params = json_object_get(v, "params");
	char created[64] = "", *al = names_line(json_object_get(v, "aliases"));
	const char *key;
	json_t *val;
	int64_t ms;

	if (jtime(v, "created_at", &ms))
		fmt_local(created, sizeof(created), ms, true);
	printf("Model:     %s\n", jstr(v, "model", "?"));
	printf("Version:   %s%s\n", jstr(v, "version", "?"),
	       json_is_true(json_object_get(v, "dev")) ? " (dev: registered by a dev run; never takes an alias)" : "");
	printf("Aliases:   %s\n", *al ? al : dash(x->cli));
	if (json_is_true(json_object_get(v, "archived")))
		printf("Archived:  %s by %s (never deployed or aliased until restored)\n", jstr(v, "archived_at", "?"),
		       jstr(v, "archived_by", "?"));
	if (json_is_string(json_object_get(v, "description")))
		printf("About:     %s\n", jstr(v, "description", ""));
	if (json_object_size(json_object_get(v, "tags")) > 0) {
		printf("Tags:     ");
		json_object_foreach(json_object_get(v, "tags"), key, val)
			printf(" %s=%s", key, json_string_value(val) ? json_string_value(val) : "");
		printf("\n");
	}
	printf("Created:   %s by %s\n", created, jstr(v, "actor", "?"));
	printf("Artifact:  %s (%s, %lld bytes)\n", jstr(art, "name", "?"), jstr(art, "kind", "?"),
	       (long long)jint(art, "bytes", 0));
	printf("  sha256:  %s\n", jstr(art, "sha256", "?"));
	printf("  stored:  %s\n", jstr(art, "path", "?"));
	printf("Lineage:\n");
	if (json_is_integer(json_object_get(lin, "run")))
		printf("  run:      %lld (step %s)\n", (long long)jint(lin, "run", 0), jstr(lin, "step", "?"));
	printf("  workflow: %s (%.12s)\n", jstr(lin, "workflow", dash(x->cli)), jstr(lin, "workflow_hash", ""));
	printf("  data:     %s\n", jstr(lin, "data_fingerprint", dash(x->cli)));
	if (json_object_size(params) > 0) {
		printf("Params:\n");
		json_object_foreach((json_t *)params, key, val) {
			char *s = json_is_string(val) ? xstrdup(json_string_value(val))
						      : json_dumps(val, JSON_ENCODE_ANY | JSON_COMPACT);
			printf("  %s=%s\n", key, s);
			free(s);
		}
	}
	if (json_object_size(metrics) > 0) {
		printf("Metrics:\n");
		json_object_foreach((json_t *)metrics, key, val)
			if (json_is_number(val))
				printf("  %-14s %.6g\n", key, json_number_value(val));
	}
	free(al);
}

/* ---- download ---- */

#define MANIFEST_MAX (64 << 20)

/* Where a download's bytes go: a file (fd), or memory (buf), hashed as they come. */
struct fetch {
	int fd;        /* -1: into buf */
	char *buf;
	size_t len, cap;
	int64_t bytes;
	EVP_MD_CTX *md;
};

static int fetch_data(void *arg, const char *p, size_t n)
{
	struct fetch *f = arg;

	EVP_DigestUpdate(f->md, p, n);
	f->bytes += (int64_t)n;
	if (f->fd >= 0) {
		if (fd_write_all(f->fd, p, n) < 0) {
			ferry_error_set("writing: %s", strerror(errno));
			return -1;
		}
		return 0;
	}
	if (f->len + n > MANIFEST_MAX) {
		ferry_error_set("the manifest is over %d MiB", MANIFEST_MAX >> 20);
		return -1;
	}
	if (f->len + n + 1 > f->cap) {
		f->cap = (f->len + n + 1) * 2;
		f->buf = xrealloc(f->buf, f->cap);
	}
	memcpy(f->buf + f->len, p, n);
	f->len += n;
	f->buf[f->len] = '\0';
	return 0;
}

/* GETs path into f; hex is the sha256 of what came. */
static int fetch_run(struct fetch *f, char hex[65], ferry_client *c, const char *path)
{
	struct client_sink sink = {NULL, fetch_data, f};
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int rc;

	f->md = EVP_MD_CTX_new();
	if (f->md == NULL || EVP_DigestInit_ex(f->md, EVP_sha256(), NULL) != 1)
		abort();
	rc = client_stream(c, path, 0, &sink);
	EVP_DigestFinal_ex(f->md, md, &mdlen);
	EVP_MD_CTX_free(f->md);
	f->md = NULL;
	hex_encode(hex, md, mdlen);
	return rc;
}

/* Whether p is a clean relative path: no empty, "." or ".." segment, not absolute. */
static bool safe_relative(const char *p)
{
	if (*p == '\0' || *p == '/')
		return false;
	for (const char *s = p; *s;) {
		size_t n = strcspn(s, "/");
		if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
			return false;
		s += n;
		if (*s == '/' && *++s == '\0')
			return false;
	}
	return true;
}

/* Makes the directories of rel's parent below dir, one segment at a time; a link on the way is refused. */
static int make_parents(const char *dir, const char *rel)
{
	char *path = xasprintf("%s/%s", dir, rel), *p = path + strlen(dir) + 1;
	struct stat st;
	int error = FERRY_OK;

	while ((p = strchr(p, '/')) != NULL) {
		*p = '\0';
		if (lstat(path, &st) == 0) {
			if (!S_ISDIR(st.st_mode)) {
				ferry_error_set("%s is in the way (not a directory; links are not followed)", path);
				error = FERRY_ERROR;
				break;
			}
		} else if (mkdir(path, 0755) < 0) {
			ferry_error_set("creating %s: %s", path, strerror(errno));
			error = FERRY_ERROR;
			break;
		}
		*p++ = '/';
	}
	free(path);
	return error;
}

/*
 * Downloads urlpath into dir/rel: to a temporary file beside it, checked
 * against sha256 (and bytes when >= 0), then renamed into place.
 */
static int fetch_file(ferry_client *c, const char *urlpath, const char *dir, const char *rel,
		      const char *sha256, int64_t bytes)
{
	char *dst = xasprintf("%s/%s", dir, rel), *tmp = NULL, hex[65];
	char *slash = strrchr(dst, '/');
	struct fetch f = {.fd = -1};
	int rc;

	tmp = xasprintf("%.*s/.ferry-download.XXXXXX", (int)(slash - dst), dst);
	if ((f.fd = mkostemp(tmp, O_CLOEXEC)) < 0) {
		ferry_error_set("creating a file in %.*s: %s", (int)(slash - dst), dst, strerror(errno));
		rc = FERRY_ERROR;
		goto out;
	}
	rc = fetch_run(&f, hex, c, urlpath);
	if (rc == 0 && strcmp(hex, sha256) != 0) {
		ferry_error_set("%s: sha256 %s, the registry says %s; nothing written", rel, hex, sha256);
		rc = FERRY_ERROR;
	} else if (rc == 0 && bytes >= 0 && f.bytes != bytes) {
		ferry_error_set("%s: %" PRId64 " bytes, the manifest says %" PRId64, rel, f.bytes, bytes);
		rc = FERRY_ERROR;
	} else if (rc == 0 && (fchmod(f.fd, 0644) < 0 || fsync(f.fd) < 0 || rename(tmp, dst) < 0)) {
		ferry_error_set("writing %s: %s", dst, strerror(errno));
		rc = FERRY_ERROR;
	}
	if (rc < 0)
		unlink(tmp);
out:
	if (f.fd >= 0)
		close(f.fd);
	free(tmp), free(dst);
	return rc;
}

/* Whether dir holds anything; creates it when missing. -1 with the message set when it cannot be used. */
static int dir_prepare(const char *dir)
{
	struct dirent *d;
	DIR *dp;
	int full = 0;

	if (mkdir_p(dir, 0755) < 0)
		return -1;
	if ((dp = opendir(dir)) == NULL) {
		ferry_error_set("%s: %s", dir, strerror(errno));
		return -1;
	}
	while (!full && (d = readdir(dp)) != NULL)
		full = strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0;
	closedir(dp);
	return full;
}

/*
 * `ferry models download NAME VERSION DIR`: version v (its JSON) of model
 * e1 (escaped), version e2 (escaped). Returns an exit status.
 */
static int models_download(ferry_client *c, const json_t *v, const char *e1, const char *e2, const char *dir,
			   bool force)
{
	const json_t *art = json_object_get(v, "artifact"), *files, *f;
	const char *kind = jstr(art, "kind", ""), *sha = jstr(art, "sha256", ""), *name = jstr(art, "name", "");
	char *base = xasprintf("/models/%s/versions/%s/artifact", e1, e2), *urlpath = NULL, hex[65];
	struct fetch m = {.fd = -1};
	json_t *manifest = NULL;
	int64_t total = 0;
	size_t i, n = 0;
	int rc, status = FX_FAIL;

	if (strcmp(kind, "file") != 0 && strcmp(kind, "tree") != 0) {
		ferry_error_set("the registry answered an artifact of kind \"%s\"; this ferry knows file and tree", kind);
		goto out;
	}
	if (strcmp(kind, "tree") == 0) {
		/* the manifest first: checked, and every path vetted, before anything is written */
		if ((rc = fetch_run(&m, hex, c, base)) < 0)
			goto fail;
		if (strcmp(hex, sha) != 0) {
			ferry_error_set("the manifest's sha256 is %s, the registry says %s; nothing written", hex, sha);
			goto out;
		}
		manifest = json_loads(m.buf ? m.buf : "", 0, NULL);
		files = json_object_get(manifest, "files");
		if (!json_is_array(files)) {
			ferry_error_set("the manifest of this version is not a ferry-tree-1 manifest");
			goto out;
		}
		json_array_foreach(files, i, f) {
			const char *p = jstr(f, "path", "");
			const char *fs = jstr(f, "sha256", "");
			if (!safe_relative(p) || strlen(fs) != 64) {
				ferry_error_set("the manifest lists \"%s\", which is not a plain relative path (absolute, "
						"'..' or empty segment) or has no sha256: refusing to download", p);
				goto out;
			}
		}
	} else if (!safe_relative(name) || strchr(name, '/')) {
		name = "artifact"; /* a file's name is one segment, else a neutral one */
	}
	if ((rc = dir_prepare(dir)) < 0)
		goto out;
	if (rc > 0 && !force) {
		ferry_error_set("%s is not empty; give an empty or new directory, or --force to write into it", dir);
		status = FX_USAGE;
		goto out;
	}
	if (strcmp(kind, "file") == 0) {
		if ((rc = fetch_file(c, base, dir, name, sha, jint(art, "bytes", -1))) < 0)
			goto fail;
		n = 1;
		total = jint(art, "bytes", 0);
	} else {
		json_array_foreach(json_object_get(manifest, "files"), i, f) {
			const char *p = jstr(f, "path", "");
			char *ep = client_escape(p);

			free(urlpath);
			urlpath = xasprintf("%s?path=%s", base, ep);
			free(ep);
			if (make_parents(dir, p) < 0)
				goto out;
			if ((rc = fetch_file(c, urlpath, dir, p, jstr(f, "sha256", ""), jint(f, "bytes", -1))) < 0)
				goto fail;
			n++;
			total += jint(f, "bytes", 0);
		}
	}
	printf("%s %s: %zu file%s, %" PRId64 " bytes in %s (sha256 verified)\n", jstr(v, "model", "?"),
	       jstr(v, "version", "?"), n, n == 1 ? "" : "s", total, dir);
	status = FX_OK;
	goto out;
fail:
	status = report_request_error(c, rc);
	goto done;
out:
	if (status != FX_OK)
		fprintf(stderr, "ferry: %s\n", ferry_error_last());
done:
	free(base), free(urlpath), free(m.buf);
	json_decref(manifest);
	return status;
}

/* The numbers of metrics (a JSON object) as text, "-" when absent. */
static void num_or_dash(char *buf, size_t cap, const json_t *metrics, const char *key)
{
	const json_t *v = json_object_get(metrics, key);

	if (json_is_number(v))
		snprintf(buf, cap, "%.6g", json_number_value(v));
	else
		snprintf(buf, cap, "-");
}

/* `ferry models compare NAME V1 V2`: metrics side by side (V2 − V1), then params and lineage that differ. */
static int models_compare(const struct ctx *x, ferry_client *c, const char *e1, const char *v1, const char *v2)
{
	json_t *a = NULL, *b = NULL, *keys = json_object(), *val;
	char *p1 = NULL, *p2 = NULL, *e2 = client_escape(v1), *e3 = client_escape(v2);
	const char *key;
	int rc, status = FX_OK;
	struct table t;

	p1 = xasprintf("/models/%s/versions/%s", e1, e2);
	p2 = xasprintf("/models/%s/versions/%s", e1, e3);
	if ((rc = client_request(&a, c, "GET", p1, NULL)) < 0 || (rc = client_request(&b, c, "GET", p2, NULL)) < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	json_object_foreach(json_object_get(a, "metrics"), key, val)
		json_object_set_new(keys, key, json_true());
	json_object_foreach(json_object_get(b, "metrics"), key, val)
		json_object_set_new(keys, key, json_true());
	printf("%s: %s (A) against %s (B)\n", jstr(a, "model", "?"), jstr(a, "version", "?"), jstr(b, "version", "?"));
	table_init(&t, 4);
	table_add(&t, (const char *const[]){"METRIC", "A", "B", "B - A"});
	json_object_foreach(keys, key, val) {
		char sa[32], sb[32], d[32] = "-";
		const json_t *ma = json_object_get(json_object_get(a, "metrics"), key);
		const json_t *mb = json_object_get(json_object_get(b, "metrics"), key);
		num_or_dash(sa, sizeof(sa), json_object_get(a, "metrics"), key);
		num_or_dash(sb, sizeof(sb), json_object_get(b, "metrics"), key);
		if (json_is_number(ma) && json_is_number(mb))
			snprintf(d, sizeof(d), "%+.6g", json_number_value(mb) - json_number_value(ma));
		table_add(&t, (const char *const[]){key, sa, sb, d});
	}
	table_print(&t, stdout, "");
	table_dispose(&t);
	/* params and lineage: only what differs */
	{
		const char *sect[] = {"params", "lineage"};
		for (size_t s = 0; s < 2; s++) {
			json_t *all = json_object(), *pa = json_object_get(a, sect[s]), *pb = json_object_get(b, sect[s]);
			int shown = 0;
			json_object_update(all, pa);
			json_object_update(all, pb);
			json_object_foreach(all, key, val) {
				char *ta = json_dumps(json_object_get(pa, key), JSON_ENCODE_ANY | JSON_COMPACT);
				char *tb = json_dumps(json_object_get(pb, key), JSON_ENCODE_ANY | JSON_COMPACT);
				if (!json_equal(json_object_get(pa, key), json_object_get(pb, key))) {
					if (!shown++)
						printf("%s that differ:\n", sect[s]);
					printf("  %-16s A %s  B %s\n", key, ta ? ta : dash(x->cli), tb ? tb : dash(x->cli));
				}
				free(ta), free(tb);
			}
			if (!shown)
				printf("%s: the same\n", sect[s]);
			json_decref(all);
		}
	}
out:
	free(p1), free(p2), free(e2), free(e3);
	json_decref(a), json_decref(b), json_decref(keys);
	return status;
}

/*
 * The registry's edits: archive/restore NAME VERSION, tag NAME [VERSION]
 * KEY=VALUE… (KEY= removes), describe NAME [VERSION] TEXT, alias NAME
 * ALIAS --delete, compare NAME V1 V2. -1: not one of these.
 */
static int models_edit(const struct ctx *x, int argc, char **argv)
{
	const char *sub = argv[1];
	ferry_client *c = NULL;
	json_t *body = NULL, *answer = NULL;
	char *path = NULL, *e1 = NULL, *e2 = NULL;
	const char *method = "PATCH";
	int n = argc - 2, rc, status;
	char **ops = argv + 2;

	if (strcmp(sub, "archive") == 0 || strcmp(sub, "restore") == 0) {
		if (n != 2)
			return usage_error(x, "models %s takes NAME VERSION", sub);
		body = json_pack("{s:b}", "archived", strcmp(sub, "archive") == 0);
	} else if (strcmp(sub, "tag") == 0) {
		int first = n >= 2 && strchr(ops[1], '=') == NULL ? 2 : 1;
		if (n < first + 1)
			return usage_error(x, "models tag takes NAME [VERSION] KEY=VALUE... (KEY= removes a tag)");
		body = json_pack("{s:{}}", "tags");
		for (int i = first; i < n; i++) {
			const char *eq = strchr(ops[i], '=');
			char *k;
			if (eq == NULL || eq == ops[i]) {
				json_decref(body);
				return usage_error(x, "'%s' is not KEY=VALUE", ops[i]);
			}
			k = xstrndup(ops[i], (size_t)(eq - ops[i]));
			json_object_set_new(json_object_get(body, "tags"), k, eq[1] ? json_string(eq + 1) : json_null());
			free(k);
		}
		n = first; /* NAME [VERSION] */
	} else if (strcmp(sub, "describe") == 0) {
		if (n != 2 && n != 3)
			return usage_error(x, "models describe takes NAME [VERSION] TEXT (\"\" clears it)");
		body = json_pack("{s:s}", "description", ops[n - 1]);
		n--;
	} else if (strcmp(sub, "compare") == 0) {
		if (n != 3)
			return usage_error(x, "models compare takes NAME VERSION|ALIAS VERSION|ALIAS");
	} else if (strcmp(sub, "alias") == 0 && n == 3 && strcmp(ops[2], "--delete") == 0) {
		method = "DELETE";
	} else if (strcmp(sub, "register") == 0) {
		/* NAME PATH [--alias A]... [--version patch|minor|major] [--description TEXT] */
		const char *name = NULL, *src = NULL;
		char real[PATH_MAX];
		body = json_pack("{s:[]}", "alias");
		for (int i = 0; i < n; i++) {
			if ((strcmp(ops[i], "--alias") == 0 || strcmp(ops[i], "--version") == 0 ||
			     strcmp(ops[i], "--description") == 0) && i + 1 < n) {
				if (ops[i][2] == 'a')
					json_array_append_new(json_object_get(body, "alias"), json_string(ops[i + 1]));
				else
					json_object_set_new(body, ops[i] + 2, json_string(ops[i + 1]));
				i++;
			} else if (ops[i][0] == '-') {
				json_decref(body);
				return usage_error(x, "models register: unexpected '%s'", ops[i]);
			} else if (name == NULL) {
				name = ops[i];
			} else if (src == NULL) {
				src = ops[i];
			} else {
				json_decref(body);
				return usage_error(x, "models register takes NAME PATH [--alias A]... [--version patch|minor|major] "
						      "[--description TEXT]");
			}
		}
		if (name == NULL || src == NULL) {
			json_decref(body);
			return usage_error(x, "models register takes NAME PATH [--alias A]... [--version patch|minor|major] "
					      "[--description TEXT]");
		}
		/* the daemon reads it on this machine: an absolute path */
		if (realpath(src, real) == NULL) {
			fprintf(stderr, "ferry: models register: %s: %s\n", src, strerror(errno));
			json_decref(body);
			return FX_FAIL;
		}
		json_object_set_new(body, "path", json_string(real));
		method = "POST";
		ops[0] = (char *)name;
		n = -1;
	} else {
		return -1;
	}
	e1 = client_escape(ops[0]);
	if ((status = open_client(&c)) != FX_OK)
		goto out;
	if (strcmp(sub, "compare") == 0) {
		status = models_compare(x, c, e1, ops[1], ops[2]);
		goto out;
	}
	if (strcmp(method, "DELETE") == 0) {
		e2 = client_escape(ops[1]);
		path = xasprintf("/models/%s/aliases/%s", e1, e2);
	} else if (strcmp(method, "POST") == 0) {
		path = xasprintf("/models/%s/versions", e1);
	} else if (n == 2) {
		e2 = client_escape(ops[1]);
		path = xasprintf("/models/%s/versions/%s", e1, e2);
	} else {
		path = xasprintf("/models/%s", e1);
	}
	rc = client_request(&answer, c, method, path, body);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	status = FX_OK;
	if (strcmp(method, "DELETE") == 0)
		printf("%s: alias %s removed\n", ops[0], ops[1]);
	else if (strcmp(method, "POST") == 0)
		print_version(x, answer);
	else if (n == 2)
		print_version(x, answer);
	else
		printf("%s: %s\n", ops[0], "updated");
out:
	free(path), free(e1), free(e2);
	json_decref(body), json_decref(answer);
	client_free(c);
	return status;
}

int cmd_models(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"output", required_argument, NULL, 'o'},
		{"force", no_argument, NULL, 'f'},
		{"tag", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	static const char *const subs[] = {"list", "versions", "get", "alias", "download"};
	static const int operands[] = {0, 1, 2, 3, 3};
	ferry_client *c = NULL;
	json_t *answer = NULL, *body = NULL;
	char *path = NULL, *e1 = NULL, *e2 = NULL;
	const char *sub, *tag = NULL;
	bool json = false, force = false;
	int ch, rc, status = FX_USAGE, k, nops;
	char **ops;

	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		if (argc < 2)
			return usage_error(x, "which one: list, versions, get, alias, download, compare, tag, describe, "
					      "archive or restore?");
		return print_help(x->cmd);
	}
	sub = argv[1];
	if ((rc = models_edit(x, argc, argv)) >= 0)
		return rc;
	for (k = 0; k < 5 && strcmp(sub, subs[k]) != 0; k++)
		;
	if (k == 5)
		return usage_error(x, "unknown subcommand '%s' (list, versions, get, alias or download)", sub);
	optind = 0;
	while ((ch = getopt_long(argc - 1, argv + 1, ":o:ft:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 't':
			if (k != 1 || strchr(optarg, '=') == NULL) {
				status = usage_error(x, "--tag KEY=VALUE is for models versions");
				goto out;
			}
			tag = optarg;
			break;
		case 'f':
			if (k != 4) {
				status = usage_error(x, "--force is for models download");
				goto out;
			}
			force = true;
			break;
		case 'o':
			if (parse_output(x, optarg, &json) != 0)
				goto out;
			break;
		case 'h':
			status = print_help(x->cmd);
			goto out;
		default:
			status = option_error(x, ch, argv + 1);
			goto out;
		}
	}
	ops = argv + 1 + optind;
	nops = argc - 1 - optind;
	if (nops != operands[k]) {
		static const char *const want[] = {"no operands", "NAME", "NAME VERSION|ALIAS",
						   "NAME ALIAS VERSION", "NAME VERSION|ALIAS DIR"};
		status = usage_error(x, "models %s takes %s", sub, want[k]);
		goto out;
	}
	if (nops > 0)
		e1 = client_escape(ops[0]);
	if (nops > 1)
		e2 = client_escape(ops[1]);
	if ((status = open_client(&c)) != FX_OK)
		goto out;
	switch (k) {
	case 0:
		path = xstrdup("/models");
		break;
	case 1:
		if (tag) {
			char *et = client_escape(tag);
			path = xasprintf("/models/%s/versions?tag=%s", e1, et);
			free(et);
		} else {
			path = xasprintf("/models/%s/versions", e1);
		}
		break;
	case 2:
	case 4:
		path = xasprintf("/models/%s/versions/%s", e1, e2);
		break;
	default:
		path = xasprintf("/models/%s/aliases/%s", e1, e2);
		body = json_pack("{s:s}", "version", ops[2]);
	}
	rc = client_request(&answer, c, body ? "PUT" : "GET", path, body);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	status = FX_OK;
	if (k == 4)
		status = models_download(c, answer, e1, e2, ops[2], force);
	else if (json)
		print_json(answer);
	else if (k == 0)
		print_models(x, answer);
	else if (k == 1)
		print_versions(x, answer);
	else if (k == 2)
		print_version(x, answer);
	else
		printf("%s %s: %s now points at %s\n", ops[0], ops[1], ops[1], jstr(answer, "version", "?"));
out:
	free(path), free(e1), free(e2);
	json_decref(answer);
	json_decref(body);
	client_free(c);
	return status;
}

/*
 * api_models — the model registry's routes: GET /models, GET /models/{name},
 * GET /models/{name}/versions, GET /models/{name}/versions/{version} (a
 * version number or an alias) and PUT /models/{name}/aliases/{alias}
 * ({"version":"0.0.2"}), which moves the alias and records who did it;
 * GET /models/{name}/versions/{version}/artifact, the artifact's bytes: a
 * file's, a directory's manifest, or (?path=P) one file the manifest lists,
 * always read from the content-addressed store by its sha256, so no path a
 * client sends names a file on the machine (ferry models download).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api_priv.h"
#include "exec/exec.h"
#include "steps/registry.h"
#include "store/store.h"
#include "lib/blobs.h"
#include "lib/util.h"

/* Replies with the JSON text a store call produced, or with its error. */
static void reply_store(struct reply *r, int error, char *json)
{
	if (error < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 200, json);
}

void api_models_list(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *json = NULL;
	int error = store_models_list(&json, db);

	(void)a, (void)q;
	reply_store(r, error, json);
}

void api_model_get(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *json = NULL;
	int error = store_model_get(&json, db, q->caps[0]);

	(void)a;
	reply_store(r, error, json);
}

/* ?tag=KEY=VALUE → {"KEY": "VALUE"} (the versions that carry it); -1 and a 400 when malformed. */
static int tag_filter(struct reply *r, struct req *q, json_t **tags)
{
	const char *t = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "tag");
	const char *eq = t ? strchr(t, '=') : NULL;

	*tags = NULL;
	if (t == NULL)
		return 0;
	if (eq == NULL || eq == t) {
		reply_error(r, 400, "invalid_field", "tag", "tag must be KEY=VALUE", NULL);
		return -1;
	}
	*tags = json_object();
	{
		char *key = xstrndup(t, (size_t)(eq - t));
		json_object_set_new(*tags, key, json_string(eq + 1));
		free(key);
	}
	return 0;
}

void api_model_versions(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *json = NULL;
	json_t *tags = NULL;
	int error;

	(void)a;
	if (tag_filter(r, q, &tags) < 0)
		return;
	error = store_model_versions(&json, db, q->caps[0], tags);
	json_decref(tags);
	reply_store(r, error, json);
}

/* {"description": "…", "tags": {K: V|null}}: checked, each optional (NULL when absent); -1 answered. */
static int desc_tags(struct reply *r, json_t *body, const char **desc, json_t **tags)
{
	json_t *t = json_object_get(body, "tags"), *v;
	const char *k;

	*desc = NULL, *tags = NULL;
	if (opt_string(desc, r, body, "description") < 0)
		return -1;
	if (*desc && strlen(*desc) > 4096) {
		reply_error(r, 400, "invalid_field", "description", "description: at most 4,096 bytes", NULL);
		return -1;
	}
	if (t) {
		if (!json_is_object(t) || json_object_size(t) > 64) {
			reply_error(r, 400, "invalid_field", "tags", "tags must be an object of at most 64 NAME: \"value\" "
				    "(null removes one)", NULL);
			return -1;
		}
		json_object_foreach(t, k, v) {
			if (strlen(k) == 0 || strlen(k) > 64 || !(json_is_string(v) || json_is_null(v)) ||
			    (json_is_string(v) && json_string_length(v) > 256)) {
				reply_error(r, 400, "invalid_field", "tags", "each tag is a name of 1-64 bytes and a string "
					    "value of at most 256 bytes, or null to remove it", NULL);
				return -1;
			}
		}
		*tags = t;
	}
	return 0;
}

/* desc_tags, and "archived": bool (versions only): at least one of them. */
static int edit_fields(struct reply *r, json_t *body, int version, const char **desc, json_t **tags, int *archived)
{
	json_t *a = json_object_get(body, "archived");

	*archived = -1;
	if (desc_tags(r, body, desc, tags) < 0)
		return -1;
	if (a) {
		if (!version || !json_is_boolean(a)) {
			reply_error(r, 400, "invalid_field", "archived", version ? "archived must be true or false"
				    : "archived applies to a version (PATCH …/versions/{version})", NULL);
			return -1;
		}
		*archived = json_is_true(a);
	}
	if (*desc == NULL && *tags == NULL && *archived < 0) {
		reply_error(r, 400, "missing_field", "description", version ? "nothing to change: give description, tags "
			    "or archived" : "nothing to change: give description or tags", NULL);
		return -1;
	}
	return 0;
}

/* PATCH /models/{name} and /models/{name}/versions/{version}: description, tags, archived. */
static void model_patch(struct reply *r, PGconn *db, struct req *q, const char *version)
{
	json_t *body = body_object(r, q), *tags;
	const char *desc;
	char *actor = NULL, *json = NULL;
	int archived, error;

	if (body == NULL)
		return;
	if (edit_fields(r, body, version != NULL, &desc, &tags, &archived) < 0)
		goto out;
	actor = actor_of(q);
	error = store_model_edit(&json, db, q->caps[0], version, desc, tags, archived, actor);
	if (error == FERRY_EINVALID)
		reply_error(r, 400, "invalid_field", "tags", ferry_error_last(), NULL);
	else
		reply_store(r, error, json);
out:
	free(actor);
	json_decref(body);
}

void api_model_patch(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	(void)a;
	model_patch(r, db, q, NULL);
}

void api_model_version_patch(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	(void)a;
	model_patch(r, db, q, q->caps[1]);
}

void api_model_alias_delete(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *actor = actor_of(q), *json = NULL;
	int error = store_model_alias_delete(&json, db, q->caps[0], q->caps[1], actor);

	(void)a;
	reply_store(r, error, json);
	free(actor);
}

void api_model_version(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *json = NULL;
	int error = store_model_version(&json, db, q->caps[0], q->caps[1]);

	(void)a;
	reply_store(r, error, json);
}

void api_model_alias_put(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	json_t *body = body_object(r, q);
	const char *name = q->caps[0], *alias = q->caps[1], *version = NULL;
	char *actor = NULL, *json = NULL;
	int error;

	(void)a;
	if (body == NULL)
		return;
	if (opt_string(&version, r, body, "version") < 0)
		goto out;
	if (version == NULL) {
		reply_error(r, 400, "missing_field", "version",
			    "field \"version\" is required: the version the alias should point at, e.g. {\"version\":\"0.0.2\"}",
			    NULL);
		goto out;
	}
	{
		/* an alias that follows a deployment's traffic moves with its weights, not by hand */
		char *dep = NULL;
		if ((error = store_alias_bound(&dep, db, name, alias)) < 0) {
			reply_store_error(r, error);
			goto out;
		}
		if (dep) {
			char *msg = xasprintf("alias %s of model %s follows the traffic of deployment %s (it names the "
					      "version that serves): `ferry deployments promote` moves it with the "
					      "traffic", alias, name, dep);
			reply_error(r, 409, "conflict", "alias", msg, NULL);
			free(msg), free(dep);
			goto out;
		}
	}
	actor = actor_of(q);
	error = store_model_alias_set(&json, db, name, alias, version, actor);
	if (error == FERRY_EINVALID)
		reply_error(r, 400, "invalid_field", "alias", ferry_error_last(), NULL);
	else
		reply_store(r, error, json);
out:
	free(actor);
	json_decref(body);
}

/* Whether p is a clean relative path: no empty, "." or ".." segment, not absolute. */
static int clean_relative(const char *p)
{
	if (*p == '\0' || *p == '/')
		return 0;
	for (const char *s = p; *s;) {
		size_t n = strcspn(s, "/");
		if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
			return 0;
		s += n;
		if (*s == '/' && *++s == '\0')
			return 0; /* a trailing slash */
	}
	return 1;
}

/* Answers with the bytes of the blob at path (a file of the artifact store) and its sha256. */
static void reply_blob(struct reply *r, const char *path, const char *sha256, const char *type)
{
	struct MHD_Response *resp;
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		char msg[256];
		snprintf(msg, sizeof(msg), "the artifact store has lost a blob (%.64s): %s", sha256,
			 fd < 0 ? strerror(errno) : "not a file");
		if (fd >= 0)
			close(fd);
		reply_error(r, 500, "internal", NULL, msg, NULL);
		return;
	}
	resp = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
	MHD_add_response_header(resp, "Content-Type", type);
	MHD_add_response_header(resp, "X-Ferry-Sha256", sha256);
	r->status = 200;
	r->resp = resp;
}

/*
 * *path: blob hex in this host's store, fetched from a host that holds it
 * when this one lacks it (store_blob_ensure: its hash checked). 0, or the
 * answer made (503 naming the blob when no live host could give it). The
 * worker waits for that transfer: bounded (5 s to connect, then at least
 * 1 KiB/s), and once per blob and host, since the host keeps what it got.
 */
static int local_blob(char **path, struct api *a, struct reply *r, PGconn *db, const char *hex)
{
	int error = store_blob_ensure(path, db, a->home ? a->home : ".ferry", hex, 0);

	if (error == FERRY_OK)
		return 0;
	if (error == FERRY_EINVALID && !blobs_is_hex(hex))
		reply_error(r, 500, "internal", NULL, "the artifact record is damaged (not a sha256)", NULL);
	else
		reply_error(r, 503, "artifact_unavailable", NULL, ferry_error_last(), NULL);
	return -1;
}

void api_model_artifact(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	const char *want = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "path");
	const char *kind, *sha, *fsha = NULL, *name;
	json_t *v = NULL, *manifest = NULL, *f;
	char *json = NULL, *text = NULL, *blob = NULL, *fpath = NULL, msg[320];
	size_t len, i;
	int error;

	if ((error = store_model_version(&json, db, q->caps[0], q->caps[1])) < 0) {
		reply_store_error(r, error);
		return;
	}
	v = json_loads(json, 0, NULL);
	free(json);
	kind = json_string_value(json_object_get(json_object_get(v, "artifact"), "kind"));
	sha = json_string_value(json_object_get(json_object_get(v, "artifact"), "sha256"));
	name = json_string_value(json_object_get(v, "version"));
	if (kind == NULL || sha == NULL) {
		reply_error(r, 500, "internal", NULL, "the version has no artifact record", NULL);
		goto out;
	}
	if (want && strcmp(kind, "tree") != 0) {
		reply_error(r, 400, "invalid_field", "path",
			    "this version's artifact is a single file: leave out path", NULL);
		goto out;
	}
	if (want && !clean_relative(want)) {
		reply_error(r, 400, "invalid_field", "path",
			    "path must be a file's relative path as the manifest lists it (no '..', '.', empty "
			    "segments or leading '/')", NULL);
		goto out;
	}
	/* by its sha256 in this host's store, whichever host registered it */
	if (local_blob(&blob, a, r, db, sha) < 0)
		goto out;
	if (want == NULL) {
		/* a file's bytes, or a directory's manifest: the client checks either against sha256 */
		reply_blob(r, blob, sha, strcmp(kind, "tree") == 0 ? "application/json" : "application/octet-stream");
		goto out;
	}
	/* only a path the manifest lists is served, from its blob: nothing outside the store is reachable */
	if (file_read(&text, &len, blob) < 0 || (manifest = json_loads(text, 0, NULL)) == NULL) {
		reply_error(r, 500, "internal", NULL, "the artifact's manifest cannot be read", NULL);
		goto out;
	}
	json_array_foreach(json_object_get(manifest, "files"), i, f)
		if (json_is_string(json_object_get(f, "path")) &&
		    strcmp(json_string_value(json_object_get(f, "path")), want) == 0)
			fsha = json_string_value(json_object_get(f, "sha256"));
	if (fsha == NULL) {
		snprintf(msg, sizeof(msg), "the artifact of %.100s %.40s has no file \"%.100s\"", q->caps[0],
			 name ? name : q->caps[1], want);
		reply_error(r, 404, "not_found", "path", msg, NULL);
		goto out;
	}
	if (!blobs_is_hex(fsha)) {
		reply_error(r, 500, "internal", NULL, "the artifact's manifest is damaged", NULL);
		goto out;
	}
	if (local_blob(&fpath, a, r, db, fsha) < 0)
		goto out;
	reply_blob(r, fpath, fsha, "application/octet-stream");
out:
	free(text), free(blob), free(fpath);
	json_decref(manifest);
	json_decref(v);
}

/*
 * GET /blobs/{sha256}: a blob of this host's store, for another daemon
 * of the fleet that lacks it (store_blobs.c). Never forwarded: 404 when
 * this host has none. A viewer's route, as every GET is (a viewer reads
 * the same bytes through /models/{name}/versions/{version}/artifact);
 * the daemons call it with the fleet's token.
 */
void api_blob_get(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	char *path;

	(void)db;
	if (!blobs_is_hex(q->caps[0])) {
		reply_error(r, 400, "invalid_field", "sha256", "a blob is named by its sha256: 64 lower-case hex digits",
			    NULL);
		return;
	}
	path = blobs_path(a->home ? a->home : ".ferry", q->caps[0]);
	if (access(path, F_OK) != 0)
		reply_error(r, 404, "not_found", "sha256", "this host's store has no such blob", NULL);
	else
		reply_blob(r, path, q->caps[0], "application/octet-stream");
	free(path);
}

/*
 * POST /models/{name}/versions {"path", "alias", "version", "metrics",
 * "params", "description", "tags"}: registers a version outside a
 * pipeline (MLflow's register_model): the file or directory at path on
 * this machine — an absolute path the job user could read, inside
 * FERRY_ALLOWED_ROOTS when set, never Ferry's own files — stored
 * content-addressed like a register step's, no run in its lineage. An alias
 * that follows a deployment's traffic is refused, as for a step.
 */
void api_model_register(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	json_t *body = body_object(r, q), *aliases = NULL, *metrics, *params, *v, *vjson = NULL, *tags;
	const char *path = NULL, *bump = NULL, *desc = NULL, *base, *home = a->home ? a->home : ".ferry";
	struct registry_artifact art = {0};
	struct store_model_reg reg = {0};
	char real[PATH_MAX], *actor = NULL, *version = NULL, *json = NULL, *homereal = NULL;
	int created = 0, error;
	size_t i;

	if (body == NULL)
		return;
	/* everything checked before anything is written: the version and its description and tags are one */
	if (opt_string(&path, r, body, "path") < 0 || opt_string(&bump, r, body, "version") < 0 ||
	    desc_tags(r, body, &desc, &tags) < 0)
		goto out;
	if (path == NULL || path[0] != '/') {
		reply_error(r, 400, "invalid_field", "path", "field \"path\" (an absolute path on the daemon's machine) "
			    "is required", NULL);
		goto out;
	}
	if (bump && strcmp(bump, "patch") != 0 && strcmp(bump, "minor") != 0 && strcmp(bump, "major") != 0) {
		reply_error(r, 400, "invalid_field", "version", "version must be patch, minor or major (the bump)", NULL);
		goto out;
	}
	metrics = json_object_get(body, "metrics");
	params = json_object_get(body, "params");
	if ((metrics && !json_is_object(metrics)) || (params && !json_is_object(params))) {
		reply_error(r, 400, "invalid_field", metrics && !json_is_object(metrics) ? "metrics" : "params",
			    "metrics and params are objects", NULL);
		goto out;
	}
	v = json_object_get(body, "alias");
	aliases = json_is_string(v) ? json_pack("[O]", v) : json_is_array(v) ? json_incref(v) : json_array();
	if (v && !json_is_string(v) && !json_is_array(v)) {
		reply_error(r, 400, "invalid_field", "alias", "alias is a name or a list of names", NULL);
		goto out;
	}
	json_array_foreach(aliases, i, v) {
		char *dep = NULL;
		if (!json_is_string(v)) {
			reply_error(r, 400, "invalid_field", "alias", "alias is a name or a list of names", NULL);
			goto out;
		}
		if ((error = store_alias_bound(&dep, db, q->caps[0], json_string_value(v))) < 0) {
			reply_store_error(r, error);
			goto out;
		}
		if (dep) {
			char *msg = xasprintf("alias %s of model %s follows the traffic of deployment %s: register with "
					      "another alias, such as candidate", json_string_value(v), q->caps[0], dep);
			reply_error(r, 409, "conflict", "alias", msg, NULL);
			free(msg), free(dep);
			goto out;
		}
	}
	/* what a job could read, and never Ferry's own files (its database, tokens, keys, artifacts) */
	homereal = realpath(home, NULL);
	if (realpath(path, real) == NULL) {
		int e = errno;
		char *msg;
		if (exec_user_missing(path, "path", e) == FERRY_EINVALID) {
			/* where the job user could not have looked: said as for a file there, not 404 (exec.h) */
			reply_error(r, 400, "invalid_field", "path", ferry_error_last(), NULL);
			goto out;
		}
		msg = xasprintf("path %s: %s", path, strerror(e));
		reply_error(r, e == ENOENT ? 404 : 400, e == ENOENT ? "not_found" : "invalid_field", "path", msg,
			    NULL);
		free(msg);
		goto out;
	}
	if ((homereal && path_within(real, homereal)) || !exec_user_may_read(real, "path", NULL, NULL)) {
		if (homereal && path_within(real, homereal))
			ferry_error_set("path %s is inside Ferry's home: register a file of yours", real);
		reply_error(r, 400, "invalid_field", "path", ferry_error_last(), NULL);
		goto out;
	}
	if ((error = registry_artifact_put(&art, home, real)) < 0 || (error = registry_artifact_held(db, &art)) < 0) {
		reply_store_error(r, error);
		goto out;
	}
	actor = actor_of(q);
	base = strrchr(real, '/') + 1;
	reg = (struct store_model_reg){
		.model = q->caps[0], .bump = bump ? bump : "patch", .sha256 = art.sha256, .kind = art.kind,
		.bytes = art.bytes, .path = art.path, .name = *base ? base : "artifact", .source = real,
		.metrics = metrics, .params = params, .aliases = aliases, .actor = actor,
		.description = desc, .tags = tags,
	};
	if ((error = store_model_register(&version, &created, &vjson, db, &reg)) < 0) {
		if (error == FERRY_EINVALID)
			reply_error(r, 400, "invalid_field", "alias", ferry_error_last(), NULL);
		else
			reply_store_error(r, error);
		goto out;
	}
	reply_json(r, 201, json_dumps(vjson, JSON_COMPACT));
	flog_info("model %s %s registered from %s by %s", q->caps[0], version, real, actor);
out:
	registry_artifact_dispose(&art);
	free(actor), free(version), free(json), free(homereal);
	json_decref(aliases), json_decref(vjson);
	json_decref(body);
}

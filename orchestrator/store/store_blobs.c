/*
 * store_blobs — artifacts from any host (issue 29, item 5). Each host
 * keeps its own content-addressed store (lib/blobs.h); blob_holders
 * (migration 0031) says which hosts hold which blob. A daemon that needs
 * a blob it lacks — to serve a model's download, to start a replica —
 * asks the live holders' APIs for it by its sha256 (GET /api/v1/blobs/HEX,
 * the fleet's token), newest heartbeat first, keeps it only when its bytes
 * hash to that name (blobs_fetch), and records itself as one more holder.
 * A directory's artifact is its manifest and every file the manifest
 * lists, each fetched the same way.
 */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/store_priv.h"
#include "lib/blobs.h"
#include "lib/envsecret.h"
#include "lib/util.h"

#define TREE_FILES_MAX 100000 /* as a register step stores at most (steps/registry.c) */

int store_blob_held(PGconn *conn, const char *hex, const char *host)
{
	const char *params[2] = {hex, host};

	return store_q(NULL, conn,
		       "INSERT INTO blob_holders (sha256, host) VALUES ($1, $2) ON CONFLICT DO NOTHING", 2, params);
}

int store_blob_sources(json_t **urls, PGconn *conn, const char *hex, const char *host)
{
	const char *params[2] = {hex, host};
	PGresult *res = NULL;
	int error;

	*urls = json_array();
	/* each holder's newest live daemon that published an address, most recently seen first */
	error = store_q(&res, conn,
			"SELECT d.address FROM blob_holders b "
			"JOIN LATERAL (SELECT address, last_seen FROM daemons d WHERE d.host = b.host "
			"  AND d.stopped_at IS NULL AND d.last_seen + d.lease_ms * interval '1 millisecond' > now() "
			"  AND d.address IS NOT NULL ORDER BY d.last_seen DESC LIMIT 1) d ON true "
			"WHERE b.sha256 = $1 AND b.host <> $2 ORDER BY d.last_seen DESC",
			2, params);
	for (int i = 0; error == FERRY_OK && i < PQntuples(res); i++)
		json_array_append_new(*urls, json_string(PQgetvalue(res, i, 0)));
	PQclear(res);
	return error;
}


/* One blob into home's store from the first holder that has it. */
static int ensure_one(PGconn *conn, const char *home, const char *host, const char *hex)
{
	char *path, *token = NULL, *why = NULL;
	json_t *urls = NULL;
	size_t i;
	int error, here;

	if (!blobs_is_hex(hex)) {
		ferry_error_set("\"%.80s\" is not a sha256", hex ? hex : "");
		return FERRY_EINVALID;
	}
	path = blobs_path(home, hex);
	here = access(path, F_OK) == 0;
	free(path);
	if (here)
		return FERRY_OK;
	if ((error = store_blob_sources(&urls, conn, hex, host)) < 0)
		return error;
	if (json_array_size(urls) == 0) {
		ferry_error_set("blob %s is on no live host but this one's store lacks it", hex);
		json_decref(urls);
		return FERRY_ENOTFOUND;
	}
	token = envsecret_fleet_token(home);
	error = FERRY_ERROR;
	for (i = 0; i < json_array_size(urls); i++) {
		char *url = xasprintf("%s/api/v1/blobs/%s", json_string_value(json_array_get(urls, i)), hex);
		int64_t bytes = 0;
		int64_t t0 = clock_mono_ms();
		error = blobs_fetch(home, hex, url, token, &bytes);
		if (error == FERRY_OK)
			flog_info("blob %.12s…: %lld bytes fetched from %s in %lld ms", hex, (long long)bytes,
				  json_string_value(json_array_get(urls, i)), (long long)(clock_mono_ms() - t0));
		else
			flog_warn("blob %.12s…: %s", hex, ferry_error_last());
		free(url);
		if (error == FERRY_OK)
			break;
		free(why);
		why = xstrdup(ferry_error_last());
	}
	if (error == FERRY_OK)
		error = store_blob_held(conn, hex, host);
	else
		ferry_error_set("blob %s could not be fetched from any of its %zu holders (last: %s)", hex,
				json_array_size(urls), why ? why : "?");
	free(why);
	free(token);
	json_decref(urls);
	return error;
}

/*
 * The sha256 of each file the manifest blob hex (in home's store) lists:
 * *hexes, a JSON array of strings, the caller's. FERRY_ERROR when it is no
 * manifest, lists more than TREE_FILES_MAX files or a name that is no sha256.
 */
static int manifest_files(json_t **hexes, const char *home, const char *hex)
{
	char *path = blobs_path(home, hex), *text = NULL;
	json_t *manifest = NULL, *files, *f;
	size_t i;
	int error = FERRY_OK;

	*hexes = json_array();
	if (file_read(&text, NULL, path) < 0 || (manifest = json_loads(text, 0, NULL)) == NULL ||
	    !json_is_array(files = json_object_get(manifest, "files")) || json_array_size(files) > TREE_FILES_MAX) {
		error = FERRY_ERROR;
	} else {
		json_array_foreach(files, i, f) {
			const char *fh = json_string_value(json_object_get(f, "sha256"));
			if (!blobs_is_hex(fh)) {
				error = FERRY_ERROR;
				break;
			}
			json_array_append_new(*hexes, json_string(fh));
		}
	}
	if (error < 0)
		ferry_error_set("the manifest blob %s cannot be read as a manifest", hex);
	free(text), free(path);
	json_decref(manifest);
	return error;
}

int store_blob_ensure(char **path, PGconn *conn, const char *home, const char *hex, int tree)
{
	char host[256];
	json_t *files = NULL, *f;
	size_t i;
	int error;

	*path = NULL;
	ferry_host_name(host, sizeof(host));
	if ((error = ensure_one(conn, home, host, hex)) < 0)
		return error;
	/* a directory: its manifest is here (and checked), then each file it lists */
	if (tree && (error = manifest_files(&files, home, hex)) == FERRY_OK)
		json_array_foreach(files, i, f)
			if ((error = ensure_one(conn, home, host, json_string_value(f))) < 0)
				break;
	json_decref(files);
	if (error < 0)
		return error;
	*path = blobs_path(home, hex);
	return FERRY_OK;
}

int store_blobs_announce(int *held, int *scanned, char **cursor, PGconn *conn, const char *home, const char *host,
			 int limit)
{
	char lim[16];
	const char *params[3] = {host, *cursor ? *cursor : "", lim};
	PGresult *res = NULL;
	json_t *mine = json_array();
	char *list = NULL;
	int error, n;

	*held = *scanned = 0;
	snprintf(lim, sizeof(lim), "%d", limit);
	/* registered artifacts this host is not recorded to hold, a page at a time in sha256 order */
	error = store_q(&res, conn,
			"SELECT a.sha256, a.kind FROM artifacts a WHERE a.sha256 > $2 AND NOT EXISTS ("
			"  SELECT FROM blob_holders b WHERE b.sha256 = a.sha256 AND b.host = $1) "
			"ORDER BY a.sha256 LIMIT $3::int",
			3, params);
	n = error == FERRY_OK ? PQntuples(res) : 0;
	for (int i = 0; i < n; i++) {
		const char *hex = PQgetvalue(res, i, 0);
		char *path = blobs_path(home, hex);
		json_t *files = NULL, *f;
		size_t k;

		if (access(path, F_OK) == 0) {
			json_array_append_new(mine, json_string(hex));
			/* a directory's files: held where its manifest is (stored together) */
			if (strcmp(PQgetvalue(res, i, 1), "tree") == 0 && manifest_files(&files, home, hex) == FERRY_OK)
				json_array_foreach(files, k, f) {
					char *fp = blobs_path(home, json_string_value(f));
					if (access(fp, F_OK) == 0)
						json_array_append(mine, f);
					free(fp);
				}
			json_decref(files);
		}
		free(path);
	}
	if (n > 0) {
		free(*cursor);
		*cursor = xstrdup(PQgetvalue(res, n - 1, 0));
	}
	PQclear(res);
	if (error == FERRY_OK && json_array_size(mine) > 0) {
		const char *p2[2] = {host, NULL};
		list = json_dumps(mine, JSON_COMPACT);
		p2[1] = list;
		error = store_q(NULL, conn,
				"INSERT INTO blob_holders (sha256, host) "
				"SELECT x, $1 FROM jsonb_array_elements_text($2::jsonb) x ON CONFLICT DO NOTHING",
				2, p2);
	}
	if (error == FERRY_OK) {
		*held = (int)json_array_size(mine);
		*scanned = n;
	}
	free(list);
	json_decref(mine);
	return error;
}

int store_blobs_to_copy(json_t **blobs, PGconn *conn, const char *host, int copies, int limit)
{
	char cp[16], lim[16];
	const char *params[3] = {host, cp, lim};
	PGresult *res = NULL;
	int error;

	*blobs = json_array();
	snprintf(cp, sizeof(cp), "%d", copies);
	snprintf(lim, sizeof(lim), "%d", limit);
	/*
	 * blobs with fewer live holders than wanted (copies, or every live host
	 * when fewer), this host not one of them, and this host among the first
	 * (wanted - holders) of the live hosts lacking it by md5(sha256 || host)
	 */
	error = store_q(&res, conn,
			"WITH live AS (SELECT DISTINCT host FROM daemons WHERE stopped_at IS NULL "
			"    AND last_seen + lease_ms * interval '1 millisecond' > now()), "
			"  want AS (SELECT least($2::int, (SELECT count(*) FROM live))::int AS n), "
			"  held AS (SELECT b.sha256, count(*) FILTER (WHERE b.host IN (SELECT host FROM live)) AS live_n, "
			"    bool_or(b.host = $1) AS mine FROM blob_holders b GROUP BY b.sha256) "
			"SELECT h.sha256 FROM held h, want w "
			"WHERE NOT h.mine AND h.live_n > 0 AND h.live_n < w.n AND $1 IN (SELECT host FROM live) "
			"  AND (SELECT count(*) FROM live l WHERE NOT EXISTS (SELECT FROM blob_holders x "
			"         WHERE x.sha256 = h.sha256 AND x.host = l.host) "
			"       AND md5(h.sha256 || l.host) < md5(h.sha256 || $1)) < w.n - h.live_n "
			"ORDER BY h.sha256 LIMIT $3::int",
			3, params);
	for (int i = 0; error == FERRY_OK && i < PQntuples(res); i++)
		json_array_append_new(*blobs, json_string(PQgetvalue(res, i, 0)));
	PQclear(res);
	return error;
}

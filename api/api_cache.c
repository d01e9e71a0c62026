/*
 * api_cache — GET /api/v1/cache: the data cache of the `cache` step kind
 * (steps/datacache.c) as the database knows it: every complete entry with
 * its fingerprint, size, hits, last use and the open sessions pinning it,
 * and the totals (hits, misses, evictions, bytes). ?host=NAME narrows it to
 * one machine's cache.
 */
#include <string.h>

#include "api/api_priv.h"
#include "store/store.h"
#include "lib/util.h"

void api_cache_get(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	const char *host = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "host");
	char *json = NULL;
	int error;

	(void)a;
	if (host != NULL && (host[0] == '\0' || strlen(host) > 255 || !utf8_valid(host, strlen(host)))) {
		reply_error(r, 400, "invalid_field", "host", "parameter \"host\" must be a host name "
			    "(1-255 bytes of UTF-8)", NULL);
		return;
	}
	if ((error = store_cache_json(&json, db, host)) < 0)
		reply_store_error(r, error);
	else
		reply_json(r, 200, json);
}

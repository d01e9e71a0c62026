/*
 * api_cache — the handler of GET /api/v1/cache (data cache entries,
 * sessions and statistics). Called by api.c's database phase.
 */
#ifndef FERRY_API_CACHE_H
#define FERRY_API_CACHE_H

#include <libpq-fe.h>

#include "api_priv.h"

/* Fills r with {"entries":[…],"stats":{…}}, of the host in ?host= or of every host. */
void api_cache_get(struct reply *r, PGconn *db, struct MHD_Connection *conn);

#endif

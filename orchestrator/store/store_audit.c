/*
 * store_audit — reading the audit trail (db/migrations/0018_audit.sql):
 * who did what to a run, a schedule or a trigger, and the tombstones of
 * deleted runs. Rows are written by the statement that makes the change
 * they record (store_housekeep.c, store_schedules.c), never apart.
 */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_priv.h"
#include "lib/util.h"

int store_audit_list(char **out, PGconn *conn, const char *object, int64_t object_id, int64_t before, int limit)
{
	char idb[32], beforeb[32], limb[16];
	const char *p[4] = {object, object_id > 0 ? idb : NULL, before > 0 ? beforeb : NULL, limb};
	PGresult *res = NULL;
	int error;

	*out = NULL;
	snprintf(idb, sizeof(idb), "%lld", (long long)object_id);
	snprintf(beforeb, sizeof(beforeb), "%lld", (long long)before);
	snprintf(limb, sizeof(limb), "%d", limit);
	if ((error = store_q(&res, conn,
			     "SELECT json_build_object('audit', coalesce(json_agg(json_build_object('id', a.id, "
			     "  'at', ferry_ts(a.at), 'actor', a.actor, 'object', a.object, 'object_id', a.object_id, "
			     "  'action', a.action, 'detail', a.detail) ORDER BY a.id DESC), '[]'))::text "
			     "FROM (SELECT * FROM audit WHERE ($1::text IS NULL OR object = $1) "
			     "  AND ($2::bigint IS NULL OR object_id = $2) AND ($3::bigint IS NULL OR id < $3) "
			     "  ORDER BY id DESC LIMIT $4::int) a",
			     4, p)) < 0)
		return error;
	*out = xstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return FERRY_OK;
}

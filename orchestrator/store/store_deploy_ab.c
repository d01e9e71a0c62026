/*
 * store_deploy_ab — a deployment's A/B routing (migration 0025): which
 * version takes the requests that carry a header, for a canary's
 * match: {header, value}. One statement: the columns and the event with
 * its actor together, so the routing and the record of who set it never
 * disagree. reconcile.c applies it to HAProxy.
 */
#include "store/store_deploy.h"

#include <stdio.h>

#include "store/store_priv.h"
#include "lib/util.h"

int store_deploy_match(PGconn *conn, int64_t dep, const char *version, const char *header, const char *value,
		       const char *actor, const char *why)
{
	char d[32];
	const char *params[6] = {d, version, version ? header : NULL, version ? value : NULL, actor, why};
	PGresult *res = NULL;
	int error, n;

	snprintf(d, sizeof(d), "%lld", (long long)dep);
	/* a version named must be one of the deployment's serving ones; ending none is FERRY_ENOTFOUND */
	if ((error = store_q(&res, conn,
			     "WITH u AS (UPDATE deployments d SET match_version = $2, match_header = $3, match_value = $4, "
			     "                                updated_at = now() "
			     "  WHERE d.id = $1::bigint AND ($2::text IS NOT NULL OR d.match_version IS NOT NULL) "
			     "  AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM deployment_versions v "
			     "        WHERE v.deployment_id = d.id AND v.version = $2 AND v.state = 'serving')) "
			     "  RETURNING d.id, (SELECT match_version FROM deployments o WHERE o.id = d.id) AS was) "
			     "INSERT INTO deployment_events (deployment_id, actor, kind, detail) "
			     "SELECT u.id, $5, CASE WHEN $2::text IS NULL THEN 'ab-ended' ELSE 'ab-started' END, "
			     "  jsonb_strip_nulls(jsonb_build_object('version', coalesce($2, u.was), 'header', $3::text, "
			     "    'value', $4::text, 'why', $6::text)) "
			     "FROM u RETURNING deployment_id",
			     6, params)) < 0)
		return error;
	n = PQntuples(res);
	PQclear(res);
	if (n == 0) {
		ferry_error_set(version ? "deployment %lld has no serving version %s"
					: "deployment %lld not found, or no A/B test runs on it%s",
				(long long)dep, version ? version : "");
		return FERRY_ENOTFOUND;
	}
	return FERRY_OK;
}

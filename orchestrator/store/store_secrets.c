/*
 * store_secrets — the SQL of step secrets (db/migrations/0020_secrets.sql):
 * set, list (names only), remove, and the values a starting job names.
 * A value is in the clear only while it passes through: sealed (lib/seal.h)
 * before it is written, opened after it is read; the database holds the
 * sealed bytes, and nothing here logs or returns a value but open's.
 */
#include "store/store.h"

#include <stdlib.h>
#include <string.h>

#include "store/store_priv.h"
#include "lib/seal.h"
#include "lib/util.h"

int store_secret_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > 128 || strncmp(name, "FERRY_", 6) == 0 || (name[0] >= '0' && name[0] <= '9'))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((name[i] >= 'A' && name[i] <= 'Z') || (name[i] >= 'a' && name[i] <= 'z') ||
		      (name[i] >= '0' && name[i] <= '9') || name[i] == '_'))
			return 0;
	return 1;
}

int store_secret_set(PGconn *conn, const unsigned char *key, const char *name, const char *value, size_t n,
		     const char *actor)
{
	unsigned char *sealed = NULL;
	size_t len = 0;
	char *hex;
	int error;

	if (!store_secret_name_ok(name)) {
		ferry_error_set("invalid secret name \"%.64s\": use letters, digits and _, not starting with a digit "
				"or FERRY_ (it becomes the job's environment variable)", name);
		return FERRY_EINVALID;
	}
	if (n < SECRET_MIN_LEN || memchr(value, '\0', n) != NULL) {
		ferry_error_set("secret %s: a value must be at least %d bytes, without NUL bytes (a shorter one "
				"would mask ordinary text in logs)", name, SECRET_MIN_LEN);
		return FERRY_EINVALID;
	}
	if (n > SEAL_VALUE_MAX) {
		ferry_error_set("secret %s: a value must be at most %d bytes", name, SEAL_VALUE_MAX);
		return FERRY_EINVALID;
	}
	if ((error = seal_value(&sealed, &len, key, name, value, n)) < 0)
		return error;
	hex = xmalloc(2 * len + 3);
	hex[0] = '\\', hex[1] = 'x';
	hex_encode(hex + 2, sealed, len);
	free(sealed);
	{
		const char *p[3] = {name, hex, actor};
		/* the change and its audit entry in one statement: neither without the other */
		error = store_q(NULL, conn,
				"WITH s AS (INSERT INTO secrets (name, sealed, updated_by) VALUES ($1, $2::bytea, $3) "
				"ON CONFLICT (name) DO UPDATE SET sealed = $2::bytea, updated_by = $3, updated_at = now() "
				"RETURNING name) "
				"INSERT INTO audit (actor, object, object_id, action, detail) "
				"SELECT $3, 'secret', 0, 'set', jsonb_build_object('name', name) FROM s",
				3, p);
	}
	free(hex);
	return error;
}

int store_secret_delete(PGconn *conn, const char *name, const char *actor)
{
	const char *p[2] = {name, actor};
	PGresult *res = NULL;
	int error = store_q(&res, conn,
			    "WITH s AS (DELETE FROM secrets WHERE name = $1 RETURNING name) "
			    "INSERT INTO audit (actor, object, object_id, action, detail) "
			    "SELECT $2, 'secret', 0, 'removed', jsonb_build_object('name', name) FROM s RETURNING 1",
			    2, p);

	if (error == FERRY_OK && PQntuples(res) == 0) {
		ferry_error_set("no secret named \"%.128s\"", name);
		error = FERRY_ENOTFOUND;
	}
	PQclear(res);
	return error;
}

int store_secret_list(json_t **out, PGconn *conn)
{
	PGresult *res = NULL;
	int error = store_q(&res, conn,
			    "SELECT coalesce(json_agg(json_build_object('name', name, 'updated_by', updated_by, "
			    "'updated_at', to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')) "
			    "ORDER BY name), '[]') FROM secrets",
			    0, NULL);

	*out = NULL;
	if (error < 0)
		return error;
	*out = json_loads(PQgetvalue(res, 0, 0), 0, NULL);
	PQclear(res);
	if (*out == NULL) {
		ferry_error_set("listing secrets: unreadable answer");
		return FERRY_ERROR;
	}
	return FERRY_OK;
}

int store_secrets_missing(json_t **missing, PGconn *conn, const json_t *names)
{
	char *list = json_dumps(names, JSON_COMPACT);
	const char *p[1] = {list};
	PGresult *res = NULL;
	int error = store_q(&res, conn,
			    "SELECT DISTINCT n FROM jsonb_array_elements_text($1::jsonb) AS n "
			    "WHERE NOT EXISTS (SELECT 1 FROM secrets s WHERE s.name = n) ORDER BY n",
			    1, p);

	free(list);
	*missing = NULL;
	if (error < 0)
		return error;
	*missing = json_array();
	for (int i = 0; i < PQntuples(res); i++)
		json_array_append_new(*missing, json_string(PQgetvalue(res, i, 0)));
	PQclear(res);
	return FERRY_OK;
}

int store_secrets_open(json_t **values, PGconn *conn, const unsigned char *key, const json_t *names)
{
	char *list = json_dumps(names, JSON_COMPACT);
	const char *p[1] = {list};
	PGresult *res = NULL;
	int error = store_q(&res, conn,
			    "SELECT n, s.sealed FROM jsonb_array_elements_text($1::jsonb) AS n "
			    "LEFT JOIN secrets s ON s.name = n",
			    1, p);

	free(list);
	*values = NULL;
	if (error < 0)
		return error;
	*values = json_object();
	for (int i = 0; i < PQntuples(res) && error == FERRY_OK; i++) {
		const char *name = PQgetvalue(res, i, 0);
		unsigned char *b;
		char *clear = NULL;
		size_t n = 0, got = 0;

		if (PQgetisnull(res, i, 1)) {
			ferry_error_set("secret %s is not set (ferryd secret set %s, or ferry secrets set %s)", name,
					name, name);
			error = FERRY_ENOTFOUND;
			break;
		}
		if (key == NULL) {
			ferry_error_set("secret %s: this daemon has no secrets key ($FERRY_HOME/secrets.key; "
					"copy it from the host where the secrets were set)", name);
			error = FERRY_EINVALID;
			break;
		}
		b = PQunescapeBytea((const unsigned char *)PQgetvalue(res, i, 1), &n);
		error = b ? seal_open(&clear, &got, key, name, b, n) : FERRY_ERROR;
		if (b) {
			explicit_bzero(b, n);
			PQfreemem(b);
		}
		if (error == FERRY_OK) {
			json_object_set_new(*values, name, json_stringn(clear, got));
			explicit_bzero(clear, got);
		}
		free(clear);
	}
	PQclear(res);
	if (error < 0) {
		json_decref(*values);
		*values = NULL;
	}
	return error;
}

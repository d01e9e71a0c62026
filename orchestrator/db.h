/*
 * db — getting a PostgreSQL connection that is ready to use: the embedded
 * cluster under $FERRY_HOME/pg (initialised once, started as an unprivileged
 * user, reused when already up), or FERRY_DATABASE_URL; then the numbered
 * migrations compiled into the binary, applied in order under an advisory
 * lock, each in its own transaction, recorded in schema_migrations; then,
 * under the same lock, the function files (db/functions) whose text changed,
 * with CREATE OR REPLACE in one transaction, recorded in schema_functions.
 */
#ifndef FERRY_DB_H
#define FERRY_DB_H

#include <libpq-fe.h>

/*
 * Resolves the connection string: FERRY_DATABASE_URL when set, else the
 * embedded cluster under home (started if needed). *out is the caller's.
 */
int db_conninfo(char **out, const char *home);

/* Connects (with a bounded timeout); *out is the caller's (PQfinish). */
int db_connect(PGconn **out, const char *conninfo);

/*
 * Applies every migration not yet recorded, then every function file whose
 * sha256 differs from the one recorded (all of them when a migration was
 * applied); safe to call from many processes.
 */
int db_migrate(PGconn *conn);

/* Stops the embedded cluster under home if it runs. */
int db_embedded_stop(const char *home);

/* One SQL file compiled in (db/gen-sql.sh): its name less .sql, its text. */
struct db_sql {
	const char *name;
	const char *sql;
};
/* The migrations, in order (generated from db/migrations at build time). */
extern const struct db_sql db_migrations[];
extern const int db_migrations_len;
/* The function files, by name (generated from db/functions at build time). */
extern const struct db_sql db_functions[];
extern const int db_functions_len;

#endif

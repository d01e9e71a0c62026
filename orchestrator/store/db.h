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
#include <stdint.h>

/*
 * Resolves the connection string: FERRY_DATABASE_URL when set, else the
 * embedded cluster under home, started if needed and waited for (up to two
 * minutes) while it starts up or recovers. *out is the caller's.
 */
int db_conninfo(char **out, const char *home);

/*
 * db_conninfo, and *started (when not NULL) is 1 when this call started the
 * embedded cluster (it was not running), 0 when it was up already or
 * FERRY_DATABASE_URL is set: whoever started it stops it (db_embedded_stop).
 */
int db_conninfo_ex(char **out, int *started, const char *home);

/*
 * The connection string alone, nothing started: FERRY_DATABASE_URL, or the
 * embedded cluster's (*embedded = 1; db_embedded_ensure brings it up).
 * *out is the caller's.
 */
int db_conninfo_resolve(char **out, int *embedded, const char *home);

/*
 * One look at the embedded cluster under home, started when no postmaster
 * runs (never while one does: PQping's "starting up" or a live pid in
 * postmaster.pid mean wait). 0 when it accepts connections, 1 when not yet
 * (ferry_error_last() says why; look again shortly), <0 on failure.
 * *started (when not NULL) becomes 1 when this call started the postmaster
 * (left as it was otherwise, so a caller looking many times can OR them).
 */
int db_embedded_ensure(const char *home, int *started);

/*
 * The embedded cluster under home started again after an unclean death of
 * its postmaster (killed, out of memory: its postmaster.pid left behind,
 * its process gone); PostgreSQL recovers from its WAL as it starts. A
 * clean stop (`ferryd db stop`: no postmaster.pid) is not undone. 0 when
 * there was nothing to do, else db_embedded_ensure's answer (1: started,
 * not accepting connections yet; <0: it could not be started now, the
 * message says why; a next look tries again).
 */
int db_embedded_revive(const char *home, int *started);

enum db_connect_flags {
	DB_NO_STATEMENT_TIMEOUT = 1 << 0, /* for migrations and lock waits */
};

/*
 * Connects with Ferry's bounds and session settings: connect_timeout 5 s,
 * TCP keepalives (idle 5 s, then 3 probes 2 s apart) and tcp_user_timeout
 * 10 s, each unless conninfo sets its own; statement_timeout from
 * FERRY_DB_STATEMENT_TIMEOUT_MS (default 30 s; 0 none); time zone UTC.
 * conninfo is a postgresql:// URL or a key=value string, passed to libpq
 * as such. A PQreset keeps the settings. *out is the caller's (PQfinish).
 */
int db_connect(PGconn **out, const char *conninfo);

/*
 * db_connect with flags, and, when timeout_ms >= 0, bounded by it on the
 * client's clock (libpq's connect_timeout is whole seconds, at least 2,
 * per address). *out is the caller's.
 */
int db_connect_ex(PGconn **out, const char *conninfo, int64_t timeout_ms, unsigned flags);

/*
 * SELECT 1, waiting at most timeout_ms for the answer even when the server
 * or the network says nothing: 0 or FERRY_EDB. After a failure the
 * connection may still wait for its answer: drop it (PQfinish).
 */
int db_ping(PGconn *conn, int64_t timeout_ms);

/* FERRY_DB_STATEMENT_TIMEOUT_MS (default 30000, 0 no limit); FERRY_EINVALID when malformed. */
int db_statement_timeout_ms(int64_t *out);

/*
 * Applies every migration not yet recorded, then every function file whose
 * sha256 differs from the one recorded (all of them when a migration was
 * applied); safe to call from many processes.
 */
int db_migrate(PGconn *conn);

/*
 * How many other client sessions the server of conn has (a daemon, another
 * `ferry dev`, psql): *out. 0 or FERRY_EDB.
 */
int db_other_sessions(int *out, PGconn *conn);

/* Stops the embedded cluster under home if it runs. */
int db_embedded_stop(const char *home);

/* What the embedded cluster under home is and does (`ferryd db status`). */
struct db_embedded_status {
	char *home, *data, *log, *sockdir;
	char *conninfo;   /* to reach it (host=SOCKDIR dbname=ferry user=ferry) */
	char *version;    /* PG_VERSION (the major version); NULL when not initialised */
	char *pm_status;  /* postmaster.pid's status line (ready, starting, stopping); NULL when not running */
	int initialised;  /* data/PG_VERSION exists */
	int running;      /* a live postmaster owns the data directory */
	int accepting;    /* and it answers PQping */
	long pid;         /* the postmaster's */
	int port;         /* the socket's port number (5432 unless configured) */
	int64_t started_at; /* the postmaster's start, Unix seconds; 0 when unknown */
};

/*
 * Looks at the embedded cluster under home without creating or starting
 * anything: fills *out (the caller disposes of it with
 * db_embedded_status_dispose). <0 only when home cannot be resolved.
 */
int db_embedded_status(struct db_embedded_status *out, const char *home);
void db_embedded_status_dispose(struct db_embedded_status *st);

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

/*
 * db — connection set-up. With FERRY_DATABASE_URL unset, Ferry keeps a
 * private PostgreSQL cluster under $FERRY_HOME/pg: data in pg/data, the unix
 * socket in pg/run (or a short directory under /tmp when that path is too
 * long for a socket), the server log in pg/postgres.log. PostgreSQL refuses
 * to run as root, so as root the cluster belongs to the `postgres` system
 * user and initdb/pg_ctl run under that uid. A flock on $FERRY_HOME/pg.lock
 * serialises the daemon and `ferry dev` starting at once. Migrations and
 * function files are compiled in (db/gen-sql.sh) and applied under an
 * advisory lock: the migrations once each, the function files whenever
 * their text differs from what the database last got.
 */
#include "db.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

#define EMBED_DB "ferry"
#define EMBED_USER "ferry"
#define MIGRATE_LOCK_KEY 0x66657272 /* "ferr" */

struct cluster {
	char *home, *data, *sockdir, *log;
	uid_t uid;
	gid_t gid;
	int as_other; /* run server tools as uid/gid */
};

static void cluster_dispose(struct cluster *c)
{
	free(c->home);
	free(c->data);
	free(c->sockdir);
	free(c->log);
}

/* Finds the newest /usr/lib/postgresql/N/bin/TOOL, or TOOL on PATH. */
static char *pg_tool(const char *tool)
{
	char best[512] = "";
	int best_v = -1;
	DIR *d = opendir("/usr/lib/postgresql");
	struct dirent *de;

	while (d && (de = readdir(d)) != NULL) {
		char path[512];
		int v = (int)strtol(de->d_name, NULL, 10);
		snprintf(path, sizeof(path), "/usr/lib/postgresql/%s/bin/%s", de->d_name, tool);
		if (v > best_v && access(path, X_OK) == 0) {
			best_v = v;
			snprintf(best, sizeof(best), "%s", path);
		}
	}
	if (d)
		closedir(d);
	return xstrdup(best[0] ? best : tool);
}

/* Runs argv (as the cluster's user when needed), output to log; 0 if exit 0. */
static int run_tool(const struct cluster *c, char *const argv[])
{
	pid_t pid;
	int status;

	pid = fork();
	if (pid < 0) {
		ferry_error_set("fork: %s", strerror(errno));
		return FERRY_ERROR;
	}
	if (pid == 0) {
		int fd;
		if (c->as_other) {
			if (setgroups(0, NULL) < 0 || setgid(c->gid) < 0 || setuid(c->uid) < 0)
				_exit(126);
		}
		fd = open(c->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if (chdir(c->home) < 0)
			_exit(126);
		execvp(argv[0], argv);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			ferry_error_set("waitpid: %s", strerror(errno));
			return FERRY_ERROR;
		}
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		ferry_error_set("%s failed (status %d); see %s", argv[0],
				WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), c->log);
		return FERRY_ERROR;
	}
	return FERRY_OK;
}

static int chown_to(const struct cluster *c, const char *path)
{
	if (c->as_other && chown(path, c->uid, c->gid) < 0) {
		ferry_error_set("chown %s: %s", path, strerror(errno));
		return FERRY_ERROR;
	}
	return FERRY_OK;
}

static int cluster_init(struct cluster *c, const char *home)
{
	char *abs = NULL, *pgdir = NULL;
	int error = FERRY_ERROR;

	memset(c, 0, sizeof(*c));
	if (mkdir_p(home, 0755) < 0)
		return FERRY_ERROR;
	abs = realpath(home, NULL);
	if (abs == NULL) {
		ferry_error_set("FERRY_HOME %s: %s", home, strerror(errno));
		return FERRY_ERROR;
	}
	c->home = abs;
	pgdir = xasprintf("%s/pg", abs);
	if (mkdir_p(pgdir, 0755) < 0)
		goto out;
	c->data = xasprintf("%s/data", pgdir);
	c->log = xasprintf("%s/postgres.log", pgdir);
	c->sockdir = xasprintf("%s/run", pgdir);
	if (strlen(c->sockdir) + sizeof("/.s.PGSQL.5432") > 100) {
		/* too long for sun_path: a short per-home directory under /tmp */
		unsigned long h = 5381;
		for (const char *p = abs; *p; p++)
			h = h * 33 + (unsigned char)*p;
		free(c->sockdir);
		c->sockdir = xasprintf("/tmp/ferry-pg-%lx", h);
	}
	if (geteuid() == 0) {
		struct passwd *pw = getpwnam("postgres");
		if (pw == NULL) {
			ferry_error_set("running as root, and there is no 'postgres' user to run the "
					"embedded PostgreSQL (install the postgresql package: make deps)");
			goto out;
		}
		c->uid = pw->pw_uid;
		c->gid = pw->pw_gid;
		c->as_other = 1;
	}
	if (chown_to(c, pgdir) < 0)
		goto out;
	error = FERRY_OK;
out:
	free(pgdir);
	return error;
}

static int cluster_create(struct cluster *c)
{
	char *initdb = pg_tool("initdb"), *conf = NULL;
	char *argv[] = {initdb, "-D", c->data, "-U", EMBED_USER, "-A", "trust", "-E", "UTF8",
			"--locale=C", "--no-instructions", NULL};
	FILE *f = NULL;
	int error;

	flog_info("initialising embedded PostgreSQL in %s", c->data);
	if ((error = run_tool(c, argv)) < 0)
		goto out;
	conf = xasprintf("%s/postgresql.auto.conf", c->data);
	f = fopen(conf, "a");
	if (f == NULL) {
		ferry_error_set("cannot open %s: %s", conf, strerror(errno));
		error = FERRY_ERROR;
		goto out;
	}
	fprintf(f, "listen_addresses = ''\n"
		   "unix_socket_directories = '%s'\n"
		   "unix_socket_permissions = 0700\n"
		   "max_connections = 200\n"
		   "synchronous_commit = on\n"
		   "autovacuum_naptime = 1s\n"
		   "logging_collector = off\n", c->sockdir);
	fclose(f);
out:
	free(initdb);
	free(conf);
	return error;
}

static int cluster_start(struct cluster *c)
{
	char *pg_ctl = pg_tool("pg_ctl");
	char *argv[] = {pg_ctl, "-D", c->data, "-l", c->log, "-w", "-t", "60", "start", NULL};
	int error;

	if (mkdir_p(c->sockdir, 0700) < 0 || chown_to(c, c->sockdir) < 0) {
		free(pg_ctl);
		return FERRY_ERROR;
	}
	flog_info("starting embedded PostgreSQL (%s, socket in %s)", c->data, c->sockdir);
	error = run_tool(c, argv);
	free(pg_ctl);
	return error;
}

static int ensure_database(const char *sockdir)
{
	char *ci = xasprintf("host=%s dbname=postgres user=" EMBED_USER " connect_timeout=10", sockdir);
	PGconn *conn = PQconnectdb(ci);
	PGresult *res = NULL;
	int error = FERRY_ERROR;

	if (PQstatus(conn) != CONNECTION_OK) {
		ferry_error_set("cannot connect to embedded PostgreSQL: %s", PQerrorMessage(conn));
		goto out;
	}
	res = PQexec(conn, "SELECT 1 FROM pg_database WHERE datname = '" EMBED_DB "'");
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		ferry_error_set("%s", PQerrorMessage(conn));
		goto out;
	}
	if (PQntuples(res) == 0) {
		PQclear(res);
		res = PQexec(conn, "CREATE DATABASE " EMBED_DB);
		if (PQresultStatus(res) != PGRES_COMMAND_OK &&
		    strstr(PQerrorMessage(conn), "already exists") == NULL) {
			ferry_error_set("CREATE DATABASE: %s", PQerrorMessage(conn));
			goto out;
		}
	}
	error = FERRY_OK;
out:
	PQclear(res);
	PQfinish(conn);
	free(ci);
	return error;
}

static int lock_home(const char *home)
{
	char *path = xasprintf("%s/pg.lock", home);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

	free(path);
	if (fd < 0) {
		ferry_error_set("cannot open %s/pg.lock: %s", home, strerror(errno));
		return -1;
	}
	for (int i = 0; i < 1200; i++) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return fd;
		usleep(100 * 1000);
	}
	ferry_error_set("timed out waiting for %s/pg.lock", home);
	close(fd);
	return -1;
}

int db_conninfo(char **out, const char *home)
{
	const char *url = getenv("FERRY_DATABASE_URL");
	struct cluster c;
	char *ci = NULL, *pgv = NULL;
	struct stat st;
	int error = FERRY_ERROR, lockfd = -1;

	*out = NULL;
	if (url && *url) {
		*out = xstrdup(url);
		return FERRY_OK;
	}
	if (cluster_init(&c, home) < 0)
		return FERRY_ERROR;
	if ((lockfd = lock_home(c.home)) < 0)
		goto out;
	ci = xasprintf("host=%s dbname=" EMBED_DB " user=" EMBED_USER " connect_timeout=10", c.sockdir);
	pgv = xasprintf("%s/PG_VERSION", c.data);
	if (stat(pgv, &st) == 0 && PQping(ci) == PQPING_OK) {
		error = FERRY_OK;
		goto out;
	}
	if (stat(pgv, &st) < 0) {
		if (c.as_other) {
			/* the server user must be able to reach its directory */
			char *probe = xasprintf("%s/pg", c.home);
			pid_t pid = fork();
			int status = 1;
			if (pid == 0) {
				if (setgroups(0, NULL) < 0 || setgid(c.gid) < 0 || setuid(c.uid) < 0)
					_exit(1);
				_exit(access(probe, W_OK | X_OK) == 0 ? 0 : 1);
			}
			if (pid > 0)
				waitpid(pid, &status, 0);
			if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
				ferry_error_set("the postgres user cannot reach %s; choose a FERRY_HOME whose "
						"parent directories are world-executable (e.g. under /var/lib "
						"or /tmp), or set FERRY_DATABASE_URL", probe);
				free(probe);
				goto out;
			}
			free(probe);
		}
		if (cluster_create(&c) < 0)
			goto out;
	}
	if (cluster_start(&c) < 0)
		goto out;
	if (ensure_database(c.sockdir) < 0)
		goto out;
	error = FERRY_OK;
out:
	if (error == FERRY_OK) {
		*out = ci;
		ci = NULL;
	}
	if (lockfd >= 0)
		close(lockfd);
	free(ci);
	free(pgv);
	cluster_dispose(&c);
	return error;
}

int db_embedded_stop(const char *home)
{
	struct cluster c;
	char *pg_ctl = NULL, *pid = NULL;
	struct stat st;
	int error = FERRY_OK;

	if (cluster_init(&c, home) < 0)
		return FERRY_ERROR;
	pid = xasprintf("%s/postmaster.pid", c.data);
	if (stat(pid, &st) == 0) {
		pg_ctl = pg_tool("pg_ctl");
		char *argv[] = {pg_ctl, "-D", c.data, "-m", "fast", "-w", "stop", NULL};
		error = run_tool(&c, argv);
	}
	free(pg_ctl);
	free(pid);
	cluster_dispose(&c);
	return error;
}

int db_connect(PGconn **out, const char *conninfo)
{
	PGconn *conn;

	*out = NULL;
	conn = PQconnectdb(conninfo);
	if (PQstatus(conn) != CONNECTION_OK) {
		ferry_error_set("cannot connect to PostgreSQL: %s", PQerrorMessage(conn));
		PQfinish(conn);
		return FERRY_EDB;
	}
	*out = conn;
	return FERRY_OK;
}

static int exec_ok(PGconn *conn, const char *sql)
{
	PGresult *res = PQexec(conn, sql);
	ExecStatusType st = PQresultStatus(res);
	int ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;

	if (!ok)
		ferry_error_set("%s", PQerrorMessage(conn));
	PQclear(res);
	return ok ? FERRY_OK : FERRY_EDB;
}

/* Whether res (name, sha256 rows of schema_functions) records name with sha. */
static int function_recorded(const PGresult *res, const char *name, const char *sha)
{
	for (int i = 0; i < PQntuples(res); i++)
		if (strcmp(PQgetvalue(res, i, 0), name) == 0)
			return strcmp(PQgetvalue(res, i, 1), sha) == 0;
	return 0;
}

/*
 * Applies the function files (db/functions) whose sha256 is not the one
 * recorded in schema_functions, or all of them when force (a migration ran
 * just now and may have dropped or replaced one), in one transaction, each
 * with its CREATE OR REPLACE statements, and records their sha256. When every
 * file is current nothing is written, so a restart does not replace functions
 * that other daemons are running. Bodies are checked when first run, not
 * here (check_function_bodies off, as pg_dump does), so files can refer to
 * each other in any order. Called under the migration lock.
 */
static int functions_apply(PGconn *conn, int force)
{
	PGresult *res = NULL;
	char (*sha)[65] = NULL;
	char *stale = NULL;
	int error = FERRY_EDB, nstale = 0, in_tx = 0;

	if (db_functions_len == 0)
		return FERRY_OK;
	if (exec_ok(conn, "CREATE TABLE IF NOT EXISTS schema_functions ("
			  "name text PRIMARY KEY, sha256 text NOT NULL, "
			  "applied_at timestamptz NOT NULL DEFAULT now())") < 0)
		goto out;
	res = PQexec(conn, "SELECT name, sha256 FROM schema_functions");
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		ferry_error_set("reading schema_functions: %s", PQerrorMessage(conn));
		goto out;
	}
	sha = xcalloc((size_t)db_functions_len, sizeof(*sha));
	stale = xcalloc((size_t)db_functions_len, 1);
	for (int i = 0; i < db_functions_len; i++) {
		const char *sql = db_functions[i].sql;
		sha256_hex(sha[i], sql, strlen(sql));
		stale[i] = force || !function_recorded(res, db_functions[i].name, sha[i]);
		nstale += stale[i];
	}
	PQclear(res);
	res = NULL;
	if (nstale == 0) {
		error = FERRY_OK;
		goto out;
	}
	if (exec_ok(conn, "BEGIN") < 0)
		goto out;
	in_tx = 1;
	if (exec_ok(conn, "SET LOCAL check_function_bodies = off") < 0)
		goto out;
	for (int i = 0; i < db_functions_len; i++) {
		const char *params[2] = {db_functions[i].name, sha[i]};
		int bad;

		if (!stale[i])
			continue;
		if (exec_ok(conn, db_functions[i].sql) < 0) {
			char msg[1024];
			snprintf(msg, sizeof(msg), "db/functions/%s.sql failed: %s",
				 db_functions[i].name, ferry_error_last());
			ferry_error_set("%s", msg);
			goto out;
		}
		res = PQexecParams(conn, "INSERT INTO schema_functions (name, sha256) VALUES ($1, $2) "
				   "ON CONFLICT (name) DO UPDATE SET sha256 = excluded.sha256, applied_at = now()",
				   2, NULL, params, NULL, NULL, 0);
		bad = PQresultStatus(res) != PGRES_COMMAND_OK;
		PQclear(res);
		res = NULL;
		if (bad) {
			ferry_error_set("recording db/functions/%s.sql: %s", db_functions[i].name,
					PQerrorMessage(conn));
			goto out;
		}
	}
	if (exec_ok(conn, "COMMIT") < 0)
		goto out;
	in_tx = 0;
	if (flog_level <= FLOG_INFO) {
		char names[1024] = "";
		size_t len = 0;
		for (int i = 0; i < db_functions_len && len < sizeof(names); i++)
			if (stale[i])
				len += (size_t)snprintf(names + len, sizeof(names) - len, " %s", db_functions[i].name);
		flog_info("applied function files:%s", names);
	}
	error = FERRY_OK;
out:
	if (in_tx) {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", ferry_error_last());
		exec_ok(conn, "ROLLBACK");
		ferry_error_set("%s", msg);
	}
	PQclear(res);
	free(sha);
	free(stale);
	return error;
}

int db_migrate(PGconn *conn)
{
	char lock_sql[96];
	int error = FERRY_EDB, locked = 0, applied = 0;

	snprintf(lock_sql, sizeof(lock_sql), "SELECT pg_advisory_lock(%d)", MIGRATE_LOCK_KEY);
	if (exec_ok(conn, "SET client_min_messages = warning") < 0 || exec_ok(conn, lock_sql) < 0)
		goto out;
	locked = 1;
	if (exec_ok(conn, "CREATE TABLE IF NOT EXISTS schema_migrations ("
			  "name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())") < 0)
		goto out;
	for (int i = 0; i < db_migrations_len; i++) {
		const char *name = db_migrations[i].name;
		const char *params[1] = {name};
		PGresult *res = PQexecParams(conn, "SELECT 1 FROM schema_migrations WHERE name = $1",
					     1, NULL, params, NULL, NULL, 0);
		int done = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0;
		int bad = PQresultStatus(res) != PGRES_TUPLES_OK;

		PQclear(res);
		if (bad) {
			ferry_error_set("%s", PQerrorMessage(conn));
			goto out;
		}
		if (done)
			continue;
		if (exec_ok(conn, "BEGIN") < 0)
			goto out;
		if (exec_ok(conn, db_migrations[i].sql) < 0) {
			char msg[1024];
			snprintf(msg, sizeof(msg), "migration %s failed: %s", name, ferry_error_last());
			exec_ok(conn, "ROLLBACK");
			ferry_error_set("%s", msg);
			goto out;
		}
		res = PQexecParams(conn, "INSERT INTO schema_migrations (name) VALUES ($1)",
				   1, NULL, params, NULL, NULL, 0);
		bad = PQresultStatus(res) != PGRES_COMMAND_OK;
		PQclear(res);
		if (bad || exec_ok(conn, "COMMIT") < 0) {
			ferry_error_set("recording migration %s: %s", name, PQerrorMessage(conn));
			exec_ok(conn, "ROLLBACK");
			goto out;
		}
		flog_info("applied migration %s", name);
		applied++;
	}
	if ((error = functions_apply(conn, applied > 0)) < 0)
		goto out;
	error = FERRY_OK;
out:
	if (locked) {
		snprintf(lock_sql, sizeof(lock_sql), "SELECT pg_advisory_unlock(%d)", MIGRATE_LOCK_KEY);
		PGresult *res = PQexec(conn, lock_sql);
		PQclear(res);
	}
	return error;
}

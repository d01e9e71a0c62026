/*
 * db — connection set-up. With FERRY_DATABASE_URL unset, Ferry keeps a
 * private PostgreSQL cluster under $FERRY_HOME/pg: data in pg/data, the unix
 * socket in pg/run (or a short directory under /tmp when that path is too
 * long for a socket), the server log in pg/postgres.log. PostgreSQL refuses
 * to run as root, so as root the cluster belongs to the `postgres` system
 * user and initdb/pg_ctl run under that uid. A flock on $FERRY_HOME/pg.lock
 * serialises the daemon and `ferry dev` starting at once; a cluster whose
 * postmaster answers at all (even "starting up") or still lives is waited
 * for, never started twice. Every connection is made by db_connect_ex,
 * which bounds it (connect and TCP timeouts, statement_timeout) and sets
 * the session's time zone. Migrations and function files are compiled in
 * (db/gen-sql.sh) and applied under an advisory lock: the migrations once
 * each, the function files whenever their text differs from what the
 * database last got.
 */
#include "store/db.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/envsecret.h"
#include "lib/util.h"

#define EMBED_DB "ferry"
#define EMBED_USER "ferry"
#define MIGRATE_LOCK_KEY 0x66657272 /* "ferr" */

struct cluster {
	char *home, *data, *sockdir, *log, *passfile;
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
	free(c->passfile);
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

/*
 * Fills in c's paths for home and the uid the server runs as, creating
 * nothing: `ferryd db status` and the daemon's configuration checks look
 * without leaving a pg/ directory behind. A home that does not exist yet
 * is taken as given (made absolute).
 */
static int cluster_locate(struct cluster *c, const char *home)
{
	char *abs = NULL;

	memset(c, 0, sizeof(*c));
	abs = realpath(home, NULL);
	if (abs == NULL && errno == ENOENT) {
		char cwd[4096];
		if (home[0] == '/')
			abs = xstrdup(home);
		else if (getcwd(cwd, sizeof(cwd)) != NULL)
			abs = xasprintf("%s/%s", cwd, home);
	}
	if (abs == NULL) {
		ferry_error_set("FERRY_HOME %s: %s", home, strerror(errno));
		return FERRY_ERROR;
	}
	c->home = abs;
	c->data = xasprintf("%s/pg/data", abs);
	c->log = xasprintf("%s/pg/postgres.log", abs);
	c->passfile = xasprintf("%s/pgpass", abs);
	c->sockdir = xasprintf("%s/pg/run", abs);
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
			cluster_dispose(c);
			return FERRY_ERROR;
		}
		c->uid = pw->pw_uid;
		c->gid = pw->pw_gid;
		c->as_other = 1;
	}
	return FERRY_OK;
}

/* cluster_locate, then home and home/pg made (pg owned by the server's user). */
static int cluster_init(struct cluster *c, const char *home)
{
	char *pgdir = NULL;
	int error = FERRY_ERROR;

	memset(c, 0, sizeof(*c));
	if (mkdir_p(home, 0755) < 0 || cluster_locate(c, home) < 0)
		return FERRY_ERROR;
	pgdir = xasprintf("%s/pg", c->home);
	/* the server's alone: its data, its log, the socket (when it fits there) */
	if (mkdir_p(pgdir, 0700) < 0 || chown_to(c, pgdir) < 0 || chmod(pgdir, 0700) < 0)
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
	/* a short wait: a slow start (crash recovery) is waited for by the caller, who looks again */
	char *argv[] = {pg_ctl, "-D", c->data, "-l", c->log, "-w", "-t", "5", "start", NULL};
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

/* Whether pg_hba.conf TEXT lets anyone in without a password: a rule whose method is trust. */
static int hba_trusts(const char *text)
{
	for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		size_t len = strcspn(line, "\n");
		const char *hash = memchr(line, '#', len);
		if (hash)
			len = (size_t)(hash - line);
		for (size_t i = 0; i + 5 <= len; i++)
			if (memcmp(line + i, "trust", 5) == 0 && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t') &&
			    (i + 5 == len || line[i + 5] == ' ' || line[i + 5] == '\t' || line[i + 5] == '\r'))
				return 1;
	}
	return 0;
}

/* The password in the cluster's passfile ("*:*:*:ferry:PASSWORD"), or NULL. */
static char *passfile_password(const struct cluster *c)
{
	char *text = NULL, *pw = NULL, *p;

	if (file_read(&text, NULL, c->passfile) < 0)
		return NULL;
	text[strcspn(text, "\r\n")] = '\0';
	p = strrchr(text, ':');
	if (p && p[1])
		pw = xstrdup(p + 1);
	free(text);
	return pw;
}

/* Writes PATH atomically (a temporary beside it, then rename) with MODE; owned by c's server user if chown. */
static int write_private(const struct cluster *c, const char *path, const char *text, mode_t mode, int to_server)
{
	char *tmp = xasprintf("%s.tmp", path);
	int fd, error = FERRY_ERROR;

	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0 || fd_write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0 ||
	    (to_server && c->as_other && fchown(fd, c->uid, c->gid) < 0) || rename(tmp, path) < 0) {
		ferry_error_set("cannot write %s: %s", path, strerror(errno));
		unlink(tmp);
	} else {
		error = FERRY_OK;
	}
	if (fd >= 0)
		close(fd);
	free(tmp);
	return error;
}

/*
 * No connection without the password: a cluster whose pg_hba.conf still
 * trusts (a new one: initdb -A trust, or one made before this) gets a
 * generated password, kept in $FERRY_HOME/pgpass (0600, libpq's passfile
 * format, named by the conninfo's passfile=, so the password itself is in
 * no conninfo, environment or log), set as the role's SCRAM verifier, and
 * an hba of one rule, scram-sha-256, then a reload. A crash half-way is
 * redone at the next start: the rule is what decides, and the passfile is
 * reused if it was written. Jobs run as another user cannot read the
 * passfile, nor reach the socket (pg/ and the socket directory are the
 * server user's, 0700).
 */
static int cluster_secure(const struct cluster *c, PGconn *conn)
{
	char *hba = xasprintf("%s/pg_hba.conf", c->data), *text = NULL, *pw = NULL, *verifier = NULL;
	char *lit = NULL, *sql = NULL, *pass = NULL;
	PGresult *res = NULL;
	int error = FERRY_ERROR;

	if (file_read(&text, NULL, hba) < 0) {
		ferry_error_set("cannot read %s: %s", hba, ferry_error_last());
		goto out;
	}
	pw = passfile_password(c);
	if (!hba_trusts(text)) {
		error = FERRY_OK;
		goto out;
	}
	if (pw == NULL) {
		unsigned char raw[24];
		char hex[49];
		if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
			ferry_error_set("getrandom: %s", strerror(errno));
			goto out;
		}
		hex_encode(hex, raw, sizeof(raw));
		pw = xstrdup(hex);
		pass = xasprintf("*:*:*:" EMBED_USER ":%s\n", pw);
		if (write_private(c, c->passfile, pass, 0600, 0) < 0)
			goto out;
	}
	verifier = PQencryptPasswordConn(conn, pw, EMBED_USER, "scram-sha-256");
	if (verifier == NULL || (lit = PQescapeLiteral(conn, verifier, strlen(verifier))) == NULL) {
		ferry_error_set("encrypting the database password: %s", PQerrorMessage(conn));
		goto out;
	}
	sql = xasprintf("ALTER ROLE " EMBED_USER " PASSWORD %s", lit);
	res = PQexec(conn, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		ferry_error_set("setting the database password: %s", PQerrorMessage(conn));
		goto out;
	}
	PQclear(res);
	if (write_private(c, hba, "# written by Ferry (orchestrator/store/db.c): a password for every "
				  "connection,\n# the one in $FERRY_HOME/pgpass\nlocal all all scram-sha-256\n",
			  0600, 1) < 0)
		goto out;
	res = PQexec(conn, "SELECT pg_reload_conf()");
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		ferry_error_set("reloading pg_hba.conf: %s", PQerrorMessage(conn));
		goto out;
	}
	flog_info("embedded PostgreSQL: password authentication on (scram-sha-256, password in %s)",
		  c->passfile);
	error = FERRY_OK;
out:
	PQclear(res);
	if (pw)
		explicit_bzero(pw, strlen(pw));
	if (pass)
		explicit_bzero(pass, strlen(pass));
	free(pw);
	free(pass);
	PQfreemem(verifier);
	PQfreemem(lit);
	free(sql);
	free(text);
	free(hba);
	return error;
}

static int ensure_database(const struct cluster *c)
{
	char *ci = xasprintf("host=%s dbname=postgres user=" EMBED_USER " passfile=%s", c->sockdir, c->passfile);
	PGconn *conn = NULL;
	PGresult *res = NULL;
	int error = FERRY_ERROR;

	if ((error = db_connect_ex(&conn, ci, -1, DB_NO_STATEMENT_TIMEOUT)) < 0) {
		if (access(c->passfile, F_OK) < 0)
			ferry_error_set("%s (the embedded PostgreSQL asks for the password that was in %s, "
					"which is gone: restore it, or set pg/data/pg_hba.conf back to trust "
					"once and restart to have a new one made)", ferry_error_last(), c->passfile);
		goto out;
	}
	if ((error = cluster_secure(c, conn)) < 0)
		goto out;
	error = FERRY_ERROR;
	error = FERRY_ERROR;
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

/*
 * Whether the postmaster named in the cluster's postmaster.pid lives: a
 * process with that pid that is a postgres (not a pid reused since). Then
 * the cluster must not be started again, only waited for. 0 when the file
 * is absent or stale, 1 when it lives (pid in *pid).
 */
static int postmaster_alive(const struct cluster *c, long *pid)
{
	char *path = xasprintf("%s/postmaster.pid", c->data), *text = NULL, *comm = NULL, *end;
	int alive = 0;

	*pid = 0;
	if (file_read(&text, NULL, path) < 0)
		goto out;
	*pid = strtol(text, &end, 10);
	if (end == text || *pid <= 0)
		goto out;
	if (kill((pid_t)*pid, 0) < 0 && errno != EPERM)
		goto out;
	free(path);
	path = xasprintf("/proc/%ld/comm", *pid);
	/* no /proc: trust the pid */
	alive = file_read(&comm, NULL, path) < 0 || strncmp(comm, "postgres", 8) == 0 ||
		strncmp(comm, "postmaster", 10) == 0;
out:
	free(path), free(text), free(comm);
	return alive;
}

/*
 * One look at the embedded cluster, starting it when no postmaster runs:
 * 0 when it accepts connections (and the database exists), 1 when it is
 * not ready yet (starting up, in crash recovery, shutting down: wait and
 * look again; ferry_error_last() says which), <0 on failure. A postmaster
 * that answers at all — PQping's REJECT included — or whose pid file names
 * a live process is never started a second time. *started (when not NULL)
 * becomes 1 when this call started the postmaster.
 */
static int cluster_ensure(struct cluster *c, const char *ci, int *started)
{
	char *pgv = xasprintf("%s/PG_VERSION", c->data);
	struct stat st;
	long pid = 0;
	int error = FERRY_ERROR;

	switch (PQping(ci)) {
	case PQPING_OK:
		error = ensure_database(c);
		goto out;
	case PQPING_REJECT:
		ferry_error_set("embedded PostgreSQL is up but not accepting connections yet "
				"(starting up, in crash recovery or shutting down; see %s)", c->log);
		error = 1;
		goto out;
	case PQPING_NO_RESPONSE:
	case PQPING_NO_ATTEMPT:
		break;
	}
	if (stat(pgv, &st) < 0) {
		if (c->as_other) {
			/* the server user must be able to reach its directory */
			char *probe = xasprintf("%s/pg", c->home);
			pid_t child = fork();
			int status = 1;
			if (child == 0) {
				if (setgroups(0, NULL) < 0 || setgid(c->gid) < 0 || setuid(c->uid) < 0)
					_exit(1);
				_exit(access(probe, W_OK | X_OK) == 0 ? 0 : 1);
			}
			if (child > 0)
				waitpid(child, &status, 0);
			if (child < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
				ferry_error_set("the postgres user cannot reach %s; choose a FERRY_HOME whose "
						"parent directories are world-executable (e.g. under /var/lib "
						"or /tmp), or set FERRY_DATABASE_URL", probe);
				free(probe);
				goto out;
			}
			free(probe);
		}
		if (cluster_create(c) < 0)
			goto out;
	} else if (postmaster_alive(c, &pid)) {
		ferry_error_set("embedded PostgreSQL (postmaster %ld) is running but not answering yet; "
				"see %s", pid, c->log);
		error = 1;
		goto out;
	}
	if (cluster_start(c) < 0) {
		/* pg_ctl gave up waiting, but a postmaster it started may still be on its way */
		if (postmaster_alive(c, &pid)) {
			ferry_error_set("embedded PostgreSQL (postmaster %ld) is starting; see %s", pid, c->log);
			error = 1;
			if (started)
				*started = 1;
		}
		goto out;
	}
	if (started)
		*started = 1;
	error = PQping(ci) == PQPING_OK ? ensure_database(c) : 1;
	if (error == 1)
		ferry_error_set("embedded PostgreSQL started but does not accept connections yet; see %s", c->log);
out:
	free(pgv);
	return error;
}

/* The conninfo of the embedded cluster c. */
static char *cluster_conninfo(const struct cluster *c)
{
	return xasprintf("host=%s dbname=" EMBED_DB " user=" EMBED_USER " passfile=%s", c->sockdir, c->passfile);
}

int db_conninfo_resolve(char **out, int *embedded, const char *home)
{
	const char *url = envsecret_get("FERRY_DATABASE_URL");
	struct cluster c;

	*out = NULL;
	*embedded = !(url && *url);
	if (!*embedded) {
		*out = xstrdup(url);
		return FERRY_OK;
	}
	/* nothing made yet: the daemon resolves this before its configuration is known to be good */
	if (cluster_locate(&c, home) < 0)
		return FERRY_ERROR;
	*out = cluster_conninfo(&c);
	cluster_dispose(&c);
	return FERRY_OK;
}

/* db_embedded_ensure: one look, under the home's lock. */
static int embedded_ensure(const char *home, int *started)
{
	struct cluster c;
	char *ci = NULL;
	int error, lockfd;

	if (cluster_init(&c, home) < 0)
		return FERRY_ERROR;
	ci = cluster_conninfo(&c);
	if ((lockfd = lock_home(c.home)) < 0) {
		error = FERRY_ERROR;
		goto out;
	}
	error = cluster_ensure(&c, ci, started);
	close(lockfd);
out:
	free(ci);
	cluster_dispose(&c);
	return error;
}

int db_embedded_ensure(const char *home, int *started)
{
	return embedded_ensure(home, started);
}

int db_embedded_revive(const char *home, int *started)
{
	struct cluster c;
	char *path;
	long pid = 0;
	int died;

	if (cluster_locate(&c, home) < 0)
		return FERRY_ERROR;
	path = xasprintf("%s/postmaster.pid", c.data);
	/* a postmaster removes its postmaster.pid as it exits: one left without its process died */
	died = access(path, F_OK) == 0 && !postmaster_alive(&c, &pid);
	free(path);
	cluster_dispose(&c);
	if (!died)
		return 0;
	flog_warn("the embedded PostgreSQL died (postmaster %ld is gone, its postmaster.pid left): starting it again",
		  pid);
	return embedded_ensure(home, started);
}

int db_conninfo(char **out, const char *home)
{
	return db_conninfo_ex(out, NULL, home);
}

int db_conninfo_ex(char **out, int *started, const char *home)
{
	int64_t deadline = clock_mono_ms() + 120000;
	int embedded, error;

	if (started)
		*started = 0;
	if ((error = db_conninfo_resolve(out, &embedded, home)) < 0 || !embedded)
		return error;
	/* a cluster starting up or recovering is waited for, as pg_ctl -w would */
	while ((error = embedded_ensure(home, started)) == 1 && clock_mono_ms() < deadline)
		usleep(200 * 1000);
	if (error != 0) {
		if (error == 1)
			error = FERRY_EDB;
		free(*out);
		*out = NULL;
	}
	return error;
}

int db_other_sessions(int *out, PGconn *conn)
{
	PGresult *res = PQexec(conn, "SELECT count(*) FROM pg_stat_activity "
				     "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()");
	int error = FERRY_OK;

	*out = 0;
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
		ferry_error_set("counting the database's sessions: %s", PQerrorMessage(conn));
		error = FERRY_EDB;
	} else {
		*out = (int)strtol(PQgetvalue(res, 0, 0), NULL, 10);
	}
	PQclear(res);
	return error;
}

int db_embedded_stop(const char *home)
{
	struct cluster c;
	char *pg_ctl = NULL, *pid = NULL;
	struct stat st;
	int error = FERRY_OK;

	if (cluster_locate(&c, home) < 0)
		return FERRY_ERROR;
	pid = xasprintf("%s/postmaster.pid", c.data);
	if (stat(pid, &st) == 0) {
		pg_ctl = pg_tool("pg_ctl");
		char *argv[] = {pg_ctl, "-D", c.data, "-m", "fast", "-w", "stop", NULL};
		error = run_tool(&c, argv);
	}
	/*
	 * the short socket directory under /tmp of a home too long for a socket's path: removed once
	 * empty (the stopped server took its socket and lock with it; another's running there keeps it)
	 */
	if (error == FERRY_OK && strncmp(c.sockdir, c.home, strlen(c.home)) != 0 && rmdir(c.sockdir) < 0 &&
	    errno != ENOENT && errno != ENOTEMPTY)
		flog_debug("%s: %s", c.sockdir, strerror(errno));
	free(pg_ctl);
	free(pid);
	cluster_dispose(&c);
	return error;
}

/* Line n (1-based) of text, less its newline and trailing blanks, into buf; "" when there is none. */
static void line_of(char *buf, size_t size, const char *text, int n)
{
	size_t len;

	for (int i = 1; text && i < n; i++) {
		text = strchr(text, '\n');
		if (text)
			text++;
	}
	len = text ? strcspn(text, "\n") : 0;
	if (len >= size)
		len = size - 1;
	memcpy(buf, text ? text : "", len);
	while (len > 0 && (buf[len - 1] == ' ' || buf[len - 1] == '\r'))
		len--;
	buf[len] = '\0';
}

int db_embedded_status(struct db_embedded_status *out, const char *home)
{
	struct cluster c;
	char *path = NULL, *text = NULL;
	char line[256];
	long pid = 0;

	memset(out, 0, sizeof(*out));
	if (cluster_locate(&c, home) < 0)
		return FERRY_ERROR;
	out->home = xstrdup(c.home);
	out->data = xstrdup(c.data);
	out->log = xstrdup(c.log);
	out->sockdir = xstrdup(c.sockdir);
	out->conninfo = cluster_conninfo(&c);
	out->port = 5432;
	path = xasprintf("%s/PG_VERSION", c.data);
	if (file_read(&text, NULL, path) == FERRY_OK) {
		out->initialised = 1;
		text[strcspn(text, "\r\n")] = '\0';
		out->version = xstrdup(text);
	}
	free(text), text = NULL;
	if (out->initialised && postmaster_alive(&c, &pid)) {
		/* postmaster.pid: pid, data dir, start time, port, socket dir, listen address, shmem key, status */
		out->running = 1;
		out->pid = pid;
		free(path);
		path = xasprintf("%s/postmaster.pid", c.data);
		if (file_read(&text, NULL, path) == FERRY_OK) {
			int64_t n;
			line_of(line, sizeof(line), text, 3);
			if (parse_int64(line, &n) == 0)
				out->started_at = n;
			line_of(line, sizeof(line), text, 4);
			if (parse_int64(line, &n) == 0 && n > 0 && n < 65536)
				out->port = (int)n;
			line_of(line, sizeof(line), text, 8);
			out->pm_status = xstrdup(*line ? line : "unknown");
		}
		out->accepting = PQping(out->conninfo) == PQPING_OK;
	}
	free(path);
	free(text);
	cluster_dispose(&c);
	return FERRY_OK;
}

void db_embedded_status_dispose(struct db_embedded_status *st)
{
	if (st == NULL)
		return;
	free(st->home);
	free(st->data);
	free(st->log);
	free(st->sockdir);
	free(st->conninfo);
	free(st->version);
	free(st->pm_status);
	memset(st, 0, sizeof(*st));
}

/*
 * ---- Ferry's sessions ----
 *
 * Every connection Ferry makes goes through db_connect_ex: libpq's own
 * keywords, never text spliced into the user's connection string. The
 * user's string is passed as an expanded dbname between two groups of
 * keywords: the bounds before it (connect_timeout, TCP keepalives,
 * tcp_user_timeout) are defaults the string may override; the session
 * settings after it (in "options", merged with the string's own options or
 * PGOPTIONS) always apply, and survive a PQreset.
 */

#define CONNECT_TIMEOUT_S "5"       /* per address tried */
#define KEEPALIVES_IDLE_S "5"       /* an idle connection whose peer vanished */
#define KEEPALIVES_INTERVAL_S "2"   /*   is found dead after 5 + 3 × 2 s */
#define KEEPALIVES_COUNT "3"
#define TCP_USER_TIMEOUT_MS "10000" /* unacknowledged data for 10 s: the connection is dead */
#define STATEMENT_TIMEOUT_MS 30000

int db_statement_timeout_ms(int64_t *out)
{
	const char *v = getenv("FERRY_DB_STATEMENT_TIMEOUT_MS");

	*out = STATEMENT_TIMEOUT_MS;
	if (v == NULL || *v == '\0')
		return FERRY_OK;
	if (parse_int64(v, out) < 0 || *out < 0 || *out > INT32_MAX) {
		ferry_error_set("FERRY_DB_STATEMENT_TIMEOUT_MS \"%s\" must be a number of milliseconds "
				"(0 for no limit), e.g. 30000", v);
		*out = STATEMENT_TIMEOUT_MS;
		return FERRY_EINVALID;
	}
	return FERRY_OK;
}

/*
 * The "options" of a Ferry session: the statement timeout first (the
 * user's own options may set another), then theirs, then the time zone
 * (always UTC: timestamps are rendered by the session). *out is the caller's.
 */
static int session_options(char **out, const char *conninfo, unsigned flags)
{
	PQconninfoOption *opts = NULL;
	const char *theirs = NULL;
	char *errmsg = NULL;
	int64_t stmt_ms = 0;
	int error;

	*out = NULL;
	if (!(flags & DB_NO_STATEMENT_TIMEOUT) && (error = db_statement_timeout_ms(&stmt_ms)) < 0)
		return error;
	opts = PQconninfoParse(conninfo, &errmsg);
	if (opts == NULL) {
		size_t n = errmsg ? strlen(errmsg) : 0;
		while (n > 0 && (errmsg[n - 1] == '\n' || errmsg[n - 1] == '.'))
			errmsg[--n] = '\0';
		ferry_error_set("the database connection string is not valid: %s", errmsg ? errmsg : "out of memory");
		PQfreemem(errmsg);
		return FERRY_EINVALID;
	}
	for (PQconninfoOption *o = opts; o->keyword; o++)
		if (strcmp(o->keyword, "options") == 0 && o->val && *o->val)
			theirs = o->val;
	if (theirs == NULL)
		theirs = getenv("PGOPTIONS");
	*out = xasprintf("-c statement_timeout=%lld%s%s -c TimeZone=UTC", (long long)stmt_ms,
			 theirs && *theirs ? " " : "", theirs ? theirs : "");
	PQconninfoFree(opts);
	return FERRY_OK;
}

/* Waits until fd is ready for events or deadline (monotonic ms) passes: 1 ready, 0 timed out, -1 error. */
static int wait_fd_until(int fd, short events, int64_t deadline)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = events};
		int64_t left = deadline - clock_mono_ms();
		int n;

		if (left <= 0)
			return 0;
		n = poll(&p, 1, left > 1000 ? 1000 : (int)left);
		if (n > 0)
			return 1;
		if (n < 0 && errno != EINTR)
			return -1;
	}
}

/* Sets the error message from conn's, on one line (libpq's hint lines joined with a space). */
static void set_conn_error(const char *prefix, PGconn *conn)
{
	const char *m = conn ? PQerrorMessage(conn) : "out of memory";
	char line[1024];
	size_t n = 0;

	for (; *m && n < sizeof(line) - 1; m++) {
		if (*m == '\n' || *m == '\t') {
			if (n > 0 && line[n - 1] != ' ')
				line[n++] = ' ';
			continue;
		}
		line[n++] = *m;
	}
	while (n > 0 && line[n - 1] == ' ')
		n--;
	line[n] = '\0';
	ferry_error_set("%s%s", prefix, line);
}

/* Drives a started connection to its end or the deadline: FERRY_OK or FERRY_EDB (conn stays the caller's). */
static int connect_poll_until(PGconn *conn, int64_t deadline, int64_t timeout_ms)
{
	PostgresPollingStatusType st = PGRES_POLLING_WRITING;

	while (st != PGRES_POLLING_OK) {
		int r;

		if (st == PGRES_POLLING_FAILED || PQstatus(conn) == CONNECTION_BAD) {
			set_conn_error("cannot connect to PostgreSQL: ", conn);
			return FERRY_EDB;
		}
		r = wait_fd_until(PQsocket(conn), st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline);
		if (r <= 0) {
			ferry_error_set("cannot connect to PostgreSQL: no answer within %lld ms", (long long)timeout_ms);
			return FERRY_EDB;
		}
		st = PQconnectPoll(conn);
	}
	return FERRY_OK;
}

int db_connect_ex(PGconn **out, const char *conninfo, int64_t timeout_ms, unsigned flags)
{
	const char *keys[] = {"connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval",
			      "keepalives_count", "tcp_user_timeout", "dbname", "options", NULL};
	const char *vals[] = {CONNECT_TIMEOUT_S, "1", KEEPALIVES_IDLE_S, KEEPALIVES_INTERVAL_S,
			      KEEPALIVES_COUNT, TCP_USER_TIMEOUT_MS, conninfo, NULL, NULL};
	char *options = NULL;
	PGconn *conn = NULL;
	int error;

	*out = NULL;
	if ((error = session_options(&options, conninfo, flags)) < 0)
		return error;
	vals[7] = options;
	if (timeout_ms < 0) {
		/* blocking: libpq bounds each address tried by connect_timeout */
		conn = PQconnectdbParams(keys, vals, 1);
		error = FERRY_OK;
		if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
			set_conn_error("cannot connect to PostgreSQL: ", conn);
			error = FERRY_EDB;
		}
	} else {
		conn = PQconnectStartParams(keys, vals, 1);
		if (conn == NULL) {
			set_conn_error("cannot connect to PostgreSQL: ", conn);
			error = FERRY_EDB;
		} else {
			error = connect_poll_until(conn, clock_mono_ms() + timeout_ms, timeout_ms);
		}
	}
	free(options);
	if (error < 0) {
		PQfinish(conn);
		return error;
	}
	*out = conn;
	return FERRY_OK;
}

int db_connect(PGconn **out, const char *conninfo)
{
	return db_connect_ex(out, conninfo, -1, 0);
}

int db_ping(PGconn *conn, int64_t timeout_ms)
{
	int64_t deadline = clock_mono_ms() + timeout_ms;
	PGresult *res;
	int error = FERRY_OK;

	if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
		if (conn)
			set_conn_error("no connection to PostgreSQL: ", conn);
		else
			ferry_error_set("no connection to PostgreSQL");
		return FERRY_EDB;
	}
	if (PQsetnonblocking(conn, 1) != 0 || !PQsendQuery(conn, "SELECT 1")) {
		set_conn_error("PostgreSQL: ", conn);
		error = FERRY_EDB;
		goto out;
	}
	for (;;) {
		int f = PQflush(conn);

		if (f < 0 || !PQconsumeInput(conn)) {
			set_conn_error("PostgreSQL: ", conn);
			error = FERRY_EDB;
			goto out;
		}
		while (!PQisBusy(conn)) {
			if ((res = PQgetResult(conn)) == NULL)
				goto out;
			if (PQresultStatus(res) != PGRES_TUPLES_OK && error == FERRY_OK) {
				ferry_error_set("PostgreSQL: %s", PQresultErrorMessage(res));
				error = FERRY_EDB;
			}
			PQclear(res);
		}
		if (wait_fd_until(PQsocket(conn), f > 0 ? POLLIN | POLLOUT : POLLIN, deadline) <= 0) {
			/* still busy: the caller must not use the connection again */
			ferry_error_set("PostgreSQL did not answer within %lld ms", (long long)timeout_ms);
			error = FERRY_EDB;
			goto out;
		}
	}
out:
	PQsetnonblocking(conn, 0);
	return error;
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

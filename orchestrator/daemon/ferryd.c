/*
 * ferryd — the daemon: serves the REST API, publishes the address it got
 * (FERRY_LISTEN may name port 0) in its log and in the address file
 * (FERRY_ADDRESS_FILE, default $FERRY_HOME/ferryd.url; removed on exit),
 * prepares the database (embedded cluster or FERRY_DATABASE_URL, then
 * migrations) and runs the engine loop on the main thread until
 * SIGTERM/SIGINT. A database that is down, starting up or recovering is
 * waited for, with backoff, each attempt logged and /readyz answering 503
 * meanwhile (the API answers from the start). On SIGTERM it stops
 * claiming, lets running jobs finish for FERRY_SHUTDOWN_GRACE_MS, then hands
 * any still running over through their leases (the jobs keep running and
 * the next daemon re-adopts them). SIGHUP re-reads $FERRY_HOME/ferryd.conf
 * (log_level = debug|info|warn|error).
 *
 * Its own lifecycle: the configuration (home, token, listen address, port,
 * executor) is checked and the port bound before PostgreSQL is touched, so
 * a bad setting exits without a cluster made or started. An embedded
 * PostgreSQL the daemon started itself is stopped when it exits, after
 * SIGTERM or a start-up error alike, unless --keep-db was given or other
 * sessions still use it; one that was running already, or a
 * FERRY_DATABASE_URL, is left alone. An embedded PostgreSQL killed while
 * the daemon runs (its postmaster.pid left, its process gone) is started
 * again, looked at once a second (db_embedded_revive), and is then the
 * daemon's to stop; a clean `ferryd db stop` is not undone.
 *
 *   ferryd [--log-format text|json] [--log-level LEVEL] [--keep-db]
 *   ferryd db start     start the embedded PostgreSQL of $FERRY_HOME, print its conninfo
 *   ferryd db stop      stop it
 *   ferryd db status [-o json]
 *                       what runs where: data dir, pid, socket, conninfo, daemons
 *   ferryd token create NAME [--role viewer|operator|deployer|admin]
 *                       store a named API token's hash, print the token once
 *   ferryd token list   name, role, created, revoked (never a token)
 *   ferryd token revoke NAME
 *   ferryd secret set NAME < FILE | list | rm NAME
 *                       step secrets: sealed with $FERRY_HOME/secrets.key, names listed, never a value
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/api.h"
#include "store/db.h"
#include "engine/engine.h"
#include "schedule/gitsrc.h"
#include "exec/exec.h"
#include "deploy/replicas.h"
#include "engine/health.h"
#include "store/store.h"
#include "api/tokens.h"
#include "lib/envsecret.h"
#include "lib/seal.h"
#include "lib/util.h"

#define FERRY_VERSION "0.1.0"
#define DB_BACKOFF_MIN_MS 500  /* the first retry of an unreachable database */
#define DB_BACKOFF_MAX_MS 5000 /* and the longest wait between two */
#define DB_STATUS_NOT_RUNNING 3 /* `ferryd db status` exit code, as pg_ctl status */
#define DB_RELEASE_WAIT_MS 2000 /* for our own closed sessions to leave pg_stat_activity */

static volatile sig_atomic_t terminate_flag, reload_flag;
static int wake_fd = -1;

static void on_signal(int sig)
{
	if (sig == SIGHUP)
		reload_flag = 1;
	else
		terminate_flag = 1;
	if (wake_fd >= 0)
		(void)!write(wake_fd, "s", 1);
}

static int level_of(const char *s)
{
	static const char *names[] = {"debug", "info", "warn", "error"};
	for (int i = 0; i < 4; i++)
		if (s && strcmp(s, names[i]) == 0)
			return i;
	return -1;
}

/* Trims blanks at both ends of s in place. */
static char *trim(char *s)
{
	char *end;

	while (*s == ' ' || *s == '\t')
		s++;
	end = s + strlen(s);
	while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
		*--end = '\0';
	return s;
}

/* Reads the reloadable settings of $FERRY_HOME/ferryd.conf ("key = value" lines). */
static void reload_config(const char *home, int json_logs)
{
	char *path = xasprintf("%s/ferryd.conf", home), *buf = NULL, *line, *next;

	if (file_read(&buf, NULL, path) == FERRY_OK) {
		for (line = buf; line && *line; line = next) {
			char *eq, *key, *val;
			next = strchr(line, '\n');
			if (next)
				*next++ = '\0';
			eq = strchr(line, '=');
			if (line[0] == '#' || eq == NULL)
				continue;
			*eq = '\0';
			key = trim(line);
			val = trim(eq + 1);
			if (strcmp(key, "log_level") == 0 && level_of(val) >= 0) {
				flog_setup(level_of(val), json_logs);
				flog_info("reloaded %s: log_level = %s", path, val);
			} else {
				flog_warn("%s: unknown or invalid setting \"%s\"", path, key);
			}
		}
	}
	free(buf);
	free(path);
}

/* Whether the process pid is a ferryd (not a pid reused since by something else). */
static int is_ferryd(long pid)
{
	char *path = xasprintf("/proc/%ld/comm", pid), *comm = NULL;
	int yes;

	yes = file_read(&comm, NULL, path) == FERRY_OK && strncmp(comm, "ferryd", 6) == 0;
	free(path), free(comm);
	return yes;
}

/*
 * The value of NAME in the NUL-separated environment env (len bytes), or
 * NULL. Points into env.
 */
static const char *environ_get(const char *env, size_t len, const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < len; i += strlen(env + i) + 1)
		if (strncmp(env + i, name, n) == 0 && env[i + n] == '=')
			return env + i + n + 1;
	return NULL;
}

/*
 * The daemons that use the embedded cluster of home: every process named
 * ferryd whose FERRY_HOME (made absolute against its working directory)
 * is home and which has no FERRY_DATABASE_URL, serving (not `ferryd db` or
 * `ferryd token`). Reading another user's environment needs their rights:
 * those daemons are not seen. Returns a JSON array (the caller's) of
 * {pid, url}: url is what its address file holds, or null.
 */
static json_t *daemons_of(const char *home)
{
	json_t *list = json_array();
	DIR *d = opendir("/proc");
	struct dirent *de;

	while (d && (de = readdir(d)) != NULL) {
		char *env = NULL, *cmd = NULL, *path = NULL, *url = NULL, *abs = NULL, *cwd = NULL;
		const char *h, *dburl, *addr;
		char *addrfile = NULL, *end;
		size_t envlen = 0, cmdlen = 0;
		long pid = strtol(de->d_name, &end, 10);
		int serving = 1;

		if (*end != '\0' || pid <= 0 || pid == (long)getpid() || !is_ferryd(pid))
			continue;
		path = xasprintf("/proc/%ld/environ", pid);
		if (file_read(&env, &envlen, path) < 0)
			goto next;
		free(path);
		path = xasprintf("/proc/%ld/cmdline", pid);
		if (file_read(&cmd, &cmdlen, path) == FERRY_OK)
			for (size_t i = 0; i < cmdlen; i += strlen(cmd + i) + 1)
				if (strcmp(cmd + i, "db") == 0 || strcmp(cmd + i, "token") == 0 ||
				    strcmp(cmd + i, "secret") == 0)
					serving = 0;
		dburl = environ_get(env, envlen, "FERRY_DATABASE_URL");
		if (!serving || (dburl && *dburl))
			goto next;
		h = environ_get(env, envlen, "FERRY_HOME");
		if (h == NULL || *h == '\0')
			h = "./.ferry";
		free(path);
		path = xasprintf("/proc/%ld/cwd", pid);
		cwd = realpath(path, NULL);
		free(path);
		path = h[0] == '/' || cwd == NULL ? xstrdup(h) : xasprintf("%s/%s", cwd, h);
		abs = realpath(path, NULL);
		if (abs == NULL || strcmp(abs, home) != 0)
			goto next;
		addr = environ_get(env, envlen, "FERRY_ADDRESS_FILE");
		if (addr && *addr)
			addrfile = addr[0] == '/' || cwd == NULL ? xstrdup(addr) : xasprintf("%s/%s", cwd, addr);
		else
			addrfile = xasprintf("%s/ferryd.url", abs);
		if (file_read(&url, NULL, addrfile) == FERRY_OK)
			url[strcspn(url, "\r\n")] = '\0';
		json_array_append_new(list, json_pack("{s:I, s:s?}", "pid", (json_int_t)pid, "url",
						      url && *url ? url : NULL));
	next:
		free(env), free(cmd), free(path), free(url), free(abs), free(cwd), free(addrfile);
	}
	if (d)
		closedir(d);
	return list;
}

/*
 * `ferryd db status [-o json]`: what is running where — the embedded
 * cluster's data directory, whether it is initialised and running, its
 * postmaster, socket, version and conninfo, and the daemons using it.
 * Exit 0 when it runs, DB_STATUS_NOT_RUNNING when not (as pg_ctl status).
 */
static int db_status(int argc, char **argv, const char *home)
{
	struct db_embedded_status st;
	const char *url = envsecret_get("FERRY_DATABASE_URL");
	json_t *daemons = NULL;
	int json_out = 0, status;

	for (int i = 0; i < argc; i++) {
		if ((strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) && i + 1 < argc)
			json_out = strcmp(argv[++i], "json") == 0 ? 1 : strcmp(argv[i], "text") == 0 ? 0 : -1;
		else if (strcmp(argv[i], "-o=json") == 0 || strcmp(argv[i], "--output=json") == 0 ||
			 strcmp(argv[i], "-ojson") == 0)
			json_out = 1;
		else
			json_out = -1;
		if (json_out < 0) {
			fprintf(stderr, "ferryd: db status: unexpected \"%s\"\nusage: ferryd db status [-o json]\n",
				argv[i]);
			return 2;
		}
	}
	if (db_embedded_status(&st, home) < 0) {
		fprintf(stderr, "ferryd: %s\n", ferry_error_last());
		return 1;
	}
	daemons = daemons_of(st.home);
	status = st.running ? 0 : DB_STATUS_NOT_RUNNING;
	if (json_out) {
		json_t *j = json_pack("{s:s, s:s, s:b, s:b, s:b, s:s?, s:s?, s:s, s:i, s:s, s:s, s:b, s:O}",
				      "home", st.home, "data_dir", st.data, "initialised", st.initialised,
				      "running", st.running, "accepting", st.accepting, "version", st.version,
				      "state", st.pm_status, "socket_dir", st.sockdir, "port", st.port,
				      "log", st.log, "conninfo", st.conninfo, "database_url_set", url && *url,
				      "daemons", daemons);
		json_object_set_new(j, "pid", st.running ? json_integer((json_int_t)st.pid) : json_null());
		json_object_set_new(j, "started_at", st.started_at > 0 ? json_integer(st.started_at) : json_null());
		json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		printf("\n");
		json_decref(j);
		goto out;
	}
	if (url && *url)
		printf("FERRY_DATABASE_URL is set: ferryd uses that database and neither starts nor stops it;\n"
		       "the embedded cluster below is not in use by this configuration.\n");
	printf("embedded PostgreSQL of %s\n", st.home);
	printf("  data directory  %s (%s)\n", st.data,
	       st.initialised ? "initialised" : "not initialised: the first ferryd or `ferryd db start` makes it");
	if (st.initialised)
		printf("  version         PostgreSQL %s\n", st.version);
	if (st.running) {
		char when[64] = "";
		if (st.started_at > 0) {
			time_t t = (time_t)st.started_at;
			struct tm tm;
			gmtime_r(&t, &tm);
			strftime(when, sizeof(when), ", since %Y-%m-%dT%H:%M:%SZ", &tm);
		}
		printf("  state           running (postmaster pid %ld%s), %s\n", st.pid, when,
		       st.accepting ? "accepting connections" : "not accepting connections yet");
	} else {
		printf("  state           not running\n");
	}
	printf("  socket          %s/.s.PGSQL.%d\n", st.sockdir, st.port);
	printf("  conninfo        %s\n", st.conninfo);
	printf("  log             %s\n", st.log);
	if (json_array_size(daemons) == 0)
		printf("  daemons         none\n");
	for (size_t i = 0; i < json_array_size(daemons); i++) {
		json_t *dm = json_array_get(daemons, i);
		const char *u = json_string_value(json_object_get(dm, "url"));
		printf("  %-15s ferryd pid %lld%s%s\n", i == 0 ? "daemons" : "",
		       (long long)json_integer_value(json_object_get(dm, "pid")), u ? " on " : "", u ? u : "");
	}
out:
	json_decref(daemons);
	db_embedded_status_dispose(&st);
	return status;
}

/* `ferryd db start|stop|status`: the embedded cluster alone (start prints its conninfo). */
static int db_command(const char *verb, const char *home)
{
	char *conninfo = NULL;

	if (strcmp(verb, "status") == 0)
		return db_status(0, NULL, home);
	if (strcmp(verb, "stop") == 0) {
		if (db_embedded_stop(home) < 0) {
			fprintf(stderr, "ferryd: %s\n", ferry_error_last());
			return 1;
		}
		return 0;
	}
	if (strcmp(verb, "start") == 0) {
		unsetenv("FERRY_DATABASE_URL");
		if (db_conninfo(&conninfo, home) < 0) {
			fprintf(stderr, "ferryd: %s\n", ferry_error_last());
			return 1;
		}
		printf("%s\n", conninfo);
		free(conninfo);
		return 0;
	}
	fprintf(stderr, "ferryd: db takes start, stop or status\n");
	return 2;
}

/* Whether name suits a token: 1-63 of [A-Za-z0-9._-], starting alphanumeric, and not the built-in admin. */
static int token_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > 63 || !isalnum((unsigned char)name[0]) || strcmp(name, "admin") == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)name[i]) && strchr("._-", name[i]) == NULL)
			return 0;
	return 1;
}

/* `ferryd token create NAME [--role R]`: stores the hash, prints the token once. */
static int token_create(PGconn *db, int argc, char **argv)
{
	const char *name = NULL, *role = "operator";
	unsigned char raw[24];
	char token[49], hash[65];

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--role") == 0 && i + 1 < argc)
			role = argv[++i];
		else if (strncmp(argv[i], "--role=", 7) == 0)
			role = argv[i] + 7;
		else if (argv[i][0] != '-' && name == NULL)
			name = argv[i];
		else {
			fprintf(stderr, "ferryd: token create: unexpected \"%s\"\n"
					"usage: ferryd token create NAME [--role viewer|operator|deployer|admin]\n", argv[i]);
			return 2;
		}
	}
	if (name == NULL || !token_name_ok(name)) {
		fprintf(stderr, "ferryd: token create: %s%s%s\n"
				"Names are 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit; "
				"\"admin\" is the daemon's own token.\n",
			name ? "invalid token name \"" : "a token name is required", name ? name : "", name ? "\"" : "");
		return 2;
	}
	if (token_role_parse(role) == 0) {
		fprintf(stderr, "ferryd: token create: invalid role \"%s\"; use viewer, operator, deployer or admin\n", role);
		return 2;
	}
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
		fprintf(stderr, "ferryd: getrandom: %s\n", strerror(errno));
		return 1;
	}
	hex_encode(token, raw, sizeof(raw));
	sha256_hex(hash, token, strlen(token));
	if (store_token_create(db, name, role, hash) < 0) {
		fprintf(stderr, "ferryd: %s\n", ferry_error_last());
		return 1;
	}
	printf("%s\n", token);
	fprintf(stderr, "ferryd: token \"%s\" (%s) created; it is shown only now: keep it\n", name, role);
	return 0;
}

/* `ferryd token list`: name, role, created, revoked; never a token or its hash. */
static int token_list(PGconn *db)
{
	struct store_token *v = NULL;
	int n = 0;

	if (store_token_list(&v, &n, db) < 0) {
		fprintf(stderr, "ferryd: %s\n", ferry_error_last());
		return 1;
	}
	printf("%-24s %-9s %-21s %s\n", "NAME", "ROLE", "CREATED", "REVOKED");
	printf("%-24s %-9s %-21s %s\n", "admin", "admin", "-", "- (FERRY_API_TOKEN or $FERRY_HOME/api-token)");
	for (int i = 0; i < n; i++)
		printf("%-24s %-9s %-21s %s\n", v[i].name, v[i].role, v[i].created_at ? v[i].created_at : "-",
		       v[i].revoked_at ? v[i].revoked_at : "-");
	store_tokens_free(v, n);
	return 0;
}

/* `ferryd token create|list|revoke`: named API tokens, in the database. */
static int token_command(int argc, char **argv, const char *home)
{
	char *conninfo = NULL;
	PGconn *db = NULL;
	int status = 1;

	if (argc < 1 || (strcmp(argv[0], "create") != 0 && strcmp(argv[0], "list") != 0 &&
			 strcmp(argv[0], "revoke") != 0)) {
		fprintf(stderr, "usage: ferryd token create NAME [--role viewer|operator|deployer|admin]\n"
				"       ferryd token list\n"
				"       ferryd token revoke NAME\n");
		return 2;
	}
	if ((strcmp(argv[0], "list") == 0 && argc != 1) || (strcmp(argv[0], "revoke") == 0 && argc != 2)) {
		fprintf(stderr, "ferryd: token %s takes %s\n", argv[0], argv[0][0] == 'l' ? "no arguments" : "one NAME");
		return 2;
	}
	if (db_conninfo(&conninfo, home) < 0 || db_connect(&db, conninfo) < 0 || db_migrate(db) < 0) {
		fprintf(stderr, "ferryd: %s\n", ferry_error_last());
		goto out;
	}
	if (strcmp(argv[0], "create") == 0)
		status = token_create(db, argc - 1, argv + 1);
	else if (strcmp(argv[0], "list") == 0)
		status = token_list(db);
	else if (store_token_revoke(db, argv[1]) < 0)
		fprintf(stderr, "ferryd: %s\n", ferry_error_last());
	else {
		fprintf(stderr, "ferryd: token \"%s\" revoked; the API refuses it within seconds\n", argv[1]);
		status = 0;
	}
out:
	PQfinish(db);
	free(conninfo);
	return status;
}

/*
 * `ferryd secret set NAME | list | rm NAME`: the secrets steps name, on
 * this daemon's database, sealed with $FERRY_HOME/secrets.key (made by the
 * first set). The value comes from stdin; nothing prints one. As the
 * daemon's own user, the actor is "admin".
 */
static int secret_command(int argc, char **argv, const char *home)
{
	char *conninfo = NULL, *value = NULL;
	size_t n = 0;
	PGconn *db = NULL;
	int status = 1;
	const char *sub = argc >= 1 ? argv[0] : "";
	int want = strcmp(sub, "list") == 0 ? 1 : strcmp(sub, "set") == 0 || strcmp(sub, "rm") == 0 ? 2 : 0;

	if (want == 0 || argc != want) {
		fprintf(stderr, "usage: ferryd secret set NAME < FILE\n"
				"       ferryd secret list\n"
				"       ferryd secret rm NAME\n");
		return 2;
	}
	if (strcmp(sub, "set") == 0 && !store_secret_name_ok(argv[1])) {
		fprintf(stderr, "ferryd: secret set: invalid name \"%.64s\": letters, digits and _, not starting "
				"with a digit or FERRY_ (it is the job's environment variable)\n", argv[1]);
		return 2;
	}
	if (db_conninfo(&conninfo, home) < 0 || db_connect(&db, conninfo) < 0 || db_migrate(db) < 0) {
		fprintf(stderr, "ferryd: %s\n", ferry_error_last());
		goto out;
	}
	if (strcmp(sub, "list") == 0) {
		json_t *list = NULL, *s;
		size_t i;
		if (store_secret_list(&list, db) < 0) {
			fprintf(stderr, "ferryd: %s\n", ferry_error_last());
			goto out;
		}
		printf("%-32s %-24s %s\n", "NAME", "UPDATED BY", "UPDATED AT");
		json_array_foreach(list, i, s)
			printf("%-32s %-24s %s\n", json_string_value(json_object_get(s, "name")),
			       json_string_value(json_object_get(s, "updated_by")),
			       json_string_value(json_object_get(s, "updated_at")));
		json_decref(list);
		status = 0;
	} else if (strcmp(sub, "rm") == 0) {
		if (store_secret_delete(db, argv[1], "admin") < 0)
			fprintf(stderr, "ferryd: %s\n", ferry_error_last());
		else {
			fprintf(stderr, "ferryd: secret \"%s\" removed\n", argv[1]);
			status = 0;
		}
	} else {
		const unsigned char *key = seal_key_of(home, 1);
		if (key == NULL || seal_read_stdin(&value, &n, argv[1]) < 0 ||
		    store_secret_set(db, key, argv[1], value, n, "admin") < 0) {
			fprintf(stderr, "ferryd: secret set: %s\n", ferry_error_last());
			goto out;
		}
		fprintf(stderr, "ferryd: secret \"%s\" set (%zu bytes); steps list it under secrets:\n", argv[1], n);
		status = 0;
	}
out:
	if (value) {
		explicit_bzero(value, n);
		free(value);
	}
	PQfinish(db);
	free(conninfo);
	return status;
}

/*
 * Writes url to path atomically (a temporary file renamed over it), so a
 * reader sees the old address or the new one, never half of one.
 */
static int url_publish(const char *path, const char *url)
{
	char *tmp = xasprintf("%s.%d.tmp", path, (int)getpid()), *line = xasprintf("%s\n", url);
	int fd = -1, error = FERRY_ERROR;

	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || fd_write_all(fd, line, strlen(line)) < 0 || fsync(fd) < 0) {
		ferry_error_set("cannot write %s: %s", tmp, strerror(errno));
		goto out;
	}
	if (rename(tmp, path) < 0) {
		ferry_error_set("cannot rename %s to %s: %s", tmp, path, strerror(errno));
		goto out;
	}
	error = FERRY_OK;
out:
	if (fd >= 0)
		close(fd);
	if (error < 0)
		unlink(tmp);
	free(tmp), free(line);
	return error;
}

/* Removes the address file if it still holds url (a daemon started since may have replaced it). */
static void url_unpublish(const char *path, const char *url)
{
	char *text = NULL;

	if (file_read(&text, NULL, path) == FERRY_OK) {
		text[strcspn(text, "\r\n")] = '\0';
		if (strcmp(text, url) == 0)
			unlink(path);
	}
	free(text);
}

/* Sleeps ms, in slices short enough to notice SIGTERM. */
static void sleep_unless_told(int64_t ms)
{
	int64_t until = clock_mono_ms() + ms;

	while (!terminate_flag && clock_mono_ms() < until) {
		struct timespec ts = {0, 100 * 1000000L};
		nanosleep(&ts, NULL);
	}
}

/*
 * Brings up the database (the embedded cluster when there is no
 * FERRY_DATABASE_URL), migrates it, and starts the engine, retrying with
 * backoff (DB_BACKOFF_MIN_MS doubling to DB_BACKOFF_MAX_MS) for as long as
 * it takes: every failed attempt is logged and shown by /readyz through h.
 * 0 with *out set; 0 with *out NULL when SIGTERM came first; <0 for what no
 * wait can mend (a migration that fails on a working connection, a bad
 * engine setting), logged. *pg_started becomes 1 once an attempt started
 * the embedded postmaster, whatever the outcome: it is ours to stop.
 */
static int engine_start_when_ready(struct engine **out, const struct engine_opts *eo, const char *conninfo,
				   int embedded, struct health *h, int *pg_started)
{
	int64_t backoff = DB_BACKOFF_MIN_MS;
	int attempt = 0;

	*out = NULL;
	while (!terminate_flag) {
		PGconn *conn = NULL;
		int error = 0;

		attempt++;
		if (embedded)
			error = db_embedded_ensure(eo->home, pg_started);
		/* migrations on a connection of their own, with no statement timeout */
		if (error == 0 && (error = db_connect_ex(&conn, conninfo, -1, DB_NO_STATEMENT_TIMEOUT)) == 0 &&
		    (error = db_migrate(conn)) < 0 && PQstatus(conn) == CONNECTION_OK) {
			/* the server refused a migration: waiting will not change that */
			flog_error("database: %s", ferry_error_last());
			PQfinish(conn);
			return error;
		}
		if (conn)
			PQfinish(conn);
		if (error == 0) {
			error = engine_new(out, eo, conninfo);
			if (error == 0) {
				if (attempt > 1)
					flog_info("database reached after %d attempts", attempt);
				return FERRY_OK;
			}
			if (error != FERRY_EDB) {
				flog_error("engine: %s", ferry_error_last());
				return error;
			}
		}
		health_waiting(h, "waiting for the database (attempt %d): %s", attempt, ferry_error_last());
		flog_warn("database not ready (attempt %d): %s; retrying in %.1f s", attempt, ferry_error_last(),
			  (double)backoff / 1000.0);
		sleep_unless_told(backoff);
		backoff = backoff * 2 > DB_BACKOFF_MAX_MS ? DB_BACKOFF_MAX_MS : backoff * 2;
	}
	return FERRY_OK;
}

/*
 * At exit: the embedded PostgreSQL this daemon started is stopped, unless
 * keep (--keep-db) or other sessions still use it (another daemon on this
 * FERRY_HOME, a `ferry dev`, psql), as `ferry dev` does. Our own sessions
 * are closed by now, but a backend takes a moment to leave
 * pg_stat_activity: the count is looked at again for DB_RELEASE_WAIT_MS.
 */
static void embedded_release(const char *home, const char *conninfo, int keep)
{
	PGconn *conn = NULL;
	int64_t deadline = clock_mono_ms() + DB_RELEASE_WAIT_MS;
	int others = 0;

	if (keep) {
		flog_info("leaving the embedded PostgreSQL running (--keep-db); `ferryd db stop` stops it");
		return;
	}
	if (db_connect_ex(&conn, conninfo, DB_RELEASE_WAIT_MS, 0) == 0) {
		while (db_other_sessions(&others, conn) == 0 && others > 0 && clock_mono_ms() < deadline) {
			struct timespec ts = {0, 100 * 1000000L};
			nanosleep(&ts, NULL);
		}
	}
	PQfinish(conn);
	if (others > 0) {
		flog_warn("leaving the embedded PostgreSQL running: %d other session%s use it "
			  "(`ferryd db status` shows it; `ferryd db stop` stops it)", others, others == 1 ? "" : "s");
		return;
	}
	flog_info("stopping the embedded PostgreSQL that ferryd started (--keep-db keeps it running)");
	if (db_embedded_stop(home) < 0)
		flog_error("stopping the embedded PostgreSQL: %s", ferry_error_last());
}

/*
 * runs/ marked a top of unrelated trees for ext2/3/4 (chattr +T,
 * FS_TOPDIR_FL): the Orlov allocator places each run's directory in a
 * block group of its own choosing (free inodes, few directories), as it
 * does for /home's users, and the run's steps' directories and files
 * near it, instead of all of them in runs/'s group. Where inodes were
 * deleted within the last minutes in that group (a run's retention, a
 * test suite's homes), an ext4 without a journal skips each of them when
 * it allocates one (recently_deleted(): 60 s, 360 s while its block is
 * dirty): 14 us a mkdir on a quiet /tmp here, 77-110 us soon after a
 * clean-up. Best effort: other file systems ignore or refuse the flag.
 */
static void runs_spread(const char *runs)
{
	int fd = open(runs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), flags = 0;

	if (fd < 0)
		return;
	if (ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 && !(flags & FS_TOPDIR_FL)) {
		flags |= FS_TOPDIR_FL;
		if (ioctl(fd, FS_IOC_SETFLAGS, &flags) < 0)
			flog_debug("%s: not marked a top directory (%s)", runs, strerror(errno));
	}
	close(fd);
}

/*
 * $FERRY_HOME as a job may see it (exec_user.c): the home and runs/ only
 * searchable (0711) when jobs run as the job user, so a job reaches its
 * attempt directory by name and lists nothing (0700 when jobs run as the
 * daemon's own user: nobody else needs in); artifacts/ the daemon's alone.
 * The job user must be able to search down to runs/: a home under a 0700
 * directory is refused here.
 */
static int home_lock_down(const char *home)
{
	char *runs = xasprintf("%s/runs", home), *art = xasprintf("%s/artifacts", home), *real = realpath(home, NULL);
	struct stat st;
	int error = FERRY_ERROR;

	/* the home is made 0711: never a shared directory (/tmp, /) whose mode is everyone's */
	if (real == NULL || stat(real, &st) < 0 || (st.st_mode & S_ISVTX) || strcmp(real, "/") == 0) {
		ferry_error_set("FERRY_HOME %s must be a directory of Ferry's own, not a shared one like /tmp "
				"(ferryd makes it 0711); use a directory under it, e.g. %s/ferry", home,
				real && strcmp(real, "/") != 0 ? real : "/var/lib");
		goto out;
	}
	/* searchable by the job user when there is one; else nobody's but the daemon's */
	mode_t open_to_jobs = exec_user_get() ? 0711 : 0700;

	if (chmod(home, open_to_jobs) < 0 || mkdir_p(runs, open_to_jobs) < 0 || chmod(runs, open_to_jobs) < 0 ||
	    mkdir_p(art, 0700) < 0 || chmod(art, 0700) < 0) {
		ferry_error_set("FERRY_HOME %s: %s", home, errno ? strerror(errno) : ferry_error_last());
		goto out;
	}
	runs_spread(runs);
	error = exec_user_reaches(runs);
out:
	free(runs);
	free(art);
	free(real);
	return error;
}

/* The help: sections as a manual page has them (help2man makes ferryd.8 from it: make install). */
static void usage(FILE *f)
{
	fprintf(f, "Usage: ferryd [--log-format text|json] [--log-level debug|info|warn|error] [--keep-db]\n"
		   "  or:  ferryd db start|stop|status [-o json]\n"
		   "  or:  ferryd token create NAME [--role viewer|operator|deployer|admin] | list | revoke NAME\n"
		   "  or:  ferryd secret set NAME < FILE | list | rm NAME\n"
		   "Run Ferry's daemon: ML workflows as a durable state machine in PostgreSQL, their\n"
		   "steps' jobs on local processes, containers or Slurm, deployments behind HAProxy,\n"
		   "and the REST API, web console and metrics on FERRY_LISTEN.\n"
		   "\n"
		   "Options:\n"
		   "  --log-format text|json   one line a record, to stderr (default text)\n"
		   "  --log-level LEVEL        debug, info (default), warn or error\n"
		   "  --keep-db                leave an embedded PostgreSQL it started running at exit\n"
		   "  --help                   this text\n"
		   "  --version                the version\n"
		   "\n"
		   "Commands:\n"
		   "  db start|stop|status     the embedded PostgreSQL of FERRY_HOME (status: exit 0 running,\n"
		   "                           3 not running; -o json)\n"
		   "  token create|list|revoke named API tokens and their roles (the database directly)\n"
		   "  secret set|list|rm       secrets jobs get by name (sealed under FERRY_HOME/secrets.key)\n"
		   "\n"
		   "Environment:\n"
		   "  FERRY_HOME               state: logs, artifacts, the embedded database (default ./.ferry)\n"
		   "  FERRY_LISTEN             the API's address (default 127.0.0.1:8080; port 0: any free one,\n"
		   "                           written to FERRY_ADDRESS_FILE)\n"
		   "  FERRY_DATABASE_URL       an external PostgreSQL (default: the embedded one of FERRY_HOME)\n"
		   "  FERRY_API_TOKEN          the daemon's own token (default: made into FERRY_HOME/api-token)\n"
		   "  FERRY_EXECUTOR           local (default), podman, docker or slurm\n"
		   "  FERRY_JOB_USER           the user jobs run as when ferryd runs as root (default ferry-job)\n"
		   "  deploy/CONFIG.md lists every setting.\n"
		   "\n"
		   "Files:\n"
		   "  FERRY_HOME/ferryd.url    the address the API listens on (the CLI reads it)\n"
		   "  FERRY_HOME/api-token     the daemon's own token (0600)\n"
		   "  FERRY_HOME/runs/         each attempt's log, status and outputs\n"
		   "  FERRY_HOME/pg/           the embedded PostgreSQL\n"
		   "\n"
		   "Signals:\n"
		   "  SIGTERM, SIGINT          stop claiming, let jobs finish for FERRY_SHUTDOWN_GRACE_MS, then\n"
		   "                           hand the rest over through their leases; an embedded PostgreSQL\n"
		   "                           it started stops with it (unless --keep-db)\n"
		   "  SIGHUP                   read FERRY_HOME/ferryd.conf again (log_level = debug|info|...)\n"
		   "\n"
		   "Exit status:\n"
		   "  0 stopped cleanly, 1 an error (said on stderr), 2 a usage error.\n"
		   "\n"
		   "See also: ferry(1), the README and deploy/CONFIG.md of the source.\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"log-format", required_argument, NULL, 'f'},
		{"log-level", required_argument, NULL, 'l'},
		{"keep-db", no_argument, NULL, 'k'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	const char *listen = getenv("FERRY_LISTEN") ? getenv("FERRY_LISTEN") : "127.0.0.1:8080";
	struct engine_opts eo;
	struct engine *e = NULL;
	struct api *api = NULL;
	struct api_opts ao;
	struct health health;
	struct sigaction sa;
	char *conninfo = NULL, *token = NULL, *pidfile = NULL, *urlfile = NULL;
	int json_logs = 0, level = level_of(getenv("FERRY_LOG_LEVEL")), c, status = 1, embedded = 0;
	int keep_db = 0, pg_started = 0;
	int64_t next_pg_look = 0;
	int64_t grace_ms = 30000, deadline, stmt_ms;

	if (argc >= 2 && strcmp(argv[1], "token") == 0) {
		/* before getopt: token create takes its own --role */
		flog_setup(level >= 0 ? level : FLOG_INFO, json_logs);
		engine_opts_default(&eo);
		return token_command(argc - 2, argv + 2, eo.home);
	}
	if (argc >= 2 && strcmp(argv[1], "secret") == 0) {
		flog_setup(level >= 0 ? level : FLOG_INFO, json_logs);
		engine_opts_default(&eo);
		return secret_command(argc - 2, argv + 2, eo.home);
	}
	if (argc >= 3 && strcmp(argv[1], "db") == 0 && strcmp(argv[2], "status") == 0) {
		/* before getopt: db status takes its own -o */
		flog_setup(level >= 0 ? level : FLOG_INFO, json_logs);
		engine_opts_default(&eo);
		return db_status(argc - 3, argv + 3, eo.home);
	}
	gitsrc_init(); /* libgit2, once, before any thread (git triggers, POST /hooks/git) */
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'f':
			if (strcmp(optarg, "json") != 0 && strcmp(optarg, "text") != 0) {
				fprintf(stderr, "ferryd: --log-format must be text or json\n");
				return 2;
			}
			json_logs = strcmp(optarg, "json") == 0;
			break;
		case 'l':
			if ((level = level_of(optarg)) < 0) {
				fprintf(stderr, "ferryd: --log-level must be debug, info, warn or error\n");
				return 2;
			}
			break;
		case 'k':
			keep_db = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("ferryd %s\n", FERRY_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	flog_setup(level >= 0 ? level : FLOG_INFO, json_logs);
	engine_opts_default(&eo);
	if (optind < argc) {
		if (argc - optind == 2 && strcmp(argv[optind], "db") == 0)
			return db_command(argv[optind + 1], eo.home);
		usage(stderr);
		return 2;
	}
	/* the daemon from here: a job must find none of its secrets in /proc, nor trace it (envsecret.h) */
	envsecret_scrub();
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	if (getenv("FERRY_SHUTDOWN_GRACE_MS"))
		parse_int64(getenv("FERRY_SHUTDOWN_GRACE_MS"), &grace_ms);
	{
		/* FERRY_LABEL_WEBHOOK: where label steps that name no webhook post their tasks */
		const char *hook = getenv("FERRY_LABEL_WEBHOOK");
		if (hook && *hook && ((strncmp(hook, "http://", 7) != 0 && strncmp(hook, "https://", 8) != 0) ||
				      strpbrk(hook, " \t\r\n") != NULL)) {
			flog_error("FERRY_LABEL_WEBHOOK \"%s\" must be an http:// or https:// URL, e.g. "
				   "https://labels.example.com/tasks", hook);
			return 2;
		}
	}
	if (eo.retention_days < 0) {
		flog_error("%s", ferry_error_last());
		return 2;
	}
	if (db_statement_timeout_ms(&stmt_ms) < 0) {
		flog_error("%s", ferry_error_last());
		return 2;
	}
	if (exec_type_find(eo.executor) == NULL) {
		/* engine_new would say so too, but only once the database is up */
		char *known = exec_type_names();
		flog_error("FERRY_EXECUTOR \"%s\" is not an executor (known: %s)", eo.executor, known);
		free(known);
		return 2;
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	health_init(&health);
	eo.health = &health;
	if (mkdir_p(eo.home, 0755) < 0) {
		flog_error("FERRY_HOME: %s", ferry_error_last());
		goto out;
	}
	if (access(eo.home, W_OK | X_OK) < 0) {
		flog_error("FERRY_HOME %s is not writable: %s; choose a directory this user can write",
			   eo.home, strerror(errno));
		goto out;
	}
	if (exec_user_setup(getenv("FERRY_JOB_USER")) < 0 || home_lock_down(eo.home) < 0) {
		flog_error("%s", ferry_error_last());
		goto out;
	}
	if (db_conninfo_resolve(&conninfo, &embedded, eo.home) < 0) {
		flog_error("database: %s", ferry_error_last());
		goto out;
	}
	if (api_token_load(&token, eo.home) < 0) {
		flog_error("API token: %s", ferry_error_last());
		goto out;
	}
	memset(&ao, 0, sizeof(ao));
	ao.health = &health;
	ao.listen = listen;
	ao.token = token;
	ao.conninfo = conninfo;
	ao.home = eo.home;
	ao.db_conns = getenv("FERRY_API_DB_CONNS") ? (int)strtol(getenv("FERRY_API_DB_CONNS"), NULL, 10) : 4;
	{
		/* FERRY_API_RUN_CACHE_MB: memory for finished runs' JSON (default 64; 0 turns the cache off) */
		int64_t mb = 64;
		if (getenv("FERRY_API_RUN_CACHE_MB") && (parse_int64(getenv("FERRY_API_RUN_CACHE_MB"), &mb) < 0 || mb < 0)) {
			flog_error("FERRY_API_RUN_CACHE_MB must be a number of MiB >= 0");
			goto out;
		}
		ao.cache_bytes = (size_t)mb << 20;
		ao.cache_entries = mb > 0 ? 10000 : 0;
	}
	{
		/* FERRY_API_WORKERS: epoll workers serving HTTP (default: one per two cores) */
		int64_t w = 0;
		if (getenv("FERRY_API_WORKERS") &&
		    (parse_int64(getenv("FERRY_API_WORKERS"), &w) < 0 || w < 1 || w > 64)) {
			flog_error("FERRY_API_WORKERS must be a number of threads from 1 to 64");
			goto out;
		}
		ao.workers = (int)w;
	}
	if (api_start(&api, &ao) < 0) {
		flog_error("API: %s", ferry_error_last());
		goto out;
	}
	pidfile = xasprintf("%s/ferryd.pid", eo.home);
	{
		FILE *f = fopen(pidfile, "w");
		if (f) {
			fprintf(f, "%d\n", (int)getpid());
			fclose(f);
		}
	}
	reload_config(eo.home, json_logs);
	flog_info("ferryd %s listening on %s", FERRY_VERSION, api_url(api));
	urlfile = ferry_address_file();
	if (url_publish(urlfile, api_url(api)) < 0) {
		flog_error("address file: %s", ferry_error_last());
		free(urlfile);
		urlfile = NULL;
		goto out;
	}
	eo.public_url = getenv("FERRY_PUBLIC_URL") && *getenv("FERRY_PUBLIC_URL") ? getenv("FERRY_PUBLIC_URL")
										   : api_url(api);
	/* this host's replicas listen where the others reach this host (DEPLOY.md "Replicas across hosts") */
	replica_set_address(eo.public_url);
	if (engine_start_when_ready(&e, &eo, conninfo, embedded, &health, &pg_started) < 0)
		goto out;
	if (e == NULL) {
		flog_info("stopped before the database was reached");
		status = 0;
		goto out;
	}
	wake_fd = engine_wake_fd(e);
	health_set_running(&health, 1);
	flog_info("engine running (owner %s, executor %s)", engine_owner(e), eo.executor);

	while (!terminate_flag) {
		engine_tick(e, 1000);
		if (reload_flag) {
			reload_flag = 0;
			reload_config(eo.home, json_logs);
		}
		/*
		 * the embedded PostgreSQL killed (kill -9, the OOM killer): started again, once a second at
		 * most, by whichever daemon of the home looks first (under its lock); then ours to stop at exit
		 */
		if (embedded && clock_mono_ms() >= next_pg_look) {
			int was = pg_started;
			next_pg_look = clock_mono_ms() + 1000;
			if (db_embedded_revive(eo.home, &pg_started) < 0)
				flog_warn("the embedded PostgreSQL: %s", ferry_error_last());
			else if (pg_started && !was)
				flog_info("the embedded PostgreSQL was started again by this daemon: it stops it at exit");
		}
	}
	flog_info("shutting down: no new steps; waiting up to %lld ms for %d running job%s",
		  (long long)grace_ms, engine_jobs(e), engine_jobs(e) == 1 ? "" : "s");
	health_set_running(&health, 0);
	engine_drain(e);
	terminate_flag = 0;
	deadline = clock_mono_ms() + grace_ms;
	while (engine_jobs(e) > 0 && clock_mono_ms() < deadline && !terminate_flag)
		engine_tick(e, 200);
	engine_release(e);
	status = 0;
out:
	if (urlfile)
		url_unpublish(urlfile, api_url(api));
	api_stop(api);
	engine_free(e);
	health_dispose(&health);
	if (pidfile)
		unlink(pidfile);
	free(pidfile);
	free(urlfile);
	/* last: every session of ours is closed, and the address is no longer published */
	if (pg_started)
		embedded_release(eo.home, conninfo, keep_db);
	else if (embedded && conninfo)
		flog_debug("leaving the embedded PostgreSQL as it was: it was running when ferryd started");
	free(conninfo);
	free(token);
	flog_info("ferryd stopped");
	return status;
}

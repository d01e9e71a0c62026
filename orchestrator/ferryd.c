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
 *   ferryd [--log-format text|json] [--log-level LEVEL]
 *   ferryd db start     start the embedded PostgreSQL of $FERRY_HOME, print its conninfo
 *   ferryd db stop      stop it
 *   ferryd token create NAME [--role viewer|operator|admin]
 *                       store a named API token's hash, print the token once
 *   ferryd token list   name, role, created, revoked (never a token)
 *   ferryd token revoke NAME
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "db.h"
#include "engine.h"
#include "health.h"
#include "store.h"
#include "tokens.h"
#include "util.h"

#define FERRY_VERSION "0.1.0"
#define DB_BACKOFF_MIN_MS 500  /* the first retry of an unreachable database */
#define DB_BACKOFF_MAX_MS 5000 /* and the longest wait between two */

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

/* `ferryd db start|stop`: the embedded cluster alone (start prints its conninfo). */
static int db_command(const char *verb, const char *home)
{
	char *conninfo = NULL;

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
	fprintf(stderr, "ferryd: db takes start or stop\n");
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
					"usage: ferryd token create NAME [--role viewer|operator|admin]\n", argv[i]);
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
		fprintf(stderr, "ferryd: token create: invalid role \"%s\"; use viewer, operator or admin\n", role);
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
		fprintf(stderr, "usage: ferryd token create NAME [--role viewer|operator|admin]\n"
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
 * engine setting), logged.
 */
static int engine_start_when_ready(struct engine **out, const struct engine_opts *eo, const char *conninfo,
				   int embedded, struct health *h)
{
	int64_t backoff = DB_BACKOFF_MIN_MS;
	int attempt = 0;

	*out = NULL;
	while (!terminate_flag) {
		PGconn *conn = NULL;
		int error = 0;

		attempt++;
		if (embedded)
			error = db_embedded_ensure(eo->home);
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

static void usage(FILE *f)
{
	fprintf(f, "usage: ferryd [--log-format text|json] [--log-level debug|info|warn|error]\n"
		   "       ferryd db start|stop\n"
		   "       ferryd token create NAME [--role viewer|operator|admin] | list | revoke NAME\n\n"
		   "Runs Ferry's daemon: REST API on FERRY_LISTEN (default 127.0.0.1:8080), state in\n"
		   "FERRY_HOME (default ./.ferry), database FERRY_DATABASE_URL or an embedded PostgreSQL.\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"log-format", required_argument, NULL, 'f'},
		{"log-level", required_argument, NULL, 'l'},
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
	int64_t grace_ms = 30000, deadline, stmt_ms;

	if (argc >= 2 && strcmp(argv[1], "token") == 0) {
		/* before getopt: token create takes its own --role */
		flog_setup(level >= 0 ? level : FLOG_INFO, json_logs);
		engine_opts_default(&eo);
		return token_command(argc - 2, argv + 2, eo.home);
	}
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
	if (engine_start_when_ready(&e, &eo, conninfo, embedded, &health) < 0)
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
	free(conninfo);
	free(token);
	flog_info("ferryd stopped");
	return status;
}

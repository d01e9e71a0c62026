/*
 * bench_dispatch — measures orchestration itself: a real ferryd on a private
 * embedded PostgreSQL (durable commits), with the benchmark-only noop
 * executor (every job succeeds at once) or the local executor running
 * /bin/true. Prints one JSON line:
 *   steps_per_sec      a backlog of runs × steps (fan-out/fan-in), first
 *                      claim to last completion, from the database's clocks
 *   hop_p50/p99_ms     a 200-step sequential chain: one step's start to the
 *                      next's (the database's stamps): its job (none with
 *                      noop), its end noticed and the call that closes it
 *                      and claims the next (ferry_finish_claim: since the
 *                      two share a transaction, a step's end and the next
 *                      start carry one stamp, and end-to-start, what this
 *                      measured before 2026-12-03, is 0)
 *   ready_to_running   runs submitted while the daemon runs: when a step
 *                      became ready (run created / last need finished) to
 *                      when it was claimed (0 likewise for a step made ready
 *                      and claimed in one transaction)
 *   rss_mb             the daemon's peak resident set (VmHWM)
 *   raw_spawn_per_sec  (local) how many times a second this process forks,
 *                      execs /bin/true and waits for it, one after another,
 *                      measured in the same run: the ceiling of a local job;
 *                      vs_raw is steps_per_sec over it
 *
 *   bench_dispatch [--executor noop|local] [--runs N] [--width W]
 *
 * With --slow-neighbour (local executor) it prints dispatch_slow_neighbour
 * instead: the hops (as above) of a 100-step chain on a quiet daemon, then again while
 * another run registers a 1 GiB artifact (the registry copies and hashes it
 * on the daemon's worker pool), and their ratio.
 *
 *   bench_dispatch --slow-neighbour [--artifact-mb MB]
 *
 * With --chain N (local executor) it prints chain: N /bin/true steps one
 * after another, from the run's creation to its end (runs.created_at to
 * finished_at), five runs, the median: run_ms and per_step_ms.
 *
 *   bench_dispatch --chain 40
 *
 * With --warm (local executor) it prints warm: a step that imports
 * sklearn.svm started cold and warm (warm: {preload: [sklearn.svm]}, the
 * server started by a first run), each from the run's creation to its
 * end, five runs, the median (cold_ms, warm_ms); then a chain of 40
 * Python steps (`python3 -c 'x = 1'`, the Windmill shape) cold and warm
 * (chain_cold_ms, chain_warm_ms).
 *
 *   bench_dispatch --warm
 *
 * With --scale N,N,… it prints scale: one fan-out/fan-in run of each size
 * (root → N−2 parallel → join) on the executor given, from its creation to
 * its end: run_s and steps_per_sec per size, and how the cost per step
 * grows from the smallest to the largest (per_step_growth: 1 is linear);
 * create_s is the part of it spent creating the run (planning it and
 * writing its steps, in this process: runs_create).
 *
 *   bench_dispatch --scale 1000,5000 [--executor noop|local]
 *
 * With --foreach N,N,… it prints foreach: one run of a step fanning out
 * over N items (range: N) per size, on the executor given: expand_s (its
 * children written), run_s, items_per_sec after the expansion, how the
 * cost per item grows from the smallest to the largest (per_item_growth:
 * 1 is linear), and the size and time of the largest run's JSON.
 *
 *   bench_dispatch --foreach 1000,10000,100000 [--executor noop|local]
 *
 * BENCH_AUTO_EXPLAIN=MS logs the plans of the daemon's statements slower
 * than MS ms to the cluster's log (BENCH_KEEP=1 keeps it); see main.
 */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/db.h"
#include "runs/runs.h"
#include "store/store.h"
#include "lib/util.h"

static PGconn *conn;

/* p50 and p99 of the one-column query sql (milliseconds). */
static void sql_percentiles(double *p50, double *p99, const char *sql)
{
	char *q = xasprintf("SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY v), "
			    "percentile_cont(0.99) WITHIN GROUP (ORDER BY v) FROM (%s) x(v)", sql);
	PGresult *r = PQexec(conn, q);

	*p50 = *p99 = -1;
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
		*p50 = strtod(PQgetvalue(r, 0, 0), NULL);
		*p99 = strtod(PQgetvalue(r, 0, 1), NULL);
	} else {
		fprintf(stderr, "bench: %s", PQerrorMessage(conn));
	}
	PQclear(r);
	free(q);
}

static volatile sig_atomic_t stopping; /* a signal's stop is under way (signal_stop): its errors are expected */

static double sql_double(const char *sql)
{
	PGresult *r = PQexec(conn, sql);
	double v = -1;
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
		v = strtod(PQgetvalue(r, 0, 0), NULL);
	else if (PQresultStatus(r) != PGRES_TUPLES_OK && !stopping)
		fprintf(stderr, "bench: %s: %s", sql, PQerrorMessage(conn));
	PQclear(r);
	return v;
}

/* A workflow: root -> width parallel steps -> join; or a chain of length. */
static char *workflow_yaml(const char *name, int width, int chain, const char *cmd)
{
	size_t cap = 256 + (size_t)(width + chain) * 160, len = 0;
	char *y = xmalloc(cap);

	len += (size_t)snprintf(y + len, cap - len, "name: %s\nsteps:\n", name);
	if (chain > 0) {
		for (int i = 0; i < chain; i++) {
			len += (size_t)snprintf(y + len, cap - len, "  - {name: c%d, command: [%s]", i, cmd);
			if (i > 0)
				len += (size_t)snprintf(y + len, cap - len, ", needs: [c%d]", i - 1);
			len += (size_t)snprintf(y + len, cap - len, "}\n");
		}
		return y;
	}
	len += (size_t)snprintf(y + len, cap - len, "  - {name: root, command: [%s]}\n", cmd);
	for (int i = 0; i < width; i++)
		len += (size_t)snprintf(y + len, cap - len, "  - {name: w%d, needs: [root], command: [%s]}\n", i, cmd);
	len += (size_t)snprintf(y + len, cap - len, "  - {name: join, needs: [");
	for (int i = 0; i < width; i++)
		len += (size_t)snprintf(y + len, cap - len, "%sw%d", i ? ", " : "", i);
	snprintf(y + len, cap - len, "], command: [%s]}\n", cmd);
	return y;
}

static int64_t create_run(const char *yaml)
{
	struct runs_new rn;
	cfg_errors errs = {0};
	int64_t id = 0;

	memset(&rn, 0, sizeof(rn));
	rn.yaml = yaml;
	rn.yaml_len = strlen(yaml);
	rn.filename = "bench.yaml";
	rn.trigger = "bench";
	rn.actor = "bench";
	if (runs_create(&id, conn, &rn, &errs) < 0) {
		fprintf(stderr, "bench: create run: %s\n", ferry_error_last());
		for (size_t i = 0; i < errs.len; i++)
			fprintf(stderr, "  %s\n", errs.items[i]);
		exit(1);
	}
	cfg_errors_dispose(&errs);
	return id;
}

static void wait_all_done(int timeout_s)
{
	for (int i = 0; i < timeout_s * 20; i++) {
		if (sql_double("SELECT count(*) FROM runs WHERE state NOT IN ('succeeded','failed','stopped')") == 0)
			return;
		usleep(50 * 1000);
	}
	fprintf(stderr, "bench: runs did not finish in %d s\n", timeout_s);
	exit(1);
}

/*
 * The daemon runs with FERRY_HOME jobs (its runs/ directories) and the
 * database of the private cluster under home (conninfo).
 */
static pid_t start_daemon(const char *home, const char *jobs, const char *conninfo, const char *executor)
{
	pid_t pid = fork();
	if (pid == 0) {
		char *log = xasprintf("%s/ferryd.log", home);
		FILE *f = freopen(log, "w", stderr);
		(void)f;
		setenv("FERRY_HOME", jobs, 1);
		setenv("FERRY_DATABASE_URL", conninfo, 1);
		setenv("FERRY_EXECUTOR", executor, 1);
		setenv("FERRY_LISTEN", "127.0.0.1:0", 1);
		setenv("FERRY_API_TOKEN", "bench-token-0123456789", 1);
		setenv("FERRY_LOG_LEVEL", getenv("BENCH_LOG_LEVEL") ? getenv("BENCH_LOG_LEVEL") : "warn", 1);
		execl("bin/ferryd", "ferryd", (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* The n costliest statements (pg_stat_statements, BENCH_PG_STATEMENTS) to stderr. */
static void print_statements(int n)
{
	char sql[512];
	PGresult *r;

	snprintf(sql, sizeof(sql),
		 "SELECT calls, round((total_exec_time / greatest(calls, 1))::numeric, 3), round(total_exec_time::numeric), "
		 "       round((total_plan_time / greatest(calls, 1))::numeric, 3), plans, "
		 "       regexp_replace(left(query, 110), '\\s+', ' ', 'g') "
		 "FROM pg_stat_statements ORDER BY total_exec_time + total_plan_time DESC LIMIT %d", n);
	r = PQexec(conn, sql);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		fprintf(stderr, "bench: pg_stat_statements: %s", PQerrorMessage(conn));
	fprintf(stderr, "%7s %9s %8s %9s %6s  query\n", "calls", "exec_ms", "total", "plan_ms", "plans");
	for (int i = 0; PQresultStatus(r) == PGRES_TUPLES_OK && i < PQntuples(r); i++)
		fprintf(stderr, "%7s %9s %8s %9s %6s  %s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
			PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), PQgetvalue(r, i, 4), PQgetvalue(r, i, 5));
	PQclear(r);
}

/*
 * What a bench that stops early (exit(1): a run it could not create, runs
 * that did not finish) leaves behind is stopped by this atexit handler:
 * its daemon, whose inherited stdout otherwise holds a pipe open (`| tail`
 * waited for ever), and its cluster. The normal end clears both first.
 * One stopped by a signal (Ctrl-C, a timeout's TERM, a closed terminal's
 * HUP) does the same, and removes its home, on a thread that waits for
 * those signals (stop_on_signal); the mutex keeps the two from stopping
 * one thing twice.
 */
static pthread_mutex_t left_mu = PTHREAD_MUTEX_INITIALIZER;
static pid_t left_daemon;
static const char *left_home;
static char *left_rm; /* "rm -rf HOME [JOBS]": what a signal's stop removes (NULL with BENCH_KEEP) */

static void stop_left_behind(void)
{
	pthread_mutex_lock(&left_mu);
	if (left_daemon > 0) {
		kill(left_daemon, SIGTERM);
		waitpid(left_daemon, NULL, 0);
		left_daemon = 0;
	}
	if (left_home)
		db_embedded_stop(left_home);
	left_home = NULL;
	pthread_mutex_unlock(&left_mu);
}

static void *signal_stop(void *arg)
{
	sigset_t *set = arg, one;
	int sig = 0;

	if (sigwait(set, &sig) != 0)
		return NULL;
	stopping = 1;
	fprintf(stderr, "bench: %s: stopping its daemon and its cluster\n", strsignal(sig));
	stop_left_behind();
	pthread_mutex_lock(&left_mu);
	if (left_rm && system(left_rm) != 0)
		fprintf(stderr, "bench: could not remove its home\n");
	/* ended as the signal ends a program: the default action, unblocked on this thread */
	signal(sig, SIG_DFL);
	sigemptyset(&one);
	sigaddset(&one, sig);
	pthread_sigmask(SIG_UNBLOCK, &one, NULL);
	raise(sig);
	_exit(128 + sig);
}

/*
 * From here on SIGINT, SIGTERM and SIGHUP reach signal_stop only: blocked
 * in this thread and in what it starts later (a child's mask is its
 * parent's: the daemon and the cluster, started before, keep theirs).
 */
static void stop_on_signal(void)
{
	static sigset_t set;
	pthread_t t;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (pthread_create(&t, NULL, signal_stop, &set) == 0)
		pthread_detach(t);
}

/* Sequential fork + exec /bin/true + wait, for about a second: spawns per second. */
static double raw_spawn_rate(void)
{
	int64_t t0 = clock_mono_us(), t;
	int n = 0;

	do {
		pid_t pid = fork();
		if (pid == 0) {
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		if (pid < 0 || waitpid(pid, NULL, 0) < 0)
			return -1;
		n++;
		t = clock_mono_us();
	} while (t - t0 < 1000000);
	return n / ((double)(t - t0) / 1e6);
}

/* The hops of chain run id, p50 and p99 (ms): one step's start to the next's (see the header). */
static void hop_percentiles(double *p50, double *p99, int64_t id)
{
	char sql[256];

	snprintf(sql, sizeof(sql),
		 "SELECT extract(epoch FROM b.started_at - a.started_at) * 1000 "
		 "FROM steps a JOIN steps b ON b.run_id = a.run_id AND b.idx = a.idx + 1 WHERE a.run_id = %lld",
		 (long long)id);
	sql_percentiles(p50, p99, sql);
}

/* Runs a chain of len steps of cmd and waits for it; its hop p50/p99 (ms). */
static int64_t chain_hops(double *p50, double *p99, int len, const char *cmd)
{
	char *yaml = workflow_yaml("bench-chain", 0, len, cmd), sql[512];
	int64_t id = create_run(yaml);

	free(yaml);
	for (int i = 0; i < 120 * 20; i++) {
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM runs WHERE id = %lld AND state = 'succeeded'",
			 (long long)id);
		if (sql_double(sql) == 1)
			break;
		usleep(50 * 1000);
	}
	hop_percentiles(p50, p99, id);
	return id;
}

/* dispatch_slow_neighbour: see the header. */
static void slow_neighbour(int mb)
{
	double q50, q99, h50, h99, reg_s;
	char *yaml, sql[512];
	int64_t big, chain;
	int overlap;

	chain_hops(&q50, &q99, 100, "/bin/true");
	yaml = xasprintf("name: big\nsteps:\n"
			 "  - {name: train, kind: train, command: [sh, -c, 'head -c %lld /dev/zero > "
			 "\"$FERRY_OUTPUT_DIR/model.bin\"']}\n"
			 "  - {name: register, kind: register, needs: [train], model: big}\n",
			 (long long)mb << 20);
	big = create_run(yaml);
	free(yaml);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM steps WHERE run_id = %lld AND name = 'register' "
		 "AND state = 'running'", (long long)big);
	for (int i = 0; i < 600 && sql_double(sql) != 1; i++)
		usleep(10 * 1000);
	chain = chain_hops(&h50, &h99, 100, "/bin/true");
	/* the chain's last step ended before the registration did */
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM steps c, steps r WHERE c.run_id = %lld AND r.run_id = %lld "
		 "AND r.name = 'register' AND (r.finished_at IS NULL OR r.finished_at > "
		 "(SELECT max(finished_at) FROM steps WHERE run_id = %lld)) AND c.idx = 0",
		 (long long)chain, (long long)big, (long long)chain);
	overlap = sql_double(sql) == 1;
	wait_all_done(600);
	snprintf(sql, sizeof(sql), "SELECT extract(epoch FROM finished_at - started_at) FROM steps "
		 "WHERE run_id = %lld AND name = 'register'", (long long)big);
	reg_s = sql_double(sql);
	printf("{\"bench\":\"dispatch_slow_neighbour\",\"executor\":\"local\",\"artifact_mb\":%d,"
	       "\"register_s\":%.2f,\"chain_during_register\":%s,\"quiet_hop_p50_ms\":%.2f,"
	       "\"quiet_hop_p99_ms\":%.2f,\"hop_p50_ms\":%.2f,\"hop_p99_ms\":%.2f,"
	       "\"p50_ratio\":%.2f,\"p99_ratio\":%.2f}\n",
	       mb, reg_s, overlap ? "true" : "false", q50, q99, h50, h99, q50 > 0 ? h50 / q50 : 0,
	       q99 > 0 ? h99 / q99 : 0);
}

/* Waits for run id to end (timeout_s); its creation to its end, in seconds (-1: it did not end). */
static double run_seconds(int64_t id, int timeout_s)
{
	char sql[256];

	snprintf(sql, sizeof(sql), "SELECT extract(epoch FROM finished_at - created_at) FROM runs WHERE id = %lld "
		 "AND state = 'succeeded'", (long long)id);
	for (int i = 0; i < timeout_s * 100; i++) {
		double v = sql_double(sql);
		if (v >= 0)
			return v;
		usleep(10 * 1000);
	}
	fprintf(stderr, "bench: run %lld did not succeed in %d s\n", (long long)id, timeout_s);
	return -1;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* chain: see the header. */
static void chain_bench(int len, const char *executor, const char *cmd)
{
	double ms[5];
	char *yaml = workflow_yaml("bench-chain40", 0, len, cmd);

	for (int i = 0; i < 5; i++)
		ms[i] = run_seconds(create_run(yaml), 120) * 1000;
	free(yaml);
	qsort(ms, 5, sizeof(ms[0]), cmp_dbl);
	printf("{\"bench\":\"chain\",\"executor\":\"%s\",\"steps\":%d,\"run_ms\":%.0f,\"per_step_ms\":%.2f,"
	       "\"run_ms_min\":%.0f,\"run_ms_max\":%.0f}\n", executor, len, ms[2], ms[2] / len, ms[0], ms[4]);
}

/* A run of len Python steps one after another, each `python3 -c CODE`, warm with preload when not NULL. */
static char *python_chain_yaml(int len, const char *code, const char *preload)
{
	char *y = xstrdup("name: bench-warm\nsteps:\n"), *t, needs[32] = "", warm[128] = "";

	if (preload)
		snprintf(warm, sizeof(warm), ", warm: {preload: [%s]}", preload);
	for (int i = 0; i < len; i++) {
		if (i > 0)
			snprintf(needs, sizeof(needs), ", needs: [p%d]", i - 1);
		t = xasprintf("%s  - {name: p%d, command: [/usr/bin/python3, -c, '%s']%s%s}\n", y, i, code, needs, warm);
		free(y);
		y = t;
	}
	return y;
}

/* The median of five runs of yaml, in ms (creation to end). */
static double median_run_ms(const char *yaml)
{
	double ms[5];

	for (int i = 0; i < 5; i++)
		ms[i] = run_seconds(create_run(yaml), 300) * 1000;
	qsort(ms, 5, sizeof(ms[0]), cmp_dbl);
	return ms[2];
}

/* warm: see the header. */
static void warm_bench(void)
{
	const char *imp = "import sklearn.svm", *nothing = "x = 1";
	char *cold = python_chain_yaml(1, imp, NULL), *warm = python_chain_yaml(1, imp, "sklearn.svm");
	char *ccold = python_chain_yaml(40, nothing, NULL), *cwarm = python_chain_yaml(40, nothing, "json");
	double c, w, cc, cw;

	c = median_run_ms(cold);
	(void)run_seconds(create_run(warm), 120); /* starts the server (this run starts cold) */
	(void)run_seconds(create_run(cwarm), 120);
	sleep(3);
	w = median_run_ms(warm);
	cc = median_run_ms(ccold);
	cw = median_run_ms(cwarm);
	printf("{\"bench\":\"warm\",\"import\":\"sklearn.svm\",\"cold_ms\":%.0f,\"warm_ms\":%.0f,"
	       "\"chain_steps\":40,\"chain_cold_ms\":%.0f,\"chain_warm_ms\":%.0f}\n", c, w, cc, cw);
	free(cold), free(warm), free(ccold), free(cwarm);
}

/* The sizes of a comma-separated list (at most 8, each at least min) into n; how many. */
static int parse_sizes(int n[8], const char *sizes, int min)
{
	char *copy = xstrdup(sizes), *save = NULL, *tok;
	int k = 0;

	for (tok = strtok_r(copy, ",", &save); tok && k < 8; tok = strtok_r(NULL, ",", &save))
		if ((n[k] = (int)strtol(tok, NULL, 10)) >= min)
			k++;
	free(copy);
	return k;
}

/* ,"key":[v0,v1,…] with decimals places. */
static void print_list(const char *key, const double *v, int k, int decimals)
{
	printf(",\"%s\":[", key);
	for (int i = 0; i < k; i++)
		printf("%s%.*f", i ? "," : "", decimals, v[i]);
	printf("]");
}

/* scale: see the header. */
static void scale_bench(const char *sizes, const char *executor, const char *cmd)
{
	int n[8], k = parse_sizes(n, sizes, 3);
	double secs[8], create[8], steps[8], rate[8];

	for (int i = 0; i < k; i++) {
		char *yaml = workflow_yaml("bench-scale", n[i] - 2, 0, cmd);
		int64_t t0 = clock_mono_us(), id = create_run(yaml);
		create[i] = (double)(clock_mono_us() - t0) / 1e6;
		secs[i] = run_seconds(id, 1200);
		steps[i] = n[i];
		rate[i] = secs[i] > 0 ? n[i] / secs[i] : 0;
		free(yaml);
	}
	printf("{\"bench\":\"scale\",\"executor\":\"%s\",\"shape\":\"root, N-2 parallel, join\"", executor);
	print_list("steps", steps, k, 0);
	print_list("run_s", secs, k, 2);
	print_list("create_s", create, k, 2);
	print_list("steps_per_sec", rate, k, 0);
	printf(",\"per_step_growth\":%.2f}\n",
	       k > 1 && secs[0] > 0 && secs[k - 1] > 0 ? (secs[k - 1] / n[k - 1]) / (secs[0] / n[0]) : 0);
}

/*
 * foreach: per size, one run of a single step that fans out over range: N,
 * on the executor given: expand_s (creation to the step's expanded event:
 * its N children written), run_s (creation to the run's end),
 * items_per_sec over what follows the expansion; per_item_growth; and the
 * largest run's JSON (ferry_run_json, what GET /runs/{id} sends) in bytes
 * and milliseconds.
 */
static void foreach_bench(const char *sizes, const char *executor, const char *cmd)
{
	int n[8], k = parse_sizes(n, sizes, 1);
	double expand[8], run[8], items[8], rate[8], bytes = 0, json_ms = 0;

	for (int i = 0; i < k; i++) {
		char *yaml = xasprintf("name: bench-foreach\nsteps:\n  - {name: each, foreach: {range: %d}, command: [%s]}\n",
				       n[i], cmd);
		char sql[512];
		int64_t id = create_run(yaml), t0;

		run[i] = run_seconds(id, 1200);
		snprintf(sql, sizeof(sql), "SELECT extract(epoch FROM e.at - r.created_at) FROM events e JOIN runs r "
			 "ON r.id = e.run_id WHERE e.run_id = %lld AND e.kind = 'step.expanded'", (long long)id);
		expand[i] = sql_double(sql);
		items[i] = n[i];
		rate[i] = run[i] > expand[i] ? n[i] / (run[i] - expand[i]) : 0;
		if (i == k - 1) { /* the largest run's JSON: what GET /runs/{id} sends */
			snprintf(sql, sizeof(sql), "SELECT length(ferry_run_json(%lld)::text)", (long long)id);
			t0 = clock_mono_us();
			bytes = sql_double(sql);
			json_ms = (double)(clock_mono_us() - t0) / 1000;
		}
		free(yaml);
	}
	printf("{\"bench\":\"foreach\",\"executor\":\"%s\"", executor);
	print_list("items", items, k, 0);
	print_list("expand_s", expand, k, 2);
	print_list("run_s", run, k, 2);
	print_list("items_per_sec", rate, k, 0);
	/* cost per item, largest over smallest: 1 is linear (the issue asks within 1.5) */
	printf(",\"per_item_growth\":%.2f,\"run_json_bytes\":%.0f,\"run_json_ms\":%.1f}\n",
	       k > 1 && run[0] > 0 && run[k - 1] > 0 ? (run[k - 1] / n[k - 1]) / (run[0] / n[0]) : 0, bytes, json_ms);
}

static double vm_hwm_mb(pid_t pid)
{
	char path[64], *buf = NULL, *p;
	double mb = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (file_read(&buf, NULL, path) == 0 && (p = strstr(buf, "VmHWM:")) != NULL)
		mb = strtod(p + 6, NULL) / 1024.0;
	free(buf);
	return mb;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"executor", required_argument, NULL, 'e'},
		{"runs", required_argument, NULL, 'r'},
		{"width", required_argument, NULL, 'w'},
		{"slow-neighbour", no_argument, NULL, 's'},
		{"artifact-mb", required_argument, NULL, 'a'},
		{"chain", required_argument, NULL, 'c'},
		{"scale", required_argument, NULL, 'S'},
		{"foreach", required_argument, NULL, 'f'},
		{"warm", no_argument, NULL, 'W'},
		{NULL, 0, NULL, 0},
	};
	const char *executor = "noop", *cmd;
	int runs = 200, width = 48, c, slow = 0, artifact_mb = 1024, chain_len = 0, warm = 0;
	const char *foreach_sizes = NULL;
	const char *scale = NULL;
	char *home, *conninfo = NULL, *yaml, *jobs = NULL;
	double sps, hop50, hop99, r2r50, r2r99, rss;
	int64_t chain_id, first_c;
	pid_t daemon;
	char sql[1024];

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (c == 'e')
			executor = optarg;
		else if (c == 'r')
			runs = (int)strtol(optarg, NULL, 10);
		else if (c == 'w')
			width = (int)strtol(optarg, NULL, 10);
		else if (c == 's')
			slow = 1, executor = "local";
		else if (c == 'a')
			artifact_mb = (int)strtol(optarg, NULL, 10);
		else if (c == 'c')
			chain_len = (int)strtol(optarg, NULL, 10), executor = "local";
		else if (c == 'S')
			scale = optarg;
		else if (c == 'f')
			foreach_sizes = optarg;
		else if (c == 'W')
			warm = 1, executor = "local";
		else
			return 2;
	}
	if (access("bin/ferryd", X_OK) < 0) {
		/* the daemon, the migrations and the shim are found from the repository's root */
		fprintf(stderr, "bench: no bin/ferryd here: run from the repository's root after make\n");
		return 2;
	}
	cmd = strcmp(executor, "noop") == 0 ? "noop" : "/bin/true";
	flog_setup(FLOG_WARN, 0);
	/* under TMPDIR when set (the daemon's home, its database and the jobs' directories), else /tmp */
	home = xasprintf("%s/ferry-bench.XXXXXX", getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (mkdtemp(home) == NULL || chmod(home, 0755) < 0)
		return 1;
	unsetenv("FERRY_DATABASE_URL");
	if (db_conninfo(&conninfo, home) < 0 || db_connect(&conn, conninfo) < 0 || db_migrate(conn) < 0) {
		fprintf(stderr, "bench: %s\n", ferry_error_last());
		return 1;
	}
	/*
	 * Run ids as a daemon's life gives them: never the ones the bench
	 * before this one had. Each bench's database is new, so its runs
	 * would be 1, 2, … every time, and their directories runs/1, runs/2, …
	 * would be made where the previous bench's, deleted seconds before,
	 * were: ext4 chooses a block group for a top directory's child from
	 * its name's hash (runs/ is one: ferryd.c runs_spread), and an ext4
	 * without a journal skips every inode deleted in the last minutes at
	 * each allocation (a mkdir in such a group 35-40 us, 7 us in another;
	 * the chain's run_ms 101-118 with the same ids, 97-104 with new ones,
	 * four pairs in one sitting). A daemon never makes a run's directory
	 * twice.
	 */
	{
		uint32_t r = 0;
		char q[128];
		PGresult *res;
		if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
			r = (uint32_t)getpid() * 2654435761u;
		snprintf(q, sizeof(q), "SELECT setval(pg_get_serial_sequence('runs', 'id'), %u)", 1000 + r % 1000000000u);
		res = PQexec(conn, q);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
			fprintf(stderr, "bench: the runs' first id: %s", PQerrorMessage(conn));
		PQclear(res);
	}
	if (getenv("BENCH_SQL")) {
		PGresult *r = PQexec(conn, getenv("BENCH_SQL"));
		if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
			fprintf(stderr, "bench: BENCH_SQL: %s", PQerrorMessage(conn));
		PQclear(r);
	}
	/*
	 * BENCH_AUTO_EXPLAIN=MS: the daemon's statements slower than MS ms are
	 * logged with their plans (auto_explain, nested statements of the
	 * functions too, with actual rows) to the cluster's log under the
	 * bench's home (BENCH_KEEP=1 keeps it): where a slow run's time goes.
	 */
	if (getenv("BENCH_AUTO_EXPLAIN")) {
		char *q = xasprintf("ALTER SYSTEM SET auto_explain.log_min_duration = %d",
				    (int)strtol(getenv("BENCH_AUTO_EXPLAIN"), NULL, 10));
		const char *const sets[] = {"LOAD 'auto_explain'",
			"ALTER SYSTEM SET session_preload_libraries = 'auto_explain'", q,
			"ALTER SYSTEM SET auto_explain.log_nested_statements = on",
			"ALTER SYSTEM SET auto_explain.log_analyze = on", "SELECT pg_reload_conf()"};
		for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
			PGresult *r = PQexec(conn, sets[i]);
			if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
				fprintf(stderr, "bench: %s: %s", sets[i], PQerrorMessage(conn));
			PQclear(r);
		}
		free(q);
	}

	/*
	 * BENCH_PG_STATEMENTS=N: the cluster restarts with pg_stat_statements
	 * (nested statements and planning tracked) and the N costliest
	 * statements are printed to stderr at the end: what a step's calls
	 * spend, planning apart from execution.
	 */
	if (getenv("BENCH_PG_STATEMENTS")) {
		PQclear(PQexec(conn, "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"));
		PQfinish(conn);
		db_embedded_stop(home);
		free(conninfo);
		if (db_conninfo(&conninfo, home) < 0 || db_connect(&conn, conninfo) < 0) {
			fprintf(stderr, "bench: %s\n", ferry_error_last());
			return 1;
		}
		const char *const sets[] = {"CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
			"ALTER SYSTEM SET pg_stat_statements.track = 'all'",
			"ALTER SYSTEM SET pg_stat_statements.track_planning = on", "SELECT pg_reload_conf()",
			"SELECT pg_stat_statements_reset()"};
		for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
			PGresult *r = PQexec(conn, sets[i]);
			if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
				fprintf(stderr, "bench: %s: %s", sets[i], PQerrorMessage(conn));
			PQclear(r);
		}
	}

	/*
	 * BENCH_JOBS_DIR puts the job directories on another file system (the
	 * database stays under /tmp): on an ext4 without a journal, creating
	 * inodes soon after many were deleted (the previous run's clean-up)
	 * costs more than the rest of a local job; see README.
	 */
	if (getenv("BENCH_JOBS_DIR")) {
		jobs = xasprintf("%s/ferry-jobs.XXXXXX", getenv("BENCH_JOBS_DIR"));
		if (mkdtemp(jobs) == NULL || chmod(jobs, 0755) < 0)
			return 1;
	} else {
		jobs = xstrdup(home);
	}
	daemon = start_daemon(home, jobs, conninfo, executor);
	left_daemon = daemon;
	left_home = home;
	if (!getenv("BENCH_KEEP"))
		left_rm = strcmp(jobs, home) != 0 ? xasprintf("rm -rf %s %s", home, jobs) : xasprintf("rm -rf %s", home);
	atexit(stop_left_behind);
	stop_on_signal();
	usleep(500 * 1000);
	if (chain_len > 0 || scale || foreach_sizes || warm) {
		if (warm)
			warm_bench();
		else if (chain_len > 0)
			chain_bench(chain_len, executor, cmd);
		else if (foreach_sizes)
			foreach_bench(foreach_sizes, executor, cmd);
		else
			scale_bench(scale, executor, cmd);
		kill(daemon, SIGTERM);
		waitpid(daemon, NULL, 0);
		goto out;
	}
	if (slow) {
		slow_neighbour(artifact_mb);
		kill(daemon, SIGTERM);
		waitpid(daemon, NULL, 0);
		goto out;
	}
	/* phase 1: a 200-step chain on an idle daemon */
	yaml = workflow_yaml("bench-chain", 0, 200, cmd);
	chain_id = create_run(yaml);
	free(yaml);
	wait_all_done(120);
	hop_percentiles(&hop50, &hop99, chain_id);

	/* phase 2: runs submitted one every 10 ms while the daemon works */
	yaml = workflow_yaml("bench-live", 8, 0, cmd);
	for (int i = 0; i < 100; i++) {
		create_run(yaml);
		usleep(10 * 1000);
	}
	free(yaml);
	wait_all_done(120);
	first_c = chain_id + 100;
	snprintf(sql, sizeof(sql),
		 "SELECT extract(epoch FROM s.started_at - greatest(ru.created_at, "
		 "  (SELECT max(n.finished_at) FROM step_deps d JOIN steps n ON n.id = d.needs_id "
		 "   WHERE d.step_id = s.id))) * 1000 "
		 "FROM steps s JOIN runs ru ON ru.id = s.run_id WHERE s.run_id > %lld",
		 (long long)chain_id);
	sql_percentiles(&r2r50, &r2r99, sql);
	/* phase 3: a backlog of runs queued while the daemon is paused, then drained */
	kill(daemon, SIGSTOP);
	yaml = workflow_yaml("bench-wide", width, 0, cmd);
	for (int i = 0; i < runs; i++)
		create_run(yaml);
	free(yaml);
	kill(daemon, SIGCONT);
	wait_all_done(600);
	snprintf(sql, sizeof(sql), "SELECT count(*) / extract(epoch FROM max(finished_at) - min(started_at)) "
		 "FROM steps WHERE run_id > %lld", (long long)first_c);
	sps = sql_double(sql);

	rss = vm_hwm_mb(daemon);
	kill(daemon, SIGTERM);
	waitpid(daemon, NULL, 0);
	printf("{\"bench\":\"dispatch%s\",\"executor\":\"%s\",\"steps\":%d,\"steps_per_sec\":%.0f,"
	       "\"hop_p50_ms\":%.2f,\"hop_p99_ms\":%.2f,\"ready_to_running_p50_ms\":%.2f,"
	       "\"ready_to_running_p99_ms\":%.2f,\"rss_mb\":%.1f",
	       strcmp(executor, "noop") == 0 ? "" : "_local", executor, runs * (width + 2),
	       sps, hop50, hop99, r2r50, r2r99, rss);
	if (strcmp(executor, "noop") != 0) {
		double raw = raw_spawn_rate();
		printf(",\"raw_spawn_per_sec\":%.0f,\"vs_raw\":%.2f", raw, raw > 0 ? sps / raw : 0);
	}
	printf("}\n");
out:
	pthread_mutex_lock(&left_mu);
	left_daemon = 0; /* reaped above */
	pthread_mutex_unlock(&left_mu);
	if (getenv("BENCH_PG_STATEMENTS"))
		print_statements((int)strtol(getenv("BENCH_PG_STATEMENTS"), NULL, 10));
	PQfinish(conn);
	free(conninfo);
	/* under the mutex: a signal from here on finds nothing left to stop */
	pthread_mutex_lock(&left_mu);
	db_embedded_stop(home);
	left_home = NULL;
	pthread_mutex_unlock(&left_mu);
	/* left_rm: NULL with BENCH_KEEP */
	if (left_rm && system(left_rm) != 0)
		fprintf(stderr, "bench: could not remove %s\n", home);
	return 0;
}

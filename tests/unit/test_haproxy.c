/*
 * Tests of the traffic split (orchestrator/deploy/haproxy.c) against a real
 * haproxy and real HTTP backends: each backend is a forked child on a
 * loopback port that answers every request with its own name, so the
 * client counts where each request went.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "deploy/haproxy.h"
#include "lib/util.h"

#define NBACK 4

struct fixture {
	char tmp[64];
	char *dir;
	struct hap *h;
	pid_t back_pid[NBACK];
	int back_port[NBACK];
	int front;
};

static void set_timeouts(int fd)
{
	struct timeval tv = {2, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* A child answering each request with "HTTP/1.1 STATUS" and body name, until killed. */
static pid_t backend_start(const char *name, int status, int *port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	char resp[256];
	pid_t pid;

	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1024) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl) < 0)
		return -1;
	*port = ntohs(sa.sin_port);
	snprintf(resp, sizeof(resp), "HTTP/1.1 %d X\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
		 status, strlen(name), name);
	pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (;;) {
			char req[4096];
			size_t got = 0;
			int c = accept(fd, NULL, NULL);
			if (c < 0)
				continue;
			set_timeouts(c);
			while (got < sizeof(req) - 1) {
				ssize_t r = read(c, req + got, sizeof(req) - 1 - got);
				if (r <= 0)
					break;
				got += (size_t)r;
				req[got] = '\0';
				if (strstr(req, "\r\n\r\n"))
					break;
			}
			fd_write_all(c, resp, strlen(resp));
			/*
			 * haproxy closes first (it read the whole answer): the
			 * TIME_WAIT stays on its side, where connect() skips
			 * it, not on this listening port, where a reused client
			 * port would meet it (thousands of connections a test)
			 */
			while (read(c, req, sizeof(req)) > 0)
				;
			close(c);
		}
	}
	close(fd);
	return pid;
}

/* A loopback port nothing listens on now. */
static int free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

/* GET / through port with one more header line (or ""); the body into body. 0, or -1 on any failure. */
static int http_get_hdr(int port, const char *hdr, char *body, size_t size, int *status)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons((uint16_t)port)};
	char req[256];
	char buf[4096];
	size_t got = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rc = -1;
	const char *b;

	if (fd < 0)
		return -1;
	set_timeouts(fd);
	snprintf(req, sizeof(req), "GET / HTTP/1.0\r\nHost: test\r\n%s\r\n", hdr);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || fd_write_all(fd, req, strlen(req)) < 0) {
		fprintf(stderr, "# request to %d: connect/send: %s\n", port, strerror(errno));
		goto out;
	}
	/* read to the end of the body and close first (the TIME_WAIT stays here, see backend_start) */
	for (;;) {
		ssize_t r = read(fd, buf + got, sizeof(buf) - 1 - got);
		const char *cl, *end;
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			fprintf(stderr, "# request to %d: read after %zu bytes: %s\n", port, got, strerror(errno));
			goto out;
		}
		if (r == 0 || (got += (size_t)r) == sizeof(buf) - 1)
			break;
		buf[got] = '\0';
		if ((end = strstr(buf, "\r\n\r\n")) != NULL && (cl = strcasestr(buf, "content-length:")) != NULL &&
		    cl < end && got >= (size_t)(end + 4 - buf) + strtoul(cl + 15, NULL, 10))
			break;
	}
	buf[got] = '\0';
	if (strncmp(buf, "HTTP/1.", 7) != 0 || (b = strstr(buf, "\r\n\r\n")) == NULL) {
		fprintf(stderr, "# request to %d: bad answer (%zu bytes): %.60s\n", port, got, buf);
		goto out;
	}
	*status = (int)strtol(buf + 9, NULL, 10);
	snprintf(body, size, "%s", b + 4);
	rc = 0;
out:
	close(fd);
	return rc;
}

/* GET / through port; the body (the backend's name) into body. 0, or -1 on any failure. */
static int http_get(int port, char *body, size_t size, int *status)
{
	return http_get_hdr(port, "", body, size, status);
}

/* Sends n requests with one more header line (or ""); counts[i] how many backend i answered; the failures. */
static int send_many_hdr(int port, const char *hdr, int n, int counts[NBACK])
{
	int fails = 0;

	memset(counts, 0, NBACK * sizeof(int));
	for (int i = 0; i < n; i++) {
		char body[64];
		int st = 0;
		if (http_get_hdr(port, hdr, body, sizeof(body), &st) < 0 || st != 200 || body[0] != 'b') {
			fails++;
			continue;
		}
		int k = body[1] - '0';
		if (k >= 0 && k < NBACK)
			counts[k]++;
	}
	return fails;
}

static int send_many(int port, int n, int counts[NBACK])
{
	return send_many_hdr(port, "", n, counts);
}

static int setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof(*f));

	snprintf(f->tmp, sizeof(f->tmp), "/tmp/ferry-hap-XXXXXX");
	if (mkdtemp(f->tmp) == NULL)
		return -1;
	f->dir = xasprintf("%s/haproxy", f->tmp);
	for (int i = 0; i < NBACK; i++) {
		char name[8];
		snprintf(name, sizeof(name), "b%d", i);
		/* b3 is a broken replica: it answers 500 */
		f->back_pid[i] = backend_start(name, i == 3 ? 500 : 200, &f->back_port[i]);
		if (f->back_pid[i] < 0)
			return -1;
	}
	f->front = free_port();
	if (hap_open(&f->h, f->dir) < 0)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char *cmd;

	if (f == NULL)
		return 0;
	if (f->h)
		hap_stop(f->h);
	hap_close(f->h);
	for (int i = 0; i < NBACK; i++)
		if (f->back_pid[i] > 0) {
			kill(f->back_pid[i], SIGKILL);
			waitpid(f->back_pid[i], NULL, 0);
		}
	/* haproxy's workers killed in a test were reparented to us: reap them */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	cmd = xasprintf("rm -rf %s", f->tmp);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", f->tmp);
	free(cmd);
	free(f->dir);
	free(f);
	return 0;
}

/* The servers of one frontend "digits": weights w[i] for backends b0..b(n-1), drain d[i]. */
struct want {
	struct hap_server s[NBACK];
	struct hap_frontend fe;
};

static const char *const names[NBACK] = {"v1-r1", "v2-r1", "v3-r1", "v4-r1"};

static void want_set(struct want *w, const struct fixture *f, size_t n, const int *weight, const int *drain)
{
	for (size_t i = 0; i < n; i++)
		w->s[i] = (struct hap_server){names[i], "127.0.0.1", f->back_port[i], weight[i], drain ? drain[i] : 0};
	w->fe = (struct hap_frontend){.name = "digits", .port = f->front, .servers = w->s, .nservers = n};
}

/* How many entries of changes have what (and, when server is not NULL, that server). */
static int count_changes(json_t *changes, const char *what, const char *server)
{
	size_t i;
	json_t *c;
	int n = 0;

	json_array_foreach(changes, i, c) {
		const char *s = json_string_value(json_object_get(c, "server"));
		if (strcmp(json_string_value(json_object_get(c, "what")), what) == 0 &&
		    (server == NULL || (s && strcmp(s, server) == 0)))
			n++;
	}
	return n;
}

/* Asserts that haproxy has exactly w's servers, weights and states. */
#define assert_has(h, w) assert_has_(h, w)
static void assert_has_(struct hap *h, const struct want *w)
{
	json_t *servers = NULL, *s;
	size_t i;

	if (hap_read(h, &servers) < 0)
		fail_msg("hap_read: %s", ferry_error_last());
	assert_int_equal(json_array_size(servers), w->fe.nservers);
	json_array_foreach(servers, i, s) {
		const struct hap_server *ws = &w->s[i];
		assert_string_equal(json_string_value(json_object_get(s, "frontend")), "digits");
		assert_string_equal(json_string_value(json_object_get(s, "server")), ws->name);
		assert_string_equal(json_string_value(json_object_get(s, "addr")), ws->addr);
		assert_int_equal(json_integer_value(json_object_get(s, "port")), ws->port);
		assert_int_equal(json_integer_value(json_object_get(s, "weight")), ws->weight);
		assert_string_equal(json_string_value(json_object_get(s, "state")), ws->drain ? "drain" : "ready");
	}
	json_decref(servers);
}

/* The pid in DIR/haproxy.pid, and its children, killed with SIGKILL (a crash of haproxy). */
static void kill_haproxy(const char *dir)
{
	char *path = xasprintf("%s/haproxy.pid", dir), *text = NULL;
	size_t len;
	int64_t master;
	DIR *d;
	struct dirent *e;
	pid_t pids[64];
	size_t n = 0;

	assert_int_equal(file_read(&text, &len, path), 0);
	text[strcspn(text, "\n")] = '\0';
	assert_int_equal(parse_int64(text, &master), 0);
	d = opendir("/proc");
	while ((e = readdir(d)) != NULL) {
		char p[300], *stat = NULL;
		size_t sl;
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(p, sizeof(p), "/proc/%s/stat", e->d_name);
		if (file_read(&stat, &sl, p) < 0)
			continue;
		const char *rp = strrchr(stat, ')');
		if (rp && strtol(rp + 4, NULL, 10) == master && n < 64)
			pids[n++] = (pid_t)strtol(e->d_name, NULL, 10);
		free(stat);
	}
	closedir(d);
	pids[n < 64 ? n++ : 63] = (pid_t)master;
	for (size_t i = 0; i < n; i++)
		kill(pids[i], SIGKILL);
	/* all dead and reaped (the workers were reparented to us, a subreaper) */
	for (size_t i = 0; i < n; i++)
		for (int t = 0; t < 400; t++) {
			if (waitpid(pids[i], NULL, WNOHANG) == pids[i] || kill(pids[i], 0) < 0)
				break;
			usleep(5000);
		}
	free(path), free(text);
}

/* Sends one command on the admin socket, as a person with socat would. */
static void admin_cmd(const char *dir, const char *cmd)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	char buf[256];

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/admin.sock", dir);
	set_timeouts(fd);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(fd_write_all(fd, cmd, strlen(cmd)), 0);
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	close(fd);
}

/* 2,000 requests split 80/20 within ±3 points, and none to the server at weight 0. */
static void test_haproxy__split_and_zero_weight(void **state)
{
	struct fixture *f = *state;
	struct want w;
	json_t *changes = json_array();
	int counts[NBACK];

	want_set(&w, f, 3, (int[]){80, 20, 0}, NULL);
	assert_int_equal(hap_running(f->h), 0);
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), 0);
	assert_int_equal(count_changes(changes, "started", NULL), 1);
	assert_int_equal(hap_running(f->h), 1);
	assert_has(f->h, &w);
	assert_int_equal(send_many(f->front, 2000, counts), 0);
	printf("# split 80/20/0: %d %d %d\n", counts[0], counts[1], counts[2]);
	assert_int_equal(counts[2], 0);
	assert_int_equal(counts[0] + counts[1], 2000);
	assert_in_range(counts[0], 1540, 1660);

	/* move the weight at run time: 0/30/70, no reload */
	json_array_clear(changes);
	want_set(&w, f, 3, (int[]){0, 30, 70}, NULL);
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), 0);
	assert_int_equal(count_changes(changes, "reloaded", NULL), 0);
	assert_int_equal(count_changes(changes, "weight", NULL), 3);
	assert_has(f->h, &w);
	assert_int_equal(send_many(f->front, 1000, counts), 0);
	printf("# split 0/30/70: %d %d %d\n", counts[0], counts[1], counts[2]);
	assert_int_equal(counts[0], 0);
	assert_in_range(counts[2], 670, 730);

	/* the same state again changes nothing */
	json_array_clear(changes);
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), 0);
	assert_int_equal(json_array_size(changes), 0);
	json_decref(changes);
}

/* The master's pid (DIR/haproxy.pid). */
static pid_t master_of(const char *dir)
{
	char *path = xasprintf("%s/haproxy.pid", dir), *text = NULL;
	size_t len;
	int64_t master;

	assert_int_equal(file_read(&text, &len, path), 0);
	text[strcspn(text, "\n")] = '\0';
	assert_int_equal(parse_int64(text, &master), 0);
	free(path), free(text);
	return (pid_t)master;
}

/* Whether the master is reloading: "-sf OLD_WORKERS" on its command line (HAProxy 2.6). */
static int reloading(pid_t master)
{
	char *path = xasprintf("/proc/%d/cmdline", (int)master), *text = NULL;
	size_t len;
	int yes = 0;

	if (file_read(&text, &len, path) == 0)
		for (size_t i = 0; i < len && !yes; i += strlen(text + i) + 1)
			yes = strcmp(text + i, "-sf") == 0;
	free(path), free(text);
	return yes;
}

/* Whether pid is one of the master's children. */
static int child_of(pid_t master, pid_t pid)
{
	char *path = xasprintf("/proc/%d/task/%d/children", (int)master, (int)master), *text = NULL, *p, *end;
	size_t len;
	int found = 0;

	if (file_read(&text, &len, path) == 0)
		for (p = text; !found; p = end) {
			long v = strtol(p, &end, 10);
			if (end == p)
				break;
			found = v == (long)pid;
		}
	free(path), free(text);
	return found;
}

/* The pid of the worker that answers "show info" on DIR/admin.sock, or -1. */
static long answering(const char *dir)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	char buf[4096], *p;
	size_t n = 0;
	ssize_t r;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/admin.sock", dir);
	set_timeouts(fd);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || fd_write_all(fd, "show info\n", 10) < 0) {
		close(fd);
		return -1;
	}
	while (n < sizeof(buf) - 1 && (r = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
		n += (size_t)r;
	close(fd);
	buf[n] = '\0';
	p = strstr(buf, "\nPid: ");
	return p ? strtol(p + 6, NULL, 10) : -1;
}

/*
 * An operator reloads HAProxy (SIGUSR2 to the master) while Ferry changes
 * weights: once the reload is over, the new worker serves the change. (It
 * served the weights from before the change when the reload read the
 * files before the change wrote them and the change's commands reached
 * the old worker.)
 */
static void test_haproxy__reload_by_someone_else_during_a_change(void **state)
{
	struct fixture *f = *state;
	struct want w;

	want_set(&w, f, 2, (int[]){100, 0}, NULL);
	assert_int_equal(hap_apply(f->h, &w.fe, 1, NULL), 0);
	srand((unsigned)getpid());
	for (int i = 0; i < 12; i++) {
		pid_t master = master_of(f->dir);
		long old = answering(f->dir), now = -1;
		int in_a_row = 0;

		assert_true(old > 0);
		/* a SIGUSR2 that comes while the master starts or re-executes can be lost: sent again */
		for (int sent = 0; !reloading(master); sent++) {
			if (sent == 20)
				fail_msg("round %d: master %d never began a reload", i, (int)master);
			assert_int_equal(kill(master, SIGUSR2), 0);
			for (int t = 0; t < 300 && !reloading(master); t++)
				usleep(1000);
		}
		usleep((useconds_t)(rand() % 40) * 1000);
		want_set(&w, f, 2, i % 2 ? (int[]){100, 0} : (int[]){20, 80}, NULL);
		if (hap_apply(f->h, &w.fe, 1, NULL) < 0)
			fail_msg("round %d: hap_apply: %s", i, ferry_error_last());
		/* the reload is over: a new worker of the master answers, several times in a row */
		for (int t = 0; t < 2000 && in_a_row < 4; t++) {
			now = answering(f->dir);
			in_a_row = now > 0 && now != old && child_of(master, (pid_t)now) ? in_a_row + 1 : 0;
			usleep(5000);
		}
		if (in_a_row < 4)
			fail_msg("round %d: no new worker of master %d answered after the reload (pid %ld, old %ld)", i,
				 (int)master, now, old);
		assert_has(f->h, &w);
	}
}

/*
 * A reload right after haproxy started happens: the SIGUSR2 came while the
 * master was still starting, was lost, and the reload timed out after
 * 10 s (test_haproxy__random_changes failed so, now and then, on a busy
 * machine); then a layout change right after a start reloads too.
 */
static void test_haproxy__reload_right_after_start(void **state)
{
	struct fixture *f = *state;
	struct want w;

	for (int i = 0; i < 6; i++) {
		json_t *changes = json_array();

		if (i > 0)
			kill_haproxy(f->dir);
		want_set(&w, f, 1, (int[]){100}, NULL);
		if (hap_apply(f->h, &w.fe, 1, changes) < 0)
			fail_msg("round %d: start: %s", i, ferry_error_last());
		assert_int_equal(count_changes(changes, "started", NULL), 1);
		if (i % 2 == 0 && hap_reload(f->h) < 0)
			fail_msg("round %d: reload: %s", i, ferry_error_last());
		json_array_clear(changes);
		want_set(&w, f, 2, (int[]){60, 40}, NULL);
		if (hap_apply(f->h, &w.fe, 1, changes) < 0)
			fail_msg("round %d: layout change: %s", i, ferry_error_last());
		assert_int_equal(count_changes(changes, "reloaded", NULL), 1);
		assert_has(f->h, &w);
		json_decref(changes);
	}
}

/* Weights and drain states survive a reload, a crash of haproxy, and a daemon restart. */
static void test_haproxy__state_survives_reload_crash_restart(void **state)
{
	struct fixture *f = *state;
	struct want w;
	json_t *changes = json_array(), *stats = NULL;
	int counts[NBACK];

	want_set(&w, f, 3, (int[]){100, 0, 0}, NULL);
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), 0);
	/* run-time: weights and a drain */
	json_array_clear(changes);
	want_set(&w, f, 3, (int[]){40, 60, 25}, (int[]){0, 0, 1});
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), 0);
	assert_int_equal(count_changes(changes, "reloaded", NULL), 0);
	assert_int_equal(count_changes(changes, "state", "v3-r1"), 1);
	assert_has(f->h, &w);

	/* a reload from the files as they are */
	assert_int_equal(hap_reload(f->h), 0);
	assert_has(f->h, &w);
	assert_int_equal(send_many(f->front, 500, counts), 0);
	assert_int_equal(counts[2], 0); /* drained */
	assert_in_range(counts[0], 170, 230);

	/* haproxy dies; the next apply starts it with the same state */
	kill_haproxy(f->dir);
	assert_int_equal(hap_running(f->h), 0);
	assert_int_equal(hap_read(f->h, &stats), FERRY_ENOTFOUND);
	json_array_clear(changes);
	if (hap_apply(f->h, &w.fe, 1, changes) < 0)
		fail_msg("hap_apply after a crash: %s", ferry_error_last());
	assert_int_equal(count_changes(changes, "started", NULL), 1);
	assert_has(f->h, &w);

	/* a daemon restart: a new handle finds the running haproxy, and nothing to repair */
	hap_close(f->h);
	f->h = NULL;
	assert_int_equal(hap_open(&f->h, f->dir), 0);
	assert_int_equal(hap_running(f->h), 1);
	assert_has(f->h, &w);
	json_array_clear(changes);
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), 0);
	assert_int_equal(json_array_size(changes), 0);

	/* a weight changed behind Ferry's back (a person on the socket) is repaired */
	{
		json_t *servers = NULL;
		admin_cmd(f->dir, "set server digits/v1-r1 weight 7\n");
		assert_int_equal(hap_read(f->h, &servers), 0);
		assert_int_equal(json_integer_value(json_object_get(json_array_get(servers, 0), "weight")), 7);
		json_decref(servers);
		json_array_clear(changes);
		assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), 0);
		assert_int_equal(count_changes(changes, "weight", "v1-r1"), 1);
		assert_has(f->h, &w);
	}
	json_decref(changes);
}

/* Servers and frontends added or removed reload haproxy; the new layout serves. */
/*
 * Header routing (an A/B test): with a match the requests that carry the
 * header (with its value) go to the A/B backend's server alone, the others
 * by the weights (the tested version at 0 gets none of them); applying the
 * same again changes nothing (no reload); without the match all go by the
 * weights again; a value that could break the config is refused.
 */
static void test_haproxy__header_routing(void **state)
{
	struct fixture *f = *state;
	struct want w;
	json_t *changes = json_array();
	int counts[NBACK];

	want_set(&w, f, 2, (int[]){100, 0}, NULL);
	w.fe.match_header = "X-Canary";
	w.fe.match_value = "insider";
	w.fe.ab_servers = &w.s[1];
	w.fe.nab = 1;
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), 0);
	assert_int_equal(send_many(f->front, 40, counts), 0);
	assert_int_equal(counts[0], 40);
	assert_int_equal(send_many_hdr(f->front, "X-Canary: insider\r\n", 40, counts), 0);
	assert_int_equal(counts[1], 40);
	assert_int_equal(send_many_hdr(f->front, "X-Canary: other\r\n", 20, counts), 0);
	assert_int_equal(counts[0], 20);
	json_array_clear(changes);
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), 0);
	assert_int_equal(json_array_size(changes), 0); /* the A/B backend is not a difference */
	/* any value: the header's presence */
	w.fe.match_value = NULL;
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), 0);
	assert_int_equal(send_many_hdr(f->front, "X-Canary: whatever\r\n", 20, counts), 0);
	assert_int_equal(counts[1], 20);
	/* the test over: by the weights again */
	w.fe.match_header = NULL;
	w.fe.nab = 0;
	json_array_clear(changes);
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), 0);
	assert_int_equal(count_changes(changes, "reloaded", NULL), 1);
	assert_int_equal(send_many_hdr(f->front, "X-Canary: insider\r\n", 20, counts), 0);
	assert_int_equal(counts[0], 20);
	/* nothing that could end a config line or open an ACL of its own */
	w.fe.match_header = "X-Canary";
	w.fe.match_value = "a } or { always_true";
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), FERRY_EINVALID);
	json_decref(changes);
}

static void test_haproxy__layout_changes_reload(void **state)
{
	struct fixture *f = *state;
	struct want w;
	json_t *changes = json_array();
	struct hap_server other = {"m1", "127.0.0.1", 0, 10, 0};
	struct hap_frontend two[2];
	int counts[NBACK], port2 = free_port();

	want_set(&w, f, 2, (int[]){50, 50}, NULL);
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), 0);
	json_array_clear(changes);
	want_set(&w, f, 3, (int[]){0, 50, 50}, NULL); /* a server added */
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), 0);
	assert_int_equal(count_changes(changes, "server-added", "v3-r1"), 1);
	assert_int_equal(count_changes(changes, "reloaded", NULL), 1);
	assert_has(f->h, &w);
	assert_int_equal(send_many(f->front, 200, counts), 0);
	assert_int_equal(counts[0], 0);
	assert_int_equal(counts[1] + counts[2], 200);

	/* v1 removed, a second deployment added */
	json_array_clear(changes);
	other.port = f->back_port[3];
	two[0] = (struct hap_frontend){.name = "digits", .port = f->front, .servers = w.s + 1, .nservers = 2};
	two[1] = (struct hap_frontend){.name = "iris", .port = port2, .servers = &other, .nservers = 1};
	assert_int_equal(hap_apply(f->h, two, 2, changes), 0);
	assert_int_equal(count_changes(changes, "server-removed", "v1-r1"), 1);
	assert_int_equal(count_changes(changes, "frontend-added", NULL), 1);
	assert_int_equal(count_changes(changes, "reloaded", NULL), 1);
	assert_int_equal(send_many(port2, 50, counts), 50); /* b3 answers 500: counted as failures */
	assert_int_equal(send_many(f->front, 100, counts), 0);
	assert_int_equal(counts[1] + counts[2], 100);

	/* the 5xx are in the statistics, per server */
	{
		json_t *stats = NULL, *s;
		size_t i;
		int seen = 0;
		if (hap_stats(f->h, &stats) < 0)
			fail_msg("hap_stats: %s", ferry_error_last());
		json_array_foreach(stats, i, s) {
			const char *fe = json_string_value(json_object_get(s, "frontend"));
			if (strcmp(fe, "iris") == 0) {
				assert_int_equal(json_integer_value(json_object_get(s, "requests")), 50);
				assert_int_equal(json_integer_value(json_object_get(s, "hrsp_5xx")), 50);
				seen++;
			} else if (strcmp(json_string_value(json_object_get(s, "server")), "v2-r1") == 0) {
				assert_int_equal(json_integer_value(json_object_get(s, "requests")), counts[1]);
				assert_int_equal(json_integer_value(json_object_get(s, "hrsp_2xx")), counts[1]);
				assert_int_equal(json_integer_value(json_object_get(s, "hrsp_5xx")), 0);
				seen++;
			}
		}
		assert_int_equal(seen, 2);
		json_decref(stats);
	}

	/* a front port another program holds: refused, nothing changed */
	{
		json_t *before = NULL, *after = NULL;
		struct hap_frontend bad[2] = {two[0], two[1]};
		bad[1].port = f->back_port[1]; /* b1 listens there */
		assert_int_equal(hap_read(f->h, &before), 0);
		json_array_clear(changes);
		assert_int_equal(hap_apply(f->h, bad, 2, changes), FERRY_ECONFLICT);
		assert_non_null(strstr(ferry_error_last(), "in use"));
		assert_int_equal(json_array_size(changes), 0);
		assert_int_equal(hap_read(f->h, &after), 0);
		assert_true(json_equal(before, after));
		assert_int_equal(send_many(f->front, 10, counts), 0);
		json_decref(before), json_decref(after);
	}

	/* a frontend moved to another port, then a server moved to another replica */
	json_array_clear(changes);
	two[1].port = free_port();
	assert_int_equal(hap_apply(f->h, two, 2, changes), 0);
	assert_int_equal(count_changes(changes, "port", NULL), 1);
	assert_int_equal(send_many(two[1].port, 5, counts), 5);
	json_array_clear(changes);
	other.port = f->back_port[0];
	if (hap_apply(f->h, two, 2, changes) < 0)
		fail_msg("hap_apply: %s", ferry_error_last());
	assert_int_equal(count_changes(changes, "addr", "m1"), 1);
	assert_int_equal(count_changes(changes, "reloaded", NULL), 0);
	assert_int_equal(send_many(two[1].port, 20, counts), 0);
	assert_int_equal(counts[0], 20);

	/* no frontend: haproxy stops, the port is closed */
	json_array_clear(changes);
	assert_int_equal(hap_apply(f->h, NULL, 0, changes), 0);
	assert_int_equal(count_changes(changes, "stopped", NULL), 1);
	assert_int_equal(hap_running(f->h), 0);
	assert_int_equal(send_many(f->front, 1, counts), 1);
	json_decref(changes);
}

struct load {
	int port;
	atomic_int stop, ok, failed;
	int counts[NBACK];
};

static void *load_run(void *arg)
{
	struct load *l = arg;

	while (!atomic_load(&l->stop)) {
		char body[64];
		int st = 0;
		if (http_get(l->port, body, sizeof(body), &st) == 0 && st == 200 && body[0] == 'b') {
			atomic_fetch_add(&l->ok, 1);
			if (body[1] >= '0' && body[1] < '0' + NBACK)
				l->counts[body[1] - '0']++;
		} else {
			atomic_fetch_add(&l->failed, 1);
		}
	}
	return NULL;
}

/* Weight moved 100→0 and back, reloads, a server swapped: no request fails meanwhile. */
static void test_haproxy__no_failure_under_load(void **state)
{
	struct fixture *f = *state;
	struct want w;
	struct load l = {.port = f->front};
	pthread_t t;
	int counts[NBACK];

	want_set(&w, f, 2, (int[]){100, 0}, NULL);
	assert_int_equal(hap_apply(f->h, &w.fe, 1, NULL), 0);
	assert_int_equal(pthread_create(&t, NULL, load_run, &l), 0);
	for (int i = 0; i < 20; i++) {
		usleep(20000);
		want_set(&w, f, 2, i % 2 ? (int[]){100, 0} : (int[]){0, 100}, NULL);
		assert_int_equal(hap_apply(f->h, &w.fe, 1, NULL), 0);
		if (i % 5 == 4)
			assert_int_equal(hap_reload(f->h), 0);
	}
	/* promote v3: added at 0, then all the weight, then v1 and v2 drained and removed */
	want_set(&w, f, 3, (int[]){0, 100, 0}, NULL);
	assert_int_equal(hap_apply(f->h, &w.fe, 1, NULL), 0);
	usleep(20000);
	want_set(&w, f, 3, (int[]){0, 0, 100}, (int[]){1, 1, 0});
	assert_int_equal(hap_apply(f->h, &w.fe, 1, NULL), 0);
	usleep(20000);
	w.fe.servers = w.s + 2, w.fe.nservers = 1;
	assert_int_equal(hap_apply(f->h, &w.fe, 1, NULL), 0);
	usleep(50000);
	atomic_store(&l.stop, 1);
	pthread_join(t, NULL);
	printf("# under load: %d ok, %d failed\n", atomic_load(&l.ok), atomic_load(&l.failed));
	assert_true(atomic_load(&l.ok) >= 200);
	assert_int_equal(atomic_load(&l.failed), 0);
	assert_int_equal(send_many(f->front, 100, counts), 0);
	assert_int_equal(counts[2], 100);
}

/*
 * Random changes (weights, drains, servers added and removed) mixed with
 * reloads, haproxy crashes and daemon restarts: after each, haproxy has
 * exactly what was applied. 120 of them in make test (the unit stage's
 * longest test: 300 took 25 s of it), HAP_RANDOM_STEPS of them when set
 * (make fuzz runs 2,000); the seed is printed, HAP_SEED replays one.
 */
static void test_haproxy__random_changes(void **state)
{
	struct fixture *f = *state;
	struct want w;
	int64_t v;
	unsigned seed = getenv("HAP_SEED") && parse_int64(getenv("HAP_SEED"), &v) == 0 ? (unsigned)v : (unsigned)getpid();
	int steps = getenv("HAP_RANDOM_STEPS") && parse_int64(getenv("HAP_RANDOM_STEPS"), &v) == 0 ? (int)v : 120;
	int weight[NBACK], drain[NBACK], counts[NBACK];

	printf("# seed %u, %d steps\n", seed, steps);
	srand(seed);
	for (int i = 0; i < steps; i++) {
		size_t n = 1 + (size_t)(rand() % 3), zero = 0;
		int op = rand() % 20;
		for (size_t k = 0; k < n; k++) {
			weight[k] = rand() % 4 == 0 ? 0 : rand() % (HAP_WEIGHT_MAX + 1);
			drain[k] = rand() % 5 == 0;
			zero += weight[k] == 0 || drain[k];
		}
		want_set(&w, f, n, weight, drain);
		json_t *ch = json_array();
		if (hap_apply(f->h, &w.fe, 1, ch) < 0)
			fail_msg("step %d: hap_apply: %s", i, ferry_error_last());
		if (getenv("HAP_DEBUG")) {
			char *d = json_dumps(ch, JSON_COMPACT);
			printf("# step %d op %d n %zu: %s\n", i, op, n, d);
			free(d);
		}
		json_decref(ch);
		if (op == 0)
			assert_int_equal(hap_reload(f->h), 0);
		else if (op == 1)
			kill_haproxy(f->dir), assert_int_equal(hap_apply(f->h, &w.fe, 1, NULL), 0);
		else if (op == 2) {
			hap_close(f->h);
			f->h = NULL;
			assert_int_equal(hap_open(&f->h, f->dir), 0);
		}
		assert_has(f->h, &w);
		/* now and then, traffic goes only where the weights say */
		if (i % 20 == 0 && zero < n) {
			assert_int_equal(send_many(f->front, 20, counts), 0);
			for (size_t k = 0; k < n; k++)
				if (weight[k] == 0 || drain[k])
					assert_int_equal(counts[k], 0);
		}
	}
}

static void test_haproxy__bad_input_changes_nothing(void **state)
{
	struct fixture *f = *state;
	struct want w;
	json_t *changes = json_array();

	want_set(&w, f, 2, (int[]){257, 0}, NULL);
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "weight 0-256"));
	want_set(&w, f, 2, (int[]){1, 1}, NULL);
	w.s[1].name = "v1-r1";
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), FERRY_EINVALID);
	w.s[1].name = "bad name";
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), FERRY_EINVALID);
	w.s[1].name = "v2-r1";
	w.s[1].addr = "127.0.0.1:80\n    server evil 10.0.0.1";
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), FERRY_EINVALID);
	w.s[1].addr = "127.0.0.1";
	w.fe.name = "digits\nlisten x";
	assert_int_equal(hap_apply(f->h, &w.fe, 1, changes), FERRY_EINVALID);
	assert_int_equal(json_array_size(changes), 0);
	assert_int_equal(hap_running(f->h), 0);
	json_decref(changes);
}

/* --only PATTERN or --skip PATTERN (cmocka's filters): tests/run-unit.sh runs the long test beside the others. */
int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_haproxy__split_and_zero_weight, setup, teardown),
		cmocka_unit_test_setup_teardown(test_haproxy__state_survives_reload_crash_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_haproxy__reload_by_someone_else_during_a_change, setup, teardown),
		cmocka_unit_test_setup_teardown(test_haproxy__reload_right_after_start, setup, teardown),
		cmocka_unit_test_setup_teardown(test_haproxy__layout_changes_reload, setup, teardown),
		cmocka_unit_test_setup_teardown(test_haproxy__header_routing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_haproxy__no_failure_under_load, setup, teardown),
		cmocka_unit_test_setup_teardown(test_haproxy__random_changes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_haproxy__bad_input_changes_nothing, setup, teardown),
	};

	if (argc == 3 && strcmp(argv[1], "--only") == 0)
		cmocka_set_test_filter(argv[2]);
	else if (argc == 3 && strcmp(argv[1], "--skip") == 0)
		cmocka_set_skip_filter(argv[2]);
	else if (argc != 1)
		return fprintf(stderr, "usage: %s [--only PATTERN | --skip PATTERN]\n", argv[0]), 2;
	/* like ferryd, a subreaper: haproxy's daemonised master is ours to reap */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

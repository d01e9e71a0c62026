/*
 * Tests of orchestrator/loadtest and of the example model server
 * (workflows/digits/serve.py), against real servers on loopback: serve.py
 * replicas with a model trained here by the pipeline's own train.py, and a
 * small HTTP server forked by the test whose answers can be chosen (every
 * other one a 500, or none at all) and which counts the requests it holds
 * at once, so that "exactly N in flight" is checked from the server's side.
 * Every child is in its own process group and is killed in the teardown,
 * also when a test fails. Run from the repository root.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "deploy/loadtest.h"
#include "lib/util.h"

#define PYTHON "/usr/bin/python3"
#define SERVE "workflows/digits/serve.py"
#define SAMPLE "workflows/digits/sample.json"
#define MAX_CHILDREN 16

static char g_dir[] = "/tmp/ferry-loadtest-XXXXXX";
static char *g_sample;
static pid_t g_children[MAX_CHILDREN];

/* ---- children --------------------------------------------------------- */

static void child_track(pid_t pid)
{
	for (int i = 0; i < MAX_CHILDREN; i++)
		if (g_children[i] == 0) {
			g_children[i] = pid;
			return;
		}
	fail_msg("too many children");
}

static void child_untrack(pid_t pid)
{
	for (int i = 0; i < MAX_CHILDREN; i++)
		if (g_children[i] == pid)
			g_children[i] = 0;
}

/* Waits up to ms for pid; its wait status, or -1 when it is still running. */
static int wait_bounded(pid_t pid, int64_t ms)
{
	int64_t end = clock_mono_ms() + ms;
	int st;

	do {
		if (waitpid(pid, &st, WNOHANG) == pid) {
			child_untrack(pid);
			return st;
		}
		usleep(10000);
	} while (clock_mono_ms() < end);
	return -1;
}

/* Kills every child left (its whole process group) and reaps it. */
static void children_kill(void)
{
	for (int i = 0; i < MAX_CHILDREN; i++)
		if (g_children[i] > 0) {
			kill(-g_children[i], SIGKILL);
			waitpid(g_children[i], NULL, 0);
			g_children[i] = 0;
		}
}

/* Runs argv (env entries extra added) to completion within ms; its exit code, or -1. */
static int run_cmd(char *const argv[], const char *extra_env, int64_t ms)
{
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		setpgid(0, 0);
		if (extra_env)
			putenv((char *)extra_env);
		execv(argv[0], argv);
		_exit(127);
	}
	assert_true(pid > 0);
	child_track(pid);
	st = wait_bounded(pid, ms);
	if (st == -1) {
		children_kill();
		return -1;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- serve.py ----------------------------------------------------------- */

struct replica {
	pid_t pid;
	int port;
	int out;       /* its stdout and stderr */
	char url[128]; /* the infer URL */
};

/* Reads what the child wrote, up to ms or EOF, appending to buf (size n). */
static size_t read_some(int fd, char *buf, size_t n, size_t have, int64_t ms, const char *until)
{
	int64_t end = clock_mono_ms() + ms;
	struct pollfd p = {.fd = fd, .events = POLLIN};
	ssize_t r;

	while (have + 1 < n && clock_mono_ms() < end) {
		buf[have] = '\0';
		if (until && strstr(buf, until))
			break;
		if (poll(&p, 1, 50) <= 0)
			continue;
		r = read(fd, buf + have, n - have - 1);
		if (r <= 0)
			break;
		have += (size_t)r;
	}
	buf[have] = '\0';
	return have;
}

static int http(const char *method, const char *url, const char *body, char **resp);

/*
 * Starts serve.py on a free port with model (through /bin/sh when via_shell,
 * so that the pid given is the server's parent) and waits until it is ready.
 */
static void replica_start(struct replica *r, const char *model, int via_shell)
{
	char buf[4096], *p, readyurl[128];
	int fds[2], status = 0;
	int64_t end;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	if (pid == 0) {
		setpgid(0, 0);
		dup2(fds[1], 1);
		dup2(fds[1], 2);
		close(fds[0]);
		close(fds[1]);
		if (via_shell)
			/* the trap runs after python ends, so the shell exits with its status */
			execl("/bin/sh", "sh", "-c", "trap : TERM; " PYTHON " " SERVE
			      " --model \"$0\" --port 0; exit $?", model, (char *)NULL);
		else
			execl(PYTHON, PYTHON, SERVE, "--model", model, "--port", "0", (char *)NULL);
		_exit(127);
	}
	assert_true(pid > 0);
	child_track(pid);
	close(fds[1]);
	r->pid = pid;
	r->out = fds[0];
	read_some(r->out, buf, sizeof(buf), 0, 15000, "\n");
	p = strstr(buf, "listening on http://127.0.0.1:");
	if (p == NULL)
		fail_msg("serve.py did not start: %s", buf);
	r->port = (int)strtol(p + strlen("listening on http://127.0.0.1:"), NULL, 10);
	assert_true(r->port > 0);
	snprintf(r->url, sizeof(r->url), "http://127.0.0.1:%d/v2/models/digits/infer", r->port);
	snprintf(readyurl, sizeof(readyurl), "http://127.0.0.1:%d/v2/health/ready", r->port);
	for (end = clock_mono_ms() + 15000; clock_mono_ms() < end; usleep(20000))
		if ((status = http("GET", readyurl, NULL, NULL)) == 200)
			break;
	assert_int_equal(status, 200);
}

/* SIGTERM to its process group, then its exit code (within 10 s; -1 when killed or stuck). */
static int replica_stop(struct replica *r)
{
	int st;

	kill(-r->pid, SIGTERM);
	st = wait_bounded(r->pid, 10000);
	close(r->out);
	if (st == -1)
		children_kill();
	return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- HTTP --------------------------------------------------------------- */

struct buf {
	char *p;
	size_t n;
};

static size_t collect(char *p, size_t size, size_t n, void *ctx)
{
	struct buf *b = ctx;

	b->p = xrealloc(b->p, b->n + size * n + 1);
	memcpy(b->p + b->n, p, size * n);
	b->n += size * n;
	b->p[b->n] = '\0';
	return size * n;
}

/* One request on easy handle h (kept for keep-alive checks); the status, or -1. */
static int http_on(CURL *h, const char *method, const char *url, const char *body, char **resp)
{
	struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
	struct buf b = {0};
	long status = -1;

	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
	if (body)
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	else
		curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	if (curl_easy_perform(h) == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hd);
	if (resp)
		*resp = b.p ? b.p : xstrdup("");
	else
		free(b.p);
	return (int)status;
}

static int http(const char *method, const char *url, const char *body, char **resp)
{
	CURL *h = curl_easy_init();
	int status = http_on(h, method, url, body, resp);

	curl_easy_cleanup(h);
	return status;
}

/* Asserts method url [body] answers status with a body containing want. */
static json_t *expect_http(const char *method, const struct replica *r, const char *path,
			   const char *body, int status, const char *want)
{
	char url[256], *resp = NULL;
	json_t *j;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", r->port, path);
	assert_int_equal(http(method, url, body, &resp), status);
	if (want && strstr(resp, want) == NULL)
		fail_msg("%s %s: %s does not contain %s", method, path, resp, want);
	j = json_loads(resp, 0, NULL);
	assert_non_null(j);
	free(resp);
	return j;
}

/* ---- a forked HTTP server with chosen answers ---------------------------- */

enum fake_mode { FAKE_OK, FAKE_ALTERNATE, FAKE_SILENT };

struct fconn {
	int fd;
	char buf[16384];
	size_t len, req;  /* bytes held; bytes of the request being answered (0: none) */
	int64_t due_us;   /* when to answer it (monotonic) */
	int status;
};

/*
 * The child's loop: one thread, poll over every connection. Each request
 * is answered delay_ms after it arrived (FAKE_SILENT: never); GET /stats
 * answers at once with what was seen since the last /stats.
 */
static void fake_loop(int lfd, enum fake_mode mode, int delay_ms)
{
	static struct fconn c[64];
	struct pollfd p[65];
	long requests = 0, errors = 0, total = 0;
	int inflight = 0, max_inflight = 0, n = 0, i, k;
	char out[512], body[128];

	for (;;) {
		int64_t now = clock_mono_us(), wait = 1000000;
		int polled;

		for (i = 0; i < n; i++)
			if (c[i].req && c[i].due_us - now < wait)
				wait = c[i].due_us - now < 0 ? 0 : c[i].due_us - now;
		p[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
		for (i = 0; i < n; i++)
			p[i + 1] = (struct pollfd){.fd = c[i].fd, .events = POLLIN};
		polled = n;
		poll(p, (nfds_t)n + 1, (int)((wait + 999) / 1000));
		now = clock_mono_us();
		for (i = 0; i < polled; i++) {
			struct fconn *f = &c[i];
			char *hend, *cl;
			ssize_t r;

			if (p[i + 1].revents & (POLLIN | POLLHUP)) {
				r = read(f->fd, f->buf + f->len, sizeof(f->buf) - f->len - 1);
				if (r <= 0) {
					if (f->req)
						inflight--;
					close(f->fd);
					f->fd = -1; /* dropped below, after the pass */
					continue;
				}
				f->len += (size_t)r;
			}
			f->buf[f->len] = '\0';
			if (f->req == 0 && (hend = strstr(f->buf, "\r\n\r\n")) != NULL) {
				size_t need = (size_t)(hend + 4 - f->buf);
				cl = strcasestr(f->buf, "\r\ncontent-length:");
				if (cl && cl < hend)
					need += (size_t)strtol(cl + 17, NULL, 10);
				if (f->len >= need) {
					f->req = need;
					if (strncmp(f->buf, "GET /stats", 10) == 0) {
						f->status = 0; /* stats, at once */
						f->due_us = now;
					} else {
						requests++;
						total++;
						if (++inflight > max_inflight)
							max_inflight = inflight;
						f->status = mode == FAKE_ALTERNATE && total % 2 == 0 ? 500 : 200;
						errors += f->status == 500;
						f->due_us = mode == FAKE_SILENT ? INT64_MAX :
							now + delay_ms * 1000;
					}
				}
			}
			if (f->req && f->due_us <= now) {
				if (f->status == 0) {
					snprintf(body, sizeof(body), "{\"requests\":%ld,\"errors\":%ld,"
						 "\"max_inflight\":%d}", requests, errors, max_inflight);
					requests = errors = max_inflight = 0;
				} else {
					snprintf(body, sizeof(body), "{}");
					inflight--;
				}
				k = snprintf(out, sizeof(out), "HTTP/1.1 %d X\r\nContent-Type: "
					     "application/json\r\nContent-Length: %zu\r\n\r\n%s",
					     f->status ? f->status : 200, strlen(body), body);
				if (fd_write_all(f->fd, out, (size_t)k) < 0)
					f->len = f->req; /* the read side will see it closed */
				memmove(f->buf, f->buf + f->req, f->len - f->req);
				f->len -= f->req;
				f->req = 0;
			}
		}
		for (i = 0; i < n; i++)
			if (c[i].fd < 0)
				c[i--] = c[--n];
		/* every connection waiting (the socket is non-blocking) */
		while ((p[0].revents & POLLIN) && n < 64) {
			int fd = accept(lfd, NULL, NULL);
			if (fd < 0)
				break;
			c[n++] = (struct fconn){.fd = fd};
		}
	}
}

/* A listening socket on 127.0.0.1 and a free port; *port set. */
static int listen_any(int *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

static pid_t fake_start(enum fake_mode mode, int delay_ms, int *port)
{
	int fd = listen_any(port);
	pid_t pid;

	assert_int_equal(listen(fd, 128), 0);
	assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
	pid = fork();
	if (pid == 0) {
		setpgid(0, 0);
		fake_loop(fd, mode, delay_ms);
		_exit(0);
	}
	assert_true(pid > 0);
	child_track(pid);
	close(fd);
	return pid;
}

/* The fake server's counters since the last call, as JSON (the caller's). */
static json_t *fake_stats(int port)
{
	char url[64], *resp = NULL;
	json_t *j;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/stats", port);
	assert_int_equal(http("GET", url, NULL, &resp), 200);
	j = json_loads(resp, 0, NULL);
	assert_non_null(j);
	free(resp);
	return j;
}

static void fake_stop(pid_t pid)
{
	kill(-pid, SIGKILL);
	assert_true(wait_bounded(pid, 5000) != -1);
}

/* ---- fixtures ----------------------------------------------------------- */

static int group_setup(void **state)
{
	char *train[] = {PYTHON, "workflows/digits/train.py", "--folds", "2", NULL};
	char *env, *script, *gen[4] = {PYTHON, "-c", NULL, NULL};
	size_t len;
	int rc;

	(void)state;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (mkdtemp(g_dir) == NULL)
		return -1;
	if (access(SERVE, R_OK) != 0) {
		fprintf(stderr, "run from the repository root: %s not found\n", SERVE);
		return -1;
	}
	env = xasprintf("FERRY_OUTPUT_DIR=%s", g_dir);
	rc = run_cmd(train, env, 120000);
	free(env); /* the child had its copy */
	if (rc != 0) {
		fprintf(stderr, "train.py failed (%d)\n", rc);
		return -1;
	}
	/*
	 * ten held-out images, flat and nested, from the pipeline's own split, with
	 * their labels and what the model says of them when called directly
	 */
	script = xasprintf(
		"import json,sys; sys.path.insert(0,'workflows/digits')\n"
		"from common import load_split\n"
		"_, X, _, y, _ = load_split()\n"
		"rows = [[int(round(v * 16)) for v in X[i]] for i in range(10)]\n"
		"t = {'name':'input-0','shape':[10,64],'datatype':'FP32'}\n"
		"json.dump({'inputs':[dict(t, data=sum(rows, []))], 'id':'b1'}, open('%s/flat.json','w'))\n"
		"json.dump({'inputs':[dict(t, data=[[r[k:k+8] for k in range(0,64,8)] for r in rows])]},"
		" open('%s/nested.json','w'))\n"
		"json.dump([int(v) for v in y[:10]], open('%s/labels.json','w'))\n"
		"import pickle; m = pickle.load(open('%s/model.pkl','rb'))\n"
		"json.dump([int(v) for v in m.predict(X[:10])], open('%s/predicted.json','w'))\n",
		g_dir, g_dir, g_dir, g_dir, g_dir);
	gen[2] = script;
	rc = run_cmd(gen, NULL, 60000);
	free(script);
	if (rc != 0 || file_read(&g_sample, &len, SAMPLE) != 0)
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	char *rm[] = {"/bin/rm", "-rf", g_dir, NULL};

	(void)state;
	children_kill();
	run_cmd(rm, NULL, 30000);
	free(g_sample);
	curl_global_cleanup();
	return 0;
}

static int test_teardown(void **state)
{
	(void)state;
	children_kill();
	return 0;
}

static char *dir_file(const char *name)
{
	char *path = xasprintf("%s/%s", g_dir, name), *text;
	size_t len;

	assert_int_equal(file_read(&text, &len, path), 0);
	free(path);
	return text;
}

/* ---- serve.py ------------------------------------------------------------ */

static void test_serve__endpoints(void **state)
{
	char *flat = dir_file("flat.json"), *nested = dir_file("nested.json"), *text;
	char *got, url[128], *resp = NULL;
	json_t *labels, *predicted, *j, *out;
	struct replica r;
	size_t i, right;
	curl_off_t conns = -1;
	CURL *h;

	(void)state;
	text = dir_file("labels.json");
	labels = json_loads(text, 0, NULL);
	free(text);
	text = dir_file("predicted.json");
	predicted = json_loads(text, 0, NULL);
	free(text);
	assert_int_equal(json_array_size(labels), 10);
	assert_int_equal(json_array_size(predicted), 10);
	replica_start(&r, g_dir, 0); /* the directory: serve.py finds model.pkl in it */
	json_decref(expect_http("GET", &r, "/v2/health/live", NULL, 200, "{\"live\":true}"));
	json_decref(expect_http("GET", &r, "/v2/health/ready", NULL, 200, "{\"ready\":true}"));
	json_decref(expect_http("GET", &r, "/v2/models/digits/ready", NULL, 200, "\"ready\":true"));
	j = expect_http("GET", &r, "/v2/models/digits", NULL, 200, NULL);
	assert_string_equal(json_string_value(json_object_get(j, "name")), "digits");
	assert_string_equal(json_string_value(json_object_get(j, "platform")), "sklearn");
	got = json_dumps(json_object_get(j, "inputs"), JSON_COMPACT);
	assert_string_equal(got, "[{\"name\":\"input-0\",\"datatype\":\"FP32\",\"shape\":[-1,64]}]");
	free(got);
	json_decref(j);

	/* the sample: one held-out 7, id echoed */
	j = expect_http("POST", &r, "/v2/models/digits/infer", g_sample, 200, NULL);
	assert_string_equal(json_string_value(json_object_get(j, "id")), "sample");
	assert_string_equal(json_string_value(json_object_get(j, "model_name")), "digits");
	got = json_dumps(json_object_get(j, "outputs"), JSON_COMPACT);
	assert_string_equal(got, "[{\"name\":\"label\",\"shape\":[1],\"datatype\":\"INT64\",\"data\":[7]}]");
	free(got);
	json_decref(j);

	/*
	 * a batch of ten, flat and nested: what the model says when called
	 * directly (so serve.py scales and orders the pixels as training did),
	 * and right about at least nine of the ten
	 */
	j = expect_http("POST", &r, "/v2/models/digits/infer", flat, 200, "\"shape\":[10]");
	out = json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "data");
	assert_true(json_equal(out, predicted));
	for (i = 0, right = 0; i < 10; i++)
		right += json_integer_value(json_array_get(out, i)) ==
			 json_integer_value(json_array_get(labels, i));
	assert_true(right >= 9);
	assert_string_equal(json_string_value(json_object_get(j, "id")), "b1");
	json_decref(j);
	j = expect_http("POST", &r, "/v2/models/digits/versions/1/infer", nested, 200, NULL);
	out = json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "data");
	assert_true(json_equal(out, predicted));
	assert_null(json_object_get(j, "id"));
	json_decref(j);

	/* bad requests name what is wrong */
	json_decref(expect_http("POST", &r, "/v2/models/digits/infer", "{\"inputs\": [", 400,
				"\"error\":\"the body is not valid JSON"));
	json_decref(expect_http("POST", &r, "/v2/models/digits/infer",
				"{\"inputs\":[{\"name\":\"x\",\"shape\":[1,63],\"datatype\":\"FP32\","
				"\"data\":[1]}]}", 400, "inputs[0].shape is [1, 63]"));
	json_decref(expect_http("POST", &r, "/v2/models/digits/infer",
				"{\"inputs\":[{\"name\":\"x\",\"shape\":[2,64],\"datatype\":\"FP32\","
				"\"data\":[1,2,3]}]}", 400,
				"inputs[0].data has 3 numbers; shape [2, 64] needs 128"));
	json_decref(expect_http("POST", &r, "/v2/models/digits/infer",
				"{\"inputs\":[{\"name\":\"x\",\"shape\":[1,64],\"datatype\":\"BYTES\","
				"\"data\":[\"a\"]}]}", 400, "inputs[0].datatype \\\"BYTES\\\" is not numeric"));
	json_decref(expect_http("POST", &r, "/v2/models/digits/infer",
				"{\"inputs\":[{\"name\":\"x\",\"shape\":[1,64],\"datatype\":\"FP32\"}]}",
				400, "inputs[0].data is missing"));
	json_decref(expect_http("POST", &r, "/v2/models/digits/infer", "{\"inputs\":[]}", 400,
				"inputs must be a non-empty list"));
	json_decref(expect_http("POST", &r, "/v2/models/mnist/infer", g_sample, 404,
				"no model 'mnist' here"));
	json_decref(expect_http("GET", &r, "/v2/models/mnist", NULL, 404, "no model 'mnist'"));
	json_decref(expect_http("GET", &r, "/v2/models/digits/versions/9", NULL, 404,
				"no version '9' of digits"));
	json_decref(expect_http("GET", &r, "/nowhere", NULL, 404, "no such route"));
	json_decref(expect_http("GET", &r, "/v2/models/digits/infer", NULL, 405, "infer takes POST"));

	/* keep-alive stays in step after an error answered before the body mattered */
	h = curl_easy_init();
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v2/models/mnist/infer", r.port);
	assert_int_equal(http_on(h, "POST", url, g_sample, &resp), 404);
	free(resp);
	assert_int_equal(http_on(h, "POST", r.url, g_sample, &resp), 200);
	assert_non_null(strstr(resp, "\"data\":[7]"));
	free(resp);
	curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &conns);
	assert_int_equal(conns, 0); /* the second request reused the connection */
	curl_easy_cleanup(h);

	assert_int_equal(replica_stop(&r), 0);
	free(flat);
	free(nested);
	json_decref(labels);
	json_decref(predicted);
}

/* Connects a raw socket to 127.0.0.1:port with 5 s send/receive timeouts. */
static int raw_connect(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				.sin_port = htons((uint16_t)port)};
	struct timeval tv = {.tv_sec = 5};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static void test_serve__graceful_sigterm(void **state)
{
	struct replica r;
	char head[256], resp[4096];
	size_t half = strlen(g_sample) / 2, n = 0;
	int busy, idle, st, k;
	int64_t t0;
	ssize_t got;

	(void)state;
	replica_start(&r, g_dir, 0);
	idle = raw_connect(r.port); /* an idle keep-alive connection must not hold the exit */
	busy = raw_connect(r.port);
	k = snprintf(head, sizeof(head), "POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n"
		     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", strlen(g_sample));
	assert_int_equal(fd_write_all(busy, head, (size_t)k), 0);
	assert_int_equal(fd_write_all(busy, g_sample, half), 0);
	usleep(300000); /* the server is inside the request, reading its body */
	t0 = clock_mono_ms();
	kill(r.pid, SIGTERM);
	usleep(500000);
	/* still running: the request in flight holds it */
	assert_int_equal(waitpid(r.pid, &st, WNOHANG), 0);
	assert_int_equal(fd_write_all(busy, g_sample + half, strlen(g_sample) - half), 0);
	while (n + 1 < sizeof(resp) && (got = read(busy, resp + n, sizeof(resp) - n - 1)) > 0)
		n += (size_t)got; /* until the server closes: it answers, then closes */
	resp[n] = '\0';
	assert_non_null(strstr(resp, "HTTP/1.1 200"));
	assert_non_null(strstr(resp, "Connection: close"));
	assert_non_null(strstr(resp, "\"data\":[7]"));
	st = wait_bounded(r.pid, 5000);
	assert_true(st != -1 && WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_true(clock_mono_ms() - t0 < 3000);
	/* and nothing listens any more */
	assert_int_equal(http("GET", r.url, NULL, NULL), -1);
	close(busy);
	close(idle);
	close(r.out);
}

static void test_serve__bad_model(void **state)
{
	char model[256], buf[4096];
	int fds[2], st;
	pid_t pid;

	(void)state;
	snprintf(model, sizeof(model), "%s/missing.pkl", g_dir);
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	if (pid == 0) {
		setpgid(0, 0);
		dup2(fds[1], 1);
		dup2(fds[1], 2);
		execl(PYTHON, PYTHON, SERVE, "--model", model, "--port", "0", (char *)NULL);
		_exit(127);
	}
	child_track(pid);
	close(fds[1]);
	read_some(fds[0], buf, sizeof(buf), 0, 15000, NULL);
	close(fds[0]);
	st = wait_bounded(pid, 5000);
	assert_true(st != -1 && WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 1);
	assert_non_null(strstr(buf, "cannot load the model"));
	assert_non_null(strstr(buf, "missing.pkl"));
}

/* ---- loadtest_run -------------------------------------------------------- */

static double num(const json_t *level, const char *key)
{
	const json_t *v = json_object_get(level, key);

	if (!json_is_number(v))
		fail_msg("%s is not a number", key);
	return json_number_value(v);
}

/* Checks the shape and the invariants every level must have. */
static void check_levels(const json_t *res, const int *levels, size_t n, int requests)
{
	const json_t *arr = json_object_get(res, "levels");

	assert_int_equal(json_array_size(arr), n);
	for (size_t i = 0; i < n; i++) {
		const json_t *l = json_array_get(arr, i);
		assert_int_equal(json_integer_value(json_object_get(l, "concurrency")), levels[i]);
		assert_int_equal(json_integer_value(json_object_get(l, "requests")), requests);
	}
	assert_non_null(json_string_value(json_object_get(res, "started_at")));
	assert_true(json_integer_value(json_object_get(res, "duration_ms")) >= 0);
}

static void check_latencies(const json_t *l)
{
	assert_true(num(l, "p50_ms") > 0);
	assert_true(num(l, "p50_ms") <= num(l, "p90_ms"));
	assert_true(num(l, "p90_ms") <= num(l, "p99_ms"));
	assert_true(num(l, "p99_ms") <= num(l, "max_ms"));
	assert_true(num(l, "throughput_rps") > 0);
}

static void test_loadtest__replicas(void **state)
{
	static const int levels[] = {1, 2, 4}, sixteen[] = {16};
	struct replica r[2];
	const char *urls[2];
	pid_t pids[2];
	json_t *res = NULL, *l;
	size_t i;

	(void)state;
	replica_start(&r[0], g_dir, 0);
	replica_start(&r[1], g_dir, 1); /* through sh: its memory is the shell's child's */
	for (i = 0; i < 2; i++) {
		urls[i] = r[i].url;
		pids[i] = r[i].pid;
	}
	struct loadtest_opts o = {.urls = urls, .nurls = 2, .body = g_sample, .levels = levels,
				  .nlevels = 3, .requests = 50, .timeout_ms = 5000,
				  .pids = pids, .npids = 2};
	assert_int_equal(loadtest_run(&o, &res), 0);
	check_levels(res, levels, 3, 50);
	assert_int_equal(json_integer_value(json_object_get(res, "replicas")), 2);
	json_array_foreach(json_object_get(res, "levels"), i, l) {
		assert_int_equal(json_integer_value(json_object_get(l, "errors")), 0);
		assert_true(num(l, "error_rate") == 0);
		assert_null(json_object_get(l, "first_error"));
		check_latencies(l);
		/* well under the 40 ms a Nagle / delayed-ACK stall costs (serve.py sets TCP_NODELAY) */
		assert_true(num(l, "p50_ms") < 20);
		/* two python3 processes with scikit-learn loaded: tens of MB each; sh alone is ~1 */
		assert_true(num(l, "memory_mb") > 60);
		assert_true(num(l, "memory_mb") < 4096);
		print_message("serve.py x2, concurrency %d: p50 %.2f ms, p90 %.2f, p99 %.2f, max %.2f, "
			      "%.0f req/s, %.1f MB\n", levels[i], num(l, "p50_ms"), num(l, "p90_ms"),
			      num(l, "p99_ms"), num(l, "max_ms"), num(l, "throughput_rps"),
			      num(l, "memory_mb"));
	}
	json_decref(res);

	/*
	 * one replica, 16 new connections at once: none waits for a SYN
	 * retransmission (1 s; serve.py's listen backlog is larger than 16).
	 * Without pids, memory is null.
	 */
	o.pids = NULL;
	o.npids = 0;
	o.nurls = 1;
	o.levels = sixteen;
	o.nlevels = 1;
	o.requests = 32;
	assert_int_equal(loadtest_run(&o, &res), 0);
	l = json_array_get(json_object_get(res, "levels"), 0);
	assert_int_equal(json_integer_value(json_object_get(l, "errors")), 0);
	assert_true(num(l, "max_ms") < 900);
	assert_true(json_is_null(json_object_get(l, "memory_mb")));
	json_decref(res);
	assert_int_equal(replica_stop(&r[0]), 0);
	assert_int_equal(replica_stop(&r[1]), 0);
}

/* The server sees exactly `concurrency` requests at once, and each of them. */
static void test_loadtest__exact_concurrency(void **state)
{
	static const int levels[][1] = {{1}, {3}, {8}};
	const char *url[1];
	char buf[64];
	json_t *res = NULL, *st, *l;
	int port;
	pid_t pid;

	(void)state;
	pid = fake_start(FAKE_OK, 30, &port);
	snprintf(buf, sizeof(buf), "http://127.0.0.1:%d/infer", port);
	url[0] = buf;
	for (size_t i = 0; i < 3; i++) {
		struct loadtest_opts o = {.urls = url, .nurls = 1, .body = "{}", .levels = levels[i],
					  .nlevels = 1, .requests = 24};
		int64_t t0 = clock_mono_ms(), took;

		assert_int_equal(loadtest_run(&o, &res), 0);
		took = clock_mono_ms() - t0;
		st = fake_stats(port);
		assert_int_equal(json_integer_value(json_object_get(st, "requests")), 24);
		assert_int_equal(json_integer_value(json_object_get(st, "max_inflight")), levels[i][0]);
		l = json_array_get(json_object_get(res, "levels"), 0);
		assert_int_equal(json_integer_value(json_object_get(l, "errors")), 0);
		check_latencies(l);
		assert_true(num(l, "p50_ms") >= 30); /* the server's delay */
		/* 24 requests, `concurrency` at a time, 30 ms each: ceil(24/c) rounds */
		assert_true(took >= (24 + levels[i][0] - 1) / levels[i][0] * 30);
		json_decref(st);
		json_decref(res);
	}
	fake_stop(pid);
}

static void test_loadtest__half_errors(void **state)
{
	static const int levels[] = {1, 2, 4};
	const char *url[2];
	char b0[64];
	json_t *res = NULL, *l, *st;
	size_t i;
	int port;
	pid_t pid;

	(void)state;
	pid = fake_start(FAKE_ALTERNATE, 0, &port);
	snprintf(b0, sizeof(b0), "http://127.0.0.1:%d/infer", port);
	url[0] = url[1] = b0;
	struct loadtest_opts o = {.urls = url, .nurls = 2, .body = g_sample, .levels = levels,
				  .nlevels = 3, .requests = 50};
	assert_int_equal(loadtest_run(&o, &res), 0);
	check_levels(res, levels, 3, 50);
	json_array_foreach(json_object_get(res, "levels"), i, l) {
		/* the server answers 500 to every second request it sees: exactly half */
		assert_int_equal(json_integer_value(json_object_get(l, "errors")), 25);
		assert_true(num(l, "error_rate") == 0.5);
		assert_string_equal(json_string_value(json_object_get(l, "first_error")), "HTTP 500");
		check_latencies(l);
	}
	st = fake_stats(port);
	assert_int_equal(json_integer_value(json_object_get(st, "requests")), 150);
	assert_int_equal(json_integer_value(json_object_get(st, "errors")), 75);
	json_decref(st);
	json_decref(res);
	fake_stop(pid);
}

static void test_loadtest__dead_port(void **state)
{
	const char *url[1];
	char buf[64];
	json_t *res = NULL, *l;
	int port, fd = listen_any(&port);
	int64_t t0;
	size_t i;

	(void)state;
	close(fd); /* bound, never listened, closed: nothing answers there */
	snprintf(buf, sizeof(buf), "http://127.0.0.1:%d/v2/models/digits/infer", port);
	url[0] = buf;
	struct loadtest_opts o = {.urls = url, .nurls = 1, .body = g_sample, .requests = 20};
	t0 = clock_mono_ms();
	assert_int_equal(loadtest_run(&o, &res), 0);
	assert_true(clock_mono_ms() - t0 < 5000);
	assert_int_equal(json_array_size(json_object_get(res, "levels")), 5); /* 1 2 4 8 16 */
	json_array_foreach(json_object_get(res, "levels"), i, l) {
		assert_int_equal(json_integer_value(json_object_get(l, "errors")), 20);
		assert_true(num(l, "error_rate") == 1.0);
		assert_true(json_is_null(json_object_get(l, "p50_ms")));
		assert_true(json_is_null(json_object_get(l, "p99_ms")));
		assert_true(num(l, "throughput_rps") == 0);
		assert_non_null(strstr(json_string_value(json_object_get(l, "first_error")), "onnect"));
	}
	json_decref(res);
}

/* A server that takes requests and never answers: bounded by the timeouts. */
static void test_loadtest__no_answer(void **state)
{
	static const int levels[] = {1, 4};
	const char *url[1];
	char buf[64];
	json_t *res = NULL, *l;
	int64_t t0, took;
	int port;
	pid_t pid;

	(void)state;
	pid = fake_start(FAKE_SILENT, 0, &port);
	snprintf(buf, sizeof(buf), "http://127.0.0.1:%d/infer", port);
	url[0] = buf;
	struct loadtest_opts o = {.urls = url, .nurls = 1, .body = "{}", .levels = levels,
				  .nlevels = 2, .requests = 4, .timeout_ms = 200};
	t0 = clock_mono_ms();
	assert_int_equal(loadtest_run(&o, &res), 0);
	took = clock_mono_ms() - t0;
	/* 4 timeouts one after another, then 4 at once: about 5 x 200 ms */
	assert_true(took >= 900 && took < 3000);
	l = json_array_get(json_object_get(res, "levels"), 0);
	assert_true(num(l, "error_rate") == 1.0);
	assert_non_null(strstr(json_string_value(json_object_get(l, "first_error")), "timed out"));
	json_decref(res);

	/* the whole test's limit: what is not done by then counts as errors */
	o.levels = levels;
	o.nlevels = 1;
	o.requests = 50;
	o.timeout_ms = 5000;
	o.max_ms = 300;
	t0 = clock_mono_ms();
	assert_int_equal(loadtest_run(&o, &res), 0);
	took = clock_mono_ms() - t0;
	assert_true(took >= 250 && took < 1500);
	l = json_array_get(json_object_get(res, "levels"), 0);
	assert_int_equal(json_integer_value(json_object_get(l, "errors")), 50);
	assert_string_equal(json_string_value(json_object_get(l, "first_error")),
			    "the load test's time limit passed before an answer");
	json_decref(res);
	fake_stop(pid);
}

static void test_loadtest__invalid_opts(void **state)
{
	static const int zero[] = {0}, many[] = {300};
	const char *url[1] = {"http://127.0.0.1:1/"};
	json_t *res = (json_t *)&res;
	struct loadtest_opts o = {.urls = url, .nurls = 0, .body = "{}"};

	(void)state;
	assert_int_equal(loadtest_run(&o, &res), FERRY_EINVALID);
	assert_null(res);
	assert_string_equal(ferry_error_last(), "load test: no replica URL to send requests to");
	o.nurls = 1;
	o.body = NULL;
	assert_int_equal(loadtest_run(&o, &res), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "load test: no sample request; declare `sample` on "
			    "the deploy step");
	o.body = "{}";
	o.levels = zero;
	o.nlevels = 1;
	assert_int_equal(loadtest_run(&o, &res), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "load test: concurrency 0 is out of range; use 1-256");
	o.levels = many;
	assert_int_equal(loadtest_run(&o, &res), FERRY_EINVALID);
	o.levels = NULL;
	o.requests = -1;
	assert_int_equal(loadtest_run(&o, &res), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "load test: -1 requests per level; use 1-100000");
}

/* ---- loadtest_judge ------------------------------------------------------ */

/* A result with levels 1, 8, 16. */
static json_t *result3(double p99_1, double p99_8, double p99_16, double err8, double rps16)
{
	return json_pack("{s:[{s:i,s:f,s:f,s:f,s:f,s:n},{s:i,s:f,s:f,s:f,s:f,s:f},"
			 "{s:i,s:f,s:f,s:f,s:f,s:f}]}", "levels",
			 "concurrency", 1, "p99_ms", p99_1, "error_rate", 0.0, "throughput_rps", 90.0,
			 "p50_ms", 1.0, "memory_mb",
			 "concurrency", 8, "p99_ms", p99_8, "error_rate", err8, "throughput_rps", 300.0,
			 "p50_ms", 2.0, "memory_mb", 120.0,
			 "concurrency", 16, "p99_ms", p99_16, "error_rate", 0.0,
			 "throughput_rps", rps16, "p50_ms", 3.0, "memory_mb", 130.0);
}

static char *dumps(const json_t *v)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(12));

	assert_non_null(s);
	return s;
}

static void test_loadtest__judge_pass_fail(void **state)
{
	json_t *res = result3(12.5, 40, 73.2, 0.02, 310), *th, *v = NULL;
	char *reason = (char *)"x", *s;

	(void)state;
	th = json_pack("{s:s,s:s,s:s}", "p99_ms", "<= 80", "error_rate", "< 5%",
		       "throughput_rps", ">= 80");
	assert_int_equal(loadtest_judge(&v, &reason, th, res, NULL), 1);
	assert_null(reason);
	s = dumps(v);
	/* each names the level closest to failing */
	assert_string_equal(s,
		"[{\"metric\":\"p99_ms\",\"op\":\"<=\",\"threshold\":80.0,\"level\":16,\"value\":73.2,"
		"\"passed\":true},"
		"{\"metric\":\"error_rate\",\"op\":\"<\",\"threshold\":0.05,\"level\":8,\"value\":0.02,"
		"\"passed\":true},"
		"{\"metric\":\"throughput_rps\",\"op\":\">=\",\"threshold\":80.0,\"level\":1,"
		"\"value\":90.0,\"passed\":true}]");
	free(s);
	json_decref(v);
	json_decref(th);

	th = json_pack("{s:s,s:s,s:s,s:s}", "p99_ms", "<= 50", "error_rate", "< 0.1%", "p50_ms",
		       "< 10", "memory_mb", "< 125");
	assert_int_equal(loadtest_judge(&v, &reason, th, res, NULL), 0);
	assert_string_equal(reason, "load test failed: p99_ms 73.2 > 50 at concurrency 16; "
			    "error_rate 2.0% >= 0.1% at concurrency 8; "
			    "memory_mb 130.0 >= 125 at concurrency 16");
	free(reason);
	s = dumps(v);
	assert_string_equal(s,
		"[{\"metric\":\"p99_ms\",\"op\":\"<=\",\"threshold\":50.0,\"level\":16,\"value\":73.2,"
		"\"passed\":false},"
		"{\"metric\":\"error_rate\",\"op\":\"<\",\"threshold\":0.001,\"level\":8,\"value\":0.02,"
		"\"passed\":false},"
		"{\"metric\":\"p50_ms\",\"op\":\"<\",\"threshold\":10.0,\"level\":16,\"value\":3.0,"
		"\"passed\":true},"
		"{\"metric\":\"memory_mb\",\"op\":\"<\",\"threshold\":125.0,\"level\":16,\"value\":130.0,"
		"\"passed\":false,\"note\":\"memory not measured (no replica process could be read)\"}]");
	free(s);
	json_decref(v);
	json_decref(th);

	/* the worst failing level is the one furthest past, not the last: 90 at 8 beats 60 at 16 */
	json_decref(res);
	res = result3(55, 90, 60, 0, 310);
	th = json_pack("{s:[s,s]}", "p99_ms", "< 50", "< 100");
	assert_int_equal(loadtest_judge(&v, &reason, th, res, NULL), 0);
	assert_string_equal(reason, "load test failed: p99_ms 90.0 >= 50 at concurrency 8");
	assert_int_equal(json_array_size(v), 2);
	assert_true(json_is_true(json_object_get(json_array_get(v, 1), "passed")));
	free(reason);
	json_decref(v);
	json_decref(th);

	/* a level with no successful request fails latency thresholds */
	json_object_set_new(json_array_get(json_object_get(res, "levels"), 2), "p99_ms", json_null());
	th = json_pack("{s:s}", "p99_ms", "< 100");
	assert_int_equal(loadtest_judge(&v, &reason, th, res, NULL), 0);
	assert_string_equal(reason, "load test failed: p99_ms: no successful request at concurrency 16");
	free(reason);
	json_decref(v);
	json_decref(th);
	json_decref(res);
}

static void test_loadtest__judge_production(void **state)
{
	json_t *res = result3(12, 40, 73.2, 0.02, 250), *prod = result3(10, 35, 50, 0.01, 400);
	json_t *th, *v = NULL;
	char *reason = NULL, *s;

	(void)state;
	th = json_pack("{s:s,s:s,s:s}", "p99_ms", "<= production * 1.2", "throughput_rps",
		       ">= production * 0.8", "error_rate", "<= production + 0.5%");
	assert_int_equal(loadtest_judge(&v, &reason, th, res, prod), 0);
	assert_string_equal(reason, "load test failed: p99_ms 73.2 > production 50.0 * 1.2 = 60.0 at "
			    "concurrency 16; throughput_rps 250.0 < production 400.0 * 0.8 = 320.0 "
			    "at concurrency 16; error_rate 2.0% > production 1.0% + 0.5% = 1.5% at "
			    "concurrency 8");
	free(reason);
	s = dumps(json_array_get(v, 0));
	assert_string_equal(s, "{\"metric\":\"p99_ms\",\"op\":\"<=\",\"threshold\":60.0,\"level\":16,"
			    "\"value\":73.2,\"passed\":false,\"against\":\"production\","
			    "\"production\":50.0,\"factor\":1.2,\"offset\":0.0}");
	free(s);
	json_decref(v);

	/* 12 <= 10 * 1.2 at level 1, 40 <= 42 at 8, and now 59.9 <= 60 at 16 */
	json_decref(th);
	th = json_pack("{s:s}", "p99_ms", "<= production * 1.2");
	json_object_set_new(json_array_get(json_object_get(res, "levels"), 2), "p99_ms",
			    json_real(59.9));
	assert_int_equal(loadtest_judge(&v, &reason, th, res, prod), 1);
	assert_null(reason);
	/* the closest to failing: 12 at level 1 is exactly production 10 * 1.2 */
	assert_int_equal(json_integer_value(json_object_get(json_array_get(v, 0), "level")), 1);
	json_decref(v);

	/* no production version yet: passes with a note */
	json_object_set_new(json_array_get(json_object_get(res, "levels"), 2), "p99_ms",
			    json_real(500));
	assert_int_equal(loadtest_judge(&v, &reason, th, res, NULL), 1);
	s = dumps(v);
	assert_string_equal(s, "[{\"metric\":\"p99_ms\",\"op\":\"<=\",\"threshold\":null,"
			    "\"level\":null,\"value\":null,\"passed\":true,\"against\":\"production\","
			    "\"production\":null,\"factor\":1.2,\"offset\":0.0,"
			    "\"note\":\"no production load test yet\"}]");
	free(s);
	json_decref(v);

	/* production ran other levels: only the shared ones are compared */
	json_array_remove(json_object_get(prod, "levels"), 2);
	assert_int_equal(loadtest_judge(&v, &reason, th, res, prod), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(v, 0), "note")),
			    "production has no such figure at some levels; not compared there");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(v, 0), "level")), 1);
	json_decref(v);
	json_decref(th);
	json_decref(res);
	json_decref(prod);
}

static void expect_bad_thresholds(const char *json, const char *want)
{
	json_t *th = json_loads(json, 0, NULL), *res = result3(1, 2, 3, 0, 100), *v = NULL;
	char *reason = NULL;

	assert_non_null(th);
	assert_int_equal(loadtest_thresholds_check(th), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), want);
	assert_int_equal(loadtest_judge(&v, &reason, th, res, NULL), FERRY_EINVALID);
	assert_null(v);
	assert_null(reason);
	json_decref(th);
	json_decref(res);
}

static void test_loadtest__thresholds_check(void **state)
{
	json_t *ok = json_pack("{s:[s,s],s:s,s:s}", "p99_ms", "< 50", "<= production * 1.2",
			       "error_rate", "< 0.1%", "memory_mb", "< 512");

	(void)state;
	assert_int_equal(loadtest_thresholds_check(ok), 0);
	json_decref(ok);
	expect_bad_thresholds("{\"p95_ms\": \"< 5\"}", "load_test: unknown metric \"p95_ms\"; use "
			      "p50_ms, p90_ms, p99_ms, max_ms, error_rate, throughput_rps, memory_mb");
	expect_bad_thresholds("{\"p99_ms\": \"fast\"}", "load_test p99_ms \"fast\": no comparison; "
			      "write OP VALUE with OP one of >=, >, <=, <, ==, != (e.g. \">= 0.9\" or "
			      "\">= production\")");
	expect_bad_thresholds("{\"p99_ms\": \"< 5%\"}", "load_test p99_ms \"< 5%\": % is for "
			      "error_rate only; p99_ms is not a fraction");
	expect_bad_thresholds("{\"error_rate\": \"< 150%\"}", "load_test error_rate \"< 150%\": 1.5 "
			      "is more than 100%; write the rate as a fraction (0.001) or a "
			      "percentage (0.1%)");
	expect_bad_thresholds("{\"max_ms\": \"< -1\"}", "load_test max_ms \"< -1\": -1 is negative; "
			      "max_ms is 0 or more");
	expect_bad_thresholds("{\"p99_ms\": 50}", "load_test p99_ms: expected a comparison such as "
			      "\"< 50\" or a list of them");
	expect_bad_thresholds("{\"p99_ms\": []}", "load_test p99_ms: expected a comparison such as "
			      "\"< 50\" or a list of them");
	expect_bad_thresholds("{\"p99_ms\": [\"< 5\", 7]}", "load_test p99_ms: item 2 is not a "
			      "string; write comparisons such as \"< 50\"");
	expect_bad_thresholds("{\"p99_ms\": \"<= production * 0\"}", "load_test p99_ms \"<= "
			      "production * 0\": the factor 0 must be more than 0");
	expect_bad_thresholds("[]", "load_test thresholds must be an object of metric: \"OP VALUE\", "
			      "e.g. {\"p99_ms\": \"< 50\"}");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_serve__endpoints, test_teardown),
		cmocka_unit_test_teardown(test_serve__graceful_sigterm, test_teardown),
		cmocka_unit_test_teardown(test_serve__bad_model, test_teardown),
		cmocka_unit_test_teardown(test_loadtest__replicas, test_teardown),
		cmocka_unit_test_teardown(test_loadtest__exact_concurrency, test_teardown),
		cmocka_unit_test_teardown(test_loadtest__half_errors, test_teardown),
		cmocka_unit_test_teardown(test_loadtest__dead_port, test_teardown),
		cmocka_unit_test_teardown(test_loadtest__no_answer, test_teardown),
		cmocka_unit_test(test_loadtest__invalid_opts),
		cmocka_unit_test(test_loadtest__judge_pass_fail),
		cmocka_unit_test(test_loadtest__judge_production),
		cmocka_unit_test(test_loadtest__thresholds_check),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

/*
 * replicas — see replicas.h.
 *
 * A replica is started as a local job of a synthetic claim: its attempt
 * directory is $FERRY_HOME/deployments/NAME/runs/ORD/rIDX/GENERATION
 * (exec_attempt_dir below the deployment's own home), with the log and
 * status file every local job has, so its output stays after it is gone
 * and a restarted daemon tells a live replica from its handle alone.
 */
#include "deploy/replicas.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <linux/fs.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/exec.h"
#include "exec/proc.h"
#include "store/store.h"
#include "store/store_deploy.h"
#include "lib/blobs.h"
#include "lib/jobfile.h"
#include "lib/util.h"

/* This host's replica address (replica_set_address): an IPv4 literal. */
static char my_addr[64] = "127.0.0.1";

/* The executor type of a replica's handle (local when it names none). */
static const struct exec_type *type_of(const json_t *handle)
{
	const char *name = json_string_value(json_object_get(handle, "executor"));
	const struct exec_type *t = exec_type_find(name ? name : "local");

	return t ? t : &exec_local;
}

/*
 * The model a replica serves, as a copy of the registered blob in the
 * deployment's own models/ directory (0711, the copy 0644 and the
 * daemon's): artifacts/ is the daemon's alone (exec_user.c), so a replica
 * run as the job user reads its model from here, and cannot change it.
 * This is KServe's storage initializer on one machine: content-addressed,
 * so a copy that exists is the right one and is made once per version,
 * not per replica. A reflink where the filesystem has them, else a copy.
 * NULL (with the error set) when the blob cannot be read.
 */
static char *model_copy(const char *home, const char *artifact)
{
	const char *base = strrchr(artifact, '/') ? strrchr(artifact, '/') + 1 : artifact;
	char *dir = xasprintf("%s/models", home), *path = xasprintf("%s/%s", dir, base), *tmp = NULL;
	int in = -1, out = -1;
	struct stat st;

	if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
		goto done;
	if (mkdir_p(dir, 0711) < 0)
		goto fail;
	in = open(artifact, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (in < 0 || fstat(in, &st) < 0 || !S_ISREG(st.st_mode)) {
		ferry_error_set("the model %s cannot be read: %s", artifact, in < 0 ? strerror(errno) : "not a file");
		goto fail;
	}
	tmp = xasprintf("%s.%d.tmp", path, (int)getpid());
	out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (out < 0)
		goto io;
	if (ioctl(out, FICLONE, in) < 0) {
		off_t left = st.st_size;
		while (left > 0) {
			ssize_t n = copy_file_range(in, NULL, out, NULL, (size_t)left, 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				goto io;
			left -= n;
		}
	}
	if (fchmod(out, 0644) < 0 || close(out) < 0) {
		out = -1;
		goto io;
	}
	out = -1;
	if (rename(tmp, path) < 0)
		goto io;
	close(in);
	free(tmp);
done:
	free(dir);
	return path;
io:
	ferry_error_set("copying the model %s to %s: %s", artifact, dir, strerror(errno));
fail:
	if (out >= 0)
		close(out);
	if (in >= 0)
		close(in);
	if (tmp)
		unlink(tmp);
	free(tmp);
	free(dir);
	free(path);
	return NULL;
}

int replica_start(const struct replica_spec *s, json_t **handle)
{
	struct exec_spec c = {0};
	json_t *spec;
	struct exec_job job;
	struct exec_status st = {.exit_code = -1};
	const struct exec_type *t = exec_type_for(s->placement, &exec_local);
	char *home = xasprintf("%s/deployments/%s", s->home, s->deployment);
	char name[16], *model = NULL;
	json_t *env = json_object(), *v;
	const char *k;
	int error;

	*handle = NULL;
	memset(&job, 0, sizeof(job));
	if (s->artifact) {
		/* the registered blob by its sha256 in this host's store, fetched from a holder when it lacks it */
		char hex[65], *blob = NULL;
		int bad = blobs_hex_of(hex, s->artifact) && s->conn &&
			  store_blob_ensure(&blob, s->conn, s->home, hex, 0) < 0;
		if (bad || (model = model_copy(home, blob ? blob : s->artifact)) == NULL) {
			free(blob);
			free(home);
			json_decref(env);
			return FERRY_ERROR;
		}
		free(blob);
	}
	if (t == NULL || (t->flags & EXF_SERVICES) == 0) {
		char *names = exec_type_names_with(EXF_SERVICES, " or ");
		ferry_error_set("replicas run on the %s executor, not %s", names,
				json_string_value(json_object_get(s->placement, "executor")));
		free(names);
		free(home);
		free(model);
		json_decref(env);
		return FERRY_EINVALID;
	}
	json_object_set_new(env, "FERRY_PORT", json_sprintf("%d", s->port));
	/* the address it listens on: this host's, where HAProxy and the probes of every host reach it */
	json_object_set_new(env, "FERRY_BIND_ADDR", json_string(my_addr));
	json_object_set_new(env, "FERRY_MODEL_NAME", json_string(s->model));
	json_object_set_new(env, "FERRY_MODEL_VERSION", json_string(s->version));
	if (model)
		json_object_set_new(env, "FERRY_MODEL_PATH", json_string(model));
	json_object_set_new(env, "FERRY_DEPLOYMENT", json_string(s->deployment));
	json_object_foreach((json_t *)s->env, k, v)
		json_object_set(env, k, v);
	snprintf(name, sizeof(name), "r%d", s->idx);
	/* a container replica shares the host's network: it listens on FERRY_BIND_ADDR:port like a process */
	spec = json_pack("{s:O, s:o, s:s}", "command", s->serve, "env", env, "network", "host");
	if (s->placement) {
		const char *keys[] = {"executor", "image", "resources", "warm"};
		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
			if (json_object_get(s->placement, keys[i]) && !json_is_null(json_object_get(s->placement, keys[i])))
				json_object_set(spec, keys[i], json_object_get(s->placement, keys[i]));
	}
	exec_spec_from_json(&c, spec, t);
	c.run_id = s->ord;
	c.attempt = s->generation;
	c.name = name;
	c.run_workdir = s->workdir;
	c.home = home;
	error = t->start(&job, &c, EXEC_SERVICE, &st);
	if (error == 0) {
		*handle = json_deep_copy(job.handle);
		json_object_set_new(*handle, "dir", json_string(job.dir));
		json_object_set_new(*handle, "executor", json_string(t->name));
		{
			/* where it runs: GET /hosts counts it there, and placement (fleet.c) */
			char host[256];
			ferry_host_name(host, sizeof(host));
			json_object_set_new(*handle, "host", json_string(host));
		}
	} else if (error == 1) {
		ferry_error_set("the replica ended at once (exit %d)", st.exit_code);
		error = FERRY_ERROR;
	}
	exec_status_dispose(&st);
	/* the engine's stray reaper takes its supervisor's end: the daemon does not wait for it */
	job.child = 0;
	exec_job_dispose(&job);
	json_decref(spec);
	free(home);
	free(model);
	return error;
}

int replica_alive(const json_t *handle)
{
	pid_t pid = (pid_t)json_integer_value(json_object_get(handle, "pid"));
	int64_t start = json_integer_value(json_object_get(handle, "start"));

	/* every type a replica may run on keeps a supervisor that lives as long as the job */
	return pid > 0 && exec_pid_alive(pid, start);
}

void replica_stop(const json_t *handle, int64_t grace_ms)
{
	struct exec_job job;
	int64_t until = clock_mono_ms() + grace_ms;

	memset(&job, 0, sizeof(job));
	job.type = type_of(handle);
	job.inst = exec_type_instance(job.type);
	job.handle = json_deep_copy(handle);
	job.dir = xstrdup(json_string_value(json_object_get(handle, "dir")) ? json_string_value(json_object_get(handle, "dir")) : "");
	job.pid = (pid_t)json_integer_value(json_object_get(handle, "pid"));
	job.pid_start = json_integer_value(json_object_get(handle, "start"));
	job.name = xstrdup("replica");
	if (replica_alive(handle)) {
		exec_signal(&job, SIGTERM);
		while (replica_alive(handle) && clock_mono_ms() < until)
			usleep(20 * 1000);
		if (replica_alive(handle))
			exec_signal(&job, SIGKILL);
		for (int i = 0; i < 250 && replica_alive(handle); i++)
			usleep(20 * 1000);
	}
	if (job.type->cleanup)
		job.type->cleanup(&job);
	exec_job_dispose(&job);
}

#define FENCE_FRESH_S 5

int replica_fence(const char *home, char *const *keep, size_t nkeep, char *const *slots, size_t nslots, int min_age_s,
		  int64_t grace_ms)
{
	char *pattern = xasprintf("%s/deployments/*/runs/*/*/*/status", home);
	glob_t g;
	int stopped = 0;
	time_t now = time(NULL);

	memset(&g, 0, sizeof(g));
	if (glob(pattern, 0, NULL, &g) != 0) {
		free(pattern);
		globfree(&g);
		return 0;
	}
	for (size_t i = 0; i < g.gl_pathc; i++) {
		char *dir = xstrdup(g.gl_pathv[i]), *text = NULL, *marker, *line, *next;
		const char *runs;
		struct stat sb;
		int64_t pid = 0, start = 0;
		size_t k, slot, rel = strlen(home) + strlen("/deployments/");
		*strrchr(dir, '/') = '\0';
		if ((runs = strstr(dir + rel, "/runs/")) == NULL) {
			free(dir);
			continue;
		}
		for (k = 0; k < nkeep && strcmp(keep[k], dir) != 0; k++)
			;
		/* its slot (deployment, version, index) given to another host: stale at once */
		for (slot = 0; slot < nslots; slot++) {
			size_t len = strlen(slots[slot]);
			if (strncmp(dir + rel, slots[slot], len) == 0 && dir[rel + len] == '/')
				break;
		}
		/*
		 * a deployment whose replicas ran in containers (the marker
		 * home/deployments/NAME/runs/.podman) is left: their handles name
		 * the containers, not a process here
		 */
		marker = xasprintf("%.*s/.podman", (int)(runs - dir) + 5, dir);
		/* never one started in the last seconds: its row may not be written yet */
		if (k < nkeep || stat(g.gl_pathv[i], &sb) < 0 || now - sb.st_mtime < FENCE_FRESH_S ||
		    (slot == nslots && now - sb.st_mtime < min_age_s) ||
		    access(marker, F_OK) == 0 || jobfile_read(&text, NULL, dir, "status", EXEC_STATUS_MAX) < 0) {
			free(marker), free(dir), free(text);
			continue;
		}
		for (line = text; line && *line; line = next) {
			pid_t p;
			int64_t t;
			if ((next = strchr(line, '\n')) != NULL)
				*next++ = '\0';
			if (exec_status_pid(line, &p, &t))
				pid = p, start = t;
		}
		if (pid > 0 && exec_pid_alive((pid_t)pid, start)) {
			json_t *h = json_pack("{s:s, s:I, s:I, s:s}", "executor", "local", "pid", (json_int_t)pid,
					      "start", (json_int_t)start, "dir", dir);
			flog_warn("replicas: %s runs here although no deployment's replica is it any more (%s): stopped",
				  dir, slot < nslots ? "its replica was replaced on another host while this one was away"
						     : "no deployment names it");
			replica_stop(h, grace_ms);
			json_decref(h);
			stopped++;
		}
		free(marker), free(dir), free(text);
	}
	globfree(&g);
	free(pattern);
	return stopped;
}

struct buf {
	char *p;
	size_t len;
};

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
	struct buf *b = arg;
	size_t add = size * n;

	if (b->len + add > (1u << 20))
		return 0; /* a model server's answer here is small */
	b->p = xrealloc(b->p, b->len + add + 1);
	memcpy(b->p + b->len, p, add);
	b->len += add;
	b->p[b->len] = '\0';
	return add;
}

int replica_url_ip(const char *url, char *ip, size_t n)
{
	const char *p = url ? strstr(url, "://") : NULL;
	size_t len;
	struct in_addr a;
	char buf[64];

	if (n > 0)
		ip[0] = '\0';
	if (p == NULL)
		return 0;
	p += 3;
	len = strcspn(p, ":/");
	if (len == 0 || len >= sizeof(buf))
		return 0;
	memcpy(buf, p, len);
	buf[len] = '\0';
	/* an IPv4 literal that names one machine (0.0.0.0, "every address", does not) */
	if (inet_pton(AF_INET, buf, &a) != 1 || a.s_addr == htonl(INADDR_ANY) || len >= n)
		return 0;
	memcpy(ip, buf, len + 1);
	return 1;
}

void replica_set_address(const char *public_url)
{
	char ip[64];

	snprintf(my_addr, sizeof(my_addr), "%s", replica_url_ip(public_url, ip, sizeof(ip)) ? ip : "127.0.0.1");
}

const char *replica_address(void)
{
	return my_addr;
}

int replica_http(const char *method, const char *addr, int port, const char *path, const char *body,
		 int64_t timeout_ms, long *status, char **resp)
{
	CURL *h = curl_easy_init();
	struct curl_slist *hdr = NULL;
	struct buf b = {0};
	char *url = xasprintf("http://%s:%d%s", addr ? addr : my_addr, port, path);
	CURLcode rc;

	*status = 0;
	if (resp)
		*resp = NULL;
	if (h == NULL) {
		free(url);
		ferry_error_set("curl_easy_init failed");
		return FERRY_ERROR;
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
	if (body) {
		hdr = curl_slist_append(hdr, "Content-Type: application/json");
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	}
	rc = curl_easy_perform(h);
	if (rc == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
	else
		ferry_error_set("%s %s: %s", method, url, curl_easy_strerror(rc));
	curl_easy_cleanup(h);
	curl_slist_free_all(hdr);
	free(url);
	if (resp)
		*resp = b.p;
	else
		free(b.p);
	return rc == CURLE_OK ? FERRY_OK : FERRY_ERROR;
}

int replica_wait_ready(const char *addr, int port, const char *model, const char *sample, const json_t *handle,
		       int64_t until_ms)
{
	char *path, *resp = NULL;
	long st = 0;
	int ready = 0;

	while (!ready) {
		if (handle && !replica_alive(handle)) {
			ferry_error_set("the replica on port %d exited before it was ready (its log: %s/log)", port,
					json_string_value(json_object_get(handle, "dir")));
			return FERRY_ERROR;
		}
		if (replica_http("GET", addr, port, "/v2/health/ready", NULL, 1000, &st, NULL) == 0 && st == 200) {
			ready = 1;
			break;
		}
		if (clock_mono_ms() >= until_ms) {
			ferry_error_set("the replica on port %d was not ready in time (GET /v2/health/ready: %s)", port,
					st ? "HTTP error" : "no answer");
			return FERRY_ERROR;
		}
		usleep(100 * 1000);
	}
	if (sample == NULL)
		return FERRY_OK;
	path = xasprintf("/v2/models/%s/infer", model);
	if (replica_http("POST", addr, port, path, sample, 10000, &st, &resp) < 0 || st != 200) {
		char *m = st ? xasprintf("HTTP %ld %.200s", st, resp ? resp : "")
			     : xstrdup(ferry_error_last());
		ferry_error_set("the warm-up request POST %s to the replica on port %d failed: %s", path, port, m);
		free(m), free(path), free(resp);
		return FERRY_ERROR;
	}
	free(path), free(resp);
	return FERRY_OK;
}

/*
 * FERRY_DEPLOY_PORTS: LO-HI, 1 when set and valid (0 when unset, -1 with
 * the message when not valid). The ports replicas and fronts listen on
 * come from this range, not from the kernel's ephemeral ones: a firewall
 * opens one range, and two daemons on one machine given disjoint ranges
 * never pick the same port between choosing it and binding it.
 */
static int ports_range(int *lo, int *hi)
{
	const char *v = getenv("FERRY_DEPLOY_PORTS"), *dash;
	int64_t a = 0, b = 0;
	char first[16];

	if (v == NULL || *v == '\0')
		return 0;
	dash = strchr(v, '-');
	if (dash && (size_t)(dash - v) < sizeof(first)) {
		snprintf(first, sizeof(first), "%.*s", (int)(dash - v), v);
		if (parse_int64(first, &a) < 0 || parse_int64(dash + 1, &b) < 0)
			a = b = 0;
	}
	*lo = (int)a, *hi = (int)b;
	if (a < 1024 || b > 65535 || b < a + 15) {
		ferry_error_set("FERRY_DEPLOY_PORTS \"%s\" must be LO-HI: the ports replicas and fronts listen on, "
				"from 1024 to 65535, at least 16 of them (say 20000-20999)", v);
		return -1;
	}
	return 1;
}

int replica_ports_check(void)
{
	int lo, hi;

	return ports_range(&lo, &hi) < 0 ? FERRY_EINVALID : FERRY_OK;
}

/*
 * A socket bound to port on every address (0: the kernel's choice), its
 * port in *got; -1 when it cannot be. Every address: the port is free for
 * a front on 127.0.0.1 and for a replica on this host's address alike
 * (a wildcard bind fails while any address holds the port). as_server:
 * SO_REUSEADDR, so only a listener holds a port, not TIME_WAIT; -1 keeps
 * bind's errno.
 */
static int bind_any(int port, int as_server, int *got)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		return -1;
	if (as_server) /* as a server binds (SO_REUSEADDR): its last connections' TIME_WAIT is no holder */
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	a.sin_addr.s_addr = htonl(INADDR_ANY);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	*got = ntohs(a.sin_port);
	return fd;
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/* port among taken (sorted) */
static int is_taken(const int *taken, size_t ntaken, int port)
{
	return ntaken > 0 && bsearch(&port, taken, ntaken, sizeof(*taken), cmp_int) != NULL;
}

int replica_free_ports(PGconn *conn, int *out, int n)
{
	static atomic_uint next; /* where in the range the next search starts: round the range, not from LO each time */
	/* the kernel's picks the database had given away, held open meanwhile so that it picks others */
	enum { SPARE = 64 };
	int fds[8], held[SPARE], nheld = 0, got = 0, lo = 0, hi = 0, ranged = ports_range(&lo, &hi);
	int *taken = NULL;
	size_t ntaken = 0;

	if (n > 8)
		n = 8;
	if (ranged < 0)
		return FERRY_ERROR;
	if (conn && store_deploy_ports_taken(conn, &taken, &ntaken) < 0) {
		ferry_error_set("the ports deployments hold could not be read: %s", ferry_error_last());
		return FERRY_EDB;
	}
	/* held open together, so n different ports */
	if (ranged) {
		unsigned span = (unsigned)(hi - lo + 1), start;
		if (atomic_load(&next) == 0)
			atomic_store(&next, (unsigned)getpid() * 2654435761u | 1u);
		start = atomic_fetch_add(&next, (unsigned)n) % span;
		for (unsigned k = 0; k < span && got < n; k++) {
			int port = lo + (int)((start + k) % span), fd;
			if (is_taken(taken, ntaken, port))
				continue;
			if ((fd = bind_any(port, 0, &out[got])) >= 0)
				fds[got++] = fd;
		}
	} else {
		for (int i = 0; i < n + SPARE && got < n; i++) {
			int fd = bind_any(0, 0, &out[got]);
			if (fd < 0)
				continue;
			if (!is_taken(taken, ntaken, out[got]))
				fds[got++] = fd;
			else if (nheld < SPARE)
				held[nheld++] = fd;
			else
				close(fd);
		}
	}
	for (int i = 0; i < got; i++)
		close(fds[i]);
	for (int i = 0; i < nheld; i++)
		close(held[i]);
	for (int i = got; i < n; i++)
		out[i] = 0;
	if (got < n) {
		size_t in_range = 0;
		for (size_t i = 0; i < ntaken; i++)
			in_range += taken[i] >= lo && taken[i] <= hi;
		if (ranged)
			ferry_error_set("no %d free ports on this machine in FERRY_DEPLOY_PORTS %d-%d (%zu of them held by "
					"deployments' fronts and replicas, started or not)",
					n, lo, hi, in_range);
		else
			ferry_error_set("no %d free ports on this machine", n);
		free(taken);
		return FERRY_ERROR;
	}
	free(taken);
	return FERRY_OK;
}

int replica_port_free(int port)
{
	int got = 0, fd = bind_any(port, 1, &got);

	if (fd >= 0) {
		close(fd);
		return 1;
	}
	return errno != EADDRINUSE; /* a listener holds it; another error (a privileged port): the start says it */
}

int replica_free_port(PGconn *conn)
{
	int port = 0;

	return replica_free_ports(conn, &port, 1) == FERRY_OK ? port : 0;
}

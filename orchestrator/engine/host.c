/*
 * host — see host.h. The task's round is one upsert on the loop (the row
 * is small and the statement bounded like every other on the loop); each
 * daemon also removes the rows of daemons dead a day, once an hour, and,
 * once after it starts, records the blobs its artifact store holds that
 * the database does not list for this host (a page a round).
 */
#include "engine/host.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/exec.h"
#include "monitor/gpu.h"
#include "store/store.h"
#include "store/task.h"
#include "lib/util.h"

#define NVIDIA_SMI_TIMEOUT_MS 5000
#define PRUNE_EVERY_MS 3600000
#define ANNOUNCE_PAGE 500 /* artifacts looked at a round, at start */

double host_parse_cpu_max(const char *text)
{
	char *end;
	double quota, period;

	if (text == NULL || strncmp(text, "max", 3) == 0)
		return -1;
	errno = 0;
	quota = strtod(text, &end);
	if (errno != 0 || end == text || *end != ' ' || quota <= 0)
		return -1;
	period = strtod(end + 1, &end);
	if (period <= 0 || (*end != '\0' && *end != '\n'))
		return -1;
	return quota / period;
}

int64_t host_parse_memory_max(const char *text)
{
	int64_t v;
	char buf[32];
	size_t n;

	if (text == NULL || strncmp(text, "max", 3) == 0)
		return -1;
	n = strcspn(text, "\n");
	if (n == 0 || n >= sizeof(buf))
		return -1;
	memcpy(buf, text, n);
	buf[n] = '\0';
	return parse_int64(buf, &v) == 0 && v > 0 ? v : -1;
}

int64_t host_parse_meminfo(const char *text)
{
	const char *p = text ? strstr(text, "MemTotal:") : NULL;
	char *end;
	long long kb;

	if (p == NULL)
		return -1;
	errno = 0;
	kb = strtoll(p + 9, &end, 10);
	if (errno != 0 || end == p + 9 || kb <= 0 || kb > INT64_MAX / 1024 || strncmp(end, " kB", 3) != 0)
		return -1;
	return (int64_t)kb * 1024;
}

static int name_ok(const char *s, size_t n)
{
	if (n == 0 || n > 63)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("_-./", s[i]))
			return 0;
	return 1;
}

/* s[0..n) with blanks trimmed: *start and *len */
static void trim(const char *s, size_t n, const char **start, size_t *len)
{
	while (n > 0 && isspace((unsigned char)*s))
		s++, n--;
	while (n > 0 && isspace((unsigned char)s[n - 1]))
		n--;
	*start = s;
	*len = n;
}

int host_parse_pairs(json_t **out, const char *text, int counts, const char *what)
{
	json_t *obj = json_object();
	const char *p = text ? text : "";

	*out = NULL;
	while (*p) {
		size_t n = strcspn(p, ","), kl, vl;
		const char *eq = memchr(p, '=', n), *k, *v;
		if (eq == NULL) {
			trim(p, n, &k, &kl);
			if (kl == 0 && (p[n] == '\0')) /* a trailing comma */
				break;
			ferry_error_set("%s: \"%.*s\" is not NAME=VALUE", what, (int)n, p);
			goto bad;
		}
		trim(p, (size_t)(eq - p), &k, &kl);
		trim(eq + 1, n - (size_t)(eq - p) - 1, &v, &vl);
		if (!name_ok(k, kl)) {
			ferry_error_set("%s: \"%.*s\" is not a name (letters, digits, _ - . /; at most 63)", what,
					(int)kl, k);
			goto bad;
		}
		if (json_object_getn(obj, k, kl) != NULL) {
			ferry_error_set("%s: %.*s is given twice", what, (int)kl, k);
			goto bad;
		}
		if (counts) {
			char *t = xstrndup(v, vl);
			int64_t c;
			int ok = parse_int64(t, &c) == 0 && c >= 0;
			free(t);
			if (!ok) {
				ferry_error_set("%s: %.*s=%.*s is not a whole number of 0 or more", what, (int)kl, k,
						(int)vl, v);
				goto bad;
			}
			json_object_setn_new(obj, k, kl, json_integer((json_int_t)c));
		} else {
			json_t *s = json_stringn(v, vl);
			if (s == NULL || vl > 253) {
				json_decref(s);
				ferry_error_set("%s: the value of %.*s is not UTF-8 text of at most 253 bytes", what,
						(int)kl, k);
				goto bad;
			}
			json_object_setn_new(obj, k, kl, s);
		}
		p += n;
		if (*p == ',')
			p++;
	}
	*out = obj;
	return FERRY_OK;
bad:
	json_decref(obj);
	return FERRY_EINVALID;
}

int host_parse_gpus(json_t **out, const char *text)
{
	json_t *arr = json_array();
	const char *p = text ? text : "", *t;
	size_t tl;
	int index = 0;

	*out = NULL;
	trim(p, strlen(p), &t, &tl);
	if (tl == 0 || (tl == 4 && strncmp(t, "none", 4) == 0)) {
		*out = arr;
		return FERRY_OK;
	}
	while (*p) {
		size_t n = strcspn(p, ",");
		trim(p, n, &t, &tl);
		if (tl > 0 && tl < 20 && strspn(t, "0123456789") == tl) {
			char *s = xstrndup(t, tl);
			int64_t i = 0;
			(void)parse_int64(s, &i);
			free(s);
			json_array_append_new(arr, json_pack("{s:I}", "index", (json_int_t)i));
		} else if (tl > 4 && tl < 64 && (strncmp(t, "GPU-", 4) == 0 || strncmp(t, "MIG-", 4) == 0) &&
			   strspn(t + 4, "0123456789abcdefABCDEF-/") == tl - 4) {
			json_array_append_new(arr, json_pack("{s:i,s:s%}", "index", index, "uuid", t, tl));
		} else {
			ferry_error_set("FERRY_GPUS: \"%.*s\" is neither a GPU index nor a GPU UUID (GPU-…, MIG-…); "
					"give a list such as 0,1 or none", (int)n, p);
			json_decref(arr);
			return FERRY_EINVALID;
		}
		for (size_t k = 0; k + 1 < json_array_size(arr); k++) {
			const json_t *a = json_array_get(arr, k), *b = json_array_get(arr, json_array_size(arr) - 1);
			const char *key = json_object_get(b, "uuid") ? "uuid" : "index";
			if (json_object_get(a, key) && json_equal(json_object_get(a, key), json_object_get(b, key))) {
				ferry_error_set("FERRY_GPUS: %.*s is listed twice", (int)tl, t);
				json_decref(arr);
				return FERRY_EINVALID;
			}
		}
		index++;
		p += n;
		if (*p == ',')
			p++;
	}
	*out = arr;
	return FERRY_OK;
}

/* The text of a small file, or NULL. */
static char *small_file(const char *path)
{
	char *buf = NULL;
	size_t len = 0;

	if (file_read(&buf, &len, path) < 0)
		return NULL;
	return buf;
}

/* The tightest cgroup v2 cpu.max and memory.max from this process's cgroup up to the root. */
static void cgroup_limits(double *cpus, int64_t *mem)
{
	char *self = small_file("/proc/self/cgroup"), *path;
	const char *p;

	*cpus = -1;
	*mem = -1;
	if (self == NULL || (p = strstr(self, "0::")) == NULL) {
		free(self);
		return;
	}
	path = xstrndup(p + 3, strcspn(p + 3, "\n"));
	for (;;) {
		char *f = xasprintf("/sys/fs/cgroup%s/cpu.max", path), *t = small_file(f);
		double c = host_parse_cpu_max(t);
		free(f), free(t);
		f = xasprintf("/sys/fs/cgroup%s/memory.max", path);
		t = small_file(f);
		int64_t m = host_parse_memory_max(t);
		free(f), free(t);
		if (c > 0 && (*cpus < 0 || c < *cpus))
			*cpus = c;
		if (m > 0 && (*mem < 0 || m < *mem))
			*mem = m;
		char *slash = strrchr(path, '/');
		if (slash == NULL || path[0] == '\0')
			break;
		*slash = '\0';
		if (path[0] == '\0')
			break; /* the root's files are not limits */
	}
	free(path);
	free(self);
}

/* The GPUs nvidia-smi lists ([{"index", "uuid", "memory_mb"}]), or an empty list. */
static json_t *smi_gpus(void)
{
	const char *smi = getenv("FERRY_NVIDIA_SMI");
	char *out = NULL, *found = NULL;
	json_t *arr = json_array();
	struct gpu_reading *g = NULL;
	int n = 0;

	if (smi == NULL || *smi == '\0') {
		const char *path = getenv("PATH");
		char *copy = xstrdup(path ? path : "/usr/bin:/bin"), *save = NULL;
		for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
			char *f = xasprintf("%s/nvidia-smi", d);
			if (access(f, X_OK) == 0)
				found = f;
			else
				free(f);
		}
		free(copy);
		if (found == NULL)
			return arr;
		smi = found;
	}
	{
		char *argv[] = {(char *)smi, "--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total",
				"--format=csv,noheader,nounits", NULL};
		if (exec_capture(argv, &out, NVIDIA_SMI_TIMEOUT_MS) < 0) {
			flog_warn("host: %s: %s; no GPUs counted (set FERRY_GPUS to declare them)", smi, ferry_error_last());
		} else if (gpu_parse_query(out ? out : "", &g, &n) < 0) {
			flog_warn("host: %s: %s; no GPUs counted", smi, ferry_error_last());
		} else {
			for (int i = 0; i < n; i++)
				json_array_append_new(arr, json_pack("{s:i,s:s,s:I}", "index", g[i].index, "uuid", g[i].uuid,
								     "memory_mb", (json_int_t)g[i].mem_total_mb));
		}
	}
	free(g);
	free(out);
	free(found);
	return arr;
}

static pthread_mutex_t detected_lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *detected_capacity, *detected_labels; /* the first answer, kept: detected once */

/*
 * The step's env with the GPUs given to it (given: ids, the host's
 * indices): CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES name exactly
 * those (by UUID where the host's list has one: CUDA's own order may
 * differ from nvidia-smi's; else by index, with CUDA_DEVICE_ORDER =
 * PCI_BUS_ID so that the index means the same GPU), FERRY_GPUS their
 * indices. A job given none on a host that has GPUs sees none (an empty
 * list): two jobs never share a GPU by accident. NULL when the host has
 * no GPU and the step got none (the spec's env serves); else the caller's.
 */
json_t *host_gpu_env(const json_t *host_gpus, const char *given, const json_t *spec_env)
{
	json_t *env, *g;
	char *vis = NULL;
	int by_index = 0;
	size_t i;

	if (given == NULL && json_array_size(host_gpus) == 0)
		return NULL;
	env = json_deep_copy(spec_env);
	if (!json_is_object(env)) {
		json_decref(env);
		env = json_object();
	}
	for (const char *p = given ? given : ""; *p;) {
		size_t n = strcspn(p, ",");
		const char *uuid = NULL;
		json_array_foreach(host_gpus, i, g) {
			char id[24];
			snprintf(id, sizeof(id), "%lld", (long long)json_integer_value(json_object_get(g, "index")));
			if (strlen(id) == n && strncmp(id, p, n) == 0)
				uuid = json_string_value(json_object_get(g, "uuid"));
		}
		if (uuid == NULL)
			by_index = 1;
		{
			char *next = uuid ? xasprintf("%s%s%s", vis ? vis : "", vis ? "," : "", uuid)
					  : xasprintf("%s%s%.*s", vis ? vis : "", vis ? "," : "", (int)n, p);
			free(vis);
			vis = next;
		}
		p += n;
		if (*p == ',')
			p++;
	}
	if (by_index) {
		/* indices: the host's own (nvidia-smi's, PCI bus order), not CUDA's fastest-first */
		free(vis);
		vis = xstrdup(given);
		json_object_set_new(env, "CUDA_DEVICE_ORDER", json_string("PCI_BUS_ID"));
	}
	json_object_set_new(env, "CUDA_VISIBLE_DEVICES", json_string(vis ? vis : ""));
	json_object_set_new(env, "NVIDIA_VISIBLE_DEVICES", json_string(vis ? vis : "void"));
	json_object_set_new(env, "FERRY_GPUS", json_string(given ? given : ""));
	free(vis);
	return env;
}

int host_detect_once(json_t **capacity, json_t **labels)
{
	int error = FERRY_OK;

	pthread_mutex_lock(&detected_lock);
	if (detected_capacity == NULL && (error = host_detect(&detected_capacity, &detected_labels)) < 0)
		detected_capacity = detected_labels = NULL;
	*capacity = error < 0 ? NULL : json_deep_copy(detected_capacity);
	*labels = error < 0 ? NULL : json_deep_copy(detected_labels);
	pthread_mutex_unlock(&detected_lock);
	return error;
}

/* FERRY_CPUS: a declared count (> 0, fractions allowed), or -1 when unset; FERRY_EINVALID when bad. */
static int declared_cpus(double *out)
{
	const char *v = getenv("FERRY_CPUS");
	char *end = NULL;

	*out = -1;
	if (v == NULL || *v == '\0')
		return FERRY_OK;
	errno = 0;
	*out = strtod(v, &end);
	if (errno != 0 || end == v || *end != '\0' || !(*out > 0) || *out > 100000) {
		ferry_error_set("FERRY_CPUS \"%.40s\": a number of CPUs > 0, such as 2 or 1.5", v);
		return FERRY_EINVALID;
	}
	return FERRY_OK;
}

json_t *host_admission(const json_t *capacity)
{
	json_t *ids = json_array(), *g;
	size_t i;
	json_int_t mem = json_integer_value(json_object_get(capacity, "memory_bytes"));
	const char *st = getenv("FERRY_QUEUE_STARVE_S"), *dc = getenv("FERRY_DEFAULT_CPUS");
	double starve = st && *st ? strtod(st, NULL) : 600;
	double default_cpus = dc && *dc ? strtod(dc, NULL) : 0;
	const char *sh = getenv("FERRY_GPU_SHARES");
	long shares = sh && *sh ? strtol(sh, NULL, 10) : 4;
	json_t *res = json_object_get(capacity, "resources");

	json_array_foreach(json_object_get(capacity, "gpus"), i, g) {
		char id[24];
		snprintf(id, sizeof(id), "%lld", (long long)json_integer_value(json_object_get(g, "index")));
		json_array_append_new(ids, json_string(id));
	}
	return json_pack("{s:f,s:I,s:o,s:f,s:f,s:o,s:i}", "cpus", json_number_value(json_object_get(capacity, "cpus")),
			 /* memory not known (no MemTotal): not a bound, rather than a bound of 0 that nothing fits */
			 "memory_mb", (json_int_t)(mem > 0 ? mem / 1048576 : INT64_C(1) << 40), "gpus", ids, "default_cpus",
			 default_cpus > 0 ? default_cpus : 0.0, "starve_s", starve > 0 ? starve : 600.0,
			 /* the named resources (FERRY_RESOURCES), and how many shared requests one GPU takes */
			 "resources", res ? json_incref(res) : json_object(), "gpu_shares", shares >= 1 && shares <= 1000 ? (int)shares : 4);
}

int host_detect(json_t **capacity, json_t **labels)
{
	cpu_set_t set;
	double cpus = -1, cg_cpus;
	int64_t mem, cg_mem;
	char *meminfo = small_file("/proc/meminfo");
	json_t *gpus = NULL, *res = NULL;
	const char *g = getenv("FERRY_GPUS");
	double declared;

	*capacity = *labels = NULL;
	if (declared_cpus(&declared) < 0) {
		free(meminfo);
		return FERRY_EINVALID;
	}
	if (host_parse_pairs(labels, getenv("FERRY_HOST_LABELS"), 0, "FERRY_HOST_LABELS") < 0 ||
	    host_parse_pairs(&res, getenv("FERRY_RESOURCES"), 1, "FERRY_RESOURCES") < 0 ||
	    (g != NULL && host_parse_gpus(&gpus, g) < 0)) {
		free(meminfo);
		json_decref(*labels), json_decref(res);
		*labels = NULL;
		return FERRY_EINVALID;
	}
	if (gpus == NULL)
		gpus = smi_gpus();
	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		cpus = CPU_COUNT(&set);
	else
		cpus = (double)sysconf(_SC_NPROCESSORS_ONLN);
	mem = host_parse_meminfo(meminfo);
	free(meminfo);
	cgroup_limits(&cg_cpus, &cg_mem);
	if (cg_cpus > 0 && cg_cpus < cpus)
		cpus = cg_cpus;
	if (cg_mem > 0 && (mem < 0 || cg_mem < mem))
		mem = cg_mem;
	if (declared > 0)
		cpus = declared; /* what the host is declared to offer (FERRY_CPUS), as FERRY_GPUS for GPUs */
	*capacity = json_pack("{s:f,s:o,s:o,s:o}", "cpus", cpus, "memory_bytes",
			      mem > 0 ? json_integer((json_int_t)mem) : json_null(), "gpus", gpus, "resources", res);
	return FERRY_OK;
}

/* ---- what the host's replicas hold ---------------------------------------- */

static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static double hold_cpus;
static int64_t hold_memory_mb;
static unsigned hold_version;

void host_replicas_hold_set(double cpus, int64_t memory_mb)
{
	pthread_mutex_lock(&hold_lock);
	if (hold_version == 0 || cpus != hold_cpus || memory_mb != hold_memory_mb) {
		hold_cpus = cpus, hold_memory_mb = memory_mb;
		hold_version++;
	}
	pthread_mutex_unlock(&hold_lock);
}

unsigned host_replicas_hold(double *cpus, int64_t *memory_mb)
{
	unsigned v;

	pthread_mutex_lock(&hold_lock);
	*cpus = hold_cpus, *memory_mb = hold_memory_mb;
	v = hold_version;
	pthread_mutex_unlock(&hold_lock);
	return v;
}

json_t *host_admission_less(const json_t *admission, double cpus, int64_t memory_mb)
{
	json_t *a = json_deep_copy(admission);
	double c = json_number_value(json_object_get(a, "cpus")) - cpus;
	json_int_t m = json_integer_value(json_object_get(a, "memory_mb")) - memory_mb;

	json_object_set_new(a, "cpus", json_real(c > 0 ? c : 0));
	json_object_set_new(a, "memory_mb", json_integer(m > 0 ? m : 0));
	return a;
}

const json_t *host_admission_now(const json_t *admission, json_t **net, unsigned *seen)
{
	double cpus;
	int64_t mem;
	unsigned v;

	if (admission == NULL)
		return NULL;
	if ((v = host_replicas_hold(&cpus, &mem)) != *seen) {
		json_decref(*net);
		*net = cpus > 0 || mem > 0 ? host_admission_less(admission, cpus, mem) : NULL;
		*seen = v;
	}
	return *net ? *net : admission;
}

/* ---- the task ------------------------------------------------------------- */

struct host_state {
	json_t *capacity, *labels;
	int64_t next_prune;
	int announced;   /* every blob of this host's store recorded as held here */
	char *cursor;    /* how far the announcing has come (sha256 order) */
};

static int host_open(void **state, struct task_ctx *c)
{
	struct host_state *s;

	if (c->dev)
		return FERRY_OK; /* a dev session is not a host of the fleet */
	s = xcalloc(1, sizeof(*s));
	if (host_detect_once(&s->capacity, &s->labels) < 0) {
		free(s);
		return FERRY_EINVALID;
	}
	{
		char *cap = json_dumps(s->capacity, JSON_COMPACT), *lab = json_dumps(s->labels, JSON_COMPACT);
		flog_info("host %s: %s, labels %s", c->host, cap, lab);
		free(cap), free(lab);
	}
	*state = s;
	return FERRY_OK;
}

static void host_close(void *state)
{
	struct host_state *s = state;

	if (s) {
		json_decref(s->capacity), json_decref(s->labels);
		free(s->cursor);
		free(s);
	}
}

static struct work *host_round(struct task_ctx *c, void *state)
{
	struct host_state *s = state;
	int64_t now = clock_mono_ms();

	if (s == NULL)
		return NULL;
	/* "admits": whether this daemon admits by the room above (runs.c refuses at submit what no such host fits) */
	json_object_set_new(s->capacity, "admits", json_boolean(c->admits));
	{
		double cpus = 0;
		int64_t mem = 0;
		if (store_host_beat(c->conn, c->owner, c->host, c->public_url, s->capacity, s->labels, c->lease_ms,
				    &cpus, &mem) < 0)
			flog_error("host: writing this daemon's row: %s", ferry_error_last());
		else
			host_replicas_hold_set(cpus, mem);
	}
	/*
	 * the blobs this host's store holds and the database does not say so
	 * (registered before blob_holders): recorded, ANNOUNCE_PAGE artifacts a
	 * round, so that other hosts fetch them from here
	 */
	if (!s->announced) {
		int held = 0, scanned = 0;
		if (store_blobs_announce(&held, &scanned, &s->cursor, c->conn, c->home, c->host, ANNOUNCE_PAGE) < 0) {
			flog_warn("host: recording the blobs this host holds: %s", ferry_error_last());
		} else {
			if (held > 0)
				flog_info("host: recorded %d blob%s of this host's store as held here", held,
					  held == 1 ? "" : "s");
			s->announced = scanned < ANNOUNCE_PAGE;
		}
	}
	/* any daemon may prune (idempotent, a handful of rows): no leader needed for it */
	if (now >= s->next_prune) {
		int removed = 0;
		s->next_prune = now + PRUNE_EVERY_MS;
		if (store_hosts_prune(c->conn, &removed) < 0)
			flog_warn("host: pruning dead daemons' rows: %s", ferry_error_last());
		else if (removed > 0)
			flog_info("host: removed %d daemon row%s dead a day", removed, removed == 1 ? "" : "s");
	}
	return NULL;
}

static int64_t every_third_lease(const struct task_ctx *c)
{
	return c->lease_ms / 3 > 0 ? c->lease_ms / 3 : 1;
}

/* every replica but dev sessions (open skips them too) */
const struct task host_task = {
	.name = "host",
	.flags = TASK_NO_DEV,
	.period = every_third_lease,
	.open = host_open,
	.close = host_close,
	.start_round = host_round,
};

/*
 * exec_podman — the `podman` row of the executor table (see exec.h): a
 * step's command runs in a container through the Podman CLI (daemonless),
 * from the step's image, or with `image: host` on the host's root
 * filesystem (`--rootfs /:O`: an overlay, so the job sees host packages
 * such as python3-sklearn but cannot change the host) in its own
 * namespaces and cgroup.
 *
 * Design. Every podman command takes 50–300 ms, and the engine loop is
 * single-threaded, so the engine never runs one and waits. Like the local
 * executor it forks a supervisor (the shim) per attempt, which starts a new
 * session, writes its pid and start time to DIR/status, and runs `podman
 * run` attached. With `--log-driver passthrough` the container's stdout
 * and stderr are the shim's descriptors on DIR/log: the job writes its log
 * straight into the attempt directory, without a copy, and the log stays
 * there after the container is gone and even if the shim dies (a step with
 * secrets writes into a pipe instead, which the shim copies to DIR/log with
 * the values masked: logmask.h; their values reach podman by name, through
 * its environment, never argv). When `podman
 * run` returns, the shim appends how the job ended to DIR/status ("oom MB"
 * when the memory limit killed it, then "exit N"), leaves a grandchild to
 * `podman rm` the container and remove its cgroup, and exits: the engine
 * sees SIGCHLD and reads DIR/status, as for local jobs.
 *
 * Crash safety. The container's name is ferry-HASH-RUN-STEP-ATTEMPT
 * (exec_podman_name: HASH of FERRY_HOME), known before anything runs, and
 * it carries the labels ferry.run, ferry.step, ferry.attempt, ferry.home
 * and ferry.dir. A name includes the attempt, so a container a crashed
 * attempt left behind never collides with the next attempt's, and `podman
 * run --replace` removes a stale one of the same name (Airflow's 409). The
 * handle is {"container": NAME, "pid": SHIM, "start": TICKS}. After a
 * daemon restart adopt() follows the shim while it lives (it outlives the
 * daemon), reads DIR/status when it ended, and when the shim is gone
 * without a status asks podman once whether the container exists (a bound
 * CLI call on that rare path): if so a new shim follows it (`podman wait`,
 * then the same ending), if not the job is FERRY_ENOTFOUND. tick() starts,
 * at most every 30 s, a background sweep that removes the containers of
 * this home that are not running and whose supervisor is gone (leftovers
 * of a crash between a container's end and its removal). A container that
 * still runs although its attempt was finished elsewhere (another replica
 * reaped it as lost) is the orphans hook's: the engine's sweep
 * (exec_orphans.c) lists running containers here and lets the database
 * judge them.
 *
 * Limits. resources: cpus → --cpus, memory → --memory and an equal
 * --memory-swap (no swap: the limit is real), gpus: N → CDI devices
 * nvidia.com/gpu=0…N-1. network: none unless the step says host. Each
 * container's cgroup is below a per-attempt parent, /ferry/NAME in every
 * hierarchy (--cgroup-parent, cgroupfs manager; conmon stays outside with
 * --cgroups no-conmon), which outlives the container: the shim reads it to
 * tell an out-of-memory kill, and sample() reads CPU and IO from it.
 * Podman's State.OOMKilled stays false on this hybrid cgroup layout, and
 * cgroup v1 counts oom_kill only in the container's own cgroup, which is
 * gone when podman run returns; so an exit 137 is an out-of-memory kill
 * when conmon saw the kernel's OOM event (it creates "oom" in its working
 * directory, which the shim makes the attempt directory), or the parent's
 * memory.events says oom_kill (cgroup v2), or its peak usage (v1
 * memory.max_usage_in_bytes) reached the limit, or podman says so. A job
 * the engine itself kills keeps the engine's reason.
 *
 * Stop: signal() forks `podman kill --signal TERM|KILL NAME` (retried
 * while podman run is still creating the container) and does not wait for
 * it (its end is reaped with the other strays); the container runs an init
 * (tini-static, or podman's catatonit) as pid 1 so SIGTERM reaches the
 * command. The stop, the sweep and the orphans hook are in
 * exec_podman_ops.c.
 *
 * The child side of fork() runs in a possibly multi-threaded process, so
 * the shim makes only async-signal-safe calls on data prepared before the
 * fork (struct shim_plan).
 */
#include "exec/exec_podman.h"
#include "exec/exec_shim.h"
#include "exec/logmask.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec/proc.h"
#include "lib/jobfile.h"
#include "lib/util.h"

#define CGROUP_ROOT "/sys/fs/cgroup"
#define CGROUP2_MAGIC 0x63677270
#define SWEEP_EVERY_MS 30000
#define EXISTS_TIMEOUT_MS 5000
#define WAIT_TRIES 5 /* a follower's podman wait, a second apart */
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* exec_podman.h */
char *exec_podman_path(void)
{
	const char *env = getenv("FERRY_PODMAN"), *path = getenv("PATH");
	char *dirs, *save = NULL, *found = NULL;

	if (env && *env)
		return access(env, X_OK) == 0 ? xstrdup(env) : NULL;
	dirs = xstrdup(path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
	for (char *d = strtok_r(dirs, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
		char *p = xasprintf("%s/podman", d);
		if (access(p, X_OK) == 0)
			found = p;
		else
			free(p);
	}
	free(dirs);
	return found;
}

void exec_podman_vec_free(char **v)
{
	for (size_t i = 0; v && v[i]; i++) {
		explicit_bzero(v[i], strlen(v[i])); /* podman's environment may hold a secret's value */
		free(v[i]);
	}
	free(v);
}

/* A growing NULL-terminated vector of owned strings. */
struct vec {
	char **v;
	size_t n, cap;
};

static void vec_add(struct vec *a, char *s)
{
	if (a->n + 2 > a->cap) {
		a->cap = a->cap ? a->cap * 2 : 32;
		a->v = xrealloc(a->v, a->cap * sizeof(char *));
	}
	a->v[a->n++] = s;
	a->v[a->n] = NULL;
}

static void vec_add2(struct vec *a, const char *opt, char *val)
{
	vec_add(a, xstrdup(opt));
	vec_add(a, val);
}

char *exec_podman_name(const char *home, int64_t run_id, const char *step, int attempt)
{
	char hash[65], *name;

	sha256_hex(hash, home, strlen(home));
	name = xasprintf("ferry-%.8s-%lld-%s-%d", hash, (long long)run_id, step, attempt);
	/* step names are [a-z0-9][a-z0-9_.-]*: already valid, but a name must never carry more */
	for (char *p = name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '_' || *p == '.' || *p == '-'))
			*p = '_';
	return name;
}

/* The home an attempt directory HOME/runs/RUN/STEP/ATTEMPT is under; the caller frees it. */
static char *home_of(const char *dir)
{
	size_t n = strlen(dir);

	for (int k = 0; k < 4; k++) {
		while (n > 0 && dir[n - 1] != '/')
			n--;
		if (n == 0)
			return NULL;
		n--;
	}
	return xstrndup(dir, n);
}

/* Adds -v P:P (read-only when ro) unless P is missing or already inside a mount of mounts[0..n). */
static void add_mount(struct vec *a, const char **mounts, int *n, const char *p, int ro)
{
	struct stat sb;

	if (p == NULL || p[0] != '/' || stat(p, &sb) < 0)
		return;
	for (int i = 0; i < *n; i++) {
		size_t l = strlen(mounts[i]);
		if (strncmp(p, mounts[i], l) == 0 && (p[l] == '\0' || p[l] == '/' || l == 1))
			return;
	}
	mounts[(*n)++] = p;
	vec_add2(a, "-v", xasprintf("%s:%s%s", p, p, ro ? ":ro" : ""));
}

/*
 * The variables podman itself reads (where its configuration, storage and
 * runtime directory are: rootless podman needs HOME and XDG_RUNTIME_DIR):
 * podman gets the daemon's, and a job's variable of one of these names is
 * passed inline (--env NAME=VALUE) rather than through podman's environment.
 */
static int podman_reads(const char *key)
{
	static const char *const names[] = {"PATH", "HOME", "TMPDIR", "XDG_RUNTIME_DIR",
					    "XDG_CONFIG_HOME", "XDG_DATA_HOME"};

	if (strncmp(key, "CONTAINERS_", 11) == 0)
		return 1;
	for (size_t i = 0; i < NELEM(names); i++)
		if (strcmp(key, names[i]) == 0)
			return 1;
	return 0;
}

extern char **environ;

/* Podman's own environment: the daemon's variables that podman reads. */
static char **podman_env(void)
{
	struct vec e = {0};
	const char *path = getenv("PATH");

	if (path == NULL || *path == '\0')
		vec_add(&e, xstrdup("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
	for (size_t i = 0; environ[i]; i++) {
		const char *eq = strchr(environ[i], '=');
		char *key = eq ? xstrndup(environ[i], (size_t)(eq - environ[i])) : NULL;
		if (key && podman_reads(key))
			vec_add(&e, xstrdup(environ[i]));
		free(key);
	}
	if (e.v == NULL)
		vec_add(&e, xstrdup("PATH=/usr/bin:/bin"));
	return e.v;
}

int exec_podman_argv(char ***argv, char ***envp, const struct exec_spec *c, const char *home,
		     const char *dir)
{
	struct exec_local_cmd x = {0};
	struct vec a = {0}, e = {0};
	json_t *res = c->resources, *env = c->env;
	const char *image = c->image;
	const char *net = c->network;
	const char *mounts[10];
	char *out = xasprintf("%s/out", dir), *name = NULL, *podman = NULL, *runs = NULL, *models = NULL;
	const char *model;
	char *ckpt = xasprintf("%s/runs/%lld/%s/checkpoint", home, (long long)c->run_id, c->name);
	int nm = 0, error;

	*argv = *envp = NULL;
	if ((error = exec_local_cmd_make(&x, c, dir, out, ckpt)) < 0)
		goto out;
	podman = exec_podman_path();
	name = exec_podman_name(home, c->run_id, c->name, c->attempt);
	vec_add(&a, podman ? podman : xstrdup("podman"));
	podman = NULL;
	/* cgroupfs: --cgroup-parent is a path (not a systemd slice), the same with or without systemd */
	vec_add2(&a, "--cgroup-manager", xstrdup("cgroupfs"));
	vec_add(&a, xstrdup("run"));
	vec_add(&a, xstrdup("--replace"));
	vec_add2(&a, "--pull", xstrdup("never"));
	vec_add2(&a, "--name", xstrdup(name));
	vec_add2(&a, "--label", xasprintf("ferry.run=%lld", (long long)c->run_id));
	vec_add2(&a, "--label", xasprintf("ferry.step=%s", c->name));
	vec_add2(&a, "--label", xasprintf("ferry.attempt=%d", c->attempt));
	vec_add2(&a, "--label", xasprintf("ferry.home=%s", home));
	vec_add2(&a, "--label", xasprintf("ferry.dir=%s", dir));
	vec_add2(&a, "--log-driver", xstrdup("passthrough"));
	vec_add2(&a, "--cgroups", xstrdup("no-conmon"));
	vec_add2(&a, "--cgroup-parent", xasprintf("/ferry/%s", name));
	if (access("/usr/bin/tini-static", X_OK) == 0) {
		vec_add(&a, xstrdup("--init"));
		vec_add2(&a, "--init-path", xstrdup("/usr/bin/tini-static"));
	} else if (access("/usr/libexec/podman/catatonit", X_OK) == 0) {
		vec_add(&a, xstrdup("--init"));
	}
	vec_add2(&a, "--network", xstrdup(net && strcmp(net, "host") == 0 ? "host" : "none"));
	if (json_is_number(json_object_get(res, "cpus")))
		vec_add2(&a, "--cpus", xasprintf("%g", json_number_value(json_object_get(res, "cpus"))));
	if (json_integer_value(json_object_get(res, "memory_mb")) > 0) {
		long long mb = (long long)json_integer_value(json_object_get(res, "memory_mb"));
		vec_add2(&a, "--memory", xasprintf("%lldm", mb));
		vec_add2(&a, "--memory-swap", xasprintf("%lldm", mb));
	}
	if (c->gpus != NULL) {
		/* exactly the GPUs the claim gave the attempt: their CDI devices by index */
		for (const char *p = c->gpus; *p;) {
			size_t n = strcspn(p, ",");
			vec_add2(&a, "--device", xasprintf("nvidia.com/gpu=%.*s", (int)n, p));
			p += n + (p[n] == ',');
		}
	} else {
		for (json_int_t g = 0; g < json_integer_value(json_object_get(res, "gpus")); g++)
			vec_add2(&a, "--device", xasprintf("nvidia.com/gpu=%lld", (long long)g));
	}
	/*
	 * The attempt directory (with out/) and the checkpoint writable; the
	 * run's workdir and the cwd read-only (a job writes its outputs, not
	 * the workflow's files); the data cache. As the job user (exec_user.c)
	 * when ferryd is root, so a file the host keeps from that user stays so.
	 */
	add_mount(&a, mounts, &nm, dir, 0);
	add_mount(&a, mounts, &nm, ckpt, 0);
	add_mount(&a, mounts, &nm, c->run_workdir, 1);
	add_mount(&a, mounts, &nm, x.cwd, 1);
	add_mount(&a, mounts, &nm, json_string_value(json_object_get(env, "FERRY_CACHE_DIR")), 0);
	/*
	 * Every run's directory read-only beneath them, as the docker executor
	 * does: an upstream output a command names ({{steps.X.outputs.Y}}) is
	 * a path there, maybe another run's (a cached step's). Podman mounts
	 * the shallower path first, so the attempt's directory and the
	 * checkpoint stay writable over it. image: host needs it too: its
	 * overlay of the host's / shows no file system mounted below it (a
	 * FERRY_HOME on a disk of its own).
	 */
	runs = xasprintf("%s/runs", home);
	add_mount(&a, mounts, &nm, runs, 1);
	/* a replica's model, read-only: deploy/replicas.c copies it into its deployment's models/ */
	if ((model = json_string_value(json_object_get(env, "FERRY_MODEL_PATH"))) != NULL && strrchr(model, '/')) {
		models = xstrndup(model, (size_t)(strrchr(model, '/') - model));
		add_mount(&a, mounts, &nm, models, 1);
	}
	if (exec_user_get())
		vec_add2(&a, "--user", xasprintf("%d:%d", (int)exec_user_get()->uid, (int)exec_user_get()->gid));
	vec_add2(&a, "-w", xstrdup(x.cwd));
	/*
	 * The job's variables: Ferry's FERRY_* and the step's env (not the
	 * daemon's environment). Passed by name from podman's environment, so
	 * no value shows in argv; those podman reads itself (podman_reads)
	 * inline, as podman's own stay the daemon's.
	 */
	e.v = podman_env();
	for (e.n = 0; e.v[e.n]; e.n++)
		;
	e.cap = e.n + 1;
	for (size_t i = 0; x.envp[i]; i++) {
		const char *eq = strchr(x.envp[i], '=');
		char *key;
		if (eq == NULL)
			continue;
		key = xstrndup(x.envp[i], (size_t)(eq - x.envp[i]));
		if (strncmp(key, "FERRY_", 6) == 0 || json_object_get(env, key) != NULL ||
		    json_object_get(c->secrets, key) != NULL) {
			if (podman_reads(key)) {
				vec_add2(&a, "--env", xstrdup(x.envp[i]));
			} else {
				vec_add2(&a, "--env", xstrdup(key));
				vec_add(&e, xstrdup(x.envp[i]));
			}
		}
		free(key);
	}
	if (image == NULL || strcmp(image, "host") == 0) {
		vec_add(&a, xstrdup("--rootfs"));
		vec_add(&a, xstrdup("/:O"));
	} else {
		vec_add(&a, xstrdup(image));
	}
	for (size_t i = 0; x.argv[i]; i++)
		vec_add(&a, xstrdup(x.argv[i]));
	*argv = a.v;
	*envp = e.v;
	error = FERRY_OK;
out:
	exec_local_cmd_dispose(&x);
	free(out), free(ckpt), free(name), free(runs), free(models);
	return error;
}

/*
 * What a shim does, prepared before the fork. run_argv NULL: follow a
 * container that already runs (adopt), through wait_argv.
 */
struct shim_plan {
	char **run_argv;     /* podman run …, or NULL */
	char **wait_argv;    /* podman wait NAME: prints the exit code */
	char **inspect_argv; /* podman inspect --format {{.State.OOMKilled}} NAME */
	char **rm_argv;      /* podman rm -f NAME */
	char **envp;         /* podman's environment */
	char *dir, *log, *status;
	char *conmon_oom;    /* DIR/oom: conmon creates "oom" in its working directory on an OOM event */
	char *mem_events;    /* cgroup v2 memory.events of the attempt's cgroup */
	char *mem_peak;      /* cgroup v1 memory.max_usage_in_bytes of it */
	long long limit_mb;  /* the memory limit; 0: none */
	char **rmdirs;       /* the attempt's cgroup in each hierarchy */
	struct logmask *mask; /* the step's secrets to mask in DIR/log (a pipe between), or NULL */
};

static void plan_dispose(struct shim_plan *p)
{
	exec_podman_vec_free(p->run_argv);
	exec_podman_vec_free(p->wait_argv);
	exec_podman_vec_free(p->inspect_argv);
	exec_podman_vec_free(p->rm_argv);
	exec_podman_vec_free(p->envp);
	exec_podman_vec_free(p->rmdirs);
	free(p->dir), free(p->log), free(p->status), free(p->mem_events), free(p->mem_peak);
	free(p->conmon_oom);
	logmask_free(p->mask);
	memset(p, 0, sizeof(*p));
}

/* Whether /sys/fs/cgroup is the unified (v2-only) hierarchy. */
static int cgroup_v2_only(void)
{
	struct statfs sf;

	return statfs(CGROUP_ROOT, &sf) == 0 && (unsigned long)sf.f_type == CGROUP2_MAGIC;
}

/* Fills the plan's podman commands and cgroup paths for container name. */
static void plan_common(struct shim_plan *p, const char *podman, const char *name, const char *dir)
{
	struct vec w = {0}, in = {0}, rm = {0}, dirs = {0};
	DIR *d;
	struct dirent *de;

	vec_add(&w, xstrdup(podman));
	vec_add(&w, xstrdup("wait"));
	vec_add(&w, xstrdup(name));
	vec_add(&in, xstrdup(podman));
	vec_add(&in, xstrdup("inspect"));
	vec_add2(&in, "--format", xstrdup("{{.State.OOMKilled}}"));
	vec_add(&in, xstrdup(name));
	vec_add(&rm, xstrdup(podman));
	vec_add2(&rm, "rm", xstrdup("-f"));
	vec_add(&rm, xstrdup(name));
	p->wait_argv = w.v, p->inspect_argv = in.v, p->rm_argv = rm.v;
	p->dir = xstrdup(dir);
	p->log = xasprintf("%s/log", dir);
	p->status = xasprintf("%s/status", dir);
	p->conmon_oom = xasprintf("%s/oom", dir);
	if (cgroup_v2_only()) {
		p->mem_events = xasprintf(CGROUP_ROOT "/ferry/%s/memory.events", name);
		vec_add(&dirs, xasprintf(CGROUP_ROOT "/ferry/%s", name));
	} else {
		p->mem_events = xasprintf(CGROUP_ROOT "/unified/ferry/%s/memory.events", name);
		p->mem_peak = xasprintf(CGROUP_ROOT "/memory/ferry/%s/memory.max_usage_in_bytes", name);
		if ((d = opendir(CGROUP_ROOT)) != NULL) {
			while ((de = readdir(d)) != NULL)
				if (de->d_name[0] != '.')
					vec_add(&dirs, xasprintf(CGROUP_ROOT "/%s/ferry/%s", de->d_name, name));
			closedir(d);
		}
	}
	p->rmdirs = dirs.v;
}

/* --- the shim: async-signal-safe from here to shim() --- */

/* The number at the start of s (after blanks); -1 when none. */
long long exec_podman_parse_ll(const char *s)
{
	long long v = 0;
	int any = 0;

	while (*s == ' ' || *s == '\t' || *s == '\n')
		s++;
	for (; *s >= '0' && *s <= '9'; s++, any = 1)
		v = v * 10 + (*s - '0');
	return any ? v : -1;
}

/* Reads up to len-1 bytes of path into buf (terminated); the count, or -1. */
ssize_t exec_podman_read_small(const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd;

	if (path == NULL || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return n;
}

/* Forks and runs argv with the given descriptors as 0, 1, 2; the pid or -1. */
static pid_t shim_spawn(char *const argv[], char *const envp[], int in, int out, int err)
{
	pid_t pid = fork();

	if (pid == 0) {
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		if (in >= 0)
			dup2(in, 0);
		if (out >= 0)
			dup2(out, 1);
		if (err >= 0)
			dup2(err, 2);
		close_range(3, ~0U, 0);
		execve(argv[0], argv, envp);
		_exit(127);
	}
	return pid;
}

static int shim_wait(pid_t pid)
{
	int st = 0;

	if (pid < 0)
		return -1;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return st;
}

/* Runs argv and keeps up to len-1 bytes of its stdout in buf; its wait status, or -1. */
static int shim_capture(char *const argv[], char *const envp[], int nullfd, char *buf, size_t len)
{
	int fds[2], st;
	size_t got = 0;
	ssize_t n;
	pid_t pid;

	buf[0] = '\0';
	if (pipe2(fds, O_CLOEXEC) < 0)
		return -1;
	pid = shim_spawn(argv, envp, nullfd, fds[1], nullfd);
	close(fds[1]);
	while ((n = read(fds[0], buf + got, len - 1 - got)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		got += (size_t)n;
		if (got == len - 1) {
			char sink[256];
			while (read(fds[0], sink, sizeof(sink)) > 0) /* drain: never block the writer */
				;
			break;
		}
	}
	buf[got] = '\0';
	close(fds[0]);
	st = shim_wait(pid);
	return st;
}

/* Whether the job that exited with code 137 was killed for memory (see the module comment). */
static int shim_oom(const struct shim_plan *p, int nullfd)
{
	char buf[4096];
	const char *k;
	struct stat sb;

	if (stat(p->conmon_oom, &sb) == 0)
		return 1;
	if (exec_podman_read_small(p->mem_events, buf, sizeof(buf)) > 0 && (k = strstr(buf, "oom_kill ")) != NULL &&
	    exec_podman_parse_ll(k + 9) > 0)
		return 1;
	if (exec_podman_read_small(p->mem_peak, buf, sizeof(buf)) > 0) {
		long long peak = exec_podman_parse_ll(buf), limit = p->limit_mb * 1048576LL;
		if (peak >= limit - 1048576LL)
			return 1;
	}
	if (shim_capture(p->inspect_argv, p->envp, nullfd, buf, 64) == 0 && strncmp(buf, "true", 4) == 0)
		return 1;
	return 0;
}

/*
 * Whether the status file at path has an end line ("exit N" or "gone"):
 * the sweep's, written before it removed an exited container. In the
 * forked shim, so no allocation: the file is small (pid, memory, end).
 */
static int shim_status_ended(const char *path)
{
	char buf[4096];
	struct stat sb;
	ssize_t n;
	/* the job may write in its directory: no link followed, no FIFO waited on, a regular file only */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0)
		return 0;
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return 0;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (strncmp(l, "exit ", 5) == 0 || strncmp(l, "gone\n", 5) == 0)
			return 1;
	return 0;
}

/* Removes the container, then its cgroup (retried while conmon or runc still leaves). */
static void shim_remove(const struct shim_plan *p, int nullfd)
{
	struct timespec ts = {0, 50 * 1000 * 1000};

	(void)shim_wait(shim_spawn(p->rm_argv, p->envp, nullfd, nullfd, nullfd));
	for (size_t i = 0; p->rmdirs && p->rmdirs[i]; i++)
		for (int k = 0; k < 40 && rmdir(p->rmdirs[i]) < 0 && errno == EBUSY; k++)
			nanosleep(&ts, NULL);
}

/* The supervisor: runs in the forked child, never returns. */
static void shim(const struct shim_plan *p)
{
	sigset_t none;
	int logfd, nullfd, fd, st, code = -1, recorded = 0;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL);
	setsid();
	close_range(3, ~0U, 0); /* none of the daemon's descriptors leak into jobs */
	/* podman and conmon run here: what conmon leaves in its working directory (oom) is the attempt's */
	if (chdir(p->dir) < 0)
		(void)chdir("/");
	logfd = open(p->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	nullfd = open("/dev/null", O_RDWR | O_CLOEXEC);
	/*
	 * the handle before the container can run (exec.h); how it ended after.
	 * A follower appends: an end the sweep wrote there before it came
	 * (the container removed) stays, and readers take the last pid line.
	 */
	fd = open(p->status, O_WRONLY | O_CREAT | (p->run_argv ? O_TRUNC : 0) | O_APPEND | O_CLOEXEC, 0644);
	if (fd >= 0) {
		exec_shim_write_pid(fd);
		if (p->limit_mb > 0) /* for a follower after a restart: what "out of memory" means */
			exec_shim_put_line(fd, "memory", p->limit_mb, 1);
	}
	/* the shim stays to record the result, whatever its session is sent */
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	if (p->run_argv && p->mask && logfd >= 0) {
		/* secrets: the container writes into a pipe, the shim masks them on the way to DIR/log */
		int pfd[2];
		if (pipe2(pfd, O_CLOEXEC) == 0) {
			pid_t pid = shim_spawn(p->run_argv, p->envp, nullfd, pfd[1], pfd[1]);
			close(pfd[1]);
			st = pid < 0 ? (close(pfd[0]), -1) : logmask_pump(p->mask, pfd[0], logfd, pid);
		} else {
			st = -1;
		}
		if (st >= 0 && WIFEXITED(st))
			code = WEXITSTATUS(st);
	} else if (p->run_argv) {
		st = shim_wait(shim_spawn(p->run_argv, p->envp, nullfd, logfd, logfd));
		if (st >= 0 && WIFEXITED(st))
			code = WEXITSTATUS(st);
	}
	/*
	 * following an adopted container, or podman run itself was killed: ask
	 * podman, again when it fails (its storage busy on a loaded machine),
	 * unless the sweep recorded the end meanwhile and removed the container.
	 * "gone" calls the attempt lost, and its work runs again.
	 */
	for (int i = 0; code < 0 && !recorded && i < WAIT_TRIES; i++) {
		char out[64];
		struct timespec pause = {1, 0};
		if (i > 0)
			nanosleep(&pause, NULL);
		st = shim_capture(p->wait_argv, p->envp, nullfd, out, sizeof(out));
		if (st == 0)
			code = (int)exec_podman_parse_ll(out);
		else
			recorded = shim_status_ended(p->status);
	}
	if (fd >= 0 && !recorded) {
		if (code < 0)
			exec_shim_put_line(fd, "gone", 0, 0);
		else if (code == 137 && p->limit_mb > 0 && shim_oom(p, nullfd))
			exec_shim_put_line(fd, "oom", p->limit_mb, 1);
		if (code >= 0)
			exec_shim_put_line(fd, "exit", code, 1);
		close(fd);
	}
	/* the removal is not the job's time: a grandchild does it, reaped by the daemon or init */
	if (fork() == 0) {
		shim_remove(p, nullfd);
		_exit(0);
	}
	_exit(0);
}

/* --- the engine's side --- */

/*
 * The home whose containers tick() sweeps (the daemon's). It sweeps once
 * after the daemon starts (what a crash left while no daemon ran) when
 * podman jobs ever ran under this home (the marker $home/runs/.podman,
 * made at the first start), then every SWEEP_EVERY_MS only once this daemon
 * has run or adopted a podman job: a daemon that never runs containers
 * never runs podman (its start costs a second of CPU).
 */
struct podman {
	char *sweep_home;
	int64_t next_sweep_ms;
	int swept, used;
};

static void *podman_init(const char *home)
{
	(void)home; /* known from the first start, adoption or tick */
	return xcalloc(1, sizeof(struct podman));
}

static void podman_fini(void *inst)
{
	struct podman *pm = inst;

	if (pm)
		free(pm->sweep_home);
	free(pm);
}

/* Marks home as one podman jobs ran under (once per daemon). */
static void mark_used(struct podman *pm, const char *home)
{
	char *marker;
	int fd;

	if (pm->used)
		return;
	pm->used = 1;
	marker = xasprintf("%s/runs/.podman", home);
	if ((fd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)) >= 0)
		close(fd);
	free(marker);
}

static void remember_home(struct podman *pm, const char *home)
{
	if (home == NULL || (pm->sweep_home && strcmp(pm->sweep_home, home) == 0))
		return;
	free(pm->sweep_home);
	pm->sweep_home = xstrdup(home);
	if (pm->next_sweep_ms == 0)
		pm->next_sweep_ms = clock_mono_ms(); /* the first sweep at the first tick */
}

/* Forks a shim for plan p; fills job's pid, start, child and handle. */
static int spawn_shim(struct exec_job *job, const struct shim_plan *p, const char *name)
{
	pid_t pid = fork();

	if (pid < 0) {
		ferry_error_set("fork: %s", strerror(errno));
		return FERRY_ERROR;
	}
	if (pid == 0)
		shim(p);
	setpgid(pid, pid); /* also done by the shim's setsid */
	job->pid = pid;
	job->pid_start = exec_pid_start(pid);
	job->child = 1;
	json_decref(job->handle);
	job->handle = json_pack("{s:s, s:i, s:I}", "container", name, "pid", (int)pid, "start",
				(json_int_t)job->pid_start);
	return FERRY_OK;
}

static int podman_start(struct exec_job *job, const struct exec_spec *c, enum exec_mode mode, struct exec_status *st)
{
	struct shim_plan p = {0};
	char *dir = NULL, *out = NULL, *ckpt = NULL, *name = NULL;
	int error = FERRY_ERROR;

	(void)mode, (void)st; /* a service is a container that keeps running: nothing differs */
	exec_job_begin(job, &exec_podman, c);
	if (exec_attempt_dirs(c, &dir, &out, &ckpt) < 0)
		goto out;
	if ((error = exec_podman_argv(&p.run_argv, &p.envp, c, c->home, dir)) < 0)
		goto out;
	p.mask = logmask_new(c->secrets);
	if (p.run_argv[0][0] != '/') {
		ferry_error_set("podman is not installed here (make deps; then deploy/podman.sh)");
		error = FERRY_EINVALID;
		goto out;
	}
	name = exec_podman_name(c->home, c->run_id, c->name, c->attempt);
	plan_common(&p, p.run_argv[0], name, dir);
	p.limit_mb = (long long)json_integer_value(
		json_object_get(c->resources, "memory_mb"));
	if ((error = spawn_shim(job, &p, name)) < 0)
		goto out;
	job->dir = dir;
	dir = NULL;
	if (c->timeout_ms > 0)
		job->deadline_ms = clock_mono_ms() + c->timeout_ms;
	remember_home(job->inst, c->home);
	mark_used(job->inst, c->home);
out:
	plan_dispose(&p);
	free(dir), free(out), free(ckpt), free(name);
	return error;
}

/*
 * The lines of DIR/status: "pid PID START" and "memory MB" (the limit),
 * then "gone", or "oom MB" and "exit N". Fills what it finds; returns
 * whether the job's end was there.
 */
static int read_status(const char *dir, pid_t *pid, int64_t *start, int64_t *limit_mb,
		       struct exec_status *st)
{
	char *buf = NULL, *line, *next;
	int ended = 0;
	int64_t v, t;

	if (jobfile_read(&buf, NULL, dir, "status", EXEC_STATUS_MAX) == FERRY_OK) {
		for (line = buf; line && *line; line = next) {
			pid_t p;
			if ((next = strchr(line, '\n')) == NULL)
				break; /* a line still being written */
			*next++ = '\0';
			if (exec_status_pid(line, &p, &t)) {
				if (pid)
					*pid = p, *start = t;
			} else if (strncmp(line, "memory ", 7) == 0 && parse_int64(line + 7, &v) == 0) {
				if (limit_mb)
					*limit_mb = v;
			} else if (strncmp(line, "exit ", 5) == 0 && parse_int64(line + 5, &v) == 0) {
				st->exit_code = (int)v;
				ended = 1;
			} else if (strncmp(line, "oom ", 4) == 0 && parse_int64(line + 4, &v) == 0) {
				free(st->reason);
				st->reason = xasprintf("out of memory (limit %lld MiB)", (long long)v);
			} else if (strcmp(line, "gone") == 0) {
				free(st->reason);
				st->reason = xstrdup("its container is gone and left no exit code (removed "
						     "outside Ferry?)");
				ended = 1;
			}
		}
	}
	free(buf);
	return ended;
}

/* The job ended: how, from DIR/status. */
static void podman_ended(const struct exec_job *job, struct exec_status *st)
{
	memset(st, 0, sizeof(*st));
	st->exit_code = -1;
	if (!read_status(job->dir, NULL, NULL, NULL, st)) {
		free(st->reason);
		st->reason = xstrdup("the container's supervisor was killed before it could record "
				     "the exit status");
	}
}

static int podman_poll(struct exec_job *job, struct exec_status *st)
{
	if (job->child) {
		int wst;
		pid_t r = waitpid(job->pid, &wst, WNOHANG);
		if (r == 0 || (r < 0 && errno != ECHILD))
			return 0;
		job->child = 0; /* reaped now, or by the strays' reaper */
	} else if (exec_pid_alive(job->pid, job->pid_start)) {
		return 0;
	}
	podman_ended(job, st);
	return 1;
}

static const char *handle_name(const struct exec_job *job)
{
	return json_string_value(json_object_get(job->handle, "container"));
}


/*
 * Whether container name exists: 1, 0, or FERRY_ERROR when podman did not
 * answer within EXISTS_TIMEOUT_MS. Blocks the caller: it is used only when
 * adopting a job whose supervisor died without a status (rare), so a bound
 * is enough.
 */
static int container_exists(const char *podman, const char *name)
{
	int64_t until = clock_mono_ms() + EXISTS_TIMEOUT_MS;
	struct timespec ts = {0, 10 * 1000 * 1000};
	char *argv[] = {(char *)podman, "container", "exists", (char *)name, NULL};
	pid_t pid, r;
	int st = 0;

	pid = fork();
	if (pid < 0) {
		ferry_error_set("fork: %s", strerror(errno));
		return FERRY_ERROR;
	}
	if (pid == 0)
		exec_podman_child_exec(argv, 0);
	while ((r = waitpid(pid, &st, WNOHANG)) == 0 && clock_mono_ms() < until)
		nanosleep(&ts, NULL);
	if (r == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		ferry_error_set("podman container exists %s did not answer within %d ms", name,
				EXISTS_TIMEOUT_MS);
		return FERRY_ERROR;
	}
	if (r < 0 || !WIFEXITED(st) || WEXITSTATUS(st) > 1) {
		ferry_error_set("podman container exists %s failed", name);
		return FERRY_ERROR;
	}
	return WEXITSTATUS(st) == 0;
}

static int podman_adopt(struct exec_job *job, struct exec_status *st)
{
	struct shim_plan p = {0};
	char *home = job->dir ? home_of(job->dir) : NULL, *name = NULL, *podman = NULL;
	int64_t start = 0, limit_mb = 0;
	pid_t pid = 0;
	int rc, error;

	memset(st, 0, sizeof(*st));
	st->exit_code = -1;
	job->child = 0;
	if (home == NULL) {
		ferry_error_set("the attempt has no directory");
		return FERRY_ENOTFOUND;
	}
	if (job->inst == NULL) /* a job the caller made itself (a test, a replica) */
		job->inst = exec_type_instance(&exec_podman);
	remember_home(job->inst, home);
	mark_used(job->inst, home);
	name = handle_name(job) ? xstrdup(handle_name(job))
				: exec_podman_name(home, job->run_id, job->name, job->attempt);
	if (json_integer_value(json_object_get(job->handle, "pid")) > 0) {
		pid = (pid_t)json_integer_value(json_object_get(job->handle, "pid"));
		start = json_integer_value(json_object_get(job->handle, "start"));
	}
	/* the status's pid is the newest supervisor's (a follower's after an earlier adoption) */
	read_status(job->dir, &pid, &start, &limit_mb, st);
	exec_status_dispose(st);
	json_decref(job->handle);
	job->handle = json_pack("{s:s, s:i, s:I}", "container", name, "pid", (int)pid, "start",
				(json_int_t)start);
	job->pid = pid, job->pid_start = start;
	/* alive first, then the status: the shim writes the status before it exits */
	if (pid > 0 && exec_pid_alive(pid, start)) {
		error = 1;
		goto out;
	}
	if (read_status(job->dir, NULL, NULL, NULL, st)) {
		error = 0;
		goto out;
	}
	exec_status_dispose(st);
	/* no supervisor and no status: the container may be all that is left */
	if ((podman = exec_podman_path()) == NULL) {
		ferry_error_set("podman is not installed here");
		error = FERRY_ENOTFOUND;
		goto out;
	}
	if ((rc = container_exists(podman, name)) <= 0) {
		/*
		 * podman did not answer (a loaded machine): the container may run
		 * still, so not lost — a retry would run its work twice
		 */
		if (rc == 0)
			ferry_error_set("neither its supervisor nor its container %s is left", name);
		error = rc == 0 ? FERRY_ENOTFOUND : FERRY_EXEC_EAGAIN;
		goto out;
	}
	/* a new supervisor follows it: podman wait, then the same ending as a shim's */
	plan_common(&p, podman, name, job->dir);
	p.envp = podman_env();
	p.limit_mb = (long long)limit_mb;
	if ((error = spawn_shim(job, &p, name)) == 0)
		error = 1;
out:
	plan_dispose(&p);
	free(home), free(name), free(podman);
	return error;
}

static int podman_sample(const struct exec_job *job, struct exec_sample *out)
{
	const char *name = handle_name(job);
	char *rel;
	int error;

	memset(out, 0, sizeof(*out));
	if (name == NULL) {
		ferry_error_set("the job has no container");
		return FERRY_ENOTFOUND;
	}
	rel = xasprintf("ferry/%s", name);
	error = exec_podman_cgroup_sample(CGROUP_ROOT, rel, out, NULL);
	free(rel);
	return error;
}

/* The container's processes: its cgroup's (the pids hierarchy under v1, else the unified one). */
static int podman_pids(const struct exec_job *job, int **out, int *n)
{
	static const char *const where[] = {"pids/", "unified/", ""};
	const char *name = handle_name(job);
	int error = FERRY_ENOTFOUND;

	*out = NULL;
	*n = 0;
	for (size_t i = 0; name && i < NELEM(where) && error < 0; i++) {
		char *dir = xasprintf(CGROUP_ROOT "/%sferry/%s", where[i], name);
		error = exec_cgroup_pids(dir, out, n);
		free(dir);
	}
	if (error == 0 && *n == 0)
		error = FERRY_ENOTFOUND;
	if (error < 0)
		ferry_error_set("no process of container %s is left", name ? name : "?");
	return error;
}

static char *podman_log_path(const struct exec_job *job)
{
	return job->dir ? xasprintf("%s/log", job->dir) : NULL;
}

static void podman_tick(void *inst, const char *home)
{
	struct podman *pm = inst;
	char *podman, *marker;
	int64_t now = clock_mono_ms();
	int ever;

	remember_home(pm, home);
	if (pm->sweep_home == NULL || now < pm->next_sweep_ms || (pm->swept && !pm->used))
		return;
	if (!pm->swept && !pm->used) {
		marker = xasprintf("%s/runs/.podman", pm->sweep_home);
		ever = access(marker, F_OK) == 0;
		free(marker);
		pm->swept = 1;
		if (!ever)
			return; /* no podman job ever ran here: nothing to sweep */
	}
	pm->swept = 1;
	pm->next_sweep_ms = now + SWEEP_EVERY_MS;
	if ((podman = exec_podman_path()) != NULL) {
		exec_podman_sweep(podman, pm->sweep_home);
		free(podman);
	}
}

const struct exec_type exec_podman = {
	.name = "podman",
	.flags = EXF_IMAGES | EXF_SERVICES | EXF_SECRETS,
	.init = podman_init,
	.fini = podman_fini,
	.start = podman_start,
	.poll = podman_poll,
	.signal = exec_podman_signal,
	.adopt = podman_adopt,
	.sample = podman_sample,
	.pids = podman_pids,
	.orphans = exec_podman_orphans,
	.log_path = podman_log_path,
	.tick = podman_tick,
};

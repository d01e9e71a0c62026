/*
 * exec_docker — the `docker` row of the executor table (see exec.h): a
 * step's command runs in a container through the Docker Engine API v1.41
 * on a unix socket (FERRY_DOCKER_HOST, default unix:///var/run/docker.sock),
 * with libcurl. Podman's `podman system service` serves the same API, so
 * the same code drives either engine.
 *
 * Design: one small supervisor process (the shim) per attempt, as in
 * exec_local. The engine loop never waits on the Engine API for a job's
 * life: start() forks the shim and returns; the shim creates the container
 * (a stale one of the same name, left by a crashed earlier try, is removed
 * when the create answers 409, and the create repeated), starts it, follows its log stream
 * (decoding the 8-byte multiplexed frames) into DIR/log, waits for the end,
 * reads State.ExitCode and State.OOMKilled (or, where the engine does not
 * set it, the kernel's record of an OOM kill in the container's cgroup,
 * from /dev/kmsg), appends them to DIR/status,
 * removes the container and exits. The engine learns the end by SIGCHLD and
 * reads DIR/status. The log stays after the container is gone.
 *
 * DIR/status, one line each: "pid PID START" and "container NAME" (before
 * the container exists, so a daemon killed before recording the handle
 * still finds it), then at the end "reason TEXT" (optional: out of memory,
 * the engine refused), "exit N", and "removed" once the container is gone.
 *
 * Signals: the engine's SIGTERM/SIGKILL go to the shim as SIGTERM/SIGUSR1
 * (the shim must outlive the container to record its end); the shim
 * forwards them as POST /containers/NAME/kill?signal=TERM|KILL.
 *
 * Crash safety: the shim runs in its own session and outlives a killed
 * daemon. adopt(): the supervisor the status file names last alive → ours
 * again (polled); gone with an end in DIR/status → finished; gone without
 * one → the container is inspected (short timeout): running → a new shim
 * follows it again (it adds its "pid" line; the stream is read from its
 * start, the bytes DIR/log holds skipped; poll() does the same when a
 * shim is killed under a running daemon), exited → finalised
 * from its exit code, absent → FERRY_ENOTFOUND. Containers are named
 * ferry-HOMEHASH-RUN-STEP-ATTEMPT (HOMEHASH: 8 hex digits of FERRY_HOME's
 * path, so two daemons on one host never collide) and labelled ferry.run,
 * ferry.step, ferry.attempt, ferry.home. The tick hook removes stopped
 * containers of this home whose end DIR/status already holds (a removal
 * that failed while the engine was unreachable).
 *
 * `image: host`: dockerd cannot run the host's root filesystem, so it is
 * refused at start with a message naming what to do instead.
 *
 * The shim is a fork of the (multi-threaded) daemon that does not exec: it
 * uses malloc, jansson and libcurl, which glibc's fork keeps usable in the
 * child (malloc's locks are reset), and takes no lock another daemon thread
 * could hold (no logging, no libpq). The engine loop's own calls to the API
 * (adoption, a rare fallback in poll and cleanup, sample) are bounded by
 * short timeouts.
 */
#include "exec/exec_docker.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/exec_podman.h"
#include "exec/proc.h"
#include "lib/jobfile.h"
#include "lib/util.h"

/* ---- what a container is made of ------------------------------------------- */

/* Container name: ferry-HOMEHASH-RUN-STEP-ATTEMPT, step name cut to [A-Za-z0-9_.-]. */
static char *dk_name(const char *home, int64_t run_id, const char *step, int attempt)
{
	char hash[65], *s = xstrdup(step), *name;

	sha256_hex(hash, home, strlen(home));
	hash[8] = '\0';
	for (char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      *p == '_' || *p == '.' || *p == '-'))
			*p = '_';
	name = xasprintf("ferry-%s-%lld-%s-%d", hash, (long long)run_id, s, attempt);
	free(s);
	return name;
}

/* Whether envp entry e is a step env key or one of Ferry's FERRY_* job variables. */
static int dk_env_wanted(const char *e, const json_t *env)
{
	const char *eq = strchr(e, '=');
	char *key;
	int wanted;

	if (eq == NULL)
		return 0;
	if (strncmp(e, "FERRY_", 6) == 0)
		return 1;
	key = xstrndup(e, (size_t)(eq - e));
	wanted = json_object_get(env, key) != NULL;
	free(key);
	return wanted;
}

/* Adds bind "p:p" (":ro" when ro) to binds unless p is not absolute or already there. */
static void dk_bind(json_t *binds, const char *p, int ro)
{
	size_t i;
	json_t *v;
	char *b;

	if (p == NULL || p[0] != '/')
		return;
	b = xasprintf("%s:%s%s", p, p, ro ? ":ro" : "");
	json_array_foreach(binds, i, v)
		if (strcmp(json_string_value(v), b) == 0) {
			free(b);
			return;
		}
	json_array_append_new(binds, json_string(b));
	free(b);
}

/*
 * The body of POST /containers/create for claim c (x: its argv, env and
 * cwd as exec_local_cmd_make made them; dir and ckpt absolute). Returns a
 * new object.
 */
static json_t *dk_create_body(const struct exec_spec *c, const struct exec_local_cmd *x,
			      const char *home, const char *dir, const char *ckpt, const char *image)
{
	json_t *res = c->resources;
	json_t *env = c->env, *cmd = json_array(), *envs = json_array();
	json_t *binds = json_array(), *hc, *labels;
	const char *net = c->network;
	double cpus = json_number_value(json_object_get(res, "cpus"));
	json_int_t mem = json_integer_value(json_object_get(res, "memory_mb"));
	json_int_t gpus = json_integer_value(json_object_get(res, "gpus"));
	char *att = xasprintf("%d", c->attempt), *run = xasprintf("%lld", (long long)c->run_id);
	const struct exec_user *u = exec_user_get(); /* exec_user.c: never root when ferryd is */
	char *user = u ? xasprintf("%d:%d", (int)u->uid, (int)u->gid) : xasprintf("%d:%d", (int)getuid(), (int)getgid());

	for (size_t i = 0; x->argv[i]; i++)
		json_array_append_new(cmd, json_string(x->argv[i]));
	for (size_t i = 0; x->envp[i]; i++) {
		if (!dk_env_wanted(x->envp[i], env))
			continue;
		json_array_append_new(envs, json_string(x->envp[i]));
		if (strncmp(x->envp[i], "FERRY_CACHE_DIR=", 16) == 0)
			dk_bind(binds, x->envp[i] + 16, 0); /* the data cache, staged upstream */
	}
	/* the same paths inside: FERRY_OUTPUT_DIR and friends stay valid */
	/*
	 * Every run's directory read-only: upstream outputs a command names
	 * ({{steps.X.outputs.Y}}) may be another run's (a cached step's);
	 * then this attempt's directory and the step's checkpoint writable
	 * on top (the engine mounts the deeper path last).
	 */
	{
		char *runs = xasprintf("%s/runs", home);
		dk_bind(binds, runs, 1);
		free(runs);
	}
	dk_bind(binds, dir, 0);
	dk_bind(binds, ckpt, 0);
	dk_bind(binds, c->run_workdir, 1); /* the workflow's files: read, not written */
	hc = json_pack("{s:o, s:s, s:b}", "Binds", binds, "NetworkMode",
		       net && strcmp(net, "host") == 0 ? "host" : "none", "AutoRemove", 0);
	if (cpus > 0)
		json_object_set_new(hc, "NanoCpus", json_integer((json_int_t)(cpus * 1e9)));
	if (mem > 0) {
		/* swap equal to the limit: no swap, so the limit is what kills */
		json_object_set_new(hc, "Memory", json_integer(mem * 1024 * 1024));
		json_object_set_new(hc, "MemorySwap", json_integer(mem * 1024 * 1024));
	}
	if (c->gpus != NULL) {
		/* exactly the GPUs the claim gave the attempt (the host's indices) */
		json_t *ids = json_array();
		for (const char *p = c->gpus; *p;) {
			size_t n = strcspn(p, ",");
			json_array_append_new(ids, json_stringn(p, n));
			p += n + (p[n] == ',');
		}
		json_object_set_new(hc, "DeviceRequests",
				    json_pack("[{s:s, s:o, s:[[s]]}]", "Driver", "", "DeviceIDs", ids,
					      "Capabilities", "gpu"));
	} else if (gpus > 0) {
		json_object_set_new(hc, "DeviceRequests",
				    json_pack("[{s:s, s:I, s:[[s]]}]", "Driver", "", "Count", gpus,
					      "Capabilities", "gpu"));
	}
	labels = json_pack("{s:s, s:s, s:s, s:s}", "ferry.run", run, "ferry.step", c->name,
			   "ferry.attempt", att, "ferry.home", home);
	free(att), free(run);
	{
		json_t *body = json_pack("{s:s, s:o, s:o, s:s, s:s, s:o, s:o, s:b, s:b, s:b}", "Image",
					 image, "Cmd", cmd, "Env", envs, "WorkingDir", x->cwd, "User",
					 user, "Labels", labels, "HostConfig", hc, "Tty", 0,
					 "AttachStdout", 0, "AttachStderr", 0);
		free(user);
		return body;
	}
}

/* ---- the hooks -------------------------------------------------------------- */

/* The row's per-daemon instance. */
struct docker {
	char *home;          /* the FERRY_HOME of this daemon's containers (their ferry.home label), from the first start */
	int64_t last_sweep;  /* when tick last looked for exited containers */
	int64_t ended_at;    /* the last job end since that sweep (0: none): a sweep once jobs are quiet */
};

/* a sweep each minute, and one once no job has ended for DK_QUIET_MS after one did */
#define DK_SWEEP_MS 60000
#define DK_QUIET_MS 2000

static void *docker_init(const char *home)
{
	(void)home; /* only a daemon that ran a docker job talks to dockerd: known from its start */
	return xcalloc(1, sizeof(struct docker));
}

static void docker_fini(void *inst)
{
	struct docker *dk = inst;

	if (dk)
		free(dk->home);
	free(dk);
}

static int docker_start(struct exec_job *job, const struct exec_spec *c, enum exec_mode mode, struct exec_status *st)
{
	const char *image = c->image;
	const char *sock = dk_socket();
	struct exec_local_cmd x = {0};
	char *dir = NULL, *adir = NULL, *ahome = NULL, *out = NULL, *ckpt = NULL, *name = NULL;
	json_t *body = NULL;
	struct docker *dk;
	int error = FERRY_EINVALID;

	(void)mode, (void)st;
	exec_job_begin(job, &exec_docker, c);
	dk = job->inst;
	if (sock == NULL)
		goto out;
	if (image == NULL || strcmp(image, "host") == 0) {
		ferry_error_set("executor docker cannot run image: host (the Docker engine has no "
				"root-filesystem mode): name an image (ferry-base is built by "
				"deploy/dockerd.sh) or use executor: podman or local");
		goto out;
	}
	error = FERRY_ERROR;
	/* made and handed to the job user as every executor's (one checkpoint directory per step) */
	if (exec_attempt_dirs(c, &dir, &out, &ckpt) < 0)
		goto out;
	free(out), free(ckpt);
	out = ckpt = NULL;
	/* the engine binds host paths as they are: absolute ones */
	if ((adir = realpath(dir, NULL)) == NULL || (ahome = realpath(c->home, NULL)) == NULL) {
		ferry_error_set("%s: %s", dir, strerror(errno));
		goto out;
	}
	out = xasprintf("%s/out", adir);
	ckpt = xasprintf("%s/runs/%lld/%s/checkpoint", ahome, (long long)c->run_id, c->name);
	if ((error = exec_local_cmd_make(&x, c, adir, out, ckpt)) < 0)
		goto out;
	name = dk_name(ahome, c->run_id, c->name, c->attempt);
	if (dk->home == NULL || strcmp(dk->home, ahome) != 0) {
		char *marker = xasprintf("%s/runs/.docker", ahome);
		int fd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0644); /* the orphan sweep's cue */
		if (fd >= 0)
			close(fd);
		free(marker);
		free(dk->home);
		dk->home = xstrdup(ahome);
	}
	body = dk_create_body(c, &x, ahome, adir, ckpt, image);
	job->dir = dir;
	dir = NULL;
	if ((error = dk_spawn(job, sock, name, body)) < 0)
		goto out;
	if (c->timeout_ms > 0)
		job->deadline_ms = clock_mono_ms() + c->timeout_ms;
out:
	exec_local_cmd_dispose(&x);
	json_decref(body);
	free(dir), free(adir), free(ahome), free(out), free(ckpt), free(name);
	return error;
}

/* What DIR/status says: fills what it finds (NULL pointers skipped); whether an end line was there. */
static int dk_status(const char *dir, pid_t *pid, int64_t *start, char **container,
		     struct exec_status *st, int *removed)
{
	char *buf = NULL, *line, *next;
	int ended = 0;

	if (jobfile_read(&buf, NULL, dir, "status", EXEC_STATUS_MAX) == FERRY_OK) {
		for (line = buf; line && *line; line = next) {
			int64_t v, t;
			pid_t p;
			if ((next = strchr(line, '\n')) == NULL)
				break; /* a line still being written */
			*next++ = '\0';
			if (exec_status_pid(line, &p, &t)) {
				if (pid)
					*pid = p, *start = t;
			} else if (strncmp(line, "container ", 10) == 0 && container) {
				free(*container);
				*container = xstrdup(line + 10);
			} else if (strncmp(line, "reason ", 7) == 0 && st) {
				free(st->reason);
				st->reason = xstrdup(line + 7);
			} else if (strncmp(line, "exit ", 5) == 0 && parse_int64(line + 5, &v) == 0) {
				if (st)
					st->exit_code = (int)v;
				ended = 1;
			} else if (strcmp(line, "removed") == 0 && removed) {
				*removed = 1;
			}
		}
	}
	free(buf);
	return ended;
}

static const char *dk_container(const struct exec_job *job)
{
	return json_string_value(json_object_get(job->handle, "container"));
}

/*
 * The job's end from the container itself (its shim is gone and left no
 * end): 0 with *st when it exited; 1 when it runs; FERRY_ENOTFOUND when it
 * is gone or never started; FERRY_ERROR when the engine does not answer.
 */
static int dk_inspect_end(const struct exec_job *job, struct exec_status *st)
{
	const char *sock = dk_socket(), *name = dk_container(job);
	char *path;
	json_t *ans = NULL, *state;
	long code;
	int error;

	if (sock == NULL || name == NULL)
		return FERRY_ENOTFOUND;
	path = xasprintf("/containers/%s/json", name);
	error = dk_call(&code, &ans, sock, "GET", path, NULL, DK_QUICK_MS);
	free(path);
	if (error < 0)
		goto out;
	state = json_object_get(ans, "State");
	if (code == 404) {
		ferry_error_set("its container %s is gone and left no exit status", name);
		error = FERRY_ENOTFOUND;
	} else if (code != 200) {
		ferry_error_set("inspecting container %s: HTTP %ld", name, code);
		error = FERRY_ERROR;
	} else if (json_is_true(json_object_get(state, "Running"))) {
		error = 1;
	} else if (json_string_value(json_object_get(state, "Status")) &&
		   strcmp(json_string_value(json_object_get(state, "Status")), "created") == 0) {
		ferry_error_set("its container %s was created but never started", name);
		error = FERRY_ENOTFOUND;
	} else {
		json_int_t mem = json_integer_value(json_object_get(json_object_get(ans, "HostConfig"), "Memory"));
		memset(st, 0, sizeof(*st));
		st->exit_code = (int)json_integer_value(json_object_get(state, "ExitCode"));
		if (json_is_true(json_object_get(state, "OOMKilled")) && st->exit_code != 0)
			st->reason = xasprintf("out of memory (limit %lld MiB)", (long long)(mem / 1048576));
		error = 0;
	}
out:
	json_decref(ans);
	return error;
}

/* Appends the end found by inspection to DIR/status, so a later adoption reads the same. */
static void dk_note_end(const struct exec_job *job, const struct exec_status *st)
{
	int fd = jobfile_append(job->dir, "status"); /* the job's directory: never through a link it left */

	if (fd >= 0) {
		if (st->reason)
			dprintf(fd, "reason %s\n", st->reason);
		dprintf(fd, "exit %d\n", st->exit_code);
		close(fd);
	}
}

/* The shim is gone: how the job ended. */
static void dk_ended(struct exec_job *job, struct exec_status *st)
{
	memset(st, 0, sizeof(*st));
	st->exit_code = -1;
	if (dk_status(job->dir, NULL, NULL, NULL, st, NULL))
		return;
	exec_status_dispose(st);
	st->exit_code = -1;
	if (dk_inspect_end(job, st) == 0) {
		dk_note_end(job, st);
		return;
	}
	st->exit_code = -1;
	st->reason = xasprintf("the container's supervisor (pid %d) was killed before it could record "
			       "how the container ended", (int)job->pid);
}

/* A new shim that follows job's running container (its own was killed); 0 or the error. */
static int dk_follow_again(struct exec_job *job)
{
	char *cname = xstrdup(dk_container(job));
	int error = dk_spawn(job, dk_socket(), cname, NULL);

	free(cname);
	return error;
}

/* job->priv of a job followed again after its container had ended (once: docker has no per-job state to free) */
static char followed_ended;

static int docker_poll(struct exec_job *job, struct exec_status *st)
{
	struct exec_status tmp = {.exit_code = -1};
	int r;

	if (job->child) {
		int wst;
		pid_t w = waitpid(job->pid, &wst, WNOHANG);
		if (w == 0 || (w < 0 && errno != ECHILD))
			return 0;
		job->child = 0;
	} else if (exec_pid_alive(job->pid, job->pid_start)) {
		return 0;
	}
	/*
	 * its shim was killed, not its container (nor the end recorded): a new
	 * one follows it — also when the container has ended since, once, for
	 * the lines of its log the killed shim had not copied (they were lost:
	 * the job's log ended where its shim died, its exit taken from an
	 * inspection); the new shim copies what DIR/log lacks and records the end
	 */
	if (job->dir && !dk_status(job->dir, NULL, NULL, NULL, &tmp, NULL) && !EXEC_FAULT("docker-shim-gone") &&
	    ((r = dk_inspect_end(job, &tmp)) == 1 || (r == 0 && job->priv != &followed_ended)) &&
	    dk_follow_again(job) == 0) {
		if (r == 0)
			job->priv = &followed_ended;
		exec_status_dispose(&tmp);
		return 0;
	}
	exec_status_dispose(&tmp);
	dk_ended(job, st);
	return 1;
}

static void docker_signal(const struct exec_job *job, int sig)
{
	/* the shim must live to record the end: SIGKILL is asked of it as SIGUSR1 */
	if (job->pid > 0 && exec_pid_alive(job->pid, job->pid_start))
		kill(job->pid, sig == SIGKILL ? SIGUSR1 : SIGTERM);
}

static int docker_adopt(struct exec_job *job, struct exec_status *st)
{
	json_t *h = job->handle;
	char *name = NULL;
	const char *sock;
	int rc, removed = 0;

	job->child = 0;
	job->pid = (pid_t)json_integer_value(json_object_get(h, "pid"));
	job->pid_start = json_integer_value(json_object_get(h, "start"));
	/* the status file's latest "pid" line wins: a follower may have replaced the recorded shim */
	if (job->dir)
		dk_status(job->dir, &job->pid, &job->pid_start, &name, NULL, &removed);
	if (dk_container(job) == NULL && name == NULL) {
		free(name);
		ferry_error_set("no handle was recorded and the attempt directory names no container");
		return FERRY_ENOTFOUND;
	}
	if (dk_container(job) == NULL) {
		json_decref(job->handle);
		job->handle = json_pack("{s:i, s:I, s:s}", "pid", (int)job->pid, "start",
					(json_int_t)job->pid_start, "container", name);
	}
	free(name);
	/* alive first, then the status: the shim writes the end before it exits */
	if (exec_pid_alive(job->pid, job->pid_start))
		return 1;
	memset(st, 0, sizeof(*st));
	st->exit_code = -1;
	if (dk_status(job->dir, NULL, NULL, NULL, st, &removed)) {
		if (!removed && (sock = dk_socket()) != NULL)
			(void)dk_remove(sock, dk_container(job), DK_QUICK_MS);
		return 0;
	}
	exec_status_dispose(st);
	rc = dk_inspect_end(job, st);
	if (rc == 1) {
		/* it runs without its shim: a new one follows it, the log appended from where it ended */
		rc = dk_follow_again(job);
		return rc < 0 ? FERRY_EXEC_EAGAIN : 1; /* it runs: asked again, never retried beside it */
	}
	if (rc == 0) {
		dk_note_end(job, st);
		(void)dk_remove(dk_socket(), dk_container(job), DK_QUICK_MS);
		return 0;
	}
	if (rc == FERRY_ENOTFOUND && (sock = dk_socket()) != NULL)
		(void)dk_remove(sock, dk_container(job), DK_QUICK_MS); /* created, never started */
	/* the engine did not answer (a loaded machine): the container may still run, so not lost */
	return rc == FERRY_ENOTFOUND ? rc : FERRY_EXEC_EAGAIN;
}

/* Sums the "value" of the entries of a blkio list whose "op" is op (any case). */
static int64_t dk_blkio(const json_t *list, const char *op)
{
	int64_t sum = 0;
	size_t i;
	json_t *v;

	json_array_foreach(list, i, v) {
		const char *o = json_string_value(json_object_get(v, "op"));
		if (o && strcasecmp(o, op) == 0)
			sum += json_integer_value(json_object_get(v, "value"));
	}
	return sum;
}

/*
 * The cgroup path of pid (below a hierarchy's mount) in the v1 hierarchy
 * whose controllers are one of want (NULL-terminated), else its v2 path;
 * *v1 says which. NULL when unknown; the caller frees it.
 */
static char *dk_cgroup_path(pid_t pid, const char *const *want, int *v1)
{
	char path[64], line[1024], *rel = NULL, *v2 = NULL;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return NULL;
	while (rel == NULL && fgets(line, sizeof(line), f)) {
		char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
		if (b == NULL)
			continue;
		b[strcspn(b, "\n")] = '\0';
		*b++ = '\0';
		for (const char *const *w = want; *w && rel == NULL; w++)
			if (strcmp(a + 1, *w) == 0)
				rel = xstrdup(b);
		if (rel == NULL && a[1] == '\0' && v2 == NULL)
			v2 = xstrdup(b);
	}
	fclose(f);
	*v1 = rel != NULL;
	if (rel == NULL) {
		rel = v2;
		v2 = NULL;
	}
	free(v2);
	return rel;
}

/*
 * The cgroup directory of pid: its v1 pids hierarchy where there is one
 * (this machine's hybrid layout), else its v2 path (pure v2, or the
 * hybrid's unified mount). NULL when unknown; the caller frees it.
 */
static char *dk_cgroup_dir(pid_t pid)
{
	static const char *const pids[] = {"pids", NULL};
	struct stat sb;
	int v1;
	char *rel = dk_cgroup_path(pid, pids, &v1), *dir;

	if (rel == NULL)
		return NULL;
	dir = v1 ? xasprintf("/sys/fs/cgroup/pids%s", rel)
		 : stat("/sys/fs/cgroup/unified", &sb) == 0 ? xasprintf("/sys/fs/cgroup/unified%s", rel)
							    : xasprintf("/sys/fs/cgroup%s", rel);
	free(rel);
	return dir;
}

/*
 * The cgroup path of pid below each hierarchy's mount: its v1 cpuacct one
 * where there is one (the engine's cgroupfs and systemd drivers give every
 * controller the same path), else its v2 path. NULL when unknown; the
 * caller frees it.
 */
static char *dk_cgroup_rel(pid_t pid)
{
	static const char *const cpuacct[] = {"cpuacct", "cpu,cpuacct", "cpuacct,cpu", NULL};
	int v1;

	return dk_cgroup_path(pid, cpuacct, &v1);
}

/* Adds the /proc/PID/io counters of every process in cgroup dir to out (reaped children are in their parents'). */
static void dk_cgroup_io(const char *dir, struct exec_sample *out)
{
	char *procs = xasprintf("%s/cgroup.procs", dir), line[256];
	FILE *f = fopen(procs, "re");

	free(procs);
	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f)) {
		char path[64], buf[256];
		FILE *io;
		line[strcspn(line, "\n")] = '\0';
		snprintf(path, sizeof(path), "/proc/%.20s/io", line);
		if ((io = fopen(path, "re")) == NULL)
			continue;
		while (fgets(buf, sizeof(buf), io)) {
			long long v;
			char *sp = strchr(buf, ' ');
			if (sp == NULL)
				continue;
			v = strtoll(sp + 1, NULL, 10);
			if (strncmp(buf, "rchar:", 6) == 0)
				out->rchar += v;
			else if (strncmp(buf, "wchar:", 6) == 0)
				out->wchar += v;
			else if (strncmp(buf, "read_bytes:", 11) == 0)
				out->read_bytes += v;
			else if (strncmp(buf, "write_bytes:", 12) == 0)
				out->write_bytes += v;
		}
		fclose(io);
	}
	fclose(f);
}

/* The host pid of the container's main process (one engine request, DK_QUICK_MS). */
static int dk_main_pid(const struct exec_job *job, pid_t *pid)
{
	const char *sock = dk_socket(), *name = dk_container(job);
	char *path;
	json_t *ans = NULL;
	json_int_t p;
	long code;
	int error;

	if (sock == NULL || name == NULL)
		return FERRY_ENOTFOUND;
	path = xasprintf("/containers/%s/json", name);
	error = dk_call(&code, &ans, sock, "GET", path, NULL, DK_QUICK_MS);
	free(path);
	p = json_integer_value(json_object_get(json_object_get(ans, "State"), "Pid"));
	json_decref(ans);
	if (error < 0)
		return error;
	if (code != 200 || p <= 0) {
		ferry_error_set("container %s does not run (HTTP %ld)", name, code);
		return FERRY_ENOTFOUND;
	}
	*pid = (pid_t)p;
	return FERRY_OK;
}

/*
 * What the container used, read from its cgroup (the kernel's files, as
 * for podman: exec_podman_cgroup_sample): its CPU time, its block IO, and
 * rchar/wchar summed over its processes from /proc. One engine request
 * (its main pid, DK_QUICK_MS). Where its cgroup cannot be read, the CPU
 * time and block IO from the engine's one-shot stats instead, with the
 * IO counters of the processes of its pids cgroup; that request answered
 * at once only the first time here (dockerd 28: 10 ms, then 1 s each),
 * and a monitor whose looks took a second each never gathered the
 * samples a window needs (a sleeping container was never judged hung).
 */
static int docker_sample(const struct exec_job *job, struct exec_sample *out)
{
	const char *sock = dk_socket(), *name = dk_container(job);
	char *path, *cg;
	json_t *ans = NULL;
	pid_t pid;
	long code;
	int error;

	memset(out, 0, sizeof(*out));
	if ((error = dk_main_pid(job, &pid)) < 0)
		return error;
	if ((cg = dk_cgroup_rel(pid)) != NULL) {
		int cpu = 0;
		error = exec_podman_cgroup_sample("/sys/fs/cgroup", cg, out, &cpu);
		free(cg);
		if (error == 0 && cpu)
			return 0; /* (without its CPU file the CPU time would read 0: the engine's, below) */
		memset(out, 0, sizeof(*out));
	}
	if ((cg = dk_cgroup_dir(pid)) != NULL)
		dk_cgroup_io(cg, out);
	free(cg);
	path = xasprintf("/containers/%s/stats?stream=false&one-shot=true", name);
	error = dk_call(&code, &ans, sock, "GET", path, NULL, DK_QUICK_MS);
	free(path);
	if (error == 0 && code != 200) {
		ferry_error_set("no stats for container %s: HTTP %ld", name, code);
		error = FERRY_ENOTFOUND;
	}
	if (error == 0) {
		json_t *cpu = json_object_get(json_object_get(ans, "cpu_stats"), "cpu_usage");
		json_t *blk = json_object_get(json_object_get(ans, "blkio_stats"), "io_service_bytes_recursive");
		out->cpu_ms = json_integer_value(json_object_get(cpu, "total_usage")) / 1000000;
		/* where the kernel counts block IO per cgroup it includes the page cache's writeback */
		if (dk_blkio(blk, "read") > out->read_bytes)
			out->read_bytes = dk_blkio(blk, "read");
		if (dk_blkio(blk, "write") > out->write_bytes)
			out->write_bytes = dk_blkio(blk, "write");
	}
	json_decref(ans);
	return error;
}

/* The container's processes: those of the cgroup of its main process (one engine request, bounded). */
static int docker_pids(const struct exec_job *job, int **out, int *n)
{
	char *cg;
	pid_t pid;
	int error;

	*out = NULL;
	*n = 0;
	if ((error = dk_main_pid(job, &pid)) < 0)
		return error;
	if ((cg = dk_cgroup_dir(pid)) == NULL) {
		ferry_error_set("no cgroup for the container's process %d", (int)pid);
		return FERRY_ENOTFOUND;
	}
	error = exec_cgroup_pids(cg, out, n);
	free(cg);
	return error == 0 && *n == 0 ? FERRY_ENOTFOUND : error;
}

/* The shim removes its container after recording the end; this catches one that could not. */
static void docker_cleanup(struct exec_job *job)
{
	int removed = 0;
	const char *sock = dk_socket(), *name = dk_container(job);
	struct docker *dk = job->inst;

	if (dk)
		dk->ended_at = clock_mono_ms(); /* the leftovers of a crash labelled like this attempt may go soon */
	if (job->dir == NULL || name == NULL || sock == NULL)
		return;
	dk_status(job->dir, NULL, NULL, NULL, NULL, &removed);
	if (!removed && dk_remove(sock, name, DK_QUICK_MS) < 0)
		flog_warn("run %lld step %s attempt %d: %s", (long long)job->run_id, job->name,
			  job->attempt, ferry_error_last());
}

/*
 * Removes the stopped containers labelled with this daemon's home whose
 * end is already in their attempt's DIR/status (a removal that failed:
 * the engine was unreachable when the job ended). Those without an end
 * stay: their attempt is adopted from them. Once a minute, and at the
 * first wake-up (a SIGCHLD, or the 10 s strays task) once no job has
 * ended for DK_QUIET_MS after one did: a sweep that ran while a job ran
 * saw its attempt without an end, and a leftover labelled like it would
 * have waited a minute; not while jobs keep ending, where the request
 * would run in the wake-up that records the next end. Each request within
 * DK_QUICK_MS.
 */
static void docker_tick(void *inst, const char *home)
{
	struct docker *dk = inst;
	const char *sock = dk_socket();
	int64_t now = clock_mono_ms();
	json_t *filt, *list = NULL, *v;
	char *ftxt, *esc, *path;
	long code;
	size_t i;

	/* only a daemon that ran or adopted a docker job (dk->home) talks to dockerd */
	(void)home;
	if (dk->home == NULL || sock == NULL ||
	    (dk->last_sweep != 0 && now - dk->last_sweep < DK_SWEEP_MS &&
	     (dk->ended_at == 0 || now - dk->ended_at < DK_QUIET_MS)))
		return;
	dk->last_sweep = now;
	dk->ended_at = 0;
	filt = json_pack("{s:[s+], s:[s, s, s]}", "label", "ferry.home=", dk->home, "status", "exited",
			 "dead", "created");
	ftxt = json_dumps(filt, JSON_COMPACT);
	esc = curl_easy_escape(NULL, ftxt, 0);
	path = xasprintf("/containers/json?all=1&filters=%s", esc ? esc : "");
	if (dk_call(&code, &list, sock, "GET", path, NULL, DK_QUICK_MS) == 0 && code == 200) {
		json_array_foreach(list, i, v) {
			json_t *lab = json_object_get(v, "Labels");
			const char *run = json_string_value(json_object_get(lab, "ferry.run"));
			const char *step = json_string_value(json_object_get(lab, "ferry.step"));
			const char *att = json_string_value(json_object_get(lab, "ferry.attempt"));
			const char *id = json_string_value(json_object_get(v, "Id"));
			char *dir;
			if (run == NULL || step == NULL || att == NULL || id == NULL || strchr(step, '/'))
				continue;
			dir = xasprintf("%s/runs/%s/%s/%s", dk->home, run, step, att);
			if (dk_status(dir, NULL, NULL, NULL, NULL, NULL) && dk_remove(sock, id, DK_QUICK_MS) == 0)
				flog_info("removed container %.12s of run %s step %s attempt %s: its end was "
					  "recorded", id, run, step, att);
			free(dir);
		}
	}
	json_decref(list);
	free(path);
	curl_free(esc);
	free(ftxt);
	json_decref(filt);
}

static char *docker_log_path(const struct exec_job *job)
{
	return job->dir ? xasprintf("%s/log", job->dir) : NULL;
}

/*
 * Running containers of home whose attempt is over (exec_orphans.c): the
 * engine lists them by their ferry.home label, wanted() asks the database,
 * and the others are removed with force (killed first). Only where docker
 * jobs ever ran under home (the marker runs/.docker, written by start),
 * so a daemon that never runs containers never talks to dockerd.
 */
static int docker_orphans(const char *home, int (*want)(int64_t run, const char *step, int attempt, void *arg),
			  void *arg)
{
	const char *sock = dk_socket();
	char *ahome = realpath(home, NULL), *marker, *ftxt, *esc, *path;
	json_t *filt, *list = NULL, *v;
	long code;
	size_t i;
	int removed = 0;

	if (ahome == NULL)
		return 0;
	marker = xasprintf("%s/runs/.docker", ahome);
	if (sock == NULL || access(marker, F_OK) != 0) {
		free(marker), free(ahome);
		return 0;
	}
	filt = json_pack("{s:[s+], s:[s]}", "label", "ferry.home=", ahome, "status", "running");
	ftxt = json_dumps(filt, JSON_COMPACT);
	esc = curl_easy_escape(NULL, ftxt, 0);
	path = xasprintf("/containers/json?filters=%s", esc ? esc : "");
	if (dk_call(&code, &list, sock, "GET", path, NULL, 10000) == 0 && code == 200) {
		json_array_foreach(list, i, v) {
			json_t *lab = json_object_get(v, "Labels");
			const char *run = json_string_value(json_object_get(lab, "ferry.run"));
			const char *step = json_string_value(json_object_get(lab, "ferry.step"));
			const char *att = json_string_value(json_object_get(lab, "ferry.attempt"));
			const char *id = json_string_value(json_object_get(v, "Id"));
			int64_t r, a;
			if (run == NULL || step == NULL || att == NULL || id == NULL || parse_int64(run, &r) < 0 ||
			    parse_int64(att, &a) < 0 || want(r, step, (int)a, arg))
				continue;
			if (dk_remove(sock, id, 15000) == 0) {
				flog_info("removed container %.12s: run %s step %s attempt %s is no longer running",
					  id, run, step, att);
				removed++;
			} else {
				flog_warn("removing orphan container %.12s: %s", id, ferry_error_last());
			}
		}
	}
	json_decref(list);
	free(path);
	curl_free(esc);
	free(ftxt);
	json_decref(filt);
	free(marker), free(ahome);
	return removed;
}

const struct exec_type exec_docker = {
	.name = "docker",
	.flags = EXF_IMAGES | EXF_SERVICES,
	.init = docker_init,
	.fini = docker_fini,
	.start = docker_start,
	.poll = docker_poll,
	.signal = docker_signal,
	.adopt = docker_adopt,
	.sample = docker_sample,
	.pids = docker_pids,
	.orphans = docker_orphans,
	.cleanup = docker_cleanup,
	.log_path = docker_log_path,
	.tick = docker_tick,
};

/*
 * exec_slurm_text — what the Slurm executor writes for Slurm and reads in
 * its answers, as pure functions of their text: the batch script (the
 * command, in `podman run` when the step names an image, its exit code
 * recorded in the attempt's status file), the job's environment, the
 * slurmrestd submit request; job states, REST errors and outages, sbatch's
 * and scontrol's answers, exit pairs, and sstat's TRES usage line as a
 * resource sample. exec_slurm.c drives the requests.
 */
#include "exec/exec_slurm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

/* Appends s to b as one shell word in single quotes. */
static void sh_quote(char **b, const char *s)
{
	size_t n = strlen(*b), k = n;

	*b = xrealloc(*b, n + 4 * strlen(s) + 4);
	(*b)[k++] = '\'';
	for (; *s; s++) {
		if (*s == '\'') {
			memcpy(*b + k, "'\\''", 4);
			k += 4;
		} else {
			(*b)[k++] = *s;
		}
	}
	(*b)[k++] = '\'';
	(*b)[k] = '\0';
}

static void sh_add(char **b, const char *s)
{
	char *n = xasprintf("%s%s", *b, s);
	free(*b);
	*b = n;
}

/*
 * The batch script: records the job id, runs the command (in `podman run`
 * with the attempt's directories mounted at their own paths when the step
 * names an image), records its exit code.
 */
char *exec_slurm_script(const struct exec_spec *c, const struct exec_local_cmd *x, const char *dir,
			const char *ckpt, const json_t *env)
{
	const char *image = c->image;
	const char *net = c->network;
	const char *cache = json_string_value(json_object_get(env, "FERRY_CACHE_DIR")), *k;
	char *b = xasprintf("#!/bin/sh\n# Ferry: run %lld step %s attempt %d\nstatus=", (long long)c->run_id,
			    c->name, c->attempt);
	json_t *v;

	sh_quote(&b, dir);
	sh_add(&b, "/status\nprintf 'slurm %s\\n' \"$SLURM_JOB_ID\" >\"$status\"\ncd ");
	sh_quote(&b, x->cwd);
	sh_add(&b, " || { echo \"ferry: cannot enter the working directory\" >&2; echo 'exit 126' >>\"$status\"; "
		   "exit 126; }\n");
	if (image && strcmp(image, "host") != 0) {
		char *name = xasprintf("ferry-slurm-%lld-%s-%d", (long long)c->run_id, c->name, c->attempt);
		sh_add(&b, "podman run --rm --name ");
		sh_quote(&b, name);
		free(name);
		sh_add(&b, strcmp(net ? net : "none", "host") == 0 ? " --network=host" : " --network=none");
		/* the attempt's directories at their own paths: FERRY_OUTPUT_DIR etc. stay valid */
		const char *mounts[] = {dir, ckpt, x->cwd, c->run_workdir, cache};
		for (size_t i = 0; i < sizeof(mounts) / sizeof(mounts[0]); i++) {
			char *m;
			if (mounts[i] == NULL)
				continue;
			m = xasprintf("%s:%s", mounts[i], mounts[i]);
			sh_add(&b, " -v ");
			sh_quote(&b, m);
			free(m);
		}
		sh_add(&b, " -w ");
		sh_quote(&b, x->cwd);
		json_object_foreach((json_t *)env, k, v) {
			if (strcmp(k, "PATH") == 0)
				continue;
			sh_add(&b, " --env ");
			sh_quote(&b, k); /* the value from the job's environment */
		}
		sh_add(&b, " ");
		sh_quote(&b, image);
	}
	for (size_t i = 0; x->argv[i]; i++) {
		sh_add(&b, " ");
		sh_quote(&b, x->argv[i]);
	}
	sh_add(&b, " </dev/null\nrc=$?\nprintf 'exit %d\\n' \"$rc\" >>\"$status\"\nexit \"$rc\"\n");
	return b;
}

/*
 * The job's environment: the FERRY_* variables Ferry sets and the step's
 * env (what exec_local_cmd_make built, less the daemon's own environment),
 * and a plain PATH unless the step sets one: the compute node's own
 * environment is not the daemon's.
 */
json_t *exec_slurm_env(const struct exec_spec *c, const struct exec_local_cmd *x)
{
	json_t *env = json_object(), *step = c->env;

	for (size_t i = 0; x->envp[i]; i++) {
		const char *eq = strchr(x->envp[i], '=');
		char *key;
		if (eq == NULL)
			continue;
		key = xstrndup(x->envp[i], (size_t)(eq - x->envp[i]));
		if (strncmp(key, "FERRY_", 6) == 0 || json_object_get(step, key))
			json_object_set_new(env, key, json_string(eq + 1));
		free(key);
	}
	if (!json_object_get(env, "PATH"))
		json_object_set_new(env, "PATH", json_string("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
	return env;
}

json_t *exec_slurm_request(const struct exec_spec *c, const char *script, json_t *env, const char *cwd,
			  const char *dir, const char *name)
{
	json_t *res = c->resources, *sl = c->options;
	double cpus = json_number_value(json_object_get(res, "cpus"));
	json_int_t mb = json_integer_value(json_object_get(res, "memory_mb"));
	json_int_t gpus = json_integer_value(json_object_get(res, "gpus"));
	const char *part = json_string_value(json_object_get(sl, "partition"));
	char *log = xasprintf("%s/log", dir);
	json_t *job = json_pack("{s:s, s:s, s:o, s:s, s:s, s:s, s:I, s:b}", "name", name, "comment", dir,
				"environment", env, "current_working_directory", cwd,
				"standard_output", log, "standard_error", log,
				"cpus_per_task", (json_int_t)(cpus > 0 ? ceil(cpus) : 1), "requeue", 0);

	free(log);
	if (mb > 0)
		json_object_set_new(job, "memory_per_node", json_integer(mb));
	if (c->timeout_ms > 0) /* a backstop: Ferry's own timeout cancels the job first */
		json_object_set_new(job, "time_limit", json_integer((c->timeout_ms + 59999) / 60000));
	if (gpus > 0) {
		char *g = xasprintf("gpu:%lld", (long long)gpus);
		json_object_set_new(job, "gres", json_string(g));
		free(g);
	}
	if (part)
		json_object_set_new(job, "partition", json_string(part));
	return json_pack("{s:s, s:o}", "script", script, "job", job);
}

/*
 * "[D-][HH:]MM:SS[.mmm]" (Slurm's TRES cpu time) in milliseconds, or -1.
 */
static int64_t slurm_time_ms(const char *t)
{
	int64_t days = 0, parts[3] = {0, 0, 0}, ms = 0;
	int n = 0;
	const char *p = t, *dash = strchr(t, '-');
	char *end;

	if (dash) {
		days = strtoll(t, &end, 10);
		if (end != dash)
			return -1;
		p = dash + 1;
	}
	for (;;) {
		long long v = strtoll(p, &end, 10);
		if (end == p || n == 3)
			return -1;
		parts[n++] = v;
		if (*end == ':') {
			p = end + 1;
			continue;
		}
		if (*end == '.') {
			double frac = strtod(end, &end);
			ms = (int64_t)(frac * 1000 + 0.5);
		}
		if (*end != '\0' && *end != ',' && *end != '|')
			return -1;
		break;
	}
	/* MM:SS or HH:MM:SS */
	int64_t secs = n == 3 ? parts[0] * 3600 + parts[1] * 60 + parts[2]
		     : n == 2 ? parts[0] * 60 + parts[1] : parts[0];
	return (days * 86400 + secs) * 1000 + ms;
}

/* The value of KEY= in a TRES list ("cpu=00:00:02,fs/disk=123,…" up to '|'), or NULL. */
static const char *tres_get(const char *list, const char *key)
{
	size_t kl = strlen(key);

	for (const char *p = list; p && *p && *p != '|';) {
		if (strncmp(p, key, kl) == 0 && p[kl] == '=')
			return p + kl + 1;
		p = strpbrk(p, ",|");
		if (p == NULL || *p == '|')
			break;
		p++;
	}
	return NULL;
}

/*
 * Parses sstat's "TRESUsageInTot|TRESUsageOutTot" line: CPU time and the
 * bytes the job's processes read and wrote (jobacct_gather/linux sums
 * /proc/PID/io's rchar and wchar over the step's processes). 0 or -1.
 */
int exec_slurm_parse_sstat(const char *text, struct exec_sample *out)
{
	const char *in = text, *bar = strchr(text, '|'), *v;
	char *end;

	memset(out, 0, sizeof(*out));
	if (bar == NULL || (v = tres_get(in, "cpu")) == NULL || (out->cpu_ms = slurm_time_ms(v)) < 0)
		return -1;
	if ((v = tres_get(in, "fs/disk")) != NULL)
		out->rchar = strtoll(v, &end, 10);
	if ((v = tres_get(bar + 1, "fs/disk")) != NULL)
		out->wchar = strtoll(v, &end, 10);
	/* Slurm counts rchar/wchar only: storage-level bytes are not known */
	out->read_bytes = out->write_bytes = -1;
	return 0;
}

/* ---- what Slurm says ---------------------------------------------------- */

/*
 * Whether Slurm's message says it cannot answer or take the job now (its
 * controller unreachable or starting, the node not back yet) rather than
 * that the request is wrong: then the request is repeated later.
 */
int exec_slurm_transient(const char *text)
{
	static const char *const signs[] = {
		"contact slurm controller", "Socket timed out", "Connection refused",
		"Zero Bytes were transmitted", "Communication connection failure", "timed out",
		"Required node not available", "temporarily unavailable", "not responding",
		"Nodes required for job are DOWN",
	};
	for (size_t i = 0; i < sizeof(signs) / sizeof(signs[0]); i++)
		if (text && strstr(text, signs[i]))
			return 1;
	return 0;
}

static const char *const final_states[] = {
	"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
	"DEADLINE", "PREEMPTED", "REVOKED", "SPECIAL_EXIT",
};

int exec_slurm_state_final(const char *state)
{
	for (size_t i = 0; i < sizeof(final_states) / sizeof(final_states[0]); i++)
		if (state && strncmp(state, final_states[i], strlen(final_states[i])) == 0)
			return 1;
	return 0;
}

/* The first error of a REST answer: its number (0 when none) and text. */
int exec_slurm_rest_error(const json_t *j, const char **text)
{
	json_t *e = json_array_get(json_object_get(j, "errors"), 0);

	*text = NULL;
	if (e == NULL)
		return 0;
	*text = json_string_value(json_object_get(e, "error"));
	if (*text == NULL || **text == '\0')
		*text = json_string_value(json_object_get(e, "description"));
	if (*text == NULL)
		*text = "error";
	return json_integer_value(json_object_get(e, "error_number")) ? (int)json_integer_value(json_object_get(e, "error_number")) : -1;
}

/* Whether a REST error means slurmctld was not reached (slurmrestd answers those too). */
int exec_slurm_rest_outage(int num, const char *text)
{
	return (num >= 1000 && num < 1100) || (num >= 1800 && num < 1900) || (num >= 5000 && num < 5100) ||
	       exec_slurm_transient(text);
}

/* The job id in sbatch --parsable's answer ("ID" or "ID;CLUSTER"), or -1. */
int64_t exec_slurm_parse_sbatch(const char *text)
{
	int64_t id;
	char *t = xstrndup(text, strcspn(text, ";\n"));
	int ok = parse_int64(t, &id) == 0 && id > 0;

	free(t);
	return ok ? id : -1;
}

/* "KEY=VALUE" of `scontrol show job -o`: VALUE into out (up to the next space). */
int exec_slurm_show_field(const char *text, const char *key, char *out, size_t len)
{
	const char *p = text;
	size_t k = strlen(key), n;

	while ((p = strstr(p, key)) != NULL) {
		if ((p == text || p[-1] == ' ') && p[k] == '=') {
			p += k + 1;
			n = strcspn(p, " \n");
			if (n >= len)
				n = len - 1;
			memcpy(out, p, n);
			out[n] = '\0';
			return 1;
		}
		p += k;
	}
	return 0;
}

/*
 * Slurm's "EXIT:SIGNAL" pair (scontrol's ExitCode=3:0, sacct's 0:9) as a
 * raw wait status: the signal when there is one, else the exit code.
 */
int exec_slurm_exit_pair_wstatus(const char *s)
{
	char *end = NULL;
	long ec = strtol(s, &end, 10), sg = 0;

	if (end == s)
		ec = 0;
	if (end != NULL && *end == ':')
		sg = strtol(end + 1, NULL, 10);
	return sg > 0 && sg < 128 ? (int)sg : (int)((ec & 0xff) << 8);
}

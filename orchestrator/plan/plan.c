/*
 * plan — turns a workflow, its params, a dev subset and a run id into the
 * rows of a new run (plan.h), with no database in sight. The order of the
 * work is the order of the checks a user sees: the YAML (every error with
 * FILE:LINE:COL), then the params, then the subset, then each step's
 * templates. What a step is comes from the step-kind table's flags, never
 * from its kind's name.
 */
#include "plan/plan.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/util.h"
#include "plan/template.h"

static const char *str_at(const json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

/*
 * The steps' needs as positions, made once per plan: every lookup of a name
 * was a scan of the steps, and the ancestors' walk a scan of the names found
 * so far, which made a 5,000-step plan take 10 s (quadratic and worse);
 * with positions and marks the walk of one step is linear in its ancestors.
 */
struct graph {
	json_t *index;          /* name -> its first position (an integer) */
	size_t n;
	size_t *first;          /* step i's needs are need[first[i]] .. need[first[i + 1] - 1] */
	int *need;              /* the position of the step needed, or -1 for a name no step has */
	const json_t **name;    /* … and the name as written (a JSON string) */
	unsigned *mark;         /* ancestors(): mark[j] == stamp once j is in the list */
	unsigned stamp;
};

/* The position of the step called name, or -1. */
static int step_index(const struct graph *g, const char *name)
{
	const json_t *v = name ? json_object_get(g->index, name) : NULL;

	return v ? (int)json_integer_value(v) : -1;
}

static void graph_init(struct graph *g, const json_t *steps)
{
	size_t i, k, e = 0;
	json_t *st, *nd;

	memset(g, 0, sizeof(*g));
	g->n = json_array_size(steps);
	g->index = json_object();
	json_array_foreach(steps, i, st) {
		const char *name = str_at(st, "name");
		if (name && json_object_get(g->index, name) == NULL)
			json_object_set_new(g->index, name, json_integer((json_int_t)i));
		e += json_array_size(json_object_get(st, "needs"));
	}
	g->first = xcalloc(g->n + 1, sizeof(*g->first));
	g->need = xcalloc(e + 1, sizeof(*g->need));
	g->name = xcalloc(e + 1, sizeof(*g->name));
	g->mark = xcalloc(g->n + 1, sizeof(*g->mark));
	e = 0;
	json_array_foreach(steps, i, st) {
		g->first[i] = e;
		json_array_foreach(json_object_get(st, "needs"), k, nd) {
			g->need[e] = step_index(g, json_string_value(nd));
			g->name[e++] = nd;
		}
	}
	g->first[g->n] = e;
}

static void graph_dispose(struct graph *g)
{
	json_decref(g->index);
	free(g->first);
	free(g->need);
	free(g->name);
	free(g->mark);
}

/*
 * Marks in sel[] the steps a dev subset keeps: --only one step, --from a step
 * and its descendants, --to a step and its ancestors (all when none given).
 */
static int select_steps(char *sel, const struct graph *g, const struct run_plan_in *in)
{
	size_t nsteps = g->n, i;
	const char *which = in->only ? in->only : in->from ? in->from : in->to;
	int start, changed;

	memset(sel, which ? 0 : 1, nsteps);
	if (which == NULL)
		return FERRY_OK;
	if ((in->only != NULL) + (in->from != NULL) + (in->to != NULL) > 1) {
		ferry_error_set("give at most one of --only, --from and --to");
		return FERRY_EINVALID;
	}
	if ((start = step_index(g, which)) < 0) {
		ferry_error_set("the workflow has no step \"%s\"", which);
		return FERRY_EINVALID;
	}
	sel[start] = 1;
	if (in->only)
		return FERRY_OK;
	do {
		changed = 0;
		for (i = 0; i < nsteps; i++) {
			for (size_t k = g->first[i]; k < g->first[i + 1]; k++) {
				int j = g->need[k];
				if (j < 0)
					continue;
				if (in->from && sel[j] && !sel[i])
					sel[i] = 1, changed = 1;
				if (in->to && sel[i] && !sel[j])
					sel[j] = 1, changed = 1;
			}
		}
	} while (changed);
	return FERRY_OK;
}

static json_t *ancestors(struct graph *g, const struct plan_step *ps, size_t i, int *stages_up);

/*
 * Marks in reuse[] the steps an --only or --from subset leaves out but
 * that a selected step reads from (its ancestors): their results come from
 * an earlier run. Other subsets reuse nothing.
 */
static void reuse_steps(char *reuse, struct graph *g, const struct plan_step *ps,
			const char *sel, const struct run_plan_in *in)
{
	size_t nsteps = g->n, i, k;
	json_t *nd;

	memset(reuse, 0, nsteps);
	if (in->only == NULL && in->from == NULL)
		return;
	for (i = 0; i < nsteps; i++) {
		json_t *anc;
		int stages_up;

		if (!sel[i])
			continue;
		anc = ancestors(g, ps, i, &stages_up);
		json_array_foreach(anc, k, nd) {
			int j = step_index(g, json_string_value(nd));
			if (j >= 0 && !sel[j])
				reuse[j] = 1;
		}
		json_decref(anc);
	}
}

/* The run's params: those given, and the offered ones the workflow declares. */
static int resolve_params(struct run_plan *p, const struct run_plan_in *in)
{
	const json_t *decl = json_object_get(p->spec, "params");
	json_t *given, *v;
	const char *k;
	int error;

	if (in->offered == NULL)
		return cfg_params_resolve(&p->params, p->spec, in->params);
	given = in->params ? json_deep_copy(in->params) : json_object();
	json_object_foreach((json_t *)in->offered, k, v)
		if (json_object_get(decl, k) != NULL && json_object_get(given, k) == NULL)
			json_object_set(given, k, v);
	error = cfg_params_resolve(&p->params, p->spec, given);
	json_decref(given);
	return error;
}

/*
 * A string of the step rendered now, or kept whole: one that refers to a
 * step output is rendered once, params and outputs together, when the step
 * is claimed (tmpl_render_all), so a value's own "{{…}}" is never read as
 * a template; it is rendered here too, to report a bad param now, and the
 * result dropped. where ([field] or [field, index or key]) joins the
 * spec's "templated" list.
 */
static int render_or_keep(json_t **out, const char *s, bool shell, const json_t *params, const char *run_id,
			  json_t *templated, json_t *where)
{
	char *r = NULL;
	int error = shell ? tmpl_render_shell(&r, s, params, run_id) : tmpl_render(&r, s, params, run_id);

	if (error < 0) {
		json_decref(where);
		return error;
	}
	if (tmpl_has_step_ref(s)) {
		*out = json_string(s);
		json_array_append_new(templated, where);
	} else {
		*out = json_string(r);
		json_decref(where);
	}
	free(r);
	return FERRY_OK;
}

/*
 * Copies field of the workflow's step into the resolved spec when it has a
 * value: a string with its params rendered (or kept for the claim),
 * anything else as it is.
 */
static int copy_field(json_t *spec, const json_t *step, const char *field, const json_t *params,
		      const char *run_id, json_t *templated)
{
	json_t *f = json_object_get(step, field), *r = NULL;
	int error;

	if (f == NULL || json_is_null(f))
		return FERRY_OK;
	if (!json_is_string(f))
		return json_object_set(spec, field, f) < 0 ? FERRY_ERROR : FERRY_OK;
	if ((error = render_or_keep(&r, json_string_value(f), false, params, run_id, templated,
				    json_pack("[s]", field))) < 0)
		return error;
	json_object_set_new(spec, field, r);
	return FERRY_OK;
}

/*
 * The fields of the kinds' keys that travel into the resolved spec
 * (STK_PLAN rows of every kind's table, kind.h: every step carries some of
 * them, whatever its kind).
 */
static int copy_kind_fields(json_t *spec, const json_t *step, const json_t *params, const char *run_id,
			    json_t *templated)
{
	const struct step_kind *kind;
	const struct step_key *row;
	const char *name;
	int error;

	for (size_t i = 0; (kind = step_kind_at(i)) != NULL; i++)
		for (row = kind->keys; row != NULL && (row->name || row->names); row++) {
			if ((row->flags & STK_PLAN) == 0)
				continue;
			for (size_t j = 0; (name = row->name ? (j == 0 ? row->name : NULL) : row->names(j)) != NULL; j++)
				if ((error = copy_field(spec, step, row->field && row->name ? row->field : name, params,
							run_id, templated)) < 0)
					return error;
		}
	return FERRY_OK;
}

/*
 * The names of step i's ancestors, nearest first (breadth-first along
 * needs), and whether one of them stages data for the steps below it.
 */
static json_t *ancestors(struct graph *g, const struct plan_step *ps, size_t i, int *stages_up)
{
	json_t *out = json_array();
	size_t head = 0, k;
	int at = (int)i;

	*stages_up = 0;
	g->stamp++;
	for (;;) {
		/* at's needs join the list once each (a name no step has: compared, as it is rare) */
		for (k = g->first[at]; k < g->first[at + 1]; k++) {
			int j = g->need[k], seen = 0;
			if (j >= 0) {
				seen = g->mark[j] == g->stamp;
				g->mark[j] = g->stamp;
			} else {
				for (size_t m = 0; m < json_array_size(out) && !seen; m++)
					seen = json_equal(json_array_get(out, m), g->name[k]);
			}
			if (!seen)
				json_array_append(out, (json_t *)g->name[k]);
		}
		/* the next one in the list that is a step */
		for (at = -1; at < 0 && head < json_array_size(out); head++)
			at = step_index(g, json_string_value(json_array_get(out, head)));
		if (at < 0)
			break;
		if (ps[at].kind->flags & SKF_STAGES)
			*stages_up = 1;
	}
	return out;
}

#define ARG_STRLEN_MAX (128 * 1024 - 1) /* the kernel's MAX_ARG_STRLEN, less its NUL */
#define EXEC_TOTAL_MAX (1024 * 1024)      /* argv and env together: half of ARG_MAX's usual 2 MiB */

/*
 * Whether a step's command and environment can be executed at all: the
 * kernel refuses (E2BIG) a string of 128 KiB or more, and argv and envp
 * past ARG_MAX; the daemon's own FERRY_* variables come on top, hence half.
 */
static int exec_size_check(const json_t *cmd, const json_t *env)
{
	size_t total = 0, i;
	const char *key;
	json_t *v;

	json_array_foreach(cmd, i, v) {
		size_t n = strlen(json_string_value(v) ? json_string_value(v) : "");
		if (n > ARG_STRLEN_MAX) {
			ferry_error_set("command[%zu] is %zu bytes after its templates, more than the %d the "
					"kernel takes in one argument; pass a large input as a file", i, n,
					ARG_STRLEN_MAX);
			return FERRY_EINVALID;
		}
		total += n + 1;
	}
	json_object_foreach((json_t *)env, key, v) {
		size_t n = strlen(key) + 1 + strlen(json_string_value(v) ? json_string_value(v) : "");
		if (n > ARG_STRLEN_MAX) {
			ferry_error_set("env %s is %zu bytes after its templates, more than the %d the kernel "
					"takes in one environment variable; pass a large input as a file", key,
					n, ARG_STRLEN_MAX);
			return FERRY_EINVALID;
		}
		total += n + 1;
	}
	if (total > EXEC_TOTAL_MAX) {
		ferry_error_set("its command and environment hold %zu bytes, more than the %d a job may be "
				"given (the kernel's limit is about 2 MiB with the daemon's variables); pass large "
				"inputs as files", total, EXEC_TOTAL_MAX);
		return FERRY_EINVALID;
	}
	return FERRY_OK;
}

/*
 * The resolved spec of one step: command, env, workdir and the kind's fields
 * rendered. The script of a shell command (sh -c SCRIPT) gets its params
 * shell-quoted; every param is also in the env as FERRY_PARAM_NAME, under
 * the step's own env.
 */
static int step_spec(json_t **out, const json_t *step, const json_t *params, const json_t *run_env,
		     const char *run_id)
{
	json_t *spec = json_object(), *cmd = json_array(), *env = json_object(), *v;
	json_t *templated = json_array();
	const char *key, *wd;
	int script = tmpl_shell_script_index(json_object_get(step, "command"));
	size_t i;
	int error = FERRY_OK;

	json_array_foreach(json_object_get(step, "command"), i, v) {
		json_t *r = NULL;
		if ((error = render_or_keep(&r, json_string_value(v), (int)i == script, params, run_id, templated,
					    json_pack("[s,I]", "command", (json_int_t)i))) < 0)
			goto out;
		json_array_append_new(cmd, r);
	}
	json_object_foreach((json_t *)params, key, v) {
		char *name = tmpl_param_env_name(key);
		json_object_set(env, name, v);
		free(name);
	}
	json_object_foreach((json_t *)run_env, key, v)
		json_object_set(env, key, v);
	json_object_foreach(json_object_get(step, "env"), key, v) {
		json_t *r = NULL;
		if ((error = render_or_keep(&r, json_string_value(v), false, params, run_id, templated,
					    json_pack("[s,s]", "env", key))) < 0)
			goto out;
		json_object_set_new(env, key, r);
	}
	wd = str_at(step, "workdir");
	if (wd) {
		json_t *r = NULL;
		if ((error = render_or_keep(&r, wd, false, params, run_id, templated, json_pack("[s]", "workdir"))) < 0)
			goto out;
		json_object_set_new(spec, "workdir", r);
	}
	json_object_set(spec, "image", json_object_get(step, "image"));
	/* the condition, evaluated at claim time (steps.c), what a finally step is, its queue and priority
	 * (db/functions/queues.sql); when present */
	{
		static const char *const flow[] = {"when", "when_model", "finally", "fail_run", "foreach", "max_parallel",
						   "min_success", "sweep", "select", "queue", "priority", "gang",
						   "preemptible"};
		for (i = 0; i < sizeof(flow) / sizeof(flow[0]); i++)
			if ((v = json_object_get(step, flow[i])) != NULL)
				json_object_set(spec, flow[i], v);
	}
	/* where the job runs (the engine picks its executor type from these) and the kind's fields */
	if ((error = copy_kind_fields(spec, step, params, run_id, templated)) == FERRY_OK)
		error = exec_size_check(cmd, env);
out:
	json_object_set_new(spec, "command", cmd);
	json_object_set_new(spec, "env", env);
	/* always, empty too: the claim renders only what is listed (steps.c), nothing else is a template */
	json_object_set(spec, "templated", templated);
	json_decref(templated);
	if (error < 0) {
		json_decref(spec);
		spec = NULL;
	}
	*out = spec;
	return error;
}

/* Whether step st lists need with if: any ("needs_any" in its spec). */
static int needs_any(const json_t *st, const char *need)
{
	const json_t *v;
	size_t k;

	json_array_foreach(json_object_get(st, "needs_any"), k, v)
		if (strcmp(json_string_value(v), need) == 0)
			return 1;
	return 0;
}

/*
 * Whether a step is handed its ancestors' outputs and the run at claim time:
 * never one that waits for a person; always a kind that takes inputs; any
 * other (a plain job) when a step above it stages data, when it keeps its
 * result in the step cache, or when its rendered spec still refers to
 * something ({{steps.…}}).
 */
static int wants_ancestors(const struct plan_step *s, const json_t *step, int stages_up)
{
	char *txt;
	int refers;

	if (json_object_get(step, "when") != NULL || s->final || json_object_get(step, "foreach") != NULL)
		return 1; /* the condition reads them; a finally step is told how the run went; a list is read */
	if (s->kind->flags & SKF_WAITS)
		return 0;
	if ((s->kind->flags & SKF_INPUTS) || stages_up || json_is_true(json_object_get(step, "cache")))
		return 1;
	txt = json_dumps(s->spec, JSON_COMPACT);
	refers = txt != NULL && strstr(txt, "{{") != NULL;
	free(txt);
	return refers;
}

/* Takes the workflow from in: parsed here from YAML, or a copy of the registered one. */
static int plan_workflow(struct run_plan *p, const struct run_plan_in *in, cfg_errors *errs)
{
	char hash[65];
	int error;

	if (in->yaml == NULL) {
		if (in->spec == NULL || in->hash == NULL || in->spec_yaml == NULL) {
			ferry_error_set("no workflow to plan: give its YAML or a registered version");
			return FERRY_EINVALID;
		}
		p->spec = json_deep_copy(in->spec);
		p->hash = xstrdup(in->hash);
		p->yaml = xstrdup(in->spec_yaml);
	} else {
		if ((error = cfg_workflow_parse(&p->spec, hash, in->yaml, in->yaml_len,
						in->filename ? in->filename : "<inline>", errs)) < 0) {
			ferry_error_set("invalid workflow: %zu error%s", errs->len, errs->len == 1 ? "" : "s");
			return error;
		}
		p->hash = xstrdup(hash);
		p->yaml = xstrndup(in->yaml, in->yaml_len);
	}
	p->workflow = xstrdup(str_at(p->spec, "name") ? str_at(p->spec, "name") : "");
	return FERRY_OK;
}

/* Fills step i's row but its spec, state and deps; FERRY_EINVALID for an unknown kind. */
static int plan_step_init(struct plan_step *s, const json_t *st, size_t i)
{
	const char *kind = str_at(st, "kind");
	const json_t *retry = json_object_get(st, "retry");

	s->name = xstrdup(str_at(st, "name") ? str_at(st, "name") : "");
	s->idx = (int)i;
	s->kind = kind ? step_kind_find(kind) : step_kind_default();
	if (s->kind == NULL) {
		ferry_error_set("step \"%s\": unknown kind \"%s\"", s->name, kind);
		return FERRY_EINVALID;
	}
	s->retry_limit = (int)json_integer_value(json_object_get(retry, "limit"));
	s->backoff_ms = json_integer_value(json_object_get(retry, "backoff_ms"));
	s->max_backoff_ms = json_integer_value(json_object_get(retry, "max_backoff_ms"));
	s->timeout_ms = json_integer_value(json_object_get(st, "timeout_ms"));
	/* a condition is evaluated at claim time, also for a kind that then waits */
	s->waits = (s->kind->flags & SKF_WAITS) != 0 && json_object_get(st, "when") == NULL;
	s->final = json_is_true(json_object_get(st, "finally"));
	s->restage = (s->kind->flags & SKF_STAGES) != 0;
	return FERRY_OK;
}

int run_plan_make(struct run_plan **out, const struct run_plan_in *in, cfg_errors *errs)
{
	struct run_plan *p = xcalloc(1, sizeof(*p));
	struct graph g = {0};
	const json_t *steps;
	char *sel = NULL, *reuse = NULL, run_id[32];
	size_t i, nedges = 0;
	json_t *st;
	int error;

	*out = NULL;
	p->run_id = in->run_id;
	snprintf(run_id, sizeof(run_id), "%lld", (long long)in->run_id);
	if ((error = plan_workflow(p, in, errs)) < 0)
		goto out;
	if ((error = resolve_params(p, in)) < 0)
		goto out;
	steps = json_object_get(p->spec, "steps");
	p->nsteps = json_array_size(steps);
	p->steps = xcalloc(p->nsteps + 1, sizeof(*p->steps));
	sel = xmalloc(p->nsteps + 1);
	graph_init(&g, steps);
	if ((error = select_steps(sel, &g, in)) < 0)
		goto out;
	json_array_foreach(steps, i, st) {
		if ((error = plan_step_init(&p->steps[i], st, i)) < 0)
			goto out;
		nedges += json_array_size(json_object_get(st, "needs"));
	}
	p->edges = xcalloc(nedges + 1, sizeof(*p->edges));
	reuse = xmalloc(p->nsteps + 1);
	reuse_steps(reuse, &g, p->steps, sel, in);

	json_array_foreach(steps, i, st) {
		struct plan_step *s = &p->steps[i];
		int stages_up = 0;

		for (size_t k = g.first[i]; k < g.first[i + 1]; k++) {
			int j = g.need[k];
			if (j < 0)
				continue;
			s->deps_pending += sel[j] != 0;
			p->edges[p->nedges].step = (int)i;
			p->edges[p->nedges].needs = j;
			p->edges[p->nedges].any = needs_any(st, p->steps[j].name);
			p->nedges++;
		}
		if ((error = step_spec(&s->spec, st, p->params, in->env, run_id)) < 0) {
			char msg[512];
			snprintf(msg, sizeof(msg), "step \"%s\": %s", s->name, ferry_error_last());
			ferry_error_set("%s", msg);
			goto out;
		}
		{
			json_t *anc = ancestors(&g, p->steps, i, &stages_up);
			if (s->final) /* every step of steps: is before it */
				for (size_t k = 0; k < p->nsteps; k++)
					if (!json_is_true(json_object_get(json_array_get(steps, k), "finally")))
						json_array_append_new(anc, json_string(str_at(json_array_get(steps, k),
											   "name")));
			if (wants_ancestors(s, st, stages_up))
				json_object_set(s->spec, "ancestors", anc);
			json_decref(anc);
		}
		if (!sel[i] && reuse[i]) {
			s->state = STEP_SUCCEEDED;
			s->reason = "reused from an earlier run";
			s->reuse = 1;
			p->nreuse++;
			continue;
		}
		if (!sel[i]) {
			s->state = STEP_SKIPPED;
			s->reason = "not selected for this dev run";
			continue;
		}
		p->open_steps++;
		if (s->final) {
			s->deps_pending++; /* on the run's other steps: ferry_release */
			p->final_steps++;
		}
		s->state = s->deps_pending > 0 ? STEP_BLOCKED : s->waits ? STEP_WAITING : STEP_READY;
		p->any_ready |= s->state == STEP_READY;
		p->starts_running |= s->state == STEP_WAITING;
	}
out:
	graph_dispose(&g);
	free(sel);
	free(reuse);
	if (error < 0) {
		run_plan_free(p);
		return error;
	}
	*out = p;
	return FERRY_OK;
}

/* ---- the command files (run_plan_check_files) ---- */

/* A word the plan could not settle: a template left for claim time, or a shell variable. */
static int unsettled(const char *w)
{
	return strstr(w, "{{") != NULL || strchr(w, '$') != NULL;
}

/* Whether argv[0] is an interpreter whose first operand is a script file. */
static int is_interpreter(const char *argv0)
{
	static const char *const names[] = {"sh", "bash", "python", "python3", "Rscript",
					    "node", "perl", "ruby"};
	const char *base = strrchr(argv0, '/') ? strrchr(argv0, '/') + 1 : argv0;
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(base, names[i]) == 0)
			return 1;
	/* python3.12 and the like */
	if (strncmp(base, "python3.", 8) != 0 || base[8] == '\0')
		return 0;
	for (base += 8; *base; base++)
		if (!isdigit((unsigned char)*base))
			return 0;
	return 1;
}

/* Whether an operand reads as a relative file: a '/' in it, or an extension (x.py, run.sh, a.R). */
static int looks_like_file(const char *w)
{
	const char *dot = strrchr(w, '.');

	if (w[0] == '\0' || w[0] == '/' || unsettled(w))
		return 0;
	if (strchr(w, '/'))
		return 1;
	return dot && dot != w && isalpha((unsigned char)dot[1]);
}

/*
 * The relative file a command names (a word of cmd, not copied), or NULL:
 * argv[0] when it is a relative path, else an interpreter's script. An
 * option that takes code or a module in one of the interpreters (-c, -m,
 * -e, -E, bundled like -ec, --eval) ends the search, even where it means
 * something else (bash -e): a file left unchecked fails later as it did,
 * a file wrongly checked would refuse a good run. `--` ends the options.
 */
static const char *command_file(const json_t *cmd)
{
	const char *a0 = json_string_value(json_array_get(cmd, 0)), *w = NULL;
	size_t i, n = json_array_size(cmd);

	if (a0 == NULL || unsettled(a0))
		return NULL;
	if (a0[0] != '/' && strchr(a0, '/'))
		return a0;
	if (!is_interpreter(a0))
		return NULL;
	for (i = 1; i < n; i++) {
		w = json_string_value(json_array_get(cmd, i));
		if (w == NULL)
			return NULL;
		if (strcmp(w, "--") == 0) {
			w = json_string_value(json_array_get(cmd, i + 1));
			break;
		}
		if (w[0] != '-' || w[1] == '\0')
			break;
		if (w[1] == '-') {
			if (strncmp(w, "--eval", 6) == 0 || strncmp(w, "--print", 7) == 0 ||
			    strncmp(w, "--command", 9) == 0)
				return NULL;
			continue;
		}
		if (strpbrk(w + 1, "cmeE"))
			return NULL;
	}
	return i < n && w && looks_like_file(w) ? w : NULL;
}

/*
 * The script of a one-string command (sh -c SCRIPT) as words, when it is one
 * plain command line: nothing but words of letters, digits and _ . / = : , +
 * - @ % between blanks, so it splits as the shell would. Else NULL.
 */
static json_t *plain_script_words(const json_t *cmd)
{
	int k = tmpl_shell_script_index(cmd);
	const char *script = k < 0 ? NULL : json_string_value(json_array_get(cmd, (size_t)k)), *c;
	json_t *words;
	size_t n;

	if (script == NULL)
		return NULL;
	n = strlen(script);
	while (n > 0 && strchr(" \t\n", script[n - 1]))
		n--;
	for (c = script; c < script + n; c++)
		if (!isalnum((unsigned char)*c) && !strchr(" \t_./=:,+-@%", *c))
			return NULL;
	words = json_array();
	for (c = script; c < script + n;) {
		size_t len = strcspn(c, " \t");
		if (c + len > script + n)
			len = (size_t)(script + n - c);
		if (len > 0)
			json_array_append_new(words, json_stringn(c, len));
		c += len;
		c += strspn(c, " \t");
	}
	return words;
}

/* The relative file a step's command names, the caller's to free; or NULL. */
static char *step_command_file(const json_t *cmd)
{
	const char *f = command_file(cmd);
	json_t *words;
	char *out;

	if (f != NULL)
		return xstrdup(f);
	if ((words = plain_script_words(cmd)) == NULL)
		return NULL;
	f = command_file(words);
	out = f ? xstrdup(f) : NULL;
	json_decref(words);
	return out;
}

int run_plan_check_files(const struct run_plan *p, const char *workdir)
{
	struct stat st;

	/* a registered workflow's directory may have gone since it was registered */
	if (workdir && (stat(workdir, &st) < 0 || !S_ISDIR(st.st_mode))) {
		ferry_error_set("the run's working directory %s is not a directory on this machine; "
				"register the workflow again from where its files are (ferry workflow "
				"register FILE) or give \"workdir\"", workdir);
		return FERRY_EINVALID;
	}
	for (size_t i = 0; i < p->nsteps; i++) {
		const struct plan_step *s = &p->steps[i];
		const char *wd = str_at(s->spec, "workdir"), *image = str_at(s->spec, "image");
		char *dir, *path, *file;
		int found;

		if (!(s->kind->flags & SKF_JOB) || s->state == STEP_SKIPPED || s->reuse ||
		    (image && strcmp(image, "host") != 0) || (wd && unsettled(wd)))
			continue;
		if ((file = step_command_file(json_object_get(s->spec, "command"))) == NULL)
			continue;
		if (wd == NULL && workdir == NULL) {
			ferry_error_set("step \"%s\": command file %s is a relative path but the run has no "
					"working directory (steps without one run in an empty attempt "
					"directory); submit the workflow's file (ferry submit FILE), register "
					"it from its directory (ferry workflow register FILE), give \"workdir\", "
					"or set the step's workdir:", s->name, file);
			free(file);
			return FERRY_EINVALID;
		}
		if (wd && wd[0] != '/' && workdir == NULL) {
			ferry_error_set("step \"%s\": command file %s is looked for under the step's "
					"workdir: %s, which is relative, but the run has no working directory; "
					"make the step's workdir: absolute, submit the workflow's file (ferry "
					"submit FILE) or register it from its directory (ferry workflow "
					"register FILE)", s->name, file, wd);
			free(file);
			return FERRY_EINVALID;
		}
		if (wd == NULL)
			dir = xstrdup(workdir);
		else if (wd[0] == '/')
			dir = xstrdup(wd);
		else
			dir = xasprintf("%s/%s", workdir, wd);
		path = xasprintf("%s/%s", dir, file);
		found = access(path, F_OK) == 0;
		if (!found && wd == NULL)
			ferry_error_set("step \"%s\": command file %s not found in %s (the run's working "
					"directory); set the step's workdir: or submit from the directory "
					"that has it", s->name, file, dir);
		else if (!found)
			ferry_error_set("step \"%s\": command file %s not found in %s (the step's workdir: "
					"%s); fix the step's workdir: or the command", s->name, file, dir, wd);
		free(path);
		free(dir);
		free(file);
		if (!found)
			return FERRY_EINVALID;
	}
	return FERRY_OK;
}

void run_plan_free(struct run_plan *p)
{
	if (p == NULL)
		return;
	for (size_t i = 0; p->steps && i < p->nsteps; i++) {
		free(p->steps[i].name);
		json_decref(p->steps[i].spec);
	}
	free(p->steps);
	free(p->edges);
	free(p->workflow);
	free(p->hash);
	free(p->yaml);
	json_decref(p->spec);
	json_decref(p->params);
	free(p);
}

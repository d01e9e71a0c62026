/*
 * config_schedule — a workflow's `schedule:` and `triggers:` (schedules.md):
 * what starts its runs once it is registered. Both are checked here, where
 * a mistake can still be shown at its line and column, and written to the
 * spec only when present (a workflow without them has the spec it had
 * before they existed).
 *
 *   schedule: "0 3 * * *"                       one schedule, all defaults
 *   schedule: {cron: "0 3 * * *", timezone: Europe/Berlin, gap: shift|skip,
 *              overlap: first|last, concurrency: allow|forbid|replace,
 *              catchup: all|latest|none, max_catchup: 10, params: {K: V},
 *              paused: false, name: nightly}
 *   schedule: [{…}, {…}]                         several (names default
 *                                                to schedule-1, schedule-2…)
 *     → "schedules": [{"name","cron","timezone","gap","overlap","concurrency",
 *                      "catchup","max_catchup","params","paused"}]
 *
 *   triggers:
 *     - data: {path: data/incoming, quiet: 30s, ignore: ["*.csv.tmp"], name: incoming}
 *     - git: {repo: . | /srv/repo.git | https://…, branch: main,
 *             path: workflows/x.yaml, name: code}
 *     → "triggers": [{"name","kind":"data","path","quiet_ms","ignore"},
 *                    {"name","kind":"git","repo","branch","path"}]
 *
 * A relative data path or git repository is the workflow's registered
 * directory's; a relative one may not climb out of it with "..".
 */
#include "plan/config_priv.h"

#include <string.h>

#include "lib/cron.h"

/* The keys of one schedule, in their order. */
enum { SCK_CRON, SCK_TZ, SCK_GAP, SCK_OVERLAP, SCK_CONC, SCK_CATCHUP, SCK_MAXC, SCK_PARAMS, SCK_PAUSED,
       SCK_NAME, SCK_N };
static const char *const schedule_keys[SCK_N] = {"cron", "timezone", "gap", "overlap", "concurrency",
						 "catchup", "max_catchup", "params", "paused", "name"};

enum { DK_PATH, DK_QUIET, DK_IGNORE, DK_NAME, DK_N };
static const char *const data_keys[DK_N] = {"path", "quiet", "ignore", "name"};

enum { GK_REPO, GK_BRANCH, GK_PATH, GK_NAME, GK_N };
static const char *const git_keys[GK_N] = {"repo", "branch", "path", "name"};

/* Default quiet period of a data trigger: a copy that pauses this long is taken as done. */
#define DATA_QUIET_DEFAULT_MS 30000

/* Text of n if it is one of the words in `one_of` (space separated), else an error and def. */
static const char *word(struct ctx *c, const yaml_node_t *n, const char *what, const char *one_of,
			const char *def)
{
	const char *s, *p;
	size_t len;

	if (n == NULL || !present(n) || (s = cfg_text(c, n, what)) == NULL)
		return def;
	len = strlen(s);
	for (p = one_of; (p = strstr(p, s)) != NULL; p += len)
		if ((p == one_of || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0'))
			return s;
	err_node(c, n, "%s %s is not valid; use one of: %s", what, cfg_q(c, s), one_of);
	return def;
}

/* Where the column of an expression's character col (1-based) is in the file. */
static void err_in_scalar(struct ctx *c, const yaml_node_t *n, int col, const char *msg)
{
	int quoted = n->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
		     n->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
	int single_line = n->start_mark.line == n->end_mark.line;

	if (col > 0 && single_line)
		cfg_err_at(c, pos1(n->start_mark.line), pos1(n->start_mark.column) + quoted + col - 1, "%s", msg);
	else
		err_node(c, n, "%s", msg);
}

static void check_cron(struct ctx *c, const yaml_node_t *n, const char *expr)
{
	struct cron *cr = NULL;
	int col = 0;

	if (cron_parse(&cr, expr, &col) < 0)
		err_in_scalar(c, n, col, ferry_error_last());
	cron_free(cr);
}

/* A relative path may not climb out of the workflow's directory. */
static bool path_stays(const char *p)
{
	const char *s = p;

	if (p[0] == '/')
		return true;
	while (*s != '\0') {
		size_t n = strcspn(s, "/");
		if (n == 2 && s[0] == '.' && s[1] == '.')
			return false;
		s += n;
		s += *s == '/';
	}
	return true;
}

/* params: {NAME: VALUE} for the runs a schedule starts: declared parameters only. */
static json_t *parse_run_params(struct ctx *c, const yaml_node_t *n)
{
	json_t *out = json_object();
	const yaml_node_t *key, *val;
	const char *name, *v;
	size_t k = 0;

	if (n->type != YAML_MAPPING_NODE) {
		err_node(c, n, "schedule params must be a mapping of parameter names to values");
		return out;
	}
	while (cfg_next_pair(c, n, &k, &key, &val)) {
		json_t *decl;
		struct sbuf why = {0};
		if ((name = cfg_text(c, key, "a parameter name")) == NULL || (v = cfg_text(c, val, name)) == NULL)
			continue;
		if ((decl = json_object_get(c->params, name)) == NULL) {
			err_node(c, key, "schedule params: %s is not a parameter of this workflow (declare it "
				 "under params:)", cfg_q(c, name));
			continue;
		}
		if (cfg_param_check(decl, v, &why) < 0)
			err_node(c, val, "schedule params: %s %s", cfg_q(c, name), why.p ? why.p : "is not valid");
		free(why.p);
		json_object_set_new(out, name, json_string(v));
	}
	return out;
}

static json_t *parse_schedule(struct ctx *c, const yaml_node_t *n, const char *def_name)
{
	const yaml_node_t *v[SCK_N] = {NULL};
	const char *s;
	json_t *js = json_object();
	int64_t maxc = 10;

	json_object_set_new(js, "name", json_string(def_name));
	if (n->type == YAML_SCALAR_NODE) { /* the cron expression alone */
		if ((s = cfg_text(c, n, "schedule")) != NULL) {
			check_cron(c, n, s);
			json_object_set_new(js, "cron", json_string(s));
		}
		v[SCK_CRON] = n;
	} else if (!cfg_map_fields(c, n, "schedule", schedule_keys, SCK_N, v, NULL)) {
		return js;
	} else if (v[SCK_CRON] == NULL) {
		err_node(c, n, "a schedule needs \"cron\" (e.g. cron: \"0 3 * * *\", or @daily)");
	} else if ((s = cfg_text(c, v[SCK_CRON], "cron")) != NULL) {
		check_cron(c, v[SCK_CRON], s);
		json_object_set_new(js, "cron", json_string(s));
	}
	if (present(v[SCK_NAME]) && (s = cfg_text(c, v[SCK_NAME], "schedule name")) != NULL) {
		if (!cfg_name_ok(s))
			err_node(c, v[SCK_NAME], "schedule name %s is not valid; use 1-63 of a-z, 0-9, _, . and -",
				 cfg_q(c, s));
		json_object_set_new(js, "name", json_string(s));
	}
	s = "UTC";
	if (present(v[SCK_TZ]) && (s = cfg_text(c, v[SCK_TZ], "timezone")) != NULL && cron_zone_check(s) < 0)
		err_node(c, v[SCK_TZ], "%s", ferry_error_last());
	json_object_set_new(js, "timezone", json_string(s ? s : "UTC"));
	json_object_set_new(js, "gap", json_string(word(c, v[SCK_GAP], "gap", "shift skip", "shift")));
	json_object_set_new(js, "overlap", json_string(word(c, v[SCK_OVERLAP], "overlap", "first last", "first")));
	json_object_set_new(js, "concurrency",
			    json_string(word(c, v[SCK_CONC], "concurrency", "allow forbid replace", "allow")));
	json_object_set_new(js, "catchup", json_string(word(c, v[SCK_CATCHUP], "catchup", "all latest none", "all")));
	if (present(v[SCK_MAXC]) && (s = cfg_text(c, v[SCK_MAXC], "max_catchup")) != NULL &&
	    (parse_int64(s, &maxc) < 0 || maxc < 0 || maxc > 1000)) {
		err_node(c, v[SCK_MAXC], "max_catchup must be a whole number from 0 to 1000, not %s", cfg_q(c, s));
		maxc = 10;
	}
	json_object_set_new(js, "max_catchup", json_integer(maxc));
	json_object_set_new(js, "params", present(v[SCK_PARAMS]) ? parse_run_params(c, v[SCK_PARAMS]) : json_object());
	json_object_set_new(js, "paused", json_boolean(strcmp(word(c, v[SCK_PAUSED], "paused", "true false",
									 "false"), "true") == 0));
	return js;
}

static json_t *parse_data(struct ctx *c, const yaml_node_t *n, const char *def_name)
{
	const yaml_node_t *v[DK_N] = {NULL}, *it;
	json_t *js = json_pack("{s:s,s:s,s:I,s:[]}", "name", def_name, "kind", "data", "quiet_ms",
			       (json_int_t)DATA_QUIET_DEFAULT_MS, "ignore");
	const char *s;
	int64_t ms;
	size_t k = 0;

	if (n->type == YAML_SCALAR_NODE) { /* data: DIR */
		v[DK_PATH] = n;
	} else if (!cfg_map_fields(c, n, "data trigger", data_keys, DK_N, v, NULL)) {
		return js;
	}
	if (v[DK_PATH] == NULL || !present(v[DK_PATH]))
		err_node(c, n, "a data trigger needs \"path\", the directory to watch");
	else if ((s = cfg_text(c, v[DK_PATH], "path")) != NULL && !path_stays(s))
		err_node(c, v[DK_PATH], "data trigger path %s climbs out of the workflow's directory with \"..\"",
			 cfg_q(c, s));
	else if (s != NULL)
		json_object_set_new(js, "path", json_string(s));
	if (present(v[DK_QUIET]) && (s = cfg_text(c, v[DK_QUIET], "quiet")) != NULL) {
		if (duration_parse(s, &ms) < 0)
			err_node(c, v[DK_QUIET], "quiet: %s", ferry_error_last());
		else
			json_object_set_new(js, "quiet_ms", json_integer(ms));
	}
	if (present(v[DK_IGNORE]))
		while (cfg_next_item(c, v[DK_IGNORE], &k, &it))
			if ((s = cfg_text(c, it, "an ignore pattern")) != NULL)
				json_array_append_new(json_object_get(js, "ignore"), json_string(s));
	if (present(v[DK_NAME]) && (s = cfg_text(c, v[DK_NAME], "trigger name")) != NULL)
		json_object_set_new(js, "name", json_string(s));
	return js;
}

static json_t *parse_git(struct ctx *c, const yaml_node_t *n, const char *def_name)
{
	const yaml_node_t *v[GK_N] = {NULL};
	json_t *js = json_pack("{s:s,s:s,s:s,s:n}", "name", def_name, "kind", "git", "branch", "main", "path");
	const char *s;

	if (!cfg_map_fields(c, n, "git trigger", git_keys, GK_N, v, NULL))
		return js;
	if (v[GK_REPO] == NULL || !present(v[GK_REPO]))
		err_node(c, n, "a git trigger needs \"repo\", a repository path or URL");
	else if ((s = cfg_text(c, v[GK_REPO], "repo")) != NULL && strstr(s, "://") == NULL && !path_stays(s))
		err_node(c, v[GK_REPO], "git trigger repo %s climbs out of the workflow's directory with \"..\"",
			 cfg_q(c, s));
	else if (s != NULL)
		json_object_set_new(js, "repo", json_string(s));
	if (present(v[GK_BRANCH]) && (s = cfg_text(c, v[GK_BRANCH], "branch")) != NULL)
		json_object_set_new(js, "branch", json_string(s));
	if (present(v[GK_PATH]) && (s = cfg_text(c, v[GK_PATH], "path")) != NULL) {
		if (s[0] == '/' || !path_stays(s))
			err_node(c, v[GK_PATH], "git trigger path %s must be a path inside the repository",
				 cfg_q(c, s));
		json_object_set_new(js, "path", json_string(s));
	}
	if (present(v[GK_NAME]) && (s = cfg_text(c, v[GK_NAME], "trigger name")) != NULL)
		json_object_set_new(js, "name", json_string(s));
	return js;
}

/* Names are unique among a workflow's schedules, and among its triggers. */
static void check_unique(struct ctx *c, json_t *list, const yaml_node_t *const *nodes, const char *what)
{
	size_t i, j;

	for (i = 0; i < json_array_size(list); i++) {
		const char *a = json_string_value(json_object_get(json_array_get(list, i), "name")), *b;
		for (j = 0; j < i; j++)
			if (a && (b = json_string_value(json_object_get(json_array_get(list, j), "name"))) != NULL &&
			    strcmp(a, b) == 0) {
				err_node(c, nodes[i], "%s name %s is used twice; give each a distinct name:", what,
					 cfg_q(c, a));
				break;
			}
		if (a && !cfg_name_ok(a))
			err_node(c, nodes[i], "%s name %s is not valid; use 1-63 of a-z, 0-9, _, . and -", what,
				 cfg_q(c, a));
	}
}

#define MAX_SCHEDULES 32

void cfg_schedule_fields(struct ctx *c, const yaml_node_t *sched, const yaml_node_t *trig, json_t *spec)
{
	const yaml_node_t *nodes[MAX_SCHEDULES], *it;
	size_t k = 0, n = 0;

	if (present(sched)) {
		json_t *list = json_array();
		int many = sched->type == YAML_SEQUENCE_NODE;
		if (many && nitems(sched) > MAX_SCHEDULES) {
			err_node(c, sched, "at most %d schedules per workflow", MAX_SCHEDULES);
		} else {
			while (many ? cfg_next_item(c, sched, &k, &it) : (it = sched, k++ == 0)) {
				char name[32];
				if (many)
					snprintf(name, sizeof(name), "schedule-%zu", n + 1);
				else
					snprintf(name, sizeof(name), "schedule");
				nodes[n++] = it;
				json_array_append_new(list, parse_schedule(c, it, name));
			}
			check_unique(c, list, nodes, "schedule");
		}
		json_object_set_new(spec, "schedules", list);
	}
	if (present(trig)) {
		json_t *list = json_array();
		int ndata = 0, ngit = 0;
		if (trig->type != YAML_SEQUENCE_NODE) {
			err_node(c, trig, "triggers must be a list (- data: {path: DIR} or - git: {repo: R})");
		} else if (nitems(trig) > MAX_SCHEDULES) {
			err_node(c, trig, "at most %d triggers per workflow", MAX_SCHEDULES);
		} else {
			for (n = 0, k = 0; cfg_next_item(c, trig, &k, &it);) {
				const yaml_node_t *key, *val;
				const char *kind;
				size_t j = 0;
				char name[32];
				if (it->type != YAML_MAPPING_NODE || npairs(it) != 1 ||
				    !cfg_next_pair(c, it, &j, &key, &val) ||
				    (kind = cfg_text(c, key, "trigger kind")) == NULL) {
					err_node(c, it, "a trigger is one of data: {path: DIR, quiet: 30s} or "
						 "git: {repo: R, branch: main}");
					continue;
				}
				if (strcmp(kind, "data") == 0) {
					if (ndata++ == 0)
						snprintf(name, sizeof(name), "data");
					else
						snprintf(name, sizeof(name), "data-%d", ndata);
					json_array_append_new(list, parse_data(c, val, name));
				} else if (strcmp(kind, "git") == 0) {
					if (ngit++ == 0)
						snprintf(name, sizeof(name), "git");
					else
						snprintf(name, sizeof(name), "git-%d", ngit);
					json_array_append_new(list, parse_git(c, val, name));
				} else {
					err_node(c, key, "unknown trigger %s; use data or git", cfg_q(c, kind));
					continue;
				}
				nodes[n++] = it;
			}
			check_unique(c, list, nodes, "trigger");
		}
		json_object_set_new(spec, "triggers", list);
	}
}

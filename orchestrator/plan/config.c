/*
 * config — turns a workflow YAML file into the normalised JSON spec that the
 * store keeps per content hash, or into a list of every problem found.
 *
 * The file is loaded whole with libyaml's document API, then checked in
 * passes that never recurse deeper than the schema: (1) repeated keys, by a
 * linear walk over all nodes of the document; (2) the schema walk, which
 * builds the spec and queues {{steps.…}} template references (the keys only
 * some step kinds take are parsed in config_kinds.c); (3) the step graph:
 * needs are resolved, the transitive upstream set of every step is computed
 * as a bitset, cycles are reported once per strongly connected group, the
 * queued template references are checked and evaluate steps that compare
 * against production get their model. Errors carry their position and are
 * sorted at the end. What a template is ({{…}}, its expressions, how it is
 * rendered) is template.c's; here templates are only checked, at the
 * position of their YAML node, and kept as written.
 *
 * A node reached through an alias is that same node (libyaml shares it).
 * Aliases could still multiply work (one big list used by 1000 steps), so
 * the schema walk is charged per node and per byte of text against a budget
 * proportional to the input, and stops with one error when it runs out.
 */
#include "plan/config_priv.h"
#include "plan/template.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define MAX_STEPS 5000 /* a 2,000-step DAG is planned in ~50 ms and drawn by the console (make bench: bench_ui) */
#define MAX_DEPTH 64     /* nesting levels; the schema itself needs 5 */
#define MAX_ANCHORS 256
#define MAX_SHOWN_ERRORS 100
#define NAME_CHARS "abcdefghijklmnopqrstuvwxyz0123456789_.-"

static const char *const top_keys[] = {"name", "description", "params", "steps", "schedule", "triggers",
				       "finally", "queue", "priority"};
enum { TK_NAME, TK_DESC, TK_PARAMS, TK_STEPS, TK_SCHEDULE, TK_TRIGGERS, TK_FINALLY, TK_QUEUE, TK_PRIORITY, TK_N };
static const char *const param_keys[] = {"default", "description", "type", "values",
					 "pattern", "min", "max"};
static const char *const retry_keys[] = {"limit", "backoff", "max_backoff"};
/* The keys every step may have, whatever its kind; its kind's own follow (cfg_keys_list). */
static const char *const generic_keys[] = {"name", "kind", "needs", "command", "env", "image",
					   "workdir", "timeout", "retry", "when", "fail_run", "foreach", "sweep",
					   "max_parallel", "min_success", "gang", "queue", "priority", "preemptible"};
enum { GK_NAME, GK_KIND, GK_NEEDS, GK_COMMAND, GK_ENV, GK_IMAGE, GK_WORKDIR, GK_TIMEOUT, GK_RETRY, GK_WHEN,
       GK_FAIL_RUN, GK_FOREACH, GK_SWEEP, GK_MAX_PARALLEL, GK_MIN_SUCCESS, GK_GANG, GK_QUEUE, GK_PRIORITY,
       GK_PREEMPTIBLE };

/* ---- small helpers ---------------------------------------------------- */

static void sb_addn(struct sbuf *b, const char *s, size_t n)
{
	while (b->cap - b->len < n + 1) {
		b->cap = b->cap ? b->cap * 2 : 64;
		b->p = xrealloc(b->p, b->cap);
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void cfg_sb_adds(struct sbuf *b, const char *s)
{
	sb_addn(b, s, strlen(s));
}

void cfg_sb_addf(struct sbuf *b, const char *fmt, ...)
{
	char *s = NULL;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		abort();
	sb_addn(b, s, (size_t)n);
	free(s);
}

/* s (n bytes) quoted for a message, clipped at QMAX bytes (util's quote_clip). */
static const char *quote_to(char *buf, size_t cap, const char *s, size_t n)
{
	return quote_clip(buf, cap, s, n, QMAX);
}

const char *cfg_quote_to(char *buf, size_t cap, const char *s, size_t n)
{
	return quote_to(buf, cap, s, n);
}

/* Quotes s for a message; the result lives until NQBUF more calls. */
const char *cfg_q(struct ctx *c, const char *s)
{
	return quote_to(c->qbuf[c->qi++ % NQBUF], QBUF, s, strlen(s));
}

/* [a-z0-9][a-z0-9_.-]{0,62}: workflow and step names. */
bool cfg_name_ok(const char *s)
{
	size_t n = strlen(s);

	return n >= 1 && n <= 63 && strchr("_.-", s[0]) == NULL && strspn(s, NAME_CHARS) == n;
}

/* Levenshtein distance between two short strings (SIZE_MAX when long). */
static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), row[33], i, j;

	if (la > 32 || lb > 32)
		return SIZE_MAX;
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (j = 1; j <= lb; j++) {
			size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			diag = up;
			row[j] = best;
		}
	}
	return row[lb];
}

/* ---- errors ----------------------------------------------------------- */

void cfg_err_at(struct ctx *c, int line, int col, const char *fmt, ...)
{
	char *msg = NULL;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&msg, fmt, ap);
	va_end(ap);
	if (n < 0)
		abort();
	if (c->nerrs == c->caperrs) {
		c->caperrs = c->caperrs ? c->caperrs * 2 : 16;
		c->errs = xrealloc(c->errs, c->caperrs * sizeof(*c->errs));
	}
	c->errs[c->nerrs] = (struct cerr){line, col, c->nerrs, msg};
	c->nerrs++;
}

static int cerr_cmp(const void *a, const void *b)
{
	const struct cerr *x = a, *y = b;

	if (x->line != y->line)
		return x->line < y->line ? -1 : 1;
	if (x->col != y->col)
		return x->col < y->col ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void errs_push(cfg_errors *errs, char *s)
{
	if (errs->len == errs->cap) {
		errs->cap = errs->cap ? errs->cap * 2 : 8;
		errs->items = xrealloc(errs->items, errs->cap * sizeof(*errs->items));
	}
	errs->items[errs->len++] = s;
}

void cfg_errors_add(cfg_errors *errs, char *s)
{
	errs_push(errs, s);
}

/* Sorts the collected errors by position and appends them to errs. */
static void errs_emit(struct ctx *c, cfg_errors *errs)
{
	size_t i;

	qsort(c->errs, c->nerrs, sizeof(*c->errs), cerr_cmp);
	for (i = 0; i < c->nerrs && errs != NULL; i++) {
		const struct cerr *e = &c->errs[i];
		if (i == MAX_SHOWN_ERRORS) {
			errs_push(errs, xasprintf("%s:%d:%d: too many errors; %zu more not shown",
						  c->file, e->line, e->col, c->nerrs - i));
			break;
		}
		errs_push(errs, xasprintf("%s:%d:%d: %s", c->file, e->line, e->col, e->msg));
	}
}

void cfg_errors_dispose(cfg_errors *errs)
{
	size_t i;

	if (errs == NULL)
		return;
	for (i = 0; i < errs->len; i++)
		free(errs->items[i]);
	free(errs->items);
	memset(errs, 0, sizeof(*errs));
}

/* ---- YAML nodes ------------------------------------------------------- */

/* Charges n to the work budget; false (reported once) when it is spent. */
static bool visit(struct ctx *c, const yaml_node_t *n)
{
	if (c->over)
		return false;
	c->work += 16 + (n->type == YAML_SCALAR_NODE ? n->data.scalar.length : 0);
	if (c->work <= c->budget)
		return true;
	c->over = true;
	err_node(c, n, "aliases expand this document too much; repeat less through anchors");
	return false;
}

/*
 * Steps through mapping n from pair *k, skipping repeated keys (already
 * reported) and charging the budget. False at the end or when out of budget.
 */
bool cfg_next_pair(struct ctx *c, const yaml_node_t *n, size_t *k,
		      const yaml_node_t **key, const yaml_node_t **val)
{
	size_t base = c->pair_base[n - c->doc->nodes.start];

	for (; *k < npairs(n); (*k)++) {
		const yaml_node_pair_t *p = &n->data.mapping.pairs.start[*k];
		*key = yaml_document_get_node(c->doc, p->key);
		*val = yaml_document_get_node(c->doc, p->value);
		if (c->dup[base + *k] || *key == NULL || *val == NULL)
			continue;
		(*k)++;
		return visit(c, *key) && visit(c, *val);
	}
	return false;
}

/* Steps through sequence n, or yields n once when it is a scalar. */
bool cfg_next_item(struct ctx *c, const yaml_node_t *n, size_t *k, const yaml_node_t **it)
{
	if (n->type == YAML_SCALAR_NODE) {
		*it = n;
		return (*k)++ == 0;
	}
	if (*k >= nitems(n))
		return false;
	*it = yaml_document_get_node(c->doc, n->data.sequence.items.start[(*k)++]);
	return *it != NULL && visit(c, *it);
}

/* The text of scalar n, or NULL after reporting why it is not usable. */
const char *cfg_text(struct ctx *c, const yaml_node_t *n, const char *what)
{
	if (n->type != YAML_SCALAR_NODE) {
		err_node(c, n, "%s must be a string, not a %s", what, ntype(n));
		return NULL;
	}
	if (memchr(n->data.scalar.value, 0, n->data.scalar.length) != NULL) {
		err_node(c, n, "%s must not contain a NUL character", what);
		return NULL;
	}
	return sval(n);
}

/* ---- repeated keys ---------------------------------------------------- */

/*
 * Reports every repeated string key of every mapping, at the repeat, and
 * marks it in c->dup so that the schema walk skips it. Keys that are not
 * strings are errors of their own in the schema walk.
 */
static void check_dup_keys(struct ctx *c)
{
	yaml_node_t *base = c->doc->nodes.start;
	size_t nn = (size_t)(c->doc->nodes.top - base), total = 0, i, k;

	c->pair_base = xcalloc(nn + 1, sizeof(*c->pair_base));
	for (i = 0; i < nn; i++) {
		c->pair_base[i] = total;
		total += base[i].type == YAML_MAPPING_NODE ? npairs(&base[i]) : 0;
	}
	c->dup = xcalloc(total + 1, 1);
	for (i = 0; i < nn; i++) {
		json_t *seen; /* key -> line of its first use */

		if (base[i].type != YAML_MAPPING_NODE || npairs(&base[i]) < 2)
			continue;
		seen = json_object();
		for (k = 0; k < npairs(&base[i]); k++) {
			const yaml_node_t *key = yaml_document_get_node(c->doc,
						base[i].data.mapping.pairs.start[k].key);
			json_t *first;

			if (key == NULL || key->type != YAML_SCALAR_NODE)
				continue;
			first = json_object_getn(seen, sval(key), key->data.scalar.length);
			if (first == NULL) {
				json_object_setn_new(seen, sval(key), key->data.scalar.length,
						     json_integer(pos1(key->start_mark.line)));
				continue;
			}
			c->dup[c->pair_base[i] + k] = 1;
			err_node(c, key, "duplicate key %s (first defined at line %d)",
				 cfg_q(c, sval(key)), (int)json_integer_value(first));
		}
		json_decref(seen);
	}
}

/* ---- schema mappings -------------------------------------------------- */

/*
 * Looks up the known keys of mapping n: vals[i] is the value of keys[i] or
 * NULL, and so is keyn[i] (when keyn is not NULL) for the key node. Reports
 * keys that are not strings or not known (with a suggestion). Returns false,
 * after an error, when n is not a mapping.
 */
bool cfg_map_fields(struct ctx *c, const yaml_node_t *n, const char *what,
		    const char *const *keys, size_t nkeys, const yaml_node_t **vals,
		    const yaml_node_t **keyn)
{
	const yaml_node_t *key, *val;
	size_t k = 0, j;

	if (n->type != YAML_MAPPING_NODE) {
		err_node(c, n, "%s must be a mapping, not a %s", what, ntype(n));
		return false;
	}
	while (cfg_next_pair(c, n, &k, &key, &val)) {
		const char *s = cfg_text(c, key, "a key"), *hint = NULL;
		struct sbuf known = {0};
		size_t best;

		for (j = 0; s != NULL && j < nkeys && strcmp(s, keys[j]) != 0; j++)
			;
		if (s == NULL || j < nkeys) {
			if (s != NULL)
				vals[j] = val;
			if (s != NULL && keyn != NULL)
				keyn[j] = key;
			continue;
		}
		for (j = 0, best = 3; j < nkeys; j++) {
			size_t d = edit_distance(s, keys[j]);
			/* the nearest known key, if it is near: "gpu" is "gpus", not "cpus" */
			if (d < best && d < strlen(keys[j])) {
				hint = keys[j];
				best = d;
			}
			cfg_sb_addf(&known, "%s%s", j ? ", " : "", keys[j]);
		}
		if (hint != NULL)
			err_node(c, key, "unknown %s key %s (did you mean \"%s\"?); known keys: %s",
				 what, cfg_q(c, s), hint, known.p);
		else
			err_node(c, key, "unknown %s key %s; known keys: %s", what, cfg_q(c, s), known.p);
		free(known.p);
	}
	return true;
}

/* ---- templates (their language: template.c) --------------------------- */

void cfg_list_keys(const json_t *obj, struct sbuf *b)
{
	void *it = json_object_iter((json_t *)obj);

	if (it == NULL)
		cfg_sb_adds(b, "none");
	for (; it != NULL; it = json_object_iter_next((json_t *)obj, it))
		cfg_sb_addf(b, "%s%s", b->len ? ", " : "", json_object_iter_key(it));
}

/* Checks the templates in s, the text of node n in step `step`. */
void cfg_check_templates(struct ctx *c, const yaml_node_t *n, const char *s, size_t step)
{
	const char *p = s, *start, *expr = NULL, *end = NULL;
	struct sbuf decl = {0};
	size_t elen = 0;

	while ((start = tmpl_next(p, &expr, &elen, &end)) != NULL) {
		struct tmpl_expr t;
		char *e;

		if (end == NULL) {
			err_node(c, n, "unclosed \"{{\" in %s; close it with \"}}\"", cfg_q(c, start));
			return;
		}
		t = tmpl_expr_parse(expr, elen);
		e = xstrndup(expr, elen);
		if (t.kind == TMPL_PARAM && json_object_getn(c->params, t.a, t.alen) == NULL) {
			cfg_list_keys(c->params, &decl);
			err_node(c, n, "template refers to undeclared parameter %s; declared: %s",
				 cfg_q(c, e + 7), decl.p);
			free(decl.p);
			decl = (struct sbuf){0};
		} else if (t.kind == TMPL_STEP || t.kind == TMPL_STEP_ALL || t.kind == TMPL_ITEM) {
			if (c->ntrefs == c->captrefs) {
				c->captrefs = c->captrefs ? c->captrefs * 2 : 8;
				c->trefs = xrealloc(c->trefs, c->captrefs * sizeof(*c->trefs));
			}
			/* an item (target NULL) is checked once the step's foreach is known */
			c->trefs[c->ntrefs++] = (struct tref){step, n, t.kind == TMPL_ITEM ? NULL : xstrndup(t.a, t.alen)};
		} else if (t.kind == TMPL_BAD) {
			err_node(c, n, "unknown template expression %s; use params.NAME, run.id, "
				 "steps.STEP.outputs.KEY, steps.STEP.outputs or (under foreach:) item, item.KEY",
				 cfg_q(c, e));
		}
		free(e);
		p = end;
	}
}

/* ---- workflow and steps ----------------------------------------------- */

static void parse_params(struct ctx *c, const yaml_node_t *n)
{
	const yaml_node_t *key, *val;
	size_t k = 0;

	if (n->type != YAML_MAPPING_NODE) {
		err_node(c, n, "params must be a mapping of NAME: default, not a %s", ntype(n));
		return;
	}
	while (cfg_next_pair(c, n, &k, &key, &val)) {
		const yaml_node_t *v[PK_N] = {NULL}, *def = NULL;
		const char *name = cfg_text(c, key, "a parameter name"), *d;
		json_t *p;

		if (name == NULL)
			continue;
		if (!tmpl_ident_ok(name, strlen(name))) {
			err_node(c, key, "parameter name %s is not valid; use letters, digits "
				 "and _, not starting with a digit", cfg_q(c, name));
			continue;
		}
		if (val->type == YAML_SCALAR_NODE) {
			def = val;
		} else if (val->type == YAML_MAPPING_NODE) {
			if (cfg_map_fields(c, val, "parameter", param_keys, NELEM(param_keys), v, NULL)) {
				def = v[PK_DEFAULT];
				if (present(v[PK_DESC]))
					(void)cfg_text(c, v[PK_DESC], "a parameter description");
			}
		} else {
			err_node(c, val, "parameter %s must be a default value or a mapping "
				 "with default and description, not a list", cfg_q(c, name));
			continue;
		}
		p = json_object();
		if (present(def) && (d = cfg_text(c, def, "a parameter default")) != NULL)
			json_object_set_new(p, "default", json_string(d));
		cfg_param_decl(c, name, v, def, p);
		json_object_set_new(c->params, name, p);
	}
}

/*
 * needs: a step name, or a list of step names and {step: NAME, if: any}
 * items (any: the step also runs when NAME was skipped). The names go into
 * the spec's "needs"; those with if: any also into "needs_any".
 */
static json_t *parse_needs(struct ctx *c, struct step *st, const yaml_node_t *n, json_t *js)
{
	static const char *const item_keys[] = {"step", "if"};
	json_t *arr = json_array(), *any = NULL;
	const yaml_node_t *it;
	const char *s, *cond;
	size_t k = 0;

	if (!present(n))
		return arr;
	if (n->type == YAML_MAPPING_NODE) {
		err_node(c, n, "needs must be a step name or a list of step names, not a mapping");
		return arr;
	}
	st->needs = xcalloc(n->type == YAML_SCALAR_NODE ? 1 : nitems(n) + 1, sizeof(*st->needs));
	while (cfg_next_item(c, n, &k, &it)) {
		if (it->type == YAML_MAPPING_NODE) {
			const yaml_node_t *v[2] = {NULL, NULL};
			if (!cfg_map_fields(c, it, "a needs item", item_keys, 2, v, NULL))
				continue;
			if (!present(v[0])) {
				err_node(c, it, "a needs item that is a mapping names its step: {step: NAME, if: any}");
				continue;
			}
			if ((s = cfg_text(c, v[0], "a needs step")) == NULL)
				continue;
			if (present(v[1]) && (cond = cfg_text(c, v[1], "a needs condition")) != NULL) {
				if (strcmp(cond, "any") == 0) {
					if (any == NULL)
						any = json_array();
					json_array_append_new(any, json_string(s));
				} else if (strcmp(cond, "succeeded") != 0) {
					err_node(c, v[1], "if: %s is not a needs condition; use succeeded (the default: "
						 "run only when %s succeeded) or any (also when it was skipped)",
						 cfg_q(c, cond), cfg_q(c, s));
				}
			}
			st->needs[st->nneeds++] = v[0];
			json_array_append_new(arr, json_string(s));
			continue;
		}
		if ((s = cfg_text(c, it, "a needs item")) == NULL)
			continue;
		st->needs[st->nneeds++] = it;
		json_array_append_new(arr, json_string(s));
	}
	if (any != NULL)
		json_object_set_new(js, "needs_any", any);
	return arr;
}

static json_t *parse_command(struct ctx *c, size_t i, const yaml_node_t *n,
			     const yaml_node_t *stepn, bool required)
{
	json_t *arr = json_array();
	const yaml_node_t *it;
	const char *s;
	size_t k = 0;

	if (!present(n)) {
		if (required)
			err_node(c, stepn, "step is missing required key \"command\" (a list "
				 "like [python, train.py] or one shell string)");
		return arr;
	}
	if (n->type == YAML_MAPPING_NODE) {
		err_node(c, n, "command must be a list of strings or one shell string, not a mapping");
		return arr;
	}
	if (n->type == YAML_SCALAR_NODE) {
		if ((s = cfg_text(c, n, "command")) == NULL)
			return arr;
		if (s[strspn(s, " \t\r\n")] == '\0') {
			err_node(c, n, "command must not be empty");
			return arr;
		}
		/* one string is a shell command line */
		json_array_append_new(arr, json_string("/bin/sh"));
		json_array_append_new(arr, json_string("-c"));
	} else if (nitems(n) == 0) {
		err_node(c, n, "command must not be empty");
		return arr;
	}
	while (cfg_next_item(c, n, &k, &it)) {
		if ((s = cfg_text(c, it, "a command item")) == NULL)
			continue;
		if (k == 1 && *s == '\0')
			err_node(c, it, "the first command item (the program) must not be empty");
		cfg_check_templates(c, it, s, i);
		json_array_append_new(arr, json_string(s));
	}
	return arr;
}

static json_t *parse_env(struct ctx *c, size_t i, const yaml_node_t *n)
{
	json_t *obj = json_object();
	const yaml_node_t *key, *val;
	const char *name, *s;
	size_t k = 0;

	if (!present(n))
		return obj;
	if (n->type != YAML_MAPPING_NODE) {
		err_node(c, n, "env must be a mapping of NAME: value, not a %s", ntype(n));
		return obj;
	}
	while (cfg_next_pair(c, n, &k, &key, &val)) {
		if ((name = cfg_text(c, key, "an env name")) == NULL)
			continue;
		if (!tmpl_ident_ok(name, strlen(name))) {
			err_node(c, key, "env name %s is not valid; use letters, digits and _, "
				 "not starting with a digit", cfg_q(c, name));
		} else if ((s = cfg_text(c, val, "an env value")) != NULL) {
			cfg_check_templates(c, val, s, i);
			json_object_set_new(obj, name, json_string(s));
		}
	}
	return obj;
}

/* The duration in node n (field `what`), or dflt when absent or invalid. */
/*
 * queue: a queue's name (the queue must exist when the run is submitted:
 * runs.c); priority: a whole number from -1000 to 1000, higher first within
 * the queue. Each into js when given, else the workflow's (the top level's
 * queue: and priority:, in c->queue and c->priority), else absent: the
 * 'default' queue, priority 0 (db/functions/queues.sql).
 */
static void parse_queue(struct ctx *c, const yaml_node_t *q, const yaml_node_t *prio, json_t *js)
{
	const char *t;
	int64_t p;

	if (present(q) && (t = cfg_text(c, q, "queue")) != NULL) {
		if (!cfg_name_ok(t))
			err_node(c, q, "queue name %s is not valid; use 1-63 of a-z, 0-9, _, . and -, starting with "
				 "a letter or digit", cfg_q(c, t));
		else
			json_object_set_new(js, "queue", json_string(t));
	} else if (c->queue != NULL) {
		json_object_set_new(js, "queue", json_string(c->queue));
	}
	if (present(prio) && (t = cfg_text(c, prio, "priority")) != NULL) {
		if (parse_int64(t, &p) < 0 || p < -1000 || p > 1000)
			err_node(c, prio, "priority %s must be a whole number from -1000 to 1000 (higher runs first)",
				 cfg_q(c, t));
		else
			json_object_set_new(js, "priority", json_integer((json_int_t)p));
	} else if (c->has_priority) {
		json_object_set_new(js, "priority", json_integer((json_int_t)c->priority));
	}
}

static int64_t duration_field(struct ctx *c, const yaml_node_t *n, const char *what, int64_t dflt)
{
	const char *s;
	int64_t ms;

	if (!present(n) || (s = cfg_text(c, n, what)) == NULL)
		return dflt;
	if (duration_parse(s, &ms) < 0) {
		err_node(c, n, "%s: %s", what, ferry_error_last());
		return dflt;
	}
	return ms;
}

static int64_t retry_limit(struct ctx *c, const yaml_node_t *n)
{
	const char *s = cfg_text(c, n, "retry limit");
	size_t len, k;
	int64_t v = 0;

	if (s == NULL)
		return 0;
	len = strlen(s);
	for (k = 0; k < len && len <= 3 && s[k] >= '0' && s[k] <= '9'; k++)
		v = v * 10 + (s[k] - '0');
	if (len == 0 || k < len || v > 100) {
		err_node(c, n, "retry limit %s must be a whole number from 0 to 100", cfg_q(c, s));
		return 0;
	}
	return v;
}

static json_t *parse_retry(struct ctx *c, const yaml_node_t *n)
{
	const yaml_node_t *v[3] = {NULL, NULL, NULL};
	int64_t limit = 0, backoff = 1000, max_backoff = 300000;

	if (present(n) && n->type == YAML_SCALAR_NODE) {
		limit = retry_limit(c, n);
	} else if (present(n) && cfg_map_fields(c, n, "retry", retry_keys, NELEM(retry_keys), v, NULL)) {
		if (present(v[0]))
			limit = retry_limit(c, v[0]);
		backoff = duration_field(c, v[1], "retry backoff", backoff);
		max_backoff = duration_field(c, v[2], "retry max_backoff", max_backoff);
		if (backoff > max_backoff)
			err_node(c, present(v[1]) ? v[1] : n, "retry backoff %s must not exceed "
				 "max_backoff %s", present(v[1]) ? cfg_q(c, sval(v[1])) : "1s",
				 present(v[2]) ? cfg_q(c, sval(v[2])) : "5m");
	}
	return json_pack("{s:I,s:I,s:I}", "limit", (json_int_t)limit, "backoff_ms",
			 (json_int_t)backoff, "max_backoff_ms", (json_int_t)max_backoff);
}

static json_t *parse_workdir(struct ctx *c, size_t i, const yaml_node_t *n)
{
	const char *s;
	char *padded;

	if (!present(n) || (s = cfg_text(c, n, "workdir")) == NULL)
		return json_null();
	padded = xasprintf("/%s/", s);
	if (*s == '\0')
		err_node(c, n, "workdir must not be empty");
	else if (s[0] != '/' && strstr(padded, "/../") != NULL)
		err_node(c, n, "workdir %s must not contain \"..\"; use a path below the run "
			 "directory or an absolute path", cfg_q(c, s));
	free(padded);
	cfg_check_templates(c, n, s, i);
	return json_string(s);
}

/* An image reference: registry/name:tag@digest characters only (no spaces, no options). */
static bool image_ok(const char *s)
{
	if (*s == '\0' || *s == '-')
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && strchr("._-/:@", *s) == NULL)
			return false;
	return true;
}

/*
 * image: `host` (the default: the host's root filesystem) or an image the
 * executor runs (whether it runs images is the executor key's to check).
 */
static json_t *parse_image(struct ctx *c, const yaml_node_t *n)
{
	const char *image;

	if (!present(n) || (image = cfg_text(c, n, "image")) == NULL)
		return json_string("host");
	if (!image_ok(image)) {
		err_node(c, n, "image %s is not an image name (letters, digits and . _ - / : @)", cfg_q(c, image));
		return json_string("host");
	}
	return json_string(image);
}

static json_t *parse_step(struct ctx *c, size_t i, const yaml_node_t *n)
{
	const yaml_node_t **v = xcalloc(c->nkeys, sizeof(*v)), **keys = xcalloc(c->nkeys, sizeof(*keys));
	const struct step_kind *kind;
	json_t *js = json_object(), *prev;
	const char *s = NULL;

	c->steps[i].node = n;
	c->steps[i].spec = js;
	if (n->type != YAML_MAPPING_NODE) {
		err_node(c, n, "a step must be a mapping with at least name and command, not a %s",
			 ntype(n));
		goto out;
	}
	if (!cfg_map_fields(c, n, "step", c->keys, c->nkeys, v, keys) || c->over)
		goto out;
	if (v[GK_NAME] == NULL)
		err_node(c, n, "step is missing required key \"name\"");
	else if ((s = cfg_text(c, v[GK_NAME], "step name")) != NULL && !cfg_name_ok(s))
		err_node(c, v[GK_NAME], "step name %s is not valid; use 1-63 of a-z, 0-9, _, . "
			 "and -, starting with a letter or digit", cfg_q(c, s));
	/* invalid names are registered too, so that needs of them do not cascade */
	if (s != NULL && (prev = json_object_get(c->byname, s)) != NULL)
		err_node(c, v[GK_NAME], "duplicate step name %s (first defined at line %d)", cfg_q(c, s),
			 pos1(c->steps[json_integer_value(prev)].node->start_mark.line));
	else if (s != NULL)
		json_object_set_new(c->byname, s, json_integer((json_int_t)i));
	c->steps[i].name = s;
	json_object_set_new(js, "name", json_string(s ? s : ""));
	kind = c->steps[i].kind = cfg_kind_parse(c, v[GK_KIND], &s);
	json_object_set_new(js, "kind", json_string(s ? s : step_kind_default()->name));
	json_object_set_new(js, "needs", parse_needs(c, &c->steps[i], v[GK_NEEDS], js));
	if (kind && kind->command == SKC_FORBIDDEN && present(v[GK_COMMAND]))
		err_node(c, v[GK_COMMAND], "a %s step %s; remove \"command\"", kind->name,
			 kind->no_command);
	json_object_set_new(js, "command", parse_command(c, i, v[GK_COMMAND], n,
							 kind == NULL || kind->command == SKC_REQUIRED));
	json_object_set_new(js, "env", parse_env(c, i, v[GK_ENV]));
	/* where the job runs first, as the spec always listed it: executor, image, resources, … */
	json_object_set_new(js, "executor", json_null());
	json_object_set_new(js, "image", parse_image(c, v[GK_IMAGE]));
	cfg_kind_fields(c, i, kind, keys, v, js, STK_JOB);
	json_object_set_new(js, "workdir", parse_workdir(c, i, v[GK_WORKDIR]));
	json_object_set_new(js, "timeout_ms",
			    json_integer(duration_field(c, v[GK_TIMEOUT], "timeout", 0)));
	json_object_set_new(js, "retry", parse_retry(c, v[GK_RETRY]));
	parse_queue(c, v[GK_QUEUE], v[GK_PRIORITY], js);
	cfg_kind_fields(c, i, kind, keys, v, js, 0);
	{
		const struct cfg_flow_nodes flow = {v[GK_WHEN], v[GK_FAIL_RUN], v[GK_FOREACH], v[GK_SWEEP],
						    v[GK_MAX_PARALLEL], v[GK_MIN_SUCCESS], v[GK_GANG],
						    v[GK_PREEMPTIBLE]};
		cfg_flow_fields(c, i, kind, &flow, js);
	}
	json_object_set_new(js, "line", json_integer(pos1(n->start_mark.line)));
	json_object_set_new(js, "col", json_integer(pos1(n->start_mark.column)));
out:
	free(v);
	free(keys);
	return js;
}

/*
 * steps: and finally: (the steps that run once every other step is
 * terminal, whatever the outcome), into one array: the finally steps last,
 * "finally": true in their specs.
 */
static void parse_steps(struct ctx *c, const yaml_node_t *root, const yaml_node_t *n, const yaml_node_t *fin,
			json_t *arr)
{
	const yaml_node_t *st;
	size_t k = 0, nfin = 0;

	if (!present(n)) {
		err_node(c, n ? n : root, "missing required key \"steps\" (a list of steps)");
		return;
	}
	if (n->type != YAML_SEQUENCE_NODE) {
		err_node(c, n, "steps must be a list of steps (\"- name: ...\"), not a %s", ntype(n));
		return;
	}
	if (nitems(n) == 0) {
		err_node(c, n, "steps must not be empty");
		return;
	}
	if (present(fin) && fin->type != YAML_SEQUENCE_NODE) {
		err_node(c, fin, "finally must be a list of steps (\"- name: ...\"), not a %s", ntype(fin));
		fin = NULL;
	}
	nfin = present(fin) ? nitems(fin) : 0;
	if (nitems(n) + nfin > MAX_STEPS) {
		err_node(c, n, "too many steps (%zu); at most %d are allowed", nitems(n) + nfin, MAX_STEPS);
		return;
	}
	c->steps = xcalloc(nitems(n) + nfin, sizeof(*c->steps));
	c->nsteps = nitems(n) + nfin;
	while (cfg_next_item(c, n, &k, &st))
		json_array_append_new(arr, parse_step(c, k - 1, st));
	for (k = 0; k < nfin; k++)
		c->steps[nitems(n) + k].final = true;
	k = 0;
	while (nfin > 0 && cfg_next_item(c, fin, &k, &st))
		json_array_append_new(arr, parse_step(c, nitems(n) + k - 1, st));
}

/* ---- the step graph --------------------------------------------------- */

static json_t *check_workflow(struct ctx *c, const yaml_node_t *root)
{
	const yaml_node_t *v[TK_N] = {NULL};
	json_t *spec = json_object(), *steps = json_array();
	const char *s = NULL;

	c->params = json_object();
	json_object_set_new(spec, "name", json_null());
	json_object_set_new(spec, "description", json_null());
	json_object_set_new(spec, "params", c->params);
	json_object_set_new(spec, "steps", steps);
	if (root->type != YAML_MAPPING_NODE) {
		err_node(c, root, "the top level must be a mapping with name and steps, not a %s",
			 ntype(root));
		return spec;
	}
	cfg_map_fields(c, root, "top-level", top_keys, TK_N, v, NULL);
	if (v[TK_NAME] == NULL)
		err_node(c, root, "missing required key \"name\"");
	else if ((s = cfg_text(c, v[TK_NAME], "name")) != NULL && !cfg_name_ok(s))
		err_node(c, v[TK_NAME], "workflow name %s is not valid; use 1-63 of a-z, 0-9, _, . "
			 "and -, starting with a letter or digit", cfg_q(c, s));
	else if (s != NULL)
		json_object_set_new(spec, "name", json_string(s));
	if (present(v[TK_DESC]) && (s = cfg_text(c, v[TK_DESC], "description")) != NULL)
		json_object_set_new(spec, "description", json_string(s));
	if (present(v[TK_PARAMS]) && !c->over)
		parse_params(c, v[TK_PARAMS]);
	{
		/* the workflow's queue and priority: every step's that names none (parse_queue) */
		json_t *wq = json_object();
		parse_queue(c, v[TK_QUEUE], v[TK_PRIORITY], wq);
		if (json_object_get(wq, "queue"))
			json_object_set(spec, "queue", json_object_get(wq, "queue"));
		if (json_object_get(wq, "priority"))
			json_object_set(spec, "priority", json_object_get(wq, "priority"));
		c->queue = json_string_value(json_object_get(spec, "queue"));
		c->has_priority = json_object_get(wq, "priority") != NULL;
		c->priority = (int)json_integer_value(json_object_get(wq, "priority"));
		json_decref(wq);
	}
	if (!c->over)
		parse_steps(c, root, v[TK_STEPS], v[TK_FINALLY], steps);
	if (c->nsteps > 0 && !c->over)
		cfg_graph_check(c);
	if (c->nsteps > 0 && !c->over)
		cfg_kind_models(c);
	if (!c->over)
		cfg_schedule_fields(c, v[TK_SCHEDULE], v[TK_TRIGGERS], spec);
	return spec;
}

/* ---- entry points ----------------------------------------------------- */

static void syntax_error(struct ctx *c, const yaml_parser_t *p)
{
	const char *problem = p->problem ? p->problem : "unknown error";
	int line = 1, col = 1;
	size_t i;

	if (p->error == YAML_MEMORY_ERROR) {
		cfg_err_at(c, 1, 1, "out of memory while reading YAML");
	} else if (p->error == YAML_READER_ERROR) {
		/* the reader reports a byte offset, not a mark */
		for (i = 0; i < p->problem_offset && i < c->len; i++) {
			if (c->src[i] == '\n') {
				line++;
				col = 1;
			} else if (((unsigned char)c->src[i] & 0xC0) != 0x80) {
				col++;
			}
		}
		if (p->problem_value >= 0)
			cfg_err_at(c, line, col, "cannot read the file: %s (byte 0x%02x)", problem,
			       (unsigned)p->problem_value);
		else
			cfg_err_at(c, line, col, "cannot read the file: %s", problem);
	} else if (p->context != NULL) {
		cfg_err_at(c, pos1(p->problem_mark.line), pos1(p->problem_mark.column),
		       "syntax error: %s (%s at line %d, column %d)", problem, p->context,
		       pos1(p->context_mark.line), pos1(p->context_mark.column));
	} else {
		cfg_err_at(c, pos1(p->problem_mark.line), pos1(p->problem_mark.column),
		       "syntax error: %s", problem);
	}
}

/*
 * A first pass over the events, before libyaml builds the document: its
 * scanner slows down with every level of flow nesting and its loader looks
 * each alias up among all anchors, so deep nesting or many anchors would
 * take quadratic time. Returns false after reporting that, or a syntax error.
 */
static bool prescan(struct ctx *c)
{
	yaml_parser_t p;
	yaml_event_t ev;
	size_t depth = 0, anchors = 0;
	bool ok = true, end = false;

	if (!yaml_parser_initialize(&p))
		abort();
	yaml_parser_set_input_string(&p, (const unsigned char *)c->src, c->len);
	while (ok && !end) {
		if (!yaml_parser_parse(&p, &ev)) {
			syntax_error(c, &p);
			ok = false;
			break;
		}
		if (ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT)
			depth++;
		else if (ev.type == YAML_SEQUENCE_END_EVENT || ev.type == YAML_MAPPING_END_EVENT)
			depth--;
		if ((ev.type == YAML_SCALAR_EVENT && ev.data.scalar.anchor != NULL) ||
		    (ev.type == YAML_SEQUENCE_START_EVENT && ev.data.sequence_start.anchor != NULL) ||
		    (ev.type == YAML_MAPPING_START_EVENT && ev.data.mapping_start.anchor != NULL))
			anchors++;
		if (depth > MAX_DEPTH || anchors > MAX_ANCHORS) {
			cfg_err_at(c, pos1(ev.start_mark.line), pos1(ev.start_mark.column),
			       depth > MAX_DEPTH ? "nested more than %d levels deep; a workflow needs "
			       "far fewer" : "more than %d anchors (&name); a workflow needs far fewer",
			       depth > MAX_DEPTH ? MAX_DEPTH : MAX_ANCHORS);
			ok = false;
		}
		end = ev.type == YAML_STREAM_END_EVENT;
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&p);
	return ok;
}

static void ctx_dispose(struct ctx *c)
{
	size_t i;

	json_decref(c->byname);
	for (i = 0; i < c->nerrs; i++)
		free(c->errs[i].msg);
	free(c->errs);
	for (i = 0; i < c->nsteps; i++) {
		free(c->steps[i].needs);
		free(c->steps[i].adj);
	}
	free(c->steps);
	for (i = 0; i < c->ntrefs; i++)
		free(c->trefs[i].target);
	free(c->trefs);
	free(c->up);
	free(c->pair_base);
	free(c->dup);
	free(c->keys);
	free(c->krow);
}

const char *cfg_step_key_at(size_t k)
{
	struct ctx c;
	const char *name;

	memset(&c, 0, sizeof(c));
	cfg_keys_list(&c, generic_keys, NELEM(generic_keys));
	name = k < c.nkeys ? c.keys[k] : NULL;
	free(c.keys);
	free(c.krow);
	return name;
}

int cfg_workflow_parse(json_t **out, char hash_out[65], const char *yaml, size_t len,
		       const char *filename, cfg_errors *errs)
{
	struct ctx c;
	yaml_parser_t parser;
	yaml_document_t doc, doc2;
	bool have_parser = false, have_doc = false, have_doc2 = false;
	const yaml_node_t *root;
	json_t *spec = NULL;
	int error = FERRY_OK;

	*out = NULL;
	memset(&c, 0, sizeof(c));
	c.file = filename ? filename : "<inline>";
	c.src = yaml ? yaml : "";
	c.len = yaml ? len : 0;
	cfg_keys_list(&c, generic_keys, NELEM(generic_keys));
	if (hash_out != NULL)
		sha256_hex(hash_out, c.src, c.len);
	if (c.len > CFG_MAX_YAML) {
		cfg_err_at(&c, 1, 1, "the file is %zu bytes; workflows are limited to %d bytes", c.len,
		       CFG_MAX_YAML);
		goto out;
	}
	if (!prescan(&c))
		goto out;
	if (!yaml_parser_initialize(&parser)) {
		ferry_error_set("cannot initialise the YAML parser");
		error = FERRY_ERROR;
		goto out;
	}
	have_parser = true;
	yaml_parser_set_input_string(&parser, (const unsigned char *)c.src, c.len);
	if (!yaml_parser_load(&parser, &doc)) {
		syntax_error(&c, &parser);
		goto out;
	}
	have_doc = true;
	c.doc = &doc;
	root = yaml_document_get_root_node(&doc);
	if (root == NULL || is_null(root)) {
		cfg_err_at(&c, root ? pos1(root->start_mark.line) : 1, root ? pos1(root->start_mark.column) : 1,
		       "empty document; a workflow needs at least name and steps");
		goto out;
	}
	have_doc2 = yaml_parser_load(&parser, &doc2) != 0;
	if (!have_doc2)
		syntax_error(&c, &parser);
	else if (yaml_document_get_root_node(&doc2) != NULL)
		cfg_err_at(&c, pos1(doc2.start_mark.line), pos1(doc2.start_mark.column),
		       "more than one document; a workflow file holds exactly one "
		       "(remove the second \"---\")");
	c.budget = 8 * (c.len + 16 * (size_t)(doc.nodes.top - doc.nodes.start)) + (1u << 20);
	c.byname = json_object();
	check_dup_keys(&c);
	spec = check_workflow(&c, root);
out:
	if (c.nerrs > 0) {
		errs_emit(&c, errs);
		ferry_error_set("%s: %zu error%s in the workflow", c.file, c.nerrs,
				c.nerrs == 1 ? "" : "s");
		error = FERRY_EINVALID;
	} else if (error == FERRY_OK) {
		*out = spec;
		spec = NULL;
	}
	json_decref(spec);
	ctx_dispose(&c);
	if (have_doc2)
		yaml_document_delete(&doc2);
	if (have_doc)
		yaml_document_delete(&doc);
	if (have_parser)
		yaml_parser_delete(&parser);
	return error;
}

int cfg_params_resolve(json_t **out, const json_t *spec, const json_t *given)
{
	const json_t *decl = spec ? json_object_get(spec, "params") : NULL;
	json_t *res = json_object(), *v;
	struct sbuf names = {0};
	char qk[QBUF];
	const char *key;
	char *val = NULL;
	void *it;
	size_t total = 0;
	int error = FERRY_EINVALID;

	*out = NULL;
	decl = json_is_object(decl) ? decl : NULL;
	if (given != NULL && !json_is_object(given)) {
		ferry_error_set("parameters must be a JSON object of name: value");
		goto out;
	}
	for (it = json_object_iter((json_t *)given); it != NULL;
	     it = json_object_iter_next((json_t *)given, it)) {
		key = json_object_iter_key(it);
		if (decl == NULL || json_object_get(decl, key) == NULL) {
			cfg_list_keys(decl, &names);
			ferry_error_set("unknown parameter %s; declared: %s",
					quote_to(qk, sizeof(qk), key, strlen(key)), names.p);
			goto out;
		}
	}
	for (it = json_object_iter((json_t *)decl); it != NULL;
	     it = json_object_iter_next((json_t *)decl, it)) {
		key = json_object_iter_key(it);
		quote_to(qk, sizeof(qk), key, strlen(key));
		v = json_object_get(json_object_iter_value(it), "default");
		if (given != NULL && json_object_get(given, key) != NULL) {
			if ((val = tmpl_value_text(json_object_get(given, key))) == NULL) {
				ferry_error_set("parameter %s must be a string, number or boolean", qk);
				goto out;
			}
		} else if (json_is_string(v)) {
			val = xstrdup(json_string_value(v));
		} else {
			/* no "-p": the API says this too; the CLI adds its own hint */
			ferry_error_set("parameter %s has no default and was not given a value", qk);
			goto out;
		}
		if (cfg_param_check(json_object_iter_value(it), val, &names) < 0) {
			ferry_error_set("parameter %s %s", qk, names.p);
			goto out;
		}
		/* each is in every job's environment (FERRY_PARAM_NAME), where the kernel takes 128 KiB a value */
		if (strlen(val) > CFG_PARAM_VALUE_MAX) {
			ferry_error_set("parameter %s is %zu bytes, more than the %d a value may hold (params go into "
					"each job's environment); pass a large input as a file or a dataset",
					qk, strlen(val), CFG_PARAM_VALUE_MAX);
			goto out;
		}
		total += strlen(key) + strlen(val);
		if (total > CFG_PARAMS_TOTAL_MAX) {
			ferry_error_set("parameters hold %zu bytes up to %s, more than the %d all of them may hold "
					"(they go into each job's environment); pass large inputs as files",
					total, qk, CFG_PARAMS_TOTAL_MAX);
			goto out;
		}
		json_object_set_new(res, key, json_string(val));
		free(val);
		val = NULL;
	}
	error = FERRY_OK;
	*out = res;
	res = NULL;
out:
	free(names.p);
	free(val);
	json_decref(res);
	return error;
}

/*
 * config — turns a workflow YAML file into the normalised JSON spec that the
 * store keeps per content hash, or into a list of every problem found.
 *
 * The file is loaded whole with libyaml's document API, then checked in
 * passes that never recurse deeper than the schema: (1) duplicate keys, by a
 * linear walk over all nodes of the document; (2) the schema walk, which
 * builds the spec and queues {{steps.…}} template references; (3) the step
 * graph: needs are resolved, strongly connected components (iterative
 * Tarjan) give one error per cycle and the transitive upstream set of every
 * step, and the queued template references are checked against it. Errors
 * are collected with their position and sorted at the end.
 *
 * A node reached through an alias is that same node (libyaml shares it).
 * Aliases could still multiply work (one big list used by 1000 steps), so the
 * schema walk is charged per node and per byte of text against a budget
 * proportional to the input, and stops with one error when it runs out.
 */
#include "config.h"

#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define MAX_STEPS 1000
#define MAX_SHOWN_ERRORS 100
#define MAX_LISTED 20 /* names listed in "known steps: …" */
#define QMAX 60       /* bytes of a user value quoted in a message */
#define QBUF (4 * QMAX + 16)
#define NQBUF 6

/* Step kinds. A new kind is a row here plus its checks in parse_step(). */
static const struct step_kind {
	const char *name;
	bool needs_command;
} step_kinds[] = {
	{"run", true},
};

static const char *const top_keys[] = {"name", "description", "params", "steps"};
enum { TK_NAME, TK_DESC, TK_PARAMS, TK_STEPS, TK_N };

static const char *const step_keys[] = {"name", "kind", "needs", "command", "env",
					"image", "workdir", "timeout", "retry"};
enum { SK_NAME, SK_KIND, SK_NEEDS, SK_COMMAND, SK_ENV, SK_IMAGE, SK_WORKDIR,
       SK_TIMEOUT, SK_RETRY, SK_N };

static const char *const param_keys[] = {"default", "description"};
static const char *const retry_keys[] = {"limit", "backoff", "max_backoff"};

struct cerr {
	int line, col;
	size_t seq;
	char *msg;
};

struct step {
	const yaml_node_t *node;   /* the step's mapping */
	const char *name;          /* NULL when missing or not a string */
	const yaml_node_t **needs; /* needs items that are strings */
	size_t nneeds;
	size_t *adj, nadj;         /* resolved needs, as step indexes */
};

/* A {{steps.STEP.outputs.KEY}} reference, checked once the graph is known. */
struct tref {
	size_t step;
	const yaml_node_t *node;
	char *target;
};

struct ctx {
	const char *file;
	const char *src;
	size_t len;
	yaml_document_t *doc;
	struct cerr *errs;
	size_t nerrs, caperrs;
	size_t *pair_base;   /* per node: index of its first pair in dup[] */
	unsigned char *dup;  /* per mapping pair: 1 when its key repeats */
	size_t work, budget; /* alias amplification guard */
	bool over;
	json_t *params; /* the spec's params object (borrowed) */
	struct step *steps;
	size_t nsteps;
	json_t *byname; /* step name -> index of its first definition */
	struct tref *trefs;
	size_t ntrefs, captrefs;
	uint64_t *up; /* nsteps bitsets of transitive upstream steps */
	size_t words;
	char qbuf[NQBUF][QBUF];
	unsigned qi;
};

struct sbuf {
	char *p;
	size_t len, cap;
};

static void err_pos(struct ctx *c, int line, int col, const char *fmt, ...) FERRY_PRINTF(4, 5);
static void err_node(struct ctx *c, const yaml_node_t *n, const char *fmt, ...) FERRY_PRINTF(3, 4);
static void sb_addf(struct sbuf *b, const char *fmt, ...) FERRY_PRINTF(2, 3);

/* ---- small helpers ---------------------------------------------------- */

static void sb_addn(struct sbuf *b, const char *s, size_t n)
{
	if (b->cap - b->len < n + 1) {
		while (b->cap - b->len < n + 1)
			b->cap = b->cap ? b->cap * 2 : 64;
		b->p = xrealloc(b->p, b->cap);
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sb_adds(struct sbuf *b, const char *s)
{
	sb_addn(b, s, strlen(s));
}

static void sb_addf(struct sbuf *b, const char *fmt, ...)
{
	char *s;
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

/* Returns the buffer's text (the caller frees it) and empties b. */
static char *sb_take(struct sbuf *b)
{
	char *p = b->p ? b->p : xstrdup("");

	memset(b, 0, sizeof(*b));
	return p;
}

/*
 * Writes s (n bytes) double-quoted into buf: escapes quotes, backslashes and
 * control characters, and clips at QMAX bytes on a UTF-8 boundary with "...".
 * Messages stay on one line and short whatever the input holds.
 */
static const char *quote_to(char *buf, size_t cap, const char *s, size_t n)
{
	size_t i, lim = n, o = 0;

	if (lim > QMAX) {
		lim = QMAX;
		while (lim > 0 && ((unsigned char)s[lim] & 0xC0) == 0x80)
			lim--;
	}
	buf[o++] = '"';
	for (i = 0; i < lim && o + 8 < cap; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '"' || ch == '\\') {
			buf[o++] = '\\';
			buf[o++] = (char)ch;
		} else if (ch < 0x20 || ch == 0x7f) {
			o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", ch);
		} else {
			buf[o++] = (char)ch;
		}
	}
	if (i < n) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o++] = '"';
	buf[o] = '\0';
	return buf;
}

/* Quotes s for a message; the result lives until NQBUF more calls. */
static const char *q(struct ctx *c, const char *s)
{
	char *b = c->qbuf[c->qi++ % NQBUF];

	return quote_to(b, QBUF, s, strlen(s));
}

static bool name_ok(const char *s)
{
	size_t i, n = strlen(s);

	if (n < 1 || n > 63)
		return false;
	for (i = 0; i < n; i++) {
		char ch = s[i];
		bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
		if (!alnum && (i == 0 || (ch != '_' && ch != '.' && ch != '-')))
			return false;
	}
	return true;
}

static bool ident_ok(const char *s, size_t n)
{
	size_t i;

	if (n == 0)
		return false;
	for (i = 0; i < n; i++) {
		char ch = s[i];
		bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
		if (!alpha && (i == 0 || ch < '0' || ch > '9'))
			return false;
	}
	return true;
}

/* Levenshtein distance of a (short) and b (a key from a table). */
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

static void err_vpos(struct ctx *c, int line, int col, const char *fmt, va_list ap)
{
	struct cerr *e;
	char *msg = NULL;

	if (vasprintf(&msg, fmt, ap) < 0)
		abort();
	if (c->nerrs == c->caperrs) {
		c->caperrs = c->caperrs ? c->caperrs * 2 : 16;
		c->errs = xrealloc(c->errs, c->caperrs * sizeof(*c->errs));
	}
	e = &c->errs[c->nerrs];
	e->line = line;
	e->col = col;
	e->seq = c->nerrs++;
	e->msg = msg;
}

static void err_pos(struct ctx *c, int line, int col, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vpos(c, line, col, fmt, ap);
	va_end(ap);
}

static int mark_line(yaml_mark_t m)
{
	return m.line < 100000000 ? (int)m.line + 1 : 100000000;
}

static int mark_col(yaml_mark_t m)
{
	return m.column < 100000000 ? (int)m.column + 1 : 100000000;
}

static void err_node(struct ctx *c, const yaml_node_t *n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vpos(c, mark_line(n->start_mark), mark_col(n->start_mark), fmt, ap);
	va_end(ap);
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

/* Sorts the collected errors by position and hands them to errs. */
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

/* ---- YAML node access ------------------------------------------------- */

static const char *sval(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

static const char *ntype(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_SCALAR_NODE:
		return "string";
	case YAML_SEQUENCE_NODE:
		return "list";
	case YAML_MAPPING_NODE:
		return "mapping";
	default:
		return "empty node";
	}
}

/* A plain empty, ~ or null scalar: an optional key given so is absent. */
static bool is_null(const yaml_node_t *n)
{
	const char *v;
	size_t l;

	if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	v = sval(n);
	l = n->data.scalar.length;
	return l == 0 || (l == 1 && v[0] == '~') ||
	       (l == 4 && (!memcmp(v, "null", 4) || !memcmp(v, "Null", 4) || !memcmp(v, "NULL", 4)));
}

static bool present(const yaml_node_t *n)
{
	return n != NULL && !is_null(n);
}

static size_t nitems(const yaml_node_t *n)
{
	return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
}

static size_t npairs(const yaml_node_t *n)
{
	return (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
}

static const yaml_node_t *item(struct ctx *c, const yaml_node_t *seq, size_t k)
{
	return yaml_document_get_node(c->doc, seq->data.sequence.items.start[k]);
}

static const yaml_node_t *pair_key(struct ctx *c, const yaml_node_t *map, size_t k)
{
	return yaml_document_get_node(c->doc, map->data.mapping.pairs.start[k].key);
}

static const yaml_node_t *pair_val(struct ctx *c, const yaml_node_t *map, size_t k)
{
	return yaml_document_get_node(c->doc, map->data.mapping.pairs.start[k].value);
}

/* True when pair k of map repeats an earlier key (already reported). */
static bool pair_dup(struct ctx *c, const yaml_node_t *map, size_t k)
{
	size_t idx = (size_t)(map - c->doc->nodes.start);

	return c->dup[c->pair_base[idx] + k] != 0;
}

/* Charges n to the work budget; false (once reported) when it is spent. */
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

/* The text of scalar n, or NULL after reporting why it is not usable. */
static const char *text(struct ctx *c, const yaml_node_t *n, const char *what)
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

/* ---- duplicate keys --------------------------------------------------- */

struct kent {
	const yaml_node_t *key;
	size_t pos;
};

static int key_cmp(const struct kent *x, const struct kent *y)
{
	bool xs = x->key->type == YAML_SCALAR_NODE, ys = y->key->type == YAML_SCALAR_NODE;
	size_t lx, ly;
	int r;

	if (xs != ys)
		return xs ? -1 : 1;
	if (!xs)
		return x->key == y->key ? 0 : (x->key < y->key ? -1 : 1);
	lx = x->key->data.scalar.length;
	ly = y->key->data.scalar.length;
	r = memcmp(x->key->data.scalar.value, y->key->data.scalar.value, lx < ly ? lx : ly);
	if (r != 0)
		return r;
	return lx == ly ? 0 : (lx < ly ? -1 : 1);
}

static int kent_cmp(const void *a, const void *b)
{
	const struct kent *x = a, *y = b;
	int r = key_cmp(x, y);

	if (r != 0)
		return r;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Reports every repeated key of every mapping and marks it in c->dup. */
static void check_dup_keys(struct ctx *c)
{
	yaml_node_t *base = c->doc->nodes.start;
	size_t nn = (size_t)(c->doc->nodes.top - base), total = 0, cap = 0, i, k, g, np;
	struct kent *ke = NULL;

	c->pair_base = xcalloc(nn + 1, sizeof(*c->pair_base));
	for (i = 0; i < nn; i++) {
		c->pair_base[i] = total;
		if (base[i].type == YAML_MAPPING_NODE)
			total += npairs(&base[i]);
	}
	c->dup = xcalloc(total + 1, 1);
	for (i = 0; i < nn; i++) {
		if (base[i].type != YAML_MAPPING_NODE || (np = npairs(&base[i])) < 2)
			continue;
		if (np > cap) {
			cap = np;
			ke = xrealloc(ke, cap * sizeof(*ke));
		}
		for (g = 0, k = 0; k < np; k++) {
			ke[g].key = pair_key(c, &base[i], k);
			ke[g].pos = k;
			g += ke[g].key != NULL;
		}
		np = g;
		qsort(ke, np, sizeof(*ke), kent_cmp);
		for (g = 0, k = 1; k < np; k++) {
			if (key_cmp(&ke[g], &ke[k]) != 0) {
				g = k;
				continue;
			}
			c->dup[c->pair_base[i] + ke[k].pos] = 1;
			if (ke[k].key->type == YAML_SCALAR_NODE)
				err_node(c, ke[k].key, "duplicate key %s (first defined at line %d)",
					 q(c, sval(ke[k].key)), mark_line(ke[g].key->start_mark));
			else
				err_node(c, ke[k].key, "duplicate key (first defined at line %d)",
					 mark_line(ke[g].key->start_mark));
		}
	}
	free(ke);
}

/* ---- schema mappings -------------------------------------------------- */

/*
 * Looks up the known keys of mapping n: vals[i] is the value of keys[i] or
 * NULL. Reports keys that are not strings or not known (with a suggestion).
 * Returns false, after an error, when n is not a mapping.
 */
static bool map_fields(struct ctx *c, const yaml_node_t *n, const char *what,
		       const char *const *keys, size_t nkeys, const yaml_node_t **vals)
{
	size_t k, j;

	if (n->type != YAML_MAPPING_NODE) {
		err_node(c, n, "%s must be a mapping, not a %s", what, ntype(n));
		return false;
	}
	for (k = 0; k < npairs(n); k++) {
		const yaml_node_t *key = pair_key(c, n, k), *val = pair_val(c, n, k);
		const char *s, *hint = NULL;
		struct sbuf known = {0};

		if (key == NULL || val == NULL || pair_dup(c, n, k))
			continue;
		if (!visit(c, key) || !visit(c, val))
			return true;
		if ((s = text(c, key, "a key")) == NULL)
			continue;
		for (j = 0; j < nkeys && strcmp(s, keys[j]) != 0; j++)
			;
		if (j < nkeys) {
			vals[j] = val;
			continue;
		}
		for (j = 0; j < nkeys; j++) {
			size_t d = edit_distance(s, keys[j]);
			if (hint == NULL && d <= 2 && d < strlen(keys[j]))
				hint = keys[j];
			sb_addf(&known, "%s%s", j ? ", " : "", keys[j]);
		}
		if (hint != NULL)
			err_node(c, key, "unknown %s key %s (did you mean \"%s\"?); known keys: %s",
				 what, q(c, s), hint, known.p);
		else
			err_node(c, key, "unknown %s key %s; known keys: %s", what, q(c, s), known.p);
		free(known.p);
	}
	return true;
}

/* ---- templates -------------------------------------------------------- */

enum tkind { T_BAD, T_PARAM, T_RUNID, T_STEP };

struct texpr {
	enum tkind kind;
	const char *a; /* parameter or step name */
	size_t alen;
};

/*
 * Finds the next "{{" in s. Returns it, or NULL when there is none; *expr and
 * *elen are the expression with surrounding blanks trimmed, *end points past
 * the closing "}}" or is NULL when the template is not closed.
 */
static const char *tmpl_next(const char *s, const char **expr, size_t *elen, const char **end)
{
	const char *open = strstr(s, "{{"), *close, *e;

	if (open == NULL)
		return NULL;
	close = strstr(open + 2, "}}");
	*end = close ? close + 2 : NULL;
	if (close == NULL)
		return open;
	for (e = open + 2; e < close && (*e == ' ' || *e == '\t'); e++)
		;
	while (close > e && (close[-1] == ' ' || close[-1] == '\t'))
		close--;
	*expr = e;
	*elen = (size_t)(close - e);
	return open;
}

/* Classifies params.NAME, run.id and steps.STEP.outputs.KEY. */
static void texpr_parse(const char *e, size_t n, struct texpr *t)
{
	const char *key;

	memset(t, 0, sizeof(*t));
	if (n == 6 && memcmp(e, "run.id", 6) == 0) {
		t->kind = T_RUNID;
	} else if (n > 7 && memcmp(e, "params.", 7) == 0 && ident_ok(e + 7, n - 7)) {
		t->kind = T_PARAM;
		t->a = e + 7;
		t->alen = n - 7;
	} else if (n > 6 && memcmp(e, "steps.", 6) == 0) {
		for (key = e + n; key > e && key[-1] != '.'; key--)
			;
		/* "steps." STEP ".outputs." KEY; step names may hold dots */
		if (ident_ok(key, (size_t)(e + n - key)) && key - e > 6 + 9 &&
		    memcmp(key - 9, ".outputs.", 9) == 0) {
			t->kind = T_STEP;
			t->a = e + 6;
			t->alen = (size_t)(key - 9 - t->a);
		}
	}
}

static void list_params(const json_t *params, struct sbuf *b)
{
	const char *key;
	json_t *v;
	size_t n = 0;

	json_object_foreach((json_t *)params, key, v) {
		(void)v;
		sb_addf(b, "%s%s", n++ ? ", " : "", key);
	}
	if (n == 0)
		sb_adds(b, "none");
}

/* Checks the templates in s (the text of node n, in step `step`). */
static void check_templates(struct ctx *c, const yaml_node_t *n, const char *s, size_t step)
{
	const char *p = s, *start, *expr = NULL, *end = NULL;
	size_t elen = 0;
	struct texpr t;

	while ((start = tmpl_next(p, &expr, &elen, &end)) != NULL) {
		char *e;
		if (end == NULL) {
			err_node(c, n, "unclosed \"{{\" in %s; close it with \"}}\"", q(c, start));
			return;
		}
		e = xstrndup(expr, elen);
		texpr_parse(expr, elen, &t);
		if (t.kind == T_PARAM && json_object_getn(c->params, t.a, t.alen) == NULL) {
			struct sbuf decl = {0};
			list_params(c->params, &decl);
			err_node(c, n, "template refers to undeclared parameter %s; declared: %s",
				 q(c, e + 7), decl.p);
			free(decl.p);
		} else if (t.kind == T_STEP) {
			struct tref *r;
			if (c->ntrefs == c->captrefs) {
				c->captrefs = c->captrefs ? c->captrefs * 2 : 8;
				c->trefs = xrealloc(c->trefs, c->captrefs * sizeof(*c->trefs));
			}
			r = &c->trefs[c->ntrefs++];
			r->step = step;
			r->node = n;
			r->target = xstrndup(t.a, t.alen);
		} else if (t.kind == T_BAD) {
			err_node(c, n, "unknown template expression %s; use params.NAME, run.id "
				 "or steps.STEP.outputs.KEY", q(c, e));
		}
		free(e);
		p = end;
	}
}

/* ---- workflow and steps ----------------------------------------------- */

static void parse_params(struct ctx *c, const yaml_node_t *n)
{
	size_t k;

	if (n->type != YAML_MAPPING_NODE) {
		err_node(c, n, "params must be a mapping of NAME: default, not a %s", ntype(n));
		return;
	}
	for (k = 0; k < npairs(n); k++) {
		const yaml_node_t *key = pair_key(c, n, k), *val = pair_val(c, n, k);
		const yaml_node_t *v[2] = {NULL, NULL}, *def = NULL;
		const char *name, *d;
		json_t *p;

		if (key == NULL || val == NULL || pair_dup(c, n, k))
			continue;
		if (!visit(c, key) || !visit(c, val))
			return;
		if ((name = text(c, key, "parameter name")) == NULL)
			continue;
		if (!ident_ok(name, strlen(name))) {
			err_node(c, key, "parameter name %s is not valid; use letters, digits "
				 "and _, not starting with a digit", q(c, name));
			continue;
		}
		if (val->type == YAML_SCALAR_NODE) {
			def = val;
		} else if (val->type == YAML_MAPPING_NODE) {
			if (map_fields(c, val, "parameter", param_keys, 2, v)) {
				def = v[0];
				if (present(v[1]))
					(void)text(c, v[1], "parameter description");
			}
		} else {
			err_node(c, val, "parameter %s must be a default value or a mapping "
				 "with default and description, not a list", q(c, name));
			continue;
		}
		p = json_object();
		if (present(def) && (d = text(c, def, "parameter default")) != NULL)
			json_object_set_new(p, "default", json_string(d));
		json_object_set_new(c->params, name, p);
	}
}

static json_t *parse_needs(struct ctx *c, struct step *st, const yaml_node_t *n)
{
	json_t *arr = json_array();
	size_t k, cnt;
	const char *s;

	if (!present(n))
		return arr;
	if (n->type == YAML_SCALAR_NODE) {
		cnt = 1;
	} else if (n->type == YAML_SEQUENCE_NODE) {
		cnt = nitems(n);
	} else {
		err_node(c, n, "needs must be a step name or a list of step names, not a mapping");
		return arr;
	}
	st->needs = xcalloc(cnt, sizeof(*st->needs));
	for (k = 0; k < cnt; k++) {
		const yaml_node_t *it = n->type == YAML_SCALAR_NODE ? n : item(c, n, k);
		if (it == NULL || !visit(c, it))
			break;
		if ((s = text(c, it, "a needs item")) == NULL)
			continue;
		st->needs[st->nneeds++] = it;
		json_array_append_new(arr, json_string(s));
	}
	return arr;
}

static bool blank(const char *s)
{
	return s[strspn(s, " \t\r\n")] == '\0';
}

static json_t *parse_command(struct ctx *c, size_t i, const yaml_node_t *n,
			     const yaml_node_t *stepn, bool required)
{
	json_t *arr = json_array();
	const char *s;
	size_t k;

	if (!present(n)) {
		if (required)
			err_node(c, stepn, "step is missing required key \"command\" (a list "
				 "like [python, train.py] or one shell string)");
		return arr;
	}
	if (n->type == YAML_SCALAR_NODE) {
		if ((s = text(c, n, "command")) == NULL)
			return arr;
		if (blank(s)) {
			err_node(c, n, "command must not be empty");
			return arr;
		}
		check_templates(c, n, s, i);
		json_array_append_new(arr, json_string("/bin/sh"));
		json_array_append_new(arr, json_string("-c"));
		json_array_append_new(arr, json_string(s));
		return arr;
	}
	if (n->type != YAML_SEQUENCE_NODE) {
		err_node(c, n, "command must be a list of strings or one shell string, not a mapping");
		return arr;
	}
	if (nitems(n) == 0)
		err_node(c, n, "command must not be empty");
	for (k = 0; k < nitems(n); k++) {
		const yaml_node_t *it = item(c, n, k);
		if (it == NULL || !visit(c, it))
			break;
		if ((s = text(c, it, "a command item")) == NULL)
			continue;
		if (k == 0 && *s == '\0')
			err_node(c, it, "the first command item (the program) must not be empty");
		check_templates(c, it, s, i);
		json_array_append_new(arr, json_string(s));
	}
	return arr;
}

static json_t *parse_env(struct ctx *c, size_t i, const yaml_node_t *n)
{
	json_t *obj = json_object();
	const char *name, *s;
	size_t k;

	if (!present(n))
		return obj;
	if (n->type != YAML_MAPPING_NODE) {
		err_node(c, n, "env must be a mapping of NAME: value, not a %s", ntype(n));
		return obj;
	}
	for (k = 0; k < npairs(n); k++) {
		const yaml_node_t *key = pair_key(c, n, k), *val = pair_val(c, n, k);
		if (key == NULL || val == NULL || pair_dup(c, n, k))
			continue;
		if (!visit(c, key) || !visit(c, val))
			break;
		if ((name = text(c, key, "an env name")) == NULL)
			continue;
		if (!ident_ok(name, strlen(name))) {
			err_node(c, key, "env name %s is not valid; use letters, digits and _, "
				 "not starting with a digit", q(c, name));
			continue;
		}
		if ((s = text(c, val, "an env value")) == NULL)
			continue;
		check_templates(c, val, s, i);
		json_object_set_new(obj, name, json_string(s));
	}
	return obj;
}

/* The duration in node n (field `what`), or dflt when absent or invalid. */
static int64_t duration_field(struct ctx *c, const yaml_node_t *n, const char *what, int64_t dflt)
{
	const char *s;
	int64_t ms;

	if (!present(n) || (s = text(c, n, what)) == NULL)
		return dflt;
	if (cfg_duration_parse(s, &ms) < 0) {
		err_node(c, n, "%s: %s", what, ferry_error_last());
		return dflt;
	}
	return ms;
}

static int64_t retry_limit(struct ctx *c, const yaml_node_t *n)
{
	const char *s = text(c, n, "retry limit");
	size_t len, k;
	int64_t v = 0;

	if (s == NULL)
		return 0;
	len = strlen(s);
	for (k = 0; k < len && len <= 3 && s[k] >= '0' && s[k] <= '9'; k++)
		v = v * 10 + (s[k] - '0');
	if (len == 0 || k < len || v > 100) {
		err_node(c, n, "retry limit %s must be a whole number from 0 to 100", q(c, s));
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
	} else if (present(n) && map_fields(c, n, "retry", retry_keys, 3, v)) {
		if (present(v[0]))
			limit = retry_limit(c, v[0]);
		backoff = duration_field(c, v[1], "retry backoff", backoff);
		max_backoff = duration_field(c, v[2], "retry max_backoff", max_backoff);
		if (backoff > max_backoff)
			err_node(c, present(v[1]) ? v[1] : n, "retry backoff (%s) must not exceed "
				 "max_backoff (%s)", present(v[1]) ? sval(v[1]) : "1s",
				 present(v[2]) ? sval(v[2]) : "5m");
	}
	return json_pack("{s:I,s:I,s:I}", "limit", (json_int_t)limit, "backoff_ms",
			 (json_int_t)backoff, "max_backoff_ms", (json_int_t)max_backoff);
}

static bool has_dotdot(const char *s)
{
	const char *p = s;

	for (;;) {
		size_t n = strcspn(p, "/");
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return true;
		if (p[n] == '\0')
			return false;
		p += n + 1;
	}
}

/* Registers step i's name; reports a repeated one. */
static void step_register(struct ctx *c, size_t i, const yaml_node_t *namen, const char *s)
{
	json_t *prev = json_object_get(c->byname, s);

	c->steps[i].name = s;
	if (prev != NULL) {
		const struct step *first = &c->steps[json_integer_value(prev)];
		err_node(c, namen, "duplicate step name %s (first defined at line %d)", q(c, s),
			 mark_line(first->node->start_mark));
		return;
	}
	json_object_set_new(c->byname, s, json_integer((json_int_t)i));
}

static json_t *parse_step(struct ctx *c, size_t i, const yaml_node_t *n)
{
	const yaml_node_t *v[SK_N] = {NULL};
	const struct step_kind *kind = &step_kinds[0];
	json_t *js = json_object();
	const char *s = NULL, *kname = kind->name;
	size_t k;

	c->steps[i].node = n;
	if (n->type != YAML_MAPPING_NODE) {
		err_node(c, n, "a step must be a mapping with at least name and command, not a %s",
			 ntype(n));
		return js;
	}
	if (!map_fields(c, n, "step", step_keys, SK_N, v) || c->over)
		return js;

	if (v[SK_NAME] == NULL)
		err_node(c, n, "step is missing required key \"name\"");
	else if ((s = text(c, v[SK_NAME], "step name")) != NULL && !name_ok(s))
		err_node(c, v[SK_NAME], "step name %s is not valid; use 1-63 of a-z, 0-9, _, . "
			 "and -, starting with a letter or digit", q(c, s));
	if (s != NULL)
		step_register(c, i, v[SK_NAME], s);
	json_object_set_new(js, "name", json_string(s ? s : ""));

	if (present(v[SK_KIND]) && (kname = text(c, v[SK_KIND], "kind")) != NULL) {
		struct sbuf known = {0};
		kind = NULL;
		for (k = 0; k < sizeof(step_kinds) / sizeof(step_kinds[0]); k++) {
			if (strcmp(kname, step_kinds[k].name) == 0)
				kind = &step_kinds[k];
			sb_addf(&known, "%s%s", k ? ", " : "", step_kinds[k].name);
		}
		if (kind == NULL)
			err_node(c, v[SK_KIND], "unknown kind %s; known kinds: %s", q(c, kname), known.p);
		free(known.p);
	}
	json_object_set_new(js, "kind", json_string(kname ? kname : "run"));
	json_object_set_new(js, "needs", parse_needs(c, &c->steps[i], v[SK_NEEDS]));
	json_object_set_new(js, "command", parse_command(c, i, v[SK_COMMAND], n,
							 kind == NULL || kind->needs_command));
	json_object_set_new(js, "env", parse_env(c, i, v[SK_ENV]));

	s = "host";
	if (present(v[SK_IMAGE]) && (s = text(c, v[SK_IMAGE], "image")) != NULL && strcmp(s, "host") != 0)
		err_node(c, v[SK_IMAGE], "image %s: only \"host\" is supported until the container "
			 "executor lands", q(c, s));
	json_object_set_new(js, "image", json_string(s ? s : "host"));

	s = NULL;
	if (present(v[SK_WORKDIR]) && (s = text(c, v[SK_WORKDIR], "workdir")) != NULL) {
		if (*s == '\0')
			err_node(c, v[SK_WORKDIR], "workdir must not be empty");
		else if (s[0] != '/' && has_dotdot(s))
			err_node(c, v[SK_WORKDIR], "workdir %s must not contain \"..\"; use a path "
				 "below the run directory or an absolute path", q(c, s));
		check_templates(c, v[SK_WORKDIR], s, i);
	}
	json_object_set_new(js, "workdir", s ? json_string(s) : json_null());
	json_object_set_new(js, "timeout_ms",
			    json_integer(duration_field(c, v[SK_TIMEOUT], "timeout", 0)));
	json_object_set_new(js, "retry", parse_retry(c, v[SK_RETRY]));
	json_object_set_new(js, "line", json_integer(mark_line(n->start_mark)));
	json_object_set_new(js, "col", json_integer(mark_col(n->start_mark)));
	return js;
}

static void parse_steps(struct ctx *c, const yaml_node_t *root, const yaml_node_t *n, json_t *arr)
{
	size_t i, cnt;

	if (n == NULL) {
		err_node(c, root, "missing required key \"steps\" (a list of steps)");
		return;
	}
	if (n->type != YAML_SEQUENCE_NODE) {
		err_node(c, n, "steps must be a list of steps (\"- name: ...\"), not a %s", ntype(n));
		return;
	}
	cnt = nitems(n);
	if (cnt == 0) {
		err_node(c, n, "steps must not be empty");
		return;
	}
	if (cnt > MAX_STEPS) {
		err_node(c, n, "too many steps (%zu); at most %d are allowed", cnt, MAX_STEPS);
		return;
	}
	c->steps = xcalloc(cnt, sizeof(*c->steps));
	c->nsteps = cnt;
	for (i = 0; i < cnt; i++) {
		const yaml_node_t *st = item(c, n, i);
		if (st == NULL || !visit(c, st))
			break;
		json_array_append_new(arr, parse_step(c, i, st));
	}
}

/* ---- the step graph --------------------------------------------------- */

static void sb_add_name(struct sbuf *b, const char *s)
{
	char buf[QBUF];
	size_t n = strlen(quote_to(buf, sizeof(buf), s, strlen(s)));

	sb_addn(b, buf + 1, n - 2); /* without the quotes */
}

static void list_steps(struct ctx *c, struct sbuf *b, size_t except)
{
	size_t j, shown = 0, more = 0;

	for (j = 0; j < c->nsteps; j++) {
		if (j == except || c->steps[j].name == NULL)
			continue;
		if (shown == MAX_LISTED) {
			more++;
			continue;
		}
		if (shown++)
			sb_adds(b, ", ");
		sb_add_name(b, c->steps[j].name);
	}
	if (shown == 0)
		sb_adds(b, "none");
	if (more)
		sb_addf(b, " and %zu more", more);
}

/* "step "a"" or "step 3": how messages name step i. */
static const char *slabel(struct ctx *c, size_t i)
{
	char *b = c->qbuf[c->qi++ % NQBUF];

	if (c->steps[i].name == NULL) {
		snprintf(b, QBUF, "step %zu", i + 1);
		return b;
	}
	memcpy(b, "step ", 5);
	quote_to(b + 5, QBUF - 5, c->steps[i].name, strlen(c->steps[i].name));
	return b;
}

static void resolve_needs(struct ctx *c)
{
	size_t i, k, *mark = xcalloc(c->nsteps, sizeof(size_t));

	for (i = 0; i < c->nsteps; i++) {
		struct step *st = &c->steps[i];
		st->adj = xcalloc(st->nneeds + 1, sizeof(*st->adj));
		for (k = 0; k < st->nneeds; k++) {
			const yaml_node_t *it = st->needs[k];
			json_t *jv = json_object_get(c->byname, sval(it));
			size_t j = jv ? (size_t)json_integer_value(jv) : SIZE_MAX;
			if (j == SIZE_MAX) {
				struct sbuf known = {0};
				list_steps(c, &known, i);
				err_node(c, it, "%s needs unknown step %s; known steps: %s",
					 slabel(c, i), q(c, sval(it)), known.p);
				free(known.p);
			} else if (j == i) {
				err_node(c, it, "%s needs itself; remove it from needs", slabel(c, i));
			} else if (mark[j] == i + 1) {
				err_node(c, it, "%s lists %s in needs twice", slabel(c, i), q(c, sval(it)));
			} else {
				mark[j] = i + 1;
				st->adj[st->nadj++] = j;
			}
		}
	}
	free(mark);
}

/*
 * Reports one cycle of the strongly connected component comp, starting at
 * its first step s: the shortest way back to s along needs, printed in run
 * order ("a -> b" when b needs a).
 */
static void report_cycle(struct ctx *c, size_t s, const size_t *comp, size_t *parent, size_t *queue)
{
	size_t head = 0, tail = 0, last = SIZE_MAX, v, k;
	struct sbuf b = {0};

	queue[tail++] = s;
	while (head < tail && last == SIZE_MAX) {
		v = queue[head++];
		for (k = 0; k < c->steps[v].nadj; k++) {
			size_t w = c->steps[v].adj[k];
			if (comp[w] != comp[s])
				continue;
			if (w == s) {
				last = v;
				break;
			}
			if (parent[w] == SIZE_MAX) {
				parent[w] = v;
				queue[tail++] = w;
			}
		}
	}
	sb_adds(&b, "cycle: ");
	sb_add_name(&b, c->steps[s].name);
	for (v = last; v != s && v != SIZE_MAX; v = parent[v]) {
		sb_adds(&b, " -> ");
		sb_add_name(&b, c->steps[v].name);
	}
	sb_adds(&b, " -> ");
	sb_add_name(&b, c->steps[s].name);
	err_node(c, c->steps[s].node, "%s", b.p);
	free(b.p);
	for (k = 0; k < tail; k++)
		parent[queue[k]] = SIZE_MAX;
}

/* Completes the component held in members[0..n): upstream sets, cycle. */
static void scc_done(struct ctx *c, const size_t *members, size_t n, size_t id,
		     size_t *comp, size_t *parent, size_t *queue)
{
	uint64_t *un = xcalloc(c->words, sizeof(uint64_t));
	size_t i, k, w, first = SIZE_MAX;

	for (i = 0; i < n; i++)
		comp[members[i]] = id;
	for (i = 0; i < n; i++) {
		const struct step *st = &c->steps[members[i]];
		for (k = 0; k < st->nadj; k++) {
			size_t j = st->adj[k];
			un[j / 64] |= (uint64_t)1 << (j % 64);
			if (comp[j] != id)
				for (w = 0; w < c->words; w++)
					un[w] |= c->up[j * c->words + w];
		}
		if (members[i] < first)
			first = members[i];
	}
	for (i = 0; i < n; i++)
		memcpy(&c->up[members[i] * c->words], un, c->words * sizeof(uint64_t));
	if (n > 1)
		report_cycle(c, first, comp, parent, queue);
	free(un);
}

/* Iterative Tarjan over needs edges: components come out upstream first. */
static void check_cycles(struct ctx *c)
{
	size_t n = c->nsteps, counter = 0, ncomp = 0, ns = 0, ncs = 0, r, i;
	size_t *idx = xmalloc(n * sizeof(size_t)), *low = xmalloc(n * sizeof(size_t));
	size_t *comp = xmalloc(n * sizeof(size_t)), *parent = xmalloc(n * sizeof(size_t));
	size_t *stk = xmalloc(n * sizeof(size_t)), *queue = xmalloc(n * sizeof(size_t));
	struct frame { size_t v, e; } *cs = xmalloc(n * sizeof(*cs));
	bool *on = xcalloc(n, sizeof(bool));

	c->words = (n + 63) / 64;
	c->up = xcalloc(n * c->words, sizeof(uint64_t));
	for (i = 0; i < n; i++)
		idx[i] = comp[i] = parent[i] = SIZE_MAX;
	for (r = 0; r < n; r++) {
		if (idx[r] != SIZE_MAX)
			continue;
		idx[r] = low[r] = counter++;
		stk[ns++] = r;
		on[r] = true;
		cs[ncs++] = (struct frame){r, 0};
		while (ncs > 0) {
			struct frame *f = &cs[ncs - 1];
			size_t v = f->v, w;
			if (f->e < c->steps[v].nadj) {
				w = c->steps[v].adj[f->e++];
				if (idx[w] == SIZE_MAX) {
					idx[w] = low[w] = counter++;
					stk[ns++] = w;
					on[w] = true;
					cs[ncs++] = (struct frame){w, 0};
				} else if (on[w] && idx[w] < low[v]) {
					low[v] = idx[w];
				}
				continue;
			}
			ncs--;
			if (ncs > 0 && low[v] < low[cs[ncs - 1].v])
				low[cs[ncs - 1].v] = low[v];
			if (low[v] != idx[v])
				continue;
			for (i = ns; stk[i - 1] != v; i--)
				;
			for (w = i - 1; w < ns; w++)
				on[stk[w]] = false;
			scc_done(c, &stk[i - 1], ns - (i - 1), ncomp++, comp, parent, queue);
			ns = i - 1;
		}
	}
	free(idx);
	free(low);
	free(comp);
	free(parent);
	free(stk);
	free(queue);
	free(cs);
	free(on);
}

static void check_step_refs(struct ctx *c)
{
	size_t k;

	for (k = 0; k < c->ntrefs; k++) {
		const struct tref *r = &c->trefs[k];
		json_t *jv = json_object_get(c->byname, r->target);
		size_t j;

		if (jv == NULL) {
			err_node(c, r->node, "template refers to unknown step %s", q(c, r->target));
			continue;
		}
		j = (size_t)json_integer_value(jv);
		if (j == r->step)
			err_node(c, r->node, "%s cannot use its own outputs", slabel(c, r->step));
		else if (!(c->up[r->step * c->words + j / 64] & ((uint64_t)1 << (j % 64))))
			err_node(c, r->node, "%s uses outputs of %s, which is not upstream of it; "
				 "add %s to its needs", slabel(c, r->step), q(c, r->target),
				 q(c, r->target));
	}
}

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
	map_fields(c, root, "top-level", top_keys, TK_N, v);
	if (v[TK_NAME] == NULL)
		err_node(c, root, "missing required key \"name\"");
	else if ((s = text(c, v[TK_NAME], "name")) != NULL && !name_ok(s))
		err_node(c, v[TK_NAME], "workflow name %s is not valid; use 1-63 of a-z, 0-9, _, . "
			 "and -, starting with a letter or digit", q(c, s));
	else if (s != NULL)
		json_object_set_new(spec, "name", json_string(s));
	if (present(v[TK_DESC]) && (s = text(c, v[TK_DESC], "description")) != NULL)
		json_object_set_new(spec, "description", json_string(s));
	if (present(v[TK_PARAMS]) && !c->over)
		parse_params(c, v[TK_PARAMS]);
	if (!c->over)
		parse_steps(c, root, v[TK_STEPS], steps);
	if (c->nsteps > 0 && !c->over) {
		resolve_needs(c);
		check_cycles(c);
		check_step_refs(c);
	}
	return spec;
}

/* ---- entry points ----------------------------------------------------- */

static int hash_hex(char out[65], const char *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0, i;

	if (EVP_Digest(p, n, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32) {
		out[0] = '\0';
		ferry_error_set("sha256 of the workflow failed");
		return FERRY_ERROR;
	}
	for (i = 0; i < 32; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[64] = '\0';
	return FERRY_OK;
}

static void syntax_error(struct ctx *c, const yaml_parser_t *p)
{
	const char *problem = p->problem ? p->problem : "unknown error";
	int line = 1, col = 1;
	size_t i;

	if (p->error == YAML_MEMORY_ERROR) {
		err_pos(c, 1, 1, "out of memory while reading YAML");
	} else if (p->error == YAML_READER_ERROR) {
		for (i = 0; i < p->problem_offset && i < c->len; i++) {
			if (c->src[i] == '\n') {
				line++;
				col = 1;
			} else if (((unsigned char)c->src[i] & 0xC0) != 0x80) {
				col++;
			}
		}
		if (p->problem_value >= 0)
			err_pos(c, line, col, "cannot read the file: %s (byte 0x%02x); save it as UTF-8 "
				"text", problem, (unsigned)p->problem_value);
		else
			err_pos(c, line, col, "cannot read the file: %s", problem);
	} else if (p->context != NULL) {
		err_pos(c, mark_line(p->problem_mark), mark_col(p->problem_mark),
			"syntax error: %s (%s at line %d, column %d)", problem, p->context,
			mark_line(p->context_mark), mark_col(p->context_mark));
	} else {
		err_pos(c, mark_line(p->problem_mark), mark_col(p->problem_mark),
			"syntax error: %s", problem);
	}
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
	size_t i;
	int error = FERRY_OK;

	*out = NULL;
	memset(&c, 0, sizeof(c));
	c.file = filename ? filename : "<inline>";
	if (yaml == NULL)
		len = 0;
	c.src = yaml ? yaml : "";
	c.len = len;
	if (hash_out != NULL && (error = hash_hex(hash_out, c.src, len)) < 0)
		goto out;
	if (len > CFG_MAX_YAML) {
		err_pos(&c, 1, 1, "the file is %zu bytes; workflows are limited to %d bytes", len,
			CFG_MAX_YAML);
		goto out;
	}
	if (!yaml_parser_initialize(&parser)) {
		ferry_error_set("cannot initialise the YAML parser");
		error = FERRY_ERROR;
		goto out;
	}
	have_parser = true;
	yaml_parser_set_input_string(&parser, (const unsigned char *)c.src, len);
	if (!yaml_parser_load(&parser, &doc)) {
		syntax_error(&c, &parser);
		goto out;
	}
	have_doc = true;
	c.doc = &doc;
	root = yaml_document_get_root_node(&doc);
	if (root == NULL || is_null(root)) {
		err_pos(&c, root ? mark_line(root->start_mark) : 1, root ? mark_col(root->start_mark) : 1,
			"empty document; a workflow needs at least name and steps");
		goto out;
	}
	if (!yaml_parser_load(&parser, &doc2)) {
		syntax_error(&c, &parser);
	} else {
		have_doc2 = true;
		if (yaml_document_get_root_node(&doc2) != NULL)
			err_pos(&c, mark_line(doc2.start_mark), mark_col(doc2.start_mark),
				"more than one document; a workflow file holds exactly one "
				"(remove the second \"---\")");
	}
	c.budget = 8 * (len + 16 * (size_t)(doc.nodes.top - doc.nodes.start)) + (1u << 20);
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
	json_decref(c.byname);
	for (i = 0; i < c.nerrs; i++)
		free(c.errs[i].msg);
	free(c.errs);
	for (i = 0; i < c.nsteps; i++) {
		free(c.steps[i].needs);
		free(c.steps[i].adj);
	}
	free(c.steps);
	for (i = 0; i < c.ntrefs; i++)
		free(c.trefs[i].target);
	free(c.trefs);
	free(c.up);
	free(c.pair_base);
	free(c.dup);
	if (have_doc2)
		yaml_document_delete(&doc2);
	if (have_doc)
		yaml_document_delete(&doc);
	if (have_parser)
		yaml_parser_delete(&parser);
	return error;
}

int cfg_duration_parse(const char *s, int64_t *out_ms)
{
	static const struct { const char *name; int64_t ms; } units[] = {
		{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000},
	};
	char qs[QBUF];
	const char *p;
	int64_t total = 0;

	if (s == NULL)
		s = "";
	quote_to(qs, sizeof(qs), s, strlen(s));
	if (*s == '\0') {
		ferry_error_set("duration is empty; use e.g. 30s, 5m, 2h");
		return FERRY_EINVALID;
	}
	for (p = s; *p != '\0';) {
		int64_t num = 0, mult = 0;
		const char *u;
		size_t k;

		if (*p < '0' || *p > '9') {
			ferry_error_set("duration %s: expected a number and a unit, e.g. 30s, 5m, 2h", qs);
			return FERRY_EINVALID;
		}
		for (; *p >= '0' && *p <= '9'; p++) {
			if (num > (INT64_MAX - (*p - '0')) / 10)
				goto overflow;
			num = num * 10 + (*p - '0');
		}
		for (u = p; (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'); p++)
			;
		if (p == u && *p == '\0') {
			ferry_error_set("duration %s: missing unit (use e.g. 30s, 5m, 2h)", qs);
			return FERRY_EINVALID;
		}
		if (p == u) {
			ferry_error_set("duration %s: use whole numbers with units, e.g. 90s or 1h30m", qs);
			return FERRY_EINVALID;
		}
		for (k = 0; k < sizeof(units) / sizeof(units[0]); k++)
			if (strlen(units[k].name) == (size_t)(p - u) && memcmp(u, units[k].name, (size_t)(p - u)) == 0)
				mult = units[k].ms;
		if (mult == 0) {
			char qu[QBUF];
			ferry_error_set("duration %s: unknown unit %s (use ms, s, m, h or d)", qs,
					quote_to(qu, sizeof(qu), u, (size_t)(p - u)));
			return FERRY_EINVALID;
		}
		if (num > INT64_MAX / mult || total > INT64_MAX - num * mult)
			goto overflow;
		total += num * mult;
	}
	if (total <= 0) {
		ferry_error_set("duration %s must be greater than zero", qs);
		return FERRY_EINVALID;
	}
	*out_ms = total;
	return FERRY_OK;
overflow:
	ferry_error_set("duration %s is too large", qs);
	return FERRY_EINVALID;
}

/* A parameter value as text: strings, integers, reals, booleans; else NULL. */
static char *json_text(const json_t *v)
{
	char buf[64];
	int prec;
	double d;

	switch (json_typeof(v)) {
	case JSON_STRING:
		if (memchr(json_string_value(v), 0, json_string_length(v)) != NULL)
			return NULL;
		return xstrdup(json_string_value(v));
	case JSON_INTEGER:
		return xasprintf("%" JSON_INTEGER_FORMAT, json_integer_value(v));
	case JSON_REAL:
		/* the shortest text that reads back the same; 1 stays "1.0" */
		d = json_real_value(v);
		for (prec = 1; prec <= 17; prec++) {
			snprintf(buf, sizeof(buf), "%.*g", prec, d);
			if (strtod(buf, NULL) == d)
				break;
		}
		if (strpbrk(buf, ".eEn") == NULL)
			return xasprintf("%s.0", buf);
		return xstrdup(buf);
	case JSON_TRUE:
		return xstrdup("true");
	case JSON_FALSE:
		return xstrdup("false");
	default:
		return NULL;
	}
}

int cfg_params_resolve(json_t **out, const json_t *spec, const json_t *given)
{
	const json_t *decl = spec ? json_object_get(spec, "params") : NULL;
	json_t *res = json_object(), *d, *v;
	struct sbuf names = {0};
	char qk[QBUF];
	const char *key;
	char *val = NULL;
	void *it;
	int error = FERRY_OK;

	*out = NULL;
	if (!json_is_object(decl))
		decl = NULL;
	if (given != NULL && !json_is_object(given)) {
		ferry_error_set("parameters must be a JSON object of name: value");
		error = FERRY_EINVALID;
		goto out;
	}
	for (it = json_object_iter((json_t *)given); it != NULL;
	     it = json_object_iter_next((json_t *)given, it)) {
		key = json_object_iter_key(it);
		if (decl == NULL || json_object_get(decl, key) == NULL) {
			if (decl != NULL)
				list_params(decl, &names);
			ferry_error_set("unknown parameter %s; declared: %s",
					quote_to(qk, sizeof(qk), key, strlen(key)),
					names.p ? names.p : "none");
			error = FERRY_EINVALID;
			goto out;
		}
	}
	if (decl == NULL)
		goto out;
	json_object_foreach((json_t *)decl, key, d) {
		quote_to(qk, sizeof(qk), key, strlen(key));
		v = given ? json_object_get(given, key) : NULL;
		if (v != NULL) {
			if ((val = json_text(v)) == NULL) {
				ferry_error_set("parameter %s must be a string, number or boolean", qk);
				error = FERRY_EINVALID;
				goto out;
			}
		} else if (json_is_string(json_object_get(d, "default"))) {
			val = xstrdup(json_string_value(json_object_get(d, "default")));
		} else {
			ferry_error_set("parameter %s has no default and was not given (use -p %s=VALUE)",
					qk, key);
			error = FERRY_EINVALID;
			goto out;
		}
		json_object_set_new(res, key, json_string(val));
		free(val);
		val = NULL;
	}
out:
	free(names.p);
	free(val);
	if (error < 0)
		json_decref(res);
	else
		*out = res;
	return error;
}

int cfg_template_render(char **out, const char *tmpl, const json_t *params, const char *run_id)
{
	struct sbuf b = {0};
	const char *p = tmpl, *start, *expr = NULL, *end = NULL;
	size_t elen = 0;
	struct texpr t;
	char *name = NULL, *val = NULL;
	int error = FERRY_OK;

	*out = NULL;
	if (tmpl == NULL) {
		ferry_error_set("no template to render");
		return FERRY_EINVALID;
	}
	while ((start = tmpl_next(p, &expr, &elen, &end)) != NULL && end != NULL) {
		sb_addn(&b, p, (size_t)(start - p));
		texpr_parse(expr, elen, &t);
		if (t.kind == T_PARAM) {
			const json_t *v;
			name = xstrndup(t.a, t.alen);
			v = params ? json_object_get(params, name) : NULL;
			if (v == NULL || (val = json_text(v)) == NULL) {
				ferry_error_set("template refers to parameter \"%s\", which has %s", name,
						v ? "a value that is not a string, number or boolean"
						  : "no value");
				error = FERRY_EINVALID;
				goto out;
			}
			sb_adds(&b, val);
			free(name);
			free(val);
			name = val = NULL;
		} else if (t.kind == T_RUNID && run_id != NULL) {
			sb_adds(&b, run_id);
		} else {
			sb_addn(&b, start, (size_t)(end - start));
		}
		p = end;
	}
	sb_adds(&b, p);
	*out = sb_take(&b);
out:
	free(name);
	free(val);
	if (error < 0)
		free(b.p);
	return error;
}

/*
 * cond — the `when:` condition language (cond.h has the grammar and the
 * semantics). A recursive-descent parser over the text builds a tree of
 * nodes in one array (depth bounded by COND_MAX_DEPTH, size by the text);
 * evaluation walks it once, short-circuiting and/or, with each reference
 * looked up through the caller's function when it is reached.
 */
#include "plan/cond.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

enum node_type { N_NUM, N_STR, N_BOOL, N_NULL, N_REF, N_NOT, N_NEG, N_AND, N_OR, N_CMP, N_ARITH };

struct node {
	enum node_type type;
	int a, b;      /* operands (indices), -1 when none */
	char op[3];    /* N_CMP, N_ARITH */
	double num;    /* N_NUM */
	char *str;     /* N_STR */
	int boolean;   /* N_BOOL */
	int ref;       /* N_REF: index into refs */
	int col;
};

struct cond {
	struct node *nodes;
	size_t nnodes, capnodes;
	struct cond_ref *refs;
	size_t nrefs, caprefs;
	int root;
};

struct parser {
	struct cond *c;
	const char *text, *p;
	int depth;
	int failed;
};

static int col_of(const struct parser *ps, const char *at)
{
	return (int)(at - ps->text) + 1;
}

static void perr(struct parser *ps, const char *at, const char *fmt, ...) FERRY_PRINTF(3, 4);
static void perr(struct parser *ps, const char *at, const char *fmt, ...)
{
	char msg[384];
	va_list ap;

	if (ps->failed)
		return;
	ps->failed = 1;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ferry_error_set("at column %d: %s", col_of(ps, at), msg);
}

static int add_node(struct parser *ps, enum node_type t, const char *at)
{
	struct cond *c = ps->c;

	if (c->nnodes == c->capnodes) {
		c->capnodes = c->capnodes ? c->capnodes * 2 : 16;
		c->nodes = xrealloc(c->nodes, c->capnodes * sizeof(*c->nodes));
	}
	memset(&c->nodes[c->nnodes], 0, sizeof(c->nodes[0]));
	c->nodes[c->nnodes].type = t;
	c->nodes[c->nnodes].a = c->nodes[c->nnodes].b = -1;
	c->nodes[c->nnodes].col = col_of(ps, at);
	return (int)c->nnodes++;
}

static void skip_ws(struct parser *ps)
{
	while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
		ps->p++;
}

/* Whether the text at p is the word w (not the start of a longer name). */
static int word_at(const char *p, const char *w)
{
	size_t n = strlen(w);

	return strncmp(p, w, n) == 0 && !isalnum((unsigned char)p[n]) && p[n] != '_' && p[n] != '.';
}

/* A description of what is at p, for "expected X, found Y". */
static const char *found(const char *p, char buf[32])
{
	size_t n = 0;

	if (*p == '\0')
		return "the end";
	while (p[n] && n < 12 && !isspace((unsigned char)p[n]))
		n++;
	snprintf(buf, 32, "\"%.*s\"", (int)n, p);
	return buf;
}

static int parse_or(struct parser *ps);

static int ident_char(int ch)
{
	return isalnum(ch) || ch == '_';
}

/* KEY after ".outputs" or ".metrics": .name[.name…] or ["any text"]. */
static char *parse_key(struct parser *ps, const char *what)
{
	const char *s;

	if (*ps->p == '[') {
		char q = ps->p[1];
		s = ps->p + 2;
		if (q != '"' && q != '\'') {
			perr(ps, ps->p, "expected a quoted key after \"%s[\", e.g. %s[\"val/loss\"]", what, what);
			return NULL;
		}
		const char *e = strchr(s, q);
		if (e == NULL || e[1] != ']' || e == s) {
			perr(ps, ps->p, "a key in brackets is a non-empty quoted string closed by \"]\"");
			return NULL;
		}
		ps->p = e + 2;
		return xstrndup(s, (size_t)(e - s));
	}
	if (*ps->p != '.' || !ident_char((unsigned char)ps->p[1])) {
		perr(ps, ps->p, "expected a key after \"%s\" (%s.NAME, or %s[\"NAME\"])", what, what, what);
		return NULL;
	}
	s = ++ps->p;
	while (ident_char((unsigned char)*ps->p) || (*ps->p == '.' && ident_char((unsigned char)ps->p[1])))
		ps->p++;
	return xstrndup(s, (size_t)(ps->p - s));
}

static const char *const STEP_NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_.-";

/* A reference at ps->p (params., production., steps.); a node or -1. */
static int parse_ref(struct parser *ps)
{
	const char *start = ps->p;
	struct cond_ref r = {0};
	struct cond *c = ps->c;
	char *step = NULL, *key = NULL;
	int n;

	if (strncmp(ps->p, "params.", 7) == 0 || strncmp(ps->p, "production.", 11) == 0) {
		r.kind = *ps->p == 'p' && ps->p[1] == 'a' ? CREF_PARAM : CREF_PRODUCTION;
		ps->p = strchr(ps->p, '.');
		if ((key = parse_key(ps, r.kind == CREF_PARAM ? "params" : "production")) == NULL)
			return -1;
	} else if (strncmp(ps->p, "steps.", 6) == 0) {
		/* the step name runs up to .outputs or .metrics (names may hold . and -) */
		const char *s = ps->p + 6, *e = s, *cut = NULL;
		size_t span = strspn(s, STEP_NAME_CHARS);
		for (e = s; e < s + span + 1 && cut == NULL; e++) {
			if (*e != '.' && *e != '[')
				continue;
			if (strncmp(e, ".outputs", 8) == 0 && (e[8] == '.' || e[8] == '['))
				cut = e, r.kind = CREF_OUTPUT;
			else if (strncmp(e, ".metrics", 8) == 0 && (e[8] == '.' || e[8] == '['))
				cut = e, r.kind = CREF_METRIC;
		}
		if (cut == NULL || cut == s) {
			perr(ps, start, "a step reference is steps.STEP.outputs.KEY or steps.STEP.metrics.KEY");
			return -1;
		}
		step = xstrndup(s, (size_t)(cut - s));
		ps->p = cut + 8;
		if ((key = parse_key(ps, r.kind == CREF_OUTPUT ? "outputs" : "metrics")) == NULL) {
			free(step);
			return -1;
		}
	} else {
		char buf[32];
		perr(ps, start, "expected a value (a number, a 'string', true, false, null, params.NAME, "
		     "steps.STEP.outputs.KEY, steps.STEP.metrics.KEY or production.METRIC), found %s",
		     found(start, buf));
		return -1;
	}
	if (c->nrefs == c->caprefs) {
		c->caprefs = c->caprefs ? c->caprefs * 2 : 4;
		c->refs = xrealloc(c->refs, c->caprefs * sizeof(*c->refs));
	}
	r.step = step;
	r.key = key;
	r.text = xstrndup(start, (size_t)(ps->p - start));
	r.col = col_of(ps, start);
	c->refs[c->nrefs] = r;
	n = add_node(ps, N_REF, start);
	c->nodes[n].ref = (int)c->nrefs++;
	return n;
}

static int parse_number(struct parser *ps)
{
	const char *s = ps->p;
	char *end;
	double v;
	int n;

	/* digits [. digits] [e[+-]digits]: no hex, inf or nan (strtod would take them) */
	end = (char *)s;
	while (isdigit((unsigned char)*end))
		end++;
	if (*end == '.' && isdigit((unsigned char)end[1]))
		for (end++; isdigit((unsigned char)*end); end++)
			;
	if ((*end == 'e' || *end == 'E') &&
	    (isdigit((unsigned char)end[1]) || ((end[1] == '+' || end[1] == '-') && isdigit((unsigned char)end[2]))))
		for (end += 2; isdigit((unsigned char)*end); end++)
			;
	{
		char *tmp = xstrndup(s, (size_t)(end - s)), *te;
		errno = 0;
		v = strtod(tmp, &te);
		free(tmp);
	}
	if (!isfinite(v) || errno == ERANGE) {
		perr(ps, s, "number %.*s is out of range", (int)(end - s > 40 ? 40 : end - s), s);
		return -1;
	}
	if (ident_char((unsigned char)*end)) {
		perr(ps, end, "a number runs into a name; put a blank or an operator between them");
		return -1;
	}
	ps->p = end;
	if (*ps->p == '%') {
		v /= 100;
		ps->p++;
	}
	n = add_node(ps, N_NUM, s);
	ps->c->nodes[n].num = v;
	return n;
}

static int parse_string(struct parser *ps)
{
	const char *s = ps->p;
	char q = *ps->p++, *out = xmalloc(strlen(ps->p) + 1);
	size_t k = 0;
	int n;

	while (*ps->p && *ps->p != q) {
		if (*ps->p == '\\' && (ps->p[1] == q || ps->p[1] == '\\'))
			ps->p++;
		out[k++] = *ps->p++;
	}
	if (*ps->p != q) {
		free(out);
		perr(ps, s, "a string opened here is not closed (with %c)", q);
		return -1;
	}
	ps->p++;
	out[k] = '\0';
	n = add_node(ps, N_STR, s);
	ps->c->nodes[n].str = out;
	return n;
}

static int enter(struct parser *ps)
{
	if (++ps->depth > COND_MAX_DEPTH) {
		perr(ps, ps->p, "nested more than %d levels deep", COND_MAX_DEPTH);
		return -1;
	}
	return 0;
}

static int parse_atom(struct parser *ps)
{
	const char *s;
	int n;

	skip_ws(ps);
	s = ps->p;
	if (*s == '(') {
		ps->p++;
		if ((n = parse_or(ps)) < 0)
			return -1;
		skip_ws(ps);
		if (*ps->p != ')') {
			char buf[32];
			perr(ps, ps->p, "expected \")\" to close the \"(\" at column %d, found %s", col_of(ps, s),
			     found(ps->p, buf));
			return -1;
		}
		ps->p++;
		return n;
	}
	if (s[0] == '{' && s[1] == '{') {
		ps->p += 2;
		skip_ws(ps);
		if ((n = parse_ref(ps)) < 0)
			return -1;
		skip_ws(ps);
		if (ps->p[0] != '}' || ps->p[1] != '}') {
			perr(ps, ps->p, "expected \"}}\" to close the \"{{\" at column %d", col_of(ps, s));
			return -1;
		}
		ps->p += 2;
		return n;
	}
	if (isdigit((unsigned char)*s) || (*s == '.' && isdigit((unsigned char)s[1])))
		return parse_number(ps);
	if (*s == '"' || *s == '\'')
		return parse_string(ps);
	if (word_at(s, "true") || word_at(s, "false")) {
		n = add_node(ps, N_BOOL, s);
		ps->c->nodes[n].boolean = *s == 't';
		ps->p += *s == 't' ? 4 : 5;
		return n;
	}
	if (word_at(s, "null")) {
		ps->p += 4;
		return add_node(ps, N_NULL, s);
	}
	return parse_ref(ps);
}

static int parse_unary(struct parser *ps)
{
	int n, a;

	skip_ws(ps);
	if (*ps->p != '-')
		return parse_atom(ps);
	if (enter(ps) < 0)
		return -1;
	n = add_node(ps, N_NEG, ps->p++);
	if ((a = parse_unary(ps)) < 0)
		return -1;
	ps->c->nodes[n].a = a;
	ps->depth--;
	return n;
}

/* A binary level: operands by next, operators from ops (longest first). */
static int parse_binary(struct parser *ps, int (*next)(struct parser *), const char *const *ops,
			enum node_type t)
{
	int left, right, n;

	if ((left = next(ps)) < 0)
		return -1;
	for (;;) {
		const char *op = NULL, *at;
		size_t len = 0;

		skip_ws(ps);
		at = ps->p;
		for (const char *const *o = ops; *o; o++) {
			len = strlen(*o);
			if (isalpha((unsigned char)(*o)[0]) ? word_at(at, *o) : strncmp(at, *o, len) == 0) {
				op = *o;
				break;
			}
		}
		if (op == NULL)
			return left;
		/* "=" alone, "=<": a likely slip, said as such */
		if (enter(ps) < 0)
			return -1;
		ps->p += len;
		if ((right = next(ps)) < 0)
			return -1;
		ps->depth--;
		n = add_node(ps, t, at);
		ps->c->nodes[n].a = left;
		ps->c->nodes[n].b = right;
		snprintf(ps->c->nodes[n].op, sizeof(ps->c->nodes[n].op), "%s",
			 strcmp(op, "and") == 0 ? "&&" : strcmp(op, "or") == 0 ? "||" : op);
		left = n;
	}
}

static int parse_product(struct parser *ps)
{
	static const char *const ops[] = {"*", "/", NULL};
	return parse_binary(ps, parse_unary, ops, N_ARITH);
}

static int parse_sum(struct parser *ps)
{
	static const char *const ops[] = {"+", "-", NULL};
	return parse_binary(ps, parse_product, ops, N_ARITH);
}

static int parse_cmp(struct parser *ps)
{
	static const char *const ops[] = {">=", "<=", "==", "!=", ">", "<", NULL};
	int left, right, n;
	const char *at;

	if ((left = parse_sum(ps)) < 0)
		return -1;
	skip_ws(ps);
	at = ps->p;
	if (at[0] == '=' && at[1] != '=') {
		perr(ps, at, "\"=\" is not an operator; compare with \"==\"");
		return -1;
	}
	for (const char *const *o = ops; *o; o++) {
		size_t len = strlen(*o);
		if (strncmp(at, *o, len) != 0)
			continue;
		ps->p += len;
		if ((right = parse_sum(ps)) < 0)
			return -1;
		skip_ws(ps);
		if (strchr("<>=!", *ps->p) != NULL && *ps->p && ps->p[0] != '\0' &&
		    !(ps->p[0] == '!' && ps->p[1] != '=')) {
			perr(ps, ps->p, "comparisons do not chain (a < b < c); join them with \"and\"");
			return -1;
		}
		n = add_node(ps, N_CMP, at);
		ps->c->nodes[n].a = left;
		ps->c->nodes[n].b = right;
		snprintf(ps->c->nodes[n].op, sizeof(ps->c->nodes[n].op), "%s", *o);
		return n;
	}
	return left;
}

static int parse_not(struct parser *ps)
{
	int n, a;
	const char *at;

	skip_ws(ps);
	at = ps->p;
	if (!((at[0] == '!' && at[1] != '=') || word_at(at, "not")))
		return parse_cmp(ps);
	if (enter(ps) < 0)
		return -1;
	ps->p += at[0] == '!' ? 1 : 3;
	n = add_node(ps, N_NOT, at);
	if ((a = parse_not(ps)) < 0)
		return -1;
	ps->c->nodes[n].a = a;
	ps->depth--;
	return n;
}

static int parse_and(struct parser *ps)
{
	static const char *const ops[] = {"&&", "and", NULL};
	return parse_binary(ps, parse_not, ops, N_AND);
}

static int parse_or(struct parser *ps)
{
	static const char *const ops[] = {"||", "or", NULL};
	int n;

	if (enter(ps) < 0)
		return -1;
	n = parse_binary(ps, parse_and, ops, N_OR);
	ps->depth--;
	return n;
}

void cond_free(struct cond *c)
{
	if (c == NULL)
		return;
	for (size_t i = 0; i < c->nnodes; i++)
		free(c->nodes[i].str);
	for (size_t i = 0; i < c->nrefs; i++) {
		free((char *)c->refs[i].step);
		free((char *)c->refs[i].key);
		free((char *)c->refs[i].text);
	}
	free(c->nodes);
	free(c->refs);
	free(c);
}

int cond_parse(struct cond **out, const char *text)
{
	struct parser ps = {.text = text, .p = text};
	size_t len = strlen(text);
	int root;

	*out = NULL;
	if (len > COND_MAX_LEN) {
		ferry_error_set("a condition is at most %d bytes; this one is %zu", COND_MAX_LEN, len);
		return FERRY_EINVALID;
	}
	ps.c = xcalloc(1, sizeof(*ps.c));
	skip_ws(&ps);
	if (*ps.p == '\0') {
		cond_free(ps.c);
		ferry_error_set("the condition is empty");
		return FERRY_EINVALID;
	}
	root = parse_or(&ps);
	if (root >= 0) {
		skip_ws(&ps);
		if (*ps.p != '\0') {
			char buf[32];
			perr(&ps, ps.p, "expected an operator (and, or, >=, ==, +, …) or the end, found %s",
			     found(ps.p, buf));
		}
	}
	if (ps.failed || root < 0) {
		if (!ps.failed)
			ferry_error_set("at column 1: not a condition");
		cond_free(ps.c);
		return FERRY_EINVALID;
	}
	ps.c->root = root;
	*out = ps.c;
	return FERRY_OK;
}

size_t cond_nrefs(const struct cond *c)
{
	return c->nrefs;
}

const struct cond_ref *cond_ref_at(const struct cond *c, size_t i)
{
	return i < c->nrefs ? &c->refs[i] : NULL;
}

/* ---- evaluation ------------------------------------------------------- */

enum vtype { V_NULL, V_NOPROD, V_NUM, V_STR, V_BOOL, V_OTHER };

struct val {
	enum vtype t;
	double num;
	const char *str; /* V_STR: points into the node or into j */
	int boolean;
	json_t *j;       /* a looked-up value held for str and V_OTHER (a reference) */
};

struct evalctx {
	const struct cond *c;
	cond_lookup_fn lookup;
	void *arg;
	json_t **held;   /* looked-up values, released at the end */
	size_t nheld;
	char *explain;
	size_t nexplained;
	int rc;          /* first error */
};

static const char *vtype_name(const struct val *v)
{
	switch (v->t) {
	case V_NULL: return "null";
	case V_NOPROD: return "absent (no production version)";
	case V_NUM: return "a number";
	case V_STR: return "a string";
	case V_BOOL: return "a boolean";
	default: return "a list or an object";
	}
}

/* v for a message: 0.91, "text" (clipped), true, null. */
static void vtext(char *buf, size_t n, const struct val *v)
{
	switch (v->t) {
	case V_NUM: snprintf(buf, n, "%.10g", v->num); break;
	case V_STR: snprintf(buf, n, "\"%.40s%s\"", v->str, strlen(v->str) > 40 ? "…" : ""); break;
	case V_BOOL: snprintf(buf, n, "%s", v->boolean ? "true" : "false"); break;
	case V_NULL: snprintf(buf, n, "null"); break;
	case V_NOPROD: snprintf(buf, n, "none"); break;
	default: {
		char *t = json_dumps(v->j, JSON_COMPACT | JSON_ENCODE_ANY);
		snprintf(buf, n, "%.40s%s", t ? t : "?", t && strlen(t) > 40 ? "…" : "");
		free(t);
	}
	}
}

static int eval_fail(struct evalctx *x, int col, const char *fmt, ...) FERRY_PRINTF(3, 4);
static int eval_fail(struct evalctx *x, int col, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (x->rc == 0) {
		x->rc = FERRY_EINVALID;
		ferry_error_set("at column %d: %s", col, msg);
	}
	return -1;
}

static void explain_add(struct evalctx *x, const char *ref, const char *value, const char *why)
{
	char *old = x->explain;

	if (x->nexplained++ >= 8)
		return;
	x->explain = xasprintf("%s%s%s = %s%s%s%s", old ? old : "", old ? ", " : "", ref, value,
			       why ? " (" : "", why ? why : "", why ? ")" : "");
	free(old);
}

static void from_json(struct val *v, json_t *j)
{
	v->j = j;
	if (json_is_null(j))
		v->t = V_NULL;
	else if (json_is_number(j))
		v->t = V_NUM, v->num = json_number_value(j);
	else if (json_is_string(j))
		v->t = V_STR, v->str = json_string_value(j);
	else if (json_is_boolean(j))
		v->t = V_BOOL, v->boolean = json_is_true(j);
	else
		v->t = V_OTHER;
}

static int eval(struct evalctx *x, int i, struct val *out);

static int lookup_ref(struct evalctx *x, const struct node *nd, struct val *out)
{
	const struct cond_ref *r = &x->c->refs[nd->ref];
	json_t *j = NULL;
	char *why = NULL, buf[96];
	int rc = x->lookup(&j, &why, r, x->arg);

	if (rc < 0) {
		free(why);
		json_decref(j);
		if (x->rc == 0)
			x->rc = rc;
		return -1;
	}
	if (rc >= 1 || j == NULL) {
		json_decref(j);
		if (r->kind == CREF_PRODUCTION && rc == 1) {
			out->t = V_NOPROD;
			explain_add(x, r->text, "none", why ? why : "no production version");
			free(why);
			return 0;
		}
		eval_fail(x, r->col, "%s: %s", r->text, why ? why : "not there");
		free(why);
		return -1;
	}
	x->held = xrealloc(x->held, (x->nheld + 1) * sizeof(*x->held));
	x->held[x->nheld++] = j;
	from_json(out, j);
	vtext(buf, sizeof(buf), out);
	explain_add(x, r->text, buf, why);
	free(why);
	return 0;
}

/* Whether s is wholly a number (blanks around allowed), into *d. */
static int str_number(const char *s, double *d)
{
	char *end;

	while (isspace((unsigned char)*s))
		s++;
	if (*s == '\0' || (!isdigit((unsigned char)*s) && *s != '-' && *s != '+' && *s != '.'))
		return 0;
	errno = 0;
	*d = strtod(s, &end);
	while (isspace((unsigned char)*end))
		end++;
	return *end == '\0' && errno == 0 && isfinite(*d);
}

/* A value as a condition: 1, 0, or -1 after an error. */
static int truth(struct evalctx *x, const struct val *v, int col)
{
	char buf[96];

	switch (v->t) {
	case V_BOOL: return v->boolean;
	case V_NUM: return v->num != 0;
	case V_NULL: return 0;
	case V_STR:
		if (strcmp(v->str, "true") == 0)
			return 1;
		if (strcmp(v->str, "false") == 0)
			return 0;
		break;
	default: break;
	}
	vtext(buf, sizeof(buf), v);
	return eval_fail(x, col, "%s is %s, not a condition (true or false); compare it with something", buf,
			 vtype_name(v));
}

static int compare(struct evalctx *x, const char *op, const struct val *a, const struct val *b, int col)
{
	int eq = op[0] == '=' || op[0] == '!';
	int c;
	double da, db;
	char ba[96], bb[96];

	if (a->t == V_NOPROD || b->t == V_NOPROD) {
		const struct val *o = a->t == V_NOPROD ? b : a;
		if (!eq)
			return 1; /* as the gates' "OP production": holds until there is one */
		c = o->t == V_NULL || o->t == V_NOPROD;
		return op[0] == '=' ? c : !c;
	}
	if (a->t == V_NULL || b->t == V_NULL) {
		if (eq) {
			c = a->t == b->t;
			return op[0] == '=' ? c : !c;
		}
		goto mismatch;
	}
	if (a->t == V_NUM && b->t == V_NUM) {
		da = a->num, db = b->num;
		goto numbers;
	}
	if ((a->t == V_NUM && b->t == V_STR && str_number(b->str, &db) && (da = a->num, 1)) ||
	    (b->t == V_NUM && a->t == V_STR && str_number(a->str, &da) && (db = b->num, 1)))
		goto numbers;
	if (a->t == V_STR && b->t == V_STR) {
		c = strcmp(a->str, b->str);
		goto ordered;
	}
	if (a->t == V_BOOL || b->t == V_BOOL) {
		int ta, tb;
		if (!eq)
			goto mismatch;
		if ((a->t == V_STR && strcmp(a->str, "true") && strcmp(a->str, "false")) ||
		    (b->t == V_STR && strcmp(b->str, "true") && strcmp(b->str, "false")) ||
		    (a->t != V_BOOL && a->t != V_STR) || (b->t != V_BOOL && b->t != V_STR))
			goto mismatch;
		ta = a->t == V_BOOL ? a->boolean : strcmp(a->str, "true") == 0;
		tb = b->t == V_BOOL ? b->boolean : strcmp(b->str, "true") == 0;
		return op[0] == '=' ? ta == tb : ta != tb;
	}
	if (a->t == V_OTHER && b->t == V_OTHER && eq) {
		c = json_equal(a->j, b->j);
		return op[0] == '=' ? c : !c;
	}
mismatch:
	vtext(ba, sizeof(ba), a);
	vtext(bb, sizeof(bb), b);
	return eval_fail(x, col, "cannot compare %s (%s) %s %s (%s)", ba, vtype_name(a), op, bb, vtype_name(b));
numbers:
	c = da < db ? -1 : da > db ? 1 : 0;
ordered:
	if (strcmp(op, ">=") == 0) return c >= 0;
	if (strcmp(op, ">") == 0) return c > 0;
	if (strcmp(op, "<=") == 0) return c <= 0;
	if (strcmp(op, "<") == 0) return c < 0;
	if (strcmp(op, "==") == 0) return c == 0;
	return c != 0;
}

static int number_of(struct evalctx *x, const struct val *v, double *d, int col, const char *op)
{
	char buf[96];

	if (v->t == V_NUM) {
		*d = v->num;
		return 0;
	}
	if (v->t == V_STR && str_number(v->str, d))
		return 0;
	vtext(buf, sizeof(buf), v);
	return eval_fail(x, col, "\"%s\" takes numbers; %s is %s", op, buf, vtype_name(v));
}

static int eval(struct evalctx *x, int i, struct val *out)
{
	const struct node *nd = &x->c->nodes[i];
	struct val a = {0}, b = {0};
	double da, db, r;
	int t;

	memset(out, 0, sizeof(*out));
	switch (nd->type) {
	case N_NUM: out->t = V_NUM; out->num = nd->num; return 0;
	case N_STR: out->t = V_STR; out->str = nd->str; return 0;
	case N_BOOL: out->t = V_BOOL; out->boolean = nd->boolean; return 0;
	case N_NULL: out->t = V_NULL; return 0;
	case N_REF: return lookup_ref(x, nd, out);
	case N_NOT:
		if (eval(x, nd->a, &a) < 0 || (t = truth(x, &a, x->c->nodes[nd->a].col)) < 0)
			return -1;
		out->t = V_BOOL;
		out->boolean = !t;
		return 0;
	case N_AND:
	case N_OR:
		if (eval(x, nd->a, &a) < 0 || (t = truth(x, &a, x->c->nodes[nd->a].col)) < 0)
			return -1;
		out->t = V_BOOL;
		if ((nd->type == N_AND && !t) || (nd->type == N_OR && t)) {
			out->boolean = t; /* short circuit: the right side is not looked at */
			return 0;
		}
		if (eval(x, nd->b, &b) < 0 || (t = truth(x, &b, x->c->nodes[nd->b].col)) < 0)
			return -1;
		out->boolean = t;
		return 0;
	case N_CMP:
		if (eval(x, nd->a, &a) < 0 || eval(x, nd->b, &b) < 0)
			return -1;
		if ((t = compare(x, nd->op, &a, &b, nd->col)) < 0)
			return -1;
		out->t = V_BOOL;
		out->boolean = t;
		return 0;
	case N_NEG:
		if (eval(x, nd->a, &a) < 0)
			return -1;
		if (a.t == V_NOPROD) {
			out->t = V_NOPROD;
			return 0;
		}
		if (number_of(x, &a, &da, nd->col, "-") < 0)
			return -1;
		out->t = V_NUM;
		out->num = -da;
		return 0;
	case N_ARITH:
		if (eval(x, nd->a, &a) < 0 || eval(x, nd->b, &b) < 0)
			return -1;
		if (a.t == V_NOPROD || b.t == V_NOPROD) {
			out->t = V_NOPROD; /* production + 0.01 with none: still none */
			return 0;
		}
		if (number_of(x, &a, &da, nd->col, nd->op) < 0 || number_of(x, &b, &db, nd->col, nd->op) < 0)
			return -1;
		switch (nd->op[0]) {
		case '+': r = da + db; break;
		case '-': r = da - db; break;
		case '*': r = da * db; break;
		default:
			if (db == 0)
				return eval_fail(x, nd->col, "division by zero");
			r = da / db;
		}
		if (!isfinite(r))
			return eval_fail(x, nd->col, "the result of \"%s\" is out of range", nd->op);
		out->t = V_NUM;
		out->num = r;
		return 0;
	}
	return eval_fail(x, nd->col, "internal: unknown node");
}

int cond_eval(const struct cond *c, cond_lookup_fn lookup, void *arg, bool *holds, char **explain)
{
	struct evalctx x = {.c = c, .lookup = lookup, .arg = arg};
	struct val v;
	int t = -1;

	*holds = false;
	if (eval(&x, c->root, &v) == 0)
		t = truth(&x, &v, c->nodes[c->root].col);
	if (v.t == V_NOPROD && t < 0 && x.rc == FERRY_EINVALID) {
		/* a bare production.X as the whole condition: there is none, so it does not hold */
		x.rc = 0;
		t = 0;
	}
	for (size_t i = 0; i < x.nheld; i++)
		json_decref(x.held[i]);
	free(x.held);
	if (explain != NULL)
		*explain = x.explain;
	else
		free(x.explain);
	if (t < 0)
		return x.rc ? x.rc : FERRY_EINVALID;
	*holds = t != 0;
	return FERRY_OK;
}

/*
 * config_params — parameters as data: the rules a parameter may declare
 * (type string, integer, number, boolean or enum with values; a POSIX
 * extended regex pattern; min and max) and the check of a value against
 * them, used for defaults when the workflow is parsed and for the values a
 * run is submitted with; and the shell-quoting of {{params.X}} inside a
 * shell script argument (`sh -c SCRIPT`), so that a value is always one
 * literal word and never code.
 *
 * Quoting follows the script's own quoting at the place of the template: a
 * small scanner keeps a stack of where that place is (bare, '…', "…",
 * $'…', a comment, $(…), `…`, ${…}), and the value is written so that it
 * closes the quote it is in, appears single-quoted ('\'' for each '), and
 * reopens the quote; inside `…` its backslashes, backquotes and dollars are
 * escaped once more per level. `…` and ${…} inside "…" have quoting rules
 * of their own that differ between shells: a template there is refused.
 * Here-documents are not tracked. `ferry validate` warns about every such
 * use and shows the "$FERRY_PARAM_X" form, which is always safe.
 */
#include "plan/config_priv.h"

#include <errno.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const param_types[] = {"string", "integer", "number", "boolean", "enum"};

/* ---- declarations ------------------------------------------------------ */

static bool parse_int(const char *s, long long *out)
{
	char *end = NULL;

	if (*s == '\0' || strchr("+-0123456789", *s) == NULL)
		return false;
	errno = 0;
	*out = strtoll(s, &end, 10);
	return errno == 0 && *end == '\0';
}

static bool parse_num(const char *s, double *out)
{
	char *end = NULL;

	if (*s == '\0' || strspn(s, "+-.0123456789eE") != strlen(s))
		return false;
	errno = 0;
	*out = strtod(s, &end);
	return errno == 0 && *end == '\0' && isfinite(*out);
}

/* A bound as text for a message. */
static void bound_text(char *buf, size_t cap, const json_t *v)
{
	if (json_is_integer(v))
		snprintf(buf, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	else
		snprintf(buf, cap, "%g", json_number_value(v));
}

/* A min or max: an integer or a number; NULL after an error. */
static json_t *parse_bound(struct ctx *c, const char *name, const char *what, const yaml_node_t *n)
{
	const char *s = cfg_text(c, n, what);
	long long i;
	double d;

	if (s == NULL)
		return NULL;
	if (parse_int(s, &i))
		return json_integer((json_int_t)i);
	if (parse_num(s, &d))
		return json_real(d);
	err_node(c, n, "%s of parameter %s must be a number, not %s", what, cfg_q(c, name), cfg_q(c, s));
	return NULL;
}

int cfg_param_check(const json_t *p, const char *value, struct sbuf *why)
{
	const char *type = json_string_value(json_object_get(p, "type"));
	const char *pattern = json_string_value(json_object_get(p, "pattern"));
	const json_t *min = json_object_get(p, "min"), *max = json_object_get(p, "max"), *v;
	char qv[QBUF], bound[64];
	long long iv = 0;
	double dv = 0;
	size_t k;

	cfg_quote_to(qv, sizeof(qv), value, strlen(value));
	if (type == NULL || strcmp(type, "string") == 0) {
		regex_t re;
		regmatch_t m[1];
		int rc;

		if (pattern == NULL || regcomp(&re, pattern, REG_EXTENDED) != 0)
			return FERRY_OK;
		rc = regexec(&re, value, 1, m, 0);
		regfree(&re);
		if (rc == 0 && m[0].rm_so == 0 && (size_t)m[0].rm_eo == strlen(value))
			return FERRY_OK;
		cfg_sb_addf(why, "must match the pattern %s (the whole value), not %s", pattern, qv);
		return FERRY_EINVALID;
	}
	if (strcmp(type, "boolean") == 0) {
		if (strcmp(value, "true") == 0 || strcmp(value, "false") == 0)
			return FERRY_OK;
		cfg_sb_addf(why, "must be true or false, not %s", qv);
		return FERRY_EINVALID;
	}
	if (strcmp(type, "enum") == 0) {
		json_array_foreach(json_object_get(p, "values"), k, v)
			if (strcmp(json_string_value(v), value) == 0)
				return FERRY_OK;
		cfg_sb_adds(why, "must be one of ");
		json_array_foreach(json_object_get(p, "values"), k, v)
			cfg_sb_addf(why, "%s%s", k ? ", " : "", json_string_value(v));
		cfg_sb_addf(why, ", not %s", qv);
		return FERRY_EINVALID;
	}
	if (strcmp(type, "integer") == 0 ? !parse_int(value, &iv) : !parse_num(value, &dv)) {
		cfg_sb_addf(why, "must be %s, not %s",
			    strcmp(type, "integer") == 0 ? "an integer" : "a number", qv);
		return FERRY_EINVALID;
	}
	if (strcmp(type, "integer") == 0)
		dv = (double)iv;
	if (min != NULL && dv < json_number_value(min)) {
		bound_text(bound, sizeof(bound), min);
		cfg_sb_addf(why, "must be at least %s (min), not %s", bound, value);
		return FERRY_EINVALID;
	}
	if (max != NULL && dv > json_number_value(max)) {
		bound_text(bound, sizeof(bound), max);
		cfg_sb_addf(why, "must be at most %s (max), not %s", bound, value);
		return FERRY_EINVALID;
	}
	return FERRY_OK;
}

void cfg_param_decl(struct ctx *c, const char *name, const yaml_node_t *const *vals,
		    const yaml_node_t *def, json_t *p)
{
	const yaml_node_t *tn = vals[PK_TYPE], *vn = vals[PK_VALUES], *it;
	const char *type = NULL, *s;
	json_t *values = NULL, *min = NULL, *max = NULL;
	size_t nerrs = c->nerrs, k = 0, i;

	if (present(tn) && (type = cfg_text(c, tn, "a parameter type")) != NULL) {
		for (i = 0; i < NELEM(param_types) && strcmp(type, param_types[i]) != 0; i++)
			;
		if (i == NELEM(param_types)) {
			err_node(c, tn, "parameter %s has unknown type %s; use string, integer, "
				 "number, boolean or enum", cfg_q(c, name), cfg_q(c, type));
			type = NULL;
		}
	}
	if (present(vn)) {
		if (type == NULL && !present(tn))
			type = "enum";
		if (type != NULL && strcmp(type, "enum") != 0) {
			err_node(c, vn, "values of parameter %s need type: enum, not type: %s",
				 cfg_q(c, name), type);
		} else if (vn->type != YAML_SEQUENCE_NODE || nitems(vn) == 0) {
			err_node(c, vn, "values of parameter %s must be a non-empty list like "
				 "[small, large]", cfg_q(c, name));
		} else {
			values = json_array();
			while (cfg_next_item(c, vn, &k, &it))
				if ((s = cfg_text(c, it, "a parameter value")) != NULL)
					json_array_append_new(values, json_string(s));
		}
	} else if (type != NULL && strcmp(type, "enum") == 0) {
		err_node(c, tn, "parameter %s is an enum without values; list them: "
			 "values: [a, b]", cfg_q(c, name));
	}
	if (present(vals[PK_PATTERN]) &&
	    (s = cfg_text(c, vals[PK_PATTERN], "a parameter pattern")) != NULL) {
		regex_t re;
		char msg[256];
		int rc;

		if (type != NULL && strcmp(type, "string") != 0) {
			err_node(c, vals[PK_PATTERN], "pattern of parameter %s is only for type: string, "
				 "not type: %s", cfg_q(c, name), type);
		} else if ((rc = regcomp(&re, s, REG_EXTENDED | REG_NOSUB)) != 0) {
			regerror(rc, &re, msg, sizeof(msg));
			err_node(c, vals[PK_PATTERN], "pattern of parameter %s is not a valid POSIX "
				 "extended regular expression: %s", cfg_q(c, name), msg);
		} else {
			regfree(&re);
			json_object_set_new(p, "pattern", json_string(s));
		}
	}
	for (i = PK_MIN; i <= PK_MAX; i++) {
		const char *what = i == PK_MIN ? "min" : "max";
		json_t *b;

		if (!present(vals[i]))
			continue;
		if (type == NULL || (strcmp(type, "integer") != 0 && strcmp(type, "number") != 0)) {
			err_node(c, vals[i], "%s of parameter %s is only for type: integer or number; "
				 "add one", what, cfg_q(c, name));
			continue;
		}
		if ((b = parse_bound(c, name, what, vals[i])) != NULL)
			json_object_set_new(p, what, b);
	}
	min = json_object_get(p, "min");
	max = json_object_get(p, "max");
	if (min != NULL && max != NULL && json_number_value(min) > json_number_value(max))
		err_node(c, vals[PK_MAX], "parameter %s has max below min; swap them", cfg_q(c, name));
	if (type != NULL)
		json_object_set_new(p, "type", json_string(type));
	if (values != NULL)
		json_object_set_new(p, "values", values);
	/* the default must satisfy the declaration it sits in */
	s = json_string_value(json_object_get(p, "default"));
	if (s != NULL && c->nerrs == nerrs) {
		struct sbuf why = {0};

		if (cfg_param_check(p, s, &why) < 0)
			err_node(c, def, "default of parameter %s %s; change the default or the "
				 "declaration", cfg_q(c, name), why.p);
		free(why.p);
	}
}

/* ---- shell quoting ----------------------------------------------------- */

/* The shell a program names: sh, bash, dash or zsh, or a path ending in one. */
static bool is_shell(const char *prog)
{
	static const char *const shells[] = {"sh", "bash", "dash", "zsh"};
	const char *base = strrchr(prog, '/');
	size_t i;

	base = base ? base + 1 : prog;
	for (i = 0; i < NELEM(shells); i++)
		if (strcmp(base, shells[i]) == 0)
			return true;
	return false;
}

int cfg_shell_script_index(const json_t *command)
{
	const char *a = json_string_value(json_array_get(command, 0));
	size_t i;

	if (a == NULL || !is_shell(a))
		return -1;
	for (i = 1; i < json_array_size(command); i++) {
		a = json_string_value(json_array_get(command, i));
		if (a == NULL || (a[0] != '-' && a[0] != '+') || strcmp(a, "--") == 0)
			return -1;
		if (strcmp(a, "-o") == 0 || strcmp(a, "+o") == 0 || strcmp(a, "-O") == 0 ||
		    strcmp(a, "+O") == 0) {
			i++;
			continue;
		}
		if (a[0] == '-' && a[1] != '-' && strchr(a, 'c') != NULL)
			return i + 1 < json_array_size(command) ? (int)(i + 1) : -1;
	}
	return -1;
}

/* How many `…` substitutions the place q is in sits inside. */
static int bq_depth(const struct cfg_shq *q)
{
	int i, n = 0;

	for (i = 1; i <= q->top; i++)
		n += q->st[i] == SHQ_BQ;
	return n;
}

/* Whether c ends a word for the purpose of a following '#'. */
static bool word_break(char c)
{
	return c == '\0' || strchr(" \t\n;&|()<>", c) != NULL;
}

void cfg_shq_scan(struct cfg_shq *q, const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		char ch = s[i], nx = i + 1 < n ? s[i + 1] : '\0';
		unsigned char *st = &q->st[q->top];
		bool bs = q->rawbs;

		q->rawbs = ch == '\\' && !bs;
		/* the shell finds the end of `…` before it parses what is inside:
		 * the first unescaped ` closes it, in quotes or a comment alike */
		if (ch == '`' && !bs && bq_depth(q) > 0) {
			while (q->st[q->top] != SHQ_BQ)
				q->top--;
			q->top--;
			q->esc = false;
			q->prev = ch;
			continue;
		}
		if (q->esc) {
			q->esc = false;
			q->prev = 'x';
			continue;
		}
		switch (*st) {
		case SHQ_COMMENT:
			if (ch == '\n')
				q->top--;
			break;
		case SHQ_SQ:
			if (ch == '\'')
				q->top--;
			break;
		case SHQ_ANSI:
			if (ch == '\\')
				q->esc = true;
			else if (ch == '\'')
				q->top--;
			break;
		case SHQ_DQ:
			if (ch == '\\')
				q->esc = true;
			else if (ch == '"')
				q->top--;
			else if ((ch == '$' && (nx == '(' || nx == '{')) || ch == '`')
				goto open_sub;
			break;
		default: /* SHQ_PLAIN, SHQ_SUB, SHQ_BQ, SHQ_BRACE */
			if (ch == '\\') {
				q->esc = true;
			} else if (*st == SHQ_BRACE && (ch == '{' || ch == '}')) {
				if (ch == '{')
					q->paren[q->top]++;
				else if (q->paren[q->top] > 0)
					q->paren[q->top]--;
				else
					q->top--;
			} else if (ch == '#' && *st != SHQ_BRACE && word_break(q->prev)) {
				if (q->top + 1 < SHQ_DEPTH)
					q->st[++q->top] = SHQ_COMMENT;
			} else if (ch == '\'' || ch == '"') {
				if (q->top + 1 < SHQ_DEPTH)
					q->st[++q->top] = ch == '"' ? SHQ_DQ : SHQ_SQ;
			} else if (ch == '$' && nx == '\'') {
				if (q->top + 1 < SHQ_DEPTH)
					q->st[++q->top] = SHQ_ANSI;
				i++;
			} else if (ch == '`' && *st == SHQ_BQ) {
				q->top--;
			} else if ((ch == '$' && (nx == '(' || nx == '{')) || ch == '`') {
				goto open_sub;
			} else if (ch == '(') {
				q->paren[q->top]++;
			} else if (ch == ')' && q->paren[q->top] > 0) {
				q->paren[q->top]--;
			} else if (ch == ')' && *st == SHQ_SUB) {
				q->top--;
			}
			break;
		}
		q->prev = ch;
		continue;
open_sub:
		if (q->top + 1 < SHQ_DEPTH) {
			q->top++;
			q->st[q->top] = ch == '`' ? SHQ_BQ : nx == '{' ? SHQ_BRACE : SHQ_SUB;
			q->paren[q->top] = 0;
		}
		if (ch == '$')
			i++;
		q->prev = '(';
	}
}

int cfg_shq_quote(struct sbuf *b, struct cfg_shq *q, const char *v)
{
	static const char *const close[] = {[SHQ_SQ] = "'", [SHQ_DQ] = "\"", [SHQ_ANSI] = "'"};
	static const char *const reopen[] = {[SHQ_SQ] = "'", [SHQ_DQ] = "\"", [SHQ_ANSI] = "$'"};
	unsigned st = q->st[q->top];
	struct sbuf w = {0}, t;
	const char *p;
	int level, i;
	bool dq = false;

	/* `…` and ${…} inside "…" take quotes of their own ways: not modelled, refused */
	for (i = 1; i <= q->top; i++) {
		if (dq && (q->st[i] == SHQ_BQ || q->st[i] == SHQ_BRACE)) {
			ferry_error_set("this place (inside `…` or ${…} within \"…\") cannot be "
					"quoted safely");
			return FERRY_EINVALID;
		}
		if (q->st[i] == SHQ_DQ)
			dq = true;
	}

	/* a backslash just before the template escapes a backslash of ours, not the quote */
	if (q->esc && st != SHQ_SQ && st != SHQ_COMMENT)
		cfg_sb_adds(b, "\\");
	cfg_sb_adds(&w, "");
	if (st == SHQ_COMMENT) {
		for (p = v; *p; p++)
			cfg_sb_adds(&w, *p == '\n' || *p == '\r' ? " " : (char[2]){*p, '\0'});
	} else {
		if (st < NELEM(close) && close[st] != NULL)
			cfg_sb_adds(&w, close[st]);
		cfg_sb_adds(&w, "'");
		for (p = v; *p; p++)
			cfg_sb_adds(&w, *p == '\'' ? "'\\''" : (char[2]){*p, '\0'});
		cfg_sb_adds(&w, "'");
		if (st < NELEM(reopen) && reopen[st] != NULL)
			cfg_sb_adds(&w, reopen[st]);
	}
	/* inside `…` the shell first takes \\, \` and \$ as escapes: once per level */
	for (level = bq_depth(q); level > 0; level--) {
		t = (struct sbuf){0};
		cfg_sb_adds(&t, "");
		for (p = w.p; *p; p++)
			cfg_sb_adds(&t, strchr("\\`$", *p) ? (char[3]){'\\', *p, '\0'}
							     : (char[2]){*p, '\0'});
		free(w.p);
		w = t;
	}
	cfg_sb_adds(b, w.p);
	free(w.p);
	q->esc = false;
	q->rawbs = false;
	q->prev = 'x';
	return FERRY_OK;
}

/*
 * template — the {{…}} language of workflow values (template.h): finding
 * and classifying {{params.NAME}}, {{run.id}} and {{steps.STEP.outputs.KEY}},
 * the text a parameter value becomes, and rendering, plain or into the
 * script of a shell command (`sh -c SCRIPT`), where every value is quoted
 * so that it is always one literal word and never code. Pure: no parse
 * context, no database; the parser (config.c) reports a workflow's
 * templates at their YAML position with tmpl_next() and tmpl_expr_parse().
 *
 * Quoting follows the script's own quoting at the place of the template: a
 * small scanner keeps a stack of where that place is (bare, '…', "…",
 * $'…', a comment, $(…), `…`, ${…}), and the value is written so that it
 * closes the quote it is in, appears single-quoted ('\'' for each '), and
 * reopens the quote; inside `…` its backslashes, backquotes and dollars are
 * escaped once more per level. `…` and ${…} inside "…" have quoting rules
 * of their own that differ between shells: a template there is refused,
 * and so is one in a here-document's body (tracked from <<WORD to its
 * delimiter line: a value's newline and a line equal to the delimiter
 * would end it). In arithmetic ($((…)), ((…)), $[…]) the shell evaluates
 * what it finds (bash runs a[$(…)]): only an integer is written, bare.
 * Wrapper programs (env, timeout, nice, …) in front of the shell are
 * stepped over. `ferry validate` warns about every such use and shows the
 * "$FERRY_PARAM_X" form. tests/fuzz/quote_oracle.c checks all of it
 * against dash and bash.
 */
#include "plan/template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define IDENT_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"

/* ---- output text ------------------------------------------------------- */

/* A growing NUL-terminated string (config_priv.h's struct tbuf, for this file). */
struct tbuf {
	char *p;
	size_t len, cap;
};

static void tb_addn(struct tbuf *b, const char *s, size_t n)
{
	while (b->cap - b->len < n + 1) {
		b->cap = b->cap ? b->cap * 2 : 64;
		b->p = xrealloc(b->p, b->cap);
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void tb_adds(struct tbuf *b, const char *s)
{
	tb_addn(b, s, strlen(s));
}

/* ---- expressions ------------------------------------------------------- */

/* [A-Za-z_][A-Za-z0-9_]*: parameter, env and output names. */
bool tmpl_ident_ok(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n && strchr(IDENT_CHARS, s[i]) != NULL && s[i] != '\0'; i++)
		;
	return n > 0 && i == n && (s[0] < '0' || s[0] > '9');
}

/*
 * Finds the next "{{" in s. Returns it, or NULL when there is none; *expr and
 * *elen are the expression with surrounding blanks trimmed, *end points past
 * the closing "}}" or is NULL when the template is not closed.
 */
const char *tmpl_next(const char *s, const char **expr, size_t *elen, const char **end)
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
struct tmpl_expr tmpl_expr_parse(const char *e, size_t n)
{
	struct tmpl_expr t = {TMPL_BAD, NULL, 0};
	const char *key;

	if (n == 6 && memcmp(e, "run.id", 6) == 0) {
		t.kind = TMPL_RUNID;
	} else if (n > 7 && memcmp(e, "params.", 7) == 0 && tmpl_ident_ok(e + 7, n - 7)) {
		t = (struct tmpl_expr){TMPL_PARAM, e + 7, n - 7};
	} else if (n == 4 && memcmp(e, "item", 4) == 0) {
		t.kind = TMPL_ITEM;
	} else if (n > 5 && memcmp(e, "item.", 5) == 0 && tmpl_ident_ok(e + 5, n - 5)) {
		t = (struct tmpl_expr){TMPL_ITEM, e + 5, n - 5};
	} else if (n > 6 + 8 && memcmp(e, "steps.", 6) == 0 && memcmp(e + n - 8, ".outputs", 8) == 0) {
		t = (struct tmpl_expr){TMPL_STEP_ALL, e + 6, n - 6 - 8};
	} else if (n > 6 && memcmp(e, "steps.", 6) == 0 && (key = memmem(e, n, ".best.params.", 13)) != NULL &&
		   tmpl_ident_ok(key + 13, (size_t)(e + n - key - 13))) {
		/* a sweep's best item's parameter: a is "STEP.best.params" */
		t = (struct tmpl_expr){TMPL_STEP, e + 6, (size_t)(key + 12 - (e + 6))};
	} else if (n > 6 && memcmp(e, "steps.", 6) == 0) {
		/* step names may hold dots: KEY is after the last one ("STEP.best" for a sweep's best item) */
		for (key = e + n; key > e && key[-1] != '.'; key--)
			;
		if (tmpl_ident_ok(key, (size_t)(e + n - key)) && key - e > 6 + 9 &&
		    memcmp(key - 9, ".outputs.", 9) == 0)
			t = (struct tmpl_expr){TMPL_STEP, e + 6, (size_t)(key - 9 - (e + 6))};
	}
	return t;
}

/* ---- values ------------------------------------------------------------ */

/* A parameter value as text: strings, integers, reals, booleans; else NULL. */
char *tmpl_value_text(const json_t *v)
{
	char buf[64];
	int prec;

	switch (json_typeof(v)) {
	case JSON_STRING:
		if (memchr(json_string_value(v), 0, json_string_length(v)) != NULL)
			return NULL;
		return xstrdup(json_string_value(v));
	case JSON_INTEGER:
		return xasprintf("%" JSON_INTEGER_FORMAT, json_integer_value(v));
	case JSON_REAL:
		/* the shortest text that reads back the same; 1.0 stays "1.0" */
		for (prec = 1; prec <= 17; prec++) {
			snprintf(buf, sizeof(buf), "%.*g", prec, json_real_value(v));
			if (strtod(buf, NULL) == json_real_value(v))
				break;
		}
		return strpbrk(buf, ".eEn") ? xstrdup(buf) : xasprintf("%s.0", buf);
	case JSON_TRUE:
		return xstrdup("true");
	case JSON_FALSE:
		return xstrdup("false");
	default:
		return NULL;
	}
}

/* ---- shell quoting ----------------------------------------------------- */

/* Where a place in a shell script is: the quoting it sits in (a stack). */
enum { SHQ_PLAIN, SHQ_SQ, SHQ_DQ, SHQ_ANSI, SHQ_COMMENT, SHQ_SUB, SHQ_BQ, SHQ_BRACE, SHQ_ARITH, SHQ_HEREDOC };
#define SHQ_DEPTH 32
struct shq {
	unsigned char st[SHQ_DEPTH];
	unsigned paren[SHQ_DEPTH];
	char close[SHQ_DEPTH]; /* SHQ_ARITH: what ends it (')' of "))", or ']' of $[…]) */
	int top;
	bool esc;   /* the last character was an unquoted or "…" backslash */
	bool rawbs; /* the last character was a backslash not itself escaped */
	char prev; /* the last character scanned ('\0' at the start) */
	bool bol;  /* at the start of a line */
	/* a here-document announced (<<WORD) whose body starts at the next newline */
	bool hd_pending, hd_dash, hd_dash_next;
	char hd_delim[64], hd_next[64];
};

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

/*
 * Programs that run the rest of their arguments as a command, and how to
 * step over their own: the option letters and long options that take the
 * next argument as their value, how many operands come before the command
 * (timeout's DURATION, taskset's MASK, chrt's PRIORITY), and whether
 * NAME=VALUE words come first (env). `env -S` splits a string of its own:
 * where a script would be in it is not followed (nothing is quoted).
 */
static const struct wrapper {
	const char *name, *short_args, *const *long_args;
	int operands;
	bool assigns;
} wrappers[] = {
	{"env", "uC", (const char *const[]){"--unset", "--chdir", NULL}, 0, true},
	{"timeout", "sk", (const char *const[]){"--signal", "--kill-after", NULL}, 1, false},
	{"nice", "n", (const char *const[]){"--adjustment", NULL}, 0, false},
	{"nohup", "", (const char *const[]){NULL}, 0, false},
	{"setsid", "", (const char *const[]){NULL}, 0, false},
	{"stdbuf", "ioe", (const char *const[]){"--input", "--output", "--error", NULL}, 0, false},
	{"taskset", "", (const char *const[]){NULL}, 1, false},
	{"numactl", "NmCipP", (const char *const[]){"--cpunodebind", "--membind", "--physcpubind",
						    "--interleave", "--preferred", NULL}, 0, false},
	{"xargs", "aEeIiLlnPsd", (const char *const[]){"--arg-file", "--delimiter", "--max-args",
						       "--max-procs", "--max-chars", "--max-lines", NULL}, 0, false},
	{"sudo", "ugChpDrtTUR", (const char *const[]){"--user", "--group", "--close-from", "--prompt",
						      "--chdir", "--role", "--type", NULL}, 0, false},
	{"doas", "uC", (const char *const[]){NULL}, 0, false},
	{"chrt", "", (const char *const[]){NULL}, 1, false},
	{"ionice", "cnp", (const char *const[]){"--class", "--classdata", NULL}, 0, false},
	{"time", "fo", (const char *const[]){"--format", "--output", NULL}, 0, false},
	{"exec", "a", (const char *const[]){NULL}, 0, false},
	{"command", "", (const char *const[]){NULL}, 0, false},
};

static const struct wrapper *wrapper_of(const char *prog)
{
	const char *base = strrchr(prog, '/');
	size_t i;

	base = base ? base + 1 : prog;
	for (i = 0; i < NELEM(wrappers); i++)
		if (strcmp(base, wrappers[i].name) == 0)
			return &wrappers[i];
	return NULL;
}

/* The index of the program a wrapper at command[i] runs, or -1 when it cannot be followed. */
static int past_wrapper(const json_t *command, size_t i, const struct wrapper *w)
{
	size_t n = json_array_size(command);
	int operands = w->operands;

	for (i++; i < n; i++) {
		const char *a = json_string_value(json_array_get(command, i));
		if (a == NULL)
			return -1;
		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (a[0] == '-' && a[1] != '\0') {
			if (strcmp(w->name, "env") == 0 && (strcmp(a, "-S") == 0 || strncmp(a, "--split-string", 14) == 0 ||
							 (a[1] != '-' && strchr(a, 'S'))))
				return -1; /* a string env splits itself */
			if (a[1] == '-') {
				for (const char *const *l = w->long_args; *l; l++)
					if (strcmp(a, *l) == 0)
						i++; /* --opt VALUE */
			} else if (a[2] == '\0' && strchr(w->short_args, a[1])) {
				i++; /* -o VALUE */
			}
			continue;
		}
		if (w->assigns && strchr(a, '=') != NULL && a[0] != '=')
			continue;
		if (operands > 0) {
			operands--;
			continue;
		}
		break;
	}
	return i < n ? (int)i : -1;
}

int tmpl_shell_script_index(const json_t *command)
{
	const char *a = json_string_value(json_array_get(command, 0));
	const struct wrapper *w;
	size_t i, start = 0;
	int depth = 0;

	/* env, timeout, nice … in front of the shell: the script is the shell's all the same */
	while (a != NULL && (w = wrapper_of(a)) != NULL && depth++ < 8) {
		int k = past_wrapper(command, start, w);
		if (k < 0)
			return -1;
		start = (size_t)k;
		a = json_string_value(json_array_get(command, start));
	}
	if (a == NULL || !is_shell(a))
		return -1;
	for (i = start + 1; i < json_array_size(command); i++) {
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
static int bq_depth(const struct shq *q)
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

/* Moves q past the n bytes of script text s. */
static void shq_scan(struct shq *q, const char *s, size_t n)
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
			q->bol = false;
			continue;
		}
		if (*st == SHQ_HEREDOC) {
			/* its body ends at a line that is the delimiter (after tabs with <<-) */
			if (q->bol) {
				size_t j = i, dl = strlen(q->hd_delim);
				while (q->hd_dash && j < n && s[j] == '\t')
					j++;
				if (j + dl <= n && memcmp(s + j, q->hd_delim, dl) == 0 && (j + dl == n || s[j + dl] == '\n')) {
					q->top--;
					i = j + dl - (dl > 0);
					q->prev = 'x';
					q->bol = false;
					continue;
				}
			}
			q->bol = ch == '\n';
			continue;
		}
		if (*st == SHQ_ARITH) {
			/* only its end matters: a template in it is refused or written as a bare number */
			if (ch == '(' || ch == '[')
				q->paren[q->top]++;
			else if ((ch == ')' || ch == ']') && q->paren[q->top] > 0)
				q->paren[q->top]--;
			else if (ch == q->close[q->top] && (ch == ']' || nx == ')')) {
				q->top--;
				i += ch == ')';
			}
			q->prev = ch;
			q->bol = ch == '\n';
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
			else if (ch == '$' && (nx == '[' || (nx == '(' && i + 2 < n && s[i + 2] == '('))) {
				if (q->top + 1 < SHQ_DEPTH) {
					q->st[++q->top] = SHQ_ARITH;
					q->paren[q->top] = 0;
					q->close[q->top] = nx == '[' ? ']' : ')';
				}
				i += nx == '[' ? 1 : 2;
			} else if ((ch == '$' && (nx == '(' || nx == '{')) || ch == '`')
				goto open_sub;
			break;
		default: /* SHQ_PLAIN, SHQ_SUB, SHQ_BQ, SHQ_BRACE */
			if (ch == '\n' && q->hd_pending && q->top + 1 < SHQ_DEPTH) {
				/* the line that announced a here-document ends: its body begins */
				q->st[++q->top] = SHQ_HEREDOC;
				memcpy(q->hd_delim, q->hd_next, sizeof(q->hd_delim));
				q->hd_dash = q->hd_dash_next;
				q->hd_pending = false;
				q->prev = ch;
				q->bol = true;
				continue;
			}
			if (ch == '\\') {
				q->esc = true;
			} else if (ch == '<' && nx == '<' && (i + 2 >= n || s[i + 2] != '<')) {
				/* <<WORD or <<-WORD: the delimiter with its quotes taken off */
				size_t j = i + 2, k = 0;
				q->hd_dash_next = j < n && s[j] == '-';
				j += q->hd_dash_next;
				while (j < n && (s[j] == ' ' || s[j] == '\t'))
					j++;
				/* the word, its quotes removed ('E F', "E F", \E and E"F" alike) */
				for (char quote = 0; j < n && (quote || !strchr(" \t\n;&|()<>", s[j])); j++) {
					char c = s[j];
					if (quote ? c == quote : (c == '\'' || c == '"')) {
						quote = quote ? 0 : c;
						continue;
					}
					if (c == '\\' && !quote && j + 1 < n)
						c = s[++j];
					if (k + 1 < sizeof(q->hd_next))
						q->hd_next[k++] = c;
				}
				q->hd_next[k] = '\0';
				q->hd_pending = true;
				i = j - 1;
			} else if (ch == '$' && nx == '[') {
				if (q->top + 1 < SHQ_DEPTH) {
					q->st[++q->top] = SHQ_ARITH;
					q->paren[q->top] = 0;
					q->close[q->top] = ']';
				}
				i++;
			} else if (((ch == '$' && nx == '(') || (ch == '(' && word_break(q->prev))) &&
				   i + 2 - (ch == '(') < n && s[i + 2 - (ch == '(')] == '(') {
				/* $((…)) and the ((…)) command: arithmetic */
				if (q->top + 1 < SHQ_DEPTH) {
					q->st[++q->top] = SHQ_ARITH;
					q->paren[q->top] = 0;
					q->close[q->top] = ')';
				}
				i += ch == '$' ? 2 : 1;
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
		q->bol = ch == '\n';
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
		q->bol = false;
	}
}

/*
 * Appends v to b so that, at q's place in a script, it is one literal
 * string. FERRY_EINVALID (message set) at a place it cannot quote safely.
 */
static int shq_quote(struct tbuf *b, struct shq *q, const char *v)
{
	static const char *const close[] = {[SHQ_SQ] = "'", [SHQ_DQ] = "\"", [SHQ_ANSI] = "'"};
	static const char *const reopen[] = {[SHQ_SQ] = "'", [SHQ_DQ] = "\"", [SHQ_ANSI] = "$'"};
	unsigned st = q->st[q->top];
	struct tbuf w = {0}, t;
	const char *p;
	int level, i;
	bool dq = false;

	/* `…` and ${…} inside "…" take quotes of their own ways: not modelled, refused */
	for (i = 1; i <= q->top; i++) {
		if (dq && (q->st[i] == SHQ_BQ || q->st[i] == SHQ_BRACE)) {
			ferry_error_set("inside `…` or ${…} within \"…\"");
			return FERRY_EINVALID;
		}
		/* a value's newline and a line of its own would end the document, and $ and ` are code there */
		if (q->st[i] == SHQ_HEREDOC) {
			ferry_error_set("inside a here-document");
			return FERRY_EINVALID;
		}
		if (q->st[i] == SHQ_DQ)
			dq = true;
	}
	if (st == SHQ_ARITH) {
		/* the shell evaluates what it finds there (bash runs a[$(…)]): a number, bare, or nothing */
		const char *d = v + (*v == '-' || *v == '+');
		if (*d == '\0' || d[strspn(d, "0123456789")] != '\0') {
			ferry_error_set("inside arithmetic ($((…)), ((…)) or $[…]) with a value that is not an integer");
			return FERRY_EINVALID;
		}
		tb_adds(b, v);
		q->prev = 'x';
		return FERRY_OK;
	}

	/* a backslash just before the template escapes a backslash of ours, not the quote */
	if (q->esc && st != SHQ_SQ && st != SHQ_COMMENT)
		tb_adds(b, "\\");
	tb_adds(&w, "");
	if (st == SHQ_COMMENT) {
		for (p = v; *p; p++)
			tb_adds(&w, *p == '\n' || *p == '\r' ? " " : (char[2]){*p, '\0'});
	} else {
		if (st < NELEM(close) && close[st] != NULL)
			tb_adds(&w, close[st]);
		tb_adds(&w, "'");
		for (p = v; *p; p++)
			tb_adds(&w, *p == '\'' ? "'\\''" : (char[2]){*p, '\0'});
		tb_adds(&w, "'");
		if (st < NELEM(reopen) && reopen[st] != NULL)
			tb_adds(&w, reopen[st]);
	}
	/* inside `…` the shell first takes \\, \` and \$ as escapes: once per level */
	for (level = bq_depth(q); level > 0; level--) {
		t = (struct tbuf){0};
		tb_adds(&t, "");
		for (p = w.p; *p; p++)
			tb_adds(&t, strchr("\\`$", *p) ? (char[3]){'\\', *p, '\0'}
							     : (char[2]){*p, '\0'});
		free(w.p);
		w = t;
	}
	tb_adds(b, w.p);
	free(w.p);
	q->esc = false;
	q->rawbs = false;
	q->prev = 'x';
	return FERRY_OK;
}

/* ---- rendering --------------------------------------------------------- */

/* Renders tmpl; with sh, a shell script whose params are written shell-quoted. */
static int render(char **out, const char *tmpl, const json_t *params, bool with_params, const char *run_id,
		  struct shq *sh, tmpl_ref_fn refs, void *refs_arg)
{
	struct tbuf b = {0};
	const char *p = tmpl, *start, *expr = NULL, *end = NULL;
	size_t elen = 0;
	char *name = NULL, *val = NULL;
	int error = FERRY_EINVALID;

	*out = NULL;
	if (tmpl == NULL) {
		ferry_error_set("no template to render");
		return FERRY_EINVALID;
	}
	while ((start = tmpl_next(p, &expr, &elen, &end)) != NULL && end != NULL) {
		struct tmpl_expr t = tmpl_expr_parse(expr, elen);
		const json_t *v;

		tb_addn(&b, p, (size_t)(start - p));
		if (sh != NULL)
			shq_scan(sh, p, (size_t)(start - p));
		if (t.kind == TMPL_PARAM && with_params) {
			name = xstrndup(t.a, t.alen);
			v = params ? json_object_get(params, name) : NULL;
			if (v == NULL || (val = tmpl_value_text(v)) == NULL) {
				ferry_error_set("template refers to parameter \"%s\", which has %s", name,
						v ? "a value that is not a string, number or boolean"
						  : "no value");
				goto out;
			}
			if (sh != NULL && shq_quote(&b, sh, val) < 0) {
				char *env = tmpl_param_env_name(name), *place = xstrdup(ferry_error_last());

				if (strstr(place, "arithmetic"))
					ferry_error_set("{{params.%s}} sits %s in a shell script; declare the "
							"param as an integer (type: integer) so that only numbers "
							"are accepted", name, place);
				else
					ferry_error_set("{{params.%s}} sits %s in a shell script, where it "
							"cannot be quoted safely; use \"$%s\" there instead",
							name, place, env);
				free(env);
				free(place);
				goto out;
			} else if (sh == NULL) {
				tb_adds(&b, val);
			}
			free(name);
			free(val);
			name = val = NULL;
		} else if (t.kind == TMPL_RUNID && run_id != NULL) {
			tb_adds(&b, run_id);
		} else if ((t.kind == TMPL_STEP || t.kind == TMPL_STEP_ALL || t.kind == TMPL_ITEM) && refs != NULL) {
			if (refs(&val, expr, elen, refs_arg) < 0)
				goto out;
			if (sh != NULL && shq_quote(&b, sh, val) < 0) {
				char *place = xstrdup(ferry_error_last());
				ferry_error_set("{{%.*s}} sits %s in a shell script, where it cannot be "
						"quoted safely; pass it through the step's env: and use "
						"\"$NAME\" there instead", (int)elen, expr, place);
				free(place);
				goto out;
			} else if (sh == NULL) {
				tb_adds(&b, val);
			}
			free(val);
			val = NULL;
		} else { /* {{steps.…}} and anything else stay as written */
			tb_addn(&b, start, (size_t)(end - start));
			if (sh != NULL)
				shq_scan(sh, start, (size_t)(end - start));
		}
		p = end;
	}
	tb_adds(&b, p);
	*out = b.p;
	b.p = NULL;
	error = FERRY_OK;
out:
	free(name);
	free(val);
	free(b.p);
	return error;
}

int tmpl_render(char **out, const char *tmpl, const json_t *params, const char *run_id)
{
	return render(out, tmpl, params, true, run_id, NULL, NULL, NULL);
}

int tmpl_render_shell(char **out, const char *script, const json_t *params, const char *run_id)
{
	struct shq sh = {0};

	return render(out, script, params, true, run_id, &sh, NULL, NULL);
}

int tmpl_render_refs(char **out, const char *tmpl, tmpl_ref_fn refs, void *arg)
{
	return render(out, tmpl, NULL, false, NULL, NULL, refs, arg);
}

int tmpl_render_shell_refs(char **out, const char *script, tmpl_ref_fn refs, void *arg)
{
	struct shq sh = {0};

	return render(out, script, NULL, false, NULL, &sh, refs, arg);
}

int tmpl_render_all(char **out, const char *tmpl, bool shell, const json_t *params, const char *run_id,
		    tmpl_ref_fn refs, void *arg)
{
	struct shq sh = {0};

	return render(out, tmpl, params, true, run_id, shell ? &sh : NULL, refs, arg);
}

bool tmpl_has_step_ref(const char *s)
{
	const char *start, *expr = NULL, *end = NULL;
	size_t elen = 0;

	while (s != NULL && (start = tmpl_next(s, &expr, &elen, &end)) != NULL && end != NULL) {
		enum tmpl_kind k = tmpl_expr_parse(expr, elen).kind;
		if (k == TMPL_STEP || k == TMPL_STEP_ALL || k == TMPL_ITEM)
			return true;
		s = end;
	}
	return false;
}

char *tmpl_param_env_name(const char *name)
{
	char *env = xasprintf("FERRY_PARAM_%s", name), *p;

	for (p = env + 12; *p; p++) {
		if (*p >= 'a' && *p <= 'z')
			*p = (char)(*p - 'a' + 'A');
		else if (!((*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
			*p = '_';
	}
	return env;
}

void tmpl_shell_param_uses(json_t **out, const json_t *spec)
{
	json_t *uses = json_array(), *step;
	size_t i;

	json_array_foreach(json_object_get(spec, "steps"), i, step) {
		const json_t *cmd = json_object_get(step, "command");
		int k = tmpl_shell_script_index(cmd);
		const char *p, *start, *expr = NULL, *end = NULL;
		size_t elen = 0;

		p = k < 0 ? NULL : json_string_value(json_array_get(cmd, (size_t)k));
		while (p != NULL && (start = tmpl_next(p, &expr, &elen, &end)) != NULL && end != NULL) {
			struct tmpl_expr t = tmpl_expr_parse(expr, elen);

			if (t.kind == TMPL_PARAM) {
				char *name = xstrndup(t.a, t.alen), *env = tmpl_param_env_name(name);

				json_array_append_new(uses, json_pack("{s:s?, s:s, s:s}", "step",
					json_string_value(json_object_get(step, "name")),
					"param", name, "env", env));
				free(name);
				free(env);
			}
			p = end;
		}
	}
	*out = uses;
}

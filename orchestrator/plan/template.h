/*
 * template — the {{…}} language of workflow values: {{params.NAME}},
 * {{run.id}} and {{steps.STEP.outputs.KEY}}, blanks allowed inside the
 * braces. The parser (config.c) checks a workflow's templates with
 * tmpl_next() and tmpl_expr_parse() and keeps them as written; the planner
 * renders params and run.id when a run is made (tmpl_render,
 * tmpl_render_shell), and steps/ renders step outputs when a step is
 * claimed (tmpl_render_shell_refs). Inside the script of a shell command
 * (`sh -c SCRIPT`) every value is written shell-quoted: it is data, never
 * code.
 */
#ifndef FERRY_TEMPLATE_H
#define FERRY_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* What a template expression names. */
enum tmpl_kind {
	TMPL_BAD,   /* none of the below */
	TMPL_PARAM, /* params.NAME */
	TMPL_RUNID, /* run.id */
	TMPL_STEP,  /* steps.STEP.outputs.KEY; a sweep's best item: steps.STEP.best.outputs.KEY
	             * (a is "STEP.best"), steps.STEP.best.params.KEY (a is "STEP.best.params") */
	TMPL_STEP_ALL, /* steps.STEP.outputs: all of them, as JSON (a fan-out's: the list of its items') */
	TMPL_ITEM,  /* item, item.KEY: a foreach child's item (a is KEY, or NULL) */
};

/* A classified expression; a points into the text it was parsed from. */
struct tmpl_expr {
	enum tmpl_kind kind;
	const char *a; /* the parameter (TMPL_PARAM) or step (TMPL_STEP) name */
	size_t alen;
};

/*
 * Whether s[0..n) is an identifier a template can name: [A-Za-z_][A-Za-z0-9_]*
 * (parameter, env and output names).
 */
bool tmpl_ident_ok(const char *s, size_t n);

/*
 * Finds the next "{{" in s. Returns it, or NULL when there is none; *expr and
 * *elen are the expression with surrounding blanks trimmed, *end points past
 * the closing "}}" or is NULL when the template is not closed (then *expr
 * and *elen are left as they were). All point into s.
 */
const char *tmpl_next(const char *s, const char **expr, size_t *elen, const char **end);

/*
 * Classifies expression e (n bytes, trimmed): params.NAME, run.id,
 * steps.STEP.outputs.KEY, steps.STEP.outputs, item, item.KEY.
 */
struct tmpl_expr tmpl_expr_parse(const char *e, size_t n);

/*
 * A parameter value as the text a template writes: strings (without NUL),
 * integers, reals (the shortest text that reads back the same, "1.0"
 * for 1), booleans; NULL for anything else. Newly allocated; the caller
 * frees it.
 */
char *tmpl_value_text(const json_t *v);

/*
 * Renders {{params.NAME}} and {{run.id}} in tmpl (run_id may be NULL, then
 * {{run.id}} stays as written); {{steps.…}} references are left as written
 * for the engine. *out is newly allocated; the caller frees it.
 */
int tmpl_render(char **out, const char *tmpl, const json_t *params, const char *run_id);

/*
 * The same for the script argument of a shell command (see
 * tmpl_shell_script_index): each {{params.NAME}} is written shell-quoted for
 * the place it sits in the script, so that the value is one literal string
 * and can never run as code. *out is newly allocated; the caller frees it.
 */
int tmpl_render_shell(char **out, const char *script, const json_t *params, const char *run_id);

/*
 * At claim time, the {{steps.STEP.outputs.KEY}}, {{steps.STEP.outputs}},
 * {{item}} and {{item.KEY}} references left in tmpl: refs resolves each
 * (expr is the text between the braces, "steps.…" or "item…",
 * trimmed; *val newly allocated, or a negative code with the message set)
 * and the value is written as it is. Anything else between braces, and an
 * unclosed "{{", stays as written. *out is newly allocated; the caller
 * frees it.
 */
typedef int (*tmpl_ref_fn)(char **val, const char *expr, size_t len, void *arg);
int tmpl_render_refs(char **out, const char *tmpl, tmpl_ref_fn refs, void *arg);

/*
 * The same for the script argument of a shell command: each value is
 * written shell-quoted for its place, like a param: an output (a file name
 * a job chose, data a person handed a gate) is never code.
 */
int tmpl_render_shell_refs(char **out, const char *script, tmpl_ref_fn refs, void *arg);

/*
 * One pass over tmpl: params, {{run.id}} and step outputs (refs) together,
 * shell-quoted when shell. A value's own "{{…}}" is written as text, never
 * read as a template: the plan keeps a string that refers to a step output
 * whole until the step is claimed, and renders it here once (the spec's
 * "templated" list says which strings those are).
 */
int tmpl_render_all(char **out, const char *tmpl, bool shell, const json_t *params, const char *run_id,
		    tmpl_ref_fn refs, void *arg);

/* Whether s holds a reference resolved at claim time: {{steps.…}}, {{item}}, {{item.KEY}}. */
bool tmpl_has_step_ref(const char *s);

/*
 * The index of the script argument in a command array (the argument after
 * -c, or after an option cluster holding c, when argv[0] is sh, bash, dash
 * or zsh, or a path ending in one), or -1 when the command has none.
 */
int tmpl_shell_script_index(const json_t *command);

/*
 * The environment variable that carries parameter name to the job:
 * FERRY_PARAM_ and the name upper-cased, other than letters and digits
 * turned into _. *out is newly allocated; the caller frees it.
 */
char *tmpl_param_env_name(const char *name);

/*
 * The {{params.NAME}} uses inside shell script arguments of spec's steps:
 * *out is a new array of {"step", "param", "env"} objects (the caller
 * json_decref()s it), empty when there are none. For `ferry validate`.
 */
void tmpl_shell_param_uses(json_t **out, const json_t *spec);

#endif

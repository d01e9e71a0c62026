/*
 * cond — the condition language of `when:` (a step runs only when its
 * condition holds, else it is skipped): comparisons in the metric gates'
 * operators over params, upstream steps' outputs and metrics and the
 * production version's metrics, joined with and/or/not. Parsed once by
 * the config (errors with the column and the rule), evaluated when the
 * step is claimed (steps/steps.c) through a lookup the caller provides.
 * Pure: no database, no files.
 *
 *   expr    := or
 *   or      := and { ("||" | "or") and }
 *   and     := not { ("&&" | "and") not }
 *   not     := ("!" | "not") not | cmp
 *   cmp     := sum [ (">=" | ">" | "<=" | "<" | "==" | "!=") sum ]
 *   sum     := product { ("+" | "-") product }
 *   product := unary { ("*" | "/") unary }
 *   unary   := "-" unary | atom
 *   atom    := NUMBER ["%"] | STRING | true | false | null | REF
 *            | "{{" REF "}}" | "(" expr ")"
 *   REF     := params.NAME | production.METRIC
 *            | steps.STEP.outputs.KEY | steps.STEP.metrics.KEY
 *            (KEY: letters, digits, _ and .; any other in brackets: ["val/loss"])
 *
 * Semantics, chosen to be unsurprising and never to guess: numbers compare
 * as numbers (a string that is wholly a number compares with a number as
 * one), strings as strings, booleans only for equality (the strings "true"
 * and "false" compare with them as booleans); null equals only null.
 * and/or short-circuit. A condition's value must be a boolean (or a number:
 * non-zero holds; null: does not). A comparison with production's metric
 * when the model has no production version yet holds — as the metric
 * gates' "OP production" do — and `production.X == null` says whether
 * there is one. Anything else that does not fit (a missing output, a
 * string compared with >= to a number, a division by zero) is an error
 * naming the reference and its value: the step fails, it is never silently
 * taken as true or false. No loops, no functions: evaluation is linear in
 * the expression, which is at most COND_MAX_LEN bytes.
 *
 * Why not jq (libjq, packaged): its language loops and recurses, so a
 * condition from a workflow could hold a daemon's thread for good; this
 * one cannot, and it speaks the gates' operators.
 */
#ifndef FERRY_COND_H
#define FERRY_COND_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define COND_MAX_LEN 4096  /* bytes of one condition */
#define COND_MAX_DEPTH 32  /* nesting of parentheses and operators */

enum cond_ref_kind {
	CREF_PARAM,      /* params.NAME: key is the param */
	CREF_OUTPUT,     /* steps.STEP.outputs.KEY */
	CREF_METRIC,     /* steps.STEP.metrics.KEY */
	CREF_PRODUCTION, /* production.METRIC: key is the metric */
};

/* A reference in a condition; strings belong to the parsed condition. */
struct cond_ref {
	enum cond_ref_kind kind;
	const char *step; /* CREF_OUTPUT, CREF_METRIC; NULL otherwise */
	const char *key;
	const char *text; /* as written, for messages ("steps.evaluate.metrics.f1") */
	int col;          /* 1-based column in the condition */
};

struct cond;

/*
 * Parses text. On success *out is the caller's (cond_free); on a bad
 * condition returns FERRY_EINVALID with a message "at column N: …" that
 * names what was expected.
 */
int cond_parse(struct cond **out, const char *text);
void cond_free(struct cond *c);

/* The references of c, in the order they are written (repeats included). */
size_t cond_nrefs(const struct cond *c);
const struct cond_ref *cond_ref_at(const struct cond *c, size_t i);

/*
 * Looks ref up for cond_eval: 0 with *val a new reference (JSON null for
 * a value that is null; *why may say where it came from, "digits 0.0.3");
 * 1 when ref is absent — for CREF_PRODUCTION, no production version (then
 * *why may say so, e.g. "no production version of digits"), for the
 * others an error with *why saying what is missing; 2: absent, an error
 * whatever the kind (production has no such metric); negative (with the message set) when the lookup itself failed. *why, if
 * set, is the caller's to have allocated and cond_eval frees it.
 */
typedef int (*cond_lookup_fn)(json_t **val, char **why, const struct cond_ref *ref, void *arg);

/*
 * Evaluates c. Returns 0 with *holds set, or FERRY_EINVALID with the
 * message naming the reference or operation that did not fit, or the
 * lookup's negative code. *explain (either way, when not NULL) is a new
 * string listing each reference looked up and its value
 * ("steps.evaluate.metrics.f1 = 0.91, production.f1 = 0.93"), or NULL when
 * none was.
 */
int cond_eval(const struct cond *c, cond_lookup_fn lookup, void *arg, bool *holds, char **explain);

#endif

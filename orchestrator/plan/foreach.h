/*
 * foreach — the list a `foreach:` step fans out over, from what a workflow
 * or an upstream step gave: a JSON array (an outputs.json key, a literal
 * list in the YAML), a string holding a JSON array (a param, an output
 * file), or text with one item per non-empty line (an output file a job
 * wrote a shard a line into). Pure: the config checks literal lists with
 * it, the claim of a foreach step turns its resolved value into items, and
 * a libFuzzer target (tests/fuzz/fuzz_foreach.c) drives the text parser.
 */
#ifndef FERRY_FOREACH_H
#define FERRY_FOREACH_H

#include <jansson.h>
#include <stddef.h>

#define FOREACH_MAX_ITEMS 100000      /* items of one fan-out */
#define FOREACH_MAX_ITEM_BYTES 65536  /* one item, as compact JSON */
#define FOREACH_MAX_TEXT (64u << 20)  /* the text of a list */

/*
 * The items of text (len bytes, need not be NUL-terminated): a JSON array
 * when its first non-blank byte is '[', else its non-empty lines (trailing
 * blanks and a \r removed) as strings. *out is a new array, the caller's.
 * FERRY_EINVALID with a message that starts with what ("steps.split.outputs.shards")
 * and says which limit or which byte: more than FOREACH_MAX_ITEMS items, an
 * item over FOREACH_MAX_ITEM_BYTES, JSON that does not parse (line:column),
 * an empty list.
 */
int foreach_parse_text(json_t **out, const char *text, size_t len, const char *what);

/*
 * The items of a resolved value: an array (checked as above), or a string
 * (foreach_parse_text). Anything else is FERRY_EINVALID naming its type.
 */
int foreach_items(json_t **out, const json_t *value, const char *what);

/* [0, 1, …, n-1] for range: n (1 ≤ n ≤ FOREACH_MAX_ITEMS). */
json_t *foreach_range(long n);

/*
 * min_success as written — "95%", "0.95" or "1" — as a fraction in (0, 1];
 * -1 for anything else.
 */
double foreach_min_success(const char *s);

/*
 * The items of a sweep — {"grid": {NAME: [values]}} (every combination,
 * the first name varying slowest) or {"random": {"n": N, "seed": S,
 * "params": {NAME: [values] | {"uniform": [a, b]} | {"log_uniform": [a, b]}
 * | {"int": [a, b]}}}} (N draws, the same for the same seed) — as a new
 * array of objects NAME → value, the caller's. FERRY_EINVALID with the
 * message naming the parameter and the rule: an empty list, a range the
 * wrong way round, log_uniform not above 0, more than FOREACH_MAX_ITEMS
 * combinations.
 */
int sweep_items(json_t **out, const json_t *sweep);

/*
 * The values a param gives a grid dimension ("{{params.C}}" in place of a
 * list): a JSON list of values (the text "[1, 10]", or an array), or one
 * value ("10", "rbf": a number when it reads as one). *out is a new
 * non-empty array, the caller's; FERRY_EINVALID with a message that starts
 * with what ("sweep grid C: params.C") for an empty text or list, JSON
 * that does not parse, a null, a list or object inside the list.
 */
int sweep_param_values(json_t **out, const json_t *value, const char *what);

/*
 * sweep with its grid's param references resolved against params (NAME →
 * value, a run's params or the declared defaults): a new object, the
 * caller's. A grid value is a list, or a string that is exactly one
 * "{{params.NAME}}". FERRY_EINVALID naming the grid key for any other
 * string, a param without a value, or a value sweep_param_values refuses.
 */
int sweep_resolve(json_t **out, const json_t *sweep, const json_t *params);

#endif

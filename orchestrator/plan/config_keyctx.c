/*
 * config_keyctx — the config's parse as the key parsers of the step kinds
 * and executors see it (config_keys.h): thin wrappers over config.c's
 * helpers for one key of one step, the list of every key a step may have
 * (the generic ones, then each kind's), and the memory sizes of
 * `resources`.
 */
#include "plan/config_priv.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void cfg_key_err(struct cfg_key_ctx *c, const yaml_node_t *n, const char *fmt, ...)
{
	char *msg = NULL;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		abort();
	va_end(ap);
	err_node(c->c, n, "%s", msg);
	free(msg);
}

const char *cfg_key_q(struct cfg_key_ctx *c, const char *s)
{
	return cfg_q(c->c, s);
}

const char *cfg_key_text(struct cfg_key_ctx *c, const yaml_node_t *n, const char *what)
{
	return cfg_text(c->c, n, what);
}

bool cfg_key_next_pair(struct cfg_key_ctx *c, const yaml_node_t *n, size_t *k, const yaml_node_t **key,
		       const yaml_node_t **val)
{
	return cfg_next_pair(c->c, n, k, key, val);
}

bool cfg_key_next_item(struct cfg_key_ctx *c, const yaml_node_t *n, size_t *k, const yaml_node_t **it)
{
	return cfg_next_item(c->c, n, k, it);
}

bool cfg_key_map_fields(struct cfg_key_ctx *c, const yaml_node_t *n, const char *what,
			const char *const *keys, size_t nkeys, const yaml_node_t **vals)
{
	return cfg_map_fields(c->c, n, what, keys, nkeys, vals, NULL);
}

void cfg_key_templates(struct cfg_key_ctx *c, const yaml_node_t *n, const char *s)
{
	cfg_check_templates(c->c, n, s, c->step);
}

const char *cfg_key_name(const struct cfg_key_ctx *c)
{
	return c->key;
}

const struct step_kind *cfg_key_kind(const struct cfg_key_ctx *c)
{
	return c->c->steps[c->step].kind;
}

const json_t *cfg_key_spec(const struct cfg_key_ctx *c)
{
	return c->c->steps[c->step].spec;
}

const yaml_node_t *cfg_key_value(const struct cfg_key_ctx *c, const char *name)
{
	for (size_t k = 0; k < c->c->nkeys; k++)
		if (strcmp(c->c->keys[k], name) == 0)
			return present(c->vals[k]) ? c->vals[k] : NULL;
	return NULL;
}

void cfg_key_production(struct cfg_key_ctx *c, const yaml_node_t *n)
{
	if (c->c->steps[c->step].prod_gate == NULL)
		c->c->steps[c->step].prod_gate = n;
}

void cfg_key_model_named(struct cfg_key_ctx *c)
{
	c->c->steps[c->step].prod_gate = NULL;
}

void cfg_key_addf(char **list, const char *fmt, ...)
{
	char *s = NULL, *joined;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		abort();
	va_end(ap);
	joined = xasprintf("%s%s", *list ? *list : "", s);
	free(*list);
	free(s);
	*list = joined;
}

/* ---- every key a step may have ----------------------------------------- */

/* The index of name among the n names of pass, or n. */
static size_t name_index(const char **names, size_t n, const char *name)
{
	size_t k;

	for (k = 0; k < n && strcmp(names[k], name) != 0; k++)
		;
	return k;
}

/*
 * The keys of the kinds' rows with STK_LAST set (last) or not, appended
 * to c->keys in an order that keeps every kind's table in its order and
 * otherwise lists a key where a kind first names it (a topological sort
 * of the tables, earliest first): "dataset, labels, webhook, on_timeout"
 * as the label kind lists them, though the gate kind before it takes
 * on_timeout alone.
 */
static void list_pass(struct ctx *c, unsigned last)
{
	const struct step_kind *kind;
	const struct step_key *row;
	const char **names = NULL, *name;
	const struct step_key **rows = NULL;
	unsigned char *before = NULL, *done = NULL; /* before[a * cap + b]: a comes before b */
	size_t n = 0, cap = 0, prev, at, k, j;

	for (int pass = 0; pass < 2; pass++) { /* count the names, then the order between them */
		for (size_t i = 0; (kind = step_kind_at(i)) != NULL; i++) {
			prev = SIZE_MAX;
			for (row = kind->keys; row != NULL && (row->name || row->names); row++) {
				if (((row->flags & STK_LAST) != 0) != last)
					continue;
				for (j = 0; (name = row->name ? (j == 0 ? row->name : NULL) : row->names(j)) != NULL; j++) {
					at = name_index(names, n, name);
					if (pass == 0 && at == n) {
						names = xrealloc(names, (n + 1) * sizeof(*names));
						rows = xrealloc(rows, (n + 1) * sizeof(*rows));
						names[n] = name;
						rows[n++] = row;
					} else if (pass == 1 && prev != SIZE_MAX && prev != at) {
						before[prev * cap + at] = 1;
					}
					prev = at;
				}
			}
		}
		if (pass == 0) {
			cap = n ? n : 1;
			before = xcalloc(cap * cap, 1);
			done = xcalloc(cap, 1);
		}
	}
	for (size_t emitted = 0; emitted < n; emitted++) {
		/* the earliest key all of whose predecessors are listed (a cycle: the earliest left) */
		size_t pick = SIZE_MAX, any = SIZE_MAX;
		for (k = 0; k < n && pick == SIZE_MAX; k++) {
			if (done[k])
				continue;
			any = any == SIZE_MAX ? k : any;
			for (j = 0; j < n && (done[j] || !before[j * cap + k]); j++)
				;
			if (j == n)
				pick = k;
		}
		pick = pick == SIZE_MAX ? any : pick;
		done[pick] = 1;
		c->keys = xrealloc(c->keys, (c->nkeys + 1) * sizeof(*c->keys));
		c->krow = xrealloc(c->krow, (c->nkeys + 1) * sizeof(*c->krow));
		c->keys[c->nkeys] = names[pick];
		c->krow[c->nkeys++] = rows[pick];
	}
	free(names);
	free(rows);
	free(before);
	free(done);
}

void cfg_keys_list(struct ctx *c, const char *const *generic, size_t n)
{
	c->keys = xcalloc(n, sizeof(*c->keys));
	c->krow = xcalloc(n, sizeof(*c->krow));
	for (c->nkeys = 0; c->nkeys < n; c->nkeys++)
		c->keys[c->nkeys] = generic[c->nkeys];
	list_pass(c, 0);
	list_pass(c, 1);
}

/* ---- sizes ---------------------------------------------------------------- */

/*
 * A memory size: a whole number with an optional unit (K, Ki, M, Mi, G, Gi,
 * T, Ti; no unit is bytes), in MiB rounded up. -1 when malformed.
 */
int64_t cfg_memory_mb(const char *s)
{
	static const struct { const char *unit; double bytes; } units[] = {
		{"", 1}, {"K", 1e3}, {"Ki", 1024.0}, {"M", 1e6}, {"Mi", 1048576.0},
		{"G", 1e9}, {"Gi", 1073741824.0}, {"T", 1e12}, {"Ti", 1099511627776.0},
	};
	char *end = NULL;
	double v;

	if (s == NULL || !isdigit((unsigned char)s[0]))
		return -1;
	v = strtod(s, &end);
	for (size_t k = 0; k < NELEM(units); k++)
		if (strcmp(end, units[k].unit) == 0) {
			double mb = ceil(v * units[k].bytes / 1048576.0);
			return mb >= 1 && mb <= 1e9 ? (int64_t)mb : -1;
		}
	return -1;
}

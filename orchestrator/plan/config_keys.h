/*
 * config_keys — what a key parser of a step kind (kind.h struct step_key,
 * rows in steps/) or of an executor's options block (exec.h) may use of
 * the config's parse: the YAML node helpers, errors at file:line:col, the
 * step's other keys and its spec so far. A struct cfg_key_ctx is one key of
 * one step being parsed; it belongs to the config and lives for the call.
 */
#ifndef FERRY_CONFIG_KEYS_H
#define FERRY_CONFIG_KEYS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <yaml.h>

#include "plan/kind.h"
#include "lib/util.h"

/* ---- YAML nodes ------------------------------------------------------- */

static inline const char *sval(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

/* How a message names the type of n: "string", "list", "mapping". */
static inline const char *ntype(const yaml_node_t *n)
{
	static const char *const names[] = {"empty node", "string", "list", "mapping"};

	return (unsigned)n->type < sizeof(names) / sizeof(names[0]) ? names[n->type] : names[0];
}

/* A plain empty, ~ or null scalar: an optional key given so is absent. */
static inline bool is_null(const yaml_node_t *n)
{
	static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
	size_t i;

	if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	for (i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++)
		if (n->data.scalar.length == strlen(nulls[i]) && strcmp(sval(n), nulls[i]) == 0)
			return true;
	return false;
}

static inline bool present(const yaml_node_t *n)
{
	return n != NULL && !is_null(n);
}

static inline size_t nitems(const yaml_node_t *n)
{
	return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
}

/* ---- one key of one step ---------------------------------------------- */

/* Records an error at node n (1-based line:col in the message). */
void cfg_key_err(struct cfg_key_ctx *c, const yaml_node_t *n, const char *fmt, ...) FERRY_PRINTF(3, 4);
/* s quoted for a message (escaped, clipped); lives until a few more calls. */
const char *cfg_key_q(struct cfg_key_ctx *c, const char *s);
/* The text of scalar n, or NULL after reporting why it is not usable (what names it). */
const char *cfg_key_text(struct cfg_key_ctx *c, const yaml_node_t *n, const char *what);
/* Steps through mapping n from pair *k (repeated keys skipped); false at the end. */
bool cfg_key_next_pair(struct cfg_key_ctx *c, const yaml_node_t *n, size_t *k, const yaml_node_t **key,
		       const yaml_node_t **val);
/* Steps through sequence n, or yields n once when it is a scalar. */
bool cfg_key_next_item(struct cfg_key_ctx *c, const yaml_node_t *n, size_t *k, const yaml_node_t **it);
/*
 * The known keys of mapping n: vals[i] is the value of keys[i] or NULL.
 * Reports unknown keys (with a suggestion); false after an error when n is
 * not a mapping. what names it in messages ("resources").
 */
bool cfg_key_map_fields(struct cfg_key_ctx *c, const yaml_node_t *n, const char *what,
			const char *const *keys, size_t nkeys, const yaml_node_t **vals);
/* Checks the {{…}} templates in s, the text of node n of this step. */
void cfg_key_templates(struct cfg_key_ctx *c, const yaml_node_t *n, const char *s);

/* The name of the key being parsed (one of a family's). */
const char *cfg_key_name(const struct cfg_key_ctx *c);
/* The step's kind, or NULL when it names an unknown one. */
const struct step_kind *cfg_key_kind(const struct cfg_key_ctx *c);
/* The step's spec so far (the generic keys, then its kind's keys in table order). */
const json_t *cfg_key_spec(const struct cfg_key_ctx *c);
/* The value node of the step's key name, or NULL when it has none. */
const yaml_node_t *cfg_key_value(const struct cfg_key_ctx *c, const char *name);

/*
 * A gate comparison against production (node n): the step needs a model;
 * once the graph is known it takes that of the register steps below it,
 * unless it names one (cfg_key_model_named).
 */
void cfg_key_production(struct cfg_key_ctx *c, const yaml_node_t *n);
void cfg_key_model_named(struct cfg_key_ctx *c);

/* Appends the formatted text to *list (a string the caller frees; NULL to start). */
void cfg_key_addf(char **list, const char *fmt, ...) FERRY_PRINTF(2, 3);

#endif

/*
 * config_priv — what config.c (the document, common step keys and the step
 * graph) and config_kinds.c (the step kinds and their own keys) share: the
 * parse context, the YAML node helpers and error reporting. Private to those
 * two files.
 */
#ifndef FERRY_CONFIG_PRIV_H
#define FERRY_CONFIG_PRIV_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <yaml.h>

#include "plan/config.h"
#include "plan/config_keys.h"
#include "plan/kind.h"

#define QMAX 60 /* bytes of a user value quoted in a message */
#define QBUF (4 * QMAX + 16)
#define NQBUF 6
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))


struct cerr {
	int line, col;
	size_t seq;
	char *msg;
};

struct step {
	const yaml_node_t *node;      /* the step's mapping */
	const char *name;             /* NULL when missing or not a string */
	const struct step_kind *kind; /* NULL when unknown */
	json_t *spec;                 /* its normalised spec (borrowed) */
	const yaml_node_t *prod_gate; /* first gate comparison against production,
	                               * when the step names no model */
	const yaml_node_t *when_prod; /* its when: node, when the condition reads production */
	bool final;                   /* listed under finally: */
	const yaml_node_t **needs;    /* needs items that are strings */
	size_t nneeds;
	size_t *adj, nadj;            /* resolved needs, as step indexes */
};

/* A {{steps.STEP.outputs.KEY}} reference, checked once the graph is known. */
struct tref {
	size_t step;
	const yaml_node_t *node;
	char *target;
};

struct ctx {
	const char *file, *src;
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
	uint64_t *up; /* per step, a bitset of its transitive upstream steps */
	size_t words;
	char qbuf[NQBUF][QBUF];
	unsigned qi;
	/* every key a step may have: the generic ones, then every kind's once
	 * (cfg_keys_list), in the order of the messages; krow[k] is the first
	 * row of keys[k] in a kind's table (NULL for the generic ones) */
	const char **keys;
	const struct step_key **krow;
	size_t nkeys;
	/* the workflow's queue: and priority: (the steps' default; parse_queue) */
	const char *queue;   /* borrowed from the spec, or NULL */
	int priority, has_priority;
};

/* One key of one step, as its parser sees it (config_keys.h). */
struct cfg_key_ctx {
	struct ctx *c;
	size_t step;
	const char *key;                /* the key's name */
	const yaml_node_t *const *vals; /* the step's value nodes, indexed like c->keys */
};

struct sbuf {
	char *p;
	size_t len, cap;
};

/* ---- YAML nodes ------------------------------------------------------- */

static inline int pos1(size_t zero_based)
{
	return zero_based < 100000000 ? (int)zero_based + 1 : 100000000;
}

static inline size_t npairs(const yaml_node_t *n)
{
	return (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
}

/* ---- shared helpers (config.c) ---------------------------------------- */

/* Records an error at line:col (1-based). */
void cfg_err_at(struct ctx *c, int line, int col, const char *fmt, ...) FERRY_PRINTF(4, 5);
/* Records an error at node n (a yaml_node_t *). */
#define err_node(c, n, ...) \
	cfg_err_at(c, pos1((n)->start_mark.line), pos1((n)->start_mark.column), __VA_ARGS__)

/* s quoted for a message (escaped, clipped); lives until NQBUF more calls. */
const char *cfg_q(struct ctx *c, const char *s);
/* The text of scalar n, or NULL after reporting why it is not usable. */
const char *cfg_text(struct ctx *c, const yaml_node_t *n, const char *what);
/* Steps through mapping n from pair *k (repeated keys skipped); false at the end. */
bool cfg_next_pair(struct ctx *c, const yaml_node_t *n, size_t *k, const yaml_node_t **key,
		   const yaml_node_t **val);
/* Steps through sequence n, or yields n once when it is a scalar. */
bool cfg_next_item(struct ctx *c, const yaml_node_t *n, size_t *k, const yaml_node_t **it);
/* Checks the {{…}} templates in s, the text of node n in step `step`. */
void cfg_check_templates(struct ctx *c, const yaml_node_t *n, const char *s, size_t step);
/* Appends "a, b" (the keys of obj) or "none" to b. */
void cfg_list_keys(const json_t *obj, struct sbuf *b);

/* config_flow.c: a step's when:, foreach:/sweep: (max_parallel, min_success) and fail_run nodes (NULL: absent) */
struct cfg_flow_nodes {
	const yaml_node_t *when, *fail_run, *foreach, *sweep, *max_parallel, *min_success, *gang, *preemptible;
};
/* Checks them for step i (of kind, NULL when unknown) and sets their fields in its spec js. */
void cfg_flow_fields(struct ctx *c, size_t i, const struct step_kind *kind, const struct cfg_flow_nodes *f,
		     json_t *js);
/* Step j is upstream of step i (valid once the graph is computed). */
bool cfg_has_up(const struct ctx *c, size_t i, size_t j);
/*
 * config_graph.c: the needs resolved, the upstream sets, cycles and step
 * references checked; sets c->over when the needs are too many to build
 * the DAG.
 */
void cfg_graph_check(struct ctx *c);
/* How messages name step i: its quoted name. */
const char *cfg_sname(struct ctx *c, size_t i);
void cfg_sb_adds(struct sbuf *b, const char *s);
void cfg_sb_addf(struct sbuf *b, const char *fmt, ...) FERRY_PRINTF(2, 3);

/* s[0..n) quoted for a message into buf (escaped, clipped); returns buf. */
const char *cfg_quote_to(char *buf, size_t cap, const char *s, size_t n);

/* ---- params (config_params.c) ----------------------------------------- */

/* The keys of a parameter's mapping, in their order. */
enum { PK_DEFAULT, PK_DESC, PK_TYPE, PK_VALUES, PK_PATTERN, PK_MIN, PK_MAX, PK_N };

/*
 * Parses the rules of parameter `name` (vals[PK_…] are its key nodes'
 * values, NULL when absent) into its spec p, which already holds its
 * "default" (from node def), and reports a default that breaks them.
 */
void cfg_param_decl(struct ctx *c, const char *name, const yaml_node_t *const *vals,
		    const yaml_node_t *def, json_t *p);

/*
 * Checks value against the declaration p (its type, values, pattern, min,
 * max). Returns 0, or FERRY_EINVALID with the broken rule appended to why
 * ("must be an integer, not \"ten\"").
 */
int cfg_param_check(const json_t *p, const char *value, struct sbuf *why);

/* ---- step kinds (config_kinds.c) -------------------------------------- */

/* The kind named by node n ("run" when absent); NULL after reporting an unknown one. */
const struct step_kind *cfg_kind_parse(struct ctx *c, const yaml_node_t *n, const char **name);

/*
 * Looks up the known keys of mapping n: vals[i] is the value of keys[i] or
 * NULL, and so is keyn[i] (when keyn is not NULL) for the key node. Reports
 * keys that are not strings or not known (with a suggestion). Returns false,
 * after an error, when n is not a mapping.
 */
bool cfg_map_fields(struct ctx *c, const yaml_node_t *n, const char *what,
		    const char *const *keys, size_t nkeys, const yaml_node_t **vals,
		    const yaml_node_t **keyn);

/*
 * Every key a step may have into c->keys and c->krow: generic (n of them),
 * then each kind's keys once, in the order of the kinds and of their
 * tables (STK_LAST rows at the end); a family's every name.
 */
void cfg_keys_list(struct ctx *c, const char *const *generic, size_t n);

/*
 * Parses the kind keys of step i (keys[k] and vals[k] are the key and
 * value nodes of c->keys[k], or NULL) into its spec js through the rows of
 * its kind's table: a key its kind does not take is reported, the fields
 * other kinds' steps carry get their `absent` value. kind NULL (unknown)
 * parses whatever is there with the first row of each key, unchecked.
 * job STK_JOB: the keys of where the job runs alone; 0: the others (and
 * the kind's required keys).
 */
void cfg_kind_fields(struct ctx *c, size_t i, const struct step_kind *kind,
		     const yaml_node_t *const *keys, const yaml_node_t *const *vals, json_t *js, unsigned job);

/*
 * A workflow's `schedule:` and `triggers:` (config_schedule.c) into its
 * spec: "schedules" and "triggers", each only when present.
 */
void cfg_schedule_fields(struct ctx *c, const yaml_node_t *sched, const yaml_node_t *trig, json_t *spec);

/*
 * Once the graph is known: an evaluate or train step comparing against
 * production without `model` takes the model of the register steps
 * (SKF_REGISTERS) downstream of it, or gets an error asking for `model:`.
 */
void cfg_kind_models(struct ctx *c);

#endif

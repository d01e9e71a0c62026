/*
 * config_graph — the DAG of a parsed workflow (config.c's last checks):
 * each step's needs resolved to step indexes (unknown, itself, twice, and
 * the total bounded), the transitive upstream set of every step as a bit
 * matrix (cfg_has_up), cycles reported once each with their path, and
 * {{steps.X.outputs.Y}} references checked to name a step upstream.
 */
#include "plan/config_priv.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "plan/config_keys.h"

/*
 * needs: items in all: anchors let 46 KB of YAML name 90,000 of them, and
 * drawing such a DAG took a core for minutes; a 2,000-step fan-out and
 * gather has 4,000
 */
#define MAX_EDGES 10000
#define MAX_LISTED 20 /* names listed in "known steps: …" */

bool cfg_has_up(const struct ctx *c, size_t i, size_t j)
{
	return (c->up[i * c->words + j / 64] >> (j % 64)) & 1;
}

/* Appends name, escaped and clipped but not quoted, to b. */
static void sb_add_name(struct sbuf *b, const char *name)
{
	char buf[QBUF];
	size_t n = strlen(cfg_quote_to(buf, sizeof(buf), name, strlen(name)));

	buf[n - 1] = '\0'; /* the closing quote */
	cfg_sb_adds(b, buf + 1);
}

static void list_steps(struct ctx *c, struct sbuf *b, size_t except)
{
	size_t j, shown = 0, more = 0;

	for (j = 0; j < c->nsteps; j++) {
		json_t *jv = c->steps[j].name ? json_object_get(c->byname, c->steps[j].name) : NULL;
		if (j == except || jv == NULL || (size_t)json_integer_value(jv) != j)
			continue;
		if (shown == MAX_LISTED) {
			more++;
			continue;
		}
		cfg_sb_adds(b, shown++ ? ", " : "");
		sb_add_name(b, c->steps[j].name);
	}
	cfg_sb_adds(b, shown ? "" : "none");
	if (more > 0)
		cfg_sb_addf(b, " and %zu more", more);
}

/* How messages name step i: its quoted name, or "" when it has none. */
const char *cfg_sname(struct ctx *c, size_t i)
{
	return cfg_q(c, c->steps[i].name ? c->steps[i].name : "");
}

static void resolve_needs(struct ctx *c)
{
	size_t i, k, *mark, edges = 0;

	for (i = 0; i < c->nsteps; i++) {
		if ((edges += c->steps[i].nneeds) > MAX_EDGES) {
			err_node(c, c->steps[i].needs[c->steps[i].nneeds - 1],
				 "too many dependencies: the needs of the steps up to %s name %zu steps in all; "
				 "at most %d are allowed (a step that needs many could need one that gathers them)",
				 cfg_sname(c, i), edges, MAX_EDGES);
			c->over = true; /* nothing after this is checked: the DAG is not built */
			return;
		}
	}
	mark = xcalloc(c->nsteps, sizeof(size_t));
	for (i = 0; i < c->nsteps; i++) {
		struct step *st = &c->steps[i];
		st->adj = xcalloc(st->nneeds + 1, sizeof(*st->adj));
		for (k = 0; k < st->nneeds; k++) {
			const yaml_node_t *it = st->needs[k];
			json_t *jv = json_object_get(c->byname, sval(it));
			size_t j = jv ? (size_t)json_integer_value(jv) : SIZE_MAX;
			struct sbuf known = {0};

			if (j == SIZE_MAX) {
				list_steps(c, &known, i);
				err_node(c, it, "step %s needs unknown step %s; known steps: %s",
					 cfg_sname(c, i), cfg_q(c, sval(it)), known.p);
				free(known.p);
			} else if (j == i) {
				err_node(c, it, "step %s needs itself; remove it from needs", cfg_sname(c, i));
			} else if (c->steps[j].final && !st->final) {
				err_node(c, it, "step %s needs %s, a finally step: finally steps run after every "
					 "other step; move %s under finally: too, or %s under steps:", cfg_sname(c, i),
					 cfg_q(c, sval(it)), cfg_sname(c, i), cfg_q(c, sval(it)));
			} else if (st->final && !c->steps[j].final) {
				err_node(c, it, "finally step %s needs %s: a finally step runs after every step "
					 "of steps: already (and may use their outputs); its needs name only other "
					 "finally steps", cfg_sname(c, i), cfg_q(c, sval(it)));
			} else if (mark[j] == i + 1) {
				err_node(c, it, "step %s lists %s in needs twice", cfg_sname(c, i),
					 cfg_q(c, sval(it)));
			} else {
				mark[j] = i + 1;
				st->adj[st->nadj++] = j;
			}
		}
	}
	free(mark);
}

/*
 * Fills c->up: for each step in file order, a walk along needs that reuses
 * the finished sets of earlier steps. Cycles need no special case: a step on
 * one simply ends up in its own set.
 */
static void compute_upstream(struct ctx *c)
{
	size_t n = c->nsteps, i, k, sp, w, *stack = xmalloc((n + 1) * sizeof(size_t));

	c->words = (n + 63) / 64;
	c->up = xcalloc(n * c->words, sizeof(uint64_t));
	for (i = 0; i < n; i++) {
		uint64_t *set = &c->up[i * c->words];
		stack[0] = i;
		for (sp = 1; sp > 0;) {
			const struct step *st = &c->steps[stack[--sp]];
			for (k = 0; k < st->nadj; k++) {
				size_t j = st->adj[k];
				if (cfg_has_up(c, i, j))
					continue;
				set[j / 64] |= (uint64_t)1 << (j % 64);
				if (j >= i) {
					stack[sp++] = j;
					continue;
				}
				for (w = 0; w < c->words; w++)
					set[w] |= c->up[j * c->words + w];
			}
		}
	}
	free(stack);
}

/* Steps i and j need each other, directly or not: they share a cycle. */
static bool same_cycle(const struct ctx *c, size_t i, size_t j)
{
	return i == j ? cfg_has_up(c, i, i) : cfg_has_up(c, i, j) && cfg_has_up(c, j, i);
}

/*
 * Reports one error per group of steps caught in cycles, at the group's first
 * step s, naming the shortest cycle through s in run order: "a -> b" when b
 * needs a.
 */
static void check_cycles(struct ctx *c)
{
	size_t n = c->nsteps, s, j, k, head, tail, last, v;
	size_t *parent = xmalloc(n * sizeof(size_t)), *queue = xmalloc(n * sizeof(size_t));
	bool *done = xcalloc(n, sizeof(bool));
	struct sbuf b = {0};

	for (s = 0; s < n; s++) {
		if (done[s] || !cfg_has_up(c, s, s))
			continue;
		for (j = s; j < n; j++) {
			done[j] = done[j] || same_cycle(c, s, j);
			parent[j] = SIZE_MAX;
		}
		queue[0] = s;
		for (head = 0, tail = 1, last = SIZE_MAX; head < tail && last == SIZE_MAX;) {
			v = queue[head++];
			for (k = 0; k < c->steps[v].nadj && last == SIZE_MAX; k++) {
				size_t w = c->steps[v].adj[k];
				if (w == s)
					last = v;
				else if (parent[w] == SIZE_MAX && w > s && same_cycle(c, s, w))
					parent[queue[tail++] = w] = v;
			}
		}
		cfg_sb_adds(&b, "cycle: ");
		sb_add_name(&b, c->steps[s].name);
		for (v = last; v != s && v != SIZE_MAX; v = parent[v]) {
			cfg_sb_adds(&b, " -> ");
			sb_add_name(&b, c->steps[v].name);
		}
		cfg_sb_adds(&b, " -> ");
		sb_add_name(&b, c->steps[s].name);
		err_node(c, c->steps[s].node, "%s", b.p);
		b.len = 0;
	}
	free(b.p);
	free(parent);
	free(queue);
	free(done);
}

static void check_step_refs(struct ctx *c)
{
	size_t k, j;

	for (k = 0; k < c->ntrefs; k++) {
		const struct tref *r = &c->trefs[k];
		json_t *jv = r->target ? json_object_get(c->byname, r->target) : NULL;
		size_t tl = r->target ? strlen(r->target) : 0, cut = 0;

		/* STEP.best, STEP.best.params: a sweep's best item, of a step with select: */
		if (jv == NULL && tl > 5 && strcmp(r->target + tl - 5, ".best") == 0)
			cut = tl - 5;
		else if (jv == NULL && tl > 12 && strcmp(r->target + tl - 12, ".best.params") == 0)
			cut = tl - 12;
		if (cut > 0) {
			char *base = xstrndup(r->target, cut);
			jv = json_object_get(c->byname, base);
			if (jv != NULL && json_object_get(c->steps[json_integer_value(jv)].spec, "select") == NULL)
				err_node(c, r->node, "step %s has no best item: only a sweep with select: has",
					 cfg_q(c, base));
			free(base);
		}

		if (r->target == NULL) {
			if (json_object_get(c->steps[r->step].spec, "foreach") == NULL)
				err_node(c, r->node, "step %s uses {{item}}, which only a step with foreach: has",
					 cfg_sname(c, r->step));
		} else if (jv == NULL) {
			err_node(c, r->node, "template refers to unknown step %s", cfg_q(c, r->target));
		} else if ((j = (size_t)json_integer_value(jv)) == r->step) {
			err_node(c, r->node, "step %s cannot use its own outputs", cfg_sname(c, r->step));
		} else if (c->steps[r->step].final && !c->steps[j].final) {
			/* a finally step comes after every step of steps: */
		} else if (!cfg_has_up(c, r->step, j)) {
			err_node(c, r->node, "step %s uses outputs of %s, which is not upstream of it; "
				 "add %s to its needs", cfg_sname(c, r->step), cfg_q(c, r->target),
				 cfg_q(c, r->target));
		}
	}
}

void cfg_graph_check(struct ctx *c)
{
	resolve_needs(c);
	if (c->over)
		return; /* too many needs: the DAG was not built */
	compute_upstream(c);
	check_cycles(c);
	check_step_refs(c);
}

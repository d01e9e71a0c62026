/*
 * dag_svg — a workflow's whole DAG as SVG, laid out by Graphviz (libgvc,
 * dot), for the web console's run page (GET /api/v1/runs/{id}/dag.svg).
 * Every step is a node, whether it ran or not: an SVG <g> with
 * id="step-NAME" and class="node step", labelled with the name and kind;
 * every needs is an edge from the needed step. The console colours the
 * nodes by state through their class, so the picture never depends on a
 * run's progress and is cached by workflow version (the hash): an entry
 * never goes stale.
 *
 * libgvc is not thread-safe: every layout in the process is serialized by
 * one mutex. Layouts run on the caller's thread (API database workers),
 * never on the engine loop.
 */
#ifndef FERRY_DAG_SVG_H
#define FERRY_DAG_SVG_H

#include <jansson.h>
#include <stddef.h>

/* Bumped whenever the picture changes for the same workflow: part of the ETag. */
#define DAG_SVG_LAYOUT_VERSION 3

/* At most this many steps are laid out (a bigger DAG is refused: FERRY_EINVALID). */
#define DAG_SVG_MAX_STEPS 20000

/*
 * Lays out steps (a JSON array of objects with "name", "kind" and "needs",
 * an array of step names: the "steps" of a run's JSON) and renders it:
 * *out is the SVG text (*len bytes, NUL-terminated), the caller's to free.
 * A needs naming no step is left out. 0, FERRY_EINVALID (not such an array,
 * too many steps) or FERRY_ERROR (Graphviz failed), with the message set.
 */
int dag_svg_render(char **out, size_t *len, const json_t *steps);

/* A rendered SVG, immutable and reference-counted (dag_svg_release). */
struct dag_svg {
	size_t len;
	const char *data; /* NUL-terminated */
};
void dag_svg_release(const struct dag_svg *s);

/*
 * An in-memory cache of rendered DAGs keyed by workflow hash: at most
 * max_entries of them and max_bytes of SVG, the least recently used going
 * first. Safe from any thread. *out is the caller's (dag_cache_free).
 */
struct dag_cache;
int dag_cache_new(struct dag_cache **out, size_t max_entries, size_t max_bytes);
void dag_cache_free(struct dag_cache *c); /* accepts NULL */

/* The SVG of hash with a reference for the caller, or NULL. */
const struct dag_svg *dag_cache_get(struct dag_cache *c, const char *hash);

/*
 * The SVG of hash: from the cache, or rendered from steps (dag_svg_render)
 * and cached. Two requests missing at once render it once (the second finds
 * it after waiting for the layout lock). *out holds a reference
 * (dag_svg_release); *hit says whether it came from the cache.
 */
int dag_cache_render(const struct dag_svg **out, int *hit, struct dag_cache *c, const char *hash,
		     const json_t *steps);

struct dag_cache_stats {
	size_t entries, bytes;
	unsigned long long hits, misses, renders, evictions;
};
void dag_cache_stats(struct dag_cache *c, struct dag_cache_stats *out);

#endif

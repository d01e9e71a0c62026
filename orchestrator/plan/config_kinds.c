/*
 * config_kinds — the step kinds of a workflow and the keys that only some
 * kinds take. The kinds are the rows of the step-kind table (kind.h,
 * steps/kinds.c): each row says whether the kind has a command and which
 * keys it takes beside the generic ones, each key a row of its table with
 * its own parser (steps/kind_*.c, steps/keys*.c). config.c parses what
 * every step has (name, needs, command, env, …) and calls
 * cfg_kind_fields() for the rest: each key the step's kind takes is parsed
 * by its row into the normalised spec (with its default when absent), a
 * key it does not take is reported ("applies to …", "runs no job"), and the
 * fields every step carries get their value for kinds without the key.
 * Once the step graph is known, cfg_kind_models() gives an evaluate step
 * that compares against production the model of the register steps
 * downstream of it.
 *
 * A new kind, or a key of one, touches nothing here (steps/README.md).
 */
#include "plan/config_priv.h"

#include <stdlib.h>
#include <string.h>

const struct step_kind *cfg_kind_parse(struct ctx *c, const yaml_node_t *n, const char **name)
{
	const struct step_kind *kind = step_kind_default();
	struct sbuf known = {0};
	size_t k;

	*name = kind->name;
	if (!present(n) || (*name = cfg_text(c, n, "kind")) == NULL)
		return kind;
	if ((kind = step_kind_find(*name)) != NULL)
		return kind;
	for (k = 0; (kind = step_kind_at(k)) != NULL; k++)
		cfg_sb_addf(&known, "%s%s", k ? ", " : "", kind->name);
	err_node(c, n, "unknown kind %s; known kinds: %s", cfg_q(c, *name), known.p);
	free(known.p);
	return NULL;
}

/* Appends "evaluate and register" (the kinds that take key name) to b. */
static void kinds_taking(struct sbuf *b, const char *name)
{
	const struct step_kind *kind;
	size_t k, n = 0, shown = 0;

	for (k = 0; (kind = step_kind_at(k)) != NULL; k++)
		n += step_kind_key(kind, name) != NULL;
	for (k = 0; (kind = step_kind_at(k)) != NULL; k++) {
		if (step_kind_key(kind, name) == NULL)
			continue;
		shown++;
		cfg_sb_addf(b, "%s%s", shown == 1 ? "" : shown == n ? " and " : ", ", kind->name);
	}
}

/* ---- per step --------------------------------------------------------- */

/* Sets field `row`'s value out (taken; NULL: none) in js. */
static void set_field(json_t *js, const struct step_key *row, const char *name, json_t *out)
{
	if (out != NULL)
		json_object_set_new(js, row->field ? row->field : name, out);
}

/* The field's value in the spec of a step whose kind does not take the key, or NULL. */
static json_t *absent_value(const struct step_key *row)
{
	return row->absent ? json_loads(row->absent, JSON_DECODE_ANY, NULL) : NULL;
}

void cfg_kind_fields(struct ctx *c, size_t i, const struct step_kind *kind,
		     const yaml_node_t *const *keys, const yaml_node_t *const *vals, json_t *js, unsigned job)
{
	struct cfg_key_ctx kc = {c, i, NULL, vals};
	const struct step_key *row;
	json_t *out;

	for (row = kind && !job ? kind->keys : NULL; row != NULL && (row->name || row->names); row++)
		if (row->required && row->name != NULL && cfg_key_value(&kc, row->name) == NULL)
			err_node(c, c->steps[i].node, "a %s step needs \"%s\"%s%s%s", kind->name, row->name,
				 row->hint ? " (" : "", row->hint ? row->hint : "", row->hint ? ")" : "");
	for (size_t k = 0; k < c->nkeys; k++) {
		const struct step_key *any = c->krow[k];
		bool given = present(vals[k]);

		if (any == NULL || (any->flags & STK_JOB) != job) /* a generic key: config.c's */
			continue;
		row = kind ? step_kind_key(kind, c->keys[k]) : given ? any : NULL;
		kc.key = c->keys[k];
		out = NULL;
		if (row != NULL) {
			row->parse(&kc, given ? vals[k] : NULL, &out);
			set_field(js, row, c->keys[k], out);
			continue;
		}
		if (given && (any->flags & STK_JOB) != 0 && (kind->flags & (SKF_JOB | SKF_SERVICE)) == 0) {
			/* where a job runs, for a kind that runs none: told so, and checked all the same */
			err_node(c, vals[k], "a %s step runs no job; remove \"%s\"", kind->name, c->keys[k]);
			any->parse(&kc, vals[k], &out);
			set_field(js, any, c->keys[k], out);
			continue;
		}
		if (given) {
			struct sbuf which = {0};

			kinds_taking(&which, c->keys[k]);
			err_node(c, keys[k], "\"%s\" applies to %s steps; remove it from this %s step",
				 c->keys[k], which.p, kind->name);
			free(which.p);
		}
		set_field(js, any, c->keys[k], absent_value(any));
	}
}

/* ---- after the graph -------------------------------------------------- */

enum models_of { MODELS_BELOW, MODELS_AROUND, MODELS_ALL };

/*
 * The distinct model names (a new array) the register steps below step i
 * register (MODELS_BELOW), above or below it (MODELS_AROUND), or anywhere
 * in the workflow (MODELS_ALL), in file order.
 */
static json_t *register_models(struct ctx *c, size_t i, enum models_of which)
{
	json_t *models = json_array();
	size_t j;

	for (size_t r = 0; r < c->nsteps; r++) {
		const struct step *reg = &c->steps[r];
		json_t *m = json_object_get(reg->spec, "model");

		if (r == i || reg->kind == NULL || (reg->kind->flags & SKF_REGISTERS) == 0 || !json_is_string(m))
			continue;
		if ((which == MODELS_BELOW && !cfg_has_up(c, r, i)) ||
		    (which == MODELS_AROUND && !cfg_has_up(c, r, i) && !cfg_has_up(c, i, r)))
			continue;
		for (j = 0; j < json_array_size(models) && !json_equal(json_array_get(models, j), m); j++)
			;
		if (j == json_array_size(models))
			json_array_append(models, m);
	}
	return models;
}

/*
 * The model a when: condition's production.METRIC reads: the step's own
 * model:, else the one model the register steps above or below it
 * register, else (finally steps) the workflow's one registered model.
 * Kept in the spec as "when_model".
 */
static void when_models(struct ctx *c)
{
	for (size_t i = 0; i < c->nsteps; i++) {
		const struct step *st = &c->steps[i];
		const json_t *own = json_object_get(st->spec, "model");
		json_t *models;

		if (st->when_prod == NULL)
			continue;
		if (json_is_string(own)) {
			json_object_set(st->spec, "when_model", (json_t *)own);
			continue;
		}
		models = register_models(c, i, st->final ? MODELS_ALL : MODELS_AROUND);
		if (json_array_size(models) == 1)
			json_object_set(st->spec, "when_model", json_array_get(models, 0));
		else
			err_node(c, st->when_prod, "step %s's when reads production, but %s; production is the "
				 "production version of the model a register step above or below it registers",
				 cfg_sname(c, i), json_array_size(models) == 0 ? "no register step above or below it "
				 "names a model" : "the register steps above and below it register different models");
		json_decref(models);
	}
}

void cfg_kind_models(struct ctx *c)
{
	struct sbuf found = {0};
	json_t *models;
	size_t i, j;
	bool takes_model;

	for (i = 0; i < c->nsteps; i++) {
		const struct step *st = &c->steps[i];

		if (st->prod_gate == NULL || st->kind == NULL ||
		    !json_is_null(json_object_get(st->spec, "model")))
			continue;
		/* the message asks for model: where the kind takes it, else for a kind that does */
		takes_model = step_kind_key(st->kind, "model") != NULL;
		models = register_models(c, i, MODELS_BELOW);
		if (json_array_size(models) == 1) {
			json_object_set(st->spec, "model", json_array_get(models, 0));
			json_decref(models);
			continue;
		}
		for (j = 0; j < json_array_size(models); j++)
			cfg_sb_addf(&found, "%s%s", j ? ", " : "",
				    cfg_q(c, json_string_value(json_array_get(models, j))));
		if (json_array_size(models) == 0)
			err_node(c, st->prod_gate, "step %s compares against production, but no "
				 "register step downstream of it names the model; %s",
				 cfg_sname(c, i), takes_model ?
				 "add \"model: NAME\" to this step" :
				 "compare in an evaluate step that has \"model: NAME\"");
		else
			err_node(c, st->prod_gate, "step %s compares against production, but the "
				 "register steps downstream of it register different models (%s); %s",
				 cfg_sname(c, i), found.p, takes_model ?
				 "add \"model: NAME\" to this step to say which" :
				 "compare in an evaluate step that has \"model: NAME\"");
		found.len = 0;
		json_decref(models);
	}
	free(found.p);
	when_models(c);
}

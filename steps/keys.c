/*
 * keys — the keys several step kinds share (model, dataset, on_timeout)
 * and the small value parsers every kind's keys use: booleans, choices,
 * strings and names, each reporting at file:line:col through the config
 * (plan/config_keys.h) and giving the key's default when it is absent.
 */
#include "steps/keys.h"

#include <stdlib.h>
#include <string.h>

#include "plan/config.h"

static const char *const on_timeout_values[] = {"fail", "continue"};

json_t *keys_bool(struct cfg_key_ctx *c, const yaml_node_t *n, const char *what)
{
	static const char *const words[] = {"false", "False", "FALSE", "true", "True", "TRUE"};
	size_t k, nw = sizeof(words) / sizeof(words[0]);

	if (!present(n))
		return json_false();
	if (n->type != YAML_SCALAR_NODE) {
		cfg_key_err(c, n, "%s must be true or false, not a %s", what, ntype(n));
		return json_false();
	}
	for (k = 0; k < nw && strcmp(sval(n), words[k]) != 0; k++)
		;
	if (k < nw && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
		return json_boolean(k >= 3);
	if (k < nw)
		cfg_key_err(c, n, "%s must be true or false, not the string %s; remove the quotes",
			    what, cfg_key_q(c, sval(n)));
	else
		cfg_key_err(c, n, "%s must be true or false, not %s", what, cfg_key_q(c, sval(n)));
	return json_false();
}

json_t *keys_choice(struct cfg_key_ctx *c, const yaml_node_t *n, const char *what,
		    const char *const *choices, size_t nchoices)
{
	char *list = NULL;
	const char *s;
	size_t k;

	if (!present(n) || (s = cfg_key_text(c, n, what)) == NULL)
		return json_string(choices[0]);
	for (k = 0; k < nchoices; k++)
		if (strcmp(s, choices[k]) == 0)
			return json_string(s);
	for (k = 0; k < nchoices; k++)
		cfg_key_addf(&list, "%s%s", k == 0 ? "" : k + 1 == nchoices ? " or " : ", ", choices[k]);
	cfg_key_err(c, n, "%s %s is not valid; use %s", what, cfg_key_q(c, s), list);
	free(list);
	return json_string(choices[0]);
}

json_t *keys_string(struct cfg_key_ctx *c, const yaml_node_t *n, const char *what, int templates)
{
	const char *s;

	if (!present(n) || (s = cfg_key_text(c, n, what)) == NULL)
		return json_null();
	if (s[strspn(s, " \t\r\n")] == '\0') {
		cfg_key_err(c, n, "%s must not be empty", what);
		return json_null();
	}
	if (templates)
		cfg_key_templates(c, n, s);
	return json_string(s);
}

json_t *keys_name(struct cfg_key_ctx *c, const yaml_node_t *n, const char *what)
{
	const char *s;

	if (!present(n) || (s = cfg_key_text(c, n, what)) == NULL)
		return json_null();
	if (!cfg_name_ok(s)) {
		cfg_key_err(c, n, "%s name %s is not valid; use 1-63 of a-z, 0-9, _, . and -, "
			    "starting with a letter or digit", what, cfg_key_q(c, s));
		return json_null();
	}
	return json_string(s);
}

/* model: a model's name; named (even wrongly), nothing is inferred for the step. */
int keys_model(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = keys_name(c, n, "model");
	if (present(n))
		cfg_key_model_named(c);
	return 0;
}

/* dataset: a directory or file (templates checked), or null. */
int keys_dataset(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = keys_string(c, n, "dataset", 1);
	return 0;
}

/* on_timeout: what a step that waited too long does, fail (the default) or continue. */
int keys_on_timeout(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = keys_choice(c, n, "on_timeout", on_timeout_values,
			   sizeof(on_timeout_values) / sizeof(on_timeout_values[0]));
	return 0;
}

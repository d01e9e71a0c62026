/*
 * config_params — parameters as data: the rules a parameter may declare
 * (type string, integer, number, boolean or enum with values; a POSIX
 * extended regex pattern; min and max) and the check of a value against
 * them, used for defaults when the workflow is parsed and for the values a
 * run is submitted with. How a value is written into a command, shell-quoted
 * inside a shell script, is the template language's (template.c).
 */
#include "plan/config_priv.h"

#include <errno.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const param_types[] = {"string", "integer", "number", "boolean", "enum"};

/* ---- declarations ------------------------------------------------------ */

static bool parse_int(const char *s, long long *out)
{
	char *end = NULL;

	if (*s == '\0' || strchr("+-0123456789", *s) == NULL)
		return false;
	errno = 0;
	*out = strtoll(s, &end, 10);
	return errno == 0 && *end == '\0';
}

static bool parse_num(const char *s, double *out)
{
	char *end = NULL;

	if (*s == '\0' || strspn(s, "+-.0123456789eE") != strlen(s))
		return false;
	errno = 0;
	*out = strtod(s, &end);
	return errno == 0 && *end == '\0' && isfinite(*out);
}

/* A bound as text for a message. */
static void bound_text(char *buf, size_t cap, const json_t *v)
{
	if (json_is_integer(v))
		snprintf(buf, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	else
		snprintf(buf, cap, "%g", json_number_value(v));
}

/* A min or max: an integer or a number; NULL after an error. */
static json_t *parse_bound(struct ctx *c, const char *name, const char *what, const yaml_node_t *n)
{
	const char *s = cfg_text(c, n, what);
	long long i;
	double d;

	if (s == NULL)
		return NULL;
	if (parse_int(s, &i))
		return json_integer((json_int_t)i);
	if (parse_num(s, &d))
		return json_real(d);
	err_node(c, n, "%s of parameter %s must be a number, not %s", what, cfg_q(c, name), cfg_q(c, s));
	return NULL;
}

int cfg_param_check(const json_t *p, const char *value, struct sbuf *why)
{
	const char *type = json_string_value(json_object_get(p, "type"));
	const char *pattern = json_string_value(json_object_get(p, "pattern"));
	const json_t *min = json_object_get(p, "min"), *max = json_object_get(p, "max"), *v;
	char qv[QBUF], bound[64];
	long long iv = 0;
	double dv = 0;
	size_t k;

	cfg_quote_to(qv, sizeof(qv), value, strlen(value));
	if (type == NULL || strcmp(type, "string") == 0) {
		regex_t re;
		regmatch_t m[1];
		int rc;

		if (pattern == NULL || regcomp(&re, pattern, REG_EXTENDED) != 0)
			return FERRY_OK;
		rc = regexec(&re, value, 1, m, 0);
		regfree(&re);
		if (rc == 0 && m[0].rm_so == 0 && (size_t)m[0].rm_eo == strlen(value))
			return FERRY_OK;
		cfg_sb_addf(why, "must match the pattern %s (the whole value), not %s", pattern, qv);
		return FERRY_EINVALID;
	}
	if (strcmp(type, "boolean") == 0) {
		if (strcmp(value, "true") == 0 || strcmp(value, "false") == 0)
			return FERRY_OK;
		cfg_sb_addf(why, "must be true or false, not %s", qv);
		return FERRY_EINVALID;
	}
	if (strcmp(type, "enum") == 0) {
		json_array_foreach(json_object_get(p, "values"), k, v)
			if (strcmp(json_string_value(v), value) == 0)
				return FERRY_OK;
		cfg_sb_adds(why, "must be one of ");
		json_array_foreach(json_object_get(p, "values"), k, v)
			cfg_sb_addf(why, "%s%s", k ? ", " : "", json_string_value(v));
		cfg_sb_addf(why, ", not %s", qv);
		return FERRY_EINVALID;
	}
	if (strcmp(type, "integer") == 0 ? !parse_int(value, &iv) : !parse_num(value, &dv)) {
		cfg_sb_addf(why, "must be %s, not %s",
			    strcmp(type, "integer") == 0 ? "an integer" : "a number", qv);
		return FERRY_EINVALID;
	}
	if (strcmp(type, "integer") == 0)
		dv = (double)iv;
	if (min != NULL && dv < json_number_value(min)) {
		bound_text(bound, sizeof(bound), min);
		cfg_sb_addf(why, "must be at least %s (min), not %s", bound, value);
		return FERRY_EINVALID;
	}
	if (max != NULL && dv > json_number_value(max)) {
		bound_text(bound, sizeof(bound), max);
		cfg_sb_addf(why, "must be at most %s (max), not %s", bound, value);
		return FERRY_EINVALID;
	}
	return FERRY_OK;
}

void cfg_param_decl(struct ctx *c, const char *name, const yaml_node_t *const *vals,
		    const yaml_node_t *def, json_t *p)
{
	const yaml_node_t *tn = vals[PK_TYPE], *vn = vals[PK_VALUES], *it;
	const char *type = NULL, *s;
	json_t *values = NULL, *min = NULL, *max = NULL;
	size_t nerrs = c->nerrs, k = 0, i;

	if (present(tn) && (type = cfg_text(c, tn, "a parameter type")) != NULL) {
		for (i = 0; i < NELEM(param_types) && strcmp(type, param_types[i]) != 0; i++)
			;
		if (i == NELEM(param_types)) {
			err_node(c, tn, "parameter %s has unknown type %s; use string, integer, "
				 "number, boolean or enum", cfg_q(c, name), cfg_q(c, type));
			type = NULL;
		}
	}
	if (present(vn)) {
		if (type == NULL && !present(tn))
			type = "enum";
		if (type != NULL && strcmp(type, "enum") != 0) {
			err_node(c, vn, "values of parameter %s need type: enum, not type: %s",
				 cfg_q(c, name), type);
		} else if (vn->type != YAML_SEQUENCE_NODE || nitems(vn) == 0) {
			err_node(c, vn, "values of parameter %s must be a non-empty list like "
				 "[small, large]", cfg_q(c, name));
		} else {
			values = json_array();
			while (cfg_next_item(c, vn, &k, &it))
				if ((s = cfg_text(c, it, "a parameter value")) != NULL)
					json_array_append_new(values, json_string(s));
		}
	} else if (type != NULL && strcmp(type, "enum") == 0) {
		err_node(c, tn, "parameter %s is an enum without values; list them: "
			 "values: [a, b]", cfg_q(c, name));
	}
	if (present(vals[PK_PATTERN]) &&
	    (s = cfg_text(c, vals[PK_PATTERN], "a parameter pattern")) != NULL) {
		regex_t re;
		char msg[256];
		int rc;

		if (type != NULL && strcmp(type, "string") != 0) {
			err_node(c, vals[PK_PATTERN], "pattern of parameter %s is only for type: string, "
				 "not type: %s", cfg_q(c, name), type);
		} else if ((rc = regcomp(&re, s, REG_EXTENDED | REG_NOSUB)) != 0) {
			regerror(rc, &re, msg, sizeof(msg));
			err_node(c, vals[PK_PATTERN], "pattern of parameter %s is not a valid POSIX "
				 "extended regular expression: %s", cfg_q(c, name), msg);
		} else {
			regfree(&re);
			json_object_set_new(p, "pattern", json_string(s));
		}
	}
	for (i = PK_MIN; i <= PK_MAX; i++) {
		const char *what = i == PK_MIN ? "min" : "max";
		json_t *b;

		if (!present(vals[i]))
			continue;
		if (type == NULL || (strcmp(type, "integer") != 0 && strcmp(type, "number") != 0)) {
			err_node(c, vals[i], "%s of parameter %s is only for type: integer or number; "
				 "add one", what, cfg_q(c, name));
			continue;
		}
		if ((b = parse_bound(c, name, what, vals[i])) != NULL)
			json_object_set_new(p, what, b);
	}
	min = json_object_get(p, "min");
	max = json_object_get(p, "max");
	if (min != NULL && max != NULL && json_number_value(min) > json_number_value(max))
		err_node(c, vals[PK_MAX], "parameter %s has max below min; swap them", cfg_q(c, name));
	if (type != NULL)
		json_object_set_new(p, "type", json_string(type));
	if (values != NULL)
		json_object_set_new(p, "values", values);
	/* the default must satisfy the declaration it sits in */
	s = json_string_value(json_object_get(p, "default"));
	if (s != NULL && c->nerrs == nerrs) {
		struct sbuf why = {0};

		if (cfg_param_check(p, s, &why) < 0)
			err_node(c, def, "default of parameter %s %s; change the default or the "
				 "declaration", cfg_q(c, name), why.p);
		free(why.p);
	}
}

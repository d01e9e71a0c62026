/*
 * foreach — the list of a fan-out (foreach.h): JSON arrays and text lines,
 * checked against the limits one fan-out may have.
 */
#include "plan/foreach.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "plan/template.h"

static int check_items(const json_t *arr, const char *what)
{
	size_t i, n = json_array_size(arr);
	const json_t *v;

	if (n == 0) {
		ferry_error_set("%s: the list is empty; a foreach needs at least one item", what);
		return FERRY_EINVALID;
	}
	if (n > FOREACH_MAX_ITEMS) {
		ferry_error_set("%s: %zu items; a foreach takes at most %d", what, n, FOREACH_MAX_ITEMS);
		return FERRY_EINVALID;
	}
	json_array_foreach(arr, i, v) {
		size_t sz = json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
		if (sz > FOREACH_MAX_ITEM_BYTES) {
			ferry_error_set("%s: item %zu is %zu bytes as JSON; an item may have at most %d (pass a "
					"path or a key instead of the data)", what, i, sz, FOREACH_MAX_ITEM_BYTES);
			return FERRY_EINVALID;
		}
		if (json_is_null(v)) {
			ferry_error_set("%s: item %zu is null", what, i);
			return FERRY_EINVALID;
		}
	}
	return FERRY_OK;
}

int foreach_parse_text(json_t **out, const char *text, size_t len, const char *what)
{
	size_t i = 0, start, end;
	json_t *arr;

	*out = NULL;
	if (len > FOREACH_MAX_TEXT) {
		ferry_error_set("%s: the list is %zu bytes; at most %u", what, len, FOREACH_MAX_TEXT);
		return FERRY_EINVALID;
	}
	while (i < len && isspace((unsigned char)text[i]))
		i++;
	if (i < len && text[i] == '[') {
		json_error_t jerr;
		arr = json_loadb(text, len, 0, &jerr);
		if (arr == NULL) {
			ferry_error_set("%s: not a JSON list: %s at line %d, column %d", what, jerr.text, jerr.line,
					jerr.column);
			return FERRY_EINVALID;
		}
		if (!json_is_array(arr)) {
			json_decref(arr);
			ferry_error_set("%s: not a JSON list", what);
			return FERRY_EINVALID;
		}
	} else {
		arr = json_array();
		for (i = 0; i < len; i = end + 1) {
			const char *nl = memchr(text + i, '\n', len - i);
			end = nl ? (size_t)(nl - text) : len;
			start = i;
			size_t e = end;
			while (e > start && isspace((unsigned char)text[e - 1]))
				e--;
			while (start < e && isspace((unsigned char)text[start]))
				start++;
			if (e == start)
				continue;
			if (memchr(text + start, '\0', e - start) != NULL) {
				ferry_error_set("%s: item %zu (a line) holds a NUL byte", what, json_array_size(arr) + 1);
				json_decref(arr);
				return FERRY_EINVALID;
			}
			if (json_array_size(arr) >= FOREACH_MAX_ITEMS) {
				json_decref(arr);
				ferry_error_set("%s: more than %d lines; a foreach takes at most %d items", what,
						FOREACH_MAX_ITEMS, FOREACH_MAX_ITEMS);
				return FERRY_EINVALID;
			}
			json_t *s = json_stringn(text + start, e - start);
			if (s == NULL) {
				ferry_error_set("%s: item %zu (a line) is not UTF-8", what, json_array_size(arr) + 1);
				json_decref(arr);
				return FERRY_EINVALID;
			}
			json_array_append_new(arr, s);
		}
	}
	if (check_items(arr, what) < 0) {
		json_decref(arr);
		return FERRY_EINVALID;
	}
	*out = arr;
	return FERRY_OK;
}

int foreach_items(json_t **out, const json_t *value, const char *what)
{
	*out = NULL;
	if (json_is_array(value)) {
		if (check_items(value, what) < 0)
			return FERRY_EINVALID;
		*out = json_copy((json_t *)value);
		return FERRY_OK;
	}
	if (json_is_string(value))
		return foreach_parse_text(out, json_string_value(value), json_string_length(value), what);
	ferry_error_set("%s: a foreach takes a list (a JSON array, or text with one item a line), not %s", what,
			json_is_object(value) ? "an object" : json_is_number(value) ? "a number"
			: json_is_boolean(value) ? "a boolean" : "null");
	return FERRY_EINVALID;
}

json_t *foreach_range(long n)
{
	json_t *arr = json_array();

	for (long i = 0; i < n && i < FOREACH_MAX_ITEMS; i++)
		json_array_append_new(arr, json_integer(i));
	return arr;
}

double foreach_min_success(const char *s)
{
	char *end;
	double v;

	if (s == NULL || *s == '\0' || isspace((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || !isfinite(v))
		return -1;
	if (*end == '%' && end[1] == '\0')
		v /= 100;
	else if (*end != '\0')
		return -1;
	return v > 0 && v <= 1 ? v : -1;
}

/* ---- sweeps ----------------------------------------------------------- */

/* splitmix64: a small, well-mixed generator; the same seed gives the same draws everywhere */
static uint64_t next_u64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* in [0, 1) */
static double next_unit(uint64_t *s)
{
	return (double)(next_u64(s) >> 11) * 0x1.0p-53;
}

/* v rounded to 6 significant digits: 0.031622776601683794 is written 0.0316228 */
static json_t *round6(double v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%.6g", v);
	return json_real(strtod(buf, NULL));
}

/* [a, b] of numbers, a <= b (and a > 0 when positive), or an error naming name and rule. */
static int range_of(const json_t *r, const char *name, const char *rule, int positive, double *a, double *b)
{
	if (!json_is_array(r) || json_array_size(r) != 2 || !json_is_number(json_array_get(r, 0)) ||
	    !json_is_number(json_array_get(r, 1))) {
		ferry_error_set("sweep param %s: %s takes [LOW, HIGH], two numbers", name, rule);
		return FERRY_EINVALID;
	}
	*a = json_number_value(json_array_get(r, 0));
	*b = json_number_value(json_array_get(r, 1));
	if (!(*a <= *b) || (positive && *a <= 0)) {
		ferry_error_set("sweep param %s: %s [%g, %g] must have LOW <= HIGH%s", name, rule, *a, *b,
				positive ? " and LOW above 0" : "");
		return FERRY_EINVALID;
	}
	return FERRY_OK;
}

/* One draw of param name by its rule. */
static json_t *draw(uint64_t *st, const char *name, const json_t *rule)
{
	double a, b, u = next_unit(st);

	if (json_is_array(rule)) {
		if (json_array_size(rule) == 0) {
			ferry_error_set("sweep param %s: the list of values is empty", name);
			return NULL;
		}
		return json_incref(json_array_get(rule, (size_t)(u * (double)json_array_size(rule))));
	}
	if (json_object_get(rule, "uniform")) {
		if (range_of(json_object_get(rule, "uniform"), name, "uniform", 0, &a, &b) < 0)
			return NULL;
		return round6(a + u * (b - a));
	}
	if (json_object_get(rule, "log_uniform")) {
		if (range_of(json_object_get(rule, "log_uniform"), name, "log_uniform", 1, &a, &b) < 0)
			return NULL;
		return round6(exp(log(a) + u * (log(b) - log(a))));
	}
	if (json_object_get(rule, "int")) {
		if (range_of(json_object_get(rule, "int"), name, "int", 0, &a, &b) < 0)
			return NULL;
		return json_integer((json_int_t)floor(ceil(a) + u * (floor(b) - ceil(a) + 1)));
	}
	ferry_error_set("sweep param %s: a list of values, {uniform: [LOW, HIGH]}, {log_uniform: [LOW, HIGH]} "
			"or {int: [LOW, HIGH]}", name);
	return NULL;
}

int sweep_items(json_t **out, const json_t *sweep)
{
	const json_t *grid = json_object_get(sweep, "grid"), *rnd = json_object_get(sweep, "random"), *v;
	json_t *items = json_array();
	const char *name;

	*out = NULL;
	if (grid != NULL) {
		size_t total = 1, n = json_object_size(grid), k = 0;
		const char **names = xcalloc(n + 1, sizeof(*names));
		const json_t **vals = xcalloc(n + 1, sizeof(*vals));

		json_object_foreach((json_t *)grid, name, v) {
			if (!json_is_array(v) || json_array_size(v) == 0) {
				ferry_error_set("sweep grid %s: a non-empty list of values", name);
				goto bad_grid;
			}
			if ((total *= json_array_size(v)) > FOREACH_MAX_ITEMS) {
				ferry_error_set("sweep grid: more than %d combinations", FOREACH_MAX_ITEMS);
				goto bad_grid;
			}
			names[k] = name;
			vals[k++] = v;
		}
		for (size_t i = 0; i < total; i++) {
			json_t *item = json_object();
			size_t rest = i;
			/* the last name varies fastest */
			for (size_t j = n; j-- > 0;) {
				size_t m = json_array_size(vals[j]);
				json_object_set(item, names[j], json_array_get(vals[j], rest % m));
				rest /= m;
			}
			json_array_append_new(items, item);
		}
		free(names);
		free(vals);
		*out = items;
		return FERRY_OK;
bad_grid:
		free(names);
		free(vals);
		json_decref(items);
		return FERRY_EINVALID;
	}
	if (rnd != NULL) {
		json_int_t n = json_integer_value(json_object_get(rnd, "n"));
		uint64_t st = (uint64_t)json_integer_value(json_object_get(rnd, "seed"));
		const json_t *params = json_object_get(rnd, "params");

		if (n < 1 || n > FOREACH_MAX_ITEMS) {
			ferry_error_set("sweep random n: from 1 to %d draws", FOREACH_MAX_ITEMS);
			json_decref(items);
			return FERRY_EINVALID;
		}
		for (json_int_t i = 0; i < n; i++) {
			json_t *item = json_object();
			json_object_foreach((json_t *)params, name, v) {
				json_t *d = draw(&st, name, v);
				if (d == NULL) {
					json_decref(item);
					json_decref(items);
					return FERRY_EINVALID;
				}
				json_object_set_new(item, name, d);
			}
			json_array_append_new(items, item);
		}
		*out = items;
		return FERRY_OK;
	}
	json_decref(items);
	ferry_error_set("a sweep has grid: or random:");
	return FERRY_EINVALID;
}

/* ---- a grid's values from a param --------------------------------------- */

/* One value as written: an integer, a finite number, true/false, else the text itself. */
static json_t *scalar_of(const char *t, size_t n)
{
	char *s = xstrndup(t, n), *end;
	int64_t i;
	double d;
	json_t *v;

	if (parse_int64(s, &i) == 0) {
		v = json_integer((json_int_t)i);
	} else if ((d = strtod(s, &end)), *end == '\0' && end != s && isfinite(d) &&
		   (isdigit((unsigned char)*s) || *s == '-' || *s == '+' || *s == '.')) {
		v = json_real(d);
	} else if (strcmp(s, "true") == 0 || strcmp(s, "false") == 0) {
		v = json_boolean(s[0] == 't');
	} else {
		v = json_stringn(t, n);
	}
	free(s);
	return v;
}

int sweep_param_values(json_t **out, const json_t *value, const char *what)
{
	json_t *arr = NULL;
	size_t i;
	json_t *v;

	*out = NULL;
	if (json_is_array(value)) {
		arr = json_copy((json_t *)value);
	} else if (json_is_number(value) || json_is_boolean(value)) {
		arr = json_pack("[O]", value);
	} else if (json_is_string(value)) {
		const char *t = json_string_value(value);
		size_t n = json_string_length(value);
		while (n > 0 && isspace((unsigned char)t[n - 1]))
			n--;
		while (n > 0 && isspace((unsigned char)*t))
			t++, n--;
		if (n == 0) {
			ferry_error_set("%s: empty; give one value (10) or a JSON list ([1, 10])", what);
			return FERRY_EINVALID;
		}
		if (*t == '[') {
			json_error_t jerr;
			arr = json_loadb(t, n, 0, &jerr);
			if (arr == NULL || !json_is_array(arr)) {
				ferry_error_set("%s: not a JSON list: %s at column %d", what,
						arr ? "not a list" : jerr.text, jerr.column);
				json_decref(arr);
				return FERRY_EINVALID;
			}
		} else {
			if (memchr(t, '\0', n) != NULL) {
				ferry_error_set("%s: holds a NUL byte", what);
				return FERRY_EINVALID;
			}
			arr = json_array();
			json_array_append_new(arr, scalar_of(t, n));
		}
	} else {
		ferry_error_set("%s: one value or a list of values, not %s", what,
				json_is_object(value) ? "an object" : "null");
		return FERRY_EINVALID;
	}
	if (json_array_size(arr) == 0) {
		ferry_error_set("%s: the list is empty; a grid dimension needs at least one value", what);
		json_decref(arr);
		return FERRY_EINVALID;
	}
	json_array_foreach(arr, i, v) {
		if (json_is_null(v) || json_is_array(v) || json_is_object(v)) {
			ferry_error_set("%s: value %zu is %s; a grid takes numbers, text or booleans", what, i,
					json_is_null(v) ? "null" : json_is_array(v) ? "a list" : "an object");
			json_decref(arr);
			return FERRY_EINVALID;
		}
	}
	*out = arr;
	return FERRY_OK;
}

int sweep_resolve(json_t **out, const json_t *sweep, const json_t *params)
{
	json_t *copy = json_deep_copy(sweep), *grid = json_object_get(copy, "grid"), *v;
	const char *name;

	*out = NULL;
	json_object_foreach(grid, name, v) {
		const char *s = json_string_value(v), *expr = NULL, *end = NULL;
		size_t elen = 0;
		struct tmpl_expr t = {TMPL_BAD, NULL, 0};
		json_t *vals;
		char *what, *pname;

		if (s == NULL)
			continue; /* a list: sweep_items checks it */
		if (tmpl_next(s, &expr, &elen, &end) == s && end != NULL && *end == '\0')
			t = tmpl_expr_parse(expr, elen);
		if (t.kind != TMPL_PARAM) {
			ferry_error_set("sweep grid %s: a list of values or \"{{params.NAME}}\", not \"%s\"", name, s);
			json_decref(copy);
			return FERRY_EINVALID;
		}
		pname = xstrndup(t.a, t.alen);
		what = xasprintf("sweep grid %s: params.%s", name, pname);
		if (json_object_get(params, pname) == NULL) {
			ferry_error_set("%s has no value", what);
			vals = NULL;
		} else {
			(void)sweep_param_values(&vals, json_object_get(params, pname), what);
		}
		free(what);
		free(pname);
		if (vals == NULL) {
			json_decref(copy);
			return FERRY_EINVALID;
		}
		json_object_set_new(grid, name, vals);
	}
	*out = copy;
	return FERRY_OK;
}

/*
 * foreach — the list of a fan-out (foreach.h): JSON arrays and text lines,
 * checked against the limits one fan-out may have.
 */
#include "plan/foreach.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

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
				json_decref(arr);
				ferry_error_set("%s: line %zu holds a NUL byte", what, json_array_size(arr) + 1);
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
				json_decref(arr);
				ferry_error_set("%s: line %zu is not UTF-8", what, json_array_size(arr) + 1);
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

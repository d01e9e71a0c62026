/*
 * logmask_json — logmask.h's JSON side (jansson): a masker from a step's
 * secrets as the daemon holds them ({"NAME": "value"}), and the values a
 * masker holds as a JSON array (the warm server's request). Apart from
 * logmask.c, which bin/ferry-shim links with nothing but libc.
 */
#include "exec/logmask.h"

#include <jansson.h>
#include <stdlib.h>

#include "lib/util.h"

struct logmask *logmask_new(const json_t *secrets)
{
	const char **values;
	const char *key;
	json_t *val;
	size_t n = 0;
	struct logmask *m;

	if (!json_is_object(secrets) || json_object_size(secrets) == 0)
		return NULL;
	values = xcalloc(json_object_size(secrets), sizeof(*values));
	json_object_foreach((json_t *)secrets, key, val) {
		if (json_string_value(val))
			values[n++] = json_string_value(val);
	}
	m = logmask_new_values(values, n);
	free(values);
	return m;
}

json_t *logmask_values(const struct logmask *m)
{
	json_t *out = json_array();

	for (size_t i = 0; i < logmask_count(m); i++) {
		size_t len;
		const char *v = logmask_value(m, i, &len);
		json_array_append_new(out, json_stringn(v, len));
	}
	return out;
}

/*
 * libFuzzer target for plan/foreach (a fan-out's list): the bytes are the
 * text of a list for foreach_parse_text (a JSON array, or lines); the
 * first byte also picks a sweep built from the parsed items (as a grid
 * value list and as random draws), so ASan/LSan/UBSan see the list parser,
 * its limits and the sweep generator. The same bytes are also a param's
 * value for a grid dimension (sweep_param_values: a JSON list or one value).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "plan/foreach.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *items = NULL, *sweep, *out = NULL;

	{
		json_t *text = json_stringn((const char *)data, size), *vals = NULL;
		if (text != NULL && sweep_param_values(&vals, text, "fuzz") == 0)
			json_decref(vals);
		json_decref(text);
	}
	if (foreach_parse_text(&items, (const char *)data, size, "fuzz") != 0)
		return 0;
	if (size > 0 && json_array_size(items) <= 64) {
		sweep = json_pack("{s:{s:O,s:[i,i]}}", "grid", "a", items, "b", 1, 2);
		if (sweep_items(&out, sweep) == 0)
			json_decref(out);
		json_decref(sweep);
		sweep = json_pack("{s:{s:i,s:i,s:{s:O,s:O}}}", "random", "n", (int)(data[0] % 16) + 1, "seed",
				  (int)data[0], "params", "x", items, "y", json_array_get(items, 0));
		if (sweep != NULL && sweep_items(&out, sweep) == 0)
			json_decref(out);
		json_decref(sweep);
	}
	json_decref(items);
	return 0;
}

/*
 * libFuzzer target for the workflow parser: any bytes go through
 * cfg_workflow_parse, and everything it returns is freed, so ASan/LSan/UBSan
 * see crashes, leaks and undefined behaviour. Valid specs are also dumped,
 * their params resolved with the defaults and their commands, dataset and
 * artifact rendered, to walk the JSON the parser built the way the engine will.
 */
#include <stdint.h>
#include <stdlib.h>

#include "plan/config.h"
#include "plan/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cfg_errors errs = {0};
	static const char *const paths[] = {"dataset", "artifact"};
	json_t *spec = NULL, *params = NULL, *step, *arg;
	char hash[65], *text;
	size_t i, j;

	if (cfg_workflow_parse(&spec, hash, (const char *)data, size, "fuzz.yaml", &errs) != 0)
		goto out;
	text = json_dumps(spec, JSON_COMPACT);
	free(text);
	if (cfg_params_resolve(&params, spec, NULL) != 0)
		goto out;
	json_array_foreach(json_object_get(spec, "steps"), i, step) {
		json_array_foreach(json_object_get(step, "command"), j, arg) {
			if (tmpl_render(&text, json_string_value(arg), params, "run-1") == 0)
				free(text);
			/* every argument through the shell-quoting scanner too */
			if (tmpl_render_shell(&text, json_string_value(arg), params, "run-1") == 0)
				free(text);
		}
		for (j = 0; j < sizeof(paths) / sizeof(paths[0]); j++) {
			arg = json_object_get(step, paths[j]);
			if (json_is_string(arg) &&
			    tmpl_render(&text, json_string_value(arg), params, "run-1") == 0)
				free(text);
		}
	}
out:
	json_decref(params);
	json_decref(spec);
	cfg_errors_dispose(&errs);
	return 0;
}

/*
 * libFuzzer target for orchestrator/gate: the bytes are a metrics.json for
 * metrics_parse and, split at the first newline, a gate entry "metric\nexpr"
 * for gate_parse. Whatever parses is evaluated (the metrics against a fixed
 * gate and themselves as production; the gate item against fixed metrics),
 * so ASan/LSan/UBSan see the whole path a job's output takes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"
#include "plan/gate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void eval(const json_t *gate, const json_t *metrics, const json_t *prod)
{
	json_t *res = NULL;
	char *reason = NULL;

	if (gate_eval(&res, &reason, gate, metrics, prod, "m 0.0.1") >= 0) {
		free(reason);
		json_decref(res);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *metrics = NULL, *gate = json_array(), *item = NULL, *fixed = NULL;
	const char *nl = memchr(data, '\n', size);
	char *metric = NULL, *expr = NULL;

	if (metrics_parse(&metrics, (const char *)data, size) == 0) {
		fixed = json_pack("[{s:s,s:s,s:f},{s:s,s:s,s:b,s:f}]", "metric", "accuracy", "op",
				  ">=", "value", 0.9, "metric", "f1", "op", "<", "production", 1,
				  "offset", -0.01);
		eval(fixed, metrics, metrics);
		eval(fixed, metrics, NULL);
	}
	if (nl != NULL) {
		metric = xstrndup((const char *)data, (size_t)(nl - (const char *)data));
		expr = xstrndup(nl + 1, size - (size_t)(nl + 1 - (const char *)data));
		if (gate_parse(&item, metric, expr) == 0) {
			json_array_append_new(gate, item);
			json_decref(fixed);
			fixed = json_pack("{s:f,s:f}", "accuracy", 0.5, "f1", 0.25);
			eval(gate, fixed, fixed);
			eval(gate, NULL, NULL);
		}
	}
	free(metric);
	free(expr);
	json_decref(fixed);
	json_decref(gate);
	json_decref(metrics);
	return 0;
}

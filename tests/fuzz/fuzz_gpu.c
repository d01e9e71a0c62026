/*
 * libFuzzer target for orchestrator/gpu and orchestrator/evidence's text
 * readers: the bytes are nvidia-smi's output as the sampler reads it (the
 * GPU query, then after a "#ferry-apps" line the compute apps), each part
 * given to its parser; the whole, as a process's stack text, to
 * evidence_summary (whose frame reader must stay in its 2 KiB bound).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "monitor/evidence.h"
#include "monitor/gpu.h"
#include "lib/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = xstrndup((const char *)data, size), *mark, *sum;
	struct gpu_reading *g = NULL;
	struct gpu_proc *p = NULL;
	json_t *stack, *ev;
	int n;

	mark = strstr(text, "#ferry-apps\n");
	if (mark)
		*mark = '\0';
	if (gpu_parse_query(text, &g, &n) == 0) {
		for (int i = 0; i < n; i++)
			if (g[i].util > 100 || g[i].uuid[63] != '\0')
				abort();
		free(g);
	}
	if (gpu_parse_apps(mark ? mark + 12 : text, &p, &n) == 0) {
		for (int i = 0; i < n; i++)
			if (p[i].pid <= 0)
				abort();
		free(p);
	}
	if (mark)
		*mark = '#';
	if ((stack = json_string(text)) != NULL) {
		ev = json_pack("{s:[{s:i,s:s,s:s,s:o}]}", "processes", "pid", 1, "comm", "x", "state", "S", "stack",
			       stack);
		sum = evidence_summary(ev);
		if (strlen(sum) > EVIDENCE_SUMMARY_MAX)
			abort();
		free(sum);
		json_decref(ev);
	}
	free(text);
	return 0;
}

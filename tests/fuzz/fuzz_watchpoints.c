/*
 * libFuzzer target for orchestrator/watchpoints: the bytes up to the first
 * newline are a rule for wp_rule_parse; one that parses is watched on
 * "loss" beside fixed rules of every kind (so watch_new must take it: a
 * rule the parser accepts and the watch refuses is a bug, and traps). The
 * rest is a metrics file: fed as lines through watch_feed, then written to
 * a memory file in two halves and followed (a partial line waiting for its
 * newline), taken to its end, and cut short (read again from the start).
 * Every JSON view is built and every fired rule taken, so ASan/LSan/UBSan
 * see the whole path a job's metrics file takes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lib/util.h"
#include "monitor/watchpoints.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void drain(struct watch *w)
{
	struct wp_fired f;
	json_t *j;

	while (watch_take_fired(w, &f) == 1)
		if (f.metric == NULL || f.rule == NULL || f.message == NULL)
			__builtin_trap();
	j = watch_series_json(w);
	json_decref(j);
	j = watch_results_json(w);
	json_decref(j);
	j = watch_stats_json(w);
	json_decref(j);
}

/* The metrics file: a memory file reached through /proc, reused by every input. */
static int memfile(char path[64])
{
	static int fd = -1;

	if (fd < 0) {
		fd = memfd_create("fuzz_watchpoints", MFD_CLOEXEC);
		if (fd < 0)
			return -1;
	}
	snprintf(path, 64, "/proc/self/fd/%d", fd);
	return ftruncate(fd, 0) == 0 ? fd : -1;
}

static void follow_file(const json_t *spec, const uint8_t *text, size_t n)
{
	struct watch *w = NULL;
	char path[64];
	int fd = memfile(path);

	if (fd < 0 || watch_new(&w, spec) != 0)
		return;
	if (pwrite(fd, text, n / 2, 0) == (ssize_t)(n / 2) && watch_follow(w, path) >= 0 &&
	    pwrite(fd, text + n / 2, n - n / 2, (off_t)(n / 2)) == (ssize_t)(n - n / 2)) {
		watch_follow(w, path);
		watch_follow_end(w, path);
		if (ftruncate(fd, (off_t)(n / 4)) == 0)
			watch_follow(w, path);
	}
	drain(w);
	watch_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	size_t rl = nl ? (size_t)(nl - data) : size;
	char *rule = xstrndup((const char *)data, rl);
	const uint8_t *rest = nl ? nl + 1 : data + size;
	size_t rn = size - (size_t)(rest - data);
	struct wp_rule r;
	struct watch *w = NULL;
	json_t *spec;

	spec = json_pack("{s:[{s:s,s:s},s,s,s,s,s],s:[s,{s:s,s:s}]}", "loss", "rule",
			 "nan_or_inf", "action", "fail", "not decreasing over 3 steps",
			 "> 10 * min", "< 0.5 * max", ">= 2 * first", "<= -1", "acc",
			 "not increasing over 2 steps", "rule", "> 0.9", "action", "restart");
	if (wp_rule_parse(rule, &r) == 0) {
		json_array_append_new(json_object_get(spec, "loss"), json_string(rule));
		if (json_array_size(json_object_get(spec, "loss")) != 7)
			__builtin_trap(); /* the parser took a rule that is not UTF-8 text */
	}
	if (watch_new(&w, spec) != 0)
		__builtin_trap();
	watch_feed(w, (const char *)rest, rn);
	drain(w);
	watch_free(w);
	follow_file(spec, rest, rn);
	json_decref(spec);
	free(rule);
	return 0;
}

/*
 * bench_fingerprint — what a data cache hit costs: the fingerprint of a
 * dataset (files of random bytes in nested directories under /tmp) read
 * byte by byte the first time, then answered from the stat memo while
 * nothing changed. Prints one JSON line:
 *   read_ms, read_mb_per_sec   the first fingerprint (every byte hashed)
 *   memo_ms                    the median of 20 later ones (metadata only)
 *
 *   bench_fingerprint [--mb N] [--files N]
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "lib/metrics.h"
#include "lib/fingerprint.h"
#include "lib/util.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"mb", required_argument, NULL, 'm'},
		{"files", required_argument, NULL, 'f'},
		{0},
	};
	char tmpl[] = "/tmp/ferry-bench-fp-XXXXXX", *dir = mkdtemp(tmpl), out[65], *cmd;
	int64_t mb = 256, files = 2000;
	size_t each;
	unsigned char *buf;
	double memo[20], read_ms;
	int64_t t0;
	int ch;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1)
		if ((ch == 'm' && (parse_int64(optarg, &mb) < 0 || mb < 1)) ||
		    (ch == 'f' && (parse_int64(optarg, &files) < 0 || files < 1)) || ch == '?') {
			fprintf(stderr, "usage: bench_fingerprint [--mb N] [--files N]\n");
			return 2;
		}
	if (dir == NULL)
		return 1;
	each = (size_t)(mb << 20) / (size_t)files;
	buf = xmalloc(each + 1);
	for (int64_t i = 0; i < files; i++) {
		char *sub = xasprintf("%s/part-%02lld", dir, (long long)(i % 16));
		char *path = xasprintf("%s/%06lld.bin", sub, (long long)i);
		FILE *f;
		size_t got = 0;
		mkdir_p(sub, 0755);
		while (got < each) {
			ssize_t n = getrandom(buf + got, each - got, 0);
			if (n > 0)
				got += (size_t)n;
		}
		if ((f = fopen(path, "wb")) == NULL || fwrite(buf, 1, each, f) != each || fclose(f) != 0)
			return 1;
		free(sub), free(path);
	}
	free(buf);
	sleep(3); /* past the memo's racy window */
	/* the bytes are in the page cache: this measures hashing, not the disk */
	t0 = clock_mono_us();
	if (fingerprint_path(out, dir) < 0)
		return 1;
	read_ms = (double)(clock_mono_us() - t0) / 1000.0;
	for (int i = 0; i < 20; i++) {
		t0 = clock_mono_us();
		if (fingerprint_path(out, dir) < 0)
			return 1;
		memo[i] = (double)(clock_mono_us() - t0) / 1000.0;
	}
	qsort(memo, 20, sizeof(double), cmp_double);
	printf("{\"bench\":\"fingerprint\",\"mb\":%lld,\"files\":%lld,\"read_ms\":%.1f,\"read_mb_per_sec\":%.0f,"
	       "\"memo_ms\":%.2f,\"memo_hits\":%llu}\n",
	       (long long)mb, (long long)files, read_ms, (double)mb / (read_ms / 1000.0), memo[10],
	       (unsigned long long)metrics_get(M_FP_MEMO_HITS));
	cmd = xasprintf("rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench_fingerprint: could not remove %s\n", dir);
	free(cmd);
	return 0;
}

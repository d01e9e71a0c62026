/*
 * bench_haproxy — what a traffic change costs (orchestrator/deploy/haproxy.c):
 * a real haproxy with one deployment of two servers, the weight moved
 * between them N times. Prints one JSON line:
 *   weight_apply_ms   median time from hap_apply to hap_read reporting the
 *                     new weights (run-time commands, files rewritten)
 *   weight_apply_p99_ms
 *   reload_ms         median of hap_reload (haproxy -c, then the new worker answers)
 *   start_ms          the first hap_apply (haproxy started)
 *
 *   bench_haproxy [--changes N]
 */
#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "deploy/haproxy.h"
#include "lib/util.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* A loopback port nothing listens on now (the kernel's choice). */
static int free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* Whether haproxy reports weights a and b for the two servers. */
static int has_weights(struct hap *h, int a, int b)
{
	json_t *servers = NULL;
	int ok;

	if (hap_read(h, &servers) < 0)
		return 0;
	ok = json_array_size(servers) == 2 &&
	     json_integer_value(json_object_get(json_array_get(servers, 0), "weight")) == a &&
	     json_integer_value(json_object_get(json_array_get(servers, 1), "weight")) == b;
	json_decref(servers);
	return ok;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {{"changes", required_argument, NULL, 'n'}, {0}};
	char tmpl[] = "/tmp/ferry-bench-hap-XXXXXX", *dir, *cmd;
	struct hap_server s[2] = {{"v1-r1", "127.0.0.1", 1, 100, 0}, {"v2-r1", "127.0.0.1", 2, 0, 0}};
	struct hap_frontend fe = {.name = "bench", .servers = s, .nservers = 2};
	int64_t changes = 200, t0;
	double *apply, reload[5], start_ms;
	struct hap *h = NULL;
	int ch, rc = 1;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1)
		if ((ch == 'n' && (parse_int64(optarg, &changes) < 0 || changes < 1)) || ch == '?') {
			fprintf(stderr, "usage: bench_haproxy [--changes N]\n");
			return 2;
		}
	if (mkdtemp(tmpl) == NULL)
		return 1;
	/* like ferryd, a subreaper: haproxy's daemonised master is ours to reap */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	dir = xasprintf("%s/haproxy", tmpl);
	/* the servers need not listen: haproxy is not asked to check them */
	fe.port = free_port();
	s[0].port = free_port(), s[1].port = free_port();
	apply = xcalloc((size_t)changes, sizeof(double));
	if (hap_open(&h, dir) < 0)
		goto out;
	t0 = clock_mono_us();
	if (hap_apply(h, &fe, 1, NULL) < 0)
		goto out;
	start_ms = (double)(clock_mono_us() - t0) / 1000.0;
	for (int64_t i = 0; i < changes; i++) {
		s[0].weight = i % 2 ? 100 : 0;
		s[1].weight = 100 - s[0].weight;
		t0 = clock_mono_us();
		if (hap_apply(h, &fe, 1, NULL) < 0)
			goto out;
		while (!has_weights(h, s[0].weight, s[1].weight))
			if (clock_mono_us() - t0 > 5000000) {
				ferry_error_set("haproxy did not report the new weights within 5 s");
				goto out;
			}
		apply[i] = (double)(clock_mono_us() - t0) / 1000.0;
	}
	for (int i = 0; i < 5; i++) {
		t0 = clock_mono_us();
		if (hap_reload(h) < 0)
			goto out;
		reload[i] = (double)(clock_mono_us() - t0) / 1000.0;
	}
	qsort(apply, (size_t)changes, sizeof(double), cmp_double);
	qsort(reload, 5, sizeof(double), cmp_double);
	printf("{\"bench\":\"haproxy\",\"changes\":%lld,\"weight_apply_ms\":%.2f,\"weight_apply_p99_ms\":%.2f,"
	       "\"reload_ms\":%.1f,\"start_ms\":%.1f}\n",
	       (long long)changes, apply[changes / 2], apply[(changes * 99) / 100], reload[2], start_ms);
	rc = 0;
out:
	if (rc != 0)
		fprintf(stderr, "bench_haproxy: %s\n", ferry_error_last());
	if (h)
		hap_stop(h);
	hap_close(h);
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	cmd = xasprintf("rm -rf %s", tmpl);
	if (system(cmd) != 0)
		rc = 1;
	free(cmd), free(dir), free(apply);
	return rc;
}

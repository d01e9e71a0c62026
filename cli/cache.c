/*
 * ferry cache — the data cache of `cache` steps as GET /api/v1/cache reports
 * it: one line per entry (host, fingerprint, size, hits, last use, the runs
 * holding it), then the totals; -o json prints the answer as is.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

enum { OPT_HOST = 512 };

/* "1.5 MB", "12 KB", "800 B" */
static void fmt_bytes(char *buf, size_t n, json_int_t b)
{
	if (b >= 1024 * 1024 * 1024)
		snprintf(buf, n, "%.1f GB", (double)b / (1024.0 * 1024 * 1024));
	else if (b >= 1024 * 1024)
		snprintf(buf, n, "%.1f MB", (double)b / (1024.0 * 1024));
	else if (b >= 1024)
		snprintf(buf, n, "%.1f KB", (double)b / 1024.0);
	else
		snprintf(buf, n, "%lld B", (long long)b);
}

static void print_cache(const json_t *answer)
{
	const json_t *entries = json_object_get(answer, "entries"), *st = json_object_get(answer, "stats");
	const json_t *e, *ratio = json_object_get(st, "hit_ratio");
	struct table t;
	char size[32], hits[24], total[32];
	size_t i;

	if (json_array_size(entries) == 0) {
		fprintf(stderr, "no cache entries\n");
	} else {
		static const char *const head[] = {"HOST", "FINGERPRINT", "SIZE", "HITS", "LAST USED", "IN USE BY"};
		table_init(&t, 6);
		table_add(&t, head);
		json_array_foreach(entries, i, e) {
			const json_t *s, *sessions = json_object_get(e, "sessions");
			char *users = xstrdup(""), fp[16];
			size_t k;
			json_array_foreach(sessions, k, s) {
				char *u = xasprintf("%s%srun %lld %s", users, k ? ", " : "",
						    (long long)jint(s, "run", 0), jstr(s, "step", "?"));
				free(users);
				users = u;
			}
			snprintf(fp, sizeof(fp), "%.12s", jstr(e, "fingerprint", "?"));
			fmt_bytes(size, sizeof(size), jint(e, "bytes", 0));
			snprintf(hits, sizeof(hits), "%lld", (long long)jint(e, "hits", 0));
			const char *row[] = {jstr(e, "host", "?"), fp, size, hits, jstr(e, "last_used_at", "?"),
					     users[0] ? users : "-"};
			table_add(&t, row);
			free(users);
		}
		table_print(&t, stdout, "");
		table_dispose(&t);
	}
	fmt_bytes(total, sizeof(total), jint(st, "bytes", 0));
	printf("%lld %s, %s; %lld hits, %lld misses", (long long)jint(st, "entries", 0),
	       jint(st, "entries", 0) == 1 ? "entry" : "entries", total,
	       (long long)jint(st, "hits", 0), (long long)jint(st, "misses", 0));
	if (json_is_number(ratio))
		printf(" (hit ratio %.2f)", json_number_value(ratio));
	printf("; %lld evictions; %lld open sessions\n", (long long)jint(st, "evictions", 0),
	       (long long)jint(st, "open_sessions", 0));
	fflush(stdout);
}

int cmd_cache(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"host", required_argument, NULL, OPT_HOST},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	ferry_client *c = NULL;
	json_t *answer = NULL;
	char *path = NULL, *esc = NULL;
	const char *host = NULL;
	bool json = false;
	int ch, rc, status = FX_USAGE;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_HOST:
			host = optarg;
			break;
		case 'o':
			if (parse_output(x, optarg, &json) != 0)
				goto out;
			break;
		case 'h':
			status = print_help(x->cmd);
			goto out;
		default:
			status = option_error(x, ch, argv);
			goto out;
		}
	}
	if (argc > optind) {
		status = usage_error(x, "unexpected argument '%s'", argv[optind]);
		goto out;
	}
	if ((status = open_client(&c)) != FX_OK)
		goto out;
	esc = host ? client_escape(host) : NULL;
	path = esc ? xasprintf("/cache?host=%s", esc) : xstrdup("/cache");
	rc = client_request(&answer, c, "GET", path, NULL);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	if (json)
		print_json(answer);
	else
		print_cache(answer);
out:
	free(path);
	free(esc);
	json_decref(answer);
	client_free(c);
	return status;
}

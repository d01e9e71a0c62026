/*
 * cli — the pieces the verbs of the ferry command share: exit statuses, the
 * verb table entry, option and error helpers, and the verbs that live in
 * files of their own. A new verb is a cmd_* function (in ferry.c or its own
 * file, declared here) plus one row of the table in ferry.c.
 */
#ifndef FERRY_CLI_H
#define FERRY_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/client.h"
#include "cli/format.h"
#include "lib/util.h"

/* Exit statuses: success, the run (or the daemon) failed, usage or validation error. */
enum { FX_OK = 0, FX_FAIL = 1, FX_USAGE = 2 };

/* Long-only option values. */
enum { OPT_WORKFLOW = 256, OPT_STATE, OPT_LIMIT, OPT_FROM, OPT_ATTEMPT, OPT_DATA, OPT_NO_CACHE,
       OPT_REPO, OPT_REF, OPT_PATH, OPT_TRIGGER, OPT_DEV };

#define WATCH_POLL_MS 200
#define WATCH_RECONNECT_MS 30000

struct command;

/* What a verb gets: the output settings and its own table entry. */
struct ctx {
	const struct cli *cli;
	const struct command *cmd;
};

/* One verb: its name, a one-line summary, its synopsis and help, and what runs it. */
struct command {
	const char *name;
	const char *summary;
	const char *synopsis;
	const char *help; /* options and an example, after the synopsis */
	int (*run)(const struct ctx *x, int argc, char **argv);
};

/* The verb named name in the table of ferry.c, or NULL. */
const struct command *find_command(const char *name);

/* Prints "ferry VERB: message", the synopsis and a hint to stderr; returns FX_USAGE. */
int usage_error(const struct ctx *x, const char *fmt, ...) FERRY_PRINTF(2, 3);

/* Prints the synopsis, summary and help of cmd to stdout; returns FX_OK. */
int print_help(const struct command *cmd);

/* Reports a getopt failure (optstring starts with ':'). */
int option_error(const struct ctx *x, int ch, char **argv);

/* -o json|text into *json; else a usage error. */
int parse_output(const struct ctx *x, const char *arg, bool *json);
/*
 * Parses a verb's options when they are only -o FORMAT (json not NULL) and
 * -h; optind is then the first operand. -1 to go on, else the exit status
 * to return now.
 */
int parse_output_args(const struct ctx *x, int argc, char **argv, bool *json);

/* Accepts "12" (a positive integer); anything else is a usage error. */
int parse_run_id(const struct ctx *x, const char *s, int64_t *id);

/* The single RUN operand left after the options: -1 to go on, else an exit status. */
int parse_run_operand(const struct ctx *x, int argc, char **argv, int64_t *id);

/*
 * Parses the arguments of a verb that takes "RUN" plus -o FORMAT when json is
 * not NULL. Returns -1 to go on, else the exit status to return now.
 */
int parse_run_args(const struct ctx *x, int argc, char **argv, int64_t *id, bool *json);

/* Prints the failure of the last request; returns the exit status for it. */
int report_request_error(const ferry_client *c, int rc);

/* Opens the API client (*out is the caller's, client_free), or reports why not: FX_FAIL. */
int open_client(ferry_client **out);

/* The directory holding path, absolute and with links resolved; the caller frees it. NULL
 * when path cannot be resolved. (ferry.c) */
char *abs_dir_of(const char *path);

/* Sleeps ms milliseconds, through signals. */
void sleep_ms(int64_t ms);

/*
 * Polls run id until it is final, showing progress (lines, or the live view
 * on a terminal; nothing with json, which prints the final run object).
 * Returns 0 when the run succeeded, 1 otherwise. (watch.c)
 */
int watch_run(const struct cli *cli, ferry_client *c, int64_t id, bool json);

/* Verbs in files of their own. */
int cmd_watch(const struct ctx *x, int argc, char **argv); /* watch.c */
int cmd_logs(const struct ctx *x, int argc, char **argv);  /* logs.c */
int cmd_models(const struct ctx *x, int argc, char **argv); /* models.c */
int cmd_deployments(const struct ctx *x, int argc, char **argv); /* deployments.c */
int cmd_schedules(const struct ctx *x, int argc, char **argv);   /* schedules.c */
int cmd_triggers(const struct ctx *x, int argc, char **argv);    /* schedules.c */
int cmd_secrets(const struct ctx *x, int argc, char **argv);     /* secrets.c */
int cmd_cache(const struct ctx *x, int argc, char **argv); /* cache.c */
int cmd_hosts(const struct ctx *x, int argc, char **argv); /* hosts.c */
int cmd_queues(const struct ctx *x, int argc, char **argv); /* queues.c */
int cmd_events(const struct ctx *x, int argc, char **argv); /* events.c */
int cmd_audit(const struct ctx *x, int argc, char **argv);  /* events.c */
int cmd_monitor(const struct ctx *x, int argc, char **argv); /* monitor.c */
/* monitor.c: a step's monitor document in a few lines (state, utilization, metric charts, watchpoints). */
void monitor_print_brief(const json_t *doc);
int cmd_workflow(const struct ctx *x, int argc, char **argv); /* workflow.c */
int cmd_get(const struct ctx *x, int argc, char **argv);  /* runs.c */
int cmd_list(const struct ctx *x, int argc, char **argv); /* runs.c */

/*
 * A verb that takes "RUN" (and -o): METHOD /runs/{id}. Returns -1 with
 * *answer (the caller's) to go on, else the exit status to return now
 * (usage, or the request's error reported). (runs.c)
 */
int run_request(const struct ctx *x, int argc, char **argv, const char *method, json_t **answer,
		int64_t *id, bool *json);

#endif

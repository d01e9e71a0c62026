/*
 * watch — `ferry watch RUN`, and the --watch of submit and retry: polls the
 * run every WATCH_POLL_MS until it is final; on a terminal it redraws a table
 * of steps in place, otherwise it prints one line per step state change.
 * A daemon that goes away for less than WATCH_RECONNECT_MS is waited for.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

/* ---- watch ---- */

/* When a step entered its current state, best known; else now. */
static int64_t step_event_ms(const json_t *step, int64_t now)
{
	const json_t *att = last_attempt(step);
	const json_t *src = att != NULL ? att : step;
	const char *state = jstr(step, "state", "");
	int64_t t;

	if (strcmp(state, "running") == 0 && jtime(src, "started_at", &t))
		return t;
	if ((strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
	     strcmp(state, "stopped") == 0 || strcmp(state, "skipped") == 0) &&
	    (jtime(step, "finished_at", &t) || jtime(src, "finished_at", &t)))
		return t;
	return now;
}

/*
 * "attempt 2, exit 1" or "attempt 2, REASON" (the reason, when there is one,
 * says more than the exit status); for a step waiting for a person, how to
 * continue it; "" when there is nothing to say.
 */
static void step_change_detail(char *buf, size_t n, const json_t *run, const json_t *step)
{
	const char *state = jstr(step, "state", "");
	json_int_t attempts = jint(step, "attempts", 0);
	const json_t *code = json_object_get(step, "exit_code");
	const json_t *sig = json_object_get(last_attempt(step), "signal");
	const char *reason = jstr(step, "reason", NULL);
	bool ended = strcmp(state, "failed") == 0 || strcmp(state, "stopped") == 0 ||
		     strcmp(state, "ready") == 0; /* ready again: waiting to retry */
	size_t len = 0;

	buf[0] = '\0';
	if (strcmp(state, "waiting") == 0) {
		step_waiting_hint(buf, n, run, step);
		return;
	}
	if (attempts > 0 && strcmp(state, "blocked") != 0 && strcmp(state, "skipped") != 0)
		len += (size_t)snprintf(buf, n, "attempt %" JSON_INTEGER_FORMAT, attempts);
	if (len >= n)
		return;
	if (reason != NULL && *reason != '\0')
		snprintf(buf + len, n - len, "%s%s", len ? ", " : "", reason);
	else if (ended && json_is_integer(sig))
		snprintf(buf + len, n - len, "%ssignal %" JSON_INTEGER_FORMAT,
			 len ? ", " : "", json_integer_value(sig));
	else if (ended && json_is_integer(code))
		snprintf(buf + len, n - len, "%sexit %" JSON_INTEGER_FORMAT,
			 len ? ", " : "", json_integer_value(code));
}

/*
 * Line mode: prints one line per step whose state or attempt changed since
 * the last poll. seen maps step name -> "state#attempts" printed so far.
 */
static void watch_print_changes(const json_t *run, json_t *seen, int64_t now)
{
	const json_t *steps = json_object_get(run, "steps"), *step;
	size_t i, name_w = 4;

	json_array_foreach(steps, i, step) {
		size_t w = display_width(jstr(step, "name", "?"));
		if (w > name_w)
			name_w = w;
	}
	json_array_foreach(steps, i, step) {
		const char *name = jstr(step, "name", "?");
		const char *state = jstr(step, "state", "?");
		const char *prev = json_string_value(json_object_get(seen, name));
		char *key = xasprintf("%s#%" JSON_INTEGER_FORMAT, state, jint(step, "attempts", 0));
		char when[32], detail[1024];

		if (prev != NULL && strcmp(prev, key) == 0)
			goto next;
		json_object_set_new(seen, name, json_string(key));
		if (prev == NULL && strcmp(state, "blocked") == 0)
			goto next; /* the initial state is not news */
		fmt_local(when, sizeof(when), step_event_ms(step, now), false);
		step_change_detail(detail, sizeof(detail), run, step);
		if (detail[0] != '\0')
			printf("%s  %s%*s  %-9s  (%s)\n", when, name,
			       (int)(name_w - display_width(name)), "", state, detail);
		else
			printf("%s  %s%*s  %s\n", when, name,
			       (int)(name_w - display_width(name)), "", state);
next:
		free(key);
	}
}

/* "run 12 succeeded in 3.2s" (plus the reason when there is one). */
static void print_run_outcome(const json_t *run, int64_t now)
{
	char id[32], dur[32];
	const char *reason = jstr(run, "reason", NULL);
	int64_t start, end;

	id_text(id, sizeof(id), run);
	printf("run %s %s", id, jstr(run, "state", "?"));
	if ((jtime(run, "started_at", &start) || jtime(run, "created_at", &start))) {
		if (!jtime(run, "finished_at", &end))
			end = now;
		fmt_duration(dur, sizeof(dur), end - start);
		printf(" in %s", dur);
	}
	if (reason != NULL && *reason != '\0')
		printf(": %s", reason);
	fputc('\n', stdout);
}

/* The compact live view: a header line and the step table. */
static void watch_render_frame(FILE *f, const struct cli *cli, const json_t *run, int64_t now)
{
	struct table t;
	char id[32], dur[32];

	id_text(id, sizeof(id), run);
	fmt_span(dur, sizeof(dur), run, now);
	fprintf(f, "run %s  %s  %s  %s\n", id, jstr(run, "workflow", "?"),
		run_display_state(run), dur);
	table_init(&t, 5);
	table_add_steps(&t, cli, run, now);
	table_print(&t, f, "  ");
	table_dispose(&t);
}

/*
 * TTY mode: redraws the frame in place when it changed. *prev holds the
 * last frame drawn (owned), *prev_lines its height.
 */
static void watch_redraw(const struct cli *cli, const json_t *run, int64_t now,
			 char **prev, size_t *prev_lines)
{
	char *frame = NULL;
	size_t size = 0, lines = 0;
	FILE *f = open_memstream(&frame, &size);

	if (f == NULL)
		return;
	watch_render_frame(f, cli, run, now);
	fclose(f);
	if (*prev != NULL && strcmp(*prev, frame) == 0) {
		free(frame);
		return;
	}
	for (const char *p = frame; *p; p++)
		if (*p == '\n')
			lines++;
	if (*prev_lines > 0)
		printf("\033[%zuA\r\033[J", *prev_lines);
	fputs(frame, stdout);
	free(*prev);
	*prev = frame;
	*prev_lines = lines;
}

/*
 * Polls run id until it is final, showing progress (lines, or the live view
 * on a terminal; nothing with json, which prints the final run object).
 * Returns 0 when the run succeeded, 1 otherwise.
 */
int watch_run(const struct cli *cli, ferry_client *c, int64_t id, bool json)
{
	char *path = xasprintf("/runs/%" PRId64, id);
	json_t *seen = json_object(), *run = NULL;
	char *frame = NULL;
	size_t frame_lines = 0;
	int64_t lost_since = 0;
	bool ever_ok = false;
	const char *state = "";
	int rc, status = FX_FAIL;

	for (;;) {
		json_decref(run);
		run = NULL;
		rc = client_request(&run, c, "GET", path, NULL);
		if (rc < 0 && ever_ok && client_last_status(c) == 0) {
			int64_t now = clock_mono_ms();
			if (lost_since == 0) {
				lost_since = now;
				fprintf(stderr, "ferry: %s\nferry: retrying for %ds\n",
					ferry_error_last(), WATCH_RECONNECT_MS / 1000);
			}
			if (now - lost_since < WATCH_RECONNECT_MS) {
				sleep_ms(WATCH_POLL_MS * 5);
				client_refresh_url(c); /* restarted on another port? */
				continue;
			}
		}
		if (rc < 0) {
			status = report_request_error(c, rc);
			goto out;
		}
		if (!json_is_object(run)) {
			fprintf(stderr, "ferry: ferryd sent something other than a run for %s\n", path);
			goto out;
		}
		if (lost_since != 0)
			fprintf(stderr, "ferry: reconnected to %s\n", client_url(c));
		lost_since = 0;
		ever_ok = true;
		state = jstr(run, "state", "");
		if (!json && cli->tty)
			watch_redraw(cli, run, clock_wall_ms(), &frame, &frame_lines);
		else if (!json)
			watch_print_changes(run, seen, clock_wall_ms());
		fflush(stdout);
		if (run_state_final(state))
			break;
		sleep_ms(WATCH_POLL_MS);
	}
	if (json)
		print_json(run);
	else
		print_run_outcome(run, clock_wall_ms());
	status = strcmp(state, "succeeded") == 0 ? FX_OK : FX_FAIL;
out:
	fflush(stdout);
	free(frame);
	free(path);
	json_decref(seen);
	json_decref(run);
	return status;
}

int cmd_watch(const struct ctx *x, int argc, char **argv)
{
	ferry_client *c = NULL;
	int64_t id;
	int status;

	if ((status = parse_run_args(x, argc, argv, &id, NULL)) >= 0)
		return status;
	if ((status = open_client(&c)) != FX_OK)
		return status;
	status = watch_run(x->cli, c, id, false);
	client_free(c);
	return status;
}


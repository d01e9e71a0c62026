/*
 * format — how the CLI shows runs to people, shared by every verb so all
 * output looks alike: small JSON accessors, timestamps as local times and
 * durations, state markers (UTF-8 symbols or ASCII), and aligned tables.
 */
#ifndef FERRY_CLI_FORMAT_H
#define FERRY_CLI_FORMAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* How output should look, decided once from the environment. */
struct cli {
	bool utf8; /* LC_ALL/LC_CTYPE/LANG name a UTF-8 locale */
	bool tty;  /* stdout is a terminal that understands ANSI */
};

/* obj[key] as a string or integer, or dflt when absent or of another type. */
const char *jstr(const json_t *o, const char *key, const char *dflt);
json_int_t jint(const json_t *o, const char *key, json_int_t dflt);

/* Writes the run id of obj (an integer, or a string) into buf. */
void id_text(char *buf, size_t n, const json_t *obj);

/* Prints v to stdout, indented, with a newline (-o json). */
void print_json(const json_t *v);

/* Reads the timestamp obj[key]; returns false when null, absent or malformed. */
bool jtime(const json_t *obj, const char *key, int64_t *out);

/* "0.3s", "59.9s", "2m05s", "1h02m". */
void fmt_duration(char *buf, size_t n, int64_t ms);

/* Local time of a wall-clock instant: "HH:MM:SS" or "YYYY-MM-DD HH:MM:SS". */
void fmt_local(char *buf, size_t n, int64_t ms, bool with_date);

/* How long obj (a run or step) ran: finished - started, or now - started; "-" before it started. */
void fmt_span(char *buf, size_t n, const json_t *obj, int64_t now);

/* succeeded, failed or stopped / one of the run states at all. */
bool run_state_final(const char *state);
bool run_state_known(const char *state);

/* The marker shown before a step or run in state (UTF-8 or ASCII per cli). */
const char *state_marker(const struct cli *cli, const char *state);

/* The dash that stands for "none" in tables. */
const char *dash(const struct cli *cli);

/* The last element of step["attempt_list"], or NULL. */
const json_t *last_attempt(const json_t *step);

/* Terminal columns taken by a UTF-8 string (one per code point). */
size_t display_width(const char *s);

/* A table of strings printed with aligned columns; table_dispose frees the cells. */
struct table {
	size_t ncols, nrows;
	char **cells; /* row-major, each owned */
};

void table_init(struct table *t, size_t ncols);

/* Appends a row of t->ncols cells (NULL means empty); copies them. */
void table_add(struct table *t, const char *const *row);

/* Prints t with columns two spaces apart and no trailing blanks. */
void table_print(const struct table *t, FILE *f, const char *indent);

void table_dispose(struct table *t);

/*
 * One row per step of run: "marker name", state, attempts, duration, why
 * (for a step waiting for a person, the command that continues it).
 */
void table_add_steps(struct table *t, const struct cli *cli, const json_t *run, int64_t now);

/*
 * The state to show for run: "waiting" while it runs but cannot go on until
 * a person continues a step (run["waiting"] is not empty), else its state.
 */
const char *run_display_state(const json_t *run);

/*
 * For a step of run in state waiting, what a person does: "continue: ferry
 * continue RUN STEP", after the labelling task of a label step ("labelling
 * task: 3 of 5 items in DIR have no label in FILE; "). "" for other steps.
 */
void step_waiting_hint(char *buf, size_t n, const json_t *run, const json_t *step);

#endif

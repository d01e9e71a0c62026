/*
 * config — workflow YAML: parse with libyaml, validate everything, and turn
 * it into a normalised JSON spec (jansson) that the store keeps per content
 * hash. Every error carries FILE:LINE:COL and all errors are reported, not
 * just the first.
 *
 * Normalised spec (what cfg_workflow_parse returns):
 *   {"name":"hello", "description":"…"|null,
 *    "params":{"who":{"default":"world"}, "n":{}},      // default kept as text
 *    "steps":[{"name":"a", "kind":"run", "needs":["x"],
 *              "command":["sh","-c","echo {{params.who}}"],   // [] for kinds without one
 *              "env":{"K":"V"}, "image":"host", "workdir":null|"dir",
 *              "timeout_ms":0, "retry":{"limit":0,"backoff_ms":1000,"max_backoff_ms":300000},
 *              "cache":false,
 *              "gate":[{"metric":"accuracy","op":">=","value":0.9},
 *                      {"metric":"f1","op":">=","production":true,"offset":0.01}],
 *              "model":"digits"|null, "dataset":"data/x"|null,
 *              "labels":"labels.csv"|null, "webhook":"https://…"|null,
 *              "on_timeout":"fail"|"continue", "artifact":"{{steps.train.outputs.model}}"|null,
 *              "version":"patch"|"minor"|"major", "aliases":["production"],
 *              "line":5, "col":5}]}
 *
 * Kinds (the rows of the step-kind table, kind.h and steps/kind_*.c, checked
 * by config_kinds.c): run, train, evaluate (command required), gate,
 * label, register (no command), cache (command optional). Every step
 * carries every field above; a kind that does not take a key has its
 * default: cache false, gate [], model/dataset/webhook/artifact null,
 * labels null ("labels.csv" for label steps), on_timeout "fail", version
 * "patch", aliases []. Gate items are gate.h gate_parse() items in
 * file order. An evaluate (or train) step whose gate compares against
 * production and has no model gets the model of the register steps
 * downstream of it. Templates ({{params.X}}, {{run.id}},
 * {{steps.X.outputs.Y}} with X upstream) are checked in command, env,
 * workdir, dataset and artifact, and kept as written: template.h is their
 * language and renders them.
 */
#ifndef FERRY_CONFIG_H
#define FERRY_CONFIG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/durations.h"
#include "lib/util.h"

/* Largest workflow file accepted, in bytes. */
#define CFG_MAX_YAML (1024 * 1024)

/* A list of "FILE:LINE:COL: message" strings, in file order. */
typedef struct {
	char **items;
	size_t len;
	size_t cap;
} cfg_errors;

/* Appends s ("FILE:LINE:COL: message", taken) to errs: a check after the parse (runs.c's secrets). */
void cfg_errors_add(cfg_errors *errs, char *s);
/* Frees the strings held by errs and empties it (errs itself is the caller's). */
void cfg_errors_dispose(cfg_errors *errs);

/*
 * Parses and validates a workflow. On success returns 0, *out is the
 * normalised spec (the caller json_decref()s it) and hash_out holds the
 * lowercase hex sha256 of the YAML bytes. On invalid input returns
 * FERRY_EINVALID, *out is NULL and errs holds every error found. filename is
 * used only in messages ("<inline>" when NULL).
 */
int cfg_workflow_parse(json_t **out, char hash_out[65], const char *yaml,
		       size_t len, const char *filename, cfg_errors *errs);

/*
 * The k-th key a step may have, in the order of the config's messages
 * ("known keys: …"): the generic ones (name, kind, needs, …), then every
 * kind's own once (kind.h struct step_key); NULL past the last.
 */
const char *cfg_step_key_at(size_t k);

/* Whether s is a workflow, step, model or alias name: [a-z0-9][a-z0-9_.-]{0,62}. */
bool cfg_name_ok(const char *s);

/*
 * A memory size ("512Mi", "2Gi", "1G", "1048576": a whole or decimal
 * number and an optional unit K, Ki, M, Mi, G, Gi, T, Ti; none is bytes) in
 * MiB, rounded up; -1 when malformed or out of range.
 */
int64_t cfg_memory_mb(const char *s);

/*
 * Resolves a run's parameters against spec["params"]: given is a JSON object
 * (values string, number or boolean; NULL means none). Fills defaults,
 * rejects unknown names, missing required ones and values past the limits
 * below (FERRY_EINVALID, message names the parameter and the limit). *out
 * is a new object name -> string value.
 */
#define CFG_PARAM_VALUE_MAX (64 * 1024)   /* bytes of one value: under the kernel's 128 KiB an env string */
#define CFG_PARAMS_TOTAL_MAX (512 * 1024) /* names and values together: a quarter of ARG_MAX's usual 2 MiB */
int cfg_params_resolve(json_t **out, const json_t *spec, const json_t *given);

#endif

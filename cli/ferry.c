/*
 * ferry — the command-line client: the verb table and main(), and the verbs
 * validate, submit, stop, retry, delete, continue, dev and help (get and
 * list are in runs.c). Each verb
 * is one cmd_* function that parses its own options with getopt_long, talks
 * to ferryd through the client module and prints either text for people
 * (format.h, so every verb renders the same way) or the server's JSON
 * (-o json). watch and logs live in watch.c and logs.c; the helpers verbs
 * share in cli.h. Exit status: 0 success, 1 the run failed or stopped or the
 * daemon or network failed, 2 a usage or validation error.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/client.h"
#include "plan/config.h"
#include "plan/template.h"
#include "cli/dev.h"
#include "lib/util.h"

/* ---- workflow files ---- */

/* A workflow read from disk and checked with the config parser. */
struct workflow_file {
	char *text;
	size_t len;
	json_t *spec;
	char hash[65];
	cfg_errors errs;
};

static void workflow_file_dispose(struct workflow_file *wf)
{
	free(wf->text);
	json_decref(wf->spec);
	cfg_errors_dispose(&wf->errs);
	memset(wf, 0, sizeof(*wf));
}

/*
 * Reads and parses path. Returns 0; FERRY_EINVALID with wf->errs filled; or
 * another negative code with the message in ferry_error_last() (unreadable).
 */
static int workflow_file_load(struct workflow_file *wf, const char *path)
{
	int error;

	memset(wf, 0, sizeof(*wf));
	ferry_error_clear();
	if ((error = file_read(&wf->text, &wf->len, path)) < 0)
		return error;
	error = cfg_workflow_parse(&wf->spec, wf->hash, wf->text, wf->len, path, &wf->errs);
	if (error < 0 && wf->errs.len == 0 && ferry_error_last()[0] == '\0')
		ferry_error_set("%s: invalid workflow", path);
	return error;
}

/* Prints every parse error of wf (or the one message) to stderr. */
static void workflow_file_report(const struct workflow_file *wf)
{
	if (wf->errs.len == 0) {
		fprintf(stderr, "ferry: %s\n", ferry_error_last());
		return;
	}
	for (size_t i = 0; i < wf->errs.len; i++)
		fprintf(stderr, "%s\n", wf->errs.items[i]);
}

/* ---- validate ---- */

/*
 * Warns (to stderr) about each {{params.X}} inside a shell script: Ferry
 * quotes it as one word, but the environment form is the one that reads
 * right in any quoting. Returns the warnings as a JSON array of strings.
 */
static json_t *shell_param_warnings(const char *path, const json_t *spec, bool print)
{
	json_t *uses = NULL, *u, *out = json_array();
	size_t i;

	tmpl_shell_param_uses(&uses, spec);
	json_array_foreach(uses, i, u) {
		char *w = xasprintf("step \"%s\" puts {{params.%s}} in a shell script; Ferry "
				    "renders it shell-quoted, but reading it from the environment "
				    "is safer and clearer: \"$%s\"",
				    jstr(u, "step", "?"), jstr(u, "param", "?"), jstr(u, "env", "?"));
		if (print)
			fprintf(stderr, "%s: warning: %s\n", path, w);
		json_array_append_new(out, json_string(w));
		free(w);
	}
	json_decref(uses);
	return out;
}

/*
 * The secrets spec's steps name, checked against the daemon's (GET
 * /secrets, names only): each not set there is an error at its step,
 * appended to errs as FILE:LINE:COL. Without a daemon to ask, a warning
 * says they were not checked (validate works offline). Returns how many
 * are not set.
 */
static size_t check_secrets(const char *path, const json_t *spec, cfg_errors *errs, json_t *warnings, bool print)
{
	ferry_client *c = NULL;
	json_t *answer = NULL, *st, *v, *known = json_object(), *s;
	size_t i, k, missing = 0, named = 0;

	json_array_foreach(json_object_get(spec, "steps"), i, st)
		named += json_array_size(json_object_get(st, "secrets"));
	if (named == 0)
		goto out;
	if (client_open(&c) < 0 || client_request(&answer, c, "GET", "/secrets", NULL) < 0) {
		char *w = xasprintf("the secrets its steps name were not checked: no daemon answered (%s)",
				    ferry_error_last());
		if (print)
			fprintf(stderr, "%s: warning: %s\n", path, w);
		json_array_append_new(warnings, json_string(w));
		free(w);
		goto out;
	}
	json_array_foreach(json_object_get(answer, "secrets"), i, s)
		json_object_set_new(known, jstr(s, "name", ""), json_true());
	json_array_foreach(json_object_get(spec, "steps"), i, st) {
		json_array_foreach(json_object_get(st, "secrets"), k, v) {
			if (json_object_get(known, json_string_value(v)))
				continue;
			cfg_errors_add(errs, xasprintf("%s:%lld:%lld: step \"%s\": secret %s is not set on the daemon; "
						       "an admin sets it with `ferry secrets set %s`", path,
						       (long long)json_integer_value(json_object_get(st, "line")),
						       (long long)json_integer_value(json_object_get(st, "col")),
						       jstr(st, "name", "?"), json_string_value(v), json_string_value(v)));
			missing++;
		}
	}
out:
	json_decref(answer), json_decref(known);
	client_free(c);
	return missing;
}

static int cmd_validate(const struct ctx *x, int argc, char **argv)
{
	struct workflow_file wf = {0};
	bool json = false;
	const char *path;
	json_t *report = NULL, *errors, *warnings = NULL;
	size_t nsteps = 0;
	int rc, status;

	if ((rc = parse_output_args(x, argc, argv, &json)) >= 0)
		return rc;
	if (argc - optind != 1)
		return usage_error(x, argc == optind ? "missing FILE" : "expected one FILE");
	path = argv[optind];

	rc = workflow_file_load(&wf, path);
	if (rc == 0) {
		nsteps = json_array_size(json_object_get(wf.spec, "steps"));
		warnings = shell_param_warnings(path, wf.spec, !json);
		if (check_secrets(path, wf.spec, &wf.errs, warnings, !json) > 0) {
			rc = FERRY_EINVALID;
			ferry_error_set("secrets not set");
		}
	}
	status = rc == 0 ? FX_OK : FX_USAGE;
	if (!json) {
		if (rc == 0) {
			printf("%s: ok %s workflow %s, %zu step%s, hash %.12s\n", path, dash(x->cli),
			       jstr(wf.spec, "name", "?"), nsteps, nsteps == 1 ? "" : "s", wf.hash);
			fflush(stdout);
		} else
			workflow_file_report(&wf);
		goto out;
	}
	errors = json_array();
	if (rc != 0 && wf.errs.len == 0)
		json_array_append_new(errors, json_string(ferry_error_last()));
	for (size_t i = 0; i < wf.errs.len; i++)
		json_array_append_new(errors, json_string(wf.errs.items[i]));
	report = json_pack("{s:s?, s:b, s:s?, s:o, s:s?, s:o, s:O}",
			   "file", path, "valid", rc == 0,
			   "name", rc == 0 ? jstr(wf.spec, "name", NULL) : NULL,
			   "steps", rc == 0 ? json_integer((json_int_t)nsteps) : json_null(),
			   "hash", rc == 0 ? wf.hash : NULL, "errors", errors,
			   "warnings", warnings ? warnings : json_array());
	if (report == NULL) {
		fprintf(stderr, "ferry: cannot encode the report as JSON\n");
		status = FX_FAIL;
		goto out;
	}
	print_json(report);
out:
	json_decref(report);
	json_decref(warnings);
	workflow_file_dispose(&wf);
	return status;
}

/* ---- submit ---- */

/* Adds "k=v" to params; a usage error (2) when it has no '=' or no key. */
static int add_param(const struct ctx *x, json_t *params, const char *arg)
{
	const char *eq = strchr(arg, '=');
	char *key;
	json_t *val;

	if (eq == NULL)
		return usage_error(x, "parameter '%s' must be NAME=VALUE", arg);
	if (eq == arg)
		return usage_error(x, "parameter '%s' has no name", arg);
	val = json_string(eq + 1);
	if (val == NULL)
		return usage_error(x, "parameter '%s' is not valid UTF-8", arg);
	key = xstrndup(arg, (size_t)(eq - arg));
	json_object_set_new(params, key, val);
	free(key);
	return 0;
}

char *abs_dir_of(const char *path)
{
	char *real = realpath(path, NULL), *slash;

	if (real == NULL)
		return NULL;
	slash = strrchr(real, '/');
	if (slash == real)
		slash[1] = '\0';
	else if (slash != NULL)
		*slash = '\0';
	return real;
}

/*
 * Builds the POST /runs body for a workflow file, checking it locally first.
 * Returns FX_OK and *out, or the exit status after printing why.
 */
static int submit_body_from_file(json_t **out, const char *path, json_t *params)
{
	struct workflow_file wf = {0};
	json_t *body = NULL, *yaml, *resolved = NULL;
	char *dir = NULL, *copy = NULL;
	int rc, status = FX_USAGE;

	rc = workflow_file_load(&wf, path);
	if (rc < 0) {
		workflow_file_report(&wf);
		goto out;
	}
	if (cfg_params_resolve(&resolved, wf.spec, params) < 0) {
		fprintf(stderr, "ferry: %s: %s\n", path, ferry_error_last());
		fprintf(stderr, "ferry: give parameters with -p NAME=VALUE\n");
		goto out;
	}
	yaml = json_stringn(wf.text, wf.len);
	if (yaml == NULL) {
		fprintf(stderr, "ferry: %s is not valid UTF-8 text\n", path);
		goto out;
	}
	dir = abs_dir_of(path);
	if (dir == NULL) {
		fprintf(stderr, "ferry: cannot resolve the directory of %s\n", path);
		json_decref(yaml);
		status = FX_FAIL;
		goto out;
	}
	copy = xstrdup(path);
	body = json_pack("{s:o, s:s, s:O, s:s, s:s}", "yaml", yaml, "filename", basename(copy),
			 "params", params, "workdir", dir, "trigger", "cli");
	if (body == NULL) {
		fprintf(stderr, "ferry: cannot encode the request for %s\n", path);
		status = FX_FAIL;
		goto out;
	}
	*out = body;
	status = FX_OK;
out:
	free(copy);
	free(dir);
	json_decref(resolved);
	workflow_file_dispose(&wf);
	return status;
}

static int cmd_submit(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"param", required_argument, NULL, 'p'},
		{"watch", no_argument, NULL, 'w'},
		{"workflow", required_argument, NULL, OPT_WORKFLOW},
		{"no-cache", no_argument, NULL, OPT_NO_CACHE},
		{"repo", required_argument, NULL, OPT_REPO},
		{"ref", required_argument, NULL, OPT_REF},
		{"path", required_argument, NULL, OPT_PATH},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	ferry_client *c = NULL;
	json_t *params = json_object(), *body = NULL, *run = NULL;
	const char *workflow = NULL, *repo = NULL, *ref = NULL, *path = NULL;
	char *repo_abs = NULL;
	bool json = false, watch = false, no_cache = false;
	char id[32];
	int64_t run_id;
	int ch, rc, status = FX_USAGE;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":p:wo:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'p':
			if (add_param(x, params, optarg) != 0)
				goto out;
			break;
		case 'w':
			watch = true;
			break;
		case OPT_WORKFLOW:
			workflow = optarg;
			break;
		case OPT_NO_CACHE:
			no_cache = true;
			break;
		case OPT_REPO:
			repo = optarg;
			break;
		case OPT_REF:
			ref = optarg;
			break;
		case OPT_PATH:
			path = optarg;
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
	if ((ref || path) && repo == NULL) {
		status = usage_error(x, "--ref and --path go with --repo");
		goto out;
	}
	if (repo != NULL) {
		if (workflow != NULL || argc > optind || path == NULL) {
			status = usage_error(x, "--repo takes --path FILE (the workflow in the repository) and "
					       "[--ref REF], not FILE or --workflow");
			goto out;
		}
		/* a local repository is the daemon's to read: sent as an absolute path */
		if (strstr(repo, "://") == NULL && strchr(repo, '@') == NULL && (repo_abs = realpath(repo, NULL)) == NULL) {
			status = usage_error(x, "--repo %s: %s", repo, strerror(errno));
			goto out;
		}
		body = json_pack("{s:s, s:s, s:s, s:O, s:s}", "repo", repo_abs ? repo_abs : repo, "ref", ref ? ref : "HEAD",
				 "path", path, "params", params, "trigger", "cli");
		if (body == NULL) {
			status = usage_error(x, "--repo, --ref and --path must be UTF-8");
			goto out;
		}
	} else if (workflow != NULL && argc > optind) {
		status = usage_error(x, "give either FILE or --workflow NAME, not both");
		goto out;
	} else if (workflow == NULL && argc - optind != 1) {
		status = usage_error(x, argc == optind ? "missing FILE" : "expected one FILE");
		goto out;
	} else if (workflow != NULL) {
		body = json_pack("{s:s, s:O, s:s}", "workflow", workflow, "params", params,
				 "trigger", "cli");
		if (body == NULL) {
			status = usage_error(x, "workflow name '%s' is not valid UTF-8", workflow);
			goto out;
		}
	} else if ((status = submit_body_from_file(&body, argv[optind], params)) != FX_OK) {
		goto out;
	}

	if (no_cache)
		json_object_set_new(body, "no_cache", json_true());
	if ((status = open_client(&c)) != FX_OK)
		goto out;
	rc = client_request(&run, c, "POST", "/runs", body);
	if (rc < 0) {
		status = report_request_error(c, rc);
		goto out;
	}
	status = FX_OK;
	if (!watch || !json) {
		if (json) {
			print_json(run);
		} else {
			id_text(id, sizeof(id), run);
			printf("%s\n", id);
		}
		fflush(stdout);
	}
	if (!watch)
		goto out;
	if (!json_is_integer(json_object_get(run, "id"))) {
		id_text(id, sizeof(id), run);
		if (parse_int64(id, &run_id) < 0) {
			fprintf(stderr, "ferry: ferryd answered without a usable run id\n");
			status = FX_FAIL;
			goto out;
		}
	} else {
		run_id = json_integer_value(json_object_get(run, "id"));
	}
	status = watch_run(x->cli, c, run_id, json);
out:
	free(repo_abs);
	json_decref(run);
	json_decref(body);
	json_decref(params);
	client_free(c);
	return status;
}

/* ---- stop, retry ---- */

/* Shared by stop and retry: POST /runs/{id}/VERB and print the outcome. */
static int run_action(const struct ctx *x, int64_t id, const char *verb, const json_t *body,
		      const char *from, bool json, bool watch)
{
	ferry_client *c = NULL;
	json_t *run = NULL;
	char *path = xasprintf("/runs/%" PRId64 "/%s", id, verb);
	const char *state;
	int rc, status;

	if ((status = open_client(&c)) != FX_OK)
		goto out;
	rc = client_request(&run, c, "POST", path, body);
	if (rc < 0) {
		status = report_request_error(c, rc);
		/* the API names its field ("from"); say how it is given here */
		if (strcmp(verb, "retry") == 0 && from == NULL && client_last_status(c) == 409)
			fprintf(stderr, "ferry: ferry retry %" PRId64 " --from STEP re-runs STEP and what follows it\n", id);
		goto out;
	}
	state = jstr(run, "state", "?");
	if (json && !watch) {
		print_json(run);
	} else if (!json) {
		bool retrying = strcmp(verb, "retry") == 0 &&
				(strcmp(state, "pending") == 0 || strcmp(state, "running") == 0);
		if (retrying && from != NULL)
			printf("run %" PRId64 " retrying from %s\n", id, from);
		else
			printf("run %" PRId64 " %s\n", id, retrying ? "retrying" : state);
		fflush(stdout);
	}
	if (watch)
		status = watch_run(x->cli, c, id, json);
out:
	free(path);
	json_decref(run);
	client_free(c);
	return status;
}

static int cmd_stop(const struct ctx *x, int argc, char **argv)
{
	bool json = false;
	int64_t id;
	int status;

	if ((status = parse_run_args(x, argc, argv, &id, &json)) >= 0)
		return status;
	return run_action(x, id, "stop", NULL, NULL, json, false);
}

/* `ferry delete RUN`: DELETE /runs/{id}; the daemon refuses a run that has not finished. */
static int cmd_delete(const struct ctx *x, int argc, char **argv)
{
	json_t *answer = NULL;
	bool json = false;
	int64_t id;
	int status;

	if ((status = run_request(x, argc, argv, "DELETE", &answer, &id, &json)) >= 0)
		return status;
	if (json)
		print_json(answer);
	else if (json_is_false(json_object_get(answer, "files_removed")))
		printf("run %" PRId64 " deleted; some of its files stayed (see ferryd's log)\n", id);
	else
		printf("run %" PRId64 " deleted\n", id);
	json_decref(answer);
	return FX_OK;
}

static int cmd_retry(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"from", required_argument, NULL, OPT_FROM},
		{"no-cache", no_argument, NULL, OPT_NO_CACHE},
		{"param", required_argument, NULL, 'p'},
		{"watch", no_argument, NULL, 'w'},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *from = NULL;
	json_t *body = NULL, *params = json_object();
	bool json = false, watch = false, no_cache = false;
	int64_t id;
	int ch, status;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":wp:o:h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_FROM:
			from = optarg;
			break;
		case 'p':
			if (add_param(x, params, optarg) != 0) {
				json_decref(params);
				return FX_USAGE;
			}
			break;
		case OPT_NO_CACHE:
			no_cache = true;
			break;
		case 'w':
			watch = true;
			break;
		case 'o':
			if (parse_output(x, optarg, &json) != 0)
				return FX_USAGE;
			break;
		case 'h':
			json_decref(params);
			return print_help(x->cmd);
		default:
			json_decref(params);
			return option_error(x, ch, argv);
		}
	}
	if ((status = parse_run_operand(x, argc, argv, &id)) >= 0 ||
	    (from != NULL && *from == '\0' && (status = usage_error(x, "--from needs a step name")) >= 0)) {
		json_decref(params);
		return status;
	}
	body = from != NULL ? json_pack("{s:s}", "from", from) : json_object();
	if (body == NULL) {
		json_decref(params);
		return usage_error(x, "step name '%s' is not valid UTF-8", from);
	}
	if (no_cache)
		json_object_set_new(body, "no_cache", json_true());
	/* new params: the steps they change run again too, and the run records them (runs_retry) */
	if (json_object_size(params) > 0)
		json_object_set(body, "params", params);
	json_decref(params);
	status = run_action(x, id, "retry", body, from, json, watch);
	json_decref(body);
	return status;
}

/* ---- continue and reject: a waiting step's two answers ---- */

/* The RUN STEP operands after the options; FX_OK, or a usage error (said). */
static int run_step_operands(const struct ctx *x, int argc, char **argv, int64_t *id, const char **step)
{
	if (argc - optind != 2)
		return usage_error(x, argc == optind ? "missing RUN and STEP" :
				   argc - optind == 1 ? "missing STEP" : "expected RUN and STEP only");
	if (parse_run_id(x, argv[optind], id) != 0)
		return FX_USAGE;
	*step = argv[optind + 1];
	if (**step == '\0')
		return usage_error(x, "STEP is empty");
	return FX_OK;
}

/* POST /runs/ID/steps/STEP/VERB with body; prints the run (-o json) or "run ID step STEP DONE". */
static int post_step(int64_t id, const char *step, const char *verb, const char *done, json_t *body, bool json)
{
	ferry_client *c = NULL;
	json_t *run = NULL;
	char *esc = NULL, *path = NULL;
	int rc, status;

	if ((status = open_client(&c)) != FX_OK)
		return status;
	esc = client_escape(step);
	path = xasprintf("/runs/%" PRId64 "/steps/%s/%s", id, esc, verb);
	rc = client_request(&run, c, "POST", path, body);
	if (rc < 0) {
		status = report_request_error(c, rc);
	} else {
		if (json)
			print_json(run);
		else
			printf("run %" PRId64 " step %s %s\n", id, step, done);
		status = FX_OK;
	}
	fflush(stdout);
	free(path), free(esc);
	json_decref(run);
	client_free(c);
	return status;
}

/* ferry reject RUN STEP [--reason TEXT]: a waiting step fails with the reason (POST …/reject). */
static int cmd_reject(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"reason", required_argument, NULL, OPT_DATA},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	json_t *body;
	const char *reason = NULL, *step;
	bool json = false;
	int64_t id;
	int ch, status;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_DATA:
			reason = optarg;
			break;
		case 'o':
			if (parse_output(x, optarg, &json) != 0)
				return FX_USAGE;
			break;
		case 'h':
			return print_help(x->cmd);
		default:
			return option_error(x, ch, argv);
		}
	}
	if ((status = run_step_operands(x, argc, argv, &id, &step)) != FX_OK)
		return status;
	if ((body = reason ? json_pack("{s:s}", "reason", reason) : json_object()) == NULL)
		return usage_error(x, "--reason is not UTF-8 text");
	status = post_step(id, step, "reject", "rejected", body, json);
	json_decref(body);
	return status;
}

static int cmd_continue(const struct ctx *x, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"data", required_argument, NULL, OPT_DATA},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	json_t *data = NULL, *body = NULL;
	const char *step;
	json_error_t jerr;
	bool json = false;
	int64_t id;
	int ch, status = FX_USAGE;

	optind = 0;
	while ((ch = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_DATA:
			json_decref(data);
			data = json_loads(optarg, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
			if (data == NULL) {
				usage_error(x, "--data is not valid JSON: %s (line %d, column %d)",
					    jerr.text, jerr.line, jerr.column);
				goto out;
			}
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
	if ((status = run_step_operands(x, argc, argv, &id, &step)) != FX_OK)
		goto out;
	body = data != NULL ? json_pack("{s:O}", "data", data) : json_object();
	if (body == NULL) {
		fprintf(stderr, "ferry: cannot encode the request body\n");
		status = FX_FAIL;
		goto out;
	}
	status = post_step(id, step, "continue", "continued", body, json);
out:
	json_decref(body);
	json_decref(data);
	return status;
}

/* ---- dev, help ---- */

static int cmd_dev(const struct ctx *x, int argc, char **argv)
{
	if (argc < 2)
		return usage_error(x, "missing subcommand (run)");
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)
		return print_help(x->cmd);
	/* dev.h: argv[0] is "run". */
	return dev_main(argc - 1, argv + 1);
}

static void print_main_help(FILE *f);

static int cmd_help(const struct ctx *x, int argc, char **argv)
{
	const struct command *cmd;

	if (argc < 2) {
		print_main_help(stdout);
		return FX_OK;
	}
	cmd = find_command(argv[1]);
	if (cmd == NULL)
		return usage_error(x, "unknown command '%s'", argv[1]);
	return print_help(cmd);
}

/* ---- the command table and main ---- */

static const struct command commands[] = {
	{"validate", "Check a workflow file locally, without the daemon.",
	 "ferry validate FILE [-o json]",
	 "The one question asked of a daemon, when one answers: are the secrets its\n"
	 "steps name set there (GET /api/v1/secrets, names only)? Without one, a\n"
	 "warning says they were not checked.\n"
	 "\nOptions:\n"
	 "  -o, --output FORMAT   text (default) or json\n"
	 "\nExit status: 0 valid, 2 invalid (each error as FILE:LINE:COL: message on stderr).\n"
	 "\nExample:\n  ferry validate workflows/hello.yaml\n",
	 cmd_validate},
	{"submit", "Validate a workflow file, start a run of it and print the run id.",
	 "ferry submit FILE [-p NAME=VALUE]... [--watch] [-o json]\n"
	 "       ferry submit --workflow NAME [-p NAME=VALUE]... [--watch] [-o json]\n"
	 "       ferry submit --repo PATH_OR_URL [--ref REF] --path FILE [-p NAME=VALUE]... [--watch]",
	 "Options:\n"
	 "  -p, --param NAME=VALUE  set a workflow parameter (repeatable; sent as a string)\n"
	 "  -w, --watch             follow the run until it ends; exit 1 if it fails\n"
	 "      --workflow NAME     run a workflow registered with the daemon instead of FILE,\n"
	 "                          in the directory it was registered from (ferry workflow)\n"
	 "      --no-cache          no step of this run comes from the step result cache\n"
	 "      --repo R            run the workflow file --path FILE from git repository R (a\n"
	 "                          path or URL) at --ref REF (a branch, tag or commit; default\n"
	 "                          HEAD): the daemon pins the commit, runs in a checkout of it,\n"
	 "                          and the run records the commit (ferry get shows it)\n"
	 "  -o, --output FORMAT     text (default: the run id alone) or json (the run object;\n"
	 "                          with --watch, the final run object)\n"
	 "\nExample:\n  ferry submit workflows/digits.yaml -p C=0.5 --watch\n",
	 cmd_submit},
	{"list", "List runs, newest first (dev runs only with --dev).",
	 "ferry list [--state STATE] [--workflow NAME] [--trigger T] [--dev] [--limit N] [-o json]",
	 "Options:\n"
	 "      --state STATE     pending, running, waiting, stopping, succeeded, failed or stopped\n"
	 "      --workflow NAME   only runs of this workflow\n"
	 "      --trigger T       only runs started so: api, cli, dev, schedule, data, git or bench\n"
	 "      --dev             show `ferry dev` runs too (left out by default)\n"
	 "      --limit N         at most N runs\n"
	 "  -o, --output FORMAT   text (default) or json (the server's answer)\n"
	 "\nExample:\n  ferry list --state failed --limit 10\n",
	 cmd_list},
	{"get", "Show a run and its steps.",
	 "ferry get RUN [-o json]",
	 "Options:\n"
	 "  -o, --output FORMAT   text (default) or json (the run object)\n"
	 "\nExample:\n  ferry get 12\n",
	 cmd_get},
	{"watch", "Follow a run until it ends; exit 0 if it succeeded, 1 otherwise.",
	 "ferry watch RUN",
	 "Prints one line per step state change, or a live table on a terminal.\n"
	 "\nExample:\n  ferry watch 12\n",
	 cmd_watch},
	{"events", "Show a run's audit trail: every transition and who did what.",
	 "ferry events RUN [--after ID] [-o json]",
	 "Options:\n"
	 "      --after ID        only the events after event ID (for scripts that poll)\n"
	 "  -o, --output FORMAT   text (default) or json (the server's answer)\n"
	 "\nExample:\n  ferry events 12\n",
	 cmd_events},
	{"audit", "Show who changed schedules, triggers, secrets and queues and who deleted runs.",
	 "ferry audit [--object run|schedule|trigger|secret|queue [--id N]] [--limit N] [-o json]",
	 "Newest first: schedules created, changed, paused, resumed and deleted, triggers\n"
	 "paused and resumed, secrets set and removed (never a value), queues created,\n"
	 "changed and deleted (their settings before and after), runs deleted (what the\n"
	 "run was: its workflow, state, who started it, its params and times). Each entry\n"
	 "was written with its change.\n"
	 "\nOptions:\n"
	 "      --object KIND     only entries about runs, schedules, triggers, secrets or queues\n"
	 "      --id N            only entries about that one (with --object)\n"
	 "      --limit N         at most N entries (default 50, at most 500)\n"
	 "  -o, --output FORMAT   text (default) or json (the server's answer)\n"
	 "\nExamples:\n  ferry audit\n  ferry audit --object run --id 12\n",
	 cmd_audit},
	{"logs", "Print the log of a step, or of every step of a run.",
	 "ferry logs RUN [STEP] [-f] [--attempt N] [--host]",
	 "With STEP, prints the log of its latest attempt (or of attempt N). Without\n"
	 "STEP, prints the latest attempt of every step that ran, in step order, each\n"
	 "after a '==> STEP (attempt N) <==' line. A log on another host of the fleet\n"
	 "is served through it, wherever the daemon asked runs.\n"
	 "\nOptions:\n"
	 "  -f, --follow          keep printing as the job writes, until the attempt ends;\n"
	 "                        without STEP, follow each step in turn (and its retries)\n"
	 "                        until the run is over; waits for steps not started yet\n"
	 "      --attempt N       the log of attempt N of STEP (default: the latest)\n"
	 "      --host            name the host each job ran on in its header\n"
	 "                        ('==> STEP (attempt N, host H) <=='; with STEP too)\n"
	 "\nExit status: 0 printed, 1 no such run, step or attempt, or ferryd failed,\n"
	 "2 usage error. The step's own outcome does not change it.\n"
	 "\nExamples:\n"
	 "  ferry logs 12 train -f\n"
	 "  ferry logs 12 train --attempt 1\n"
	 "  ferry logs 12\n",
	 cmd_logs},
	{"monitor", "Show what the job monitor sees of a step: hang detection, utilization, metrics.",
	 "ferry monitor RUN STEP [-f] [--attempt N] [-o json]",
	 "Prints the hang detector's state and why (alive, quiet, suspected, hung), the last\n"
	 "samples (utilization, CPU time, IO counters, log size, declared phase), the metric\n"
	 "series the job appends to $FERRY_METRICS_FILE as small charts with the results of\n"
	 "the step's watch: rules, the evidence collected when it was declared hung, and the\n"
	 "monitor's events.\n"
	 "\nOptions:\n"
	 "  -f, --follow          print new samples and events as they come, until the step ends\n"
	 "      --attempt N       attempt N of STEP (default: the latest)\n"
	 "  -o, --output FORMAT   text (default) or json (the server's answer)\n"
	 "\nExamples:\n  ferry monitor 12 train\n  ferry monitor 12 train -f\n",
	 cmd_monitor},
	{"stop", "Stop a run: kill its running jobs, start nothing new.",
	 "ferry stop RUN [-o json]",
	 "Options:\n"
	 "  -o, --output FORMAT   text (default) or json (the run object)\n"
	 "\nExample:\n  ferry stop 12\n",
	 cmd_stop},
	{"retry", "Retry a failed or stopped run, or rerun a finished one from a step.",
	 "ferry retry RUN [--from STEP] [--no-cache] [-p NAME=VALUE]... [--watch] [-o json]",
	 "Options:\n"
	 "      --from STEP       rerun STEP and everything after it (any finished run)\n"
	 "      --no-cache        run steps with `cache: true` even when a cached result fits\n"
	 "  -p, --param N=V       change a param: every step it changes (its command, env…)\n"
	 "                        runs again with what is below it; recorded in the run\n"
	 "  -w, --watch           follow the run until it ends; exit 1 if it fails\n"
	 "  -o, --output FORMAT   text (default) or json (the run object)\n"
	 "\nExamples:\n  ferry retry 12 --from train\n  ferry retry 12 --from train --no-cache\n"
	 "  ferry retry 12 -p C=5\n",
	 cmd_retry},
	{"delete", "Delete a finished run: its record, events, logs and attempt directories.",
	 "ferry delete RUN [-o json]",
	 "Only a run that has finished (succeeded, failed or stopped) is deleted; stop a\n"
	 "running one first. Model versions the run registered stay in the registry\n"
	 "(their lineage keeps the run's id). There is no undo.\n"
	 "\nOptions:\n"
	 "  -o, --output FORMAT   text (default) or json (the server's answer)\n"
	 "\nExit status: 0 deleted, 1 no such run, the run has not finished, or ferryd\n"
	 "failed, 2 usage error.\n"
	 "\nExample:\n  ferry delete 12\n",
	 cmd_delete},
	{"continue", "Let a waiting step (a gate) go on, optionally handing it data.",
	 "ferry continue RUN STEP [--data JSON] [-o json]",
	 "Options:\n"
	 "      --data JSON       any JSON value, recorded with the step's continuation\n"
	 "                        (checked here: invalid JSON is a usage error)\n"
	 "  -o, --output FORMAT   text (default) or json (the run object)\n"
	 "\nExit status: 0 continued, 1 no such run or step, the step is not waiting,\n"
	 "or ferryd failed, 2 usage error.\n"
	 "\nExamples:\n"
	 "  ferry continue 12 label\n"
	 "  ferry continue 12 approve --data '{\"approved_by\": \"ana\", \"ok\": true}'\n",
	 cmd_continue},
	{"reject", "Say no to a waiting step (a gate, a label step, a deploy awaiting approval): it fails.",
	 "ferry reject RUN STEP [--reason TEXT] [-o json]",
	 "Options:\n"
	 "      --reason TEXT     why; the step's reason becomes \"rejected by YOU: TEXT\"\n"
	 "  -o, --output FORMAT   text (default) or json (the run object)\n"
	 "\nThe step fails for good (no retry) and the run goes on as after any failure: the\n"
	 "steps below it are skipped. Recorded as a step.rejected event with the reason.\n"
	 "\nExit status: 0 rejected, 1 no such run or step, the step is not waiting, or\n"
	 "ferryd failed, 2 usage error.\n"
	 "\nExample:\n  ferry reject 12 approve --reason 'f1 dropped on the new data'\n",
	 cmd_reject},
	{"models", "The model registry: models, versions, lineage, aliases.",
	 "ferry models list [-o json]\n"
	 "       ferry models versions NAME [-o json]\n"
	 "       ferry models get NAME VERSION|ALIAS [-o json]\n"
	 "       ferry models alias NAME ALIAS VERSION [-o json]\n"
	 "       ferry models download NAME VERSION|ALIAS DIR [--force]\n"
	 "       ferry models alias NAME ALIAS --delete\n"
	 "       ferry models compare NAME VERSION|ALIAS VERSION|ALIAS\n"
	 "       ferry models tag NAME [VERSION] KEY=VALUE... (KEY= removes)\n"
	 "       ferry models describe NAME [VERSION] TEXT\n"
	 "       ferry models archive|restore NAME VERSION\n"
	 "       ferry models register NAME PATH [--alias A]... [--version patch|minor|major] [--description TEXT]",
	 "Subcommands:\n"
	 "  list        models with their number of versions, latest version and aliases\n"
	 "  versions    a model's versions, newest first, with aliases, run and metrics\n"
	 "  get         one version (by number or alias): artifact, metrics, params, lineage\n"
	 "  alias       point ALIAS (candidate, staging, any name) at VERSION, or --delete\n"
	 "              it; each move is recorded with who made it (production follows a\n"
	 "              deployment's traffic: ferry deployments promote moves it)\n"
	 "  compare     two versions' metrics side by side (B - A), then the params and\n"
	 "              lineage that differ\n"
	 "  tag         set tags on the model or a version (KEY= removes one); versions\n"
	 "              --tag KEY=VALUE lists those that carry it\n"
	 "  describe    a description of the model or a version (\"\" clears it)\n"
	 "  register    a version from a file or directory on this machine, outside a\n"
	 "              pipeline (stored content-addressed; no run in its lineage)\n"
	 "  archive     keep a version but never deploy or alias it (refused while it\n"
	 "              serves or an alias points at it); restore undoes it\n"
	 "  download    the version's artifact into DIR (created when missing): a file as\n"
	 "              DIR/NAME, a directory rebuilt file by file from its manifest; each\n"
	 "              file's sha256 is checked; a manifest path that is absolute or has\n"
	 "              '..' is refused\n"
	 "\nOptions:\n"
	 "  -o, --output FORMAT   text (default) or json (the server's answer)\n"
	 "  -f, --force           download: write into a DIR that is not empty\n"
	 "\nExamples:\n"
	 "  ferry models versions digits\n"
	 "  ferry models download digits production ./model\n"
	 "  ferry models get digits production\n"
	 "  ferry models alias digits candidate 0.0.2      # production follows a deployment's\n"
	 "                                                 # traffic: ferry deployments promote\n",
	 cmd_models},
	{"deployments", "Deployed models: versions, traffic split, replicas, auto-stop.",
	 "ferry deployments list [-o json]\n"
	 "       ferry deployments get ID [-o json]\n"
	 "       ferry deployments traffic ID VERSION PERCENT\n"
	 "       ferry deployments scale ID VERSION REPLICAS\n"
	 "       ferry deployments extend ID HOURS|never\n"
	 "       ferry deployments stop|start|rollback|delete ID\n"
	 "       ferry deployments promote ID VERSION\n"
	 "       ferry deployments retire ID VERSION\n"
	 "       ferry deployments logs ID [VERSION] [REPLICA] [-f]\n"
	 "       ferry deployments predict ID REQUEST.json",
	 "  list      deployments with their versions, weights and replicas\n"
	 "  get       one deployment, its deadline and replicas' health\n"
	 "  traffic   give VERSION PERCENT of the traffic; the others share the rest\n"
	 "  scale     run REPLICAS (1-5) replicas of VERSION\n"
	 "  extend    move the auto-stop deadline by HOURS (1h-24h); never: no auto-stop\n"
	 "  stop      drain, stop the replicas, keep the versions and weights\n"
	 "  start     bring a stopped deployment back with its weights\n"
	 "  promote   100% to VERSION\n"
	 "  rollback  the weights before the last change\n"
	 "  retire    VERSION's traffic to the others, its replicas stopped (a version at\n"
	 "            0% retires by itself after the deployment's retire_after, 1h by\n"
	 "            default); traffic to a retired version brings it back\n"
	 "  predict   send an inference request through the front address\n"
	 "  logs      a replica's log (default: replica 1 of the version with the most\n"
	 "            traffic); -f follows it while the replica runs\n"
	 "  delete    stop and forget the deployment\n"
	 "  -o, --output json   print the API's JSON\n"
	 "\nExample:\n"
	 "  ferry deployments traffic 1 0.0.2 50\n",
	 cmd_deployments},
	{"schedules", "Cron schedules of registered workflows: next fire times, ticks, pause/resume.",
	 "ferry schedules list [-o json]\n"
	 "       ferry schedules get|next ID [-o json]\n"
	 "       ferry schedules pause|resume|delete ID\n"
	 "       ferry schedules create WORKFLOW CRON [--timezone TZ] [--name N] [--concurrency C]\n"
	 "                              [--catchup all|latest|none] [-p NAME=VALUE]...",
	 "  list      every schedule: workflow, cron, time zone, next fire, the last tick\n"
	 "  get       one schedule: its next 10 fire times (with a note where a DST change\n"
	 "            moves one) and its ticks, newest first: fired (the run), or skipped\n"
	 "            and why (paused, forbid, catch-up)\n"
	 "  next      the next 10 fire times alone\n"
	 "  create    a schedule for a registered workflow (a workflow's own schedule: is\n"
	 "            made when it is registered)\n"
	 "  pause     its ticks are recorded as skipped (paused) until resumed\n"
	 "  resume    fires again from the next tick; the paused ones are not caught up\n"
	 "  delete    forget it and its ticks\n"
	 "\nOptions:\n"
	 "  -o, --output json     print the API's JSON\n"
	 "      --timezone TZ     an IANA zone (default UTC), e.g. Europe/Berlin\n"
	 "      --concurrency C   allow (default), forbid (skip while a run of it is going)\n"
	 "                        or replace (stop it and start anew)\n"
	 "  -p, --param NAME=VALUE  a parameter of the runs it starts\n"
	 "\nExamples:\n"
	 "  ferry schedules create digits '0 3 * * *' --timezone Europe/Berlin --concurrency forbid\n"
	 "  ferry schedules pause 1\n",
	 cmd_schedules},
	{"triggers", "Data and git triggers of registered workflows: what they watch, their last fire.",
	 "ferry triggers list [-o json]\n"
	 "       ferry triggers pause|resume ID",
	 "  list      every trigger: workflow, kind, the folder or repository, whether it\n"
	 "            watches yet, the files or commit of its last fire and how that went\n"
	 "  pause     it starts nothing; what changes meanwhile is not lost\n"
	 "  resume    its next look starts one run for all that changed\n"
	 "\nOptions:\n"
	 "  -o, --output json   print the API's JSON\n"
	 "\nExample:\n  ferry triggers pause 1\n",
	 cmd_triggers},
	{"secrets", "Secrets steps name under secrets: set (admin), list (names only), remove.",
	 "ferry secrets list [-o json]\n"
	 "       ferry secrets set NAME < FILE\n"
	 "       ferry secrets rm NAME",
	 "  list      every secret's name, who set it last and when; never a value\n"
	 "  set       store NAME's value, read from stdin (asked for without echo on a\n"
	 "            terminal; one trailing newline dropped); sealed with AES-256-GCM\n"
	 "            under $FERRY_HOME/secrets.key, never shown again\n"
	 "  rm        remove NAME; a step that names it fails to start until it is set\n"
	 "\nA step gets the secrets it lists in its environment, under their names,\n"
	 "and each value is masked as *** in its log:\n"
	 "    secrets: [HF_TOKEN]\n"
	 "Submitting a run whose steps name a secret that is not set is refused.\n"
	 "\nOptions:\n"
	 "  -o, --output json   print the API's JSON\n"
	 "\nExamples:\n"
	 "  ferry secrets set HF_TOKEN < ~/.hf_token\n"
	 "  ferry secrets list\n",
	 cmd_secrets},
	{"hosts", "Show the fleet: each host's state, last heartbeat, capacity, jobs and replicas.",
	 "ferry hosts [-o json]",
	 "One line per host a daemon ran on (FERRY_HOST, else the machine's name):\n"
	 "  STATE     up (a daemon heartbeat within its lease), down (every daemon\n"
	 "            stopped cleanly) or lost (the last one died or lost the database)\n"
	 "  CPUS, MEMORY, GPUS  what its newest daemon detected: cgroup limits where\n"
	 "            set, GPUs from FERRY_GPUS or nvidia-smi\n"
	 "  JOBS, REPLICAS      its running attempts and live model-server replicas\n"
	 "  LABELS    FERRY_HOST_LABELS, e.g. gpu=true,zone=eu-1\n"
	 "\nOptions:\n"
	 "  -o, --output FORMAT   text (default) or json (GET /api/v1/hosts)\n"
	 "\nExample:\n  ferry hosts\n",
	 cmd_hosts},
	{"queues", "Queues steps wait in: priorities, quotas, and why each waiting step waits.",
	 "ferry queues [list] [-o json]\n"
	 "       ferry queues show NAME [--limit N] [-o json]\n"
	 "       ferry queues create NAME [--priority N] [--max-running N] [--max-gpus N]\n"
	 "                                [--max-cpus X] [--description TEXT] [-o json]\n"
	 "       ferry queues set NAME [the same options; none, or --no-max-running,\n"
	 "                              --no-max-gpus, --no-max-cpus, clears a quota] [-o json]\n"
	 "       ferry queues delete NAME",
	 "A ready step waits in its queue (queue: in its workflow, else default) until a\n"
	 "host that is up has room for what it asks (resources: gpus, cpus, memory) and its\n"
	 "queue's quotas allow it; a queue of higher priority goes first, then the step's own\n"
	 "priority, then the older step.\n"
	 "  list      every queue: priority, quotas, running attempts, waiting steps, GPUs held\n"
	 "  show      one queue: its running attempts (host, GPUs, CPUs) and its waiting steps\n"
	 "            in the order the next claims take them, each with what it needs and why\n"
	 "            it waits: its retry's backoff, the queue's quota, no daemon up, the GPUs,\n"
	 "            CPUs or memory each host has free (and who holds them), or the steps\n"
	 "            ahead of it; \"fits HOST now\" starts at the next claim\n"
	 "  create    a queue (admin); steps name it with queue:\n"
	 "  set       change its priority, quotas or description (admin)\n"
	 "  delete    remove it (admin); refused for default and while steps wait in it\n"
	 "\nOptions:\n"
	 "      --priority N        -1000 to 1000 (default 0): a higher queue is admitted first\n"
	 "      --max-running N     at most N of its attempts run at once over the fleet\n"
	 "      --max-gpus N        at most N GPUs held by its running attempts at once\n"
	 "      --max-cpus X        at most X CPUs reserved by its running attempts at once\n"
	 "                          (each of the three: none, or --no-max-…, for no limit)\n"
	 "      --description TEXT  what the queue is for\n"
	 "      --limit N           show: at most N waiting steps (default 50, at most 500)\n"
	 "  -o, --output FORMAT     text (default) or json (the server's answer)\n"
	 "\nExamples:\n"
	 "  ferry queues create nightly --priority -10 --max-gpus 2\n"
	 "  ferry queues show default\n"
	 "  ferry queues set nightly --max-gpus none\n",
	 cmd_queues},
	{"cache", "Show the data cache of cache steps: entries, sessions, hit/miss totals.",
	 "ferry cache [--host NAME] [-o json]",
	 "Options:\n"
	 "      --host NAME       only the cache of that machine\n"
	 "  -o, --output FORMAT   text (default) or json (GET /api/v1/cache)\n"
	 "\nExample:\n  ferry cache\n",
	 cmd_cache},
	{"workflow", "Register a workflow with the daemon to run by name, or list them.",
	 "ferry workflow register FILE [-o json]\n"
	 "       ferry workflow list [-o json]",
	 "Subcommands:\n"
	 "  register    store FILE's version with ferryd, with FILE's directory as where\n"
	 "              its runs run (ferry submit --workflow NAME, POST /runs\n"
	 "              {\"workflow\": NAME}); registering it again from elsewhere moves it\n"
	 "  list        registered versions, newest first, with their directories\n"
	 "\nOptions:\n"
	 "  -o, --output FORMAT   text (default) or json (the server's answer)\n"
	 "\nExamples:\n"
	 "  ferry workflow register workflows/digits.yaml\n"
	 "  ferry submit --workflow digits --watch\n",
	 cmd_workflow},
	{"dev", "Run a workflow in-process on this machine, for debugging.",
	 "ferry dev run FILE [--only STEP | --from STEP | --to STEP] [-p NAME=VALUE]...\n"
	 "       ferry dev step RUN STEP [-- COMMAND...]",
	 "dev run: runs the engine inside the ferry process on the embedded database; no\n"
	 "daemon needed. dev step: runs one step of an existing run again on this machine,\n"
	 "as it ran. See 'ferry dev run --help' and 'ferry dev step --help'.\n"
	 "\nExamples:\n  ferry dev run workflows/hello.yaml --only greet\n"
	 "  ferry dev step 12 train -- python3 -m pdb train.py\n",
	 cmd_dev},
	{"help", "Show help for ferry or one of its commands.",
	 "ferry help [COMMAND]",
	 "Example:\n  ferry help submit\n",
	 cmd_help},
};

const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

static void print_main_help(FILE *f)
{
	fprintf(f, "usage: ferry COMMAND [OPTIONS] [ARGS]\n\n"
		   "Ferry runs ML workflows; this is its command-line client.\n\nCommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\nOptions:\n"
		   "  -h, --help      show this help ('ferry COMMAND --help' for a command)\n"
		   "      --version   show the version\n"
		   "\nEnvironment:\n"
		   "  FERRY_URL        where ferryd listens (default: the URL in $FERRY_HOME/ferryd.url,\n"
		   "                   which ferryd writes, else " CLIENT_DEFAULT_URL ")\n"
		   "  FERRY_API_TOKEN  API token (default: read from $FERRY_HOME/api-token)\n"
		   "  FERRY_HOME       state directory (default ./.ferry)\n"
		   "\nExit status: 0 success, 1 the run failed or ferryd could not be reached,\n"
		   "2 usage or validation error.\n"
		   "\nExample:\n  ferry submit workflows/hello.yaml --watch\n");
}

/* True when the locale named by LC_ALL, LC_CTYPE or LANG is UTF-8. */
static bool locale_is_utf8(void)
{
	static const char *const vars[] = {"LC_ALL", "LC_CTYPE", "LANG"};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);
		if (v != NULL && *v != '\0')
			return strcasestr(v, "utf-8") != NULL || strcasestr(v, "utf8") != NULL;
	}
	return false;
}

static bool stdout_is_ansi_tty(void)
{
	const char *term = getenv("TERM");
	return isatty(STDOUT_FILENO) && term != NULL && *term != '\0' &&
	       strcmp(term, "dumb") != 0;
}

int main(int argc, char **argv)
{
	struct cli cli = {.utf8 = locale_is_utf8(), .tty = stdout_is_ansi_tty()};
	const struct command *cmd;
	struct ctx x;

	if (argc < 2) {
		print_main_help(stderr);
		return FX_USAGE;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		print_main_help(stdout);
		return FX_OK;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
		printf("ferry %s\n", FERRY_VERSION);
		return FX_OK;
	}
	cmd = find_command(argv[1]);
	if (cmd == NULL) {
		fprintf(stderr, "ferry: unknown %s '%s'\nRun 'ferry --help' for the list of commands.\n",
			argv[1][0] == '-' ? "option" : "command", argv[1]);
		return FX_USAGE;
	}
	x.cli = &cli;
	x.cmd = cmd;
	return cmd->run(&x, argc - 1, argv + 1);
}


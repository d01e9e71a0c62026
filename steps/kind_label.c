/*
 * kind_label — a step that opens a labelling task on a dataset and waits
 * for a person to continue it (label.c does the work: counting unlabelled
 * items, the webhook). Its `dataset` output is the data a model version
 * registered below it was trained on.
 */
#include "steps/steps.h"

#include "steps/label.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "steps/keys.h"

/* Claimed: the task is opened and the step left waiting, or it fails. */
static int label_prepare(struct step_result *res, json_t **env, const struct step_run *r)
{
	int error = label_step(r, res);

	(void)env;
	return error < 0 ? error : 1;
}

/* labels: a path below the dataset directory; "labels.csv" when absent. */
static json_t *parse_labels(struct cfg_key_ctx *c, const yaml_node_t *n)
{
	json_t *v = keys_string(c, n, "labels", 0);
	const char *s = json_string_value(v);
	char *padded;

	if (s == NULL) {
		json_decref(v);
		return json_string("labels.csv");
	}
	padded = xasprintf("/%s/", s);
	if (s[0] == '/')
		cfg_key_err(c, n, "labels %s must be a path relative to the dataset directory",
			 cfg_key_q(c, s));
	else if (strstr(padded, "/../") != NULL)
		cfg_key_err(c, n, "labels %s must not contain \"..\"; use a path below the dataset "
			 "directory", cfg_key_q(c, s));
	free(padded);
	return v;
}

/* webhook: an http:// or https:// URL with a host, no blanks or controls. */
static json_t *parse_webhook(struct cfg_key_ctx *c, const yaml_node_t *n)
{
	json_t *v = keys_string(c, n, "webhook", 0);
	const char *s = json_string_value(v), *host;
	size_t k;
	bool ok;

	if (s == NULL)
		return v;
	host = strncasecmp(s, "https://", 8) == 0 ? s + 8 :
	       strncasecmp(s, "http://", 7) == 0 ? s + 7 : NULL;
	ok = host != NULL && *host != '\0' && *host != '/';
	for (k = 0; ok && s[k] != '\0'; k++)
		ok = (unsigned char)s[k] > 0x20 && s[k] != 0x7f;
	if (!ok)
		cfg_key_err(c, n, "webhook %s must be an http:// or https:// URL, e.g. "
			 "https://labels.example.com/tasks", cfg_key_q(c, s));
	return v;
}

static int keys_labels(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = parse_labels(c, n);
	return 0;
}

static int keys_webhook(struct cfg_key_ctx *c, const yaml_node_t *n, json_t **out)
{
	*out = parse_webhook(c, n);
	return 0;
}

/*
 * Its keys: the items to label, where the labels are written (labels.csv
 * below the dataset by default: a label step always has them), the
 * labelling service to call and what a timeout does.
 */
static const struct step_key label_keys[] = {
	{KEY_DATASET, .required = 1, .hint = "the directory or file of items to label"},
	{.name = "labels", .flags = STK_PLAN, .absent = "null", .parse = keys_labels},
	{.name = "webhook", .flags = STK_PLAN, .absent = "null", .parse = keys_webhook},
	{KEY_ON_TIMEOUT},
	{0},
};

const struct step_kind kind_label = {
	.name = "label", .flags = SKF_DAEMON | SKF_INPUTS | SKF_DATASET,
	.command = SKC_FORBIDDEN, .no_command = "waits for a person and runs no command",
	.keys = label_keys,
	.prepare = label_prepare,
	.lane = label_lane,
};

/*
 * api_trace — see api_priv.h: FERRY_API_TRACE. The file is opened once,
 * O_APPEND, and each answer is one write() of one line, so the answers of
 * the API's threads (and of several daemons on one file) never interleave.
 * A body that is not JSON, or past TRACE_BODY_MAX, is recorded as null with
 * why; a streamed answer (a log, server-sent events) has no body here.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_priv.h"
#include "lib/util.h"

#define TRACE_BODY_MAX (1024 * 1024)

void api_trace_open(struct api *a)
{
	const char *path = getenv("FERRY_API_TRACE");

	a->trace_fd = -1;
	if (path == NULL || *path == '\0')
		return;
	a->trace_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (a->trace_fd < 0)
		flog_warn("FERRY_API_TRACE %s: %s; answers are not traced", path, strerror(errno));
}

void api_trace(const struct api *a, const struct req *q, const char *method, const char *url,
	       const struct reply *r)
{
	const char *ct = r->content_type ? r->content_type : "application/json";
	json_t *line, *body = NULL;
	char *txt;

	if (a->trace_fd < 0)
		return;
	if (r->resp == NULL && r->body && strncmp(ct, "application/json", 16) == 0 && strlen(r->body) <= TRACE_BODY_MAX)
		body = json_loads(r->body, JSON_DECODE_ANY, NULL);
	line = json_pack("{s:s, s:s, s:o, s:i, s:s, s:o, s:b}", "method", method, "url", url, "route",
			 q && q->rt ? json_string(q->rt->pattern) : json_null(), "status", (int)r->status,
			 "content_type", r->resp ? "(streamed)" : ct, "body", body ? body : json_null(), "streamed",
			 r->resp != NULL);
	if (line == NULL)
		return;
	if (r->resp == NULL && r->body && body == NULL && strncmp(ct, "application/json", 16) == 0)
		json_object_set_new(line, "body_error", json_string("not JSON, or too large to trace"));
	txt = json_dumps(line, JSON_COMPACT);
	if (txt) {
		size_t n = strlen(txt);
		txt[n] = '\n';
		(void)!write(a->trace_fd, txt, n + 1); /* one write: one line, whole */
		free(txt);
	}
	json_decref(line);
}

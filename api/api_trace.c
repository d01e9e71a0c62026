/*
 * api_trace — see api_priv.h: FERRY_API_TRACE. The file is opened once,
 * O_APPEND, and each answer is one write() of one line, so the answers of
 * the API's threads (and of several daemons on one file) never interleave.
 * A JSON body goes in as the answer had it (not parsed here: the trace
 * costs the request a write); one past TRACE_BODY_MAX is recorded as null
 * with why, and a streamed answer (a log, server-sent events) has none.
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
	int json_body = r->resp == NULL && r->body && strncmp(ct, "application/json", 16) == 0;
	size_t blen = json_body ? strlen(r->body) : 0;
	json_t *line;
	char *head, *txt;
	size_t hlen;

	if (a->trace_fd < 0)
		return;
	line = json_pack("{s:s, s:s, s:o, s:i, s:s, s:b}", "method", method, "url", url, "route",
			 q && q->rt ? json_string(q->rt->pattern) : json_null(), "status", (int)r->status,
			 "content_type", r->resp ? "(streamed)" : ct, "streamed", r->resp != NULL);
	if (line == NULL)
		return;
	if (json_body && blen > TRACE_BODY_MAX)
		json_object_set_new(line, "body_error", json_string("too large to trace"));
	head = json_dumps(line, JSON_COMPACT);
	json_decref(line);
	if (head == NULL)
		return;
	/* the body as the answer had it (JSON text already: not parsed again here), spliced in last */
	hlen = strlen(head) - 1; /* without its closing brace */
	if (json_body && blen <= TRACE_BODY_MAX) {
		txt = xasprintf("%.*s,\"body\":%s}\n", (int)hlen, head, r->body);
		/* an indented body's line breaks are whitespace between tokens (inside strings they are
		 * escaped): blanks, so the line stays one line */
		for (char *p = txt + hlen; p[1] != '\0'; p++)
			if (*p == '\n' || *p == '\r')
				*p = ' ';
	} else
		txt = xasprintf("%.*s,\"body\":null}\n", (int)hlen, head);
	(void)!write(a->trace_fd, txt, strlen(txt)); /* one write: one line, whole */
	free(txt);
	free(head);
}

/*
 * exec_docker_api — the `docker` row's client of the Docker Engine API
 * v1.41 on a unix socket, with libcurl (see exec_docker.c's design note):
 * one bounded request at a time, an answer parsed as JSON; podman's
 * service speaks the same API.
 */
#include "exec/exec_docker.h"

#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

/* ---- the Engine API over a unix socket -------------------------------------- */

/* The socket path of FERRY_DOCKER_HOST; NULL with the message when malformed. */
const char *dk_socket(void)
{
	const char *h = getenv("FERRY_DOCKER_HOST");

	if (h == NULL || *h == '\0')
		return "/var/run/docker.sock";
	if (strncmp(h, "unix://", 7) != 0 || h[7] != '/') {
		ferry_error_set("FERRY_DOCKER_HOST %s must be unix:///PATH (a unix socket)", h);
		return NULL;
	}
	return h + 7;
}

static size_t dk_collect(char *p, size_t size, size_t n, void *arg)
{
	struct dk_buf *b = arg;
	size_t len = size * n;

	if (b->n + len > (1u << 24))
		return 0; /* an answer this big is not one we asked for */
	b->p = xrealloc(b->p, b->n + len + 1);
	memcpy(b->p + b->n, p, len);
	b->n += len;
	b->p[b->n] = '\0';
	return len;
}

/* An easy handle for METHOD path on the socket, answers collected into b. */
CURL *dk_easy(const char *sock, const char *method, const char *path, const char *body,
		     struct curl_slist *hdr, struct dk_buf *b, long timeout_ms)
{
	CURL *h = curl_easy_init();
	char *url = xasprintf("http://docker" DK_API "%s", path);

	if (h == NULL) {
		free(url);
		return NULL;
	}
	curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, sock);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms ? timeout_ms : 5000L);
	if (timeout_ms)
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	if (body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	} else if (strcmp(method, "POST") == 0) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
	}
	if (b) {
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, dk_collect);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
	}
	free(url);
	return h;
}

/*
 * One request; *code gets the HTTP status and *out (when given) the parsed
 * JSON answer (the caller's). FERRY_ERROR with the message when the engine
 * did not answer; any HTTP status is a success here (callers decide).
 */
int dk_call(long *code, json_t **out, const char *sock, const char *method, const char *path,
		   const json_t *body, long timeout_ms)
{
	struct dk_buf b = {0};
	struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	CURL *h = dk_easy(sock, method, path, text, hdr, &b, timeout_ms);
	CURLcode rc;
	int error = FERRY_ERROR;

	*code = 0;
	if (out)
		*out = NULL;
	if (h == NULL) {
		ferry_error_set("curl_easy_init failed");
		goto out;
	}
	rc = curl_easy_perform(h);
	if (rc != CURLE_OK) {
		ferry_error_set("the container engine at unix://%s did not answer %s %s: %s (is it "
				"running? deploy/dockerd.sh starts one)", sock, method, path,
				curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
	if (out && b.p)
		*out = json_loads(b.p, JSON_DECODE_ANY, NULL);
	error = FERRY_OK;
out:
	if (h)
		curl_easy_cleanup(h);
	curl_slist_free_all(hdr);
	free(text);
	free(b.p);
	return error;
}

/* The "message" of an error answer, or "HTTP N". */
char *dk_message(long code, const json_t *ans)
{
	const char *m = json_string_value(json_object_get(ans, "message"));

	return m ? xstrdup(m) : xasprintf("HTTP %ld", code);
}

/* Removes container name (and its anonymous volumes); 0 when gone. */
int dk_remove(const char *sock, const char *name, long timeout_ms)
{
	char *path = xasprintf("/containers/%s?force=1&v=1", name);
	long code;
	int error = dk_call(&code, NULL, sock, "DELETE", path, NULL, timeout_ms);

	free(path);
	if (error == 0 && code != 204 && code != 404) {
		ferry_error_set("removing container %s: HTTP %ld", name, code);
		error = FERRY_ERROR;
	}
	return error;
}

/* Whether a create was refused because the name is taken (dockerd: 409; podman's service: 500 "… already in use …"). */
int dk_name_taken(long code, const json_t *ans)
{
	const char *m = json_string_value(json_object_get(ans, "message"));

	return code == 409 || (code == 500 && m != NULL && strstr(m, "in use") != NULL);
}

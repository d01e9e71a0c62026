/*
 * exec_docker — what the `docker` row (exec_docker.c) shares between its
 * files: the Engine API client (exec_docker_api.c) and the per-attempt
 * shim (exec_docker_shim.c). Private to exec/: nothing outside the row
 * includes it.
 */
#ifndef FERRY_EXEC_DOCKER_H
#define FERRY_EXEC_DOCKER_H

#include <curl/curl.h>
#include <jansson.h>

#include "exec/exec.h"

#define DK_API "/v1.41"
#define DK_QUICK_MS 2000     /* a request made on the engine loop */
#define DK_SHIM_MS 120000    /* a request the shim makes (create, start, remove) */
#define DK_LOST_MS 300000    /* how long the shim waits for an unreachable engine */

/* ---- the Engine API over a unix socket (exec_docker_api.c) ---- */

/* The socket path of FERRY_DOCKER_HOST; NULL with the message when malformed. */
const char *dk_socket(void);

/* A growing buffer an answer is collected into (dk_easy). */
struct dk_buf {
	char *p;
	size_t n;
};

/* An easy handle for METHOD path on the socket, answers collected into b (NULL: not collected). */
CURL *dk_easy(const char *sock, const char *method, const char *path, const char *body,
	      struct curl_slist *hdr, struct dk_buf *b, long timeout_ms);

/*
 * One request; *code gets the HTTP status and *out (when given) the parsed
 * JSON answer (the caller's). FERRY_ERROR with the message when the engine
 * did not answer; any HTTP status is a success here (callers decide).
 */
int dk_call(long *code, json_t **out, const char *sock, const char *method, const char *path,
	    const json_t *body, long timeout_ms);

/* The "message" of an error answer, or "HTTP N"; newly allocated. */
char *dk_message(long code, const json_t *ans);

/* Removes container name (and its anonymous volumes); 0 when gone. */
int dk_remove(const char *sock, const char *name, long timeout_ms);

/* Whether a create was refused because the name is taken (dockerd: 409; podman's service: 500). */
int dk_name_taken(long code, const json_t *ans);

/* ---- the shim (exec_docker_shim.c) ---- */

/*
 * Forks the shim for job: it creates container name from body (NULL:
 * follows the existing container again) and records its life in
 * job->dir/status and its log in job->dir/log. Fills the job's pid and
 * handle; 0 or FERRY_ERROR with the message.
 */
int dk_spawn(struct exec_job *job, const char *sock, const char *name, const json_t *body);

#endif

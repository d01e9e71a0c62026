/*
 * client — the CLI's HTTP client for the ferryd REST API (libcurl + jansson).
 * It knows where the daemon is (FERRY_URL), how to authenticate (bearer
 * token from FERRY_API_TOKEN or $FERRY_HOME/api-token, actor header from the
 * login name), sends JSON, parses JSON answers and turns error answers
 * ({"error":{"code","message","field","details"}}) into a return code and a
 * message in the per-thread error buffer.
 */
#ifndef FERRY_CLIENT_H
#define FERRY_CLIENT_H

#include <jansson.h>
#include <stdbool.h>

#include "lib/util.h"

#ifndef FERRY_VERSION
#define FERRY_VERSION "0.1.0"
#endif

/* Daemon address when FERRY_URL is unset and no daemon published one (ferry_address_file()). */
#define CLIENT_DEFAULT_URL "http://127.0.0.1:8080"

typedef struct ferry_client ferry_client;

/*
 * Creates a client from the environment: FERRY_URL (else the URL ferryd
 * published in FERRY_ADDRESS_FILE or $FERRY_HOME/ferryd.url, else
 * CLIENT_DEFAULT_URL), FERRY_API_TOKEN (else
 * the file $FERRY_HOME/api-token, FERRY_HOME defaulting to ./.ferry), and
 * the effective user's login name. A missing token is not an error (the
 * daemon will answer 401). *out is the caller's: client_free().
 */
int client_open(ferry_client **out);

/* Releases the client; accepts NULL. */
void client_free(ferry_client *c);

/* The daemon base URL in use (no trailing slash); owned by c. */
const char *client_url(const ferry_client *c);

/*
 * When the URL came from the address file, reads it again: a daemon
 * restarted on another port (FERRY_LISTEN=…:0) is found there. True when
 * the URL changed. For the reconnect loops of follow and watch.
 */
bool client_refresh_url(ferry_client *c);

/*
 * Where the token came from: "FERRY_API_TOKEN" or the token file's path; NULL
 * when there is no token, and then *why says why. Both owned by c.
 */
const char *client_token_source(const ferry_client *c, const char **why);

/*
 * Sends METHOD to base URL + "/api/v1" + path (path starts with '/' and may
 * carry a query string). body, when not NULL, is sent as JSON. On a 2xx
 * answer returns 0 and, when out is not NULL, *out is the parsed JSON body
 * (the caller json_decref()s it; an empty or non-JSON body is an error).
 * Otherwise returns a negative code with the message in ferry_error_last():
 *   FERRY_EINVALID   400 or 422 (bad input)
 *   FERRY_ENOTFOUND  404
 *   FERRY_ECONFLICT  409 (not valid in the run's current state)
 *   FERRY_ERROR      any other status, or no answer at all
 * client_last_status() and client_last_details() describe the failure.
 */
int client_request(json_t **out, ferry_client *c, const char *method,
		   const char *path, const json_t *body);

/*
 * What client_stream() hands the answer of a 2xx request to. begin, when not
 * NULL, is called once the answer's headers are in (before any data; also
 * when the body is empty), data for each piece of the body as it arrives.
 * Either returns 0 to go on or -1 to abandon the transfer (client_stream()
 * then returns FERRY_ERROR with the message the callback set).
 */
struct client_sink {
	int (*begin)(void *arg, ferry_client *c);
	int (*data)(void *arg, const char *buf, size_t len);
	void *arg;
};

/*
 * Sends GET base URL + "/api/v1" + path and streams the body of a 2xx answer
 * to sink as it arrives, for answers that are not JSON (logs). With follow
 * the transfer has no time limit (it lasts as long as the job it follows;
 * TCP keep-alive notices a vanished daemon); without it, a transfer that
 * stalls for 30 s is abandoned. Error answers are decoded and returned as
 * client_request() does. The answer's headers stay readable with
 * client_last_header() until the next request.
 */
int client_stream(ferry_client *c, const char *path, int follow, const struct client_sink *sink);

/*
 * The value of header name (case-insensitive) in the last client_stream()
 * answer, or NULL. Borrowed: valid until the next request or client_free().
 */
const char *client_last_header(const ferry_client *c, const char *name);

/* HTTP status of the last request; 0 when no answer was received. */
long client_last_status(const ferry_client *c);

/*
 * The "details" array of the last error answer (strings), or NULL. Borrowed:
 * valid until the next request or client_free().
 */
const json_t *client_last_details(const ferry_client *c);

/* Percent-encodes s for use in a URL path or query; the caller frees it. */
char *client_escape(const char *s);

#endif

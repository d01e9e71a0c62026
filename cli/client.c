/*
 * client — HTTP + JSON for the `ferry` CLI. One libcurl easy handle per
 * client, reused across requests so `ferry watch` polls over one kept-alive
 * connection; options are reset and set again for every request. Every
 * request carries the bearer token and the actor header and is bounded
 * (connect 5 s, whole request 30 s, answers up to 64 MiB). Logs are not
 * JSON and may stream for as long as a job runs: client_stream() hands them
 * to a callback as they arrive, bounded instead by a 30 s stall limit, or,
 * when following, by TCP keep-alive alone. Error answers are decoded into a
 * message (ferry_error_last()), the HTTP status and the optional details
 * list, so the caller only decides how to print them.
 */
#include "cli/client.h"

#include <ctype.h>
#include <curl/curl.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONNECT_TIMEOUT_MS 5000L
#define REQUEST_TIMEOUT_MS 30000L
#define MAX_BODY (64u * 1024u * 1024u)
#define STALL_LIMIT_S 30L      /* a plain stream that sends nothing this long is abandoned */
#define KEEPALIVE_IDLE_S 30L   /* a followed stream probes a silent peer after this */

struct ferry_client {
	CURL *curl;
	char *url;          /* base, no trailing slash */
	char *url_source;   /* where url came from: "FERRY_URL", the address file's path, or "the default" */
	bool url_published; /* url came from the address file: client_refresh_url may move it */
	char *auth_header;  /* "Authorization: Bearer …" or NULL */
	char *actor_header; /* "X-Ferry-Actor: …" or NULL */
	char *token_source; /* "FERRY_API_TOKEN" or a path; NULL when no token */
	char *token_missing; /* why there is no token */
	long status;        /* of the last request, 0 = no answer */
	json_t *details;    /* of the last error answer, or NULL */
	json_t *headers;    /* of the last client_stream() answer: lowercase name -> value */
	char errbuf[CURL_ERROR_SIZE];
};

/* The growing response body. */
struct body {
	char *data;
	size_t len, cap;
	int too_big;
};

static size_t body_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct body *b = userdata;
	size_t n = size * nmemb;

	if (b->len + n > MAX_BODY) {
		b->too_big = 1;
		return 0; /* makes curl fail with CURLE_WRITE_ERROR */
	}
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 8192;
		while (cap < b->len + n + 1)
			cap *= 2;
		b->data = xrealloc(b->data, cap);
		b->cap = cap;
	}
	memcpy(b->data + b->len, ptr, n);
	b->len += n;
	b->data[b->len] = '\0';
	return n;
}

/* Returns a copy of s without leading and trailing whitespace. */
static char *trim_dup(const char *s)
{
	const char *end;

	while (*s && isspace((unsigned char)*s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		end--;
	return xstrndup(s, (size_t)(end - s));
}

/* A header value must not carry control characters (header injection). */
static int header_value_ok(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 0;
	return 1;
}

/* Loads the token: FERRY_API_TOKEN, else $FERRY_HOME/api-token. */
static int load_token(ferry_client *c)
{
	const char *env = getenv("FERRY_API_TOKEN");
	const char *home = getenv("FERRY_HOME");
	char *path = NULL, *text = NULL, *token = NULL;
	int error = FERRY_OK;

	if (env != NULL && *env != '\0') {
		token = trim_dup(env);
		c->token_source = xstrdup("FERRY_API_TOKEN");
	} else {
		if (home == NULL || *home == '\0')
			home = "./.ferry";
		path = xasprintf("%s/api-token", home);
		if (file_read(&text, NULL, path) < 0) {
			/* no token: the daemon will say 401 */
			c->token_missing = xasprintf("FERRY_API_TOKEN is unset and %s",
						     ferry_error_last());
			goto out;
		}
		token = trim_dup(text);
		c->token_source = xstrdup(path);
	}
	if (*token == '\0') {
		c->token_missing = xasprintf("%s is empty", c->token_source);
		free(c->token_source);
		c->token_source = NULL;
		goto out;
	}
	if (!header_value_ok(token)) {
		ferry_error_set("the API token from %s contains control characters",
				c->token_source);
		error = FERRY_EINVALID;
		goto out;
	}
	c->auth_header = xasprintf("Authorization: Bearer %s", token);
out:
	free(path);
	free(text);
	free(token);
	return error;
}

/*
 * The URL ferryd published in its address file (FERRY_ADDRESS_FILE, else
 * $FERRY_HOME/ferryd.url): *out is its first line, or NULL when there is
 * no file. FERRY_EINVALID when the file holds no http(s) URL.
 */
static int published_url(char **out, char **path)
{
	char *text = NULL;
	int error = FERRY_OK;

	*out = NULL;
	*path = ferry_address_file();
	if (file_read(&text, NULL, *path) < 0)
		goto out; /* no daemon published one here */
	text[strcspn(text, "\r\n")] = '\0';
	if ((strncmp(text, "http://", 7) != 0 && strncmp(text, "https://", 8) != 0) || !header_value_ok(text)) {
		ferry_error_set("%s does not hold ferryd's URL (e.g. http://127.0.0.1:8080); remove it, "
				"or set FERRY_URL", *path);
		error = FERRY_EINVALID;
		goto out;
	}
	*out = text;
	text = NULL;
out:
	free(text);
	return error;
}

/* The login name of the effective user, else $USER; NULL when neither. */
static char *actor_name(void)
{
	struct passwd *pw = getpwuid(geteuid());
	const char *user;

	if (pw != NULL && pw->pw_name != NULL && *pw->pw_name != '\0')
		return xstrdup(pw->pw_name);
	user = getenv("USER");
	if (user != NULL && *user != '\0' && header_value_ok(user))
		return xstrdup(user);
	return NULL;
}

int client_open(ferry_client **out)
{
	ferry_client *c = xcalloc(1, sizeof(*c));
	const char *url = getenv("FERRY_URL");
	char *actor = NULL, *published = NULL, *path = NULL;
	size_t n;
	int error = FERRY_OK;

	*out = NULL;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		ferry_error_set("cannot initialise libcurl");
		free(c);
		return FERRY_ERROR;
	}
	if (url != NULL && *url != '\0') {
		c->url_source = xstrdup("FERRY_URL");
	} else {
		/* where a daemon of this FERRY_HOME says it listens, else the default */
		if ((error = published_url(&published, &path)) < 0)
			goto out;
		url = published ? published : CLIENT_DEFAULT_URL;
		c->url_source = published ? xstrdup(path) : xstrdup("the default");
		c->url_published = published != NULL;
	}
	if (!header_value_ok(url)) {
		ferry_error_set("FERRY_URL contains control characters");
		error = FERRY_EINVALID;
		goto out;
	}
	c->url = xstrdup(url);
	n = strlen(c->url);
	while (n > 0 && c->url[n - 1] == '/')
		c->url[--n] = '\0';
	if ((error = load_token(c)) < 0)
		goto out;
	actor = actor_name();
	if (actor != NULL)
		c->actor_header = xasprintf("X-Ferry-Actor: %s", actor);
	c->curl = curl_easy_init();
	if (c->curl == NULL) {
		ferry_error_set("cannot initialise libcurl");
		error = FERRY_ERROR;
		goto out;
	}
	*out = c;
	c = NULL;
out:
	free(actor);
	free(published);
	free(path);
	client_free(c);
	return error;
}

void client_free(ferry_client *c)
{
	if (c == NULL)
		return;
	if (c->curl != NULL)
		curl_easy_cleanup(c->curl);
	free(c->url);
	free(c->url_source);
	free(c->auth_header);
	free(c->actor_header);
	free(c->token_source);
	free(c->token_missing);
	json_decref(c->details);
	json_decref(c->headers);
	free(c);
	curl_global_cleanup();
}

bool client_refresh_url(ferry_client *c)
{
	char *url = NULL, *path = NULL;
	size_t n;
	bool moved = false;

	if (!c->url_published || published_url(&url, &path) < 0 || url == NULL)
		goto out;
	n = strlen(url);
	while (n > 0 && url[n - 1] == '/')
		url[--n] = '\0';
	if (strcmp(url, c->url) != 0) {
		free(c->url);
		c->url = url;
		url = NULL;
		moved = true;
	}
out:
	free(url);
	free(path);
	return moved;
}

const char *client_url(const ferry_client *c)
{
	return c->url;
}

const char *client_token_source(const ferry_client *c, const char **why)
{
	*why = c->token_missing;
	return c->token_source;
}

long client_last_status(const ferry_client *c)
{
	return c->status;
}

const json_t *client_last_details(const ferry_client *c)
{
	return c->details;
}

const char *client_last_header(const ferry_client *c, const char *name)
{
	char key[128];
	size_t i;

	for (i = 0; name[i] != '\0' && i + 1 < sizeof(key); i++)
		key[i] = (char)tolower((unsigned char)name[i]);
	key[i] = '\0';
	return json_string_value(json_object_get(c->headers, key));
}

char *client_escape(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = xmalloc(strlen(s) * 3 + 1), *p = out;

	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
			*p++ = (char)ch;
		} else {
			*p++ = '%';
			*p++ = hex[ch >> 4];
			*p++ = hex[ch & 15];
		}
	}
	*p = '\0';
	return out;
}

/* Maps an HTTP error status to the project's return codes. */
static int code_for_status(long status)
{
	switch (status) {
	case 400:
	case 422:
		return FERRY_EINVALID;
	case 404:
		return FERRY_ENOTFOUND;
	case 409:
		return FERRY_ECONFLICT;
	default:
		return FERRY_ERROR;
	}
}

/* Sets the error message for a transport failure (no HTTP answer). */
static void transport_error(const ferry_client *c, CURLcode rc, const struct body *b)
{
	const char *why = c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc);

	if (b->too_big) {
		ferry_error_set("ferryd at %s sent an answer larger than %u MiB",
				c->url, MAX_BODY / (1024u * 1024u));
		return;
	}
	switch (rc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		ferry_error_set("cannot reach ferryd at %s (%s; address from %s); is the daemon running? "
				"Set FERRY_URL to point elsewhere.", c->url, why, c->url_source);
		break;
	case CURLE_URL_MALFORMAT:
	case CURLE_UNSUPPORTED_PROTOCOL:
		ferry_error_set("FERRY_URL=%s is not a usable http:// or https:// address (%s)",
				c->url, why);
		break;
	case CURLE_OPERATION_TIMEDOUT:
		ferry_error_set("ferryd at %s did not answer in time (%s); "
				"is it overloaded or stuck?", c->url, why);
		break;
	default:
		ferry_error_set("request to ferryd at %s failed (%s)", c->url, why);
		break;
	}
}

/* Decodes an error answer: the message into the error buffer, details kept on c. */
static void answer_error(ferry_client *c, const struct body *b)
{
	json_t *root = NULL, *err;
	const char *message = NULL;

	if (b->len > 0)
		root = json_loadb(b->data, b->len, 0, NULL);
	err = json_object_get(root, "error");
	if (json_is_object(err)) {
		message = json_string_value(json_object_get(err, "message"));
		if (json_is_array(json_object_get(err, "details")))
			c->details = json_incref(json_object_get(err, "details"));
	}
	if (message != NULL && *message != '\0')
		ferry_error_set("%s", message);
	else if (c->status == 401)
		ferry_error_set("ferryd at %s refused the request: not authenticated", c->url);
	else
		ferry_error_set("ferryd at %s answered HTTP %ld", c->url, c->status);
	json_decref(root);
}

/* Sets the per-request options on the (reset) easy handle. */
static void set_options(ferry_client *c, const char *url, const char *method,
			const char *payload, struct curl_slist *headers, struct body *b)
{
	curl_easy_setopt(c->curl, CURLOPT_URL, url);
	curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
	curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, REQUEST_TIMEOUT_MS);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(c->curl, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
	curl_easy_setopt(c->curl, CURLOPT_USERAGENT, "ferry-cli/" FERRY_VERSION);
	curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, c->errbuf);
	curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, body_write);
	curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, b);
	if (strcmp(method, "GET") == 0) {
		curl_easy_setopt(c->curl, CURLOPT_HTTPGET, 1L);
	} else {
		curl_easy_setopt(c->curl, CURLOPT_POST, 1L);
		curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, payload ? payload : "");
		curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE,
				 (curl_off_t)(payload ? strlen(payload) : 0));
		if (strcmp(method, "POST") != 0)
			curl_easy_setopt(c->curl, CURLOPT_CUSTOMREQUEST, method);
	}
}

/* Forgets what the previous request left behind. */
static void reset_last(ferry_client *c)
{
	c->status = 0;
	c->errbuf[0] = '\0';
	json_decref(c->details);
	c->details = NULL;
	json_object_clear(c->headers);
}

/*
 * The headers every request carries: content type (or none), accept, the
 * token and the actor. NULL when out of memory (message set).
 */
static struct curl_slist *request_headers(const ferry_client *c, bool json_body,
					  const char *accept)
{
	struct curl_slist *h = NULL, *next;
	const char *lines[5];
	size_t n = 0;

	/* without a body, drop the form content type curl would send for POST */
	lines[n++] = json_body ? "Content-Type: application/json" : "Content-Type:";
	lines[n++] = accept;
	lines[n++] = "Expect:";
	if (c->auth_header != NULL)
		lines[n++] = c->auth_header;
	if (c->actor_header != NULL)
		lines[n++] = c->actor_header;
	for (size_t i = 0; i < n; i++) {
		next = curl_slist_append(h, lines[i]);
		if (next == NULL) {
			curl_slist_free_all(h);
			ferry_error_set("out of memory building request headers");
			return NULL;
		}
		h = next;
	}
	return h;
}

int client_request(json_t **out, ferry_client *c, const char *method,
		   const char *path, const json_t *body)
{
	struct curl_slist *headers = NULL;
	struct body b = {0};
	char *url = NULL, *payload = NULL;
	json_t *root = NULL;
	json_error_t jerr;
	CURLcode rc;
	int error = FERRY_OK;

	if (out != NULL)
		*out = NULL;
	reset_last(c);

	url = xasprintf("%s/api/v1%s", c->url, path);
	if (body != NULL) {
		payload = json_dumps(body, JSON_COMPACT);
		if (payload == NULL) {
			ferry_error_set("cannot encode the request body as JSON");
			error = FERRY_ERROR;
			goto out;
		}
	}
	headers = request_headers(c, body != NULL, "Accept: application/json");
	if (headers == NULL) {
		error = FERRY_ERROR;
		goto out;
	}

	curl_easy_reset(c->curl);
	set_options(c, url, method, payload, headers, &b);
	rc = curl_easy_perform(c->curl);
	if (rc != CURLE_OK) {
		transport_error(c, rc, &b);
		error = FERRY_ERROR;
		goto out;
	}
	curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &c->status);
	if (c->status < 200 || c->status > 299) {
		answer_error(c, &b);
		error = code_for_status(c->status);
		goto out;
	}
	if (out == NULL)
		goto out;
	if (b.len == 0) {
		ferry_error_set("ferryd at %s sent an empty answer to %s %s",
				c->url, method, path);
		error = FERRY_ERROR;
		goto out;
	}
	root = json_loadb(b.data, b.len, 0, &jerr);
	if (root == NULL) {
		ferry_error_set("ferryd at %s sent invalid JSON to %s %s: %s",
				c->url, method, path, jerr.text);
		error = FERRY_ERROR;
		goto out;
	}
	*out = root;
out:
	curl_slist_free_all(headers);
	free(payload);
	free(url);
	free(b.data);
	return error;
}

/* ---- streamed answers ---- */

/* Where one client_stream() transfer stands. */
struct stream {
	ferry_client *c;
	const struct client_sink *sink;
	struct body err;  /* the body of an error answer, for answer_error() */
	bool ok;          /* the final answer is a 2xx */
	bool begun;       /* sink->begin has been called */
	bool aborted;     /* a callback asked to stop */
};

/* Calls sink->begin once; false when it asked to stop. */
static bool stream_begin(struct stream *st)
{
	if (st->begun)
		return true;
	st->begun = true;
	if (st->sink->begin != NULL && st->sink->begin(st->sink->arg, st->c) < 0) {
		st->aborted = true;
		return false;
	}
	return true;
}

/*
 * One header line of the answer (CRLF included). A status line starts a new
 * set (an interim 1xx answer comes first); the blank line ends it, and for a
 * 2xx answer the sink begins there.
 */
static size_t stream_header(char *buf, size_t size, size_t nitems, void *userdata)
{
	struct stream *st = userdata;
	size_t n = size * nitems, name_len, i;
	const char *colon, *v, *end = buf + n;
	char *name;
	json_t *value;
	long status = 0;

	while (end > buf && (end[-1] == '\r' || end[-1] == '\n'))
		end--;
	if (end == buf) {
		curl_easy_getinfo(st->c->curl, CURLINFO_RESPONSE_CODE, &status);
		if (status >= 200) {
			st->ok = status <= 299;
			if (st->ok && !stream_begin(st))
				return 0;
		}
		return n;
	}
	if (n >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
		json_object_clear(st->c->headers);
		return n;
	}
	colon = memchr(buf, ':', (size_t)(end - buf));
	if (colon == NULL || colon == buf)
		return n;
	name_len = (size_t)(colon - buf);
	name = xstrndup(buf, name_len);
	for (i = 0; i < name_len; i++)
		name[i] = (char)tolower((unsigned char)name[i]);
	for (v = colon + 1; v < end && (*v == ' ' || *v == '\t'); v++)
		;
	value = json_stringn(v, (size_t)(end - v)); /* NULL when not UTF-8: dropped */
	if (value != NULL)
		json_object_set_new(st->c->headers, name, value);
	free(name);
	return n;
}

static size_t stream_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct stream *st = userdata;
	size_t n = size * nmemb;

	if (!st->ok)
		return body_write(ptr, size, nmemb, &st->err);
	if (!stream_begin(st))
		return 0;
	if (st->sink->data != NULL && st->sink->data(st->sink->arg, ptr, n) < 0) {
		st->aborted = true;
		return 0; /* makes curl fail with CURLE_WRITE_ERROR */
	}
	return n;
}

int client_stream(ferry_client *c, const char *path, int follow, const struct client_sink *sink)
{
	struct curl_slist *headers = NULL;
	struct stream st = {.c = c, .sink = sink};
	char *url = NULL;
	CURLcode rc;
	int error = FERRY_OK;

	reset_last(c);
	if (c->headers == NULL)
		c->headers = json_object();
	url = xasprintf("%s/api/v1%s", c->url, path);
	headers = request_headers(c, false, "Accept: text/plain, application/json");
	if (headers == NULL) {
		error = FERRY_ERROR;
		goto out;
	}
	curl_easy_reset(c->curl);
	set_options(c, url, "GET", NULL, headers, &st.err);
	curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, stream_write);
	curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, &st);
	curl_easy_setopt(c->curl, CURLOPT_HEADERFUNCTION, stream_header);
	curl_easy_setopt(c->curl, CURLOPT_HEADERDATA, &st);
	curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, 0L);
	if (follow) {
		curl_easy_setopt(c->curl, CURLOPT_TCP_KEEPALIVE, 1L);
		curl_easy_setopt(c->curl, CURLOPT_TCP_KEEPIDLE, KEEPALIVE_IDLE_S);
		curl_easy_setopt(c->curl, CURLOPT_TCP_KEEPINTVL, 10L);
	} else {
		curl_easy_setopt(c->curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(c->curl, CURLOPT_LOW_SPEED_TIME, STALL_LIMIT_S);
	}
	rc = curl_easy_perform(c->curl);
	if (st.aborted) {
		error = FERRY_ERROR; /* the callback set the message */
		goto out;
	}
	if (rc != CURLE_OK) {
		transport_error(c, rc, &st.err);
		error = FERRY_ERROR;
		goto out;
	}
	curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &c->status);
	if (c->status < 200 || c->status > 299) {
		answer_error(c, &st.err);
		error = code_for_status(c->status);
		goto out;
	}
	if (!stream_begin(&st)) /* an answer with no header block at all */
		error = FERRY_ERROR;
out:
	curl_slist_free_all(headers);
	free(st.err.data);
	free(url);
	return error;
}

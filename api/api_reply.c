/*
 * api_reply — what every handler file uses to answer and to read a request
 * (declared in api_priv.h): JSON replies and errors in the one error shape,
 * store errors mapped onto statuses, the actor of a request, and the JSON
 * body and its optional fields checked with the field named. Requests are
 * read strictly: a body field or query parameter that the route does not
 * declare (api_route's fields, query) is a 400 naming it and listing the
 * valid ones, so a typo ("frm") is never silently ignored.
 */
#include "api/api_priv.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

/* ---- replies ---- */

void reply_json(struct reply *r, unsigned status, char *body)
{
	r->status = status;
	r->body = body;
}

void reply_error(struct reply *r, unsigned status, const char *code, const char *field,
		 const char *message, const cfg_errors *details)
{
	json_t *err = json_pack("{s:s, s:s}", "code", code, "message", message), *root;

	if (field)
		json_object_set_new(err, "field", json_string(field));
	if (details && details->len > 0) {
		json_t *arr = json_array();
		for (size_t i = 0; i < details->len; i++)
			json_array_append_new(arr, json_string(details->items[i]));
		json_object_set_new(err, "details", arr);
	}
	root = json_pack("{s:o}", "error", err);
	r->status = status;
	r->body = json_dumps(root, JSON_COMPACT);
	json_decref(root);
}

/* Maps a store error onto a reply. */
void reply_store_error(struct reply *r, int error)
{
	switch (error) {
	case FERRY_ENOTFOUND:
		reply_error(r, 404, "not_found", NULL, ferry_error_last(), NULL);
		break;
	case FERRY_ECONFLICT:
		reply_error(r, 409, "conflict", NULL, ferry_error_last(), NULL);
		break;
	case FERRY_EINVALID:
		reply_error(r, 400, "invalid", NULL, ferry_error_last(), NULL);
		break;
	case FERRY_EDB:
		reply_error(r, 503, "database_unavailable", NULL, ferry_error_last(), NULL);
		break;
	default:
		reply_error(r, 500, "internal", NULL, ferry_error_last(), NULL);
	}
}

/* ---- helpers ---- */

/* Whether s[0..n) is well-formed UTF-8 (no overlongs, no surrogates). */
int utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + n;

	while (p < end) {
		unsigned c = *p++;
		int more = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
		unsigned cp = more == 1 ? c & 0x1f : more == 2 ? c & 0x0f : c & 0x07;

		if (more < 0 || end - p < more)
			return 0;
		for (int i = 0; i < more; i++) {
			if ((p[i] & 0xc0) != 0x80)
				return 0;
			cp = (cp << 6) | (p[i] & 0x3f);
		}
		p += more;
		if ((more == 1 && cp < 0x80) || (more == 2 && cp < 0x800) || (more == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff) || c == 0)
			return 0;
	}
	return 1;
}

/* Whether the connection comes from this machine (127.0.0.0/8, ::1, or ::ffff:127.x.y.z). */
static int from_loopback(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci = conn ? MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS)
						  : NULL;
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;

	if (sa == NULL)
		return 0;
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a6 = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
	}
	return 0;
}

/*
 * Who did it: a named token's name. For the daemon's own token (admin, the
 * one the CLI on the daemon's machine reads) used from this machine, a
 * printable X-Ferry-Actor (the person at that CLI) is recorded beside it,
 * "admin (as NAME)", NAME cut at 63 bytes: the name is the caller's word,
 * never an identity of its own, so nobody's actions can be written under
 * another name. Else "admin".
 */
char *actor_of(const struct req *q)
{
	const char *h;
	size_t n;

	if (!q->own_token)
		return xstrdup(q->token_name);
	h = MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "X-Ferry-Actor");
	if (h == NULL || *h == '\0' || !utf8_valid(h, strlen(h)) || !from_loopback(q->conn))
		return xstrdup(q->token_name);
	n = strnlen(h, 64);
	while (n > 0 && n < strlen(h) && ((unsigned char)h[n] & 0xc0) == 0x80)
		n--; /* never cut a character in two */
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)h[i] < 0x20 || h[i] == 0x7f)
			return xstrdup(q->token_name);
	return xasprintf("%s (as %.*s)", q->token_name, (int)n, h);
}

int name_listed(const char *list, const char *name)
{
	size_t n = strlen(name);
	int i = 1;

	if (list == NULL || n == 0)
		return 0;
	for (const char *p = list; *p; i++) {
		size_t w = strcspn(p, " ");
		if (w == n && memcmp(p, name, n) == 0)
			return i;
		p += w;
		p += strspn(p, " ");
	}
	return 0;
}

void reply_unknown(struct reply *r, const char *what, const char *name, const char *list)
{
	char msg[512], valid[256] = "", shown[72];
	size_t n = 0, m;

	for (const char *p = list ? list : ""; *p && n < sizeof(valid);) {
		size_t w = strcspn(p, " ");
		n += (size_t)snprintf(valid + n, sizeof(valid) - n, "%s%.*s", n ? ", " : "", (int)w, p);
		p += w;
		p += strspn(p, " ");
	}
	/* the name is the client's: shown cut at 64 bytes (never inside a character) */
	m = strlen(name);
	if (m > 64) {
		m = 64;
		while (m > 0 && ((unsigned char)name[m] & 0xc0) == 0x80)
			m--;
	}
	snprintf(shown, sizeof(shown), "%.*s%s", (int)m, name, m < strlen(name) ? "…" : "");
	if (list == NULL || *list == '\0')
		snprintf(msg, sizeof(msg), "unknown %s \"%s\"; this request takes no %ss", what, shown, what);
	else
		snprintf(msg, sizeof(msg), "unknown %s \"%s\"; valid %ss: %s", what, shown, what, valid);
	reply_error(r, 400, "unknown_field", shown, msg, NULL);
}

/* A 400 invalid_field for parameter name, listing the valid values. */
void reply_not_one_of(struct reply *r, const char *name, const char *value, const char *const *valid)
{
	char msg[400];
	size_t n;

	n = (size_t)snprintf(msg, sizeof(msg), "%s \"%.64s\" is not one of: ", name, value);
	for (int i = 0; valid[i] && n < sizeof(msg); i++)
		n += (size_t)snprintf(msg + n, sizeof(msg) - n, "%s%s", i ? ", " : "", valid[i]);
	if (!utf8_valid(msg, strlen(msg))) /* cut inside a character */
		snprintf(msg, sizeof(msg), "%s is not one of its valid values", name);
	reply_error(r, 400, "invalid_field", name, msg, NULL);
}

/* What find_bad_query looks for: a query parameter the route does not take, or one given twice. */
struct query_scan {
	const char *list; /* the route's query */
	const char *bad;  /* the first offending name */
	int twice;        /* bad was given twice, not unknown */
	unsigned seen;    /* bit i: the (i+1)th name of list was given */
};

/* MHD iterator: leaves in the query_scan at cls the first unknown or repeated parameter. */
static enum MHD_Result find_bad_query(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	struct query_scan *qc = cls;
	int i = name_listed(qc->list, key);

	(void)kind, (void)value;
	if (i == 0) {
		qc->bad = key;
		return MHD_NO;
	}
	/* limit=1&limit=2: which one was meant is not ours to guess */
	if (i <= 32 && (qc->seen & (1u << (i - 1)))) {
		qc->bad = key;
		qc->twice = 1;
		return MHD_NO;
	}
	if (i <= 32)
		qc->seen |= 1u << (i - 1);
	return MHD_YES;
}

int query_check(struct reply *r, const struct req *q)
{
	struct query_scan qc = {.list = q->rt->query};
	char msg[160];

	MHD_get_connection_values(q->conn, MHD_GET_ARGUMENT_KIND, find_bad_query, &qc);
	if (qc.bad && qc.twice) {
		snprintf(msg, sizeof(msg), "query parameter \"%s\" given more than once; give it once", qc.bad);
		reply_error(r, 400, "invalid_field", qc.bad, msg, NULL);
		return -1;
	}
	if (qc.bad) {
		reply_unknown(r, "query parameter", qc.bad, q->rt->query);
		return -1;
	}
	return 0;
}

/* Parses the request body as a JSON object, or replies 400. */
json_t *body_object(struct reply *r, const struct req *q)
{
	json_error_t jerr;
	json_t *body, *v;
	const char *key;

	if (q->len == 0)
		return json_object();
	body = json_loadb(q->body, q->len, 0, &jerr);
	if (body == NULL) {
		char msg[300];
		snprintf(msg, sizeof(msg), "malformed JSON at line %d column %d (byte %d): %s",
			 jerr.line, jerr.column, jerr.position, jerr.text);
		reply_error(r, 400, "malformed_json", NULL, msg, NULL);
		return NULL;
	}
	if (!json_is_object(body)) {
		json_decref(body);
		reply_error(r, 400, "invalid", NULL, "the request body must be a JSON object", NULL);
		return NULL;
	}
	/* a misspelt field ("frm") would otherwise be ignored and the request done another way */
	json_object_foreach(body, key, v) {
		if (!name_listed(q->rt ? q->rt->fields : NULL, key)) {
			reply_unknown(r, "field", key, q->rt ? q->rt->fields : NULL);
			json_decref(body);
			return NULL;
		}
	}
	return body;
}

/* Fetches an optional string field; replies 400 naming it when mistyped. */
int opt_string(const char **out, struct reply *r, json_t *body, const char *field)
{
	json_t *v = json_object_get(body, field);
	char msg[160];

	*out = NULL;
	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_string(v)) {
		snprintf(msg, sizeof(msg), "field \"%s\" must be a string", field);
		reply_error(r, 400, "invalid_field", field, msg, NULL);
		return -1;
	}
	*out = json_string_value(v);
	return 0;
}

/* Fetches an optional boolean field (false when absent); 400 naming it when mistyped. */
int opt_bool(int *out, struct reply *r, json_t *body, const char *field)
{
	json_t *v = json_object_get(body, field);
	char msg[160];

	*out = 0;
	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_boolean(v)) {
		snprintf(msg, sizeof(msg), "field \"%s\" must be true or false", field);
		reply_error(r, 400, "invalid_field", field, msg, NULL);
		return -1;
	}
	*out = json_is_true(v);
	return 0;
}

/*
 * Unit tests of the API module: every routed path and method is in the
 * OpenAPI document, and requests are routed by method and path (HEAD where
 * GET is, 405 with the path's methods, 404 for an unknown path).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <jansson.h>
#include <string.h>

#include "api/api.h"
#include "api/api_priv.h"

static void test_api__every_route_in_openapi(void **state)
{
	json_error_t jerr;
	json_t *doc = json_loads(api_openapi_json, 0, &jerr), *paths, *seen = json_object();

	(void)state;
	assert_non_null(doc);
	paths = json_object_get(doc, "paths");
	assert_non_null(paths);
	for (const struct api_route *r = api_routes; r->pattern; r++) {
		json_t *item = json_object_get(paths, r->pattern);
		char lower[8];
		size_t i;

		if (item == NULL)
			fail_msg("route %s is not in openapi.json", r->pattern);
		for (i = 0; r->method[i] && i < sizeof(lower) - 1; i++)
			lower[i] = (char)tolower((unsigned char)r->method[i]);
		lower[i] = '\0';
		if (json_object_get(item, lower) == NULL)
			fail_msg("%s %s is not in openapi.json", r->method, r->pattern);
		json_object_set_new(seen, r->pattern, json_true());
	}
	/* and nothing documented that is not routed */
	assert_int_equal(json_object_size(paths), json_object_size(seen));
	json_decref(seen);
	json_decref(doc);
}

/* The words of a space-separated list (api_route's query, fields) as a JSON object of name: true. */
static json_t *words(const char *list)
{
	json_t *o = json_object();

	for (const char *p = list ? list : ""; *p;) {
		size_t w = strcspn(p, " ");
		char name[64];
		snprintf(name, sizeof(name), "%.*s", (int)w, p);
		json_object_set_new(o, name, json_true());
		p += w;
		p += strspn(p, " ");
	}
	return o;
}

/*
 * What a route takes (its query parameters, its body's fields: anything else
 * is a 400) is what openapi.json documents for it, and each documented body
 * says so (additionalProperties: false).
 */
static void test_api__query_and_fields_match_openapi(void **state)
{
	json_error_t jerr;
	json_t *doc = json_loads(api_openapi_json, 0, &jerr), *schemas;

	(void)state;
	assert_non_null(doc);
	schemas = json_object_get(json_object_get(doc, "components"), "schemas");
	for (const struct api_route *r = api_routes; r->pattern; r++) {
		json_t *item = json_object_get(json_object_get(doc, "paths"), r->pattern), *op, *p, *schema, *k;
		json_t *query, *fields, *want_q, *want_f;
		const char *key;
		char lower[8];
		size_t i;

		if (r->role == ROUTE_PUBLIC)
			continue;
		query = json_object();
		fields = json_object();
		for (i = 0; r->method[i] && i < sizeof(lower) - 1; i++)
			lower[i] = (char)tolower((unsigned char)r->method[i]);
		lower[i] = '\0';
		op = json_object_get(item, lower);
		json_array_foreach(json_object_get(op, "parameters"), i, p)
			if (json_is_string(json_object_get(p, "in")) &&
			    strcmp(json_string_value(json_object_get(p, "in")), "query") == 0)
				json_object_set_new(query, json_string_value(json_object_get(p, "name")), json_true());
		schema = json_object_get(json_object_get(json_object_get(json_object_get(op, "requestBody"), "content"),
							 "application/json"), "schema");
		if (json_is_string(json_object_get(schema, "$ref")))
			schema = json_object_get(schemas, strrchr(json_string_value(json_object_get(schema, "$ref")), '/') + 1);
		json_object_foreach(json_object_get(schema, "properties"), key, k)
			json_object_set_new(fields, key, json_true());
		if (schema != NULL && !json_is_false(json_object_get(schema, "additionalProperties")))
			fail_msg("%s %s: its body schema does not say additionalProperties: false", r->method, r->pattern);
		want_q = words(r->query);
		want_f = words(r->fields);
		if (!json_equal(query, want_q))
			fail_msg("%s %s: the query parameters in openapi.json are not the route's (\"%s\")", r->method,
				 r->pattern, r->query ? r->query : "");
		if (!json_equal(fields, want_f))
			fail_msg("%s %s: the body fields in openapi.json are not the route's (\"%s\")", r->method,
				 r->pattern, r->fields ? r->fields : "");
		json_decref(query), json_decref(fields), json_decref(want_q), json_decref(want_f);
	}
	json_decref(doc);
}

static void test_api__name_listed(void **state)
{
	(void)state;
	assert_int_equal(name_listed("from no_cache", "from"), 1);
	assert_int_equal(name_listed("from no_cache", "no_cache"), 2);
	assert_int_equal(name_listed("from no_cache", "no"), 0);
	assert_int_equal(name_listed("from no_cache", "no_cache2"), 0);
	assert_int_equal(name_listed("from no_cache", "from no_cache"), 0);
	assert_int_equal(name_listed("from no_cache", ""), 0);
	assert_int_equal(name_listed(NULL, "from"), 0);
}

static void h_any(struct api *a, struct reply *r, PGconn *db, struct req *q) { (void)a, (void)r, (void)db, (void)q; }

/*
 * Every row declares who may call it, and openapi.json says the same as
 * x-ferry-role; a table with a row that declares nothing is refused.
 */
static void test_api__every_route_declares_its_role(void **state)
{
	static const struct api_route undeclared[] = {
		{"GET", "/a", ROLE_VIEWER, 0, NULL, h_any, NULL, NULL},
		{"POST", "/b", 0, 0, NULL, h_any, NULL, NULL},
		{NULL, NULL, 0, 0, NULL, NULL, NULL, NULL},
	};
	json_error_t jerr;
	json_t *doc = json_loads(api_openapi_json, 0, &jerr);

	(void)state;
	assert_non_null(doc);
	assert_int_equal(api_routes_check(api_routes), FERRY_OK);
	for (const struct api_route *r = api_routes; r->pattern; r++) {
		const char *want = r->role == ROUTE_PUBLIC ? "public" : token_role_name((enum token_role)r->role);
		const char *doc_role;
		char lower[8];
		size_t i;

		for (i = 0; r->method[i] && i < sizeof(lower) - 1; i++)
			lower[i] = (char)tolower((unsigned char)r->method[i]);
		lower[i] = '\0';
		doc_role = json_string_value(json_object_get(
			json_object_get(json_object_get(json_object_get(doc, "paths"), r->pattern), lower), "x-ferry-role"));
		if (doc_role == NULL || strcmp(doc_role, want) != 0)
			fail_msg("%s %s: the table says %s, openapi.json's x-ferry-role %s", r->method, r->pattern, want,
				 doc_role ? doc_role : "nothing");
		/* a change of what an operator may do is a decision: writing it is a change here too */
		if (strcmp(r->method, "GET") != 0 && r->role == ROLE_OPERATOR &&
		    strncmp(r->pattern, "/api/v1/runs", 12) != 0 && strcmp(r->pattern, "/api/v1/workflows") != 0)
			fail_msg("%s %s: operators act on runs and workflows only", r->method, r->pattern);
		if (strcmp(r->method, "GET") == 0 && r->role > ROLE_VIEWER)
			fail_msg("GET %s: whatever a viewer may not read is no GET", r->pattern);
	}
	json_decref(doc);
	assert_int_equal(api_routes_check(undeclared), FERRY_ERROR);
	assert_string_equal(ferry_error_last(), "route POST /b declares no role (ROUTE_PUBLIC, or the least token role "
						"that may call it)");
}

/* Each method and pattern has one row: a second row would never be reached. */
static void test_api__routes_unique(void **state)
{
	(void)state;
	for (const struct api_route *r = api_routes; r->pattern; r++) {
		assert_true(r->handler != NULL || r->fast != NULL);
		for (const struct api_route *s = r + 1; s->pattern; s++)
			if (strcmp(r->method, s->method) == 0 && strcmp(r->pattern, s->pattern) == 0)
				fail_msg("%s %s is routed twice", r->method, r->pattern);
	}
}

static void test_api__route_by_method(void **state)
{
	char caps[3][128], allow[64];
	const struct api_route *get, *post, *rt;

	(void)state;
	get = api_route_find(api_routes, "GET", "/api/v1/runs", caps, allow, sizeof(allow));
	post = api_route_find(api_routes, "POST", "/api/v1/runs", caps, allow, sizeof(allow));
	assert_non_null(get);
	assert_non_null(post);
	assert_ptr_not_equal(get, post);
	assert_ptr_not_equal(get->handler, post->handler);
	assert_string_equal(get->method, "GET");
	assert_string_equal(post->method, "POST");
	/* HEAD is served by the GET route */
	assert_ptr_equal(api_route_find(api_routes, "HEAD", "/api/v1/runs", caps, allow, sizeof(allow)), get);
	/* PUT goes to its own handler, with the path's segments */
	rt = api_route_find(api_routes, "PUT", "/api/v1/models/digits/aliases/production", caps, allow, sizeof(allow));
	assert_non_null(rt);
	assert_string_equal(rt->method, "PUT");
	assert_string_equal(caps[0], "digits");
	assert_string_equal(caps[1], "production");
	assert_ptr_equal(rt->handler, api_model_alias_put);
	rt = api_route_find(api_routes, "GET", "/api/v1/runs/42/steps/train/logs", caps, allow, sizeof(allow));
	assert_non_null(rt);
	assert_string_equal(caps[0], "42");
	assert_string_equal(caps[1], "train");
}

static void test_api__405_lists_the_paths_methods(void **state)
{
	char caps[3][128], allow[64];

	(void)state;
	assert_null(api_route_find(api_routes, "DELETE", "/api/v1/runs", caps, allow, sizeof(allow)));
	assert_string_equal(allow, "GET, HEAD, POST");
	assert_null(api_route_find(api_routes, "HEAD", "/api/v1/runs/1/retry", caps, allow, sizeof(allow)));
	assert_string_equal(allow, "POST");
	assert_null(api_route_find(api_routes, "GET", "/api/v1/models/m/aliases/a", caps, allow, sizeof(allow)));
	assert_string_equal(allow, "PUT, DELETE");
	assert_null(api_route_find(api_routes, "PATCH", "/api/v1/runs/7", caps, allow, sizeof(allow)));
	assert_string_equal(allow, "GET, HEAD, DELETE");
	assert_null(api_route_find(api_routes, "DELETE", "/api/v1/runs/7/events", caps, allow, sizeof(allow)));
	assert_string_equal(allow, "GET, HEAD");
	/* methods are case-sensitive (RFC 9110): "get" is not GET */
	assert_null(api_route_find(api_routes, "get", "/healthz", caps, allow, sizeof(allow)));
	assert_string_equal(allow, "GET, HEAD");
	/* an unknown path: no methods, 404 */
	assert_null(api_route_find(api_routes, "GET", "/api/v1/nope", caps, allow, sizeof(allow)));
	assert_string_equal(allow, "");
	assert_null(api_route_find(api_routes, "GET", "/api/v1/runs/", caps, allow, sizeof(allow)));
	assert_string_equal(allow, "");
}

static void h_get(struct api *a, struct reply *r, PGconn *db, struct req *q) { (void)a, (void)r, (void)db, (void)q; }
static void h_patch(struct api *a, struct reply *r, PGconn *db, struct req *q) { (void)a, (void)r, (void)db, (void)q; }
static void h_put(struct api *a, struct reply *r, PGconn *db, struct req *q) { (void)a, (void)r, (void)db, (void)q; }
static void h_delete(struct api *a, struct reply *r, PGconn *db, struct req *q) { (void)a, (void)r, (void)db, (void)q; }

/* PATCH, PUT and DELETE reach their own handlers; the Allow list is the path's, in table order. */
static void test_api__patch_put_delete(void **state)
{
	static const struct api_route table[] = {
		{"GET", "/things/{id}", ROLE_VIEWER, 0, NULL, h_get, NULL, NULL},
		{"PATCH", "/things/{id}", ROLE_OPERATOR, 0, NULL, h_patch, NULL, NULL},
		{"DELETE", "/things/{id}", ROLE_OPERATOR, 0, NULL, h_delete, NULL, NULL},
		{"PUT", "/things/{id}/tags/{tag}", ROLE_ADMIN, 0, NULL, h_put, NULL, NULL},
		{NULL, NULL, 0, 0, NULL, NULL, NULL, NULL},
	};
	char caps[3][128], allow[64];
	const struct api_route *rt;

	(void)state;
	rt = api_route_find(table, "PATCH", "/things/7", caps, allow, sizeof(allow));
	assert_non_null(rt);
	assert_ptr_equal(rt->handler, h_patch);
	assert_string_equal(caps[0], "7");
	rt = api_route_find(table, "DELETE", "/things/8", caps, allow, sizeof(allow));
	assert_non_null(rt);
	assert_ptr_equal(rt->handler, h_delete);
	assert_string_equal(caps[0], "8");
	assert_ptr_equal(api_route_find(table, "GET", "/things/9", caps, allow, sizeof(allow))->handler, h_get);
	assert_ptr_equal(api_route_find(table, "HEAD", "/things/9", caps, allow, sizeof(allow))->handler, h_get);
	rt = api_route_find(table, "PUT", "/things/9/tags/red", caps, allow, sizeof(allow));
	assert_non_null(rt);
	assert_ptr_equal(rt->handler, h_put);
	assert_string_equal(caps[1], "red");
	assert_null(api_route_find(table, "POST", "/things/9", caps, allow, sizeof(allow)));
	assert_string_equal(allow, "GET, HEAD, PATCH, DELETE");
	assert_null(api_route_find(table, "PUT", "/things/9", caps, allow, sizeof(allow)));
	assert_string_equal(allow, "GET, HEAD, PATCH, DELETE");
	assert_null(api_route_find(table, "DELETE", "/things/9/tags/red", caps, allow, sizeof(allow)));
	assert_string_equal(allow, "PUT");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_api__every_route_in_openapi),
		cmocka_unit_test(test_api__routes_unique),
		cmocka_unit_test(test_api__every_route_declares_its_role),
		cmocka_unit_test(test_api__query_and_fields_match_openapi),
		cmocka_unit_test(test_api__name_listed),
		cmocka_unit_test(test_api__route_by_method),
		cmocka_unit_test(test_api__405_lists_the_paths_methods),
		cmocka_unit_test(test_api__patch_put_delete),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests of the API's token table: the built-in admin, named tokens by hash, roles, replacement. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "api/tokens.h"
#include "lib/util.h"

static void named(struct store_token *t, char *hash, const char *name, const char *role, const char *token)
{
	memset(t, 0, sizeof(*t));
	sha256_hex(hash, token, strlen(token));
	t->name = (char *)name;
	t->role = (char *)role;
	t->hash = hash;
}

static int check(struct tokens *t, const char *header, enum token_role *role, char name[TOKEN_NAME_MAX])
{
	int own;

	return tokens_check(t, header, role, name, &own);
}

static void test_tokens__own_token_is_admin(void **state)
{
	struct tokens *t = NULL;
	enum token_role role;
	char name[TOKEN_NAME_MAX];
	int own;

	(void)state;
	assert_int_equal(tokens_new(&t, "secret-0123456789", NULL), 0);
	assert_int_equal(tokens_check(t, "Bearer secret-0123456789", &role, name, &own), 1);
	assert_int_equal(role, ROLE_ADMIN);
	assert_string_equal(name, "admin");
	assert_int_equal(own, 1);
	assert_int_equal(check(t, "Bearer secret-012345678", &role, name), 0);
	assert_int_equal(check(t, "Bearer secret-0123456789x", &role, name), 0);
	assert_int_equal(check(t, "secret-0123456789", &role, name), 0);
	assert_int_equal(check(t, NULL, &role, name), 0);
	assert_int_equal(check(t, "Bearer ", &role, name), 0);
	tokens_free(t);
}

static void test_tokens__named_by_hash_and_replaced(void **state)
{
	struct tokens *t = NULL;
	struct store_token v[3];
	char h[3][65], name[TOKEN_NAME_MAX];
	enum token_role role;
	int own;

	(void)state;
	assert_int_equal(tokens_new(&t, "secret-0123456789", NULL), 0);
	named(&v[0], h[0], "watcher", "viewer", "tok-a");
	named(&v[1], h[1], "ci-bot", "operator", "tok-b");
	named(&v[2], h[2], "boss", "admin", "tok-c");
	assert_int_equal(check(t, "Bearer tok-b", &role, name), 0); /* none read yet */
	tokens_set(t, v, 3);
	assert_int_equal(tokens_check(t, "Bearer tok-a", &role, name, &own), 1);
	assert_int_equal(role, ROLE_VIEWER);
	assert_string_equal(name, "watcher");
	assert_int_equal(own, 0);
	assert_int_equal(check(t, "Bearer tok-b", &role, name), 1);
	assert_int_equal(role, ROLE_OPERATOR);
	assert_string_equal(name, "ci-bot");
	assert_int_equal(check(t, "Bearer tok-c", &role, name), 1);
	assert_int_equal(role, ROLE_ADMIN);
	assert_int_equal(check(t, "Bearer tok-d", &role, name), 0);
	/* the hash itself is not a token */
	{
		char hdr[80];
		snprintf(hdr, sizeof(hdr), "Bearer %s", h[0]);
		assert_int_equal(check(t, hdr, &role, name), 0);
	}
	/* a revoke: the next table lacks it */
	tokens_set(t, v + 1, 2);
	assert_int_equal(check(t, "Bearer tok-a", &role, name), 0);
	assert_int_equal(check(t, "Bearer tok-b", &role, name), 1);
	tokens_set(t, NULL, 0);
	assert_int_equal(check(t, "Bearer tok-b", &role, name), 0);
	assert_int_equal(check(t, "Bearer secret-0123456789", &role, name), 1);
	tokens_free(t);
}

static void test_tokens__roles(void **state)
{
	(void)state;
	assert_int_equal(token_role_parse("viewer"), ROLE_VIEWER);
	assert_int_equal(token_role_parse("operator"), ROLE_OPERATOR);
	assert_int_equal(token_role_parse("admin"), ROLE_ADMIN);
	assert_int_equal(token_role_parse("root"), 0);
	assert_int_equal(token_role_parse(NULL), 0);
	assert_string_equal(token_role_name(ROLE_OPERATOR), "operator");
	assert_true(ROLE_VIEWER < ROLE_OPERATOR && ROLE_OPERATOR < ROLE_ADMIN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tokens__own_token_is_admin),
		cmocka_unit_test(test_tokens__named_by_hash_and_replaced),
		cmocka_unit_test(test_tokens__roles),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

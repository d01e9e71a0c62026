/*
 * Unit tests for the template language (template.c): {{params.X}},
 * {{run.id}} and {{steps.…}} rendered into plain text and, quoted for
 * their place, into shell scripts; finding a command's script argument;
 * the params a workflow's shell scripts use and their environment names.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg_test.h"
#include "plan/template.h"

/* Renders script with who = v and checks what comes out. */
static void assert_shell(const char *script, const char *v, const char *want)
{
	json_t *params = json_pack("{s:s}", "who", v);
	char *out = NULL;

	assert_int_equal(tmpl_render_shell(&out, script, params, "7"), 0);
	assert_string_equal(out, want);
	free(out);
	json_decref(params);
}

static void test_template__render(void **state)
{
	json_t *params = json_pack("{s:s,s:s}", "who", "world", "n", "3");
	char *out = NULL;

	(void)state;
	assert_int_equal(tmpl_render(&out, "hi {{ params.who }}/{{params.n}} "
					     "{{run.id}} {{ steps.a.outputs.k }}", params, "r-42"), 0);
	assert_string_equal(out, "hi world/3 r-42 {{ steps.a.outputs.k }}");
	free(out);
	assert_int_equal(tmpl_render(&out, "{{ run.id }} ünï {{ bad", params, NULL), 0);
	assert_string_equal(out, "{{ run.id }} ünï {{ bad");
	free(out);
	assert_int_equal(tmpl_render(&out, "x {{ params.missing }}", params, NULL),
			 FERRY_EINVALID);
	assert_null(out);
	assert_non_null(strstr(ferry_error_last(), "\"missing\""));
	assert_int_equal(tmpl_render(&out, "", NULL, NULL), 0);
	assert_string_equal(out, "");
	free(out);
	json_decref(params);
}

/* A tmpl_ref_fn: steps.a.outputs.k is "v1", any other reference fails. */
static int fake_ref(char **val, const char *expr, size_t len, void *arg)
{
	(void)arg;
	if (len == strlen("steps.a.outputs.k") && memcmp(expr, "steps.a.outputs.k", len) == 0) {
		*val = strdup("v1");
		return 0;
	}
	ferry_error_set("no output %.*s", (int)len, expr);
	return FERRY_EINVALID;
}

/* Claim-time rendering: step outputs in, everything else as written. */
static void test_template__render_refs(void **state)
{
	static const struct {
		const char *in, *want;
	} cases[] = {
		{"x/{{ steps.a.outputs.k }}/y", "x/v1/y"},
		{"x/{{a", "x/{{a"}, /* unclosed: once, not twice */
		{"{{steps.a.outputs.k}}{{", "v1{{"},
		{"{{params.p}} {{run.id}} {{ other }}", "{{params.p}} {{run.id}} {{ other }}"},
		{"no braces", "no braces"},
	};
	char *out = NULL;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(tmpl_render_refs(&out, cases[i].in, fake_ref, NULL), 0);
		assert_string_equal(out, cases[i].want);
		free(out);
	}
	assert_int_equal(tmpl_render_refs(&out, "{{steps.b.outputs.k}}", fake_ref, NULL),
			 FERRY_EINVALID);
	assert_null(out);
	assert_int_equal(tmpl_render_shell_refs(&out, "echo {{steps.a.outputs.k}} x/{{a", fake_ref,
						NULL), 0);
	assert_string_equal(out, "echo 'v1' x/{{a");
	free(out);
}

static void test_template__render_shell(void **state)
{
	static const char evil[] = "x\"; echo INJECTED; echo \"";
	json_t *cmd, *params;
	char *out = NULL;

	(void)state;
	assert_shell("echo {{params.who}}", "a b", "echo 'a b'");
	assert_shell("echo {{params.who}}", "it's", "echo 'it'\\''s'");
	assert_shell("echo \"hello, {{params.who}}\"", evil,
		     "echo \"hello, \"'x\"; echo INJECTED; echo \"'\"\"");
	assert_shell("echo 'v={{ params.who }}!'", "a'b", "echo 'v=''a'\\''b''!'");
	assert_shell("echo $'{{params.who}}'", "a", "echo $'''a'$''");
	assert_shell("echo \"$(echo {{params.who}})\"", "$(id)", "echo \"$(echo '$(id)')\"");
	assert_shell("echo `echo {{params.who}}`", ";id", "echo `echo ';id'`");
	/* inside `…` the shell takes \\, \` and \$ first: escaped once more */
	assert_shell("echo `echo {{params.who}}`", "`id`$", "echo `echo '\\`id\\`\\$'`");
	/* `…` ends at the first unescaped `, even in a comment */
	assert_shell("echo `true # x` {{params.who}}", "a b", "echo `true # x` 'a b'");
	assert_shell("echo ${x:-{{params.who}}} \"${#x}\" {{params.who}}", "a}", "echo ${x:-'a}'} \"${#x}\" 'a}'");
	assert_shell("# note {{params.who}}\necho {{params.who}}", "a\nid",
		     "# note a id\necho 'a\nid'");
	assert_shell("echo \\{{params.who}}", "a", "echo \\\\'a'");
	assert_shell("echo \"{{run.id}}\" '{{steps.a.outputs.k}}' {{params.who}}", "a",
		     "echo \"7\" '{{steps.a.outputs.k}}' 'a'");
	/* `…` or ${…} inside "…": refused, with the way out */
	params = json_pack("{s:s}", "who", "a");
	assert_int_equal(tmpl_render_shell(&out, "echo \"`echo {{params.who}}`\"", params, "7"),
			 FERRY_EINVALID);
	assert_null(out);
	assert_string_equal(ferry_error_last(), "{{params.who}} sits inside `…` or ${…} within \"…\" "
						"in a shell script, where it cannot be quoted safely; use "
						"\"$FERRY_PARAM_WHO\" there instead");
	assert_int_equal(tmpl_render_shell(&out, "echo \"${x:-{{params.who}}}\"", params, "7"),
			 FERRY_EINVALID);
	json_decref(params);

	cmd = json_pack("[s,s,s]", "sh", "-c", "x");
	assert_int_equal(tmpl_shell_script_index(cmd), 2);
	json_decref(cmd);
	cmd = json_pack("[s,s,s,s,s]", "/usr/bin/bash", "-o", "pipefail", "-euc", "x");
	assert_int_equal(tmpl_shell_script_index(cmd), 4);
	json_decref(cmd);
	cmd = json_pack("[s,s]", "sh", "script.sh");
	assert_int_equal(tmpl_shell_script_index(cmd), -1);
	json_decref(cmd);
	cmd = json_pack("[s,s,s]", "python3", "-c", "x");
	assert_int_equal(tmpl_shell_script_index(cmd), -1);
	json_decref(cmd);
	cmd = json_pack("[s,s]", "sh", "-c");
	assert_int_equal(tmpl_shell_script_index(cmd), -1);
	json_decref(cmd);
	/* wrappers in front of the shell (finding 5: [env, sh, -c, …] and [timeout, "10", bash, -c, …]) */
	cmd = json_pack("[s,s,s,s]", "env", "sh", "-c", "x");
	assert_int_equal(tmpl_shell_script_index(cmd), 3);
	json_decref(cmd);
	cmd = json_pack("[s,s,s,s,s]", "timeout", "10", "bash", "-c", "x");
	assert_int_equal(tmpl_shell_script_index(cmd), 4);
	json_decref(cmd);
	cmd = json_pack("[s,s,s,s,s,s,s,s,s,s,s,s,s,s]", "/usr/bin/env", "-u", "HOME", "A=1", "timeout", "-s",
			"KILL", "--kill-after=5", "1m", "nice", "-n", "5", "sh", "-c");
	assert_int_equal(tmpl_shell_script_index(cmd), -1); /* no script after -c */
	json_array_append_new(cmd, json_string("x"));
	assert_int_equal(tmpl_shell_script_index(cmd), 14);
	json_decref(cmd);
	cmd = json_pack("[s,s,s,s,s,s,s,s,s]", "nohup", "setsid", "stdbuf", "-oL", "taskset", "-c", "0,1", "dash", "-ec");
	json_array_append_new(cmd, json_string("x"));
	assert_int_equal(tmpl_shell_script_index(cmd), 9);
	json_decref(cmd);
	cmd = json_pack("[s,s,s,s,s,s,s]", "xargs", "-n", "1", "sh", "-c", "x", "_");
	assert_int_equal(tmpl_shell_script_index(cmd), 5);
	json_decref(cmd);
	cmd = json_pack("[s,s,s,s,s]", "env", "-S", "sh -c", "x", "y");
	assert_int_equal(tmpl_shell_script_index(cmd), -1);
	json_decref(cmd);
	cmd = json_pack("[s,s,s]", "env", "python3", "-c");
	assert_int_equal(tmpl_shell_script_index(cmd), -1);
	json_decref(cmd);
}

/* A place the scanner refuses: the message names it. */
static void assert_refused(const char *script, const char *v, const char *place)
{
	json_t *params = json_pack("{s:s}", "who", v);
	char *out = NULL;

	if (tmpl_render_shell(&out, script, params, "7") != FERRY_EINVALID)
		fail_msg("rendered \"%s\" as \"%s\"", script, out);
	assert_null(out);
	assert_non_null(strstr(ferry_error_last(), place));
	json_decref(params);
}

/*
 * Here-documents and arithmetic (issue 24, finding 5): on 56c5f5c a value
 * 1$(touch x) ran inside `cat <<EOF … {{params.p}}` and inside
 * $(( 1 + {{params.p}} )), and a newline plus EOF ended a quoted
 * here-document early.
 */
static void test_template__heredoc_and_arithmetic(void **state)
{
	(void)state;
	assert_refused("cat <<EOF\nhello {{params.who}}\nEOF\n", "1$(touch x)", "sits inside a here-document");
	assert_refused("cat <<'EOF'\n{{params.who}}\nEOF\n", "a\nEOF\ntouch x", "inside a here-document");
	assert_refused("cat <<-\"E F\" >f\n\t{{params.who}}\n\tE F\n", "a", "inside a here-document");
	assert_refused("x=$(cat <<EOF\n{{params.who}}\nEOF\n)", "a", "inside a here-document");
	/* after the document ends, and on the line that announces it, quoting as usual */
	assert_shell("cat <<EOF\nhi $x\nEOF\necho {{params.who}}", "a b", "cat <<EOF\nhi $x\nEOF\necho 'a b'");
	assert_shell("cat <<-EOF\n\thi\n\tEOF\necho {{params.who}}", "a", "cat <<-EOF\n\thi\n\tEOF\necho 'a'");
	assert_shell("cat <<EOF {{params.who}}\nbody\nEOF\n", "a b", "cat <<EOF 'a b'\nbody\nEOF\n");
	assert_shell("cat <<< {{params.who}}", "a b", "cat <<< 'a b'");
	assert_shell("echo 1 <<2 {{params.who}}\n2\necho {{params.who}}", "z", "echo 1 <<2 'z'\n2\necho 'z'");
	/* arithmetic: an integer is written bare; anything else is refused */
	assert_shell("echo $(( 1 + {{params.who}} ))", "41", "echo $(( 1 + 41 ))");
	assert_shell("echo \"$(( {{params.who}} * 2 ))\" {{params.who}}", "-3", "echo \"$(( -3 * 2 ))\" '-3'");
	assert_shell("(( n = {{params.who}} )); echo {{params.who}}", "5", "(( n = 5 )); echo '5'");
	assert_shell("echo $[ {{params.who}} + 1 ]", "2", "echo $[ 2 + 1 ]");
	assert_shell("echo $(( (1 + 2) * {{params.who}} )) {{params.who}}", "7", "echo $(( (1 + 2) * 7 )) '7'");
	assert_refused("echo $(( 1 + {{params.who}} ))", "1$(touch x)", "inside arithmetic");
	assert_refused("echo $(( 1 + {{params.who}} ))", "a[$(id)]", "declare the param as an integer");
	assert_refused("(( {{params.who}} ))", "", "inside arithmetic");
	/* a subshell, a command substitution: not arithmetic */
	assert_shell("(echo {{params.who}})", "a b", "(echo 'a b')");
	assert_shell("echo $(echo {{params.who}})", "a b", "echo $(echo 'a b')");
}

static void test_template__shell_param_uses(void **state)
{
	json_t *spec = parse_ok("name: x\n"
				"params: {who: w, my_x: {default: 1}}\n"
				"steps:\n"
				"  - {name: a, command: 'echo {{params.who}}'}\n"
				"  - {name: b, command: [echo, '{{params.who}}']}\n"
				"  - {name: c, command: [bash, -c, 'echo {{params.my_x}}', '{{params.who}}']}\n"),
	       *uses = NULL;
	char *dump, *env;

	(void)state;
	tmpl_shell_param_uses(&uses, spec);
	dump = json_dumps(uses, JSON_COMPACT);
	assert_string_equal(dump, "[{\"step\":\"a\",\"param\":\"who\",\"env\":\"FERRY_PARAM_WHO\"},"
				  "{\"step\":\"c\",\"param\":\"my_x\",\"env\":\"FERRY_PARAM_MY_X\"}]");
	free(dump);
	json_decref(uses);
	json_decref(spec);
	env = tmpl_param_env_name("a.b9");
	assert_string_equal(env, "FERRY_PARAM_A_B9");
	free(env);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_template__render),
		cmocka_unit_test(test_template__render_refs),
		cmocka_unit_test(test_template__render_shell),
		cmocka_unit_test(test_template__heredoc_and_arithmetic),
		cmocka_unit_test(test_template__shell_param_uses),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

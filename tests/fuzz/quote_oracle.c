/*
 * quote_oracle — a differential fuzzer of the shell quoting of templates
 * (orchestrator/plan/template.c) against real shells. Each case is a small
 * script generated from a grammar of the places a template can sit (bare,
 * '…', "…", $'…', $(…), `…`, ${…}, "$(…)" nested, a comment, a
 * here-document, arithmetic), with one hostile value put through
 * tmpl_render_shell; the rendered script runs in dash and in bash, in a
 * subshell of a shell that holds no privileges (nobody, PATH empty: only
 * builtins; stdin /dev/null), where the function ferry_pwned is the only
 * thing that prints PWNED. A case fails when:
 *  - PWNED is printed: the value ran as code (every payload calls it);
 *  - the shell reports a syntax error: the quoting broke the script;
 *  - what the script prints differs from what the grammar says it must
 *    (the value, whole, where it stands as one word);
 *  - a refused place was not one the template language refuses (a
 *    here-document, arithmetic with a non-integer, `…` or ${…} in "…"), or
 *    a place that must render was refused.
 * The grammar has no loops, no redirections and no external commands, so
 * a case cannot do harm unless the quoting fails, and then only as nobody.
 *
 *   quote_oracle [--execs N] [--seed S] [--shell dash|bash|both]
 *
 * prints one line per 100,000 cases and a closing JSON line; exits 1 at the
 * first failing case, with the case.
 */
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "lib/util.h"
#include "plan/template.h"

static uint64_t rng = 88172645463325252ULL;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int pick(int n)
{
	return (int)(next() % (uint64_t)n);
}

struct buf {
	char *p;
	size_t len, cap;
};

static void add(struct buf *b, const char *s, size_t n)
{
	while (b->len + n + 1 > b->cap) {
		b->cap = b->cap ? b->cap * 2 : 256;
		b->p = xrealloc(b->p, b->cap);
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void adds(struct buf *b, const char *s)
{
	add(b, s, strlen(s));
}

/* A hostile value: fragments that close quotes, substitute, end lines and documents, all calling ferry_pwned. */
static void make_value(struct buf *v)
{
	static const char *const frags[] = {
		"'", "\"", "\\", "`", "$", "$(ferry_pwned)", "`ferry_pwned`", ";ferry_pwned;", "|ferry_pwned",
		"&&ferry_pwned", "\nferry_pwned\n", "\nEOF\nferry_pwned\n", "EOF", "$((1+1))", "${x:-y}", "$x",
		"*", "?", "[a]", "}", "{", "{{", "}}", ")", "(", "#", "&", "<", ">", " ", "\t", "\n", "-n", "-e",
		"%s", "\\n", "$'\\x41'", "a[$(ferry_pwned)]", "'$(ferry_pwned)'", "\"$(ferry_pwned)\"",
		"\\`ferry_pwned\\`", "x", "42", "-7", "\xc3\xa9", "\x01", "!", "~", "=", "$@", "$1", "\r",
	};
	int n = 1 + pick(6);

	v->len = 0;
	adds(v, "");
	if (pick(8) == 0) { /* an integer now and then: arithmetic renders it */
		char num[24];
		snprintf(num, sizeof(num), "%d", pick(2000) - 1000);
		adds(v, num);
		return;
	}
	for (int i = 0; i < n; i++)
		adds(v, frags[pick((int)(sizeof(frags) / sizeof(frags[0])))]);
}

enum place { P_BARE, P_SQ, P_DQ, P_ANSI, P_SUB, P_DQSUB, P_BQ, P_BRACE, P_NESTED, P_COMMENT, P_HEREDOC,
	     P_QHEREDOC, P_ARITH, P_DQ_BQ, P_DQ_BRACE, P_CASE, NPLACES };

static int is_integer(const char *v)
{
	const char *d = v + (*v == '-' || *v == '+');
	return *d && d[strspn(d, "0123456789")] == '\0';
}

/* $(…) drops the trailing newlines of what it captures */
static void add_captured(struct buf *b, const char *v)
{
	size_t n = strlen(v);
	while (n > 0 && v[n - 1] == '\n')
		n--;
	add(b, v, n);
}

/*
 * One line of the script at place p, and what it must print into want
 * (*refuse: the renderer must refuse it).
 */
static void make_line(struct buf *s, struct buf *want, int *refuse, enum place p, const char *v, int bash)
{
	*refuse = 0;
	switch (p) {
	case P_BARE:
		adds(s, "printf '%s|\\n' {{params.v}}\n");
		adds(want, v), adds(want, "|\n");
		break;
	case P_SQ:
		adds(s, "printf '%s|\\n' 'a{{params.v}}b'\n");
		adds(want, "a"), adds(want, v), adds(want, "b|\n");
		break;
	case P_DQ:
		adds(s, "printf '%s|\\n' \"a $x{{params.v}}b\"\n");
		adds(want, "a "), adds(want, v), adds(want, "b|\n");
		break;
	case P_ANSI:
		if (!bash) { /* dash has no $'…' */
			adds(s, "printf '%s|\\n' {{params.v}}\n");
			adds(want, v), adds(want, "|\n");
			break;
		}
		adds(s, "printf '%s|\\n' $'a{{params.v}}b'\n");
		adds(want, "a"), adds(want, v), adds(want, "b|\n");
		break;
	case P_SUB:
		adds(s, "y=$(printf '%s' {{params.v}}); printf '%s|\\n' \"$y\"\n");
		add_captured(want, v), adds(want, "|\n");
		break;
	case P_DQSUB:
		adds(s, "printf '%s|\\n' \"$(printf '%s' \"{{params.v}}\")\"\n");
		add_captured(want, v), adds(want, "|\n");
		break;
	case P_BQ:
		adds(s, "y=`printf '%s' {{params.v}}`; printf '%s|\\n' \"$y\"\n");
		add_captured(want, v), adds(want, "|\n");
		break;
	case P_BRACE:
		adds(s, "y=${u:-{{params.v}}}; printf '%s|\\n' \"$y\"\n");
		adds(want, v), adds(want, "|\n");
		break;
	case P_NESTED:
		adds(s, "printf '%s|\\n' \"$(printf '%s' \"$(printf '%s' {{params.v}})\")\"\n");
		add_captured(want, v), adds(want, "|\n");
		break;
	case P_COMMENT:
		adds(s, "printf 'c|\\n' # note {{params.v}} ok\n");
		adds(want, "c|\n");
		break;
	case P_HEREDOC:
		adds(s, "cat <<EOF\n{{params.v}}\nEOF\n");
		*refuse = 1;
		break;
	case P_QHEREDOC:
		adds(s, "cat <<'EOF'\nx {{params.v}}\nEOF\n");
		*refuse = 1;
		break;
	case P_ARITH:
		adds(s, "printf '%s|\\n' $(( 1 + {{params.v}} ))\n");
		if (is_integer(v)) {
			char n[32];
			snprintf(n, sizeof(n), "%lld|\n", 1 + strtoll(v, NULL, 10));
			adds(want, n);
		} else {
			*refuse = 1;
		}
		break;
	case P_DQ_BQ:
		adds(s, "printf '%s|\\n' \"`printf '%s' {{params.v}}`\"\n");
		*refuse = 1;
		break;
	case P_DQ_BRACE:
		adds(s, "printf '%s|\\n' \"${u:-{{params.v}}}\"\n");
		*refuse = 1;
		break;
	case P_CASE:
		adds(s, "case {{params.v}} in (*) printf '%s|\\n' {{params.v}};; esac\n");
		adds(want, v), adds(want, "|\n");
		break;
	default:
		break;
	}
}

/* A shell as nobody, PATH empty, reading commands from a pipe; ferry_pwned defined. */
struct sh {
	const char *path;
	pid_t pid;
	int in, out;
};

static void sh_start(struct sh *h, const char *path)
{
	int a[2], b[2];
	struct passwd *pw = getpwnam("nobody");

	if (pipe(a) < 0 || pipe(b) < 0)
		exit(2);
	h->path = path;
	h->pid = fork();
	if (h->pid == 0) {
		char *envp[] = {"PATH=/nonexistent", "LC_ALL=C", NULL};
		dup2(a[0], 0);
		dup2(b[1], 1);
		dup2(b[1], 2);
		close(a[0]), close(a[1]), close(b[0]), close(b[1]);
		if (getuid() == 0 && (pw == NULL || setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 ||
				      setuid(pw->pw_uid) < 0))
			_exit(2);
		if (chdir("/") < 0)
			_exit(2);
		execle(path, path, "-s", (char *)NULL, envp);
		_exit(127);
	}
	close(a[0]);
	close(b[1]);
	h->in = a[1];
	h->out = b[0];
	dprintf(h->in, "ferry_pwned() { printf 'PWNED\\n'; }\n");
}

static void sh_stop(struct sh *h)
{
	close(h->in);
	close(h->out);
	kill(h->pid, SIGKILL);
	waitpid(h->pid, NULL, 0);
}

/* Runs script (rendered) in a subshell of h; its output into out. 0, or -1 on a hang (5 s). */
static int sh_run(struct sh *h, const char *script, long n, struct buf *out)
{
	struct buf cmd = {0};
	char end[48];

	/* the script as one single-quoted word for eval */
	adds(&cmd, "(eval '");
	for (const char *p = script; *p; p++)
		*p == '\'' ? adds(&cmd, "'\\''") : add(&cmd, p, 1);
	snprintf(end, sizeof(end), "@@END %ld@@", n);
	adds(&cmd, "') </dev/null 2>&1; printf '\\n");
	adds(&cmd, end);
	adds(&cmd, "\\n'\n");
	if (fd_write_all(h->in, cmd.p, cmd.len) < 0)
		return -1;
	free(cmd.p);
	out->len = 0;
	adds(out, "");
	for (;;) {
		char chunk[4096];
		struct pollfd pf = {.fd = h->out, .events = POLLIN};
		ssize_t r;
		char *at;
		if (poll(&pf, 1, 5000) <= 0)
			return -1;
		r = read(h->out, chunk, sizeof(chunk));
		if (r <= 0)
			return -1;
		add(out, chunk, (size_t)r);
		if ((at = strstr(out->p, end)) != NULL) {
			/* drop the newline printf put before the marker */
			out->len = (size_t)(at - out->p);
			if (out->len > 0)
				out->len--;
			out->p[out->len] = '\0';
			return 0;
		}
	}
}

static void report(const char *why, const char *shell, const char *tmpl, const char *value, const char *rendered,
		   const char *want, const char *got)
{
	json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s?, s:s?, s:s?}", "failure", why, "shell", shell,
			      "script", tmpl, "value", value, "rendered", rendered, "want", want, "got", got);
	char *t = json_dumps(j, JSON_INDENT(2) | JSON_ENSURE_ASCII);

	fprintf(stderr, "quote_oracle: %s\n%s\n", why, t);
	free(t);
	json_decref(j);
}

int main(int argc, char **argv)
{
	long execs = 100000, done = 0, refused = 0, runs = 0;
	const char *which = "both";
	struct sh shells[2];
	int nsh = 0;
	struct buf tmpl = {0}, want = {0}, value = {0}, out = {0};
	time_t t0 = time(NULL);

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--execs") == 0) {
			int64_t v;
			if (parse_int64(argv[i + 1], &v) < 0 || v < 1) {
				fprintf(stderr, "quote_oracle: --execs takes a number of cases\n");
				return 2;
			}
			execs = (long)v;
		}
		else if (strcmp(argv[i], "--seed") == 0)
			rng ^= strtoull(argv[i + 1], NULL, 10) * 0x9E3779B97F4A7C15ULL;
		else if (strcmp(argv[i], "--shell") == 0)
			which = argv[i + 1];
	}
	signal(SIGPIPE, SIG_IGN);
	if (strcmp(which, "bash") != 0)
		sh_start(&shells[nsh++], "/bin/dash");
	if (strcmp(which, "dash") != 0)
		sh_start(&shells[nsh++], "/bin/bash");
	while (done < execs) {
		struct sh *h = &shells[done % nsh];
		int bash = strstr(h->path, "bash") != NULL, lines = 1 + pick(3), refuse_any = 0;
		json_t *params;
		char *rendered = NULL;
		int rc;

		make_value(&value);
		tmpl.len = want.len = 0;
		adds(&tmpl, "");
		adds(&want, "");
		for (int i = 0; i < lines; i++) {
			int refuse;
			/* the places that render, mostly: a refused case runs nothing */
			static const enum place renders[] = {P_BARE, P_SQ, P_DQ, P_ANSI, P_SUB, P_DQSUB, P_BQ,
							      P_BRACE, P_NESTED, P_COMMENT, P_ARITH, P_CASE};
			enum place p = pick(8) == 0 ? (enum place)pick(NPLACES)
						    : renders[pick((int)(sizeof(renders) / sizeof(renders[0])))];
			make_line(&tmpl, &want, &refuse, p, value.p, bash);
			refuse_any |= refuse;
		}
		params = json_pack("{s:s}", "v", value.p);
		if (params == NULL) { /* not UTF-8: jansson refuses it, as the API would */
			done++;
			continue;
		}
		rc = tmpl_render_shell(&rendered, tmpl.p, params, "1");
		json_decref(params);
		if (rc < 0) {
			if (!refuse_any) {
				report("refused a place that renders", h->path, tmpl.p, value.p, ferry_error_last(), NULL, NULL);
				return 1;
			}
			refused++;
			done++;
			continue;
		}
		if (refuse_any) {
			report("rendered a place that must be refused", h->path, tmpl.p, value.p, rendered, NULL, NULL);
			return 1;
		}
		if (sh_run(h, rendered, done, &out) < 0) {
			report("the shell hung or died", h->path, tmpl.p, value.p, rendered, want.p, out.p);
			return 1;
		}
		runs++;
		if (strstr(out.p, "PWNED")) {
			report("the value ran as code", h->path, tmpl.p, value.p, rendered, want.p, out.p);
			return 1;
		}
		if (strstr(out.p, "yntax error") || strstr(out.p, "unexpected")) {
			report("the rendered script does not parse", h->path, tmpl.p, value.p, rendered, want.p, out.p);
			return 1;
		}
		if (strcmp(out.p, want.p) != 0) {
			report("the script printed something else than the value", h->path, tmpl.p, value.p, rendered,
			       want.p, out.p);
			return 1;
		}
		free(rendered);
		if (++done % 100000 == 0)
			fprintf(stderr, "quote_oracle: %ld cases (%ld run, %ld refused), %lds\n", done, runs, refused,
				(long)(time(NULL) - t0));
	}
	for (int i = 0; i < nsh; i++)
		sh_stop(&shells[i]);
	printf("{\"bench\":\"quote_oracle\",\"cases\":%ld,\"run_in_a_shell\":%ld,\"refused\":%ld,\"seconds\":%ld,"
	       "\"failures\":0}\n", done, runs, refused, (long)(time(NULL) - t0));
	return 0;
}

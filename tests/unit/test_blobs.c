/* Unit tests of the content-addressed blob store (lib/blobs.c): names, puts, a fetch refused, downloads checked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/blobs.h"
#include "lib/util.h"

#define ABC "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" /* sha256("abc") */

static void test_blobs__hex_of_a_store_path(void **state)
{
	char hex[65];

	(void)state;
	assert_int_equal(blobs_hex_of(hex, "/h/artifacts/sha256/ba/" ABC), 1);
	assert_string_equal(hex, ABC);
	/* any host's store: the name is what counts */
	assert_int_equal(blobs_hex_of(hex, "/elsewhere/x/sha256/ba/" ABC), 1);
	assert_int_equal(blobs_hex_of(hex, "/h/artifacts/sha256/bb/" ABC), 0);       /* not its folder */
	assert_int_equal(blobs_hex_of(hex, "/h/artifacts/sha1/ba/" ABC), 0);         /* not sha256/ */
	assert_int_equal(blobs_hex_of(hex, "/h/artifacts/sha256/ba/" ABC "0"), 0);   /* 65 digits */
	assert_int_equal(blobs_hex_of(hex, "/h/artifacts/sha256/BA/BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"), 0);
	assert_int_equal(blobs_hex_of(hex, "/runs/1/train/1/model.bin"), 0);
	assert_int_equal(blobs_hex_of(hex, ""), 0);
	assert_int_equal(blobs_hex_of(hex, NULL), 0);
	assert_int_equal(blobs_is_hex(ABC), 1);
	assert_int_equal(blobs_is_hex("../../etc/passwd"), 0);
}

static void test_blobs__put_once_read_only(void **state)
{
	char tmpl[] = "/tmp/test_blobs.XXXXXX", hex[65], hex2[65], *home = mkdtemp(tmpl), *path = NULL, *path2 = NULL;
	char *want, *src, *text = NULL;
	int64_t bytes = 0;
	struct stat st;
	FILE *f;

	(void)state;
	assert_non_null(home);
	assert_int_equal(blobs_put_bytes(hex, &path, home, "abc", 3), FERRY_OK);
	assert_string_equal(hex, ABC);
	want = blobs_path(home, ABC);
	assert_string_equal(path, want);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0444);
	/* the same bytes from a file: the same blob, stored once */
	src = xasprintf("%s/src", home);
	f = fopen(src, "w");
	fputs("abc", f);
	fclose(f);
	assert_int_equal(blobs_put_file(hex2, &bytes, &path2, home, src), FERRY_OK);
	assert_string_equal(hex2, ABC);
	assert_int_equal(bytes, 3);
	assert_string_equal(path2, want);
	assert_int_equal(file_read(&text, NULL, path2), FERRY_OK);
	assert_string_equal(text, "abc");
	free(text), free(src), free(want), free(path), free(path2);
	text = xasprintf("rm -rf %s", home);
	assert_int_equal(system(text), 0);
	free(text);
}

/* a host that cannot be reached: an error naming it, nothing left in the store */
static void test_blobs__fetch_unreachable_keeps_nothing(void **state)
{
	char tmpl[] = "/tmp/test_blobs.XXXXXX", *home = mkdtemp(tmpl), *path, *cmd;
	int64_t bytes = 1;

	(void)state;
	assert_non_null(home);
	/* port 1 on loopback: refused at once */
	assert_int_equal(blobs_fetch(home, ABC, "http://127.0.0.1:1/api/v1/blobs/" ABC, "t", &bytes), FERRY_ERROR);
	assert_non_null(strstr(ferry_error_last(), "http://127.0.0.1:1/api/v1/blobs/"));
	assert_int_equal(bytes, 0);
	path = blobs_path(home, ABC);
	assert_int_not_equal(access(path, F_OK), 0);
	assert_int_equal(blobs_fetch(home, "../x", "http://127.0.0.1:1/", "t", &bytes), FERRY_EINVALID);
	cmd = xasprintf("test -z \"$(ls -A %s/artifacts/tmp 2>/dev/null)\" && rm -rf %s", home, home);
	assert_int_equal(system(cmd), 0); /* no temporary file left */
	free(cmd), free(path);
}

/*
 * A real HTTP server (python3's http.server) that serves "hello" at /ok with
 * its sha256 in X-Ferry-Sha256, at /bad with another one, at /none with
 * none; 404 elsewhere. Its port is written to portfile.
 */
static const char server_py[] =
	"import hashlib, http.server, os, sys\n"
	"h = hashlib.sha256(b'hello').hexdigest(); o = hashlib.sha256(b'other').hexdigest()\n"
	"class H(http.server.BaseHTTPRequestHandler):\n"
	"    def log_message(self, *a): pass\n"
	"    def do_GET(self):\n"
	"        said = {'/ok': h, '/bad': o, '/none': None}\n"
	"        if self.path not in said: self.send_response(404); self.end_headers(); return\n"
	"        self.send_response(200); self.send_header('Content-Length', '5')\n"
	"        if said[self.path]: self.send_header('X-Ferry-Sha256', said[self.path])\n"
	"        self.end_headers(); self.wfile.write(b'hello')\n"
	"s = http.server.HTTPServer(('127.0.0.1', 0), H)\n"
	"open(sys.argv[1] + '.tmp', 'w').write(str(s.server_address[1])); os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
	"s.serve_forever()\n";

/* blobs_download: kept only when the bytes hash to what the server said; nothing left otherwise */
static void test_blobs__download_checks_the_said_hash(void **state)
{
	char tmpl[] = "/tmp/test_blobs.XXXXXX", *dir = mkdtemp(tmpl), *portfile, *text = NULL, *url, *dest, *cmd, got[65];
	int64_t bytes = 0;
	pid_t pid;

	(void)state;
	assert_non_null(dir);
	portfile = xasprintf("%s/port", dir);
	if ((pid = fork()) == 0) {
		execl("/usr/bin/python3", "python3", "-c", server_py, portfile, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 300 && access(portfile, F_OK) != 0; i++)
		usleep(50000);
	assert_int_equal(file_read(&text, NULL, portfile), 0);
	dest = xasprintf("%s/a/b/out/model.bin", dir);

	url = xasprintf("http://127.0.0.1:%s/ok", text);
	assert_int_equal(blobs_download(dest, url, "t", got, &bytes), FERRY_OK);
	assert_string_equal(got, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"); /* sha256("hello") */
	assert_int_equal(bytes, 5);
	free(url), free(text);
	assert_int_equal(file_read(&text, NULL, dest), 0);
	assert_string_equal(text, "hello");
	unlink(dest);

	/* another hash said: refused, nothing kept */
	free(text);
	assert_int_equal(file_read(&text, NULL, portfile), 0);
	url = xasprintf("http://127.0.0.1:%s/bad", text);
	assert_int_equal(blobs_download(dest, url, "t", got, &bytes), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "not the d929")); /* sha256("other") */
	assert_int_not_equal(access(dest, F_OK), 0);
	free(url);
	/* no hash said: refused */
	url = xasprintf("http://127.0.0.1:%s/none", text);
	assert_int_equal(blobs_download(dest, url, "t", got, &bytes), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "X-Ferry-Sha256"));
	assert_int_not_equal(access(dest, F_OK), 0);
	free(url);
	/* a 404 */
	url = xasprintf("http://127.0.0.1:%s/gone", text);
	assert_int_equal(blobs_download(dest, url, "t", got, &bytes), FERRY_ENOTFOUND);
	free(url);

	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* nothing but the port file and the directories: no partial file left */
	cmd = xasprintf("test -z \"$(find %s -type f ! -name port)\" && rm -rf %s", dir, dir);
	assert_int_equal(system(cmd), 0);
	free(cmd), free(dest), free(portfile), free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blobs__hex_of_a_store_path),
		cmocka_unit_test(test_blobs__put_once_read_only),
		cmocka_unit_test(test_blobs__fetch_unreachable_keeps_nothing),
		cmocka_unit_test(test_blobs__download_checks_the_said_hash),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

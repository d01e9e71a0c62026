/*
 * util — error buffer, allocation wrappers, logging, clocks. Logging writes
 * one line per call with a millisecond UTC timestamp, either as text or as a
 * JSON object per line (--log-format json); callers go through the macros in
 * util.h so a disabled level costs no formatting.
 */
#include "lib/util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char error_buf[1024];

void ferry_error_set(const char *fmt, ...)
{
	char tmp[sizeof(error_buf)];
	va_list ap;

	/* through a copy: callers may wrap the last message ("…: %s", ferry_error_last()) */
	va_start(ap, fmt);
	vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	memcpy(error_buf, tmp, sizeof(tmp));
}

const char *ferry_error_last(void)
{
	return error_buf;
}

void ferry_error_clear(void)
{
	error_buf[0] = '\0';
}

static void oom(void)
{
	static const char msg[] = "ferry: out of memory\n";
	(void)!write(2, msg, sizeof(msg) - 1);
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (p == NULL)
		oom();
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (p == NULL)
		oom();
	return p;
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (q == NULL)
		oom();
	return q;
}

char *xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
	char *p;

	n = strnlen(s, n); /* at most n bytes, never past the end of s (strndup's rule) */
	p = xmalloc(n + 1);
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *out = NULL;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&out, fmt, ap);
	va_end(ap);
	if (n < 0)
		oom();
	return out;
}

int flog_level = FLOG_INFO;
static int flog_json;

void flog_setup(int level, int json)
{
	flog_level = level;
	flog_json = json;
}

static void json_escape_to(FILE *f, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
}

void flog_write(int level, const char *fmt, ...)
{
	static const char *names[] = {"debug", "info", "warn", "error"};
	char msg[2048], ts[64];
	struct timespec now;
	struct tm tm;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
		 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		 tm.tm_min, tm.tm_sec, now.tv_nsec / 1000000);
	flockfile(stderr);
	if (flog_json) {
		fprintf(stderr, "{\"ts\":\"%s\",\"level\":\"%s\",\"pid\":%d,\"msg\":\"",
			ts, names[level], (int)getpid());
		json_escape_to(stderr, msg);
		fputs("\"}\n", stderr);
	} else {
		fprintf(stderr, "%s %d %-5s %s\n", ts, (int)getpid(), names[level], msg);
	}
	funlockfile(stderr);
}

int64_t clock_mono_ms(void)
{
	return clock_mono_us() / 1000;
}

int64_t clock_mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t clock_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int parse_int64(const char *s, int64_t *out)
{
	char *end;
	long long v;

	if (s == NULL || *s == '\0')
		return FERRY_EINVALID;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return FERRY_EINVALID;
	*out = v;
	return FERRY_OK;
}

int mkdir_p(const char *dir, unsigned mode)
{
	char *parent, *end;
	int error;

	/*
	 * The directory itself first, its parents only when one is missing (from
	 * the deepest that exists): a job's directories (runs/RUN/STEP/N/out, the
	 * step's checkpoint) have most of their path already, and walking it from
	 * the root was nine mkdir calls a job that each looked up a long path to
	 * say EEXIST.
	 */
	if (mkdir(dir, mode ? mode : 0755) == 0 || errno == EEXIST)
		return FERRY_OK;
	if (errno != ENOENT) {
		ferry_error_set("cannot create directory %s: %s", dir, strerror(errno));
		return FERRY_ERROR;
	}
	parent = xstrdup(dir);
	end = parent + strlen(parent);
	while (end > parent && end[-1] == '/') /* "a/b/": b's parent is a */
		*--end = '\0';
	while (end > parent && end[-1] != '/')
		end--;
	while (end > parent + 1 && end[-1] == '/')
		end--;
	*end = '\0';
	if (parent[0] == '\0' || strcmp(parent, "/") == 0) { /* nothing above to make: ENOENT stands */
		free(parent);
		ferry_error_set("cannot create directory %s: %s", dir, strerror(ENOENT));
		return FERRY_ERROR;
	}
	error = mkdir_p(parent, mode);
	free(parent);
	if (error < 0)
		return error;
	if (mkdir(dir, mode ? mode : 0755) < 0 && errno != EEXIST) {
		ferry_error_set("cannot create directory %s: %s", dir, strerror(errno));
		return FERRY_ERROR;
	}
	return FERRY_OK;
}

int file_read(char **out, size_t *len, const char *path)
{
	char *buf = NULL;
	size_t n = 0, cap = 0;
	ssize_t r;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ferry_error_set("cannot open %s: %s", path, strerror(errno));
		return errno == ENOENT ? FERRY_ENOTFOUND : FERRY_ERROR;
	}
	for (;;) {
		if (cap - n < 4096) {
			cap = cap ? cap * 2 : 8192;
			buf = xrealloc(buf, cap);
		}
		r = read(fd, buf + n, cap - n - 1);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			ferry_error_set("cannot read %s: %s", path, strerror(errno));
			free(buf);
			close(fd);
			return FERRY_ERROR;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
	*out = buf;
	if (len)
		*len = n;
	return FERRY_OK;
}

void hex_encode(char *out, const unsigned char *p, size_t n)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = '\0';
}

int fd_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		if (w == 0) {
			errno = EIO;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* nftw visits one thread's tree at a time here: the first failure is kept in this thread's buffer */
static _Thread_local int rm_failed;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	if (remove(path) != 0 && errno != ENOENT && !rm_failed) {
		ferry_error_set("cannot remove %s: %s", path, strerror(errno));
		rm_failed = 1;
	}
	return 0;
}

int run_dir_remove(const char *home, int64_t id)
{
	char *dir = xasprintf("%s/runs/%lld", home, (long long)id);
	struct stat st;
	int error = FERRY_OK;

	rm_failed = 0;
	if (id > 0 && lstat(dir, &st) == 0) {
		if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) != 0 && !rm_failed) {
			ferry_error_set("cannot remove %s: %s", dir, strerror(errno));
			rm_failed = 1;
		}
		error = rm_failed ? FERRY_ERROR : FERRY_OK;
	}
	free(dir);
	return error;
}

int path_within(const char *real, const char *dir)
{
	char base[PATH_MAX];
	size_t n;

	if (dir == NULL || realpath(dir, base) == NULL)
		return 0;
	n = strlen(base);
	return strncmp(real, base, n) == 0 && (real[n] == '/' || real[n] == '\0' || n == 1);
}

char *path_lexical(const char *p)
{
	size_t n, o = 0;
	char *r;

	if (p == NULL || p[0] != '/')
		return NULL;
	n = strlen(p);
	r = xmalloc(n + 2);
	r[o++] = '/';
	for (size_t i = 0; i < n;) {
		size_t len;
		while (p[i] == '/')
			i++;
		len = strcspn(p + i, "/");
		if (len == 0)
			break;
		if (len == 1 && p[i] == '.') {
			/* nothing */
		} else if (len == 2 && p[i] == '.' && p[i + 1] == '.') {
			/* back to the slash before the last component ("/" stays "/") */
			while (o > 1 && r[o - 1] != '/')
				o--;
			if (o > 1)
				o--;
		} else {
			if (o > 1)
				r[o++] = '/';
			memcpy(r + o, p + i, len);
			o += len;
		}
		i += len;
	}
	r[o] = '\0';
	return r;
}

int path_within_lexical(const char *p, const char *dir)
{
	char *a = path_lexical(p), *b = path_lexical(dir);
	size_t n = b ? strlen(b) : 0;
	int in = a && b && strncmp(a, b, n) == 0 && (a[n] == '/' || a[n] == '\0' || n == 1);

	free(a);
	free(b);
	return in;
}

char *ferry_address_file(void)
{
	const char *file = getenv("FERRY_ADDRESS_FILE"), *home = getenv("FERRY_HOME");

	if (file && *file)
		return xstrdup(file);
	return xasprintf("%s/ferryd.url", home && *home ? home : "./.ferry");
}

const char *quote_clip(char *buf, size_t cap, const char *s, size_t n, size_t max)
{
	size_t i, lim = n, o = 0;

	if (lim > max) {
		lim = max;
		while (lim > 0 && ((unsigned char)s[lim] & 0xC0) == 0x80)
			lim--;
	}
	buf[o++] = '"';
	for (i = 0; i < lim && o + 8 < cap; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '"' || ch == '\\')
			buf[o++] = '\\';
		if (ch < 0x20 || ch == 0x7f)
			o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", ch);
		else
			buf[o++] = (char)ch;
	}
	if (i < n) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o++] = '"';
	buf[o] = '\0';
	return buf;
}

void ferry_host_name(char *buf, size_t n)
{
	const char *h = getenv("FERRY_HOST");

	if (n == 0)
		return;
	if (h && *h) {
		snprintf(buf, n, "%s", h);
		return;
	}
	snprintf(buf, n, "localhost");
	if (gethostname(buf, n - 1) < 0)
		snprintf(buf, n, "localhost");
	buf[n - 1] = '\0';
}

struct niced {
	int (*fn)(void *);
	void *arg;
	int rc;
	char *error;
};

static void *niced_main(void *p)
{
	struct niced *n = p;

	/* this thread only (a Linux thread's id names it); failing leaves it at the caller's */
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10) < 0)
		flog_debug("run_niced: cannot lower this thread's priority: %s", strerror(errno));
	n->rc = n->fn(n->arg);
	if (n->rc < 0)
		n->error = xstrdup(ferry_error_last());
	return NULL;
}

int run_niced(int (*fn)(void *), void *arg)
{
	struct niced n = {fn, arg, 0, NULL};
	pthread_t t;

	if (pthread_create(&t, NULL, niced_main, &n) != 0)
		return fn(arg);
	pthread_join(t, NULL);
	if (n.error) {
		ferry_error_set("%s", n.error);
		free(n.error);
	}
	return n.rc;
}

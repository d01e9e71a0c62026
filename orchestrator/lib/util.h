/*
 * util — the few things every module needs: the error enum and the
 * per-thread error message, checked allocation, levelled logging with
 * millisecond timestamps, and clocks.
 */
#ifndef FERRY_UTIL_H
#define FERRY_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define FERRY_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* Return codes of every fallible function: 0 or one of these. */
enum {
	FERRY_OK = 0,
	FERRY_ERROR = -1,     /* generic failure; message says why */
	FERRY_ENOTFOUND = -2, /* the named run, step, workflow does not exist */
	FERRY_EINVALID = -3,  /* bad input from a user */
	FERRY_ECONFLICT = -4, /* action not valid in the current state */
	FERRY_EDB = -5,       /* the database failed or is unreachable */
};

/* Sets this thread's error message (printf format). */
void ferry_error_set(const char *fmt, ...) FERRY_PRINTF(1, 2);
/* This thread's last error message ("" when none); valid until the next set. */
const char *ferry_error_last(void);
void ferry_error_clear(void);

/* Allocation that aborts on out-of-memory: callers never see NULL. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
/* At most the first n bytes of s, as strndup: it stops at s's end (read no further) */
char *xstrndup(const char *s, size_t n);
/* Returns a newly allocated formatted string; the caller frees it. */
char *xasprintf(const char *fmt, ...) FERRY_PRINTF(1, 2);

/* Logging: one line per call, to stderr, text or JSON lines. */
enum { FLOG_DEBUG = 0, FLOG_INFO, FLOG_WARN, FLOG_ERROR };
extern int flog_level;
void flog_setup(int level, int json);
void flog_write(int level, const char *fmt, ...) FERRY_PRINTF(2, 3);
#define flog_debug(...) do { if (flog_level <= FLOG_DEBUG) flog_write(FLOG_DEBUG, __VA_ARGS__); } while (0)
#define flog_info(...)  do { if (flog_level <= FLOG_INFO)  flog_write(FLOG_INFO, __VA_ARGS__); } while (0)
#define flog_warn(...)  do { if (flog_level <= FLOG_WARN)  flog_write(FLOG_WARN, __VA_ARGS__); } while (0)
#define flog_error(...) do { if (flog_level <= FLOG_ERROR) flog_write(FLOG_ERROR, __VA_ARGS__); } while (0)

/* Milliseconds on the monotonic clock, and wall-clock milliseconds. */
int64_t clock_mono_ms(void);
int64_t clock_mono_us(void);
int64_t clock_wall_ms(void);

/* Parses a base-10 integer; the whole string must be a number in range. */
int parse_int64(const char *s, int64_t *out);

/*
 * Writes s (n bytes) double-quoted into buf (cap bytes; 4 * max + 16 is
 * always enough): quotes, backslashes and control characters escaped,
 * clipped at max bytes on a UTF-8 boundary with "...", so a user's text in
 * a message stays one short line whatever it holds. Returns buf.
 */
const char *quote_clip(char *buf, size_t cap, const char *s, size_t n, size_t max);

/* Creates DIR and its parents (mode 0755 unless set); 0 or FERRY_ERROR. */
int mkdir_p(const char *dir, unsigned mode);

/* Writes the n bytes of p as 2n lowercase hex digits and a NUL into out. */
void hex_encode(char *out, const unsigned char *p, size_t n);

/* The sha256 of n bytes at p as 64 lowercase hex digits and a NUL. */
void sha256_hex(char out[65], const void *p, size_t n);

/* The sha256 of what is left to read from fd (read to its end): 0, or FERRY_ERROR with the message set. */
int sha256_fd(char out[65], int fd);

/*
 * Writes all n bytes (through EINTR and short writes); 0, or -1 with errno
 * set. Only write(2) is called: safe between fork and exec.
 */
int fd_write_all(int fd, const void *buf, size_t n);

/* Whether the resolved path real is dir (resolved here) or below it; 0 when dir is NULL or unresolvable. */
int path_within(const char *real, const char *dir);

/*
 * The absolute path p with ".", ".." and repeated slashes taken out by its
 * text alone ("/a/b/../c/" → "/a/c"; ".." of "/" is "/"), touching no file
 * system: what a path names before its links are followed, to refuse one
 * that leaves a root before asking whether it exists there. NULL when p is
 * not absolute; the caller frees it.
 */
char *path_lexical(const char *p);

/* Whether the absolute path p, taken lexically (path_lexical), is dir or below it, dir taken lexically too. */
int path_within_lexical(const char *p, const char *dir);

/*
 * Removes the directory of run id under home ($home/runs/ID) with all it
 * holds: links are removed, never followed, and other file systems mounted
 * below are left alone; a missing directory is fine. The path is made from
 * the id alone, so it cannot leave $home/runs. 0, or FERRY_ERROR when
 * something stayed (message set; the rest is removed).
 */
int run_dir_remove(const char *home, int64_t id);

/* Reads a whole file into a NUL-terminated buffer the caller frees. */
int file_read(char **out, size_t *len, const char *path);

/*
 * Where ferryd publishes the URL of its API, and where the CLI looks for it
 * when FERRY_URL is unset: FERRY_ADDRESS_FILE, else $FERRY_HOME/ferryd.url
 * (FERRY_HOME defaults to ./.ferry). The caller frees it.
 */
char *ferry_address_file(void);

/*
 * This daemon's host name in the fleet: FERRY_HOST when set (the engine
 * refuses one that is not a host name), else the machine's; into buf.
 */
void ferry_host_name(char *buf, size_t n);

/*
 * Runs fn(arg) on a thread of its own at nice 10 and returns what it
 * returned, its error message carried over to this thread. For bulk CPU
 * work (hashing an artifact, fingerprinting a dataset) that must yield to
 * dispatch and jobs. Only that work is niced: on Linux a nice value is per
 * thread, a process forked from a niced thread inherits it, and an
 * unprivileged thread cannot lower it again — a worker thread niced for
 * good started HAProxy, gdb and podman at nice 10 too, starved behind the
 * jobs. Runs fn here when no thread can be made.
 */
int run_niced(int (*fn)(void *), void *arg);

#endif

/*
 * jobfile — reading what a job left behind as the hostile input it is.
 *
 * A job can put anything where Ferry looks after it: a FIFO (an open or a
 * read waits for a writer that never comes), a symbolic link to
 * /etc/shadow or /dev/zero, a sparse file of terabytes, a directory, or a
 * parent directory replaced by a link. Every file Ferry reads from an
 * attempt's directory (metrics.json, outputs.json, the status file, the
 * log) is opened here, never with a plain open(), and so is every file
 * Ferry appends to there after the job ran (jobfile_append):
 *
 *  - beneath its root (the attempt directory), with no symbolic link in
 *    any component of the relative path (openat2 RESOLVE_BENEATH |
 *    RESOLVE_NO_SYMLINKS; where the kernel lacks openat2, each component
 *    opened with O_NOFOLLOW in turn);
 *  - O_NONBLOCK, so a FIFO never makes the open wait, and O_NOCTTY;
 *  - checked with fstat to be a regular file, and its size checked against
 *    the caller's limit before a byte is read; the read stops at the limit
 *    even when the file grows meanwhile.
 *
 * Errors: FERRY_ENOTFOUND when the file (or a directory on its way) does
 * not exist; FERRY_EINVALID, with a message for the step's reason that names
 * the file by its relative path (never the target of a link), when it is
 * not a regular file beneath the root or is over the limit; FERRY_ERROR for
 * the rest. Thread-safe; nothing here waits on the file's writer.
 */
#ifndef FERRY_JOBFILE_H
#define FERRY_JOBFILE_H

#include <stddef.h>
#include <sys/stat.h>

/*
 * Opens root/rel for reading as above; the descriptor (O_CLOEXEC, still
 * O_NONBLOCK, which a regular file ignores) or a negative FERRY_E… code.
 * st (when given) gets its fstat.
 */
int jobfile_open(const char *root, const char *rel, struct stat *st);

/*
 * Whether name may be a file of a job's output directory as others ask
 * for it (the outputs route, a fetch from another host): one path
 * component, not empty, not a dot file, under 256 bytes.
 */
int jobfile_output_name_ok(const char *name);

/*
 * Opens root/rel for appending (made, 0644, when missing), beneath root and
 * never through a link, as above: a job that put a link to /etc/passwd or
 * a FIFO in place of its log has Ferry write nothing there and wait for
 * nothing. The descriptor, or a negative FERRY_E… code.
 */
int jobfile_append(const char *root, const char *rel);

/*
 * Reads root/rel whole when it is at most limit bytes: *out gets the bytes
 * plus a terminating NUL (the caller's), *len (when given) their count.
 */
int jobfile_read(char **out, size_t *len, const char *root, const char *rel, size_t limit);

/* 1: every open takes the walk a kernel without openat2 takes (the unit tests try both). */
extern int jobfile_walk_only;

#endif

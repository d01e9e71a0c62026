/*
 * jobfile — files a job left, opened beneath their root, never following a
 * link, never waiting on a FIFO, read up to a limit decided before reading.
 * See jobfile.h for the contract.
 */
#include "lib/jobfile.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/util.h"

int jobfile_walk_only;

#define OPEN_FLAGS (O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW)
#define APPEND_FLAGS (O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW)

/* What kind of thing st is, for a message ("a FIFO"). */
static const char *kind_of(mode_t m)
{
	return S_ISDIR(m)   ? "a directory"
	       : S_ISFIFO(m) ? "a FIFO"
	       : S_ISLNK(m)  ? "a symbolic link"
	       : S_ISSOCK(m) ? "a socket"
	       : S_ISCHR(m)  ? "a character device"
	       : S_ISBLK(m)  ? "a block device"
			     : "not a regular file";
}

/* The message for errno e met opening rel; the code to return. */
static int open_failed(const char *rel, int e)
{
	switch (e) {
	case ENOENT:
		ferry_error_set("%s does not exist", rel);
		return FERRY_ENOTFOUND;
	case ELOOP:
		ferry_error_set("%s is a symbolic link or lies behind one; Ferry reads only regular files "
				"the job wrote in its own directory", rel);
		return FERRY_EINVALID;
	case EXDEV:
		ferry_error_set("%s leads outside the attempt's directory", rel);
		return FERRY_EINVALID;
	case ENOTDIR:
		ferry_error_set("%s: a component on its way is not a directory", rel);
		return FERRY_EINVALID;
	case ENXIO:
		ferry_error_set("%s is a socket or a device, not a regular file", rel);
		return FERRY_EINVALID;
	default:
		ferry_error_set("cannot open %s: %s", rel, strerror(e));
		return FERRY_ERROR;
	}
}

/* Without openat2: each directory component with O_NOFOLLOW | O_DIRECTORY, then the file. */
static int open_walk(int dfd, const char *rel, int flags)
{
	char *copy = xstrdup(rel), *save = NULL, *part, *next;
	int fd = -1, cur = dfd, e = 0;

	part = strtok_r(copy, "/", &save);
	while (part != NULL) {
		next = strtok_r(NULL, "/", &save);
		if (strcmp(part, "..") == 0) {
			e = EXDEV;
			break;
		}
		fd = next ? openat(cur, part, O_RDONLY | O_CLOEXEC | O_DIRECTORY | O_NOFOLLOW)
			  : openat(cur, part, flags, 0644);
		if (fd < 0)
			e = errno;
		if (cur != dfd)
			close(cur);
		if (fd < 0 || next == NULL)
			break;
		cur = fd;
		fd = -1;
		part = next;
	}
	free(copy);
	if (fd < 0)
		errno = e ? e : ENOENT;
	return fd;
}

/* root/rel opened with flags (OPEN_FLAGS or APPEND_FLAGS) as jobfile.h says; what Ferry does with it: "reads" or "writes". */
static int open_beneath(const char *root, const char *rel, int flags, const char *verb, struct stat *st)
{
	struct open_how how = {.flags = (unsigned)flags, .mode = (flags & O_CREAT) ? 0644 : 0,
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	struct stat sb;
	int dfd, fd, e;

	if (rel == NULL || rel[0] == '\0' || rel[0] == '/') {
		ferry_error_set("%s: a path relative to the attempt's directory is expected", rel ? rel : "(null)");
		return FERRY_EINVALID;
	}
	dfd = open(root, O_RDONLY | O_CLOEXEC | O_DIRECTORY);
	if (dfd < 0) {
		e = errno;
		ferry_error_set("cannot open the directory %s: %s", root, strerror(e));
		return e == ENOENT ? FERRY_ENOTFOUND : FERRY_ERROR;
	}
	fd = jobfile_walk_only ? -1 : (int)syscall(SYS_openat2, dfd, rel, &how, sizeof(how));
	if (fd < 0 && (jobfile_walk_only || errno == ENOSYS || errno == EPERM)) /* an old kernel, or a seccomp filter */
		fd = open_walk(dfd, rel, flags);
	e = errno;
	close(dfd);
	if (fd < 0)
		return open_failed(rel, e);
	if (fstat(fd, &sb) < 0) {
		e = errno;
		close(fd);
		ferry_error_set("cannot stat %s: %s", rel, strerror(e));
		return FERRY_ERROR;
	}
	if (!S_ISREG(sb.st_mode)) {
		close(fd);
		ferry_error_set("%s is %s; Ferry %s only regular files", rel, kind_of(sb.st_mode), verb);
		return FERRY_EINVALID;
	}
	if (st)
		*st = sb;
	return fd;
}

int jobfile_open(const char *root, const char *rel, struct stat *st)
{
	return open_beneath(root, rel, OPEN_FLAGS, "reads", st);
}

int jobfile_append(const char *root, const char *rel)
{
	return open_beneath(root, rel, APPEND_FLAGS, "writes", NULL);
}

int jobfile_read(char **out, size_t *len, const char *root, const char *rel, size_t limit)
{
	struct stat st;
	char *buf;
	size_t n = 0, cap;
	ssize_t r = 0;
	int fd = jobfile_open(root, rel, &st), e;

	*out = NULL;
	if (fd < 0)
		return fd;
	if ((uintmax_t)st.st_size > (uintmax_t)limit) {
		close(fd);
		ferry_error_set("%s is %lld bytes; the limit is %zu bytes", rel, (long long)st.st_size, limit);
		return FERRY_EINVALID;
	}
	/* room for one byte past the size seen: a file that grows meanwhile is read on to the limit, no further */
	cap = (size_t)st.st_size + 1;
	buf = xmalloc(cap + 1);
	for (;;) {
		if (n == cap) {
			if (cap > limit)
				break;
			cap = cap > limit / 2 ? limit + 1 : 2 * cap;
			buf = xrealloc(buf, cap + 1);
		}
		r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	e = errno;
	close(fd);
	if (r < 0 || n > limit) {
		free(buf);
		if (r < 0)
			ferry_error_set("cannot read %s: %s", rel, strerror(e));
		else
			ferry_error_set("%s grew past its limit of %zu bytes while it was read", rel, limit);
		return r < 0 ? FERRY_ERROR : FERRY_EINVALID;
	}
	buf[n] = '\0';
	*out = buf;
	if (len)
		*len = n;
	return FERRY_OK;
}

int jobfile_output_name_ok(const char *name)
{
	return name && name[0] && name[0] != '.' && strchr(name, '/') == NULL && strlen(name) < 256;
}

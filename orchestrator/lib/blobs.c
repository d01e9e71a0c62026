/*
 * blobs — see blobs.h.
 */
#include "lib/blobs.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/util.h"

int blobs_is_hex(const char *s)
{
	return s && strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

int blobs_hex_of(char hex[65], const char *path)
{
	size_t n = path ? strlen(path) : 0;

	/* .../sha256/AB/HEX: 64 + "/" + 2 + "/" + "sha256" */
	if (n < 64 + 1 + 2 + 1 + 6 || !blobs_is_hex(path + n - 64) || path[n - 65] != '/' ||
	    strncmp(path + n - 67, path + n - 64, 2) != 0 || path[n - 68] != '/' ||
	    strncmp(path + n - 74, "sha256", 6) != 0)
		return 0;
	memcpy(hex, path + n - 64, 65);
	return 1;
}

char *blobs_path(const char *home, const char *hex)
{
	return xasprintf("%s/artifacts/sha256/%.2s/%s", home, hex, hex);
}

/*
 * Moves the finished temporary file tmp to the blob named hex, or removes
 * it when that blob is already there. *path is the blob's, the caller's.
 */
static int blob_commit(char **path, const char *home, const char *tmp, const char *hex)
{
	char *dir = xasprintf("%s/artifacts/sha256/%.2s", home, hex);
	char *dst = blobs_path(home, hex);
	int error = FERRY_OK;

	if (mkdir_p(dir, 0750) < 0) {
		error = FERRY_ERROR;
	} else if (access(dst, F_OK) == 0) {
		unlink(tmp); /* stored before: keep one copy */
	} else if (chmod(tmp, 0444) < 0 || rename(tmp, dst) < 0) {
		ferry_error_set("storing artifact %s: %s", dst, strerror(errno));
		unlink(tmp);
		error = FERRY_ERROR;
	}
	free(dir);
	if (error < 0)
		free(dst);
	else
		*path = dst;
	return error;
}

/* A temporary file in HOME/artifacts/tmp; fd and *tmp (the caller's) on success. */
static int blob_tmp(char **tmp, const char *home)
{
	char *dir = xasprintf("%s/artifacts/tmp", home);
	int fd = -1;

	*tmp = NULL;
	if (mkdir_p(dir, 0750) == 0) {
		*tmp = xasprintf("%s/blob.XXXXXX", dir);
		fd = mkostemp(*tmp, O_CLOEXEC);
		if (fd < 0) {
			ferry_error_set("creating a file in %s: %s", dir, strerror(errno));
			free(*tmp);
			*tmp = NULL;
		}
	}
	free(dir);
	return fd;
}

int blobs_put_bytes(char hex[65], char **path, const char *home, const void *data, size_t len)
{
	char *tmp = NULL;
	int fd, error = FERRY_ERROR;

	sha256_hex(hex, data, len);
	if ((fd = blob_tmp(&tmp, home)) < 0)
		return FERRY_ERROR;
	if (fd_write_all(fd, data, len) < 0 || fsync(fd) < 0) {
		ferry_error_set("writing %s: %s", tmp, strerror(errno));
		unlink(tmp);
	} else {
		error = blob_commit(path, home, tmp, hex);
	}
	close(fd);
	free(tmp);
	return error;
}

int blobs_put_file(char hex[65], int64_t *bytes, char **path, const char *home, const char *src)
{
	unsigned char buf[1 << 16], md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	char *tmp = NULL;
	/* a job's file: a FIFO in its place must not make the open or the copy wait (lib/jobfile.h) */
	int in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY), out = -1, error = FERRY_ERROR;
	struct stat st;
	ssize_t n;

	*bytes = 0;
	*path = NULL;
	if (in < 0) {
		ferry_error_set("artifact %s: %s", src, strerror(errno));
		goto out;
	}
	if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode)) {
		ferry_error_set("artifact %s: not a regular file", src);
		goto out;
	}
	if ((out = blob_tmp(&tmp, home)) < 0 || ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
		goto out;
	while ((n = read(in, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || fd_write_all(out, buf, (size_t)n) < 0) {
			ferry_error_set("copying artifact %s: %s", src, strerror(errno));
			unlink(tmp);
			goto out;
		}
		EVP_DigestUpdate(ctx, buf, (size_t)n);
		*bytes += n;
	}
	if (fsync(out) < 0 || EVP_DigestFinal_ex(ctx, md, &mdlen) != 1) {
		ferry_error_set("copying artifact %s: %s", src, strerror(errno));
		unlink(tmp);
		goto out;
	}
	hex_encode(hex, md, mdlen);
	error = blob_commit(path, home, tmp, hex);
out:
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	free(tmp);
	EVP_MD_CTX_free(ctx);
	return error;
}

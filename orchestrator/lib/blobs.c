/*
 * blobs — see blobs.h. The transfer between hosts (blobs_fetch) writes
 * what arrives to a temporary file while hashing it, as a local put does,
 * so a blob is never in place until its bytes are known to be its name.
 */
#include "lib/blobs.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/util.h"

#define BLOBS_CONNECT_MS 5000
#define BLOBS_LOW_SPEED_BYTES 1024 /* slower than this a second, for BLOBS_LOW_SPEED_S: given up */
#define BLOBS_LOW_SPEED_S 30

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

static int put_file(char hex[65], int64_t *bytes, char **path, const char *home, const char *src)
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

struct put_file_args {
	char *hex;
	int64_t *bytes;
	char **path;
	const char *home, *src;
};

static int put_file_call(void *p)
{
	struct put_file_args *a = p;
	return put_file(a->hex, a->bytes, a->path, a->home, a->src);
}

/* niced: hashing a large artifact yields to dispatch and jobs (run_niced) */
int blobs_put_file(char hex[65], int64_t *bytes, char **path, const char *home, const char *src)
{
	struct put_file_args a = {hex, bytes, path, home, src};
	return run_niced(put_file_call, &a);
}


/* ---- from another host ----------------------------------------------- */

struct fetch {
	int fd;
	EVP_MD_CTX *ctx;
	int64_t bytes;
	int failed; /* errno of a failed write */
	CURL *curl;
	char said[65]; /* X-Ferry-Sha256, when the host sent it */
};

static size_t fetch_write(char *p, size_t size, size_t n, void *ud)
{
	struct fetch *f = ud;
	long code = 0;

	curl_easy_getinfo(f->curl, CURLINFO_RESPONSE_CODE, &code);
	if (code != 200)
		return size * n; /* an error's body: not the blob (read for nothing) */
	if (fd_write_all(f->fd, p, size * n) < 0) {
		f->failed = errno ? errno : EIO;
		return 0;
	}
	EVP_DigestUpdate(f->ctx, p, size * n);
	f->bytes += (int64_t)(size * n);
	return size * n;
}

/* The header the serving host names the bytes' sha256 in (GET /runs/{id}/steps/{step}/outputs/{file}). */
static size_t fetch_header(char *buf, size_t size, size_t n, void *ud)
{
	struct fetch *f = ud;
	size_t len = size * n, k = sizeof("X-Ferry-Sha256:") - 1;

	if (len > k && strncasecmp(buf, "X-Ferry-Sha256:", k) == 0) {
		size_t at = k;
		while (at < len && (buf[at] == ' ' || buf[at] == '\t'))
			at++;
		if (len - at >= 64) {
			memcpy(f->said, buf + at, 64);
			f->said[64] = '\0';
		}
	}
	return len;
}

/*
 * GET url with the fleet's token into fd, hashed while written: 0 with
 * got (the bytes' sha256) and f->bytes, or an error named for what (a
 * 404 is FERRY_ENOTFOUND).
 */
static int transfer(struct fetch *f, char got[65], const char *url, const char *token, const char *what)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char *auth, err[CURL_ERROR_SIZE] = "";
	struct curl_slist *hdr = NULL;
	long code = 0;
	CURLcode rc;
	int error = FERRY_ERROR;

	f->ctx = EVP_MD_CTX_new();
	f->curl = curl_easy_init();
	if (f->ctx == NULL || f->curl == NULL || EVP_DigestInit_ex(f->ctx, EVP_sha256(), NULL) != 1)
		abort();
	auth = xasprintf("Authorization: Bearer %s", token ? token : "");
	hdr = curl_slist_append(NULL, auth);
	/* the answer is this host's own: it never forwards the request further */
	hdr = curl_slist_append(hdr, "X-Ferry-Forwarded: 1");
	curl_easy_setopt(f->curl, CURLOPT_URL, url);
	curl_easy_setopt(f->curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(f->curl, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(f->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)BLOBS_CONNECT_MS);
	curl_easy_setopt(f->curl, CURLOPT_LOW_SPEED_LIMIT, (long)BLOBS_LOW_SPEED_BYTES);
	curl_easy_setopt(f->curl, CURLOPT_LOW_SPEED_TIME, (long)BLOBS_LOW_SPEED_S);
	curl_easy_setopt(f->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(f->curl, CURLOPT_ERRORBUFFER, err);
	curl_easy_setopt(f->curl, CURLOPT_WRITEFUNCTION, fetch_write);
	curl_easy_setopt(f->curl, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(f->curl, CURLOPT_HEADERFUNCTION, fetch_header);
	curl_easy_setopt(f->curl, CURLOPT_HEADERDATA, f);
	curl_easy_setopt(f->curl, CURLOPT_USERAGENT, "ferryd");
	rc = curl_easy_perform(f->curl);
	curl_easy_getinfo(f->curl, CURLINFO_RESPONSE_CODE, &code);
	if (f->failed) {
		ferry_error_set("writing %s: %s", what, strerror(f->failed));
	} else if (rc != CURLE_OK) {
		ferry_error_set("%s: %s", url, err[0] ? err : curl_easy_strerror(rc));
	} else if (code == 404) {
		ferry_error_set("%s: no such %s there", url, what);
		error = FERRY_ENOTFOUND;
	} else if (code != 200) {
		ferry_error_set("%s answered HTTP %ld%s", url, code,
				code == 401 || code == 403 ? " (the fleet's daemons share one FERRY_API_TOKEN)" : "");
	} else if (fsync(f->fd) < 0 || EVP_DigestFinal_ex(f->ctx, md, &mdlen) != 1 || mdlen != 32) {
		ferry_error_set("writing %s: %s", what, strerror(errno));
	} else {
		hex_encode(got, md, mdlen);
		error = FERRY_OK;
	}
	curl_slist_free_all(hdr);
	curl_easy_cleanup(f->curl);
	EVP_MD_CTX_free(f->ctx);
	free(auth);
	return error;
}

int blobs_fetch(const char *home, const char *hex, const char *url, const char *token, int64_t *bytes)
{
	struct fetch f = {.fd = -1};
	char *tmp = NULL, *dst = NULL, got[65], what[96];
	int error;

	*bytes = 0;
	if (!blobs_is_hex(hex)) {
		ferry_error_set("\"%.80s\" is not a sha256", hex);
		return FERRY_EINVALID;
	}
	if ((f.fd = blob_tmp(&tmp, home)) < 0)
		return FERRY_ERROR;
	snprintf(what, sizeof(what), "blob %.12s…", hex);
	if ((error = transfer(&f, got, url, token, what)) == FERRY_OK) {
		if (strcmp(got, hex) != 0) {
			/* never kept: what another host sent is checked against the name it was asked by */
			ferry_error_set("%s sent bytes whose sha256 is %s, not %s: refused", url, got, hex);
			error = FERRY_EINVALID;
		} else if ((error = blob_commit(&dst, home, tmp, hex)) == FERRY_OK) {
			*bytes = f.bytes;
			tmp[0] = '\0'; /* moved into place (or the same blob was there) */
		}
	}
	if (tmp && tmp[0])
		unlink(tmp);
	close(f.fd);
	free(tmp), free(dst);
	return error;
}

int blobs_download(const char *dest, const char *url, const char *token, char got[65], int64_t *bytes)
{
	struct fetch f = {.fd = -1};
	char *tmp = xasprintf("%s.part.XXXXXX", dest), *slash = strrchr(tmp, '/');
	int error;

	*bytes = 0;
	got[0] = '\0';
	if (slash) {
		*slash = '\0';
		error = mkdir_p(tmp, 0750);
		*slash = '/';
		if (error < 0) {
			free(tmp);
			return FERRY_ERROR;
		}
	}
	if ((f.fd = mkostemp(tmp, O_CLOEXEC)) < 0) {
		ferry_error_set("creating %s: %s", tmp, strerror(errno));
		free(tmp);
		return FERRY_ERROR;
	}
	if ((error = transfer(&f, got, url, token, dest)) == FERRY_OK) {
		if (f.said[0] == '\0') {
			ferry_error_set("%s did not say the sha256 of what it sent (X-Ferry-Sha256): refused", url);
			error = FERRY_EINVALID;
		} else if (strcmp(got, f.said) != 0) {
			ferry_error_set("%s sent bytes whose sha256 is %s, not the %s it said: refused", url, got, f.said);
			error = FERRY_EINVALID;
		} else if (fchmod(f.fd, 0640) < 0 || rename(tmp, dest) < 0) {
			ferry_error_set("keeping %s: %s", dest, strerror(errno));
			error = FERRY_ERROR;
		} else {
			*bytes = f.bytes;
			tmp[0] = '\0';
		}
	}
	if (tmp[0])
		unlink(tmp);
	close(f.fd);
	free(tmp);
	return error;
}

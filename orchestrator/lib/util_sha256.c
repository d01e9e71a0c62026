/*
 * util_sha256 — util.h's sha256 digests (OpenSSL EVP), apart from util.c
 * so that util.c builds without OpenSSL's headers: bin/ferry-shim links
 * util.c, and is built with musl where musl-gcc is installed (Makefile),
 * which sees none of the system's library headers.
 */
#include "lib/util.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void sha256_hex(char out[65], const void *p, size_t n)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (EVP_Digest(p, n, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
		abort(); /* only out of memory makes a digest of a buffer fail */
	hex_encode(out, md, mdlen);
}

int sha256_fd(char out[65], int fd)
{
	unsigned char buf[1 << 16], md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	ssize_t n;

	if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
		abort();
	while ((n = read(fd, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ferry_error_set("reading to hash: %s", strerror(errno));
			EVP_MD_CTX_free(ctx);
			return FERRY_ERROR;
		}
		EVP_DigestUpdate(ctx, buf, (size_t)n);
	}
	if (EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen != 32)
		abort();
	EVP_MD_CTX_free(ctx);
	hex_encode(out, md, mdlen);
	return FERRY_OK;
}

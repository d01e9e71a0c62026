/*
 * blobs — the content-addressed blob store under $FERRY_HOME/artifacts:
 * each blob is artifacts/sha256/AB/ABCDEF… (read-only), named by the
 * sha256 of its bytes, written once (to artifacts/tmp while hashed, then
 * renamed into place unless that blob is already there). The model
 * registry stores artifacts here (steps/registry.c); a host that lacks a
 * blob fetches it from another host's API by its sha256 and keeps it only
 * when the bytes hash to that name (blobs_fetch; store/store_blobs.c says
 * which hosts hold what).
 *
 * Every function is safe from any thread; blobs_fetch is bounded
 * (BLOBS_CONNECT_MS to connect, then a minimum rate).
 */
#ifndef FERRY_LIB_BLOBS_H
#define FERRY_LIB_BLOBS_H

#include <stddef.h>
#include <stdint.h>

/* Where blob hex lives in home's store (whether there or not). The caller frees it. */
char *blobs_path(const char *home, const char *hex);

/* Whether s is a blob's name: 64 lower-case hex digits. */
int blobs_is_hex(const char *s);

/*
 * The blob a stored path names (any host's store: .../sha256/AB/HEX with
 * AB the first two digits of HEX): 1 with hex filled, else 0.
 */
int blobs_hex_of(char hex[65], const char *path);

/* Stores a buffer as a blob: hex and *path (the caller's). */
int blobs_put_bytes(char hex[65], char **path, const char *home, const void *data, size_t len);

/*
 * Stores the regular file src as a blob, hashing while it copies: hex,
 * *bytes and *path (the caller's). src is opened as a job's file (no link
 * followed, a FIFO never waited on).
 */
int blobs_put_file(char hex[65], int64_t *bytes, char **path, const char *home, const char *src);

/*
 * Fetches blob hex from url (another daemon's GET /api/v1/blobs/HEX) with
 * the bearer token into home's store: hashed while it is written and kept
 * only when its sha256 is hex (FERRY_EINVALID with both hashes said, the
 * bytes dropped, when not). *bytes is its size. FERRY_ENOTFOUND when the
 * host has no such blob; FERRY_ERROR (message set) when it cannot be
 * reached or refuses.
 */
int blobs_fetch(const char *home, const char *hex, const char *url, const char *token, int64_t *bytes);

/*
 * Fetches a file another daemon serves with its sha256 in X-Ferry-Sha256
 * (a step's output: GET /api/v1/runs/{id}/steps/{step}/outputs/{file})
 * to dest (its directory made), hashed while written beside it and moved
 * into place only when the bytes hash to what the host said: got and
 * *bytes. FERRY_EINVALID (nothing kept) when they do not, or the host said
 * no hash; FERRY_ENOTFOUND on a 404; FERRY_ERROR otherwise.
 */
int blobs_download(const char *dest, const char *url, const char *token, char got[65], int64_t *bytes);

#endif

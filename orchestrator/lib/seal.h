/*
 * seal — secrets sealed at rest: AES-256-GCM (OpenSSL EVP) under one key
 * kept in a file of the daemon's own (0600, made on first use), each value
 * bound to its name (the name is the AEAD's associated data, so a sealed
 * value moved to another name does not open). Used by `ferryd secret set`
 * and by the engine when it starts a job that names secrets.
 */
#ifndef FERRY_LIB_SEAL_H
#define FERRY_LIB_SEAL_H

#include <jansson.h>
#include <stddef.h>

#define SEAL_KEY_LEN 32
#define SEAL_NONCE_LEN 12
#define SEAL_TAG_LEN 16
#define SEAL_VALUE_MAX 65536 /* the longest value (a key file fits) */

/*
 * Reads the key at path (exactly SEAL_KEY_LEN bytes, a regular file, not
 * a link, readable by its owner only); with create, makes one from the
 * kernel's random bytes when there is none. FERRY_ENOTFOUND when absent
 * and not created.
 */
int seal_key_load(unsigned char key[SEAL_KEY_LEN], const char *path, int create);

/*
 * The daemon's key, $FERRY_HOME/secrets.key, read once and kept (thread-safe);
 * with create, made when there is none (the first secret set). NULL when
 * there is none (or it cannot be read: ferry_error_last says why). Every
 * daemon of a fleet needs the same file.
 */
const unsigned char *seal_key_of(const char *home, int create);

/* Seals value (n bytes) for name: *out (nonce, then ciphertext and tag; *out_len bytes) is the caller's. */
int seal_value(unsigned char **out, size_t *out_len, const unsigned char key[SEAL_KEY_LEN], const char *name,
	       const char *value, size_t n);

/* Opens what seal_value made for name: *out (NUL-terminated) is the caller's. FERRY_EINVALID when it does not open. */
int seal_open(char **out, size_t *out_len, const unsigned char key[SEAL_KEY_LEN], const char *name,
	      const unsigned char *sealed, size_t len);

/*
 * A secret's value from stdin (`ferry secrets set`, `ferryd secret set`):
 * one line asked for without echo when stdin is a terminal (the prompt
 * names name), else all of it; one trailing newline dropped. *out (*n
 * bytes, NUL-terminated) is the caller's; FERRY_EINVALID when too long.
 */
int seal_read_stdin(char **out, size_t *n, const char *name);

/* Zeroes the values of an object of opened secrets ({"NAME": "value"}), then frees it; accepts NULL. */
void seal_values_dispose(json_t *values);

#endif

/*
 * seal — see seal.h. AES-256-GCM with a random 96-bit nonce per value
 * (values are few and written rarely: no nonce reuse to fear at 2^-32
 * collision odds over billions of writes), the value's name as AAD.
 */
#include "lib/seal.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <stdio.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "lib/util.h"

int seal_key_load(unsigned char key[SEAL_KEY_LEN], const char *path, int create)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	ssize_t n;

	if (fd < 0 && errno == ENOENT && create) {
		char *tmp = xasprintf("%s.tmp", path);
		unlink(tmp);
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 || getrandom(key, SEAL_KEY_LEN, 0) != SEAL_KEY_LEN ||
		    fd_write_all(fd, (const char *)key, SEAL_KEY_LEN) < 0 || fsync(fd) < 0 || close(fd) < 0 ||
		    link(tmp, path) < 0) {
			/* link, not rename: a key another process made first is kept, and read below */
			if (errno != EEXIST) {
				ferry_error_set("cannot make the secrets key %s: %s", path, strerror(errno));
				unlink(tmp);
				free(tmp);
				return FERRY_ERROR;
			}
		}
		unlink(tmp);
		free(tmp);
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (fd < 0) {
		if (errno == ENOENT) {
			ferry_error_set("no secrets key at %s (ferryd secret set makes one)", path);
			return FERRY_ENOTFOUND;
		}
		ferry_error_set("cannot open the secrets key %s: %s", path, strerror(errno));
		return FERRY_ERROR;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077) != 0 || st.st_uid != geteuid()) {
		ferry_error_set("the secrets key %s must be a regular file of this user's, mode 0600", path);
		close(fd);
		return FERRY_ERROR;
	}
	n = read(fd, key, SEAL_KEY_LEN);
	close(fd);
	if (n != SEAL_KEY_LEN) {
		ferry_error_set("the secrets key %s is not %d bytes", path, SEAL_KEY_LEN);
		return FERRY_ERROR;
	}
	return FERRY_OK;
}

int seal_value(unsigned char **out, size_t *out_len, const unsigned char key[SEAL_KEY_LEN], const char *name,
	       const char *value, size_t n)
{
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	unsigned char *buf = xmalloc(SEAL_NONCE_LEN + n + SEAL_TAG_LEN + 16);
	int len = 0, fin = 0, ok;

	*out = NULL;
	*out_len = 0;
	ok = c && getrandom(buf, SEAL_NONCE_LEN, 0) == SEAL_NONCE_LEN &&
	     EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, key, buf) == 1 &&
	     EVP_EncryptUpdate(c, NULL, &len, (const unsigned char *)name, (int)strlen(name)) == 1 &&
	     EVP_EncryptUpdate(c, buf + SEAL_NONCE_LEN, &len, (const unsigned char *)value, (int)n) == 1 &&
	     EVP_EncryptFinal_ex(c, buf + SEAL_NONCE_LEN + len, &fin) == 1 &&
	     EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, SEAL_TAG_LEN, buf + SEAL_NONCE_LEN + len + fin) == 1;
	EVP_CIPHER_CTX_free(c);
	if (!ok) {
		free(buf);
		ferry_error_set("sealing secret %s failed", name);
		return FERRY_ERROR;
	}
	*out = buf;
	*out_len = SEAL_NONCE_LEN + (size_t)len + (size_t)fin + SEAL_TAG_LEN;
	return FERRY_OK;
}

int seal_open(char **out, size_t *out_len, const unsigned char key[SEAL_KEY_LEN], const char *name,
	      const unsigned char *sealed, size_t len)
{
	EVP_CIPHER_CTX *c;
	size_t n;
	char *buf;
	int got = 0, fin = 0, ok;

	*out = NULL;
	*out_len = 0;
	if (len < SEAL_NONCE_LEN + SEAL_TAG_LEN) {
		ferry_error_set("secret %s does not open: too short", name);
		return FERRY_EINVALID;
	}
	n = len - SEAL_NONCE_LEN - SEAL_TAG_LEN;
	buf = xmalloc(n + 16);
	c = EVP_CIPHER_CTX_new();
	ok = c && EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, key, sealed) == 1 &&
	     EVP_DecryptUpdate(c, NULL, &got, (const unsigned char *)name, (int)strlen(name)) == 1 &&
	     EVP_DecryptUpdate(c, (unsigned char *)buf, &got, sealed + SEAL_NONCE_LEN, (int)n) == 1 &&
	     EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, SEAL_TAG_LEN, (void *)(sealed + len - SEAL_TAG_LEN)) == 1 &&
	     EVP_DecryptFinal_ex(c, (unsigned char *)buf + got, &fin) == 1;
	EVP_CIPHER_CTX_free(c);
	if (!ok) {
		explicit_bzero(buf, n);
		free(buf);
		ferry_error_set("secret %s does not open with this daemon's key (another FERRY_HOME's, or altered)",
				name);
		return FERRY_EINVALID;
	}
	buf[got + fin] = '\0';
	*out = buf;
	*out_len = (size_t)(got + fin);
	return FERRY_OK;
}

const unsigned char *seal_key_of(const char *home, int create)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static unsigned char key[SEAL_KEY_LEN];
	static int have;
	const unsigned char *k = NULL;

	pthread_mutex_lock(&mu);
	if (!have) {
		char *path = xasprintf("%s/secrets.key", home);
		have = seal_key_load(key, path, create) == FERRY_OK;
		free(path);
	}
	if (have)
		k = key;
	pthread_mutex_unlock(&mu);
	return k;
}

void seal_values_dispose(json_t *values)
{
	const char *key;
	json_t *v;

	json_object_foreach(values, key, v) {
		if (json_is_string(v))
			explicit_bzero((char *)json_string_value(v), json_string_length(v));
	}
	json_decref(values);
}

int seal_read_stdin(char **out, size_t *n, const char *name)
{
	struct termios old, quiet;
	int tty = isatty(0) && tcgetattr(0, &old) == 0;
	char *buf = xmalloc(SEAL_VALUE_MAX + 2);
	size_t got = 0, k;

	if (tty) {
		fprintf(stderr, "value for %s (not shown): ", name);
		quiet = old;
		quiet.c_lflag &= ~(tcflag_t)ECHO;
		tcsetattr(0, TCSANOW, &quiet);
		/* one line from a terminal */
		if (fgets(buf, SEAL_VALUE_MAX + 2, stdin) != NULL)
			got = strlen(buf);
		tcsetattr(0, TCSANOW, &old);
		fputc('\n', stderr);
	} else {
		while (got <= SEAL_VALUE_MAX && (k = fread(buf + got, 1, SEAL_VALUE_MAX + 1 - got, stdin)) > 0)
			got += k;
	}
	if (got > SEAL_VALUE_MAX) {
		explicit_bzero(buf, got);
		free(buf);
		ferry_error_set("the value is longer than %d bytes", SEAL_VALUE_MAX);
		return FERRY_EINVALID;
	}
	if (got > 0 && buf[got - 1] == '\n')
		got--;
	if (got > 0 && buf[got - 1] == '\r')
		got--;
	buf[got] = '\0';
	*out = buf;
	*n = got;
	return FERRY_OK;
}

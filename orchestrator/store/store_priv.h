/*
 * store_priv — what the store's files (store.c, store_models.c, …) share:
 * one parameterised statement with SQLSTATEs mapped onto the error enum.
 * Not for use outside the store module.
 */
#ifndef FERRY_STORE_PRIV_H
#define FERRY_STORE_PRIV_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Runs sql with n text params (NULL entries are SQL NULL). On success *out
 * (when out is not NULL) holds the result, the caller's to PQclear; on
 * failure returns FERRY_ENOTFOUND (P0002), FERRY_ECONFLICT (55000),
 * FERRY_EINVALID (22xxx) or FERRY_EDB, with the message set.
 */
int store_q(PGresult **out, PGconn *conn, const char *sql, int n, const char *const *params);

/* ---- a text builder for array literals ({"a","b"}) ---- */

struct sbuf {
	char *p;
	size_t len, cap;
};
void sbuf_add(struct sbuf *b, const char *s, size_t n);
void sbuf_str(struct sbuf *b, const char *s);
void sbuf_int(struct sbuf *b, int64_t v);
/* Appends one element of a text array literal: quoted, or NULL. */
void sbuf_elem(struct sbuf *b, const char *s);
/* "{" before element 0, "," before the others. */
void sbuf_sep(struct sbuf *b, int i);
/* Closes the literal of n elements ("{}" when none); returns its text (b->p, the caller's). */
const char *sbuf_close(struct sbuf *b, int n);

#endif

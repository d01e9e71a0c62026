/*
 * store_priv — what the store's files (store.c, store_models.c, …) share:
 * one parameterised statement with SQLSTATEs mapped onto the error enum.
 * Not for use outside the store module.
 */
#ifndef FERRY_STORE_PRIV_H
#define FERRY_STORE_PRIV_H

#include <libpq-fe.h>

/*
 * Runs sql with n text params (NULL entries are SQL NULL). On success *out
 * (when out is not NULL) holds the result, the caller's to PQclear; on
 * failure returns FERRY_ENOTFOUND (P0002), FERRY_ECONFLICT (55000),
 * FERRY_EINVALID (22xxx) or FERRY_EDB, with the message set.
 */
int store_q(PGresult **out, PGconn *conn, const char *sql, int n, const char *const *params);

#endif

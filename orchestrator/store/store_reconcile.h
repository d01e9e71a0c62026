/*
 * store_reconcile — the reconcile rounds a daemon asks of the leader
 * (migration 0030; deploy/reconcile.c reconcile_request).
 */
#ifndef FERRY_STORE_RECONCILE_H
#define FERRY_STORE_RECONCILE_H

#include <libpq-fe.h>
#include <stdint.h>

/*
 * Rounds asked of the leader (migration 0030): a ticket (requested + 1,
 * with a NOTIFY ferry_reconcile); the `requested` a round starts from and,
 * when it is over, that it was done; whether ticket's round is done and
 * whether a leader holds the lock at all (a dev session alone has none).
 */
#define STORE_LEADER_LOCK_KEY 0x66657279 /* "ferry": the leader's advisory lock (engine_tasks.c) */
int store_reconcile_request(PGconn *conn, int64_t *ticket);
int store_reconcile_requested(PGconn *conn, int64_t *requested);
int store_reconcile_done(PGconn *conn, int64_t requested);
int store_reconcile_check(PGconn *conn, int64_t ticket, int *done, int *leader);

#endif

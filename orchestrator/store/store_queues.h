/*
 * store_queues — the SQL of the queues admins manage (issue 30; the
 * admission that reads them is ferry_claim, db/functions/claim.sql): list
 * them with their live figures, explain one (its running attempts and, for
 * each waiting step, what it waits for: db/functions/queue_views.sql),
 * create, change and delete one, each change with its audit row in the
 * same statement. The fields a request may set are checked here, before
 * any SQL, so a bad value is a 400 naming its field and never a CHECK
 * violation. JSON answers are text the caller frees.
 */
#ifndef FERRY_STORE_QUEUES_H
#define FERRY_STORE_QUEUES_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

/* The most waiting steps GET /queues/{name} lists (?limit=), and how many it lists unless asked. */
#define QUEUE_WAITING_MAX 500
#define QUEUE_WAITING_DEFAULT 50

/* Whether name can name a queue: ^[a-z0-9][a-z0-9_.-]{0,62}$ (as the table's CHECK). */
int store_queue_name_ok(const char *name);

/*
 * The settings body asks for, each checked: name (creating only, and
 * required then), priority (a whole number from -1000 to 1000),
 * max_running (a whole number >= 1), max_gpus (>= 0), max_cpus (a number
 * > 0; each of the three null: no quota), description (a string; null:
 * none). *out is what to write, only the fields body has ({"max_gpus":
 * null} clears that quota), the caller's. FERRY_EINVALID with *field the
 * first bad field (or NULL: the body as a whole; a key of body while body
 * lives) and the message set; changing (creating 0) with nothing to change
 * is one too.
 */
int store_queue_fields(json_t **out, const char **field, const json_t *body, int creating);

/* GET /queues: {"queues": [...]} (ferry_queues), highest priority first. */
int store_queue_list(char **out, PGconn *conn);

/*
 * GET /queues/{name}: the queue, its running attempts and at most limit
 * waiting steps with why each waits (ferry_queue_detail); admission is
 * what the claim reads beside a host's room ({"default_cpus", "starve_s"},
 * engine/host.h's host_admission), or NULL. FERRY_ENOTFOUND when there is
 * no such queue.
 */
int store_queue_detail(char **out, PGconn *conn, const char *name, int limit, const json_t *admission);

/*
 * POST /queues: the queue fields describes (store_queue_fields, creating),
 * and its audit row under actor; *out the queue as listed. FERRY_ECONFLICT
 * when one of that name exists.
 */
int store_queue_create(char **out, PGconn *conn, const json_t *fields, const char *actor);

/*
 * PATCH /queues/{name}: the fields given (store_queue_fields, changing)
 * written, before and after in the audit trail under actor; *out the queue
 * as listed. FERRY_ENOTFOUND when there is no such queue.
 */
int store_queue_update(char **out, PGconn *conn, const char *name, const json_t *fields, const char *actor);

/*
 * DELETE /queues/{name}: the queue removed, what it was in the audit trail
 * under actor (ferry_queue_delete); *out {"name", "deleted": true}.
 * FERRY_ECONFLICT for default and for a queue steps wait in (the message
 * says how many), FERRY_ENOTFOUND when there is no such queue.
 */
int store_queue_delete(char **out, PGconn *conn, const char *name, const char *actor);

/* A running attempt a preemption stops (ferry_preempt, db/functions/preempt.sql). */
struct store_victim {
	int64_t step_id;
	int attempt;
	char *reason; /* "preempted: its room on HOST went to run 41/train (queue q, priority 5); …" */
};

/*
 * The attempts of owner on host to stop so that the step at the head of
 * the claim's order, waiting past after_s, fits (each marked and given a
 * step.preempted event in the same statement): *out (the caller frees it
 * with store_victims_free), *n of them; none is the usual answer.
 */
int store_preempt(struct store_victim **out, int *n, PGconn *conn, const char *owner, const char *host,
		  double after_s, double default_cpus);
void store_victims_free(struct store_victim *v, int n);

#endif

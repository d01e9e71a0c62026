/*
 * haproxy_priv — what the files of the HAProxy module share: the handle,
 * its limits and a growing buffer. haproxy.c renders the files, reads what
 * haproxy runs and makes it match (hap_apply); haproxy_proc.c talks to
 * haproxy: its admin socket and its process (start, reload, stop, and
 * finding the one that runs). Not for use outside the module.
 */
#ifndef FERRY_HAPROXY_PRIV_H
#define FERRY_HAPROXY_PRIV_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "deploy/haproxy.h"
#include "lib/util.h"

#define CLI_TIMEOUT_MS 2000
#define START_TIMEOUT_MS 10000
#define STOP_SOFT_MS 3000
#define CLI_MAX_BYTES (16u << 20)
#define NAME_MAX_LEN 64


struct hap {
	pthread_mutex_t mu;
	pid_t master; /* the master's pid last seen running, and its start time */
	unsigned long long master_start;
	char *dir, *cfg, *state, *sock, *pidfile, *log, *bin;
	/* the template cut at its markers: head, per frontend (a, then servers, then b), tail */
	char *tmpl;
	const char *head, *fe_a, *srv, *fe_b, *tail;
	size_t head_len, fe_a_len, srv_len, fe_b_len, tail_len;
	int has_ab; /* the template has {{ab_route}} and {{ab_backend}} (header routing) */
	char front[64]; /* the address the fronts listen on ({{front_addr}}; hap_set_front) */
};

/* A growing buffer. */

struct buf {
	char *p;
	size_t len, cap;
};

static inline void buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->p = xrealloc(b->p, b->cap);
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static inline void buf_str(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

/* ---- haproxy_proc.c: the admin socket ---- */

/* Sends one command; *out (the caller's) is the whole answer. Bounded by CLI_TIMEOUT_MS. */
int hap_cli(const struct hap *h, const char *cmd, char **out);
/* A command whose answer must be empty (or a known harmless line); FERRY_ERROR with it otherwise. */
int hap_cli_set(const struct hap *h, const char *cmd);
/* The worker's pid and node name ("show info"). */
int hap_read_info(const struct hap *h, long *pid, char **node);

/* ---- haproxy_proc.c: the process ---- */

/* The master's pid when haproxy of h's directory runs (its pid file, checked), else 0. */
pid_t hap_running_pid(struct hap *h);
/* The haproxy binary: $FERRY_HAPROXY, else PATH, else /usr/sbin; NULL when none. */
char *hap_find_binary(void);
/* haproxy -c on the config at path; FERRY_EINVALID with its message. */
int hap_check_config(const struct hap *h, const char *path);
/* Writes the config and server-state files atomically (checking the config first when check). */
int hap_write_files(const struct hap *h, const char *cfg, const char *state, int check);
/* Starts haproxy from the files and waits (bounded) until it runs layout node. h->mu held. */
int hap_start_locked(struct hap *h, const char *node);
/* Reloads the running master and waits for a new worker with layout node. h->mu held. */
int hap_reload_locked(struct hap *h, pid_t master, long old_worker, const char *node);
/*
 * Reloads by someone else (an operator's SIGUSR2, systemctl reload): a
 * run-time command sent while one is under way reaches the old worker,
 * and the new one serves what the files said when it read them. settle
 * waits (bounded) until the master is in its wait mode and its newest
 * worker alone answers the admin socket, and notes the workers; then a
 * change is read and sent; reloaded_since says whether a reload started
 * after settle (the change is then read and sent again). h->mu held.
 */
struct hap_workers {
	pid_t pid[64];
	size_t n;
};
int hap_settle_locked(struct hap *h, pid_t master, struct hap_workers *w);
int hap_reloaded_since(pid_t master, const struct hap_workers *w);
/* Soft stop, a bounded wait, then SIGKILL to the master and its workers. h->mu held. */
void hap_stop_locked(struct hap *h);

#endif

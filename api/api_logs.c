/*
 * api_logs — GET /runs/{id}/steps/{step}/logs: a step attempt's log as a
 * file (from an offset, at most length bytes of it: a range, so a viewer
 * pages back through a log of any size in bounded memory), or, with
 * follow=1, a stream that follows the file
 * until the attempt ends. A followed log with nothing new suspends its
 * connection ("parks" it); the ticker thread resumes the parked ones every
 * PARK_MS, so no MHD worker ever waits on a file. Whether the attempt is
 * over is read from its status file, and now and then from the database
 * (a pooled connection, only when one is free). A followed log takes one
 * of the FERRY_UI_STREAMS slots the run streams take (more: 503), so a
 * client opening hundreds cannot hold the server's connections. A run
 * whose logs retention removed is answered 410 with the date.
 */
#include "api/api_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/exec.h"
#include "store/store.h"
#include "store/store_deploy.h"
#include "plan/deploy.h"
#include "lib/jobfile.h"
#include "lib/util.h"

#define PARK_MS 100 /* how often a followed log that did not grow is looked at again */

struct log_stream {
	struct api *api;
	int fd;
	char *dir, *step;
	int sock; /* the client's socket, to notice it leave */
	struct MHD_Connection *conn;
	int64_t run_id;
	int attempt;
	int64_t next_check, next_db_check; /* monotonic ms of the next looks at whether it ended */
	int ended;          /* the attempt is over: send what is left, then stop */
	int no_file;        /* fd is /dev/null: the job had not opened its log yet; opened when it appears */
};

static void log_stream_free(void *cls)
{
	struct log_stream *ls = cls;

	if (ls->fd >= 0)
		close(ls->fd);
	api_stream_slot_release(ls->api); /* taken when the follow began */
	free(ls->dir);
	free(ls->step);
	free(ls);
}

/*
 * Whether the attempt is over: its supervisor wrote how it ended to
 * DIR/status (checked every call), or, every 2 s, the store no longer has it running (a lost job
 * never writes a status).
 */
static int log_attempt_over(struct log_stream *ls)
{
	char *dir = NULL;
	int code, sig, over = exec_read_status(ls->dir, &code, &sig), attempt = 0, running = 1;
	PGconn *db;

	if (!over && ls->step != NULL && clock_mono_ms() >= ls->next_db_check) { /* a replica: its status alone */
		ls->next_db_check = clock_mono_ms() + 2000;
		db = api_pool_try_get(ls->api); /* none free: look again next time */
		if (db) {
			if (store_step_log(&dir, &attempt, &running, NULL, db, ls->run_id, ls->step, ls->attempt) == 0)
				over = !running;
			api_pool_put(ls->api, db);
		}
		free(dir);
	}
	return over;
}

/* Whether the client closed its side of the connection while we wait for data. */
int api_client_gone(int sock)
{
	struct pollfd p = {.fd = sock, .events = POLLIN | POLLRDHUP};
	char c;

	if (sock < 0 || poll(&p, 1, 0) <= 0)
		return 0;
	if (p.revents & (POLLHUP | POLLERR | POLLRDHUP))
		return 1;
	/* readable: a pipelined request, or EOF */
	return recv(sock, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/*
 * Suspends conn until the ticker's next round (PARK_MS) resumes it. 0 when
 * the API is stopping (nothing may be suspended then).
 */
int api_logs_park(struct api *a, struct MHD_Connection *conn)
{
	pthread_mutex_lock(&a->park_mu);
	if (a->stopping) {
		pthread_mutex_unlock(&a->park_mu);
		return 0;
	}
	if (a->nparked == a->parked_cap) {
		a->parked_cap = a->parked_cap ? 2 * a->parked_cap : 16;
		a->parked = xrealloc(a->parked, (size_t)a->parked_cap * sizeof(*a->parked));
	}
	MHD_suspend_connection(conn);
	a->parked[a->nparked++] = conn;
	pthread_mutex_unlock(&a->park_mu);
	return 1;
}

int api_logs_unpark(struct api *a, struct MHD_Connection *conn)
{
	int found = 0;

	pthread_mutex_lock(&a->park_mu);
	for (int i = 0; i < a->nparked; i++)
		if (a->parked[i] == conn) {
			MHD_resume_connection(conn);
			a->parked[i] = a->parked[--a->nparked];
			found = 1;
			break;
		}
	pthread_mutex_unlock(&a->park_mu);
	return found;
}

/* Resumes every parked connection. */
void api_logs_unpark_all(struct api *a)
{
	pthread_mutex_lock(&a->park_mu);
	for (int i = 0; i < a->nparked; i++)
		MHD_resume_connection(a->parked[i]);
	a->nparked = 0;
	pthread_mutex_unlock(&a->park_mu);
}

/* The ticker thread: every PARK_MS, parked log streams look at their files again. */
void *api_logs_ticker(void *arg)
{
	struct api *a = arg;
	struct pollfd p = {.fd = a->wake[0], .events = POLLIN};

	for (;;) {
		int n = poll(&p, 1, PARK_MS);
		api_logs_unpark_all(a);
		api_conns_sweep(&a->conns); /* slow header senders (api_conns.h) */
		if (n > 0 || a->stopping)
			return NULL;
	}
}

/*
 * A log on another host's disk (host; NULL or this host: not forwarded),
 * asked of that host's API at path (its query begun) with the same range
 * or follow: 1 when answered so (fd, the local copy or -1, is closed),
 * 0 to serve it here (api_forward says when).
 */
static int forward_log(struct api *a, struct reply *r, PGconn *db, struct req *q, const char *host, const char *path,
		       int64_t offset, int64_t length, int followed, const char *what, int fd)
{
	char tail[48] = "", *pq;
	int done;

	if (length >= 0) /* length and follow exclude each other (log_args) */
		snprintf(tail, sizeof(tail), "&length=%lld", (long long)length);
	else if (followed)
		snprintf(tail, sizeof(tail), "&follow=1");
	pq = xasprintf("%s&offset=%lld%s", path, (long long)offset, tail);
	done = api_forward(a, r, db, q, host, pq, what, fd >= 0);
	free(pq);
	if (done && fd >= 0)
		close(fd);
	return done;
}

/*
 * Called by the MHD worker that serves the connection; it must not wait. With
 * nothing new in the file and the attempt not over, the connection is parked
 * (suspended) and this returns 0; the ticker resumes it PARK_MS later.
 */
static ssize_t log_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct log_stream *ls = cls;
	ssize_t n;

	(void)pos;
	for (;;) {
		if (ls->no_file) {
			int fd = jobfile_open(ls->dir, "log", NULL); /* the job's file: never a link or a FIFO */

			if (fd >= 0) {
				close(ls->fd);
				ls->fd = fd;
				ls->no_file = 0;
			}
		}
		n = read(ls->fd, buf, max);
		if (n > 0)
			return n;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (ls->ended)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (ls->api->stopping || api_client_gone(ls->sock))
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (clock_mono_ms() >= ls->next_check) {
			ls->next_check = clock_mono_ms() + 500;
			if (log_attempt_over(ls)) {
				ls->ended = 1; /* one more read drains what the job wrote last */
				continue;
			}
		}
		if (!api_logs_park(ls->api, ls->conn))
			return MHD_CONTENT_READER_END_WITH_ERROR;
		return 0;
	}
}

/* A finished attempt's log is missing: 410 when retention removed the run's logs (1), else 0. */
static int logs_gone(struct reply *r, PGconn *db, int64_t id)
{
	char *at = NULL, msg[160];

	if (store_run_logs_removed(&at, db, id) < 0 || at == NULL)
		return 0;
	snprintf(msg, sizeof(msg), "logs of run %lld were removed by retention on %.10s (FERRY_RETENTION_DAYS)",
		 (long long)id, at);
	reply_error(r, 410, "gone", NULL, msg, NULL);
	free(at);
	return 1;
}

/*
 * Answers with the log in dir (fd open on it, st its stat; no_file: fd is
 * /dev/null, the log not there yet), from offset, length bytes (-1: to the
 * end), or followed until the attempt (a step's: step, run_id; a replica's:
 * step NULL, its DIR/status alone) is over. Takes fd and dir.
 */
static void reply_log(struct api *a, struct reply *r, struct MHD_Connection *conn, int fd, const struct stat *st,
		      int no_file, char *dir, const char *step, int64_t run_id, int attempt, int running,
		      int64_t offset, int64_t length, int follow, const char *ran_on)
{
	struct MHD_Response *resp = NULL;
	struct log_stream *ls;
	char hdr[32], size_hdr[32], me[256];

	if (offset > 0 && lseek(fd, offset, SEEK_SET) < 0) {
		close(fd);
		free(dir);
		reply_error(r, 400, "invalid_field", "offset", "offset is past what can be read", NULL);
		return;
	}
	snprintf(hdr, sizeof(hdr), "%d", attempt);
	snprintf(size_hdr, sizeof(size_hdr), "%lld", (long long)st->st_size);
	if (follow) {
		/* a followed log lasts as long as its attempt: it counts against FERRY_UI_STREAMS like a run's stream */
		if (api_stream_slot_take(a, r) < 0) {
			close(fd);
			free(dir);
			return;
		}
		ls = xcalloc(1, sizeof(*ls));
		ls->api = a;
		ls->fd = fd;
		ls->dir = dir;
		ls->step = step ? xstrdup(step) : NULL;
		{
			const union MHD_ConnectionInfo *ci =
				MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
			ls->sock = ci ? ci->connect_fd : -1;
		}
		ls->conn = conn;
		ls->run_id = run_id;
		ls->attempt = attempt;
		ls->ended = !running;
		ls->no_file = no_file && offset == 0;
		ls->next_db_check = clock_mono_ms() + 2000;
		resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, log_stream_read,
							 ls, log_stream_free);
	} else {
		size_t left = st->st_size > offset ? (size_t)(st->st_size - offset) : 0;

		if (length >= 0 && (uint64_t)length < left)
			left = (size_t)length;
		resp = MHD_create_response_from_fd_at_offset64(left, fd, (uint64_t)offset);
		free(dir);
	}
	MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
	MHD_add_response_header(resp, "X-Ferry-Attempt", hdr);
	/* where the job ran (a forwarded answer names it the same way: api_forward.c) */
	if (ran_on == NULL)
		ferry_host_name(me, sizeof(me)), ran_on = me;
	MHD_add_response_header(resp, "X-Ferry-Host", ran_on);
	/* the whole log's size when asked: a viewer reads a range and knows what lies before and after */
	MHD_add_response_header(resp, "X-Ferry-Log-Size", size_hdr);
	r->status = 200;
	r->resp = resp;
}

/*
 * The query arguments every log route takes: offset, length (-1: to the
 * end) and follow (1 or true, 0 or false; not with length). 0, or -1 with
 * a 400 naming the field.
 */
static int log_args(struct reply *r, struct MHD_Connection *conn, int64_t *offset, int64_t *length, int *followed)
{
	const char *off_s = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "offset");
	const char *follow = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "follow");
	const char *len_s = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "length");

	*offset = 0, *length = -1;
	if (off_s && (parse_int64(off_s, offset) < 0 || *offset < 0)) {
		reply_error(r, 400, "invalid_field", "offset", "offset must be a byte count >= 0", NULL);
		return -1;
	}
	if (follow && strcmp(follow, "0") != 0 && strcmp(follow, "1") != 0 && strcmp(follow, "false") != 0 &&
	    strcmp(follow, "true") != 0) {
		reply_error(r, 400, "invalid_field", "follow", "follow must be 1 (or true) or 0 (or false)", NULL);
		return -1;
	}
	if (len_s && (parse_int64(len_s, length) < 0 || *length < 0)) {
		reply_error(r, 400, "invalid_field", "length", "length must be a byte count >= 0", NULL);
		return -1;
	}
	if (len_s && follow && strcmp(follow, "0") != 0 && strcmp(follow, "false") != 0) {
		reply_error(r, 400, "invalid_field", "length", "length and follow exclude each other: a followed log has no end", NULL);
		return -1;
	}
	*followed = follow && strcmp(follow, "0") != 0 && strcmp(follow, "false") != 0;
	return 0;
}

void api_step_logs(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	struct MHD_Connection *conn = q->conn;
	int64_t id = q->id;
	const char *step = q->caps[1];
	int head = q->head;
	const char *att_s = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "attempt");
	int64_t want = 0, offset = 0, length = -1;
	char *dir = NULL, *host = NULL;
	int attempt = 0, running = 0, fd, error, no_file = 0, followed = 0;
	struct stat st;

	if (att_s && (parse_int64(att_s, &want) < 0 || want < 1 || want > 1000000)) {
		reply_error(r, 400, "invalid_field", "attempt", "attempt must be a positive integer", NULL);
		return;
	}
	if (log_args(r, conn, &offset, &length, &followed) < 0)
		return;
	if ((error = store_step_log(&dir, &attempt, &running, &host, db, id, step, (int)want)) < 0) {
		reply_store_error(r, error);
		return;
	}
	/*
	 * Claimed, not started: where its job will write (the console asks as
	 * soon as the run's JSON counts the attempt; that was a 404 before)
	 */
	if (dir == NULL)
		dir = exec_attempt_dir(a->home ? a->home : ".", id, step, attempt);
	/*
	 * The log lies in the job's directory, where the job may have put a
	 * link to a secret or a FIFO in its place: opened as hostile
	 * (lib/jobfile.h), never followed, never waited on.
	 */
	fd = jobfile_open(dir, "log", &st);
	if (fd == FERRY_EINVALID) {
		char *why = xasprintf("the log of attempt %d cannot be served: %s", attempt, ferry_error_last());
		free(dir), free(host);
		reply_error(r, 409, "log_unreadable", NULL, why, NULL);
		free(why);
		return;
	}
	if (host != NULL) {
		/*
		 * The job ran on another host of the fleet, whose disk has its log:
		 * served through that host's API; when that host is down, a copy
		 * readable here (a shared FERRY_HOME, a host renamed) is served here
		 */
		char *esc = api_path_escape(step), *what = xasprintf("the log of step %s attempt %d", step, attempt);
		char *pq = xasprintf("/api/v1/runs/%lld/steps/%s/logs?attempt=%d", (long long)id, esc, attempt);
		int done = forward_log(a, r, db, q, host, pq, offset, length, followed, what, fd);
		free(esc), free(pq), free(what);
		if (done) {
			free(dir), free(host);
			return;
		}
	}
	if (fd < 0 && !running && logs_gone(r, db, id)) {
		free(dir), free(host);
		return;
	}
	if (fd < 0) {
		/* the attempt started but its job has not opened the log yet: an empty log (followed: until it appears) */
		fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		st.st_size = 0;
		no_file = 1;
	}
	reply_log(a, r, conn, fd, &st, no_file, dir, step, id, attempt, running, offset, length, !head && followed,
		  host);
	free(host);
}


/*
 * GET /runs/{id}/steps/{step}/outputs/{file}[?attempt=N]: a file the
 * step's job left in its output directory (the step's outputs name them),
 * whole, its sha256 in X-Ferry-Sha256 — how a step on another host gets
 * the files of the steps above it (steps/inputs.c), and how a person
 * downloads one. Served by the host that ran the attempt (forwarded there
 * like its log); an attempt still running has no outputs yet (409).
 */
void api_step_output(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	const char *step = q->caps[1], *file = q->caps[2];
	const char *att_s = MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, "attempt");
	int64_t want = 0;
	char *dir = NULL, *host = NULL, *rel, hex[65], hdr[16], *msg;
	int attempt = 0, running = 0, fd, error;
	struct MHD_Response *resp;
	struct stat st;

	if (!jobfile_output_name_ok(file)) {
		reply_error(r, 400, "invalid_field", "file", "file must be the name of a file in the step's output "
			    "directory (no path, not a dot file)", NULL);
		return;
	}
	if (att_s && (parse_int64(att_s, &want) < 0 || want < 1 || want > 1000000)) {
		reply_error(r, 400, "invalid_field", "attempt", "attempt must be a positive integer", NULL);
		return;
	}
	if ((error = store_step_log(&dir, &attempt, &running, &host, db, q->id, step, (int)want)) < 0) {
		reply_store_error(r, error);
		return;
	}
	if (running || dir == NULL) {
		msg = xasprintf("attempt %d of step %s is still running; its outputs are read when it ends", attempt, step);
		reply_error(r, 409, "still_running", NULL, msg, NULL);
		free(msg), free(dir), free(host);
		return;
	}
	/* a job's directory: opened as hostile (lib/jobfile.h), no link followed, never waited on */
	rel = xasprintf("out/%s", file);
	fd = jobfile_open(dir, rel, &st);
	free(rel);
	if (host != NULL) {
		char *es = api_path_escape(step), *ef = api_path_escape(file);
		char *what = xasprintf("output %s of step %s attempt %d", file, step, attempt);
		char *pq = xasprintf("/api/v1/runs/%lld/steps/%s/outputs/%s?attempt=%d", (long long)q->id, es, ef, attempt);
		int done = api_forward(a, r, db, q, host, pq, what, fd >= 0);
		free(es), free(ef), free(what), free(pq);
		if (done) {
			if (fd >= 0)
				close(fd);
			free(dir), free(host);
			return;
		}
	}
	free(host);
	if (fd < 0 || !S_ISREG(st.st_mode)) {
		msg = fd == FERRY_EINVALID ? xasprintf("output %s of step %s attempt %d cannot be served: %s", file, step,
						       attempt, ferry_error_last())
					   : xasprintf("attempt %d of step %s left no file %s in its output directory",
						       attempt, step, file);
		reply_error(r, fd == FERRY_EINVALID ? 409 : 404, fd == FERRY_EINVALID ? "output_unreadable" : "not_found",
			    NULL, msg, NULL);
		free(msg), free(dir);
		if (fd >= 0)
			close(fd);
		return;
	}
	free(dir);
	if (sha256_fd(hex, fd) < 0 || lseek(fd, 0, SEEK_SET) < 0) {
		close(fd);
		reply_error(r, 500, "internal", NULL, "the output could not be read", NULL);
		return;
	}
	resp = MHD_create_response_from_fd64((uint64_t)st.st_size, fd);
	snprintf(hdr, sizeof(hdr), "%d", attempt);
	MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
	MHD_add_response_header(resp, "X-Ferry-Attempt", hdr);
	MHD_add_response_header(resp, "X-Ferry-Sha256", hex);
	r->status = 200;
	r->resp = resp;
}

/*
 * GET /deployments/{id}/logs?version=V&replica=N[&follow=1][&offset=][&length=]:
 * a model-server replica's log (its current start's: DIR/log of its
 * handle), followed while it runs. version: default the one with the most
 * traffic; replica: default 1.
 */
void api_deployment_logs(struct api *a, struct reply *r, PGconn *db, struct req *q)
{
	struct MHD_Connection *conn = q->conn;
	const char *ver = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "version");
	const char *rep_s = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "replica");
	struct deployment *d = NULL;
	const struct deploy_version *v = NULL;
	const struct deploy_replica *rep = NULL;
	int64_t idx = 1, offset, length;
	int followed = 0, error, fd, running;
	const char *dir;
	struct stat st;

	if (rep_s && (parse_int64(rep_s, &idx) < 0 || idx < 1 || idx > DEPLOY_MAX_REPLICAS)) {
		reply_error(r, 400, "invalid_field", "replica", "replica must be a replica's number, 1-5", NULL);
		return;
	}
	if (log_args(r, conn, &offset, &length, &followed) < 0)
		return;
	if ((error = store_deployment_get(&d, db, q->id)) < 0) {
		reply_store_error(r, error);
		return;
	}
	if (ver) {
		v = deployment_version(d, ver);
	} else {
		for (size_t i = 0; i < d->nversions; i++)
			if (d->versions[i].state != DEPLOY_V_RETIRED && (v == NULL || d->versions[i].weight > v->weight))
				v = &d->versions[i];
	}
	if (v == NULL) {
		char *msg = ver ? xasprintf("deployment %s has no version %s", d->name, ver)
				: xasprintf("deployment %s has no version serving", d->name);
		reply_error(r, 404, "not_found", ver ? "version" : NULL, msg, NULL);
		free(msg);
		deployment_free(d);
		return;
	}
	for (size_t j = 0; j < v->nreplicas; j++)
		if (v->replicas[j].idx == (int)idx)
			rep = &v->replicas[j];
	dir = rep ? json_string_value(json_object_get(rep->handle, "dir")) : NULL;
	if (dir == NULL) {
		char *msg = xasprintf("%s %s of deployment %s has no replica %lld that ever started", d->model,
				      v->version, d->name, (long long)idx);
		reply_error(r, 404, "not_found", "replica", msg, NULL);
		free(msg);
		deployment_free(d);
		return;
	}
	/* the server's own file: opened as hostile, like a job's (lib/jobfile.h) */
	fd = jobfile_open(dir, "log", &st);
	if (fd == FERRY_EINVALID) {
		reply_error(r, 409, "log_unreadable", NULL, ferry_error_last(), NULL);
		deployment_free(d);
		return;
	}
	{
		/* a replica on another host of the fleet: its log is on that host's disk, served through its API */
		const char *host = json_string_value(json_object_get(rep->handle, "host"));
		char *esc = api_path_escape(v->version);
		char *what = xasprintf("the log of replica %lld of %s %s", (long long)idx, d->model, v->version);
		char *pq = xasprintf("/api/v1/deployments/%lld/logs?version=%s&replica=%lld", (long long)q->id, esc,
				     (long long)idx);
		int done = forward_log(a, r, db, q, host, pq, offset, length, followed, what, fd);
		free(esc), free(pq), free(what);
		if (done) {
			deployment_free(d);
			return;
		}
	}
	if (fd < 0) {
		fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		st.st_size = 0;
	}
	running = rep->health != DEPLOY_H_STOPPED;
	reply_log(a, r, conn, fd, &st, 0, xstrdup(dir), NULL, 0, rep->generation, running, offset, length,
		  !q->head && followed, json_string_value(json_object_get(rep->handle, "host")));
	deployment_free(d);
}

/*
 * schedules — the leader's round over the schedules (schedules.h; the
 * design, with what it guarantees and why, is in schedules.md).
 *
 * For each schedule with next_at due, the round lists its due ticks (the
 * cron's fire times from next_at up to the database's now), decides each
 * one — fire, or skip with a reason — and accounts for them in order:
 * consecutive skips in one statement, each fire in the transaction that
 * creates its run (runs_create's occasion hook inserts the tick under
 * its unique key and moves next_at). Every write moves next_at only from
 * where the round read it, so a round that races another leader, an edit,
 * or its own earlier failure stops for that schedule instead of writing a
 * tick twice; the next round reads again.
 *
 * Which due ticks fire (every due tick but the newest is a missed one):
 *   paused          none ("paused")
 *   catchup all     the newest and the max_catchup newest missed ones; older
 *                   ones are skipped ("missed: over max_catchup N")
 *   catchup latest  the newest ("missed: catchup latest")
 *   catchup none    the newest, if it is less than one interval (at most a
 *                   minute) late ("missed: catchup none")
 * and then the concurrency policy, for each tick that would fire: forbid
 * skips it while a run of the schedule is unfinished ("forbid: run N is
 * still running"); replace stops those runs first.
 */
#include "schedule/schedules.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/cron.h"
#include "runs/runs.h"
#include "store/store.h"
#include "store/store_schedules.h"
#include "schedule/triggers.h"
#include "lib/util.h"

/* Due ticks one schedule lists per round; more wait for the next round. */
#define TICKS_PER_ROUND 10000
/* Schedules one query reads. */
#define DUE_BATCH 256
/* The longest a missed tick may be late and still count as on time under catchup none. */
#define ON_TIME_MAX_S 60

static enum cron_gap gap_of(const char *s)
{
	return s && strcmp(s, "skip") == 0 ? CRON_GAP_SKIP : CRON_GAP_SHIFT;
}

static enum cron_overlap overlap_of(const char *s)
{
	return s && strcmp(s, "last") == 0 ? CRON_OVERLAP_LAST : CRON_OVERLAP_FIRST;
}

static const char *field(const json_t *o, const char *k, const char *def)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : def;
}

int64_t schedules_next_at(const json_t *f, int64_t after)
{
	struct cron *c = NULL;
	struct cron_fire fire;
	int error;

	if (cron_parse(&c, field(f, "cron", ""), NULL) < 0)
		return FERRY_EINVALID;
	error = cron_next(&fire, c, field(f, "timezone", "UTC"), gap_of(field(f, "gap", NULL)),
			  overlap_of(field(f, "overlap", NULL)), after);
	cron_free(c);
	if (error == FERRY_ENOTFOUND)
		return 0;
	return error < 0 ? error : fire.at;
}

static void iso_utc(char *buf, size_t n, int64_t t)
{
	time_t tt = (time_t)t;
	struct tm tm;

	gmtime_r(&tt, &tm);
	strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void wall_text(char *buf, size_t n, int64_t wall)
{
	time_t tt = (time_t)wall;
	struct tm tm;

	gmtime_r(&tt, &tm); /* wall is the local time written as if it were UTC */
	strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
}

json_t *schedules_next(const json_t *f, int64_t after, int n)
{
	struct cron *c = NULL;
	json_t *out;
	const char *tz = field(f, "timezone", "UTC");

	if (cron_parse(&c, field(f, "cron", ""), NULL) < 0 || cron_zone_check(tz) < 0) {
		cron_free(c);
		return NULL;
	}
	out = json_array();
	for (int i = 0; i < n; i++) {
		struct cron_fire fire;
		char at[32], local[32];
		if (cron_next(&fire, c, tz, gap_of(field(f, "gap", NULL)), overlap_of(field(f, "overlap", NULL)),
			      after) < 0)
			break;
		iso_utc(at, sizeof(at), fire.at);
		wall_text(local, sizeof(local), fire.wall);
		json_array_append_new(out, json_pack("{s:s,s:s,s:s*}", "at", at, "local", local, "note",
						     fire.note[0] ? fire.note : NULL));
		after = fire.at;
	}
	cron_free(c);
	return out;
}

static int64_t next_of_spec(const json_t *s)
{
	int64_t next = schedules_next_at(s, (int64_t)time(NULL));
	return next < 0 ? 0 : next;
}

int schedules_sync(PGconn *conn, const char *workflow, const json_t *spec, const char *actor)
{
	return store_sched_sync(conn, workflow, spec, actor, next_of_spec);
}

/* ---- the round ---------------------------------------------------------- */

/* One schedule's due ticks: at[i] and, for each, the tick after it. */
struct due {
	int64_t *at;
	int n, cap;
	int64_t after_last; /* the first tick after the listed ones; 0: never */
	int truncated;      /* more were due than a round lists */
};

static int list_due(struct due *d, const struct sched_row *s, const struct cron *c, int64_t now)
{
	int64_t t = s->next_at;

	d->n = 0;
	d->truncated = 0;
	d->after_last = 0;
	for (;;) {
		struct cron_fire fire;
		int error;
		if (d->n == d->cap) {
			d->cap = d->cap ? d->cap * 2 : 64;
			d->at = xrealloc(d->at, (size_t)d->cap * sizeof(*d->at));
		}
		d->at[d->n++] = t;
		error = cron_next(&fire, c, s->timezone, gap_of(s->gap), overlap_of(s->overlap), t);
		if (error == FERRY_ENOTFOUND)
			return FERRY_OK; /* it never fires again */
		if (error < 0)
			return error;
		if (fire.at > now || d->n == TICKS_PER_ROUND) {
			d->after_last = fire.at;
			d->truncated = fire.at <= now;
			return FERRY_OK;
		}
		t = fire.at;
	}
}

/* The tick after due tick i. */
static int64_t next_after(const struct due *d, int i)
{
	return i + 1 < d->n ? d->at[i + 1] : d->after_last;
}

/*
 * Why tick i is not fired under the schedule's catch-up policy (a static
 * string or buf), or NULL to fire it. The newest listed tick is the
 * current one unless the list was cut short.
 */
static const char *catchup_skip(const struct sched_row *s, const struct due *d, int i, int64_t now, char *buf,
				size_t n)
{
	int newest = !d->truncated && i == d->n - 1;
	int missed_newer = d->truncated ? INT32_MAX : d->n - 2 - i; /* missed ticks newer than i */

	if (s->paused)
		return "paused";
	if (strcmp(s->catchup, "latest") == 0)
		return newest ? NULL : "missed: catchup latest";
	if (strcmp(s->catchup, "none") == 0) {
		int64_t interval = i > 0 ? d->at[i] - d->at[i - 1] : ON_TIME_MAX_S;
		int64_t grace = interval < ON_TIME_MAX_S ? interval : ON_TIME_MAX_S;
		if (!newest)
			return "missed: catchup none";
		if (now - d->at[i] > grace) {
			snprintf(buf, n, "missed by %llds: catchup none", (long long)(now - d->at[i]));
			return buf;
		}
		return NULL;
	}
	if (!newest && missed_newer >= s->max_catchup) {
		snprintf(buf, n, "missed: over max_catchup %d", s->max_catchup);
		return buf;
	}
	return NULL;
}

/* forbid/replace; NULL to go on, else why the tick is skipped (in buf). */
static const char *concurrency(PGconn *conn, const struct sched_row *s, char *buf, size_t n, int *error)
{
	int64_t *ids = NULL;
	int nids = 0;
	const char *why = NULL;

	*error = FERRY_OK;
	if (strcmp(s->concurrency, "allow") == 0)
		return NULL;
	if ((*error = store_sched_running(&ids, &nids, conn, s->id)) < 0 || nids == 0) {
		free(ids);
		return NULL;
	}
	if (strcmp(s->concurrency, "forbid") == 0) {
		snprintf(buf, n, "forbid: run %lld is still running", (long long)ids[0]);
		why = buf;
	} else { /* replace */
		char *actor = xasprintf("schedule:%s/%s", s->workflow, s->name);
		for (int i = 0; i < nids && *error == FERRY_OK; i++) {
			char *state = NULL;
			/* under a savepoint: a run that ended meanwhile refuses the stop, and the
			 * batch's transaction must outlive that */
			if ((*error = store_sched_tx(conn, "SAVEPOINT replace_stop")) < 0)
				break;
			*error = store_run_stop(&state, conn, ids[i], actor);
			if (*error == FERRY_ECONFLICT || *error == FERRY_ENOTFOUND) {
				*error = store_sched_tx(conn, "ROLLBACK TO SAVEPOINT replace_stop"); /* it finished */
			} else if (*error == FERRY_OK) {
				flog_info("schedule %s/%s: run %lld stopped to replace it", s->workflow, s->name,
					  (long long)ids[i]);
			}
			if (*error == FERRY_OK)
				*error = store_sched_tx(conn, "RELEASE SAVEPOINT replace_stop");
			free(state);
		}
		free(actor);
	}
	free(ids);
	return why;
}

/* Fires tick i: 1 started, 0 not (skipped, or someone else had it), < 0 error; *stop: leave this schedule. */
static int fire(PGconn *conn, const struct sched_row *s, const struct due *d, int i, int64_t now, int *stop)
{
	struct runs_new rn;
	struct sched_occasion o = {.id = s->id, .nominal = d->at[i], .next = next_after(d, i)};
	char nominal[32], *actor = xasprintf("schedule:%s/%s", s->workflow, s->name);
	int caught_up = d->truncated || i < d->n - 1 || now - d->at[i] > ON_TIME_MAX_S;
	json_t *origin, *offered;
	cfg_errors errs = {0};
	int64_t run = 0;
	int error;

	iso_utc(nominal, sizeof(nominal), d->at[i]);
	origin = json_pack("{s:{s:I,s:s,s:s,s:b}}", "schedule", "id", (json_int_t)s->id, "name", s->name,
			   "nominal", nominal, "caught_up", caught_up);
	offered = json_pack("{s:s}", "scheduled_time", nominal);
	o.reason = caught_up ? "caught up" : NULL;
	memset(&rn, 0, sizeof(rn));
	rn.workflow = s->workflow;
	rn.params = s->params;
	rn.offered = offered;
	rn.trigger = "schedule";
	rn.actor = actor;
	rn.origin = origin;
	rn.schedule_id = s->id;
	rn.occasion = store_sched_occasion;
	rn.occasion_arg = &o;
	rn.in_tx = 1; /* the round's batch (struct batch) */
	error = runs_create(&run, conn, &rn, &errs);
	if (error == 2) { /* the occasion was taken */
		*stop = 1;
		if (o.dup) {
			flog_info("schedule %s/%s: the tick at %s was fired already; not again", s->workflow,
				  s->name, nominal);
			error = store_sched_duplicate(conn, s->id, d->at[i], o.next);
		} else {
			error = FERRY_OK;
		}
	} else if (error == FERRY_EDB) {
		*stop = 1;
	} else if (error < 0) {
		/* the run cannot be made (the workflow is gone, a param no longer fits): the tick says why */
		char why[512];
		const char *reasons[1] = {why};
		snprintf(why, sizeof(why), "not started: %s%s%s", ferry_error_last(), errs.len ? ": " : "",
			 errs.len ? errs.items[0] : "");
		flog_warn("schedule %s/%s: %s", s->workflow, s->name, why);
		error = store_sched_skip(conn, s->id, &d->at[i], reasons, 1, next_after(d, i));
		if (error != FERRY_OK)
			*stop = 1;
	} else {
		flog_info("schedule %s/%s: run %lld for %s%s", s->workflow, s->name, (long long)run, nominal,
			  caught_up ? " (caught up)" : "");
		error = 1;
	}
	cfg_errors_dispose(&errs);
	json_decref(origin), json_decref(offered);
	free(actor);
	return error;
}

/*
 * The round's writes go in batches: one transaction for up to
 * FIRES_PER_TX fires (each run under its own savepoint, its tick and the
 * move of next_at with it), so 1,000 schedules due at one minute cost a
 * few dozen commits rather than 1,000. A batch that fails to commit is
 * lost whole — runs, ticks and moves together — and the next round does
 * those ticks again: nothing is half-written.
 */
#define FIRES_PER_TX 32

struct batch {
	int open;
	int fires;
};

static int batch_begin(PGconn *conn, struct batch *b)
{
	int error;

	if (b->open)
		return FERRY_OK;
	if ((error = store_sched_tx(conn, "BEGIN")) == FERRY_OK)
		b->open = 1;
	return error;
}

/* Commits the batch (when full, or always when force); rolls it back when error. */
static int batch_end(PGconn *conn, struct batch *b, int force, int error)
{
	if (!b->open)
		return error;
	if (error < 0) {
		store_sched_tx(conn, "ROLLBACK");
		if (b->fires > 0)
			flog_warn("schedules: %d fires rolled back (%s); the next round fires them", b->fires,
				  ferry_error_last());
	} else if (force || b->fires >= FIRES_PER_TX) {
		/* the dispatchers are told once for the batch's runs (runs_new.in_tx) */
		if ((b->fires > 0 && (error = store_sched_tx(conn, "NOTIFY ferry_ready")) < 0) ||
		    (error = store_sched_tx(conn, "COMMIT")) < 0) {
			flog_warn("schedules: %d fires not committed (%s); the next round fires them", b->fires,
				  ferry_error_last());
			store_sched_tx(conn, "ROLLBACK");
		}
	} else {
		return error;
	}
	b->open = 0;
	b->fires = 0;
	return error;
}

/* Accounts for one schedule's due ticks; returns runs started or < 0. */
static int schedule_due(PGconn *conn, const struct sched_row *s, struct due *d, int64_t now, int64_t deadline,
			struct batch *b)
{
	struct cron *c = NULL;
	const char **reasons;
	char (*bufs)[96];
	int started = 0, error = FERRY_OK, stop = 0;

	if (cron_parse(&c, s->cron, NULL) < 0) {
		flog_warn("schedule %lld: %s", (long long)s->id, ferry_error_last());
		return FERRY_OK;
	}
	if ((error = list_due(d, s, c, now)) < 0) {
		cron_free(c);
		return error;
	}
	cron_free(c);
	reasons = xcalloc((size_t)d->n, sizeof(*reasons));
	bufs = xcalloc((size_t)d->n, sizeof(*bufs));
	for (int i = 0; i < d->n; i++)
		reasons[i] = catchup_skip(s, d, i, now, bufs[i], sizeof(bufs[i]));
	for (int i = 0; i < d->n && !stop && clock_mono_ms() < deadline;) {
		int j = i;
		if ((error = batch_begin(conn, b)) < 0)
			break;
		if (reasons[i] == NULL)
			reasons[i] = concurrency(conn, s, bufs[i], sizeof(bufs[i]), &error);
		if (error < 0)
			break;
		if (reasons[i] == NULL) {
			if ((error = fire(conn, s, d, i, now, &stop)) < 0)
				break;
			started += error;
			b->fires += error;
			i++;
			if ((error = batch_end(conn, b, 0, FERRY_OK)) < 0)
				break;
			continue;
		}
		while (j + 1 < d->n && reasons[j + 1] != NULL)
			j++; /* the skips in a row go in one statement */
		if ((error = store_sched_skip(conn, s->id, &d->at[i], reasons + i, j - i + 1, next_after(d, j))) != 0)
			break; /* 1: it moved under us */
		i = j + 1;
	}
	free(reasons), free(bufs);
	return error < 0 ? error : started;
}

int schedules_round(PGconn *conn, int64_t budget_ms, int part, int parts)
{
	int64_t deadline = clock_mono_ms() + budget_ms, now = 0;
	struct due d = {0};
	struct batch b = {0};
	int started = 0, error = FERRY_OK;

	while (clock_mono_ms() < deadline) {
		struct sched_row *rows = NULL;
		int n = 0;
		if ((error = store_sched_due(&rows, &n, &now, conn, DUE_BATCH, part, parts)) < 0)
			break;
		for (int i = 0; i < n && error >= 0; i++)
			if ((error = schedule_due(conn, &rows[i], &d, now, deadline, &b)) > 0)
				started += error;
		error = batch_end(conn, &b, 1, error);
		for (int i = 0; i < n; i++)
			sched_row_dispose(&rows[i]);
		free(rows);
		if (error < 0 || n < DUE_BATCH)
			break;
	}
	free(d.at);
	return error < 0 ? error : started;
}

/* ---- on the worker pool ------------------------------------------------- */

struct sched_work {
	struct work w;
	char *home;
	int part, parts;
};

/*
 * A round on a pool thread: its part of the schedules, then (part 0) the
 * triggers; a few seconds at most each, so other work is not kept waiting.
 */
static void sched_run(struct work *w, PGconn *conn)
{
	struct sched_work *s = (struct sched_work *)w;

	if (conn == NULL)
		return;
	if (schedules_round(conn, 5000, s->part, s->parts) < 0)
		flog_warn("schedules: %s", ferry_error_last());
	if (s->part == 0 && PQstatus(conn) == CONNECTION_OK && triggers_round(conn, s->home, 5000) < 0)
		flog_warn("triggers: %s", ferry_error_last());
}

static struct work *schedules_work_new(const char *home, int part, int parts)
{
	struct sched_work *s = xcalloc(1, sizeof(*s));

	s->w.run = sched_run;
	s->home = xstrdup(home);
	s->part = part;
	s->parts = parts;
	return &s->w;
}

static void schedules_work_free(struct work *w)
{
	struct sched_work *s = (struct sched_work *)w;

	if (s) {
		free(s->home);
		free(s);
	}
}

static struct work *schedules_task_round(struct task_ctx *c, void *state)
{
	/* as many parts in parallel as the pool has threads: 1,000 fires due at one minute go faster */
	int parts = c->nworkers > 0 ? c->nworkers : 1;
	struct work *list = NULL, **tail = &list;

	(void)state;
	for (int part = 0; part < parts; part++) {
		*tail = schedules_work_new(c->home, part, parts);
		tail = &(*tail)->next;
	}
	return list;
}

static int64_t every_schedules_tick(const struct task_ctx *c)
{
	(void)c;
	return SCHEDULES_TICK_MS;
}

const struct task schedules_task = {
	.name = "schedules",
	.flags = TASK_LEADER | TASK_NO_DEV | TASK_POOL,
	.period = every_schedules_tick,
	.start_round = schedules_task_round,
	.free = schedules_work_free,
};

/*
 * hang — see hang.h and monitor.md. The settings come from three places,
 * each applied over the last: the defaults here, the daemon's FERRY_HANG
 * (tests shorten everything with it), and a step's `hang:`. Both written
 * forms go through hang_setting(), so a key means the same in each and a
 * bad value gets the same message.
 */
#include "monitor/hang.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/durations.h"
#include "lib/util.h"

void hang_cfg_default(struct hang_cfg *c)
{
	static const struct {
		const char *name;
		int64_t ms;
	} phases[] = {
		/* the quiet a job may have in each, declared through $FERRY_PHASE */
		{"checkpoint", 30 * 60000}, {"eval", 60 * 60000}, {"warmup", 30 * 60000},
		{"rendezvous", 30 * 60000},
	};

	memset(c, 0, sizeof(*c));
	c->enabled = 1;
	c->period_ms = 30000;
	c->periods = 4;
	c->window_ms = 120000;
	c->confirm_ms = 60000;
	c->warmup_ms = 300000;
	c->flat_var = 25;       /* a standard deviation of 5 points */
	c->low_pct = 10;
	c->high_pct = 90;
	c->action = HANG_NOTIFY;
	c->clear_looks = 3;
	c->cadence_k = 10;
	for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
		snprintf(c->phases[i].name, sizeof(c->phases[i].name), "%s", phases[i].name);
		c->phases[i].ms = phases[i].ms;
		c->nphases++;
	}
}

const char *hang_action_name(enum hang_action a)
{
	return a == HANG_RESTART ? "restart" : a == HANG_FAIL ? "fail" : "notify";
}

int hang_action_parse(const char *s)
{
	if (s == NULL)
		return -1;
	if (strcmp(s, "notify") == 0)
		return HANG_NOTIFY;
	if (strcmp(s, "restart") == 0)
		return HANG_RESTART;
	if (strcmp(s, "fail") == 0)
		return HANG_FAIL;
	return -1;
}

const char *hang_state_name(enum hang_state s)
{
	static const char *const names[] = {"warmup", "alive", "phase", "quiet", "suspected", "hung"};
	return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

/* A phase name: a short word of letters, digits, - and _. */
static int phase_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= HANG_PHASE_LEN)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
			return 0;
	return 1;
}

static int number_in(const char *key, const char *v, double lo, double hi, double *out)
{
	char *end = NULL;
	double d = strtod(v, &end);

	if (*v == '\0' || *end != '\0' || !(d >= lo && d <= hi)) {
		ferry_error_set("hang %s \"%s\" must be a number from %g to %g", key, v, lo, hi);
		return FERRY_EINVALID;
	}
	*out = d;
	return FERRY_OK;
}

int hang_setting(json_t *obj, const char *key, const char *v)
{
	static const struct {
		const char *key, *field;
	} durations[] = {
		{"period", "period_ms"}, {"window", "window_ms"}, {"confirm", "confirm_ms"}, {"warmup", "warmup_ms"},
	}, numbers[] = {
		{"variance", "flat_var"}, {"low", "low_pct"}, {"high", "high_pct"},
	};
	int64_t ms, n;
	double d;

	for (size_t i = 0; i < sizeof(durations) / sizeof(durations[0]); i++) {
		if (strcmp(key, durations[i].key) != 0)
			continue;
		/* a warm-up of 0 is allowed: no exemption after the start */
		if (strcmp(key, "warmup") == 0 && strcmp(v, "0") == 0)
			ms = 0;
		else if (duration_parse(v, &ms) < 0) {
			ferry_error_set("hang %s: %s", key, ferry_error_last());
			return FERRY_EINVALID;
		}
		if (strcmp(key, "period") == 0 && ms < 100) {
			ferry_error_set("hang period \"%s\" must be at least 100ms", v);
			return FERRY_EINVALID;
		}
		json_object_set_new(obj, durations[i].field, json_integer(ms));
		return FERRY_OK;
	}
	for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++) {
		if (strcmp(key, numbers[i].key) != 0)
			continue;
		if (number_in(key, v, 0, strcmp(key, "variance") == 0 ? 1e6 : 1e4, &d) < 0)
			return FERRY_EINVALID;
		json_object_set_new(obj, numbers[i].field, json_real(d));
		return FERRY_OK;
	}
	if (strcmp(key, "periods") == 0) {
		if (parse_int64(v, &n) < 0 || n < 1 || n > 1000) {
			ferry_error_set("hang periods \"%s\" must be a whole number from 1 to 1000", v);
			return FERRY_EINVALID;
		}
		json_object_set_new(obj, "periods", json_integer(n));
		return FERRY_OK;
	}
	if (strcmp(key, "clear") == 0 || strcmp(key, "cadence") == 0) {
		int clear = key[1] == 'l';
		if (parse_int64(v, &n) < 0 || n < !!clear || n > 100) {
			ferry_error_set("hang %s \"%s\" must be a whole number from %d to 100%s", key, v, clear,
					clear ? " (non-flat looks in a row that clear a suspicion)"
					      : " (times the typical gap between metrics lines or heartbeats; 0: off)");
			return FERRY_EINVALID;
		}
		json_object_set_new(obj, clear ? "clear_looks" : "cadence_k", json_integer(n));
		return FERRY_OK;
	}
	if (strcmp(key, "on_hang") == 0) {
		if (hang_action_parse(v) < 0) {
			ferry_error_set("hang on_hang \"%s\" is not valid; use notify, restart or fail", v);
			return FERRY_EINVALID;
		}
		json_object_set_new(obj, "on_hang", json_string(v));
		return FERRY_OK;
	}
	if (strcmp(key, "enabled") == 0) {
		if (strcmp(v, "true") != 0 && strcmp(v, "false") != 0) {
			ferry_error_set("hang enabled \"%s\" must be true or false", v);
			return FERRY_EINVALID;
		}
		json_object_set_new(obj, "enabled", json_boolean(v[0] == 't'));
		return FERRY_OK;
	}
	if (strncmp(key, "phase.", 6) == 0) {
		json_t *ph = json_object_get(obj, "phases");
		if (!phase_name_ok(key + 6)) {
			ferry_error_set("hang phase \"%s\": a phase is a lower-case word of at most %d characters",
					key + 6, HANG_PHASE_LEN - 1);
			return FERRY_EINVALID;
		}
		if (duration_parse(v, &ms) < 0) {
			ferry_error_set("hang phase %s: %s", key + 6, ferry_error_last());
			return FERRY_EINVALID;
		}
		if (ph == NULL)
			json_object_set_new(obj, "phases", ph = json_object());
		if (json_object_get(ph, key + 6) == NULL && json_object_size(ph) >= HANG_MAX_PHASES) {
			ferry_error_set("hang phases: at most %d", HANG_MAX_PHASES);
			return FERRY_EINVALID;
		}
		json_object_set_new(ph, key + 6, json_integer(ms));
		return FERRY_OK;
	}
	ferry_error_set("hang has no setting \"%s\"; the settings are period, periods, window, confirm, "
			"warmup, variance, low, high, clear, cadence, on_hang, enabled and phases", key);
	return FERRY_EINVALID;
}

json_t *hang_cfg_parse_text(const char *text)
{
	json_t *obj = json_object();
	char *copy = xstrdup(text), *save = NULL, *item;

	for (item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(item, '=');
		while (*item == ' ')
			item++;
		if (*item == '\0')
			continue;
		if (eq == NULL) {
			ferry_error_set("FERRY_HANG: \"%s\" is not KEY=VALUE", item);
			goto bad;
		}
		*eq = '\0';
		if (hang_setting(obj, item, eq + 1) < 0) {
			char *why = xstrdup(ferry_error_last()); /* the message is rewritten in its own buffer */
			ferry_error_set("FERRY_HANG: %s", why);
			free(why);
			goto bad;
		}
	}
	free(copy);
	return obj;
bad:
	free(copy);
	json_decref(obj);
	return NULL;
}

int hang_cfg_apply(struct hang_cfg *c, const json_t *obj)
{
	json_t *v, *ph = json_object_get(obj, "phases");
	const char *name;
	int a;

	if (obj == NULL || json_is_null(obj))
		return FERRY_OK;
	if (!json_is_object(obj)) {
		ferry_error_set("hang must be an object");
		return FERRY_EINVALID;
	}
	if ((v = json_object_get(obj, "enabled")) != NULL)
		c->enabled = json_is_true(v);
	if ((v = json_object_get(obj, "period_ms")) != NULL && json_integer_value(v) >= 100)
		c->period_ms = json_integer_value(v);
	if ((v = json_object_get(obj, "periods")) != NULL && json_integer_value(v) >= 1)
		c->periods = (int)json_integer_value(v);
	if ((v = json_object_get(obj, "window_ms")) != NULL && json_integer_value(v) > 0)
		c->window_ms = json_integer_value(v);
	if ((v = json_object_get(obj, "confirm_ms")) != NULL && json_integer_value(v) >= 0)
		c->confirm_ms = json_integer_value(v);
	if ((v = json_object_get(obj, "warmup_ms")) != NULL && json_integer_value(v) >= 0)
		c->warmup_ms = json_integer_value(v);
	if ((v = json_object_get(obj, "flat_var")) != NULL)
		c->flat_var = json_number_value(v);
	if ((v = json_object_get(obj, "low_pct")) != NULL)
		c->low_pct = json_number_value(v);
	if ((v = json_object_get(obj, "high_pct")) != NULL)
		c->high_pct = json_number_value(v);
	if ((v = json_object_get(obj, "clear_looks")) != NULL && json_integer_value(v) >= 1)
		c->clear_looks = (int)json_integer_value(v);
	if ((v = json_object_get(obj, "cadence_k")) != NULL && json_integer_value(v) >= 0)
		c->cadence_k = (int)json_integer_value(v);
	if ((v = json_object_get(obj, "on_hang")) != NULL) {
		if ((a = hang_action_parse(json_string_value(v))) < 0) {
			ferry_error_set("hang on_hang must be notify, restart or fail");
			return FERRY_EINVALID;
		}
		c->action = (enum hang_action)a;
	}
	json_object_foreach(ph, name, v) {
		int k;
		for (k = 0; k < c->nphases && strcmp(c->phases[k].name, name) != 0; k++)
			;
		if (k == c->nphases) {
			if (c->nphases == HANG_MAX_PHASES || !phase_name_ok(name))
				continue;
			snprintf(c->phases[k].name, sizeof(c->phases[k].name), "%s", name);
			c->nphases++;
		}
		c->phases[k].ms = json_integer_value(v);
	}
	return FERRY_OK;
}

json_t *hang_cfg_json(const struct hang_cfg *c)
{
	json_t *ph = json_object();

	for (int k = 0; k < c->nphases; k++)
		json_object_set_new(ph, c->phases[k].name, json_integer(c->phases[k].ms));
	return json_pack("{s:b,s:I,s:i,s:I,s:I,s:I,s:f,s:f,s:f,s:i,s:i,s:s,s:o,s:I}", "enabled", c->enabled,
			 "period_ms", (json_int_t)c->period_ms, "periods", c->periods,
			 "window_ms", (json_int_t)c->window_ms, "confirm_ms", (json_int_t)c->confirm_ms,
			 "warmup_ms", (json_int_t)c->warmup_ms, "flat_var", c->flat_var, "low_pct", c->low_pct,
			 "high_pct", c->high_pct, "clear_looks", c->clear_looks, "cadence_k", c->cadence_k,
			 "on_hang", hang_action_name(c->action), "phases", ph,
			 "sample_ms", (json_int_t)hang_sample_ms(c));
}

int64_t hang_sample_ms(const struct hang_cfg *c)
{
	int64_t s = c->window_ms / 8;

	if (s > c->period_ms)
		s = c->period_ms;
	return s < 100 ? 100 : s;
}

/* ---- the detector ------------------------------------------------------ */

void hang_det_init(struct hang_det *d, int64_t start_ms)
{
	memset(d, 0, sizeof(*d));
	d->start_ms = d->last_activity_ms = d->state_since_ms = start_ms;
	d->state = HS_WARMUP;
	d->median = d->variance = d->dmedian = d->dvariance = NAN;
	snprintf(d->why, sizeof(d->why), "warming up");
}

int64_t hang_look_ms(const struct hang_det *d, const struct hang_cfg *c)
{
	int64_t s = hang_sample_ms(c), want;

	if (c->cadence_k <= 0 || !d->have_prev || (d->prev.metrics_ns < 0 && d->prev.heartbeat_ns < 0))
		return s;
	/* learning (a metrics file or heartbeat, no cadence yet): every HANG_LEARN_MS; then the cadence */
	want = d->cadence_ms > 0 ? d->cadence_ms : HANG_LEARN_MS;
	if (want < 1000)
		want = 1000;
	return want < s ? want : s;
}

static void set_state(struct hang_det *d, enum hang_state s, int64_t now)
{
	if (d->state != s)
		d->state_since_ms = now;
	d->state = s;
}

/* What changed between the last two looks ("wchar +4096, log +120"), into d->what; 0 when nothing. */
static int activity(struct hang_det *d, const struct hang_obs *o)
{
	static const struct {
		const char *name;
		size_t off;
	} counters[] = {
		{"rchar", offsetof(struct hang_obs, rchar)},
		{"wchar", offsetof(struct hang_obs, wchar)},
		{"read_bytes", offsetof(struct hang_obs, read_bytes)},
		{"write_bytes", offsetof(struct hang_obs, write_bytes)},
		{"log", offsetof(struct hang_obs, log_bytes)},
	};
	size_t len = 0;
	int changed = 0;

	d->what[0] = '\0';
	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++) {
		int64_t a = *(const int64_t *)((const char *)&d->prev + counters[i].off);
		int64_t b = *(const int64_t *)((const char *)o + counters[i].off);
		if (a < 0 || b < 0 || a == b)
			continue;
		changed = 1;
		if (len < sizeof(d->what))
			len += (size_t)snprintf(d->what + len, sizeof(d->what) - len, "%s%s %+lld",
						len ? ", " : "", counters[i].name, (long long)(b - a));
	}
	if (o->heartbeat_ns >= 0 && o->heartbeat_ns != d->prev.heartbeat_ns) {
		changed = 1;
		if (len < sizeof(d->what))
			len += (size_t)snprintf(d->what + len, sizeof(d->what) - len, "%sheartbeat", len ? ", " : "");
	}
	if (o->metrics_lines >= 0 && d->prev.metrics_lines >= 0 && o->metrics_lines > d->prev.metrics_lines) {
		changed = 1;
		if (len < sizeof(d->what))
			snprintf(d->what + len, sizeof(d->what) - len, "%smetrics %+lld", len ? ", " : "",
				 (long long)(o->metrics_lines - d->prev.metrics_lines));
	}
	return changed;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static void add_gap(struct hang_det *d, int64_t gap_ms, int64_t marks)
{
	int64_t v[HANG_GAPS];

	if (gap_ms <= 0)
		return;
	d->gaps[d->gap_head] = gap_ms;
	d->gap_head = (d->gap_head + 1) % HANG_GAPS;
	if (d->ngaps < HANG_GAPS)
		d->ngaps++;
	d->marks += marks;
	if (d->marks < HANG_CADENCE_MIN_GAPS)
		return;
	memcpy(v, d->gaps, sizeof(v));
	qsort(v, (size_t)d->ngaps, sizeof(v[0]), cmp_i64);
	d->cadence_ms = v[d->ngaps / 2];
}

/*
 * The job's progress marks between two looks: metrics lines (their mean
 * gap, from the file's mtimes and the lines written between them: exact
 * whatever the look interval) and heartbeats (the gap between two mtimes
 * seen, at most the look interval). The median of the last HANG_GAPS
 * looks' gaps is the cadence, once HANG_CADENCE_MIN_GAPS marks are seen.
 */
static void learn_cadence(struct hang_det *d, const struct hang_obs *o)
{
	const struct hang_obs *p = &d->prev;

	if (o->metrics_lines > 0 && p->metrics_lines > 0 && o->metrics_lines > p->metrics_lines &&
	    o->metrics_ns > p->metrics_ns && p->metrics_ns > 0)
		add_gap(d, (o->metrics_ns - p->metrics_ns) / 1000000 / (o->metrics_lines - p->metrics_lines),
			o->metrics_lines - p->metrics_lines);
	else if (o->heartbeat_ns > 0 && p->heartbeat_ns > 0 && o->heartbeat_ns > p->heartbeat_ns)
		add_gap(d, (o->heartbeat_ns - p->heartbeat_ns) / 1000000, 1);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void stats(double *v, int n, double *median, double *variance)
{
	double mean = 0, var = 0;

	for (int i = 0; i < n; i++)
		mean += v[i];
	mean /= n;
	for (int i = 0; i < n; i++)
		var += (v[i] - mean) * (v[i] - mean);
	qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
	*median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	*variance = var / n;
}

/*
 * Median and variance of the share and of the demand over the points in
 * [now - window, now]; the count, or -1 when the window is not covered yet
 * or holds fewer than min_points looks.
 */
static int window_stats(struct hang_det *d, int64_t window, int64_t now, int min_points)
{
	double u[HANG_POINTS], dm[HANG_POINTS];
	int n = 0, oldest_covered = 0, own = 0;

	for (int i = 0; i < d->npoints; i++) {
		int k = (d->head - 1 - i + HANG_POINTS) % HANG_POINTS;
		if (d->pts[k].t_ms < now - window) {
			oldest_covered = 1;
			break;
		}
		u[n] = d->pts[k].util;
		own |= d->pts[k].demand >= 0;
		dm[n] = d->pts[k].demand >= 0 ? d->pts[k].demand : d->pts[k].util;
		n++;
	}
	/* the window starts before the first look only when the job is younger than it */
	if (!oldest_covered && now - d->start_ms < window)
		return -1;
	if (n < min_points)
		return -1;
	stats(u, n, &d->median, &d->variance);
	stats(dm, n, &d->dmedian, &d->dvariance);
	d->has_demand = own;
	d->window_points = n;
	return n;
}

/* The looks a window must hold to be judged: half of what the sample interval puts in it, at least 3. */
static int window_min_points(const struct hang_cfg *c)
{
	int64_t half = c->window_ms / hang_sample_ms(c) / 2;

	return half > 3 ? (int)half : 3;
}

static int64_t phase_allowance(const struct hang_cfg *c, const char *phase)
{
	for (int k = 0; k < c->nphases; k++)
		if (strcmp(c->phases[k].name, phase) == 0)
			return c->phases[k].ms;
	return 0;
}

enum hang_verdict hang_feed(struct hang_det *d, const struct hang_cfg *c, const struct hang_obs *o)
{
	int64_t now = o->t_ms, quiet_from, quiet, need = c->period_ms * c->periods;
	int64_t window = c->window_ms, confirm = c->confirm_ms, warmup = c->warmup_ms;
	int was_suspect = d->state == HS_SUSPECTED || d->state == HS_HUNG;
	const char *phase = o->phase && *o->phase ? o->phase : "";
	char cadence[96] = "";
	int changed, idle, spin;

	/* a phase named (or changed): its allowance counts from now */
	if (strcmp(phase, d->phase) != 0) {
		snprintf(d->phase, sizeof(d->phase), "%s", phase);
		d->phase_since_ms = now;
	}
	if (o->util >= 0) {
		d->pts[d->head].t_ms = now;
		d->pts[d->head].util = o->util;
		d->pts[d->head].demand = o->demand;
		d->head = (d->head + 1) % HANG_POINTS;
		if (d->npoints < HANG_POINTS)
			d->npoints++;
	}
	changed = d->have_prev ? activity(d, o) : 0;
	if (d->have_prev)
		learn_cadence(d, o);
	d->prev = *o;
	d->prev.phase = NULL;
	d->have_prev = 1;
	if (changed)
		d->last_activity_ms = now;

	/*
	 * A learned cadence: the quiet allowed is that many typical gaps (never
	 * under the floor), the window and the confirmation no longer than it,
	 * and the warm-up is over — a job reporting progress steadily is past
	 * its start.
	 */
	if (c->cadence_k > 0 && d->cadence_ms > 0) {
		int64_t allow = d->cadence_ms * c->cadence_k;
		if (allow < HANG_CADENCE_FLOOR_MS)
			allow = HANG_CADENCE_FLOOR_MS;
		warmup = 0;
		if (allow < need) {
			need = allow;
			if (window > need)
				window = need;
			if (confirm > need)
				confirm = need;
			snprintf(cadence, sizeof(cadence), " (%d × its %.1f s cadence of metrics lines or heartbeats)",
				 c->cadence_k, (double)d->cadence_ms / 1000);
		}
	}
	if (!c->enabled) {
		set_state(d, HS_ALIVE, now);
		snprintf(d->why, sizeof(d->why), "hang detection is off for this step");
		return was_suspect ? HV_CLEARED : HV_NONE;
	}
	if (now - d->start_ms < warmup) {
		set_state(d, HS_WARMUP, now);
		snprintf(d->why, sizeof(d->why), "warming up: not judged until %lld s after the start",
			 (long long)(warmup / 1000));
		return HV_NONE;
	}
	if (changed) {
		d->nonflat = 0;
		set_state(d, HS_ALIVE, now);
		snprintf(d->why, sizeof(d->why), "alive: %s", d->what);
		return was_suspect ? HV_CLEARED : HV_NONE;
	}
	/* quiet since the last activity, counted from the warm-up's end at the earliest */
	quiet_from = d->last_activity_ms;
	if (quiet_from < d->start_ms + warmup)
		quiet_from = d->start_ms + warmup;
	if (*d->phase) {
		int64_t allow = phase_allowance(c, d->phase);
		if (d->phase_since_ms > quiet_from)
			quiet_from = d->phase_since_ms;
		if (allow > need) {
			need = allow;
			cadence[0] = '\0';
		}
	}
	quiet = now - quiet_from;
	if (quiet < need) {
		d->nonflat = 0;
		set_state(d, *d->phase ? HS_PHASE : HS_ALIVE, now);
		snprintf(d->why, sizeof(d->why), "%s%s: no IO, log, heartbeat or metrics for %lld s of %lld s allowed%s",
			 *d->phase ? "in phase " : "alive", d->phase, (long long)(quiet / 1000),
			 (long long)(need / 1000), cadence);
		return was_suspect ? HV_CLEARED : HV_NONE;
	}
	/*
	 * Suspected: each new point is judged against the suspicion's flat line
	 * (its series and median); `clear` points in a row off it clear the
	 * suspicion, fewer do not, and the confirmation counts on.
	 */
	if (was_suspect) {
		double band = 3 * sqrt(c->flat_var), x = d->band_center;
		if (band < 10)
			band = 10;
		if (o->util >= 0) {
			x = d->band_demand && o->demand >= 0 ? o->demand : o->util;
			if (fabs(x - d->band_center) > band)
				d->nonflat++;
			else
				d->nonflat = 0;
		}
		if (d->nonflat >= c->clear_looks) {
			d->nonflat = 0;
			set_state(d, HS_QUIET, now);
			snprintf(d->why, sizeof(d->why), "quiet for %lld s, but %d looks in a row were off its flat "
				 "line (%s %.1f%%, the suspicion's median %.1f%%): busy", (long long)(quiet / 1000),
				 c->clear_looks, d->band_demand ? "demand" : "utilization", x, d->band_center);
			return HV_CLEARED;
		}
		if (d->state == HS_SUSPECTED && now - d->suspect_since_ms >= confirm) {
			set_state(d, HS_HUNG, now);
			snprintf(d->why, sizeof(d->why), "%s", d->suspect_why);
			return HV_HUNG;
		}
		/* a hung job keeps the reason it was declared hung for (its event and action say it) */
		if (d->nonflat > 0 && d->state == HS_SUSPECTED)
			snprintf(d->why, sizeof(d->why), "still %s: quiet for %lld s; %d look%s in a row off its flat "
				 "line (%s %.1f%%, the suspicion's median %.1f%%), %d clear it", hang_state_name(d->state),
				 (long long)(quiet / 1000), d->nonflat, d->nonflat == 1 ? "" : "s",
				 d->band_demand ? "demand" : "utilization", x, d->band_center, c->clear_looks);
		else
			snprintf(d->why, sizeof(d->why), "%s", d->suspect_why);
		return HV_NONE;
	}
	/*
	 * stage 2: is utilization flat at an end? Judged on at least half the
	 * looks the window holds (its length over the sample interval; never
	 * fewer than 3): a daemon too busy to look that often takes a few
	 * late looks, each the average of busy and idle seconds, and a job
	 * that computes one second in two looked flat and spinning on three of
	 * them (variance 397.6 over 97.2, 100 and a 2.3 s look's 56.4 in a
	 * make test's run): it is judged once the looks come again.
	 */
	if (window_stats(d, window, now, window_min_points(c)) < 0) {
		set_state(d, HS_QUIET, now);
		snprintf(d->why, sizeof(d->why), "quiet for %lld s (IO, log, heartbeat and metrics flat)%s; gathering "
			 "utilization over %lld s", (long long)(quiet / 1000), cadence, (long long)(window / 1000));
		return HV_NONE;
	}
	/*
	 * idle: the share it gets, flat and low — and what it asks for flat and
	 * low too (a thread starved on a crowded machine gets little but wants a
	 * core; one that computes half of each second gets a third of a core
	 * then, a share whose swing is under the variance bound, while what it
	 * asks for swings between 0 and 100);
	 * spinning: what it asks for, flat and high
	 */
	idle = d->variance <= c->flat_var && d->median <= c->low_pct &&
	       (!d->has_demand || (d->dvariance <= c->flat_var && d->dmedian <= c->low_pct));
	spin = !idle && d->dvariance <= c->flat_var && d->dmedian >= c->high_pct;
	if (idle || spin) {
		int n = snprintf(d->why, sizeof(d->why), "no change of rchar, wchar, read_bytes, write_bytes, log, "
				 "heartbeat or metrics for %lld s%s; ", (long long)(quiet / 1000), cadence);
		if (idle || !d->has_demand)
			snprintf(d->why + n, sizeof(d->why) - (size_t)n, "utilization flat over %lld s (%d samples: "
				 "variance %.1f <= %.1f, median %.1f%% %s %.0f%%: %s)", (long long)(window / 1000),
				 d->window_points, idle ? d->variance : d->dvariance, c->flat_var,
				 idle ? d->median : d->dmedian, idle ? "<=" : ">=", idle ? c->low_pct : c->high_pct,
				 idle ? "idle" : "spinning");
		else
			snprintf(d->why + n, sizeof(d->why) - (size_t)n, "demand (a thread's time on a CPU or "
				 "waiting for one) flat over %lld s (%d samples: variance %.1f <= %.1f, median %.1f%% >= "
				 "%.0f%%: spinning; the CPU share it got: median %.1f%%, variance %.1f)",
				 (long long)(window / 1000), d->window_points, d->dvariance, c->flat_var, d->dmedian,
				 c->high_pct, d->median, d->variance);
		snprintf(d->suspect_why, sizeof(d->suspect_why), "%s", d->why);
		d->nonflat = 0;
		d->band_demand = spin && d->has_demand;
		d->band_center = spin ? d->dmedian : d->median;
		set_state(d, HS_SUSPECTED, now);
		d->suspect_since_ms = now;
		if (confirm <= 0) {
			set_state(d, HS_HUNG, now);
			return HV_HUNG;
		}
		return HV_SUSPECTED;
	}
	set_state(d, HS_QUIET, now);
	if (d->has_demand)
		snprintf(d->why, sizeof(d->why), "quiet for %lld s but utilization is not flat at an end (share: "
			 "variance %.1f, median %.1f%%; demand: variance %.1f, median %.1f%%; over %d samples): busy",
			 (long long)(quiet / 1000), d->variance, d->median, d->dvariance, d->dmedian, d->window_points);
	else
		snprintf(d->why, sizeof(d->why), "quiet for %lld s but utilization is not flat at an end (variance "
			 "%.1f, median %.1f%% over %d samples): busy", (long long)(quiet / 1000), d->variance,
			 d->median, d->window_points);
	return HV_NONE;
}

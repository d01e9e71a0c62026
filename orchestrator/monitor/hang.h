/*
 * hang — the two-stage hang rule of the job monitor (monitor.md), with no
 * I/O of its own: the monitor feeds it one observation of a running
 * attempt at a time (IO counters, CPU time, log size, heartbeat, phase,
 * utilization) and it says what it sees — warming up, alive, quiet but
 * busy, suspected hung, hung — and why, in words a person can check.
 *
 * Stage 1: any change of an IO counter, of the log's size or of the
 * heartbeat file between two observations means alive. After `periods`
 * periods without one (longer in a declared phase, never during the
 * warm-up; sooner for a job whose metrics lines or heartbeats have a
 * learned cadence: `cadence` times its typical gap), stage 2 looks at the
 * points of the last `window`: the CPU share flat (variance at or below
 * flat_var) at the low end (median at or below low_pct: an idle deadlock),
 * or the demand — the busiest thread's time on a CPU or waiting for one —
 * flat at the high end (at or above high_pct: a collective spinning,
 * whatever else the machine runs) makes the job suspected hung; still so
 * after `confirm`, hung. Activity clears it at once; samples off the flat
 * line (farther from the suspicion's median than three standard deviations
 * of flat_var, and at least 10 points) clear it only `clear` looks in a
 * row — one noisy sample does not.
 */
#ifndef FERRY_HANG_H
#define FERRY_HANG_H

#include <jansson.h>
#include <stdint.h>

enum hang_action { HANG_NOTIFY, HANG_RESTART, HANG_FAIL };

#define HANG_MAX_PHASES 8
#define HANG_PHASE_LEN 24
#define HANG_POINTS 64 /* utilization points kept: a window holds at most this many samples */
#define HANG_GAPS 8    /* cadence: the gaps between progress marks kept (their median is the cadence) */
#define HANG_CADENCE_MIN_GAPS 4           /* … learned once this many marks (lines, heartbeats) are seen */
#define HANG_LEARN_MS 2000                /* looks while a job with progress marks has no cadence yet */
#define HANG_CADENCE_FLOOR_MS 10000       /* the quiet a cadence allows is never shorter */

struct hang_cfg {
	int enabled;
	int64_t period_ms, window_ms, confirm_ms, warmup_ms;
	int periods;
	double flat_var;        /* percent points squared */
	double low_pct, high_pct;
	enum hang_action action;
	int clear_looks;        /* non-flat looks in a row that clear a suspicion */
	int cadence_k;          /* quiet allowed: this many typical gaps of a learned cadence (0: off) */
	int nphases;
	struct {
		char name[HANG_PHASE_LEN];
		int64_t ms;     /* how long the job may stay quiet in it */
	} phases[HANG_MAX_PHASES];
};

/* The built-in defaults: 30 s, 4 periods, window 2 min, confirm 1 min, warm-up 5 min, notify, clear 3, cadence 10. */
void hang_cfg_default(struct hang_cfg *c);

/*
 * Applies settings to c: obj is a step's normalized `hang` ({"period_ms",
 * "periods", "window_ms", "confirm_ms", "warmup_ms", "flat_var",
 * "low_pct", "high_pct", "on_hang", "enabled", "phases":{NAME: ms}}; keys
 * absent keep c's). FERRY_EINVALID with the message naming the key.
 */
int hang_cfg_apply(struct hang_cfg *c, const json_t *obj);

/*
 * One setting as written (YAML key and scalar value: "period", "30s";
 * "phase.checkpoint", "10m") into the normalized object obj.
 * FERRY_EINVALID with a message naming the key and what it takes.
 */
int hang_setting(json_t *obj, const char *key, const char *value);

/*
 * Parses the daemon-wide settings (FERRY_HANG): comma-separated KEY=VALUE
 * with the YAML's keys and values, e.g. "period=1s,periods=3,window=3s,
 * confirm=2s,warmup=2s,on_hang=notify,phase.checkpoint=10s" into the
 * normalized object hang_cfg_apply takes; NULL with the message set.
 */
json_t *hang_cfg_parse_text(const char *text);

/* The effective settings as JSON (the API's "config"); a new reference. */
json_t *hang_cfg_json(const struct hang_cfg *c);

/* How often the monitor samples under c: the period, or an eighth of the window when shorter (≥ 100 ms). */
int64_t hang_sample_ms(const struct hang_cfg *c);

struct hang_det;
/*
 * How often to look at d's job: hang_sample_ms; for a job with a metrics
 * file or heartbeat, HANG_LEARN_MS until its cadence is learned, then the
 * cadence (≥ 1 s) — each only when shorter.
 */
int64_t hang_look_ms(const struct hang_det *d, const struct hang_cfg *c);

const char *hang_action_name(enum hang_action a);
int hang_action_parse(const char *s); /* -1 when not notify|restart|fail */

/* One look at a running attempt. Counters are totals since it started; -1: not known. */
struct hang_obs {
	int64_t t_ms;                   /* monotonic */
	int64_t rchar, wchar, read_bytes, write_bytes;
	int64_t cpu_ms;
	int64_t log_bytes;
	int64_t heartbeat_ns;           /* the heartbeat file's mtime, or -1 */
	double util;                    /* percent over the interval since the last look, or < 0 */
	double demand;                  /* percent: the busiest thread's runnable time (on a CPU or
					   waiting for one) over the interval; < 0 not known (util
					   stands in) */
	int64_t metrics_lines;          /* lines written to the metrics file so far, or -1 */
	int64_t metrics_ns;             /* the metrics file's mtime, or -1 */
	const char *phase;              /* the declared phase, or NULL/"" */
};

enum hang_state { HS_WARMUP, HS_ALIVE, HS_PHASE, HS_QUIET, HS_SUSPECTED, HS_HUNG };

enum hang_verdict {
	HV_NONE,      /* nothing new */
	HV_SUSPECTED, /* it just became suspected hung */
	HV_HUNG,      /* … and stayed so for the confirmation time */
	HV_CLEARED,   /* it was suspected or hung and showed life */
};

struct hang_det {
	int64_t start_ms, last_activity_ms, state_since_ms, suspect_since_ms;
	struct hang_obs prev;
	int have_prev;
	char phase[HANG_PHASE_LEN];
	int64_t phase_since_ms;
	enum hang_state state;
	int npoints, head;
	struct {
		int64_t t_ms;
		double util, demand;
	} pts[HANG_POINTS];
	double median, variance;        /* CPU (or GPU) share in the last stage-2 look; NAN before one */
	double dmedian, dvariance;      /* demand in the same look (the share where not known) */
	int has_demand;                 /* some point of that look had a demand of its own */
	int window_points;
	int nonflat;                    /* suspected, and this many looks in a row off its flat line */
	int band_demand;                /* the suspicion's series: 1 demand (spinning), 0 share (idle) */
	double band_center;             /* … its median when suspected */
	char suspect_why[512];          /* the suspicion's why, said again when it is confirmed */
	/* cadence: the gaps (ms) between the job's progress marks (metrics lines, heartbeats) */
	int64_t gaps[HANG_GAPS];
	int ngaps, gap_head;
	int64_t marks;                  /* progress marks seen between looks */
	int64_t cadence_ms;             /* their median once HANG_CADENCE_MIN_GAPS are known, else 0 */
	char what[160];                 /* what changed last, or what stayed flat */
	char why[512];                  /* the state, explained */
};

void hang_det_init(struct hang_det *d, int64_t start_ms);

/* Feeds one observation (t_ms increasing); returns what changed. */
enum hang_verdict hang_feed(struct hang_det *d, const struct hang_cfg *c, const struct hang_obs *o);

const char *hang_state_name(enum hang_state s);

#endif

/*
 * Unit tests of the two-stage hang rule (orchestrator/monitor/hang.c): synthetic
 * observations on a virtual clock, so each boundary of the rule is
 * checked exactly — warm-up, the quiet periods, the window, the flat test
 * at both ends, the confirmation, phases, and clearing — plus the
 * settings' parsing and defaults.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "monitor/hang.h"
#include "lib/util.h"

/* period 1 s, 3 periods, window 3 s, confirm 2 s, warm-up 2 s; samples every 375 ms */
static void test_cfg(struct hang_cfg *c)
{
	json_t *o = hang_cfg_parse_text("period=1s,periods=3,window=3s,confirm=2s,warmup=2s");

	hang_cfg_default(c);
	assert_non_null(o);
	assert_int_equal(hang_cfg_apply(c, o), 0);
	json_decref(o);
}

/* A job's counters: io grows when active. */
struct sim {
	struct hang_det d;
	struct hang_cfg c;
	int64_t t, io;
	const char *phase;
	int64_t heartbeat;
	double demand;          /* the next looks' demand (-1: not known) */
	int64_t lines, lines_ns; /* the metrics file: lines so far and its mtime (-1: none) */
};

static enum hang_verdict step(struct sim *s, int64_t dt, int active, double util)
{
	struct hang_obs o;

	s->t += dt;
	if (active)
		s->io += 4096;
	o = (struct hang_obs){.t_ms = s->t, .rchar = 100, .wchar = s->io, .read_bytes = -1, .write_bytes = -1,
			      .cpu_ms = 0, .log_bytes = 10, .heartbeat_ns = s->heartbeat, .util = util,
			      .demand = s->demand, .metrics_lines = s->lines, .metrics_ns = s->lines_ns,
			      .phase = s->phase};
	return hang_feed(&s->d, &s->c, &o);
}

static void sim_init(struct sim *s)
{
	memset(s, 0, sizeof(*s));
	test_cfg(&s->c);
	s->t = 1000000;
	s->heartbeat = -1;
	s->demand = -1;
	s->lines = s->lines_ns = -1;
	hang_det_init(&s->d, s->t);
}

/* Runs until a verdict v or until limit ms pass; returns the ms it took from now (-1: never). */
static int64_t until(struct sim *s, enum hang_verdict v, int64_t limit, int active, double util)
{
	int64_t t0 = s->t;

	while (s->t - t0 < limit)
		if (step(s, 250, active, util) == v)
			return s->t - t0;
	return -1;
}

static void test_hang__defaults(void **state)
{
	struct hang_cfg c;

	(void)state;
	hang_cfg_default(&c);
	assert_int_equal(c.period_ms, 30000);
	assert_int_equal(c.periods, 4);
	assert_int_equal(c.window_ms, 120000);
	assert_int_equal(c.confirm_ms, 60000);
	assert_int_equal(c.warmup_ms, 300000);
	assert_int_equal(c.action, HANG_NOTIFY);
	assert_int_equal(hang_sample_ms(&c), 15000); /* an eighth of the window: 8 points in it */
}

/* An idle job that hangs after its warm-up: suspected after 3 quiet periods, hung 2 s later. */
static void test_hang__idle_hang_timeline(void **state)
{
	struct sim s;
	int64_t t;

	(void)state;
	sim_init(&s);
	/* active through the warm-up and 1 s more */
	assert_int_equal(until(&s, HV_SUSPECTED, 3000, 1, 40), -1);
	assert_int_equal(s.d.state, HS_ALIVE);
	assert_non_null(strstr(s.d.why, "wchar +4096"));
	/* then nothing: suspected once quiet for 3 periods (and the window is flat at 0%) */
	t = until(&s, HV_SUSPECTED, 10000, 0, 0);
	assert_in_range(t, 3000, 3250);
	assert_int_equal(s.d.state, HS_SUSPECTED);
	assert_non_null(strstr(s.d.why, "idle"));
	assert_non_null(strstr(s.d.why, "variance 0.0"));
	/* hung after the confirmation time */
	t = until(&s, HV_HUNG, 10000, 0, 0);
	assert_in_range(t, 1750, 2250);
	assert_int_equal(s.d.state, HS_HUNG);
	/* no verdict again while it stays hung */
	assert_int_equal(until(&s, HV_HUNG, 5000, 0, 0), -1);
	/* life clears it */
	assert_int_equal(step(&s, 250, 1, 0), HV_CLEARED);
	assert_int_equal(s.d.state, HS_ALIVE);
}

/* The warm-up is exempt: a job quiet from its start is judged only after it, counting from its end. */
static void test_hang__warmup_exempt(void **state)
{
	struct sim s;
	int64_t t;

	(void)state;
	sim_init(&s);
	assert_int_equal(step(&s, 250, 0, 0), HV_NONE);
	assert_int_equal(s.d.state, HS_WARMUP);
	t = until(&s, HV_SUSPECTED, 20000, 0, 0);
	assert_in_range(t, 2000 + 3000 - 250, 2000 + 3000 + 250);
}

/* A spinning job: flat at the high end is suspected too; a swinging one is busy, never suspected. */
static void test_hang__spinning_and_swinging(void **state)
{
	struct sim s;
	int i;

	(void)state;
	sim_init(&s);
	assert_in_range(until(&s, HV_SUSPECTED, 20000, 0, 99.5), 4000, 5500);
	assert_non_null(strstr(s.d.why, "spinning"));

	sim_init(&s);
	for (i = 0; i < 80; i++)
		assert_int_not_equal(step(&s, 250, 0, (i / 4) % 2 ? 100 : 0), HV_SUSPECTED);
	assert_int_equal(s.d.state, HS_QUIET);
	assert_non_null(strstr(s.d.why, "busy"));
	assert_true(s.d.variance > 2000);

	/* flat in the middle (50%): not an end, busy */
	sim_init(&s);
	assert_int_equal(until(&s, HV_SUSPECTED, 20000, 0, 50), -1);
	assert_int_equal(s.d.state, HS_QUIET);
}

/* The variance threshold is a boundary: at or below it flat, above it not (13 points in the window: 24.85). */
static void test_hang__variance_boundary(void **state)
{
	struct sim s;
	int i;

	(void)state;
	sim_init(&s);
	s.c.flat_var = 24.86;
	/* alternating 0 and 10 over 13 points (7 zeros): variance 24.85, median 0 (low end) */
	for (i = 0; i < 40 && s.d.state != HS_SUSPECTED; i++)
		step(&s, 250, 0, i % 2 ? 10 : 0);
	assert_int_equal(s.d.state, HS_SUSPECTED);
	sim_init(&s);
	s.c.flat_var = 24.84;
	for (i = 0; i < 40; i++)
		step(&s, 250, 0, i % 2 ? 10 : 0);
	assert_int_equal(s.d.state, HS_QUIET);
}

/* Heartbeats are life; a declared phase allows its own longer quiet. */
static void test_hang__heartbeat_and_phase(void **state)
{
	struct sim s;
	int i;

	(void)state;
	sim_init(&s);
	for (i = 0; i < 60; i++) {
		if (i % 4 == 0)
			s.heartbeat = s.t;
		assert_int_equal(step(&s, 250, 0, 0), HV_NONE);
	}
	assert_int_equal(s.d.state, HS_ALIVE);

	sim_init(&s);
	{
		json_t *o = hang_cfg_parse_text("phase.checkpoint=10s");
		assert_int_equal(hang_cfg_apply(&s.c, o), 0);
		json_decref(o);
	}
	assert_int_equal(until(&s, HV_SUSPECTED, 3000, 1, 0), -1);
	s.phase = "checkpoint";
	/* quiet in the phase: not suspected for its 10 s */
	assert_int_equal(until(&s, HV_SUSPECTED, 9500, 0, 0), -1);
	assert_int_equal(s.d.state, HS_PHASE);
	assert_non_null(strstr(s.d.why, "checkpoint"));
	/* … then it is */
	assert_in_range(until(&s, HV_SUSPECTED, 5000, 0, 0), 0, 1000);
	/* an unknown phase gets no extra allowance */
	sim_init(&s);
	s.phase = "dreaming";
	assert_in_range(until(&s, HV_SUSPECTED, 20000, 0, 0), 5000, 5500);
}

/* A suspected job that shows life is cleared, and judged afresh. */
static void test_hang__cleared_then_again(void **state)
{
	struct sim s;

	(void)state;
	sim_init(&s);
	assert_true(until(&s, HV_SUSPECTED, 20000, 0, 0) > 0);
	assert_int_equal(step(&s, 250, 1, 0), HV_CLEARED);
	assert_in_range(until(&s, HV_SUSPECTED, 20000, 0, 0), 2750, 3250);
}

/* Disabled: always alive. */
static void test_hang__disabled(void **state)
{
	struct sim s;
	json_t *o;

	(void)state;
	sim_init(&s);
	o = hang_cfg_parse_text("enabled=false");
	assert_int_equal(hang_cfg_apply(&s.c, o), 0);
	json_decref(o);
	assert_int_equal(until(&s, HV_SUSPECTED, 30000, 0, 0), -1);
	assert_int_equal(s.d.state, HS_ALIVE);
}

/* Counters that are not known (-1) never count as activity. */
static void test_hang__unknown_counters(void **state)
{
	struct sim s;
	struct hang_obs o;
	int i;

	(void)state;
	sim_init(&s);
	for (i = 0; i < 40 && s.d.state != HS_SUSPECTED; i++) {
		s.t += 250;
		o = (struct hang_obs){.t_ms = s.t, .rchar = -1, .wchar = -1, .read_bytes = -1, .write_bytes = -1,
				      .cpu_ms = -1, .log_bytes = -1, .heartbeat_ns = -1, .util = 0, .demand = -1,
				      .metrics_lines = -1, .metrics_ns = -1};
		hang_feed(&s.d, &s.c, &o);
	}
	assert_int_equal(s.d.state, HS_SUSPECTED);
}

/*
 * A spinning thread on a busy machine: the share it gets swings (37–86 %,
 * as measured beside two competing processes on 2 cores), what it asks for
 * (on a CPU or waiting for one) is flat at ~100 %. Judged by the share
 * alone it is busy for ever; by its demand it is spinning. A job whose
 * compute varies varies in demand too: busy.
 */
/*
 * A job computing one second in two, looked at late on a busy machine: the
 * looks that reached the window (100, 97.2, then a 2.3 s look's 56.4, its
 * busy and idle seconds averaged) were flat enough for variance=400 and
 * high: it was suspected, then killed as hung (a make test's
 * test_monitor_varying_cpu_without_io_is_never_hung). Three looks where the
 * window should hold eight judge nothing; once the looks come again, a job
 * that does spin is still found.
 */
static void test_hang__late_looks_judge_nothing(void **state)
{
	struct sim s;
	int i;

	(void)state;
	sim_init(&s);
	s.c.flat_var = 400;
	/* quiet, varying: busy */
	for (i = 0; i < 40; i++) {
		s.demand = (i / 4) % 2 ? 100 : 0;
		assert_int_not_equal(step(&s, 250, 0, (i / 4) % 2 ? 12 : 0), HV_SUSPECTED);
	}
	assert_int_equal(s.d.state, HS_QUIET);
	s.demand = 100;
	assert_int_not_equal(step(&s, 470, 0, 10), HV_SUSPECTED);
	s.demand = 97.2;
	assert_int_not_equal(step(&s, 470, 0, 13.8), HV_SUSPECTED);
	s.demand = 56.4;
	assert_int_not_equal(step(&s, 2340, 0, 0.4), HV_SUSPECTED);
	assert_int_equal(s.d.state, HS_QUIET);
	assert_non_null(strstr(s.d.why, "gathering"));
	s.demand = 55.3;
	assert_int_not_equal(step(&s, 380, 0, 8), HV_SUSPECTED);
	/* the looks come again, and it spins: suspected */
	s.demand = 99.5;
	assert_in_range(until(&s, HV_SUSPECTED, 5000, 0, 10), 250, 3250);
	assert_non_null(strstr(s.d.why, "spinning"));
}

static void test_hang__spinning_by_demand_under_contention(void **state)
{
	static const double share[] = {37, 86, 52, 71, 44, 83, 60, 39, 77, 66};
	struct sim s;
	int i;

	(void)state;
	/* the share alone (no demand known): never suspected */
	sim_init(&s);
	for (i = 0; i < 120; i++)
		assert_int_not_equal(step(&s, 250, 0, share[i % 10]), HV_SUSPECTED);
	assert_int_equal(s.d.state, HS_QUIET);
	assert_non_null(strstr(s.d.why, "busy"));

	/* with its demand: spinning, and the message shows both figures */
	sim_init(&s);
	for (i = 0; i < 120 && s.d.state != HS_HUNG; i++) {
		s.demand = 98.5 + (i % 3) * 0.5;
		step(&s, 250, 0, share[i % 10]);
	}
	assert_int_equal(s.d.state, HS_HUNG);
	assert_non_null(strstr(s.d.why, "spinning"));
	assert_non_null(strstr(s.d.why, "demand (a thread's time on a CPU or waiting for one) flat"));
	assert_non_null(strstr(s.d.why, "the CPU share it got: median"));
	assert_true(s.d.variance > 200 && s.d.dvariance < 1);

	/* varying compute: demand swings between busy and asleep, so does the share */
	sim_init(&s);
	for (i = 0; i < 120; i++) {
		s.demand = (i / 4) % 2 ? 100 : 0;
		assert_int_not_equal(step(&s, 250, 0, (i / 4) % 2 ? share[i % 10] : 0), HV_SUSPECTED);
	}
	assert_int_equal(s.d.state, HS_QUIET);

	/* starved: a spinning thread on a crowded machine gets 5–20 % but asks for 100 %: spinning, not idle */
	sim_init(&s);
	for (i = 0; i < 120 && s.d.state != HS_SUSPECTED; i++) {
		s.demand = 99.5;
		step(&s, 250, 0, 5 + (i % 2) * 5);
	}
	assert_int_equal(s.d.state, HS_SUSPECTED);
	assert_non_null(strstr(s.d.why, "spinning"));

	/*
	 * busy half of each 2 s on a crowded machine (a full run's samples, 500 ms
	 * apart): the share swings 0–33 %, under a variance bound of 400 and with
	 * its median low; the demand swings 0–100 %: busy, not idle
	 */
	sim_init(&s);
	s.c.flat_var = 400;
	{
		static const double sh[] = {29.9, 33.2, 2.0, 0.0}, dm[] = {94.1, 98.3, 5.6, 0.0};
		for (i = 0; i < 160; i++) {
			s.demand = dm[(i / 2) % 4];
			assert_int_not_equal(step(&s, 250, 0, sh[(i / 2) % 4]), HV_SUSPECTED);
		}
	}
	assert_int_equal(s.d.state, HS_QUIET);

	/* idle is judged on the share: asleep gets nothing and asks for nothing */
	sim_init(&s);
	s.demand = 0;
	assert_true(until(&s, HV_SUSPECTED, 20000, 0, 0) > 0);
	assert_non_null(strstr(s.d.why, "idle"));
}

/*
 * Hysteresis: a suspected job that goes flat, noisy for a look, flat again
 * with no progress stays suspected and is declared hung on time; `clear`
 * non-flat looks in a row clear it; any activity clears it at once.
 */
static void test_hang__suspicion_holds_through_noise(void **state)
{
	struct sim s;
	int64_t t_susp;
	int i;

	(void)state;
	sim_init(&s);
	assert_int_equal(s.c.clear_looks, 3);
	assert_true(until(&s, HV_SUSPECTED, 20000, 0, 99) > 0);
	t_susp = s.t;
	/* one noisy look: not cleared, still suspected, and the why says so */
	assert_int_equal(step(&s, 250, 0, 0), HV_NONE);
	assert_int_equal(s.d.state, HS_SUSPECTED);
	assert_non_null(strstr(s.d.why, "still suspected: quiet for"));
	assert_non_null(strstr(s.d.why, "1 look in a row off its flat line (utilization 0.0%, the suspicion's median 99.0%), 3 clear it"));
	/* flat again: hung at the confirmation, counted from the suspicion */
	for (i = 0; i < 20 && s.d.state != HS_HUNG; i++)
		step(&s, 250, 0, 99);
	assert_int_equal(s.d.state, HS_HUNG);
	assert_in_range(s.t - t_susp, 2000, 2250);

	/* clear=1 (the old rule): one noisy look clears it */
	sim_init(&s);
	s.c.clear_looks = 1;
	assert_true(until(&s, HV_SUSPECTED, 20000, 0, 99) > 0);
	assert_int_equal(step(&s, 250, 0, 0), HV_CLEARED);

	/* three non-flat looks in a row clear it */
	sim_init(&s);
	assert_true(until(&s, HV_SUSPECTED, 20000, 0, 99) > 0);
	assert_int_equal(step(&s, 250, 0, 0), HV_NONE);
	assert_int_equal(step(&s, 250, 0, 40), HV_NONE);
	assert_int_equal(step(&s, 250, 0, 0), HV_CLEARED);
	assert_int_equal(s.d.state, HS_QUIET);

	/* activity clears it at once */
	sim_init(&s);
	assert_true(until(&s, HV_SUSPECTED, 20000, 0, 99) > 0);
	assert_int_equal(step(&s, 250, 0, 0), HV_NONE);
	assert_int_equal(step(&s, 250, 1, 0), HV_CLEARED);
}

/* A default-rule job writing a metrics line every `gap` ms for `lines` lines (looks every 15 s, as the monitor's); then quiet */
static void metrics_job(struct sim *s, int64_t gap, int lines, double util)
{
	int64_t next = s->t;

	hang_cfg_default(&s->c);
	s->lines = 0;
	for (int i = 0; i < lines;) {
		s->t += 1;
		if (s->t >= next) {
			s->lines++, s->lines_ns = s->t * 1000000, s->io += 80;
			next += gap;
			i++;
		}
		if ((s->t - 1000000) % hang_look_ms(&s->d, &s->c) == 0)
			hang_feed(&s->d, &s->c, &(struct hang_obs){.t_ms = s->t, .rchar = 100, .wchar = s->io,
				  .read_bytes = -1, .write_bytes = -1, .log_bytes = 10, .heartbeat_ns = -1, .util = util,
				  .demand = -1, .metrics_lines = s->lines, .metrics_ns = s->lines_ns});
	}
}

/*
 * Cadence: a job that writes a metrics line every 2 s has a cadence of
 * 2 s once four gaps are seen; when it stops it is suspected after 10 ×
 * 2 s of quiet and hung after as long again — within 60 s under the
 * default rule (192 s without metrics), its warm-up waived. Progress that
 * goes on as IO (a checkpoint written) keeps it alive; a declared phase
 * keeps its own allowance.
 */
static void test_hang__metrics_cadence(void **state)
{
	struct sim s;
	int64_t took;

	(void)state;
	sim_init(&s);
	metrics_job(&s, 2000, 40, 0);
	assert_int_equal(s.d.cadence_ms, 2000);
	assert_int_equal(hang_look_ms(&s.d, &s.c), 2000);
	took = until(&s, HV_HUNG, 120000, 0, 0);
	assert_in_range(took, 40000, 46000);
	assert_non_null(strstr(s.d.why, "(10 × its 2.0 s cadence of metrics lines or heartbeats)"));

	/* learned within 28 s: the first look that finds a metrics file (15 s), then looks every 2 s */
	sim_init(&s);
	metrics_job(&s, 2000, 14, 0);
	assert_int_equal(s.d.cadence_ms, 2000);

	/* 30 lines in its first 90 s: past the warm-up once its cadence is known */
	sim_init(&s);
	metrics_job(&s, 3000, 30, 0);
	assert_int_equal(s.d.cadence_ms, 3000);
	took = until(&s, HV_SUSPECTED, 120000, 0, 0);
	assert_in_range(took, 30000, 36000);

	/* a checkpoint written for 30 s (IO), then lines again: never suspected */
	sim_init(&s);
	metrics_job(&s, 2000, 40, 99);
	assert_int_equal(until(&s, HV_SUSPECTED, 30000, 1, 99), -1);
	metrics_job(&s, 2000, 10, 99);
	assert_int_not_equal(s.d.state, HS_SUSPECTED);

	/* a declared eval phase keeps its hour */
	sim_init(&s);
	metrics_job(&s, 2000, 40, 99);
	s.phase = "eval";
	assert_int_equal(until(&s, HV_SUSPECTED, 300000, 0, 99), -1);
	assert_int_equal(s.d.state, HS_PHASE);

	/* cadence=0: the plain rule, 4 periods of 30 s, then 2 min of window */
	sim_init(&s);
	metrics_job(&s, 2000, 40, 0);
	s.c.cadence_k = 0;
	took = until(&s, HV_SUSPECTED, 400000, 0, 0);
	assert_true(took >= 120000);

	/* irregular heartbeats every 1–3 s: the median gap is the cadence */
	sim_init(&s);
	hang_cfg_default(&s.c);
	for (int i = 0; i < 12; i++) {
		s.heartbeat = (s.t + 1000 + (i % 3) * 1000) * 1000000;
		step(&s, 1000 + (i % 3) * 1000, 0, 0);
	}
	assert_int_equal(s.d.cadence_ms, 2000);
}

static void test_hang__settings(void **state)
{
	json_t *o;
	struct hang_cfg c;

	(void)state;
	o = json_object();
	assert_int_equal(hang_setting(o, "period", "45s"), 0);
	assert_int_equal(json_integer_value(json_object_get(o, "period_ms")), 45000);
	assert_int_equal(hang_setting(o, "on_hang", "restart"), 0);
	assert_int_equal(hang_setting(o, "warmup", "0"), 0);
	assert_int_equal(hang_setting(o, "phase.eval", "2h"), 0);
	assert_int_equal(hang_setting(o, "period", "50ms"), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "hang period \"50ms\" must be at least 100ms");
	assert_int_equal(hang_setting(o, "periods", "0"), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "hang periods \"0\" must be a whole number from 1 to 1000");
	assert_int_equal(hang_setting(o, "on_hang", "panic"), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "hang on_hang \"panic\" is not valid; use notify, restart or fail");
	assert_int_equal(hang_setting(o, "windw", "1m"), FERRY_EINVALID);
	assert_non_null(strstr(ferry_error_last(), "hang has no setting \"windw\""));
	assert_int_equal(hang_setting(o, "phase.Bad Name", "1m"), FERRY_EINVALID);
	assert_int_equal(hang_setting(o, "clear", "0"), FERRY_EINVALID);
	assert_string_equal(ferry_error_last(), "hang clear \"0\" must be a whole number from 1 to 100 "
			    "(non-flat looks in a row that clear a suspicion)");
	assert_int_equal(hang_setting(o, "cadence", "x"), FERRY_EINVALID);
	assert_int_equal(hang_setting(o, "clear", "5"), 0);
	assert_int_equal(hang_setting(o, "cadence", "0"), 0);
	hang_cfg_default(&c);
	assert_int_equal(hang_cfg_apply(&c, o), 0);
	assert_int_equal(c.period_ms, 45000);
	assert_int_equal(c.warmup_ms, 0);
	assert_int_equal(c.action, HANG_RESTART);
	assert_int_equal(c.clear_looks, 5);
	assert_int_equal(c.cadence_k, 0);
	for (int k = 0; k < c.nphases; k++)
		if (strcmp(c.phases[k].name, "eval") == 0)
			assert_int_equal(c.phases[k].ms, 7200000);
	json_decref(o);
	assert_null(hang_cfg_parse_text("period=1s,bogus"));
	assert_string_equal(ferry_error_last(), "FERRY_HANG: \"bogus\" is not KEY=VALUE");
	assert_null(hang_cfg_parse_text("period=fast"));
	assert_non_null(strstr(ferry_error_last(), "FERRY_HANG: hang period"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hang__defaults),
		cmocka_unit_test(test_hang__idle_hang_timeline),
		cmocka_unit_test(test_hang__warmup_exempt),
		cmocka_unit_test(test_hang__spinning_and_swinging),
		cmocka_unit_test(test_hang__variance_boundary),
		cmocka_unit_test(test_hang__heartbeat_and_phase),
		cmocka_unit_test(test_hang__cleared_then_again),
		cmocka_unit_test(test_hang__disabled),
		cmocka_unit_test(test_hang__unknown_counters),
		cmocka_unit_test(test_hang__late_looks_judge_nothing),
		cmocka_unit_test(test_hang__spinning_by_demand_under_contention),
		cmocka_unit_test(test_hang__suspicion_holds_through_noise),
		cmocka_unit_test(test_hang__metrics_cadence),
		cmocka_unit_test(test_hang__settings),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

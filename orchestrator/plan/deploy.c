/*
 * deploy — see deploy.h. Pure functions: weights and validation.
 */
#include "plan/deploy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/durations.h"
#include "lib/util.h"

/*
 * Shares total between n slots in proportion to w (sum of w > 0), largest
 * remainder first (ties to the lower index), into out.
 */
static void share(const int *w, size_t n, int total, int *out)
{
	long sum = 0, given = 0;
	long rem[DEPLOY_MAX_VERSIONS + 1];

	for (size_t i = 0; i < n; i++)
		sum += w[i];
	for (size_t i = 0; i < n; i++) {
		out[i] = (int)((long)w[i] * total / sum);
		rem[i] = (long)w[i] * total % sum;
		given += out[i];
	}
	while (given < total) {
		size_t best = 0;
		for (size_t i = 1; i < n; i++)
			if (rem[i] > rem[best])
				best = i;
		out[best]++;
		rem[best] = -1;
		given++;
	}
}

void deploy_weights_add(const int *cur, size_t n, int t, int *out)
{
	int sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += cur[i];
	if (n == 0 || sum == 0) {
		for (size_t i = 0; i < n; i++)
			out[i] = 0;
		out[n] = 100;
		return;
	}
	share(cur, n, 100 - t, out);
	out[n] = t;
}

void deploy_weights_set(const int *cur, size_t n, size_t i, int t, int *out)
{
	int others[DEPLOY_MAX_VERSIONS], got[DEPLOY_MAX_VERSIONS], sum = 0;
	size_t k = 0, last = n;

	for (size_t j = 0; j < n; j++)
		if (j != i) {
			others[k++] = cur[j];
			sum += cur[j];
			last = j;
		}
	if (k == 0) { /* the only version: it has all of it */
		out[i] = 100;
		return;
	}
	if (sum == 0) {
		for (size_t j = 0; j < n; j++)
			out[j] = j == last ? 100 - t : 0;
		out[i] = t;
		return;
	}
	share(others, k, 100 - t, got);
	k = 0;
	for (size_t j = 0; j < n; j++)
		out[j] = j == i ? t : got[k++];
}

int deploy_server_weight(int pct, int healthy)
{
	int w;

	if (pct <= 0 || healthy <= 0)
		return 0;
	w = (DEPLOY_HAP_SCALE * pct / 100 + healthy / 2) / healthy;
	return w < 1 ? 1 : w;
}

/* An integer in [lo, hi] from a JSON integer or a string of digits. */
static int int_in(const json_t *v, const char *field, int lo, int hi, const char *what, int *out)
{
	int64_t x;

	if (json_is_integer(v))
		x = json_integer_value(v);
	else if (!json_is_string(v) || parse_int64(json_string_value(v), &x) < 0) {
		ferry_error_set("%s: must be %s, an integer from %d to %d", field, what, lo, hi);
		return FERRY_EINVALID;
	}
	if (x < lo || x > hi) {
		ferry_error_set("%s: %lld is out of range: %s is an integer from %d to %d", field, (long long)x,
				what, lo, hi);
		return FERRY_EINVALID;
	}
	*out = (int)x;
	return FERRY_OK;
}

int deploy_check_traffic(const json_t *v, const char *field, int *out)
{
	return int_in(v, field, 0, 100, "the percentage of traffic", out);
}

int deploy_check_replicas(const json_t *v, const char *field, int *out)
{
	return int_in(v, field, 1, DEPLOY_MAX_REPLICAS, "the number of replicas", out);
}

/* The length of an "hour" in seconds: 3600, or FERRY_TEST_AUTO_STOP_UNIT_S. */
static int64_t hour_s(void)
{
	const char *e = getenv("FERRY_TEST_AUTO_STOP_UNIT_S");
	int64_t unit;

	return e && parse_int64(e, &unit) == 0 && unit > 0 ? unit : 3600;
}

int deploy_warn_lead_s(void)
{
	return (int)(hour_s() * 600 / 3600);
}

int deploy_check_auto_stop(const json_t *v, const char *field, int *secs)
{
	const char *s = json_string_value(v);
	int64_t unit = hour_s(), h;
	char *num = NULL;
	int error = FERRY_EINVALID;

	if (s && strcmp(s, "never") == 0) {
		*secs = 0;
		return FERRY_OK;
	}
	if (json_is_integer(v)) {
		h = json_integer_value(v);
	} else if (s && strlen(s) >= 2 && s[strlen(s) - 1] == 'h') {
		num = xstrndup(s, strlen(s) - 1);
		if (parse_int64(num, &h) < 0)
			goto bad;
	} else {
		goto bad;
	}
	if (h < 1 || h > 24) {
		ferry_error_set("%s: %lld hours is out of range: auto-stop is 1h to 24h, or \"never\"", field,
				(long long)h);
		goto out;
	}
	*secs = (int)(h * unit);
	error = FERRY_OK;
	goto out;
bad:
	ferry_error_set("%s: must be a whole number of hours from 1h to 24h (1h, 2h, 4h, 6h, …) or \"never\"",
			field);
out:
	free(num);
	return error;
}

int deploy_check_name(const char *name, const char *field)
{
	size_t n = name ? strlen(name) : 0;

	if (n == 0 || n > 64 || strchr("_.-", name[0]) != NULL)
		goto bad;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
		      c == '.' || c == '-'))
			goto bad;
	}
	return FERRY_OK;
bad:
	ferry_error_set("%s: a deployment name is 1-64 letters, digits, _ . - starting with a letter or digit",
			field);
	return FERRY_EINVALID;
}

/* Whether labels hold every pair of want. */
static int labels_hold(const json_t *labels, const json_t *want)
{
	const char *k;
	const json_t *v;

	json_object_foreach((json_t *)want, k, v) {
		const char *have = json_string_value(json_object_get(labels, k));
		if (have == NULL || !json_is_string(v) || strcmp(have, json_string_value(v)) != 0)
			return 0;
	}
	return 1;
}

/* Whether h is a better place than b (NULL: none yet): fewer of the version, fewer in all, prefer, name. */
static int better(const struct deploy_host *h, const struct deploy_host *b, const char *prefer)
{
	int hp = prefer && strcmp(h->name, prefer) == 0, bp;

	if (b == NULL)
		return 1;
	if (h->same != b->same)
		return h->same < b->same;
	if (h->replicas != b->replicas)
		return h->replicas < b->replicas;
	bp = prefer && strcmp(b->name, prefer) == 0;
	if (hp != bp)
		return hp;
	return strcmp(h->name, b->name) < 0;
}

/* Whether need fits on h beside what its replicas ask for. */
static int room_for(const struct deploy_host *h, const struct deploy_req *need)
{
	if (need->gpus > 0 && h->gpus - h->held_gpus < need->gpus)
		return 0;
	if (need->cpus > 0 && h->cpus > 0 && h->cpus - h->held_cpus + 1e-6 < need->cpus)
		return 0;
	if (need->memory_mb > 0 && h->memory_mb > 0 && h->memory_mb - h->held_memory_mb < need->memory_mb)
		return 0;
	return 1;
}

/* "2 CPUs, 1024 MiB, 1 GPU": what need asks for, into buf. */
static void say_need(char *buf, size_t sz, const struct deploy_req *need)
{
	size_t o = 0;

	buf[0] = '\0';
	if (need->cpus > 0)
		o += (size_t)snprintf(buf + o, sz - o, "%g CPU%s", need->cpus, need->cpus == 1 ? "" : "s");
	if (need->memory_mb > 0 && o < sz)
		o += (size_t)snprintf(buf + o, sz - o, "%s%lld MiB", o ? ", " : "", (long long)need->memory_mb);
	if (need->gpus > 0 && o < sz)
		snprintf(buf + o, sz - o, "%s%d GPU%s", o ? ", " : "", need->gpus, need->gpus == 1 ? "" : "s");
}

int deploy_place(const struct deploy_host *hosts, size_t n, const json_t *want, const struct deploy_req *need,
		 const char *prefer)
{
	static const struct deploy_req none = {0};
	size_t up = 0, labelled = 0;
	long best = -1;

	if (need == NULL)
		need = &none;
	for (size_t i = 0; i < n; i++) {
		const struct deploy_host *h = &hosts[i], *b = best >= 0 ? &hosts[best] : NULL;
		if (!h->up)
			continue;
		up++;
		if (want && !labels_hold(h->labels, want))
			continue;
		labelled++;
		if (!room_for(h, need))
			continue;
		if (better(h, b, prefer))
			best = (long)i;
	}
	if (best >= 0)
		return (int)best;
	if (up == 0) {
		ferry_error_set("no host is up to run the replica (%zu known, none heartbeating)", n);
	} else if (labelled == 0) {
		char *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
		ferry_error_set("no host that is up has the labels placement.hosts asks for (%s; %zu up)", w ? w : "?",
				up);
		free(w);
	} else {
		/* each host that could have taken it: what it has free, the first few */
		char asks[96], free_[512];
		size_t o = 0, shown = 0;
		say_need(asks, sizeof(asks), need);
		free_[0] = '\0';
		for (size_t i = 0; i < n && shown < 4 && o < sizeof(free_); i++) {
			const struct deploy_host *h = &hosts[i];
			if (!h->up || (want && !labels_hold(h->labels, want)))
				continue;
			o += (size_t)snprintf(free_ + o, sizeof(free_) - o, "%s%s:", shown ? "; " : "", h->name);
			if (need->cpus > 0 && h->cpus > 0 && o < sizeof(free_))
				o += (size_t)snprintf(free_ + o, sizeof(free_) - o, " %g of %g CPUs", h->cpus - h->held_cpus,
						      h->cpus);
			if (need->memory_mb > 0 && h->memory_mb > 0 && o < sizeof(free_))
				o += (size_t)snprintf(free_ + o, sizeof(free_) - o, " %lld of %lld MiB",
						      (long long)(h->memory_mb - h->held_memory_mb), (long long)h->memory_mb);
			if (need->gpus > 0 && o < sizeof(free_))
				o += (size_t)snprintf(free_ + o, sizeof(free_) - o, " %d of %d GPUs", h->gpus - h->held_gpus,
						      h->gpus);
			shown++;
		}
		ferry_error_set("no host %sthat is up has room for a replica asking for %s beside the replicas it "
				"runs (free: %s%s)",
				want ? "with the labels " : "", asks, free_, labelled > shown ? "; …" : "");
	}
	return FERRY_ENOTFOUND;
}

int deploy_check_retire_after(const json_t *v, const char *field, int *secs)
{
	const char *s = json_string_value(v);
	int64_t ms;

	if (s && strcmp(s, "never") == 0) {
		*secs = 0;
		return FERRY_OK;
	}
	if (s == NULL || duration_parse(s, &ms) < 0 || ms < 1000 || ms > (int64_t)30 * 24 * 3600 * 1000) {
		ferry_error_set("%s: a duration from 1s to 30d (30s, 10m, 1h) or \"never\": how long a version "
				"stays at 0%% before it retires", field);
		return FERRY_EINVALID;
	}
	*secs = (int)(ms / 1000);
	return FERRY_OK;
}

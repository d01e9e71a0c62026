/*
 * durations — the one way Ferry reads a length of time written by a
 * person: an integer followed by ms, s, m, h or d, possibly several
 * ("1h30m"). Used by the workflow config (timeouts, retry backoff, canary
 * intervals), the hang monitor's settings and the daemon's environment.
 */
#ifndef FERRY_DURATIONS_H
#define FERRY_DURATIONS_H

#include <stdint.h>

/*
 * Parses duration s. Returns 0 and *out_ms, or FERRY_EINVALID with the
 * reason in ferry_error_last() ("duration \"5\": missing unit …").
 */
int duration_parse(const char *s, int64_t *out_ms);

#endif

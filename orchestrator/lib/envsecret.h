/*
 * envsecret — the daemon's secrets out of its environment. ferryd reads a
 * few secrets from its environment (the API token, the git webhook secret,
 * the database URL, the Slurm token, PGPASSWORD). unsetenv() only drops the
 * pointer: the bytes stay in the initial environment block, which
 * /proc/PID/environ shows, and a forked supervisor carries a copy. So at
 * start envsecret_scrub() copies each value into this module, overwrites
 * the original bytes, and removes the variable; readers ask envsecret_get().
 * PGPASSWORD, which libpq reads itself, is set back from a heap copy (not in
 * the block /proc shows) and never given to jobs (exec's environment).
 *
 * Thread safety: envsecret_scrub() runs once in main() before any thread;
 * envsecret_get() is safe from any thread afterwards (the table is never
 * written again).
 */
#ifndef FERRY_LIB_ENVSECRET_H
#define FERRY_LIB_ENVSECRET_H

/* The names taken out of the environment, NULL-terminated. */
extern const char *const envsecret_names[];

/* Moves every envsecret_names[] variable into the table; returns how many were set. */
int envsecret_scrub(void);

/* The value of NAME: from the table once scrubbed, else getenv (CLI, tests). NULL if unset. */
const char *envsecret_get(const char *name);

/*
 * The token a daemon shows another daemon of its fleet (a blob, a step's
 * output file): FERRY_API_TOKEN (a fleet shares one), else home's
 * api-token file; the caller's, NULL when neither is there.
 */
char *envsecret_fleet_token(const char *home);

#endif

/*
 * envsecret — see envsecret.h: the daemon's secrets copied out of its
 * environment and the originals overwritten, so that neither
 * /proc/PID/environ nor a forked supervisor's copy of the block holds them.
 */
#include "lib/envsecret.h"

#include <stdlib.h>
#include <string.h>

#include "lib/util.h"

extern char **environ;

const char *const envsecret_names[] = {
	"FERRY_API_TOKEN", "FERRY_GIT_WEBHOOK_SECRET", "FERRY_DATABASE_URL", "FERRY_SLURM_TOKEN",
	"PGPASSWORD", NULL,
};

#define NSECRETS (sizeof(envsecret_names) / sizeof(envsecret_names[0]) - 1)

static char *values[NSECRETS];
static int scrubbed;

/* Overwrites every "NAME=..." entry's bytes (a name may appear twice in a hand-built environ). */
static void wipe(const char *name)
{
	size_t len = strlen(name);

	for (char **e = environ; e && *e; e++)
		if (strncmp(*e, name, len) == 0 && (*e)[len] == '=') {
			volatile char *p = *e + len + 1;
			while (*p)
				*p++ = '\0';
		}
}

int envsecret_scrub(void)
{
	int n = 0;

	for (size_t i = 0; i < NSECRETS; i++) {
		const char *v = getenv(envsecret_names[i]);
		if (v == NULL)
			continue;
		values[i] = xstrdup(v);
		wipe(envsecret_names[i]);
		while (getenv(envsecret_names[i]) != NULL)
			unsetenv(envsecret_names[i]);
		n++;
	}
	/* libpq reads PGPASSWORD itself: a heap copy, outside the block /proc shows */
	for (size_t i = 0; i < NSECRETS; i++)
		if (values[i] && strcmp(envsecret_names[i], "PGPASSWORD") == 0)
			setenv("PGPASSWORD", values[i], 1);
	scrubbed = 1;
	return n;
}

const char *envsecret_get(const char *name)
{
	if (!scrubbed)
		return getenv(name);
	for (size_t i = 0; i < NSECRETS; i++)
		if (strcmp(envsecret_names[i], name) == 0)
			return values[i];
	return getenv(name);
}

char *envsecret_fleet_token(const char *home)
{
	const char *env = envsecret_get("FERRY_API_TOKEN");
	char *path, *buf = NULL;

	if (env && *env)
		return xstrdup(env);
	path = xasprintf("%s/api-token", home);
	if (file_read(&buf, NULL, path) == FERRY_OK)
		buf[strcspn(buf, " \t\r\n")] = '\0';
	free(path);
	return buf;
}

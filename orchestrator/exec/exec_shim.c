/*
 * exec_shim — async-signal-safe helpers of the executors' supervisors (see
 * exec_shim.h). Nothing here allocates, locks or uses stdio: these run in a
 * child of a multi-threaded process between fork() and exec or _exit.
 */
#include "exec/exec_shim.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "lib/util.h"

size_t exec_shim_fmt(char *buf, long long v)
{
	char tmp[24];
	size_t n = 0, len = 0;
	unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;

	do {
		tmp[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		buf[len++] = '-';
	while (n)
		buf[len++] = tmp[--n];
	return len;
}

size_t exec_shim_self_start(char *out)
{
	char buf[1024];
	ssize_t n;
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC), field = 2;
	char *p = NULL;
	size_t len = 0;

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* field 2 is "(comm)" and may hold spaces: start after the last ')' */
	for (ssize_t i = n - 1; i >= 0; i--)
		if (buf[i] == ')') {
			p = buf + i;
			break;
		}
	if (p == NULL)
		return 0;
	for (; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	while (*p >= '0' && *p <= '9' && len < 23)
		out[len++] = *p++;
	return len;
}

void exec_shim_write_pid(int fd)
{
	char buf[64];
	size_t n;

	memcpy(buf, "pid ", 4);
	n = 4 + exec_shim_fmt(buf + 4, (long long)getpid());
	buf[n++] = ' ';
	n += exec_shim_self_start(buf + n);
	buf[n++] = '\n';
	(void)fd_write_all(fd, buf, n);
}

void exec_shim_put_line(int fd, const char *word, long long n, int with_n)
{
	char buf[64];
	size_t len = strlen(word);

	if (len > sizeof(buf) - 24)
		len = sizeof(buf) - 24;
	memcpy(buf, word, len);
	if (with_n) {
		buf[len++] = ' ';
		len += exec_shim_fmt(buf + len, n);
	}
	buf[len++] = '\n';
	(void)fd_write_all(fd, buf, len);
}

/*
 * haproxy — the traffic split of deployments through one HAProxy (2.6)
 * per FERRY_HOME. See haproxy.h for the interface.
 *
 * What is kept where. Everything lives in DIR ($FERRY_HOME/haproxy):
 * haproxy.cfg (generated from the template, deploy/haproxy.cfg.tmpl),
 * server-state (HAProxy's "show servers state" format, version 1),
 * admin.sock (the admin socket), haproxy.pid (the master's pid) and
 * haproxy.log (what haproxy printed while starting). The desired state
 * (the deployments' weights) belongs to the caller (PostgreSQL); these
 * files are derived from it on every hap_apply and written atomically
 * (a temporary file, then rename), config before any run-time command, so
 * at every moment the files say what haproxy should serve.
 *
 * How a change is made. hap_apply reads what haproxy runs: "show info"
 * (its node name is a digest of the layout — frontends, ports, server
 * names — and of the template, so it says which layout the worker loaded),
 * "show servers state" (addresses, weights, admin states) and "show stat"
 * (the listeners' addresses). When the layout differs it checks the new
 * config (haproxy -c) and reloads; otherwise it sends one run-time command
 * per difference ("set server B/S weight|state|addr"), capacity first —
 * weights going up and servers becoming ready before weights going down
 * and servers draining — so a backend never has every server at weight 0
 * in between (HAProxy would answer 503).
 *
 * Why reloads are safe. haproxy runs master-worker; a reload (SIGUSR2 to
 * the master) starts a new worker that takes the listening sockets over
 * from the old one (expose-fd listeners; the master passes -x), so no
 * connection is refused, and the old worker finishes its requests
 * (bounded by hard-stop-after). The new worker loads weights and drain
 * states from server-state; the config carries the same weights (HAProxy
 * prefers the config's weight when the two files disagree about it), so
 * a reload never brings back an older weight or un-drains a server.
 * Requests that find their replica gone are retried on another server
 * (retry-on conn-failure, option redispatch).
 *
 * Reloads by someone else (an operator's SIGUSR2) may come at any time.
 * One that reads the files before a change writes them, while the
 * change's commands reach the old worker, would serve the older weights
 * until the next reconcile round. So a change first waits until the
 * master is not reloading and its newest worker alone answers
 * (hap_settle_locked), and after its commands looks again: when a
 * reload started meanwhile, it waits for the new worker and sends them
 * again. A reload that starts after that look reads the files as the
 * change wrote them.
 *
 * After crashes. haproxy is started daemonised (-D: its own session), so
 * a daemon killed with kill -9 leaves the front addresses serving; the
 * next daemon finds it through haproxy.pid (the pid must be a live
 * haproxy whose command line names this directory's config) and its
 * admin socket. A dead haproxy is started again by the next hap_apply
 * from freshly written files. A daemon that died between writing the
 * files and the run-time commands leaves the files ahead of haproxy: the
 * next hap_apply sees the difference and repairs it.
 *
 * Threads. Calls are serialised by a mutex in struct hap; every wait is
 * bounded (the admin socket: 2 s per command; a start or reload: 10 s).
 * Children are forked with only async-signal-safe calls before exec.
 */
#include "deploy/haproxy.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include "deploy/haproxy_priv.h"

/* HAProxy's admin-state flags (management guide, "show servers state"). */
enum {
	ADMF_FMAINT = 0x01, ADMF_IMAINT = 0x02, ADMF_CMAINT = 0x04,
	ADMF_FDRAIN = 0x08, ADMF_IDRAIN = 0x10, ADMF_RMAINT = 0x20,
};



FERRY_PRINTF(2, 3) static void buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		abort();
	va_end(ap);
	buf_str(b, s);
	free(s);
}

/* ---- the template ---- */

/*
 * Appends text[0..len) to b with each {{key}} replaced by its value in kv
 * (NULL-terminated pairs); an unknown {{key}} stays as it is.
 */
static void subst(struct buf *b, const char *text, size_t len, const char *const *kv)
{
	const char *p = text, *end = text + len;

	while (p < end) {
		const char *open = memmem(p, (size_t)(end - p), "{{", 2), *close;
		size_t klen;
		int done = 0;

		if (open == NULL) {
			buf_add(b, p, (size_t)(end - p));
			break;
		}
		buf_add(b, p, (size_t)(open - p));
		close = memmem(open + 2, (size_t)(end - open - 2), "}}", 2);
		if (close == NULL) {
			buf_add(b, open, (size_t)(end - open));
			break;
		}
		klen = (size_t)(close - open - 2);
		for (size_t i = 0; kv[i]; i += 2)
			if (strlen(kv[i]) == klen && memcmp(kv[i], open + 2, klen) == 0) {
				buf_str(b, kv[i + 1]);
				done = 1;
				break;
			}
		if (!done)
			buf_add(b, open, (size_t)(close + 2 - open));
		p = close + 2;
	}
}

/* Finds the line "#@marker" at or after from; start of the line in *at, the next line's in *next. */
static int find_marker(const char *text, const char *from, const char *marker, const char **at,
		       const char **next)
{
	size_t mlen = strlen(marker);

	for (const char *p = from; (p = strstr(p, marker)) != NULL; p += mlen) {
		if ((p == text || p[-1] == '\n') && (p[mlen] == '\n' || p[mlen] == '\0')) {
			*at = p;
			*next = p[mlen] ? p + mlen + 1 : p + mlen;
			return 0;
		}
	}
	return -1;
}

static int template_cut(struct hap *h, const char *source)
{
	const char *a, *a_next, *s, *s_next, *se, *se_next, *e, *e_next;
	const char *t = h->tmpl;

	if (find_marker(t, t, "#@frontend", &a, &a_next) < 0 ||
	    find_marker(t, a_next, "#@server", &s, &s_next) < 0 ||
	    find_marker(t, s_next, "#@end-server", &se, &se_next) < 0 ||
	    find_marker(t, se_next, "#@end-frontend", &e, &e_next) < 0) {
		ferry_error_set("%s: the HAProxy template lacks its markers",
				source);
		return FERRY_EINVALID;
	}
	h->head = t, h->head_len = (size_t)(a - t);
	h->fe_a = a_next, h->fe_a_len = (size_t)(s - a_next);
	h->srv = s_next, h->srv_len = (size_t)(se - s_next);
	h->fe_b = se_next, h->fe_b_len = (size_t)(e - se_next);
	h->tail = e_next, h->tail_len = strlen(e_next);
	h->has_ab = strstr(t, "{{ab_route}}") != NULL && strstr(t, "{{ab_backend}}") != NULL;
	return 0;
}

/* ---- validation ---- */

static int name_ok(const char *s)
{
	size_t n = 0;

	if (s == NULL)
		return 0;
	for (; s[n]; n++)
		if (!isalnum((unsigned char)s[n]) && s[n] != '_' && s[n] != '.' && s[n] != '-')
			return 0;
	return n >= 1 && n <= NAME_MAX_LEN;
}

/* 1-64 letters, digits and the characters of extra: what may stand in the config unquoted. */
static int token_ok(const char *s, const char *extra)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (!isalnum((unsigned char)s[n]) && strchr(extra, s[n]) == NULL)
			return 0;
	return n >= 1 && n <= 64;
}

static int validate(const struct hap_frontend *fe, size_t n)
{
	struct in_addr a;

	for (size_t i = 0; i < n; i++) {
		if (!name_ok(fe[i].name)) {
			ferry_error_set("frontend %zu: name must be 1-64 of letters, digits, _ . -", i);
			return FERRY_EINVALID;
		}
		if (fe[i].port < 1 || fe[i].port > 65535) {
			ferry_error_set("frontend %s: port %d is out of range 1-65535", fe[i].name, fe[i].port);
			return FERRY_EINVALID;
		}
		for (size_t j = 0; j < i; j++)
			if (strcmp(fe[i].name, fe[j].name) == 0 || fe[i].port == fe[j].port) {
				ferry_error_set("frontend %s: name or port %d used twice", fe[i].name, fe[i].port);
				return FERRY_EINVALID;
			}
		if (fe[i].match_header != NULL &&
		    (!token_ok(fe[i].match_header, "-") || (fe[i].match_value && !token_ok(fe[i].match_value, "._~-")))) {
			ferry_error_set("frontend %s: a match header must be 1-64 of letters, digits and -, its value "
					"1-64 of letters, digits and . _ ~ -", fe[i].name);
			return FERRY_EINVALID;
		}
		for (size_t k = 0; k < fe[i].nab; k++)
			if (!name_ok(fe[i].ab_servers[k].name) || fe[i].ab_servers[k].addr == NULL ||
			    inet_pton(AF_INET, fe[i].ab_servers[k].addr, &a) != 1 || fe[i].ab_servers[k].port < 1 ||
			    fe[i].ab_servers[k].port > 65535) {
				ferry_error_set("frontend %s: A/B server %zu: a bad name, address or port", fe[i].name, k);
				return FERRY_EINVALID;
			}
		if (fe[i].nservers > 0 && fe[i].servers == NULL) {
			ferry_error_set("frontend %s: servers is NULL", fe[i].name);
			return FERRY_EINVALID;
		}
		for (size_t k = 0; k < fe[i].nservers; k++) {
			const struct hap_server *s = &fe[i].servers[k];
			if (!name_ok(s->name)) {
				ferry_error_set("frontend %s: server %zu: name must be 1-64 of letters, digits, _ . -",
						fe[i].name, k);
				return FERRY_EINVALID;
			}
			if (s->addr == NULL || inet_pton(AF_INET, s->addr, &a) != 1) {
				ferry_error_set("frontend %s: server %s: addr must be an IPv4 address", fe[i].name,
						s->name);
				return FERRY_EINVALID;
			}
			if (s->port < 1 || s->port > 65535 || s->weight < 0 || s->weight > HAP_WEIGHT_MAX) {
				ferry_error_set("frontend %s: server %s: port must be 1-65535 and weight 0-%d",
						fe[i].name, s->name, HAP_WEIGHT_MAX);
				return FERRY_EINVALID;
			}
			for (size_t j = 0; j < k; j++)
				if (strcmp(s->name, fe[i].servers[j].name) == 0) {
					ferry_error_set("frontend %s: server %s named twice", fe[i].name, s->name);
					return FERRY_EINVALID;
				}
		}
	}
	return 0;
}

/* ---- rendering the files ---- */

/* The node name: a digest of the layout (what a reload is needed for) and of the template. */
static char *layout_node(const struct hap *h, const struct hap_frontend *fe, size_t n)
{
	struct buf b = {0};
	char hex[65];

	buf_str(&b, h->tmpl);
	buf_printf(&b, "\nfronts on %s", h->front);
	for (size_t i = 0; i < n; i++) {
		buf_printf(&b, "\nfrontend %s %d\n", fe[i].name, fe[i].port);
		for (size_t k = 0; k < fe[i].nservers; k++)
			buf_printf(&b, " %s\n", fe[i].servers[k].name);
		if (fe[i].match_header) {
			buf_printf(&b, " match %s %s\n", fe[i].match_header, fe[i].match_value ? fe[i].match_value : "");
			for (size_t k = 0; k < fe[i].nab; k++)
				buf_printf(&b, "  %s %s:%d\n", fe[i].ab_servers[k].name, fe[i].ab_servers[k].addr,
					   fe[i].ab_servers[k].port);
		}
	}
	sha256_hex(hex, b.p ? b.p : "", b.len);
	free(b.p);
	hex[16] = '\0';
	return xasprintf("ferry-%s", hex);
}

/*
 * An A/B test's two pieces of config: the frontend's rule (ab_route) and
 * the backend of the tested version's servers (ab_backend), each "" when
 * fe has none.
 */
static void ab_config(const struct hap_frontend *fe, char **route, char **backend)
{
	struct buf b = {0};

	*route = *backend = NULL;
	if (fe->match_header == NULL) {
		*route = xstrdup("");
		*backend = xstrdup("");
		return;
	}
	if (fe->match_value)
		*route = xasprintf("use_backend %s:ab if { req.hdr(%s) -m str %s }", fe->name, fe->match_header,
				   fe->match_value);
	else
		*route = xasprintf("use_backend %s:ab if { req.hdr(%s) -m found }", fe->name, fe->match_header);
	buf_printf(&b, "backend %s:ab\n", fe->name);
	for (size_t k = 0; k < fe->nab; k++)
		buf_printf(&b, "    server %s %s:%d weight 1\n", fe->ab_servers[k].name, fe->ab_servers[k].addr,
			   fe->ab_servers[k].port);
	*backend = b.p ? b.p : xstrdup("");
}

static char *render_config(const struct hap *h, const struct hap_frontend *fe, size_t n, const char *node)
{
	struct buf b = {0};
	const char *kv_head[] = {"dir", h->dir, "node", node, NULL};

	subst(&b, h->head, h->head_len, kv_head);
	for (size_t i = 0; i < n; i++) {
		char port[16], *route, *backend;
		snprintf(port, sizeof(port), "%d", fe[i].port);
		ab_config(&fe[i], &route, &backend);
		const char *kv_fe[] = {"dir", h->dir, "node", node, "name", fe[i].name, "port", port,
				       "front_addr", h->front, "ab_route", route, "ab_backend", backend, NULL};
		subst(&b, h->fe_a, h->fe_a_len, kv_fe);
		for (size_t k = 0; k < fe[i].nservers; k++) {
			const struct hap_server *s = &fe[i].servers[k];
			char sport[16], weight[16];
			snprintf(sport, sizeof(sport), "%d", s->port);
			snprintf(weight, sizeof(weight), "%d", s->weight);
			const char *kv_srv[] = {"dir", h->dir, "node", node, "name", fe[i].name, "port", port,
						"server", s->name, "addr", s->addr, "server_port", sport,
						"weight", weight, NULL};
			subst(&b, h->srv, h->srv_len, kv_srv);
		}
		subst(&b, h->fe_b, h->fe_b_len, kv_fe);
		free(route), free(backend);
	}
	subst(&b, h->tail, h->tail_len, kv_head);
	return b.p ? b.p : xstrdup("");
}

/*
 * The server-state file of the desired state, in the format "show servers
 * state" prints (version 1). HAProxy matches its lines to servers by
 * "backend server" name; it takes a server's address and port from here,
 * its admin state (drain), and its weight when the config's weight equals
 * srv_iweight — both are the desired weight.
 */
static char *render_state(const struct hap_frontend *fe, size_t n)
{
	struct buf b = {0};

	buf_str(&b, "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state "
		    "srv_uweight srv_iweight srv_time_since_last_change srv_check_status "
		    "srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id "
		    "srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port "
		    "srv_check_addr srv_agent_addr srv_agent_port\n");
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < fe[i].nservers; k++) {
			const struct hap_server *s = &fe[i].servers[k];
			buf_printf(&b, "%zu %s %zu %s %s 2 %d %d %d 0 1 0 0 0 0 0 0 - %d - 0 0 - - 0\n",
				   i + 1, fe[i].name, k + 1, s->name, s->addr, s->drain ? ADMF_FDRAIN : 0,
				   s->weight, s->weight, s->port);
		}
	return b.p;
}

/* Whether path holds exactly text. */
static int file_equals(const char *path, const char *text)
{
	char *cur = NULL;
	size_t len;
	int same;

	if (file_read(&cur, &len, path) < 0) {
		ferry_error_clear();
		return 0;
	}
	same = len == strlen(text) && memcmp(cur, text, len) == 0;
	free(cur);
	return same;
}

/* ---- what haproxy has ---- */

struct live_srv {
	char *fe, *name, *addr;
	int port, weight, admin;
};

struct live {
	struct live_srv *s;
	size_t n;
	json_t *fronts; /* frontend name -> port (0 when unknown) */
	char *node;
	long pid;
};

static void live_dispose(struct live *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->s[i].fe), free(l->s[i].name), free(l->s[i].addr);
	free(l->s);
	json_decref(l->fronts);
	free(l->node);
	memset(l, 0, sizeof(*l));
}

static int int_field(const char *s)
{
	int64_t v;
	return s && parse_int64(s, &v) == 0 && v >= 0 && v <= 1 << 30 ? (int)v : 0;
}

/* Parses "show servers state" (version 1) into l->s. */
static int parse_servers_state(char *text, struct live *l)
{
	size_t cap = 0;

	for (char *line = text, *next; line && *line; line = next) {
		char *f[32];
		size_t nf = 0;
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (*line == '#' || *line == '\0' || strcmp(line, "1") == 0)
			continue;
		for (char *p = line; *p && nf < 32;) {
			while (*p == ' ')
				p++;
			if (!*p)
				break;
			f[nf++] = p;
			p += strcspn(p, " ");
			if (*p)
				*p++ = '\0';
		}
		if (nf < 19) {
			ferry_error_set("haproxy: unexpected line in show servers state: %s", line);
			return FERRY_ERROR;
		}
		/* an A/B backend (NAME:ab): its servers are the layout's (weight 1, changed by a reload) */
		if (strlen(f[1]) > 3 && strcmp(f[1] + strlen(f[1]) - 3, ":ab") == 0)
			continue;
		if (l->n == cap) {
			cap = cap ? cap * 2 : 16;
			l->s = xrealloc(l->s, cap * sizeof(*l->s));
		}
		l->s[l->n++] = (struct live_srv){xstrdup(f[1]), xstrdup(f[3]), xstrdup(f[4]), int_field(f[18]),
						 int_field(f[7]), int_field(f[6])};
	}
	return 0;
}

/*
 * Splits one CSV line of "show stat" in place into at most max fields;
 * HAProxy quotes a field that holds a comma or a quote (quotes doubled).
 */
static size_t csv_split(char *line, char **f, size_t max)
{
	size_t n = 0;
	char *p = line;

	while (n < max) {
		if (*p == '"') {
			char *w = ++p;
			f[n++] = w;
			while (*p && !(*p == '"' && p[1] != '"')) {
				if (*p == '"')
					p++;
				*w++ = *p++;
			}
			if (*p == '"')
				p++;
			*w = '\0';
			if (*p == ',')
				*p++ = '\0';
			else
				break;
		} else {
			f[n++] = p;
			p += strcspn(p, ",");
			if (*p != ',')
				break;
			*p++ = '\0';
		}
	}
	return n;
}

/* "show stat" as an array of objects, each the row's columns by name (strings). */
static int read_stat(const struct hap *h, json_t **out)
{
	char *text = NULL, *hdr[256], *f[256];
	size_t nh = 0;
	json_t *rows = NULL;
	int rc;

	*out = NULL;
	if ((rc = hap_cli(h, "show stat", &text)) < 0)
		return rc;
	rows = json_array();
	for (char *line = text, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (strncmp(line, "# ", 2) == 0) {
			nh = csv_split(line + 2, hdr, 256);
			continue;
		}
		if (*line == '\0' || nh == 0)
			continue;
		size_t nf = csv_split(line, f, 256);
		json_t *row = json_object();
		for (size_t i = 0; i < nf && i < nh; i++)
			if (*hdr[i] && *f[i])
				json_object_set_new(row, hdr[i], json_string(f[i]));
		json_array_append_new(rows, row);
	}
	free(text);
	if (nh == 0) {
		json_decref(rows);
		ferry_error_set("haproxy: show stat printed no header");
		return FERRY_ERROR;
	}
	*out = rows;
	return 0;
}

static const char *row_str(json_t *row, const char *key)
{
	const char *s = json_string_value(json_object_get(row, key));
	return s ? s : "";
}

/* Reads the worker's pid and node, its servers and its frontends (with their ports). */
static int live_read(const struct hap *h, struct live *l)
{
	char *text = NULL;
	json_t *rows = NULL, *row;
	size_t i;
	int rc;

	memset(l, 0, sizeof(*l));
	l->fronts = json_object();
	if ((rc = hap_read_info(h, &l->pid, &l->node)) < 0)
		goto out;
	if ((rc = hap_cli(h, "show servers state", &text)) < 0 || (rc = parse_servers_state(text, l)) < 0)
		goto out;
	if ((rc = read_stat(h, &rows)) < 0)
		goto out;
	json_array_foreach(rows, i, row) {
		const char *px = row_str(row, "pxname"), *type = row_str(row, "type");
		if (strcmp(type, "0") == 0 && !json_object_get(l->fronts, px))
			json_object_set_new(l->fronts, px, json_integer(0));
		if (strcmp(type, "3") == 0) { /* a listener: its addr is the front address */
			const char *colon = strrchr(row_str(row, "addr"), ':');
			if (colon)
				json_object_set_new(l->fronts, px, json_integer(int_field(colon + 1)));
		}
	}
out:
	free(text);
	json_decref(rows);
	if (rc < 0)
		live_dispose(l);
	return rc;
}

static const struct live_srv *live_find(const struct live *l, const char *fe, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->s[i].fe, fe) == 0 && strcmp(l->s[i].name, name) == 0)
			return &l->s[i];
	return NULL;
}

static const char *admin_state(int admin)
{
	if (admin & (ADMF_FMAINT | ADMF_IMAINT | ADMF_CMAINT | ADMF_RMAINT))
		return "maint";
	if (admin & (ADMF_FDRAIN | ADMF_IDRAIN))
		return "drain";
	return "ready";
}

/* ---- hap_apply ---- */

/*
 * Checks that the front ports haproxy does not hold yet are free: a port
 * taken by another program would make the start fail, or the reload's new
 * worker fail while the old one keeps serving the old layout. fronts is
 * what haproxy listens on now (frontend -> port; NULL when none runs).
 */
static int ports_free(const struct hap *h, const struct hap_frontend *fe, size_t n, json_t *fronts)
{
	for (size_t i = 0; i < n; i++) {
		struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
					 .sin_port = htons((uint16_t)fe[i].port)};
		const char *name;
		json_t *port;
		int held = 0, fd, one = 1, err = 0;

		json_object_foreach(fronts, name, port)
			if (json_integer_value(port) == fe[i].port)
				held = 1;
		if (held)
			continue;
		inet_pton(AF_INET, h->front, &sa.sin_addr);
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			err = errno;
		close(fd);
		if (err == EADDRINUSE) {
			ferry_error_set("frontend %s: port %d on %s is in use by another program", fe[i].name,
					fe[i].port, h->front);
			return FERRY_ECONFLICT;
		}
	}
	return 0;
}

static void change(json_t *changes, const char *fe, const char *srv, const char *what, json_t *from,
		   json_t *to)
{
	json_t *c;

	if (changes == NULL) {
		json_decref(from), json_decref(to);
		return;
	}
	c = json_object();
	if (fe)
		json_object_set_new(c, "frontend", json_string(fe));
	if (srv)
		json_object_set_new(c, "server", json_string(srv));
	json_object_set_new(c, "what", json_string(what));
	if (from)
		json_object_set_new(c, "from", from);
	if (to)
		json_object_set_new(c, "to", to);
	json_array_append_new(changes, c);
}

static json_t *addr_json(const char *addr, int port)
{
	return json_sprintf("%s:%d", addr, port);
}

/* Records how the layout differs (frontends, ports, server sets); returns how many differences. */
static int layout_diff(const struct hap_frontend *fe, size_t n, const struct live *l, json_t *changes)
{
	const char *name;
	json_t *port;
	int diffs = 0;

	for (size_t i = 0; i < n; i++) {
		json_t *lp = json_object_get(l->fronts, fe[i].name);
		if (lp == NULL) {
			change(changes, fe[i].name, NULL, "frontend-added", NULL, json_integer(fe[i].port));
			diffs++;
		} else if (json_integer_value(lp) != 0 && json_integer_value(lp) != fe[i].port) {
			change(changes, fe[i].name, NULL, "port", json_copy(lp), json_integer(fe[i].port));
			diffs++;
		}
		for (size_t k = 0; k < fe[i].nservers; k++) {
			const struct hap_server *s = &fe[i].servers[k];
			if (live_find(l, fe[i].name, s->name) == NULL) {
				change(changes, fe[i].name, s->name, "server-added", NULL, addr_json(s->addr, s->port));
				diffs++;
			}
		}
	}
	json_object_foreach(l->fronts, name, port) {
		size_t i;
		for (i = 0; i < n && strcmp(fe[i].name, name) != 0; i++)
			;
		if (i == n) {
			change(changes, name, NULL, "frontend-removed", json_copy(port), NULL);
			diffs++;
		}
	}
	for (size_t j = 0; j < l->n; j++) {
		size_t i, k = 0;
		for (i = 0; i < n && strcmp(fe[i].name, l->s[j].fe) != 0; i++)
			;
		if (i < n)
			for (k = 0; k < fe[i].nservers && strcmp(fe[i].servers[k].name, l->s[j].name) != 0; k++)
				;
		if (i == n || k == fe[i].nservers) {
			change(changes, l->s[j].fe, l->s[j].name, "server-removed",
			       addr_json(l->s[j].addr, l->s[j].port), NULL);
			diffs++;
		}
	}
	return diffs;
}

/*
 * Sends the run-time commands that make the servers haproxy has match fe,
 * in two passes: first what adds capacity (addresses, weights going up,
 * servers becoming ready), then what takes it away (weights going down,
 * servers draining), so that moving all the weight from one server to
 * another never leaves the backend with none.
 */
static int runtime_repair(const struct hap *h, const struct hap_frontend *fe, size_t n, const struct live *l,
			  json_t *changes)
{
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < n; i++)
			for (size_t k = 0; k < fe[i].nservers; k++) {
				const struct hap_server *s = &fe[i].servers[k];
				const struct live_srv *ls = live_find(l, fe[i].name, s->name);
				const char *want = s->drain ? "drain" : "ready", *has;
				char *cmd;
				int rc;

				if (ls == NULL)
					continue;
				has = admin_state(ls->admin);
				if (pass == 0 && (strcmp(ls->addr, s->addr) != 0 || ls->port != s->port)) {
					cmd = xasprintf("set server %s/%s addr %s port %d", fe[i].name, s->name,
							s->addr, s->port);
					rc = hap_cli_set(h, cmd);
					free(cmd);
					if (rc < 0)
						return rc;
					change(changes, fe[i].name, s->name, "addr", addr_json(ls->addr, ls->port),
					       addr_json(s->addr, s->port));
				}
				if (ls->weight != s->weight && (pass == 0) == (s->weight > ls->weight)) {
					cmd = xasprintf("set server %s/%s weight %d", fe[i].name, s->name, s->weight);
					rc = hap_cli_set(h, cmd);
					free(cmd);
					if (rc < 0)
						return rc;
					change(changes, fe[i].name, s->name, "weight", json_integer(ls->weight),
					       json_integer(s->weight));
				}
				if (strcmp(has, want) != 0 && (pass == 0) == !s->drain) {
					cmd = xasprintf("set server %s/%s state %s", fe[i].name, s->name, want);
					rc = hap_cli_set(h, cmd);
					free(cmd);
					if (rc < 0)
						return rc;
					change(changes, fe[i].name, s->name, "state", json_string(has), json_string(want));
				}
			}
	return 0;
}

int hap_apply(struct hap *h, const struct hap_frontend *fe, size_t n, json_t *changes)
{
	char *node = NULL, *cfg = NULL, *state = NULL;
	json_t *layout = NULL;
	struct live l = {0};
	struct hap_workers w;
	pid_t master;
	int rc;

	if ((rc = validate(fe, n)) < 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		if (fe[i].match_header && !h->has_ab) {
			ferry_error_set("frontend %s: header routing needs {{ab_route}} in the template's frontend and "
					"{{ab_backend}} after its servers (FERRY_HAPROXY_TEMPLATE; see "
					"deploy/haproxy.cfg.tmpl)", fe[i].name);
			return FERRY_EINVALID;
		}
	pthread_mutex_lock(&h->mu);
	if (n == 0) {
		if (hap_running_pid(h) > 0) {
			hap_stop_locked(h);
			change(changes, NULL, NULL, "stopped", NULL, NULL);
		}
		rc = 0;
		goto out;
	}
	node = layout_node(h, fe, n);
	cfg = render_config(h, fe, n, node);
	state = render_state(fe, n);
	master = hap_running_pid(h);
	if (master <= 0) {
		if ((rc = ports_free(h, fe, n, NULL)) < 0 || (rc = hap_write_files(h, cfg, state, 1)) < 0 ||
		    (rc = hap_start_locked(h, node)) < 0)
			goto out;
		change(changes, NULL, NULL, "started", NULL, NULL);
		goto out;
	}
	if ((rc = hap_settle_locked(h, master, &w)) < 0)
		goto out;
	if ((rc = live_read(h, &l)) < 0) {
		if (rc == FERRY_ENOTFOUND)
			ferry_error_set("haproxy (pid %d) does not answer on %s", (int)master, h->sock);
		rc = FERRY_ERROR;
		goto out;
	}
	layout = json_array();
	if (layout_diff(fe, n, &l, layout) > 0 || l.node == NULL || strcmp(l.node, node) != 0) {
		long old = l.pid;
		if ((rc = ports_free(h, fe, n, l.fronts)) < 0 || (rc = hap_write_files(h, cfg, state, 1)) < 0 ||
		    (rc = hap_reload_locked(h, master, old, node)) < 0)
			goto out;
		/* reported once done: a refused change reports nothing */
		if (changes)
			json_array_extend(changes, layout);
		change(changes, NULL, NULL, "reloaded", NULL, NULL);
		/* the new worker loaded the state file; what it has is checked below like any other */
		live_dispose(&l);
		if ((rc = hap_settle_locked(h, master, &w)) < 0 || (rc = live_read(h, &l)) < 0)
			goto out;
		if (layout_diff(fe, n, &l, NULL) > 0) {
			ferry_error_set("haproxy reloaded but does not serve the new frontends and servers; see %s",
					h->log);
			rc = FERRY_ERROR;
			goto out;
		}
	} else if (!file_equals(h->cfg, cfg) || !file_equals(h->state, state)) {
		/* same layout: only weights, states or addresses differ, no check needed */
		if ((rc = hap_write_files(h, cfg, state, 0)) < 0)
			goto out;
	}
	rc = runtime_repair(h, fe, n, &l, changes);
	/*
	 * A reload someone else started after the settle may have read the
	 * files before they were written, and the commands may have reached
	 * the old worker: the new one gets them again (reported once).
	 */
	for (int again = 0; rc == 0 && again < 3 && hap_reloaded_since(master, &w); again++) {
		flog_info("haproxy: reloaded by someone else during a change; applying it to the new worker");
		live_dispose(&l);
		if ((rc = hap_settle_locked(h, master, &w)) < 0 || (rc = live_read(h, &l)) < 0)
			break;
		rc = runtime_repair(h, fe, n, &l, NULL);
	}
out:
	pthread_mutex_unlock(&h->mu);
	live_dispose(&l);
	json_decref(layout);
	free(node), free(cfg), free(state);
	return rc;
}

/* ---- reading back ---- */

static int not_running(const struct hap *h)
{
	ferry_error_set("haproxy is not running (no live haproxy in %s)", h->pidfile);
	return FERRY_ENOTFOUND;
}

int hap_read(struct hap *h, json_t **out)
{
	char *text = NULL;
	struct live l = {0};
	int rc;

	*out = NULL;
	pthread_mutex_lock(&h->mu);
	rc = hap_running_pid(h) > 0 ? hap_cli(h, "show servers state", &text) : not_running(h);
	pthread_mutex_unlock(&h->mu);
	if (rc < 0)
		goto out;
	if ((rc = parse_servers_state(text, &l)) < 0)
		goto out;
	*out = json_array();
	for (size_t i = 0; i < l.n; i++)
		json_array_append_new(*out, json_pack("{s:s, s:s, s:s, s:i, s:i, s:s}", "frontend", l.s[i].fe,
						      "server", l.s[i].name, "addr", l.s[i].addr, "port",
						      l.s[i].port, "weight", l.s[i].weight, "state",
						      admin_state(l.s[i].admin)));
out:
	free(text);
	live_dispose(&l);
	return rc;
}

static json_int_t row_int(json_t *row, const char *key)
{
	int64_t v;
	const char *s = row_str(row, key);
	return *s && parse_int64(s, &v) == 0 ? (json_int_t)v : 0;
}

int hap_stats(struct hap *h, json_t **out)
{
	json_t *rows = NULL, *row;
	size_t i;
	int rc;

	*out = NULL;
	pthread_mutex_lock(&h->mu);
	rc = hap_running_pid(h) > 0 ? read_stat(h, &rows) : not_running(h);
	pthread_mutex_unlock(&h->mu);
	if (rc < 0)
		return rc;
	*out = json_array();
	json_array_foreach(rows, i, row) {
		if (strcmp(row_str(row, "type"), "2") != 0)
			continue;
		json_array_append_new(*out, json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s}",
						      "frontend", row_str(row, "pxname"), "server",
						      row_str(row, "svname"), "requests", row_int(row, "stot"),
						      "hrsp_2xx", row_int(row, "hrsp_2xx"), "hrsp_5xx",
						      row_int(row, "hrsp_5xx"), "rtime_ms", row_int(row, "rtime"),
						      "qtime_ms", row_int(row, "qtime"), "ttime_ms",
						      row_int(row, "ttime"), "scur", row_int(row, "scur"), "status",
						      row_str(row, "status")));
	}
	json_decref(rows);
	return 0;
}

int hap_running(struct hap *h)
{
	int r;

	pthread_mutex_lock(&h->mu);
	r = hap_running_pid(h) > 0;
	pthread_mutex_unlock(&h->mu);
	return r;
}

int hap_reload(struct hap *h)
{
	pid_t master;
	long old = -1;
	int rc;

	pthread_mutex_lock(&h->mu);
	master = hap_running_pid(h);
	if (master <= 0) {
		rc = not_running(h);
		goto out;
	}
	if ((rc = hap_check_config(h, h->cfg)) < 0 || (rc = hap_read_info(h, &old, NULL)) < 0)
		goto out;
	rc = hap_reload_locked(h, master, old, NULL);
out:
	pthread_mutex_unlock(&h->mu);
	return rc;
}

void hap_stop(struct hap *h)
{
	pthread_mutex_lock(&h->mu);
	hap_stop_locked(h);
	pthread_mutex_unlock(&h->mu);
}

/* ---- open and close ---- */

int hap_set_front(struct hap *h, const char *addr)
{
	struct in_addr a;

	if (addr == NULL || strlen(addr) >= sizeof(h->front) || inet_pton(AF_INET, addr, &a) != 1) {
		ferry_error_set("the fronts' address \"%s\" is not an IPv4 address", addr ? addr : "");
		return FERRY_EINVALID;
	}
	pthread_mutex_lock(&h->mu);
	snprintf(h->front, sizeof(h->front), "%s", addr);
	pthread_mutex_unlock(&h->mu);
	return FERRY_OK;
}

int hap_open(struct hap **out, const char *dir)
{
	struct hap *h = xcalloc(1, sizeof(*h));
	const char *tpath = getenv("FERRY_HAPROXY_TEMPLATE");
	size_t len;
	int rc;

	*out = NULL;
	pthread_mutex_init(&h->mu, NULL);
	snprintf(h->front, sizeof(h->front), "127.0.0.1");
	h->dir = xstrdup(dir);
	h->cfg = xasprintf("%s/haproxy.cfg", dir);
	h->state = xasprintf("%s/server-state", dir);
	h->sock = xasprintf("%s/admin.sock", dir);
	h->pidfile = xasprintf("%s/haproxy.pid", dir);
	h->log = xasprintf("%s/haproxy.log", dir);
	h->bin = hap_find_binary();
	if (strlen(h->sock) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		ferry_error_set("%s: the path is too long for a unix socket; use a shorter FERRY_HOME", h->sock);
		rc = FERRY_EINVALID;
		goto out;
	}
	/* the config names the directory as it is: no blanks or newlines, which would cut its lines */
	for (const char *p = dir; *p; p++)
		if (isspace((unsigned char)*p) || *p == '"' || *p == '#') {
			ferry_error_set("%s: HAProxy's directory may not hold blanks, quotes or #", dir);
			rc = FERRY_EINVALID;
			goto out;
		}
	if ((rc = mkdir_p(dir, 0700)) < 0)
		goto out;
	if (tpath && *tpath) {
		if ((rc = file_read(&h->tmpl, &len, tpath)) < 0)
			goto out;
	} else {
		h->tmpl = xstrdup(hap_template_builtin);
		tpath = "deploy/haproxy.cfg.tmpl (built in)";
	}
	if ((rc = template_cut(h, tpath)) < 0)
		goto out;
	*out = h;
	h = NULL;
out:
	hap_close(h);
	return rc;
}

void hap_close(struct hap *h)
{
	if (h == NULL)
		return;
	pthread_mutex_destroy(&h->mu);
	free(h->dir), free(h->cfg), free(h->state), free(h->sock), free(h->pidfile), free(h->log);
	free(h->bin), free(h->tmpl);
	free(h);
}

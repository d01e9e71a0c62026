/*
 * dag_svg — see dag_svg.h. The graph is built with cgraph from the steps'
 * JSON (node names are the step names, which config.c limits to
 * [a-z0-9][a-z0-9_.-]*; the label escapes backslashes all the same), laid
 * out by dot left to right and rendered to SVG in memory. One GVC_t for the
 * process, made on first use and kept, and one mutex around every use of
 * libgvc (it keeps global state and is not thread-safe).
 *
 * The cache is a short list in recency order (at most max_entries, 64 in
 * the daemon: a linear scan is cheaper than hashing 64-byte keys), guarded
 * by its own mutex that is held only for pointer work, never across a
 * layout. Entries are immutable and reference-counted, so a reply may still
 * be sending one that was evicted.
 */
#include "api/dag_svg.h"

#include <errno.h>
#include <fcntl.h>
#include <graphviz/gvc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/util.h"

/*
 * The plugins linked in (Makefile: -lgvplugin_dot_layout -lgvplugin_core),
 * and no others loaded: without the gd/pango text layout plugins the label
 * widths come from Graphviz's own font metrics, so the picture is the same
 * on every machine (the cache key is the workflow alone) and nothing of
 * fontconfig is loaded (which also leaks at its first use).
 */
extern gvplugin_library_t gvplugin_dot_layout_LTX_library;
extern gvplugin_library_t gvplugin_core_LTX_library;
static lt_symlist_t builtins[] = {
	{"gvplugin_dot_layout_LTX_library", &gvplugin_dot_layout_LTX_library},
	{"gvplugin_core_LTX_library", &gvplugin_core_LTX_library},
	{NULL, NULL},
};

#define DAG_TOO_BIG 16

static pthread_mutex_t layout_mu = PTHREAD_MUTEX_INITIALIZER;
static GVC_t *gvc; /* under layout_mu */

struct entry {
	struct dag_svg pub; /* first: dag_svg_release finds the entry from it */
	atomic_int refs;
	struct entry *prev, *next;
	char hash[80];
	char data[];
};

struct dag_cache {
	pthread_mutex_t mu;
	pthread_mutex_t render_mu; /* one miss renders at a time: a twin miss then finds it cached */
	struct entry *head, *tail; /* head: most recently used */
	size_t max_entries, max_bytes, entries, bytes;
	unsigned long long hits, misses, renders, evictions;
	char too_big[DAG_TOO_BIG][80]; /* workflows whose layout ran out of time (a ring) */
	unsigned too_big_next;
};

/*
 * A label: the name and the kind on two lines, backslashes doubled (dot
 * reads \N, \l, … in labels); the name alone when the kind says nothing
 * more (a step named after its kind, "train train" before).
 */
static char *label_of(const char *name, const char *kind)
{
	size_t n = strlen(name) + strlen(kind), k = 0;
	char *out = xmalloc(2 * n + 3);

	for (const char *p = name; *p; p++) {
		if (*p == '\\')
			out[k++] = '\\';
		out[k++] = *p;
	}
	if (*kind == '\0' || strcmp(name, kind) == 0) {
		out[k] = '\0';
		return out;
	}
	out[k++] = '\n';
	for (const char *p = kind; *p; p++) {
		if (*p == '\\')
			out[k++] = '\\';
		out[k++] = *p;
	}
	out[k] = '\0';
	return out;
}

/* Builds the graph of steps; NULL with the message set when steps is not an array of named steps. */
static Agraph_t *graph_build(const json_t *steps)
{
	Agraph_t *g;
	size_t i, j;
	json_t *s, *need;

	if (!json_is_array(steps)) {
		ferry_error_set("steps: not an array");
		return NULL;
	}
	if (json_array_size(steps) > DAG_SVG_MAX_STEPS) {
		ferry_error_set("the workflow has %zu steps; at most %d are drawn", json_array_size(steps),
				DAG_SVG_MAX_STEPS);
		return NULL;
	}
	g = agopen("workflow", Agdirected, NULL);
	agattr(g, AGRAPH, "rankdir", "LR");
	agattr(g, AGRAPH, "nodesep", "0.15");
	agattr(g, AGRAPH, "ranksep", "0.4");
	/* plain boxes: a polygon each (the console colours polygons by state); a rounded box is a path 2.5 times longer */
	agattr(g, AGNODE, "shape", "box");
	agattr(g, AGNODE, "fontname", "sans-serif");
	agattr(g, AGNODE, "fontsize", "10");
	agattr(g, AGNODE, "id", "");
	agattr(g, AGNODE, "class", "");
	agattr(g, AGNODE, "label", "\\N");
	agattr(g, AGEDGE, "arrowsize", "0.6");
	agattr(g, AGEDGE, "id", ""); /* edge:FROM:TO (':' is in no step name): which way an edge goes, for a reader */
	json_array_foreach(steps, i, s) {
		const char *name = json_string_value(json_object_get(s, "name"));
		const char *kind = json_string_value(json_object_get(s, "kind"));
		char *id, *label;
		Agnode_t *n;

		if (name == NULL || *name == '\0') {
			ferry_error_set("steps[%zu]: no name", i);
			agclose(g);
			return NULL;
		}
		n = agnode(g, (char *)name, 1);
		id = xasprintf("step-%s", name);
		label = label_of(name, kind ? kind : "");
		agset(n, "id", id);
		agset(n, "class", "step");
		agset(n, "label", label);
		free(id);
		free(label);
	}
	json_array_foreach(steps, i, s) {
		Agnode_t *to = agnode(g, (char *)json_string_value(json_object_get(s, "name")), 0);

		json_array_foreach(json_object_get(s, "needs"), j, need) {
			const char *from = json_string_value(need);
			Agnode_t *f = from ? agnode(g, (char *)from, 0) : NULL;
			if (f && to) {
				Agedge_t *e = agedge(g, f, to, NULL, 1);
				char *eid = xasprintf("edge:%s:%s", from, json_string_value(json_object_get(s, "name")));

				agset(e, "id", eid);
				free(eid);
			}
		}
	}
	return g;
}

/*
 * Graphviz writes every '-' as &#45; (so that no "--" lands in an XML
 * comment); in id attributes it is put back, so that the ids read as the
 * console and the tests look for them (id="step-train-2"). Its comments
 * (one per node and edge, repeating the title) are dropped: a sixteenth of
 * the bytes that a browser parses; so are the edges' titles and the font
 * attributes of every label (the same for all: style.css sets them). In
 * place; the new length.
 */
#define FONT " font-family=\"sans-serif\" font-size=\"10.00\""

static size_t svg_tidy(char *svg, size_t len)
{
	char *w = svg, *r = svg, *end = svg + len;

	while (r < end) {
		if (end - r > 4 && memcmp(r, " id=\"", 5) == 0) {
			memmove(w, r, 5);
			w += 5, r += 5;
			while (r < end && *r != '"') {
				if (end - r >= 5 && memcmp(r, "&#45;", 5) == 0) {
					*w++ = '-';
					r += 5;
				} else {
					*w++ = *r++;
				}
			}
			continue;
		}
		/* the font of every label, the same for all: style.css gives it once */
		if (end - r >= (ptrdiff_t)sizeof(FONT) - 1 && memcmp(r, FONT, sizeof(FONT) - 1) == 0) {
			r += sizeof(FONT) - 1;
			continue;
		}
		/* an edge's title ("a&#45;&gt;b"): an element and a text node per edge that nothing reads */
		if (end - r >= 7 && memcmp(r, "<title>", 7) == 0) {
			char *close = memmem(r + 7, (size_t)(end - r - 7), "</title>", 8);
			if (close && memmem(r + 7, (size_t)(close - r - 7), "&#45;&gt;", 9)) {
				r = close + 8;
				if (r < end && *r == '\n')
					r++;
				continue;
			}
		}
		if (end - r >= 4 && memcmp(r, "<!--", 4) == 0) {
			char *close = memmem(r + 4, (size_t)(end - r - 4), "-->", 3);
			if (close) {
				r = close + 3;
				if (r < end && *r == '\n')
					r++;
				continue;
			}
		}
		*w++ = *r++;
	}
	*w = '\0';
	return (size_t)(w - svg);
}

/*
 * The layout runs in a child process: dot's time grows much faster than
 * the graph (a 46 KB YAML of anchors made 90,000 edges and held a database
 * worker and a core for over 90 s, and SIGTERM waited for it). The child
 * is forked holding layout_mu (so no thread is inside libgvc, and the
 * child's copy of its state is whole), lays the graph out and writes the
 * SVG to a pipe; the parent reads it until FERRY_DAG_RENDER_TIMEOUT_MS
 * (default DAG_RENDER_MS) have passed, then
 * kills the child and says the graph is too big to draw. Nothing the child
 * does can stall the API beyond that, and it dies with the daemon
 * (PR_SET_DEATHSIG).
 */
#define DAG_RENDER_MS 10000

/* FERRY_DAG_RENDER_TIMEOUT_MS, 100 ms to 10 min, else the default. */
static int64_t render_ms(void)
{
	int64_t ms;
	const char *v = getenv("FERRY_DAG_RENDER_TIMEOUT_MS");

	return v && parse_int64(v, &ms) == 0 && ms >= 100 && ms <= 600000 ? ms : DAG_RENDER_MS;
}
#define DAG_SVG_MAX (64u << 20)

/* The child: layout, render, write, exit. Never returns. */
static void render_child(Agraph_t *g, int fd)
{
	char *buf = NULL;
	unsigned int n = 0;
	int ok;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (gvc == NULL)
		gvc = gvContextPlugins(builtins, 0);
	ok = gvc && gvLayout(gvc, g, "dot") == 0 && gvRenderData(gvc, g, "svg", &buf, &n) == 0 && buf;
	if (ok)
		ok = fd_write_all(fd, buf, n) == 0;
	_exit(ok ? 0 : 1);
}

int dag_svg_render(char **out, size_t *len, const json_t *steps)
{
	Agraph_t *g;
	int p[2], status = 0, error = FERRY_OK;
	size_t n = 0, cap = 1 << 16;
	char *buf;
	int64_t limit = render_ms(), deadline = clock_mono_ms() + limit;
	pid_t pid;

	*out = NULL;
	*len = 0;
	pthread_mutex_lock(&layout_mu);
	/* the graph too: cgraph's allocation and error state are shared with the layout */
	if ((g = graph_build(steps)) == NULL) {
		pthread_mutex_unlock(&layout_mu);
		return FERRY_EINVALID;
	}
	if (pipe2(p, O_CLOEXEC) < 0) {
		ferry_error_set("pipe: %s", strerror(errno));
		agclose(g);
		pthread_mutex_unlock(&layout_mu);
		return FERRY_ERROR;
	}
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		render_child(g, p[1]);
	}
	close(p[1]);
	agclose(g);
	pthread_mutex_unlock(&layout_mu);
	if (pid < 0) {
		ferry_error_set("fork: %s", strerror(errno));
		close(p[0]);
		return FERRY_ERROR;
	}
	buf = xmalloc(cap);
	for (;;) {
		struct pollfd pf = {.fd = p[0], .events = POLLIN};
		int64_t left = deadline - clock_mono_ms();
		ssize_t r;
		if (left <= 0 || n > DAG_SVG_MAX) {
			error = FERRY_EINVALID; /* too big to draw: in time, or at all */
			break;
		}
		if (poll(&pf, 1, (int)left) <= 0)
			continue; /* EINTR, or the deadline: looked at above */
		if (n + 65536 + 1 > cap)
			buf = xrealloc(buf, cap *= 2);
		r = read(p[0], buf + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(p[0]);
	if (error == FERRY_EINVALID)
		kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (error == FERRY_EINVALID) {
		ferry_error_set("the workflow's graph (%zu steps) takes more than %.1f s to lay out; too big to "
				"draw: its steps are listed in the run's page", json_array_size(steps),
				(double)limit / 1000);
	} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || n == 0) {
		ferry_error_set("graphviz could not lay out the workflow");
		error = FERRY_ERROR;
	}
	if (error < 0) {
		free(buf);
		return error;
	}
	buf[n] = '\0';
	*len = svg_tidy(buf, n);
	*out = buf;
	return FERRY_OK;
}

static void entry_unref(struct entry *e)
{
	if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1)
		free(e);
}

void dag_svg_release(const struct dag_svg *s)
{
	if (s)
		entry_unref((struct entry *)(void *)s);
}

int dag_cache_new(struct dag_cache **out, size_t max_entries, size_t max_bytes)
{
	struct dag_cache *c = xcalloc(1, sizeof(*c));

	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_init(&c->render_mu, NULL);
	c->max_entries = max_entries;
	c->max_bytes = max_bytes;
	*out = c;
	return FERRY_OK;
}

void dag_cache_free(struct dag_cache *c)
{
	struct entry *e, *next;

	if (c == NULL)
		return;
	for (e = c->head; e; e = next) {
		next = e->next;
		entry_unref(e);
	}
	pthread_mutex_destroy(&c->mu);
	pthread_mutex_destroy(&c->render_mu);
	free(c);
}

static void unlink_entry(struct dag_cache *c, struct entry *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		c->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		c->tail = e->prev;
	e->prev = e->next = NULL;
}

static void push_front(struct dag_cache *c, struct entry *e)
{
	e->prev = NULL;
	e->next = c->head;
	if (c->head)
		c->head->prev = e;
	c->head = e;
	if (c->tail == NULL)
		c->tail = e;
}

/* The entry of hash, moved to the front with a reference taken, or NULL. Under mu. */
static struct entry *find_locked(struct dag_cache *c, const char *hash)
{
	for (struct entry *e = c->head; e; e = e->next)
		if (strcmp(e->hash, hash) == 0) {
			unlink_entry(c, e);
			push_front(c, e);
			atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
			return e;
		}
	return NULL;
}

const struct dag_svg *dag_cache_get(struct dag_cache *c, const char *hash)
{
	struct entry *e;

	pthread_mutex_lock(&c->mu);
	e = find_locked(c, hash);
	if (e)
		c->hits++;
	else
		c->misses++;
	pthread_mutex_unlock(&c->mu);
	return e ? &e->pub : NULL;
}

/* Inserts e (one reference is the cache's) and evicts down to the bounds; e itself is never evicted. */
static void insert(struct dag_cache *c, struct entry *e)
{
	struct entry *evicted = NULL;

	pthread_mutex_lock(&c->mu);
	push_front(c, e);
	c->entries++;
	c->bytes += e->pub.len;
	while (c->tail != e && (c->entries > c->max_entries || c->bytes > c->max_bytes)) {
		struct entry *t = c->tail;
		unlink_entry(c, t);
		c->entries--;
		c->bytes -= t->pub.len;
		c->evictions++;
		t->next = evicted;
		evicted = t;
	}
	pthread_mutex_unlock(&c->mu);
	while (evicted) {
		struct entry *next = evicted->next;
		entry_unref(evicted);
		evicted = next;
	}
}

int dag_cache_render(const struct dag_svg **out, int *hit, struct dag_cache *c, const char *hash,
		     const json_t *steps)
{
	struct entry *e;
	char *svg = NULL;
	size_t len = 0;
	int error;

	*out = NULL;
	*hit = 0;
	if (strlen(hash) >= sizeof(e->hash)) {
		ferry_error_set("workflow hash too long");
		return FERRY_EINVALID;
	}
	if ((*out = dag_cache_get(c, hash)) != NULL) {
		*hit = 1;
		return FERRY_OK;
	}
	/*
	 * Another request may be laying out the same workflow now: misses take
	 * turns (layouts are serialized anyway) and each looks again first, so
	 * a twin waits for the first and finds its SVG.
	 */
	pthread_mutex_lock(&c->render_mu);
	pthread_mutex_lock(&c->mu);
	e = find_locked(c, hash);
	for (int i = 0; e == NULL && i < DAG_TOO_BIG; i++)
		if (strcmp(c->too_big[i], hash) == 0) {
			/* it ran out of time before: not again (the answer is the same) */
			pthread_mutex_unlock(&c->mu);
			pthread_mutex_unlock(&c->render_mu);
			ferry_error_set("the workflow's graph (%zu steps) is too big to draw (its layout ran "
					"out of time before); its steps are listed in the run's page", json_array_size(steps));
			return FERRY_EINVALID;
		}
	pthread_mutex_unlock(&c->mu);
	if (e) {
		pthread_mutex_unlock(&c->render_mu);
		*out = &e->pub;
		*hit = 1;
		return FERRY_OK;
	}
	if ((error = dag_svg_render(&svg, &len, steps)) < 0) {
		if (error == FERRY_EINVALID && strstr(ferry_error_last(), "to lay out; too big")) {
			pthread_mutex_lock(&c->mu);
			snprintf(c->too_big[c->too_big_next++ % DAG_TOO_BIG], sizeof(c->too_big[0]), "%s", hash);
			pthread_mutex_unlock(&c->mu);
		}
		pthread_mutex_unlock(&c->render_mu);
		return error;
	}
	pthread_mutex_lock(&c->mu);
	c->renders++;
	pthread_mutex_unlock(&c->mu);
	e = xmalloc(sizeof(*e) + len + 1);
	memset(e, 0, sizeof(*e));
	memcpy(e->data, svg, len + 1);
	free(svg);
	e->pub.len = len;
	e->pub.data = e->data;
	snprintf(e->hash, sizeof(e->hash), "%s", hash);
	atomic_init(&e->refs, 2); /* the cache's and the caller's */
	insert(c, e);
	pthread_mutex_unlock(&c->render_mu);
	*out = &e->pub;
	return FERRY_OK;
}

void dag_cache_stats(struct dag_cache *c, struct dag_cache_stats *out)
{
	pthread_mutex_lock(&c->mu);
	out->entries = c->entries;
	out->bytes = c->bytes;
	out->hits = c->hits;
	out->misses = c->misses;
	out->renders = c->renders;
	out->evictions = c->evictions;
	pthread_mutex_unlock(&c->mu);
}

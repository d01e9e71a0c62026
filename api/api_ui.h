/*
 * api_ui — the web console's static files (ui/), built into ferryd by
 * api/gen-ui.sh and served at /ui/ without a token: they hold no data (the
 * page asks the API for everything with the token the person enters).
 */
#ifndef FERRY_API_UI_H
#define FERRY_API_UI_H

#include <stddef.h>

struct ui_asset {
	const char *name;         /* "app.js": the file's name under /ui/ */
	const char *content_type; /* "text/javascript; charset=utf-8" */
	const unsigned char *data;
	size_t len;
	const char *etag; /* "\"<the first 128 bits of its SHA-256 in hex>\"", quotes included */
};

/* The generated table; ends with a NULL name. */
extern const struct ui_asset ui_assets[];

/* The asset called name ("" or NULL: index.html), or NULL when there is none. */
const struct ui_asset *ui_asset_find(const char *name);

/*
 * Whether an If-None-Match header value (NULL: none) names etag: a
 * comma-separated list of entity tags, weak ones (W/"…") matching by their
 * opaque part, or "*".
 */
int ui_etag_matches(const char *if_none_match, const char *etag);

/* The headers every /ui/ answer carries: the page may load only itself. */
#define UI_CSP                                                                                                   \
	"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "  \
	"frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

#endif

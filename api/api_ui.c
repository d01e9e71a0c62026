/*
 * api_ui — serves the console (ui/: index.html, app.js, style.css) from the
 * table api/gen-ui.sh builds into the binary, so ferryd needs nothing beside
 * it and works with no internet. Answered in the fast phase, on the MHD
 * worker, from memory: no token (the files hold no data), no database.
 *
 * Every answer carries a strict Content-Security-Policy (only the daemon's
 * own scripts, styles and API; no inline script or style, no framing),
 * nosniff and no-referrer. Each file has an ETag from its SHA-256, and
 * Cache-Control: no-cache makes a browser revalidate it (a 304 without the
 * bytes) so a new ferryd is never served stale files. /ui answers 308 to
 * /ui/, so relative URLs in the page resolve under /ui/.
 */
#include "api/api_priv.h"
#include "api/api_ui.h"

#include <string.h>

const struct ui_asset *ui_asset_find(const char *name)
{
	if (name == NULL || *name == '\0')
		name = "index.html";
	for (const struct ui_asset *u = ui_assets; u->name; u++)
		if (strcmp(u->name, name) == 0)
			return u;
	return NULL;
}

int ui_etag_matches(const char *inm, const char *etag)
{
	size_t n = strlen(etag);

	if (inm == NULL)
		return 0;
	while (*inm) {
		size_t len;

		inm += strspn(inm, " \t,");
		if (strncmp(inm, "W/", 2) == 0)
			inm += 2;
		len = strcspn(inm, ",");
		while (len > 0 && (inm[len - 1] == ' ' || inm[len - 1] == '\t'))
			len--;
		if ((len == 1 && inm[0] == '*') || (len == n && memcmp(inm, etag, n) == 0))
			return 1;
		inm += strcspn(inm, ",");
	}
	return 0;
}

static void ui_headers(struct MHD_Response *resp)
{
	MHD_add_response_header(resp, "Content-Security-Policy", UI_CSP);
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(resp, "X-Frame-Options", "DENY");
}

/* GET /ui, /ui/, /ui/{file}, fast: the file from memory, a 304, a 308 (/ui) or a 404. */
int api_ui_fast(struct api *a, struct reply *r, struct req *q)
{
	const struct ui_asset *u;
	struct MHD_Response *resp;

	(void)a;
	if (strcmp(q->rt->pattern, "/ui") == 0) {
		resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
		MHD_add_response_header(resp, "Location", "/ui/");
		ui_headers(resp);
		r->resp = resp;
		r->status = 308;
		return 1;
	}
	u = ui_asset_find(strcmp(q->rt->pattern, "/ui/") == 0 ? NULL : q->caps[0]);
	if (u == NULL) {
		reply_error(r, 404, "not_found", NULL, "no such file in the console; open /ui/", NULL);
		return 1;
	}
	if (ui_etag_matches(MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, "If-None-Match"), u->etag)) {
		resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
		r->status = 304;
	} else {
		/* the table is static: MHD sends from it without a copy */
		resp = MHD_create_response_from_buffer(u->len, (void *)u->data, MHD_RESPMEM_PERSISTENT);
		MHD_add_response_header(resp, "Content-Type", u->content_type);
		r->status = 200;
	}
	MHD_add_response_header(resp, "ETag", u->etag);
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	ui_headers(resp);
	r->resp = resp;
	return 1;
}

#!/bin/sh
# Embeds the console's static files (ui/) in the binary as ui_assets[]
# (api_ui.h): each file's path, content type, bytes (as a byte array, so any
# byte is carried exactly) and an ETag from its SHA-256. Usage: gen-ui.sh FILE…
set -eu
echo '/* generated from ui/ by api/gen-ui.sh; do not edit */'
echo '#include "api/api_ui.h"'
n=0
for f in "$@"; do
	echo "static const unsigned char ui_data_$n[] = {"
	od -An -v -tx1 "$f" | sed -e 's/ *$//' -e 's/^ */\t0x/' -e 's/  */, 0x/g' -e 's/$/,/' | grep -v '^\t0x,$' || true
	echo '0};'
	n=$((n + 1))
done
echo 'const struct ui_asset ui_assets[] = {'
n=0
for f in "$@"; do
	name=${f##*/}
	case "$name" in
	*.html) type='text/html; charset=utf-8' ;;
	*.js | *.mjs) type='text/javascript; charset=utf-8' ;;
	*.css) type='text/css; charset=utf-8' ;;
	*.svg) type='image/svg+xml' ;;
	*.png) type='image/png' ;;
	*.ico) type='image/x-icon' ;;
	*) echo "gen-ui.sh: $f: no content type for this extension; add one" >&2; exit 1 ;;
	esac
	case "$name" in
	*[!A-Za-z0-9._-]* | .*) echo "gen-ui.sh: $f: asset names are [A-Za-z0-9._-] and do not start with a dot" >&2; exit 1 ;;
	esac
	sum=$(sha256sum "$f" | cut -c1-32)
	bytes=$(wc -c <"$f" | tr -d ' ')
	echo "	{\"$name\", \"$type\", ui_data_$n, $bytes, \"\\\"$sum\\\"\"},"
	n=$((n + 1))
done
echo '	{0, 0, 0, 0, 0},'
echo '};'

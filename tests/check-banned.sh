#!/bin/sh
# Fails when C sources call functions this project does not use (as curl's
# checksrc does): unbounded string writes and parsers without error checks.
cd "$(dirname "$0")/.." || exit 2
hits=$(grep -nE '(^|[^_[:alnum:]])(sprintf|vsprintf|strcpy|strcat|strtok|atoi|atol|sscanf|gets)[[:space:]]*\(' \
	$(git ls-files '*.c' '*.h' 2>/dev/null || find . -name '*.c' -o -name '*.h') | grep -vE '(snprintf|vsnprintf)[[:space:]]*\(' )
if [ -n "$hits" ]; then
	echo "banned functions (use snprintf, strtol/parse_int64, explicit parsing):"
	echo "$hits"
	exit 1
fi
echo "check-banned: clean"

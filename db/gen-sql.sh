#!/bin/sh
# Turns SQL files into a C array so ferryd carries its schema:
#   gen-sql.sh migration db/migrations/NNNN_name.sql…  → db_migrations[]
#   gen-sql.sh function db/functions/name.sql…         → db_functions[]
# Each element is {"name" (the file name less .sql), "the file's text"}.
set -eu
what=$1
shift
case "$what" in
migration | function) ;;
*) echo "usage: $0 migration|function FILE…" >&2; exit 2 ;;
esac
echo "/* generated from db/${what}s by db/gen-sql.sh; do not edit */"
echo '#include "store/db.h"'
echo "const struct db_sql db_${what}s[] = {"
n=0
for f in "$@"; do
	name=$(basename "$f" .sql)
	printf '\t{"%s",\n' "$name"
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/	/\\t/g' -e 's/^/\t "/' -e 's/$/\\n"/' "$f"
	printf '\t},\n'
	n=$((n + 1))
done
[ "$n" -gt 0 ] || printf '\t{NULL, NULL},\n'
echo '};'
echo "const int db_${what}s_len = $n;"

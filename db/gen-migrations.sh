#!/bin/sh
# Turns db/migrations/NNNN_name.sql into a C array so ferryd carries its schema.
set -eu
echo '/* generated from db/migrations by db/gen-migrations.sh; do not edit */'
echo '#include "db.h"'
echo 'const struct db_migration db_migrations[] = {'
n=0
for f in "$@"; do
	name=$(basename "$f" .sql)
	printf '\t{"%s",\n' "$name"
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/	/\\t/g' -e 's/^/\t "/' -e 's/$/\\n"/' "$f"
	printf '\t},\n'
	n=$((n + 1))
done
echo '};'
echo "const int db_migrations_len = $n;"

#!/bin/sh
# Embeds api/openapi.json in the binary as api_openapi_json.
set -eu
echo '/* generated from api/openapi.json by api/gen-openapi.sh; do not edit */'
echo '#include "api/api.h"'
echo 'const char api_openapi_json[] ='
sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/\t"/' -e 's/$/\\n"/' "$1"
echo ';'

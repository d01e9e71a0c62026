#!/usr/bin/env bash
# The OpenAPI document against Redocly's recommended rules (redocly.yaml says
# which exceptions and why; .redocly.lint-ignore.yaml lists their places).
# make check runs it; make deps installs Redocly CLI here (npm ci).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x node_modules/.bin/redocly ]; then
	echo "openapi-lint: Redocly CLI is not installed in tests/api (make deps)" >&2
	exit 1
fi
# no telemetry, no update check: the lint reads this directory and nothing else
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
if out=$(node_modules/.bin/redocly lint ../../api/openapi.json --config redocly.yaml --format=stylish 2>&1); then
	echo "openapi-lint: clean ($(echo "$out" | grep -Eo '[0-9]+ problems? (is|are) explicitly ignored' || echo 'nothing ignored'))"
else
	echo "$out" >&2
	echo "openapi-lint: api/openapi.json has problems (above)" >&2
	exit 1
fi

#!/usr/bin/env bash
# The OpenAPI document against Redocly's recommended rules (redocly.yaml says
# which exceptions and why; .redocly.lint-ignore.yaml lists their places).
# make check runs it; make deps installs Redocly's lint engine here (npm ci).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/@redocly/openapi-core ]; then
	echo "openapi-lint: Redocly's lint engine is not installed in tests/api (make deps)" >&2
	exit 1
fi
# no telemetry, no update check: the lint reads this directory and nothing else
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
exec node lint.mjs

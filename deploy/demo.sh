#!/usr/bin/env bash
# make demo: start the embedded PostgreSQL and ferryd, run the digits
# pipeline (label → train → evaluate → register → deploy) twice through the
# daemon with the CLI: the person's step is continued from the CLI, the
# second run reuses the cached training, registers the next version and
# deploys it beside the first at 20% of the traffic. Real predictions go
# through the deployment's front address (HAProxy), the split is shown, the
# new version is promoted, and the auto-stop deadline printed. Then the
# deployment, ferryd and PostgreSQL are stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
export FERRY_HOME=${FERRY_HOME:-$PWD/.ferry}
export FERRY_LISTEN=${FERRY_LISTEN:-127.0.0.1:8080}
export FERRY_URL=${FERRY_URL:-http://$FERRY_LISTEN}
mkdir -p "$FERRY_HOME"
if [ "$(id -u)" = 0 ]; then
	# the embedded PostgreSQL runs as 'postgres' and must be able to reach FERRY_HOME
	if ! runuser -u postgres -- test -x "$FERRY_HOME" 2>/dev/null; then
		chmod o+x "$FERRY_HOME" 2>/dev/null || true
	fi
	if ! runuser -u postgres -- test -x "$FERRY_HOME" 2>/dev/null; then
		alt=/var/tmp/ferry-demo
		echo "demo: the postgres user cannot enter $FERRY_HOME (a parent directory is private); using $alt"
		export FERRY_HOME=$alt
		mkdir -p "$FERRY_HOME"
		chmod 755 "$FERRY_HOME"
	fi
fi

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

if curl -fsS "$FERRY_URL/healthz" >/dev/null 2>&1; then
	echo "demo: something already answers on $FERRY_URL; stop it or set FERRY_LISTEN" >&2
	exit 1
fi

say "starting ferryd (state in $FERRY_HOME, log in $FERRY_HOME/ferryd.log)"
bin/ferryd >"$FERRY_HOME/ferryd.log" 2>&1 &
pid=$!
cleanup() {
	if [ -n "${DEPLOYED:-}" ]; then
		say "ferry deployments stop 1   (drains, stops the replicas and HAProxy; start brings it back)"
		bin/ferry deployments stop 1 || true
	fi
	say "stopping ferryd and the embedded PostgreSQL"
	kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	bin/ferryd db stop || true
}
trap cleanup EXIT
for _ in $(seq 1 300); do
	# readyz: the API answers at once, the database (started, migrated) a moment later
	curl -fsS "$FERRY_URL/readyz" >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || { cat "$FERRY_HOME/ferryd.log"; exit 1; }
	sleep 0.1
done
grep -E 'PostgreSQL|listening' "$FERRY_HOME/ferryd.log" || true

# step_state RUN STEP: the step's state, from `ferry get -o json`
step_state() {
	bin/ferry get "$1" -o json | /usr/bin/python3 -c '
import json, sys
run = json.load(sys.stdin)
print(next((s["state"] for s in run["steps"] if s["name"] == sys.argv[1]), "?"))' "$2"
}

# one_run N: submit the digits pipeline, do the person's part (continue the
# label step), follow it to the end and show what it produced.
one_run() {
	local id i
	say "run $1: ferry submit workflows/digits.yaml"
	id=$(bin/ferry submit workflows/digits.yaml | head -1)
	echo "run $id started"
	for i in $(seq 1 100); do
		[ "$(step_state "$id" label)" = waiting ] && break
		sleep 0.1
	done
	bin/ferry get "$id"

	say "run $1: the label step waits for a person; its task:"
	bin/ferry logs "$id" label

	say "run $1: ferry continue $id label --data '{\"reviewed_by\": \"demo\", \"approved\": true}'"
	bin/ferry continue "$id" label --data '{"reviewed_by": "demo", "approved": true}'

	say "run $1: ferry watch $id"
	set +e
	bin/ferry watch "$id"
	rc=$?
	set -e
	say "run $1: ferry get $id"
	bin/ferry get "$id"
	if [ "$rc" -ne 0 ]; then
		echo "demo: run $id did not succeed; its logs:" >&2
		bin/ferry logs "$id" >&2 || true
		exit 1
	fi
	RUN_ID=$id
}

say "ferry validate workflows/digits.yaml"
bin/ferry validate workflows/digits.yaml

one_run 1
first=$RUN_ID
say "ferry logs $first evaluate   (scored on the held-out images)"
bin/ferry logs "$first" evaluate

one_run 2
second=$RUN_ID

say "ferry models versions digits"
bin/ferry models versions digits
say "ferry models get digits production"
bin/ferry models get digits production

DEPLOYED=1
say "ferry deployments get 1   (0.0.1 keeps 80%, the new 0.0.2 takes 20%)"
bin/ferry deployments get 1
front=$(bin/ferry deployments get 1 -o json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["url"])')

# predict N: N real predictions of sample.json through the front address; prints the split
predict() {
	/usr/bin/python3 - "$front" "$1" workflows/digits/sample.json <<'PY'
import collections, json, sys, urllib.request
url, n, body = sys.argv[1] + "/v2/models/digits/infer", int(sys.argv[2]), open(sys.argv[3], "rb").read()
seen, label = collections.Counter(), None
for _ in range(n):
    req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    ans = json.load(urllib.request.urlopen(req, timeout=10))
    seen[ans.get("model_version", "?")] += 1
    label = ans["outputs"][0]["data"][0]
print("predicted digit %s; served by: %s" % (label, ", ".join("%s %d%%" % (v, 100 * k // n) for v, k in sorted(seen.items()))))
PY
}
say "200 predictions through the front address $front"
predict 200
say "ferry deployments predict 1 workflows/digits/sample.json   (the online prediction test)"
bin/ferry deployments predict 1 workflows/digits/sample.json
say "ferry deployments promote 1 0.0.2"
bin/ferry deployments promote 1 0.0.2
say "200 predictions after the promote"
predict 200
deadline=$(bin/ferry deployments get 1 -o json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["deadline"])')
echo "auto-stop: the deployment stops at $deadline unless extended (ferry deployments extend 1 2h)"

blobs=$(find "$FERRY_HOME/artifacts/sha256" -type f | wc -l)
say "demo finished"
echo "run $first and run $second succeeded; run $second's train step came from the step cache"
echo "(nothing changed), so both versions share one stored artifact: $blobs blob(s) in $FERRY_HOME/artifacts."
echo "Try: bin/ferryd &  then  bin/ferry submit workflows/digits.yaml -p C=1 --watch"

#!/usr/bin/env bash
# make demo: start the embedded PostgreSQL and ferryd, run the digits
# pipeline (label → train → evaluate → register → deploy) twice through the
# daemon with the CLI: the person's step is continued from the CLI, the
# second run reuses the cached training, registers the next version and
# deploys it beside the first at 20% of the traffic. Real predictions go
# through the deployment's front address (HAProxy), the split is shown, the
# new version is promoted, and the auto-stop deadline printed. Then the
# deployment, ferryd and PostgreSQL are stopped.
#
# Then the retraining story: the workflow is registered, so its data
# trigger watches workflows/digits/data/incoming and its nightly schedule is
# on. A batch of new labelled samples is dropped there: the trigger starts a
# run, which retrains on them, passes the gate against production and
# deploys version 0.0.3. A bad batch (every 3 labelled 8) is dropped next:
# its run fails the gate, and nothing is registered or deployed.
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

# the data trigger's folder: what an earlier demo dropped there is gone first
INCOMING=workflows/digits/data/incoming
rm -f "$INCOMING"/batch-*.csv "$INCOMING"/.batch-*

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
	rm -f "$INCOMING"/batch-*.csv "$INCOMING"/.batch-*
	say "stopping ferryd and the embedded PostgreSQL"
	kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	bin/ferryd db stop || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM # Ctrl-C (DEMO_KEEP=1 waits for it): the cleanup runs
for _ in $(seq 1 300); do
	# readyz: the API answers at once, the database (started, migrated) a moment later
	curl -fsS "$FERRY_URL/readyz" >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || { cat "$FERRY_HOME/ferryd.log"; exit 1; }
	sleep 0.1
done
grep -E 'PostgreSQL|listening' "$FERRY_HOME/ferryd.log" || true
say "the web console: open $FERRY_URL/ui/ and paste the token"
echo "token: ${FERRY_API_TOKEN:-$(cat "$FERRY_HOME/api-token" 2>/dev/null)}"

# step_state RUN STEP: the step's state, from `ferry get -o json`
step_state() {
	bin/ferry get "$1" -o json | /usr/bin/python3 -c '
import json, sys
run = json.load(sys.stdin)
print(next((s["state"] for s in run["steps"] if s["name"] == sys.argv[1]), "?"))' "$2"
}

# one_run N [RUN]: submit the digits pipeline (or take RUN, started by a
# trigger), do the person's part (continue the label step), follow it to
# the end and show what it produced. EXPECT=failed: it must fail (the gate).
one_run() {
	local id i
	if [ -n "${2:-}" ]; then
		id=$2
	else
		say "run $1: ferry submit --workflow digits"
		id=$(bin/ferry submit --workflow digits | head -1)
		echo "run $id started"
	fi
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
	if [ "${EXPECT:-succeeded}" = failed ]; then
		[ "$rc" -ne 0 ] || { echo "demo: run $id should have failed its gate" >&2; exit 1; }
	elif [ "$rc" -ne 0 ]; then
		echo "demo: run $id did not succeed; its logs:" >&2
		bin/ferry logs "$id" >&2 || true
		exit 1
	fi
	RUN_ID=$id
}

say "ferry validate workflows/digits.yaml"
bin/ferry validate workflows/digits.yaml
say "ferry workflow register workflows/digits.yaml   (runs by name; its schedule and data trigger are on)"
bin/ferry workflow register workflows/digits.yaml

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

# drop FILE GENERATOR-ARGS: a batch written by new_batch.py, under a temporary name and renamed
drop() {
	/usr/bin/python3 workflows/digits/new_batch.py "${@:2}" >"$INCOMING/.$1.part"
	mv "$INCOMING/.$1.part" "$INCOMING/$1"
	echo "$(($(wc -l <"$INCOMING/$1") - 1)) labelled images in $INCOMING/$1"
}

# triggered AFTER: the id of the first run the data trigger started after run AFTER
triggered() {
	local id
	for _ in $(seq 1 300); do
		id=$(bin/ferry list -o json | /usr/bin/python3 -c '
import json, sys
runs = [r["id"] for r in json.load(sys.stdin)["runs"] if r["trigger"] == "data" and r["id"] > int(sys.argv[1])]
print(min(runs) if runs else "")' "$1")
		[ -n "$id" ] && { echo "$id"; return 0; }
		sleep 0.2
	done
	echo "demo: the data trigger started no run" >&2
	exit 1
}

say "retraining: new labelled samples land in $INCOMING (the data trigger waits for 5 s of quiet)"
drop batch-002.csv --count 300
third=$(triggered "$second")
echo "the data trigger started run $third"
one_run 3 "$third"
say "ferry models versions digits   (0.0.3 trained on the new samples, past the gate, now production)"
bin/ferry models versions digits
say "ferry deployments get 1   (0.0.3 takes 20%)"
bin/ferry deployments get 1

say "a bad batch: every 3 of the training images labelled 8"
drop batch-003.csv --mislabelled
fourth=$(triggered "$third")
echo "the data trigger started run $fourth"
EXPECT=failed one_run 4 "$fourth"
say "ferry models get digits production   (still 0.0.3: the gate kept the bad model out)"
bin/ferry models get digits production
say "ferry schedules list   (the nightly retraining, 03:00 Europe/Berlin)"
bin/ferry schedules list

blobs=$(find "$FERRY_HOME/artifacts/sha256" -type f | wc -l)
say "demo finished"
echo "run $first and run $second succeeded; run $second's train step came from the step cache"
echo "(nothing changed), so both versions share one stored artifact: $blobs blob(s) in $FERRY_HOME/artifacts."
echo "run $third, started by new data, retrained and deployed 0.0.3; run $fourth, started by a bad"
echo "batch, failed its gate and registered nothing."
echo "Try: bin/ferryd &  then  bin/ferry submit workflows/digits.yaml -p C=1 --watch"
if [ -n "${DEMO_KEEP:-}" ] && kill -0 "$pid" 2>/dev/null; then
	# make demo DEMO_KEEP=1: the daemon, its runs and deployment stay for the console until Ctrl-C
	say "the console stays open at $FERRY_URL/ui/ (token above); Ctrl-C stops ferryd and PostgreSQL"
	wait "$pid" || true
fi

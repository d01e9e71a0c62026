# Deployments (issue 12), randomized: a few hundred traffic changes,
# promotes and rollbacks through the API, mixed at random with HAProxy
# reloads, HAProxy kill -9 and daemon kill -9; after every change the
# database must hold the weights a model of the API's rules predicts, and
# HAProxy (GET …/deployments/1 "haproxy") must serve exactly the database's
# servers and weights; at the end a 0% version gets no request at all.
#
# Replay a failure with its seed (printed first): DEPLOY_SEED=N
# tests/integration/run.sh test_deploy_random_changes_agree_with_haproxy.
# DEPLOY_CHANGES sets how many changes (default 150 in make test, whose time
# is bounded; make fuzz runs 1,000). Uses t_deploy.sh's
# helpers (deploy_up, deploy_wf, count_versions), sourced beside this file.
# In group deploy2 (run.sh), beside half of t_deploy.sh's tests, with their
# FERRY_DEPLOY_PORTS (t_deploy.sh's group_setup_deploy2).
# group: deploy2

# rand_driver: writes the Python driver that applies changes and checks them
# (one process per batch, one keep-alive connection: a few ms a change).
#   rand.py change URL STATE SEED N   N random changes, each checked at once
#   rand.py agree URL SECONDS         waits (bounded) until HAProxy equals the database
# STATE is a JSON file carrying the model between batches: the weights the
# database must hold and the split a rollback returns to.
rand_driver() {
	cat >"$FERRY_HOME/rand.py" <<'PY'
import http.client, json, os, random, sys, time
from urllib.parse import urlparse

TOKEN = os.environ["FERRY_API_TOKEN"]
SCALE = 250  # DEPLOY_HAP_SCALE: HAProxy weight of a version at 100%

class Api:
    def __init__(self, url):
        u = urlparse(url)
        self.host, self.port = u.hostname, u.port
        self.c = http.client.HTTPConnection(self.host, self.port, timeout=15)

    def call(self, method, path, body=None):
        h = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json", "X-Ferry-Actor": "random"}
        for attempt in (0, 1):  # one retry on a closed keep-alive connection
            try:
                self.c.request(method, path, json.dumps(body) if body is not None else None, h)
                r = self.c.getresponse()
                text = r.read()
                return r.status, json.loads(text) if text else None
            except (http.client.HTTPException, ConnectionError):
                self.c.close()
                self.c = http.client.HTTPConnection(self.host, self.port, timeout=15)
                if attempt:
                    raise

def serving(d):
    return [v for v in d["versions"] if v["state"] == "serving"]

def mismatch(d):
    """What differs between HAProxy and the database for deployment d; None when they agree."""
    want = {}
    for v in serving(d):
        healthy = [r for r in v["replica_list"] if r["health"] == "healthy"]
        for r in v["replica_list"]:
            share = SCALE * v["weight"] // 100
            w = 0 if r["health"] != "healthy" or v["weight"] == 0 else max(1, (share + len(healthy) // 2) // len(healthy))
            want["v%d-r%d" % (v["ord"], r["idx"])] = (r["port"], w, "ready")
    got = {s["server"]: (s["port"], s["weight"], s["state"]) for s in d.get("haproxy", []) if s["frontend"] == d["name"]}
    if want == got:
        return None
    return "database %s, haproxy %s" % (sorted(want.items()), sorted(got.items()))

def share(w, total):
    """deploy.c's share(): total in proportion to w, largest remainder first, ties to the lower index."""
    s = sum(w)
    out = [x * total // s for x in w]
    rem = [x * total % s for x in w]
    for _ in range(total - sum(out)):
        best = max(range(len(w)), key=lambda i: (rem[i], -i))
        out[best] += 1
        rem[best] = -1
    return out

def weights_set(cur, i, t):
    """deploy.c's deploy_weights_set(): version i gets t, the others share the rest in proportion."""
    others = [x for j, x in enumerate(cur) if j != i]
    if not others:
        return [100]
    if sum(others) == 0:
        out = [0] * len(cur)
        out[max(j for j in range(len(cur)) if j != i)] = 100 - t
    else:
        got = iter(share(others, 100 - t))
        out = [t if j == i else next(got) for j in range(len(cur))]
    out[i] = t
    return out

def apply_traffic(names, cur, want):
    """The weights store_deploy_weights() writes for want, or None when it must refuse (a 400)."""
    if any(k not in names for k in want):
        return None
    if len(want) == 1:
        (k, t), = want.items()
        return weights_set(cur, names.index(k), t)
    if len(want) != len(names) or sum(want.values()) != 100:
        return None
    return [want[k] for k in names]

def random_split(rng, n):
    """n integer percentages summing to 100, often with zeros and a 100."""
    kind = rng.random()
    if kind < 0.25:
        out = [0] * n
        out[rng.randrange(n)] = 100
        return out
    cuts = sorted(rng.randint(0, 100) for _ in range(n - 1))
    out = [b - a for a, b in zip([0] + cuts, cuts + [100])]
    if kind < 0.5:  # force a zero somewhere
        z = rng.randrange(n)
        out[(z + 1) % n] += out[z]
        out[z] = 0
    return out

def change(url, state_file, seed, n):
    rng = random.Random(seed)
    api = Api(url)
    st = json.load(open(state_file))
    names, cur, before = st["names"], st["weights"], st["before"]
    counts = st.setdefault("counts", {})
    for step in range(n):
        r = rng.random()
        if before is None and 0.75 <= r < 0.95:
            # not before a change of ours: this model does not track the deploy steps'
            # splits (test_deploy_rollback_after_third_version covers that rollback)
            r -= 0.75
        if r < 0.35:
            v = rng.choice(names)
            t = rng.choice([0, 100, rng.randint(0, 100), rng.randint(0, 100)])
            body = {"traffic": {v: t}}
            op, want = "traffic1", apply_traffic(names, cur, {v: t})
        elif r < 0.60:
            split = random_split(rng, len(names))
            body = {"traffic": dict(zip(names, split))}
            op, want = "split", split
        elif r < 0.75:
            v = rng.choice(names)
            body = {"action": "promote", "version": v}
            op, want = "promote", apply_traffic(names, cur, {v: 100})
        elif r < 0.95:
            body = {"action": "rollback"}
            op, want = "rollback", apply_traffic(names, cur, before) if before else None
        else:  # refused, and nothing changes: a sum that is not 100, or 101
            if rng.random() < 0.5 and len(names) > 1:
                split = random_split(rng, len(names))
                split[0] += rng.randint(1, 20)
                body = {"traffic": dict(zip(names, split))}
            else:
                body = {"traffic": {rng.choice(names): 101}}
            op, want = "invalid", None
        code, d = api.call("PATCH", "/api/v1/deployments/1", body)
        what = "change %d (%s %s)" % (step, op, json.dumps(body))
        if want is None:
            expect = 409 if op == "rollback" and not before else 400
            if code != expect:
                sys.exit("%s: expected %d, got %d %s" % (what, expect, code, d))
        else:
            if code != 200:
                sys.exit("%s: expected 200, got %d %s" % (what, code, d))
            if op != "rollback":
                before = dict(zip(names, cur))
            cur = want
        counts[op] = counts.get(op, 0) + 1
        got = [v["weight"] for v in serving(d)] if code == 200 else None
        code, d = api.call("GET", "/api/v1/deployments/1")
        db = [v["weight"] for v in serving(d)]
        if [v["version"] for v in serving(d)] != names or db != cur or (got is not None and got != cur):
            sys.exit("%s: the database holds %s (PATCH answered %s), the model %s" % (what, db, got, cur))
        # a PATCH that changed something answers once the change is applied: HAProxy
        # has it now. A refused one applies nothing, so after an HAProxy kill -9 the
        # front may stay down until the next reconcile round (2 s): it only has to agree soon.
        m = m0 = mismatch(d)
        if m and want is None:
            t0 = time.time()
            while m and time.time() - t0 < 5:
                time.sleep(0.1)
                m = mismatch(api.call("GET", "/api/v1/deployments/1")[1])
            if m:
                sys.exit("%s: refused, and HAProxy still differs from the database 5 s later: %s" % (what, m))
        elif m:
            t0 = time.time()
            while m and time.time() - t0 < 5:
                time.sleep(0.1)
                m = mismatch(api.call("GET", "/api/v1/deployments/1")[1])
            sys.exit("%s: answered 200 but HAProxy differs from the database%s: %s" %
                     (what, " for %.1f s" % (time.time() - t0) if m else " (agreed %.1f s later)" % (time.time() - t0), m0))
    st.update(weights=cur, before=before)
    json.dump(st, open(state_file, "w"))
    print("weights %s" % json.dumps(dict(zip(names, cur))))

def agree(url, secs):
    api = Api(url)
    t0 = time.time()
    while True:
        code, d = api.call("GET", "/api/v1/deployments/1")
        m = mismatch(d) if code == 200 else "GET answered %d" % code
        if m is None:
            print("agree after %.1f s" % (time.time() - t0))
            return
        if time.time() - t0 > secs:
            sys.exit("HAProxy differs from the database after %.0f s: %s" % (secs, m))
        time.sleep(0.1)

def init(url, state_file):
    code, d = Api(url).call("GET", "/api/v1/deployments/1")
    vs = serving(d)
    json.dump({"names": [v["version"] for v in vs], "weights": [v["weight"] for v in vs], "before": None},
              open(state_file, "w"))

cmd = sys.argv[1]
if cmd == "change":
    change(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
elif cmd == "agree":
    agree(sys.argv[2], float(sys.argv[3]))
elif cmd == "init":
    init(sys.argv[2], sys.argv[3])
PY
}

# haproxy_down: kill -9 of this home's HAProxy, master and workers
haproxy_down() {
	local master
	master=$(cat "$FERRY_HOME/haproxy/haproxy.pid" 2>/dev/null) || true
	[ -z "$master" ] || kill -9 "$master" 2>/dev/null || true
	pkill -9 -f "haproxy .*$FERRY_HOME/haproxy" 2>/dev/null || true
}

# haproxy_reload: kill -USR2 of the master, then waits (bounded) for a new
# worker, so that what is checked next is the reloaded HAProxy's
haproxy_reload() {
	local master old p
	master=$(cat "$FERRY_HOME/haproxy/haproxy.pid") || fail "no HAProxy pid file"
	old=" $(pgrep -P "$master" | tr '\n' ' ')"
	kill -USR2 "$master" || fail "cannot signal HAProxy's master $master"
	for _ in $(seq 1 50); do
		for p in $(pgrep -P "$master"); do
			case $old in *" $p "*) ;; *) return 0 ;; esac
		done
		sleep 0.1
	done
	fail "HAProxy's master $master started no new worker within 5 s of a reload"
}

# leader_again: the restarted daemon elected leader (bounded), and one of its
# reconcile rounds (every 2 s) run, so what is checked next is what it made
leader_again() {
	for _ in $(seq 1 80); do
		grep -q "elected leader" "$FERRY_HOME/ferryd-a.log" && { sleep 2.2; return 0; }
		sleep 0.1
	done
	fail "the restarted daemon was not elected leader within 8 s"
}

test_deploy_random_changes_agree_with_haproxy() {
	local seed=${DEPLOY_SEED:-$(($(date +%s%N) % 32768))} total=${DEPLOY_CHANGES:-150} applied=0 n r what
	local drv="$FERRY_HOME/rand.py" state="$FERRY_HOME/rand.state"
	echo "seed $seed (replay: DEPLOY_SEED=$seed)"
	RANDOM=$seed
	deploy_up
	start_daemon a
	# three versions: 0.0.1 (100%), then 0.0.2 and 0.0.3 at 20% each
	for c in 10 5 2; do
		id=$(submit "$(deploy_wf 20)" "{\"C\": \"$c\"}")
		wait_run "$id" succeeded 120
	done
	rand_driver
	python3 "$drv" init "$FERRY_URL" "$state"
	assert_eq "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["names"])' "$state")" \
		"['0.0.1', '0.0.2', '0.0.3']" "three versions serve"
	python3 "$drv" agree "$FERRY_URL" 5 >/dev/null || fail "HAProxy differs from the database before any change"
	local reloads=0 kills=0 restarts=0
	while [ $applied -lt "$total" ]; do
		n=$((RANDOM % 20 + 3))
		[ $((applied + n)) -le "$total" ] || n=$((total - applied))
		python3 "$drv" change "$FERRY_URL" "$state" "$RANDOM" "$n" >"$FERRY_HOME/rand.out" 2>&1 ||
			{ cat "$FERRY_HOME/rand.out"; fail "after $applied changes (seed $seed)"; }
		applied=$((applied + n))
		r=$((RANDOM % 4))
		case $r in
		0) what="HAProxy reload (USR2)"; reloads=$((reloads + 1)); haproxy_reload ;;
		3) what="HAProxy reload (USR2), not waited for"; reloads=$((reloads + 1))
		   kill -USR2 "$(cat "$FERRY_HOME/haproxy/haproxy.pid")" || fail "cannot signal HAProxy's master" ;;
		1) what="HAProxy kill -9"; kills=$((kills + 1)); haproxy_down ;;
		2) what="daemon kill -9 and restart"; restarts=$((restarts + 1))
		   stop_daemon a KILL; start_daemon a ;;
		esac
		# half the time the next changes come at once, while HAProxy is coming back
		if [ $((RANDOM % 2)) = 0 ]; then
			[ $r != 2 ] || leader_again
			[ $r != 3 ] || sleep 0.5
			out=$(python3 "$drv" agree "$FERRY_URL" 8) ||
				{ echo "$out"; fail "after $applied changes and a $what (seed $seed)"; }
			echo "$applied changes, $what: $(tail -1 "$FERRY_HOME/rand.out"), $out"
		else
			echo "$applied changes, $what: $(tail -1 "$FERRY_HOME/rand.out"), changes follow at once"
		fi
	done
	out=$(python3 "$drv" agree "$FERRY_URL" 8) || { echo "$out"; fail "at the end (seed $seed)"; }
	echo "$reloads reloads, $kills HAProxy kills, $restarts daemon restarts; counts $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["counts"])' "$state")"
	# the end: one version at 0%, the others share; requests go only where weights say
	api PATCH /api/v1/deployments/1 '{"traffic": {"0.0.1": 60, "0.0.2": 0, "0.0.3": 40}}'
	assert_eq "$CODE" 200 "the last split: $BODY"
	python3 "$drv" agree "$FERRY_URL" 5 >/dev/null || fail "HAProxy differs from the database after the last split"
	out=$(count_versions 400)
	echo "$out" | tr '\n' ' '; echo
	assert_match "$out" "failed 0" "no failed request"
	assert_eq "$(echo "$out" | awk '$1 == "0.0.2" {print $2}')" "" "the 0% version got requests"
	v1=$(echo "$out" | awk '$1 == "0.0.1" {print $2}'); v3=$(echo "$out" | awk '$1 == "0.0.3" {print $2}')
	[ "${v1:-0}" -gt 150 ] && [ "${v3:-0}" -gt 80 ] || fail "the 60/0/40 split came out $v1/0/$v3"
}

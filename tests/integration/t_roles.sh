# Roles decided per route, walked, and who did what kept where it cannot
# be lost or forged.
#
# The walk: every operation of the served OpenAPI
# document (generated from the route table: each declares x-ferry-role) is
# called with no token and with a viewer's, an operator's, a deployer's and an admin's;
# every CLI verb that calls the API is run with each role too. A role below
# the route's is answered 401 (no token) or 403 forbidden naming the role
# it takes; a role at or above it never is. On 058d658 an operator reached
# deployments PATCH/DELETE (promote moved production), predict, schedules
# POST/PATCH/DELETE and triggers PATCH: those rows now say admin, and the
# walk fails for any row whose answer disagrees with what it declares.

roles_tokens() {
	local r
	for r in viewer operator deployer admin; do
		ferryd token create "role-$r" --role "$r" >"$FERRY_HOME/token.$r" 2>/dev/null ||
			fail "cannot create the $r token"
	done
}

test_roles_every_route_walked_with_every_role() {
	roles_tokens # before the daemon reads its tokens
	start_daemon a
	python3 - "$FERRY_URL" "$FERRY_HOME" <<'PY' || fail "the walk found answers that disagree with the declared roles"
import json, re, sys, urllib.request, urllib.error
url, home = sys.argv[1:3]
tok = {r: open("%s/token.%s" % (home, r)).read().strip() for r in ("viewer", "operator", "deployer", "admin")}
rank = {"public": 0, "viewer": 1, "operator": 2, "deployer": 3, "admin": 4}
doc = json.load(urllib.request.urlopen(url + "/api/v1/openapi.json"))
# path parameters that name nothing: a walk must change nothing it reaches
fill = {"id": "999999", "step": "nostep", "name": "nomodel", "version": "1", "alias": "noalias", "file": "app.js", "sha256": "0" * 64}
bad, n = [], 0
for path, item in doc["paths"].items():
    for method, op in item.items():
        if method not in ("get", "post", "put", "patch", "delete"):
            continue
        need = op.get("x-ferry-role")
        if need not in rank:
            bad.append("%s %s declares no role (x-ferry-role %r)" % (method.upper(), path, need))
            continue
        target = url + re.sub(r"\{(\w+)\}", lambda m: fill[m.group(1)], path)
        for who in ("none", "viewer", "operator", "deployer", "admin"):
            n += 1
            hdr = {"Content-Type": "application/json"}
            if who != "none":
                hdr["Authorization"] = "Bearer " + tok[who]
            body = b"{}" if method in ("post", "put", "patch") else None
            req = urllib.request.Request(target, data=body, method=method.upper(), headers=hdr)
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    # an event stream never ends: its status says enough
                    code, text = r.status, "" if path.endswith("/stream") else r.read(4096).decode("utf-8", "replace")
            except urllib.error.HTTPError as e:
                code, text = e.code, e.read(4096).decode("utf-8", "replace")
            refused_token = code == 401 and '"unauthorized"' in text and "bearer token" in text
            refused_role = code == 403 and '"forbidden"' in text and "needs a token with role" in text
            mine = 0 if who == "none" else rank[who]
            if need == "public":
                if refused_token or refused_role:
                    bad.append("%s %s is public; %s got %d %s" % (method.upper(), path, who, code, text[:120]))
            elif who == "none":
                if not refused_token:
                    bad.append("%s %s without a token: %d %s" % (method.upper(), path, code, text[:120]))
            elif mine < rank[need]:
                if not (refused_role and ("role %s or above" % need) in text):
                    bad.append("%s %s needs %s; %s got %d %s" % (method.upper(), path, need, who, code, text[:120]))
            elif refused_token or refused_role:
                bad.append("%s %s needs %s; %s was refused: %d %s" % (method.upper(), path, need, who, code, text[:120]))
print("walked %d calls over %d operations" % (n, n // 5))
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
PY
}

# every CLI verb that calls the API, with each role: refused below its route's role, never at or above
test_roles_every_cli_verb_with_every_role() {
	roles_tokens # before the daemon reads its tokens
	start_daemon a
	id=$(submit "$ROOT/workflows/hello.yaml")
	wait_run "$id" succeeded 60
	echo '{"inputs": []}' >"$FERRY_HOME/req.json"
	# VERB ARGS… | least role (ids name nothing where the verb would change something)
	local calls=(
		"list|viewer" "get $id|viewer" "events $id|viewer" "logs $id greet|viewer" "monitor $id greet|viewer"
		"models list|viewer" "models versions nomodel|viewer" "deployments list|viewer" "schedules list|viewer"
		"triggers list|viewer" "cache|viewer" "workflow list|viewer" "audit|viewer"
		"submit $ROOT/workflows/hello.yaml|operator" "stop 999999|operator" "retry 999999|operator"
		"delete 999999|operator" "continue 999999 nostep|operator" "reject 999999 nostep|operator" "workflow register $ROOT/workflows/hello.yaml|operator"
		"models alias nomodel production 1|deployer" "deployments traffic 999999 1 50|deployer"
		"deployments promote 999999 1|deployer" "deployments stop 999999|deployer" "deployments delete 999999|deployer"
		"deployments extend 999999 never|deployer" "deployments rollback 999999|deployer"
		"deployments predict 999999 $FERRY_HOME/req.json|deployer" "schedules create noworkflow '0 * * * *'|admin"
		"schedules pause 999999|admin" "schedules delete 999999|admin" "triggers pause 999999|admin"
		"secrets list|viewer" "secrets set NOSECRET|admin" "secrets rm NOSECRET|admin"
		"queues|viewer" "queues show default|viewer" "queues create Noqueue|admin"
		"queues set noqueue --priority 1|admin" "queues delete noqueue|admin"
	)
	local c verb need who out bad=0 rank_need rank_who
	declare -A rank=([viewer]=1 [operator]=2 [deployer]=3 [admin]=4)
	for c in "${calls[@]}"; do
		verb=${c%|*} need=${c##*|}
		for who in viewer operator deployer admin; do
			out=$(eval "FERRY_API_TOKEN=\$(cat \"\$FERRY_HOME/token.$who\") \"\$ROOT/bin/ferry\" $verb" 2>&1 </dev/null) || true
			rank_need=${rank[$need]} rank_who=${rank[$who]}
			if [ "$rank_who" -lt "$rank_need" ]; then
				case $out in *"needs a token with role $need or above"*) ;;
				*) echo "ferry $verb needs $need; $who was not refused: $out" >&2; bad=1 ;; esac
			else
				case $out in *"needs a token with role"*|*unauthorized*|*"revoked bearer token"*)
					echo "ferry $verb needs $need; $who was refused: $out" >&2; bad=1 ;; esac
			fi
		done
	done
	[ "$bad" = 0 ] || fail "CLI verbs disagree with the roles"
	# the walk changed nothing: still one run of each, no schedule, no alias
	assert_eq "$(sql "SELECT count(*) FROM schedules")" 0 "no schedule made by a refused call"
	assert_eq "$(sql "SELECT string_agg(name, ' ') FROM queues")" default "no queue made or removed"
}

# as_role ROLE api…: the api helper with that named token
as_role() {
	local r=$1
	shift
	FERRY_API_TOKEN=$(cat "$FERRY_HOME/token.$r") api "$@"
}

# Schedule edits record who made them: before and after in the audit trail,
# updated_by on the schedule. On 058d658 an operator rewrote an admin's
# schedule to every minute with new params and nothing said who.
test_roles_schedule_edits_leave_a_trace() {
	roles_tokens # before the daemon reads its tokens
	start_daemon a
	body=$(jq -n --rawfile yaml "$ROOT/workflows/hello.yaml" '{yaml: $yaml, filename: "hello.yaml"}')
	as_role operator POST /api/v1/workflows "$body"
	assert_eq "$CODE" 201 "registered: $BODY"
	as_role admin POST /api/v1/schedules '{"workflow": "hello", "name": "nightly", "cron": "0 3 * * *", "timezone": "UTC"}'
	assert_eq "$CODE" 201 "created: $BODY"
	sid=$(echo "$BODY" | json 'j["id"]')
	as_role operator PATCH "/api/v1/schedules/$sid" '{"cron": "* * * * *", "params": {"who": "mallory"}}'
	assert_eq "$CODE" 403 "an operator may not edit a schedule: $BODY"
	assert_eq "$(sql "SELECT cron FROM schedules WHERE id = $sid")" "0 3 * * *" "unchanged"
	as_role admin PATCH "/api/v1/schedules/$sid" '{"cron": "0 4 * * *", "params": {"who": "night"}}'
	assert_eq "$CODE" 200 "an admin edits it: $BODY"
	as_role admin PATCH "/api/v1/schedules/$sid" '{"paused": true}'
	assert_eq "$CODE" 200 "paused"
	as_role viewer GET "/api/v1/schedules/$sid"
	assert_eq "$(echo "$BODY" | json 'j["updated_by"]')" role-admin "the schedule says who changed it last"
	as_role viewer GET "/api/v1/audit?object=schedule&object_id=$sid"
	assert_eq "$CODE" 200 "a viewer reads the audit trail"
	assert_eq "$(echo "$BODY" | json '[(e["action"], e["actor"]) for e in j["audit"]]')" \
		'[["paused", "role-admin"], ["changed", "role-admin"], ["created", "role-admin"]]' "every edit, newest first"
	assert_eq "$(echo "$BODY" | json '[e for e in j["audit"] if e["action"] == "changed"][0]["detail"]["before"]["cron"] + " -> " + [e for e in j["audit"] if e["action"] == "changed"][0]["detail"]["after"]["cron"]')" \
		"0 3 * * * -> 0 4 * * *" "before and after"
	assert_eq "$(echo "$BODY" | json '[e for e in j["audit"] if e["action"] == "changed"][0]["detail"]["after"]["params"]')" '{"who": "night"}' "the params"
	as_role admin DELETE "/api/v1/schedules/$sid"
	assert_eq "$CODE" 200 "deleted"
	as_role viewer GET "/api/v1/audit?object=schedule"
	assert_eq "$(echo "$BODY" | json 'j["audit"][0]["action"] + " " + j["audit"][0]["detail"]["name"]')" "deleted nightly" "the deletion stays"
	as_role viewer GET "/api/v1/audit?object=nothing"
	assert_eq "$CODE" 400 "a bad object"
	assert_eq "$(echo "$BODY" | json 'j["error"]["field"]')" object "named"
}

# A deleted run leaves a tombstone a viewer can list: on 058d658 deleting
# the run that inserted a token erased its audit trail with it.
test_roles_deleted_run_leaves_a_tombstone() {
	roles_tokens # before the daemon reads its tokens
	start_daemon a
	body=$(jq -n --rawfile yaml "$ROOT/workflows/hello.yaml" '{yaml: $yaml, filename: "hello.yaml", params: {who: "tombstone"}}')
	as_role operator POST /api/v1/runs "$body"
	assert_eq "$CODE" 201 "started: $BODY"
	id=$(echo "$BODY" | json 'j["id"]')
	wait_run "$id" succeeded 60
	as_role viewer DELETE "/api/v1/runs/$id"
	assert_eq "$CODE" 403 "a viewer may not delete"
	as_role operator DELETE "/api/v1/runs/$id"
	assert_eq "$CODE" 200 "deleted: $BODY"
	assert_eq "$(sql "SELECT count(*) FROM events WHERE run_id = $id")" 0 "the run's events went with it"
	as_role viewer GET "/api/v1/audit?object=run&object_id=$id"
	assert_eq "$(echo "$BODY" | json '[(e["action"], e["actor"], e["detail"]["workflow"], e["detail"]["state"], e["detail"]["started_by"], e["detail"]["params"]["who"]) for e in j["audit"]]')" \
		'[["deleted", "role-operator", "hello", "succeeded", "role-operator", "tombstone"]]' "the tombstone"
	out=$(FERRY_API_TOKEN=$(cat "$FERRY_HOME/token.viewer") "$ROOT/bin/ferry" audit --object run --id "$id") || fail "ferry audit: $out"
	assert_match "$out" "role-operator +run $id +deleted" "ferry audit shows it"
}

# X-Ferry-Actor is a note beside the built-in admin, from this machine only;
# a named token is its own actor whatever the header says.
test_roles_actor_header_only_beside_admin() {
	roles_tokens # before the daemon reads its tokens
	start_daemon a
	body=$(jq -n --rawfile yaml "$ROOT/workflows/hello.yaml" '{yaml: $yaml, filename: "hello.yaml"}')
	out=$(curl -sS -X POST -H "Authorization: Bearer $FERRY_API_TOKEN" -H 'X-Ferry-Actor: mallory' \
		--data-binary "$body" "$FERRY_URL/api/v1/runs")
	id=$(echo "$out" | json 'j["id"]')
	assert_eq "$(sql "SELECT actor FROM runs WHERE id = $id")" "admin (as mallory)" "the admin token's note, never mallory alone"
	out=$(curl -sS -X POST -H "Authorization: Bearer $(cat "$FERRY_HOME/token.operator")" -H 'X-Ferry-Actor: admin' \
		--data-binary "$body" "$FERRY_URL/api/v1/runs")
	id=$(echo "$out" | json 'j["id"]')
	assert_eq "$(sql "SELECT actor FROM runs WHERE id = $id")" role-operator "a named token cannot pass as admin"
	# from another address of this machine the header is not honoured: a daemon listening on all addresses
	local ip
	ip=$(ip -4 -o addr show scope global 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -1)
	[ -n "$ip" ] || { echo "# no non-loopback IPv4 address here: the remote case is not tried"; return 0; }
	stop_daemon a
	FERRY_LISTEN=0.0.0.0:0 start_daemon a
	port=${FERRY_URL##*:}
	out=$(curl -sS -X POST -H "Authorization: Bearer $FERRY_API_TOKEN" -H 'X-Ferry-Actor: mallory' \
		--data-binary "$body" "http://$ip:$port/api/v1/runs")
	id=$(echo "$out" | json 'j["id"]')
	assert_eq "$(sql "SELECT actor FROM runs WHERE id = $id")" admin "from $ip the header is ignored"
}

# A step's env is what a job gets, not what a viewer reads: on 058d658
# GET /runs/{id}/steps/{step} showed a viewer every env value.
test_roles_env_credentials_redacted() {
	roles_tokens
	start_daemon a
	f=$(wf envs <<'Y'
name: envs
steps:
  - name: s
    command: [sh, -c, 'printf "%s %s %s" "$API_TOKEN" "$DB_PASSWORD" "$MODE" > "$FERRY_OUTPUT_DIR/seen"']
    env: {API_TOKEN: tok-s3cr3t, DB_PASSWORD: pw-s3cr3t, AWS_SECRET_ACCESS_KEY: aws-s3cr3t, MODE: fast, KEYBOARD: us}
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 30
	assert_eq "$(cat "$FERRY_HOME/runs/$id/s/1/out/seen")" "tok-s3cr3t pw-s3cr3t fast" "the job got the real values"
	as_role viewer GET "/api/v1/runs/$id/steps/s"
	assert_eq "$CODE" 200 "a viewer reads the step"
	assert_eq "$(echo "$BODY" | json 'dict(sorted(j["spec"]["env"].items()))')" \
		'{"API_TOKEN": "[redacted]", "AWS_SECRET_ACCESS_KEY": "[redacted]", "DB_PASSWORD": "[redacted]", "KEYBOARD": "us", "MODE": "fast"}' \
		"credential-looking keys redacted, the rest shown"
	case $BODY in *s3cr3t*) fail "a secret value in the answer: $BODY" ;; esac
}

# What a run does for its submitter is checked against that one's role when
# it happens: on 058d658 an operator's `register` step with alias
# production moved production (the alias PUT answers an operator 403), and
# a deploy step moved traffic. An admin's run does both; a run an admin's
# schedule starts acts for that admin.
test_roles_submitter_checked_when_the_step_acts() {
	roles_tokens # before the daemon reads its tokens
	start_daemon a
	f=$(wf promo <<'Y'
name: promo
steps:
  - name: train
    kind: train
    command: [sh, -c, 'echo w >"$FERRY_OUTPUT_DIR/model.bin"']
  - name: register
    kind: register
    needs: [train]
    model: m
    alias: [production]
Y
)
	body=$(jq -n --rawfile yaml "$f" '{yaml: $yaml, filename: "promo.yaml"}')
	as_role operator POST /api/v1/runs "$body"
	assert_eq "$CODE" 201 "an operator submits: $BODY"
	id=$(echo "$BODY" | json 'j["id"]')
	wait_run "$id" failed 30
	assert_eq "$(step_col "$id" register reason)" \
		"moving alias production of m needs role deployer or above; run $id acts for role-operator, whose role is operator" "refused, saying who"
	assert_eq "$(sql "SELECT count(*) FROM model_versions")" 0 "nothing registered"
	as_role deployer POST /api/v1/runs "$body"
	id=$(echo "$BODY" | json 'j["id"]')
	wait_run "$id" succeeded 30
	assert_eq "$(sql "SELECT v.version FROM model_aliases a JOIN model_versions v ON v.id = a.version_id WHERE a.alias = 'production'")" 0.0.1 "a deployer's run moves it"
	# a token revoked after the submit: its run acts for no one when the step comes
	g=$(wf slowpromo <<'Y'
name: slowpromo
steps:
  - {name: wait, command: [sleep, "2"]}
  - {name: train, kind: train, needs: [wait], command: [sh, -c, 'echo v >"$FERRY_OUTPUT_DIR/model.bin"']}
  - {name: register, kind: register, needs: [train], model: m, alias: [production]}
Y
)
	as_role admin POST /api/v1/runs "$(jq -n --rawfile yaml "$g" '{yaml: $yaml}')"
	id=$(echo "$BODY" | json 'j["id"]')
	ferryd token revoke role-admin >/dev/null
	wait_run "$id" failed 30
	assert_match "$(step_col "$id" register reason)" "acts for role-admin, whose role is none" "revoked meanwhile"
	# a deploy step is an admin's action too
	as_role operator POST /api/v1/runs "$(jq -n --rawfile yaml "$(wf dep <<'Y'
name: dep
steps:
  - {name: train, kind: train, command: [sh, -c, 'echo d >"$FERRY_OUTPUT_DIR/model.bin"']}
  - {name: register, kind: register, needs: [train], model: m}
  - {name: deploy, kind: deploy, needs: [register], model: m, serve: [sh, -c, 'sleep 60'], sample: sample.json}
Y
)" '{yaml: $yaml}')"
	id=$(echo "$BODY" | json 'j["id"]')
	wait_run "$id" failed 30
	assert_eq "$(step_col "$id" register state)" succeeded "registering without an alias is an operator's"
	assert_match "$(step_col "$id" deploy reason)" "^deploying to m needs role deployer or above; run $id acts for role-operator" "a deploy by an operator"
}

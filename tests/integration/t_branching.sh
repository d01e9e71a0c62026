# Branching and always-run steps through a real daemon: when: (evaluated
# when the step would start, from params, outputs, metrics and the
# registry's production version), needs with if: any, a gate's on_fail:
# skip, and the steps under finally: after a success, a failure, a stop
# and a retry.

test_when_skips_a_branch_and_if_any_goes_on() {
	start_daemon a
	f=$(wf branch <<'Y'
name: branch
params: {go: true, mode: fast}
steps:
  - {name: a, command: [sh, -c, 'echo "{\"n\": 3, \"tag\": \"v1\"}" > "$FERRY_OUTPUT_DIR/outputs.json"']}
  - {name: big, needs: a, when: "steps.a.outputs.n > 5", command: [sh, -c, 'echo big']}
  - {name: after_big, needs: big, command: [sh, -c, 'echo never']}
  - {name: below_after, needs: after_big, command: [sh, -c, 'echo never']}
  - {name: either, needs: [a, {step: big, if: any}], command: [sh, -c, 'echo either']}
  - {name: go, needs: a, when: "params.go == true and {{steps.a.outputs.tag}} == 'v1' and params.mode != 'slow'", command: [sh, -c, 'echo go']}
  - {name: ask, kind: gate, needs: a, when: "params.mode == 'slow'"}
  - {name: broken, needs: a, when: "steps.a.outputs.tag >= 3", command: [sh, -c, 'echo never']}
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 30
	assert_eq "$(step_col "$id" big state)" skipped "the condition did not hold"
	assert_eq "$(step_col "$id" big reason)" 'when "steps.a.outputs.n > 5" did not hold (steps.a.outputs.n = 3)' "its reason shows the condition and the value"
	assert_eq "$(step_col "$id" after_big state)" skipped "what needs it is skipped"
	assert_eq "$(step_col "$id" after_big reason)" "upstream step big was skipped" "saying why"
	assert_eq "$(step_col "$id" below_after state)" skipped "and so on down"
	assert_eq "$(step_col "$id" either state)" succeeded "if: any takes a skipped step as done"
	assert_eq "$(step_col "$id" go state)" succeeded "a condition that holds lets the step run"
	grep -q 'ferry: when ".*" holds (params.go = "true", steps.a.outputs.tag = "v1", params.mode = "fast")' \
		"$FERRY_HOME/runs/$id/go/1/log" || { cat "$FERRY_HOME/runs/$id/go/1/log"; fail "the log says why it ran"; }
	assert_eq "$(step_col "$id" ask state)" skipped "a gate with a false condition never waits"
	# a condition that cannot be evaluated fails the step for good, naming the values
	assert_eq "$(step_col "$id" broken state)" failed "a comparison that does not fit"
	assert_match "$(step_col "$id" broken reason)" 'cannot compare "v1" \(a string\) >= 3 \(a number\)' "the reason names it"
	assert_eq "$(step_col "$id" broken attempts)" 1 "not retried"
	assert_eq "$(sql "SELECT count(*) FROM events WHERE run_id = $id AND kind = 'step.skipped'")" 4 "an event per skipped step"
	# the same without the broken step: skipped steps do not fail a run
	sed -i '/name: broken/d' "$f"
	id=$(submit "$f" '{"mode": "slow"}')
	wait_step "$id" ask waiting 30
	# the gate and go are claimed together or one after the other; a claimed
	# step is 'running' until the daemon has evaluated its condition
	wait_step "$id" go skipped 30
	assert_eq "$(step_col "$id" go reason)" "when \"params.go == true and {{steps.a.outputs.tag}} == 'v1' and params.mode != 'slow'\" did not hold (params.go = \"true\", steps.a.outputs.tag = \"v1\", params.mode = \"slow\")" \
		"params.mode != 'slow' did not hold, its reason says"
	assert_eq "$(step_col "$id" ask deps_pending)" 0 "the gate waits for its person once its condition held"
	"$ROOT/bin/ferry" continue "$id" ask >/dev/null || fail "continue"
	wait_run "$id" succeeded 30
}

# the issue's case: a candidate not better than production is not deployed, and the run succeeds
test_when_skips_a_deploy_not_better_than_production() {
	start_daemon a
	cat >"$FERRY_HOME/train.sh" <<'S'
echo "model $F1" > "$FERRY_OUTPUT_DIR/model"
echo "{\"f1\": $F1}" > "$FERRY_OUTPUT_DIR/metrics.json"
S
	f=$(wf prod <<Y
name: prod
params: {f1: "0.9"}
steps:
  - {name: train, kind: train, command: [sh, $FERRY_HOME/train.sh], env: {F1: "{{params.f1}}"}}
  - {name: register, kind: register, needs: train, model: m, alias: [production]}
Y
)
	id=$(submit "$f" '{"f1": "0.93"}')
	wait_run "$id" succeeded 30
	f=$(wf cand <<Y
name: cand
params: {f1: "0.9"}
steps:
  - {name: train, kind: train, command: [sh, $FERRY_HOME/train.sh], env: {F1: "{{params.f1}}"}}
  - {name: register, kind: register, needs: train, model: m}
  - name: deploy
    kind: deploy
    needs: register
    model: m
    serve: [/bin/false]
    when: "{{steps.train.metrics.f1}} >= production.f1"
  - {name: tell, needs: [{step: deploy, if: any}], command: [sh, -c, 'echo told']}
Y
)
	id=$(submit "$f" '{"f1": "0.91"}')
	wait_run "$id" succeeded 30
	assert_eq "$(step_col "$id" deploy state)" skipped "not better than production: not deployed"
	assert_eq "$(step_col "$id" deploy reason)" 'when "{{steps.train.metrics.f1}} >= production.f1" did not hold (steps.train.metrics.f1 = 0.91, production.f1 = 0.93 (m 0.0.1))' "the values in the reason"
	assert_eq "$(step_col "$id" tell state)" succeeded "what takes any outcome goes on"
	assert_eq "$(sql "SELECT count(*) FROM deployments")" 0 "nothing deployed"
	api GET "/api/v1/runs/$id"
	assert_eq "$(echo "$BODY" | json 'j["state"]')" succeeded "the API says the run succeeded"
}

test_gate_on_fail_skip_lets_the_run_succeed() {
	start_daemon a
	f=$(wf soft <<'Y'
name: soft
steps:
  - {name: evaluate, kind: evaluate, command: [sh, -c, 'echo "{\"accuracy\": 0.5}" > "$FERRY_OUTPUT_DIR/metrics.json"'],
     gate: {accuracy: ">= 0.9"}, on_fail: skip}
  - {name: publish, needs: evaluate, command: [sh, -c, 'echo never']}
  - {name: report, needs: [{step: evaluate, if: any}], command: [sh, -c, 'echo report']}
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 30
	assert_eq "$(step_col "$id" evaluate state)" skipped "a failed gate with on_fail: skip"
	assert_match "$(step_col "$id" evaluate reason)" "accuracy 0.5 < 0.9.*what needs it is skipped \(on_fail: skip\)" "the gate's reason"
	assert_eq "$(step_col "$id" evaluate "gate->0->>'passed'")" false "the gate's result is kept"
	assert_eq "$(step_col "$id" evaluate "metrics->>'accuracy'")" 0.5 "and the metrics"
	assert_eq "$(step_col "$id" publish state)" skipped "what needs it is skipped"
	assert_eq "$(step_col "$id" report state)" succeeded "if: any goes on"
}

test_finally_runs_after_success_failure_and_stop() {
	start_daemon a
	f=$(wf fin <<'Y'
name: fin
params: {fail: "no", nap: "0"}
steps:
  - {name: work, command: [sh, -c, 'echo "{\"n\": 7}" > "$FERRY_OUTPUT_DIR/outputs.json"; sleep $NAP; [ "$FAIL" = no ]'],
     env: {FAIL: "{{params.fail}}", NAP: "{{params.nap}}"}}
  - {name: more, needs: work, command: [sh, -c, 'echo more']}
finally:
  - {name: notify, command: [sh, -c, 'echo "state=$FERRY_RUN_STATE"']}
  - {name: report, when: "steps.work.outputs.n != null", command: [sh, -c, 'echo "n={{steps.work.outputs.n}}"']}
  - {name: tidy, needs: notify, command: [sh, -c, 'echo tidy; exit 3']}
Y
)
	# succeeded: the finally steps run after the rest; a failing one without fail_run is only reported
	id=$(submit "$f")
	wait_run "$id" succeeded 30
	assert_eq "$(cat "$FERRY_HOME/runs/$id/notify/1/log")" "state=succeeded" "FERRY_RUN_STATE"
	assert_eq "$(cat "$FERRY_HOME/runs/$id/report/1/log" | grep -v '^ferry: when')" "n=7" "an output of a step above"
	assert_eq "$(step_col "$id" tidy state)" failed "its failure is reported"
	assert_eq "$(sql "SELECT (SELECT started_at FROM steps WHERE run_id = $id AND name = 'notify') >= (SELECT finished_at FROM steps WHERE run_id = $id AND name = 'more')")" t "after every other step"
	assert_eq "$(sql "SELECT detail->>'body_state' FROM events WHERE run_id = $id AND kind = 'run.finally'")" succeeded "the run.finally event"
	# failed: they run all the same, and the run stays failed
	id=$(submit "$f" '{"fail": "yes"}')
	wait_run "$id" failed 30
	assert_eq "$(step_col "$id" more state)" skipped "below the failure"
	assert_eq "$(cat "$FERRY_HOME/runs/$id/notify/1/log")" "state=failed" "told the run failed"
	assert_eq "$(step_col "$id" report state)" skipped "a failed step has no outputs: its references are null"
	# a retry runs them again after what it re-runs
	"$ROOT/bin/ferry" retry "$id" >/dev/null || fail "retry"
	wait_run "$id" failed 30
	assert_eq "$(step_col "$id" notify attempts)" 2 "notify ran again"
	# stopped: ferry stop ends the work, the finally steps run, the run ends stopped
	id=$(submit "$f" '{"nap": "30"}')
	wait_step "$id" work running 30
	"$ROOT/bin/ferry" stop "$id" >/dev/null || fail "stop"
	wait_run "$id" stopped 30
	assert_eq "$(step_col "$id" notify state)" succeeded "the finally step ran after the stop"
	assert_match "$(cat "$FERRY_HOME/runs/$id/notify/1/log")" "^state=stopped" "told the run was stopped"
	assert_eq "$(step_col "$id" more state)" stopped "the rest stopped"
	# fail_run: a finally step's failure fails a run that succeeded
	f=$(wf fin3 <<'Y'
name: fin3
steps:
  - {name: work, command: [sh, -c, 'echo work']}
finally:
  - {name: check, command: [sh, -c, 'exit 3'], fail_run: true}
Y
)
	id=$(submit "$f")
	wait_run "$id" failed 30
	assert_eq "$(step_col "$id" work state)" succeeded "the work succeeded"
	assert_eq "$(step_col "$id" check state)" failed "the check did not"
}

test_finally_steps_stop_on_a_second_stop() {
	start_daemon a
	f=$(wf fin2 <<'Y'
name: fin2
steps:
  - {name: work, command: [sh, -c, 'sleep 30']}
finally:
  - {name: cleanup, command: [sh, -c, 'sleep 30']}
Y
)
	id=$(submit "$f")
	wait_step "$id" work running 30
	"$ROOT/bin/ferry" stop "$id" >/dev/null || fail "stop"
	wait_step "$id" cleanup running 30
	assert_eq "$(sql "SELECT state FROM runs WHERE id = $id")" running "running its finally steps"
	"$ROOT/bin/ferry" stop "$id" >/dev/null || fail "the second stop"
	wait_run "$id" stopped 30
	assert_eq "$(step_col "$id" cleanup state)" stopped "the second stop stops them"
}

test_foreach_fans_out_and_reduces_in_order() {
	start_daemon a
	f=$(wf fan <<'Y'
name: fan
steps:
  - {name: split, command: [/usr/bin/python3, -c, 'import json, os; json.dump({"shards": ["s%02d" % i for i in range(20)]}, open(os.environ["FERRY_OUTPUT_DIR"] + "/outputs.json", "w"))']}
  - name: work
    needs: split
    foreach: "{{steps.split.outputs.shards}}"
    max_parallel: 3
    command: [sh, -c, 'echo "{\"v\": \"{{item}}-$FERRY_ITEM_INDEX\"}" > "$FERRY_OUTPUT_DIR/outputs.json"; [ "$FERRY_ITEM" = "{{item}}" ]; sleep 0.1']
  - {name: reduce, needs: work, command: [sh, -c, 'echo "{{steps.work.outputs}}"']}
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 60
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL")" 20 "one child per item"
	assert_eq "$(step_col "$id" work state)" succeeded "the fan-out succeeded"
	assert_eq "$(step_col "$id" work reason)" "20 of 20 items succeeded" "its reason counts them"
	assert_eq "$(/usr/bin/python3 -c 'import json,sys; print([o["v"] for o in json.loads(sys.stdin.read())] == ["s%02d-%d" % (i, i) for i in range(20)])' < "$FERRY_HOME/runs/$id/reduce/1/log")" True "the reduce reads the items' outputs in item order"
	# max_parallel: never more than 3 items at once (attempts' intervals overlapping any one's start)
	assert_eq "$(sql "SELECT max(n) <= 3 FROM (SELECT (SELECT count(*) FROM attempts b JOIN steps c ON c.id = b.step_id
		WHERE c.parent_id = p.parent_id AND b.started_at <= a.started_at AND b.finished_at > a.started_at) AS n
		FROM attempts a JOIN steps p ON p.id = a.step_id WHERE p.run_id = $id AND p.parent_id IS NOT NULL) x")" t "at most max_parallel at once"
	api GET "/api/v1/runs/$id"
	assert_eq "$(echo "$BODY" | json '[s["name"] for s in j["steps"]]')" '["split", "work", "reduce"]' "the children are not listed"
	assert_eq "$(echo "$BODY" | json 'j["steps"][1]["items"]["total"]')" 20 "the fan-out's items"
	# its items, a page at a time
	api GET "/api/v1/runs/$id/steps/work/items?offset=5&limit=3"
	assert_eq "$CODE" 200 "the items"
	assert_eq "$(echo "$BODY" | json '[(i["index"], i["name"], i["item"], i["outputs"]["v"]) for i in j["items"]]')" \
		'[[5, "work[5]", "s05", "s05-5"], [6, "work[6]", "s06", "s06-6"], [7, "work[7]", "s07", "s07-7"]]' "a page in item order"
	api GET "/api/v1/runs/$id/steps/work/items?state=failed"
	assert_eq "$(echo "$BODY" | json 'len(j["items"])')" 0 "none failed"
	api GET "/api/v1/runs/$id/steps/split/items"
	assert_eq "$CODE" 404 "a step without foreach has no items"
	api GET "/api/v1/runs/$id/steps/work/items?limit=0"
	assert_eq "$CODE" 400 "a bad limit"
	# one item's spec is its parent's with its item
	api GET "/api/v1/runs/$id/steps/work%5B3%5D"
	assert_eq "$(echo "$BODY" | json '[j["spec"]["item"], j["spec"]["command"][0]]')" '["s03", "sh"]' "a child's spec"
}

# the issue's case: 1,000 items from an upstream list, max_parallel 8; each
# runs once and is cached, min_success decides, a new run takes them from
# the cache, a retry runs only the ones that failed, the reduce is in item
# order
test_foreach_thousand_items_cache_retry_min_success() {
	start_daemon a
	local marks; marks=$(mktemp -d /tmp/ferry-marks.XXXXXX)
	chmod 755 "$marks"
	for i in 7 107 507; do touch "$marks/fail-$i"; done
	f=$(wf thousand <<Y
name: thousand
steps:
  - {name: list, command: [/usr/bin/python3, -c, 'import json, os; json.dump({"items": list(range(1000))}, open(os.environ["FERRY_OUTPUT_DIR"] + "/outputs.json", "w"))']}
  - name: each
    needs: list
    foreach: "{{steps.list.outputs.items}}"
    max_parallel: 8
    min_success: 99%
    cache: true
    command: [sh, -c, '[ ! -e $marks/fail-\$FERRY_ITEM ] && echo "{\"sq\": \$((\$FERRY_ITEM * \$FERRY_ITEM))}" > "\$FERRY_OUTPUT_DIR/outputs.json"']
  - {name: total, needs: each, command: [/usr/bin/python3, -c, 'import json, sys; l = json.loads(sys.argv[1]); print(len(l), sum(o["sq"] for o in l if o), [i for i, o in enumerate(l) if o is None])', "{{steps.each.outputs}}"]}
Y
)
	# 99%: three failed items are few enough, and the reduce sees null in their places
	id=$(submit "$f")
	wait_run "$id" succeeded 300 # 1,000 jobs: 20 s alone, past 130 s on a loaded machine
	assert_eq "$(step_col "$id" each reason)" "997 of 1000 items succeeded (min_success 99%)" "enough of them"
	assert_eq "$(sql "SELECT count(*) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.parent_id IS NOT NULL")" 1000 "each item ran once"
	assert_eq "$(grep -v '^ferry: ' "$FERRY_HOME/runs/$id/total/1/log")" "1000 332564953 [7, 107, 507]" "null for the failed ones, in place"
	# 100%: a new run takes the 997 from the cache, the three fail again, and so does the fan-out
	sed 's/    min_success: 99%/    min_success: 100%/' "$f" >"$FERRY_HOME/all.yaml"
	id=$(submit "$FERRY_HOME/all.yaml")
	wait_run "$id" failed 300
	assert_eq "$(step_col "$id" each reason)" "997 of 1000 items succeeded" "100% not met"
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL AND cached_from IS NOT NULL")" 997 "the items that succeeded before, from the step cache"
	# a retry runs only the three
	rm -f "$marks"/fail-*
	"$ROOT/bin/ferry" retry "$id" >/dev/null || fail "retry"
	wait_run "$id" succeeded 60
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL AND attempts = 2")" 3 "the retry ran only the three that failed"
	assert_eq "$(sql "SELECT count(*) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.parent_id IS NOT NULL")" 1003 "no finished item ran again"
	assert_eq "$(grep -v '^ferry: ' "$FERRY_HOME/runs/$id/total/1/log")" "1000 332833500 []" "the reduce: every item's output, in order"
	rm -rf "$marks"
}

# early stopping: once an item that succeeded meets stop_when, the items not started are
# skipped (saying which item met it), the step succeeds with the best of those that ran
test_sweep_stop_when_stops_starting_items() {
	start_daemon a
	f=$(wf early <<'Y'
name: early
steps:
  - name: s
    sweep: {grid: {x: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}, select: {metric: score, goal: max}, stop_when: "score >= 0.9"}
    max_parallel: 1
    command: [sh, -c, 'if [ {{item.x}} -ge 4 ]; then s=1; else s=0.5; fi; echo "{\"score\": $s}" > "$FERRY_OUTPUT_DIR/metrics.json"']
  - {name: after, needs: s, command: [sh, -c, 'echo "best x={{steps.s.best.params.x}}"']}
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 60
	assert_eq "$(sql "SELECT string_agg(state, ',' ORDER BY item_index) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL")" \
		"succeeded,succeeded,succeeded,succeeded,skipped,skipped,skipped,skipped,skipped,skipped" "items 5-10 never started"
	assert_eq "$(sql "SELECT count(*) FROM attempts a JOIN steps s ON s.id = a.step_id WHERE s.run_id = $id AND s.parent_id IS NOT NULL")" 4 "four attempts"
	assert_eq "$(step_col "$id" 's[4]' reason)" "stop_when score >= 0.9 held for s[3] (score 1)" "a skipped item says why"
	assert_eq "$(step_col "$id" s reason)" "4 of 10 items succeeded, 6 not started (stop_when); best: s[3] with score 1.0 (max)" "the step's reason"
	assert_eq "$(grep -v '^ferry: ' "$FERRY_HOME/runs/$id/after/1/log")" "best x=4" "the best carried on"
	# a rule never met: every item runs
	sed -i 's/score >= 0.9/score >= 2/' "$f"
	id=$(submit "$f")
	wait_run "$id" succeeded 60
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL AND state = 'succeeded'")" 10 "all ten"
	# a bad rule is refused at submit, with its place
	sed -i 's/score >= 2/score >= production/' "$f"
	api POST /api/v1/runs "$(jq -n --rawfile yaml "$f" '{yaml: $yaml}')"
	assert_eq "$CODE" 400 "refused"
	assert_match "$BODY" 'stop_when .*compares with a number, not production' "saying why"
}

# a grid dimension from a param: the run's value, a JSON list or one value;
# one that is not a list fails the step, saying so, and the run with it
test_sweep_grid_from_params() {
	start_daemon a
	f=$(wf gridp <<'Y'
name: gridp
params: {x: "[1, 2]"}
steps:
  - name: s
    sweep: {grid: {x: "{{params.x}}", y: [a, b]}, select: {metric: score, goal: min}}
    command: [sh, -c, 'echo "{\"score\": {{item.x}}}" > "$FERRY_OUTPUT_DIR/metrics.json"; echo "x={{item.x}} y={{item.y}}"']
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 60
	assert_eq "$(sql "SELECT string_agg((spec->'item'->>'x') || (spec->'item'->>'y'), ' ' ORDER BY item_index) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL")" \
		"1a 1b 2a 2b" "the default's list"
	id=$(ferry submit "$f" -p 'x=[3, 0.5, 7]')
	wait_run "$id" succeeded 60
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL")" 6 "the run's list"
	assert_eq "$(step_col "$id" s "outputs->'best'->'item'->>'x'")" 0.5 "the lowest score"
	assert_eq "$(grep -v '^ferry: ' "$FERRY_HOME/runs/$id/s[2]/1/log")" "x=0.5 y=a" "rendered as written"
	id=$(ferry submit "$f" -p x=9)
	wait_run "$id" succeeded 60
	assert_eq "$(sql "SELECT string_agg(name, ' ' ORDER BY item_index) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL")" "s[0] s[1]" "one value"
	id=$(ferry submit "$f" -p 'x=[1, 2')
	wait_run "$id" failed 60
	assert_match "$(step_col "$id" s reason)" '^sweep grid x: params.x: not a JSON list' "the step says why"
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL")" 0 "no item written"
}

# the issue's case: a sweep on digits picks the best (C, gamma) and
# registers it — its accuracy is the leaderboard's maximum
test_sweep_on_digits_registers_the_best() {
	start_daemon a
	api POST /api/v1/runs "$(jq -n --rawfile yaml "$ROOT/workflows/digits-sweep.yaml" --arg workdir "$ROOT/workflows" \
		'{yaml: $yaml, filename: "digits-sweep.yaml", workdir: $workdir}')"
	assert_eq "$CODE" 201 "submitted: $BODY"
	id=$(echo "$BODY" | json 'j["id"]')
	wait_run "$id" succeeded 180
	assert_eq "$(sql "SELECT count(*) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL AND state = 'succeeded'")" 4 "one training per combination"
	best=$(sql "SELECT max((metrics->>'cv_accuracy')::float8) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL")
	assert_eq "$(step_col "$id" train "(outputs->'best'->'metrics'->>'cv_accuracy')::float8")" "$best" "the best is the leaderboard's maximum"
	assert_eq "$(step_col "$id" train "outputs->'leaderboard'->0->>'value'")" "$best" "and the leaderboard's first"
	assert_eq "$(step_col "$id" train "jsonb_array_length(outputs->'leaderboard')")" 4 "every candidate ranked"
	assert_eq "$(step_col "$id" train "(metrics->>'cv_accuracy')::float8")" "$best" "the step's metrics are the best's"
	bname=$(step_col "$id" train "outputs->'best'->>'name'")
	assert_match "$(step_col "$id" train reason)" "4 of 4 items succeeded; best: train\[[0-3]\] with cv_accuracy" "the reason names it"
	# what was registered is the best candidate's model, byte for byte
	model=$(sql "SELECT outputs->>'model' FROM steps WHERE run_id = $id AND name = '$bname'")
	assert_eq "$(sql "SELECT v.artifact FROM model_versions v JOIN models m ON m.id = v.model_id WHERE m.name = 'digits-sweep'")" "$(sha256sum "$model" | cut -d' ' -f1)" "the best model registered"
	# its params, as the step after it read them
	c=$(sql "SELECT spec->'item'->>'C' FROM steps WHERE run_id = $id AND name = '$bname'")
	g=$(sql "SELECT spec->'item'->>'gamma' FROM steps WHERE run_id = $id AND name = '$bname'")
	assert_eq "$(grep -v '^ferry: ' "$FERRY_HOME/runs/$id/report/1/log")" "best C=$c gamma=$g" "{{steps.train.best.params.…}}"
}

# a retry from above a fan-out whose list changed: every item runs again in
# an attempt of its own (never in an old attempt's directory, whose output
# files would be read as the new one's), the items past the new end are
# gone, the reduce reads the new list
test_foreach_retry_from_above_reruns_items_anew() {
	start_daemon a
	f=$(wf refan <<'Y'
name: refan
params: {n: "3"}
steps:
  - {name: split, command: [/usr/bin/python3, -c, 'import json, os, sys; json.dump({"l": list(range(int(sys.argv[1])))}, open(os.environ["FERRY_OUTPUT_DIR"] + "/outputs.json", "w"))', "{{params.n}}"]}
  - name: work
    needs: split
    foreach: "{{steps.split.outputs.l}}"
    command: [sh, -c, 'if [ "$FERRY_ITEM" = 2 ]; then echo stale > "$FERRY_OUTPUT_DIR/extra"; fi; echo "{\"v\": $FERRY_ITEM}" > "$FERRY_OUTPUT_DIR/outputs.json"']
  - {name: reduce, needs: work, command: [sh, -c, 'echo "{{steps.work.outputs}}"']}
Y
)
	id=$(submit "$f")
	wait_run "$id" succeeded 30
	"$ROOT/bin/ferry" retry "$id" --param n=2 >/dev/null || fail "retry with n=2"
	wait_run "$id" succeeded 30
	assert_eq "$(sql "SELECT string_agg(name || ':' || attempts, ',' ORDER BY item_index) FROM steps WHERE run_id = $id AND parent_id IS NOT NULL")" "work[0]:2,work[1]:2" "every item again, in a second attempt; item 2 gone"
	[ -d "$FERRY_HOME/runs/$id/work[0]/2" ] || fail "the new attempt has its own directory"
	assert_eq "$(grep -v '^ferry: ' "$FERRY_HOME/runs/$id/reduce/2/log")" '[{"v":0},{"v":1}]' "the reduce reads the new list"
	assert_eq "$(step_col "$id" work reason)" "2 of 2 items succeeded" "the fan-out counts the new list"
	# the item gone took its attempt with it (migration 0037: a statement trigger, not a foreign key)
	assert_eq "$(sql "SELECT count(*) FROM attempts a WHERE NOT EXISTS (SELECT 1 FROM steps s WHERE s.id = a.step_id)")" 0 "no attempt of a gone item left"
}

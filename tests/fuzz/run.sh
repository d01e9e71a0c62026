#!/usr/bin/env bash
# Builds every tests/fuzz/fuzz_NAME.c as a libFuzzer target (ASan + UBSan,
# leaks checked) into build/fuzz/, then runs each for FUZZ_SECONDS (default
# 30) over a scratch copy of its seed corpus tests/fuzz/corpus/NAME/, so the
# checked-in seeds never change. Exits non-zero if any target finds a crash,
# a leak, undefined behaviour, a timeout or runaway memory; the input that did
# it is left in build/fuzz/artifacts/NAME/ and the log in build/fuzz/NAME.log.
#
#   tests/fuzz/run.sh                  all targets, 30 s each
#   FUZZ_SECONDS=300 tests/fuzz/run.sh fuzz_yaml
#   build/fuzz/fuzz_yaml build/fuzz/artifacts/yaml/crash-…   replay one input
set -euo pipefail
cd "$(dirname "$0")/../.."

FUZZ_SECONDS=${FUZZ_SECONDS:-30}
FUZZ_CC=${FUZZ_CC:-clang}
OUT=build/fuzz
PG_INC=$(pg_config --includedir 2>/dev/null || echo /usr/include/postgresql)
SAN=address,undefined
CFLAGS=(-g -O1 -fno-sanitize-recover=all -fno-omit-frame-pointer -std=c11 -D_GNU_SOURCE
	-I. -Iorchestrator -I"$PG_INC")
# The config checks steps against the table of step kinds (kind.h), whose
# rows under steps/ hold the kinds' hooks: the targets link the whole
# engine, as bin/ferry does, built once with the sanitizers.
ENGINE_SRC=($(ls orchestrator/*/*.c steps/*.c | grep -v '^orchestrator/daemon/'))
GV_PLUGINS=$(pkg-config --variable=libdir libgvc 2>/dev/null || echo /usr/lib/x86_64-linux-gnu)/graphviz
LIBS=(-lpq -lyaml -ljansson -lcurl -lcrypto -lgit2 -licui18n -licuuc -licudata
	-L"$GV_PLUGINS" -Wl,-rpath,"$GV_PLUGINS" -lgvplugin_dot_layout -lgvplugin_core -lgvc -lcgraph -lpthread -lm)

if ! command -v "$FUZZ_CC" >/dev/null; then
	echo "fuzz: $FUZZ_CC not found (apt-get install -y clang libclang-rt-14-dev)" >&2
	exit 2
fi

# Dictionaries help the fuzzer past the schema: keys, kinds, template syntax.
write_dict() {
	case "$1" in
	yaml)
		printf '%s\n' '"name"' '"description"' '"params"' '"steps"' '"kind"' \
			'"needs"' '"command"' '"env"' '"image"' '"workdir"' '"timeout"' \
			'"retry"' '"limit"' '"backoff"' '"max_backoff"' '"default"' '"run"' \
			'"host"' '"{{"' '"}}"' '"params."' '"run.id"' '"steps."' '".outputs."' \
			'": "' '"- "' '"---"' '"&a "' '"*a"' '"ms"' '"1h30m"' '"\x0a  - "' \
			'"train"' '"evaluate"' '"gate"' '"label"' '"register"' '"cache"' \
			'"model"' '"dataset"' '"labels"' '"webhook"' '"on_timeout"' '"artifact"' \
			'"version"' '"alias"' '"true"' '"continue"' '"minor"' '"production"' \
			'">= "' '"< "' '"!="' '" + 0.01"' '"https://"' '"schedule"' '"triggers"' \
			'"cron"' '"timezone"' '"Europe/Berlin"' '"concurrency"' '"forbid"' '"catchup"' \
			'"max_catchup"' '"gap"' '"overlap"' '"data"' '"git"' '"path"' '"quiet"' \
			'"ignore"' '"repo"' '"branch"' '"*/5 * * * *"' '"@daily"' ;;
	metrics)
		printf '%s\n' '"accuracy"' '"precision"' '"recall"' '"f1"' '"mae"' '"mse"' '"rmse"' \
			'"{"' '"}"' '":"' '","' '"1e-3"' '"-0.5"' '"NaN"' '"\x0a"' '">="' '"<="' \
			'"=="' '"!="' '"production"' '" + "' '" - "' ;;
	watchpoints)
		printf '%s\n' '"nan_or_inf"' '"not "' '"decreasing"' '"increasing"' '" over "' \
			'" steps"' '">="' '"<="' '"* min"' '"* max"' '"* first"' '"1e-3"' '"\x0a"' \
			'"{\"step\": "' '"\"loss\": "' '"\"acc\": "' '"NaN"' '"Infinity"' \
			'"-Infinity"' '"\"nan\""' '"\"-inf\""' '"}\x0a"' '", "' ;;
	gpu)
		printf '%s\n' '"[N/A]"' '"[Not Supported]"' '", "' '"GPU-"' '"#ferry-apps\x0a"' \
			'"No running processes found"' '"\x0a"' '"#0  0x"' '" in "' '"TID "' '"Thread "' ;;
	cron)
		printf '%s\n' '"*"' '"*/"' '"-"' '","' '" "' '"@yearly"' '"@annually"' '"@monthly"' \
			'"@weekly"' '"@daily"' '"@midnight"' '"@hourly"' '"JAN"' '"dec"' '"MON"' \
			'"sun"' '"SAT"' '"L"' '"W"' '"#"' '"?"' '"59"' '"23"' '"31"' '"12"' '"7"' ;;
	cond)
		printf '%s\n' '"params."' '"steps."' '".outputs."' '".metrics."' '"production."' '"{{"' '"}}"' \
			'">="' '"<="' '"=="' '"!="' '"&&"' '"||"' '" and "' '" or "' '"not "' '"true"' \
			'"false"' '"null"' '"("' '")"' '"[\"x\"]"' '"%"' '"1e-3"' '"\x27"' ;;
	foreach)
		printf '%s\n' '"["' '"]"' '","' '"\x0a"' '"\x0d\x0a"' '"{\"k\": "' '"}"' '"null"' '"\"uniform\""' \
			'"\"log_uniform\""' '"\"int\""' '"1e308"' '"-1"' ;;
	*) return 1 ;;
	esac
}

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	for f in tests/fuzz/fuzz_*.c; do
		targets+=("$(basename "$f" .c)")
	done
fi

mkdir -p "$OUT/obj"
echo "fuzz: building the engine into $OUT/obj"
db/gen-sql.sh migration $(ls db/migrations/*.sql | sort) > "$OUT/migrations.c"
db/gen-sql.sh function $(ls db/functions/*.sql | sort) > "$OUT/functions.c"
# the HAProxy template and the warm Python server built into the engine: the Makefile's rules make their C files
GENERATED=(build/rel/deploy/haproxy_tmpl.c build/rel/orchestrator/exec/exec_warm_source.c)
make -s --no-print-directory SANITIZE= "${GENERATED[@]}"
objs=()
for src in "${ENGINE_SRC[@]}" "$OUT/migrations.c" "$OUT/functions.c" "${GENERATED[@]}"; do
	obj=$OUT/obj/$(echo "${src%.c}" | tr / _).o
	"$FUZZ_CC" "${CFLAGS[@]}" -fsanitize=fuzzer-no-link,$SAN -c -o "$obj" "$src"
	objs+=("$obj")
done
status=0
for target in "${targets[@]}"; do
	short=${target#fuzz_}
	bin=$OUT/$target
	work=$OUT/corpus/$short
	artifacts=$OUT/artifacts/$short/
	log=$OUT/$target.log
	dict=()

	echo "fuzz: building $bin"
	"$FUZZ_CC" "${CFLAGS[@]}" -fsanitize=fuzzer,$SAN -o "$bin" "tests/fuzz/$target.c" "${objs[@]}" \
		"${LIBS[@]}"
	rm -rf "$work"
	mkdir -p "$work" "$artifacts"
	if [ -d "tests/fuzz/corpus/$short" ]; then
		cp -R "tests/fuzz/corpus/$short/." "$work/"
	fi
	if write_dict "$short" > "$OUT/$short.dict"; then
		dict=(-dict="$OUT/$short.dict")
	fi

	echo "fuzz: running $target for ${FUZZ_SECONDS}s over $(ls "$work" | wc -l) seeds"
	if ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
	   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	   "$bin" "${dict[@]}" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
		-artifact_prefix="$artifacts" -print_final_stats=1 "$work" > "$log" 2>&1; then
		runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
		echo "fuzz: $target clean: ${runs:-?} runs in ${FUZZ_SECONDS}s, corpus now $(ls "$work" | wc -l) inputs"
	else
		echo "fuzz: $target FAILED; log $log, input in $artifacts" >&2
		grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -20 >&2 || true
		status=1
	fi
done
exit $status

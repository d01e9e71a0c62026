#!/usr/bin/env bash
# make bench: one JSON line per benchmark.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build/rel}
make --no-print-directory "$B/tests/bench_dispatch" "$B/tests/bench_fingerprint" "$B/tests/bench_haproxy" >/dev/null
"$B/tests/bench_dispatch" --executor noop --runs 200 --width 48
"$B/tests/bench_dispatch" --executor local --runs 40 --width 48
"$B/tests/bench_dispatch" --slow-neighbour --artifact-mb 1024
"$B/tests/bench_dispatch" --chain 40
"$B/tests/bench_dispatch" --warm
"$B/tests/bench_dispatch" --scale 1000,5000 --executor noop
"$B/tests/bench_dispatch" --scale 1000,5000 --executor local
"$B/tests/bench_dispatch" --foreach 1000,10000,100000 --executor noop
tests/bench/api.sh
tests/bench/executor_podman.sh
tests/bench/executor_slurm.sh
"$B/tests/bench_fingerprint" --mb 256 --files 2000
"$B/tests/bench_haproxy" --changes 200
tests/bench/bench_docker.sh
tests/bench/bench_deploy.sh
tests/bench/bench_fleet.sh
tests/bench/bench_monitor.sh
tests/bench/bench_schedules.sh
tests/bench/bench_queues.sh
tests/bench/bench_ui.sh

#!/usr/bin/env bash
# stairbench load vs redis-benchmark on redis: redis-server on core 0, the generator on core 1,
# the same 50 connections, GET only, alternating runs. For each run: requests/s and the
# generator's whole process CPU (user + system, start to exit, by `perf stat -e task-clock`)
# per completed request; then the medians and the ratios stairbench/redis-benchmark.
#
# Usage (after `cargo build --release`): bench/vs_redis_benchmark.sh
# Settings (environment): RUNS=3 DURATION=5 CONNECTIONS=50 SERVER_CPU=0 CLIENT_CPU=1 CPU_METHOD=perf
#   REQUESTS (redis-benchmark -n; default: about DURATION seconds at 80k/s)
#   STAIRBENCH=target/release/stairbench
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-50}
REQUESTS=${REQUESTS:-$((DURATION * 80000))}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
STAIRBENCH=${STAIRBENCH:-target/release/stairbench}

die() { echo "vs_redis_benchmark: $*" >&2; exit 1; }

program() { # the path of $1, looking in sbin too
    command -v "$1" 2>/dev/null || { [ -x "/usr/sbin/$1" ] && echo "/usr/sbin/$1"; } || return 1
}

REDIS_SERVER=$(program redis-server) || die "redis-server not found (apt-get install redis-server)"
REDIS_BENCHMARK=$(program redis-benchmark) || die "redis-benchmark not found (apt-get install redis-tools)"
[ -x "$STAIRBENCH" ] || die "$STAIRBENCH not found: run cargo build --release first"
[ "$(nproc)" -ge 2 ] || echo "vs_redis_benchmark: warning: one CPU only: server and generator share it" >&2

WORK=$(mktemp -d /tmp/stairbench-vs-redis.XXXXXX)
# shellcheck source=bench/lib.sh
source bench/lib.sh

start_redis() {
    setsid taskset -c "$SERVER_CPU" "$REDIS_SERVER" --port "$1" --bind 127.0.0.1 --save '' \
        --appendonly no --daemonize no --dir "$WORK" </dev/null >"$WORK/redis.log" 2>&1 &
    SERVER_PID=$!
    wait_port "$1"
}

# run_redis_benchmark N PORT: prints "requests req_per_s cpu_us"
run_redis_benchmark() {
    local out="$WORK/redis-benchmark.$1"
    # redis-benchmark retries forever when the server is gone: bound it.
    measured "$out.cpu" timeout $((DURATION * 20 + 30)) taskset -c "$CLIENT_CPU" "$REDIS_BENCHMARK" \
        -p "$2" -c "$CONNECTIONS" -n "$REQUESTS" -t get -q >"$out"
    local rps
    rps=$(tr '\r' '\n' <"$out" | awk '/^GET: [0-9.]+ requests per second/ { print $2 }' | tail -1)
    [ -n "$rps" ] || die "unreadable redis-benchmark output: $(tr '\r' '\n' <"$out" | tail -3)"
    echo "$REQUESTS $rps $(cat "$out.cpu")"
}

# json_number FILE KEY: a top-level number of the load JSON.

# run_stairbench N URL: prints "requests req_per_s cpu_us"
run_stairbench() {
    local out="$WORK/stairbench.$1"
    measured "$out.cpu" taskset -c "$CLIENT_CPU" "$STAIRBENCH" load "$2" -c "$CONNECTIONS" -t 1 \
        -d "$DURATION" --read-ratio 1 --json "$out.json" >"$out" 2>&1
    local requests rps
    requests=$(json_number "$out.json" requests)
    rps=$(json_number "$out.json" throughput_rps)
    [ -n "$requests" ] && [ -n "$rps" ] || die "unreadable stairbench JSON: $(cat "$out.json" "$out")"
    echo "$requests $rps $(cat "$out.cpu")"
}

PORT=$(free_port)
start_redis "$PORT"
echo "redis-server on core $SERVER_CPU at 127.0.0.1:$PORT; generators on core $CLIENT_CPU;" \
    "$CONNECTIONS connections, GET; stairbench ${DURATION}s per run, redis-benchmark" \
    "$REQUESTS requests per run; $RUNS runs each; CPU counted by $CPU_METHOD"

: >"$WORK/redis-benchmark.results"
: >"$WORK/stairbench.results"
for n in $(seq "$RUNS"); do
    result=$(run_redis_benchmark "$n" "$PORT")
    report_run redis-bench "$n" "$result"
    echo "$result" >>"$WORK/redis-benchmark.results"
    result=$(run_stairbench "$n" "redis://127.0.0.1:$PORT")
    report_run stairbench "$n" "$result"
    echo "$result" >>"$WORK/stairbench.results"
done

read -r tool_rps tool_cpu <<<"$(summary "$WORK/redis-benchmark.results")"
read -r sb_rps sb_cpu <<<"$(summary "$WORK/stairbench.results")"
awk -v wr="$tool_rps" -v wc="$tool_cpu" -v sr="$sb_rps" -v sc="$sb_cpu" 'BEGIN {
    printf "\nmedians\n"
    printf "  redis-bench %10.0f req/s  %8.3f CPU µs/request\n", wr, wc
    printf "  stairbench  %10.0f req/s  %8.3f CPU µs/request\n", sr, sc
    printf "ratios stairbench/redis-benchmark: req/s %.3f, CPU per request %.3f\n", sr / wr, sc / wc
    ok = (sc / wc <= 0.8 && sr >= wr)
    printf "target (CPU per request <= 0.8x redis-benchmark, req/s >= it): %s\n", ok ? "met" : "NOT met"
}'

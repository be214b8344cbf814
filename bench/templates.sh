#!/usr/bin/env bash
# The cost of a request template: stairbench load against redis-server (core 0), the
# generator on core 1, alternating runs of
#   A  the built-in SET (--read-ratio 0 --keys 1024 --value-size 64), and
#   B  --requests with `SET key:{uniform:1024} {rand:60}-{seq}` (three placeholders, the
#      same key space and about the same value size),
# each run's generator CPU over the measured window (user + system, from the JSON) per
# completed request; then the medians and the ratio B/A (target: <= 1.1).
#
# Usage (after `cargo build --release`): bench/templates.sh
# Settings (environment): RUNS=5 DURATION=3 CONNECTIONS=16 DEPTH=1 SERVER_CPU=0 CLIENT_CPU=1
#                         STAIRBENCH=target/release/stairbench
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-5}
DURATION=${DURATION:-3}
CONNECTIONS=${CONNECTIONS:-16}
DEPTH=${DEPTH:-1}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
STAIRBENCH=${STAIRBENCH:-target/release/stairbench}

die() { echo "templates: $*" >&2; exit 1; }
REDIS=$(command -v redis-server) || die "redis-server not found (apt-get install redis-server)"
[ -x "$STAIRBENCH" ] || die "$STAIRBENCH not found: run cargo build --release first"

WORK=$(mktemp -d /tmp/stairbench-templates.XXXXXX)
# shellcheck source=bench/lib.sh
source bench/lib.sh

PORT=$(free_port)
setsid taskset -c "$SERVER_CPU" "$REDIS" --port "$PORT" --bind 127.0.0.1 --save '' \
    --appendonly no --daemonize no </dev/null >"$WORK/redis.log" 2>&1 &
SERVER_PID=$!
wait_port "$PORT"
URL="redis://127.0.0.1:$PORT"
printf 'SET key:{uniform:1024} {rand:60}-{seq}\n' >"$WORK/req.txt"

# run NAME N ARGS...: prints "requests req_per_s cpu_us_per_request"
run() {
    local out="$WORK/$1.$2.json"
    shift 2
    taskset -c "$CLIENT_CPU" "$STAIRBENCH" load "$URL" -q -c "$CONNECTIONS" --depth "$DEPTH" \
        -t 1 -d "$DURATION" --warmup 1s --json "$out" "$@" >/dev/null
    local q r u s
    q=$(json_number "$out" requests)
    r=$(json_number "$out" throughput_rps)
    u=$(json_number "$out" user_s)
    s=$(json_number "$out" sys_s)
    awk -v q="$q" -v r="$r" -v u="$u" -v s="$s" 'BEGIN { printf "%d %.0f %.4f\n", q, r, (u + s) * 1e6 / q }'
}

echo "redis on core $SERVER_CPU, generator on core $CLIENT_CPU; $CONNECTIONS connections, depth $DEPTH," \
    "${DURATION}s per run, $RUNS runs each, alternating"
: >"$WORK/a"
: >"$WORK/b"
for n in $(seq "$RUNS"); do
    a=$(run plain "$n" --read-ratio 0 --keys 1024 --value-size 64)
    echo "plain     run $n: $a (requests req/s CPU-µs/request)"
    echo "$a" >>"$WORK/a"
    b=$(run template "$n" --requests "$WORK/req.txt")
    echo "template  run $n: $b"
    echo "$b" >>"$WORK/b"
done
ma=$(awk '{ print $3 }' "$WORK/a" | median)
mb=$(awk '{ print $3 }' "$WORK/b" | median)
ra=$(awk '{ print $2 }' "$WORK/a" | median)
rb=$(awk '{ print $2 }' "$WORK/b" | median)
awk -v ma="$ma" -v mb="$mb" -v ra="$ra" -v rb="$rb" 'BEGIN {
    printf "\nmedians\n  plain     %10.0f req/s  %8.3f CPU µs/request\n", ra, ma
    printf "  template  %10.0f req/s  %8.3f CPU µs/request\n", rb, mb
    printf "ratio template/plain: CPU per request %.3f (target <= 1.1: %s)\n", mb / ma, (mb / ma <= 1.1) ? "met" : "NOT met"
}'

#!/usr/bin/env bash
# The cost of a gRPC message made per call from JSON placeholders (`--data` with {seq},
# {uniform:N}, {zipf:THETA:N}, {conn}) against the same message fixed (encoded once): the
# generator's whole-process CPU (user + system, start to exit) per completed call, alternating
# fixed and per-call runs in pairs; then the medians and the ratio per-call/fixed (issue 43's
# goal: at most 1.3).
#
# The server (core $SERVER_CPU): SERVER=nginx (default), nginx as a unary gRPC look-alike
# that answers every call with an empty message and grpc-status 0 (bench/lib.sh
# grpc_lookalike_launch), so the generator runs at tens of thousands of calls per second; or
# SERVER=grpcio, examples/grpc_json_server.py (grpcio decoding each request; a few thousand
# calls per second, where the generator's per-call work is a smaller share).
#
# Usage (after `cargo build --release`): bench/grpc_json_percall.sh
# Settings (environment): PAIRS=5 DURATION=5 CONNECTIONS=16 STREAMS=8 SERVER_CPU=0 CLIENT_CPU=1
#                         CPU_METHOD=perf STAIRBENCH=target/release/stairbench SERVER=nginx
set -euo pipefail
cd "$(dirname "$0")/.."

PAIRS=${PAIRS:-5}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-16}
STREAMS=${STREAMS:-8}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
STAIRBENCH=${STAIRBENCH:-target/release/stairbench}
SERVER=${SERVER:-nginx}
PYTHON=/usr/bin/python3

die() { echo "grpc_json_percall: $*" >&2; exit 1; }

[ -x "$STAIRBENCH" ] || die "$STAIRBENCH not found: run cargo build --release first"
case $SERVER in
nginx)
    NGINX=$(command -v nginx || echo /usr/sbin/nginx)
    [ -x "$NGINX" ] || die "nginx not found (apt-get install nginx-light)"
    ;;
grpcio)
    "$PYTHON" -c 'import grpc, grpc_tools' 2>/dev/null ||
        die "no grpcio and grpcio-tools (apt-get install python3-grpcio python3-grpc-tools)"
    ;;
*) die "SERVER is nginx or grpcio, not $SERVER" ;;
esac

WORK=$(mktemp -d /tmp/stairbench-grpc-json.XXXXXX)
chmod 755 "$WORK" # nginx's worker runs as nobody when started by root
# shellcheck source=bench/lib.sh
source bench/lib.sh

# The same message both ways, of about the same size: the per-call one's values drawn per
# call in a string, an int32, an int64, a repeated string's element and a map value.
FIXED='{"user": {"name": "u-1234567", "age": 7, "tags": ["fixed", "k042"]},
  "requestId": 1234567, "labels": {"conn": "1", "region": "eu"}}'
PER_CALL='{"user": {"name": "u-{seq}", "age": {uniform:10}, "tags": ["fixed", "k{zipf:0.99:1000}"]},
  "requestId": {seq}, "labels": {"conn": "{conn}", "region": "eu"}}'

PORT=$(free_port)
if [ "$SERVER" = nginx ]; then
    grpc_lookalike_launch "$PORT"
    SERVER_NAME="nginx gRPC look-alike"
else
    setsid taskset -c "$SERVER_CPU" "$PYTHON" examples/grpc_json_server.py "$PORT" \
        </dev/null >"$WORK/grpc.log" 2>&1 &
    SERVER_PID=$!
    wait_port "$PORT"
    SERVER_NAME="grpcio (examples/grpc_json_server.py)"
fi
URL="grpc://127.0.0.1:$PORT/greeter.Greeter/SayHello"

# run KIND N DATA: prints "calls calls_per_s cpu_us"
run() {
    local out="$WORK/$1.$2"
    measured "$out.cpu" taskset -c "$CLIENT_CPU" "$STAIRBENCH" load "$URL" -c "$CONNECTIONS" -t 1 \
        --depth "$STREAMS" -d "$DURATION" --proto examples/greeter.proto --data "$3" \
        --json "$out.json" >"$out" 2>&1
    local calls rps
    calls=$(json_number "$out.json" requests)
    rps=$(json_number "$out.json" throughput_rps)
    [ -n "$calls" ] && [ -n "$rps" ] || die "unreadable stairbench JSON: $(cat "$out.json" "$out")"
    grep -qE '"errors": ?\{\}' "$out.json" || die "$1 run $2 had errors: $(cat "$out")"
    echo "$calls $rps $(cat "$out.cpu")"
}

echo "$SERVER_NAME on core $SERVER_CPU, port $PORT; stairbench on core $CLIENT_CPU;" \
    "$CONNECTIONS connections × $STREAMS streams, ${DURATION}s per run, $PAIRS pairs; CPU by $CPU_METHOD"
: >"$WORK/fixed.results"
: >"$WORK/per_call.results"
: >"$WORK/ratios"
for n in $(seq "$PAIRS"); do
    fixed=$(run fixed "$n" "$FIXED")
    report_run fixed "$n" "$fixed"
    echo "$fixed" >>"$WORK/fixed.results"
    per_call=$(run per_call "$n" "$PER_CALL")
    report_run per-call "$n" "$per_call"
    echo "$per_call" >>"$WORK/per_call.results"
    read -r fc _ fu <<<"$fixed"
    read -r pc _ pu <<<"$per_call"
    awk -v fc="$fc" -v fu="$fu" -v pc="$pc" -v pu="$pu" 'BEGIN { print (pu / pc) / (fu / fc) }' \
        >>"$WORK/ratios"
done

read -r f_rps f_cpu <<<"$(summary "$WORK/fixed.results")"
read -r p_rps p_cpu <<<"$(summary "$WORK/per_call.results")"
pair_ratio=$(median <"$WORK/ratios")
awk -v fr="$f_rps" -v fc="$f_cpu" -v pr="$p_rps" -v pc="$p_cpu" -v pair="$pair_ratio" 'BEGIN {
    printf "\nmedians\n"
    printf "  fixed message     %10.0f calls/s  %8.3f CPU µs/call\n", fr, fc
    printf "  per-call message  %10.0f calls/s  %8.3f CPU µs/call\n", pr, pc
    printf "ratio per-call/fixed CPU per call: %.3f (median of the pairs'"'"' ratios: %.3f)\n", pc / fc, pair
    printf "goal (<= 1.3x): %s\n", (pc / fc <= 1.3) ? "met" : "NOT met"
}'

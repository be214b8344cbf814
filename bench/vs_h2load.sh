#!/usr/bin/env bash
# stairbench load vs h2load (nghttp2) over HTTP/2 with prior knowledge (h2c) on nginx: nginx
# (1 worker, `listen PORT http2`) on core 0, the generator on core 1, the same connections ×
# streams, alternating runs. For each run: requests/s and the generator's whole process CPU
# (user + system, start to exit) per completed request; then the medians and the ratios
# stairbench/h2load.
#
# GRPC=1: unary gRPC calls instead, against grpcio's server (Debian's python3-grpcio,
# examples/grpc_server.py, GRPC_WORKERS threads) on core 0: stairbench loads
# grpc://.../bench.Echo/Echo with a 7-byte message, h2load POSTs the same gRPC-framed body
# (-d FILE: the 5-byte prefix and the message) with content-type: application/grpc and
# te: trailers. The server is slow (Python); both tools meet the same one, so what counts is
# each tool's CPU per completed call.
#
# JSON=1 (implies GRPC=1): stairbench makes the message from JSON (`--proto
# examples/greeter.proto --data '{"user": {"name": "hello"}}'`, encoded once before the
# load) and calls /greeter.Greeter/SayHello; h2load POSTs the same 9-byte message, framed.
# The server is examples/grpc_json_server.py (grpcio), or with LOOKALIKE=1 nginx as a gRPC
# look-alike answering every call with an empty message and grpc-status 0 (bench/lib.sh), so
# both tools run at rates grpcio's Python server cannot reach.
#
# MESSAGES=N (with JSON=1 LOOKALIKE=1): client-streaming calls of N messages each: stairbench
# calls /greeter.Greeter/Gather with `--stream-messages N` (each message encoded from the
# JSON), h2load POSTs the same N framed messages as one body; the look-alike answers each
# call once. The figure is CPU per call (N messages each).
#
# Usage (after `cargo build --release`): bench/vs_h2load.sh
# Settings (environment): RUNS=3 DURATION=5 CONNECTIONS=16 STREAMS=8 SERVER_CPU=0 CLIENT_CPU=1
#                         CPU_METHOD=perf STAIRBENCH=target/release/stairbench GRPC=0
#                         GRPC_WORKERS=4 JSON=0 LOOKALIKE=0 MESSAGES=0
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-16}
STREAMS=${STREAMS:-8}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
STAIRBENCH=${STAIRBENCH:-target/release/stairbench}

die() { echo "vs_h2load: $*" >&2; exit 1; }

program() { # the path of $1, looking in sbin too (Debian's nginx)
    command -v "$1" 2>/dev/null || { [ -x "/usr/sbin/$1" ] && echo "/usr/sbin/$1"; } || return 1
}

JSON=${JSON:-0}
LOOKALIKE=${LOOKALIKE:-0}
MESSAGES=${MESSAGES:-0}
if [ "$MESSAGES" != 0 ]; then
    [ "$JSON" = 1 ] && [ "$LOOKALIKE" = 1 ] || die "MESSAGES=N goes with JSON=1 LOOKALIKE=1"
fi
GRPC=${GRPC:-$JSON}
GRPC_WORKERS=${GRPC_WORKERS:-4}
PYTHON=/usr/bin/python3
if [ "$LOOKALIKE" = 1 ]; then
    [ "$JSON" = 1 ] || die "LOOKALIKE=1 goes with JSON=1"
    NGINX=$(program nginx) || die "nginx not found (apt-get install nginx-light)"
elif [ "$JSON" = 1 ]; then
    "$PYTHON" -c 'import grpc, grpc_tools' 2>/dev/null ||
        die "no grpcio and grpcio-tools (apt-get install python3-grpcio python3-grpc-tools)"
elif [ "$GRPC" = 1 ]; then
    "$PYTHON" -c 'import grpc' 2>/dev/null || die "no grpcio (apt-get install python3-grpcio)"
else
    NGINX=$(program nginx) || die "nginx not found (apt-get install nginx-light)"
fi
H2LOAD=$(program h2load) || die "h2load not found (apt-get install nghttp2-client)"
[ -x "$STAIRBENCH" ] || die "$STAIRBENCH not found: run cargo build --release first"

WORK=$(mktemp -d /tmp/stairbench-vs-h2load.XXXXXX)
chmod 755 "$WORK" # nginx's worker runs as nobody when started by root
# shellcheck source=bench/lib.sh
source bench/lib.sh

start_nginx() {
    nginx_launch "127.0.0.1:$1 http2" "keepalive_requests 1000000;"
    wait_port "$1"
}

# grpcio's server on core $SERVER_CPU in its own process group (SERVER_PID).
start_grpc() {
    setsid taskset -c "$SERVER_CPU" "$PYTHON" examples/grpc_server.py "$1" "$GRPC_WORKERS" \
        </dev/null >"$WORK/grpc.log" 2>&1 &
    SERVER_PID=$!
    wait_port "$1"
}

# The gRPC request: field 1 (string) = "hello", as a length-prefixed message for h2load.
MESSAGE="$WORK/message.bin"
FRAMED="$WORK/framed.bin"
printf '\x0a\x05hello' >"$MESSAGE"
printf '\x00\x00\x00\x00\x07\x0a\x05hello' >"$FRAMED"
H2LOAD_ARGS=()
STAIRBENCH_ARGS=()
if [ "$JSON" = 1 ]; then
    # HelloRequest {user: {name: "hello"}}: field 1 (User, 7 bytes) holding field 1 "hello".
    printf '\x00\x00\x00\x00\x09\x0a\x07\x0a\x05hello' >"$FRAMED"
    H2LOAD_ARGS=(-d "$FRAMED" -H 'content-type: application/grpc' -H 'te: trailers')
    STAIRBENCH_ARGS=(--proto examples/greeter.proto --data '{"user": {"name": "hello"}}')
    METHOD=SayHello
    if [ "$MESSAGES" != 0 ]; then
        cp "$FRAMED" "$WORK/one.bin"
        for _ in $(seq "$MESSAGES"); do cat "$WORK/one.bin"; done >"$FRAMED"
        STAIRBENCH_ARGS+=(--stream-messages "$MESSAGES")
        METHOD=Gather
    fi
elif [ "$GRPC" = 1 ]; then
    H2LOAD_ARGS=(-d "$FRAMED" -H 'content-type: application/grpc' -H 'te: trailers')
    STAIRBENCH_ARGS=(--body-file "$MESSAGE")
fi

# run_h2load N URL: prints "requests req_per_s cpu_us"
run_h2load() {
    local out="$WORK/h2load.$1"
    measured "$out.cpu" taskset -c "$CLIENT_CPU" "$H2LOAD" -t1 -c"$CONNECTIONS" -m"$STREAMS" \
        -D"$DURATION" "${H2LOAD_ARGS[@]}" "$2" >"$out"
    local requests rps
    requests=$(awk '/^requests:/ { print $8 }' "$out")
    rps=$(awk '/^finished in/ { gsub(",", "", $4); print $4 }' "$out")
    [ -n "$requests" ] && [ -n "$rps" ] || die "unreadable h2load output: $(cat "$out")"
    echo "$requests $rps $(cat "$out.cpu")"
}

# run_stairbench N URL: prints "requests req_per_s cpu_us"
run_stairbench() {
    local out="$WORK/stairbench.$1"
    measured "$out.cpu" taskset -c "$CLIENT_CPU" "$STAIRBENCH" load "$2" -c "$CONNECTIONS" -t 1 \
        --depth "$STREAMS" -d "$DURATION" "${STAIRBENCH_ARGS[@]}" --json "$out.json" >"$out" 2>&1
    local requests rps
    requests=$(json_number "$out.json" requests)
    rps=$(json_number "$out.json" throughput_rps)
    [ -n "$requests" ] && [ -n "$rps" ] || die "unreadable stairbench JSON: $(cat "$out.json" "$out")"
    echo "$requests $rps $(cat "$out.cpu")"
}

PORT=$(free_port)
if [ "$JSON" = 1 ]; then
    if [ "$LOOKALIKE" = 1 ]; then
        grpc_lookalike_launch "$PORT"
        SERVER="nginx gRPC look-alike"
    else
        setsid taskset -c "$SERVER_CPU" "$PYTHON" examples/grpc_json_server.py "$PORT" \
            </dev/null >"$WORK/grpc.log" 2>&1 &
        SERVER_PID=$!
        wait_port "$PORT"
        SERVER="grpcio (examples/grpc_json_server.py)"
    fi
    H2LOAD_URL="http://127.0.0.1:$PORT/greeter.Greeter/$METHOD"
    STAIRBENCH_URL="grpc://127.0.0.1:$PORT/greeter.Greeter/$METHOD"
elif [ "$GRPC" = 1 ]; then
    start_grpc "$PORT"
    SERVER="grpcio ($GRPC_WORKERS threads)"
    H2LOAD_URL="http://127.0.0.1:$PORT/bench.Echo/Echo"
    STAIRBENCH_URL="grpc://127.0.0.1:$PORT/bench.Echo/Echo"
else
    start_nginx "$PORT"
    SERVER="nginx (h2c)"
    H2LOAD_URL="http://127.0.0.1:$PORT/"
    STAIRBENCH_URL="h2c://127.0.0.1:$PORT/"
fi
echo "$SERVER on core $SERVER_CPU, port $PORT; generators on core $CLIENT_CPU;" \
    "$CONNECTIONS connections × $STREAMS streams, ${DURATION}s per run, $RUNS runs each; CPU by $CPU_METHOD"
: >"$WORK/h2load.results"
: >"$WORK/stairbench.results"
for n in $(seq "$RUNS"); do
    result=$(run_h2load "$n" "$H2LOAD_URL")
    report_run h2load "$n" "$result"
    echo "$result" >>"$WORK/h2load.results"
    result=$(run_stairbench "$n" "$STAIRBENCH_URL")
    report_run stairbench "$n" "$result"
    echo "$result" >>"$WORK/stairbench.results"
done

read -r h_rps h_cpu <<<"$(summary "$WORK/h2load.results")"
read -r sb_rps sb_cpu <<<"$(summary "$WORK/stairbench.results")"
awk -v hr="$h_rps" -v hc="$h_cpu" -v sr="$sb_rps" -v sc="$sb_cpu" 'BEGIN {
    printf "\nmedians\n"
    printf "  h2load      %10.0f req/s  %8.3f CPU µs/request\n", hr, hc
    printf "  stairbench  %10.0f req/s  %8.3f CPU µs/request\n", sr, sc
    printf "ratios stairbench/h2load: req/s %.3f, CPU per request %.3f\n", sr / hr, sc / hc
    ok = (sc / hc <= 0.8 && sr >= hr)
    printf "target (CPU per request <= 0.8x h2load, req/s >= h2load): %s\n", ok ? "met" : "NOT met"
}'

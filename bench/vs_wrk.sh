#!/usr/bin/env bash
# stairbench load vs wrk on nginx: nginx (1 worker) on core 0, the generator on core 1, the
# same 64 connections, alternating runs. For each run: requests/s and the generator's whole
# process CPU (user + system, start to exit, by `perf stat -e task-clock`) per completed
# request; then the medians and the ratios stairbench/wrk.
#
# Usage (after `cargo build --release`): bench/vs_wrk.sh (bench/vs_wrk_tls.sh: the same over TLS)
# Settings (environment): RUNS=3 DURATION=5 CONNECTIONS=64 SERVER_CPU=0 CLIENT_CPU=1 CPU_METHOD=perf
#                         STAIRBENCH=target/release/stairbench
#                         TLS=0 (1: https with a certificate made here by openssl)
#                         NEW_CONNECTION=0 (1: every request on a new connection, both tools)
#                         STAIRBENCH_ARGS= (more options for stairbench, e.g. --tls-resume)
#                         INSECURE=0 (1: stairbench does not verify the certificate either)
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-64}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
STAIRBENCH=${STAIRBENCH:-target/release/stairbench}
TLS=${TLS:-0}
NEW_CONNECTION=${NEW_CONNECTION:-0}

die() { echo "vs_wrk: $*" >&2; exit 1; }

program() { # the path of $1, looking in sbin too (Debian's nginx)
    command -v "$1" 2>/dev/null || { [ -x "/usr/sbin/$1" ] && echo "/usr/sbin/$1"; } || return 1
}

NGINX=$(program nginx) || die "nginx not found (apt-get install nginx-light)"
WRK=$(program wrk) || die "wrk not found (apt-get install wrk)"
[ -x "$STAIRBENCH" ] || die "$STAIRBENCH not found: run cargo build --release first"
[ "$(nproc)" -ge 2 ] || echo "vs_wrk: warning: one CPU only: server and generator share it" >&2

WORK=$(mktemp -d /tmp/stairbench-vs-wrk.XXXXXX)
chmod 755 "$WORK" # nginx's worker runs as nobody when started by root
# shellcheck source=bench/lib.sh
source bench/lib.sh

# make_certs: a CA and a leaf for localhost it signed (stairbench verifies; wrk does not).
make_certs() {
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    (
        cd "$WORK"
        openssl req -x509 -days 2 -subj "/CN=vs_wrk CA" "${ec[@]}" -keyout ca.key -out ca.pem
        openssl req -new -subj /CN=localhost "${ec[@]}" -keyout leaf.key -out leaf.csr
        printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n' >leaf.ext
        openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
            -extfile leaf.ext -out leaf.pem
    ) >"$WORK/openssl.log" 2>&1 || die "openssl failed: $(cat "$WORK/openssl.log")"
}

start_nginx() {
    local port=$1 listen="127.0.0.1:$1"
    if [ "$TLS" = 1 ]; then
        make_certs
        listen="$listen ssl; ssl_certificate $WORK/leaf.pem; ssl_certificate_key $WORK/leaf.key"
    fi
    nginx_launch "$listen"
    wait_port "$port"
}

# run_wrk N URL: prints "requests req_per_s cpu_us"
run_wrk() {
    local out="$WORK/wrk.$1"
    local extra=()
    [ "$NEW_CONNECTION" = 1 ] && extra=(-H "Connection: close")
    measured "$out.cpu" taskset -c "$CLIENT_CPU" "$WRK" -t1 -c"$CONNECTIONS" -d"${DURATION}s" \
        "${extra[@]}" "$2" >"$out"
    local requests rps
    requests=$(awk '/ requests in / { print $1 }' "$out")
    rps=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
    [ -n "$requests" ] && [ -n "$rps" ] || die "unreadable wrk output: $(cat "$out")"
    grep -E 'Socket errors|Non-2xx' "$out" >&2 || true
    echo "$requests $rps $(cat "$out.cpu")"
}

# json_number FILE KEY: a top-level number of the load JSON.

# run_stairbench N URL: prints "requests req_per_s cpu_us"
run_stairbench() {
    local out="$WORK/stairbench.$1"
    local extra=()
    # shellcheck disable=SC2206 # extra options, split on spaces
    [ -n "${STAIRBENCH_ARGS:-}" ] && extra+=($STAIRBENCH_ARGS)
    [ "$TLS" = 1 ] && [ "${INSECURE:-0}" = 0 ] && extra+=(--cacert "$WORK/ca.pem")
    [ "$NEW_CONNECTION" = 1 ] && extra+=(--new-connection-per-request)
    measured "$out.cpu" taskset -c "$CLIENT_CPU" "$STAIRBENCH" load "$2" -c "$CONNECTIONS" -t 1 \
        -d "$DURATION" --json "$out.json" "${extra[@]}" >"$out" 2>&1
    local requests rps
    requests=$(json_number "$out.json" requests)
    rps=$(json_number "$out.json" throughput_rps)
    [ -n "$requests" ] && [ -n "$rps" ] || die "unreadable stairbench JSON: $(cat "$out.json" "$out")"
    echo "$requests $rps $(cat "$out.cpu")"
}

PORT=$(free_port)
start_nginx "$PORT"
URL="http://127.0.0.1:$PORT/"
[ "$TLS" = 1 ] && URL="https://localhost:$PORT/"
echo "nginx on core $SERVER_CPU at $URL; generators on core $CLIENT_CPU; $CONNECTIONS connections," \
    "${DURATION}s per run, $RUNS runs each; CPU counted by $CPU_METHOD" \
    "$([ "$NEW_CONNECTION" = 1 ] && echo "; a new connection per request")"

: >"$WORK/wrk.results"
: >"$WORK/stairbench.results"
for n in $(seq "$RUNS"); do
    result=$(run_wrk "$n" "$URL")
    report_run wrk "$n" "$result"
    echo "$result" >>"$WORK/wrk.results"
    result=$(run_stairbench "$n" "$URL")
    report_run stairbench "$n" "$result"
    echo "$result" >>"$WORK/stairbench.results"
done

read -r wrk_rps wrk_cpu <<<"$(summary "$WORK/wrk.results")"
read -r sb_rps sb_cpu <<<"$(summary "$WORK/stairbench.results")"
goal=$([ "$TLS" = 1 ] && echo 1.0 || echo 0.9)
awk -v goal="$goal" -v wr="$wrk_rps" -v wc="$wrk_cpu" -v sr="$sb_rps" -v sc="$sb_cpu" 'BEGIN {
    printf "\nmedians\n"
    printf "  wrk         %10.0f req/s  %8.3f CPU µs/request\n", wr, wc
    printf "  stairbench  %10.0f req/s  %8.3f CPU µs/request\n", sr, sc
    printf "ratios stairbench/wrk: req/s %.3f, CPU per request %.3f\n", sr / wr, sc / wc
    ok = (sc / wc <= goal && sr >= wr)
    printf "target (CPU per request <= %.1fx wrk, req/s >= wrk): %s\n", goal, ok ? "met" : "NOT met"
}'

#!/usr/bin/env bash
# Memory and CPU per connection at many connections: stairbench load vs wrk on nginx, the same
# N connections and one generator thread each, alternating runs. For each run: the peak RSS
# (GNU time's maximum resident set) and its share per connection, the CPU (user + system,
# start to exit) per completed request; then the medians and the ratios stairbench/wrk
# (goal: RSS <= 1.0x wrk's at each N).
#
# A count that needs more open files than the hard limit allows (the generator and nginx each
# need one per connection) is skipped with the reason; `ulimit -Hn` is the limit (20,000 in
# the container this was written in: 18,000 is the most it runs).
#
# stairbench opens its connections at CONNECT_RATE a second (--connect-rate: a burst of
# thousands of connects overflows nginx's listen backlog, capped by net.core.somaxconn) and
# its set-up time (`setup_s`) is printed; wrk opens them all at once.
#
# Usage (after `cargo build --release`): bench/conns.sh
# Settings (environment): CONNS="1000 10000 18000 50000" RUNS=3 DURATION=8 SERVER_CPU=0 CLIENT_CPU=1
#                         CONNECT_RATE=5000
#                         STAIRBENCH=target/release/stairbench EXTRA_ARGS= (more stairbench args)
set -euo pipefail
cd "$(dirname "$0")/.."

CONNS=${CONNS:-1000 10000 18000 50000}
CONNECT_RATE=${CONNECT_RATE:-5000}
RUNS=${RUNS:-3}
DURATION=${DURATION:-8}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
STAIRBENCH=${STAIRBENCH:-target/release/stairbench}
EXTRA_ARGS=${EXTRA_ARGS:-}

die() { echo "conns: $*" >&2; exit 1; }
program() { command -v "$1" 2>/dev/null || { [ -x "/usr/sbin/$1" ] && echo "/usr/sbin/$1"; } || return 1; }

NGINX=$(program nginx) || die "nginx not found (apt-get install nginx-light)"
WRK=$(program wrk) || die "wrk not found (apt-get install wrk)"
[ -x "$STAIRBENCH" ] || die "$STAIRBENCH not found: run cargo build --release first"
[ -x /usr/bin/time ] || die "needs GNU time (/usr/bin/time) for the peak RSS"

WORK=$(mktemp -d /tmp/stairbench-conns.XXXXXX)
chmod 755 "$WORK" # nginx's worker runs as nobody when started by root
# shellcheck source=bench/lib.sh
source bench/lib.sh

HARD_FDS=$(ulimit -Hn)
ulimit -n "$HARD_FDS"

start_nginx() { # PORT CONNECTIONS
    nginx_launch "127.0.0.1:$1 backlog=65535" "keepalive_requests 1000000; keepalive_timeout 300s;" \
        $(($2 + 500)) $(($2 + 1000))
    for _ in $(seq 200); do
        port_is_open "$1" && return 0
        nginx_alive || return 1
        sleep 0.05
    done
    return 1
}

# start_nginx_retrying CONNECTIONS: nginx has been seen to exit at start, silently, on the
# shared machine, or to find its port taken (a free port is one of the ephemeral ports the
# previous count's connections used); three tries, each on a new port, left in PORT.
start_nginx_retrying() {
    for _ in 1 2 3; do
        PORT=$(free_port)
        start_nginx "$PORT" "$@" && return
        echo "conns: nginx exited at start ($(cat "$WORK/error.log" 2>/dev/null)); again" >&2
        stop_nginx
    done
    die "nginx did not start"
}

# nginx_alive: whether the server still runs (it can die under a loaded machine; the caller
# then starts it again and repeats the run).
nginx_alive() { [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; }

stop_nginx() {
    kill -TERM -- "-$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
}

# settle PORT: waits (at most 60 s) until nginx holds fewer than 10 connections on PORT: after
# a run of 18,000 connections it takes seconds to close them all, and until then it is at its
# worker_connections and accepts nothing (the next run's connects time out).
settle() {
    for _ in $(seq 600); do
        [ "$(ss -tnH state established "( sport = :$1 )" | wc -l)" -lt 10 ] && return
        sleep 0.1
    done
    echo "conns: nginx still held $(ss -tnH state established "( sport = :$1 )" | wc -l) connections after 60 s" >&2
}

# timed OUT CMD...: runs CMD under GNU time; OUT.time gets "peak_kb cpu_us".
timed() {
    local out=$1
    shift
    /usr/bin/time -f '%M %U %S' -o "$out.raw" -- "$@" >"$out" 2>&1 || true
    tail -1 "$out.raw" | awk '{ printf "%d %.0f\n", $1, ($2 + $3) * 1e6 }' >"$out.time"
}

# run_wrk N URL CONNS: prints "requests peak_kb cpu_us"
run_wrk() {
    local out="$WORK/wrk.$3.$1"
    timed "$out" taskset -c "$CLIENT_CPU" "$WRK" -t1 -c"$3" -d"${DURATION}s" --timeout 10s "$2"
    local requests
    requests=$(awk '/ requests in / { print $1 }' "$out")
    [ -n "$requests" ] || die "unreadable wrk output: $(cat "$out")"
    grep -E 'Socket errors|Non-2xx' "$out" >&2 || true
    echo "$requests $(cat "$out.time")"
}

# run_stairbench N URL CONNS: prints "requests peak_kb cpu_us"
run_stairbench() {
    local out="$WORK/stairbench.$3.$1"
    # shellcheck disable=SC2086
    timed "$out" taskset -c "$CLIENT_CPU" "$STAIRBENCH" load "$2" -c "$3" -t 1 -d "$DURATION" \
        --timeout 10s --connect-rate "$CONNECT_RATE" --json "$out.json" $EXTRA_ARGS
    local requests
    requests=$(json_number "$out.json" requests 2>/dev/null || true)
    [ -n "$requests" ] || die "unreadable stairbench JSON: $(cat "$out.json" "$out" 2>/dev/null)"
    python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))["errors"]; e and print("stairbench errors:", e, file=sys.stderr)' "$out.json" || true
    echo "stairbench set-up: $(json_number "$out.json" setup_s) s for $3 connections at --connect-rate $CONNECT_RATE" >&2
    echo "$requests $(cat "$out.time")"
}

report_run() { # TOOL N CONNS "requests peak_kb cpu_us"
    set -- "$1" "$2" "$3" $4
    awk -v t="$1" -v n="$2" -v c="$3" -v q="$4" -v kb="$5" -v cpu="$6" 'BEGIN {
        printf "%-11s %6d conns run %d: peak RSS %8.1f MB (%6.2f KB/conn)  %9d requests  %7.3f CPU µs/request\n",
            t, c, n, kb / 1024, kb / c, q, (q > 0 ? cpu / q : 0) }'
}

echo "nginx (1 worker) on core $SERVER_CPU; generators (1 thread) on core $CLIENT_CPU;" \
    "${DURATION}s per run, $RUNS runs each; open-file hard limit $HARD_FDS"
summary=""
for conns in $CONNS; do
    if [ $((conns + 200)) -gt "$HARD_FDS" ]; then
        echo "skipped $conns connections: needs $((conns + 200)) open files per process, the hard limit is $HARD_FDS"
        summary+="$(printf '%6d connections: skipped (open-file hard limit %d)' "$conns" "$HARD_FDS")"$'\n'
        continue
    fi
    start_nginx_retrying "$conns"
    url="http://127.0.0.1:$PORT/"
    : >"$WORK/wrk.$conns.results"
    : >"$WORK/stairbench.$conns.results"
    for n in $(seq "$RUNS"); do
        settle "$PORT"
        result=$(run_wrk "$n" "$url" "$conns")
        report_run wrk "$n" "$conns" "$result"
        echo "$result" >>"$WORK/wrk.$conns.results"
        settle "$PORT"
        result=$(run_stairbench "$n" "$url" "$conns")
        report_run stairbench "$n" "$conns" "$result"
        echo "$result" >>"$WORK/stairbench.$conns.results"
    done
    stop_nginx
    med() { awk "{ print $2 }" "$1" | median; }
    wk=$(med "$WORK/wrk.$conns.results" '$2')
    sk=$(med "$WORK/stairbench.$conns.results" '$2')
    wc=$(med "$WORK/wrk.$conns.results" '($1 > 0 ? $3 / $1 : 0)')
    sc=$(med "$WORK/stairbench.$conns.results" '($1 > 0 ? $3 / $1 : 0)')
    summary+=$(awk -v c="$conns" -v wk="$wk" -v sk="$sk" -v wc="$wc" -v sc="$sc" 'BEGIN {
        printf "%6d connections: peak RSS wrk %.1f MB (%.2f KB/conn), stairbench %.1f MB (%.2f KB/conn), ratio %.2f%s; CPU µs/request wrk %.3f, stairbench %.3f, ratio %.2f",
            c, wk / 1024, wk / c, sk / 1024, sk / c, sk / wk, (sk <= wk ? "" : " (OVER 1.0)"), wc, sc, (wc > 0 ? sc / wc : 0) }')$'\n'
done
printf '\nmedians\n%s' "$summary"

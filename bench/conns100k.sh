#!/usr/bin/env bash
# 100,000 keep-alive connections from one machine under an open-file hard limit of 20,000 per
# process (the container this was written in cannot raise it: no CAP_SYS_RESOURCE): the
# connections are split over PROCS generator processes, each under the limit, process i to
# its own address of nginx's (127.0.0.2i: one source address holds at most 28,232 connections
# to one destination, the ephemeral ports, and wrk cannot choose its source), stairbench's
# from two source addresses each (127.0.1.i and 127.0.2.i: from one, the connects stopped
# being established at about 14,200 per process in 5 of 7 runs here, about half the
# ephemeral range, whatever the rate; from two, never), against nginx
# with as many workers, `reuseport` (each worker its own listen sockets and backlogs, so no
# worker needs more descriptors than the limit).
#
# stairbench: PROCS `stairbench load` processes at CONNECT_RATE/PROCS connections a second
# each. wrk (the tool a user would otherwise pick): PROCS `wrk` processes, the same split, all
# connects at once (wrk has no pacing). For each tool: every process's peak RSS (GNU time)
# summed, requests completed, CPU per request (user + system of all processes); stairbench
# also gives its set-up time (`setup_s`, the slowest process's: first connect to last
# connection established) and its errors. RUNS alternating runs, medians.
#
# Usage (after `cargo build --release`): bench/conns100k.sh
# Settings (environment): CONNS=100000 PROCS=6 RUNS=2 DURATION=80 CONNECT_RATE=2000
#                         SERVER_CPU=0 CLIENT_CPU=1 STAIRBENCH=target/release/stairbench
#                         TOOLS="wrk stairbench" (leave one out to measure the other alone)
set -euo pipefail
cd "$(dirname "$0")/.."

CONNS=${CONNS:-100000}
PROCS=${PROCS:-6}
RUNS=${RUNS:-2}
DURATION=${DURATION:-80}
CONNECT_RATE=${CONNECT_RATE:-2000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
STAIRBENCH=${STAIRBENCH:-target/release/stairbench}
TOOLS=${TOOLS:-wrk stairbench}

die() { echo "conns100k: $*" >&2; exit 1; }
program() { command -v "$1" 2>/dev/null || { [ -x "/usr/sbin/$1" ] && echo "/usr/sbin/$1"; } || return 1; }

NGINX=$(program nginx) || die "nginx not found (apt-get install nginx-light)"
WRK=$(program wrk) || die "wrk not found (apt-get install wrk)"
[ -x "$STAIRBENCH" ] || die "$STAIRBENCH not found: run cargo build --release first"
[ -x /usr/bin/time ] || die "needs GNU time (/usr/bin/time) for the peak RSS"

WORK=$(mktemp -d /tmp/stairbench-conns100k.XXXXXX)
chmod 755 "$WORK" # nginx's workers run as nobody when started by root
# shellcheck source=bench/lib.sh
source bench/lib.sh

HARD_FDS=$(ulimit -Hn)
ulimit -n "$HARD_FDS"
PER_PROC=$(((CONNS + PROCS - 1) / PROCS))
[ $((PER_PROC + 200)) -le "$HARD_FDS" ] ||
    die "$PER_PROC connections per process need more than the open-file hard limit $HARD_FDS: raise PROCS"
# nginx's workers share the connections through reuseport's hash: leave each room for an
# uneven share, within the limit.
WORKER_CONNS=$((HARD_FDS - 100))
[ $((PROCS * (WORKER_CONNS - 50))) -ge $((CONNS * 11 / 10)) ] ||
    die "$PROCS nginx workers of $WORKER_CONNS connections leave no room for $CONNS: raise PROCS"

PORT=$(free_port)
# One `listen` line per generator process's destination (nginx_launch writes "listen LISTEN;").
listen="127.0.0.21:$PORT reuseport backlog=65535"
for i in $(seq 2 "$PROCS"); do
    listen+="; listen 127.0.0.$((20 + i)):$PORT reuseport backlog=65535"
done
NGINX_WORKERS=$PROCS nginx_launch "$listen" \
    "keepalive_requests 1000000; keepalive_timeout 300s;" "$WORKER_CONNS" "$HARD_FDS"
for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.$((20 + PROCS))/$PORT") 2>/dev/null && break
    kill -0 "$SERVER_PID" 2>/dev/null || die "nginx exited: $(cat "$WORK/error.log")"
    sleep 0.05
done
url() { echo "http://127.0.0.$((20 + $1)):$PORT/"; } # process i's destination
# A generator still running this long after its duration is hung (wrk has been seen to hang
# when connects fail): it is ended and its run counts what it printed.
LIMIT=$((DURATION + 90))

# settle: waits (at most 150 s) until nginx holds fewer than 10 connections and the machine
# fewer than 1,000 sockets in TIME_WAIT: with the previous run's ~100,000 still there, the
# next run's connects stopped being accepted at about 14,200 per process (seen 5 times here,
# with one process or six, never with the TIME_WAITs gone; not root-caused).
settle() {
    for _ in $(seq 1500); do
        [ "$(ss -tnH state established "( sport = :$PORT )" | wc -l)" -lt 10 ] &&
            [ "$(ss -tnH state time-wait | wc -l)" -lt 1000 ] && return
        sleep 0.1
    done
    echo "conns100k: connections or TIME_WAIT sockets still held after 150 s" >&2
}

# sum_runs TOOL N: adds up the processes' "peak_kb cpu_us" (GNU time) and their requests;
# prints "requests peak_kb cpu_us".
sum_runs() {
    local requests=0 kb=0 cpu=0 i r
    for i in $(seq "$PROCS"); do
        local out="$WORK/$1.$2.$i"
        r=$(cat "$out.requests")
        requests=$((requests + r))
        read -r k c < <(tail -1 "$out.rawtime" | awk '{ printf "%d %.0f\n", $1, ($2 + $3) * 1e6 }')
        kb=$((kb + k))
        cpu=$((cpu + c))
    done
    echo "$requests $kb $cpu"
}

run_stairbench() { # N
    local i pids=()
    for i in $(seq "$PROCS"); do
        local out="$WORK/stairbench.$1.$i"
        /usr/bin/time -f '%M %U %S' -o "$out.rawtime" -- timeout "$LIMIT" taskset -c "$CLIENT_CPU" \
            "$STAIRBENCH" load "$(url "$i")" -c "$PER_PROC" -t 1 -d "$DURATION" --timeout 10s -q \
            --connect-rate $((CONNECT_RATE / PROCS)) --source-addrs "127.0.1.$i,127.0.2.$i" \
            --json "$out.json" >"$out" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}" || true
    local setup=0 errors=""
    for i in $(seq "$PROCS"); do
        local out="$WORK/stairbench.$1.$i"
        if ! json_number "$out.json" requests >"$out.requests" 2>/dev/null; then
            echo "stairbench process $i failed: $(cat "$out" 2>/dev/null)" >&2
            echo 0 >"$out.requests"
            continue
        fi
        setup=$(awk -v a="$setup" -v b="$(json_number "$out.json" setup_s)" 'BEGIN { print (b > a ? b : a) }')
        errors+=$(python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))["errors"]; print(e or "", end="")' "$out.json")
    done
    echo "stairbench run $1: set-up $setup s (slowest process) for $CONNS connections at $CONNECT_RATE/s; errors: ${errors:-none}" >&2
    echo "$setup" >>"$WORK/setup"
    sum_runs stairbench "$1"
}

run_wrk() { # N
    local i pids=()
    for i in $(seq "$PROCS"); do
        local out="$WORK/wrk.$1.$i"
        /usr/bin/time -f '%M %U %S' -o "$out.rawtime" -- timeout "$LIMIT" taskset -c "$CLIENT_CPU" \
            "$WRK" -t1 -c"$PER_PROC" -d"${DURATION}s" --timeout 10s "$(url "$i")" >"$out" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}" || true
    for i in $(seq "$PROCS"); do
        local out="$WORK/wrk.$1.$i"
        awk '/ requests in / { print $1; found = 1 } END { if (!found) print 0 }' "$out" >"$out.requests"
        grep -hE 'Socket errors' "$out" >&2 || true
    done
    sum_runs wrk "$1"
}

report_run() { # TOOL N "requests peak_kb cpu_us"
    set -- "$1" "$2" $3
    awk -v t="$1" -v n="$2" -v c="$CONNS" -v q="$3" -v kb="$4" -v cpu="$5" 'BEGIN {
        printf "%-11s run %d: %d conns in %d processes, peak RSS summed %8.1f MB (%5.2f KB/conn), %9d requests, %7.3f CPU µs/request\n",
            t, n, c, '"$PROCS"', kb / 1024, kb / c, q, (q > 0 ? cpu / q : 0) }'
}

echo "nginx ($PROCS workers, reuseport) on core $SERVER_CPU; $PROCS generator processes of" \
    "$PER_PROC connections on core $CLIENT_CPU; ${DURATION}s per run, $RUNS runs each;" \
    "open-file hard limit $HARD_FDS"
: >"$WORK/wrk.results"
: >"$WORK/stairbench.results"
: >"$WORK/setup"
for n in $(seq "$RUNS"); do
    for tool in $TOOLS; do
        settle
        result=$("run_$tool" "$n")
        report_run "$tool" "$n" "$result"
        echo "$result" >>"$WORK/$tool.results"
    done
done
med() { awk "{ print $2 }" "$1" | median; }
wk=$(med "$WORK/wrk.results" '$2')
sk=$(med "$WORK/stairbench.results" '$2')
wq=$(med "$WORK/wrk.results" '$1')
sq=$(med "$WORK/stairbench.results" '$1')
setup=$(median <"$WORK/setup")
awk -v c="$CONNS" -v wk="$wk" -v sk="$sk" -v wq="$wq" -v sq="$sq" -v s="$setup" 'BEGIN {
    printf "\nmedians: %d connections: peak RSS wrk %.1f MB (%.2f KB/conn, %d requests), stairbench %.1f MB (%.2f KB/conn, %d requests), ratio %.2f; stairbench set-up %.1f s\n",
        c, wk / 1024, wk / c, wq, sk / 1024, sk / c, sq, (wk > 0 ? sk / wk : 0), s }'

#!/usr/bin/env bash
# Does grpcio's Python server use a second CPU? (examples/grpc-python.toml's question: its
# handlers run under CPython's GIL.) grpcio's server (Debian's python3-grpcio,
# examples/grpc_server.py, 4 threads) under `stairbench load` (8 connections x depth 4, the
# 7-byte message, on CPU 1), both at SCHED_FIFO 5 so other jobs do not take their CPUs, in
# three layouts:
#   1cpu    one server process on CPU 0
#   2cpus   one server process on CPUs 0-1 (the load generator shares CPU 1)
#   2procs  two server processes on CPUs 0-1, the same port (grpcio sets SO_REUSEPORT): each
#           its own GIL
# For each: calls/s, the server processes' CPU (from /proc/PID/task/*/stat over the middle
# of the load: the busiest threads and their sum), CPU µs per call, and with one process the
# samples where py-spy (`pip install py-spy`; skipped without it) found a thread holding the
# GIL (`py-spy record --gil`, 200/s for 3 s: at most 600).
#
# Usage (after `cargo build --release`): bench/grpc_gil.sh
# Settings (environment): WORK=0 (Python loop iterations per call: grpc_server.py --work)
#                         STAIRBENCH=target/release/stairbench
set -euo pipefail
cd "$(dirname "$0")/.."

WORK=${WORK:-0}
STAIRBENCH=${STAIRBENCH:-target/release/stairbench}
PY=/usr/bin/python3
TMP=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT

$PY -c 'import grpc' 2>/dev/null || { echo "grpc_gil: no grpcio for $PY (apt-get install python3-grpcio)" >&2; exit 1; }
[ -x "$STAIRBENCH" ] || { echo "grpc_gil: no $STAIRBENCH (cargo build --release)" >&2; exit 1; }

# The CPU ticks of each thread of the given processes: "PID/TID ticks" lines.
ticks() {
    for p in "$@"; do
        for t in /proc/"$p"/task/*; do
            echo "$p/$(basename "$t") $(awk '{print $14 + $15}' "$t"/stat 2>/dev/null || echo 0)"
        done
    done
}

run() {
    local layout=$1 cpus=$2 procs=$3
    local port=$((40000 + RANDOM % 20000))
    local servers=()
    PIDS=()
    for _ in $(seq "$procs"); do
        chrt -f 5 taskset -c "$cpus" $PY examples/grpc_server.py --work "$WORK" "$port" 4 \
            </dev/null >/dev/null 2>&1 &
        servers+=($!)
        PIDS+=($!)
    done
    sleep 1.5
    chrt -f 5 taskset -c 1 "$STAIRBENCH" load "grpc://127.0.0.1:$port/bench.Echo/Echo" \
        --body-file examples/echo-msg.bin -c 8 --depth 4 -d 8s -q --json "$TMP/load.json" \
        >/dev/null 2>&1 &
    local load=$!
    PIDS+=($load)
    sleep 2
    ticks "${servers[@]}" >"$TMP/before"
    local t0 t1 gil="-"
    t0=$(date +%s.%N)
    if [ "$procs" = 1 ] && command -v py-spy >/dev/null; then
        timeout 8 py-spy record --gil --nonblocking -r 200 -d 3 -f raw -o "$TMP/gil.txt" \
            -p "${servers[0]}" >/dev/null 2>&1 || true
        gil=$(awk '{s += $NF} END {print s + 0}' "$TMP/gil.txt" 2>/dev/null || echo "-")
    else
        sleep 3
    fi
    ticks "${servers[@]}" >"$TMP/after"
    t1=$(date +%s.%N)
    wait "$load"
    for p in "${servers[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done
    $PY - "$layout" "$t0" "$t1" "$gil" "$TMP" <<'PY'
import json, os, sys
layout, t0, t1, gil, tmp = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
hz = os.sysconf("SC_CLK_TCK")
def read(name):
    return {k: int(v) for k, v in (l.split() for l in open(os.path.join(tmp, name)))}
before, after = read("before"), read("after")
busy = sorted(((after[t] - before.get(t, 0)) / hz / (t1 - t0) for t in after), reverse=True)
load = json.load(open(os.path.join(tmp, "load.json")))
rate = load["throughput_rps"]
print(f"{layout:7} {rate:8.0f} calls/s  server {sum(busy):.2f} CPUs "
      f"({1e6 * sum(busy) / rate:.0f} µs/call)  busiest threads "
      f"{' '.join(f'{b:.2f}' for b in busy[:5])}  GIL-holding samples {gil}/600  "
      f"errors {sum(load['errors'].values())}")
PY
}

echo "grpc_gil: WORK=$WORK, load average $(cut -d' ' -f1-3 /proc/loadavg)"
run 1cpu 0 1
run 2cpus 0-1 1
run 2procs 0-1 2
echo "grpc_gil: done, load average $(cut -d' ' -f1-3 /proc/loadavg)"

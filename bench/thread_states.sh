#!/usr/bin/env bash
# What the thread-state sampler costs, two ways.
#
# bench/thread_states.sh [cost]: a python3 server with 10, 200 and 2,000 threads (all but one
# waiting on a condition, one holding CONNS idle connections in an epoll loop, opened by a
# second python3 process), observed by `stairbench observe` over a WINDOW-second window.
# Prints, per size, each observer thread's CPU (read just before the window ends: the sampler
# `observe-states`, `observe-sockets`, `observe-watch`, `observe-next-hop`, and the `perf stat`
# child) and all the
# observers' (`observer_cpu_s`), each in % of one CPU, and what the sampler did (passes'
# spacing, thread samples).
#
# bench/thread_states.sh ab: whether the sampler slows the server it reads (see `ab` below).
#
# Usage: bench/thread_states.sh [cost|ab]
#   env: STAIRBENCH (binary), WINDOW (5), CONNS (1024), SIZES ("10 200 2000"); for ab: REPS (3),
#   SECS (3)
set -euo pipefail
bin=${STAIRBENCH:-target/release/stairbench}
[ -x "$bin" ] || bin=target/debug/stairbench
[ -x "$bin" ] || { echo "no stairbench binary: cargo build (or set STAIRBENCH)" >&2; exit 2; }
mode=${1:-cost}
# The sampler is on by default; set here so that the environment cannot turn it off.
export STAIRBENCH_THREAD_STATES=1
command -v python3 >/dev/null || { echo "needs python3" >&2; exit 2; }
window=${WINDOW:-5} conns=${CONNS:-1024} sizes=${SIZES:-"10 200 2000"}
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ulimit -n 8192 2>/dev/null || true

# A/B: does the sampler slow the server it reads? grpcio's Python server (examples/
# grpc_server.py, 4 threads) on CPU 0, `stairbench load` (8 connections x depth 4) on CPU 1,
# both under SCHED_FIFO 5 where chrt may set it, and `stairbench observe --pid SERVER` over
# each load's window with the sampler off (STAIRBENCH_THREAD_STATES=0) and on, REPS pairs
# (the order alternating); prints each trial and the medians.
ab() {
    /usr/bin/python3 -c 'import grpc' 2>/dev/null || { echo "needs /usr/bin/python3 with grpcio" >&2; exit 2; }
    local reps=${REPS:-3} secs=${SECS:-3} here fifo=()
    here=$(cd "$(dirname "$0")/.." && pwd)
    chrt -f 5 true 2>/dev/null && fifo=(chrt -f 5)
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "${fifo[@]}" taskset -c 0 /usr/bin/python3 "$here/examples/grpc_server.py" "$port" 4 </dev/null >"$work/grpc.out" 2>&1 &
    pids+=("$!")
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    local server=${pids[-1]}
    printf '%-8s %6s %12s %14s %10s\n' sampler trial calls_per_s observers_pct samples
    local order
    for r in $(seq "$reps"); do
        # Off first in odd trials, on first in even ones: a drift of the machine favours neither.
        order="0 1"; [ $((r % 2)) = 0 ] && order="1 0"
        for v in $order; do
            rm -f "$work/ctl"; mkfifo "$work/ctl"
            STAIRBENCH_THREAD_STATES=$v "$bin" observe --pid "$server" <"$work/ctl" >"$work/obs.out" 2>"$work/obs.err" &
            local obs=$!
            exec 3>"$work/ctl"
            for _ in $(seq 200); do grep -q ready "$work/obs.out" 2>/dev/null && break; sleep 0.05; done
            echo start >&3
            "${fifo[@]}" "$bin" load "grpc://127.0.0.1:$port/bench.Echo/Echo" \
                --body-file "$here/examples/echo-msg.bin" -c 8 --depth 4 --cpuset 1 \
                -d "${secs}s" -q --json "$work/load.json" >/dev/null 2>&1
            echo stop >&3
            exec 3>&-
            wait "$obs" || { cat "$work/obs.err" >&2; exit 1; }
            python3 - "$v" "$r" "$work/load.json" "$work/obs.out" >>"$work/ab.txt" <<'PY'
import json, sys
v, r, load, obs = sys.argv[1:]
rps = json.load(open(load))["throughput_rps"]
o = json.loads(open(obs).read().strip().splitlines()[-1])
ts = o.get("thread_states") or {}
print("%-8s %6s %12.0f %14.2f %10d" % ("on" if v == "1" else "off", r, rps,
      100 * o["observer_cpu_s"] / o["window_s"], ts.get("samples", 0)))
PY
            tail -1 "$work/ab.txt"
        done
    done
    python3 - "$work/ab.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {k: statistics.median(float(x[2]) for x in rows if x[0] == k) for k in ("off", "on")}
print("median calls/s: off %.0f, on %.0f (%+.1f%%)" % (med["off"], med["on"], 100 * (med["on"] / med["off"] - 1)))
PY
}

[ "$mode" = ab ] && { ab; exit 0; }
[ "$mode" = cost ] || { echo "usage: $0 [cost|ab]" >&2; exit 2; }

# The CPU seconds of the threads of process $1 named $2 (all its threads without $2).
thread_cpu_s() {
    local sum=0 t ns
    for t in /proc/"$1"/task/*; do
        if [ -z "${2:-}" ] || [ "$(cat "$t/comm" 2>/dev/null)" = "$2" ]; then
            ns=$(awk '{ print $1 }' "$t/schedstat" 2>/dev/null || echo 0)
            sum=$((sum + ${ns:-0}))
        fi
    done
    echo "$sum"
}

cat >"$work/server.py" <<'EOF'
import selectors, socket, sys, threading
n = int(sys.argv[1])
cond = threading.Condition()
def worker():
    with cond:
        cond.wait()
for _ in range(n - 1):
    threading.Thread(target=worker, daemon=True).start()
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(4096)
print(s.getsockname()[1], flush=True)
sel = selectors.EpollSelector(); sel.register(s, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        if key.fileobj is s:
            c, _ = s.accept(); sel.register(c, selectors.EVENT_READ)
        else:
            if not key.fileobj.recv(100): sel.unregister(key.fileobj)
EOF
cat >"$work/client.py" <<'EOF'
import socket, sys, time
held = [socket.create_connection(('127.0.0.1', int(sys.argv[1]))) for _ in range(int(sys.argv[2]))]
print('ready', flush=True)
time.sleep(3600)
EOF

printf '%-8s %-6s %8s %8s %8s %8s %8s %10s %12s %8s\n' threads conns sampler sockets watch next_hop perf observers interval_ms samples
for n in $sizes; do
    python3 "$work/server.py" "$n" >"$work/port" &
    server=$!; pids+=("$server")
    for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
    port=$(cat "$work/port")
    python3 "$work/client.py" "$port" "$conns" >"$work/client.out" &
    pids+=("$!")
    for _ in $(seq 200); do grep -q ready "$work/client.out" 2>/dev/null && break; sleep 0.1; done
    rm -f "$work/ctl"; mkfifo "$work/ctl"
    "$bin" observe --pid "$server" <"$work/ctl" >"$work/obs.out" 2>"$work/obs.err" &
    obs=$!; pids+=("$obs")
    exec 3>"$work/ctl"
    for _ in $(seq 200); do grep -q ready "$work/obs.out" 2>/dev/null && break; sleep 0.05; done
    echo start >&3
    sleep "$window"
    states_ns=$(thread_cpu_s "$obs" observe-states)
    sockets_ns=$(thread_cpu_s "$obs" observe-sockets)
    watch_ns=$(thread_cpu_s "$obs" observe-watch)
    hop_ns=$(thread_cpu_s "$obs" observe-next-ho)
    perf_ns=0
    for c in $(ps --ppid "$obs" -o pid= -o comm= | awk '$2 == "perf" { print $1 }'); do
        perf_ns=$((perf_ns + $(thread_cpu_s "$c")))
    done
    echo stop >&3
    exec 3>&-
    wait "$obs" || { cat "$work/obs.err" >&2; exit 1; }
    tail -1 "$work/obs.out" | python3 -c '
import json, sys
o = json.loads(sys.stdin.read())
n, conns, window = sys.argv[1:4]
pct = lambda ns: 100 * int(ns) / 1e9 / float(window)
w = o["window_s"]
ts = o.get("thread_states") or {}
print("%-8s %-6s %8.2f %8.2f %8.2f %8.2f %8.2f %10.2f %12.1f %8d" % (n, conns, *map(pct, sys.argv[4:9]),
      100 * o["observer_cpu_s"] / w, ts.get("sample_interval_ms", 0), ts.get("samples", 0)))
' "$n" "$conns" "$window" "$states_ns" "$sockets_ns" "$watch_ns" "$hop_ns" "$perf_ns"
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
done

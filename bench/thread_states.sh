#!/usr/bin/env bash
# What the thread-state sampler costs: a python3 server with 10, 200 and 2,000 threads (all
# but one waiting on a condition, one holding CONNS idle connections in an epoll loop, opened
# by a second python3 process), observed by `stairbench observe` over a WINDOW-second window.
# Prints, per size, the sampler's own CPU (its thread `observe-states`, read just before the
# window ends) and all the observers' (`observer_cpu_s`), each in % of one CPU, and what the
# sampler did (passes' spacing, thread samples).
#
# Usage: bench/thread_states.sh   env: STAIRBENCH (binary), WINDOW (5), CONNS (1024),
#                                      SIZES ("10 200 2000")
set -euo pipefail
bin=${STAIRBENCH:-target/release/stairbench}
[ -x "$bin" ] || bin=target/debug/stairbench
[ -x "$bin" ] || { echo "no stairbench binary: cargo build (or set STAIRBENCH)" >&2; exit 2; }
# The sampler is off by default (docs/measured.md): this bench measures it, so it is on.
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

printf '%-8s %-6s %12s %14s %12s %10s\n' threads conns sampler_pct observers_pct interval_ms samples
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
    sampler_ns=0
    for t in /proc/"$obs"/task/*; do
        if [ "$(cat "$t/comm" 2>/dev/null)" = observe-states ]; then
            sampler_ns=$(awk '{ print $1 }' "$t/schedstat" 2>/dev/null || true)
        fi
    done
    echo stop >&3
    exec 3>&-
    wait "$obs" || { cat "$work/obs.err" >&2; exit 1; }
    tail -1 "$work/obs.out" | python3 -c '
import json, sys
o = json.loads(sys.stdin.read())
n, conns, window, sampler_ns = sys.argv[1:5]
w = o["window_s"]
ts = o.get("thread_states") or {}
print("%-8s %-6s %12.2f %14.2f %12.1f %10d" % (n, conns, 100 * int(sampler_ns) / 1e9 / float(window),
      100 * o["observer_cpu_s"] / w, ts.get("sample_interval_ms", 0), ts.get("samples", 0)))
' "$n" "$conns" "$window" "${sampler_ns:-0}"
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
done

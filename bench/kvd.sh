#!/usr/bin/env bash
# Seed 004's daemon, two checks (issue 15):
#  1. single rank, local keys: the client's RTT p50 through the shared-memory slot (goal ≤ 1 µs,
#     as `serve shmkv` per-worker);
#  2. two ranks, remote keys: rank 0's daemon-measured RTT p50 against a plain TCP ping-pong of
#     about the same message size (the built-in msgr server, one connection, depth 1, 32-byte
#     payloads; a kvd request frame is 36 bytes, its reply 12-28), alternated ROUNDS times;
#     medians, ratio goal ≤ 1.2.
# Usage: bench/kvd.sh [ROUNDS] [SECONDS]     (default 3 rounds of 3 s)
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-3}
BIN=${STAIRBENCH:-target/release/stairbench}
WORK=$(mktemp -d)
die() { echo "kvd.sh: $*" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
[ -x "$BIN" ] || die "build first: cargo build --release"

p50_client_us() { python3 -c 'import json,sys; print(json.load(sys.stdin)["latency_us"]["p50"])'; }
p50_daemon_us() {
    python3 - "$1" <<'PY'
import json, sys
from hdrh.histogram import HdrHistogram
m = json.load(open(sys.argv[1]))
h = HdrHistogram.decode(m["histograms"]["rtt"])
print(h.get_value_at_percentile(50) / 1000)
PY
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

start() { # command..., sets SERVER_PID (its own process group)
    setsid "$@" >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
}
stop() { kill -TERM -- "-$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=; }

# 1. single rank, local keys.
name=bench-kvd-$$
start "$BIN" serve kvd --name "$name"
local_p50=()
for _ in $(seq "$ROUNDS"); do
    local_p50+=("$("$BIN" load "kvd://$name" --connections 1 --duration "${SECS}s" --warmup 1s \
        --read-ratio 0.5 --json - 2>/dev/null | p50_client_us)")
done
stop
local_med=$(printf '%s\n' "${local_p50[@]}" | median)

# 2. two ranks, remote RTT (daemon-measured) vs TCP ping-pong, alternated.
p0=$(free_port); p1=$(free_port)
start "$BIN" serve kvd --spawn-peers --ranks "127.0.0.1:$p0,127.0.0.1:$p1" --name "$name" \
    --metrics "$WORK/m.json"
kvd_pid=$SERVER_PID
mport=$(free_port)
setsid "$BIN" serve msgr --port "$mport" >"$WORK/msgr.log" 2>&1 &
msgr_pid=$!
SERVER_PID=$kvd_pid
wait_port "$mport"
remote=(); ping=()
for _ in $(seq "$ROUNDS"); do
    "$BIN" load "kvd://$name,$name-r1" --connections 2 --duration "${SECS}s" --warmup 1s \
        --read-ratio 0.5 --json - >/dev/null 2>&1
    sleep 0.3
    cp "$WORK/m.json" "$WORK/m1.json"
    remote+=("$(p50_daemon_us "$WORK/m1.json")")
    ping+=("$("$BIN" load "msgr://127.0.0.1:$mport" --connections 1 --depth 1 --msg-size 32 \
        --duration "${SECS}s" --warmup 1s --json - 2>/dev/null | p50_client_us)")
done
kill -TERM -- "-$msgr_pid" 2>/dev/null || true; wait "$msgr_pid" 2>/dev/null || true
stop
remote_med=$(printf '%s\n' "${remote[@]}" | median)
ping_med=$(printf '%s\n' "${ping[@]}" | median)
echo "single rank, local keys: client RTT p50 ${local_med} µs (rounds: ${local_p50[*]}; goal ≤ 1 µs)"
echo "two ranks: remote RTT p50 ${remote_med} µs (daemon, cumulative per round: ${remote[*]})"
echo "TCP ping-pong (msgr, 32 B, depth 1): p50 ${ping_med} µs (rounds: ${ping[*]})"
python3 -c "print(f'ratio remote / ping-pong: {${remote_med}/${ping_med}:.2f} (goal ≤ 1.2)')"

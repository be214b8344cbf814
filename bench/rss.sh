#!/usr/bin/env bash
# Peak RSS of `stairbench load --hist-log` in open loop at twice the server's capacity: a
# 10 s run and a 60 s run, and their ratio (goal <= 1.2: memory must not grow with the run).
# Server `stairbench serve msgr` on SERVER_CPU, load on CLIENT_CPU; capacity from a short
# closed-loop run first.
#
# Usage: bench/rss.sh      env: STAIRBENCH (binary), SERVER_CPU (0), CLIENT_CPU (1)
set -euo pipefail
bin=${STAIRBENCH:-target/release/stairbench}
server_cpu=${SERVER_CPU:-0} client_cpu=${CLIENT_CPU:-1}
[ -x "$bin" ] || { echo "no $bin: cargo build --release (or set STAIRBENCH)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time) for the peak RSS" >&2; exit 2; }
work=$(mktemp -d)
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

"$bin" serve msgr --port 0 --cpuset "$server_cpu" >"$work/server.out" 2>/dev/null &
server=$!
for _ in $(seq 100); do grep -q "listening on" "$work/server.out" 2>/dev/null && break; sleep 0.05; done
addr=$(awk '/listening on/ { print $3; exit }' "$work/server.out")
[ -n "$addr" ] || { echo "server did not start" >&2; exit 1; }
url="msgr://$addr"

capacity=$("$bin" load "$url" -q -c 16 -d 2s --cpuset "$client_cpu" --json - 2>/dev/null |
  awk -F': ' '/"throughput_rps"/ { gsub(",", "", $2); printf "%.0f", $2 }')
rate=$((capacity * 2))
echo "capacity ~$capacity req/s (closed loop, 16 connections); open loop at $rate req/s"

peak_kb() { # DURATION
  /usr/bin/time -f '%M' -o "$work/rss" -- "$bin" load "$url" -q -c 64 -d "$1" --rate "$rate" \
    --timeout 2s --cpuset "$client_cpu" --hist-log "$work/h.hlog" >/dev/null 2>&1 || true
  tail -1 "$work/rss"
}
short=$(peak_kb 10s)
long=$(peak_kb 60s)
echo "peak RSS: 10 s run ${short} KB, 60 s run ${long} KB"
awk -v s="$short" -v l="$long" 'BEGIN { r = l / s; printf "ratio 60 s / 10 s: %.2f (goal <= 1.2)%s\n", r, (r <= 1.2 ? "" : "  OVER") }'

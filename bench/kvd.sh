#!/usr/bin/env bash
# Seed 004's daemon, two checks (issue 15):
#  1. single rank, local keys: the client's RTT p50 through the shared-memory slot (goal ≤ 1 µs,
#     as `serve shmkv` per-worker);
#  2. two ranks, remote keys: rank 0's daemon-measured RTT p50 against the plain TCP ping-pong
#     the same two daemons run at start over the same connection with frames of the same size
#     (--ping-pong), ROUNDS fresh pairs per configuration (--poll adaptive/spin, daemons unpinned
#     or one CPU each), alternated;
#     medians, ratio goal ≤ 1.2.
# Usage: bench/kvd.sh [ROUNDS] [SECONDS]     (default 3 rounds of 3 s; CONFIGS, PINGS: see part 2)
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
p50_daemon_us() { # metrics file, histogram name
    python3 - "$1" "$2" <<'PY'
import json, sys
from hdrh.histogram import HdrHistogram
m = json.load(open(sys.argv[1]))
h = HdrHistogram.decode(m["histograms"][sys.argv[2]])
print(h.get_value_at_percentile(50) / 1000)
PY
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

start() { # command..., sets SERVER_PID (its own process group)
    setsid "$@" >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
}
ready() { # ranks: waits for each rank's ready line in the server log; fails if it exits
    for _ in $(seq 300); do
        [ "$(grep -c '^kvd: rank .* serving' "$WORK/server.log" 2>/dev/null)" -ge "$1" ] && return
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.05
    done
    echo "kvd did not start: $(tail -3 "$WORK/server.log")" >&2
    return 1
}
pinged() { # waits for rank 0's ping-pong at start to end (clients would wait behind it)
    for _ in $(seq 600); do
        grep -q 'ping-pong with rank 1' "$WORK/server.log" 2>/dev/null && return
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.05
    done
    echo "no ping-pong line: $(tail -3 "$WORK/server.log")" >&2
    return 1
}
stop() { kill -TERM -- "-$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=; }

# 1. single rank, local keys.
name=bench-kvd-$$
start "$BIN" serve kvd --name "$name"
ready 1 || die "see above"
local_p50=()
for _ in $(seq "$ROUNDS"); do
    local_p50+=("$("$BIN" load "kvd://$name" --connections 1 --duration "${SECS}s" --warmup 1s \
        --read-ratio 0.5 --json - 2>/dev/null | p50_client_us)")
done
stop
local_med=$(printf '%s\n' "${local_p50[@]}" | median)

# 2. two ranks, alternated per round: a fresh pair of daemons (rank 0 starts rank 1), first
#    their ping-pong at start (--ping-pong: GET-sized frames, 36 B out and 28 B back, bounced
#    over the very connection the daemons then use, by the very threads), then a load of one
#    QD 1 client per rank (half its keys remote); rank 0's metrics give both p50s. Each round
#    runs every configuration of CONFIGS, "POLL:CPUSET" (empty cpuset: unpinned; "0,1": one
#    CPU per daemon thread, --cpu-per-rank).
CONFIGS=${CONFIGS:-"adaptive: adaptive:0,1 spin: spin:0,1"}
PINGS=${PINGS:-2000}
round() { # poll mode, cpuset → "ping_p50_us rtt_p50_us"
    local p0 p1 pin=()
    [ -n "$2" ] && pin=(--cpuset "$2" --cpu-per-rank)
    for try in 1 2 3; do # a port taken meanwhile by another process: new ports
        p0=$(free_port); p1=$(free_port)
        [ "$p0" = "$p1" ] && continue
        rm -f "$WORK/m.json"
        start "$BIN" serve kvd --spawn-peers --ranks "127.0.0.1:$p0,127.0.0.1:$p1" --name "$name" \
            --metrics "$WORK/m.json" --ping-pong "$PINGS" --poll "$1" "${pin[@]}"
        ready 2 && pinged && break
        stop
        [ "$try" = 3 ] && die "kvd did not start three times"
    done
    "$BIN" load "kvd://$name,$name-r1" --connections 2 --duration "${SECS}s" --warmup 1s \
        --read-ratio 0.5 --json - >/dev/null 2>"$WORK/load.log" || die "load: $(cat "$WORK/load.log")"
    sleep 0.4
    cp "$WORK/m.json" "$WORK/m1.json"
    stop
    echo "$(p50_daemon_us "$WORK/m1.json" ping_pong) $(p50_daemon_us "$WORK/m1.json" rtt)"
}
declare -A ping remote
for _ in $(seq "$ROUNDS"); do
    for c in $CONFIGS; do
        read -r p r < <(round "${c%%:*}" "${c#*:}")
        ping[$c]+="$p "; remote[$c]+="$r "
    done
done
echo "single rank, local keys: client RTT p50 ${local_med} µs (rounds: ${local_p50[*]}; goal ≤ 1 µs)"
for c in $CONFIGS; do
    # shellcheck disable=SC2086
    pm=$(printf '%s\n' ${ping[$c]} | median)
    # shellcheck disable=SC2086
    rm_=$(printf '%s\n' ${remote[$c]} | median)
    d=${c#*:}; echo "two ranks, --poll ${c%%:*}, daemons on CPUs ${d:-any}: remote RTT p50 $rm_ µs (rounds: ${remote[$c]})"
    echo "  their ping-pong at start ($PINGS round trips): p50 $pm µs (rounds: ${ping[$c]})"
    python3 -c "print(f'  ratio remote / ping-pong: {$rm_/$pm:.2f} (goal ≤ 1.2)')"
done

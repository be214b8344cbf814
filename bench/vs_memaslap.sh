#!/usr/bin/env bash
# stairbench load vs memcaslap (Debian's libmemcached-tools build of memaslap) on memcached:
# memcached (-t 1) on core 0, the generator on core 1 (one thread each), the same connections,
# 90% gets and 10% sets of 32-byte values, one request in flight per connection, alternating
# runs. For each run: requests/s and the generator's whole process CPU (user + system, start
# to exit, by `perf stat -e task-clock`) per completed request; then the medians and the
# ratios stairbench/memcaslap.
#
# Keys: memcaslap's are at least 17 bytes and it gets only keys it has set (every get hits);
# stairbench's are key:0000-key:9999 (8 bytes), preloaded (--preload), so every get hits too.
#
# Usage (after `cargo build --release`): bench/vs_memaslap.sh
# Settings (environment): RUNS=5 DURATION=5 CONNECTIONS=16 SERVER_CPU=0 CLIENT_CPU=1 CPU_METHOD=perf
#   STAIRBENCH=target/release/stairbench COMMANDS=text (or meta: stairbench's mg/ms)
#   SYSCALLS=1: then one more run of each, its system calls counted by kind (perf's
#   syscalls:sys_enter_* tracepoints, root), printed per request (not part of the medians:
#   the tracepoints slow every system call down a little)
#   FLOOR=1: a third generator in each round, bench/memcache_floor.c (built with cc): the same
#   job with nothing but epoll_wait, one send and one recv per request, the least CPU per
#   request any client can be charged for it
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-5}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-16}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
COMMANDS=${COMMANDS:-text}
STAIRBENCH=${STAIRBENCH:-target/release/stairbench}
SYSCALLS=${SYSCALLS:-0}
FLOOR=${FLOOR:-0}

die() { echo "vs_memaslap: $*" >&2; exit 1; }

program() { # the path of $1, looking in sbin too
    command -v "$1" 2>/dev/null || { [ -x "/usr/sbin/$1" ] && echo "/usr/sbin/$1"; } || return 1
}

MEMCACHED=$(program memcached) || die "memcached not found (apt-get install memcached)"
MEMASLAP=$(program memcaslap || program memaslap) || die "memcaslap not found (apt-get install libmemcached-tools)"
[ -x "$STAIRBENCH" ] || die "$STAIRBENCH not found: run cargo build --release first"
[ "$(nproc)" -ge 2 ] || echo "vs_memaslap: warning: one CPU only: server and generator share it" >&2

WORK=$(mktemp -d /tmp/stairbench-vs-memaslap.XXXXXX)
# shellcheck source=bench/lib.sh
source bench/lib.sh

start_memcached() {
    # memcached refuses to run as root without a user to become.
    local user=()
    [ "$(id -u)" -eq 0 ] && user=(-u nobody)
    setsid taskset -c "$SERVER_CPU" "$MEMCACHED" "${user[@]}" -l 127.0.0.1 -p "$1" -U 0 -t 1 \
        -m 256 </dev/null >"$WORK/memcached.log" 2>&1 &
    SERVER_PID=$!
    wait_port "$1"
}

# run_memaslap N PORT: prints "requests req_per_s cpu_us"
run_memaslap() {
    local out="$WORK/memaslap.$1"
    printf 'key\n17 17 1\nvalue\n32 32 1\ncmd\n0 0.1\n1 0.9\n' >"$WORK/memaslap.cfg"
    measured "$out.cpu" timeout $((DURATION * 3 + 30)) taskset -c "$CLIENT_CPU" "$MEMASLAP" \
        -s "127.0.0.1:$2" -T 1 -c "$CONNECTIONS" -t "${DURATION}s" -F "$WORK/memaslap.cfg" >"$out" 2>&1
    # Its last line: "Run time: 5.0s Ops: 213525 TPS: 42689 Net_rate: 3.7M/s"
    local ops tps
    ops=$(awk '/^Run time:/ { for (i = 1; i <= NF; i++) if ($i == "Ops:") print $(i + 1) }' "$out" | tail -1)
    tps=$(awk '/^Run time:/ { for (i = 1; i <= NF; i++) if ($i == "TPS:") print $(i + 1) }' "$out" | tail -1)
    [ -n "$ops" ] && [ -n "$tps" ] || die "unreadable memcaslap output: $(tail -3 "$out")"
    echo "$ops $tps $(cat "$out.cpu")"
}

# run_stairbench N URL: prints "requests req_per_s cpu_us"
run_stairbench() {
    local out="$WORK/stairbench.$1"
    measured "$out.cpu" taskset -c "$CLIENT_CPU" "$STAIRBENCH" load "$2" -c "$CONNECTIONS" -t 1 \
        -d "$DURATION" --read-ratio 0.9 --value-size 32 --keys 10000 --preload \
        --memcache-commands "$COMMANDS" -q --json "$out.json" >"$out" 2>&1
    local sent rps
    # CPU over every request the load sent (warm-up and drain included), as memcaslap's Ops
    # counts all it ran; the 10,000 preload sets (batched, cheap) are left out of the count but
    # their CPU is not: the comparison leans against stairbench, not for it.
    sent=$(json_number "$out.json" sent)
    sent=$((sent - 10000))
    rps=$(json_number "$out.json" throughput_rps)
    [ -n "$sent" ] && [ -n "$rps" ] || die "unreadable stairbench JSON: $(cat "$out.json" "$out")"
    echo "$sent $rps $(cat "$out.cpu")"
}

# The system calls either tool makes on this path (glibc's send/recv are sendto/recvfrom).
SYSCALL_KINDS="sendto sendmsg write recvfrom recvmsg read epoll_wait epoll_pwait epoll_ctl clock_gettime futex"

# syscall_profile TOOL REQUESTS_CMD -- CMD...: runs CMD under perf stat counting each kind,
# then REQUESTS_CMD (a shell snippet printing the requests that run made); prints the calls
# per request of each kind that was called, and the CPU µs per request of that run.
syscall_profile() {
    local tool=$1 requests_cmd=$2 events=task-clock kind
    shift 3
    for kind in $SYSCALL_KINDS; do events="$events,syscalls:sys_enter_$kind"; done
    perf stat -x, -e "$events" -o "$WORK/$tool.syscalls" -- "$@" >"$WORK/$tool.syscalls.out" 2>&1 ||
        die "$tool under perf stat: $(tail -3 "$WORK/$tool.syscalls.out")"
    local requests
    requests=$(eval "$requests_cmd")
    awk -F, -v t="$tool" -v q="$requests" '
        $3 ~ /^task-clock/ { cpu = $1 * 1000 }
        $3 ~ /^syscalls:sys_enter_/ && $1 > 0 { sub(/^syscalls:sys_enter_/, "", $3); line = line sprintf("  %s %.3f", $3, $1 / q) }
        END { printf "%-11s %9d requests, %6.3f CPU µs/request; system calls per request:%s\n", t, q, cpu / q, line }
    ' "$WORK/$tool.syscalls"
}

# run_floor N PORT: prints "requests req_per_s cpu_us"
run_floor() {
    local out="$WORK/floor.$1" requests
    measured "$out.cpu" taskset -c "$CLIENT_CPU" "$WORK/memcache_floor" "$2" "$CONNECTIONS" \
        "$DURATION" >"$out" 2>&1
    requests=$(tail -1 "$out")
    [[ $requests =~ ^[0-9]+$ ]] || die "memcache_floor: $(cat "$out")"
    echo "$requests $((requests / DURATION)) $(cat "$out.cpu")"
}

if [ "$FLOOR" = 1 ]; then
    cc -O2 -o "$WORK/memcache_floor" bench/memcache_floor.c || die "cannot build bench/memcache_floor.c"
fi

PORT=$(free_port)
start_memcached "$PORT"
echo "memcached -t 1 on core $SERVER_CPU at 127.0.0.1:$PORT; generators on core $CLIENT_CPU;" \
    "$CONNECTIONS connections, 90% get / 10% set, 32-byte values, ${DURATION}s per run;" \
    "stairbench $COMMANDS commands; $RUNS runs each; CPU counted by $CPU_METHOD;" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"

: >"$WORK/memaslap.results"
: >"$WORK/stairbench.results"
: >"$WORK/floor.results"
for n in $(seq "$RUNS"); do
    result=$(run_memaslap "$n" "$PORT")
    report_run memcaslap "$n" "$result"
    echo "$result" >>"$WORK/memaslap.results"
    result=$(run_stairbench "$n" "memcache://127.0.0.1:$PORT")
    report_run stairbench "$n" "$result"
    echo "$result" >>"$WORK/stairbench.results"
    if [ "$FLOOR" = 1 ]; then
        result=$(run_floor "$n" "$PORT")
        report_run floor "$n" "$result"
        echo "$result" >>"$WORK/floor.results"
    fi
done

if [ "$SYSCALLS" = 1 ]; then
    echo "system calls (one more run each, perf stat -e syscalls:sys_enter_*):"
    syscall_profile memcaslap \
        "awk '/^Run time:/ { for (i = 1; i <= NF; i++) if (\$i == \"Ops:\") print \$(i + 1) }' \"\$WORK/memcaslap.syscalls.out\" | tail -1" \
        -- taskset -c "$CLIENT_CPU" "$MEMASLAP" -s "127.0.0.1:$PORT" -T 1 -c "$CONNECTIONS" \
        -t "${DURATION}s" -F "$WORK/memaslap.cfg"
    syscall_profile stairbench 'echo $(($(json_number "$WORK/sb.syscalls.json" sent) - 10000))' \
        -- taskset -c "$CLIENT_CPU" "$STAIRBENCH" load "memcache://127.0.0.1:$PORT" -c "$CONNECTIONS" \
        -t 1 -d "$DURATION" --read-ratio 0.9 --value-size 32 --keys 10000 --preload \
        --memcache-commands "$COMMANDS" -q --json "$WORK/sb.syscalls.json"
fi

read -r tool_rps tool_cpu <<<"$(summary "$WORK/memaslap.results")"
read -r sb_rps sb_cpu <<<"$(summary "$WORK/stairbench.results")"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v wr="$tool_rps" -v wc="$tool_cpu" -v sr="$sb_rps" -v sc="$sb_cpu" 'BEGIN {
    printf "\nmedians\n"
    printf "  memcaslap   %10.0f req/s  %8.3f CPU µs/request\n", wr, wc
    printf "  stairbench  %10.0f req/s  %8.3f CPU µs/request\n", sr, sc
    printf "ratios stairbench/memcaslap: req/s %.3f, CPU per request %.3f\n", sr / wr, sc / wc
    ok = (sc / wc <= 0.8)
    printf "target (CPU per request <= 0.8x memcaslap): %s\n", ok ? "met" : "NOT met"
}'
if [ "$FLOOR" = 1 ]; then
    read -r floor_rps floor_cpu <<<"$(summary "$WORK/floor.results")"
    awk -v wc="$tool_cpu" -v sc="$sb_cpu" -v fr="$floor_rps" -v fc="$floor_cpu" 'BEGIN {
        printf "  floor       %10.0f req/s  %8.3f CPU µs/request (bench/memcache_floor.c)\n", fr, fc
        printf "ratios: floor/memcaslap %.3f (the least any client is charged), stairbench/floor %.3f\n", fc / wc, sc / fc
    }'
fi

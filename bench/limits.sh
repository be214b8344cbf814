#!/usr/bin/env bash
# The limits table of docs/analysis.md: every limit example (examples/limits-*.toml) run RUNS
# times, each run's diagnosis (limit, confidence) beside a figure measured independently of
# stairbench (the server's or the kernel's own counters, read by another tool), as markdown.
#
# Table-driven: CASES holds one line per case, `example|truth|how confirmed|confirm function`.
# A confirm function is called twice around each run: `FN begin` (start a sampler in the
# background if the figure must be taken during the run: the server's sockets, a qdisc that
# goes away with its namespace) and `FN end RUN_DIR` (print the figure, one short line).
# To add a case: one CASES line and, if it needs one, a confirm function (confirm_none prints
# "by construction").
#
# Usage (as root: the link, disk, quota and neighbour cases need namespaces and cgroups; after
# `cargo build --release`): bench/limits.sh [CASE...]   (default: every case)
# Settings (environment): RUNS=3 STAIRBENCH=target/release/stairbench OUT=limits-table.md
# Writes the table to OUT and prints it; each run's directory stays under $WORK (printed).
# Each run is under SCHED_FIFO priority 5 (`chrt -f 5`) where it may be set, as the solo tests
# run them, so that other jobs on the machine do not take the CPU from the servers; the
# machine's load average is printed beside the table.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
STAIRBENCH=${STAIRBENCH:-target/release/stairbench}
OUT=${OUT:-limits-table.md}
die() { echo "limits: $*" >&2; exit 1; }
[ -x "$STAIRBENCH" ] || die "$STAIRBENCH not found: run cargo build --release first"
command -v python3 >/dev/null || die "needs python3 (to read the run's JSON)"

# example | truth | how confirmed | confirm function
CASES=(
    "limits-workers|concurrency: gunicorn, 2 sync workers, 5 ms per request|ss during the run: the most requests seen waiting (Recv-Q > 0 on gunicorn's connections + its accept queue)|confirm_ss_gunicorn"
    "limits-link|network: nginx 64 KiB replies through tbf 200 Mbit/s|the qdisc's own counters (tc -s qdisc) at the run's end|confirm_qdisc"
    "limits-disk|disk: PostgreSQL synchronous commits, writes throttled to 2 MiB/s|pg_stat_activity at the last level: backends waiting on WALSync/WALWrite|confirm_pg_wal"
    "limits-contention|contention: PostgreSQL row lock|pg_stat_activity at the last level: backends waiting for a lock|confirm_pg_locks"
    "limits-coherency|coherency: PostgreSQL row lock held across round trips|pg_stat_activity at the last level: backends waiting for a lock|confirm_pg_locks"
    "limits-redis|one_thread: redis's main thread|by construction (redis executes commands on one thread)|confirm_none"
    "limits-pool|oversubscription: 16 workers pinned to one CPU|by construction|confirm_none"
    "limits-outside|outside: a pipeline of 2 places held 2 ms each|by construction (at most 2 / 2 ms = 1000 req/s)|confirm_none"
    "limits-nginx|client or server_cpu: nginx and wrk sharing both CPUs|by construction|confirm_none"
    "limits-quota|quota: nginx in a CPU cgroup of 20% of one CPU|the cgroup's own cpu.stat: nr_throttled / nr_periods over the run|confirm_quota"
    "limits-neighbour|neighbour: nginx with a CPU hog pinned on its CPU|the hog's own CPU (/proc/PID/stat over its life)|confirm_neighbour"
    "limits-upstream|outside, in the upstream: nginx proxying to gunicorn (2 sync workers, 5 ms a request) started apart from nginx's tree|ss during the run: gunicorn's longest accept queue; gunicorn's own access log against stairbench's count|confirm_upstream"
    "limits-upstream-inside|concurrency in gunicorn, nginx's child (2 sync workers, 5 ms a request) inside the observed tree|ss during the run: gunicorn's longest accept queue; gunicorn's own access log against stairbench's count|confirm_upstream"
    "limits-remote|outside, at a remote address: nginx proxying to gunicorn (2 sync workers, 5 ms a request) in another network namespace|ss in gunicorn's namespace during the run: its longest accept queue; gunicorn's own access log against stairbench's count|confirm_upstream"
    "limits-jvm-lock|contention, on a lock: Tomcat's JSP holding one monitor for 2 ms a request, sleeping|the JVM's own thread states (Thread.getState, tomcat.sh's /jvm-threads) polled during the run: the most pool threads BLOCKED|confirm_jvm_blocked"
    "limits-fsync|disk, latency-bound with no knee: redis syncing every write behind 100 write IOPS|the cgroup's own blkio.throttle.io_serviced: write operations per second over the run|confirm_fsync_iops"
)

WORK=$(mktemp -d /tmp/stairbench-limits.XXXXXX)
FAVOURED=
chrt -f 5 true 2>/dev/null && FAVOURED="chrt -f 5"
SAMPLER=
stop_sampler() {
    if [ -n "$SAMPLER" ]; then
        kill "$SAMPLER" 2>/dev/null || true
        wait "$SAMPLER" 2>/dev/null || true
        SAMPLER=
    fi
}
trap stop_sampler EXIT
trap 'exit 130' INT TERM

confirm_none() { [ "$1" = end ] && echo "by construction" || true; }

# The quota's cgroup's own cpu.stat, as nginx-quota.sh copied it when nginx started and ended.
confirm_quota() {
    [ "$1" = end ] || return 0
    python3 - "$2" <<'PY'
import sys
d = sys.argv[1]
def read(f):
    return {l.split()[0]: int(l.split()[1]) for l in open(f"{d}/quota-cpu.stat.{f}")}
a, b = read("start"), read("end")
t = b["nr_throttled"] - a["nr_throttled"]
p = b["nr_periods"] - a["nr_periods"]
print(f"cpu.stat: throttled in {t} of {p} periods")
PY
}

# The hog's own CPU over its life: its /proc/PID/stat line and /proc/uptime (hog.stat).
confirm_neighbour() {
    [ "$1" = end ] || return 0
    awk 'NR == 1 {cpu = ($14 + $15) / 100; start = $22 / 100}
         NR == 2 {printf "the hog (/proc): %.1f s of CPU in %.1f s, %.0f%% of one CPU\n", cpu, $1 - start, 100 * cpu / ($1 - start)}' "$2/hog.stat"
}

# The write operations the cgroup sb-fsync's throttle let through, per second over the run
# (its blkio.throttle.io_serviced, v1; the group outlives each run, so the two readings'
# difference is the run's).
confirm_fsync_iops() {
    local f=/sys/fs/cgroup/blkio/sb-fsync/blkio.throttle.io_serviced
    local writes
    writes() { [ -r "$f" ] && awk '$2 == "Write" {n += $3} END {print n + 0}' "$f" || echo 0; }
    case "$1" in
    begin) echo "$(writes) $(date +%s.%N)" >"$WORK/fsync.start" ;;
    end)
        read -r w0 t0 <"$WORK/fsync.start"
        echo "$(writes) $(date +%s.%N)" | awk -v w0="$w0" -v t0="$t0" \
            '{printf "blkio.throttle.io_serviced: %d writes in %.0f s, %.0f/s (limit 100/s)\n", $1 - w0, $2 - t0, ($1 - w0) / ($2 - t0)}'
        ;;
    esac
}

# The most requests ss saw waiting in gunicorn's sockets (one sample every 100 ms).
confirm_ss_gunicorn() {
    case "$1" in
    begin)
        : >"$WORK/ss.txt"
        (set +e +o pipefail; while sleep 0.1; do
            # gunicorn's processes are `python3 -m gunicorn`: their sockets by pid.
            pids=$(pgrep -d'|' -f 'm gunicorn') || continue
            ss -Htanp 2>/dev/null | grep -E "pid=($pids)," |
                awk '$1 == "ESTAB" && $2 > 0 {c++} $1 == "LISTEN" {a += $2} END {print c + 0, a + 0}' \
                    >>"$WORK/ss.txt"
        done) &
        SAMPLER=$! ;;
    end)
        stop_sampler
        awk '{w = $1 + $2; if (w > max) {max = w; c = $1; a = $2}} END {printf "ss: up to %d waiting (%d unread connections + %d in the accept queue)\n", max, c, a}' "$WORK/ss.txt" ;;
    esac
}

# gunicorn behind nginx (proxied-gunicorn.sh): its listener's longest accept queue in ss
# (one sample every 100 ms), and the requests its own access log holds against those
# stairbench counted (every one went through it; the log has a few more, between windows).
confirm_upstream() {
    case "$1" in
    begin)
        : >"$WORK/ss.txt"
        (set +e +o pipefail; while sleep 0.1; do
            pids=$(pgrep -d'|' -f 'm gunicorn') || continue
            # In the host's namespace, and in limits-remote's (where gunicorn is a remote host).
            { ss -Hltnp; ip netns exec sb-remote ss -Hltnp; } 2>/dev/null |
                grep -E "pid=($pids)," | awk '{print $2}' >>"$WORK/ss.txt"
        done) &
        SAMPLER=$! ;;
    end)
        stop_sampler
        python3 - "$2" "$WORK/ss.txt" <<'PY'
import glob, json, sys
d, ss = sys.argv[1], sys.argv[2]
queue = max((int(x) for x in open(ss).read().split()), default=0)
logged = sum(sum(1 for _ in open(f)) for f in glob.glob(f"{d}/nginx-*/access.log"))
counted = sum(json.loads(l).get("requests", 0) for l in open(f"{d}/steps.jsonl") if l.strip())
print(f"ss: gunicorn's accept queue up to {queue}; its access log {logged} requests, stairbench {counted}")
PY
        ;;
    esac
}

# The JVM's own view of Tomcat's pool during the run (tomcat.sh's /jvm-threads: "THREADS
# BLOCKED"), every 100 ms from the port java listens on: the most threads BLOCKED on a monitor.
confirm_jvm_blocked() {
    case "$1" in
    begin)
        : >"$WORK/jvm.txt"
        (set +e +o pipefail; while sleep 0.1; do
            p=$(ss -Hltnp 2>/dev/null | grep '"java"' | awk '{print $4}' | sed 's/.*://' | head -1)
            [ -n "$p" ] && curl -s --max-time 1 "http://127.0.0.1:$p/jvm-threads" >>"$WORK/jvm.txt" && echo >>"$WORK/jvm.txt"
        done) &
        SAMPLER=$! ;;
    end)
        stop_sampler
        awk 'NF == 2 { if ($2 > b) { b = $2; t = $1 } } END { printf "the JVM: up to %d of %d pool threads BLOCKED\n", b, t }' "$WORK/jvm.txt" ;;
    esac
}

# The tbf qdisc's counters, polled while its namespace lives (it goes with the server).
confirm_qdisc() {
    case "$1" in
    begin)
        : >"$WORK/tc.json"
        (set +e; while sleep 0.3; do
            ip netns exec sb-link tc -s -j qdisc show dev sb-link-n 2>/dev/null >"$WORK/tc.new" &&
                [ -s "$WORK/tc.new" ] && mv "$WORK/tc.new" "$WORK/tc.json"
        done) &
        SAMPLER=$! ;;
    end)
        stop_sampler
        python3 - "$WORK/tc.json" <<'PY'
import json, sys
try:
    q = json.load(open(sys.argv[1]))[0]
except Exception:
    print("tc: no qdisc counters read"); sys.exit()
print(f"tbf {q['options']['rate'] * 8 / 1e6:.0f} Mbit/s: {q['overlimits']} overlimits, {q['drops']} drops, {q['bytes'] / 1e6:.0f} MB sent")
PY
        ;;
    esac
}

# A pg-sampler.sh counter at the last step, per sample: `pg_waiting DIR FIELD WHAT` prints
# "pg_stat_activity: N.N backends WHAT at C clients".
pg_waiting() {
    python3 - "$1/steps.jsonl" "$2" "$3" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
top = max((s for s in steps if s.get("status") == "ok"), key=lambda s: s["clients"])
m = top.get("target_metrics", {}).get("pg", {})
n = m.get("samples") or 0
mean = m.get(sys.argv[2], 0) / n if n else float("nan")
print(f"pg_stat_activity: {mean:.1f} backends {sys.argv[3]} at {top['clients']} clients")
PY
}

# pg-sync-commit.sh's sampler at the last step: backends waiting on the WAL flush.
confirm_pg_wal() {
    [ "$1" = end ] || return 0
    pg_waiting "$2" wal_waiting "waiting on the WAL flush"
}

# pg-hot-row.sh's sampler at the last step: backends waiting for the row lock.
confirm_pg_locks() {
    [ "$1" = end ] || return 0
    pg_waiting "$2" lock_waiting "waiting for a lock"
}

# "limit confidence" of a run's first diagnosis.
diagnosis_of() {
    "$STAIRBENCH" analyze "$1" --json |
        python3 -c 'import json,sys; d = json.load(sys.stdin)[0]; print(d["limit"], d["confidence"])'
}

wanted() {
    [ $# -eq 0 ] && return 0
    local c
    for c in "${SELECTED[@]}"; do [ "$c" = "$1" ] && return 0; done
    return 1
}
SELECTED=("$@")
join() { local out="" x; for x in "$@"; do out+="${out:+ / }$x"; done; echo "$out"; }

{
    echo "| case | truth | how confirmed (each run) | diagnosis (each run) | confidence |"
    echo "|---|---|---|---|---|"
} >"$OUT"
for line in "${CASES[@]}"; do
    IFS='|' read -r example truth how confirm <<<"$line"
    if [ ${#SELECTED[@]} -gt 0 ] && ! wanted "$example"; then continue; fi
    [ -f "examples/$example.toml" ] || { echo "limits: examples/$example.toml missing: skipped" >&2; continue; }
    figures=() limits=() confidences=()
    for run in $(seq "$RUNS"); do
        dir="$WORK/$example-$run"
        "$confirm" begin
        # --keep-disturbed: a neighbour is one of the limits the table reads; without it a
        # step whose CPUs a neighbour shared would be run again and left out of the diagnosis.
        if $FAVOURED "$STAIRBENCH" run "examples/$example.toml" --keep-disturbed --out "$dir" >"$dir.log" 2>&1; then
            read -r limit confidence < <(diagnosis_of "$dir")
        else
            limit="failed (see $dir.log)" confidence="-"
        fi
        figure=$("$confirm" end "$dir" | tr '\n' ' ' | sed 's/ *$//')
        echo "limits: $example run $run: $limit ($confidence); $figure" >&2
        figures+=("$figure") limits+=("$limit") confidences+=("$confidence")
    done
    echo "| \`$example\` | $truth | $how: $(join "${figures[@]}") | $(join "${limits[@]}") | $(join "${confidences[@]}") |" >>"$OUT"
done
echo "limits: runs in $WORK (${FAVOURED:-normal priority}; load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
cat "$OUT"

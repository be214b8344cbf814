#!/bin/sh
# nginx (nginx.sh) with a CPU hog pinned on its CPU, for examples/limits-neighbour.toml:
# another tenant's busy process that shares the server's CPU for the whole run.
#   nginx-neighbour.sh OUT_DIR PORT WORKERS [NICE]
# NICE (default 0) is the hog's niceness: at 19 it only fills the time nginx leaves idle (the
# scheduler preempts it whenever nginx wakes), and is then not nginx's limit.
# The hog is a shell loop started by a double fork in a session of its own (setsid): its
# parent exits at once, so it is no descendant of nginx's master (this script becomes it)
# and in no process group stairbench started: to stairbench it is another process. It runs
# on the CPUs stairbench pinned this script to and ends when nginx does; stairbench, which
# inherits it as an orphan, ends it with the server (never with a step's client).
# Every 20,000 turns it writes its own /proc/PID/stat line and /proc/uptime to
# OUT_DIR/hog.stat: its CPU over its life, from the kernel, for confirmation.
set -e
# Both under the normal scheduler: a server favoured by SCHED_FIFO (the solo tests' chrt)
# would never let a hog of normal priority take its CPU, and a hog under FIFO would starve it.
chrt -o -p 0 $$ 2>/dev/null || true
cpus=$(taskset -pc $$ | sed 's/.*: //')
server=$$
hog_nice=${4:-0}
(setsid nice -n "$hog_nice" sh -c '
    out=$1 server=$2 i=0
    # With autogroups (kernel.sched_autogroup_enabled) a new session is a scheduling group
    # of its own, and a niceness counts only within its group: the group gets it too.
    echo "$3" 2>/dev/null >"/proc/$$/autogroup" || true
    while kill -0 "$server" 2>/dev/null; do
        i=$((i + 1))
        if [ $i -ge 20000 ]; then
            i=0
            read -r stat </proc/$$/stat
            read -r up _ </proc/uptime
            printf "%s\n%s\n" "$stat" "$up" >"$out/hog.stat"
        fi
    done' hog "$1" "$server" "$hog_nice" </dev/null >/dev/null 2>&1 &)
exec taskset -c "$cpus" sh "$(dirname "$0")/nginx.sh" "$1" "$2" "$3"

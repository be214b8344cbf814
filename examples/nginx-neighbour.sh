#!/bin/sh
# nginx (nginx.sh) with a CPU hog pinned on its CPU, for examples/limits-neighbour.toml:
# another tenant's busy process that shares the server's CPU for the whole run.
#   nginx-neighbour.sh OUT_DIR PORT WORKERS [NICE] [KIND]
# NICE (default 0) is the hog's niceness: at 19 it only fills the time nginx leaves idle (the
# scheduler preempts it whenever nginx wakes), and is then not nginx's limit.
# KIND (default `loop`) is what the hog does: `loop` spins in the shell itself; `forks` runs
# /bin/true over and over, so most of its CPU is in processes that live a millisecond each
# and that no scan of /proc ever sees (a build, a shell script's commands): only the shell's
# reaped-children counter (cutime, cstime) has it.
# The hog is a shell loop started by a double fork in a session of its own (setsid): its
# parent exits at once, so it is no descendant of nginx's master (this script becomes it)
# and in no process group stairbench started: to stairbench it is another process. It runs
# on the CPUs stairbench pinned this script to and ends when nginx does; stairbench, which
# inherits it as an orphan, ends it with the server (never with a step's client).
# Every 20,000 turns (200 with `forks`) it writes its own /proc/PID/stat line and /proc/uptime
# to OUT_DIR/hog.stat: its CPU over its life (its reaped children's in fields 16 and 17),
# from the kernel, for confirmation.
set -e
# Both under the normal scheduler: a server favoured by SCHED_FIFO (the solo tests' chrt)
# would never let a hog of normal priority take its CPU, and a hog under FIFO would starve it.
chrt -o -p 0 $$ 2>/dev/null || true
cpus=$(taskset -pc $$ | sed 's/.*: //')
server=$$
hog_nice=${4:-0}
hog_kind=${5:-loop}
case "$hog_kind" in
loop) every=20000 ;;
forks) every=200 ;;
*) echo "nginx-neighbour.sh: KIND must be loop or forks, not '$hog_kind'" >&2; exit 1 ;;
esac
(setsid nice -n "$hog_nice" sh -c '
    out=$1 server=$2 kind=$4 every=$5 i=0
    # With autogroups (kernel.sched_autogroup_enabled) a new session is a scheduling group
    # of its own, and a niceness counts only within its group: the group gets it too.
    echo "$3" 2>/dev/null >"/proc/$$/autogroup" || true
    while kill -0 "$server" 2>/dev/null; do
        [ "$kind" = forks ] && /bin/true
        i=$((i + 1))
        if [ $i -ge "$every" ]; then
            i=0
            read -r stat </proc/$$/stat
            read -r up _ </proc/uptime
            printf "%s\n%s\n" "$stat" "$up" >"$out/hog.stat"
        fi
    done' hog "$1" "$server" "$hog_nice" "$hog_kind" "$every" </dev/null >/dev/null 2>&1 &)
exec taskset -c "$cpus" sh "$(dirname "$0")/nginx.sh" "$1" "$2" "$3"

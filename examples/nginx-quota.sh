#!/bin/sh
# nginx (nginx.sh) inside a CPU cgroup whose quota is 20% of one CPU: the container case, for
# examples/limits-quota.toml.   nginx-quota.sh OUT_DIR PORT WORKERS
# Makes the cgroup stairbench-quota-PORT (cgroup v2: cpu.max; v1: cpu.cfs_quota_us, with a
# cpuacct group of the same name), moves itself and so nginx into it, and removes it when
# nginx has ended. The cgroup's own cpu.stat is copied to OUT_DIR/quota-cpu.stat.start when
# nginx starts and .end when it ends: the kernel's count of the throttling, for confirmation.
# Needs root (making a cgroup).
set -e
if [ "$(id -u)" != 0 ]; then
    echo "nginx-quota.sh: making a CPU cgroup needs root: run stairbench as root (sudo)" >&2
    exit 1
fi
# The normal scheduler: a quota throttles only its tasks (a server under SCHED_FIFO, as the
# solo tests' chrt runs it, would ignore the quota, and v1 refuses it in a group without an
# RT budget).
chrt -o -p 0 $$ 2>/dev/null || true
name="stairbench-quota-$2"
root=/sys/fs/cgroup
if [ -f "$root/cgroup.controllers" ] && grep -qw cpu "$root/cgroup.controllers"; then
    # cgroup v2, the cpu controller enabled for the root's children.
    grep -qw cpu "$root/cgroup.subtree_control" || echo +cpu >"$root/cgroup.subtree_control"
    dirs="$root/$name"
    mkdir -p "$dirs"
    echo "20000 100000" >"$root/$name/cpu.max"
elif [ -f "$root/cpu/cpu.cfs_quota_us" ]; then
    dirs="$root/cpu/$name"
    mkdir -p "$dirs"
    echo 100000 >"$root/cpu/$name/cpu.cfs_period_us"
    echo 20000 >"$root/cpu/$name/cpu.cfs_quota_us"
    if [ -d "$root/cpuacct" ] && [ ! -f "$root/cpu/cpuacct.usage" ]; then
        mkdir -p "$root/cpuacct/$name"
        dirs="$dirs $root/cpuacct/$name"
    fi
else
    echo "nginx-quota.sh: no cgroup CPU controller under $root (neither v2's cpu nor v1's cpu)" >&2
    exit 1
fi
quota_dir=${dirs%% *}
# Groups an earlier run could not remove (it was killed), if empty.
for d in "$root"/cpu/stairbench-quota-* "$root"/cpuacct/stairbench-quota-* "$root"/stairbench-quota-*; do
    case " $dirs " in
    *" $d "*) ;;
    *) rmdir "$d" 2>/dev/null || true ;;
    esac
done
for d in $dirs; do echo $$ >"$d/cgroup.procs"; done
cleanup() {
    cp "$quota_dir/cpu.stat" "$1/quota-cpu.stat.end" 2>/dev/null || true
    for d in $dirs; do
        echo $$ >"${d%/*}/cgroup.procs"
        rmdir "$d" 2>/dev/null || true
    done
}
# On the stop signal: nginx (in this process group) has it too; wait up to 1.5 s for it to go,
# polling (a `wait` here could outlast stairbench's stop timeout), then clean up.
stopped() {
    i=0
    while kill -0 "$nginx" 2>/dev/null && [ $i -lt 15 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    cleanup "$1"
    exit 0
}
trap 'stopped "$1"' INT TERM
cp "$quota_dir/cpu.stat" "$1/quota-cpu.stat.start"
sh "$(dirname "$0")/nginx.sh" "$@" &
nginx=$!
wait $nginx || true
cleanup "$1"

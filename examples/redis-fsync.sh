#!/bin/sh
# A key-value store that syncs every write to its disk before it answers, behind a write-IOPS
# throttle, for examples/limits-fsync.toml:   redis-fsync.sh OUT_DIR PORT WRITE_IOPS
# redis-server with its append-only file synced on every write (appendfsync always: the main
# thread fsyncs the file before it replies to the writes of one event-loop pass, so one sync
# carries every write that arrived together: group commit). Before it starts, this shell moves
# itself into a cgroup `sb-fsync` whose I/O throttle limits the write operations on the disk
# holding OUT_DIR to WRITE_IOPS per second (v1 blkio.throttle.write_iops_device, else v2
# io.max wiops). Delay accounting is left as the kernel has it. Needs root (cgroups).
set -e
if [ "$(id -u)" != 0 ]; then
    echo "redis-fsync.sh: limits-fsync.toml needs root: it puts redis in a cgroup with an I/O throttle" >&2
    exit 1
fi
out="$1/redis-$2"
port="$2"
iops="$3"
rm -rf "$out"
mkdir -p "$out"
# The whole disk holding OUT_DIR (a throttle applies to disks, not partitions).
dev=$(findmnt -no MAJ:MIN -T "$out" | tr -d ' ')
case "$dev" in
0:*|"") echo "redis-fsync.sh: $out is not on a block device ($dev): nothing to throttle" >&2; exit 1 ;;
esac
if [ -e "/sys/dev/block/$dev/partition" ]; then
    dev=$(cat "$(readlink -f "/sys/dev/block/$dev")/../dev")
fi
v2=$(findmnt -rn -t cgroup2 -o TARGET | while read -r m; do
    grep -qw io "$m/cgroup.controllers" 2>/dev/null && echo "$m" && break
done || true)
if [ -f /sys/fs/cgroup/blkio/blkio.throttle.write_iops_device ]; then
    cg=/sys/fs/cgroup/blkio/sb-fsync
    mkdir -p $cg
    echo "$dev $iops" >$cg/blkio.throttle.write_iops_device
elif [ -n "$v2" ]; then
    echo +io >"$v2/cgroup.subtree_control"
    cg=$v2/sb-fsync
    mkdir -p $cg
    echo "$dev wiops=$iops" >$cg/io.max
else
    echo "redis-fsync.sh: no blkio (v1) or io (v2) cgroup controller mounted" >&2
    exit 1
fi
echo $$ >$cg/cgroup.procs
echo "redis-fsync.sh: write operations on $dev throttled to $iops/s in $cg" >&2
exec redis-server --port "$port" --bind 127.0.0.1 --dir "$out" --save '' \
    --appendonly yes --appendfsync always --daemonize no

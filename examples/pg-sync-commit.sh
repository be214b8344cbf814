#!/bin/sh
# A throw-away PostgreSQL whose every commit waits for its disk, behind an I/O throttle, for
# examples/limits-disk.toml:   pg-sync-commit.sh OUT_DIR PORT METRICS WRITE_BYTES_PER_S
# A fresh cluster in OUT_DIR with synchronous commits (fsync and synchronous_commit on, the
# defaults; wal_init_zero off, so that a new WAL segment is not 16 MB of zeros written through
# the throttle) and table t(v bytea) stored uncompressed (each pg-sync-commit.sql transaction
# writes its 64000 bytes to the WAL). Before anything starts, this shell moves itself into
# a cgroup `sb-disk` whose I/O throttle limits writes to the device holding OUT_DIR to
# WRITE_BYTES_PER_S (v1 blkio.throttle.write_bps_device, else v2 io.max wbps): each commit's
# WAL flush waits for it. It also turns delay accounting on (sysctl kernel.task_delayacct=1,
# left on) so stairbench can count the server's block-I/O wait.
# A sampler reads the server's own pg_stat_activity every 100 ms and keeps counters in
# METRICS (JSON) for stairbench's target metrics:
#   samples       samples taken
#   wal_waiting   client backends waiting for the WAL flush (wait_event WALSync, WALWrite), summed
#   io_waiting    client backends waiting on any I/O (wait_event_type IO), summed
# so a step's wal_waiting / samples is the mean number of backends waiting for the disk.
# Needs root (cgroups, sysctl): refuses clearly otherwise. As in pg-hot-row.sh, PostgreSQL runs
# as user postgres and this shell stays the parent of the server and the sampler.
set -e
if [ "$(id -u)" != 0 ]; then
    echo "pg-sync-commit.sh: limits-disk.toml needs root: it puts PostgreSQL in a cgroup with an I/O throttle" >&2
    exit 1
fi
out="$1/pg-$2"
port="$2"
metrics="$3"
bps="$4"
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
as_pg="setpriv --reuid=postgres --regid=postgres --init-groups"
rm -rf "$out"
mkdir -p "$out"
chmod 777 "$out"
# A run directory only root can reach (a clone in /root, a `mktemp -d`): the cluster goes to a
# directory of its own that user postgres can reach, removed when this shell ends.
if ! $as_pg test -x "$out"; then
    out=$(mktemp -d /var/tmp/stairbench-pg.XXXXXX)
    chmod 777 "$out"
    trap 'rm -rf "$out"' EXIT
    trap 'exit 0' INT TERM
fi
# The whole disk holding OUT_DIR (a throttle applies to disks, not partitions).
dev=$(findmnt -no MAJ:MIN -T "$out" | tr -d ' ')
case "$dev" in
0:*|"") echo "pg-sync-commit.sh: $out is not on a block device ($dev): nothing to throttle" >&2; exit 1 ;;
esac
if [ -e "/sys/dev/block/$dev/partition" ]; then
    dev=$(cat "$(readlink -f "/sys/dev/block/$dev")/../dev")
fi
sysctl -qw kernel.task_delayacct=1
# v1 where the blkio controller is mounted (its files, not an empty mount point); else the
# cgroup2 hierarchy that has the io controller (/sys/fs/cgroup, or /sys/fs/cgroup/unified
# beside v1 hierarchies once blkio is unmounted there).
# (`|| true`: the loop's status is its last grep's, and set -e would end the script on it.)
v2=$(findmnt -rn -t cgroup2 -o TARGET | while read -r m; do
    grep -qw io "$m/cgroup.controllers" 2>/dev/null && echo "$m" && break
done || true)
if [ -f /sys/fs/cgroup/blkio/blkio.throttle.write_bps_device ]; then
    cg=/sys/fs/cgroup/blkio/sb-disk
    mkdir -p $cg
    echo "$dev $bps" >$cg/blkio.throttle.write_bps_device
elif [ -n "$v2" ]; then
    echo +io >"$v2/cgroup.subtree_control"
    cg=$v2/sb-disk
    mkdir -p $cg
    echo "$dev wbps=$bps" >$cg/io.max
else
    echo "pg-sync-commit.sh: no blkio (v1) or io (v2) cgroup controller mounted" >&2
    exit 1
fi
echo $$ >$cg/cgroup.procs
echo "pg-sync-commit.sh: writes to $dev throttled to $bps bytes/s in $cg" >&2
$as_pg "$bin/initdb" -D "$out/data" -U postgres --auth=trust --no-sync -E UTF8 >"$out/initdb.log" 2>&1
echo "CREATE TABLE t (v bytea NOT NULL); ALTER TABLE t ALTER COLUMN v SET STORAGE EXTERNAL;" |
    $as_pg "$bin/postgres" --single -D "$out/data" postgres >"$out/setup.log" 2>&1
query="SELECT count(*) FILTER (WHERE wait_event IN ('WALSync', 'WALWrite')),
 count(*) FILTER (WHERE wait_event_type = 'IO')
 FROM pg_stat_activity WHERE backend_type = 'client backend'"
. "$(dirname "$0")/pg-sampler.sh"
pg_sample "$port" "$metrics" "$out/sampler.log" "$query" wal_waiting io_waiting
$as_pg "$bin/postgres" -D "$out/data" -p "$port" -k "$out" -c listen_addresses=127.0.0.1 \
    -c max_connections=100 -c wal_init_zero=off

#!/bin/sh
# A throw-away PostgreSQL with one hot row, for examples/limits-contention.toml and
# limits-coherency.toml: a fresh cluster in OUT_DIR (fsync and synchronous commit off: no
# disk in the way), table t(id, v) holding the row id = 1 that every transaction updates, and
# a sampler that reads the server's own pg_stat_activity every 100 ms and keeps counters in
# METRICS (JSON, rewritten after each sample) for stairbench's target metrics:
#   samples        samples taken
#   lock_waiting   client backends waiting for a lock (wait_event_type = 'Lock'), summed
#   active         client backends running a statement or waiting inside one, summed
# so a step's lock_waiting / samples is the mean number of backends queued on the row lock.
#   pg-hot-row.sh OUT_DIR PORT METRICS
# As root it runs the server as user postgres (PostgreSQL refuses root). This shell stays the
# parent of both the server and the sampler: the sampler must not be the postmaster's child
# (it would take its exit for a crashed backend) nor an orphan (stairbench ends the orphans
# reparented to it after each external tool's run). It is therefore part of the observed
# server tree: about 1% of a CPU (a psql and a shell loop waking 10 times a second).
set -e
out="$1/pg-$2"
port="$2"
metrics="$3"
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
as_pg=""
if [ "$(id -u)" = 0 ]; then
    as_pg="setpriv --reuid=postgres --regid=postgres --init-groups"
fi
# A run directory user postgres cannot enter (under /root, a mktemp -d): the cluster goes to a
# directory of its own in /tmp, removed when the server has ended (this shell then ignores
# the stop signal, which still reaches the server in its process group, and cleans up).
if [ -n "$as_pg" ] && ! $as_pg test -x "$1"; then
    out=$(mktemp -d /tmp/stairbench-pg-XXXXXX)
    trap 'rm -rf "$out"' EXIT
    trap '' INT TERM
fi
rm -rf "$out"
mkdir -p "$out"
chmod 777 "$out"
$as_pg "$bin/initdb" -D "$out/data" -U postgres --auth=trust --no-sync -E UTF8 >"$out/initdb.log" 2>&1
echo "CREATE TABLE t (id int PRIMARY KEY, v bigint NOT NULL); INSERT INTO t VALUES (1, 0);" |
    $as_pg "$bin/postgres" --single -D "$out/data" -c fsync=off postgres >"$out/setup.log" 2>&1
query="SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'),
 count(*) FILTER (WHERE state = 'active') - 1
 FROM pg_stat_activity WHERE backend_type = 'client backend'"
. "$(dirname "$0")/pg-sampler.sh"
pg_sample "$port" "$metrics" "$out/sampler.log" "$query" lock_waiting active
$as_pg "$bin/postgres" -D "$out/data" -p "$port" -k "$out" -c listen_addresses=127.0.0.1 \
    -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=100

#!/bin/sh
# nginx as a reverse proxy in front of gunicorn (2 sync workers, slow_app.py: 5 ms a request),
# for examples/limits-upstream*.toml.   proxied-gunicorn.sh OUT_DIR PORT apart|inside|remote [SPIN_MS]
# nginx listens on the port stairbench chose and passes every request to gunicorn on a free
# local port (one new connection a request: gunicorn's sync workers close each). gunicorn is
# the limit: it serves 2 requests at once, the rest wait in its listen socket's accept queue.
#   apart   gunicorn is started from a subshell that exits at once, so it is reparented to
#           stairbench (the subreaper) and is not part of the observed tree (nginx alone): the
#           limit is outside both processes, in the upstream.
#   inside  gunicorn is started by this script, which then becomes nginx: gunicorn is nginx's
#           child, inside the observed tree.
#   remote  gunicorn runs apart, in the network namespace sb-remote (10.233.34.2, one end of a
#           veth pair whose other end, sb-remote-h, is the host's 10.233.34.1): to nginx it is
#           a remote host, no process of nginx's network namespace holds its listening socket
#           (limits-remote.toml). Needs root (ip netns); the namespace goes when the target
#           ends (INT or TERM), or at the next start after a run killed hard.
# With SPIN_MS each request computes that long instead of waiting (slow_app.py's
# SLOW_APP_SPIN_MS) and gunicorn is pinned to one CPU: its CPU is then the limit (2 workers
# on 1 CPU), not its workers.
# gunicorn's access log (OUT_DIR/nginx-PORT/access.log) counts what it served; its port is in
# OUT_DIR/nginx-PORT/upstream.port. Both stay in the target's process group and end with it.
set -e
prefix="$1/nginx-$2"
mkdir -p "$prefix/tmp"
here=$(cd "$(dirname "$0")" && pwd)
up=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
host=127.0.0.1
if [ "$3" = remote ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "proxied-gunicorn.sh: remote needs root: it creates a network namespace (ip netns)" >&2
        exit 1
    fi
    host=10.233.34.2
    ip netns del sb-remote 2>/dev/null || true
    ip link del sb-remote-h 2>/dev/null || true
    ip netns add sb-remote
    ip link add sb-remote-h type veth peer name sb-remote-n netns sb-remote
    ip addr add 10.233.34.1/30 dev sb-remote-h
    ip link set sb-remote-h up
    ip netns exec sb-remote ip link set lo up
    ip netns exec sb-remote ip addr add $host/30 dev sb-remote-n
    ip netns exec sb-remote ip link set sb-remote-n up
fi
echo "$up" > "$prefix/upstream.port"
cat > "$prefix/nginx.conf" <<CONF
daemon off;
worker_processes 1;
error_log stderr warn;
pid nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path tmp/body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
    server {
        listen 127.0.0.1:$2;
        location / { proxy_pass http://$host:$up; }
    }
}
CONF
spin=${4:-0}
env="SLOW_APP_SPIN_MS=$spin"
pin=
if [ "$spin" != 0 ]; then
    env="$env SLOW_APP_DELAY_MS=0"
    pin="taskset -c $(python3 -c 'import os; print(min(os.sched_getaffinity(0)))')"
fi
gunicorn="env $env $pin /usr/bin/python3 -m gunicorn --chdir $here --workers 2 --worker-class sync --backlog 2048 --bind $host:$up --access-logfile $prefix/access.log --log-level warning slow_app:app"
case "$3" in
    apart) (sh -c "exec $gunicorn" &) ;;
    inside) sh -c "exec $gunicorn" & ;;
    remote) (ip netns exec sb-remote sh -c "exec $gunicorn" &) ;;
    *) echo "proxied-gunicorn.sh: apart, inside or remote, not $3" >&2; exit 2 ;;
esac
# nginx starts once gunicorn answers, so that no request meets a closed port.
python3 - "$up" "$host" <<'PY'
import socket, sys, time
for _ in range(200):
    try:
        socket.create_connection((sys.argv[2], int(sys.argv[1])), 0.1).close()
        break
    except OSError:
        time.sleep(0.05)
PY
if [ "$3" != remote ]; then
    exec nginx -p "$prefix" -c "$prefix/nginx.conf"
fi
# The namespace is removed whichever way the target ends (stairbench stops its process group).
# set +e in the trap and `|| true` after the wait: nginx ends on the same signal, so the kill
# and the wait may fail, and set -e would leave before the namespace is removed.
trap 'set +e; kill $pid 2>/dev/null; wait $pid; ip netns del sb-remote 2>/dev/null; exit 0' INT TERM
nginx -p "$prefix" -c "$prefix/nginx.conf" &
pid=$!
wait $pid || true
ip netns del sb-remote 2>/dev/null || true

#!/bin/sh
# nginx in a network namespace behind a shaped link, for examples/limits-link.toml:
#   shaped-nginx.sh OUT_DIR PORT RATE PER_CONNECTION
# The namespace `sb-link` holds one end of a veth pair, sb-link-n (10.233.33.2/30), whose
# egress (the replies) `tc qdisc ... tbf rate RATE` shapes; the host keeps sb-link-h
# (10.233.33.1/30). nginx serves /64k: 65536 random bytes (nothing to compress), each
# connection at most PER_CONNECTION bytes/s (nginx's limit_rate, as each client's own slower
# path would: so that one client alone does not fill the link and the curve has a knee), in
# examples/nginx.sh's config. Prints "nginx is listening" when it is; on INT or TERM
# (stairbench stops the whole process group) the namespace and both veth ends are deleted.
# Needs root (namespaces, tc): refuses clearly otherwise.
set -e
if [ "$(id -u)" != 0 ]; then
    echo "shaped-nginx.sh: limits-link.toml needs root: it creates a network namespace (ip netns) and shapes its link (tc)" >&2
    exit 1
fi
ns=sb-link
# A namespace left by a run killed hard.
ip netns del $ns 2>/dev/null || true
ip link del sb-link-h 2>/dev/null || true
ip netns add $ns
ip link add sb-link-h type veth peer name sb-link-n netns $ns
ip addr add 10.233.33.1/30 dev sb-link-h
ip link set sb-link-h up
ip netns exec $ns ip link set lo up
ip netns exec $ns ip addr add 10.233.33.2/30 dev sb-link-n
ip netns exec $ns ip link set sb-link-n up
ip netns exec $ns tc qdisc add dev sb-link-n root tbf rate "$3" burst 64kb latency 50ms
# nginx.sh's config (its workers run as root: the run directory may be one only root can
# read), listening on the namespace's address, with /64k added.
prefix=$(NGINX_CONF_ONLY=1 sh "$(dirname "$0")/nginx.sh" "$1" "$2" 1 10.233.33.2)
head -c 65536 /dev/urandom >"$prefix/html/64k"
cat >"$prefix/locations/64k.conf" <<CONF
# limit_rate acts between writes: 16 KiB writes without sendfile let it pace a 64 KiB reply.
location = /64k {
    root html;
    default_type application/octet-stream;
    sendfile off;
    output_buffers 1 16k;
    limit_rate $4;
}
CONF
# The server's process tree lives in the namespace (stairbench reads the link of the tree's
# root's namespace); the trap removes it whichever way the run ends.
exec ip netns exec $ns sh -c '
    trap "kill \$pid 2>/dev/null; ip netns del sb-link; exit 0" INT TERM
    nginx -p "$1" -c "$1/nginx.conf" &
    pid=$!
    until ss -Hltn "sport = :$2" | grep -q .; do sleep 0.05; done
    echo "nginx is listening"
    wait $pid
    ip netns del sb-link
' sh "$prefix" "$2"

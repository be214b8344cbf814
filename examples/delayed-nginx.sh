#!/bin/sh
# nginx behind a delaying pipeline, for examples/limits-outside.toml: nginx listens on a unix
# socket in the run directory, delay-proxy.py on the port stairbench chose, with SLOTS places
# held DELAY_MS each.   delayed-nginx.sh OUT_DIR PORT SLOTS DELAY_MS
# The proxy is started from a subshell that exits at once, so it is reparented to stairbench
# (the subreaper) and is not part of the observed server tree, which is nginx alone: the
# pipeline is outside both the server and the client. It stays in the target's process group
# and ends with it.
set -e
prefix="$1/nginx-$2"
mkdir -p "$prefix/tmp"
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
        listen unix:$prefix/nginx.sock;
        location / { return 200 "hello from nginx\n"; }
    }
}
CONF
rm -f "$prefix/nginx.sock"
(python3 "$(dirname "$0")/delay-proxy.py" "$2" "$prefix/nginx.sock" "$3" "$4" &)
exec nginx -p "$prefix" -c "$prefix/nginx.conf"

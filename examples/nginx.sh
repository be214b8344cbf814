#!/bin/sh
# Starts nginx in the foreground for examples/nginx-wrk.toml: prefix and config in the run
# directory, listening on the port stairbench chose.   nginx.sh OUT_DIR PORT WORKERS [ADDR]
# `/` answers a short text; `/page.html` a 16 kB HTML table that nginx gzips afresh for every
# request that accepts gzip (the costly side for nginx-wrk.toml). ADDR is the address it
# listens on (127.0.0.1 by default). Other scripts reuse this config: each `*.conf` in the
# prefix's `locations/` is included in its server block, and with NGINX_CONF_ONLY=1 the
# script only writes the config and prints the prefix (examples/shaped-nginx.sh then starts
# nginx in its namespace).
set -e
prefix="$1/nginx-$2"
mkdir -p "$prefix/tmp" "$prefix/html" "$prefix/locations"
i=0
while [ $i -lt 200 ]; do
    echo "<tr><td>row $i</td><td>$((i * 7919 % 10007))</td><td>compressed again for each request</td></tr>"
    i=$((i + 1))
done > "$prefix/html/page.html"
# The page's directory as an nginx string: nginx reads a `$` in a path as a variable, so each
# is written as ${dollar} (a variable holding "$"), and \ and " are escaped.
html=$(printf '%s/html' "$prefix" | sed -e 's/[\\"]/\\&/g' -e 's/\$/${dollar}/g')
# As root, nginx's workers would run as an unprivileged user (www-data, nobody) that cannot
# read the page when the run directory lies under one only root may enter (a clone in /root,
# a mktemp -d): they run as root then, and the page is served (not 403).
user=""
if [ "$(id -u)" = 0 ]; then
    user="user root root;"
fi
cat > "$prefix/nginx.conf" <<CONF
daemon off;
$user
worker_processes $3;
error_log stderr warn;
pid nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    geo \$dollar { default "\$"; }
    client_body_temp_path tmp/body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
    server {
        listen ${4:-127.0.0.1}:$2;
        include locations/*.conf;
        location / { return 200 "hello from nginx\n"; }
        location = /page.html {
            root "$html";
            default_type text/html;
            gzip on;
            gzip_comp_level 6;
        }
    }
}
CONF
if [ "${NGINX_CONF_ONLY:-0}" = 1 ]; then
    echo "$prefix"
    exit 0
fi
exec nginx -p "$prefix" -c "$prefix/nginx.conf"

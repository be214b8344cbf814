#!/bin/sh
# A history of real runs (docs/history.md, "On real software: nginx"): nginx gzipping a 16 kB
# page on the server's CPU, wrk on the client's, run RUNS times (2 levels of 2 s, one
# repetition each, about 5 s a run), each added with `stairbench run SPEC --history FILE
# --label run=N`:
#   - change: gzip_comp_level 1 for runs 0..CHANGE_AT-1, 6 from run CHANGE_AT on (a
#     configuration that costs nginx more CPU per request);
#   - aa: level 1 throughout (an A/A history of the same length, nothing changed).
# The two histories' runs alternate. Runs use --keep-disturbed: on a shared machine every step
# may be disturbed, and a history of failed runs shows nothing. Prints `stairbench history
# FILE` of both and writes their pages (change.html, aa.html).
#   bench/history_nginx.sh [OUT_DIR]   (env: BIN, RUNS=22, CHANGE_AT=11, PICTURES=1)
# Needs nginx and wrk. The run directories, databases and pages are kept in OUT_DIR.
set -e
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$here/target/debug/stairbench}
out=${1:-/tmp/history-nginx}
runs=${RUNS:-22}
change_at=${CHANGE_AT:-11}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The server: examples/nginx.sh's config (one worker), plus /h.html gzipped at LEVEL.
cat > "$out/server.sh" <<'SH'
#!/bin/sh
# server.sh OUT_DIR PORT LEVEL: nginx with one worker serving /h.html gzipped at LEVEL.
set -e
prefix=$(NGINX_CONF_ONLY=1 sh "$(dirname "$0")/nginx.sh" "$1" "$2" 1)
cp "$prefix/html/page.html" "$prefix/html/h.html"
cat > "$prefix/locations/h.conf" <<CONF
location = /h.html { root "$prefix/html"; default_type text/html; gzip on; gzip_comp_level $3; }
CONF
exec nginx -p "$prefix" -c "$prefix/nginx.conf"
SH
cp "$here/examples/nginx.sh" "$out/nginx.sh"
for level in 1 6; do
    cat > "$out/level$level.toml" <<TOML
# nginx with gzip_comp_level $level (written by bench/history_nginx.sh)
name = "history-nginx"
duration = "2s"
warmup = "0s"
clients = [2, 8]
placements = ["separated"]

[[targets]]
name = "nginx"
command = "sh {spec_dir}/server.sh {out} {port} $level"
ready = { tcp = true, timeout = "5s" }

[client]
command = "wrk -t{threads} -c{connections} -d{duration_s}s --latency -H 'Accept-Encoding: gzip' http://127.0.0.1:{port}/h.html"
parser = "wrk"
TOML
done

# run NAME I LEVEL: run I of history NAME, added to NAME.db with its labels.
run() {
    run_dir=$(printf '%s/%s/run-%02d' "$out" "$1" "$2")
    "$bin" run "$out/level$3.toml" --out "$run_dir" --quiet --keep-disturbed \
        --history "$out/$1.db" --label "run=$2" --label "gzip_level=$3" >/dev/null
}

for name in change aa; do
    rm -rf "${out:?}/$name" "$out/$name.db" "$out/$name.db-wal" "$out/$name.db-shm"
    mkdir -p "$out/$name"
done
# The two histories' runs alternate, so that what the machine's other tenants do over time
# reaches both alike: the A/A history is the change history's control.
i=0
while [ "$i" -lt "$runs" ]; do
    level=1
    [ "$i" -ge "$change_at" ] && level=6
    run change "$i" "$level"
    run aa "$i" 1
    i=$((i + 1))
done
for name in change aa; do
    echo "== $name: stairbench history $out/$name.db"
    "$bin" history "$out/$name.db" --html "$out/$name.html"
done

# With PICTURES=1: the top of each page at 390 px, as docs/history-nginx.png and
# docs/history-nginx-aa.png were taken (headless Chromium).
if [ "${PICTURES:-0}" = 1 ]; then
    for name in change aa; do
        timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run \
            --disable-background-networking --disable-component-update --disable-sync \
            --user-data-dir="$out/chromium" --hide-scrollbars --force-device-scale-factor=1 \
            --virtual-time-budget=3000 --window-size=390,1300 \
            --screenshot="$out/$name.png" "file://$out/$name.html" >"$out/chromium.log" 2>&1
        echo "$out/$name.png"
    done
fi

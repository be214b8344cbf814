# Shared by the bench scripts (sourced after they set WORK, die and the settings):
# the server process group, its clean-up, free ports, readiness, and CPU time per run.

SERVER_PID=
cleanup() {
    if [ -n "$SERVER_PID" ]; then
        kill -TERM -- "-$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_is_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {
    local port
    for _ in $(seq 100); do
        port=$((20000 + RANDOM % 30000))
        port_is_open "$port" || { echo "$port"; return; }
    done
    die "no free port found"
}

wait_port() {
    for _ in $(seq 200); do
        port_is_open "$1" && return
        kill -0 "$SERVER_PID" 2>/dev/null || die "server exited: $(tail -5 "$WORK"/*.log 2>/dev/null)"
        sleep 0.05
    done
    die "server not listening on port $1 after 10 s"
}

# How to count a process's CPU: perf stat if permitted, else GNU time, else bash's `times`.
cpu_method() {
    if perf stat -x, -e task-clock -o /dev/null true 2>/dev/null; then
        echo perf
    elif [ -x /usr/bin/time ]; then
        echo time
    else
        echo times
    fi
}
CPU_METHOD=${CPU_METHOD:-$(cpu_method)} # perf, time or times

# measured CPU_FILE CMD...: runs CMD, stdout to CMD's own redirections, writes the whole
# process's CPU microseconds (user + system) to CPU_FILE.
measured() {
    local cpu_file=$1 raw="$1.raw"
    shift
    case $CPU_METHOD in
    perf)
        perf stat -x, -e task-clock -o "$raw" -- "$@"
        awk -F, '$3 ~ /^task-clock/ { printf "%.0f\n", $1 * 1000 }' "$raw" >"$cpu_file"
        ;;
    time)
        /usr/bin/time -f '%U %S' -o "$raw" -- "$@"
        awk 'NF == 2 { printf "%.0f\n", ($1 + $2) * 1e6 }' "$raw" | tail -1 >"$cpu_file"
        ;;
    times)
        bash -c '"$@"; times' _ "$@" >"$raw.out"
        # `times` prints the shell's, then its children's "user sys" as 0m1.234s.
        tail -1 "$raw.out" | awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/);
            printf "%.0f\n", (u[1] * 60 + u[2] + s[1] * 60 + s[2]) * 1e6 }' >"$cpu_file"
        head -n -2 "$raw.out"
        ;;
    esac
    [ -s "$cpu_file" ] || die "could not read the CPU time of: $* ($(cat "$raw" 2>/dev/null))"
}

# json_number FILE KEY: the first number stored under KEY in a JSON file.
json_number() {
    grep -oE "\"$2\"[[:space:]]*:[[:space:]]*[0-9.eE+-]+" "$1" | head -1 | sed -E 's/.*:[[:space:]]*//'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

report_run() { # TOOL N "requests rps cpu_us"
    set -- "$1" "$2" $3
    awk -v t="$1" -v n="$2" -v q="$3" -v r="$4" -v c="$5" 'BEGIN {
        printf "%-11s run %d: %10.0f req/s  %9d requests  %8.3f CPU µs/request\n", t, n, r, q, c / q }'
}

summary() { # FILE: "median_rps median_cpu_us_per_req"
    echo "$(awk '{ print $2 }' "$1" | median) $(awk '{ print $3 / $1 }' "$1" | median)"
}

# nginx_launch LISTEN [HTTP_LINES] [WORKER_CONNECTIONS] [RLIMIT_NOFILE]: writes
# $WORK/nginx.conf ($NGINX_WORKERS workers, default one; no access log, temp paths and root under $WORK, index.html
# "hello"), listening on LISTEN (e.g. "127.0.0.1:8080 http2"), with HTTP_LINES added to its
# http block; starts nginx ($NGINX) on core $SERVER_CPU in its own process group
# (SERVER_PID) and returns at once: the caller waits for the port.
nginx_launch() {
    local listen=$1 http_lines=${2:-} conns=${3:-4096} nofile=${4:-8192}
    mkdir -p "$WORK/root"
    printf 'hello\n' >"$WORK/root/index.html"
    cat >"$WORK/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes ${NGINX_WORKERS:-1};
worker_rlimit_nofile $nofile;
pid $WORK/nginx.pid;
error_log $WORK/error.log;
events { worker_connections $conns; }
http {
    access_log off;
    $http_lines
    client_body_temp_path $WORK/client_body;
    proxy_temp_path $WORK/proxy;
    fastcgi_temp_path $WORK/fastcgi;
    uwsgi_temp_path $WORK/uwsgi;
    scgi_temp_path $WORK/scgi;
    server {
        listen $listen;
        root $WORK/root;
        location / { index index.html; }
    }
}
EOF
    setsid taskset -c "$SERVER_CPU" "$NGINX" -c "$WORK/nginx.conf" -p "$WORK" \
        </dev/null >"$WORK/nginx.log" 2>&1 &
    SERVER_PID=$!
}

# grpc_lookalike_launch PORT: nginx ($NGINX) as a unary gRPC server that does no work: h2c
# on 127.0.0.1:PORT answering every POST with an empty gRPC message (the 5-byte prefix) and a
# `grpc-status: 0` trailer, whatever the method and request; on core $SERVER_CPU in its own
# process group (SERVER_PID). A generator's CPU per call is then measured at rates grpcio's
# Python server cannot reach. Returns once the port is open.
grpc_lookalike_launch() {
    mkdir -p "$WORK/grpc-root"
    printf '\x00\x00\x00\x00\x00' >"$WORK/grpc-root/reply.bin"
    cat >"$WORK/nginx-grpc.conf" <<CONF
daemon off;
master_process on;
worker_processes 1;
pid $WORK/nginx-grpc.pid;
error_log $WORK/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $WORK/client_body;
    proxy_temp_path $WORK/proxy;
    fastcgi_temp_path $WORK/fastcgi;
    uwsgi_temp_path $WORK/uwsgi;
    scgi_temp_path $WORK/scgi;
    server {
        listen 127.0.0.1:$1 http2;
        keepalive_requests 100000000;
        root $WORK/grpc-root;
        location / {
            default_type application/grpc;
            try_files /reply.bin =404;
            # A POST to a static file is 405: answered as the file instead.
            error_page 405 =200 /reply.bin;
            add_trailer grpc-status 0 always;
        }
    }
}
CONF
    setsid taskset -c "$SERVER_CPU" "$NGINX" -c "$WORK/nginx-grpc.conf" -p "$WORK" \
        </dev/null >"$WORK/nginx.log" 2>&1 &
    SERVER_PID=$!
    wait_port "$1"
}

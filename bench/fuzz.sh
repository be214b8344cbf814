#!/usr/bin/env bash
# Runs every cargo-fuzz target (fuzz/fuzz_targets) for SECONDS each, one job, seeded from
# tests/data, and prints each target's executions, time, rate, corpus size and peak RSS. A
# crash, timeout (10 s per input) or out-of-memory (2 GB) stops with libFuzzer's report and the
# input under fuzz/artifacts/TARGET/ (make it a regression test).
#
# Usage: bench/fuzz.sh [SECONDS]   (default 60)   env: TARGETS="http_response ..." (default all),
#   RUNS=N: stop a target after N executions instead (SECONDS then only bounds it; 0 = none).
#   MAX_LEN=N: libFuzzer's -max_len (default: guessed from the corpus; the hpack seeds, whole
#   stories, are up to 190 KB, and runs of that size go at about 1,200/s).
#   The campaign in README: `RUNS=10000000 bench/fuzz.sh 0` for all but flame, flame 3600 s
#   (SECONDS is the first argument: an environment variable of that name is bash's clock).
#   hpack and h2_conn are seeded from ../shared/conformance/hpack-test-case (or $STAIRBENCH_SHARED's)
#   when it is there (needs jq and xxd).
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`); on a stable toolchain it is run with
# RUSTC_BOOTSTRAP=1 (cargo-fuzz needs -Z flags). Built without a sanitizer (the parsers are safe
# Rust; it runs several times faster) and with debug assertions (overflow checks).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
ALL="http_response resp_reply memcache_reply msgr_frame shm_header spec_toml tool_output run_files kvd_peer metrics_request metrics_body hpack h2_conn flame"
RUNS=${RUNS:-}
MAX_LEN=${MAX_LEN:-}
TARGETS=${TARGETS:-$ALL}
command -v cargo-fuzz >/dev/null || { echo "fuzz: needs cargo-fuzz: cargo install cargo-fuzz --locked" >&2; exit 2; }
export RUSTC_BOOTSTRAP=1

# seed CORPUS_DIR SELECTOR_BYTE FILES...: copies FILES into the corpus, each prefixed with the
# selector byte (octal, e.g. 000) when one is given ("" for none).
seed() {
    local dir=$1 sel=$2
    shift 2
    mkdir -p "$dir"
    for f in "$@"; do
        [ -f "$f" ] || continue
        local name
        name="$dir/seed-$(basename "$f")-$sel"
        if [ -n "$sel" ]; then
            { printf "\\$sel"; cat "$f"; } >"$name"
        else
            cp "$f" "$name"
        fi
    done
}

literal() { # CORPUS_DIR NAME TEXT (printf escapes)
    mkdir -p "$1"
    printf -- "$3" >"$1/seed-$2"
}

# hpack_seeds CORPUS_DIR H2_CORPUS_DIR: each hpack-test-case story's header blocks as one
# hpack input (each block: a 2-byte length, then the block), and the first blocks of the
# nghttp2 stories as server HEADERS frames for h2_conn.
hpack_seeds() {
    local suite="" dir
    for dir in "${STAIRBENCH_SHARED:-}" ../shared /work/shared; do
        [ -n "$dir" ] && [ -d "$dir/conformance/hpack-test-case" ] && { suite=$dir/conformance/hpack-test-case; break; }
    done
    [ -n "$suite" ] && command -v jq >/dev/null && command -v xxd >/dev/null || return 0
    mkdir -p "$1" "$2"
    local f w n name
    for f in "$suite"/*/story_*.json; do
        name="$1/seed-$(basename "$(dirname "$f")")-$(basename "$f" .json)"
        [ -s "$name" ] && continue
        for w in $(jq -r '.cases[].wire // empty' "$f"); do
            n=$((${#w} / 2))
            printf "%04x%s" "$n" "$w" | xxd -r -p
        done >"$name"
    done
    for f in "$suite"/nghttp2/story_0*.json; do
        name="$2/seed-$(basename "$f" .json)"
        [ -s "$name" ] && continue
        {
            printf '\077\0\0\0\4\0\0\0\0\0'
            local id=1
            for w in $(jq -r '.cases[:8][].wire' "$f"); do
                printf "%06x0105%08x%s" "$((${#w} / 2))" "$id" "$w" | xxd -r -p
                id=$((id + 2))
            done
        } >"$name"
    done
}

make_corpora() {
    local c=fuzz/corpus
    # http_response's first byte: bit 0 = a reply to HEAD, the rest = bytes per read - 1.
    literal $c/http_response cl '\020HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello'
    literal $c/http_response chunked '\006HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n'
    literal $c/http_response close '\000HTTP/1.0 503 Busy\r\nConnection: close\r\nContent-Length: 0\r\n\r\n'
    literal $c/http_response head '\001HTTP/1.1 200 OK\r\nContent-Length: 612\r\n\r\n'
    literal $c/http_response interim '\002HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok'
    literal $c/http_response trailers '\010HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nX-T: 1\r\n\r\n'
    literal $c/http_response te_cl '\004HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n'
    hpack_seeds $c/hpack $c/h2_conn
    literal $c/h2_conn exchange '\077\0\0\6\4\0\0\0\0\0\0\3\0\0\0\144\0\0\1\1\5\0\0\0\1\210\0\0\1\1\4\0\0\0\3\210\0\0\5\0\1\0\0\0\3hello\0\0\10\6\0\0\0\0\0pingping\0\0\4\3\0\0\0\0\5\0\0\0\7\0\0\1\1\0\0\0\0\7\210\0\0\1\11\5\0\0\0\7\210\0\0\10\7\0\0\0\0\0\0\0\0\11\0\0\0\0'
    literal $c/h2_conn window '\001\0\0\0\4\0\0\0\0\0\0\0\4\10\0\0\0\0\0\0\0\1\0\0\0\4\10\0\0\0\0\1\0\0\1\0\0\0\1\1\4\0\0\0\1\210\0\0\0\0\1\0\0\0\1'
    literal $c/h2_conn grpc '\210\0\0\0\4\0\0\0\0\0\0\0\1\1\4\0\0\0\1\210\0\0\7\0\0\0\0\0\1\0\0\0\0\2hi\0\0\17\1\5\0\0\0\1\0\13grpc-status\0010\0\0\044\1\5\0\0\0\3\210\0\13grpc-status\00214\0\14grpc-message\004busy'
    literal $c/hpack response '\210\134\002\064\062\276'
    literal $c/resp_reply bulk '$5\r\nhello\r\n'
    literal $c/resp_reply nil '$-1\r\n'
    literal $c/resp_reply array '*2\r\n+OK\r\n:12\r\n'
    literal $c/resp_reply error '-ERR x\r\n'
    literal $c/memcache_reply hit 'VALUE key:1 0 5\r\nhello\r\nEND\r\n'
    literal $c/memcache_reply miss 'END\r\n'
    literal $c/memcache_reply stored 'STORED\r\n'
    literal $c/memcache_reply meta-hit 'VA 2 f0 t-1\r\nab\r\n'
    literal $c/memcache_reply meta-miss 'EN\r\n'
    literal $c/memcache_reply error 'SERVER_ERROR out of memory\r\n'
    literal $c/msgr_frame reply '\100\0\0\0\0\0\0\0'
    literal $c/msgr_frame request '\4\0\0\0\4\0\0\0abcd'
    # kvd: a hello for "127.0.0.1:7001,127.0.0.1:7002" (rank 1), then a request and a reply.
    literal $c/kvd_peer hello 'SBKVD001\1\0\0\0\35\0\0\000127.0.0.1:7001,127.0.0.1:7002'
    literal $c/kvd_peer request '\25\0\0\0\1\1\10\0\7\0\0\0key:0042hello'
    literal $c/kvd_peer response '\15\0\0\0\2\0\0\0\7\0\0\0hello'
    literal $c/metrics_request get 'GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9464\r\nAccept: */*\r\n\r\n'
    literal $c/metrics_request short 'GET /\n\n'
    literal $c/metrics_body length 'HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{"a": 1}\n'
    literal $c/metrics_body chunked 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\n{"\303\r\n5\r\n\251":1}\r\n0\r\nT: 1\r\n\r\n'
    literal $c/metrics_body close 'HTTP/1.0 200 OK\r\n\r\n{"counters": {"loops": 5}}'
    seed $c/spec_toml "" tests/data/sweep/*.toml examples/*.toml
    seed $c/tool_output 000 tests/data/parsers/wrk_*
    seed $c/tool_output 001 tests/data/parsers/redis_benchmark_*
    seed $c/tool_output 002 tests/data/parsers/crimson_msgr_*
    seed $c/tool_output 003 tests/data/parsers/stairbench_load_*.json
    seed $c/tool_output 005 tests/data/parsers/stairbench_load_*.json
    seed $c/run_files 000 tests/data/report/hist/*.hlog
    seed $c/run_files 001 tests/data/report/steps.jsonl
    seed $c/run_files 002 tests/data/sweep/*cpusets*.json
    literal $c/run_files cpus '\0030-3,8,10-11'
    seed $c/shm_header "" tests/data/shmkv/*.hdr
    if [ ! -s $c/flame/seed-workers ] && [ -f tests/data/flame/workers.perf-script.gz ]; then
        mkdir -p $c/flame
        gunzip -c tests/data/flame/workers.perf-script.gz >$c/flame/seed-workers
    fi
}

make_corpora
summary=""
for t in $TARGETS; do
    log=$(mktemp)
    limits=(-max_total_time="$SECONDS_EACH")
    [ -n "$RUNS" ] && limits+=(-runs="$RUNS")
    [ -n "$MAX_LEN" ] && limits+=(-max_len="$MAX_LEN")
    echo "== $t: ${limits[*]}"
    start=$(date +%s)
    if ! cargo fuzz run --fuzz-dir fuzz --sanitizer none --debug-assertions "$t" "fuzz/corpus/$t" -- "${limits[@]}" \
        -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
        tail -40 "$log"
        echo "fuzz: $t FAILED (input under fuzz/artifacts/$t/)" >&2
        exit 1
    fi
    runs=$(awk '/^stat::number_of_executed_units:/ { print $2 }' "$log" | tail -1)
    rss=$(awk '/^stat::peak_rss_mb:/ { print $2 }' "$log" | tail -1)
    secs=$(awk '/^Done [0-9]+ runs in/ { print $5 }' "$log" | tail -1)
    [ -n "$secs" ] || secs=$(($(date +%s) - start))
    files=$(find "fuzz/corpus/$t" -type f | wc -l)
    summary+=$(printf '%-14s %12s executions in %6s s (%s/s), corpus %5s inputs, peak RSS %s MB' \
        "$t" "${runs:-?}" "$secs" "$(( ${runs:-0} / (secs > 0 ? secs : 1) ))" "$files" "${rss:-?}")$'\n'
    rm -f "$log"
done
printf '\n%s' "$summary"

#!/usr/bin/env bash
# Seed 002's benchmark on the shmkv server, both designs side by side, without the spec
# runner: `stairbench serve shmkv` + `stairbench load shm://...` directly.
#
#   "alone"    = 1 client; "one visitor" = 1 + 1 clients; "K visitors" = 1 + K clients;
#   at 1 and 2 worker threads; server on core 0, clients on core 1 (override below).
#   Runs alternate between the designs; each figure is the median over the repetitions.
#   A client's speed is its own request rate (throughput / clients), as in the seed.
#
# Usage: bench/shmkv.sh [-d 3s] [-r 3] [-k 4] [-o DIR]
#   env: STAIRBENCH (binary, default target/release/stairbench), SERVER_CPUS (0),
#        CLIENT_CPUS (1), THREADS ("1 2"), KEYS (1024), READ_RATIO (0.5), VALUE_SIZE (64)
set -euo pipefail

duration=3s reps=3 visitors=4 out=""
while getopts "d:r:k:o:h" opt; do
  case $opt in
    d) duration=$OPTARG ;;
    r) reps=$OPTARG ;;
    k) visitors=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
  esac
done
bin=${STAIRBENCH:-target/release/stairbench}
server_cpus=${SERVER_CPUS:-0} client_cpus=${CLIENT_CPUS:-1}
threads=${THREADS:-"1 2"}
out=${out:-results/shmkv-bench-$(date +%Y%m%d-%H%M%S)}
[ -x "$bin" ] || { echo "no $bin: build it with cargo build --release (or set STAIRBENCH)" >&2; exit 2; }
mkdir -p "$out"
name="bench$$"
server=""
cleanup() { [ -n "$server" ] && kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null; true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_region() {
  for _ in $(seq 100); do [ -e "/dev/shm/stairbench.shmkv.$name" ] && return 0; sleep 0.05; done
  echo "server did not create its region" >&2; exit 1
}

for rep in $(seq "$reps"); do
  for t in $threads; do
    for arch in single per-worker; do
      "$bin" serve shmkv --arch "$arch" --workers "$t" --name "$name" --cpuset "$server_cpus" \
        2>>"$out/server.log" &
      server=$!
      wait_region
      for clients in 1 2 $((1 + visitors)); do
        f="$out/$arch-t$t-c$clients-r$rep.json"
        "$bin" load "shm://$name" -c "$clients" -d "$duration" --warmup 500ms -q \
          --keys "${KEYS:-1024}" --read-ratio "${READ_RATIO:-0.5}" --value-size "${VALUE_SIZE:-64}" \
          --cpuset "$client_cpus" --json "$f" >/dev/null
        echo "rep $rep  $arch  threads $t  clients $clients: $(python3 -c \
          'import json,sys; r=json.load(open(sys.argv[1])); print("%.0f req/s  p50 %.2f us  p99 %.2f us" % (r["throughput_rps"], r["latency_us"]["p50"], r["latency_us"]["p99"]))' "$f")" >&2
      done
      kill -TERM "$server"; wait "$server" || true; server=""
    done
  done
done

python3 - "$out" "$visitors" "$threads" <<'EOF' | tee "$out/summary.txt"
import json, glob, os, statistics, sys
out, k, threads = sys.argv[1], int(sys.argv[2]), [int(t) for t in sys.argv[3].split()]
runs = {}
for f in glob.glob(os.path.join(out, "*.json")):
    arch, t, c, _ = os.path.basename(f)[:-5].rsplit("-", 3)
    runs.setdefault((arch, int(t[1:]), int(c[1:])), []).append(json.load(open(f)))
def med(arch, t, c, field):
    vals = [field(r) for r in runs.get((arch, t, c), [])]
    return statistics.median(vals) if vals else float("nan")
def speed(arch, t, c):  # one client's own request rate
    return med(arch, t, c, lambda r: r["throughput_rps"] / r["connections"])
def thr(t): return "1 thread" if t == 1 else f"{t} threads"
label = {1: "alone", 2: "one visitor", 1 + k: f"{k} visitors"}
def sentence(arch, a, b):
    r = speed(arch, *a) / speed(arch, *b)
    word = "faster" if r >= 1 else "slower"
    return f"{label[a[1]]} at {thr(a[0])} is {word} than {label[b[1]]} at {thr(b[0])}: {r:.2f}x"
print("--- Figures (medians) ---")
print(f"{'design':<11} {'threads':>7} {'clients':>7} {'req/s':>11} {'per client':>11} {'p50 us':>8} {'p99 us':>9}")
for t in threads:
    for c in (1, 2, 1 + k):
        for arch in ("single", "per-worker"):
            print(f"{arch:<11} {t:>7} {c:>7} {med(arch,t,c,lambda r: r['throughput_rps']):>11.0f} "
                  f"{speed(arch,t,c):>11.0f} {med(arch,t,c,lambda r: r['latency_us']['p50']):>8.2f} "
                  f"{med(arch,t,c,lambda r: r['latency_us']['p99']):>9.2f}")
lo, hi = threads[0], threads[-1]
pairs = [((hi, 1), (lo, 1)), None]
for t in threads:
    pairs += [((t, 1), (t, 2)), ((t, 1), (t, 1 + k)), None]
pairs += [((hi, 1 + k), (lo, 1 + k))]
print("\n--- Summary ---")
rows = [None if p is None else (sentence("single", *p), sentence("per-worker", *p)) for p in pairs]
w = max(len(r[0]) for r in rows if r) + 2
print(f"{'single':<{w}}| per-worker")
for r in rows:
    print(f"{'':<{w}}|" if r is None else f"{r[0]:<{w}}| {r[1]}")
print("\n--- per-worker against single ---")
for t in threads:
    for c in (1, 2, 1 + k):
        r = speed("per-worker", t, c) / speed("single", t, c)
        print(f"{label[c]} at {thr(t)}: per-worker is {'faster' if r >= 1 else 'slower'} than single: {r:.2f}x")
p50 = med("per-worker", lo, 1, lambda r: r["latency_us"]["p50"])
x_alone = speed("per-worker", lo, 1) / speed("single", lo, 1)
print(f"\nalone at {thr(lo)}: per-worker p50 {p50:.2f} us (goal <= 1 us), {x_alone:.1f}x single's throughput (goal >= 5x)")
if 2 in threads:
    x2 = speed("per-worker", 2, 2) / speed("single", 2, 2)
    print(f"2 clients on 2 threads: per-worker {x2:.2f}x single's throughput (goal >= 1x)")
EOF
echo "results in $out" >&2

#!/usr/bin/env bash
# A long run's own footprint: `stairbench run --hold` at a steady open-loop load (the built-in
# reactor, 2 clients at RATE req/s, every second's histogram logged) for DURATION, sampling
# stairbench's RSS and open file descriptors every SAMPLE seconds. After the first minute both
# must be flat: a least-squares line through the samples grows by <= 1% over the run.
# tests/it/soak.rs is the 60 s version CI runs.
#
# Usage: bench/soak.sh     env: STAIRBENCH (binary), DURATION (30m), SAMPLE (10), RATE (2000)
set -euo pipefail
bin=${STAIRBENCH:-target/release/stairbench}
duration=${DURATION:-30m} sample=${SAMPLE:-10} rate=${RATE:-2000}
[ -x "$bin" ] || { echo "no $bin: cargo build --release (or set STAIRBENCH)" >&2; exit 2; }
work=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

cat >"$work/soak.toml" <<SPEC
name = "soak"
warmup = "0s"
clients = [2]
rate = [$rate]
placements = ["shared"]
[[targets]]
name = "reactor"
builtin = "msgr --arch reactor --threads 1"
SPEC
# --keep-disturbed: the footprint is the measure, not the speed; a disturbed 30-minute step
# would otherwise be run again.
"$bin" run "$work/soak.toml" --hold 2 --duration "$duration" --keep-disturbed --out "$work/run" >"$work/run.log" 2>&1 &
pid=$!
start=$SECONDS
echo "t_s rss_kib fds" >"$work/samples"
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
  fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
  [ -n "$rss" ] && echo "$((SECONDS - start)) $rss $fds" >>"$work/samples"
  sleep "$sample"
done
wait "$pid" || { echo "the run failed:" >&2; tail -5 "$work/run.log" >&2; exit 1; }
pid=""
cat "$work/samples"
# Growth of a fitted line over the samples after the first minute, as a share of the mean.
awk 'NR > 1 && $1 >= 60 {
       n++; t[n] = $1; r[n] = $2; f[n] = $3; st += $1; sr += $2; sf += $3
     }
     function growth(y, sy,   i, mt, my, c, v) {
       mt = st / n; my = sy / n
       for (i = 1; i <= n; i++) { c += (t[i] - mt) * (y[i] - my); v += (t[i] - mt) ^ 2 }
       return c / v * (t[n] - t[1]) / my * 100
     }
     END {
       if (n < 3) { print "too few samples after the first minute"; exit 1 }
       gr = growth(r, sr); gf = growth(f, sf)
       printf "RSS %d..%d KiB over %d s after the first minute: line grows %.2f%% (goal <= 1%%)%s\n",
              r[1], r[n], t[n] - t[1], gr, (gr <= 1 ? "" : "  OVER")
       printf "open fds %d..%d: line grows %.2f%% (goal <= 1%%)%s\n", f[1], f[n], gf, (gf <= 1 ? "" : "  OVER")
     }' "$work/samples"

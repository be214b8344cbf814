#!/usr/bin/env bash
# perf script text (100 MB) → flame graph SVG: `stairbench flame` against inferno's own CLI tools
# (`inferno-collapse-perf | inferno-flamegraph`), alternated A/B three times on the same file.
#
# The input is a real capture (tests/data/flame/workers.perf-script.gz, or $FLAME_BENCH_INPUT,
# any perf script text) repeated to $FLAME_BENCH_MB megabytes (default 100).
#
# Needs: a release build (`cargo build --release`), inferno's CLI (`cargo install inferno`).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
mb="${FLAME_BENCH_MB:-100}"
rounds="${FLAME_BENCH_ROUNDS:-3}"
stairbench="${STAIRBENCH:-$root/target/release/stairbench}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

for tool in inferno-collapse-perf inferno-flamegraph; do
    command -v "$tool" >/dev/null || { echo "flame.sh: $tool not found: cargo install inferno" >&2; exit 2; }
done
[ -x "$stairbench" ] || { echo "flame.sh: $stairbench not built: cargo build --release" >&2; exit 2; }

seed="$work/seed.perf-script"
if [ -n "${FLAME_BENCH_INPUT:-}" ]; then
    cp "$FLAME_BENCH_INPUT" "$seed"
else
    gzip -dc "$root/tests/data/flame/workers.perf-script.gz" > "$seed"
fi
input="$work/input.perf-script"
target=$((mb * 1024 * 1024))
: > "$input"
while [ "$(stat -c %s "$input")" -lt "$target" ]; do cat "$seed" "$seed" "$seed" "$seed" >> "$input"; done
size=$(stat -c %s "$input")
echo "input: $size bytes ($(grep -c '^[^[:space:]]' "$input") samples), $(nproc) cores"

now() { date +%s.%N; }
run_stairbench() { "$stairbench" flame "$input" -o "$work/a.svg"; }
run_inferno() { inferno-collapse-perf "$input" | inferno-flamegraph > "$work/b.svg"; }

# warm the page cache once for both
cat "$input" > /dev/null
declare -a ta tb
for ((i = 0; i < rounds; i++)); do
    t0=$(now); run_stairbench; t1=$(now); run_inferno; t2=$(now)
    ta[i]=$(echo "$t1 - $t0" | bc -l)
    tb[i]=$(echo "$t2 - $t1" | bc -l)
    printf 'round %d: stairbench %.3f s   inferno CLI %.3f s\n' "$((i + 1))" "${ta[i]}" "${tb[i]}"
done

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ma=$(median "${ta[@]}")
mb_=$(median "${tb[@]}")
printf 'median: stairbench %.3f s, inferno CLI %.3f s, ratio stairbench/inferno %.2f\n' \
    "$ma" "$mb_" "$(echo "$ma / $mb_" | bc -l)"
# same stacks: the SVGs differ in colours and title, the folded stacks must not
"$stairbench" flame "$input" --folded "$work/a.folded"
inferno-collapse-perf "$input" > "$work/b.folded"
cmp -s "$work/a.folded" "$work/b.folded" && echo "folded stacks: identical" || { echo "folded stacks differ" >&2; exit 1; }

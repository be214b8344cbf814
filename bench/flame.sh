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

# wall seconds and CPU seconds (user + sys of the whole pipeline), one line each
timed() { /usr/bin/time -f '%e %U %S' -o "$work/time" bash -c "$1"; awk '{printf "%s %.3f\n", $1, $2 + $3}' "$work/time"; }
a_cmd="'$stairbench' flame '$input' -o '$work/a.svg'"
b_cmd="inferno-collapse-perf '$input' | inferno-flamegraph > '$work/b.svg'"

# warm the page cache once for both
cat "$input" > /dev/null
declare -a wa wb ca cb
for ((i = 0; i < rounds; i++)); do
    read -r wa[i] ca[i] < <(timed "$a_cmd")
    read -r wb[i] cb[i] < <(timed "$b_cmd")
    printf 'round %d: stairbench %.2f s wall %.2f s cpu   inferno CLI %.2f s wall %.2f s cpu\n' \
        "$((i + 1))" "${wa[i]}" "${ca[i]}" "${wb[i]}" "${cb[i]}"
done

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mwa=$(median "${wa[@]}"); mwb=$(median "${wb[@]}"); mca=$(median "${ca[@]}"); mcb=$(median "${cb[@]}")
printf 'median wall: stairbench %.2f s, inferno CLI %.2f s, ratio stairbench/inferno %.2f\n' \
    "$mwa" "$mwb" "$(echo "$mwa / $mwb" | bc -l)"
printf 'median cpu:  stairbench %.2f s, inferno CLI %.2f s, ratio stairbench/inferno %.2f\n' \
    "$mca" "$mcb" "$(echo "$mca / $mcb" | bc -l)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews wall times)"
# same stacks: the SVGs differ in colours and title, the folded stacks must not
"$stairbench" flame "$input" --folded "$work/a.folded"
inferno-collapse-perf "$input" > "$work/b.folded"
cmp -s "$work/a.folded" "$work/b.folded" && echo "folded stacks: identical" || { echo "folded stacks differ" >&2; exit 1; }

#!/usr/bin/env bash
# How often the diagnosis names no resource: every example spec run once with short steps,
# each series' diagnosis read by this build's `analyze` and by another build's (BEFORE, an
# older stairbench binary) on the same run directory, and the share of `outside` and
# `undetermined` verdicts under each, as markdown. Both builds read the same steps, so the
# difference is the rules' (and what evidence the newer observers recorded for them).
#
# Usage (as root: some examples need namespaces and cgroups; after `cargo build --release`):
#   BEFORE=/path/to/old/stairbench bench/verdicts.sh [EXAMPLE...]   (default: every example)
# Settings (environment): STAIRBENCH=target/release/stairbench DURATION=1s OUT=verdicts.md
# An example that fails to run (a missing tool, a host it needs) is listed as such and left
# out of the shares. Each run is under SCHED_FIFO priority 5 where `chrt` may set it.
set -euo pipefail
cd "$(dirname "$0")/.."

STAIRBENCH=${STAIRBENCH:-target/release/stairbench}
DURATION=${DURATION:-1s}
OUT=${OUT:-verdicts.md}
die() { echo "verdicts: $*" >&2; exit 1; }
[ -x "$STAIRBENCH" ] || die "$STAIRBENCH not found: run cargo build --release first"
[ -n "${BEFORE:-}" ] && [ -x "$BEFORE" ] || die "set BEFORE to an older stairbench binary"
command -v python3 >/dev/null || die "needs python3 (to read the analyses' JSON)"
WORK=$(mktemp -d /tmp/verdicts.XXXXXX)
echo "verdicts: runs under $WORK" >&2

favoured() { if chrt -f 5 true 2>/dev/null; then chrt -f 5 "$@"; else "$@"; fi; }

if [ $# -gt 0 ]; then names=("$@"); else
    names=()
    for f in examples/*.toml; do names+=("$(basename "$f" .toml)"); done
fi
rows="$WORK/rows.tsv"
: >"$rows"
for name in "${names[@]}"; do
    run="$WORK/$name"
    echo "verdicts: $name" >&2
    if ! timeout 900 favoured "$STAIRBENCH" run "examples/$name.toml" --duration "$DURATION" \
        --out "$run" >"$WORK/$name.log" 2>&1; then
        printf '%s\t-\t(run failed: %s)\t-\n' "$name" \
            "$(grep -m1 -i error "$WORK/$name.log" | tr '\t' ' ' | cut -c1-80)" >>"$rows"
        continue
    fi
    "$STAIRBENCH" analyze "$run" --json >"$run/after.json" 2>/dev/null || echo '[]' >"$run/after.json"
    "$BEFORE" analyze "$run" --json >"$run/before.json" 2>/dev/null || echo '[]' >"$run/before.json"
    python3 - "$name" "$run/before.json" "$run/after.json" >>"$rows" <<'EOF'
import json, sys
name, before, after = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
def key(d): return d.get("sentence", "").split(" ", 1)[0]
old = {key(d): d["limit"] for d in before}
for d in after:
    print(f"{name}\t{key(d)}\t{old.get(key(d), '-')}\t{d['limit']} ({d['confidence']})")
EOF
done
python3 - "$rows" "$(uptime)" >"$OUT" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print("| example | series | before | after |\n|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(r) + " |")
ran = [r for r in rows if r[1] != "-"]
none = ("outside", "undetermined")
b = sum(1 for r in ran if r[2] in none)
a = sum(1 for r in ran if r[3].split(" ")[0] in none)
n = len(ran)
if n:
    print(f"\n{n} series: `outside` or `undetermined` {b} before ({100*b/n:.0f}%), {a} after ({100*a/n:.0f}%).")
print(f"\nLoad: {sys.argv[2].strip()}")
EOF
cat "$OUT"

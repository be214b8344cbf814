#!/usr/bin/env bash
# The README's picture of a report: a PNG of the demo's report.html as Chromium draws it
# 1400 px wide, from its "Why it stops scaling" section down through the first throughput
# chart, written to docs/report.png.
#
#   bench/report-picture.sh            run `stairbench demo` (about 1.5 min), then take the picture
#   bench/report-picture.sh --quick    the same with `demo --quick` (under half a minute)
#   bench/report-picture.sh RUN_DIR    the picture of a run directory's report.html
#
# Settings: REPORT_PICTURE_OUT (default docs/report.png), REPORT_PICTURE_WIDTH (1400),
# REPORT_PICTURE_HEIGHT (2300), REPORT_PICTURE_FROM (the section to start at, default
# diagnosis). Needs a release build (`cargo build --release`) and chromium.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
stairbench="${STAIRBENCH:-$root/target/release/stairbench}"
chromium="${CHROMIUM:-/usr/bin/chromium}"
out="${REPORT_PICTURE_OUT:-$root/docs/report.png}"
width="${REPORT_PICTURE_WIDTH:-1400}"
height="${REPORT_PICTURE_HEIGHT:-2300}"
from="${REPORT_PICTURE_FROM:-diagnosis}"
max_bytes=$((300 * 1024))
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

die() { echo "report-picture.sh: $*" >&2; exit 2; }
[ -x "$chromium" ] || die "$chromium not found: apt-get install -y chromium"

case "${1:-}" in
    "" | --quick)
        [ -x "$stairbench" ] || die "$stairbench not built: cargo build --release"
        run="$work/demo"
        # shellcheck disable=SC2086  # ${1:-} is empty or --quick
        "$stairbench" demo ${1:-} --out "$run" >"$work/demo.log" 2>&1 ||
            die "the demo failed: $(tail -5 "$work/demo.log")"
        ;;
    -*) die "unknown option $1 (usage: bench/report-picture.sh [--quick | RUN_DIR])" ;;
    *) run="$1" ;;
esac
[ -f "$run/report.html" ] || die "$run/report.html not found"

# The page in a frame, so that the picture starts at the section (a page's own #fragment is
# not scrolled to before a headless screenshot is taken).
cp "$run/report.html" "$work/page.html"
cat >"$work/host.html" <<EOF
<!DOCTYPE html><html><body style="margin:0;overflow:hidden"><iframe src="page.html#$from" style="border:0;width:${width}px;height:${height}px"></iframe></body></html>
EOF
timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$work/profile" --hide-scrollbars --force-device-scale-factor=1 \
    --virtual-time-budget=3000 --window-size="$width,$height" \
    --screenshot="$work/report.png" "file://$work/host.html" >"$work/chromium.log" 2>&1 ||
    die "chromium failed: $(tail -5 "$work/chromium.log")"
[ -s "$work/report.png" ] || die "chromium wrote no picture: $(tail -5 "$work/chromium.log")"
bytes=$(stat -c %s "$work/report.png")
[ "$bytes" -le "$max_bytes" ] ||
    die "the picture is $bytes bytes, over $max_bytes: lower REPORT_PICTURE_HEIGHT"
mkdir -p "$(dirname "$out")"
cp "$work/report.png" "$out"
echo "$out: ${width}x${height} px, $bytes bytes, from $run/report.html"

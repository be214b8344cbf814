#!/usr/bin/env python3
"""False-alarm and detection rates of `stairbench history`'s change points (docs/history.md).

Writes synthetic histories into history databases (the documented schema, with Python's
sqlite3): A/A series (nothing changes) and series with a 5% or a 10% drop of throughput at run
20 of 30, noise CVs 1-5% (what real runs' repetitions show). Each history is one target of one
database, so one `stairbench history DB --json` call reads them all. Beside it, the naive rule
"compare each run with the one before, alarm at 2%". With apache-otava installed
(`pip install apache-otava`), the same series go through otava's compute_change_points too
and the agreement is printed.

    bench/history_rates.py [--bin target/debug/stairbench] [--n 300] [--runs 30]
        [--reference tests/data/history/otava_reference.json]
"""

import argparse
import json
import random
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

SCHEMA = Path(__file__).resolve().parent.parent / "schema" / "history.sql"
STEP_AT = 20


def series(rng, runs, cv, step):
    return [1000.0 * (1.0 - (step if i >= STEP_AT else 0.0)) * (1.0 + rng.gauss(0, cv))
            for i in range(runs)]


def write_db(path, histories):
    db = sqlite3.connect(path)
    db.executescript(SCHEMA.read_text())
    db.execute("PRAGMA user_version = 1")
    runs = len(histories[0])
    for i in range(runs):
        db.execute(
            "INSERT INTO runs (id, run_id, name, started_unix_s, status, host, cpus, kernel,"
            " stairbench_version, added_unix_s) VALUES (?, ?, 'synthetic', ?, 'ok', 'h', 2,"
            " 'k', 'bench', 0)", (i + 1, f"run{i:03}", float(i)))
        for k, xs in enumerate(histories):
            db.execute(
                "INSERT INTO figures VALUES (?, ?, 'shared', 4, 'throughput_rps', ?, 0, 3)",
                (i + 1, f"h{k:04}", xs[i]))
    db.commit()
    db.close()


def ours(binary, histories, extra=()):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "h.db"
        write_db(path, histories)
        out = subprocess.run([binary, "history", str(path), "--json", *extra],
                             check=True, capture_output=True, text=True).stdout
    found = [[] for _ in histories]
    for c in json.loads(out):
        found[int(c["target"][1:])].append((c["index"], c["change_pct"]))
    return found


def naive(xs, pct=2.0):
    return [(i, (xs[i] / xs[i - 1] - 1) * 100) for i in range(1, len(xs))
            if abs(xs[i] / xs[i - 1] - 1) * 100 >= pct]


def otava(xs, max_p):
    try:
        from otava.analysis import compute_change_points
    except ImportError:
        return None
    cps, _ = compute_change_points(xs, max_pvalue=max_p)
    return [int(cp.index) for cp in cps]


def rates(found, step):
    """(histories with any alarm, histories with a drop found at run 20 +- 1)."""
    alarms = sum(1 for f in found if f)
    hits = sum(1 for f in found if any(abs(i - STEP_AT) <= 1 and pct < 0 for i, pct in f))
    return alarms, hits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/debug/stairbench")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--reference", help="write series and otava's change points here")
    ap.add_argument("--max-p", help="stairbench history's --max-p (default: its own)")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    cvs = [0.01 + 0.01 * (k % 5) for k in range(a.n)]
    print(f"{a.n} histories of {a.runs} runs each, noise CV 1-5%, step at run {STEP_AT}")
    print(f"{'':28} {'any alarm':>10} {'found at 20±1':>14}")
    agreement = []
    for name, step in [("A/A", 0.0), ("5% drop", 0.05), ("10% drop", 0.10)]:
        hs = [series(rng, a.runs, cv, step) for cv in cvs]
        extra = ["--max-p", a.max_p] if a.max_p else []
        for rule, found in [("change points", ours(a.bin, hs, extra)),
                            ("previous run, 2% threshold", [naive(xs) for xs in hs])]:
            alarms, hits = rates(found, step)
            print(f"{name:9} {rule:27} {alarms:4}/{a.n:<5} {hits:6}/{a.n}")
        at_001 = ours(a.bin, hs, ["--max-p", "0.001"])
        for xs, f in zip(hs, at_001):
            ref = otava(xs, 0.001)
            if ref is not None:
                agreement.append((xs, sorted(i for i, _ in f), sorted(ref)))
    if not agreement:
        print("apache-otava is not installed: no comparison with the reference")
        return 0
    same = sum(1 for _, o, r in agreement if o == r)
    near = sum(1 for _, o, r in agreement
               if len(o) == len(r) and all(abs(x - y) <= 1 for x, y in zip(o, r)))
    print(f"against apache-otava at p < 0.001: same change points on {same}/{len(agreement)}"
          f" series, same ±1 on {near}/{len(agreement)}")
    if a.reference:
        keep = [{"series": xs, "otava": r} for xs, _, r in agreement[::25]]
        Path(a.reference).write_text(json.dumps(keep, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

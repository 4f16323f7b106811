"""lgopt's exact packer on a static-allocation benchmark suite (not a test: it measures).

    python benchmarks/pack_suite.py DIR [--time-limit 60] [--reference REF.csv] [--out benchmarks/pack_suite]

DIR holds CSVs in the MiniMalloc / TelaMalloc format, named NAME.CAPACITY.csv: the 11 "challenging"
instances are ``benchmarks/challenging/*.1048576.csv`` of the public google/minimalloc repository (clone
it, or read them out of a snapshot with ``git show``); no suite is bundled here.  Each instance is packed
as ``lgopt pack --time-limit`` packs it (the same call: a wall-clock budget for the instance, the search
and CP-SAT interleaved), after one warm-up call so that no instance pays for loading the compiled
search, and every packing is checked by the independent validator before it counts as solved.

``--reference`` is a CSV ``instance,seconds`` of another allocator's times on the same instances; the
table then shows the ratio.  ``benchmarks/pack_suite_minimalloc.csv`` holds MiniMalloc's own times on the
challenging suite (its C++ solver, google/minimalloc 9f5cf81 with its default settings, built -O2 and run
on this project's 2-core machine; MiniMalloc's paper reports 0.6-6 s on its own machine).  Writes OUT.csv
and OUT.md (pandas) and prints the table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
from common import OUT, RESULTS, write_section

from lgopt.group.pack import check_packing, pack, peak_live_bytes
from lgopt.group.pack_csv import read_csv
from lgopt.group.packsearch import PackItem, PackProblem
from lgopt.group.packsearch.solver import solve

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--time-limit", type=float, default=60.0, help="wall seconds per instance (default 60)")
    ap.add_argument("--workers", type=int, default=1, help="CP-SAT workers where CP-SAT runs (default 1)")
    ap.add_argument("--reference", help="CSV instance,seconds of another allocator on the same instances")
    ap.add_argument("--reference-name", default="reference")
    ap.add_argument("--out", default=str(OUT / "pack_suite"), help="OUT.csv: every instance")
    args = ap.parse_args()
    ref: dict[str, float] = {}
    if args.reference:
        rdf = pd.read_csv(args.reference)
        ref = dict(zip(rdf["instance"], rdf["seconds"]))
    solve(PackProblem((PackItem("a", 1, ((0, 1),)),), 1))  # load the compiled search before anything is timed
    rows = []
    for path in sorted(Path(args.dir).glob("*.csv")):
        parts = path.name.split(".")
        if len(parts) < 3 or not parts[-2].isdigit():
            continue
        capacity = int(parts[-2])
        items = read_csv(path)
        t0 = time.perf_counter()
        res = pack(items, capacity, time_limit=None, deadline=t0 + args.time_limit, workers=args.workers)
        seconds = time.perf_counter() - t0
        valid = check_packing(items, res.offsets, capacity) is None if res.found else None
        if valid is False:
            raise SystemExit(f"{path.name}: the packer returned an invalid packing")
        row = {"instance": path.name, "buffers": len(items), "capacity": capacity,
               "peak live": peak_live_bytes(items), "solved": bool(valid), "status": res.status,
               "seconds": round(seconds, 2), "nodes": res.nodes, "answered by": res.engine}
        if ref:
            r = ref.get(path.name)
            row[f"{args.reference_name} s"] = r
            row["ratio"] = round(seconds / r, 2) if r else None
        rows.append(row)
        print(pd.DataFrame(rows[-1:]).to_string(index=False, header=len(rows) == 1), flush=True)
    df = pd.DataFrame(rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(f"{args.out}.csv", index=False)
    solved = df[df["solved"]]
    summary = (f"solved {len(solved)} of {len(df)} within {args.time_limit:g} s each; median "
               f"{statistics.median(df['seconds']):.2f} s, slowest {df['seconds'].max():.2f} s")
    if ref:
        both = df.dropna(subset=[f"{args.reference_name} s"])
        summary += (f"; {args.reference_name}: median {statistics.median(both[f'{args.reference_name} s']):.2f} s, "
                    f"median ratio {statistics.median(both['ratio']):.2f}")
    write_section(RESULTS / "packer.md", "pack suite",
        f"## `lgopt pack` on {Path(args.dir).name}\n\n"
        f"`python benchmarks/pack_suite.py DIR --time-limit {args.time_limit:g}"
        + (f" --reference {Path(args.reference).name}" if args.reference else "") + "` (2 cores, shared).\n\n"
        f"{summary}.\n\n" + df.to_markdown(index=False) + "\n")
    print(f"\n{summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

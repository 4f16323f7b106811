"""Sweep backends, measured: one 64-configuration x 3-model sweep (8 LMEM sizes x 8 lane counts, greedy) on
this process, 2 local worker processes and a local Dask cluster of 2 worker processes, each into a fresh
cache, as fresh ``lgopt sweep`` processes (start-up, cluster start, plots all counted).

Checks what issue 17 promises: every backend gives the same result per configuration, and the Dask
cluster's wall time is within 1.3x of the process pool's.  A second, smaller sweep runs cpsat on a
deterministic budget small enough to stop most searches (``--deterministic-time``): the searches the
budget stopped must stop at the same point on every backend.  Writes its section of
``benchmarks/results/runtime.md``.

    python benchmarks/sweep_backends.py [--skip-sequential] [--units 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from common import RESULTS, write_section

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["problems/resnet18.json", "problems/mobilenet_v2.json", "problems/fixture_yolov5s_like.json"]
SETS = ["--set", "lmem_bytes=16K,32K,64K,128K,256K,512K,1M,2M", "--set", "npu_num=4,8,16,32,64,128,256,512"]
KEY = ["model", "chip", "lmem_bytes", "npu_num", "strategy"]
RESULT = ["cycles", "traffic MB", "groups", "global layers", "status"]


CUT_SETS = ["--set", "lmem_bytes=64K,128K,256K,512K"]


def run(backend: list[str], out: str, sweep: list[str] | None = None) -> tuple[float, pd.DataFrame]:
    t0 = time.perf_counter()
    what = sweep or [*SETS, "--time-limit", "30"]
    p = subprocess.run([sys.executable, "-m", "lgopt.cli", "sweep", "--models", *MODELS, *what, "--chip", "bm1684x",
                        "-o", out, *backend], cwd=ROOT, capture_output=True, text=True)
    secs = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(backend)} failed: {p.stderr.strip()[-300:]}")
    df = pd.read_csv(Path(out) / "sweep.csv")
    key = [k for k in KEY if k in df]
    return secs, df.sort_values(key).reset_index(drop=True)[key + RESULT]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-sequential", action="store_true")
    ap.add_argument("--units", type=float, default=1.0, help="cpsat's deterministic budget per configuration")
    args = ap.parse_args()
    runs = [("2 local processes (loky)", ["--backend", "processes", "--jobs", "2"]),
            ("local Dask cluster, 2 worker processes", ["--backend", "dask", "--jobs", "2"])]
    if not args.skip_sequential:
        runs.append(("sequential (one process)", ["--backend", "sequential"]))
    rows, frames = [], {}
    cut_rows, cut_frames = [], {}
    cut = [*CUT_SETS, "--strategies", "cpsat", "--workers", "2", "--deterministic-time", str(args.units)]
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in runs:
            secs, df = run(flags, f"{tmp}/{len(frames)}")
            frames[name] = df
            rows.append((name, secs, len(df)))
            print(f"{name}: {secs:.1f} s, {len(df)} configurations", file=sys.stderr)
        for name, flags in runs:
            secs, df = run(flags, f"{tmp}/cut{len(cut_frames)}", cut)
            cut_frames[name] = df
            cut_rows.append((name, secs, len(df), int((df["status"] == "time_limit").sum())))
            print(f"{name}: cpsat on {args.units} units: {secs:.1f} s", file=sys.stderr)
    base = frames[runs[0][0]]
    same = {n: base.equals(df) for n, df in frames.items()}
    cut_base = cut_frames[runs[0][0]]
    cut_same = {n: cut_base.equals(df) for n, df in cut_frames.items()}
    pool, dask = rows[0][1], rows[1][1]
    load = os.getloadavg()
    lines = ["## Sweep backends, measured", "",
             f"`python benchmarks/sweep_backends.py`: {len(MODELS)} models x 64 configurations (8 `lmem_bytes` x 8 "
             "`npu_num`) on bm1684x, greedy, each backend into a fresh cache, as a fresh `lgopt sweep` process "
             f"(wall seconds, start-up and report included). Load average at the end: {load[0]:.2f} / {load[1]:.2f} "
             f"/ {load[2]:.2f} on {os.cpu_count()} cores.", "",
             "| backend | configurations | wall s | same results as the process pool |", "|---|---:|---:|---|"]
    lines += [f"| {n} | {k} | {s:.1f} | {'yes' if same[n] else 'NO'} |" for n, s, k in rows]
    lines += ["", f"Dask local cluster / process pool: {dask / pool:.2f}x (target: at most 1.3x).", "",
              "### Searches stopped by a deterministic budget", "",
              f"The same models x 4 LMEM sizes ({CUT_SETS[1].split('=')[1]}) on bm1684x, cpsat with 2 CP-SAT "
              f"workers and `--deterministic-time {args.units:g}` per configuration (analytic cost model). A search "
              "its budget stops ends where the work it counted reaches the budget, not where the clock does, so "
              "it returns the same plan on every backend however loaded the machine is.", "",
              "| backend | configurations | stopped by the budget | wall s | same results as the process pool |",
              "|---|---:|---:|---:|---|"]
    lines += [f"| {n} | {k} | {c} | {s:.1f} | {'yes' if cut_same[n] else 'NO'} |" for n, s, k, c in cut_rows]
    write_section(RESULTS / "runtime.md", "sweep backends", "\n".join(lines))
    print("\n".join(lines))
    return 0 if all(same.values()) and all(cut_same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

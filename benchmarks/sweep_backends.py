"""Sweep backends, measured: one 64-configuration x 3-model sweep (8 LMEM sizes x 8 lane counts, greedy) on
this process, 2 local worker processes and a local Dask cluster of 2 worker processes, each into a fresh
cache, as fresh ``lgopt sweep`` processes (start-up, cluster start, plots all counted).

Checks what issue 17 promises: every backend gives the same result per configuration, and the Dask
cluster's wall time is within 1.3x of the process pool's.  Writes ``benchmarks/sweep_backends.md``.

    python benchmarks/sweep_backends.py [--skip-sequential]
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

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["problems/resnet18.json", "problems/mobilenet_v2.json", "problems/fixture_yolov5s_like.json"]
SETS = ["--set", "lmem_bytes=16K,32K,64K,128K,256K,512K,1M,2M", "--set", "npu_num=4,8,16,32,64,128,256,512"]
KEY = ["model", "chip", "lmem_bytes", "npu_num", "strategy"]
RESULT = ["cycles", "traffic MB", "groups", "global layers", "status"]


def run(backend: list[str], out: str) -> tuple[float, pd.DataFrame]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "lgopt.cli", "sweep", "--models", *MODELS, *SETS, "--chip", "bm1684x",
                        "--time-limit", "30", "-o", out, *backend], cwd=ROOT, capture_output=True, text=True)
    secs = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(backend)} failed: {p.stderr.strip()[-300:]}")
    df = pd.read_csv(Path(out) / "sweep.csv")
    return secs, df.sort_values(KEY).reset_index(drop=True)[KEY + RESULT]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-sequential", action="store_true")
    args = ap.parse_args()
    runs = [("2 local processes (loky)", ["--backend", "processes", "--jobs", "2"]),
            ("local Dask cluster, 2 worker processes", ["--backend", "dask", "--jobs", "2"])]
    if not args.skip_sequential:
        runs.append(("sequential (one process)", ["--backend", "sequential"]))
    rows, frames = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in runs:
            secs, df = run(flags, f"{tmp}/{len(frames)}")
            frames[name] = df
            rows.append((name, secs, len(df)))
            print(f"{name}: {secs:.1f} s, {len(df)} configurations", file=sys.stderr)
    base = frames[runs[0][0]]
    same = {n: base.equals(df) for n, df in frames.items()}
    pool, dask = rows[0][1], rows[1][1]
    load = os.getloadavg()
    lines = ["# Sweep backends, measured", "",
             f"`python benchmarks/sweep_backends.py`: {len(MODELS)} models x 64 configurations (8 `lmem_bytes` x 8 "
             "`npu_num`) on bm1684x, greedy, each backend into a fresh cache, as a fresh `lgopt sweep` process "
             f"(wall seconds, start-up and report included). Load average at the end: {load[0]:.2f} / {load[1]:.2f} "
             f"/ {load[2]:.2f} on {os.cpu_count()} cores.", "",
             "| backend | configurations | wall s | same results as the process pool |", "|---|---:|---:|---|"]
    lines += [f"| {n} | {k} | {s:.1f} | {'yes' if same[n] else 'NO'} |" for n, s, k in rows]
    lines += ["", f"Dask local cluster / process pool: {dask / pool:.2f}x (target: at most 1.3x)."]
    (ROOT / "benchmarks" / "sweep_backends.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

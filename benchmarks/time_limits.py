"""Every time limit is wall-clock seconds for the whole command: measure it.

Runs ``lgopt solve --strategy cpsat --time-limit T`` on models whose search uses the whole limit and
``lgopt sweep --time-limit T``, each as a fresh process (interpreter start, loading, search, verification,
writing, plots all counted), and writes the overrun of each to its section of ``benchmarks/results/runtime.md``.  The
promise: no command ends more than 1 s after its limit.

    python benchmarks/time_limits.py [--limit 20] [--sweep-limit 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import CAL, RESULTS, write_section

ROOT = Path(__file__).resolve().parents[1]
SHARED = CAL / "onnx"
SOLVES = [
    ("problems/yolov5s.json", "bm1688"),
    ("problems/mobilenet_v2.json", "bm1684x"),
    (str(SHARED / "convnext_tiny.weightless.onnx"), "cv181x"),
]


def timed(argv: list[str]) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "lgopt.cli", *argv], cwd=ROOT, capture_output=True, text=True)
    return time.perf_counter() - t0, p.returncode, (p.stdout.strip().splitlines() or [""])[-1][:90]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=float, default=20.0)
    ap.add_argument("--sweep-limit", type=float, default=5.0)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model, chip in SOLVES:
            if not (ROOT / model).exists():
                continue
            secs, rc, last = timed(["solve", model, "--chip", chip, "--strategy", "cpsat", "--time-limit",
                                    str(args.limit), "--workers", "2", "-o", f"{tmp}/p.json"])
            rows.append((f"solve {Path(model).name} --chip {chip}", args.limit, secs, rc))
            print(rows[-1], last, flush=True)
        for sets, n in ((["--set", "lmem_bytes=256K"], 1), (["--set", "lmem_bytes=128K,256K"], 2),
                        (["--set", "lmem_bytes=64K,128K,256K"], 3)):
            secs, rc, _ = timed(["sweep", "problems/mobilenet_v2.json", *sets, "--strategies", "cpsat", "--jobs", "2",
                                 "--time-limit", str(args.sweep_limit), "-o", f"{tmp}/sweep{n}"])
            limit = args.sweep_limit * -(-n // 2)
            rows.append((f"sweep mobilenet_v2 {n} configuration(s), 2 jobs", limit, secs, rc))
            print(rows[-1], flush=True)
    lines = ["## Time limits, measured", "", f"`python benchmarks/time_limits.py --limit {args.limit:g} --sweep-limit "
             f"{args.sweep_limit:g}` on this project's 2-core machine: wall-clock seconds of the whole process.", "",
             "| command | limit s | wall s | overrun s | exit |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {c} | {lim:g} | {s:.2f} | {s - lim:+.2f} | {rc} |" for c, lim, s, rc in rows]
    worst = max(s - lim for _, lim, s, _ in rows)
    lines += ["", f"Largest overrun: {worst:+.2f} s (promise: at most 1 s)."]
    write_section(RESULTS / "runtime.md", "time limits", "\n".join(lines))
    print("\n".join(lines))
    return 0 if worst <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())

"""``lgopt deploy`` end to end on real models with the real compiler: never slower than TPU-MLIR alone?

    python benchmarks/deploy.py MODEL.onnx [MODEL.onnx ...] [--chips bm1684x,bm1688] [--out DIR]
                                [--judge-budget K] [--time-limit S]

Each model (with its weights: TPU-MLIR needs them) on each chip goes through ``lgopt deploy`` (TPU-MLIR from
``LGOPT_TPU_MLIR``, ``scripts/install-tpu-mlir.sh``).  A row per run: TPU-MLIR's cycles, lgopt's, which was
delivered, and the time of each side; the table goes to ``benchmarks/results/deploy.md`` (its own section),
the runs' folders to ``--out`` (default ``benchmarks/out/deploy``, not tracked).  A rerun skips the runs
whose ``report.json`` exists.  Exit 1 when any delivered model is slower than TPU-MLIR's own (a bug).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd
from common import write_section

from lgopt.errors import LgoptError
from lgopt.report.verdict import verify
from lgopt.tpumlir.compiler import find_toolchain
from lgopt.tpumlir.deploy import DeployRequest, run_deploy

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "deploy.md"


def one(model: Path, chip: str, out: Path, args: argparse.Namespace) -> dict:
    """One deploy (or its stored report), as a table row."""
    folder = out / f"{model.stem}_{chip}"
    report = folder / "report.json"
    t0 = time.perf_counter()
    if not report.exists():
        req = DeployRequest(model, chip, folder, judge_budget=args.judge_budget, time_limit=args.time_limit)
        try:
            run_deploy(req, find_toolchain(), verify, lambda line: print(f"  {line}", flush=True))
        except LgoptError as e:
            return {"model": model.stem, "chip": chip, "error": str(e)[:200]}
    r = json.loads(report.read_text())
    return {"model": model.stem, "chip": chip, "tpu_mlir_cycles": r["tpu_mlir_cycles"],
            "lgopt_cycles": r.get("lgopt_cycles"), "kept": r["kept"], "delivered / tpu-mlir":
            round(r["delivered_cycles"] / r["tpu_mlir_cycles"], 4), "tpu-mlir compile s": r["tpu_mlir_compile_seconds"],
            "lgopt search s": r.get("lgopt_search_seconds"), "wall s": round(time.perf_counter() - t0, 1),
            "note": (r.get("lgopt_kept_reference") or r.get("lgopt_compile_error") or r.get("lgopt_error") or "")[:160]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--chips", default="bm1684x,bm1688")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "deploy")
    ap.add_argument("--judge-budget", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=60.0)
    args = ap.parse_args()
    rows = []
    for model in args.models:
        for chip in args.chips.split(","):
            print(f"== {model.name} on {chip}", flush=True)
            rows.append(one(model, chip, args.out, args))
    df = pd.DataFrame(rows)
    print(df.to_string(index=False))
    text = ("Cycles: TPU-MLIR 1.30.2's codegen timeline, total, F16, 1 core. lgopt's search priced by the model "
            "`lgopt deploy` picks (the fitted one on bm1684x and bm1688). Command: `python benchmarks/deploy.py "
            + " ".join(str(m) for m in args.models) + f" --chips {args.chips}`.\n\n"
            + df.astype(object).fillna("-").to_markdown(index=False) + "\n")
    write_section(RESULTS, "deploy", text)
    slower = [r for r in rows if "delivered / tpu-mlir" in r and r["delivered / tpu-mlir"] > 1]
    return 1 if slower else 0


if __name__ == "__main__":
    raise SystemExit(main())

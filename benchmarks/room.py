"""How much could any grouping gain over TPU-MLIR's own?  Its opt2 grouping against lgopt's lower bound.

    python benchmarks/room.py [--b4 RUN_FOLDER]   # seconds

For every model and chip of ``../shared/calibration`` (batch 1), and at batch 4 where a round trip left
TPU-MLIR's batch-4 opt2 caches (``roundtrip.py --batch 4`` writes them to ``OUT/caches``; by default the run
``judged-b4`` of ``benchmarks/roundtrip/runs.tar.xz``, unpacked beside it on first use), TPU-MLIR's opt2
grouping is rebuilt in lgopt and priced by the calibrated model (``tpu-mlir-1.30``), beside
:func:`lgopt.cost.bound.lower_bound`: every op's full-size compute, and the bytes that must cross GMEM at the
chip's peak bandwidth.  ``room`` = 1 - bound / opt2 predicted bounds what regrouping can save under that
model, in lgopt's space and so in the compiler's.  It is loose where weight loads decide (the bound streams
at the peak, the calibrated transfers at 54 / 16.5 bytes per cycle on BM1684X / BM1688, and one op's loads
cannot hide behind another's compute in a one-slice group); where compute decides it is close, and then it
says a target cannot be met: YOLOv5s / BM1688 at batch 4 has at most 7 % to gain, whatever the grouping.
The weights are priced by the model (``lgopt.cost.bound.min_weight_dma``), so the weight-bound classification
networks on BM1684X are bounded too (about 9-16 % room).

Writes ``benchmarks/calibration/room.csv`` and prints the table and the geometric mean of the bound over the
cases where opt2 makes more than one group (the issue-13 target's set).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from common import CAL, write_table

from lgopt.cost.bound import lower_bound
from lgopt.errors import LgoptError
from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_model
from lgopt.model.network import with_batch
from lgopt.tpumlir.cache import load_cache
from lgopt.tpumlir.floor import geomean, target_cases
from lgopt.tpumlir.grouping import score
from lgopt.tpumlir.lowering import lower_like
from lgopt.tpumlir.runs import unpack

ROOT = Path(__file__).resolve().parents[1]
MODEL = "tpu-mlir-1.30"


def room_row(net, chip_name: str, cache: Path, measured: float) -> dict | None:
    """opt2's groups, predicted and measured cycles, the lower bound and the room, for one model and chip."""
    chip = get_chip(chip_name, {"cost_model": MODEL})
    try:
        plan, _ = score(net, chip, str(cache))
    except LgoptError as e:
        print(f"  {cache.name}: not built ({e})", file=sys.stderr)
        return None
    lb = lower_bound(chip, lower_like(net, load_cache(str(cache)), chip)[0])
    pred = plan.cost["cycles"]
    return {"groups": len(plan.groups), "opt2_measured": measured, "opt2_predicted": pred,
            "lower_bound": lb["cycles"], "bound_by": "compute" if lb["compute_cycles"] >= lb["cycles"] else "gdma",
            "room": 1 - lb["cycles"] / pred}


def _geo(df: pd.DataFrame) -> float:
    """Geometric mean of lower bound over opt2 predicted."""
    return geomean(df.lower_bound / df.opt2_predicted)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--b4", type=Path, default=None,
                    help="a batch-4 round trip's output (its roundtrip.csv and caches/; default: judged-b4 of "
                         "benchmarks/roundtrip/runs.tar.xz, unpacked beside it)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "calibration" / "room.csv")
    a = ap.parse_args(argv)
    a.b4 = a.b4 or unpack(ROOT / "benchmarks" / "roundtrip") / "judged-b4"
    if not (CAL / "totals.csv").exists():
        print(f"no calibration data at {CAL}", file=sys.stderr)
        return 2
    tot = pd.read_csv(CAL / "totals.csv")
    opt2 = tot[tot.variant == "opt2"]
    rt = pd.read_csv(a.b4 / "roundtrip.csv") if (a.b4 / "roundtrip.csv").exists() else pd.DataFrame()
    rows = []
    for model in sorted(opt2.model.unique()):
        net = load_model(CAL / "onnx" / f"{model}.weightless.onnx", dtype="f16")
        for r in opt2[opt2.model == model].itertuples(index=False):
            row = room_row(net, r.chip, CAL / r.cache_file, float(r.total_cycles))
            if row:
                rows.append({"model": model, "chip": r.chip, "batch": 1, **row})
        for r in (rt[(rt.model == model) & (rt.strategy.str.startswith("tpu-mlir"))].itertuples(index=False)
                  if len(rt) else ()):
            cache = a.b4 / "caches" / f"{model}_{r.chip}_b4_tpu-mlir.layer_group_cache.json"
            if cache.exists():
                row = room_row(with_batch(net, 4), r.chip, cache, float(r.opt2))
                if row:
                    rows.append({"model": model, "chip": r.chip, "batch": 4, **row})
    df = pd.DataFrame(rows)
    write_table(df, a.out, f"cycles by cost model {MODEL}, measured by TPU-MLIR 1.30.2's codegen timeline")
    multi = df[df.groups > 1]
    print(f"where opt2 makes more than one group ({len(multi)} cases): a grouping saves at most "
          f"{100 * (1 - _geo(multi)):.1f} % in geometric mean under {MODEL}")
    named = target_cases(df)
    print(f"the cases issue 13's 8 % target names (BM1688 at batch 4, YOLO, UNet; {len(named)}): at most "
          f"{100 * (1 - _geo(named)):.1f} % in geometric mean; "
          + ", ".join(f"{r.model} {r.chip} b{r.batch} {100 * r.room:.1f} %" for r in named.itertuples()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

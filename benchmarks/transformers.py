"""Issue 16's targets: how much of a transformer and a modern CNN lgopt groups, and what it saves.

    python benchmarks/transformers.py [--models vit_b_16,convnext_tiny] [--chips bm1684x,bm1688]
        [--strategies greedy,cpsat] [--time-limit 60]

For each calibration model (``../shared/calibration/onnx``, f16) on each chip and strategy: the fraction of
ops in groups, the plan's cycles (analytic cost model), the cycles of running every op as a global layer,
and whether the plan verifies and simulates exactly (``--simulate``; slow on whole models).  Writes
``benchmarks/transformers.md``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lgopt.check.simulate import simulate  # noqa: E402
from lgopt.check.verify import verify_plan  # noqa: E402
from lgopt.group.cost import global_layer_cost  # noqa: E402
from lgopt.hw.chip import for_chip, get_chip  # noqa: E402
from lgopt.io.problem import load_model  # noqa: E402
from lgopt.report.tables import grouped_fraction  # noqa: E402
from lgopt.strategies.cpsat.common import CpsatSettings  # noqa: E402
from lgopt.strategies.registry import StrategyOptions, parse_strategy  # noqa: E402
from lgopt.strategies.settings import SearchSettings  # noqa: E402

ONNX = ROOT.parent / "shared" / "calibration" / "onnx"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="vit_b_16,convnext_tiny")
    ap.add_argument("--chips", default="bm1684x,bm1688")
    ap.add_argument("--strategies", default="greedy,cpsat")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--simulate", action="store_true")
    args = ap.parse_args()
    rows = []
    for model in args.models.split(","):
        net = load_model(ONNX / f"{model}.weightless.onnx", dtype="f16")
        for chip_name in args.chips.split(","):
            chip = get_chip(chip_name)
            all_global = sum(global_layer_cost(chip, net, op)["cycles"] for op in for_chip(net, chip).ops)
            for strategy in args.strategies.split(","):
                opts = StrategyOptions(SearchSettings(), CpsatSettings(time_limit=args.time_limit, workers=2))
                t0 = time.perf_counter()
                plan, _ = parse_strategy(strategy).run(net, chip, opts)
                secs = time.perf_counter() - t0
                sim = simulate(net, plan).summary().split(":")[0] if args.simulate else "-"
                rows.append({"model": model, "chip": chip_name, "strategy": strategy,
                             "grouped %": round(100 * grouped_fraction(net, plan), 1), "groups": len(plan.groups),
                             "cycles": int(plan.cost["cycles"]), "all-global cycles": all_global,
                             "x all-global": round(plan.cost["cycles"] / all_global, 3),
                             "verified": not verify_plan(net, plan), "simulated": sim, "seconds": round(secs, 1)})
                print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    out = ROOT / "benchmarks" / "transformers.md"
    out.write_text("# Transformers and modern CNNs as layer groups (issue 16)\n\n"
                   f"`python benchmarks/transformers.py --models {args.models} --chips {args.chips} --strategies "
                   f"{args.strategies} --time-limit {args.time_limit:g}`; f16, analytic cost model, CP-SAT with 2 "
                   "workers.\n\n" + df.to_markdown(index=False) + "\n")
    print(df.to_string(index=False))


if __name__ == "__main__":
    main()

"""Issue 16's targets: how much of a transformer and a modern CNN lgopt groups, and what it saves.

    python benchmarks/transformers.py [--models vit_b_16,convnext_tiny] [--chips bm1684x,bm1688]
        [--strategies greedy,cpsat] [--time-limit 60]
    python benchmarks/transformers.py --mlp [--sizes 256x2048x5504,...] [--time-limit 60] [--simulate]

For each calibration model (``../shared/calibration/onnx``, f16) on each chip and strategy: the fraction of
ops in groups, the plan's cycles (analytic cost model), the cycles of running every op as a global layer,
and whether the plan verifies and simulates exactly (``--simulate``; slow on whole models).  Writes the
table to its section of ``benchmarks/results/transformers.md`` (one section per ``--cost-model``).

``--mlp``: the LLM block's MLP (:func:`lgopt.io.zoo.llm_mlp`: RMSNorm, SwiGLU, residual) at real sizes
(tokens x dim x hidden, f16, weights of 22-90 MB each, far above bm1684x's 16 MiB of LMEM) on bm1684x:
all-global cycles, greedy without column slices (``max_w_slices=1``: what lgopt did before), greedy and
CP-SAT with them, every plan verified (and simulated with ``--simulate``, for dims up to 2048: the
simulator holds every weight as float64).  Rewrites the MLP section of ``benchmarks/results/transformers.md``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
from common import CAL, RESULTS, write_section

from lgopt.check.simulate import simulate
from lgopt.check.verify import verify_plan
from lgopt.cost.cycles import global_layer_cost
from lgopt.hw.chip import for_chip, get_chip
from lgopt.io.problem import load_model
from lgopt.report.tables import grouped_fraction
from lgopt.strategies.cpsat.common import CpsatSettings
from lgopt.strategies.registry import StrategyOptions, parse_strategy
from lgopt.strategies.settings import SearchSettings
from lgopt.tpumlir.lowering import network_of

ONNX = CAL / "onnx"
DOC = RESULTS / "transformers.md"


MLP_MARK = "## The LLM MLP with column slices and weight reload"
SIMULATED = """
The 256x2048x5504 greedy plan (`lgopt solve problems/llm_mlp.json --chip bm1684x -o llm_mlp.plan.json`) also
simulates exactly: `lgopt simulate llm_mlp.plan.json --model problems/llm_mlp.json` prints "OK: 3 tensors match
the unsliced reference" (185 s). The smaller plans of `tests/test_column_slices.py` (128 tokens x 64 x 1024 on
a 2 KiB-per-lane chip, weights of 2 KiB a lane each) simulate exactly in the tests.
"""
MLP_SIZES = "128x2048x5504,256x2048x5504,512x2048x5504,256x4096x11008,512x4096x11008"


def mlp_rows(args: argparse.Namespace) -> list[dict]:
    import tempfile

    import onnx

    from lgopt.io.onnx_import import import_onnx
    from lgopt.io.zoo import llm_mlp

    chip = get_chip("bm1684x")
    rows = []
    for size in args.sizes.split(","):
        tokens, dim, hidden = (int(x) for x in size.split("x"))
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "llm_mlp.onnx"
            onnx.save(llm_mlp(tokens=tokens, dim=dim, hidden=hidden), str(path))
            net = import_onnx(path, dtype="f16", name="llm_mlp")
        all_global = sum(global_layer_cost(chip, net, op)["cycles"] for op in net.ops)
        runs = [("greedy, no column slices", "greedy", SearchSettings(max_w_slices=1)),
                ("greedy", "greedy", SearchSettings()), ("cpsat", "cpsat", SearchSettings())]
        for label, strategy, search in runs:
            opts = StrategyOptions(search, CpsatSettings(time_limit=args.time_limit, workers=2))
            t0 = time.perf_counter()
            plan, _ = parse_strategy(strategy).run(net, chip, opts)
            secs = time.perf_counter() - t0
            sim = simulate(net, plan).summary().split(":")[0] if args.simulate and dim <= 2048 else "-"
            cols = [g for g in plan.groups if g.weight_cols]
            rows.append({"tokens x dim x hidden": size, "strategy": label, "cycles": int(plan.cost["cycles"]),
                         "all-global cycles": all_global,
                         "x all-global": round(plan.cost["cycles"] / all_global, 3),
                         "column slices": ", ".join(f"{g.w_slices} ({len(g.weight_cols)} weights)" for g in cols)
                         or "-",
                         "verified": not verify_plan(net, plan), "simulated": sim, "seconds": round(secs, 1)})
            print(rows[-1], flush=True)
    return rows


def write_mlp(args: argparse.Namespace, rows: list[dict]) -> None:
    sim = " --simulate" if args.simulate else ""
    text = (f"{MLP_MARK}\n\n`python benchmarks/transformers.py --mlp --sizes {args.sizes} --time-limit "
            f"{args.time_limit:g}{sim}`; bm1684x, f16, every cycle count by the analytic cost model "
            "(docs/cost-model.md), CP-SAT with 2 workers.  The problem is lgopt.io.zoo.llm_mlp (RMSNorm, "
            "SwiGLU gate/up/down, residual; `problems/llm_mlp.json` is the first 256x2048x5504 row).  "
            "\"greedy, no column slices\" is greedy with `max_w_slices=1`, what lgopt did before column "
            "slicing.\n\n" + pd.DataFrame(rows).to_markdown(index=False) + "\n" + SIMULATED)
    write_section(DOC, "llm mlp", text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="vit_b_16,convnext_tiny")
    ap.add_argument("--chips", default="bm1684x,bm1688")
    ap.add_argument("--strategies", default="tpu-mlir,greedy,cpsat",
                    help="tpu-mlir: TPU-MLIR's own opt2 grouping of the model, read from the calibration caches")
    ap.add_argument("--cost-model", default="analytic", help="analytic or tpu-mlir-1.30")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--simulate", action="store_true")
    ap.add_argument("--mlp", action="store_true", help="the LLM MLP column-slicing target instead of the models")
    ap.add_argument("--sizes", default=MLP_SIZES, help="tokens x dim x hidden of each --mlp row")
    args = ap.parse_args()
    if args.mlp:
        rows = mlp_rows(args)
        write_mlp(args, rows)
        print(pd.DataFrame(rows).to_string(index=False))
        return
    rows = []
    for model in args.models.split(","):
        model_net = load_model(ONNX / f"{model}.weightless.onnx", dtype="f16")
        for chip_name in args.chips.split(","):
            chip = get_chip(chip_name, {"cost_model": args.cost_model})
            all_global = sum(global_layer_cost(chip, model_net, op)["cycles"]
                             for op in for_chip(model_net, chip).ops)
            for strategy in args.strategies.split(","):
                if strategy == "tpu-mlir":  # TPU-MLIR's own grouping (opt2), read exactly from the calibration
                    cache = CAL / "caches" / f"{model}_{chip_name}" / "opt2.layer_group_cache.json"
                    if not cache.exists():
                        continue
                    choice, label = parse_strategy(f"tpu-mlir={cache}"), "tpu-mlir opt2"
                else:
                    choice, label = parse_strategy(strategy), strategy
                opts = StrategyOptions(SearchSettings(), CpsatSettings(time_limit=args.time_limit, workers=2))
                t0 = time.perf_counter()
                plan, _ = choice.run(model_net, chip, opts)
                secs = time.perf_counter() - t0
                net = network_of(model_net, plan)  # TPU-MLIR's MLP column halves, where its cache runs them apart
                sim = simulate(net, plan).summary().split(":")[0] if args.simulate else "-"
                rows.append({"model": model, "chip": chip_name, "strategy": label,
                             "grouped %": round(100 * grouped_fraction(net, plan), 1),
                             "groups": len(plan.groups),
                             "cycles": int(plan.cost["cycles"]), "all-global cycles": all_global,
                             "x all-global": round(plan.cost["cycles"] / all_global, 3),
                             "verified": not verify_plan(net, plan), "simulated": sim, "seconds": round(secs, 1)})
                print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    write_section(DOC, f"models, {args.cost_model}",
                  f"`python benchmarks/transformers.py --models {args.models} --chips {args.chips} --strategies "
                  f"{args.strategies} --time-limit {args.time_limit:g} --cost-model {args.cost_model}`; f16, cycles "
                  f"by the {args.cost_model} cost model, CP-SAT with 2 workers.  `tpu-mlir opt2`: TPU-MLIR's own "
                  "grouping (its cache in the calibration data, read exactly); `grouped %`: the model's ops in "
                  "groups.\n\n" + df.to_markdown(index=False))
    print(df.to_string(index=False))


if __name__ == "__main__":
    main()

"""Every calibration scoring through lgopt's TPU-MLIR reader: does lgopt build the compiler's own grouping,
agree on what is feasible, and predict its cycles?

    python benchmarks/calibration.py [--models resnet18,vgg16] [--chips bm1688] [--limit 50]
        [--cost-model tpu-mlir-1.30|analytic]

Reads ``../shared/calibration`` (``totals.csv``, ``groups.csv``, the forced caches and the weightless ONNX
models) and writes ``benchmarks/calibration/groupings.csv`` (one row per scoring) and ``groups.csv`` (one
row per cache group, predicted vs measured cycles), then prints a summary.

Each grouping is built exactly (``score(..., exact=True)``): status ``loaded`` (plan built and verified),
``infeasible`` (a group lgopt cannot build under its rules; the reason says which and why) or ``error``
(the reader refused the cache).  Where the exact grouping is infeasible, the documented relaxation
(``exact=False``: ops lgopt only runs as global layers moved to the group's edge) is tried too and
reported in the ``relaxed_*`` columns; the summary gives both.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
from common import CAL

from lgopt.check.verify import verify_plan
from lgopt.cost.fitted import load_constants
from lgopt.errors import LgoptError
from lgopt.group.alloc import multi_start_allocate
from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_model
from lgopt.tpumlir.cache import cast_operands, load_cache
from lgopt.tpumlir.grouping import build_groups
from lgopt.tpumlir.heldout import Scored
from lgopt.tpumlir.heldout import run_one as score_cache
from lgopt.tpumlir.lowering import network_of

ROOT = Path(__file__).resolve().parents[1]
# the models the shipped constants were not fitted on (their source.held_out)
HELD_OUT = tuple(dict.fromkeys(m for c in ("bm1684x", "bm1688") for m in load_constants(c).source["held_out"]))
OUT = ROOT / "benchmarks" / "calibration"


def run_one(net, chip, cache: str, exact: bool) -> Scored:
    """(status, reason, predicted cycles, plan), the plan verified (``lgopt.tpumlir.heldout.run_one``)."""
    return score_cache(net, chip, cache, exact, check=lambda n, plan: verify_plan(network_of(n, plan), plan))


def difference(net, chip, cache: str, plan, r) -> str:
    """Why lgopt accepts a grouping TPU-MLIR refused: the known rule differences, judged on the group TPU-MLIR
    failed to allocate (``failed_group_pos``; the first searched group when it failed to cost one)."""
    info = plan.solver["tpu_mlir"]
    groups = load_cache(cache).groups
    net = network_of(net, plan)
    if pd.isna(r.failed_group_pos):
        gi = next((k for k, g in enumerate(groups) if not any(g.secs)), None)
        if gi is None:
            return "unknown group: TPU-MLIR found no valid cost for forced secs (not an allocation failure)"
    else:
        gi = int(r.failed_group_pos)
    k = info["group_plan_index"][gi]
    if k is None:
        return f"group {gi}: not built by lgopt (cast-only or global ops)"
    g = plan.groups[k]
    peak = g.cost.get("lmem_peak", 0)
    head = f"group {gi} ({len(g.ops)} ops, n={g.n_slices} h={g.h_slices}; lgopt's peak {peak} of {chip.lmem_bytes} B): "
    if not any(groups[gi].secs):
        return head + ("secs searched: TPU-MLIR's quick search starts at its LMEM estimate and gives up (20 tries, or "
                       "the first slicing failure); lgopt's search from n=h=1 finds a fit")
    if multi_start_allocate(net, chip, g) is None:
        return head + "fits only by lgopt's exact packer; TPU-MLIR's allocator is one greedy pass without backtracking"
    touched = {t for o in g.ops for t in net.op(o).inputs + net.op(o).outputs}
    f32 = [t for t in cast_operands(net, groups[gi].locs) if t in touched and t not in net.inputs]
    if f32:
        return head + (f"{len(f32)} tensors TPU-MLIR also holds in f32 (ops it computes in f32, e.g. "
                       f"{f32[0]}): lgopt budgets no interior cast")
    if g.num_slices > 1 and not g.preloads and any(b.kind == "weight" for b in g.buffers):
        return head + ("sliced, weights reloaded per slice (they exceed LMEM): TPU-MLIR's table and allocator need "
                       "more LMEM than lgopt's here")
    return head + "TPU-MLIR's table and allocator need more LMEM than lgopt's (lgopt's peak is a median 0.72x of " \
                  "TPU-MLIR's lmem_bytes_used on compiled groups)"


def rel(p, m):
    return None if p is None or not m or pd.isna(m) else p / m - 1.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="comma-separated model names")
    ap.add_argument("--chips", help="comma-separated chip names")
    ap.add_argument("--limit", type=int, help="at most this many scorings")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--cost-model", default="tpu-mlir-1.30",
                    help="cost model of the predicted cycles (default tpu-mlir-1.30, fitted on this data with "
                         "mobilenet_v3_small, resnet50 and unet_small held out)")
    a = ap.parse_args(argv)
    if not (CAL / "totals.csv").exists():
        print(f"no calibration data at {CAL}", file=sys.stderr)
        return 2
    tot = pd.read_csv(CAL / "totals.csv")
    meas = pd.read_csv(CAL / "groups.csv")
    if a.models:
        tot = tot[tot.model.isin(a.models.split(","))]
    if a.chips:
        tot = tot[tot.chip.isin(a.chips.split(","))]
    if a.limit:
        tot = tot.head(a.limit)
    mg = {k: v for k, v in meas.groupby(["model", "chip", "variant"])}
    nets: dict[str, object] = {}
    rows, grows = [], []
    t0 = time.perf_counter()
    for r in tot.itertuples(index=False):
        if r.model not in nets:  # parse each model once
            nets[r.model] = load_model(CAL / "onnx" / f"{r.model}.weightless.onnx", dtype="f16")
        net, chip, cache = nets[r.model], get_chip(r.chip, {"cost_model": a.cost_model}), str(CAL / r.cache_file)
        st, why, pred, plan = run_one(net, chip, cache, exact=True)
        rst, rwhy, rpred = st, why, pred
        if st == "infeasible":
            rst, rwhy, rpred, _ = run_one(net, chip, cache, exact=False)
        meas_total = r.total_cycles if r.status == "ok" else None
        rows.append({"model": r.model, "chip": r.chip, "variant": r.variant, "kind": r.kind,
                     "tpu_mlir_status": r.status, "tpu_mlir_error": r.error_class if r.status != "ok" else "",
                     "lgopt_status": st, "reason": why, "pred_cycles": pred, "meas_cycles": meas_total,
                     "ratio": None if pred is None or not meas_total else pred / meas_total,
                     "relaxed_status": rst, "relaxed_reason": rwhy if st != "loaded" else "",
                     "relaxed_pred_cycles": rpred,
                     "relaxed_ratio": None if rpred is None or not meas_total else rpred / meas_total,
                     "difference": difference(net, chip, cache, plan, r) if st == "loaded" and r.status == "lg_failed"
                     else ""})
        # per group: exact build, or the relaxed one where only that gives a plan
        try:
            ex = build_groups(net, chip, cache, exact=True)
            rx = build_groups(net, chip, cache, exact=False)
        except LgoptError:
            continue
        m = mg.get((r.model, r.chip, r.variant))
        mrow = {int(x.group_pos): x for x in m.itertuples(index=False)} if m is not None else {}
        for g, h in zip(ex.groups, rx.groups):
            use, mode = (g, "exact") if g.plan is not None else ((h, "relaxed") if h.plan is not None else (g, ""))
            x = mrow.get(g.index)
            gp = use.plan
            start = ex.cmap.cache.groups[g.index].start
            ok = x is not None and r.status == "ok" and int(x.func_start_idx) == start
            p = float(gp.cost["cycles"]) if gp is not None else None
            mc = float(x.cycles) if ok and not pd.isna(x.cycles) else None
            grows.append({"model": r.model, "chip": r.chip, "variant": r.variant, "group_pos": g.index,
                          "func_start_idx": start, "n_lgopt_ops": len(use.ops),
                          "secs": ",".join(map(str, g.secs)), "searched": use.searched,
                          "lgopt_n": use.n_slices if gp is not None else None,
                          "lgopt_h": use.h_slices if gp is not None else None,
                          "comp_nsecs": x.comp_nsecs if ok else None, "comp_hsecs": x.comp_hsecs if ok else None,
                          "mode": mode, "reason": "" if gp is not None else g.reason,
                          "pred_cycles": p, "meas_cycles": mc, "ratio": None if p is None or not mc else p / mc})
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    df, gdf = pd.DataFrame(rows), pd.DataFrame(grows)
    df.to_csv(out / "groupings.csv", index=False)
    gdf.to_csv(out / "groups.csv", index=False)
    summary(df, gdf, time.perf_counter() - t0, a.cost_model)
    return 0


def _med(xs) -> str:
    xs = [abs(x - 1) for x in xs if x is not None and not pd.isna(x)]
    return f"{100 * statistics.median(xs):.1f}% (n={len(xs)})" if xs else "-"


def ranking(ok: pd.DataFrame, tie: float = 0.01) -> tuple[float, float, float]:
    """How well the predictions order each model and chip's compiled groupings, which is what a search uses
    them for: (the share of pairs whose measured cycles differ by more than ``tie`` that the prediction orders
    the same way; the geometric mean and the worst, over model x chip, of the measured cycles of the grouping
    predicted fastest over the fastest measured: what picking by the model would have cost).

    >>> df = pd.DataFrame({"model": ["m"] * 3, "chip": ["c"] * 3, "pred_cycles": [10.0, 12.0, 11.0],
    ...                    "meas_cycles": [105.0, 100.0, 120.0]})
    >>> ranking(df)  # (10, 12) and (10, 11) disagree with the measure, (12, 11) agrees; 10 picks 105 over 100
    (0.3333333333333333, 1.05, 1.05)
    """
    x = ok.dropna(subset=["pred_cycles", "meas_cycles"])
    agree = pairs = 0
    regrets: list[float] = []
    for _, g in x.groupby(["model", "chip"]):
        p, m = g.pred_cycles.to_numpy(), g.meas_cycles.to_numpy()
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                if abs(m[i] / m[j] - 1) > tie:
                    pairs += 1
                    agree += int((p[i] < p[j]) == (m[i] < m[j]))
        regrets.append(float(m[p.argmin()] / m.min()))
    geo = float(pd.Series(regrets).apply(math.log).mean()) if regrets else 0.0
    return (agree / pairs if pairs else float("nan"), math.exp(geo), max(regrets, default=float("nan")))


def summary(df: pd.DataFrame, gdf: pd.DataFrame, secs: float, model: str) -> None:
    ok = df[df.tpu_mlir_status == "ok"]
    both = df[df.tpu_mlir_status.isin(["ok", "lg_failed"])]
    print(f"{len(df)} scorings in {secs:.0f} s; {len(ok)} compiled by TPU-MLIR, "
          f"{(df.tpu_mlir_status == 'lg_failed').sum()} refused (lg_failed)")
    for col, label in (("lgopt_status", "exact"), ("relaxed_status", "relaxed")):
        load = (ok[col] == "loaded").mean() * 100 if len(ok) else 0
        agree = ((both[col] == "loaded") == (both.tpu_mlir_status == "ok")).mean() * 100 if len(both) else 0
        print(f"  {label:8s}: compiled groupings that load and verify {load:.1f}%; feasibility agreement "
              f"{agree:.1f}% (lgopt loads <=> TPU-MLIR compiles)")
    print(f"  predicted by cost model {model}:")
    print(f"  whole-model |pred/meas-1| median: exact {_med(ok.ratio)}, relaxed {_med(ok.relaxed_ratio)}")
    held = ok[ok.model.isin(HELD_OUT)]
    print(f"  whole-model |pred/meas-1| median on the models the fit held out ({', '.join(HELD_OUT)}): "
          f"exact {_med(held.ratio)}")
    agree, regret, worst = ranking(ok)
    print(f"  ranking: pairs of a model's groupings (measured > 1% apart) ordered as measured {100 * agree:.1f}%; "
          f"the grouping predicted fastest measures {regret:.4f}x the fastest in geometric mean over model x chip "
          f"(worst {worst:.3f}x)")
    if len(gdf):
        print(f"  per group   |pred/meas-1| median: exact {_med(gdf[gdf['mode'] == 'exact'].ratio)}, "
              f"exact+relaxed {_med(gdf.ratio)}")
    print("  lgopt status of compiled groupings, by first reason:")
    reasons = ok[ok.lgopt_status != "loaded"].reason.str.replace(r"/[^ ]*", "X", regex=True) \
        .str.replace(r"group \d+", "group K", regex=True).str.replace(r"\d+", "#", regex=True).str.slice(0, 90)
    for k, v in reasons.value_counts().head(12).items():
        print(f"    {v:4d}  {k}")
    fa = df[(df.tpu_mlir_status == "lg_failed") & (df.lgopt_status == "loaded")]
    print(f"  refused by TPU-MLIR, loaded by lgopt: {len(fa)} (the rule difference lgopt knows of):")
    for x in fa.itertuples():
        print(f"    {x.model} {x.chip} {x.variant} [{x.tpu_mlir_error}]: {x.difference}")
    print("  per model x chip (compiled / loaded exact / loaded relaxed):")
    for (m, c), x in ok.groupby(["model", "chip"]):
        print(f"    {m:20s} {c:8s} {len(x):3d} / {(x.lgopt_status == 'loaded').sum():3d} / "
              f"{(x.relaxed_status == 'loaded').sum():3d}")


if __name__ == "__main__":
    raise SystemExit(main())

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

    PEER_RUN=/path/to/tpu-mlir-run python benchmarks/room.py --settings bm1688:INT8:2,bm1690:INT8:8   # ~15 min

INT8 and several cores (issue 34), where ``lower_bound`` knows neither the cores' refusals nor their weight loads:
the calibrated model's optimum over the compiler's space instead (:func:`space_row`).  For each model whose
scorings ``benchmarks/settings.py`` left in ``benchmarks/out/settings``, cpsat searches TPU-MLIR's space from its
opt2 cache and base groups (PEER_RUN's scoring cache holds them) at margin 0, no bank kept empty and no gate on
lgopt's trust in its model and none of the cautions its own plans take (``cautions=False``,
:func:`lgopt.tpumlir.space.free_of_cautions`: slices of any height, lgopt's exact packer), for a fixed
deterministic budget: its proven ``bound`` over ``opt2_predicted`` is the most any grouping of that space saves
*under that model*, each refusal lgopt knows of included (a group's fork or input fork on several cores, a nested
bottom slice, a transformer group's row sections; none named a grouping TPU-MLIR compiled).  Until session 30 the
space kept the cautions (no slice under the fit's ``slice_rows``, 15 rows on BM1690 INT8, 21 on BM1688): a bound
over lgopt's cautious plans, which the judge's plans beat (UNet / BM1690 at 8 H slices, 232,488 predicted against
that bound's 254,740).  Beside it,
the best lgopt's round trips measured (``benchmarks/out/settings/roundtrip.csv``) and the share of the model's
room it captured.  The search's space runs the Casts of the graph's f32 inputs and outputs as global layers
(``bound_casts_global``: on every model here the best plan found meets it); TPU-MLIR's own
groups convert them, which saves at most their cost (``io_casts``), so ``bound`` is that much lower: the
room over the whole space.  Writes ``benchmarks/calibration/room_settings.csv``.  ``--compile`` exports the best
plan each search found and TPU-MLIR measures it (``best_measured``): whether the room the model sees is there when
compiled.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import pandas as pd
from common import CAL, write_table

from lgopt.cost.bound import lower_bound
from lgopt.cost.cycles import edge_cast_cost
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


def space_row(peer: Path, folder: Path, model: str, setting: str, units: float, compile: bool = False) -> dict:
    """The calibrated model's optimum and proven bound over TPU-MLIR's space for one model in one setting, from
    the opt2 cache ``benchmarks/settings.py`` wrote in ``folder``: cpsat at margin 0, no bank reserved, ungated
    (:class:`lgopt.tpumlir.space.ReferenceSpace`), ``units`` of deterministic time (the same numbers on any
    machine); ``verified`` is what lgopt's verifier says of the best plan found.  With ``compile``, that plan is
    exported and TPU-MLIR measures it (``best_measured``; its cache and scoring ``room_best`` in ``folder``): how
    much of the model's room a compile shows, where the model prices plans no round trip has tried."""
    from settings import compile_plan, setting_case, setting_key

    from lgopt.report.verdict import verify
    from lgopt.strategies.cpsat.common import CpsatSettings
    from lgopt.strategies.registry import StrategyOptions, parse_strategy
    from lgopt.tpumlir.space import ReferenceSpace

    chip_name, q, n = setting_key(setting)
    net, chip, judge = setting_case(peer, CAL, model, setting)
    space = ReferenceSpace(str(folder / "caches" / "opt2.layer_group_cache.json"), margin=0.0, reserve_banks=0,
                           base_groups=str(judge.base_groups() or "") or None, ungated=True, cautions=False)
    plan, _ = parse_strategy("cpsat").run(net, chip, StrategyOptions(
        cpsat=CpsatSettings(time_limit=units, deterministic=True, workers=2), space=space))
    planned = space.lowered(net, chip)[0]
    bad = verify(planned, plan)  # the best found is priced only once the verifier passes it
    s = plan.solver
    pred = float(s["reference_cycles"])
    # the search reports the edge Casts it counted; a kept reference (no search) did not
    edge = float(s["io_casts"] if "io_casts" in s else edge_cast_cost(chip, planned)["cycles"])
    best = min(pred, float(plan.cost["cycles"]))
    # the search's bound counts the edge Casts as global layers; a group converting one itself saves at most its
    # cost, so over TPU-MLIR's whole space (its own groups convert them) the bound is that much lower
    within = min(best, float(s.get("bound", pred)))
    row = {"chip": chip_name, "quantize": q, "cores": n, "model": model, "cost_model": chip.cost_model,
           "verified": "ok" if not bad else str(bad[0])[:200],
           "opt2_measured": json.loads((folder / "scores" / "opt2.json").read_text())["total_cycles"],
           "opt2_predicted": pred, "best_predicted": best, "bound": min(pred, within - edge),
           "io_casts": edge, "bound_casts_global": within, "status": s.get("solver_status", "kept"),
           "cautions": space.cautions}  # rows searched before session 30 (blank) kept them: not a bound of the space
    if compile and not bad and not s.get("kept_reference"):
        got = compile_plan(plan, planned, space, judge, folder, {}, name="room_best")
        row.update(best_measured=got.get("measured"), best_outcome=got["outcome"])
    elif compile:  # the best found is opt2's own grouping (or failed the verifier: reported, never compiled)
        row.update(best_measured=row["opt2_measured"] if not bad else None,
                   best_outcome="opt2's own" if not bad else "lgopt:verify")
    return row


def scored(settings: list[str], models: list[str] | None) -> list[tuple[Path, str, str]]:
    """(folder, model, setting) of every model of ``settings`` (of ``models`` only, if given) whose opt2 scoring
    ``benchmarks/settings.py`` left in ``benchmarks/out/settings``."""
    from settings import OUT, name_of, setting_of

    return [(f, setting_of(f)[0], st) for st in settings for f in sorted((OUT / "settings").glob(f"*_{name_of(st)}"))
            if (f / "caches" / "opt2.layer_group_cache.json").exists() and (not models or setting_of(f)[0] in models)]


def _best_round_trip(rt: pd.DataFrame, r: Any) -> float | None:
    """The fastest of lgopt's round trips TPU-MLIR measured for ``r``'s model and setting (opt2's where lgopt kept
    it), None without one."""
    mine = rt[(rt.model == r.model) & (rt.chip == r.chip) & (rt.quantize == r.quantize)
              & (rt.cores == r.cores)].measured.dropna()
    return float(min(mine.min(), r.opt2_measured)) if len(mine) else None


def settings_rooms(settings: list[str], units: float, models: list[str] | None, out: Path,
                   compile: bool = False, search: bool = True) -> str:
    """:func:`space_row` for every model of ``settings`` with scorings (none without ``search``: the rows ``out``
    holds), beside the best the round trips measured; the table to ``out`` and a markdown summary per setting."""
    from settings import OUT

    peer = Path(os.environ.get("PEER_RUN", ""))
    rt_path = OUT / "settings" / "roundtrip.csv"
    rt = pd.read_csv(rt_path) if rt_path.exists() else pd.DataFrame(columns=["model", "chip", "quantize", "cores"])
    rows = []
    for folder, model, setting in scored(settings, models) if search else ():
        row = space_row(peer, folder, model, setting, units, compile)
        print(f"  {model} {setting}: {row['status']}, bound {row['bound'] / row['opt2_predicted']:.3f} of opt2 "
              f"predicted", file=sys.stderr)
        rows.append(row)
    df = pd.DataFrame(rows, columns=["chip", "quantize", "cores", "model"] if not rows else None).assign(units=units)
    if out.exists():  # the rows of models and settings not searched again now are kept (a larger budget for one)
        old = pd.read_csv(out)
        done = set(zip(df.chip, df.quantize, df.cores, df.model))
        df = pd.concat([old[[k not in done for k in zip(old.chip, old.quantize, old.cores, old.model)]], df],
                       ignore_index=True).sort_values(["chip", "quantize", "cores", "model"], kind="stable")
    # every row's best round trip as measured now (rows kept from an earlier run too: round trips since count)
    df["lgopt_measured"] = [_best_round_trip(rt, r) for r in df.itertuples(index=False)]
    df["bound_over_opt2"] = df.bound / df.opt2_predicted
    df["bound_casts_global_over_opt2"] = df.bound_casts_global / df.opt2_predicted
    df["best_over_opt2"] = df.best_predicted / df.opt2_predicted
    df["lgopt_over_opt2"] = df.lgopt_measured / df.opt2_measured
    if "best_measured" in df:
        df["best_measured_over_opt2"] = df.best_measured / df.opt2_measured
    write_table(df, out, "cycles predicted by each row's cost model over TPU-MLIR's space, opt2 and lgopt's plans "
                "measured by TPU-MLIR 1.30.2's codegen timeline")
    lines = ["| setting | cost model | models | its bound / opt2 predicted, geometric mean (room) | the same with the "
             "graph's edge Casts global | lgopt measured / opt2 measured | share of the room captured (edge Casts "
             "global) |", "|---|---|---:|---|---|---:|---:|"]
    for (chip, q, n), g in df.groupby(["chip", "quantize", "cores"], sort=False):
        b, m = geomean(g.bound_over_opt2), geomean(g.lgopt_over_opt2.dropna())
        bg = geomean(g.bound_casts_global_over_opt2)
        share = f"{(1 - m) / (1 - b):.0%}" if b < 1 else "-"
        share_g = f"{(1 - m) / (1 - bg):.0%}" if bg < 1 else "-"
        lines.append(f"| {chip} {q} {n} core(s) | {', '.join(sorted(set(g.cost_model)))} | {len(g)} | {b:.3f} "
                     f"({100 * (1 - b):.1f} %) | {bg:.3f} ({100 * (1 - bg):.1f} %) | {m:.3f} | {share} ({share_g}) |")
    if "best_measured" in df and df.best_measured.notna().any():
        lines += ["", "The best plan the model found, compiled (`--compile`), geometric means over the models "
                  "TPU-MLIR compiled it for (a plan it refused is counted apart, not as opt2).", "",
                  "| setting | cost model | compiled | refused | best found, predicted / opt2 predicted | the same "
                  "plans measured / opt2 measured |", "|---|---|---:|---:|---:|---:|"]
        for (chip, q, n), g in df[df.best_outcome.notna()].groupby(["chip", "quantize", "cores"], sort=False):
            ok = g[g.best_measured.notna()]
            lines.append(f"| {chip} {q} {n} core(s) | {', '.join(sorted(set(g.cost_model)))} | {len(ok)} | "
                         f"{len(g) - len(ok)} | "
                         f"{geomean(ok.best_over_opt2):.3f} | {geomean(ok.best_measured_over_opt2):.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--b4", type=Path, default=None,
                    help="a batch-4 round trip's output (its roundtrip.csv and caches/; default: judged-b4 of "
                         "benchmarks/roundtrip/runs.tar.xz, unpacked beside it)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "calibration" / "room.csv")
    ap.add_argument("--settings", default=None,
                    help="CHIP:QUANTIZE:CORES,...: instead, the calibrated model's bound over TPU-MLIR's space in "
                         "those settings (needs PEER_RUN and benchmarks/settings.py's scorings)")
    ap.add_argument("--models", default=None, help="with --settings: only these models")
    ap.add_argument("--units", type=float, default=200.0,
                    help="with --settings: cpsat's deterministic budget per model (default 200)")
    ap.add_argument("--refresh", action="store_true",
                    help="with --settings: no search; the table's round-trip columns and summary again from the round "
                         "trips measured since")
    ap.add_argument("--compile", action="store_true",
                    help="with --settings: export the best plan found and have TPU-MLIR measure it (best_measured)")
    ap.add_argument("--settings-out", type=Path, default=ROOT / "benchmarks" / "calibration" / "room_settings.csv")
    a = ap.parse_args(argv)
    if a.settings:
        if not (Path(os.environ.get("PEER_RUN", "")) / "venv" / "bin" / "model_deploy").exists():
            print("--settings needs PEER_RUN set to a TPU-MLIR 1.30.2 install (../shared/tpu-mlir/install.sh)",
                  file=sys.stderr)
            return 2
        from settings import OUT, SETTINGS

        unknown = [st for st in a.settings.split(",") if st not in SETTINGS]
        if unknown:
            print(f"--settings: {unknown[0]} is not one of benchmarks/settings.py's ({', '.join(SETTINGS)})",
                  file=sys.stderr)
            return 2
        if not scored(a.settings.split(","), a.models.split(",") if a.models else None):
            print(f"--settings: no scorings of {a.settings}{' for ' + a.models if a.models else ''} in "
                  f"{OUT / 'settings'} (python benchmarks/settings.py --settings ... --no-read makes them)",
                  file=sys.stderr)
            return 2
        print(settings_rooms(a.settings.split(","), a.units, a.models.split(",") if a.models else None,
                             a.settings_out, a.compile, not a.refresh))
        return 0
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

"""Does the search's candidate space hold what TPU-MLIR compiles?  Every group of every compiled grouping of the
settings data, as lgopt's reader builds it, checked against the decomposed search's space.

    python benchmarks/space_cover.py [--settings bm1688:INT8:2,...]   # about ten minutes; no TPU-MLIR needed

For each group: the run is an interval the space offers (in TPU-MLIR's op order, as ``solve --reference``
searches it, with its slicing rule: no h/2 limit), the compiler's slice counts are among the slicings the space
schedules for it, and the interval's lower bound (:func:`lgopt.strategies.cpsat.interval_lower_bound`, priced by
the setting's default cost model) is at or below the group's cost.  A group that fails one of them is a grouping
TPU-MLIR compiles and the search cannot find, or one its bound wrongly prunes: the search's "optimal over TPU-MLIR's
space" would not be.  Reads ``benchmarks/out/settings`` (``python benchmarks/settings.py`` makes it, with TPU-MLIR);
writes ``benchmarks/out/settings/space_cover.csv`` and the section ``space_cover`` of
``benchmarks/results/settings.md``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
from common import CAL, OUT, RESULTS, write_section
from settings import setting_key, totals

from lgopt.cost.registry import default_cost_model
from lgopt.errors import LgoptError
from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_model
from lgopt.model.network import Network, reorder
from lgopt.model.plan import Plan
from lgopt.strategies.cpsat.interval_bound import interval_lower_bound
from lgopt.strategies.cpsat.space import CandidateSpace
from lgopt.strategies.settings import SearchSettings
from lgopt.tpumlir.cache import load_cache
from lgopt.tpumlir.export import compiler_space
from lgopt.tpumlir.grouping import score
from lgopt.tpumlir.lowering import lower_like


def missing(space: CandidateSpace, plan: Plan) -> list[tuple[str, str]]:
    """(group, why) for each group of ``plan`` the search's ``space`` does not hold at its cost."""
    idx, intervals = space.net.op_index, set(space.intervals())
    out = []
    for g in plan.groups:
        i, j = idx[g.ops[0]], idx[g.ops[-1]]
        secs = (g.n_slices, g.h_slices, g.w_slices)
        why = ""
        if [idx[o] for o in g.ops] != list(range(i, j + 1)):
            why = "not a run in TPU-MLIR's op order"
        elif (i, j, "") not in intervals:
            why = "no such interval"
        elif secs not in {(c.n, c.h, c.w) for c in space.slicings(space.names[i:j + 1])}:
            why = f"slicing n,h,w = {secs} not offered"
        elif (lb := interval_lower_bound(space, i, j, "")) > g.cost["cycles"]:
            why = f"interval bound {lb:,} above the group's {int(g.cost['cycles']):,} cycles"
        if why:
            out.append((f"[{i}-{j}] {len(g.ops)} ops", why))
    return out


def cover(out: Path, settings: list[str] | None) -> pd.DataFrame:
    """One row per group the space misses, and one per grouping checked (``group`` empty)."""
    df = totals(out)
    df = df[(df.status == "ok") & df.honoured]
    rows: list[dict[str, object]] = []
    nets: dict[tuple[str, str], Network] = {}
    for r in df.itertuples():
        setting = f"{r.chip}:{r.quantize}:{r.cores}"
        if settings and setting not in settings:
            continue
        chip_name, q, n = setting_key(setting)
        dtype = "int8" if q == "INT8" else "f16"
        key = (r.model, dtype)
        if key not in nets:
            nets[key] = load_model(str(CAL / "onnx" / f"{r.model}.weightless.onnx"), dtype=dtype)
        chip = get_chip(chip_name, {"used_cores": n})
        chip = replace(chip, cost_model=default_cost_model(chip, dtype))
        cache = out / r.cache_file
        complete = cache.parent / "opt2.layer_group_cache.json"  # the pass's op order (a run variant lists part)
        base = {"setting": setting, "model": r.model, "variant": r.variant}
        try:
            net = lower_like(nets[key], load_cache(str(cache)), chip)[0]
            plan = score(net, chip, str(cache))[0]
            onet = reorder(net, list(compiler_space(net, str(complete)).order))
        except LgoptError as e:
            rows.append({**base, "groups": 0, "group": "", "why": f"not read: {str(e)[:120]}"})
            continue
        space = CandidateSpace(onet, chip, replace(SearchSettings(), h_ratio=None))
        rows.append({**base, "groups": len(plan.groups), "group": "", "why": ""})
        rows += [{**base, "groups": 0, "group": g, "why": why} for g, why in missing(space, plan)]
    return pd.DataFrame(rows)


def summary(d: pd.DataFrame) -> str:
    """Per setting: groupings and groups checked, groups the space misses; then each distinct miss."""
    lines = ["| setting | compiled groupings | groups | in the space | missed |", "|---|---:|---:|---:|---:|"]
    for setting, g in d.groupby("setting", sort=True):
        checked = g[g.group == ""]
        miss = g[g.group != ""]
        total = int(checked.groups.sum())
        lines.append(f"| {setting} | {len(checked)} | {total} | {total - len(miss)} | {len(miss)} |")
    miss = d[d.group != ""].drop_duplicates(["setting", "model", "group", "why"])
    if len(miss):
        lines += ["", "| setting | model | variant (first) | group | why |", "|---|---|---|---|---|"]
        lines += [f"| {m.setting} | {m.model} | {m.variant} | {m.group} | {m.why} |" for m in miss.itertuples()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--settings", help="comma-separated chip:quantize:cores (default: every setting found)")
    a = ap.parse_args(argv)
    out = OUT / "settings"
    if not out.is_dir():
        print(f"no settings data under {out}: run python benchmarks/settings.py first (needs TPU-MLIR)",
              file=sys.stderr)
        return 2
    d = cover(out, a.settings.split(",") if a.settings else None)
    d.to_csv(out / "space_cover.csv", index=False)
    text = summary(d)
    print(text)
    write_section(RESULTS / "settings.md", "space_cover",
                  "Every compiled grouping's groups against the search's candidate space "
                  "(`python benchmarks/space_cover.py`; cycles by each setting's default cost model):\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What TPU-MLIR's own timeline says any grouping can gain: every op's cheapest measured cost, summed.

:func:`lgopt.cost.bound.lower_bound` bounds a grouping with lgopt's model; this bounds it with the compiler's
measurements, so it does not depend on the model being right.  In a compiled grouping every op is either
local, in a group, where its compute is TIU commands that run one at a time, or a global layer, which has the
timeline to itself (a group's and a global op's segments partition the total).  So a grouping's total is at
least the sum, over its ops, of the op's TIU cycles (local) or its segment (global).  Each op's *floor* is the
least that term was in any grouping TPU-MLIR compiled, and the model's floor is the sum of its ops' floors:
no grouping in the measured set, and none that does not make some op cheaper than every measured grouping
did, beats it.

It is an empirical floor, not a proof: a grouping never measured could run an op cheaper (fewer H slices
recompute fewer halo rows, a layout with more lanes), and a little of a group's work can spill into its
neighbour's segment.  The tables come from the calibration data (:func:`calibration_rows`: ``ops.csv.gz``,
``globals.csv``, ``totals.csv``, ``groups.csv``) or from kept compiles of the scoring tool (:func:`read_run`,
with its reader ``lg_roundtrip.py`` loaded by :func:`load_reader`).  ``benchmarks/floor.py`` drives it: it
compiles, and writes the table.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd

from lgopt.tpumlir.judge import cache_digest

FREE_WHEN_GLOBAL = ("tpu.Reshape", "tpu.Slice", "tpu.Buffer", "tpu.Concat")
CASES = ("yolov5s_like", "unet_small")  # the models issue 13's 8 % target names at any batch and chip
COLUMNS = ["model", "chip", "batch", "groups", "opt2_measured", "groupings", "opt2_op_sum", "floor"]


def op_costs(local_tiu: pd.DataFrame, global_wall: pd.DataFrame) -> pd.DataFrame:
    """One row per (grouping, op): its TIU cycles when local, its segment when global (``key``, ``op``, ``cycles``).

    A global op with no commands has no segment.  For a view (reshape, slice, buffer) or a concat whose inputs
    were written in place that is real: it costs 0.  For any other type the timeline's attribution missed it,
    and the row is no measurement.
    """
    free = global_wall.type.isin(FREE_WHEN_GLOBAL)
    g = global_wall.assign(cycles=global_wall.cycles.where(~(free & global_wall.cycles.isna()), 0)).dropna(
        subset=["cycles"])
    return pd.concat([local_tiu.assign(kind="local"), g.drop(columns="type").assign(kind="global")],
                     ignore_index=True)


def floor_of(costs: pd.DataFrame, own: str) -> dict[str, int]:
    """The floor over every grouping in ``costs`` of the ops of grouping ``own`` (TPU-MLIR's opt2), and ``own``'s sum.

    Only ops that ``own`` has count: a grouping with an op more (a cast TPU-MLIR inserts in one grouping and not
    another) must not raise the floor.
    """
    mine = costs[costs.key == own]
    least = costs[costs.op.isin(set(mine.op))].groupby("op").cycles.min()
    return {"groupings": int(costs.key.nunique()), "opt2_op_sum": int(mine.groupby("op").cycles.sum().sum()),
            "floor": int(least.sum())}


def calibration_costs(cal: Path, segments: bool = True) -> pd.DataFrame:
    """Per-op costs (``model``, ``chip``, ``key``, ``op``, ``cycles``) of every grouping TPU-MLIR compiled in the
    calibration data at ``cal`` (``ops.csv.gz``: each local op's TIU commands; ``globals.csv``: global layers).
    ``segments=False``: a global layer's own commands instead of its segment (:func:`engine_globals`)."""
    ops, glob = _compiled(cal)
    loc = (ops[(ops.engine == "TIU") & (ops.group_pos >= 0)].groupby(["model", "chip", "variant", "op_name"])
           .cycles.sum().reset_index())
    return op_costs(loc.rename(columns={"variant": "key", "op_name": "op"}),
                    glob if segments else engine_globals(ops, glob))


def engine_globals(ops: pd.DataFrame, glob: pd.DataFrame) -> pd.DataFrame:
    """``glob`` with each global layer's ``cycles`` the busier engine's of its own commands (none: no measurement,
    or free for a view).  On several cores the scoring tool splits core 0's timeline at its syncs, and one-slice
    groups run between them unsynced, so a global layer's segment can hold a group's time (BM1690 INT8's UNet:
    its floor came out above opt2).  A global layer still has core 0 to itself between two syncs, so its own
    commands on either engine bound its time there as its segment does, a little lower."""
    own = (ops[ops.group_pos < 0].groupby(["model", "chip", "variant", "op_name", "engine"]).cycles.sum()
           .groupby(level=[0, 1, 2, 3]).max().rename("own").reset_index()
           .rename(columns={"variant": "key", "op_name": "op"}))
    out = glob.drop(columns="cycles").merge(own, on=["model", "chip", "key", "op"], how="left")
    return out.rename(columns={"own": "cycles"})


def _compiled(cal: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The op rows (``ops.csv.gz``) and the global layers' segments (``globals.csv``: ``model``, ``chip``, ``key``,
    ``op``, ``type``, ``cycles``) of the groupings TPU-MLIR compiled in the calibration data at ``cal``."""
    ok = pd.read_csv(cal / "totals.csv").query("status == 'ok'")[["model", "chip", "variant"]]
    ops = pd.read_csv(cal / "ops.csv.gz").merge(ok, on=["model", "chip", "variant"])
    glob = pd.read_csv(cal / "globals.csv").merge(ok, on=["model", "chip", "variant"])
    return ops, glob.rename(columns={"variant": "key", "name": "op"})[["model", "chip", "key", "op", "type", "cycles"]]


WEIGHT_LOAD = re.compile(r"^load_(.+?)_(?:merge|filter_reorderd)$")  # an op's coefficients: INT8's merged, F16's filter


def weight_gdma_costs(cal: Path, segments: bool = True) -> pd.DataFrame:
    """Per-op GDMA costs (``model``, ``chip``, ``key``, ``op``, ``cycles``) of every compiled grouping: a local op's
    coefficient loads (its merged INT8 tensor, its F16 filter; a load named otherwise, an F16 bias, is left out,
    which only lowers the floor), a global op's segment.  The GDMA engine runs one transfer at a time and a global
    op has the timeline to itself, so a grouping's total is at least their sum, as it is the TIU one's.
    ``segments=False``: a global layer's own commands instead of its segment (:func:`engine_globals`)."""
    ops, glob = _compiled(cal)
    w = ops[(ops.engine == "GDMA") & (ops.group_pos >= 0) & (ops.is_weight == 1)]
    w = w.assign(op=w.op_name.str.extract(WEIGHT_LOAD, expand=False)).dropna(subset=["op"])
    loc = w.groupby(["model", "chip", "variant", "op"]).cycles.sum().reset_index()
    return op_costs(loc.rename(columns={"variant": "key"}), glob if segments else engine_globals(ops, glob))


def calibration_rows(cal: Path, segments: bool = True) -> list[dict[str, Any]]:
    """Batch-1 floors, one row per model and chip whose opt2 compiled, from the calibration data at ``cal``:
    ``floor`` the TIU one; ``floor_gdma`` the same over the GDMA engine (:func:`weight_gdma_costs`), the one that
    binds a weight-bound network.  ``segments=False`` (several cores): global layers by their own commands."""
    tot = pd.read_csv(cal / "totals.csv")
    groups = pd.read_csv(cal / "groups.csv")
    gdma = weight_gdma_costs(cal, segments)
    rows = []
    for (model, chip), c in calibration_costs(cal, segments).groupby(["model", "chip"]):
        o2 = tot[(tot.model == model) & (tot.chip == chip) & (tot.variant == "opt2")]
        if o2.empty or o2.status.iloc[0] != "ok":
            continue
        n_groups = int(((groups.model == model) & (groups.chip == chip) & (groups.variant == "opt2")).sum())
        g = gdma[(gdma.model == model) & (gdma.chip == chip)]
        rows.append({"model": model, "chip": chip, "batch": 1, "groups": n_groups,
                     "opt2_measured": int(o2.total_cycles.iloc[0]), **floor_of(c, "opt2"),
                     "floor_gdma": floor_of(g, "opt2")["floor"] if len(g) else 0})
    return rows


def best_measured(cal: Path) -> pd.DataFrame:
    """The least total of any grouping TPU-MLIR compiled, per model and chip, in calibration data at ``cal``
    (``model``, ``chip``, ``best_measured``, ``best_variant``): the room the measured groupings already show."""
    tot = pd.read_csv(cal / "totals.csv").query("status == 'ok'")
    best = tot.loc[tot.groupby(["model", "chip"]).total_cycles.idxmin()]
    return best.rename(columns={"total_cycles": "best_measured", "variant": "best_variant"})[
        ["model", "chip", "best_measured", "best_variant"]].reset_index(drop=True)


def load_reader(path: Path) -> ModuleType:
    """The scoring tool's timeline reader (``lg_roundtrip.py``, plain python beside ``score_grouping.sh``),
    loaded from its file without putting its folder on ``sys.path``."""
    spec = importlib.util.spec_from_file_location("lg_roundtrip", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_run(workdir: Path, score: Mapping[str, Any], reader: ModuleType) -> pd.DataFrame:
    """Per-op costs of one kept compile (``score_grouping.sh --keep``'s ``workdir`` and its ``score``): the TIU
    cycles of each local op from the timeline, the segment of each global op from the score."""
    groups, _ = reader.read_final(str(next(workdir.glob("*_final.mlir"))))
    name_of = {op["line"]: op["name"] for g in groups for op in g["ops"]}
    cmds, _, _ = reader.read_profile(str(workdir / "compiler_profile_0.txt"))
    tiu: dict[str, int] = {}
    for line, start, end, kind, _optype in cmds:
        if not kind.startswith("GDMA") and line in name_of:
            tiu[name_of[line]] = tiu.get(name_of[line], 0) + end - start + 1
    loc = pd.DataFrame([{"op": n, "cycles": c} for n, c in tiu.items()], columns=["op", "cycles"])
    glob = pd.DataFrame([{"op": g["name"], "type": g.get("type"), "cycles": g.get("cycles")}
                         for g in score.get("global_ops", ())], columns=["op", "type", "cycles"])
    return op_costs(loc, glob)


def n_sliced(cache: Mapping[str, Any], n: int) -> dict[str, Any]:
    """``cache`` with every forced group's N slice count multiplied by ``n``: a batch-1 grouping at batch ``n``,
    each slice as large as before (the input is left alone)."""
    out: dict[str, Any] = json.loads(json.dumps(cache))
    for key, sub in out.items():
        if key.startswith("subfunc_"):
            for g in sub.get("GroupLayer", ()):
                if any(g.get("shape_secs", ())):
                    g["shape_secs"][0] *= n
    return out


def distinct_caches(own: Path, runs: Iterable[Path], calibration: Sequence[Path], batch: int,
                    tmp: Path) -> list[Path]:
    """The distinct caches to compile at ``batch``: TPU-MLIR's own (``own``) first, the round trips' caches of
    that batch (``runs``), then the calibration's batch-1 groupings of the model and chip as they are and with
    ``batch`` times their N slices (written to ``tmp``).  Two caches are one when TPU-MLIR reads them alike."""
    scaled = []
    for p in calibration:
        q = tmp / f"{p.name.split('.')[0]}_n{batch}.layer_group_cache.json"
        q.write_text(json.dumps(n_sliced(json.loads(p.read_text()), batch)))
        scaled.append(q)
    seen, out = set(), []
    for p in [own, *runs, *calibration, *scaled]:
        digest = cache_digest(json.loads(p.read_text()))
        if digest not in seen:
            seen.add(digest)
            out.append(p)
    return out


def with_kept_rows(rows: list[dict[str, Any]], old: pd.DataFrame) -> list[dict[str, Any]]:
    """``rows`` and the rows of an earlier table ``old`` at a batch above 1 (they needed the compiler) of a
    model, chip and batch ``rows`` does not measure again."""
    done = {(r["model"], r["chip"], r["batch"]) for r in rows}
    kept = [r for r in old[COLUMNS].to_dict("records")
            if r["batch"] != 1 and (r["model"], r["chip"], r["batch"]) not in done]
    return rows + kept


def floor_table(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """The rows as a table by batch, model and chip, with ``floor_over_opt2`` (the most a grouping can save is
    1 minus it) and ``opt2_ops_over_total`` (the share of opt2's time its ops' own costs cover)."""
    df = pd.DataFrame(list(rows)).sort_values(["batch", "model", "chip"], kind="stable")
    df["floor_over_opt2"] = df.floor / df.opt2_measured
    df["opt2_ops_over_total"] = df.opt2_op_sum / df.opt2_measured
    return df


def target_cases(df: pd.DataFrame) -> pd.DataFrame:
    """The cases issue 13's 8 % target names: opt2 makes more than one group, and BM1688 at batch 4, YOLO or UNet."""
    multi = df[df.groups > 1]
    return multi[((multi.chip == "bm1688") & (multi.batch == 4)) | multi.model.isin(CASES)]


def geomean(xs: Iterable[float]) -> float:
    """Geometric mean of positive numbers, 1.0 of none.

    >>> geomean([0.5, 2.0])
    1.0
    """
    logs = [math.log(x) for x in xs]
    return math.exp(sum(logs) / len(logs)) if logs else 1.0

"""What TPU-MLIR's own timeline says any grouping can gain: every op's cheapest measured cost, summed.

:func:`lgopt.cost.bound.lower_bound` bounds a grouping with lgopt's model; this bounds it with the compiler's
measurements, so it does not depend on the model being right.  In a compiled grouping every op is either
local, in a group, where its compute is TIU commands that run one at a time, or a global layer, which has the
timeline to itself (a group's and a global op's segments partition the total).  So a grouping's total is at
least the sum, over its ops, of the op's TIU cycles (local) or its segment (global).  Each op's *floor* is the
least that term was in any grouping TPU-MLIR compiled, and the model's floor is the sum of its ops' floors:
no grouping in the measured set, and none that does not make some op cheaper than every measured grouping
did, beats it.  The same holds of the GDMA engine (a local op's coefficient loads), and of both at once
(:func:`joint_floor`: each op chosen local or global, the global ones' walls plus the busier engine of the
local ones), which is at least either.  Each floor is checked against the groupings it is made of
(:func:`exceeding`: no grouping's own rows may say more than its measured total).

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
FLOORS = ("floor", "floor_gdma", "floor_joint")  # TIU's, GDMA's, both at once: each bounds a grouping
COLUMNS = ["model", "chip", "batch", "groups", "opt2_measured", "groupings", "opt2_op_sum", "floor"]


def op_costs(local_tiu: pd.DataFrame, global_wall: pd.DataFrame) -> pd.DataFrame:
    """One row per (grouping, op): its TIU cycles when local, its segment when global (``key``, ``op``, ``cycles``).

    A global op with no commands has no segment.  For a view (reshape, slice, buffer) or a concat whose inputs
    were written in place that is real: it costs 0.  For any other type the timeline's attribution missed it,
    and the row is no measurement.
    """
    g = measured_globals(global_wall)
    return pd.concat([local_tiu.assign(kind="local"), g.drop(columns="type").assign(kind="global")],
                     ignore_index=True)


def measured_globals(glob: pd.DataFrame) -> pd.DataFrame:
    """``glob`` (global ops with ``type`` and ``cycles``, NaN where they have no commands) without the rows that
    are no measurement, a view's or an in-place concat's cycles 0 (:func:`op_costs` says why)."""
    free = glob.type.isin(FREE_WHEN_GLOBAL) & glob.cycles.isna()
    return glob.assign(cycles=glob.cycles.where(~free, 0)).dropna(subset=["cycles"])


def floor_of(costs: pd.DataFrame, own: str) -> dict[str, int]:
    """The floor over every grouping in ``costs`` of the ops of grouping ``own`` (TPU-MLIR's opt2), and ``own``'s sum.

    Only ops that ``own`` has count: a grouping with an op more (a cast TPU-MLIR inserts in one grouping and not
    another) must not raise the floor.
    """
    mine = costs[costs.key == own]
    least = costs[costs.op.isin(set(mine.op))].groupby("op").cycles.min()
    return {"groupings": int(costs.key.nunique()), "opt2_op_sum": int(mine.groupby("op").cycles.sum().sum()),
            "floor": int(least.sum())}


def _compiled(cal: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The op rows (``ops.csv.gz``) and the global layers' segments (``globals.csv``: ``model``, ``chip``, ``key``,
    ``op``, ``type``, ``cycles``) of the groupings TPU-MLIR compiled in the calibration data at ``cal``."""
    ok = pd.read_csv(cal / "totals.csv").query("status == 'ok'")[["model", "chip", "variant"]]
    ops = pd.read_csv(cal / "ops.csv.gz").merge(ok, on=["model", "chip", "variant"])
    glob = pd.read_csv(cal / "globals.csv").merge(ok, on=["model", "chip", "variant"])
    return ops, glob.rename(columns={"variant": "key", "name": "op"})[["model", "chip", "key", "op", "type", "cycles"]]


WEIGHT_LOAD = re.compile(r"^load_(.+?)_(?:merge|filter_reorderd)$")  # an op's coefficients: INT8's merged, F16's filter


def context_costs(cal: Path, segments: bool = True) -> pd.DataFrame:
    """Every op of every grouping TPU-MLIR compiled in the calibration data at ``cal``, in the context it ran: one
    row per (``model``, ``chip``, ``key``, ``op``), ``kind`` ``local`` (in a group) or ``global``, with ``tiu`` and
    ``dma`` the cycles it keeps each engine busy and ``wall`` the timeline it has to itself.

    A local op: its TIU commands and its coefficient loads (the loads named after it: INT8's merged tensor, F16's
    reordered filter; a load named otherwise, an F16 bias, is left out, which only lowers the floors), 0 where it
    has none; no wall.  A global op on one core: its segment as ``wall`` (``globals.csv``), engines 0.  The
    segments partition the timeline, so a grouping's total is at least its global walls plus the busier engine of
    its local ops (:func:`own_bound`).

    ``segments=False`` (several cores): a global op's own commands on core 0 on each engine instead, no wall.  A
    core's timeline is not cut there as on one core: one-slice groups run between the syncs unsynced and a global
    layer's commands interleave with theirs (MobileNetV2's input Cast on BM1690 INT8, 8 cores: its first command
    at 0, its last at 81,982 of 91,724, the group's in between), so only the engines' occupancy bounds the total:
    each runs one command at a time, local or global.

    A global op with no command of its own costs 0 if it is a view or an in-place concat; any other is no
    measurement, and left out.
    """
    ops, glob = _compiled(cal)
    keys = ["model", "chip", "variant", "op_name"]
    loc = ops[ops.group_pos >= 0]
    tiu = loc[loc.engine == "TIU"].groupby(keys).cycles.sum().rename("tiu")
    w = loc[(loc.engine == "GDMA") & (loc.is_weight == 1)]
    w = w.assign(op_name=w.op_name.str.extract(WEIGHT_LOAD, expand=False)).dropna(subset=["op_name"])
    dma = w.groupby(keys).cycles.sum().rename("dma")
    local = pd.concat([tiu, dma], axis=1).fillna(0).reset_index().assign(kind="local", wall=0)
    if segments:
        glob = glob.assign(tiu=0, dma=0)
    else:
        own = (ops[ops.group_pos < 0].assign(engine=lambda d: d.engine.map({"TIU": "tiu", "GDMA": "dma"}))
               .pivot_table(index=keys, columns="engine", values="cycles", aggfunc="sum").reset_index()
               .rename(columns={"variant": "key", "op_name": "op"}))
        own = own.reindex(columns=["model", "chip", "key", "op", "tiu", "dma"])
        glob = glob.merge(own, on=["model", "chip", "key", "op"], how="left")
        has = glob[["tiu", "dma"]].notna().any(axis=1)  # no wall, but a measurement only where it has commands
        glob = glob.assign(cycles=pd.Series(0.0, index=glob.index).where(has), tiu=glob.tiu.fillna(0),
                           dma=glob.dma.fillna(0))
    walls = measured_globals(glob).rename(columns={"cycles": "wall"})
    out = pd.concat([local.rename(columns={"variant": "key", "op_name": "op"}),
                     walls[["model", "chip", "key", "op", "tiu", "dma", "wall"]].assign(kind="global")],
                    ignore_index=True)
    return out[["model", "chip", "key", "op", "kind", "tiu", "dma", "wall"]]


def engine_costs(ctx: pd.DataFrame, engine: str) -> pd.DataFrame:
    """``ctx`` (:func:`context_costs`) as one engine's costs for :func:`floor_of` (``key``, ``op``, ``cycles``): an
    op's ``engine`` column (``tiu`` or ``dma``) and its wall.  That engine runs one command at a time and a wall
    is a stretch no other op has, so a grouping's total is at least their sum."""
    return ctx.assign(cycles=ctx[engine] + ctx.wall)[["key", "op", "cycles"]]


def own_bound(ctx: pd.DataFrame) -> int:
    """What the rows of one grouping say its total is at least: its ops' walls, then the busier engine of the rest
    (each engine runs one command at a time)."""
    return int(ctx.wall.sum() + max(ctx.tiu.sum(), ctx.dma.sum()))


def joint_floor(ctx: pd.DataFrame, own: str, workers: int = 2) -> int:
    """The least :func:`own_bound` a grouping of ``own``'s ops can have, each op local or global as some measured
    grouping ran it, at the least it cost there: CP-SAT over the choice (a few hundred booleans, solved to
    optimality in well under a second; a proven bound if not).

    It is at least both engines' floors (:func:`floor_of` over :func:`engine_costs`), which may take an op local
    for one engine and global for the other: a stage's convs loading their weights as global layers (24 bytes a
    cycle on BM1688 INT8 against 16.6 in a group) in the GDMA floor, computing in a group in the TIU floor.

    >>> ctx = pd.DataFrame({"key": ["opt2", "opt2", "v1"], "op": ["a", "b", "a"], "kind": ["local", "local", "global"],
    ...                     "tiu": [10, 40, 0], "dma": [50, 0, 0], "wall": [0, 0, 30]})
    >>> joint_floor(ctx, "opt2")  # both local: max(10 + 40, 50 + 0); a global: 30 + max(40, 0) = 70
    50
    """
    from ortools.sat.python import cp_model  # loaded only here (a second at start-up otherwise)

    mine = ctx[ctx.op.isin(set(ctx[ctx.key == own].op))]
    least = {kind: mine[mine.kind == kind].groupby("op")[["tiu", "dma", "wall"]].min().astype(int)
             for kind in ("local", "global")}
    m = cp_model.CpModel()
    ops = sorted(set(least["local"].index) | set(least["global"].index))
    is_global = {o: m.new_bool_var(f"global_{o}") for o in ops}
    for o, g in is_global.items():
        if o not in least["local"].index or o not in least["global"].index:  # measured one way only
            m.add(g == int(o not in least["local"].index))

    def term(column: str) -> cp_model.LinearExpr:
        return cp_model.LinearExpr.sum([int(least[k].at[o, column]) * (g if k == "global" else 1 - g)
                                        for o, g in is_global.items() for k in ("local", "global")
                                        if o in least[k].index])

    busier = m.new_int_var(0, int(sum(t[["tiu", "dma"]].to_numpy().sum() for t in least.values())), "busier")
    m.add(busier >= term("tiu"))
    m.add(busier >= term("dma"))
    m.minimize(term("wall") + busier)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = 60.0
    solver.solve(m)
    return int(math.ceil(solver.best_objective_bound))  # the optimum when solved, a proven bound if not


def exceeding(ctx: pd.DataFrame, totals: pd.DataFrame) -> int:
    """How many groupings in ``ctx`` have an :func:`own_bound` above their measured total (``totals``: ``key``,
    ``total_cycles``).  0 is what makes the floors floors on this data; anything else says an assumption (the
    segments partition the timeline on one core) fails here."""
    total = dict(zip(totals.key, totals.total_cycles))
    return sum(own_bound(c) > total[k] for k, c in ctx.groupby("key") if k in total)


def calibration_rows(cal: Path, segments: bool = True) -> list[dict[str, Any]]:
    """Batch-1 floors, one row per model and chip whose opt2 compiled, from the calibration data at ``cal``:
    ``floor`` the TIU engine's, ``floor_gdma`` the GDMA engine's (the one that binds a weight-bound network),
    ``floor_joint`` both at once (:func:`joint_floor`, at least either), and ``exceeding`` the compiled groupings
    whose own bound is above their total (:func:`exceeding`).  ``segments=False`` (several cores): global layers
    by each engine's own commands (:func:`context_costs`)."""
    tot = pd.read_csv(cal / "totals.csv").rename(columns={"variant": "key"})
    groups = pd.read_csv(cal / "groups.csv")
    rows = []
    for (model, chip), c in context_costs(cal, segments).groupby(["model", "chip"]):
        t = tot[(tot.model == model) & (tot.chip == chip)]
        o2 = t[t.key == "opt2"]
        if o2.empty or o2.status.iloc[0] != "ok":
            continue
        n_groups = int(((groups.model == model) & (groups.chip == chip) & (groups.variant == "opt2")).sum())
        rows.append({"model": model, "chip": chip, "batch": 1, "groups": n_groups,
                     "opt2_measured": int(o2.total_cycles.iloc[0]), **floor_of(engine_costs(c, "tiu"), "opt2"),
                     "floor_gdma": floor_of(engine_costs(c, "dma"), "opt2")["floor"],
                     "floor_joint": joint_floor(c, "opt2"), "exceeding": exceeding(c, t[t.status == "ok"])})
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
    """The rows as a table by batch, model and chip, with ``floor_over_opt2`` (the highest of the row's floors: the
    most a grouping can save is 1 minus it) and ``opt2_ops_over_total`` (the share of opt2's time its ops' own
    costs cover)."""
    df = pd.DataFrame(list(rows)).sort_values(["batch", "model", "chip"], kind="stable")
    df["floor_over_opt2"] = df[[c for c in FLOORS if c in df]].max(axis=1) / df.opt2_measured
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

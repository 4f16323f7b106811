"""The several-core terms of the fitted model: how much the busy cores slow each other's GDMA (they share the
chip's DDR) and what their sync costs (``CostModel.cores``; ``cores`` in ``lgopt/cost/models/CHIP.json``).

Fitted on TPU-MLIR's timeline of groupings compiled on several cores (``benchmarks/settings.py``: TPU-MLIR's
own and variants of them), with every one-core constant held as ``lgopt fit`` made it: each compiled grouping
is read into lgopt once (the reading does not depend on these terms) and priced again for every
(slowdown, sync) of a small grid; the pair with the least median ``|predicted / measured - 1|`` over the
training models wins, and the held-out models, never looked at, give its error.  A grid, not a solver: two
terms, a few hundred prices each, and the median is not smooth.

A global layer's speed-up on several cores is measured op by op instead (:func:`global_speedups`): each global
op's cycles on one core (the one-core timelines, ``globals.csv``) over its cycles on core 0 of a several-core
compile (the scoring tool's ``global_ops``), the median per :func:`lgopt.cost.work.core_family`.  TPU-MLIR 1.30
runs an INT8 conv on one core (speed-up 1.00 on BM1688 and BM1690), spreads an F16 one over its output channels
(:func:`lgopt.cost.work.channel_cores`, whose exponent :func:`fit_exponents` fits), cuts elementwise ops into a
piece a core (BM1690 F16: 4-6x on 8 cores) and runs a permute on one core (the typical one 1.00x; ViT-B's
large ones 3.7x slower than on one core, which a median does not see).
"""

from __future__ import annotations

import statistics
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Iterator, Sequence

import pandas as pd

from lgopt.cost.fitted import CalibratedModel, global_speedup_of
from lgopt.cost.registry import COST_MODELS, register_cost_model, unregister_cost_model
from lgopt.group.totals import finish, with_cost
from lgopt.hw.chip import Chip
from lgopt.model.network import Network, Op
from lgopt.model.plan import Plan

SLOWDOWNS = tuple(round(1.0 + 0.1 * k, 1) for k in range(11))  # 1.0 .. 2.0
SYNCS = (0, 300, 1000, 3000, 10000, 30000)


@dataclass(frozen=True)
class Measured:
    """One compiled grouping: its model, lgopt's reading of it and TPU-MLIR's measured cycles."""

    model: str
    net: Network
    plan: Plan
    cycles: int


_TPU_CONV = frozenset({"tpu.Conv1D", "tpu.Conv2D", "tpu.Conv3D", "tpu.Deconv"})
_TPU_MOVE = frozenset({"tpu.Permute", "tpu.Concat", "tpu.Slice", "tpu.Reshape", "tpu.Upsample"})


def tpu_core_family(tpu_type: str, parallel: bool) -> str | None:
    """TPU-MLIR's global op (its type, and whether it ran inside a ``tpu.CoreParallel``) as the
    :func:`lgopt.cost.work.core_family` lgopt prices it by; None for one lgopt has no such global layer of.

    >>> tpu_core_family("tpu.Conv2D", False), tpu_core_family("tpu.MatMul", True), tpu_core_family("tpu.Buffer", False)
    ('conv', 'parallel', None)
    """
    if parallel:
        return "parallel"
    if tpu_type in _TPU_CONV:
        return "conv"
    if tpu_type == "tpu.MatMul":
        return "matmul"
    return "move" if tpu_type in _TPU_MOVE else None


def core_zero_globals(score: dict[str, Any]) -> list[tuple[str, str, bool, int]]:
    """``(name, type, parallel, cycles)`` of each global op of a several-core scoring as core 0 ran it: a
    ``tpu.CoreParallel`` op's pieces (``<name>_0_<k>``, one a core) by its own name, core 0's piece's cycles."""
    out, inside = [], False
    for o in score.get("global_ops", ()):
        t = o["type"]
        if t in ("tpu.CoreParallel", "tpu.Yield"):
            inside = t == "tpu.CoreParallel"
        elif t not in ("tpu.CoreSplit", "tpu.CoreJoin") and o.get("cycles") is not None:
            name = o.get("name") or ""
            if inside and name[-4:-1] == "_0_":
                name = name[:-4]
            out.append((name, t, inside, int(o["cycles"])))
    return out


def global_speedups(one: pd.DataFrame, many: pd.DataFrame, cores: int) -> dict[str, dict[str, float]]:
    """Per core family, the median speed-up of its global ops on ``cores`` cores over one (at most ``cores``; below
    1 where several cores run the typical op slower) and how many ops it is the median of.  ``one``: model, name,
    cycles (one-core timelines); ``many``: model, name, type, parallel, cycles (:func:`core_zero_globals` of the
    several-core scorings).  Matched by model and op name, each side's median over the groupings it ran in."""
    a = one[one.cycles > 0].groupby(["model", "name"]).cycles.median().rename("one")
    b = many.groupby(["model", "name"]).agg(many=("cycles", "median"), type=("type", "first"),
                                            parallel=("parallel", "first"))
    d = b.join(a, how="inner")
    d = d[d.many > 0]
    d["family"] = [tpu_core_family(t, bool(p)) for t, p in zip(d.type, d.parallel)]
    out = {}
    for fam, x in d.dropna(subset=["family"]).groupby("family"):
        s = float((x.one / x.many).median())  # the typical op: a sum follows ViT-B's few large permutes
        out[str(fam)] = {"speedup": round(min(s, float(cores)), 3), "n": int(len(x))}
    return out


def row_run_bytes(chip: Chip, one: pd.DataFrame, many: pd.DataFrame, elem_bytes: int) -> dict[str, float] | None:
    """The per-row overhead (bytes at the streaming rate) that gives each one-row weighted matmul's measured
    speed-up on ``chip.used_cores`` cores in :func:`lgopt.cost.fitted.row_speedup`'s model (its fixed cost left
    out), the median over those ops, and how many there were (None: none measured): a check of the one-core
    line's ``row_run`` from the cores alone.  ``one``: model, name, cycles, out_shape (one-core timelines);
    ``many``: as :func:`global_speedups`.  Solved per op from ``s = (r + W) / (r + W / n)``:
    ``r = W (1 - s / n) / (s - 1)``, for a speed-up between 1 and ``n``."""
    heads = one[(one.cycles > 0) & one.out_shape.astype(str).str.fullmatch(r"1x\d+")]
    a = heads.groupby(["model", "name"]).agg(one=("cycles", "median"), shape=("out_shape", "first"))
    b = many[many.type == "tpu.MatMul"].groupby(["model", "name"]).cycles.median().rename("many")
    d = a.join(b, how="inner")
    rs = []
    for x in d.itertuples():
        cols = int(str(x.shape).split("x")[1])
        n, s = max(1, min(chip.used_cores, -(-cols // chip.npu_num))), x.one / max(1.0, x.many)
        if 1.0 < s < n:
            rs.append(cols * elem_bytes * (1 - s / n) / (s - 1))
    return {"bytes": round(statistics.median(rs), 1), "n": len(rs)} if rs else None


@dataclass(frozen=True)
class CoreFit:
    slowdown: float
    sync: int
    train_error: float  # median |pred / meas - 1| over the training models' groupings
    held_error: float | None  # ... over the held-out models' (None: none held out)
    before_held_error: float | None  # the held-out error with the terms the model had before (analytic's)
    n_train: int
    n_held: int


@dataclass(frozen=True)
class _WithCores:
    """A registered model that is ``base`` but for its several-core terms."""

    base: CalibratedModel
    slowdown: float | None  # None: the base model's several-core terms
    sync: int
    name: str
    exponents: dict[str, float] | None = None  # the channel exponents tried (None: the base model's)

    def __getattr__(self, key: str) -> Any:
        return getattr(self.base, key)

    def cores(self, chip: Chip, busy: int) -> tuple[float, int]:
        if self.slowdown is None:
            return self.base.cores(chip, busy)
        return (1.0, 0) if busy <= 1 else (self.slowdown, self.sync)

    def global_speedup(self, chip: Chip, net: Network, op: Op) -> float | None:
        return global_speedup_of(self.base.constants(chip), chip, net, op, self.exponents)


@contextmanager
def _registered(model: _WithCores) -> Iterator[str]:
    if model.name in COST_MODELS:
        unregister_cost_model(model.name)
    register_cost_model(model)  # type: ignore[arg-type]
    try:
        yield model.name
    finally:
        unregister_cost_model(model.name)


def price(chip: Chip, rows: Sequence[Measured], cost_model: str) -> list[float]:
    """``predicted / measured`` of each grouping, priced again by ``cost_model`` (groups and global layers)."""
    c = replace(chip, cost_model=cost_model)
    out = []
    for r in rows:
        plan = finish(c, r.net, replace(r.plan, groups=tuple(with_cost(c, r.net, g) for g in r.plan.groups)))
        out.append(plan.cost["cycles"] / r.cycles)
    return out


def _error(ratios: Sequence[float]) -> float:
    return statistics.median(abs(x - 1) for x in ratios) if ratios else float("nan")


EXPONENTS = tuple(round(0.1 * k, 1) for k in range(11))  # 0 (one core) .. 1 (every core it spreads over, fully)


ONE_CORE = 1.05  # a kind whose global ops run at most this much faster on several cores, op by op, runs on one


def fit_exponents(chip: Chip, base: CalibratedModel, rows: Sequence[Measured], held_out: Sequence[str],
                  measured: dict[str, dict[str, float]] | None = None) -> dict[str, float]:
    """The channel exponents (:func:`lgopt.cost.fitted.global_speedup_of`) of a global conv and a weighted matmul
    with the least median ``|predicted / measured - 1|`` over the training models' groupings: a grid, the smaller
    exponent on a tie (a kind the groupings never run globally stays at 0, one core).  A kind ``measured`` op by
    op (:func:`global_speedups`) to run on one core (its median speed-up at most :data:`ONE_CORE`) is 0 and not
    fitted: on the totals its exponent would only stand in for other terms' errors (BM1690's INT8 global convs,
    1.00 on 312 ops, took 0.3 there and priced every global conv 1.9x fast)."""
    train = [r for r in rows if r.model not in held_out]
    pinned = {k for k, v in (measured or {}).items() if k in ("conv", "matmul") and v["speedup"] <= ONE_CORE}
    grid = {k: (0.0,) if k in pinned else EXPONENTS for k in ("conv", "matmul")}
    best: tuple[float, dict[str, float]] | None = None
    for c in grid["conv"]:
        for m in grid["matmul"]:
            e = {"conv": c, "matmul": m}
            with _registered(_WithCores(base, None, 0, f"{base.name}+cores", e)) as name:
                err = _error(price(chip, train, name))
            if best is None or err < best[0] - 1e-12:
                best = (err, e)
    assert best is not None
    return best[1]


def fit_cores(chip: Chip, base: CalibratedModel, rows: Sequence[Measured], held_out: Sequence[str]) -> CoreFit:
    """The grid's best (slowdown, sync) for ``chip`` (its ``used_cores`` > 1) on the groupings of the models not in
    ``held_out``, and its error on those that are."""
    train = [r for r in rows if r.model not in held_out]
    held = [r for r in rows if r.model in held_out]
    if not train:
        raise ValueError("no grouping of a training model to fit on")
    best: tuple[float, float, int] | None = None
    for s in SLOWDOWNS:
        for y in SYNCS:
            with _registered(_WithCores(base, s, y, f"{base.name}+cores")) as name:
                e = _error(price(chip, train, name))
            if best is None or e < best[0] - 1e-12:
                best = (e, s, y)
    assert best is not None
    e, s, y = best
    held_e = before = None
    if held:
        with _registered(_WithCores(base, s, y, f"{base.name}+cores")) as name:
            held_e = _error(price(chip, held, name))
        before = _error(price(chip, held, base.name))
    return CoreFit(s, y, e, held_e, before, len(train), len(held))

"""The several-core terms of the fitted model: how much the busy cores slow each other's GDMA (they share the
chip's DDR) and what their sync costs (``CostModel.cores``; ``cores`` in ``lgopt/cost/models/CHIP.json``).

Fitted on TPU-MLIR's timeline of groupings compiled on several cores (``benchmarks/settings.py``: TPU-MLIR's
own and variants of them), with every one-core constant held as ``lgopt fit`` made it: each compiled grouping
is read into lgopt once (the reading does not depend on these terms) and priced again for every
(slowdown, sync) of a small grid; the pair with the least median ``|predicted / measured - 1|`` over the
training models wins, and the held-out models, never looked at, give its error.  A grid, not a solver: two
terms, a few hundred prices each, and the median is not smooth.
"""

from __future__ import annotations

import statistics
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Iterator, Sequence

from lgopt.cost.fitted import CalibratedModel
from lgopt.cost.registry import COST_MODELS, register_cost_model, unregister_cost_model
from lgopt.group.totals import finish, with_cost
from lgopt.hw.chip import Chip
from lgopt.model.network import Network
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
    slowdown: float
    sync: int
    name: str

    def __getattr__(self, key: str) -> Any:
        return getattr(self.base, key)

    def cores(self, chip: Chip, busy: int) -> tuple[float, int]:
        return (1.0, 0) if busy <= 1 else (self.slowdown, self.sync)


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

"""The fit of the fitted cost model's constants (:mod:`lgopt.cost.fitted`) on measured cycles.

The constants in ``lgopt/cost/models/<chip>.json`` are data: a team with its own compiler's measurements on
its own chip must be able to make them the way the shipped ones were made, and anyone must be able to make
the shipped ones again (``lgopt fit``, ``docs/cost-model.md``).  This module is the numerical half of that:
it takes tables already put in lgopt's terms (lgopt's ops, their slice shapes' work terms, transfers by kind,
bytes and runs) and returns the constants.  How a compiler's measurement files look and how its op names map
onto lgopt's ops is a reader's business (:mod:`lgopt.tpumlir.measurements` for TPU-MLIR's timeline), so
another compiler needs a reader of its own, not another fit.

The tables (:class:`ChipTables`) are pandas DataFrames with one row per measured thing:

* ``tiu``: op slices in groups: ``model``, ``lg`` (the lgopt op), ``nslice``, ``hslice``, ``cat`` and ``fam``
  (:func:`lgopt.cost.fitted.tiu_category`), ``work`` (:func:`~lgopt.cost.fitted.work_term`), ``fused``
  (:func:`~lgopt.cost.fitted.fused_work`), ``cycles``;
* ``transfers``: GDMA commands in groups: ``model``, ``kind`` (load, store, weight), ``bytes``, ``runs``
  (contiguous GMEM pieces), ``point`` (each run one element), ``cycles``;
* ``global_layers``: non-local ops run as global layers: ``model``, ``lg``, ``type``, ``work``
  (:func:`~lgopt.cost.fitted.global_work`), ``cycles``;
* ``global_traffic``: every global op: ``nbytes`` moved and GDMA-busy ``cycles``;
* ``slice_transfers``: activation loads and stores of slices cut along H: ``role`` (load, store), ``hslice``,
  ``bytes``, ``cycles``.

Nothing here draws at random or reads the clock: the same tables give the same constants (bit for bit on one
machine; another BLAS may move a least-squares fit's last digits, which the rounding written mostly absorbs).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd

from lgopt.cost import cycles
from lgopt.cost.cycles import global_layer_cost
from lgopt.cost.fitted import FUSED_PASS_RATE, CalibratedModel, forget_constants, one_pass, scale_key
from lgopt.cost.registry import COST_MODELS, register_cost_model, unregister_cost_model
from lgopt.errors import LgoptError
from lgopt.hw.chip import Chip
from lgopt.model.network import Network

GDMA_FORM = ("max(chip.gdma_latency_cycles, c + max(bytes / bw, k * runs + k_point * point_runs), bytes / chip "
             "bandwidth) per kind (load, store, weight)")
PER_TYPE_FAMILIES = ("unary", "binary", "pool")  # one category per op type: an unseen type has no peer
BW_GRID = (8, 10, 12, 14, 15, 16, 16.5, 17, 18, 20, 22, 25, 28, 30, 32, 35, 38, 40, 41, 42, 44, 46, 48, 50, 52, 54,
           56, 60, 64, 66, 68, 70, 71, 72, 73)  # bytes per cycle a transfer kind may stream at: every fitted chip's
# rates lie inside (BM1690's weights stream at 70.8 in the median; a grid ending at 64 priced them 10 % slow)
POINT_CAPS = (256, 512, 1024, 2048)  # run counts past which a one-element transfer may cost no more
GLOBAL_BW_MIN_BYTES = 1 << 18  # global ops moving at least this much show their streaming rate, not latency
SLICE_RATE_MIN = 0.9  # an activation slice height streams "at the fitted rate" from this share of it on
SLICE_HEIGHT_MIN_N = 20  # ... judged on heights seen on at least this many sliced transfers
SLICE_MIN_BYTES = 4096  # ... of transfers this big (smaller ones are latency, whatever their height)
LINE_MIN_OPS = 20  # a global layer type's line (fixed cycles and a rate) needs this many ops; fewer, a scale alone
# (13 big convs gave a line of 41,684 cycles + 0.94x one fit and 0 + 1.17x the next, and a held-out model's
# choice between grouping its last convs and running them globally turned on which)


@dataclass(frozen=True)
class ChipTables:
    """One chip's measurements in lgopt's terms (module docstring), from the models the fit may use: the
    held-out ones are left out by the reader, so nothing here can leak into the error reported on them."""

    tiu: pd.DataFrame
    transfers: pd.DataFrame
    global_layers: pd.DataFrame
    global_traffic: pd.DataFrame
    slice_transfers: pd.DataFrame
    gemm_row_shares: tuple[float, ...] = ()  # a global Gemm's further rows over its first (fit_global_rows)
    gemm_rows_source: str = ""  # where those were measured, recorded beside the share


def fit_chip(tables: ChipTables) -> dict[str, Any]:
    """Every constant but ``global_local`` (which needs these in place: :func:`fit_global_local`), as the
    JSON document's keys, in its order."""
    fused = fused_passes_pay(tables.tiu)
    issue, tiu = fit_tiu(tables.tiu, fused)
    dma = fit_gdma(tables.transfers)
    doc: dict[str, Any] = {"issue_cycles": issue, "tiu": tiu, **({} if fused else {"fused_passes": False}),
                           "gdma": {"form": GDMA_FORM, **dma},
                           "global": fit_global(tables.global_layers) if len(tables.global_layers) else {},
                           "global_gdma": fit_global_bw(tables.global_traffic)}
    rows = fit_global_rows(tables.gemm_row_shares, tables.gemm_rows_source)
    if rows:
        doc["global_rows"] = rows
    slices = fit_slice_rows(tables.slice_transfers, dma)
    if slices:
        doc["slice_rows"] = slices
    return doc


# --- a line through relative errors ---------------------------------------------------------------------

def wls(x: np.ndarray, y: np.ndarray, a_min: float, iters: int = 12) -> tuple[float, float]:
    """``min sum |(a + b x - y) / y|`` (relative L1, by reweighted least squares) with ``a >= a_min, b >= 0``.
    Relative, because a category spans slices from tens to millions of cycles and each should count alike; L1,
    so that the few slices a compiler lays out its own way do not pull the line.

    >>> a, b = wls(np.array([1.0, 2.0, 3.0, 4.0]), np.array([12.0, 14.0, 16.0, 18.0]), 0.0)
    >>> round(a, 3), round(b, 3)
    (10.0, 2.0)
    """
    y = np.maximum(y, 1.0)
    u = np.ones_like(y)
    a, b = a_min, 0.0
    for _ in range(iters):
        w = np.sqrt(u) / y
        design = np.c_[np.ones_like(x), x] * w[:, None]
        a, b = np.linalg.lstsq(design, y * w, rcond=None)[0]
        if b < 0:
            b = 0.0
            a = float(np.sum(y * w * w) / np.sum(w * w))
        if a < a_min:
            a = a_min
            xx = x * w
            b = max(0.0, float(np.dot(xx, (y - a) * w) / max(np.dot(xx, xx), 1e-12)))
        u = 1.0 / np.maximum(np.abs((a + b * x - y) / y), 0.01)
    return float(a), float(b)


# --- TIU ------------------------------------------------------------------------------------------------

def line_sizes(category: str) -> int:
    """Distinct slice sizes a category needs for a line ``a + b*W`` rather than a rate: 3, or 2 for a lane copy,
    whose cost is mostly its fixed part (BM1688's ShuffleNet shows its wrapping Slice at two sizes, 11,725 and
    13,048 cycles, the smaller one the slower: a rate through them is 30-50% off, their mean within 6%)."""
    return 2 if category.endswith(("_wrap", "_shift")) else 3


def fit_tiu(df: pd.DataFrame, fused: bool = True) -> tuple[int, dict[str, dict[str, Any]]]:
    """``(issue cycles, {category: {a, b, n}})``: per category ``a + b*W``.  Types the data never shows keep
    the analytic work (``b = 1``): the conv family falls back to the fit over all its convs, an elementwise or
    pool type to its analytic ops per element.  ``fused``: a conv's fused activations are passes of their own
    (:func:`fused_passes_pay`), taken off its cycles before its line is fitted."""
    d = _distinct_slices(df)
    if fused:
        d = d.assign(cycles=np.maximum(d.cycles - np.ceil(_fused_pass_rate(d) * d.fused), 1.0))
    raw = {}
    for k, x in d.groupby("cat"):
        if x.work.nunique() >= line_sizes(str(k)):
            raw[str(k)] = x
    for k, x in d.groupby("fam"):
        if k not in raw and k not in PER_TYPE_FAMILIES and x.work.nunique() >= 3:
            raw[str(k)] = x
    passes = {k: fit_passes(x) for k, x in raw.items()}
    raw = {k: x.assign(work=x.work + passes[k] * x.passes) if "passes" in x else x for k, x in raw.items()}
    fits = {k: wls(x.work.to_numpy(float), x.cycles.to_numpy(float), 0.0) for k, x in raw.items()}
    issue = max(1, int(min(a for a, _ in fits.values()))) if fits else 1
    tiu: dict[str, dict[str, Any]] = {}
    for k, x in raw.items():
        a, b = wls(x.work.to_numpy(float), x.cycles.to_numpy(float), float(issue))
        tiu[k] = {"a": math.ceil(a), "b": round(b, 6), "n": int(len(x)), **({"passes": passes[k]} if passes[k] else {})}
    # a type seen at one or two slice sizes only (ConvNeXt's GELU and LayerNorm run at the same shape in every
    # grouping): a pure rate over the issue cost, a line needing more sizes than that
    for k, x in d.groupby("cat"):
        if k not in tiu and k and (x.work > 0).all():
            b = float(np.median((x.cycles - issue).clip(lower=0) / x.work))
            tiu[str(k)] = {"a": issue, "b": round(b, 6), "n": int(len(x)), "note": "a rate: fewer than 3 slice sizes"}
    if "deconv" not in tiu and "conv" in tiu:  # a transposed conv runs on the same MAC array (BM1690: half the
        # analytic work, as its convs; at the default 1.0 UNet's deconvs were priced 2.0x on BM1690)
        a, b = tiu["conv"]["a"], tiu["conv"]["b"]  # the line alone: an INT8 deconv's requantisation is an op apart
        tiu["deconv"] = {"a": a, "b": b, "n": 0, "note": "not measured: the convs' line"}
    for k in (*PER_TYPE_FAMILIES, "default"):
        tiu.setdefault(k, {"a": issue, "b": 1.0, "n": 0, "note": "not fitted: the analytic work"})
    return issue, tiu


MAX_PASSES = 6  # vector passes over an integer conv's int32 output a chip may make after its MACs


def fit_passes(x: pd.DataFrame) -> int:
    """How many passes of :func:`lgopt.cost.fitted.pass_term` a category's slices pay beside their work (0 where
    they have none: every F16 op): the count whose line ``a + b (W + p P)`` is the least off, in mean relative
    error capped at 100 %.  Counted, not fitted as a second slope, so the line stays ``a + b W'`` with ``b``
    the MAC array's rate (BM1684X's INT8 convs: 3, BM1688's: 0).

    >>> d = pd.DataFrame({"work": [100.0, 200.0, 400.0, 800.0], "passes": [40, 20, 60, 10],
    ...                   "cycles": [220.0, 260.0, 580.0, 830.0]})
    >>> fit_passes(d)
    3
    """
    if "passes" not in x or not (x.passes > 0).any():
        return 0
    y = x.cycles.to_numpy(float)

    def err(p: int) -> float:
        w = x.work.to_numpy(float) + p * x.passes.to_numpy(float)
        a, b = wls(w, y, 0.0)
        return float(np.mean(np.minimum(np.abs((a + b * w) / np.maximum(y, 1.0) - 1), 1.0)))

    return min(range(MAX_PASSES + 1), key=lambda p: (err(p), p))


def _distinct_slices(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop_duplicates(["model", "lg", "nslice", "hslice", "cycles"])  # one point per distinct op slice


def fused_passes_pay(df: pd.DataFrame) -> bool:
    """Whether a conv's fused activations cost passes of their own on this chip: the convs with one are
    fitted both ways (their passes at an Add's rate taken off and added back, or not) and the way less off on
    them wins.  BM1684X and BM1688 run a fused ReLU as an AR command after the CONV; BM1690's F16 convs cost
    half their work with or without one (ResNet-18's 3 x 3 convs 0.49-0.50 of it either way), where taking
    the passes off put UNet's convs at 0.87 of their cycles.

    >>> d = pd.DataFrame({"model": "m", "lg": list("abcdef"), "nslice": 1, "hslice": 1, "cat": "conv",
    ...                   "work": [100.0, 200.0, 400.0] * 2, "fused": [0, 0, 0, 50, 100, 200],
    ...                   "cycles": [50.0, 100.0, 200.0] * 2})
    >>> fused_passes_pay(pd.concat([d, d.assign(cat="Add", lg=list("ghijkl"), fused=0)]))
    False
    """
    d = _distinct_slices(df)
    rate = _fused_pass_rate(d)
    errors: dict[bool, list[float]] = {True: [], False: []}
    for cat in d.loc[d.fused > 0, "cat"].unique():  # each category with such convs, all its slices
        x = d[d.cat == cat]
        if x.work.nunique() < 3:
            continue
        for pays in (True, False):
            off = np.ceil(rate * x.fused.to_numpy(float)) if pays else np.zeros(len(x))
            y = x.cycles.to_numpy(float)
            a, b = wls(x.work.to_numpy(float), np.maximum(y - off, 1.0), 0.0)
            rel = np.abs((a + b * x.work.to_numpy(float) + off) / y - 1)
            errors[pays] += list(rel[x.fused.to_numpy(float) > 0])
    if not errors[True]:
        return True
    return float(np.median(errors[True])) <= float(np.median(errors[False]))


def _fused_pass_rate(d: pd.DataFrame) -> float:
    """A conv's fused activations run as AR passes at an Add's rate (:func:`lgopt.cost.fitted.fused_work`):
    fitted first, they are taken off the conv's cycles, so that its own line is the MAC array's."""
    adds = d[d.cat == FUSED_PASS_RATE]
    if adds.work.nunique() < 3:
        return 1.0
    return wls(adds.work.to_numpy(float), adds.cycles.to_numpy(float), 0.0)[1]


# --- GDMA -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _DmaPoint:
    """The best point of a grid search: mean capped relative error and the constants giving it."""

    err: float
    c: float
    k: float
    k_point: float


def _dma_grid(b: np.ndarray, r: np.ndarray, pt: np.ndarray, y: np.ndarray, bw: float,
              best: _DmaPoint | None, margin: float = 0.0) -> _DmaPoint | None:
    """The best ``k, k_point`` (and intercept, the median residual) at one rate ``bw``, if it beats ``best`` by
    more than ``margin``.  The error is capped at 100%: a few transfers TPU-MLIR lays out its own way do not
    decide."""
    stream = b / bw
    for k in np.arange(0.0, 12.01, 0.25):
        for kp in np.arange(0.0, 30.01, 2.5):
            base = np.maximum(stream, k * r + kp * pt)
            c = max(0.0, float(np.median(y - base)))
            err = float(np.mean(np.minimum(np.abs((c + base) / y - 1), 1.0)))
            if best is None or err < best.err - margin:
                best = _DmaPoint(err, c, float(k), float(kp))
    return best


def _fit_dma_kind(x: pd.DataFrame) -> dict[str, Any]:
    """One transfer kind's ``c + max(bytes / bw, k * runs + k_point * point runs)``: a grid over ``bw``, ``k``
    and ``k_point``; then, with ``bw`` fixed, the cap on a one-element transfer's runs that fits best, if one
    does (BM1684X moves a 2,048-channel bias or pooled vector in the time of 1,024)."""
    b, r, y = (x[c].to_numpy(float) for c in ("bytes", "runs", "cycles"))
    pt = x.point.to_numpy(bool) * r
    best: _DmaPoint | None = None
    best_bw: float = BW_GRID[0]
    for bw in BW_GRID:
        found = _dma_grid(b, r, pt, y, bw, best)
        if found is not best:
            best, best_bw = found, bw
    cap = None
    many = pt > 0
    for cp in POINT_CAPS:
        rr = np.where(many, np.minimum(r, cp), r)
        capped = _dma_grid(b, rr, np.where(many, rr, 0.0), y, best_bw, best, margin=1e-4)
        if capped is not best:
            best, cap = capped, cp
    assert best is not None  # the grid is not empty
    out = {"c": round(best.c, 2), "bw": best_bw, "k": round(best.k, 3), "k_point": round(best.k_point, 3),
           "n": int(len(x)), "mean_rel_err": round(best.err, 4)}
    if cap is not None:
        out["point_cap"] = int(cap)
    return out


def fit_gdma(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per transfer kind (load, store, weight) its constants (:func:`_fit_dma_kind`), minimising the mean
    relative error over the distinct transfers."""
    distinct = df.drop_duplicates(["model", "kind", "bytes", "runs", "point", "cycles"])
    return {str(kind): _fit_dma_kind(x) for kind, x in distinct.groupby("kind")}


# --- global layers --------------------------------------------------------------------------------------

def fit_global(df: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per non-local op type run as a global layer ``a + b * X`` (X: :func:`lgopt.cost.fitted.global_work`) on
    the median cycles of each op; a ``default`` line over all of them for types seen fewer than 3 times (held
    out, it beats the analytic global compute, which is far too cheap for TPU-MLIR's global elementwise
    layers).  A matmul type with a weight (``weight_runs``) also gets the elements each weight row adds
    (``row_run``, :func:`fit_row_run`) where its ops have several widths."""
    if "weight_runs" not in df:
        df = df.assign(weight_runs=0)
    d = df.groupby(["model", "lg", "type", "work", "weight_runs"]).cycles.median().reset_index()
    out = {}
    for t, x in d.groupby("type"):
        if len(x) < 3:
            continue
        run = fit_row_run(x)
        work = x.work.to_numpy(float) + run * x.weight_runs.to_numpy(float)
        a, b = wls(work, x.cycles.to_numpy(float), 0.0)
        if len(np.unique(work)) < 2:  # one size seen: a pure rate
            a, b = 0.0, float(np.median(x.cycles / np.maximum(work, 1)))
        out[str(t)] = {"a": round(a, 3), "b": round(b, 8), "n": int(len(x)), **({"row_run": run} if run else {})}
    a, b = wls(d.work.to_numpy(float), d.cycles.to_numpy(float), 0.0)
    out["default"] = {"a": round(a, 3), "b": round(b, 8), "n": int(len(d))}
    return out


ROW_RUNS = tuple(range(0, 1025, 8))  # elements a weight row may add: 0 .. a kilobyte of INT8


def fit_row_run(x: pd.DataFrame) -> int:
    """The elements each of a global matmul's weight rows adds to its work (a DMA run's fixed overhead), the grid
    value whose line (:func:`wls`) has the least relative L1 error; 0 where the ops have no weight or fewer than
    two widths (``work / weight_runs``), which cannot tell an overhead from a rate.  ``weight_runs``: the weight
    rows counted once an output row (:func:`lgopt.cost.fitted.weight_runs`), as ``work`` counts them."""
    k = x.weight_runs.to_numpy(float)
    if (k <= 0).any() or len(np.unique(np.round(x.work.to_numpy(float) / k))) < 2:
        return 0
    y = np.maximum(x.cycles.to_numpy(float), 1.0)
    best = (np.inf, 0)
    for run in ROW_RUNS:
        w = x.work.to_numpy(float) + run * k
        a, b = wls(w, y, 0.0)
        err = float(np.sum(np.abs(a + b * w - y) / y))
        if err < best[0] - 1e-9:
            best = (err, run)
    return best[1]


def fit_global_bw(traffic: pd.DataFrame) -> dict[str, Any]:
    """The rate a compiler's global kernels move data at: the median of bytes over GDMA-busy cycles of the
    global ops (every type, casts included) that move at least :data:`GLOBAL_BW_MIN_BYTES`.  About 25 bytes per
    cycle on BM1688 and 50 on BM1684X, where a group's transfers stream at 16.5 and 41-54: a global layer's
    weights and activations move in long runs over all channels."""
    x = traffic[(traffic.nbytes >= GLOBAL_BW_MIN_BYTES) & (traffic.cycles > 0)]
    if x.empty:
        return {}
    return {"form": "a global layer's transfers: max(chip.gdma_latency_cycles, bytes / bw, bytes / chip bandwidth)",
            "bw": round(float(np.median(x.nbytes / x.cycles)), 3), "n": int(len(x))}


def fit_global_rows(shares: Sequence[float], source: str) -> dict[str, Any]:
    """The share of a global Gemm's first row each further row costs (``global_rows``, read by
    :func:`lgopt.cost.fitted.global_work`): the median of the measured ``(cycles at batch B / cycles at batch 1
    - 1) / (B - 1)`` of one-row Gemms with a weight.  Batch-1 measurements have one-row Gemms only (classifier
    heads), so these come from runs at a larger batch; without them no share is written and every row costs a
    full one."""
    if not shares:
        return {}
    return {"form": "a global Gemm with a weight: a + b * K * N * (1 + share * (rows - 1))",
            "share": round(float(np.clip(np.median(shares), 0.0, 1.0)), 4), "n": len(shares), "source": source}


def global_local_table(chip: Chip, nets: dict[str, Network], rows: pd.DataFrame) -> pd.DataFrame:
    """Layer-group op types run as global layers (``rows``: ``model``, ``lg``, ``cycles``), each op once with
    its median measured cycles, its prediction ``max(compute, transfers)`` by ``chip``'s cost model (the
    constants being fitted, without ``global_local``), the engine bounding it and the key its scale is fitted
    under (:func:`lgopt.cost.fitted.scale_key`)."""
    x = rows.copy()
    costs = [global_layer_cost(chip, nets[r.model], nets[r.model].op(r.lg)) for r in x.itertuples()]
    x["pred"] = [c["cycles"] for c in costs]
    # the price were the layer run in one pass where it fits (fitted.one_pass): compute and transfers in turn
    x["serial"] = [max(c["cycles"], c["tiu_cycles"] + c["gdma_cycles"])
                   if one_pass(chip, nets[r.model], nets[r.model].op(r.lg)) else c["cycles"]
                   for r, c in zip(x.itertuples(), costs)]
    x["bound"] = ["tiu" if c["tiu_cycles"] >= c["gdma_cycles"] else "gdma" for c in costs]
    # a view of GMEM (a merged Concat) costs 0 by rule, whatever casts TPU-MLIR puts beside it: no scale
    x = x[x.pred > 0]
    x["type"] = [scale_key(nets[r.model], nets[r.model].op(r.lg)) for r in x.itertuples()]
    per_op = x.groupby(["model", "lg", "type", "bound"]).agg(cycles=("cycles", "median"), pred=("pred", "median"),
                                                             serial=("serial", "median"))
    return per_op.reset_index()


def _global_line(z: pd.DataFrame) -> dict[str, Any]:
    """``a + scale * max(compute, transfers)``, relative L1: a global layer's fixed cycles beside a rate (one
    scale alone, fitted on the many small layers, overcharged VGG's and UNet's big convs by 30 %); a plain
    ratio where there are too few ops or sizes, or the line's rate is far from the model's own."""
    p, m = z.pred.to_numpy(float), z.cycles.to_numpy(float)
    ratio = {"scale": round(float(np.clip(np.median(m / np.maximum(p, 1)), 0.1, 10.0)), 4), "n": len(z)}
    if len(np.unique(p)) < 3 or len(z) < LINE_MIN_OPS:
        return ratio
    a, b = wls(p, m, 0.0)
    if not 0.25 <= b <= 4.0:  # a line that far from the model's own rate fits a few sizes, not a rule
        return ratio
    return {"scale": round(float(b), 4), "a": round(a, 1), "n": int(len(z))}


ONE_PASS_GAIN = 0.8  # a one-pass price must cut a key's error by a fifth: a few-percent win is the fit's noise


def fit_global_local(per_op: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """``global_local``: per scale key (:func:`global_local_table`) seen on at least 3 ops, its line
    (:func:`_global_line`), and per key and bounding engine where both engines bound at least 3 ops each.
    TPU-MLIR's global kernels tile and overlap their own way: SiLU about 0.3-0.6 of the model's
    ``max(compute, transfers)``, Concat 1.1-1.6.  Keys seen less keep 1.  A key whose ops are priced better
    (relative L1 over its ops) as run in one pass where they fit (``serial``: :func:`lgopt.cost.fitted.one_pass`)
    by a clear margin (:data:`ONE_PASS_GAIN`) is fitted on that price and marked ``one_pass``: the data say which
    kernels do (INT8 convs on BM1688 and BM1690: 0.126 -> 0.069 and 0.113 -> 0.041 of a layer's cycles; not
    F16's, 0.104 -> 0.163), not a rule per chip."""
    scales: dict[str, dict[str, Any]] = {}
    for t, y in per_op.groupby("type"):
        if len(y) < 3:
            continue
        lines = _key_lines(str(t), y)
        if "serial" in y and (y.serial != y.pred).any():
            z = y.assign(pred=y.serial)
            serial = _key_lines(str(t), z)
            if _line_error(z, serial) < ONE_PASS_GAIN * _line_error(y, lines):
                lines = {**serial, str(t): {**serial[str(t)], "one_pass": True}}
        scales.update(lines)
    return scales


def _key_lines(t: str, y: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """One key's line, and its lines per bounding engine where both bound at least 3 of its ops."""
    lines = {t: _global_line(y)}
    by = {b: z for b, z in y.groupby("bound") if len(z) >= 3}
    if len(by) == 2:
        lines.update({f"{t}/{b}": _global_line(z) for b, z in by.items()})
    return lines


def _line_error(y: pd.DataFrame, lines: dict[str, dict[str, Any]]) -> float:
    """Relative L1 error over ``y``'s ops of ``lines`` (each op by its engine's line where there is one, as
    :func:`lgopt.cost.fitted.fitted_key` looks them up)."""
    err = 0.0
    for r in y.itertuples():
        line = lines.get(f"{r.type}/{r.bound}", lines[str(r.type)])
        err += abs(line.get("a", 0.0) + line["scale"] * r.pred - r.cycles) / max(r.cycles, 1.0)
    return err


# --- short slices ---------------------------------------------------------------------------------------

def fit_slice_rows(transfers: pd.DataFrame, dma: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The fewest rows an activation slice may have for the fitted transfer rates to hold (``slice_rows``, read
    by the compiler space's ``short_slices`` caution): the smallest ``r`` such that the H-cut activation loads
    and stores (``transfers``, at least :data:`SLICE_MIN_BYTES`) of the heights ``>= r`` seen on at least
    :data:`SLICE_HEIGHT_MIN_N` transfers stream at a median of at least :data:`SLICE_RATE_MIN` of their kind's
    fitted rate (``dma``), but for odd heights above which most heights do (every height up to a slow one
    counted).  TPU-MLIR's timeline moves shorter slices at a quarter to three quarters of it, in steps that
    follow the slice's shape, which the fitted form (bytes, runs) does not see: 9 rows on BM1688, where 2-8 row
    slices stream at a median 0.47-0.74 of 16.5 bytes per cycle."""
    d = transfers[(transfers.bytes >= SLICE_MIN_BYTES) & (transfers.cycles > 0)]
    if d.empty or "load" not in dma or "store" not in dma:
        return {}
    bw = np.where(d.role == "load", dma["load"]["bw"], dma["store"]["bw"])
    share = (d.bytes / d.cycles / bw).groupby(d.hslice).agg(["median", "size"])
    share = share[share["size"] >= SLICE_HEIGHT_MIN_N]
    slow = (share["median"] < SLICE_RATE_MIN).to_numpy()
    # the tallest slow height below which most heights are slow: one odd height further up (BM1688's 32 rows,
    # 0.80 of the rate on 32 transfers) does not make every shorter one suspect
    heights = share.index.to_numpy()
    mostly = [int(h) for i, h in enumerate(heights) if slow[i] and 2 * slow[:i + 1].sum() > i + 1]
    rows = max(mostly) + 1 if mostly else 0
    return {"form": "an H-sliced group outside the reference moves no activation slice of fewer rows",
            "min": rows, "rate_share": SLICE_RATE_MIN, "n": int(share["size"].sum())}


# --- the document ---------------------------------------------------------------------------------------

def constants_document(name: str, chip: str, constants: dict[str, Any], source: dict[str, Any],
                       global_local: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document :class:`lgopt.cost.fitted.ChipConstants` reads, its keys in a fixed order (a refit
    with the same options writes the same bytes)."""
    doc = {"model": name, "chip": chip, **constants, "source": source}
    if global_local is not None:
        doc["global_local"] = global_local
    return doc


@contextmanager
def fitted_model(name: str, directory: Path) -> Iterator[CalibratedModel]:
    """The fitted model reading the constants in ``directory``, registered as ``name`` while in use: a chip
    names its cost model, and every price a plan pays is looked up through that name.  Memoised constants and
    prices are dropped on entry and on exit, since the files are being written and a name may come back with
    other constants."""
    if name in COST_MODELS:
        raise LgoptError(f"cost model {name!r} is already registered")
    model = CalibratedModel(name=name, directory=str(directory))
    _forget()
    register_cost_model(model)
    try:
        yield model
    finally:
        unregister_cost_model(name)
        _forget()


def _forget() -> None:
    forget_constants()
    cycles._weight_dma.cache_clear()  # memoised per chip, whose cost model is named, not its constants

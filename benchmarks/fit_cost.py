"""Fit the calibrated cost model (``tpu-mlir-1.30``, ``lgopt/group/calibrated.py``) on TPU-MLIR timelines
and report its error on held-out models next to the analytic model's.

    python benchmarks/fit_cost.py [--data ../shared/calibration] [--chips bm1684x,bm1688]
        [--holdout mobilenet_v3_small,resnet50,unet_small] [--out lgopt/group/calibration]
        [--report benchmarks/fit] [--no-eval] [--eval-limit N] [--batch-runs DIR|none]

``--data`` is a folder in the format of ``shared/calibration`` (``ops.csv.gz``, ``globals.csv``,
``groups.csv``, ``totals.csv``, ``model_ops.csv``, ``onnx/MODEL.weightless.onnx``, ``caches/``): run your
own compiler version through the same scripts and refit.  Writes ``<out>/<chip>.json`` (the constants and
where they came from) and, unless ``--no-eval``, ``<report>/ops.csv`` (held-out op slices and transfers),
``<report>/groups.csv``, ``<report>/groupings.csv`` (every grouping of the held-out models scored by lgopt's
reader with both models) and ``<report>/summary.md``.

The fit, per chip, on the models not held out:

* TIU: the compute rows of ``ops.csv`` mapped to lgopt ops (TPU-MLIR's op names -> ONNX outputs ->
  lgopt ops; casts TPU-MLIR inserts are charged to the op they feed), one row per op x slice; per
  category ``cycles = a + b * W`` (``W`` the analytic work of the slice's shape) by least squares
  weighted by 1/cycles (relative error), clamped to ``a >= issue, b >= 0``;
* GDMA: TPU-MLIR's transfer commands with their shapes (lgopt issues the same ones: an activation slice, a
  weight tensor), per kind (activation load, store, weight load) ``c + max(bytes / bw, k * runs +
  k_point * point_runs)``: runs are the contiguous GMEM pieces (batches x channels), point runs those of
  one element (grid search, mean relative error), then a cap on the runs of a one-element transfer where
  one fits better (``point_cap``);
* global layers: TPU-MLIR's global ops mapped to lgopt's non-local ops (plus the casts around them),
  per op type ``a + b * X``; layer-group op types run globally, ``a + s * max(compute, transfers)`` per type
  and, where both are seen, per bounding engine (``global_local``);
* the fewest rows a sliced transfer keeps the fitted rate at (``slice_rows``, ``fit_min_slice_rows``): the
  compiler space keeps new groups' slices at least that tall;
* a global Gemm's further rows (``global_rows``): the calibration's global Gemms have one row each; a batch-4
  round trip's opt2 timelines (``--batch-runs``, by default the one in ``benchmarks/roundtrip/cautions-b4``)
  show what each further row adds (about a tenth of the first: the weight streams once).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lgopt.errors import LgoptError  # noqa: E402
from lgopt.group.calibrated import (  # noqa: E402
    FUSED_PASS_RATE,
    MODEL_NAME,
    CalibratedModel,
    fused_rate,
    fused_work,
    global_work,
    load_constants,
    permute_runs,
    scale_key,
    tiu_category,
    work_term,
)
from lgopt.group.cost import AnalyticModel, SliceShape, global_layer_cost  # noqa: E402
from lgopt.hw.chip import get_chip  # noqa: E402
from lgopt.io.problem import load_model  # noqa: E402
from lgopt.io.tpumlir_cache import anchor, cast_operands, is_cast, tensor_aliases  # noqa: E402
from lgopt.io.tpumlir_lowering import merge_pointwise, named_ops  # noqa: E402
from lgopt.model import ops as opsem  # noqa: E402

DATA = ROOT.parent / "shared" / "calibration"
HOLDOUT = ("mobilenet_v3_small", "resnet50", "unet_small")
BATCH_RUNS = ROOT / "benchmarks" / "roundtrip" / "cautions-b4"  # TPU-MLIR's batch-4 opt2 timelines, scored
CAST_SUFFIX = re.compile(r"_(f16|f32|bf16|int8|uint8|int16|int32)$")
CAST_PIECE = re.compile(r"_(f16|f32|bf16)(_\d+)?$")  # a float cast, of a piece when numbered


# --- mapping TPU-MLIR ops to lgopt ops ----------------------------------------------------------------

class ModelMap:
    """TPU-MLIR op names of one model x chip -> lgopt ops (and casts -> the op they feed)."""

    def __init__(self, net, mops: pd.DataFrame):
        self.net = net
        by_out = {t: op for op in net.ops for t in op.outputs}
        self.by_weight = {w.name: op for op in net.ops for w in op.weights}
        self.op: dict[str, object] = {}
        aliases = self.aliases = tensor_aliases(net)
        anchored: dict[str, list[str]] = {}
        for r in mops.itertuples(index=False):
            hits = [by_out[t] for t in r.onnx_outputs.split("|") if t in by_out] \
                if isinstance(r.onnx_outputs, str) else []
            if hits:
                self.op[r.name] = hits[-1]
            elif not is_cast(r.name) and (name := anchor(r.name, aliases)) is not None:
                anchored.setdefault(name, []).append(r.name)
        # an op TPU-MLIR fused (a LayerNorm, a GELU) has no ONNX output of its own, and the pieces of an op it split
        # (a MatMul's column halves ``_0``/``_1``, their ``_add_``) have none each: named after the op's last
        # tensor, they are that op, and their cycles add up to its work
        for name, locs in anchored.items():
            for loc in locs:
                self.op[loc] = net.op(name)
        self.names = sorted(self.op, key=len, reverse=True)
        self._cache: dict[str, object] = {}

    def resolve(self, name: str):
        """The lgopt op of a TPU-MLIR op, or the op a cast is for (name = producer + consumer + _dtype[_piece]):
        the side that runs in f32, since the cast exists because of it.  A cast to f32 feeds an op computed in
        f32 (its consumer: BM1684X's GELU, ``<MatMul>/<GELU>_f32_1``); a cast back to f16 converts that op's
        result (its producer, ``<GELU>/<MatMul>_f16_1``), not the next MatMul's work."""
        if name in self.op:
            return self.op[name]
        if name in self._cache:
            return self._cache[name]
        hit = self._cast_owner(name)
        if hit is None:
            base = CAST_SUFFIX.sub("", name)
            hit = next((self.op[n] for n in self.names if base.endswith(n)), None)
        self._cache[name] = hit
        return hit

    def _cast_owner(self, name: str):
        m = CAST_PIECE.search(name)
        if m is None:
            return None
        operand = cast_operands(self.net, [name])
        if not operand or operand[0] in self.net.inputs:
            return None
        producer = self.net.producer.get(operand[0])
        if m.group(1) in ("f16", "bf16"):
            return producer
        body = name[:m.start()]
        cut = 0  # the consumer's name starts at the first "/" after the operand's tensor name
        while cut >= 0 and self.aliases.get(body[:cut]) is None:
            cut = body.find("_", cut + 1)
        start = body.find("/", cut) if cut > 0 else -1
        consumer = anchor(body[start:], self.aliases) if start > 0 else None
        return None if consumer is None else self.net.op(consumer)

    def weight_op(self, tensor: str):
        if tensor in self.by_weight:
            return self.by_weight[tensor]
        if tensor in self._cache:
            return self._cache[tensor]
        hit = next((self.op[n] for n in self.names if tensor.startswith(n)), None)
        self._cache[tensor] = hit
        return hit


def load_maps(data: Path, models, chips) -> tuple[dict, dict]:
    mops = pd.read_csv(data / "model_ops.csv")
    nets, maps = {}, {}
    for m in models:
        net = load_model(data / "onnx" / f"{m}.weightless.onnx", dtype="f16")
        # the 1x1 convolutions TPU-MLIR merges are one op on its timeline (the same on every chip)
        nets[m] = merge_pointwise(net, named_ops(net, mops[mops.model == m].name))[0]
        for c in chips:
            sub = mops[(mops.model == m) & (mops.chip == c)]
            if len(sub):
                maps[(m, c)] = ModelMap(nets[m], sub)
    return nets, maps


# --- data sets ----------------------------------------------------------------------------------------

def tiu_rows(ops: pd.DataFrame, maps: dict) -> pd.DataFrame:
    """One row per (scoring, group, lgopt op, slice): measured TIU cycles and the slice's shape."""
    c = ops[(ops.role == "compute") & (ops.engine == "TIU") & (ops.group_pos >= 0)]
    out = []
    for (m, chip), x in c.groupby(["model", "chip"]):
        mp = maps.get((m, chip))
        if mp is None:
            continue
        names = x.op_name.map(lambda n, mp=mp: getattr(mp.resolve(n), "name", None))
        x = x.assign(lg=names).dropna(subset=["lg"])
        direct = x.op_name.map(lambda n, mp=mp: n in mp.op)
        shp = x[direct][["variant", "group_pos", "lg", "slice_idx", "nslice", "cslice", "hslice", "wslice"]]
        cyc = x.groupby(["variant", "group_pos", "lg", "slice_idx"]).cycles.sum()
        shp = shp.drop_duplicates(["variant", "group_pos", "lg", "slice_idx"]).set_index(
            ["variant", "group_pos", "lg", "slice_idx"])
        j = shp.join(cyc, how="inner").reset_index()
        j["model"], j["chip"] = m, chip
        out.append(j)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


ELEMENTWISE = (opsem.Family.UNARY, opsem.Family.BINARY)  # a column piece computes its own elements


def tiu_features(df: pd.DataFrame, nets: dict, chips: dict) -> pd.DataFrame:
    """Add category, work term W, the analytic prediction; drop slices lgopt cannot express (C or W cut)."""
    cats, work, ana, keep, fused = [], [], [], [], []
    amodel = AnalyticModel()
    for r in df.itertuples(index=False):
        net = nets[r.model]
        op = net.op(r.lg)
        o = net.tensor(op.outputs[0])
        ok = op.local and op.type in opsem.OP_SPECS and int(r.cslice) == o.c and int(r.wslice) == o.w
        n, oh = int(r.nslice), int(r.hslice)
        ow: int | None = None
        rows_view = op.local and op.type in opsem.OP_SPECS and o.rows_on_lanes and o.n == 1
        if rows_view and int(r.hslice) == o.w and int(r.wslice) == 1:
            # TPU-MLIR's matmul-group view of a rows-on-lanes tensor: its rows over N x C (ConvNeXt's
            # 49 x 64 tokens) or C alone (ViT's 197), the last axis on H
            ok, n, oh = True, 1, int(r.nslice) * int(r.cslice)
        elif rows_view and opsem.OP_SPECS[op.type].family in ELEMENTWISE:
            # a column piece of an elementwise op between the MLP's column halves (BM1684X's GELU, in f32):
            # rows over N x C (x H when W holds the columns), the piece's columns on H (or W)
            cols = int(r.wslice) if int(r.wslice) > 1 else int(r.hslice)
            rows = int(r.nslice) * int(r.cslice) * (int(r.hslice) if int(r.wslice) > 1 else 1)
            if o.w % cols == 0 and rows <= o.h:
                ok, n, oh, ow = True, 1, rows, cols
        if ok:
            ih = o.h
            if op.inputs:
                i = net.tensor(op.inputs[0])
                lo, hi = opsem.backward_h(op, 0, (0, oh), i.h, o.h)
                ih = hi - lo
            sl = SliceShape(n, oh, ih, ow, ow)
            chip = chips[r.chip]
            cats.append(tiu_category(chip, net, op))
            work.append(work_term(chip, net, op, sl))
            ana.append(amodel.tiu_cycles(chip, net, op, sl))
            fused.append(fused_work(chip, net, op, sl))
        else:
            cats.append(("", ""))
            work.append(0)
            ana.append(0)
            fused.append(0)
        keep.append(ok)
    df = df.assign(cat=[c for c, _ in cats], fam=[f for _, f in cats], work=work, analytic=ana, fused=fused)
    return df[keep].reset_index(drop=True)


def gdma_units(ops: pd.DataFrame, maps: dict) -> pd.DataFrame:
    """TPU-MLIR's transfers in groups, one row per GDMA command with its shape: kind (activation load, store,
    weight load), bytes, contiguous GMEM runs (batches x channels of the slice moved; a weight's channels)
    and whether each run is one element (a bias, a 1 x 1 map).  lgopt issues the same transfers (a weight
    tensor each), so the fit is on the compiler's commands directly."""
    d = ops[(ops.engine == "GDMA") & ops.role.isin(["load", "store"]) & (ops.group_pos >= 0)].copy()
    d = d[d.model.map(lambda m: any(k[0] == m for k in maps))]
    weight = d.is_weight == 1
    shape = d.out_shape.astype(str).str.split("x")
    dims = shape.map(lambda s: [int(v) for v in s] if all(v.isdigit() for v in s) and len(s) >= 2 else None)
    d = d.assign(dims=dims).dropna(subset=["dims", "bytes", "cycles"])
    weight = d.is_weight == 1
    w_runs = d.dims.map(lambda s: s[0] * s[1])
    w_point = d.dims.map(lambda s: int(np.prod(s[2:])) == 1 if len(s) > 2 else True)
    runs = np.where(weight, w_runs, d.nslice * d.cslice)
    point = np.where(weight, w_point, d.hslice * d.wslice == 1)
    kind = np.where(d.role == "store", "store", np.where(weight, "weight", "load"))
    df = pd.DataFrame({"model": d.model, "chip": d.chip, "variant": d.variant, "kind": kind, "bytes": d.bytes,
                       "runs": runs, "point": point.astype(bool), "cycles": d.cycles})
    df = df.dropna()
    return df[(df.bytes > 0) & (df.cycles > 0) & (df.runs > 0)].reset_index(drop=True)


def global_rows(glob: pd.DataFrame, maps: dict, local: bool = False) -> pd.DataFrame:
    """Per scoring and non-local lgopt op (``local``: layer-group op types TPU-MLIR ran as global layers): the
    cycles of the TPU-MLIR global ops (and casts) it became.  The Casts of network inputs and outputs are left
    out: a plan pays them itself (``lgopt.group.cost.io_cast_cost``)."""
    out = []
    for (m, chip), x in glob.groupby(["model", "chip"]):
        mp = maps.get((m, chip))
        if mp is None:
            continue
        io = set(mp.net.inputs) | set(mp.net.outputs)  # their Casts are the plan's own global layers (io_cast_cost)
        x = x[~x.name.map(lambda n, mp=mp, io=io: is_cast(n) and bool(set(cast_operands(mp.net, [n])) & io))]
        lg = x.name.map(lambda n, mp=mp: getattr(mp.resolve(n), "name", None))
        x = x.assign(lg=lg).dropna(subset=["lg", "cycles"])
        x = x[x.lg.map(lambda n, mp=mp: mp.net.op(n).local == local and not permute_runs(mp.net, mp.net.op(n)))]
        agg = x.groupby(["variant", "lg"]).cycles.sum().reset_index()
        agg["model"], agg["chip"] = m, chip
        agg["type"] = agg.lg.map(lambda n, mp=mp: mp.net.op(n).type)
        agg["work"] = agg.lg.map(lambda n, mp=mp: global_work(mp.net, mp.net.op(n)))
        out.append(agg)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


# --- fits ---------------------------------------------------------------------------------------------

def wls(x: np.ndarray, y: np.ndarray, a_min: float, iters: int = 12) -> tuple[float, float]:
    """min sum |(a + b x - y) / y| (relative L1, by reweighted least squares) with a >= a_min, b >= 0."""
    y = np.maximum(y, 1.0)
    u = np.ones_like(y)
    a, b = a_min, 0.0
    for _ in range(iters):
        w = np.sqrt(u) / y
        A = np.c_[np.ones_like(x), x] * w[:, None]
        a, b = np.linalg.lstsq(A, y * w, rcond=None)[0]
        if b < 0:
            b = 0.0
            a = float(np.sum(y * w * w) / np.sum(w * w))
        if a < a_min:
            a = a_min
            xx = x * w
            b = max(0.0, float(np.dot(xx, (y - a) * w) / max(np.dot(xx, xx), 1e-12)))
        u = 1.0 / np.maximum(np.abs((a + b * x - y) / y), 0.01)
    return float(a), float(b)


PER_TYPE_FAMILIES = ("unary", "binary", "pool")  # one category per op type: an unseen type has no peer


def line_sizes(category: str) -> int:
    """Distinct slice sizes a category needs for a line ``a + b*W`` rather than a rate: 3, or 2 for a lane copy,
    whose cost is mostly its fixed part (BM1688's ShuffleNet shows its wrapping Slice at two sizes, 11,725 and
    13,048 cycles, the smaller one the slower: a rate through them is 30-50% off, their mean within 6%)."""
    return 2 if category.endswith(("_wrap", "_shift")) else 3


def fit_tiu(df: pd.DataFrame) -> tuple[int, dict]:
    """Per category a + b*W.  Types the data never shows keep the analytic work (b = 1): the conv family
    falls back to the fit over all its convs, an elementwise or pool type to its analytic ops per element."""
    d = df.drop_duplicates(["model", "lg", "nslice", "hslice", "cycles"])  # one point per distinct op slice
    # a conv's fused activations run as AR passes at an Add's rate (calibrated.fused_work): fitted first, they
    # are taken off the conv's cycles, so that its own line is the MAC array's
    adds = d[d.cat == FUSED_PASS_RATE]
    rate = wls(adds.work.to_numpy(float), adds.cycles.to_numpy(float), 0.0)[1] if adds.work.nunique() >= 3 else 1.0
    d = d.assign(cycles=np.maximum(d.cycles - np.ceil(rate * d.fused), 1.0))
    raw = {}
    for k, x in d.groupby("cat"):
        if x.work.nunique() >= line_sizes(k):
            raw[k] = x
    for k, x in d.groupby("fam"):
        if k not in raw and k not in PER_TYPE_FAMILIES and x.work.nunique() >= 3:
            raw[k] = x
    fits = {k: wls(x.work.to_numpy(float), x.cycles.to_numpy(float), 0.0) for k, x in raw.items()}
    issue = max(1, int(min(a for a, _ in fits.values()))) if fits else 1
    tiu = {}
    for k, x in raw.items():
        a, b = wls(x.work.to_numpy(float), x.cycles.to_numpy(float), float(issue))
        tiu[k] = {"a": math.ceil(a), "b": round(b, 6), "n": int(len(x))}
    # a type seen at one or two slice sizes only (ConvNeXt's GELU and LayerNorm run at the same shape in every
    # grouping): a pure rate over the issue cost, a line needing more sizes than that
    for k, x in d.groupby("cat"):
        if k not in tiu and k and (x.work > 0).all():
            b = float(np.median((x.cycles - issue).clip(lower=0) / x.work))
            tiu[k] = {"a": issue, "b": round(b, 6), "n": int(len(x)), "note": "a rate: fewer than 3 slice sizes"}
    for k in (*PER_TYPE_FAMILIES, "default"):
        tiu.setdefault(k, {"a": issue, "b": 1.0, "n": 0, "note": "not fitted: the analytic work"})
    return issue, tiu


BW_GRID = (8, 10, 12, 14, 15, 16, 16.5, 17, 18, 20, 22, 25, 28, 30, 32, 35, 38, 40, 41, 42, 44, 46, 48, 50, 52, 54,
           56, 60, 64)


POINT_CAPS = (256, 512, 1024, 2048)


def fit_gdma(df: pd.DataFrame) -> dict:
    """Per transfer kind ``c + max(bytes / bw, k * runs + k_point * point runs)``, minimising the mean relative
    error (capped at 100%, so that a few transfers TPU-MLIR lays out its own way do not decide) over the
    distinct transfers: a grid over bw, k and k_point, the intercept the median residual."""
    out = {}
    for kind, x in df.drop_duplicates(["model", "kind", "bytes", "runs", "point", "cycles"]).groupby("kind"):
        b, r, y = (x[c].to_numpy(float) for c in ("bytes", "runs", "cycles"))
        pt = x.point.to_numpy(bool) * r
        best = None
        for bw in BW_GRID:
            stream = b / bw
            for k in np.arange(0.0, 12.01, 0.25):
                for kp in np.arange(0.0, 30.01, 2.5):
                    base = np.maximum(stream, k * r + kp * pt)
                    c = max(0.0, float(np.median(y - base)))
                    err = float(np.mean(np.minimum(np.abs((c + base) / y - 1), 1.0)))  # capped: outliers
                    if best is None or err < best[0]:
                        best = (err, c, bw, k, kp)
        err, c, bw, k, kp = best
        # a transfer of single elements past a number of runs costs no more (BM1684X: a 2,048-channel bias or
        # pooled vector moves in the time of 1,024): with bw fixed, the cap that fits best, k and k_point refitted
        cap = None
        many = pt > 0
        for cp in POINT_CAPS:
            rr = np.where(many, np.minimum(r, cp), r)
            ptc = np.where(many, rr, 0.0)
            stream = b / bw
            for k2 in np.arange(0.0, 12.01, 0.25):
                for kp2 in np.arange(0.0, 30.01, 2.5):
                    base = np.maximum(stream, k2 * rr + kp2 * ptc)
                    c2 = max(0.0, float(np.median(y - base)))
                    e2 = float(np.mean(np.minimum(np.abs((c2 + base) / y - 1), 1.0)))
                    if e2 < err - 1e-4:
                        err, c, k, kp, cap = e2, c2, k2, kp2, cp
        out[str(kind)] = {"c": round(c, 2), "bw": bw, "k": round(float(k), 3), "k_point": round(float(kp), 3),
                          "n": int(len(x)), "mean_rel_err": round(err, 4)}
        if cap is not None:
            out[str(kind)]["point_cap"] = int(cap)
    return out


def fit_global(df: pd.DataFrame) -> dict:
    d = df.groupby(["model", "lg", "type", "work"]).cycles.median().reset_index()
    out = {}
    for t, x in d.groupby("type"):
        if len(x) < 3:
            continue
        a, b = wls(x.work.to_numpy(float), x.cycles.to_numpy(float), 0.0)
        if len(x.work.unique()) < 2:  # one size seen: a pure rate
            a, b = 0.0, float(np.median(x.cycles / np.maximum(x.work, 1)))
        out[t] = {"a": round(a, 3), "b": round(b, 8), "n": int(len(x))}
    # a type seen fewer than 3 times: one line over all global layers (held out, it beats the analytic
    # global compute, which is far too cheap for TPU-MLIR's global elementwise layers)
    a, b = wls(d.work.to_numpy(float), d.cycles.to_numpy(float), 0.0)
    out["default"] = {"a": round(a, 3), "b": round(b, 8), "n": int(len(d))}
    return out


GLOBAL_BW_MIN_BYTES = 1 << 18  # global ops moving at least this much show their streaming rate, not latency


def fit_global_bw(glob: pd.DataFrame) -> dict:
    """The rate TPU-MLIR's global kernels move data at: the median of bytes over GDMA-busy cycles of its global
    ops (every type, casts included) that move at least :data:`GLOBAL_BW_MIN_BYTES`.  About 25 bytes per cycle
    on BM1688 and 50 on BM1684X, where a group's transfers stream at 16.5 and 41-54: a global layer's weights
    and activations move in long runs over all channels."""
    x = glob.assign(nbytes=glob.gdma_bytes_s2l + glob.gdma_bytes_l2s)
    x = x[(x.nbytes >= GLOBAL_BW_MIN_BYTES) & (x.gdma_cycles > 0)]
    if x.empty:
        return {}
    return {"form": "a global layer's transfers: max(chip.gdma_latency_cycles, bytes / bw, bytes / chip bandwidth)",
            "bw": round(float(np.median(x.nbytes / x.gdma_cycles)), 3), "n": int(len(x))}


SLICE_RATE_MIN = 0.9  # an activation slice height streams "at the fitted rate" from this share of it on
SLICE_HEIGHT_MIN_N = 20  # ... judged on heights seen on at least this many sliced transfers


def fit_min_slice_rows(ops: pd.DataFrame, dma: dict) -> dict:
    """The fewest rows an activation slice may have for the fitted transfer rates to hold (``slice_rows``, read
    by the compiler space's ``short_slices`` caution): the smallest ``r`` such that the sliced activation loads
    and stores (H cut, at least 4 KiB) of the heights ``>= r`` seen on at least :data:`SLICE_HEIGHT_MIN_N`
    transfers stream at a median of at least :data:`SLICE_RATE_MIN` of their kind's fitted rate, but for odd
    heights above which most heights do (every height up to a slow one counted).  TPU-MLIR's
    timeline moves shorter slices at a quarter to three quarters of it, in steps that follow the slice's shape,
    which the fitted form (bytes, runs) does not see: 9 rows on BM1688, where 2-8 row slices stream at a
    median 0.47-0.74 of 16.5 bytes per cycle."""
    d = ops[(ops.engine == "GDMA") & ops.role.isin(["load", "store"]) & (ops.is_weight != 1)
            & (ops.group_pos >= 0)].dropna(subset=["hslice", "bytes", "cycles"])
    height = d.out_shape.astype(str).str.split("x").map(
        lambda v: int(v[2]) if len(v) == 4 and v[2].isdigit() else -1)
    d = d[(d.hslice < height) & (d.bytes >= 4096) & (d.cycles > 0)]
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


def fit_global_rows(runs: Path | None, glob: pd.DataFrame, chip: str) -> dict:
    """The share of a global Gemm's first row each further row costs (``global_rows``, read by
    :func:`lgopt.group.calibrated.global_work`): the median over the one-row global MatMuls of batch-1 opt2
    (``glob``) of ``(cycles at batch B / cycles at batch 1 - 1) / (B - 1)``, with the batch-B cycles from a
    round trip's opt2 scores (``roundtrip.py --batch B``: ``runs/scores/MODEL_CHIP_bB_opt2.json``).  The
    calibration has one-row Gemms only (classifier heads at batch 1); without such runs no share is written and
    every row costs a full one."""
    if runs is None or not (runs / "scores").is_dir():
        return {}
    one = glob[(glob.chip == chip) & (glob.variant == "opt2") & (glob.type == "tpu.MatMul")
               & glob.out_shape.astype(str).str.fullmatch(r"1x\d+")]
    base = {(r.model, r.name): float(r.cycles) for r in one.itertuples()}
    shares = []
    for f in sorted((runs / "scores").glob(f"*_{chip}_b*_opt2.json")):
        m = re.search(r"_b(\d+)_opt2\.json$", f.name)
        d = json.loads(f.read_text())
        if m is None or int(m.group(1)) < 2 or d.get("status") != "ok":
            continue
        model = f.name[:f.name.index(f"_{chip}_b")]
        for g in d.get("global_ops", []):
            b1 = base.get((model, g.get("name")))
            if b1 and g.get("cycles"):
                shares.append((float(g["cycles"]) / b1 - 1) / (int(m.group(1)) - 1))
    if not shares:
        return {}
    return {"form": "a global Gemm with a weight: a + b * K * N * (1 + share * (rows - 1))",
            "share": round(float(np.clip(np.median(shares), 0.0, 1.0)), 4), "n": len(shares),
            "source": str(runs.relative_to(ROOT) if runs.is_relative_to(ROOT) else runs)}


def _clear_constants() -> None:
    from lgopt.group import calibrated as _c
    _c._CONSTANTS.clear()
    _c._calibrated_tiu.cache_clear()
    _c._calibrated_gdma.cache_clear()
    _c._min_issue.cache_clear()


LINE_MIN_OPS = 20  # a global layer type's line (fixed cycles and a rate) needs this many ops; fewer, a scale alone
# (13 big convs gave a line of 41,684 cycles + 0.94x one fit and 0 + 1.17x the next, and a held-out model's
# choice between grouping its last convs and running them globally turned on which)


def fit_global_local(out: Path, chips: list[str], glob: pd.DataFrame, maps: dict, nets: dict) -> None:
    """Layer-group op types TPU-MLIR ran as global layers: per chip and type, the median of measured over the
    model's ``max(compute, transfers)`` (TPU-MLIR's global kernels tile and overlap their own way: SiLU about
    0.3-0.6 of it, Concat 1.1-1.6), written into the constants as ``global_local``; types seen on fewer than
    3 ops keep 1.  Uses the constants just written (the shipped location: the registered model reads them)."""
    if out.resolve() != (ROOT / "lgopt" / "group" / "calibration").resolve():
        print("global_local scales are fitted only into the shipped calibration folder (the registered model "
              "reads it); skipped", file=sys.stderr)
        return
    rows = global_rows(glob, maps, local=True)
    for c in chips:
        path = out / f"{c}.json"
        doc = json.loads(path.read_text())
        doc.pop("global_local", None)
        path.write_text(json.dumps(doc, indent=1) + "\n")
        _clear_constants()
        x = rows[rows.chip == c].copy()
        if x.empty:
            continue
        chip = get_chip(c, {"cost_model": MODEL_NAME})
        costs = [global_layer_cost(chip, nets[r.model], nets[r.model].op(r.lg)) for r in x.itertuples()]
        x["pred"] = [c["cycles"] for c in costs]
        x["bound"] = ["tiu" if c["tiu_cycles"] >= c["gdma_cycles"] else "gdma" for c in costs]
        # a view of GMEM (a merged Concat) costs 0 by rule, whatever casts TPU-MLIR puts beside it: no scale
        x = x[x.pred > 0]
        x["type"] = [scale_key(nets[r.model], nets[r.model].op(r.lg)) for r in x.itertuples()]
        per_op = x.groupby(["model", "lg", "type", "bound"]).agg(cycles=("cycles", "median"), pred=("pred", "median"))
        per_op = per_op.reset_index()

        def line(z: pd.DataFrame) -> dict:
            """``a + scale * max(compute, transfers)``, relative L1: a global layer's fixed cycles beside a rate
            (one scale alone, fitted on the many small layers, overcharged VGG's and UNet's big convs by 30 %)."""
            p, m = z.pred.to_numpy(float), z.cycles.to_numpy(float)
            ratio = {"scale": round(float(np.clip(np.median(m / np.maximum(p, 1)), 0.1, 10.0)), 4), "n": len(z)}
            if len(np.unique(p)) < 3 or len(z) < LINE_MIN_OPS:
                return ratio
            a, b = wls(p, m, 0.0)
            if not 0.25 <= b <= 4.0:  # a line that far from the model's own rate fits a few sizes, not a rule
                return ratio
            return {"scale": round(float(b), 4), "a": round(a, 1), "n": int(len(z))}

        scales = {}
        # per type, and per type and bounding engine where both are seen
        for t, y in per_op.groupby("type"):
            if len(y) >= 3:
                scales[t] = line(y)
                by = {b: z for b, z in y.groupby("bound") if len(z) >= 3}
                if len(by) == 2:
                    for b, z in by.items():
                        scales[f"{t}/{b}"] = line(z)
        doc["global_local"] = scales
        path.write_text(json.dumps(doc, indent=1) + "\n")
    _clear_constants()


def med_err(pred, meas) -> float | None:
    e = [abs(p / m - 1) for p, m in zip(pred, meas) if m and not pd.isna(p) and not pd.isna(m)]
    return statistics.median(e) if e else None


# --- evaluation through lgopt's reader ----------------------------------------------------------------

def score_all(data: Path, tot: pd.DataFrame, meas: pd.DataFrame, nets: dict, model_dir: Path | None
              ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every grouping in ``tot`` through lgopt's reader with the analytic and the calibrated model."""
    from calibration import run_one  # benchmarks/calibration.py

    from lgopt.group.cost import COST_MODELS, register_cost_model
    from lgopt.strategies.tpumlir import build_groups

    name = MODEL_NAME
    if model_dir is not None:  # constants just written elsewhere: a model of their own
        name = f"{MODEL_NAME}@{model_dir}"
        if name not in COST_MODELS:
            register_cost_model(CalibratedModel(name=name, directory=str(model_dir)))
    mg = {k: v for k, v in meas.groupby(["model", "chip", "variant"])}
    rows, grows = [], []
    for r in tot.itertuples(index=False):
        net, cache = nets[r.model], str(data / r.cache_file)
        rec = {"model": r.model, "chip": r.chip, "variant": r.variant, "kind": r.kind,
               "meas_cycles": r.total_cycles if r.status == "ok" else None}
        gpred: dict[str, dict[int, float]] = {}
        for label, chip in (("analytic", get_chip(r.chip)), ("calibrated", get_chip(r.chip, {"cost_model": name}))):
            st, why, pred, _ = run_one(net, chip, cache, exact=True)
            mode = "exact"
            if st == "infeasible":
                st, why, pred, _ = run_one(net, chip, cache, exact=False)
                mode = "relaxed"
            rec[f"{label}_status"], rec[f"{label}_mode"], rec[label] = st, mode, pred
            try:
                ex = build_groups(net, chip, cache, exact=True)
                rx = build_groups(net, chip, cache, exact=False)
            except LgoptError:
                continue
            gp = gpred.setdefault(label, {})
            for g, h in zip(ex.groups, rx.groups):
                use = g if g.plan is not None else (h if h.plan is not None else None)
                if use is not None:
                    gp[g.index] = (float(use.plan.cost["cycles"]), "exact" if use is g else "relaxed",
                                   ex.cmap.cache.groups[g.index].start)
        rows.append(rec)
        m = mg.get((r.model, r.chip, r.variant))
        if m is None or r.status != "ok":
            continue
        for x in m.itertuples(index=False):
            a = gpred.get("analytic", {}).get(int(x.group_pos))
            c = gpred.get("calibrated", {}).get(int(x.group_pos))
            if a is None or c is None or a[2] != int(x.func_start_idx) or pd.isna(x.cycles):
                continue
            grows.append({"model": r.model, "chip": r.chip, "variant": r.variant, "group_pos": int(x.group_pos),
                          "mode": a[1], "n_slices": x.n_slices, "meas_cycles": float(x.cycles),
                          "analytic": a[0], "calibrated": c[0]})
    return pd.DataFrame(rows), pd.DataFrame(grows)


# --- main ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--chips", default="bm1684x,bm1688")
    ap.add_argument("--holdout", default=",".join(HOLDOUT))
    ap.add_argument("--models", help="only these models (fit and held-out), comma-separated")
    ap.add_argument("--out", default=str(ROOT / "lgopt" / "group" / "calibration"))
    ap.add_argument("--report", default=str(ROOT / "benchmarks" / "fit"))
    ap.add_argument("--no-eval", action="store_true", help="fit and write the constants only")
    ap.add_argument("--eval-limit", type=int, help="score at most this many held-out groupings per chip")
    ap.add_argument("--batch-runs", default=str(BATCH_RUNS),
                    help="a batch > 1 round trip's output (roundtrip.py --batch 4): its opt2 scores give the cost "
                         "of a global Gemm's further rows; 'none' to skip")
    a = ap.parse_args(argv)
    batch_runs = None if a.batch_runs == "none" else Path(a.batch_runs)
    data, out, rep = Path(a.data), Path(a.out), Path(a.report)
    if not (data / "ops.csv.gz").exists():
        print(f"no calibration data at {data}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    chips = a.chips.split(",")
    hold = [h for h in a.holdout.split(",") if h]
    tot = pd.read_csv(data / "totals.csv")
    tot = tot[tot.chip.isin(chips)]
    models = sorted(tot.model.unique()) if not a.models else a.models.split(",")
    tot = tot[tot.model.isin(models)]
    train = [m for m in models if m not in hold]
    ops = pd.read_csv(data / "ops.csv.gz")
    ops = ops[ops.model.isin(models) & ops.chip.isin(chips)]
    glob = pd.read_csv(data / "globals.csv")
    glob = glob[glob.model.isin(models) & glob.chip.isin(chips)]
    nets, maps = load_maps(data, models, chips)
    chip_objs = {c: get_chip(c) for c in chips}
    tiu = tiu_features(tiu_rows(ops, maps), nets, chip_objs)
    gd = gdma_units(ops, maps)
    gl = global_rows(glob, maps)
    print(f"data: {len(tiu)} TIU op slices, {len(gd)} transfers, {len(gl)} global layers "
          f"({time.perf_counter() - t0:.0f} s); fit on {', '.join(train)}; held out {', '.join(hold)}")
    version = str(tot.tpu_mlir.dropna().iloc[0]) if "tpu_mlir" in tot and len(tot.tpu_mlir.dropna()) else "?"
    out.mkdir(parents=True, exist_ok=True)
    for c in chips:
        tr = tiu[(tiu.chip == c) & tiu.model.isin(train)]
        issue, tc = fit_tiu(tr)
        dma = fit_gdma(gd[(gd.chip == c) & gd.model.isin(train)])
        gc = fit_global(gl[(gl.chip == c) & gl.model.isin(train)]) if len(gl) else {}
        doc = {"model": MODEL_NAME, "chip": c, "issue_cycles": issue, "tiu": tc,
               "gdma": {"form": "max(chip.gdma_latency_cycles, c + max(bytes / bw, k * runs + k_point * "
                                "point_runs), bytes / chip bandwidth) per kind (load, store, weight)", **dma},
               "global": gc, "global_gdma": fit_global_bw(glob[(glob.chip == c) & glob.model.isin(train)]),
               **({"global_rows": rows} if (rows := fit_global_rows(batch_runs, glob, c)) else {}),
               **({"slice_rows": sr} if (sr := fit_min_slice_rows(ops[(ops.chip == c) & ops.model.isin(train)],
                                                                  dma)) else {}),
               "source": {"compiler": f"TPU-MLIR {version}", "data": str(data),
                          "timeline": "codegen simulated command timeline (compiler_profile_0.txt)",
                          "fitted_on": train, "held_out": hold,
                          "date": _dt.date.today().isoformat(), "script": "benchmarks/fit_cost.py",
                          "n_tiu_slices": int(len(tr)),
                          "n_transfers": int(((gd.chip == c) & gd.model.isin(train)).sum())}}
        (out / f"{c}.json").write_text(json.dumps(doc, indent=1) + "\n")
    fit_global_local(out, chips, glob[glob.model.isin(train)], maps, nets)
    if a.no_eval:
        print(f"wrote {', '.join(str(out / (c + '.json')) for c in chips)}")
        return 0
    # --- held-out error --------------------------------------------------------------------------------
    model_dir = None if out.resolve() == (ROOT / "lgopt" / "group" / "calibration").resolve() else out
    cal = CalibratedModel(directory=str(model_dir) if model_dir else None)
    if model_dir is None:
        _clear_constants()
    ho_t = tiu[tiu.model.isin(hold)].copy()
    def cal_tiu(r) -> int:
        c = load_constants(r.chip, model_dir)
        a_, b_ = c.tiu.get(r.cat) or c.tiu.get(r.fam) or c.tiu["default"]
        return a_ + math.ceil(b_ * r.work) + math.ceil(fused_rate(c) * r.fused)

    ho_t["calibrated"] = [cal_tiu(r) for r in ho_t.itertuples()]
    ho_g = gd[gd.model.isin(hold)].copy()
    amodel = AnalyticModel()
    ho_g["analytic"] = [amodel.gdma_cycles(chip_objs[r.chip], int(r.bytes)) for r in ho_g.itertuples()]
    ho_g["calibrated"] = [cal.gdma_cycles(chip_objs[r.chip], int(r.bytes), int(r.runs), r.kind, bool(r.point))
                          for r in ho_g.itertuples()]
    ho_gl = gl[gl.model.isin(hold)].copy() if len(gl) else pd.DataFrame()
    if len(ho_gl):  # the layer's whole cost (compute and transfers), as a plan is charged it
        for col, chip_of in (("analytic", lambda c: chip_objs[c]),
                             ("calibrated", lambda c: get_chip(c, {"cost_model": MODEL_NAME}))):
            ho_gl[col] = [global_layer_cost(chip_of(r.chip), nets[r.model], nets[r.model].op(r.lg))["cycles"]
                          for r in ho_gl.itertuples()]
    # layer-group op types run as global layers: their whole cost (compute and transfers) per model
    ho_loc = global_rows(glob[glob.model.isin(hold)], maps, local=True)
    if len(ho_loc):
        for col, chip_of in (("analytic", lambda c: chip_objs[c]),
                             ("calibrated", lambda c: get_chip(c, {"cost_model": MODEL_NAME}))):
            ho_loc[col] = [global_layer_cost(chip_of(r.chip), nets[r.model], nets[r.model].op(r.lg))["cycles"]
                           for r in ho_loc.itertuples()]
    rep.mkdir(parents=True, exist_ok=True)
    pd.concat([ho_t.assign(what="tiu"), ho_g.assign(what="gdma")], ignore_index=True).to_csv(rep / "ops.csv",
                                                                                              index=False)
    ht = tot[tot.model.isin(hold)]
    if a.eval_limit:
        ht = ht.groupby("chip").head(a.eval_limit)
    groupings, groups = score_all(data, ht, pd.read_csv(data / "groups.csv"), nets, model_dir)
    groupings.to_csv(rep / "groupings.csv", index=False)
    groups.to_csv(rep / "groups.csv", index=False)
    lines = summary(chips, hold, train, ho_t, ho_g, ho_gl, ho_loc, groups, groupings)
    (rep / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


def _fmt(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def summary(chips, hold, train, ho_t, ho_g, ho_gl, ho_loc, groups, groupings) -> list[str]:
    lines = [f"Held-out models: {', '.join(hold)} (fitted on {', '.join(train)}).", "",
             "median |pred/meas - 1| (n)", "",
             "| chip | what | n | analytic | calibrated |", "|---|---|---:|---:|---:|"]

    def row(c, what, df, pcol="analytic", qcol="calibrated", mcol="cycles"):
        if df is None or not len(df):
            lines.append(f"| {c} | {what} | 0 | - | - |")
            return
        lines.append(f"| {c} | {what} | {len(df)} | {_fmt(med_err(df[pcol], df[mcol]))} | "
                     f"{_fmt(med_err(df[qcol], df[mcol]))} |")

    for c in chips:
        row(c, "op slice TIU", ho_t[ho_t.chip == c])
        row(c, "transfer GDMA", ho_g[ho_g.chip == c])
        if len(ho_gl):
            row(c, "global layer (non-local op)", ho_gl[ho_gl.chip == c])
        if len(ho_loc):
            row(c, "global layer (layer-group op type)", ho_loc[ho_loc.chip == c])
        g = groups[groups.chip == c] if len(groups) else groups
        row(c, "group (exact build)", g[g["mode"] == "exact"] if len(g) else g, mcol="meas_cycles")
        row(c, "group (exact + relaxed)", g, mcol="meas_cycles")
        t = groupings[(groupings.chip == c) & groupings.meas_cycles.notna()] if len(groupings) else groupings
        if len(t):
            t = t[t.analytic.notna() & t.calibrated.notna()]
        row(c, "model total (exact or relaxed)", t, mcol="meas_cycles")
    lines += ["", "per held-out model (model total, median |pred/meas-1|; median pred/meas):", "",
              "| chip | model | groupings | analytic | calibrated | analytic ratio | calibrated ratio |",
              "|---|---|---:|---:|---:|---:|---:|"]
    if len(groupings):
        t = groupings[groupings.meas_cycles.notna() & groupings.analytic.notna() & groupings.calibrated.notna()]
        for (c, m), x in t.groupby(["chip", "model"]):
            lines.append(f"| {c} | {m} | {len(x)} | {_fmt(med_err(x.analytic, x.meas_cycles))} | "
                         f"{_fmt(med_err(x.calibrated, x.meas_cycles))} | "
                         f"{statistics.median(x.analytic / x.meas_cycles):.2f} | "
                         f"{statistics.median(x.calibrated / x.meas_cycles):.2f} |")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())

"""TPU-MLIR's measured timelines (the calibration format) put in lgopt's terms, for fitting its cost model.

A folder in the format of ``shared/calibration`` (its ``README.md``: ``totals.csv``, ``groups.csv``,
``globals.csv``, ``ops.csv.gz``, ``model_ops.csv``, ``onnx/MODEL.weightless.onnx``, ``caches/``) holds what
TPU-MLIR's codegen timeline shows for many groupings of many models.  The fit (:mod:`lgopt.cost.fit`) needs it
as lgopt sees the same work: TPU-MLIR's op names mapped onto lgopt's ops (:mod:`.opmap`), its slice shapes onto
lgopt's :class:`~lgopt.cost.model.SliceShape`, its transfer commands as the transfers lgopt issues.  That
translation is here, so that the numerical fit knows nothing of TPU-MLIR and another compiler's measurements
need only a reader of their own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from lgopt.cost.analytic import AnalyticModel
from lgopt.cost.fit import ChipTables
from lgopt.cost.fitted import fused_work, global_work, pass_term, permute_runs, tiu_category, weight_runs, work_term
from lgopt.cost.model import SliceShape
from lgopt.errors import LgoptError
from lgopt.hw.chip import Chip, get_chip
from lgopt.model import ops as opsem
from lgopt.model.network import Network, Op
from lgopt.tpumlir.opmap import MappedModels, OpMap, map_models

COLUMNS = {  # what the fit and its evaluation read of each file (shared/calibration/README.md has them all)
    "totals.csv": ("model", "chip", "variant", "kind", "status", "total_cycles", "cache_file"),
    "groups.csv": ("model", "chip", "variant", "group_pos", "func_start_idx", "n_slices", "cycles"),
    "globals.csv": ("model", "chip", "variant", "name", "type", "out_shape", "cycles", "gdma_cycles",
                    "gdma_bytes_s2l", "gdma_bytes_l2s"),
    "ops.csv.gz": ("model", "chip", "variant", "group_pos", "op_name", "role", "is_weight", "engine", "slice_idx",
                   "cycles", "bytes", "out_shape", "nslice", "cslice", "hslice", "wslice"),
    "model_ops.csv": ("model", "chip", "name", "onnx_outputs"),
}
FILES = tuple(COLUMNS)
ELEMENTWISE = (opsem.Family.UNARY, opsem.Family.BINARY)  # a column piece computes its own elements
TIU_KEY = ["variant", "group_pos", "lg", "slice_idx"]
TIU_COLUMNS = [*TIU_KEY, "nslice", "cslice", "hslice", "wslice", "cycles", "model", "chip"]
TRANSFER_COLUMNS = ["model", "chip", "variant", "kind", "bytes", "runs", "point", "cycles"]
GLOBAL_COLUMNS = ["variant", "lg", "cycles", "model", "chip", "type", "work", "weight_runs"]


@dataclass(frozen=True)
class Measurements:
    """One folder of measurements, restricted to the chips and models asked for.  ``totals``: one row per
    scoring (grouping x chip); ``ops``: op x slice x engine rows of their timelines; ``glob``: the ops run
    outside any group; ``model_ops``: TPU-MLIR's op names of each model (every chip's: the lowering lgopt
    mirrors is the same on all)."""

    path: Path
    chips: tuple[str, ...]
    models: tuple[str, ...]
    totals: pd.DataFrame
    ops: pd.DataFrame
    glob: pd.DataFrame
    model_ops: pd.DataFrame

    @property
    def dtype(self) -> str:
        """What the measured deployment computes in: ``quantize`` in ``totals.csv`` (F16 where it has none, as
        the shared calibration)."""
        q = [str(v) for v in self.totals["quantize"].dropna().unique()] if "quantize" in self.totals else []
        if len(q) > 1:
            raise LgoptError(f"{self.path}: totals.csv mixes deployments ({', '.join(q)}): fit one at a time")
        return q[0].lower() if q else "f16"

    @property
    def compiler(self) -> str:
        """The compiler and version that made the measurements (``tpu_mlir`` in ``totals.csv``)."""
        v = self.totals.tpu_mlir.dropna() if "tpu_mlir" in self.totals else pd.Series(dtype=object)
        return f"TPU-MLIR {v.iloc[0] if len(v) else '?'}"


def read_measurements(path: Path, chips: Sequence[str] = (), models: Sequence[str] = ()) -> Measurements:
    """Read ``path`` for ``chips`` and ``models`` (empty: every one measured).  A folder that is not in the
    format, or a chip or model it has no measurements of, is bad input (:class:`LgoptError`, one line)."""
    missing = [f for f in FILES if not (path / f).is_file()]
    if not path.is_dir() or missing:
        raise LgoptError(f"{path}: not a folder of measurements in the calibration format (missing "
                         f"{', '.join(missing) if path.is_dir() else 'the folder itself'})")
    for name, want in COLUMNS.items():
        have = set(pd.read_csv(path / name, nrows=0).columns)
        if not set(want) <= have:
            raise LgoptError(f"{path / name}: no column {', '.join(c for c in want if c not in have)} "
                             "(the calibration format: shared/calibration/README.md)")
    tot = pd.read_csv(path / "totals.csv")
    if "cores" in tot and (tot.cores > 1).any():
        raise LgoptError(f"{path}: measured on {int(tot.cores.max())} cores, where a timeline is one core's part of "
                         "the compile (benchmarks/timelines.py reads core 0 for the floors); fit one-core measurements")
    chips = _pick("chip", chips, tot.chip, path)
    for c in chips:
        get_chip(c)  # a chip lgopt has no preset of cannot be priced
    tot = tot[tot.chip.isin(chips)]
    models = _pick("model", models, tot.model, path)
    absent = [m for m in models if not (path / "onnx" / f"{m}.weightless.onnx").is_file()]
    if absent:
        raise LgoptError(f"{path}: no onnx/MODEL.weightless.onnx for {', '.join(absent)}")
    ops = pd.read_csv(path / "ops.csv.gz")
    glob = pd.read_csv(path / "globals.csv")
    mops = pd.read_csv(path / "model_ops.csv")
    return Measurements(path, chips, models, tot[tot.model.isin(models)],
                        ops[ops.model.isin(models) & ops.chip.isin(chips)],
                        glob[glob.model.isin(models) & glob.chip.isin(chips)], mops[mops.model.isin(models)])


def _pick(what: str, wanted: Sequence[str], have: pd.Series, path: Path) -> tuple[str, ...]:
    """``wanted`` (all of ``have`` when empty), each checked to be measured."""
    known = sorted(str(v) for v in have.dropna().unique())
    if not wanted:
        if not known:
            raise LgoptError(f"{path}: totals.csv has no scorings")
        return tuple(known)
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise LgoptError(f"{path}: no measurements of {what} {', '.join(unknown)} (measured: {', '.join(known)})")
    return tuple(dict.fromkeys(wanted))


@dataclass(frozen=True)
class FitTables:
    """Every chip's and model's measurements in lgopt's terms (the held-out models' too: their error is
    measured on the same tables the fit reads for the others).  Columns in :mod:`lgopt.cost.fit`."""

    mapped: MappedModels
    tiu: pd.DataFrame
    transfers: pd.DataFrame
    global_layers: pd.DataFrame


def fit_tables(meas: Measurements) -> FitTables:
    """Map every measured op slice, transfer and global layer onto lgopt's ops."""
    mapped = map_models(meas.path, meas.model_ops, meas.models, meas.chips, meas.dtype)
    chips = {c: get_chip(c) for c in meas.chips}
    tiu = tiu_features(tiu_rows(meas.ops, mapped.maps), mapped.nets, chips)
    return FitTables(mapped, tiu, transfers(meas.ops, mapped.maps), global_rows(meas.glob, mapped.maps))


def chip_tables(meas: Measurements, tables: FitTables, chip: str, train: Sequence[str],
                batch_runs: Path | None = None) -> ChipTables:
    """What the fit of ``chip`` reads: the rows of the models in ``train`` only (a global Gemm's further rows
    too: measured at batch B in ``batch_runs``, recorded as given)."""
    def of(df: pd.DataFrame) -> pd.DataFrame:
        return df[(df.chip == chip) & df.model.isin(train)]

    glob = of(meas.glob)
    traffic = pd.DataFrame({"nbytes": glob.gdma_bytes_s2l + glob.gdma_bytes_l2s, "cycles": glob.gdma_cycles})
    return ChipTables(of(tables.tiu), of(tables.transfers), of(tables.global_layers), traffic,
                      sliced_transfers(of(meas.ops)), gemm_row_shares(batch_runs, glob, chip),
                      str(batch_runs or ""))


def _frame(parts: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


# --- TIU: op slices -------------------------------------------------------------------------------------

def tiu_rows(ops: pd.DataFrame, maps: dict[tuple[str, str], OpMap]) -> pd.DataFrame:
    """One row per (scoring, group, lgopt op, slice): measured TIU cycles (of every TPU-MLIR op it became: the
    pieces of a split op and the casts it owns add up) and the slice's shape (of the op named after it)."""
    c = ops[(ops.role == "compute") & (ops.engine == "TIU") & (ops.group_pos >= 0)]
    out = []
    for (m, chip), x in c.groupby(["model", "chip"]):
        mp = maps.get((str(m), str(chip)))
        if mp is None:
            continue
        x = x.assign(lg=x.op_name.map(mp.resolved_name)).dropna(subset=["lg"])
        direct = x.op_name.map(lambda n, mp=mp: n in mp.op)
        shp = x[direct][[*TIU_KEY, "nslice", "cslice", "hslice", "wslice"]]
        cyc = x.groupby(TIU_KEY).cycles.sum()
        shp = shp.drop_duplicates(TIU_KEY).set_index(TIU_KEY)
        j = shp.join(cyc, how="inner").reset_index()
        j["model"], j["chip"] = m, chip
        out.append(j)
    return _frame(out, TIU_COLUMNS)


def lgopt_slice(net: Network, op: Op, n: int, c: int, h: int, w: int) -> SliceShape | None:
    """The slice lgopt runs for TPU-MLIR's slice of ``op``'s output (``n, c, h, w`` its sizes), or None where
    lgopt cannot express it (C or W cut).  Two of TPU-MLIR's layouts are lgopt's rows-on-lanes tensors seen
    otherwise: a matmul group's view (rows over N x C, ConvNeXt's 49 x 64 tokens or ViT's 197, the last axis
    on H), and a column piece of an elementwise op between an MLP's column halves (BM1684X's GELU, in f32:
    rows over N x C, x H when W holds the columns, the piece's columns on H or W)."""
    if not (op.local and op.type in opsem.OP_SPECS):
        return None
    o = net.tensor(op.outputs[0])
    ok, ow = c == o.c and w == o.w, None
    rows_view = o.rows_on_lanes and o.n == 1
    if rows_view and h == o.w and w == 1:
        ok, n, h = True, 1, n * c
    elif rows_view and opsem.OP_SPECS[op.type].family in ELEMENTWISE:
        cols = w if w > 1 else h
        rows = n * c * (h if w > 1 else 1)
        if o.w % cols == 0 and rows <= o.h:
            ok, n, h, ow = True, 1, rows, cols
    if not ok:
        return None
    ih = o.h
    if op.inputs:
        i = net.tensor(op.inputs[0])
        lo, hi = opsem.backward_h(op, 0, (0, h), i.h, o.h)
        ih = hi - lo
    return SliceShape(n, h, ih, ow, ow)


def tiu_features(rows: pd.DataFrame, nets: dict[str, Network], chips: dict[str, Chip]) -> pd.DataFrame:
    """:func:`tiu_rows` with what the fit reads of each slice: category and family
    (:func:`~lgopt.cost.fitted.tiu_category`), work term ``W``, fused passes, the unit of an integer conv's
    passes (:func:`~lgopt.cost.fitted.pass_term`) and the analytic prediction (for the held-out comparison);
    slices lgopt cannot express (:func:`lgopt_slice`) dropped."""
    amodel = AnalyticModel()
    feats: list[tuple[str, str, int, int, int, int]] = []
    keep = []
    for r in rows.itertuples(index=False):
        net = nets[r.model]
        op = net.op(r.lg)
        sl = lgopt_slice(net, op, int(r.nslice), int(r.cslice), int(r.hslice), int(r.wslice))
        keep.append(sl is not None)
        if sl is None:
            feats.append(("", "", 0, 0, 0, 0))
            continue
        chip = chips[r.chip]
        cat, fam = tiu_category(chip, net, op)
        feats.append((cat, fam, work_term(chip, net, op, sl), amodel.tiu_cycles(chip, net, op, sl),
                      fused_work(chip, net, op, sl), pass_term(chip, net, op, sl)))
    cols: list[list[Any]] = [list(c) for c in zip(*feats)] if feats else [[] for _ in range(6)]
    df = rows.assign(cat=cols[0], fam=cols[1], work=cols[2], analytic=cols[3], fused=cols[4], passes=cols[5])
    return df[np.array(keep, dtype=bool)].reset_index(drop=True)


# --- GDMA: transfers ------------------------------------------------------------------------------------

def transfers(ops: pd.DataFrame, maps: dict[tuple[str, str], OpMap]) -> pd.DataFrame:
    """TPU-MLIR's transfers in groups, one row per GDMA command with its shape: kind (activation load, store,
    weight load), bytes, contiguous GMEM runs (batches x channels of the slice moved; a weight's channels)
    and whether each run is one element (a bias, a 1 x 1 map).  lgopt issues the same transfers (a weight
    tensor each), so the fit is on the compiler's commands directly."""
    mapped = {m for m, _ in maps}
    d = ops[(ops.engine == "GDMA") & ops.role.isin(["load", "store"]) & (ops.group_pos >= 0)
            & ops.model.isin(mapped)]
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
                       "runs": runs, "point": point.astype(bool), "cycles": d.cycles}, columns=TRANSFER_COLUMNS)
    df = df.dropna()
    return df[(df.bytes > 0) & (df.cycles > 0) & (df.runs > 0)].reset_index(drop=True)


def sliced_transfers(ops: pd.DataFrame) -> pd.DataFrame:
    """The activation loads and stores in groups whose slice is cut along H (fewer rows than the tensor):
    ``role``, ``hslice``, ``bytes``, ``cycles``, for :func:`lgopt.cost.fit.fit_slice_rows`."""
    d = ops[(ops.engine == "GDMA") & ops.role.isin(["load", "store"]) & (ops.is_weight != 1)
            & (ops.group_pos >= 0)].dropna(subset=["hslice", "bytes", "cycles"])
    height = d.out_shape.astype(str).str.split("x").map(
        lambda v: int(v[2]) if len(v) == 4 and v[2].isdigit() else -1)
    return d[d.hslice < height][["role", "hslice", "bytes", "cycles"]]


def fit_min_slice_rows(ops: pd.DataFrame, dma: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``slice_rows`` of ``ops`` (rows of ``ops.csv.gz``) at the fitted transfer rates ``dma``
    (:func:`lgopt.cost.fit.fit_slice_rows`)."""
    from lgopt.cost.fit import fit_slice_rows

    return fit_slice_rows(sliced_transfers(ops), dma)


# --- global layers --------------------------------------------------------------------------------------

def global_rows(glob: pd.DataFrame, maps: dict[tuple[str, str], OpMap], local: bool = False) -> pd.DataFrame:
    """Per scoring and non-local lgopt op (``local``: layer-group op types TPU-MLIR ran as global layers): the
    cycles of the TPU-MLIR global ops (and casts) it became, its type and global work.  The Casts of network
    inputs and outputs are left out (:meth:`OpMap.io_cast`), and so are Transposes priced per run
    (:func:`~lgopt.cost.fitted.permute_runs`): their cost is the transfers', not a line's."""
    out = []
    for (m, chip), x in glob.groupby(["model", "chip"]):
        mp = maps.get((str(m), str(chip)))
        if mp is None:
            continue
        net = mp.net
        x = x[~x["name"].map(mp.io_cast)]
        x = x.assign(lg=x["name"].map(mp.resolved_name)).dropna(subset=["lg", "cycles"])
        x = x[x.lg.map(lambda n, net=net: net.op(n).local == local and not permute_runs(net, net.op(n)))]
        agg = x.groupby(["variant", "lg"]).cycles.sum().reset_index()
        agg["model"], agg["chip"] = m, chip
        agg["type"] = agg.lg.map(lambda n, net=net: net.op(n).type)
        agg["work"] = agg.lg.map(lambda n, net=net: global_work(net, net.op(n)))
        agg["weight_runs"] = agg.lg.map(lambda n, net=net: weight_runs(net, net.op(n)))
        out.append(agg)
    return _frame(out, GLOBAL_COLUMNS)


def gemm_row_shares(runs: Path | None, glob: pd.DataFrame, chip: str) -> tuple[float, ...]:
    """What each further row of a one-row global MatMul of ``glob``'s batch-1 opt2 groupings costs, as a share
    of its first: ``(cycles at batch B / cycles at batch 1 - 1) / (B - 1)`` with the batch-B cycles from a round
    trip's opt2 scores (``benchmarks/roundtrip.py --batch B``: ``runs/scores/MODEL_CHIP_bB_opt2.json``, its
    ``global_ops``).  Batch-1 measurements have one-row Gemms only (classifier heads), so this is where the
    cost of the others is seen (:func:`lgopt.cost.fit.fit_global_rows`)."""
    if runs is None or not (runs / "scores").is_dir():
        return ()
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
    return tuple(shares)

"""Analytic cost model: TIU cycles from work and lane parallelism, GDMA cycles from bytes.

Formulas and the source of each constant are in ``docs/cost-model.md``.  In
short:

* an op's TIU cycles are the work one lane does (its share of output channels,
  H*W rounded up to whole EU vectors, input channels rounded up to the IC
  parallelism) divided by what one lane does per cycle (``macs_per_lane`` for
  the MAC array, ``eu_elems`` for the vector unit), plus a fixed issue cost;
* a transfer's GDMA cycles are ``latency + bytes / (bandwidth / TIU clock)``
  with GMEM-side (compact) bytes.  A transfer also states its shape: its
  *segments*, the contiguous GMEM runs it is made of (one per batch and channel
  of an activation, one per output channel of a filter or element of a
  per-channel vector), whether each run is a single element (a bias, a 1 x 1
  map), and its kind (activation load, store, weight load).  The analytic model
  ignores the shape; the model fitted on TPU-MLIR charges it (each run costs the
  DMA engine cycles of its own: :mod:`lgopt.group.calibrated`);
* a timestep row costs ``max(TIU, GDMA)``; a group runs its table once per
  slice with the software pipeline's fill and drain, every slice at its own
  size; resident weights load once before the loop;
* a global layer costs ``max(compute, load + store of all its operands)``.

The same functions give the network's lower bound: all compute at full size
with no halo, or every byte that must cross GMEM once, whichever is larger.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal, Protocol, Sequence, cast

from lgopt.errors import LgoptError
from lgopt.hw.chip import Chip
from lgopt.hw.layout import align_up, cdiv, channels_per_lane
from lgopt.hw.sizing import column_shape, is_depthwise
from lgopt.model import ops as opsem
from lgopt.model.dtype import dtype_bytes
from lgopt.model.network import Network, Op
from lgopt.model.plan import GroupCost, GroupPlan, Plan, Stage

DmaKind = Literal["load", "store", "weight"]  # activation load, activation store, weight load
Bound = Literal["tiu", "gdma"]  # the engine a global layer's time is bound by


@dataclass(frozen=True)
class SliceShape:
    """The part of an op one slice computes: batches and rows of its output and of input 0, their columns
    when W is sliced and their channels when channels are (``None``: the whole width, every channel)."""

    n: int
    out_h: int
    in_h: int
    out_w: int | None = None
    in_w: int | None = None
    out_c: int | None = None
    in_c: int | None = None


class CostModel(Protocol):
    """The primitives every cycle count in lgopt is built from; a chip names its model (``Chip.cost_model``).

    Everything else (a group's pipeline cells, a plan's totals, every lower bound the CP-SAT optimiser
    proves optimality with) is assembled from these, so a model that keeps this contract keeps the proofs:

    * ``tiu_cycles`` of the slices of an op add up to at least the op's unsliced cycles plus
      ``issue_cycles`` for every slice after the first (slicing never saves compute; each slice issues again);
    * ``gdma_cycles`` is non-decreasing in bytes and in segments (for one kind and run class), at least
      ``chip.gdma_latency_cycles`` for any transfer, and subadditive (one transfer never costs more than two
      that move the same bytes in the same segments);
    * ``global_compute`` is the compute of an op run as a global layer (its transfers are added outside);
    * ``free_views``: whether a global layer that is a view of GMEM (:func:`gmem_view`) costs nothing (no
      compute, no transfer), as on TPU-MLIR's timeline; its ``global_compute`` is then 0 too, so the lower
      bound stays below every plan;
    * ``rebalance_loads``: whether a one-slice group's weight loads move to earlier rows with spare GDMA time
      the way TPU-MLIR's timestep pass moves them (:func:`rebalance_weight_loads`); a row still costs the
      larger of its TIU and GDMA cycles, so the bounds hold.
    * ``pipelined_preloads``: whether a sliced group's resident weights load in the first slice's pass, each
      in the row before its op's (beside the previous op's compute, as TPU-MLIR's timeline shows), rather
      than all before the loop; each cell still costs the larger of its TIU and GDMA cycles.
    * ``f32_io``: whether the deployment keeps the graph's inputs and outputs f32 (TPU-MLIR's F16 flow): each
      is converted by a global Cast (:func:`io_cast_cost`) unless the group next to it converts it itself
      (``GroupPlan.f32_in`` / ``f32_out``, its load or store charged at f32); the lower bound counts them at
      f32, which they cross GMEM as either way.

    :class:`AnalyticModel` is lgopt's documented analytic model (``docs/cost-model.md``).
    """

    @property
    def name(self) -> str: ...

    @property
    def issue_cycles(self) -> int: ...

    @property
    def free_views(self) -> bool: ...

    @property
    def rebalance_loads(self) -> bool: ...

    @property
    def pipelined_preloads(self) -> bool: ...

    @property
    def f32_io(self) -> bool: ...

    def tiu_cycles(self, chip: Chip, net: Network, op: Op, sl: SliceShape) -> int: ...

    def gdma_cycles(self, chip: Chip, nbytes: int, segments: int = 1, kind: DmaKind = "load",
                    point_runs: bool = False) -> int: ...

    def global_compute(self, chip: Chip, net: Network, op: Op) -> int: ...

    def global_scale(self, chip: Chip, net: Network, op: Op, bound: Bound | None = None) -> float:
        """What a layer-group op type run as a global layer costs relative to ``max(compute, transfers)``
        (the compiler's global kernels tile and overlap in their own way; 1 where the model knows no better).
        ``bound``: which of the two is larger ("tiu" or "gdma"); None: the smallest scale either may have."""
        ...

    def global_overhead(self, chip: Chip, net: Network, op: Op, bound: Bound) -> int:
        """Cycles a layer-group op type run as a global layer adds to ``global_scale * max(compute, transfers)``
        (0 where the model knows no better)."""
        ...

    def global_dma_cycles(self, chip: Chip, transfers: Sequence[Transfer]) -> int | None:
        """A global layer's transfers (:func:`global_transfers`), where the model knows the rate the
        compiler's global kernels move data at (None: each as :meth:`gdma_cycles` costs it in a group)."""
        ...

    def global_line(self, chip: Chip, net: Network, op: Op) -> bool:
        """Whether ``global_compute`` of ``op`` (a type only run globally) is its global layer's whole cost,
        transfers included (a line fitted per type on the compiler's timeline): its transfers then add no
        bound of their own beyond streaming its bytes at the chip's peak."""
        ...


@dataclass(frozen=True)
class AnalyticModel:
    """Work over lane parallelism plus a fixed issue cost; DMA as latency plus bytes over bandwidth."""

    name: str = "analytic"
    issue_cycles: int = 30  # assumption: fixed cost to issue one TIU instruction (docs/cost-model.md)
    free_views: bool = False  # every global layer moves its operands (docs/cost-model.md)
    rebalance_loads: bool = False  # weight loads stay in the rows the timestep table gives them
    pipelined_preloads: bool = False  # a sliced group's resident weights load before its loop
    f32_io: bool = False  # the network inputs and outputs are the dtype the plan computes in

    def tiu_cycles(self, chip: Chip, net: Network, op: Op, sl: SliceShape) -> int:
        return _analytic_tiu(chip, net, op, sl, self.issue_cycles)

    def gdma_cycles(self, chip: Chip, nbytes: int, segments: int = 1, kind: DmaKind = "load",
                    point_runs: bool = False) -> int:
        """Latency plus bytes over bandwidth; the transfer's shape costs nothing extra (an assumption:
        docs/cost-model.md)."""
        return chip.gdma_latency_cycles + peak_stream_cycles(chip, nbytes)

    def global_compute(self, chip: Chip, net: Network, op: Op) -> int:
        outs = [net.tensor(t) for t in op.outputs]
        dt = outs[0].dtype if outs and outs[0].dtype in chip.macs_per_lane else "f32"
        if chip.local(op):  # on a chip that keeps it out of groups, a local type is costed as any global op
            o = outs[0]
            i_h = net.tensor(op.inputs[0]).h if op.inputs else o.h
            return self.tiu_cycles(chip, net, op, SliceShape(o.n, o.h, i_h))
        if op.type in ("Gemm", "MatMul") and op.inputs:
            a = net.tensor(op.inputs[0]).orig_shape or net.tensor(op.inputs[0]).shape
            k = a[-1] if a else 1
            macs = sum(t.elems for t in outs) * k
            return self.issue_cycles + cdiv(macs, chip.npu_num * chip.macs_per_lane[dt])
        elems = sum(t.elems for t in outs) + sum(net.tensor(t).elems for t in op.inputs)
        return self.issue_cycles + cdiv(elems, chip.npu_num * chip.eu_elems(dt))

    def global_scale(self, chip: Chip, net: Network, op: Op, bound: Bound | None = None) -> float:
        return 1.0

    def global_overhead(self, chip: Chip, net: Network, op: Op, bound: Bound) -> int:
        return 0

    def global_dma_cycles(self, chip: Chip, transfers: Sequence[Transfer]) -> int | None:
        return None

    def global_line(self, chip: Chip, net: Network, op: Op) -> bool:
        return False


COST_MODELS: dict[str, CostModel] = {}


def register_cost_model(model: CostModel) -> CostModel:
    """Make ``model`` selectable as ``Chip.cost_model`` (``--set cost_model=NAME``)."""
    if model.name in COST_MODELS:
        raise ValueError(f"cost model {model.name!r} is already registered")
    COST_MODELS[model.name] = model
    return model


register_cost_model(AnalyticModel())


def cost_model(chip: Chip) -> CostModel:
    """The model ``chip`` names."""
    model = COST_MODELS.get(chip.cost_model)
    if model is None:
        import lgopt.group.calibrated  # noqa: F401  (registers the models fitted on TPU-MLIR)
        model = COST_MODELS.get(chip.cost_model)
    if model is None:
        raise LgoptError(f"unknown cost model {chip.cost_model!r} (registered: {', '.join(COST_MODELS)})")
    return model


def tiu_cycles(chip: Chip, net: Network, op: Op, sl: SliceShape) -> int:
    """Cycles the TIU spends on ``op`` for one slice (or the whole op)."""
    return cost_model(chip).tiu_cycles(chip, net, op, sl)


def gdma_cycles(chip: Chip, nbytes: int, segments: int = 1, kind: DmaKind = "load", point_runs: bool = False
                ) -> int:
    """Cycles of one GDMA transfer of ``nbytes`` (GMEM-side bytes) in ``segments`` contiguous runs
    (``point_runs``: each run one element)."""
    return cost_model(chip).gdma_cycles(chip, nbytes, segments, kind, point_runs)


def weight_dma_cycles(chip: Chip, op: Op, cols: int | None = None) -> int:
    """Cycles of loading all of ``op``'s weights (``cols``: a run of that many output columns of a column-sliced
    MatMul's): one transfer per weight tensor, as TPU-MLIR issues them."""
    return _weight_dma(chip, op, cols)


@lru_cache(maxsize=1 << 14)
def _weight_dma(chip: Chip, op: Op, cols: int | None = None) -> int:
    return sum(gdma_cycles(chip, b, s, "weight", p) for b, s, p in weight_transfers(op, cols))


def activation_dma_cycles(chip: Chip, net: Network, tensor: str, n_len: int, h_len: int,
                          kind: DmaKind = "load", w_len: int | None = None) -> int:
    """Cycles of moving batches ``n_len`` x rows ``h_len`` (x columns ``w_len``, all when not given) of an
    activation between GMEM and LMEM."""
    nbytes, segments, point = activation_transfer(net, tensor, n_len, h_len, w_len)
    return gdma_cycles(chip, nbytes, segments, kind, point)


def activation_transfer(net: Network, tensor: str, n_len: int, h_len: int, w_len: int | None = None,
                        c_len: int | None = None) -> tuple[int, int, bool]:
    """(bytes, segments, point runs) of batches ``n_len`` x rows ``h_len`` x columns ``w_len`` (x channels
    ``c_len`` of a channel slice) of an activation.

    With every column, a channel's rows are contiguous in GMEM: one run per batch and lane-axis entry (a
    channel, or a row of a rank-3 tensor whose rows lie over the lanes), a single element when the slice is
    1 x 1.  A W slice cuts every row: one run of ``w_len`` elements per batch, channel and row, single
    elements when ``w_len`` is 1 (what a W-sliced DMA costs TPU-MLIR's engine).

    >>> from lgopt.model.network import Network, Tensor
    >>> net = Network("n", {"x": Tensor("x", (1, 4, 8, 10), "f16")}, (), ("x",), ("x",))
    >>> activation_transfer(net, "x", 1, 8), activation_transfer(net, "x", 1, 8, 5)
    ((640, 4, False), (320, 32, False))
    """
    t = net.tensor(tensor)
    w = t.w if w_len is None else w_len
    c = t.c if c_len is None else c_len
    nbytes = n_len * c * h_len * w * dtype_bytes(t.dtype)
    if w == t.w:
        ln, lc, lh, lw = t.lane_shape(n_len, h_len, None, c)  # a run per batch and lane-axis entry
        return nbytes, ln * lc, lh * lw == 1
    return nbytes, n_len * c * h_len, w == 1


def _output_lanes(chip: Chip, net: Network, op: Op, sl: SliceShape) -> tuple[str, int, int, int]:
    """(the dtype the units compute ``op`` in, the vector unit's elements per cycle in it, the output slice's
    channels per lane, its H x W per lane rounded up to whole EU vectors)."""
    out = net.tensor(op.outputs[0])
    dt = out.dtype if out.dtype in chip.macs_per_lane else "f32"
    eu = chip.eu_elems(dt)
    _, lc, lh, lw = out.lane_shape(sl.n, sl.out_h, sl.out_w, sl.out_c)  # a rank-3 tensor's rows are over the lanes
    return dt, eu, channels_per_lane(lc, chip.npu_num), align_up(lh * lw, eu)


def output_vector_work(chip: Chip, net: Network, op: Op, sl: SliceShape, ops_per_element: int) -> int:
    """Vector-unit cycles of ``ops_per_element`` operations on every element of ``op``'s output slice: one
    lane's elements (EU-aligned) over the EU width."""
    _, eu, cpl_out, ohw = _output_lanes(chip, net, op, sl)
    return cdiv(sl.n * cpl_out * ohw * ops_per_element, eu)


@lru_cache(maxsize=1 << 16)
def _analytic_tiu(chip: Chip, net: Network, op: Op, sl: SliceShape, issue: int) -> int:
    dt, eu, cpl_out, ohw = _output_lanes(chip, net, op, sl)
    spec = opsem.OP_SPECS[op.type]
    family = spec.family
    if family is opsem.Family.MATMUL:  # each lane: its rows' outputs, K MACs each, on the MAC array
        k = net.tensor(op.inputs[0]).w
        return issue + cdiv(sl.n * cpl_out * ohw * k, chip.macs_per_lane[dt])
    if family in (opsem.Family.CONV, opsem.Family.DECONV):
        f = next(w for w in op.weights if w.role == "filter")
        kh, kw = f.shape[2], f.shape[3]
        if is_depthwise(op):
            return issue + output_vector_work(chip, net, op, sl, kh * kw)
        g = op.attrs.get("group", 1)
        icg = f.shape[1] if family is opsem.Family.CONV else f.shape[0] // g
        ic_par = max(1, chip.ic_parallel // dtype_bytes(dt))
        # a transposed conv runs as a conv over its input with zeros inserted (TPU-MLIR's kernels): every output
        # pixel takes the whole kernel, zeros included -- unet_small's 2x2 stride-2 ones measure 3.9-4.0x the
        # work of input pixels x kernel on BM1684X and BM1688 (benchmarks/fit, held out of the fit)
        work = sl.n * cpl_out * ohw * align_up(icg, ic_par) * kh * kw
        return issue + cdiv(work, chip.macs_per_lane[dt])
    if family is opsem.Family.POOL:
        kh, kw = op.attrs["kernel"]
        return issue + output_vector_work(chip, net, op, sl, kh * kw)
    if family is opsem.Family.GLOBAL_POOL:
        _, ic, ih, iw = net.tensor(op.inputs[0]).lane_shape(sl.n, sl.in_h, sl.in_w, sl.in_c)
        return issue + cdiv(sl.n * channels_per_lane(ic, chip.npu_num) * align_up(ih * iw, eu), eu)
    if family is opsem.Family.RESIZE:
        return issue + output_vector_work(chip, net, op, sl, 4 if op.attrs.get("mode") == "linear" else 1)
    per = spec.eu_ops + sum(opsem.eu_ops(a) for a in op.fused)
    if family in (opsem.Family.CONCAT, opsem.Family.CHANNEL_SLICE):
        copies = 1 if family is opsem.Family.CONCAT else per
        return issue + output_vector_work(chip, net, op, sl, copies) + lane_crossing_work(chip, net, op, sl)
    return issue + output_vector_work(chip, net, op, sl, per)


LaneCopy = Literal["", "shift", "wrap"]


def _lane_parts(net: Network, op: Op) -> list[tuple[int, int, str | None]]:
    """(offset, length, activation or None for a constant) of each part an op moves along its lane axis: a
    channel Concat's or Slice's channels, a row Concat's or Slice's rows when rows lie over the lanes; [] when
    the op moves nothing across lanes (a batch or a last-axis Slice, a Concat within each row)."""
    fam = opsem.OP_SPECS[op.type].family if op.type in opsem.OP_SPECS else None
    axis = op.attrs.get("axis")
    if fam is opsem.Family.CONCAT and axis in (1, -2):
        consts = iter(op.weights)
        acts = iter(op.inputs)
        parts: list[tuple[int, int, str | None]] = []
        offset = 0
        for k in range(len(op.inputs) + len(op.weights)):
            if k in op.attrs.get("const_at", ()):
                shape = next(consts).shape
                n = shape[-2] if axis == -2 else (shape[1] if len(shape) > 1 else 1)
                parts.append((offset, n, None))
            else:
                t = next(acts)
                n = net.tensor(t).h if axis == -2 else net.tensor(t).c
                parts.append((offset, n, t))
            offset += n
        return parts
    if fam is opsem.Family.CHANNEL_SLICE and axis in (1, -2) and op.outputs:
        out = net.tensor(op.outputs[0])
        if axis == -2 and not out.rows_on_lanes:
            return []
        return [(int(op.attrs.get("start", 0)), out.h if axis == -2 else out.c, op.outputs[0])]
    return []


def lane_copy(chip: Chip, net: Network, op: Op) -> LaneCopy:
    """How a channel Concat or Slice moves data between lanes: ``""`` when every part starts on a lane boundary
    (vector copies), ``"shift"`` when a part starts off one but stays within a run of lanes (UNet's 32 channels
    onto lanes 32-63: TPU-MLIR's LANE_COPY at about a cycle per pixel), ``"wrap"`` when a part's lanes wrap
    past the last lane (ShuffleNet's 58 channels at channel 58: the LANE_COPY costs some 2,100 cycles more on
    BM1684X and 11,600 on BM1688 whatever its size, the bulk of a small group's time)."""
    L = chip.npu_num
    kind: LaneCopy = ""
    for offset, n, _ in _lane_parts(net, op):
        if offset % L:
            if offset % L + n > L:
                return "wrap"
            kind = "shift"
    return kind


def lane_crossing_work(chip: Chip, net: Network, op: Op, sl: SliceShape) -> int:
    """Cycles a channel Concat or Slice spends moving parts that start off a lane boundary: each such part's
    channels shift to other lanes, one pixel per cycle per lane run instead of a vector copy (unet_small's last
    Concat of two 32-channel tensors measures 34,320 cycles for a 130 x 256 slice on 64-lane BM1684X, 1.03 per
    pixel, and a fraction of that on 32-lane BM1688, where both halves start on lane 0; held out of the fit)."""
    work = 0
    axis = op.attrs.get("axis")
    for offset, _, t in _lane_parts(net, op):
        if offset % chip.npu_num and t is not None:
            ten = net.tensor(t)  # a Concat's input, a Slice's output
            _, lc, lh, lw = ten.lane_shape(sl.n, ten.h if axis == -2 else sl.out_h, sl.out_w)
            work += sl.n * cdiv(lc, chip.npu_num) * lh * lw
    return work


def gmem_bytes(net: Network, tensor: str, n_len: int, h_len: int) -> int:
    """Bytes of batches ``n_len`` x rows ``h_len`` (every column) of an activation in GMEM."""
    return activation_transfer(net, tensor, n_len, h_len)[0]


def weight_gmem_bytes(op: Op, cols: int | None = None) -> int:
    """GMEM bytes of ``op``'s weights, or of a run of ``cols`` output columns of them (column slicing)."""
    return sum(math.prod(column_shape(w.shape, cols)) * (4 if w.role == "bias" else dtype_bytes(w.dtype))
               for w in op.weights if w.role not in ("mean", "var"))


def weight_transfers(op: Op, cols: int | None = None) -> list[tuple[int, int, bool]]:
    """(bytes, segments, point runs) of each of ``op``'s weight tensors, one transfer each: a filter is stored
    one output channel after another (a run per output channel); a bias or other per-channel vector puts one
    element on each channel's lane (a one-element run each); a matrix a run per row; a 4-D constant a run per
    N x C.  With ``cols`` (a column-sliced MatMul's slice): every constant cut to that many columns of its last
    axis, a run per row of the matrix (each row's columns are contiguous), a one-element run per bias column.

    >>> from lgopt.model.network import Weight
    >>> conv = Op("c", "Conv", ("x",), ("y",), (Weight("w", (64, 32, 3, 3), "f16", "filter"),
    ...                                        Weight("b", (64,), "f16", "bias")))
    >>> weight_transfers(conv)
    [(36864, 64, False), (256, 64, True)]
    """
    out = []
    for w in op.weights:
        if w.role in ("mean", "var") or not w.shape:
            continue
        shape = column_shape(w.shape, cols)
        elems = math.prod(shape)
        nbytes = elems * (4 if w.role == "bias" else dtype_bytes(w.dtype))
        runs = shape[0] if w.role == "filter" or len(shape) <= 2 else shape[0] * shape[1]
        out.append((nbytes, runs, runs == elems))
    return out


# --- global layers --------------------------------------------------------------------------------

def gmem_view(net: Network, op: Op) -> bool:
    """Whether ``op`` run as a global layer only re-reads GMEM bytes in place: a reshape (NCHW is contiguous,
    whatever the shape), a run of batches or of the channels of a one-batch tensor (a contiguous range), or a
    Concat whose inputs are written straight into it (:func:`merged_concat`).  TPU-MLIR's timeline shows such
    ops (ShuffleNet's 32 Reshapes, 20 channel Slices and each stage's first Concat, ViT's 36 Q/K/V picks of
    ``[3, 197, 1, 768]``) at 0 cycles.

    >>> from lgopt.model.network import Network, Tensor
    >>> x, y = Tensor("x", (1, 8, 4, 4), "f16"), Tensor("y", (1, 4, 4, 4), "f16")
    >>> net = Network("n", {"x": x, "y": y}, (), ("x",), ("y",))
    >>> gmem_view(net, Op("s", "Slice", ("x",), ("y",), attrs={"axis": 1, "start": 0, "end": 4}))
    True
    """
    if op.type in opsem.RESHAPE_TYPES:
        return True
    a = op.attrs
    if op.type == "Concat":
        return merged_concat(net, op)
    if op.type != "Slice" or a.get("step", 1) != 1 or len(op.inputs) != 1:
        return False
    t = net.tensor(op.inputs[0])
    return a.get("axis") == 0 or a.get("axis") == 1 and t.n == 1


def merged_concat(net: Network, op: Op) -> bool:
    """Whether a Concat run as a global layer costs nothing because its inputs are written straight into its
    output: TPU-MLIR's ``only_merge`` (``ConcatOp::supportInplace``), which holds when everything before the
    concatenated axis is one (the parts are contiguous ranges of the output), no input is a constant, another
    Concat's output, a channel view (a Slice run in GMEM) or a tensor with more than one reader besides
    (at most two such inputs), and no activation is fused.  ShuffleNet's first Concat of each stage, whose
    inputs are two groups' outputs, runs in 0 cycles on the timeline; the next ones, fed by a view, copy.

    >>> from lgopt.model.network import Network, Tensor
    >>> t = {n: Tensor(n, (1, c, 4, 4), "f16") for n, c in (("a", 8), ("b", 8), ("y", 16))}
    >>> net = Network("n", t, (Op("cat", "Concat", ("a", "b"), ("y",), attrs={"axis": 1}),), ("a", "b"), ("y",))
    >>> merged_concat(net, net.op("cat"))
    True
    """
    if op.type != "Concat" or op.weights or op.fused or not op.outputs:
        return False
    out = net.tensor(op.outputs[0])
    shape = out.orig_shape or out.shape
    axis = op.attrs.get("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    if math.prod(shape[:axis]) != 1:
        return False
    shared = 0
    for t in op.inputs:
        readers = net.consumers.get(t, ())
        if len(readers) > 1:
            shared += 1
            if op.inputs.count(t) > 1 or any(r.type == "Concat" and r.name != op.name for r in readers):
                return False
        src = net.producer.get(t)
        if src is not None and (src.type == "Concat" or gmem_view(net, src) and src.type == "Slice"):
            return False
        if src is not None and src.type in opsem.RESHAPE_TYPES:
            inner = src.inputs[0] if src.inputs else None
            if inner is None or net.producer.get(inner) is None or len(net.consumers.get(inner, ())) != 1:
                return False
    return shared <= 2


Transfer = tuple[int, int, bool, DmaKind]
"""One GDMA transfer: (GMEM bytes, contiguous runs, whether each run is one element, kind)."""


def global_transfers(net: Network, op: Op, chip: Chip) -> list[Transfer]:
    """The transfers of ``op`` run as a global layer.  A layer-group op type moves its operands in the layout
    a group would use (runs per batch and channel, a filter per output channel); other types move whole
    tensors the compiler lays out for long runs (a ``[1, 1024]`` vector is not 1,024 one-element runs
    there): one run per operand."""
    out: list[Transfer] = []
    sides: tuple[tuple[tuple[str, ...], DmaKind], ...] = ((op.inputs, "load"), (op.outputs, "store"))
    if chip.local(op):
        for names, kind in sides:
            out += [(*activation_transfer(net, t, net.tensor(t).n, net.tensor(t).h), kind) for t in names]
        out += [(b, runs, point, "weight") for b, runs, point in weight_transfers(op)]
    else:
        for names, kind in sides:
            out += [(gmem_bytes(net, t, net.tensor(t).n, net.tensor(t).h), 1, False, kind) for t in names]
        out.append((weight_gmem_bytes(op), 1, False, "weight"))
    return [t for t in out if t[0]]


def peak_stream_cycles(chip: Chip, nbytes: int) -> int:
    """Cycles ``nbytes`` take at the chip's peak GMEM bandwidth: no transfer is faster."""
    return cdiv(int(nbytes * chip.tiu_mhz * 1e6), int(chip.gdma_gbps * 1e9))


def global_layer_cost(chip: Chip, net: Network, op: Op) -> GroupCost:
    if cost_model(chip).free_views and gmem_view(net, op):
        return {"cycles": 0, "tiu_cycles": 0, "gdma_cycles": 0, "traffic_bytes": 0}
    moved = [gmem_bytes(net, t, net.tensor(t).n, net.tensor(t).h) for t in op.inputs + op.outputs]
    traffic = sum(moved) + weight_gmem_bytes(op)
    model = cost_model(chip)
    transfers = global_transfers(net, op, chip)
    dma = model.global_dma_cycles(chip, transfers)  # the compiler's global kernels' own rate, where known
    if dma is None:
        dma = sum(gdma_cycles(chip, b, runs, kind, point) for b, runs, point, kind in transfers)
    compute = model.global_compute(chip, net, op)
    stream = peak_stream_cycles(chip, traffic)
    cycles = max(compute, dma)
    if model.global_line(chip, net, op):  # fitted with its transfers: a classifier head's weight streams at
        # 54-58 bytes per cycle on BM1684X's timeline, faster than the global layers' median (49.5): the max
        # with them charged ResNet-18's head 21,356 cycles, measured 18,849
        cycles = max(compute, stream)
    if op.local:  # never below streaming its own bytes, so the lower bound's transfer term holds
        bound: Bound = "tiu" if compute >= dma else "gdma"
        cycles = max(model.global_overhead(chip, net, op, bound)
                     + math.ceil(cycles * model.global_scale(chip, net, op, bound)), stream)
    return {"cycles": cycles, "tiu_cycles": compute, "gdma_cycles": dma, "traffic_bytes": traffic}


def io_cast_cost(chip: Chip, net: Network, plan: Plan) -> GroupCost:
    """The global Casts a plan runs besides its steps.  Where the deployment keeps the graph's inputs and outputs
    f32 (``f32_io``), each network input no group converts itself (``GroupPlan.f32_in``) is converted by a
    global layer that loads it as f32 and stores it as the plan's dtype, and each network output no group
    converts (``f32_out``) by one that loads it and stores it as f32.  ShuffleNet's ``[1, 3, 224, 224]`` input:
    17,219 cycles on BM1684X's timeline as a global Cast, about 5,000 more (its f32 bytes) in the first group;
    unet_small's output: 16,432 cycles as a global Cast.  TPU-MLIR's own groupings take both casts in."""
    zero: GroupCost = {"cycles": 0, "tiu_cycles": 0, "gdma_cycles": 0, "traffic_bytes": 0}
    model = cost_model(chip)
    if not model.f32_io:
        return zero
    ins = {t for g in plan.groups for t in g.f32_in}
    outs = {t for g in plan.groups for t in g.f32_out}
    total: dict[str, int] = dict.fromkeys(zero, 0)
    todo = [(t, True) for t in net.inputs if t not in ins] + [(t, False) for t in net.outputs if t not in outs]
    for t, is_input in todo:
        ten = net.tensor(t)
        if ten.dtype == "f32":
            continue
        b = gmem_bytes(net, t, ten.n, ten.h)
        wide = as_f32(b, ten.dtype)
        # one run each: a global Cast moves the whole tensor contiguously (a [1, 1000] output: 639 cycles)
        transfers: list[Transfer] = ([(wide, 1, False, "load"), (b, 1, False, "store")] if is_input
                                     else [(b, 1, False, "load"), (wide, 1, False, "store")])
        dma = model.global_dma_cycles(chip, transfers)
        if dma is None:
            dma = sum(gdma_cycles(chip, x, r, k, p) for x, r, p, k in transfers)
        total["cycles"] += dma
        total["gdma_cycles"] += dma
        total["traffic_bytes"] += wide + b
    return cast(GroupCost, total)


def as_f32(nbytes: int, dtype: str) -> int:
    """Bytes of the same elements held as f32 (a network input or output the deployment keeps f32)."""
    return nbytes * 4 // dtype_bytes(dtype)


def io_bytes(chip: Chip, net: Network, t: str) -> int:
    """GMEM bytes of network input or output ``t`` as the deployment moves it (f32 where it keeps them f32)."""
    ten = net.tensor(t)
    b = gmem_bytes(net, t, ten.n, ten.h)
    return as_f32(b, ten.dtype) if cost_model(chip).f32_io else b


# --- groups ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PipelineCells:
    """A group's run as (iteration, row) cells with their TIU and GDMA cycles.

    Iteration -1 is the pipeline fill, ``num_slices`` the drain.  A cell costs
    ``max(tiu, gdma)``; ``preload`` (resident weights, before the loop) costs
    its GDMA alone.  Kept separate from the total so that an optimiser can add
    transfers to cells and cost the result exactly as :func:`group_cost` does.
    """

    cells: dict[tuple[int, int], tuple[int, int]]
    preload: int
    traffic: int

    def cycles(self) -> int:
        return self.preload + sum(max(t, d) for t, d in self.cells.values())


STAGE_SERVES = {int(s): s.serves for s in Stage}  # a stage-k transfer in iteration i serves slice i + STAGE_SERVES[k]


def pipeline_cells(chip: Chip, net: Network, g: GroupPlan) -> PipelineCells:
    pc = _table_cells(chip, net, g)
    if not cost_model(chip).rebalance_loads:
        return pc
    loads = _movable_weight_loads(chip, net, g)
    if not loads:
        return pc
    # the moves are the table's, so every slice's pass makes them: found on the first pass's rows (a one-slice
    # group's only one), applied to each.  ResNet-18 / BM1688 at batch 4 reloads its weights in each of 4 N
    # slices; TPU-MLIR's timeline loads a 3x3 conv's 1.2 MB beside the conv before, not beside a 1x1 one
    cells = dict(pc.cells)
    rows = len(g.rows)
    moved = [(r, c) for _, r, c in loads]
    dest = weight_load_moves([cells.get((0, r), (0, 0)) for r in range(rows)], moved)
    for i in range(g.num_slices):
        passed = rebalance_weight_loads([cells.get((i, r), (0, 0)) for r in range(rows)], moved, dest)
        for r, cell in enumerate(passed):
            if any(cell):
                cells[(i, r)] = cell
            else:
                cells.pop((i, r), None)
    return replace(pc, cells=cells)


def _table_cells(chip: Chip, net: Network, g: GroupPlan) -> PipelineCells:
    """The cells with every transfer in the row the table gives it (before TPU-MLIR's load moves)."""
    S = g.num_slices
    f32_io = cost_model(chip).f32_io
    f32_in = frozenset(g.f32_in) if f32_io else frozenset()
    f32_out = frozenset(g.f32_out) if f32_io else frozenset()
    windows = g.windows
    wsl = g.w_slices > 1
    csl = g.c_slices > 1

    def win(t: str, s: int, store: bool = False) -> tuple[int, int, int | None, int | None]:
        """(batches, rows, columns, channels) of slice ``s`` of ``t``, or of the part it stores; columns
        (channels) None when W (C) is not sliced (all of them)."""
        ten = net.tensor(t)
        n0, n1, h0, h1 = (g.stores if store else windows)[t][s]
        w0, w1 = (g.stored_cols if store else g.cols)(t, s, ten.w)
        c0, c1 = (g.stored_chans if store else g.chans)(t, s, ten.c)
        return n1 - n0, h1 - h0, (w1 - w0 if wsl else None), (c1 - c0 if csl else None)

    def transfer(name: str, kind: str, store: bool, s: int) -> tuple[int, int]:
        """(bytes, cycles) of one transfer."""
        if kind == "weight":
            op = net.op(name)
            cols = g.weight_columns(name, s)  # a column-sliced MatMul loads its slice's columns
            n_cols = None if cols is None else cols[1] - cols[0]
            return weight_gmem_bytes(op, n_cols), weight_dma_cycles(chip, op, n_cols)
        n, h, w, ch = win(name, s, store and name in g.stores)
        key = (name, n, h, w, ch, store)
        hit = dma.get(key)
        if hit is None:
            b, segs, point = activation_transfer(net, name, n, h, w, ch)
            if name in (f32_out if store else f32_in):  # a network input or output the group converts itself
                b = as_f32(b, net.tensor(name).dtype)
            hit = dma[key] = (b, gdma_cycles(chip, b, segs, "store" if store else "load", point))
        return hit

    tiu = [[0] * len(g.rows) for _ in range(S)]
    seen: dict[tuple, int] = {}  # slices mostly repeat one shape
    for s in range(S):
        for r, row in enumerate(g.rows):
            for name in row.ops:
                op = net.op(name)
                n, oh, ow, oc = win(op.outputs[0], s)
                _, ih, iw, ic = win(op.inputs[0], s) if op.inputs else (n, oh, ow, oc)
                key = (name, n, oh, ih, ow, iw, oc, ic)
                c = seen.get(key)
                if c is None:
                    c = seen[key] = tiu_cycles(chip, net, op, SliceShape(n, oh, ih, ow, iw, oc, ic))
                tiu[s][r] += c
    traffic = pre = 0
    # resident weights: all before the loop, or (TPU-MLIR) each in the first slice's row before its op's, op0's
    # with the fill's loads.  ResNet-18 / BM1688 at batch 4, 4 N slices of [3-24]: 2.2 M cycles of GDMA hidden
    # under 5.3 M of TIU on the timeline (5,635,175 measured); charged before the loop, 6,176,644 predicted
    held: dict[tuple[int, int], int] = {}
    row_of = {name: r for r, row in enumerate(g.rows) for name in row.ops}
    in_table = cost_model(chip).pipelined_preloads
    for name in g.preloads:
        traffic += weight_gmem_bytes(net.op(name))
        c = weight_dma_cycles(chip, net.op(name))
        if in_table and name in row_of:
            at = (0, row_of[name] - 1) if row_of[name] > 0 else (-1, len(g.rows) - 1)
            held[at] = held.get(at, 0) + c
        else:
            pre += c
    cells: dict[tuple[int, int], tuple[int, int]] = {}
    dma: dict[tuple[str, int, int, int | None, int | None, bool], tuple[int, int]] = {}  # (tensor, n, h, w, c, store)
    # TPU-MLIR converts an f32 network input in a Cast of its own, the first op of the group's table: the group's
    # ops read the converted copy, so the next slice's f32 load shares the last op's row.  lgopt's table gives it
    # a row after the last op when that op reads the input too (a one-op group): its cycles are charged there
    # (mobilenet_v3_small / BM1688's stem conv: 110,504 predicted, 90,916 measured, before this)
    op_rows = [r for r, row in enumerate(g.rows) if row.ops]
    shared = {(r, tr.name): op_rows[-1] for r, row in enumerate(g.rows) if not row.ops and op_rows
              for tr in row.loads if tr.name in f32_in and tr.stage == 0}
    for i in range(-1, S + 1):
        dma_at = [0] * len(g.rows)  # GDMA cycles charged to each row of iteration i
        for r, row in enumerate(g.rows):
            for tr, store in [(x, False) for x in row.loads] + [(x, True) for x in row.stores]:
                s = i + STAGE_SERVES[tr.stage]
                if 0 <= s < S:
                    b, c = transfer(tr.name, tr.kind, store, s)
                    traffic += b
                    dma_at[r if store else shared.get((r, tr.name), r)] += c
        for r in range(len(g.rows)):
            dma_at[r] += held.get((i, r), 0)
            t_cyc = tiu[i][r] if 0 <= i < S else 0
            if t_cyc or dma_at[r]:
                cells[(i, r)] = (t_cyc, dma_at[r])
    return PipelineCells(cells, pre, traffic)


def _movable_weight_loads(chip: Chip, net: Network, g: GroupPlan) -> list[tuple[str, int, int]]:
    """(op, row, cycles) of each weight load of a one-slice group TPU-MLIR may move (not a column run)."""
    return [(tr.name, r, weight_dma_cycles(chip, net.op(tr.name)))
            for r, row in enumerate(g.rows) for tr in row.loads if tr.kind == "weight" and tr.stage == 1
            and g.weight_columns(tr.name, 0) is None]


def moved_weight_loads(chip: Chip, net: Network, g: GroupPlan) -> dict[str, int]:
    """The row each weight load of one-slice group ``g`` sits in once TPU-MLIR's memory-aware pass has moved the
    loads (reference s4.3, :func:`rebalance_weight_loads`): the rows whose lifetimes its allocator packs.  Empty
    for a sliced group (its weights are held, or reloaded in place) or a cost model that does not move loads."""
    model = cost_model(chip)
    if g.num_slices != 1 or not model.rebalance_loads:
        return {}
    loads = _movable_weight_loads(chip, net, g)
    cells = _table_cells(chip, net, g).cells
    dest = weight_load_moves([cells.get((0, r), (0, 0)) for r in range(len(g.rows))], [(r, c) for _, r, c in loads])
    return {name: row for (name, _, _), row in zip(loads, dest)}


def rebalance_weight_loads(rows: list[tuple[int, int]], loads: list[tuple[int, int]],
                           dest: list[int] | None = None) -> list[tuple[int, int]]:
    """Rows' (TIU, GDMA) cycles after moving weight loads to earlier rows, as TPU-MLIR's
    ``memory_aware_timestep_assignment`` moves them (reference s4.3): to ``dest``, by default the rows
    :func:`weight_load_moves` finds for these ``rows``.

    On TPU-MLIR's timeline a weight-bound one-slice group runs near its GDMA time (ResNet-18's 29-op group on
    BM1684X: 539,578 cycles, 513,697 of GDMA); without the moves lgopt charged it 652,496, with them 576,796.

    >>> rebalance_weight_loads([(10, 0), (0, 10)], [(1, 10)])
    [(10, 10), (0, 0)]
    """
    t = [a for a, _ in rows]
    d = [b for _, b in rows]
    for (r, c), j in zip(loads, weight_load_moves(rows, loads) if dest is None else dest):
        d[r] -= c
        d[j] += c
    return list(zip(t, d))


def weight_load_moves(rows: list[tuple[int, int]], loads: list[tuple[int, int]]) -> list[int]:
    """The row each load ends in: while some row's GDMA exceeds its TIU, the (load, earlier row) pair with the
    largest gain ``min(0, slack_src + c) - slack_src + min(0, slack_dst - c)`` moves (``slack`` = TIU - GDMA of a
    row, ``c`` the load's cycles; ties: the smaller ``c * distance``).  A weight of a one-slice group has no
    earlier use, so any earlier row is legal; LMEM is not checked (TPU-MLIR does not check it there either).
    ``rows``: (TIU, GDMA) cycles, the loads counted in; ``loads``: (row, cycles) of each movable load.

    >>> weight_load_moves([(10, 0), (0, 10)], [(1, 10)])
    [0]
    """
    t = [a for a, _ in rows]
    d = [b for _, b in rows]
    at = [[r, c] for r, c in loads]
    for _ in range(4 * len(at) + 1):  # a load rarely moves twice; the gains strictly decrease the total
        best: tuple[int, int, int, int] | None = None  # (gain, -(c * distance), load, destination)
        for k, (r, c) in enumerate(at):
            src = t[r] - d[r]
            if src >= 0 or c <= 0:
                continue
            for j in range(r):
                gain = min(0, src + c) - src + min(0, t[j] - d[j] - c)
                key = (gain, -c * (r - j), k, j)
                if gain > 0 and (best is None or key[:2] > best[:2]):
                    best = key
        if best is None:
            break
        _, _, k, j = best
        r, c = at[k]
        d[r] -= c
        d[j] += c
        at[k][0] = j
    return [r for r, _ in at]


def group_cost(chip: Chip, net: Network, g: GroupPlan) -> GroupCost:
    """Cycles and GMEM traffic of a scheduled group, slice by slice through the pipeline."""
    pc = pipeline_cells(chip, net, g)
    return {"cycles": pc.cycles(), "tiu_cycles": sum(t for t, _ in pc.cells.values()),
            "gdma_cycles": pc.preload + sum(d for _, d in pc.cells.values()), "traffic_bytes": pc.traffic}


def lower_bound(chip: Chip, net: Network) -> dict[str, int]:
    """No plan beats this: full-size compute with no halo, or one GDMA stream of the unavoidable transfers
    (network inputs and outputs and the operands of layers that only run globally at the peak bandwidth,
    every weight once at :func:`min_weight_dma`)."""
    model = cost_model(chip)
    # an op in a group computes at least its global compute; run as a global layer, at least that times its
    # scale (below 1 where the compiler's global kernel beats the model's full-size compute)
    compute = sum(math.floor(model.global_compute(chip, net, op) * (min(1.0, model.global_scale(chip, net, op))
                                                                     if op.local else 1.0)) for op in net.ops)
    must = sum(io_bytes(chip, net, t) for t in set(net.inputs) | set(net.outputs))
    # global layers move all their operands no matter what (views of GMEM nothing, where the model says so)
    free = cost_model(chip).free_views
    for op in net.ops:
        if not chip.local(op) and not (free and gmem_view(net, op)):
            must += sum(gmem_bytes(net, t, net.tensor(t).n, net.tensor(t).h) for t in op.inputs + op.outputs
                        if t not in net.inputs and t not in net.outputs)
    weights = sum(weight_gmem_bytes(op) for op in net.ops)
    dma = peak_stream_cycles(chip, must) + sum(min_weight_dma(chip, net, op) for op in net.ops)
    return {"cycles": max(compute, dma), "compute_cycles": compute, "dma_cycles": dma,
            "traffic_bytes": must + weights}


def min_weight_dma(chip: Chip, net: Network, op: Op) -> int:
    """The least any plan spends loading ``op``'s weights: every weight crosses GMEM at least once, in a group
    (one transfer per tensor; cut into pieces, a column-sliced MatMul's, it costs no less, the transfer cost
    being subadditive) or in its global layer (at the global kernels' rate and, for a layer-group op type, the
    smaller of its scales), whichever the cost model makes cheaper.  Every transfer costs at least its bytes at
    the chip's peak bandwidth, so this is never below the bytes-only bound; where a fitted model prices the
    runs of a weight (a depthwise filter's 2,304 bytes reordered into one run per channel: 21,838 cycles on
    BM1684X's timeline) it says so: the bound of mnasnet1_0 / BM1684X, weight-bound, goes from 155 k cycles
    (a quarter of what TPU-MLIR's own grouping measures, 585,570) to 558 k (``benchmarks/room.py``)."""
    if not op.weights:
        return 0
    model = cost_model(chip)
    local = chip.local(op)
    ws: list[Transfer] = ([(b, r, p, "weight") for b, r, p in weight_transfers(op)] if local
                          else [(weight_gmem_bytes(op), 1, False, "weight")])
    ws = [t for t in ws if t[0]]
    glob = model.global_dma_cycles(chip, ws)
    if glob is None:
        glob = sum(gdma_cycles(chip, b, r, k, p) for b, r, p, k in ws)
    stream = peak_stream_cycles(chip, sum(t[0] for t in ws))
    if op.local:  # a local op type run globally: its layer is scaled, never below streaming its bytes
        glob = max(stream, math.floor(glob * min(1.0, model.global_scale(chip, net, op))))
    elif model.global_line(chip, net, op):  # its line may beat its transfers, never the bytes at the peak
        glob = min(glob, stream)
    return min(glob, weight_dma_cycles(chip, op)) if local else glob

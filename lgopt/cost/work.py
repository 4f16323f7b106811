"""What an op and a transfer amount to, whatever the model: the analytic work of an op slice (lanes, EU
vectors, IC parallelism), the lane copies of channel Concats and Slices, the bytes and contiguous runs of
each transfer, and which global layers only view GMEM.  Every cost model prices these."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Literal

from lgopt.cost.model import DmaKind, SliceShape, Transfer
from lgopt.hw.chip import Chip
from lgopt.hw.layout import align_up, cdiv, channels_per_lane, n_packing
from lgopt.hw.sizing import column_shape, is_depthwise, merged_conv, weight_bytes
from lgopt.model import ops as opsem
from lgopt.model.dtype import dtype_bytes, is_integer
from lgopt.model.network import Network, Op


def activation_transfer(net: Network, tensor: str, n_len: int, h_len: int, w_len: int | None = None,
                        c_len: int | None = None, align_4n: bool = False) -> tuple[int, int, bool]:
    """(bytes, segments, point runs) of batches ``n_len`` x rows ``h_len`` x columns ``w_len`` (x channels
    ``c_len`` of a channel slice) of an activation.

    With every column, a channel's rows are contiguous in GMEM: one run per batch and lane-axis entry (a
    channel, or a row of a rank-3 tensor whose rows lie over the lanes), a single element when the slice is
    1 x 1.  A W slice cuts every row: one run of ``w_len`` elements per batch, channel and row, single
    elements when ``w_len`` is 1 (what a W-sliced DMA costs TPU-MLIR's engine).  On a 4N chip (``align_4n``:
    BM1684) an 8-bit activation is held in GMEM as in LMEM, four batches to a 32-bit word, so one batch moves
    four bytes an element (BM1684's INT8 timelines: 4.0 bytes an element in every activation load and store
    at N = 1); a 16-bit one two batches to a word.

    >>> from lgopt.model.network import Network, Tensor
    >>> net = Network("n", {"x": Tensor("x", (1, 4, 8, 10), "f16")}, (), ("x",), ("x",))
    >>> activation_transfer(net, "x", 1, 8), activation_transfer(net, "x", 1, 8, 5)
    ((640, 4, False), (320, 32, False))
    >>> q = Network("q", {"x": Tensor("x", (1, 4, 8, 10), "int8")}, (), ("x",), ("x",))
    >>> activation_transfer(q, "x", 1, 8), activation_transfer(q, "x", 1, 8, align_4n=True)
    ((320, 4, False), (1280, 4, False))
    """
    t = net.tensor(tensor)
    w = t.w if w_len is None else w_len
    c = t.c if c_len is None else c_len
    k = n_packing(t.dtype, align_4n)
    n_words = cdiv(n_len, k)  # the batches as GMEM holds them: packed k to a 32-bit word on a 4N chip
    nbytes = c * h_len * w * (n_words * 4 if k > 1 else n_len * dtype_bytes(t.dtype))
    if w == t.w:
        ln, lc, lh, lw = t.lane_shape(n_words, h_len, None, c)  # a run per batch and lane-axis entry
        return nbytes, ln * lc, lh * lw == 1
    return nbytes, n_words * c * h_len, w == 1



CORE_FAMILIES = ("conv", "matmul", "parallel", "move")
_MOVE_TYPES = frozenset({"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Slice", "Split",
                         "Gather", "Expand", "Pad", "Patchify"})


def core_family(op: Op) -> str:
    """How a compiler spreads ``op`` run as a global layer over several cores, one of :data:`CORE_FAMILIES`:
    TPU-MLIR 1.30 cuts an elementwise, pooling, normalising or activation-by-activation op into one piece a core
    (``tpu.CoreParallel``: "parallel"), runs a conv or a weighted matmul as one layer whose kernel uses the
    cores its own way ("conv", "matmul"), and moves data (permute, concat, slice, upsample) on one core ("move").

    >>> from lgopt.model.network import Op, Weight
    >>> [core_family(Op("a", t, ("x",), ("y",), w)) for t, w in (("Conv", (Weight("w", (8, 4, 3, 3), "f16",
    ...  "filter"),)), ("MatMul", ()), ("Transpose", ()), ("Relu", ()))]
    ['conv', 'parallel', 'move', 'parallel']
    """
    spec = opsem.OP_SPECS.get(op.type)
    family = spec.family if spec else None
    if family in (opsem.Family.CONV, opsem.Family.DECONV) or op.type in ("Conv", "ConvTranspose"):
        return "conv"
    if family is opsem.Family.MATMUL or op.type in ("Gemm", "MatMul"):
        return "matmul" if op.weights else "parallel"
    if family in (opsem.Family.RESHAPE, opsem.Family.CHANNEL_SLICE, opsem.Family.CONCAT, opsem.Family.RESIZE) \
            or op.type in _MOVE_TYPES:
        return "move"
    return "parallel"



def one_core_matmul(net: Network, op: Op) -> bool:
    """Whether TPU-MLIR 1.30 runs this weighted matmul, a global layer on several cores, on core 0 alone: a float
    one with a Relu fused in.  BM1690 F16, 8 cores, each core's timeline (a one-Gemm model): ``4096 x 4096`` with
    its Relu fused, 498,290 cycles, every weight byte loaded by core 0; the same without the Relu, 76,161, an
    eighth of the weight on each core; ``4096 x 1000`` with a Relu, core 0 alone again.  VGG-16's two Relu heads
    run so (3.03 M and 0.50 M cycles on core 0), its output Gemm is split; in INT8 (the Relu in the requantised
    output) every head is split.  ``python benchmarks/core_split.py`` makes these measurements again.

    >>> from lgopt.model.network import Network, Op, Tensor, Weight
    >>> t = {"x": Tensor("x", (1, 4096, 1, 1), "f16"), "y": Tensor("y", (1, 1000, 1, 1), "f16")}
    >>> w = (Weight("w", (4096, 1000), "f16", "filter"),)
    >>> [one_core_matmul(Network("n", t, (o,), ("x",), ("y",)), o)
    ...  for o in (Op("g", "Gemm", ("x",), ("y",), w, fused=("Relu",)), Op("g", "Gemm", ("x",), ("y",), w))]
    [True, False]
    """
    if core_family(op) != "matmul" or "Relu" not in op.fused:
        return False
    return not is_integer(net.tensor(op.outputs[0]).dtype)


def channel_cores(chip: Chip, net: Network, op: Op) -> int:
    """The cores a conv or weighted matmul run as a global layer spreads over: its output channels (a matmul's
    columns) a lane's worth to a core, at most ``chip.used_cores``; a depthwise conv stays on one (BM1690 F16,
    op by op: a 64-channel conv 1.00x on 8 cores, 256 channels 1.5-2.3x, 512 channels 3.9x; depthwise 1.00x),
    and so does a float matmul with a Relu fused in (:func:`one_core_matmul`).

    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.model.network import Network, Op, Tensor, Weight
    >>> t = {"x": Tensor("x", (1, 64, 7, 7), "f16"), "y": Tensor("y", (1, 256, 7, 7), "f16")}
    >>> conv = Op("c", "Conv", ("x",), ("y",), (Weight("w", (256, 64, 1, 1), "f16", "filter"),))
    >>> channel_cores(get_chip("bm1690", {"used_cores": 8}), Network("n", t, (conv,), ("x",), ("y",)), conv)
    4
    """
    if is_depthwise(op) or one_core_matmul(net, op):
        return 1
    w = next((w for w in op.weights if w.role != "bias"), None)
    if core_family(op) == "matmul" and w is not None:
        channels = w.shape[-1]
    else:
        channels = net.tensor(op.outputs[0]).c
    return max(1, min(chip.used_cores, cdiv(channels, chip.npu_num)))



def output_lanes(chip: Chip, net: Network, op: Op, sl: SliceShape) -> tuple[str, int, int, int]:
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
    _, eu, cpl_out, ohw = output_lanes(chip, net, op, sl)
    return cdiv(sl.n * cpl_out * ohw * ops_per_element, eu)



@lru_cache(maxsize=1 << 16)
def analytic_tiu(chip: Chip, net: Network, op: Op, sl: SliceShape, issue: int) -> int:
    dt, eu, cpl_out, ohw = output_lanes(chip, net, op, sl)
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



def gmem_bytes(net: Network, tensor: str, n_len: int, h_len: int, align_4n: bool = False) -> int:
    """Bytes of batches ``n_len`` x rows ``h_len`` (every column) of an activation in GMEM (``align_4n``: packed
    as :func:`activation_transfer` says)."""
    return activation_transfer(net, tensor, n_len, h_len, align_4n=align_4n)[0]



def weight_gmem_bytes(op: Op, cols: int | None = None) -> int:
    """GMEM bytes of ``op``'s weights, or of a run of ``cols`` output columns of them (column slicing)."""
    return sum(math.prod(column_shape(w.shape, cols)) * (4 if w.role == "bias" else dtype_bytes(w.dtype))
               for w in op.weights if w.role not in ("mean", "var"))



def weight_transfers(op: Op, cols: int | None = None, chip: Chip | None = None) -> list[tuple[int, int, bool]]:
    """(bytes, segments, point runs) of each of ``op``'s weight tensors, one transfer each: a filter is stored
    one output channel after another (a run per output channel); a bias or other per-channel vector puts one
    element on each channel's lane (a one-element run each); a matrix a run per row; a 4-D constant a run per
    N x C.  With ``cols`` (a column-sliced MatMul's slice): every constant cut to that many columns of its last
    axis, a run per row of the matrix (each row's columns are contiguous), a one-element run per bias column.

    An integer convolution's coefficients are one tensor (:func:`merged_conv_transfer`, given the ``chip``).

    >>> from lgopt.model.network import Weight
    >>> conv = Op("c", "Conv", ("x",), ("y",), (Weight("w", (64, 32, 3, 3), "f16", "filter"),
    ...                                        Weight("b", (64,), "f16", "bias")))
    >>> weight_transfers(conv)
    [(36864, 64, False), (256, 64, True)]
    """
    if chip is not None and merged_conv(op):
        return [merged_conv_transfer(chip, op)]
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


def merged_conv_transfer(chip: Chip, op: Op) -> tuple[int, int, bool]:
    """(bytes, runs, point runs) of an integer convolution's merged coefficients: its LMEM coefficient buffer
    (:func:`lgopt.hw.sizing.weight_bytes`, bias merged in front) on each lane its output channels use, a run per
    lane."""
    f = next(w for w in op.weights if w.role == "filter")
    # ONNX filters: a Conv's [oc, ic/group, kh, kw], a ConvTranspose's [ic, oc/group, kh, kw]
    oc = f.shape[1] * op.attrs.get("group", 1) if op.type == "ConvTranspose" else f.shape[0]
    lanes = min(chip.npu_num, oc)
    return weight_bytes(chip, op) * lanes, lanes, False



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



def global_transfers(net: Network, op: Op, chip: Chip) -> list[Transfer]:
    """The transfers of ``op`` run as a global layer.  A layer-group op type moves its operands in the layout
    a group would use (runs per batch and channel, a filter per output channel); other types move whole
    tensors the compiler lays out for long runs (a ``[1, 1024]`` vector is not 1,024 one-element runs
    there): one run per operand."""
    out: list[Transfer] = []
    sides: tuple[tuple[tuple[str, ...], DmaKind], ...] = ((op.inputs, "load"), (op.outputs, "store"))
    if chip.local(op):
        for names, kind in sides:
            out += [(*activation_transfer(net, t, net.tensor(t).n, net.tensor(t).h, align_4n=chip.align_4n), kind)
                    for t in names]
        out += [(b, runs, point, "weight") for b, runs, point in weight_transfers(op, chip=chip)]
    else:
        for names, kind in sides:
            out += [(gmem_bytes(net, t, net.tensor(t).n, net.tensor(t).h), 1, False, kind) for t in names]
        out.append((weight_gmem_bytes(op), 1, False, "weight"))
    out += requant_transfers(net, op)
    return [t for t in out if t[0]]


def requant_transfers(net: Network, op: Op) -> list[Transfer]:
    """What an 8-bit ConvTranspose run globally moves beyond its int8 output (:func:`requant_apart_bytes`): the
    deconvolution writes int32 (3 bytes an element more), the requantisation reads it and writes int8."""
    e = requant_apart_bytes(net, op)
    return [(3 * e, 1, False, "store"), (4 * e, 1, False, "load"), (e, 1, False, "store")] if e else []


def requant_apart_bytes(net: Network, op: Op) -> int:
    """The bytes of an 8-bit ConvTranspose's output where it runs as a global layer apart from its
    requantisation, else 0.  TPU-MLIR lowers an INT8 ConvTranspose to a deconvolution writing int32 and a
    ``RequantIntAxis`` to int8 after it, two global layers when the deconvolution is one (UNet's upsampling
    convs on BM1688 and BM1690: the requantisation 0.4-1.0x the deconvolution's own cycles, each moving the
    int32 tensor); :func:`lgopt.tpumlir.lowering.split_requant` cuts the two where a cache names them apart.

    >>> from lgopt.model.network import Network, Op, Tensor, Weight
    >>> ts = {"x": Tensor("x", (1, 8, 4, 4), "int8"), "y": Tensor("y", (1, 4, 8, 8), "int8")}
    >>> up = Op("up", "ConvTranspose", ("x",), ("y",), (Weight("w", (8, 4, 2, 2), "int8", "filter"),))
    >>> requant_apart_bytes(Network("n", ts, (up,), ("x",), ("y",)), up)
    256
    """
    if op.type != "ConvTranspose" or not op.outputs:
        return 0
    t = net.tensor(op.outputs[0])
    return t.elems * dtype_bytes(t.dtype) if t.dtype in ("int8", "uint8") else 0



def peak_stream_cycles(chip: Chip, nbytes: int) -> int:
    """Cycles ``nbytes`` take at the chip's peak GMEM bandwidth: no transfer is faster."""
    return cdiv(int(nbytes * chip.tiu_mhz * 1e6), int(chip.gdma_gbps * 1e9))



def as_f32(nbytes: int, dtype: str) -> int:
    """Bytes of the same elements held as f32 (a network input or output the deployment keeps f32)."""
    return nbytes * 4 // dtype_bytes(dtype)

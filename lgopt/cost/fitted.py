"""A cost model fitted on TPU-MLIR's codegen timeline: the analytic model's work terms, per-chip constants.

Registered as ``tpu-mlir-1.30`` (``--set cost_model=tpu-mlir-1.30``).  Same contract as every
:class:`lgopt.cost.model.CostModel`; the form and the fit are in ``docs/cost-model.md`` ("A model fitted
on TPU-MLIR"), the constants in ``lgopt/cost/models/<chip>.json`` (written by
``lgopt fit``, :mod:`lgopt.cost.fit`; each says where it came from and the command that made it).  In short:

* TIU: an op slice costs ``a_k + b_k * W`` where ``W`` is the analytic model's work (cycles without the
  issue cost: lanes, EU and IC rounding, kernel size) and ``k`` the op's category (dense conv, depthwise
  conv, deconv, each pool, resize, concat, each elementwise / activation type); ``a_k >= issue_cycles``
  and ``b_k >= 0``, so slices never save compute and each slice issues again;
* GDMA, per transfer kind (activation load, store, weight load):
  ``max(chip.gdma_latency_cycles, c + max(bytes / bw, k * runs + k_point * point_runs), bytes / chip
  bandwidth)``: a transfer streams at ``bw`` bytes per cycle unless its contiguous GMEM runs are so short
  that their count decides (``k`` cycles each; ``k_point`` more for a run of one element, a bias or a 1 x 1
  map), their count capped at ``point_cap`` where the fit finds one (BM1684X moves a 2,048-channel bias
  in the time of a 1,024-channel one).  On BM1684X a 1 x 512 store takes 12,794 cycles for 1 KiB, 25 per
  channel: a bytes-only model cannot see it.  ``c, bw, k, k_point >= 0``: non-decreasing in bytes and runs,
  subadditive, never cheaper than the chip's latency or its peak bandwidth (the CP-SAT stream bounds use
  ``chip.gdma_gbps``);
* a global layer: each operand's transfer its set-up as in a group plus its bytes at the rate TPU-MLIR's
  global kernels reach (``global_gdma``: about 25 bytes per cycle on BM1688, where a group's transfers
  reach 16.5, and 50 on BM1684X); local op types cost their TIU cycles at full size, and the layer
  ``a_t + s_t * max(compute, transfers)`` with ``a_t, s_t`` fitted per type and, where the data tells them
  apart, per bounding engine (``global_local``: ``Conv/tiu``, ``Conv/gdma``; TPU-MLIR's global kernels tile
  and overlap their own way, and a layer pays fixed cycles the small ones of the mobile networks show), or
  ``a_t + s_t * (compute + transfers)`` for a type the fit marks ``one_pass`` when the layer's output fits one
  LMEM bank a lane (TPU-MLIR's INT8 global convs load, compute and store in turn there: :func:`one_pass`),
  never below streaming its bytes (the lower bound takes ``min(1, s_t)`` of the compute); other
  types ``a_t + b_t * X`` fitted on the timeline of TPU-MLIR's global ops (``X`` = MACs for Gemm/MatMul,
  elements read and written otherwise); a view of GMEM (a reshape, a run of channels of one batch:
  :func:`lgopt.cost.work.gmem_view`) nothing at all, as the timeline shows (``free_views``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from lgopt.cost.analytic import AnalyticModel, core_terms
from lgopt.cost.model import Bound, DmaKind, SliceShape, Transfer
from lgopt.cost.work import (
    analytic_tiu,
    channel_cores,
    core_family,
    gmem_view,
    lane_copy,
    lane_crossing_work,
    output_lanes,
    output_vector_work,
)
from lgopt.errors import LgoptError
from lgopt.hw.chip import Chip
from lgopt.hw.layout import align_up, cdiv, channels_per_lane
from lgopt.hw.sizing import activation_bytes, is_depthwise, merged_conv, table_lookup
from lgopt.model import ops as opsem
from lgopt.model.dtype import dtype_bytes
from lgopt.model.network import Network, Op

CALIBRATION_DIR = Path(__file__).resolve().parent / "models"
MODEL_NAME = "tpu-mlir-1.30"
INT8_MODEL_NAME = "tpu-mlir-1.30-int8"  # the same form, fitted on TPU-MLIR's INT8 deployment (lgopt/cost/models/int8)


LUT = "lut"  # the TIU category of an activation TPU-MLIR's INT8 lowering runs as a table lookup


def tiu_category(chip: Chip, net: Network, op: Op) -> tuple[str, str]:
    """(category, family fallback) an op's TIU constants are looked up by.  A Concat or Slice that moves data
    between lanes is a category of its own (``concat_wrap``, ``channel_slice_shift``: :func:`lane_copy`): on
    TPU-MLIR's timeline its LANE_COPY is a fixed cost plus a per-pixel one, where an aligned one is vector
    copies at a fraction of a cycle per element.  An elementwise or pool op whose output lies with rows over the
    lanes (a transformer's ``[tokens, features]``) is ``<type>/rows``, as a global layer's scale is
    (:func:`scale_key`): ViT-B's residual Adds on BM1690 cost 10 cycles an element unit where a conv network's cost
    4.9, and in one line they moved the fused-activation rate (:data:`FUSED_PASS_RATE`, the ``Add`` line) every
    conv's line is fitted after."""
    spec = opsem.OP_SPECS.get(op.type)
    if spec is None:
        return op.type, "default"
    fam = spec.family
    if fam is opsem.Family.CONV:
        if is_depthwise(op):  # strided depthwise runs at well under the output rate
            return ("conv_dw_s2" if max(op.attrs.get("strides", (1, 1))) > 1 else "conv_dw"), "conv"
        f = next((w for w in op.weights if w.role == "filter"), None)
        if f is not None and f.shape[1] <= 4:  # stems: the IC rounding the analytic work pays is not paid
            return "conv_smallic", "conv"
        return "conv", "conv"
    if fam is opsem.Family.UNARY and table_lookup(net, op):
        return LUT, fam.value
    if fam in (opsem.Family.BINARY, opsem.Family.UNARY, opsem.Family.POOL):
        return with_rows(net, op, op.type), fam.value
    if fam is opsem.Family.MATMUL:  # no matmul group was fitted: the MAC array's constants, the conv's
        return "matmul", "conv"
    if fam in (opsem.Family.ROWWISE, opsem.Family.GROUP_NORM):  # vector work per element, as an activation's
        return op.type, "unary"
    if fam in (opsem.Family.CONCAT, opsem.Family.CHANNEL_SLICE):
        kind = lane_copy(chip, net, op)
        if kind:
            return f"{fam.value}_{kind}", fam.value
    return fam.value, fam.value


def scale_key(net: Network, op: Op) -> str:
    """What a global layer's scale (``global_local``) is looked up by: its type, and ``/rows`` when its output
    lies with rows over the lanes (a folded rank-3 or channels-last tensor).  TPU-MLIR runs those through its
    matmul-family kernels, and its timeline names a linear layer after its bias Add: a scale fitted on them
    says nothing of a convolutional network's Add, and the reverse.

    >>> from lgopt.model.network import Network, Tensor
    >>> t = Tensor("y", (1, 1, 197, 768), "f16", (1, 197, 768))
    >>> net = Network("n", {"x": t, "y": t}, (), ("x",), ("y",))
    >>> scale_key(net, Op("a", "Add", ("x", "x"), ("y",)))
    'Add/rows'
    """
    return with_rows(net, op, "GlobalAveragePool" if spatial_mean(net, op) else op.type)


def with_rows(net: Network, op: Op, kind: str) -> str:
    """``kind``, or ``kind/rows`` when ``op``'s output lies with rows over the lanes: what both a TIU category
    and a global layer's scale key tell a transformer's op by."""
    rows = bool(op.outputs) and net.tensor(op.outputs[0]).rows_on_lanes
    return f"{kind}/rows" if rows else kind


def one_pass(chip: Chip, net: Network, op: Op) -> bool:
    """Whether a global layer's whole output fits one LMEM bank a lane, so that the compiler's global kernel can run it
    in one pass: load everything, compute, store, with nothing to overlap.  On TPU-MLIR's INT8 timelines (BM1688 and
    BM1690 read op by op; BM1684X's and BM1684's fits choose it too) a global conv does that (its cycles the sum of
    its TIU and GDMA cycles, to the cycle: MNASNet's last 1 x 1 conv on BM1690, 25,342 + 2,520 = 27,862) while its
    output fits a bank (8 KiB a lane on BM1688, 16 KiB on BM1690), and overlaps the two above it (UNet's ``[1, 32,
    256, 256]`` convs, ConvNeXt's stem); priced at the larger of the two, VGG's and UNet's compute-bound global
    convs on BM1690 came out at 0.54-0.59 of measured.

    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.model.network import Network, Tensor
    >>> small = Tensor("y", (1, 256, 32, 32), "int8")       # 8 channels a lane x 1,024: 8 KiB
    >>> big = Tensor("z", (1, 512, 28, 28), "int8")         # 16 channels a lane x 784: 12.25 KiB
    >>> net = Network("n", {"y": small, "z": big}, (), ("y",), ("z",))
    >>> chip = get_chip("bm1688")                           # 32 lanes, 16 banks of 8 KiB
    >>> one_pass(chip, net, Op("a", "Conv", ("y",), ("y",))), one_pass(chip, net, Op("b", "Conv", ("y",), ("z",)))
    (True, False)
    """
    out = net.tensor(op.outputs[0])
    return activation_bytes(chip, out, out.n, out.h) <= chip.bank_bytes


def spatial_mean(net: Network, op: Op) -> bool:
    """A ReduceMean over H and W of a 4-D tensor: TPU-MLIR lowers it as it lowers a GlobalAveragePool (one
    ``Pool2D``; ShuffleNet's and MNASNet's cost what MobileNetV2's pool does on the timeline, 3,740 cycles for
    1,280 channels in BM1684X's INT8 and 14,428 in BM1688's F16), so the two share a global layer's scale."""
    return (op.type == "ReduceMean" and bool(op.inputs) and len(net.tensor(op.inputs[0]).shape) == 4
            and tuple(sorted(op.attrs.get("axes", ()))) == (2, 3))


def work_term(chip: Chip, net: Network, op: Op, sl: SliceShape) -> int:
    """The analytic model's TIU cycles of the slice without its issue cost (lane/EU/IC-rounded work); a stem
    conv's :func:`stem_conv_work`, an integer conv's :func:`int_conv_work`."""
    category = tiu_category(chip, net, op)[0]
    if category == "conv_smallic":
        return stem_conv_work(chip, net, op, sl)
    if category == LUT:  # one lookup an element
        return output_vector_work(chip, net, op, sl, 1)
    if int_conv(chip, net, op):
        return int_conv_work(chip, net, op, sl)
    return analytic_tiu(chip, net, op, sl, 0)


INT_CONV_CATEGORIES = ("conv", "conv_dw", "conv_dw_s2")  # integer convs worked out on int32 pixels


def int_conv(chip: Chip, net: Network, op: Op) -> bool:
    """An integer conv whose work is :func:`int_conv_work`'s and :func:`pass_term`'s (a stem keeps its own)."""
    return merged_conv(op) and tiu_category(chip, net, op)[0] in INT_CONV_CATEGORIES


def int_conv_work(chip: Chip, net: Network, op: Op, sl: SliceShape) -> int:
    """An integer conv's MACs: input channels rounded to the IC parallelism, each lane's output pixels to the
    int32 EU width (its accumulators), not the int8 one.  On BM1688's INT8 timeline every dense conv of UNet
    costs exactly this (73,728 cycles for a 3 x 3, 32 -> 32 conv of a 128 x 256 map); the analytic work (pixels
    rounded to whole int8 vectors) was 0.6x-1.75x the cycles on BM1684X, by map size.  A depthwise conv's work is
    a pass per kernel tap over those pixels (BM1684X's timeline: taps + 1 passes at stride 1, the one its fitted
    pass, and 3 taps + 1 at stride 2; BM1688's a quarter of a pass per tap, at its int8 width).  What a chip adds
    per output pixel is :func:`pass_term`'s.

    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.model.network import Network, Tensor, Weight
    >>> x, y = Tensor("x", (1, 64, 128, 256), "int8"), Tensor("y", (1, 32, 128, 256), "int8")
    >>> conv = Op("c", "Conv", ("x",), ("y",), (Weight("w", (32, 64, 3, 3), "int8", "filter"),),
    ...           {"pads": (1, 1, 1, 1)}, local=True)
    >>> net = Network("n", {"x": x, "y": y}, (conv,), ("x",), ("y",))
    >>> int_conv_work(get_chip("bm1684x"), net, conv, SliceShape(1, 128, 130))
    73728
    """
    f = next(w for w in op.weights if w.role == "filter")
    pixels = _int_conv_pixels(chip, net, op, sl)
    if is_depthwise(op):  # a vector pass per kernel tap: BM1684X's at the int32 width, BM1688's a quarter of it
        return f.shape[2] * f.shape[3] * cdiv(pixels, chip.eu_elems("int32"))
    ic = align_up(f.shape[1], max(1, chip.ic_parallel // dtype_bytes(f.dtype)))
    return cdiv(pixels * ic * f.shape[2] * f.shape[3], chip.macs_per_lane.get(f.dtype, 1))


def pass_term(chip: Chip, net: Network, op: Op, sl: SliceShape) -> int:
    """One pass of the vector unit over an integer conv's (dense or depthwise) int32 output slice (0 for other
    ops): the unit of the passes a chip makes after the MACs (accumulate, requantise, activate), their count
    fitted per chip and category (``passes``).  BM1684X's INT8 timeline shows 3 (a 3 x 3 conv of UNet's 256-wide
    maps: 79,872 cycles = 73,728 of MACs + 3 x 2,048), with or without a fused ReLU; BM1688's none."""
    if not int_conv(chip, net, op):
        return 0
    return cdiv(_int_conv_pixels(chip, net, op, sl), chip.eu_elems("int32"))


def _int_conv_pixels(chip: Chip, net: Network, op: Op, sl: SliceShape) -> int:
    """An integer conv's output pixels on one lane, each channel's rounded to the int32 EU width."""
    _, lc, lh, lw = net.tensor(op.outputs[0]).lane_shape(sl.n, sl.out_h, sl.out_w, sl.out_c)
    return sl.n * channels_per_lane(lc, chip.npu_num) * align_up(lh * lw, chip.eu_elems("int32"))


def stem_conv_work(chip: Chip, net: Network, op: Op, sl: SliceShape) -> int:
    """A stem conv's (input channels <= 4) work: output pixels per lane x ``min(stride_w, 2) x (kw + 2)``.

    TPU-MLIR folds a stem's few input channels with its kernel rows (its ``3ic`` layout), so neither the IC
    rounding nor the kernel's height that the MAC count pays shows on its timeline; the kernel's width and the
    stride do.  On the calibration's ten stems (3 x 3 at strides 1 and 2, 6 x 6 and 7 x 7 at 2, 4 x 4 at 4), a
    fit on MAC work was a median 37 % (BM1684X) and 28 % (BM1688) off on the model left out, 2.5x too cheap
    for a 3 x 3 / 2 stem on BM1684X; this term is 8 % and 5 % off, worst 27 % and 22 % (ConvNeXt's 4 x 4 / 4
    patchify, the only stride above 2).  The form is empirical: ``lgopt fit`` (:mod:`lgopt.cost.fit`) fits its
    ``a + b * W`` like every category's, ``docs/cost-model.md`` ("Stem convs") has the table.

    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.model.network import Network, Tensor, Weight
    >>> x, y = Tensor("x", (1, 3, 224, 224), "f16"), Tensor("y", (1, 32, 112, 112), "f16")
    >>> conv = Op("c", "Conv", ("x",), ("y",), (Weight("w", (32, 3, 3, 3), "f16", "filter"),),
    ...           {"strides": (2, 2), "pads": (1, 1, 1, 1)}, local=True)
    >>> net = Network("n", {"x": x, "y": y}, (conv,), ("x",), ("y",))
    >>> stem_conv_work(get_chip("bm1684x"), net, conv, SliceShape(1, 8, 17))  # 8 x 112 pixels, 2 x (3 + 2)
    8960
    """
    f = next(w for w in op.weights if w.role == "filter")
    sw = op.attrs.get("strides", (1, 1))[-1]
    _, _, cpl_out, ohw = output_lanes(chip, net, op, sl)
    return sl.n * cpl_out * ohw * min(sw, 2) * (f.shape[3] + 2)


FUSED_PASS_RATE = "Add"  # the category whose fitted rate a fused activation's passes run at (one AR each)


def fused_work(chip: Chip, net: Network, op: Op, sl: SliceShape) -> int:
    """The vector-unit passes a conv's fused activations make over its output slice, in EU work (output
    elements per lane over the EU width, times the activation's ops per element): TPU-MLIR runs each as an
    AR command after the CONV (a fused ReLU one, a ReLU6 two: ``AR:2;CONV:1`` on BM1684X's timeline).  Charged
    at an elementwise Add's fitted rate (and taken off the convs' cycles before their own fit), they take the
    held-out median error per op slice from 7.1 % / 2.1 % to 2.3 % / 0.2 % (BM1684X / BM1688) and the depthwise
    convs' fitted rate from 1.21 / 1.10 to 1.00; mobilenet_v2's 16 -> 96 1x1 convs on BM1688, where the ReLU6
    costs twice the MACs, go from a third of their measured cycles to two thirds.  0 for other ops."""
    spec = opsem.OP_SPECS.get(op.type)
    if spec is None or spec.family not in (opsem.Family.CONV, opsem.Family.DECONV) or not op.fused:
        return 0
    if int_conv(chip, net, op):  # among its int32 passes
        return 0
    return output_vector_work(chip, net, op, sl, sum(opsem.eu_ops(a) for a in op.fused))


def fused_rate(k: ChipConstants) -> float:
    """Cycles per unit of :func:`fused_work`: the fitted rate of an elementwise Add (else the analytic 1), or 0
    on a chip whose fit found fused activations free (``"fused_passes": false``: BM1690)."""
    return k.tiu.get(FUSED_PASS_RATE, (0, 1.0))[1] if k.fused_passes else 0.0


def permute_runs(net: Network, op: Op) -> int:
    """The runs a global Transpose reads and writes when it keeps a run of at least two elements in place
    (:func:`lgopt.model.ops.permute_run`), else 0.  TPU-MLIR's timeline shows such a Permute at the larger of
    its bytes over the global layers' GDMA rate and the DMA engine's cost per run (the fitted load constant
    ``k``): ShuffleNet's channel shuffles and ViT's head transposes within 5 %, where the per-element line of
    the true transposes (ConvNeXt's NCHW <-> NHWC) charged them twice that."""
    if op.type != "Transpose" or not op.inputs:
        return 0
    run = opsem.permute_run(op.attrs)
    return 2 * net.tensor(op.inputs[0]).elems // run if run >= 2 else 0


def global_work(net: Network, op: Op, row_share: float = 1.0, row_run: float = 0.0) -> int:
    """The size term of a global layer: elements read and written; for Gemm/MatMul its MACs, each row after the
    first counted ``row_share`` of the first where the second operand is a weight, and with a weight, ``row_run``
    elements more for each of its rows (:func:`weight_rows`).

    TPU-MLIR's global Gemm streams its weight once for all rows: on its timeline a classifier head at batch 4
    takes 1.26-1.32x its batch-1 cycles (ResNet-18 and MobileNetV2 on BM1684X and BM1688), not 4x.  The
    calibration's global Gemms all have one row, where MACs and weight size are one term; ``row_share``
    (``global_rows`` in the constants, measured on batch-4 timelines) prices the others.  Each of the weight's
    rows is a DMA run with a fixed overhead (``row_run``, fitted with the line: :func:`lgopt.cost.fit.fit_global`):
    in INT8 a ``1000``-wide head streams a third slower a byte than VGG's ``4096``-wide ones (BM1690: 19.3 and
    60.5 cycles a row on one core), which a rate alone priced 1.23x over.

    >>> from lgopt.model.network import Network, Op, Tensor, Weight
    >>> ts = {"x": Tensor("x", (4, 512, 1, 1), "f16", (4, 512)), "y": Tensor("y", (4, 1000, 1, 1), "f16", (4, 1000))}
    >>> fc = Op("fc", "Gemm", ("x",), ("y",), (Weight("w", (1000, 512), "f16", "filter"),))
    >>> net = Network("head", ts, (fc,), ("x",), ("y",))
    >>> global_work(net, fc), global_work(net, fc, 0.1), global_work(net, fc, 0.1, 24.0)
    (2048000, 665600, 681574)
    """
    outs = [net.tensor(t) for t in op.outputs]
    if op.type in ("Gemm", "MatMul") and op.inputs:
        rows = output_rows(net, op)
        k = weight_rows(net, op)
        a = net.tensor(op.inputs[0]).orig_shape or net.tensor(op.inputs[0]).shape
        per_row = sum(t.elems for t in outs) // rows * (a[-1] if a else 1) + row_run * k
        share = row_share if k else 1.0  # a weight matrix, streamed once
        return int(round(per_row * (1 + share * (rows - 1))))
    return sum(t.elems for t in outs) + sum(net.tensor(t).elems for t in op.inputs)


def weight_runs(net: Network, op: Op) -> int:
    """The weight rows a matmul streams counted once for each of its output rows (:func:`global_work` with a row
    share of 1, as the fit's table holds it): what its ``row_run`` multiplies there."""
    return weight_rows(net, op) * output_rows(net, op)


def output_rows(net: Network, op: Op) -> int:
    """The rows of a matmul's output: its elements over its last axis (a classifier head's ``1 x N``: 1)."""
    o = net.tensor(op.outputs[0])
    return max(1, o.elems // max(1, (o.orig_shape or o.shape)[-1]))


def weight_rows(net: Network, op: Op) -> int:
    """The rows of a matmul's weight matrix its kernel streams (its contraction: the first operand's last axis),
    or 0 for an op without one."""
    if op.type not in ("Gemm", "MatMul") or not op.inputs or not any(len(w.shape) >= 2 for w in op.weights):
        return 0
    a = net.tensor(op.inputs[0]).orig_shape or net.tensor(op.inputs[0]).shape
    return int(a[-1]) if a else 1


@dataclass(frozen=True)
class DmaFit:
    """One transfer kind's GDMA constants: ``c + max(bytes / bw, k * runs + k_point * point runs)``."""

    c: float
    bw: float  # bytes per cycle while streaming
    k: float  # cycles per contiguous run
    k_point: float = 0.0  # extra cycles per run of a single element
    point_cap: int | None = None  # a transfer of single elements costs no more past this many runs

    def cycles(self, nbytes: int, runs: int, point: bool) -> float:
        if point and self.point_cap is not None:
            runs = min(runs, self.point_cap)
        return self.c + max(nbytes / self.bw, self.k * runs + (self.k_point * runs if point else 0.0))


@dataclass(frozen=True)
class CoreTerms:
    """A fit's several-core terms (``cores`` in the constants, written by ``benchmarks/settings.py --fit-cores``):
    each core family's global-layer speed-up and a conv's and weighted matmul's channel exponent, measured on
    ``measured_cores`` cores (:func:`global_speedup_of`), the groups' fitted GDMA slowdown and sync (None: the
    analytic ones), and the held-out whole-model error they were written with."""

    slowdown: float | None = None
    sync: int = 0
    measured_cores: int = 0  # 0: no global-layer speed-ups measured
    global_speedup: dict[str, float] = field(default_factory=dict)  # core_family -> speed-up
    channel_exponent: dict[str, float] = field(default_factory=dict)  # conv / matmul: channel_cores ** e
    held_out_error: float | None = None
    # what lgopt's search at the default margin measured when priced by these terms ("" where never measured):
    # the several-core search is trusted without a judge only where this is set (lgopt.tpumlir.space)
    search_checked: str = ""

    @staticmethod
    def from_json(d: dict[str, Any]) -> CoreTerms:
        return CoreTerms(None if "slowdown" not in d else float(d["slowdown"]), int(d.get("sync", 0)),
                         int(d.get("measured_cores", 0)),
                         {k: float(v) for k, v in d.get("global_speedup", {}).items()},
                         {k: float(v) for k, v in d.get("channel_exponent", {}).items()}, d.get("held_out_error"),
                         str(d.get("search_checked", "")))


@dataclass(frozen=True)
class ChipConstants:
    """One chip's fitted constants (``lgopt/cost/models/<chip>.json``)."""

    issue: int
    tiu: dict[str, tuple[int, float]]  # category -> (a, b): a + b * work
    gdma: dict[str, DmaFit]  # transfer kind (load, store, weight) -> its constants
    glob: dict[str, tuple[float, float]]  # non-local op type -> (a, b): a + b * global_work
    glob_local: dict[str, float] = field(default_factory=dict)  # layer-group op type run globally -> scale
    glob_local_a: dict[str, float] = field(default_factory=dict)  # ... -> cycles a global layer adds, beside it
    glob_bw: float | None = None  # bytes per cycle a global layer's transfers stream at (None: as in groups)
    glob_rows: float = 1.0  # a global Gemm's rows after the first, each this share of the first (global_work)
    min_slice_rows: int = 0  # activation slices of fewer rows stream slower than the fitted rates (0: unknown)
    cores: CoreTerms = field(default_factory=CoreTerms)  # several cores (none fitted: the analytic terms)
    source: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    dtype: str = "f16"  # the deployment measured: what the network computes in (a file without one is F16's)
    passes: dict[str, int] = field(default_factory=dict)  # category -> vector passes per pass_term unit (0 if none)
    fused_passes: bool = True  # a conv's fused activations are AR passes of their own (the fit's fused_passes_pay)
    glob_row_run: dict[str, float] = field(default_factory=dict)  # matmul type -> elements a weight row adds
    glob_one_pass: frozenset[str] = frozenset()  # global_local keys whose kernel runs a small layer in one pass

    @staticmethod
    def from_json(d: dict[str, Any]) -> ChipConstants:
        tiu = {k: (int(math.ceil(v["a"])), float(v["b"])) for k, v in d["tiu"].items()}
        g = d["gdma"]
        kinds = {k: DmaFit(float(v["c"]), float(v["bw"]), float(v["k"]), float(v.get("k_point", 0.0)),
                           int(v["point_cap"]) if v.get("point_cap") else None)
                 for k, v in g.items() if k in ("load", "store", "weight")}
        glob = {k: (float(v["a"]), float(v["b"])) for k, v in d.get("global", {}).items()}
        local = {k: float(v["scale"]) for k, v in d.get("global_local", {}).items()}
        local_a = {k: float(v.get("a", 0.0)) for k, v in d.get("global_local", {}).items()}
        bw = d.get("global_gdma", {}).get("bw")
        return ChipConstants(int(d["issue_cycles"]), tiu, kinds, glob, local, local_a,
                             None if bw is None else float(bw), float(d.get("global_rows", {}).get("share", 1.0)),
                             int(d.get("slice_rows", {}).get("min", 0)),
                             CoreTerms.from_json(d.get("cores", {})),
                             d.get("source", {}), str(d.get("dtype", "f16")).lower(),
                             {k: int(v["passes"]) for k, v in d["tiu"].items() if v.get("passes")},
                             bool(d.get("fused_passes", True)),
                             {k: float(v["row_run"]) for k, v in d.get("global", {}).items() if v.get("row_run")},
                             frozenset(k for k, v in d.get("global_local", {}).items() if v.get("one_pass")))

    def check(self, chip_name: str) -> None:
        """The contract's preconditions on the constants themselves."""
        bad = [k for k, (a, b) in self.tiu.items() if a < self.issue or b < 0]
        if bad or self.issue < 0:
            raise LgoptError(f"calibration {chip_name}: TIU constants break the contract (a >= issue, b >= 0): {bad}")
        if set(self.gdma) != {"load", "store", "weight"}:
            raise LgoptError(f"calibration {chip_name}: GDMA needs constants for load, store and weight transfers "
                             f"(has {', '.join(sorted(self.gdma)) or 'none'})")
        if any(f.c < 0 or f.bw <= 0 or f.k < 0 or f.k_point < 0 for f in self.gdma.values()):
            raise LgoptError(f"calibration {chip_name}: GDMA constants must be non-negative (bandwidth positive)")
        if not 0 <= self.glob_rows <= 1:
            raise LgoptError(f"calibration {chip_name}: a global Gemm's row share must be in [0, 1]")
        if self.glob_bw is not None and not self.glob_bw > 0:
            raise LgoptError(f"calibration {chip_name}: the global-layer GDMA rate must be positive")
        if any(v <= 0 for v in self.glob_local.values()) or any(v < 0 for v in self.glob_local_a.values()):
            raise LgoptError(f"calibration {chip_name}: global-layer scales must be positive")
        c = self.cores
        if not ((c.slowdown is None or c.slowdown >= 1) and c.sync >= 0):
            raise LgoptError(f"calibration {chip_name}: several cores must not speed transfers up (slowdown >= 1, "
                             "sync >= 0)")
        if any(not 0 < v <= max(1, c.measured_cores) for v in c.global_speedup.values()):
            raise LgoptError(f"calibration {chip_name}: a global layer's speed-up on several cores must be positive "
                             f"and at most the cores it was measured on ({c.measured_cores})")
        if any(not 0 <= v <= 1 for v in c.channel_exponent.values()):
            raise LgoptError(f"calibration {chip_name}: a channel exponent must be between 0 and 1 (a global conv "
                             "is at most as many times faster as the cores it spreads over)")
        if any(v < 0 for v in self.glob_row_run.values()):
            raise LgoptError(f"calibration {chip_name}: a global matmul's per-row overhead must be non-negative")
        if "default" not in self.tiu:
            raise LgoptError(f"calibration {chip_name}: no 'default' TIU category")


_CONSTANTS: dict[str, ChipConstants] = {}


def forget_constants() -> None:
    """Drop every constant read and every price memoised from them: the next lookup reads the files again.  A
    fit writes constants and prices with them in the same process (``lgopt fit``)."""
    _CONSTANTS.clear()
    _calibrated_tiu.cache_clear()
    _calibrated_gdma.cache_clear()
    _min_issue.cache_clear()


def load_constants(chip_name: str, directory: Path | None = None) -> ChipConstants:
    """The constants of ``chip_name`` (cached), from ``directory`` or the shipped calibration files."""
    key = f"{directory}:{chip_name}"
    c = _CONSTANTS.get(key)
    if c is None:
        path = (directory or CALIBRATION_DIR) / f"{chip_name.lower()}.json"
        if not path.exists():
            have = sorted(p.stem for p in (directory or CALIBRATION_DIR).glob("*.json"))
            raise LgoptError(f"cost model {MODEL_NAME!r} has no calibration for chip {chip_name!r} "
                             f"(calibrated: {', '.join(have) or 'none'}); fit one with lgopt fit")
        c = ChipConstants.from_json(json.loads(path.read_text()))
        c.check(chip_name)
        _CONSTANTS[key] = c
    return c


@dataclass(frozen=True)
class CalibratedModel:
    """Analytic work terms with per-chip, per-category constants fitted on TPU-MLIR's timeline."""

    name: str = MODEL_NAME
    directory: str | None = None  # where the per-chip JSON files are (None: lgopt/cost/models)
    free_views: bool = True  # reshapes and one-batch channel slices run globally cost 0 on the timeline
    rebalance_loads: bool = True  # TPU-MLIR moves a one-slice group's weight loads to rows with spare GDMA
    pipelined_preloads: bool = True  # ... and loads a sliced group's resident weights during its first slice
    f32_io: bool = True  # TPU-MLIR's F16 deployment keeps the graph's inputs and outputs f32 and converts them

    def covers(self, chip_name: str, dtype: str) -> bool:
        """Whether constants were fitted for ``chip_name`` computing in ``dtype`` (each file states the deployment
        it measured: the shipped ``models/`` F16, ``models/int8/`` INT8)."""
        d = Path(self.directory) if self.directory else None
        if not ((d or CALIBRATION_DIR) / f"{chip_name.lower()}.json").exists():
            return False
        return load_constants(chip_name, d).dtype == dtype.lower()

    def unfitted(self, chip: Chip, net: Network) -> list[str]:
        """The ops of ``net`` the fit saw nothing like, whose figures are the model's guess, not a fit (an
        architecture the calibration never saw): a layer-group op whose TIU category and family both fall to the
        ``default`` line, and an op whose type the fitted-on models never had run that way (in a group, or as a
        global layer: ``source.op_types_seen``, recorded by ``lgopt fit``).  Views of GMEM cost nothing either way.

        >>> from lgopt.hw.chip import get_chip
        >>> from lgopt.io.problem import load_problem
        >>> CalibratedModel().unfitted(get_chip("bm1684x"), load_problem("problems/resnet18.json"))
        []
        """
        k = self.constants(chip)
        seen = k.source.get("op_types_seen") or {}
        out = []
        for op in net.ops:
            where = "local" if op.local else "global"
            if seen and where in seen and op.type not in seen[where] and not gmem_view(net, op):
                out.append(op.name)
            elif op.type in opsem.OP_SPECS and op.local:
                cat, fam = tiu_category(chip, net, op)
                if cat not in k.tiu and fam not in k.tiu:
                    out.append(op.name)
        return out

    def constants(self, chip: Chip) -> ChipConstants:
        return load_constants(chip.name, Path(self.directory) if self.directory else None)

    @property
    def issue_cycles(self) -> int:
        """The smallest intercept over the shipped chips (a chip's own is ``constants(chip).issue``)."""
        return _min_issue(self.directory)

    def tiu_cycles(self, chip: Chip, net: Network, op: Op, sl: SliceShape) -> int:
        return _calibrated_tiu(self, chip, net, op, sl)

    def gdma_cycles(self, chip: Chip, nbytes: int, segments: int = 1, kind: DmaKind = "load",
                    point_runs: bool = False) -> int:
        return _calibrated_gdma(self, chip, nbytes, segments, kind, point_runs)

    def global_compute(self, chip: Chip, net: Network, op: Op) -> int:
        outs = [net.tensor(t) for t in op.outputs]
        if gmem_view(net, op):
            return 0
        k = self.constants(chip)
        if chip.local(op):
            o = outs[0]
            sl = SliceShape(o.n, o.h, net.tensor(op.inputs[0]).h if op.inputs else o.h)
            if lane_copy(chip, net, op):  # a global Concat or Slice copies in GMEM: no lane is crossed
                a, b = k.tiu.get(tiu_category(chip, net, op)[1]) or k.tiu["default"]
                return a + int(math.ceil(b * (work_term(chip, net, op, sl) - lane_crossing_work(chip, net, op, sl))))
            return self.tiu_cycles(chip, net, op, sl)
        runs = permute_runs(net, op)
        if runs:  # a Transpose keeping its innermost axis: a strided copy, a GDMA descriptor per run
            return int(math.ceil(k.gdma["load"].k * runs))
        if op.type not in k.glob and op.type in opsem.OP_SPECS and op.outputs and op.inputs:
            # a layer-group op type lgopt runs globally only for its shape (mobilenet_v3's [1, 1024] hard-swish
            # Mul) and the fit never saw global: its kernel's cycles, not the line over every global layer
            # (about 8,000 cycles: 12x what TPU-MLIR's timeline shows for that Mul)
            o = outs[0]
            return self.tiu_cycles(chip, net, op, SliceShape(o.n, o.h, net.tensor(op.inputs[0]).h))
        ab = k.glob.get(op.type) or k.glob.get("default")
        if ab is None:
            return AnalyticModel(issue_cycles=k.issue).global_compute(chip, net, op)
        return int(math.ceil(ab[0] + ab[1] * global_work(net, op, k.glob_rows, k.glob_row_run.get(op.type, 0.0))))

    def global_scale(self, chip: Chip, net: Network, op: Op, bound: Bound | None = None) -> float:
        """The type's scale for the engine that bounds it (``Conv/tiu``: VGG's and UNet's big convs run at 1.04x
        their compute, ``Conv/gdma`` the transfer-bound ones of the mobile networks well above their bytes'
        time), else the type's own; with ``bound`` None the smaller of the two (a lower bound's)."""
        local = self.constants(chip).glob_local
        key = fitted_key(local, net, op)
        if bound is None:
            return min(_per_bound(local, key, "tiu", 1.0), _per_bound(local, key, "gdma", 1.0))
        return _per_bound(local, key, bound, 1.0)

    def global_overhead(self, chip: Chip, net: Network, op: Op, bound: Bound) -> int:
        """Cycles a layer-group op type run as a global layer spends beside ``scale * max(compute, transfers)``
        (launch and the first and last tile's unhidden transfer: it decides the small layers of the mobile
        networks, not VGG's)."""
        k = self.constants(chip)
        return int(_per_bound(k.glob_local_a, fitted_key(k.glob_local, net, op), bound, 0.0))

    def global_one_pass(self, chip: Chip, net: Network, op: Op) -> bool:
        """Whether ``op`` run as a global layer loads, computes and stores in turn (:func:`one_pass`), where the
        fit found its type's kernel does so (``one_pass`` on its ``global_local`` line)."""
        k = self.constants(chip)
        return fitted_key(k.glob_local, net, op) in k.glob_one_pass and one_pass(chip, net, op)

    def global_line(self, chip: Chip, net: Network, op: Op) -> bool:
        """The types :meth:`global_compute` prices by their own fitted line (not the ``default`` one: a type the
        fit never saw keeps its transfers as a floor)."""
        return (not chip.local(op) and op.type in self.constants(chip).glob and not gmem_view(net, op)
                and not permute_runs(net, op))

    def cores(self, chip: Chip, busy: int) -> tuple[float, int]:
        """The fitted slowdown and sync (``cores`` in the constants, from measurements on several cores), else
        the analytic model's."""
        fitted = self.constants(chip).cores
        if busy <= 1 or fitted.slowdown is None:
            return core_terms(chip, busy)
        return max(1.0, fitted.slowdown), max(0, fitted.sync)

    def global_speedup(self, chip: Chip, net: Network, op: Op) -> float | None:
        """:func:`global_speedup_of` this chip's constants."""
        return global_speedup_of(self.constants(chip), chip, net, op)

    def global_dma_cycles(self, chip: Chip, transfers: Sequence[Transfer]) -> int | None:
        k = self.constants(chip)
        if k.glob_bw is None:
            return None
        total = 0
        for nbytes, runs, point, kind in transfers:  # a group's run costs, streaming at the global kernels' rate
            total += _within_chip(chip, nbytes, replace(k.gdma[kind], bw=k.glob_bw).cycles(nbytes, max(1, runs), point))
        return total




GLOBAL_FALLBACK = {"ConvTranspose": "Conv"}  # a type no global layer of the fit showed -> the type it runs like


def fitted_key(table: dict[str, float], net: Network, op: Op) -> str:
    """The key a global layer's constants are looked up by: :func:`scale_key`, or where the fit saw no global
    layer of that type, the type it runs like.  unet_small's transposed convs are the calibration's only global
    ones and the fit holds that model out: at the default scale of 1 they were a third under on BM1688
    (524,289 predicted, 668,653-752,723 measured); as convs, TPU-MLIR's global conv kernels' fixed cycles and
    rate."""
    key = scale_key(net, op)
    if any(k == key or k.startswith(key + "/") for k in table):
        return key
    other = GLOBAL_FALLBACK.get(op.type)
    return key if other is None else key.replace(op.type, other, 1)


def _per_bound(table: dict[str, float], key: str, bound: str, default: float) -> float:
    """A global layer's fitted constant for its type and bounding engine (``Conv/tiu``), else its type's."""
    return table.get(f"{key}/{bound}", table.get(key, default))


@lru_cache(maxsize=8)
def _min_issue(directory: str | None) -> int:
    d = Path(directory) if directory else CALIBRATION_DIR
    vals = [load_constants(p.stem, Path(directory) if directory else None).issue for p in sorted(d.glob("*.json"))]
    return min(vals) if vals else 0


@lru_cache(maxsize=1 << 16)
def _calibrated_tiu(model: CalibratedModel, chip: Chip, net: Network, op: Op, sl: SliceShape) -> int:
    k = model.constants(chip)
    cat, fam = tiu_category(chip, net, op)
    w = work_term(chip, net, op, sl) if op.type in opsem.OP_SPECS else 0
    return tiu_price(k, cat, fam, w, pass_term(chip, net, op, sl), fused_work(chip, net, op, sl))


def global_speedup_of(k: ChipConstants, chip: Chip, net: Network, op: Op,
                      exponents: dict[str, float] | None = None) -> float | None:
    """A global layer's speed-up on ``chip.used_cores`` cores by its :func:`core_family`, where the constants were
    measured on that many cores (else None: the cores share it evenly).  A one-row weighted matmul (a classifier
    head) whose line has a per-row overhead as :func:`row_speedup`, where the cores split matmuls at all (a
    channel exponent above 0; BM1688's F16 ones run on one core, its INT8 ones on both); a conv or another
    weighted matmul spreads over :func:`channel_cores`, ``channel_cores ** e`` faster (``cores.channel_exponent``,
    or ``exponents`` while they are being fitted; TPU-MLIR 1.30's INT8 convs: ``e = 0``, one core; a float matmul
    with a Relu fused in: one core, :func:`~lgopt.cost.work.one_core_matmul`); any other kind
    as measured op by op (``cores.global_speedup``; below 1 where several cores run it slower).  At most the cores
    in use, so the lower bound's divisor holds."""
    c = k.cores
    if chip.used_cores <= 1 or chip.used_cores != c.measured_cores:
        return None
    fam = core_family(op)
    e = (exponents if exponents is not None else c.channel_exponent).get(fam)
    split = bool(e) and channel_cores(chip, net, op) > 1  # e = 0, or a float Relu head: it runs on one core
    if fam == "matmul" and split and op.type in k.glob_row_run and op.type in k.glob:
        s = row_speedup(k, chip, net, op)
        if s is not None:
            return s
    s = float(channel_cores(chip, net, op)) ** e if e is not None else c.global_speedup.get(fam)
    return None if s is None else min(s, float(chip.used_cores))


def row_speedup(k: ChipConstants, chip: Chip, net: Network, op: Op) -> float | None:
    """How much faster ``chip.used_cores`` cores run a one-row weighted matmul than one (None: not one row).  Its
    time is its weight's load, row by row, each row a run with a fixed overhead (the line's ``row_run``,
    :func:`global_work`), and the cores split every row's columns, a lane's worth or more each: the line at
    ``N / cores`` columns against ``N``.  Op by op on TPU-MLIR 1.30's INT8 timelines the same overhead that
    prices the one-core heads gives the several-core ones: BM1690's 8 cores run a ``1 x 1000`` head 2.6-2.9x
    faster and a ``1 x 4096`` one 5.2x, BM1688's 2 cores 1.64x and 1.89x, where one exponent of the cores priced
    every head alike (6.5x on BM1690)."""
    rows = weight_rows(net, op)
    if not rows or output_rows(net, op) != 1:
        return None
    cols = net.tensor(op.outputs[0]).elems
    a, b = k.glob[op.type]
    n = max(1, min(chip.used_cores, cdiv(cols, chip.npu_num)))
    run = k.glob_row_run[op.type]
    return (a + b * rows * (cols + run)) / (a + b * rows * (cdiv(cols, n) + run))


def tiu_price(k: ChipConstants, cat: str, fam: str, work: int, passes: int, fused: int) -> int:
    """An op slice's fitted TIU cycles from its features: its category's (else its type's, for a ``/rows``
    category a file fitted before it had none, else its family's, else the default) line over its work and its
    counted passes, and its fused activations at the fused-pass rate."""
    key = next((c for c in (cat, cat.split("/")[0], fam) if c in k.tiu), "default")  # ``Add/rows`` unfitted: ``Add``
    a, b = k.tiu[key]
    w = work + k.passes.get(key, 0) * passes
    return a + int(math.ceil(b * w)) + int(math.ceil(fused_rate(k) * fused))


@lru_cache(maxsize=1 << 16)
def _calibrated_gdma(model: CalibratedModel, chip: Chip, nbytes: int, segments: int, kind: DmaKind,
                     point_runs: bool) -> int:
    return _within_chip(chip, nbytes, model.constants(chip).gdma[kind].cycles(nbytes, max(1, segments), point_runs))


def _within_chip(chip: Chip, nbytes: int, fitted: float) -> int:
    """A transfer's fitted cycles, never below the chip's latency nor faster than its peak bandwidth."""
    stream = nbytes * chip.tiu_mhz * 1e6 / (chip.gdma_gbps * 1e9)
    return max(chip.gdma_latency_cycles, int(math.ceil(fitted)), int(math.ceil(stream)))


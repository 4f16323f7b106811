"""The groups TPU-MLIR lays out with the rows over the lanes (``GROUP_SMALL_C``), for a network lowered like one
of its caches (:func:`lgopt.tpumlir.lowering.lower_like` applies the rule).

On BM1684X, BM1688 and BM1690 TPU-MLIR 1.30 types a group of more than one op ``GROUP_SMALL_C`` when every op
is an elementwise op of equal shapes, an activation, a cast, a MatMul whose head axis is not its batch, or a
LayerNorm or Softmax over the last axis, and every rank-4 operand ``[n, c, h, w]`` either spreads its
``n*c*h`` rows evenly over the lanes or has fewer channels than half the lanes and more rows than channels
(``can_be_group_small_c`` in its ``GroupMethod.cpp``).  Such a group holds a tensor as ``[n*c, h, w, 1]``:
the rows ``h`` over the lanes, the heads within each (``getNCHW`` with ``GROUP_SMALL_C``), where a group of
the ordinary type puts the ``c`` channels on the lanes.

ViT-B in INT8 on BM1688 runs each attention Softmax in f16 between two casts, a group of three ops: its
``1x12x197x197`` scores held channels on the lanes take 12 of 32 lanes and 155,296 bytes of a 131,072-byte
lane; held as TPU-MLIR holds them, 7 rows of 12 x 197 a lane.  lgopt holds a tensor one way in every group, so
a tensor such a group of the cache touches is held rows over the lanes (``Tensor.rows_lanes``) wherever it
is grouped; BM1684-family chips and cv18xx never use the type.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from lgopt.hw.chip import Chip
from lgopt.hw.sizing import TPU_MLIR_FAMILY
from lgopt.model import ops as opsem
from lgopt.model.network import Network, Op, Tensor, check_network
from lgopt.tpumlir.cache import Cache, map_cache

VIT_ROWS = 197  # a rank-3 [b, 197, k] with b > 4 qualifies whatever its shape (TPU-MLIR's own ViT special case)


def hold_small_c(net: Network, cache: Cache, chip: Chip | None) -> tuple[Network, tuple[str, ...]]:
    """``net`` with every tensor of a ``GROUP_SMALL_C`` group of ``cache`` that TPU-MLIR holds differently from
    lgopt's channels-over-lanes (a rank-4 tensor with fewer channels than lanes and more rows than channels)
    held rows over the lanes, and one line per group that changed; ``net`` and no lines on other chips."""
    if chip is None or chip.conv_buffers not in TPU_MLIR_FAMILY:  # the BM1684X family's backend types them
        return net, ()
    cm = map_cache(net, cache)
    flipped: dict[str, Tensor] = {}
    notes = []
    for gi, group in enumerate(cache.groups):
        ops = [net.op(o) for o in cm.group_ops[gi]]
        if not small_c_group(net, ops, len(group.locs), chip):
            continue
        held = [t for op in ops for t in dict.fromkeys(op.inputs + op.outputs)
                if t not in flipped and _narrow(net.tensor(t), chip.npu_num)]
        flipped.update((t, replace(net.tensor(t), rows_lanes=True)) for t in held)
        if held:
            notes.append(f"group {gi} ({', '.join(op.name for op in ops)}): TPU-MLIR's GROUP_SMALL_C, "
                         f"{len(held)} tensor(s) held rows over the lanes")
    if not flipped:
        return net, ()
    tensors = {t: flipped.get(t, v) for t, v in net.tensors.items()}
    return check_network(Network(net.name, tensors, net.ops, net.inputs, net.outputs)), tuple(notes)


def small_c_group(net: Network, ops: Sequence[Op], n_locs: int, chip: Chip) -> bool:
    """Whether TPU-MLIR types a cache group of ``n_locs`` ops (its casts counted), lgopt's ``ops``, as
    ``GROUP_SMALL_C`` on ``chip``: more than one op, each of them one the type lets in (:func:`small_c_op`), on a
    chip of the BM1684X family."""
    return (chip.conv_buffers in TPU_MLIR_FAMILY and n_locs >= 2 and bool(ops)
            and all(small_c_op(net, op, chip.npu_num) for op in ops))


# TPU-MLIR 1.30.2 backends (``Chip.conv_buffers``) that cut a small-C group's columns in F16 too, as all do in INT8
COLUMN_CUT_CHIPS = frozenset({"bm1688"})


def cuts_columns(chip: Chip, integer: bool) -> bool:
    """Whether ``hsecs > 1`` on a ``GROUP_SMALL_C`` group of channels-last tensors cuts their columns on ``chip``
    (a LayerNorm's among them, which it then cannot place), rather than running as row sections: in INT8 (the
    LayerNorm in f16 between two casts) on every chip, 15 of 15 scorings refused; in F16 on BM1688 too, ConvNeXt's
    ``LayerNorm -> MatMul -> Gelu -> MatMul`` group at ``hsecs = 2`` refused on 2 cores (3 of 3 scorings) and on
    one (at ``nsecs`` 2, 4, 7 and 14, made in session 24), while on BM1684X it compiles (``h_slice = [48, 48]``).

    >>> from lgopt.hw.chip import get_chip
    >>> [cuts_columns(get_chip(c), i) for c, i in (("bm1688", False), ("bm1684x", False), ("bm1684x", True))]
    [True, False, True]
    """
    return integer or chip.conv_buffers in COLUMN_CUT_CHIPS


def small_c_op(net: Network, op: Op, lanes: int) -> bool:
    """Whether TPU-MLIR lets ``op`` into a ``GROUP_SMALL_C`` group on a chip of ``lanes`` lanes: its kind, and
    the shape of its first operand (a rank-4 one spread evenly over the lanes, or with fewer channels than half
    the lanes and more rows than channels; a rank-3 ``[b > 4, 197, k]``)."""
    spec = opsem.OP_SPECS.get(op.type)
    if spec is None or not op.inputs or not _small_c_kind(net, op, spec.family):
        return False
    shape = net.tensor(op.inputs[0]).orig_shape or net.tensor(op.inputs[0]).shape
    if len(shape) == 4:
        n, c, h, _ = shape
        return (n * c * h) % lanes == 0 or (h > c and c < lanes // 2)
    return len(shape) == 3 and shape[0] > 4 and shape[1] == VIT_ROWS


def _small_c_kind(net: Network, op: Op, family: opsem.Family) -> bool:
    """The op kinds of ``can_be_group_small_c``: activations and casts, elementwise ops of equal shapes (a
    product by a constant only in float: INT8 lowers it to a MulShift, which the type excludes), a MatMul of two
    activations or with a weight, a LayerNorm or Softmax over the last axis."""
    if family is opsem.Family.UNARY:
        return True
    if family is opsem.Family.BINARY:
        if len(op.inputs) == 2:
            return net.tensor(op.inputs[0]).shape == net.tensor(op.inputs[1]).shape
        return op.type == "Mul" and net.tensor(op.inputs[0]).dtype != "int8"
    if family is opsem.Family.MATMUL:
        return True
    if op.type in ("Softmax", "LayerNormalization"):
        rank = len(net.tensor(op.inputs[0]).orig_shape or net.tensor(op.inputs[0]).shape)
        return int(op.attrs.get("axis", -1)) in (-1, rank - 1)
    return False


def _narrow(t: Tensor, lanes: int) -> bool:
    """Whether the group's remapping moves this tensor's data between lanes materially: rank 4, fewer channels
    than lanes and more rows than channels, not held rows over the lanes already."""
    shape = t.orig_shape or t.shape
    return len(shape) == 4 and not t.rows_on_lanes and shape[1] < lanes and shape[2] > shape[1]

"""What each op type means to a layer group: can it run locally, what can be
sliced, and which input rows and batches an output window needs.

Backward windows are half-open ``(start, end)`` row or batch ranges.  The
formulas follow the compilers' ``BackwardH`` (shared/reference s3.5) but clamp
exactly instead of always extending the last slice to the input's end, so a
window holds only rows the op really reads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from fractions import Fraction
from math import ceil, floor
from typing import Any, Callable, Mapping, Sequence

from lgopt.model.network import Network, Op, lane_shape_of, to_nchw

Window = tuple[int, int]


class Family(Enum):
    """How an op type reads its input rows and what kind of work it is: what the planner dispatches on."""

    CONV = "conv"  # sliding window with a filter (MAC array)
    DECONV = "deconv"  # transposed convolution
    POOL = "pool"  # sliding window, vector unit
    GLOBAL_POOL = "global_pool"  # reads every row of its input: not H-sliceable
    RESIZE = "resize"  # sampled rows (ONNX Resize coordinates)
    CONCAT = "concat"  # channel concatenation, or within each row (the last axis of a rank-3/4 tensor)
    BINARY = "binary"  # elementwise, two operands (one may broadcast)
    UNARY = "unary"  # elementwise activation
    RESHAPE = "reshape"  # a view: the same bytes in every lane, only the 4-D shape's H x W split changes
    CHANNEL_SLICE = "channel_slice"  # a run of channels (ShuffleNet's split), of each row's last axis (RoPE), of
    # a rank-3 tensor's rows (ViT's class token) or of whole batches (ViT's Q, K and V out of one [3, T, 1, D])
    MATMUL = "matmul"  # rows x [K, N] (a weight) or x a batch of [K, N] matrices: row m reads its own row of A
    ROWWISE = "rowwise"  # normalises each row over its last axis (Softmax, LayerNormalization): rows independent
    GROUP_NORM = "group_norm"  # normalises each batch's groups of channels over H and W: reads its whole input


@dataclass(frozen=True)
class OpSpec:
    """Everything lgopt's planner knows about one local op type, in one entry.

    Adding an op type of an existing family is one entry in :data:`OP_SPECS` (plus, for new math, a
    kernel in :mod:`lgopt.check.kernels`; ``docs/extending.md`` has the checklist).  The verifier keeps
    its own receptive-field rule per family on purpose (:mod:`lgopt.check.verify`).
    """

    type: str
    family: Family
    attrs: tuple[str, ...] = ()  # required attributes (a problem file must give them)
    filter: bool = False  # needs a weight with role "filter"
    eu_ops: int = 1  # vector-unit operations per output element (the cost model's elementwise work)
    table: bool = False  # a lookup-table / polynomial implementation: needs scratch (lgopt.hw.sizing)
    fusable: bool = False  # the importer folds it into its producer (the compilers' fused activations)
    rule: Callable[[Mapping[str, Any]], str] | None = None  # extra condition to be local: the reason when not

    @property
    def h_split(self) -> bool:
        """Whether the op may be sliced along H (a reshape only when it keeps H, a reduction only when it
        keeps the rows: :func:`classify`)."""
        return self.family not in (Family.GLOBAL_POOL, Family.GROUP_NORM)

    @property
    def ranks(self) -> tuple[int, ...]:
        """Ranks its activation operands may have.  Rank 3 ``[B, M, K]`` folds to ``(B, 1, M, K)`` (rows M
        sliced as H, held across the lanes).  Rank 2 ``[N, C]`` (a classifier's vectors) stays global: TPU-MLIR
        runs it so, and as ``(N, C, 1, 1)`` each channel would be a one-element transfer.  Except a BatchNorm,
        a per-channel scale whatever the rank: TPU-MLIR lowers one on ``[N, C]`` (RepViT's head after its global
        pooling) to a Scale on ``(N, C, 1, 1)`` and groups it with the pooling."""
        if self.type == "BatchNormalization":
            return (2, 3, 4)
        if self.family in (Family.BINARY, Family.UNARY, Family.MATMUL, Family.ROWWISE) or self.type == "ReduceMean":
            return (3, 4)
        return (4,)


MAX_POOL_STRIDE = 15  # TPU-MLIR makes pools with a larger stride global (reference s2.1)


def _pool_rule(attrs: Mapping[str, Any]) -> str:
    return f"stride above {MAX_POOL_STRIDE}" if max(attrs.get("strides", (1, 1))) > MAX_POOL_STRIDE else ""


def _concat_rule(attrs: Mapping[str, Any]) -> str:
    """A Concat joins channels (axis 1), each row's last axis (-1) or a rank-3 tensor's rows (-2: ViT's class
    token before its 196 patches, rows over the lanes as everywhere in a transformer group)."""
    return "not on the channel axis, the rows nor the last" if attrs.get("axis") not in (1, -1, -2) else ""


def _resize_rule(attrs: Mapping[str, Any]) -> str:
    return f"mode {attrs.get('mode')!r}" if attrs.get("mode") not in ("nearest", "linear") else ""


def _last_axis_rule(attrs: Mapping[str, Any]) -> str:
    return "not over the last axis alone" if attrs.get("axis") != -1 else ""


def lane_permute(attrs: Mapping[str, Any]) -> bool:
    """Whether a Transpose swaps the last two axes of a rank-4 ``[N, C, H, W]`` tensor, both longer than 1:
    each lane keeps its channels and transposes their H x W planes in place (the attention's K transposed,
    ``[1, 12, 197, 64] -> [1, 12, 64, 197]``), a copy on the vector unit, no data crossing lanes.

    >>> lane_permute({"perm": (0, 1, 3, 2), "in_dims": (1, 12, 197, 64)})
    True
    >>> lane_permute({"perm": (0, 2, 1, 3), "in_dims": (1, 12, 197, 64)})
    False
    """
    dims = tuple(attrs.get("in_dims", ()))
    return tuple(attrs.get("perm", ())) == (0, 1, 3, 2) and len(dims) == 4 and min(dims[2:]) > 1


def permute_run(attrs: Mapping[str, Any]) -> int:
    """Elements of the contiguous run a Transpose copies whole: the product of the trailing axes it leaves in
    place (axes of size 1 aside).  A permutation that keeps the innermost axis moves runs a GDMA streams; one
    that moves it (run 1) transposes elements.

    >>> permute_run({"perm": (0, 2, 1, 3, 4), "in_dims": (1, 2, 58, 28, 28)})  # ShuffleNet's channel shuffle
    784
    >>> permute_run({"perm": (0, 2, 1, 3), "in_dims": (1, 197, 12, 64)})  # attention heads out of the rows
    64
    >>> permute_run({"perm": (0, 2, 3, 1), "in_dims": (1, 96, 56, 56)})  # NCHW -> NHWC
    1
    """
    perm, dims = tuple(attrs.get("perm", ())), tuple(attrs.get("in_dims", ()))
    if len(perm) != len(dims):
        return 1
    moved = [p for p in perm if dims[p] != 1]
    run = 1
    for a, b in zip(reversed(moved), reversed(sorted(moved))):
        if a != b:
            break
        run *= dims[a]
    return run


def _transpose_rule(attrs: Mapping[str, Any]) -> str:
    """A permutation is layout-only when the axes it moves are all of size 1 (the others keep their order):
    then it is a reshape, judged as one; or a lane permute (:func:`lane_permute`).  ``in_dims`` is the
    input's shape (the importer records it)."""
    perm, dims = tuple(attrs.get("perm", ())), tuple(attrs.get("in_dims", ()))
    if len(perm) != len(dims):
        return "without its permutation"
    if lane_permute(attrs):
        return ""
    kept = [p for p in perm if dims[p] != 1]
    return "" if kept == sorted(kept) else "permutes axes (moves data between lanes)"


RESHAPE_TYPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def _slice_rule(attrs: Mapping[str, Any]) -> str:
    # channels, each row's last axis, a rank-3 tensor's rows, or whole batches (ViT's Q/K/V out of [3, T, 1, D])
    if attrs.get("axis") not in (0, 1, -1, -2):
        return "not on the channel axis alone, the rows, the last axis nor the batches"
    if attrs.get("step", 1) != 1 or not 0 <= attrs.get("start", -1) < attrs.get("end", -1):
        return "with a step or an empty or reversed range"
    return ""


_WINDOW = ("kernel", "strides", "pads")
OP_SPECS: dict[str, OpSpec] = {s.type: s for s in (
    OpSpec("Conv", Family.CONV, _WINDOW + ("group",), filter=True),
    OpSpec("ConvTranspose", Family.DECONV, _WINDOW + ("group",), filter=True),
    OpSpec("MaxPool", Family.POOL, _WINDOW, rule=_pool_rule),
    OpSpec("AveragePool", Family.POOL, _WINDOW, rule=_pool_rule),
    OpSpec("GlobalAveragePool", Family.GLOBAL_POOL),
    OpSpec("GlobalMaxPool", Family.GLOBAL_POOL),
    OpSpec("ReduceMean", Family.GLOBAL_POOL),  # over H and W, or over the last axis: _rank_reason
    OpSpec("Resize", Family.RESIZE, ("mode",), rule=_resize_rule),
    OpSpec("Concat", Family.CONCAT, ("axis",), rule=_concat_rule),
    *(OpSpec(t, Family.BINARY) for t in ("Add", "Sub", "Mul", "Div", "Max", "Min")),
    OpSpec("Pow", Family.BINARY, eu_ops=4, table=True),  # x**2 of a decomposed LayerNorm; exp(y*log x) in general
    # eu_ops: vector operations per element, an assumption of the cost model (docs/cost-model.md)
    OpSpec("Relu", Family.UNARY, eu_ops=1, fusable=True),
    OpSpec("Clip", Family.UNARY, eu_ops=2, fusable=True),  # a min and a max (TPU-MLIR: two AR commands)
    OpSpec("LeakyRelu", Family.UNARY, eu_ops=2, fusable=True),
    OpSpec("PRelu", Family.UNARY, eu_ops=2),
    OpSpec("BatchNormalization", Family.UNARY, eu_ops=2),
    # Sigmoid, HardSigmoid, HardSwish, Erf: read off TPU-MLIR 1.30.2's timelines of the zoo's tuning part, F16
    # (docs/cost-model.md, "Activations the fit never saw"): 9, 2.4 and 1.7 times what 6, 2 and 3 passes charged,
    # alike on BM1684X and BM1688; Erf 19x on BM1684X, 9x on BM1688, so the tuning rows' best of a grid; Tanh is
    # still the assumption
    OpSpec("Sigmoid", Family.UNARY, eu_ops=54, table=True),
    OpSpec("HardSigmoid", Family.UNARY, eu_ops=5, table=True),
    OpSpec("HardSwish", Family.UNARY, eu_ops=5, table=True),
    OpSpec("Tanh", Family.UNARY, eu_ops=6, table=True),
    OpSpec("Erf", Family.UNARY, eu_ops=90, table=True),
    OpSpec("SiLU", Family.UNARY, eu_ops=7, table=True),
    OpSpec("Neg", Family.UNARY, eu_ops=1),  # rotary embeddings' rotate_half
    # an INT8 requantisation (int32 -> int8) TPU-MLIR runs apart from a ConvTranspose: made by the lowering
    # (lgopt.tpumlir.lowering.split_requant), never imported
    OpSpec("Requant", Family.UNARY, eu_ops=2),
    OpSpec("Sqrt", Family.UNARY, eu_ops=4, table=True),
    OpSpec("Gelu", Family.UNARY, ("approximate",), eu_ops=10, table=True),  # ONNX Gelu: erf or tanh form
    # transformers (issue 16): rows of [.., M, K] operands; K on W.  eu_ops per element of the row
    OpSpec("MatMul", Family.MATMUL),
    OpSpec("Softmax", Family.ROWWISE, ("axis",), eu_ops=8, table=True, rule=_last_axis_rule),
    OpSpec("LayerNormalization", Family.ROWWISE, ("axis", "epsilon"), eu_ops=7, table=True, rule=_last_axis_rule),
    # torch's GroupNorm (Reshape, InstanceNormalization, Reshape) or ONNX's, as TPU-MLIR's front end makes it one
    # tpu.GroupNorm: ~16 vector passes an element (a synthetic two-GroupNorm model, docs/cost-model.md)
    OpSpec("GroupNormalization", Family.GROUP_NORM, ("num_groups", "epsilon"), eu_ops=16),
    # a view in LMEM (each lane keeps its channels' bytes, in order), one copy on the vector unit in TPU-MLIR
    *(OpSpec(t, Family.RESHAPE) for t in RESHAPE_TYPES),
    OpSpec("Transpose", Family.RESHAPE, ("perm", "in_dims"), rule=_transpose_rule),
    # channels [start, end): a copy that moves them to lane 0 on; TPU-MLIR groups it (ShuffleNet v2)
    OpSpec("Slice", Family.CHANNEL_SLICE, ("axis", "start", "end"), rule=_slice_rule),
)}


def group_count_error(attrs: Mapping[str, Any], channels: int) -> str:
    """Why a GroupNormalization's ``num_groups`` is not a valid one for ``channels`` input channels ("" when it is):
    ONNX asks for a positive count that divides them.

    >>> group_count_error({"num_groups": 5}, 12), group_count_error({"num_groups": 4}, 12)
    ('num_groups 5 does not divide its 12 channels', '')
    """
    g = attrs.get("num_groups")
    if not isinstance(g, int) or g < 1:
        return f"num_groups {g!r} is not a positive count"
    return f"num_groups {g} does not divide its {channels} channels" if channels % g else ""


def _types(family: Family) -> frozenset[str]:
    return frozenset(t for t, s in OP_SPECS.items() if s.family is family)


CONV_TYPES = _types(Family.CONV)
DECONV_TYPES = _types(Family.DECONV)
POOL_TYPES = _types(Family.POOL)
GLOBAL_POOL_TYPES = _types(Family.GLOBAL_POOL)
BINARY_TYPES = _types(Family.BINARY)
UNARY_TYPES = _types(Family.UNARY)
FUSABLE_ACTIVATIONS = frozenset(t for t, s in OP_SPECS.items() if s.fusable)
TABLE_ACTIVATIONS = frozenset(t for t, s in OP_SPECS.items() if s.table)
LOCAL_TYPES = frozenset(OP_SPECS)
_FAMILY = {t: s.family for t, s in OP_SPECS.items()}


def eu_ops(op_type: str) -> int:
    """Vector-unit operations per element of ``op_type`` (1 for a type lgopt does not know)."""
    spec = OP_SPECS.get(op_type)
    return spec.eu_ops if spec is not None else 1


def lane_form(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(batches, lane-axis length, elements per lane-axis entry) of a tensor of this (true) shape in LMEM."""
    n, c, h, w = lane_shape_of(shape)
    return n, c, h * w


def reshape_is_view(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> str:
    """Why a reshape moves data between lanes or batches ("" when it is a view in LMEM).

    In LMEM a tensor's channels (a rank-3 tensor's rows) are spread over the lanes and each one's
    elements are contiguous in its lane, so a reshape that keeps the batches, the lane axis and the
    elements per lane is free of data movement: ``(1, 512, 1, 1) -> (1, 512)`` (a Flatten after global
    pooling) is one, and so is a transformer's head split ``(1, 197, 768) -> (1, 197, 12, 64)``; the
    channel shuffle's ``(1, 116, 28, 28) -> (1, 2, 58, 28, 28)`` is not.

    >>> reshape_is_view((1, 512, 1, 1), (1, 512))
    ''
    >>> reshape_is_view((1, 197, 768), (1, 197, 12, 64))
    ''
    >>> reshape_is_view((1, 116, 28, 28), (1, 2, 58, 28, 28))
    'moves data between lanes or batches: (1, 116, 784) -> (1, 2, 45472) as (batches, lanes, per lane)'
    """
    a, b = lane_form(in_shape), lane_form(out_shape)
    if a == b:
        return ""
    return f"moves data between lanes or batches: {a} -> {b} as (batches, lanes, per lane)"


def lane_move(op_type: str, attrs: Mapping[str, Any], in_shapes: Sequence[tuple[int, ...]],
              out_shape: tuple[int, ...]) -> str:
    """Why a Transpose or a reshape moves data between lanes or batches in LMEM (``""`` when it is a view or a
    lane permute): such an op cannot be cut into slices, since a slice of its output reads a scattered part of
    its input.  TPU-MLIR still runs the attention's permutes inside groups it holds whole (its canonicalisation
    folds them into ``hdim_is_batch`` MatMuls, and ViT-Tiny becomes one unsliced group):
    :func:`lgopt.tpumlir.lowering.lower_like` makes those local, never sliced.

    >>> lane_move("Transpose", {"perm": (0, 2, 1, 3), "in_dims": (1, 197, 3, 64)}, [(1, 197, 3, 64)], (1, 3, 197, 64))
    'permutes axes (moves data between lanes)'
    >>> lane_move("Reshape", {}, [(1, 197, 192)], (1, 197, 3, 64))
    ''
    """
    ins = list(in_shapes)
    if op_type == "Slice" and attrs.get("axis") == 0:  # a batch picked and re-laid (a Gather dropping its axis)
        return _rank_reason(OP_SPECS[op_type], attrs, ins, [out_shape])
    if op_type == "Slice" and attrs.get("step", 1) == 1:  # within the folded H axis (Swin's shifted windows)
        return _slice_rule(attrs) or _rank_reason(OP_SPECS[op_type], attrs, ins, [out_shape])
    if op_type == "Concat":  # joined within the folded H axis (Swin's shifted windows put back)
        return _concat_rule(attrs) or _rank_reason(OP_SPECS[op_type], attrs, ins, [out_shape])
    if _FAMILY.get(op_type) is not Family.RESHAPE or len(ins) != 1 or (op_type == "Transpose" and lane_permute(attrs)):
        return ""
    return (_transpose_rule(attrs) if op_type == "Transpose" else "") or reshape_is_view(ins[0], out_shape)


def keeps_batches(op_type: str, attrs: Mapping[str, Any], in_shapes: Sequence[tuple[int, ...]],
                  out_shape: tuple[int, ...]) -> bool:
    """Whether a move between lanes keeps each batch's data to itself (a permute leaving axis 0 first, a reshape
    of the same leading dimension), so a group may still cut it into batch slices (MobileViT's patches as batches,
    which TPU-MLIR N-slices on BM1688).

    >>> keeps_batches("Transpose", {"perm": (0, 2, 1, 3)}, [(4, 64, 3, 32)], (4, 3, 64, 32))
    True
    >>> keeps_batches("Squeeze", {}, [(1, 4, 3, 64, 32)], (4, 3, 64, 32))
    False
    """
    if len(in_shapes) != 1 or not in_shapes[0] or not out_shape or in_shapes[0][0] != out_shape[0]:
        return False
    return op_type in RESHAPE_TYPES or (op_type == "Transpose" and tuple(attrs.get("perm", (1,)))[0] == 0)


def whole_only(op_type: str, attrs: Mapping[str, Any], in_shapes: Sequence[tuple[int, ...]],
               out_shape: tuple[int, ...], has_weights: bool = False) -> str:
    """Why an op lgopt runs as a global layer is well defined in a group only when the group holds it whole
    (``""`` when it is not such an op): a move between lanes (:func:`lane_move`), or an elementwise op whose
    operands' ranks lgopt's NCHW fold cannot express (Swin's shifted-window mask, ``[1, 64, 3, 49, 49]`` plus
    ``[1, 64, 1, 49, 49]``), computed on the true shapes.  :func:`lgopt.tpumlir.attention.hold_moves` makes
    such ops local where TPU-MLIR runs them in an unsliced group."""
    why = lane_move(op_type, attrs, in_shapes, out_shape)
    spec = OP_SPECS.get(op_type)
    if why or spec is None or spec.family not in (Family.BINARY, Family.UNARY):
        return why
    if spec.family is Family.UNARY and (has_weights or len(in_shapes) != 1):
        return ""
    return _rank_reason(spec, attrs, list(in_shapes), [out_shape])


def _rank_reason(spec: OpSpec, attrs: Mapping[str, Any], in_shapes: list[tuple[int, ...]],
                 out_shapes: list[tuple[int, ...]]) -> str:
    """Why the operands' ranks keep the op global ("" when they do not)."""
    ranks = {len(s) for s in in_shapes + out_shapes}
    if spec.family in (Family.CONCAT, Family.CHANNEL_SLICE) and attrs.get("axis") == -1:  # within each row
        return "" if len(ranks) == 1 and ranks <= {3, 4} else "on the last axis of other than one rank 3 or 4"
    if spec.family in (Family.CONCAT, Family.CHANNEL_SLICE) and attrs.get("axis") == -2 and "row_block" in attrs:
        return "" if ranks == {4} else "on the image rows of other than rank-4 tensors"  # image_rows: [N, H, W, C]
    if spec.family is Family.CONCAT and attrs.get("axis") == -2:  # the rows of [B, M, K]
        return "" if ranks == {3} else "on the rows of other than rank-3 tensors"
    if spec.family is Family.CHANNEL_SLICE and attrs.get("axis") == -2:  # rows of [B, M, K] out, [B, K] one row
        ok = [len(s) for s in in_shapes] == [3] and len(out_shapes) == 1 and (
            len(out_shapes[0]) == 3 or (len(out_shapes[0]) == 2 and attrs.get("end", 0) - attrs.get("start", 0) == 1))
        return "" if ok else "on the rows of other than a rank-3 tensor"
    if spec.family is Family.CHANNEL_SLICE and attrs.get("axis") == 0:  # batches, each laid out as it was
        want = (attrs.get("end", 0) - attrs.get("start", 0),) + lane_form(in_shapes[0])[1:] if in_shapes else ()
        ok = len(in_shapes) == 1 and len(out_shapes) == 1 and lane_form(out_shapes[0]) == want
        return "" if ok else "on the batches, changing how each batch lies over the lanes"
    if spec.type == "ReduceMean":  # over H and W of a 4-D tensor (any rank out), or each row's last axis
        axes, r = tuple(sorted(attrs.get("axes", ()))), len(in_shapes[0]) if in_shapes else 0
        if r == 4 and axes == (2, 3):
            return ""
        if r in spec.ranks and axes == (r - 1,) and ranks == {r}:
            return ""
        return "not over H and W, nor over the last axis with keepdims"
    if not ranks <= set(spec.ranks):
        if spec.ranks == (4,):
            return "on non-4-D tensors"
        return f"on rank-{max(ranks - set(spec.ranks))} tensors (rank {', '.join(map(str, spec.ranks))} only)"
    if len(ranks) > 1:  # operands of different rank fold differently: broadcasts run only between equal ranks
        return "with operands of different rank"
    if ranks == {3} and len({s[1] == 1 for s in in_shapes + out_shapes}) > 1:  # [S, 1, K] folds its S as rows
        return "broadcasting a sequence-first [S, 1, K] operand against [B, M, K]"
    return ""


def _matmul_reason(attrs: Mapping[str, Any], in_shapes: list[tuple[int, ...]], out_shapes: list[tuple[int, ...]],
                   has_filter: bool) -> str:
    """Why a MatMul's operands keep it global: B must be a [K, N] weight or a batch of matrices laid out
    like A (same batches, or one broadcast; same lane axis when rank 4)."""
    if has_filter:
        return "" if len(in_shapes) == 1 else "with a weight and two activations"
    if len(in_shapes) != 2:
        return "with a constant operand of rank other than 2"
    a, b = lane_shape_of(in_shapes[0]), lane_shape_of(in_shapes[1])
    if b[0] not in (1, a[0]) or (len(in_shapes[0]) == 4 and b[1] != a[1]):
        return "whose batch dimensions broadcast"
    return ""


# why a type lgopt never groups is global, where more can be said than that (a Gemm between reshapes of a
# sequence's rows is imported as the row MatMul it is: lgopt.io.onnx_import's _row_gemms)
GLOBAL_TYPE_REASONS = {"Gemm": "Gemm on rank-2 [N, C] vectors runs as a global layer, as in TPU-MLIR"}


def global_type_reason(op_type: str) -> str:
    """Why an op of a type that has no local form runs as a global layer.

    >>> global_type_reason("NonMaxSuppression")
    'NonMaxSuppression is not a layer-group op'
    """
    return GLOBAL_TYPE_REASONS.get(op_type, f"{op_type} is not a layer-group op")


def classify(op_type: str, attrs: Mapping[str, Any], in_shapes: list[tuple[int, ...]],
             out_shapes: list[tuple[int, ...]], has_filter: bool = False) -> tuple[bool, bool, bool, str]:
    """(local, h_split, n_split, reason-if-global) for an op of this type and attributes on operands of
    these (true, unfolded) shapes (``has_filter``: its second MatMul operand is a weight).

    >>> classify("Flatten", {}, [(1, 512, 1, 1)], [(1, 512)])
    (True, True, True, '')
    >>> classify("Relu", {}, [(1, 8, 4, 4, 4)], [(1, 8, 4, 4, 4)])[3]
    'Relu on rank-5 tensors (rank 3, 4 only)'
    """
    spec = OP_SPECS.get(op_type)
    if spec is None:
        return False, False, False, global_type_reason(op_type)
    why = spec.rule(attrs) if spec.rule is not None else ""
    if spec.family is Family.RESHAPE:  # judged on its layout in LMEM
        if len(in_shapes) != 1 or len(out_shapes) != 1:
            return False, False, False, f"{op_type} with {len(in_shapes)} data inputs"
        if op_type == "Transpose" and lane_permute(attrs):  # rows become columns: a group with it is not H-sliced
            return True, False, True, ""
        why = why or reshape_is_view(in_shapes[0], out_shapes[0])
        if not why:  # H may be sliced when the view keeps it, lying the same way (then it keeps W too)
            a, b = in_shapes[0], out_shapes[0]
            same_h = to_nchw(a)[2] == to_nchw(b)[2] and (len(a) == 3) == (len(b) == 3)
            return True, same_h, True, ""
    why = why or _rank_reason(spec, attrs, in_shapes, out_shapes)
    if not why and spec.family is Family.MATMUL:
        why = _matmul_reason(attrs, in_shapes, out_shapes, has_filter)
    if why:
        return False, False, False, f"{op_type} {why}"
    if op_type in ("Concat", "Slice") and attrs.get("axis") == -2:  # rows joined or cut: not H-sliced
        return True, False, True, ""
    if op_type == "Slice" and attrs.get("axis") == 0:  # whole batches taken out: a group with it is not sliced
        return True, False, False, ""
    if op_type == "ReduceMean":  # keeps the rows (may be H-sliced) when it reduces the last axis alone
        return True, tuple(sorted(attrs.get("axes", ()))) == (len(in_shapes[0]) - 1,), True, ""
    return True, spec.h_split, True, ""


def channels_last(ops: Sequence[Op], shapes: Mapping[str, tuple[int, ...]]) -> frozenset[str]:
    """The rank-4 tensors to hold as ``[N, H*W, C]`` rows across the lanes, not NCHW-style.

    A ConvNeXt block permutes ``[N, C, H, W]`` to ``[N, H, W, C]``, runs LayerNorm, two MatMuls and GELU on
    the last axis, and permutes back.  Folded NCHW-style its H would sit on the lanes (7 of 64 in the last
    stage); TPU-MLIR remaps such chains (``GROUP_SMALL_C``).  A rank-4 tensor is held rows-on-lanes when every
    op that touches it, and every rank-4 tensor those ops touch, is a local row op (elementwise, row-wise,
    a last-axis ReduceMean, a MatMul with a weight, a Slice or Concat of the last axis, or of axis 1 where some
    op of the block works on the last axis: the image rows ``H``, Swin's cyclic shift, a run of rows,
    :func:`image_rows`; elsewhere axis 1 is NCHW's channels) or a global layer that only moves data
    (a permute, a reshape, a slice or concat: what it reads and writes lives in GMEM, as the ONNX file lays
    it out).  Deterministic in the ops and shapes, so the importer and the problem loader agree.
    """
    parent: dict[str, str] = {}

    def find(t: str) -> str:
        while parent.setdefault(t, t) != t:
            t = parent[t]
        return t

    bad: set[str] = set()
    last_axis: list[str] = []  # a tensor of each op that works on the last axis: the block is [N, H, W, C]
    rows_of_images: list[str] = []  # a tensor of each Slice or Concat of axis 1, the image rows only then
    for op in ops:
        t4 = [t for t in dict.fromkeys(op.inputs + op.outputs) if len(shapes[t]) == 4]
        family = _FAMILY.get(op.type)
        moves = family in (Family.RESHAPE, Family.CHANNEL_SLICE, Family.CONCAT)
        if not t4 or (moves and not op.local):
            continue
        on_last = op.local and (family is Family.ROWWISE or (moves and op.attrs.get("axis") == -1)
                                or (family is Family.MATMUL and any(w.role == "filter" for w in op.weights))
                                or (op.type == "ReduceMean" and op.h_split))
        image = op.local and moves and family is not Family.RESHAPE and _image_rows_axis(op, shapes)
        row = on_last or image or (op.local and family in (Family.BINARY, Family.UNARY))
        if not row or any(len(w.shape) == 4 and max(w.shape[1:3]) > 1 for w in op.weights):
            bad.update(t4)
        if on_last or (image and "row_block" in op.attrs):  # a rewritten one was decided so by its block
            last_axis.append(t4[0])
        elif image:
            rows_of_images.append(t4[0])
        for t in t4[1:]:
            parent[find(t)] = find(t4[0])
    channels_last_blocks = {find(t) for t in last_axis}  # elsewhere an axis-1 Slice is of NCHW's channels
    bad_roots = {find(t) for t in bad} | {find(t) for t in rows_of_images if find(t) not in channels_last_blocks}
    # the [B, K] row a local row Slice takes out of a rank-3 tensor (ViT's class token): one row, held as one
    rows = {op.outputs[0] for op in ops if op.local and _FAMILY.get(op.type) is Family.CHANNEL_SLICE
            and op.attrs.get("axis") == -2 and len(shapes[op.outputs[0]]) == 2}
    return frozenset(t for t in parent if find(t) not in bad_roots) | rows


def _image_rows_axis(op: Op, shapes: Mapping[str, tuple[int, ...]]) -> bool:
    """Whether a local Slice or Concat of rank-4 tensors only is one of the image rows ``H`` of ``[N, H, W, C]``
    tensors: axis 1 as the file has it, or axis -2 with ``row_block`` as :func:`image_rows` rewrote it."""
    ranks = {len(shapes[t]) for t in op.inputs + op.outputs}
    return ranks == {4} and (op.attrs.get("axis") == 1 or (op.attrs.get("axis") == -2 and "row_block" in op.attrs))


def image_rows(ops: Sequence[Op], shapes: Mapping[str, tuple[int, ...]], last: frozenset[str]) -> tuple[Op, ...]:
    """``ops`` with each local Slice or Concat of the image rows of channels-last tensors (``last``, from
    :func:`channels_last`) rewritten as the run of folded rows it is: rows ``H*W`` over the lanes, image row
    ``h`` is folded rows ``[h*W, (h+1)*W)``, so axis 1's ``[start, end)`` is axis -2's ``[start*W, end*W)``
    (``row_block`` = W).  Swin's cyclic shift rolls the image rows this way (TPU-MLIR's ``SwapDimInner``); its
    roll of the image columns, strided rows, stays a global layer.  Idempotent: a rewritten op is left as is.

    >>> from lgopt.model.network import Tensor
    >>> sl = Op("s", "Slice", ("x",), ("y",), attrs={"axis": 1, "start": 3, "end": 56}, local=True, h_split=True)
    >>> image_rows([sl], {"x": (1, 56, 56, 96), "y": (1, 53, 56, 96)}, frozenset("xy"))[0].attrs
    {'axis': -2, 'start': 168, 'end': 3136, 'row_block': 56}
    """
    out = []
    for op in ops:
        ts = op.inputs + op.outputs
        if not (op.local and op.attrs.get("axis") == 1 and _FAMILY.get(op.type) in (Family.CHANNEL_SLICE, Family.CONCAT)
                and _image_rows_axis(op, shapes) and all(t in last for t in ts)):
            out.append(op)
            continue
        w = shapes[op.inputs[0]][2]
        attrs = {**op.attrs, "axis": -2, "row_block": w}
        if op.type == "Slice":
            attrs.update(start=op.attrs["start"] * w, end=op.attrs["end"] * w)
        local, h, n, why = classify(op.type, attrs, [shapes[t] for t in op.inputs], [shapes[t] for t in op.outputs])
        out.append(replace(op, attrs=attrs, local=local, h_split=h, n_split=n, reason=why))
    return tuple(out)


# --- backward windows ---------------------------------------------------------------------------

def _clamp(lo: int, hi: int, size: int) -> Window:
    lo = max(0, min(lo, size))
    hi = max(lo, min(hi, size))
    return lo, hi


def _sliding_window_rows(out: Window, kernel: int, stride: int, dilation: int, pad: int, in_h: int) -> Window:
    """Rows a conv/pool reads for output rows ``out``: taps ``o*s - p + i*d``, i < kernel.

    The ends are exact: with dilation a tap that falls in the padding does not
    pull in the rows between it and the last real tap, so the extreme rows are
    searched among the first and last ``k_ext`` output rows (a bounded loop).
    """
    a, b = out
    k_ext = (kernel - 1) * dilation + 1
    lo, hi = in_h, -1
    for o in range(a, min(b, a + k_ext + 1)):
        first = o * stride - pad
        i = 0 if first >= 0 else -(first // dilation)  # first tap at or below row 0
        if i < kernel and 0 <= first + i * dilation < in_h:
            lo = min(lo, first + i * dilation)
    for o in range(b - 1, max(a, b - k_ext - 1) - 1, -1):
        first = o * stride - pad
        i = min(kernel - 1, (in_h - 1 - first) // dilation) if first <= in_h - 1 else -1
        if i >= 0 and first + i * dilation >= 0:
            hi = max(hi, first + i * dilation)
    if hi < lo:
        return (0, 0)
    return lo, hi + 1


def _deconv_rows(out: Window, kernel: int, stride: int, dilation: int, pad: int, in_h: int) -> Window:
    """Input rows i with i*s - p + k*d in ``out`` for some k in [0, kernel)."""
    a, b = out
    lo = -((-(a + pad - (kernel - 1) * dilation)) // stride)  # ceil division
    hi = (b - 1 + pad) // stride
    return _clamp(lo, hi + 1, in_h)


def resize_coord(o: int, in_size: int, out_size: int, attrs: Mapping[str, Any]) -> Fraction:
    """The input coordinate output index ``o`` samples (ONNX coordinate_transformation_mode)."""
    scale = Fraction(out_size, in_size)
    mode = attrs.get("coord", "half_pixel")
    if mode == "asymmetric":
        return o / scale
    if mode == "align_corners":
        return Fraction(o * (in_size - 1), out_size - 1) if out_size > 1 else Fraction(0)
    if mode == "tf_half_pixel_for_nn":
        return (o + Fraction(1, 2)) / scale
    if mode == "pytorch_half_pixel" and out_size == 1:
        return Fraction(0)
    return (o + Fraction(1, 2)) / scale - Fraction(1, 2)  # half_pixel, pytorch_half_pixel


def resize_source(o: int, in_size: int, out_size: int, attrs: Mapping[str, Any]) -> tuple[int, int]:
    """Inclusive range of input indices output index ``o`` reads (ONNX Resize semantics)."""
    x = resize_coord(o, in_size, out_size, attrs)
    if attrs.get("mode") == "nearest":
        nm = attrs.get("nearest_mode", "round_prefer_floor")
        if nm == "floor":
            i = floor(x)
        elif nm == "ceil":
            i = ceil(x)
        elif nm == "round_prefer_ceil":
            i = floor(x + Fraction(1, 2))
        else:  # round_prefer_floor
            i = ceil(x - Fraction(1, 2))
        i = min(max(i, 0), in_size - 1)
        return i, i
    lo = min(max(floor(x), 0), in_size - 1)
    hi = min(max(floor(x) + 1, 0), in_size - 1)
    return lo, hi


def backward_h(op: Op, k: int, out: Window, in_h: int, out_h: int) -> Window:
    """Rows of input ``k`` that output rows ``out`` need."""
    return _backward_axis(op, k, out, in_h, out_h, 0)


def backward_w(op: Op, k: int, out: Window, in_w: int, out_w: int) -> Window:
    """Columns of input ``k`` that output columns ``out`` need (W slices, as TPU-MLIR cuts them once N and H
    are exhausted): the same rules as :func:`backward_h` on the second spatial axis."""
    return _backward_axis(op, k, out, in_w, out_w, 1)


def _backward_axis(op: Op, k: int, out: Window, in_size: int, out_size: int, axis: int) -> Window:
    """Range of an input along spatial ``axis`` (0 = H, 1 = W) that output range ``out`` reads.

    One rule for both axes, so H and W windows cannot drift apart: kernel, stride, dilation and the
    leading pad of that axis (pads are (top, left, bottom, right)); a Resize's coordinate mode of that axis
    (``coord_h`` for H, falling back to ``coord``, which is W's)."""
    family = _FAMILY.get(op.type)  # a plain dict: this runs for every op of every slice tried
    a = op.attrs
    if out[0] >= out[1]:
        return (0, 0)
    if family is Family.CONV or family is Family.POOL:
        return _sliding_window_rows(out, a["kernel"][axis], a["strides"][axis], a.get("dilations", (1, 1))[axis],
                                    a["pads"][axis], in_size)
    if family is Family.DECONV:
        return _deconv_rows(out, a["kernel"][axis], a["strides"][axis], a.get("dilations", (1, 1))[axis],
                            a["pads"][axis], in_size)
    if family is Family.GLOBAL_POOL and in_size != out_size:  # over H and W (a last-axis reduction keeps rows)
        return (0, in_size)
    if family is Family.GROUP_NORM:  # every output element needs its group's statistics over the whole plane
        return (0, in_size)
    if family is Family.MATMUL and (k == 1 or axis == 1):  # B's rows are the contracted K; A's columns are K
        return (0, in_size)
    if family is Family.RESHAPE and (in_size != out_size or (op.type == "Transpose" and lane_permute(a))):
        return (0, in_size)  # a view that re-splits H x W, or rows turned into columns: only whole (never sliced)
    if family is Family.RESIZE:
        coord = a.get("coord_h", a.get("coord")) if axis == 0 else a.get("coord")
        lo, _ = resize_source(out[0], in_size, out_size, {**a, "coord": coord})
        _, hi = resize_source(out[1] - 1, in_size, out_size, {**a, "coord": coord})
        return (lo, hi + 1)
    # elementwise, activations, concat, rows of a MatMul's A or of a row-wise op: identity, or the single
    # row of a broadcast operand; an operand joined or cut along this axis (a last-axis Concat or Slice) whole
    if in_size == 1 and out_size != 1:
        return (0, 1)
    if in_size != out_size:
        return (0, in_size)
    return out


def channel_reason(net: Network, op: Op) -> str:
    """Why a group with ``op`` may not be cut into channel slices, or ``""`` when it may: every output channel
    is computed from the same channel of each input (or an input's single broadcast channel), and no constant
    differs per channel.  The attention's heads lie on the channels (``[1, 12, 197, 64]``: Q, K transposed on
    each lane, Q x K^T, its scale, Softmax over the keys, x V), so a heads slice is a channel slice.  A
    convolution reads every input channel, a channel Concat or Slice moves channels between lanes, a tensor
    held rows on lanes has no channel axis to cut.

    >>> from lgopt.model.network import Network, Tensor
    >>> t = {k: Tensor(k, (1, 12, 197, 197), "f16") for k in "sp"}
    >>> net = Network("n", t, (Op("sm", "Softmax", ("s",), ("p",), attrs={"axis": -1}),), ("s",), ("p",))
    >>> channel_reason(net, net.op("sm"))
    ''
    """
    if not op.outputs:
        return "has no output"
    out = net.tensor(op.outputs[0])
    ins = [net.tensor(t) for t in op.inputs]
    if out.rows_on_lanes or any(t.rows_on_lanes for t in ins):
        return "holds rows on the lanes (no channel axis to cut)"
    family = _FAMILY.get(op.type)
    if family in (Family.CONV, Family.DECONV):
        return "a convolution reads every input channel"
    if family in (Family.CONCAT, Family.CHANNEL_SLICE) and op.attrs.get("axis") == 1:
        return "moves channels between lanes"
    if family is Family.GROUP_NORM:
        return "normalises groups of channels, on several lanes, together"
    if family is Family.RESHAPE and lane_move(op.type, op.attrs, [ins[0].orig_shape or ins[0].shape],
                                              out.orig_shape or out.shape):
        return "moves data between lanes"
    broadcast = family is Family.BINARY or family is Family.MATMUL
    if any(t.c != out.c and not (broadcast and t.c == 1) for t in ins):
        return "mixes channels"
    if family is not Family.MATMUL and any(lane_shape_of(w.shape)[1] > 1 for w in op.weights if w.shape):
        return "has constants that differ per channel"  # a MatMul's [K, N] weight is the same for every head
    return ""


def backward_c(out: Window, in_c: int) -> Window:
    """Channels of an input that output channels ``out`` of a channel-local op (:func:`channel_reason`) read:
    the same ones, or the single channel of a broadcast operand.

    >>> backward_c((4, 8), 12), backward_c((4, 8), 1)
    ((4, 8), (0, 1))
    """
    if out[0] >= out[1]:
        return (0, 0)
    return (0, 1) if in_c == 1 else out


def backward_n(op: Op, k: int, out: Window, in_n: int) -> Window:
    """Batches of input ``k`` that output batches ``out`` need (identity, a broadcast batch, or the batches a
    batch Slice takes).

    >>> backward_n(Op("q", "Slice", ("qkv",), ("q",), attrs={"axis": 0, "start": 1, "end": 2}), 0, (0, 1), 3)
    (1, 2)
    """
    if out[0] >= out[1]:
        return (0, 0)
    if op.type == "Slice" and op.attrs.get("axis") == 0:  # a batch re-laid by the slice: the batches it takes
        start = op.attrs["start"]
        return (start + out[0], min(start + out[1], op.attrs["end"]))
    if _FAMILY.get(op.type) is Family.RESHAPE and not op.n_split:  # a move held whole reads every batch
        return (0, in_n)
    if in_n == 1:
        return (0, 1)
    return out


def window_union(a: Window | None, b: Window) -> Window:
    if a is None:
        return b
    return (min(a[0], b[0]), max(a[1], b[1]))

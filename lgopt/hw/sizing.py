"""Bytes per LMEM lane of every buffer a group needs: activations, weights, scratch.

Activations use the EU-aligned layout from lane 0 (:func:`lgopt.hw.layout.activation_lane_bytes`).
Weights follow the seed "Weight Reorder": conv filters with input channels
interleaved in IC_PARALLEL units and output channels over lanes, the 32-bit
bias merged compactly in front (one buffer, one DMA).  Scratch follows the
per-op ``getBufferSize`` rules summarised in shared/reference s6, which makes
it slice-dependent.
"""

from __future__ import annotations

from functools import lru_cache

from lgopt.hw.chip import Chip
from lgopt.hw.layout import (
    activation_lane_bytes,
    align_up,
    bias_lane_bytes,
    channels_per_lane,
    conv_filter_lane_bytes,
    depthwise_filter_lane_bytes,
    merged_coeff_lane_bytes,
)
from lgopt.model import ops as opsem
from lgopt.model.dtype import dtype_bytes, is_integer
from lgopt.model.network import Network, Op, Tensor, lane_shape_of


def activation_bytes(chip: Chip, t: Tensor, n_len: int, h_len: int, w_len: int | None = None,
                     c_len: int | None = None) -> int:
    """One slice of ``t`` with ``n_len`` batches, ``h_len`` rows, ``w_len`` columns and ``c_len`` channels (all
    of them when not given), aligned layout."""
    return activation_lane_bytes(t.lane_shape(n_len, h_len, w_len, c_len), t.dtype, chip.npu_num, chip.eu_bytes,
                                 chip.align_4n)


@lru_cache(maxsize=1 << 14)
def is_depthwise(op: Op) -> bool:
    if op.type != "Conv":
        return False
    f = next(w for w in op.weights if w.role == "filter")
    return op.attrs.get("group", 1) > 1 and f.shape[1] == 1 and op.attrs["group"] == f.shape[0]


TPU_MLIR_FAMILY = ("bm1684x", "bm1688", "bm1690")  # conv_buffers rules of TPU-MLIR's BM1684X-family backend


@lru_cache(maxsize=1 << 14)
def runs_as_conv(chip: Chip, op: Op) -> bool:
    """Whether TPU-MLIR 1.30.2 runs depthwise conv ``op`` as an ordinary one (a ``[C, C, kh, kw]`` filter, zero
    off the diagonal): on the chips whose ``conv_buffers`` names a BM1684X-family rule, when its channels fill
    at most one lane's worth of ``npu_num / bytes`` (every such conv of the calibration models' ``final.mlir``:
    INT8 up to 64 channels on BM1684X and BM1690, 32 on BM1688; F16 32 on BM1690, 16 on BM1688; none on BM1684).
    LMEM is sized for what runs; the cost models price the depthwise work they were fitted on."""
    if not is_depthwise(op) or chip.conv_buffers not in TPU_MLIR_FAMILY:
        return False
    f = next(w for w in op.weights if w.role == "filter")
    return f.shape[0] <= chip.npu_num // dtype_bytes(f.dtype)


def filter_dims(chip: Chip, op: Op) -> tuple[int, int, int, int, int]:
    """``(oc, ic per group, kh, kw, groups)`` of a Conv's filter as TPU-MLIR holds it (:func:`runs_as_conv`)."""
    f = next(w for w in op.weights if w.role == "filter")
    oc, icg, kh, kw = f.shape
    if runs_as_conv(chip, op):
        return oc, oc, kh, kw, 1
    return oc, icg, kh, kw, op.attrs.get("group", 1)


@lru_cache(maxsize=1 << 14)
def three_ic(chip: Chip, op: Op) -> tuple[int, int]:
    """TPU-MLIR's "3ic" layout of a conv with few input channels: ``(mode, kernel_len)``, mode 1 when the
    kernel's rows are folded into the input channels, 2 its columns, 3 both, 0 none (``kernel_len`` the folded
    kernel taps).  TPU-MLIR 1.30.2's INT8 lowering picks the first that fits ``IC_PARALLEL`` input channels:
    both when ``ic * kh * kw`` fits, the columns when ``ic * kw`` fits and the kernel is wider than high (or the
    rows do not fit), else the rows; in F16 only the rows (BM1684X and BM1688; BM1690 none).  What every
    stem convolution of the calibration models shows (``use_3ic_optimize`` in its ``final.mlir``): ResNet's 7 x 7
    on 3 channels folds its rows (21 of 32 or 64), MobileNet's 3 x 3 both in INT8, its rows in F16.

    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.model.network import Op, Weight
    >>> stem = Op("c", "Conv", ("x",), ("y",), attrs={"kernel": (7, 7)},
    ...           weights=(Weight("w", (64, 3, 7, 7), "int8", "filter"),))
    >>> three_ic(get_chip("bm1684x"), stem), three_ic(get_chip("bm1684"), stem)
    ((1, 7), (0, 0))
    """
    rule = chip.conv_buffers
    f = next((w for w in op.weights if w.role == "filter"), None)
    if op.type != "Conv" or f is None or len(f.shape) != 4 or rule not in TPU_MLIR_FAMILY:
        return 0, 0
    _, ic, kh, kw, groups = filter_dims(chip, op)
    if groups != 1:
        return 0, 0
    icp = chip.ic_parallel  # input channels of one byte: F16 folds to the same count (its filter: 224 of 7 x 21)
    if is_integer(f.dtype):
        if ic * kh * kw <= icp and kh > 1 and kw > 1:
            return 3, kh * kw
        if ic * kw <= icp and kw > 1 and (kh < kw or ic * kh > icp):
            return 2, kw
    elif rule == "bm1690":
        return 0, 0
    return (1, kh) if ic * kh <= icp and kh > 1 else (0, 0)


def column_weights(op: Op) -> bool:
    """Whether ``op``'s weights can be loaded a run of output columns at a time (C/OC slicing, issue 16):
    a MatMul whose weight is a ``[K, N]`` matrix and whose every constant (the matrix, a bias) has the output
    width N as its last axis.  Output column j then reads column j of each constant and nothing else, so a
    W slice of the output needs only its own columns of the weight in LMEM."""
    if op.type != "MatMul" or not op.weights:
        return False
    f = next((w for w in op.weights if w.role == "filter"), None)
    if f is None or len(f.shape) != 2:
        return False
    return all(w.shape and w.shape[-1] == f.shape[-1] for w in op.weights)


def column_shape(shape: tuple[int, ...], cols: int | None) -> tuple[int, ...]:
    """A constant's shape with its last axis cut to ``cols`` columns (unchanged when ``cols`` is None)."""
    return shape if cols is None else tuple(shape[:-1]) + (cols,)


def merged_conv(op: Op) -> bool:
    """Whether TPU-MLIR's lowering merges ``op``'s filter, bias and requantisation into one coefficient tensor:
    an integer (INT8) convolution.  Its timeline loads ``<conv>_merge``, ``[1, lanes, 1, bytes a lane]``, in one
    transfer of a run per lane (ResNet-18's ``layer3.0.conv2`` on BM1684X: ``1x64x1x9472``, 11,222 cycles),
    where its F16 lowering loads the reordered filter and the f32 bias apart."""
    f = next((w for w in op.weights if w.role == "filter"), None)
    return op.type in ("Conv", "ConvTranspose") and f is not None and is_integer(f.dtype)


def int_requant_lane_bytes(chip: Chip, oc: int) -> int:
    """Bytes a lane holds of an integer conv's bias and requantisation: one EU-aligned block per output channel
    on it.  TPU-MLIR's INT8 coefficients (``<conv>_merge``) on BM1684X: a 1 x 1 conv of 144 output channels
    from 24 holds 384 bytes a lane, 3 x (64 of filter + 64), where one 32-bit bias for the lane's 3 channels
    would have been 256; a depthwise 3 x 3 one of 384 channels 410 (6 x 9 of filter + 356).

    >>> from lgopt.hw.chip import get_chip
    >>> int_requant_lane_bytes(get_chip("bm1684x"), 144)
    192
    """
    return channels_per_lane(oc, chip.npu_num) * chip.eu_bytes


@lru_cache(maxsize=1 << 14)
def weight_bytes(chip: Chip, op: Op, cols: int | None = None) -> int:
    """One merged coefficient buffer per op (0 when it has no weights); with ``cols``, the buffer of a run of
    ``cols`` output columns of a column-sliced MatMul's weights (:func:`column_weights`): the same layout
    (N over lanes), N cut to ``cols``."""
    if not op.weights:
        return 0
    if op.type in ("Conv", "ConvTranspose"):
        f = next(w for w in op.weights if w.role == "filter")
        has_bias = any(w.role == "bias" for w in op.weights)
        if op.type == "Conv":
            oc, icg, kh, kw, _ = filter_dims(chip, op)
        else:  # ONNX ConvTranspose filter is [ic, oc/group, kh, kw]
            icg, ocg, kh, kw = f.shape
            oc = ocg * op.attrs.get("group", 1)
            icg = icg // op.attrs.get("group", 1)
        mode, taps = three_ic(chip, op)
        if mode:  # the folded taps become input channels: [oc, ic * taps, 1, the other taps]
            icg, kh, kw = icg * taps, 1, kh * kw // taps
        if is_depthwise(op) and not runs_as_conv(chip, op):
            filt = depthwise_filter_lane_bytes(oc, kh, kw, f.dtype, chip.npu_num)
        else:
            filt = conv_filter_lane_bytes(oc, icg, kh, kw, f.dtype, chip.npu_num, chip.ic_parallel)
        if merged_conv(op):  # requantisation per output channel, each an EU-aligned block (with the bias)
            return merged_coeff_lane_bytes(filt, int_requant_lane_bytes(chip, oc), chip.eu_bytes)
        bias = bias_lane_bytes(oc, chip.npu_num, 4) if has_bias else 0
        return merged_coeff_lane_bytes(filt, bias, chip.eu_bytes)
    if int8_matmul_rows(chip, op):
        return int8_matmul_bytes(chip, op, cols)
    # per-channel parameters (BN scale/bias, PRelu slope), broadcast constants (shaped like the activation
    # they meet, rows of a rank-3 one over the lanes) and MatMul's [K, N] (N over lanes, like a filter's output
    # channels): compact, one after another
    total = 0
    for w in op.weights:
        if w.role in ("mean", "var"):
            continue  # folded into scale/bias offline
        shape = column_shape(w.shape, cols)
        n, c, h, ww = lane_shape_of(shape if len(shape) != 1 else (1, shape[0]))
        total += align_up(n * channels_per_lane(c, chip.npu_num) * h * ww * dtype_bytes(w.dtype), 4)
    return align_up(total, chip.eu_bytes) if total else 0


def kernel_n_bytes(chip: Chip, t: Tensor, in_slice: tuple[int, int, int, int | None]) -> int:
    """Bytes per lane of the part of an input slice an elementwise kernel works on at once (TPU-MLIR's
    ``in_lmem_bytes / in_nslice``: one batch), which its work buffers are sized by.

    A rows-on-lanes tensor whose rows fill whole lane runs (ConvNeXt's 3,136 tokens: 49 x 64 on BM1684X,
    98 x 32 on BM1688) is viewed by TPU-MLIR with its rows over N and the lanes (its codegen timeline slices
    them ``nslice=49, cslice=64``), so one "batch" is one row per lane; ViT's 197 tokens stay on the lanes
    as one batch (``nslice=1, cslice=197``)."""
    n_len, h_len = in_slice[0], in_slice[1]
    w_len = in_slice[2] if len(in_slice) > 2 else None
    if t.rows_on_lanes and t.h % chip.npu_num == 0 and h_len >= chip.npu_num:
        return activation_bytes(chip, t, 1, chip.npu_num, w_len)
    return activation_bytes(chip, t, *in_slice) // max(1, n_len)


def scratch_bytes(chip: Chip, net: Network, op: Op, in_slice: tuple[int, int, int, int | None],
                  out_slice: tuple[int, int, int, int | None]) -> int:
    """Op scratch for one slice (``(n_len, h_len, w_len, c_len)`` of input 0 and output, ``c_len`` None for
    every channel), reference s6.

    * grouped (non-depthwise) conv: a re-laid-out input plus ``2 * ic_per_lane * bytes``;
    * depthwise conv on narrow types: an int32 copy of the output;
    * table activations (Sigmoid, SiLU, Tanh, ...): two EU-aligned copies of the input slice
      plus a 32-entry table;
    * int8 Add: an int16 intermediate of the output, twice;
    * GroupNormalization: ``8 * n * c_per_lane * (align_up(h * w, E) + E)``, ``E = eu_bytes / 4`` (two f32
      copies of the slice and two f32 statistics blocks, as TPU-MLIR 1.30 sizes its buffer: 7,424 and 6,144
      bytes for ``[1, 64, 30, 30]`` and ``[1, 192, 15, 15]`` on BM1684X, 14,464 and 11,136 on BM1688).
    """
    if not op.inputs or not op.outputs:
        return 0
    tin = net.tensor(op.inputs[0])
    tout = net.tensor(op.outputs[0])
    if (op.type == "Conv" or scale_as_conv(net, op)) and chip.conv_buffers != "reference":
        return conv_buffer_bytes(chip, net, op, in_slice, out_slice)
    if op.type == "Conv" and op.attrs.get("group", 1) > 1:
        if is_depthwise(op):
            if dtype_bytes(tout.dtype) < 4:
                return activation_lane_bytes((out_slice[0], tout.c, out_slice[1], out_slice[2]), "int32", chip.npu_num,
                                             chip.eu_bytes)
            return 0
        relaid = activation_bytes(chip, tin, *in_slice)
        return relaid + align_up(2 * channels_per_lane(tin.c, chip.npu_num) * dtype_bytes(tin.dtype), chip.eu_bytes)
    if chip.conv_buffers in TPU_MLIR_FAMILY and table_lookup(net, op):  # no work buffer, its table beside it
        return align_up(LUT_ENTRIES, chip.eu_bytes)
    if op.type in opsem.TABLE_ACTIVATIONS:
        per_n = kernel_n_bytes(chip, tin, in_slice)
        coeffs = align_up(32 * dtype_bytes(tin.dtype), chip.eu_bytes)
        if op.type in ("Gelu", "Erf") and op.attrs.get("approximate", "none") != "tanh":
            # erf by its series: GELU holds four work copies, Erf three, and 10 erf coefficients beside the 32
            copies = 4 if op.type == "Gelu" else 3
            return copies * per_n + coeffs + align_up(10 * dtype_bytes(tin.dtype), chip.eu_bytes)
        return 2 * align_up(per_n, chip.eu_bytes) + coeffs
    if op.type == "GroupNormalization":  # TPU-MLIR 1.30: two f32 copies of the slice, two f32 statistics blocks
        e = chip.eu_bytes // 4
        hw = in_slice[1] * (in_slice[2] if in_slice[2] is not None else tin.w)
        return 8 * in_slice[0] * channels_per_lane(tin.c, chip.npu_num) * (align_up(hw, e) + e)
    if op.type == "Add" and is_integer(tout.dtype) and dtype_bytes(tout.dtype) == 1:  # laid out as the output is
        lanes = tout.lane_shape(out_slice[0], out_slice[1], out_slice[2], out_slice[3])  # (a rank-3 one's rows
        return 2 * activation_lane_bytes(lanes, "int16", chip.npu_num, chip.eu_bytes)  # over the lanes)
    return 0


LUT_ENTRIES = 256  # an INT8 Lut's table: one int8 result for each int8 input


def table_lookup(net: Network, op: Op) -> bool:
    """Whether TPU-MLIR's INT8 lowering runs activation ``op`` as a table lookup (``tpu.Lut``: one pass an
    element, whatever the function; no work buffer, ``LutOp::getBufferSize`` 0, and a table of 256 entries): an
    integer activation of one of the table-computed types (SiLU, GELU, Sigmoid, hard-swish ...: ViT-B's GELUs,
    yolov5s's 57 SiLUs, MobileNetV3's 28 hard activations in their INT8 ``tpu.mlir``).  The float series' work
    copies (:func:`scratch_bytes`) refused groups TPU-MLIR compiles (ViT-B's MLP on BM1688: 36,912 bytes of a
    GELU's copies for 3 rows of 3,072); the fitted INT8 models price them as one category
    (:func:`lgopt.cost.fitted.tiu_category`).

    >>> from lgopt.model.network import Tensor
    >>> x, y = Tensor("x", (1, 8, 4, 4), "int8"), Tensor("y", (1, 8, 4, 4), "int8")
    >>> net = Network("n", {"x": x, "y": y}, (Op("h", "HardSwish", ("x",), ("y",)),), ("x",), ("y",))
    >>> table_lookup(net, net.op("h"))
    True
    """
    spec = opsem.OP_SPECS.get(op.type)
    return (spec is not None and spec.family is opsem.Family.UNARY and spec.table and bool(op.outputs)
            and is_integer(net.tensor(op.outputs[0]).dtype))


def int8_matmul_rows(chip: Chip, op: Op) -> bool:
    """Whether ``op`` is an INT8 MatMul of a ``[K, N]`` weight that TPU-MLIR's BM1684X-family backend holds with K
    over the lanes (:func:`int8_matmul_bytes`)."""
    f = next((w for w in op.weights if w.role == "filter"), None)
    return (op.type == "MatMul" and f is not None and len(f.shape) == 2 and is_integer(f.dtype)
            and chip.conv_buffers in TPU_MLIR_FAMILY)


def int8_matmul_bytes(chip: Chip, op: Op, cols: int | None = None, whole: bool = False) -> int:
    """An INT8 MatMul's weight as TPU-MLIR 1.30.2 loads it in a group: ``[K, N]`` with K over the lanes, each
    row of N EU-aligned (``whole``: the matrix whole in a lane, :func:`lanes_share_rows`), and its bias as N int32
    on one lane.  ConvNeXt's 96 -> 384 and 384 -> 96 layers: 2,304 and 1,152 bytes a lane on BM1684X, 2,688 and
    1,536 on BM1688 (their ``final.mlir`` loads).

    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.model.network import Op, Weight
    >>> mm = Op("m", "MatMul", ("x",), ("y",), weights=(Weight("w", (384, 96), "int8", "filter"),
    ...                                                 Weight("b", (1, 1, 1, 96), "int8", "bias")))
    >>> int8_matmul_bytes(get_chip("bm1684x"), mm), int8_matmul_bytes(get_chip("bm1688"), mm)
    (1152, 1536)
    """
    f = next(w for w in op.weights if w.role == "filter")
    k, n = f.shape[0], cols if cols is not None else f.shape[1]
    if whole:
        size = align_up(k * n * dtype_bytes(f.dtype), chip.eu_bytes)
    else:
        size = channels_per_lane(k, chip.npu_num) * align_up(n * dtype_bytes(f.dtype), chip.eu_bytes)
    if any(w.role == "bias" for w in op.weights):
        size += align_up(n * 4, chip.eu_bytes)
    return size


def lanes_share_rows(chip: Chip, net: Network, op: Op) -> bool:
    """Whether TPU-MLIR 1.30.2 spreads the rows of INT8 MatMul ``op``'s operand evenly over the lanes in a group
    (its small-C layout, ``[N*H*W / lanes, lanes, K]``, where each lane's K-row share of the weight serves):
    always but for a rank-4 ``[N, H, W, K]`` operand whose N*H*W is not a multiple of the lanes.  There it lays
    the operand out ``[N*H, W, K]`` and holds the ``[K, N]`` weight whole in a lane's LMEM: ConvNeXt-Tiny's
    28 x 28 stage on BM1684X, 192 -> 768, 147,456 bytes a lane (its layer-group debugger), where the 56 x 56
    stage's 96 -> 384 holds 768 (``final.mlir``).  TPU-MLIR's own groupings never group the MatMuls of the
    28 x 28, 14 x 14 and 7 x 7 stages."""
    t = net.tensor(op.inputs[0])
    return len(t.orig_shape) != 4 or (t.orig_shape[0] * t.orig_shape[1] * t.orig_shape[2]) % chip.npu_num == 0


def group_weight_bytes(chip: Chip, net: Network, op: Op, cols: int | None = None) -> int:
    """:func:`weight_bytes` of ``op`` in a group of ``net``: an INT8 MatMul whose rows do not fill the lanes
    evenly (:func:`lanes_share_rows`) holds its ``[K, N]`` weight whole in a lane, and its bias as N int32.

    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.model.network import Network, Op, Tensor, Weight
    >>> w = (Weight("w", (192, 768), "int8", "filter"), Weight("b", (1, 1, 1, 768), "int8", "bias"))
    >>> def net(h):
    ...     x = Tensor("x", (1, 1, h * h, 192), "int8", (1, h, h, 192), channels_last=True)
    ...     y = Tensor("y", (1, 1, h * h, 768), "int8", (1, h, h, 768), channels_last=True)
    ...     return Network("n", {"x": x, "y": y}, (Op("m", "MatMul", ("x",), ("y",), w),), ("x",), ("y",))
    >>> chip = get_chip("bm1684x")
    >>> [group_weight_bytes(chip, n, n.op("m")) for n in (net(56), net(28))]
    [5376, 150528]
    """
    if int8_matmul_rows(chip, op) and not lanes_share_rows(chip, net, op):
        return int8_matmul_bytes(chip, op, cols, whole=True)
    return weight_bytes(chip, op, cols)


def scale_as_conv(net: Network, op: Op) -> bool:
    """Whether ``op`` multiplies its input by one constant a channel (ConvNeXt's layer scale, ``[1, C, 1, 1]``),
    which TPU-MLIR 1.30.2 runs as a 1 x 1 depthwise convolution (``tpu.Conv2D``, ``group = C``, in its
    ``final.mlir``), work buffer and all."""
    if op.type != "Mul" or len(op.weights) != 1 or len(op.inputs) != 1:
        return False
    shape, c = op.weights[0].shape, net.tensor(op.inputs[0]).c
    return c > 1 and tuple(d for d in shape if d != 1) == (c,) and len(shape) == 4 and shape[1] == c


def conv_buffer_bytes(chip: Chip, net: Network, op: Op, in_slice: tuple[int, int, int, int | None],
                      out_slice: tuple[int, int, int, int | None]) -> int:
    """A convolution's work buffer as TPU-MLIR 1.30.2 sizes it (``Conv2DOp::getBufferSize_bm1684x``) on chips
    whose ``conv_buffers`` names its rule: checked against every conv of the calibration models' ``final.mlir``
    on BM1684, BM1684X (INT8), BM1688 and BM1690 (F16 and INT8).

    * an INT8 conv (filter, bias and requantisation merged) holds its output in int32 first: 4 bytes an output
      element (BM1684X, BM1690; BM1688 only when it folds taps, below);
    * a grouped conv re-lays its input out: ``n * ceil(ic / groups / lanes) * align(h * w, EU)`` elements and two
      more a lane (a depthwise one on BM1688 in INT8 needs only that);
    * a depthwise one also an int32 copy of its output and its kernel taps;
    * a conv whose taps fold into its input channels (:func:`three_ic`) a depthwise pass's output, EU-aligned,
      for each folded channel, and its parameters (and, when its input has other readers, a copy of that input);
    * BM1684 none (its convs' buffers are 0 in every INT8 ``final.mlir``).

    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.model.network import Network, Op, Tensor, Weight
    >>> x, y = Tensor("x", (1, 3, 224, 224), "int8"), Tensor("y", (1, 64, 112, 112), "int8")
    >>> stem = Op("c", "Conv", ("x",), ("y",), weights=(Weight("w", (64, 3, 7, 7), "int8", "filter"),),
    ...           attrs={"kernel": (7, 7), "strides": (2, 2), "pads": (3, 3, 3, 3)})
    >>> net = Network("n", {"x": x, "y": y}, (stem,), ("x",), ("y",))
    >>> conv_buffer_bytes(get_chip("bm1684x"), net, stem, (1, 224, 224, None), (1, 112, 112, None))
    75456
    """
    rule = chip.conv_buffers
    if rule == "bm1684":
        return 0
    tin, tout = net.tensor(op.inputs[0]), net.tensor(op.outputs[0])
    if op.type != "Conv":  # a scale by a per-channel constant (scale_as_conv): a 1 x 1 depthwise conv
        oc, icg, kh, kw, groups = tin.c, 1, 1, 1, tin.c
    else:
        oc, icg, kh, kw, groups = filter_dims(chip, op)
    n, h = in_slice[0], in_slice[1]
    w = in_slice[2] if in_slice[2] is not None else tin.w
    in_len, eu = dtype_bytes(tin.dtype), chip.eu_elems(tin.dtype)
    int32 = activation_bytes(chip, tout, *out_slice) * 4 // dtype_bytes(tout.dtype)
    relaid = n * channels_per_lane(icg, chip.npu_num) * align_up(h * w, eu) * in_len \
        + channels_per_lane(icg, chip.npu_num) * 2 * in_len
    merged = merged_conv(op) or (op.type != "Conv" and is_integer(tout.dtype))
    mode, taps = three_ic(chip, op)
    if rule == "bm1688" and merged and (groups > 1 or not mode):
        return relaid if groups > 1 else 0
    size = int32 if merged else 0
    if groups > 1:
        size += relaid
    if groups > 1 and icg == 1:  # depthwise
        size += int32 + channels_per_lane(oc, chip.npu_num) * kh * kw
    if mode:
        size += _folded_pass_bytes(chip, net, op, (n, h, w), out_slice, mode, taps)
    return align_up(size, chip.eu_bytes) if size else 0


def _folded_pass_bytes(chip: Chip, net: Network, op: Op, nhw: tuple[int, int, int],
                       out_slice: tuple[int, int, int, int | None], mode: int, taps: int) -> int:
    """The depthwise pass of a conv whose taps fold into its input channels (:func:`three_ic`): its output for
    each folded channel (the rows, columns or both of the output, the rest of the input's), EU-aligned, its
    parameters, and, when the conv's input has other readers, a copy of the input slice to fold from."""
    tin, tout = net.tensor(op.inputs[0]), net.tensor(op.outputs[0])
    n, h, w = nhw
    in_len, eu = dtype_bytes(tin.dtype), chip.eu_elems(tin.dtype)
    oh, ow = out_slice[1], out_slice[2] if out_slice[2] is not None else tout.w
    folded = {1: oh * w, 2: h * ow, 3: oh * ow}[mode]
    lanes = channels_per_lane(tin.c * taps, chip.npu_num)
    size = align_up(folded, eu) * lanes * n * in_len + chip.eu_bytes * channels_per_lane(taps, chip.npu_num) * 2 \
        + taps * channels_per_lane(taps, chip.npu_num) * in_len
    if len(net.consumers.get(op.inputs[0], ())) > 1:  # broadcast to a buffer of its own
        size += align_up(h * w, eu) * n * lanes * in_len
    return size


def min_footprint(chip: Chip, net: Network, op: Op, sliced: bool) -> int:
    """Fewest bytes per lane the row of ``op`` holds in any group (``sliced``: in any sliced group).

    Why: whatever the group and slicing, the row where ``op`` computes holds its
    weight and a buffer for its output and for each input, each at least the
    smallest window ``op`` can work on: the whole tensors when unsliced, one
    output row (one batch) where the op lets H (N) be sliced, one output column (and that column of a MatMul's
    weight) where a row op may be W-sliced, one channel where it may be cut into channel (heads) slices.
    Bytes grow with
    the window, so if this exceeds LMEM no such group packs, and the candidate
    space drops it without scheduling it (scratch is left out: the test stays
    a necessary condition).
    """
    if not op.outputs:
        return group_weight_bytes(chip, net, op)
    out = net.tensor(op.outputs[0])
    o_n = 1 if sliced and op.n_split else out.n
    o_rows = [(r, r + 1) for r in range(out.h)] if sliced and op.h_split else [(0, out.h)]
    # a row op (rank-3 operands, rows on the lanes) may be W-sliced: one output column, and a column-sliced
    # MatMul (its weight reloaded a run of columns at a time) one column of its weight
    spec = opsem.OP_SPECS.get(op.type)
    by_cols = sliced and op.h_split and out.rows_on_lanes and spec is not None \
        and spec.family is not opsem.Family.ROWWISE
    cols = 1 if by_cols else None
    chans = 1 if sliced and not opsem.channel_reason(net, op) else None  # a heads slice may hold one channel
    total = group_weight_bytes(chip, net, op, cols if column_weights(op) else None) + \
        activation_bytes(chip, out, o_n, o_rows[0][1] - o_rows[0][0], cols, chans)
    for k, t in enumerate(op.inputs):
        if t in op.inputs[:k]:
            continue
        ten = net.tensor(t)
        n0, n1 = opsem.backward_n(op, k, (0, o_n), ten.n)
        rows = min(b - a for a, b in (opsem.backward_h(op, k, w, ten.h, out.h) for w in o_rows))
        c0, c1 = opsem.backward_w(op, k, (0, 1), ten.w, out.w) if by_cols else (0, ten.w)
        total += activation_bytes(chip, ten, n1 - n0, max(1, rows), max(1, c1 - c0), chans)
    return total

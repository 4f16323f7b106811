"""What each op type means to a layer group: can it run locally, what can be
sliced, and which input rows and batches an output window needs.

Backward windows are half-open ``(start, end)`` row or batch ranges.  The
formulas follow the compilers' ``BackwardH`` (shared/reference s3.5) but clamp
exactly instead of always extending the last slice to the input's end, so a
window holds only rows the op really reads.
"""

from __future__ import annotations

from fractions import Fraction
from math import ceil, floor
from typing import Any, Mapping

from lgopt.model.network import Op

Window = tuple[int, int]

CONV_TYPES = frozenset({"Conv"})
DECONV_TYPES = frozenset({"ConvTranspose"})
POOL_TYPES = frozenset({"MaxPool", "AveragePool"})
GLOBAL_POOL_TYPES = frozenset({"GlobalAveragePool", "GlobalMaxPool", "ReduceMean"})
BINARY_TYPES = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min"})
UNARY_TYPES = frozenset({"Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "LeakyRelu", "PRelu",
                         "Erf", "SiLU", "BatchNormalization"})
# Activations the importer folds into their producer (the compilers' fused activations).
FUSABLE_ACTIVATIONS = frozenset({"Relu", "Clip", "LeakyRelu"})
# Unary ops whose TPU implementation needs lookup-table / polynomial scratch.
TABLE_ACTIVATIONS = frozenset({"Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Erf", "SiLU"})
LOCAL_TYPES = CONV_TYPES | DECONV_TYPES | POOL_TYPES | GLOBAL_POOL_TYPES | BINARY_TYPES | UNARY_TYPES | {
    "Concat", "Resize"}

MAX_POOL_STRIDE = 15  # TPU-MLIR makes pools with a larger stride global (reference s2.1)


def classify(op_type: str, attrs: Mapping[str, Any], in_ranks: list[int], out_ranks: list[int]
             ) -> tuple[bool, bool, bool, str]:
    """(local, h_split, n_split, reason-if-global) for an op of this type and attributes."""
    if op_type not in LOCAL_TYPES:
        return False, False, False, f"{op_type} is not a layer-group op"
    if any(r != 4 for r in in_ranks + out_ranks):
        return False, False, False, f"{op_type} on non-4-D tensors"
    if op_type in POOL_TYPES and max(attrs.get("strides", (1, 1))) > MAX_POOL_STRIDE:
        return False, False, False, f"{op_type} stride above {MAX_POOL_STRIDE}"
    if op_type == "Concat" and attrs.get("axis") != 1:
        return False, False, False, "Concat not on the channel axis"
    if op_type == "Resize" and attrs.get("mode") not in ("nearest", "linear"):
        return False, False, False, f"Resize mode {attrs.get('mode')!r}"
    if op_type == "ReduceMean" and tuple(sorted(attrs.get("axes", ()))) != (2, 3):
        return False, False, False, "ReduceMean not over H and W"
    h_split = op_type not in GLOBAL_POOL_TYPES
    return True, h_split, True, ""


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
    t = op.type
    a = op.attrs
    if out[0] >= out[1]:
        return (0, 0)
    if t in CONV_TYPES or t in POOL_TYPES:
        return _sliding_window_rows(out, a["kernel"][0], a["strides"][0], a.get("dilations", (1, 1))[0],
                                    a["pads"][0], in_h)
    if t in DECONV_TYPES:
        return _deconv_rows(out, a["kernel"][0], a["strides"][0], a.get("dilations", (1, 1))[0], a["pads"][0], in_h)
    if t in GLOBAL_POOL_TYPES:
        return (0, in_h)
    if t == "Resize":
        lo, _ = resize_source(out[0], in_h, out_h, {**a, "coord": a.get("coord_h", a.get("coord"))})
        _, hi = resize_source(out[1] - 1, in_h, out_h, {**a, "coord": a.get("coord_h", a.get("coord"))})
        return (lo, hi + 1)
    # elementwise, activations, concat: identity, or the single row of a broadcast operand
    if in_h == 1 and out_h != 1:
        return (0, 1)
    return out


def backward_n(op: Op, k: int, out: Window, in_n: int) -> Window:
    """Batches of input ``k`` that output batches ``out`` need (identity, or a broadcast batch)."""
    if out[0] >= out[1]:
        return (0, 0)
    if in_n == 1:
        return (0, 1)
    return out


def window_union(a: Window | None, b: Window) -> Window:
    if a is None:
        return b
    return (min(a[0], b[0]), max(a[1], b[1]))

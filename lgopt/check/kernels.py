"""Numpy kernels that compute an op on a *window* of rows, for the plan simulator and its reference.

Every kernel takes its operands as windows (the rows ``[start, start + rows)`` of each input that LMEM
holds for a slice, and its columns when W is sliced) and computes output rows ``[a, b)`` at full width.
A row or column the op needs but the window does not hold is NaN, so a plan with a short halo produces
NaN instead of silently plausible numbers; the simulator keeps the output columns its slice computes
(those read only held columns when the plan is right).  The unsliced reference calls the same kernels
with whole tensors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from lgopt.model.network import Network, Op, Tensor, to_nchw
from lgopt.model.ops import OP_SPECS, Family, lane_move, resize_coord, resize_source


@dataclass(frozen=True)
class Win:
    """Rows ``[h0, h0 + data.shape[2])``, columns ``[w0, w0 + data.shape[3])`` and batches ``[n0, ...)`` of a
    tensor of full height ``H`` and width ``W`` (0: the window holds every column)."""

    data: np.ndarray  # (n, c, h, w)
    n0: int
    h0: int
    H: int
    w0: int = 0
    W: int = 0

    @property
    def width(self) -> int:
        return self.W or self.data.shape[3]


def rows(x: Win, lo: int, hi: int, pad: float) -> np.ndarray:
    """Rows ``[lo, hi)`` in tensor coordinates at full width: padding outside the tensor, NaN where the
    window ends (rows past it, and columns it does not hold)."""
    n, c, _, w = x.data.shape
    out = np.full((n, c, hi - lo, x.width), np.nan)
    for r in range(lo, hi):
        if r < 0 or r >= x.H:
            out[:, :, r - lo] = pad
        elif x.h0 <= r < x.h0 + x.data.shape[2]:
            out[:, :, r - lo, x.w0:x.w0 + w] = x.data[:, :, r - x.h0]
    return out


def _pad_w(a: np.ndarray, left: int, right: int, pad: float) -> np.ndarray:
    if left == right == 0:
        return a
    return np.pad(a, ((0, 0), (0, 0), (0, 0), (left, right)), constant_values=pad)


def _batch(x: Win, n0: int, n1: int) -> np.ndarray:
    """Batches [n0, n1) of a window; a batch-1 (broadcast) operand stays as it is."""
    if x.data.shape[0] == 1:
        return x.data
    return x.data[n0 - x.n0:n1 - x.n0]


def _geometry(op: Op) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, ...], int]:
    """(kernel, strides, dilations, pads (t, l, b, r), group) of a conv or pool."""
    a = op.attrs
    return a["kernel"], a["strides"], a.get("dilations", (1, 1)), a["pads"], a.get("group", 1)


def conv(op: Op, x: Win, w: np.ndarray, bias: np.ndarray | None, a: int, b: int, ow: int) -> np.ndarray:
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, _, pr), g = _geometry(op)
    lo = a * sh - pt
    hi = (b - 1) * sh - pt + (kh - 1) * dh + 1
    xin = _pad_w(rows(x, lo, hi, 0.0), pl, pr, 0.0)
    n, c, _, _ = xin.shape
    oc = w.shape[0]
    out = np.zeros((n, oc, b - a, ow))
    icg, ocg = c // g, oc // g
    for i in range(kh):
        for j in range(kw):
            tap = xin[:, :, i * dh:i * dh + (b - a - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
            for gi in range(g):
                out[:, gi * ocg:(gi + 1) * ocg] += np.einsum(
                    "nchw,oc->nohw", tap[:, gi * icg:(gi + 1) * icg], w[gi * ocg:(gi + 1) * ocg, :, i, j])
    if bias is not None:
        out += bias.reshape(1, -1, 1, 1)
    return out


def deconv(op: Op, x: Win, w: np.ndarray, bias: np.ndarray | None, a: int, b: int, ow: int) -> np.ndarray:
    """ONNX ConvTranspose: out[o] += in[i] * w[k] where o = i*s - pad + k*d (filter [ic, oc/g, kh, kw])."""
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, _, _), g = _geometry(op)
    n, c, _, _ = x.data.shape
    iw = x.width
    ocg = w.shape[1]
    out = np.zeros((n, ocg * g, b - a, ow))
    icg = c // g
    ilo = max(0, -(-(a + pt - (kh - 1) * dh) // sh))
    ihi = min(x.H - 1, (b - 1 + pt) // sh)
    xin = rows(x, ilo, ihi + 1, 0.0) if ihi >= ilo else np.zeros((n, c, 0, iw))
    for i in range(ilo, ihi + 1):
        for ki in range(kh):
            o = i * sh - pt + ki * dh
            if not a <= o < b:
                continue
            for j in range(iw):
                for kj in range(kw):
                    oc_ = j * sw - pl + kj * dw
                    if not 0 <= oc_ < ow:
                        continue
                    for gi in range(g):
                        out[:, gi * ocg:(gi + 1) * ocg, o - a, oc_] += np.einsum(
                            "nc,co->no", xin[:, gi * icg:(gi + 1) * icg, i - ilo, j],
                            w[gi * icg:(gi + 1) * icg, :, ki, kj])
    if bias is not None:
        out += bias.reshape(1, -1, 1, 1)
    return out


def pool(op: Op, x: Win, a: int, b: int, ow: int) -> np.ndarray:
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, _, pr), _ = _geometry(op)
    is_max = op.type == "MaxPool"
    lo = a * sh - pt
    hi = (b - 1) * sh - pt + (kh - 1) * dh + 1
    extra_r = max(0, (ow - 1) * sw - pl + (kw - 1) * dw + 1 - x.width - pr)  # ceil_mode overhang
    src = rows(x, lo, hi, -np.inf if is_max else 0.0)
    xin = _pad_w(src, pl, pr + extra_r, -np.inf if is_max else 0.0)
    ones = np.ones((1, 1, x.H, x.width))
    valid = _pad_w(rows(Win(ones, 0, 0, x.H), lo, hi, 0.0), pl, pr + extra_r, 0.0)
    outs, counts = [], []
    for i in range(kh):
        for j in range(kw):
            sl = (slice(None), slice(None), slice(i * dh, i * dh + (b - a - 1) * sh + 1, sh),
                  slice(j * dw, j * dw + (ow - 1) * sw + 1, sw))
            outs.append(xin[sl])
            counts.append(valid[sl])
    stack = np.stack(outs)
    if is_max:
        return stack.max(axis=0)
    if op.attrs.get("count_include_pad", 0):
        return stack.sum(axis=0) / (kh * kw)
    return stack.sum(axis=0) / np.maximum(np.stack(counts).sum(axis=0), 1)


def resize(op: Op, x: Win, a: int, b: int, out_h: int, out_w: int) -> np.ndarray:
    in_w = x.width
    attrs_h = {**op.attrs, "coord": op.attrs.get("coord_h", op.attrs.get("coord"))}
    lo = min(resize_source(a, x.H, out_h, attrs_h)[0], x.H - 1)
    hi = max(resize_source(b - 1, x.H, out_h, attrs_h)[1], lo) + 1
    src = rows(x, lo, hi, np.nan)

    def axis_plan(n_out: int, n_in: int, attrs) -> list[tuple[int, int, float]]:
        plan = []
        for o in range(n_out):
            i0, i1 = resize_source(o, n_in, n_out, attrs)
            if attrs.get("mode") == "nearest":
                plan.append((i0, i0, 0.0))
            else:
                xf = resize_coord(o, n_in, n_out, attrs)
                frac = float(xf - math.floor(xf)) if 0 <= xf < n_in - 1 else (0.0 if xf < 0 else 1.0)
                plan.append((i0, i1, frac if i1 != i0 else 0.0))
        return plan

    hp = axis_plan(out_h, x.H, attrs_h)[a:b]
    wp = axis_plan(out_w, in_w, op.attrs)
    r0 = np.stack([src[:, :, i0 - lo] for i0, _, _ in hp], axis=2)
    r1 = np.stack([src[:, :, i1 - lo] for _, i1, _ in hp], axis=2)
    fh = np.array([f for _, _, f in hp]).reshape(1, 1, -1, 1)
    vert = r0 * (1 - fh) + r1 * fh if op.attrs.get("mode") != "nearest" else r0
    c0 = vert[..., [i0 for i0, _, _ in wp]]
    c1 = vert[..., [i1 for _, i1, _ in wp]]
    fw = np.array([f for _, _, f in wp]).reshape(1, 1, 1, -1)
    return c0 * (1 - fw) + c1 * fw if op.attrs.get("mode") != "nearest" else c0


_ERF = np.vectorize(math.erf, otypes=[float])


def activation(name: str, y: np.ndarray, attrs: dict, prefix: str = "") -> np.ndarray:
    if name == "Relu":
        return np.maximum(y, 0)
    if name == "Clip":
        lo, hi = attrs.get(prefix + "min"), attrs.get(prefix + "max")
        return np.clip(y, -np.inf if lo is None else lo, np.inf if hi is None else hi)
    if name == "LeakyRelu":
        alpha = attrs.get(prefix + "alpha", 0.01)
        return np.where(y >= 0, y, alpha * y)
    if name == "Sigmoid":
        return 1 / (1 + np.exp(-y))
    if name == "SiLU":
        return y / (1 + np.exp(-y))
    if name == "HardSigmoid":
        return np.clip(attrs.get("alpha", 0.2) * y + attrs.get("beta", 0.5), 0, 1)
    if name == "HardSwish":
        return y * np.clip(y / 6 + 0.5, 0, 1)
    if name == "Tanh":
        return np.tanh(y)
    if name == "Erf":
        return _ERF(y)
    if name == "Neg":
        return -y
    if name == "Requant":  # int32 -> int8 with its scale: the value, as lgopt simulates every dtype in float
        return y
    if name == "Sqrt":
        return np.sqrt(y)
    if name == "Gelu":  # ONNX Gelu: x * Phi(x), or its tanh approximation
        if attrs.get("approximate", "none") == "tanh":
            return 0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3)))
        return 0.5 * y * (1 + _ERF(y / math.sqrt(2)))
    raise NotImplementedError(name)


def matmul(x: Win, b: Win | np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Rows [lo, hi) of A @ B over the last axis: B a [K, N] weight, or a batch of matrices whose rows are
    the contracted axis (all of them needed: a missing one is NaN and spreads to every output)."""
    a = rows(x, lo, hi, np.nan)
    if isinstance(b, np.ndarray):
        return np.einsum("nchk,kj->nchj", a, b)
    return np.matmul(a, rows(b, 0, b.H, np.nan))


def rowwise(op: Op, x: np.ndarray, weights: dict[str, np.ndarray]) -> np.ndarray:
    """Softmax or LayerNormalization of every row over the last axis (W), ONNX semantics."""
    if op.type == "Softmax":
        e = np.exp(x - x.max(axis=3, keepdims=True))
        return e / e.sum(axis=3, keepdims=True)
    mean = x.mean(axis=3, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=3, keepdims=True)
    y = (x - mean) / np.sqrt(var + op.attrs.get("epsilon", 1e-5))
    p = {w.role: _const(weights[w.name], x.shape[1]) for w in op.weights}
    return y * p.get("scale", 1.0) + p.get("bias", 0.0)


def group_norm(op: Op, x: np.ndarray, weights: dict[str, np.ndarray]) -> np.ndarray:
    """GroupNormalization of whole ``[N, C, H, W]`` planes: each batch's ``num_groups`` runs of channels
    normalised over their channels, H and W (ONNX semantics; a per-channel scale and bias when given)."""
    n, c, h, w = x.shape
    g = int(op.attrs["num_groups"])
    xg = x.reshape(n, g, -1)
    mean = xg.mean(axis=2, keepdims=True)
    var = ((xg - mean) ** 2).mean(axis=2, keepdims=True)
    y = ((xg - mean) / np.sqrt(var + op.attrs.get("epsilon", 1e-5))).reshape(n, c, h, w)
    p = {wt.role: np.asarray(weights[wt.name], dtype=np.float64).reshape(1, c, 1, 1) for wt in op.weights}
    return y * p.get("scale", 1.0) + p.get("bias", 0.0)


def run_local(net: Network, op: Op, ins: list[Win], weights: dict[str, np.ndarray], n: tuple[int, int],
              a: int, b: int, c_len: int | None = None) -> np.ndarray:
    """Output rows [a, b) and batches ``n`` of a local op from its input windows; ``c_len``: the output channels
    of a channel slice (the windows then hold those channels, a channel-local op computes them alone)."""
    out = net.tensor(op.outputs[0])
    oc = out.c if c_len is None else c_len
    spec = OP_SPECS.get(op.type)
    family = spec.family if spec is not None else None
    filt = next((weights[w.name] for w in op.weights if w.role == "filter"), None)
    bias = next((weights[w.name] for w in op.weights if w.role == "bias"), None)
    xs = [replace(x, data=_batch(x, *n), n0=n[0]) for x in ins]
    j = _Job(op, out, oc, ins, xs, weights, n, a, b, [net.tensor(t).orig_shape for t in op.inputs])
    if family in (Family.CONV, Family.DECONV, Family.POOL, Family.GLOBAL_POOL, Family.RESIZE):
        y = _run_spatial(j, family, filt, bias)
    elif family in (Family.CHANNEL_SLICE, Family.RESHAPE) or _planes_transposed(op):
        y = _run_moved(j, family)
    elif family is Family.MATMUL:
        y = matmul(xs[0], filt if filt is not None else xs[1], a, b)
        if bias is not None:  # a linear layer's bias Add, folded in by the importer: one per output column
            y = y + _const(bias, out.c)
    elif family is Family.ROWWISE:
        y = rowwise(op, rows(xs[0], a, b, np.nan), weights)
    elif family is Family.GROUP_NORM:
        y = group_norm(op, rows(xs[0], 0, xs[0].H, np.nan), weights)[:, :, a:b]
    elif family is Family.CONCAT:
        y = _run_concat(j)
    elif family is Family.BINARY:
        y = _run_binary(j)
    else:
        y = _run_pointwise(j)
    for act in op.fused:
        y = activation(act, y, dict(op.attrs), prefix="act_")
    return y


@dataclass(frozen=True)
class _Job:
    """One call of :func:`run_local`: what the kernel of the op's family reads."""

    op: Op
    out: Tensor
    oc: int  # output channels computed
    ins: list[Win]  # the input windows as given
    xs: list[Win]  # the same, cut to the batches ``n``
    weights: dict[str, np.ndarray]
    n: tuple[int, int]
    a: int  # output rows [a, b)
    b: int
    in_shapes: Sequence[tuple[int, ...]] = ()  # the inputs' true shapes


def _planes_transposed(op: Op) -> bool:
    """A Transpose that swaps the last two axes: each lane's planes transposed."""
    return op.type == "Transpose" and tuple(op.attrs.get("perm", ()))[-2:] == (3, 2)


def _run_spatial(j: _Job, family: Family, filt: np.ndarray | None, bias: np.ndarray | None) -> np.ndarray:
    """Convolutions, pools (global ones from the whole input) and resizes."""
    op, out, xs, a, b = j.op, j.out, j.xs, j.a, j.b
    if family is Family.CONV:
        assert filt is not None, f"{op.name}: Conv without a filter"
        return conv(op, xs[0], filt, bias, a, b, out.w)
    if family is Family.DECONV:
        assert filt is not None, f"{op.name}: ConvTranspose without a filter"
        return deconv(op, xs[0], filt, bias, a, b, out.w)
    if family is Family.POOL:
        return pool(op, xs[0], a, b, out.w)
    if family is Family.GLOBAL_POOL and out.h == xs[0].H:  # ReduceMean over each row's last axis
        return rows(xs[0], a, b, np.nan).mean(axis=3, keepdims=True)
    if family is Family.GLOBAL_POOL:
        full = rows(xs[0], 0, xs[0].H, np.nan)
        return full.max(axis=(2, 3), keepdims=True) if op.type == "GlobalMaxPool" \
            else full.mean(axis=(2, 3), keepdims=True)
    return resize(op, xs[0], a, b, out.h, out.w)


def _run_moved(j: _Job, family: Family | None) -> np.ndarray:
    """Ops that move data without computing: slices (of batches, rows, a row's last axis or channels), a
    Transpose of each lane's planes, reshapes."""
    op, out, oc, xs, n, a, b = j.op, j.out, j.oc, j.xs, j.n, j.a, j.b
    if family is Family.CHANNEL_SLICE and op.attrs["axis"] == 0 and out.n != op.attrs["end"] - op.attrs["start"]:
        whole, s, e = j.ins[0], op.attrs["start"], op.attrs["end"]  # batches re-laid: the group holds them whole
        taken = replace(whole, data=whole.data[s - whole.n0:e - whole.n0], n0=s)
        return rows(taken, 0, whole.H, np.nan).reshape(out.n, oc, out.h, out.w)[n[0]:n[1], :, a:b]
    if family is Family.CHANNEL_SLICE and op.attrs["axis"] == 0:  # whole batches, re-folded as the output lies
        whole, b0 = j.ins[0], op.attrs["start"] + n[0]
        taken = replace(whole, data=whole.data[b0 - whole.n0:b0 - whole.n0 + n[1] - n[0]], n0=b0)
        return rows(taken, 0, whole.H, np.nan).reshape(n[1] - n[0], oc, out.h, out.w)[:, :, a:b]
    if family is Family.CHANNEL_SLICE and op.attrs["axis"] not in (-2, -1, 1):  # within the folded H: held whole
        axis = op.attrs["axis"] % len(j.in_shapes[0])
        data = np.take(rows(j.ins[0], 0, j.ins[0].H, np.nan).reshape(j.in_shapes[0]),
                       range(op.attrs["start"], op.attrs["end"]), axis=axis)
        return data.reshape(out.n, oc, out.h, out.w)[n[0]:n[1], :, a:b]
    if family is Family.CHANNEL_SLICE and op.attrs["axis"] == -2:  # a run of rows (the input whole)
        return rows(xs[0], 0, xs[0].H, np.nan)[:, :, op.attrs["start"]:op.attrs["end"]][:, :, a:b]
    if family is Family.CHANNEL_SLICE and op.attrs["axis"] == -1:  # a run of each row's last axis
        return rows(xs[0], a, b, np.nan)[..., op.attrs["start"]:op.attrs["end"]]
    if family is Family.CHANNEL_SLICE:
        return rows(xs[0], a, b, np.nan)[:, op.attrs["start"]:op.attrs["end"]]
    if _planes_transposed(op):
        return rows(xs[0], 0, xs[0].H, np.nan).transpose(0, 1, 3, 2)[:, :, a:b]
    if lane_move(op.type, op.attrs, j.in_shapes, out.orig_shape):  # held (lgopt.tpumlir.attention.hold_moves):
        x = xs[0] if op.n_split else j.ins[0]  # on the true shapes, the slice's batches or every one
        data = rows(x, 0, x.H, np.nan)
        if op.type == "Transpose":
            data = data.reshape((-1,) + tuple(op.attrs["in_dims"][1:])).transpose(op.attrs["perm"])
        y = data.reshape(-1, oc, out.h, out.w)
        return (y if op.n_split else y[n[0]:n[1]])[:, :, a:b]
    src = xs[0]  # a reshape, a view: the rows re-split when the shape changes (then never H-sliced)
    return rows(src, a, b, np.nan) if (src.H, src.data.shape[1], src.data.shape[3]) == (out.h, oc, out.w) \
        else rows(src, 0, src.H, np.nan).reshape(n[1] - n[0], oc, out.h, out.w)[:, :, a:b]


def _run_concat(j: _Job) -> np.ndarray:
    """Concat: of rows (every input whole, constants' rows on every batch, then the slice's rows), or within
    each row or of channels."""
    op, out, xs, n, a, b = j.op, j.out, j.xs, j.n, j.a, j.b
    if op.attrs["axis"] not in (1, -1, -2):  # within the folded H axis: the group holds it whole
        parts = [rows(x, 0, x.H, np.nan).reshape(shape) for x, shape in zip(j.ins, j.in_shapes)]
        data = np.concatenate(parts, axis=op.attrs["axis"] % len(j.in_shapes[0]))
        return data.reshape(out.n, j.oc, out.h, out.w)[n[0]:n[1], :, a:b]
    if op.attrs["axis"] != -2:
        return np.concatenate([rows(x, a, b, np.nan) for x in xs], axis=3 if op.attrs["axis"] == -1 else 1)
    fixed = iter(_const(j.weights[w.name], out.c) for w in op.weights)  # a constant's rows, on every batch
    acts = iter(xs)
    parts = []
    for k in range(len(xs) + len(op.weights)):
        if k in op.attrs.get("const_at", ()):
            v = next(fixed)
            parts.append(np.broadcast_to(v, (n[1] - n[0],) + v.shape[1:]))
        else:
            src = next(acts)
            parts.append(rows(src, 0, src.H, np.nan))
    return np.concatenate(parts, axis=2)[:, :, a:b]


def _run_binary(j: _Job) -> np.ndarray:
    """Elementwise binary ops, broadcasting: an operand with one row, or a constant, applies to every row."""
    op, out, xs, n, a, b = j.op, j.out, j.xs, j.n, j.a, j.b
    f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Max": np.maximum,
         "Min": np.minimum, "Pow": np.power}[op.type]
    if not op.n_split:  # held whole (ranks the fold cannot broadcast): numpy's broadcast on the true shapes
        whole = [rows(x, 0, x.H, np.nan).reshape(shape) for x, shape in zip(j.ins, j.in_shapes)]
        whole += [np.asarray(j.weights[w.name], dtype=float).reshape(w.shape) for w in op.weights]
        data = whole[0]
        for z in whole[1:]:
            data = f(data, z)
        return np.broadcast_to(data, out.orig_shape).reshape(out.n, j.oc, out.h, out.w)[n[0]:n[1], :, a:b].copy()
    operands = [rows(x, a, b, np.nan) if x.H == out.h else rows(x, 0, 1, np.nan) for x in xs]
    consts = [_const(j.weights[w.name], out.c) for w in op.weights]
    operands += [v[:, :, a:b] if v.shape[2] == out.h else v for v in consts]  # a constant with rows: this slice's
    y = operands[0]
    for z in operands[1:]:
        y = f(y, z)
    return np.broadcast_to(y, (n[1] - n[0], j.oc, b - a, out.w)).copy()


def _run_pointwise(j: _Job) -> np.ndarray:
    """PRelu, BatchNormalization (inference), and the activations."""
    op, t, weights = j.op, j.op.type, j.weights
    x = rows(j.xs[0], j.a, j.b, np.nan)
    if t == "PRelu":
        slope = _const(weights[op.weights[0].name], j.out.c)
        return np.where(x >= 0, x, slope * x)
    if t == "BatchNormalization":
        p = {w.role: weights[w.name].reshape(1, -1, 1, 1) for w in op.weights}
        return (x - p.get("mean", 0)) / np.sqrt(p.get("var", 1) + op.attrs.get("epsilon", 1e-5)) * p.get("scale", 1) \
            + p.get("bias", 0)
    return activation(t, x, dict(op.attrs))


def _const(v: np.ndarray, channels: int) -> np.ndarray:
    """A constant operand folded like the activations: per-channel vectors become (1, C, 1, 1), others (which
    the importer right-aligns to their activation's rank) fold as that activation does."""
    if v.ndim == 1 and v.size == channels:
        return v.reshape(1, -1, 1, 1)
    if v.ndim == 1:
        return v.reshape(1, 1, 1, -1)
    return v.reshape(to_nchw(v.shape))

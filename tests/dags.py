"""Hypothesis strategy: random conv / pool / deconv / upsample / eltwise / concat DAGs as Networks."""

from __future__ import annotations

from math import ceil

from hypothesis import strategies as st

from lgopt.model.network import Network, Op, Tensor, Weight, check_network
from lgopt.model.ops import classify


def _op(name, typ, ins, outs, attrs, weights=(), in_shapes=None, out_shapes=None):
    """An op classified as the importers do; operands are 4-D of one shape unless given."""
    local, h, n, why = classify(typ, attrs, in_shapes or [(1, 8, 8, 8)] * len(ins),
                                out_shapes or [(1, 8, 8, 8)] * len(outs), any(w.role == "filter" for w in weights))
    return Op(name, typ, tuple(ins), tuple(outs), tuple(weights), attrs, (), local, h, n, (name,), why)


def _window_out(draw, size: int, ceil_mode: bool, dilated: bool) -> tuple[int, int, int, int, int, int] | None:
    """(kernel, stride, dilation, pad begin, pad end, output size) of a sliding window along one axis."""
    k = draw(st.integers(1, 5))
    s = draw(st.integers(1, 3))
    d = draw(st.integers(1, 2)) if dilated else 1
    k_ext = (k - 1) * d + 1
    pb_, pe = draw(st.integers(0, k_ext - 1)), draw(st.integers(0, k_ext - 1))
    span = size + pb_ + pe - k_ext
    if span < 0:
        return None
    o = (ceil(span / s) if ceil_mode else span // s) + 1
    if ceil_mode and (o - 1) * s >= size + pb_:
        o -= 1
    return k, s, d, pb_, pe, o


@st.composite
def dags(draw, max_ops: int = 6, dtype: str = "f16", two_d: bool = False):
    """Random DAGs; ``two_d``: kernels, strides, pads and upsampling along W as well (for W slices)."""
    n = draw(st.integers(1, 3))
    c = draw(st.sampled_from([3, 8, 16]))
    h = draw(st.integers(6, 48))
    w = draw(st.integers(6, 24)) if two_d else draw(st.integers(1, 12))
    tensors = {"x": Tensor("x", (n, c, h, w), dtype, (n, c, h, w))}
    ops: list[Op] = []
    avail = ["x"]
    for i in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(["conv", "conv", "pool", "deconv", "up", "add", "concat", "act"]))
        src = draw(st.sampled_from(avail))
        sn, sc, sh, sw = tensors[src].shape
        out = f"t{i}"
        name = f"op{i}"
        if kind in ("conv", "pool"):
            ceil_mode = kind == "pool" and draw(st.booleans())
            hw = _window_out(draw, sh, ceil_mode, kind == "conv")
            ww = _window_out(draw, sw, ceil_mode, kind == "conv") if two_d else (1, 1, 1, 0, 0, sw)
            if hw is None or ww is None:
                continue
            k, s, d, pt, pb, oh = hw
            kw, sw_, dw, pl, pr, ow = ww
            attrs = {"kernel": (k, kw), "strides": (s, sw_), "dilations": (d, dw), "pads": (pt, pl, pb, pr)}
            if kind == "conv":
                oc = draw(st.sampled_from([4, 8, 16]))
                attrs["group"] = 1
                op = _op(name, "Conv", [src], [out], attrs, [Weight(f"{name}.w", (oc, sc, k, kw), dtype, "filter")])
                shape = (sn, oc, oh, ow)
            else:
                attrs["ceil_mode"] = int(ceil_mode)
                op = _op(name, "MaxPool", [src], [out], attrs)
                shape = (sn, sc, oh, ow)
        elif kind == "deconv":
            k = draw(st.integers(1, 4))
            s = draw(st.integers(1, 3))
            p = draw(st.integers(0, k - 1))
            oh = (sh - 1) * s - 2 * p + k
            kw, sw_, pw = (k, s, p) if two_d else (1, 1, 0)
            ow = (sw - 1) * sw_ - 2 * pw + kw
            if oh < 1 or ow < 1:
                continue
            attrs = {"kernel": (k, kw), "strides": (s, sw_), "dilations": (1, 1), "pads": (p, pw, p, pw), "group": 1}
            op = _op(name, "ConvTranspose", [src], [out], attrs,
                     [Weight(f"{name}.w", (sc, 4, k, kw), dtype, "filter")])
            shape = (sn, 4, oh, ow)
        elif kind == "up":
            scale = draw(st.integers(2, 3))
            mode = draw(st.sampled_from(["nearest", "linear"]))
            coord = "asymmetric" if mode == "nearest" else draw(st.sampled_from(["half_pixel", "align_corners"]))
            attrs = {"mode": mode, "coord": coord, "nearest_mode": "floor"}
            op = _op(name, "Resize", [src], [out], attrs)
            shape = (sn, sc, sh * scale, sw * scale if two_d else sw)
        elif kind == "add":
            same = [t for t in avail if tensors[t].shape == tensors[src].shape]
            other = draw(st.sampled_from(same))
            op = _op(name, "Add", [src, other], [out], {})
            shape = tensors[src].shape
        elif kind == "concat":
            same = [t for t in avail if tensors[t].shape[2:] == (sh, sw) and tensors[t].n == sn]
            other = draw(st.sampled_from(same))
            op = _op(name, "Concat", [src, other], [out], {"axis": 1})
            shape = (sn, sc + tensors[other].c, sh, sw)
        else:
            op = _op(name, "Relu", [src], [out], {})
            shape = tensors[src].shape
        tensors[out] = Tensor(out, shape, dtype, shape)
        ops.append(op)
        avail.append(out)
    if not ops:
        tensors["t0"] = Tensor("t0", (n, c, h, w), dtype, (n, c, h, w))
        ops.append(_op("op0", "Relu", ["x"], ["t0"], {}))
    consumed = {t for op in ops for t in op.inputs}
    outputs = tuple(t for op in ops for t in op.outputs if t not in consumed)
    return check_network(Network("random", tensors, tuple(ops), ("x",), outputs))

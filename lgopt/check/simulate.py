"""Execute a plan on a simulated LMEM and compare with the unsliced network.

The verifier checks a plan's constraints; this checks its meaning.  GMEM holds whole tensors; LMEM
is ``npu_num`` lanes of ``lmem_bytes``, addressed per lane as the plan's offsets say.  Every slice of
every group runs its timestep table in pipeline order (per row: loads, then the ops, then stores), with
tensors scattered over lanes in the EU-aligned layout of the seeds and weights in the reordered layout
(IC_PARALLEL input channels innermost, output channels over lanes, bias merged in front).  Buffers are
*poisoned* (set to NaN) when their declared lifetime ends and op scratch is filled with garbage while
the op runs, so a buffer freed a row too early, two live buffers sharing bytes, a short halo or a
wrong weight offset shows up as a wrong number.  Global layers run on whole tensors; ops lgopt has no
kernel for (Gemm, Reshape, ...) are *opaque*: their outputs are drawn at random, identically in the
simulation and the reference, and the result says so.

Data are small integers and dyadic weights, so most results are exact; comparisons allow a relative
1e-6 for the transcendental activations and summation order.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace

import numpy as np

from lgopt.check.kernels import Win, run_local
from lgopt.errors import LgoptError
from lgopt.hw.chip import Chip, chip_from_dict
from lgopt.hw.layout import align_up, cdiv
from lgopt.hw.sizing import is_depthwise, three_ic
from lgopt.model.dtype import dtype_bytes
from lgopt.model.network import Network, Op, lane_shape_of
from lgopt.model.plan import Buffer, GroupPlan, Plan

RTOL = 1e-6


@dataclass(frozen=True)
class Mismatch:
    tensor: str
    slice: int | None
    index: tuple[int, ...]
    expected: float
    got: float

    def __str__(self) -> str:
        where = f" (stored by slice {self.slice})" if self.slice is not None else ""
        return (f"tensor {self.tensor}{where} differs at {list(self.index)}: "
                f"expected {self.expected:g}, got {self.got:g}")


@dataclass(frozen=True)
class SimResult:
    ok: bool
    mismatch: Mismatch | None
    compared: int  # tensors compared
    opaque: tuple[str, ...] = ()
    error: str = ""

    def summary(self) -> str:
        tail = f"; opaque ops (random outputs, same in both): {len(self.opaque)}" if self.opaque else ""
        if self.error:
            return f"FAIL: {self.error}"
        if self.ok:
            return f"OK: {self.compared} tensors match the unsliced reference{tail}"
        return f"FAIL: {self.mismatch}{tail}"


class SimError(Exception):
    pass


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def make_weights(net: Network, seed: int) -> dict[str, np.ndarray]:
    """Dyadic weights scaled to keep activations O(1); BN statistics chosen so folding is exact."""
    out: dict[str, np.ndarray] = {}
    for op in net.ops:
        for w in op.weights:
            r = _rng(seed, w.name)
            shape = tuple(w.shape) or (1,)
            if w.role == "filter":
                fan = max(1, int(np.prod(shape[1:])))
                scale = 2.0 ** -round(np.log2(max(1.0, np.sqrt(fan))))
                out[w.name] = r.integers(-2, 3, size=shape) * scale
            elif w.role == "var":
                out[w.name] = np.full(shape, 1.0 - op.attrs.get("epsilon", 1e-5))
            elif w.role == "mean":
                out[w.name] = np.zeros(shape)
            elif w.role == "scale":
                out[w.name] = r.integers(1, 5, size=shape) / 4.0
            elif op.type == "Pow":  # an exponent that keeps x**y real for negative x (LayerNorm's square)
                out[w.name] = np.full(shape, 2.0)
            elif w.role == "const":  # positive: a divisor, or the epsilon under a decomposed LayerNorm's Sqrt
                out[w.name] = r.integers(1, 5, size=shape) / 4.0
            else:
                out[w.name] = r.integers(-4, 5, size=shape) / 4.0
    return out


def make_inputs(net: Network, seed: int) -> dict[str, np.ndarray]:
    return {t: _rng(seed, "input:" + t).integers(-3, 4, size=net.tensor(t).shape).astype(float) for t in net.inputs}


def _opaque(net: Network, op: Op, seed: int) -> dict[str, np.ndarray]:
    """Random small integers of either sign, never 0: an opaque op's output may be a divisor (EdgeNeXt's
    ``q / clip(norm(q))``, the norm's Expand global), and a 0 there would make the reference NaN, which marks
    data a slice never loaded."""
    def values(t: str) -> np.ndarray:
        r = _rng(seed, "opaque:" + t)
        shape = net.tensor(t).shape
        return (r.integers(1, 4, size=shape) * r.choice((-1, 1), size=shape)).astype(float)
    return {t: values(t) for t in op.outputs}


def _whole(net: Network, op: Op, values: dict[str, np.ndarray], weights: dict[str, np.ndarray]) -> np.ndarray:
    ins = [Win(values[t], 0, 0, net.tensor(t).h) for t in op.inputs]
    out = net.tensor(op.outputs[0])
    return run_local(net, op, ins, _as_op_reads(op, weights), (0, out.n), 0, out.h)


def reference(net: Network, seed: int = 0,
              weights: dict[str, np.ndarray] | None = None) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
    """Every tensor of the unsliced network, and the ops computed as opaque (``weights``: the weights to use,
    :func:`make_weights`' by default)."""
    weights = make_weights(net, seed) if weights is None else weights
    values = dict(make_inputs(net, seed))
    opaque = []
    for op in net.ops:
        if op.local:
            values[op.outputs[0]] = _whole(net, op, values, weights)
        else:
            values.update(_opaque(net, op, seed))
            opaque.append(op.name)
    return values, tuple(opaque)


# --- LMEM layouts --------------------------------------------------------------------------------

@dataclass
class Lmem:
    chip: Chip
    data: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.data = np.full((self.chip.npu_num, self.chip.lmem_bytes), np.nan)

    def put(self, lanes: np.ndarray, addr: np.ndarray, values: np.ndarray) -> None:
        if addr.size and (addr.min() < 0 or addr.max() >= self.chip.lmem_bytes):
            raise SimError(f"an access falls outside LMEM (byte {int(addr.max())})")
        self.data[lanes, addr] = values

    def get(self, lanes: np.ndarray, addr: np.ndarray) -> np.ndarray:
        if addr.size and (addr.min() < 0 or addr.max() >= self.chip.lmem_bytes):
            raise SimError(f"an access falls outside LMEM (byte {int(addr.max())})")
        return self.data[lanes, addr]


def activation_addresses(chip: Chip, offset: int, shape: tuple[int, int, int, int], dtype: str
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Lane and byte of every element of an (n, c, h, w) slice in the EU-aligned layout from lane 0."""
    n, c, h, w = shape
    if chip.align_4n and dtype_bytes(dtype) < 4:
        raise SimError(f"the simulator does not model 4N/2N storage ({dtype} on {chip.name})")
    X = chip.npu_num
    db = dtype_bytes(dtype)
    cpl = cdiv(c, X)
    cs = align_up(h * w, chip.eu_elems(dtype))
    nn, cc, hh, ww = np.meshgrid(np.arange(n), np.arange(c), np.arange(h), np.arange(w), indexing="ij")
    elem = (nn * cpl + cc // X) * cs + hh * w + ww
    return cc % X, offset + elem * db


def weight_layout(chip: Chip, op: Op, weights: dict[str, np.ndarray]
                  ) -> list[tuple[np.ndarray, np.ndarray, str, tuple]]:
    """(lanes, bytes relative to the buffer, weight name, index tuples) for every stored coefficient."""
    X = chip.npu_num
    out: list[tuple[np.ndarray, np.ndarray, str, tuple]] = []
    if op.type in ("Conv", "ConvTranspose"):
        f = next(w for w in op.weights if w.role == "filter")
        b = next((w for w in op.weights if w.role == "bias"), None)
        g = op.attrs.get("group", 1)
        if op.type == "Conv":
            oc, icg, kh, kw = f.shape
        else:
            ic, ocg, kh, kw = f.shape
            oc, icg = ocg * g, ic // g
        db = dtype_bytes(f.dtype)
        bias_bytes = align_up(cdiv(oc, X) * 4, chip.eu_bytes) if b is not None else 0
        o, i, y, x = np.meshgrid(np.arange(oc), np.arange(icg), np.arange(kh), np.arange(kw), indexing="ij")
        mode, taps = three_ic(chip, op) if op.type == "Conv" else (0, 0)
        icp = max(1, chip.ic_parallel // db)
        if is_depthwise(op):
            elem = (o // X) * kh * kw + y * kw + x
        elif mode:  # folded taps are input channels (lgopt.hw.sizing.three_ic): [oc, ic * taps, the other taps]
            ii = {1: i * kh + y, 2: i * kw + x, 3: (i * kh + y) * kw + x}[mode]
            rest, kk = {1: x, 2: y, 3: 0 * x}[mode], kh * kw // taps
            per_oc = cdiv(icg * taps, icp) * icp * kk
            elem = (o // X) * per_oc + (ii // icp) * kk * icp + rest * icp + ii % icp
        else:
            per_oc = cdiv(icg, icp) * icp * kh * kw
            elem = (o // X) * per_oc + (i // icp) * kh * kw * icp + (y * kw + x) * icp + i % icp
        if op.type == "Conv":
            idx = (o, i, y, x)
        else:  # ONNX [ic, oc/g, kh, kw]: output channel o of group gi reads input channel gi*icg + i
            ocg_ = oc // g
            idx = ((o // ocg_) * icg + i, o % ocg_, y, x)
        out.append((o % X, bias_bytes + elem * db, f.name, idx))
        if b is not None:
            oo = np.arange(oc)
            out.append((oo % X, (oo // X) * 4, b.name, (oo,)))
        return out
    pos = 0
    for w in op.weights:
        if w.role in ("mean", "var"):
            continue
        n, c, h, ww = lane_shape_of(w.shape if len(w.shape) != 1 else (1, w.shape[0]))
        db = dtype_bytes(w.dtype)
        nn, cc, hh, xx = np.meshgrid(np.arange(n), np.arange(c), np.arange(h), np.arange(ww), indexing="ij")
        elem = (nn * cdiv(c, X) + cc // X) * h * ww + hh * ww + xx
        flat = np.ravel_multi_index((nn, cc, hh, xx), (n, c, h, ww))
        # unravel the flat indices as a 1-D array: numpy 2.4 unravels some arrays with trailing unit axes wrongly
        at = tuple(i.reshape(flat.shape) for i in np.unravel_index(flat.ravel(), tuple(w.shape) or (1,)))
        out.append((cc % X, pos + elem * db, w.name, at))
        pos += align_up(n * cdiv(c, X) * h * ww * db, 4)
    return out


def _as_op_reads(op: Op, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``weights`` with ``op``'s own in the shape the op gives them: exporters share one initializer between
    ops that read it at different ranks (a scalar as ``(1, 1, 1)`` and ``(1, 1, 1, 1)``; MaxViT's LayerNorm bias,
    ``(1, 1, 1, 512)``, is a squeeze-excitation conv's ``(512,)``), and :func:`make_weights` draws it once."""
    return {**weights, **{w.name: weights[w.name].reshape(w.shape) for w in op.weights
                          if w.shape and weights[w.name].size == int(np.prod(w.shape))}}


def _folded(op: Op, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``op``'s weights as it loads them (:func:`_as_op_reads`), BN statistics folded into scale and bias, as
    the compiler does."""
    weights = _as_op_reads(op, weights)
    if op.type != "BatchNormalization":
        return weights
    p = {w.role: (w.name, weights[w.name]) for w in op.weights}
    if "scale" not in p or "bias" not in p:
        return weights
    eps = op.attrs.get("epsilon", 1e-5)
    scale = p["scale"][1] / np.sqrt(p.get("var", (None, 1.0))[1] + eps)
    bias = p["bias"][1] - p.get("mean", (None, 0.0))[1] * scale
    return {**weights, p["scale"][0]: scale, p["bias"][0]: bias}


def _as_loaded(op: Op) -> Op:
    """``op`` as it runs on the weights :func:`_folded` loaded: a BatchNormalization whose statistics were folded
    into its scale and bias is that scale and bias alone (no statistics, no epsilon).  Its statistics never reach
    LMEM, and an exporter may share one initializer between them and the scale or bias (a BN of ones and zeros:
    MaxViT's ``pre_norm``, whose scale is its variance)."""
    roles = {w.role for w in op.weights}
    if op.type != "BatchNormalization" or not {"scale", "bias"} <= roles:
        return op
    return replace(op, weights=tuple(w for w in op.weights if w.role in ("scale", "bias")),
                   attrs={**op.attrs, "epsilon": 0.0})


# --- the executor ----------------------------------------------------------------------------------

class _GroupRun:
    def __init__(self, net: Network, chip: Chip, g: GroupPlan, gmem: dict[str, np.ndarray],
                 weights: dict[str, np.ndarray], seed: int, handed: tuple[Lmem, GroupPlan] | None = None) -> None:
        self.net, self.chip, self.g, self.gmem, self.weights = net, chip, g, gmem, weights
        self.lmem = Lmem(chip)
        self.buf = {(b.kind, b.name): b for b in g.buffers}
        self.whole = set(g.kept_in) | set(g.kept_out)
        self.garbage = _rng(seed, "scratch")
        if g.kept_in:  # only the bytes the previous group handed over survive, where *it* put them
            if handed is None:
                raise SimError(f"{g.kept_in[0]} is expected in LMEM, but no group handed it over")
            prev_lmem, prev = handed
            for b in prev.buffers:
                if b.kind == "activation" and b.name in g.kept_in:
                    self.lmem.data[:, b.offset:b.offset + b.size] = prev_lmem.data[:, b.offset:b.offset + b.size]

    def window(self, t: str, s: int) -> tuple[int, int, int, int, int, int]:
        """(n0, n1, h0, h1, w0, w1) of slice ``s`` of ``t`` in LMEM."""
        w0, w1 = self.g.cols(t, s, self.net.tensor(t).w)
        return (*self.g.windows[t][s], w0, w1)

    def chans(self, t: str, s: int) -> tuple[int, int]:
        """The channels of slice ``s`` of ``t`` in LMEM (every channel unless the group slices them)."""
        return self.g.chans(t, s, self.net.tensor(t).c)

    def addresses(self, t: str, s: int) -> tuple[np.ndarray, np.ndarray]:
        """Where slice ``s`` of ``t`` lives: its own buffer, or its part of a tensor held whole."""
        n0, n1, h0, h1, w0, w1 = self.window(t, s)
        c0, c1 = self.chans(t, s)
        ten = self.net.tensor(t)
        b = self.buf[("activation", t)]

        def folded(la: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
            """Back from the LMEM shape to the folded one: a rank-3 tensor's rows lie over the lanes."""
            return (la[0].swapaxes(1, 2), la[1].swapaxes(1, 2)) if ten.rows_on_lanes else la

        if t in self.whole:
            lanes, addr = folded(activation_addresses(self.chip, b.offset, ten.lane_shape(ten.n, ten.h), ten.dtype))
            return lanes[n0:n1, :, h0:h1, w0:w1], addr[n0:n1, :, h0:h1, w0:w1]
        return folded(activation_addresses(self.chip, b.offset, ten.lane_shape(n1 - n0, h1 - h0, w1 - w0, c1 - c0),
                                           ten.dtype))

    def load_activation(self, t: str, s: int) -> None:
        n0, n1, h0, h1, w0, w1 = self.window(t, s)
        if t not in self.gmem:
            raise SimError(f"tensor {t} is loaded before anything wrote it to GMEM")
        c0, c1 = self.chans(t, s)
        lanes, addr = self.addresses(t, s)
        self.lmem.put(lanes, addr, self.gmem[t][n0:n1, c0:c1, h0:h1, w0:w1])

    def read_activation(self, t: str, s: int) -> Win:
        n0, n1, h0, h1, w0, w1 = self.window(t, s)
        lanes, addr = self.addresses(t, s)
        ten = self.net.tensor(t)
        return Win(self.lmem.get(lanes, addr), n0, h0, ten.h, w0, ten.w)

    def write_activation(self, t: str, s: int, values: np.ndarray) -> None:
        lanes, addr = self.addresses(t, s)
        self.lmem.put(lanes, addr, values)

    def layout(self, op: Op, weights: dict[str, np.ndarray], s: int) -> list[tuple[np.ndarray, np.ndarray, str,
                                                                                    tuple]]:
        """Where each coefficient of ``op`` lies in its buffer for slice ``s``: the whole weights, or (column
        slicing) only the slice's columns, laid out as a weight of that many columns, indices shifted back."""
        cols = self.g.weight_columns(op.name, s)
        if cols is None:
            return weight_layout(self.chip, op, weights)
        c0, c1 = cols
        cut = replace(op, weights=tuple(replace(w, shape=tuple(w.shape[:-1]) + (c1 - c0,)) for w in op.weights))
        return [(lanes, rel, wname, idx[:-1] + (idx[-1] + c0,))
                for lanes, rel, wname, idx in weight_layout(self.chip, cut, weights)]

    def load_weights(self, op_name: str, s: int = 0) -> None:
        op = self.net.op(op_name)
        b = self.buf[("weight", op_name)]
        vals = _folded(op, self.weights)
        for lanes, rel, wname, idx in self.layout(op, vals, s):
            self.lmem.put(lanes, b.offset + rel, vals[wname][idx])

    def read_weights(self, op: Op, s: int = 0) -> dict[str, np.ndarray]:
        key = ("weight", op.name)
        if key not in self.buf:
            return self.weights
        b = self.buf[key]
        got = dict(self.weights)
        for lanes, rel, wname, idx in self.layout(op, _as_op_reads(op, self.weights), s):  # columns not loaded: NaN
            arr = np.full(tuple(next(w.shape for w in op.weights if w.name == wname)) or (1,), np.nan)
            arr[idx] = self.lmem.get(lanes, b.offset + rel)
            got[wname] = arr
        return got

    def compute(self, op_name: str, s: int) -> None:
        op = self.net.op(op_name)
        ins = [self.read_activation(t, s) for t in op.inputs]
        w = self.read_weights(op, s)
        sc = self.buf.get(("scratch", op_name))
        if sc is not None:  # the op scribbles over its scratch while it runs
            self.lmem.data[:, sc.offset:sc.offset + sc.size] = self.garbage.normal(size=(self.chip.npu_num, sc.size))
        n0, n1, h0, h1, w0, w1 = self.window(op.outputs[0], s)
        c0, c1 = self.chans(op.outputs[0], s)
        # every column: keep the slice's own; a channel slice's inputs hold its channels, so it computes those
        run = _as_loaded(op) if ("weight", op.name) in self.buf else op
        y = run_local(self.net, run, ins, w, (n0, n1), h0, h1, c1 - c0 if self.g.c_slices > 1 else None)
        self.write_activation(op.outputs[0], s, y[..., w0:w1])

    def store(self, t: str, s: int) -> None:
        win = self.read_activation(t, s)
        n0, n1, h0, h1 = self.g.stores[t][s]
        ten = self.net.tensor(t)
        c0, c1 = self.g.stored_cols(t, s, ten.w)
        k0, k1 = self.g.stored_chans(t, s, ten.c)
        y0, _ = self.chans(t, s)
        dst = self.gmem.setdefault(t, np.full(ten.shape, np.nan))
        dst[n0:n1, k0:k1, h0:h1, c0:c1] = win.data[n0 - win.n0:n1 - win.n0, k0 - y0:k1 - y0, h0 - win.h0:h1 - win.h0,
                                                 c0 - win.w0:c1 - win.w0]

    def poison(self, b: Buffer) -> None:
        self.lmem.data[:, b.offset:b.offset + b.size] = np.nan

    def poison_times(self, span: tuple[int, int]) -> dict[int, list[Buffer]]:
        """When (absolute row) each buffer's declared lifetime ends, for every slice of ``span``."""
        T = len(self.g.rows)
        first: dict[tuple[str, str], int] = {}
        offset = {0: -T, 1: 0, 2: T}
        for r, row in enumerate(self.g.rows):
            for tr in row.loads + row.stores:
                key = (tr.kind, tr.name)
                first[key] = min(first.get(key, 1 << 30), offset[tr.stage] + r)
            for name in row.ops:
                op = self.net.op(name)
                for t in op.outputs:
                    first[("activation", t)] = min(first.get(("activation", t), 1 << 30), r)
                first[("scratch", name)] = r
                first.setdefault(("weight", name), r)
        out: dict[int, list[Buffer]] = {}
        for b in self.g.buffers:
            if b.resident or (b.kind, b.name) not in first:
                continue
            lo = first[(b.kind, b.name)]
            for s in range(*span):
                t0 = s * T + lo
                end = t0 + (b.end - t0) % T
                out.setdefault(end, []).append(b)
        return out

    def run(self, span: tuple[int, int]) -> None:
        """One core's pipeline over slices ``span`` (start, stop), in this run's LMEM: its own preloads, fill and
        drain, as each core runs its share of a group's slices."""
        g = self.g
        T = len(g.rows)
        a, b = span  # a core's slices
        for name in g.preloads:
            self.load_weights(name)
        poison = self.poison_times(span)
        for it in range(a - 1, b + 1):
            for r, row in enumerate(g.rows):
                for tr in row.loads:
                    s = it + 1 if tr.stage == 0 else it
                    if a <= s < b:
                        self.load_weights(tr.name, s) if tr.kind == "weight" else self.load_activation(tr.name, s)
                if a <= it < b:
                    for name in row.ops:
                        self.compute(name, it)
                for tr in row.stores:
                    s = it - 1 if tr.stage == 2 else it
                    if a <= s < b:
                        self.store(tr.name, s)
                for buf in poison.get(it * T + r, ()):
                    self.poison(buf)


def simulate(net: Network, plan: Plan, seed: int = 0) -> SimResult:
    """Run the plan and compare every tensor it writes to GMEM with the unsliced reference."""
    try:
        chip = chip_from_dict(plan.chip)
    except LgoptError as e:
        return SimResult(False, None, 0, error=str(e))
    ref, opaque = reference(net, seed)
    weights = make_weights(net, seed)
    gmem: dict[str, np.ndarray] = dict(make_inputs(net, seed))
    written: list[tuple[str, int | None]] = []
    handed: tuple[Lmem, GroupPlan] | None = None  # LMEM as the last group left it, if it hands a tensor over
    try:
        for kind, v in plan.steps:
            if kind == "global":
                op = net.op(v)
                if op.local:
                    missing = [t for t in op.inputs if t not in gmem]
                    if missing:
                        raise SimError(f"global layer {v} reads {missing[0]} before it is in GMEM")
                    gmem[op.outputs[0]] = _whole(net, op, gmem, weights)
                else:
                    gmem.update(_opaque(net, op, seed))
                written.extend((t, None) for t in op.outputs)
            else:
                g = plan.groups[v]
                for span in g.chunks:  # each core in its own LMEM; they write disjoint parts of GMEM
                    run = _GroupRun(net, chip, g, gmem, weights, seed, handed)
                    run.run(span)
                written.extend((t, v) for t in g.stores)
                handed = (run.lmem, g) if g.kept_out else None
                continue
            handed = None
    except SimError as e:
        return SimResult(False, None, 0, opaque, str(e))
    except (KeyError, IndexError, ValueError) as e:
        return SimResult(False, None, 0, opaque, f"the plan cannot be executed ({type(e).__name__}: {e})")
    order = {t: i for i, t in enumerate(t for op in net.ops for t in op.outputs)}
    compared = 0
    for t, gi in sorted(written, key=lambda x: order.get(x[0], 0)):
        got, want = gmem.get(t), ref[t]
        assert got is not None, f"{t} is listed as written but is not in GMEM"
        compared += 1
        bad = ~np.isclose(got, want, rtol=RTOL, atol=RTOL * max(1.0, float(np.nanmax(np.abs(want)))), equal_nan=False)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            sl = None
            if gi is not None:
                g = plan.groups[gi]
                for s, (n0, n1, h0, h1) in enumerate(g.stores[t]):
                    c0, c1 = g.stored_cols(t, s, want.shape[3])
                    k0, k1 = g.stored_chans(t, s, want.shape[1])
                    if n0 <= idx[0] < n1 and k0 <= idx[1] < k1 and h0 <= idx[2] < h1 and c0 <= idx[3] < c1:
                        sl = s
                        break
            return SimResult(False, Mismatch(t, sl, idx, float(want[idx]), float(got[idx])), compared, opaque)
    return SimResult(True, None, compared, opaque)


def check_with_onnxruntime(net: Network, model_path: str, seed: int = 0,
                           input_shapes: dict[str, tuple[int, ...]] | None = None) -> str:
    """Run the ONNX model with the simulator's inputs and weights in onnxruntime and compare every tensor a
    local op produces (upstream of opaque ops only) with the numpy reference.  Returns a one-line verdict."""
    try:
        import onnxruntime as ort
    except ImportError:
        return "onnxruntime not installed: reference not cross-checked"
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(model_path, load_external_data=False)
    weights = make_weights(net, seed)
    ours = {w.name for op in net.ops for w in op.weights}
    for init in model.graph.initializer:  # the file's identity constants as they are: the importer drops them
        if init.name in ours and init.data_location != TensorProto.EXTERNAL:  # at some readers, as TPU-MLIR does
            arr = numpy_helper.to_array(init)
            if arr.size and (np.all(arr == 0) or np.all(arr == 1)):
                weights[init.name] = arr.astype(np.float64).reshape(weights[init.name].shape)
    # a Gemm read as a MatMul keeps lgopt's filter [K, N]; its ONNX initializer is stored [N, K]
    transposed = {w.name for op in net.ops if op.attrs.get("filter_transposed") for w in op.weights
                  if w.role == "filter"}
    bn_roles = {}
    for node in model.graph.node:
        if node.op_type == "BatchNormalization":
            for name, role in zip(node.input[1:5], ("scale", "bias", "mean", "var")):
                bn_roles[name] = role
    rng = _rng(seed, "onnxruntime")
    inits = []
    for init in model.graph.initializer:
        dims = tuple(init.dims)
        if init.name in transposed:
            arr = weights[init.name].T.reshape(dims)
        elif init.name in ours:
            arr = weights[init.name].reshape(dims)
        elif init.name in bn_roles:  # a BatchNorm folded into its conv: make it the identity
            arr = {"scale": np.ones(dims), "bias": np.zeros(dims), "mean": np.zeros(dims),
                   "var": np.full(dims, 1.0 - 1e-5)}[bn_roles[init.name]]
        elif init.data_location == TensorProto.EXTERNAL:
            arr = rng.integers(-2, 3, size=dims) / 4.0  # weights of opaque ops: any values
        else:
            inits.append(init)
            continue
        inits.append(numpy_helper.from_array(arr.astype(np.float32), init.name))
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits)
    for vi in model.graph.input:
        if input_shapes and vi.name in input_shapes:
            for d, v in zip(vi.type.tensor_type.shape.dim, input_shapes[vi.name]):
                d.Clear()
                d.dim_value = v
    opaque_down: set[str] = set()
    for op in net.ops:
        if not op.local or any(t in opaque_down for t in op.inputs):
            opaque_down.update(op.outputs)
    check = [op.outputs[0] for op in net.ops if op.local and op.outputs[0] not in opaque_down]
    existing = {o.name for o in model.graph.output}
    model.graph.output.extend(helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in check
                              if t not in existing)
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        declared = {i.name: i.shape for i in sess.get_inputs()}  # the model's own shape (an [M, K] lgopt lifted)
        feeds = {t: v.reshape(declared[t] if all(isinstance(d, int) for d in declared.get(t) or ["?"])
                              else net.tensor(t).orig_shape).astype(np.float32)
                 for t, v in make_inputs(net, seed).items()}
        outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    except Exception as e:  # a model onnxruntime cannot run is not the plan's fault
        return f"onnxruntime could not run the model ({type(e).__name__}): reference not cross-checked"
    ref, _ = reference(net, seed, weights)
    for t in check:
        want = ref[t]
        got = outs[t].reshape(want.shape).astype(float)
        scale = max(1.0, float(np.abs(want).max()))
        bad = ~np.isclose(got, want, rtol=1e-3, atol=1e-3 * scale)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            return (f"MISMATCH: onnxruntime and the numpy reference differ on {t} at {list(idx)}: "
                    f"{float(got[idx]):g} vs {float(want[idx]):g}")
    return f"the numpy reference agrees with onnxruntime on {len(check)} tensors"

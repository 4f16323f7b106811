"""The network as lgopt sees it: NCHW tensors, ops with weights, and their DAG.

A :class:`Network` is immutable and keeps its ops in one topological order
(the order the model file gave, which is what today's compilers group over).
Whether an op can run inside a layer group, and which axes it lets a group
slice, is decided once at import (:func:`lgopt.model.ops.classify`) and stored on the
op, so every later stage and the verifier agree on it.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterable, Mapping

import networkx as nx

from lgopt.errors import LgoptError

Shape4 = tuple[int, int, int, int]


@dataclass(frozen=True)
class Tensor:
    """An activation.  ``shape`` is NCHW; tensors of other rank are folded into 4-D
    (see :func:`to_nchw`) and keep their true shape in ``orig_shape``."""

    name: str
    shape: Shape4
    dtype: str
    orig_shape: tuple[int, ...] = ()
    channels_last: bool = False  # rows on the lanes: a rank-4 [N, H, W, C] only row ops touch, as [N, H*W, C];
    # a rank-2 [B, K] row taken out of a rank-3 tensor, as [B, 1, K]
    # rows on the lanes, the folded shape unchanged: an attention's [B, heads, T, D] as TPU-MLIR's hdim_is_batch
    # MatMuls hold it, tokens over the lanes, heads within each (lgopt.tpumlir.attention.hold_moves sets it)
    rows_lanes: bool = False

    @property
    def n(self) -> int:
        return self.shape[0]

    @property
    def c(self) -> int:
        return self.shape[1]

    @property
    def h(self) -> int:
        return self.shape[2]

    @property
    def w(self) -> int:
        return self.shape[3]

    @property
    def elems(self) -> int:
        n, c, h, w = self.shape
        return n * c * h * w

    @property
    def rows_on_lanes(self) -> bool:
        """Whether the folded H axis lies across the lanes: a rank-3 ``[B, M, K]`` tensor is folded to
        ``(B, 1, M, K)`` so that its rows M are what a group slices as H, but LMEM holds it as TPU-MLIR's
        matmul groups do, ``(B, M, 1, K)`` (row m on lane m mod X, its K elements contiguous); so is a
        channels-last rank-4 one (:func:`lgopt.model.ops.channels_last`)."""
        return len(self.orig_shape) == 3 or self.channels_last or self.rows_lanes

    def lane_shape(self, n_len: int, h_len: int, w_len: int | None = None, c_len: int | None = None) -> Shape4:
        """The 4-D shape whose aligned layout a window of ``n_len`` batches, ``h_len`` rows, ``w_len``
        columns and ``c_len`` channels (all of them when not given) has in LMEM (channels over lanes): the
        folded shape, with the rows moved onto the lanes when they lie there."""
        return lane_fold((n_len, self.c if c_len is None else c_len, h_len, self.w if w_len is None else w_len),
                         self.rows_on_lanes)


@dataclass(frozen=True)
class Weight:
    """A constant operand (filter, bias, scale...): lives in GMEM, loaded into LMEM whole."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str = "weight"  # filter | bias | scale | const

    @property
    def elems(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class Op:
    """One layer after fusion.  ``attrs`` are normalised per type by the importer."""

    name: str
    type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    weights: tuple[Weight, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)
    fused: tuple[str, ...] = ()  # activations folded into this op, e.g. ("Relu",)
    local: bool = False  # may run inside a layer group
    h_split: bool = False  # a group containing it may slice H
    n_split: bool = False  # a group containing it may slice N
    sources: tuple[str, ...] = ()  # model-file node names this op stands for
    reason: str = ""  # why it is a global layer, when it is one
    # the model file's tensors this op's fusions made disappear (a MatMul's output before the Add of its bias was
    # fused): names a compiler may still call the op by.  An annotation of the import, not part of the model: not
    # saved, not compared, not in the digest
    aliases: tuple[str, ...] = field(default=(), compare=False)

    def __hash__(self) -> int:
        return hash(self.name)


@dataclass(frozen=True)
class Network:
    name: str
    tensors: Mapping[str, Tensor]
    ops: tuple[Op, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def __hash__(self) -> int:
        return hash((self.name, len(self.ops)))

    @cached_property
    def op_index(self) -> dict[str, int]:
        return {op.name: i for i, op in enumerate(self.ops)}

    @cached_property
    def op_by_name(self) -> dict[str, Op]:
        return {op.name: op for op in self.ops}

    @cached_property
    def producer(self) -> dict[str, Op]:
        return {t: op for op in self.ops for t in op.outputs}

    @cached_property
    def consumers(self) -> dict[str, tuple[Op, ...]]:
        out: dict[str, list[Op]] = {t: [] for t in self.tensors}
        for op in self.ops:
            for t in dict.fromkeys(op.inputs):
                out.setdefault(t, []).append(op)
        return {t: tuple(v) for t, v in out.items()}

    @cached_property
    def graph(self) -> nx.DiGraph:
        """Op-level DAG; an edge carries the tensor names flowing along it."""
        g = nx.DiGraph()
        g.add_nodes_from(op.name for op in self.ops)
        for op in self.ops:
            for t in op.inputs:
                p = self.producer.get(t)
                if p is not None:
                    if g.has_edge(p.name, op.name):
                        g.edges[p.name, op.name]["tensors"].append(t)
                    else:
                        g.add_edge(p.name, op.name, tensors=[t])
        return g

    def tensor(self, name: str) -> Tensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise LgoptError(f"network {self.name}: unknown tensor {name!r}") from None

    def op(self, name: str) -> Op:
        try:
            return self.op_by_name[name]
        except KeyError:
            raise LgoptError(f"network {self.name}: unknown op {name!r}") from None

    @property
    def local_ops(self) -> list[Op]:
        return [op for op in self.ops if op.local]

    @property
    def global_ops(self) -> list[Op]:
        return [op for op in self.ops if not op.local]


def to_nchw(shape: Iterable[int], channels_last: bool = False) -> Shape4:
    """Fold any rank into NCHW: () -> 1111, (C) -> 1C11, (N,C) -> NC11, (B,M,K) -> B1MK (but (S,1,K) -> 11SK),
    (N,C,D...,W) -> (N, C, prod(D...), W).  ``channels_last`` (tensors held rows over the lanes): a rank-4
    ``[N, H, W, C]`` folds as ``[N, H*W, C]`` would, a rank-2 ``[B, K]`` (one row) as ``[B, 1, K]``.

    A rank-3 tensor is a batch of matrices (a transformer's ``[batch, tokens, features]``): its rows M are
    the axis a group slices, so they fold onto H; LMEM still holds them across the lanes
    (:meth:`Tensor.lane_shape`)."""
    s = tuple(int(d) for d in shape)
    if channels_last and len(s) == 4:
        return (s[0], 1, s[1] * s[2], s[3])
    if channels_last and len(s) == 2:  # one row [B, K] taken out of a rank-3 tensor: as [B, 1, K] would
        return (s[0], 1, 1, s[1])
    if len(s) == 0:
        return (1, 1, 1, 1)
    if len(s) == 1:
        return (1, s[0], 1, 1)
    if len(s) == 2:
        return (s[0], s[1], 1, 1)
    if len(s) == 3:  # [S, 1, K] (sequence-first, one batch): its S tokens are the rows
        return (1, 1, s[0], s[2]) if s[1] == 1 else (s[0], 1, s[1], s[2])
    mid = 1
    for d in s[2:-1]:
        mid *= d
    return (s[0], s[1], mid, s[-1])


def lane_fold(folded: Shape4, rows_on_lanes: bool) -> Shape4:
    """A folded shape as LMEM holds it, channels over lanes: a rank-3 tensor's ``(B, 1, M, K)`` is ``(B, M, 1, K)``."""
    n, c, h, w = folded
    return (n, h, c, w) if rows_on_lanes else folded


def lane_shape_of(shape: Iterable[int]) -> Shape4:
    """The LMEM shape (channels over lanes) of a whole tensor or constant of this true shape."""
    s = tuple(shape)
    return lane_fold(to_nchw(s), len(s) == 3)


def with_batch(net: Network, batch: int) -> Network:
    """The same network at another batch size: every tensor carrying the input batch scales with it."""
    from dataclasses import replace

    if batch < 1:
        raise LgoptError(f"batch must be at least 1, got {batch}")
    old = max((net.tensors[t].n for t in net.inputs), default=1)
    tensors = {}
    for name, t in net.tensors.items():
        if t.n == old and t.orig_shape and t.orig_shape[0] == old:
            orig = (batch,) + tuple(t.orig_shape[1:])
            tensors[name] = replace(t, shape=(batch,) + t.shape[1:], orig_shape=orig)
        else:
            tensors[name] = t
    return replace(net, tensors=tensors)


def reorder(net: Network, names: list[str]) -> Network:
    """The same network with its ops in another topological order."""
    from dataclasses import replace

    if sorted(names) != sorted(op.name for op in net.ops):
        raise ValueError("an order must list every op once")
    return check_network(replace(net, ops=tuple(net.op_by_name[n] for n in names)))


def topological_orders(net: Network) -> dict[str, list[str]]:
    """The given order and two others that group branches differently.

    * ``depth-first``: among ready ops, the one whose inputs were produced most recently
      (finish a branch before starting the next);
    * ``breadth-first``: the one whose latest input is oldest (start every branch, e.g. a
      residual block's shortcut conv, before going deeper).
    Ties go to the given order.  Any convex set of ops is a contiguous run of *some* topological
    order, so searching several orders reaches groups one fixed order cannot.
    """
    def latest(n: str, pos: Mapping[str, int]) -> int:
        return max((pos[net.producer[t].name] for t in net.op(n).inputs if t in net.producer), default=-1)

    return {"given": [op.name for op in net.ops],
            "depth-first": priority_order(net, lambda n, pos: -latest(n, pos)),
            "breadth-first": priority_order(net, latest)}


def priority_order(net: Network, priority: Callable[[str, Mapping[str, int]], Any]) -> list[str]:
    """A topological order that always takes, among the ready ops, the one with the smallest
    ``priority(op, positions of the ops placed so far)``; ties go to the given order.

    >>> net = Network("n", {}, (), (), ())
    >>> priority_order(net, lambda n, pos: 0)
    []
    """
    index = net.op_index
    succs: dict[str, list[str]] = {op.name: [] for op in net.ops}
    missing: dict[str, int] = {}
    for op in net.ops:
        preds = {net.producer[t].name for t in op.inputs if t in net.producer}
        missing[op.name] = len(preds)
        for p in preds:
            succs[p].append(op.name)
    pos: dict[str, int] = {}
    heap: list[tuple[Any, int, str]] = []
    for n, k in missing.items():
        if k == 0:
            heapq.heappush(heap, (priority(n, pos), index[n], n))
    order: list[str] = []
    while heap:
        _, _, n = heapq.heappop(heap)
        pos[n] = len(order)
        order.append(n)
        for m in succs[n]:
            missing[m] -= 1
            if missing[m] == 0:
                heapq.heappush(heap, (priority(m, pos), index[m], m))
    return order


def check_network(net: Network) -> Network:
    """Structural sanity: unique names, every consumed tensor produced once, ops topologically ordered."""
    seen_ops: set[str] = set()
    produced: set[str] = set(net.inputs)
    for t in net.inputs:
        if t not in net.tensors:
            raise LgoptError(f"network {net.name}: input {t!r} has no tensor entry")
    for op in net.ops:
        if op.name in seen_ops:
            raise LgoptError(f"network {net.name}: duplicate op name {op.name!r}")
        seen_ops.add(op.name)
        for t in op.inputs:
            if t not in net.tensors:
                raise LgoptError(f"network {net.name}: op {op.name} reads unknown tensor {t!r}")
            if t not in produced:
                raise LgoptError(f"network {net.name}: op {op.name} reads {t!r} before it is produced "
                                 "(ops must be in topological order)")
        for t in op.outputs:
            if t not in net.tensors:
                raise LgoptError(f"network {net.name}: op {op.name} writes unknown tensor {t!r}")
            if t in produced:
                raise LgoptError(f"network {net.name}: tensor {t!r} is produced twice")
            produced.add(t)
    for t in net.outputs:
        if t not in produced:
            raise LgoptError(f"network {net.name}: output {t!r} is never produced")
    for op in net.ops:
        _check_window_op(net, op)
    return net


WINDOW_TYPES = ("Conv", "ConvTranspose", "MaxPool", "AveragePool")


def _check_window_op(net: Network, op: Op) -> None:
    """A convolution or pooling whose attributes no layer could have (a stride, dilation, kernel or group of
    0, negative pads), or whose shapes contradict them (input channels that are not the filter's times its
    groups, an output size the attributes do not give): refused, because every slicing and cost lgopt
    computes for it would be built on the contradiction and still "verify"."""
    if op.type not in WINDOW_TYPES or not op.inputs or not op.outputs:
        return
    a = op.attrs
    where = f"network {net.name}: {op.type} {op.name}"

    def pair(key: str, default: int) -> tuple[int, ...]:
        v = a.get(key, (default, default))
        return tuple(v) if isinstance(v, (list, tuple)) else (v, v)

    for key, least in (("strides", 1), ("dilations", 1), ("kernel", 1)):
        bad = [v for v in pair(key, 1) if not isinstance(v, int) or v < least]
        if bad:
            raise LgoptError(f"{where}: {key} {list(pair(key, 1))} must be integers of at least {least}")
    pads = tuple(a.get("pads", (0, 0, 0, 0)))
    if any(not isinstance(p, int) or p < 0 for p in pads):
        raise LgoptError(f"{where}: pads {list(pads)} must be integers of at least 0")
    x, y = net.tensor(op.inputs[0]), net.tensor(op.outputs[0])
    if op.type in ("Conv", "ConvTranspose"):
        group = a.get("group", 1)
        if not isinstance(group, int) or group < 1:
            raise LgoptError(f"{where}: group {group!r} must be an integer of at least 1")
        f = next((w for w in op.weights if w.role == "filter"), None)
        if f is not None and len(f.shape) == 4:
            ic, oc = (f.shape[1] * group, f.shape[0]) if op.type == "Conv" else (f.shape[0], f.shape[1] * group)
            if x.c != ic:
                raise LgoptError(f"{where}: its input {x.name} has {x.c} channels, but its filter {list(f.shape)} "
                                 f"with group {group} reads {ic} (a wrong --input-shape?)")
            if y.c != oc or oc % group:
                raise LgoptError(f"{where}: its output {y.name} has {y.c} channels, but its filter {list(f.shape)} "
                                 f"with group {group} writes {oc}")
            if tuple(f.shape[2:]) != pair("kernel", 1):
                raise LgoptError(f"{where}: kernel {list(pair('kernel', 1))} but filter {list(f.shape)}")
    elif x.c != y.c:
        raise LgoptError(f"{where}: pooling {x.c} channels into {y.c}")
    if op.type == "ConvTranspose" or len(x.orig_shape or x.shape) != 4 or len(pads) != 4:
        return
    (sh, sw), (dh, dw), (kh, kw) = pair("strides", 1), pair("dilations", 1), pair("kernel", 1)
    ceil = bool(a.get("ceil_mode", 0))

    def out(size: int, begin: int, end: int, k: int, d: int, s: int) -> int:
        span = size + begin + end - d * (k - 1) - 1
        n = (-(-span // s) if ceil else span // s) + 1
        return n - 1 if ceil and (n - 1) * s >= size + begin else n  # the last window starts inside the input

    want = (out(x.h, pads[0], pads[2], kh, dh, sh), out(x.w, pads[1], pads[3], kw, dw, sw))
    if (y.n, y.h, y.w) != (x.n, *want):
        raise LgoptError(f"{where}: output {y.name} is {y.n}x{y.h}x{y.w} (NxHxW), but kernel {kh}x{kw}, strides "
                         f"{sh}x{sw}, dilations {dh}x{dw} and pads {list(pads)} on a {x.n}x{x.h}x{x.w} input give "
                         f"{x.n}x{want[0]}x{want[1]}")


# --- the canonical form (the problem file's content) and its digest ---------------------------------

PROBLEM_FORMAT = "lgopt-problem"
PROBLEM_VERSION = 1


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    return v


def network_to_dict(net: Network) -> dict[str, Any]:
    return {
        "format": PROBLEM_FORMAT,
        "version": PROBLEM_VERSION,
        "name": net.name,
        "inputs": list(net.inputs),
        "outputs": list(net.outputs),
        "tensors": {t.name: {"shape": list(t.orig_shape or t.shape), "dtype": t.dtype} for t in net.tensors.values()},
        "ops": [
            {
                "name": op.name,
                "type": op.type,
                "inputs": list(op.inputs),
                "outputs": list(op.outputs),
                "weights": [{"name": w.name, "shape": list(w.shape), "dtype": w.dtype, "role": w.role}
                            for w in op.weights],
                "attrs": _jsonable(dict(op.attrs)),
                **({"fused": list(op.fused)} if op.fused else {}),
                **({"sources": list(op.sources)} if op.sources and op.sources != (op.name,) else {}),
                **({"global_reason": op.reason} if not op.local else {}),
            }
            for op in net.ops
        ],
    }


def network_digest(net: Network) -> str:
    """Content hash a plan records, so a plan is never verified against another model (nor against the same
    ops with a tensor held another way: the tensors a TPU-MLIR lowering holds rows over the lanes count)."""
    d = network_to_dict(net)
    held = sorted(t.name for t in net.tensors.values() if t.rows_lanes)
    if held:
        d["rows_lanes"] = held
    blob = json.dumps(d, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]

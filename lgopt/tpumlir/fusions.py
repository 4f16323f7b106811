"""TPU-MLIR 1.30's fusions that lgopt's importer does not make, as rules on lgopt's ops: which ops the compiler
runs as one, so that the cache reader, the lowering and the exporter agree with what it compiles.

Each rule is one of TPU-MLIR's own rewrites (top-level canonicalisation, ``lib/Dialect/Top/Canonicalize`` and
the BM1684X-family ``ProcessorOptimize`` patterns), stated on op patterns, never on a model; each was checked on
graphs made of the pattern and compiled by TPU-MLIR 1.30.2 on BM1684X (the op names of its ``final.mlir`` and
layer-group cache, ``tests/test_tpumlir_fusions.py``).  The survivor is named after the last op's output, as
TPU-MLIR names it:

* **a per-channel scale after a conv** (``MulToScale``, ``AddToScale``, ``BatchNormToScale``, then
  ``MergeScale2Conv``): a BatchNormalization, or a Mul / Add of a per-channel constant (``[1, C, 1, 1]``) on a
  4-D tensor, whose input only it reads and comes from a conv with no activation, is folded into the conv's
  filter and bias (the importer folds a BatchNormalization so; TPU-MLIR does the same with the other two and
  with a BatchNormalization the importer left because an activation-free Mul or Add came first);
* **a per-channel scale after a per-channel scale** (``TopMultiScaleMergeToOne``) or after a scalar multiply or
  add (``ConstbinaryMergeToTopScale``): one scale and shift, a pre-activation block's ``BN -> BN`` or a constant
  ``Mul -> BN -> Relu`` included;
* **a Relu after a Concat** (``TopMoveReluAheadConcatPattern``): TPU-MLIR moves it onto the Concat's inputs
  (each named ``<op>_move_ahead_relu``) and renames the Concat ``<concat>_relu``; no op is left named after the
  Relu, whose work the Concat's inputs do.  lgopt holds it as the Concat's fused activation;
* **a Relu after a matmul** (``FuseRelu`` on an op with the SupportFuseRelu trait): the importer fuses an
  activation into a layer-group producer only; TPU-MLIR fuses a Relu into a MatMul (a classifier's
  ``Gemm -> Relu``, VGG's two global ones) and names it after the Relu's output;
* **a spatial crop after a conv** (``ConvSlice``): a Slice that cuts only H or W off a stride-1 conv's output,
  no more than the conv's padding on each side, is the same conv with less padding, named after the Slice;
* **a linear 1x1 conv before a conv without padding** (``Conv1x1Convkxk2dMerge``): the filters multiplied into
  one ``out x in x k x k`` filter (:func:`pointwise_pair`).

The other way round, **an activation TPU-MLIR does not fuse** (:func:`apart_activation`: a LeakyRelu, a Clip
not from 0) is an op of its own after the conv, scale or Add the importer fused it into; TPU-MLIR may run the two
in different groups.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from lgopt.model import ops as opsem
from lgopt.model.network import Network, Op, Tensor, Weight

# TPU-MLIR ops with the SupportFuseRelu trait, in lgopt's op types: where a Relu moved ahead of a Concat goes
RELU_TAKERS = frozenset({"Conv", "ConvTranspose", "Add", "Sub", "Mul", "BatchNormalization", "MatMul", "Gemm",
                         "Concat", "MaxPool", "AveragePool"})
ACT_ATTRS = ("act_min", "act_max", "act_alpha")  # a fused activation's attributes, moved with it
MERGE_RATIO = 20  # Conv1x1Convkxk2dMerge refuses a merged filter this many times the two it replaces


@dataclass(frozen=True)
class Fold:
    """One of TPU-MLIR's fusions on lgopt's network (or an activation it does not fuse): ``op`` replaces
    ``keep`` in place and ``after`` follows it, ``drop`` (ops) and ``gone`` (tensors) disappear, ``made``
    (tensors) appear."""

    keep: str
    op: Op
    drop: tuple[str, ...]
    gone: tuple[str, ...]
    note: str
    after: tuple[Op, ...] = ()
    made: tuple[Tensor, ...] = ()


def sole_reader(net: Network, op: Op) -> Op | None:
    """The one op reading ``op``'s one output, once (None when it is read by several, by none, or is a network
    output)."""
    if len(op.outputs) != 1 or op.outputs[0] in net.outputs:
        return None
    takers = net.consumers.get(op.outputs[0], ())
    if len(takers) != 1 or takers[0].inputs.count(op.outputs[0]) != 1:
        return None
    return takers[0]


def _acts(net: Network, op: Op) -> list[str]:
    return [t for t in op.inputs if t in net.tensors]


def _shape(net: Network, t: str) -> tuple[int, ...]:
    ten = net.tensor(t)
    return tuple(ten.orig_shape or ten.shape)


def _rank4(net: Network, t: str) -> bool:
    ten = net.tensor(t)
    return len(ten.orig_shape or ten.shape) == 4


def channel_const(net: Network, op: Op) -> bool:
    """A Mul or Add of one 4-D activation and a per-channel constant (``[1, C, 1, 1]``, or ``[C, 1, 1]``
    right-aligned to it): TPU-MLIR's ``MulToScale`` / ``AddToScale`` make it a Scale."""
    if op.type not in ("Mul", "Add") or not op.local or len(op.weights) != 1 or len(_acts(net, op)) != 1:
        return False
    x = _acts(net, op)[0]
    if not _rank4(net, x):
        return False
    c = net.tensor(x).shape[1]
    ws = tuple(op.weights[0].shape)
    return len(ws) <= 4 and (1,) * (4 - len(ws)) + ws == (1, c, 1, 1) and c > 1


def scalar_const(net: Network, op: Op) -> bool:
    """A Mul or Add of one activation and a one-element constant: TPU-MLIR's ``MulConst`` / ``AddConst``."""
    if op.type not in ("Mul", "Add") or not op.local or len(op.weights) != 1 or len(_acts(net, op)) != 1:
        return False
    n = 1
    for d in op.weights[0].shape:
        n *= d
    return n == 1


def scale_like(net: Network, op: Op) -> bool:
    """A per-channel scale and shift on a 4-D tensor, as TPU-MLIR's Scale op: a local BatchNormalization (its
    ``BatchNormToScale``) or a per-channel constant Mul or Add (:func:`channel_const`)."""
    if op.type == "BatchNormalization":
        return op.local and len(_acts(net, op)) == 1 and _rank4(net, op.inputs[0])
    return channel_const(net, op)


def _producer(net: Network, op: Op) -> Op | None:
    acts = _acts(net, op)
    return net.producer.get(acts[0]) if len(acts) == 1 else None


def _conv(op: Op) -> bool:
    return op.type == "Conv" and len(tuple(op.attrs.get("kernel", ()))) == 2


def scale_into_conv(net: Network, s: Op) -> Op | None:
    """The conv TPU-MLIR folds the scale ``s`` into (``MergeScale2Conv``: the conv's only reader, the conv
    with no activation), or None."""
    p = _producer(net, s)
    if p is None or not _conv(p) or not p.local or p.fused or not scale_like(net, s) or sole_reader(net, p) != s:
        return None
    return p


def scale_into_scale(net: Network, s: Op) -> Op | None:
    """The scale, scalar multiply or scalar add (no activation, read only by ``s``) that TPU-MLIR merges into the
    scale ``s`` (``TopMultiScaleMergeToOne``, ``ConstbinaryMergeToTopScale``), or None."""
    p = _producer(net, s)
    if p is None or p.fused or not scale_like(net, s) or sole_reader(net, p) != s:
        return None
    return p if scale_like(net, p) or scalar_const(net, p) else None


def relu_into_concat(net: Network, r: Op) -> Op | None:
    """The Concat whose inputs TPU-MLIR moves the Relu ``r`` onto (``TopMoveReluAheadConcatPattern``: ``r`` the
    Concat's only reader, every input made by an op that takes a Relu), or None."""
    p = _producer(net, r) if r.type == "Relu" and not r.fused else None
    if p is None or p.type != "Concat" or p.fused or not p.local or sole_reader(net, p) != r:
        return None
    made = [net.producer.get(t) for t in p.inputs if t in net.tensors]
    return p if made and all(m is not None and m.type in RELU_TAKERS for m in made) else None


def relu_into_matmul(net: Network, r: Op) -> Op | None:
    """The Gemm or MatMul TPU-MLIR fuses the Relu ``r`` into (``FuseRelu``: ``r`` its only reader, the matmul
    with no activation yet), or None."""
    p = _producer(net, r) if r.type == "Relu" and not r.fused else None
    if p is None or p.type not in ("Gemm", "MatMul") or p.fused or sole_reader(net, p) != r:
        return None
    return p


def _crop(net: Network, conv: Op, s: Op) -> tuple[int, int, int, int] | None:
    """The rows and columns the Slice ``s`` cuts off the conv's output, (top, left, bottom, right), or None when
    it cuts anything else or lgopt does not know where.  The importer keeps the bounds of a Slice of one axis
    only; a cut of several axes is read from the shapes: the whole padding of an axis, or an even cut of a
    symmetrically padded axis taken as half on each side (``x[:, :, 1:-1, 1:-1]``)."""
    a, b = net.tensor(conv.outputs[0]), net.tensor(s.outputs[0])
    ashape, bshape = a.orig_shape or a.shape, b.orig_shape or b.shape
    if len(ashape) != 4 or len(bshape) != 4 or ashape[:2] != bshape[:2]:
        return None
    pads = tuple(conv.attrs.get("pads", (0, 0, 0, 0)))
    axis = s.attrs.get("axis")
    if axis is not None:
        k = {2: 0, 3: 1, -1: 1}.get(axis)
        if k is None or s.attrs.get("step", 1) != 1:
            return None
        cut = [0, 0, 0, 0]
        cut[k], cut[k + 2] = int(s.attrs["start"]), ashape[2 + k] - int(s.attrs["end"])
        return (cut[0], cut[1], cut[2], cut[3])
    cut = [0, 0, 0, 0]
    for k in range(2):
        gone = ashape[2 + k] - bshape[2 + k]
        if gone == 0:
            continue
        if gone == pads[k] + pads[k + 2]:
            cut[k], cut[k + 2] = pads[k], pads[k + 2]
        elif pads[k] == pads[k + 2] and gone % 2 == 0:
            cut[k], cut[k + 2] = gone // 2, gone // 2
        else:
            return None
    return (cut[0], cut[1], cut[2], cut[3])


def slice_into_conv(net: Network, s: Op) -> Op | None:
    """The stride-1 conv a Slice cropping only its padding is folded into (``ConvSlice``), or None."""
    p = _producer(net, s) if s.type == "Slice" else None
    if p is None or not _conv(p) or tuple(p.attrs.get("strides", ())) != (1, 1) or sole_reader(net, p) != s:
        return None
    cut = _crop(net, p, s)
    pads = tuple(p.attrs.get("pads", (0, 0, 0, 0)))
    if cut is None or not any(cut) or any(c > q for c, q in zip(cut, pads)):
        return None
    return p


def pointwise_pair(net: Network, a: Op, c: Op) -> bool:
    """Whether TPU-MLIR merges conv ``a`` into conv ``c`` (``Conv1x1Convkxk2dMerge``): ``a`` a 1x1 conv of one
    group, stride 1, no padding and no activation read only by ``c``; ``c`` a conv of one group without padding
    (any kernel and stride; its activation is fused after the merge), the merged ``out x in x k x k`` filter at
    most 20 times the two it replaces."""
    if not (_conv(a) and _conv(c)) or a.fused or sole_reader(net, a) != c:
        return False
    for x in (a, c):
        if x.attrs.get("group", 1) != 1 or any(x.attrs.get("pads", ())):
            return False
    if tuple(a.attrs.get("kernel", ())) != (1, 1) or tuple(a.attrs.get("strides", ())) != (1, 1):
        return False
    fa = next((w for w in a.weights if w.role == "filter"), None)
    fc = next((w for w in c.weights if w.role == "filter"), None)
    if fa is None or fc is None:
        return False
    e, d, c_in = fc.shape[0], fc.shape[1], fa.shape[1]
    kk = fc.shape[2] * fc.shape[3]
    return e * c_in * kk <= MERGE_RATIO * (e * d * kk + c_in * d)


def apart_activation(op: Op) -> bool:
    """Whether the last activation lgopt's importer fused into ``op`` is one TPU-MLIR runs as an op of its own:
    its ``TopFuseRelu`` fuses a Relu (a Clip from 0 is its Relu with a limit), never a LeakyRelu nor a Clip from
    another bound (a Clip whose bounds the weightless model does not hold is left fused)."""
    if not op.fused or op.type not in ("Conv", "ConvTranspose", "Add", "Sub", "Mul", "BatchNormalization") \
            or len(op.outputs) != 1 or len(op.sources) < 2:
        return False
    act = op.fused[-1]
    lo = op.attrs.get("act_min")
    return act == "LeakyRelu" or (act == "Clip" and lo is not None and float(lo) != 0.0)


def _split_activation(net: Network, op: Op) -> Fold:
    """``op`` without its last activation, and that activation as an op of its own (named after its node, on
    the tensor the node read: ``<node>_output_0``, as a TorchScript export names it)."""
    act = op.fused[-1]
    keys = ("act_alpha",) if act == "LeakyRelu" else ("act_min", "act_max")
    pre = f"{op.sources[-2]}_output_0"
    if pre in net.tensors:
        pre = f"{op.name}#pre_{act}"
    out = net.tensor(op.outputs[0])
    t = Tensor(pre, out.shape, out.dtype, out.orig_shape, out.channels_last)
    attrs = {k[4:]: op.attrs[k] for k in keys if k in op.attrs}
    shape = out.orig_shape or out.shape
    local, h, n, why = opsem.classify(act, attrs, [shape], [shape])
    name = op.sources[-1] if op.sources[-1] not in net.op_by_name else f"{op.name}#{act}"
    a = Op(name, act, (pre,), op.outputs, (), attrs, (), local, h, n, (op.sources[-1],), why)
    rest = [k for k in op.attrs if k in keys and (act != "Clip" or "Clip" not in op.fused[:-1])]
    m = replace(op, outputs=(pre,), fused=op.fused[:-1], attrs={k: v for k, v in op.attrs.items() if k not in rest},
                sources=op.sources[:-1])
    return Fold(op.name, m, (), (), f"{op.name}: its {act} is an op of its own in TPU-MLIR ({name})", (a,), (t,))


def _dtype(net: Network, op: Op) -> str:
    return op.weights[0].dtype if op.weights else net.tensor(op.outputs[0]).dtype


def _scale(net: Network, p: Op, s: Op, tag: str) -> Op:
    """The one scale and shift TPU-MLIR makes of ``p`` then ``s``: a BatchNormalization holding a per-channel
    scale and bias (epsilon 0), ``s``'s activation fused."""
    c = net.tensor(s.outputs[0]).shape[1]
    dt = _dtype(net, s)
    ws = (Weight(f"{s.name}#scale", (c,), dt, "scale"), Weight(f"{s.name}#bias", (c,), dt, "bias"))
    attrs = {"epsilon": 0.0, **{k: v for k, v in s.attrs.items() if k in ACT_ATTRS}}
    ins = tuple(_acts(net, p))
    local, h, n, why = opsem.classify("BatchNormalization", attrs, [_shape(net, t) for t in ins],
                                      [_shape(net, s.outputs[0])])
    return Op(s.name, "BatchNormalization", ins, s.outputs, ws, attrs, s.fused, local, h, n,
              p.sources + s.sources + (f"{tag}:{p.outputs[0]}",), why)


def find_fold(net: Network, op: Op, named: frozenset[str], tag: str) -> Fold | None:
    """The fusion TPU-MLIR makes at ``op`` (the op that survives it or the last op it takes in), when the op it
    removes is named by no TPU-MLIR op (``named``); ``tag`` marks the names of the tensors it removes in the
    survivor's sources (:data:`lgopt.tpumlir.cache.LOWERED`), so that TPU-MLIR's names built on them still
    anchor on it."""
    if apart_activation(op):
        return _split_activation(net, op)
    p = scale_into_conv(net, op)
    if p is not None and p.name not in named:
        ws = list(p.weights)
        if not any(w.role == "bias" for w in ws):
            f = next(w for w in ws if w.role == "filter")
            ws.append(Weight(f"{op.name}#bias", (f.shape[0],), f.dtype, "bias"))
        attrs = {**{k: v for k, v in p.attrs.items() if k not in ACT_ATTRS},
                 **{k: v for k, v in op.attrs.items() if k in ACT_ATTRS}}
        m = replace(p, name=op.name, outputs=op.outputs, weights=tuple(ws), attrs=attrs, fused=op.fused,
                    sources=p.sources + op.sources + (f"{tag}:{p.outputs[0]}",))
        return Fold(op.name, m, (p.name,), p.outputs,
                    f"{p.name} -> {op.name}: a per-channel {op.type} after a conv, folded into its filter and bias "
                    "(TPU-MLIR's MergeScale2Conv)")
    p = scale_into_scale(net, op)
    if p is not None and p.name not in named:
        return Fold(op.name, _scale(net, p, op, tag), (p.name,), p.outputs,
                    f"{p.name} -> {op.name}: {p.type} and {op.type} are one per-channel scale and shift "
                    "(TPU-MLIR's TopMultiScaleMergeToOne)")
    p = relu_into_concat(net, op)
    if p is not None and op.name not in named:
        m = replace(p, outputs=op.outputs, fused=("Relu",), sources=p.sources + op.sources + (f"{tag}:{p.outputs[0]}",))
        return Fold(p.name, m, (op.name,), p.outputs,
                    f"{op.name} -> {p.name}: the Relu moved onto the Concat's inputs "
                    "(TPU-MLIR's TopMoveReluAheadConcatPattern)")
    p = relu_into_matmul(net, op)
    if p is not None and p.name not in named:
        m = replace(p, name=op.name, outputs=op.outputs, fused=("Relu",),
                    sources=p.sources + op.sources + (f"{tag}:{p.outputs[0]}",))
        return Fold(op.name, m, (p.name,), p.outputs,
                    f"{p.name} -> {op.name}: the Relu fused into the {p.type} (TPU-MLIR's FuseRelu)")
    p = slice_into_conv(net, op)
    if p is not None and p.name not in named:
        cut = _crop(net, p, op)
        assert cut is not None  # slice_into_conv checked it
        pads = tuple(q - c for q, c in zip(p.attrs.get("pads", (0, 0, 0, 0)), cut))
        attrs = {**p.attrs, "pads": pads}
        f = next(w for w in p.weights if w.role == "filter")
        local, h, n, why = opsem.classify("Conv", attrs, [_shape(net, t) for t in _acts(net, p)],
                                          [_shape(net, op.outputs[0])], True)
        m = replace(p, name=op.name, outputs=op.outputs, attrs=attrs, local=local, h_split=h, n_split=n,
                    sources=p.sources + op.sources + (f"{tag}:{p.outputs[0]}",), reason=why)
        return Fold(op.name, m, (p.name,), p.outputs,
                    f"{p.name} -> {op.name}: the Slice crops only the conv's padding, the conv pads less "
                    f"({list(p.attrs.get('pads', ()))} -> {list(pads)}; TPU-MLIR's ConvSlice; filter {list(f.shape)})")
    return None

"""The network as TPU-MLIR lowered it for a cache: the ops it fuses that lgopt's importer keeps apart (and the
activations it keeps apart that the importer fused: :mod:`lgopt.tpumlir.fusions`, :func:`fold_like_tpu_mlir`), and
the column halves it cuts an MLP into.

On BM1684X TPU-MLIR 1.30 lowers a ``MatMul -> GELU -> MatMul`` chain (ViT's and ConvNeXt's MLP) into column
pieces: the first MatMul's output columns and the activation in ``P`` pieces (``<tensor>_<Type>_<k>``), the
second MatMul's rows (its contraction) in the same ``P`` pieces, each piece a partial sum, and an Add of the
partial sums (``<tensor>_<Type>_<k>_add_``).  Its layer-group caches then put the pieces in different groups
(ConvNeXt's opt2 runs the two GELU halves of a block in two groups).  lgopt holds each of those ops whole; to
build such a grouping exactly, :func:`lower_like` splits them the way the cache names them:

* ``MatMul_k``: the first MatMul on columns ``[k N/P, (k+1) N/P)`` of its weight (and bias);
* each op between them on its piece of the columns (an elementwise activation);
* ``MatMul_k`` of the second: rows ``[k N/P, (k+1) N/P)`` of its weight, a partial sum of the full output;
* an Add of the partial sums and the second MatMul's bias, producing the original output tensor.

Each new op is named after the TPU-MLIR op it is (:func:`lgopt.tpumlir.cache.tensor_aliases` maps such a
name to it directly) and its weights after the original's (``#cols<k>``, ``#rows<k>``).  Only chains whose
pieces the cache runs in different steps are split: where they share a group, the whole ops are that group.
The other rules, applied in this order after the MLP's: an attention's qkv projection cut into Q, K and V
(:func:`lgopt.tpumlir.attention.split_qkv`); an INT8 ConvTranspose run apart from its requantisation
(:func:`split_requant`); a LayerNorm run as BM1684's GroupNorm (:func:`split_layernorm`); the moves TPU-MLIR runs
in groups it holds whole (:func:`lgopt.tpumlir.attention.hold_moves`); and, on the chip the cache was compiled
for, the tensors of its ``GROUP_SMALL_C`` groups held rows over the lanes (:mod:`lgopt.tpumlir.smallc`).

A plan built on the lowered network records the cache (``solver.tpu_mlir``) and :func:`network_of` rebuilds
the same network from a model and such a plan, so every command that loads the plan checks it against it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from lgopt.hw.chip import Chip, chip_from_dict
from lgopt.model import ops as opsem
from lgopt.model.network import Network, Op, Tensor, Weight, check_network, network_digest, to_nchw
from lgopt.tpumlir.attention import hold_moves, split_qkv
from lgopt.tpumlir.cache import LOWERED, Cache, anchor, is_cast, load_cache, tensor_aliases, tpu_mlir_fuses
from lgopt.tpumlir.fusions import Fold, find_fold
from lgopt.tpumlir.smallc import hold_small_c

PIECE = re.compile(r"_(\d+)(_add_)?$")


def _pieces(net: Network, cache: Cache) -> dict[str, list[tuple[str, int, bool, int]]]:
    """lgopt op -> its numbered TPU-MLIR pieces: (loc, k, is the partial sums' Add, step: cache group or -1)."""
    aliases = tensor_aliases(net)
    out: dict[str, list[tuple[str, int, bool, int]]] = {}
    for loc, gi in cache.steps():
        m = PIECE.search(loc)
        if m is None or is_cast(loc) or is_cast(loc[:m.start()]):  # a piece's cast: ``..._f32_1``
            continue
        name = anchor(loc, aliases)
        if name is not None:
            out.setdefault(name, []).append((loc, int(m.group(1)), m.group(2) is not None, gi))
    return out


def _chain(net: Network, first: str) -> list[Op] | None:
    """``first`` (a MatMul with a weight), the single-consumer elementwise ops after it and the MatMul with a
    weight that ends the chain, or None."""
    chain = [net.op(first)]
    while True:
        outs = net.consumers.get(chain[-1].outputs[0], ())
        if len(outs) != 1:
            return None
        nxt = outs[0]
        chain.append(nxt)
        if nxt.type == "MatMul":
            return chain if any(w.role == "filter" for w in nxt.weights) else None
        if opsem.OP_SPECS.get(nxt.type) is None or opsem.OP_SPECS[nxt.type].family is not opsem.Family.UNARY:
            return None


def lower_like(net: Network, cache: Cache, chip: Chip | None) -> tuple[Network, tuple[str, ...]]:
    """``net`` as TPU-MLIR lowered it for ``cache``: the ops it fuses into one that lgopt's importer keeps apart
    (:func:`fold_like_tpu_mlir`: pairs of convolutions, per-channel scales into a conv or into each other, a
    Relu after a Concat, a crop of a conv's padding; a LeakyRelu or a Clip not from 0 the importer fused made an
    op again), every MatMul chain the cache cuts into column pieces run in different steps split the same way,
    and on ``chip`` the tensors of its ``GROUP_SMALL_C`` groups held as those hold them
    (:func:`lgopt.tpumlir.smallc.hold_small_c`; ``None``: no chip's); and one line per change (the network unchanged
    and no lines when there is none)."""
    net, merged = fold_like_tpu_mlir(net, named_ops(net, cache.locs))
    split, notes = _split_chains(net, cache)
    split, qkv = split_qkv(split, cache)
    split, requants = split_requant(split, cache)
    split, norms = split_layernorm(split, cache)
    held, moves = hold_moves(split, cache)
    held, small = hold_small_c(held, cache, chip)
    return held, merged + notes + qkv + requants + norms + moves + small


GROUP_NORM = "_convert_to_group_norm"  # ``<tensor>_LayerNormalization_convert_to_group_norm``: TPU-MLIR's GroupNorm


def split_layernorm(net: Network, cache: Cache) -> tuple[Network, tuple[str, ...]]:
    """``net`` with every LayerNormalization the cache runs as TPU-MLIR's GroupNorm lowering cut the same way.

    On BM1684 in INT8, TPU-MLIR 1.30 lowers a LayerNorm over the last axis of ``[N, ..., C]`` (ConvNeXt's and
    ViT's) to a reshape to ``[N, M, C, 1]`` (``<ln>_reshape_1``, M the rows), a GroupNorm of M groups of one
    channel each -- each row normalised over its C values (``<ln>_convert_to_group_norm``) --, a reshape back
    (``<ln>_reshape_2``), a Mul by the scale (``<ln>_mul_weights``) and an Add of the bias named after the
    LayerNorm itself, and its caches run the reshapes as global layers between groups (``<ln>`` is
    ``<tensor>_LayerNormalization``); one line per op cut."""
    aliases = tensor_aliases(net)
    cut: dict[str, tuple[list[Op], list[Tensor]]] = {}
    for loc, _ in cache.steps():
        if not loc.endswith(GROUP_NORM):
            continue
        base = loc[:-len(GROUP_NORM)]
        name = anchor(base, aliases)
        if name is None or name in cut or net.op(name).type != "LayerNormalization":
            continue
        made = _layernorm_pieces(net, net.op(name), base)
        if made is not None:
            cut[name] = made
    if not cut:
        return net, ()
    ops = tuple(x for o in net.ops for x in (cut[o.name][0] if o.name in cut else [o]))
    tensors = {**net.tensors, **{t.name: t for _, ts in cut.values() for t in ts}}
    notes = tuple(f"{n}: a LayerNormalization TPU-MLIR runs as a GroupNorm between two reshapes, then its scale and "
                  f"bias, cut into {', '.join(o.name for o in made)}" for n, (made, _) in cut.items())
    return check_network(Network(net.name, tensors, ops, net.inputs, net.outputs)), notes


def _layernorm_pieces(net: Network, ln: Op, base: str) -> tuple[list[Op], list[Tensor]] | None:
    """The ops and new tensors of :func:`split_layernorm` for LayerNorm ``ln`` (named ``base`` by TPU-MLIR): one
    chain, each piece writing a tensor of its own name, the last the LayerNorm's output with its fused activation."""
    x, y = net.tensor(ln.inputs[0]), net.tensor(ln.outputs[0])
    shape = x.orig_shape or x.shape
    if len(shape) < 3:
        return None
    rows = 1
    for d in shape[1:-1]:
        rows *= d
    grouped = (shape[0], rows, shape[-1], 1)
    scale = tuple(replace(w, role="const") for w in ln.weights if w.role == "scale")
    bias = tuple(replace(w, role="const") for w in ln.weights if w.role == "bias")
    attrs = {"num_groups": rows, "epsilon": ln.attrs.get("epsilon", 1e-5)}
    pieces: list[tuple[str, str, tuple[Weight, ...], dict[str, Any], bool]] = [  # ..., laid out as [N, M, C, 1]
        (f"{base}_reshape_1", "Reshape", (), {}, True),
        (f"{base}{GROUP_NORM}", "GroupNormalization", (), attrs, True),
        (f"{base}_reshape_2", "Reshape", (), {}, False)]
    if scale:
        pieces.append((f"{base}_mul_weights" if bias else base, "Mul", scale, {}, False))
    if bias:
        pieces.append((base, "Add", bias, {}, False))
    made: list[Op] = []
    tensors: list[Tensor] = []
    src = x
    for k, (loc, typ, ws, at, rows_grouped) in enumerate(pieces):
        last = k == len(pieces) - 1
        dst = y if last else Tensor(loc, grouped, x.dtype, grouped) if rows_grouped else replace(y, name=loc)
        local, h, n, why = opsem.classify(typ, at, [src.orig_shape], [dst.orig_shape])
        made.append(Op(loc, typ, (src.name,), (dst.name,), ws, at, ln.fused if last else (), local, h, n,
                       (f"{LOWERED}:{loc}",) + ln.sources, why))
        if not last:
            tensors.append(dst)
        src = dst
    return made, tensors


I32 = "_i32"  # TPU-MLIR's INT8 ConvTranspose: ``<tensor>_ConvTranspose_i32`` (int32 out), then its requantisation


def split_requant(net: Network, cache: Cache) -> tuple[Network, tuple[str, ...]]:
    """``net`` with every ConvTranspose the cache runs apart from its requantisation (INT8: TPU-MLIR lowers it to
    a deconvolution writing int32, ``<tensor>_ConvTranspose_i32``, and a requantisation to int8 named after the
    output, and a cache may put the two in different steps) cut the same way: a ConvTranspose named after the
    ``_i32`` op, writing an int32 tensor of that name, and a ``Requant`` op, the original's name, output and fused
    activation; one line per op cut."""
    step = dict(cache.steps())
    aliases = tensor_aliases(net)
    cut: dict[str, tuple[Op, Op, Tensor]] = {}
    for loc, where in step.items():
        whole = loc[:-len(I32)]
        if not loc.endswith(I32) or step.get(whole, where) == where:
            continue
        name = anchor(whole, aliases)
        if name is None or net.op(name).type != "ConvTranspose" or name in cut:
            continue
        op = net.op(name)
        out = net.tensor(op.outputs[0])
        mid = replace(out, name=loc, dtype="int32")
        deconv = replace(op, name=loc, outputs=(loc,), fused=(), sources=(f"{LOWERED}:{loc}",) + op.sources)
        local, h, n, why = opsem.classify("Requant", {}, [out.orig_shape], [out.orig_shape])
        requant = Op(op.name, "Requant", (loc,), op.outputs, (), {}, op.fused, local, h, n, op.sources, why)
        cut[name] = (deconv, requant, mid)
    if not cut:
        return net, ()
    ops = tuple(x for o in net.ops for x in (cut[o.name][:2] if o.name in cut else (o,)))
    tensors = {**net.tensors, **{m.name: m for _, _, m in cut.values()}}
    notes = tuple(f"{n}: an INT8 ConvTranspose TPU-MLIR runs apart from its requantisation, cut into {d.name} "
                  f"and the Requant" for n, (d, _, _) in cut.items())
    return check_network(Network(net.name, tensors, ops, net.inputs, net.outputs)), notes


def fold_like_tpu_mlir(net: Network, named: frozenset[str]) -> tuple[Network, tuple[str, ...]]:
    """``net`` with every fusion TPU-MLIR's top-level canonicalisation makes and lgopt's importer does not
    (:mod:`lgopt.tpumlir.fusions`; the pairs of convolutions of :func:`merge_pointwise` among them), applied until
    none is left, as the compiler's rewriter does; an op some TPU-MLIR op in ``named`` is named after is never
    fused away.  One line per fusion.

    >>> from lgopt.model.network import Network, Op, Tensor, Weight
    >>> ts = {n: Tensor(n, (1, 8, 7, 7), "f16") for n in "xyz"}
    >>> conv = Op("c", "Conv", ("x",), ("y",), (Weight("f", (8, 8, 3, 3), "f16", "filter"),),
    ...           {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), "group": 1}, local=True)
    >>> mul = Op("m", "Mul", ("y",), ("z",), (Weight("s", (1, 8, 1, 1), "f16", "const"),), local=True)
    >>> low, notes = fold_like_tpu_mlir(Network("n", ts, (conv, mul), ("x",), ("z",)), frozenset({"m"}))
    >>> [(o.name, o.type, o.outputs, [w.role for w in o.weights]) for o in low.ops]
    [('m', 'Conv', ('z',), ['filter', 'bias'])]
    """
    notes: list[str] = []
    while True:
        fold = next((f for op in net.ops if (f := _fold_at(net, op, named)) is not None), None)
        if fold is None:
            return net, tuple(notes)
        ops = tuple(x for o in net.ops if o.name not in fold.drop
                    for x in ((fold.op,) + fold.after if o.name == fold.keep else (o,)))
        tensors = {t: v for t, v in net.tensors.items() if t not in fold.gone} | {t.name: t for t in fold.made}
        net = check_network(Network(net.name, tensors, ops, net.inputs, net.outputs))
        notes.append(fold.note)


def _fold_at(net: Network, op: Op, named: frozenset[str]) -> Fold | None:
    """The fusion TPU-MLIR makes at ``op``: ``op`` merged into the conv reading it (:func:`merge_pointwise`'s
    pairs), or ``op`` taking in the op before it (:func:`lgopt.tpumlir.fusions.find_fold`)."""
    takers = net.consumers.get(op.outputs[0], ()) if len(op.outputs) == 1 else ()
    if op.type == "Conv" and op.name not in named and len(takers) == 1 and takers[0].type == "Conv" \
            and tpu_mlir_fuses(net, op.name, takers[0].name):
        m, note = _merge_pair(op, takers[0])
        return Fold(takers[0].name, m, (op.name,), op.outputs, note)
    return find_fold(net, op, named, LOWERED)


def named_ops(net: Network, locs: Iterable[str]) -> frozenset[str]:
    """The lgopt ops some of TPU-MLIR's op names ``locs`` are named after (casts name none)."""
    aliases = tensor_aliases(net)
    return frozenset(n for loc in locs if not is_cast(loc) and (n := anchor(loc, aliases)) is not None)


def merge_pointwise(net: Network, named: frozenset[str]) -> tuple[Network, tuple[str, ...]]:
    """``net`` with each 1x1 convolution that TPU-MLIR folds into the convolution reading it
    (:func:`lgopt.tpumlir.cache.tpu_mlir_fuses`; no TPU-MLIR op in ``named`` is named after it) merged into
    that one, and a line per merge.

    Two linear 1x1 convolutions in a row are one: TPU-MLIR's top-level canonicalisation multiplies the filters,
    so the merged op reads the first's input and holds an ``out x in`` filter of the outer channels.  That filter
    can be far larger than the two it replaces (MobileNetV2's last bottleneck 960 -> 320 and the 320 -> 1280 head
    conv become one 960 -> 1280 conv: 2,457,600 bytes instead of 614,400 + 819,200) and costs that many more
    MACs; on BM1688's timeline that one load (177,237 cycles for MnasNet's 2,949,120 bytes) idles the TIU for
    most of its length.  Priced as two ops, MnasNet's last group was 12 % under its measured cycles.

    >>> from lgopt.model.network import Network, Op, Tensor, Weight
    >>> ts = {n: Tensor(n, (1, c, 7, 7), "f16") for n, c in (("x", 96), ("y", 32), ("z", 128))}
    >>> pw = {"kernel": (1, 1), "strides": (1, 1), "group": 1}
    >>> a = Op("a", "Conv", ("x",), ("y",), (Weight("wa", (32, 96, 1, 1), "f16", "filter"),), pw, local=True)
    >>> b = Op("b", "Conv", ("y",), ("z",), (Weight("wb", (128, 32, 1, 1), "f16", "filter"),), pw, ("Relu",),
    ...        local=True)
    >>> merged, notes = merge_pointwise(Network("m", ts, (a, b), ("x",), ("z",)), frozenset({"b"}))
    >>> [(o.name, o.inputs, o.weights[0].shape, o.fused) for o in merged.ops]
    [('b', ('x',), (128, 96, 1, 1), ('Relu',))]
    """
    def folded(a: Op) -> tuple[Op, Op] | None:
        takers = net.consumers.get(a.outputs[0], ())
        if a.type != "Conv" or a.name in named or len(takers) != 1 or takers[0].type != "Conv":
            return None
        return (a, takers[0]) if tpu_mlir_fuses(net, a.name, takers[0].name) else None

    notes: list[str] = []
    while True:
        pair = next((p for a in net.ops if (p := folded(a)) is not None), None)
        if pair is None:
            return net, tuple(notes)
        a, b = pair
        m, note = _merge_pair(a, b)
        ops = tuple(m if o.name == b.name else o for o in net.ops if o.name != a.name)
        tensors = {t: v for t, v in net.tensors.items() if t != a.outputs[0]}
        net = check_network(Network(net.name, tensors, ops, net.inputs, net.outputs))
        notes.append(note)


def _merge_pair(a: Op, b: Op) -> tuple[Op, str]:
    """Conv ``b`` with the linear 1x1 conv ``a`` before it multiplied into its filter (``out x in x k x k``),
    and the line saying so."""
    fa = next(w for w in a.weights if w.role == "filter")
    fb = next(w for w in b.weights if w.role == "filter")
    ws = [replace(fb, name=f"{fb.name}#merged", shape=(fb.shape[0], fa.shape[1]) + tuple(fb.shape[2:]))]
    if any(w.role == "bias" for w in a.weights + b.weights):
        ws.append(Weight(f"{fb.name}#merged_bias", (fb.shape[0],), fb.dtype, "bias"))
    ws += [w for w in b.weights if w.role not in ("filter", "bias")]
    m = replace(b, inputs=a.inputs, weights=tuple(ws), sources=a.sources + b.sources)
    kernel = "x".join(map(str, fb.shape[2:]))
    what = "two 1x1 convolutions" if kernel == "1x1" else f"a 1x1 convolution and the {kernel} one after it"
    return m, f"{a.name} -> {b.name}: {what} TPU-MLIR merges into one ({fa.shape[1]} -> {fb.shape[0]} channels)"


def _split_chains(net: Network, cache: Cache) -> tuple[Network, tuple[str, ...]]:
    """``net`` with every MatMul chain the cache cuts into column pieces run in different steps split the same
    way, and one line per chain split."""
    pieces = _pieces(net, cache)
    notes: list[str] = []
    new_ops: dict[str, list[Op]] = {}  # first op of a chain -> its replacement
    dropped: set[str] = set()
    tensors = dict(net.tensors)
    for op in net.ops:
        if op.type != "MatMul" or not any(w.role == "filter" for w in op.weights) or op.name in dropped:
            continue
        chain = _chain(net, op.name)
        if chain is None or not any(o.name in pieces for o in chain):
            continue
        # a cache listing no global layers names only the grouped pieces: the others run globally, unnamed
        numbered = [{k for _, k, add, _ in pieces.get(o.name, []) if not add} for o in chain]
        ks = sorted(set().union(*numbered))
        if len(ks) != 2 or any(n and sorted(n) != ks for n in numbered):
            continue
        steps = {gi for o in chain for _, _, _, gi in pieces.get(o.name, [])} | ({-1} if not all(numbered) else set())
        if len(steps) < 2:
            continue  # every piece in one step: the whole ops are that step
        if net.tensor(op.outputs[0]).orig_shape[-1] % len(ks):
            continue
        made = _split_chain(net, chain, pieces, ks, tensors)
        new_ops[op.name] = made
        dropped.update(o.name for o in chain)
        notes.append(f"{' -> '.join(o.name for o in chain)}: split into TPU-MLIR's {len(ks)} column pieces and "
                     f"the Add of their partial sums ({made[-1].name}), run in different steps")
    if not new_ops:
        return net, ()
    ops: list[Op] = []
    for op in net.ops:
        if op.name in new_ops:
            ops += new_ops[op.name]
        elif op.name not in dropped:
            ops.append(op)
    used = {t for o in ops for t in o.inputs + o.outputs} | set(net.inputs) | set(net.outputs)
    lowered = Network(net.name, {t: v for t, v in tensors.items() if t in used}, tuple(ops), net.inputs,
                      net.outputs)
    return check_network(lowered), tuple(notes)


def _split_chain(net: Network, chain: list[Op], pieces: dict[str, list[tuple[str, int, bool, int]]],
                 ks: list[int], tensors: dict[str, Tensor]) -> list[Op]:
    """The ops of ``chain`` cut into the cache's pieces ``ks``, in TPU-MLIR's order (each piece's chain, then
    the Add); a piece the cache does not name (a global one, in a cache listing no global layers) is named
    ``<op>#<k>``."""
    first, mid, second = chain[0], chain[1:-1], chain[-1]
    width = net.tensor(first.outputs[0]).orig_shape[-1]
    part = width // len(ks)
    named = {o.name: {k: loc for loc, k, add, _ in pieces.get(o.name, []) if not add} for o in chain}
    locs = {o.name: {k: named[o.name].get(k, f"{o.name}#{k}") for k in ks} for o in chain}
    add_loc = next((loc for loc, _, add, _ in pieces.get(second.name, []) if add), f"{second.name}#add")

    def piece_tensor(like: str, loc: str, cols: int | None) -> str:
        t = net.tensor(like)
        orig = t.orig_shape[:-1] + (cols,) if cols is not None else t.orig_shape
        tensors[loc] = Tensor(loc, to_nchw(orig, t.channels_last), t.dtype, tuple(orig), t.channels_last)
        return loc

    def make(template: Op, loc: str, ins: tuple[str, ...], out: str, weights: tuple[Weight, ...],
             fused: tuple[str, ...]) -> Op:
        shapes_in = [tensors[t].orig_shape for t in ins]
        attrs = dict(template.attrs)
        local, h, n, why = opsem.classify(template.type, attrs, shapes_in, [tensors[out].orig_shape],
                                          any(w.role == "filter" for w in weights))
        return Op(loc, template.type, ins, (out,), weights, attrs, fused, local, h, n,
                  (f"{LOWERED}:{loc}",) + template.sources, why)

    made: list[Op] = []
    partials: list[str] = []
    for k in sorted(ks, reverse=True):  # TPU-MLIR runs the last piece first
        loc = locs[first.name][k]
        ws = tuple(replace(w, name=f"{w.name}#cols{k}", shape=w.shape[:-1] + (part,)) for w in first.weights)
        x = piece_tensor(first.outputs[0], loc, part)
        made.append(make(first, loc, first.inputs, x, ws, first.fused))
        for m in mid:
            loc = locs[m.name][k]
            y = piece_tensor(m.outputs[0], loc, part)
            made.append(make(m, loc, (x,), y, m.weights, m.fused))
            x = y
        loc = locs[second.name][k]
        f = next(w for w in second.weights if w.role == "filter")
        ws = (replace(f, name=f"{f.name}#rows{k}", shape=(part,) + f.shape[1:]),)
        p = piece_tensor(second.outputs[0], loc, None)
        made.append(make(second, loc, (x,), p, ws, ()))  # a partial sum: its activation after the Add
        partials.append(p)
    bias = tuple(replace(w, role="const") for w in second.weights if w.role == "bias")
    local, h, n, why = opsem.classify("Add", {}, [tensors[t].orig_shape for t in partials],
                                      [net.tensor(second.outputs[0]).orig_shape])
    made.append(Op(add_loc, "Add", tuple(partials), second.outputs, bias, {}, second.fused, local, h, n,
                   (f"{LOWERED}:{add_loc}",) + second.sources, why))
    return made


def network_of(net: Network, plan: Any) -> Network:
    """The network ``plan`` was built on: ``net``, or ``net`` lowered like the TPU-MLIR cache the plan was read
    from when that cache split ops (``plan.solver["tpu_mlir"]["lowered"]``), on the plan's chip."""
    info = (plan.solver or {}).get("tpu_mlir") or {}
    if not info.get("lowered") or plan.model_digest == network_digest(net):
        return net  # nothing split, or ``net`` is that network already (lowered once by whoever built the plan)
    return lower_like(net, load_cache(str(info["cache"])), chip_from_dict(plan.chip))[0]

"""Attention as TPU-MLIR lowers and groups it, for a network lowered like one of its caches
(:func:`lgopt.tpumlir.lowering.lower_like` applies both rules).

* :func:`split_qkv`: TPU-MLIR's canonicalisation cuts an attention's qkv projection (a MatMul, a Reshape to
  ``[B, T, 3, H, D]``, a ``(2, 0, 3, 1, 4)`` permute and three picks) into Q, K and V MatMuls with a Reshape each,
  so no 5-D permute mixes the batches;
* :func:`hold_moves`: it folds the heads' permutes into ``hdim_is_batch`` MatMuls and holds whole transformer
  blocks in unsliced groups, so an op lgopt keeps global because a slice of it is not well defined is local,
  never sliced, in such a group, and the heads' tensors around it are held tokens-over-lanes as those MatMuls
  hold them.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from lgopt.model import ops as opsem
from lgopt.model.network import Network, Op, Tensor, Weight, check_network, to_nchw
from lgopt.tpumlir.cache import LOWERED, Cache, anchor, is_cast, map_cache, tensor_aliases

QKV_PIECE = re.compile(r"_(matmul|reshape)_(\d+)$")


def split_qkv(net: Network, cache: Cache) -> tuple[Network, tuple[str, ...]]:
    """``net`` with every attention's qkv projection the cache names in three pieces cut the way TPU-MLIR cuts it.

    timm and torchvision export ``qkv = x W`` (``[B, T, 3C]``), a Reshape to ``[B, T, 3, H, D]``, a Transpose
    ``(2, 0, 3, 1, 4)`` and three picks of Q, K and V (``[B, H, T, D]``).  TPU-MLIR's canonicalisation makes that
    three MatMuls on the weight's column thirds, each with a Reshape to ``[B, T, H, D]``
    (``<qkv>_<Type>_matmul_<1|3|5>``, ``..._reshape_<k>``: Q, K, V), so the 5-D permute, which moves the batch
    axis and cannot be cut into batch slices, is gone.  Each pick becomes a ``(0, 2, 1, 3)`` Transpose of its
    piece (named after the pick, its output the pick's), which :func:`hold_moves` may run in a group."""
    aliases = tensor_aliases(net)
    named: dict[str, dict[tuple[str, int], str]] = {}
    for loc in cache.locs:
        m = QKV_PIECE.search(loc)
        name = None if m is None or is_cast(loc) else anchor(loc[:m.start()], aliases)
        if m is not None and name is not None:
            named.setdefault(name, {})[(m.group(1), int(m.group(2)))] = loc
    new_ops: dict[str, list[Op]] = {}
    dropped: set[str] = set()
    tensors = dict(net.tensors)
    for name, pieces in named.items():
        found = _qkv_pattern(net, name) if {k for kind, k in pieces if kind == "matmul"} == {1, 3, 5} else None
        if found is None:
            continue
        gone, picks = found
        new_ops[name] = _qkv_ops(net, net.op(name), pieces, picks, tensors)
        dropped.update(gone)
    if not new_ops:
        return net, ()
    ops = [x for o in net.ops if o.name not in dropped or o.name in new_ops
           for x in (new_ops[o.name] if o.name in new_ops else [o])]
    used = {t for o in ops for t in o.inputs + o.outputs} | set(net.inputs) | set(net.outputs)
    lowered = Network(net.name, {t: v for t, v in tensors.items() if t in used}, tuple(ops), net.inputs, net.outputs)
    notes = tuple(f"{n}: the qkv projection TPU-MLIR cuts into three MatMuls, each with its Reshape and a (0, 2, 1, "
                  f"3) Transpose in place of the 5-D permute and the picks" for n in new_ops)
    return check_network(lowered), notes


def _qkv_pattern(net: Network, name: str) -> tuple[set[str], list[Op]] | None:
    """The ops from MatMul ``name`` to its Q, K and V picks (the MatMul, the 5-D Reshape, the permute, the Slices
    and Squeezes) and the three ops whose outputs are Q, K and V, or None when the pattern differs."""
    def only(t: str) -> Op | None:
        readers = net.consumers.get(t, ())
        return readers[0] if len(readers) == 1 else None

    op = net.op(name)
    if op.type != "MatMul" or not any(w.role == "filter" for w in op.weights) or len(op.outputs) != 1:
        return None
    r = only(op.outputs[0])
    if r is None or r.type != "Reshape":
        return None
    p = only(r.outputs[0])
    shape = net.tensor(r.outputs[0]).orig_shape
    if p is None or p.type != "Transpose" or tuple(p.attrs.get("perm", ())) != (2, 0, 3, 1, 4) \
            or len(shape) != 5 or shape[2] != 3:
        return None
    gone = {name, r.name, p.name}
    picks: dict[int, Op] = {}
    for s in net.consumers.get(p.outputs[0], ()):
        k = s.attrs.get("start", -1)
        if s.type != "Slice" or s.attrs.get("axis") != 0 or s.attrs.get("end") != k + 1 or k in picks:
            return None
        last = s
        if len(net.tensor(s.outputs[0]).orig_shape) == 5:  # a Split's part, then a Squeeze of the picked axis
            sq = only(s.outputs[0])
            if sq is None or sq.type != "Squeeze":
                return None
            gone.add(s.name)
            last = sq
        gone.add(last.name)
        picks[k] = last
    return (gone, [picks[k] for k in range(3)]) if sorted(picks) == [0, 1, 2] else None


def _qkv_ops(net: Network, op: Op, pieces: dict[tuple[str, int], str], picks: list[Op],
             tensors: dict[str, Tensor]) -> list[Op]:
    """Q, K and V as TPU-MLIR runs them, V's first: a MatMul on the weight's column third, a Reshape to
    ``[B, T, H, D]`` and a Transpose to the pick's ``[B, H, T, D]``."""
    b, t, c3 = net.tensor(op.outputs[0]).orig_shape
    c = c3 // 3
    dtype = net.tensor(op.outputs[0]).dtype

    def tensor(name: str, shape: tuple[int, ...]) -> str:
        tensors[name] = Tensor(name, to_nchw(shape), dtype, shape)
        return name

    def make(name: str, kind: str, ins: tuple[str, ...], out: str, weights: tuple[Weight, ...],
             attrs: dict[str, Any], sources: tuple[str, ...]) -> Op:
        local, h, n, why = opsem.classify(kind, attrs, [tensors[x].orig_shape for x in ins], [tensors[out].orig_shape],
                                          any(w.role == "filter" for w in weights))
        return Op(name, kind, ins, (out,), weights, attrs, (), local, h, n, sources, why)

    made: list[Op] = []
    for k in (2, 1, 0):  # TPU-MLIR runs V's piece first
        mm = pieces[("matmul", 2 * k + 1)]
        rs = pieces.get(("reshape", 2 * k + 1), f"{mm}#reshape")
        pick = picks[k]
        heads, d = net.tensor(pick.outputs[0]).orig_shape[1], net.tensor(pick.outputs[0]).orig_shape[3]
        ws = tuple(replace(w, name=f"{w.name}#qkv{k}", shape=w.shape[:-1] + (c,)) for w in op.weights)
        x = tensor(mm, (b, t, c))
        made.append(make(mm, "MatMul", op.inputs, x, ws, dict(op.attrs), (f"{LOWERED}:{mm}",) + op.sources))
        y = tensor(rs, (b, t, heads, d))
        made.append(make(rs, "Reshape", (x,), y, (), {}, (f"{LOWERED}:{rs}",)))
        made.append(make(pick.name, "Transpose", (y,), pick.outputs[0], (),
                         {"perm": (0, 2, 1, 3), "in_dims": (b, t, heads, d)}, pick.sources))
    return made


def hold_moves(net: Network, cache: Cache) -> tuple[Network, tuple[str, ...]]:
    """``net`` with every op that is well defined in a group only held whole (:func:`lgopt.model.ops.whole_only`:
    a permute, reshape, Slice or Concat that moves data between lanes, an elementwise op of ranks lgopt's fold
    cannot broadcast) and that TPU-MLIR runs inside a group it holds whole (every slice count 1) made a local
    op that is never sliced, and one line per op.  A permute or reshape that keeps each batch to itself
    (:func:`lgopt.model.ops.keeps_batches`) may be cut into batch slices, also where TPU-MLIR does so.

    TPU-MLIR's canonicalisation folds an attention's head permutes into its MatMuls (``hdim_is_batch``: the
    heads stay on H, the tokens on the lanes) and the qkv split into three MatMuls, so its caches group whole
    transformer blocks (ViT-Tiny on BM1684X: one group of 341 ops, slice counts ``[1, 1, 1, 1, 1]``) where
    lgopt's importer keeps the permutes as global layers.  A move of a whole tensor in LMEM is well defined
    (every batch and row of its input, laid out as its output), so the group is buildable and verifiable;
    its cost is one copy on the vector unit.  Groups TPU-MLIR slices keep the moves global: a slice of a
    permute's output reads a scattered part of its input."""
    cm = map_cache(net, cache)
    batches = {o: g.secs[0] > 1 for gi, g in enumerate(cache.groups) if all(s <= 1 for s in g.secs[1:])
               for o in cm.group_ops[gi]}  # ops of groups cut into batch slices at most, and whether they are
    held: dict[str, Op] = {}
    for name in sorted(batches, key=net.op_index.__getitem__):
        op = net.op(name)
        if op.local or not op.inputs or len(op.outputs) != 1 or (op.weights and op.type == "Concat"):
            continue
        shapes_in = [net.tensor(t).orig_shape for t in op.inputs]
        shape_out = net.tensor(op.outputs[0]).orig_shape
        if not opsem.whole_only(op.type, op.attrs, shapes_in, shape_out, bool(op.weights)):
            continue
        # a batch slice of it is one only where lgopt's fold sees the same batches on both sides: ViT's INT8
        # (197, 1, 12, 64) -> (197, 1, 768) keeps its 197 leading rows, folded as 197 batches in, 1 batch out
        per_batch = opsem.keeps_batches(op.type, op.attrs, shapes_in, shape_out) and all(
            net.tensor(t).n == net.tensor(op.outputs[0]).n for t in op.inputs)
        if batches[name] and not per_batch:
            continue  # TPU-MLIR cuts the group into batches, and this move mixes them
        held[name] = replace(op, local=True, h_split=False, n_split=per_batch, reason="",
                             sources=op.sources + (f"{LOWERED}:held whole",))
    if not held:
        return net, ()
    ops = tuple(held.get(o.name, o) for o in net.ops)
    notes = tuple(f"{n}: a {held[n].type} lgopt runs globally, run whole in the group TPU-MLIR holds unsliced"
                  for n in held)
    net = Network(net.name, net.tensors, ops, net.inputs, net.outputs)
    flipped = _rows_over_lanes(net, set(held))
    tensors = {t: replace(v, rows_lanes=True) if t in flipped else v for t, v in net.tensors.items()}
    return check_network(Network(net.name, tensors, ops, net.inputs, net.outputs)), notes


_ROW_FAMILIES = (opsem.Family.RESHAPE, opsem.Family.ROWWISE, opsem.Family.BINARY, opsem.Family.UNARY)


def _rows_over_lanes(net: Network, held: set[str]) -> set[str]:
    """The tensors around the moves ``held`` to hold as TPU-MLIR's ``hdim_is_batch`` MatMuls do: tokens over
    the lanes, heads within each lane.  Folded NCHW an attention's ``[1, 3, 197, 197]`` puts its 3 heads on 3
    of 64 lanes (77,618 bytes each in F16); TPU-MLIR holds it as ``[1, 197, 3, 197]`` (4 tokens a lane, 4,728
    bytes).  A tensor of rank 4 or more is flipped when it has more rows than channels and every op reading or
    writing it is a move, a MatMul of two activations, a row-wise op, an elementwise op or a batch Slice."""
    def row_op(op: Op) -> bool:
        family = opsem.OP_SPECS[op.type].family if op.type in opsem.OP_SPECS else None
        if family is opsem.Family.MATMUL:
            return not any(w.role == "filter" for w in op.weights)
        if family is opsem.Family.CHANNEL_SLICE:
            return op.attrs.get("axis") == 0
        return family in _ROW_FAMILIES and op.local

    near = {t for n in held for t in net.op(n).inputs + net.op(n).outputs}
    out: set[str] = set()
    todo = list(near)
    while todo:
        t = todo.pop()
        ten = net.tensor(t)
        if t in out or len(ten.orig_shape) < 4 or ten.h <= ten.c or t in net.inputs or t in net.outputs:
            continue
        users = list(net.consumers.get(t, ())) + ([net.producer[t]] if t in net.producer else [])
        if not all(o.name in held or row_op(o) for o in users):
            continue
        out.add(t)
        todo += [x for o in users for x in o.inputs + o.outputs]
    return out

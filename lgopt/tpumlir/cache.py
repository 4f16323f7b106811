"""TPU-MLIR's own grouping: read its ``*.layer_group_cache.json`` and map it onto lgopt's ops.

A cache (TPU-MLIR 1.30.2, reference s9) lists per sub-function the groups (``GroupLayer``: op names
``locs`` in the pass's op order, ``func_start_idx..func_end_idx`` in that order, ``shape_secs``
``[n, c, d, h, w]``) and the ops left global (``GlobalLayer``: ``loc`` and ``func_idx``).  Together
they give TPU-MLIR's whole op order; groups are contiguous runs of it.

Op names are ``<ONNX output name>_<OpType>`` with an optional ``_<k>`` / ``_slice`` tail when TPU-MLIR
splits one ONNX op into several (a patch-embedding conv becomes reshape, permute, matmul).  Lowering
inserts casts named ``<operand><consumer>_f16`` / ``_f32`` that have no ONNX node and no lgopt op.
Fusion differs between the two: TPU-MLIR folds ``Conv 1x1 -> Conv 1x1`` pairs and whole LayerNorm
chains into one op (named after the last ONNX output), lgopt fuses activations into their producer.
:func:`map_cache` therefore

* anchors each TPU-MLIR op on the lgopt op producing (or, through ``Op.sources``, fusing) its named
  tensor; several TPU-MLIR ops on one lgopt op = TPU-MLIR splits it;
* gives every lgopt op no TPU-MLIR op is named after to the first TPU-MLIR op that consumes it
  (TPU-MLIR fused it there);
* orders lgopt's ops as TPU-MLIR runs them, and reports what it could not map.

Bad caches (not a cache, unknown op names, a cache of another model, non-contiguous groups,
impossible slice counts) raise :class:`~lgopt.errors.LgoptError` with one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import prod
from typing import Any, Sequence

from lgopt.errors import LgoptError
from lgopt.hw.chip import Chip
from lgopt.io.jsonio import read_json
from lgopt.model import ops as opsem
from lgopt.model.network import Network, Op, priority_order
from lgopt.tpumlir.fusions import pointwise_pair, scale_into_conv, scale_into_scale, slice_into_conv

# a cast TPU-MLIR inserted: `_<dtype>`, `_<k>` a piece's cast; `_mul_scale`, `_new_cast`: the requantising multiply
# and second cast its INT8 lowering adds on BM1684 (resnet18: `..._Relu_si8_mul_scale`, `output_Gemm_f32_new_cast`)
# ``<op>_to_<concat op>``: the MulShift INT8 lowering puts before a Concat to bring an input to its scale (unet_small's
# skip connections: ``/downs.1/downs.1.5/Relu_output_0_Relu_to_/Concat_1_output_0_Concat``), run next to the Concat;
# ``<weight>_i8``: a constant BM1684's INT8 lowering casts as an op of its own (vit_b_16's ``encoder.pos_embedding_i8``)
CAST = re.compile(r"_(f16|f32|bf16|int8|uint8|int16|int32|si8|ui8|i8)(_\d+)?(_mul_scale|_new_cast)?$"
                  r"|_to_\S*_Concat$")
SECS = ("n", "c", "d", "h", "w")
NOT_OPS = frozenset({"func.return"})  # listed among global layers, but no op
LOWERED = "tpu-mlir-lowered"  # source tag of an op lgopt.tpumlir.lowering made, named after a TPU-MLIR op


@dataclass(frozen=True)
class CacheGroup:
    locs: tuple[str, ...]
    secs: tuple[int, ...]  # n, c, d, h, w; all 0 = "TPU-MLIR searches them"
    cost: int
    start: int = -1  # func_start_idx / func_end_idx in the sub-function's op order (-1: not given)
    end: int = -1
    subfunc: int = 0


@dataclass(frozen=True)
class Cache:
    path: str
    groups: tuple[CacheGroup, ...]
    globals: tuple[tuple[int, int, str], ...]  # (subfunc, func_idx, loc) of every op run outside a group
    opt: int = 0
    # whether it lists its global layers at all (TPU-MLIR's own caches do, ``func.return`` among them, even when
    # every op is grouped; a cache written to force a grouping may not): ``globals`` empty says nothing then
    lists_globals: bool = False

    def steps(self) -> list[tuple[str, int]]:
        """Every TPU-MLIR op the cache names, with the step it runs in: its group's index, or -1 for a global
        layer; grouped ops first, in group order."""
        return [(loc, gi) for gi, g in enumerate(self.groups) for loc in g.locs] + [(loc, -1) for _, _, loc in
                                                                                     self.globals]

    @property
    def locs(self) -> list[str]:
        """Every TPU-MLIR op the cache names (:meth:`steps` without the steps)."""
        return [loc for loc, _ in self.steps()]


@dataclass(frozen=True)
class Mapping:
    """Compatibility view (used by reports): lgopt ops per cache group."""
    groups: tuple[tuple[tuple[str, ...], CacheGroup], ...]  # (lgopt op names, cache group)
    unmapped: tuple[str, ...]  # TPU-MLIR op names found in no lgopt op (casts aside)
    casts: int  # cast ops TPU-MLIR inserted (nothing to map)
    notes: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class CacheMap:
    """A cache mapped onto a network.

    ``steps``: TPU-MLIR's op order as lgopt steps, ``("group", cache group index, lgopt ops)`` or
    ``("global", None, (op,))``; ``order``: every lgopt op in TPU-MLIR's order; ``owner``: lgopt op ->
    cache group index, or -1 when TPU-MLIR runs it as a global layer."""
    cache: Cache
    order: tuple[str, ...]
    owner: dict[str, int]
    group_ops: tuple[tuple[str, ...], ...]  # per cache group, lgopt ops in network order
    casts: int
    unmapped: tuple[str, ...]
    fused: tuple[str, ...]  # lgopt ops no TPU-MLIR op is named after, and the op they went into
    split: dict[str, tuple[int, ...]]  # lgopt op -> steps (group index or -1) of the TPU-MLIR ops it became
    notes: tuple[str, ...]


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v:
        raise ValueError(f"not an integer: {v!r}")
    return int(v)


def load_cache(path: str) -> Cache:
    d = read_json(path, "TPU-MLIR layer-group cache")
    groups: list[CacheGroup] = []
    globs: list[tuple[int, int, str]] = []
    listed = False
    try:
        if not isinstance(d, dict):
            raise TypeError("a JSON object")
        subs = [(k, v) for k, v in d.items() if k.startswith("subfunc_")]
        if not subs:
            raise KeyError("subfunc_0")
        for si, (_, sub) in enumerate(subs):
            for g in sub["GroupLayer"]:
                locs = g["locs"]
                if not isinstance(locs, list) or not all(isinstance(x, str) for x in locs):
                    raise TypeError("locs")
                secs = g["shape_secs"]
                if not isinstance(secs, list):
                    raise TypeError("shape_secs")
                groups.append(CacheGroup(tuple(locs), tuple(_int(x) for x in secs), _int(g.get("group_cost", 0)),
                                         _int(g.get("func_start_idx", -1)), _int(g.get("func_end_idx", -1)), si))
            listed = listed or bool(sub.get("GlobalLayer"))
            for x in sub.get("GlobalLayer", []):
                if str(x["loc"]) not in NOT_OPS:
                    globs.append((si, _int(x["func_idx"]), str(x["loc"])))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise LgoptError(f"{path} is not a TPU-MLIR layer_group_cache.json (missing or bad {e})") from None
    return Cache(str(path), tuple(groups), tuple(globs), int(d.get("opt", 0) or 0), listed)


def read_cache(path: str) -> list[CacheGroup]:
    return list(load_cache(path).groups)


# --- names -----------------------------------------------------------------------------------------

PATCHES = "#patches"  # the importer's name for a patch embedding conv's gathered pixels (lgopt.io.onnx_import)


def tensor_aliases(net: Network) -> dict[str, str]:
    """Tensor name -> lgopt op: the op's outputs, and the outputs of ONNX nodes it fused (its ``aliases``, and for
    exports that name tensors after nodes, ``<node>_output_0`` of each source)."""
    out: dict[str, str] = {}
    for op in net.ops:
        for t in op.aliases:  # tensors of the model file its fusions made disappear (dynamo's names included)
            out.setdefault(t, op.name)
        for s in op.sources:
            out.setdefault(f"{s}_output_0", op.name)
            if s.startswith(f"{LOWERED}:"):  # a tensor lgopt.tpumlir.lowering fused away, as TPU-MLIR did
                out.setdefault(s[len(LOWERED) + 1:], op.name)
    for op in net.ops:
        for t in op.outputs:
            out[t] = op.name
            if t.endswith(PATCHES):  # a patch embedding's conv, whose output the importer renamed: TPU-MLIR names
                out.setdefault(t[:-len(PATCHES)], op.name)  # its pieces after the conv's own (dynamo's too)
        if any(src.startswith(f"{LOWERED}:") for src in op.sources):  # lgopt.tpumlir.lowering
            out[op.name] = op.name  # named after the TPU-MLIR op it is
    return out


def anchor(loc: str, aliases: dict[str, str]) -> str | None:
    """The lgopt op a TPU-MLIR op name is named after: the op of that very name (one lgopt made for a TPU-MLIR
    op, :mod:`lgopt.tpumlir.lowering`), else the longest ``_``-cut prefix that is a tensor."""
    if loc in aliases:
        return aliases[loc]
    i = len(loc)
    while True:
        i = loc.rfind("_", 0, i)
        if i <= 0:
            return None
        op = aliases.get(loc[:i])
        if op is not None:
            return op


MOVED = "_r_new_r_permute_for_"


def is_cast(loc: str) -> bool:
    """Whether TPU-MLIR inserted the op named ``loc``: a cast (``<operand><consumer>_f16``, an INT8 Concat's
    requantisation) or a permute it moved (:func:`is_moved_permute`); no lgopt op stands for it."""
    return bool(CAST.search(loc)) or is_moved_permute(loc)


def is_moved_permute(loc: str) -> bool:
    """Whether ``loc`` names a permute TPU-MLIR's canonicalisation moved past the op after it
    (``<tensor>_<Type>_r_new_r_permute_for_<op>...``: DeiT's head permute after Q's scale, run globally while
    the scale runs in a group).  The op it moved past is renamed ``<op>_<...>_r_new_r_permute_for_<op>`` and
    stays that op.

    >>> is_moved_permute("getitem_Squeeze_r_new_r_permute_for_val_58_Mul_val_58_Mul")
    True
    >>> is_moved_permute("val_58_Mul_getitem_Squeeze_r_new_r_permute_for_val_58_Mul")
    False
    """
    if MOVED not in loc:
        return False
    return not loc.startswith(loc.rsplit(MOVED, 1)[1] + "_")


def cast_operands(net: Network, locs: Sequence[str]) -> tuple[str, ...]:
    """The lgopt tensors the casts among ``locs`` convert (``<operand><consumer>_f16|_f32``), network inputs first.

    The operand is the shortest ``_``-cut prefix of the cast's name that names a tensor (the longest would be
    the consumer's), or a network input the name starts with (TPU-MLIR's graph input is f32 and the group loads
    it so, then casts it)."""
    aliases = tensor_aliases(net)
    out: list[str] = []
    for loc in locs:
        if not is_cast(loc) or is_moved_permute(loc):
            continue
        t = next((x for x in net.inputs if loc.startswith(x) and not loc[len(x):len(x) + 1].isalnum()), None)
        i = 0
        while t is None:
            i = loc.find("_", i + 1)
            if i < 0:
                break
            op = aliases.get(loc[:i])
            if op is not None:
                t = net.op(op).outputs[0]
        if t is not None and t not in out:
            out.append(t)
    return tuple(sorted(out, key=lambda x: x not in net.inputs))


# --- the mapping -----------------------------------------------------------------------------------

def _positions(cache: Cache) -> list[tuple[tuple[int, int], str, int]]:
    """Every TPU-MLIR op of the cache as (position, loc, cache group index or -1), in TPU-MLIR's order.
    Raises on groups that are not contiguous runs of that order."""
    path = cache.path
    seen: dict[tuple[int, int], str] = {}
    out: list[tuple[tuple[int, int], str, int]] = []
    indexed = all(g.start >= 0 and g.end >= 0 for g in cache.groups)
    for gi, g in enumerate(cache.groups):
        if not g.locs:
            raise LgoptError(f"{path}: group {gi} lists no ops")
        if indexed and g.end - g.start + 1 != len(g.locs):
            raise LgoptError(f"{path}: group {gi} is not contiguous: it lists {len(g.locs)} ops but spans "
                             f"func_idx {g.start}..{g.end}")
        for k, loc in enumerate(g.locs):
            pos = (g.subfunc, g.start + k if indexed else gi * 100000 + k)
            if pos in seen:
                raise LgoptError(f"{path}: group {gi} is not contiguous: func_idx {pos[1]} ({loc}) is also "
                                 f"{seen[pos]}")
            seen[pos] = f"in group {gi}"
            out.append((pos, loc, gi))
    if indexed:
        for si, fi, loc in cache.globals:
            pos = (si, fi)
            if pos in seen:
                raise LgoptError(f"{path}: group {seen[pos][9:]} is not contiguous: its func_idx {fi} is the "
                                 f"global op {loc}")
            seen[pos] = "global"
            out.append((pos, loc, -1))
    out.sort(key=lambda x: x[0])
    # the same op named twice
    names: dict[str, int] = {}
    for _, loc, gi in out:
        if loc in names and not is_cast(loc):
            raise LgoptError(f"{path}: op {loc} appears twice (groups {names[loc]} and {gi})")
        names[loc] = gi
    return out


def map_cache(net: Network, cache: Cache) -> CacheMap:
    """The cache's grouping in lgopt's ops; raises LgoptError when it cannot be this model's."""
    aliases = tensor_aliases(net)
    ops_pos = _positions(cache)
    casts, unmapped, anchored = _anchored(net, cache, ops_pos, aliases)
    _patchify_pieces(net, anchored)
    # position and owner of each lgopt op
    pos_of: dict[str, tuple[int, int]] = {}
    owner: dict[str, int] = {}
    split: dict[str, tuple[int, ...]] = {}
    for name, hits in anchored.items():
        last, gi = max(hits)  # the TPU-MLIR op producing the named tensor is the last piece
        pos_of[name], owner[name] = last, gi
        if len(hits) > 1:
            split[name] = tuple(g for _, g in hits)
    fused, notes = _place_unnamed(net, cache, ops_pos, pos_of, owner)
    # TPU-MLIR's order of lgopt ops: a topological order by position (ties: network order)
    index = net.op_index
    order = priority_order(net, lambda n, _: pos_of[n])
    groups = tuple(tuple(sorted((o for o, g in owner.items() if g == gi), key=index.__getitem__))
                   for gi in range(len(cache.groups)))
    fused_notes = []
    for o in fused:
        into = min((c.name for t in net.op(o).outputs for c in net.consumers.get(t, ()) if c.name in pos_of
                    and c.name not in fused), key=lambda c: pos_of[c], default="?")
        fused_notes.append(f"{o} -> {into}")
    return CacheMap(cache, tuple(order), owner, groups, casts, tuple(unmapped), tuple(fused_notes), split,
                    tuple(notes))


def _anchored(net: Network, cache: Cache, ops_pos: list[tuple[tuple[int, int], str, int]], aliases: dict[str, str]
              ) -> tuple[int, list[str], dict[str, list[tuple[tuple[int, int], int]]]]:
    """The cache's ops by the lgopt op each is named after: (casts, names of no lgopt op, lgopt op -> its
    pieces' (position, group)).  Raises LgoptError when any name is not the model's."""
    casts = 0
    unmapped: list[str] = []
    anchored: dict[str, list[tuple[tuple[int, int], int]]] = {}
    for pos, loc, gi in ops_pos:
        if is_cast(loc):  # before anchoring: a cast's name starts with its operand's name
            casts += 1
            continue
        target = anchor(loc, aliases)
        if target is not None:
            anchored.setdefault(target, []).append((pos, gi))
        else:
            unmapped.append(loc)
    named = len(ops_pos) - casts
    if named and len(unmapped) * 2 > named:
        raise LgoptError(f"{cache.path} is a cache of another model: {len(unmapped)} of its {named} op names are "
                         f"not in model {net.name} (e.g. {unmapped[0]})")
    if unmapped:
        raise LgoptError(f"{cache.path}: {len(unmapped)} op names are not in model {net.name}: "
                         f"{', '.join(unmapped[:3])}{' ...' if len(unmapped) > 3 else ''}")
    return casts, unmapped, anchored


def _patchify_pieces(net: Network, anchored: dict[str, list[tuple[tuple[int, int], int]]]) -> None:
    """Give a Patchify's last piece, run in a group, to the MatMul it feeds (in place).

    TPU-MLIR names every piece of an op it lowers after the op's output (a patch embedding's conv becomes
    reshape, permute, reshape and a MatMul, all ``/conv_proj/Conv_output_0_Conv_<k>``); lgopt holds that conv
    as a global layout op (Patchify) feeding a local MatMul no TPU-MLIR op names: the last piece, run in a
    group, is that MatMul."""
    for name, pieces in list(anchored.items()):
        if net.op(name).type != "Patchify" or max(pieces)[1] < 0:
            continue
        takers = [c for t in net.op(name).outputs for c in net.consumers.get(t, ())]
        if len(takers) == 1 and takers[0].local and takers[0].name not in anchored:
            final = max(pieces)
            anchored[takers[0].name] = [final]
            rest = [h for h in pieces if h != final]
            if rest:
                anchored[name] = rest
            else:  # only the MatMul is named (a cache listing no global layers): the Patchify runs globally
                del anchored[name]


def _place_unnamed(net: Network, cache: Cache, ops_pos: list[tuple[tuple[int, int], str, int]],
                   pos_of: dict[str, tuple[int, int]], owner: dict[str, int]) -> tuple[list[str], list[str]]:
    """Position and owner of the lgopt ops no TPU-MLIR op is named after (in place): fused into the consumer
    they feed first when TPU-MLIR fuses them, else run as global layers after their producers.  Returns the
    fused ops and a note for each global one."""
    group_at = {pos: gi for pos, _, gi in ops_pos}
    at = {pos: name for name, pos in pos_of.items()}
    fused: list[str] = []
    notes: list[str] = []
    listed = cache.lists_globals
    for op in reversed(net.ops):  # consumers first
        if op.name in pos_of:
            continue
        cons = [pos_of[c.name] for t in op.outputs for c in net.consumers.get(t, ()) if c.name in pos_of]
        if not cons:
            continue  # feeds nothing TPU-MLIR names: placed after its producers below
        p = min(cons)
        # a cache that lists no global layers (one written to force a grouping) names only grouped ops:
        # an unnamed op is then fused only where TPU-MLIR is known to fuse it, else it ran globally
        if listed or group_at.get(p, -1) < 0 or tpu_mlir_fuses(net, op.name, at[p]) \
                or _between(net, op, owner, group_at[p]):
            pos_of[op.name], owner[op.name] = p, group_at.get(p, -1)
            fused.append(op.name)
    for op in net.ops:
        if op.name not in pos_of:
            prod = [pos_of[net.producer[t].name] for t in op.inputs if t in net.producer
                    and net.producer[t].name in pos_of]
            pos_of[op.name] = max(prod, default=(0, -1))
            owner[op.name] = -1
            notes.append(f"{op.name} ({op.type}) is named by no TPU-MLIR op"
                         f"{'' if listed else ' (the cache lists no global layers)'}; run as a global layer")
    return fused, notes


def _between(net: Network, op: Op, owner: dict[str, int], group: int) -> bool:
    """Whether ``op`` is read by group ``group`` and reads one of its ops: TPU-MLIR's groups are runs of its op
    order, so an op between two ops of one group ran inside it (a LayerNorm's reshape between BM1684's GroupNorm
    and its weight Mul, which no TPU-MLIR op is named after)."""
    return any(owner.get(net.producer[t].name) == group for t in op.inputs if t in net.producer)


def tpu_mlir_fuses(net: Network, op: str, consumer: str) -> bool:
    """Whether TPU-MLIR 1.30 folds lgopt op ``op`` into ``consumer`` (so that no TPU-MLIR op is named after
    ``op``): the patterns its opt1/opt2 caches of the calibration models show, and its rewrites of
    :mod:`lgopt.tpumlir.fusions` that fold an op into the one reading it.

    * a linear 1x1 convolution (stride 1, one group, no padding) read only by a convolution of one group
      without padding (:func:`~lgopt.tpumlir.fusions.pointwise_pair`);
    * a convolution without activation read only by a per-channel scale (a BatchNormalization, a Mul or Add of a
      per-channel constant) or by a Slice cropping only its padding; a scale, scalar Mul or scalar Add read only
      by a per-channel scale;
    * an identity pooling (kernel 1, stride 1, no padding: VGG's adaptive pooling at 7 x 7);
    * a producer whose Relu or Clip lgopt left unfused (a Relu after a Gemm: TPU-MLIR's ``do_relu`` and
      ``relu_limit``), a ``HardSigmoid`` into the ``Mul`` that makes it a hard swish.  A SiLU, Sigmoid or Tanh is
      an op of its own there (YOLOv5's conv and SiLU are named apart in every cache), so a conv before one that a
      cache does not name ran globally (BM1684's INT8 input conv, left out of a forced cache's groups).
    """
    a, c = net.op(op), net.op(consumer)
    if len(net.consumers.get(a.outputs[0], ())) != 1 or c.name != net.consumers[a.outputs[0]][0].name:
        return False
    if pointwise_pair(net, a, c):
        return True
    if any(x is not None and x.name == a.name
           for x in (scale_into_conv(net, c), scale_into_scale(net, c), slice_into_conv(net, c))):
        return True
    if a.type in ("MaxPool", "AveragePool") and tuple(a.attrs.get("kernel", ())) == (1, 1) \
            and tuple(a.attrs.get("strides", ())) == (1, 1) and not any(a.attrs.get("pads", ())):
        return True
    if c.type in ("Relu", "Clip") and c.inputs == a.outputs:
        return True
    return a.type == "HardSigmoid" and c.type == "Mul" and set(c.inputs) == {a.outputs[0], *a.inputs}


def map_groups(net: Network, groups: Sequence[CacheGroup]) -> Mapping:
    """Lenient view for reports: lgopt ops per group, names that match no op (never raises on names)."""
    aliases = tensor_aliases(net)
    mapped, unmapped = [], []
    casts = 0
    seen: set[str] = set()
    notes: list[str] = []
    for gi, g in enumerate(groups):
        ops: list[str] = []
        for loc in g.locs:
            op = None if is_cast(loc) else anchor(loc, aliases)
            if op is None:
                if is_cast(loc):
                    casts += 1
                else:
                    unmapped.append(loc)
            elif op not in ops:
                if op in seen:
                    notes.append(f"group {gi}: {op} already in an earlier group")
                    continue
                ops.append(op)
                seen.add(op)
        ops.sort(key=net.op_index.__getitem__)
        if ops:
            mapped.append((tuple(ops), g))
    return Mapping(tuple(mapped), tuple(unmapped), casts, tuple(notes))


# --- slice counts ----------------------------------------------------------------------------------

def check_secs(net: Network, chip: Chip, gi: int, secs: tuple[int, ...], ops: Sequence[str], path: str) -> None:
    """Slice counts a chip cannot have for this group (not lgopt's limits: TPU-MLIR's own bounds)."""
    if len(secs) != 5:
        raise LgoptError(f"{path}: group {gi}: shape_secs {list(secs)} must have 5 entries [n, c, d, h, w]")
    if any(s < 0 for s in secs) or (0 in secs and any(secs)):
        raise LgoptError(f"{path}: group {gi}: shape_secs {list(secs)} must be all positive, or all 0 "
                         "(TPU-MLIR searches them)")
    if not any(secs) or not ops:
        return
    # TPU-MLIR views tensors its own way (a matmul's batch dims as N, NHWC after a transpose), so the
    # bound is loose: no count above the largest dimension, no product above the elements of an output
    outs = [net.tensor(t) for o in ops for t in net.op(o).outputs]
    dim_max = max(max(t.orig_shape or t.shape) for t in outs)
    elems = max(t.elems for t in outs)
    big = max(secs)
    if big > dim_max:
        raise LgoptError(f"{path}: group {gi}: {SECS[secs.index(big)]}secs={big} is impossible on {chip.name}: "
                         f"no tensor of the group has a dimension that large (largest {dim_max})")
    prod = secs[0] * secs[1] * secs[2] * secs[3] * secs[4]
    if prod > elems:
        raise LgoptError(f"{path}: group {gi}: shape_secs {list(secs)} make {prod} slices, more than the "
                         f"{elems} elements of the group's largest output")


def flat_elementwise(net: Network, ops: Sequence[str]) -> bool:
    """Whether TPU-MLIR runs this group flattened (``GROUP_SMALL_C`` on 4-D tensors, reference s1): every op
    elementwise (an activation, or a binary op of equal shapes or with a scalar), every tensor 4-D, NCHW-style
    and of one shape.  It views ``[n, c, h, w]`` as ``[n*c*h / lanes, lanes, w, 1]`` (``[n*c, h, w, 1]`` when
    the lanes do not divide it), so its ``nsecs`` cut the rows of every channel and its ``hsecs`` the columns:
    yolov5s's SiLU split off its conv (``1x64x160x160`` on BM1684X) compiles at ``[2, 1, 1, 15, 1]``, 30
    slices of 80 x 64 x 11 elements, a half of H by a fifteenth of W in lgopt's terms."""
    if not ops:
        return False
    shapes = set()
    for o in ops:
        op = net.op(o)
        spec = opsem.OP_SPECS.get(op.type)
        if spec is None or spec.family not in (opsem.Family.UNARY, opsem.Family.BINARY):
            return False
        if any(prod(w.shape) > 1 for w in op.weights):
            return False
        for t in op.inputs + op.outputs:
            ten = net.tensor(t)
            if ten.rows_on_lanes or len(ten.orig_shape or ten.shape) != 4:
                return False
            shapes.add(ten.shape)
    return len(shapes) == 1


def read_secs(net: Network, ops: Sequence[str], n: int, h: int, w: int) -> tuple[tuple[int, int, int], str]:
    """lgopt's (N, H, W) slice counts for a cache's ``nsecs, hsecs, wsecs`` on this group, and how they were
    read when not literally ("" when they were).

    TPU-MLIR's N is lgopt's N only where both see the same tensors.  A flattened elementwise group
    (:func:`flat_elementwise`) cuts rows with ``nsecs`` beyond the batch and columns with ``hsecs``; a group
    whose tensors lie rows on lanes (rank-3 ``[B, M, K]``, channels-last blocks) is viewed as ``[n*c, h, w,
    1]``, so ``nsecs`` beyond the batch are row sections (ConvNeXt's ``1x56x56x96`` LayerNorm-MLP blocks on
    BM1688 compile at ``nsecs=2``, each slice 1,568 of the 3,136 tokens).  Anything else is read literally;
    the caller refuses an ``nsecs`` larger than lgopt's batch."""
    outs = [net.tensor(t) for o in ops for t in net.op(o).outputs]
    batch = min(t.n for t in outs)
    beyond = n > batch and n % batch == 0  # whole batches, each cut into n / batch row sections
    if flat_elementwise(net, ops) and (beyond or (n <= batch and h > 1)):
        nn, rows, cols = min(n, batch), (n // batch if beyond else 1), h * w
        if rows <= min(t.h for t in outs) and cols <= min(t.w for t in outs):
            return (nn, rows, cols), (f"TPU-MLIR flattens this elementwise group: nsecs={n} and hsecs={h} read as "
                                      f"n={nn} h={rows} w={cols}")
    if beyond and rows_on_lanes_group(net, ops):
        rows = h * (n // batch)
        if rows <= min(t.h for t in outs):
            return (batch, rows, w), (f"nsecs={n} hsecs={h} slice the rows of a rows-on-lanes group (TPU-MLIR "
                                      f"views them as N): run as n={batch} h={rows}")
    return (n, h, w), ""


def write_secs(net: Network, ops: Sequence[str], n: int, h: int, w: int, c: int = 1) -> list[int]:
    """The ``shape_secs`` that make TPU-MLIR run lgopt's (N, H, W) slices of this group: :func:`read_secs`
    inverted (a flattened elementwise group's rows go to ``nsecs``, its columns to ``hsecs``; so do the rows of a
    rows-on-lanes group: ConvNeXt's LayerNorm-MLP blocks on BM1688 fail to allocate at ``hsecs=2`` and compile
    at ``nsecs=2``, TPU-MLIR's own choice).

    >>> from lgopt.model.network import Network, Op, Tensor
    >>> t = {k: Tensor(k, (1, 64, 160, 160), "f16") for k in "xy"}
    >>> net = Network("n", t, (Op("a", "Sigmoid", ("x",), ("y",)),), ("x",), ("y",))
    >>> write_secs(net, ["a"], 1, 2, 15), read_secs(net, ["a"], 2, 15, 1)[0]
    ([2, 1, 1, 15, 1], (1, 2, 15))
    """
    if c > 1:  # channel (heads) slices: TPU-MLIR's csecs, the rest literal
        return [n, c, 1, h, w]
    if flat_elementwise(net, ops):
        return [n * h, 1, 1, w, 1]
    batch = min(net.tensor(t).n for o in ops for t in net.op(o).outputs)
    if (h > 1 or w > 1) and rows_as_channels_group(net, ops):  # [B, M, K] is TPU-MLIR's n=B, c=M, h=K
        return [n, h, 1, w, 1]
    if h > 1 and n == batch and rows_on_lanes_group(net, ops):  # rows to nsecs, as TPU-MLIR's own caches have it
        return [n * h, 1, 1, 1, w]
    return [n, 1, 1, h, w]


def rows_as_channels_group(net: Network, ops: Sequence[str]) -> bool:
    """Whether every tensor of the group is a rank-3 ``[B, M, K]`` (a transformer's tokens) or a rank-4 one a
    TPU-MLIR lowering holds rows over the lanes (``Tensor.rows_lanes``: an attention's ``[B, H, T, D]``):
    TPU-MLIR's matmul group views the first as ``n=B, c=M, h=K``, its small-C group the second as ``n=B*H,
    c=T, h=D`` (:mod:`lgopt.tpumlir.smallc`), so the rows are sliced by ``csecs`` (at most ``ceil(M / lanes)``,
    its ``get_group_max_secs``) and the columns by ``hsecs``.  ViT's final Add + LayerNorm on BM1688 written
    with its six row slices as ``nsecs`` fails to allocate (every secs above the group's maximum), as ``csecs``
    it compiles.  A channels-last 4-D block (ConvNeXt's) keeps its rows in ``nsecs``.

    >>> from lgopt.model.network import Network, Op, Tensor
    >>> t = {k: Tensor(k, (1, 1, 197, 768), "f16", (1, 197, 768)) for k in "xy"}
    >>> net = Network("n", t, (Op("a", "Add", ("x", "x"), ("y",)),), ("x",), ("y",))
    >>> rows_as_channels_group(net, ["a"]), write_secs(net, ["a"], 1, 6, 1)
    (True, [1, 6, 1, 1, 1])
    """
    tensors = {t for o in ops for t in net.op(o).inputs + net.op(o).outputs if t in net.tensors}
    ranks = {t: len(net.tensor(t).orig_shape or ()) for t in tensors}  # a rank-3 tensor is held rows on lanes
    return bool(tensors) and all(r == 3 or (r == 4 and net.tensor(t).rows_lanes) for t, r in ranks.items())


def rows_on_lanes_group(net: Network, ops: Sequence[str]) -> bool:
    """Whether every tensor of the group lies rows on lanes (rank-3 ``[B, M, K]``, channels-last blocks), so
    that TPU-MLIR views it as ``[n*c, h, w, 1]`` and slices its rows with ``nsecs``."""
    tensors = {t for o in ops for t in net.op(o).inputs + net.op(o).outputs if t in net.tensors}
    return bool(tensors) and all(net.tensor(t).rows_on_lanes for t in tensors)

"""An lgopt plan as a TPU-MLIR 1.30.2 ``layer_group_cache.json``: the file ``LOAD_TPU_GROUP=1 model_deploy``
loads instead of searching (``docs/tpu-mlir.md``).

What the 1.30.2 loader needs (measured, ``../shared/tpu-mlir/README.md``): op identity by name only
(``locs`` = MLIR location names; unknown names are silently dropped); every group a contiguous run of
the pass's op order with ``locs`` in that order; ``index`` = load order, increasing along the op
order; only LMEM-capable ops (a group crossing a base group crashes the compiler); ``shape_secs``
``[n, c, d, h, w]`` honoured exactly (infeasible = hard error); a top-level ``opt``; every
``subfunc_<i>`` key (a missing one silently makes its ops global).

**With a reference cache** (one TPU-MLIR wrote for the same model, chip and quantisation, e.g. its own
opt2 grouping) the exporter takes from it the op names, the op order, the casts lowering inserted,
the base group of every op TPU-MLIR grouped and the ops it runs globally.  Each lgopt op is found
through :func:`~lgopt.tpumlir.cache.anchor` (the TPU-MLIR op named after its output; several when
TPU-MLIR splits it; an op no name points at went into its first consumer's TPU-MLIR op).  A group
becomes the interval of TPU-MLIR's order from its first to its last op, with

* **casts inside the interval included**: a cast between two ops of one group has no lgopt op, and
  leaving it out makes the group non-contiguous (dominance error in the loader).  TPU-MLIR puts
  such casts in its own groups too (resnet18 ``[30-33]``).  A cast at an edge of the interval (before
  the group's first op or after its last) joins the group where the reference groups it with that op
  (``edge_casts="reference"``, the default): run globally it moves its tensor through GMEM twice, which
  no plan charges.  The Cast of a network input or output joins only a group that converts it itself
  (``GroupPlan.f32_in`` / ``f32_out``: its LMEM holds the f32 slice).  ``edge_casts="global"`` runs the
  other edge casts as global layers, except in a group that is one of the reference's own;
* ``shape_secs`` = ``[n_slices, c_slices, 1, h_slices, w_slices]`` (lgopt slices N, channels, H and W, never D; a group
  TPU-MLIR flattens writes its rows as ``nsecs`` and columns as ``hsecs``: ``tpumlir_cache.write_secs``);
* ``index`` in load order over groups and global layers, ``func_start_idx``/``func_end_idx``,
  ``base_group_idx`` from the reference, ``group_cost`` 0 (the loader copies it and never uses it).

Groups of one op are written as global layers (TPU-MLIR compiles them so anyway).  A plan that cannot
be written without the compiler refusing it raises :class:`~lgopt.errors.LgoptError` naming the group
and the reason: a group not contiguous in TPU-MLIR's op order, crossing its base groups, containing an
op TPU-MLIR runs globally (in the reference; or outside every base group when ``base_groups`` are
given, e.g. ``base_groups.json`` of ``score_grouping.sh``'s model cache: then an op TPU-MLIR merely
*chose* to run globally may be grouped), or splitting one TPU-MLIR op over two steps.

**Without a reference** the names are derived from the model (``<output tensor>_<ONNX type of the last
fused node>``), the order is the plan's, and the result's ``lgopt.warnings`` list says what may not
match: no casts, TPU-MLIR's order and fusion, base groups.

The result carries one key the loader does not read, ``lgopt`` (provenance and warnings).
"""

from __future__ import annotations

import csv
import json
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

from lgopt.errors import LgoptError
from lgopt.io.jsonio import read_json
from lgopt.model.network import Network, network_digest
from lgopt.model.plan import GroupPlan, Plan
from lgopt.tpumlir.cache import anchor, cast_operands, is_cast, load_cache, map_cache, tensor_aliases, write_secs
from lgopt.tpumlir.lowering import network_of

OPT = 2  # the loader needs the key; its value goes to update_group_io(opt); TPU-MLIR's own caches say 2

BaseGroups = Mapping[str, Sequence[Sequence[int]]]  # "subfunc_<i>" -> [[first idx, last idx], ...]


@dataclass(frozen=True)
class _RefOp:
    sub: int
    idx: int
    loc: str
    ref_group: int  # position of its GroupLayer entry in the reference, -1 = global there
    base: int  # base_group_idx of that entry, -1 = unknown (global there)
    secs: tuple[int, ...] = ()  # that entry's shape_secs


def _subs(d: Mapping[str, Any]) -> list[str]:
    return sorted((k for k in d if k.startswith("subfunc_") and k[8:].isdigit()), key=lambda k: int(k[8:]))


def _reference_ops(path: str) -> tuple[dict[int, list[_RefOp]], list[str]]:
    """Every op of the reference (groups and global layers, ``func.return`` too) per subfunction, in the
    pass's order; raises when the reference lacks the indices TPU-MLIR writes."""
    load_cache(path)  # the reader's checks: a cache at all, well-formed groups
    d = read_json(path, "TPU-MLIR layer-group cache")
    subs = _subs(d)
    out: dict[int, list[_RefOp]] = {}
    try:
        for si, key in enumerate(subs):
            ops: dict[int, _RefOp] = {}
            for gi, g in enumerate(d[key].get("GroupLayer", [])):
                start = g.get("func_start_idx")
                if not isinstance(start, int):
                    raise LgoptError(f"{path}: group {gi} has no func_start_idx: the reference must be a cache "
                                     "TPU-MLIR wrote (its op order is needed)")
                for k, loc in enumerate(g["locs"]):
                    ops[start + k] = _RefOp(si, start + k, str(loc), gi, int(g.get("base_group_idx", -1)),
                                            tuple(int(v) for v in g.get("shape_secs", ())))
            for x in d[key].get("GlobalLayer", []):
                fi = int(x["func_idx"])
                if fi in ops:
                    raise LgoptError(f"{path}: func_idx {fi} is both in group {ops[fi].ref_group} and global")
                ops[fi] = _RefOp(si, fi, str(x["loc"]), -1, -1)
            idxs = sorted(ops)
            if idxs != list(range(len(idxs))):
                gap = next(i for i in range(len(idxs) + 1) if i not in ops)
                raise LgoptError(f"{path}: {key} does not list every op of the pass (func_idx {gap} missing): the "
                                 "reference must be a complete cache TPU-MLIR wrote")
            out[si] = [ops[i] for i in idxs]
    except (KeyError, TypeError, ValueError) as e:
        raise LgoptError(f"{path} is not a TPU-MLIR layer_group_cache.json (missing or bad {e})") from None
    return out, subs


def read_base_groups(path: str | Path) -> dict[str, list[tuple[int, int]]]:
    """``base_groups.json`` (score_grouping.sh's model cache: ``{"subfunc_0": [[a, b], ...]}``) or a
    ``model_ops.csv`` with one model and chip (columns ``subfunc, idx, base_group``)."""
    p = Path(path)
    if p.suffix == ".csv":
        rows: dict[str, dict[int, list[int]]] = {}
        try:
            with open(p, newline="") as f:
                for r in csv.DictReader(f):
                    rows.setdefault(r["subfunc"], {}).setdefault(int(r["base_group"]), []).append(int(r["idx"]))
        except (OSError, KeyError, ValueError) as e:
            raise LgoptError(f"{path}: not a model_ops.csv with subfunc, idx, base_group ({e})") from None
        return {s: sorted((min(v), max(v)) for v in bg.values()) for s, bg in rows.items()}
    d = read_json(p, "base groups")
    try:
        out = {str(k): [(int(a), int(b)) for a, b in v] for k, v in d.items()}
    except (AttributeError, TypeError, ValueError):
        raise LgoptError(f"{path}: not a base_groups.json ({{\"subfunc_0\": [[first, last], ...]}})") from None
    if not out:  # score_grouping.sh writes {} when it could not read them: every op would stay global
        raise LgoptError(f"{path}: no base groups in it (the scoring tool could not read them); leave it out and "
                         "the reference's own groups stand in for them")
    return out


def base_groups_from_model_ops(path: str | Path, model: str, chip: str) -> dict[str, list[tuple[int, int]]]:
    """Base groups of one model/chip from the calibration set's ``model_ops.csv``."""
    out: dict[str, dict[int, list[int]]] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["model"] == model and r["chip"] == chip:
                out.setdefault(r["subfunc"], {}).setdefault(int(r["base_group"]), []).append(int(r["idx"]))
    if not out:
        raise LgoptError(f"{path}: no ops of {model} on {chip}")
    return {s: sorted((min(v), max(v)) for v in bg.values()) for s, bg in out.items()}


def _plan_groups(plan: Plan, net: Network) -> tuple[dict[str, int], dict[int, str]]:
    """lgopt op -> plan group index (groups of two or more ops), and a note per one-op group (by index)."""
    known = {op.name for op in net.ops}
    of: dict[str, int] = {}
    notes: dict[int, str] = {}
    for k, g in enumerate(plan.groups):
        bad = [o for o in g.ops if o not in known]
        if bad:
            raise LgoptError(f"the plan is not for model {net.name}: group {k} has op {bad[0]}, which the model "
                             "does not have")
        if len(g.ops) < 2:
            notes[k] = (f"group {k} ({g.ops[0] if g.ops else '-'}) has one op: written as a global layer "
                        "(TPU-MLIR compiles a one-op group as one)")
            continue
        for o in g.ops:
            of[o] = k
    return of, notes


def _entry(start: int, locs: list[str], secs: list[int], base: int) -> OrderedDict[str, Any]:
    return OrderedDict([("base_group_idx", base), ("start_idx", start), ("end_idx", start + len(locs) - 1),
                        ("func_start_idx", start), ("func_end_idx", start + len(locs) - 1), ("group_cost", 0),
                        ("index", -1), ("locs", locs), ("shape_secs", secs)])


def _assemble(subs: list[str], groups: dict[int, list[tuple[int, OrderedDict[str, Any]]]],
              globs: dict[int, list[tuple[int, str]]]) -> OrderedDict[str, Any]:
    root: OrderedDict[str, Any] = OrderedDict([("opt", OPT), ("total subfunc", len(subs))])
    for si, key in enumerate(subs):
        gl = [e for _, e in sorted(groups.get(si, []), key=lambda t: t[0])]
        glob = [OrderedDict([("index", -1), ("func_idx", fi), ("group_cost", 0), ("loc", loc)])
                for fi, loc in sorted(globs.get(si, []))]
        items = sorted([(e["func_start_idx"], e) for e in gl] + [(e["func_idx"], e) for e in glob],
                       key=lambda t: t[0])
        for k, (_, e) in enumerate(items):
            e["index"] = k  # load order = op order
        root[key] = OrderedDict([("subfunc idx", si), ("GroupLayer", gl), ("GlobalLayer", glob)])
    return root


# --- with a reference ----------------------------------------------------------------------------------

@dataclass
class _RefMap:
    """The reference's ops and how lgopt's ops sit on them."""

    byidx: dict[tuple[int, int], Any]  # (subfunc, func_idx) -> reference op
    covers: dict[tuple[int, int], list[str]]  # TPU-MLIR op -> the lgopt ops it runs
    where: dict[str, list[tuple[int, int]]]  # lgopt op -> its TPU-MLIR ops
    casts: set[tuple[int, int]]  # casts lowering inserted
    unplaced: list[str]  # lgopt ops no TPU-MLIR op runs (folded away)


def _ref_map(net: Network, ref_ops: dict[int, list[Any]]) -> _RefMap:
    """Each TPU-MLIR op of the reference with the lgopt ops it runs: by name, and an lgopt op no name points at
    with its first consumer's op."""
    aliases = tensor_aliases(net)
    covers: dict[tuple[int, int], list[str]] = {}
    where: dict[str, list[tuple[int, int]]] = {}
    casts: set[tuple[int, int]] = set()
    for si, ops in ref_ops.items():
        for r in ops:
            if r.loc == "func.return":
                continue
            if is_cast(r.loc):
                casts.add((si, r.idx))
                continue
            o = anchor(r.loc, aliases)
            if o is not None:
                covers.setdefault((si, r.idx), []).append(o)
                where.setdefault(o, []).append((si, r.idx))
    for name, pieces in list(where.items()):  # the reader's rule (tpumlir_cache.map_cache): the last piece of a
        if net.op(name).type != "Patchify" or len(pieces) < 2:  # patch embedding's conv is the MatMul it feeds
            continue
        takers = [c for t in net.op(name).outputs for c in net.consumers.get(t, ())]
        if len(takers) == 1 and takers[0].local and takers[0].name not in where:
            last = max(pieces)
            where[name] = [p for p in pieces if p != last]
            where[takers[0].name] = [last]
            covers[last] = [takers[0].name if o == name else o for o in covers[last]]
    unplaced: list[str] = []
    for op in reversed(net.ops):  # lgopt ops no TPU-MLIR op is named after: in their first consumer's
        if op.name in where:
            continue
        cons = [p for t in op.outputs for c in net.consumers.get(t, ()) for p in where.get(c.name, ())]
        if cons:
            p = min(cons)
            covers.setdefault(p, []).append(op.name)
            where[op.name] = [p]
        else:
            unplaced.append(op.name)
    byidx = {(r.sub, r.idx): r for ops in ref_ops.values() for r in ops}
    return _RefMap(byidx, covers, where, casts, unplaced)


def _group_span(k: int, g: Any, rm: _RefMap, group_of: dict[str, int], subs: list[str],
                base_groups: BaseGroups | None, notes: list[str]) -> tuple[int, int, int] | None:
    """(subfunc, first, last func_idx) of plan group ``k`` in TPU-MLIR's order, refusing what the loader or the
    compiler would refuse; None (and a note) when TPU-MLIR runs it as one op."""
    byidx, covers, where, casts, unplaced = rm.byidx, rm.covers, rm.where, rm.casts, rm.unplaced

    def step(o: str) -> str:
        return f"group {group_of[o]}" if o in group_of else "a global layer"

    tag = f"plan group {k} ({g.ops[0]} .. {g.ops[-1]})"
    if getattr(g, "weight_cols", None):
        raise LgoptError(f"cannot export {tag} to TPU-MLIR: it reloads the weights of {next(iter(g.weight_cols))} "
                         "by columns per slice, which TPU-MLIR 1.30 has disabled (its cache cannot say it)")
    gone = [o for o in g.ops if o in unplaced]
    if gone:
        notes.append(f"{tag}: {', '.join(gone)} has no TPU-MLIR op (TPU-MLIR folded it away); nothing to place")
    pos = sorted({p for o in g.ops for p in where.get(o, ())})
    for p in pos:
        other = [o for o in covers[p] if group_of.get(o) != k]
        if other:
            mine = next(o for o in covers[p] if group_of.get(o) == k)
            raise LgoptError(f"cannot export {tag} to TPU-MLIR: TPU-MLIR runs lgopt ops {mine} (group {k}) and "
                             f"{other[0]} ({step(other[0])}) as one op {byidx[p].loc}")
    if len(pos) < 2:
        notes.append(f"{tag}: TPU-MLIR runs its ops as one op ({byidx[pos[0]].loc if pos else 'none'}): "
                     "written as a global layer")
        return None
    if len({si for si, _ in pos}) > 1:
        raise LgoptError(f"cannot export {tag} to TPU-MLIR: its ops are in different TPU-MLIR subfunctions")
    si = pos[0][0]
    lo, hi = pos[0][1], pos[-1][1]
    span = [byidx[(si, i)] for i in range(lo, hi + 1)]
    mine_pos = set(pos)
    for r in span:
        p = (si, r.idx)
        if p in mine_pos or p in casts:
            continue
        who = covers.get(p)
        what = f"lgopt's {who[0]} ({step(who[0])})" if who else "an op lgopt does not have"
        raise LgoptError(f"cannot export {tag} to TPU-MLIR: not contiguous in TPU-MLIR's op order: {r.loc} "
                         f"(func_idx {r.idx}, {what}) lies between its ops {byidx[pos[0]].loc} (func_idx {lo}) "
                         f"and {byidx[pos[-1]].loc} (func_idx {hi})")
    if base_groups is not None:
        bgs = base_groups.get(subs[si], ())
        if not any(a <= lo and hi <= b for a, b in bgs):
            bad = next((r for r in span if not any(a <= r.idx <= b and b > a for a, b in bgs)), None)
            if bad is not None:
                raise LgoptError(f"cannot export {tag} to TPU-MLIR: it contains {bad.loc} (func_idx {bad.idx}), "
                                 "which TPU-MLIR can only run as a global layer (in no base group)")
            raise LgoptError(f"cannot export {tag} to TPU-MLIR: func_idx {lo}..{hi} cross TPU-MLIR's base "
                             "groups (runs of ops it can put in LMEM)")
    else:
        glob = next((r for r in span if r.ref_group < 0), None)
        if glob is not None:
            raise LgoptError(f"cannot export {tag} to TPU-MLIR: it contains {glob.loc} (func_idx {glob.idx}), "
                             "which TPU-MLIR runs as a global layer in the reference (give its base groups to "
                             "allow ops it can run in LMEM)")
        bases = sorted({r.base for r in span})
        if len(bases) > 1:
            raise LgoptError(f"cannot export {tag} to TPU-MLIR: it crosses TPU-MLIR's base groups {bases[0]} "
                             f"and {bases[1]} (an op between them cannot run in LMEM)")
    return si, lo, hi


def _extend_over_casts(sp: list[Any], step_: int, rm: _RefMap, taken: set[tuple[int, int]],
                       joins: Callable[[int], bool]) -> int:
    """Grow span ``sp`` over the casts next to its first op (``step_`` -1) or its last (+1) while ``joins`` (the
    cast's func_idx) holds; the number of casts taken."""
    si, end = sp[0], (2 if step_ > 0 else 1)
    i = sp[end] + step_
    took = 0
    while (si, i) in rm.casts and (si, i) not in taken and joins(i):
        taken.add((si, i))
        sp[end] = i
        took += 1
        i += step_
    return took


def _take_edge_casts(spans: list[list[Any]], rm: _RefMap, taken: set[tuple[int, int]],
                     net: Network | None = None) -> int:
    """A cast next to a group's first or last op joins the group when TPU-MLIR's reference groups it with
    that very op: TPU-MLIR itself allocated them together (its own groups end on such casts).  With ``net``, not
    the Cast of a network input or output: a group takes those only when it converts them (``f32_in``,
    ``f32_out``: :func:`_take_io_casts`)."""
    edge = 0
    io = set() if net is None else set(net.inputs) | set(net.outputs)
    for sp in spans:
        si, lo, hi, _ = sp
        for step_, end in ((1, hi), (-1, lo)):
            group: int = rm.byidx[(si, end)].ref_group

            def same_group(i: int, si: int = si, group: int = group) -> bool:
                return bool(rm.byidx[(si, i)].ref_group == group) and not (
                    io and net is not None and set(cast_operands(net, [rm.byidx[(si, i)].loc])) & io)

            if group >= 0:
                edge += _extend_over_casts(sp, step_, rm, taken, same_group)
    return edge


def _secs(net: Network, g: GroupPlan) -> tuple[int, ...]:
    """The ``shape_secs`` a group is written with (:func:`~lgopt.tpumlir.cache.write_secs`)."""
    return tuple(write_secs(net, g.ops, g.n_slices, g.h_slices, g.w_slices, g.c_slices))


def _as_in_reference(spans: list[list[Any]], rm: _RefMap, net: Network) -> list[list[Any]]:
    """The spans that are one of the reference's groups, op for op at its slice counts: they keep the casts
    TPU-MLIR grouped with them whatever the edge-cast rule.  TPU-MLIR compiled that very group with them, and
    without them it is another group: yolov5s_like / BM1688's [124-154] without the f32 cast that opens its
    reference group [123-154] reads f32 from a global Cast, TPU-MLIR's first estimate of its slices grows,
    and its time-step pass refuses the group (``lgopt.tpumlir.forks``)."""
    out = []
    for sp in spans:
        si, lo, hi, g = sp
        mine = [rm.byidx[(si, i)] for i in range(lo, hi + 1) if (si, i) not in rm.casts]
        groups = {r.ref_group for r in mine}
        if len(groups) != 1 or -1 in groups:
            continue
        ref = next(iter(groups))
        whole = [r for r in rm.byidx.values() if r.sub == si and r.ref_group == ref and (si, r.idx) not in rm.casts]
        if len(whole) == len(mine) and _secs(net, g) == mine[0].secs:
            out.append(sp)
    return out


def _take_edge_pieces(spans: list[list[Any]], rm: _RefMap, taken: set[tuple[int, int]], grouped: set[str],
                      net: Network) -> int:
    """A piece of an op lgopt runs globally joins the group next to it when TPU-MLIR's reference groups it with
    that group's edge op: TPU-MLIR lowers the op into several ops and grouped that one with its neighbours (ViT's
    patch MatMul, the last piece of the Patchify convolution, in its first group on BM1684X; left out, it ran
    as a global layer and the re-exported grouping measured 0.2 % above TPU-MLIR's own).  Only a piece: an op
    that TPU-MLIR runs whole lgopt's plan has decided on.  And only into a group at the slice counts of the
    reference's: lgopt's plan did not slice the piece (ViT / BM1688's last Add + LayerNorm at six row slices
    took the class token's one-row Gather and failed to allocate)."""
    took = 0
    for sp in spans:
        si, g = sp[0], sp[3]
        secs = _secs(net, g)
        for step_, end in ((-1, 1), (1, 2)):
            group = rm.byidx[(si, sp[end])].ref_group
            i = sp[end] + step_
            if rm.byidx[(si, sp[end])].secs != secs:
                continue
            while group >= 0 and (si, i) in rm.byidx and (si, i) not in taken:
                owners = rm.covers.get((si, i), [])
                if rm.byidx[(si, i)].ref_group != group or not owners or any(o in grouped for o in owners) \
                        or any(len(rm.where.get(o, ())) < 2 for o in owners):
                    break
                taken.add((si, i))
                sp[end] = i
                took += 1
                i += step_
    return took


def _take_io_casts(spans: list[list[Any]], rm: _RefMap, taken: set[tuple[int, int]], net: Network) -> int:
    """The Cast of a network input or output joins the group that converts it itself (``GroupPlan.f32_in`` /
    ``f32_out``): the cast TPU-MLIR's lowering put just before the group's first op or just after its last,
    whatever the reference did with it."""
    took = 0
    for sp in spans:
        si, g = sp[0], sp[3]
        for step_, names in ((-1, set(g.f32_in)), (1, set(g.f32_out))):
            def converts(i: int, si: int = si, names: set[str] = names) -> bool:
                return bool(set(cast_operands(net, [rm.byidx[(si, i)].loc])) & names)

            if names:
                took += _extend_over_casts(sp, step_, rm, taken, converts)
    return took


def _with_reference(plan: Plan, net: Network, reference: str, base_groups: BaseGroups | None,
                    edge_casts: str) -> tuple[OrderedDict[str, Any], list[str], dict[str, Any]]:
    ref_ops, subs = _reference_ops(reference)
    map_cache(net, load_cache(reference))  # raises for a cache of another model / unknown names
    rm = _ref_map(net, ref_ops)
    group_of, single_notes = _plan_groups(plan, net)
    notes: list[str] = []
    groups: dict[int, list[tuple[int, OrderedDict[str, Any]]]] = {}
    taken: set[tuple[int, int]] = set()
    interior_casts = 0
    spans: list[list[Any]] = []
    singles: list[list[Any]] = []  # one-op groups: a group only with the casts TPU-MLIR grouped them with
    for k, g in enumerate(plan.groups):
        if len(g.ops) < 2:
            pos = sorted({p for o in g.ops for p in rm.where.get(o, ())})
            if edge_casts == "reference" and len(pos) == 1:
                singles.append([pos[0][0], pos[0][1], pos[0][1], g])
            continue
        found = _group_span(k, g, rm, group_of, subs, base_groups, notes)
        if found is None:
            continue
        si, lo, hi = found
        interior_casts += sum(1 for i in range(lo, hi + 1) if (si, i) in rm.casts)
        spans.append([si, lo, hi, g])
        taken.update((si, i) for i in range(lo, hi + 1))
    edge = _take_io_casts(spans, rm, taken, net)
    pieces = 0
    if edge_casts == "reference":
        edge += _take_edge_casts(spans, rm, taken, net)
        pieces = _take_edge_pieces(spans, rm, taken, {o for g in plan.groups for o in g.ops}, net)
        for sp in singles:  # TPU-MLIR's [input cast, conv] stem group is one lgopt op with its cast
            if (sp[0], sp[1]) in taken:
                continue
            before = edge
            taken.add((sp[0], sp[1]))
            edge += _take_edge_casts([sp], rm, taken)
            if edge > before:
                spans.append(sp)
                single_notes.pop(plan.groups.index(sp[3]), None)
            else:
                taken.discard((sp[0], sp[1]))
        spans.sort(key=lambda sp: (sp[0], sp[1]))
    elif edge_casts == "global":
        edge += _take_edge_casts(_as_in_reference(spans, rm, net), rm, taken, net)
    else:
        raise LgoptError(f"edge_casts must be 'reference' or 'global', not {edge_casts!r}")
    byidx = rm.byidx
    made: list[tuple[int, OrderedDict[str, Any], int]] = []
    number = {id(g): k for k, g in enumerate(plan.groups)}
    for si, lo, hi, g in spans:
        span = [byidx[(si, i)] for i in range(lo, hi + 1)]
        base = span[0].base
        if base_groups is not None:
            base = next(i for i, (a, b) in enumerate(base_groups[subs[si]]) if a <= lo and hi <= b)
        e = _entry(lo, [r.loc for r in span], list(_secs(net, g)), base)
        groups.setdefault(si, []).append((lo, e))
        made.append((si, e, number[id(g)]))
    globs = {si: [(r.idx, r.loc) for r in ops if (si, r.idx) not in taken] for si, ops in ref_ops.items()}
    if any(g.kept_in or g.kept_out for g in plan.groups):
        notes.append("the plan hands tensors over in LMEM between groups; TPU-MLIR stores and reloads them")
    info = {"reference": str(reference), "interior_casts": interior_casts, "edge_casts": edge,
            "edge_pieces": pieces,
            "edge_cast_rule": edge_casts,
            "base_groups": "given" if base_groups is not None else "from the reference (its global ops refused)"}
    cache = _assemble(subs, groups, globs)
    # which of the plan's groups each entry is, by its load index: the i of TPU-MLIR's "local memory allocate
    # failed for group i" (lgopt.tpumlir.judged repairs that group)
    entries: dict[str, dict[str, int]] = {subs[si]: {} for si, _, _ in made}
    for si, e, k in made:
        entries[subs[si]][str(e["index"])] = k
    info["plan_group_of_entry"] = entries
    return cache, [*single_notes.values(), *notes], info


# --- without a reference -------------------------------------------------------------------------------

def _onnx_types(path: str | Path | None) -> dict[str, str]:
    """ONNX output tensor -> type of the node producing it."""
    if path is None or Path(path).suffix != ".onnx":
        return {}
    try:
        import onnx

        m = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - any unreadable file is bad input
        raise LgoptError(f"{path}: cannot read the ONNX model ({type(e).__name__})") from None
    return {t: n.op_type for n in m.graph.node for t in n.output}


def tpumlir_name(net: Network, op: str, types: Mapping[str, str] | None = None) -> str:
    """TPU-MLIR's usual name of an lgopt op: ``<output tensor>_<ONNX type of the node producing it>``."""
    o = net.op(op)
    t = o.outputs[0]
    typ = (types or {}).get(t)
    if typ is None:
        typ = o.fused[-1] if o.fused else {"SiLU": "Mul"}.get(o.type, o.type)
    return f"{t}_{typ}"


def _without_reference(plan: Plan, net: Network, onnx_model: str | Path | None
                       ) -> tuple[OrderedDict[str, Any], list[str], dict[str, Any]]:
    types = _onnx_types(onnx_model)
    group_of, single_notes = _plan_groups(plan, net)
    notes = list(single_notes.values())
    order: list[str] = []
    for kind, v in plan.steps:
        order += sorted(plan.groups[v].ops, key=net.op_index.__getitem__) if kind == "group" else [v]
    missing = [op.name for op in net.ops if op.name not in set(order)]
    order += missing
    idx = {o: i for i, o in enumerate(order)}
    names = {o: tpumlir_name(net, o, types) for o in order}
    groups: list[tuple[int, OrderedDict[str, Any]]] = []
    taken: set[str] = set()
    for k, g in enumerate(plan.groups):
        if len(g.ops) < 2:
            continue
        ops = sorted(g.ops, key=idx.__getitem__)
        if [idx[o] for o in ops] != list(range(idx[ops[0]], idx[ops[0]] + len(ops))):
            raise LgoptError(f"cannot export plan group {k}: not contiguous in the plan's own step order")
        glob = [o for o in ops if not net.op(o).local]
        if glob:
            raise LgoptError(f"cannot export plan group {k}: {glob[0]} ({net.op(glob[0]).type}) runs only as a "
                             "global layer")
        secs = write_secs(net, ops, g.n_slices, g.h_slices, g.w_slices, g.c_slices)
        groups.append((idx[ops[0]], _entry(idx[ops[0]], [names[o] for o in ops], secs, -1)))
        taken.update(ops)
    globs = [(idx[o], names[o]) for o in order if o not in taken]
    warnings = [
        "no reference cache: op names derived from the model as <output tensor>_<ONNX op type> "
        + ("(types read from the ONNX file)" if types else "(types guessed from lgopt's op types)")
        + "; the loader silently drops names it does not know, check them against the pass's op list "
          "(score_grouping.sh's ops.json, or debugger=2's layer_group_idx.txt)",
        "no casts: F16/BF16 lowering inserts casts (<producer><consumer>_f16/_f32, e.g. at the input, around "
        "SiLU and GlobalAveragePool); a group with one between its ops is not contiguous for the loader",
        "op order is lgopt's; TPU-MLIR reorders ops before LayerGroup (--op-reorder, --topo-sort) and its "
        "func_idx numbering counts casts, so func_start_idx/func_end_idx here are lgopt's",
        "fusion may differ: TPU-MLIR folds some ops lgopt keeps (1x1 conv pairs, LayerNorm chains) and splits "
        "others; a folded op's name does not exist",
        "base groups unknown: a group with an op TPU-MLIR cannot run in LMEM crashes the compiler",
        "no func.return entry; subfunc_0 only (a model TPU-MLIR splits into subfunctions needs the others)",
    ]
    if missing:
        warnings.append(f"{len(missing)} ops are in no step of the plan: listed as global layers")
    converted = [t for g in plan.groups for t in g.f32_in + g.f32_out]
    if converted:
        warnings.append(f"the plan converts {', '.join(converted)} between f32 and its dtype inside groups; "
                        "without a reference the Casts are not named, so TPU-MLIR runs them as global layers")
    return _assemble(["subfunc_0"], {0: groups}, {0: globs}), notes + warnings, {"reference": None}


# --- the entry point -----------------------------------------------------------------------------------

R = TypeVar("R")
EDGE_CAST_RULES = ("reference", "global")  # the reference's edge casts join a group, or run as global layers


def edge_cast_order(plan: Plan) -> tuple[str, ...]:
    """The edge-cast rules to export ``plan`` with, the plan's own first (the judge's choice, else
    ``"reference"``).  A grouping TPU-MLIR's allocator refuses under one may compile under the other: lgopt's
    search's unet_small on BM1690 INT8, 8 cores, was refused with the reference's edge casts ("local memory
    allocate failed") and measured 0.70 of opt2 with them global, so ``lgopt deploy`` and the judge try both.

    >>> from dataclasses import replace
    >>> from lgopt.model.plan import Plan
    >>> plan = Plan(model="m", model_digest="", chip={}, strategy="s", steps=(), groups=())
    >>> edge_cast_order(plan), edge_cast_order(replace(plan, solver={"edge_casts": "global"}))
    (('reference', 'global'), ('global', 'reference'))
    """
    first = str(plan.solver.get("edge_casts") or EDGE_CAST_RULES[0])
    return (first,) + tuple(r for r in EDGE_CAST_RULES if r != first)


def compile_edge_casts(plan: Plan, export: Callable[[str], dict[str, Any]],
                       compile_: Callable[[dict[str, Any], str], R],
                       refused: Callable[[R], bool]) -> tuple[str, dict[str, Any], R]:
    """``plan`` exported (``export(rule)``) and compiled (``compile_(cache, rule)``) under its own edge-cast rule,
    then under the other only where ``refused`` says TPU-MLIR refused it and the other rule writes another cache
    (:func:`edge_cast_order`): (the rule of the last compile, its cache, what that compile gave).  The one loop of
    ``lgopt deploy``, the judge and the benchmarks' round trips; an export's LgoptError reaches the caller.

    >>> from lgopt.model.plan import Plan
    >>> plan = Plan(model="m", model_digest="", chip={}, strategy="s", steps=(), groups=())
    >>> compile_edge_casts(plan, lambda r: {"casts": r}, lambda c, r: r == "global", lambda ok: not ok)
    ('global', {'casts': 'global'}, True)
    """
    from lgopt.tpumlir.judge import cache_digest

    rules = edge_cast_order(plan)
    rule, cache = rules[0], export(rules[0])
    got = compile_(cache, rule)
    for other in rules[1:]:
        if not refused(got):
            break
        again = export(other)
        if cache_digest(again) == cache_digest(cache):
            break  # no edge cast to move: the same grouping
        rule, cache, got = other, again, compile_(again, other)
    return rule, cache, got


def export_tpumlir(plan: Plan, net: Network, reference: str | Path | None = None, *,
                   base_groups: BaseGroups | str | Path | None = None,
                   onnx_model: str | Path | None = None, edge_casts: str | None = None,
                   groups_only: bool = False) -> dict[str, Any]:
    """The layer-group cache TPU-MLIR 1.30.2 loads for ``plan`` (see the module doc); raises LgoptError
    for a plan the compiler would refuse.  ``result["lgopt"]["warnings"]`` lists what may not match.

    A plan whose schedule goes beyond what the cache can say (``plan.solver["beyond_compiler"]``: weight
    load rows lgopt chose, tensors handed over in LMEM) is refused: TPU-MLIR would compile its groups with a
    schedule of its own, not the plan.  ``groups_only`` exports its groups and slice counts anyway, and says so.
    ``net`` may be the model the plan was solved for: a plan built on it as TPU-MLIR lowered it is exported
    against that lowering (:func:`lgopt.tpumlir.lowering.network_of`).
    """
    if plan.model_digest and plan.model_digest != network_digest(net):
        net = network_of(net, plan)
    if edge_casts is None:
        # a cast at a group's edge joins the group where TPU-MLIR's reference has it there.  Run as a global
        # layer instead it moves its tensor through GMEM twice, which no lgopt plan charges: yolov5s_like /
        # BM1688's plan at a 1 % margin left 17 of them global, 2.7 M cycles (24.7 M measured, 21.8 M predicted).
        # The Casts of the network's inputs and outputs go with the groups that convert them (f32_in, f32_out:
        # a group taking in the f32 input's Cast unbudgeted overflows LMEM: resnet18, mobilenet_v2, resnet50 on
        # BM1688), and the compiler space budgets the f32 copies of a new group (settings.with_f32_copies).
        edge_casts = str(plan.solver.get("edge_casts") or "reference")  # or the judge's choice
    beyond = list(plan.solver.get("beyond_compiler", []))
    if beyond and not groups_only:
        raise LgoptError(f"the plan goes beyond what TPU-MLIR's cache can say ({beyond[0]}"
                         f"{f'; +{len(beyond) - 1} more' if len(beyond) > 1 else ''}): solve with --reference for a "
                         "plan TPU-MLIR compiles as planned, or export its groups alone with --groups-only")
    if isinstance(base_groups, (str, Path)):
        base_groups = read_base_groups(base_groups)
    if reference is not None and plan.solver.get("reference_verbatim"):
        return _verbatim(plan, str(reference))
    if reference is not None:
        cache, notes, info = _with_reference(plan, net, str(reference), base_groups, edge_casts)
    else:
        cache, notes, info = _without_reference(plan, net, onnx_model)
    meta: OrderedDict[str, Any] = OrderedDict([("model", plan.model), ("strategy", plan.strategy)])
    meta.update(info)
    meta["groups"] = sum(len(v["GroupLayer"]) for k, v in cache.items() if k.startswith("subfunc_"))
    meta["warnings"] = notes + [f"groups only: {b}; TPU-MLIR schedules the group itself" for b in beyond]
    cache["lgopt"] = meta
    return dict(cache)


def _verbatim(plan: Plan, reference: str) -> dict[str, Any]:
    """The reference cache as TPU-MLIR wrote it, for a plan that kept it without lgopt being able to build it
    (``solver["reference_verbatim"]``: lgopt's search found its own grouping, but could not compare the two)."""
    cache = json.loads(Path(reference).read_text(), object_pairs_hook=OrderedDict)
    cache.pop("lgopt", None)
    cache["lgopt"] = OrderedDict([("model", plan.model), ("strategy", plan.strategy), ("reference", reference),
                                  ("verbatim", str(plan.solver.get("kept_reference", ""))), ("warnings", [])])
    return dict(cache)


# --- the space TPU-MLIR can compile ----------------------------------------------------------------------

@dataclass(frozen=True)
class CompilerSpace:
    """What TPU-MLIR 1.30.2 accepts as a grouping of this network, from a cache it wrote for it: its op order
    (as lgopt ops) and the runs of ops a group must stay within (its base groups), each in that order."""

    reference: str
    order: tuple[str, ...]
    runs: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...]


def compiler_space(net: Network, reference: str | Path, base_groups: BaseGroups | str | Path | None = None
                   ) -> CompilerSpace:
    """Groups contiguous in TPU-MLIR's op order inside one of its base groups export and load.

    Without ``base_groups`` the reference's own groups stand in for them: an op the reference runs globally is
    in no run (TPU-MLIR may have left it out for a reason lgopt cannot see).  An lgopt op TPU-MLIR runs as
    several ops in different base groups, or folds away, is in no run either.
    """
    if isinstance(base_groups, (str, Path)):
        base_groups = read_base_groups(base_groups)
    ref_ops, subs = _reference_ops(str(reference))
    cmap = map_cache(net, load_cache(str(reference)))  # raises for a cache of another model / unknown names
    rm = _ref_map(net, ref_ops)

    def base_of(si: int, idx: int) -> int | None:
        if base_groups is not None:
            return next((k for k, (a, b) in enumerate(base_groups.get(subs[si], ())) if a <= idx <= b), None)
        b = rm.byidx[(si, idx)].base
        return b if rm.byidx[(si, idx)].ref_group >= 0 and b >= 0 else None

    notes: list[str] = []
    runs: list[list[str]] = []
    last: tuple[int, int | None] | None = None
    for name in cmap.order:
        places = {(si, base_of(si, idx)) for si, idx in rm.where.get(name, ())}
        key = next(iter(places)) if len(places) == 1 else None
        if key is None or key[1] is None:
            if len(places) > 1:
                notes.append(f"{name}: TPU-MLIR runs it as ops in different base groups; it stays global")
            last = None
            continue
        if key != last:
            runs.append([])
        runs[-1].append(name)
        last = key
    return CompilerSpace(str(reference), cmap.order, tuple(tuple(r) for r in runs), tuple(notes))

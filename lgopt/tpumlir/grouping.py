"""TPU-MLIR's own grouping as a strategy: its cache, read and mapped by :mod:`lgopt.tpumlir.cache`,
built exactly (same groups, same slice counts) with lgopt's slicing, timesteps, allocator and cost model.

Nothing is adjusted to make it fit.  The slicing rule is the compiler's (``h_ratio=None``: no h/2
limit, slices need not advance, :mod:`lgopt.group.slicing`), whatever ``--h-ratio`` says, since it is
the compiler's grouping being rebuilt; LMEM allocation is judged thoroughly (greedy orders, then the exact
packer).  A group lgopt cannot build (an op it only runs as a global layer, C or D slices, LMEM
allocation) makes the whole grouping infeasible: :class:`GroupingInfeasible` names the group and the
reason.  A group whose cache says ``[0, 0, 0, 0, 0]`` ("compiler picks") gets its slice counts the way
TPU-MLIR's quick search picks them: N up to its maximum first, then H, the first that fits
(``info["searched"]`` says so).  The compiler's own reading of a cache is followed where lgopt's differs:
W slices are built like H slices (:mod:`lgopt.group.slicing`); ``hsecs``/``wsecs`` beyond a group output's
rows or columns run only the non-empty sections (:func:`compiled_sections`, ``info["sections"]``); a group
holding the network input's cast budgets the f32 input slice it loads (:func:`_f32_copies`).

``exact=False`` is a documented relaxation for reports: ops lgopt can only run as global layers, at
the start or end of a TPU-MLIR group, are run as global layers next to it, and an op TPU-MLIR splits
over several steps is placed where its last piece runs; each such change is listed in
``info["adjusted"]``.  Slice counts are never changed.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, replace
from typing import Any, Sequence

from lgopt.errors import LgoptError
from lgopt.group.build import assemble, n_unit, try_group
from lgopt.group.slicing import group_io
from lgopt.group.totals import finish, with_cost
from lgopt.hw.chip import Chip
from lgopt.model import ops as opsem
from lgopt.model.dtype import is_integer
from lgopt.model.network import Network, Tensor, reorder
from lgopt.model.plan import GroupPlan, Plan
from lgopt.strategies.settings import SearchSettings
from lgopt.tpumlir.cache import (
    CacheMap,
    anchor,
    cast_operands,
    check_secs,
    is_cast,
    load_cache,
    map_cache,
    read_secs,
    rows_as_channels_group,
    rows_on_lanes_group,
    tensor_aliases,
)
from lgopt.tpumlir.forks import forced_fork
from lgopt.tpumlir.lowering import lower_like
from lgopt.tpumlir.smallc import cuts_columns, small_c_group

COMPILER_H_RATIO = None  # TPU-MLIR 1.30.2 applies no h/2 limit (lgopt.group.slicing)


class GroupingInfeasible(LgoptError):
    """TPU-MLIR's grouping cannot be built under lgopt's rules: ``group_index`` (position in the cache,
    -1 for the grouping as a whole) and ``reason``."""

    def __init__(self, group_index: int, reason: str) -> None:
        self.group_index = group_index
        self.reason = reason
        super().__init__(f"TPU-MLIR's grouping is infeasible under lgopt's rules: group {group_index}: {reason}")


@dataclass(frozen=True)
class GroupResult:
    index: int  # position in the cache
    ops: tuple[str, ...]  # lgopt ops built (network order)
    secs: tuple[int, ...]  # as the cache gives them
    n_slices: int = 0
    h_slices: int = 0
    w_slices: int = 1
    searched: bool = False
    plan: GroupPlan | None = None  # placed and costed
    reason: str = ""  # why not, when plan is None and ops is not empty (or refused)
    adjusted: tuple[str, ...] = ()
    peeled: tuple[str, ...] = ()  # ops run as global layers next to the group (exact=False only)
    read_as: str = ""  # how slice counts were read when not literally (lgopt.tpumlir.cache.read_secs)
    refused: bool = False  # a group of casts only that TPU-MLIR does not compile at its slice counts


@dataclass(frozen=True)
class Reading:
    cmap: CacheMap
    groups: tuple[GroupResult, ...]
    net: Network  # what the groups are built on: the model, lowered like the cache where it splits ops
    lowered: tuple[str, ...] = ()  # the ops split so (lgopt.tpumlir.lowering)

    @property
    def infeasible(self) -> list[GroupResult]:
        return [g for g in self.groups if g.plan is None and (g.ops or g.refused)]


def _peel(net: Network, ops: list[str]) -> tuple[list[str], list[str]]:
    """Take non-local ops off the edges of a group (sources or sinks inside it) while possible."""
    ops, peeled = list(ops), []
    changed = True
    while changed:
        changed = False
        members = set(ops)
        for o in list(ops):
            op = net.op(o)
            if op.local:
                continue
            ins = any(net.producer[t].name in members for t in op.inputs if t in net.producer)
            outs = any(c.name in members for t in op.outputs for c in net.consumers.get(t, ()))
            if not ins or not outs:
                ops.remove(o)
                peeled.append(o)
                changed = True
    return ops, peeled


def _search(net: Network, chip: Chip, ops: tuple[str, ...], st: SearchSettings, f32: tuple[str, ...] = ()
            ) -> tuple[GroupPlan | None, int, int, str]:
    """TPU-MLIR's quick search in lgopt's terms: N first to its maximum, then H; the first that fits."""
    batch = min(net.tensor(t).n for o in ops for t in net.op(o).outputs)
    n_max = max(1, batch // n_unit(net, chip, ops))
    h_max = min(st.max_h_slices, min(net.tensor(t).h for o in ops for t in net.op(o).outputs))
    why = ""
    n = 1
    for n in range(1, n_max + 1):
        gp, why = try_group(net, chip, ops, n, 1, COMPILER_H_RATIO, st.bank_rule, thorough=True, f32_copies=f32)
        if gp is not None:
            return gp, n, 1, ""
    for h in range(2, h_max + 1):
        gp, why = try_group(net, chip, ops, n, h, COMPILER_H_RATIO, st.bank_rule, thorough=True, f32_copies=f32)
        if gp is not None:
            return gp, n, h, ""
    return None, n, h_max, f"no slice counts fit (searched N 1..{n_max}, then H 2..{h_max}; last: {why})"


def _f32_copies(net: Network, ops: tuple[str, ...], locs: tuple[str, ...]) -> tuple[str, ...]:
    """Network inputs a cache group loads as f32 and casts to f16 itself (``input<consumer>_f16`` among its
    ops): TPU-MLIR's graph input is f32, so such a group holds the f32 slice beside the f16 one, and the
    extra bytes decide whether it fits (pulling the input cast into resnet18's, resnet50's, mobilenet_v2's
    and mnasnet's first group fails to allocate in TPU-MLIR).  Interior casts (ops it computes in f32:
    yolov5s's SiLU, mnasnet's mean) are left out: each is a row of its own in TPU-MLIR's table, which lgopt's
    table has no place for; budgeting their f32 copies over the tensors' lifetimes refuses 43 groupings the
    compiler allocated, and as scratch of the f32 op 15, while catching none it refused
    (``benchmarks/calibration/README.md``)."""
    touched = {t for o in ops for t in net.op(o).inputs}
    return tuple(t for t in cast_operands(net, locs) if t in net.inputs and t in touched
                 and net.tensor(t).dtype != "f32")


def _f32_outputs(net: Network, g: GroupPlan, locs: tuple[str, ...]) -> tuple[str, ...]:
    """Network outputs a cache group casts to f32 itself before storing them (their store moves f32 bytes).
    Their f32 copy is not budgeted in LMEM: TPU-MLIR's cast is a row of its own, after which the f16 result
    is dead, where lgopt's one buffer per tensor would hold both for the whole lifetime (unet_small's last
    group on BM1684X, which compiles, would need 278,080 of 262,144 bytes)."""
    stored = set(g.stores)
    return tuple(t for t in cast_operands(net, locs) if t in net.outputs and t in stored
                 and net.tensor(t).dtype != "f32")


def _build_fixed(net: Network, chip: Chip, ops: tuple[str, ...], secs: tuple[int, ...], st: SearchSettings,
                 f32: tuple[str, ...], small_c: bool = False
                 ) -> tuple[GroupPlan | None, tuple[int, int, int], str, str]:
    """A group at the slice counts the cache forces: (plan or None, lgopt's n/h/w, why not, how the counts
    were read when not literally).  ``small_c``: TPU-MLIR types the group ``GROUP_SMALL_C``
    (:func:`lgopt.tpumlir.smallc.small_c_group`).

    Such a group of channels-last tensors holds its rows over N and C and its columns in H (ConvNeXt's
    ``[1, 56, 56, 96]``: ``n_slice = 49, c_slice = 64, h_slice = 96``), so its ``hsecs`` cut the columns,
    a LayerNorm's and a MatMul's included (F16 on BM1684X: ``h_slice = [48, 48]`` on both, and it compiles).
    In INT8 (the LayerNorm in f16 between two casts) TPU-MLIR refused all 15 such scorings, and lgopt reads
    them as the column cuts they are, which a LayerNorm refuses, and so in F16 on BM1688
    (:func:`lgopt.tpumlir.smallc.cuts_columns`); in F16 elsewhere it reads them as row slices, the LMEM of the same
    cut, since a LayerNorm cut across its columns is not a computation lgopt can build."""
    n, c, d, h, w = secs
    columns = ""
    if (c > 1 or h > 1) and w == 1 and rows_as_channels_group(net, ops):  # rows in csecs, columns in hsecs
        n, c, h, w = n, 1, c, h
    elif small_c and h > 1 and w == 1 and rows_on_lanes_group(net, ops) and cuts_columns(chip, _integer(net, ops)):
        h, w = 1, h
        columns = f"hsecs={w} cuts the columns of a small-C group of channels-last tensors"
    if d > 1:
        return None, (n, h, w), f"shape_secs {list(secs)}: lgopt slices N, C, H and W, not D", ""
    mixer = next(((o, why) for o in ops if (why := opsem.channel_reason(net, net.op(o)))), None) if c > 1 else None
    if mixer is not None:
        return None, (n, h, w), f"shape_secs {list(secs)}: csecs={c} but {mixer[0]} {mixer[1]}", ""
    (n, h, w), note = read_secs(net, ops, n, h, w)
    note = "; ".join(x for x in (columns, note) if x)
    batch = min(net.tensor(t).n for o in ops for t in net.op(o).outputs)
    if n > batch:
        return None, (n, h, w), (f"shape_secs {list(secs)}: nsecs={n} but lgopt's N of this group is {batch} "
                                 "(TPU-MLIR slices a dimension lgopt folds elsewhere)"), ""
    asked = (h, w)
    (h, w), why = compiled_sections(net, ops, h, w)
    outs = tuple(net.tensor(t) for o in ops for t in net.op(o).outputs)
    if not why and (h, w) != asked:
        if not _drops_empty_sections(chip, outs):
            why = _EMPTY_SECTIONS.format(h=asked[0], w=asked[1])
        elif chip.used_cores > 1 and not any(net.op(o).weights for o in ops):
            why = _EMPTY_UNWEIGHTED.format(h=asked[0], w=asked[1], cores=chip.used_cores)
    if not why:
        why = forced_fork(chip, net, ops, h)
    gp = None
    if not why:
        gp, why = try_group(net, chip, ops, n, h, COMPILER_H_RATIO, st.bank_rule, thorough=True, w_slices=w,
                            f32_copies=f32, reload_columns=False, c_slices=c,  # TPU-MLIR holds weights whole
                            inplace=True, sections=n * c * asked[0] * asked[1])  # its allocator's sections
    if gp is None:
        why = f"secs n={n} h={h}{f' w={w}' if w > 1 else ''}: {why}"
    return gp, (n, h, w), why, note


def _integer(net: Network, ops: Sequence[str]) -> bool:
    """Whether the group computes in an integer type (INT8's lowering, its float ops between casts)."""
    return any(is_integer(net.tensor(t).dtype) for o in ops for t in net.op(o).outputs)


_EMPTY_SECTIONS = ("hsecs={h}, wsecs={w} exceed a group output's rows or columns: TPU-MLIR drops the empty "
                   "sections in F16, but in INT8 on one core its allocator refused all 13 such scorings measured "
                   "(benchmarks/results/settings.md)")


_EMPTY_UNWEIGHTED = ("hsecs={h}, wsecs={w} exceed a group output's rows or columns and the group holds no weight: "
                     "on {cores} cores TPU-MLIR's allocator refused every such group measured (5 of 5, a pool or "
                     "mean above a one-row output; benchmarks/results/settings.md, session 24)")


def _drops_empty_sections(chip: Chip, outs: Sequence[Tensor]) -> bool:
    """Whether TPU-MLIR compiles a group whose ``hsecs`` exceed an output's rows by dropping the empty sections
    (:func:`compiled_sections`).  In F16 on one core it does (mnasnet's tail group, the calibration data); in INT8
    on one core its allocator refused every such scoring ``benchmarks/settings.py`` compiled (13 of 13: 7 on
    BM1688, 6 on BM1684, where the group is the casts of the classifier's output).  On several cores it compiled
    some and refused others (BM1688 on 2 cores: 3 of 9 compiled; BM1690 INT8 on 8: 0 of 7): they are built, with
    the weights held as TPU-MLIR's allocator holds them for the sections asked (``sections`` of
    :func:`lgopt.group.timestep.holds_weights`), which refuses the long tail groups among them; a group that holds
    no weight TPU-MLIR refused every time (:data:`_EMPTY_UNWEIGHTED`: BM1688 F16 on 2 cores, MNASNet's mean,
    MobileNetV2's pool and flatten, ResNet-18's add, pool and flatten at ``hsecs = 2``; ResNet-18 INT8 on 2 cores,
    its add and pool, with and without the flatten, made in session 24, where its conv, add and pool compile)."""
    return chip.used_cores > 1 or not any(is_integer(t.dtype) for t in outs)


def _casts_sections(net: Network, chip: Chip, locs: Sequence[str], secs: tuple[int, ...]) -> str:
    """Why TPU-MLIR refuses a group of casts only (nothing for lgopt to build) at ``secs``, or "": the rule of
    :func:`_drops_empty_sections` on the tensors they convert (BM1684's INT8 classifier output cast to f32 at
    ``hsecs=2``, one row: its allocator refused all 6)."""
    tensors = [net.tensor(t) for t in cast_operands(net, locs)]
    h, w = secs[3], secs[4]
    empty = any(t.h < h or t.w < w for t in tensors)
    if not tensors or not empty or _drops_empty_sections(chip, tensors):
        return ""
    return _EMPTY_SECTIONS.format(h=h, w=w)


def compiled_sections(net: Network, ops: tuple[str, ...], h: int, w: int) -> tuple[tuple[int, int], str]:
    """The H and W slice counts TPU-MLIR really runs for ``hsecs``/``wsecs`` (and why none, when it cannot).

    It splits every group output into that many sections differing by at most one row (column) and drops the
    empty ones (reference s3.4), so an output of fewer rows than ``hsecs`` runs fewer slices: mnasnet's
    tail group ends in a mean over H and W, whose one-row output makes ``hsecs=2`` one slice (the timeline
    shows every op once, at full height).  Outputs that would run different numbers of slices are refused.
    N is not clamped: where lgopt's batch is smaller than ``nsecs``, TPU-MLIR's N is another dimension."""
    outs = [net.tensor(t) for t in group_io(net, ops).outputs]
    got = []
    for secs, dim in ((h, "H"), (w, "W")):
        sizes = {min(secs, t.h if dim == "H" else t.w) for t in outs}
        if len(sizes) > 1:
            return (h, w), (f"{dim.lower()}secs={secs} splits the group's outputs into different numbers of "
                            f"non-empty sections ({', '.join(map(str, sorted(sizes)))})")
        got.append(sizes.pop())
    return (got[0], got[1]), ""


def build_groups(net: Network, chip: Chip, cache_path: str, st: SearchSettings = SearchSettings(),
                 exact: bool = True) -> Reading:
    """Every cache group built as given (or reported infeasible), without assembling a plan.
    Raises LgoptError for a bad cache."""
    cache = load_cache(cache_path)
    lowered: tuple[str, ...] = ()
    if exact:  # the ops the cache cuts into column pieces run in different steps, cut the same way
        net, lowered = lower_like(net, cache, chip)
    cm = map_cache(net, cache)
    aliases = tensor_aliases(net)
    # each group's ops run in TPU-MLIR's order (its timestep table follows it: resnet50's downsample conv runs
    # before the block's first conv, which decides whether a bm1688 group packs); plans keep the given network
    onet = reorder(net, list(cm.order))
    out: list[GroupResult] = []
    for gi, g in enumerate(cache.groups):
        ops = list(cm.group_ops[gi])
        check_secs(net, chip, gi, g.secs, ops, cache.path)
        if not ops:
            refused = _casts_sections(net, chip, g.locs, g.secs)
            out.append(GroupResult(gi, (), g.secs, reason=refused or "only casts TPU-MLIR inserted: nothing to build",
                                   refused=bool(refused)))
            continue
        adjusted: list[str] = []
        peeled: list[str] = []
        reason = ""
        split = [o for o in ops if o in cm.split and len(set(cm.split[o])) > 1]
        if split:
            msg = (f"TPU-MLIR splits lgopt op {split[0]} ({net.op(split[0]).type}) into ops run in different "
                   f"steps ({', '.join('global' if s < 0 else f'group {s}' for s in sorted(set(cm.split[split[0]])))})"
                   f"; lgopt runs it whole")
            if exact:
                reason = msg
            else:
                adjusted += [f"group {gi}: {msg}; placed in group {gi} where its last piece runs"]
        glob = [o for o in ops if not net.op(o).local]
        if glob and not reason:
            if exact:
                op = net.op(glob[0])
                reason = (f"op {op.name} ({op.type}) can only be a global layer in lgopt ({op.reason})"
                          f"{f'; {len(glob) - 1} more such ops' if len(glob) > 1 else ''}")
            else:
                ops, peeled = _peel(net, ops)
                left = [o for o in ops if not net.op(o).local]
                if left:
                    op = net.op(left[0])
                    reason = (f"op {op.name} ({op.type}) can only be a global layer in lgopt ({op.reason}) and is "
                              "inside the group, not at its edge")
                else:
                    adjusted += [f"group {gi}: {o} ({net.op(o).type}) runs as a global layer next to the group: "
                                 f"{net.op(o).reason}" for o in peeled]
                    if not ops:
                        out.append(GroupResult(gi, (), g.secs, reason="only ops lgopt runs as global layers",
                                               adjusted=tuple(adjusted), peeled=tuple(peeled)))
                        continue
        permute = None if reason else next(iter(kept_permutes(net, g.locs, aliases)), None)
        if permute is not None:
            reason = (f"op {permute} (Transpose) is a permute TPU-MLIR names in the group: it runs permutes as global "
                      f"layers only (every one of the 35 scorings with such a group was refused)")
        tops = tuple(ops)
        if reason:
            out.append(GroupResult(gi, tops, g.secs, reason=reason, adjusted=tuple(adjusted), peeled=tuple(peeled)))
            continue
        f32 = _f32_copies(net, tops, g.locs)
        note = ""
        run = tuple(sorted(tops, key=onet.op_index.__getitem__))
        if not any(g.secs):
            gp, n, h, why = _search(onet, chip, run, st, f32)
            w, searched = 1, True
        else:
            small_c = small_c_group(onet, [onet.op(o) for o in run], len(g.locs), chip)
            gp, (n, h, w), why, note = _build_fixed(onet, chip, run, g.secs, st, f32, small_c)
            searched = False
        if gp is not None:
            outs = _f32_outputs(net, gp, g.locs)
            gp = with_cost(chip, net, replace(gp, f32_out=outs) if outs else gp)
        out.append(GroupResult(gi, tops, g.secs, n, h, max(1, w), searched, gp,
                               why, tuple(adjusted), tuple(peeled), f"group {gi}: {note}" if note else ""))
    return Reading(cm, tuple(out), net, lowered)


def kept_permutes(net: Network, locs: Sequence[str], aliases: dict[str, str] | None = None) -> tuple[str, ...]:
    """The lgopt Transposes a cache group names ops after (not a cast or a permute TPU-MLIR moved): permutes it
    kept as ops of their own.  TPU-MLIR 1.30 runs those as global layers only (its PermuteOp has no local
    codegen on these chips): none of the 495 F16 caches of the calibration data puts one in a group, and all 35
    INT8 and several-core scorings of variants merging groups over one failed (ConvNeXt, ViT-B, ShuffleNet).  A
    Transpose its canonicalisation folds into a MatMul (ViT-Tiny's heads, ``hdim_is_batch``) names no op and
    may sit in a group whole (:func:`lgopt.tpumlir.attention.hold_moves`): a timm-style two-block ViT's own opt2
    cache on BM1684X (F16) is one group of 43 ops naming no permute, its one ``tpu.Permute`` (the patch
    embedding's) global.

    >>> from lgopt.model.network import Network, Op, Tensor
    >>> t = {"x": Tensor("x", (1, 8, 4, 4), "f16"), "y": Tensor("y", (1, 4, 8, 4), "f16")}
    >>> net = Network("n", t, (Op("p", "Transpose", ("x",), ("y",), attrs={"perm": (0, 2, 1, 3)}),), ("x",), ("y",))
    >>> kept_permutes(net, ["y_Transpose", "y_Transpose_f16"])
    ('p',)
    """
    aliases = tensor_aliases(net) if aliases is None else aliases  # a reader's, made once for every group
    named = (anchor(loc, aliases) for loc in locs if not is_cast(loc))
    return tuple(dict.fromkeys(o for o in named if o is not None and net.op(o).type == "Transpose"))


def _steps(net: Network, cm: CacheMap, built: list[tuple[int, GroupPlan]]) -> tuple[tuple[str, Any], ...]:
    """Groups and global layers in TPU-MLIR's order (a topological order of the steps)."""
    pos = {o: i for i, o in enumerate(cm.order)}
    step_of: dict[str, int] = {}
    members: list[tuple[str, Any, tuple[str, ...]]] = []
    for k, (_, gp) in enumerate(built):
        for o in gp.ops:
            step_of[o] = len(members)
        members.append(("group", k, gp.ops))
    for o in cm.order:
        if o not in step_of:
            step_of[o] = len(members)
            members.append(("global", o, (o,)))
    preds: list[set[int]] = [set() for _ in members]
    for s, (_, _, ops) in enumerate(members):
        for o in ops:
            for t in net.op(o).inputs:
                prod = net.producer.get(t)
                if prod is not None and step_of[prod.name] != s:
                    preds[s].add(step_of[prod.name])
    succs: list[list[int]] = [[] for _ in members]
    for s, ps in enumerate(preds):
        for p in ps:
            succs[p].append(s)
    missing = [len(ps) for ps in preds]
    key = [min(pos[o] for o in ops) for _, _, ops in members]
    heap = [(key[s], s) for s in range(len(members)) if missing[s] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, s = heapq.heappop(heap)
        order.append(s)
        for m in succs[s]:
            missing[m] -= 1
            if missing[m] == 0:
                heapq.heappush(heap, (key[m], m))
    if len(order) != len(members):
        stuck = [s for s in range(len(members)) if missing[s] > 0 and members[s][0] == "group"]
        gi = built[members[stuck[0]][1]][0] if stuck else -1
        raise GroupingInfeasible(gi, "not contiguous in lgopt's graph: a path leaves the group and comes back "
                                     "(TPU-MLIR's op fusion differs from lgopt's here)")
    return tuple((members[s][0], members[s][1]) for s in order)


def score(net: Network, chip: Chip, cache_path: str, st: SearchSettings = SearchSettings(), *,
          exact: bool = True) -> tuple[Plan, dict[str, Any]]:
    """TPU-MLIR's grouping as an lgopt plan, built exactly; raises :class:`GroupingInfeasible` when a
    group cannot be built under lgopt's rules and LgoptError for a bad cache."""
    r = build_groups(net, chip, cache_path, st, exact)
    bad = r.infeasible
    if bad:
        raise GroupingInfeasible(bad[0].index, bad[0].reason)
    net = r.net
    built = [(g.index, g.plan) for g in r.groups if g.plan is not None]
    plan = assemble(net, chip, [gp for _, gp in built], "tpu-mlir", h_ratio=COMPILER_H_RATIO, bank_rule=st.bank_rule,
                    status="scored")
    plan = replace(plan, steps=_steps(net, r.cmap, built))
    plan = finish(chip, net, plan)
    cm = r.cmap
    info = {
        "cache": str(cache_path), "status": "loaded", "exact": exact,
        "groups_in_cache": len(cm.cache.groups), "groups_scored": len(built),
        "group_plan_index": [next((k for k, (gi, _) in enumerate(built) if gi == g.index), None) for g in r.groups],
        "ops_mapped": sum(len(g.ops) for g in r.groups),
        "unmapped": list(cm.unmapped), "casts_skipped": cm.casts,
        "searched": [f"group {g.index}: cache says [0,0,0,0,0]; picked n={g.n_slices} h={g.h_slices} the way "
                     "TPU-MLIR's quick search does (N first, then H; first that fits)" for g in r.groups if g.searched],
        "adjusted": [a for g in r.groups for a in g.adjusted],
        "sections": [f"group {g.index}: shape_secs {list(g.secs)} run as h={g.h_slices} w={g.w_slices}: TPU-MLIR drops "
                     "the empty sections of outputs with fewer rows or columns" for g in r.groups
                     if g.plan is not None and not g.searched and not g.read_as
                     and (g.h_slices, g.w_slices) != (g.secs[3], g.secs[4])],
        "read_as": [g.read_as for g in r.groups if g.read_as],
        "dropped": [f"group {g.index}: {g.reason}" for g in r.groups if not g.ops and g.reason and not g.refused],
        "fused": list(cm.fused), "split": {k: list(v) for k, v in cm.split.items()},
        "notes": list(cm.notes),
        "lowered": list(r.lowered),
    }
    return replace(plan, solver={**plan.solver, "tpu_mlir": info}), info

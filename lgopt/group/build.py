"""Decisions -> plan: slice a group, lay out its timesteps, place its buffers.

Every strategy (greedy, CP-SAT, a compiler's cached grouping) decides *which*
ops form groups and with how many slices; this module turns such decisions
into a :class:`~lgopt.model.plan.Plan` the same way for all of them, so strategies
are compared on equal terms.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping, Sequence

from lgopt.cost.pipeline import group_cost
from lgopt.group.alloc import (
    Allocation,
    count_bank_conflicts,
    exact_pack,
    greedy_allocate,
    multi_start_allocate,
    polish_banks,
)
from lgopt.group.handover import kept_buffers, pin_below, pin_kept, without_kept
from lgopt.group.inplace import inplace_pairs, merged, unmerged
from lgopt.group.slicing import DEFAULT_H_RATIO, SliceError, group_io, slice_group
from lgopt.group.timestep import schedule_group
from lgopt.hw.chip import Chip
from lgopt.hw.layout import align_up, cdiv, n_packing
from lgopt.hw.sizing import column_weights
from lgopt.model.network import Network, network_digest
from lgopt.model.plan import BankRule, GroupPlan, Plan, PlanStatus


def n_unit(net: Network, chip: Chip, ops: Sequence[str]) -> int:
    """Smallest N slice: one batch, or a whole 4N/2N word on chips that pack batches."""
    dts = {net.tensor(t).dtype for o in ops for t in net.op(o).inputs + net.op(o).outputs}
    return max((n_packing(dt, chip.align_4n) for dt in dts), default=1)


COLUMN_LANE_MULTIPLES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
FEW_W_SLICES = (2, 3, 4, 6, 8)  # also tried: a narrow output (fewer columns than two lane runs) still splits


def w_slice_options(net: Network, chip: Chip, ops: Sequence[str], max_w: int) -> list[int]:
    """W slice counts worth trying for a group (column slicing, issue 16), fewest first: when one of its ops is
    a MatMul whose weight can be reloaded by columns, the counts that cut the widest such output
    into runs of whole lane multiples (64, 128, 192, ... columns on a 64-lane chip: the weight's N lies over
    the lanes, so a run of 100 columns costs the LMEM of 128), and 2 to 8; at most ``max_w`` and the narrowest
    group output.

    Also for a group of rank-3 (rows-on-lanes) tensors alone, the elementwise ops between such MatMuls: their
    rows already lie one per lane at 64 tokens, so H slices stop shrinking them and only columns can.  Not for
    NCHW groups: there N and H slices are what the compilers use (the reader of TPU-MLIR's caches still
    builds W-sliced ones when the compiler chose them).
    """
    widths = [net.tensor(net.op(o).outputs[0]).w for o in ops if column_weights(net.op(o))]
    tensors = {t for o in ops for t in net.op(o).inputs + net.op(o).outputs}
    if not widths and all(net.tensor(t).rows_on_lanes for t in tensors):  # a column-local run of row ops
        widths = [net.tensor(t).w for t in group_io(net, ops).outputs]
    if not widths:
        return []
    narrowest = min(net.tensor(t).w for t in group_io(net, ops).outputs)
    top = min(max_w, narrowest)
    counts = {cdiv(max(widths), chip.npu_num * k) for k in COLUMN_LANE_MULTIPLES} | set(FEW_W_SLICES)
    return sorted(c for c in counts if 2 <= c <= top)


MAX_C_SLICES = 64  # most channel (heads) slices of a group


def c_slice_options(net: Network, chip: Chip, ops: Sequence[str]) -> list[int]:
    """Channel (heads) slice counts worth trying for a group, fewest first: none unless every op keeps each
    channel to itself (:func:`lgopt.model.ops.channel_reason`); then the counts that leave each slice at most
    1, 2, 3, ... lanes' worth of channels of the widest group output (a slice of 12 heads on 8 lanes: 2, one
    head per lane), and 2 when the group cannot be cut along H (it transposes K on the lanes) and its
    outputs have at least two channels.  Fewer channels than lanes per slice never shrink a lane's bytes.

    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.model.network import Network, Op, Tensor
    >>> t = {k: Tensor(k, (1, 12, 197, 197), "f16") for k in "sp"}
    >>> sm = Op("sm", "Softmax", ("s",), ("p",), attrs={"axis": -1}, local=True, h_split=True)
    >>> net = Network("n", t, (sm,), ("s",), ("p",))
    >>> c_slice_options(net, get_chip("cv184x"), ["sm"]), c_slice_options(net, get_chip("bm1684x"), ["sm"])
    ([2], [])
    """
    from lgopt.model.ops import channel_reason

    if any(channel_reason(net, net.op(o)) for o in ops):
        return []
    outs = group_io(net, ops).outputs
    narrowest = min(net.tensor(t).c for t in outs)
    widest = max(net.tensor(t).c for t in outs)
    counts = {cdiv(widest, chip.npu_num * k) for k in range(1, cdiv(widest, chip.npu_num) + 1)}
    if not all(net.op(o).h_split for o in ops):
        counts.add(2)
    return sorted(c for c in counts if 2 <= c <= min(narrowest, MAX_C_SLICES))


def schedule(net: Network, chip: Chip, ops: Sequence[str], n_slices: int, h_slices: int,
             h_ratio: float | None = DEFAULT_H_RATIO, prefetch: int = 1, kept_in: tuple[str, ...] = (),
             kept_out: tuple[str, ...] = (), w_slices: int = 1, f32_copies: tuple[str, ...] = (),
             receivers: tuple[str, ...] = (), reload_columns: bool = True, c_slices: int = 1,
             sections: int | None = None) -> GroupPlan:
    """Sliced and scheduled, not yet placed; raises SliceError when the slicing is illegal.  ``sections``: see
    :func:`lgopt.group.timestep.schedule_group`."""
    sl = slice_group(net, list(ops), n_slices, h_slices, w_slices=w_slices, n_unit=n_unit(net, chip, ops),
                     h_ratio=h_ratio, c_slices=c_slices)
    return schedule_group(net, chip, sl, prefetch, kept_in, kept_out, f32_copies, receivers, reload_columns,
                          sections)


def try_kept_group(net: Network, chip: Chip, ops: Sequence[str], n_slices: int, h_slices: int, w_slices: int,
                   kept_in: tuple[str, ...], kept_out: tuple[str, ...], receivers: tuple[str, ...] = (),
                   h_ratio: float | None = DEFAULT_H_RATIO, bank_rule: str = "soft",
                   fixed: Mapping[str, int] | None = None, reload_columns: bool = True) -> GroupPlan | None:
    """A placed group that receives ``kept_in`` or hands ``kept_out`` over in LMEM (:mod:`lgopt.group.handover`:
    the tensors pinned at the top of LMEM, the rest packed below them), with its costs; None when it does not
    slice or pack.  ``fixed``: where the giving group put the received tensors, for a group that may also
    hand over (:func:`lgopt.group.handover.pin_below`)."""
    try:
        g = schedule(net, chip, ops, n_slices, h_slices, h_ratio, kept_in=kept_in, kept_out=kept_out,
                     w_slices=w_slices, receivers=receivers, reload_columns=reload_columns)
    except SliceError:
        return None
    pinned = pin_kept(chip, g) if fixed is None else pin_below(chip, g, fixed)
    if pinned is None:
        return None
    g, pchip = pinned
    alloc = multi_start_allocate(net, pchip, without_kept(g), bank_rule)
    if alloc is None:
        return None
    return place_chosen(net, chip, g, alloc.offsets, pchip, bank_rule)


def place(net: Network, chip: Chip, g: GroupPlan, alloc: Allocation) -> GroupPlan:
    """``g`` at ``alloc``'s offsets, with its LMEM peak and bank conflicts recorded.

    The peak is ``g``'s own placed buffers' highest end (what ``docs/plan-format.md`` defines and the verifier
    recomputes), not ``alloc.peak``: the offsets may have been found for a more cautious table than ``g``
    (:func:`lgopt.strategies.settings.packing`: f32 copies three times a buffer's size), whose peak is higher
    than any byte ``g`` uses (issue 37)."""
    g = g.with_offsets(alloc.offsets)
    peak = max((b.offset + b.size for b in g.buffers), default=0)
    return replace(g, cost={**g.cost, "lmem_peak": peak, "bank_conflicts": alloc.bank_conflicts})


def place_chosen(net: Network, chip: Chip, g: GroupPlan, offsets: Mapping[int, int], packing_chip: Chip,
                 bank_rule: str, polish: bool = True) -> GroupPlan:
    """A group whose table an optimiser chose, placed at ``offsets`` (its buffers below any handed-over
    tensor, packed into ``packing_chip``'s LMEM), with its soft bank conflicts reduced when ``polish``
    (candidates are judged on feasibility alone: :func:`lgopt.group.alloc.polish_banks`) and its costs."""
    offs = dict(offsets)
    if polish and bank_rule == "soft":
        inner = without_kept(g)
        offs.update(polish_banks(net, packing_chip, inner, {b.id: offs[b.id] for b in inner.buffers}))
    offs.update({b.id: b.offset for b in kept_buffers(g)})
    peak = max(offs[b.id] + b.size for b in g.buffers)
    conf = count_bank_conflicts(net, chip, g, offs) if bank_rule != "off" else 0
    placed = place(net, chip, g, Allocation(offs, peak, conf))
    return replace(placed, cost={**placed.cost, **group_cost(chip, net, placed)})


Packing = Callable[[GroupPlan], tuple[Chip | None, GroupPlan]]
"""A scheduled group -> the (LMEM, table) its buffers must pack into (:func:`try_group`)."""


def try_group(net: Network, chip: Chip, ops: Sequence[str], n_slices: int, h_slices: int,
              h_ratio: float | None = DEFAULT_H_RATIO, bank_rule: str = "soft", thorough: bool = False,
              w_slices: int = 1, f32_copies: tuple[str, ...] = (), reload_columns: bool = True,
              c_slices: int = 1, packing: Packing | None = None, inplace: bool = False,
              sections: int | None = None) -> tuple[GroupPlan | None, str]:
    """A placed group, or (None, why not).  ``packing`` gives the (LMEM, table) its buffers must pack into
    (default: ``chip``'s and its own; :func:`lgopt.strategies.settings.packing` asks more of a group the
    compiler is not known to compile); the group keeps its own table and costs.

    The greedy allocator alone judges a candidate of a search (it is fast and searches try thousands);
    ``thorough`` is for a grouping given from outside (a compiler's cache), where "infeasible" is a
    verdict: the greedy orders are retried and then the exact packer decides (:func:`allocate_thorough`, with
    ``inplace``: elementwise outputs over dying operands where nothing packs otherwise).
    ``reload_columns=False`` builds such a grouping's W slices with whole weights, as the compiler does;
    ``sections``, the sections its allocator sees (:func:`lgopt.group.timestep.holds_weights`).
    """
    try:
        g = schedule(net, chip, ops, n_slices, h_slices, h_ratio, w_slices=w_slices, f32_copies=f32_copies,
                     reload_columns=reload_columns, c_slices=c_slices, sections=sections)
    except SliceError as e:
        return None, str(e)
    room, table = (chip, g) if packing is None else packing(g)
    if room is None:
        return None, "LMEM allocation failed: no room left"
    if thorough:
        alloc, why = allocate_thorough(net, room, table, bank_rule, inplace)
    else:
        alloc, why = greedy_allocate(net, room, table, bank_rule), "LMEM allocation failed"
    if alloc is None:
        return None, why
    if table is not g:  # offsets that pack ``table`` pack ``g``; its bank conflicts are ``g``'s own rows'
        alloc = replace(alloc, bank_conflicts=count_bank_conflicts(net, chip, g, alloc.offsets)
                        if bank_rule != "off" else 0)
    return place(net, chip, g, alloc), ""


EXACT_PACK_SECONDS = 5.0  # the exact packer's effort for one group (search nodes and CP-SAT deterministic time)


def allocate_thorough(net: Network, chip: Chip, g: GroupPlan, bank_rule: str = "soft", inplace: bool = False
                      ) -> tuple[Allocation | None, str]:
    """Offsets by the greedy orders, else by the exact packer; (None, why) says whether no packing exists
    (the live bytes of some row exceed LMEM, or the packer proved it) or none was found in time.  With
    ``inplace``, when nothing packs, in-place elementwise outputs over their dying operands
    (:mod:`lgopt.group.inplace`, as TPU-MLIR's allocator places them) are tried before the verdict: for a
    grouping whose slice counts the compiler gave, not for a search of them (TPU-MLIR's quick search of a
    resnet50 group on BM1688 stopped at 7 H slices where 1 fits only in place)."""
    alloc = multi_start_allocate(net, chip, g, bank_rule)
    if alloc is not None:
        return alloc, ""
    pairs = inplace_pairs(net, g) if inplace else {}
    table = merged(g, pairs) if pairs else g
    if pairs:
        alloc = multi_start_allocate(net, chip, table, bank_rule)
        if alloc is not None:
            return _unmerge(net, chip, g, alloc.offsets, pairs, bank_rule), ""
    T = len(table.rows)
    live = max(sum(align_up(b.size, chip.align_bytes) for b in table.buffers if b.resident or r in b.rows(T))
               for r in range(T))
    if live > chip.lmem_bytes:
        return None, f"LMEM allocation failed: {live} bytes live in one row, LMEM has {chip.lmem_bytes}"
    offs = exact_pack(net, chip, table, "off" if bank_rule == "soft" else bank_rule, time_limit=EXACT_PACK_SECONDS)
    if offs is None:
        return None, "LMEM allocation failed: no packing exists (proved by the exact packer)"
    if offs == "unknown":
        return None, f"LMEM allocation failed: no packing found in {EXACT_PACK_SECONDS:g} units of exact search"
    assert isinstance(offs, dict)
    if bank_rule == "soft":
        offs = polish_banks(net, chip, table, offs)
    return _unmerge(net, chip, g, offs, pairs, bank_rule), ""


def _unmerge(net: Network, chip: Chip, g: GroupPlan, offsets: Mapping[int, int], pairs: dict[int, int],
             bank_rule: str) -> Allocation:
    """An allocation of ``g`` from offsets of its :func:`lgopt.group.inplace.merged` table."""
    offs = unmerged(dict(offsets), pairs)
    peak = max(offs[b.id] + b.size for b in g.buffers)
    conf = count_bank_conflicts(net, chip, g, offs) if bank_rule != "off" else 0
    return Allocation(offs, peak, conf)


def assemble(net: Network, chip: Chip, groups: Sequence[GroupPlan], strategy: str, *, h_ratio: float | None,
             bank_rule: BankRule, status: PlanStatus = "feasible", solver: dict | None = None) -> Plan:
    """Groups plus every op not in a group as a global layer, in network order."""
    index = net.op_index
    grouped = {o for g in groups for o in g.ops}
    items: list[tuple[int, tuple[str, object]]] = []
    for gi, g in enumerate(groups):
        items.append((min(index[o] for o in g.ops), ("group", gi)))
    for op in net.ops:
        if op.name not in grouped:
            items.append((index[op.name], ("global", op.name)))
    steps = tuple(s for _, s in sorted(items, key=lambda x: x[0]))
    return Plan(net.name, network_digest(net), chip.to_dict(), strategy, steps, tuple(groups), status, h_ratio,
                bank_rule, {}, solver or {})

"""Greedy LMEM offsets for one group's buffers (seed "LMEM Allocation").

Buffers are rectangles of (rows x bytes) that may slide along the address
axis only.  The greedy order is the seed's: resident weights first when the
group is sliced, then long lifetimes, then large sizes; each buffer goes to the
lowest EU-aligned address where it overlaps no live buffer.  Bank awareness
follows shared/reference s5: among the feasible addresses prefer one whose
banks no conflicting buffer uses (operands of the same op, or a buffer moved
by GDMA while the other is used by the NPU in the same row), then one that
does not cross a bank boundary; ``bank_rule="hard"`` refuses conflicts,
``"soft"`` accepts and counts them, ``"off"`` ignores banks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from lgopt.group.inplace import inplace_pairs, paired
from lgopt.group.pack import PackItem, pack
from lgopt.hw.chip import Chip
from lgopt.hw.layout import align_up
from lgopt.model.network import Network
from lgopt.model.plan import GroupPlan


@dataclass(frozen=True)
class Allocation:
    offsets: Mapping[int, int]
    peak: int  # highest byte used, per lane, by the table packed (lgopt.group.build.place records the group's own)
    bank_conflicts: int


def banks_of(offset: int, size: int, bank_bytes: int) -> range:
    return range(offset // bank_bytes, (offset + max(size, 1) - 1) // bank_bytes + 1)


def row_users(net: Network, g: GroupPlan) -> list[tuple[set[int], set[int]]]:
    """Per row: (buffer ids an op touches, buffer ids GDMA moves)."""
    by_name = {(b.kind, b.name): b.id for b in g.buffers}
    out = []
    for r in g.rows:
        npu: set[int] = set()
        for name in r.ops:
            op = net.op(name)
            for t in op.inputs + op.outputs:
                if ("activation", t) in by_name:
                    npu.add(by_name[("activation", t)])
            for kind in ("weight", "scratch"):
                if (kind, name) in by_name:
                    npu.add(by_name[(kind, name)])
        dma = {by_name[(t.kind, t.name)] for t in r.loads + r.stores if (t.kind, t.name) in by_name}
        dma |= {by_name[("convert", t.name)] for t in r.loads if ("convert", t.name) in by_name}  # lands f32 there
        out.append((npu, dma))
    return out


def conflict_pairs(net: Network, g: GroupPlan) -> set[frozenset[int]]:
    """Pairs of buffers that should not share a bank (reference s5, rules a-c)."""
    pairs: set[frozenset[int]] = set()
    for npu, dma in row_users(net, g):
        for a in npu:
            for b in npu | dma:
                if a != b:
                    pairs.add(frozenset((a, b)))
    return pairs


def greedy_allocate(net: Network, chip: Chip, g: GroupPlan, bank_rule: str = "soft",
                    order: Sequence[int] | None = None) -> Allocation | None:
    """Offsets for every buffer, or None when some buffer finds no room."""
    T = len(g.rows)
    bufs = {b.id: b for b in g.buffers}
    if order is None:
        order = [b.id for b in sorted(g.buffers, key=lambda b: (
            not b.resident, -len(b.rows(T)), -b.size, b.id))]
    partners: dict[int, set[int]] = {i: set() for i in bufs}
    if bank_rule != "off":
        for p in conflict_pairs(net, g):
            pa, pb = tuple(p)
            partners[pa].add(pb)
            partners[pb].add(pa)
    live = {i: bufs[i].rows(T) for i in bufs}
    placed: dict[int, int] = {}
    bank = chip.bank_bytes
    for bid in order:
        b = bufs[bid]
        size = align_up(b.size, chip.align_bytes)
        busy = sorted((placed[o], placed[o] + align_up(bufs[o].size, chip.align_bytes))
                      for o in placed if live[o] & live[bid])
        cands = sorted({0} | {end for _, end in busy} | set(range(0, chip.lmem_bytes, bank)))
        best: tuple[int, int] | None = None
        for off in cands:
            if off + size > chip.lmem_bytes:
                break
            if any(s < off + size and off < e for s, e in busy):
                continue
            penalty = 0
            if bank_rule != "off":
                mine = set(banks_of(off, b.size, bank))
                if any(mine & set(banks_of(placed[o], bufs[o].size, bank)) for o in partners[bid] if o in placed):
                    penalty = 2
                elif len(mine) > 1 and size <= bank:
                    penalty = 1
            if bank_rule == "hard" and penalty == 2:
                continue
            if best is None or (penalty, off) < best:
                best = (penalty, off)
                if penalty == 0:
                    break
        if best is None:
            return None
        placed[bid] = best[1]
    peak = max((placed[i] + bufs[i].size for i in placed), default=0)
    conflicts = 0 if bank_rule == "off" else count_bank_conflicts(net, chip, g, placed)
    return Allocation(placed, peak, conflicts)


def count_bank_conflicts(net: Network, chip: Chip, g: GroupPlan, offsets: Mapping[int, int]) -> int:
    """Conflicting buffer pairs that share a bank at these offsets; an in-place pair at one offset is not one
    (the op reads and writes the same bytes by design: :mod:`lgopt.group.inplace`)."""
    size = {b.id: b.size for b in g.buffers}
    pairs: dict[int, int] | None = None  # only an in-place pair puts two buffers of one row at one offset
    n = 0
    for p in conflict_pairs(net, g):
        a, b = tuple(p)
        if offsets[a] == offsets[b]:
            pairs = inplace_pairs(net, g) if pairs is None else pairs
            if paired(pairs, a, b):
                continue
        if set(banks_of(offsets[a], size[a], chip.bank_bytes)) & set(banks_of(offsets[b], size[b], chip.bank_bytes)):
            n += 1
    return n


def multi_start_allocate(net: Network, chip: Chip, g: GroupPlan, bank_rule: str = "soft") -> Allocation | None:
    """The seed's order first, then largest-first and largest-area-first: cheap retries before an exact packer."""
    alloc = greedy_allocate(net, chip, g, bank_rule)
    if alloc is not None:
        return alloc
    T = len(g.rows)
    for key in (lambda b: (not b.resident, -b.size, b.id), lambda b: (not b.resident, -b.size * len(b.rows(T)), b.id)):
        alloc = greedy_allocate(net, chip, g, bank_rule, order=[b.id for b in sorted(g.buffers, key=key)])
        if alloc is not None:
            return alloc
    return None


# --- exact placement ---------------------------------------------------------------------------------

def pack_items(g: GroupPlan) -> list[PackItem]:
    """A group's buffers as packing rectangles: wrap-around lifetimes become two spans."""
    T = len(g.rows)
    return [PackItem(str(b.id), b.size, tuple(b.spans(T))) for b in g.buffers]


def exact_pack(net: Network, chip: Chip, g: GroupPlan, bank_rule: str = "soft", time_limit: float = 2.0,
               seed: int = 0, workers: int = 1, conflict_time: float | None = 0.0,
               deadline: float | None = None) -> dict[int, int] | str | None:
    """Offsets by buffer id, None when no packing exists, "unknown" when the packer ran out of effort.

    :func:`lgopt.group.pack.pack` decides: the lowest fit, then the exact search (which proves a
    group infeasible where the live bytes or the bank cliques say so, or by running to the end) with
    CP-SAT interleaved.  ``time_limit`` is the packer's effort (search nodes and CP-SAT deterministic
    time, so the verdict does not depend on the machine's load); one CP-SAT worker is far faster than
    several on a group's few hundred buffers, so more are used only above that.  ``conflict_time``:
    effort spent reducing soft bank conflicts once a packing is found (0, the default, while
    candidates are only being judged: feasibility decides, and the chosen groups are polished at the end).
    """
    items = pack_items(g)
    pairs = [(str(lo), str(hi)) for lo, hi in map(sorted, conflict_pairs(net, g))] if bank_rule != "off" else []
    res = pack(items, chip.lmem_bytes, align=chip.align_bytes, conflicts=pairs, bank_bytes=chip.bank_bytes,
               bank_rule=bank_rule, time_limit=time_limit, workers=1 if len(items) <= 400 else workers, seed=seed,
               conflict_time=conflict_time, deadline=deadline)
    if res.status == "infeasible":
        return None
    if not res.found:
        return "unknown"
    return {int(k): v for k, v in res.offsets.items()}


def polish_banks(net: Network, chip: Chip, g: GroupPlan, offsets: Mapping[int, int], passes: int = 20
                 ) -> dict[int, int]:
    """``offsets`` with fewer soft bank conflicts: each conflicting buffer moves, one at a time, to the free
    aligned place where it shares a bank with the fewest of its partners, until no move helps.

    Candidates are judged on feasibility alone (bank variables make CP-SAT's first packing far harder
    to find), so the groups a plan keeps are polished here.  A local search, not a solver: on
    ResNet-50/BM1684X's 71-op group it takes 106 conflicts to 37 in 0.06 s, where CP-SAT from the
    same start needs 6 s to reach 31.  Every move keeps the packing valid.
    """
    T = len(g.rows)
    bufs = {b.id: b for b in g.buffers}
    offs = dict(offsets)
    partners: dict[int, set[int]] = {i: set() for i in bufs}
    for p in conflict_pairs(net, g):
        a, b = tuple(p)
        partners[a].add(b)
        partners[b].add(a)
    if not any(partners.values()):
        return offs
    bank, align, cap = chip.bank_bytes, chip.align_bytes, chip.lmem_bytes
    size = {i: align_up(b.size, align) for i, b in bufs.items()}
    live = {i: b.rows(T) for i, b in bufs.items()}
    near = {i: [o for o in bufs if o != i and live[o] & live[i]] for i in bufs}

    def shared(i: int, off: int) -> int:
        mine = set(banks_of(off, bufs[i].size, bank))
        return sum(1 for o in partners[i] if mine & set(banks_of(offs[o], bufs[o].size, bank)))

    for _ in range(passes):
        moved = False
        for i in sorted(bufs):
            now = shared(i, offs[i])
            if now == 0:
                continue
            busy = [(offs[o], offs[o] + size[o]) for o in near[i]]
            places = ({0} | {e for _, e in busy} | {s - size[i] for s, _ in busy} | set(range(0, cap, bank))
                      | {k - size[i] for k in range(bank, cap + 1, bank)})
            best = (now, offs[i])
            for off in sorted(places):
                if off < 0 or off % align or off + size[i] > cap or any(s < off + size[i] and off < e for s, e in busy):
                    continue
                c = shared(i, off)
                if c < best[0]:
                    best = (c, off)
            if best[1] != offs[i]:
                offs[i] = best[1]
                moved = True
        if not moved:
            break
    return offs

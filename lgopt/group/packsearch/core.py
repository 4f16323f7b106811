"""The depth-first search over canonical packings, compiled with numba.

Compiled because the tight instances take 10^4-10^5 nodes of a few hundred placements each: interpreted,
that is minutes; compiled, seconds (on a par with MiniMalloc's C++).  The code is plain loops over
integer arrays, which is also how it runs without numba (slowly).  The ideas are MiniMalloc's (Moffitt,
ASPLOS 2023), written anew for lgopt's buffers:

* **Canonical placements.**  Any packing can be pushed down, buffer by buffer in order of offset, until
  each buffer rests on one it is live with (or on a bank boundary its hard partner forces, or on 0): a
  buffer's only candidate offset is its *lowest feasible* one given those already placed, and buffers
  are placed in non-decreasing offset (ties in a fixed pre-order).  The search is complete over these.
* **Cross-section inference.**  A section's buffers still to place all lie above its floor (and above
  the last offset placed), so floor + their aligned bytes may not exceed the capacity.  The floor also
  rises to the lowest offset any of them can still take.
* **Bank inference.**  The unplaced members of a clique of hard bank partners need pairwise separate
  banks, at least ceil(size / bank) each, above the lowest offset any of them can take.
* **Dominance.**  Placing a buffer at or above the height where some unplaced buffer would end, had it
  been placed at its lowest offset, leaves a gap that buffer could always fill: that branch is skipped.
  (With hard bank pairs the height is rounded up to the next bank boundary, so the gap is a bank of its
  own.)  A buffer nothing unplaced can ever lie on settles its sub-tree: if it fails, its siblings do.
* **Decomposition.**  When no unplaced buffer crosses a cut between sections, the two sides are
  solved independently, the second only once the first has a packing.

Budgets and clock are all honoured: the search stops after ``ctr[0]`` nodes (the round robin's limit for
one static order), after ``ctr[6]`` placements tried (the caller's budget: deterministic, and a steadier
measure of work than nodes, since a node may try one placement or hundreds), or past ``deadline[0]``
(``time.perf_counter()``, looked at every 1024 placements), and reports it was cut short.

The helpers of the inner loop are inlined into :func:`search` (``inline="always"``) or take scalars:
numba counts a reference to every array of the :class:`Instance` and :class:`State` tuples on each call
that receives them, an atomic operation apiece, and these calls ran once per candidate or placement, so
the counting took two thirds of the search's time (2-9 microseconds a placement on lgopt's groups
before, 1.3-2.3 after).

Inlining does not remove all of it: :func:`search` is too large for numba's pruning of reference counts
beyond one basic block, so a helper inlined into it still counts a reference to each array it receives
(each array of a tuple), unless the call is its argument's last use.  Hence the helpers that run once per
node take single arrays and scalars rather than the tuples, and the candidates are tried in :func:`search`
itself (trying them needs the tuples: in a helper, one binding of them per node cost up to 8% on
MiniMalloc's challenging instances); the frames of the search are the columns of one array, not a tuple of
arrays; the shared stacks grow in :func:`search` itself (a helper that grows one and returns it counts
references too); and :func:`_place` ends in :func:`_settle_floors`, the last use of its arguments.  Split
so, the search runs as fast as in one piece (thread CPU time, interleaved runs on the challenging instances).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import numpy as np

try:
    from numba import njit, objmode
except ImportError:  # pragma: no cover - the same code runs, only slower
    def njit(*args: Any, **kwargs: Any) -> Any:  # type: ignore[no-redef]
        if args and callable(args[0]):
            return args[0]
        return lambda f: f

    class objmode:  # type: ignore[no-redef]
        def __init__(self, **kwargs: Any) -> None:
            pass

        def __enter__(self) -> None:
            return None

        def __exit__(self, *exc: Any) -> None:
            return None

FOUND, NOT_FOUND, CUT_SHORT = 0, 1, 2
HEURISTICS = ("WAT", "TAW", "TWA")  # static pre-orders: W(idth) A(rea) T(otal of the fullest section), all descending
_INF = 1 << 62


class Instance(NamedTuple):
    """The static arrays of one problem (built by :func:`lgopt.group.packsearch.sweep.sweep`)."""

    size_a: np.ndarray  # aligned size (bytes)
    raw: np.ndarray  # size as given, at least 1 (what a bank rule sees)
    maxoff: np.ndarray  # highest aligned offset at which the buffer still fits
    fixed: np.ndarray  # pinned offset, -1 when free
    partnered: np.ndarray  # 1 when the buffer has a hard bank partner
    bank: int  # bank bytes (0: no hard pairs)
    align: int
    cap_a: int  # capacity rounded up to the alignment: what a section's aligned bytes may reach
    width: np.ndarray  # time live
    lower: np.ndarray  # first time live
    nb_ptr: np.ndarray  # neighbours (CSR): buffers live with it (kind bit 1) or hard bank partners (bit 2)
    nb_idx: np.ndarray
    nb_kind: np.ndarray
    bs_ptr: np.ndarray  # runs of sections per buffer (CSR), half-open [bs_lo, bs_hi)
    bs_lo: np.ndarray
    bs_hi: np.ndarray
    sec_ptr: np.ndarray  # members of each section (CSR)
    sec_mem: np.ndarray
    hull_lo: np.ndarray  # first section of the buffer (and its partners)
    hull_hi: np.ndarray  # one past the last
    total0: np.ndarray  # aligned bytes of each section
    cuts0: np.ndarray  # buffers crossing from section s into s + 1
    cl_ptr: np.ndarray  # cliques of hard bank partners (CSR): pairwise in separate banks
    cl_mem: np.ndarray
    need: np.ndarray  # banks a buffer spans at the least: ceil(size / bank)
    bc_ptr: np.ndarray  # the cliques of each buffer (CSR)
    bc_idx: np.ndarray
    n_banks: int  # banks a buffer may touch: ceil(capacity / bank)


class State(NamedTuple):
    """What the search changes (and restores on the way back)."""

    off: np.ndarray  # offset placed, -1 when unplaced
    minoff: np.ndarray  # lowest offset still feasible
    sol: np.ndarray  # last offset placed (the packing, once the search succeeds)
    floor: np.ndarray  # per section: no unplaced buffer of it can go lower
    total: np.ndarray  # per section: aligned bytes still unplaced
    cuts: np.ndarray
    mark: np.ndarray  # per section: stamp of the last placement that touched it
    cmark: np.ndarray  # per bank clique, likewise
    ctr: np.ndarray  # nodes left (this order's limit), backtracks, nodes visited, cut by the clock, stamp,
    #                  placements tried, placements left (the budget), placements at the next look at the clock
    deadline: np.ndarray  # [perf_counter deadline] (0: none)


def new_state(inst: Instance) -> State:
    n, S = len(inst.size_a), len(inst.total0)
    return State(off=np.full(n, -1, np.int64), minoff=np.zeros(n, np.int64), sol=np.full(n, -1, np.int64),
                 floor=np.zeros(S, np.int64), total=np.zeros(S, np.int64), cuts=np.zeros(max(S - 1, 0), np.int64),
                 mark=np.zeros(S, np.int64), cmark=np.zeros(len(inst.cl_ptr), np.int64), ctr=np.zeros(8, np.int64),
                 deadline=np.zeros(1, np.float64))


@njit(cache=True, inline="always")
def _align_up(x: int, a: int) -> int:
    return -(-x // a) * a


@njit(cache=True)
def _dominance_height(size_a: int, raw: int, partnered: bool, bank: int, m: int) -> int:
    """Where a buffer would end at offset ``m``: nothing placed at or above it can take its room.

    Scalars, not the instance: a call that takes the instance's arrays pays an atomic reference count
    on each of them, and this one runs for every candidate of every node."""
    h = m + size_a
    if partnered:
        hb = ((m + raw - 1) // bank + 1) * bank
        if hb > h:
            h = hb
    return h


@njit(cache=True)
def _preorder(G: Instance, W: State, bufs: np.ndarray, heuristic: int) -> np.ndarray:
    """``bufs`` in the static order of ``heuristic``: three keys, all descending, then the buffer index."""
    k = len(bufs)
    width = np.empty(k, np.int64)
    area = np.empty(k, np.int64)
    fullest = np.empty(k, np.int64)
    for i in range(k):
        b = bufs[i]
        width[i] = G.width[b]
        area[i] = G.raw[b] * G.width[b]
        t = 0
        for r in range(G.bs_ptr[b], G.bs_ptr[b + 1]):
            for s in range(G.bs_lo[r], G.bs_hi[r]):
                if W.total[s] > t:
                    t = W.total[s]
        fullest[i] = t
    if heuristic == 0:  # WAT
        k1, k2, k3 = width, area, fullest
    elif heuristic == 1:  # TAW
        k1, k2, k3 = fullest, area, width
    else:  # TWA
        k1, k2, k3 = fullest, width, area
    out = bufs.copy()
    for i in range(1, k):  # insertion sort, descending keys, then buffer index: short lists, once per partition
        b, a1, a2, a3 = out[i], k1[i], k2[i], k3[i]
        j = i - 1
        while j >= 0 and (k1[j] < a1 or (k1[j] == a1 and (k2[j] < a2 or (k2[j] == a2 and (
                k3[j] < a3 or (k3[j] == a3 and out[j] > b)))))):
            out[j + 1], k1[j + 1], k2[j + 1], k3[j + 1] = out[j], k1[j], k2[j], k3[j]
            j -= 1
        out[j + 1], k1[j + 1], k2[j + 1], k3[j + 1] = b, a1, a2, a3
    return out


@njit(cache=True, inline="always")
def _grow(a: np.ndarray, need: int) -> np.ndarray:
    """``a``, or a copy at least twice as long when ``need`` entries would not fit."""
    if need <= len(a):
        return a
    b = np.empty(max(need, 2 * len(a)), a.dtype)
    b[:len(a)] = a
    return b


@njit(cache=True, inline="always")
def _lift(o: int, size_a: int, raw: int, bank: int, kind: int) -> int:
    """The lowest offset a neighbour of ``kind`` may take above a buffer at ``o``: past its end when they are
    live together (bit 1), past its last bank when they are hard bank partners (bit 2)."""
    h = o + size_a if kind & 1 else 0
    if kind & 2:
        hb = ((o + raw - 1) // bank + 1) * bank
        if hb > h:
            h = hb
    return h


@njit(cache=True, inline="always")
def _place(G: Instance, W: State, b: int, o: int, lo: int, hi: int, mlog_b: np.ndarray, mlog_v: np.ndarray,
           mtop: int, slog_s: np.ndarray, slog_v: np.ndarray, stop: int, touched: np.ndarray
           ) -> tuple[bool, bool, int, int]:
    """Put ``b`` at ``o`` and propagate: (failed, hatless, new log tops).  Every change is logged.

    The cheap tests come first (a neighbour pushed past its top limit, the bank cliques), so that a
    placement bound to fail does not pay for the section floors.
    """
    W.off[b] = o
    W.sol[b] = o
    W.ctr[5] += 1
    W.ctr[6] -= 1
    hatless = True
    failed = False
    m0 = mtop
    for j in range(G.nb_ptr[b], G.nb_ptr[b + 1]):  # raise the lowest offsets of its unplaced neighbours
        q = G.nb_idx[j]
        if W.off[q] >= 0:
            continue
        hatless = False
        h = _lift(o, G.size_a[b], G.raw[b], G.bank, G.nb_kind[j])
        if W.minoff[q] >= h:
            continue
        mlog_b[mtop] = q
        mlog_v[mtop] = W.minoff[q]
        mtop += 1
        h = _align_up(h, G.align)
        W.minoff[q] = h
        if h > G.maxoff[q] or (G.fixed[q] >= 0 and h > G.fixed[q]):
            failed = True
            break
    top = o + G.size_a[b]
    for r in range(G.bs_ptr[b], G.bs_ptr[b + 1]):  # its sections: floor at its top, fewer bytes to place
        for s in range(G.bs_lo[r], G.bs_hi[r]):
            slog_s[stop] = s
            slog_v[stop] = W.floor[s]
            stop += 1
            if top > W.floor[s]:
                W.floor[s] = top
            W.total[s] -= G.size_a[b]
    if failed:
        return failed, hatless, mtop, stop
    if G.bank > 0 and not _banks_suffice(G, W, b, o, mlog_b, m0, mtop):
        return True, hatless, mtop, stop
    failed, stop = _settle_floors(G, W, o, lo, hi, mlog_b, m0, mtop, slog_s, slog_v, stop, touched)
    return failed, hatless, mtop, stop


@njit(cache=True, inline="always")
def _settle_floors(G: Instance, W: State, o: int, lo: int, hi: int, moved: np.ndarray, m0: int, mtop: int,
                   slog_s: np.ndarray, slog_v: np.ndarray, stop: int, touched: np.ndarray) -> tuple[bool, int]:
    """The last step of :func:`_place`: raise the floor of each section of the neighbours that moved
    (``moved[m0:mtop]``) to the lowest offset its unplaced buffers can take, logged on ``slog``, then the
    cross-section inference over the partition's sections ``[lo, hi)`` (all still to place lies above the
    floor and above ``o``).  Returns (failed, the new log top).

    The last use of :func:`_place`'s arguments, so that numba's reference counts on them cancel."""
    W.ctr[4] += 1
    stamp = W.ctr[4]
    nt = 0
    for x in range(m0, mtop):  # the sections of the neighbours that moved
        q = moved[x]
        for r in range(G.bs_ptr[q], G.bs_ptr[q + 1]):
            for s in range(G.bs_lo[r], G.bs_hi[r]):
                if W.mark[s] != stamp:
                    W.mark[s] = stamp
                    touched[nt] = s
                    nt += 1
    for t in range(nt):  # a floor is no lower than the lowest offset its unplaced buffers can take
        s = touched[t]
        m = _INF
        for x in range(G.sec_ptr[s], G.sec_ptr[s + 1]):
            q = G.sec_mem[x]
            if W.off[q] < 0 and W.minoff[q] < m:
                m = W.minoff[q]
        if m != _INF and W.floor[s] < m:
            slog_s[stop] = s
            slog_v[stop] = W.floor[s]
            stop += 1
            W.floor[s] = m
    failed = False
    s = lo
    while not failed and s < hi:  # cross-section inference (everything still to place lies above o)
        t = W.total[s]
        if t > 0:
            f = W.floor[s]
            if f < o:
                f = o
            failed = f + t > G.cap_a
        s += 1
    return failed, stop


@njit(cache=True, inline="always")
def _clique_fits(G: Instance, W: State, c: int, o: int) -> bool:
    """The unplaced members of clique ``c`` need pairwise separate banks, at least ``need`` each, all at or
    above the lowest offset any of them can take (and above ``o``, the canonical order's floor, since a
    clique lies in one partition): they must fit in the banks left up to the capacity."""
    m = _INF
    banks = 0
    for x in range(G.cl_ptr[c], G.cl_ptr[c + 1]):
        q = G.cl_mem[x]
        if W.off[q] < 0:
            banks += G.need[q]
            if W.minoff[q] < m:
                m = W.minoff[q]
    if banks == 0:
        return True
    if m < o:
        m = o
    return bool(m // G.bank + banks <= G.n_banks)


@njit(cache=True, inline="always")
def _banks_suffice(G: Instance, W: State, b: int, o: int, moved: np.ndarray, m0: int, mtop: int) -> bool:
    """Bank inference after ``b`` went to ``o``: the cliques of ``b`` and of the partners it pushed up
    (any other clique is as it was, but for ``o``, which the next placements in its partition will see)."""
    W.ctr[4] += 1
    stamp = W.ctr[4]
    for x in range(m0 - 1, mtop):
        q = b if x < m0 else moved[x]
        for y in range(G.bc_ptr[q], G.bc_ptr[q + 1]):
            c = G.bc_idx[y]
            if W.cmark[c] != stamp:
                W.cmark[c] = stamp
                if not _clique_fits(G, W, c, o):
                    return False
    return True


@njit(cache=True, inline="always")
def _undo(G: Instance, W: State, b: int, mlog_b: np.ndarray, mlog_v: np.ndarray, mtop: int, m0: int,
          slog_s: np.ndarray, slog_v: np.ndarray, stop: int, s0: int, cut_done: bool) -> None:
    """Take ``b`` back out: the floors, bytes, lowest offsets and cuts its placement changed, from the logs."""
    for x in range(stop - 1, s0 - 1, -1):
        W.floor[slog_s[x]] = slog_v[x]
    for r in range(G.bs_ptr[b], G.bs_ptr[b + 1]):
        for s in range(G.bs_lo[r], G.bs_hi[r]):
            W.total[s] += G.size_a[b]
    for x in range(mtop - 1, m0 - 1, -1):
        W.minoff[mlog_b[x]] = mlog_v[x]
    if cut_done:
        for s in range(G.hull_lo[b], G.hull_hi[b] - 1):
            W.cuts[s] += 1
    W.off[b] = -1


NODE, SPLIT = 0, 1

# A frame of the search's explicit stack is a column of one integer array (one array, not a tuple of them:
# numba counts a reference per array each time a helper receives it).  Its rows:
(KIND,  # NODE or SPLIT
 PART, PLEN,  # the partition: a slice of pst
 LO, HI,  # its sections, [LO, HI)
 PREV, NPREV,  # NODE: the parent's candidates (positions in the partition), a slice of ost
 CANDS, NCANDS,  # NODE: its own candidates, a slice of ost
 CUR,  # NODE: candidate being tried; SPLIT: next range
 MINOFF, MINPRE,  # NODE: the parent's placement (offset, position), the floor of the canonical order
 LOWEST,  # NODE: the dominance height
 BUF,  # NODE: buffer placed now (-1: none)
 M0, S0, HATLESS, CUTDONE,  # NODE: the log tops before it was placed, and what undoing it needs
 R0,  # SPLIT: start of the next range
 CUT, NCUT,  # SPLIT: its cut points, a slice of cst
 OBASE, PBASE, CBASE,  # stack tops when the frame was pushed: restored when it is popped
 FRESH,  # not yet visited
 ) = range(25)


@njit(cache=True)
def _reset(G: Instance, W: State) -> bool:
    """``W`` afresh: nothing placed, each section's floor and bytes to place, the cuts.  False when the
    section bound or the bank bound already proves there is no packing, without a single placement."""
    for b in range(len(G.size_a)):
        W.off[b] = -1
        W.sol[b] = -1
        W.minoff[b] = G.fixed[b] if G.fixed[b] >= 0 else 0
    S = len(G.total0)
    for s in range(S):
        W.total[s] = G.total0[s]
        m = _INF
        for x in range(G.sec_ptr[s], G.sec_ptr[s + 1]):
            if W.minoff[G.sec_mem[x]] < m:
                m = W.minoff[G.sec_mem[x]]
        W.floor[s] = m if m != _INF else 0
        if W.floor[s] + W.total[s] > G.cap_a:
            return False
    for c in range(len(G.cl_ptr) - 1):
        if not _clique_fits(G, W, c, 0):
            return False
    for s in range(S - 1):
        W.cuts[s] = G.cuts0[s]
    return True


@njit(cache=True)
def _max_sections(G: Instance) -> int:
    """The most sections any buffer covers: with the partition's sections, the room one placement may take
    on the section log (so that the log grows before a node tries its candidates, not in between)."""
    most = 0
    for b in range(len(G.size_a)):
        k = 0
        for r in range(G.bs_ptr[b], G.bs_ptr[b + 1]):
            k += G.bs_hi[r] - G.bs_lo[r]
        if k > most:
            most = k
    return most


@njit(cache=True, inline="always")
def _push(F: np.ndarray, e: int, kind: int, part: int, plen: int, lo: int, hi: int, obase: int, pbase: int,
          cbase: int) -> None:
    """Frame ``e``: a NODE or a SPLIT over a partition and its sections, what both kinds have."""
    F[KIND, e] = kind
    F[PART, e] = part
    F[PLEN, e] = plen
    F[LO, e] = lo
    F[HI, e] = hi
    F[BUF, e] = -1
    F[FRESH, e] = 1
    F[OBASE, e] = obase
    F[PBASE, e] = pbase
    F[CBASE, e] = cbase


@njit(cache=True, inline="always")
def _push_root(cuts: np.ndarray, F: np.ndarray, pst: np.ndarray, cst: np.ndarray, n: int, S: int,
               decompose: bool) -> tuple[int, int]:
    """The root frame: a SPLIT of every section at the cuts no buffer crosses (on ``cst``), its partition
    every buffer (on ``pst``).  Returns the tops of ``pst`` and ``cst``."""
    for b in range(n):
        pst[b] = b
    nc = 0
    if decompose:
        for s in range(S - 1):
            if cuts[s] == 0:
                cst[nc] = s + 1
                nc += 1
    _push(F, 0, SPLIT, 0, n, 0, S, 0, n, 0)
    F[CUT, 0] = 0
    F[NCUT, 0] = nc
    F[CUR, 0] = 0
    F[R0, 0] = 0
    return n, nc


@njit(cache=True, inline="always")
def _next_range(hull_lo: np.ndarray, hull_hi: np.ndarray, off: np.ndarray, F: np.ndarray, d: int,
                pst: np.ndarray, cst: np.ndarray) -> tuple[int, int, int]:
    """Move the SPLIT frame ``d`` on to its next range of sections with buffers to place, copied onto
    ``pst`` at the frame's base: (how many, the range); none when every range is done."""
    ks = r0 = r1 = 0
    while ks == 0 and F[CUR, d] <= F[NCUT, d]:
        r0 = F[R0, d]
        r1 = cst[F[CUT, d] + F[CUR, d]] if F[CUR, d] < F[NCUT, d] else F[HI, d]
        F[CUR, d] += 1
        F[R0, d] = r1
        for x in range(F[PLEN, d]):
            q = pst[F[PART, d] + x]
            if off[q] < 0 and hull_lo[q] < r1 and r0 < hull_hi[q]:
                pst[F[PBASE, d] + ks] = q
                ks += 1
    return ks, r0, r1


@njit(cache=True, inline="always")
def _push_range(F: np.ndarray, d: int, ost: np.ndarray, ks: int, r0: int, r1: int, ctop: int) -> tuple[int, int]:
    """Push a NODE over the ``ks`` buffers :func:`_next_range` found (in their static order on ``pst``), its
    candidates every one of them: the tops of ``ost`` and ``pst`` after it."""
    otop = F[OBASE, d]
    ptop = F[PBASE, d]
    for x in range(ks):
        ost[otop + x] = x
    _push(F, d + 1, NODE, ptop, ks, r0, r1, otop + ks, ptop + ks, ctop)
    F[PREV, d + 1] = otop
    F[NPREV, d + 1] = ks
    F[MINOFF, d + 1] = 0
    F[MINPRE, d + 1] = -1
    return otop + ks, ptop + ks


@njit(cache=True)
def _clock() -> float:
    """``time.perf_counter()`` from compiled code."""
    with objmode(now="float64"):
        now = time.perf_counter()
    return now


@njit(cache=True, inline="always")
def _count_node(ctr: np.ndarray, deadline: np.ndarray) -> bool:
    """Count a node against the budgets (``ctr``) and look at the clock every 1024 placements: False when
    the search must stop, cut short."""
    if ctr[0] <= 0 or ctr[6] <= 0:
        return False
    ctr[0] -= 1
    ctr[2] += 1
    if deadline[0] > 0 and ctr[5] >= ctr[7]:
        ctr[7] = ctr[5] + 1024
        if _clock() > deadline[0]:
            ctr[3] = 1
            ctr[0] = 0
            return False
    return True


@njit(cache=True, inline="always")
def _unplaced_by_offset(off: np.ndarray, minoff: np.ndarray, F: np.ndarray, d: int, pst: np.ndarray,
                        ost: np.ndarray) -> tuple[np.ndarray, int]:
    """The parent's candidates still unplaced, as keys ``lowest offset * partition size + position`` sorted
    ascending (the first ``k`` entries): lowest offset first, then the static pre-order."""
    M = F[PLEN, d]
    cand = np.empty(F[NPREV, d], np.int64)
    k = 0
    for x in range(F[NPREV, d]):
        p = ost[F[PREV, d] + x]
        b = pst[F[PART, d] + p]
        if off[b] < 0:
            cand[k] = minoff[b] * M + p
            k += 1
    for x in range(1, k):  # insertion sort: the parent's order is nearly this one
        c = cand[x]
        y = x - 1
        while y >= 0 and cand[y] > c:
            cand[y + 1] = cand[y]
            y -= 1
        cand[y + 1] = c
    return cand, k


@njit(cache=True, inline="always")
def _set_candidates(size_a: np.ndarray, raw: np.ndarray, partnered: np.ndarray, bank: int, F: np.ndarray, d: int,
                    pst: np.ndarray, ost: np.ndarray, otop: int, cand: np.ndarray, k: int) -> int:
    """The NODE's ``k`` candidates onto ``ost`` from ``otop``, its cursor on the first, and its dominance
    height (the lowest end of any of them at its lowest offset): the new top of ``ost``.  With none (the
    partition is packed, the frame pops) it writes only fields that are not read again."""
    M = F[PLEN, d]
    lowest = _INF
    for x in range(k):
        p = cand[x] % M
        ost[otop + x] = p
        q = pst[F[PART, d] + p]
        h = _dominance_height(size_a[q], raw[q], partnered[q] != 0, bank, cand[x] // M)
        if h < lowest:
            lowest = h
    F[CANDS, d] = otop
    F[NCANDS, d] = k
    F[LOWEST, d] = lowest
    F[CUR, d] = 0
    return otop + k


_TRY, _SKIP, _STOP = 0, 1, 2


@njit(cache=True, inline="always")
def _verdict(o: int, p: int, minoff: int, minpre: int, lowest: int, maxoff: int, fixed: int) -> int:
    """What to do with a candidate at position ``p`` whose lowest offset is ``o``: skip it when it lies below
    the parent's placement (``minoff``, ``minpre``: not canonical) or cannot go at ``o`` (past its top limit,
    off its pinned offset); stop at the dominance height ``lowest`` (so is every candidate after it); else
    try it.  Scalars only, so that it costs no reference counting (see the module docstring)."""
    if o < minoff or (o == minoff and p < minpre):
        return _SKIP
    if o >= lowest:
        return _STOP
    if o > maxoff or (fixed >= 0 and o != fixed):
        return _SKIP
    return _TRY


@njit(cache=True, inline="always")
def _free_cuts(hull_lo: np.ndarray, hull_hi: np.ndarray, cuts: np.ndarray, b: int, cst: np.ndarray, ctop: int
               ) -> int:
    """Take the placed ``b`` off the cuts its hull crosses; the cuts no unplaced buffer crosses any more (where
    the partition splits) go on ``cst`` from ``ctop``: how many."""
    nc = 0
    for s in range(hull_lo[b], hull_hi[b] - 1):
        cuts[s] -= 1
        if cuts[s] == 0:
            cst[ctop + nc] = s + 1
            nc += 1
    return nc


@njit(cache=True, inline="always")
def _push_child(F: np.ndarray, d: int, o: int, p: int, nc: int, decompose: bool, otop: int, ptop: int, ctop: int
                ) -> int:
    """The frame under the placement NODE ``d`` just made at ``o``: a NODE over the same partition, above it
    in the canonical order, or a SPLIT at the ``nc`` cuts it freed (on ``cst`` from ``ctop``): the new top
    of ``cst``."""
    F[CUTDONE, d] = decompose
    e = d + 1
    _push(F, e, NODE if nc == 0 else SPLIT, F[PART, d], F[PLEN, d], F[LO, d], F[HI, d], otop, ptop, ctop)
    if nc == 0:
        F[PREV, e] = F[CANDS, d]
        F[NPREV, e] = F[NCANDS, d]
        F[MINOFF, e] = o
        F[MINPRE, e] = p
    else:
        F[CUT, e] = ctop
        F[NCUT, e] = nc
        F[CUR, e] = 0
        F[R0, e] = F[LO, d]
    return ctop + nc


@njit(cache=True, inline="always")
def _next_sibling(F: np.ndarray, d: int) -> None:
    """After NODE ``d``'s placement failed below: on to its next candidate, or past them all when the buffer
    was hatless (nothing unplaced could lie on it, so its siblings fail too)."""
    if F[HATLESS, d]:
        F[CUR, d] = F[NCANDS, d]
    else:
        F[CUR, d] += 1


@njit(cache=True)
def _stacks(n: int, S: int, n_nb: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                 np.ndarray, np.ndarray, np.ndarray]:
    """The shared stacks of :func:`search`, empty: the candidates of the NODE frames (``ost``), the partitions
    in their static order (``pst``), the cut points of the SPLIT frames (``cst``), the log of lowest offsets
    raised (``mlog``: buffer, value before), the log of floors raised (``slog``: section, value before), and
    the sections a placement touched.  The search grows ``ost``, ``pst``, ``cst`` and ``slog`` as needed."""
    return (np.empty(max(8 * n, 64), np.int64), np.empty(max(4 * n, 64), np.int64), np.empty(max(2 * S, 64), np.int64),
            np.empty(max(n_nb, 16), np.int64), np.empty(max(n_nb, 16), np.int64),
            np.empty(max(4 * S, 64), np.int64), np.empty(max(4 * S, 64), np.int64), np.empty(max(S, 1), np.int64))


@njit(cache=True)
def search(G: Instance, W: State, heuristic: int, decompose: bool) -> int:
    """One complete search in one static order, from scratch; FOUND leaves the packing in ``W.sol``.

    Depth-first over a stack of frames (``F``'s columns): a NODE places the next buffer of a partition, trying
    its candidates in order; a SPLIT solves in turn the partitions a placement separated.  The candidates are
    tried here, not in a helper that would take the tuples, and the stacks grow here (module docstring)."""
    if not _reset(G, W):
        return NOT_FOUND  # the section bound or the bank bound: proven without a single placement
    n, S, most = len(G.size_a), len(G.total0), _max_sections(G)
    F = np.zeros((FRESH + 1, 2 * n + 4), np.int64)  # at most two frames per buffer deep, past the root
    ost, pst, cst, mlog_b, mlog_v, slog_s, slog_v, touched = _stacks(n, S, len(G.nb_idx))
    otop = mtop = stop = d = 0
    ptop, ctop = _push_root(W.cuts, F, pst, cst, n, S, decompose)
    ret = FOUND
    while True:
        if F[KIND, d] == SPLIT:
            if F[FRESH, d] or ret == FOUND:  # (else a partition has no packing: neither has the whole)
                F[FRESH, d] = 0
                pst = _grow(pst, F[PBASE, d] + F[PLEN, d])
                ks, r0, r1 = _next_range(G.hull_lo, G.hull_hi, W.off, F, d, pst, cst)
                if ks > 0:
                    pst[F[PBASE, d]:F[PBASE, d] + ks] = _preorder(G, W, pst[F[PBASE, d]:F[PBASE, d] + ks], heuristic)
                    ost = _grow(ost, F[OBASE, d] + ks)
                    otop, ptop = _push_range(F, d, ost, ks, r0, r1, ctop)
                    d += 1
                    continue
                ret = FOUND  # every partition packed
            if d == 0:
                return ret
        else:
            if F[FRESH, d]:
                F[FRESH, d] = 0
                if not _count_node(W.ctr, W.deadline):
                    return CUT_SHORT
                cand, k = _unplaced_by_offset(W.off, W.minoff, F, d, pst, ost)
                ost = _grow(ost, otop + k)
                otop = _set_candidates(G.size_a, G.raw, G.partnered, G.bank, F, d, pst, ost, otop, cand, k)
                ret = FOUND if k == 0 else NOT_FOUND  # (FOUND: every buffer of the partition is placed)
            else:  # back from the child of the buffer placed here
                _undo(G, W, F[BUF, d], mlog_b, mlog_v, mtop, F[M0, d], slog_s, slog_v, stop, F[S0, d],
                      F[CUTDONE, d] != 0)
                mtop, stop, F[BUF, d] = F[M0, d], F[S0, d], -1
                if ret == NOT_FOUND:
                    _next_sibling(F, d)
            if ret == NOT_FOUND:
                slog_s = _grow(slog_s, stop + most + F[HI, d] - F[LO, d])  # room for any one placement
                slog_v = _grow(slog_v, stop + most + F[HI, d] - F[LO, d])
                b = o = p = -1
                while F[CUR, d] < F[NCANDS, d]:  # the candidates from the cursor on, until a placement holds
                    p = ost[F[CANDS, d] + F[CUR, d]]
                    q = pst[F[PART, d] + p]
                    o = W.minoff[q]
                    verdict = _verdict(o, p, F[MINOFF, d], F[MINPRE, d], F[LOWEST, d], G.maxoff[q], G.fixed[q])
                    if verdict == _STOP:
                        break
                    if verdict == _TRY:
                        m0, s0 = mtop, stop
                        failed, hatless, mtop, stop = _place(G, W, q, o, F[LO, d], F[HI, d], mlog_b, mlog_v, mtop,
                                                             slog_s, slog_v, stop, touched)
                        if not failed:
                            b, F[BUF, d], F[M0, d], F[S0, d], F[HATLESS, d] = q, q, m0, s0, hatless
                            break
                        _undo(G, W, q, mlog_b, mlog_v, mtop, m0, slog_s, slog_v, stop, s0, False)
                        mtop, stop = m0, s0
                        if hatless:
                            break  # nothing unplaced could lie on it: its siblings fail too
                    F[CUR, d] += 1
                if b >= 0:
                    nc = 0
                    if decompose:
                        cst = _grow(cst, ctop + G.hull_hi[b] - G.hull_lo[b])
                        nc = _free_cuts(G.hull_lo, G.hull_hi, W.cuts, b, cst, ctop)
                    ctop = _push_child(F, d, o, p, nc, decompose, otop, ptop, ctop)
                    d += 1
                    continue
                W.ctr[1] += 1  # a backtrack
        otop, ptop, ctop = F[OBASE, d], F[PBASE, d], F[CBASE, d]  # pop the frame with ret
        d -= 1

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
        kind = G.nb_kind[j]
        h = o + G.size_a[b] if kind & 1 else 0
        if kind & 2:
            hb = ((o + G.raw[b] - 1) // G.bank + 1) * G.bank
            if hb > h:
                h = hb
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
    W.ctr[4] += 1
    stamp = W.ctr[4]
    nt = 0
    for x in range(m0, mtop):  # the sections of the neighbours that moved
        q = mlog_b[x]
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
    for s in range(lo, hi):  # cross-section inference (everything still to place lies above o)
        t = W.total[s]
        if t > 0:
            f = W.floor[s]
            if f < o:
                f = o
            if f + t > G.cap_a:
                return True, hatless, mtop, stop
    return False, hatless, mtop, stop


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


@njit(cache=True)
def search(G: Instance, W: State, heuristic: int, decompose: bool) -> int:
    """One complete search in one static order, from scratch; FOUND leaves the packing in ``W.sol``.

    Depth-first with an explicit stack of frames.  A NODE frame chooses the next buffer of a partition
    (its candidates, in order of lowest offset then pre-order, live on ``ost``); a SPLIT frame solves the
    partitions a placement separated, one after the other.  A frame frees what it pushed on the shared
    stacks when it is popped, and a placement is undone from the logs before its next sibling is tried.
    """
    n = len(G.size_a)
    S = len(G.total0)
    ctr = W.ctr
    for b in range(n):
        W.off[b] = -1
        W.sol[b] = -1
        W.minoff[b] = G.fixed[b] if G.fixed[b] >= 0 else 0
    for s in range(S):
        W.total[s] = G.total0[s]
        m = _INF
        for x in range(G.sec_ptr[s], G.sec_ptr[s + 1]):
            if W.minoff[G.sec_mem[x]] < m:
                m = W.minoff[G.sec_mem[x]]
        W.floor[s] = m if m != _INF else 0
        if W.floor[s] + W.total[s] > G.cap_a:
            return NOT_FOUND  # the section bound: proven without a single placement
    for c in range(len(G.cl_ptr) - 1):
        if not _clique_fits(G, W, c, 0):
            return NOT_FOUND  # the bank bound, likewise
    for s in range(S - 1):
        W.cuts[s] = G.cuts0[s]
    D = 2 * n + 4
    f_kind = np.zeros(D, np.int64)
    f_part = np.zeros(D, np.int64)  # the partition: a slice of pst
    f_plen = np.zeros(D, np.int64)
    f_lo = np.zeros(D, np.int64)
    f_hi = np.zeros(D, np.int64)
    f_prev = np.zeros(D, np.int64)  # NODE: the parent's candidates (positions in the partition), a slice of ost
    f_prevlen = np.zeros(D, np.int64)
    f_ord = np.zeros(D, np.int64)  # NODE: its own candidates, a slice of ost
    f_ordlen = np.zeros(D, np.int64)
    f_i = np.zeros(D, np.int64)  # NODE: candidate being tried; SPLIT: next range
    f_minoff = np.zeros(D, np.int64)
    f_minpre = np.zeros(D, np.int64)
    f_lowest = np.zeros(D, np.int64)
    f_b = np.full(D, -1, np.int64)  # NODE: buffer placed now (-1: none)
    f_m0 = np.zeros(D, np.int64)
    f_s0 = np.zeros(D, np.int64)
    f_hatless = np.zeros(D, np.bool_)
    f_cutdone = np.zeros(D, np.bool_)
    f_r0 = np.zeros(D, np.int64)  # SPLIT: start of the next range
    f_cut = np.zeros(D, np.int64)  # SPLIT: its cut points, a slice of cst
    f_ncut = np.zeros(D, np.int64)
    f_obase = np.zeros(D, np.int64)  # stack tops when the frame was pushed: restored when it is popped
    f_pbase = np.zeros(D, np.int64)
    f_cbase = np.zeros(D, np.int64)
    f_fresh = np.zeros(D, np.bool_)
    ost = np.empty(max(8 * n, 64), np.int64)
    pst = np.empty(max(4 * n, 64), np.int64)
    cst = np.empty(max(2 * S, 64), np.int64)
    mlog_b = np.empty(max(len(G.nb_idx), 16), np.int64)
    mlog_v = np.empty(max(len(G.nb_idx), 16), np.int64)
    slog_s = np.empty(max(4 * S, 64), np.int64)
    slog_v = np.empty(max(4 * S, 64), np.int64)
    touched = np.empty(max(S, 1), np.int64)
    otop = ptop = ctop = mtop = stop = 0
    # the root: a SPLIT over every section, at the cuts no buffer crosses
    for b in range(n):
        pst[b] = b
    ptop = n
    nc = 0
    if decompose:
        for s in range(S - 1):
            if W.cuts[s] == 0:
                cst[nc] = s + 1
                nc += 1
    ctop = nc
    d = 0
    f_kind[0] = SPLIT
    f_part[0] = 0
    f_plen[0] = n
    f_lo[0] = 0
    f_hi[0] = S
    f_cut[0] = 0
    f_ncut[0] = nc
    f_i[0] = 0
    f_r0[0] = 0
    f_obase[0] = 0
    f_pbase[0] = ptop
    f_cbase[0] = 0
    f_fresh[0] = True
    ret = FOUND
    while True:
        if f_kind[d] == SPLIT:
            if not f_fresh[d] and ret != FOUND:
                pass  # a partition has no packing: neither has the whole
            else:
                f_fresh[d] = False
                pushed = False
                while f_i[d] <= f_ncut[d]:
                    otop = f_obase[d]  # the previous range's partition is done with
                    ptop = f_pbase[d]
                    r0 = f_r0[d]
                    r1 = cst[f_cut[d] + f_i[d]] if f_i[d] < f_ncut[d] else f_hi[d]
                    f_i[d] += 1
                    f_r0[d] = r1
                    pst = _grow(pst, ptop + f_plen[d])
                    ks = 0
                    for x in range(f_plen[d]):
                        q = pst[f_part[d] + x]
                        if W.off[q] < 0 and G.hull_lo[q] < r1 and r0 < G.hull_hi[q]:
                            pst[ptop + ks] = q
                            ks += 1
                    if ks == 0:
                        continue
                    pst[ptop:ptop + ks] = _preorder(G, W, pst[ptop:ptop + ks], heuristic)
                    ost = _grow(ost, otop + ks)
                    for x in range(ks):
                        ost[otop + x] = x
                    e = d + 1
                    f_kind[e] = NODE
                    f_part[e] = ptop
                    f_plen[e] = ks
                    f_lo[e] = r0
                    f_hi[e] = r1
                    f_prev[e] = otop
                    f_prevlen[e] = ks
                    f_minoff[e] = 0
                    f_minpre[e] = -1
                    f_b[e] = -1
                    f_fresh[e] = True
                    ptop += ks
                    otop += ks
                    f_obase[e] = otop
                    f_pbase[e] = ptop
                    f_cbase[e] = ctop
                    d = e
                    pushed = True
                    break
                if pushed:
                    continue
                ret = FOUND  # every partition packed
            if d == 0:
                return ret
            otop = f_obase[d]
            ptop = f_pbase[d]
            ctop = f_cbase[d]
            d -= 1
            continue
        # a NODE
        if f_fresh[d]:
            f_fresh[d] = False
            if ctr[0] <= 0 or ctr[6] <= 0:
                return CUT_SHORT
            ctr[0] -= 1
            ctr[2] += 1
            if W.deadline[0] > 0 and ctr[5] >= ctr[7]:
                ctr[7] = ctr[5] + 1024
                with objmode(now="float64"):
                    now = time.perf_counter()
                if now > W.deadline[0]:
                    ctr[3] = 1
                    ctr[0] = 0
                    return CUT_SHORT
            M = f_plen[d]
            cand = np.empty(f_prevlen[d], np.int64)
            k = 0
            for x in range(f_prevlen[d]):
                p = ost[f_prev[d] + x]
                b = pst[f_part[d] + p]
                if W.off[b] < 0:
                    cand[k] = W.minoff[b] * M + p
                    k += 1
            if k == 0:
                ret = FOUND
            else:
                for x in range(1, k):  # insertion sort: the parent's order is nearly this one
                    c = cand[x]
                    y = x - 1
                    while y >= 0 and cand[y] > c:
                        cand[y + 1] = cand[y]
                        y -= 1
                    cand[y + 1] = c
                ost = _grow(ost, otop + k)
                lowest = _INF
                for x in range(k):
                    p = cand[x] % M
                    ost[otop + x] = p
                    q = pst[f_part[d] + p]
                    h = _dominance_height(G.size_a[q], G.raw[q], G.partnered[q] != 0, G.bank, cand[x] // M)
                    if h < lowest:
                        lowest = h
                f_ord[d] = otop
                f_ordlen[d] = k
                otop += k
                f_lowest[d] = lowest
                f_i[d] = 0
                ret = NOT_FOUND
        else:  # back from the child of the buffer placed here
            b = f_b[d]
            _undo(G, W, b, mlog_b, mlog_v, mtop, f_m0[d], slog_s, slog_v, stop, f_s0[d], f_cutdone[d])
            mtop = f_m0[d]
            stop = f_s0[d]
            f_b[d] = -1
            if ret == NOT_FOUND:
                if f_hatless[d]:
                    f_i[d] = f_ordlen[d]
                else:
                    f_i[d] += 1
        if ret == NOT_FOUND:  # (FOUND: every buffer of the partition is placed; pop)
            pushed = False
            while f_i[d] < f_ordlen[d]:
                p = ost[f_ord[d] + f_i[d]]
                b = pst[f_part[d] + p]
                o = W.minoff[b]
                if o < f_minoff[d] or (o == f_minoff[d] and p < f_minpre[d]):
                    f_i[d] += 1
                    continue
                if o >= f_lowest[d]:
                    break
                if o > G.maxoff[b] or (G.fixed[b] >= 0 and o != G.fixed[b]):
                    f_i[d] += 1
                    continue
                lo = f_lo[d]
                hi = f_hi[d]
                nsec = 0
                for r in range(G.bs_ptr[b], G.bs_ptr[b + 1]):
                    nsec += G.bs_hi[r] - G.bs_lo[r]
                slog_s = _grow(slog_s, stop + nsec + hi - lo)
                slog_v = _grow(slog_v, stop + nsec + hi - lo)
                m0 = mtop
                s0 = stop
                failed, hatless, mtop, stop = _place(G, W, b, o, lo, hi, mlog_b, mlog_v, mtop, slog_s, slog_v,
                                                     stop, touched)
                if failed:
                    _undo(G, W, b, mlog_b, mlog_v, mtop, m0, slog_s, slog_v, stop, s0, False)
                    mtop = m0
                    stop = s0
                    if hatless:
                        break
                    f_i[d] += 1
                    continue
                f_b[d] = b
                f_m0[d] = m0
                f_s0[d] = s0
                f_hatless[d] = hatless
                nc = 0
                if decompose:
                    cst = _grow(cst, ctop + G.hull_hi[b] - G.hull_lo[b])
                    for s in range(G.hull_lo[b], G.hull_hi[b] - 1):
                        W.cuts[s] -= 1
                        if W.cuts[s] == 0:
                            cst[ctop + nc] = s + 1
                            nc += 1
                f_cutdone[d] = decompose
                e = d + 1
                f_part[e] = f_part[d]
                f_plen[e] = f_plen[d]
                f_lo[e] = lo
                f_hi[e] = hi
                f_fresh[e] = True
                f_b[e] = -1
                f_obase[e] = otop
                f_pbase[e] = ptop
                f_cbase[e] = ctop
                if nc == 0:
                    f_kind[e] = NODE
                    f_prev[e] = f_ord[d]
                    f_prevlen[e] = f_ordlen[d]
                    f_minoff[e] = o
                    f_minpre[e] = p
                else:
                    f_kind[e] = SPLIT
                    f_cut[e] = ctop
                    f_ncut[e] = nc
                    f_i[e] = 0
                    f_r0[e] = lo
                    ctop += nc
                d = e
                pushed = True
                break
            if pushed:
                continue
            ret = NOT_FOUND
            ctr[1] += 1
        # pop this NODE with ret
        otop = f_obase[d]
        ptop = f_pbase[d]
        ctop = f_cbase[d]
        d -= 1

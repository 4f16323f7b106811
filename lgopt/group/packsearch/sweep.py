"""From a problem to the arrays the search runs on: cross sections, overlaps, hulls and cuts.

A *cross section* is the set of buffers live just before some buffer's lifetime ends: every set of
buffers live together at one instant is contained in one of them, so they are all the search needs to
bound what is left to place (MiniMalloc's sweep builds the same sets).  Each buffer covers a run of
sections per time span (a wrap-around lifetime covers two runs); its *hull* is the first to the last
section it covers, widened to its hard bank partners' hulls so that a buffer and its partners always
fall into the same sub-problem when the search splits at a cut.  The *cut* after section ``s`` counts
the unplaced buffers whose hull crosses from ``s`` into ``s + 1``: where it is zero, what lies left of
the cut and what lies right of it no longer interact and are solved one after the other.

A buffer that is never live still needs an offset (and its bank, if it has partners): it gets a time
slot of its own after every other, so the search treats it like any other buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lgopt.group.packsearch.core import Instance
from lgopt.group.packsearch.problem import PackProblem, Span, aligned


@dataclass(frozen=True)
class Swept:
    """The search's static arrays (``instance``) and what the driver needs besides."""

    instance: Instance
    sections: int
    infeasible_why: str | None  # set when the problem fails before any search (a buffer cannot fit at all)


def merged_spans(spans: tuple[Span, ...]) -> list[Span]:
    """A buffer's spans sorted, with overlapping or touching ones joined (the same lifetime, fewer pieces)."""
    out: list[list[int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def sweep(problem: PackProblem) -> Swept:
    items = problem.items
    n = len(items)
    align, cap = problem.align, problem.capacity
    spans = [merged_spans(it.spans) for it in items]
    t_end = max((e for sp in spans for _, e in sp), default=0)
    for sp in spans:  # never live: a private slot after everything else
        if not sp:
            sp.append((t_end, t_end + 1))
            t_end += 1
    ends = np.array(sorted({e for sp in spans for _, e in sp}), dtype=np.int64)
    S = len(ends)
    size_a = np.array([aligned(it.size, align) for it in items], dtype=np.int64)
    raw = np.array([max(it.size, 1) for it in items], dtype=np.int64)
    maxoff = np.array([(cap - it.size) // align * align for it in items], dtype=np.int64)
    fixed = np.array([-1 if it.fixed is None else it.fixed for it in items], dtype=np.int64)
    width = np.array([sum(e - s for s, e in sp) for sp in spans], dtype=np.int64)
    lower = np.array([sp[0][0] for sp in spans], dtype=np.int64)

    # section runs per buffer: span [s, e) is live just before end time E iff s < E <= e
    bs_ptr = np.zeros(n + 1, dtype=np.int64)
    runs: list[tuple[int, int]] = []
    incidence = np.zeros((n, S), dtype=np.int32)
    for k, sp in enumerate(spans):
        for s, e in sp:
            lo = int(np.searchsorted(ends, s, side="right"))
            hi = int(np.searchsorted(ends, e, side="right"))
            runs.append((lo, hi))
            incidence[k, lo:hi] = 1
        bs_ptr[k + 1] = len(runs)
    bs_lo = np.array([r[0] for r in runs], dtype=np.int64)
    bs_hi = np.array([r[1] for r in runs], dtype=np.int64)
    sec_of, sec_mem = (x.astype(np.int64) for x in np.nonzero(incidence.T))  # by section, then buffer
    sec_ptr = np.zeros(S + 1, dtype=np.int64)
    sec_ptr[1:] = np.cumsum(np.bincount(sec_of, minlength=S))
    total = np.zeros(S, dtype=np.int64)
    np.add.at(total, sec_of, size_a[sec_mem])

    # neighbours: live together (bit 1) and/or a hard bank pair (bit 2)
    together = np.zeros((n, n), dtype=bool)  # section by section: an integer matrix product of the
    for s in range(S):  # incidence took 15 ms on 230 buffers, a float one hands the work to BLAS threads
        m = sec_mem[sec_ptr[s]:sec_ptr[s + 1]]
        together[np.ix_(m, m)] = True
    kind = together.astype(np.int64)
    np.fill_diagonal(kind, 0)
    index = {it.id: k for k, it in enumerate(items)}
    partnered = np.zeros(n, dtype=np.int64)
    for a, b in problem.hard_pairs:
        i, j = index[a], index[b]
        kind[i, j] |= 2
        kind[j, i] |= 2
        partnered[i] = partnered[j] = 1
    nb_of, nb_idx = (x.astype(np.int64) for x in np.nonzero(kind))  # row by row, in column order
    nb_kind = kind[nb_of, nb_idx].astype(np.int64)
    nb_ptr = np.zeros(n + 1, dtype=np.int64)
    nb_ptr[1:] = np.cumsum(np.bincount(nb_of, minlength=n))

    # array operations rather than a loop per buffer: the sweep runs before every search, and on
    # lgopt's larger groups it cost as much as the search's first slice
    hull_lo = np.minimum.reduceat(bs_lo, bs_ptr[:-1]) if n else np.zeros(0, dtype=np.int64)
    hull_hi = np.maximum.reduceat(bs_hi, bs_ptr[:-1]) if n else np.zeros(0, dtype=np.int64)
    wide_lo, wide_hi = hull_lo.copy(), hull_hi.copy()
    pi, pj = np.nonzero(kind & 2)  # a buffer's hull covers its partners', so a cut never separates a pair
    np.minimum.at(wide_lo, pi, hull_lo[pj])
    np.maximum.at(wide_hi, pi, hull_hi[pj])
    crossing = wide_hi - wide_lo >= 2
    cross = np.zeros(S + 1, dtype=np.int64)  # cut s: hull covers s and s + 1
    np.add.at(cross, wide_lo[crossing], 1)
    np.add.at(cross, wide_hi[crossing] - 1, -1)
    cuts = np.cumsum(cross)[:max(S - 1, 0)].astype(np.int64)

    cliques = bank_cliques(n, [(index[a], index[b]) for a, b in problem.hard_pairs], raw)
    cl_ptr = np.zeros(len(cliques) + 1, dtype=np.int64)
    cl_ptr[1:] = np.cumsum([len(c) for c in cliques])
    cl_mem = np.array([k for c in cliques for k in c], dtype=np.int64)
    B = problem.bank_bytes if problem.hard_pairs else 0
    of: list[list[int]] = [[] for _ in range(n)]
    for ci, clique in enumerate(cliques):
        for k in clique:
            of[k].append(ci)
    bc_ptr = np.zeros(n + 1, dtype=np.int64)
    bc_ptr[1:] = np.cumsum([len(x) for x in of])
    bc_idx = np.array([c for x in of for c in x], dtype=np.int64)
    need = -(-raw // B) if B else np.zeros(n, dtype=np.int64)

    why = None
    bad = [it.id for k, it in enumerate(items) if maxoff[k] < 0 or (fixed[k] > maxoff[k])]
    if bad:
        why = f"buffer {bad[0]} does not fit in {cap} bytes" + (" at its pinned offset" if fixed[index[bad[0]]] >= 0
                                                                 else "")
    inst = Instance(size_a=size_a, raw=raw, maxoff=maxoff, fixed=fixed, partnered=partnered,
                    bank=problem.bank_bytes if problem.hard_pairs else 0, align=align,
                    cap_a=aligned(cap, align), width=width, lower=lower,
                    nb_ptr=nb_ptr, nb_idx=nb_idx, nb_kind=nb_kind, bs_ptr=bs_ptr, bs_lo=bs_lo, bs_hi=bs_hi,
                    sec_ptr=sec_ptr, sec_mem=sec_mem, hull_lo=wide_lo, hull_hi=wide_hi,
                    total0=total.astype(np.int64), cuts0=cuts, cl_ptr=cl_ptr, cl_mem=cl_mem,
                    need=need.astype(np.int64), bc_ptr=bc_ptr, bc_idx=bc_idx, n_banks=n_banks(cap, B))
    if why is None and B:
        for c in cliques:
            if int(need[c].sum()) > n_banks(cap, B):
                why = (f"buffers {', '.join(items[k].id for k in c)} must sit in separate banks: they need "
                       f"{int(need[c].sum())} banks of {B} bytes, the capacity has {n_banks(cap, B)}")
                break
    return Swept(inst, S, why)


def n_banks(capacity: int, bank: int) -> int:
    """Banks a buffer in ``[0, capacity)`` may touch."""
    return -(-capacity // bank) if bank else 0


def bank_cliques(n: int, pairs: list[tuple[int, int]], raw: np.ndarray) -> list[list[int]]:
    """Cliques of the hard-partner graph that cover every pair: each grown greedily from one of its pairs,
    largest partners first (in lgopt, the operands of one op form one).  Their bank demands are what the
    search bounds; any cover is sound, a larger clique only bounds more."""
    adj: list[set[int]] = [set() for _ in range(n)]
    for i, j in pairs:
        adj[i].add(j)
        adj[j].add(i)
    covered: set[tuple[int, int]] = set()
    out: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    for i, j in sorted((min(p), max(p)) for p in pairs):
        if (i, j) in covered:
            continue
        clique = [i, j]
        for k in sorted(adj[i] & adj[j], key=lambda k: (-int(raw[k]), k)):
            if all(k in adj[x] for x in clique):
                clique.append(k)
        key = tuple(sorted(clique))
        for x in key:
            for y in key:
                if x < y:
                    covered.add((x, y))
        if key not in seen:
            seen.add(key)
            out.append(list(key))
    return out

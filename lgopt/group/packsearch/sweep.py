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
    """The search's arrays for ``problem``, and why it has no packing when a buffer alone proves it."""
    items = problem.items
    n = len(items)
    align, cap = problem.align, problem.capacity
    spans, ends = _timeline(problem)
    S = len(ends)
    size_a = np.array([aligned(it.size, align) for it in items], dtype=np.int64)
    raw = np.array([max(it.size, 1) for it in items], dtype=np.int64)
    maxoff = np.array([(cap - it.size) // align * align for it in items], dtype=np.int64)
    fixed = np.array([-1 if it.fixed is None else it.fixed for it in items], dtype=np.int64)
    width = np.array([sum(e - s for s, e in sp) for sp in spans], dtype=np.int64)
    lower = np.array([sp[0][0] for sp in spans], dtype=np.int64)
    bs_ptr, bs_lo, bs_hi, sec_ptr, sec_mem, total = _sections(spans, ends, size_a)
    index = {it.id: k for k, it in enumerate(items)}
    kind, partnered = _neighbour_kinds(problem, index, sec_ptr, sec_mem)
    nb_of, nb_idx = (x.astype(np.int64) for x in np.nonzero(kind))  # row by row, in column order
    nb_kind = kind[nb_of, nb_idx].astype(np.int64)
    nb_ptr = np.zeros(n + 1, dtype=np.int64)
    nb_ptr[1:] = np.cumsum(np.bincount(nb_of, minlength=n))
    wide_lo, wide_hi, cuts = _hulls_and_cuts(bs_ptr, bs_lo, bs_hi, kind, S)
    cliques = bank_cliques(n, [(index[a], index[b]) for a, b in problem.hard_pairs], raw)
    cl_ptr, cl_mem, bc_ptr, bc_idx = _clique_arrays(n, cliques)
    B = problem.bank_bytes if problem.hard_pairs else 0
    need = -(-raw // B) if B else np.zeros(n, dtype=np.int64)
    inst = Instance(size_a=size_a, raw=raw, maxoff=maxoff, fixed=fixed, partnered=partnered,
                    bank=problem.bank_bytes if problem.hard_pairs else 0, align=align,
                    cap_a=aligned(cap, align), width=width, lower=lower,
                    nb_ptr=nb_ptr, nb_idx=nb_idx, nb_kind=nb_kind, bs_ptr=bs_ptr, bs_lo=bs_lo, bs_hi=bs_hi,
                    sec_ptr=sec_ptr, sec_mem=sec_mem, hull_lo=wide_lo, hull_hi=wide_hi,
                    total0=total.astype(np.int64), cuts0=cuts, cl_ptr=cl_ptr, cl_mem=cl_mem,
                    need=need.astype(np.int64), bc_ptr=bc_ptr, bc_idx=bc_idx, n_banks=n_banks(cap, B))
    return Swept(inst, S, _infeasible_why(problem, index, maxoff, fixed, cliques, need, B))


def _timeline(problem: PackProblem) -> tuple[list[list[Span]], np.ndarray]:
    """Each buffer's merged spans (a buffer never live gets a private slot after everything else) and the
    section end times: the distinct ends of all spans, sorted."""
    spans = [merged_spans(it.spans) for it in problem.items]
    t_end = max((e for sp in spans for _, e in sp), default=0)
    for sp in spans:  # never live: a private slot after everything else
        if not sp:
            sp.append((t_end, t_end + 1))
            t_end += 1
    ends = np.array(sorted({e for sp in spans for _, e in sp}), dtype=np.int64)
    return spans, ends


def _sections(spans: list[list[Span]], ends: np.ndarray, size_a: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Which sections each buffer covers (runs, CSR ``bs_ptr``/``bs_lo``/``bs_hi``), the members of each
    section (CSR ``sec_ptr``/``sec_mem``) and each section's aligned bytes."""
    n, S = len(spans), len(ends)
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
    return bs_ptr, bs_lo, bs_hi, sec_ptr, sec_mem, total


def _neighbour_kinds(problem: PackProblem, index: dict[str, int], sec_ptr: np.ndarray, sec_mem: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The neighbour matrix: bit 1 where two buffers are live together, bit 2 where they are a hard bank
    pair; and which buffers have a hard partner."""
    n, S = len(problem.items), len(sec_ptr) - 1
    together = np.zeros((n, n), dtype=bool)  # section by section: an integer matrix product of the
    for s in range(S):  # incidence took 15 ms on 230 buffers, a float one hands the work to BLAS threads
        m = sec_mem[sec_ptr[s]:sec_ptr[s + 1]]
        together[np.ix_(m, m)] = True
    kind = together.astype(np.int64)
    np.fill_diagonal(kind, 0)
    partnered = np.zeros(n, dtype=np.int64)
    for a, b in problem.hard_pairs:
        i, j = index[a], index[b]
        kind[i, j] |= 2
        kind[j, i] |= 2
        partnered[i] = partnered[j] = 1
    return kind, partnered


def _hulls_and_cuts(bs_ptr: np.ndarray, bs_lo: np.ndarray, bs_hi: np.ndarray, kind: np.ndarray, S: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each buffer's hull (first section, one past the last), widened to its hard partners' hulls, and the
    number of hulls crossing each cut between sections.

    Array operations rather than a loop per buffer: the sweep runs before every search, and on lgopt's
    larger groups it cost as much as the search's first slice."""
    n = len(bs_ptr) - 1
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
    return wide_lo, wide_hi, cuts


def _clique_arrays(n: int, cliques: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The bank cliques as CSR arrays: the members of each (``cl_ptr``/``cl_mem``) and the cliques of each
    buffer (``bc_ptr``/``bc_idx``)."""
    cl_ptr = np.zeros(len(cliques) + 1, dtype=np.int64)
    cl_ptr[1:] = np.cumsum([len(c) for c in cliques])
    cl_mem = np.array([k for c in cliques for k in c], dtype=np.int64)
    of: list[list[int]] = [[] for _ in range(n)]
    for ci, clique in enumerate(cliques):
        for k in clique:
            of[k].append(ci)
    bc_ptr = np.zeros(n + 1, dtype=np.int64)
    bc_ptr[1:] = np.cumsum([len(x) for x in of])
    bc_idx = np.array([c for x in of for c in x], dtype=np.int64)
    return cl_ptr, cl_mem, bc_ptr, bc_idx


def _infeasible_why(problem: PackProblem, index: dict[str, int], maxoff: np.ndarray, fixed: np.ndarray,
                    cliques: list[list[int]], need: np.ndarray, B: int) -> str | None:
    """Why no packing exists before any search: a buffer that fits nowhere (or not at its pinned offset), or
    a bank clique that needs more banks than the capacity has; None when neither."""
    items, cap = problem.items, problem.capacity
    bad = [it.id for k, it in enumerate(items) if maxoff[k] < 0 or (fixed[k] > maxoff[k])]
    if bad:
        return f"buffer {bad[0]} does not fit in {cap} bytes" + (" at its pinned offset" if fixed[index[bad[0]]] >= 0
                                                                   else "")
    if B:
        for c in cliques:
            if int(need[c].sum()) > n_banks(cap, B):
                return (f"buffers {', '.join(items[k].id for k in c)} must sit in separate banks: they need "
                        f"{int(need[c].sum())} banks of {B} bytes, the capacity has {n_banks(cap, B)}")
    return None


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

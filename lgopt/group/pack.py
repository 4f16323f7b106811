"""Exact LMEM packing with CP-SAT: offsets for buffers with fixed lifetimes.

A buffer is a rectangle that may slide along the address axis only: its time
spans are fixed (a wrap-around lifetime is two spans sharing one offset), its
size is fixed, its offset is a variable.  ``AddNoOverlap2D`` forbids two live
buffers from sharing bytes.  Offsets and sizes are counted in alignment units,
so every offset is aligned by construction.  Bank rules are optional: pairs
that should not share a bank either must not (``hard``) or pay one unit of a
secondary objective each time they do (``soft``).

The same packer reads the static-allocation benchmark format that MiniMalloc
and the TelaMalloc/IREE suites use (CSV ``id,lower,upper,size``; a buffer lives
on ``[lower, upper)``), so it can be compared with the published allocators.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, Sequence

from ortools.sat.python import cp_model

from lgopt.group.packsearch.problem import PackItem, Span
from lgopt.group.solver import integral_bound, make_solver
from lgopt.hw.layout import cdiv


@dataclass(frozen=True)
class PackResult:
    status: str  # optimal | feasible | infeasible | unknown
    offsets: Mapping[str, int] = field(default_factory=dict)
    peak: int = 0
    conflicts: int = 0
    seconds: float = 0.0
    bound: int = 0  # lower bound on the peak (when minimising it)
    deterministic: float = 0.0  # CP-SAT deterministic time spent

    @property
    def found(self) -> bool:
        return self.status in ("optimal", "feasible")


def overlaps(a: PackItem, b: PackItem) -> bool:
    return any(s0 < t1 and t0 < s1 for s0, s1 in a.spans for t0, t1 in b.spans)


def peak_live_bytes(items: Sequence[PackItem], align: int = 1) -> int:
    """Largest total (aligned) size live at one time: no packing can use less address space."""
    events: dict[int, int] = {}
    for it in items:
        sz = cdiv(it.size, align) * align
        for s, e in it.spans:
            events[s] = events.get(s, 0) + sz
            events[e] = events.get(e, 0) - sz
    cur = best = 0
    for t in sorted(events):
        cur += events[t]
        best = max(best, cur)
    return best


def first_fit(items: Sequence[PackItem], capacity: int, align: int = 1) -> dict[str, int] | None:
    """Lowest-fit placement in a few classic orders (largest, longest-lived, largest area first)."""
    def life(it: PackItem) -> int:
        return sum(e - s for s, e in it.spans)

    orders = (lambda it: (-it.size, it.id), lambda it: (-life(it), -it.size, it.id),
              lambda it: (-it.size * life(it), it.id))
    for key in orders:
        placed: dict[str, int] = {}
        by_id = {it.id: it for it in items}
        for it in sorted(items, key=key):
            size = cdiv(it.size, align) * align
            busy = sorted((placed[o], placed[o] + cdiv(by_id[o].size, align) * align) for o in placed
                          if overlaps(by_id[o], it))
            off = 0
            for s, e in busy:
                if off + size <= s:
                    break
                off = max(off, e)
            if off + size > capacity:
                break
            placed[it.id] = off
        else:
            return placed
    return None


def _model(items: Sequence[PackItem], cap_u: int, size_u: Mapping[str, int], pairs: Sequence[tuple[str, str]],
           bank_u: int, bank_rule: str, minimize: str, hint: Mapping[str, int] | None, align: int
           ) -> tuple[cp_model.CpModel, dict[str, cp_model.IntVar], list[cp_model.IntVar], cp_model.IntVar | None]:
    """The packing model: offsets, a NoOverlap2D of (time span x address) rectangles, bank pairs."""
    m = cp_model.CpModel()
    off = {it.id: m.new_int_var(0, cap_u - size_u[it.id], f"off_{it.id}") for it in items}
    xs, ys = [], []
    for it in items:
        for k, (s, e) in enumerate(it.spans):
            xs.append(m.new_fixed_size_interval_var(s, e - s, f"t_{it.id}_{k}"))
            ys.append(m.new_interval_var(off[it.id], size_u[it.id], off[it.id] + size_u[it.id], f"a_{it.id}_{k}"))
    m.add_no_overlap_2d(xs, ys)
    conflict_lits: list[cp_model.IntVar] = []
    if bank_rule != "off" and pairs:
        first, last = {}, {}
        n_banks = cdiv(cap_u, bank_u)
        for it in items:
            first[it.id] = m.new_int_var(0, n_banks, f"fb_{it.id}")
            last[it.id] = m.new_int_var(0, n_banks, f"lb_{it.id}")
            m.add_division_equality(first[it.id], off[it.id], bank_u)
            m.add_division_equality(last[it.id], off[it.id] + size_u[it.id] - 1, bank_u)
        for a, b in pairs:
            below = m.new_bool_var(f"bel_{a}_{b}")  # a's banks all below b's
            above = m.new_bool_var(f"abv_{a}_{b}")
            m.add(last[a] < first[b]).only_enforce_if(below)
            m.add(last[b] < first[a]).only_enforce_if(above)
            if bank_rule == "hard":
                m.add_bool_or([below, above])
            else:
                c = m.new_bool_var(f"cf_{a}_{b}")
                m.add_bool_or([below, above, c])
                conflict_lits.append(c)
    peak = None
    if minimize == "peak":
        peak = m.new_int_var(0, cap_u, "peak")
        for it in items:
            m.add(peak >= off[it.id] + size_u[it.id])
        m.minimize(peak * (len(conflict_lits) + 1) + sum(conflict_lits))
    elif conflict_lits:
        m.minimize(sum(conflict_lits))
    if hint:
        for hk, hv in hint.items():
            if hk in off and hv % align == 0:
                m.add_hint(off[hk], hv // align)
    return m, off, conflict_lits, peak


def shared_banks(items: Sequence[PackItem], offsets: Mapping[str, int], pairs: Iterable[tuple[str, str]],
                 bank_bytes: int) -> int:
    """Pairs placed so that they share a bank."""
    size = {it.id: it.size for it in items}

    def banks(k: str) -> range:
        return range(offsets[k] // bank_bytes, (offsets[k] + max(1, size[k]) - 1) // bank_bytes + 1)

    return sum(1 for a, b in pairs if set(banks(a)) & set(banks(b)))


def pack(items: Sequence[PackItem], capacity: int, *, align: int = 1,
         conflicts: Iterable[tuple[str, str]] = (), bank_bytes: int | None = None, bank_rule: str = "off",
         minimize: str = "none", time_limit: float = 10.0, workers: int = 2, seed: int = 0,
         hint: Mapping[str, int] | None = None, conflict_time: float | None = None,
         deadline: float | None = None) -> PackResult:
    """Offsets in ``[0, capacity)`` for every item; ``minimize`` is ``none``, ``peak`` or ``conflicts``.

    ``time_limit`` is in CP-SAT deterministic time units (about a second each) so
    that the same input gives the same answer however loaded the machine is; a wall-clock cap of
    :data:`lgopt.group.solver.WALL_CAP` times that guards instances where deterministic time runs slow (an
    answer cut by it is "unknown"; on a loaded machine it can cut one earlier, which is the only way two runs
    differ), and the solve never runs past ``deadline`` (``time.perf_counter()``) when one is given.

    With soft bank pairs and nothing else to minimise, feasibility is settled first without the bank
    variables (they make the first solution far harder to find: ResNet-50's 125-buffer group on
    BM1684X packs in 0.03 s without them, not in 3 s with them); the conflicts are then reduced from
    that packing for ``conflict_time`` (default: what is left of ``time_limit``; 0 keeps it as is).
    """
    t0 = time.perf_counter()
    if not items:
        return PackResult("optimal", {}, 0, 0, 0.0)
    cap_u = capacity // align
    size_u = {it.id: cdiv(it.size, align) for it in items}
    if any(size_u[it.id] > cap_u for it in items):
        return PackResult("infeasible", seconds=time.perf_counter() - t0)
    if peak_live_bytes(items, align) > cap_u * align:
        return PackResult("infeasible", seconds=time.perf_counter() - t0)
    ids = set(size_u)
    pairs = [(a, b) for a, b in conflicts if a in ids and b in ids] if bank_rule != "off" and bank_bytes else []
    rule = bank_rule if pairs else "off"
    quick = first_fit(items, capacity, align) if rule != "hard" else None
    if quick is not None and minimize == "none" and (rule == "off" or conflict_time == 0):
        return PackResult("feasible", quick, max(quick[it.id] + size_u[it.id] * align for it in items),
                          shared_banks(items, quick, pairs, bank_bytes or 1) if pairs else 0, time.perf_counter() - t0)
    if rule == "soft" and minimize == "none":  # feasibility first, without the banks
        if quick is not None:
            first = PackResult("feasible", quick, max(quick[it.id] + size_u[it.id] * align for it in items))
        else:
            first = pack(items, capacity, align=align, time_limit=time_limit, workers=workers, seed=seed, hint=hint,
                         deadline=deadline)
            if not first.found:
                return replace(first, seconds=time.perf_counter() - t0)
        n = shared_banks(items, first.offsets, pairs, bank_bytes or 1)
        left = time_limit - first.deterministic if conflict_time is None else min(conflict_time, time_limit)
        if n > 0 and left > 0:
            better = pack(items, capacity, align=align, conflicts=pairs, bank_bytes=bank_bytes, bank_rule="soft",
                          minimize="conflicts", time_limit=left, workers=workers, seed=seed, hint=first.offsets,
                          deadline=deadline)
            if better.found and better.conflicts < n:
                return replace(better, seconds=time.perf_counter() - t0)
        return PackResult("feasible", first.offsets, first.peak, n, time.perf_counter() - t0)
    if quick is not None and not hint:
        hint = quick
    m, off, conflict_lits, peak = _model(items, cap_u, size_u, pairs, max(1, (bank_bytes or 1) // align), rule,
                                         minimize, hint, align)
    # deterministic time can run far slower than the wall clock on tight, wide instances: make_solver caps both
    solver = make_solver(workers=workers, seed=seed, deterministic=time_limit, deadline=deadline)
    st = solver.solve(m)
    secs = time.perf_counter() - t0
    det = solver.response_proto.deterministic_time
    if st == cp_model.INFEASIBLE:
        return PackResult("infeasible", seconds=secs, deterministic=det)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return PackResult("unknown", seconds=secs, deterministic=det)
    offsets = {k: int(solver.value(v)) * align for k, v in off.items()}
    pk = max(offsets[it.id] + size_u[it.id] * align for it in items)
    bound = integral_bound(solver) // (len(conflict_lits) + 1) * align if peak is not None else 0
    return PackResult("optimal" if st == cp_model.OPTIMAL else "feasible", offsets, pk,
                      sum(int(solver.value(c)) for c in conflict_lits), secs, bound, det)


def check_packing(items: Sequence[PackItem], offsets: Mapping[str, int], capacity: int, align: int = 1) -> str | None:
    """An independent check of a packing: None when it holds, else the first problem."""
    for it in items:
        o = offsets.get(it.id)
        if o is None:
            return f"buffer {it.id} has no offset"
        if o < 0 or o % align or o + it.size > capacity:
            return f"buffer {it.id} at {o} is misaligned or outside [0, {capacity})"
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            if overlaps(a, b) and offsets[a.id] < offsets[b.id] + b.size and offsets[b.id] < offsets[a.id] + a.size:
                return f"buffers {a.id} and {b.id} overlap"
    return None

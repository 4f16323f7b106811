"""Exact LMEM packing: offsets for buffers with fixed lifetimes, or a proof that none exist.

A buffer is a rectangle that may slide along the address axis only: its time spans are fixed (a
wrap-around lifetime is two spans sharing one offset), its size is fixed, its offset is the unknown.
:func:`pack` answers in three stages, cheapest first:

1. **Lowest fit** in a few classic orders (:func:`first_fit`): most of lgopt's groups pack here.
2. **The exact search** (:mod:`lgopt.group.packsearch`): MiniMalloc's canonical depth-first search,
   which finds a packing of a tight instance or proves there is none (hard bank pairs included).
3. **CP-SAT**, where it is the better tool: reducing soft bank conflicts once a packing exists (an
   objective over pairs, which the search does not have), and as a second opinion when the search's
   budget runs out (a ``NoOverlap2D`` model, hinted, with what is left of the budget).

The same packer reads the static-allocation benchmark format that MiniMalloc and the TelaMalloc/IREE
suites use (CSV ``id,lower,upper,size``; a buffer lives on ``[lower, upper)``), so it can be compared
with the published allocators (``benchmarks/pack_suite.py``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterable, Iterator, Literal, Mapping, Sequence

from lgopt.group.packsearch.problem import PackItem, PackProblem, Solution, Span, banks
from lgopt.group.packsearch.validate import validate
from lgopt.group.solver import add_work, integral_bound, make_solver, note_wall_cap, wall_seconds
from lgopt.hw.layout import cdiv

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

__all__ = ["PackItem", "PackResult", "Span", "check_packing", "first_fit", "overlaps", "pack", "peak_live_bytes",
           "shared_banks"]

Engine = Literal["auto", "search", "cpsat"]
Minimize = Literal["none", "peak", "conflicts"]

WORK_PER_UNIT = 150_000
"""Placements the search tries per unit of ``time_limit``: a placement costs 1.3-2.5 microseconds on
lgopt's groups (4-8 before the search's inner calls stopped counting references to every array), so a
unit is a few tenths of a second of search, less than a unit of CP-SAT deterministic time costs.
Counted, not timed: the answer is the same on any machine."""

FIRST_SLICE = 0.01
"""Effort units of the search's first slice in the ``auto`` portfolio: 1,500 placements, which settle
99 % of the instances the search settles on lgopt's groups, and cost 2-10 ms (the sweep included; 4 ms
median) on the groups the search gives up on before CP-SAT packs them (``benchmarks/results/packer.md``,
``search s``).  A fixed count rather than one proportional to the buffers: about 100 of the groups the
search settles need more than 2n placements (up to 170n on small ones), and sending those to CP-SAT
first would cost them several times as long (yolov5s/bm1688 group 1 halfway: 0.105 s against 0.013 s),
to save a few milliseconds where CP-SAT answers."""

CPSAT_PROBE = 0.2
CPSAT_LEAST_SECONDS = 0.5  # a CP-SAT slice is skipped when less is left before the deadline
"""CP-SAT deterministic time of its slice in the ``auto`` portfolio when there are no hard bank pairs."""


@dataclass(frozen=True)
class PackResult:
    status: str  # optimal | feasible | infeasible | unknown
    offsets: Mapping[str, int] = field(default_factory=dict)
    peak: int = 0
    conflicts: int = 0
    seconds: float = 0.0
    bound: int = 0  # lower bound on the peak (when minimising it)
    deterministic: float = 0.0  # CP-SAT deterministic time spent
    nodes: int = 0  # search nodes visited
    work: int = 0  # placements the search tried
    engine: str = ""  # what answered: first-fit, search or cp-sat
    why: str = ""  # what proved infeasibility, or what cut the search short

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

    if any(it.fixed is not None for it in items):
        return None
    orders = (lambda it: (-it.size, it.id), lambda it: (-life(it), -it.size, it.id),
              lambda it: (-it.size * life(it), it.id))
    by_id = {it.id: it for it in items}
    for key in orders:
        placed: dict[str, int] = {}
        for it in sorted(items, key=key):
            size = cdiv(it.size, align) * align
            busy = sorted((placed[o], placed[o] + cdiv(by_id[o].size, align) * align) for o in placed
                          if overlaps(by_id[o], it))
            off = 0
            for s, e in busy:
                if off + size <= s:
                    break
                off = max(off, e)
            if off + it.size > capacity:
                break
            placed[it.id] = off
        else:
            return placed
    return None


def shared_banks(items: Sequence[PackItem], offsets: Mapping[str, int], pairs: Iterable[tuple[str, str]],
                 bank_bytes: int) -> int:
    """Pairs placed so that they share a bank."""
    size = {it.id: it.size for it in items}
    return sum(1 for a, b in pairs
               if set(banks(offsets[a], size[a], bank_bytes)) & set(banks(offsets[b], size[b], bank_bytes)))


def check_packing(items: Sequence[PackItem], offsets: Mapping[str, int], capacity: int, align: int = 1) -> str | None:
    """An independent check of a packing: None when it holds, else the first problem
    (:func:`lgopt.group.packsearch.validate.validate`, which reads nothing of the packers)."""
    return validate(PackProblem(tuple(items), capacity, align), offsets)


# --- CP-SAT -------------------------------------------------------------------------------------------

def _model(problem: PackProblem, minimize: Minimize, hint: Mapping[str, int] | None
           ) -> tuple[cp_model.CpModel, dict[str, cp_model.IntVar], list[cp_model.IntVar], cp_model.IntVar | None]:
    """Offsets in alignment units, a NoOverlap2D of (time span x address) rectangles, and bank pairs
    (a hard pair must sit in disjoint banks; a soft one pays one unit of the objective when it does not)."""
    from ortools.sat.python import cp_model  # loaded only when CP-SAT runs (a second at start-up otherwise)

    a, cap = problem.align, problem.capacity
    m = cp_model.CpModel()
    off: dict[str, cp_model.IntVar] = {}
    size_u = {it.id: cdiv(it.size, a) for it in problem.items}
    for it in problem.items:
        top = (cap - it.size) // a
        lo, hi = (it.fixed // a, it.fixed // a) if it.fixed is not None else (0, top)
        off[it.id] = m.new_int_var(lo, hi, f"off_{it.id}")
    xs, ys = [], []
    for it in problem.items:
        for k, (s, e) in enumerate(it.spans):
            xs.append(m.new_fixed_size_interval_var(s, e - s, f"t_{it.id}_{k}"))
            ys.append(m.new_fixed_size_interval_var(off[it.id], size_u[it.id], f"a_{it.id}_{k}"))
    m.add_no_overlap_2d(xs, ys)
    conflict_lits: list[cp_model.IntVar] = []
    if problem.bank_rule != "off" and problem.bank_pairs:
        B = problem.bank_bytes
        n_banks = cdiv(cap, B) + 1
        raw = {it.id: max(it.size, 1) for it in problem.items}
        first: dict[str, cp_model.IntVar] = {}
        last: dict[str, cp_model.IntVar] = {}
        for bid in sorted({x for pair in problem.bank_pairs for x in pair}):
            first[bid] = m.new_int_var(0, n_banks, f"fb_{bid}")
            last[bid] = m.new_int_var(0, n_banks, f"lb_{bid}")
            m.add_division_equality(first[bid], off[bid] * a, B)
            m.add_division_equality(last[bid], off[bid] * a + raw[bid] - 1, B)
        for x, y in problem.bank_pairs:
            below = m.new_bool_var(f"bel_{x}_{y}")  # x's banks all below y's
            above = m.new_bool_var(f"abv_{x}_{y}")
            m.add(last[x] < first[y]).only_enforce_if(below)
            m.add(last[y] < first[x]).only_enforce_if(above)
            if problem.bank_rule == "hard":
                m.add_bool_or([below, above])
            else:
                c = m.new_bool_var(f"cf_{x}_{y}")
                m.add_bool_or([below, above, c])
                conflict_lits.append(c)
    peak = None
    if minimize == "peak":
        peak = m.new_int_var(0, cdiv(cap, a), "peak")
        for it in problem.items:
            m.add(peak >= off[it.id] + size_u[it.id])
        m.minimize(peak * (len(conflict_lits) + 1) + sum(conflict_lits))
    elif minimize == "conflicts" and conflict_lits:
        m.minimize(sum(conflict_lits))
    if hint:
        for hk, hv in hint.items():
            if hk in off and hv % a == 0:
                m.add_hint(off[hk], hv // a)
    return m, off, conflict_lits, peak


def pack_cpsat(problem: PackProblem, *, minimize: Minimize = "none", time_limit: float | None = 10.0,
               workers: int = 2, seed: int = 0, hint: Mapping[str, int] | None = None,
               deadline: float | None = None) -> PackResult:
    """The CP-SAT model alone: ``time_limit`` deterministic units (None: only ``deadline``)."""
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    m, off, conflict_lits, peak = _model(problem, minimize, hint)
    if time_limit is None:
        solver = make_solver(workers=workers, seed=seed,
                             seconds=(deadline - t0) if deadline is not None else None)
    else:
        solver = make_solver(workers=workers, seed=seed, deterministic=time_limit, deadline=deadline)
    st = solver.solve(m)
    secs = time.perf_counter() - t0
    det = solver.response_proto.deterministic_time
    note_wall_cap(solver)
    if st == cp_model.INFEASIBLE:
        return PackResult("infeasible", seconds=secs, deterministic=det, engine="cp-sat", why="CP-SAT proved it")
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return PackResult("unknown", seconds=secs, deterministic=det, engine="cp-sat", why="CP-SAT ran out of time")
    a = problem.align
    offsets = {k: int(solver.value(v)) * a for k, v in off.items()}
    pk = max(offsets[it.id] + it.size for it in problem.items)
    bound = integral_bound(solver) // (len(conflict_lits) + 1) * a if peak is not None else 0
    optimal = st == cp_model.OPTIMAL and minimize != "none"
    return PackResult("optimal" if optimal else "feasible", offsets, pk,
                      sum(int(solver.value(c)) for c in conflict_lits), secs, bound, det, engine="cp-sat")


# --- the packer ---------------------------------------------------------------------------------------

def _budget(time_limit: float | None, deadline: float | None, t0: float) -> tuple[int | None, float | None]:
    """(search work, wall deadline) for ``time_limit`` units: the work keeps the answer deterministic, the
    deadline (a generous multiple of the units, never past the caller's) guards a machine far slower."""
    if time_limit is None:
        return None, deadline
    stop = t0 + wall_seconds(time_limit)
    return max(1_000, int(time_limit * WORK_PER_UNIT)), stop if deadline is None else min(stop, deadline)


def _search_problem(problem: PackProblem) -> PackProblem:
    """What the search must satisfy: soft bank pairs are an objective, not a constraint."""
    return problem if problem.bank_rule != "soft" else replace(problem, bank_pairs=(), bank_rule="off")


def _effort(res: PackResult) -> float:
    """What a result spent, in units of ``time_limit``."""
    return res.work / WORK_PER_UNIT + res.deterministic


def _schedule(engine: Engine, hard: bool, total: float) -> Iterator[tuple[str, float]]:
    """The ``auto`` portfolio: (engine, effort) slices, each capped by what is left of the budget.

    The search comes first: it settles most instances in its first slice, and it resumes where it
    stopped.  CP-SAT then gets one slice (it restarts from scratch, so one run beats several short ones):
    a long one with hard bank pairs, where it is strong (lgopt's groups at tight capacities,
    ``benchmarks/results/packer.md``), a short probe without (it settles some tight groups whose canonical
    search branches badly, and costs the MiniMalloc suite about a second).  The search gets the rest,
    and CP-SAT whatever the search leaves of a finite budget.
    """
    if engine != "auto":
        yield ("search" if engine == "search" else "cp-sat"), math.inf
        return
    yield "search", FIRST_SLICE
    yield "cp-sat", 0.9 * total if hard else min(0.1 * total, CPSAT_PROBE)
    yield "search", math.inf
    yield "cp-sat", math.inf


def _feasible(problem: PackProblem, time_limit: float | None, deadline: float | None, engine: Engine,
              workers: int, seed: int, hint: Mapping[str, int] | None) -> PackResult:
    """A packing (constraints only), a proof of none, or unknown: the engines take turns
    (:func:`_schedule`) until one settles the instance or the budget is spent.  Slices are measured in
    effort, never seconds, so the answer is the same on any machine (unless the wall clock ends it all)."""
    t0 = time.perf_counter()
    target = _search_problem(problem)
    _, stop = _budget(time_limit, deadline, t0)
    if stop is not None and t0 >= stop:
        return PackResult("unknown", engine="search", why="the time limit ran out")
    from lgopt.group.packsearch.solver import solve  # compiled code: loaded only when a packing needs it

    total = math.inf if time_limit is None else time_limit
    left = total
    nodes = work = 0
    det = 0.0
    resume: tuple[int, int] | None = None
    hard = bool(target.hard_pairs)

    def out(res: PackResult) -> PackResult:
        return replace(res, nodes=nodes, work=work, deterministic=det, seconds=time.perf_counter() - t0)

    for which, piece in _schedule(engine, hard, total):
        budget = min(piece, left)
        if which == "search":
            r = solve(target, work=None if budget == math.inf else max(1, int(budget * WORK_PER_UNIT)),
                      deadline=stop, resume=resume)
            nodes += r.nodes
            work += r.work
            left -= r.work / WORK_PER_UNIT
            if r.found:
                assert r.solution is not None
                return out(PackResult("feasible", dict(r.solution.offsets), r.solution.height, engine="search"))
            if r.status == "infeasible" or r.resume is None or engine == "search":
                return out(PackResult(r.status, engine="search", why=r.why))
            resume = r.resume
        else:
            cp_stop = stop
            if stop is not None:  # CP-SAT can overrun its wall limit by a few tenths (model, presolve)
                room = stop - time.perf_counter()
                if room < CPSAT_LEAST_SECONDS and engine == "auto":
                    continue
                cp_stop = stop - min(0.25, 0.2 * room)
            res = pack_cpsat(target, time_limit=None if budget == math.inf else budget, workers=workers, seed=seed,
                             hint=hint, deadline=cp_stop)
            det += res.deterministic
            left -= budget if res.status == "unknown" else res.deterministic
            if res.status != "unknown" or engine == "cpsat":
                return out(res)
        if left <= 0 or (stop is not None and stop - time.perf_counter() <= 0.01):
            spent = f"the budget of {time_limit:g} units ran out" if left <= 0 else "the time limit ran out"
            return out(PackResult("unknown", engine="search+cp-sat", why=spent))
    return out(PackResult("unknown", engine="search", why="the time limit ran out"))  # the last slice was skipped


def _min_peak(problem: PackProblem, time_limit: float | None, deadline: float | None, engine: Engine,
              workers: int, seed: int, hint: Mapping[str, int] | None) -> PackResult:
    """The lowest highest address: :func:`~lgopt.group.packsearch.solver.bisect_height` over
    :func:`_feasible` probes (each complete, so a probe that finds nothing proves the bound)."""
    from lgopt.group.packsearch.solver import bisect_height, lower_height

    t0 = time.perf_counter()
    if engine == "cpsat":
        return pack_cpsat(_search_problem(problem), minimize="peak", time_limit=time_limit, workers=workers,
                          seed=seed, hint=hint, deadline=_budget(time_limit, deadline, t0)[1])
    first = _feasible(problem, time_limit, deadline, engine, workers, seed, hint)
    if not first.found:
        return first
    spent = [first]
    stop = _budget(time_limit, deadline, t0)[1]

    def probe(capacity: int) -> tuple[str, Solution | None]:
        left = None if time_limit is None else time_limit - sum(_effort(r) for r in spent)
        if left is not None and left <= 0:
            return "unknown", None
        r = _feasible(replace(problem, capacity=capacity), left, stop, engine, workers, seed, hint)
        spent.append(r)
        return ("found" if r.found else r.status), (Solution(r.offsets, r.peak) if r.found else None)

    best, bound = bisect_height(Solution(first.offsets, first.peak), lower_height(_search_problem(problem)), probe)
    return PackResult("optimal" if bound >= best.height else "feasible", dict(best.offsets), best.height,
                      bound=bound, nodes=sum(r.nodes for r in spent), work=sum(r.work for r in spent),
                      deterministic=sum(r.deterministic for r in spent), engine=first.engine)


def pack(items: Sequence[PackItem], capacity: int, *, align: int = 1,
         conflicts: Iterable[tuple[str, str]] = (), bank_bytes: int | None = None, bank_rule: str = "off",
         minimize: Minimize = "none", time_limit: float | None = 10.0, workers: int = 2, seed: int = 0,
         hint: Mapping[str, int] | None = None, conflict_time: float | None = None,
         deadline: float | None = None, engine: Engine = "auto") -> PackResult:
    """Offsets in ``[0, capacity)`` for every item; ``minimize`` is ``none``, ``peak`` or ``conflicts``.

    ``time_limit`` is effort, not seconds: :data:`WORK_PER_UNIT` placements of the search and as many CP-SAT
    deterministic units per unit, so that the same input gives the same answer however loaded the machine
    is.  A wall-clock cap of :data:`lgopt.group.solver.WALL_CAP` times it guards a machine that runs far
    slower (an answer cut by it is "unknown"), and nothing runs past ``deadline``
    (``time.perf_counter()``).  ``time_limit=None`` leaves only the deadline: a caller with a wall-clock
    budget (``lgopt pack --time-limit``).

    Bank pairs: ``hard`` ones constrain the packing; ``soft`` ones are reduced by CP-SAT once a packing
    exists, for ``conflict_time`` (default: ``time_limit``; 0 keeps the packing as found) — feasibility
    first, since bank variables make CP-SAT's first packing far harder to find (ResNet-50's 125-buffer
    group on BM1684X packs in 0.03 s without them, not in 3 s with them).  ``engine`` picks the search or
    CP-SAT alone (benchmarks, tests); ``auto`` uses both as described in the module docstring.

    Every packing is checked by :func:`lgopt.group.packsearch.validate.validate` before it is returned
    (a millisecond on a few hundred buffers): one that fails it, which only a bug can cause, comes back
    "unknown" with the violation in ``why``, so no caller ever places a group on an invalid packing.
    """
    t0 = time.perf_counter()
    items = list(items)
    ids = {it.id for it in items}
    pairs = tuple((a, b) for a, b in conflicts if a in ids and b in ids and a != b) \
        if bank_rule != "off" and bank_bytes else ()
    rule = bank_rule if pairs else "off"
    if rule not in ("off", "soft", "hard"):
        raise ValueError(f"unknown bank rule {rule!r}")
    problem = PackProblem(tuple(items), capacity, align, bank_bytes or 0, pairs, rule)  # type: ignore[arg-type]
    if not items:
        return PackResult("optimal", {}, 0, 0, 0.0, engine="first-fit")

    def done(res: PackResult) -> PackResult:
        add_work(_effort(res))  # a caller on a deterministic budget counts it (lgopt.group.solver.work_done)
        if time_limit is not None and res.status == "unknown" and res.why == "the time limit ran out":
            note_wall_cap()  # effort was left, the wall-clock guard stopped the search
        if res.found:  # whichever engine answered, the independent check has the last word
            bad = validate(problem, res.offsets)
            if bad is not None:  # a packer's bug: the group is not placed on its word
                return PackResult("unknown", seconds=time.perf_counter() - t0, engine=res.engine,
                                  why=f"the packing failed the independent check: {bad}")
        if res.found and pairs:
            res = replace(res, conflicts=shared_banks(items, res.offsets, pairs, bank_bytes or 1))
        return replace(res, seconds=time.perf_counter() - t0)

    if minimize == "peak":
        res = _min_peak(problem, time_limit, deadline, engine, workers, seed, hint)
        if res.found and rule == "soft" and res.engine == "search" and conflict_time != 0:
            res = _fewer_conflicts(problem, res, res.peak, time_limit if conflict_time is None else conflict_time,
                                   workers, seed, deadline)
        return done(res)
    quick = first_fit(items, capacity, align) if rule != "hard" else None
    if quick is not None:
        first = PackResult("feasible", quick, max(quick[it.id] + it.size for it in items), engine="first-fit")
    else:
        first = _feasible(problem, time_limit, deadline, engine, workers, seed, hint)
        if not first.found:
            return done(first)
    if rule == "soft" and (minimize == "conflicts" or conflict_time != 0):
        budget = time_limit if conflict_time is None or minimize == "conflicts" else conflict_time
        if time_limit is not None and conflict_time is None and minimize != "conflicts":
            budget = max(0.0, time_limit - _effort(first))
        return done(_fewer_conflicts(problem, first, capacity, budget, workers, seed, deadline,
                                     prove=minimize == "conflicts"))
    return done(first)


def _fewer_conflicts(problem: PackProblem, start: PackResult, height: int, budget: float | None, workers: int,
                     seed: int, deadline: float | None, prove: bool = False) -> PackResult:
    """``start`` with fewer soft bank conflicts: CP-SAT from it, within ``height`` (so a minimal peak stays
    minimal).  ``prove``: the conflicts are the objective, so a proof of their minimum makes it "optimal"."""
    n = shared_banks(problem.items, start.offsets, problem.bank_pairs, problem.bank_bytes)
    if n == 0:
        return replace(start, conflicts=0, status="optimal" if prove else start.status)
    if budget is not None and budget <= 0:
        return replace(start, conflicts=n)
    better = pack_cpsat(replace(problem, capacity=height), minimize="conflicts", time_limit=budget, workers=workers,
                        seed=seed, hint=start.offsets, deadline=deadline)
    if not better.found or better.conflicts > n:
        return replace(start, conflicts=n)
    return replace(start, offsets=better.offsets, peak=better.peak, conflicts=better.conflicts,
                   status=better.status if prove else start.status,
                   deterministic=start.deterministic + better.deterministic, engine=f"{start.engine}+cp-sat")

"""The search driver: restarts over several static orders, budgets, proofs, and the lowest height.

One static order can be unlucky on an instance another solves at once, so the orders take turns with
a node limit that doubles each round (MiniMalloc's round robin): the first to finish, with a packing
or with a complete search that found none (a proof), answers.  Two budgets end the search early:
``work``, placements tried (deterministic: the same input gives the same answer on any machine; a
placement costs a few microseconds whatever the instance, where a node may cost one or hundreds), and
``deadline`` (``time.perf_counter()``, for a caller with a wall-clock limit); either gives ``unknown``.

Infeasibility is reported only when it is proved: a buffer that fits nowhere, a cross section whose
aligned bytes exceed the capacity, or a search that ran to the end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Literal

import numpy as np

from lgopt.group.packsearch.core import CUT_SHORT, FOUND, HEURISTICS, Instance, new_state, search
from lgopt.group.packsearch.problem import PackProblem, Solution, aligned
from lgopt.group.packsearch.sweep import Swept, n_banks, sweep

SearchStatus = Literal["found", "infeasible", "unknown"]


@dataclass(frozen=True)
class SearchResult:
    status: SearchStatus
    solution: Solution | None = None
    nodes: int = 0  # search nodes visited (over every restart)
    work: int = 0  # placements tried (over every restart): what the ``work`` budget counts
    seconds: float = 0.0
    why: str = ""  # what proved infeasibility, or what cut the search short
    resume: tuple[int, int] | None = None  # where the round robin stopped, when the node budget cut it

    @property
    def found(self) -> bool:
        return self.status == "found"


@dataclass(frozen=True)
class MinHeightResult:
    """The lowest height found, and the highest one proved impossible below it (``bound`` <= height)."""

    status: Literal["optimal", "feasible", "infeasible", "unknown"]
    solution: Solution | None = None
    bound: int = 0
    nodes: int = 0
    work: int = 0
    seconds: float = 0.0
    why: str = ""  # when there is no packing: what proved it, or what cut the search short


def _with_capacity(swept: Swept, problem: PackProblem, capacity: int) -> Instance:
    """The static arrays for another capacity (only the top limits change)."""
    inst = swept.instance
    sizes = np.array([it.size for it in problem.items], dtype=np.int64)
    maxoff = (capacity - sizes) // problem.align * problem.align
    return inst._replace(maxoff=maxoff, cap_a=aligned(capacity, problem.align), n_banks=n_banks(capacity, inst.bank))


def solve(problem: PackProblem, *, work: int | None = None, deadline: float | None = None,
          heuristics: tuple[str, ...] = HEURISTICS, decompose: bool = True, resume: tuple[int, int] | None = None,
          _swept: Swept | None = None) -> SearchResult:
    """A packing of ``problem``, a proof that none exists, or ``unknown`` when a budget ran out.

    ``resume`` (an unknown result's ``resume``) continues the round robin where the ``work`` budget cut it,
    so a caller may search in slices (and run something else between them) at little extra cost.
    """
    t0 = time.perf_counter()
    items = problem.items
    if not items:
        return SearchResult("found", Solution({}, 0), seconds=time.perf_counter() - t0)
    swept = _swept if _swept is not None else sweep(problem)
    if swept.infeasible_why:
        return SearchResult("infeasible", why=swept.infeasible_why, seconds=time.perf_counter() - t0)
    inst = _with_capacity(swept, problem, problem.capacity) if _swept is not None else swept.instance
    peak = int(inst.total0.max()) if len(inst.total0) else 0
    if peak > inst.cap_a:
        return SearchResult("infeasible", why=f"{peak} aligned bytes are live at once, more than the capacity "
                            f"{problem.capacity}", seconds=time.perf_counter() - t0)
    if deadline is not None and time.perf_counter() >= deadline:
        return SearchResult("unknown", seconds=time.perf_counter() - t0, why="the time limit ran out")
    state = new_state(inst)
    state.deadline[0] = deadline if deadline is not None else 0.0
    codes = [HEURISTICS.index(h) for h in heuristics]
    n = len(items)
    left = work if work is not None else 1 << 62
    used = tried = 0
    limit, first = resume if resume is not None else (4 * max(n, 32), 0)

    def result(status: SearchStatus, solution: Solution | None = None, why: str = "",
               resume: tuple[int, int] | None = None) -> SearchResult:
        return SearchResult(status, solution, used, tried, time.perf_counter() - t0, why, resume)

    while True:
        for hi in range(first, len(codes)):
            h = codes[hi]
            state.ctr[0] = limit
            state.ctr[2] = state.ctr[5] = state.ctr[7] = 0
            state.ctr[6] = left
            status = search(inst, state, h, decompose)
            used += int(state.ctr[2])
            tried += int(state.ctr[5])
            left -= int(state.ctr[5])
            if status == FOUND:
                offsets = {it.id: int(state.sol[k]) for k, it in enumerate(items)}
                height = max(offsets[it.id] + it.size for it in items)
                return result("found", Solution(offsets, height))
            if status != CUT_SHORT:
                return result("infeasible", why="the search ran to the end without a packing")
            if state.ctr[3]:
                return result("unknown", why="the time limit ran out")
            if left <= 0:
                return result("unknown", why=f"the work budget ({work} placements) ran out", resume=(limit, hi))
        limit *= 2
        first = 0


def lower_height(problem: PackProblem, swept: Swept | None = None) -> int:
    """No packing is lower: the fullest cross section's aligned bytes (less the slack of its top buffer's
    alignment) and the largest buffer."""
    swept = swept if swept is not None else sweep(problem)
    peak = int(swept.instance.total0.max()) if swept.sections else 0
    return max(peak - (problem.align - 1), max((it.size for it in problem.items), default=0), 0)


Probe = Callable[[int], tuple[str, "Solution | None"]]
"""A capacity to ("found" with its packing | "infeasible" | "unknown", None)."""


def bisect_height(first: Solution, lower: int, probe: Probe) -> tuple[Solution, int]:
    """The lowest packing ``probe`` finds below ``first``, and the height below which none exists.

    The capacity is tried at ``lower`` first (a packing as low as the live bytes is common), then
    bisected between the highest capacity proved impossible and the best packing; a probe that is cut
    short ends the bisection with the bound it has.
    """
    best, lo = first, lower
    cap = lo
    while lo < best.height:
        status, sol = probe(cap)
        if status == "found":
            assert sol is not None and sol.height <= cap
            best = sol
        elif status == "infeasible":
            lo = cap + 1
        else:
            break
        cap = (lo + best.height - 1) // 2
    return best, min(lo, best.height)


def minimize_height(problem: PackProblem, *, work: int | None = None, deadline: float | None = None,
                    heuristics: tuple[str, ...] = HEURISTICS) -> MinHeightResult:
    """The lowest highest-address of any packing within ``problem.capacity`` (search only), by
    :func:`bisect_height` over complete searches: a probe that finds nothing raises the bound."""
    t0 = time.perf_counter()
    first = solve(problem, work=work, deadline=deadline, heuristics=heuristics)
    used, tried = first.nodes, first.work
    if not first.found:
        status: Literal["infeasible", "unknown"] = "infeasible" if first.status == "infeasible" else "unknown"
        return MinHeightResult(status, nodes=used, work=tried, seconds=time.perf_counter() - t0, why=first.why)
    assert first.solution is not None
    swept = sweep(problem)

    def probe(capacity: int) -> tuple[str, Solution | None]:
        nonlocal used, tried
        left = None if work is None else work - tried
        if left is not None and left <= 0:
            return "unknown", None
        r = solve(replace(problem, capacity=capacity), work=left, deadline=deadline, heuristics=heuristics,
                  _swept=swept)
        used += r.nodes
        tried += r.work
        return r.status, r.solution

    best, bound = bisect_height(first.solution, lower_height(problem, swept), probe)
    status2: Literal["optimal", "feasible"] = "optimal" if bound >= best.height else "feasible"
    return MinHeightResult(status2, best, bound, used, tried, time.perf_counter() - t0)

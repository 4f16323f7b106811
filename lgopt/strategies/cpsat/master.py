"""The set-partitioning master of the decomposed search: which candidates make the plan.

A Boolean per candidate and per local op as a global layer; every local op is covered exactly once,
and a candidate that hands a tensor over at a boundary is matched by one that receives it there.
Candidate costs come from outside (evaluated, or a lower bound); a candidate left out of ``cost`` is
cut (no slicing of it packs: a logic-based Benders cut).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from ortools.sat.python import cp_model

from lgopt.group.solver import integral_bound, make_solver, solve_interruptibly
from lgopt.strategies.cpsat.common import CpsatSettings, Key

MasterAnswer = tuple[Any, int, list[Key]]
"""(CP-SAT status, best bound, chosen candidates)."""


def add_handover_links(m: cp_model.CpModel, chosen: Iterable[tuple[Key, cp_model.IntVar]]) -> None:
    """A group hands a tensor over at boundary ``b`` exactly when the group starting at ``b`` receives it."""
    outs: dict[int, list[cp_model.IntVar]] = {}
    ins: dict[int, list[cp_model.IntVar]] = {}
    for (i, j, v), lit in chosen:
        if v == "out":
            outs.setdefault(j + 1, []).append(lit)
        elif v == "in":
            ins.setdefault(i, []).append(lit)
    for b in sorted(set(outs) | set(ins)):
        m.add(sum(outs.get(b, [])) == sum(ins.get(b, [])))



@dataclass(frozen=True)
class Master:
    """The set-partitioning master: an interval Boolean per group candidate, a global-layer Boolean per op."""

    intervals: list[Key]
    covering: dict[int, list[Key]]
    gval: dict[int, int]  # local op -> its cost as a global layer
    fixed: int  # ops that can only be global layers

    def solve(self, st: CpsatSettings, cost: dict[Key, int], seconds: float,
              hint: set[Key] | None = None, deterministic: bool = False) -> MasterAnswer | None:
        """(status, best bound, chosen candidates); candidates missing from ``cost`` are cut.  ``seconds``
        is wall time, or deterministic units when ``deterministic``."""
        m = cp_model.CpModel()
        x = {iv: m.new_bool_var(f"g{iv[0]}_{iv[1]}{iv[2]}") for iv in self.intervals if iv in cost}
        gl = {k: m.new_bool_var(f"gl{k}") for k in self.gval}
        for k in self.gval:
            m.add_exactly_one([x[iv] for iv in self.covering[k] if iv in x] + [gl[k]])
        add_handover_links(m, x.items())
        m.minimize(sum(cost[iv] * v for iv, v in x.items()) + sum(c * gl[k] for k, c in self.gval.items())
                   + self.fixed)
        if hint is not None:
            for iv, v in x.items():
                m.add_hint(v, iv in hint)
            for k in self.gval:
                m.add_hint(gl[k], not any(iv[0] <= k <= iv[1] for iv in hint))
        # a set-partitioning model whose LP is tight: one worker solves it fastest, and the machine's
        # other core is better spent evaluating intervals
        if deterministic:
            solver = make_solver(workers=1, seed=st.seed, deterministic=seconds, params=st.cp_sat_params)
        else:
            solver = make_solver(workers=1, seed=st.seed, seconds=seconds, params=st.cp_sat_params)
        res = solve_interruptibly(solver, m)
        if res not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return None
        return res, integral_bound(solver), sorted(iv for iv, v in x.items() if solver.value(v))


"""A strategy's answer as a plan: the chosen groups assembled and totalled, never worse than the greedy
baseline, with status, objective, best bound and gap.

The formulations minimise over groups and global layers; the Casts of the graph's f32 inputs and outputs
(:func:`lgopt.cost.cycles.edge_cast_cost`, where the cost model's deployment has them) are global layers in every
plan they search, the same in each, so their cost is added to the bound here: without it a search that had
proved its plan optimal reported a gap of exactly those Casts (ResNet-18 on BM1688, F16: 1.14 %).  A group that
converts an input or output itself (``GroupPlan.f32_in`` / ``f32_out``, :mod:`lgopt.tpumlir.casts`, after the
search) is outside that space; ``solver["io_casts"]`` says how much such groups could save at most.  A search's
plan below its own bound shows the bound is no proof for that cost model (:func:`unproven`): the plan is kept,
its value given as the bound, and it is not called optimal."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from lgopt.cost.cycles import edge_cast_cost
from lgopt.group.build import assemble, schedule
from lgopt.group.totals import finish
from lgopt.hw.chip import Chip
from lgopt.model.network import Network
from lgopt.model.plan import GroupPlan, Plan, PlanStatus
from lgopt.strategies.cpsat.budget import Budget
from lgopt.strategies.cpsat.common import CpsatSettings, objective_value
from lgopt.strategies.cpsat.loadtable import chosen_weights, current_loads
from lgopt.strategies.settings import SearchSettings


def result(net: Network, chip: Chip, search: SearchSettings, st: CpsatSettings, groups: list[GroupPlan],
            base: Plan, bound: int, status: PlanStatus, budget: Budget, extra: dict) -> Plan:
    plan = assemble(net, chip, groups, "cpsat", h_ratio=search.h_ratio, bank_rule=search.bank_rule)
    plan = finish(chip, net, plan)
    casts = objective_value(edge_cast_cost(chip, net), st.objective)
    bound += casts  # the graph's edge Casts, global in every plan of the space (module doc)
    value = objective_value(plan.cost, st.objective)
    if value < bound:  # a plan of the space below the space's bound: the bound is no proof (module doc)
        extra = {**extra, "bound_exceeded": unproven(bound, value)}
        bound, status = value, "feasible" if status == "optimal" else status
    if value > objective_value(base.cost, st.objective):  # never worse than greedy
        plan, value = base, objective_value(base.cost, st.objective)
        status = "feasible" if status == "optimal" else status
        if value < bound:  # greedy reaches plans the space leaves out (a group both receiving and handing over)
            extra = {**extra, "outside_space": (f"the plan is the greedy one cpsat started from, outside the searched "
                                                f"space and {100 * (1 - value / bound):.2f}% below its best bound")}
    gap = 0.0 if value <= 0 else max(0.0, (value - bound) / value)
    if status == "optimal" and gap > 1e-9:  # a gap left when time ran out is the time limit's doing
        status = "time_limit" if budget.expired() else "feasible"
    if budget.deterministic:
        extra = {**extra, "work_units": round(budget.charged, 3), "wall_capped_solves": budget.capped}
    solver = {"seconds": round(budget.seconds(), 3), "objective": st.objective, "value": value,
              "bound": int(bound), "gap": round(gap, 6), "solver_status": status, "workers": st.workers,
              "seed": st.seed, "io_casts": casts, **extra,
              "beyond_compiler": beyond_compiler(net, chip, plan, search)}
    return replace(plan, strategy="cpsat", status=status, solver=solver)


def unproven(bound: int, value: int) -> str:
    """Why a search's bound was above a plan of its own space: a bound that does not hold for the cost model in
    use (:mod:`lgopt.strategies.cpsat.bounds` states them for the analytic one; ``tests/test_bounds.py`` holds them
    against sampled tables of a fitted one too).  Session 29's case: ResNet-18 on BM1688, F16, whose fitted model
    moves weight loads as TPU-MLIR does, and whose interval bound then stored at the load rate and charged held
    weights before the first slice (its bound 2,411,398, its plan 2,402,933; both fixed).  The plan stands; its
    value is reported as the bound and nothing is called optimal.

    >>> unproven(2411398, 2402933)[:60]
    "the search's bound (2,411,398) was above this plan (2,402,93"
    """
    return (f"the search's bound ({bound:,}) was above this plan ({value:,}): the cost model prices some plans "
            "below what the bounds assume, so the bound given is the plan's own value and optimality is not claimed")


def with_value(solver: Mapping[str, Any], cycles: int) -> dict[str, Any]:
    """``solver`` for a plan a pass after the search changed to ``cycles`` (groups converting the graph's ends,
    the reference's groups sliced anew): a search's bound holds over its space and this plan only where the plan
    is not below it, so below, the bound is the plan's own value.

    >>> with_value({"objective": "cycles", "value": 110, "bound": 100, "gap": 0.0909}, 95)
    {'objective': 'cycles', 'value': 95, 'bound': 95, 'gap': 0.0}
    """
    out = dict(solver)
    if out.get("objective") == "cycles" and "bound" in out:
        bound = min(int(out["bound"]), cycles)
        out.update(value=cycles, bound=bound, gap=round((cycles - bound) / cycles, 6) if cycles > 0 else 0.0)
    return out


def beyond_compiler(net: Network, chip: Chip, plan: Plan, search: SearchSettings) -> list[str]:
    """What in ``plan`` a compiler given only its groups and slice counts (TPU-MLIR's layer-group cache) would
    not do: weight load rows lgopt chose, tensors handed over in LMEM.  ``lgopt export`` refuses such a plan
    unless asked for its groups alone."""
    out = []
    for k, g in enumerate(plan.groups):
        if g.kept_in or g.kept_out:
            out.append(f"group {k} ({g.ops[0]}..): a tensor handed over in LMEM ({', '.join(g.kept_in + g.kept_out)})")
        if g.num_slices == 1 and chosen_weights(g):
            own = schedule(net, chip, g.ops, 1, 1, search.h_ratio, kept_in=g.kept_in, kept_out=g.kept_out)
            if current_loads(own) != current_loads(g):
                out.append(f"group {k} ({g.ops[0]}..): weight load rows chosen by lgopt, not the table's own rule")
    return out

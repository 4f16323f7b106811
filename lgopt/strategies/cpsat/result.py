"""A strategy's answer as a plan: the chosen groups assembled and totalled, never worse than the greedy
baseline, with status, objective, best bound and gap."""

from __future__ import annotations

from dataclasses import replace

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
    value = objective_value(plan.cost, st.objective)
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
              "seed": st.seed, **extra, "beyond_compiler": beyond_compiler(net, chip, plan, search)}
    return replace(plan, strategy="cpsat", status=status, solver=solver)


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

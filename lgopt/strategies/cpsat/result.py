"""A strategy's answer as a plan: the chosen groups assembled and totalled, never worse than the greedy
baseline, with status, objective, best bound and gap."""

from __future__ import annotations

import time
from dataclasses import replace

from lgopt.group.build import assemble
from lgopt.group.totals import finish
from lgopt.hw.chip import Chip
from lgopt.model.network import Network
from lgopt.model.plan import GroupPlan, Plan, PlanStatus
from lgopt.strategies.cpsat.common import CpsatSettings, objective_value
from lgopt.strategies.settings import SearchSettings


def result(net: Network, chip: Chip, search: SearchSettings, st: CpsatSettings, groups: list[GroupPlan],
            base: Plan, bound: int, status: PlanStatus, t0: float, extra: dict) -> Plan:
    plan = assemble(net, chip, groups, "cpsat", h_ratio=search.h_ratio, bank_rule=search.bank_rule)
    plan = finish(chip, net, plan)
    value = objective_value(plan.cost, st.objective)
    if value > objective_value(base.cost, st.objective):  # never worse than greedy
        plan, value = base, objective_value(base.cost, st.objective)
        status = "feasible" if status == "optimal" else status
    gap = 0.0 if value <= 0 else max(0.0, (value - bound) / value)
    if status == "optimal" and gap > 1e-9:  # a gap left when time ran out is the time limit's doing
        status = "time_limit" if time.perf_counter() - t0 >= st.time_limit else "feasible"
    solver = {"seconds": round(time.perf_counter() - t0, 3), "objective": st.objective, "value": value,
              "bound": int(bound), "gap": round(gap, 6), "solver_status": status, "workers": st.workers,
              "seed": st.seed, **extra}
    return replace(plan, strategy="cpsat", status=status, solver=solver)

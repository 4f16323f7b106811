"""Costs attached to a plan: a group's own figures from the cost model, and the plan's totals.

Every strategy ends here, so a plan's cycles and traffic are always the same sum of the same model.
"""

from __future__ import annotations

from dataclasses import replace

from lgopt.cost.bound import lower_bound
from lgopt.cost.cycles import global_layer_cost, io_cast_cost
from lgopt.cost.pipeline import group_cost
from lgopt.hw.chip import Chip
from lgopt.model.network import Network
from lgopt.model.plan import GroupPlan, Plan, PlanCost


def with_cost(chip: Chip, net: Network, g: GroupPlan) -> GroupPlan:
    return replace(g, cost={**g.cost, **group_cost(chip, net, g)})


def finish(chip: Chip, net: Network, plan: Plan) -> Plan:
    """Attach plan totals (cycles, traffic, peak LMEM, bank conflicts) and the network's lower bound."""
    extra = io_cast_cost(chip, net, plan)  # the global Casts of the graph's f32 inputs and outputs, if any
    cycles, traffic = extra["cycles"], extra["traffic_bytes"]
    for kind, v in plan.steps:
        c = plan.groups[v].cost if kind == "group" else global_layer_cost(chip, net, net.op(v))
        cycles += c["cycles"]
        traffic += c["traffic_bytes"]
    lb = lower_bound(chip, net)
    cost: PlanCost = {
        "cycles": cycles,
        "traffic_bytes": traffic,
        "lmem_peak": max((g.cost.get("lmem_peak", 0) for g in plan.groups), default=0),
        "bank_conflicts": sum(g.cost.get("bank_conflicts", 0) for g in plan.groups),
        "lower_bound_cycles": lb["cycles"],
        "lower_bound_traffic_bytes": lb["traffic_bytes"],
        "seconds_per_cycle": 1.0 / (chip.tiu_mhz * 1e6),
    }
    return replace(plan, cost=cost)

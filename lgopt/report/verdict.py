"""The verifier with the cost model: what every command that emits or checks a plan runs.

:mod:`lgopt.check` may not import the planner's modules, the cost model included, so it is handed in here,
the first layer that sees both (``docs/plan-format.md`` states what the verifier enforces).
"""

from __future__ import annotations

from lgopt.check.verify import CostFunctions, Violation, verify_plan
from lgopt.cost.bound import lower_bound
from lgopt.cost.cycles import global_layer_cost, io_cast_cost
from lgopt.cost.pipeline import group_cost
from lgopt.model.network import Network
from lgopt.model.plan import Plan
from lgopt.tpumlir.lowering import network_of


def planner_costs() -> CostFunctions:
    """lgopt's cost functions (whichever model the plan's chip names), for the verifier to recompute with."""
    return CostFunctions(group_cost, global_layer_cost, lower_bound, io_cast_cost)


def verify(net: Network, plan: Plan, stop_at_first: bool = False) -> list[Violation]:
    """Every violation of ``plan``, its recorded costs included (empty when it holds).  A plan read from a
    TPU-MLIR cache that splits ops is checked against ``net`` lowered the same way (:func:`network_of`): the
    network it was built on, rebuilt from the cache the plan records."""
    return verify_plan(network_of(net, plan), plan, stop_at_first, costs=planner_costs())

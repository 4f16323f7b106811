"""The CP-SAT optimiser's vocabulary: candidate keys, the objective, its settings.

A *candidate* is a contiguous run ``[first, last]`` of local ops (indices in the network's order) in one
of three hand-over variants (:mod:`lgopt.group.handover`): ``""`` on its own, ``"in"`` receiving a tensor
in LMEM from the previous group, ``"out"`` handing one over to the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

INF = 1 << 62
Key = tuple[int, int, str]
"""(first op, last op, hand-over variant ``""``, ``"in"`` or ``"out"``): one candidate group."""
Objective = Literal["cycles", "traffic"]
Formulation = Literal["auto", "monolithic", "decomposed"]


def objective_value(costs: Mapping[str, Any], objective: str) -> int:
    """The number the optimiser minimises, from a cost record (a group's or a plan's)."""
    return int(costs["cycles"] if objective == "cycles" else costs["traffic_bytes"])


@dataclass(frozen=True)
class CpsatSettings:
    """Everything the CP-SAT strategy can be told (the rule settings shared with every strategy are
    :class:`lgopt.strategies.settings.SearchSettings`)."""

    objective: Objective = "cycles"
    time_limit: float = 60.0  # wall seconds for the whole optimisation, or deterministic units (below)
    deterministic: bool = False  # time_limit counts work, not seconds: the same plan on any machine (budget.py)
    workers: int = 2  # CP-SAT workers and evaluation processes
    seed: int = 0
    formulation: Formulation = "auto"
    monolithic_max_ops: int = 10  # "auto" builds one model up to this many local ops
    pack_time: float = 2.0  # effort per exact packing, CP-SAT deterministic time per load-row solve
    orders: int = 1  # topological orders searched: 1 = the given one; up to 3 adds depth- and breadth-first
    handover: bool = True  # let consecutive groups hand a tensor over in LMEM (lgopt.group.handover)
    free_loads: bool = True  # unsliced groups choose each weight's load row (False: the table's own rule)
    cp_sat_params: str = ""  # extra CP-SAT parameters (text format) for the master and monolithic models
    # stop once the proven lower bound reaches this (None: search to the limit): a caller that keeps another
    # plan unless this search beats it by a margin (``--reference``) has its answer then
    stop_bound: int | None = None

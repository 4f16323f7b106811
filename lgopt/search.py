"""The greedy baseline: today's practice, in good faith (seed "Divide the optimal Group").

Groups are contiguous runs of the network's topological order, built from the
tail toward the head.  A candidate run gets the first slicing that the
allocator can place, trying N first (down to its smallest unit), then H, and
giving up on H once the h/2 rule fails (more H slices only duplicate more
rows).  When a candidate cannot be made to fit, the group is cut before it
and the next group starts.  Global layers end groups.  A local op that fits no
slicing even alone runs as a global layer.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from .build import assemble, n_unit, try_group
from .chip import Chip
from .cost import global_layer_cost, group_cost, lower_bound
from .layout import cdiv
from .network import Network
from .plan import GroupPlan, Plan
from .slicing import DEFAULT_H_RATIO, group_io

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SearchSettings:
    h_ratio: float = DEFAULT_H_RATIO
    bank_rule: str = "soft"
    max_h_slices: int = 64
    max_group_ops: int = 256  # longest run the greedy will try to extend (bounds evaluation cost)


def first_feasible_slicing(net: Network, chip: Chip, ops: Sequence[str], st: SearchSettings
                           ) -> tuple[GroupPlan | None, str]:
    """N first to its smallest unit, then H, stopping at the first slicing the allocator places."""
    io = group_io(net, ops)
    batch = max(net.tensor(t).n for t in io.outputs)
    unit = n_unit(net, chip, ops)
    max_n = cdiv(batch, unit)
    why = ""
    for n in range(1, max_n + 1):
        g, why = try_group(net, chip, ops, n, 1, st.h_ratio, st.bank_rule)
        if g is not None:
            return g, ""
        if "allocation" not in why:
            break
    n = max_n
    min_h = min(net.tensor(t).h for t in io.outputs)
    for h in range(2, min(st.max_h_slices, min_h) + 1):
        g, why = try_group(net, chip, ops, n, h, st.h_ratio, st.bank_rule)
        if g is not None:
            return g, ""
        if "allocation" not in why:
            break  # h/2, empty slice or an op that forbids H: more slices will not help
    return None, why


def with_cost(chip: Chip, net: Network, g: GroupPlan) -> GroupPlan:
    return replace(g, cost={**g.cost, **group_cost(chip, net, g)})


def greedy(net: Network, chip: Chip, st: SearchSettings = SearchSettings(), progress: Progress | None = None) -> Plan:
    t0 = time.perf_counter()
    ops = net.ops
    groups: list[GroupPlan] = []
    end = len(ops) - 1
    while end >= 0:
        if progress:
            progress(f"greedy: {len(ops) - 1 - end}/{len(ops)} ops placed")
        if not ops[end].local:
            end -= 1
            continue
        best: GroupPlan | None = None
        start = end
        while start >= 0 and ops[start].local and end - start < st.max_group_ops:
            names = [op.name for op in ops[start:end + 1]]
            g, _ = first_feasible_slicing(net, chip, names, st)
            if g is None:
                break
            best = g
            start -= 1
        if best is None:  # does not fit even alone: leave it to the global-layer path
            end -= 1
            continue
        groups.append(with_cost(chip, net, best))
        end -= len(best.ops)
    groups.reverse()
    plan = assemble(net, chip, groups, "greedy", h_ratio=st.h_ratio, bank_rule=st.bank_rule, status="heuristic",
                    solver={"seconds": round(time.perf_counter() - t0, 3)})
    return finish(chip, net, plan)


def finish(chip: Chip, net: Network, plan: Plan) -> Plan:
    """Attach plan totals (cycles, traffic, peak LMEM, bank conflicts) and the network's lower bound."""
    cycles = traffic = 0
    for kind, v in plan.steps:
        c = plan.groups[v].cost if kind == "group" else global_layer_cost(chip, net, net.op(v))
        cycles += c["cycles"]
        traffic += c["traffic_bytes"]
    lb = lower_bound(chip, net)
    cost = {
        "cycles": cycles,
        "traffic_bytes": traffic,
        "lmem_peak": max((g.cost.get("lmem_peak", 0) for g in plan.groups), default=0),
        "bank_conflicts": sum(g.cost.get("bank_conflicts", 0) for g in plan.groups),
        "lower_bound_cycles": lb["cycles"],
        "lower_bound_traffic_bytes": lb["traffic_bytes"],
        "seconds_per_cycle": 1.0 / (chip.tiu_mhz * 1e6),
    }
    return replace(plan, cost=cost)


def stderr_progress(msg: str) -> None:
    if sys.stderr.isatty():
        print(f"\r{msg:<70}", end="", file=sys.stderr, flush=True)

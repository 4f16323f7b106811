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

import time
from dataclasses import replace
from typing import Sequence

from lgopt.group.build import assemble, n_unit, try_group
from lgopt.group.slicing import group_io
from lgopt.group.totals import finish, with_cost
from lgopt.hw.chip import Chip, for_chip
from lgopt.hw.layout import cdiv
from lgopt.model.network import Network, network_digest
from lgopt.model.plan import GroupPlan, Plan
from lgopt.strategies.settings import Progress, SearchSettings, group_runs


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


def greedy(net: Network, chip: Chip, st: SearchSettings = SearchSettings(), progress: Progress | None = None) -> Plan:
    """Groups from the tail toward the head within each run of ops a group may span (module docstring)."""
    cnet = for_chip(net, chip)  # the ops the chip's compiler keeps out of groups (matmuls on cv18xx) as global
    if cnet is not net:
        return replace(greedy(cnet, chip, st, progress), model_digest=network_digest(net))
    t0 = time.perf_counter()
    ops = net.ops
    groups: list[GroupPlan] = []
    first = {k: s for s, e in group_runs(net, st) for k in range(s, e + 1)}  # op -> first op of its run
    end = len(ops) - 1
    while end >= 0:
        if progress:
            progress(f"greedy: {len(ops) - 1 - end}/{len(ops)} ops placed")
        if end not in first:
            end -= 1
            continue
        best: GroupPlan | None = None
        start = end
        while start >= first[end] and end - start < st.max_group_ops:
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

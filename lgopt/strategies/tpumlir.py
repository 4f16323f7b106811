"""TPU-MLIR's own grouping as a strategy: its cache, read by :mod:`lgopt.io.tpumlir_cache`, scored with
lgopt's timesteps, allocator and cost model."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lgopt.group.build import assemble, try_group
from lgopt.group.totals import finish, with_cost
from lgopt.hw.chip import Chip
from lgopt.io.tpumlir_cache import map_groups, read_cache
from lgopt.model.network import Network
from lgopt.model.plan import GroupPlan, Plan
from lgopt.strategies.settings import SearchSettings


def score(net: Network, chip: Chip, cache_path: str, st: SearchSettings = SearchSettings()
          ) -> tuple[Plan, dict[str, Any]]:
    """TPU-MLIR's grouping as an lgopt plan, and what had to be adjusted to make it one."""
    m = map_groups(net, read_cache(cache_path))
    plans: list[GroupPlan] = []
    adjusted: list[str] = []
    dropped: list[str] = []
    for ops, g in m.groups:
        n, c, d, h, w = (list(g.secs) + [1] * 5)[:5]
        if c > 1 or d > 1 or w > 1:
            adjusted.append(f"{ops[0]}..: C/D/W slices {c}/{d}/{w} have no lgopt equivalent; H slices x{w}")
            h *= w
        if any(not net.op(o).local for o in ops):
            dropped.append(f"{ops[0]}..: contains an op lgopt runs as a global layer")
            ops = tuple(o for o in ops if net.op(o).local)
        if not ops:
            continue
        gp, why = try_group(net, chip, ops, n, h, st.h_ratio, st.bank_rule)
        h2 = h
        while gp is None and h2 < st.max_h_slices:  # lgopt's sizes may need more slices than TPU-MLIR's
            h2 += 1
            gp, _ = try_group(net, chip, ops, n, h2, st.h_ratio, st.bank_rule)
        if gp is None:
            dropped.append(f"{ops[0]}..{ops[-1]} ({len(ops)} ops, secs n={n} h={h}): {why}; run as global layers")
            continue
        if h2 != h:
            adjusted.append(f"{ops[0]}..{ops[-1]}: h_slices {h} -> {h2} ({why})")
        plans.append(with_cost(chip, net, gp))
    plan = assemble(net, chip, plans, "tpu-mlir", h_ratio=st.h_ratio, bank_rule=st.bank_rule, status="scored")
    plan = finish(chip, net, plan)
    info = {"cache": str(cache_path), "groups_in_cache": len(m.groups), "groups_scored": len(plans),
            "ops_mapped": sum(len(o) for o, _ in m.groups), "unmapped": list(m.unmapped), "casts_skipped": m.casts,
            "adjusted": adjusted, "dropped": dropped, "notes": list(m.notes)}
    return replace(plan, solver={**plan.solver, "tpu_mlir": info}), info

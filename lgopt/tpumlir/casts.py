"""The Casts of the network's inputs and outputs pulled into the groups next to them.

TPU-MLIR's F16 deployment keeps the graph's inputs and outputs f32 and converts them: each as a global layer
(an input: load f32, store f16, then its first group loads the f16 copy again) or inside the group next to it,
which loads the f32 slice of an input and converts it in LMEM, or converts an output before storing it as f32.
ShuffleNet's ``[1, 3, 224, 224]`` input on BM1684X: 17,219 cycles of global Cast against about 5,000 more in
the first group; unet_small's output: 16,432 cycles as a global Cast.  A plan's groups are searched with the
Casts global; this pass then rebuilds each group that loads a network input or stores a network output with
the f32 slices budgeted beside the others (``f32_copies``), with its own H slices or up to 4x as many where the
f32 slice needs thinner ones, keeps the version the model predicts cheapest (the global Casts counted) where
the greedy allocator fits it (milliseconds a try: the pass runs after the search's time limit, so it never
waits on the exact packer), and marks it (``GroupPlan.f32_in`` / ``f32_out``) so that the TPU-MLIR exporter
puts the Casts in the group.  The cost model says whether the deployment has such casts at all (``f32_io``);
where it does not, plans are returned unchanged.
"""

from __future__ import annotations

from dataclasses import replace

from lgopt.cost.cycles import io_cast_cost
from lgopt.cost.registry import cost_model
from lgopt.group.build import try_group
from lgopt.group.totals import finish, with_cost
from lgopt.hw.chip import Chip
from lgopt.model.network import Network
from lgopt.model.plan import GroupPlan, Plan
from lgopt.strategies.cpsat.result import with_value
from lgopt.strategies.settings import SearchSettings, packing

H_FACTORS = (1, 2, 3, 4)  # H slices tried for the group with the f32 slices, as multiples of its own


def _io_of(net: Network, g: GroupPlan) -> tuple[str, ...]:
    """The network inputs ``g`` loads and the network outputs it stores, not converted yet, not f32 already."""
    loaded = {tr.name for row in g.rows for tr in row.loads if tr.kind == "activation"}
    stored = {tr.name for row in g.rows for tr in row.stores if tr.kind == "activation"}
    ins = [t for t in net.inputs if t in loaded and t not in g.f32_in]
    outs = [t for t in net.outputs if t in stored and t not in g.f32_out]
    return tuple(t for t in ins + outs if net.tensor(t).dtype != "f32")


def convert_io_in_groups(net: Network, chip: Chip, plan: Plan, search: SearchSettings) -> Plan:
    """``plan`` with the network's inputs and outputs converted by the groups next to them, where that fits
    and the model predicts it cheaper."""
    if not cost_model(chip).f32_io:
        return plan
    groups = list(plan.groups)
    changed = False
    for k, g in enumerate(groups):
        todo = _io_of(net, g)
        if not todo or g.kept_in or g.kept_out:
            continue
        before = io_cast_cost(chip, net, replace(plan, groups=tuple(groups)))["cycles"] + g.cost["cycles"]
        best = None
        for h in sorted({g.h_slices * m for m in H_FACTORS}):
            wide, _ = try_group(net, chip, g.ops, g.n_slices, h, search.h_ratio, search.bank_rule,
                                w_slices=g.w_slices, f32_copies=todo, c_slices=g.c_slices,
                                reload_columns=search.reload_columns, packing=lambda t: packing(chip, net, search, t))
            if wide is None or set(wide.f32_in) | set(wide.f32_out) != set(todo):
                continue
            wide = with_cost(chip, net, wide)
            after = replace(plan, groups=tuple(groups[:k] + [wide] + groups[k + 1:]))
            saved = before - io_cast_cost(chip, net, after)["cycles"] - wide.cost["cycles"]
            if saved > 0 and (best is None or saved > best[0]):
                best = (saved, wide)
        if best is not None:
            groups[k] = best[1]
            changed = True
    if not changed:
        return plan
    converted = [t for g in groups for t in g.f32_in + g.f32_out]
    out = finish(chip, net, replace(plan, groups=tuple(groups)))
    solver = {**with_value(plan.solver, int(out.cost["cycles"])), "io_converted_in_groups": converted}
    return replace(out, solver=solver)

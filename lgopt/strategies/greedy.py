"""The greedy baseline: today's practice, in good faith (seed "Divide the optimal Group").

Groups are contiguous runs of the network's topological order, built from the
tail toward the head.  A candidate run gets the first slicing that the
allocator can place, trying N first (down to its smallest unit), then H, and
giving up on H once the h/2 rule fails (more H slices only duplicate more
rows).  When a candidate cannot be made to fit, the group is cut before it
and the next group starts.  Global layers end groups.  A local op that fits no
slicing even alone runs as a global layer.  A group with a MatMul whose weight can be reloaded by output
columns, when N and H slices do not fit, gets the cheapest column (W) slicing that beats its ops run as
global layers (:func:`column_slicing`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Sequence

from lgopt.group.build import assemble, n_unit, try_group, try_kept_group, w_slice_options
from lgopt.group.cost import global_layer_cost
from lgopt.group.handover import handover
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
    g, why_w = column_slicing(net, chip, ops, st)
    return g, why_w or why


def column_slicing(net: Network, chip: Chip, ops: Sequence[str], st: SearchSettings
                   ) -> tuple[GroupPlan | None, str]:
    """The cheapest W (column) slicing of a group (a column-sliced MatMul's weight reloaded a run of columns
    per slice), among the counts :func:`w_slice_options` proposes, with 1, 2 or 4 H slices; else (None, why).

    Why the cheapest, not the first: fewer slices reload what a MatMul reads whole (its A, all K columns) less
    often but hold wider weight runs, so the best count is not the smallest that fits.  Whether it is worth
    keeping at all is :func:`pays`: unlike N and H slices, column slices can cost more than the global layers
    they replace (a short group pays the pipeline's fill and every slice's DMA latency, a MatMul's A is
    reloaded per slice); greedy grows such groups anyway and keeps the longest that pays.
    """
    options = w_slice_options(net, chip, ops, st.max_w_slices)
    if not options:
        return None, ""
    best: GroupPlan | None = None
    why = "no column slicing fits"
    unit = n_unit(net, chip, ops)
    n = cdiv(max(net.tensor(t).n for t in group_io(net, ops).outputs), unit)
    for h in (1, 2, 4):
        for w in options:
            g, why_hw = try_group(net, chip, ops, n, h, st.h_ratio, st.bank_rule, w_slices=w)
            if g is None:
                if "allocation" not in why_hw:
                    why = why_hw
                    if w == options[0]:
                        return best, why  # a rule (a row-wise op, h/2), not LMEM: more slices will not help
                continue
            g = with_cost(chip, net, g)
            if best is None or g.cost["cycles"] < best.cost["cycles"]:
                best = g
        if best is not None:
            break
    if best is None:
        return None, why
    return best, ""


def pays(net: Network, chip: Chip, g: GroupPlan) -> bool:
    """Whether a group may be kept: any N/H-sliced one (today's practice), a W-sliced one only when it costs
    fewer cycles than its ops run as global layers (:func:`column_slicing` says why)."""
    if g.w_slices == 1:
        return True
    return g.cost["cycles"] < sum(global_layer_cost(chip, net, net.op(o))["cycles"] for o in g.ops)


def hand_over_to_columns(net: Network, chip: Chip, st: SearchSettings, groups: list[GroupPlan]) -> list[GroupPlan]:
    """Each column-sliced group receives from the group just before it, in LMEM, what that group's last op
    hands its first (:mod:`lgopt.group.handover`), when both still fit and the pair costs fewer cycles.

    Why: a column-sliced group's MatMuls read their A whole in every slice; received whole and resident, A is
    loaded once instead of once per column slice (an LLM MLP's normalised input, reloaded 15 times at 15 slices,
    is more traffic than the gate and up outputs grouping saves).  The receiving group's column count is chosen
    again, since the pinned tensor takes LMEM from its weight runs.
    """
    out = list(groups)
    index = net.op_index
    for k in range(len(out) - 1):
        a, b = out[k], out[k + 1]
        if b.w_slices == 1 or a.kept_in or a.kept_out or b.kept_in or b.kept_out \
                or index[a.ops[-1]] + 1 != index[b.ops[0]]:
            continue
        tensors = handover(net, index[b.ops[0]])
        if not tensors:
            continue
        ga = try_kept_group(net, chip, a.ops, a.n_slices, a.h_slices, a.w_slices, (), tensors, b.ops,
                            st.h_ratio, st.bank_rule)
        if ga is None:
            continue
        best: GroupPlan | None = None
        for w in dict.fromkeys([b.w_slices] + w_slice_options(net, chip, b.ops, st.max_w_slices)):
            gb = try_kept_group(net, chip, b.ops, b.n_slices, b.h_slices, w, tensors, (), (), st.h_ratio,
                                st.bank_rule)
            if gb is not None and (best is None or gb.cost["cycles"] < best.cost["cycles"]):
                best = gb
        if best is not None and ga.cost["cycles"] + best.cost["cycles"] < a.cost["cycles"] + b.cost["cycles"]:
            out[k], out[k + 1] = ga, best
    return out


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
            if pays(net, chip, g):  # a column-sliced group that does not pay yet may once it grows
                best = g
            start -= 1
        if best is None:  # does not fit even alone: leave it to the global-layer path
            end -= 1
            continue
        groups.append(with_cost(chip, net, best))
        end -= len(best.ops)
    groups.reverse()
    groups = hand_over_to_columns(net, chip, st, groups)
    plan = assemble(net, chip, groups, "greedy", h_ratio=st.h_ratio, bank_rule=st.bank_rule, status="heuristic",
                    solver={"seconds": round(time.perf_counter() - t0, 3)})
    return finish(chip, net, plan)

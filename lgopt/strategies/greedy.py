"""The greedy baseline: today's practice, in good faith (seed "Divide the optimal Group").

Groups are contiguous runs of the network's topological order, built from the
tail toward the head.  A candidate run gets the first slicing that the
allocator can place, trying N first (down to its smallest unit), then H, and
giving up on H once the h/2 rule fails (more H slices only duplicate more
rows).  When a candidate cannot be made to fit, the group is cut before it
and the next group starts.  Global layers end groups.  A local op that fits no
slicing even alone runs as a global layer.  A group with a MatMul whose weight can be reloaded by output
columns, when N and H slices do not fit, gets the cheapest column (W) slicing that beats its ops run as
global layers (:func:`column_slicing`); afterwards column-sliced groups are chained with their neighbours in
LMEM (:func:`hand_over_to_columns`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Sequence

from lgopt.cost.cycles import global_layer_cost
from lgopt.group.build import assemble, c_slice_options, n_unit, try_group, try_kept_group, w_slice_options
from lgopt.group.handover import handover
from lgopt.group.slicing import group_io
from lgopt.group.totals import finish, with_cost
from lgopt.hw.chip import Chip, for_chip
from lgopt.hw.layout import cdiv
from lgopt.model.network import Network, network_digest
from lgopt.model.plan import GroupPlan, Plan
from lgopt.strategies.settings import Progress, SearchSettings, group_runs, packing


def _try(net: Network, chip: Chip, st: SearchSettings, ops: Sequence[str], n: int, h: int, c: int = 1, w: int = 1
         ) -> tuple[GroupPlan | None, str]:
    """:func:`try_group` under ``st``'s rules, packed as :func:`packing` asks."""
    return try_group(net, chip, ops, n, h, st.h_ratio, st.bank_rule, w_slices=w, c_slices=c,
                     reload_columns=st.reload_columns, packing=lambda g: packing(chip, net, st, g))


def first_feasible_slicing(net: Network, chip: Chip, ops: Sequence[str], st: SearchSettings
                           ) -> tuple[GroupPlan | None, str]:
    """N first to its smallest unit, then H, stopping at the first slicing the allocator places."""
    io = group_io(net, ops)
    batch = max(net.tensor(t).n for t in io.outputs)
    unit = n_unit(net, chip, ops)
    max_n = cdiv(batch, unit)
    why = ""
    for n in range(1, max_n + 1):
        g, why = _try(net, chip, st, ops, n, 1)
        if g is not None:
            return g, ""
        if "allocation" not in why:
            break
    n = max_n
    min_h = min(net.tensor(t).h for t in io.outputs)
    top = min(st.max_h_slices, min_h)
    if all(net.tensor(t).rows_on_lanes for o in ops for t in net.op(o).inputs + net.op(o).outputs):
        # rows lie across the lanes: at ceil(rows / lanes) slices each holds one row a lane, and more slices
        # shrink no buffer (they only repeat loads), so if that many do not place, more will not
        top = min(top, cdiv(max(net.tensor(t).h for t in io.outputs), chip.npu_num))
    for h in range(2, top + 1):
        g, why = _try(net, chip, st, ops, n, h)
        if g is not None:
            return g, ""
        if "allocation" not in why:
            break  # h/2, empty slice or an op that forbids H: more slices will not help
    g, why_c = channel_slicing(net, chip, ops, st, n, top)
    if g is not None:
        return g, ""
    g, why_w = column_slicing(net, chip, ops, st)
    return g, why_w or why_c or why


def channel_slicing(net: Network, chip: Chip, ops: Sequence[str], st: SearchSettings, n: int, top: int
                    ) -> tuple[GroupPlan | None, str]:
    """The first channel (heads) slicing that places, once N and H alone do not: the counts of
    :func:`lgopt.group.build.c_slice_options` fewest first, each with 1 to ``top`` H slices; else (None, why)."""
    why = ""
    for c in c_slice_options(net, chip, ops):
        if c > st.max_c_slices:
            break
        for h in range(1, top + 1):
            g, why = _try(net, chip, st, ops, n, h, c=c)
            if g is not None:
                return g, ""
            if "allocation" not in why:
                break
    return None, why


def column_slicing(net: Network, chip: Chip, ops: Sequence[str], st: SearchSettings
                   ) -> tuple[GroupPlan | None, str]:
    """The cheapest W (column) slicing of a group (a column-sliced MatMul's weight reloaded a run of columns
    per slice), among the counts :func:`w_slice_options` proposes, with 1, 2 or 4 H slices; else (None, why).

    Why the cheapest, not the first: fewer slices reload what a MatMul reads whole (its A, all K columns) less
    often but hold wider weight runs, so the best count is not the smallest that fits; the counts are tried
    upwards from the first that fits until one costs more than the one before.  Whether it is worth
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
            g, why_hw = _try(net, chip, st, ops, n, h, w=w)
            if g is None:
                if "allocation" not in why_hw:
                    why = why_hw
                    if w == options[0]:
                        return best, why  # a rule (a row-wise op, h/2), not LMEM: more slices will not help
                continue
            g = with_cost(chip, net, g)
            if best is not None and g.cost["cycles"] >= best.cost["cycles"]:
                break  # past the cheapest: more slices repeat more loads (greedy assumes one minimum)
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


MAX_RECEIVER_OPS = 8  # longest run of ops a hand-over pass regroups after a column-sliced group


def hand_over_to_columns(net: Network, chip: Chip, st: SearchSettings, groups: list[GroupPlan]) -> list[GroupPlan]:
    """Chains of groups around column-sliced ones, meeting in LMEM (:mod:`lgopt.group.handover`): each group,
    in order, hands what its last op gives the next op over to a group starting there, when one of the two is
    column-sliced, both still fit and the steps they replace cost more cycles.

    The receiver is the next group, or a run of the next ops (global layers, and whole groups) regrouped to
    receive, its slicing chosen again (N = 1, 1, 2 or 4 H slices, no W slices or the counts of
    :func:`w_slice_options`), since the pinned tensor takes LMEM.  Why: a column-sliced group's MatMuls read
    their A whole in every slice; received whole and resident, A is loaded once instead of once per column
    slice (an LLM MLP's normalised input, reloaded per slice, is more traffic than grouping the gate and up
    projections saves), and what such a group computes whole (the SwiGLU product the down projection reads)
    can be handed to a down projection sliced by its own output columns.  A group in the middle of a chain both
    receives and hands over (:func:`lgopt.group.handover.pin_below`).
    """
    index = net.op_index
    out = _split_whole_heads(net, chip, st, sorted(groups, key=lambda g: index[g.ops[0]]))
    grouped = {o: k for k, g in enumerate(out) for o in g.ops}
    first_of = {k: s for s, e in group_runs(net, st) for k in range(s, e + 1)}
    run_end = {k: e for s, e in group_runs(net, st) for k in range(s, e + 1)}
    k = 0
    while k < len(out):
        a = out[k]
        b0 = index[a.ops[-1]] + 1
        tensors = handover(net, b0)
        if a.kept_out or not tensors or b0 not in first_of or first_of[b0] != first_of[index[a.ops[0]]]:
            k += 1
            continue
        fixed = _received_at(out[k - 1], a) if a.kept_in and k > 0 else None
        best: tuple[int, GroupPlan, GroupPlan, int] | None = None  # (saving, giver, receiver, steps replaced)
        e, replaced, gone = b0, 0, 0
        while e <= min(run_end[b0], b0 + MAX_RECEIVER_OPS - 1):
            op = net.ops[e]
            if op.name in grouped:  # a whole group joins the run, or the run stops
                g = out[grouped[op.name]]
                if index[g.ops[0]] != e or g.kept_in or g.kept_out:
                    break
                replaced += int(g.cost["cycles"])
                gone += 1
                e = index[g.ops[-1]]
            else:
                replaced += int(global_layer_cost(chip, net, op)["cycles"])
            names = tuple(o.name for o in net.ops[b0:e + 1])
            pair = _hand_over(net, chip, st, a, names, tensors, fixed)
            if pair is not None:
                saving = int(a.cost["cycles"]) + replaced - int(pair[0].cost["cycles"]) - int(pair[1].cost["cycles"])
                if saving > 0 and (best is None or saving > best[0]):
                    best = (saving, pair[0], pair[1], gone)
            e += 1
        if best is not None:
            _, ga, gb, gone = best
            out[k:k + 1 + gone] = [ga, gb]
            grouped = {o: i for i, g in enumerate(out) for o in g.ops}
        k += 1
    return out


def _split_whole_heads(net: Network, chip: Chip, st: SearchSettings, groups: list[GroupPlan]) -> list[GroupPlan]:
    """Each column-sliced group whose first ops compute every column in every slice (an RMSNorm before the
    gate and up projections: the MatMuls read it whole) split there: those ops, with the plain group just
    before when it is adjacent, as an N/H-sliced group handing its last output over in LMEM to the
    column-sliced rest, when the two cost fewer cycles than what they replace.  Why: computed whole once per
    column slice, the head repeats its work and holds whole-row buffers that leave the weight runs little LMEM.
    """
    out = list(groups)
    index = net.op_index
    k = 0
    while k < len(out):
        g = out[k]
        if g.w_slices == 1 or g.kept_in or g.kept_out:
            k += 1
            continue
        head: list[str] = []
        for o in g.ops:
            t = net.op(o).outputs[0]
            if any(c != (0, net.tensor(t).w) for c in g.w_windows[t]):
                break
            head.append(o)
        if not head or len(head) == len(g.ops):
            k += 1
            continue
        prev = out[k - 1] if k > 0 else None
        merge = prev is not None and prev.w_slices == 1 and not prev.kept_in and not prev.kept_out \
            and index[prev.ops[-1]] + 1 == index[g.ops[0]]
        head_ops = (list(prev.ops) if merge and prev is not None else []) + head
        replaced = int(g.cost["cycles"]) + (int(prev.cost["cycles"]) if merge and prev is not None else 0)
        h, _ = first_feasible_slicing(net, chip, head_ops, st)
        tensors = handover(net, index[g.ops[len(head)]])
        pair = _hand_over(net, chip, st, h, tuple(g.ops[len(head):]), tensors, None) \
            if h is not None and h.w_slices == 1 and tensors else None
        if pair is not None and int(pair[0].cost["cycles"]) + int(pair[1].cost["cycles"]) < replaced:
            lo = k - 1 if merge else k
            out[lo:k + 1] = list(pair)
            k = lo + 2
            continue
        k += 1
    return out


def _received_at(giver: GroupPlan, g: GroupPlan) -> dict[str, int]:
    """Where ``giver`` put the tensors ``g`` receives."""
    return {b.name: b.offset for b in giver.buffers if b.kind == "activation" and b.name in g.kept_in}


def _hand_over(net: Network, chip: Chip, st: SearchSettings, a: GroupPlan, names: tuple[str, ...],
               tensors: tuple[str, ...], fixed: dict[str, int] | None) -> tuple[GroupPlan, GroupPlan] | None:
    """Group ``a`` rebuilt to hand ``tensors`` over and the cheapest slicing of ``names`` receiving them, or
    None; only when one of the two is column-sliced (what this pass is for: N/H groups keep greedy's own
    choices)."""
    counts = [w for w in [1] + w_slice_options(net, chip, names, st.max_w_slices) if w > 1 or a.w_slices > 1]
    if not counts:  # neither side column-sliced: not this pass's business (and no scheduling spent on it)
        return None
    ga: GroupPlan | None = None
    ws = [a.w_slices] + (w_slice_options(net, chip, a.ops, st.max_w_slices) if a.w_slices > 1 else [])
    for w in dict.fromkeys(ws):  # a column-sliced giver counts its columns again: the handed tensor takes LMEM
        g = try_kept_group(net, chip, a.ops, a.n_slices, a.h_slices, w, a.kept_in, tensors, names,
                           st.h_ratio, st.bank_rule, fixed=fixed if a.kept_in else None,
                           reload_columns=st.reload_columns)
        if g is not None and (ga is None or g.cost["cycles"] < ga.cost["cycles"]):
            ga = g
    if ga is None:
        return None
    at = _received_at(ga, replace(ga, kept_in=tensors))
    best: GroupPlan | None = None
    for w in counts:
        for h in (1, 2, 4):
            gb = try_kept_group(net, chip, names, 1, h, w, tensors, (), (), st.h_ratio, st.bank_rule, fixed=at,
                                reload_columns=st.reload_columns)
            if gb is not None and (best is None or gb.cost["cycles"] < best.cost["cycles"]):
                best = gb
            if gb is not None:
                break  # more H slices only reload weights more often
    return (ga, best) if best is not None else None


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

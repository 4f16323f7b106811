"""Lower bounds the decomposed search's optimality proof rests on.

Each is a fact about :func:`lgopt.group.cost.group_cost` (the analytic cost model): a cost no choice
inside its scope can beat.  When the cost model changes, these are what must be proved again; the tests
hold each against every table of sampled intervals (``tests/test_bounds.py``).

* :func:`fluid_bound`, :func:`whole_load_bound`: the best weight load rows of one unsliced table,
  relaxed two different ways;
* :func:`interval_lower_bound`: the best slicing of a candidate, from per-op figures alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from lgopt.group.cost import activation_dma_cycles, cost_model, gmem_bytes
from lgopt.group.handover import store_skipped
from lgopt.strategies.cpsat.common import INF

if TYPE_CHECKING:  # the space imports the load-row bounds below: no import at run time
    from lgopt.strategies.cpsat.space import CandidateSpace


def fluid_bound(base_cycles: int, slack: Sequence[int], weights: Sequence[tuple[int, int]]) -> int:
    """Cycles of the best load choice if DMA could be split freely and LMEM were unlimited.

    ``base_cycles`` is the table without weights; ``slack[r]`` the TIU cycles of
    row ``r`` not already covered by GDMA; ``weights`` are (use row, DMA cycles).
    A weight's DMA hides only under slack of rows before its use; what does not
    hide adds to the total one for one.  The most that can hide is a max-flow
    whose neighbourhoods are nested prefixes of the rows, so its min cut is a
    prefix: ``min_k (slack of rows < k + DMA of weights used after k)``.
    """
    total = sum(c for _, c in weights)
    if not weights:
        return base_cycles
    prefix = [0]
    for s in slack:
        prefix.append(prefix[-1] + max(0, s))
    due = sorted(weights)
    best = total
    j = 0
    later = total  # DMA of weights used after row k
    for k in range(len(slack) + 1):
        while j < len(due) and due[j][0] <= k:
            later -= due[j][1]
            j += 1
        best = min(best, prefix[k] + later)
    return base_cycles + total - best


def whole_load_bound(tiu: Sequence[int], weights: Sequence[tuple[int, int]]) -> int:
    """Cycles of the best load choice if every row could hide a whole weight, one weight per row.

    ``tiu[r]`` is the compute of row ``r`` (an upper bound on its spare cycles);
    ``weights`` are (use row, DMA cycles).  A weight loads in one row, so at
    best it hides under the largest compute before its use and the rest shows:
    ``sum tiu + sum (c - max tiu before use)+``.  Where the fluid bound lets a
    74k-cycle weight hide in slivers under four 18k-cycle rows, this one does
    not: it is the cheap form of :func:`exposure_cut`.
    """
    best_before = [0]
    for t in tiu:
        best_before.append(max(best_before[-1], t))
    return sum(tiu) + sum(max(0, c - best_before[u]) for u, c in weights)


def interval_lower_bound(space: CandidateSpace, i: int, j: int, v: str = "") -> int:
    """A cost no slicing of ``[i, j]`` (in variant ``v``) can beat, in O(j - i) from per-op figures.

    cycles: the smaller of
      * unsliced: all TIU work plus the weight DMA that no load-row choice can
        hide under the compute of rows before its use, split freely
        (:func:`lgopt.strategies.cpsat.loadrows.fluid_bound`) or each weight whole in one row
        (:func:`lgopt.strategies.cpsat.loadrows.whole_load_bound`), whichever is more; activation
        transfers only add;
      * sliced: all TIU work (slicing never reduces it, and a second slice issues
        every op again) plus every weight, loaded once before the loop and resident; with a column-sliced
        MatMul (weight runs reloaded in the table), the larger of the TIU work and the weights' DMA;
    plus, in both modes, the pipeline's fill (the first op's inputs, loaded before
    any compute) and drain (the last op's stored outputs, after all of it): one
    transfer's latency each, and unsliced, the stored outputs whole (a strided
    op may read fewer rows than its input has, so the fill's size is not known
    without slicing the group);
    each mode left out when :meth:`CandidateSpace.fits` rules it out;
    and never less than the outputs and weights crossing GMEM once.
    traffic: outputs and weights crossing GMEM once.
    Handing over only takes LMEM away and skips stores: the same bound holds
    with the skipped stores left out.
    """
    net, chip = space.net, space.chip
    skipped = {t for t in space.kept(i, j, v)[1] if store_skipped(net, t, j + 1)}
    out_bytes = 0
    for k in range(i, j + 1):
        for t in net.ops[k].outputs:
            if t in skipped:
                continue
            if space.last_use[t] > j or t in space.net_outputs:
                out_bytes += gmem_bytes(net, t, net.tensor(t).n, net.tensor(t).h)
    w = sum(space.op_weight_gmem[i:j + 1])
    if space.objective == "traffic":
        return out_bytes + w
    tiu = space.op_tiu[i:j + 1]
    weights = [(r, space.op_weight_dma[k]) for r, k in enumerate(range(i, j + 1)) if space.op_weight_dma[k]]
    # the pipeline's fill loads what the first op reads and its drain stores what the last op writes,
    # with no compute beside them: unsliced, whole tensors; sliced, at least one transfer each
    kin = space.kept(i, j, v)[0]
    first_in = [t for t in dict.fromkeys(net.ops[i].inputs) if t not in kin]
    last_out = [t for t in net.ops[j].outputs
                if t not in skipped and (space.last_use[t] > j or t in space.net_outputs)]
    edges = len(first_in) + len(last_out)
    drain = sum(activation_dma_cycles(chip, net, t, net.tensor(t).n, net.tensor(t).h) for t in last_out)
    unsliced = max(fluid_bound(sum(tiu), tiu, weights), whole_load_bound(tiu, weights)) + drain + \
        chip.gdma_latency_cycles * len(first_in)
    can_whole, can_slice = space.fits(i, j)
    unsliced = unsliced if can_whole else INF
    sliced = (sum(tiu) + cost_model(chip).issue_cycles * (j + 1 - i) + sum(c for _, c in weights)
              + chip.gdma_latency_cycles * edges) if can_slice else INF
    if can_slice and space.has_columns(i, j):
        # column slices load weight runs in the table, under other ops' compute: no more than every row's TIU
        # work or every weight's DMA (runs of columns cost at least the whole weight's), whichever is more
        sliced = min(sliced, max(sum(tiu) + cost_model(chip).issue_cycles * (j + 1 - i), sum(c for _, c in weights)))
    stream = int((out_bytes + w) * chip.tiu_mhz * 1e6 / (chip.gdma_gbps * 1e9))
    return max(min(unsliced, sliced), stream)

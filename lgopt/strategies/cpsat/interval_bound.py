"""The interval lower bound the decomposed search prices candidates with: a cost no slicing of a run of ops
can beat, from per-op figures alone.  A fact about :func:`lgopt.cost.pipeline.group_cost`, like the table bounds
of :mod:`lgopt.strategies.cpsat.bounds` it builds on; ``tests/test_bounds.py`` holds it against every table of
sampled intervals.
"""

from __future__ import annotations

from lgopt.cost.cycles import activation_dma_cycles
from lgopt.cost.registry import cost_model
from lgopt.cost.work import gmem_bytes
from lgopt.group.handover import store_skipped
from lgopt.strategies.cpsat.bounds import fluid_bound, whole_load_bound
from lgopt.strategies.cpsat.common import INF
from lgopt.strategies.cpsat.space import CandidateSpace


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
        MatMul (weight runs reloaded in the table), the larger of the TIU work and the weights' DMA; where the
        weights reach LMEM's size and each slice reloads them (:meth:`CandidateSpace.reloads_weights`), the
        larger of the TIU work and the weights' DMA twice (two slices at least, each loading all of them);
        where the cost model moves held weights' loads into the first slice's rows (``rebalance_loads``, the
        fitted TPU-MLIR models), the larger of the TIU work and the weights' DMA (YOLOv5s / BM1688's [132-135]
        at 5 H slices: 455,737 cycles, 462,643 by the sum);
    plus, in both modes, the pipeline's fill (the first op's inputs, loaded before
    any compute) and drain (the last op's stored outputs, after all of it, at the store rate): one
    transfer's latency each, and unsliced, the stored outputs whole (a strided
    op may read fewer rows than its input has, so the fill's size is not known
    without slicing the group);
    each mode left out when :meth:`CandidateSpace.fits` rules it out;
    and never less than the outputs and weights crossing GMEM once; on several cores (``used_cores``), the sliced
    mode's compute and that stream spread evenly over them (the fill and drain dropped: a safe weakening).
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
    drain = sum(activation_dma_cycles(chip, net, t, net.tensor(t).n, net.tensor(t).h, "store") for t in last_out)
    unsliced = max(fluid_bound(sum(tiu), tiu, weights), whole_load_bound(tiu, weights)) + drain + \
        chip.gdma_latency_cycles * len(first_in)
    can_whole, can_slice = space.fits(i, j)
    unsliced = unsliced if can_whole else INF
    work = sum(tiu) + cost_model(chip).issue_cycles * (j + 1 - i)
    wdma = sum(c for _, c in weights)
    if not can_slice:
        sliced = INF
    elif space.reloads_weights(i, j):  # no weight is held: each slice loads all of them beside its compute
        sliced = max(work, 2 * wdma)
    elif cost_model(chip).rebalance_loads:  # held weights load beside the first slice's compute (TPU-MLIR's moves)
        sliced = max(work, wdma)
    else:
        sliced = work + wdma + chip.gdma_latency_cycles * edges
    if can_slice and space.has_columns(i, j):
        # column slices load weight runs in the table, under other ops' compute: no more than every row's TIU
        # work or every weight's DMA (runs of columns cost at least the whole weight's), whichever is more
        sliced = min(sliced, max(work, wdma))
    stream = int((out_bytes + w) * chip.tiu_mhz * 1e6 / (chip.gdma_gbps * 1e9))
    if chip.used_cores > 1 and can_slice:  # the slices may be spread over the cores: each runs a share of the
        # compute (at best an even one) and loads every resident weight itself
        spread = -(-work // chip.used_cores)
        sliced = max(spread, wdma if not space.has_columns(i, j) else 0)
        stream //= chip.used_cores
    return max(min(unsliced, sliced), stream)

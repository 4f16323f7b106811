"""The network's lower bound: all compute at full size with no halo, or every byte that must cross GMEM
once, whichever is larger; below every plan any strategy can make under the chip's cost model."""

from __future__ import annotations

import math

from lgopt.cost.cycles import gdma_cycles, io_bytes, weight_dma_cycles
from lgopt.cost.model import Transfer
from lgopt.cost.registry import cost_model
from lgopt.cost.work import (
    gmem_bytes,
    gmem_view,
    peak_stream_cycles,
    weight_gmem_bytes,
    weight_transfers,
)
from lgopt.hw.chip import Chip
from lgopt.model.network import Network, Op


def lower_bound(chip: Chip, net: Network) -> dict[str, int]:
    """No plan beats this: full-size compute with no halo, or one GDMA stream of the unavoidable transfers
    (network inputs and outputs and the operands of layers that only run globally at the peak bandwidth,
    every weight once at :func:`min_weight_dma`), each over the cores the plan may use (``used_cores``)."""
    model = cost_model(chip)
    # an op in a group computes at least its global compute; run as a global layer, at least that times its
    # scale (below 1 where the compiler's global kernel beats the model's full-size compute)
    compute = sum(math.floor(model.global_compute(chip, net, op) * (min(1.0, model.global_scale(chip, net, op))
                                                                     if op.local else 1.0)) for op in net.ops)
    must = sum(io_bytes(chip, net, t) for t in set(net.inputs) | set(net.outputs))
    # global layers move all their operands no matter what (views of GMEM nothing, where the model says so)
    free = cost_model(chip).free_views
    for op in net.ops:
        if not chip.local(op) and not (free and gmem_view(net, op)):
            must += sum(gmem_bytes(net, t, net.tensor(t).n, net.tensor(t).h) for t in op.inputs + op.outputs
                        if t not in net.inputs and t not in net.outputs)
    weights = sum(weight_gmem_bytes(op) for op in net.ops)
    dma = peak_stream_cycles(chip, must) + sum(min_weight_dma(chip, net, op) for op in net.ops)
    # several cores share the work at best evenly, and never move data faster (the cost model's contract)
    compute, dma = compute // chip.used_cores, dma // chip.used_cores
    return {"cycles": max(compute, dma), "compute_cycles": compute, "dma_cycles": dma,
            "traffic_bytes": must + weights}



def min_weight_dma(chip: Chip, net: Network, op: Op) -> int:
    """The least any plan spends loading ``op``'s weights: every weight crosses GMEM at least once, in a group
    (one transfer per tensor; cut into pieces, a column-sliced MatMul's, it costs no less, the transfer cost
    being subadditive) or in its global layer (at the global kernels' rate and, for a layer-group op type, the
    smaller of its scales), whichever the cost model makes cheaper.  Every transfer costs at least its bytes at
    the chip's peak bandwidth, so this is never below the bytes-only bound; where a fitted model prices the
    runs of a weight (a depthwise filter's 2,304 bytes reordered into one run per channel: 21,838 cycles on
    BM1684X's timeline) it says so: the bound of mnasnet1_0 / BM1684X, weight-bound, goes from 155 k cycles
    (a quarter of what TPU-MLIR's own grouping measures, 585,570) to 558 k (``benchmarks/room.py``)."""
    if not op.weights:
        return 0
    model = cost_model(chip)
    local = chip.local(op)
    ws: list[Transfer] = ([(b, r, p, "weight") for b, r, p in weight_transfers(op, chip=chip)] if local
                          else [(weight_gmem_bytes(op), 1, False, "weight")])
    ws = [t for t in ws if t[0]]
    glob = model.global_dma_cycles(chip, ws)
    if glob is None:
        glob = sum(gdma_cycles(chip, b, r, k, p) for b, r, p, k in ws)
    stream = peak_stream_cycles(chip, sum(t[0] for t in ws))
    if op.local:  # a local op type run globally: its layer is scaled, never below streaming its bytes
        glob = max(stream, math.floor(glob * min(1.0, model.global_scale(chip, net, op))))
    elif model.global_line(chip, net, op):  # its line may beat its transfers, never the bytes at the peak
        glob = min(glob, stream)
    return min(glob, weight_dma_cycles(chip, op)) if local else glob

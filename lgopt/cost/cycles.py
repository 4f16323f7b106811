"""Cycles of ops and transfers on a chip, by the model the chip names: the functions the planner, the
CP-SAT bounds and the reports call (each dispatches to :func:`lgopt.cost.registry.cost_model`)."""

from __future__ import annotations

import math
from collections.abc import Set
from functools import lru_cache
from typing import cast

from lgopt.cost.model import Bound, DmaKind, SliceShape, Transfer
from lgopt.cost.registry import cost_model
from lgopt.cost.work import (
    activation_transfer,
    as_f32,
    global_transfers,
    gmem_bytes,
    gmem_view,
    peak_stream_cycles,
    requant_transfers,
    weight_gmem_bytes,
    weight_transfers,
)
from lgopt.hw.chip import Chip
from lgopt.hw.layout import cdiv
from lgopt.hw.sizing import TPU_MLIR_FAMILY
from lgopt.model.dtype import is_integer
from lgopt.model.network import Network, Op
from lgopt.model.plan import GroupCost, Plan


def tiu_cycles(chip: Chip, net: Network, op: Op, sl: SliceShape) -> int:
    """Cycles the TIU spends on ``op`` for one slice (or the whole op)."""
    return cost_model(chip).tiu_cycles(chip, net, op, sl)



def io_cast_cycles(chip: Chip, net: Network, name: str, n: int, h: int, w: int, into: bool) -> int:
    """TIU cycles of the Cast a group runs on a slice of network input (``into``: f32 to the plan's dtype) or
    output ``name`` it converts itself (``GroupPlan.f32_in`` / ``f32_out``; TPU-MLIR's first or last op of the
    group): a pass over the slice's f32 elements a lane at the EU's f32 rate, three passes into an integer
    dtype (scale, round, saturate), on the chips whose timelines show it (the BM1684X family); 0 elsewhere.

    Core 0's timelines give it exactly (cycles over elements a lane): 0.25 on BM1688 (16-byte EU, F16 and an
    INT8 output), 0.75 into INT8; 0.0625 on BM1684X and BM1690, 0.1875 into INT8 on BM1690.  The fitted
    models charged only the f32 bytes: MobileNetV2's stem group on BM1688 INT8 with 2 cores, 76,918 cycles
    measured on core 0, 55,912 charged, the two slices' Casts (20,328) the difference.

    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.model.network import Tensor
    >>> t = Tensor("x", (1, 3, 224, 224), "int8")
    >>> net = Network("n", {"x": t}, (), ("x",), ("x",))
    >>> io_cast_cycles(get_chip("bm1688"), net, "x", 1, 58, 224, True)  # 58 rows a lane, 3 passes of 4
    9744
    """
    if chip.conv_buffers not in TPU_MLIR_FAMILY:
        return 0
    ten = net.tensor(name)
    passes = 3 if into and is_integer(ten.dtype) else 1
    return passes * cdiv(n * cdiv(ten.c, chip.npu_num) * h * w, max(1, chip.eu_bytes // 4))


def gdma_cycles(chip: Chip, nbytes: int, segments: int = 1, kind: DmaKind = "load", point_runs: bool = False
                ) -> int:
    """Cycles of one GDMA transfer of ``nbytes`` (GMEM-side bytes) in ``segments`` contiguous runs
    (``point_runs``: each run one element)."""
    return cost_model(chip).gdma_cycles(chip, nbytes, segments, kind, point_runs)



def weight_dma_cycles(chip: Chip, op: Op, cols: int | None = None) -> int:
    """Cycles of loading all of ``op``'s weights (``cols``: a run of that many output columns of a column-sliced
    MatMul's): one transfer per weight tensor, as TPU-MLIR issues them."""
    return _weight_dma(chip, op, cols)



@lru_cache(maxsize=1 << 14)
def _weight_dma(chip: Chip, op: Op, cols: int | None = None) -> int:
    return sum(gdma_cycles(chip, b, s, "weight", p) for b, s, p in weight_transfers(op, cols, chip))



def activation_dma_cycles(chip: Chip, net: Network, tensor: str, n_len: int, h_len: int,
                          kind: DmaKind = "load", w_len: int | None = None) -> int:
    """Cycles of moving batches ``n_len`` x rows ``h_len`` (x columns ``w_len``, all when not given) of an
    activation between GMEM and LMEM."""
    nbytes, segments, point = activation_transfer(net, tensor, n_len, h_len, w_len, align_4n=chip.align_4n)
    return gdma_cycles(chip, nbytes, segments, kind, point)



def global_layer_cost(chip: Chip, net: Network, op: Op) -> GroupCost:
    if cost_model(chip).free_views and gmem_view(net, op):
        return {"cycles": 0, "tiu_cycles": 0, "gdma_cycles": 0, "traffic_bytes": 0}
    moved = [gmem_bytes(net, t, net.tensor(t).n, net.tensor(t).h, chip.align_4n and chip.local(op))
             for t in op.inputs + op.outputs]
    traffic = sum(moved) + weight_gmem_bytes(op) + sum(t[0] for t in requant_transfers(net, op))
    model = cost_model(chip)
    transfers = global_transfers(net, op, chip)
    dma = model.global_dma_cycles(chip, transfers)  # the compiler's global kernels' own rate, where known
    if dma is None:
        dma = sum(gdma_cycles(chip, b, runs, kind, point) for b, runs, point, kind in transfers)
    compute = model.global_compute(chip, net, op)
    stream = peak_stream_cycles(chip, traffic)
    cycles = max(compute, dma)
    if model.global_line(chip, net, op):  # fitted with its transfers: a classifier head's weight streams at
        # 54-58 bytes per cycle on BM1684X's timeline, faster than the global layers' median (49.5): the max
        # with them charged ResNet-18's head 21,356 cycles, measured 18,849
        cycles = max(compute, stream)
    if op.local:  # never below streaming its own bytes, so the lower bound's transfer term holds
        bound: Bound = "tiu" if compute >= dma else "gdma"
        work = compute + dma if model.global_one_pass(chip, net, op) else cycles
        cycles = max(model.global_overhead(chip, net, op, bound)
                     + math.ceil(work * model.global_scale(chip, net, op, bound)), stream)
    cycles = on_cores(chip, net, op, cycles, dma > compute)
    return {"cycles": cycles, "tiu_cycles": compute, "gdma_cycles": dma, "traffic_bytes": traffic}


def on_cores(chip: Chip, net: Network, op: Op, cycles: int, transfer_bound: bool) -> int:
    """A global layer's ``cycles`` on one core, shared by ``chip.used_cores``: as measured for its kind where the
    model knows (TPU-MLIR 1.30 runs an INT8 conv on one core, cuts an elementwise op a piece a core), else each
    core does its share, the transfer-bound ones slowed by :meth:`~lgopt.cost.model.CostModel.cores`, then they
    sync."""
    if chip.used_cores <= 1:
        return cycles
    model = cost_model(chip)
    slowdown, sync = model.cores(chip, chip.used_cores)
    speedup = model.global_speedup(chip, net, op)
    if speedup is None:
        return math.ceil(cycles * (slowdown if transfer_bound else 1.0) / chip.used_cores) + sync
    return math.ceil(cycles / speedup) + (sync if speedup > 1 else 0)



def io_cast_cost(chip: Chip, net: Network, plan: Plan) -> GroupCost:
    """The global Casts a plan runs besides its steps.  Where the deployment keeps the graph's inputs and outputs
    f32 (``f32_io``), each network input no group converts itself (``GroupPlan.f32_in``) is converted by a
    global layer that loads it as f32 and stores it as the plan's dtype, and each network output no group
    converts (``f32_out``) by one that loads it and stores it as f32.  ShuffleNet's ``[1, 3, 224, 224]`` input:
    17,219 cycles on BM1684X's timeline as a global Cast, about 5,000 more (its f32 bytes) in the first group;
    unet_small's output: 16,432 cycles as a global Cast.  TPU-MLIR's own groupings take both casts in.  On several
    cores a Cast is cut a piece a core like any elementwise global layer (:func:`on_cores`; MnasNet's input on
    BM1690's 8: 12,340 cycles on one core, about 3,100 on core 0)."""
    return edge_cast_cost(chip, net, {t for g in plan.groups for t in g.f32_in},
                          {t for g in plan.groups for t in g.f32_out})


def edge_cast_cost(chip: Chip, net: Network, ins: Set[str] = frozenset(), outs: Set[str] = frozenset()
                   ) -> GroupCost:
    """:func:`io_cast_cost` where the groups convert network inputs ``ins`` and outputs ``outs`` themselves; by
    default none: what every plan of a search that leaves the conversions global pays, the same in each."""
    zero: GroupCost = {"cycles": 0, "tiu_cycles": 0, "gdma_cycles": 0, "traffic_bytes": 0}
    model = cost_model(chip)
    if not model.f32_io:
        return zero
    total: dict[str, int] = dict.fromkeys(zero, 0)
    todo = [(t, True) for t in net.inputs if t not in ins] + [(t, False) for t in net.outputs if t not in outs]
    for t, is_input in todo:
        ten = net.tensor(t)
        if ten.dtype == "f32":
            continue
        b = gmem_bytes(net, t, ten.n, ten.h)
        wide = as_f32(b, ten.dtype)
        # one run each: a global Cast moves the whole tensor contiguously (a [1, 1000] output: 639 cycles)
        transfers: list[Transfer] = ([(wide, 1, False, "load"), (b, 1, False, "store")] if is_input
                                     else [(b, 1, False, "load"), (wide, 1, False, "store")])
        dma = model.global_dma_cycles(chip, transfers)
        if dma is None:
            dma = sum(gdma_cycles(chip, x, r, k, p) for x, r, p, k in transfers)
        total["cycles"] += on_cores(chip, net, Op(f"{t}_cast", "Cast", (t,), (t,)), dma, True)
        total["gdma_cycles"] += dma
        total["traffic_bytes"] += wide + b
    return cast(GroupCost, total)



def io_bytes(chip: Chip, net: Network, t: str) -> int:
    """GMEM bytes of network input or output ``t`` as the deployment moves it (f32 where it keeps them f32)."""
    ten = net.tensor(t)
    b = gmem_bytes(net, t, ten.n, ten.h)
    return as_f32(b, ten.dtype) if cost_model(chip).f32_io else b

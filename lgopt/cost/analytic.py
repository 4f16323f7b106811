"""lgopt's documented analytic cost model (``docs/cost-model.md``): work over lane parallelism plus a
fixed issue cost, DMA as latency plus bytes over bandwidth."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from lgopt.cost.model import Bound, DmaKind, SliceShape, Transfer
from lgopt.cost.work import analytic_tiu, peak_stream_cycles
from lgopt.hw.chip import Chip
from lgopt.hw.layout import cdiv
from lgopt.model.network import Network, Op

# GDMA slowdown when several cores move data at once, by chip: TPU-MLIR 1.30's own cycle calculator prices
# BM1688's GDMA at 24 GB/s on one core and 15 GB/s per core on several (reference s7); elsewhere no figure is
# known and the cores are assumed not to contend (docs/cost-model.md)
CORE_SLOWDOWN = {"bm1688": 24.0 / 15.0}


def core_terms(chip: Chip, busy: int) -> tuple[float, int]:
    """The analytic model's :meth:`~lgopt.cost.model.CostModel.cores`: the chip's known DDR slowdown and a sync of
    one transfer's latency (an assumption) when more than one core is busy.

    >>> from lgopt.hw.chip import get_chip
    >>> core_terms(get_chip("bm1688"), 1), core_terms(get_chip("bm1688"), 2)
    ((1.0, 0), (1.6, 300))
    """
    if busy <= 1:
        return 1.0, 0
    return CORE_SLOWDOWN.get(chip.name.lower(), 1.0), chip.gdma_latency_cycles


@dataclass(frozen=True)
class AnalyticModel:
    """Work over lane parallelism plus a fixed issue cost; DMA as latency plus bytes over bandwidth."""

    name: str = "analytic"
    issue_cycles: int = 30  # assumption: fixed cost to issue one TIU instruction (docs/cost-model.md)
    free_views: bool = False  # every global layer moves its operands (docs/cost-model.md)
    rebalance_loads: bool = False  # weight loads stay in the rows the timestep table gives them
    pipelined_preloads: bool = False  # a sliced group's resident weights load before its loop
    f32_io: bool = False  # the network inputs and outputs are the dtype the plan computes in

    def tiu_cycles(self, chip: Chip, net: Network, op: Op, sl: SliceShape) -> int:
        return analytic_tiu(chip, net, op, sl, self.issue_cycles)

    def gdma_cycles(self, chip: Chip, nbytes: int, segments: int = 1, kind: DmaKind = "load",
                    point_runs: bool = False) -> int:
        """Latency plus bytes over bandwidth; the transfer's shape costs nothing extra (an assumption:
        docs/cost-model.md)."""
        return chip.gdma_latency_cycles + peak_stream_cycles(chip, nbytes)

    def global_compute(self, chip: Chip, net: Network, op: Op) -> int:
        outs = [net.tensor(t) for t in op.outputs]
        dt = outs[0].dtype if outs and outs[0].dtype in chip.macs_per_lane else "f32"
        if chip.local(op):  # on a chip that keeps it out of groups, a local type is costed as any global op
            o = outs[0]
            i_h = net.tensor(op.inputs[0]).h if op.inputs else o.h
            return self.tiu_cycles(chip, net, op, SliceShape(o.n, o.h, i_h))
        if op.type in ("Gemm", "MatMul") and op.inputs:
            a = net.tensor(op.inputs[0]).orig_shape or net.tensor(op.inputs[0]).shape
            k = a[-1] if a else 1
            macs = sum(t.elems for t in outs) * k
            return self.issue_cycles + cdiv(macs, chip.npu_num * chip.macs_per_lane[dt])
        elems = sum(t.elems for t in outs) + sum(net.tensor(t).elems for t in op.inputs)
        return self.issue_cycles + cdiv(elems, chip.npu_num * chip.eu_elems(dt))

    def global_scale(self, chip: Chip, net: Network, op: Op, bound: Bound | None = None) -> float:
        return 1.0

    def global_overhead(self, chip: Chip, net: Network, op: Op, bound: Bound) -> int:
        return 0

    def global_one_pass(self, chip: Chip, net: Network, op: Op) -> bool:
        return False

    def global_dma_cycles(self, chip: Chip, transfers: Sequence[Transfer]) -> int | None:
        return None

    def global_line(self, chip: Chip, net: Network, op: Op) -> bool:
        return False

    def global_speedup(self, chip: Chip, net: Network, op: Op) -> float | None:
        return None

    def cores(self, chip: Chip, busy: int) -> tuple[float, int]:
        return core_terms(chip, busy)

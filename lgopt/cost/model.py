"""The cost model's contract: what a slice of an op is (:class:`SliceShape`), the shape of a transfer, and
the :class:`CostModel` protocol every model keeps so that every bound built on it stays a bound."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

from lgopt.hw.chip import Chip
from lgopt.model.network import Network, Op

DmaKind = Literal["load", "store", "weight"]  # activation load, activation store, weight load

Bound = Literal["tiu", "gdma"]  # the engine a global layer's time is bound by



@dataclass(frozen=True)
class SliceShape:
    """The part of an op one slice computes: batches and rows of its output and of input 0, their columns
    when W is sliced and their channels when channels are (``None``: the whole width, every channel)."""

    n: int
    out_h: int
    in_h: int
    out_w: int | None = None
    in_w: int | None = None
    out_c: int | None = None
    in_c: int | None = None



class CostModel(Protocol):
    """The primitives every cycle count in lgopt is built from; a chip names its model (``Chip.cost_model``).

    Everything else (a group's pipeline cells, a plan's totals, every lower bound the CP-SAT optimiser
    proves optimality with) is assembled from these, so a model that keeps this contract keeps the proofs:

    * ``tiu_cycles`` of the slices of an op add up to at least the op's unsliced cycles plus
      ``issue_cycles`` for every slice after the first (slicing never saves compute; each slice issues again);
    * ``gdma_cycles`` is non-decreasing in bytes and in segments (for one kind and run class), at least
      ``chip.gdma_latency_cycles`` for any transfer, and subadditive (one transfer never costs more than two
      that move the same bytes in the same segments);
    * ``global_compute`` is the compute of an op run as a global layer (its transfers are added outside);
    * ``free_views``: whether a global layer that is a view of GMEM (:func:`gmem_view`) costs nothing (no
      compute, no transfer), as on TPU-MLIR's timeline; its ``global_compute`` is then 0 too, so the lower
      bound stays below every plan;
    * ``rebalance_loads``: whether a one-slice group's weight loads move to earlier rows with spare GDMA time
      the way TPU-MLIR's timestep pass moves them (:func:`lgopt.cost.pipeline.rebalance`); a row still costs the
      larger of its TIU and GDMA cycles, so the bounds hold.
    * ``pipelined_preloads``: whether a sliced group's resident weights load in the first slice's pass, each
      in the row before its op's (beside the previous op's compute, as TPU-MLIR's timeline shows), rather
      than all before the loop; each cell still costs the larger of its TIU and GDMA cycles.
    * ``cores``: several cores never make a core's transfers faster nor add negative time (slowdown >= 1,
      sync >= 0), so a several-core plan costs at least a one-core plan's work spread over its cores, the
      lower bound's (:func:`lgopt.cost.bound.lower_bound`) divisor;
    * ``f32_io``: whether the deployment keeps the graph's inputs and outputs f32 (TPU-MLIR's F16 flow): each
      is converted by a global Cast (:func:`io_cast_cost`) unless the group next to it converts it itself
      (``GroupPlan.f32_in`` / ``f32_out``, its load or store charged at f32); the lower bound counts them at
      f32, which they cross GMEM as either way.

    :class:`AnalyticModel` is lgopt's documented analytic model (``docs/cost-model.md``).
    """

    @property
    def name(self) -> str: ...

    @property
    def issue_cycles(self) -> int: ...

    @property
    def free_views(self) -> bool: ...

    @property
    def rebalance_loads(self) -> bool: ...

    @property
    def pipelined_preloads(self) -> bool: ...

    @property
    def f32_io(self) -> bool: ...

    def tiu_cycles(self, chip: Chip, net: Network, op: Op, sl: SliceShape) -> int: ...

    def gdma_cycles(self, chip: Chip, nbytes: int, segments: int = 1, kind: DmaKind = "load",
                    point_runs: bool = False) -> int: ...

    def global_compute(self, chip: Chip, net: Network, op: Op) -> int: ...

    def global_scale(self, chip: Chip, net: Network, op: Op, bound: Bound | None = None) -> float:
        """What a layer-group op type run as a global layer costs relative to ``max(compute, transfers)``
        (the compiler's global kernels tile and overlap in their own way; 1 where the model knows no better).
        ``bound``: which of the two is larger ("tiu" or "gdma"); None: the smallest scale either may have."""
        ...

    def global_overhead(self, chip: Chip, net: Network, op: Op, bound: Bound) -> int:
        """Cycles a layer-group op type run as a global layer adds to ``global_scale * max(compute, transfers)``
        (0 where the model knows no better)."""
        ...

    def global_one_pass(self, chip: Chip, net: Network, op: Op) -> bool:
        """Whether ``op`` run as a global layer loads, computes and stores in turn, its cost then
        ``global_scale`` times the sum of its compute and transfers rather than the larger (the compiler's
        kernel has nothing to overlap in a layer it runs in one pass; False where the model knows no better)."""
        ...

    def global_dma_cycles(self, chip: Chip, transfers: Sequence[Transfer]) -> int | None:
        """A global layer's transfers (:func:`global_transfers`), where the model knows the rate the
        compiler's global kernels move data at (None: each as :meth:`gdma_cycles` costs it in a group)."""
        ...

    def cores(self, chip: Chip, busy: int) -> tuple[float, int]:
        """(GDMA slowdown, sync cycles) when ``busy`` cores run one group or global layer together: each core's
        transfers take ``slowdown`` (at least 1) times as long, the cores sharing the chip's DDR, and they meet
        at a sync of ``sync`` cycles.  ``(1.0, 0)`` for one core, so a one-core plan costs as before."""
        ...

    def global_speedup(self, chip: Chip, net: Network, op: Op) -> float | None:
        """How many times faster ``op`` runs as a global layer on ``chip.used_cores`` cores than on one, where
        the model measured it (between 1 and the cores: the lower bound's divisor holds); None: the cores
        share it evenly, its transfers slowed by :meth:`cores`."""
        ...

    def global_line(self, chip: Chip, net: Network, op: Op) -> bool:
        """Whether ``global_compute`` of ``op`` (a type only run globally) is its global layer's whole cost,
        transfers included (a line fitted per type on the compiler's timeline): its transfers then add no
        bound of their own beyond streaming its bytes at the chip's peak."""
        ...



Transfer = tuple[int, int, bool, DmaKind]

"""One GDMA transfer: (GMEM bytes, contiguous runs, whether each run is one element, kind)."""

"""The plan: what lgopt emits and what the verifier checks (``docs/plan-format.md``).

A plan is plain data.  It records every decision (groups, slice counts,
timestep table, buffer lifetimes and offsets) and enough of the problem
(model digest, chip parameters, rule settings) for :mod:`lgopt.check.verify` to
re-check it without trusting whoever wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Any, Literal, Mapping, TypedDict, get_args

BufferKind = Literal["activation", "weight", "scratch", "convert"]
TransferKind = Literal["activation", "weight"]
BankRule = Literal["off", "soft", "hard"]
"""How an op's operands may share an LMEM bank: ``off`` ignore it, ``soft`` count conflicts (each costs
time on the chip), ``hard`` forbid them."""
PlanStatus = Literal["heuristic", "scored", "optimal", "feasible", "time_limit", "infeasible"]
"""``heuristic`` (greedy), ``scored`` (a given grouping built by lgopt), ``optimal`` (proven, over the space the
solver names), ``feasible`` / ``time_limit`` (a plan and a bound with a gap), ``infeasible`` (no plan)."""
BUFFER_KINDS: tuple[str, ...] = get_args(BufferKind)
BANK_RULES: tuple[str, ...] = get_args(BankRule)


class Stage(IntEnum):
    """Which slice a transfer in a timestep row serves, relative to the slice whose ops run in that row
    (the three stages of the software pipeline: load slice i+1, compute slice i, store slice i-1)."""

    PREFETCH = 0  # the next slice: loads for the first rows, placed in the last row
    SAME = 1
    WRITE_BACK = 2  # the previous slice: stores that wrap past the last row

    @property
    def serves(self) -> int:
        """The served slice minus the iteration the row belongs to: +1, 0 or -1."""
        return 1 - int(self)


class GroupCost(TypedDict, total=False):
    """A group's or a global layer's costs (:mod:`lgopt.cost`), and where it was placed."""

    cycles: int
    tiu_cycles: int
    gdma_cycles: int
    traffic_bytes: int
    lmem_peak: int  # highest byte used per lane
    bank_conflicts: int  # operand pairs sharing a bank (soft rule)


class PlanCost(TypedDict, total=False):
    """A plan's totals and the network's lower bound (:func:`lgopt.group.totals.finish`)."""

    cycles: int
    traffic_bytes: int
    lmem_peak: int
    bank_conflicts: int
    lower_bound_cycles: int
    lower_bound_traffic_bytes: int
    seconds_per_cycle: float


@dataclass(frozen=True)
class Transfer:
    """A GDMA move in a timestep row.

    ``stage`` says which slice it serves relative to the slice whose ops run in
    the row: 0 = the next slice (prefetch), 1 = the same slice, 2 = the previous
    slice (write-back).  ``name`` is a tensor, or the op whose weights move.
    """

    name: str
    kind: str = "activation"  # a TransferKind
    stage: int = Stage.SAME  # a Stage (an int in files)


@dataclass(frozen=True)
class Row:
    ops: tuple[str, ...] = ()
    loads: tuple[Transfer, ...] = ()
    stores: tuple[Transfer, ...] = ()


@dataclass(frozen=True)
class Buffer:
    """An LMEM block, per lane.  Lives over rows ``start..end`` of the table,
    wrapping past the last row when ``start > end``; ``resident`` means every row
    of every slice (weights of a sliced group)."""

    id: int
    kind: str  # a BufferKind: activation | weight | scratch | convert (the verifier checks files)
    name: str  # tensor name, or the op owning the weights / scratch
    size: int
    start: int
    end: int
    resident: bool = False
    offset: int = -1  # -1 until allocated

    def spans(self, num_rows: int) -> list[tuple[int, int]]:
        """The half-open row ranges the buffer is live over in a table of ``num_rows`` rows: the one
        place a wrap-around lifetime is unrolled (``start=5, end=1`` in 7 rows is ``[(5, 7), (0, 2)]``).

        >>> Buffer(0, "activation", "x", 64, 5, 1).spans(7)
        [(5, 7), (0, 2)]
        """
        if self.resident:
            return [(0, num_rows)]
        if self.start <= self.end:
            return [(self.start, self.end + 1)]
        return [(self.start, num_rows), (0, self.end + 1)]

    def rows(self, num_rows: int) -> set[int]:
        """The rows the buffer is live in."""
        return {r for s, e in self.spans(num_rows) for r in range(s, e)}


def core_chunks(num_slices: int, cores: int) -> tuple[tuple[int, int], ...]:
    """The slices (start, stop) each core runs when ``cores`` cores share a group of ``num_slices`` slices, the
    way TPU-MLIR 1.30's codegen shares them (``get_sec_per_cores``): contiguous runs in loop order (N, C, H,
    W), ``num_slices // cores`` each, the first ``num_slices % cores`` cores one more; a core with none stays
    idle (a one-slice group runs on core 0 alone).

    >>> core_chunks(5, 2), core_chunks(1, 8), core_chunks(4, 1)
    (((0, 3), (3, 5)), ((0, 1),), ((0, 4),))
    """
    per, rest = divmod(num_slices, cores)
    out, start = [], 0
    for k in range(cores):
        n = per + (1 if k < rest else 0)
        if n:
            out.append((start, start + n))
            start += n
    return tuple(out)


Window4 = tuple[int, int, int, int]  # n0, n1, h0, h1
Cols = tuple[int, int]  # w0, w1: the columns a W-sliced window holds


def _range(given: Mapping[str, tuple[Cols, ...]], tensor: str, s: int, size: int) -> Cols:
    """Slice ``s``'s range of a sliced axis of ``tensor``, or the whole axis (``size``) when it is not sliced."""
    ranges = given.get(tensor)
    return ranges[s] if ranges is not None else (0, size)


@dataclass(frozen=True)
class GroupPlan:
    ops: tuple[str, ...]
    n_slices: int
    h_slices: int
    rows: tuple[Row, ...]
    preloads: tuple[str, ...]  # ops whose weights are loaded once before the slice loop
    buffers: tuple[Buffer, ...]
    windows: Mapping[str, tuple[Window4, ...]]  # tensor -> per-slice window
    stores: Mapping[str, tuple[Window4, ...]]  # group output -> per-slice stored part
    cost: GroupCost = field(default_factory=lambda: GroupCost())
    # tensors handed over in LMEM between this group and the previous / next step (both groups):
    # whole-tensor resident buffers at the same offset in both, no store-and-reload through GMEM
    kept_in: tuple[str, ...] = ()
    kept_out: tuple[str, ...] = ()
    # W slices (TPU-MLIR's, after N and H): slice s = (ni * h_slices + hi) * w_slices + wi.  The columns of each
    # window and stored part are given only when W is sliced; with w_slices == 1 every window holds every
    # column, so plans that do not slice W (every plan before W slices existed) read and write as before
    w_slices: int = 1
    w_windows: Mapping[str, tuple[Cols, ...]] = field(default_factory=dict)
    w_stores: Mapping[str, tuple[Cols, ...]] = field(default_factory=dict)
    # column (C/OC) slicing of a MatMul with a [K, N] weight (issue 16): op -> the weight columns each slice
    # loads, for the ops whose weight is reloaded per W slice, one run of columns at a time (what lets a
    # weight larger than LMEM run in a group).  Only W-sliced groups give it; ops not named load whole weights
    weight_cols: Mapping[str, tuple[Cols, ...]] = field(default_factory=dict)
    # network inputs the group loads as f32 and converts itself, network outputs it converts to f32 and stores so
    # (TPU-MLIR's F16 deployment keeps the graph's inputs and outputs f32: each Cast runs in the group next to
    # it, or as a global layer)
    f32_in: tuple[str, ...] = ()
    f32_out: tuple[str, ...] = ()
    # channel (heads) slices, TPU-MLIR's csecs (lgopt.group.slicing): s = ((ni * c_slices + ci) * h_slices + hi) *
    # w_slices + wi.  The channels of each window and stored part are given only when channels are sliced
    c_slices: int = 1
    c_windows: Mapping[str, tuple[Cols, ...]] = field(default_factory=dict)
    c_stores: Mapping[str, tuple[Cols, ...]] = field(default_factory=dict)
    # several cores (the chip's ``used_cores`` > 1): the slices [start, stop) each core runs, core 0 first, as
    # TPU-MLIR's codegen assigns them (:func:`core_chunks`).  Empty: one core runs every slice
    core_slices: tuple[tuple[int, int], ...] = ()

    @property
    def num_slices(self) -> int:
        return self.n_slices * self.c_slices * self.h_slices * self.w_slices

    @property
    def chunks(self) -> tuple[tuple[int, int], ...]:
        """The slices each core runs, one (start, stop) per busy core: every slice on core 0 by default."""
        return self.core_slices or ((0, self.num_slices),)

    def chans(self, tensor: str, s: int, channels: int) -> Cols:
        """Channels of ``tensor`` (of ``channels`` channels) that slice ``s`` holds in LMEM."""
        return _range(self.c_windows, tensor, s, channels)

    def stored_chans(self, tensor: str, s: int, channels: int) -> Cols:
        """Channels of group output ``tensor`` that slice ``s`` writes back."""
        return _range(self.c_stores, tensor, s, channels)

    def cols(self, tensor: str, s: int, width: int) -> Cols:
        """Columns of ``tensor`` (of width ``width``) that slice ``s`` holds in LMEM."""
        return _range(self.w_windows, tensor, s, width)

    def stored_cols(self, tensor: str, s: int, width: int) -> Cols:
        """Columns of group output ``tensor`` that slice ``s`` writes back."""
        return _range(self.w_stores, tensor, s, width)

    def weight_columns(self, op: str, s: int) -> Cols | None:
        """Columns of ``op``'s weights slice ``s`` loads, or None when it loads them whole."""
        ws = self.weight_cols.get(op)
        return ws[s] if ws is not None else None

    def with_offsets(self, offsets: Mapping[int, int]) -> GroupPlan:
        return replace(self, buffers=tuple(replace(b, offset=offsets.get(b.id, b.offset)) for b in self.buffers))


@dataclass(frozen=True)
class Plan:
    model: str
    model_digest: str
    chip: Mapping[str, Any]
    strategy: str
    steps: tuple[tuple[str, Any], ...]  # ("group", index) or ("global", op name), in execution order
    groups: tuple[GroupPlan, ...]
    status: PlanStatus = "feasible"
    h_ratio: float | None = 0.5  # None: TPU-MLIR 1.30's slicing rule (lgopt.group.slicing)
    bank_rule: BankRule = "soft"
    cost: PlanCost = field(default_factory=lambda: PlanCost())
    solver: Mapping[str, Any] = field(default_factory=dict)

    @property
    def global_layers(self) -> tuple[str, ...]:
        return tuple(v for k, v in self.steps if k == "global")

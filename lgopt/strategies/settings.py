"""Settings every strategy shares, and the progress callback type.

``SearchSettings`` holds the slicing and allocation rules a plan must obey (the h/2 ratio, the bank
rule) and the greedy baseline's limits; the CP-SAT strategy adds its own in
:class:`lgopt.strategies.cpsat.optimise.CpsatSettings`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Protocol, Sequence

from lgopt.cost.pipeline import moved_reloads, moved_transfers
from lgopt.group.handover import packing_chip
from lgopt.group.slicing import DEFAULT_H_RATIO
from lgopt.hw.chip import Chip
from lgopt.model.network import Network
from lgopt.model.plan import BankRule, GroupPlan, Plan
from lgopt.strategies.cpsat.loadtable import with_early_loads, with_loads, with_stores

Progress = Callable[[str], None]
"""Called with a one-line status message while a strategy runs (the CLI draws it on stderr)."""
Incumbent = Callable[[Plan], None]
"""Called with each complete plan a long-running strategy finds that is better than the last it reported
(the CLI verifies it and writes it at once, so an interrupted run keeps it)."""


class CompilerRules(Protocol):
    """What a target compiler refuses that lgopt's own rules allow: a search that plans for that compiler asks
    before it packs a group the compiler has not been seen to compile (:func:`packing`).  TPU-MLIR's are in
    :class:`lgopt.tpumlir.rules.TpuMlirRules`; a new compiler's are one class."""

    def refuses(self, chip: Chip, net: Network, g: GroupPlan) -> str:
        """Why the compiler may fail to build ``g`` (``""``: no rule says so)."""
        ...


@dataclass(frozen=True)
class SearchSettings:
    """The rules every strategy's plan obeys (``docs/extending.md`` lists them with their defaults)."""

    h_ratio: float | None = DEFAULT_H_RATIO  # None: TPU-MLIR's slicing rule (lgopt.group.slicing)
    bank_rule: BankRule = "soft"
    max_h_slices: int = 64
    max_group_ops: int = 256  # longest run a group may have (bounds evaluation cost)
    max_w_slices: int = 256  # most column (W) slices of a group with a column-sliced MatMul (lgopt.group.build)
    max_c_slices: int = 64  # most channel (heads) slices of a group of channel-local ops; 1: none
    # runs of ops a group must stay within (a compiler's base groups, in its op order); None: any run of local ops
    runs: tuple[tuple[str, ...], ...] | None = None
    # a group not in ``trusted`` packs as the compiler would need it to (lgopt.tpumlir.space): lgopt's
    # packing of a group is not TPU-MLIR's, so a new group planned to the last byte may not compile
    reserve_banks: int = 0  # banks at the top of LMEM such a group leaves empty
    # such a group packs as the compiler's allocator would need (None: lgopt's own packing): none the compiler's
    # rules refuse, one-slice groups with their weight loads where its timestep pass moves them, and by lgopt's
    # greedy allocators, not only its exact packer (TPU-MLIR's is greedy)
    compiler: CompilerRules | None = None
    # False: with ``compiler`` set, only its refusal rules hold and the group packs as lgopt's exact packer places it
    # on its own lifetimes (a bound over the compiler's space: lgopt.tpumlir.space.free_of_cautions)
    compiler_allocator: bool = True
    trusted: frozenset[GroupShape] = frozenset()  # groups known to compile as planned (the reference's own)
    # tensors the compiler also holds as f32 in a group (the operands of the casts its F16 lowering puts around
    # the ops it computes in f32: yolov5s's SiLU on BM1688): such a group packs with their f32 copies beside them
    f32_tensors: frozenset[str] = frozenset()
    # an H-sliced group not in ``trusted`` moves no activation slice of fewer rows than this (0: any): below it
    # the cost model's transfer rates are not the compiler's (``short_slices``)
    min_slice_rows: int = 0

    @property
    def compiler_packing(self) -> bool:
        """Whether a group outside ``trusted`` packs as the compiler's allocator would need (``compiler`` set,
        ``compiler_allocator`` on)."""
        return self.compiler is not None and self.compiler_allocator

    @property
    def reload_columns(self) -> bool:
        """Whether a W-sliced group's MatMuls may load only their slice's weight columns, per slice: not in a
        compiler's space (TPU-MLIR holds a group's weights whole; lgopt's exporter refuses such a group)."""
        return self.compiler is None


GroupShape = tuple[frozenset[str], int, int, int, int]
"""A group's ops and its (n, c, h, w) slice counts: what :attr:`SearchSettings.trusted` lists."""


def group_shape(ops: Sequence[str], n: int, c: int, h: int, w: int) -> GroupShape:
    return frozenset(ops), n, c, h, w


def shape_of(g: GroupPlan) -> GroupShape:
    """``g``'s ops and slice counts, as :attr:`SearchSettings.trusted` lists them."""
    return group_shape(g.ops, g.n_slices, g.c_slices, g.h_slices, g.w_slices)


def trusted(st: SearchSettings, g: GroupPlan) -> bool:
    """Whether ``g`` (its ops and slice counts) is one of the groups ``st`` knows to compile as planned."""
    return shape_of(g) in st.trusted


def exact_packing_allowed(st: SearchSettings, g: GroupPlan) -> bool:
    """Whether a packing only lgopt's exact packer finds counts for ``g``: not for a group the compiler is not
    known to compile when ``st.compiler_packing`` asks for what its one-pass greedy allocator could place."""
    return not st.compiler_packing or trusted(st, g)


def packing(chip: Chip, net: Network, st: SearchSettings, g: GroupPlan) -> tuple[Chip | None, GroupPlan]:
    """(LMEM, table) a candidate group's buffers must pack into: ``chip`` and ``g`` for a trusted group; for
    another, None where ``st.compiler_packing`` and TPU-MLIR's time-step pass may fail to slice it
    (``st.compiler.refuses``), else all but ``st.reserve_banks`` banks
    at the top of LMEM (None: nothing is left) and, with ``st.compiler_packing``, the table with a one-slice
    group's weight loads and stores moved where TPU-MLIR's memory-aware pass moves them
    (:func:`lgopt.cost.pipeline.moved_transfers`; loads earlier, stores later, so longer lived).  Offsets that
    pack the returned table pack ``g`` too: its lifetimes are the same or shorter.  Only the packing changes; the
    group's table and costs stay those of ``g`` on the whole chip.

    >>> from dataclasses import replace
    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.io.problem import load_problem
    >>> from lgopt.group.build import schedule
    >>> net, chip = load_problem("problems/resnet18.json"), get_chip("bm1684x")
    >>> g = schedule(net, chip, [op.name for op in net.ops[:3]], 1, 2)
    >>> st = SearchSettings(reserve_banks=2)
    >>> packing(chip, net, st, g)[0].lmem_bytes, chip.lmem_bytes
    (229376, 262144)
    >>> trusted = replace(st, trusted=frozenset({group_shape(g.ops, 1, 1, 2, 1)}))
    >>> packing(chip, net, trusted, g)[0] is chip
    True
    """
    if trusted(st, g):
        return chip, g
    if st.compiler is not None and st.compiler.refuses(chip, net, g):
        return None, g  # the compiler may fail to build it (TPU-MLIR's: lgopt.tpumlir.rules)
    if short_slices(net, g, st.min_slice_rows):
        return None, g  # its transfers would run at rates the cost model does not know
    room: Chip | None = chip
    if st.reserve_banks > 0:
        room = packing_chip(chip, chip.lmem_bytes - st.reserve_banks * chip.bank_bytes)
    if st.compiler_packing:
        g = with_f32_copies(compiler_lifetimes(chip, net, g), st.f32_tensors)
    return room, g


def compiler_lifetimes(chip: Chip, net: Network, g: GroupPlan) -> GroupPlan:
    """``g``'s table with a one-slice group's loads (weights and its own activations) and stores where TPU-MLIR's
    memory-aware pass moves them (:func:`lgopt.cost.pipeline.moved_transfers`: loads earlier, stores later), and a
    sliced group's weight loads where it reloads them with every slice (:func:`lgopt.cost.pipeline.moved_reloads`),
    the lifetimes its allocator packs; ``g`` itself for a sliced group that holds its weights or a cost model that
    does not move them."""
    reloads = moved_reloads(chip, net, g)
    if reloads:
        return with_early_loads(g, reloads, kind="weight")
    moved = moved_transfers(chip, net, g)
    weights = {tr.name for row in g.rows for tr in row.loads if tr.kind == "weight"}
    loads = {name: (row, 1) for (name, store), row in moved.items() if not store and name in weights}
    early = {name: row for (name, store), row in moved.items() if not store and name not in weights}
    stores = {name: row for (name, store), row in moved.items() if store}
    if loads:
        g = with_loads(g, loads)
    if early:
        g = with_early_loads(g, early)
    if stores:
        g = with_stores(g, stores)
    return g


def with_f32_copies(g: GroupPlan, tensors: frozenset[str]) -> GroupPlan:
    """``g`` with each activation buffer of ``tensors`` three times its size: the f16 slice and an f32 copy
    beside it for the buffer's whole lifetime (TPU-MLIR's casts are rows of their own, so its copies live
    shorter: this is the caution's side).  Offsets that pack it pack ``g``: same buffers and lifetimes, each
    at least as large.  yolov5s_like / BM1688's plan at a 1 % margin had groups at one H slice that fit by
    lgopt's packing, not with these copies, and that TPU-MLIR compiled at two (docs/tpu-mlir.md)."""
    if not tensors or not any(b.kind == "activation" and b.name in tensors for b in g.buffers):
        return g
    return replace(g, buffers=tuple(replace(b, size=3 * b.size) if b.kind == "activation" and b.name in tensors
                                    else b for b in g.buffers))


def short_slices(net: Network, g: GroupPlan, min_rows: int) -> bool:
    """Whether H-sliced ``g`` loads or stores an activation in slices of fewer than ``min_rows`` rows (its
    largest slice; a tensor that is not cut does not count).

    On TPU-MLIR's timeline such transfers stream at a fraction of the rate of taller ones, in steps (a quarter,
    a half, three quarters) that follow the slice's shape: on BM1688, slices of 2-8 rows move at a median 0.47-0.74
    of the fitted rate, from 9 rows on at 0.9-1.0 (``lgopt fit``, :func:`lgopt.cost.fit.fit_slice_rows`).  The cost
    model prices every slice at the full rate, so a search left free there finds groups that only look fast:
    yolov5s_like / BM1688's plan at a 1 % margin cut two groups into slices of 2 and 3 rows, predicted 253,000
    and 130,000 cycles, measured 521,000 and 242,000 (the plan 1.4 % slower than TPU-MLIR's own).

    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.io.problem import load_problem
    >>> from lgopt.group.build import schedule
    >>> net, chip = load_problem("problems/resnet18.json"), get_chip("bm1684x")
    >>> g = schedule(net, chip, [op.name for op in net.ops[:3]], 1, 8)
    >>> max(h1 - h0 for _, _, h0, h1 in g.windows[net.ops[2].outputs[0]]), short_slices(net, g, 16)
    (7, True)
    >>> short_slices(net, g, 4), short_slices(net, g, 0)
    (False, False)
    """
    if min_rows <= 0 or g.h_slices <= 1:
        return False
    for row in g.rows:
        for tr, parts in [(t, g.windows) for t in row.loads] + [(t, g.stores) for t in row.stores]:
            if tr.kind != "activation" or tr.name not in parts:
                continue
            rows = max(h1 - h0 for _, _, h0, h1 in parts[tr.name])
            if rows < min(min_rows, net.tensor(tr.name).h):
                return True
    return False



def group_runs(net: Network, st: SearchSettings) -> list[tuple[int, int]]:
    """Maximal ``[first, last]`` index ranges of consecutive local ops a group may span: the network's runs of
    local ops, cut where ``st.runs`` says (an op in none of them runs as a global layer).

    >>> from lgopt.model.network import Network
    >>> group_runs(Network("empty", {}, (), (), ()), SearchSettings())
    []
    """
    allowed: dict[str, int] | None = None
    if st.runs is not None:
        allowed = {o: k for k, run in enumerate(st.runs) for o in run}
    out: list[tuple[int, int]] = []
    start, key = -1, None
    for k, op in enumerate(net.ops):
        mine = (allowed.get(op.name) if allowed is not None else 0) if op.local else None
        if mine is not None and start >= 0 and mine == key:
            continue
        if start >= 0:
            out.append((start, k - 1))
        start, key = (k, mine) if mine is not None else (-1, None)
    if start >= 0:
        out.append((start, len(net.ops) - 1))
    return out

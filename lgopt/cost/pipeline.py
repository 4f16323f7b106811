"""A group's cost: its timestep table run once per slice through the software pipeline, as
(iteration, row) cells of TIU and GDMA cycles (:class:`PipelineCells`), the weight loads a compiler
moves to rows with spare GDMA time, and the total (:func:`group_cost`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from lgopt.cost.cycles import gdma_cycles, io_cast_cycles, tiu_cycles, weight_dma_cycles
from lgopt.cost.model import SliceShape
from lgopt.cost.registry import cost_model
from lgopt.cost.work import activation_transfer, as_f32, weight_gmem_bytes
from lgopt.hw.chip import Chip
from lgopt.model.network import Network
from lgopt.model.plan import GroupCost, GroupPlan, Stage, Transfer

# --- groups ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PipelineCells:
    """A group's run as (iteration, row) cells with their TIU and GDMA cycles.

    Iteration -1 is the pipeline fill, ``num_slices`` the drain.  A cell costs
    ``max(tiu, gdma)``; ``preload`` (resident weights, before the loop) costs
    its GDMA alone.  Kept separate from the total so that an optimiser can add
    transfers to cells and cost the result exactly as :func:`group_cost` does.
    """

    cells: dict[tuple[int, int], tuple[int, int]]
    preload: int
    traffic: int

    def cycles(self) -> int:
        return self.preload + sum(max(t, d) for t, d in self.cells.values())



STAGE_SERVES = {int(s): s.serves for s in Stage}  # a stage-k transfer in iteration i serves slice i + STAGE_SERVES[k]



def pipeline_cells(chip: Chip, net: Network, g: GroupPlan, span: tuple[int, int] | None = None) -> PipelineCells:
    """The cells of the pipeline that runs slices ``span`` (start, stop; default all of them: one core's run)."""
    a, b = span or (0, g.num_slices)
    pc = _table_cells(chip, net, g, (a, b))
    if not cost_model(chip).rebalance_loads:
        return pc
    movable = _movable_transfers(net, g)
    held = _held_moves(chip, net, g)
    if not movable and not held:
        return pc
    # the moves are the table's, so every slice's pass makes them: found on the first pass's rows (a one-slice
    # group's only one), applied to each.  ResNet-18 / BM1688 at batch 4 reloads its weights in each of 4 N
    # slices; TPU-MLIR's timeline loads a 3x3 conv's 1.2 MB beside the conv before, not beside a 1x1 one.  The
    # held weights load in the first pass only, so they move in it alone
    cells = dict(pc.cells)
    rows = len(g.rows)
    x = _Transfers(chip, net, g)
    dest = timestep_moves([cells.get((a, r), (0, 0)) for r in range(rows)], _moves(x, movable, a) + held)
    for i in range(a, b):
        now = _moves(x, movable, i) + (held if i == a else [])
        passed = rebalance([cells.get((i, r), (0, 0)) for r in range(rows)], now, dest[:len(now)])
        for r, cell in enumerate(passed):
            if any(cell):
                cells[(i, r)] = cell
            else:
                cells.pop((i, r), None)
    return replace(pc, cells=cells)


def _table_cells(chip: Chip, net: Network, g: GroupPlan, span: tuple[int, int]) -> PipelineCells:
    """The cells of the pipeline over slices ``span`` with every transfer in the row the table gives it (before
    TPU-MLIR's load moves): iterations ``start - 1`` (fill) to ``stop`` (drain)."""
    a, b = span
    x = _Transfers(chip, net, g)
    tiu = _tiu_table(chip, net, g, x, span)
    traffic, pre, held = _resident_weights(chip, net, g, a)
    cells: dict[tuple[int, int], tuple[int, int]] = {}
    shared = _shared_f32_rows(g, x.f32_in)
    for i in range(a - 1, b + 1):
        dma_at = [0] * len(g.rows)  # GDMA cycles charged to each row of iteration i
        for r, row in enumerate(g.rows):
            for tr, store in [(t, False) for t in row.loads] + [(t, True) for t in row.stores]:
                s = i + STAGE_SERVES[tr.stage]
                if a <= s < b:
                    nbytes, c = x.transfer(tr.name, tr.kind, store, s)
                    traffic += nbytes
                    dma_at[r if store else shared.get((r, tr.name), r)] += c
        for r in range(len(g.rows)):
            dma_at[r] += held.get((i, r), 0)
            t_cyc = tiu[i - a][r] if a <= i < b else 0
            if t_cyc or dma_at[r]:
                cells[(i, r)] = (t_cyc, dma_at[r])
    return PipelineCells(cells, pre, traffic)


class _Transfers:
    """The windows a group's slices compute and move, and the bytes and cycles of each transfer: cached, as
    slices mostly repeat one shape."""

    def __init__(self, chip: Chip, net: Network, g: GroupPlan) -> None:
        self.chip, self.net, self.g = chip, net, g
        f32_io = cost_model(chip).f32_io
        self.f32_in = frozenset(g.f32_in) if f32_io else frozenset()
        self.f32_out = frozenset(g.f32_out) if f32_io else frozenset()
        self.wsl = g.w_slices > 1
        self.csl = g.c_slices > 1
        # (tensor, n, h, w, c, store) -> (bytes, cycles)
        self.dma: dict[tuple[str, int, int, int | None, int | None, bool], tuple[int, int]] = {}

    def win(self, t: str, s: int, store: bool = False) -> tuple[int, int, int | None, int | None]:
        """(batches, rows, columns, channels) of slice ``s`` of ``t``, or of the part it stores; columns
        (channels) None when W (C) is not sliced (all of them)."""
        g = self.g
        ten = self.net.tensor(t)
        n0, n1, h0, h1 = (g.stores if store else g.windows)[t][s]
        w0, w1 = (g.stored_cols if store else g.cols)(t, s, ten.w)
        c0, c1 = (g.stored_chans if store else g.chans)(t, s, ten.c)
        return n1 - n0, h1 - h0, (w1 - w0 if self.wsl else None), (c1 - c0 if self.csl else None)

    def transfer(self, name: str, kind: str, store: bool, s: int) -> tuple[int, int]:
        """(bytes, cycles) of one transfer."""
        chip, net, g = self.chip, self.net, self.g
        if kind == "weight":
            op = net.op(name)
            cols = g.weight_columns(name, s)  # a column-sliced MatMul loads its slice's columns
            n_cols = None if cols is None else cols[1] - cols[0]
            return weight_gmem_bytes(op, n_cols), weight_dma_cycles(chip, op, n_cols)
        n, h, w, ch = self.win(name, s, store and name in g.stores)
        key = (name, n, h, w, ch, store)
        hit = self.dma.get(key)
        if hit is None:
            f32 = name in (self.f32_out if store else self.f32_in)  # a network input or output the group converts
            b, segs, point = activation_transfer(net, name, n, h, w, ch, chip.align_4n and not f32)
            if f32:
                b = as_f32(b, net.tensor(name).dtype)
            hit = self.dma[key] = (b, gdma_cycles(chip, b, segs, "store" if store else "load", point))
        return hit


def _tiu_table(chip: Chip, net: Network, g: GroupPlan, x: _Transfers, span: tuple[int, int]) -> list[list[int]]:
    """TIU cycles of each row of the table in each slice of ``span`` (its first slice first)."""
    tiu = [[0] * len(g.rows) for _ in range(span[1] - span[0])]
    seen: dict[tuple, int] = {}  # slices mostly repeat one shape
    casts = _io_casts(net, g, x)
    for s in range(*span):
        for r, row in enumerate(g.rows):
            for name in row.ops:
                op = net.op(name)
                n, oh, ow, oc = x.win(op.outputs[0], s)
                _, ih, iw, ic = x.win(op.inputs[0], s) if op.inputs else (n, oh, ow, oc)
                key = (name, n, oh, ih, ow, iw, oc, ic)
                c = seen.get(key)
                if c is None:
                    c = seen[key] = tiu_cycles(chip, net, op, SliceShape(n, oh, ih, ow, iw, oc, ic))
                tiu[s - span[0]][r] += c
        for t, r, into in casts:
            n, h, w, _ = x.win(t, s)
            tiu[s - span[0]][r] += io_cast_cycles(chip, net, t, n, h, w if w is not None else net.tensor(t).w, into)
    return tiu


def _io_casts(net: Network, g: GroupPlan, x: _Transfers) -> list[tuple[str, int, bool]]:
    """(tensor, row, is an input) of each network input or output the group converts itself: an input's Cast
    in the row of the first op that reads it, an output's in its producer's (TPU-MLIR's own rows for them, the
    table's first and last, are not lgopt's)."""
    out = []
    for t, into in [(t, True) for t in sorted(x.f32_in)] + [(t, False) for t in sorted(x.f32_out)]:
        r = next((r for r, row in enumerate(g.rows)
                  if any(t in (net.op(o).inputs if into else net.op(o).outputs) for o in row.ops)), None)
        if r is not None:
            out.append((t, r, into))
    return out


def _resident_weights(chip: Chip, net: Network, g: GroupPlan, first: int = 0
                      ) -> tuple[int, int, dict[tuple[int, int], int]]:
    """The resident weights' bytes, the GDMA cycles of those loaded before the loop, and those (TPU-MLIR)
    loaded in the table: each in the first slice's (``first``: a core's first) row before its op's, op0's with
    the fill's loads.

    ResNet-18 / BM1688 at batch 4, 4 N slices of [3-24]: 2.2 M cycles of GDMA hidden under 5.3 M of TIU on the
    timeline (5,635,175 measured); charged before the loop, 6,176,644 predicted."""
    traffic = pre = 0
    held: dict[tuple[int, int], int] = {}
    in_table = _held_rows(chip, g)
    for name in g.preloads:
        traffic += weight_gmem_bytes(net.op(name))
        c = weight_dma_cycles(chip, net.op(name))
        if name in in_table:
            r = in_table[name]
            at = (first, r) if r >= 0 else (first - 1, len(g.rows) - 1)
            held[at] = held.get(at, 0) + c
        else:
            pre += c
    return traffic, pre, held


def _held_rows(chip: Chip, g: GroupPlan) -> dict[str, int]:
    """The table row each resident weight loads in during the first slice's pass, where the model loads them
    there (``pipelined_preloads``): the row before its op's (-1: op0's, with the fill's loads)."""
    if not cost_model(chip).pipelined_preloads:
        return {}
    row_of = {name: r for r, row in enumerate(g.rows) for name in row.ops}
    return {name: row_of[name] - 1 for name in g.preloads if name in row_of}


def _held_moves(chip: Chip, net: Network, g: GroupPlan) -> list[Move]:
    """(row, cycles, earlier rows) of each resident weight loaded in the first pass's table (not the fill's):
    TPU-MLIR's memory-aware pass moves them as it moves the table's loads (reference s4.3).  UNet's decoder
    group on BM1690 (F16, 3 slices on 8 cores: one a core) loads a 2.4 MB conv weight beside the transposed conv
    two rows before it, not beside the Concat just before it (330,904 cycles measured on core 0; 369,950 charged
    with it in its own row)."""
    return [(r, weight_dma_cycles(chip, net.op(name)), tuple(range(r)))
            for name, r in _held_rows(chip, g).items() if r > 0]


def _shared_f32_rows(g: GroupPlan, f32_in: frozenset[str]) -> dict[tuple[int, str], int]:
    """f32 network-input loads charged to the last op's row rather than their own: (row, tensor) -> row.

    TPU-MLIR converts an f32 network input in a Cast of its own, the first op of the group's table: the group's
    ops read the converted copy, so the next slice's f32 load shares the last op's row.  lgopt's table gives it
    a row after the last op when that op reads the input too (a one-op group): its cycles are charged there
    (mobilenet_v3_small / BM1688's stem conv: 110,504 predicted, 90,916 measured, before this)."""
    op_rows = [r for r, row in enumerate(g.rows) if row.ops]
    return {(r, tr.name): op_rows[-1] for r, row in enumerate(g.rows) if not row.ops and op_rows
            for tr in row.loads if tr.name in f32_in and tr.stage == 0}



Move = tuple[int, int, tuple[int, ...]]  # a transfer's row, its cycles and the rows it may move to
Movable = tuple[Transfer, bool, int, tuple[int, ...]]  # a transfer, whether a store, its row, the rows it may move to


def _movable_transfers(net: Network, g: GroupPlan) -> list[Movable]:
    """Each transfer TPU-MLIR's memory-aware pass may move (reference s4.3): a weight load in the table (not a
    column run) to any earlier row, its weight having no earlier use; a load of the slice's own activation (stage
    1) to any earlier row whose ops do not touch it; in a one-slice group, also a store of the slice's own to any
    later row whose ops do not touch the tensor (in a sliced group the next slice's rows are the pipeline's, not
    modelled as moved).

    The activation loads matter where a core runs one slice of a group (two slices on BM1688's two cores):
    ResNet-50's [layer1.0] group, F16, core 0 loads the 802,816-byte shortcut input beside the 57,232-cycle conv
    before the one that reads it (168,135 cycles measured; 191,369 charged with the load in its own row,
    167,522 with it moved)."""
    out: list[Movable] = []
    for r, row in enumerate(g.rows):
        for tr in row.loads:
            if tr.stage != Stage.SAME:
                continue
            if tr.kind == "weight" and g.weight_columns(tr.name, 0) is None:
                out.append((tr, False, r, tuple(range(r))))
            elif tr.kind == "activation":
                out.append((tr, False, r, tuple(j for j in range(r) if not _touches(net, g.rows[j].ops, tr.name))))
    if g.num_slices != 1:
        return out
    for r, row in enumerate(g.rows):
        for tr in row.stores:
            if STAGE_SERVES[tr.stage] == 0:
                later = tuple(j for j in range(r + 1, len(g.rows)) if not _touches(net, g.rows[j].ops, tr.name))
                out.append((tr, True, r, later))
    return out


def _moves(x: _Transfers, movable: list[Movable], s: int) -> list[Move]:
    """``movable`` as :func:`timestep_moves` takes them, each at its cycles in slice ``s``'s pass (an
    activation's slices differ by a row)."""
    return [(r, x.transfer(tr.name, tr.kind, store, s)[1], ok) for tr, store, r, ok in movable]


def _touches(net: Network, ops: tuple[str, ...], tensor: str) -> bool:
    return any(tensor in net.op(o).inputs or tensor in net.op(o).outputs for o in ops)


def moved_transfers(chip: Chip, net: Network, g: GroupPlan) -> dict[tuple[str, bool], int]:
    """The row each movable transfer of one-slice group ``g`` (keyed by tensor and whether it is a store) sits in
    once TPU-MLIR's memory-aware pass has moved it (reference s4.3, :func:`timestep_moves`): the rows whose
    lifetimes its allocator packs (a load moved earlier, a store later: both live longer).  Empty for a sliced
    group (its weights are held, or their loads move as :func:`moved_reloads` says) or a cost model that does not
    move transfers."""
    if g.num_slices != 1 or not cost_model(chip).rebalance_loads:
        return {}
    movable = _movable_transfers(net, g)
    return {(tr.name, store): row for (tr, store, _, _), row in zip(movable, _first_pass_moves(chip, net, g, movable))}


def _first_pass_moves(chip: Chip, net: Network, g: GroupPlan, movable: list[Movable]) -> list[int]:
    """The row each of ``movable`` ends in when TPU-MLIR's pass moves them over the first slice's table."""
    if not movable:
        return []
    cells = _table_cells(chip, net, g, (0, 1)).cells
    return timestep_moves([cells.get((0, r), (0, 0)) for r in range(len(g.rows))],
                          _moves(_Transfers(chip, net, g), movable, 0))


def moved_reloads(chip: Chip, net: Network, g: GroupPlan) -> dict[str, int]:
    """The row each weight load of sliced group ``g`` moves to, where ``g`` reloads its weights with every slice
    (they reach LMEM's size: :func:`lgopt.group.timestep.holds_weights`), as TPU-MLIR's memory-aware pass moves
    them in the first slice's pass (reference s4.3, :func:`timestep_moves`); only the loads that move.  Empty for a
    one-slice group (:func:`moved_transfers`), one that holds its weights (none loads in the table), or a cost
    model that does not move transfers.

    TPU-MLIR runs the pass on every group of more than one op and checks no LMEM there: ResNet-50's 41-op
    layer-3 group on BM1688 INT8 at two H slices (2.6 LMEMs of weights, none held) has 170,688 bytes live in one
    of its timesteps after the moves (its layer-group debugger's buffer dump) against 131,072 of LMEM, and is
    refused, where lgopt's table without the moves packs in 110,592."""
    if g.num_slices == 1 or not cost_model(chip).rebalance_loads:
        return {}
    movable = [m for m in _movable_transfers(net, g) if m[0].kind == "weight" and not m[1]]
    return {tr.name: row for (tr, _, r, _), row in zip(movable, _first_pass_moves(chip, net, g, movable)) if row != r}


def rebalance(rows: list[tuple[int, int]], moves: list[Move], dest: list[int] | None = None) -> list[tuple[int, int]]:
    """Rows' (TIU, GDMA) cycles after moving transfers, as TPU-MLIR's ``memory_aware_timestep_assignment`` moves
    them (reference s4.3): to ``dest``, by default the rows :func:`timestep_moves` finds for these ``rows``.

    On TPU-MLIR's timeline a weight-bound one-slice group runs near its GDMA time (ResNet-18's 29-op group on
    BM1684X: 539,578 cycles, 513,697 of GDMA); without the load moves lgopt charged it 652,496, with them 576,796.
    UNet's one-slice encoder group on BM1690 (INT8) stores its skip tensors beside a later conv, not beside the
    pool that follows their producer: 112,970 cycles measured, 136,704 charged without the store moves.

    >>> rebalance([(10, 0), (0, 10)], [(1, 10, (0,))])
    [(10, 10), (0, 0)]
    """
    t = [a for a, _ in rows]
    d = [b for _, b in rows]
    for (r, c, _), j in zip(moves, timestep_moves(rows, moves) if dest is None else dest):
        d[r] -= c
        d[j] += c
    return list(zip(t, d))


def timestep_moves(rows: list[tuple[int, int]], moves: list[Move]) -> list[int]:
    """The row each transfer ends in: while some row's GDMA exceeds its TIU, the (transfer, allowed row) pair
    with the largest gain ``min(0, slack_src + c) - slack_src + min(0, slack_dst - c)`` moves (``slack`` = TIU -
    GDMA of a row, ``c`` the transfer's cycles; ties: the smaller ``c * distance``).  LMEM is not checked
    (TPU-MLIR does not check it there either).  ``rows``: (TIU, GDMA) cycles, the transfers counted in;
    ``moves``: (row, cycles, rows it may move to) of each movable transfer.

    >>> timestep_moves([(10, 0), (0, 10)], [(1, 10, (0,))])
    [0]
    >>> timestep_moves([(0, 10), (4, 0), (9, 0)], [(0, 10, (1, 2))])  # a store, later, to the row with room
    [2]
    """
    t = [a for a, _ in rows]
    d = [b for _, b in rows]
    at = [[r, c] for r, c, _ in moves]
    allowed = [set(ok) | {r} for r, _, ok in moves]
    for _ in range(4 * len(at) + 1):  # a transfer rarely moves twice; the gains strictly decrease the total
        best: tuple[int, int, int, int] | None = None  # (gain, -(c * distance), transfer, destination)
        for k, (r, c) in enumerate(at):
            src = t[r] - d[r]
            if src >= 0 or c <= 0:
                continue
            for j in sorted(allowed[k] - {r}):
                gain = min(0, src + c) - src + min(0, t[j] - d[j] - c)
                key = (gain, -c * abs(r - j), k, j)
                if gain > 0 and (best is None or key[:2] > best[:2]):
                    best = key
        if best is None:
            break
        _, _, k, j = best
        r, c = at[k]
        d[r] -= c
        d[j] += c
        at[k][0] = j
    return [r for r, _ in at]


def group_cost(chip: Chip, net: Network, g: GroupPlan) -> GroupCost:
    """Cycles and GMEM traffic of a scheduled group, slice by slice through the pipeline: on several cores,
    one pipeline per core over its slices (``GroupPlan.chunks``), the slowest core's time and a sync, each
    core's GDMA slowed by the DDR the busy cores share and each loading the weights it holds
    (:meth:`lgopt.cost.model.CostModel.cores`)."""
    chunks = g.chunks
    share, sync = cost_model(chip).cores(chip, len(chunks))  # (1.0, 0) for one busy core: its cells as they are
    slowest = tiu = dma = traffic = 0
    for span in chunks:
        pc = pipeline_cells(chip, net, g, span)
        shared = [(t, math.ceil(d * share)) for t, d in pc.cells.values()]
        pre = math.ceil(pc.preload * share)
        slowest = max(slowest, pre + sum(max(t, d) for t, d in shared))
        tiu += sum(t for t, _ in shared)
        dma += pre + sum(d for _, d in shared)
        traffic += pc.traffic
    return {"cycles": slowest + sync, "tiu_cycles": tiu, "gdma_cycles": dma, "traffic_bytes": traffic}

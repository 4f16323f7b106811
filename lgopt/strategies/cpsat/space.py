"""The candidate space of the CP-SAT optimiser: which groups may be formed, and how each may be sliced.

A candidate group is a contiguous run of local ops of the network's order (``[i, j]`` by op index) in
a hand-over variant (:mod:`lgopt.strategies.cpsat.common`), with a slicing ``(n, h)``, or for a group of row
ops (a transformer's MatMuls and what lies between them), ``w`` column slices.  This module
enumerates them and rules out, cheaply and exactly, what cannot fit in LMEM; it solves nothing
(evaluation is :mod:`lgopt.strategies.cpsat.evaluate`, bounds :mod:`lgopt.strategies.cpsat.bounds`).

Search space covered (what a proven bound is a bound over): contiguous runs of the given topological
order up to ``max_group_ops`` ops; ``n`` from 1 to the batch in N units; ``h`` from 1 up to the first
count that breaks a slicing rule (h/2, empty or non-advancing slices), at most ``max_h_slices``; for groups
of row ops, the W (column) slice counts of :func:`lgopt.group.build.w_slice_options` with one N and H slice; for
groups of channel-local ops, the channel (heads) counts of :func:`lgopt.group.build.c_slice_options` (at most
``max_c_slices``) with the fewest H slices that fit; the
pipelined timestep table of :mod:`lgopt.group.timestep` with, in unsliced groups, any legal load row per
weight (:mod:`lgopt.strategies.cpsat.loadtable`); any packing of the buffers; and, per interval, the
variants of :mod:`lgopt.group.handover`: on its own, receiving a tensor in LMEM from the previous
group, or handing one over to the next.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from lgopt.cost.cycles import global_layer_cost, tiu_cycles, weight_dma_cycles
from lgopt.cost.model import SliceShape
from lgopt.cost.pipeline import group_cost
from lgopt.cost.registry import cost_model
from lgopt.cost.work import weight_gmem_bytes
from lgopt.group.alloc import pack_items
from lgopt.group.build import c_slice_options, n_unit, schedule, w_slice_options
from lgopt.group.handover import handover, packing_chip, pin_kept, pin_offset, store_skipped, whole_bytes, without_kept
from lgopt.group.pack import peak_live_bytes
from lgopt.group.slicing import SliceError, group_io
from lgopt.hw.chip import Chip
from lgopt.hw.layout import cdiv
from lgopt.hw.sizing import column_weights, group_weight_bytes, min_footprint, weight_bytes
from lgopt.model.network import Network
from lgopt.model.plan import GroupPlan
from lgopt.strategies.cpsat.common import Key, Objective, objective_value
from lgopt.strategies.cpsat.loadrows import table_bound
from lgopt.strategies.cpsat.loadtable import chosen_weights, with_loads
from lgopt.strategies.settings import SearchSettings, group_runs, trusted


@dataclass(frozen=True)
class Slicing:
    """One slicing of an interval: its table, and the key it is tried in (its value, or a bound on it)."""

    n: int
    h: int
    table: GroupPlan
    key: int
    free_loads: bool  # unsliced with weights: load rows are still to be chosen (key is a bound)
    w: int = 1  # W (column) slices
    c: int = 1  # channel (heads) slices



@dataclass
class CandidateSpace:
    """The candidates of one network on one chip, with the per-op figures bounds read.

    Pure: building it schedules nothing, and no method solves a model.  ``intervals`` lists the
    candidates, ``fits`` is the O(1) necessary LMEM condition of a run, ``slicings`` the legal
    slicings of one candidate with their tables, ``signature`` what two structurally identical
    candidates (repeated ResNet blocks) share.
    """

    net: Network
    chip: Chip
    settings: SearchSettings = field(default_factory=SearchSettings)
    objective: Objective = "cycles"
    handover: bool = True  # candidates that keep a tensor in LMEM for the next group (lgopt.group.handover)
    free_loads: bool = True  # unsliced groups choose each weight's load row (else the table's own rule)

    def __post_init__(self) -> None:
        net = self.net
        # a cost model that moves weight loads where the compiler's timestep pass moves them (``rebalance_loads``)
        # prices the compiler's rows, not the table's: the rows are not lgopt's to choose there, and the load-row
        # bounds, which assume each weight loads where it is put, do not hold (MobileNetV2 / BM1688 F16: the LP
        # bound above the best choice on 6 of 245 sampled intervals)
        self.free_loads = self.free_loads and not cost_model(self.chip).rebalance_loads
        self.names = [op.name for op in net.ops]
        self._trusted: dict[frozenset[str], tuple[tuple[int, int, int, int], ...]] = {}
        for t in self.settings.trusted:
            self._trusted[t[0]] = tuple(sorted((*self._trusted.get(t[0], ()), t[1:])))
        self.runs = group_runs(net, self.settings)
        index = net.op_index
        self.last_use = {t: max((index[c.name] for c in net.consumers.get(t, ())), default=-1) for t in net.tensors}
        self.net_outputs = set(net.outputs)
        self.op_tiu: list[int] = []
        for op in net.ops:
            if op.local:
                o = net.tensor(op.outputs[0])
                ih = net.tensor(op.inputs[0]).h if op.inputs else o.h
                self.op_tiu.append(tiu_cycles(self.chip, net, op, SliceShape(o.n, o.h, ih)))
            else:
                self.op_tiu.append(0)
        self.op_weight_gmem = [weight_gmem_bytes(op) for op in net.ops]
        self.op_weight_dma = [weight_dma_cycles(self.chip, op) if b and op.local and weight_bytes(self.chip, op) else 0
                      for b, op in zip(self.op_weight_gmem, net.ops)]
        # a MatMul whose weight columns can be reloaded per W slice (column slicing) holds one column's worth
        self.op_columns = [op.local and column_weights(op) and self.settings.reload_columns for op in net.ops]
        self.op_weight_lane = [-(-group_weight_bytes(self.chip, net, op, 1 if cols else None) // self.chip.align_bytes)
                               * self.chip.align_bytes if op.local else 0 for op, cols in zip(net.ops, self.op_columns)]
        self._columns_prefix = [0]
        for cols in self.op_columns:
            self._columns_prefix.append(self._columns_prefix[-1] + int(cols))
        # the fewest bytes each op's row holds unsliced / sliced (lgopt.hw.sizing.min_footprint)
        self.op_footprint = [(min_footprint(self.chip, net, op, False), min_footprint(self.chip, net, op, True))
                      if op.local else (0, 0) for op in net.ops]
        self._over: dict[int, tuple[list[int], list[int]]] = {}
        self._weight_prefix = [0]
        for b in self.op_weight_lane:
            self._weight_prefix.append(self._weight_prefix[-1] + b)
        # the weights an N or H slicing holds, unaligned, as the rule that holds or reloads them counts them
        # (lgopt.group.timestep.holds_weights)
        self._held_prefix = [0]
        for op in net.ops:
            self._held_prefix.append(self._held_prefix[-1] + (group_weight_bytes(self.chip, net, op) if op.local
                                                              else 0))

    def fits(self, i: int, j: int, capacity: int | None = None) -> tuple[bool, bool]:
        """(unsliced, sliced): whether ``[i, j]`` passes the necessary LMEM conditions of each mode.

        Every op's row must hold its smallest footprint, and a sliced group either holds all its weights at
        once (a column-sliced MatMul's, one column of them) or, where they reach LMEM's size, reloads each
        with every slice (:meth:`reloads_weights`; TPU-MLIR's rule, which the scheduler follows: UNet's
        ten-op bottleneck on BM1688 INT8 at two H slices, 1.5 LMEMs of weights, is TPU-MLIR's own opt2 group
        and was refused here before).  The footprints only grow with the run and so does the first condition;
        the second only grows true, so a longer run can pass where a shorter one failed only by reloading:
        :meth:`intervals` stops at the first run that fails both modes and could not reload.
        """
        cap = self.chip.lmem_bytes if capacity is None else capacity
        over = self._over.get(cap)
        if over is None:  # prefix counts of ops whose footprint overflows ``cap``: each test in O(1)
            over = self._over[cap] = ([0], [0])
            for whole, sliced in self.op_footprint:
                over[0].append(over[0][-1] + (whole > cap))
                over[1].append(over[1][-1] + (sliced > cap))
        weights = self._weight_prefix[j + 1] - self._weight_prefix[i]
        return over[0][j + 1] == over[0][i], over[1][j + 1] == over[1][i] and (weights <= cap or
                                                                               self.reloads_weights(i, j))

    def reloads_weights(self, i: int, j: int) -> bool:
        """Whether an N or H slicing of ``[i, j]`` reloads every weight with each slice: they reach the size of
        LMEM, so none is held (:func:`lgopt.group.timestep.holds_weights`)."""
        return self._held_prefix[j + 1] - self._held_prefix[i] >= self.chip.lmem_bytes

    def has_columns(self, i: int, j: int) -> bool:
        """Whether ``[i, j]`` has a MatMul whose weight a column slicing reloads per slice (its weights are then
        not all held, and their loads overlap compute: :func:`lgopt.strategies.cpsat.bounds.interval_lower_bound`)."""
        return self._columns_prefix[j + 1] > self._columns_prefix[i]

    def intervals(self) -> list[Key]:
        """Every candidate: a run ``[i, j]`` on its own, and where a tensor can be handed over in LMEM,
        receiving it at ``i`` (``"in"``) or handing it over after ``j`` (``"out"``)."""
        out: list[Key] = []
        for s, e in self.runs:
            for i in range(s, e + 1):
                for j in range(i, min(e, i + self.settings.max_group_ops - 1) + 1):
                    if not any(self.fits(i, j)):
                        if self.reloads_weights(i, j):
                            break  # no slicing of this run, or of any longer one, can pack
                        continue  # a longer run may reload its weights and pack
                    out.append((i, j, ""))
                    if self.handover and self._can_keep(i) and not self._receives_every_reader(i, j):
                        out.append((i, j, "in"))
                    if self.handover and self._can_keep(j + 1):
                        out.append((i, j, "out"))
        return out

    def _receives_every_reader(self, i: int, j: int) -> bool:
        """Whether ``[i, j]`` holds every reader of a tensor handed over at ``i`` that has readers besides op
        ``i``.  The giver, evaluated on its own, stores such a tensor (another reader may need it from GMEM);
        received by a group holding all its readers, that store would be traffic for nothing (the verifier
        refuses it), so such a group is a candidate only without the hand-over."""
        net = self.net
        index = net.op_index
        for t in handover(net, i):
            if store_skipped(net, t, i) or t in net.outputs:
                continue
            if all(i <= index[c.name] <= j for c in net.consumers.get(t, ())):
                return True
        return False

    def _can_keep(self, b: int) -> bool:
        ts = handover(self.net, b)
        return bool(ts) and pin_offset(self.chip, whole_bytes(self.chip, self.net, ts)) > 0

    def kept(self, i: int, j: int, v: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(kept_in, kept_out) of candidate ``(i, j, v)``."""
        return (handover(self.net, i) if v == "in" else (), handover(self.net, j + 1) if v == "out" else ())

    def value(self, costs: Mapping[str, Any]) -> int:
        """The objective of a cost record."""
        return objective_value(costs, self.objective)

    def global_value(self, k: int) -> int:
        return self.value(global_layer_cost(self.chip, self.net, self.net.ops[k]))

    def trusted_intervals(self) -> list[Key]:
        """The runs of the trusted groups (the reference's own, :attr:`SearchSettings.trusted`) that are contiguous
        here, as candidates: a search that evaluates them first starts no worse than the compiler's grouping."""
        index = self.net.op_index
        out = set()
        for ops in self._trusted:
            k = sorted(index[o] for o in ops if o in index)
            if len(k) == len(ops) and k[-1] - k[0] + 1 == len(k):
                out.add((k[0], k[-1], ""))
        return sorted(out)

    def signature(self, i: int, j: int, v: str = "") -> tuple:
        """Structure of the candidate with names replaced by positions (the cost and packing depend only on it)."""
        net = self.net
        kin, kout = self.kept(i, j, v)
        pos: dict[str, str] = {}
        ext: dict[str, str] = {}
        rows = []
        for k in range(i, j + 1):
            op = net.ops[k]
            ins: list[Any] = []
            for t in op.inputs:
                if t in pos:
                    ins.append(pos[t])
                else:
                    ext.setdefault(t, f"e{len(ext)}")
                    ten = net.tensor(t)
                    ins.append((ext[t], ten.shape, ten.dtype))
            outs = []
            for t in op.outputs:
                pos[t] = f"t{k - i}"
                ten = net.tensor(t)
                outs.append((ten.shape, ten.dtype, self.last_use[t] > j or t in self.net_outputs))
            rows.append((op.type, tuple(sorted(op.attrs.items())), op.fused,
                         tuple((w.shape, w.dtype, w.role) for w in op.weights), tuple(ins), tuple(outs)))
        keep = (v, tuple(ext[t] for t in kin), tuple((pos[t], store_skipped(net, t, j + 1)) for t in kout))
        # a trusted slicing packs into more LMEM (lgopt.strategies.settings.packing_room): part of the structure
        trusted = self._trusted.get(frozenset(self.names[i:j + 1]), ()) if self._trusted else ()
        return tuple(rows) + (keep, trusted)

    def inner_chip(self, kept: Sequence[str]) -> Chip | None:
        """The LMEM left below the handed-over tensors (the whole chip when there are none)."""
        if not kept:
            return self.chip
        return packing_chip(self.chip, pin_offset(self.chip, whole_bytes(self.chip, self.net, kept)))

    def slicings(self, ops: Sequence[str], kin: tuple[str, ...] = (), kout: tuple[str, ...] = ()) -> list[Slicing]:
        """Every legal (n, h) with its scheduled (unplaced) table, not refuted by bytes live in one row.

        Tables hold the handed-over tensors ``kin`` / ``kout`` already pinned at the top of LMEM.
        """
        net, chip, st = self.net, self.chip, self.settings
        pchip = self.inner_chip(kin + kout)
        if pchip is None:
            return []
        io = group_io(net, ops)
        batch = max(net.tensor(t).n for t in io.outputs)
        unit = n_unit(net, chip, ops)
        max_h = min(st.max_h_slices, min(net.tensor(t).h for t in io.outputs))
        # necessary conditions (weights resident when sliced, every op's smallest row): skip what cannot pack.
        # The footprints count a handed-over tensor too, which lives in the pinned banks above ``pchip``'s LMEM,
        # not below them: with one, the condition holds only against the whole LMEM.
        first = net.op_index[ops[0]]
        room = pchip.lmem_bytes if not (kin or kout) else chip.lmem_bytes
        whole_possible, slicing_possible = self.fits(first, first + len(ops) - 1, room)
        out: list[Slicing] = []
        for n in range(1, cdiv(batch, unit) + 1):
            for h in range(1, max_h + 1):
                if (n, h) != (1, 1) and not slicing_possible:
                    break
                if (n, h) == (1, 1) and not whole_possible:
                    continue
                try:
                    g = schedule(net, chip, ops, n, h, st.h_ratio, kept_in=kin, kept_out=kout)
                except SliceError:
                    if h == 1:
                        return out
                    break
                pinned = pin_kept(chip, g)
                assert pinned is not None  # pchip exists
                g = pinned[0]
                use = chosen_weights(g)
                # the latest loads give every row its fewest live bytes: if they overflow, nothing packs
                tightest = with_loads(g, {o: (u - 1, 1) for o, u in use.items() if u >= 1}) if use else g
                if peak_live_bytes(pack_items(without_kept(tightest)), chip.align_bytes) > pchip.lmem_bytes:
                    continue
                if use and self.free_loads:
                    out.append(Slicing(n, h, g, table_bound(chip, net, g, self.objective), True))
                else:
                    out.append(Slicing(n, h, g, self.value(group_cost(chip, net, g)), False))
            if not slicing_possible:
                break
        if slicing_possible:
            out += self._column_slicings(ops, kin, kout, pchip)
            if not (kin or kout):
                out += self._channel_slicings(ops, pchip, max_h)
        return out

    def _channel_slicings(self, ops: Sequence[str], pchip: Chip, max_h: int) -> list[Slicing]:
        """Channel (heads) slicings of a group of channel-local ops (:func:`lgopt.group.build.c_slice_options`),
        each with 1 to ``max_h`` H slices until one places no more (one N slice: the batch rides along)."""
        net, chip, st = self.net, self.chip, self.settings
        out: list[Slicing] = []
        for c in c_slice_options(net, chip, ops):
            if c > st.max_c_slices:
                break
            for h in range(1, max_h + 1):
                try:
                    g = schedule(net, chip, ops, 1, h, st.h_ratio, c_slices=c)
                except SliceError:
                    break
                if peak_live_bytes(pack_items(g), chip.align_bytes) > pchip.lmem_bytes:
                    continue
                out.append(Slicing(1, h, g, self.value(group_cost(chip, net, g)), False, 1, c))
                break  # more H slices only repeat loads once one fits
        return out

    def _column_slicings(self, ops: Sequence[str], kin: tuple[str, ...], kout: tuple[str, ...], pchip: Chip
                         ) -> list[Slicing]:
        """W (column) slicings of a group of row ops (:func:`lgopt.group.build.w_slice_options`), one N and H
        slice: the counts the greedy baseline tries, so the optimiser chooses among them on cost."""
        net, chip, st = self.net, self.chip, self.settings
        out: list[Slicing] = []
        for w in w_slice_options(net, chip, ops, st.max_w_slices):
            try:
                g = schedule(net, chip, ops, 1, 1, st.h_ratio, kept_in=kin, kept_out=kout, w_slices=w,
                             reload_columns=st.reload_columns)
            except SliceError:
                break
            pinned = pin_kept(chip, g)
            assert pinned is not None  # pchip exists
            g = pinned[0]
            if peak_live_bytes(pack_items(without_kept(g)), chip.align_bytes) > pchip.lmem_bytes:
                continue
            if st.compiler is not None and not trusted(st, g) and st.compiler.refuses(chip, net, g):
                continue
            out.append(Slicing(1, 1, g, self.value(group_cost(chip, net, g)), False, w))
        return out

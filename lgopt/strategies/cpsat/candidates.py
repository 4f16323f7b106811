"""The candidate space the CP-SAT optimiser chooses from, and how a candidate is judged.

A candidate group is a contiguous run of local ops of the network's order
(``[i, j]`` by op index) with a slicing ``(n, h)``.  Its cost (cycles or GMEM
traffic) follows from :mod:`lgopt.group.cost` and does not depend on where buffers
sit; its feasibility does: a candidate is feasible when its buffers *can* be
packed into LMEM.  Feasibility is settled cheaply where possible (the greedy
allocator finds a packing; more bytes live at one row than LMEM holds) and
exactly otherwise (the CP-SAT packer of :mod:`lgopt.group.pack`).

Because groups never share LMEM (a tensor handed over between two groups sits
at a fixed place above both packings), the best slicing of an interval is
independent of every other interval, so an interval is evaluated once (and
structurally identical intervals, e.g. repeated ResNet blocks, share one
evaluation through a signature cache).

Search space covered (what a proven bound is a bound over): contiguous runs of
the given topological order up to ``max_group_ops`` ops; ``n`` from 1 to the
batch in N units; ``h`` from 1 up to the first count that breaks a slicing
rule (h/2, empty or non-advancing slices), at most ``max_h_slices``; the
pipelined timestep table of :mod:`lgopt.group.timestep` with, in unsliced groups,
any legal load row per weight (:mod:`lgopt.strategies.cpsat.loadrows`); any packing of the buffers;
and, per interval, the variants of :mod:`lgopt.group.handover`: on its own, receiving a
tensor in LMEM from the previous group, or handing one over to the next.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from lgopt.group.alloc import (
    Allocation,
    count_bank_conflicts,
    exact_pack,
    multi_start_allocate,
    pack_items,
    polish_banks,
)
from lgopt.group.build import n_unit, place, schedule
from lgopt.group.cost import (
    ISSUE_CYCLES,
    SliceShape,
    gdma_cycles,
    global_layer_cost,
    gmem_bytes,
    group_cost,
    tiu_cycles,
    weight_gmem_bytes,
)
from lgopt.group.handover import (
    handover,
    kept_buffers,
    packing_chip,
    pin_kept,
    pin_offset,
    store_skipped,
    whole_bytes,
    without_kept,
)
from lgopt.group.pack import peak_live_bytes
from lgopt.group.slicing import SliceError, group_io, slice_group
from lgopt.group.timestep import schedule_group
from lgopt.hw.chip import Chip
from lgopt.hw.layout import cdiv
from lgopt.hw.sizing import min_footprint, weight_bytes
from lgopt.model.network import Network
from lgopt.model.plan import GroupPlan
from lgopt.strategies.cpsat.loadrows import (
    chosen_weights,
    fluid_bound,
    solve_loads,
    table_bound,
    whole_load_bound,
    with_loads,
)
from lgopt.strategies.settings import SearchSettings

INF = 1 << 62
Key = tuple[int, int, str]  # (first op, last op, hand-over variant: "" | "in" | "out", see lgopt.group.handover)
LOOKAHEAD = (2, 3, 4)  # heuristic tables for unsliced groups: load d weighted ops ahead (1 is the seed's rule)
EFFORT_GROWTH = 4  # each re-evaluation of an interval whose bound is below its value gives its solvers this much more


@dataclass(frozen=True)
class Evaluation:
    """The best provably packable slicing of one interval, and a bound over the undecided ones."""

    cost: int  # objective of the best feasible slicing (INF if none)
    bound: int  # min objective over slicings not proven infeasible (<= cost)
    n: int = 0
    h: int = 0
    loads: tuple[tuple[int, int, int], ...] | None = None  # (op position, row, stage) per weight, unsliced
    offsets: tuple[tuple[int, int], ...] | None = None  # by buffer id, when not the greedy allocator's
    tried: int = 0
    packed_exactly: int = 0
    unknown: int = 0
    full: bool = True  # False: a quick evaluation skipped the load-row solver or exact packing where it could gain
    effort: int = 0  # the solvers had EFFORT_GROWTH ** effort times the base budget


@dataclass(frozen=True)
class Slicing:
    """One slicing of an interval: its table, and the key it is tried in (its value, or a bound on it)."""

    n: int
    h: int
    table: GroupPlan
    key: int
    free_loads: bool  # unsliced with weights: load rows are still to be chosen (key is a bound)


@dataclass
class CandidateSpace:
    net: Network
    chip: Chip
    settings: SearchSettings = field(default_factory=SearchSettings)
    objective: str = "cycles"  # cycles | traffic
    pack_time: float = 2.0  # deterministic time per exact packing
    workers: int = 2
    seed: int = 0
    handover: bool = True  # candidates that keep a tensor in LMEM for the next group (lgopt.group.handover)

    def __post_init__(self) -> None:
        net = self.net
        self.names = [op.name for op in net.ops]
        self.runs: list[tuple[int, int]] = []
        k = 0
        while k < len(net.ops):
            if net.ops[k].local:
                s = k
                while k + 1 < len(net.ops) and net.ops[k + 1].local:
                    k += 1
                self.runs.append((s, k))
            k += 1
        self.cache: dict[tuple, Evaluation] = {}
        self._pool: Any = None  # worker processes (see _workers)
        self._pool_size = 0
        self.evaluated: dict[Key, Evaluation] = {}
        self.evaluations = 0
        self.slowest_full = 0.0  # wall seconds of the slowest full evaluation so far
        index = net.op_index
        self.last_use = {t: max((index[c.name] for c in net.consumers.get(t, ())), default=-1) for t in net.tensors}
        self.net_outputs = set(net.outputs)
        self._tiu = []
        for op in net.ops:
            if op.local:
                o = net.tensor(op.outputs[0])
                ih = net.tensor(op.inputs[0]).h if op.inputs else o.h
                self._tiu.append(tiu_cycles(self.chip, net, op, SliceShape(o.n, o.h, ih)))
            else:
                self._tiu.append(0)
        self._wbytes = [weight_gmem_bytes(op) for op in net.ops]
        self._wdma = [gdma_cycles(self.chip, b) if b and op.local and weight_bytes(self.chip, op) else 0
                      for b, op in zip(self._wbytes, net.ops)]
        self._wlane = [-(-weight_bytes(self.chip, op) // self.chip.align_bytes) * self.chip.align_bytes
                       if op.local else 0 for op in net.ops]
        # the fewest bytes each op's row holds unsliced / sliced (lgopt.hw.sizing.min_footprint)
        self._foot = [(min_footprint(self.chip, net, op, False), min_footprint(self.chip, net, op, True))
                      if op.local else (0, 0) for op in net.ops]
        self._over: dict[int, tuple[list[int], list[int]]] = {}
        self._wprefix = [0]
        for b in self._wlane:
            self._wprefix.append(self._wprefix[-1] + b)

    def _fits(self, i: int, j: int, capacity: int | None = None) -> tuple[bool, bool]:
        """(unsliced, sliced): whether ``[i, j]`` passes the necessary LMEM conditions of each mode.

        Every op's row must hold its smallest footprint, and a sliced group holds all its weights at
        once.  Both only grow with the run, so a run that fails both has no longer run that passes:
        on CV181X, three ResNet-50 intervals in four fail, and skip scheduling altogether.
        """
        cap = self.chip.lmem_bytes if capacity is None else capacity
        over = self._over.get(cap)
        if over is None:  # prefix counts of ops whose footprint overflows ``cap``: each test in O(1)
            over = self._over[cap] = ([0], [0])
            for whole, sliced in self._foot:
                over[0].append(over[0][-1] + (whole > cap))
                over[1].append(over[1][-1] + (sliced > cap))
        weights = self._wprefix[j + 1] - self._wprefix[i]
        return over[0][j + 1] == over[0][i], over[1][j + 1] == over[1][i] and weights <= cap

    # --- what the master needs -------------------------------------------------------------------
    def intervals(self) -> list[Key]:
        """Every candidate: a run ``[i, j]`` on its own, and where a tensor can be handed over in LMEM,
        receiving it at ``i`` (``"in"``) or handing it over after ``j`` (``"out"``)."""
        out: list[Key] = []
        for s, e in self.runs:
            for i in range(s, e + 1):
                for j in range(i, min(e, i + self.settings.max_group_ops - 1) + 1):
                    if not any(self._fits(i, j)):
                        break  # no slicing of this run, or of any longer one, can pack
                    out.append((i, j, ""))
                    if self.handover and self._can_keep(i):
                        out.append((i, j, "in"))
                    if self.handover and self._can_keep(j + 1):
                        out.append((i, j, "out"))
        return out

    def _can_keep(self, b: int) -> bool:
        ts = handover(self.net, b)
        return bool(ts) and pin_offset(self.chip, whole_bytes(self.chip, self.net, ts)) > 0

    def kept(self, i: int, j: int, v: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(kept_in, kept_out) of candidate ``(i, j, v)``."""
        return (handover(self.net, i) if v == "in" else (), handover(self.net, j + 1) if v == "out" else ())

    def value(self, costs: dict[str, Any]) -> int:
        return int(costs["cycles"] if self.objective == "cycles" else costs["traffic_bytes"])

    def global_value(self, k: int) -> int:
        return self.value(global_layer_cost(self.chip, self.net, self.net.ops[k]))

    def lower_bound(self, i: int, j: int, v: str = "") -> int:
        """A cost no slicing of ``[i, j]`` (in variant ``v``) can beat, in O(j - i) from per-op figures.

        cycles: the smaller of
          * unsliced: all TIU work plus the weight DMA that no load-row choice can
            hide under the compute of rows before its use, split freely
            (:func:`lgopt.strategies.cpsat.loadrows.fluid_bound`) or each weight whole in one row
            (:func:`lgopt.strategies.cpsat.loadrows.whole_load_bound`), whichever is more; activation
            transfers only add;
          * sliced: all TIU work (slicing never reduces it, and a second slice issues
            every op again) plus every weight, loaded once before the loop and resident;
        plus, in both modes, the pipeline's fill (the first op's inputs, loaded before
        any compute) and drain (the last op's stored outputs, after all of it): one
        transfer's latency each, and unsliced, the stored outputs whole (a strided
        op may read fewer rows than its input has, so the fill's size is not known
        without slicing the group);
        each mode left out when :meth:`_fits` rules it out;
        and never less than the outputs and weights crossing GMEM once.
        traffic: outputs and weights crossing GMEM once.
        Handing over only takes LMEM away and skips stores: the same bound holds
        with the skipped stores left out.
        """
        net, chip = self.net, self.chip
        skipped = {t for t in self.kept(i, j, v)[1] if store_skipped(net, t, j + 1)}
        out_bytes = 0
        for k in range(i, j + 1):
            for t in net.ops[k].outputs:
                if t in skipped:
                    continue
                if self.last_use[t] > j or t in self.net_outputs:
                    out_bytes += gmem_bytes(net, t, net.tensor(t).n, net.tensor(t).h)
        w = sum(self._wbytes[i:j + 1])
        if self.objective == "traffic":
            return out_bytes + w
        tiu = self._tiu[i:j + 1]
        weights = [(r, self._wdma[k]) for r, k in enumerate(range(i, j + 1)) if self._wdma[k]]
        # the pipeline's fill loads what the first op reads and its drain stores what the last op writes,
        # with no compute beside them: unsliced, whole tensors; sliced, at least one transfer each
        kin = self.kept(i, j, v)[0]
        first_in = [t for t in dict.fromkeys(net.ops[i].inputs) if t not in kin]
        last_out = [t for t in net.ops[j].outputs
                    if t not in skipped and (self.last_use[t] > j or t in self.net_outputs)]
        edges = len(first_in) + len(last_out)
        drain = sum(gdma_cycles(chip, gmem_bytes(net, t, net.tensor(t).n, net.tensor(t).h)) for t in last_out)
        unsliced = max(fluid_bound(sum(tiu), tiu, weights), whole_load_bound(tiu, weights)) + drain + \
            chip.gdma_latency_cycles * len(first_in)
        can_whole, can_slice = self._fits(i, j)
        unsliced = unsliced if can_whole else INF
        sliced = (sum(tiu) + ISSUE_CYCLES * (j + 1 - i) + sum(c for _, c in weights)
                  + chip.gdma_latency_cycles * edges) if can_slice else INF
        stream = int((out_bytes + w) * chip.tiu_mhz * 1e6 / (chip.gdma_gbps * 1e9))
        return max(min(unsliced, sliced), stream)

    # --- evaluation ------------------------------------------------------------------------------
    def signature(self, i: int, j: int, v: str = "") -> tuple:
        """Structure of the candidate with names replaced by positions (the cost and packing depend only on it)."""
        net = self.net
        kin, kout = self.kept(i, j, v)
        pos: dict[str, str] = {}
        ext: dict[str, str] = {}
        rows = []
        for k in range(i, j + 1):
            op = net.ops[k]
            ins = []
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
        return tuple(rows) + (keep,)

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
        # necessary conditions (weights resident when sliced, every op's smallest row): skip what cannot pack
        first = net.op_index[ops[0]]
        whole_possible, slicing_possible = self._fits(first, first + len(ops) - 1, pchip.lmem_bytes)
        out = []
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
                if use:
                    out.append(Slicing(n, h, g, table_bound(chip, net, g, self.objective), True))
                else:
                    out.append(Slicing(n, h, g, self.value(group_cost(chip, net, g)), False))
            if not slicing_possible:
                break
        return out

    def evaluate_many(self, ivs: Sequence[Key], processes: int = 1,
                      deadline: float | None = None, full: bool = True) -> None:
        """Evaluate intervals, in worker processes when asked; results are identical to serial ones.

        ``full=False`` is the quick evaluation (no load-row solver, no exact packing): a real plan's
        value and a valid bound, refined later only where the master needs it.
        """
        import time

        todo: dict[tuple, list[Key]] = {}
        for iv in ivs:
            ev = self.evaluated.get(iv)
            if ev is not None and (ev.full or not full):
                continue
            sig = self.signature(*iv)
            ev = self.cache.get(sig)
            if ev is not None and (ev.full or not full):
                self.evaluated[iv] = ev
            else:
                todo.setdefault(sig, []).append(iv)
        if not todo:
            return
        reps = [(sig, group[0]) for sig, group in todo.items()]
        results: list[tuple[tuple, Evaluation]] = []
        if processes > 1 and len(reps) >= 8:
            chunk = max(1, min(8, len(reps) // (processes * 8)))
            batches = [(reps[k:k + chunk], deadline, full, self.slowest_full) for k in range(0, len(reps), chunk)]
            for out in self._workers(processes).imap(_evaluate_batch, batches):
                results.extend(out)
                if deadline is not None and time.perf_counter() > deadline:
                    self.close()  # stop what the workers are still doing
                    break
        else:
            for sig, iv in reps:
                if deadline is not None and time.perf_counter() > deadline:
                    break
                results.append((sig, self._timed(iv, self._full_in_time(full, deadline), deadline)))
        self.evaluations += len(results)
        for sig, ev in results:
            self.cache[sig] = ev
            for iv in todo[sig]:
                self.evaluated[iv] = ev

    def _workers(self, processes: int) -> Any:
        """A pool of worker processes forked once per space and kept: each worker's memoised per-op
        figures (TIU cycles, sizes) then serve every batch, not just one."""
        import multiprocessing as mp

        global _WORKER_SPACE
        if self._pool is None or self._pool_size != processes:
            self.close()
            _WORKER_SPACE = self  # what the workers fork (and any replacement worker)
            self._pool = mp.get_context("fork").Pool(processes)
            self._pool_size = processes
        return self._pool

    def close(self) -> None:
        """Stop the worker processes, if any."""
        global _WORKER_SPACE
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
        if _WORKER_SPACE is self:
            _WORKER_SPACE = None

    def _full_in_time(self, full: bool, deadline: float | None) -> bool:
        """A full evaluation only if one as slow as the slowest so far ends before ``deadline``: a time
        limit is not overrun by a solve that cannot finish (a quick evaluation stands in, refinable later)."""
        import time

        return full and (deadline is None or time.perf_counter() + self.slowest_full <= deadline)

    def _timed(self, key: Key, full: bool, deadline: float | None = None, effort: int = 0) -> Evaluation:
        import time

        t0 = time.perf_counter()
        ev = self._evaluate(key, full, deadline, effort)
        if full:
            self.slowest_full = max(self.slowest_full, time.perf_counter() - t0)
        return ev

    def evaluate(self, i: int, j: int, v: str = "", full: bool = True, deadline: float | None = None,
                 effort: int = 0) -> Evaluation:
        """The interval's evaluation: cached, unless ``full`` or ``effort`` asks for more than the cache holds.

        ``effort`` multiplies the solvers' budgets by ``EFFORT_GROWTH ** effort``; a re-evaluation keeps
        the better value and the better bound of the two (both are valid).
        """
        ev = self.evaluated.get((i, j, v))
        if ev is not None and (ev.full or not full) and ev.effort >= effort:
            return ev
        sig = self.signature(i, j, v)
        ev = self.cache.get(sig)
        if ev is None or full and not ev.full or ev.effort < effort:
            old = ev
            ev = self._timed((i, j, v), full, deadline, effort)
            self.evaluations += 1
            if old is not None and old.full:  # keep the better plan and the better bound
                keep = old if old.cost < ev.cost else ev
                ev = replace(keep, bound=min(keep.cost, max(old.bound, ev.bound)), effort=effort)
            self.cache[sig] = ev
        self.evaluated[(i, j, v)] = ev
        return ev

    def _evaluate(self, key: Key, full: bool = True, deadline: float | None = None, effort: int = 0) -> Evaluation:
        """Slicings in order of their key; stop when no remaining key can beat the best placed one.

        ``deadline`` (``time.perf_counter()``) cuts the solvers short: what they
        leave undecided stays a bound, so the evaluation is valid, only weaker.
        """
        net, chip, st = self.net, self.chip, self.settings
        ops = self.names[key[0]:key[1] + 1]
        kin, kout = self.kept(*key)
        pchip = self.inner_chip(kin + kout)
        budget = self.pack_time * EFFORT_GROWTH ** effort
        cands = sorted(self.slicings(ops, kin, kout), key=lambda c: (c.key, c.n * c.h, c.n, c.h))
        best: Evaluation | None = None
        bound = INF
        exact = unknown = 0
        partial = False
        for c in cands:
            if best is not None and c.key >= best.cost:
                break
            if c.free_loads:
                sl = slice_group(net, list(ops), 1, 1, n_unit=n_unit(net, chip, ops), h_ratio=st.h_ratio)
                ahead = [without_kept(schedule_group(net, chip, sl, d, kin, kout)) for d in LOOKAHEAD]
                lp = solve_loads(net, pchip, without_kept(c.table), ahead, self.objective, st.bank_rule,
                                 budget, self.seed,
                                 upper=best.cost if best is not None else None, solve=full, deadline=deadline)
                exact += lp.solved
                partial |= not full and lp.status != "optimal" and lp.bound < (best.cost if best else INF)
                if lp.status != "infeasible":
                    bound = min(bound, lp.bound)
                if lp.value is not None and (best is None or lp.value < best.cost):
                    pos = {o: k for k, o in enumerate(ops)}
                    loads = tuple(sorted((pos[o], r, s) for o, (r, s) in lp.loads.items()))
                    best = Evaluation(lp.value, 0, c.n, c.h, loads, tuple(sorted(lp.offsets.items())))
                unknown += lp.value is None and lp.status != "infeasible"
                continue
            inner = without_kept(c.table)
            alloc = multi_start_allocate(net, pchip, inner, st.bank_rule)
            if alloc is not None:
                best = Evaluation(c.key, 0, c.n, c.h)
                continue
            if not full:  # the quick evaluation leaves exact packing to the refinement: the key stays a bound
                bound = min(bound, c.key)
                partial = True
                continue
            exact += 1
            res = exact_pack(net, pchip, inner, st.bank_rule, budget, self.seed, self.workers, deadline=deadline)
            if res is None:
                continue
            if res == "unknown":
                unknown += 1
                bound = min(bound, c.key)
                continue
            best = Evaluation(c.key, 0, c.n, c.h, None, tuple(sorted(res.items())))
        if best is None:
            return Evaluation(INF, bound, 0, 0, None, None, len(cands), exact, unknown, not partial, effort)
        return replace(best, bound=min(bound, best.cost), tried=len(cands), packed_exactly=exact, unknown=unknown,
                       full=not partial, effort=effort)

    def materialize(self, i: int, j: int, v: str = "", polish: bool = False) -> GroupPlan:
        """The placed group for an evaluated candidate, with its costs (as evaluated: no new solve);
        ``polish`` reduces its soft bank conflicts (:func:`lgopt.group.alloc.polish_banks`)."""

        ev = self.evaluate(i, j, v, full=False)
        if ev.cost >= INF:
            raise ValueError(f"interval {i}..{j} {v} has no feasible slicing")
        ops = self.names[i:j + 1]
        kin, kout = self.kept(i, j, v)
        g = schedule(self.net, self.chip, ops, ev.n, ev.h, self.settings.h_ratio, kept_in=kin, kept_out=kout)
        pinned = pin_kept(self.chip, g)
        assert pinned is not None
        g, pchip = pinned
        if ev.loads is not None:
            g = with_loads(g, {ops[k]: (r, s) for k, r, s in ev.loads})
        offs = {b.id: b.offset for b in kept_buffers(g)}
        if ev.offsets is None:
            alloc = multi_start_allocate(self.net, pchip, without_kept(g), self.settings.bank_rule)
            assert alloc is not None
            offs.update(alloc.offsets)
        else:
            offs.update(dict(ev.offsets))
        if polish and self.settings.bank_rule == "soft":
            inner = without_kept(g)
            offs.update(polish_banks(self.net, pchip, inner, {b.id: offs[b.id] for b in inner.buffers}))
        peak = max(offs[b.id] + b.size for b in g.buffers)
        conf = count_bank_conflicts(self.net, self.chip, g, offs) if self.settings.bank_rule != "off" else 0
        g = place(self.net, self.chip, g, Allocation(offs, peak, conf))
        return replace(g, cost={**g.cost, **group_cost(self.chip, self.net, g)})


_WORKER_SPACE: CandidateSpace | None = None  # set in the parent while its worker pool lives (workers fork it)


def _evaluate_batch(task: tuple[list[tuple[tuple, Key]], float | None, bool, float]
                    ) -> list[tuple[tuple, Evaluation]]:
    import time

    batch, deadline, full, slowest = task
    space = _WORKER_SPACE
    assert space is not None
    space.slowest_full = slowest  # the parent's view: a full evaluation is tried only if it can finish
    out = []
    for sig, iv in batch:
        if deadline is not None and time.perf_counter() > deadline:
            break  # unevaluated intervals keep their lower bound: the result stays valid, only weaker
        out.append((sig, space._evaluate(iv, space._full_in_time(full, deadline), deadline)))
    return out

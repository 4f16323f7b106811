"""The candidate space the CP-SAT optimiser chooses from, and how a candidate is judged.

A candidate group is a contiguous run of local ops of the network's order
(``[i, j]`` by op index) with a slicing ``(n, h)``.  Its cost (cycles or GMEM
traffic) follows from :mod:`lgopt.cost` and does not depend on where buffers
sit; its feasibility does: a candidate is feasible when its buffers *can* be
packed into LMEM.  Feasibility is settled cheaply where possible (the greedy
allocator finds a packing; more bytes live at one row than LMEM holds) and
exactly otherwise (the CP-SAT packer of :mod:`lgopt.pack`).

Because groups never share LMEM, the best slicing of an interval is
independent of every other interval, so an interval is evaluated once (and
structurally identical intervals, e.g. repeated ResNet blocks, share one
evaluation through a signature cache).

Search space covered (what a proven bound is a bound over): contiguous runs of
the given topological order up to ``max_group_ops`` ops; ``n`` from 1 to the
batch in N units; ``h`` from 1 up to the first count that breaks a slicing
rule (h/2, empty or non-advancing slices), at most ``max_h_slices``; the
pipelined timestep table of :mod:`lgopt.timestep`; any packing of the buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from .alloc import Allocation, conflict_pairs, count_bank_conflicts, multi_start_allocate
from .build import n_unit, place, schedule
from .chip import Chip
from .cost import gdma_cycles, global_layer_cost, gmem_bytes, group_cost, tiu_cycles, weight_gmem_bytes, SliceShape
from .layout import cdiv
from .network import Network
from .pack import PackItem, pack, peak_live_bytes
from .plan import GroupPlan
from .search import SearchSettings
from .sizing import weight_bytes
from .slicing import SliceError, group_io, slice_group
from .timestep import schedule_group

INF = 1 << 62
PREFETCH = (1, 2, 3, 4)  # load a weight while the d-th previous weighted op computes (unsliced groups)


@dataclass(frozen=True)
class Evaluation:
    """The best provably packable slicing of one interval, and a bound over the undecided ones."""

    cost: int  # objective of the best feasible slicing (INF if none)
    bound: int  # min objective over slicings not proven infeasible (<= cost)
    n: int = 0
    h: int = 0
    prefetch: int = 1
    offsets: tuple[tuple[int, int], ...] | None = None  # by buffer id, when the exact packer placed it
    tried: int = 0
    packed_exactly: int = 0
    unknown: int = 0


def pack_items(g: GroupPlan) -> list[PackItem]:
    """A group's buffers as packing rectangles: wrap-around lifetimes become two spans."""
    T = len(g.rows)
    items = []
    for b in g.buffers:
        if b.resident:
            spans: tuple[tuple[int, int], ...] = ((0, T),)
        elif b.start <= b.end:
            spans = ((b.start, b.end + 1),)
        else:
            spans = ((b.start, T), (0, b.end + 1))
        items.append(PackItem(str(b.id), b.size, spans))
    return items


@dataclass
class CandidateSpace:
    net: Network
    chip: Chip
    settings: SearchSettings = field(default_factory=SearchSettings)
    objective: str = "cycles"  # cycles | traffic
    pack_time: float = 2.0  # deterministic time per exact packing
    workers: int = 2
    seed: int = 0

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
        self.evaluated: dict[tuple[int, int], Evaluation] = {}
        self.evaluations = 0
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

    # --- what the master needs -------------------------------------------------------------------
    def intervals(self) -> list[tuple[int, int]]:
        out = []
        for s, e in self.runs:
            for i in range(s, e + 1):
                for j in range(i, min(e, i + self.settings.max_group_ops - 1) + 1):
                    out.append((i, j))
        return out

    def value(self, costs: dict[str, Any]) -> int:
        return int(costs["cycles"] if self.objective == "cycles" else costs["traffic_bytes"])

    def global_value(self, k: int) -> int:
        return self.value(global_layer_cost(self.chip, self.net, self.net.ops[k]))

    def lower_bound(self, i: int, j: int) -> int:
        """A cost no slicing of ``[i, j]`` can beat, in O(j - i) from per-op figures.

        cycles: the smaller of
          * unsliced: every row costs at least max(its op's TIU, the weight DMA the
            table puts in that row), plus the first weight when it must load before
            the loop starts (activation transfers only add);
          * sliced: all TIU work (slicing never reduces it) plus every weight, loaded
            once before the loop and resident (impossible when the weights alone
            overflow a lane);
        and never less than the outputs and weights crossing GMEM once.
        traffic: outputs and weights crossing GMEM once.
        """
        net, chip = self.net, self.chip
        out_bytes = 0
        for k in range(i, j + 1):
            for t in net.ops[k].outputs:
                if self.last_use[t] > j or t in self.net_outputs:
                    out_bytes += gmem_bytes(net, t, net.tensor(t).n, net.tensor(t).h)
        w = sum(self._wbytes[i:j + 1])
        if self.objective == "traffic":
            return out_bytes + w
        tiu = self._tiu[i:j + 1]
        wdma = [self._wdma[k] for k in range(i, j + 1)]
        weighted = [r for r, c in enumerate(wdma) if c]
        unsliced = INF
        for d in self.prefetch_options(len(weighted)):
            row_dma = [0] * len(tiu)
            prologue = 0
            for x, r in enumerate(weighted):
                src = weighted[x - d] if x >= d else weighted[0] - 1
                if src < 0:
                    prologue += wdma[r]
                else:
                    row_dma[src] += wdma[r]
            unsliced = min(unsliced, prologue + sum(max(a, b) for a, b in zip(tiu, row_dma)))
        resident = sum(self._wlane[i:j + 1])
        sliced = sum(tiu) + sum(wdma) if resident <= chip.lmem_bytes else INF
        stream = int((out_bytes + w) * chip.tiu_mhz * 1e6 / (chip.gdma_gbps * 1e9))
        return max(min(unsliced, sliced), stream)

    @staticmethod
    def prefetch_options(weighted: int) -> list[int]:
        """Weight prefetch distances tried for unsliced groups (1 is the seed's rule)."""
        return [d for d in PREFETCH if d == 1 or d <= weighted]

    # --- evaluation ------------------------------------------------------------------------------
    def signature(self, i: int, j: int) -> tuple:
        """Structure of the interval with names replaced by positions (the cost and packing depend only on it)."""
        net = self.net
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
        return tuple(rows)

    def slicings(self, ops: Sequence[str]) -> list[tuple[int, int, int, GroupPlan, int]]:
        """Every legal (n, h, prefetch) with its scheduled (unplaced) group and objective value."""
        net, chip, st = self.net, self.chip, self.settings
        io = group_io(net, ops)
        batch = max(net.tensor(t).n for t in io.outputs)
        unit = n_unit(net, chip, ops)
        max_h = min(st.max_h_slices, min(net.tensor(t).h for t in io.outputs))
        # sliced groups keep every weight resident: if those alone overflow a lane, only (1, 1) can pack
        resident = sum(-(-weight_bytes(chip, net.op(o)) // chip.align_bytes) * chip.align_bytes for o in ops)
        slicing_possible = resident <= chip.lmem_bytes
        out = []
        for n in range(1, cdiv(batch, unit) + 1):
            for h in range(1, max_h + 1):
                if (n, h) != (1, 1) and not slicing_possible:
                    break
                try:
                    g = schedule(net, chip, ops, n, h, st.h_ratio)
                except SliceError:
                    if h == 1:
                        return out
                    break
                variants = [(1, g)]
                if (n, h) == (1, 1):
                    n_weighted = sum(1 for o in ops if weight_bytes(chip, net.op(o)))
                    d_opts = [d for d in self.prefetch_options(n_weighted) if d > 1]
                    if d_opts:  # one slicing, several weight-load tables: slice once
                        sl = slice_group(net, list(ops), 1, 1, n_unit=unit, h_ratio=st.h_ratio)
                        variants += [(d, schedule_group(net, chip, sl, d)) for d in d_opts]
                for d, gd in variants:
                    if peak_live_bytes(pack_items(gd), chip.align_bytes) > chip.lmem_bytes:
                        continue  # more bytes live in one row than a lane holds: no packing exists
                    out.append((n, h, d, gd, self.value(group_cost(chip, net, gd))))
            if not slicing_possible:
                break
        return out

    def evaluate_many(self, ivs: Sequence[tuple[int, int]], processes: int = 1,
                      deadline: float | None = None) -> None:
        """Evaluate intervals, in worker processes when asked; results are identical to serial ones."""
        import time

        todo: dict[tuple, list[tuple[int, int]]] = {}
        for iv in ivs:
            if iv in self.evaluated:
                continue
            sig = self.signature(*iv)
            if sig in self.cache:
                self.evaluated[iv] = self.cache[sig]
            else:
                todo.setdefault(sig, []).append(iv)
        if not todo:
            return
        reps = [(sig, group[0]) for sig, group in todo.items()]
        results: list[tuple[tuple, Evaluation]] = []
        if processes > 1 and len(reps) >= 8:
            import multiprocessing as mp

            global _WORKER_SPACE, _WORKER_DEADLINE
            _WORKER_SPACE, _WORKER_DEADLINE = self, deadline
            chunk = max(1, min(8, len(reps) // (processes * 8)))
            batches = [reps[k:k + chunk] for k in range(0, len(reps), chunk)]
            with mp.get_context("fork").Pool(processes) as pool:
                for out in pool.imap(_evaluate_batch, batches):
                    results.extend(out)
                    if deadline is not None and time.perf_counter() > deadline:
                        pool.terminate()
                        break
            _WORKER_SPACE = None
        else:
            for sig, iv in reps:
                if deadline is not None and time.perf_counter() > deadline:
                    break
                results.append((sig, self._evaluate(self.names[iv[0]:iv[1] + 1])))
        self.evaluations += len(results)
        for sig, ev in results:
            self.cache[sig] = ev
            for iv in todo[sig]:
                self.evaluated[iv] = ev

    def evaluate(self, i: int, j: int) -> Evaluation:
        if (i, j) in self.evaluated:
            return self.evaluated[(i, j)]
        sig = self.signature(i, j)
        ev = self.cache.get(sig)
        if ev is None:
            ev = self._evaluate(self.names[i:j + 1])
            self.evaluations += 1
            self.cache[sig] = ev
        self.evaluated[(i, j)] = ev
        return ev

    def _evaluate(self, ops: Sequence[str]) -> Evaluation:
        cands = sorted(self.slicings(ops), key=lambda c: (c[4], c[0] * c[1], c[0], c[1], c[2]))
        bound = INF
        exact = unknown = 0
        for n, h, d, g, value in cands:
            alloc = multi_start_allocate(self.net, self.chip, g, self.settings.bank_rule)
            if alloc is not None:
                return Evaluation(value, min(bound, value), n, h, d, None, len(cands), exact, unknown)
            exact += 1
            res = self.exact_pack(g)
            if res is None:
                continue
            if res == "unknown":
                unknown += 1
                bound = min(bound, value)
                continue
            return Evaluation(value, min(bound, value), n, h, d, tuple(sorted(res.items())), len(cands), exact,
                              unknown)
        return Evaluation(INF, bound, 0, 0, 1, None, len(cands), exact, unknown)

    def exact_pack(self, g: GroupPlan) -> dict[int, int] | str | None:
        """Offsets by buffer id, None when no packing exists, "unknown" when the packer ran out of time."""
        items = pack_items(g)
        pairs = [tuple(str(x) for x in sorted(p)) for p in conflict_pairs(self.net, g)] \
            if self.settings.bank_rule != "off" else []
        res = pack(items, self.chip.lmem_bytes, align=self.chip.align_bytes, conflicts=pairs,
                   bank_bytes=self.chip.bank_bytes, bank_rule=self.settings.bank_rule, time_limit=self.pack_time,
                   workers=1 if len(items) <= 400 else self.workers, seed=self.seed)  # one worker: far faster here
        if res.status == "infeasible":
            return None
        if not res.found:
            return "unknown"
        return {int(k): v for k, v in res.offsets.items()}

    def materialize(self, i: int, j: int) -> GroupPlan:
        """The placed group for an evaluated interval, with its costs."""
        ev = self.evaluate(i, j)
        if ev.cost >= INF:
            raise ValueError(f"interval {i}..{j} has no feasible slicing")
        ops = self.names[i:j + 1]
        g = schedule(self.net, self.chip, ops, ev.n, ev.h, self.settings.h_ratio, ev.prefetch)
        if ev.offsets is None:
            alloc = multi_start_allocate(self.net, self.chip, g, self.settings.bank_rule)
            assert alloc is not None
        else:
            offs = dict(ev.offsets)
            peak = max(offs[b.id] + b.size for b in g.buffers)
            conf = count_bank_conflicts(self.net, self.chip, g, offs) if self.settings.bank_rule != "off" else 0
            alloc = Allocation(offs, peak, conf)
        g = place(self.net, self.chip, g, alloc)
        return replace(g, cost={**g.cost, **group_cost(self.chip, self.net, g)})


_WORKER_SPACE: CandidateSpace | None = None  # set in the parent just before forking workers
_WORKER_DEADLINE: float | None = None


def _evaluate_batch(batch: list[tuple[tuple, tuple[int, int]]]) -> list[tuple[tuple, Evaluation]]:
    import time

    space = _WORKER_SPACE
    assert space is not None
    out = []
    for sig, iv in batch:
        if _WORKER_DEADLINE is not None and time.perf_counter() > _WORKER_DEADLINE:
            break  # unevaluated intervals keep their lower bound: the result stays valid, only weaker
        out.append((sig, space._evaluate(space.names[iv[0]:iv[1] + 1])))
    return out

"""Search with the compiler as the judge: lgopt proposes groupings, TPU-MLIR's timeline decides.

lgopt's calibrated cost model is a median 4-7% off TPU-MLIR per group (``docs/cost-model.md``), about the size
of the differences between good groupings, so a grouping it predicts faster is often not (mobilenet_v2 on
bm1684x: predicted 9% faster than TPU-MLIR's own, measured 2.3% slower).  Where TPU-MLIR is installed this
search closes the loop the way an autotuner does: every candidate it keeps has been compiled and its cycles
read from codegen's simulated timeline (:mod:`lgopt.tpumlir.judge`).

1. Start points: TPU-MLIR's own grouping (the reference) and the plans the wrapped strategy found in the
   compiler's space, with the cautions for new groups, with the packing one alone and without them
   (:func:`lgopt.tpumlir.space.packing_caution_only`, :func:`lgopt.tpumlir.space.free_of_cautions`);
   each is compiled (one TPU-MLIR's allocator refuses, again with the group it names made smaller), the fastest
   that compiles is the incumbent.
2. Rounds of local search from the incumbent.  Its neighbours are the groupings one edit away (a group's
   N or H slice count one up or down, halved or doubled, and on several cores as many H slices as cores, a group
   split at a point where one tensor crosses (on several cores also with its head at one H slice a core, where
   the group had fewer: a one-slice group runs on core 0 alone; MobileNet-style stems on BM1690's 8 cores),
   two neighbouring groups merged, a boundary moved by one to three ops, a group grown by a global op beside
   it or shrunk by one, a group dissolved, the Cast of a network input or output the group loads or stores
   taken into it or left global); each is built by lgopt's own rules (slices, timestep table, LMEM
   allocation; no fork TPU-MLIR refuses at the slices the cache forces, :func:`lgopt.tpumlir.forks.forced_fork`)
   and ranked by the cost model.  The best-ranked ones are compiled in turn; the first that is
   measured faster becomes the incumbent, and the round's other measured gains that touch other groups are
   tried on top of it.
3. It stops when a round finds nothing faster, or at the compile budget or the time limit.

The result is measured, not predicted: never slower than TPU-MLIR's own grouping when that one is among
the start points and lgopt can build it, and every grouping it returns has compiled.  ``plan.cost`` still
holds lgopt's prediction (every plan's costs come from one model); ``plan.solver["judge"]`` holds the
measurements, with their source.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from lgopt.cost.registry import cost_model
from lgopt.errors import LgoptError
from lgopt.group.alloc import multi_start_allocate
from lgopt.group.build import allocate_thorough, assemble, n_unit, place, schedule
from lgopt.group.slicing import SliceError, group_io
from lgopt.group.totals import finish, with_cost
from lgopt.hw.chip import Chip
from lgopt.hw.layout import cdiv
from lgopt.model.network import Network, network_digest
from lgopt.model.plan import GroupPlan, Plan
from lgopt.strategies.settings import Incumbent, Progress, SearchSettings, group_runs
from lgopt.tpumlir.export import compile_edge_casts, edge_cast_order, export_tpumlir
from lgopt.tpumlir.forks import forced_fork
from lgopt.tpumlir.judge import SOURCE, Judge, Measurement

REPAIRS = 3  # a start point TPU-MLIR refuses is retried with the group it names (else every group) smaller, this often
_ALLOC_FAILED = re.compile(r"allocate failed for group (\d+)")


@dataclass(frozen=True)
class Cut:
    """One group of a grouping: its ops (contiguous in the compiler's op order), slice counts, and the network
    inputs and outputs it converts from or to f32 itself (``GroupPlan.f32_in`` / ``f32_out``, its Casts in the
    group; else they run as global layers)."""

    ops: tuple[str, ...]
    n: int
    h: int
    f32: tuple[str, ...] = ()


Grouping = tuple[Cut, ...]


@dataclass(frozen=True)
class JudgeSettings:
    budget: int = 40  # compiles after the start points
    per_round: int = 6  # neighbours compiled per round (more only until one is measured faster), best predicted first
    worse_than: float = 0.10  # neighbours predicted this much slower than the incumbent are not compiled
    time_limit: float | None = None  # wall seconds for the whole search (start points included)


class _Builder:
    """Groupings -> lgopt plans on the network in the compiler's order, with every group built once."""

    def __init__(self, onet: Network, net: Network, chip: Chip, st: SearchSettings, strategy: str):
        self.onet, self.net, self.chip, self.st, self.strategy = onet, net, chip, st, strategy
        self._groups: dict[Cut, GroupPlan | None] = {}
        self.index = onet.op_index

    def group(self, c: Cut) -> GroupPlan | None:
        if c not in self._groups:
            alloc = None
            try:  # the compiler's slicing rule; the greedy orders for LMEM (tight groups need more than one); no
                # fork TPU-MLIR refuses at the slices a cache forces
                if not forced_fork(self.chip, self.onet, c.ops, c.h):
                    s = schedule(self.onet, self.chip, list(c.ops), c.n, c.h, None, f32_copies=c.f32)
                    alloc = multi_start_allocate(self.onet, self.chip, s, self.st.bank_rule)
                    if alloc is None and c.f32:  # the f32 slices are large: the exact packer decides
                        alloc = allocate_thorough(self.onet, self.chip, s, self.st.bank_rule)[0]
            except SliceError:
                pass
            self._groups[c] = None if alloc is None or set(s.f32_in + s.f32_out) != set(c.f32) else \
                with_cost(self.chip, self.onet, place(self.onet, self.chip, s, alloc))
        return self._groups[c]

    def seed(self, plan: Plan) -> None:
        """Take a start point's groups as built (a compiler's grouping is judged thoroughly when read:
        :func:`lgopt.group.build.try_group`; the search's quick allocator may not place all of them)."""
        for g in plan.groups:
            self._groups.setdefault(cut_of(g, self.index), g)

    def io(self, ops: Sequence[str]) -> tuple[str, ...]:
        """The network inputs ``ops`` load and the outputs they store that the deployment keeps f32 and a group
        may convert itself (none where the cost model's deployment has no such Casts: ``f32_io``)."""
        if not cost_model(self.chip).f32_io:
            return ()
        io = group_io(self.onet, ops)
        ends = [t for t in io.inputs if t in self.onet.inputs] + [t for t in io.outputs if t in self.onet.outputs]
        return tuple(sorted(t for t in ends if self.onet.tensor(t).dtype != "f32"))

    def fit(self, ops: Sequence[str], h_from: int = 1) -> Cut | None:
        """The first slicing lgopt can place, N first to its limit then H (TPU-MLIR's quick search order)."""
        ops = tuple(ops)
        io = group_io(self.onet, ops)
        batch = max(self.onet.tensor(t).n for t in io.outputs)
        max_n = cdiv(batch, n_unit(self.onet, self.chip, ops))
        min_h = min(self.onet.tensor(t).h for t in io.outputs)
        tries = [(n, 1) for n in range(1, max_n + 1)] if h_from <= 1 else []
        tries += [(max_n, h) for h in range(max(2, h_from), min(self.st.max_h_slices, min_h) + 1)]
        for n, h in tries:
            c = Cut(ops, n, h)
            if self.group(c) is not None:
                return c
        return None

    def plan(self, grouping: Grouping) -> Plan | None:
        built = [self.group(c) for c in grouping]
        if any(g is None for g in built):
            return None
        plan = assemble(self.onet, self.chip, [g for g in built if g is not None], self.strategy, h_ratio=None,
                        bank_rule=self.st.bank_rule, status="heuristic")
        plan = finish(self.chip, self.onet, plan)
        return replace(plan, model_digest=network_digest(self.net))


def cut_of(g: GroupPlan, index: Mapping[str, int]) -> Cut:
    """``g`` as a cut: its ops in ``index``'s order (the compiler's), slice counts, the ends it converts."""
    return Cut(tuple(sorted(g.ops, key=index.__getitem__)), g.n_slices, g.h_slices, tuple(sorted(g.f32_in + g.f32_out)))


def grouping_of(plan: Plan, index: Mapping[str, int]) -> Grouping:
    """``plan``'s groups, each with its ops in ``index``'s order (the compiler's).  A one-op group stays: with
    the cast TPU-MLIR grouped it with it is a group there (mobilenet_v3_small's stem)."""
    return tuple(sorted((cut_of(g, index) for g in plan.groups), key=lambda c: index[c.ops[0]]))


def refused_group(m: Measurement, cache: Mapping[str, Any]) -> int | None:
    """The group of the plan TPU-MLIR's allocator named in refusing ``cache`` (its index in ``plan.groups``, from
    the exporter's ``plan_group_of_entry``); None when it compiled, named none, or the index is ambiguous (the
    same load index in two subfunctions).

    >>> bad = Measurement("lg_failed", None, error="local memory allocate failed for group 2 Stack dump:")
    >>> refused_group(bad, {"lgopt": {"plan_group_of_entry": {"subfunc_0": {"2": 1}}}})
    1
    """
    found = None if m.ok else _ALLOC_FAILED.search(m.error or "")
    if found is None:
        return None
    named = [at[found.group(1)] for at in (cache.get("lgopt", {}).get("plan_group_of_entry") or {}).values()
             if found.group(1) in at]
    return named[0] if len(named) == 1 else None


def _span(c: Cut, index: Mapping[str, int]) -> str:
    """``c``'s ops as the judge's move labels name them: ``[first-last]`` in the compiler's op order."""
    return f"[{index[c.ops[0]]}-{index[c.ops[-1]]}]"


def _one_tensor_cuts(onet: Network, ops: tuple[str, ...]) -> list[int]:
    """Split points k (ops[:k] | ops[k:]) where exactly one tensor crosses: block boundaries."""
    out = []
    pos = {o: i for i, o in enumerate(ops)}
    producer = {t: pos[o] for o in ops for t in onet.op(o).outputs}
    for k in range(2, len(ops) - 1):
        crossing = {t for o in ops[k:] for t in onet.op(o).inputs if producer.get(t, k) < k}
        if len(crossing) == 1:
            out.append(k)
    return out


def neighbours(b: _Builder, grouping: Grouping, runs: Sequence[tuple[int, int]]) -> list[tuple[str, Grouping]]:
    """Every grouping one edit away from ``grouping`` (module doc), as (what changed, grouping)."""
    onet, idx = b.onet, b.index
    run_of = {k: r for r, (s, e) in enumerate(runs) for k in range(s, e + 1)}
    grouped = {o for c in grouping for o in c.ops}
    out: list[tuple[str, Grouping]] = []

    def put(label: str, i: int, j: int, new: Sequence[Cut | None]) -> None:
        if any(c is None for c in new):
            return
        out.append((label, grouping[:i] + tuple(c for c in new if c is not None) + grouping[j:]))

    def span(c: Cut) -> str:
        return _span(c, idx)

    for i, c in enumerate(grouping):
        io = group_io(onet, c.ops)
        batch = max(onet.tensor(t).n for t in io.outputs)
        unit = n_unit(onet, b.chip, c.ops)
        # one more or one fewer slice, and half or twice as many: ResNet-18 / BM1688 at batch 4 gains 3.5 % with
        # its big group at 2 N slices instead of TPU-MLIR's 4, and 4 -> 3 (uneven batches) is no step towards it
        max_n = cdiv(batch, unit)
        cores = b.chip.used_cores  # on several cores also as many H slices as cores: one each (TPU-MLIR's chunks)
        for h in sorted(({c.h - 1, c.h // 2, c.h + 1, 2 * c.h} | ({cores} if cores > 1 else set())) - {c.h}):
            if h >= 1:
                put(f"{span(c)} h {c.h}->{h}", i, i + 1, [Cut(c.ops, c.n, h, c.f32)])
        for n in sorted({c.n - 1, c.n // 2, c.n + 1, 2 * c.n} - {c.n}):
            if 1 <= n <= max_n:
                put(f"{span(c)} n {c.n}->{n}", i, i + 1, [Cut(c.ops, n, c.h, c.f32)])
        ends = b.io(c.ops)
        if c.f32:
            put(f"cast global {span(c)} {','.join(c.f32)}", i, i + 1, [Cut(c.ops, c.n, c.h)])
        elif ends:  # at its own H slices or more: the f32 slice is four times an INT8 one
            for h in sorted({c.h, c.h + 1, 2 * c.h}):
                put(f"convert {span(c)} {','.join(ends)} h {c.h}->{h}", i, i + 1, [Cut(c.ops, c.n, h, ends)])
        for k in _one_tensor_cuts(onet, c.ops):
            put(f"split {span(c)} at {idx[c.ops[k]]}", i, i + 1, [b.fit(c.ops[:k]), b.fit(c.ops[k:])])
            if cores > 1 and c.h < cores:  # a one-slice group runs on core 0 alone: its head spread over the cores
                put(f"spread {span(c)} head at {idx[c.ops[k]]} over {cores} cores", i, i + 1,
                    [b.fit(c.ops[:k], cores), b.fit(c.ops[k:])])
        if len(c.ops) <= 4:
            put(f"dissolve {span(c)}", i, i + 1, [])
        first, last = idx[c.ops[0]], idx[c.ops[-1]]
        for lo, hi, label in ((first - 1, last, "grow left"), (first, last + 1, "grow right")):
            if 0 <= lo and hi < len(onet.ops) and run_of.get(lo) == run_of.get(first) == run_of.get(hi) \
                    and onet.ops[lo if lo < first else hi].name not in grouped:
                ops = tuple(o.name for o in onet.ops[lo:hi + 1])
                put(f"{label} {span(c)}", i, i + 1, [b.fit(ops, 1)])
        if len(c.ops) > 2:
            put(f"shrink left {span(c)}", i, i + 1, [b.fit(c.ops[1:])])
            put(f"shrink right {span(c)}", i, i + 1, [b.fit(c.ops[:-1])])
        if i + 1 < len(grouping):
            d = grouping[i + 1]
            a, z = idx[c.ops[0]], idx[d.ops[-1]]
            if run_of.get(a) == run_of.get(z) and all(run_of.get(k) == run_of.get(a) for k in range(a, z + 1)):
                ops = tuple(o.name for o in onet.ops[a:z + 1])
                put(f"merge {span(c)} {span(d)}", i, i + 2, [b.fit(ops)])
                if idx[d.ops[0]] == idx[c.ops[-1]] + 1:
                    both = c.ops + d.ops
                    for s in (-3, -2, -1, 1, 2, 3):
                        k = len(c.ops) + s
                        if 2 <= k <= len(both) - 2:
                            put(f"move boundary {span(c)}|{span(d)} by {s:+d}", i, i + 2,
                                [b.fit(both[:k]), b.fit(both[k:])])
    for s, e in runs:  # new groups of two to four ops lgopt runs globally
        for a in range(s, e + 1):
            for z in range(a + 1, min(a + 3, e) + 1):
                ops = tuple(o.name for o in onet.ops[a:z + 1])
                if not grouped & set(ops):
                    at = sum(1 for c in grouping if idx[c.ops[0]] < a)
                    put(f"new group [{a}-{z}]", at, at, [b.fit(ops)])
    seen: set[Grouping] = {grouping}
    unique = []
    for label, g in out:
        if g not in seen:
            seen.add(g)
            unique.append((label, g))
    return unique


@dataclass
class _Trial:
    move: str
    predicted: float
    measured: int | None
    status: str
    edge_casts: str
    named: int | None = None  # the plan group TPU-MLIR's allocator named in refusing it (:func:`refused_group`)


Best = tuple[int, Grouping, Plan, str]
"""The incumbent: measured cycles, grouping, plan, edge-cast rule."""


class _Search:
    """One judged search's context: what measuring a grouping and reporting an improvement need, the
    clock and the history of trials (shared by the phases of :func:`judged_search`)."""

    def __init__(self, net: Network, onet: Network, chip: Chip, st: SearchSettings, judge: Judge, reference: str,
                 base_groups: Any, js: JudgeSettings, progress: Progress | None, strategy: str,
                 incumbent: Incumbent | None) -> None:
        self.t0 = time.perf_counter()
        self.b = _Builder(onet, net, chip, st, strategy)
        self.runs = group_runs(onet, st)
        self.history: list[_Trial] = []
        self.net, self.judge, self.reference, self.base_groups = net, judge, reference, base_groups
        self.js, self.progress, self.strategy, self.incumbent = js, progress, strategy, incumbent
        self.start_compiles = 0  # the judge's compiles when the local search began

    def out_of_time(self) -> bool:
        return self.js.time_limit is not None and time.perf_counter() - self.t0 > self.js.time_limit

    def spent(self) -> bool:
        """The local search's compile budget or the time limit is used up."""
        return self.judge.compiles - self.start_compiles >= self.js.budget or self.out_of_time()

    def measure(self, plan: Plan, move: str) -> tuple[Measurement, str]:
        """TPU-MLIR's measurement of ``plan`` (under the first edge-cast rule that compiles), recorded."""
        try:
            rule, cache, m = compile_edge_casts(
                plan, lambda r: export_tpumlir(plan, self.net, self.reference, base_groups=self.base_groups,
                                               edge_casts=r),
                lambda cache, _: self.judge.measure(cache), lambda got: not got.ok)
            named = refused_group(m, cache)
        except LgoptError as e:  # a grouping the cache cannot say (an op TPU-MLIR fuses across the cut)
            rule, m, named = edge_cast_order(plan)[0], Measurement("export_refused", None, error=str(e)), None
        self.history.append(_Trial(move, float(plan.cost["cycles"]), m.total_cycles if m.ok else None,
                                   m.status if m.ok or not m.error else f"{m.status}: {m.error[:120]}", rule, named))
        if self.progress:
            self.progress(f"judge: {move}: predicted {plan.cost['cycles']:,.0f}, TPU-MLIR "
                          + (f"{m.total_cycles:,}" if m.ok else "refused"))
        return m, rule

    def tell(self, inc: Best) -> None:
        """The CLI writes each measured improvement at once: an interrupted search keeps its best."""
        if self.incumbent is not None:
            self.incumbent(replace(inc[2], strategy=self.strategy, solver={
                **inc[2].solver, "edge_casts": inc[3], "judge": {
                    "source": SOURCE, "measured_cycles": inc[0], "compiles": self.judge.compiles,
                    "stopped": "running"}}))


def judged_search(net: Network, onet: Network, chip: Chip, st: SearchSettings, judge: Judge, reference: str,
                  base_groups: Any, starts: Sequence[tuple[str, Plan]], js: JudgeSettings = JudgeSettings(),
                  progress: Progress | None = None, strategy: str = "judged",
                  measure_reference: Callable[[], Measurement] | None = None,
                  incumbent: Incumbent | None = None) -> Plan:
    """The fastest grouping TPU-MLIR measured among the start points and the local search from them.

    ``onet`` is ``net`` in TPU-MLIR's op order with ``st.runs`` its base groups; ``starts`` are labelled
    plans of ``onet`` (TPU-MLIR's own grouping read by lgopt, the wrapped strategy's plan).  Raises LgoptError
    when no start point compiles."""
    s = _Search(net, onet, chip, st, judge, reference, base_groups, js, progress, strategy, incumbent)
    ref_measured: Measurement | None = measure_reference() if measure_reference else None
    best = _best_start(s, starts)
    if best is None:
        best = _repaired_start(s, starts)
    if best is None:
        raise LgoptError("the TPU-MLIR judge compiled none of the start points: " +
                         "; ".join(f"{t.move}: {t.status}" for t in s.history))
    s.start_compiles = judge.compiles
    rounds = 0
    while judge.compiles - s.start_compiles < js.budget and not s.out_of_time():
        rounds += 1
        better = _round(s, best)
        if better is None:
            break
        best = better
    return _judged_plan(s, best, rounds, ref_measured)


def _best_start(s: _Search, starts: Sequence[tuple[str, Plan]]) -> Best | None:
    """The fastest start point TPU-MLIR compiles, as lgopt builds it (a refused one with the group TPU-MLIR's
    allocator named sliced finer: :func:`_named_repair`); None when it compiles none."""
    best: Best | None = None
    for label, p in starts:
        s.b.seed(p)
        g = grouping_of(p, s.b.index)
        plan = s.b.plan(g)
        if plan is None:
            continue
        m, rule = s.measure(plan, f"start: {label}")
        got = (m.total_cycles, g, plan, rule) if m.ok and m.total_cycles is not None else \
            _named_repair(s, f"start: {label}", g, plan)
        if got is not None and (best is None or got[0] < best[0]):
            best = got
            s.tell(best)
    return best


def _named_repair(s: _Search, label: str, grouping: Grouping, plan: Plan) -> Best | None:
    """``grouping``, just refused by TPU-MLIR's allocator, with the group it named (:func:`refused_group`) made
    smaller: the best predicted of it one to three H slices finer and it split where one tensor crosses; up to
    :data:`REPAIRS` times (it may name another then).  None when none compiles.

    lgopt packs tighter than TPU-MLIR's allocator, so the plans the cost model likes best are the ones it
    refuses (BM1688 INT8 2 cores: the search free of the cautions on 4 of 11 models, each naming one group, on
    MobileNetV2 the whole network at one slice); changing that group alone keeps the rest of the plan."""
    for k in range(1, REPAIRS + 1):
        named = s.history[-1].named  # of the refusal just measured
        if named is None or s.out_of_time():
            return None
        ops = cut_of(plan.groups[named], s.b.index).ops
        at = next((i for i, c in enumerate(grouping) if c.ops == ops), None)
        tries = [] if at is None else [(p.cost["cycles"], what, g, p) for what, g in _smaller(s.b, grouping, at)
                                       if (p := s.b.plan(g)) is not None]
        if not tries:
            return None
        _, what, grouping, plan = min(tries, key=lambda t: (t[0], t[1]))
        m, rule = s.measure(plan, f"{label}, refused: {what} ({k})")
        if m.ok and m.total_cycles is not None:
            return m.total_cycles, grouping, plan, rule
    return None


def _smaller(b: _Builder, grouping: Grouping, at: int) -> list[tuple[str, Grouping]]:
    """``grouping`` with its group ``at`` at one to three H slices more (the fewest lgopt places; its N slices and
    Casts kept), or split in two where one tensor crosses."""
    c, idx = grouping[at], b.index
    span = _span(c, idx)
    out = []
    finer = next((f for f in (Cut(c.ops, c.n, h, c.f32) for h in range(c.h + 1, c.h + 4)) if b.group(f) is not None),
                 None)
    if finer is not None:
        out.append((f"{span} h {c.h}->{finer.h}", grouping[:at] + (finer,) + grouping[at + 1:]))
    for k in _one_tensor_cuts(b.onet, c.ops):
        left, right = b.fit(c.ops[:k]), b.fit(c.ops[k:])
        if left is not None and right is not None:
            out.append((f"split {span} at {idx[c.ops[k]]}", grouping[:at] + (left, right) + grouping[at + 1:]))
    return out


def _repaired_start(s: _Search, starts: Sequence[tuple[str, Plan]]) -> Best | None:
    """The first start point that compiles with one H slice more per group, up to :data:`REPAIRS` more
    (TPU-MLIR's allocator is tighter than lgopt's); None when none does."""
    for label, p in starts:
        g = grouping_of(p, s.b.index)
        for k in range(1, REPAIRS + 1):
            g = tuple(c for c in (s.b.fit(c.ops, c.h + 1) for c in g) if c is not None)
            plan = s.b.plan(g)
            if plan is None or s.out_of_time():
                break
            m, rule = s.measure(plan, f"start: {label}, every group one H slice more ({k})")
            if m.ok and m.total_cycles is not None:
                best = (m.total_cycles, g, plan, rule)
                s.tell(best)
                return best
    return None


def _round(s: _Search, best: Best) -> Best | None:
    """One round of local search from ``best``: its neighbours that the cost model does not rank much
    worse are measured in :func:`_interleave` order until one is faster (and at least ``per_round`` of
    them); the fastest becomes the incumbent, the round's other gains are tried on top of it.  None when
    none was measured faster."""
    cycles, grouping, plan, _rule = best
    ranked = []
    for label, g in neighbours(s.b, grouping, s.runs):
        cand = s.b.plan(g)
        if cand is not None and cand.cost["cycles"] <= plan.cost["cycles"] * (1 + s.js.worse_than):
            ranked.append((float(cand.cost["cycles"]), label, g, cand))
    ranked = _interleave(ranked)
    gains: list[tuple[int, str, Grouping, Plan, str]] = []
    for k, (_, label, g, p) in enumerate(ranked):  # down the ranking until a gain, at least per_round of it
        if s.spent() or (gains and k >= s.js.per_round):
            break
        m, r = s.measure(p, label)
        if m.ok and m.total_cycles is not None and m.total_cycles < cycles:
            gains.append((m.total_cycles, label, g, p, r))
    if not gains:
        return None
    gains.sort(key=lambda x: (x[0], x[1]))
    best = (gains[0][0], gains[0][2], gains[0][3], gains[0][4])
    s.tell(best)
    return _stack_gains(s, best, grouping, gains[1:])


def _stack_gains(s: _Search, best: Best, base: Grouping, others: list[tuple[int, str, Grouping, Plan, str]]
                 ) -> Best:
    """The round's other gains (edits of ``base``) applied on top of ``best`` where they touch other groups,
    each kept when measured faster still."""
    for _, label, g, _p, _r in others:
        if s.spent():
            break
        merged = _combine(best[1], base, g, s.b.index)
        if merged is None:
            continue
        mp = s.b.plan(merged)
        if mp is None:
            continue
        m, r2 = s.measure(mp, f"{label} (with the round's better moves)")
        if m.ok and m.total_cycles is not None and m.total_cycles < best[0]:
            best = (m.total_cycles, merged, mp, r2)
            s.tell(best)
    return best


def _judged_plan(s: _Search, best: Best, rounds: int, ref_measured: Measurement | None) -> Plan:
    """The incumbent's plan, with the measurements (``solver["judge"]``): every trial, why the search
    stopped, and whether TPU-MLIR's own grouping measured faster."""
    cycles, grouping, plan, rule = best
    trials = [{"move": t.move, "predicted": round(t.predicted), "measured": t.measured, "status": t.status,
               "edge_casts": t.edge_casts} for t in s.history]
    info = {"source": SOURCE, "measured_cycles": cycles, "edge_casts": rule, "compiles": s.judge.compiles,
            "rounds": rounds, "seconds": round(time.perf_counter() - s.t0, 1),
            "reference_measured_cycles": ref_measured.total_cycles if ref_measured and ref_measured.ok else None,
            "stopped": ("budget" if s.judge.compiles - s.start_compiles >= s.js.budget else
                        "time limit" if s.out_of_time() else "no neighbour measured faster"),
            "trials": trials}
    if ref_measured is not None and ref_measured.ok and ref_measured.total_cycles is not None \
            and ref_measured.total_cycles < cycles:
        info["reference_faster"] = (f"TPU-MLIR's own grouping measured {ref_measured.total_cycles:,} cycles, "
                                    f"faster than any grouping lgopt could build ({cycles:,}): deploy the reference")
    return replace(plan, strategy=s.strategy, solver={**plan.solver, "judge": info, "edge_casts": rule})


def _kind(label: str) -> str:
    """A move's kind: slice counts ('[a-b] h 2->3' -> 'h'), or its first word (split, merge, grow, ...)."""
    words = label.split()
    return words[1] if label.startswith("[") else words[0]


def _interleave(ranked: list[tuple[float, str, Grouping, Plan]]) -> list[tuple[float, str, Grouping, Plan]]:
    """Best predicted first within each kind of move, the kinds taken in turn (each kind's best first).

    The cost model's error is about the size of the gains it ranks, and it errs the same way for moves of a
    kind (it overrates merging weight-bound groups, for one), so a budget spent down one ranking is spent
    on one kind; taking the kinds in turn lets each kind's best candidate be measured."""
    by_kind: dict[str, list[tuple[float, str, Grouping, Plan]]] = {}
    for r in sorted(ranked, key=lambda r: (r[0], r[1])):
        by_kind.setdefault(_kind(r[1]), []).append(r)
    queues = sorted(by_kind.values(), key=lambda q: (q[0][0], q[0][1]))
    out: list[tuple[float, str, Grouping, Plan]] = []
    for k in range(max((len(q) for q in queues), default=0)):
        out.extend(q[k] for q in queues if k < len(q))
    return out


def _combine(best: Grouping, base: Grouping, other: Grouping, index: Mapping[str, int]) -> Grouping | None:
    """``other``'s edit of ``base`` applied to ``best`` (``best`` is another edit of ``base``), when the two
    edits change disjoint groups; None otherwise."""
    bset, oset, baseset = set(best), set(other), set(base)
    removed_b, removed_o = baseset - bset, baseset - oset
    if removed_b & removed_o:
        return None
    ops_b = {o for c in removed_b | (bset - baseset) for o in c.ops}
    ops_o = {o for c in removed_o | (oset - baseset) for o in c.ops}
    if ops_b & ops_o:
        return None
    kept = [c for c in best if c not in removed_o] + [c for c in other if c not in baseset]
    return tuple(sorted(kept, key=lambda c: index[c.ops[0]]))

"""Weight load rows of an unsliced group, decided together with LMEM offsets by CP-SAT.

Why this matters: an unsliced group runs its table once, and every row costs
``max(TIU, GDMA)``.  The seed's rule loads a weight while the previous weighted
op computes.  Late layers of a CNN have the big weights (ResNet's 512-channel
3x3 convolutions) and little compute, early layers the opposite, so under that
rule GDMA stalls the late rows while it idles in the early ones.  Loading a
weight earlier hides its DMA under more compute but keeps it in LMEM longer;
whether it fits depends on where every other buffer sits.  Load rows and
offsets are therefore one decision, and this module states it as one model.

The space: a weight whose op runs in row ``u`` loads in any row ``r < u``
(stage 1, same slice; it lives ``r..u``) or in the pipeline fill before the
first row (stage 0 of the last row; it lives ``T-1`` and ``0..u``; pure DMA),
the latter when ``u <= T - 2``.  Everything else (rows, activation transfers,
sizes) is the table of :mod:`lgopt.group.timestep`.  Sliced groups keep their
weights resident and loaded before the loop; they have nothing to choose here.

The cost of a choice is exactly :func:`lgopt.cost.pipeline.group_cost` of the table it
gives: weights add their GDMA cycles to the cell of the row they load in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from ortools.sat.python import cp_model

from lgopt.cost.cycles import weight_dma_cycles
from lgopt.cost.pipeline import PipelineCells, group_cost, pipeline_cells
from lgopt.group.alloc import exact_pack, multi_start_allocate
from lgopt.group.solver import integral_bound, make_solver, solve_interruptibly
from lgopt.hw.chip import Chip
from lgopt.hw.layout import cdiv
from lgopt.model.network import Network
from lgopt.model.plan import GroupPlan
from lgopt.strategies.cpsat.bounds import fluid_bound
from lgopt.strategies.cpsat.common import objective_value
from lgopt.strategies.cpsat.group_model import GroupVars, add_group
from lgopt.strategies.cpsat.loadtable import (
    Load,
    cell_of,
    chosen_weights,
    current_loads,
    with_loads,
    without_weight_loads,
)

INFEASIBLE = 1 << 62  # the bound of a table no load choice can pack


# --- what every load choice of a table shares, and the bounds on it -------------------------------

@dataclass(frozen=True)
class WeightLoad:
    name: str
    use: int  # the row its op runs in
    dma: int  # GDMA cycles of its load
    size: int  # bytes per lane, aligned


@dataclass(frozen=True)
class LoadInstance:
    """What every load choice of one unsliced table shares: the numbers bounds and heuristics read."""

    rows: int
    base: PipelineCells  # the table without its in-table weight loads
    live: tuple[int, ...]  # bytes per lane every other buffer holds, per row (aligned)
    weights: tuple[WeightLoad, ...]
    capacity: int  # bytes per lane

    def cycles(self, loads: Mapping[str, Load]) -> int:
        """The table's cycles with every weight loading where ``loads`` says: ``group_cost`` without
        rebuilding the table (each weight adds its DMA to the cell of its load)."""
        cells = dict(self.base.cells)
        for w in self.weights:
            k = cell_of(loads[w.name])
            t, d = cells.get(k, (0, 0))
            cells[k] = (t, d + w.dma)
        return self.base.preload + sum(max(t, d) for t, d in cells.values())

    def held(self) -> list[int]:
        """Bytes per lane every load choice holds in each row: the other buffers, and each weight in the
        row of its use."""
        out = list(self.live)
        for w in self.weights:
            out[w.use] += w.size
        return out

    def fluid(self) -> int:
        """:func:`fluid_bound` of this table."""
        return fluid_bound(self.base.cycles(), self.slack(), [(w.use, w.dma) for w in self.weights])

    def slack(self) -> list[int]:
        """TIU cycles of each row not already covered by GDMA (negative: GDMA already leads)."""
        out = [0] * self.rows
        for (i, r), (t, d) in self.base.cells.items():
            if i == 0:
                out[r] = t - d
        return out


def load_instance(chip: Chip, net: Network, g: GroupPlan, capacity: int | None = None) -> LoadInstance:
    use = chosen_weights(g)
    T = len(g.rows)
    base = without_weight_loads(g)
    live = [0] * T
    aligned = {b.id: cdiv(b.size, chip.align_bytes) * chip.align_bytes for b in g.buffers}
    weights = []
    for b in g.buffers:
        if b.kind == "weight" and b.name in use:
            weights.append(WeightLoad(b.name, use[b.name], weight_dma_cycles(chip, net.op(b.name)),
                                      aligned[b.id]))
        else:
            for r in b.rows(T):
                live[r] += aligned[b.id]
    return LoadInstance(T, pipeline_cells(chip, net, base), tuple(live), tuple(weights),
                        capacity if capacity is not None else chip.lmem_bytes)


def table_bound(chip: Chip, net: Network, g: GroupPlan, objective: str = "cycles") -> int:
    """The fluid bound of one scheduled unsliced group (traffic does not depend on load rows)."""
    if objective != "cycles":
        return int(group_cost(chip, net, g)["traffic_bytes"])
    return load_instance(chip, net, g).fluid()


def lp_bound(inst: LoadInstance) -> int | None:
    """The LP relaxation of the per-row model (with :func:`exposure_cut`); None when it is infeasible.

    Far stronger than the fluid bound where LMEM binds (it keeps the per-row
    capacity and charges each big weight its excess), and cheap (GLOP, about 15
    ms on ResNet-50's 71-op group): it prunes candidates the master would
    otherwise have to evaluate exactly.  None means no load choice fits even
    fractionally, so no packing exists.
    """
    from ortools.linear_solver import pywraplp

    T = inst.rows
    inf = pywraplp.Solver.infinity()
    solver = pywraplp.Solver.CreateSolver("GLOP")
    unit = 1024  # memory rows in KiB keep the LP well scaled
    room = [(inst.capacity - h) / unit for h in inst.held()]
    if min(room) < 0:
        return None
    mem = [solver.Constraint(-inf, room[r]) for r in range(T)]
    # cumulative form (sparse): y[w][q] = share of w loaded by the end of row q, y[w][-1] = its fill share;
    # besides the row of its use (held), w occupies row q with y[w][q] (q < use) and the last row with the fill
    loaded: dict[tuple[int, int], list[tuple[int, object, object]]] = {}  # cell -> (dma, y_now, y_before)
    for w in inst.weights:
        fill = solver.NumVar(0.0, 1.0 if w.use <= T - 2 else 0.0, "")
        if w.use == 0:
            fill.SetLb(1.0)
        prev = fill
        if w.use < T - 1:
            mem[T - 1].SetCoefficient(fill, w.size / unit)
        loaded.setdefault(cell_of((T - 1, 0)), []).append((w.dma, fill, None))
        for q in range(w.use):
            y = solver.NumVar(1.0 if q == w.use - 1 else 0.0, 1.0, "")
            mono = solver.Constraint(0.0, inf)  # y[q] >= y[q-1]: loads are not undone
            mono.SetCoefficient(y, 1.0)
            mono.SetCoefficient(prev, -1.0)
            mem[q].SetCoefficient(y, w.size / unit)
            loaded.setdefault(cell_of((q, 1)), []).append((w.dma, y, prev))
            prev = y
    objective = solver.Objective()
    const = inst.base.preload + sum(max(t, d) for k, (t, d) in inst.base.cells.items() if k not in loaded)
    for k, loads in sorted(loaded.items()):
        t, d = inst.base.cells.get(k, (0, 0))
        z = solver.NumVar(float(max(t, d)), inf, "")
        objective.SetCoefficient(z, 1.0)
        cuts = [(solver.Constraint(d, inf), 0)]  # z - sum c x >= d
        if t > d:  # z - sum (c - slack)+ x >= t: the exposure cut
            cuts.append((solver.Constraint(t, inf), t - d))
        for ct, slack in cuts:
            ct.SetCoefficient(z, 1.0)
            for c, y, before in loads:
                e = max(0, c - slack)
                if e:  # x = y - before
                    ct.SetCoefficient(y, ct.GetCoefficient(y) - e)
                    if before is not None:
                        ct.SetCoefficient(before, ct.GetCoefficient(before) + e)
    objective.SetMinimization()
    status = solver.Solve()
    if status == pywraplp.Solver.INFEASIBLE:
        return None
    if status != pywraplp.Solver.OPTIMAL:
        return inst.base.cycles()  # no LP answer: the table without weights is still a bound
    value = objective.Value() + const
    # every choice costs whole cycles, so the LP value rounds up; the margin covers GLOP's tolerances
    return max(inst.base.cycles(), math.ceil(value - 1e-6 * abs(value) - 1e-3))


# --- a constructive heuristic ---------------------------------------------------------------------

def greedy_loads(chip: Chip, net: Network, g: GroupPlan, capacity: int | None = None, order: str = "dma",
                 inst: LoadInstance | None = None) -> dict[str, Load]:
    """A constructive choice of load rows: hide each weight's DMA under spare compute, latest first.

    Weights biggest DMA first (``order="dma"``: the ones that hurt most when
    they do not hide get the spare compute), or in order of use (``"use"``);
    each goes to the latest row whose spare TIU cycles cover its DMA, or else to
    the row where it adds the fewest cycles, among rows where the bytes live
    from there to its use fit in ``capacity``; the fill when nothing hides it.
    Latest, because a shorter life leaves LMEM to the others.
    The greedy allocator may still fail on the result (fragmentation): callers
    retry with less capacity.  ``inst``: ``g``'s :func:`load_instance`, when the caller has it.
    """
    cap = capacity if capacity is not None else chip.lmem_bytes
    inst = load_instance(chip, net, g, cap) if inst is None else replace(inst, capacity=cap)
    if not inst.weights:
        return {}
    T, cap = inst.rows, inst.capacity
    spare = inst.slack()
    live = inst.held()
    use = {w.name: w.use for w in inst.weights}
    size = {w.name: w.size for w in inst.weights}
    loads: dict[str, Load] = {}
    dma = {w.name: w.dma for w in inst.weights}
    key = (lambda kv: (kv[1], kv[0])) if order == "use" else (lambda kv: (-dma[kv[0]], kv[1], kv[0]))
    for name, u in sorted(use.items(), key=key):
        c = dma[name]
        s = size[name]
        best: tuple[int, int] | None = None  # (added cycles, -row)
        room = cap - live[u] + s
        r = u - 1
        while r >= 0:
            room = min(room, cap - live[r])
            if room < s:
                break
            added = max(0, c - max(0, spare[r]))
            if best is None or added < best[0]:
                best = (added, -r)
                if added == 0:
                    break
            r -= 1
        fill_ok = u <= T - 2 and all(live[x] + s <= cap for x in {T - 1, *range(u)})
        if u == 0 or (best is None or best[0] >= c) and fill_ok:  # the fill costs its DMA, no more
            loads[name] = (T - 1, 0)
            for x in {T - 1, *range(u)}:
                live[x] += s
            continue
        row = -best[1] if best is not None else u - 1
        loads[name] = (row, 1)
        spare[row] -= c
        for x in range(row, u):
            live[x] += s
    return loads


# --- solving one group -----------------------------------------------------------------------------

@dataclass(frozen=True)
class LoadPlan:
    """The outcome for one unsliced table: its best load rows and offsets, and a bound."""

    status: str  # optimal | feasible | infeasible | unknown
    value: int | None  # objective of the placed table (None when nothing was found)
    bound: int  # no load choice and packing of this table does better
    loads: Mapping[str, Load] | None = None
    offsets: Mapping[int, int] | None = None  # bytes, by buffer id
    solved: bool = False  # whether CP-SAT ran (False: a heuristic table met the bound)


def _hint_loads(m: cp_model.CpModel, gv: GroupVars, loads: Mapping[str, Load]) -> None:
    for name, opts in gv.loads.items():
        for x, ld in opts:
            m.add_hint(x, loads.get(name) == ld)


def _pack_table(net: Network, chip: Chip, g: GroupPlan, bank_rule: str, time_limit: float, seed: int,
                deadline: float | None = None) -> Mapping[int, int] | None:
    """Offsets for a table whose lifetimes are fixed: the greedy allocator, then the exact packer."""
    alloc = multi_start_allocate(net, chip, g, bank_rule)
    if alloc is not None:
        return alloc.offsets
    res = exact_pack(net, chip, g, bank_rule, time_limit, seed, deadline=deadline)
    return res if isinstance(res, dict) else None


def solve_loads(net: Network, chip: Chip, g: GroupPlan, heuristics: Sequence[GroupPlan] = (),
                objective: str = "cycles", bank_rule: str = "soft", time_limit: float = 2.0, seed: int = 0,
                upper: int | None = None, solve: bool = True, deadline: float | None = None) -> LoadPlan:
    """Best load rows and offsets for the unsliced table ``g``, with a bound.

    1. Candidate tables: ``g``, the caller's ``heuristics`` (e.g. the seed's rule
       looking further ahead) and :func:`greedy_loads` at a few capacities; in
       value order, the first one the greedy allocator places is the incumbent.
       If it meets the fluid bound, that is the answer.
    2. The LP bound (:func:`lp_bound`): cheap, and often enough to show that the
       incumbent is optimal or that nothing here beats ``upper``.
    3. CP-SAT chooses load rows under "the bytes live in each row fit in a
       lane", a relaxation of the packing: its bound is a bound of the group,
       and its table, packed, usually meets it.  If that table does not pack,
       the relaxation is solved once more with a sixteenth less room (a
       heuristic step: the bound stays the first one).  If nothing is placed
       yet, the best heuristic table gets one exact packing.
    ``upper``: only a plan cheaper than this interests the caller; once the bound
    reaches it, nothing more is done.  ``solve=False`` stops after step 2 (no
    CP-SAT): a quick upper value and the LP bound.  ``time_limit`` is CP-SAT
    deterministic time per solve, so the same input gives the same answer
    unless the wall-clock ``deadline`` (``time.perf_counter()``) cuts a solve.
    """
    inst = load_instance(chip, net, g)
    bound = inst.fluid() if objective == "cycles" else table_bound(chip, net, g, objective)
    if upper is not None and bound >= upper:
        return LoadPlan("unknown", None, bound)
    ranked = _ranked_tables(chip, net, g, heuristics, objective, inst)
    best = _first_placed(net, chip, ranked, bank_rule)

    def result(solved: bool) -> LoadPlan:
        if best is None:
            return LoadPlan("unknown", None, bound, solved=solved)
        return LoadPlan("optimal" if best[0] <= bound else "feasible", best[0], min(bound, best[0]), best[1],
                        best[2], solved)

    def settled() -> bool:
        return best is not None and best[0] <= bound or upper is not None and bound >= upper

    if settled() or objective != "cycles":
        return result(False)
    lp = lp_bound(inst)
    if lp is None:  # not even a fractional choice fits: neither does any packing
        return LoadPlan("infeasible", None, INFEASIBLE)
    bound = max(bound, lp)
    if settled() or not solve:
        return result(False)
    relaxed = _solve_relaxation(net, chip, g, objective, bank_rule, time_limit, seed, deadline, best)
    if relaxed is None:
        return LoadPlan("infeasible", None, INFEASIBLE, solved=True)
    bound, best = max(bound, relaxed[0]), relaxed[1]
    if best is None and ranked:  # the best table the greedy allocator could not place: one exact attempt
        v, _, h = ranked[0]
        if v < INFEASIBLE:
            offs = _pack_table(net, chip, h, bank_rule, time_limit, seed, deadline)
            if offs is not None:
                best = (v, current_loads(h), offs)
    return result(True)


Incumbent = tuple[int, Mapping[str, Load], Mapping[int, int]]  # (value, loads, offsets)


def _ranked_tables(chip: Chip, net: Network, g: GroupPlan, heuristics: Sequence[GroupPlan], objective: str,
                   inst: LoadInstance) -> list[tuple[int, tuple[tuple[str, Load], ...], GroupPlan]]:
    """Step 1's candidate tables, distinct by load choice, cheapest first."""
    tables = {tuple(sorted(current_loads(h).items())): h for h in (g, *heuristics)}
    if objective == "cycles":
        for order in ("dma", "use"):
            for sixteenths in (16, 15, 14, 13, 12):
                loads = greedy_loads(chip, net, g, chip.lmem_bytes * sixteenths // 16, order, inst)
                tables.setdefault(tuple(sorted(loads.items())), with_loads(g, loads))
    else:  # load rows do not change traffic, only what fits: the latest loads leave the most room
        loads = {name: (u - 1, 1) if u >= 1 else (len(g.rows) - 1, 0) for name, u in chosen_weights(g).items()}
        tables.setdefault(tuple(sorted(loads.items())), with_loads(g, loads))
    return sorted((inst.cycles(dict(k)) if objective == "cycles"
                   else objective_value(group_cost(chip, net, h), objective), k, h) for k, h in tables.items())


def _first_placed(net: Network, chip: Chip, ranked: Sequence[tuple[int, Any, GroupPlan]], bank_rule: str
                  ) -> Incumbent | None:
    """The cheapest table the greedy allocator places: the incumbent."""
    for v, _, h in ranked:
        alloc = multi_start_allocate(net, chip, h, bank_rule)
        if alloc is not None:
            return v, current_loads(h), alloc.offsets
    return None


def _solve_relaxation(net: Network, chip: Chip, g: GroupPlan, objective: str, bank_rule: str, time_limit: float,
                      seed: int, deadline: float | None, best: Incumbent | None
                      ) -> tuple[int, Incumbent | None] | None:
    """Step 3: (bound, incumbent) after CP-SAT over the row-capacity relaxation, packed exactly; None when
    the relaxation is infeasible (so is every packing).  The bound is 0 when CP-SAT found nothing."""
    bound = 0
    capacity = chip.lmem_bytes
    for attempt in range(2):
        m = cp_model.CpModel()
        gv = add_group(m, net, chip, g, objective, exact=False, capacity=capacity)
        if not gv.ok:
            return None
        m.minimize(gv.cost)
        if best is not None:
            _hint_loads(m, gv, best[1])
        # presolve spends most of its time on the dense per-row capacity sums and removes almost nothing
        solver = make_solver(workers=1, seed=seed, deterministic=time_limit, deadline=deadline, presolve=False)
        res = solve_interruptibly(solver, m)
        if res == cp_model.INFEASIBLE and attempt == 0:
            return None
        if res not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        if attempt == 0:
            bound = integral_bound(solver)
        loads = {name: next(ld for x, ld in opts if solver.value(x)) for name, opts in gv.loads.items()}
        table = with_loads(g, loads)
        value = objective_value(group_cost(chip, net, table), objective)
        if best is not None and value >= best[0]:
            break  # nothing better than the incumbent
        offs = _pack_table(net, chip, table, bank_rule, time_limit, seed, deadline)
        if offs is not None:
            best = (value, loads, offs)
            break
        capacity = capacity * 15 // 16 // chip.align_bytes * chip.align_bytes
    return bound, best

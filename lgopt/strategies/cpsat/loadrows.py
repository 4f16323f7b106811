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

The cost of a choice is exactly :func:`lgopt.group.cost.group_cost` of the table it
gives: weights add their GDMA cycles to the cell of the row they load in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from ortools.sat.python import cp_model

from lgopt.group.alloc import conflict_pairs, exact_pack, multi_start_allocate, row_users
from lgopt.group.cost import PipelineCells, gdma_cycles, group_cost, pipeline_cells, weight_gmem_bytes
from lgopt.group.pack import wall_seconds
from lgopt.hw.chip import Chip
from lgopt.hw.layout import cdiv
from lgopt.model.network import Network
from lgopt.model.plan import GroupPlan, Row, Transfer

Load = tuple[int, int]  # (row, stage)
FILL_ITERATION = -1
INFEASIBLE = 1 << 62  # the bound of a table no load choice can pack


# --- the table side --------------------------------------------------------------------------------

def chosen_weights(g: GroupPlan) -> dict[str, int]:
    """Ops whose weights load inside the table (not before the loop), with the row each op runs in."""
    if g.num_slices != 1:
        return {}
    op_row = {name: r for r, row in enumerate(g.rows) for name in row.ops}
    return {tr.name: op_row[tr.name] for row in g.rows for tr in row.loads if tr.kind == "weight"}


def load_options(use_row: int, num_rows: int) -> list[Load]:
    """Every legal load of a weight used in ``use_row``: stage 1 in an earlier row, or in the fill."""
    opts = [(r, 1) for r in range(use_row)]
    if use_row <= num_rows - 2:
        opts.append((num_rows - 1, 0))
    return opts


def current_loads(g: GroupPlan) -> dict[str, Load]:
    return {tr.name: (r, tr.stage) for r, row in enumerate(g.rows) for tr in row.loads if tr.kind == "weight"}


def with_loads(g: GroupPlan, loads: Mapping[str, Load]) -> GroupPlan:
    """The same group with the named weights loading where ``loads`` says (lifetimes follow)."""
    use = chosen_weights(g)
    rows = []
    for r, row in enumerate(g.rows):
        keep = tuple(tr for tr in row.loads if not (tr.kind == "weight" and tr.name in loads))
        add = tuple(Transfer(name, "weight", stage) for name, (lr, stage) in sorted(loads.items()) if lr == r)
        rows.append(Row(row.ops, keep + add, row.stores))
    bufs = tuple(replace(b, start=loads[b.name][0], end=use[b.name]) if b.kind == "weight" and b.name in loads
                 else b for b in g.buffers)
    return replace(g, rows=tuple(rows), buffers=bufs)


def without_weight_loads(g: GroupPlan) -> GroupPlan:
    """The table with its in-table weight loads removed: what every load choice shares."""
    rows = tuple(Row(r.ops, tuple(t for t in r.loads if t.kind != "weight"), r.stores) for r in g.rows)
    return replace(g, rows=rows)


def _cell_of(load: Load) -> tuple[int, int]:
    row, stage = load
    return (FILL_ITERATION, row) if stage == 0 else (0, row)


# --- a bound no load choice can beat -------------------------------------------------------------

def fluid_bound(base_cycles: int, slack: Sequence[int], weights: Sequence[tuple[int, int]]) -> int:
    """Cycles of the best load choice if DMA could be split freely and LMEM were unlimited.

    ``base_cycles`` is the table without weights; ``slack[r]`` the TIU cycles of
    row ``r`` not already covered by GDMA; ``weights`` are (use row, DMA cycles).
    A weight's DMA hides only under slack of rows before its use; what does not
    hide adds to the total one for one.  The most that can hide is a max-flow
    whose neighbourhoods are nested prefixes of the rows, so its min cut is a
    prefix: ``min_k (slack of rows < k + DMA of weights used after k)``.
    """
    total = sum(c for _, c in weights)
    if not weights:
        return base_cycles
    prefix = [0]
    for s in slack:
        prefix.append(prefix[-1] + max(0, s))
    due = sorted(weights)
    best = total
    j = 0
    later = total  # DMA of weights used after row k
    for k in range(len(slack) + 1):
        while j < len(due) and due[j][0] <= k:
            later -= due[j][1]
            j += 1
        best = min(best, prefix[k] + later)
    return base_cycles + total - best


def whole_load_bound(tiu: Sequence[int], weights: Sequence[tuple[int, int]]) -> int:
    """Cycles of the best load choice if every row could hide a whole weight, one weight per row.

    ``tiu[r]`` is the compute of row ``r`` (an upper bound on its spare cycles);
    ``weights`` are (use row, DMA cycles).  A weight loads in one row, so at
    best it hides under the largest compute before its use and the rest shows:
    ``sum tiu + sum (c - max tiu before use)+``.  Where the fluid bound lets a
    74k-cycle weight hide in slivers under four 18k-cycle rows, this one does
    not: it is the cheap form of :func:`exposure_cut`.
    """
    best_before = [0]
    for t in tiu:
        best_before.append(max(best_before[-1], t))
    return sum(tiu) + sum(max(0, c - best_before[u]) for u, c in weights)


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
            k = _cell_of(loads[w.name])
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
            weights.append(WeightLoad(b.name, use[b.name], gdma_cycles(chip, weight_gmem_bytes(net.op(b.name))),
                                      aligned[b.id]))
        else:
            for r in b.rows(T):
                live[r] += aligned[b.id]
    return LoadInstance(T, pipeline_cells(chip, net, base), tuple(live), tuple(weights),
                        capacity if capacity is not None else chip.lmem_bytes)


def lifetime(load: Load, use: int, num_rows: int) -> list[int]:
    """Rows a weight occupies LMEM: from its load row to its use; a fill load also holds the last row."""
    row, stage = load
    return [*range(0, use + 1), num_rows - 1] if stage == 0 else list(range(row, use + 1))


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
        loaded.setdefault(_cell_of((T - 1, 0)), []).append((w.dma, fill, None))
        for q in range(w.use):
            y = solver.NumVar(1.0 if q == w.use - 1 else 0.0, 1.0, "")
            mono = solver.Constraint(0.0, inf)  # y[q] >= y[q-1]: loads are not undone
            mono.SetCoefficient(y, 1.0)
            mono.SetCoefficient(prev, -1.0)
            mem[q].SetCoefficient(y, w.size / unit)
            loaded.setdefault(_cell_of((q, 1)), []).append((w.dma, y, prev))
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


# --- the CP-SAT model ------------------------------------------------------------------------------

def exposure_cut(slack: int, loads: Sequence[tuple[int, cp_model.IntVar]]) -> cp_model.LinearExprT:
    """``sum (c - slack)+ x``: DMA a cell cannot hide, whatever else loads with it (a valid cut).

    A cell costs ``max(t, d + sum c x)``; with ``slack = t - d >= 0`` that is at
    least ``t + sum (c - slack)+ x`` for 0/1 loads (none above the slack: ``t``;
    else drop all but one such load's slack).  The LP of the plain max lets a
    big weight split into slivers that each hide; this charges every sliver its
    own excess, which lifts ResNet-50/BM1684X's root bound from 860k to 943k
    cycles (optimum 957k) and lets CP-SAT prove it in seconds.
    """
    return sum(max(0, c - slack) * x for c, x in loads)


@dataclass
class GroupVars:
    """Handles into a model built by :func:`add_group`."""

    cost: cp_model.LinearExprT  # objective contribution (0 when the group is absent)
    offsets: dict[int, cp_model.IntVar]  # buffer id -> offset in alignment units
    loads: dict[str, list[tuple[cp_model.IntVar, Load]]]  # weight op -> (literal, load)
    ok: bool = True  # False when some buffer is larger than a lane


def add_bank_vars(m: cp_model.CpModel, off: cp_model.IntVar, size_u: int, cap_u: int, bank_u: int,
                  ) -> tuple[cp_model.IntVar, cp_model.IntVar]:
    """First and last bank a buffer touches."""
    n_banks = cdiv(cap_u, bank_u)
    first, last = m.new_int_var(0, n_banks, ""), m.new_int_var(0, n_banks, "")
    m.add_division_equality(first, off, bank_u)
    m.add_division_equality(last, off + size_u - 1, bank_u)
    return first, last


def add_disjoint_banks(m: cp_model.CpModel, a: tuple, b: tuple, enforce: Sequence[cp_model.IntVar]) -> None:
    """``a`` and ``b`` (first, last bank) share no bank whenever every literal of ``enforce`` holds."""
    below, above = m.new_bool_var(""), m.new_bool_var("")
    m.add(a[1] < b[0]).only_enforce_if(below)
    m.add(b[1] < a[0]).only_enforce_if(above)
    m.add_bool_or([below, above] + [x.Not() for x in enforce])


def add_group(m: cp_model.CpModel, net: Network, chip: Chip, g: GroupPlan, objective: str = "cycles",
              present: cp_model.IntVar | None = None, bank_rule: str = "off", exact: bool = True,
              capacity: int | None = None) -> GroupVars:
    """Offsets of every buffer of ``g`` and, when it is unsliced, each weight's load row.

    With ``present`` the group is optional (the monolithic optimiser): its
    rectangles, load literals and cost exist only when the literal holds.
    ``exact=False`` drops the offsets and keeps only "the bytes live in each row
    fit in ``capacity``" (default: a lane): a relaxation, so its optimum is a
    lower bound of the exact model, and far easier to solve.
    """
    align = chip.align_bytes
    cap_u = (capacity if capacity is not None else chip.lmem_bytes) // align
    T = len(g.rows)
    on = [present] if present is not None else []
    use = chosen_weights(g)
    base_g = without_weight_loads(g) if use else g
    size_u = {b.id: cdiv(b.size, align) for b in g.buffers}
    if any(s > cap_u for s in size_u.values()):
        m.add_bool_or([x.Not() for x in on]) if on else m.add_bool_or([])
        return GroupVars(0, {}, {}, ok=False)
    off = {b.id: m.new_int_var(0, cap_u - size_u[b.id], f"o{b.id}") for b in g.buffers} if exact else {}
    xs, ys = [], []

    def box(start, size, end, b, lit=None) -> None:
        if not exact:
            return
        lits = [x for x in (lit, present) if x is not None]
        if isinstance(start, int) and isinstance(size, int):
            x = (m.new_optional_fixed_size_interval_var(start, size, lits[0], "") if lits
                 else m.new_fixed_size_interval_var(start, size, ""))
        else:
            x = m.new_optional_interval_var(start, size, end, lits[0], "") if lits else m.new_interval_var(
                start, size, end, "")
        su = size_u[b.id]
        y = (m.new_optional_interval_var(off[b.id], su, off[b.id] + su, lits[0], "") if lits
             else m.new_interval_var(off[b.id], su, off[b.id] + su, ""))
        xs.append(x)
        ys.append(y)

    loads: dict[str, list[tuple[cp_model.IntVar, Load]]] = {}
    for b in g.buffers:
        if b.kind == "weight" and b.name in use:
            u = use[b.name]
            opts = load_options(u, T)
            lits = [m.new_bool_var(f"l{b.id}_{r}_{s}") for r, s in opts]
            m.add(sum(lits) == (present if present is not None else 1))
            loads[b.name] = list(zip(lits, opts))
            if not exact:  # the relaxation needs only the literals
                continue
            start = m.new_int_var(0, max(0, u - 1), f"s{b.id}")
            m.add(start == sum(r * x for x, (r, s) in zip(lits, opts) if s == 1))
            if present is None:
                box(start, m.new_int_var(1, u + 1, ""), u + 1, b)
            else:  # the time box's size must stay legal when the group is absent
                size = m.new_int_var(1, u + 1, "")
                m.add(size == u + 1 - start)
                box(start, size, u + 1, b)
            for x, (r, s) in zip(lits, opts):
                if s == 0:
                    box(T - 1, 1, T, b, x)
            continue
        if b.resident:
            spans = [(0, T)]
        elif b.start <= b.end:
            spans = [(b.start, b.end + 1)]
        else:
            spans = [(b.start, T), (0, b.end + 1)]
        for s, e in spans:
            box(s, e - s, e, b)
    if xs:
        m.add_no_overlap_2d(xs, ys)
    if loads:  # redundant, for the LP: the bytes live in each row fit in a lane
        live: list[list] = [[] for _ in range(T)]
        for b in g.buffers:
            if b.kind == "weight" and b.name in use:
                for x, (r0, st) in loads[b.name]:
                    rows = range(0, use[b.name] + 1) if st == 0 else range(r0, use[b.name] + 1)
                    for r in rows:
                        live[r].append(size_u[b.id] * x)
                    if st == 0:
                        live[T - 1].append(size_u[b.id] * x)
            else:
                for r in sorted(b.rows(T)):
                    live[r].append(size_u[b.id] * present if present is not None else size_u[b.id])
        for r in range(T):
            m.add(sum(live[r]) <= cap_u)

    if bank_rule == "hard" and exact:
        bank_u = max(1, chip.bank_bytes // align)
        banks = {b.id: add_bank_vars(m, off[b.id], size_u[b.id], cap_u, bank_u) for b in g.buffers}
        for p in conflict_pairs(net, base_g):
            a, c = sorted(p)
            add_disjoint_banks(m, banks[a], banks[c], on)
        if loads:
            by_name = {b.name: b.id for b in g.buffers if b.kind == "weight"}
            npu_rows = [npu for npu, _ in row_users(net, base_g)]
            for name, opts in loads.items():
                w = by_name[name]
                for x, (r, _) in opts:
                    for other in sorted(npu_rows[r] - {w}):
                        add_disjoint_banks(m, banks[w], banks[other], [x])

    # cost: exactly group_cost, with each weight's DMA in the cell of the row it loads in
    if objective != "cycles":
        value = int(group_cost(chip, net, g)["traffic_bytes"])
        return GroupVars(value * present if present is not None else value, off, loads)
    pc: PipelineCells = pipeline_cells(chip, net, base_g)
    extra: dict[tuple[int, int], list] = {}
    cell_loads: dict[tuple[int, int], list[tuple[int, cp_model.IntVar]]] = {}
    all_weights = 0
    for name, opts in loads.items():
        c = gdma_cycles(chip, weight_gmem_bytes(net.op(name)))
        all_weights += c
        for x, ld in opts:
            extra.setdefault(_cell_of(ld), []).append(c * x)
            cell_loads.setdefault(_cell_of(ld), []).append((c, x))
    const = pc.preload + sum(max(t, d) for k, (t, d) in pc.cells.items() if k not in extra)
    terms = []
    for k, added in sorted(extra.items()):
        t, d = pc.cells.get(k, (0, 0))
        if t == 0:
            terms.append(d * present if present is not None else d)
            terms.extend(added)
            continue
        z = m.new_int_var(0, t + d + all_weights, "")
        m.add(z >= (t * present if present is not None else t))
        m.add(z >= (d * present if present is not None else d) + sum(added))
        if t > d:  # the cut that makes the bound: see exposure_cut
            m.add(z >= (t * present if present is not None else t) + exposure_cut(t - d, cell_loads[k]))
        terms.append(z)
    cost = (const * present if present is not None else const) + sum(terms)
    return GroupVars(cost, off, loads)


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


def _value(chip: Chip, net: Network, g: GroupPlan, objective: str) -> int:
    c = group_cost(chip, net, g)
    return int(c["cycles"] if objective == "cycles" else c["traffic_bytes"])


def _solver(time_limit: float, seed: int, deadline: float | None = None) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = time_limit
    solver.parameters.max_time_in_seconds = wall_seconds(time_limit, deadline)
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    # presolve spends most of the time on the dense per-row capacity sums and removes almost nothing:
    # without it ResNet-50/BM1684X's 71-op table is solved to optimality in 0.7 s instead of 1.8 s
    solver.parameters.cp_model_presolve = False
    return solver


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
    tables = {tuple(sorted(current_loads(h).items())): h for h in (g, *heuristics)}
    if objective == "cycles":
        for order in ("dma", "use"):
            for sixteenths in (16, 15, 14, 13, 12):
                loads = greedy_loads(chip, net, g, chip.lmem_bytes * sixteenths // 16, order, inst)
                tables.setdefault(tuple(sorted(loads.items())), with_loads(g, loads))
    else:  # load rows do not change traffic, only what fits: the latest loads leave the most room
        loads = {name: (u - 1, 1) if u >= 1 else (len(g.rows) - 1, 0) for name, u in chosen_weights(g).items()}
        tables.setdefault(tuple(sorted(loads.items())), with_loads(g, loads))
    ranked = sorted((inst.cycles(dict(k)) if objective == "cycles" else _value(chip, net, h, objective), k, h)
                    for k, h in tables.items())
    best: tuple[int, Mapping[str, Load], Mapping[int, int]] | None = None
    for v, _, h in ranked:
        alloc = multi_start_allocate(net, chip, h, bank_rule)
        if alloc is not None:
            best = (v, current_loads(h), alloc.offsets)
            break

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
    capacity = chip.lmem_bytes
    for attempt in range(2):
        m = cp_model.CpModel()
        gv = add_group(m, net, chip, g, objective, exact=False, capacity=capacity)
        if not gv.ok:
            return LoadPlan("infeasible", None, INFEASIBLE, solved=True)
        m.minimize(gv.cost)
        if best is not None:
            _hint_loads(m, gv, best[1])
        solver = _solver(time_limit, seed, deadline)
        res = solver.solve(m)
        if res == cp_model.INFEASIBLE and attempt == 0:  # the relaxation is infeasible: so is every packing
            return LoadPlan("infeasible", None, INFEASIBLE, solved=True)
        if res not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        if attempt == 0:
            bound = max(bound, int(solver.best_objective_bound))
        loads = {name: next(ld for x, ld in opts if solver.value(x)) for name, opts in gv.loads.items()}
        table = with_loads(g, loads)
        value = _value(chip, net, table, objective)
        if best is not None and value >= best[0]:
            break  # nothing better than the incumbent
        offs = _pack_table(net, chip, table, bank_rule, time_limit, seed, deadline)
        if offs is not None:
            best = (value, loads, offs)
            break
        capacity = capacity * 15 // 16 // chip.align_bytes * chip.align_bytes
    if best is None and ranked:  # the best table the greedy allocator could not place: one exact attempt
        v, _, h = ranked[0]
        if v < INFEASIBLE:
            offs = _pack_table(net, chip, h, bank_rule, time_limit, seed, deadline)
            if offs is not None:
                best = (v, current_loads(h), offs)
    return result(True)

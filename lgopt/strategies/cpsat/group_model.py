"""One group as a CP-SAT sub-model: buffer offsets, weight load rows, bank rules and the group's cost.

The monolithic optimiser adds one per candidate (optional, under a presence literal); the load-row
solver adds one alone, relaxed to "the bytes live in each row fit".  Variables and constraints are
created in a fixed order, so the same input gives the same model and, with the same seed and worker
count, the same answer.  The cost it states is exactly :func:`lgopt.cost.pipeline.group_cost` of the
table the chosen loads give (tested against it for every choice).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ortools.sat.python import cp_model

from lgopt.cost.cycles import weight_dma_cycles
from lgopt.cost.pipeline import PipelineCells, group_cost, pipeline_cells
from lgopt.group.alloc import conflict_pairs, row_users
from lgopt.hw.chip import Chip
from lgopt.hw.layout import cdiv
from lgopt.model.network import Network
from lgopt.model.plan import GroupPlan
from lgopt.strategies.cpsat.loadtable import (
    Load,
    cell_of,
    chosen_weights,
    lifetime,
    load_options,
    without_weight_loads,
)

Lit = cp_model.IntVar


def exposure_cut(slack: int, loads: Sequence[tuple[int, cp_model.IntVar]]) -> cp_model.LinearExprT:
    """``sum (c - slack)+ x``: DMA a cell cannot hide, whatever else loads with it (a valid cut).

    A cell costs ``max(t, d + sum c x)``; with ``slack = t - d >= 0`` that is at
    least ``t + sum (c - slack)+ x`` for 0/1 loads (none above the slack: ``t``;
    else drop all but one such load's slack).  The LP of the plain max lets a
    big weight split into slivers that each hide; this charges every sliver its
    own excess (``docs/optimiser.md`` measures what it does to the bound).
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
                  name: str = "") -> tuple[cp_model.IntVar, cp_model.IntVar]:
    """First and last bank a buffer touches."""
    n_banks = cdiv(cap_u, bank_u)
    first, last = m.new_int_var(0, n_banks, f"{name}_bank0"), m.new_int_var(0, n_banks, f"{name}_bank1")
    m.add_division_equality(first, off, bank_u)
    m.add_division_equality(last, off + size_u - 1, bank_u)
    return first, last


def add_disjoint_banks(m: cp_model.CpModel, a: tuple[Any, Any], b: tuple[Any, Any],
                       enforce: Sequence[cp_model.IntVar]) -> None:
    """``a`` and ``b`` (first, last bank) share no bank whenever every literal of ``enforce`` holds."""
    below, above = m.new_bool_var("below"), m.new_bool_var("above")
    m.add(a[1] < b[0]).only_enforce_if(below)
    m.add(b[1] < a[0]).only_enforce_if(above)
    m.add_bool_or([below, above] + [x.Not() for x in enforce])


@dataclass
class _Builder:
    """The state shared by the phases of :func:`add_group`."""

    m: cp_model.CpModel
    g: GroupPlan
    present: Lit | None
    exact: bool
    size_u: dict[int, int]
    off: dict[int, cp_model.IntVar]
    use: dict[str, int]

    def scaled(self, c: int) -> Any:
        """``c`` when the group is mandatory, ``c * present`` when it is optional (an int or a linear
        expression: ``Any``, as OR-tools' stubs cannot add the two)."""
        return c * self.present if self.present is not None else c

    def box(self, start: Any, size: Any, end: Any, bid: int, lit: Lit | None = None) -> tuple[Any, Any] | None:
        """The (time, address) rectangle of buffer ``bid`` over ``start..end``, present under ``lit``."""
        if not self.exact:
            return None
        m = self.m
        lits = [x for x in (lit, self.present) if x is not None]
        tag = f"b{bid}"
        if isinstance(start, int) and isinstance(size, int):
            x = (m.new_optional_fixed_size_interval_var(start, size, lits[0], f"{tag}_t") if lits
                 else m.new_fixed_size_interval_var(start, size, f"{tag}_t"))
        else:
            x = m.new_optional_interval_var(start, size, end, lits[0], f"{tag}_t") if lits else m.new_interval_var(
                start, size, end, f"{tag}_t")
        su, o = self.size_u[bid], self.off[bid]
        y = (m.new_optional_interval_var(o, su, o + su, lits[0], f"{tag}_a") if lits
             else m.new_interval_var(o, su, o + su, f"{tag}_a"))
        return x, y


def _add_buffers(bd: _Builder) -> tuple[list[Any], list[Any], dict[str, list[tuple[Lit, Load]]]]:
    """Rectangles of every buffer and the load literals of each weight loaded inside the table."""
    m, g, T = bd.m, bd.g, len(bd.g.rows)
    xs: list[Any] = []
    ys: list[Any] = []

    def keep(r: tuple[Any, Any] | None) -> None:
        if r is not None:
            xs.append(r[0])
            ys.append(r[1])

    loads: dict[str, list[tuple[Lit, Load]]] = {}
    for b in g.buffers:
        if b.kind == "weight" and b.name in bd.use:
            u = bd.use[b.name]
            opts = load_options(u, T)
            lits = [m.new_bool_var(f"l{b.id}_{r}_{s}") for r, s in opts]
            m.add(sum(lits) == (bd.present if bd.present is not None else 1))
            loads[b.name] = list(zip(lits, opts))
            if not bd.exact:  # the relaxation needs only the literals
                continue
            start = m.new_int_var(0, max(0, u - 1), f"s{b.id}")
            m.add(start == sum(r * x for x, (r, s) in zip(lits, opts) if s == 1))
            if bd.present is None:
                keep(bd.box(start, m.new_int_var(1, u + 1, f"s{b.id}_len"), u + 1, b.id))
            else:  # the time box's size must stay legal when the group is absent
                size = m.new_int_var(1, u + 1, f"s{b.id}_len")
                m.add(size == u + 1 - start)
                keep(bd.box(start, size, u + 1, b.id))
            for x, (_, s) in zip(lits, opts):
                if s == 0:
                    keep(bd.box(T - 1, 1, T, b.id, x))
            continue
        for s, e in b.spans(T):
            keep(bd.box(s, e - s, e, b.id))
    return xs, ys, loads


def _add_row_capacity(bd: _Builder, loads: dict[str, list[tuple[Lit, Load]]], cap_u: int) -> None:
    """Redundant for the exact model, the whole of the relaxation: the bytes live in each row fit."""
    T = len(bd.g.rows)
    live: list[list[Any]] = [[] for _ in range(T)]
    for b in bd.g.buffers:
        if b.kind == "weight" and b.name in bd.use:
            for x, ld in loads[b.name]:
                for r in lifetime(ld, bd.use[b.name], T):
                    live[r].append(bd.size_u[b.id] * x)
        else:
            for r in sorted(b.rows(T)):
                live[r].append(bd.scaled(bd.size_u[b.id]))
    for r in range(T):
        bd.m.add(sum(live[r]) <= cap_u)


def _add_hard_banks(bd: _Builder, net: Network, chip: Chip, base_g: GroupPlan,
                    loads: dict[str, list[tuple[Lit, Load]]], cap_u: int) -> None:
    """An op's operands never share a bank (the hard bank rule), with each weight where it loads."""
    m, g = bd.m, bd.g
    on = [bd.present] if bd.present is not None else []
    bank_u = max(1, chip.bank_bytes // chip.align_bytes)
    banks = {b.id: add_bank_vars(m, bd.off[b.id], bd.size_u[b.id], cap_u, bank_u, f"b{b.id}") for b in g.buffers}
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


def _add_cycles(bd: _Builder, net: Network, chip: Chip, base_g: GroupPlan,
                loads: dict[str, list[tuple[Lit, Load]]]) -> cp_model.LinearExprT:
    """Exactly ``group_cost``'s cycles, with each weight's DMA in the cell of the row it loads in."""
    m = bd.m
    pc: PipelineCells = pipeline_cells(chip, net, base_g)
    extra: dict[tuple[int, int], list[Any]] = {}
    cell_loads: dict[tuple[int, int], list[tuple[int, Lit]]] = {}
    all_weights = 0
    for name, opts in loads.items():
        c = weight_dma_cycles(chip, net.op(name))
        all_weights += c
        for x, ld in opts:
            extra.setdefault(cell_of(ld), []).append(c * x)
            cell_loads.setdefault(cell_of(ld), []).append((c, x))
    const = pc.preload + sum(max(t, d) for k, (t, d) in pc.cells.items() if k not in extra)
    terms: list[Any] = []
    for k, added in sorted(extra.items()):
        t, d = pc.cells.get(k, (0, 0))
        if t == 0:
            terms.append(bd.scaled(d))
            terms.extend(added)
            continue
        z = m.new_int_var(0, t + d + all_weights, f"cell{k[0]}_{k[1]}")
        m.add(z >= bd.scaled(t))
        m.add(z >= bd.scaled(d) + sum(added))
        if t > d:  # the cut that makes the bound: see exposure_cut
            m.add(z >= bd.scaled(t) + exposure_cut(t - d, cell_loads[k]))
        terms.append(z)
    return bd.scaled(int(const)) + sum(terms)


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
    on = [present] if present is not None else []
    use = chosen_weights(g)
    base_g = without_weight_loads(g) if use else g
    size_u = {b.id: cdiv(b.size, align) for b in g.buffers}
    if any(s > cap_u for s in size_u.values()):
        m.add_bool_or([x.Not() for x in on]) if on else m.add_bool_or([])
        return GroupVars(0, {}, {}, ok=False)
    off = {b.id: m.new_int_var(0, cap_u - size_u[b.id], f"o{b.id}") for b in g.buffers} if exact else {}
    bd = _Builder(m, g, present, exact, size_u, off, use)
    xs, ys, loads = _add_buffers(bd)
    if xs:
        m.add_no_overlap_2d(xs, ys)
    if loads:
        _add_row_capacity(bd, loads, cap_u)
    if bank_rule == "hard" and exact:
        _add_hard_banks(bd, net, chip, base_g, loads, cap_u)
    if objective != "cycles":
        value = int(group_cost(chip, net, g)["traffic_bytes"])
        return GroupVars(bd.scaled(value), off, loads)
    return GroupVars(_add_cycles(bd, net, chip, base_g, loads), off, loads)

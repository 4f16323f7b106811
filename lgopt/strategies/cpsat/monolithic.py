"""The monolithic formulation (small networks): boundaries, slicings, load rows and offsets in one
CP-SAT model.

A Boolean per candidate (interval x slicing), every local op covered exactly once (by a candidate or
as a global layer), and for every candidate the offsets of its buffers (and, unsliced, its weights'
load rows) as variables of :func:`lgopt.strategies.cpsat.group_model.add_group`, present only when the
candidate is chosen.  Hinted with the greedy plan.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from lgopt.group.alloc import multi_start_allocate
from lgopt.group.build import place_chosen
from lgopt.group.handover import without_kept
from lgopt.group.solver import integral_bound, make_solver, solve_interruptibly
from lgopt.hw.chip import Chip
from lgopt.model.network import Network
from lgopt.model.plan import Plan, PlanStatus
from lgopt.strategies.cpsat.budget import Budget
from lgopt.strategies.cpsat.common import CpsatSettings, Key
from lgopt.strategies.cpsat.group_model import GroupVars, add_group
from lgopt.strategies.cpsat.loadtable import current_loads, with_loads
from lgopt.strategies.cpsat.master import add_handover_links
from lgopt.strategies.cpsat.result import result
from lgopt.strategies.cpsat.space import CandidateSpace, Slicing
from lgopt.strategies.settings import Progress, SearchSettings, exact_packing_allowed, packing


def monolithic(net: Network, chip: Chip, search: SearchSettings, st: CpsatSettings, base: Plan, budget: Budget,
                progress: Progress | None) -> Plan:
    space = CandidateSpace(net, chip, search, st.objective, st.handover, st.free_loads)
    local = [k for k, op in enumerate(net.ops) if op.local]
    gval = {k: space.global_value(k) for k in local}
    fixed = sum(space.global_value(k) for k, op in enumerate(net.ops) if not op.local)
    m = cp_model.CpModel()
    align = chip.align_bytes
    cands: list[tuple[Key, Slicing, cp_model.IntVar, GroupVars]] = []  # (interval, slicing, presence, variables)
    terms = []
    hint = {(g.ops[0], g.ops[-1], g.n_slices, g.h_slices, g.w_slices, g.c_slices) for g in base.groups}
    buffers = 0
    for iv in space.intervals():
        ops = space.names[iv[0]:iv[1] + 1]
        kin, kout = space.kept(*iv)
        pchip = space.inner_chip(kin + kout)
        if pchip is None:  # the handed-over tensors leave no room: no slicing
            continue
        for c in space.slicings(ops, kin, kout):  # handed-over tensors are pinned above what add_group packs
            table = without_kept(c.table)
            room, moved = packing(pchip, net, search, table)
            if room is None or ((moved is not table or not exact_packing_allowed(search, table))
                                and multi_start_allocate(net, room, moved, "off") is None):
                continue  # an untrusted group TPU-MLIR's allocator may not place (lgopt.strategies.settings)
            x = m.new_bool_var(f"c{len(cands)}")
            gv = add_group(m, net, room, table, st.objective, present=x,
                           bank_rule="hard" if search.bank_rule == "hard" else "off")
            buffers += len(c.table.buffers)
            terms.append(gv.cost)
            chosen = iv[2] == "" and (ops[0], ops[-1], c.n, c.h, c.w, c.c) in hint
            m.add_hint(x, chosen)
            if chosen:  # the greedy plan loads weights by the seed's rule: the table's own rows
                mine = current_loads(c.table)
                for name, opts in gv.loads.items():
                    for lit, ld in opts:
                        m.add_hint(lit, mine.get(name) == ld)
            if not space.free_loads:  # every weight loads where the table's own rule puts it
                mine = current_loads(c.table)
                for name, opts in gv.loads.items():
                    for lit, ld in opts:
                        m.add(lit == (x if mine.get(name) == ld else 0))
            cands.append((iv, c, x, gv))
    gl = {k: m.new_bool_var(f"gl{k}") for k in local}
    add_handover_links(m, ((iv, x) for iv, _, x, _ in cands))
    for k in local:
        m.add_exactly_one([x for iv, _, x, _ in cands if iv[0] <= k <= iv[1]] + [gl[k]])
        terms.append(gval[k] * gl[k])
    m.minimize(sum(terms) + fixed)
    if progress:
        progress(f"cpsat (monolithic): {len(cands)} candidates, {buffers} buffers")
    if budget.deterministic:
        solver = make_solver(workers=st.workers, seed=st.seed, deterministic=max(0.05, budget.left()),
                             params=st.cp_sat_params)
    else:
        solver = make_solver(workers=st.workers, seed=st.seed, seconds=budget.left(), params=st.cp_sat_params)
    with budget.metered():
        res = solve_interruptibly(solver, m)
    if res not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        bound = integral_bound(solver) if res != cp_model.INFEASIBLE else 0
        return result(net, chip, search, st, list(base.groups), base, bound, "time_limit", budget,
                       {"formulation": "monolithic", "candidates": len(cands)})
    groups = []
    for iv, c, x, gv in cands:
        if solver.value(x):
            g = with_loads(c.table, {name: next(ld for lit, ld in opts if solver.value(lit))
                                     for name, opts in gv.loads.items()})
            o = {bid: int(solver.value(v)) * align for bid, v in gv.offsets.items()}
            pchip = space.inner_chip(sum(space.kept(*iv), ()))
            assert pchip is not None
            room, _ = packing(pchip, net, search, without_kept(c.table))
            assert room is not None  # the model packed it
            # the model ignored soft bank pairs: place_chosen reduces them now
            groups.append(place_chosen(net, chip, g, o, room, search.bank_rule))
    groups.sort(key=lambda g: net.op_index[g.ops[0]])
    status: PlanStatus = "optimal" if res == cp_model.OPTIMAL else "time_limit"
    return result(net, chip, search, st, groups, base, integral_bound(solver), status, budget,
                   {"formulation": "monolithic", "candidates": len(cands), "buffers": buffers})

"""The CP-SAT LayerGroup optimiser.

Two formulations of one problem (choose groups, their N/H slice counts and the
LMEM offset of every buffer; minimise cycles or GMEM traffic):

* **monolithic** (small networks): one CP-SAT model.  A Boolean per candidate
  (interval x slicing), every op covered exactly once, and for every candidate
  the offsets of its buffers (and, unsliced, its weights' load rows; see
  :mod:`lgopt.strategies.cpsat.loadrows`) as variables in a ``NoOverlap2D`` whose rectangles
  are present only when the candidate is chosen.
* **decomposed** (any size): a master CP-SAT model over intervals (group
  boundaries) whose slicing, weight load rows and packing are settled per
  interval by :class:`~lgopt.strategies.cpsat.candidates.CandidateSpace`.  Intervals start with a valid
  lower bound as their cost and are evaluated lazily, only when the master
  picks them; an interval none of whose slicings packs is cut from the master
  (a logic-based Benders cut).  When every interval of the master's optimum is
  evaluated, the master's objective equals a real plan's cost: optimal over
  the candidate space (see :mod:`lgopt.strategies.cpsat.candidates` for its extent).

Both start from the greedy plan (solution hints) and never return anything
worse; both report status, objective, best bound and gap.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable

from ortools.sat.python import cp_model

from lgopt.group.build import assemble
from lgopt.group.totals import finish
from lgopt.hw.chip import Chip
from lgopt.model.network import Network, network_digest, reorder, topological_orders
from lgopt.model.plan import GroupPlan, Plan
from lgopt.strategies.cpsat.candidates import INF, CandidateSpace, Key
from lgopt.strategies.greedy import greedy
from lgopt.strategies.settings import SearchSettings

Progress = Callable[[str], None]


@dataclass(frozen=True)
class CpsatSettings:
    objective: str = "cycles"  # cycles | traffic
    time_limit: float = 60.0  # wall seconds for the whole optimisation
    workers: int = 2
    seed: int = 0
    formulation: str = "auto"  # auto | monolithic | decomposed
    monolithic_max_ops: int = 10
    pack_time: float = 2.0  # CP-SAT deterministic time per exact packing
    orders: int = 1  # topological orders searched: 1 = the given one; up to 3 adds depth- and breadth-first
    handover: bool = True  # let consecutive groups hand a tensor over in LMEM (lgopt.group.handover)


def _solver(st: CpsatSettings, seconds: float, workers: int | None = None) -> cp_model.CpSolver:
    """A seeded solver; several workers interleave deterministically (same seed and count, same answer)."""
    s = cp_model.CpSolver()
    w = st.workers if workers is None else workers
    s.parameters.num_workers = w
    s.parameters.random_seed = st.seed
    s.parameters.interleave_search = w > 1
    s.parameters.max_time_in_seconds = max(0.05, seconds)
    return s


def _plan_value(plan: Plan, objective: str) -> int:
    return int(plan.cost["cycles"] if objective == "cycles" else plan.cost["traffic_bytes"])


def _greedy_intervals(net: Network, plan: Plan) -> list[Key]:
    idx = net.op_index
    return [(idx[g.ops[0]], idx[g.ops[-1]], "") for g in plan.groups]


def optimise(net: Network, chip: Chip, search: SearchSettings = SearchSettings(),
             st: CpsatSettings = CpsatSettings(), progress: Progress | None = None) -> Plan:
    """Best plan over groups that are contiguous in any of ``st.orders`` topological orders.

    Each order is its own candidate space, searched in turn with a share of the remaining time; the
    union's bound is the smallest of the per-order bounds, and the result is optimal only when every
    order's search is.  Plans are expressed on the given network whatever order produced them.
    """
    t0 = time.perf_counter()
    orders = list(topological_orders(net).items())[:max(1, st.orders)]
    seen: set[tuple[str, ...]] = set()
    results: list[tuple[str, Plan]] = []
    for k, (kind, names) in enumerate(orders):
        if tuple(names) in seen:
            continue
        seen.add(tuple(names))
        left = st.time_limit - (time.perf_counter() - t0)
        share = max(1.0, left / (len(orders) - k)) if k < len(orders) - 1 else max(1.0, left)
        onet = net if kind == "given" else reorder(net, names)
        plan = _optimise_order(onet, chip, search, replace(st, time_limit=share), progress)
        results.append((kind, plan))
    kind, best = min(results, key=lambda kp: (kp[1].solver["value"], kp[0] != "given"))
    bound = min(p.solver["bound"] for _, p in results)
    value = best.solver["value"]
    gap = 0.0 if value <= 0 else max(0.0, (value - bound) / value)
    status = "optimal" if all(p.status == "optimal" for _, p in results) and gap <= 1e-9 else (
        "time_limit" if any(p.status == "time_limit" for _, p in results) else "feasible")
    space = f"{best.solver.get('space', '')}; searched in {len(results)} topological order(s): " + \
        ", ".join(k for k, _ in results)
    solver = {**best.solver, "bound": int(bound), "gap": round(gap, 6), "solver_status": status, "order": kind,
              "orders": {k: {"value": p.solver["value"], "bound": p.solver["bound"], "status": p.status}
                         for k, p in results},
              "seconds": round(time.perf_counter() - t0, 3), "space": space}
    return replace(best, model_digest=network_digest(net), steps=_topo_steps(net, best), status=status,
                   solver=solver)


def _topo_steps(net: Network, plan: Plan) -> tuple[tuple[str, object], ...]:
    """Steps in an order that respects the given network's dependencies (groups stay whole)."""
    import networkx as nx

    owner = {}
    group_of = {o: k for k, g in enumerate(plan.groups) for o in g.ops}
    hands_to = {group_of[net.producer[g.kept_in[0]].name]: k for k, g in enumerate(plan.groups) if g.kept_in}
    receiver = set(hands_to.values())
    for k, g in enumerate(plan.groups):  # a group that receives in LMEM runs right after its giver: one node
        giver = next((a for a, r in hands_to.items() if r == k), k) if k in receiver else k
        for o in g.ops:
            owner[o] = ("group", giver)
    for kind, v in plan.steps:
        if kind == "global":
            owner[v] = ("global", v)
    dag = nx.DiGraph()
    dag.add_nodes_from(set(owner.values()))
    for a, b in net.graph.edges:
        if owner[a] != owner[b]:
            dag.add_edge(owner[a], owner[b])
    first = {s: min(net.op_index[o] for o in (plan.groups[s[1]].ops if s[0] == "group" else (s[1],)))
             for s in dag.nodes}
    steps: list[tuple[str, object]] = []
    for s in nx.lexicographical_topological_sort(dag, key=lambda s: first[s]):
        steps.append(s)
        if s[0] == "group" and s[1] in hands_to:
            steps.append(("group", hands_to[s[1]]))
    return tuple(steps)


def _optimise_order(net: Network, chip: Chip, search: SearchSettings, st: CpsatSettings,
                    progress: Progress | None) -> Plan:
    t0 = time.perf_counter()
    base = greedy(net, chip, search)
    n_local = sum(op.local for op in net.ops)
    form = st.formulation
    if form == "auto":
        form = "monolithic" if n_local <= st.monolithic_max_ops else "decomposed"
    if form == "monolithic":
        return _monolithic(net, chip, search, st, base, t0, progress)
    return _decomposed(net, chip, search, st, base, t0, progress)


def _result(net: Network, chip: Chip, search: SearchSettings, st: CpsatSettings, groups: list[GroupPlan],
            base: Plan, bound: int, status: str, t0: float, extra: dict) -> Plan:
    plan = assemble(net, chip, groups, "cpsat", h_ratio=search.h_ratio, bank_rule=search.bank_rule)
    plan = finish(chip, net, plan)
    value = _plan_value(plan, st.objective)
    if value > _plan_value(base, st.objective):  # never worse than greedy
        plan, value = base, _plan_value(base, st.objective)
        status = "feasible" if status == "optimal" else status
    gap = 0.0 if value <= 0 else max(0.0, (value - bound) / value)
    if status == "optimal" and gap > 1e-9:  # a gap left when time ran out is the time limit's doing
        status = "time_limit" if time.perf_counter() - t0 >= st.time_limit else "feasible"
    solver = {"seconds": round(time.perf_counter() - t0, 3), "objective": st.objective, "value": value,
              "bound": int(bound), "gap": round(gap, 6), "solver_status": status, "workers": st.workers,
              "seed": st.seed, **extra}
    return replace(plan, strategy="cpsat", status=status, solver=solver)


# --- decomposed: master over intervals, lazy interval evaluation, Benders cuts --------------------

PRICING_BATCH = 256  # intervals evaluated between two pricings

HANDOVER_SPACE = ("; a tensor handed over in LMEM between consecutive groups (held whole in the top banks, a group "
                  "receives or hands over, not both)")


def add_handover_links(m: cp_model.CpModel, chosen: Iterable[tuple[Key, cp_model.IntVar]]) -> None:
    """A group hands a tensor over at boundary ``b`` exactly when the group starting at ``b`` receives it."""
    outs: dict[int, list[cp_model.IntVar]] = {}
    ins: dict[int, list[cp_model.IntVar]] = {}
    for (i, j, v), lit in chosen:
        if v == "out":
            outs.setdefault(j + 1, []).append(lit)
        elif v == "in":
            ins.setdefault(i, []).append(lit)
    for b in sorted(set(outs) | set(ins)):
        m.add(sum(outs.get(b, [])) == sum(ins.get(b, [])))


def _state_in(key: Key) -> int:
    return int(key[2] == "in")


def _state_out(key: Key) -> int:
    return int(key[2] == "out")


def _paths(n_ops: int, starts: dict[int, list[Key]], cost: dict[Key, int],
           single: list[int]) -> tuple[list[list[float]], list[list[float]]]:
    """Cheapest cost to reach each op boundary from the start, and from it to the end.

    The segmentation is a path over op boundaries 0..n, each in state 0 (the
    steps meet in GMEM) or 1 (a tensor is handed over in LMEM); a candidate
    ``[i, j]`` is an edge i -> j+1 that starts in state 1 only if it receives
    (``"in"``) and ends in state 1 only if it hands over (``"out"``); a global
    layer is an edge k -> k+1 in state 0.  These distances price each candidate
    (reduced-cost fixing): one whose best completion exceeds a known plan cannot
    be in an optimal solution, so it need not be evaluated.
    """
    inf = float("inf")
    fwd = _forward(n_ops, starts, cost, single)[0]
    bwd = [[inf, inf] for _ in range(n_ops + 1)]
    bwd[n_ops][0] = 0
    for p in range(n_ops - 1, -1, -1):
        here = bwd[p]
        here[0] = single[p] + bwd[p + 1][0]
        for key in starts.get(p, ()):
            c = cost.get(key)
            if c is not None:
                s = _state_in(key)
                here[s] = min(here[s], c + bwd[key[1] + 1][_state_out(key)])
    return fwd, bwd


Back = tuple[int, int, Key | None]  # (previous boundary, its state, the candidate taken; None: a global layer)


def _forward(n_ops: int, starts: dict[int, list[Key]], cost: dict[Key, int], single: list[int]
             ) -> tuple[list[list[float]], list[list[Back | None]]]:
    """Cheapest cost to reach each (boundary, state) from the start, and the step that reaches it."""
    inf = float("inf")
    best: list[list[float]] = [[inf, inf] for _ in range(n_ops + 1)]
    back: list[list[Back | None]] = [[None, None] for _ in range(n_ops + 1)]
    best[0][0] = 0
    for p in range(n_ops):
        if best[p][0] + single[p] < best[p + 1][0]:
            best[p + 1][0] = best[p][0] + single[p]
            back[p + 1][0] = (p, 0, None)
        for key in starts.get(p, ()):
            c = cost.get(key)
            s_in, s_out = _state_in(key), _state_out(key)
            if c is not None and best[p][s_in] + c < best[key[1] + 1][s_out]:
                best[key[1] + 1][s_out] = best[p][s_in] + c
                back[key[1] + 1][s_out] = (p, s_in, key)
    return best, back


def _cheapest(n_ops: int, starts: dict[int, list[Key]], cost: dict[Key, int], single: list[int]) -> list[Key]:
    """The candidates of the cheapest segmentation (the master's optimum, by dynamic programming): the
    fallback when the master cannot be solved in the time left, and its hint."""
    best, back = _forward(n_ops, starts, cost, single)
    if best[n_ops][0] == float("inf"):
        return []
    out: list[Key] = []
    at, state = n_ops, 0
    while at > 0:
        step = back[at][state]
        assert step is not None
        at, state, key = step
        if key is not None:
            out.append(key)
    return sorted(out)


def _within(n_ops: int, starts: dict[int, list[Key]], cost: dict[Key, int], single: list[int],
            upper: float) -> dict[Key, int]:
    """The candidates of ``cost`` some segmentation costing at most ``upper`` can use (reduced-cost fixing).

    With ``upper`` the cost of a segmentation over ``cost`` itself, the master over what is left has
    the same optimum and bound as over everything: a segmentation through a dropped candidate costs
    more than one that is kept.  It is far smaller, and CP-SAT solves it in a fraction of the time.
    """
    fwd, bwd = _paths(n_ops, starts, cost, single)
    return {iv: c for iv, c in cost.items()
            if fwd[iv[0]][_state_in(iv)] + c + bwd[iv[1] + 1][_state_out(iv)] <= upper}


@dataclass(frozen=True)
class _Master:
    """The set-partitioning master: an interval Boolean per group candidate, a global-layer Boolean per op."""

    intervals: list[Key]
    covering: dict[int, list[Key]]
    gval: dict[int, int]  # local op -> its cost as a global layer
    fixed: int  # ops that can only be global layers

    def solve(self, st: CpsatSettings, cost: dict[Key, int], seconds: float,
              hint: set[Key] | None = None) -> tuple[int, int, list[Key]] | None:
        """(status, best bound, chosen candidates); candidates missing from ``cost`` are cut."""
        m = cp_model.CpModel()
        x = {iv: m.new_bool_var(f"g{iv[0]}_{iv[1]}{iv[2]}") for iv in self.intervals if iv in cost}
        gl = {k: m.new_bool_var(f"gl{k}") for k in self.gval}
        for k in self.gval:
            m.add_exactly_one([x[iv] for iv in self.covering[k] if iv in x] + [gl[k]])
        add_handover_links(m, x.items())
        m.minimize(sum(cost[iv] * v for iv, v in x.items()) + sum(c * gl[k] for k, c in self.gval.items())
                   + self.fixed)
        if hint is not None:
            for iv, v in x.items():
                m.add_hint(v, iv in hint)
            for k in self.gval:
                m.add_hint(gl[k], not any(iv[0] <= k <= iv[1] for iv in hint))
        # a set-partitioning model whose LP is tight: one worker solves it fastest, and the machine's
        # other core is better spent evaluating intervals
        solver = _solver(st, seconds, workers=1)
        res = solver.solve(m)
        if res not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return None
        return res, int(solver.best_objective_bound), sorted(iv for iv, v in x.items() if solver.value(v))


def _decomposed(net: Network, chip: Chip, search: SearchSettings, st: CpsatSettings, base: Plan, t0: float,
                progress: Progress | None) -> Plan:
    space = CandidateSpace(net, chip, search, st.objective, st.pack_time, st.workers, st.seed, st.handover)
    try:
        return _search(net, chip, search, st, base, t0, progress, space)
    finally:
        space.close()


def _search(net: Network, chip: Chip, search: SearchSettings, st: CpsatSettings, base: Plan, t0: float,
            progress: Progress | None, space: CandidateSpace) -> Plan:
    intervals = space.intervals()
    lb = {iv: space.lower_bound(*iv) for iv in intervals}
    n_ops = len(net.ops)
    local = [k for k, op in enumerate(net.ops) if op.local]
    single = [space.global_value(k) for k in range(n_ops)]
    gval = {k: single[k] for k in local}
    fixed = sum(single[k] for k, op in enumerate(net.ops) if not op.local)
    starts: dict[int, list[Key]] = {}
    covering: dict[int, list[Key]] = {k: [] for k in local}
    for iv in intervals:
        starts.setdefault(iv[0], []).append(iv)
        for k in range(iv[0], iv[1] + 1):
            covering[k].append(iv)
    for iv in _greedy_intervals(net, base):
        space.evaluate(*iv, deadline=t0 + st.time_limit)
    deadline = t0 + st.time_limit
    rounds = 0

    def costs(with_bounds: bool) -> dict[Key, int]:
        out = {}
        for iv in intervals:
            ev = space.evaluated.get(iv)
            if ev is None:
                if with_bounds:
                    out[iv] = lb[iv]
            else:
                v = ev.bound if with_bounds else ev.cost
                if v < INF:
                    out[iv] = v
        return out

    # 1. price intervals and evaluate those that could still beat the best known plan
    priced_bound = 0.0
    todo: list = []
    while True:  # the first round always runs: its bound costs nothing and is valid whenever we stop
        rounds += 1
        fwd, bwd = _paths(n_ops, starts, costs(True), single)
        priced_bound = max(priced_bound, fwd[n_ops][0])  # valid: every interval at or above its true cost
        if time.perf_counter() > deadline:
            break
        upper = _paths(n_ops, starts, costs(False), single)[0][n_ops][0]

        def through(iv: Key) -> float:
            return fwd[iv[0]][_state_in(iv)] + lb[iv] + bwd[iv[1] + 1][_state_out(iv)]

        todo = sorted((through(iv), iv) for iv in intervals if iv not in space.evaluated and through(iv) < upper)
        if progress:
            progress(f"cpsat: round {rounds}: bound {fwd[n_ops][0]:,.0f}, best {upper:,.0f}, "
                     f"{len(space.evaluated)} intervals evaluated, {len(todo)} to price")
        if not todo:
            break
        # the most promising first, then price again: the plans they give prune the rest
        space.evaluate_many([iv for _, iv in todo[:PRICING_BATCH]], processes=st.workers, deadline=deadline,
                            full=False)

    # 2. the master: CP-SAT over every interval (evaluated cost, or its lower bound if never priced in)
    status, bound, best_keys, iterations = "time_limit", int(priced_bound), None, 0
    master = _Master(intervals, covering, gval, fixed)

    def solve_master(cost: dict[Key, int], seconds: float) -> tuple[int, int, list[Key]] | None:
        """The master over the candidates a plan no dearer than the best known one can use, hinted
        with the cheapest segmentation.  Over contiguous runs the master is a shortest path, so when the
        time is up (or CP-SAT stops without an answer) the dynamic program gives the same optimum and
        bound without overrunning the time limit."""
        upper = _forward(n_ops, starts, costs(False), single)[0][n_ops][0]
        if upper < float("inf"):
            cost = _within(n_ops, starts, cost, single, upper)
        path = _cheapest(n_ops, starts, cost, single)
        out = None
        if time.perf_counter() < deadline:
            out = master.solve(st, cost, min(seconds, max(0.05, deadline - time.perf_counter())), set(path))
        if out is None:  # no time for CP-SAT (or it ran out): the same optimum by dynamic programming
            value = _forward(n_ops, starts, cost, single)[0][n_ops][0]
            out = (cp_model.OPTIMAL, int(value), path) if value < float("inf") else None
        return out
    while time.perf_counter() < deadline or iterations == 0 and not todo:
        iterations += 1
        cost = {}
        for iv in intervals:
            ev = space.evaluated.get(iv)
            if ev is None:
                cost[iv] = lb[iv]
            elif ev.cost < INF:
                cost[iv] = ev.cost
            elif not ev.full and ev.bound < INF:
                cost[iv] = ev.bound  # a quick evaluation placed nothing: the master may ask for the full one
            # else: none of its slicings packs, so it stays out (a Benders cut)
        out = solve_master(cost, max(1.0, deadline - time.perf_counter()))
        if out is None:
            break
        res, master_bound, chosen = out
        if all(ev.bound >= ev.cost for ev in space.evaluated.values()):  # else the costs are upper values
            bound = max(bound, master_bound)
        fresh = [iv for iv in chosen if iv not in space.evaluated or not space.evaluated[iv].full]
        if not fresh:
            best_keys = chosen
            status = "optimal" if res == cp_model.OPTIMAL else "time_limit"
            break
        if time.perf_counter() > deadline:
            break
        space.evaluate_many(fresh, processes=min(st.workers, len(fresh)), deadline=deadline)
    # 3. where an evaluation left a gap (a quick one, or a packing or load-row solve cut by its budget),
    # the bound is the master over every interval's bound; refine the intervals that bound rests on
    # (every master over the bounds is a valid bound: each interval's bound is at or below its true cost)
    refined = False
    while any(ev.bound < ev.cost for ev in space.evaluated.values()):
        out = solve_master(costs(True), max(1.0, min(10.0, deadline - time.perf_counter())))
        if out is None:
            break
        bound = max(bound, out[1])
        weak = [iv for iv in out[2] if iv in space.evaluated and not space.evaluated[iv].full]
        if weak and time.perf_counter() > deadline:
            status = "time_limit"  # the gap could still have been narrowed
        if not weak or time.perf_counter() > deadline:
            break
        space.evaluate_many(weak, processes=min(st.workers, len(weak)), deadline=deadline)
        refined = True
    # 4. time left and still a gap: the intervals the bound rests on whose own solve left one (a load-row or
    # packing solve cut by its budget) are evaluated again, with candidates.EFFORT_GROWTH times the budget
    while time.perf_counter() < deadline:
        out = solve_master(costs(True), max(1.0, min(10.0, deadline - time.perf_counter())))
        if out is None:
            break
        bound = max(bound, out[1])
        if bound >= _forward(n_ops, starts, costs(False), single)[0][n_ops][0]:
            break
        loose = [iv for iv in out[2] if iv in space.evaluated and space.evaluated[iv].bound < space.evaluated[iv].cost]
        if not loose:
            break
        for iv in loose:
            space.evaluate(*iv, full=True, deadline=deadline, effort=space.evaluated[iv].effort + 1)
        refined = True
    if best_keys is None or refined:  # the best plan over evaluated intervals (refinement may improve it)
        known = costs(False)
        path = _cheapest(n_ops, starts, known, single)
        out = solve_master(known, max(1.0, min(10.0, deadline - time.perf_counter())))
        if out is not None:
            best_keys = out[2]
        elif path:
            best_keys = path
    # candidates were judged on feasibility: the kept groups' soft bank conflicts are reduced now
    best_groups = [space.materialize(*iv, polish=True) for iv in best_keys] if best_keys is not None \
        else list(base.groups)
    unknown = sum(1 for ev in space.evaluated.values() if ev.bound < ev.cost)
    extra = {"formulation": "decomposed", "pricing_rounds": rounds, "master_iterations": iterations,
             "intervals": len(intervals), "intervals_evaluated": len(space.evaluated),
             "distinct_evaluations": space.evaluations, "unknown_packings": unknown,
             "space": "contiguous runs of the topological order up to "
             f"{search.max_group_ops} ops; N slices 1..batch/unit; H slices up to the first that breaks a slicing "
             f"rule (<= {search.max_h_slices}); lgopt's pipelined timestep table, any weight load row in unsliced "
             "groups; exact packing" + (HANDOVER_SPACE if space.handover else "")}
    return _result(net, chip, search, st, best_groups, base, bound, status, t0, extra)


# --- monolithic: one model with boundaries, slicings and offsets --------------------------------------

def _monolithic(net: Network, chip: Chip, search: SearchSettings, st: CpsatSettings, base: Plan, t0: float,
                progress: Progress | None) -> Plan:
    from lgopt.group.alloc import Allocation, count_bank_conflicts, polish_banks
    from lgopt.group.build import place
    from lgopt.group.cost import group_cost
    from lgopt.group.handover import kept_buffers, without_kept
    from lgopt.strategies.cpsat.loadrows import add_group, current_loads, with_loads

    space = CandidateSpace(net, chip, search, st.objective, st.pack_time, st.workers, st.seed, st.handover)
    local = [k for k, op in enumerate(net.ops) if op.local]
    gval = {k: space.global_value(k) for k in local}
    fixed = sum(space.global_value(k) for k, op in enumerate(net.ops) if not op.local)
    m = cp_model.CpModel()
    align = chip.align_bytes
    cands = []  # (interval, slicing, presence literal, group variables)
    terms = []
    hint = {(g.ops[0], g.ops[-1], g.n_slices, g.h_slices) for g in base.groups}
    buffers = 0
    for iv in space.intervals():
        ops = space.names[iv[0]:iv[1] + 1]
        kin, kout = space.kept(*iv)
        pchip = space.inner_chip(kin + kout)
        for c in space.slicings(ops, kin, kout):  # handed-over tensors are pinned above what add_group packs
            x = m.new_bool_var(f"c{len(cands)}")
            gv = add_group(m, net, pchip, without_kept(c.table), st.objective, present=x,
                           bank_rule="hard" if search.bank_rule == "hard" else "off")
            buffers += len(c.table.buffers)
            terms.append(gv.cost)
            chosen = iv[2] == "" and (ops[0], ops[-1], c.n, c.h) in hint
            m.add_hint(x, chosen)
            if chosen:  # the greedy plan loads weights by the seed's rule: the table's own rows
                mine = current_loads(c.table)
                for name, opts in gv.loads.items():
                    for lit, ld in opts:
                        m.add_hint(lit, mine.get(name) == ld)
            cands.append((iv, c, x, gv))
    gl = {k: m.new_bool_var(f"gl{k}") for k in local}
    add_handover_links(m, ((iv, x) for iv, _, x, _ in cands))
    for k in local:
        m.add_exactly_one([x for iv, _, x, _ in cands if iv[0] <= k <= iv[1]] + [gl[k]])
        terms.append(gval[k] * gl[k])
    m.minimize(sum(terms) + fixed)
    if progress:
        progress(f"cpsat (monolithic): {len(cands)} candidates, {buffers} buffers")
    solver = _solver(st, st.time_limit - (time.perf_counter() - t0))
    res = solver.solve(m)
    if res not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        bound = int(solver.best_objective_bound) if res != cp_model.INFEASIBLE else 0
        return _result(net, chip, search, st, list(base.groups), base, bound, "time_limit", t0,
                       {"formulation": "monolithic", "candidates": len(cands)})
    groups = []
    for iv, c, x, gv in cands:
        if solver.value(x):
            g = with_loads(c.table, {name: next(ld for lit, ld in opts if solver.value(lit))
                                     for name, opts in gv.loads.items()})
            o = {bid: int(solver.value(v)) * align for bid, v in gv.offsets.items()}
            if search.bank_rule == "soft":  # the model ignored soft bank pairs: reduce them now
                o = polish_banks(net, space.inner_chip(sum(space.kept(*iv), ())), without_kept(g), o)
            o.update({b.id: b.offset for b in kept_buffers(g)})
            peak = max(o[b.id] + b.size for b in g.buffers)
            conf = count_bank_conflicts(net, chip, g, o) if search.bank_rule != "off" else 0
            pg = place(net, chip, g, Allocation(o, peak, conf))
            groups.append(replace(pg, cost={**pg.cost, **group_cost(chip, net, pg)}))
    groups.sort(key=lambda g: net.op_index[g.ops[0]])
    status = "optimal" if res == cp_model.OPTIMAL else "time_limit"
    return _result(net, chip, search, st, groups, base, int(solver.best_objective_bound), status, t0,
                   {"formulation": "monolithic", "candidates": len(cands), "buffers": buffers})

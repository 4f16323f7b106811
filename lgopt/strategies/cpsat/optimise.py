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
  interval by :mod:`~lgopt.strategies.cpsat.evaluate`.  Intervals start with a valid
  lower bound as their cost and are evaluated lazily, only when the master
  picks them; an interval none of whose slicings packs is cut from the master
  (a logic-based Benders cut).  When every interval of the master's optimum is
  evaluated, the master's objective equals a real plan's cost: optimal over
  the candidate space (see :mod:`lgopt.strategies.cpsat.space` for its extent).

Both start from the greedy plan (solution hints) and never return anything
worse; both report status, objective, best bound and gap.
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx

from lgopt.hw.chip import Chip, for_chip
from lgopt.model.network import Network, network_digest, reorder, topological_orders
from lgopt.model.plan import Plan, PlanStatus
from lgopt.strategies.cpsat.budget import Budget
from lgopt.strategies.cpsat.common import CpsatSettings
from lgopt.strategies.cpsat.decomposed import decomposed
from lgopt.strategies.cpsat.monolithic import monolithic
from lgopt.strategies.greedy import greedy
from lgopt.strategies.settings import Incumbent, Progress, SearchSettings

__all__ = ["CpsatSettings", "optimise"]


def optimise(net: Network, chip: Chip, search: SearchSettings = SearchSettings(),
             st: CpsatSettings = CpsatSettings(), progress: Progress | None = None,
             incumbent: Incumbent | None = None) -> Plan:
    """Best plan over groups that are contiguous in any of ``st.orders`` topological orders.

    Each order is its own candidate space, searched in turn with a share of the remaining time; the
    union's bound is the smallest of the per-order bounds, and the result is optimal only when every
    order's search is.  Plans are expressed on the given network whatever order produced them, the
    intermediate ones passed to ``incumbent`` too.
    """
    cnet = for_chip(net, chip)  # the ops the chip's compiler keeps out of groups (matmuls on cv18xx) as global
    if cnet is not net:
        def named(p: Plan) -> Plan:
            return replace(p, model_digest=network_digest(net))
        inner = None if incumbent is None else (lambda p: incumbent(named(p)))
        return named(optimise(cnet, chip, search, st, progress, inner))
    budget = Budget(st.time_limit, st.deterministic)
    given = incumbent
    if given is not None:
        def incumbent(p: Plan) -> None:
            given(replace(p, model_digest=network_digest(net), steps=_topo_steps(net, p)))
    orders = list(topological_orders(net).items())[:max(1, st.orders)]
    seen: set[tuple[str, ...]] = set()
    results: list[tuple[str, Plan]] = []
    for k, (kind, names) in enumerate(orders):
        if tuple(names) in seen:
            continue
        seen.add(tuple(names))
        left = budget.left()
        share = max(1.0, left / (len(orders) - k)) if k < len(orders) - 1 else max(1.0, left)
        onet = net if kind == "given" else reorder(net, names)
        part = budget.share(share)
        plan = _optimise_order(onet, chip, search, replace(st, time_limit=share), part, progress, incumbent)
        budget.charge(part.charged, part.capped)
        results.append((kind, plan))
    kind, best = min(results, key=lambda kp: (kp[1].solver["value"], kp[0] != "given"))
    bound = min(p.solver["bound"] for _, p in results)
    value = best.solver["value"]
    gap = 0.0 if value <= 0 else max(0.0, (value - bound) / value)
    status: PlanStatus = "optimal" if all(p.status == "optimal" for _, p in results) and gap <= 1e-9 else (
        "time_limit" if any(p.status == "time_limit" for _, p in results) else "feasible")
    space = f"{best.solver.get('space', '')}; searched in {len(results)} topological order(s): " + \
        ", ".join(k for k, _ in results)
    solver = {**best.solver, "bound": int(bound), "gap": round(gap, 6), "solver_status": status, "order": kind,
              "orders": {k: {"value": p.solver["value"], "bound": p.solver["bound"], "status": p.status}
                         for k, p in results},
              "seconds": round(budget.seconds(), 3), "space": space,
              **({"work_units": round(budget.charged, 3), "wall_capped_solves": budget.capped}
                 if budget.deterministic else {})}
    return replace(best, model_digest=network_digest(net), steps=_topo_steps(net, best), status=status,
                   solver=solver)


def _topo_steps(net: Network, plan: Plan) -> tuple[tuple[str, object], ...]:
    """Steps in an order that respects the given network's dependencies (groups stay whole)."""
    owner = {}
    group_of = {o: k for k, g in enumerate(plan.groups) for o in g.ops}
    hands_to = {group_of[net.producer[g.kept_in[0]].name]: k for k, g in enumerate(plan.groups) if g.kept_in}
    given_by = {r: a for a, r in hands_to.items()}

    def root(k: int) -> int:  # the first group of a hand-over chain (a middle group both receives and gives)
        while k in given_by:
            k = given_by[k]
        return k

    for k, g in enumerate(plan.groups):  # a chain of groups meeting in LMEM runs back to back: one node
        for o in g.ops:
            owner[o] = ("group", root(k))
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
        k = s[1]
        while s[0] == "group" and k in hands_to:
            k = hands_to[k]
            steps.append(("group", k))
    return tuple(steps)


def _optimise_order(net: Network, chip: Chip, search: SearchSettings, st: CpsatSettings, budget: Budget,
                    progress: Progress | None, incumbent: Incumbent | None = None) -> Plan:
    base = greedy(net, chip, search)
    if incumbent is not None:  # the first plan to keep if the search is interrupted
        incumbent(base)
    n_local = sum(op.local for op in net.ops)
    form = st.formulation
    if form == "auto":
        form = "monolithic" if n_local <= st.monolithic_max_ops else "decomposed"
    if form == "monolithic":
        return monolithic(net, chip, search, st, base, budget, progress)
    return decomposed(net, chip, search, st, base, budget, progress, incumbent)


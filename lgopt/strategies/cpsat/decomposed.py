"""The decomposed formulation (any size): a master over group boundaries, candidates priced with valid
lower bounds and evaluated lazily, Benders cuts for candidates that cannot be packed.

Candidates start with a valid lower bound (:func:`lgopt.strategies.cpsat.bounds.interval_lower_bound`)
as their cost and are evaluated only when they could still be part of a plan cheaper than the best known
one; a candidate none of whose slicings packs is cut from the master.  When every candidate of the
master's optimum is evaluated in full, the master's objective equals a real plan's cost: optimal over
the candidate space (:mod:`lgopt.strategies.cpsat.space` states its extent).  The search runs in four
phases, one method each of :class:`_Search`:

1. price: shortest paths over bounds and known values; evaluate (quickly) the most promising candidates;
2. master: CP-SAT set partitioning over evaluated costs and bounds, evaluating in full what it picks;
3. refine: where an evaluation left a gap, refine the candidates the bound rests on;
4. tighten: with time left and a gap, evaluate those candidates again with more solver budget.
"""

from __future__ import annotations

import time
from typing import Callable

from ortools.sat.python import cp_model

from lgopt.hw.chip import Chip
from lgopt.model.network import Network
from lgopt.model.plan import GroupPlan, Plan, PlanStatus
from lgopt.strategies.cpsat.budget import Budget
from lgopt.strategies.cpsat.common import INF, CpsatSettings, Key, objective_value
from lgopt.strategies.cpsat.evaluate import MAX_EFFORT, Evaluator
from lgopt.strategies.cpsat.interval_bound import interval_lower_bound
from lgopt.strategies.cpsat.master import Master, MasterAnswer
from lgopt.strategies.cpsat.result import result
from lgopt.strategies.cpsat.segmentation import cheapest, forward, paths, state_in, state_out, within
from lgopt.strategies.cpsat.space import CandidateSpace
from lgopt.strategies.settings import Incumbent, Progress, SearchSettings

PRICING_BATCH = 256  # intervals evaluated between two pricings
BOUND_WORK = 1e-4  # deterministic units charged per candidate's lower bound (about its wall time on one core)

HANDOVER_SPACE = ("; a tensor handed over in LMEM between consecutive groups (held whole in the top banks, a group "
                  "receives or hands over, not both)")



def decomposed(net: Network, chip: Chip, search: SearchSettings, st: CpsatSettings, base: Plan, budget: Budget,
               progress: Progress | None, incumbent: Incumbent | None = None) -> Plan:
    """The best plan over the candidate space, from the greedy plan ``base`` (evaluated first) up; each
    better plan found on the way is passed to ``incumbent``."""
    space = CandidateSpace(net, chip, search, st.objective, st.handover, st.free_loads)
    with Evaluator(space, st.pack_time, st.workers, st.seed) as ev:
        return _Search(space, ev, st, base, budget, progress, incumbent).run()


def _greedy_intervals(net: Network, plan: Plan) -> list[Key]:
    idx = net.op_index
    return [(idx[g.ops[0]], idx[g.ops[-1]], "") for g in plan.groups]


class _Search:
    """The state the four phases share: candidates, their bounds, the path structure and the master."""

    def __init__(self, space: CandidateSpace, ev: Evaluator, st: CpsatSettings, base: Plan, budget: Budget,
                 progress: Progress | None, incumbent: Incumbent | None = None) -> None:
        self.space, self.ev, self.st, self.base, self.budget, self.progress = space, ev, st, base, budget, progress
        self.incumbent = incumbent
        self.reported = float(objective_value(base.cost, st.objective))  # the caller has the greedy plan
        self.report_seconds = 0.0  # what reporting the last incumbent took
        self.next_report = 0.0  # perf_counter() before which no incumbent is reported (reports cost time)
        net = space.net
        self.intervals = space.intervals()
        self.lb = {iv: interval_lower_bound(space, *iv) for iv in self.intervals}
        budget.charge(BOUND_WORK * len(self.intervals))  # what a wall clock would have counted
        self.n_ops = len(net.ops)
        local = [k for k, op in enumerate(net.ops) if op.local]
        self.single = [space.global_value(k) for k in range(self.n_ops)]
        gval = {k: self.single[k] for k in local}
        fixed = sum(self.single[k] for k, op in enumerate(net.ops) if not op.local)
        self.starts: dict[int, list[Key]] = {}
        covering: dict[int, list[Key]] = {k: [] for k in local}
        for iv in self.intervals:
            self.starts.setdefault(iv[0], []).append(iv)
            for k in range(iv[0], iv[1] + 1):
                covering[k].append(iv)
        self.master = Master(self.intervals, covering, gval, fixed)

    # --- shared ------------------------------------------------------------------------------------
    def costs(self, with_bounds: bool) -> dict[Key, int]:
        """Each candidate's evaluated bound (``with_bounds``; never-evaluated ones at their lower bound) or
        evaluated value (evaluated, placed ones only)."""
        out = {}
        for iv in self.intervals:
            e = self.ev.evaluated.get(iv)
            if e is None:
                if with_bounds:
                    out[iv] = self.lb[iv]
            else:
                v = e.bound if with_bounds else e.cost
                if v < INF:
                    out[iv] = v
        return out

    def best_known(self) -> float:
        """The cheapest plan over evaluated candidates (inf when there is none)."""
        return forward(self.n_ops, self.starts, self.costs(False), self.single)[0][self.n_ops][0]

    def report(self, bound: float) -> None:
        """Pass the best plan over evaluated candidates to the caller when it beats the last one reported.

        Building it (scheduling and placing its groups) takes time the search does not have, so reports
        are spaced to take at most a fifth of the run, and skipped when one would end past a wall-clock
        deadline; the final plan is always returned.  Reports change nothing the search does."""
        if self.st.stop_bound is not None and bound >= self.st.stop_bound and not self.budget.halted:
            self.budget.halt()  # nothing in the space can reach the caller's goal: stop at the next check
            if self.progress:
                self.progress(f"cpsat: bound {bound:,.0f} reached {self.st.stop_bound:,}: stopping")
        if self.incumbent is None:
            return
        now = time.perf_counter()
        deadline = self.budget.deadline
        if now < self.next_report or deadline is not None and now + self.report_seconds > deadline:
            return
        known = self.costs(False)
        if self.best_known() >= self.reported:
            return
        path = cheapest(self.n_ops, self.starts, known, self.single)
        groups = [self.ev.materialize(*iv) for iv in path]
        plan = result(self.space.net, self.space.chip, self.space.settings, self.st, groups, self.base,
                      int(bound), "feasible", self.budget, {"formulation": "decomposed", "incumbent": True})
        value = objective_value(plan.cost, self.st.objective)
        if value < self.reported:
            self.incumbent(plan)
            self.reported = value
        self.report_seconds = time.perf_counter() - now
        self.next_report = time.perf_counter() + 4 * self.report_seconds

    def left(self, cap: float | None = None) -> float:
        """What is left of the budget (seconds or units), at least 1, at most ``cap``."""
        rest = self.budget.left()
        return max(1.0, rest if cap is None else min(cap, rest))

    def solve_master(self, cost: dict[Key, int], seconds: float) -> MasterAnswer | None:
        """The master over the candidates a plan no dearer than the best known one can use, hinted
        with the cheapest segmentation.  Over contiguous runs the master is a shortest path, so when the
        time is up (or CP-SAT stops without an answer) the dynamic program gives the same optimum and
        bound without overrunning the time limit."""
        upper = self.best_known()
        if upper < float("inf"):
            cost = within(self.n_ops, self.starts, cost, self.single, upper)
        path = cheapest(self.n_ops, self.starts, cost, self.single)
        out: MasterAnswer | None = None
        if not self.budget.expired():
            with self.budget.metered():
                out = self.master.solve(self.st, cost, min(seconds, max(0.05, self.budget.left())), set(path),
                                        self.budget.deterministic)
        if out is None:  # no time for CP-SAT (or it ran out): the same optimum by dynamic programming
            value = forward(self.n_ops, self.starts, cost, self.single)[0][self.n_ops][0]
            out = (cp_model.OPTIMAL, int(value), path) if value < float("inf") else None
        return out

    # --- the phases --------------------------------------------------------------------------------
    def price(self) -> tuple[int, float, list[tuple[float, Key]]]:
        """Phase 1: (rounds, a valid bound, candidates still worth pricing when time ran out)."""
        rounds, priced_bound = 0, 0.0
        todo: list[tuple[float, Key]] = []
        n = self.n_ops
        while True:  # the first round always runs: its bound costs nothing and is valid whenever we stop
            rounds += 1
            fwd, bwd = paths(n, self.starts, self.costs(True), self.single)
            priced_bound = max(priced_bound, fwd[n][0])  # valid: every interval at or above its true cost
            if self.budget.expired():
                break
            upper = paths(n, self.starts, self.costs(False), self.single)[0][n][0]
            through = _through(fwd, bwd, self.lb)
            todo = sorted((through(iv), iv) for iv in self.intervals
                          if iv not in self.ev.evaluated and through(iv) < upper)
            if self.progress:
                self.progress(f"cpsat: round {rounds}: bound {fwd[n][0]:,.0f}, best {upper:,.0f}, "
                              f"{len(self.ev.evaluated)} intervals evaluated, {len(todo)} to price")
            if not todo:
                break
            # the most promising first, then price again: the plans they give prune the rest
            self.ev.evaluate_many([iv for _, iv in todo[:PRICING_BATCH]], processes=self.st.workers,
                                  budget=self.budget, full=False)
            self.report(priced_bound)
        return rounds, priced_bound, todo

    def master_loop(self, bound: int, todo_left: bool) -> tuple[PlanStatus, int, list[Key] | None, int]:
        """Phase 2: (status, bound, chosen candidates if the master's optimum is fully evaluated, iterations)."""
        status: PlanStatus = "time_limit"
        best_keys: list[Key] | None = None
        iterations = 0
        evaluated = self.ev.evaluated
        while not self.budget.expired() or iterations == 0 and not todo_left:
            iterations += 1
            cost = {}
            for iv in self.intervals:
                e = evaluated.get(iv)
                if e is None:
                    cost[iv] = self.lb[iv]
                elif e.cost < INF:
                    cost[iv] = e.cost
                elif not e.full and e.bound < INF:
                    cost[iv] = e.bound  # a quick evaluation placed nothing: the master may ask for the full one
                # else: none of its slicings packs, so it stays out (a Benders cut)
            out = self.solve_master(cost, self.left())
            if out is None:
                break
            res, master_bound, chosen = out
            if all(e.bound >= e.cost for e in evaluated.values()):  # else the costs are upper values
                bound = max(bound, master_bound)
            fresh = [iv for iv in chosen if iv not in evaluated or not evaluated[iv].full]
            if not fresh:
                best_keys = chosen
                status = "optimal" if res == cp_model.OPTIMAL else "time_limit"
                break
            if self.budget.expired():
                break
            self.ev.evaluate_many(fresh, processes=min(self.st.workers, len(fresh)), budget=self.budget)
            self.report(bound)
        return status, bound, best_keys, iterations

    def refine(self, status: PlanStatus, bound: int) -> tuple[PlanStatus, int, bool]:
        """Phase 3: where an evaluation left a gap (a quick one, or a packing or load-row solve cut by its
        budget), the bound is the master over every interval's bound; refine the intervals it rests on
        (every master over the bounds is a valid bound: each interval's bound is at or below its true
        cost).  Returns (status, bound, whether anything was refined)."""
        refined = False
        evaluated = self.ev.evaluated
        while any(e.bound < e.cost for e in evaluated.values()):
            out = self.solve_master(self.costs(True), self.left(10.0))
            if out is None:
                break
            bound = max(bound, out[1])
            weak = [iv for iv in out[2] if iv in evaluated and not evaluated[iv].full]
            if weak and self.budget.expired():
                status = "time_limit"  # the gap could still have been narrowed
            if not weak or self.budget.expired():
                break
            self.ev.evaluate_many(weak, processes=min(self.st.workers, len(weak)), budget=self.budget)
            self.report(bound)
            refined = True
        return status, bound, refined

    def tighten(self, bound: int) -> tuple[int, bool]:
        """Phase 4: time left and still a gap: the intervals the bound rests on whose own solve left one
        (a load-row or packing solve cut by its budget) are evaluated again, with
        :data:`~lgopt.strategies.cpsat.evaluate.EFFORT_GROWTH` times the budget."""
        refined = False
        evaluated = self.ev.evaluated
        while not self.budget.expired():
            out = self.solve_master(self.costs(True), self.left(10.0))
            if out is None:
                break
            bound = max(bound, out[1])
            if bound >= self.best_known():
                break
            loose = [iv for iv in out[2] if iv in evaluated and evaluated[iv].bound < evaluated[iv].cost
                     and evaluated[iv].effort < MAX_EFFORT]
            if not loose:
                break
            for iv in loose:
                self.ev.evaluate(*iv, full=True, budget=self.budget, effort=evaluated[iv].effort + 1)
            self.report(bound)
            refined = True
        return bound, refined

    def best_plan(self, best_keys: list[Key] | None, refined: bool) -> list[GroupPlan]:
        """The groups of the best plan over evaluated intervals (refinement may have improved it), placed;
        candidates were judged on feasibility, so the kept groups' soft bank conflicts are reduced now."""
        if best_keys is None or refined:
            known = self.costs(False)
            path = cheapest(self.n_ops, self.starts, known, self.single)
            out = self.solve_master(known, self.left(10.0))
            if out is not None:
                best_keys = out[2]
            elif path:
                best_keys = path
        if best_keys is None:
            return list(self.base.groups)
        return [self.ev.materialize(*iv, polish=True) for iv in best_keys]

    def run(self) -> Plan:
        space, st = self.space, self.st
        known = set(self.intervals)
        for iv in _greedy_intervals(space.net, self.base) + [iv for iv in space.trusted_intervals() if iv in known]:
            self.ev.evaluate(*iv, budget=self.budget)
        self.report(0)
        rounds, priced_bound, todo = self.price()
        status, bound, best_keys, iterations = self.master_loop(int(priced_bound), bool(todo))
        status, bound, refined = self.refine(status, bound)
        bound, tightened = self.tighten(bound)
        groups = self.best_plan(best_keys, refined or tightened)
        evaluated = self.ev.evaluated
        search = space.settings
        extra = {"formulation": "decomposed", "pricing_rounds": rounds, "master_iterations": iterations,
                 "intervals": len(self.intervals), "intervals_evaluated": len(evaluated),
                 "distinct_evaluations": self.ev.evaluations,
                 "unknown_packings": sum(1 for e in evaluated.values() if e.bound < e.cost),
                 "space": "contiguous runs of the topological order up to "
                 f"{search.max_group_ops} ops; N slices 1..batch/unit; H slices up to the first that breaks a "
                 f"slicing rule (<= {search.max_h_slices}); column (W) slices of row-op groups (<= "
                 f"{search.max_w_slices}); channel (heads) slices of channel-local groups (<= {search.max_c_slices})"
                 "; lgopt's pipelined timestep table, "
                 + ("any weight load row in unsliced groups" if space.free_loads else
                    "its own weight load rows (the cost model moves them as the compiler does)")
                 + "; exact packing" + (HANDOVER_SPACE if space.handover else "")}
        if self.budget.halted:
            extra["stopped"] = (f"its bound {bound:,} reached {st.stop_bound:,}: no plan in the space beats the "
                                "caller's goal")
            status = "feasible" if status == "time_limit" else status
        return result(space.net, space.chip, search, st, groups, self.base, bound, status, self.budget, extra)


def _through(fwd: list[list[float]], bwd: list[list[float]], lb: dict[Key, int]) -> Callable[[Key], float]:
    """The cheapest plan through a candidate at its lower bound (reduced-cost pricing)."""
    def through(iv: Key) -> float:
        return fwd[iv[0]][state_in(iv)] + lb[iv] + bwd[iv[1] + 1][state_out(iv)]
    return through

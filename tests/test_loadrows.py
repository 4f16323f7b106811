"""Weight load rows chosen with the offsets: exact cost, valid bounds, brute force, verified plans."""

import itertools
from dataclasses import replace

import pytest
from dags import _op
from ortools.sat.python import cp_model

from lgopt.check.verify import verify_plan
from lgopt.cost.pipeline import group_cost
from lgopt.group.alloc import Allocation, count_bank_conflicts, exact_pack, pack_items, polish_banks
from lgopt.group.build import place, schedule
from lgopt.group.pack import check_packing
from lgopt.hw.chip import get_chip
from lgopt.model.network import Network, Tensor, Weight, check_network
from lgopt.strategies.cpsat.bounds import whole_load_bound
from lgopt.strategies.cpsat.group_model import add_group
from lgopt.strategies.cpsat.loadrows import greedy_loads, load_instance, lp_bound, solve_loads, table_bound
from lgopt.strategies.cpsat.loadtable import chosen_weights, current_loads, lifetime, load_options, with_loads
from lgopt.strategies.cpsat.optimise import CpsatSettings, optimise
from lgopt.strategies.greedy import greedy

CHIP = get_chip("bm1684x", {"lmem_bytes": "32K"})


def _funnel() -> Network:
    """Compute-heavy wide layers first, weight-heavy narrow layers last: the seed's load rule stalls."""
    t = {}

    def ten(name, c, h, w):
        t[name] = Tensor(name, (1, c, h, w), "f16", (1, c, h, w))
        return name

    def conv(name, src, dst, ic, oc, k=3, s=1):
        return _op(name, "Conv", [src], [dst], {"kernel": (k, k), "strides": (s, s), "dilations": (1, 1),
                                               "pads": (k // 2,) * 4, "group": 1},
                   [Weight(f"{name}.w", (oc, ic, k, k), "f16", "filter")])

    ten("x", 64, 48, 48)
    ops = [conv("c0", "x", ten("a", 64, 48, 48), 64, 64),
           conv("c1", "a", ten("b", 64, 48, 48), 64, 64),
           conv("c2", "b", ten("c", 128, 12, 12), 64, 128, s=4),
           conv("c3", "c", ten("d", 256, 12, 12), 128, 256, k=1),
           conv("c4", "d", ten("y", 256, 12, 12), 256, 256, k=1)]
    return check_network(Network("funnel", t, tuple(ops), ("x",), ("y",)))


def _table():
    net = _funnel()
    return net, schedule(net, CHIP, [o.name for o in net.ops], 1, 1)


def _brute(net, g):
    """Every load choice, packed exactly: the true optimum of the table."""
    use = chosen_weights(g)
    names = sorted(use)
    best = None
    for choice in itertools.product(*(load_options(use[o], len(g.rows)) for o in names)):
        t = with_loads(g, dict(zip(names, choice)))
        v = group_cost(CHIP, net, t)["cycles"]
        if best is not None and v >= best:
            continue
        if isinstance(exact_pack(net, CHIP, t, "off", 20.0), dict):
            best = v
    return best


def _per_row_optimum(net, g, capacity):
    """Every load choice under "the bytes live in each row fit": the relaxation's optimum (None: none fits)."""
    inst = load_instance(CHIP, net, g, capacity)
    best = None
    for choice in itertools.product(*(load_options(w.use, inst.rows) for w in inst.weights)):
        live = list(inst.live)
        for w, ld in zip(inst.weights, choice):
            for r in set(lifetime(ld, w.use, inst.rows)):
                live[r] += w.size
        if max(live) > capacity:
            continue
        v = group_cost(CHIP, net, with_loads(g, {w.name: ld for w, ld in zip(inst.weights, choice)}))["cycles"]
        best = v if best is None else min(best, v)
    return best


@pytest.mark.parametrize("capacity", [1 << 30, 14336, 13824, 12800, 12288])  # LMEM binds below 14848
def test_bounds_and_relaxation_against_brute_force(capacity):
    """The fluid, whole-load and LP bounds never pass the per-row optimum; CP-SAT with the exposure cut
    reaches it exactly; the LP says infeasible only when no choice fits."""
    net, g = _table()
    truth = _per_row_optimum(net, g, capacity)
    inst = load_instance(CHIP, net, g, capacity)
    lp = lp_bound(inst)
    if truth is None:
        assert lp is None  # here not even a fractional choice fits
        return
    assert lp is not None and inst.fluid() <= lp <= truth
    slack = [max(0, s) for s in inst.slack()]
    assert inst.base.cycles() - sum(slack) + whole_load_bound(slack, [(w.use, w.dma) for w in inst.weights]) <= truth
    m = cp_model.CpModel()
    gv = add_group(m, net, CHIP, g, exact=False, capacity=capacity)
    m.minimize(gv.cost)
    s = cp_model.CpSolver()
    assert s.solve(m) == cp_model.OPTIMAL and int(s.objective_value) == truth



def test_model_cost_is_group_cost_for_every_choice():
    net, g = _table()
    use = chosen_weights(g)
    names = sorted(use)
    choices = list(itertools.product(*(load_options(use[o], len(g.rows)) for o in names)))
    for choice in choices[:: max(1, len(choices) // 12)]:
        m = cp_model.CpModel()
        gv = add_group(m, net, CHIP, g, exact=False, capacity=1 << 30)
        for o, ld in zip(names, choice):
            for x, opt in gv.loads[o]:
                m.add(x == int(opt == ld))
        m.minimize(gv.cost)
        s = cp_model.CpSolver()
        assert s.solve(m) == cp_model.OPTIMAL
        truth = group_cost(CHIP, net, with_loads(g, dict(zip(names, choice))))["cycles"]
        assert int(s.objective_value) == truth
        assert load_instance(CHIP, net, g).cycles(dict(zip(names, choice))) == truth


def test_solve_matches_brute_force_and_beats_the_seed_rule():
    net, g = _table()
    truth = _brute(net, g)
    res = solve_loads(net, CHIP, g, bank_rule="off", time_limit=10)
    assert res.value == truth
    assert res.status == "optimal" and res.bound == truth
    assert table_bound(CHIP, net, g) <= truth
    assert truth < group_cost(CHIP, net, g)["cycles"]  # the seed's rule is not optimal here
    placed = with_loads(g, res.loads)
    assert group_cost(CHIP, net, placed)["cycles"] == res.value


def test_greedy_loads_are_legal():
    net, g = _table()
    use = chosen_weights(g)
    loads = greedy_loads(CHIP, net, g)
    assert set(loads) == set(use)
    for o, ld in loads.items():
        assert ld in load_options(use[o], len(g.rows))
    assert current_loads(with_loads(g, loads)) == loads


@pytest.mark.parametrize("form", ["decomposed", "monolithic"])
def test_optimiser_plans_with_moved_loads_verify(form):
    net = _funnel()
    base = greedy(net, CHIP)
    plan = optimise(net, CHIP, st=CpsatSettings(formulation=form, time_limit=60))
    assert verify_plan(net, plan) == []
    assert plan.status == "optimal"
    assert plan.cost["cycles"] < base.cost["cycles"]
    moved = [g for g in plan.groups if g.num_slices == 1 and current_loads(g) != current_loads(
        schedule(net, CHIP, g.ops, 1, 1))]
    assert moved, "the optimum should load some weight away from the seed's row"


def test_verifier_rejects_a_load_in_the_row_of_use():
    net, g = _table()
    use = chosen_weights(g)
    o = max(use, key=use.get)
    bad = with_loads(g, {o: (use[o], 1)})  # not a legal option: loaded while its op runs
    offs = exact_pack(net, CHIP, bad, "off", 10.0)
    assert isinstance(offs, dict)
    placed = place(net, CHIP, bad, Allocation(offs, 0, 0))
    plan = replace(greedy(net, CHIP), groups=(placed,), steps=(("group", 0),))
    assert any(f"weight {o} is used in the row it is loaded" in str(v) for v in verify_plan(net, plan))


def test_polish_banks_keeps_the_packing_and_never_adds_conflicts():
    net, g = _table()
    offs = exact_pack(net, CHIP, g, "off", 10.0)
    assert isinstance(offs, dict)
    before = count_bank_conflicts(net, CHIP, g, offs)
    after = polish_banks(net, CHIP, g, offs)
    items = pack_items(g)
    assert check_packing(items, {str(k): v for k, v in after.items()}, CHIP.lmem_bytes, CHIP.align_bytes) is None
    assert before > 0 and count_bank_conflicts(net, CHIP, g, after) < before

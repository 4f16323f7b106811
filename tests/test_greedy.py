"""Every plan the greedy writes, for every bundled problem on every chip preset, passes the verifier."""

import pytest
from conftest import PROBLEMS

from lgopt.check.verify import verify_plan
from lgopt.hw.chip import PRESETS, get_chip
from lgopt.io.problem import load_problem
from lgopt.model.network import with_batch
from lgopt.strategies.greedy import greedy

NAMES = sorted(p.stem for p in PROBLEMS.glob("*.json"))


@pytest.mark.parametrize("chip", sorted(PRESETS))
@pytest.mark.parametrize("name", NAMES)
def test_greedy_plans_verify(name, chip):
    net = load_problem(PROBLEMS / f"{name}.json")
    plan = greedy(net, get_chip(chip))
    assert verify_plan(net, plan) == []
    assert plan.cost["cycles"] >= plan.cost["lower_bound_cycles"]
    assert plan.cost["traffic_bytes"] >= plan.cost["lower_bound_traffic_bytes"]
    grouped = {o for g in plan.groups for o in g.ops}
    assert grouped | set(plan.global_layers) == {op.name for op in net.ops}


def test_small_lmem_slices_h_within_the_h2_rule():
    net = load_problem(PROBLEMS / "resnet18.json")
    plan = greedy(net, get_chip("cv181x"))
    assert any(g.h_slices > 1 for g in plan.groups)
    for g in plan.groups:
        for t, ws in g.windows.items():
            H = net.tensor(t).h
            if H > 1 and g.h_slices > 1:
                assert sum(w[3] - w[2] for w in ws[:g.h_slices]) - H <= 0.5 * H


def test_batch4_slices_n_first():
    net = with_batch(load_problem(PROBLEMS / "unet.json"), 4)
    plan = greedy(net, get_chip("bm1684x"))
    assert verify_plan(net, plan) == []
    assert all(g.n_slices == 4 for g in plan.groups if g.num_slices > 1)
    assert all(g.h_slices == 1 for g in plan.groups if g.n_slices < 4)


def test_greedy_is_deterministic():
    net = load_problem(PROBLEMS / "mobilenet_v2.json")
    a, b = greedy(net, get_chip("cv184x")), greedy(net, get_chip("cv184x"))
    assert a.groups == b.groups and a.cost["cycles"] == b.cost["cycles"]

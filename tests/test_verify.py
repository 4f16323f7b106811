"""The verifier accepts what the planner builds and names what deliberately broken plans break."""

from dataclasses import replace

import pytest
from dags import dags
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lgopt.check.verify import verify_plan
from lgopt.group.build import assemble, try_group
from lgopt.hw.chip import get_chip
from lgopt.io.planfile import load_plan, plan_from_dict, plan_to_dict, save_plan
from lgopt.io.problem import load_problem


@pytest.fixture(scope="module")
def resnet(problems_dir):
    return load_problem(problems_dir / "resnet18.json")


@pytest.fixture(scope="module")
def good_plan(resnet):
    chip = get_chip("bm1684x")
    names = [op.name for op in resnet.ops]
    g0, why0 = try_group(resnet, chip, names[:6], 1, 2)
    g1, why1 = try_group(resnet, chip, names[6:12], 1, 1)
    assert g0 is not None and g1 is not None, (why0, why1)
    return assemble(resnet, chip, [g0, g1], "manual", h_ratio=0.5, bank_rule="soft")


def _first(net, plan):
    vs = verify_plan(net, plan)
    return str(vs[0]) if vs else ""


def _group(plan, gi, **changes):
    groups = list(plan.groups)
    groups[gi] = replace(groups[gi], **changes)
    return replace(plan, groups=tuple(groups))


def _buffers(plan, gi, fn):
    return _group(plan, gi, buffers=tuple(fn(b) for b in plan.groups[gi].buffers))


def test_good_plan_passes_and_round_trips(resnet, good_plan, tmp_path):
    assert verify_plan(resnet, good_plan) == []
    save_plan(good_plan, tmp_path / "p.json")
    again = load_plan(tmp_path / "p.json")
    assert plan_to_dict(again) == plan_to_dict(good_plan)
    assert verify_plan(resnet, again) == []


def test_overlapping_buffers_rejected(resnet, good_plan):
    g = good_plan.groups[0]
    T = len(g.rows)
    a, b = next((a, b) for a in g.buffers for b in g.buffers
                if a.id < b.id and a.rows(T) & b.rows(T) and a.offset != b.offset)
    bad = _buffers(good_plan, 0, lambda x: replace(x, offset=a.offset) if x.id == b.id else x)
    assert "overlap in LMEM" in _first(resnet, bad)


def test_out_of_lmem_rejected(resnet, good_plan):
    lmem = good_plan.chip["lmem_bytes"]
    bad = _buffers(good_plan, 1, lambda x: replace(x, offset=lmem - 64) if x.id == 0 else x)
    msg = _first(resnet, bad)
    assert "past LMEM" in msg or "overlap" in msg
    only = [str(v) for v in verify_plan(resnet, bad)]
    assert any("past LMEM" in v for v in only)


def test_misaligned_offset_rejected(resnet, good_plan):
    bad = _buffers(good_plan, 0, lambda x: replace(x, offset=x.offset + 4) if x.id == 0 else x)
    assert any("aligned" in str(v) for v in verify_plan(resnet, bad))


def test_missing_op_rejected(resnet, good_plan):
    dropped = good_plan.steps[-1]
    bad = replace(good_plan, steps=good_plan.steps[:-1])
    assert f"op {dropped[1]} is missing" in _first(resnet, bad)


def test_duplicated_op_rejected(resnet, good_plan):
    bad = replace(good_plan, steps=good_plan.steps + (("global", good_plan.groups[0].ops[0]),))
    assert "appears twice" in _first(resnet, bad)


def test_h_rule_rejected(resnet, good_plan):
    assert good_plan.groups[0].h_slices == 2
    bad = replace(good_plan, h_ratio=0.01)
    assert "h/2 rule" in _first(resnet, bad)


def test_shortened_lifetime_rejected(resnet, good_plan):
    g = good_plan.groups[0]
    T = len(g.rows)
    victim = next(b for b in g.buffers if b.kind == "activation" and not b.resident and b.start != b.end)
    bad = _buffers(good_plan, 0, lambda x: replace(x, end=(x.end - 1) % T) if x.id == victim.id else x)
    assert "freed before row" in _first(resnet, bad)


def test_shrunk_halo_rejected(resnet, good_plan):
    g = good_plan.groups[0]
    t = g.ops and resnet.op(g.ops[0]).inputs[0]
    ws = list(g.windows[t])
    n0, n1, h0, h1 = ws[1]
    ws[1] = (n0, n1, h0 + 1, h1)  # one row less of halo
    bad = _group(good_plan, 0, windows={**g.windows, t: tuple(ws)})
    assert "which read rows" in _first(resnet, bad)


def test_store_coverage_rejected(resnet, good_plan):
    g = good_plan.groups[0]
    out = next(iter(g.stores))
    parts = list(g.stores[out])
    n0, n1, h0, h1 = parts[0]
    parts[0] = (n0, n1, h0, h1 - 1)
    bad = _group(good_plan, 0, stores={**g.stores, out: tuple(parts)})
    assert "cover element" in _first(resnet, bad)


def test_undersized_buffer_rejected(resnet, good_plan):
    bad = _buffers(good_plan, 1, lambda x: replace(x, size=x.size // 2) if x.kind == "activation" else x)
    assert any("largest slice needs" in str(v) for v in verify_plan(resnet, bad))


def test_non_convex_group_rejected(resnet):
    """conv1 -> maxpool -> (branch) ... grouping conv1 with the Add but not its inputs' path."""
    chip = get_chip("bm1684x")
    names = [op.name for op in resnet.ops]
    add = next(op for op in resnet.ops if op.type == "Add")
    # a group holding maxpool and the first Add but not the convs in between is not convex
    members = [names[1], add.name]
    from lgopt.model.plan import GroupPlan

    g = GroupPlan(tuple(members), 1, 1, (), (), (), {}, {})
    steps = [("group", 0)] + [("global", n) for n in names if n not in members]
    plan = assemble(resnet, chip, [], "manual", h_ratio=0.5, bank_rule="soft")
    plan = replace(plan, groups=(g,), steps=tuple(steps))
    msgs = [str(v) for v in verify_plan(resnet, plan)]
    assert any("not convex" in m for m in msgs)
    assert any("before any earlier step produced it" in m for m in msgs)


def test_bank_rules(resnet, good_plan):
    """With one bank every op's operands share it: hard rules reject, soft rules must count it."""
    one_bank = replace(good_plan, chip={**good_plan.chip, "lmem_banks": 1})
    assert any("bank conflict" in str(v) for v in verify_plan(resnet, replace(one_bank, bank_rule="hard")))
    assert any("reports 0 bank conflicts" in str(v) for v in verify_plan(resnet, one_bank))
    assert verify_plan(resnet, replace(one_bank, bank_rule="off")) == []
    assert all(g.cost["bank_conflicts"] == 0 for g in good_plan.groups)


def test_wrong_model_rejected(good_plan, problems_dir):
    other = load_problem(problems_dir / "vgg16.json")
    assert "another model" in _first(other, good_plan)


def test_malformed_plan_is_an_input_error():
    from lgopt.errors import LgoptError

    with pytest.raises(LgoptError):
        plan_from_dict({"format": "lgopt-plan", "version": 1})
    with pytest.raises(LgoptError):
        plan_from_dict({"format": "nope"})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(), st.integers(1, 2), st.integers(1, 4), st.sampled_from(["bm1684x", "cv181x", "bm1684"]),
       st.sampled_from(["soft", "hard", "off"]))
def test_every_plan_the_planner_builds_verifies(net, n, h, chip_name, bank_rule):
    chip = get_chip(chip_name)
    names = [op.name for op in net.ops]
    g, why = try_group(net, chip, names, n, h, bank_rule=bank_rule)
    if g is None:
        return
    plan = assemble(net, chip, [g], "manual", h_ratio=0.5, bank_rule=bank_rule)
    assert verify_plan(net, plan) == []


@pytest.fixture(scope="module")
def handover_plan():
    """Two groups of the head/tail net that meet in LMEM: the head hands its output to the tail."""
    from test_cpsat import SMALL, _tiny

    from lgopt.group.totals import finish
    from lgopt.strategies.cpsat.evaluate import Evaluator
    from lgopt.strategies.cpsat.space import CandidateSpace

    net = _tiny("head_tail")
    with Evaluator(CandidateSpace(net, SMALL)) as ev:
        groups = [ev.materialize(0, 2, "out"), ev.materialize(3, 4, "in")]
    return net, finish(SMALL, net, assemble(net, SMALL, groups, "test", h_ratio=0.5, bank_rule="soft"))


def test_handover_plan_passes_and_round_trips(handover_plan):
    from lgopt.check.simulate import simulate

    net, plan = handover_plan
    assert plan.groups[0].kept_out == plan.groups[1].kept_in == ("b",)
    assert "b" not in plan.groups[0].stores  # nobody else reads it: no store, no reload
    assert verify_plan(net, plan) == []
    assert simulate(net, plan).ok
    assert plan_from_dict(plan_to_dict(plan)) == plan


def test_handover_mismatches_rejected(handover_plan):
    from lgopt.check.simulate import simulate

    net, plan = handover_plan
    step = get_chip(plan.chip["name"]).align_bytes
    moved = _buffers(plan, 1, lambda b: replace(b, offset=b.offset - step) if b.name == "b" else b)
    assert any("reads it at" in str(v) for v in verify_plan(net, moved))
    assert not simulate(net, moved).ok  # the tail reads bytes the head never wrote
    orphan = replace(plan, groups=(replace(plan.groups[0], kept_out=()), plan.groups[1]))
    found = [str(v) for v in verify_plan(net, orphan)]
    assert any("does not hand over" in v for v in found)
    assert any("stored 0 times" in v or "needs 1 stored parts" in v for v in found)  # b never reaches GMEM
    apart = replace(plan, steps=(plan.steps[1], plan.steps[0]))
    assert verify_plan(net, apart)
    shrunk = _buffers(plan, 0, lambda b: replace(b, resident=False, start=2, end=2) if b.name == "b" else b)
    assert any("not resident" in str(v) for v in verify_plan(net, shrunk))


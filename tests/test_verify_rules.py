"""Rules the verifier enforces beyond a plan's shape: recorded costs recomputed, hand-over coverage, resident
preloads, no store of a tensor only the receiver reads, every overlap reported; and a property test that
corrupts valid plans in many ways and requires every corruption to be rejected."""

from dataclasses import replace

import pytest
import test_verify as tv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lgopt.group.totals import finish
from lgopt.model.plan import Transfer
from lgopt.report.verdict import verify

_buffers, _group = tv._buffers, tv._group
resnet, good_plan, handover_plan = tv.resnet, tv.good_plan, tv.handover_plan  # the fixtures, shared


def _msgs(net, plan):
    return [str(v) for v in verify(net, plan)]


@pytest.fixture(scope="module")
def costed(resnet, good_plan):
    """The hand-built plan with its costs attached, as every strategy leaves it."""
    from lgopt.group.totals import with_cost
    from lgopt.hw.chip import chip_from_dict

    chip = chip_from_dict(good_plan.chip)
    plan = replace(good_plan, groups=tuple(with_cost(chip, resnet, g) for g in good_plan.groups))
    plan = finish(chip, resnet, plan)
    assert verify(resnet, plan) == []
    return plan


def test_edited_cycles_or_traffic_rejected(resnet, costed):
    more = _group(costed, 0, cost={**costed.groups[0].cost, "cycles": costed.groups[0].cost["cycles"] - 1})
    assert any("records cycles" in m for m in _msgs(resnet, more))
    moved = _group(costed, 1, cost={**costed.groups[1].cost, "traffic_bytes": 0})
    assert any("records traffic_bytes 0" in m for m in _msgs(resnet, moved))
    total = replace(costed, cost={**costed.cost, "cycles": costed.cost["cycles"] // 2})
    assert any("records total cycles" in m for m in _msgs(resnet, total))
    peak = _group(costed, 0, cost={**costed.groups[0].cost, "lmem_peak": 64})
    assert any("records lmem_peak 64" in m for m in _msgs(resnet, peak))


def test_handover_of_rows_the_giver_never_produces_rejected(handover_plan):
    net, plan = handover_plan
    assert verify(net, plan) == []
    g = plan.groups[0]
    ws = list(g.windows["b"])
    n0, n1, h0, h1 = ws[-1]
    ws[-1] = (n0, n1, h0, h1 - 1)  # the head stops one row short; nobody in the head reads b
    short = _group(plan, 0, windows={**g.windows, "b": tuple(ws)})
    assert any("never produces" in m for m in _msgs(net, short))


def test_store_of_a_tensor_only_the_receiver_reads_rejected(handover_plan):
    net, plan = handover_plan
    g = plan.groups[0]
    last = len(g.rows) - 1
    rows = list(g.rows)
    rows[last] = replace(rows[last], stores=rows[last].stores + (Transfer("b", "activation", 2),))
    stored = _group(plan, 0, rows=tuple(rows), stores={**g.stores, "b": g.windows["b"]})
    assert any("only group 1 reads" in m for m in _msgs(net, stored))


def test_preload_in_an_unsliced_group_must_be_resident(resnet, good_plan):
    g = good_plan.groups[1]
    assert g.num_slices == 1 and not g.preloads
    r, tr = next((r, t) for r, row in enumerate(g.rows) for t in row.loads if t.kind == "weight")
    rows = list(g.rows)
    rows[r] = replace(rows[r], loads=tuple(t for t in rows[r].loads if t != tr))
    bad = _group(good_plan, 1, rows=tuple(rows), preloads=(tr.name,))
    assert any(f"weights of {tr.name} are preloaded" in m and "not resident" in m for m in _msgs(resnet, bad))


def test_every_overlap_is_reported(resnet, good_plan):
    g = good_plan.groups[0]
    T = len(g.rows)
    pairs = [(a, b) for a in g.buffers for b in g.buffers
             if a.id < b.id and a.rows(T) & b.rows(T) and a.offset != b.offset and a.size == b.size]
    first, second = pairs[0], next(p for p in pairs[1:] if not {p[0].id, p[1].id} & {pairs[0][0].id, pairs[0][1].id})
    move = {first[1].id: first[0].offset, second[1].id: second[0].offset}
    bad = _buffers(good_plan, 0, lambda b: replace(b, offset=move.get(b.id, b.offset)))
    assert sum("overlap in LMEM" in m for m in _msgs(resnet, bad)) >= 2


# --- corruptions: each is invalid by construction, and each must be rejected ---------------------------

def _corrupt(plan, kind, k, rnd):
    """``plan`` broken one way (``kind``), ``k`` and ``rnd`` choosing where; None when the plan has no
    place for this corruption."""
    groups = plan.groups
    gi = k % len(groups)
    g = groups[gi]
    if kind == "group_cost":
        field = ("cycles", "traffic_bytes", "tiu_cycles", "gdma_cycles")[rnd % 4]
        return _group(plan, gi, cost={**g.cost, field: g.cost[field] + 1 + rnd})
    if kind == "plan_cost":
        field = ("cycles", "traffic_bytes", "lower_bound_cycles", "lmem_peak", "bank_conflicts")[rnd % 5]
        return replace(plan, cost={**plan.cost, field: plan.cost[field] + 1 + rnd})
    if kind == "drop_step":
        return replace(plan, steps=plan.steps[:rnd % len(plan.steps)] + plan.steps[rnd % len(plan.steps) + 1:])
    if kind == "repeat_step":
        return replace(plan, steps=plan.steps + (plan.steps[rnd % len(plan.steps)],))
    if kind == "drop_op" and len(g.ops) > 1:
        return _group(plan, gi, ops=g.ops[:-1])
    if kind == "offset_out":
        b = g.buffers[rnd % len(g.buffers)]
        return _buffers(plan, gi, lambda x: replace(x, offset=plan.chip["lmem_bytes"]) if x.id == b.id else x)
    if kind == "misalign" and plan.chip["eu_bytes"] > 1:
        b = g.buffers[rnd % len(g.buffers)]
        return _buffers(plan, gi, lambda x: replace(x, offset=x.offset + 1) if x.id == b.id else x)
    if kind == "shrink":
        b = g.buffers[rnd % len(g.buffers)]
        return _buffers(plan, gi, lambda x: replace(x, size=0) if x.id == b.id else x)
    if kind == "one_row":  # every tensor and weight has events in two rows at least
        cands = [b for b in g.buffers if b.kind != "scratch" and len(b.rows(len(g.rows))) > 1]
        if cands:
            b = cands[rnd % len(cands)]
            r = b.start
            return _buffers(plan, gi, lambda x: replace(x, resident=False, start=r, end=r) if x.id == b.id else x)
    if kind == "drop_store_part" and g.stores:
        t = sorted(g.stores)[rnd % len(g.stores)]
        return _group(plan, gi, stores={**g.stores, t: g.stores[t][:-1]})
    if kind == "empty_window":
        t = sorted(g.windows)[rnd % len(g.windows)]
        ws = list(g.windows[t])
        n0, n1, h0, _ = ws[0]
        ws[0] = (n0, n1, h0, h0)
        return _group(plan, gi, windows={**g.windows, t: tuple(ws)})
    if kind == "bad_stage":
        rows = [(r, row) for r, row in enumerate(g.rows) if row.loads]
        if rows:
            r, row = rows[rnd % len(rows)]
            new = list(g.rows)
            new[r] = replace(row, loads=(replace(row.loads[0], stage=3),) + row.loads[1:])
            return _group(plan, gi, rows=tuple(new))
    if kind == "zero_slices":
        return _group(plan, gi, n_slices=0)
    if kind == "drop_load":
        rows = [(r, row) for r, row in enumerate(g.rows) if row.loads]
        if rows:
            r, row = rows[rnd % len(rows)]
            new = list(g.rows)
            new[r] = replace(row, loads=row.loads[1:])
            return _group(plan, gi, rows=tuple(new))
    if kind == "drop_handover" and g.kept_out:
        return _group(plan, gi, kept_out=())
    return None


KINDS = ["group_cost", "plan_cost", "drop_step", "repeat_step", "drop_op", "offset_out", "misalign", "shrink",
         "one_row", "drop_store_part", "empty_window", "bad_stage", "zero_slices", "drop_load", "drop_handover"]


@pytest.fixture(scope="module")
def valid_plans(resnet, costed, handover_plan, problems_dir):
    from lgopt.hw.chip import get_chip
    from lgopt.io.problem import load_problem
    from lgopt.strategies.greedy import greedy

    unet = load_problem(problems_dir / "unet.json")
    plans = [(resnet, costed), handover_plan, (unet, greedy(unet, get_chip("cv181x")))]
    for net, plan in plans:
        assert verify(net, plan) == []
    return plans


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(which=st.integers(0, 2), kind=st.sampled_from(KINDS), k=st.integers(0, 50), rnd=st.integers(0, 1000))
def test_every_corruption_is_rejected(valid_plans, which, kind, k, rnd):
    net, plan = valid_plans[which]
    if "lower_bound_cycles" not in plan.cost:
        from lgopt.hw.chip import chip_from_dict

        plan = finish(chip_from_dict(plan.chip), net, plan)
    bad = _corrupt(plan, kind, k, rnd)
    if bad is None or bad == plan:
        return
    assert verify(net, bad), (kind, k, rnd)


def test_an_input_converted_in_a_group_needs_both_slices_and_must_be_a_loaded_network_input():
    """``f32_in``: the group holds the f32 slice beside the converted one (a buffer of the f16 slice alone is
    too small), names only network inputs it loads, and a plan whose input no group converts pays the global
    Cast in its total (an edited total is caught)."""
    from conftest import PROBLEMS

    from lgopt.hw.chip import get_chip
    from lgopt.io.problem import load_problem
    from lgopt.strategies.greedy import greedy
    from lgopt.strategies.settings import SearchSettings
    from lgopt.tpumlir.casts import convert_io_in_groups

    net = load_problem(str(PROBLEMS / "unet.json"))
    chip = get_chip("bm1684x", {"cost_model": "tpu-mlir-1.30"})
    st_ = SearchSettings(h_ratio=None)
    plain = greedy(net, chip, st_)
    plan = convert_io_in_groups(net, chip, plain, st_)
    k, g = next((k, g) for k, g in enumerate(plan.groups) if g.f32_in)
    assert verify(net, plan) == []
    (t,) = g.f32_in
    narrow = replace(g, buffers=tuple(replace(b, size=b.size // 3) if (b.kind, b.name) == ("activation", t) else b
                                      for b in g.buffers))
    assert any(f"for {t} has" in m for m in _msgs(net, _group(plan, k, buffers=narrow.buffers)))
    other = next(x for x in g.windows if x != t)
    assert any("f32_in" in m for m in _msgs(net, _group(plan, k, f32_in=(other,))))
    from lgopt.cost.cycles import io_cast_cost

    cast = io_cast_cost(chip, net, plain)["cycles"]
    assert cast > 0 and verify(net, plain) == []
    cheap = replace(plain, cost={**plain.cost, "cycles": plain.cost["cycles"] - cast})  # the Cast left out
    assert any("records total cycles" in m for m in _msgs(net, cheap))

"""Rules the verifier once let through (``docs/plan-format.md`` §10–§12): a transfer's kind, weight loads of
ops outside the group, without weights or not in the model, stores of weights, preloads of ops without
weights, and buffers naming nothing the group uses.  Each test takes a valid greedy plan, breaks it one way,
and requires the verifier to name the rule (a violation, never an exception)."""

from dataclasses import replace

import pytest

from lgopt.hw.chip import chip_from_dict, get_chip
from lgopt.hw.sizing import weight_bytes
from lgopt.io.planfile import plan_from_dict, plan_to_dict
from lgopt.io.problem import load_problem
from lgopt.model.plan import Buffer, Transfer
from lgopt.report.verdict import verify
from lgopt.strategies.greedy import greedy

CASES = [("resnet18", "bm1684x"), ("unet", "cv181x")]


@pytest.fixture(scope="module", params=CASES, ids=["-".join(c) for c in CASES])
def valid(request, problems_dir):
    """A greedy plan with its costs, which the verifier accepts; and a group of it with a weighted op, an op
    without weights, and a sliced table if the plan has one."""
    model, chip_name = request.param
    net = load_problem(problems_dir / f"{model}.json")
    plan = greedy(net, get_chip(chip_name))
    assert verify(net, plan) == []
    chip = chip_from_dict(plan.chip)
    gi = max((k for k, g in enumerate(plan.groups)
              if any(weight_bytes(chip, net.op(n)) for n in g.ops)
              and any(not weight_bytes(chip, net.op(n)) for n in g.ops)),
             key=lambda k: (plan.groups[k].num_slices, len(plan.groups[k].ops)))
    return net, plan, chip, gi


def _msgs(net, plan):
    return [str(v) for v in verify(net, plan)]


def _group(plan, gi, **changes):
    groups = list(plan.groups)
    groups[gi] = replace(groups[gi], **changes)
    return replace(plan, groups=tuple(groups))


def _add(plan, gi, row, tr, side="loads"):
    """``plan`` with transfer ``tr`` added to ``side`` (loads or stores) of row ``row`` of group ``gi``."""
    rows = list(plan.groups[gi].rows)
    rows[row] = replace(rows[row], **{side: getattr(rows[row], side) + (tr,)})
    return _group(plan, gi, rows=tuple(rows))


def _weighted(net, chip, g):
    return [n for n in g.ops if weight_bytes(chip, net.op(n))]


def _weightless(net, chip, g):
    return [n for n in g.ops if not weight_bytes(chip, net.op(n))]


def _free_offset(chip, g, size):
    """An aligned offset past every buffer of ``g``: a buffer placed there overlaps none."""
    peak = max((b.offset + b.size for b in g.buffers), default=0)
    off = -(-peak // chip.align_bytes) * chip.align_bytes
    assert off + size <= chip.lmem_bytes, "no room to place an extra buffer"
    return off


def test_the_unmutated_plan_verifies(valid):
    net, plan, _chip, _gi = valid
    assert _msgs(net, plan) == []
    again = plan_from_dict(plan_to_dict(plan))
    assert _msgs(net, again) == []


# --- gap 1: a transfer's kind ------------------------------------------------------------------------------

@pytest.mark.parametrize("side", ["loads", "stores"])
def test_a_transfer_of_unknown_kind_is_rejected(valid, side):
    net, plan, _chip, gi = valid
    g = plan.groups[gi]
    r = next(r for r, row in enumerate(g.rows) if getattr(row, side))
    rows = list(g.rows)
    moves = getattr(rows[r], side)
    rows[r] = replace(rows[r], **{side: (replace(moves[0], kind="tensor"),) + moves[1:]})
    msgs = _msgs(net, _group(plan, gi, rows=tuple(rows)))
    assert msgs and f"transfer of {moves[0].name} has unknown kind 'tensor'" in msgs[0], msgs


def test_a_plan_file_with_an_unknown_transfer_kind_is_a_violation(valid):
    """Reading accepts any string; the verifier, not the reader, rejects it (exit 1, naming the rule)."""
    net, plan, _chip, gi = valid
    d = plan_to_dict(plan)
    row = next(row for row in d["groups"][gi]["timesteps"] if row["loads"])
    row["loads"][0]["kind"] = "weights"
    msgs = _msgs(net, plan_from_dict(d))
    assert msgs and "unknown kind 'weights'" in msgs[0], msgs


# --- gap 2: a weight load names a weighted op of the group -----------------------------------------------

def test_a_weight_load_of_an_op_outside_the_group_is_rejected(valid):
    net, plan, chip, gi = valid
    g = plan.groups[gi]
    other = next(op.name for op in net.ops if op.name not in g.ops and weight_bytes(chip, op))
    msgs = _msgs(net, _add(plan, gi, 0, Transfer(other, "weight", 1)))
    assert msgs == [f"group {gi}: the table loads the weights of {other}, which is not an op of the group"], msgs
    # its bytes were once added to the group's traffic; now no cost is recomputed from an unsound group


def test_a_weight_load_of_an_op_without_weights_is_rejected(valid):
    net, plan, chip, gi = valid
    name = _weightless(net, chip, plan.groups[gi])[0]
    msgs = _msgs(net, _add(plan, gi, 0, Transfer(name, "weight", 1)))
    assert msgs == [f"group {gi}: the table loads the weights of {name}, which has none"], msgs


def test_a_weight_load_of_no_op_at_all_is_a_violation_not_an_exception(valid):
    net, plan, _chip, gi = valid
    msgs = _msgs(net, _add(plan, gi, 0, Transfer("no such op", "weight", 1)))
    assert msgs == [f"group {gi}: the table loads the weights of no such op, which is not an op of the group"]


def test_a_preload_of_an_op_without_weights_is_rejected(valid):
    net, plan, chip, gi = valid
    g = plan.groups[gi]
    name = _weightless(net, chip, g)[0]
    msgs = _msgs(net, _group(plan, gi, preloads=g.preloads + (name,)))
    assert msgs == [f"group {gi}: preloads the weights of {name}, which has none"], msgs


# --- gap 3: stores move activations ------------------------------------------------------------------------

def test_a_store_of_weights_is_rejected(valid):
    net, plan, chip, gi = valid
    g = plan.groups[gi]
    name = _weighted(net, chip, g)[-1]
    last = len(g.rows) - 1
    msgs = _msgs(net, _add(plan, gi, last, Transfer(name, "weight", 1), side="stores"))
    assert msgs and msgs[0] == (f"group {gi}: the table stores the weights of {name}: a store moves an "
                                "activation the group produces"), msgs


def test_a_store_of_weights_of_an_op_without_any_is_rejected(valid):
    net, plan, chip, gi = valid
    g = plan.groups[gi]
    name = _weightless(net, chip, g)[0]
    msgs = _msgs(net, _add(plan, gi, len(g.rows) - 1, Transfer(name, "weight", 1), side="stores"))
    assert any("the table stores the weights of" in m for m in msgs), msgs


# --- gap 4: every buffer names something the group uses ----------------------------------------------------

def _with_buffer(plan, chip, gi, kind, name):
    g = plan.groups[gi]
    size = chip.align_bytes
    extra = Buffer(max(b.id for b in g.buffers) + 1, kind, name, size, 0, 0, offset=_free_offset(chip, g, size))
    return _group(plan, gi, buffers=g.buffers + (extra,)), extra.id


def test_an_activation_buffer_of_a_tensor_the_group_does_not_touch_is_rejected(valid):
    net, plan, chip, gi = valid
    g = plan.groups[gi]
    for name in (next(t for t in net.tensors if t not in g.windows), "no such tensor"):
        bad, bid = _with_buffer(plan, chip, gi, "activation", name)
        msgs = _msgs(net, bad)
        assert msgs == [f"group {gi}: buffer {bid} holds {name}, which the group does not touch"], msgs


def test_a_weight_buffer_of_anything_but_a_weighted_op_of_the_group_is_rejected(valid):
    net, plan, chip, gi = valid
    g = plan.groups[gi]
    outside = next(op.name for op in net.ops if op.name not in g.ops and weight_bytes(chip, op))
    for name, why in ((_weightless(net, chip, g)[0], "has none"), (outside, "is not an op of the group"),
                      ("no such op", "is not an op of the group")):
        bad, bid = _with_buffer(plan, chip, gi, "weight", name)
        msgs = _msgs(net, bad)
        # first the rule (the bank count may then also see the bogus buffer as one its op uses)
        assert msgs and msgs[0] == f"group {gi}: buffer {bid} holds the weights of {name}, which {why}", msgs


def test_a_scratch_buffer_of_an_op_outside_the_group_is_rejected(valid):
    """Already a rule (§12.3); here beside the others so every buffer kind is covered."""
    net, plan, chip, gi = valid
    outside = next(op.name for op in net.ops if op.name not in plan.groups[gi].ops)
    bad, bid = _with_buffer(plan, chip, gi, "scratch", outside)
    assert any(f"scratch buffer {bid} belongs to {outside}, which is not in the group" in m
               for m in _msgs(net, bad))

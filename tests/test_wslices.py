"""W slices (TPU-MLIR's ``shape_secs`` ``[n, 1, 1, h, w]``): windows with column halos, checked by the verifier
on its own, executed by the simulator exactly like the unsliced network, costed by their DMA runs, written to
plan files and caches and read back from TPU-MLIR's own yolov5s_like / BM1688 grouping."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import CAL, PROBLEMS, need, net_of
from dags import dags
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lgopt.check.simulate import simulate
from lgopt.check.verify import verify_plan
from lgopt.cost.pipeline import group_cost
from lgopt.cost.work import activation_transfer
from lgopt.group.build import assemble, try_group
from lgopt.group.totals import finish, with_cost
from lgopt.hw.chip import get_chip
from lgopt.io.onnx_import import import_onnx
from lgopt.io.planfile import plan_from_dict, plan_to_dict
from lgopt.report.verdict import verify
from lgopt.tpumlir.export import export_tpumlir
from lgopt.tpumlir.grouping import GroupingInfeasible, score


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(max_ops=4, two_d=True), st.integers(1, 3), st.integers(2, 4), st.sampled_from([None, 0.5]))
def test_random_w_sliced_groups_verify_and_simulate_exactly(net, h, w, ratio):
    chip = get_chip("bm1684x")
    g, _ = try_group(net, chip, [op.name for op in net.ops], 1, h, ratio, w_slices=w)
    if g is None:
        return
    assert g.num_slices == h * w and set(g.w_windows) == set(g.windows)
    plan = assemble(net, chip, [g], "manual", h_ratio=ratio, bank_rule="soft")
    assert verify_plan(net, plan) == []
    res = simulate(net, plan)
    assert res.ok, res.summary()


@pytest.fixture(scope="module")
def yolo_w():
    """The head of a small yolov5s (6x6 stride-2 stem, SiLU, 3x3 stride-2 conv) in 2 H x 3 W slices."""
    net = import_onnx(PROBLEMS / "onnx" / "yolov5s.onnx", dtype="f16", input_shapes={"input": (1, 3, 64, 64)},
                      name="yolov5s")
    chip = get_chip("bm1684x")
    ops = [op.name for op in net.ops[:3]]
    g, why = try_group(net, chip, ops, 1, 2, None, w_slices=3)
    assert g is not None, why
    return net, finish(chip, net, assemble(net, chip, [with_cost(chip, net, g)], "manual", h_ratio=None,
                                           bank_rule="soft"))


def test_w_sliced_group_equals_unsliced_run(yolo_w):
    net, plan = yolo_w
    g = plan.groups[0]
    assert (g.n_slices, g.h_slices, g.w_slices) == (1, 2, 3)
    x = net.op(g.ops[0]).inputs[0]
    assert len({c for c in g.w_windows[x]}) == 3 and g.w_windows[x][0][1] > g.w_windows[x][1][0]  # halos overlap
    assert verify(net, plan) == []
    res = simulate(net, plan)
    assert res.ok and res.compared >= 1, res.summary()
    unsliced, _ = try_group(net, get_chip("bm1684x"), g.ops, 1, 1, None)
    assert unsliced is not None and unsliced.w_windows == {}
    # six slices each issue their own ops and move rows in pieces: never cheaper than one slice
    assert group_cost(get_chip("bm1684x"), net, g)["tiu_cycles"] >= group_cost(get_chip("bm1684x"), net,
                                                                                   unsliced)["tiu_cycles"]


def test_short_w_halo_is_caught_by_verifier_and_simulator(yolo_w):
    net, plan = yolo_w
    g = plan.groups[0]
    x = net.op(g.ops[0]).inputs[0]
    cols = list(g.w_windows[x])
    w0, w1 = cols[1]
    cols[1] = (w0 + 1, w1)  # one column less of halo on the left of the middle W slice
    bad = replace(plan, groups=(replace(g, w_windows={**g.w_windows, x: tuple(cols)}),))
    vs = verify_plan(net, bad)
    assert vs and "columns" in str(vs[0]) and "slice 1" in str(vs[0])
    res = simulate(net, bad)
    assert not res.ok and res.mismatch is not None and res.mismatch.slice in (1, 4)


def test_w_windows_must_match_w_slices(yolo_w):
    net, plan = yolo_w
    g = plan.groups[0]
    dropped = replace(plan, groups=(replace(g, w_windows={}),))
    assert any("W windows" in str(v) for v in verify_plan(net, dropped))
    hs, _ = try_group(net, get_chip("bm1684x"), g.ops, 1, 2, None)
    full = {t: ((0, net.tensor(t).w),) * 2 for t in hs.windows}
    given_anyway = replace(plan, groups=(replace(hs, w_windows=full),))
    assert any("w_slices is 1" in str(v) for v in verify_plan(net, given_anyway))


def test_plan_file_round_trip_and_old_plans(yolo_w):
    net, plan = yolo_w
    d = plan_to_dict(plan)
    assert d["groups"][0]["w_slices"] == 3 and plan_from_dict(d) == plan
    old, _ = try_group(net, get_chip("bm1684x"), plan.groups[0].ops, 1, 2, None)
    od = plan_to_dict(replace(plan, groups=(old,)))
    assert not {"w_slices", "w_windows", "w_stores"} & set(od["groups"][0])  # written as before W slices
    assert plan_from_dict(od).groups[0].w_slices == 1


def test_w_slice_transfers_are_runs_per_row():
    net = net_of(str(need(CAL / "onnx" / "yolov5s_like.weightless.onnx")))
    t = net.ops[0].inputs[0]
    n, c, h, w = net.tensor(t).shape
    whole = activation_transfer(net, t, 1, 40)
    half = activation_transfer(net, t, 1, 40, w // 2)
    assert whole == (c * 40 * w * 2, c, False) and half == (c * 40 * (w // 2) * 2, c * 40, False)
    assert activation_transfer(net, t, 1, 40, w) == whole


def _opt2(tmp_path=None):
    net = net_of(str(need(CAL / "onnx" / "yolov5s_like.weightless.onnx")))
    return net, str(need(CAL / "caches" / "yolov5s_like_bm1688" / "opt2.layer_group_cache.json"))


def test_tpu_mlirs_w_sliced_grouping_loads_verifies_and_exports(tmp_path):
    net, ref = _opt2()
    chip = get_chip("bm1688")
    plan, info = score(net, chip, ref)
    cache = json.loads(Path(ref).read_text())["subfunc_0"]["GroupLayer"]
    assert [[g.n_slices, 1, 1, g.h_slices, g.w_slices] for g in plan.groups] == [c["shape_secs"] for c in cache]
    assert plan.groups[0].w_slices == 2 and info["adjusted"] == []
    assert verify(net, plan) == []
    out = export_tpumlir(plan, net, ref)
    assert [g["shape_secs"] for g in out["subfunc_0"]["GroupLayer"]] == [c["shape_secs"] for c in cache]


@pytest.mark.parametrize("secs, why", [([1, 2, 1, 16, 1], "csecs=2 but /b0/conv/Conv a convolution reads every "
                                                              "input channel"),
                                       ([1, 1, 2, 16, 1], "not D")])
def test_c_slices_of_a_conv_and_d_slices_stay_infeasible(tmp_path, secs, why):
    """lgopt builds a cache's csecs only for a group whose ops keep each channel to itself (tests/test_heads_slices.py);
    a conv reads every channel, and lgopt has no D axis."""
    net, ref = _opt2()
    d = json.loads(Path(ref).read_text())
    d["subfunc_0"]["GroupLayer"][0]["shape_secs"] = secs
    p = tmp_path / "c.layer_group_cache.json"
    p.write_text(json.dumps(d))
    with pytest.raises(GroupingInfeasible) as e:
        score(net, get_chip("bm1688"), str(p))
    assert e.value.group_index == 0 and why in e.value.reason


def test_compiler_space_search_starts_from_a_w_sliced_reference(tmp_path):
    """``--reference`` with TPU-MLIR's W-sliced grouping: lgopt builds it as the fallback and keeps it when its own
    best is not predicted faster by the margin; the plan written carries the W slices and verifies."""
    from lgopt.cli import main
    from lgopt.io.planfile import load_plan

    _, ref = _opt2()
    model = str(CAL / "onnx" / "yolov5s_like.weightless.onnx")
    out = tmp_path / "p.json"
    assert main(["solve", model, "--dtype", "f16", "--chip", "bm1688", "--set", "cost_model=tpu-mlir-1.30",
                 "--strategy", "greedy", "--reference", ref, "-o", str(out)]) == 0
    plan = load_plan(out)
    assert plan.solver["reference_cycles"] is not None and "reference_unreadable" not in plan.solver
    if "kept_reference" in plan.solver:
        assert plan.groups[0].w_slices == 2
    assert verify(net_of(model), plan) == []


def test_the_h2_rule_has_its_analogue_on_w_halos_and_whole_reads_are_exempt():
    """A 7 x 7 conv on 16 columns in 4 W slices reads input windows of 7, 10, 10 and 7 columns (34 - 16 = 18
    columns repeated, where half of W allows 8): refused under the h/2 rule and allowed under TPU-MLIR's; the
    verifier refuses the same windows on its own.  A column-sliced MatMul's A, read whole by every slice, is no
    halo (tests/test_column_slices.py groups such runs under the default rule)."""
    from lgopt.group.slicing import SliceError, slice_group
    from lgopt.model.network import Network, Op, Tensor, Weight, check_network

    t = {k: Tensor(k, (1, 8, 4, 16), "f16") for k in "xy"}
    conv = Op("c", "Conv", ("x",), ("y",), (Weight("w", (8, 8, 7, 7), "f16", "filter"),),
              {"kernel": (7, 7), "strides": (1, 1), "pads": (3, 3, 3, 3), "group": 1}, local=True, h_split=True,
              n_split=True)
    net = check_network(Network("halo", t, (conv,), ("x",), ("y",)))
    with pytest.raises(SliceError, match="w/2 rule: tensor x repeats 18 of its 16 columns"):
        slice_group(net, ["c"], 1, 1, w_slices=4, h_ratio=0.5)
    chip = get_chip("bm1684x")
    g, why = try_group(net, chip, ["c"], 1, 1, None, w_slices=4)  # TPU-MLIR's rule: no limit
    assert g is not None, why
    plan = assemble(net, chip, [g], "manual", h_ratio=None, bank_rule="soft")
    assert verify_plan(net, plan) == []
    strict = replace(plan, h_ratio=0.5)
    assert any("w/2 rule: x repeats 18 of its 16 columns" in str(v) for v in verify_plan(net, strict))

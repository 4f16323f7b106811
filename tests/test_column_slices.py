"""Column (C/OC) slicing of MatMuls with weights, their weights reloaded a run of columns per slice (issue 16):
sizing, cost, the plan's weight columns, the verifier's rules, the simulator, and the searches choosing it on
an LLM MLP whose weights do not fit LMEM whole."""

from dataclasses import replace

import onnx
import pytest

from lgopt.check.simulate import simulate
from lgopt.check.verify import verify_plan
from lgopt.cost.cycles import global_layer_cost
from lgopt.cost.work import weight_gmem_bytes
from lgopt.errors import LgoptError
from lgopt.group.build import assemble, try_group, w_slice_options
from lgopt.group.totals import finish, with_cost
from lgopt.hw.chip import get_chip
from lgopt.hw.sizing import column_weights, weight_bytes
from lgopt.io.onnx_import import import_onnx
from lgopt.io.planfile import plan_from_dict, plan_to_dict
from lgopt.io.zoo import llm_mlp
from lgopt.model.network import Op, Weight
from lgopt.report.verdict import verify
from lgopt.strategies.greedy import greedy
from lgopt.strategies.settings import SearchSettings

SMALL = get_chip("bm1684x", {"lmem_bytes": "2K"})  # 2 KiB a lane: a [64, 1024] f16 weight is 2 KiB a lane
GATE_UP = ("/MatMul_11", "/Mul_13", "/MatMul_15", "/Mul_16")  # SwiGLU's gate, SiLU, up and product


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    path = tmp_path_factory.mktemp("mlp") / "mlp.onnx"
    onnx.save(llm_mlp(tokens=128, dim=64, hidden=1024), str(path))
    return import_onnx(path, dtype="f16")


def test_a_matmul_weight_is_cut_by_output_columns_in_its_lane_layout():
    """[K, N] holds N over the lanes: 1024 columns are 16 a lane (64 x 16 x 2 bytes = 2 KiB), 64 columns one."""
    mm = Op("mm", "MatMul", ("x",), ("y",), (Weight("w", (64, 1024), "f16", "filter"),))
    chip = get_chip("bm1684x")
    assert column_weights(mm)
    assert weight_bytes(chip, mm) == 64 * 16 * 2
    assert weight_bytes(chip, mm, 64) == 64 * 2
    assert weight_gmem_bytes(mm, 100) == 64 * 100 * 2
    assert not column_weights(Op("c", "Conv", ("x",), ("y",), (Weight("w", (8, 8, 3, 3), "f16", "filter"),)))


def test_the_mlp_weights_do_not_fit_whole_and_no_n_or_h_slicing_groups_them(mlp):
    up = mlp.op("/MatMul_15")
    assert weight_bytes(SMALL, up) >= SMALL.lmem_bytes
    g, why = try_group(mlp, SMALL, GATE_UP, 1, 2)
    assert g is None and "allocation" in why


def _column_group(net, chip, w):
    g, why = try_group(net, chip, GATE_UP, 1, 1, w_slices=w)
    assert g is not None, why
    return with_cost(chip, net, g)


def test_each_column_slice_loads_exactly_its_columns_of_the_weights_once(mlp):
    g = _column_group(mlp, SMALL, 16)
    assert set(g.weight_cols) == {"/MatMul_11", "/MatMul_15"}
    assert not set(g.weight_cols) & set(g.preloads)
    for op, cols in g.weight_cols.items():
        out = mlp.op(op).outputs[0]
        assert cols == tuple(g.cols(out, s, 1024) for s in range(g.num_slices))
        assert sorted(cols) == [(c, c + 64) for c in range(0, 1024, 64)]  # the weight's columns, each once
        buf = next(b for b in g.buffers if b.kind == "weight" and b.name == op)
        assert not buf.resident and buf.size == weight_bytes(SMALL, mlp.op(op), 64)
    # every column of both weights crosses GMEM exactly once: the reload costs no extra weight traffic here
    whole = {op: weight_gmem_bytes(mlp.op(op)) for op in g.weight_cols}
    plain = _column_group(mlp, get_chip("bm1684x"), 16)
    assert g.cost["traffic_bytes"] == plain.cost["traffic_bytes"]
    assert g.cost["traffic_bytes"] > sum(whole.values())


def _plan(net, chip, groups):
    return finish(chip, net, assemble(net, chip, groups, "test", h_ratio=0.5, bank_rule="soft"))


def test_a_column_sliced_plan_verifies_and_simulates_exactly(mlp):
    plan = _plan(mlp, SMALL, [_column_group(mlp, SMALL, 16)])
    assert verify(mlp, plan) == []
    res = simulate(mlp, plan)
    assert res.ok, res


def test_the_verifier_and_the_simulator_catch_wrong_weight_columns(mlp):
    g = _column_group(mlp, SMALL, 16)
    cols = g.weight_cols["/MatMul_15"]
    shifted = replace(g, weight_cols={**g.weight_cols, "/MatMul_15": cols[1:] + cols[:1]})
    plan = _plan(mlp, SMALL, [shifted])
    assert any("loads weight columns" in v.what for v in verify_plan(mlp, plan))
    assert not simulate(mlp, plan).ok  # the slice computes with another slice's columns
    preloaded = _plan(mlp, SMALL, [replace(g, preloads=g.preloads + ("/MatMul_15",))])
    assert any("yet preloaded" in v.what for v in verify_plan(mlp, preloaded))
    small_buf = replace(g, buffers=tuple(replace(b, size=64) if b.kind == "weight" and b.name == "/MatMul_15" else b
                                         for b in g.buffers))
    assert any("weight buffer of /MatMul_15" in v.what for v in verify_plan(mlp, _plan(mlp, SMALL, [small_buf])))
    not_mm = replace(g, weight_cols={**g.weight_cols, "/Mul_13": cols})
    assert any("not a [K, N] matrix" in v.what for v in verify_plan(mlp, _plan(mlp, SMALL, [not_mm])))


def test_a_row_wise_op_forbids_column_slices(tmp_path):
    from lgopt.io.zoo import vit_block

    path = tmp_path / "vit.onnx"
    onnx.save(vit_block(tokens=20, dim=64, heads=4, mlp=128), str(path))
    net = import_onnx(path, dtype="f16")
    soft = next(op.name for op in net.ops if op.type == "Softmax")
    g, why = try_group(net, get_chip("bm1684x"), [soft], 1, 1, w_slices=2)
    assert g is None and "whole rows" in why


def test_greedy_chooses_column_slices_and_chains_the_mlp_in_lmem(mlp):
    plan = greedy(mlp, SMALL, SearchSettings())
    assert verify(mlp, plan) == []
    col = [g for g in plan.groups if g.weight_cols]
    assert col and set(col[0].ops) >= {"/MatMul_11", "/MatMul_15"}
    assert col[0].kept_in, "the normalised input is received in LMEM, not reloaded per column slice"
    res = simulate(mlp, plan)
    assert res.ok, res
    again = greedy(mlp, SMALL, SearchSettings())
    assert plan_to_dict(again)["groups"] == plan_to_dict(plan)["groups"]  # deterministic
    no_cols = greedy(mlp, SMALL, SearchSettings(max_w_slices=1))
    assert not any(g.w_slices > 1 for g in no_cols.groups)
    assert plan.cost["cycles"] < no_cols.cost["cycles"]
    assert plan.cost["cycles"] < sum(global_layer_cost(SMALL, mlp, op)["cycles"] for op in mlp.ops)


def test_w_slices_are_offered_only_to_row_groups(mlp):
    assert w_slice_options(mlp, SMALL, GATE_UP, 256)[:3] == [2, 3, 4]
    assert w_slice_options(mlp, SMALL, GATE_UP, 1) == []


def test_weight_columns_survive_the_plan_file_and_bad_ones_are_one_clear_error(mlp):
    plan = _plan(mlp, SMALL, [_column_group(mlp, SMALL, 16)])
    d = plan_to_dict(plan)
    assert plan_from_dict(d).groups[0].weight_cols == plan.groups[0].weight_cols
    d["groups"][0]["weight_cols"] = {"/MatMul_11": [[0, 64, 3]]}
    with pytest.raises(LgoptError, match="weight_cols of /MatMul_11 must be lists of"):
        plan_from_dict(d)


def test_cpsat_evaluates_column_slicings_and_its_plan_verifies(mlp):
    from lgopt.strategies.cpsat.common import CpsatSettings
    from lgopt.strategies.cpsat.evaluate import Evaluator
    from lgopt.strategies.cpsat.space import CandidateSpace
    from lgopt.strategies.registry import StrategyOptions, parse_strategy

    space = CandidateSpace(mlp, SMALL)
    i, j = mlp.op_index[GATE_UP[0]], mlp.op_index[GATE_UP[-1]]
    assert space.fits(i, j)[1], "one column of each weight fits: the sliced mode is not ruled out"
    with Evaluator(space, 2.0, 1, 0) as ev:
        alone, received = ev.evaluate(i, j, ""), ev.evaluate(i, j, "in")
    assert alone.w > 1 and received.w > 1
    assert received.cost < alone.cost  # the normalised input received in LMEM, not reloaded per slice
    g = with_cost(SMALL, mlp, try_group(mlp, SMALL, GATE_UP, 1, 1, w_slices=alone.w)[0])
    assert alone.cost == g.cost["cycles"]
    plan, _ = parse_strategy("cpsat").run(mlp, SMALL, StrategyOptions(SearchSettings(),
                                                                      CpsatSettings(time_limit=5, workers=2)))
    assert verify(mlp, plan) == [] and any(g.weight_cols for g in plan.groups)


def test_a_column_sliced_group_can_receive_and_hand_over_in_one_chain(tmp_path):
    """At 4 KiB a lane the SwiGLU product fits whole: the column-sliced group receives the normalised input
    from the RMSNorm group and hands its product on to the down projection's group, all in LMEM."""
    path = tmp_path / "mlp.onnx"
    onnx.save(llm_mlp(tokens=128, dim=64, hidden=512), str(path))
    net = import_onnx(path, dtype="f16")
    chip = get_chip("bm1684x", {"lmem_bytes": "4K"})
    plan = greedy(net, chip, SearchSettings())
    middle = [g for g in plan.groups if g.kept_in and g.kept_out]
    assert middle and middle[0].weight_cols
    assert verify(net, plan) == []
    res = simulate(net, plan)
    assert res.ok, res

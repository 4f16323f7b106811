"""Transformer blocks as layer groups (issue 16): rank-3 activations in TPU-MLIR's matmul layout, MatMul,
LayerNorm (decomposed), Softmax, GELU and head-split views as local ops, and small ViT / LLM blocks that group,
verify, slice their rows and simulate to what onnxruntime computes."""

from dataclasses import replace

import onnx
import pytest

from lgopt.check.simulate import check_with_onnxruntime, simulate
from lgopt.check.verify import verify_plan
from lgopt.hw.chip import for_chip, get_chip
from lgopt.hw.sizing import activation_bytes
from lgopt.io.onnx_import import import_onnx
from lgopt.io.zoo import llm_block, vit_block
from lgopt.model.network import Tensor, to_nchw
from lgopt.model.ops import backward_h, classify
from lgopt.report.tables import global_reasons
from lgopt.strategies.greedy import greedy
from lgopt.strategies.registry import StrategyOptions, parse_strategy
from lgopt.strategies.settings import SearchSettings

BM1684X = get_chip("bm1684x")


def test_a_rank3_tensor_folds_its_rows_onto_h_and_holds_them_across_the_lanes():
    """[1, 197, 768] f16 on bm1684x is TPU-MLIR's (1, 197, 1, 768) in LMEM: ceil(197/64) = 4 rows per lane of
    768 elements (already EU-aligned); a 64-row slice is one row per lane."""
    t = Tensor("x", to_nchw((1, 197, 768)), "f16", (1, 197, 768))
    assert t.shape == (1, 1, 197, 768) and t.lane_shape(1, 197) == (1, 197, 1, 768)
    assert activation_bytes(BM1684X, t, 1, 197) == 4 * 768 * 2
    assert activation_bytes(BM1684X, t, 1, 64) == 768 * 2
    assert to_nchw((197, 1, 768)) == (1, 1, 197, 768)  # sequence-first: the tokens are still the rows


def test_transformer_ops_are_local_where_tpu_mlir_groups_them_and_say_why_not_elsewhere():
    x, h = (1, 197, 768), (1, 197, 3072)
    assert classify("MatMul", {}, [x], [h], has_filter=True) == (True, True, True, "")
    assert classify("MatMul", {}, [(1, 12, 197, 64), (1, 12, 64, 197)], [(1, 12, 197, 197)])[0]
    assert "batch dimensions" in classify("MatMul", {}, [(1, 12, 197, 64), (1, 6, 64, 197)], [(1, 12, 197, 197)])[3]
    assert classify("Softmax", {"axis": -1}, [(1, 12, 197, 197)], [(1, 12, 197, 197)])[:2] == (True, True)
    assert "last axis" in classify("Softmax", {"axis": 1}, [(1, 12, 197, 197)], [(1, 12, 197, 197)])[3]
    assert classify("ReduceMean", {"axes": (2,), "keepdims": 1}, [x], [(1, 197, 1)])[:2] == (True, True)
    assert classify("Reshape", {}, [x], [(1, 197, 12, 64)])[:2] == (True, False)  # the head split: a view
    assert classify("Transpose", {"perm": (1, 0, 2), "in_dims": x}, [x], [(197, 1, 768)])[0]  # moves a 1 only
    why = classify("Transpose", {"perm": (0, 2, 1, 3), "in_dims": (1, 197, 12, 64)}, [(1, 197, 12, 64)],
                   [(1, 12, 197, 64)])[3]
    assert why == "Transpose permutes axes (moves data between lanes)"
    assert classify("Add", {}, [x, (1, 197, 1)], [x])[0]
    assert "different rank" in classify("Add", {}, [x, (1, 1, 197, 1)], [x])[3]


def test_a_matmul_reads_its_own_rows_of_a_and_every_row_of_b():
    from lgopt.model.network import Op

    mm = Op("mm", "MatMul", ("a", "b"), ("y",))
    assert backward_h(mm, 0, (10, 20), 197, 197) == (10, 20)
    assert backward_h(mm, 1, (10, 20), 64, 197) == (0, 64)


def _import(tmp_path, name, model):
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path, import_onnx(path, dtype="f16")


@pytest.mark.parametrize("build", [lambda: vit_block(tokens=20, dim=64, heads=4, mlp=128),
                                   lambda: llm_block(tokens=16, dim=64, heads=4, hidden=96)], ids=["vit", "llm"])
def test_a_small_block_groups_verifies_slices_rows_and_simulates_like_onnxruntime(tmp_path, build):
    path, net = _import(tmp_path, "block", build())
    assert "agrees with onnxruntime" in check_with_onnxruntime(net, str(path)) or \
        "not installed" in check_with_onnxruntime(net, str(path))
    local = [op for op in net.ops if op.local]
    assert {"MatMul", "ReduceMean", "Softmax", "Reshape"} <= {op.type for op in local}
    assert all(op.type in ("Transpose", "Slice", "Concat") for op in net.ops if not op.local)
    for chip in (BM1684X, get_chip("bm1684x", {"lmem_bytes": "2K"})):  # the small LMEM slices the rows
        plan = greedy(net, chip, SearchSettings())
        assert verify_plan(net, plan) == []
        if chip is BM1684X:
            assert sum(len(g.ops) for g in plan.groups) == len(local)
        res = simulate(net, plan)
        assert res.ok, res
    assert any(g.h_slices > 1 for g in plan.groups), "rows sliced on the small LMEM"


def test_cpsat_groups_a_vit_block_no_worse_than_greedy(tmp_path):
    _, net = _import(tmp_path, "vit", vit_block(tokens=20, dim=64, heads=4, mlp=128))
    opts = StrategyOptions(SearchSettings())
    greedy_plan, _ = parse_strategy("greedy").run(net, BM1684X, opts)
    from lgopt.strategies.cpsat.common import CpsatSettings

    plan, _ = parse_strategy("cpsat").run(net, BM1684X, replace(opts, cpsat=CpsatSettings(time_limit=20, workers=2)))
    assert verify_plan(net, plan) == []
    assert plan.cost["cycles"] <= greedy_plan.cost["cycles"]
    assert simulate(net, plan).ok


def test_on_cv18xx_matmuls_stay_global_with_the_reason(tmp_path):
    _, net = _import(tmp_path, "llm", llm_block(tokens=16, dim=64, heads=4, hidden=96))
    cv = get_chip("cv181x")
    plan, _ = parse_strategy("greedy").run(net, cv, StrategyOptions(SearchSettings()))
    matmuls = {op.name for op in net.ops if op.type == "MatMul"}
    assert matmuls <= set(plan.global_layers)
    assert verify_plan(net, plan) == []
    lines = global_reasons(net, plan)
    assert lines[0].startswith("grouped: ")
    assert any(f"{len(matmuls)} MatMul runs as a global layer on cv181x" in line for line in lines[1:])
    # a plan that groups a MatMul anyway is refused on cv181x
    bm = greedy(net, BM1684X, SearchSettings())
    forged = replace(bm, chip={**bm.chip, "matmul_in_groups": False})
    assert any("runs as a global layer on" in str(v) for v in verify_plan(net, forged))
    assert for_chip(net, BM1684X) is net


def test_every_cause_of_a_global_layer_is_one_line(tmp_path):
    _, net = _import(tmp_path, "llm", llm_block(tokens=16, dim=64, heads=4, hidden=96))
    plan = greedy(net, BM1684X, SearchSettings())
    lines = global_reasons(net, plan)
    causes = {op.reason.partition(": ")[0] for op in net.ops if not op.local}
    assert len(lines) == 1 + len(causes)
    assert sum(int(line.split()[0]) for line in lines[1:]) == len(plan.global_layers)

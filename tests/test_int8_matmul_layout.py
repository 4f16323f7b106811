"""An INT8 MatMul in a group holds its weight as TPU-MLIR 1.30.2 lays its operand out (lgopt.hw.sizing.
group_weight_bytes): K over the lanes when the operand's rows fill the lanes evenly, whole in a lane when they do
not (ConvNeXt-Tiny's 28 x 28 stage: 147,456 bytes of 192 x 768 weight a lane, its layer-group debugger).  And a
search in TPU-MLIR's space never reloads a MatMul's weights by columns, which TPU-MLIR cannot be told."""

from __future__ import annotations

import onnx
import pytest
from onnx_graphs import G

from lgopt.group.build import schedule
from lgopt.hw.chip import get_chip
from lgopt.hw.sizing import group_weight_bytes, lanes_share_rows, weight_bytes
from lgopt.io.onnx_import import import_onnx
from lgopt.io.problem import load_problem
from lgopt.report.verdict import verify
from lgopt.strategies.greedy import greedy
from lgopt.strategies.settings import SearchSettings
from lgopt.tpumlir.rules import TPU_MLIR_RULES


def _mlp(tmp_path, side: int):
    """A ConvNeXt-style block's MLP on a ``side`` x ``side`` map: Transpose to rows, LayerNorm, MatMul 32 -> 128,
    GELU (as Erf), MatMul 128 -> 32, INT8."""
    g = G((1, 32, side, side))
    y = g.n("Transpose", ["x"], perm=[0, 2, 3, 1])
    y = g.n("LayerNormalization", [y, g.w([32]), g.w([32])], axis=-1)
    y = g.n("MatMul", [y, g.w([32, 128])])
    y = g.n("Relu", [y])
    y = g.n("MatMul", [y, g.w([128, 32])])
    g.out(g.n("Transpose", [y], perm=[0, 3, 1, 2]))
    p = tmp_path / f"mlp{side}.onnx"
    onnx.save(g.model(), p)
    return import_onnx(p, dtype="int8")


@pytest.mark.parametrize("side,fills", [(16, True), (14, False)], ids=["256-rows", "196-rows"])
def test_the_weight_is_whole_in_a_lane_when_the_rows_do_not_fill_the_lanes(tmp_path, side, fills):
    net = _mlp(tmp_path, side)
    chip = get_chip("bm1684x")
    mm = [op for op in net.ops if op.type == "MatMul"]
    assert len(mm) == 2
    for op in mm:
        assert lanes_share_rows(chip, net, op) is fills
        k, n = next(w for w in op.weights if w.role == "filter").shape
        whole = k * n  # INT8: a byte an element
        assert (group_weight_bytes(chip, net, op) == weight_bytes(chip, op)) is fills
        if not fills:
            assert group_weight_bytes(chip, net, op) >= whole > weight_bytes(chip, op)
    local = [op.name for op in net.ops if op.local]
    g = schedule(net, chip, local, 1, 1, None)
    held = {b.name: b.size for b in g.buffers if b.kind == "weight"}
    assert all(held[op.name] >= group_weight_bytes(chip, net, op) for op in mm)


def test_the_compiler_space_never_reloads_weights_by_columns():
    """llm_mlp on BM1684X: lgopt's own greedy cuts a MatMul's columns and reloads its weights per slice;
    TPU-MLIR holds a group's weights whole, so in its space the same search holds them (and the exporter, which
    refuses such a group, is never handed one)."""
    net, chip = load_problem("problems/llm_mlp.json"), get_chip("bm1684x")
    own = greedy(net, chip, SearchSettings())
    assert any(g.weight_cols for g in own.groups)
    st = SearchSettings(compiler=TPU_MLIR_RULES)
    assert not st.reload_columns and SearchSettings().reload_columns
    theirs = greedy(net, chip, st)
    assert not any(g.weight_cols for g in theirs.groups) and verify(net, theirs) == []

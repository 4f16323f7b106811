"""GroupNorm as TPU-MLIR runs it (issue 37: "BatchNorm that no conv absorbs, and the ops the zoo brings").

torch exports ``nn.GroupNorm`` below opset 18 as Reshape ``[N, G, -1]``, InstanceNormalization, Reshape back,
then a per-channel Mul and Add.  TPU-MLIR's front end makes the first three one ``tpu.GroupNorm`` and groups it
(the two reshapes alone move data between lanes, so lgopt ran them as global layers and could read no grouping
of a model with one: FCOS's heads).  ``tests/data/groupnorm``: a small model made by ``make_gn.py`` (torch 2.11,
the legacy exporter, opset 13; weights stripped) and TPU-MLIR 1.30.2's own grouping of it in F16 on BM1684X
and BM1688 (``model_transform`` then ``model_deploy --quantize F16``)."""

import json
from pathlib import Path

import numpy as np
import pytest
from onnx_graphs import G

from lgopt.check.simulate import check_with_onnxruntime, simulate
from lgopt.hw.chip import get_chip
from lgopt.hw.sizing import scratch_bytes
from lgopt.io.onnx_import import import_onnx
from lgopt.io.problem import load_model
from lgopt.report.verdict import verify
from lgopt.strategies.greedy import greedy
from lgopt.tpumlir.grouping import score

DATA = Path(__file__).parent / "data" / "groupnorm"
GN = DATA / "gn.weightless.onnx"


@pytest.fixture(scope="module")
def gn():
    return load_model(GN, dtype="f16")


def test_torchs_groupnorm_is_one_local_op(gn):
    norms = [op for op in gn.ops if op.type == "GroupNormalization"]
    assert [(op.attrs["num_groups"], op.local, op.h_split, op.n_split) for op in norms] == [
        (16, True, False, True), (32, True, False, True)]
    assert not any(op.type in ("Reshape", "InstanceNormalization") for op in gn.ops)
    # TPU-MLIR names its GroupNorm after the InstanceNormalization's output: an alias of lgopt's op
    assert "/g1/InstanceNormalization_output_0" in norms[0].aliases
    assert [op.type for op in gn.ops if op.inputs == norms[0].outputs] == ["Mul"]  # the affine stays apart


def _onnx_group_norm(tmp_path, scale_len: int, opset: int = 21, groups: int = 4):
    g = G((1, 8, 6, 6), opset=opset)
    x = g.conv("x", 8, 12, 3)
    y = g.n("GroupNormalization", [x, g.w([scale_len]), g.w([scale_len])], num_groups=groups, epsilon=1e-5)
    g.out(g.conv(y, 12, 4, 1))
    path = tmp_path / "gn.onnx"
    import onnx
    m = g.model()
    m.ir_version = 10  # opset 21's
    onnx.save(m, path)
    return path


def test_onnx_groupnormalization_with_per_channel_affine_is_local(tmp_path):
    net = import_onnx(_onnx_group_norm(tmp_path, 12), dtype="f16")
    op = next(op for op in net.ops if op.type == "GroupNormalization")
    assert op.local and not op.h_split and op.attrs["num_groups"] == 4
    assert [(w.role, w.shape) for w in op.weights] == [("scale", (1, 12, 1, 1)), ("bias", (1, 12, 1, 1))]


def test_onnx_groupnormalization_with_per_group_affine_is_global(tmp_path):
    net = import_onnx(_onnx_group_norm(tmp_path, 4, opset=18), dtype="f16")
    op = next(op for op in net.ops if op.type == "GroupNormalization")
    assert not op.local and "per group" in op.reason


@pytest.mark.parametrize("chip, shape, want", [
    ("bm1684x", (1, 64, 30, 30), 7424), ("bm1684x", (1, 192, 15, 15), 6144),
    ("bm1688", (1, 64, 30, 30), 14464), ("bm1688", (1, 192, 15, 15), 11136)])
def test_scratch_is_the_buffer_tpu_mlir_gives_its_groupnorm(gn, chip, shape, want):
    """``buffer_size`` of each tpu.GroupNorm in the compiled model's ``_final.mlir``."""
    op = next(op for op in gn.ops if op.type == "GroupNormalization" and gn.tensor(op.inputs[0]).shape == shape)
    n, _, h, w = shape
    assert scratch_bytes(get_chip(chip), gn, op, (n, h, w, None), (n, h, w, None)) == want


@pytest.mark.parametrize("chip", ["bm1684x", "bm1688"])
def test_tpu_mlirs_grouping_of_a_groupnorm_model_loads_and_verifies(gn, chip):
    plan, info = score(gn, get_chip(chip), str(DATA / f"gn_{chip}_f16.layer_group_cache.json"))
    assert info["status"] == "loaded" and verify(gn, plan) == []
    (g,) = plan.groups
    assert sum(gn.op(o).type == "GroupNormalization" for o in g.ops) == 2 and g.h_slices == 1


def test_a_groupnorm_plan_simulates_exactly_and_the_kernel_is_onnxs(tmp_path):
    path = _onnx_group_norm(tmp_path, 12)
    net = import_onnx(path, dtype="f16")
    plan = greedy(net, get_chip("bm1684x"))
    assert any(net.op(o).type == "GroupNormalization" for g in plan.groups for o in g.ops)
    res = simulate(net, plan)
    assert res.ok, res.summary()
    pytest.importorskip("onnxruntime")
    verdict = check_with_onnxruntime(net, str(path))
    assert not verdict.startswith(("MISMATCH", "onnxruntime could not")), verdict
    assert np.isfinite(res.compared) and res.compared >= 1


@pytest.mark.parametrize("groups, needle", [(5, "does not divide its 12 channels"), (0, "not a positive count")])
def test_a_group_count_onnx_forbids_is_one_line_and_exit_2(tmp_path, capsys, groups, needle):
    """It once imported, solved and verified, then crashed the simulator (exit 3)."""
    from lgopt.cli import main

    path = _onnx_group_norm(tmp_path, 12, groups=groups)
    assert main(["solve", str(path), "--chip", "bm1684x", "--time-limit", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lgopt: error:") and needle in err, err


def test_a_problem_file_with_a_group_count_that_does_not_divide_is_refused(gn, tmp_path):
    from lgopt.errors import LgoptError
    from lgopt.io.problem import load_problem, save_problem

    save_problem(gn, tmp_path / "gn.json")
    d = json.loads((tmp_path / "gn.json").read_text())
    for o in d["ops"]:
        if o["type"] == "GroupNormalization":
            o["attrs"]["num_groups"] = 7
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(LgoptError, match="num_groups 7 does not divide its 64 channels"):
        load_problem(tmp_path / "bad.json")

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
from lgopt.report.verdict import verify
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


def _agrees_and_simulates(net, path, lmem: str = "2K") -> None:
    """onnxruntime agrees with the numpy reference on every tensor, and a greedy plan on a chip of ``lmem`` a
    lane verifies and simulates exactly."""
    verdict = check_with_onnxruntime(net, str(path))
    if "not installed" in verdict:
        pytest.skip(verdict)
    assert verdict == f"the numpy reference agrees with onnxruntime on {len(net.ops)} tensors"
    plan = greedy(net, get_chip("bm1684x", {"lmem_bytes": lmem}), SearchSettings())
    assert verify_plan(net, plan) == [] and simulate(net, plan).ok


@pytest.mark.parametrize("build", [lambda: vit_block(tokens=20, dim=64, heads=4, mlp=128),
                                   lambda: llm_block(tokens=16, dim=64, heads=4, hidden=96)], ids=["vit", "llm"])
def test_a_small_block_groups_verifies_slices_rows_and_simulates_like_onnxruntime(tmp_path, build):
    path, net = _import(tmp_path, "block", build())
    assert "agrees with onnxruntime" in check_with_onnxruntime(net, str(path)) or \
        "not installed" in check_with_onnxruntime(net, str(path))
    local = [op for op in net.ops if op.local]
    types = {op.type for op in local}
    # the ViT block's decomposed LayerNorm is one op (as TPU-MLIR's front end makes it); RMSNorm stays apart
    assert {"MatMul", "Softmax", "Reshape"} <= types and ("LayerNormalization" in types or "ReduceMean" in types)
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

    plan, _ = parse_strategy("cpsat").run(net, BM1684X, replace(opts, cpsat=CpsatSettings(time_limit=8, workers=2)))
    assert verify_plan(net, plan) == []
    assert plan.cost["cycles"] <= greedy_plan.cost["cycles"]
    assert simulate(net, plan).ok


def test_on_cv18xx_matmuls_stay_global_with_the_reason(tmp_path):
    _, net = _import(tmp_path, "llm", llm_block(tokens=16, dim=64, heads=4, hidden=96))
    cv = get_chip("cv181x")
    plan, _ = parse_strategy("greedy").run(net, cv, StrategyOptions(SearchSettings()))
    matmuls = {op.name for op in net.ops if op.type == "MatMul"}
    assert matmuls <= set(plan.global_layers)
    assert verify(net, plan) == []  # its recorded costs too: matmuls costed as the global layers they are
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


def test_the_transformer_kernels_compute_what_onnxruntime_computes(tmp_path):
    """LayerNormalization, Gelu (both forms), Softmax, ReduceMean over the last axis, Sqrt, Pow, Neg, Slice and
    Concat within each row, a size-1 Transpose to sequence-first, a MatMul with a weight and one of two
    activations through a head-split view: the
    simulator's numpy kernels agree
    with onnxruntime on every tensor (ONNX semantics, written independently of the planner)."""
    import numpy as np
    from onnx_graphs import G

    g = G((1, 12, 24), opset=20)
    h = g.n("LayerNormalization", ["x", g.w([24]), g.w([24])], axis=-1, epsilon=1e-5)
    a = g.n("Gelu", [g.n("MatMul", [h, g.w([24, 32])])], approximate="tanh")
    b = g.n("Gelu", [g.n("MatMul", [h, g.w([24, 32])])])
    q = g.n("Reshape", [a, g.w(None, np.array([1, 12, 4, 8], dtype=np.int64))])
    k = g.n("Reshape", [b, g.w(None, np.array([1, 12, 8, 4], dtype=np.int64))])
    s = g.n("Softmax", [g.n("MatMul", [q, k])], axis=-1)
    r = g.n("ReduceMean", [g.n("Pow", [h, g.w([1])]), g.w(None, np.array([-1], dtype=np.int64))], keepdims=1)
    g.out(s)
    g.out(g.n("Neg", [g.n("Div", [h, g.n("Sqrt", [g.n("Add", [r, g.w([1])])])])]))

    def cut(x, a, b):  # a run of the last axis
        return g.n("Slice", [x] + [g.w(None, np.array([v], dtype=np.int64)) for v in (a, b, -1)])

    g.out(g.n("Concat", [g.n("Neg", [cut(h, 12, 24)]), cut(h, 0, 12)], axis=-1))  # RoPE's rotate_half
    seq_first = g.n("Transpose", [h], perm=[1, 0, 2])  # [12, 1, 24]: moves only the batch of 1, a view
    g.out(g.n("MatMul", [seq_first, g.w([24, 8])]))
    path, net = _import(tmp_path, "kernels", g.model())
    assert all(op.local for op in net.ops), [op.reason for op in net.ops if not op.local]
    _agrees_and_simulates(net, path)


def test_a_convnext_block_holds_its_channels_last_tensors_rows_on_lanes(tmp_path):
    """Between the two Transposes of a ConvNeXt block every op works on the last axis: those [N, H, W, C]
    tensors are held as [N, H*W, C] (rows across the lanes, as TPU-MLIR's GROUP_SMALL_C remaps them), the
    NCHW ones around them are not; the plan verifies and simulates, and onnxruntime agrees."""
    import numpy as np
    from onnx_graphs import G

    g = G((1, 8, 6, 6), opset=17)
    x = g.conv("x", 8, 8, k=7, g=8)  # depthwise
    t = g.n("Transpose", [x], perm=[0, 2, 3, 1])
    h = g.n("LayerNormalization", [t, g.w([8]), g.w([8])], axis=-1)
    h = g.n("MatMul", [g.n("Erf", [g.n("MatMul", [h, g.w([8, 32])])]), g.w([32, 8])])
    y = g.n("Transpose", [g.n("Mul", [h, g.w([8])])], perm=[0, 3, 1, 2])
    g.out(g.n("Add", [y, "x"]))
    path, net = _import(tmp_path, "cnblock", g.model())
    last = {n for n, ten in net.tensors.items() if ten.channels_last}
    assert last and all(net.tensor(n).orig_shape[1:3] == (6, 6) for n in last)
    assert all(net.tensor(n).shape == (1, 1, 36, net.tensor(n).w) for n in last)
    assert not net.tensor("x").channels_last and not net.tensor(net.outputs[0]).channels_last
    from lgopt.io.problem import network_from_dict
    from lgopt.model.network import network_to_dict

    assert network_from_dict(network_to_dict(net)).tensors == net.tensors  # the loader folds the same way
    assert np.all([op.local for op in net.ops if op.type != "Transpose"])
    plan = greedy(net, get_chip("bm1684x", {"lmem_bytes": "2K"}), SearchSettings())
    assert verify_plan(net, plan) == [] and simulate(net, plan).ok
    # the block without its Transposes (a channels-last input): onnxruntime checks every tensor of it
    g = G((1, 6, 6, 8), opset=17)
    h = g.n("LayerNormalization", ["x", g.w([8]), g.w([8])], axis=-1)
    h = g.n("MatMul", [g.n("Erf", [g.n("MatMul", [h, g.w([8, 32])])]), g.w([32, 8])])
    g.out(g.n("Add", [g.n("Mul", [h, g.w([8])]), "x"]))
    path, net = _import(tmp_path, "cnrows", g.model())
    assert all(ten.channels_last for ten in net.tensors.values())
    verdict = check_with_onnxruntime(net, str(path))
    if "not installed" in verdict:
        pytest.skip(verdict)
    assert verdict == f"the numpy reference agrees with onnxruntime on {len(net.ops)} tensors"


def test_a_swin_shift_of_the_image_rows_is_a_run_of_rows_in_a_channels_last_block(tmp_path):
    """Swin's cyclic shift rolls the image rows and columns of an [N, H, W, C] tensor (Slices and Concats on
    axes 1 and 2).  Held rows on the lanes, a roll of the image rows is a run of folded rows (axis 1's [s, e) is
    axis -2's [s*W, e*W)), so the block stays channels-last as TPU-MLIR's GROUP_SMALL_C holds its MLP; the roll
    of the columns (strided rows) is a global layer.  The problem file keeps the rewrite, onnxruntime agrees
    with the numpy reference, and a greedy plan verifies and simulates."""
    import numpy as np
    from onnx_graphs import G

    from lgopt.io.problem import network_from_dict
    from lgopt.model.network import network_to_dict

    g = G((1, 6, 5, 8), opset=17)

    def roll(x, axis, k, size):
        part = [g.n("Slice", [x] + [g.w(None, np.array([v], dtype=np.int64)) for v in (a, b, axis)])
                for a, b in ((k, size), (0, k))]
        return g.n("Concat", part, axis=axis)

    h = g.n("LayerNormalization", ["x", g.w([8]), g.w([8])], axis=-1)
    h = g.n("MatMul", [g.n("Erf", [g.n("MatMul", [roll(h, 1, 2, 6), g.w([8, 16])])]), g.w([16, 8])])
    g.out(roll(g.n("Add", [roll(h, 1, 4, 6), "x"]), 2, 1, 5))
    path, net = _import(tmp_path, "swin", g.model())
    assert all(net.tensor(t).channels_last for op in net.ops if op.local for t in op.inputs + op.outputs)
    rows = [op for op in net.ops if op.attrs.get("axis") == -2]
    assert [(op.type, op.local, op.h_split) for op in rows] == [("Slice", True, False)] * 2 + [
        ("Concat", True, False)] + [("Slice", True, False)] * 2 + [("Concat", True, False)]
    assert [(op.attrs.get("start"), op.attrs.get("end")) for op in rows[:2]] == [(10, 30), (0, 10)]
    assert [op.type for op in net.ops if not op.local] == ["Slice", "Slice", "Concat"]  # the columns' roll
    assert network_from_dict(network_to_dict(net)) == net  # the loader reads the rewrite as it was written
    verdict = check_with_onnxruntime(net, str(path))  # every local op (each upstream of the global roll)
    if "not installed" in verdict:
        pytest.skip(verdict)
    assert verdict == f"the numpy reference agrees with onnxruntime on {len(net.ops) - 3} tensors"
    plan = greedy(net, get_chip("bm1684x", {"lmem_bytes": "2K"}), SearchSettings())
    assert verify_plan(net, plan) == [] and simulate(net, plan).ok


def test_the_erf_gelu_chain_is_one_gelu_op_as_tpu_mlir_lowers_it(tmp_path):
    path, net = _import(tmp_path, "vit", vit_block(tokens=20, dim=64, heads=4, mlp=128))
    gelu = [op for op in net.ops if op.type == "Gelu"]
    assert len(gelu) == 1 and gelu[0].local and not any(op.type == "Erf" for op in net.ops)
    assert len(gelu[0].sources) == 5  # Div, Erf, Add, Mul, Mul
    apart = import_onnx(path, dtype="f16", fuse=False)  # --no-fuse keeps the five
    assert not any(op.type == "Gelu" for op in apart.ops) and sum(op.type == "Erf" for op in apart.ops) == 1


def test_torchs_layernorm_chain_and_a_linear_layers_bias_are_one_op_each_as_tpu_mlir_makes_them(tmp_path):
    """The LayerNorm torch exports below opset 17 (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, then Mul
    and Add by per-feature constants) is one LayerNormalization with its scale and bias, and a MatMul's bias
    Add is the MatMul's bias (TPU-MLIR names the linear layer after that Add): the ops TPU-MLIR's timeline has.
    Fused and apart (``fuse=False``), the numpy reference agrees with onnxruntime and the plans simulate."""
    import numpy as np
    from onnx_graphs import G

    g = G((1, 12, 16), opset=13)
    axes = [-1]
    m = g.n("ReduceMean", ["x"], axes=axes, keepdims=1)
    d = g.n("Sub", ["x", m])
    v = g.n("ReduceMean", [g.n("Pow", [d, g.w(None, np.array(2.0, dtype=np.float32))])], axes=axes, keepdims=1)
    n = g.n("Div", [d, g.n("Sqrt", [g.n("Add", [v, g.w(None, np.array(1e-6, dtype=np.float32))])])])
    ln = g.n("Add", [g.n("Mul", [n, g.w([16])]), g.w([16])])
    y = g.n("Add", [g.w([24]), g.n("MatMul", [ln, g.w([16, 24])])])  # torch puts the bias first
    g.out(g.n("Relu", [y]))
    path, net = _import(tmp_path, "lnchain", g.model())
    types = [op.type for op in net.ops]
    assert types == ["LayerNormalization", "MatMul", "Relu"], types
    ln_op, mm = net.ops[0], net.ops[1]
    assert {w.role for w in ln_op.weights} == {"scale", "bias"} and ln_op.attrs["epsilon"] == pytest.approx(1e-6)
    assert len(ln_op.sources) == 9 and {w.role for w in mm.weights} == {"filter", "bias"}
    apart = import_onnx(path, dtype="f16", fuse=False)
    assert len(apart.ops) == 12
    for model in (net, apart):
        _agrees_and_simulates(model, path)


def test_a_vit_patch_embedding_and_class_token_group_as_tpu_mlir_lowers_them(tmp_path):
    """A ViT's patch embedding (a Conv with stride = kernel, flattened and transposed to tokens-first) is a
    global Patchify (the image's pixels gathered into rows) and one local MatMul; the class token (an Expand of
    a constant at batch 1) joins the patches' rows in a local Concat with the constant as its weight, and
    leaves them in a local row Slice: the ops of TPU-MLIR's first and last ViT groups.  The group verifies and
    simulates; onnxruntime agrees on the Concat and everything after it when the block starts at the tokens."""
    import numpy as np
    from onnx_graphs import G

    g = G((1, 3, 8, 8), opset=17)
    conv = g.n("Conv", ["x", g.w([16, 3, 4, 4]), g.w([16])], kernel_shape=[4, 4], strides=[4, 4], pads=[0] * 4)
    flat = g.n("Reshape", [conv, g.w(None, np.array([1, 16, 4], dtype=np.int64))])
    tokens = g.n("Transpose", [flat], perm=[0, 2, 1])
    cls = g.n("Expand", [g.w([1, 1, 16]), g.w(None, np.array([1, 1, 1], dtype=np.int64))])
    x = g.n("Concat", [cls, tokens], axis=1)
    g.out(g.n("LayerNormalization", [g.n("Add", [x, g.w([1, 5, 16])]), g.w([16]), g.w([16])], axis=-1))
    path, net = _import(tmp_path, "patchify", g.model())
    assert [op.type for op in net.ops] == ["Patchify", "MatMul", "Concat", "Add", "LayerNormalization"]
    patch, mm, cat = net.ops[:3]
    assert not patch.local and "between lanes" in patch.reason
    assert mm.local and {w.role: w.shape for w in mm.weights} == {"filter": (48, 16), "bias": (1, 1, 16)}
    assert cat.local and not cat.h_split and cat.attrs["axis"] == -2 and tuple(cat.attrs["const_at"]) == (0,)
    for chip in (BM1684X, get_chip("bm1684x", {"lmem_bytes": "1K"})):
        plan = greedy(net, chip, SearchSettings())
        assert verify_plan(net, plan) == [] and simulate(net, plan).ok
        assert any(("/Concat" in gr.ops or "Concat_" in " ".join(gr.ops)) and len(gr.ops) > 1 for gr in plan.groups)
    # from the tokens on: the Concat's kernel (a constant row before the activation's rows) against onnxruntime
    # ... and the class token's row taken back out at the end (``x[:, 0]``, a Gather of a scalar index): a row
    # Slice whose [1, 16] output lies as one row
    g = G((1, 4, 16), opset=17)
    cls = g.n("Expand", [g.w([1, 1, 16]), g.w(None, np.array([1, 1, 1], dtype=np.int64))])
    x = g.n("Concat", [cls, "x"], axis=1)
    y = g.n("Softmax", [g.n("Add", [x, g.w([1, 5, 16])])], axis=-1)
    g.out(g.n("Gather", [y, g.w(None, np.array(0, dtype=np.int64))], axis=1))
    path, net = _import(tmp_path, "clstoken", g.model())
    assert all(op.local for op in net.ops)
    row = net.ops[-1]
    assert row.type == "Slice" and (row.attrs["axis"], row.attrs["start"], row.attrs["end"]) == (-2, 0, 1)
    assert net.tensor(row.outputs[0]).shape == (1, 1, 1, 16) and net.tensor(row.outputs[0]).rows_on_lanes
    _agrees_and_simulates(net, path, lmem="1K")


def test_a_gemm_between_reshapes_of_a_sequence_is_a_local_row_matmul(tmp_path):
    """torch's attention output projection: ``[S, 1, D] -> [S, D]``, a Gemm with a ``transB`` weight and a bias,
    and back to ``[S, 1, D]``.  The Gemm is read as the row MatMul it computes (its filter [K, N], the ONNX
    ``[N, K]`` transposed), the reshape after it is a view, and a greedy plan groups it with the residual Add and
    LayerNorm after it; onnxruntime agrees, and the plan verifies and simulates.  A Gemm on a classifier's
    ``[N, C]`` vectors stays global."""
    import numpy as np
    from onnx_graphs import G

    g = G((6, 1, 16), opset=17)
    flat = g.n("Reshape", ["x", g.w(None, np.array([6, 16], dtype=np.int64))])
    y = g.n("Gemm", [flat, g.w([16, 16]), g.w([16])], transB=1)
    rows = g.n("Reshape", [y, g.w(None, np.array([6, 1, 16], dtype=np.int64))])
    g.out(g.n("LayerNormalization", [g.n("Add", [rows, "x"]), g.w([16]), g.w([16])], axis=-1))
    path, net = _import(tmp_path, "outproj", g.model())
    mm = next(op for op in net.ops if op.sources[0].startswith("Gemm"))
    assert (mm.type, mm.local, mm.attrs.get("filter_transposed")) == ("MatMul", True, 1)
    assert {w.role: w.shape for w in mm.weights} == {"filter": (16, 16), "bias": (1, 1, 16)}
    assert net.tensor(mm.inputs[0]).shape == (1, 1, 6, 16) and net.tensor(mm.outputs[0]).rows_on_lanes
    verdict = check_with_onnxruntime(net, str(path))
    if "not installed" in verdict:
        pytest.skip(verdict)
    assert all(op.local for op in net.ops)  # the reshape to [S, D] is a view too, read as rows
    assert verdict == f"the numpy reference agrees with onnxruntime on {len(net.ops)} tensors"
    plan = greedy(net, get_chip("bm1684x", {"lmem_bytes": "2K"}), SearchSettings())
    assert verify_plan(net, plan) == [] and simulate(net, plan).ok
    assert any(mm.name in gr.ops and any(net.op(o).type == "LayerNormalization" for o in gr.ops)
               for gr in plan.groups)
    # a Gemm whose [2, 16] input nothing else touches reads a matrix of two rows (lgopt cannot tell tokens from
    # batches there): a row MatMul; a classifier's vectors, made by a Flatten, stay [N, C] and global
    # (test_a_classifiers_vectors_stay_rank2_and_global)
    g = G((2, 16), opset=17)
    g.out(g.n("Gemm", ["x", g.w([8, 16]), g.w([8])], transB=1))
    _, net = _import(tmp_path, "fc", g.model())
    assert net.ops[0].local and net.ops[0].type == "MatMul" and net.tensor("x").orig_shape == (1, 2, 16)


@pytest.mark.parametrize("shape", [(1, 4, 6, 8), (2, 4, 8, 8)], ids=["oblong", "square"])
def test_a_transpose_of_each_lanes_planes_is_local(tmp_path, shape):
    """The attention's K transposed (``perm [0, 1, 3, 2]`` of ``[B, heads, T, D]``): each lane keeps its channels
    and transposes their planes, so it runs in a group (not H-sliced: output rows are input columns).  Its kernel
    agrees with onnxruntime and a greedy plan on a small chip verifies and simulates; a square plane, whose rows
    and columns have the same count, reads its input whole all the same."""
    from onnx_graphs import G

    g = G(shape, opset=17)
    g.out(g.n("Sigmoid", [g.n("Transpose", ["x"], perm=[0, 1, 3, 2])]))
    path, net = _import(tmp_path, "kt", g.model())
    tr = net.ops[0]
    assert (tr.type, tr.local, tr.h_split, tr.n_split) == ("Transpose", True, False, True)
    verdict = check_with_onnxruntime(net, str(path))
    if "not installed" in verdict:
        pytest.skip(verdict)
    assert verdict == f"the numpy reference agrees with onnxruntime on {len(net.ops)} tensors"
    for lmem in ("64K", "1K"):
        plan = greedy(net, get_chip("bm1684x", {"lmem_bytes": lmem}), SearchSettings())
        assert verify_plan(net, plan) == [] and simulate(net, plan).ok
        assert any(tr.name in gr.ops for gr in plan.groups)
    g = G((1, 4, 6, 8), opset=17)
    g.out(g.n("Transpose", ["x"], perm=[0, 2, 1, 3]))  # heads and rows swapped: across the lanes
    _, net = _import(tmp_path, "heads", g.model())
    assert not net.ops[0].local and "between lanes" in net.ops[0].reason


def _matrix_model(path, m=48, k=64, hidden=128):
    """A transformer MLP block exported on a 2-D ``[tokens, features]`` matrix (batch folded into the tokens)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    r = np.random.default_rng(0)
    inits = [numpy_helper.from_array(r.normal(size=s).astype(np.float32), n)
             for n, s in (("w1", (k, hidden)), ("b1", (hidden,)), ("w2", (hidden, k)), ("g", (k,)), ("be", (k,)))]
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "be"], ["n"], axis=1),
             helper.make_node("Gemm", ["n", "w1", "b1"], ["h"]),
             helper.make_node("Relu", ["h"], ["a"]),
             helper.make_node("MatMul", ["a", "w2"], ["o"]),
             helper.make_node("Add", ["o", "x"], ["y"]),
             helper.make_node("Softmax", ["y"], ["z"], axis=1)]
    graph = helper.make_graph(nodes, "matrix", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [m, k])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_a_rank2_matrix_of_rows_groups_like_a_rank3_sequence(tmp_path):
    """``[48, 64]`` tokens x features, touched only by row ops (LayerNorm and Softmax over axis 1, a plain Gemm, a
    MatMul, elementwise ops): held as ``[1, 48, 64]``, rows across the lanes, every op local, one group that
    verifies, simulates exactly and agrees with onnxruntime."""
    path = tmp_path / "matrix.onnx"
    _matrix_model(path)
    net = import_onnx(str(path))
    assert all(op.local for op in net.ops) and {op.type for op in net.ops} >= {"MatMul", "Softmax"}
    assert all(net.tensor(t).orig_shape[0] == 1 and net.tensor(t).rows_on_lanes for t in net.tensors)
    assert net.op("z").attrs["axis"] == -1 and net.op("n").attrs["axis"] == -1  # ONNX's axis 1 of [M, K]
    plan = greedy(net, BM1684X, SearchSettings())
    assert len(plan.groups) == 1 and len(plan.groups[0].ops) == len(net.ops)
    assert verify(net, plan) == [] and simulate(net, plan).ok
    assert check_with_onnxruntime(net, str(path)).startswith("the numpy reference agrees")


def test_a_classifiers_vectors_stay_rank2_and_global(tmp_path):
    """A batch-2 classifier head (Flatten, Gemm, Relu, Gemm) keeps its ``[2, C]`` vectors: a Flatten from NCHW
    touches them, so nothing is re-declared, and the Gemms and the Relu between them run as global layers as in
    TPU-MLIR."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    r = np.random.default_rng(0)
    inits = [numpy_helper.from_array(r.normal(size=s).astype(np.float32), n) for n, s in (("w1", (64, 32)),
                                                                                        ("w2", (32, 10)))]
    nodes = [helper.make_node("Flatten", ["x"], ["f"]), helper.make_node("Gemm", ["f", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["a"]), helper.make_node("Gemm", ["a", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64, 1, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], inits)
    path = tmp_path / "head.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    net = import_onnx(str(path))
    assert net.tensor("h").orig_shape == (2, 32) and not net.tensor("h").rows_on_lanes
    assert {op.type for op in net.ops if not op.local} == {"Gemm", "Relu"}  # the vectors' ops run globally
    assert "rank-2" in net.op("a").reason

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_graphs import STYLES, G

from lgopt.errors import LgoptError
from lgopt.io.onnx_import import import_onnx
from lgopt.io.problem import load_problem, network_from_dict, save_problem
from lgopt.model.network import network_to_dict


def _save(model, tmp_path, name="m.onnx"):
    p = tmp_path / name
    onnx.save(model, str(p))
    return p


def test_fixture_resnet18(fixtures_dir):
    net = import_onnx(fixtures_dir / "onnx" / "resnet18.weightless.onnx")
    types = [op.type for op in net.ops]
    assert types.count("Conv") == 20 and types.count("Add") == 8 and "Relu" not in types  # all Relus fused
    assert [op.type for op in net.global_ops] == ["Gemm"]  # the Flatten after pooling is a view: local
    conv1 = net.ops[0]
    assert conv1.fused == ("Relu",) and conv1.outputs == ("/relu/Relu_output_0",)
    assert conv1.attrs["kernel"] == (7, 7) and conv1.attrs["strides"] == (2, 2) and conv1.attrs["pads"] == (3, 3, 3, 3)
    assert net.tensor("/relu/Relu_output_0").shape == (1, 64, 112, 112)
    # the residual Add absorbs the block's second Relu, as TPU-MLIR names it
    adds = [op for op in net.ops if op.type == "Add"]
    assert all(op.fused == ("Relu",) for op in adds)


def test_fixture_yolo_silu_and_resize(fixtures_dir):
    net = import_onnx(fixtures_dir / "onnx" / "yolov5s_like.weightless.onnx")
    types = [op.type for op in net.ops]
    assert types.count("SiLU") == 57 and "Sigmoid" not in types
    assert not net.global_ops
    rs = [op for op in net.ops if op.type == "Resize"]
    assert len(rs) == 2 and all(op.attrs["mode"] == "nearest" for op in rs)
    assert net.outputs == ("p3", "p4", "p5") and net.tensor("p3").shape == (1, 255, 80, 80)


def test_no_fuse_keeps_bn_and_activations(tmp_path):
    g = G((1, 3, 16, 16))
    y = g.n("Relu", [g.bn(g.conv("x", 3, 8, 3, bias=False), 8)])
    g.out(g.n("Mul", [y, g.n("Sigmoid", [y])]))
    p = _save(g.model(), tmp_path)
    fused = import_onnx(p)
    assert [op.type for op in fused.ops] == ["Conv", "SiLU"]
    assert fused.ops[0].fused == ("Relu",) and any(w.role == "bias" for w in fused.ops[0].weights)
    plain = import_onnx(p, fuse=False)
    assert [op.type for op in plain.ops] == ["Conv", "BatchNormalization", "Relu", "Sigmoid", "Mul"]
    assert all(op.local for op in plain.ops)


def test_clip_relu6_and_leaky_fused(tmp_path):
    g = G((1, 3, 16, 16))
    y = g.n("Clip", [g.conv("x", 3, 8), g.w(None, np.array(0, np.float32)), g.w(None, np.array(6, np.float32))])
    g.out(g.n("LeakyRelu", [g.conv(y, 8, 8)], alpha=0.2))
    net = import_onnx(_save(g.model(), tmp_path))
    assert [op.fused for op in net.ops] == [("Clip",), ("LeakyRelu",)]
    assert net.ops[0].attrs["act_max"] == 6.0 and net.ops[1].attrs["act_alpha"] == pytest.approx(0.2)


def test_constant_shape_arithmetic_is_folded(tmp_path):
    net = import_onnx(_save(STYLES["shufflenet"](), tmp_path))
    types = [op.type for op in net.ops]
    assert "Shape" not in types and "Gather" not in types and "Unsqueeze" not in types
    reshapes = [op for op in net.ops if op.type == "Reshape"]
    assert len(reshapes) == 2 and not any(op.local for op in reshapes)
    assert net.tensor(reshapes[0].outputs[0]).orig_shape == (1, 2, 8, 16, 16)
    last = net.ops[-1]
    assert last.type == "Conv" and last.local and net.tensor(last.outputs[0]).shape == (1, 16, 16, 16)


def test_local_op_coverage(tmp_path):
    net = import_onnx(_save(STYLES["unet"](), tmp_path))
    by_type = {op.type: op for op in net.ops}
    assert by_type["ConvTranspose"].local and by_type["ConvTranspose"].attrs["strides"] == (2, 2)
    assert by_type["Resize"].local and by_type["Resize"].attrs["mode"] == "linear"
    dil = [op for op in net.ops if op.type == "Conv" and op.attrs["dilations"] == (2, 2)]
    assert dil and dil[0].attrs["pads"] == (2, 2, 2, 2)
    eff = import_onnx(_save(STYLES["efficientnet"](), tmp_path, "e.onnx"))
    gap = [op for op in eff.ops if op.type == "GlobalAveragePool"]
    assert gap and all(op.local and not op.h_split for op in gap)
    dw = [op for op in eff.ops if op.type == "Conv" and op.attrs["group"] == 16]
    assert dw and dw[0].local
    bcast = [op for op in eff.ops if op.type == "Mul"]
    assert bcast[0].local and len(bcast[0].inputs) == 2
    reg = import_onnx(_save(STYLES["regnet"](), tmp_path, "r.onnx"))
    rm = [op for op in reg.ops if op.type == "ReduceMean"]
    assert rm and rm[0].local and not rm[0].h_split


@pytest.mark.parametrize("style", sorted(STYLES))
def test_torchvision_style_exports_import(style, tmp_path):
    net = import_onnx(_save(STYLES[style](), tmp_path))
    assert net.ops
    for op in net.ops:
        for t in op.inputs + op.outputs:
            assert all(d > 0 for d in net.tensor(t).shape)
    # a problem file round-trips to the same network
    p = tmp_path / "p.json"
    save_problem(net, p)
    assert network_to_dict(load_problem(p)) == network_to_dict(net)


def test_shufflenet_channel_split_is_a_local_slice(tmp_path):
    """ShuffleNet v2 splits channels with Slice (bounds computed by shape arithmetic, then folded): the
    halves are local channel slices; the shuffle's reshapes move channels between lanes and stay global."""
    g = G((1, 3, 16, 16))
    x = g.conv("x", 3, 16)
    half = g.n("Div", [g.n("Gather", [g.n("Shape", [x]), g.w(None, np.array([1], np.int64))], axis=0),
                       g.w(None, np.array([2], np.int64))])
    axis = g.w(None, np.array([1], np.int64))
    a = g.n("Slice", [x, g.w(None, np.array([0], np.int64)), half, axis])
    b = g.n("Slice", [x, half, g.n("Mul", [half, g.w(None, np.array([2], np.int64))]), axis])
    g.out(g.n("Concat", [a, g.conv(b, 8, 8)], axis=1))
    g.out(g.n("Slice", [x, g.w(None, np.array([0], np.int64)), g.w(None, np.array([8], np.int64)),
                        g.w(None, np.array([2], np.int64))]))  # rows: stays global
    net = import_onnx(_save(g.model(), tmp_path))
    first, second, rows = [op for op in net.ops if op.type == "Slice"]
    for op, (start, end) in ((first, (0, 8)), (second, (8, 16))):
        assert op.local, op.reason
        assert (op.attrs["axis"], op.attrs["start"], op.attrs["end"]) == (1, start, end)
        assert net.tensor(op.outputs[0]).c == 8 and op.weights == ()
    assert not rows.local and "channel axis" in rows.reason


def test_unsupported_ops_become_global(tmp_path):
    """A ViT-like graph: its MatMuls, LayerNormalization, Softmax, the row Concat of the class token and the
    row Slice taking it out are local (issue 16); the patch embedding's pixel gather (Patchify) and the rank-2
    Gemm stay global, each with its reason."""
    net = import_onnx(_save(STYLES["vit"](), tmp_path))
    kinds = {op.type: op.local for op in net.ops}
    assert kinds["Softmax"] and kinds["MatMul"] and kinds["LayerNormalization"] and kinds["Concat"]
    assert kinds["Slice"] and not kinds["Gemm"] and not kinds["Patchify"] and "Conv" not in kinds
    assert "Gather" not in kinds
    assert all(op.reason for op in net.global_ops)
    ln = next(op for op in net.ops if op.type == "LayerNormalization")
    assert [w.shape for w in ln.weights] == [(1, 1, 32), (1, 1, 32)]  # right-aligned to the activation's rank


def test_dynamic_batch_is_a_clear_error_and_can_be_fixed(tmp_path):
    g = G((1, 3, 16, 16), dynamic_batch=True)
    g.out(g.conv("x", 3, 8))
    p = _save(g.model(), tmp_path)
    with pytest.raises(LgoptError, match=r"tensor 'x' has shape \[N,3,16,16\]"):
        import_onnx(p)
    net = import_onnx(p, input_shapes={"x": (4, 3, 16, 16)})
    assert net.tensor(net.outputs[0]).shape == (4, 8, 16, 16)
    with pytest.raises(LgoptError, match="not a model input"):
        import_onnx(p, input_shapes={"y": (1, 3, 16, 16)})


def test_dtype_option(tmp_path):
    g = G((1, 3, 16, 16))
    g.out(g.conv("x", 3, 8))
    p = _save(g.model(), tmp_path)
    net = import_onnx(p, dtype="f16")
    assert {t.dtype for t in net.tensors.values()} == {"f16"}
    assert net.ops[0].weights[0].dtype == "f16"
    with pytest.raises(LgoptError, match="compute dtype"):
        import_onnx(p, dtype="f8")


def test_broken_files(tmp_path, fixtures_dir):
    data = (fixtures_dir / "onnx" / "resnet18.weightless.onnx").read_bytes()
    for i, blob in enumerate([data[: len(data) // 3], b"not a model", b""]):
        p = tmp_path / f"b{i}.onnx"
        p.write_bytes(blob)
        with pytest.raises(LgoptError):
            import_onnx(p)
    with pytest.raises(LgoptError, match="does not exist"):
        import_onnx(tmp_path / "none.onnx")


def test_inconsistent_shapes_are_an_error(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "g", [x, y], [z])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.graph.input[1].type.tensor_type.shape.dim[2].dim_value = 5
    with pytest.raises(LgoptError):
        import_onnx(_save(m, tmp_path))


def test_bundled_problems_load(problems_dir):
    names = {p.stem for p in problems_dir.glob("*.json")}
    assert {"resnet18", "resnet50", "mobilenet_v2", "vgg16", "unet", "yolov5s", "fixture_resnet18",
            "fixture_yolov5s_like"} <= names
    unet = load_problem(problems_dir / "unet.json")
    assert unet.tensor(unet.inputs[0]).shape == (1, 3, 256, 256)
    types = {op.type for op in unet.ops}
    assert {"Concat", "ConvTranspose", "Resize"} <= types
    yolo = load_problem(problems_dir / "yolov5s.json")
    assert yolo.tensor(yolo.inputs[0]).shape == (1, 3, 640, 640)
    assert sum(op.type == "MaxPool" for op in yolo.ops) == 3  # SPPF


def test_bundled_problems_match_their_builders(problems_dir, tmp_path):
    from lgopt.io.zoo import build_all

    build_all(tmp_path)
    for p in tmp_path.glob("*.json"):
        assert json.loads(p.read_text()) == json.loads((problems_dir / p.name).read_text()), p.name


def test_problem_file_errors(tmp_path):
    with pytest.raises(LgoptError, match="not an lgopt problem"):
        network_from_dict({"format": "other"})
    with pytest.raises(LgoptError, match="version"):
        network_from_dict({"format": "lgopt-problem", "version": 99})
    bad = {"format": "lgopt-problem", "version": 1, "inputs": ["x"], "outputs": ["y"],
           "tensors": {"x": {"shape": [1, 3, 8, 8]}, "y": {"shape": [1, 3, 8, 8]}},
           "ops": [{"name": "a", "type": "Relu", "inputs": ["x"], "outputs": ["q"]}]}
    with pytest.raises(LgoptError, match="not declared"):
        network_from_dict(bad)
    bad["tensors"]["x"]["shape"] = [1, 0, 8, 8]
    with pytest.raises(LgoptError, match="non-positive"):
        network_from_dict(bad)


def test_input_shape_override_reinfers_recorded_shapes(fixtures_dir):
    """The fixture records 224x224 shapes for every tensor; a new input shape must replace them all."""
    net = import_onnx(fixtures_dir / "onnx" / "resnet18.weightless.onnx", input_shapes={"input": (2, 3, 64, 64)})
    assert net.ops[0].outputs and net.tensor(net.ops[0].outputs[0]).shape == (2, 64, 32, 32)
    assert net.tensor(net.outputs[0]).orig_shape == (2, 1000)


def test_classifier_heads_group_like_tpu_mlir(tmp_path):
    """GlobalAveragePool -> Flatten and mean over H, W without keepdims (torchvision's ResNet/MobileNet and
    MnasNet heads) are views in LMEM: local, as TPU-MLIR groups them; a Flatten of pixels into channels,
    a reshape into another rank that moves channels, stays global with the reason."""
    g = G((2, 3, 16, 16))
    x = g.conv("x", 3, 8)
    g.out(g.n("Flatten", [g.n("GlobalAveragePool", [x])], axis=1))
    g.out(g.n("ReduceMean", [x], axes=[2, 3], keepdims=0))
    g.out(g.n("Flatten", [x], axis=1))
    g.out(g.n("Reshape", [x, g.w(None, np.array([2, 8, 2, 128], np.int64))]))
    g.out(g.n("Reshape", [x, g.w(None, np.array([2, 2, 4, 16, 16], np.int64))]))
    net = import_onnx(_save(g.model(), tmp_path))
    flat_gap, mean, flat_pix, resplit, shuffle = [op for op in net.ops if op.type in ("Flatten", "ReduceMean",
                                                                                      "Reshape")]
    assert flat_gap.local and flat_gap.h_split and flat_gap.weights == ()
    assert mean.local and net.tensor(mean.outputs[0]).shape == (2, 8, 1, 1)
    assert not flat_pix.local and "moves data between lanes" in flat_pix.reason
    assert resplit.local and not resplit.h_split  # (2, 8, 16, 16) -> (2, 8, 2, 128): H x W re-split
    assert not shuffle.local and "moves data between lanes" in shuffle.reason


def test_batchnorm_on_pooled_vectors_runs_in_a_group(tmp_path):
    """RepViT's head: global pooling to ``[N, C]`` (ReduceMean, keepdims 0), then a BatchNorm on those vectors.
    TPU-MLIR lowers that BatchNorm to a per-channel Scale on ``(N, C, 1, 1)`` and groups it with the pooling;
    lgopt runs it in a group too, and the group computes what the unsliced network does."""
    from lgopt.check.simulate import simulate
    from lgopt.hw.chip import get_chip
    from lgopt.model.plan import GroupPlan
    from lgopt.strategies.greedy import greedy

    g = G((1, 8, 16, 16))
    x = g.n("Relu", [g.conv("x", 8, 16, 3)])
    v = g.n("ReduceMean", [x], axes=[2, 3], keepdims=0)
    v = g.bn(v, 16)
    g.out(g.n("Gemm", [v, g.w([10, 16]), g.w([10])], transB=1))
    net = import_onnx(_save(g.model(), tmp_path), dtype="f16")
    bn = next(op for op in net.ops if op.type == "BatchNormalization")
    assert bn.local, bn.reason
    plan = greedy(net, get_chip("bm1684x"))
    assert any(bn.name in gp.ops for gp in plan.groups if isinstance(gp, GroupPlan))
    assert simulate(net, plan).ok


def test_fused_nodes_tensors_are_aliases_of_the_op(tmp_path):
    """The dynamo exporter names tensors apart from nodes (``node_linear`` makes ``linear``), so a tensor an
    import fusion made disappear (a conv's output before its BatchNorm and Relu, a MatMul's before its bias) can
    only be found by its own name: TPU-MLIR names its ops after them.  Aliases, never part of the digest."""
    from lgopt.model.network import network_digest
    from lgopt.tpumlir.cache import tensor_aliases

    g = G((1, 8, 16, 16))  # nodes "Op_k", tensors "tk_0": node and tensor names unrelated, as dynamo's
    c = g.conv("x", 8, 16, 3)
    b = g.bn(c, 16)
    r = g.n("Relu", [b])
    g.out(r)
    net = import_onnx(_save(g.model(), tmp_path), dtype="f16")
    conv = next(op for op in net.ops if op.type == "Conv")
    assert conv.outputs == (r,) and set(conv.aliases) == {c, b}
    aliases = tensor_aliases(net)
    assert aliases[c] == aliases[b] == conv.name
    assert network_digest(net) == network_digest(replace_aliases(net))


def replace_aliases(net):
    from dataclasses import replace

    return replace(net, ops=tuple(replace(op, aliases=()) for op in net.ops))

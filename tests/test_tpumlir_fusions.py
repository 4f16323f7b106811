"""TPU-MLIR's fusions that lgopt's importer does not make (lgopt.tpumlir.fusions), read from its caches and
written back: small ONNX graphs of each pattern, and caches naming their ops as TPU-MLIR 1.30.2 named them when
it compiled these very graphs on BM1684X (and, identically, BM1688): a pre-activation BN with no activation, a
``Mul -> BN -> Relu`` and a ``BN -> BN`` (one Scale), a per-channel Mul or Add after a conv (folded into it), a
Relu after a Concat (moved onto its inputs, ``_move_ahead_relu``), a crop of a conv's padding (the conv, named
after the Slice), a linear 1x1 conv before an unpadded conv (one conv), a LeakyRelu or a Clip from -1 (ops of their
own).  TPU-MLIR's own grouping (one group) and every cut of it in two, forced without a global-layer list as the
calibration variants are, read exactly, verify, and export back to the same groups.  No TPU-MLIR, no torch."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lgopt.hw.chip import get_chip
from lgopt.io.onnx_import import import_onnx
from lgopt.report.verdict import verify
from lgopt.tpumlir.cache import load_cache
from lgopt.tpumlir.export import export_tpumlir
from lgopt.tpumlir.grouping import score
from lgopt.tpumlir.lowering import lower_like, network_of

C = 8


class Torchlike:
    """An ONNX graph named as torch's TorchScript exporter names it (node ``/<name>/<Op>``, output
    ``/<name>/<Op>_output_0``), its weights absent (a weightless file), shape data in Constant nodes."""

    def __init__(self):
        self.nodes, self.inits, self.k = [], [], 0

    def w(self, dims):
        self.k += 1
        t = TensorProto(name=f"w{self.k}", data_type=TensorProto.FLOAT, dims=list(dims))
        t.data_location = TensorProto.EXTERNAL
        e = t.external_data.add()
        e.key, e.value = "location", "absent.bin"
        self.inits.append(t)
        return t.name

    def const(self, value, dtype=np.float32):
        self.k += 1
        name = f"c{self.k}"
        self.nodes.append(helper.make_node("Constant", [], [name], name=f"/const{self.k}",
                                           value=numpy_helper.from_array(np.asarray(value, dtype))))
        return name

    def n(self, op, inputs, name, **attrs):
        out = f"/{name}/{op}_output_0"
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"/{name}/{op}", **attrs))
        return out

    def conv(self, x, name, k=3, s=1, pad=None, ic=C, oc=C, g=1):
        p = k // 2 if pad is None else pad
        return self.n("Conv", [x, self.w([oc, ic // g, k, k]), self.w([oc])], name, kernel_shape=[k, k],
                      strides=[s, s], pads=[p] * 4, group=g)

    def bn(self, x, name):
        return self.n("BatchNormalization", [x] + [self.w([C]) for _ in range(4)], name)

    def relu(self, x, name):
        return self.n("Relu", [x], name)

    def channel(self, op, x, name):  # a Mul or Add of a per-channel constant
        return self.n(op, [x, self.w([1, C, 1, 1])], name)

    def save(self, out, path):
        g = helper.make_graph(self.nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                              [1, C, 16, 16])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        onnx.save(m, str(path))
        return import_onnx(path, dtype="f16")


def preact(g):
    """BN on the input and pre-activation BNs (no activation, with a Relu, read twice); a conv read twice
    before its BN; a Concat -> Relu; a conv -> Mul -> Add -> Relu."""
    a = g.relu(g.bn(g.conv(g.bn("input", "bn_in"), "conv_a"), "bn_a"), "relu_a")
    b = g.n("Add", [a, "input"], "add_b")
    c = g.conv(g.bn(b, "bn_b"), "conv_b")
    c2 = g.n("Add", [c, b], "add_c")
    pre = g.relu(g.bn(c2, "bn_c"), "relu_c")
    c3 = g.n("Add", [g.conv(pre, "conv_c"), g.conv(pre, "down_c", k=1)], "add_c2")
    e = g.conv(c3, "conv_e")
    ge = g.n("Add", [e, g.conv(g.relu(g.bn(e, "bn_e"), "relu_e"), "conv_e2")], "add_e")
    j = g.conv(g.bn(g.relu(g.conv(ge, "conv_f"), "relu_f"), "bn_f"), "conv_f2")
    k = g.n("MaxPool", [j], "pool_g", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    m = g.conv(g.relu(g.bn(k, "bn_g"), "relu_g"), "conv_g")
    n = g.n("Concat", [g.conv(m, "conv_h1"), g.conv(m, "conv_h2")], "cat_h", axis=1)
    q = g.relu(g.bn(g.bn(g.conv(g.relu(n, "relu_h"), "conv_h3", ic=2 * C), "bn_k1"), "bn_k2"), "relu_k")
    r = g.conv(q, "conv_k")
    v = g.relu(g.channel("Add", g.channel("Mul", g.conv(r, "conv_j"), "mul_j"), "add_j"), "relu_d")
    z = g.bn(v, "bn_d")
    return g.n("Add", [g.conv(z, "conv_d"), z], "add_d")


PREACT = ["input/bn_in/BatchNormalization_output_0_BatchNormalization_f16",
          "/bn_in/BatchNormalization_output_0_BatchNormalization", "/relu_a/Relu_output_0_Relu",
          "/add_b/Add_output_0_Add", "/bn_b/BatchNormalization_output_0_BatchNormalization",
          "/conv_b/Conv_output_0_Conv", "/add_c/Add_output_0_Add", "/relu_c/Relu_output_0_Relu",
          "/conv_c/Conv_output_0_Conv", "/down_c/Conv_output_0_Conv", "/add_c2/Add_output_0_Add",
          "/conv_e/Conv_output_0_Conv", "/relu_e/Relu_output_0_Relu", "/conv_e2/Conv_output_0_Conv",
          "/add_e/Add_output_0_Add", "/relu_f/Relu_output_0_Relu",
          "/bn_f/BatchNormalization_output_0_BatchNormalization", "/conv_f2/Conv_output_0_Conv",
          "/pool_g/MaxPool_output_0_MaxPool", "/relu_g/Relu_output_0_Relu", "/conv_g/Conv_output_0_Conv",
          "/conv_h2/Conv_output_0_Conv_move_ahead_relu", "/conv_h1/Conv_output_0_Conv_move_ahead_relu",
          "/cat_h/Concat_output_0_Concat_relu", "/relu_k/Relu_output_0_Relu", "/conv_k/Conv_output_0_Conv",
          "/relu_d/Relu_output_0_Relu", "/bn_d/BatchNormalization_output_0_BatchNormalization",
          "/conv_d/Conv_output_0_Conv", "/add_d/Add_output_0_Add", "/add_d/Add_output_0_Add_f32"]


def scales(g):
    """BN -> BN, Mul -> BN -> Relu and BN -> Mul -> Add after Adds; a per-channel Mul and Add after convs; BN ->
    LeakyRelu and BN -> Clip(0, 6); a Concat of an Add and a MaxPool -> Relu; a conv read twice before its BN; a
    1x1 conv before a 3x3 stride-2 conv without padding."""
    a = g.relu(g.conv("input", "conv_a"), "relu_a")
    b = g.n("Add", [a, "input"], "add_b")
    c = g.conv(g.bn(g.bn(b, "bn_b1"), "bn_b2"), "conv_b")
    d = g.n("Add", [c, b], "add_d")
    e = g.conv(g.relu(g.bn(g.channel("Mul", d, "mul_d"), "bn_d"), "relu_d"), "conv_d")
    f = g.n("Add", [e, d], "add_f")
    h = g.conv(g.channel("Add", g.channel("Mul", g.bn(f, "bn_f"), "mul_f"), "addc_f"), "conv_f")
    k2 = g.n("Add", [g.channel("Mul", g.conv(h, "conv_k", k=1), "mul_k"), h], "add_k")
    m = g.relu(g.channel("Add", g.conv(k2, "conv_m"), "addc_m"), "relu_m")
    n = g.n("Add", [m, k2], "add_n")
    o = g.n("Add", [g.conv(g.n("LeakyRelu", [g.bn(n, "bn_n")], "lrelu_n", alpha=0.1), "conv_n"), n], "add_o")
    p = g.conv(g.n("Clip", [g.bn(o, "bn_o"), g.const(0), g.const(6)], "clip_o"), "conv_o")
    q = g.n("Concat", [g.n("Add", [p, o], "add_q"), g.n("MaxPool", [p], "pool_q", kernel_shape=[3, 3],
                                                          strides=[1, 1], pads=[1, 1, 1, 1])], "cat_q", axis=1)
    s = g.conv(g.conv(g.relu(q, "relu_q"), "conv_q", ic=2 * C), "conv_s")
    t = g.n("Add", [g.bn(s, "bn_s"), s], "add_s")
    return g.relu(g.conv(g.conv(t, "pw_u", k=1), "k3_u", s=2, pad=0), "relu_out")


SCALES = ["input/relu_a/Relu_output_0_Relu_f16", "/relu_a/Relu_output_0_Relu", "/add_b/Add_output_0_Add",
          "/bn_b2/BatchNormalization_output_0_BatchNormalization", "/conv_b/Conv_output_0_Conv",
          "/add_d/Add_output_0_Add", "/relu_d/Relu_output_0_Relu", "/conv_d/Conv_output_0_Conv",
          "/add_f/Add_output_0_Add", "/addc_f/Add_output_0_Add", "/conv_f/Conv_output_0_Conv",
          "/mul_k/Mul_output_0_Mul", "/add_k/Add_output_0_Add", "/relu_m/Relu_output_0_Relu",
          "/add_n/Add_output_0_Add", "/bn_n/BatchNormalization_output_0_BatchNormalization",
          "/lrelu_n/LeakyRelu_output_0_LeakyRelu", "/conv_n/Conv_output_0_Conv", "/add_o/Add_output_0_Add",
          "/clip_o/Clip_output_0_Clip", "/conv_o/Conv_output_0_Conv",
          "/pool_q/MaxPool_output_0_MaxPool_move_ahead_relu", "/add_q/Add_output_0_Add_move_ahead_relu",
          "/cat_q/Concat_output_0_Concat_relu",
          "/conv_q/Conv_output_0_Conv", "/conv_s/Conv_output_0_Conv",
          "/bn_s/BatchNormalization_output_0_BatchNormalization", "/add_s/Add_output_0_Add",
          "/relu_out/Relu_output_0_Relu", "/relu_out/Relu_output_0_Relu_f32"]


def slices(g):
    """A ghost module's Concat cut to 24 channels, a conv's channels cut, a conv padded 2 cropped by 1 on every
    side, and a 1x1 conv before a 3x3 conv without padding."""
    x1 = g.relu(g.conv("input", "ghost/primary_conv", k=1), "ghost/primary_relu")
    x2 = g.relu(g.conv(x1, "ghost/cheap", g=C), "ghost/cheap_relu")
    cat = g.n("Concat", [x1, x2], "ghost", axis=1)
    s = g.n("Slice", [cat, g.const([0], np.int64), g.const([24 * C // 16], np.int64), g.const([1], np.int64)],
            "ghost")
    y = g.conv(s, "next/primary_conv", k=1, ic=24 * C // 16)
    w1 = g.n("Slice", [g.conv(y, "wide", k=1, oc=2 * C), g.const([0], np.int64), g.const([C], np.int64),
                       g.const([1], np.int64)], "wide")
    cp = g.conv(g.conv(w1, "after_wide"), "crop_conv", pad=2)
    cs = g.n("Slice", [cp, g.const([1, 1], np.int64), g.const([17, 17], np.int64), g.const([2, 3], np.int64)],
             "crop")
    return g.relu(g.conv(g.conv(cs, "pw_l", k=1), "k3_l", pad=0), "relu_out")


SLICES = ["input/ghost/primary_relu/Relu_output_0_Relu_f16", "/ghost/primary_relu/Relu_output_0_Relu",
          "/ghost/cheap_relu/Relu_output_0_Relu", "/ghost/Concat_output_0_Concat", "/ghost/Slice_output_0_Slice",
          "/wide/Conv_output_0_Conv", "/wide/Slice_output_0_Slice", "/after_wide/Conv_output_0_Conv",
          "/crop/Slice_output_0_Slice", "/relu_out/Relu_output_0_Relu", "/relu_out/Relu_output_0_Relu_f32"]


def acts(g):
    """LeakyRelu after a conv and an Add, Clip(-1, 1) after a conv (ops of their own in TPU-MLIR), Clip(0, 6)
    after a conv and an Add (fused)."""
    a = g.n("LeakyRelu", [g.conv("input", "conv_a")], "lrelu_a", alpha=0.1)
    b = g.n("Clip", [g.conv(a, "conv_b"), g.const(-1), g.const(1)], "clip_b")
    c = g.n("LeakyRelu", [g.n("Add", [b, a], "add_c")], "lrelu_c", alpha=0.2)
    d = g.n("Clip", [g.conv(c, "conv_d"), g.const(0), g.const(6)], "clip_d")
    e = g.n("Clip", [g.n("Add", [d, c], "add_e"), g.const(0), g.const(6)], "clip_e")
    return g.conv(e, "conv_out")


ACTS = ["input/conv_a/Conv_output_0_Conv_f16", "/conv_a/Conv_output_0_Conv", "/lrelu_a/LeakyRelu_output_0_LeakyRelu",
        "/conv_b/Conv_output_0_Conv", "/clip_b/Clip_output_0_Clip", "/add_c/Add_output_0_Add",
        "/lrelu_c/LeakyRelu_output_0_LeakyRelu", "/clip_d/Clip_output_0_Clip", "/clip_e/Clip_output_0_Clip",
        "/conv_out/Conv_output_0_Conv", "/conv_out/Conv_output_0_Conv_f32"]

CASES = {"preact": (preact, PREACT), "scales": (scales, SCALES), "slices": (slices, SLICES), "acts": (acts, ACTS)}
RULES = {"preact": ["TopMoveReluAheadConcat", "MergeScale2Conv"],
         "scales": ["TopMultiScaleMergeToOne", "MergeScale2Conv", "TopMoveReluAheadConcat", "LeakyRelu is an op",
                    "and the 3x3 one after it"],
         "slices": ["two 1x1 convolutions", "ConvSlice", "and the 3x3 one after it"],
         "acts": ["LeakyRelu is an op", "Clip is an op"]}


def _cache(path, locs, cuts=(), listed=True):
    """``locs`` as TPU-MLIR's layer-group cache: one group cut at ``cuts``, its global-layer list TPU-MLIR's own
    (``func.return`` only) or, ``listed=False``, none (a forced cache)."""
    bounds = [0, *cuts, len(locs)]
    groups = [{"base_group_idx": 0, "start_idx": a, "end_idx": b - 1, "func_start_idx": a, "func_end_idx": b - 1,
               "group_cost": 0, "index": i, "locs": locs[a:b], "shape_secs": [1, 1, 1, 1, 1]}
              for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    sub = {"GroupLayer": groups}
    if listed:
        sub["GlobalLayer"] = [{"index": len(groups), "func_idx": len(locs), "group_cost": 0, "loc": "func.return"}]
    path.write_text(json.dumps({"opt": 2, "subfunc_0": sub}))
    return str(path)


def _model(tmp_path, case):
    build, locs = CASES[case]
    g = Torchlike()
    return g.save(build(g), tmp_path / f"{case}.weightless.onnx"), locs


def _round_trip(net, path, reference):
    """Read exactly, verified, and exported back to the same groups."""
    plan, info = score(net, get_chip("bm1684x"), path)
    assert info["groups_scored"] == info["groups_in_cache"] and info["unmapped"] == [] and info["adjusted"] == []
    assert verify(net, plan) == []
    out = export_tpumlir(plan, network_of(net, plan), reference)
    given = [g["locs"] for g in json.loads(open(path).read())["subfunc_0"]["GroupLayer"]]
    assert [g["locs"] for g in out["subfunc_0"]["GroupLayer"]] == given
    return plan, info


@pytest.mark.parametrize("case", sorted(CASES))
def test_tpu_mlirs_own_grouping_reads_exactly_and_exports_back(tmp_path, case):
    net, locs = _model(tmp_path, case)
    ref = _cache(tmp_path / "own.layer_group_cache.json", locs)
    low, notes = lower_like(net, load_cache(ref), None)
    assert all(any(rule in n for n in notes) for rule in RULES[case]), notes
    apart = sum("an op of its own" in n for n in notes)  # each adds an op, each fusion takes one away
    assert len(low.ops) == len(net.ops) + apart - (len(notes) - apart)
    plan, info = _round_trip(net, ref, ref)
    assert info["lowered"] and info["fused"] == [] and info["split"] == {}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_cut_in_two_forced_without_global_layers_reads_and_exports_back(tmp_path, case):
    """TPU-MLIR's group cut in two anywhere (two ops or more each side), written as the calibration variants
    are (no global-layer list, so an op no TPU-MLIR op names is not fused anywhere): the fused ops are one op on
    each side, never a path that leaves a group and comes back, nor a global op inside it."""
    net, locs = _model(tmp_path, case)
    ref = _cache(tmp_path / "own.layer_group_cache.json", locs)
    for k in range(2, len(locs) - 1):
        _round_trip(net, _cache(tmp_path / f"cut{k}.layer_group_cache.json", locs, (k,), listed=False), ref)


def test_an_op_tpu_mlir_names_is_not_fused_away(tmp_path):
    """A cache naming the conv before a per-channel Mul (as when TPU-MLIR did not fold it) keeps it an op; the
    Mul and Add after it are still one scale."""
    net, locs = _model(tmp_path, "preact")
    at = locs.index("/relu_d/Relu_output_0_Relu")
    named = locs[:at] + ["/conv_j/Conv_output_0_Conv"] + locs[at:]
    low, notes = lower_like(net, load_cache(_cache(tmp_path / "c.layer_group_cache.json", named)), None)
    assert "/conv_j/Conv" in {o.name for o in low.ops}
    assert low.op("/add_j/Add").type == "BatchNormalization" and low.op("/add_j/Add").inputs == \
        low.op("/conv_j/Conv").outputs
    _round_trip(net, _cache(tmp_path / "c.layer_group_cache.json", named, (at + 1,)),
                _cache(tmp_path / "r.layer_group_cache.json", named))


def test_the_folds_keep_shapes_and_what_each_op_computes(tmp_path):
    """The lowered ops: a scale folded into a conv is that conv with a bias and the scale's activation; two
    scales are one BatchNormalization of a scale and a bias; the crop is the conv padded 1 less; the Relu
    after a Concat is the Concat's; a LeakyRelu is an op on the tensor its node read."""
    net, locs = _model(tmp_path, "preact")
    low, _ = lower_like(net, load_cache(_cache(tmp_path / "p.json", locs)), None)
    d = low.op("/add_j/Add")
    assert d.type == "Conv" and d.fused == ("Relu",) and [w.role for w in d.weights] == ["filter", "bias"]
    cat = low.op("/cat_h/Concat")
    assert cat.fused == ("Relu",) and cat.outputs == ("/relu_h/Relu_output_0",)
    net2, locs2 = _model(tmp_path, "slices")
    low2, _ = lower_like(net2, load_cache(_cache(tmp_path / "s.json", locs2)), None)
    crop = low2.op("/crop/Slice")
    assert crop.type == "Conv" and crop.local and tuple(crop.attrs["pads"]) == (1, 1, 1, 1)
    assert low2.tensor(crop.outputs[0]).shape == net2.tensor("/crop/Slice_output_0").shape
    net3, locs3 = _model(tmp_path, "scales")
    low3, _ = lower_like(net3, load_cache(_cache(tmp_path / "c.json", locs3)), None)
    b2 = low3.op("/bn_b2/BatchNormalization")
    assert b2.inputs == ("/add_b/Add_output_0",) and [w.role for w in b2.weights] == ["scale", "bias"]
    lrelu = low3.op("/lrelu_n/LeakyRelu")
    assert lrelu.type == "LeakyRelu" and lrelu.inputs == ("/bn_n/BatchNormalization_output_0",)
    assert lrelu.attrs == {"alpha": pytest.approx(0.1)} and low3.op("/bn_n/BatchNormalization").fused == ()


def test_a_ghost_modules_full_slice_is_no_op(tmp_path):
    """GhostNet's ``cat([x1, x2])[:, :out]`` takes every channel: TPU-MLIR removes the Slice and names no op
    after it, and lgopt's importer drops it, so a group ending at the Concat and one starting at the next conv
    export as they read (it was refused: the Slice, unnamed, was put in the next conv's TPU-MLIR op)."""
    g = Torchlike()
    x1 = g.relu(g.conv("input", "ghost1/primary_conv", k=1), "ghost1/primary_relu")
    x2 = g.relu(g.conv(x1, "ghost1/cheap", g=C), "ghost1/cheap_relu")
    cat = g.n("Concat", [x1, x2], "ghost1", axis=1)
    s = g.n("Slice", [cat, g.const([0], np.int64), g.const([2 * C], np.int64), g.const([1], np.int64)], "ghost1")
    y = g.conv(g.conv(s, "ghost2/primary_conv", k=1, ic=2 * C), "ghost2/cheap", g=C)
    net = g.save(y, tmp_path / "ghost.weightless.onnx")
    assert "Slice" not in {o.type for o in net.ops}
    locs = ["input/ghost1/primary_relu/Relu_output_0_Relu_f16", "/ghost1/primary_relu/Relu_output_0_Relu",
            "/ghost1/cheap_relu/Relu_output_0_Relu", "/ghost1/Concat_output_0_Concat",
            "/ghost2/primary_conv/Conv_output_0_Conv", "/ghost2/cheap/Conv_output_0_Conv",
            "/ghost2/cheap/Conv_output_0_Conv_f32"]
    ref = _cache(tmp_path / "ref.json", locs)
    _round_trip(net, _cache(tmp_path / "cut.json", locs, (4,), listed=False), ref)


def test_a_relu_after_a_matmul_is_fused_into_it():
    """TPU-MLIR fuses a Relu into a MatMul (``FuseRelu``; VGG's global ``Gemm -> Relu`` heads run as one
    ``tpu.MatMul`` named after the Relu's output); the importer fuses activations into layer-group ops only."""
    from lgopt.model.network import Network, Op, Tensor, Weight
    from lgopt.tpumlir.lowering import fold_like_tpu_mlir

    ts = {"x": Tensor("x", (1, 512, 1, 1), "f16", (1, 512)), "y": Tensor("y", (1, 256, 1, 1), "f16", (1, 256)),
          "z": Tensor("z", (1, 256, 1, 1), "f16", (1, 256))}
    fc = Op("/fc/Gemm", "Gemm", ("x",), ("y",), (Weight("w", (256, 512), "f16", "filter"),))
    relu = Op("/relu/Relu", "Relu", ("y",), ("z",))
    low, notes = fold_like_tpu_mlir(Network("head", ts, (fc, relu), ("x",), ("z",)), frozenset())
    assert [(o.name, o.type, o.outputs, o.fused) for o in low.ops] == [("/relu/Relu", "Gemm", ("z",), ("Relu",))]
    assert len(notes) == 1 and "FuseRelu" in notes[0]
    kept, _ = fold_like_tpu_mlir(Network("head", ts, (fc, relu), ("x",), ("z",)), frozenset({"/fc/Gemm"}))
    assert [o.name for o in kept.ops] == ["/fc/Gemm", "/relu/Relu"]  # a cache naming the Gemm keeps it apart

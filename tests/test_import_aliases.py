"""What TPU-MLIR's front end imports, lgopt imports (issue 37): aliases of initializers (Identity, Constant
nodes, one initializer shared by several nodes), shape arithmetic folded on static shapes however deep,
constants computed from absent weights, no-op nodes, a BatchNorm no conv absorbs as a local op; a weightless
copy imports as its full file does; a model lgopt cannot take is one line naming the op and exit 2.

torch's exporter shares equal initializers through ``Identity`` nodes (with random weights: every zero bias
and every BatchNorm's ones), and a window-attention transformer (torchvision's swin_t) computes its window
shapes with hundreds of ``Shape -> Gather -> Concat -> Reshape`` chains, each from the output of the one
before.  These graphs reproduce both with onnx.helper."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lgopt.cli import main
from lgopt.io.onnx_import import import_onnx
from lgopt.model.network import network_to_dict


class Graph:
    """A small ONNX graph with float weights (random) that :meth:`save` writes in full or weightless."""

    def __init__(self, shape=(1, 8, 16, 16), opset=13):
        self.inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))]
        self.nodes, self.inits, self.outputs = [], [], []
        self.opset, self.k = opset, 0
        self.rng = np.random.default_rng(0)

    def w(self, data, name=None):
        self.k += 1
        name = name or f"w{self.k}"
        self.inits.append(numpy_helper.from_array(np.asarray(data), name))
        return name

    def rand(self, *dims):
        return self.w(self.rng.normal(0, 0.1, dims).astype(np.float32))

    def n(self, op, inputs, nout=1, name=None, **attrs):
        self.k += 1
        outs = [f"t{self.k}_{i}" for i in range(nout)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name or f"{op}_{self.k}", **attrs))
        return outs[0] if nout == 1 else outs

    def conv(self, x, ic, oc, bias=None, weight=None):
        ins = [x, weight or self.rand(oc, ic, 3, 3)] + ([bias] if bias else [])
        return self.n("Conv", ins, kernel_shape=[3, 3], pads=[1, 1, 1, 1])

    def out(self, x):
        self.outputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, None))

    def save(self, path, weightless=False):
        """Write the model; ``weightless``: every initializer keeps its dims and type, its data absent (the
        float weights only, as the calibration's weightless copies: ``int64`` shape data stays)."""
        inits = []
        for init in self.inits:
            if weightless and init.data_type == TensorProto.FLOAT:
                t = TensorProto(name=init.name, data_type=init.data_type, dims=list(init.dims))
                t.data_location = TensorProto.EXTERNAL
                e = t.external_data.add()
                e.key, e.value = "location", "weights.absent.bin"
                init = t
            inits.append(init)
        g = helper.make_graph(self.nodes, "g", self.inputs, self.outputs, inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = 8
        onnx.save(m, str(path))
        return path


def _both(g, tmp_path, **kw):
    """The graph imported from its full file and from its weightless copy, which must agree."""
    full = import_onnx(g.save(tmp_path / "m.onnx"), **kw)
    bare = import_onnx(g.save(tmp_path / "m.weightless.onnx", weightless=True), **kw)
    assert network_to_dict(full) == network_to_dict(bare)
    return bare


def _agrees_with_onnxruntime(net, path):
    """The aliases are the initializers themselves: given lgopt's weights under their names, onnxruntime
    computes what lgopt's reference does."""
    from lgopt.check.simulate import check_with_onnxruntime

    msg = check_with_onnxruntime(net, str(path))
    assert "agrees with onnxruntime" in msg or "not installed" in msg, msg


def test_a_conv_bias_shared_through_identity_in_a_weightless_file(tmp_path, capsys):
    """torch's exporter: the second conv's zero bias is an ``Identity`` of the first's.  In a weightless file
    the Identity's input has no data; the conv takes the initializer itself as its bias (it used to end in
    ``internal error: KeyError``, exit 3)."""
    g = Graph()
    b = g.w(np.zeros(8, np.float32))
    y = g.n("Relu", [g.conv("x", 8, 8, bias=b)])
    g.out(g.n("Relu", [g.conv(y, 8, 8, bias=g.n("Identity", [b]))]))
    net = _both(g, tmp_path)
    assert [op.type for op in net.ops] == ["Conv", "Conv"] and all(op.local for op in net.ops)
    assert [[w.name for w in op.weights if w.role == "bias"] for op in net.ops] == [[b], [b]]
    _agrees_with_onnxruntime(net, tmp_path / "m.weightless.onnx")
    code = main(["import", str(tmp_path / "m.weightless.onnx"), "-o", str(tmp_path / "m.json")])
    out, err = capsys.readouterr()
    assert code == 0 and "2 ops (2 local, 0 global)" in out, err


def test_a_constant_node_and_an_identity_of_it_as_conv_weights(tmp_path):
    """A filter from a ``Constant`` node and a bias from an ``Identity`` of another: both are constants."""
    g = Graph()
    filt = g.n("Constant", [], value=numpy_helper.from_array(g.rng.normal(0, 0.1, (8, 8, 3, 3)).astype(np.float32)))
    bias = g.n("Identity", [g.n("Constant", [], value=numpy_helper.from_array(np.zeros(8, np.float32)))])
    g.out(g.conv("x", 8, 8, bias=bias, weight=filt))
    net = _both(g, tmp_path)
    (conv,) = net.ops
    assert conv.local and [(w.role, w.shape) for w in conv.weights] == [("filter", (8, 8, 3, 3)), ("bias", (8,))]


def test_batchnorm_statistics_shared_through_identity_fold_and_stay_local(tmp_path):
    """Two BatchNorms whose statistics are the same initializers (the second's through ``Identity`` nodes):
    the first folds into its conv, the second -- before a conv, pre-activation -- is a local per-channel
    scale and shift with its Relu fused, not a global op on rank-1 tensors."""
    g = Graph()
    stats = [g.w(np.ones(8, np.float32)), g.w(np.zeros(8, np.float32)), g.w(np.zeros(8, np.float32)),
             g.w(np.ones(8, np.float32))]
    y = g.n("Relu", [g.n("BatchNormalization", [g.conv("x", 8, 8)] + stats)])
    shared = [g.n("Identity", [s]) for s in stats]
    pre = g.n("Relu", [g.n("BatchNormalization", [y] + shared, name="bn_pre")])
    g.out(g.conv(pre, 8, 8))
    net = _both(g, tmp_path)
    assert [op.type for op in net.ops] == ["Conv", "BatchNormalization", "Conv"]
    conv, bn, _ = net.ops
    assert "BatchNormalization" in " ".join(conv.sources) and conv.fused == ("Relu",)  # folded
    assert bn.local and bn.h_split and bn.fused == ("Relu",) and bn.sources[0] == "bn_pre"
    assert [(w.role, w.name, w.shape) for w in bn.weights] == [(r, s, (8,)) for r, s in
                                                                zip(("scale", "bias", "mean", "var"), stats)]
    assert not net.global_ops


def test_a_preactivation_batchnorm_is_a_local_op(tmp_path):
    """A BatchNorm at the head of a pre-activation block (BN, Relu, conv) has no conv before it to fold into:
    it is a local op, grouped like any per-channel scale and shift."""
    g = Graph()
    var = g.w(np.ones(8, np.float32))
    h = g.n("Relu", [g.n("BatchNormalization", ["x"] + [g.rand(8) for _ in range(3)] + [g.n("Identity", [var])])])
    g.out(g.n("Add", ["x", g.conv(h, 8, 8)]))
    net = _both(g, tmp_path)
    assert [(op.type, op.local) for op in net.ops] == [("BatchNormalization", True), ("Conv", True), ("Add", True)]
    _agrees_with_onnxruntime(net, tmp_path / "m.weightless.onnx")


def _window_chain(g, x, rounds):
    """``rounds`` reshapes, each to a target that Shape -> Gather -> Mul/Div -> Concat computes from the
    output of the reshape before it (the shape of which only the previous round's arithmetic fixes)."""
    for r in range(rounds):
        shp = g.n("Shape", [x])
        dims = [g.n("Gather", [shp, g.w(np.array(k, np.int64))], axis=0) for k in range(4)]
        if r % 2 == 0:  # split H in two halves: [N, C, H, W] -> [N, 2C, H/2, W]
            c = g.n("Mul", [dims[1], g.w(np.array(2, np.int64))])
            h = g.n("Div", [dims[2], g.w(np.array(2, np.int64))])
        else:  # and back
            c = g.n("Div", [dims[1], g.w(np.array(2, np.int64))])
            h = g.n("Mul", [dims[2], g.w(np.array(2, np.int64))])
        parts = [g.n("Unsqueeze", [d, g.w(np.array([0], np.int64))]) for d in (dims[0], c, h, dims[3])]
        x = g.n("Reshape", [x, g.n("Concat", parts, axis=0)])
        x = g.n("Relu", [x])
    return x


def test_shape_arithmetic_folds_however_deep_the_chain(tmp_path):
    """Forty rounds of Shape -> Gather -> Mul -> Unsqueeze -> Concat -> Reshape, each on the output of the
    round before, fold in one pass (they stopped at 16, leaving a tensor whose shape was unknown)."""
    g = Graph()
    g.out(_window_chain(g, "x", 40))
    net = _both(g, tmp_path)
    assert {op.type for op in net.ops} == {"Reshape", "Relu"}
    assert net.tensor(net.outputs[0]).orig_shape == (1, 8, 16, 16)
    mid = [op for op in net.ops if op.type == "Reshape"][0]
    assert net.tensor(mid.outputs[0]).orig_shape == (1, 16, 8, 16)


def test_a_constant_computed_from_absent_weights_is_a_constant(tmp_path):
    """Swin's relative position bias: a table Gathered by a constant index, reshaped, permuted and unsqueezed,
    then added to the attention scores.  With the weights present it is evaluated; without them it is a
    constant of the same shape and no data (TPU-MLIR's front end, which has the weights, folds it): the Add is
    the one op, local, its constant [1, 2, 16, 16], in both files."""
    g = Graph((4, 2, 16, 16))
    table = g.rand(49, 2)
    idx = g.w(g.rng.integers(0, 49, (256,)).astype(np.int64))
    bias = g.n("Gather", [table, idx], axis=0)
    bias = g.n("Reshape", [bias, g.w(np.array([16, 16, 2], np.int64))])
    bias = g.n("Unsqueeze", [g.n("Transpose", [bias], perm=[2, 0, 1]), g.w(np.array([0], np.int64))])
    g.out(g.n("Softmax", [g.n("Add", ["x", bias])], axis=-1))
    net = _both(g, tmp_path)
    assert [(op.type, op.local) for op in net.ops] == [("Add", True), ("Softmax", True)]
    assert [w.shape for w in net.ops[0].weights] == [(1, 2, 16, 16)]


def test_nodes_that_change_nothing_are_dropped(tmp_path):
    """A Pad by zeros (swin's window padding where the window divides the size), a Cast to the type it has,
    a Slice of everything and a Reshape to the same shape: TPU-MLIR's front end removes them, and so does
    the importer."""
    g = Graph()
    x = g.n("Pad", ["x", g.w(np.zeros(8, np.int64))])
    x = g.n("Cast", [x], to=TensorProto.FLOAT)
    x = g.n("Slice", [x, g.w(np.array([0], np.int64)), g.w(np.array([16], np.int64)), g.w(np.array([3], np.int64))])
    x = g.n("Reshape", [x, g.w(np.array([1, 8, 16, 16], np.int64))])
    g.out(g.n("Relu", [x]))
    net = _both(g, tmp_path)
    assert [op.type for op in net.ops] == ["Relu"] and net.ops[0].inputs == ("x",)


def test_a_real_pad_stays(tmp_path):
    g = Graph()
    g.out(g.n("Relu", [g.n("Pad", ["x", g.w(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))])]))
    net = _both(g, tmp_path)
    assert [op.type for op in net.ops] == ["Pad", "Relu"]


@pytest.mark.parametrize("build,needle", [
    (lambda g: g.out(g.n("NonZero", ["x"], name="nz")), "NonZero node 'nz', whose output shape depends on the data"),
    (lambda g: g.out(g.n("FooBar", ["x"], name="foo")), "FooBar node 'foo', an op ONNX opset 13 does not define"),
    (lambda g: g.out(g.conv("x", 8, 8, bias=g.n("ReduceMean", ["x"], axes=[0, 2, 3], keepdims=0))),
     "its Conv node 'Conv_"),
])
def test_a_model_lgopt_cannot_take_is_one_line_naming_the_op_and_exit_2(tmp_path, capsys, build, needle):
    g = Graph()
    build(g)
    path = g.save(tmp_path / "bad.weightless.onnx", weightless=True)
    code = main(["import", str(path), "-o", str(tmp_path / "bad.json")])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and err.startswith("lgopt: error:"), err
    assert needle in err and "internal error" not in err, err


def test_identity_affines_are_dropped_as_tpu_mlir_drops_them_where_the_file_has_their_values(tmp_path):
    """TPU-MLIR's front end drops a LayerNorm's scale of ones and bias of zeros (``convert_layer_norm_op``), and
    a zero bias the exporter shares between linear layers everywhere but at its first reader (timm's ViT in its
    ``_final.mlir``); the weights it keeps, and every weight of a weightless file, whose values are unknown,
    stay.  The network computes what the file does either way."""
    g = Graph(shape=(1, 16, 32), opset=17)
    z = g.w(np.zeros(32, np.float32))
    y = g.n("LayerNormalization", ["x", g.w(np.ones(32, np.float32)), g.w(np.zeros(32, np.float32))], axis=-1)
    y = g.n("Add", [g.n("MatMul", [y, g.rand(32, 32)]), z], name="fc1")
    y = g.n("Add", [g.n("MatMul", [y, g.rand(32, 32)]), z], name="fc2")
    y = g.n("LayerNormalization", [y, g.rand(32), z], axis=-1)
    g.out(y)
    full = import_onnx(g.save(tmp_path / "m.onnx"))
    roles = [(op.type, sorted(w.role for w in op.weights)) for op in full.ops]
    assert roles == [("LayerNormalization", []), ("MatMul", ["bias", "filter"]), ("MatMul", ["filter"]),
                     ("LayerNormalization", ["scale"])]
    assert [op.outputs for op in full.ops[1:3]] == [(g.nodes[2].output[0],), (g.nodes[4].output[0],)]
    _agrees_with_onnxruntime(full, tmp_path / "m.onnx")
    bare = import_onnx(g.save(tmp_path / "m.weightless.onnx", weightless=True))
    assert [sorted(w.role for w in op.weights) for op in bare.ops] == [
        ["bias", "scale"], ["bias", "filter"], ["bias", "filter"], ["bias", "scale"]]

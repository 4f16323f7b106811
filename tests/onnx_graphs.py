"""Small ONNX graphs in the shapes torchvision-style exports take, built with onnx.helper.

torch is not installable in CI, so these reproduce the op patterns of the
exports lgopt must survive: SE blocks (EfficientNet, RegNet), dense concats with
standalone BN (DenseNet), channel shuffle (ShuffleNet), LayerNorm/GELU on
permuted tensors (ConvNeXt), patch embedding with attention (ViT), and shape
arithmetic feeding Reshape.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper


class G:
    def __init__(self, shape=(1, 3, 32, 32), dynamic_batch=False, opset=17):
        dims = ["N"] + list(shape[1:]) if dynamic_batch else list(shape)
        self.inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)]
        self.nodes, self.inits, self.outputs = [], [], []
        self.k = 0
        self.opset = opset

    def w(self, dims, data=None, external=True):
        self.k += 1
        name = f"w{self.k}"
        if data is not None:
            self.inits.append(numpy_helper.from_array(np.asarray(data), name))
            return name
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(dims))
        t.data_location = TensorProto.EXTERNAL
        e = t.external_data.add()
        e.key, e.value = "location", "absent.bin"
        self.inits.append(t)
        return name

    def n(self, op, inputs, nout=1, **attrs):
        self.k += 1
        outs = [f"t{self.k}_{i}" for i in range(nout)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=f"{op}_{self.k}", **attrs))
        return outs[0] if nout == 1 else outs

    def conv(self, x, ic, oc, k=3, s=1, g=1, d=1, bias=True, pad=None):
        p = (k // 2) * d if pad is None else pad
        ins = [x, self.w([oc, ic // g, k, k])] + ([self.w([oc])] if bias else [])
        return self.n("Conv", ins, kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, group=g, dilations=[d, d])

    def bn(self, x, c):
        return self.n("BatchNormalization", [x] + [self.w([c]) for _ in range(4)])

    def out(self, x):
        self.outputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, None))

    def model(self):
        g = helper.make_graph(self.nodes, "g", self.inputs, self.outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = 8
        return m


def efficientnet_like():
    g = G((1, 3, 64, 64))
    x = g.conv("x", 3, 16, 3, 2)
    x = g.bn(x, 16)
    x = g.n("Mul", [x, g.n("Sigmoid", [x])])  # SiLU
    dw = g.conv(x, 16, 16, 3, 1, g=16)
    se = g.n("GlobalAveragePool", [dw])
    se = g.conv(se, 16, 4, 1)
    se = g.n("Mul", [se, g.n("Sigmoid", [se])])
    se = g.n("Sigmoid", [g.conv(se, 4, 16, 1)])
    x = g.n("Mul", [dw, se])  # broadcast (1,16,1,1) over H,W
    x = g.conv(x, 16, 24, 1)
    x = g.n("HardSwish", [x])
    x = g.n("Flatten", [g.n("GlobalAveragePool", [x])])
    g.out(g.n("Gemm", [x, g.w([10, 24]), g.w([10])], transB=1))
    return g.model()


def densenet_like():
    g = G((1, 3, 32, 32))
    x = g.conv("x", 3, 16, 3)
    feats = [x]
    c = 16
    for _ in range(3):
        y = g.n("Relu", [g.bn(g.n("Concat", feats, axis=1) if len(feats) > 1 else feats[0], c)])
        y = g.conv(y, c, 8, 3, bias=False)
        feats.append(y)
        c += 8
    x = g.n("AveragePool", [g.n("Concat", feats, axis=1)], kernel_shape=[2, 2], strides=[2, 2])
    g.out(x)
    return g.model()


def shufflenet_like():
    g = G((1, 3, 32, 32))
    x = g.conv("x", 3, 16, 3, 2)
    a, b = g.n("Split", [x, g.w(None, np.array([8, 8], dtype=np.int64))], nout=2, axis=1)
    b = g.conv(b, 8, 8, 3, g=8)
    x = g.n("Concat", [a, b], axis=1)
    shape = g.n("Shape", [x])
    n = g.n("Gather", [shape, g.w(None, np.array(0, dtype=np.int64))], axis=0)
    hw = g.n("Slice", [shape, g.w(None, np.array([2], dtype=np.int64)), g.w(None, np.array([4], dtype=np.int64))])
    n1 = g.n("Unsqueeze", [n, g.w(None, np.array([0], dtype=np.int64))])
    s5 = g.n("Concat", [n1, g.w(None, np.array([2, 8], dtype=np.int64)), hw], axis=0)
    x = g.n("Reshape", [x, s5])
    x = g.n("Transpose", [x], perm=[0, 2, 1, 3, 4])
    back = g.n("Concat", [n1, g.w(None, np.array([16], dtype=np.int64)), hw], axis=0)
    x = g.n("Reshape", [x, back])
    x = g.conv(x, 16, 16, 1)
    g.out(x)
    return g.model()


def convnext_like():
    g = G((1, 3, 32, 32))
    x = g.conv("x", 3, 16, 4, 4, pad=0)
    y = g.conv(x, 16, 16, 7, g=16)
    y = g.n("Transpose", [y], perm=[0, 2, 3, 1])
    y = g.n("LayerNormalization", [y, g.w([16]), g.w([16])], axis=-1)
    y = g.n("MatMul", [y, g.w([16, 64])])
    y = g.n("Mul", [y, g.n("Add", [g.n("Erf", [g.n("Div", [y, g.w(None, np.array(1.414, dtype=np.float32))])]),
                                   g.w(None, np.array(1.0, dtype=np.float32))])])
    y = g.n("MatMul", [y, g.w([64, 16])])
    y = g.n("Transpose", [y], perm=[0, 3, 1, 2])
    g.out(g.n("Add", [x, y]))
    return g.model()


def vit_like():
    g = G((1, 3, 32, 32))
    x = g.conv("x", 3, 32, 8, 8, pad=0)  # patch embedding: (1, 32, 4, 4)
    x = g.n("Reshape", [x, g.w(None, np.array([1, 32, 16], dtype=np.int64))])
    x = g.n("Transpose", [x], perm=[0, 2, 1])  # (1, 16, 32)
    cls = g.w([1, 1, 32])
    x = g.n("Concat", [cls, x], axis=1)  # (1, 17, 32)
    x = g.n("Add", [x, g.w([1, 17, 32])])
    h = g.n("LayerNormalization", [x, g.w([32]), g.w([32])], axis=-1)
    q = g.n("MatMul", [h, g.w([32, 32])])
    k = g.n("MatMul", [h, g.w([32, 32])])
    a = g.n("Softmax", [g.n("MatMul", [q, g.n("Transpose", [k], perm=[0, 2, 1])])], axis=-1)
    x = g.n("Add", [x, g.n("MatMul", [a, q])])
    c = g.n("Gather", [x, g.w(None, np.array(0, dtype=np.int64))], axis=1)
    g.out(g.n("Gemm", [c, g.w([10, 32]), g.w([10])], transB=1))
    return g.model()


def regnet_like():
    g = G((1, 3, 32, 32))
    x = g.n("Relu", [g.bn(g.conv("x", 3, 32, 3, 2, bias=False), 32)])
    y = g.n("Relu", [g.bn(g.conv(x, 32, 32, 3, 1, g=4, bias=False), 32)])
    s = g.n("ReduceMean", [y], axes=[2, 3], keepdims=1) if g.opset < 18 else None
    s = g.n("Sigmoid", [g.conv(g.n("Relu", [g.conv(s, 32, 8, 1)]), 8, 32, 1)])
    y = g.n("Mul", [y, s])
    g.out(g.n("Relu", [g.n("Add", [x, g.bn(g.conv(y, 32, 32, 1, bias=False), 32)])]))
    return g.model()


def unet_like():
    g = G((1, 3, 32, 32))
    e1 = g.n("Relu", [g.conv("x", 3, 8, 3)])
    p = g.n("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2])
    e2 = g.n("Relu", [g.conv(p, 8, 16, 3, d=2)])
    u = g.n("ConvTranspose", [e2, g.w([16, 8, 2, 2]), g.w([8])], kernel_shape=[2, 2], strides=[2, 2])
    u2 = g.n("Resize", [e2, "", g.w(None, np.array([1, 1, 2, 2], dtype=np.float32))], mode="linear",
             coordinate_transformation_mode="half_pixel")
    x = g.n("Concat", [u, e1, g.conv(u2, 16, 8, 1)], axis=1)
    g.out(g.conv(x, 24, 2, 1))
    return g.model()


def yolo_like():
    g = G((1, 3, 64, 64), dynamic_batch=False)
    x = g.conv("x", 3, 16, 6, 2, pad=2)
    x = g.n("Mul", [x, g.n("Sigmoid", [x])])
    y = g.n("MaxPool", [x], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2])
    z = g.n("MaxPool", [y], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2])
    x = g.n("Concat", [x, y, z], axis=1)
    up = g.n("Resize", [x, "", g.w(None, np.array([1, 1, 2, 2], dtype=np.float32))], mode="nearest",
             coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    d = g.conv(up, 48, 21, 1)
    shape = g.w(None, np.array([1, 3, 7, 64, 64], dtype=np.int64))
    d = g.n("Reshape", [d, shape])
    g.out(g.n("Sigmoid", [g.n("Transpose", [d], perm=[0, 1, 3, 4, 2])]))
    return g.model()


STYLES = {
    "efficientnet": efficientnet_like,
    "densenet": densenet_like,
    "shufflenet": shufflenet_like,
    "convnext": convnext_like,
    "vit": vit_like,
    "regnet": regnet_like,
    "unet": unet_like,
    "yolo": yolo_like,
}

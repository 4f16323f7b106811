"""The bundled networks, built as real ONNX graphs by lgopt's own code.

Nothing is downloaded: each builder writes a *weightless* ONNX model (every
initializer is an external reference to a file that does not exist, as in
``shared/fixtures/onnx``), so the graphs go through exactly the importer users'
models go through.  ``python -m lgopt.io.zoo problems/`` regenerates
``problems/*.json`` and ``problems/onnx/*.onnx``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import onnx
from onnx import TensorProto, helper

OPSET = 13


class GraphBuilder:
    """A tiny layer-API over onnx.helper, in the spirit of torch.nn exports."""

    def __init__(self, name: str, shape: tuple[int, ...]) -> None:
        self.name = name
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(shape))]
        self.outputs: list[onnx.ValueInfoProto] = []
        self.channels: dict[str, int] = {"input": shape[1]}
        self._n = 0

    def _name(self, kind: str) -> str:
        self._n += 1
        return f"/{kind}_{self._n}"

    def weight(self, name: str, dims: list[int]) -> str:
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
        t.data_location = TensorProto.EXTERNAL
        e = t.external_data.add()
        e.key, e.value = "location", "weights.absent.bin"
        self.inits.append(t)
        return name

    def node(self, op: str, inputs: list[str], c: int, **attrs) -> str:
        n = self._name(op)
        out = f"{n}_output_0"
        self.nodes.append(helper.make_node(op, inputs, [out], name=n, **attrs))
        self.channels[out] = c
        return out

    def conv(self, x: str, oc: int, k: int = 3, s: int = 1, p: int | None = None, g: int = 1, d: int = 1,
             act: str | None = "relu", bn: bool = True) -> str:
        ic = self.channels[x]
        p = (k // 2) * d if p is None else p
        n = self._name("conv")
        w = self.weight(f"{n}.weight", [oc, ic // g, k, k])
        ins = [x, w] if bn else [x, w, self.weight(f"{n}.bias", [oc])]
        y = self.node("Conv", ins, oc, kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, group=g, dilations=[d, d])
        if bn:
            bn_w = [self.weight(f"{n}.bn.{r}", [oc]) for r in ("scale", "bias", "mean", "var")]
            y = self.node("BatchNormalization", [y] + bn_w, oc, epsilon=1e-5)
        return self.act(y, act)

    def act(self, x: str, act: str | None) -> str:
        c = self.channels[x]
        if act == "relu":
            return self.node("Relu", [x], c)
        if act == "relu6":
            lo, hi = self._const(0.0), self._const(6.0)
            return self.node("Clip", [x, lo, hi], c)
        if act == "silu":
            s = self.node("Sigmoid", [x], c)
            return self.node("Mul", [x, s], c)
        if act == "leaky":
            return self.node("LeakyRelu", [x], c, alpha=0.1)
        return x

    def _const(self, v: float) -> str:
        name = self._name("const")
        self.inits.append(helper.make_tensor(name, TensorProto.FLOAT, [], [v]))
        return name

    def add(self, a: str, b: str, act: str | None = None) -> str:
        return self.act(self.node("Add", [a, b], self.channels[a]), act)

    def maxpool(self, x: str, k: int, s: int, p: int = 0) -> str:
        return self.node("MaxPool", [x], self.channels[x], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)

    def concat(self, xs: list[str]) -> str:
        return self.node("Concat", xs, sum(self.channels[x] for x in xs), axis=1)

    def resize(self, x: str, scale: int, mode: str = "nearest") -> str:
        scales = self._name("scales")
        self.inits.append(helper.make_tensor(scales, TensorProto.FLOAT, [4], [1.0, 1.0, float(scale), float(scale)]))
        roi = self._name("roi")
        self.inits.append(helper.make_tensor(roi, TensorProto.FLOAT, [0], []))
        extra = {"nearest_mode": "floor", "coordinate_transformation_mode": "asymmetric"} if mode == "nearest" else {
            "coordinate_transformation_mode": "half_pixel"}
        return self.node("Resize", [x, roi, scales], self.channels[x], mode=mode, **extra)

    def deconv(self, x: str, oc: int, k: int = 2, s: int = 2) -> str:
        n = self._name("deconv")
        w = self.weight(f"{n}.weight", [self.channels[x], oc, k, k])
        b = self.weight(f"{n}.bias", [oc])
        return self.node("ConvTranspose", [x, w, b], oc, kernel_shape=[k, k], strides=[s, s])

    def head(self, x: str, classes: int, hidden: tuple[int, ...] = (), features: int | None = None) -> str:
        """Classifier: global pooling (or a plain flatten of ``features`` values) and Gemm layers."""
        y = self.node("GlobalAveragePool", [x], self.channels[x]) if features is None else x
        c = self.channels[x] if features is None else features
        y = self.node("Flatten", [y], c)
        for i, h in enumerate(hidden + (classes,)):
            n = self._name("fc")
            y = self.node("Gemm", [y, self.weight(f"{n}.weight", [h, c]), self.weight(f"{n}.bias", [h])], h, transB=1)
            if i < len(hidden):
                y = self.node("Relu", [y], h)
            c = h
        return y

    def output(self, x: str, name: str | None = None) -> None:
        if name:
            self.nodes.append(helper.make_node("Identity", [x], [name], name=f"/out_{name}"))
            x = name
        self.outputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, None))

    def model(self) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="lgopt.io.zoo")
        m.ir_version = 8
        return m


def resnet(depth: int, batch: int = 1, size: int = 224) -> onnx.ModelProto:
    b = GraphBuilder(f"resnet{depth}", (batch, 3, size, size))
    x = b.conv("input", 64, 7, 2)
    x = b.maxpool(x, 3, 2, 1)
    bottleneck = depth >= 50
    blocks = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}[depth]
    for stage, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512))):
        for i in range(n):
            s = 2 if (i == 0 and stage > 0) else 1
            out_c = width * 4 if bottleneck else width
            if bottleneck:
                y = b.conv(x, width, 1)
                y = b.conv(y, width, 3, s)
                y = b.conv(y, out_c, 1, act=None)
            else:
                y = b.conv(x, width, 3, s)
                y = b.conv(y, width, 3, act=None)
            sc = b.conv(x, out_c, 1, s, p=0, act=None) if (s != 1 or b.channels[x] != out_c) else x
            x = b.add(y, sc, act="relu")
    b.output(b.head(x, 1000), "output")
    return b.model()


def mobilenet_v2(batch: int = 1, size: int = 224) -> onnx.ModelProto:
    b = GraphBuilder("mobilenet_v2", (batch, 3, size, size))
    x = b.conv("input", 32, 3, 2, act="relu6")
    cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    for t, c, n, s in cfg:
        for i in range(n):
            stride = s if i == 0 else 1
            inp = x
            hidden = b.channels[x] * t
            y = b.conv(x, hidden, 1, act="relu6") if t != 1 else x
            y = b.conv(y, hidden, 3, stride, g=hidden, act="relu6")
            y = b.conv(y, c, 1, act=None)
            x = b.add(y, inp) if stride == 1 and b.channels[inp] == c else y
    x = b.conv(x, 1280, 1, act="relu6")
    b.output(b.head(x, 1000), "output")
    return b.model()


def vgg16(batch: int = 1, size: int = 224) -> onnx.ModelProto:
    b = GraphBuilder("vgg16", (batch, 3, size, size))
    x = "input"
    for n, c in ((2, 64), (2, 128), (3, 256), (3, 512), (3, 512)):
        for _ in range(n):
            x = b.conv(x, c, 3, bn=False)
        x = b.maxpool(x, 2, 2)
    b.output(b.head(x, 1000, hidden=(4096, 4096), features=512 * (size // 32) ** 2), "output")
    return b.model()


def unet(batch: int = 1, size: int = 256, base: int = 32, classes: int = 2) -> onnx.ModelProto:
    """Four levels; upsampling by transposed conv (deep) and by resize (shallow) to cover both."""
    b = GraphBuilder("unet", (batch, 3, size, size))

    def double(x: str, c: int) -> str:
        return b.conv(b.conv(x, c), c)

    skips = []
    x = "input"
    for lvl in range(4):
        x = double(x, base << lvl)
        skips.append(x)
        x = b.maxpool(x, 2, 2)
    x = double(x, base << 4)
    for lvl in reversed(range(4)):
        c = base << lvl
        if lvl >= 2:
            x = b.deconv(x, c)
        else:
            x = b.conv(b.resize(x, 2, "nearest" if lvl == 1 else "linear"), c, 1)
        x = double(b.concat([x, skips[lvl]]), c)
    y = b.conv(x, classes, 1, act=None, bn=False)
    b.output(y, "mask")
    return b.model()


def yolov5s(batch: int = 1, size: int = 640, width: float = 0.5, depth: float = 0.33) -> onnx.ModelProto:
    """YOLOv5s layout: Focus-free 6x6 stem, C3 (CSP) blocks, SPPF, PANet head, three detect convs."""
    b = GraphBuilder("yolov5s", (batch, 3, size, size))

    def ch(c: int) -> int:
        return max(8, int(round(c * width / 8)) * 8)

    def cv(x: str, c: int, k: int = 1, s: int = 1, p: int | None = None) -> str:
        return b.conv(x, c, k, s, p, act="silu", bn=False)

    def c3(x: str, c: int, n: int, shortcut: bool = True) -> str:
        h = c // 2
        a = cv(x, h)
        for _ in range(max(1, round(n * depth))):
            y = cv(cv(a, h), h, 3)
            a = b.add(a, y) if shortcut else y
        return cv(b.concat([a, cv(x, h)]), c)

    def sppf(x: str, c: int) -> str:
        h = b.channels[x] // 2
        y = cv(x, h)
        p1 = b.maxpool(y, 5, 1, 2)
        p2 = b.maxpool(p1, 5, 1, 2)
        p3 = b.maxpool(p2, 5, 1, 2)
        return cv(b.concat([y, p1, p2, p3]), c)

    x = cv("input", ch(64), 6, 2, 2)
    x = cv(x, ch(128), 3, 2)
    x = c3(x, ch(128), 3)
    x = cv(x, ch(256), 3, 2)
    p3 = c3(x, ch(256), 6)
    x = cv(p3, ch(512), 3, 2)
    p4 = c3(x, ch(512), 9)
    x = cv(p4, ch(1024), 3, 2)
    x = c3(x, ch(1024), 3)
    x = sppf(x, ch(1024))
    h10 = cv(x, ch(512))
    x = c3(b.concat([b.resize(h10, 2), p4]), ch(512), 3, False)
    h14 = cv(x, ch(256))
    o3 = c3(b.concat([b.resize(h14, 2), p3]), ch(256), 3, False)
    x = cv(o3, ch(256), 3, 2)
    o4 = c3(b.concat([x, h14]), ch(512), 3, False)
    x = cv(o4, ch(512), 3, 2)
    o5 = c3(b.concat([x, h10]), ch(1024), 3, False)
    for name, o in (("p3", o3), ("p4", o4), ("p5", o5)):
        b.output(b.conv(o, 255, 1, act=None, bn=False), name)
    return b.model()


# --- transformers (issue 16): [batch, tokens, features] activations, as torch.onnx exports them -------------

class TransformerBuilder(GraphBuilder):
    """Layers of transformer blocks on ``[batch, tokens, features]`` tensors (``channels`` holds features)."""

    def linear(self, x: str, out: int, bias: bool = True) -> str:
        """``x @ W + b`` with a ``[in, out]`` weight: torch's Linear on a 3-D input (MatMul, then Add)."""
        n = self._name("linear")
        y = self.node("MatMul", [x, self.weight(f"{n}.weight", [self.channels[x], out])], out)
        return self.node("Add", [y, self.weight(f"{n}.bias", [out])], out) if bias else y

    def scalar(self, op: str, x: str, v: float) -> str:
        return self.node(op, [x, self._const(v)], self.channels[x])

    def reduce_mean(self, x: str) -> str:
        return self.node("ReduceMean", [x], 1, axes=[-1], keepdims=1)

    def layer_norm(self, x: str, eps: float = 1e-6) -> str:
        """The decomposed LayerNorm torch exports below opset 17: ReduceMean, Sub, Pow, ReduceMean, Add eps,
        Sqrt, Div, then the affine Mul and Add."""
        d = self.channels[x]
        n = self._name("ln")
        centred = self.node("Sub", [x, self.reduce_mean(x)], d)
        var = self.reduce_mean(self.scalar("Pow", centred, 2.0))
        y = self.node("Div", [centred, self.node("Sqrt", [self.scalar("Add", var, eps)], 1)], d)
        y = self.node("Mul", [y, self.weight(f"{n}.weight", [d])], d)
        return self.node("Add", [y, self.weight(f"{n}.bias", [d])], d)

    def rms_norm(self, x: str, eps: float = 1e-6) -> str:
        """LLaMA's RMSNorm: x / sqrt(mean(x^2) + eps) * weight."""
        d = self.channels[x]
        ms = self.reduce_mean(self.scalar("Pow", x, 2.0))
        y = self.node("Div", [x, self.node("Sqrt", [self.scalar("Add", ms, eps)], 1)], d)
        return self.node("Mul", [y, self.weight(f"{self._name('rms')}.weight", [d])], d)

    def gelu(self, x: str) -> str:
        """The erf GELU torch exports: x * 0.5 * (1 + erf(x / sqrt 2))."""
        e = self.node("Erf", [self.scalar("Div", x, 2 ** 0.5)], self.channels[x])
        return self.scalar("Mul", self.node("Mul", [x, self.scalar("Add", e, 1.0)], self.channels[x]), 0.5)

    def shape_const(self, dims: list[int]) -> str:
        name = self._name("shape")
        self.inits.append(helper.make_tensor(name, TensorProto.INT64, [len(dims)], dims))
        return name

    def heads(self, x: str, batch: int, tokens: int, heads: int, perm: list[int]) -> str:
        """[B, T, D] -> [B, T, heads, D/heads] (a view) -> permuted (a real transpose)."""
        dh = self.channels[x] // heads
        y = self.node("Reshape", [x, self.shape_const([batch, tokens, heads, dh])], dh)
        return self.node("Transpose", [y], dh if perm[-1] == 3 else tokens, perm=perm)

    def merge_heads(self, x: str, batch: int, tokens: int, dim: int) -> str:
        y = self.node("Transpose", [x], self.channels[x], perm=[0, 2, 1, 3])
        return self.node("Reshape", [y, self.shape_const([batch, tokens, dim])], dim)

    def attention(self, x: str, batch: int, tokens: int, heads: int, rotary: bool = False,
                  causal: bool = False) -> str:
        """Multi-head self-attention: Q, K, V projections, scores, softmax, weighted sum, output projection;
        ``rotary``: RoPE on Q and K (x * cos + rotate_half(x) * sin); ``causal``: an additive mask."""
        d = self.channels[x]
        dh = d // heads
        bias = not rotary  # LLaMA's projections have no bias
        q = self.heads(self.linear(x, d, bias), batch, tokens, heads, [0, 2, 1, 3])
        k = self.heads(self.linear(x, d, bias), batch, tokens, heads, [0, 2, 1, 3])
        v = self.heads(self.linear(x, d, bias), batch, tokens, heads, [0, 2, 1, 3])
        if rotary:
            n = self._name("rope")
            cos, sin = self.weight(f"{n}.cos", [tokens, dh]), self.weight(f"{n}.sin", [tokens, dh])
            q, k = (self.rope(t, cos, sin) for t in (q, k))
        kt = self.node("Transpose", [k], tokens, perm=[0, 1, 3, 2])
        s = self.scalar("Mul", self.node("MatMul", [q, kt], tokens), dh ** -0.5)
        if causal:
            s = self.node("Add", [s, self.weight(f"{self._name('mask')}.causal", [1, 1, tokens, tokens])], tokens)
        p = self.node("Softmax", [s], tokens, axis=-1)
        y = self.merge_heads(self.node("MatMul", [p, v], dh), batch, tokens, d)
        return self.linear(y, d, bias)

    def rope(self, x: str, cos: str, sin: str) -> str:
        """x * cos + rotate_half(x) * sin, rotate_half = concat(-x2, x1) over the last axis halves."""
        dh = self.channels[x]
        half = self.shape_const([dh // 2])
        x1 = self.node("Slice", [x, self.shape_const([0]), half, self.shape_const([3])], dh // 2)
        x2 = self.node("Slice", [x, half, self.shape_const([dh]), self.shape_const([3])], dh // 2)
        rot = self.node("Concat", [self.node("Neg", [x2], dh // 2), x1], dh, axis=-1)
        return self.node("Add", [self.node("Mul", [x, cos], dh), self.node("Mul", [rot, sin], dh)], dh)

    def swiglu(self, x: str, hidden: int) -> str:
        """LLaMA's MLP: down(silu(gate(x)) * up(x))."""
        g = self.linear(x, hidden, bias=False)
        g = self.node("Mul", [g, self.node("Sigmoid", [g], hidden)], hidden)
        return self.linear(self.node("Mul", [g, self.linear(x, hidden, bias=False)], hidden), self.channels[x], False)


def vit_block(batch: int = 1, tokens: int = 197, dim: int = 768, heads: int = 12, mlp: int = 3072) -> onnx.ModelProto:
    """One ViT-B/16 encoder block (pre-norm): x + attn(LN(x)), then y + MLP(LN(y)) with an erf GELU."""
    b = TransformerBuilder("vit_block", (batch, tokens, dim))
    b.channels["input"] = dim
    y = b.add("input", b.attention(b.layer_norm("input"), batch, tokens, heads))
    y = b.add(y, b.linear(b.gelu(b.linear(b.layer_norm(y), mlp)), dim))
    b.output(y)
    return b.model()


def llm_block(batch: int = 1, tokens: int = 128, dim: int = 512, heads: int = 8, hidden: int = 1408
              ) -> onnx.ModelProto:
    """One decoder-only LLM block (LLaMA-style): RMSNorm, causal attention with rotary embeddings, RMSNorm,
    SwiGLU MLP, both residual."""
    b = TransformerBuilder("llm_block", (batch, tokens, dim))
    b.channels["input"] = dim
    y = b.add("input", b.attention(b.rms_norm("input"), batch, tokens, heads, rotary=True, causal=True))
    y = b.add(y, b.swiglu(b.rms_norm(y), hidden))
    b.output(y)
    return b.model()


def llm_mlp(batch: int = 1, tokens: int = 256, dim: int = 2048, hidden: int = 5504) -> onnx.ModelProto:
    """The MLP half of :func:`llm_block` on its own (RMSNorm, SwiGLU, residual): what issue 16's column-slicing
    target measures, at a real LLM's size by default (weights of 22.5 MB each, far above any LMEM)."""
    b = TransformerBuilder("llm_mlp", (batch, tokens, dim))
    b.channels["input"] = dim
    b.output(b.add("input", b.swiglu(b.rms_norm("input"), hidden)))
    return b.model()


BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet18": lambda: resnet(18),
    "resnet50": lambda: resnet(50),
    "mobilenet_v2": mobilenet_v2,
    "vgg16": vgg16,
    "unet": unet,
    "yolov5s": yolov5s,
    "vit_block": vit_block,
    "llm_block": llm_block,
    "llm_mlp": llm_mlp,
}
FIXTURES = {"fixture_resnet18": "resnet18.weightless.onnx", "fixture_yolov5s_like": "yolov5s_like.weightless.onnx"}


def build_all(out_dir: str | Path, fixtures_dir: str | Path | None = None) -> list[Path]:
    """Write every bundled ONNX model and its imported problem file; returns the problem paths."""
    from lgopt.io.onnx_import import import_onnx
    from lgopt.io.problem import save_problem

    out = Path(out_dir)
    (out / "onnx").mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in BUILDERS.items():
        path = out / "onnx" / f"{name}.onnx"
        onnx.save(build(), str(path))
        save_problem(import_onnx(path, dtype="f16", name=name), out / f"{name}.json")
        written.append(out / f"{name}.json")
    if fixtures_dir is not None:
        for name, fname in FIXTURES.items():
            src = Path(fixtures_dir) / fname
            if src.exists():
                save_problem(import_onnx(src, dtype="f16", name=name), out / f"{name}.json")
                written.append(out / f"{name}.json")
    return written


if __name__ == "__main__":  # pragma: no cover - regeneration entry point
    here = Path(sys.argv[1] if len(sys.argv) > 1 else "problems")
    fx = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "onnx"
    for p in build_all(here, fx):
        print(p)

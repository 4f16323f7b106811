"""ONNX -> :class:`~lgopt.model.network.Network`, needing shapes only, never weight bytes.

The importer does what a TPU compiler's front end does before layer grouping:

* runs ONNX shape inference (with data propagation),
* folds what is constant before the model runs, in one pass over the nodes (:class:`_Folder`): Constant
  nodes, shape arithmetic on static shapes (``Shape -> Gather -> Concat -> Reshape`` ..., however deep,
  each node's output shapes inferred as it goes) with ONNX's own reference evaluator, and constants computed
  from absent weights as constants of known shape (a weightless file imports as its full file does);
  aliases of an initializer (Identity, Dropout, a same-shape Expand) become the initializer, and nodes that
  change nothing (a Pad by zeros, a Cast to the same type, a Reshape to the same shape ...) go,
* folds BatchNormalization into a preceding Conv, fuses Relu / Clip / LeakyRelu
  into their producer, Sigmoid*x into SiLU, HardSigmoid(x)*x into HardSwish and torch's erf GELU chain into one Gelu
  (``fuse=False`` keeps them apart),
* drops Identity/Dropout, and turns every op lgopt cannot group into a global
  layer instead of failing.

Errors in the file itself (unreadable, truncated, unknown shapes) and ops lgopt cannot take (a computed
operand where it needs a constant, an output shape that depends on the data) are
:class:`~lgopt.errors.LgoptError` with one line naming the cause and the node.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from lgopt.errors import LgoptError
from lgopt.model import ops as opsem
from lgopt.model.dtype import COMPUTE_DTYPES
from lgopt.model.network import Network, Op, Tensor, Weight, check_network, to_nchw

ONNX_DTYPES = {
    onnx.TensorProto.FLOAT: "f32",
    onnx.TensorProto.FLOAT16: "f16",
    onnx.TensorProto.BFLOAT16: "bf16",
    onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.INT16: "int16",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.DOUBLE: "f64",
    onnx.TensorProto.BOOL: "bool",
}
FLOAT_DTYPES = {"f32", "f16", "bf16", "f64"}
ALIAS_TYPES = {"Identity", "Dropout"}
NO_FOLD_TYPES = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}
MAX_FOLD_ELEMS = 1 << 16  # fold shape arithmetic, not weight math


# --- loading ----------------------------------------------------------------------------------

def load_onnx(path: str | Path) -> onnx.ModelProto:
    p = Path(path)
    if not p.is_file():
        raise LgoptError(f"model file {path} does not exist")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as e:  # protobuf raises DecodeError, RuntimeWarning-wrapped errors, ...
        raise LgoptError(f"{path} is not a readable ONNX model ({type(e).__name__}: {str(e)[:120]})") from None
    if not model.graph.node:
        raise LgoptError(f"{path} is not a readable ONNX model (the graph has no nodes; truncated file?)")
    return model


def _has_data(init: onnx.TensorProto) -> bool:
    if init.data_location == onnx.TensorProto.EXTERNAL:
        return False
    return bool(init.raw_data) or any(len(getattr(init, f)) for f in (
        "float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"))


def _dims(vi: onnx.ValueInfoProto) -> tuple[Any, ...] | None:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim)


SHAPE_KEEPING = ("GroupNormalization",)  # function ops ONNX's inference leaves unknown: their output is input 0's


def _infer(model: onnx.ModelProto, path: str) -> onnx.ModelProto:
    """ONNX's shape inference; where it stops at an op that keeps its input's shape but whose schema it does not
    expand (GroupNormalization, a function op), that shape is given and inference runs on past it."""
    for _ in range(1 + sum(n.op_type in SHAPE_KEEPING for n in model.graph.node)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        except Exception as e:
            raise LgoptError(f"{path}: ONNX shape inference failed ({str(e).splitlines()[0][:160]})") from None
        g = model.graph
        known = {vi.name: vi.type for vi in list(g.input) + list(g.value_info) + list(g.output)}
        given = [onnx.ValueInfoProto(name=n.output[0], type=known[n.input[0]]) for n in g.node
                 if n.op_type in SHAPE_KEEPING and n.input and _static(known.get(n.input[0])) is not None
                 and n.output and _static(known.get(n.output[0])) is None]
        if not given:
            break
        g.value_info.extend(given)
    return model


def _set_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> None:
    names = {i.name for i in model.graph.input}
    for name, _shape in shapes.items():
        if name not in names:
            raise LgoptError(f"--input-shape names {name!r}, which is not a model input ({', '.join(sorted(names))})")
    # shapes recorded for intermediate tensors were inferred from the old input shapes: drop them
    del model.graph.value_info[:]
    for vi in model.graph.output:
        vi.type.tensor_type.ClearField("shape")
    for vi in model.graph.input:
        if vi.name in shapes:
            shape = shapes[vi.name]
            dims = vi.type.tensor_type.shape.dim
            if len(dims) and len(dims) != len(shape):
                raise LgoptError(f"--input-shape {vi.name}: rank {len(shape)} does not match the model's {len(dims)}")
            del dims[:]
            for d in shape:
                dims.add().dim_value = int(d)


def _gated(gate: Op, x: str) -> str:
    """The one op ``x * gate`` is ("" when none): SiLU when ``gate`` is the Sigmoid of ``x``; HardSwish when it
    is the unfused HardSigmoid of ``x`` with slope 1/6 and offset 1/2 (torch's ``hardswish``, ``x * relu6(x + 3)
    / 6``), as TPU-MLIR's front end makes it (one ``tpu.Lut`` in INT8, ``..._Mul_output_0_HardSwish`` in every
    cache)."""
    if gate.inputs != (x,):
        return ""
    if gate.type == "Sigmoid":
        return "SiLU"
    if gate.type == "HardSigmoid" and not gate.fused and abs(gate.attrs.get("alpha", 0.2) - 1 / 6) < 1e-4 \
            and abs(gate.attrs.get("beta", 0.5) - 0.5) < 1e-6:
        return "HardSwish"
    return ""


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            v = onnx.helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return default


def _static(tp: onnx.TypeProto | None) -> tuple[int, ...] | None:
    """A tensor type's shape when every dimension is a number, else None."""
    if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tp.tensor_type.shape.dim)
    return None if any(d < 0 for d in dims) else dims


def _shape_only(name: str, dims: tuple[int, ...], elem_type: int) -> onnx.TensorProto:
    """A constant whose shape and type are known but not its values (computed from absent weights): an
    initializer without data, as weightless files hold their weights."""
    t = onnx.TensorProto(name=name, data_type=elem_type, dims=list(dims))
    t.data_location = onnx.TensorProto.EXTERNAL
    e = t.external_data.add()
    e.key, e.value = "location", "folded-from-absent-weights"
    return t


def _rename_inputs(node: onnx.NodeProto, rename: Mapping[str, str]) -> None:
    """Point the node's inputs, and what its subgraphs read of the enclosing graph, at the renamed tensors."""
    for k, i in enumerate(node.input):
        if i in rename:
            node.input[k] = rename[i]
    for a in node.attribute:
        for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            for n in sub.node:
                _rename_inputs(n, rename)
            for o in sub.output:  # a branch that hands on a tensor of the enclosing graph
                if o.name in rename:
                    o.name = rename[o.name]


class _Folder:
    """One pass over the nodes in order that turns what a compiler's front end knows before it runs into
    constants: Constant nodes, ``Shape`` and ``Size`` of tensors whose shape is static, and every node whose
    inputs are all constants (evaluated with ONNX's reference evaluator when their values are present and
    small, else kept as a constant of known shape and no data, as a weightless file's weights are).  Aliases
    of a constant (Identity, Dropout, an Expand that leaves it as it is) become the constant itself.  The
    output shapes of each node it keeps are inferred as it goes (ONNX's node-level inference, given the
    constants' values), so a Shape of a tensor whose shape only arithmetic before it fixes folds in the same
    pass: a Swin transformer's window arithmetic (hundreds of Shape -> Gather -> Concat -> Reshape chains,
    one behind the other) folds in one pass, not one link per round of whole-model inference."""

    def __init__(self, model: onnx.ModelProto, path: str) -> None:
        self.model, self.path = model, path
        g = model.graph
        self.opsets = {o.domain or "": o.version for o in model.opset_import}
        self.values: dict[str, np.ndarray] = {}
        self.absent: dict[str, onnx.TensorProto] = {}
        self.types: dict[str, onnx.TypeProto] = {}
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            self.types[vi.name] = vi.type
        for init in g.initializer:
            self.types[init.name] = onnx.helper.make_tensor_type_proto(init.data_type, list(init.dims))
            if _has_data(init):
                self.values[init.name] = numpy_helper.to_array(init)
            else:
                self.absent[init.name] = init
        self.graph_outputs = {o.name for o in g.output}
        self.rename: dict[str, str] = {}
        self.data: dict[str, onnx.TensorProto] = {}  # small values as tensors, for node-level inference

    def const(self, name: str) -> bool:
        return name in self.values or name in self.absent

    def run(self) -> tuple[onnx.ModelProto, bool]:
        g = self.model.graph
        kept: list[onnx.NodeProto] = []
        for node in g.node:
            _rename_inputs(node, self.rename)
            if self._alias(node) or self._fold(node):
                continue
            self._infer_node(node)
            if self._noop(node):
                continue
            kept.append(node)
        if len(kept) == len(g.node):
            return self.model, False
        used = {i for n in kept for i in list(n.input) + outer_names(n)} | self.graph_outputs
        orig = {init.name: init for init in g.initializer}
        inits: list[onnx.TensorProto] = []
        for name in dict.fromkeys(list(orig) + list(self.values) + list(self.absent)):
            if name not in used:
                continue
            if name in orig:
                inits.append(orig[name])
            elif name in self.values:
                inits.append(numpy_helper.from_array(np.asarray(self.values[name]), name))
            else:
                inits.append(self.absent[name])
        inputs = [i for i in g.input if not self.const(i.name) or i.name in used]
        graph = onnx.helper.make_graph(kept, g.name, inputs, list(g.output), inits, value_info=[])
        new = onnx.helper.make_model(graph, opset_imports=self.model.opset_import, ir_version=self.model.ir_version)
        return new, True

    def _alias(self, node: onnx.NodeProto) -> bool:
        """An Identity, a Dropout or a same-shape Expand of a constant: its output renamed to the constant."""
        outs = [o for o in node.output if o]
        if node.domain or not node.input or not self.const(node.input[0]) or len(outs) != 1 \
                or outs[0] != node.output[0] or outs[0] in self.graph_outputs:
            return False
        src = node.input[0]
        if node.op_type == "Expand":
            shape = self.values.get(node.input[1]) if len(node.input) > 1 else None
            dims = _static(self.types.get(src))
            if shape is None or dims is None:
                return False
            try:
                if tuple(np.broadcast_shapes(dims, tuple(int(v) for v in shape.reshape(-1)))) != dims:
                    return False
            except ValueError:
                return False
        elif node.op_type not in ALIAS_TYPES:
            return False
        self.rename[outs[0]] = src
        return True

    def _noop(self, node: onnx.NodeProto) -> bool:
        """A node that hands its input on unchanged (same static shape and element type), as TPU-MLIR's front
        end removes it: a Pad by zeros, a Cast to the same type, a Slice of everything, a Reshape, Squeeze,
        Unsqueeze, Flatten, Expand or Tile to the same shape, an identity Transpose, a Concat or Split of one.
        Its output is renamed to its input (a swin's window padding at a size the window divides)."""
        outs = [o for o in node.output if o]
        ins = [i for i in node.input if i]
        if node.domain or not ins or len(outs) != 1 or len(node.output) != 1 or outs[0] in self.graph_outputs:
            return False
        x, y = ins[0], outs[0]
        tx, ty = self.types.get(x), self.types.get(y)
        dims = _static(tx)
        if tx is None or ty is None or dims is None or dims != _static(ty) \
                or tx.tensor_type.elem_type != ty.tensor_type.elem_type:
            return False
        t = node.op_type

        def operand(k: int) -> np.ndarray | None:
            name = node.input[k] if len(node.input) > k else ""
            return self.values.get(name) if name else None

        if t == "Pad":
            pads = operand(1) if len(node.input) > 1 and node.input[1] else _attr(node, "pads")
            ok = pads is not None and not np.any(np.asarray(pads))
        elif t == "Slice":
            steps = operand(4)
            ok = (len(node.input) <= 4 or not node.input[4] or steps is not None) \
                and (steps is None or bool(np.all(steps > 0)))
        elif t == "Transpose":
            perm = _attr(node, "perm")
            ok = perm is not None and list(perm) == list(range(len(dims)))
        elif t == "Concat":
            ok = len(ins) == 1
        else:
            ok = t in ("Cast", "CastLike", "Split", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Tile")
        if ok:
            self.rename[y] = x
        return ok

    def _fold(self, node: onnx.NodeProto) -> bool:
        ins = [i for i in node.input if i]
        outs = list(node.output)
        if node.domain or node.op_type in NO_FOLD_TYPES or any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return False
        got: list[np.ndarray] | None = None
        if node.op_type == "Constant":
            try:
                got = self._evaluate(node, {})
            except Exception as e:
                raise LgoptError(f"{self.path}: cannot read Constant node {node.name or outs[0]!r} "
                                 f"({' '.join(str(e).split())[:160]})") from None
        elif node.op_type in ("Shape", "Size") and ins and (dims := _static(self.types.get(ins[0]))) is not None:
            if node.op_type == "Size":
                got = [np.array(int(np.prod(dims)), dtype=np.int64)]
            else:
                got = [np.array(dims, dtype=np.int64)[_attr(node, "start", 0):_attr(node, "end", None)]]
        elif not ins or not all(self.const(i) for i in ins):
            return False
        elif all(i in self.values and self.values[i].size <= MAX_FOLD_ELEMS for i in ins):
            try:
                got = self._evaluate(node, {i: self.values[i] for i in ins})
            except Exception:
                got = None  # the reference evaluator lacks it: a constant of known shape, if inference knows it
        if got is not None and len(got) == len(outs):
            for name, v in zip(outs, got):
                if name:
                    self.values[name] = v
                    if v.dtype.kind in "biuf":  # numbers (a string constant's type is left to inference)
                        self.types[name] = onnx.helper.make_tensor_type_proto(
                            onnx.helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
            return True
        if node.op_type in ("Constant", "Shape", "Size"):
            return False
        # constants without data (or too large to evaluate): shapes only, as a front end with the weights folds them
        inferred = self._infer_node(node)
        shapes = [_static(inferred.get(o)) for o in outs if o]
        if not outs or any(s is None for s in shapes):
            return False
        for o in outs:
            if o:
                tp = inferred[o]
                dims = _static(tp)
                assert dims is not None
                self.absent[o] = _shape_only(o, dims, tp.tensor_type.elem_type)
                self.types[o] = tp
        return True

    def _evaluate(self, node: onnx.NodeProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        from onnx.reference import ReferenceEvaluator

        res = ReferenceEvaluator(node, opsets=self.opsets).run(None, feeds)
        return [np.asarray(r) for r in res]

    def _infer_node(self, node: onnx.NodeProto) -> dict[str, onnx.TypeProto]:
        """The node's output types by ONNX's node-level inference (given the values of its small constant
        inputs), recorded where they say more than what whole-model inference said; {} when it cannot."""
        outs = [o for o in node.output if o]
        if all(_static(self.types.get(o)) is not None for o in outs):
            return {o: self.types[o] for o in outs}
        ins = [i for i in node.input if i]
        if any(i not in self.types for i in ins):
            return {}
        try:
            schema = onnx.defs.get_schema(node.op_type, self.opsets.get(node.domain or "", 1), node.domain or "")
            data: dict[str, onnx.TensorProto] = {}
            for i in ins:
                if i in self.values and self.values[i].size <= MAX_FOLD_ELEMS:
                    if i not in self.data:
                        self.data[i] = numpy_helper.from_array(np.asarray(self.values[i]), i)
                    data[i] = self.data[i]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = shape_inference.infer_node_outputs(
                    schema, node, {i: self.types[i] for i in ins}, data,
                    opset_imports=list(self.model.opset_import), ir_version=self.model.ir_version)
        except Exception:  # no schema (a custom domain), a subgraph, an inconsistent node: whole-model inference
            return {}
        for o, tp in got.items():
            if _static(tp) is not None or o not in self.types or not self.types[o].tensor_type.HasField("shape"):
                self.types[o] = tp
        return got


def _fold_constants(model: onnx.ModelProto, path: str) -> tuple[onnx.ModelProto, bool]:
    """Fold what is constant before the model runs (:class:`_Folder`); the rewritten model and whether any
    node went."""
    return _Folder(model, path).run()


# --- conversion ---------------------------------------------------------------------------------

def _pair(v: Any, default: int) -> tuple[int, int]:
    if v is None:
        return (default, default)
    v = list(v)
    if len(v) == 1:
        return (int(v[0]), int(v[0]))
    return (int(v[0]), int(v[1]))


def _spatial_attrs(node: onnx.NodeProto, in_hw: tuple[int, ...], wshape: tuple[int, ...] | None) -> dict[str, Any]:
    kernel = _attr(node, "kernel_shape")
    if kernel is None and wshape is not None:
        kernel = wshape[2:]
    kernel = _pair(kernel, 1)
    strides = _pair(_attr(node, "strides"), 1)
    dil = _pair(_attr(node, "dilations"), 1)
    pads = _attr(node, "pads")
    auto_pad = _attr(node, "auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") and node.op_type != "ConvTranspose":
        p: list[int] = []
        for i in range(2):
            k_ext = (kernel[i] - 1) * dil[i] + 1
            out = -(-in_hw[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + k_ext - in_hw[i])
            p.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
            p.append(total - p[-1])
        pads = (p[0], p[2], p[1], p[3])
    elif pads is None or auto_pad == "VALID":
        pads = (0, 0, 0, 0)
    pads = tuple(int(x) for x in pads)
    if len(pads) == 2:  # 1-D given for a 2-D op
        pads = (pads[0], 0, pads[1], 0)
    return {"kernel": kernel, "strides": strides, "dilations": dil, "pads": pads}


@dataclass
class _Form:
    """A node as lgopt sees it, before classification."""

    op_type: str
    attrs: dict[str, Any]
    weights: list[Weight]
    acts: list[str]
    consts: list[str]
    outs: list[str]


@dataclass
class _Global:
    """A node that runs as a global layer, with its operands and why."""

    acts: list[str]
    consts: list[str]
    outs: list[str]
    reason: str


class _Builder:
    """Turns inferred, folded ONNX nodes into lgopt ops, fusing as it goes."""

    def __init__(self, model: onnx.ModelProto, path: str, fuse: bool, dtype: str | None) -> None:
        self.g = model.graph
        self.opsets = {o.domain or "": o.version for o in model.opset_import}
        self.path = path
        self.fuse = fuse
        self.dtype = dtype
        self.inits = {i.name: i for i in self.g.initializer}
        self.info: dict[str, tuple[tuple[Any, ...] | None, str]] = {}
        for vi in list(self.g.input) + list(self.g.value_info) + list(self.g.output):
            et = vi.type.tensor_type.elem_type
            self.info[vi.name] = (_dims(vi), ONNX_DTYPES.get(et, f"onnx-type-{et}"))
        self.alias: dict[str, str] = {}
        self.zero_biases: set[str] = set()  # constants of zeros fused as a MatMul bias once (see _affine_into)
        self.ops: list[Op] = []
        self.producer: dict[str, int] = {}  # tensor -> index in self.ops
        self.uses: dict[str, int] = {}
        for n in self.g.node:
            for i in list(n.input) + outer_names(n):
                if i:
                    self.uses[i] = self.uses.get(i, 0) + 1
        for o in self.g.output:
            self.uses[o.name] = self.uses.get(o.name, 0) + 1
        self.graph_outputs = {o.name for o in self.g.output}
        self.made_by = {o: n for n in self.g.node for o in n.output}  # tensor -> its node (for error messages)
        self.row_gemms = self._row_gemms()
        self.lifted = self._row_matrices()
        self.row_gemms |= {n.name or n.output[0] for n in self.g.node
                           if n.op_type == "Gemm" and n.output and n.output[0] in self.lifted}

    def res(self, name: str) -> str:
        while name in self.alias:
            name = self.alias[name]
        return name

    def _dt(self, dt: str) -> str:
        return self.dtype if (self.dtype and dt in FLOAT_DTYPES) else dt

    def shape(self, name: str) -> tuple[int, ...]:
        dims, _ = self.info.get(name, (None, ""))
        if name in self.inits:
            return tuple(self.inits[name].dims)
        if dims is None or any(not isinstance(d, int) or d <= 0 for d in dims):
            shown = "unknown" if dims is None else "[" + ",".join(str(d) for d in dims) + "]"
            node = self.made_by.get(name)
            if node is not None and (node.domain not in ("", "ai.onnx") or node.op_type in SUBGRAPH_TYPES):
                kind = f"custom-domain op {node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") \
                    else f"control-flow op {node.op_type}"
                raise LgoptError(f"{self.path}: tensor {name!r} has shape {shown}: it is produced by "
                                 f"{kind} ({node.name or name}), whose output shapes ONNX shape inference "
                                 "cannot know; lgopt needs static shapes (export the model without it)")
            if node is not None and self._static_inputs():
                raise LgoptError(f"{self.path}: tensor {name!r} has shape {shown} after shape inference: "
                                 f"{_unknown_shape_cause(node, self.opsets)}; lgopt needs static shapes")
            raise LgoptError(f"{self.path}: tensor {name!r} has shape {shown} after shape inference "
                             "(give static input shapes with --input-shape NAME=N,C,H,W)")
        return dims

    def _static_inputs(self) -> bool:
        """Whether every input of the model has a static shape (then an unknown shape is its producer's doing)."""
        for i in self.g.input:
            dims = self.info.get(i.name, (None, ""))[0]
            if i.name not in self.inits and (dims is None or not all(isinstance(d, int) and d > 0 for d in dims)):
                return False
        return True

    def _row_matrices(self) -> frozenset[str]:
        """Rank-2 activations ``[M, K]`` (M > 1) that only row ops touch, re-declared as rank-3 ``[1, M, K]``:
        a transformer exported with its batch folded into the tokens, whose elementwise ops, Softmax and
        LayerNormalization over the last axis, MatMuls and plain Gemms (constant ``B``) see a matrix of rows.
        As ``[M, K]`` the tensor would fold like a classifier's ``[N, C]`` vectors (one batch per row, global);
        re-declared, its rows lie across the lanes as TPU-MLIR's matmul groups hold them (the seeds' matrix
        layout with a row per lane), and every rank-3 rule applies.  The bytes in GMEM are the same.  A tensor
        a reshape, a Flatten or any other op touches stays ``[M, K]`` (a CNN's classifier head keeps its
        vectors), and so does every tensor an op shares with such a one (fixpoint)."""
        def matrix(t: str) -> bool:
            dims = self.info.get(t, (None, ""))[0]
            return t not in self.inits and dims is not None and len(dims) == 2 \
                and all(isinstance(d, int) and d > 0 for d in dims) and dims[0] > 1
        touchers: dict[str, list[onnx.NodeProto]] = {}
        for n in self.g.node:
            for t in list(n.input) + list(n.output):
                if t and matrix(t):
                    touchers.setdefault(t, []).append(n)
        cand = set(touchers)
        changed = True
        while changed:
            changed = False
            for t in sorted(cand):
                if not all(self._row_node(n, cand) for n in touchers[t]):
                    cand.discard(t)
                    changed = True
        for t in cand:
            dims, dt = self.info[t]
            self.info[t] = ((1,) + tuple(dims or ()), dt)
        return frozenset(cand)

    def _row_node(self, n: onnx.NodeProto, cand: set[str]) -> bool:
        """Whether node ``n`` computes row by row over matrices in ``cand`` (every activation it reads or writes
        is one): an elementwise op, a Softmax or LayerNormalization over the last axis, a MatMul, a plain Gemm."""
        acts = [i for i in n.input if i and i not in self.inits] + [o for o in n.output if o]
        if not all(t in cand for t in acts):
            return False
        if n.op_type == "Gemm":
            return len(n.input) >= 2 and n.input[1] in self.inits and not int(_attr(n, "transA", 0)) \
                and float(_attr(n, "alpha", 1.0)) == 1.0 and float(_attr(n, "beta", 1.0)) == 1.0 \
                and (len(n.input) < 3 or not n.input[2] or n.input[2] in self.inits)
        spec = opsem.OP_SPECS.get(n.op_type)
        if spec is None or spec.family not in (opsem.Family.UNARY, opsem.Family.BINARY, opsem.Family.ROWWISE,
                                               opsem.Family.MATMUL):
            return False
        return spec.family is not opsem.Family.ROWWISE or int(_attr(n, "axis", -1)) in (-1, 1)

    def _row_gemms(self) -> frozenset[str]:
        """Gemms that are a linear layer over the rows of a rank-3 sequence, their operands re-declared as rows.

        torch exports ``nn.MultiheadAttention``'s output projection as ``Reshape [S, 1, D] -> [S, D]``, a
        ``Gemm`` with a constant ``[D, D]`` weight, and ``Reshape [S, D] -> [S, 1, D]`` back.  As ``[S, D]`` the
        Gemm's operands would fold like a classifier's ``[N, C]`` vectors (one batch per row, global); the
        reshapes around it only say that the rows are the sequence's.  So the Gemm's input and output are read
        with the rank-3 shape of the reshape after it, the Gemm becomes the row MatMul it computes (local, as
        any linear layer of a transformer is) and the reshape after it the identity it then is.  Only when the
        Gemm is plain (``transA`` 0, ``alpha``/``beta`` 1, constant ``B`` and bias), its input is a reshape used
        once and every reader of its output reshapes it to ``[S, 1, D]`` or ``[1, S, D]``."""
        readers: dict[str, list[onnx.NodeProto]] = {}
        for n in self.g.node:
            for i in n.input:
                readers.setdefault(i, []).append(n)
        found: set[str] = set()
        for n in self.g.node:
            if n.op_type != "Gemm" or len(n.input) < 2 or n.input[1] not in self.inits:
                continue
            if int(_attr(n, "transA", 0)) or float(_attr(n, "alpha", 1.0)) != 1.0 \
                    or float(_attr(n, "beta", 1.0)) != 1.0 or len(self.inits[n.input[1]].dims) != 2:
                continue
            if len(n.input) > 2 and n.input[2] and (n.input[2] not in self.inits
                                                    or len(self.inits[n.input[2]].dims) != 1):
                continue
            a, y = n.input[0], n.output[0]
            made = self.made_by.get(a)
            outs = readers.get(y, [])
            a_dims, y_dims = self.info.get(a, (None, ""))[0], self.info.get(y, (None, ""))[0]
            if made is None or made.op_type != "Reshape" or self.uses.get(a) != 1 or a in self.graph_outputs \
                    or y in self.graph_outputs or not outs or a_dims is None or y_dims is None \
                    or len(a_dims) != 2 or len(y_dims) != 2:
                continue
            targets = list({self.info.get(r.output[0], (None, ""))[0] for r in outs if r.op_type == "Reshape"})
            m, k = a_dims
            rows = {(m, 1, y_dims[1]), (1, m, y_dims[1])}
            if len(outs) != self.uses.get(y, 0) or any(r.op_type != "Reshape" for r in outs) or len(targets) != 1 \
                    or targets[0] not in rows:
                continue
            target = tuple(targets[0] or ())
            self.info[a] = ((m, 1, k) if target[1] == 1 else (1, m, k), self.info[a][1])
            self.info[y] = (target, self.info[y][1])
            found.add(n.name or y)
        return frozenset(found)

    def weight(self, name: str, role: str, rank: int = 0) -> Weight:
        """A constant operand; ``rank``: its shape right-aligned to that rank (ONNX broadcasting), so that it
        folds like the activation it is combined with."""
        init = self.inits[name]
        dt = ONNX_DTYPES.get(init.data_type, "f32")
        dims = tuple(int(d) for d in init.dims)
        return Weight(name, (1,) * max(0, rank - len(dims)) + dims, self._dt(dt), role)

    def add(self, op: Op) -> None:
        self.ops.append(op)
        for t in op.outputs:
            self.producer[t] = len(self.ops) - 1

    def single_use(self, tensor: str) -> bool:
        return self.uses.get(tensor, 0) == 1 and tensor not in self.graph_outputs

    def convert(self, node: onnx.NodeProto) -> None:
        """One ONNX node as an lgopt op: an alias, a fusion into its producer, a local op, or a global layer."""
        t = node.op_type
        ins = [self.res(i) for i in list(node.input) + outer_names(node)]
        outs = [o for o in node.output if o]
        name = node.name or outs[0]
        if t in ALIAS_TYPES and ins and ins[0] not in self.inits:
            self.alias[outs[0]] = ins[0]
            self.uses[ins[0]] = self.uses.get(ins[0], 0) + self.uses.get(outs[0], 0) - 1
            if outs[0] in self.graph_outputs:
                self.graph_outputs.add(ins[0])
            return
        if t == "Expand" and ins and ins[0] in self.inits and tuple(self.shape(outs[0])) == self.shape(ins[0]):
            # an Expand that leaves its constant as it is (ViT's class token at batch 1): the constant itself
            self.alias[outs[0]] = ins[0]
            self.uses[ins[0]] = self.uses.get(ins[0], 0) + self.uses.get(outs[0], 0) - 1
            return
        if self.fuse and self._try_fuse(node, t, ins, outs):
            return
        if t == "Split" and ins and ins[0] not in self.inits and self._split(node, name, ins, outs):
            return
        acts = [i for i in ins if i and i not in self.inits]
        consts = [i for i in ins if i and i in self.inits]
        form = self._form(node, t, ins, acts, consts, outs)
        if isinstance(form, _Global):
            return self._global(node, name, form.acts, form.consts, form.outs, form.reason)
        if form.op_type not in opsem.LOCAL_TYPES:  # Upsample is a Resize, a run-of-indices Gather a Slice
            return self._global(node, name, form.acts, form.consts, form.outs, opsem.global_type_reason(t))
        local, h_split, n_split, reason = opsem.classify(form.op_type, form.attrs, [self.shape(a) for a in form.acts],
                                                         [self.shape(o) for o in form.outs],
                                                         any(w.role == "filter" for w in form.weights))
        dts = {self._dt(self.info.get(a, (None, "f32"))[1]) for a in form.acts + form.outs}
        if local and not dts <= set(COMPUTE_DTYPES):
            local, h_split, n_split, reason = False, False, False, f"dtype {sorted(dts)}"
        self.add(Op(name, form.op_type, tuple(form.acts), tuple(form.outs), tuple(form.weights), form.attrs, (), local,
                    h_split, n_split, (node.name or outs[0],), reason))

    def _form(self, node: onnx.NodeProto, t: str, ins: list[str], acts: list[str], consts: list[str],
              outs: list[str]) -> _Form | _Global:
        """The node's lgopt type, attributes, weights and operands (or why it must run as a global layer), by
        its type's handler in :data:`_FORMS`; an op without one keeps its type and operands, with no
        attributes and no weights."""
        handler = _FORMS.get(t)
        if handler is None:
            return _Form(t, {}, [], acts, consts, outs)
        return handler(self, node, t, ins, acts, consts, outs)

    def _form_conv(self, node: onnx.NodeProto, t: str, ins: list[str], acts: list[str], consts: list[str],
                   outs: list[str]) -> _Form | _Global:
        """Conv and ConvTranspose: window attributes, group, the filter (and bias) as weights."""
        wshape = tuple(self.inits[ins[1]].dims) if len(ins) > 1 and ins[1] in self.inits else None
        if wshape is None or len(wshape) != 4:
            return _Global(acts, consts, outs, f"{t} with non-constant or non-2-D weights")
        in_hw = tuple(self.shape(acts[0])[2:4]) if len(self.shape(acts[0])) == 4 else (1, 1)
        attrs = _spatial_attrs(node, in_hw, wshape)
        attrs["group"] = int(_attr(node, "group", 1))
        if t == "ConvTranspose":
            attrs["output_padding"] = _pair(_attr(node, "output_padding"), 0)
        weights = [self.weight(ins[1], "filter")]
        if len(ins) > 2 and ins[2]:
            weights.append(self.weight(ins[2], "bias"))
        return _Form(t, attrs, weights, acts, consts, outs)

    def _form_pool(self, node: onnx.NodeProto, t: str, ins: list[str], acts: list[str], consts: list[str],
                   outs: list[str]) -> _Form | _Global:
        """MaxPool and AveragePool: window attributes; MaxPool's indices output is dropped."""
        in_hw = tuple(self.shape(acts[0])[2:4]) if len(self.shape(acts[0])) == 4 else (1, 1)
        attrs = _spatial_attrs(node, in_hw, None)
        attrs["ceil_mode"] = int(_attr(node, "ceil_mode", 0))
        attrs["count_include_pad"] = int(_attr(node, "count_include_pad", 0))
        return _Form(t, attrs, [], acts, consts, outs[:1])

    def _form_reduce_mean(self, node: onnx.NodeProto, t: str, ins: list[str], acts: list[str], consts: list[str],
                          outs: list[str]) -> _Form | _Global:
        """ReduceMean: its axes (an attribute, or a constant operand since opset 18) and keepdims; without
        keepdims it runs as a global layer unless it reduces H and W."""
        axes = _attr(node, "axes")
        if axes is None and len(ins) > 1 and ins[1] in self.inits:
            axes = numpy_helper.to_array(self.inits[ins[1]]).tolist()
            consts = []
        rank = len(self.shape(acts[0]))
        attrs = {"axes": tuple(sorted(int(a) % rank for a in (axes or range(rank)))),
                 "keepdims": int(_attr(node, "keepdims", 1))}
        if not attrs["keepdims"] and attrs["axes"] != (2, 3):  # over H and W, [N, C] folds to NC11 anyway
            return _Global(acts, consts, outs, "ReduceMean without keepdims")
        return _Form(t, attrs, [], acts, consts, outs)

    def _form_gather(self, node: onnx.NodeProto, t: str, ins: list[str], acts: list[str], consts: list[str],
                     outs: list[str]) -> _Form | _Global:
        """A Gather of constant indices from an activation: a run of one axis is a Slice (classified, costed
        and simulated as one), any other runs as a global layer.  Other Gathers are kept as they are."""
        if not (len(ins) > 1 and ins[0] not in self.inits and ins[1] in self.inits):
            return _Form(t, {}, [], acts, consts, outs)
        run = self._gather_attrs(node, ins)
        if run is None:
            return _Global(acts, consts, outs, "Gather of other than a run of constant indices")
        return _Form("Slice", run, [], acts[:1], [], outs)

    def _form_shape_data(self, node: onnx.NodeProto, t: str, ins: list[str], acts: list[str], consts: list[str],
                         outs: list[str]) -> _Form | _Global:
        """Ops whose constant operands are shape data, not weights (Slice's starts, ends, axes and steps; a
        reshape's target shape or axes; Resize's roi, scales and sizes): only the first operand is kept."""
        attrs: dict[str, Any] = {}
        op_type = t
        if t == "Slice":
            attrs = self._slice_attrs(node, ins, len(self.shape(acts[0])) if acts else 0)
        elif t in ("Resize", "Upsample"):
            op_type = "Resize"
            mode = _attr(node, "mode", "nearest")
            attrs = {"mode": mode, "coord": _attr(node, "coordinate_transformation_mode",
                                                 "asymmetric" if t == "Upsample" else "half_pixel"),
                     "nearest_mode": _attr(node, "nearest_mode",
                                           "floor" if t == "Upsample" else "round_prefer_floor")}
        return _Form(op_type, attrs, [], acts[:1], [], outs)

    def _form_concat(self, node: onnx.NodeProto, t: str, ins: list[str], acts: list[str], consts: list[str],
                     outs: list[str]) -> _Form | _Global:
        """Concat: its axis in lgopt's terms; a constant operand (ViT's class token) only where rows are
        joined, loaded like a weight and kept in place."""
        weights: list[Weight] = []
        rank = len(self.shape(outs[0]))
        axis = int(_attr(node, "axis", 1)) % rank
        # -1: within each row; -2: the rows of a rank-3 [B, M, K] (lgopt's H, held across the lanes)
        attrs: dict[str, Any] = {"axis": -1 if axis == rank - 1 and rank >= 3
                                 else -2 if rank == 3 and axis == 1 else axis}
        if consts and attrs["axis"] != -2:
            return _Global(acts, consts, outs, "Concat with a constant operand")
        if consts:  # rows joined with a constant (ViT's class token): loaded like a weight, kept in place
            attrs["const_at"] = tuple(k for k, i in enumerate(i for i in ins if i) if i in self.inits)
            weights = [self.weight(c, "const", rank) for c in consts]
            consts = []
        return _Form(t, attrs, weights, acts, consts, outs)

    def _form_attrs(self, node: onnx.NodeProto, t: str, ins: list[str], acts: list[str], consts: list[str],
                    outs: list[str]) -> _Form | _Global:
        """Ops with attributes and no weights: Clip's bounds (constant operands since opset 11, not weights),
        LeakyRelu's and HardSigmoid's slopes, Transpose's permutation, Gelu's approximation."""
        attrs: dict[str, Any]
        if t == "Clip":
            attrs = {"min": _scalar(self.inits, ins, 1, _attr(node, "min")),
                     "max": _scalar(self.inits, ins, 2, _attr(node, "max"))}
            consts = []
        elif t == "LeakyRelu":
            attrs = {"alpha": float(_attr(node, "alpha", 0.01))}
        elif t == "HardSigmoid":
            attrs = {"alpha": float(_attr(node, "alpha", 0.2)), "beta": float(_attr(node, "beta", 0.5))}
        elif t == "Transpose":
            dims = self.shape(acts[0]) if acts else ()
            attrs = {"perm": tuple(int(p) for p in _attr(node, "perm", range(len(dims))[::-1])), "in_dims": dims}
        else:  # Gelu
            attrs = {"approximate": str(_attr(node, "approximate", "none"))}
        return _Form(t, attrs, [], acts, consts, outs)

    def _form_batch_norm(self, node: onnx.NodeProto, t: str, ins: list[str], acts: list[str], consts: list[str],
                         outs: list[str]) -> _Form | _Global:
        """BatchNormalization: epsilon, its four constant operands as weights, the output alone (the running
        statistics of training are dropped)."""
        attrs = {"epsilon": float(_attr(node, "epsilon", 1e-5))}
        weights = [self.weight(c, r) for c, r in zip(ins[1:5], ("scale", "bias", "mean", "var")) if c in self.inits]
        return _Form(t, attrs, weights, acts, [], outs[:1])

    def _form_row_gemm(self, node: onnx.NodeProto, t: str, ins: list[str], acts: list[str], consts: list[str],
                       outs: list[str]) -> _Form | _Global:
        """A Gemm :meth:`_row_gemms` found to be a linear layer over rows: the row MatMul it computes, its
        filter (and bias) as weights.  Other Gemms are kept as they are."""
        if (node.name or outs[0]) not in self.row_gemms:
            return _Form(t, {}, [], acts, consts, outs)
        attrs: dict[str, Any] = {}
        f = self.weight(ins[1], "filter")
        if int(_attr(node, "transB", 0)):  # stored [N, K]: lgopt's filter is [K, N], the check transposes
            f = replace(f, shape=f.shape[::-1])
            attrs = {"filter_transposed": 1}
        weights = [f]
        if len(ins) > 2 and ins[2]:
            weights.append(self.weight(ins[2], "bias", len(self.shape(outs[0]))))
        return _Form("MatMul", attrs, weights, acts, [], outs)

    def _form_matmul(self, node: onnx.NodeProto, t: str, ins: list[str], acts: list[str], consts: list[str],
                     outs: list[str]) -> _Form | _Global:
        """MatMul: a constant operand is its weight, and only as the second operand of rank 2 (``[K, N]``)."""
        if consts and (len(acts) != 1 or ins[0] != acts[0] or len(self.shape(consts[0])) != 2):
            return _Global(acts, consts, outs, "MatMul with a constant operand other than a [K, N] weight")
        return _Form(t, {}, [self.weight(c, "filter") for c in consts], acts, [], outs)

    def _form_row_norm(self, node: onnx.NodeProto, t: str, ins: list[str], acts: list[str], consts: list[str],
                       outs: list[str]) -> _Form | _Global:
        """Softmax and LayerNormalization: the axis in lgopt's terms (-1: within each row), and
        LayerNormalization's epsilon and constant scale and bias as weights."""
        weights: list[Weight] = []
        rank = len(self.shape(outs[0]))
        axis = int(_attr(node, "axis", -1))
        if axis >= 0 and outs[0] in self.lifted:  # an axis of the [M, K] matrix, now [1, M, K]
            axis += 1
        attrs: dict[str, Any] = {"axis": -1 if axis % rank == rank - 1 else axis % rank}
        if t == "LayerNormalization":
            attrs["epsilon"] = float(_attr(node, "epsilon", 1e-5))
            if any(c and c not in self.inits for c in ins[1:3]):
                return _Global(acts, consts, outs, "LayerNormalization with a computed scale or bias")
            weights = [self.weight(c, r, rank) for c, r, one in zip(ins[1:3], ("scale", "bias"), (1.0, 0.0))
                       if c and not self._identity(c, one)]
            consts = []
        return _Form(t, attrs, weights, acts, consts, outs[:1])

    def _form_binary(self, node: onnx.NodeProto, t: str, ins: list[str], acts: list[str], consts: list[str],
                     outs: list[str]) -> _Form | _Global:
        """Elementwise binary ops and PRelu: a constant operand is a weight, right-aligned to the output's rank
        (ONNX broadcasting); an op of constants only runs as a global layer."""
        rank = len(self.shape(outs[0])) if t != "PRelu" else 0
        weights = [self.weight(c, "const", rank) for c in consts]
        if not acts:
            return _Global(acts, [c for c in ins if c], outs, "constant-only op")
        return _Form(t, {}, weights, acts, [], outs)

    def _gather_attrs(self, node: onnx.NodeProto, ins: list[str]) -> dict[str, Any] | None:
        """A Gather of constant indices that are one ascending run along its axis (``[4, 5, 6]``, negative ones
        counted from the end), as Slice attributes, and a scalar index of a rank-3 tensor's rows or of the batches
        (the axis dropped); None for anything else (a permutation moves data)."""
        init = self.inits[ins[1]]
        dims = self.shape(ins[0])
        rank = len(dims)
        axis = int(_attr(node, "axis", 0)) % rank
        if _has_data(init) and len(init.dims) == 0 and rank == 3 and axis == 1:
            # one row of a rank-3 [B, M, K], the axis dropped (ViT's class token, ``x[:, 0]``): a row Slice whose
            # [B, K] output keeps lying as one row (TPU-MLIR's ``Gather_slice``, grouped with the last LayerNorm)
            i = int(numpy_helper.to_array(init)) % dims[1]
            return {"axis": -2, "start": i, "end": i + 1, "step": 1}
        if _has_data(init) and len(init.dims) == 0 and axis == 0 and rank >= 2:
            # one batch, the axis dropped (ViT's Q, K and V taken out of one [3, T, 1, D]): a batch Slice, local
            # when the batch keeps lying over the lanes as it did (TPU-MLIR's ``Gather_slice``)
            i = int(numpy_helper.to_array(init)) % dims[0]
            return {"axis": 0, "start": i, "end": i + 1, "step": 1}
        if not _has_data(init) or len(init.dims) != 1:
            return None
        idx = [int(v) % dims[axis] for v in numpy_helper.to_array(init).reshape(-1)]
        if not idx or idx != list(range(idx[0], idx[0] + len(idx))):
            return None
        return {"axis": -1 if axis == rank - 1 and rank >= 3 else axis, "start": idx[0], "end": idx[-1] + 1,
                "step": 1}

    def _split(self, node: onnx.NodeProto, name: str, ins: list[str], outs: list[str]) -> bool:
        """A Split with constant sizes as one Slice per output (``name#k``, its source the Split): each output
        is a run of the split axis, which is what a Slice is, so the channel and last-axis Slices' rules,
        windows, costs and kernels apply unchanged (a multi-output op would not fit them).  False (the node
        then runs as a global layer) when the sizes are not constants or do not add up."""
        if len(node.output) != len(outs):  # an unused output left unnamed: keep the whole node global
            return False
        dims = self.shape(ins[0])
        rank = len(dims)
        axis = int(_attr(node, "axis", 0)) % rank
        sizes = _attr(node, "split")
        if sizes is None and len(ins) > 1 and ins[1]:
            if ins[1] not in self.inits or not _has_data(self.inits[ins[1]]):
                return False
            sizes = numpy_helper.to_array(self.inits[ins[1]]).reshape(-1).tolist()
        if sizes is None:  # equal parts (opset 18's num_outputs: the last one may be smaller)
            part = -(-dims[axis] // len(outs))
            sizes = [min(part, dims[axis] - k * part) for k in range(len(outs))]
        sizes = [int(v) for v in sizes]
        if len(sizes) != len(outs) or sum(sizes) != dims[axis] or min(sizes) <= 0:
            return False
        start = 0
        for k, (out, size) in enumerate(zip(outs, sizes)):
            attrs = {"axis": -1 if axis == rank - 1 and rank >= 3 else axis, "start": start, "end": start + size,
                     "step": 1}
            start += size
            local, h_split, n_split, reason = opsem.classify("Slice", attrs, [dims], [self.shape(out)])
            dts = {self._dt(self.info.get(a, (None, "f32"))[1]) for a in (ins[0], out)}
            if local and not dts <= set(COMPUTE_DTYPES):
                local, h_split, n_split, reason = False, False, False, f"dtype {sorted(dts)}"
            self.add(Op(f"{name}#{k}", "Slice", (ins[0],), (out,), (), attrs, (), local, h_split, n_split,
                        (node.name or outs[0],), reason))
        return True

    def _slice_attrs(self, node: onnx.NodeProto, ins: list[str], rank: int) -> dict[str, Any]:
        """A Slice as ``axis, start, end, step`` when it cuts one axis with constant bounds (``axis`` -1: the
        last axis of a rank-3/4 tensor; ``None`` when not understood, which no local rule accepts); ends past
        the axis are clamped as ONNX does."""
        def const(k: int, attr: str) -> list[int] | None:
            if len(ins) > k and ins[k]:
                if ins[k] not in self.inits or not _has_data(self.inits[ins[k]]):
                    return None
                return [int(v) for v in numpy_helper.to_array(self.inits[ins[k]]).reshape(-1)]
            v = _attr(node, attr)
            return None if v is None else [int(x) for x in v]

        starts, ends = const(1, "starts"), const(2, "ends")
        axes, steps = const(3, "axes"), const(4, "steps")
        if starts is None or ends is None or len(starts) != 1 or not rank:
            return {"axis": None}
        axis = (axes or [0])[0] % rank
        dim = self.shape(ins[0])[axis]
        start, end = (min(max(v + dim if v < 0 else v, 0), dim) for v in (starts[0], ends[0]))
        last = axis == rank - 1 and rank >= 3  # a run of each row's last axis: -1
        return {"axis": -1 if last else axis, "start": start, "end": end, "step": (steps or [1])[0]}

    def _global(self, node: onnx.NodeProto, name: str, acts: list[str], consts: list[str], outs: list[str],
                reason: str) -> None:
        weights = tuple(self.weight(c, "const") for c in consts if c in self.inits)
        for a in acts + outs:
            self.shape(a)
        self.add(Op(name, node.op_type, tuple(acts), tuple(outs), weights, {}, (), False, False, False,
                    (node.name or outs[0],), reason))

    def _try_fuse(self, node: onnx.NodeProto, t: str, ins: list[str], outs: list[str]) -> bool:
        """Fold BN into Conv, an activation into its producer, Sigmoid(x)*x into SiLU, torch's LayerNorm and
        GELU chains into one op, a constant scale or bias into a LayerNorm or MatMul."""
        if t == "Div" and self._layernorm(node, ins, outs):
            return True
        if t == "Transpose" and self._patch_embedding(node, ins, outs):
            return True
        if t == "Reshape" and self._group_norm(node, ins, outs):
            return True
        if t in ("Mul", "Add") and self._affine_into(node, t, ins, outs):
            return True
        if not ins or not ins[0] or ins[0] in self.inits:
            return False
        src = ins[0]
        pi = self.producer.get(src)
        prod = self.ops[pi] if pi is not None else None
        if t == "BatchNormalization" and prod is not None and prod.type == "Conv" and prod.local \
                and self.single_use(src) and not prod.fused:
            assert pi is not None  # prod is self.ops[pi]
            weights = list(prod.weights)
            if not any(w.role == "bias" for w in weights):
                oc = prod.weights[0].shape[0]
                weights.append(Weight(f"{ins[2]}", (oc,), weights[0].dtype, "bias"))
            self._replace(pi, replace(prod, outputs=(outs[0],), weights=tuple(weights),
                                      sources=prod.sources + ((node.name or outs[0]),)))
            return True
        if t in opsem.FUSABLE_ACTIVATIONS and prod is not None and prod.local and self.single_use(src) \
                and prod.type in ("Conv", "ConvTranspose", "Add", "Sub", "Mul", "BatchNormalization") \
                and len(prod.outputs) == 1 and not prod.fused:
            assert pi is not None  # prod is self.ops[pi]
            attrs = dict(prod.attrs)
            if t == "Clip":
                attrs["act_min"] = _scalar(self.inits, ins, 1, _attr(node, "min"))
                attrs["act_max"] = _scalar(self.inits, ins, 2, _attr(node, "max"))
            if t == "LeakyRelu":
                attrs["act_alpha"] = float(_attr(node, "alpha", 0.01))
            self._replace(pi, replace(prod, outputs=(outs[0],), fused=prod.fused + (t,), attrs=attrs,
                                      sources=prod.sources + ((node.name or outs[0]),)))
            return True
        chain = self._gelu_chain(ins) if t == "Mul" else None
        if chain is not None:  # one Gelu op, as TPU-MLIR's lowering makes it (its GELU Active op)
            x, parts = chain
            attrs = {"approximate": "none"}
            local, h, n, why = opsem.classify("Gelu", attrs, [self.shape(x)], [self.shape(outs[0])])
            sources = tuple(src for i in parts for src in self.ops[i].sources) + ((node.name or outs[0]),)
            gone = self._tombstones(parts)
            self.add(Op(node.name or outs[0], "Gelu", (x,), (outs[0],), (), attrs, (), local, h, n, sources, why,
                        aliases=gone))
            return True
        if t == "Mul" and len(ins) == 2 and all(i and i not in self.inits for i in ins):
            for x, s in ((ins[0], ins[1]), (ins[1], ins[0])):
                si = self.producer.get(s)
                if si is None or not self.single_use(s):
                    continue
                fused = _gated(self.ops[si], x)
                if fused:
                    gate = self.ops[si]
                    gone = self._tombstones([si])
                    self.add(replace(gate, name=node.name or outs[0], type=fused, outputs=(outs[0],), attrs={},
                                     sources=gate.sources + ((node.name or outs[0]),), aliases=gone))
                    return True
        return False

    def _made_by(self, t: str, typ: str, uses: int = 1) -> int | None:
        """The index of the local, unfused ``typ`` op producing ``t``, when ``t`` has exactly ``uses`` uses."""
        i = self.producer.get(t)
        if i is None or self.uses.get(t, 0) != uses or t in self.graph_outputs:
            return None
        op = self.ops[i]
        return i if op.type == typ and op.local and not op.fused and op.name else None

    def _layernorm(self, node: onnx.NodeProto, ins: list[str], outs: list[str]) -> bool:
        """``(x - mean(x)) / sqrt(mean((x - mean(x))**2) + eps)`` over the last axis, as torch exports
        LayerNorm below opset 17 (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div), as one LayerNormalization
        op: TPU-MLIR's front end makes it one ``tpu.LayerNorm`` (ConvNeXt's blocks), whose LMEM and cycles are
        those of one op, not of seven.  A following per-feature Mul and Add become its scale and bias
        (:meth:`_affine_into`)."""
        if len(ins) != 2 or any(i in self.inits for i in ins):
            return False
        si, qi = self._made_by(ins[0], "Sub", uses=2), self._made_by(ins[1], "Sqrt")
        if si is None or qi is None:
            return False
        sub, sqrt = self.ops[si], self.ops[qi]
        ai = self._made_by(sqrt.inputs[0], "Add")
        add = self.ops[ai] if ai is not None else None
        if add is None or len(add.inputs) != 1 or len(add.weights) != 1:
            return False
        vi = self._made_by(add.inputs[0], "ReduceMean")
        pi = self._made_by(self.ops[vi].inputs[0], "Pow") if vi is not None else None
        if len(sub.inputs) != 2 or pi is None or self.ops[pi].inputs != (sub.outputs[0],) \
                or (self._has(self.ops[pi].weights) and not self._const_is(self.ops[pi].weights[0].name, 2.0)):
            return False
        x = sub.inputs[0]
        mi = self._made_by(sub.inputs[1], "ReduceMean")
        rank = len(self.shape(x))
        last = (rank - 1,)
        assert vi is not None
        if mi is None or self.ops[mi].inputs != (x,) or any(
                self.ops[k].attrs.get("axes") != last or not self.ops[k].attrs.get("keepdims") for k in (mi, vi)):
            return False
        eps_w = add.weights[0].name
        init = self.inits.get(eps_w)
        eps = float(numpy_helper.to_array(init).reshape(-1)[0]) if init is not None and _has_data(init) else 1e-5
        attrs = {"axis": -1, "epsilon": eps}
        local, h, n, why = opsem.classify("LayerNormalization", attrs, [self.shape(x)], [self.shape(outs[0])])
        parts = [k for k in (mi, si, pi, vi, ai, qi) if k is not None]
        sources = tuple(src for i in parts for src in self.ops[i].sources) + ((node.name or outs[0]),)
        gone = self._tombstones(parts)
        self.add(Op(node.name or outs[0], "LayerNormalization", (x,), (outs[0],), (), attrs, (), local, h, n,
                    sources, why, aliases=gone))
        return True

    def _patch_embedding(self, node: onnx.NodeProto, ins: list[str], outs: list[str]) -> bool:
        """A ViT's patch embedding -- a Conv whose stride is its kernel (no padding, one group), flattened to
        ``[N, C, P]`` and transposed to tokens-first ``[N, P, C]`` -- as TPU-MLIR lowers it: the patches
        gathered into ``[N, P, C_in * kh * kw]`` rows (a reshape and a permute of the image: a global layer,
        ``Patchify``) and one MatMul with the filter as its ``[C_in * kh * kw, C]`` weight, rows over the
        lanes.  Held as a conv, the image's 3 channels would sit on 3 lanes (98 KiB a lane at 224 x 224) and
        its group could not fit LMEM; as rows, ViT-B/16's first group holds 6 KiB a lane."""
        if tuple(_attr(node, "perm", ())) != (0, 2, 1) or len(ins) != 1:
            return False
        ri = self._made_by(ins[0], "Reshape")
        ci = self._made_by(self.ops[ri].inputs[0], "Conv") if ri is not None else None
        if ri is None or ci is None:
            return False
        conv = self.ops[ci]
        a = conv.attrs
        f = next((w for w in conv.weights if w.role == "filter"), None)
        kh, kw = tuple(a.get("kernel", (0, 0)))
        n, oc, oh, ow = (tuple(self.shape(conv.outputs[0])) + (0, 0, 0, 0))[:4]
        if f is None or len(f.shape) != 4 or tuple(a.get("strides", ())) != (kh, kw) or any(a.get("pads", ())) \
                or a.get("group", 1) != 1 or tuple(a.get("dilations", (1, 1))) != (1, 1) \
                or tuple(self.shape(outs[0])) != (n, oh * ow, oc) or len(conv.inputs) != 1:
            return False
        k = f.shape[1] * kh * kw
        patches = f"{conv.outputs[0]}#patches"
        self.info[patches] = ((n, oh * ow, k), self.info.get(conv.outputs[0], (None, "f32"))[1])
        self.ops[ci] = replace(conv, name=f"{conv.name}/patches", type="Patchify", outputs=(patches,), weights=(),
                               attrs={"kernel": (kh, kw)},
                               local=False, h_split=False, n_split=False,
                               reason="Patchify gathers a patch embedding's pixels into rows (moves every pixel "
                                      "between lanes): TPU-MLIR's reshape and permute, run as global layers")
        self.producer[patches] = ci
        weights = (Weight(f.name, (k, oc), f.dtype, "filter"),) + tuple(
            Weight(w.name, (1, 1, oc), w.dtype, "bias") for w in conv.weights if w.role == "bias")
        local, h, nn, why = opsem.classify("MatMul", {}, [(n, oh * ow, k)], [(n, oh * ow, oc)], True)
        sources = self.ops[ri].sources + ((node.name or outs[0]),)
        gone = self._tombstones([ri])
        self.add(Op(conv.name, "MatMul", (patches,), (outs[0],), weights, {}, (), local, h, nn, sources, why,
                    aliases=gone))
        return True

    def _group_norm(self, node: onnx.NodeProto, ins: list[str], outs: list[str]) -> bool:
        """torch's GroupNorm below opset 18 -- ``x`` reshaped to ``[N, G, -1]``, InstanceNormalization (its scale
        ones, its bias zeros), reshaped back to ``x``'s shape -- as one GroupNormalization op: TPU-MLIR's front
        end makes it one ``tpu.GroupNorm`` (named after the InstanceNormalization's output) and groups it, where
        the two reshapes alone move data between lanes.  The per-channel Mul and Add after it stay ops of their
        own (TPU-MLIR makes them one Scale)."""
        if not ins or ins[0] in self.inits or not self.single_use(ins[0]):
            return False
        ii = self.producer.get(ins[0])
        inorm = self.ops[ii] if ii is not None else None
        if inorm is None or inorm.type != "InstanceNormalization" or len(inorm.inputs) != 1 \
                or not self.single_use(inorm.inputs[0]):
            return False
        ri = self.producer.get(inorm.inputs[0])
        if ri is None or self.ops[ri].type != "Reshape" or len(self.ops[ri].inputs) != 1:
            return False
        x = self.ops[ri].inputs[0]
        xs, mid, ys = tuple(self.shape(x)), tuple(self.shape(inorm.inputs[0])), tuple(self.shape(outs[0]))
        if len(xs) != 4 or ys != xs or len(mid) != 3 or mid[0] != xs[0] or xs[1] % mid[1]:
            return False
        if not all(self._const_all(w.name, 1.0 if k == 0 else 0.0) for k, w in enumerate(inorm.weights)):
            return False  # a per-group affine: not torch's GroupNorm
        made = self.made_by.get(inorm.outputs[0])
        attrs = {"num_groups": int(mid[1]), "epsilon": float(_attr(made, "epsilon", 1e-5)) if made else 1e-5}
        local, h, n, why = opsem.classify("GroupNormalization", attrs, [xs], [ys])
        sources = self.ops[ri].sources + inorm.sources + ((node.name or outs[0]),)
        assert ii is not None  # inorm is self.ops[ii]
        gone = self._tombstones([ri, ii])
        self.add(Op(node.name or outs[0], "GroupNormalization", (x,), (outs[0],), (), attrs, (), local, h, n,
                    sources, why, aliases=gone))
        return True

    def _values(self, name: str) -> np.ndarray | None:
        """Constant ``name``'s values (None where the file has none: not a constant, or a weightless file's)."""
        init = self.inits.get(name)
        return numpy_helper.to_array(init) if init is not None and _has_data(init) else None

    def _const_all(self, name: str, value: float) -> bool:
        """Whether every element of constant ``name`` is ``value`` (true of a weightless file's missing data:
        the exporter wrote a constant it did not strip only where it is data the graph needs)."""
        v = self._values(name)
        return v is None or bool(np.all(np.abs(v.astype(np.float64) - value) < 1e-6))

    def _identity(self, name: str, value: float) -> bool:
        """Whether constant ``name`` has data and every element equals ``value``: an identity affine TPU-MLIR's
        front end drops (``isScalar_`` in ``convert_layer_norm_op``; a zero bias, :meth:`_affine_into`).  A
        weightless file's constant is kept: its values are unknown."""
        v = self._values(name)
        return v is not None and bool(np.all(v == value))

    def _form_group_norm(self, node: onnx.NodeProto, t: str, ins: list[str], acts: list[str], consts: list[str],
                         outs: list[str]) -> _Form | _Global:
        """ONNX GroupNormalization: ``num_groups``, ``epsilon``, its scale and bias as per-channel weights (one
        value per channel, opset 21's form; opset 18's per-group ones only where groups are channels)."""
        attrs = {"num_groups": int(_attr(node, "num_groups", 0)), "epsilon": float(_attr(node, "epsilon", 1e-5))}
        c = self.shape(acts[0])[1] if acts and len(self.shape(acts[0])) == 4 else 0
        if c and (why := opsem.group_count_error(attrs, c)):
            raise LgoptError(f"{self.path}: GroupNormalization {node.name or outs[0]}: {why}")
        if len(acts) != 1 or len(consts) != 2 or not c:
            return _Global(acts, consts, outs, "GroupNormalization with a computed scale or bias")
        if any(int(np.prod(self.inits[k].dims)) != c for k in consts):
            return _Global(acts, consts, outs, "GroupNormalization with a scale or bias per group")
        weights = [replace(self.weight(k, role), shape=(1, c, 1, 1)) for k, role in zip(consts, ("scale", "bias"))]
        return _Form("GroupNormalization", attrs, weights, acts, [], outs)

    def _has(self, weights: tuple[Weight, ...]) -> bool:
        return bool(weights) and all(w.name in self.inits and _has_data(self.inits[w.name]) for w in weights)

    def _affine_into(self, node: onnx.NodeProto, t: str, ins: list[str], outs: list[str]) -> bool:
        """A constant over the last axis folded into its producer, as TPU-MLIR's front end folds it: a Mul into
        a LayerNormalization's scale, an Add into its bias (after the scale) or into a MatMul's bias (TPU-MLIR
        names a linear layer after its bias Add: one op, no separate pass over the output).  An identity
        constant is dropped as TPU-MLIR 1.30.2 drops it: a LayerNorm's scale of ones or bias of zeros always, a
        constant of zeros shared as the bias of several MatMuls (exporters share equal initializers) everywhere
        but its first (timm's ViT-Tiny, legacy and dynamo exports: 3 of 48 linear layers keep a zero bias in
        its ``_final.mlir``, each the first reader of its constant)."""
        acts = [i for i in ins if i and i not in self.inits]
        consts = [i for i in ins if i and i in self.inits]
        if len(acts) != 1 or len(consts) != 1:
            return False
        out_shape = self.shape(outs[0])
        dims = tuple(int(d) for d in self.inits[consts[0]].dims)
        if not dims or dims[-1] != out_shape[-1] or any(d != 1 for d in dims[:-1]) \
                or tuple(self.shape(acts[0])) != tuple(out_shape):
            return False
        for typ in ("LayerNormalization", "MatMul"):
            i = self._made_by(acts[0], typ)
            if i is None:
                continue
            prod = self.ops[i]
            roles = {w.role for w in prod.weights}
            if typ == "LayerNormalization":
                role = "scale" if t == "Mul" and not roles else "bias" if t == "Add" and "bias" not in roles else ""
            else:
                role = "bias" if t == "Add" and roles == {"filter"} else ""
            if not role:
                return False
            w: tuple[Weight, ...] = (self.weight(consts[0], role, len(out_shape)),)
            if self._identity(consts[0], 1.0 if role == "scale" else 0.0):
                w = () if typ == "LayerNormalization" or consts[0] in self.zero_biases else w
                self.zero_biases.add(consts[0])
            self._replace(i, replace(prod, outputs=(outs[0],), weights=prod.weights + w,
                                     sources=prod.sources + ((node.name or outs[0]),)))
            return True
        return False

    def _const_is(self, name: str, value: float) -> bool:
        """Whether constant ``name`` is the one scalar ``value`` (to 1e-4 relative)."""
        v = self._values(name)
        return v is not None and v.size == 1 and abs(float(v.reshape(-1)[0]) - value) < 1e-4 * max(1.0, abs(value))

    def _gelu_chain(self, ins: list[str]) -> tuple[str, list[int]] | None:
        """``x * (1 + erf(x / sqrt 2)) * 0.5`` as torch exports GELU (Div, Erf, Add, Mul, then this Mul by
        0.5): its input ``x`` and the four ops before this one, when every link is used once."""
        acts = [i for i in ins if i and i not in self.inits]
        consts = [i for i in ins if i and i in self.inits]
        if len(acts) != 1 or len(consts) != 1 or not self._const_is(consts[0], 0.5):
            return None

        def made_by(t: str, typ: str, const: float | None = None) -> int | None:
            i = self._made_by(t, typ)
            if i is None or const is None:
                return i
            op = self.ops[i]
            ok = len(op.inputs) == 1 and len(op.weights) == 1 and self._const_is(op.weights[0].name, const)
            return i if ok else None

        mi = made_by(acts[0], "Mul")
        if mi is None or len(self.ops[mi].inputs) != 2:
            return None
        for x, a in (self.ops[mi].inputs, self.ops[mi].inputs[::-1]):
            ai = made_by(a, "Add", 1.0)
            ei = made_by(self.ops[ai].inputs[0], "Erf") if ai is not None else None
            di = made_by(self.ops[ei].inputs[0], "Div", 2 ** 0.5) if ei is not None else None
            if di is not None and self.ops[di].inputs == (x,):
                assert ai is not None and ei is not None
                return x, [di, ei, ai, mi]
        return None

    def _tombstones(self, parts: list[int]) -> tuple[str, ...]:
        """Mark the ops ``parts`` fused into a new op (removed at the end); the tensors they made, its aliases."""
        gone = tuple(t for i in parts for t in (*self.ops[i].aliases, *self.ops[i].outputs) if t)
        for i in parts:
            self.ops[i] = replace(self.ops[i], name="", outputs=())
        return gone

    def _replace(self, i: int, op: Op) -> None:
        gone = tuple(t for t in self.ops[i].outputs if t and t not in op.outputs)  # fused away: an alias
        if gone and op.outputs:
            op = replace(op, aliases=tuple(dict.fromkeys(op.aliases + gone)))
        self.ops[i] = op
        for t in op.outputs:
            self.producer[t] = i

    def network(self, name: str) -> Network:
        ops: list[Op] = []
        names: set[str] = set()
        for op in self.ops:  # ONNX allows duplicate node names; lgopt needs unique ones
            if not op.name:
                continue  # a Sigmoid that became part of a SiLU
            if op.name in names:
                op = replace(op, name=f"{op.name}#{op.outputs[0]}")
            names.add(op.name)
            ops.append(op)
        inputs = tuple(i.name for i in self.g.input if i.name not in self.inits)
        outputs = tuple(dict.fromkeys(self.res(o.name) for o in self.g.output))
        tensors: dict[str, Tensor] = {}
        needed = dict.fromkeys(list(inputs) + [t for op in ops for t in op.inputs + op.outputs] + list(outputs))
        shapes = {t: self.shape(t) for t in needed}
        last = opsem.channels_last(ops, shapes)
        ops = list(opsem.image_rows(ops, shapes, last))
        for t in needed:  # ordered: problem files must not depend on the hash seed
            shp = self.shape(t)
            dt = self._dt(self.info.get(t, (None, "f32"))[1])
            tensors[t] = Tensor(t, to_nchw(shp, t in last), dt, tuple(shp), t in last)
        used_inputs = tuple(i for i in inputs if i in tensors)
        return check_network(Network(name, tensors, tuple(ops), used_inputs, outputs))


_FormHandler = Callable[[_Builder, onnx.NodeProto, str, list[str], list[str], list[str], list[str]],
                        _Form | _Global]
_FORMS: dict[str, _FormHandler] = {
    "Conv": _Builder._form_conv, "ConvTranspose": _Builder._form_conv,
    "MaxPool": _Builder._form_pool, "AveragePool": _Builder._form_pool,
    "ReduceMean": _Builder._form_reduce_mean,
    "Gather": _Builder._form_gather,
    "Slice": _Builder._form_shape_data, "Resize": _Builder._form_shape_data, "Upsample": _Builder._form_shape_data,
    **{t: _Builder._form_shape_data for t in opsem.RESHAPE_TYPES},
    "Concat": _Builder._form_concat,
    **{t: _Builder._form_attrs for t in ("Clip", "LeakyRelu", "HardSigmoid", "Transpose", "Gelu")},
    "BatchNormalization": _Builder._form_batch_norm,
    "Gemm": _Builder._form_row_gemm,
    "MatMul": _Builder._form_matmul,
    "Softmax": _Builder._form_row_norm, "LayerNormalization": _Builder._form_row_norm,
    "GroupNormalization": _Builder._form_group_norm,
    **{t: _Builder._form_binary for t in (*opsem.BINARY_TYPES, "PRelu")},
}
"""Per op type, how :meth:`_Builder._form` reads a node (GlobalAveragePool, GlobalMaxPool and the unary ops
need no handler: their type and operands as they are)."""


SUBGRAPH_TYPES = ("If", "Loop", "Scan")


def outer_names(node: onnx.NodeProto) -> list[str]:
    """Tensors of the enclosing graph a node's subgraphs (If branches, Loop and Scan bodies) read: they are
    inputs of the node as much as its listed ones, and a global layer that ignored them could run before
    they exist."""
    out: list[str] = []

    def visit(g: onnx.GraphProto, bound: set[str]) -> None:
        bound = bound | {i.name for i in g.input} | {i.name for i in g.initializer}
        for n in g.node:
            out.extend(i for i in n.input if i and i not in bound and i not in out)
            for a in n.attribute:
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    visit(sub, bound)
            bound = bound | set(n.output)

    for a in node.attribute:
        for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            visit(sub, set())
    return [i for i in out if i not in node.input]


def _unknown_shape_cause(node: onnx.NodeProto, opsets: Mapping[str, int]) -> str:
    """Why ONNX shape inference left the output of ``node`` (a standard-domain op) without a static shape."""
    label = f"{node.op_type} node {node.name or node.output[0]!r}"
    version = opsets.get(node.domain or "", 1)
    try:
        onnx.defs.get_schema(node.op_type, version, node.domain or "")
    except Exception:
        return f"it is produced by {label}, an op ONNX opset {version} does not define"
    if node.op_type in DATA_SHAPED_TYPES:
        return f"it is produced by {label}, whose output shape depends on the data"
    return f"it is produced by {label}, whose output shape ONNX shape inference cannot tell from its operands"


# ops whose output shape depends on the values of a runtime tensor, not only on shapes and constants
DATA_SHAPED_TYPES = frozenset({"NonZero", "NonMaxSuppression", "Unique", "Compress", "StringSplit"})


def _scalar(inits: Mapping[str, onnx.TensorProto], ins: list[str], k: int, default: Any) -> float | None:
    if len(ins) > k and ins[k] and ins[k] in inits and _has_data(inits[ins[k]]):
        return float(numpy_helper.to_array(inits[ins[k]]).reshape(-1)[0])
    return None if default is None else float(default)


def import_onnx(path: str | Path, *, fuse: bool = True, dtype: str | None = None,
                input_shapes: Mapping[str, tuple[int, ...]] | None = None, name: str | None = None) -> Network:
    """Read an ONNX file into a Network (see the module docstring for what it folds)."""
    if dtype is not None and dtype not in COMPUTE_DTYPES:
        raise LgoptError(f"unknown compute dtype {dtype!r} (choose from {', '.join(COMPUTE_DTYPES)})")
    spath = str(path)
    model = load_onnx(path)
    if input_shapes:
        _set_input_shapes(model, input_shapes)
    model = _infer(model, spath)
    for _ in range(16):
        model, changed = _fold_constants(model, spath)
        model = _infer(model, spath)
        if not changed:
            break
    node: onnx.NodeProto | None = None
    try:  # an op lgopt cannot take is an input error naming it (exit 2), never an internal one
        b = _Builder(model, spath, fuse, dtype)
        for node in model.graph.node:
            b.convert(node)
        node = None
        return b.network(name or Path(path).name.split(".")[0])
    except LgoptError:
        raise
    except Exception as e:
        what = f"its {node.op_type} node {node.name or node.output[0]!r}" if node is not None else "its graph"
        tensors = {t for n in model.graph.node for t in list(n.input) + list(n.output)}
        detail = f"its operand {e.args[0]!r} is computed, where lgopt needs a constant" \
            if isinstance(e, KeyError) and e.args and e.args[0] in tensors \
            else f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
        raise LgoptError(f"{spath}: lgopt cannot import {what} ({detail})") from e

"""lgopt's native problem format (``docs/problem-format.md``) and model loading.

A problem file is a :class:`~lgopt.model.network.Network` written as JSON: small,
diffable, and free of weight bytes, so bundled problems can live in git and a
user can write one by hand for a network no ONNX exporter produces.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from lgopt.errors import LgoptError
from lgopt.io.jsonio import read_json, write_json
from lgopt.model import ops as opsem
from lgopt.model.dtype import DTYPE_BYTES
from lgopt.model.network import PROBLEM_FORMAT as FORMAT
from lgopt.model.network import PROBLEM_VERSION as VERSION
from lgopt.model.network import Network, Op, Tensor, Weight, check_network, network_to_dict, to_nchw


def _tuplify(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_tuplify(x) for x in v)
    if isinstance(v, dict):
        return {k: _tuplify(x) for k, x in v.items()}
    return v


def _req(d: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise LgoptError(f"{where}: missing field {key!r}")
    return d[key]


def _shape(v: Any, where: str) -> tuple[int, ...]:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise LgoptError(f"{where}: shape must be a list of integers, got {v!r}")
    if any(x <= 0 for x in v):
        raise LgoptError(f"{where}: shape {v} has a non-positive dimension")
    return tuple(v)


def network_from_dict(d: Mapping[str, Any], where: str = "problem") -> Network:
    """Parse and classify: sliceable axes are recomputed, not trusted; an op is local unless
    lgopt cannot group it or the file names a ``global_reason``."""
    if not isinstance(d, Mapping) or d.get("format") != FORMAT:
        raise LgoptError(f"{where}: not an lgopt problem file (expected \"format\": \"{FORMAT}\")")
    if d.get("version") != VERSION:
        raise LgoptError(f"{where}: problem format version {d.get('version')!r} is not supported "
                         f"(this lgopt reads {VERSION})")
    tensors: dict[str, Tensor] = {}
    for name, t in _req(d, "tensors", where).items():
        shp = _shape(_req(t, "shape", f"{where}: tensor {name}"), f"{where}: tensor {name}")
        dt = t.get("dtype", "f32")
        if dt not in DTYPE_BYTES:
            raise LgoptError(f"{where}: tensor {name} has unknown dtype {dt!r}")
        tensors[name] = Tensor(name, to_nchw(shp), dt, shp)
    ops: list[Op] = []
    for i, o in enumerate(_req(d, "ops", where)):
        w = f"{where}: op #{i} {o.get('name', '?')}"
        attrs = _tuplify(o.get("attrs", {}))
        ins = tuple(_req(o, "inputs", w))
        outs = tuple(_req(o, "outputs", w))
        for t in ins + outs:
            if t not in tensors:
                raise LgoptError(f"{w}: tensor {t!r} is not declared in \"tensors\"")
        weights = tuple(Weight(x["name"], _shape(x["shape"], w), x.get("dtype", "f32"), x.get("role", "weight"))
                        for x in o.get("weights", []))
        op_type = _req(o, "type", w)
        if op_type in opsem.OP_SPECS and not o.get("global_reason"):  # a layer-group type: its attributes, first
            _check_attrs(op_type, attrs, weights, w)
        if op_type == "GroupNormalization" and ins and (why := opsem.group_count_error(
                attrs, to_nchw(tensors[ins[0]].orig_shape)[1])):
            raise LgoptError(f"{w}: GroupNormalization {why}")
        local, h_split, n_split, reason = opsem.classify(
            op_type, attrs, [tensors[t].orig_shape for t in ins], [tensors[t].orig_shape for t in outs],
            any(x.role == "filter" for x in weights))
        if o.get("global_reason"):  # the file may force a global layer; its reason wins
            local, h_split, n_split, reason = False, False, False, str(o["global_reason"])
        ops.append(Op(_req(o, "name", w), op_type, ins, outs, weights, attrs, tuple(o.get("fused", ())), local,
                      h_split, n_split, tuple(o.get("sources", (o["name"],))), reason))
    shapes = {t: v.orig_shape for t, v in tensors.items()}
    last = opsem.channels_last(ops, shapes)
    ops = list(opsem.image_rows(ops, shapes, last))
    tensors = {t: replace(v, shape=to_nchw(v.orig_shape, True), channels_last=True) if t in last else v
               for t, v in tensors.items()}
    return check_network(Network(str(d.get("name", "network")), tensors, tuple(ops),
                                 tuple(_req(d, "inputs", where)), tuple(_req(d, "outputs", where))))


def _check_attrs(op_type: str, attrs: Mapping[str, Any], weights: tuple[Weight, ...], where: str) -> None:
    spec = opsem.OP_SPECS[op_type]
    for k in spec.attrs:
        if k not in attrs:
            raise LgoptError(f"{where}: {op_type} needs attribute {k!r}")
    if spec.filter and not any(w.role == "filter" for w in weights):
        raise LgoptError(f"{where}: {op_type} needs a weight with role \"filter\"")


def save_problem(net: Network, path: str | Path) -> None:
    write_json(path, network_to_dict(net))


def load_problem(path: str | Path) -> Network:
    return network_from_dict(read_json(path, "problem"), str(path))


def load_model(path: str | Path, **onnx_options: Any) -> Network:
    """A model file by extension: ``.onnx`` through the importer, ``.json`` as a problem."""
    p = Path(path)
    if not p.exists():
        raise LgoptError(f"model file {path} does not exist")
    if p.suffix.lower() == ".onnx":
        from lgopt.io.onnx_import import import_onnx

        return import_onnx(p, **onnx_options)
    if p.suffix.lower() == ".json":
        if onnx_options.get("input_shapes") or onnx_options.get("dtype"):
            raise LgoptError("--input-shape and --dtype apply to ONNX models, not problem files")
        return load_problem(p)
    raise LgoptError(f"{path}: unsupported model file type {p.suffix!r} (expected .onnx or .json)")

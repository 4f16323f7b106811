"""TPU-MLIR's op names in its measurements -> lgopt's ops, for fitting the cost model on its timeline.

Measurements name TPU-MLIR's ops (``<ONNX output name>_<OpType>``, casts lowering inserted, pieces of ops it
split, ops it fused); the fit needs the lgopt op each one's cycles belong to, on the network lgopt builds from
the same ONNX model lowered as TPU-MLIR lowers it.  The rules are the cache reader's (:mod:`.cache`:
:func:`~.cache.anchor`, :func:`~.cache.cast_operands`, :func:`~.cache.tensor_aliases`), plus where a cast's
cycles go, which only a fit asks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import pandas as pd

from lgopt.io.problem import load_model
from lgopt.model.network import Network, Op
from lgopt.tpumlir.cache import anchor, cast_operands, is_cast, tensor_aliases
from lgopt.tpumlir.lowering import fold_like_tpu_mlir, named_ops

CAST_SUFFIX = re.compile(r"_(f16|f32|bf16|int8|uint8|int16|int32)$")
CAST_PIECE = re.compile(r"_(f16|f32|bf16)(_\d+)?$")  # a float cast, of a piece when numbered


class OpMap:
    """TPU-MLIR op names of one model x chip (its rows of ``model_ops.csv``) -> lgopt ops, and casts -> the op
    they are for.  Lookups are memoised: a fit resolves the same names hundreds of thousands of times."""

    def __init__(self, net: Network, model_ops: pd.DataFrame):
        self.net = net
        self.by_weight = {w.name: op for op in net.ops for w in op.weights}
        self.aliases = tensor_aliases(net)
        self.op: dict[str, Op] = {}
        by_out = {t: op for op in net.ops for t in op.outputs}
        anchored: dict[str, list[str]] = {}
        for r in model_ops.itertuples(index=False):
            hits = [by_out[t] for t in str(r.onnx_outputs).split("|") if t in by_out] \
                if isinstance(r.onnx_outputs, str) else []
            if hits:
                self.op[str(r.name)] = hits[-1]
            elif not is_cast(str(r.name)) and (name := anchor(str(r.name), self.aliases)) is not None:
                anchored.setdefault(name, []).append(str(r.name))
        # an op TPU-MLIR fused (a LayerNorm, a GELU) has no ONNX output of its own, and the pieces of an op it split
        # (a MatMul's column halves ``_0``/``_1``, their ``_add_``) have none each: named after the op's last
        # tensor, they are that op, and their cycles add up to its work
        for name, locs in anchored.items():
            for loc in locs:
                self.op[loc] = net.op(name)
        self.names = sorted(self.op, key=len, reverse=True)
        self._cache: dict[str, Op | None] = {}

    def resolve(self, name: str) -> Op | None:
        """The lgopt op of a TPU-MLIR op, or the op a cast is for (name = producer + consumer + _dtype[_piece]):
        the side that runs in f32, since the cast exists because of it.  A cast to f32 feeds an op computed in
        f32 (its consumer: BM1684X's GELU, ``<MatMul>/<GELU>_f32_1``); a cast back to f16 converts that op's
        result (its producer, ``<GELU>/<MatMul>_f16_1``), not the next MatMul's work."""
        if name in self.op:
            return self.op[name]
        if name in self._cache:
            return self._cache[name]
        hit = self._cast_owner(name)
        if hit is None:
            base = CAST_SUFFIX.sub("", name)
            hit = next((self.op[n] for n in self.names if base.endswith(n)), None)
        self._cache[name] = hit
        return hit

    def resolved_name(self, name: str) -> str | None:
        """:meth:`resolve`'s op name (None: no lgopt op)."""
        op = self.resolve(name)
        return None if op is None else op.name

    def _cast_owner(self, name: str) -> Op | None:
        m = CAST_PIECE.search(name)
        if m is None:
            return None
        operand = cast_operands(self.net, [name])
        if not operand or operand[0] in self.net.inputs:
            return None
        if m.group(1) in ("f16", "bf16"):
            return self.net.producer.get(operand[0])
        body = name[:m.start()]
        cut = 0  # the consumer's name starts at the first "/" after the operand's tensor name
        while cut >= 0 and self.aliases.get(body[:cut]) is None:
            cut = body.find("_", cut + 1)
        start = body.find("/", cut) if cut > 0 else -1
        consumer = anchor(body[start:], self.aliases) if start > 0 else None
        return None if consumer is None else self.net.op(consumer)

    def io_cast(self, name: str) -> bool:
        """A cast of a network input or output: the plan pays those itself (``lgopt.cost.cycles.io_cast_cost``),
        so the fit of global layers leaves them out."""
        io = set(self.net.inputs) | set(self.net.outputs)
        return is_cast(name) and bool(set(cast_operands(self.net, [name])) & io)


@dataclass(frozen=True)
class MappedModels:
    """The networks of the measured models (lowered as TPU-MLIR lowers them) and each model x chip's op map."""

    nets: dict[str, Network]
    maps: dict[tuple[str, str], OpMap]


def map_models(data: Path, model_ops: pd.DataFrame, models: Iterable[str], chips: Iterable[str], dtype: str = "f16"
               ) -> MappedModels:
    """Read ``onnx/MODEL.weightless.onnx`` of each model (in ``dtype``, as measured) and map its TPU-MLIR op names.  The
    ops TPU-MLIR fuses (1x1 convolutions it merges, per-channel scales folded into a conv, ...:
    :func:`~lgopt.tpumlir.lowering.fold_like_tpu_mlir`) are one op on its timeline (the same on every chip), so
    they are one op here too."""
    chips = tuple(chips)
    nets, maps = {}, {}
    for m in models:
        net = load_model(data / "onnx" / f"{m}.weightless.onnx", dtype=dtype)
        nets[m] = fold_like_tpu_mlir(net, named_ops(net, model_ops[model_ops.model == m].name))[0]
        for c in chips:
            sub = model_ops[(model_ops.model == m) & (model_ops.chip == c)]
            if len(sub):
                maps[(m, c)] = OpMap(nets[m], sub)
    return MappedModels(nets, maps)

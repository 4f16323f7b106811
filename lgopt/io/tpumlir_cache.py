"""TPU-MLIR's own grouping as a strategy: read its ``*.layer_group_cache.json`` and score it with lgopt.

TPU-MLIR names ops ``<ONNX output name>_<OpType>`` (reference s9); lowering inserts casts named
``<operand><consumer>_f16`` / ``_f32`` that have no ONNX node.  Fused ops carry the name of their
last ONNX output, as lgopt's fused ops do, so each op name maps to the lgopt op producing that tensor.
Groups are rebuilt with TPU-MLIR's N and H slice counts and scored with lgopt's timesteps, allocator
and cost model, so a user sees side by side what their compiler chose and what lgopt finds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lgopt.errors import LgoptError
from lgopt.io.jsonio import read_json
from lgopt.model.network import Network

CAST = re.compile(r"_(f16|f32|bf16|int8|uint8|int16|int32|si8|ui8)$")


@dataclass(frozen=True)
class CacheGroup:
    locs: tuple[str, ...]
    secs: tuple[int, ...]  # n, c, d, h, w
    cost: int


@dataclass(frozen=True)
class Mapping:
    groups: tuple[tuple[tuple[str, ...], CacheGroup], ...]  # (lgopt op names, cache group)
    unmapped: tuple[str, ...]  # op names found in no lgopt op
    casts: int  # cast ops TPU-MLIR inserted (nothing to map)
    notes: tuple[str, ...] = field(default_factory=tuple)


def read_cache(path: str) -> list[CacheGroup]:
    d = read_json(path, "TPU-MLIR layer-group cache")
    groups: list[CacheGroup] = []
    try:
        subs = [v for k, v in d.items() if k.startswith("subfunc_")]
        if not subs:
            raise KeyError("subfunc_0")
        for sub in subs:
            for g in sub["GroupLayer"]:
                groups.append(CacheGroup(tuple(g["locs"]), tuple(int(x) for x in g["shape_secs"]),
                                         int(g.get("group_cost", 0))))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise LgoptError(f"{path} is not a TPU-MLIR layer_group_cache.json (missing {e})") from None
    return groups


def map_groups(net: Network, groups: list[CacheGroup]) -> Mapping:
    by_output = {t: op for op in net.ops for t in op.outputs}
    mapped, unmapped, notes = [], [], []
    casts = 0
    seen: set[str] = set()
    for gi, g in enumerate(groups):
        ops: list[str] = []
        for loc in g.locs:
            if CAST.search(loc):
                casts += 1
                continue
            name, _, _ = loc.rpartition("_")
            op = by_output.get(name)
            if op is None:
                unmapped.append(loc)
            elif op.name not in ops:
                if op.name in seen:
                    notes.append(f"group {gi}: {op.name} already in an earlier group")
                    continue
                ops.append(op.name)
                seen.add(op.name)
        ops.sort(key=net.op_index.__getitem__)
        if ops:
            mapped.append((tuple(ops), g))
    return Mapping(tuple(mapped), tuple(unmapped), casts, tuple(notes))

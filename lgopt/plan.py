"""The plan: what lgopt emits and what the verifier checks (``docs/plan-format.md``).

A plan is plain data.  It records every decision (groups, slice counts,
timestep table, buffer lifetimes and offsets) and enough of the problem
(model digest, chip parameters, rule settings) for :mod:`lgopt.verify` to
re-check it without trusting whoever wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from .errors import LgoptError
from .jsonio import read_json, write_json

FORMAT = "lgopt-plan"
VERSION = 1

BUFFER_KINDS = ("activation", "weight", "scratch")
BANK_RULES = ("off", "soft", "hard")


@dataclass(frozen=True)
class Transfer:
    """A GDMA move in a timestep row.

    ``stage`` says which slice it serves relative to the slice whose ops run in
    the row: 0 = the next slice (prefetch), 1 = the same slice, 2 = the previous
    slice (write-back).  ``name`` is a tensor, or the op whose weights move.
    """

    name: str
    kind: str = "activation"  # activation | weight
    stage: int = 1


@dataclass(frozen=True)
class Row:
    ops: tuple[str, ...] = ()
    loads: tuple[Transfer, ...] = ()
    stores: tuple[Transfer, ...] = ()


@dataclass(frozen=True)
class Buffer:
    """An LMEM block, per lane.  Lives over rows ``start..end`` of the table,
    wrapping past the last row when ``start > end``; ``resident`` means every row
    of every slice (weights of a sliced group)."""

    id: int
    kind: str  # activation | weight | scratch
    name: str  # tensor name, or the op owning the weights / scratch
    size: int
    start: int
    end: int
    resident: bool = False
    offset: int = -1  # -1 until allocated

    def rows(self, num_rows: int) -> set[int]:
        if self.resident:
            return set(range(num_rows))
        if self.start <= self.end:
            return set(range(self.start, self.end + 1))
        return set(range(self.start, num_rows)) | set(range(0, self.end + 1))


Window4 = tuple[int, int, int, int]  # n0, n1, h0, h1


@dataclass(frozen=True)
class GroupPlan:
    ops: tuple[str, ...]
    n_slices: int
    h_slices: int
    rows: tuple[Row, ...]
    preloads: tuple[str, ...]  # ops whose weights are loaded once before the slice loop
    buffers: tuple[Buffer, ...]
    windows: Mapping[str, tuple[Window4, ...]]  # tensor -> per-slice window
    stores: Mapping[str, tuple[Window4, ...]]  # group output -> per-slice stored part
    cost: Mapping[str, Any] = field(default_factory=dict)
    # tensors handed over in LMEM between this group and the previous / next step (both groups):
    # whole-tensor resident buffers at the same offset in both, no store-and-reload through GMEM
    kept_in: tuple[str, ...] = ()
    kept_out: tuple[str, ...] = ()

    @property
    def num_slices(self) -> int:
        return self.n_slices * self.h_slices

    def with_offsets(self, offsets: Mapping[int, int]) -> "GroupPlan":
        return replace(self, buffers=tuple(replace(b, offset=offsets.get(b.id, b.offset)) for b in self.buffers))


@dataclass(frozen=True)
class Plan:
    model: str
    model_digest: str
    chip: Mapping[str, Any]
    strategy: str
    steps: tuple[tuple[str, Any], ...]  # ("group", index) or ("global", op name), in execution order
    groups: tuple[GroupPlan, ...]
    status: str = "feasible"
    h_ratio: float = 0.5
    bank_rule: str = "soft"
    cost: Mapping[str, Any] = field(default_factory=dict)
    solver: Mapping[str, Any] = field(default_factory=dict)

    @property
    def global_layers(self) -> tuple[str, ...]:
        return tuple(v for k, v in self.steps if k == "global")


def _transfer(t: Transfer) -> dict[str, Any]:
    return {"name": t.name, "kind": t.kind, "stage": t.stage}


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": plan.model,
        "model_digest": plan.model_digest,
        "strategy": plan.strategy,
        "status": plan.status,
        "settings": {"h_ratio": plan.h_ratio, "bank_rule": plan.bank_rule},
        "chip": dict(plan.chip),
        "steps": [{"group": v} if k == "group" else {"global": v} for k, v in plan.steps],
        "groups": [
            {
                "ops": list(g.ops),
                "n_slices": g.n_slices,
                "h_slices": g.h_slices,
                "timesteps": [{"ops": list(r.ops), "loads": [_transfer(t) for t in r.loads],
                               "stores": [_transfer(t) for t in r.stores]} for r in g.rows],
                "preloads": list(g.preloads),
                "buffers": [{"id": b.id, "kind": b.kind, "name": b.name, "size": b.size, "start": b.start,
                             "end": b.end, "resident": b.resident, "offset": b.offset} for b in g.buffers],
                "windows": {t: [list(w) for w in ws] for t, ws in g.windows.items()},
                "stores": {t: [list(w) for w in ws] for t, ws in g.stores.items()},
                "cost": dict(g.cost),
                **({"kept_in": list(g.kept_in)} if g.kept_in else {}),
                **({"kept_out": list(g.kept_out)} if g.kept_out else {}),
            }
            for g in plan.groups
        ],
        "cost": dict(plan.cost),
        "solver": dict(plan.solver),
    }


def _get(d: Mapping[str, Any], key: str, where: str, typ: type | tuple[type, ...] | None = None) -> Any:
    if not isinstance(d, Mapping) or key not in d:
        raise LgoptError(f"{where}: missing field {key!r}")
    v = d[key]
    if typ is not None and (not isinstance(v, typ) or (typ is int and isinstance(v, bool))):
        raise LgoptError(f"{where}: field {key!r} has the wrong type ({type(v).__name__})")
    return v


def _windows(d: Any, where: str) -> dict[str, tuple[Window4, ...]]:
    if not isinstance(d, Mapping):
        raise LgoptError(f"{where}: windows must be an object")
    out: dict[str, tuple[Window4, ...]] = {}
    for t, ws in d.items():
        if not isinstance(ws, list) or not all(isinstance(w, list) and len(w) == 4 for w in ws):
            raise LgoptError(f"{where}: windows of {t} must be lists of [n0, n1, h0, h1]")
        out[t] = tuple(tuple(int(x) for x in w) for w in ws)  # type: ignore[misc]
    return out


def _transfers(items: Any, where: str) -> tuple[Transfer, ...]:
    if not isinstance(items, list):
        raise LgoptError(f"{where}: expected a list of transfers")
    return tuple(Transfer(str(_get(t, "name", where)), str(t.get("kind", "activation")), int(t.get("stage", 1)))
                 for t in items)


def plan_from_dict(d: Mapping[str, Any], where: str = "plan") -> Plan:
    if not isinstance(d, Mapping) or d.get("format") != FORMAT:
        raise LgoptError(f"{where}: not an lgopt plan (expected \"format\": \"{FORMAT}\")")
    if d.get("version") != VERSION:
        raise LgoptError(f"{where}: plan format version {d.get('version')!r} is not supported (this lgopt reads {VERSION})")
    groups = []
    for gi, g in enumerate(_get(d, "groups", where, list)):
        w = f"{where}: group {gi}"
        rows = tuple(Row(tuple(_get(r, "ops", w, list)), _transfers(r.get("loads", []), w),
                         _transfers(r.get("stores", []), w)) for r in _get(g, "timesteps", w, list))
        bufs = tuple(Buffer(int(_get(b, "id", w, int)), str(_get(b, "kind", w, str)), str(_get(b, "name", w, str)),
                            int(_get(b, "size", w, int)), int(_get(b, "start", w, int)), int(_get(b, "end", w, int)),
                            bool(b.get("resident", False)), int(b.get("offset", -1)))
                     for b in _get(g, "buffers", w, list))
        groups.append(GroupPlan(tuple(_get(g, "ops", w, list)), int(_get(g, "n_slices", w, int)),
                                int(_get(g, "h_slices", w, int)), rows, tuple(g.get("preloads", [])), bufs,
                                _windows(_get(g, "windows", w), w), _windows(_get(g, "stores", w), w),
                                g.get("cost", {}), tuple(str(t) for t in g.get("kept_in", [])),
                                tuple(str(t) for t in g.get("kept_out", []))))
    steps = []
    for s in _get(d, "steps", where, list):
        if isinstance(s, Mapping) and "group" in s and isinstance(s["group"], int):
            steps.append(("group", s["group"]))
        elif isinstance(s, Mapping) and "global" in s:
            steps.append(("global", str(s["global"])))
        else:
            raise LgoptError(f"{where}: bad step {s!r}")
    settings = d.get("settings", {})
    return Plan(str(_get(d, "model", where)), str(d.get("model_digest", "")), _get(d, "chip", where, dict),
                str(d.get("strategy", "?")), tuple(steps), tuple(groups), str(d.get("status", "feasible")),
                float(settings.get("h_ratio", 0.5)), str(settings.get("bank_rule", "soft")), d.get("cost", {}),
                d.get("solver", {}))


def save_plan(plan: Plan, path: str | Path) -> None:
    write_json(path, plan_to_dict(plan))


def load_plan(path: str | Path) -> Plan:
    return plan_from_dict(read_json(path, "plan"), str(path))

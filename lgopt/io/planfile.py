"""The plan file (``docs/plan-format.md``): a :class:`~lgopt.model.plan.Plan` to and from JSON.

Reading never trusts the file: every field is type-checked and a bad one is one :class:`LgoptError` line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, cast, get_args

from lgopt.errors import LgoptError
from lgopt.io.jsonio import read_json, write_json
from lgopt.model.plan import BankRule, Buffer, Cols, GroupPlan, Plan, PlanStatus, Row, Transfer, Window4

FORMAT = "lgopt-plan"
VERSION = 1


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
                **({"w_slices": g.w_slices,
                    "w_windows": {t: [list(w) for w in ws] for t, ws in g.w_windows.items()},
                    "w_stores": {t: [list(w) for w in ws] for t, ws in g.w_stores.items()}}
                   if g.w_slices > 1 or g.w_windows or g.w_stores else {}),
                **({"weight_cols": {o: [list(c) for c in cs] for o, cs in g.weight_cols.items()}}
                   if g.weight_cols else {}),
                **({"f32_in": list(g.f32_in)} if g.f32_in else {}),
                **({"f32_out": list(g.f32_out)} if g.f32_out else {}),
                **({"c_slices": g.c_slices,
                    "c_windows": {t: [list(c) for c in cs] for t, cs in g.c_windows.items()},
                    "c_stores": {t: [list(c) for c in cs] for t, cs in g.c_stores.items()}}
                   if g.c_slices > 1 or g.c_windows or g.c_stores else {}),
                **({"core_slices": [list(c) for c in g.core_slices]} if g.core_slices else {}),
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


def _int(v: Any, what: str, where: str) -> int:
    """An integer field: a JSON integer, not a string, a float or a boolean."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise LgoptError(f"{where}: {what} must be an integer, got {v!r}")
    return v


def _names(v: Any, what: str, where: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise LgoptError(f"{where}: {what} must be a list of names")
    return tuple(v)


def _windows(d: Any, where: str) -> dict[str, tuple[Window4, ...]]:
    return _bounds(d, where, "windows", "[n0, n1, h0, h1]")  # type: ignore[return-value]


def _cols(d: Any, where: str, what: str) -> dict[str, tuple[Cols, ...]]:
    return _bounds(d, where, what, "[w0, w1]")  # type: ignore[return-value]


def _core_slices(v: Any, where: str) -> tuple[tuple[int, int], ...]:
    """The slices [start, stop) each busy core runs."""
    if not isinstance(v, list) or not all(isinstance(c, list) and len(c) == 2 for c in v):
        raise LgoptError(f"{where}: core_slices must be a list of [start, stop]")
    return tuple((_int(a, "a core's first slice", where), _int(b, "a core's slice stop", where)) for a, b in v)


def _bounds(d: Any, where: str, what: str, form: str) -> dict[str, tuple[tuple[int, ...], ...]]:
    """Per-tensor lists of integer bounds of the length ``form`` names."""
    size = form.count(",") + 1
    if not isinstance(d, Mapping):
        raise LgoptError(f"{where}: {what} must be an object")
    out: dict[str, tuple[tuple[int, ...], ...]] = {}
    for t, ws in d.items():
        if not isinstance(ws, list) or not all(isinstance(w, list) and len(w) == size for w in ws):
            raise LgoptError(f"{where}: {what} of {t} must be lists of {form}")
        out[t] = tuple(tuple(_int(x, f"a window bound of {t}", where) for x in w) for w in ws)
    return out


def _transfers(items: Any, where: str) -> tuple[Transfer, ...]:
    if not isinstance(items, list):
        raise LgoptError(f"{where}: expected a list of transfers")
    return tuple(Transfer(str(_get(t, "name", where, str)), str(t.get("kind", "activation")),
                          _int(t.get("stage", 1), "a transfer's stage", where))
                 for t in items)


def _costs(d: Any, where: str) -> dict[str, Any]:
    """A cost record: numbers by name (the verifier recomputes them)."""
    if not isinstance(d, Mapping) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                             for v in d.values()):
        raise LgoptError(f"{where}: cost must be an object of numbers")
    return dict(d)


def plan_from_dict(d: Mapping[str, Any], where: str = "plan") -> Plan:
    if not isinstance(d, Mapping) or d.get("format") != FORMAT:
        raise LgoptError(f"{where}: not an lgopt plan (expected \"format\": \"{FORMAT}\")")
    if d.get("version") != VERSION:
        raise LgoptError(f"{where}: plan format version {d.get('version')!r} is not supported "
                         f"(this lgopt reads {VERSION})")
    groups = []
    for gi, g in enumerate(_get(d, "groups", where, list)):
        w = f"{where}: group {gi}"
        if not isinstance(g, Mapping):
            raise LgoptError(f"{w}: must be an object")
        rows = tuple(Row(_names(_get(r, "ops", w, list), "a timestep's ops", w), _transfers(r.get("loads", []), w),
                         _transfers(r.get("stores", []), w)) for r in _get(g, "timesteps", w, list))
        bufs = tuple(Buffer(int(_get(b, "id", w, int)), str(_get(b, "kind", w, str)), str(_get(b, "name", w, str)),
                            int(_get(b, "size", w, int)), int(_get(b, "start", w, int)), int(_get(b, "end", w, int)),
                            bool(_get(b, "resident", w, bool)) if "resident" in b else False,
                            _int(b.get("offset", -1), f"buffer {b.get('id')}'s offset", w))
                     for b in _get(g, "buffers", w, list))
        groups.append(GroupPlan(_names(_get(g, "ops", w, list), "ops", w), int(_get(g, "n_slices", w, int)),
                                int(_get(g, "h_slices", w, int)), rows, _names(g.get("preloads", []), "preloads", w),
                                bufs, _windows(_get(g, "windows", w), w), _windows(_get(g, "stores", w), w),
                                cast(Any, _costs(g.get("cost", {}), w)), _names(g.get("kept_in", []), "kept_in", w),
                                _names(g.get("kept_out", []), "kept_out", w),
                                _int(g.get("w_slices", 1), "w_slices", w),
                                _cols(g.get("w_windows", {}), w, "w_windows"),
                                _cols(g.get("w_stores", {}), w, "w_stores"),
                                _cols(g.get("weight_cols", {}), w, "weight_cols"),
                                _names(g.get("f32_in", []), "f32_in", w),
                                _names(g.get("f32_out", []), "f32_out", w),
                                _int(g.get("c_slices", 1), "c_slices", w),
                                _cols(g.get("c_windows", {}), w, "c_windows"),
                                _cols(g.get("c_stores", {}), w, "c_stores"),
                                _core_slices(g.get("core_slices", []), w)))
    steps: list[tuple[str, Any]] = []
    for s in _get(d, "steps", where, list):
        if isinstance(s, Mapping) and "group" in s and isinstance(s["group"], int):
            steps.append(("group", s["group"]))
        elif isinstance(s, Mapping) and "global" in s:
            steps.append(("global", str(s["global"])))
        else:
            raise LgoptError(f"{where}: bad step {s!r}")
    settings = d.get("settings", {})
    status = str(d.get("status", "feasible"))
    if status not in get_args(PlanStatus):
        raise LgoptError(f"{where}: unknown plan status {status!r} (one of {', '.join(get_args(PlanStatus))})")
    # the bank rule is checked by the verifier (it names the rule a plan claims to follow)
    bank_rule = cast(BankRule, str(settings.get("bank_rule", "soft")))
    if not isinstance(settings, Mapping) or not isinstance(d.get("solver", {}), Mapping):
        raise LgoptError(f"{where}: settings and solver must be objects")
    return Plan(str(_get(d, "model", where)), str(d.get("model_digest", "")), _get(d, "chip", where, dict),
                str(d.get("strategy", "?")), tuple(steps), tuple(groups), cast(PlanStatus, status),
                _h_ratio(settings.get("h_ratio", 0.5), where), bank_rule, cast(Any, _costs(d.get("cost", {}), where)),
                d.get("solver", {}))


def _h_ratio(v: Any, where: str) -> float | None:
    """The plan's slicing rule: a ratio, or null for TPU-MLIR's rule (no duplication limit)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise LgoptError(f"{where}: settings.h_ratio must be a number or null, got {v!r}")
    return float(v)


def save_plan(plan: Plan, path: str | Path) -> None:
    write_json(path, plan_to_dict(plan))


def load_plan(path: str | Path) -> Plan:
    return plan_from_dict(read_json(path, "plan"), str(path))

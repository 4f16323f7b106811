"""Plan exporters by name: ``lgopt export PLAN --format NAME`` and the benchmarks look them up here.

An exporter is ``function(plan, net, **options) -> str | dict``; a dict is written as JSON.  Registered:

* ``lgopt-plan``: the plan file itself (``docs/plan-format.md``);
* ``tpu-mlir``: TPU-MLIR 1.30.2's ``layer_group_cache.json`` (:mod:`lgopt.io.tpumlir_export`); options
  ``reference`` (a cache TPU-MLIR wrote for the same model and chip), ``base_groups``, ``onnx_model``.

>>> sorted(names())
['lgopt-plan', 'tpu-mlir']
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from lgopt.errors import LgoptError
from lgopt.model.network import Network
from lgopt.model.plan import Plan

ExportFn = Callable[..., "str | dict[str, Any]"]


@dataclass(frozen=True)
class Exporter:
    name: str
    fn: ExportFn
    suffix: str  # usual file name ending
    help: str
    options: tuple[str, ...] = ()  # keyword options it accepts


_REGISTRY: dict[str, Exporter] = {}


def register(name: str, fn: ExportFn, suffix: str, help: str, options: tuple[str, ...] = ()) -> None:
    _REGISTRY[name] = Exporter(name, fn, suffix, help, options)


def names() -> list[str]:
    return list(_REGISTRY)


def get(name: str) -> Exporter:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise LgoptError(f"unknown export format {name!r}: one of {', '.join(_REGISTRY)}") from None


def export(name: str, plan: Plan, net: Network, **options: Any) -> str | dict[str, Any]:
    ex = get(name)
    bad = [k for k, v in options.items() if v is not None and k not in ex.options]
    if bad:
        raise LgoptError(f"export format {name} takes no option {bad[0]!r}")
    return ex.fn(plan, net, **{k: v for k, v in options.items() if k in ex.options})


def write(result: str | dict[str, Any], path: str | Path) -> None:
    text = result if isinstance(result, str) else json.dumps(result, indent=1) + "\n"
    try:
        Path(path).write_text(text)
    except OSError as e:
        raise LgoptError(f"cannot write {path}: {e.strerror}") from None


def _lgopt_plan(plan: Plan, net: Network) -> dict[str, Any]:
    from lgopt.io.planfile import plan_to_dict

    return plan_to_dict(plan)


def _tpu_mlir(plan: Plan, net: Network, reference: Any = None, base_groups: Any = None,
              onnx_model: Any = None, groups_only: Any = None, edge_casts: Any = None) -> dict[str, Any]:
    from lgopt.io.tpumlir_export import export_tpumlir

    return export_tpumlir(plan, net, reference, base_groups=base_groups, onnx_model=onnx_model,
                          groups_only=bool(groups_only), edge_casts=edge_casts)


register("lgopt-plan", _lgopt_plan, ".plan.json", "the plan JSON (docs/plan-format.md)")
register("tpu-mlir", _tpu_mlir, ".layer_group_cache.json",
         "TPU-MLIR 1.30.2 layer_group_cache.json for LOAD_TPU_GROUP=1 model_deploy",
         ("reference", "base_groups", "onnx_model", "groups_only", "edge_casts"))

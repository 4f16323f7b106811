"""Plan exporters by name: ``lgopt export PLAN --format NAME`` and the benchmarks look them up here.

An exporter is ``function(plan, net, **options) -> str | dict``; a dict is written as JSON.  Registered:

* ``lgopt-plan``: the plan file itself (``docs/plan-format.md``);
* ``tpu-mlir``: TPU-MLIR 1.30.2's ``layer_group_cache.json`` (:mod:`lgopt.tpumlir.export`, registered by the
  TPU-MLIR plugin, :mod:`lgopt.tpumlir.plugin`); options ``reference`` (a cache TPU-MLIR wrote for the same
  model and chip), ``base_groups``, ``onnx_model``.

Another package adds a format with :func:`register` from a plugin (:mod:`lgopt.plugins`).

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
from lgopt.plugins import load_plugins

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
    load_plugins()
    return list(_REGISTRY)


def get(name: str) -> Exporter:
    load_plugins()
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


register("lgopt-plan", _lgopt_plan, ".plan.json", "the plan JSON (docs/plan-format.md)")

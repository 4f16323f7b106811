"""TPU-MLIR as lgopt's plugin (:mod:`lgopt.plugins`): the ``tpu-mlir`` strategy (its own grouping, read from
its layer-group cache and built by lgopt) and the ``tpu-mlir`` exporter (a cache it compiles)."""

from __future__ import annotations

from typing import Any

from lgopt.hw.chip import Chip
from lgopt.io.exporters import register as register_exporter
from lgopt.model.network import Network
from lgopt.model.plan import Plan
from lgopt.strategies.registry import StrategyOptions, StrategySpec, register
from lgopt.tpumlir.export import export_tpumlir
from lgopt.tpumlir.grouping import score


def _tpu_mlir(net: Network, chip: Chip, o: StrategyOptions) -> tuple[Plan, dict[str, Any]]:
    return score(net, chip, str(o.arg), o.search, exact=o.exact)


def _export(plan: Plan, net: Network, reference: Any = None, base_groups: Any = None,
            onnx_model: Any = None, groups_only: Any = None, edge_casts: Any = None) -> dict[str, Any]:
    return export_tpumlir(plan, net, reference, base_groups=base_groups, onnx_model=onnx_model,
                          groups_only=bool(groups_only), edge_casts=edge_casts)


register(StrategySpec("tpu-mlir", _tpu_mlir, "TPU-MLIR's own grouping, read from its layer-group cache and built by "
                                             "lgopt", arg="CACHE.json", searches=False))
register_exporter("tpu-mlir", _export, ".layer_group_cache.json",
                  "TPU-MLIR 1.30.2 layer_group_cache.json for LOAD_TPU_GROUP=1 model_deploy",
                  ("reference", "base_groups", "onnx_model", "groups_only", "edge_casts"))

"""TPU-MLIR 1.30.2's rules that lgopt's own do not have, as the search's :class:`CompilerRules`: groups its
time-step pass cannot slice (:mod:`lgopt.tpumlir.forks`) and transformer groups cut into more row sections
than it allows.  A search in the compiler's space asks them before it packs a group TPU-MLIR has not been
seen to compile (:func:`lgopt.strategies.settings.packing`); its groups hold their weights whole
(:attr:`lgopt.strategies.settings.SearchSettings.reload_columns`), as TPU-MLIR's do.
"""

from __future__ import annotations

from dataclasses import dataclass

from lgopt.hw.chip import Chip
from lgopt.model.network import Network
from lgopt.model.plan import GroupPlan
from lgopt.tpumlir.cache import rows_as_channels_group
from lgopt.tpumlir.forks import tpumlir_fork


@dataclass(frozen=True)
class TpuMlirRules:
    """The :class:`lgopt.strategies.settings.CompilerRules` of TPU-MLIR 1.30.2.

    >>> from lgopt.hw.chip import get_chip
    >>> from lgopt.io.problem import load_problem
    >>> from lgopt.group.build import schedule
    >>> net, chip = load_problem("problems/resnet18.json"), get_chip("bm1684x")
    >>> TpuMlirRules().refuses(chip, net, schedule(net, chip, [op.name for op in net.ops[:3]], 1, 1))
    ''
    """

    def refuses(self, chip: Chip, net: Network, g: GroupPlan) -> str:
        fork = tpumlir_fork(chip, net, g.ops, g.h_slices)
        if fork:
            return fork
        if rows_over_lanes(chip, net, g):
            return (f"its rows are cut into {g.h_slices} sections, more than TPU-MLIR's ceil(rows / "
                    f"{chip.npu_num} lanes) for a transformer group")
        return ""


TPU_MLIR_RULES = TpuMlirRules()

def rows_over_lanes(chip: Chip, net: Network, g: GroupPlan) -> bool:
    """Whether a transformer group (its rows TPU-MLIR's channels: :func:`lgopt.tpumlir.cache.rows_as_channels_group`)
    cuts its rows into more slices than TPU-MLIR allows there: its rows are channels, at most ``ceil(M /
    lanes)`` sections (``get_group_max_secs``); more fail to allocate whatever the LMEM."""
    if g.h_slices <= 1 or not rows_as_channels_group(net, g.ops):
        return False
    rows = min(net.tensor(t).h for o in g.ops for t in net.op(o).outputs)
    return g.h_slices > -(-rows // chip.npu_num)

"""TPU-MLIR's own groups, each sliced anew for the cores: a start the search in its space can miss.

On several cores TPU-MLIR gives a group's slices to the cores in contiguous chunks, and a group of one slice runs
on core 0 alone; so how many slices a group has decides how many cores it keeps busy.  Its own grouping does not
choose them for the cores: MobileNetV3-Small's stem on BM1690 (INT8, 8 cores) is cut in 2 H slices by opt2
(92,120 cycles); cut in 8, one a core, the same grouping measures 72,673 (0.79 of opt2), where lgopt's CP-SAT
search of TPU-MLIR's space, 90 s on 2 workers, stopped at a plan predicted 6 % slower than that (its gap 22 %).
:func:`resliced` tries each group of the reference at the counts that share it over the cores, one group at a
time, and keeps what the cost model prices lower, every candidate built by lgopt's reader from a cache TPU-MLIR
can load, so it is a grouping of the compiler's space by construction.
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lgopt.errors import LgoptError
from lgopt.hw.chip import Chip
from lgopt.model.network import Network
from lgopt.model.plan import Plan
from lgopt.strategies.settings import SearchSettings
from lgopt.tpumlir.grouping import score

H = 3  # shape_secs: n, c, d, h, w


def slice_counts(current: int, cores: int) -> list[int]:
    """The H slice counts to try for a group cut in ``current``: one, the cores, twice and four times them
    (each core a chunk of equal slices), without ``current`` itself.

    >>> slice_counts(2, 8)
    [1, 8, 16, 32]
    >>> slice_counts(1, 2)
    [2, 4, 8]
    """
    return [h for h in (1, cores, 2 * cores, 4 * cores) if h != current]


def _groups(cache: dict[str, Any]) -> Iterator[tuple[str, int]]:
    """(subfunction, index) of every forced group of ``cache`` whose slices are cut along N and H only."""
    for key, sub in cache.items():
        if key.startswith("subfunc_"):
            for i, g in enumerate(sub.get("GroupLayer", ())):
                secs = g.get("shape_secs", ())
                if len(secs) == 5 and any(secs) and secs[1] == secs[2] == secs[4] == 1:
                    yield key, i


def _priced(net: Network, chip: Chip, cache: dict[str, Any], st: SearchSettings, tmp: Path) -> Plan | None:
    """``cache`` built by lgopt's reader and priced, or None when lgopt cannot build it."""
    path = tmp / "candidate.layer_group_cache.json"
    path.write_text(json.dumps(cache))
    try:
        return score(net, chip, str(path), st)[0]
    except LgoptError:
        return None


def resliced(net: Network, chip: Chip, reference: Path, st: SearchSettings, own: Plan) -> tuple[Plan, int]:
    """The reference grouping (``own``: as lgopt's reader builds it) with each group's H slice count the cheapest
    of :func:`slice_counts` by the cost model, groups tried in order, a change kept only when the whole plan
    prices lower; and how many groups changed.  Only counts that share the group over ``chip.used_cores``
    are tried, so on one core it returns ``own``."""
    if chip.used_cores < 2:
        return own, 0
    first: dict[str, Any] = json.loads(reference.read_text())
    best, best_cache = own, first
    with tempfile.TemporaryDirectory(prefix="lgopt-reslice-") as tmp:
        for key, i in list(_groups(first)):
            for h in slice_counts(first[key]["GroupLayer"][i]["shape_secs"][H], chip.used_cores):
                trial = copy.deepcopy(best_cache)
                trial[key]["GroupLayer"][i]["shape_secs"][H] = h
                plan = _priced(net, chip, trial, st, Path(tmp))
                if plan is not None and plan.cost["cycles"] < best.cost["cycles"]:
                    best, best_cache = plan, trial
    changed = sum(best_cache[k]["GroupLayer"][i]["shape_secs"] != first[k]["GroupLayer"][i]["shape_secs"]
                  for k, i in _groups(first))
    return best, changed

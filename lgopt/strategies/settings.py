"""Settings every strategy shares, and the progress callback type.

``SearchSettings`` holds the slicing and allocation rules a plan must obey (the h/2 ratio, the bank
rule) and the greedy baseline's limits; the CP-SAT strategy adds its own in
:class:`lgopt.strategies.cpsat.optimise.CpsatSettings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from lgopt.group.slicing import DEFAULT_H_RATIO
from lgopt.model.network import Network
from lgopt.model.plan import BankRule, Plan

Progress = Callable[[str], None]
"""Called with a one-line status message while a strategy runs (the CLI draws it on stderr)."""
Incumbent = Callable[[Plan], None]
"""Called with each complete plan a long-running strategy finds that is better than the last it reported
(the CLI verifies it and writes it at once, so an interrupted run keeps it)."""


@dataclass(frozen=True)
class SearchSettings:
    """The rules every strategy's plan obeys (``docs/extending.md`` lists them with their defaults)."""

    h_ratio: float | None = DEFAULT_H_RATIO  # None: TPU-MLIR's slicing rule (lgopt.group.slicing)
    bank_rule: BankRule = "soft"
    max_h_slices: int = 64
    max_group_ops: int = 256  # longest run a group may have (bounds evaluation cost)
    max_w_slices: int = 256  # most column (W) slices of a group with a column-sliced MatMul (lgopt.group.build)
    max_c_slices: int = 64  # most channel (heads) slices of a group of channel-local ops; 1: none
    # runs of ops a group must stay within (a compiler's base groups, in its op order); None: any run of local ops
    runs: tuple[tuple[str, ...], ...] | None = None


def group_runs(net: Network, st: SearchSettings) -> list[tuple[int, int]]:
    """Maximal ``[first, last]`` index ranges of consecutive local ops a group may span: the network's runs of
    local ops, cut where ``st.runs`` says (an op in none of them runs as a global layer).

    >>> from lgopt.model.network import Network
    >>> group_runs(Network("empty", {}, (), (), ()), SearchSettings())
    []
    """
    allowed: dict[str, int] | None = None
    if st.runs is not None:
        allowed = {o: k for k, run in enumerate(st.runs) for o in run}
    out: list[tuple[int, int]] = []
    start, key = -1, None
    for k, op in enumerate(net.ops):
        mine = (allowed.get(op.name) if allowed is not None else 0) if op.local else None
        if mine is not None and start >= 0 and mine == key:
            continue
        if start >= 0:
            out.append((start, k - 1))
        start, key = (k, mine) if mine is not None else (-1, None)
    if start >= 0:
        out.append((start, len(net.ops) - 1))
    return out

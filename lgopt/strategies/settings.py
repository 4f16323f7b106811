"""Settings every strategy shares, and the progress callback type.

``SearchSettings`` holds the slicing and allocation rules a plan must obey (the h/2 ratio, the bank
rule) and the greedy baseline's limits; the CP-SAT strategy adds its own in
:class:`lgopt.strategies.cpsat.optimise.CpsatSettings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from lgopt.group.slicing import DEFAULT_H_RATIO
from lgopt.model.plan import BankRule

Progress = Callable[[str], None]
"""Called with a one-line status message while a strategy runs (the CLI draws it on stderr)."""


@dataclass(frozen=True)
class SearchSettings:
    h_ratio: float = DEFAULT_H_RATIO
    bank_rule: BankRule = "soft"
    max_h_slices: int = 64
    max_group_ops: int = 256  # longest run the greedy will try to extend (bounds evaluation cost)

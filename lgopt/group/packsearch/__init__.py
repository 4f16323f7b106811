"""An exact static allocator: offsets for buffers whose lifetimes are fixed, or a proof that none exist.

In the style of MiniMalloc (Moffitt, ASPLOS 2023), written for lgopt's buffers (alignment, pinned offsets,
hard bank pairs, wrap-around lifetimes), with each part on its own:

* :mod:`~lgopt.group.packsearch.problem`: the vocabulary (a buffer, a problem, a solution);
* :mod:`~lgopt.group.packsearch.sweep`: cross sections, overlaps and cuts, as arrays;
* :mod:`~lgopt.group.packsearch.core`: the compiled depth-first search over canonical packings;
* :mod:`~lgopt.group.packsearch.solver`: restarts over static orders, budgets, the lowest height;
* :mod:`~lgopt.group.packsearch.validate`: an independent check that reads only problem and offsets.

The package itself exports the vocabulary and the validator only: the solver brings in the compiled
search (numba, and a one-time compilation cached on disk), which lgopt loads only when a packing needs it
(``from lgopt.group.packsearch.solver import solve``).
"""

from lgopt.group.packsearch.problem import BankRule, PackItem, PackProblem, Solution, Span
from lgopt.group.packsearch.validate import validate

__all__ = ["BankRule", "PackItem", "PackProblem", "Solution", "Span", "validate"]

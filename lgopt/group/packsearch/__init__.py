"""An exact static allocator: offsets for buffers whose lifetimes are fixed, or a proof that none exist.

In the style of MiniMalloc (Moffitt, ASPLOS 2023), written for lgopt's buffers (alignment, pinned offsets,
hard bank pairs, wrap-around lifetimes), with each part on its own:

* :mod:`~lgopt.group.packsearch.problem`: the vocabulary (a buffer, a problem, a solution);
* :mod:`~lgopt.group.packsearch.sweep`: cross sections, overlaps and cuts, as arrays;
* :mod:`~lgopt.group.packsearch.core`: the compiled depth-first search over canonical packings;
* :mod:`~lgopt.group.packsearch.solver`: restarts over static orders, budgets, the lowest height;
* :mod:`~lgopt.group.packsearch.validate`: an independent check that reads only problem and offsets.
"""

from lgopt.group.packsearch.problem import BankRule, PackItem, PackProblem, Solution, Span
from lgopt.group.packsearch.solver import MinHeightResult, SearchResult, lower_height, minimize_height, solve
from lgopt.group.packsearch.validate import validate

__all__ = ["BankRule", "MinHeightResult", "PackItem", "PackProblem", "SearchResult", "Solution", "Span",
           "lower_height", "minimize_height", "solve", "validate"]

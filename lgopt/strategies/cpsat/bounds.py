"""Lower bounds the decomposed search's optimality proof rests on.

Each is a fact about :func:`lgopt.cost.pipeline.group_cost` (the analytic cost model): a cost no choice
inside its scope can beat.  When the cost model changes, these are what must be proved again; the tests
hold each against every table of sampled intervals (``tests/test_bounds.py``).

* :func:`fluid_bound`, :func:`whole_load_bound`: the best weight load rows of one unsliced table,
  relaxed two different ways;
* :func:`lgopt.strategies.cpsat.interval_bound.interval_lower_bound`: the best slicing of a candidate, from
  per-op figures alone (its own module: it reads the candidate space, which uses the bounds here).
"""

from __future__ import annotations

from typing import Sequence


def fluid_bound(base_cycles: int, slack: Sequence[int], weights: Sequence[tuple[int, int]]) -> int:
    """Cycles of the best load choice if DMA could be split freely and LMEM were unlimited.

    ``base_cycles`` is the table without weights; ``slack[r]`` the TIU cycles of
    row ``r`` not already covered by GDMA; ``weights`` are (use row, DMA cycles).
    A weight's DMA hides only under slack of rows before its use; what does not
    hide adds to the total one for one.  The most that can hide is a max-flow
    whose neighbourhoods are nested prefixes of the rows, so its min cut is a
    prefix: ``min_k (slack of rows < k + DMA of weights used after k)``.
    """
    total = sum(c for _, c in weights)
    if not weights:
        return base_cycles
    prefix = [0]
    for s in slack:
        prefix.append(prefix[-1] + max(0, s))
    due = sorted(weights)
    best = total
    j = 0
    later = total  # DMA of weights used after row k
    for k in range(len(slack) + 1):
        while j < len(due) and due[j][0] <= k:
            later -= due[j][1]
            j += 1
        best = min(best, prefix[k] + later)
    return base_cycles + total - best


def whole_load_bound(tiu: Sequence[int], weights: Sequence[tuple[int, int]]) -> int:
    """Cycles of the best load choice if every row could hide a whole weight, one weight per row.

    ``tiu[r]`` is the compute of row ``r`` (an upper bound on its spare cycles);
    ``weights`` are (use row, DMA cycles).  A weight loads in one row, so at
    best it hides under the largest compute before its use and the rest shows:
    ``sum tiu + sum (c - max tiu before use)+``.  Where the fluid bound lets a
    74k-cycle weight hide in slivers under four 18k-cycle rows, this one does
    not: it is the cheap form of :func:`exposure_cut`.
    """
    best_before = [0]
    for t in tiu:
        best_before.append(max(best_before[-1], t))
    return sum(tiu) + sum(max(0, c - best_before[u]) for u, c in weights)

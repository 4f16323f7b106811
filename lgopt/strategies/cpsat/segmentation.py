"""The segmentation of a network into candidates and global layers, as a shortest path.

Boundaries ``0..n`` between ops, each in state 0 (the steps on either side meet in GMEM) or 1 (a
tensor is handed over in LMEM).  A candidate ``[i, j]`` is an edge ``i -> j+1`` that starts in state 1
only if it receives (``"in"``) and ends in state 1 only if it hands over (``"out"``); a global layer
is an edge ``k -> k+1`` in state 0::

    boundary   0     1     2     3     4
    state 0    o--g--o--g--o--g--o--g--o      g: op k as a global layer
               `-----[0, 1]----'             a candidate [0, 1] on its own
    state 1                o==[2,2]"out"     hands a tensor over at boundary 3 ...
                                 `==[3,3]"in"   ... to the candidate that receives it

Over contiguous runs the set-partitioning master is exactly this path problem, so these dynamic
programs give its optimum (the fallback when CP-SAT has no time) and price candidates.
"""

from __future__ import annotations

from lgopt.strategies.cpsat.common import Key


def state_in(key: Key) -> int:
    return int(key[2] == "in")


def state_out(key: Key) -> int:
    return int(key[2] == "out")


def paths(n_ops: int, starts: dict[int, list[Key]], cost: dict[Key, int],
           single: list[int]) -> tuple[list[list[float]], list[list[float]]]:
    """Cheapest cost to reach each op boundary from the start, and from it to the end.

    The segmentation is a path over op boundaries 0..n, each in state 0 (the
    steps meet in GMEM) or 1 (a tensor is handed over in LMEM); a candidate
    ``[i, j]`` is an edge i -> j+1 that starts in state 1 only if it receives
    (``"in"``) and ends in state 1 only if it hands over (``"out"``); a global
    layer is an edge k -> k+1 in state 0.  These distances price each candidate
    (reduced-cost fixing): one whose best completion exceeds a known plan cannot
    be in an optimal solution, so it need not be evaluated.
    """
    inf = float("inf")
    fwd = forward(n_ops, starts, cost, single)[0]
    bwd = [[inf, inf] for _ in range(n_ops + 1)]
    bwd[n_ops][0] = 0
    for p in range(n_ops - 1, -1, -1):
        here = bwd[p]
        here[0] = single[p] + bwd[p + 1][0]
        for key in starts.get(p, ()):
            c = cost.get(key)
            if c is not None:
                s = state_in(key)
                here[s] = min(here[s], c + bwd[key[1] + 1][state_out(key)])
    return fwd, bwd


Back = tuple[int, int, Key | None]  # (previous boundary, its state, the candidate taken; None: a global layer)


def forward(n_ops: int, starts: dict[int, list[Key]], cost: dict[Key, int], single: list[int]
             ) -> tuple[list[list[float]], list[list[Back | None]]]:
    """Cheapest cost to reach each (boundary, state) from the start, and the step that reaches it."""
    inf = float("inf")
    best: list[list[float]] = [[inf, inf] for _ in range(n_ops + 1)]
    back: list[list[Back | None]] = [[None, None] for _ in range(n_ops + 1)]
    best[0][0] = 0
    for p in range(n_ops):
        if best[p][0] + single[p] < best[p + 1][0]:
            best[p + 1][0] = best[p][0] + single[p]
            back[p + 1][0] = (p, 0, None)
        for key in starts.get(p, ()):
            c = cost.get(key)
            s_in, s_out = state_in(key), state_out(key)
            if c is not None and best[p][s_in] + c < best[key[1] + 1][s_out]:
                best[key[1] + 1][s_out] = best[p][s_in] + c
                back[key[1] + 1][s_out] = (p, s_in, key)
    return best, back


def cheapest(n_ops: int, starts: dict[int, list[Key]], cost: dict[Key, int], single: list[int]) -> list[Key]:
    """The candidates of the cheapest segmentation (the master's optimum, by dynamic programming): the
    fallback when the master cannot be solved in the time left, and its hint."""
    best, back = forward(n_ops, starts, cost, single)
    if best[n_ops][0] == float("inf"):
        return []
    out: list[Key] = []
    at, state = n_ops, 0
    while at > 0:
        step = back[at][state]
        assert step is not None
        at, state, key = step
        if key is not None:
            out.append(key)
    return sorted(out)


def within(n_ops: int, starts: dict[int, list[Key]], cost: dict[Key, int], single: list[int],
            upper: float) -> dict[Key, int]:
    """The candidates of ``cost`` some segmentation costing at most ``upper`` can use (reduced-cost fixing).

    With ``upper`` the cost of a segmentation over ``cost`` itself, the master over what is left has
    the same optimum and bound as over everything: a segmentation through a dropped candidate costs
    more than one that is kept.  It is far smaller, and CP-SAT solves it in a fraction of the time.
    """
    fwd, bwd = paths(n_ops, starts, cost, single)
    return {iv: c for iv, c in cost.items()
            if fwd[iv[0]][state_in(iv)] + c + bwd[iv[1] + 1][state_out(iv)] <= upper}


"""The segmentation dynamic programs and the CP-SAT master against brute force over every segmentation."""

import random

import pytest

from lgopt.strategies.cpsat.common import CpsatSettings
from lgopt.strategies.cpsat.master import Master
from lgopt.strategies.cpsat.segmentation import cheapest, forward, paths, within


def _instance(seed: int, n_ops: int = 7):
    """Random candidates over ``n_ops`` ops (all local), with hand-over variants, and global-layer costs."""
    rng = random.Random(seed)
    cost = {}
    for i in range(n_ops):
        for j in range(i, min(n_ops, i + 4)):
            for v in ("", "in", "out"):
                if v and (v == "in" and i == 0 or v == "out" and j == n_ops - 1):
                    continue
                if rng.random() < 0.7:
                    cost[(i, j, v)] = rng.randint(5, 60) * (j - i + 1)
    single = [rng.randint(20, 90) for _ in range(n_ops)]
    starts: dict[int, list] = {}
    for key in cost:
        starts.setdefault(key[0], []).append(key)
    return cost, single, starts


def _segmentations(n_ops, cost, at=0, state=0):
    """Every way to cover ops ``at..`` from boundary state ``state``: lists of candidate keys and global ops."""
    if at == n_ops:
        if state == 0:
            yield []
        return
    if state == 0:
        for rest in _segmentations(n_ops, cost, at + 1, 0):
            yield [("global", at)] + rest
    for key in cost:
        i, j, v = key
        if i != at or int(v == "in") != state:
            continue
        for rest in _segmentations(n_ops, cost, j + 1, int(v == "out")):
            yield [key] + rest


def _value(seg, cost, single):
    return sum(single[s[1]] if s[0] == "global" else cost[s] for s in seg)


@pytest.mark.parametrize("seed", range(12))
def test_dynamic_programs_equal_brute_force(seed):
    cost, single, starts = _instance(seed)
    n = len(single)
    best = min(_value(s, cost, single) for s in _segmentations(n, cost))
    fwd, bwd = paths(n, starts, cost, single)
    assert fwd[n][0] == bwd[0][0] == forward(n, starts, cost, single)[0][n][0] == best
    chosen = cheapest(n, starts, cost, single)
    grouped = {k for i, j, _ in chosen for k in range(i, j + 1)}
    assert sum(cost[c] for c in chosen) + sum(single[k] for k in range(n) if k not in grouped) == best
    # a hand-over is always matched: a group that hands over at b is followed by one that receives at b
    outs = sorted(j + 1 for _, j, v in chosen if v == "out")
    ins = sorted(i for i, _, v in chosen if v == "in")
    assert outs == ins


@pytest.mark.parametrize("seed", range(12))
def test_within_keeps_every_candidate_of_a_plan_no_dearer_than_the_bound(seed):
    cost, single, starts = _instance(seed)
    n = len(single)
    best = forward(n, starts, cost, single)[0][n][0]
    upper = best + 40
    kept = within(n, starts, cost, single, upper)
    for seg in _segmentations(n, cost):
        keys = [s for s in seg if s[0] != "global"]
        if _value(seg, cost, single) <= upper:
            assert all(k in kept for k in keys)
    kept_starts: dict[int, list] = {}
    for key in kept:
        kept_starts.setdefault(key[0], []).append(key)
    assert forward(n, kept_starts, kept, single)[0][n][0] == best


@pytest.mark.parametrize("seed", range(6))
def test_master_finds_the_shortest_path_optimum(seed):
    cost, single, starts = _instance(seed, n_ops=6)
    n = len(single)
    covering = {k: [key for key in cost if key[0] <= k <= key[1]] for k in range(n)}
    master = Master(list(cost), covering, dict(enumerate(single)), 0)
    out = master.solve(CpsatSettings(workers=1), cost, 10.0)
    assert out is not None
    _, bound, chosen = out
    best = forward(n, starts, cost, single)[0][n][0]
    grouped = {k for i, j, _ in chosen for k in range(i, j + 1)}
    assert sum(cost[c] for c in chosen) + sum(single[k] for k in range(n) if k not in grouped) == best == bound

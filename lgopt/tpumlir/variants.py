"""Variants of TPU-MLIR's own grouping, drawn to measure: the calibration data of a new setting.

The shared F16 calibration (``../shared/calibration``) measured TPU-MLIR's own groupings and about twenty
variants of each (a group cut in two, other slice counts, neighbours merged, a random run of ops as one group)
on the compiler's timeline.  A new setting (INT8, several cores, another chip) needs the same kind of data, and
this module draws it the same way from the setting's own cache, deterministically for a seed.

A variant is plain cache JSON (the format :mod:`lgopt.tpumlir.cache` reads and ``LOAD_TPU_GROUP=1`` loads):

- ``split``: one group cut in two at an op, slice counts kept (a part of one op becomes a global layer);
- ``secs``: one group forced to other slice counts: H doubled, H set to the core count (what lets a one-slice
  group use every core), N split when the batch allows;
- ``merge``: two neighbouring groups merged over the global layers between them, each slice count the larger of
  the two groups';
- ``run``: a random run of one base group's ops as a single group, with the largest slice counts of the own
  groups it overlaps.

Slice counts are always given: TPU-MLIR 1.30.2's search mode of the loader (``0,0,0,0,0``) aborts
(``GroupMethod.cpp:3159``) on INT8 and multi-core models, so a variant asking for it would measure nothing.

>>> own = {"opt": 2, "total subfunc": 1, "subfunc_0": {"subfunc idx": 0, "GlobalLayer": [], "GroupLayer": [
...     {"index": 0, "start_idx": 0, "end_idx": 3, "func_start_idx": 0, "func_end_idx": 3, "group_cost": 9,
...      "base_group_idx": 0, "locs": ["a", "b", "c", "d"], "shape_secs": [1, 1, 1, 1, 1]}]}}
>>> halves = split(own, 0, 0, 2)["subfunc_0"]["GroupLayer"]
>>> [(g["func_start_idx"], g["func_end_idx"], g["locs"]) for g in halves]
[(0, 1, ['a', 'b']), (2, 3, ['c', 'd'])]
>>> with_secs(own, 0, 0, (1, 1, 1, 2, 1))["subfunc_0"]["GroupLayer"][0]["shape_secs"]
[1, 1, 1, 2, 1]
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

Cache = dict[str, Any]
Secs = tuple[int, int, int, int, int]
BaseGroups = Mapping[str, Sequence[tuple[int, int]]]  # per subfunction, each base group's first and last op


@dataclass(frozen=True)
class Variant:
    """One cache to measure: its name (``v03_split``), kind and what was changed."""

    name: str
    kind: str
    description: str
    cache: Cache


def subfuncs(cache: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in cache if k.startswith("subfunc_"))


def _renumber(sub: dict[str, Any]) -> None:
    """The load order (``index``) of groups and global layers, by their first op."""
    items = [(g["func_start_idx"], g) for g in sub["GroupLayer"]] + [(g["func_idx"], g) for g in sub["GlobalLayer"]]
    for k, (_, d) in enumerate(sorted(items, key=lambda t: t[0])):
        d["index"] = k


def split(cache: Mapping[str, Any], sub: int, group: int, at: int) -> Cache:
    """``group`` of subfunction ``sub`` cut so its second part starts at its op ``at`` (0-based in the group)."""
    out = copy.deepcopy(dict(cache))
    s = out[f"subfunc_{sub}"]
    g = s["GroupLayer"][group]
    if not 0 < at < len(g["locs"]):
        raise ValueError(f"split point {at} outside group {group} of {len(g['locs'])} ops")
    g2 = copy.deepcopy(g)
    g["locs"], g2["locs"] = g["locs"][:at], g["locs"][at:]
    g["end_idx"], g["func_end_idx"] = g["start_idx"] + at - 1, g["func_start_idx"] + at - 1
    g2["start_idx"], g2["func_start_idx"] = g["start_idx"] + at, g["func_start_idx"] + at
    parts = []
    for part in (g, g2):
        part["group_cost"] = 0
        if len(part["locs"]) == 1:
            s["GlobalLayer"].append({"index": 0, "func_idx": part["func_start_idx"], "group_cost": 0,
                                     "loc": part["locs"][0]})
        else:
            parts.append(part)
    s["GroupLayer"][group:group + 1] = parts
    _renumber(s)
    return out


def with_secs(cache: Mapping[str, Any], sub: int, group: int, secs: Sequence[int]) -> Cache:
    """``group`` forced to ``secs`` (n, c, d, h, w)."""
    out = copy.deepcopy(dict(cache))
    g = out[f"subfunc_{sub}"]["GroupLayer"][group]
    g["shape_secs"], g["group_cost"] = [int(x) for x in secs], 0
    return out


def spans_cache(cache: Mapping[str, Any], ops: Mapping[str, Sequence[str]],
                spans: Mapping[str, Sequence[tuple[int, int, Secs]]]) -> Cache:
    """A cache of exactly these groups (per subfunction: first and last op index, slice counts; ``0,0,0,0,0`` lets
    TPU-MLIR choose them).  No ``GlobalLayer`` list: with one, 1.30.2's loader does not search slice counts."""
    out: Cache = {"opt": cache.get("opt", 2), "total subfunc": cache.get("total subfunc", len(ops))}
    for sub, names in ops.items():
        groups = [{"base_group_idx": -1, "start_idx": a, "end_idx": b, "func_start_idx": a, "func_end_idx": b,
                   "group_cost": 0, "index": k, "locs": list(names[a:b + 1]), "shape_secs": list(secs)}
                  for k, (a, b, secs) in enumerate(sorted(spans.get(sub, ()))) if b > a]
        out[sub] = {"subfunc idx": int(sub.split("_")[1]), "GroupLayer": groups, "GlobalLayer": []}
    return out


def own_spans(cache: Mapping[str, Any]) -> dict[str, list[tuple[int, int, Secs]]]:
    """The groups of ``cache`` as spans with their slice counts."""
    return {sub: [(g["func_start_idx"], g["func_end_idx"], tuple(g["shape_secs"]))  # type: ignore[misc]
                  for g in cache[sub]["GroupLayer"]] for sub in subfuncs(cache)}


def _larger(x: Sequence[int], y: Sequence[int]) -> Secs:
    return tuple(max(1, p, q) for p, q in zip(x, y))  # type: ignore[return-value]


def _splits(cache: Cache, rng: random.Random) -> Iterator[tuple[str, str, Cache]]:
    for sub in subfuncs(cache):
        for k, g in enumerate(cache[sub]["GroupLayer"]):
            n = len(g["locs"])
            if n >= 3:
                at = rng.randrange(1, n) if n > 3 else n // 2
                yield "split", f"group {k} of {sub} cut before its op {at} ({g['locs'][at]})", \
                    split(cache, int(sub.split("_")[1]), k, at)


def _secs(cache: Cache, cores: int, batch: int) -> Iterator[tuple[str, str, Cache]]:
    for sub in subfuncs(cache):
        for k, g in enumerate(cache[sub]["GroupLayer"]):
            n, c, d, h, w = g["shape_secs"]
            tries = {(n, c, d, 2 * h, w): "H slices doubled"}
            if cores > 1 and n * c * d * h * w < cores:
                tries[(n, c, d, cores, w)] = f"H slices = the {cores} cores"
            if batch > 1 and n < batch:
                tries[(min(batch, 2 * n), c, d, h, w)] = "N slices doubled"
            for secs, why in tries.items():
                yield "secs", f"group {k} of {sub}: {why} ({','.join(map(str, secs))})", \
                    with_secs(cache, int(sub.split("_")[1]), k, secs)


def _merges(cache: Cache, ops: Mapping[str, Sequence[str]], base: BaseGroups) -> Iterator[tuple[str, str, Cache]]:
    spans = own_spans(cache)
    for sub, groups in spans.items():
        groups = sorted(groups)
        for i in range(len(groups) - 1):
            (a, _, _), (_, b, _) = groups[i], groups[i + 1]
            if sub in base and not any(x <= a and b <= y for x, y in base[sub]):
                continue  # a group never crosses a base group
            kept = [g for j, g in enumerate(groups) if j not in (i, i + 1)]
            secs = _larger(groups[i][2], groups[i + 1][2])
            yield "merge", f"groups {i} and {i + 1} of {sub} merged over ops {a}..{b}, slice counts {secs}", \
                spans_cache(cache, ops, {**spans, sub: [*kept, (a, b, secs)]})


def _runs(cache: Cache, ops: Mapping[str, Sequence[str]], base: BaseGroups, rng: random.Random,
          count: int) -> Iterator[tuple[str, str, Cache]]:
    runs = [(sub, x, y) for sub, spans in base.items() for x, y in spans if y - x >= 2]  # of three ops or more
    for _ in range(count if runs else 0):
        sub, first, last = runs[rng.randrange(len(runs))]
        a = rng.randrange(first, last - 1)
        b = rng.randrange(a + 2, last + 1) if a + 2 <= last else last
        spans, secs = own_spans(cache), (1, 1, 1, 1, 1)
        for x, y, own in spans.get(sub, ()):
            if x <= b and a <= y:
                secs = _larger(secs, own)
        rest = [(x, y, own) for x, y, own in spans.get(sub, ()) if y < a or b < x]
        yield "run", f"ops {a}..{b} of {sub} as one group, slice counts {secs}, the groups it overlaps dropped", \
            spans_cache(cache, ops, {**spans, sub: [*rest, (a, b, secs)]})


def draw(cache: Mapping[str, Any], ops: Mapping[str, Sequence[str]], base: BaseGroups, *,
         cores: int = 1, batch: int = 1, seed: int = 0, limit: int = 20) -> list[Variant]:
    """Up to ``limit`` distinct variants of ``cache`` (TPU-MLIR's own), in a fixed order for a seed.

    ``ops`` lists each subfunction's op names in the pass's order (the scoring tool's ``ops.json``); ``base``
    its base groups, first and last op of each (:func:`lgopt.tpumlir.export.read_base_groups`), or nothing when
    unknown (merges then trust the cache, and no random runs are drawn)."""
    rng = random.Random(seed)
    c = copy.deepcopy(dict(cache))
    kinds = [list(_secs(c, cores, batch)), list(_splits(c, rng)), list(_merges(c, ops, base)),
             list(_runs(c, ops, base, rng, max(2, limit // 4)))]
    seen: set[str] = set()
    out: list[Variant] = []
    while len(out) < limit and any(kinds):
        for pool in kinds:  # round robin: every kind gets its share
            if pool and len(out) < limit:
                kind, why, v = pool.pop(0)
                key = repr(sorted((k, repr(v[k])) for k in subfuncs(v)))
                if key not in seen:
                    seen.add(key)
                    out.append(Variant(f"v{len(out) + 1:02d}_{kind}", kind, why, v))
    return out

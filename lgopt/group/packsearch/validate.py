"""An independent check of a packing: it reads only the problem and the offsets, never the solver's data.

Whatever the search believes, an answer is written or used only after this says it holds: every buffer
has an aligned offset inside the capacity (its pinned one, if pinned), no two buffers live at the same
time share a byte, and no hard bank pair shares a bank.  It sweeps time once (a buffer is compared with
the buffers live when it starts), so it stays cheap on the few hundred buffers of a benchmark instance.
"""

from __future__ import annotations

from typing import Mapping

from lgopt.group.packsearch.problem import PackProblem, banks


def validate(problem: PackProblem, offsets: Mapping[str, int]) -> str | None:
    """None when ``offsets`` is a packing of ``problem``, else the first violation in words."""
    ids = {it.id for it in problem.items}
    for key in offsets:
        if key not in ids:
            return f"offset given for {key!r}, which is not a buffer of the problem"
    for it in problem.items:
        o = offsets.get(it.id)
        if not isinstance(o, int) or isinstance(o, bool):
            return f"buffer {it.id} has no offset"
        if o < 0 or o % problem.align or o + it.size > problem.capacity:
            return f"buffer {it.id} at {o} is misaligned or outside [0, {problem.capacity})"
        if it.fixed is not None and o != it.fixed:
            return f"buffer {it.id} is pinned at {it.fixed} but placed at {o}"
    events: list[tuple[int, int, int]] = []  # (time, 0 = end / 1 = start, item index)
    for k, it in enumerate(problem.items):
        for s, e in it.spans:
            events.append((s, 1, k))
            events.append((e, 0, k))
    events.sort()
    live: dict[int, int] = {}  # item index -> open spans of it
    for _, kind, k in events:
        if kind == 0:
            live[k] -= 1
            if not live[k]:
                del live[k]
            continue
        a = problem.items[k]
        lo, hi = offsets[a.id], offsets[a.id] + a.size
        for j in live:
            if j == k:
                continue
            b = problem.items[j]
            if a.size and b.size and lo < offsets[b.id] + b.size and offsets[b.id] < hi:
                first, second = sorted((a.id, b.id))
                return f"buffers {first} and {second} are live together and overlap"
        live[k] = live.get(k, 0) + 1
    size = {it.id: it.size for it in problem.items}
    for x, y in problem.hard_pairs:
        if set(banks(offsets[x], size[x], problem.bank_bytes)) & set(banks(offsets[y], size[y], problem.bank_bytes)):
            return f"buffers {x} and {y} share a bank"
    return None

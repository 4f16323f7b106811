"""Weight load rows on a scheduled unsliced table: which weights load inside the table, where each may
load, and the table with a given choice applied.

A weight whose op runs in row ``u`` loads in any row ``r < u`` (stage 1, same slice; it lives ``r..u``)
or in the pipeline fill before the first row (stage 0 of the last row; it lives ``T-1`` and ``0..u``),
the latter when ``u <= T - 2``::

    row        0    1    2    3  (T = 4)
    op               conv
    load r=0   [====|====]            stage 1: lives 0..1
    fill       [====|====]      [==]  stage 0 of row 3: lives 3, then 0..1 of the next iteration
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from lgopt.model.plan import GroupPlan, Row, Transfer

Load = tuple[int, int]  # (row, stage)


FILL_ITERATION = -1



def chosen_weights(g: GroupPlan) -> dict[str, int]:
    """Ops whose weights load inside the table (not before the loop), with the row each op runs in."""
    if g.num_slices != 1:
        return {}
    op_row = {name: r for r, row in enumerate(g.rows) for name in row.ops}
    return {tr.name: op_row[tr.name] for row in g.rows for tr in row.loads if tr.kind == "weight"}


def load_options(use_row: int, num_rows: int) -> list[Load]:
    """Every legal load of a weight used in ``use_row``: stage 1 in an earlier row, or in the fill."""
    opts = [(r, 1) for r in range(use_row)]
    if use_row <= num_rows - 2:
        opts.append((num_rows - 1, 0))
    return opts


def current_loads(g: GroupPlan) -> dict[str, Load]:
    return {tr.name: (r, tr.stage) for r, row in enumerate(g.rows) for tr in row.loads if tr.kind == "weight"}


def with_loads(g: GroupPlan, loads: Mapping[str, Load]) -> GroupPlan:
    """The same group with the named weights loading where ``loads`` says (lifetimes follow)."""
    use = chosen_weights(g)
    rows = []
    for r, row in enumerate(g.rows):
        keep = tuple(tr for tr in row.loads if not (tr.kind == "weight" and tr.name in loads))
        add = tuple(Transfer(name, "weight", stage) for name, (lr, stage) in sorted(loads.items()) if lr == r)
        rows.append(Row(row.ops, keep + add, row.stores))
    bufs = tuple(replace(b, start=loads[b.name][0], end=use[b.name]) if b.kind == "weight" and b.name in loads
                 else b for b in g.buffers)
    return replace(g, rows=tuple(rows), buffers=bufs)


def with_stores(g: GroupPlan, stores: Mapping[str, int]) -> GroupPlan:
    """The same one-slice group with the named tensors' stores in the rows ``stores`` says, each no earlier than
    the table's (a store moved later keeps its tensor live until it runs)."""
    moved = {tr.name: tr for row in g.rows for tr in row.stores if tr.name in stores}
    rows = tuple(Row(row.ops, row.loads, tuple(tr for tr in row.stores if tr.name not in moved)
                     + tuple(moved[name] for name, r2 in sorted(stores.items()) if r2 == r and name in moved))
                 for r, row in enumerate(g.rows))
    bufs = tuple(replace(b, end=max(b.end, stores[b.name])) if b.kind == "activation" and b.name in moved
                 and b.start <= b.end else b for b in g.buffers)
    return replace(g, rows=rows, buffers=bufs)


def with_early_loads(g: GroupPlan, loads: Mapping[str, int], kind: str = "activation") -> GroupPlan:
    """The same group with the named tensors' own-slice loads (stage 1) of ``kind`` in the rows ``loads`` says, each
    no later than the table's (a load moved earlier makes its tensor live from then on): a one-slice group's
    activations, or the weights a sliced group reloads with every slice (``kind="weight"``)."""
    moved = {tr.name: tr for row in g.rows for tr in row.loads
             if tr.kind == kind and tr.stage == 1 and tr.name in loads}
    rows = tuple(Row(row.ops, tuple(tr for tr in row.loads if tr.name not in moved or tr.kind != kind)
                     + tuple(moved[name] for name, r2 in sorted(loads.items()) if r2 == r and name in moved),
                     row.stores)
                 for r, row in enumerate(g.rows))
    bufs = tuple(replace(b, start=min(b.start, loads[b.name])) if b.kind == kind and b.name in moved
                 and b.start <= b.end else b for b in g.buffers)
    return replace(g, rows=rows, buffers=bufs)


def without_weight_loads(g: GroupPlan) -> GroupPlan:
    """The table with its in-table weight loads removed: what every load choice shares."""
    rows = tuple(Row(r.ops, tuple(t for t in r.loads if t.kind != "weight"), r.stores) for r in g.rows)
    return replace(g, rows=rows)


def cell_of(load: Load) -> tuple[int, int]:
    row, stage = load
    return (FILL_ITERATION, row) if stage == 0 else (0, row)


def lifetime(load: Load, use: int, num_rows: int) -> list[int]:
    """Rows a weight occupies LMEM: from its load row to its use; a fill load also holds the last row."""
    row, stage = load
    return [*range(0, use + 1), num_rows - 1] if stage == 0 else list(range(row, use + 1))


"""The MiniMalloc benchmark CSV (``id,lower,upper,size`` per buffer; lifetimes are half-open
``[lower, upper)``), read into :class:`~lgopt.group.pack.PackItem` and written back with offsets.

    id,lower,upper,size
    b0,0,3,64
    b1,2,5,32
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Mapping, Sequence

from lgopt.errors import LgoptError
from lgopt.group.pack import PackItem

# --- the benchmark CSV format --------------------------------------------------------------------

def read_csv(path: str | Path) -> list[PackItem]:
    """``id,lower,upper,size`` rows (also the older ``buffer,start,end,size`` header; extra columns such as
    ``offset`` are ignored)."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise LgoptError(f"cannot read {path}: {e.strerror}") from None
    items: list[PackItem] = []
    alias = {"id": ("id", "buffer"), "lower": ("lower", "start"), "upper": ("upper", "end"), "size": ("size",)}

    def col(r: dict, key: str) -> str:
        for k in alias[key]:
            if k in r:
                return r[k]
        raise KeyError(key)

    for i, r in enumerate(rows):
        try:
            lo, hi, size = int(col(r, "lower")), int(col(r, "upper")), int(col(r, "size"))
            bid = str(col(r, "id"))
        except (KeyError, TypeError, ValueError):
            raise LgoptError(f"{path}: row {i + 2} is not id,lower,upper,size with integers") from None
        if hi <= lo or size <= 0:
            raise LgoptError(f"{path}: buffer {bid} has an empty lifetime or size")
        items.append(PackItem(bid, size, ((lo, hi),)))
    if not items:
        raise LgoptError(f"{path}: no buffers (expected a header id,lower,upper,size and rows)")
    return items


def write_csv(path: str | Path, items: Sequence[PackItem], offsets: Mapping[str, int]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "lower", "upper", "size", "offset"])
        for it in items:
            w.writerow([it.id, it.spans[0][0], it.spans[0][1], it.size, offsets[it.id]])

"""The MiniMalloc benchmark CSV (``id,lower,upper,size`` per buffer; lifetimes are half-open
``[lower, upper)``), read into :class:`~lgopt.group.pack.PackItem` and written back with offsets.

    id,lower,upper,size
    b0,0,3,64
    b1,2,5,32

Everything wrong with a file is the input's fault and says so in one line (:class:`LgoptError`):
a file that is not UTF-8 text, a row that is not four integers, a buffer id used twice (the packer
could only blame itself for an answer that names one offset for two buffers), an output that cannot
be written (found before any solving, so a long search is not thrown away).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Mapping, Sequence

from lgopt.errors import LgoptError
from lgopt.group.packsearch.problem import PackItem

# --- the benchmark CSV format --------------------------------------------------------------------

_ALIAS = {"id": ("id", "buffer"), "lower": ("lower", "start"), "upper": ("upper", "end"), "size": ("size",)}


def read_csv(path: str | Path) -> list[PackItem]:
    """``id,lower,upper,size`` rows (also the older ``buffer,start,end,size`` header; extra columns such as
    ``offset`` are ignored)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise LgoptError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise LgoptError(f"{path} is not a text CSV (byte {e.start} is not UTF-8)") from None
    except csv.Error as e:
        raise LgoptError(f"{path} is not a readable CSV: {e}") from None
    items: list[PackItem] = []
    first_row: dict[str, int] = {}

    def col(r: dict, key: str) -> str:
        for k in _ALIAS[key]:
            if k in r:
                return r[k]
        raise KeyError(key)

    for i, r in enumerate(rows):
        try:
            lo, hi, size = int(col(r, "lower")), int(col(r, "upper")), int(col(r, "size"))
            bid = str(col(r, "id")).strip()
        except (KeyError, TypeError, ValueError):
            raise LgoptError(f"{path}: row {i + 2} is not id,lower,upper,size with integers") from None
        if hi <= lo or size <= 0:
            raise LgoptError(f"{path}: buffer {bid} has an empty lifetime or size")
        if bid in first_row:
            raise LgoptError(f"{path}: buffer id {bid!r} is used twice (rows {first_row[bid]} and {i + 2})")
        first_row[bid] = i + 2
        items.append(PackItem(bid, size, ((lo, hi),)))
    if not items:
        raise LgoptError(f"{path}: no buffers (expected a header id,lower,upper,size and rows)")
    return items


def check_writable(path: str | Path) -> Path:
    """``path`` if a CSV can be written there (its folder is created if missing), else one clear error.

    Called before solving: the file is opened for appending (never truncated) and, if this made it,
    removed again.
    """
    p = Path(path)
    if p.is_dir():
        raise LgoptError(f"cannot write {p}: it is a folder")
    for up in p.parents:
        if up.exists() and not up.is_dir():
            raise LgoptError(f"cannot write {p}: {up} is a file, not a folder")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        existed = p.exists()
        with open(p, "a", encoding="utf-8"):
            pass
    except OSError as e:
        raise LgoptError(f"cannot write {p}: {e.strerror or e}") from None
    if not existed:
        p.unlink()
    return p


def write_csv(path: str | Path, items: Sequence[PackItem], offsets: Mapping[str, int]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "lower", "upper", "size", "offset"])
        for it in items:
            w.writerow([it.id, it.spans[0][0], it.spans[0][1], it.size, offsets[it.id]])

"""The packing problem's vocabulary: buffers, the problem, a solution.

Kept apart from the solver and the validator (as MiniMalloc keeps ``minimalloc.h``) so that both read
one definition of what a buffer is and neither can drift from the other.  A problem is checked once,
here, when it is built: the solver and the validator may then assume a well-formed input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping

from lgopt.errors import LgoptError

Span = tuple[int, int]  # a half-open time range [start, end)
BankRule = Literal["off", "soft", "hard"]


@dataclass(frozen=True)
class PackItem:
    """A buffer: ``size`` bytes live on every span of ``spans``, at one offset for all of them.

    A lifetime that wraps past the last row of a software pipeline is two spans; ``fixed`` pins the
    offset (a buffer another group already placed).
    """

    id: str
    size: int
    spans: tuple[Span, ...]
    fixed: int | None = None


@dataclass(frozen=True)
class PackProblem:
    """Buffers to place in ``[0, capacity)`` at multiples of ``align``.

    Bank pairs (``bank_pairs``, ``bank_bytes``) only constrain a solution when ``bank_rule`` is
    ``"hard"``: the two buffers of a pair may then share no bank.  ``"soft"`` pairs are an objective
    (:func:`lgopt.group.pack.pack` reduces them once a packing exists) and ``"off"`` ignores them.
    """

    items: tuple[PackItem, ...]
    capacity: int
    align: int = 1
    bank_bytes: int = 0
    bank_pairs: tuple[tuple[str, str], ...] = ()
    bank_rule: BankRule = "off"

    def __post_init__(self) -> None:
        if self.align < 1:
            raise LgoptError(f"alignment must be a positive number of bytes, not {self.align}")
        if self.capacity < 0:
            raise LgoptError(f"capacity must not be negative, not {self.capacity}")
        if self.bank_rule not in ("off", "soft", "hard"):
            raise LgoptError(f"unknown bank rule {self.bank_rule!r}")
        seen: set[str] = set()
        for it in self.items:
            if it.id in seen:
                raise LgoptError(f"buffer id {it.id!r} appears more than once")
            seen.add(it.id)
            if it.size < 0:
                raise LgoptError(f"buffer {it.id!r} has a negative size")
            if any(e <= s for s, e in it.spans):
                raise LgoptError(f"buffer {it.id!r} has an empty or reversed time span")
            if it.fixed is not None and (it.fixed < 0 or it.fixed % self.align):
                raise LgoptError(f"buffer {it.id!r} is pinned at {it.fixed}, not a multiple of {self.align} in range")
        if self.bank_pairs and self.bank_rule != "off":
            if self.bank_bytes < 1:
                raise LgoptError("bank pairs need a positive bank size")
            for a, b in self.bank_pairs:
                if a not in seen or b not in seen or a == b:
                    raise LgoptError(f"bank pair ({a!r}, {b!r}) does not name two buffers of the problem")

    @property
    def hard_pairs(self) -> tuple[tuple[str, str], ...]:
        """The pairs a solution must keep in separate banks."""
        return self.bank_pairs if self.bank_rule == "hard" else ()


@dataclass(frozen=True)
class Solution:
    """Offsets in bytes by buffer id; ``height`` is the highest byte used (0 with no buffers)."""

    offsets: Mapping[str, int] = field(default_factory=dict)
    height: int = 0


def aligned(size: int, align: int) -> int:
    """``size`` rounded up to a multiple of ``align``: the room a buffer takes below the next aligned one."""
    return -(-size // align) * align


def banks(offset: int, size: int, bank_bytes: int) -> range:
    """The banks a buffer at ``offset`` touches (a zero-byte buffer still names the bank it sits in)."""
    return range(offset // bank_bytes, (offset + max(size, 1) - 1) // bank_bytes + 1)

"""A search's time limit, in wall seconds or in deterministic work units.

Wall seconds are what a user at a terminal means by a time limit, but a search stopped by the clock
stops wherever the machine's load left it: two runs of the same configuration, one on a busy process
pool and one alone on a Dask worker, can return different plans.  A *deterministic* budget counts work
instead (CP-SAT's deterministic time, the packing search's placements and a fixed charge per candidate
evaluated, :func:`lgopt.group.solver.work_done`), so with a fixed seed and worker count the search stops
at the same point, and returns the same plan, on any machine and backend.  One unit is about a second
of one idle core; a solve that needs a wall-clock guard against a far slower machine still has one
(:data:`lgopt.group.solver.WALL_CAP` per unit of each CP-SAT solve).

The searches ask a :class:`Budget` whether time is up, how much is left, and (for solvers that cut
themselves short) for a wall-clock ``deadline``, which is ``None`` under a deterministic budget: what
bounds those solvers then is their own deterministic limit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from lgopt.group.solver import wall_capped, work_done


@dataclass
class Budget:
    """``limit`` wall seconds from ``started`` (``time.perf_counter()``), or ``limit`` deterministic units
    of work charged to it (``deterministic``)."""

    limit: float
    deterministic: bool = False
    started: float = field(default_factory=time.perf_counter)
    charged: float = 0.0  # deterministic units of work done for this search
    capped: int = 0  # its solves the wall-clock guard cut short (under a deterministic budget: answers that
    # may differ on a less loaded machine)
    halted: bool = False  # the search has what it needs (its bound reached the caller's goal): it stops now

    def spent(self) -> float:
        """Wall seconds since the start, or units charged."""
        return self.charged if self.deterministic else time.perf_counter() - self.started

    def seconds(self) -> float:
        """Wall seconds since the start, whichever the budget's kind (for reports)."""
        return time.perf_counter() - self.started

    def expired(self) -> bool:
        return self.halted or self.spent() >= self.limit

    def halt(self) -> None:
        """Stop the search at its next check, whatever is left (:attr:`CpsatSettings.stop_bound` reached)."""
        self.halted = True

    def left(self) -> float:
        """What is left: seconds or units (negative once overrun)."""
        return self.limit - self.spent()

    @property
    def deadline(self) -> float | None:
        """The ``time.perf_counter()`` a solver must not run past: none under a deterministic budget."""
        return None if self.deterministic else self.started + self.limit

    def charge(self, units: float, capped: int = 0) -> None:
        """Count ``units`` of deterministic work (ignored by a wall-clock budget) and ``capped`` solves cut
        by their wall-clock guard."""
        self.charged += units
        self.capped += capped

    def share(self, limit: float) -> Budget:
        """A budget of ``limit`` of the same kind starting now (one part of a search split in parts)."""
        return Budget(limit, self.deterministic)

    def metered(self) -> _Meter:
        """A context that charges this budget with the deterministic work done in this process inside it.

        >>> b = Budget(5.0, deterministic=True)
        >>> with b.metered():
        ...     from lgopt.group.solver import add_work
        ...     add_work(1.5)
        >>> b.spent()
        1.5
        """
        return _Meter(self)


class _Meter:
    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.start = 0.0
        self.capped = 0

    def __enter__(self) -> None:
        self.start, self.capped = work_done(), wall_capped()

    def __exit__(self, *exc: object) -> None:
        self.budget.charge(work_done() - self.start, wall_capped() - self.capped)

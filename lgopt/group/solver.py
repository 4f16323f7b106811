"""The one place a CP-SAT solver is set up.

Every solve in lgopt is seeded and given an explicit worker count (CP-SAT's default is the machine's
core count, which oversubscribes a pool of worker processes and makes results depend on the machine),
a wall-clock cap that never runs past the caller's deadline, and, where a solve must give the same
answer however loaded the machine is, a deterministic-time limit.  ``params`` passes any other CP-SAT
parameter through, as the text form of ``SatParameters`` (``"linearization_level:2 cp_model_probing_level:0"``),
applied last so that a user tuning the solver has the final word.
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any

from lgopt.errors import LgoptError

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

WALL_CAP = 6.0  # wall seconds allowed per unit of deterministic time (about 2 on an idle 2-core machine)



class _Counters(threading.local):
    """Per thread: a search meters the work its own thread does, so a solve another thread runs at the same time
    (a Dask worker's other task, a search a test left running) never moves its stopping point."""

    work = 0.0  # deterministic units of work done: see work_done
    capped = 0  # solves on a deterministic limit that their wall-clock guard cut short: see wall_capped


_COUNTERS = _Counters()


def work_done() -> float:
    """Deterministic units of work this thread has done so far: CP-SAT's deterministic time of every
    solve run through :func:`solve_interruptibly`, plus what other solvers report with :func:`add_work`
    (the packing search's placements).  A search with a deterministic budget reads differences of it, so
    its stopping point depends on the work done, not on how loaded the machine was."""
    return _COUNTERS.work


def add_work(units: float) -> None:
    """Count ``units`` of deterministic work done outside :func:`solve_interruptibly`."""
    _COUNTERS.work += units


def wall_capped() -> int:
    """Solves on a deterministic limit that this process's wall-clock guard (:data:`WALL_CAP`) cut short so
    far: each one is an answer that may differ on a less loaded machine.  A search on a deterministic budget
    reports how many of its solves were cut."""
    return _COUNTERS.capped


def note_wall_cap(solver: Any = None) -> None:
    """Count a solve the wall-clock guard cut short: ``solver``'s, when its deterministic limit was not reached
    and its wall time was (nothing otherwise), or, without a solver, one the caller knows was cut."""
    if solver is not None:
        p, r = solver.parameters, solver.response_proto
        from ortools.sat.python import cp_model

        ended = r.status in (cp_model.OPTIMAL, cp_model.INFEASIBLE)  # it finished: no limit cut it
        # CP-SAT stops a little before its wall limit (it allows for its own overhead): 0.8 of it is the guard's
        if ended or not (math.isfinite(p.max_deterministic_time)
                         and r.deterministic_time < 0.99 * p.max_deterministic_time
                         and r.wall_time >= 0.8 * p.max_time_in_seconds):
            return
    _COUNTERS.capped += 1


def wall_seconds(time_limit: float, deadline: float | None = None) -> float:
    """The wall-clock cap of a solve given ``time_limit`` deterministic units: ``WALL_CAP`` times that (it
    guards instances where deterministic time runs slow), and no later than ``deadline``
    (``time.perf_counter()``) when there is one."""
    cap = max(1.0, WALL_CAP * time_limit)
    if deadline is not None:
        cap = min(cap, max(0.05, deadline - time.perf_counter()))
    return cap


def check_params(params: str) -> str:
    """``params`` if it parses as CP-SAT parameters (``SatParameters`` text format), else one clear error.

    >>> check_params("linearization_level: 2")
    'linearization_level: 2'
    >>> check_params("no_such_field: 1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    lgopt.errors.LgoptError: bad CP-SAT parameters 'no_such_field: 1': ... has no field named "no_such_field".
    """
    if params:
        from google.protobuf import text_format
        from ortools.sat import sat_parameters_pb2

        try:  # the protobuf message, for its parser's message: the solver's own (pybind) object has no descriptor
            text_format.Parse(params, sat_parameters_pb2.SatParameters())
        except text_format.ParseError as e:
            raise LgoptError(f"bad CP-SAT parameters {params!r}: {e}") from None
    return params


def _merge_params(p: Any, params: str) -> None:
    """Merge text-format ``params`` into a solver's parameters: OR-tools 9.15's are a pybind object with its own
    text parser (``google.protobuf.text_format`` cannot read into it), earlier ones a protobuf message."""
    merge = getattr(p, "merge_text_format", None)
    if merge is None:
        from google.protobuf import text_format

        text_format.Merge(params, p)
    elif not merge(params):
        check_params(params)  # the clear error
        raise LgoptError(f"bad CP-SAT parameters {params!r}")


def make_solver(*, workers: int, seed: int, seconds: float | None = None, deterministic: float | None = None,
                deadline: float | None = None, presolve: bool = True, params: str = "") -> cp_model.CpSolver:
    """A seeded CP-SAT solver.

    ``seconds`` caps wall time (at least 0.05 s); ``deterministic`` sets a deterministic-time limit and,
    without ``seconds``, a wall cap of :data:`WALL_CAP` times it; ``deadline`` (``time.perf_counter()``)
    is never overrun.  Several workers interleave their search, so the same seed and worker count give
    the same answer.
    """
    from ortools.sat.python import cp_model

    s = cp_model.CpSolver()
    p = s.parameters
    p.num_workers = workers
    p.random_seed = seed
    p.interleave_search = workers > 1
    p.catch_sigint_signal = False  # Ctrl-C is the caller's: see solve_interruptibly
    if deterministic is not None:
        p.max_deterministic_time = deterministic
        p.max_time_in_seconds = wall_seconds(deterministic, deadline)
    if seconds is not None:
        p.max_time_in_seconds = max(0.05, seconds)
    if not presolve:
        p.cp_model_presolve = False
    if params:
        _merge_params(p, params)
    return s


def integral_bound(solver: cp_model.CpSolver) -> int:
    """The solver's best objective bound as an integer, for a model whose objective is integral.

    CP-SAT reports it as a float that can fall just below the integer it stands for (124.99999999999999
    for a proven 125); truncating it would leave a gap of one that is not there.
    """
    return math.ceil(solver.best_objective_bound - 1e-6)


STOP_WAIT = 10.0  # seconds an interrupted search is given to stop before the caller goes on without it


def solve_interruptibly(solver: cp_model.CpSolver, model: cp_model.CpModel) -> Any:
    """``solver.solve(model)``, but a Ctrl-C (or SIGTERM turned into one) stops the search at once and
    raises :class:`KeyboardInterrupt` here, so the caller can keep the best plan it already has.

    CP-SAT runs in C++ without returning to Python, where no signal handler runs: left to itself it either
    swallows the signal (its own handler stops the search and the program carries on as if the time ran
    out) or delays it to the end of the solve.  So the solve runs in a helper thread while this one waits.
    """
    done = threading.Event()
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["status"] = solver.solve(model)
        except BaseException as e:  # re-raised in the caller's thread
            out["error"] = e
        finally:
            done.set()

    threading.Thread(target=run, daemon=True, name="cp-sat").start()
    try:
        while not done.wait(0.25):
            pass
    except KeyboardInterrupt:
        solver.stop_search()
        done.wait(STOP_WAIT)  # the search stops within a propagation; past that its daemon thread is left behind
        raise
    if "error" in out:
        raise out["error"]
    add_work(solver.response_proto.deterministic_time)
    note_wall_cap(solver)
    return out["status"]

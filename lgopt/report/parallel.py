"""One way to run many independent solves (``lgopt sweep``, ``lgopt compare``): joblib, whose backend is
local worker processes (loky), the calling process (``sequential``, for debugging with a debugger or
``print``) or a Dask cluster (a scheduler at ``tcp://HOST:PORT``, or a local cluster started here).

The same task function runs on every backend, so a configuration's result cannot depend on where it ran:
tasks carry plain data (CP-SAT objects do not pickle) and build their model in the worker, and every task
sets CP-SAT's worker count itself (its default, the machine's core count, oversubscribes a pool).
Results come back as they finish, each with its task's index, so the caller can cache it at once (an
interrupted run keeps what finished) and estimate the time left.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal, Sequence, TypeVar

from lgopt.errors import LgoptError

BackendKind = Literal["processes", "sequential", "dask"]
BACKENDS: tuple[BackendKind, ...] = ("processes", "sequential", "dask")

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Backend:
    """Where tasks run.  ``jobs`` is the number of local worker processes (``processes``) or of the local
    cluster's worker processes (``dask`` without ``scheduler``); a given scheduler brings its own workers."""

    kind: BackendKind = "processes"
    jobs: int = 2
    scheduler: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in BACKENDS:
            raise LgoptError(f"unknown backend {self.kind!r}: expected one of {', '.join(BACKENDS)}")
        if self.jobs < 1:
            raise LgoptError(f"--jobs must be at least 1, got {self.jobs}")
        if self.scheduler is not None and self.kind != "dask":
            raise LgoptError("--scheduler is the address of a Dask scheduler: use it with --backend dask")
        if self.scheduler is not None and "://" not in self.scheduler:
            raise LgoptError(f"--scheduler {self.scheduler!r}: expected an address like tcp://HOST:8786")

    def describe(self) -> str:
        if self.kind == "sequential":
            return "sequential (this process)"
        if self.kind == "processes":
            return f"{self.jobs} local worker process(es)"
        return f"Dask scheduler {self.scheduler}" if self.scheduler else f"local Dask cluster, {self.jobs} worker(s)"


def _indexed(fn: Callable[[Any], Any], index: int, task: Any) -> tuple[int, Any]:
    return index, fn(task)


def _dask_client(backend: Backend, stack: ExitStack) -> Any:
    """A client of the given scheduler, or of a local cluster of ``jobs`` single-threaded worker processes
    (one solve per process: CP-SAT and lgopt's evaluation hold the GIL most of the time)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise LgoptError("--backend dask needs Dask's distributed: pip install 'lgopt[dask]'") from None
    if backend.scheduler:
        try:
            return stack.enter_context(Client(backend.scheduler, timeout=10))
        except OSError as e:
            raise LgoptError(f"cannot reach the Dask scheduler at {backend.scheduler}: {e}") from None
    cluster = stack.enter_context(LocalCluster(n_workers=backend.jobs, threads_per_worker=1, processes=True,
                                               dashboard_address=None, silence_logs=40))
    return stack.enter_context(Client(cluster))


def cluster_workers(backend: Backend, client: Any = None) -> int:
    """How many tasks run at once: what the time budget of a configuration is planned with."""
    if backend.kind == "sequential":
        return 1
    if backend.kind == "dask" and client is not None:
        return max(1, sum(client.nthreads().values()))
    return backend.jobs


def run_tasks(fn: Callable[[T], R], tasks: Sequence[T], backend: Backend,
              on_start: Callable[[int], None] | None = None) -> Iterator[tuple[int, R]]:
    """``(index, fn(tasks[index]))`` for every task, in the order they finish.  ``fn`` must be a
    module-level function (it is pickled by name) and each task plain picklable data.  ``on_start`` is
    told how many tasks run at once before the first is sent."""
    import joblib

    if not tasks:
        return
    with ExitStack() as stack:
        if backend.kind == "sequential":
            par = joblib.Parallel(n_jobs=1, backend="sequential", return_as="generator_unordered")
            width = 1
        elif backend.kind == "processes":
            width = min(backend.jobs, len(tasks))
            par = joblib.Parallel(n_jobs=width, backend="loky" if width > 1 else "sequential",
                                  return_as="generator_unordered")
        else:
            client = _dask_client(backend, stack)
            width = cluster_workers(backend, client)
            stack.enter_context(joblib.parallel_config(backend="dask"))
            par = joblib.Parallel(n_jobs=-1, return_as="generator_unordered")
        if on_start:
            on_start(width)
        gen = par(joblib.delayed(_indexed)(fn, i, t) for i, t in enumerate(tasks))
        try:
            yield from gen
        finally:
            close = getattr(gen, "close", None)
            if close:
                close()

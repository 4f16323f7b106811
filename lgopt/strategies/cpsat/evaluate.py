"""Evaluating candidates: the best provably packable slicing of an interval, and a bound over the rest.

A candidate's cost (cycles or GMEM traffic) follows from :mod:`lgopt.cost` and does not depend on
where buffers sit; its feasibility does: a candidate is feasible when its buffers *can* be packed into
LMEM.  Feasibility is settled cheaply where possible (the greedy allocator finds a packing; more bytes
live at one row than LMEM holds) and exactly otherwise (:func:`lgopt.group.alloc.exact_pack`), and for
unsliced groups the weight load rows are chosen with the packing (:mod:`lgopt.strategies.cpsat.loadrows`).

Because groups never share LMEM (a tensor handed over between two groups sits at a fixed place above
both packings), the best slicing of an interval is independent of every other interval, so an interval
is evaluated once, and structurally identical intervals (repeated ResNet blocks) share one evaluation
through a signature cache.  An :class:`Evaluator` owns that cache and its worker processes; use it as a
context manager so the workers stop with it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from lgopt.group.alloc import exact_pack, multi_start_allocate
from lgopt.group.build import n_unit, place_chosen, schedule
from lgopt.group.handover import pin_kept, without_kept
from lgopt.group.slicing import slice_group
from lgopt.group.solver import wall_capped, work_done
from lgopt.group.timestep import schedule_group
from lgopt.model.plan import GroupPlan
from lgopt.strategies.cpsat.budget import Budget
from lgopt.strategies.cpsat.common import INF, Key
from lgopt.strategies.cpsat.loadrows import solve_loads
from lgopt.strategies.cpsat.loadtable import with_loads
from lgopt.strategies.cpsat.space import CandidateSpace
from lgopt.strategies.settings import exact_packing_allowed, packing

LOOKAHEAD = (2, 3, 4)  # heuristic tables for unsliced groups: load d weighted ops ahead (1 is the seed's rule)

EFFORT_GROWTH = 4  # each re-evaluation of an interval whose bound is below its value gives its solvers this much more
SLICING_WORK = 0.005  # deterministic units charged per slicing an evaluation considers (scheduling, the greedy
# allocator: Python work no solver counts), besides what its solvers report; about its wall time on one core
MAX_EFFORT = 6  # at most EFFORT_GROWTH ** 6 (4096) times the base budget: a solve that leaves a gap with that much
# will not close it within any time limit, and the multiplier must stay a finite float (4 ** 512 is not)



@dataclass(frozen=True)
class Evaluation:
    """The best provably packable slicing of one interval, and a bound over the undecided ones."""

    cost: int  # objective of the best feasible slicing (INF if none)
    bound: int  # min objective over slicings not proven infeasible (<= cost)
    n: int = 0
    h: int = 0
    w: int = 1  # W (column) slices
    loads: tuple[tuple[int, int, int], ...] | None = None  # (op position, row, stage) per weight, unsliced
    offsets: tuple[tuple[int, int], ...] | None = None  # by buffer id, when not the greedy allocator's
    tried: int = 0
    packed_exactly: int = 0
    unknown: int = 0
    full: bool = True  # False: a quick evaluation skipped the load-row solver or exact packing where it could gain
    effort: int = 0  # the solvers had EFFORT_GROWTH ** effort times the base budget
    work: float = 0.0  # deterministic units the evaluation took (charged to a deterministic budget)
    capped: int = 0  # its solves the wall-clock guard cut short
    c: int = 1  # channel (heads) slices



class Evaluator:
    """Evaluations of a :class:`CandidateSpace`'s candidates, memoised by signature, in worker processes
    when asked (results are identical to serial ones)."""

    def __init__(self, space: CandidateSpace, pack_time: float = 2.0, workers: int = 2, seed: int = 0) -> None:
        self.space = space
        self.pack_time = pack_time  # effort per exact packing (lgopt.group.pack) or load-row solve
        self.workers = workers
        self.seed = seed
        self.cache: dict[tuple, Evaluation] = {}  # by signature
        self.evaluated: dict[Key, Evaluation] = {}  # by candidate
        self.evaluations = 0  # distinct evaluations run
        self.slowest_full = 0.0  # wall seconds of the slowest full evaluation so far
        self._pool: Any = None
        self._pool_size = 0

    def evaluate_many(self, ivs: Sequence[Key], processes: int = 1,
                      budget: Budget | None = None, full: bool = True) -> None:
        """Evaluate intervals, in worker processes when asked; results are identical to serial ones.

        ``full=False`` is the quick evaluation (no load-row solver, no exact packing): a real plan's
        value and a valid bound, refined later only where the master needs it.  A wall-clock ``budget``
        cuts the batch where its deadline falls; a deterministic one is charged each evaluation's work,
        and batches are taken in order until it is spent, in worker processes or not, so the intervals
        evaluated do not depend on timing.
        """
        deadline = budget.deadline if budget is not None else None
        det = budget is not None and budget.deterministic
        todo = self._todo(ivs, full)
        if not todo:
            return
        reps = [(sig, group[0]) for sig, group in todo.items()]
        results: list[tuple[tuple, Evaluation]] = []
        chunk = max(1, min(8, len(reps) // (processes * 8)))

        def spent() -> bool:
            """The budget is over: its wall-clock deadline passed, or its deterministic units are charged."""
            return budget is not None and budget.expired()

        def take(batch: list[tuple[tuple, Evaluation]]) -> None:
            """Keep a batch's results, unless a deterministic budget was spent before it."""
            if det:
                if spent():
                    return
                assert budget is not None
                budget.charge(sum(ev.work for _, ev in batch), sum(ev.capped for _, ev in batch))
            results.extend(batch)

        if processes > 1 and len(reps) >= 8 and not _daemonic():
            self._in_workers(reps, chunk, deadline, full, processes, take, spent)
        else:
            self._in_series(reps, chunk, deadline, full, take, spent)
        self.evaluations += len(results)
        for sig, ev in results:
            self.cache[sig] = ev
            for iv in todo[sig]:
                self.evaluated[iv] = ev

    def _todo(self, ivs: Sequence[Key], full: bool) -> dict[tuple, list[Key]]:
        """The intervals still to evaluate, by signature (one evaluation serves all of a signature's); those
        whose signature was evaluated already are recorded as evaluated."""
        todo: dict[tuple, list[Key]] = {}
        for iv in ivs:
            ev = self.evaluated.get(iv)
            if ev is not None and (ev.full or not full):
                continue
            sig = self.space.signature(*iv)
            ev = self.cache.get(sig)
            if ev is not None and (ev.full or not full):
                self.evaluated[iv] = ev
            else:
                todo.setdefault(sig, []).append(iv)
        return todo

    def _in_workers(self, reps: list[tuple[tuple, Key]], chunk: int, deadline: float | None, full: bool,
                    processes: int, take: Callable[[list[tuple[tuple, Evaluation]]], None],
                    spent: Callable[[], bool]) -> None:
        """Evaluate ``reps`` in batches of ``chunk`` in the worker pool, each batch's results handed to ``take``
        in the order sent (the same results as in series) until ``spent``."""
        from collections import deque

        batches = [(reps[k:k + chunk], deadline, full, self.slowest_full) for k in range(0, len(reps), chunk)]
        # A few batches in flight at a time, never the whole list: past the deadline nothing more is sent
        # and the batches in flight end on their own (workers check the deadline), so the pool is never
        # terminated with its task queue full, where multiprocessing's terminate can hang for good.
        pool, queued = self._workers(processes), iter(batches)
        pending: deque[Any] = deque()

        def send() -> None:
            task = next(queued, None)
            if task is not None:
                pending.append(pool.apply_async(_evaluate_batch, (task,)))

        for _ in range(2 * processes):
            send()
        while pending:
            take(pending.popleft().get())  # in the order sent: the same results as in series
            if not spent():
                send()

    def _in_series(self, reps: list[tuple[tuple, Key]], chunk: int, deadline: float | None, full: bool,
                   take: Callable[[list[tuple[tuple, Evaluation]]], None], spent: Callable[[], bool]) -> None:
        """Evaluate ``reps`` here, in batches of ``chunk`` handed to ``take``, until ``spent`` or the deadline."""
        import time

        for k in range(0, len(reps), chunk):
            if spent():
                break
            done = []
            for sig, iv in reps[k:k + chunk]:
                if deadline is not None and time.perf_counter() > deadline:
                    break
                done.append((sig, self._timed(iv, self._full_in_time(full, deadline), deadline)))
            take(done)

    def _workers(self, processes: int) -> Any:
        """A pool of worker processes forked once per evaluator and kept: each worker's memoised per-op
        figures (TIU cycles, sizes) then serve every batch, not just one.  Each worker holds its own copy
        of this evaluator (forked, not pickled), set by the pool's initializer."""
        import multiprocessing as mp

        if self._pool is None or self._pool_size != processes:
            self.close()
            self._pool = mp.get_context("fork").Pool(processes, initializer=_init_worker, initargs=(self,))
            self._pool_size = processes
        return self._pool

    def close(self, interrupted: bool = False) -> None:
        """Stop the worker processes, if any.  ``interrupted`` (a Ctrl-C or SIGTERM in the search): batches may be
        in flight, where multiprocessing's terminate can hang for good, so each worker is killed (they hold
        nothing to save: the best plan is the parent's) and reaped here, and the pool's own terminate is left to
        a daemon thread: it first takes the task queue's read lock, which a worker killed while waiting for a
        task holds for good (an idle pool killed so hangs every time; about 1 interrupted solve in 100 did)."""
        if self._pool is None:
            return
        if interrupted:
            import threading

            workers = list(getattr(self._pool, "_pool", ()))  # the pool's processes (CPython's Pool keeps them so)
            for worker in workers:
                worker.kill()
            threading.Thread(target=self._pool.terminate, daemon=True, name="pool-terminate").start()
            for worker in workers:
                worker.join(timeout=5.0)
        else:
            self._pool.terminate()
            self._pool.join()
        self._pool = None

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.close(interrupted=kind is not None and issubclass(kind, KeyboardInterrupt))

    def _full_in_time(self, full: bool, deadline: float | None) -> bool:
        """A full evaluation only if one as slow as the slowest so far ends before ``deadline``: a time
        limit is not overrun by a solve that cannot finish (a quick evaluation stands in, refinable later)."""
        import time

        return full and (deadline is None or time.perf_counter() + self.slowest_full <= deadline)

    def _timed(self, key: Key, full: bool, deadline: float | None = None, effort: int = 0) -> Evaluation:
        import time

        t0 = time.perf_counter()
        ev = self._evaluate(key, full, deadline, effort)
        if full:
            self.slowest_full = max(self.slowest_full, time.perf_counter() - t0)
        return ev

    def evaluate(self, i: int, j: int, v: str = "", full: bool = True, budget: Budget | None = None,
                 effort: int = 0) -> Evaluation:
        """The interval's evaluation: cached, unless ``full`` or ``effort`` asks for more than the cache holds.

        ``effort`` multiplies the solvers' budgets by ``EFFORT_GROWTH ** effort``; a re-evaluation keeps
        the better value and the better bound of the two (both are valid).  ``budget`` cuts the solvers
        at its wall-clock deadline, or is charged the evaluation's deterministic work.
        """
        deadline = budget.deadline if budget is not None else None
        ev = self.evaluated.get((i, j, v))
        if ev is not None and (ev.full or not full) and ev.effort >= effort:
            return ev
        sig = self.space.signature(i, j, v)
        ev = self.cache.get(sig)
        if ev is None or full and not ev.full or ev.effort < effort:
            old = ev
            ev = self._timed((i, j, v), full, deadline, effort)
            self.evaluations += 1
            if budget is not None:
                budget.charge(ev.work, ev.capped)
            if old is not None and old.full:  # keep the better plan and the better bound
                keep = old if old.cost < ev.cost else ev
                ev = replace(keep, bound=min(keep.cost, max(old.bound, ev.bound)), effort=effort)
            self.cache[sig] = ev
        self.evaluated[(i, j, v)] = ev
        return ev

    def _evaluate(self, key: Key, full: bool = True, deadline: float | None = None, effort: int = 0) -> Evaluation:
        """:meth:`_slicings`, with the deterministic work it took."""
        w0, c0 = work_done(), wall_capped()
        ev = self._slicings(key, full, deadline, effort)
        return replace(ev, work=work_done() - w0 + SLICING_WORK * max(1, ev.tried), capped=wall_capped() - c0)

    def _slicings(self, key: Key, full: bool = True, deadline: float | None = None, effort: int = 0) -> Evaluation:
        """Slicings in order of their key; stop when no remaining key can beat the best placed one.

        ``deadline`` (``time.perf_counter()``) cuts the solvers short: what they
        leave undecided stays a bound, so the evaluation is valid, only weaker.
        """
        space = self.space
        net, chip, st = space.net, space.chip, space.settings
        ops = space.names[key[0]:key[1] + 1]
        kin, kout = space.kept(*key)
        pchip = space.inner_chip(kin + kout)
        budget = self.pack_time * EFFORT_GROWTH ** min(effort, MAX_EFFORT)
        if pchip is None:  # the handed-over tensors leave no room: no slicing
            return Evaluation(INF, INF, 0, 0, 1, None, None, 0, 0, 0, True, effort)
        cands = sorted(space.slicings(ops, kin, kout),
                       key=lambda c: (c.key, c.n * c.c * c.h * c.w, c.n, c.c, c.h, c.w))
        best: Evaluation | None = None
        bound = INF
        exact = unknown = 0
        partial = False
        for c in cands:
            if best is not None and c.key >= best.cost:
                break
            if c.free_loads:
                sl = slice_group(net, list(ops), 1, 1, n_unit=n_unit(net, chip, ops), h_ratio=st.h_ratio)
                ahead = [without_kept(schedule_group(net, chip, sl, d, kin, kout)) for d in LOOKAHEAD]
                room, _ = packing(pchip, net, st, without_kept(c.table))  # the room only: loads are chosen here
                if room is None:
                    continue
                lp = solve_loads(net, room, without_kept(c.table), ahead, space.objective, st.bank_rule,
                                 budget, self.seed,
                                 upper=best.cost if best is not None else None, solve=full, deadline=deadline)
                exact += lp.solved
                partial |= not full and lp.status != "optimal" and lp.bound < (best.cost if best else INF)
                if lp.status != "infeasible":
                    bound = min(bound, lp.bound)
                if lp.value is not None and (best is None or lp.value < best.cost):
                    assert lp.loads is not None and lp.offsets is not None  # a value comes with both
                    pos = {o: k for k, o in enumerate(ops)}
                    loads = tuple(sorted((pos[o], r, s) for o, (r, s) in lp.loads.items()))
                    best = Evaluation(lp.value, 0, c.n, c.h, 1, loads, tuple(sorted(lp.offsets.items())))
                unknown += lp.value is None and lp.status != "infeasible"
                continue
            table = without_kept(c.table)
            room, inner = packing(pchip, net, st, table)  # less than pchip for an untrusted group
            if room is None:
                continue
            moved = inner is not table  # packed with its weight loads where TPU-MLIR moves them
            alloc = multi_start_allocate(net, room, inner, st.bank_rule)
            if alloc is not None:  # offsets that pack the moved loads pack the table's own: kept with it
                best = Evaluation(c.key, 0, c.n, c.h, c.w, None, tuple(sorted(alloc.offsets.items())) if moved
                                  else None, c=c.c)
                continue
            if not exact_packing_allowed(st, table):  # what only the exact packer places, TPU-MLIR's may not
                continue
            if not full:  # the quick evaluation leaves exact packing to the refinement: the key stays a bound
                bound = min(bound, c.key)
                partial = True
                continue
            exact += 1
            res = exact_pack(net, room, inner, st.bank_rule, budget, self.seed, self.workers, deadline=deadline)
            if res is None:
                continue
            if res == "unknown":
                unknown += 1
                bound = min(bound, c.key)
                continue
            assert isinstance(res, dict)
            best = Evaluation(c.key, 0, c.n, c.h, c.w, None, tuple(sorted(res.items())), c=c.c)
        if best is None:
            return Evaluation(INF, bound, 0, 0, 1, None, None, len(cands), exact, unknown, not partial, effort)
        return replace(best, bound=min(bound, best.cost), tried=len(cands), packed_exactly=exact, unknown=unknown,
                       full=not partial, effort=effort)

    def materialize(self, i: int, j: int, v: str = "", polish: bool = False) -> GroupPlan:
        """The placed group for an evaluated candidate, with its costs (as evaluated: no new solve);
        ``polish`` reduces its soft bank conflicts (:func:`lgopt.group.alloc.polish_banks`)."""
        space = self.space
        ev = self.evaluate(i, j, v, full=False)
        if ev.cost >= INF:
            raise ValueError(f"interval {i}..{j} {v} has no feasible slicing")
        ops = space.names[i:j + 1]
        kin, kout = space.kept(i, j, v)
        g = schedule(space.net, space.chip, ops, ev.n, ev.h, space.settings.h_ratio, kept_in=kin, kept_out=kout,
                     w_slices=ev.w, c_slices=ev.c, reload_columns=space.settings.reload_columns)
        pinned = pin_kept(space.chip, g)
        assert pinned is not None
        g, pchip = pinned
        room, _ = packing(pchip, space.net, space.settings, without_kept(g))
        assert room is not None  # the evaluation packed it
        if ev.loads is not None:
            g = with_loads(g, {ops[k]: (r, s) for k, r, s in ev.loads})
        if ev.offsets is None:
            alloc = multi_start_allocate(space.net, room, without_kept(g), space.settings.bank_rule)
            assert alloc is not None
            offs = dict(alloc.offsets)
        else:
            offs = dict(ev.offsets)
        return place_chosen(space.net, space.chip, g, offs, room, space.settings.bank_rule, polish)


_WORKER: Evaluator | None = None  # in a worker process: its forked copy of the parent's evaluator


def _init_worker(evaluator: Evaluator) -> None:
    """Keep the parent's evaluator; leave Ctrl-C to the parent (which keeps the best plan and stops the pool)
    instead of every worker printing its own traceback."""
    import signal

    global _WORKER
    _WORKER = evaluator
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _evaluate_batch(task: tuple[list[tuple[tuple, Key]], float | None, bool, float]
                    ) -> list[tuple[tuple, Evaluation]]:
    import time

    batch, deadline, full, slowest = task
    ev = _WORKER
    assert ev is not None
    ev.slowest_full = slowest  # the parent's view: a full evaluation is tried only if it can finish
    out = []
    for sig, iv in batch:
        if deadline is not None and time.perf_counter() > deadline:
            break  # unevaluated intervals keep their lower bound: the result stays valid, only weaker
        out.append((sig, ev._evaluate(iv, ev._full_in_time(full, deadline), deadline)))
    return out



def _daemonic() -> bool:
    """True in a daemonic process (a Dask worker, say), which may not start the evaluation pool: it then
    evaluates in-process, computing the same figures one after the other."""
    import multiprocessing as mp

    return bool(mp.current_process().daemon)

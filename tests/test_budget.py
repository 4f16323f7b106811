"""Deterministic budgets: a cpsat search stopped by work units stops at the same point whether its
candidates are evaluated in worker processes or one after the other (as on a Dask worker), so a time-limited
configuration gives the same plan on any backend; the flags refuse what means nothing."""

import json

import pytest
from conftest import PROBLEMS
from test_bad_input import _one_line
from test_cli import run

import lgopt.strategies.cpsat.evaluate as evaluate
from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_model
from lgopt.report.compare import run_strategy
from lgopt.strategies.cpsat.budget import Budget
from lgopt.strategies.cpsat.common import CpsatSettings
from lgopt.strategies.registry import StrategyOptions, parse_strategy
from lgopt.strategies.settings import SearchSettings

RESNET = str(PROBLEMS / "resnet18.json")


def _cpsat(units, in_process, monkeypatch):
    pools = []
    real = evaluate.Evaluator._workers

    def workers(self, processes):
        pools.append(processes)
        return real(self, processes)

    monkeypatch.setattr(evaluate.Evaluator, "_workers", workers)
    monkeypatch.setattr(evaluate, "_daemonic", lambda: in_process)  # as in a daemonic (Dask) worker
    options = StrategyOptions(SearchSettings(), CpsatSettings(time_limit=units, deterministic=True, workers=2))
    plan, _, _ = run_strategy(load_model(RESNET), get_chip("bm1688"), parse_strategy("cpsat"), options)
    return plan, pools


def test_a_deterministic_budget_stops_at_the_same_point_in_worker_processes_or_not(monkeypatch):
    pooled, pools = _cpsat(0.5, False, monkeypatch)
    assert pools, "the candidates were meant to be evaluated in worker processes"
    serial, pools = _cpsat(0.5, True, monkeypatch)
    assert not pools
    assert pooled.status == serial.status == "time_limit"  # the budget, not the search, ended it
    assert pooled.solver["work_units"] == serial.solver["work_units"] >= 0.5
    for key in ("value", "bound", "intervals_evaluated", "distinct_evaluations", "pricing_rounds"):
        assert pooled.solver[key] == serial.solver[key], key
    assert [(g.ops, g.n_slices, g.h_slices, [b.offset for b in g.buffers]) for g in pooled.groups] == \
        [(g.ops, g.n_slices, g.h_slices, [b.offset for b in g.buffers]) for g in serial.groups]


def test_more_units_search_further(monkeypatch):
    short, _ = _cpsat(0.5, True, monkeypatch)
    long, _ = _cpsat(20, True, monkeypatch)
    assert long.solver["intervals_evaluated"] > short.solver["intervals_evaluated"]
    assert long.status == "optimal" and long.solver["value"] <= short.solver["value"]
    assert long.solver["work_units"] < 20  # it ended on its own, having spent what it needed


def test_budget_kinds():
    wall = Budget(1e9)
    wall.charge(5.0)  # work does not count against wall seconds
    assert not wall.expired() and wall.deadline is not None and wall.spent() < 60
    units = Budget(2.0, deterministic=True)
    assert units.deadline is None and not units.expired()
    units.charge(2.0)
    assert units.expired() and units.left() == 0.0
    part = units.share(1.0)
    assert part.deterministic and part.charged == 0.0


def test_solve_json_reports_the_units_spent(capsys, tmp_path):
    code, out, err = run(capsys, "solve", RESNET, "--chip", "bm1688", "--strategy", "cpsat",
                         "--deterministic-time", "0.5", "-o", str(tmp_path / "p.json"))
    assert code == 0 and "verified OK" in out, err
    solver = json.loads((tmp_path / "p.json").read_text())["solver"]
    assert solver["work_units"] >= 0.5 and solver["solver_status"] == "time_limit"


@pytest.mark.parametrize("argv,needle", [
    (["solve", RESNET, "--time-limit", "5", "--deterministic-time", "2"], "not allowed with"),
    (["solve", RESNET, "--deterministic-time", "0"], "--deterministic-time"),
    (["compare", RESNET, "--deterministic-time", "inf"], "--deterministic-time"),
    (["sweep", RESNET, "--set", "lmem_bytes=64K", "--deterministic-time", "nan"], "--deterministic-time"),
])
def test_meaningless_budgets_refused(capsys, argv, needle):
    _one_line(*run(capsys, *argv)[::2], needle)


def test_a_solve_cut_by_its_wall_clock_guard_is_counted():
    from ortools.sat.python import cp_model

    from lgopt.group.solver import make_solver, solve_interruptibly, wall_capped

    m = cp_model.CpModel()
    xs = [m.new_int_var(0, 100, f"x{i}") for i in range(60)]
    for a, b in zip(xs, xs[1:]):
        m.add(a != b)
    m.add_all_different(xs[:50])
    m.maximize(sum(xs))  # not proved optimal within the guard below
    before = wall_capped()
    s = make_solver(workers=1, seed=0, deterministic=0.01)  # stops on its deterministic limit: not counted
    solve_interruptibly(s, m)
    assert wall_capped() == before
    s = make_solver(workers=1, seed=0, deterministic=1000.0)
    s.parameters.max_time_in_seconds = 0.05  # the guard, far below what the deterministic limit allows
    solve_interruptibly(s, m)
    assert wall_capped() == before + 1

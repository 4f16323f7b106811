import os
from functools import cache
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "problems"
SHARED = ROOT.parent / "shared"  # beside the checkout: tests that need it skip, saying so, when it is absent
FIXTURES = SHARED / "fixtures"
CAL = SHARED / "calibration"
collect_ignore_glob = ["data/*"]  # test data and the scripts that made them (which need torch, TPU-MLIR)


def need(p: Path) -> Path:
    """``p``, or skip the test when the shared data it is part of is not beside the checkout."""
    if not p.exists():
        pytest.skip(f"{p} not found (shared data not beside the checkout)")
    return p


@cache
def net_of(path: str):
    """A model file loaded once per session (f16)."""
    from lgopt.io.problem import load_model

    return load_model(path, dtype="f16")


def assert_slices_cost_more(chip, net, op, model) -> None:
    """The cost-model contract the bounds rely on: H slices add up to at least the whole op plus one issue
    per extra slice."""
    from lgopt.cost.cycles import tiu_cycles
    from lgopt.cost.model import SliceShape

    out = net.tensor(op.outputs[0])
    in_h = net.tensor(op.inputs[0]).h if op.inputs else out.h
    whole = tiu_cycles(chip, net, op, SliceShape(out.n, out.h, in_h))
    for k in (2, 3, 5):
        if out.h < k or not op.h_split:
            continue
        rows = [out.h // k + (i < out.h % k) for i in range(k)]
        ins = [max(1, in_h * r // out.h) for r in rows]
        parts = sum(tiu_cycles(chip, net, op, SliceShape(out.n, r, i)) for r, i in zip(rows, ins))
        assert parts >= whole + (k - 1) * model.issue_cycles, (op.name, k)


@pytest.fixture(scope="session")
def problems_dir() -> Path:
    return PROBLEMS


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not (FIXTURES / "onnx").is_dir():
        pytest.skip("shared/fixtures not beside the checkout")
    return FIXTURES


# CI replays a fixed set of examples so a red run is reproducible; locally hypothesis explores.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("deep", max_examples=2000, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "default"))

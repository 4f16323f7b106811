"""TPU-MLIR's own groups sliced anew for the cores (lgopt.tpumlir.reslice): the same groups, other H counts, priced
lower, verified; nothing on one core."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES, need

from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_model
from lgopt.report.verdict import verify
from lgopt.strategies.settings import SearchSettings
from lgopt.tpumlir.grouping import score
from lgopt.tpumlir.reslice import resliced, slice_counts


def _case(model: str, cache: str, chip: str, dtype: str, cores: int):
    net = load_model(str(need(FIXTURES / "onnx" / f"{model}.weightless.onnx")), dtype=dtype)
    path = need(FIXTURES / "tpu-mlir" / f"{cache}.layer_group_cache.json")
    c = get_chip(chip, {"used_cores": cores})
    return net, c, path, score(net, c, str(path))[0]


@pytest.mark.parametrize("model,cache,chip,dtype,cores", [
    ("yolov5s_like", "yolov5s_like_bm1688_int8_2core", "bm1688", "int8", 2),
    ("resnet18", "resnet18_bm1690_f16_8core", "bm1690", "f16", 8),
])
def test_a_group_resliced_for_the_cores_keeps_the_groups_and_prices_lower(model, cache, chip, dtype, cores):
    net, c, path, own = _case(model, cache, chip, dtype, cores)
    best, changed = resliced(net, c, Path(path), SearchSettings(), own)
    assert changed >= 1 and best.cost["cycles"] < own.cost["cycles"]  # both fixtures have a group worth recutting
    assert verify(net, best) == []
    before = {frozenset(g.ops): g for g in own.groups}
    assert set(before) == {frozenset(g.ops) for g in best.groups}  # TPU-MLIR's groups, as they were
    recut = [(before[frozenset(g.ops)], g) for g in best.groups if g.h_slices != before[frozenset(g.ops)].h_slices]
    assert len(recut) == changed
    for old, new in recut:  # only H moves, to a count that shares the group over the cores
        assert new.n_slices == old.n_slices and new.h_slices in slice_counts(old.h_slices, cores)
        assert len(new.chunks) == min(new.num_slices, cores)


def test_on_one_core_the_reference_is_returned_as_it_is():
    net, c, path, own = _case("resnet18", "resnet18_bm1688_f16", "bm1688", "f16", 1)
    assert resliced(net, c, Path(path), SearchSettings(), own) == (own, 0)


def test_a_resliced_plan_below_the_searchs_bound_lowers_the_bound_it_reports():
    """Its slice counts need not be ones the search offers, so a search's bound above the resliced plan no longer
    bounds what the plan came from: the bound reported is the plan's own cycles, the gap 0, never a negative gap
    made 0 under a bound the plan beats."""
    from dataclasses import replace

    from lgopt.tpumlir.space import ReferenceSpace, _or_resliced

    net, c, path, own = _case("yolov5s_like", "yolov5s_like_bm1688_int8_2core", "bm1688", "int8", 2)
    best, _ = resliced(net, c, Path(path), SearchSettings(), own)
    cycles = int(best.cost["cycles"])
    searched = replace(own, solver={"objective": "cycles", "value": int(own.cost["cycles"]), "bound": cycles + 1000})
    got = _or_resliced(net, c, SearchSettings(), ReferenceSpace(str(path)), own, searched)
    assert got.cost["cycles"] == cycles and got.solver["bound"] == cycles and got.solver["gap"] == 0.0
    low = replace(searched, solver={**searched.solver, "bound": cycles - 1000})
    kept = _or_resliced(net, c, SearchSettings(), ReferenceSpace(str(path)), own, low).solver
    assert kept["bound"] == cycles - 1000 and kept["gap"] == pytest.approx(1000 / cycles, abs=1e-6)

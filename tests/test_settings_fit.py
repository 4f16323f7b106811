"""The tools of issue 34's measurements, without TPU-MLIR: variants drawn from TPU-MLIR's own grouping (what
``benchmarks/settings.py`` compiles) and the fit of the several-core terms on measured totals."""

from __future__ import annotations

import json
from dataclasses import replace

from conftest import FIXTURES, need

from lgopt.cost.registry import FITTED
from lgopt.errors import LgoptError
from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_model, load_problem
from lgopt.report.verdict import verify
from lgopt.strategies.greedy import greedy
from lgopt.tpumlir.corefit import Measured, _registered, _WithCores, fit_cores, price
from lgopt.tpumlir.grouping import score
from lgopt.tpumlir.variants import draw, subfuncs


def _ops_of(cache):
    """Each subfunction's op names in order, as the scoring tool's ops.json gives them (here: from the cache's
    groups and global layers, which list every op)."""
    out = {}
    for sub in subfuncs(cache):
        named = {g["func_start_idx"] + k: loc for g in cache[sub]["GroupLayer"] for k, loc in enumerate(g["locs"])}
        named.update({g["func_idx"]: g["loc"] for g in cache[sub]["GlobalLayer"]})
        out[sub] = [named[i] for i in range(max(named) + 1)]
    return out


def test_variants_are_distinct_deterministic_and_read_or_refused(tmp_path):
    path = need(FIXTURES / "tpu-mlir" / "resnet18_bm1688_int8_2core.layer_group_cache.json")
    own = json.loads(path.read_text())
    ops = _ops_of(own)
    a = draw(own, ops, {}, cores=2, seed=3, limit=12)
    b = draw(own, ops, {}, cores=2, seed=3, limit=12)
    assert [v.cache for v in a] == [v.cache for v in b] and len(a) == 12
    assert {v.kind for v in a} >= {"secs", "split", "merge"}
    assert len({json.dumps(v.cache, sort_keys=True) for v in a}) == len(a)
    assert any("the 2 cores" in v.description for v in a)  # a one-slice group given one H slice per core
    net = load_model(str(need(FIXTURES / "onnx" / "resnet18.weightless.onnx")), dtype="int8")
    chip = get_chip("bm1688", {"used_cores": 2})
    read = 0
    for v in a:
        f = tmp_path / f"{v.name}.json"
        f.write_text(json.dumps(v.cache))
        try:
            plan, _ = score(net, chip, str(f))
        except LgoptError:
            continue  # a variant lgopt's rules refuse: a label, as TPU-MLIR's refusals are
        assert verify(net, plan) == []
        read += 1
    assert read >= len(a) // 2


def test_core_terms_are_recovered_from_totals():
    """Totals priced with known terms (slowdown 1.3, sync 3,000) are fitted back to those terms, the one-core
    constants held; the held-out model's error is then 0."""
    net = load_problem("problems/resnet18.json")
    chip = replace(get_chip("bm1688", {"used_cores": 2}), cost_model=FITTED.name)
    rows = []
    for lmem in ("64K", "96K", "128K"):
        plan = greedy(net, replace(chip, lmem_bytes=int(lmem[:-1]) * 1024))
        rows.append(Measured(f"m{lmem}", net, plan, 0))
    with _registered(_WithCores(FITTED, 1.3, 3000, "truth")) as name:
        truth = price(chip, [replace(r, cycles=1) for r in rows], name)
    measured = [replace(r, cycles=int(t)) for r, t in zip(rows, truth)]
    assert any(len(g.chunks) == 2 for r in measured for g in r.plan.groups), "the terms must matter"
    f = fit_cores(chip, FITTED, measured, held_out=("m128K",))
    assert (f.slowdown, f.sync) == (1.3, 3000) and f.train_error < 1e-3 and f.held_error is not None
    assert f.held_error < 1e-3 and f.n_train == 2 and f.n_held == 1

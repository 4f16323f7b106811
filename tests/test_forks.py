"""TPU-MLIR's time-step pass cannot slice a fork whose uses want different rows through an op that takes no
margins (lgopt.tpumlir.forks), and the compiler space keeps new groups clear of it (settings.packing)."""

from pathlib import Path

import pytest
from onnx_graphs import unet_like

from lgopt.group.build import schedule
from lgopt.hw.chip import get_chip
from lgopt.io.onnx_import import import_onnx
from lgopt.strategies.settings import SearchSettings, packing
from lgopt.tpumlir.forks import MARGIN_TYPES, estimated_secs, tpumlir_fork
from lgopt.tpumlir.rules import TPU_MLIR_RULES

ROOT = Path(__file__).resolve().parents[1]
CAL = ROOT.parent / "shared" / "calibration"
needs_data = pytest.mark.skipif(not (CAL / "totals.csv").exists(), reason=f"no TPU-MLIR calibration data at {CAL}")


def _unet(tmp_path):
    import onnx

    p = tmp_path / "unet.onnx"
    onnx.save(unet_like(), p)
    return import_onnx(p)


def test_a_pool_on_a_fork_with_a_halo_after_it_is_refused(tmp_path):
    """unet_like: the first conv's output feeds the MaxPool (no margins) and, across the group's edge, the
    decoder's Concat; a dilated 3 x 3 conv after the pool wants halo rows the stored slices do not, so at two or
    more H slices TPU-MLIR's pass fails.  Without the conv after the pool the uses agree and the group passes."""
    net = _unet(tmp_path)
    chip = get_chip("bm1684x")
    conv1, pool, conv2 = (op.name for op in net.ops[:3])
    assert net.op(pool).type == "MaxPool" and "MaxPool" not in MARGIN_TYPES
    why = tpumlir_fork(chip, net, (conv1, pool, conv2), 1)
    assert "cannot take margins" in why and pool in why
    assert tpumlir_fork(chip, net, (conv1, pool), 1) == ""
    assert estimated_secs(chip, net, (conv1, pool, conv2)) == (1, 1)  # small: the rule checks at 2 all the same


def test_the_compiler_space_refuses_such_a_new_group_and_keeps_a_trusted_one(tmp_path):
    from lgopt.strategies.settings import group_shape

    net = _unet(tmp_path)
    chip = get_chip("bm1684x")
    ops = [op.name for op in net.ops[:3]]
    g = schedule(net, chip, ops, 1, 1, None)
    st = SearchSettings(compiler=TPU_MLIR_RULES)
    assert packing(chip, net, st, g)[0] is None
    assert packing(chip, net, SearchSettings(), g)[0] is chip  # outside the compiler space: lgopt runs it
    mine = SearchSettings(compiler=TPU_MLIR_RULES, trusted=frozenset({group_shape(g.ops, 1, 1, 1, 1)}))
    assert packing(chip, net, mine, g)[0] is chip  # TPU-MLIR's own group: it compiled it


@needs_data
def test_the_calibrations_failed_groups_it_catches():
    """Over the calibration's groups the rule flags three that TPU-MLIR failed to build (yolov5s_like / BM1684X's
    v19 and v20 splits at the SPPF's MaxPools, unet_small / BM1688's v19 split at a MaxPool) and passes TPU-MLIR's
    own BM1688 neck group [155-181] at two H slices (its Upsample feeds a 1 x 1 conv: the uses agree)."""
    import pandas as pd

    from lgopt.io.problem import load_model
    from lgopt.tpumlir.grouping import build_groups

    tot = pd.read_csv(CAL / "totals.csv")
    caught = set()
    for r in tot[(tot.status != "ok") & tot.model.isin(["yolov5s_like", "unet_small"])].itertuples():
        if pd.isna(r.failed_group_pos):
            continue
        net = load_model(CAL / "onnx" / f"{r.model}.weightless.onnx", dtype="f16")
        chip = get_chip(r.chip, {"cost_model": "tpu-mlir-1.30"})
        b = build_groups(net, chip, str(CAL / r.cache_file), exact=True)
        g = next(x for x in b.groups if x.index == int(r.failed_group_pos))
        if g.plan is not None and tpumlir_fork(chip, b.net, tuple(g.plan.ops), g.plan.h_slices):
            caught.add((r.model, r.chip, r.variant))
    assert caught >= {("yolov5s_like", "bm1684x", "v19_split"), ("yolov5s_like", "bm1684x", "v20_split"),
                      ("unet_small", "bm1688", "v19_split")}, caught
    net = load_model(CAL / "onnx" / "yolov5s_like.weightless.onnx", dtype="f16")
    chip = get_chip("bm1688", {"cost_model": "tpu-mlir-1.30"})
    b = build_groups(net, chip, str(CAL / "caches" / "yolov5s_like_bm1688" / "opt2.layer_group_cache.json"), exact=True)
    neck = next(g.plan for g in b.groups if g.plan is not None and "/up_1/Resize" in g.plan.ops)
    assert neck.h_slices == 2 and tpumlir_fork(chip, b.net, tuple(neck.ops), neck.h_slices) == ""

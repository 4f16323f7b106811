"""TPU-MLIR's groupings in the seven settings users deploy (INT8 on BM1684X and BM1684, BM1688 INT8 on 1 and 2
cores and F16 on 2, BM1690 F16 and INT8 on 8) read by lgopt from the shared fixture caches (and, for the settings
they leave out, ``tests/data/settings``), built exactly and verified.

What this shows is the reading: every group and slice count of the cache becomes lgopt's (INT8's inserted
requantising ops and casts, ``_si8_mul_scale`` and ``_new_cast`` on BM1684, skipped like F16's casts).  The plan
is read on the cores the cache was compiled for, each group's slices shared over them as TPU-MLIR's codegen
shares them; no cycle figure is asserted here (``benchmarks/settings.py`` measures the prediction)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES, need

from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_model
from lgopt.report.verdict import verify
from lgopt.tpumlir.cache import is_cast, load_cache
from lgopt.tpumlir.grouping import score

CASES = [  # (model, cache, chip, dtype, cores)
    ("resnet18", "resnet18_bm1684x_int8", "bm1684x", "int8", 1),
    ("resnet18", "resnet18_bm1684_int8", "bm1684", "int8", 1),
    ("resnet18", "resnet18_bm1688_int8_2core", "bm1688", "int8", 2),
    ("resnet18", "resnet18_bm1690_f16_8core", "bm1690", "f16", 8),
    ("yolov5s_like", "yolov5s_like_bm1684x_int8", "bm1684x", "int8", 1),
    ("yolov5s_like", "yolov5s_like_bm1688_int8_2core", "bm1688", "int8", 2),
    # the settings the shared fixtures leave out, from tests/data/settings (TPU-MLIR's own opt2)
    ("resnet18", "resnet18_bm1688_int8_1core", "bm1688", "int8", 1),
    ("resnet18", "resnet18_bm1688_f16_2core", "bm1688", "f16", 2),
    ("resnet18", "resnet18_bm1690_int8_8core", "bm1690", "int8", 8),
]
SETTINGS_DATA = Path(__file__).resolve().parent / "data" / "settings"


def _cache(name: str) -> Path:
    own = SETTINGS_DATA / f"{name}.layer_group_cache.json"
    return own if own.exists() else need(FIXTURES / "tpu-mlir" / f"{name}.layer_group_cache.json")


@pytest.mark.parametrize("model,cache,chip,dtype,cores", CASES, ids=[c[1] for c in CASES])
def test_every_setting_reads_exactly_and_verifies(model, cache, chip, dtype, cores):
    onnx = need(FIXTURES / "onnx" / f"{model}.weightless.onnx")
    path = _cache(cache)
    net = load_model(str(onnx), dtype=dtype)
    plan, extra = score(net, get_chip(chip, {"used_cores": cores}), str(path))
    assert verify(net, plan) == [] and not extra["unmapped"]
    built = {(frozenset(g.ops), g.n_slices, g.h_slices) for g in plan.groups}
    theirs = load_cache(str(path))
    # every group of the cache that holds an lgopt op is one of the plan's, at its slice counts
    assert len(built) == sum(1 for g in theirs.groups if not all(is_cast(loc) for loc in g.locs))
    assert all(t.dtype == dtype for t in (net.tensor(x) for x in net.outputs))
    for g in plan.groups:  # TPU-MLIR's shares: one slice on core 0 alone; S slices over min(S, cores) cores
        busy = min(g.num_slices, cores)
        assert len(g.chunks) == busy and g.chunks[0][0] == 0 and g.chunks[-1][1] == g.num_slices



def test_concat_requant_is_an_inserted_op():
    """INT8 lowering puts a MulShift named ``<input op>_to_<Concat op>`` before a Concat whose inputs differ in
    scale (unet_small's skip connections); it runs next to the Concat, not with its input's producer."""
    assert is_cast("/downs.1/downs.1.5/Relu_output_0_Relu_to_/Concat_1_output_0_Concat")
    assert not is_cast("/downs.1/downs.1.5/Relu_output_0_Relu") and not is_cast("/to_out/Conv_output_0_Conv")


def test_a_constant_bm1684_casts_is_an_inserted_op_and_an_int32_deconvolution_is_not():
    """BM1684's INT8 lowering casts a constant as an op of its own (``<weight>_i8``: vit_b_16's position
    embedding); an INT8 ConvTranspose's int32 half (``..._ConvTranspose_i32``) is a real op
    (lgopt.tpumlir.lowering.split_requant), not a cast."""
    assert is_cast("encoder.pos_embedding_i8")
    assert not is_cast("/ups.0/ConvTranspose_output_0_ConvTranspose_i32")


def test_reference_searched_on_several_cores_at_the_margin(capsys):
    """``--reference`` on several cores (INT8 on two BM1688 cores, whose core terms were fitted on 2 cores)
    searches TPU-MLIR's space and replaces its grouping only when predicted the margin faster; the line says by
    which cost model."""
    from test_cli import run

    onnx = need(FIXTURES / "onnx" / "resnet18.weightless.onnx")
    ref = need(FIXTURES / "tpu-mlir" / "resnet18_bm1688_int8_2core.layer_group_cache.json")
    code, out, err = run(capsys, "solve", str(onnx), "--chip", "bm1688", "--cores", "2", "--dtype", "int8",
                         "--reference", str(ref), "--time-limit", "5")
    assert code == 0, err
    assert "trusted only when judged" not in out and "tpu-mlir-1.30-int8" in out
    assert "not 5% faster" in out or "reference grouping is kept" not in out


def test_a_plan_checked_in_another_dtype_names_the_one_it_was_made_in(capsys, tmp_path):
    """A plan solved with ``--dtype int8`` and checked without it is of another model (its tensors' bytes
    differ); ``verify`` says which dtype it was made in, and passes with it."""
    from test_cli import run

    onnx = need(FIXTURES / "onnx" / "resnet18.weightless.onnx")
    plan = tmp_path / "p.json"
    code, _, err = run(capsys, "solve", str(onnx), "--chip", "bm1688", "--dtype", "int8", "--strategy", "greedy",
                       "-o", str(plan))
    assert code == 0, err
    code, out, _ = run(capsys, "verify", "--model", str(onnx), str(plan))
    assert code == 1 and "made for another model" in out and "pass --dtype int8" in out
    code, out, _ = run(capsys, "verify", "--model", str(onnx), str(plan), "--dtype", "int8")
    assert code == 0 and out.startswith("OK")


def test_an_int8_convtranspose_run_globally_moves_its_int32_output_twice():
    """TPU-MLIR lowers an INT8 ConvTranspose to a deconvolution writing int32 and a requantisation to int8, two
    global layers when it runs as one (UNet's upsampling on BM1688 and BM1690): the int32 tensor is written and
    read back.  A whole INT8 ConvTranspose is charged both; the F16 one and the deconvolution the reader cut
    apart (its output int32, its Requant an op of its own) are not charged twice."""
    from lgopt.cost.cycles import global_layer_cost
    from lgopt.model.network import Network, Op, Tensor, Weight

    chip = get_chip("bm1688")

    def up(dtype, out_dtype):
        ts = {"x": Tensor("x", (1, 64, 32, 32), dtype), "y": Tensor("y", (1, 32, 64, 64), out_dtype)}
        op = Op("up", "ConvTranspose", ("x",), ("y",), (Weight("w", (64, 32, 2, 2), dtype, "filter"),),
                {"kernel": (2, 2), "strides": (2, 2), "pads": (0, 0, 0, 0), "group": 1}, local=True)
        return global_layer_cost(chip, Network("n", ts, (op,), ("x",), ("y",)), op)

    whole, cut, f16 = up("int8", "int8"), up("int8", "int32"), up("f16", "f16")
    e = 32 * 64 * 64
    assert whole["traffic_bytes"] == cut["traffic_bytes"] - 3 * e + 8 * e
    assert whole["gdma_cycles"] > cut["gdma_cycles"] > 0 and f16["traffic_bytes"] == 2 * (cut["traffic_bytes"] - 3 * e)

"""TPU-MLIR's INT8 lowering as the reader holds it: a ``GROUP_SMALL_C`` group's tensors rows over the lanes
(lgopt.tpumlir.smallc) and an INT8 activation run as a table lookup (lgopt.hw.sizing.table_lookup).

ViT-B in INT8 on BM1688 runs each attention Softmax in f16 between two casts, a group of three TPU-MLIR ops;
held channels over the lanes its ``1x12x197x197`` scores overflow a lane, held as TPU-MLIR holds them they fit.
The model here is the same pattern at a size a test builds in a moment."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx_graphs import G

from lgopt.hw.chip import get_chip
from lgopt.hw.sizing import LUT_ENTRIES, scratch_bytes, table_lookup
from lgopt.io.onnx_import import import_onnx
from lgopt.model.network import network_digest
from lgopt.report.verdict import verify
from lgopt.tpumlir.cache import load_cache
from lgopt.tpumlir.grouping import GroupingInfeasible, score
from lgopt.tpumlir.lowering import lower_like, network_of


def _scores(tmp_path, heads: int, tokens: int):
    """x ``[1, heads, tokens, tokens]`` -> MatMul(x, x) -> Softmax over the last axis, in INT8."""
    g = G((1, heads, tokens, tokens))
    s = g.n("MatMul", ["x", "x"])
    p = g.n("Softmax", [s], axis=-1)
    g.out(p)
    path = tmp_path / "scores.onnx"
    onnx.save(g.model(), str(path))
    return import_onnx(path, dtype="int8"), s, p


def _cache(tmp_path, s: str, p: str) -> str:
    """TPU-MLIR's grouping of it: the MatMul global, the Softmax in a group between its two casts."""
    groups = [{"locs": [f"{s}_MatMul{p}_Softmax_f16", f"{p}_Softmax", f"{p}_Softmax_ui8"],
               "shape_secs": [1, 1, 1, 1, 1], "func_start_idx": 1, "func_end_idx": 3, "group_cost": 0}]
    glob = [{"loc": f"{s}_MatMul", "func_idx": 0}]
    path = tmp_path / "scores.layer_group_cache.json"
    path.write_text(json.dumps({"opt": 2, "subfunc_0": {"GroupLayer": groups, "GlobalLayer": glob}}))
    return str(path)


def test_a_small_c_group_holds_its_scores_rows_over_the_lanes(tmp_path):
    net, s, p = _scores(tmp_path, 12, 197)
    cache = _cache(tmp_path, s, p)
    low, notes = lower_like(net, load_cache(cache), get_chip("bm1688"))
    assert low.tensor(s).rows_lanes and low.tensor(p).rows_lanes and len(notes) == 1 and "GROUP_SMALL_C" in notes[0]
    assert network_digest(low) != network_digest(net)  # a plan of it is checked on it, not on the unlowered one
    # BM1684 never types a group so; 20 channels, at least half of BM1688's 32 lanes and 20 x 197 rows not a
    # multiple of them, are not remapped either
    assert lower_like(net, load_cache(cache), get_chip("bm1684"))[0] is net
    wide, s2, p2 = _scores(tmp_path, 20, 197)
    assert not lower_like(wide, load_cache(_cache(tmp_path, s2, p2)), get_chip("bm1688"))[0].tensor(s2).rows_lanes


def test_the_softmax_group_loads_and_verifies_only_held_as_tpu_mlir_holds_it(tmp_path):
    net, s, p = _scores(tmp_path, 12, 197)
    cache = _cache(tmp_path, s, p)
    chip = get_chip("bm1688", {"used_cores": 2})
    plan, info = score(net, chip, cache)
    assert verify(net, plan) == [] and any("GROUP_SMALL_C" in x for x in info["lowered"])
    assert network_of(net, plan).tensor(s).rows_lanes  # rebuilt from the plan's cache and chip
    # held channels over the lanes each of the scores would take 197 x 197 bytes of 12 of the 32 lanes; rows
    # over the lanes, 7 rows of 12 x 197 a lane
    held = [b.size for b in plan.groups[0].buffers if b.name in (s, p)]
    assert held and all(size == 7 * 12 * 197 + 28 for size in held)  # EU-aligned (16 bytes on BM1688)


@pytest.mark.parametrize("chip_name, dtype, lut", [("bm1688", "int8", True), ("bm1684x", "int8", True),
                                                   ("bm1688", "f16", False), ("bm1684", "int8", False)])
def test_an_int8_activation_is_a_table_lookup_with_no_work_buffer(tmp_path, chip_name, dtype, lut):
    g = G((1, 8, 16, 16), opset=20)
    y = g.n("Gelu", [g.conv("x", 8, 8)])  # after a conv: an NCHW activation, 8 channels over the lanes
    g.out(y)
    path = tmp_path / "gelu.onnx"
    onnx.save(g.model(), str(path))
    net = import_onnx(path, dtype=dtype)
    op, chip = next(o for o in net.ops if o.type == "Gelu"), get_chip(chip_name)
    assert table_lookup(net, op) is (dtype == "int8")  # BM1684's backend sizes it its own way
    rows16, rows1 = (scratch_bytes(chip, net, op, (1, h, 16, None), (1, h, 16, None)) for h in (16, 1))
    if lut:  # its table, aligned, whatever the slice: no copy of it
        assert rows16 == rows1 == max(LUT_ENTRIES, chip.eu_bytes)
    else:  # the float series' work copies grow with the slice
        assert rows16 > rows1


def _channels_last(tmp_path, dtype: str, act: bool = False):
    """x ``[1, 16, 16, 16]`` -> Transpose to channels-last -> LayerNorm over the channels (-> Sigmoid) -> Transpose
    back: ConvNeXt's block at a size a test builds in a moment."""
    g = G((1, 16, 16, 16))
    a = g.n("Transpose", ["x"], perm=[0, 2, 3, 1])
    ln = g.n("LayerNormalization", [a, g.w([16]), g.w([16])], axis=-1)
    if act:
        ln = g.n("Sigmoid", [ln])
    b = g.n("Transpose", [ln], perm=[0, 3, 1, 2])
    g.out(b)
    path = tmp_path / "block.onnx"
    onnx.save(g.model(), str(path))
    return import_onnx(path, dtype=dtype), a, ln, b


def _block_cache(tmp_path, locs: list[str], globs: list[str], secs: list[int]) -> str:
    groups = [{"locs": locs, "shape_secs": secs, "func_start_idx": 1, "func_end_idx": len(locs), "group_cost": 0}]
    glob = [{"loc": loc, "func_idx": 0 if i == 0 else len(locs) + 1} for i, loc in enumerate(globs)]
    path = tmp_path / "block.layer_group_cache.json"
    path.write_text(json.dumps({"opt": 2, "subfunc_0": {"GroupLayer": groups, "GlobalLayer": glob}}))
    return str(path)


def test_hsecs_of_a_small_c_channels_last_group_cut_its_columns(tmp_path):
    """TPU-MLIR views a small-C group of channels-last tensors as rows over the lanes, columns in its H: its
    ``hsecs`` cut the channels a LayerNorm normalises, so the group is refused (ConvNeXt's LayerNorm groups in
    INT8 on BM1684X and BM1688: 15 of 15 such scorings failed to allocate), while ``nsecs`` cut its rows."""
    net, a, ln, b = _channels_last(tmp_path, "int8")
    locs = [f"{a}_Transpose{ln}_LayerNormalization_f16", f"{ln}_LayerNormalization",
            f"{ln}_LayerNormalization{b}_Transpose_si8"]
    globs = [f"{a}_Transpose", f"{b}_Transpose"]
    chip = get_chip("bm1688")
    with pytest.raises(GroupingInfeasible, match="may not slice W"):
        score(net, chip, _block_cache(tmp_path, locs, globs, [1, 1, 1, 2, 1]))
    plan, _ = score(net, chip, _block_cache(tmp_path, locs, globs, [2, 1, 1, 1, 1]))
    assert verify(net, plan) == [] and (plan.groups[0].h_slices, plan.groups[0].w_slices) == (2, 1)
    # a one-op group of F16 is not small-C (no casts): its hsecs cut the rows, as written
    f16, a, ln, b = _channels_last(tmp_path, "f16")
    plan, _ = score(f16, chip, _block_cache(tmp_path, [f"{ln}_LayerNormalization"],
                                            [f"{a}_Transpose", f"{b}_Transpose"], [1, 1, 1, 2, 1]))
    assert verify(f16, plan) == [] and plan.groups[0].h_slices == 2


def test_hsecs_of_a_small_c_group_cut_its_columns_in_f16_on_bm1688(tmp_path):
    """In F16 TPU-MLIR 1.30.2 cuts a small-C group's columns at ``hsecs > 1`` on BM1688 as it does in INT8 (ConvNeXt's
    ``LayerNorm -> MatMul -> Gelu -> MatMul`` at ``hsecs = 2``: refused on 2 cores, 3 of 3, and on one at every
    ``nsecs`` tried), and runs them as row sections on BM1684X (it compiles)."""
    net, a, act, b = _channels_last(tmp_path, "f16", act=True)
    ln = next(o.outputs[0] for o in net.ops if o.type == "LayerNormalization")
    locs = [f"{ln}_LayerNormalization", f"{act}_Sigmoid"]
    globs = [f"{a}_Transpose", f"{b}_Transpose"]
    cache = _block_cache(tmp_path, locs, globs, [1, 1, 1, 2, 1])
    with pytest.raises(GroupingInfeasible, match="may not slice W"):
        score(net, get_chip("bm1688"), cache)
    plan, _ = score(net, get_chip("bm1684x"), cache)
    assert verify(net, plan) == [] and (plan.groups[0].h_slices, plan.groups[0].w_slices) == (2, 1)


def test_a_group_naming_a_permute_is_refused(tmp_path):
    """TPU-MLIR runs a permute it keeps as an op of its own as a global layer only: a cache group naming one
    (a variant merging two groups over it) never compiled, where lgopt could hold the move whole."""
    net, a, ln, b = _channels_last(tmp_path, "f16")
    cache = _block_cache(tmp_path, [f"{a}_Transpose", f"{ln}_LayerNormalization"], [f"{b}_Transpose"],
                         [1, 1, 1, 1, 1])
    with pytest.raises(GroupingInfeasible, match="permute TPU-MLIR names in the group"):
        score(net, get_chip("bm1684x"), cache)


def test_sections_beyond_a_one_row_output_still_hold_the_weights(tmp_path):
    """``hsecs = 2`` above a global pool's one-row output runs one section (TPU-MLIR drops the empty one), but its
    allocator still sees two and holds every weight for the whole loop: MNASNet's 56-op tail group so was refused
    on BM1688 INT8 (1 and 2 cores), and compiles at ``hsecs = 1``.  Fourteen 512 x 512 convs: their weights
    streamed fit, held beside the 28 x 28 activations they do not."""
    g = G((1, 512, 28, 28))
    x = "x"
    for _ in range(14):
        x = g.conv(x, 512, 512, k=1)
    g.out(g.n("GlobalAveragePool", [x]))
    path = tmp_path / "tail.onnx"
    onnx.save(g.model(), str(path))
    net = import_onnx(path, dtype="int8")

    def cache(hsecs: int) -> str:
        locs = [f"{op.outputs[0]}_{op.type}" for op in net.ops]
        p = tmp_path / "tail.layer_group_cache.json"
        p.write_text(json.dumps({"opt": 2, "subfunc_0": {"GroupLayer": [
            {"locs": locs, "shape_secs": [1, 1, 1, hsecs, 1], "func_start_idx": 0, "func_end_idx": len(locs) - 1,
             "group_cost": 0}], "GlobalLayer": []}}))
        return str(p)

    chip = get_chip("bm1688", {"used_cores": 2})  # several cores: the empty section itself is not refused
    plan, _ = score(net, chip, cache(1))
    assert verify(net, plan) == [] and plan.groups[0].cost["lmem_peak"] < chip.lmem_bytes
    with pytest.raises(GroupingInfeasible, match="LMEM allocation failed"):
        score(net, chip, cache(2))


def test_sections_beyond_a_one_row_output_of_a_group_without_weights_are_refused_on_several_cores(tmp_path):
    """On several cores TPU-MLIR refused every group at ``hsecs = 2`` above a one-row pool that holds no weight
    (BM1688 F16 on 2 cores: MNASNet's mean, MobileNetV2's pool, ResNet-18's add and pool; ResNet-18 INT8 too),
    while the same tail with its conv compiles; on one core F16 drops the empty section and runs one."""
    g = G((1, 64, 7, 7))
    y = g.conv("x", 64, 64, k=1)
    s = g.n("Add", [y, "x"])
    g.out(g.n("GlobalAveragePool", [s]))
    path = tmp_path / "tail.onnx"
    onnx.save(g.model(), str(path))
    net = import_onnx(path, dtype="f16")

    def cache(ops) -> str:
        locs = [f"{op.outputs[0]}_{op.type}" for op in ops]
        glob = [{"loc": f"{op.outputs[0]}_{op.type}", "func_idx": 0} for op in net.ops if op not in ops]
        p = tmp_path / "tail.layer_group_cache.json"
        p.write_text(json.dumps({"opt": 2, "subfunc_0": {"GroupLayer": [
            {"locs": locs, "shape_secs": [1, 1, 1, 2, 1], "func_start_idx": len(glob), "group_cost": 0,
             "func_end_idx": len(glob) + len(locs) - 1}], "GlobalLayer": glob}}))
        return str(p)

    two = get_chip("bm1688", {"used_cores": 2})
    plan, _ = score(net, two, cache(net.ops))  # with the conv's weight: built, one section
    assert verify(net, plan) == [] and plan.groups[0].h_slices == 1
    with pytest.raises(GroupingInfeasible, match="holds no weight"):
        score(net, two, cache(net.ops[1:]))
    plan, _ = score(net, get_chip("bm1688"), cache(net.ops[1:]))  # one core: the empty section dropped
    assert verify(net, plan) == []

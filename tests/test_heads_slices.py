"""Channel (heads) slicing (issue 16): an attention's heads lie on the channels of ``[B, heads, T, D]``, and a group
whose every op keeps each channel to itself can be cut into runs of heads, TPU-MLIR's ``csecs``.  It is the only
cut of a group that transposes K on the lanes (H slicing cannot cut it), and the one that shrinks a lane's bytes
when the heads outnumber the lanes."""

from dataclasses import replace

import onnx
import pytest

from lgopt.check.simulate import simulate
from lgopt.check.verify import verify_plan
from lgopt.group.build import c_slice_options, schedule, try_group
from lgopt.group.slicing import SliceError, slice_group
from lgopt.hw.chip import get_chip, with_overrides
from lgopt.io.onnx_import import import_onnx
from lgopt.io.planfile import plan_from_dict, plan_to_dict
from lgopt.io.zoo import llm_block, vit_block
from lgopt.model.ops import channel_reason
from lgopt.report.tables import group_table
from lgopt.report.verdict import verify
from lgopt.strategies.greedy import greedy
from lgopt.strategies.settings import SearchSettings
from lgopt.tpumlir.cache import write_secs

# 16 heads on 4 lanes (4 heads a lane), 4 KiB a lane: the attention's Q x K^T does not fit whole, and the
# transpose of K on the lanes forbids H slices
FOUR_LANES = with_overrides(get_chip("bm1684x"), {"npu_num": "4", "lmem_bytes": "4K"})
CORE = ["/Transpose_31", "/MatMul_32", "/Mul_34", "/Softmax_35", "/MatMul_36"]


@pytest.fixture(scope="module")
def vit16(tmp_path_factory):
    path = tmp_path_factory.mktemp("heads") / "vit16.onnx"
    onnx.save(vit_block(tokens=20, dim=64, heads=16, mlp=128), str(path))
    return import_onnx(str(path))


def test_the_attention_core_is_channel_local_and_a_conv_or_a_projection_is_not(vit16):
    assert [channel_reason(vit16, vit16.op(o)) for o in CORE] == [""] * 5
    # the projections hold the tokens on the lanes: there is no channel axis to cut
    assert "rows on the lanes" in channel_reason(vit16, vit16.op("/MatMul_14"))
    assert c_slice_options(vit16, FOUR_LANES, CORE) == [2, 4]  # 16 heads: 2 or 1 per lane (2 also for the K^T)
    assert c_slice_options(vit16, FOUR_LANES, ["/MatMul_14"]) == []


def test_heads_slices_cut_every_tensor_into_the_same_runs_of_heads(vit16):
    sl = slice_group(vit16, CORE, 1, 1, c_slices=4)
    assert sl.num_slices == 4
    assert {vit16.tensor(t).c for t in sl.windows} == {16}  # Q, K, K^T, V, the scores, the output: all 16 heads
    for t, ws in sl.windows.items():
        assert [w.c for w in ws] == [(4 * k, 4 * k + 4) for k in range(4)], t
    for t, ws in sl.stores.items():
        assert [w.c for w in ws] == [(4 * k, 4 * k + 4) for k in range(4)], t
    with pytest.raises(SliceError, match="transposes|does not allow slicing H"):
        slice_group(vit16, CORE, 1, 2)  # the K transpose on the lanes: not along H
    with pytest.raises(SliceError, match="channel slices"):
        slice_group(vit16, ["/MatMul_14"], 1, 1, c_slices=2)


def test_a_group_that_fits_only_cut_by_heads_is_built_verified_and_simulated(vit16):
    ops = CORE[:2]  # K transposed on the lanes and Q x K^T
    whole, why = try_group(vit16, FOUR_LANES, ops, 1, 1)
    assert whole is None and "allocation" in why
    g, why = try_group(vit16, FOUR_LANES, ops, 1, 1, c_slices=4)
    assert g is not None, why
    assert g.c_slices == 4 and g.num_slices == 4 and set(g.c_windows) == set(g.windows)
    # a lane holds one head of a slice instead of four: the scores' buffer is a quarter of the whole tensor's
    scores = next(b for b in g.buffers if b.name == "/MatMul_32_output_0")
    full = schedule(vit16, FOUR_LANES, ops, 1, 1)
    assert 4 * scores.size == next(b for b in full.buffers if b.name == scores.name).size


def test_greedy_cuts_heads_where_nothing_else_fits_and_the_plan_computes_what_the_model_does(vit16):
    plan = greedy(vit16, FOUR_LANES, SearchSettings())
    cut = [g for g in plan.groups if g.c_slices > 1]
    assert cut and any("/MatMul_32" in g.ops for g in cut)
    assert verify(vit16, plan) == []
    assert simulate(vit16, plan).ok
    assert "C" in group_table(vit16, plan).columns
    without = greedy(vit16, FOUR_LANES, SearchSettings(max_c_slices=1))
    assert all(g.c_slices == 1 for g in without.groups) and "C" not in group_table(vit16, without).columns
    assert not any("/MatMul_32" in g.ops for g in without.groups)  # Q x K^T then runs as a global layer


def test_the_verifier_refuses_a_wrong_channel_window_and_a_channel_cut_conv(vit16):
    plan = greedy(vit16, FOUR_LANES, SearchSettings())
    gi = next(k for k, g in enumerate(plan.groups) if g.c_slices > 1)
    g = plan.groups[gi]
    t = next(t for t in g.c_windows if vit16.tensor(t).c == 16 and t in g.windows and t not in g.stores)
    short = {**g.c_windows, t: tuple((c0, c1 - 1) for c0, c1 in g.c_windows[t])}
    bad = replace(plan, groups=plan.groups[:gi] + (replace(g, c_windows=short),) + plan.groups[gi + 1:])
    assert any("channels" in str(v) for v in verify_plan(vit16, bad))
    gone = replace(plan, groups=plan.groups[:gi] + (replace(g, c_windows={}),) + plan.groups[gi + 1:])
    assert any("channel windows" in str(v) for v in verify_plan(vit16, gone))


def test_heads_slices_round_trip_through_the_plan_file_and_export_as_csecs(vit16):
    plan = greedy(vit16, FOUR_LANES, SearchSettings())
    again = plan_from_dict(plan_to_dict(plan))
    assert again.groups == plan.groups
    g = next(g for g in plan.groups if g.c_slices > 1)
    assert write_secs(vit16, g.ops, g.n_slices, g.h_slices, g.w_slices, g.c_slices) == \
        [g.n_slices, g.c_slices, 1, g.h_slices, g.w_slices]


def test_rotary_embeddings_and_the_causal_mask_are_cut_by_heads_with_their_constants_whole(tmp_path):
    """The LLM block's RoPE (last-axis Slices, Neg, Concat, the cos/sin Muls) and its causal mask (an Add of one
    ``[1, 1, T, T]`` constant for every head) keep each head to itself: on 2 lanes and 2 KiB greedy cuts the
    scale, mask and Softmax by heads, and the plan computes what the model does."""
    path = tmp_path / "llm8.onnx"
    onnx.save(llm_block(tokens=16, dim=64, heads=8, hidden=96), str(path))
    net = import_onnx(str(path))
    rope = [op.name for op in net.ops if op.type in ("Slice", "Neg", "Concat") and net.tensor(op.outputs[0]).c == 8]
    assert rope and all(channel_reason(net, net.op(o)) == "" for o in rope)
    mask = net.op("/Add_55")
    assert [w.shape for w in mask.weights] == [(1, 1, 16, 16)] and channel_reason(net, mask) == ""
    chip = with_overrides(get_chip("bm1684x"), {"npu_num": "2", "lmem_bytes": "2K"})
    plan = greedy(net, chip, SearchSettings())
    masked = next(g for g in plan.groups if "/Add_55" in g.ops)
    assert masked.c_slices > 1
    assert verify(net, plan) == [] and simulate(net, plan).ok


def test_a_cache_that_cuts_the_attentions_scales_by_csecs_cuts_their_rows(tmp_path):
    """TPU-MLIR's opt2 of vit_b_16 / bm1688 groups the scales of Q and K^T (``MulConst``, ``[1, 12, 197, 64]``), a
    ``GROUP_SMALL_C`` group (12 heads, fewer than half the 32 lanes): it holds ``[12, 197, 64, 1]``, the tokens
    over the lanes, so ``csecs=2`` forced on it cuts the 197 tokens, not the heads (lgopt.tpumlir.smallc); lgopt
    builds two row slices and writes the same ``shape_secs`` back."""
    import json
    from pathlib import Path

    from conftest import CAL, need, net_of

    from lgopt.tpumlir.export import export_tpumlir
    from lgopt.tpumlir.grouping import score

    net = net_of(str(need(CAL / "onnx" / "vit_b_16.weightless.onnx")))
    ref = need(CAL / "caches" / "vit_b_16_bm1688" / "opt2.layer_group_cache.json")
    d = json.loads(Path(ref).read_text())
    groups = d["subfunc_0"]["GroupLayer"]
    k = next(i for i, g in enumerate(groups) if all("Mul_" in loc for loc in g["locs"]) and len(g["locs"]) == 2)
    groups[k]["shape_secs"] = [1, 2, 1, 1, 1]
    forced = tmp_path / "c.layer_group_cache.json"
    forced.write_text(json.dumps(d))
    plan, _ = score(net, get_chip("bm1688"), str(forced))
    cut = [g for g in plan.groups if g.num_slices > 1]
    assert len(cut) == 1 and (cut[0].h_slices, cut[0].c_slices) == (2, 1) and "Mul" in cut[0].ops[0]
    assert verify(net, plan) == []
    out = export_tpumlir(plan, net, str(ref))
    assert [1, 2, 1, 1, 1] in [g["shape_secs"] for g in out["subfunc_0"]["GroupLayer"]]

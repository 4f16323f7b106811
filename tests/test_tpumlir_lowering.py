"""The network as TPU-MLIR lowered it for a cache (lgopt.tpumlir.lowering): an MLP's column pieces run in
different steps become ops of their own, computing what the whole ops compute, and the plan of such a cache
verifies and simulates on it."""

import json
from dataclasses import replace

import numpy as np
from onnx_graphs import G

from lgopt.check.kernels import group_norm, rowwise
from lgopt.check.simulate import _whole, make_inputs, make_weights, simulate
from lgopt.check.verify import verify_plan
from lgopt.hw.chip import get_chip
from lgopt.io.onnx_import import import_onnx
from lgopt.report.verdict import verify
from lgopt.tpumlir.cache import load_cache
from lgopt.tpumlir.grouping import score
from lgopt.tpumlir.lowering import lower_like, network_of


def _mlp(tmp_path):
    """x [1, 8, 16] -> MatMul + bias -> GELU -> MatMul + bias, as torch exports a transformer's MLP."""
    g = G((1, 8, 16), opset=20)
    h = g.n("Add", [g.w([32]), g.n("MatMul", ["x", g.w([16, 32])])])
    a = g.n("Gelu", [h])
    y = g.n("Add", [g.w([16]), g.n("MatMul", [a, g.w([32, 16])])])
    g.out(y)
    path = tmp_path / "mlp.onnx"
    import onnx

    onnx.save(g.model(), str(path))
    return import_onnx(path, dtype="f16"), h, a, y


def _cache(tmp_path, h: str, a: str, y: str, grouped: tuple[int, ...]) -> str:
    """A cache naming the pieces as TPU-MLIR 1.30 does on BM1684X (``<tensor>_<Type>_<k>``, the partial sums'
    ``..._add_``), the GELU pieces ``grouped`` each in a group of its own, the rest global."""
    order = [f"{h}_Add_1", f"{a}_GELU_1", f"{y}_Add_1", f"{h}_Add_0", f"{a}_GELU_0", f"{y}_Add_0", f"{y}_Add_1_add_"]
    groups, globs = [], []
    for i, loc in enumerate(order):
        if i in grouped:
            groups.append({"locs": [loc], "shape_secs": [1, 1, 1, 1, 1], "func_start_idx": i, "func_end_idx": i,
                           "group_cost": 0})
        else:
            globs.append({"loc": loc, "func_idx": i})
    p = tmp_path / "mlp.layer_group_cache.json"
    p.write_text(json.dumps({"opt": 2, "subfunc_0": {"GroupLayer": groups, "GlobalLayer": globs}}))
    return str(p)


def test_column_pieces_compute_what_the_whole_mlp_computes(tmp_path):
    net, h, a, y = _mlp(tmp_path)
    low, notes = lower_like(net, load_cache(_cache(tmp_path, h, a, y, (1, 4))), None)
    assert len(notes) == 1 and [op.type for op in low.ops] == ["MatMul", "Gelu", "MatMul"] * 2 + ["Add"]
    assert low.op(f"{y}_Add_1_add_").outputs == (y,) and set(low.outputs) == set(net.outputs)
    # the pieces' weights cut from the whole ones: the same output, up to summation order
    w = make_weights(net, 0)
    first, second = (op for op in net.ops if op.type == "MatMul")
    cut = {}
    for op in low.ops:
        for wt in op.weights:
            base, _, tag = wt.name.partition("#")
            arr = w[base]
            if tag.startswith("cols"):
                k = int(tag[4:])
                cut[wt.name] = arr[..., 16 * k:16 * (k + 1)]
            elif tag.startswith("rows"):
                k = int(tag[4:])
                cut[wt.name] = arr[16 * k:16 * (k + 1)]
            else:
                cut[wt.name] = arr
    x = make_inputs(net, 0)

    def run(n, weights):
        vals = dict(x)
        for op in n.ops:
            vals[op.outputs[0]] = _whole(n, op, vals, weights)
        return vals[y]

    assert np.allclose(run(net, w), run(low, cut), rtol=1e-9, atol=1e-9)
    assert first.name not in {op.name for op in low.ops} and second.name not in {op.name for op in low.ops}


def test_a_cache_running_the_gelu_halves_in_two_groups_builds_verifies_and_simulates(tmp_path):
    net, h, a, y = _mlp(tmp_path)
    path = _cache(tmp_path, h, a, y, (1, 4))
    plan, info = score(net, get_chip("bm1684x"), path)
    low = network_of(net, plan)
    assert info["lowered"] and [low.op(g.ops[0]).type for g in plan.groups] == ["Gelu", "Gelu"]
    assert verify(net, plan) == [] and verify_plan(low, plan) == [] and verify_plan(net, plan)
    assert simulate(low, plan).ok
    # every piece in one group: nothing to lower, the whole ops are that group
    one = tmp_path / "one.layer_group_cache.json"
    d = json.loads(open(_cache(tmp_path, h, a, y, ())).read())
    locs = [g["loc"] for g in sorted(d["subfunc_0"]["GlobalLayer"], key=lambda g: g["func_idx"])]
    one.write_text(json.dumps({"opt": 2, "subfunc_0": {"GroupLayer": [
        {"locs": locs, "shape_secs": [1, 1, 1, 1, 1], "func_start_idx": 0, "func_end_idx": len(locs) - 1,
         "group_cost": 0}], "GlobalLayer": []}}))
    plan, info = score(net, get_chip("bm1684x"), str(one))
    assert not info["lowered"] and network_of(net, plan) is net and verify_plan(net, plan) == []


CAL = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared" / "calibration"


@__import__("pytest").mark.skipif(not (CAL / "ops.csv.gz").exists(), reason="needs ../shared/calibration")
def test_two_linear_pointwise_convs_are_the_one_conv_tpu_mlir_merges_them_into():
    """MnasNet's last linear bottleneck (1152 -> 320) feeds the 320 -> 1280 head conv; TPU-MLIR's timeline loads
    one 1152 x 1280 filter (2,949,120 bytes) for both.  Lowered like its cache, lgopt holds the same op, loads
    the same bytes, and its last BM1688 group is priced within 10 % of the timeline (it was 16 % under)."""
    import pandas as pd

    from lgopt.cost.work import weight_gmem_bytes
    from lgopt.io.problem import load_model
    from lgopt.tpumlir.lowering import merge_pointwise

    net = load_model(CAL / "onnx" / "mnasnet1_0.weightless.onnx", dtype="f16")
    cache = str(CAL / "caches" / "mnasnet1_0_bm1688" / "opt2.layer_group_cache.json")
    low, notes = lower_like(net, load_cache(cache), None)
    merged = [n for n in notes if "merges" in n]
    assert len(merged) == 2 and len(low.ops) == len(net.ops) - 2
    ops = pd.read_csv(CAL / "ops.csv.gz")
    loads = ops[(ops.model == "mnasnet1_0") & (ops.variant == "opt2") & (ops.role == "load")
                & ops.tensor.str.endswith("_filter_reorderd", na=False)]
    head = loads[loads.tensor.str.contains("layers.16/Relu")].bytes.unique()
    assert list(head) == [2949120]
    op = next(o for o in low.ops if "layers.14/Conv" in o.name)
    assert weight_gmem_bytes(op) - 4 * 1280 == 2949120  # the filter, and an f32 bias
    # an op some TPU-MLIR op is named after is not merged away
    first = next(o.name for o in net.ops if "layers.13.0/layers/layers.6" in o.name)
    assert len(merge_pointwise(net, frozenset({first}))[1]) == 1
    # built and priced as the timeline ran it
    chip = get_chip("bm1688", {"cost_model": "tpu-mlir-1.30"})
    plan, _ = score(net, chip, cache)
    assert verify(net, plan) == []
    groups = pd.read_csv(CAL / "groups.csv")
    meas = groups[(groups.model == "mnasnet1_0") & (groups.chip == "bm1688") & (groups.variant == "opt2")]
    last = meas.sort_values("group_pos").cycles.iloc[-1]
    assert abs(plan.groups[-1].cost["cycles"] / last - 1) < 0.10


def _attention(tmp_path, split: str = "Split", batch: int = 1):
    """x [1, 8, 16] -> timm's attention: qkv MatMul + bias, Reshape [1, 8, 3, 2, 8], Transpose (2, 0, 3, 1, 4),
    three heads-first [1, 2, 8, 8] picks (a Split and Squeezes, or Gathers), K transposed, Q scaled,
    Softmax(Q K^T) V, heads back (0, 2, 1, 3), Reshape [1, 8, 16], proj MatMul."""
    import onnx

    g = G((batch, 8, 16), opset=17)
    qkv = g.n("Add", [g.w([48]), g.n("MatMul", ["x", g.w([16, 48])])])
    r = g.n("Reshape", [qkv, g.w(None, np.array([batch, 8, 3, 2, 8], dtype=np.int64))])
    p = g.n("Transpose", [r], perm=[2, 0, 3, 1, 4])
    if split == "Split":
        parts = g.n("Split", [p, g.w(None, np.array([1, 1, 1], dtype=np.int64))], nout=3, axis=0)
        ax = g.w(None, np.array([0], dtype=np.int64))
        q, k, v = (g.n("Squeeze", [t, ax]) for t in parts)
    else:
        q, k, v = (g.n("Gather", [p, g.w(None, np.array(i, dtype=np.int64))], axis=0) for i in range(3))
    kt = g.n("Transpose", [k], perm=[0, 1, 3, 2])
    qs = g.n("Mul", [q, g.w(None, np.array(0.35, dtype=np.float32))])
    a = g.n("Softmax", [g.n("MatMul", [qs, kt])], axis=-1)
    o = g.n("Transpose", [g.n("MatMul", [a, v])], perm=[0, 2, 1, 3])
    y = g.n("MatMul", [g.n("Reshape", [o, g.w(None, np.array([batch, 8, 16], dtype=np.int64))]), g.w([16, 16])])
    g.out(y)
    path = tmp_path / f"attn_{split}_{batch}.onnx"
    onnx.save(g.model(), str(path))
    return import_onnx(path, dtype="f16")


def _one_group_cache(tmp_path, net, secs=(1, 1, 1, 1, 1)) -> str:
    """A cache holding every op of ``net`` in one group with slice counts ``secs``, each named after its output
    as TPU-MLIR names ops (``<tensor>_<Type>``), but for the permutes: TPU-MLIR folds an attention's permutes
    into its MatMuls, so no op of its group is named after one (a timm-style two-block ViT's own opt2 cache,
    BM1684X F16: one group of 43 ops, none a permute; a group naming one is refused)."""
    locs = [f"{op.outputs[0]}_{op.type}" for op in net.ops if op.type != "Transpose"]
    p = tmp_path / "attn.layer_group_cache.json"
    p.write_text(json.dumps({"opt": 2, "subfunc_0": {"GroupLayer": [
        {"locs": locs, "shape_secs": list(secs), "func_start_idx": 0, "func_end_idx": len(locs) - 1,
         "group_cost": 0}], "GlobalLayer": []}}))
    return str(p)


@__import__("pytest").mark.parametrize("split,batch", [("Split", 1), ("Gather", 1), ("Gather", 2)])
def test_an_attention_tpu_mlir_holds_whole_in_one_group_reads_verifies_and_simulates(tmp_path, split, batch):
    """Batch 2 re-lays the batches Q, K and V are picked from (Swin's windows: ``[3, 64, 3, 49, 32]`` picked into
    ``[64, 3, 49, 32]``): the verifier once wanted batches 2:4 of the 3 there are (zoo, swin_t)."""
    net = _attention(tmp_path, split, batch)
    moves = [op.name for op in net.ops if not op.local]
    assert moves and all(net.op(m).type in ("Transpose", "Squeeze", "Slice") for m in moves)
    plan, info = score(net, get_chip("bm1684x"), _one_group_cache(tmp_path, net))
    low = network_of(net, plan)
    assert info["lowered"] and len(plan.groups) == 1 and set(plan.groups[0].ops) == {op.name for op in low.ops}
    assert all(low.op(m).local and not low.op(m).h_split for m in moves)
    # a move that keeps each batch to itself may be cut into batches; the 5-D (2, 0, 3, 1, 4) permute may not
    five = next(m for m in moves if low.op(m).type == "Transpose" and len(low.op(m).attrs["perm"]) == 5)
    heads = next(m for m in moves if tuple(low.op(m).attrs.get("perm", ())) == (0, 2, 1, 3))
    assert not low.op(five).n_split and low.op(heads).n_split
    # the heads' tensors held as TPU-MLIR's hdim_is_batch MatMuls hold them: tokens over the lanes
    scores = next(op for op in low.ops if op.type == "Softmax").outputs[0]
    assert low.tensor(scores).rows_lanes and low.tensor(scores).lane_shape(1, 8)[1] == 8
    assert verify(net, plan) == [] and verify_plan(low, plan) == []
    assert simulate(low, plan).ok


def test_a_move_in_a_sliced_group_stays_global_and_the_verifier_rejects_slicing_it(tmp_path):
    from dataclasses import replace

    from lgopt.tpumlir.grouping import GroupingInfeasible

    net = _attention(tmp_path)
    with __import__("pytest").raises(GroupingInfeasible, match="can only be a global layer"):
        score(net, get_chip("bm1684x"), _one_group_cache(tmp_path, net, (1, 1, 1, 2, 1)))
    plan, _ = score(net, get_chip("bm1684x"), _one_group_cache(tmp_path, net))
    low = network_of(net, plan)
    bad = replace(plan, groups=(replace(plan.groups[0], n_slices=1, h_slices=2),))
    assert any("moves data between lanes" in str(v) for v in verify_plan(low, bad))


def test_a_roll_within_the_folded_rows_tpu_mlir_groups_is_held_whole_and_simulates(tmp_path):
    """Swin's shifted windows: a roll as two Slices and a Concat on an axis inside the folded H of a rank-5
    tensor; lgopt runs them as global layers, and local, never sliced, in a group TPU-MLIR holds whole."""
    import onnx

    g = G((1, 2, 3, 4, 5), opset=17)
    const = lambda v: g.w(None, np.array(v, dtype=np.int64))  # noqa: E731
    tail = g.n("Slice", ["x", const([1]), const([3]), const([2])])
    head = g.n("Slice", ["x", const([0]), const([1]), const([2])])
    rolled = g.n("Concat", [tail, head], axis=2)
    y = g.n("Relu", [g.n("Reshape", [rolled, const([1, 2, 12, 5])])])
    g.out(y)
    path = tmp_path / "roll.onnx"
    onnx.save(g.model(), str(path))
    net = import_onnx(path, dtype="f16")
    moves = [op.name for op in net.ops if op.type in ("Slice", "Concat")]
    assert len(moves) == 3 and not any(net.op(m).local for m in moves)
    plan, info = score(net, get_chip("bm1684x"), _one_group_cache(tmp_path, net))
    low = network_of(net, plan)
    assert info["lowered"] and all(low.op(m).local and not low.op(m).h_split for m in moves)
    assert verify(net, plan) == [] and verify_plan(low, plan) == []
    assert simulate(low, plan).ok


def test_an_add_of_ranks_the_fold_cannot_broadcast_is_computed_whole_on_the_true_shapes(tmp_path):
    """Swin's shifted-window mask: ``[1, 4, 3, 5, 5] + [1, 4, 1, 5, 5]`` broadcasts over an axis lgopt's NCHW fold
    merges into H; held whole in a group TPU-MLIR holds unsliced, it is computed on the true shapes."""
    import onnx

    g = G((1, 4, 3, 5, 5), opset=17)
    mask = g.w([1, 4, 1, 5, 5])
    y = g.n("Reshape", [g.n("Add", ["x", mask]), g.w(None, np.array([1, 4, 15, 5], dtype=np.int64))])
    g.out(g.n("Relu", [y]))
    path = tmp_path / "mask.onnx"
    onnx.save(g.model(), str(path))
    net = import_onnx(path, dtype="f16")
    add = next(op for op in net.ops if op.type == "Add")
    assert not add.local and "rank" in add.reason
    plan, info = score(net, get_chip("bm1684x"), _one_group_cache(tmp_path, net))
    low = network_of(net, plan)
    assert low.op(add.name).local and not low.op(add.name).n_split
    assert verify(net, plan) == [] and verify_plan(low, plan) == [] and simulate(low, plan).ok


@__import__("pytest").mark.parametrize("dtype,cores,reads", [("f16", 1, True), ("int8", 1, False), ("int8", 2, True)])
def test_hsecs_past_the_outputs_rows_are_refused_in_int8_on_one_core(tmp_path, dtype, cores, reads):
    """A tail group ending in a global mean, forced to ``hsecs=2``: TPU-MLIR drops the empty section in F16 (one
    slice) and its allocator refuses it in INT8 on one core (benchmarks/settings.py); on several cores, where it
    did both, it is read as compiled."""
    import onnx

    from lgopt.tpumlir.grouping import GroupingInfeasible

    g = G((1, 8, 8, 8), opset=17)
    g.out(g.n("GlobalAveragePool", [g.n("Relu", [g.conv("x", 8, 8)])]))
    path = tmp_path / "tail.onnx"
    onnx.save(g.model(), str(path))
    net = import_onnx(path, dtype=dtype)
    cache = _one_group_cache(tmp_path, net, (1, 1, 1, 2, 1))
    chip = get_chip("bm1688", {"used_cores": cores})
    if reads:
        plan, _ = score(net, chip, cache)
        assert plan.groups[0].h_slices == 1 and verify(net, plan) == []
    else:
        with __import__("pytest").raises(GroupingInfeasible, match="in INT8 on one core its allocator refused"):
            score(net, chip, cache)


@__import__("pytest").mark.parametrize("chip,cores,secs,reads", [("bm1684", 1, 2, False), ("bm1684", 1, 1, True),
                                                               ("bm1688", 2, 2, True)])
def test_a_group_of_casts_only_past_its_rows_is_refused_in_int8_on_one_core(tmp_path, chip, cores, secs, reads):
    """BM1684 INT8 runs the casts of the classifier's output to f32 as a group of their own (``<out>_f32_new_cast``,
    ``<out>_f32``), nothing lgopt builds; forced to ``hsecs=2`` over that one-row output, its allocator refused all
    6 such scorings: the empty-sections rule holds for such a group too, on the tensor the casts convert."""
    import onnx

    from lgopt.tpumlir.grouping import GroupingInfeasible

    g = G((1, 8, 8, 8), opset=17)
    g.out(g.n("GlobalAveragePool", [g.n("Relu", [g.conv("x", 8, 8)])]))
    path = tmp_path / "tail.onnx"
    onnx.save(g.model(), str(path))
    net = import_onnx(path, dtype="int8")
    out = net.outputs[0]
    locs = [f"{op.outputs[0]}_{op.type}" for op in net.ops]
    p = tmp_path / "casts.layer_group_cache.json"
    p.write_text(json.dumps({"opt": 2, "subfunc_0": {"GlobalLayer": [], "GroupLayer": [
        {"locs": locs, "shape_secs": [1, 1, 1, 1, 1], "func_start_idx": 0, "func_end_idx": len(locs) - 1,
         "group_cost": 0},
        {"locs": [f"{out}_f32_new_cast", f"{out}_f32"], "shape_secs": [1, 1, 1, secs, 1],
         "func_start_idx": len(locs), "func_end_idx": len(locs) + 1, "group_cost": 0}]}}))
    assert net.tensor(out).h == 1
    if reads:
        plan, _ = score(net, get_chip(chip, {"used_cores": cores}), str(p))
        assert len(plan.groups) == 1 and verify(net, plan) == []
    else:
        with __import__("pytest").raises(GroupingInfeasible, match="hsecs=2, wsecs=1 exceed"):
            score(net, get_chip(chip, {"used_cores": cores}), str(p))


def test_an_int8_convtranspose_run_apart_from_its_requantisation_is_cut_the_same_way(tmp_path):
    """TPU-MLIR's INT8 ConvTranspose writes int32 (``<out>_ConvTranspose_i32``) and a RequantIntAxis makes the
    int8 output; a cache running the two in different groups reads as a ConvTranspose and a Requant."""
    import onnx

    g = G((1, 8, 8, 8), opset=17)
    y = g.n("ConvTranspose", ["x", g.w([8, 4, 2, 2]), g.w([4])], kernel_shape=[2, 2], strides=[2, 2])
    g.out(g.n("Relu", [y]))
    path = tmp_path / "up.onnx"
    onnx.save(g.model(), str(path))
    net = import_onnx(path, dtype="int8")
    up = next(op for op in net.ops if op.type == "ConvTranspose")
    out = up.outputs[0]
    groups = [{"locs": [loc], "shape_secs": [1, 1, 1, 1, 1], "func_start_idx": i, "func_end_idx": i,
               "group_cost": 0} for i, loc in enumerate((f"{out}_ConvTranspose_i32", f"{out}_ConvTranspose"))]
    cache = tmp_path / "up.layer_group_cache.json"
    cache.write_text(json.dumps({"opt": 2, "subfunc_0": {"GroupLayer": groups, "GlobalLayer": []}}))
    plan, info = score(net, get_chip("bm1684x"), str(cache))
    low = network_of(net, plan)
    assert [low.op(gr.ops[0]).type for gr in plan.groups] == ["ConvTranspose", "Requant"]
    assert low.tensor(f"{out}_ConvTranspose_i32").dtype == "int32" and low.op(up.name).type == "Requant"
    assert low.op(up.name).fused == up.fused and low.op(up.name).outputs == up.outputs
    assert verify(net, plan) == [] and verify_plan(low, plan) == [] and simulate(low, plan).ok


def test_a_qkv_projection_tpu_mlir_cuts_in_three_reads_in_batch_slices(tmp_path):
    """TPU-MLIR cuts the qkv MatMul into Q, K and V MatMuls with a Reshape each (``<qkv>_<Type>_matmul_1|3|5``),
    so no 5-D permute mixes the batches and it may cut the attention into batch slices (MobileViT on BM1688);
    read so, the network has three column pieces and (0, 2, 1, 3) Transposes in batch slices."""
    net = _attention(tmp_path, "Split", batch=2)
    qkv = next(op for op in net.ops if op.type == "MatMul" and op.weights)
    locs = [f"{qkv.outputs[0]}_MatMul_{kind}_{k}" for k in (5, 3, 1) for kind in ("matmul", "reshape")]
    skip = {qkv.name} | {op.name for op in net.ops if op.type in ("Slice", "Squeeze")  # the picks, the 5-D ops
                         or len(net.tensor(op.outputs[0]).orig_shape) == 5}
    locs += [f"{op.outputs[0]}_{op.type}" for op in net.ops if op.name not in skip and op.type != "Transpose"]
    p = tmp_path / "qkv.layer_group_cache.json"  # listing its global layers (none but the return), as TPU-MLIR's do
    p.write_text(json.dumps({"opt": 2, "subfunc_0": {"GroupLayer": [
        {"locs": locs, "shape_secs": [2, 1, 1, 1, 1], "func_start_idx": 0, "func_end_idx": len(locs) - 1,
         "group_cost": 0}], "GlobalLayer": [{"loc": "func.return", "func_idx": len(locs)}]}}))
    plan, info = score(net, get_chip("bm1688"), str(p))
    low = network_of(net, plan)
    assert plan.groups[0].n_slices == 2 and not any(len(op.attrs.get("perm", ())) == 5 for op in low.ops)
    assert sum(op.type == "MatMul" and bool(op.weights) for op in low.ops) == 4  # Q, K, V and the projection
    assert any("qkv projection" in note for note in info["lowered"])
    assert verify(net, plan) == [] and verify_plan(low, plan) == [] and simulate(low, plan).ok


def test_a_layernorm_tpu_mlir_runs_as_a_groupnorm_between_reshapes_reads_and_simulates(tmp_path):
    """BM1684 INT8: TPU-MLIR lowers a LayerNorm over the last axis of ``[N, H, W, C]`` to a reshape to
    ``[N, H*W, C, 1]`` (global), a GroupNorm of ``H*W`` one-channel groups, a reshape back (global), a Mul by
    its scale and an Add of its bias named after the LayerNorm (``<tensor>_LayerNormalization``).  A cache
    naming them reads as those ops; the lowered network computes the LayerNorm's values."""
    import onnx

    g = G((1, 8, 6, 6), opset=17)
    x = g.n("Transpose", [g.conv("x", 8, 8, 3)], perm=[0, 2, 3, 1])
    y = g.n("LayerNormalization", [x, g.w([8]), g.w([8])], axis=-1, epsilon=1e-6)
    g.out(g.n("MatMul", [y, g.w([8, 4])]))
    path = tmp_path / "ln.onnx"
    onnx.save(g.model(), str(path))
    net = import_onnx(path, dtype="int8")
    ln = next(op for op in net.ops if op.type == "LayerNormalization")
    base = f"{ln.outputs[0]}_LayerNormalization"
    steps = [(f"{base}_reshape_1", -1), (f"{base}_reshape_1{base}_convert_to_group_norm_f32", 0),
             (f"{base}_convert_to_group_norm", 0), (f"{base}_reshape_2", -1), (f"{base}_mul_weights", 1), (base, 1)]
    at = {gi: [k for k, (_, s) in enumerate(steps) if s == gi] for gi in (0, 1)}  # func_idx: the order above
    groups = [{"locs": [steps[k][0] for k in at[gi]], "shape_secs": [1, 1, 1, 1, 1], "func_start_idx": at[gi][0],
               "func_end_idx": at[gi][-1], "group_cost": 0} for gi in (0, 1)]
    globs = [{"loc": loc, "func_idx": k} for k, (loc, s) in enumerate(steps) if s < 0]
    cache = tmp_path / "ln.layer_group_cache.json"
    cache.write_text(json.dumps({"opt": 2, "subfunc_0": {"GroupLayer": groups, "GlobalLayer": globs}}))
    plan, info = score(net, get_chip("bm1684"), str(cache))
    low = network_of(net, plan)
    assert [[low.op(o).type for o in gr.ops] for gr in plan.groups] == [["GroupNormalization"], ["Mul", "Add"]]
    norm = low.op(f"{base}_convert_to_group_norm")
    assert norm.attrs["num_groups"] == 36 and low.tensor(norm.outputs[0]).orig_shape == (1, 36, 8, 1)
    assert low.op(base).outputs == ln.outputs and low.op(base).type == "Add"
    assert verify(net, plan) == []
    # a cache written to force a grouping lists no global layers: the reshape between the GroupNorm and its weight
    # Mul, which no TPU-MLIR op is named after, ran inside their group (TPU-MLIR's groups are runs of its op order),
    # the reshape before the GroupNorm, read from outside the group, globally (convnext_tiny's classifier on BM1684)
    one = [{"locs": [steps[k][0] for k in (1, 2, 4, 5)], "shape_secs": [1, 1, 1, 1, 1], "func_start_idx": 1,
            "func_end_idx": 4, "group_cost": 0}]
    forced = tmp_path / "forced.layer_group_cache.json"
    forced.write_text(json.dumps({"opt": 2, "subfunc_0": {"GroupLayer": one, "GlobalLayer": []}}))
    plan_f, _ = score(net, get_chip("bm1684"), str(forced))
    assert [low.op(o).type for o in plan_f.groups[0].ops] == ["GroupNormalization", "Reshape", "Mul", "Add"]
    assert f"{base}_reshape_1" in plan_f.global_layers and verify(net, plan_f) == []
    # the simulator does not model BM1684's 4N storage: the same cache read on BM1684X runs
    plan_x, _ = score(net, get_chip("bm1684x"), str(cache))
    assert simulate(network_of(net, plan_x), plan_x).ok
    # what the pieces compute is the LayerNorm: rows of [N, H*W, C] normalised over C
    x4 = np.random.default_rng(0).normal(size=(1, 6, 6, 8))
    want = rowwise(replace(ln, weights=()), x4.reshape(1, 1, 36, 8), {})  # before its scale and bias
    got = group_norm(norm, x4.reshape(1, 36, 8, 1), {})
    assert np.allclose(want.reshape(-1), got.reshape(-1), rtol=1e-9, atol=1e-9)

"""Plans exported as TPU-MLIR layer-group caches (no TPU-MLIR needed): TPU-MLIR's own grouping survives the
round trip, every cache the compiler would refuse is refused with the group and the reason, names without a
reference, the exporter registry and ``lgopt export``."""

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import CAL, FIXTURES, need, net_of

from lgopt.cli import main
from lgopt.errors import LgoptError
from lgopt.hw.chip import get_chip
from lgopt.io.exporters import export, names
from lgopt.io.planfile import save_plan
from lgopt.model.plan import Plan
from lgopt.tpumlir.export import base_groups_from_model_ops, export_tpumlir, tpumlir_name
from lgopt.tpumlir.grouping import score

FIX = FIXTURES


def cal(model: str, chip: str):
    return (net_of(str(need(CAL / "onnx" / f"{model}.weightless.onnx"))),
            str(need(CAL / "caches" / f"{model}_{chip}" / "opt2.layer_group_cache.json")))


def fix(model: str, cache_name: str):
    return (net_of(str(need(FIX / "onnx" / f"{model}.weightless.onnx"))),
            str(need(FIX / "tpu-mlir" / f"{cache_name}.layer_group_cache.json")))


def groups(plan: Plan):
    return [(g.ops, g.n_slices, g.h_slices, g.w_slices) for g in plan.groups]


def write(tmp_path: Path, d: dict, name: str = "out.layer_group_cache.json") -> str:
    p = tmp_path / name
    p.write_text(json.dumps(d))
    return str(p)


# --- round trip: TPU-MLIR's grouping -> lgopt plan -> cache -> lgopt plan --------------------------------

CASES = [("fix", "resnet18", "resnet18_bm1684x_f16", "bm1684x"), ("fix", "resnet18", "resnet18_bm1688_f16", "bm1688"),
         ("fix", "yolov5s_like", "yolov5s_like_bm1684x_f16", "bm1684x"),
         ("cal", "mobilenet_v2", "bm1684x", "bm1684x"), ("cal", "mobilenet_v2", "bm1688", "bm1688"),
         ("cal", "resnet50", "bm1684x", "bm1684x"), ("cal", "unet_small", "bm1684x", "bm1684x"),
         ("cal", "mnasnet1_0", "bm1688", "bm1688"), ("cal", "yolov5s_like", "bm1688", "bm1688")]


@pytest.mark.parametrize("kind,model,cache_name,chip", CASES)
def test_round_trip_of_tpumlir_grouping(tmp_path, kind, model, cache_name, chip):
    net, ref = fix(model, cache_name) if kind == "fix" else cal(model, cache_name)
    plan1, _ = score(net, get_chip(chip), ref, exact=False)
    out = export_tpumlir(plan1, net, ref)
    plan2, info2 = score(net, get_chip(chip), write(tmp_path, out), exact=False)
    multi = [g for g in groups(plan1) if len(g[0]) > 1]
    assert groups(plan2) == multi  # same groups, same secs; one-op groups became global layers
    assert set(plan2.global_layers) == set(plan1.global_layers) | {g[0][0] for g in groups(plan1) if len(g[0]) == 1}
    assert info2["unmapped"] == [] and not info2["adjusted"]
    # the loader's needs: opt, every subfunc, locs a contiguous run of the reference's order, index = load order
    refd = json.loads(Path(ref).read_text())
    subs = [k for k in refd if k.startswith("subfunc_")]
    assert out["opt"] == 2 and [k for k in out if k.startswith("subfunc_")] == subs
    order = {}
    for g in refd["subfunc_0"]["GroupLayer"]:
        order.update({loc: g["func_start_idx"] + k for k, loc in enumerate(g["locs"])})
    order.update({x["loc"]: x["func_idx"] for x in refd["subfunc_0"]["GlobalLayer"]})
    entries = out["subfunc_0"]["GroupLayer"] + out["subfunc_0"]["GlobalLayer"]
    assert sorted(e["index"] for e in entries) == list(range(len(entries)))
    listed = [loc for g in out["subfunc_0"]["GroupLayer"] for loc in g["locs"]]
    listed += [x["loc"] for x in out["subfunc_0"]["GlobalLayer"]]
    assert sorted(listed) == sorted(order)  # every op of the pass, once
    for g in out["subfunc_0"]["GroupLayer"]:
        idx = [order[loc] for loc in g["locs"]]
        assert idx == list(range(g["func_start_idx"], g["func_end_idx"] + 1))
        assert g["shape_secs"][1:3] == [1, 1]  # lgopt slices N, H and W, never C or D
    by_start = sorted(entries, key=lambda e: e.get("func_start_idx", e.get("func_idx")))
    assert [e["index"] for e in by_start] == list(range(len(by_start)))


def test_round_trip_is_tpumlirs_own_cache_where_lgopt_agrees():
    """mobilenet_v2 / bm1684x: lgopt builds TPU-MLIR's opt2 groups as they are; the export is the same cache."""
    net, ref = cal("mobilenet_v2", "bm1684x")
    plan, _ = score(net, get_chip("bm1684x"), ref, exact=False)
    out = export_tpumlir(plan, net, ref)
    refd = json.loads(Path(ref).read_text())
    for a, b in zip(out["subfunc_0"]["GroupLayer"], refd["subfunc_0"]["GroupLayer"], strict=True):
        assert (a["locs"], a["shape_secs"], a["index"]) == (b["locs"], b["shape_secs"], b["index"])


@pytest.mark.parametrize("model,chip", [("vit_b_16", "bm1684x"), ("convnext_tiny", "bm1684x"),
                                        ("convnext_tiny", "bm1688"), ("shufflenet_v2_x1_0", "bm1688")])
def test_tpumlirs_own_grouping_re_exports_to_the_same_groups_and_secs(model, chip):
    """Read exactly (the network lowered as the cache splits it) and exported against the same cache, TPU-MLIR's
    opt2 comes back group for group: ViT's patch MatMul (a piece of the Patchify lgopt runs globally) stays in
    the first group, ConvNeXt's GELU column pieces on BM1684X are groups of their own, its row groups on BM1688
    keep ``nsecs=2``.  (All 22 model x chip caches of the calibration data re-export so; the compiler measured
    21 of them at exactly opt2's cycles before the patch piece was kept, ViT / BM1684X at 1.002x.)"""
    from lgopt.tpumlir.lowering import network_of

    net, ref = cal(model, chip)
    plan, _ = score(net, get_chip(chip), ref)
    out = export_tpumlir(plan, network_of(net, plan), ref)
    refd = json.loads(Path(ref).read_text())

    def spans(d):
        return [(g["func_start_idx"], g["func_end_idx"], g["shape_secs"]) for g in d["subfunc_0"]["GroupLayer"]]

    assert spans(out) == spans(refd)


def test_interior_cast_included_edge_cast_by_reference():
    """resnet18 / bm1684x: a group from the last Add to the Flatten takes the f32 cast between the Add and
    GlobalAveragePool, and (by the reference) the f16 cast after the Flatten that ends TPU-MLIR's own group;
    with edge_casts='global' the casts TPU-MLIR grouped at a group's edge stay global, except the input's
    Cast of a group that converts the input itself."""
    net, ref = fix("resnet18", "resnet18_bm1684x_f16")
    plan, _ = score(net, get_chip("bm1684x"), ref, exact=False)
    g0 = plan.groups[0]
    merged = replace(plan, groups=(replace(g0, ops=g0.ops + plan.groups[1].ops),), steps=(("group", 0),)
                     + tuple((k, v) for k, v in plan.steps if k == "global"))
    out = export_tpumlir(merged, net, ref)
    (g,) = out["subfunc_0"]["GroupLayer"]
    assert (g["func_start_idx"], g["func_end_idx"]) == (1, 33)
    assert g["locs"][31].endswith("Flatten") and g["locs"][32].endswith("Gemm_f16")
    assert g["locs"][29].endswith("GlobalAveragePool_f32") and out["lgopt"]["interior_casts"] == 1
    net2, ref2 = fix("yolov5s_like", "yolov5s_like_bm1684x_f16")
    plan2, _ = score(net2, get_chip("bm1684x"), ref2, exact=False)
    by_ref = export_tpumlir(plan2, net2, ref2)["subfunc_0"]["GroupLayer"]
    assert by_ref[0]["locs"][0].startswith("input") and by_ref[0]["func_start_idx"] == 0
    # the group converts the network input itself (it holds the f32 slice): its Cast goes with it, whatever
    # the edge rule; a group that does not leaves it global under edge_casts='global'
    assert plan2.groups[0].f32_in == tuple(net2.inputs)
    same = export_tpumlir(plan2, net2, ref2, edge_casts="global")["subfunc_0"]["GroupLayer"]
    assert same[0]["func_start_idx"] == 0 and same[0]["locs"][0] == by_ref[0]["locs"][0]
    plain = replace(plan2, groups=(replace(plan2.groups[0], f32_in=()),) + plan2.groups[1:])
    glob = export_tpumlir(plain, net2, ref2, edge_casts="global")["subfunc_0"]["GroupLayer"]
    assert glob[0]["func_start_idx"] == 1 and not glob[0]["locs"][0].endswith("_f16")


# --- refusals ---------------------------------------------------------------------------------------------

def test_refuses_group_not_contiguous_in_tpumlir_order():
    net, ref = fix("resnet18", "resnet18_bm1684x_f16")
    plan, _ = score(net, get_chip("bm1684x"), ref, exact=False)
    g0 = plan.groups[0]
    holey = replace(g0, ops=tuple(o for o in g0.ops if o != "/layer2/layer2.0/conv2/Conv"))
    bad = replace(plan, groups=(holey,) + plan.groups[1:])
    with pytest.raises(LgoptError, match=r"plan group 0 .*not contiguous in TPU-MLIR's op order.*conv2"):
        export_tpumlir(bad, net, ref)


def test_refuses_group_with_op_tpumlir_runs_globally():
    """resnet18 / bm1688: TPU-MLIR's opt2 runs the last block's convs globally; grouping them is refused from
    the reference alone, and allowed once the base groups say they can run in LMEM."""
    net, ref = fix("resnet18", "resnet18_bm1688_f16")
    plan, _ = score(net, get_chip("bm1688"), ref, exact=False)
    g1, g2 = plan.groups[1], plan.groups[2]
    between = tuple(o for o in plan.global_layers if net.op(o).local)  # layer4's convs TPU-MLIR left global
    assert len(between) == 4
    merged = replace(g1, ops=tuple(sorted(g1.ops + between + g2.ops, key=net.op_index.__getitem__)))
    bad = replace(plan, groups=(plan.groups[0], merged))
    with pytest.raises(LgoptError, match=r"plan group 1 .*runs as a global layer in the reference"):
        export_tpumlir(bad, net, ref)
    bg = base_groups_from_model_ops(need(CAL / "model_ops.csv"), "resnet18", "bm1688")
    out = export_tpumlir(bad, net, ref, base_groups=bg)
    assert [(g["func_start_idx"], g["func_end_idx"]) for g in out["subfunc_0"]["GroupLayer"]][-1] == (3, 33)


def test_refuses_group_with_global_only_op_and_crossing_base_groups():
    net, ref = fix("resnet18", "resnet18_bm1684x_f16")
    plan, _ = score(net, get_chip("bm1684x"), ref, exact=False)
    tail = replace(plan.groups[1], ops=("/avgpool/GlobalAveragePool", "/Flatten", "/fc/Gemm"))
    bad = replace(plan, groups=(plan.groups[0], tail))
    with pytest.raises(LgoptError, match=r"plan group 1 .*output_Gemm.*global layer"):
        export_tpumlir(bad, net, ref)
    bg = base_groups_from_model_ops(need(CAL / "model_ops.csv"), "resnet18", "bm1684x")
    with pytest.raises(LgoptError, match=r"plan group 1 .*output_Gemm.*only run as a global layer"):
        export_tpumlir(bad, net, ref, base_groups=bg)
    # base groups: two groups of the reference with different base_group_idx may not be merged
    d = json.loads(Path(ref).read_text())
    d["subfunc_0"]["GroupLayer"][1]["base_group_idx"] = 5
    with tempfile.TemporaryDirectory() as t:
        ref2 = write(Path(t), d, "ref.json")
        plan2, _ = score(net, get_chip("bm1684x"), ref2, exact=False)
        g0 = plan2.groups[0]
        both = replace(plan2, groups=(replace(g0, ops=g0.ops + ("/avgpool/GlobalAveragePool",)),))
        with pytest.raises(LgoptError, match=r"plan group 0 .*crosses TPU-MLIR's base groups 0 and 5"):
            export_tpumlir(both, net, ref2)


def test_refuses_splitting_one_tpumlir_op_and_foreign_reference():
    """mobilenet_v2: TPU-MLIR folds features.1's 1x1 conv into the next conv; two groups cannot split them."""
    net, ref = cal("mobilenet_v2", "bm1684x")
    plan, _ = score(net, get_chip("bm1684x"), ref, exact=False)
    g0 = plan.groups[0]
    k = g0.ops.index("/features/features.1/conv/conv.1/Conv") + 1
    bad = replace(plan, groups=(replace(g0, ops=g0.ops[:k]), replace(g0, ops=g0.ops[k:])) + plan.groups[1:])
    with pytest.raises(LgoptError, match=r"as one op"):
        export_tpumlir(bad, net, ref)
    _, other = fix("resnet18", "resnet18_bm1684x_f16")
    with pytest.raises(LgoptError, match="another model"):
        export_tpumlir(plan, net, other)


# --- without a reference -------------------------------------------------------------------------------

def test_without_reference_names_and_warnings():
    net, ref = cal("resnet18", "bm1684x")
    plan, _ = score(net, get_chip("bm1684x"), ref, exact=False)
    out = export_tpumlir(plan, net)
    refd = json.loads(Path(ref).read_text())
    ref_names = {loc for g in refd["subfunc_0"]["GroupLayer"] for loc in g["locs"]}
    ref_names |= {x["loc"] for x in refd["subfunc_0"]["GlobalLayer"]}
    mine = [loc for g in out["subfunc_0"]["GroupLayer"] for loc in g["locs"]]
    assert mine and all(loc in ref_names for loc in mine)  # <output>_<type> is TPU-MLIR's name
    assert tpumlir_name(net, "/conv1/Conv") == "/relu/Relu_output_0_Relu"
    assert tpumlir_name(net, "/fc/Gemm") == "output_Gemm"
    w = " ".join(out["lgopt"]["warnings"])
    assert "no casts" in w and "order" in w and out["lgopt"]["reference"] is None
    yolo = net_of(str(need(CAL / "onnx" / "yolov5s_like.weightless.onnx")))
    assert tpumlir_name(yolo, "/b0/act/Mul") == "/b0/act/Mul_output_0_Mul"  # SiLU: named after its Mul


# --- registry and CLI --------------------------------------------------------------------------------------

def test_registry():
    assert {"lgopt-plan", "tpu-mlir"} <= set(names())
    net, ref = cal("resnet18", "bm1684x")
    plan, _ = score(net, get_chip("bm1684x"), ref, exact=False)
    assert export("lgopt-plan", plan, net)["format"] == "lgopt-plan"
    with pytest.raises(LgoptError, match="unknown export format"):
        export("nope", plan, net)
    with pytest.raises(LgoptError, match="no option"):
        export("lgopt-plan", plan, net, reference=ref)


def test_cli_export(tmp_path, capsys):
    onnx = str(need(CAL / "onnx" / "resnet18.weightless.onnx"))
    net, ref = cal("resnet18", "bm1684x")
    plan, _ = score(net, get_chip("bm1684x"), ref, exact=False)
    pf = tmp_path / "p.plan.json"
    save_plan(plan, pf)
    out = tmp_path / "x.layer_group_cache.json"
    assert main(["export", str(pf), "--model", onnx, "--dtype", "f16", "--format", "tpu-mlir", "--reference", ref,
                 "-o", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["opt"] == 2 and d["subfunc_0"]["GroupLayer"]
    assert "2 groups" in capsys.readouterr().out  # TPU-MLIR's two, the head (pool, Flatten) among them
    assert main(["export", str(pf), "--model", onnx, "--format", "tpu-mlir", "-o", str(tmp_path / "n.json")]) == 0
    assert "warning:" in capsys.readouterr().err
    # bad input: one line, exit 2
    other = str(need(CAL / "caches" / "mobilenet_v2_bm1684x" / "opt2.layer_group_cache.json"))
    assert main(["export", str(pf), "--model", onnx, "--reference", other, "-o", str(tmp_path / "y.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another model" in err
    assert main(["export", str(pf), "--model", onnx, "--format", "onnx"]) == 2
    assert "unknown export format" in capsys.readouterr().err


@pytest.mark.parametrize("chip", ["bm1684x", "bm1688"])
def test_a_stem_group_of_one_lgopt_op_and_its_input_cast_exports_as_tpu_mlir_wrote_it(chip):
    """mobilenet_v3_small's opt2 starts with the group [input cast, first conv]: one lgopt op with the cast
    TPU-MLIR grouped it with. Re-exported with the reference's edge casts it is that group again (before,
    it went global and the grouping measured 2.4% slower)."""
    ref = need(CAL / "caches" / f"mobilenet_v3_small_{chip}" / "opt2.layer_group_cache.json")
    net = net_of(str(need(CAL / "onnx" / "mobilenet_v3_small.weightless.onnx")))
    plan, _ = score(net, get_chip(chip), str(ref), exact=False)
    out = export_tpumlir(plan, net, str(ref))
    want = [(g["locs"], g["shape_secs"]) for g in json.loads(ref.read_text())["subfunc_0"]["GroupLayer"]]
    assert [(g["locs"], g["shape_secs"]) for g in out["subfunc_0"]["GroupLayer"]] == want
    assert out["lgopt"]["warnings"] == []
    alone = export_tpumlir(plan, net, str(ref), edge_casts="global")  # without its cast it is one op: global
    assert len(alone["subfunc_0"]["GroupLayer"]) == len(want) - 1


def test_a_group_converting_a_network_output_takes_its_cast():
    """unet_small's opt2 ends with a group holding the output's f32 Cast: read back, that group converts the
    output itself (``f32_out``) and exports with the Cast again under edge_casts='global'; cleared, the Cast
    stays a global layer."""
    net, ref = cal("unet_small", "bm1684x")
    plan, _ = score(net, get_chip("bm1684x", {"cost_model": "tpu-mlir-1.30"}), ref)
    last = plan.groups[-1]
    assert last.f32_out == tuple(net.outputs)
    want = json.loads(Path(ref).read_text())["subfunc_0"]["GroupLayer"][-1]
    got = export_tpumlir(plan, net, ref, edge_casts="global")["subfunc_0"]["GroupLayer"][-1]
    assert got["locs"] == want["locs"] and got["locs"][-1].endswith("_f32")
    plain = replace(plan, groups=plan.groups[:-1] + (replace(last, f32_out=()),))
    cut = export_tpumlir(plain, net, ref, edge_casts="global")["subfunc_0"]["GroupLayer"][-1]
    assert cut["func_end_idx"] == want["func_end_idx"] - 1


def test_without_a_reference_a_group_converting_the_input_says_the_cast_stays_global():
    """A plan whose group converts the f32 input itself, exported without a reference: the cache cannot name the
    Cast, and the warnings say so."""
    net, ref = cal("unet_small", "bm1684x")
    plan, _ = score(net, get_chip("bm1684x", {"cost_model": "tpu-mlir-1.30"}), ref)
    assert any(g.f32_in for g in plan.groups)
    out = export_tpumlir(plan, net)
    assert any("Casts are not named" in w for w in out["lgopt"]["warnings"])


def test_a_group_exactly_the_references_keeps_its_casts_under_the_global_rule():
    """yolov5s_like / BM1688: TPU-MLIR computes SiLU's Mul in f32 and opens each group with the f32 Cast of the
    previous group's last conv.  A plan lgopt solved exports its edge casts as global layers, but a group that is
    one of the reference's own at its slice counts keeps them: without its Cast, [124-154] is another group to
    TPU-MLIR (its input f32 from a global Cast) and its time-step pass refused it.  A group that differs keeps the
    rule: it runs its casts globally."""
    net, ref = cal("yolov5s_like", "bm1688")
    plan, _ = score(net, get_chip("bm1688", {"cost_model": "tpu-mlir-1.30"}), ref)
    want = json.loads(Path(ref).read_text())["subfunc_0"]["GroupLayer"]
    mine = replace(plan, strategy="cpsat", solver={})
    got = export_tpumlir(mine, net, ref, edge_casts="global")["subfunc_0"]["GroupLayer"]
    same = [(g["func_start_idx"], g["func_end_idx"], g["locs"]) for g in got]
    assert same == [(g["func_start_idx"], g["func_end_idx"], g["locs"]) for g in want]
    assert any(g["locs"][0].endswith("_f32") for g in got)
    k = next(i for i, g in enumerate(plan.groups) if len(g.ops) > 2 and got[i]["locs"][0].endswith("_f32"))
    other = replace(mine, groups=tuple(replace(g, h_slices=g.h_slices + 1) if i == k else g
                                       for i, g in enumerate(plan.groups)))
    moved = export_tpumlir(other, net, ref, edge_casts="global")["subfunc_0"]["GroupLayer"]
    assert not moved[k]["locs"][0].endswith("_f32") and moved[k]["func_start_idx"] == got[k]["func_start_idx"] + 1


def test_a_transformer_groups_rows_are_its_csecs(tmp_path):
    """ViT / BM1688: TPU-MLIR views a ``[1, 197, 768]`` group as n=1, c=197, h=768, so row slices are ``csecs``
    (at most ceil(197 / 32) = 7 there); written as ``nsecs`` (as before) the final Add + LayerNorm failed to
    allocate, and as ``csecs`` it compiled (34,410,075 cycles, 0.997x opt2).  The exporter writes them so, the
    reader reads them back as lgopt's H slices, and the compiler space refuses more row slices than TPU-MLIR
    allows."""
    from lgopt.tpumlir.rules import rows_over_lanes

    net, ref = cal("vit_b_16", "bm1688")
    chip = get_chip("bm1688", {"cost_model": "tpu-mlir-1.30"})
    d = json.loads(Path(ref).read_text())
    first = d["subfunc_0"]["GroupLayer"][0]  # the first block's residual Add and LayerNorm
    assert first["locs"][-1].endswith("LayerNormalization")
    first["shape_secs"] = [1, 6, 1, 1, 1]
    plan, _ = score(net, chip, write(tmp_path, d))
    g = plan.groups[0]
    assert (g.n_slices, g.h_slices, g.c_slices) == (1, 6, 1)
    out = export_tpumlir(replace(plan, strategy="cpsat", solver={}), net, ref)
    assert out["subfunc_0"]["GroupLayer"][0]["shape_secs"] == [1, 6, 1, 1, 1]
    assert not rows_over_lanes(chip, net, g) and rows_over_lanes(chip, net, replace(g, h_slices=8))


def test_a_piece_joins_a_group_only_at_the_references_slice_counts():
    """ViT / BM1688: TPU-MLIR groups the class token's Gather piece with the last Add + LayerNorm.  At the
    reference's one slice the piece joins the exported group (as TPU-MLIR's own grouping has it); at six row
    slices it stays global: a one-row piece in a six-slice group failed to allocate."""
    net, ref = cal("vit_b_16", "bm1688")
    plan, _ = score(net, get_chip("bm1688", {"cost_model": "tpu-mlir-1.30"}), ref)
    mine = replace(plan, strategy="cpsat", solver={})
    last = export_tpumlir(mine, net, ref)["subfunc_0"]["GroupLayer"][-1]
    assert last["locs"][-1].endswith("Gather_slice") and last["shape_secs"] == [1, 1, 1, 1, 1]
    rows = replace(mine, groups=mine.groups[:-1] + (replace(mine.groups[-1], h_slices=6),))
    cut = export_tpumlir(rows, net, ref)["subfunc_0"]["GroupLayer"][-1]
    assert not cut["locs"][-1].endswith("Gather_slice") and cut["shape_secs"] == [1, 6, 1, 1, 1]

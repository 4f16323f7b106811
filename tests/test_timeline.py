"""Calibration rows from a kept TPU-MLIR compile (lgopt.tpumlir.timeline), the INT8 cost model's terms (an integer
conv's merged coefficients and its int32 passes), and the fit's count of those passes: issue 34, without
TPU-MLIR (a kept compile is written here in its formats)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from lgopt.cost.fit import fit_passes
from lgopt.cost.fitted import int_conv_work, load_constants, pass_term
from lgopt.cost.model import SliceShape
from lgopt.cost.registry import FITTED_INT8, cost_model, default_cost_model
from lgopt.cost.work import weight_transfers
from lgopt.errors import LgoptError
from lgopt.hw.chip import get_chip
from lgopt.model.network import Network, Op, Tensor, Weight
from lgopt.tpumlir.measurements import read_measurements
from lgopt.tpumlir.timeline import read_timeline

LG = ("#tpu.lg<out_addr = 0, out_size = 0, n_idx = [0], n_slice = [1], c_idx = [0], c_slice = [{c}], d_idx = [0], "
      "d_slice = [1], h_idx = {hi}, h_slice = {hs}, w_idx = [0], w_slice = [{w}], id = 0, stage = 0>")
FINAL = """module {{
  func.func @subfunc_0(%arg0: tensor<1x3x8x8xf32>) {{
    %0 = "tpu.Cast"(%arg0) : (tensor<1x3x8x8xf32>) -> tensor<1x3x8x8xsi8> loc(#loc1)
    %1 = "top.Weight"() {{path = "w"}} : () -> tensor<1x16x1x96xsi8, 4294967296 : i64> loc(#loc2)
    %2 = "tpu.Group"(%0) ({{
      %3 = "tpu.Load"(%1) {{ginfo = {w_lg}}} : (tensor<1x16x1x96xsi8>) -> tensor<1x16x1x96xsi8> loc(#loc3)
      %4 = "tpu.Load"(%0) {{ginfo = {x_lg}}} : (tensor<1x3x8x8xsi8>) -> tensor<1x3x8x8xsi8> loc(#loc4)
      %5 = "tpu.Conv2D"(%4, %3) {{ginfo = {y_lg}}} : (tensor<1x3x8x8xsi8>) -> tensor<1x16x8x8xsi8> loc(#loc5)
      %6 = "tpu.Store"(%5) {{ginfo = {y_lg}}} : (tensor<1x16x8x8xsi8>) -> tensor<1x16x8x8xsi8> loc(#loc6)
      "tpu.Yield"(%6) : (tensor<1x16x8x8xsi8>) -> () loc(#loc)
    }}) {{group_type = 0, hsecs = 2}} : (tensor<1x3x8x8xsi8>) -> tensor<1x16x8x8xsi8> loc(#loc5)
    return
  }}
}}
#loc = loc(unknown)
#loc1 = loc("x_si8")
#loc2 = loc("y_Conv_merge")
#loc3 = loc("load_y_Conv_merge")
#loc4 = loc("load_x_si8")
#loc5 = loc("y_Conv")
#loc6 = loc("y_Conv")
""".format(w_lg=LG.format(c=16, hi=[0], hs=[1], w=96), x_lg=LG.format(c=3, hi=[0, 3], hs=[5, 5], w=8),
           y_lg=LG.format(c=16, hi=[0, 4], hs=[4, 4], w=8))
PROFILE = """ENGINE_BD   ENGINE_GDMA
    Cast_3|GDMA_MATRIX|s:0|b:0|g:1|e:9|t:10|dr:0|sz:192|bw:20.0
    Load_6|GDMA_TENSOR|s:10|b:0|g:2|e:19|t:10|dr:0|sz:1536|bw:50.0
    Load_7|GDMA_TENSOR|s:20|b:0|g:3|e:24|t:5|dr:0|sz:120|bw:24.0
Conv2D_8|CONV|s:25|b:1|g:3|e:124|t:100    Load_7|GDMA_TENSOR|s:25|b:0|g:4|e:29|t:5|dr:0|sz:120|bw:24.0
Conv2D_8|AR|s:125|b:2|g:3|e:134|t:10
Conv2D_8|CONV|s:135|b:3|g:4|e:234|t:100   Store_9|GDMA_TENSOR|s:135|b:3|g:5|e:142|t:8|dr:1|sz:512|bw:64.0
Conv2D_8|AR|s:235|b:4|g:4|e:244|t:10      Store_9|GDMA_TENSOR|s:245|b:4|g:6|e:252|t:8|dr:1|sz:512|bw:64.0
"""


def kept(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    """A kept compile (its final.mlir and timeline) and the scoring tool's result for it."""
    (tmp_path / "m_bm1684x_int8_sym_final.mlir").write_text(FINAL)
    (tmp_path / "compiler_profile_0.txt").write_text(PROFILE)
    score = {"groups": [{"final_mlir_lines": [5, 12], "cycles": 243}],
             "global_ops": [{"name": "x_si8", "type": "tpu.Cast", "final_mlir_line": 3, "cycles": 10}]}
    return tmp_path, score


def test_each_slice_of_a_group_op_is_a_row_with_its_commands_shape_and_bytes(tmp_path):
    work, score = kept(tmp_path)
    t = read_timeline(work, score, {"model": "m", "chip": "bm1684x", "variant": "opt2"})
    conv = t.ops[t.ops.op_name == "y_Conv"]
    tiu = conv[conv.engine == "TIU"]
    assert list(tiu.slice_idx) == [0, 1] and list(tiu.cycles) == [110, 110] and list(tiu.n_cmds) == [2, 2]
    assert list(tiu.start) == [25, 135] and list(tiu.end) == [134, 244]  # first start, last end, as the timeline's
    assert list(tiu.hslice) == [4, 4] and list(tiu.cslice) == [16, 16] and set(tiu.role) == {"compute"}
    stores = conv[conv.engine == "GDMA"]  # the Store is named after the value it stores
    assert list(stores.role) == ["store", "store"] and list(stores.bytes) == [512, 512] and set(stores.dir) == {1}
    w = t.ops[t.ops.op_name == "load_y_Conv_merge"].iloc[0]
    assert (w.is_weight, w.bytes, w.out_shape, w.n_slices) == (1.0, 1536, "1x16x1x96", 1)
    x = t.ops[t.ops.op_name == "load_x_si8"]
    assert list(x.is_weight) == [0.0, 0.0] and list(x.hslice) == [5, 5] and list(x.cycles) == [5, 5]
    g = t.glob.iloc[0]
    assert (g["name"], g.cycles, g.gdma_cycles, g.gdma_bytes_s2l, g.out_shape) == ("x_si8", 10, 10, 192, "1x3x8x8")
    assert t.uneven == ()


def test_an_op_whose_commands_do_not_split_into_its_slices_is_left_out(tmp_path):
    """Three CONV commands over two slices: which belongs to which is a guess, so none is kept."""
    work, score = kept(tmp_path)
    prof = work / "compiler_profile_0.txt"
    prof.write_text(prof.read_text() + "Conv2D_8|CONV|s:300|b:5|g:6|e:309|t:10\n")
    t = read_timeline(work, score, {"model": "m", "chip": "bm1684x", "variant": "opt2"})
    assert t.uneven == ("y_Conv",)
    assert not ((t.ops.op_name == "y_Conv") & (t.ops.engine == "TIU")).any()


def int_conv(oc: int = 32, ic: int = 64) -> tuple[Network, Op]:
    x, y = Tensor("x", (1, ic, 128, 256), "int8"), Tensor("y", (1, oc, 128, 256), "int8")
    conv = Op("c", "Conv", ("x",), ("y",), (Weight("w", (oc, ic, 3, 3), "int8", "filter"),
                                           Weight("b", (oc,), "int32", "bias")), {"pads": (1, 1, 1, 1)},
              local=True, fused=("Relu",))
    return Network("n", {"x": x, "y": y}, (conv,), ("x",), ("y",)), conv


def test_an_integer_conv_loads_its_coefficients_as_one_tensor_a_run_per_lane():
    """TPU-MLIR's INT8 lowering merges filter, bias and requantisation (``<conv>_merge``, ``1 x lanes x 1 x
    bytes``): one transfer of a run per lane, where the F16 filter and bias are two."""
    bm1684x = get_chip("bm1684x")
    _, conv = int_conv(oc=256)
    [(nbytes, runs, point)] = weight_transfers(conv, chip=bm1684x)
    assert runs == 64 and not point and nbytes % 64 == 0 and nbytes >= 256 * 64 * 9
    _, small = int_conv(oc=16)
    assert weight_transfers(small, chip=bm1684x)[0][1] == 16  # fewer channels than lanes: a run each
    assert len(weight_transfers(conv)) == 2  # without the chip: the tensors as stored


def test_the_int8_model_prices_an_integer_conv_as_its_macs_and_the_chips_fitted_passes():
    """BM1684X's INT8 timeline: UNet's 3 x 3 conv of a 128 x 256 map costs 73,728 cycles of MACs and 3 passes of
    2,048 over its int32 output; BM1688's shows no passes (the shipped constants, fitted on other models)."""
    net, conv = int_conv()
    sl = SliceShape(1, 128, 130)
    bm1684x = get_chip("bm1684x", {"cost_model": FITTED_INT8.name})
    assert int_conv_work(bm1684x, net, conv, sl) == 73728 and pass_term(bm1684x, net, conv, sl) == 2048
    k = load_constants("bm1684x", Path(FITTED_INT8.directory or ""))
    assert k.dtype == "int8" and k.passes["conv"] == 3
    cycles = cost_model(bm1684x).tiu_cycles(bm1684x, net, conv, sl)
    assert abs(cycles / (73728 + 3 * 2048) - 1) < 0.05
    assert load_constants("bm1688", Path(FITTED_INT8.directory or "")).passes.get("conv", 0) == 0
    f16_net = Network("n", {"x": Tensor("x", (1, 64, 128, 256), "f16"), "y": Tensor("y", (1, 32, 128, 256), "f16")},
                      (), ("x",), ("y",))
    f16 = Op("c", "Conv", ("x",), ("y",), (Weight("w", (32, 64, 3, 3), "f16", "filter"),), local=True)
    assert pass_term(bm1684x, f16_net, f16, sl) == 0


def test_the_fit_counts_the_passes_its_slices_pay():
    rows = [(w, p, 2 + w + 3 * p) for w, p in ((100, 40), (220, 10), (400, 90), (800, 30), (1600, 5))]
    d = pd.DataFrame(rows, columns=["work", "passes", "cycles"])
    assert fit_passes(d) == 3
    assert fit_passes(d.assign(passes=0)) == 0  # an F16 category: nothing to count


def _conv_rows(fused_cost: float) -> pd.DataFrame:
    """Conv slices at half their work (BM1690's F16 line) with or without a fused ReLU, whose pass costs
    ``fused_cost`` a unit, and the Adds that price such a pass at 2 cycles a unit."""
    convs = [("c", w, f, w / 2 + fused_cost * f) for w in (1000.0, 2000.0, 4000.0, 8000.0) for f in (0, w / 10)]
    adds = [("a", w, 0, 2 * w) for w in (10.0, 20.0, 40.0)]
    rows = [{"model": "m", "lg": f"{k}{i}", "nslice": 1, "hslice": 1, "cat": "conv" if k == "c" else "Add",
             "fam": "conv" if k == "c" else "binary", "work": w, "fused": f, "cycles": c}
            for i, (k, w, f, c) in enumerate(convs + adds)]
    return pd.DataFrame(rows)


def test_the_fit_finds_whether_a_conv_pays_for_its_fused_activation():
    """BM1684X and BM1688 run a fused ReLU as a pass after the conv; BM1690's convs cost the same with or
    without one.  The fit keeps whichever way the convs with one are less off, and the convs' line then holds."""
    from lgopt.cost.fit import fit_tiu, fused_passes_pay

    for cost, pays in ((2.0, True), (0.0, False)):
        d = _conv_rows(cost)
        assert fused_passes_pay(d) is pays
        _, tiu = fit_tiu(d, pays)
        assert abs(tiu["conv"]["b"] - 0.5) < 0.01, (cost, tiu["conv"])
        # a transposed conv the data never shows takes the convs' line, not the analytic work's 1.0
        assert tiu["deconv"]["b"] == tiu["conv"]["b"] and tiu["deconv"]["n"] == 0


def test_int8_constants_are_the_default_for_int8_on_the_chips_measured():
    assert default_cost_model(get_chip("bm1688"), "int8") == FITTED_INT8.name
    assert default_cost_model(get_chip("bm1684"), "int8") == FITTED_INT8.name  # its _0.dat timelines, fitted
    # BM1690's: its 8-core groupings compiled again on one core, whose timeline is the whole compile
    assert default_cost_model(get_chip("bm1690"), "int8") == FITTED_INT8.name
    assert default_cost_model(get_chip("bm1690"), "f16") == "tpu-mlir-1.30"
    assert default_cost_model(get_chip("bm1684"), "f16") == "analytic"  # no BM1684 F16 timeline was fitted
    assert default_cost_model(get_chip("bm1688"), "f16") == "tpu-mlir-1.30"


def test_measurements_say_their_deployment(tmp_path):
    """The fit prices the models in the dtype the measurements were made in: ``quantize`` in totals.csv."""
    cols = {"totals.csv": "model,chip,variant,kind,status,total_cycles,cache_file,quantize",
            "groups.csv": "model,chip,variant,group_pos,func_start_idx,n_slices,cycles",
            "globals.csv": "model,chip,variant,name,type,out_shape,cycles,gdma_cycles,gdma_bytes_s2l,gdma_bytes_l2s",
            "ops.csv.gz": "model,chip,variant,group_pos,op_name,role,is_weight,engine,slice_idx,cycles,bytes,"
                          "out_shape,nslice,cslice,hslice,wslice",
            "model_ops.csv": "model,chip,name,onnx_outputs"}
    for name, header in cols.items():
        pd.DataFrame(columns=header.split(",")).to_csv(tmp_path / name, index=False)
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "m.weightless.onnx").write_bytes(b"")
    tot = pd.DataFrame([["m", "bm1688", "opt2", "opt2", "ok", 100, "c.json", "INT8"]],
                       columns=cols["totals.csv"].split(","))
    tot.to_csv(tmp_path / "totals.csv", index=False)
    assert read_measurements(tmp_path).dtype == "int8"
    pd.concat([tot, tot.assign(quantize="F16")]).to_csv(tmp_path / "totals.csv", index=False)
    with pytest.raises(LgoptError, match="mixes deployments"):
        _ = read_measurements(tmp_path).dtype
    tot.assign(cores=2).to_csv(tmp_path / "totals.csv", index=False)  # core 0's timelines: not a whole compile
    with pytest.raises(LgoptError, match="measured on 2 cores"):
        read_measurements(tmp_path)


def test_an_integer_conv_holds_a_requantisation_block_per_output_channel():
    """TPU-MLIR's INT8 coefficients of a 1 x 1 conv 24 -> 144 on BM1684X are ``1x64x1x384``: per lane, 3 channels
    of 64 filter bytes (24 rounded to the IC parallelism) and 64 of bias and requantisation each.  The F16 conv
    merges one 32-bit bias per channel instead."""
    from lgopt.hw.sizing import weight_bytes

    def conv(dtype: str) -> Op:
        return Op("c", "Conv", ("x",), ("y",), (Weight("w", (144, 24, 1, 1), dtype, "filter"),
                                               Weight("b", (144,), dtype, "bias")), local=True)

    bm1684x = get_chip("bm1684x")
    assert weight_bytes(bm1684x, conv("int8")) == 384
    assert weight_bytes(bm1684x, conv("f16")) == 3 * 32 * 2 + 64  # 24 channels rounded to 32 f16s, one bias block
    assert weight_transfers(conv("int8"), chip=bm1684x) == [(384 * 64, 64, False)]


def test_a_core_of_several_reads_its_own_profile_and_its_chunk_of_the_slices(tmp_path):
    """On 2 cores the group's 2 H slices are one a core (``core_chunks``): core 1's profile holds one CONV run, read
    as its one slice, and the weight load every core makes."""
    work, score = kept(tmp_path)
    one = "\n".join(ln for ln in PROFILE.splitlines() if "s:135" not in ln and "s:235" not in ln and "s:245" not in ln)
    (work / "compiler_profile_1.txt").write_text(one + "\n")
    t = read_timeline(work, score, {"model": "m", "chip": "bm1688", "variant": "opt2"}, core=1, cores=2)
    tiu = t.ops[(t.ops.op_name == "y_Conv") & (t.ops.engine == "TIU")]
    assert list(tiu.cycles) == [110] and list(tiu.n_slices) == [1] and list(tiu.hslice) == [4]
    w = t.ops[t.ops.op_name == "load_y_Conv_merge"]  # each core running a part of the group loads its weights
    assert list(w.bytes) == [1536] and t.uneven == ()

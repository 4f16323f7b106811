"""The measured floor (lgopt.tpumlir.floor): every op's cheapest measured cost, summed, bounds a grouping."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from lgopt.tpumlir import floor

SHARED = Path(__file__).resolve().parents[2] / "shared"
CAL = SHARED / "calibration"
READER = SHARED / "tpu-mlir" / "lg_roundtrip.py"
needs_data = pytest.mark.skipif(not (CAL / "ops.csv.gz").exists(), reason="needs ../shared/calibration")
needs_reader = pytest.mark.skipif(not READER.exists(), reason="needs ../shared/tpu-mlir/lg_roundtrip.py")


def _costs(rows: list[tuple[str, str, float | None, str, str]]) -> pd.DataFrame:
    local = pd.DataFrame([(k, o, c) for k, o, c, kind, _ in rows if kind == "local"], columns=["key", "op", "cycles"])
    glob = pd.DataFrame([(k, o, c, t) for k, o, c, kind, t in rows if kind == "global"],
                        columns=["key", "op", "cycles", "type"])
    return floor.op_costs(local, glob)


def test_floor_is_the_sum_of_each_ops_cheapest_measurement():
    costs = _costs([
        ("opt2", "conv", 100, "local", ""), ("opt2", "add", 30, "local", ""), ("opt2", "cat", 20, "local", ""),
        ("v1", "conv", 90, "local", ""), ("v1", "add", 50, "global", "tpu.Add"),
        ("v1", "cat", None, "global", "tpu.Concat"),  # written in place by its producers: free
        ("v2", "conv", None, "global", "tpu.Conv2D"),  # the timeline missed it: no measurement, not free
        ("v2", "cast", 1, "local", ""),  # an op opt2 does not have: not counted
    ])
    f = floor.floor_of(costs, "opt2")
    assert f == {"groupings": 3, "opt2_op_sum": 150, "floor": 90 + 30 + 0}


def test_a_grouping_scaled_to_batch_n_slices_n_times_as_often():
    cache = {"opt": 2, "subfunc_0": {"GroupLayer": [{"shape_secs": [1, 1, 1, 4, 1]}, {"shape_secs": [0, 0, 0, 0, 0]},
                                                    {"shape_secs": [2, 1, 1, 1, 1]}]}}
    out = floor.n_sliced(cache, 4)
    assert [g["shape_secs"] for g in out["subfunc_0"]["GroupLayer"]] == [[4, 1, 1, 4, 1], [0, 0, 0, 0, 0],
                                                                        [8, 1, 1, 1, 1]]
    assert cache["subfunc_0"]["GroupLayer"][0]["shape_secs"] == [1, 1, 1, 4, 1]  # the input is left alone


def test_the_issue_targets_cases():
    df = pd.DataFrame([
        {"model": "resnet18", "chip": "bm1688", "batch": 4, "groups": 3},
        {"model": "resnet18", "chip": "bm1688", "batch": 1, "groups": 3},
        {"model": "unet_small", "chip": "bm1684x", "batch": 1, "groups": 3},
        {"model": "yolov5s_like", "chip": "bm1684x", "batch": 1, "groups": 1},
    ])
    assert [(r.model, r.batch) for r in floor.target_cases(df).itertuples()] == [("resnet18", 4), ("unet_small", 1)]


@needs_data
def test_calibration_floor_bounds_every_compiled_grouping():
    """What makes it a floor: no grouping TPU-MLIR compiled measured less, and opt2's own op costs sit between."""
    tot = pd.read_csv(CAL / "totals.csv")
    best = tot[tot.status == "ok"].groupby(["model", "chip"]).total_cycles.min()
    rows = floor.calibration_rows(CAL)
    assert len(rows) == len(best)
    for r in rows:
        assert 0 < r["floor"] <= r["opt2_op_sum"] <= r["opt2_measured"], r
        assert r["floor"] <= best[(r["model"], r["chip"])], r
        assert 0 < r["floor_gdma"] <= best[(r["model"], r["chip"])], r  # the GDMA engine's floor bounds them too
        assert max(r["floor"], r["floor_gdma"]) <= r["floor_joint"] <= best[(r["model"], r["chip"])], r
        assert r["exceeding"] == 0, r  # no compiled grouping's own rows overrule its measured total


def _calibration(folder: Path, totals: list, ops: list, glob: list) -> Path:
    """A calibration-format folder: ``totals`` (model, chip, variant, status, total), ``ops`` (model, chip, variant,
    group_pos, op_name, engine, is_weight, cycles, start, end) and ``glob`` (model, chip, variant, name, type,
    cycles) rows, and an empty ``groups.csv``."""
    pd.DataFrame(totals, columns=["model", "chip", "variant", "status", "total_cycles"]).to_csv(
        folder / "totals.csv", index=False)
    pd.DataFrame(ops, columns=["model", "chip", "variant", "group_pos", "op_name", "engine", "is_weight", "cycles",
                               "start", "end"]).to_csv(folder / "ops.csv.gz", index=False)
    pd.DataFrame(glob, columns=["model", "chip", "variant", "name", "type", "cycles"]).to_csv(
        folder / "globals.csv", index=False)
    pd.DataFrame(columns=["model", "chip", "variant"]).to_csv(folder / "groups.csv", index=False)
    return folder


def test_the_gdma_floor_takes_each_ops_coefficient_loads_or_its_global_segment(tmp_path: Path):
    """An op's GDMA term: its coefficient loads where a group ran it (INT8's merged tensor, F16's reordered filter;
    an F16 bias, named after no op, is left out; an op with no coefficients loads none), its segment where it ran
    as a global layer."""
    cal = _calibration(tmp_path, [["m", "c", "opt2", "ok", 100], ["m", "c", "v1", "ok", 120]], [
        ["m", "c", "opt2", 0, "load_a_Conv_merge", "GDMA", 1, 30, 0, 29],
        ["m", "c", "opt2", 0, "load_b_filter_reorderd", "GDMA", 1, 20, 30, 49],
        ["m", "c", "opt2", 0, "load_onnx::Conv_7", "GDMA", 1, 5, 50, 54], ["m", "c", "opt2", 0, "load_x", "GDMA", 0,
                                                                         50, 55, 104],
        ["m", "c", "opt2", 0, "a_Conv", "TIU", 0, 9, 30, 38], ["m", "c", "opt2", 0, "b", "TIU", 0, 9, 50, 58],
        ["m", "c", "v1", 0, "load_b_filter_reorderd", "GDMA", 1, 25, 0, 24], ["m", "c", "v1", 0, "b", "TIU", 0, 9, 25,
                                                                            33],
        ["m", "c", "v1", 0, "relu", "TIU", 0, 4, 34, 37]],  # no coefficients: 0 on the GDMA engine when local
        [["m", "c", "v1", "a_Conv", "tpu.Conv2D", 12], ["m", "c", "opt2", "relu", "tpu.Relu", 15]])
    costs = floor.engine_costs(floor.context_costs(cal), "dma")
    got = {(r.key, r.op): r.cycles for r in costs.itertuples()}
    assert got == {("opt2", "a_Conv"): 30, ("opt2", "b"): 20, ("v1", "b"): 25, ("v1", "relu"): 0,
                   ("v1", "a_Conv"): 12, ("opt2", "relu"): 15}
    assert floor.floor_of(costs, "opt2")["floor"] == 12 + 20 + 0  # a_Conv as a global layer, b in opt2, relu local


def test_the_joint_floor_does_not_hide_a_global_layers_load_behind_other_ops_compute(tmp_path: Path):
    """Each engine's floor alone takes a conv at its cheaper global load and overlaps it with the other ops'
    compute; a global layer has the timeline to itself, so both at once cost more, and the joint floor says so.
    It still bounds every grouping it comes from, and :func:`exceeding` flags one that its rows would overrule."""
    cal = _calibration(tmp_path, [["m", "c", "opt2", "ok", 140], ["m", "c", "v1", "ok", 130]], [
        ["m", "c", "opt2", 0, "load_conv_merge", "GDMA", 1, 100, 0, 99], ["m", "c", "opt2", 0, "conv", "TIU", 0, 30,
                                                                          100, 129],
        ["m", "c", "opt2", 0, "add", "TIU", 0, 60, 40, 99], ["m", "c", "v1", 0, "add", "TIU", 0, 60, 70, 129],
        ["m", "c", "v1", -1, "conv", "GDMA", 0, 40, 0, 39], ["m", "c", "v1", -1, "conv", "TIU", 0, 30, 40, 69]],
        [["m", "c", "v1", "conv", "tpu.Conv2D", 70]])
    row = floor.calibration_rows(cal)[0]
    assert (row["floor"], row["floor_gdma"]) == (30 + 60, 70 + 0)
    assert row["floor_joint"] == 100  # conv local: max(30 + 60, 100 + 0); global: 70 then add's 60, 130
    assert row["exceeding"] == 0  # opt2: 100 <= 140; v1: 70 + 60 <= 130
    ctx = floor.context_costs(cal)
    assert floor.exceeding(ctx, pd.DataFrame({"key": ["opt2", "v1"], "total_cycles": [140, 120]})) == 1


def test_the_best_measured_grouping_is_the_least_compiled_total(tmp_path: Path):
    """What the measured groupings already show beside the floor: a refused grouping's total is no measurement."""
    pd.DataFrame([["m", "c", "opt2", "ok", 100], ["m", "c", "v1", "ok", 90], ["m", "c", "v2", "failed", 10],
                  ["n", "c", "opt2", "ok", 50]], columns=["model", "chip", "variant", "status", "total_cycles"]
                 ).to_csv(tmp_path / "totals.csv", index=False)
    best = floor.best_measured(tmp_path)
    assert [tuple(r) for r in best.itertuples(index=False)] == [("m", "c", 90, "v1"), ("n", "c", 50, "opt2")]


@needs_reader
def test_read_run_takes_local_ops_tiu_and_global_ops_segments(tmp_path: Path):
    (tmp_path / "m_final.mlir").write_text("\n".join([
        '#loc = loc(unknown)',
        'module @m {',
        '  func.func @subfunc_0(%arg0: tensor<1x3x8x8xf16> loc("input")) -> tensor<1x3x8x8xf16> {',
        '    %1 = "tpu.Group"(%arg0) ({',
        '      %2 = "tpu.Load"(%arg0) {ginfo = 0} : (tensor<1x3x8x8xf16>) -> tensor<1x3x8x8xf16> loc(#loc1)',
        '      %3 = "tpu.Conv2D"(%2) {ginfo = 0} : (tensor<1x3x8x8xf16>) -> tensor<1x3x8x8xf16> loc(#loc2)',
        '      %4 = "tpu.Store"(%3) {ginfo = 0} : (tensor<1x3x8x8xf16>) -> tensor<1x3x8x8xf16> loc(#loc2)',
        '      "tpu.Yield"(%4) : (tensor<1x3x8x8xf16>) -> () loc(#loc2)',
        '    }) {csecs = 1 : i64, hsecs = 2 : i64, nsecs = 1 : i64} : (tensor<1x3x8x8xf16>) -> tensor<1x3x8x8xf16> '
        'loc(#loc2)',
        '    %5 = "tpu.Add"(%1, %1) : (tensor<1x3x8x8xf16>, tensor<1x3x8x8xf16>) -> tensor<1x3x8x8xf16> loc(#loc3)',
        '    return %5 : tensor<1x3x8x8xf16> loc(#loc)',
        '  } loc(#loc)',
        '} loc(#loc)',
        '#loc1 = loc("input")',
        '#loc2 = loc("conv")',
        '#loc3 = loc("add")',
    ]))
    (tmp_path / "compiler_profile_0.txt").write_text("\n".join([
        "ENGINE_BD    ENGINE_GDMA",
        "                    Load_5|GDMA_TENSOR|s:0|b:0|g:1|e:99|t:100|dr:0|sz:384|bw:3.84",
        "Conv2D_6|CONV|s:100|b:1|g:1|e:129|t:30    Load_5|GDMA_TENSOR|s:100|b:1|g:2|e:149|t:50|dr:0|sz:384|bw:7",
        "Conv2D_6|CONV|s:150|b:2|g:2|e:169|t:20",
        "Add_10|AR|s:200|b:3|g:3|e:209|t:10",
        "API_END total_cycle:300|b:3|g:3",
    ]))
    score = {"global_ops": [{"name": "add", "type": "tpu.Add", "cycles": 80}]}
    got = floor.read_run(tmp_path, score, floor.load_reader(READER)).set_index("op").cycles.to_dict()
    assert got == {"conv": 50, "add": 80}


def test_caches_for_a_batch_are_distinct_and_start_with_the_compilers_own(tmp_path: Path):
    cal = tmp_path / "cal"
    cal.mkdir()
    one = {"opt": 2, "subfunc_0": {"GroupLayer": [{"shape_secs": [1, 1, 1, 2, 1]}]}}
    (cal / "opt2.layer_group_cache.json").write_text(json.dumps(one))
    (cal / "v01.layer_group_cache.json").write_text(json.dumps({**one, "lgopt": {"note": 1}}))
    own = tmp_path / "own.layer_group_cache.json"
    own.write_text(json.dumps({"opt": 2, "subfunc_0": {"GroupLayer": [{"shape_secs": [4, 1, 1, 1, 1]}]}}))
    out = floor.distinct_caches(own, [own], sorted(cal.glob("*.json")), 4, tmp_path)
    assert [p.name for p in out] == ["own.layer_group_cache.json", "opt2.layer_group_cache.json",
                                     "opt2_n4.layer_group_cache.json"]


def test_a_partial_rerun_keeps_the_rows_it_does_not_measure_again():
    """``--batch 4 --models resnet18`` replaces resnet18's batch-4 row and keeps every other compiled one; the
    batch-1 rows come from the calibration data each time, never from the old table."""
    row = {"groups": 3, "opt2_measured": 100, "groupings": 2, "opt2_op_sum": 90, "floor": 80}
    old = pd.DataFrame([{"model": m, "chip": "bm1688", "batch": b, **row}
                        for m, b in (("resnet18", 4), ("unet_small", 4), ("stale", 1))])
    new = [{"model": "resnet18", "chip": "bm1688", "batch": 4, **row, "floor": 70},
           {"model": "unet_small", "chip": "bm1688", "batch": 1, **row}]
    got = floor.floor_table(floor.with_kept_rows(new, old))
    assert [(r.model, r.batch, r.floor) for r in got.itertuples()] == [("unet_small", 1, 80), ("resnet18", 4, 70),
                                                                      ("unet_small", 4, 80)]
    assert got.floor_over_opt2.tolist() == [0.8, 0.7, 0.8] and got.opt2_ops_over_total.tolist() == [0.9] * 3


def test_the_scoring_tools_reader_loads_from_its_file_alone(tmp_path: Path):
    (tmp_path / "reader.py").write_text("import json\n\ndef read_final(path):\n    return [], None\n")
    assert floor.load_reader(tmp_path / "reader.py").read_final("x") == ([], None)


def test_on_several_cores_a_global_layer_counts_its_own_commands_on_each_engine_not_its_segment(tmp_path: Path):
    """Core 0's segment of a global layer can hold an unsynced one-slice group's time (BM1690 INT8's UNet floor
    came out above opt2 so), and its own commands interleave with the group's: each engine's own commands count,
    beside every other op's on that engine, and no wall."""
    cal = _calibration(tmp_path, [["m", "c", "opt2", "ok", 100]], [
        ["m", "c", "opt2", 0, "conv", "TIU", 0, 40, 0, 39], ["m", "c", "opt2", -1, "pool", "TIU", None, 7, 52, 58],
        ["m", "c", "opt2", -1, "pool", "GDMA", 0, 9, 43, 51], ["m", "c", "opt2", -1, "pool", "GDMA", 0, 3, 59, 61]],
        [["m", "c", "opt2", "pool", "tpu.Pool2D", 60], ["m", "c", "opt2", "view", "tpu.Reshape", None],
         ["m", "c", "opt2", "lost", "tpu.Add", None]])  # an add with no command of its own: no measurement
    by_segment = floor.context_costs(cal).set_index("op")
    own = floor.context_costs(cal, segments=False).set_index("op")
    assert by_segment.wall.to_dict() == {"conv": 0, "pool": 60, "view": 0}
    assert own.wall.to_dict() == {"conv": 0, "pool": 0, "view": 0}
    assert (own.tiu.to_dict(), own.dma.to_dict()) == ({"conv": 40, "pool": 7, "view": 0}, {"conv": 0, "pool": 12,
                                                                                            "view": 0})
    assert floor.own_bound(own.reset_index()) == max(40 + 7, 12)

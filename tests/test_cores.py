"""Several cores (issue 34): a group's slices shared over the cores as TPU-MLIR's codegen shares them, costed per
core, verified per core and simulated per core, each core in its own LMEM."""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import PROBLEMS
from test_cli import run

from lgopt.check.simulate import simulate
from lgopt.check.verify import verify_plan
from lgopt.cost.bound import lower_bound
from lgopt.cost.pipeline import group_cost
from lgopt.group.build import try_group
from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_problem
from lgopt.model.plan import core_chunks
from lgopt.strategies.greedy import greedy

RESNET = str(PROBLEMS / "resnet18.json")


@pytest.fixture(scope="module")
def net():
    return load_problem(RESNET)


def test_shares_are_tpu_mlirs():
    """``get_sec_per_cores``: S // cores each, the first S % cores one more, idle cores left out."""
    assert core_chunks(7, 2) == ((0, 4), (4, 7))
    assert core_chunks(3, 8) == ((0, 1), (1, 2), (2, 3))
    assert core_chunks(16, 8) == tuple((2 * k, 2 * k + 2) for k in range(8))
    for s in range(1, 20):
        for c in (1, 2, 8):
            ch = core_chunks(s, c)
            assert ch[0][0] == 0 and ch[-1][1] == s and all(a < b for a, b in ch)
            assert all(p[1] == q[0] for p, q in zip(ch, ch[1:])) and len(ch) == min(s, c)


def test_sliced_group_costs_less_on_two_cores_never_below_half(net):
    one = get_chip("bm1688")
    two = replace(one, used_cores=2)
    ops = [op.name for op in net.ops[:3]]
    g1, _ = try_group(net, one, ops, 1, 4)
    g2, _ = try_group(net, two, ops, 1, 4)
    assert g1 is not None and g2 is not None
    assert g1.core_slices == () and g2.core_slices == ((0, 2), (2, 4))
    c1, c2 = group_cost(one, net, g1)["cycles"], group_cost(two, net, g2)["cycles"]
    assert c1 / 2 <= c2 < c1
    # a one-slice group runs on core 0 alone: the same cost on any number of cores
    u1, _ = try_group(net, one, ops[1:], 1, 1)
    u2, _ = try_group(net, two, ops[1:], 1, 1)
    assert u1 is not None and u2 is not None and u2.chunks == ((0, 1),)
    assert group_cost(one, net, u1) == group_cost(two, net, u2)


def test_two_core_plan_verifies_simulates_and_stays_above_its_bound(net):
    chip = get_chip("bm1688", {"used_cores": 2})
    plan = greedy(net, chip)
    assert any(len(g.chunks) == 2 for g in plan.groups), "the baseline slices some group over both cores"
    assert verify_plan(net, plan) == []
    assert plan.chip["used_cores"] == 2 and not any(g.kept_in or g.kept_out for g in plan.groups)
    sim = simulate(net, plan)
    assert sim.ok, sim.summary()
    assert lower_bound(chip, net)["cycles"] <= plan.cost["cycles"]


def test_verifier_checks_the_shares_and_forbids_hand_over(net):
    plan = greedy(net, get_chip("bm1688", {"used_cores": 2}))
    k = next(i for i, g in enumerate(plan.groups) if len(g.chunks) == 2)
    g = plan.groups[k]
    S = g.num_slices
    swapped = tuple(reversed(g.core_slices))  # core 0 runs the last share: not TPU-MLIR's order
    wrong = replace(plan, groups=tuple(replace(h, core_slices=swapped) if i == k else h
                                       for i, h in enumerate(plan.groups)))
    assert S >= 2 and any("TPU-MLIR's shares" in str(v) for v in verify_plan(net, wrong))
    unshared = replace(plan, groups=tuple(replace(h, core_slices=()) if i == k else h
                                          for i, h in enumerate(plan.groups)))
    assert any("TPU-MLIR's shares" in str(v) for v in verify_plan(net, unshared))
    kept = replace(plan, groups=tuple(replace(h, kept_out=(net.op(h.ops[-1]).outputs[0],)) if i == k else h
                                      for i, h in enumerate(plan.groups)))
    assert any("own LMEM" in str(v) for v in verify_plan(net, kept))


def test_cli_cores(capsys, tmp_path):
    plan = tmp_path / "p.json"
    code, _, err = run(capsys, "solve", RESNET, "--chip", "bm1688", "--cores", "2", "--strategy", "greedy",
                       "-o", str(plan))
    assert code == 0, err
    d = json.loads(plan.read_text())
    assert d["chip"]["used_cores"] == 2 and any(g.get("core_slices") for g in d["groups"])
    code, _, err = run(capsys, "solve", RESNET, "--chip", "bm1684x", "--cores", "2")
    assert code == 2 and "has 1 core(s)" in err and err.count("\n") == 1
    code, _, err = run(capsys, "export", str(plan), "--model", RESNET, "--cores", "1", "-o", str(tmp_path / "c.json"))
    assert code == 2 and "planned for 2 core(s)" in err
    code, out, err = run(capsys, "verify", str(plan), "--model", RESNET)
    assert code == 0, err


def test_sweep_and_compare_take_the_cores(capsys, tmp_path):
    """An architect sweeps the cores a deployment uses like any chip parameter; compare plans on ``--cores``."""
    import pandas as pd

    out = tmp_path / "sw"
    code, _, err = run(capsys, "sweep", RESNET, "--chip", "bm1688", "--set", "used_cores=1,2", "--strategies",
                       "greedy", "-o", str(out))
    assert code == 0, err
    df = pd.read_csv(out / "sweep.csv").set_index("used_cores")
    assert df.loc[2, "cycles"] < df.loc[1, "cycles"]  # the baseline slices groups, and both cores share them
    code, _, err = run(capsys, "sweep", RESNET, "--chip", "bm1684x", "--set", "used_cores=1,2")
    assert code == 2 and "has 1 core(s)" in err
    code, _, err = run(capsys, "compare", RESNET, "--chip", "bm1688", "--cores", "2", "--strategies", "greedy",
                       "-o", str(tmp_path / "cmp"))
    assert code == 0, err


def _speedup_constants(**cores):
    from lgopt.cost.fitted import ChipConstants

    return ChipConstants.from_json({**_shipped_doc("bm1690"), "cores": cores})


def _shipped_doc(chip):
    from lgopt.cost.fitted import CALIBRATION_DIR

    return json.loads((Path(CALIBRATION_DIR) / f"{chip}.json").read_text())


def test_a_global_layer_on_several_cores_is_as_fast_as_its_kind_was_measured():
    """TPU-MLIR 1.30 spreads a global conv over its output channels a lane's worth to a core (BM1690 F16: 64
    channels 1.00x on 8 cores, 512 channels 3.9x), cuts elementwise ops into a piece a core, and runs a permute on
    one core; a model measured on 8 cores says nothing of 2."""
    from lgopt.cost.fitted import global_speedup_of
    from lgopt.model.network import Network, Op, Tensor, Weight

    k = _speedup_constants(measured_cores=8, global_speedup={"parallel": 5.0, "move": 1.0},
                           channel_exponent={"conv": 0.5, "matmul": 1.0}, held_out_error=0.1)
    t = {"x": Tensor("x", (1, 64, 7, 7), "f16"), "y": Tensor("y", (1, 512, 7, 7), "f16"),
         "z": Tensor("z", (1, 512, 7, 7), "f16"), "p": Tensor("p", (1, 7, 7, 512), "f16")}
    wide = Op("c", "Conv", ("x",), ("y",), (Weight("w", (512, 64, 1, 1), "f16", "filter"),))
    narrow = Op("n", "Conv", ("y",), ("x",), (Weight("v", (64, 512, 1, 1), "f16", "filter"),))
    relu, perm = Op("r", "Relu", ("y",), ("z",)), Op("t", "Transpose", ("z",), ("p",), attrs={"perm": (0, 2, 3, 1)})
    net = Network("n", t, (wide, narrow, relu, perm), ("x",), ("p",))
    eight, two = get_chip("bm1690", {"used_cores": 8}), get_chip("bm1690", {"used_cores": 2})
    assert [global_speedup_of(k, eight, net, op) for op in (wide, narrow, relu, perm)] == [8 ** 0.5, 1.0, 5.0, 1.0]
    assert global_speedup_of(k, two, net, relu) is None  # measured on 8 cores only: the cores share it evenly


def test_several_cores_are_searched_at_the_margin_only_where_that_search_was_measured():
    """The held-out error of the core terms is measured on TPU-MLIR's own groupings and did not carry to lgopt's
    (session 16: plans at 1.12-1.20x of opt2), so a search on several cores is trusted at the margin only where the
    fit carries a measured check of it (``search_checked``, written by ``benchmarks/settings.py --record-search``:
    BM1688 on 2 cores), not merely terms fitted on that many cores (BM1690 INT8: ConvNeXt refused twice),
    nor with the analytic model's terms or another core count's; ``trust_search`` searches to make the check."""
    from lgopt.cost.fit import fitted_model
    from lgopt.tpumlir.space import _unmeasured_setting

    net = load_problem(RESNET)
    doc = _shipped_doc("bm1690")
    why = {}
    for checked in ("", "2026-11-29: 11 models at the default margin, none refused or slower"):
        with tempfile.TemporaryDirectory() as tmp:
            cores = {**doc.get("cores", {}), "measured_cores": 8, "held_out_error": 0.048, "search_checked": checked}
            (Path(tmp) / "bm1690.json").write_text(json.dumps({**doc, "cores": cores}))
            with fitted_model(f"test-cores-{bool(checked)}", Path(tmp)) as m:
                chip = {n: get_chip("bm1690", {"used_cores": n, "cost_model": m.name}) for n in (8, 4)}
                why[bool(checked)] = _unmeasured_setting(chip[8], net)
                why["forced"] = _unmeasured_setting(chip[8], net, trust_search=True)
                why["four"] = _unmeasured_setting(chip[4], net)
    assert "within 4.8% held out" in why[False] and "trusted only when judged" in why[False]
    assert why[True] == "" and why["forced"] == "" and "fitted on no deployment over 4 cores" in why["four"]
    plain = _unmeasured_setting(get_chip("bm1690", {"used_cores": 8}), net)  # the analytic model: no such terms
    assert "fitted on no deployment over 8 cores" in plain


def test_the_io_casts_are_cut_a_piece_a_core_like_an_elementwise_global_layer():
    """TPU-MLIR runs a network input's Cast as a ``tpu.CoreParallel`` on several cores (MnasNet on BM1690 INT8: 12,340
    cycles on one core, about 3,100 on core 0 of 8); priced whole on each core it put BM1690's 8-core totals
    4-9 % high.  Its bytes and transfer cycles are the same; its time is shared as the kind was measured."""
    from lgopt.cost.cycles import io_cast_cost
    from lgopt.strategies.settings import SearchSettings

    net = load_problem(str(PROBLEMS / "unet.json"))
    one = get_chip("bm1690", {"cost_model": "tpu-mlir-1.30"})
    eight = get_chip("bm1690", {"cost_model": "tpu-mlir-1.30", "used_cores": 8})
    plan = greedy(net, one, SearchSettings(h_ratio=None))
    alone, shared = io_cast_cost(one, net, plan), io_cast_cost(eight, net, plan)
    assert alone["cycles"] > 0 and shared["traffic_bytes"] == alone["traffic_bytes"]
    assert shared["gdma_cycles"] == alone["gdma_cycles"]
    assert alone["cycles"] / 8 <= shared["cycles"] < alone["cycles"] / 3  # BM1690 F16's measured 5.2x, and a sync


def test_a_classifier_head_on_several_cores_splits_its_weight_rows():
    """A one-row weighted matmul loads its weight row by row, each row a run with a fixed overhead, and the cores
    split each row's columns: a 1000-wide head gains less from 8 cores than a 4096-wide one (TPU-MLIR 1.30, INT8
    on BM1690, op by op: 2.6-2.9x and 5.2x), and a head of two rows keeps the channel exponent."""
    from lgopt.cost.fitted import global_speedup_of
    from lgopt.model.network import Network, Op, Tensor, Weight

    doc = _shipped_doc("bm1690")
    doc["global"] = {**doc["global"], "Gemm": {"a": 1200.0, "b": 0.0137, "row_run": 328}}
    k = _speedup_constants_of(doc, measured_cores=8, channel_exponent={"conv": 0.0, "matmul": 0.8})
    t = {"x": Tensor("x", (1, 512, 1, 1), "int8", (1, 512)), "y": Tensor("y", (1, 1000, 1, 1), "int8", (1, 1000)),
         "z": Tensor("z", (1, 4096, 1, 1), "int8", (1, 4096)), "r": Tensor("r", (2, 1000, 1, 1), "int8", (2, 1000)),
         "q": Tensor("q", (2, 512, 1, 1), "int8", (2, 512))}
    head = Op("h", "Gemm", ("x",), ("y",), (Weight("w", (1000, 512), "int8", "filter"),))
    wide = Op("v", "Gemm", ("x",), ("z",), (Weight("u", (4096, 512), "int8", "filter"),))
    rows2 = Op("b", "Gemm", ("q",), ("r",), (Weight("s", (1000, 512), "int8", "filter"),))
    net = Network("n", t, (head, wide, rows2), ("x", "q"), ("y", "z", "r"))
    eight = get_chip("bm1690", {"used_cores": 8})
    s_head, s_wide, s_rows = (global_speedup_of(k, eight, net, op) for op in (head, wide, rows2))
    assert 2.4 < s_head < 3.0 and 4.5 < s_wide < 5.5
    assert s_rows == pytest.approx(8 ** 0.8)


def test_a_float_matmul_with_a_relu_fused_in_runs_on_one_core():
    """TPU-MLIR 1.30 runs an F16 weighted matmul whose Relu it fused on core 0 alone (BM1690, 8 cores, a one-Gemm
    model: ``4096 x 4096`` with the Relu 498,290 cycles, all its weight loaded by core 0; without it 76,161), and
    splits the INT8 one (the Relu is in its requantised output).  VGG-16's F16 heads were priced at 0.38 of their
    measured opt2 with all eight cores on them."""
    from lgopt.cost.fitted import global_speedup_of
    from lgopt.model.network import Network, Op, Tensor, Weight

    doc = _shipped_doc("bm1690")
    doc["global"] = {**doc["global"], "Gemm": {"a": 1200.0, "b": 0.0137, "row_run": 328}}
    k = _speedup_constants_of(doc, measured_cores=8, channel_exponent={"conv": 0.6, "matmul": 0.7})
    eight = get_chip("bm1690", {"used_cores": 8})
    speed = {}
    for dt in ("f16", "int8"):
        t = {"x": Tensor("x", (1, 4096, 1, 1), dt, (1, 4096)), "y": Tensor("y", (1, 4096, 1, 1), dt, (1, 4096))}
        w = (Weight("w", (4096, 4096), dt, "filter"),)
        for fused in ((), ("Relu",)):
            op = Op("g", "Gemm", ("x",), ("y",), w, fused=fused)
            speed[dt, fused] = global_speedup_of(k, eight, Network("n", t, (op,), ("x",), ("y",)), op)
    assert speed["f16", ("Relu",)] == 1.0
    assert speed["f16", ()] > 4 and speed["int8", ("Relu",)] == speed["int8", ()] > 4


def _speedup_constants_of(doc, **cores):
    from lgopt.cost.fitted import ChipConstants

    return ChipConstants.from_json({**doc, "cores": cores})

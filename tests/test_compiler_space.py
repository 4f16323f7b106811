"""Solving in the space TPU-MLIR compiles (``--reference``): groups contiguous in its op order within its
base groups, the table's own weight-load rule, no hand-over; such plans verify and export, and a plan that
goes beyond what its cache can say is refused by the exporter unless only its groups are asked for."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from lgopt.check.verify import verify_plan
from lgopt.cli import main
from lgopt.cost.pipeline import moved_reloads, moved_transfers
from lgopt.errors import LgoptError
from lgopt.group.build import schedule, try_group
from lgopt.hw.chip import get_chip
from lgopt.io.planfile import save_plan
from lgopt.io.problem import load_model, load_problem
from lgopt.strategies.cpsat.common import CpsatSettings
from lgopt.strategies.registry import StrategyOptions, parse_strategy
from lgopt.strategies.settings import SearchSettings, exact_packing_allowed, group_runs, group_shape, packing
from lgopt.tpumlir.export import compiler_space, export_tpumlir
from lgopt.tpumlir.lowering import network_of
from lgopt.tpumlir.rules import TPU_MLIR_RULES
from lgopt.tpumlir.space import ReferenceSpace

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CAL = SHARED / "calibration"
PROBLEMS = Path(__file__).resolve().parents[1] / "problems"


def _case(model: str, chip: str):
    onnx = CAL / "onnx" / f"{model}.weightless.onnx"
    ref = CAL / "caches" / f"{model}_{chip}" / "opt2.layer_group_cache.json"
    if not (onnx.exists() and ref.exists()):
        pytest.skip(f"{onnx} or {ref} not found (shared data not beside the checkout)")
    return load_model(str(onnx), dtype="f16"), get_chip(chip), str(ref)


def test_group_runs_cut_local_runs_where_the_settings_say():
    net = load_problem(PROBLEMS / "resnet18.json")
    local = [op.name for op in net.ops if op.local]
    assert group_runs(net, SearchSettings()) == [(0, len(local) - 1)]
    runs = (tuple(local[:5]), tuple(local[5:12]))
    assert group_runs(net, SearchSettings(runs=runs)) == [(0, 4), (5, 11)]  # the rest runs as global layers


@pytest.mark.parametrize("model,chip", [("resnet18", "bm1688"), ("mobilenet_v2", "bm1684x")])
@pytest.mark.parametrize("strategy", ["greedy", "cpsat"])
def test_plans_in_the_compiler_space_verify_and_export(model, chip, strategy):
    net, c, ref = _case(model, chip)
    space = compiler_space(net, ref)
    allowed = {o: k for k, run in enumerate(space.runs) for o in run}
    # margin 0: lgopt's own grouping wherever it is predicted no slower, under the rules for new groups
    opts = StrategyOptions(cpsat=CpsatSettings(time_limit=8, workers=2), space=ReferenceSpace(str(ref), margin=0.0))
    plan, _ = parse_strategy(strategy).run(net, c, opts)
    net = network_of(net, plan)  # as TPU-MLIR lowered it: MobileNetV2's last two 1x1 convs are one
    space = compiler_space(net, ref)
    allowed = {o: k for k, run in enumerate(space.runs) for o in run}
    assert verify_plan(net, plan) == []
    position = {o: i for i, o in enumerate(space.order)}
    for g in plan.groups:
        assert len({allowed.get(o) for o in g.ops}) == 1 and allowed.get(g.ops[0]) is not None
        idx = sorted(position[o] for o in g.ops)
        assert idx == list(range(idx[0], idx[0] + len(idx))), "contiguous in TPU-MLIR's op order"
        assert not g.kept_in and not g.kept_out
    assert plan.solver.get("beyond_compiler", []) == []
    cache = export_tpumlir(plan, net, ref)  # never refused: the plan is in the space the exporter accepts
    assert cache["opt"] == 2


def test_a_plan_beyond_the_cache_is_refused_unless_groups_only(tmp_path):
    net = load_problem(PROBLEMS / "resnet18.json")
    chip = get_chip("bm1684x")
    plan, _ = parse_strategy("cpsat").run(net, chip, StrategyOptions(cpsat=CpsatSettings(time_limit=20)))
    assert any("weight load rows" in b for b in plan.solver["beyond_compiler"])
    with pytest.raises(LgoptError, match="beyond what TPU-MLIR's cache can say"):
        export_tpumlir(plan, net)
    out = export_tpumlir(plan, net, groups_only=True)
    assert any("groups only" in w for w in out["lgopt"]["warnings"])
    path = tmp_path / "p.json"
    save_plan(plan, path)
    assert main(["export", str(path), "--model", str(PROBLEMS / "resnet18.json"), "-o", str(tmp_path / "c.json")]) == 2
    assert main(["export", str(path), "--model", str(PROBLEMS / "resnet18.json"), "--groups-only",
                 "-o", str(tmp_path / "c.json")]) == 0


def test_solve_with_a_reference_from_the_command_line(capsys):
    net, _, ref = _case("resnet18", "bm1688")
    model = str(CAL / "onnx" / "resnet18.weightless.onnx")
    assert main(["solve", model, "--dtype", "f16", "--chip", "bm1688", "--reference", ref]) == 0
    assert "verified OK" in capsys.readouterr().out
    assert main(["solve", model, "--dtype", "f16", "--reference", str(PROBLEMS / "resnet18.json")]) == 2


def test_the_reference_grouping_is_kept_unless_ours_is_predicted_faster_by_the_margin():
    """With a reference, lgopt deploys its own grouping only when the cost model predicts it at least
    ``margin`` faster than the compiler's own; otherwise it keeps the compiler's grouping (built by the reader),
    says why, and exports exactly the reference's groups and slice counts."""
    net, chip, ref = _case("resnet18", "bm1688")
    base = StrategyOptions(space=ReferenceSpace(str(ref)))
    even, _ = parse_strategy("greedy").run(net, chip, replace(base, space=ReferenceSpace(str(ref), margin=0.0)))
    ours, theirs = even.solver.get("own_cycles", even.cost["cycles"]), even.solver["reference_cycles"]
    assert ("kept_reference" in even.solver) == (ours > theirs)  # margin 0: never predicted slower than theirs
    kept, _ = parse_strategy("greedy").run(net, chip, replace(base, space=ReferenceSpace(str(ref), margin=0.99)))
    assert "not 99% faster" in kept.solver["kept_reference"] and kept.solver["own_cycles"] == ours
    assert kept.cost["cycles"] == kept.solver["reference_cycles"] and verify_plan(net, kept) == []
    out = export_tpumlir(kept, net, ref)["subfunc_0"]["GroupLayer"]
    theirs = json.loads(Path(ref).read_text())["subfunc_0"]["GroupLayer"]
    assert [(g["locs"], g["shape_secs"]) for g in out] == [(g["locs"], g["shape_secs"]) for g in theirs]


def test_margin_and_reserve_banks_on_the_command_line(capsys):
    _, _, ref = _case("resnet18", "bm1688")
    model = str(CAL / "onnx" / "resnet18.weightless.onnx")
    assert main(["solve", model, "--dtype", "f16", "--chip", "bm1688", "--strategy", "greedy", "--reference", ref,
                 "--margin", "0.99"]) == 0
    assert "reference: greedy's best grouping is predicted at" in capsys.readouterr().out
    assert main(["solve", model, "--dtype", "f16", "--reference", ref, "--margin", "1.5"]) == 2
    assert main(["solve", model, "--dtype", "f16", "--chip", "bm1688", "--reference", ref,
                 "--reserve-banks", "16"]) == 2
    assert "--reserve-banks must be in [0, 16)" in capsys.readouterr().err


def test_the_f32_input_cast_goes_into_the_first_group_where_it_fits(capsys):
    """mobilenet_v2 / bm1688: TPU-MLIR keeps the graph input f32.  Solved in the compiler's space with the
    calibrated model, the plan's first group converts the input itself (``f32_in``: its LMEM holds the f32
    slice), the command says so, and the exported cache puts the input's Cast in that group."""
    net, chip, ref = _case("mobilenet_v2", "bm1688")
    chip = get_chip("bm1688", {"cost_model": "tpu-mlir-1.30"})
    plan, _ = parse_strategy("greedy").run(net, chip, StrategyOptions(space=ReferenceSpace(str(ref), margin=0.0)))
    first = next(g for g in plan.groups if g.f32_in)
    assert first.f32_in == tuple(net.inputs) and verify_plan(network_of(net, plan), plan) == []
    g0 = export_tpumlir(plan, net, ref, edge_casts="global")["subfunc_0"]["GroupLayer"][0]
    assert g0["func_start_idx"] == 0 and g0["locs"][0].startswith("input")
    model = str(CAL / "onnx" / "mobilenet_v2.weightless.onnx")
    assert main(["solve", model, "--dtype", "f16", "--chip", "bm1688", "--set", "cost_model=tpu-mlir-1.30",
                 "--strategy", "greedy", "--reference", ref, "--margin", "0"]) == 0
    assert "f32 casts: input converted in the group next to it" in capsys.readouterr().out


def test_a_group_not_known_to_compile_leaves_the_reserved_banks_empty():
    """``reserve_banks``: a group packs below the top banks of LMEM unless it is ``trusted`` (the reference's own,
    known to compile), whichever strategy plans it; its table and costs are those of the whole chip."""
    net = load_problem(PROBLEMS / "resnet18.json")
    chip = get_chip("bm1688")
    room = chip.lmem_bytes - 2 * chip.bank_bytes
    opts = StrategyOptions(cpsat=CpsatSettings(time_limit=5, workers=2, handover=False))
    full, _ = parse_strategy("greedy").run(net, chip, opts)
    big = next(g for g in full.groups if g.cost["lmem_peak"] > room)  # greedy fills LMEM past the two banks
    for strategy in ("greedy", "cpsat"):
        plan, _ = parse_strategy(strategy).run(net, chip, replace(opts, search=SearchSettings(reserve_banks=2)))
        assert verify_plan(network_of(net, plan), plan) == []
        assert max(g.cost["lmem_peak"] for g in plan.groups) <= room, strategy
    shape = group_shape(big.ops, big.n_slices, big.c_slices, big.h_slices, big.w_slices)
    trusting = SearchSettings(reserve_banks=2, trusted=frozenset({shape}))
    assert packing(chip, net, trusting, schedule(net, chip, big.ops, big.n_slices, big.h_slices))[0] is chip
    again, _ = try_group(net, chip, big.ops, big.n_slices, big.h_slices,
                         packing=lambda g: packing(chip, net, trusting, g))
    assert again is not None and again.cost["lmem_peak"] == big.cost["lmem_peak"]  # trusted: all of LMEM


def moved_weight_loads(chip, net, g):
    """The rows TPU-MLIR's memory-aware pass gives a group's weight loads (its stores and activations apart)."""
    weights = {tr.name for row in g.rows for tr in row.loads if tr.kind == "weight"}
    return {name: row for (name, store), row in moved_transfers(chip, net, g).items() if not store and name in weights}


def test_tpu_mlir_moves_a_weight_bound_one_slice_groups_loads_earlier():
    """TPU-MLIR's memory-aware pass moves a one-slice group's weight loads to earlier rows with spare GDMA time
    (reference s4.3), lengthening their lifetimes; an untrusted group must still pack with them there."""
    net = load_problem(PROBLEMS / "resnet18.json")
    chip = get_chip("bm1684x", {"cost_model": "tpu-mlir-1.30"})
    ops = [op.name for op in net.ops[10:25]]
    g = schedule(net, chip, ops, 1, 1, None)
    own = {tr.name: r for r, row in enumerate(g.rows) for tr in row.loads if tr.kind == "weight" and tr.stage == 1}
    moved = moved_weight_loads(chip, net, g)  # the first weight loads in the pipeline fill: it stays there
    assert set(moved) == set(own) and all(moved[o] <= own[o] for o in own)
    assert any(moved[o] < own[o] for o in own)
    room, table = packing(chip, net, SearchSettings(compiler=TPU_MLIR_RULES), g)
    assert room is chip and {tr.name: r for r, row in enumerate(table.rows) for tr in row.loads
                             if tr.kind == "weight" and tr.stage == 1} == moved
    longer = {b.name: b for b in table.buffers if b.kind == "weight"}
    assert all(longer[b.name].start <= b.start for b in g.buffers if b.kind == "weight")
    assert moved_weight_loads(chip, net, schedule(net, chip, ops, 1, 2, None)) == {}  # sliced: weights held
    assert moved_weight_loads(get_chip("bm1684x"), net, g) == {}  # the analytic model does not move loads
    assert packing(chip, net, SearchSettings(), g) == (chip, g)
    # TPU-MLIR's allocator is one greedy pass: what only lgopt's exact packer places does not count for a new group
    shape = group_shape(g.ops, g.n_slices, g.c_slices, g.h_slices, g.w_slices)
    assert exact_packing_allowed(SearchSettings(), g)
    assert not exact_packing_allowed(SearchSettings(compiler=TPU_MLIR_RULES), g)
    assert exact_packing_allowed(SearchSettings(compiler=TPU_MLIR_RULES, trusted=frozenset({shape})), g)


def test_tpu_mlir_moves_the_loads_of_weights_a_sliced_group_reloads_with_every_slice():
    """Where a sliced group's weights reach LMEM's size none is held and each slice reloads them; TPU-MLIR's
    memory-aware pass moves those loads earlier too, and checks no LMEM there (ResNet-50 / BM1688 INT8 at two H
    slices: refused, 170,688 bytes live after its moves), so a new such group packs with them moved.  A group
    that holds its weights loads none in the table: nothing moves."""
    net = load_problem(PROBLEMS / "resnet18.json")
    ops = [op.name for op in net.ops[10:25]]
    chip = get_chip("bm1688", {"cost_model": "tpu-mlir-1.30"})
    g = schedule(net, chip, ops, 1, 2, None)
    assert not any(b.resident for b in g.buffers if b.kind == "weight")  # 1.4 MB of weights: reloaded
    moved = moved_reloads(chip, net, g)
    own = {tr.name: r for r, row in enumerate(g.rows) for tr in row.loads if tr.kind == "weight"}
    assert moved and all(moved[o] < own[o] for o in moved)
    room, table = packing(chip, net, SearchSettings(compiler=TPU_MLIR_RULES), g)
    assert room is chip
    rows = {tr.name: r for r, row in enumerate(table.rows) for tr in row.loads if tr.kind == "weight"}
    assert rows == {**own, **moved}
    start = {b.name: b.start for b in table.buffers if b.kind == "weight"}
    assert all(start[o] == moved[o] for o in moved)
    held = get_chip("bm1684x", {"cost_model": "tpu-mlir-1.30"})  # 256 KiB a lane: the same weights are held
    assert moved_reloads(held, net, schedule(net, held, ops, 1, 2, None)) == {}
    assert moved_reloads(get_chip("bm1688"), net, g) == {}  # the analytic model does not move loads


def test_a_new_group_packed_with_moved_loads_reports_its_own_bank_conflicts():
    """The greedy baseline packs a new one-slice group with its weight loads where TPU-MLIR moves them; the
    offsets serve the group's own table, and the plan reports that table's bank conflicts (the verifier
    recounts them).  ShuffleNet: since convs hold TPU-MLIR's work buffers, mnasnet's greedy plan at margin 0
    keeps its reference."""
    net, _, ref = _case("shufflenet_v2_x1_0", "bm1684x")
    chip = get_chip("bm1684x", {"cost_model": "tpu-mlir-1.30"})
    plan, _ = parse_strategy("greedy").run(net, chip, StrategyOptions(space=ReferenceSpace(str(ref), margin=0.0)))
    assert "kept_reference" not in plan.solver and plan.solver["reserve_banks"] == 2
    assert verify_plan(network_of(net, plan), plan) == []


def test_new_groups_keep_their_slices_as_tall_as_the_fitted_rates_hold():
    """With the calibrated model the compiler space keeps a new group's slices at least the chip's
    ``slice_rows`` tall (9 on BM1688: shorter ones stream at about half the fitted rate on the timeline, so a
    plan using them only looks fast); the reference's own groups stay allowed, and the judge (which measures
    every candidate) is not held to it."""
    from lgopt.cost.registry import min_slice_rows

    net = load_problem(PROBLEMS / "resnet18.json")
    chip = get_chip("bm1688", {"cost_model": "tpu-mlir-1.30"})
    rows = min_slice_rows(chip)
    assert rows == 9
    ops = [op.name for op in net.ops[:3]]
    fine, short = (schedule(net, chip, ops, 1, h, h_ratio=None) for h in (4, 16))  # 56 rows: 14, 4 a slice
    st = SearchSettings(compiler=TPU_MLIR_RULES, min_slice_rows=rows)
    assert packing(chip, net, st, fine)[0] is not None and packing(chip, net, st, short)[0] is None
    assert packing(chip, net, replace(st, min_slice_rows=0), short)[0] is not None
    assert packing(chip, net, replace(st, trusted=frozenset({group_shape(ops, 1, 1, 16, 1)})), short)[0] is chip


def test_tpu_mlir_moves_a_one_slice_groups_stores_later_past_the_rows_that_touch_them():
    """UNet's encoder as one slice: each skip tensor is stored (a group output) and pooled.  TPU-MLIR's timeline
    (BM1690 INT8) stores it beside a later conv, not beside the pool after its producer (reference s4.3: stores
    only later, never into a row whose ops touch the tensor): lgopt moves it there, the group costs less, and an
    untrusted group packs with the store's longer lifetime (``packing``, through ``with_stores``)."""
    from lgopt.cost.pipeline import group_cost
    from lgopt.strategies.cpsat.loadtable import with_stores

    net = load_problem(PROBLEMS / "unet.json")
    chip = get_chip("bm1684x", {"cost_model": "tpu-mlir-1.30"})
    ops = [op.name for op in net.ops[:9]]  # three conv-conv-pool stages
    g = schedule(net, chip, ops, 1, 1, None)
    own = {tr.name: r for r, row in enumerate(g.rows) for tr in row.stores}
    moved = {name: r for (name, store), r in moved_transfers(chip, net, g).items() if store}
    assert moved and set(moved) <= set(own) and all(moved[t] >= own[t] for t in moved)
    assert any(moved[t] > own[t] for t in moved)
    for t, r in moved.items():
        assert not any(t in net.op(o).inputs or t in net.op(o).outputs for o in g.rows[r].ops) or r == own[t]
    plain = group_cost(get_chip("bm1684x"), net, g)  # the analytic model moves nothing
    assert moved_transfers(get_chip("bm1684x"), net, g) == {} and plain["cycles"] > 0
    table = with_stores(g, moved)  # what packing() gives a group TPU-MLIR's rules do not refuse
    stores = {tr.name: r for r, row in enumerate(table.rows) for tr in row.stores}
    assert all(stores[t] == r for t, r in moved.items())
    ends = {b.name: b.end for b in table.buffers if b.kind == "activation"}
    assert all(ends[t] >= moved[t] for t in moved)


def test_tpu_mlir_moves_a_groups_own_activation_loads_earlier():
    """ResNet-50's [layer1.0] group (conv, conv, the shortcut Add, the next conv) reads the downsample branch's
    output from GMEM, a load the table puts in the row before the Add.  TPU-MLIR's memory-aware pass moves it
    beside an earlier, longer conv (reference s4.3; core 0's timeline on two BM1688 cores runs it beside the
    first conv): lgopt charges it there, on every slice's pass, and a new one-slice group packs it live from there
    (``compiler_lifetimes``)."""
    from lgopt.cost.pipeline import _table_cells, pipeline_cells
    from lgopt.strategies.settings import compiler_lifetimes

    net = load_problem(PROBLEMS / "resnet50.json")
    chip = get_chip("bm1688", {"cost_model": "tpu-mlir-1.30", "used_cores": 2})
    ops = ["/Conv_11", "/Conv_15", "/Add_20", "/Conv_23"]
    shortcut = "/BatchNormalization_19_output_0"
    for h in (1, 2):
        g = schedule(net, chip, ops, 1, h, None)
        row = next(r for r, x in enumerate(g.rows) for tr in x.loads if tr.name == shortcut and tr.stage == 1)
        first = (0, 1)  # core 0's slices: one
        table, moved = _table_cells(chip, net, g, first).cells, pipeline_cells(chip, net, g, first).cells
        assert moved[(0, row)][1] < table[(0, row)][1]  # the load left its row ...
        assert sum(d for _, d in moved.values()) == sum(d for _, d in table.values())  # ... and went earlier
        assert pipeline_cells(chip, net, g, first).cycles() < sum(max(c) for c in table.values())
    one = schedule(net, chip, ops, 1, 1, None)
    to = moved_transfers(chip, net, one)[(shortcut, False)]
    assert to < row and not any(shortcut in net.op(o).inputs for o in one.rows[to].ops)
    early = {b.name: b for b in compiler_lifetimes(chip, net, one).buffers if b.kind == "activation"}
    assert early[shortcut].start == to


def test_a_held_weights_load_moves_earlier_in_the_first_pass_only():
    """A sliced group holds its weights, each loaded in the first slice's pass in the row before its op's (the
    fitted model's ``pipelined_preloads``).  TPU-MLIR's memory-aware pass moves those loads as it moves the
    table's (reference s4.3): UNet's decoder stage (transposed conv, Concat, two convs), three slices on BM1690's
    8 cores, one a core, loads the first conv's weight beside the transposed conv, not beside the Concat.  The
    move is made in the first pass only (later slices load no held weight), and moves no cycles away."""
    from lgopt.cost.pipeline import _table_cells, pipeline_cells

    net = load_problem(PROBLEMS / "unet.json")
    chip = get_chip("bm1690", {"cost_model": "tpu-mlir-1.30", "used_cores": 8})
    ops = ["/ConvTranspose_46", "/Concat_47", "/Conv_49", "/Conv_53"]
    g = schedule(net, chip, ops, 1, 3, None)
    assert g.num_slices == 3 and g.chunks == ((0, 1), (1, 2), (2, 3)) and "/Conv_49" in g.preloads
    concat = next(r for r, row in enumerate(g.rows) if "/Concat_47" in row.ops)
    for span in g.chunks:
        table, moved = _table_cells(chip, net, g, span).cells, pipeline_cells(chip, net, g, span).cells
        first = span[0]
        assert moved[(first, concat)][1] < table[(first, concat)][1]  # the conv's weight left the Concat's row
        assert sum(d for _, d in moved.values()) == sum(d for _, d in table.values())
        assert all(moved.get(k) == v for k, v in table.items() if k[0] not in (first,))  # fill and drain alike
    whole = schedule(net, chip, ops, 1, 6, None)  # two slices a core: the second pass holds no weight to move
    table, moved = _table_cells(chip, net, whole, (0, 2)).cells, pipeline_cells(chip, net, whole, (0, 2)).cells
    assert all(moved.get((1, r)) == table.get((1, r)) for r in range(len(whole.rows)))

"""Issue 37: a group's recorded ``lmem_peak`` is its own placed buffers' highest end, the figure the verifier
recomputes (docs/plan-format.md), even when its offsets were found for a more cautious table.

Under ``--reference`` a group TPU-MLIR's own grouping does not have packs as the compiler's allocator would need
(:func:`lgopt.strategies.settings.packing`): with f32 copies three times the size of the buffers of the tensors the
compiler casts.  :func:`lgopt.group.build.try_group` recorded that inflated table's peak, so ``lgopt solve
--reference`` stopped with "the greedy plan fails verification: group N: records lmem_peak A, its buffers reach B"
(exit 3) on mnasnet1_0, mobilenet_v3_small and yolov5s_like / BM1688, greedy and cpsat alike.
"""

import pytest
from conftest import CAL, need

from lgopt.group.build import assemble, try_group
from lgopt.group.totals import finish, with_cost
from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_model, load_problem
from lgopt.report.verdict import verify
from lgopt.strategies.settings import SearchSettings, packing, with_f32_copies
from lgopt.tpumlir.rules import TPU_MLIR_RULES


def _reach(g) -> int:
    return max((b.offset + b.size for b in g.buffers), default=0)


def _plan(net, chip, g):
    return finish(chip, net, assemble(net, chip, [with_cost(chip, net, g)], "manual", h_ratio=None, bank_rule="soft"))


@pytest.fixture(scope="module")
def resnet(problems_dir):
    return load_problem(problems_dir / "resnet18.json")


def test_a_group_packed_with_f32_copies_records_its_own_peak(resnet):
    """Synthetic: offsets found for a table with f32 copies of every activation; the group keeps its own buffers,
    records their peak (below the inflated table's) and a plan of it verifies, its costs recomputed."""
    chip = get_chip("bm1684x")
    names = [op.name for op in resnet.ops[2:8]]  # past the stem, whose conv buffer (not inflated) tops both
    acts = frozenset(t for o in names for t in resnet.op(o).inputs + resnet.op(o).outputs)
    plain, _ = try_group(resnet, chip, names, 1, 4, None)
    wide, why = try_group(resnet, chip, names, 1, 4, None, packing=lambda g: (chip, with_f32_copies(g, acts)))
    assert plain is not None and wide is not None, why
    assert _reach(with_f32_copies(wide, acts)) > _reach(wide), "the inflated table must reach higher"
    assert [(b.id, b.size) for b in wide.buffers] == [(b.id, b.size) for b in plain.buffers]
    assert wide.cost["lmem_peak"] == _reach(wide)
    assert verify(resnet, _plan(resnet, chip, wide)) == []


def test_compiler_packing_with_f32_tensors_records_the_groups_own_peak(resnet):
    """Synthetic, through the strategies' own rule (:func:`packing` with TPU-MLIR's rules and f32 tensors, as
    ``--reference`` sets it up): every group it places records its own peak, at least one of them below the
    peak of the table it was packed as."""
    chip = get_chip("bm1688")
    inflated = 0
    for k in range(2, 14, 3):  # past the stem conv, whose buffer tops any table
        names = [op.name for op in resnet.ops[k:k + 4] if op.local]
        acts = frozenset(t for o in names for t in resnet.op(o).outputs)
        st = SearchSettings(compiler=TPU_MLIR_RULES, f32_tensors=acts)
        for h in (1, 2, 4):
            g, _ = try_group(resnet, chip, names, 1, h, None, packing=lambda x, st=st: packing(chip, resnet, st, x))
            if g is None:
                continue
            inflated += _reach(packing(chip, resnet, st, g)[1]) > _reach(g)
            assert g.cost["lmem_peak"] == _reach(g)
            assert verify(resnet, _plan(resnet, chip, g)) == []
    assert inflated


@pytest.mark.parametrize("model, chip", [("mnasnet1_0", "bm1688"), ("mobilenet_v3_small", "bm1688")])
def test_greedy_plans_in_the_compiler_space_verify(model, chip):
    """The smallest real cases that reproduced, a second or two each: ``lgopt solve M.weightless.onnx --chip bm1688
    --strategy greedy --reference opt2.layer_group_cache.json --set cost_model=tpu-mlir-1.30`` (the model in its
    own dtype, as the command loads it).  mnasnet1_0's failing group was a lone ReduceMean at one slice."""
    from lgopt.strategies.registry import StrategyOptions, parse_strategy
    from lgopt.tpumlir.lowering import network_of
    from lgopt.tpumlir.space import ReferenceSpace

    onnx = need(CAL / "onnx" / f"{model}.weightless.onnx")
    ref = need(CAL / "caches" / f"{model}_{chip}" / "opt2.layer_group_cache.json")
    net = load_model(onnx)
    plans: list = []
    space = ReferenceSpace(str(ref))
    on = get_chip(chip, {"cost_model": "tpu-mlir-1.30"})
    plan, _ = parse_strategy("greedy").run(net, on, StrategyOptions(space=space, incumbent=plans.append))
    planned = space.lowered(net, on)[0]
    for p in plans + [plan]:
        assert verify(network_of(planned, p), p) == []
        assert all(g.cost["lmem_peak"] == _reach(g) for g in p.groups)

"""In-place elementwise outputs (:mod:`lgopt.group.inplace`, docs/plan-format.md "In-place"): TPU-MLIR's
allocator writes an Add's output over an operand that dies there, and groups it compiles rely on it (the zoo's
retinanet and resnet50 FCN on BM1688, issue 37).  Reading such a grouping packs the pair at one offset; the
verifier accepts that overlap and no other."""

from dataclasses import replace

import pytest

from lgopt.group.build import assemble, schedule, try_group
from lgopt.group.inplace import inplace_pairs, merged, unmerged
from lgopt.group.totals import finish, with_cost
from lgopt.hw.chip import get_chip
from lgopt.hw.layout import align_up
from lgopt.io.problem import load_problem
from lgopt.report.verdict import verify

OPS = ["/Conv_25", "/Conv_29", "/Conv_32", "/Add_34"]  # resnet18's first downsampling block, its residual Add last
H = 2


@pytest.fixture(scope="module")
def resnet(problems_dir):
    return load_problem(problems_dir / "resnet18.json")


def _live_peak(chip, g) -> int:
    T = len(g.rows)
    return max(sum(align_up(b.size, chip.align_bytes) for b in g.buffers if b.resident or r in b.rows(T))
               for r in range(T))


def _plan(net, chip, g):
    return finish(chip, net, assemble(net, chip, [with_cost(chip, net, g)], "manual", h_ratio=None, bank_rule="soft"))


def _tight(resnet):
    """BM1684X with just the LMEM the block needs when its Add writes in place (less than without)."""
    big = get_chip("bm1684x")
    g = schedule(resnet, big, OPS, 1, H, None)
    pairs = inplace_pairs(resnet, g)
    need = _live_peak(big, merged(g, pairs))
    assert need < _live_peak(big, g), "the block must need less LMEM in place"
    return replace(big, lmem_bytes=align_up(need, big.lmem_banks * big.align_bytes)), g, pairs


def test_the_residual_add_writes_over_the_operand_it_reads_last(resnet):
    chip = get_chip("bm1684x")
    g = schedule(resnet, chip, OPS, 1, H, None)
    pairs = inplace_pairs(resnet, g)
    by_id = {b.id: b for b in g.buffers}
    assert [by_id[o].name for o in pairs] == ["/Relu_35_output_0"]
    assert [by_id[i].name for i in pairs.values()][0] in ("/BatchNormalization_30_output_0",
                                                           "/BatchNormalization_33_output_0")
    m = merged(g, pairs)
    assert len(m.buffers) == len(g.buffers) - 1
    offs = unmerged({b.id: 64 * k for k, b in enumerate(m.buffers)}, pairs)
    (o, i), = pairs.items()
    assert offs[o] == offs[i] and set(offs) == set(by_id)


def test_a_grouping_that_fits_only_in_place_is_read_and_verifies(resnet):
    chip, _, _ = _tight(resnet)
    greedy, why = try_group(resnet, chip, OPS, 1, H, None)
    assert greedy is None and "LMEM" in why, "a search's greedy allocator does not count on in-place"
    searched, why = try_group(resnet, chip, OPS, 1, H, None, thorough=True)
    assert searched is None and "LMEM" in why, "nor a search of slice counts for a compiler's group"
    g, why = try_group(resnet, chip, OPS, 1, H, None, thorough=True, inplace=True)
    assert g is not None, why
    by_id = {b.id: b for b in g.buffers}
    (o, i), = inplace_pairs(resnet, g).items()
    assert by_id[o].offset == by_id[i].offset
    assert verify(resnet, _plan(resnet, chip, g)) == []


def test_the_verifier_refuses_an_overlap_that_is_not_in_place(resnet):
    chip, _, _ = _tight(resnet)
    g, why = try_group(resnet, chip, OPS, 1, H, None, thorough=True, inplace=True)
    assert g is not None, why
    out = next(b for b in g.buffers if b.name == "/Relu_35_output_0")
    weights = next(b for b in g.buffers if b.kind == "weight" and b.resident and b.size >= out.size)
    # the Add's output moved onto weights live in its row: an overlap, whatever the op
    moved = replace(g, buffers=tuple(replace(b, offset=weights.offset) if b.id == out.id else b for b in g.buffers))
    problems = verify(resnet, _plan(resnet, chip, moved))
    assert any("overlap in LMEM" in v.what and weights.name in v.what for v in problems), problems
    # half a block off its operand: an overlap, not an in-place write
    skew = replace(g, buffers=tuple(replace(b, offset=b.offset + chip.align_bytes) if b.id == out.id else b
                                    for b in g.buffers))
    problems = verify(resnet, _plan(resnet, chip, skew))
    assert any("overlap in LMEM" in v.what for v in problems), problems

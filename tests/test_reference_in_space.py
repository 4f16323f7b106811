"""The search's candidate space holds TPU-MLIR's own grouping: every group its reader builds from the compiler's
opt2 cache is an interval the space offers, at the slicing the compiler chose.  UNet's ten-op bottleneck on
BM1688 INT8 with 2 cores (two H slices, 1.5 LMEMs of weights reloaded with each slice) was outside it: the
search's bound then sat above the reference's own cost (2,871,023 against 2,490,652 cycles)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CAL, need

from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_model
from lgopt.model.network import reorder
from lgopt.strategies.cpsat.interval_bound import interval_lower_bound
from lgopt.strategies.cpsat.space import CandidateSpace
from lgopt.tpumlir.export import compiler_space
from lgopt.tpumlir.grouping import score

DATA = Path(__file__).parent / "data" / "settings"


@pytest.mark.parametrize("model,chip_name,cores", [("unet_small", "bm1688", 2)])
def test_every_group_of_the_compilers_own_grouping_is_in_the_candidate_space(model, chip_name, cores):
    net = load_model(str(need(CAL / "onnx" / f"{model}.weightless.onnx")), dtype="int8")
    cache = str(DATA / f"{model}_{chip_name}_int8_{cores}core.layer_group_cache.json")
    chip = get_chip(chip_name, {"used_cores": cores})
    ref = score(net, chip, cache)[0]
    onet = reorder(net, list(compiler_space(net, cache).order))
    space = CandidateSpace(onet, chip)
    idx = onet.op_index
    sliced_reloading = 0
    for g in ref.groups:
        i, j = idx[g.ops[0]], idx[g.ops[-1]]
        assert [idx[o] for o in g.ops] == list(range(i, j + 1))
        assert (i, j, "") in space.intervals(), (i, j)
        offered = {(c.n, c.h) for c in space.slicings(space.names[i:j + 1])}
        assert (g.n_slices, g.h_slices) in offered, (i, j, g.n_slices, g.h_slices, offered)
        assert interval_lower_bound(space, i, j, "") <= g.cost["cycles"], (i, j)
        sliced_reloading += g.num_slices > 1 and space.reloads_weights(i, j)
    assert sliced_reloading >= 1  # the bottleneck: sliced, its weights reloaded with every slice

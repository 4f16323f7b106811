"""The cost model on small cases computed by hand (docs/cost-model.md)."""

import pytest
from conftest import PROBLEMS, assert_slices_cost_more
from dags import _op

from lgopt.cost.bound import lower_bound
from lgopt.cost.cycles import gdma_cycles, tiu_cycles
from lgopt.cost.model import SliceShape
from lgopt.cost.pipeline import group_cost
from lgopt.group.build import try_group
from lgopt.hw.chip import get_chip
from lgopt.model.network import Network, Tensor, Weight, check_network

CHIP = get_chip("bm1684x")  # 64 lanes, EU 64 B (32 f16), IC_PAR 32 f16, 128 f16 MACs/lane/cycle, 64 B/cycle


def _conv_net():
    t = {"x": Tensor("x", (1, 16, 8, 8), "f16", (1, 16, 8, 8)), "y": Tensor("y", (1, 32, 8, 8), "f16", (1, 32, 8, 8))}
    op = _op("conv", "Conv", ["x"], ["y"], {"kernel": (3, 3), "strides": (1, 1), "dilations": (1, 1),
                                           "pads": (1, 1, 1, 1), "group": 1},
             [Weight("w", (32, 16, 3, 3), "f16", "filter"), Weight("b", (32,), "f16", "bias")])
    return check_network(Network("c", t, (op,), ("x",), ("y",)))


def test_conv_tiu_by_hand():
    net = _conv_net()
    # 30 + 1 batch * cpl(32)=1 * A(64, 32)=64 * A(16, 32)=32 * 9 / 128 = 30 + 144
    assert tiu_cycles(CHIP, net, net.ops[0], SliceShape(1, 8, 8)) == 174
    # half the rows: A(32, 32) = 32 -> 30 + 72
    assert tiu_cycles(CHIP, net, net.ops[0], SliceShape(1, 4, 6)) == 102


def test_gdma_by_hand():
    assert gdma_cycles(CHIP, 2048) == 300 + 32  # 2048 B at 64 B/cycle plus latency
    assert gdma_cycles(CHIP, 1) == 301


def test_unsliced_group_by_hand():
    """fill: load x (332) + the filter (9216 bytes: 300 + 144) and the bias (128 bytes: 300 + 2), one transfer
    each as TPU-MLIR issues them; T0: conv 174; T1: store y (364)."""
    net = _conv_net()
    g, why = try_group(net, CHIP, ["conv"], 1, 1)
    assert g is not None, why
    c = group_cost(CHIP, net, g)
    assert c["traffic_bytes"] == 2048 + 9344 + 4096
    assert c["cycles"] == 332 + 444 + 302 + 174 + 364
    assert c["tiu_cycles"] == 174


def test_sliced_group_counts_halo_and_weights_once():
    net = _conv_net()
    g, why = try_group(net, CHIP, ["conv"], 1, 2)
    assert g is not None, why
    c = group_cost(CHIP, net, g)
    # x slices hold rows 0:5 and 3:8 (one halo row each side): 2 * 5 rows * 16 ch * 8 * 2 B
    assert c["traffic_bytes"] == 2 * (5 * 16 * 8 * 2) + 9344 + 4096
    assert c["tiu_cycles"] == 2 * 102


def test_lower_bound_below_plans():
    net = _conv_net()
    lb = lower_bound(CHIP, net)
    assert lb["traffic_bytes"] == 2048 + 4096 + 9344
    for h in (1, 2):
        g, _ = try_group(net, CHIP, ["conv"], 1, h)
        assert group_cost(CHIP, net, g)["cycles"] >= lb["cycles"]


def test_analytic_model_keeps_the_contract_the_bounds_rely_on():
    """CostModel's contract: slices add up to the whole plus an issue per extra slice; DMA is monotone,
    at least its latency and subadditive."""
    from lgopt.cost.cycles import gdma_cycles
    from lgopt.cost.registry import cost_model
    from lgopt.io.problem import load_problem

    net = load_problem(PROBLEMS / "yolov5s.json")
    for chip in (get_chip("bm1684x"), get_chip("cv181x")):
        model = cost_model(chip)
        for op in [o for o in net.ops if o.local][::7]:
            assert_slices_cost_more(chip, net, op, model)
        for a, b in ((0, 1), (100, 4096), (65536, 65536), (1 << 20, 3)):
            assert gdma_cycles(chip, a) >= chip.gdma_latency_cycles
            assert gdma_cycles(chip, a + b) >= gdma_cycles(chip, a)
            assert gdma_cycles(chip, a + b) <= gdma_cycles(chip, a) + gdma_cycles(chip, b)


def test_a_registered_cost_model_is_chosen_by_the_chip():
    from dataclasses import dataclass

    from lgopt.cost.analytic import AnalyticModel
    from lgopt.cost.registry import COST_MODELS, cost_model, register_cost_model
    from lgopt.errors import LgoptError
    from lgopt.io.problem import load_problem
    from lgopt.strategies.greedy import greedy

    @dataclass(frozen=True)
    class SlowDma(AnalyticModel):
        name: str = "test-slow-dma"

        def gdma_cycles(self, chip, nbytes, segments=1, kind="load", point_runs=False):
            return 2 * super().gdma_cycles(chip, nbytes, segments, kind, point_runs)

    model = COST_MODELS.get("test-slow-dma") or register_cost_model(SlowDma())
    net = load_problem(PROBLEMS / "resnet18.json")
    fast, slow = get_chip("bm1684x"), get_chip("bm1684x", {"cost_model": "test-slow-dma"})
    assert cost_model(slow) is model and "cost_model" not in fast.to_dict() and slow.to_dict()["cost_model"]
    assert greedy(net, slow).cost["cycles"] > greedy(net, fast).cost["cycles"]
    with pytest.raises(LgoptError, match="unknown cost model 'nope'"):
        greedy(net, get_chip("bm1684x", {"cost_model": "nope"}))


def test_a_4n_chip_moves_an_int8_activation_four_batches_to_a_word():
    """BM1684 holds INT8 activations in GMEM as in LMEM, four batches to a 32-bit word: at N = 1 each element
    moves as 4 bytes (its INT8 timelines: 4.0 bytes an element in every activation load and store), where
    BM1684X moves 1."""
    from lgopt.cost.work import weight_gmem_bytes

    t = {"x": Tensor("x", (1, 16, 8, 8), "int8", (1, 16, 8, 8)), "y": Tensor("y", (1, 32, 8, 8), "int8", (1, 32, 8, 8))}
    op = _op("conv", "Conv", ["x"], ["y"], {"kernel": (1, 1), "strides": (1, 1), "dilations": (1, 1),
                                           "pads": (0, 0, 0, 0), "group": 1},
             [Weight("w", (32, 16, 1, 1), "int8", "filter")])
    net = check_network(Network("q", t, (op,), ("x",), ("y",)))
    moved = {}
    for name in ("bm1684", "bm1684x"):
        chip = get_chip(name)
        g, why = try_group(net, chip, ["conv"], 1, 1)
        assert g is not None, why
        moved[name] = group_cost(chip, net, g)["traffic_bytes"] - weight_gmem_bytes(net.ops[0])
    assert moved == {"bm1684": 4 * (16 + 32) * 64, "bm1684x": (16 + 32) * 64}

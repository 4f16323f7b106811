"""torch's hard swish, exported as ``x * HardSigmoid(x)`` (slope 1/6, offset 1/2), is one HardSwish op, as TPU-MLIR's
front end makes it (MobileNetV3's caches name ``..._Mul_output_0_HardSwish``); a HardSigmoid that gates another
tensor (a squeeze-excite block) stays a HardSigmoid and a Mul.  In INT8 both run as TPU-MLIR's table lookup and
are priced by one fitted rate (lgopt.hw.sizing.table_lookup)."""

from __future__ import annotations

import onnx
import pytest
from onnx_graphs import G

from lgopt.check.simulate import simulate
from lgopt.cost.fitted import LUT, tiu_category
from lgopt.hw.chip import get_chip
from lgopt.hw.sizing import table_lookup
from lgopt.io.onnx_import import import_onnx
from lgopt.model.network import Network
from lgopt.report.verdict import verify
from lgopt.strategies.greedy import greedy


def _net(tmp_path, alpha: float = 1 / 6, dtype: str = "f16") -> Network:
    """conv -> hard swish -> conv -> squeeze-excite gate (GlobalAveragePool, HardSigmoid, Mul by the map)."""
    g = G((1, 8, 16, 16))
    a = g.conv("x", 8, 8)
    hs = g.n("Mul", [a, g.n("HardSigmoid", [a], alpha=alpha, beta=0.5)])
    b = g.conv(hs, 8, 8)
    gate = g.n("HardSigmoid", [g.n("GlobalAveragePool", [b])], alpha=1 / 6, beta=0.5)
    g.out(g.n("Mul", [b, gate]))
    p = tmp_path / f"hs{alpha:.3f}.onnx"
    onnx.save(g.model(), p)
    return import_onnx(p, dtype=dtype)


def test_x_times_its_hard_sigmoid_is_one_hard_swish(tmp_path):
    net = _net(tmp_path)
    types = [op.type for op in net.ops]
    assert types.count("HardSwish") == 1 and types.count("HardSigmoid") == 1 and types.count("Mul") == 1
    hs = next(op for op in net.ops if op.type == "HardSwish")
    assert hs.name.startswith("Mul_") and len(hs.sources) == 2  # named after the Mul, standing for both nodes


def test_another_slope_is_not_a_hard_swish(tmp_path):
    net = _net(tmp_path, alpha=0.2)  # ONNX's default HardSigmoid: x * it is not torch's hard swish
    assert "HardSwish" not in [op.type for op in net.ops]


def test_a_plan_with_the_hard_swish_verifies_and_simulates(tmp_path):
    net, chip = _net(tmp_path), get_chip("bm1684x")
    plan = greedy(net, chip)
    assert any("HardSwish" in [net.op(o).type for o in g.ops] for g in plan.groups)
    assert verify(net, plan) == []
    sim = simulate(net, plan)
    assert sim.ok and sim.compared > 0, sim.summary()


@pytest.mark.parametrize("dtype,lut", [("int8", True), ("f16", False)])
def test_int8_activations_are_priced_as_one_table_lookup(tmp_path, dtype, lut):
    net, chip = _net(tmp_path, dtype=dtype), get_chip("bm1684x")
    for kind in ("HardSwish", "HardSigmoid"):
        op = next(op for op in net.ops if op.type == kind)
        assert table_lookup(net, op) is lut
        assert (tiu_category(chip, net, op)[0] == LUT) is lut

"""Every op type of the op specification (lgopt.model.ops.OP_SPECS) goes through the whole pipeline: it is
local, a problem file must give its required attributes, it has a TIU cost, and a plan that slices it
simulates to the unsliced result.  A new entry in OP_SPECS is checked here without writing a test."""

import pytest
from dags import _op

from lgopt.check.simulate import simulate
from lgopt.check.verify import verify_plan
from lgopt.cost.cycles import tiu_cycles
from lgopt.cost.model import SliceShape
from lgopt.errors import LgoptError
from lgopt.hw.chip import get_chip
from lgopt.io.problem import network_from_dict
from lgopt.model.network import Network, Tensor, Weight, check_network, network_to_dict
from lgopt.model.ops import OP_SPECS, Family, classify
from lgopt.strategies.greedy import greedy
from lgopt.strategies.settings import SearchSettings

C, H, W = 8, 12, 6
# small enough that the greedy plan slices H; with matmul groups, which TPU-MLIR's cv18xx backend lacks
CHIP = get_chip("cv181x", {"lmem_bytes": "4K", "matmul_in_groups": "true"})


def _one_op(op_type: str) -> Network:
    """A network of one op of ``op_type`` between a conv that feeds it and one that reads it."""
    spec = OP_SPECS[op_type]
    t = {}

    def ten(name, c=C, h=H, w=W):
        t[name] = Tensor(name, (1, c, h, w), "f16", (1, c, h, w))
        return name

    def conv(name, src, dst, c_in=C, c_out=C):
        return _op(name, "Conv", [src], [dst], {"kernel": (3, 3), "strides": (1, 1), "dilations": (1, 1),
                                               "pads": (1, 1, 1, 1), "group": 1},
                   [Weight(f"{name}.w", (c_out, c_in, 3, 3), "f16", "filter")])

    ops = [conv("pre", ten("x"), ten("a"))]
    ins, weights, attrs = ["a"], [], {}
    out_c, out_h, out_w = C, H, W
    if spec.family in (Family.CONV, Family.DECONV):
        k, s = (3, 1) if spec.family is Family.CONV else (2, 2)
        attrs = {"kernel": (k, k), "strides": (s, s), "dilations": (1, 1), "pads": (k // 2 if s == 1 else 0,) * 4,
                 "group": 1}
        shape = (C, C, k, k)
        weights = [Weight("op.w", shape, "f16", "filter"), Weight("op.b", (C,), "f16", "bias")]
        out_h, out_w = (H, W) if s == 1 else (2 * H, 2 * W)
    elif spec.family is Family.POOL:
        attrs = {"kernel": (2, 2), "strides": (2, 2), "dilations": (1, 1), "pads": (0, 0, 0, 0)}
        out_h, out_w = H // 2, W // 2
    elif spec.family is Family.GLOBAL_POOL:
        attrs = {"axes": (2, 3)} if op_type == "ReduceMean" else {}
        out_h, out_w = 1, 1
    elif spec.family is Family.RESIZE:
        attrs = {"mode": "nearest", "coord": "asymmetric", "nearest_mode": "floor"}
        out_h, out_w = 2 * H, 2 * W
    elif spec.family is Family.CONCAT:
        ops.append(conv("side", "x", ten("b")))
        ins, attrs, out_c = ["a", "b"], {"axis": 1}, 2 * C
    elif spec.family is Family.BINARY:
        ops.append(conv("side", "x", ten("s")))
        ops.append(_op("sig", "Sigmoid", ["s"], [ten("b")], {}))  # in (0, 1): Div stays finite
        ins = ["a", "b"] if op_type != "Pow" else ["b", "a"]  # a positive base: a real power
    elif spec.family is Family.CHANNEL_SLICE:
        attrs, out_c = {"axis": 1, "start": 2, "end": 6}, 4
    elif spec.family is Family.MATMUL:  # rows of (1, C, H, W) times a [W, W] weight
        weights = [Weight("op.w", (W, W), "f16", "filter")]
    elif spec.family is Family.ROWWISE:
        attrs = {"axis": -1, "epsilon": 1e-5}
        if op_type == "LayerNormalization":
            weights = [Weight(f"op.{r}", (1, 1, 1, W), "f16", r) for r in ("scale", "bias")]
    elif spec.family is Family.GROUP_NORM:  # 4 groups of 2 channels, a per-channel scale and bias
        attrs = {"num_groups": 4, "epsilon": 1e-5}
        weights = [Weight(f"op.{r}", (1, C, 1, 1), "f16", r) for r in ("scale", "bias")]
    elif op_type == "Transpose":  # layout-only: moves no axis longer than 1
        attrs = {"perm": (0, 1, 2, 3), "in_dims": (1, C, H, W)}
    elif op_type == "Gelu":
        attrs = {"approximate": "tanh"}
    elif op_type == "Sqrt":
        ops.append(_op("sig", "Sigmoid", ["a"], [ten("b")], {}))  # in (0, 1): a real root
        ins = ["b"]
    elif op_type == "PRelu":
        weights = [Weight("op.slope", (C,), "f16", "const")]
    elif op_type == "BatchNormalization":
        weights = [Weight(f"op.{r}", (C,), "f16", r) for r in ("scale", "bias", "mean", "var")]
    elif op_type == "Clip":
        attrs = {"min": 0.0, "max": 6.0}
    ops.append(_op("op", op_type, ins, [ten("y", out_c, out_h, out_w)], attrs, weights))
    ops.append(conv("post", "y", ten("z", out_c, out_h, out_w), c_in=out_c, c_out=out_c))
    return check_network(Network(op_type, t, tuple(ops), ("x",), ("z",)))


@pytest.mark.parametrize("op_type", sorted(OP_SPECS))
def test_every_op_type_is_local_costed_and_simulates(op_type):
    net = _one_op(op_type)
    op = net.op("op")
    assert op.local, op.reason
    assert op.h_split == OP_SPECS[op_type].h_split
    o = net.tensor(op.outputs[0])
    assert tiu_cycles(CHIP, net, op, SliceShape(1, o.h, net.tensor(op.inputs[0]).h)) > 0
    plan = greedy(net, CHIP, SearchSettings())
    assert verify_plan(net, plan) == []
    assert any("op" in g.ops for g in plan.groups), "the op runs in a group"
    res = simulate(net, plan)
    assert res.ok, res


@pytest.mark.parametrize("op_type", sorted(t for t, s in OP_SPECS.items() if s.attrs))
def test_a_problem_file_must_give_the_required_attributes(op_type):
    d = network_to_dict(_one_op(op_type))
    spec = OP_SPECS[op_type]
    for key in spec.attrs:
        broken = {**d, "ops": [dict(o, attrs={k: v for k, v in o["attrs"].items() if k != key})
                               if o["name"] == "op" else o for o in d["ops"]]}
        with pytest.raises(LgoptError, match=f"needs attribute '{key}'"):
            network_from_dict(broken)


def test_rules_and_ranks_make_an_op_global_with_a_reason():
    s4 = (1, 8, 6, 6)
    assert classify("MaxPool", {"strides": (16, 16)}, [s4], [s4])[3] == "MaxPool stride above 15"
    assert classify("Concat", {"axis": 2}, [s4, s4], [s4])[3] == "Concat not on the channel axis, the rows nor the last"
    assert classify("Concat", {"axis": -1}, [(1, 8, 6), (1, 8, 6)], [(1, 8, 12)])[0]  # within each row
    assert classify("Conv", {}, [(1, 8, 36)], [(1, 8, 36)])[3] == "Conv on non-4-D tensors"
    assert classify("Relu", {}, [(1, 2, 8, 6, 6)], [(1, 2, 8, 6, 6)])[3] == "Relu on rank-5 tensors (rank 3, 4 only)"
    assert classify("Relu", {}, [(1, 4096)], [(1, 4096)])[3] == "Relu on rank-2 tensors (rank 3, 4 only)"
    assert classify("Gemm", {}, [s4], [s4])[3] == "Gemm on rank-2 [N, C] vectors runs as a global layer, as in TPU-MLIR"
    assert classify("ReduceMean", {"axes": (1,)}, [s4], [s4])[3] == \
        "ReduceMean not over H and W, nor over the last axis with keepdims"
    assert classify("ReduceMean", {"axes": (2, 3)}, [s4], [(1, 8)])[:3] == (True, False, True)  # keepdims=0


def test_a_reshape_is_local_only_as_a_view_and_h_sliced_only_when_it_keeps_h():
    assert classify("Flatten", {}, [(2, 512, 1, 1)], [(2, 512)]) == (True, True, True, "")
    assert classify("Reshape", {}, [(1, 8, 6, 6)], [(1, 8, 36)]) == (True, False, True, "")  # H x W re-split
    assert classify("Unsqueeze", {}, [(1, 8, 6, 6)], [(1, 8, 1, 6, 6)]) == (True, True, True, "")
    shuffle = classify("Reshape", {}, [(1, 116, 28, 28)], [(1, 2, 58, 28, 28)])
    assert not shuffle[0] and "moves data between lanes" in shuffle[3]
    assert not classify("Flatten", {}, [(1, 8, 6, 6)], [(1, 288)])[0]  # channels x pixels -> channels


def test_a_slice_is_local_on_the_channel_axis_or_within_each_row():
    s4 = (1, 8, 6, 6)
    assert classify("Slice", {"axis": 1, "start": 4, "end": 8, "step": 1}, [s4], [(1, 4, 6, 6)])[0]
    assert classify("Slice", {"axis": 2, "start": 0, "end": 3, "step": 1}, [s4], [(1, 8, 3, 6)])[3] == \
        "Slice not on the channel axis alone, the rows, the last axis nor the batches"
    assert classify("Slice", {"axis": -1, "start": 0, "end": 3, "step": 1}, [s4], [(1, 8, 6, 3)])[:2] == (True, True)
    assert "step" in classify("Slice", {"axis": 1, "start": 0, "end": 8, "step": 2}, [s4], [(1, 4, 6, 6)])[3]


def test_a_reshape_that_resplits_h_runs_whole_in_a_group_and_simulates():
    """(1, 8, 12, 6) -> (1, 8, 6, 12) keeps every lane's bytes: local, but a group holding it is never
    H-sliced (its rows do not map to rows), and the plan simulates to the unsliced result."""
    t = {n: Tensor(n, s, "f16", s) for n, s in (("x", (1, 8, 12, 6)), ("a", (1, 8, 12, 6)),
                                                 ("y", (1, 8, 6, 12)), ("z", (1, 8, 6, 12)))}
    conv = {"kernel": (3, 3), "strides": (1, 1), "dilations": (1, 1), "pads": (1, 1, 1, 1), "group": 1}
    ops = (_op("pre", "Conv", ["x"], ["a"], conv, [Weight("pre.w", (8, 8, 3, 3), "f16", "filter")]),
           _op("op", "Reshape", ["a"], ["y"], {}, in_shapes=[(1, 8, 12, 6)], out_shapes=[(1, 8, 6, 12)]),
           _op("post", "Conv", ["y"], ["z"], conv, [Weight("post.w", (8, 8, 3, 3), "f16", "filter")]))
    net = check_network(Network("resplit", t, ops, ("x",), ("z",)))
    assert net.op("op").local and not net.op("op").h_split
    plan = greedy(net, CHIP, SearchSettings())
    assert verify_plan(net, plan) == []
    assert any("op" in g.ops for g in plan.groups)
    assert all(g.h_slices == 1 for g in plan.groups if "op" in g.ops)
    assert simulate(net, plan).ok

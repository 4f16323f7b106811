"""ONNX Split imported as one Slice per output (issue 16): local where a Slice of that axis is, grouped,
verified, simulated, and computing what onnxruntime computes."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from lgopt.check.simulate import check_with_onnxruntime, simulate
from lgopt.hw.chip import get_chip
from lgopt.io.onnx_import import import_onnx
from lgopt.report.verdict import verify
from lgopt.strategies.greedy import greedy


def _model(tmp_path, shape, axis, sizes, opset=13, name="split"):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    inits, ins, kw = [], ["x"], {}
    if sizes is not None:
        inits.append(numpy_helper.from_array(np.array(sizes, dtype=np.int64), "sp"))
        ins.append("sp")
    if opset >= 18 and sizes is None:
        kw["num_outputs"] = 2
    nodes = [helper.make_node("Split", ins, ["a", "b"], axis=axis, name=name, **kw),
             helper.make_node("Sigmoid", ["a"], ["sa"])]
    outs = ["sa", "b"]
    g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
                          inits)
    path = tmp_path / "split.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return path, import_onnx(path, dtype="f16")


@pytest.mark.parametrize("shape,axis,sizes,opset", [((1, 16, 64), 2, [24, 40], 13),  # GLU-style, last axis
                                                    ((1, 8, 6, 6), 1, [3, 5], 13),  # channels
                                                    ((1, 16, 63), -1, None, 18)])  # equal parts, the last smaller
def test_a_split_is_local_slices_that_group_and_compute_what_onnxruntime_does(tmp_path, shape, axis, sizes, opset):
    path, net = _model(tmp_path, shape, axis, sizes, opset)
    slices = [op for op in net.ops if op.sources == ("split",)]
    assert [op.type for op in slices] == ["Slice", "Slice"] and all(op.local for op in slices)
    assert slices[0].attrs["start"] == 0 and slices[0].attrs["end"] == slices[1].attrs["start"]
    assert slices[1].attrs["end"] == shape[axis]
    msg = check_with_onnxruntime(net, str(path))
    assert "agrees with onnxruntime" in msg or "not installed" in msg
    plan = greedy(net, get_chip("bm1684x"))
    assert verify(net, plan) == [] and plan.groups
    res = simulate(net, plan)
    assert res.ok, res


def test_a_split_along_rows_stays_global_with_the_reason(tmp_path):
    _, net = _model(tmp_path, (1, 16, 64), 1, [8, 8])
    slices = [op for op in net.ops if op.sources == ("split",)]
    assert slices and not any(op.local for op in slices)
    assert all(op.reason == "Slice on non-4-D tensors" for op in slices)  # rows cut: as a Slice of them would be


def _gather(tmp_path, shape, axis, idx):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"], axis=axis, name="gather"),
             helper.make_node("Sigmoid", ["g"], ["y"])]
    g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.array(idx, dtype=np.int64), "i")])
    path = tmp_path / "gather.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path, import_onnx(path, dtype="f16")


@pytest.mark.parametrize("shape,axis,idx,run", [((1, 16, 64), 2, [4, 5, 6, 7], (4, 8)),
                                                ((1, 8, 6, 6), 1, [-7, -6, -5], (1, 4))])
def test_a_gather_of_a_run_of_constant_indices_is_a_local_slice(tmp_path, shape, axis, idx, run):
    path, net = _gather(tmp_path, shape, axis, idx)
    op = net.op("gather")
    assert (op.type, op.local, op.attrs["start"], op.attrs["end"]) == ("Slice", True, *run)
    msg = check_with_onnxruntime(net, str(path))
    assert "agrees with onnxruntime" in msg or "not installed" in msg
    plan = greedy(net, get_chip("bm1684x"))
    assert verify(net, plan) == [] and plan.groups
    assert simulate(net, plan).ok


def test_a_gather_of_one_batch_is_a_local_batch_slice(tmp_path):
    """ViT's attention takes Q, K and V out of one [3, T, 1, D] tensor with Gathers of a scalar index on axis 0
    (TPU-MLIR's ``Gather_slice``, grouped): each batch lies over the lanes as the [T, 1, D] output does, so
    the pick is a local batch Slice; its windows, kernel and verifier rule take batch ``start`` on."""
    path, net = _gather(tmp_path, (3, 6, 1, 16), 0, 1)
    op = net.op("gather")
    assert (op.type, op.local, op.h_split, op.n_split) == ("Slice", True, False, False)
    assert (op.attrs["axis"], op.attrs["start"], op.attrs["end"]) == (0, 1, 2)
    assert net.tensor(op.outputs[0]).rows_on_lanes
    msg = check_with_onnxruntime(net, str(path))
    assert "agrees with onnxruntime" in msg or "not installed" in msg
    plan = greedy(net, get_chip("bm1684x"))
    assert verify(net, plan) == [] and plan.groups
    assert plan.groups[0].windows["x"] == ((1, 2, 0, 1),)  # only the batch it takes is loaded
    assert simulate(net, plan).ok


def test_a_batch_slice_that_moves_data_between_lanes_stays_global(tmp_path):
    _, net = _gather(tmp_path, (3, 6, 4, 16), 0, 1)  # [6, 4, 16] lies as 4 rows, not as 6 lanes of 4 x 16
    op = net.op("gather")
    assert not op.local and "changing how each batch lies over the lanes" in op.reason


@pytest.mark.parametrize("idx", [[3, 1], 0])  # a permutation moves data; a scalar index of the last axis drops it
def test_other_gathers_stay_global_with_the_reason(tmp_path, idx):
    _, net = _gather(tmp_path, (1, 16, 64), 2, idx)
    op = net.op("gather")
    assert not op.local and op.reason == "Gather of other than a run of constant indices"

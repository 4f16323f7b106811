"""Nothing a user types gets a traceback or loses work: bad values are one line on stderr and exit 2,
impossible networks are refused, and what is accepted says what it is (a modified chip, a network run
entirely as global layers)."""

import json
import subprocess
import sys

import pytest
from conftest import PROBLEMS
from test_cli import run

RESNET = str(PROBLEMS / "resnet18.json")


def _one_line(code, err, needle):
    assert code == 2 and err.count("\n") == 1 and err.startswith("lgopt: error:"), err
    assert needle in err and "Traceback" not in err, err


@pytest.mark.parametrize("extra,needle", [
    (["--set", "tiu_mhz=nan"], "finite"),
    (["--set", "tiu_mhz=inf"], "finite"),
    (["--set", "gdma_gbps=1e-12"], "gdma_gbps"),
    (["--set", "dma_align_bytes=3"], "power of two"),
    (["--batch", "0"], "--batch"),
    (["--time-limit", "nan"], "--time-limit"),
    (["--time-limit", "inf"], "--time-limit"),
    (["--time-limit", "0"], "--time-limit"),
    (["--time-limit", "-1"], "--time-limit"),
    (["--workers", "0"], "--workers"),
    (["--h-ratio", "nan"], "--h-ratio"),
    (["--strategy", "cpsat", "--cp-sat-params", "no_such_field: 1"], "bad CP-SAT parameters"),
])
def test_meaningless_values_refused(capsys, extra, needle):
    _one_line(*run(capsys, "solve", RESNET, *extra)[::2], needle)


def test_cp_sat_parameters_reach_the_solver(capsys):
    """``--cp-sat-params`` in the text format reaches CP-SAT: OR-tools 9.15's parameters are a pybind object that
    protobuf's text parser cannot write into, and every use of the option ended in an internal error."""
    code, out, err = run(capsys, "solve", RESNET, "--strategy", "cpsat", "--time-limit", "2",
                         "--cp-sat-params", "linearization_level: 2", "--json")
    assert code == 0 and json.loads(out)["verified"], err


def test_too_many_workers_capped_with_a_note(capsys, monkeypatch):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    code, out, err = run(capsys, "solve", RESNET, "--workers", "1000", "--json")
    assert code == 0 and "capped at 2" in err and json.loads(out)["verified"]


def test_unwritable_output_refused_before_solving(capsys, tmp_path):
    _one_line(*run(capsys, "solve", RESNET, "-o", str(tmp_path))[::2], "is a directory")
    (tmp_path / "file").write_text("x")
    _one_line(*run(capsys, "solve", RESNET, "-o", str(tmp_path / "file" / "p.json"))[::2], "not a directory")


def test_chip_file_must_name_its_preset(capsys, tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("lmem_bytes = \"64K\"\n")
    _one_line(*run(capsys, "solve", RESNET, "--chip-file", str(f))[::2], "base")
    code, out, _ = run(capsys, "chips", "--chip", "cv181x", "--chip-file", str(f))
    assert code == 0 and "cv181x (modified: lmem_bytes 32768 -> 65536)" in out


def test_modified_chip_says_what_changed(capsys):
    code, out, _ = run(capsys, "chips", "--chip", "cv181x", "--set", "tiu_mhz=600")
    assert code == 0 and "cv181x (modified: tiu_mhz 500 -> 600)" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("tiu_mhz"))
    assert "changed by the user (preset cv181x: 500" in line
    code, out, _ = run(capsys, "solve", RESNET, "--chip", "cv181x", "--set", "tiu_mhz=600")
    assert code == 0 and "resnet18 on cv181x (modified: tiu_mhz 500 -> 600)" in out
    code, out, _ = run(capsys, "solve", RESNET, "--chip", "cv181x", "--set", "tiu_mhz=600", "--json")
    assert json.loads(out)["chip_changes"] == {"tiu_mhz": [500.0, 600.0]}


def test_plan_with_a_string_offset_is_an_input_error(capsys, tmp_path):
    plan = tmp_path / "p.json"
    assert run(capsys, "solve", RESNET, "-o", str(plan))[0] == 0
    d = json.loads(plan.read_text())
    d["groups"][0]["buffers"][0]["offset"] = "12"
    plan.write_text(json.dumps(d))
    _one_line(*run(capsys, "verify", str(plan), "--model", RESNET)[::2], "offset must be an integer")


def test_output_into_a_closed_pipe(tmp_path):
    """``lgopt ... | head -1``: one line on stderr, exit 2, no traceback."""
    p = subprocess.run(f"{sys.executable} -m lgopt.cli solve {RESNET} --chip cv181x | head -1", shell=True,
                       capture_output=True, text=True, executable="/bin/bash",
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PROBLEMS.parent)})
    assert "Traceback" not in p.stderr and p.stderr.count("\n") <= 1, p.stderr
    assert p.stdout.count("\n") == 1


def test_gap_is_a_percentage_in_json(capsys):
    code, out, _ = run(capsys, "solve", str(PROBLEMS / "fixture_resnet18.json"), "--strategy", "cpsat", "--json",
                       "--set", "cost_model=analytic",
                       "--time-limit", "20", "--workers", "1")
    s = json.loads(out)
    assert code == 0 and "gap" not in s and s["gap_percent"] == 0.0


def test_nothing_grouped_says_so_and_why(capsys, tmp_path):
    """A network of ops lgopt cannot group (MatMul here) is reported as such, with the ops' reasons."""
    d = json.loads((PROBLEMS / "resnet18.json").read_text())
    keep = [o for o in d["ops"] if o["type"] == "Gemm"]
    d["ops"] = keep
    d["inputs"] = [keep[0]["inputs"][0]]
    d["outputs"] = keep[0]["outputs"]
    d["tensors"] = {k: v for k, v in d["tensors"].items() if k in keep[0]["inputs"] + keep[0]["outputs"]}
    f = tmp_path / "fc.json"
    f.write_text(json.dumps(d))
    code, out, err = run(capsys, "solve", str(f), "--strategy", "cpsat", "--time-limit", "5")
    assert code == 0, err
    assert ("nothing grouped: all 1 ops run as global layers:\n"
            "     1 Gemm on rank-2 [N, C] vectors runs as a global layer, as in TPU-MLIR") in out


# --- impossible networks ---------------------------------------------------------------------------------

def _resnet_with(tmp_path, **attrs):
    d = json.loads((PROBLEMS / "resnet18.json").read_text())
    conv = next(o for o in d["ops"] if o["type"] == "Conv" and o["attrs"]["strides"] == [1, 1])
    conv["attrs"].update(attrs)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d))
    return str(f)


@pytest.mark.parametrize("attrs,needle", [
    ({"strides": [0, 0]}, "strides [0, 0] must be integers of at least 1"),
    ({"group": 0}, "group 0 must be an integer of at least 1"),
    ({"dilations": [0, 1]}, "dilations"),
    ({"pads": [-1, 1, 1, 1]}, "pads"),
    ({"strides": [2, 2]}, "output"),  # the stored output shape contradicts the stride
])
def test_impossible_convolutions_refused(capsys, tmp_path, attrs, needle):
    for cmd in (["solve", _resnet_with(tmp_path, **attrs)],
                ["verify", str(tmp_path / "none.json"), "--model", _resnet_with(tmp_path, **attrs)]):
        code, _, err = run(capsys, *cmd)
        assert code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    _one_line(*run(capsys, "solve", _resnet_with(tmp_path, **attrs))[::2], needle)


def test_wrong_input_channels_refused(capsys):
    model = str(PROBLEMS / "onnx" / "resnet18.onnx")
    _one_line(*run(capsys, "solve", model, "--input-shape", "input=1,4,64,64")[::2], "has 4 channels")


def _control_flow_models(tmp_path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    from onnx_graphs import G

    def vi(name, shape=None, t=TensorProto.FLOAT):
        return helper.make_tensor_value_info(name, t, shape)

    g = G((1, 8, 16, 16))
    a, b = g.conv("x", 8, 8), g.conv("x", 8, 8)
    cond = g.w(None, data=np.array(True))
    then = helper.make_graph([helper.make_node("Relu", [a], ["ta"])], "then", [], [vi("ta", [1, 8, 16, 16])])
    other = helper.make_graph([helper.make_node("Sigmoid", [b], ["tb"])], "else", [], [vi("tb", [1, 8, 16, 16])])
    g.nodes.append(helper.make_node("If", [cond], ["y"], name="if0", then_branch=then, else_branch=other))
    g.out(g.conv("y", 8, 8))
    onnx.save(g.model(), tmp_path / "if.onnx")

    g = G((1, 8, 16, 16))
    a = g.conv("x", 8, 8)
    trip, cond = g.w(None, data=np.array(3, dtype=np.int64)), g.w(None, data=np.array(True))
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"]),
                              helper.make_node("Add", ["v_in", a], ["v_out"])], "body",
                             [vi("i", [], TensorProto.INT64), vi("c_in", [], TensorProto.BOOL), vi("v_in")],
                             [vi("c_out", [], TensorProto.BOOL), vi("v_out")])
    g.nodes.append(helper.make_node("Loop", [trip, cond, a], ["y"], name="loop0", body=body))
    g.out(g.conv("y", 8, 8))
    onnx.save(g.model(), tmp_path / "loop.onnx")

    g = G((1, 8, 16, 16))
    a = g.conv("x", 8, 8)
    g.nodes.append(helper.make_node("MyOp", [a], ["y"], name="my0", domain="com.example"))
    g.out(g.conv("y", 8, 8))
    m = g.model()
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    onnx.save(m, tmp_path / "custom.onnx")


def test_if_keeps_the_dependencies_of_its_branches(capsys, tmp_path):
    from lgopt.io.onnx_import import import_onnx

    _control_flow_models(tmp_path)
    net = import_onnx(tmp_path / "if.onnx")
    op = net.op("if0")
    assert not op.local and len(op.inputs) == 2  # both branches' inputs, read from the enclosing graph
    code, out, err = run(capsys, "solve", str(tmp_path / "if.onnx"), "--strategy", "cpsat", "--time-limit", "5")
    assert code == 0 and "verified OK" in out, err


@pytest.mark.parametrize("name,kind", [("loop", "control-flow op Loop"), ("custom", "custom-domain op com.example")])
def test_loop_and_custom_ops_named_as_the_cause(capsys, tmp_path, name, kind):
    _control_flow_models(tmp_path)
    code, _, err = run(capsys, "import", str(tmp_path / f"{name}.onnx"), "-o", str(tmp_path / "x.json"))
    _one_line(code, err, kind)
    assert "--input-shape" not in err


# --- the refinement effort -------------------------------------------------------------------------------

def test_refinement_effort_stays_finite():
    """Re-evaluating a candidate again and again (phase 4 with time left) once grew the solver budget by
    4 ** effort without bound: OverflowError after a few hundred rounds."""
    from test_cpsat import SMALL, _tiny

    from lgopt.strategies.cpsat.evaluate import MAX_EFFORT, Evaluator
    from lgopt.strategies.cpsat.space import CandidateSpace

    net = _tiny("head_tail")
    with Evaluator(CandidateSpace(net, SMALL)) as ev:
        ev.pack_time = 1e-9  # the budget grows, the work does not
        e = ev.evaluate(0, 1, "", full=True, effort=600)
    assert e.effort == 600 and MAX_EFFORT < 600

"""The command line: real runs, and one-line errors with exit status 2 for bad input."""

import json

import pytest
from conftest import PROBLEMS

from lgopt.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_import_fixtures(capsys, tmp_path, fixtures_dir):
    for name in ("resnet18", "yolov5s_like"):
        code, out, err = run(capsys, "import", str(fixtures_dir / "onnx" / f"{name}.weightless.onnx"),
                             "-o", str(tmp_path / f"{name}.json"), "--dtype", "f16")
        assert code == 0 and (tmp_path / f"{name}.json").exists(), err
        assert "ops" in out


def test_solve_verify_show(capsys, tmp_path):
    plan = tmp_path / "p.json"
    code, out, err = run(capsys, "solve", str(PROBLEMS / "unet.json"), "--chip", "cv181x", "--strategy", "greedy",
                         "-o", str(plan))
    assert code == 0, err
    assert "verified OK" in out and "lower bound" in out
    code, out, _ = run(capsys, "verify", str(plan), "--model", str(PROBLEMS / "unet.json"))
    assert code == 0 and out.startswith("OK")
    code, out, _ = run(capsys, "show", str(plan), "--group", "1", "-o", str(tmp_path / "g.png"))
    assert code == 0 and (tmp_path / "g.png").stat().st_size > 1000


def test_solve_json_summary(capsys):
    code, out, _ = run(capsys, "solve", str(PROBLEMS / "resnet18.json"), "--json", "--set", "lmem_bytes=64K")
    s = json.loads(out)
    assert code == 0
    assert {"strategy", "status", "cycles", "traffic_bytes", "groups", "global_layers", "lower_bound_cycles",
            "seconds"} <= set(s)
    assert s["cycles"] >= s["lower_bound_cycles"] and s["verified"]


def test_verify_reports_violation(capsys, tmp_path):
    plan = tmp_path / "p.json"
    assert run(capsys, "solve", str(PROBLEMS / "resnet18.json"), "--chip", "cv181x", "-o", str(plan))[0] == 0
    d = json.loads(plan.read_text())
    d["groups"][0]["buffers"][0]["offset"] = d["chip"]["lmem_bytes"]
    plan.write_text(json.dumps(d))
    code, out, _ = run(capsys, "verify", str(plan), "--model", str(PROBLEMS / "resnet18.json"))
    assert code == 1 and out.startswith("FAIL") and "past LMEM" in out


@pytest.mark.parametrize("argv,needle", [
    (["solve", "nope.onnx"], "does not exist"),
    (["solve", str(PROBLEMS / "resnet18.json"), "--chip", "tpu9"], "unknown chip"),
    (["solve", str(PROBLEMS / "resnet18.json"), "--set", "npu_num=0"], "npu_num"),
    (["solve", str(PROBLEMS / "resnet18.json"), "--set", "lmem_banks=3"], "does not divide"),
    (["solve", str(PROBLEMS / "resnet18.json"), "--set", "lmem_bytes"], "key=value"),
    (["solve", str(PROBLEMS / "resnet18.json"), "--strategy", "magic"], "unknown strategy 'magic'"),
    (["verify", "missing.json", "--model", str(PROBLEMS / "resnet18.json")], "cannot read"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_one_line_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("lgopt: error:") and needle in err
    assert "Traceback" not in err


def test_broken_model_files(capsys, tmp_path, fixtures_dir):
    data = (fixtures_dir / "onnx" / "yolov5s_like.weightless.onnx").read_bytes()
    cases = {"trunc.onnx": data[:1000], "junk.onnx": b"\x00\x01garbage", "empty.onnx": b"",
             "bad.json": b"{not json", "other.json": b'{"format": "x"}', "model.txt": b"hello"}
    for name, blob in cases.items():
        p = tmp_path / name
        p.write_bytes(blob)
        code, _, err = run(capsys, "solve", str(p))
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (name, err)


def test_simulate_command_with_onnxruntime_cross_check(capsys, tmp_path):
    pytest.importorskip("onnxruntime")
    model = str(PROBLEMS / "onnx" / "resnet18.onnx")
    plan = tmp_path / "p.json"
    shape = ["--dtype", "f16", "--input-shape", "input=1,3,64,64"]
    assert run(capsys, "solve", model, "--chip", "cv181x", "-o", str(plan), *shape)[0] == 0
    code, out, _ = run(capsys, "simulate", str(plan), "--model", model, *shape)
    assert code == 0 and out.startswith("OK") and "agrees with onnxruntime" in out
    d = json.loads(plan.read_text())
    g = next(g for g in d["groups"] if g["h_slices"] > 1)
    t = next(iter(g["windows"]))
    g["windows"][t][1][2] += 1  # drop one halo row of the second slice
    plan.write_text(json.dumps(d))
    code, out, _ = run(capsys, "simulate", str(plan), "--model", model, *shape)
    assert code == 1 and out.startswith("FAIL") and "differs at" in out

"""``lgopt deploy``'s plumbing with a stand-in compiler: a folder whose ``bin/`` holds ``model_transform`` and
``model_deploy`` scripts that write what TPU-MLIR 1.30.2 writes (its own grouping's cache: the shared fixture;
a bmodel; codegen's timeline with a total), so every path runs without TPU-MLIR: lgopt's grouping delivered
when it measures faster, TPU-MLIR's when it does not or when its allocation fails (exit 0 included), and the
one-line errors.  The real compiler runs it in ``benchmarks/deploy.py``."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

from conftest import FIXTURES, need

from lgopt.cli import main

TRANSFORM = """#!{py}
import sys
a = dict(zip(sys.argv[1::2], sys.argv[2::2]))
name = a["--model_name"]
open(a["--mlir"], "w").write("module {{}}\\n")
open(name + "_top_f32_all_weight.npz", "wb").write(b"w")
print("front end done")
"""

DEPLOY = """#!{py}
import json, os, sys
a = dict(zip(sys.argv[1::2], sys.argv[2::2]))
prefix = a["--model"][: -len(".bmodel")]
own = json.load(open({ref!r}))
cache = prefix + ".layer_group_cache.json"
if os.environ.get("LOAD_TPU_GROUP") == "1":
    mine = json.load(open(cache))
    refuse = {fail!r} is True or ({fail!r} == "first" and not os.path.exists({marker!r}))
    if refuse:
        open({marker!r}, "w").write("refused once")
        print("local memory allocate failed for group 0")
        print("LocalMemoryAllocationPass pass failed.")
    cycles = 591722 if mine == own else ({forced} if not refuse else 400000)
else:
    json.dump(own, open(cache, "w"))
    cycles = 591722
open(prefix + ".bmodel", "wb").write(b"bmodel " + str(cycles).encode())
open("compiler_profile_0.txt", "w").write("...\\nAPI_END total_cycle:%d|b:1|g:1\\n" % cycles)
"""


def _stand_in(tmp: Path, forced_cycles: int = 500_000, fail: bool | str = False) -> Path:
    ref = need(FIXTURES / "tpu-mlir" / "resnet18_bm1684x_f16.layer_group_cache.json")
    venv = tmp / "tpu-mlir"
    (venv / "bin").mkdir(parents=True)
    for name, text in (("model_transform", TRANSFORM.format(py=sys.executable)),
                       ("model_deploy", DEPLOY.format(py=sys.executable, ref=str(ref), fail=fail,
                                                      forced=forced_cycles, marker=str(tmp / "refused")))):
        p = venv / "bin" / name
        p.write_text(text)
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return venv


def _deploy(tmp: Path, venv: Path, *extra: str) -> tuple[int, dict]:
    model = need(FIXTURES / "onnx" / "resnet18.weightless.onnx")
    out = tmp / "out"
    code = main(["deploy", str(model), "--chip", "bm1684x", "-o", str(out), "--tpu-mlir", str(venv),
                 "--time-limit", "20", "--margin", "0", *extra])
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    return code, report


def test_lgopts_grouping_is_delivered_when_it_measures_faster(tmp_path):
    code, r = _deploy(tmp_path, _stand_in(tmp_path, forced_cycles=500_000))
    out = tmp_path / "out"
    assert code == 0 and r["tpu_mlir_cycles"] == 591_722
    if r.get("lgopt_kept_reference"):  # lgopt's search kept TPU-MLIR's grouping: the same model either way
        assert r["kept"] == "tpu-mlir" and r["lgopt_cycles"] == 591_722
    else:
        assert r["lgopt_cycles"] == 500_000 and r["kept"] == "lgopt" and r["delivered_cycles"] == 500_000
        assert (out / "resnet18_weightless_bm1684x_f16.bmodel").read_bytes() == b"bmodel 500000"
    for name in ("tpu-mlir.layer_group_cache.json", "lgopt.layer_group_cache.json", "plan.json", "report.md"):
        assert (out / name).exists(), name
    assert "TPU-MLIR 1.30.2 codegen timeline" in r["source"] and r["steps"] and not list(out.glob("*.part"))


def test_never_slower_than_tpu_mlir_alone(tmp_path):
    """lgopt's grouping measured slower, or refused by the allocator (TPU-MLIR exiting 0 all the same): the
    delivered bmodel is TPU-MLIR's own."""
    for k, (cycles, fail) in enumerate(((700_000, False), (400_000, True))):
        tmp = tmp_path / str(k)
        code, r = _deploy(tmp, _stand_in(tmp, forced_cycles=cycles, fail=fail))
        assert code == 0 and r["kept"] == "tpu-mlir" and r["delivered_cycles"] == 591_722
        assert (tmp / "out" / "resnet18_weightless_bm1684x_f16.bmodel").read_bytes() == b"bmodel 591722"
        if fail and not r.get("lgopt_kept_reference"):
            assert "local memory allocate failed" in r["lgopt_compile_error"] and r["lgopt_cycles"] is None


def test_a_grouping_the_allocator_refuses_is_searched_again_with_more_lmem_left_empty(tmp_path):
    """TPU-MLIR packs LMEM less tightly than lgopt: after it refuses lgopt's grouping, deploy searches once more
    with more banks empty and compiles that (here the stand-in compiles it), one more compile only."""
    code, r = _deploy(tmp_path, _stand_in(tmp_path, forced_cycles=500_000, fail="first"))
    assert code == 0
    if r.get("lgopt_kept_reference") and not r.get("lgopt_refused_first"):
        return  # lgopt's search kept TPU-MLIR's grouping at once: nothing was compiled, nothing refused
    assert "local memory allocate failed" in r["lgopt_refused_first"]
    steps = [s["step"] for s in r["steps"]]
    assert any("again, 4 banks reserved" in s for s in steps)
    assert r["kept"] == "lgopt" and r["delivered_cycles"] == 500_000 or r.get("lgopt_kept_reference")
    assert "searched again with 4 LMEM banks left empty" in (tmp_path / "out" / "report.md").read_text()


def test_deploy_errors_are_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    model = str(need(FIXTURES / "onnx" / "resnet18.weightless.onnx"))
    monkeypatch.delenv("LGOPT_TPU_MLIR", raising=False)
    assert main(["deploy", model, "--chip", "bm1684x", "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "install-tpu-mlir.sh" in err
    venv = _stand_in(tmp_path)
    assert main(["deploy", model, "--chip", "bm1684x", "-o", str(tmp_path / "o"), "--tpu-mlir", str(venv),
                 "--quantize", "INT8"]) == 2
    assert "calibration" in capsys.readouterr().err
    monkeypatch.setenv("LGOPT_TPU_MLIR", str(tmp_path / "nowhere"))
    assert main(["deploy", model, "--chip", "bm1684x", "-o", str(tmp_path / "o")]) == 2
    assert "no TPU-MLIR in" in capsys.readouterr().err and not (tmp_path / "o").exists()



def test_ctrl_c_during_lgopts_side_delivers_tpu_mlirs_own_model(tmp_path, monkeypatch):
    """Interrupted after TPU-MLIR's own compile: nothing it waited for is lost; DIR holds TPU-MLIR's bmodel and a
    report saying what happened, never a half-written file."""
    import lgopt.tpumlir.deploy as deploy

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(deploy, "_search", interrupted)
    code, r = _deploy(tmp_path, _stand_in(tmp_path))
    out = tmp_path / "out"
    assert code == 0 and r["kept"] == "tpu-mlir" and "interrupted" in r and r["lgopt_cycles"] is None
    assert (out / "resnet18_weightless_bm1684x_f16.bmodel").read_bytes() == b"bmodel 591722"
    assert not list(out.glob("*.part")) and not (out / "plan.json").exists()


def test_ctrl_c_before_tpu_mlirs_compile_leaves_dir_without_outputs(tmp_path, monkeypatch, capsys):
    import lgopt.tpumlir.deploy as deploy

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(deploy, "deploy", interrupted)
    code, r = _deploy(tmp_path, _stand_in(tmp_path))
    assert code == 130 and r == {}
    assert not [p for p in (tmp_path / "out").iterdir() if p.is_file()]


def _compile_with(monkeypatch, tmp_path, refuse: set[str], same: bool = False):
    """deploy's ``_compile`` with a stand-in export (each edge-cast rule its own cache, or ``same``: one cache)
    and a stand-in compiler refusing the rules in ``refuse`` as TPU-MLIR's allocator does."""
    import lgopt.tpumlir.deploy as d
    from lgopt.model.plan import Plan
    from lgopt.tpumlir.compiler import Compiled

    compiled: list[str] = []

    def export(plan, net, ref, edge_casts=None):
        return {"subfunc_0": {"rule": "one" if same else edge_casts}}

    def compile_(tc, mlir, chip, q, cores, table, folder, cache):
        rule = cache["subfunc_0"]["rule"]
        compiled.append(rule)
        if rule in refuse:
            return Compiled(False, folder, None, None, None, 1.0, "local memory allocate failed for group 4")
        return Compiled(True, folder, folder / "m.bmodel", None, 268_217, 1.0)

    monkeypatch.setattr(d, "export_tpumlir", export)
    monkeypatch.setattr(d, "deploy", compile_)
    req = d.DeployRequest(model=tmp_path / "m.onnx", chip="bm1690", out=tmp_path, quantize="INT8", cores=8)
    ref = Compiled(True, tmp_path, None, tmp_path / "ref.json", 382_148, 1.0)
    plan = Plan(model="m", model_digest="", chip={}, strategy="cpsat", steps=(), groups=())
    got, mine, _ = d._compile(req, None, tmp_path, None, ref, plan, None, d._Clock(lambda s: None), "")
    return got, mine, compiled


def test_a_grouping_refused_with_the_references_edge_casts_is_compiled_with_them_global(monkeypatch, tmp_path):
    """lgopt's unet_small on BM1690 INT8, 8 cores: refused with the reference's edge casts in its groups
    ("local memory allocate failed for group 4"), 0.70 of opt2 with them run as global layers.  Deploy compiles
    the other rule only after such a refusal, and the plan records the rule that compiled."""
    plan, mine, compiled = _compile_with(monkeypatch, tmp_path, refuse={"reference"})
    assert compiled == ["reference", "global"] and mine.ok and plan.solver["edge_casts"] == "global"
    plan, mine, compiled = _compile_with(monkeypatch, tmp_path, refuse=set())
    assert compiled == ["reference"] and mine.ok and plan.solver["edge_casts"] == "reference"
    plan, mine, compiled = _compile_with(monkeypatch, tmp_path, refuse={"reference", "global"})
    assert compiled == ["reference", "global"] and not mine.ok
    plan, mine, compiled = _compile_with(monkeypatch, tmp_path, refuse={"one"}, same=True)
    assert compiled == ["one"] and not mine.ok  # no edge cast to move: not compiled twice

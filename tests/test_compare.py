"""Reports: TPU-MLIR's grouping scored, strategies compared, chip parameters swept."""

import shutil
import subprocess

import pandas as pd
import pytest
from conftest import PROBLEMS

from lgopt.check.simulate import simulate
from lgopt.check.verify import verify_plan
from lgopt.cli import main
from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_problem
from lgopt.tpumlir.cache import map_groups, read_cache
from lgopt.tpumlir.grouping import score

CASES = [("fixture_resnet18", "resnet18_bm1684x_f16", "bm1684x"), ("fixture_resnet18", "resnet18_bm1688_f16", "bm1688"),
         ("fixture_yolov5s_like", "yolov5s_like_bm1684x_f16", "bm1684x")]


@pytest.mark.parametrize("problem,cache,chip", CASES)
def test_tpu_mlir_caches_map_and_verify(problem, cache, chip, fixtures_dir):
    net = load_problem(PROBLEMS / f"{problem}.json")
    path = fixtures_dir / "tpu-mlir" / f"{cache}.layer_group_cache.json"
    groups = read_cache(str(path))
    m = map_groups(net, groups)
    assert m.unmapped == ()  # every grouped TPU-MLIR op is found (casts aside)
    assert m.casts > 0 and len(m.groups) == len(groups)
    plan, info = score(net, get_chip(chip), str(path), exact=False)
    assert verify_plan(net, plan) == []
    assert info["groups_scored"] >= len(groups) - len(info["dropped"])
    # TPU-MLIR's secs are used as given where lgopt's model allows them
    secs = {(g.locs[0]): g.secs for g in groups}
    assert any(s[3] > 1 for s in secs.values()) == any(g.h_slices > 1 for g in plan.groups)


def test_tpu_mlir_plan_simulates(fixtures_dir):
    from lgopt.io.onnx_import import import_onnx

    net = import_onnx(fixtures_dir / "onnx" / "resnet18.weightless.onnx", dtype="f16", name="fixture_resnet18",
                      input_shapes={"input": (1, 3, 64, 64)})
    plan, _ = score(net, get_chip("bm1688"),
                    str(fixtures_dir / "tpu-mlir" / "resnet18_bm1688_f16.layer_group_cache.json"), exact=False)
    assert simulate(net, plan).ok


def test_bad_cache_is_an_input_error(tmp_path, capsys):
    bad = tmp_path / "x.layer_group_cache.json"
    bad.write_text('{"opt": 2}')
    code = main(["compare", str(PROBLEMS / "resnet18.json"), "--strategies", f"greedy,tpu-mlir={bad}"])
    assert code == 2 and "not a TPU-MLIR" in capsys.readouterr().err


def test_compare_writes_report(tmp_path, capsys, fixtures_dir):
    caches = ",".join(f"tpu-mlir={fixtures_dir / 'tpu-mlir' / c}.layer_group_cache.json"
                      for c in ("resnet18_bm1684x_f16", "yolov5s_like_bm1684x_f16"))
    out = tmp_path / "rep"
    code = main(["compare", str(PROBLEMS / "fixture_resnet18.json"), str(PROBLEMS / "fixture_yolov5s_like.json"),
                 "--strategies", f"greedy,cpsat,{caches}", "--chip", "bm1684x", "-o", str(out), "--time-limit", "5"])
    text = capsys.readouterr().out
    assert code == 0 and "tpu-mlir" in text
    df = pd.read_csv(out / "results.csv")
    assert len(df) == 6 and set(df["strategy"]) == {"greedy", "cpsat", "tpu-mlir"}
    assert (df[df["strategy"] == "cpsat"]["x greedy"] <= 1).all()
    n_ops = {m: len(load_problem(PROBLEMS / f"{m}.json").ops) for m in set(df["model"])}
    assert (df["grouped %"] == [round(100 * g / n_ops[m], 1) for g, m in zip(df["ops in groups"], df["model"])]).all()
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 4 and "<table" in html
    assert "TPU-MLIR cache" in (out / "report.md").read_text()


def test_sweep_twenty_configurations_and_cache(tmp_path, capsys):
    out = tmp_path / "sw"
    argv = ["sweep", str(PROBLEMS / "resnet18.json"), "--set", "lmem_bytes=32K,64K,128K,256K,512K",
            "--set", "npu_num=8,16,32,64", "--strategies", "greedy", "-o", str(out)]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert "0 of 20 configurations served from cache" in first
    assert main(argv) == 0
    assert "20 of 20 configurations served from cache" in capsys.readouterr().out
    md = (out / "sweep.md").read_text()
    assert "Pareto front" in md and "knee" in md
    df = pd.read_csv(out / "sweep.csv")
    assert len(df) == 20
    assert set(df["lmem_bytes"]) == {"32K", "64K", "128K", "256K", "512K"} and set(df["npu_num"]) == {8, 16, 32, 64}
    # the knee is the smallest swept LMEM within 5 % of the best cycles at the same lane count
    from lgopt.report.sweep import size_label

    knees = md.split("## knee")[1].split("## ")[0]
    for npu, line in df[df["placed"]].groupby("npu_num"):
        knee = line[line["cycles"] <= 1.05 * line["cycles"].min()]["lmem_bytes (value)"].min()
        rows = [[c.strip() for c in r.split("|")[1:-1]] for r in knees.splitlines() if r.startswith("| resnet18")]
        # cells: model, chip, npu_num, strategy, knee LMEM, ...
        assert [r[4] for r in rows if r[2] == str(npu)] == [size_label(knee)]
    assert main(["sweep", str(PROBLEMS / "resnet18.json"), "--set", "lmem_banks=3"]) == 2


def test_html_report_renders_in_a_browser(tmp_path, capsys, fixtures_dir):
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no headless browser on this machine")
    out = tmp_path / "rep"
    assert main(["compare", str(PROBLEMS / "resnet18.json"), "--strategies", "greedy", "-o", str(out)]) == 0
    shot = tmp_path / "shot.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1200,1600",
                    (out / "report.html").as_uri()], check=True, timeout=120, capture_output=True)
    from PIL import Image  # matplotlib depends on Pillow

    img = Image.open(shot).convert("L")
    colours = sum(1 for count in img.histogram() if count)  # grey levels present
    assert img.size == (1200, 1600) and colours > 50  # tables and plots, not a blank page

"""Reports a person can read: labelled LMEM blocks, pictures that fit a screen and are not shrunk, bar charts
on a log scale with readable tick labels, sweep legends in numeric order, a Pareto front over every swept
parameter."""

import io

import pandas as pd
import pytest

from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_problem
from lgopt.model.plan import Buffer


@pytest.fixture(scope="module")
def long_plan(problems_dir):
    from lgopt.strategies.greedy import greedy

    net = load_problem(problems_dir / "resnet18.json")
    plan = greedy(net, get_chip("bm1684x"))
    assert len(plan.groups[0].rows) > 25  # one long group: its picture was 2,500+ px wide
    return net, plan


def test_lmem_picture_fits_and_names_its_blocks(long_plan):
    import matplotlib.image as mpimg

    from lgopt.report.tables import MAX_PICTURE_INCHES, _buffer_label, draw_group

    _, plan = long_plan
    buf = io.BytesIO()
    draw_group(plan, 0, buf)
    buf.seek(0)
    assert mpimg.imread(buf, format="png").shape[1] <= MAX_PICTURE_INCHES * 110
    assert _buffer_label(Buffer(7, "activation", "/layer1/Relu_output_0", 64, 0, 1), 3.0) == \
        "7 /layer1/Relu_output_0"
    assert _buffer_label(Buffer(3, "weight", "/Conv_2", 64, 0, 1), 1.0) == "3 w:/Conv_2"
    assert _buffer_label(Buffer(3, "activation", "a_very_long_tensor_name_indeed", 64, 0, 1), 1.0).startswith("3 …")


def test_html_pictures_are_not_shrunk(tmp_path):
    from lgopt.report.compare import write_html

    write_html(tmp_path / "r.html", "t", [], [("pic", "AAAA")], [])
    html = (tmp_path / "r.html").read_text()
    assert "max-width:100%" not in html and "overflow-x:auto" in html and "<div class='plot'><img" in html


def _figures(monkeypatch):
    import lgopt.report.compare as compare
    import lgopt.report.sweep as sweep

    figs = []

    def keep(fig):
        figs.append(fig)
        return ""

    monkeypatch.setattr(compare, "_png", keep)
    monkeypatch.setattr(sweep, "_png", keep)
    return figs


def test_bar_charts_log_scale_readable_ticks(monkeypatch, long_plan):
    from lgopt.report.compare import _plots_compare

    net, plan = long_plan
    figs = _figures(monkeypatch)
    df = pd.DataFrame([{"model": "resnet18", "chip": "bm1684x", "strategy": "greedy", "cycles": 10, "traffic MB": 1},
                       {"model": "big", "chip": "cv181x", "strategy": "greedy", "cycles": 10**7, "traffic MB": 900}])
    _plots_compare(df, {("resnet18", "bm1684x", "greedy"): plan, ("big", "cv181x", "greedy"): plan},
                   {"resnet18": net, "big": net})
    ax = figs[0].axes[0]  # cycles per strategy
    assert ax.get_yscale() == "log"
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels and not any("(" in x or "'" in x for x in labels) and "big\ncv181x" in labels


def test_sweep_legend_in_numeric_order_and_pareto_over_every_parameter(monkeypatch):
    from lgopt.report.sweep import _plots_sweep, pareto

    figs = _figures(monkeypatch)
    rows = []
    for lm, v in (("32K", 32768), ("128K", 131072), ("64K", 65536)):
        for npu, n in (("16", 16), ("8", 8)):
            rows.append({"lmem_bytes": lm, "npu_num": npu, "strategy": "greedy", "cycles": 10**6 // (v // 1024 * n),
                         "traffic MB": 1.0, "lmem_bytes (value)": float(v), "npu_num (value)": float(n)})
    df = pd.DataFrame(rows)
    _plots_sweep(df, ["lmem_bytes", "npu_num"])
    legend = [t.get_text() for t in figs[2].axes[0].get_legend().get_texts()]  # cycles against npu_num
    assert legend == ["greedy, lmem_bytes=32 KiB", "greedy, lmem_bytes=64 KiB", "greedy, lmem_bytes=128 KiB"]
    lmem_axis = figs[0].axes[0]  # cycles against lmem_bytes: 32K-128K spans 4x, so linear, labelled in KiB
    assert lmem_axis.get_xscale() == "linear"
    assert [t.get_text() for t in lmem_axis.get_xticklabels()] == ["32 KiB", "64 KiB", "128 KiB"]
    front = pareto(df, ["lmem_bytes (value)", "npu_num (value)", "cycles"])
    assert len(front) == 6  # less LMEM or fewer lanes always costs cycles here: nothing is dominated
    only_lmem = pareto(df[df["npu_num"] == "16"], ["lmem_bytes (value)", "cycles"])
    assert len(only_lmem) == 3

"""Sweeps and compare on every joblib backend: the same configuration gives the same result on this
process, local worker processes and a real Dask cluster; the per-configuration cache is atomic, shared
and resumable; the summary names the knee, the Pareto front, what could not be placed and the cost model."""

import threading

import pandas as pd
import pytest
from conftest import PROBLEMS

from lgopt.cli import main
from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_model
from lgopt.report.parallel import Backend, run_tasks
from lgopt.report.sweep import read_cached, sweep, write_cached

RESULT = ["model", "chip", "lmem_bytes", "strategy", "cycles", "traffic MB", "groups", "global layers", "status"]


def _sweep(tmp_path, name, backend, axes=None, strategies=("greedy", "cpsat"), progress=None):
    net = load_model(str(PROBLEMS / "resnet18.json"))
    return sweep([("resnet18", net)], [get_chip("cv181x")], axes or {"lmem_bytes": ["16K", "64K"]}, list(strategies),
                 str(tmp_path / name), time_limit=30, backend=backend, progress=progress)


def _cut_short(tmp_path, name, backend):
    """A sweep whose cpsat searches its deterministic budget stops (half a unit on bm1688)."""
    net = load_model(str(PROBLEMS / "resnet18.json"))
    return sweep([("resnet18", net)], [get_chip("bm1688")], {"lmem_bytes": ["96K", "128K"]}, ["cpsat"],
                 str(tmp_path / name), backend=backend, workers=2, deterministic=0.5)


def _result(df):
    return df[RESULT].sort_values(["lmem_bytes", "strategy"]).reset_index(drop=True)


def test_same_result_sequential_processes_and_a_dask_cluster(tmp_path):
    distributed = pytest.importorskip("distributed")
    seq = _sweep(tmp_path, "seq", Backend("sequential", 1))
    assert (seq[seq["strategy"] == "cpsat"]["status"] == "optimal").all()  # the search ended on its own
    assert not seq["cached"].any()
    procs = _sweep(tmp_path, "procs", Backend("processes", 2))
    pd.testing.assert_frame_equal(_result(seq), _result(procs))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster:
        on_dask = _sweep(tmp_path, "dask", Backend("dask", 2, cluster.scheduler_address))
        # a search stopped by its budget: with deterministic time it stops at the same point everywhere
        cut_dask = _cut_short(tmp_path, "cut-dask", Backend("dask", 2, cluster.scheduler_address))
    pd.testing.assert_frame_equal(_result(seq), _result(on_dask))
    # every backend fills the same cache: the sequential one's files serve a cluster's rerun unchanged
    assert sorted(p.name for p in (tmp_path / "seq/cache").iterdir()) == \
        sorted(p.name for p in (tmp_path / "dask/cache").iterdir())
    cut_seq = _cut_short(tmp_path, "cut-seq", Backend("sequential", 1))
    assert (cut_seq["status"] == "time_limit").all()
    cut_procs = _cut_short(tmp_path, "cut-procs", Backend("processes", 2))
    pd.testing.assert_frame_equal(_result(cut_seq), _result(cut_procs))
    pd.testing.assert_frame_equal(_result(cut_seq), _result(cut_dask))


def test_run_tasks_gives_every_index_once():
    got = dict(run_tasks(abs, [-3, -1, -2], Backend("processes", 2)))
    assert got == {0: 3, 1: 1, 2: 2}
    assert dict(run_tasks(abs, [-5], Backend("sequential", 1))) == {0: 5}


def test_interrupted_sweep_resumes_from_the_cache(tmp_path):
    axes = {"lmem_bytes": ["16K", "32K", "64K"]}
    seen = []

    def stop_after_two(msg):
        seen.append(msg)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _sweep(tmp_path, "sw", Backend("sequential", 1), axes, ["greedy"], stop_after_two)
    assert "ETA" in seen[0] and "elapsed" in seen[0]
    files = list((tmp_path / "sw/cache").glob("*.json"))
    assert len(files) == 2  # what finished before Ctrl-C is kept
    df = _sweep(tmp_path, "sw", Backend("sequential", 1), axes, ["greedy"])
    assert df["cached"].sum() == 2 and len(df) == 3
    fresh = _sweep(tmp_path, "fresh", Backend("sequential", 1), axes, ["greedy"])
    pd.testing.assert_frame_equal(_result(df), _result(fresh))


def test_cache_writes_are_atomic_under_concurrent_writers(tmp_path):
    row = {"cycles": 1, "why not placed": "x" * 100_000}

    def write():
        for _ in range(20):
            write_cached(tmp_path, "k", row)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    reads = [read_cached(tmp_path, "k") for _ in range(200)]
    for t in threads:
        t.join()
    assert all(r is None or r == row for r in reads)  # never half a file
    assert [p.name for p in tmp_path.iterdir()] == ["k.json"]  # no temporary file left behind
    (tmp_path / "k.json").write_text('{"cycl')  # a broken file is solved again, not trusted
    assert read_cached(tmp_path, "k") is None


def test_a_sweep_says_where_nothing_places(tmp_path):
    """A 1x1 conv over 512-pixel rows: one row (1 KiB) exceeds 128 bytes per lane, and a conv is cut neither by
    channels nor by columns, so nothing places there; the summary lists that configuration."""
    from lgopt.model.network import Network, Op, Tensor, Weight, check_network

    t = {k: Tensor(k, (1, 16, 8, 512), "f16") for k in "xy"}
    conv = Op("conv", "Conv", ("x",), ("y",), (Weight("w", (16, 16, 1, 1), "f16", "filter"),),
              {"kernel": (1, 1), "strides": (1, 1), "pads": (0, 0, 0, 0), "group": 1}, local=True, h_split=True,
              n_split=True)
    net = check_network(Network("wide", t, (conv,), ("x",), ("y",)))
    df = sweep([("wide", net)], [get_chip("cv181x")], {"lmem_bytes": ["128", "16K"]}, ["greedy"], str(tmp_path))
    assert dict(zip(df["lmem_bytes"], df["placed"])) == {"128": False, "16K": True}
    md = (tmp_path / "sweep.md").read_text()
    assert "could not place a model" in md and "every op runs as a global layer" in md


def test_sweep_of_several_models_and_chips_reads_like_a_summary(tmp_path, capsys):
    out = tmp_path / "multi"
    argv = ["sweep", "--models", str(PROBLEMS / "resnet18.json"), str(PROBLEMS / "mobilenet_v2.json"),
            "--chip", "cv181x,bm1684x", "--set", "lmem_bytes=1K,64K,1M", "--set", "npu_num=8",
            "--backend", "sequential", "-o", str(out)]
    assert main(argv) == 0
    assert "0 of 12 configurations served from cache" in capsys.readouterr().out
    df = pd.read_csv(out / "sweep.csv")
    assert set(df["model"]) == {"resnet18", "mobilenet_v2"} and set(df["chip"]) == {"cv181x", "bm1684x"}
    md = (out / "sweep.md").read_text()
    assert "analytic cost model" in md and "## knee" in md and "Pareto front of mobilenet_v2 on bm1684x" in md
    knee = md.split("## knee")[1].split("##")[0]
    assert knee.count("| resnet18") == 2 and knee.count("| mobilenet_v2") == 2
    # with 1 KiB per lane on 8 lanes resnet18 still groups its Adds and its max pool, a channel and a row a slice
    assert df["placed"].all()
    html = (out / "sweep.html").read_text()
    assert html.count("data:image/png;base64,") == 8  # 2 models x 2 parameters x (cycles, traffic)
    assert main(argv) == 0
    assert "12 of 12 configurations served from cache" in capsys.readouterr().out


def test_sweep_cycles_axis_is_logarithmic_across_orders_of_magnitude(monkeypatch):
    import lgopt.report.sweep as sw

    figs = []
    monkeypatch.setattr(sw, "_png", lambda fig: figs.append(fig) or "")
    df = pd.DataFrame([{"strategy": "greedy", "lmem_bytes": lm, "lmem_bytes (value)": float(v), "cycles": c,
                        "traffic MB": 1.0, "cost model": "analytic", "placed": True}
                       for lm, v, c in (("1M", 2**20, 1000), ("16K", 2**14, 10**6), ("128K", 2**17, 10**4))])
    sw._plots_sweep(df, ["lmem_bytes"])
    ax = figs[0].axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16 KiB", "128 KiB", "1 MiB"]
    assert "analytic" in ax.get_ylabel()


def test_compare_on_local_processes_matches_sequential(tmp_path, capsys):
    models = [str(PROBLEMS / "resnet18.json"), str(PROBLEMS / "mobilenet_v2.json")]
    assert main(["compare", *models, "--strategies", "greedy", "--backend", "sequential",
                 "-o", str(tmp_path / "a")]) == 0
    assert main(["compare", *models, "--strategies", "greedy", "--jobs", "2", "-o", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    a, b = (pd.read_csv(tmp_path / d / "results.csv") for d in "ab")
    cols = ["model", "strategy", "cycles", "traffic MB", "groups", "status"]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    assert list(a["model"]) == ["resnet18", "mobilenet_v2"]


@pytest.mark.parametrize("extra,needle", [
    (["--scheduler", "localhost:8786"], "expected an address like tcp://"),
    (["--backend", "sequential", "--scheduler", "tcp://localhost:8786"], "use it with --backend dask"),
    (["--jobs", "0"], "--jobs must be at least 1"),
    (["--backend", "ray"], "invalid choice"),
    (["--workers", "0"], "--workers must be at least 1"),
])
def test_sweep_bad_backend_input_is_one_line(extra, needle, capsys):
    argv = ["sweep", str(PROBLEMS / "resnet18.json"), "--set", "lmem_bytes=64K", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_sweep_without_a_model_is_refused(capsys):
    assert main(["sweep", "--set", "lmem_bytes=64K"]) == 2
    assert "sweep needs a model" in capsys.readouterr().err

"""lgopt's groupings compiled by TPU-MLIR 1.30.2: solve, export, force into the compiler, read its cycles.

    PEER_RUN=/path/to/tpu-mlir-run python benchmarks/roundtrip.py [--models resnet18,mobilenet_v2]
        [--chips bm1684x] [--strategies greedy,cpsat] [--time-limit 30] [--out benchmarks/roundtrip/latest]

Needs TPU-MLIR installed by ``../shared/tpu-mlir/install.sh`` under ``$PEER_RUN`` (its venv and the full
ONNX models in ``$PEER_RUN/models``); without it the script says so and exits 2.  For every model and chip:

1. TPU-MLIR's own opt2 cache (``../shared/calibration/caches/MODEL_CHIP/opt2.layer_group_cache.json``) is
   scored with ``score_grouping.sh``: TPU-MLIR's own cycles, and the model cache (op list, base groups);
2. the row ``tpu-mlir opt2 (re-exported)``: that cache read by lgopt (``score``, the network lowered as the cache
   splits it; ``exact=False`` where lgopt cannot build a group exactly) and exported again, a check of the
   exporter (same cycles as opt2 unless lgopt moved an op it only runs globally);
3. per strategy: lgopt solves the weightless model, the plan is exported with the opt2 cache as reference
   (and the model cache's ``base_groups.json``), and compiled; one compile at a time.

Columns: ``lgopt predicted`` is lgopt's cycle estimate by ``--cost-model`` (not TPU-MLIR's);
``TPU-MLIR measured`` is codegen's simulated timeline of the compiled grouping (or why it was refused);
``opt2`` / ``opt1`` are TPU-MLIR's own groupings (opt1 from ``../shared/calibration/totals.csv``).
Written as ``roundtrip.csv`` and ``roundtrip.md`` under ``--out``, plus every exported cache and score.

The runs kept in the project are one archive, ``benchmarks/roundtrip/runs.tar.xz`` (``README.md`` beside it is
the index): ``--unpack`` puts their folders back under ``benchmarks/roundtrip/`` (not tracked; the scripts that
read them unpack on first use), and ``--pack`` makes the archive again from every folder there, a new run's
included (deterministic: the same folders give the same bytes).  Neither needs TPU-MLIR.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from common import CAL, SCORE

from lgopt.errors import LgoptError
from lgopt.hw.chip import get_chip
from lgopt.io.exporters import export, write
from lgopt.io.problem import load_model
from lgopt.model.network import with_batch
from lgopt.strategies.cpsat.common import CpsatSettings
from lgopt.strategies.registry import StrategyOptions, parse_strategy
from lgopt.tpumlir.export import read_base_groups
from lgopt.tpumlir.grouping import score
from lgopt.tpumlir.judge import find_judge, measurement_of
from lgopt.tpumlir.judged import JudgeSettings
from lgopt.tpumlir.lowering import network_of
from lgopt.tpumlir.runs import pack, unpack
from lgopt.tpumlir.space import ReferenceSpace

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "benchmarks" / "roundtrip"


def opt1_cycles(model: str, chip: str) -> int | None:
    with open(CAL / "totals.csv", newline="") as f:
        for r in csv.DictReader(f):
            if r["model"] == model and r["chip"] == chip and r["variant"] == "opt1" and r["status"] == "ok":
                return int(r["total_cycles"])
    return None


def with_batch_onnx(full: Path, batch: int) -> Path:
    """``full`` with its inputs' (and outputs') first dimension set to ``batch``, shapes re-inferred (written
    beside it once)."""
    import onnx
    from onnx import shape_inference

    out = full.with_name(f"{full.stem}_b{batch}.onnx")
    if out.exists():
        return out
    m = onnx.load(str(full))
    inits = {i.name for i in m.graph.initializer}
    for v in [*(i for i in m.graph.input if i.name not in inits), *m.graph.output]:
        v.type.tensor_type.shape.dim[0].dim_value = batch
    del m.graph.value_info[:]
    onnx.save(shape_inference.infer_shapes(m, strict_mode=True), str(out))
    return out


def model_cache_dir(peer: Path, onnx: Path, chip: str) -> Path:
    md5 = hashlib.md5(onnx.read_bytes()).hexdigest()[:10]
    return peer / "score_cache" / f"{onnx.stem}_{chip}_f16_{md5}"


def compile_cache(onnx: Path, chip: str, cache: Path, out: Path, *options: str) -> dict:
    """score_grouping.sh on one cache, with its ``options`` (``--keep``); one compile at a time: this blocks."""
    t0 = time.perf_counter()
    p = subprocess.run(["nice", "-n", "10", "bash", str(SCORE), str(onnx), chip, str(cache), str(out), *options],
                       capture_output=True, text=True, timeout=3600)
    try:
        r = json.loads(out.read_text())
    except (OSError, ValueError):
        r = {"status": "no_result", "lg_error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    r["_wall_s"] = round(time.perf_counter() - t0, 1)
    return r


def measured(r: dict) -> tuple[int | None, str]:
    m = measurement_of(r)
    if m.status == "ok" and m.total_cycles:
        return m.total_cycles, "" if m.honoured else "not honoured exactly"
    return None, f"TPU-MLIR refused: {m.error[:160]}"


def groups_text(cache: dict) -> str:
    return "; ".join(f"[{g['func_start_idx']}-{g['func_end_idx']}] h{g['shape_secs'][3]}"
                     + (f" n{g['shape_secs'][0]}" if g["shape_secs"][0] > 1 else "")
                     for k, v in cache.items() if k.startswith("subfunc_") for g in v["GroupLayer"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--chips", default="bm1684x")
    ap.add_argument("--strategies", default="greedy,cpsat")
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(RUNS / "latest"))
    ap.add_argument("--space", choices=("compiler", "free"), default="compiler",
                    help="compiler: solve with the opt2 cache as --reference (what TPU-MLIR compiles as planned); "
                         "free: lgopt's own space, exported with --groups-only")
    ap.add_argument("--cost-model", default="analytic", help="the chip's cost model for lgopt's prediction")
    ap.add_argument("--margin", type=float, default=0.05,
                    help="compiler space: keep TPU-MLIR's grouping unless lgopt's is predicted this much faster "
                         "(0: whenever lgopt's is predicted no slower)")
    ap.add_argument("--judge-budget", type=int, default=0,
                    help="compiler space: > 0 lets TPU-MLIR judge a local search of that many compiles from its own "
                         "grouping and lgopt's (lgopt.tpumlir.judged); 0: lgopt's prediction alone decides")
    ap.add_argument("--batch", type=int, default=1,
                    help="> 1: models at this batch ($PEER_RUN/models/MODEL_bN.onnx, made by this script); the "
                         "reference is TPU-MLIR's own grouping at that batch")
    ap.add_argument("--unpack", action="store_true", help="only unpack benchmarks/roundtrip/runs.tar.xz beside it")
    ap.add_argument("--pack", action="store_true", help="only make that archive again from every run folder there")
    a = ap.parse_args(argv)
    if a.unpack or a.pack:
        print(pack(RUNS) if a.pack else unpack(RUNS))
        return 0
    peer = Path(os.environ.get("PEER_RUN", ""))
    if not os.environ.get("PEER_RUN") or not (peer / "venv" / "bin" / "model_deploy").exists():
        print("roundtrip: set PEER_RUN to a TPU-MLIR install (../shared/tpu-mlir/install.sh); see docs/tpu-mlir.md",
              file=sys.stderr)
        return 2
    out = Path(a.out).resolve()  # the scoring tool runs elsewhere: it is handed absolute paths
    (out / "caches").mkdir(parents=True, exist_ok=True)
    (out / "scores").mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    for model in a.models.split(","):
        for chip_name in a.chips.split(","):
            onnx_full = peer / "models" / f"{model}.onnx"
            onnx_lg = CAL / "onnx" / f"{model}.weightless.onnx"
            ref = CAL / "caches" / f"{model}_{chip_name}" / "opt2.layer_group_cache.json"
            if a.batch > 1 and onnx_full.exists():
                onnx_full = with_batch_onnx(onnx_full, a.batch)
                ref = find_judge(onnx_full, chip_name, script=SCORE).prepare()
            if not (onnx_full.exists() and onnx_lg.exists() and ref.exists()):
                print(f"skip {model}/{chip_name}: model or reference cache missing", file=sys.stderr)
                continue
            tag = f"{model}_{chip_name}" + (f"_b{a.batch}" if a.batch > 1 else "")
            print(f"== {tag}: TPU-MLIR's own opt2", file=sys.stderr, flush=True)
            r_opt2 = compile_cache(onnx_full, chip_name, ref, out / "scores" / f"{tag}_opt2.json")
            opt2, _ = measured(r_opt2)
            opt2 = opt2 or (r_opt2.get("reference") or {}).get("tpu_mlir_own_opt2_total_cycles")
            opt1 = opt1_cycles(model, chip_name) if a.batch == 1 else None  # the calibration data is batch 1
            bg_path = model_cache_dir(peer, onnx_full, chip_name) / "base_groups.json"
            base_groups = read_base_groups(bg_path) if bg_path.exists() and bg_path.stat().st_size > 2 else None
            net = load_model(str(onnx_lg), dtype="f16")
            if a.batch > 1:
                net = with_batch(net, a.batch)
            judged: dict = {}
            if a.judge_budget > 0 and a.space == "compiler":
                judged = {"judge": find_judge(onnx_full, chip_name, script=SCORE),
                          "judge_settings": JudgeSettings(budget=a.judge_budget, time_limit=20 * a.time_limit)}
            chip = get_chip(chip_name, {"cost_model": a.cost_model})
            runs: list[tuple[str, object, float]] = []
            t0 = time.perf_counter()
            try:
                try:  # exact: the ops the cache runs as column pieces are split as it splits them
                    plan, _ = score(net, chip, str(ref))
                except LgoptError:
                    plan, _ = score(net, chip, str(ref), exact=False)
                runs.append(("tpu-mlir opt2 (re-exported)", plan, time.perf_counter() - t0))
            except LgoptError as e:
                rows.append({"model": model, "chip": chip_name, "strategy": "tpu-mlir opt2 (re-exported)",
                             "opt2": opt2, "opt1": opt1, "note": f"lgopt cannot read it: {e}"})
            for st in a.strategies.split(","):
                print(f"== {tag}: lgopt {st}", file=sys.stderr, flush=True)
                space = None if a.space != "compiler" else ReferenceSpace(
                    str(ref), str(bg_path) if base_groups else None, a.margin, **judged)
                opts = StrategyOptions(cpsat=CpsatSettings(time_limit=a.time_limit, workers=a.workers), space=space)
                t0 = time.perf_counter()
                try:
                    plan, _ = parse_strategy(st).run(net, chip, opts)
                except LgoptError as e:  # the judge compiled none of its start points
                    rows.append({"model": model, "chip": chip_name, "strategy": st, "opt2": opt2, "opt1": opt1,
                                 "solve s": round(time.perf_counter() - t0, 1), "note": str(e)[:300]})
                    continue
                runs.append((st, plan, time.perf_counter() - t0))
            for st, plan, secs in runs:
                row = {"model": model, "chip": chip_name, "strategy": st,
                       "lgopt predicted": int(plan.cost["cycles"]), "TPU-MLIR measured": None,
                       "opt2": opt2, "opt1": opt1, "solve s": round(secs, 1)}
                name = f"{tag}_{st.split()[0]}"
                try:
                    cache = export("tpu-mlir", plan, network_of(net, plan), reference=str(ref), base_groups=base_groups,
                                   groups_only=(a.space == "free") or None)
                except LgoptError as e:
                    row["note"] = f"export refused: {e}"
                    rows.append(row)
                    continue
                cpath = out / "caches" / f"{name}.layer_group_cache.json"
                write(cache, cpath)
                row["groups (TPU-MLIR op idx, secs)"] = groups_text(cache)
                print(f"== {tag}: compiling {st}", file=sys.stderr, flush=True)
                r = compile_cache(onnx_full, chip_name, cpath, out / "scores" / f"{name}.json")
                row["TPU-MLIR measured"], row["note"] = measured(r)
                j = plan.solver.get("judge")
                if j:
                    row["note"] = (row["note"] + "; " if row["note"] else "") + \
                        (f"judged: {j['compiles']} compiles, {j['rounds']} rounds, stopped: {j['stopped']}; best start "
                         f"{min(t['measured'] or 10**12 for t in j['trials'][:2]):,}")
                if plan.solver.get("kept_reference"):
                    own = plan.solver.get("own_cycles")  # none when the reference was kept unsearched: say why
                    row["note"] = (row["note"] + "; " if row["note"] else "") + (
                        f"kept TPU-MLIR's grouping (lgopt's own predicted {own:,.0f})" if own is not None else
                        f"kept TPU-MLIR's grouping, not searched: {plan.solver['kept_reference']}")
                rows.append(row)
                print(f"   {st}: predicted {row['lgopt predicted']:,}, measured {row['TPU-MLIR measured']}, "
                      f"opt2 {opt2} {row['note']}", file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    if df.empty:
        print("roundtrip: nothing run", file=sys.stderr)
        return 1
    write_report(df, out, a)
    print(df.drop(columns=["groups (TPU-MLIR op idx, secs)"], errors="ignore").to_string(index=False))
    return 0


def write_report(df: pd.DataFrame, out: Path, a: argparse.Namespace) -> None:
    """``roundtrip.csv`` and ``roundtrip.md`` in ``out`` from the rows, with the run's settings ``a``."""
    df["measured / opt2"] = [round(m / o, 3) if pd.notna(m) and o else None
                             for m, o in zip(df["TPU-MLIR measured"], df["opt2"])]
    df["measured / predicted"] = [round(m / p, 3) if pd.notna(m) and pd.notna(p) and p else None
                                  for m, p in zip(df["TPU-MLIR measured"], df["lgopt predicted"])]
    cols = ["model", "chip", "strategy", "lgopt predicted", "TPU-MLIR measured", "opt2", "opt1", "measured / opt2",
            "measured / predicted", "solve s", "groups (TPU-MLIR op idx, secs)", "note"]
    df = df[[c for c in cols if c in df.columns]]
    for c in ("lgopt predicted", "TPU-MLIR measured", "opt2", "opt1"):
        if c in df.columns:
            df[c] = df[c].astype("Int64")
    df.to_csv(out / "roundtrip.csv", index=False)
    md = ["# lgopt groupings compiled by TPU-MLIR 1.30.2", "",
          f"`lgopt predicted`: lgopt's cost model `{a.cost_model}`. `TPU-MLIR measured`: cycles of codegen's simulated "
          "timeline for lgopt's grouping forced into TPU-MLIR (`LOAD_TPU_GROUP`, F16). `opt2`/`opt1`: TPU-MLIR's "
          "own groupings, same model and chip. Made by `python benchmarks/roundtrip.py` "
          f"(`--time-limit {a.time_limit:g} --space {a.space} --cost-model {a.cost_model} --margin {a.margin:g} "
          f"--judge-budget {a.judge_budget} --batch {a.batch}`): "
          "`--space compiler` solves with the opt2 cache as `--reference` (groups in TPU-MLIR's op order and base "
          "groups, its slicing and weight-load rules, no hand-over; the reference's grouping kept unless lgopt's "
          "is predicted `--margin` faster, noted as such), `free` in lgopt's own space, exported as groups "
          "only. With `--judge-budget` > 0, TPU-MLIR measures the candidates of a local search from its own "
          "grouping and lgopt's (`lgopt.tpumlir.judged`) and the fastest it measured is the plan.", "",
          df.to_markdown(index=False, floatfmt="g"), ""]
    (out / "roundtrip.md").write_text("\n".join(md))


if __name__ == "__main__":
    sys.exit(main())

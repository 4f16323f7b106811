"""What TPU-MLIR's own timeline says any grouping can gain: every op's cheapest measured cost, summed.

    python benchmarks/floor.py                       # batch 1, from ../shared/calibration (seconds)
    python benchmarks/floor.py --int8                # and INT8 on one core beside it (benchmarks/timelines.py's data)
    python benchmarks/floor.py --settings            # every setting benchmarks/timelines.py read, several cores too
    PEER_RUN=/path/to/tpu-mlir-run python benchmarks/floor.py --batch 4 [--models M,..] [--chips C,..]
                                                     # also batch 4, by compiling (a few minutes)

``benchmarks/room.py`` bounds the gain with lgopt's model; this bounds it with the compiler's measurements
(:mod:`lgopt.tpumlir.floor` says how, and why it is an empirical floor, not a proof).  Across the 419
calibration groupings the floor of a compute-bound model is within 1-2 % of the op costs in TPU-MLIR's own
grouping, which is why it is useful there.  This script is the driver: it compiles and writes the table.

Batch 1: every compiled grouping in ``../shared/calibration`` (``ops.csv.gz``, ``globals.csv``).  A larger batch
(``--batch N``): the model with its batch set to N (written beside ``$PEER_RUN/models/MODEL.onnx``), TPU-MLIR's
own grouping of it (compiled once by the scoring tool), every distinct batch-N cache the round trips left
(``caches/MODEL_CHIP_bN_*`` in ``benchmarks/roundtrip/runs.tar.xz``, unpacked beside it on first use) and the
calibration's batch-1 caches of the model and chip, as they are and with N times their N slices (they name the
same ops; slice counts that do not fit are refused and skipped), compiled once each with
``score_grouping.sh --keep`` and read from the kept timeline by the scoring tool's reader
(``../shared/tpu-mlir/lg_roundtrip.py``).  Writes ``benchmarks/calibration/floor.csv`` (the rows already in it
that this run does not measure again are kept) and prints the floors over the cases issue 13's 8 % target names.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd
from common import CAL, SCORE, SHARED, write_table
from settings import SETTINGS, setting_key

from lgopt.tpumlir import floor
from lgopt.tpumlir.runs import unpack

ROOT = Path(__file__).resolve().parents[1]
READER = SHARED / "tpu-mlir" / "lg_roundtrip.py"
RUNS = ROOT / "benchmarks" / "roundtrip"
SOURCE = "TPU-MLIR 1.30.2 codegen timeline (compiler_profile_0.txt)"
ROOM = ROOT / "benchmarks" / "calibration" / "room_settings.csv"  # room.py --settings: the model's bound per setting


def compile_kept(onnx: Path, chip: str, cache: Path) -> pd.DataFrame | None:
    """Compile one cache with ``--keep``; its per-op costs, or None when TPU-MLIR refused it."""
    from roundtrip import compile_cache

    with tempfile.TemporaryDirectory(prefix="lgopt-floor-") as tmp:
        score = compile_cache(onnx, chip, cache, Path(tmp) / "score.json", "--keep")
    workdir = Path(score["workdir"]) if score.get("workdir") else None
    try:
        if score.get("status") != "ok" or not score.get("honoured_exactly", True) or workdir is None:
            return None
        return floor.read_run(workdir, score, floor.load_reader(READER)).assign(
            total=int(score["total_cycles"]), n_groups=int(score.get("n_groups_compiled") or 0))
    finally:
        if workdir is not None and workdir.is_dir():
            shutil.rmtree(workdir, ignore_errors=True)


def batch_caches(model: str, chip: str, batch: int, own: Path, tmp: Path) -> list[Path]:
    """The distinct caches to compile (:func:`lgopt.tpumlir.floor.distinct_caches`): ``own``, the round trips'
    caches of that batch (from ``benchmarks/roundtrip/runs.tar.xz``, unpacked) and the calibration's."""
    runs = sorted(unpack(RUNS).glob(f"**/caches/{model}_{chip}_b{batch}_*.layer_group_cache.json"))
    cal = sorted((CAL / "caches" / f"{model}_{chip}").glob("*.layer_group_cache.json"))
    return floor.distinct_caches(own, runs, cal, batch, tmp)


def batch_row(peer: Path, model: str, chip: str, batch: int) -> dict | None:
    """The floor of one model and chip at ``batch``, over every cache :func:`batch_caches` finds that compiles."""
    from roundtrip import with_batch_onnx

    from lgopt.errors import LgoptError
    from lgopt.tpumlir.judge import find_judge

    full = peer / "models" / f"{model}.onnx"
    if not full.exists():
        print(f"  {model} {chip} b{batch}: no {full}, skipped", file=sys.stderr)
        return None
    onnx = with_batch_onnx(full, batch)
    try:
        own = find_judge(onnx, chip, script=SCORE, peer_run=peer).prepare()
    except LgoptError as e:
        print(f"  {model} {chip} b{batch}: {e}, skipped", file=sys.stderr)
        return None
    with tempfile.TemporaryDirectory(prefix="lgopt-floor-") as tmp:
        caches = batch_caches(model, chip, batch, own, Path(tmp))
        costs, own_total, own_groups = [], None, 0
        for i, cache in enumerate(caches):
            c = compile_kept(onnx, chip, cache)
            if c is None:
                continue
            if i == 0:
                own_total, own_groups = int(c.total.iloc[0]), int(c.n_groups.iloc[0])
            costs.append(c.assign(key="opt2" if i == 0 else str(cache)))
    if own_total is None:
        print(f"  {model} {chip} b{batch}: TPU-MLIR's own grouping did not compile, skipped", file=sys.stderr)
        return None
    row = {"model": model, "chip": chip, "batch": batch, "groups": own_groups, "opt2_measured": own_total,
           **floor.floor_of(pd.concat(costs, ignore_index=True), "opt2")}
    print(f"  {model} {chip} b{batch}: {row['groupings']} groupings compiled of {len(caches)}", file=sys.stderr)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=1,
                    help="> 1: also that batch size, by compiling (needs PEER_RUN); the rows in --out this run does "
                         "not measure again are kept")
    ap.add_argument("--models", default=None, help="with --batch: these models (default: UNet, YOLO and, on "
                                                     "BM1688, ResNet-18 and MobileNetV2: issue 13's cases)")
    ap.add_argument("--chips", default="bm1684x,bm1688")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "calibration" / "floor.csv")
    ap.add_argument("--int8", type=Path, nargs="?", const=ROOT / "benchmarks" / "out" / "timelines" / "int8_1core",
                    help="also INT8 on one core beside F16, from benchmarks/timelines.py's folder (default path)")
    ap.add_argument("--int8-out", type=Path, default=ROOT / "benchmarks" / "calibration" / "floor_int8.csv")
    ap.add_argument("--settings", type=Path, nargs="?", const=ROOT / "benchmarks" / "out" / "timelines",
                    help="also every setting benchmarks/timelines.py read (its QUANT_Ncore folders under this path), "
                         "several cores from core 0's timeline, beside one core")
    ap.add_argument("--settings-out", type=Path, default=ROOT / "benchmarks" / "calibration" / "floor_settings.csv")
    a = ap.parse_args(argv)
    if not (CAL / "ops.csv.gz").exists():
        print(f"no calibration data at {CAL}", file=sys.stderr)
        return 2
    if a.batch < 1:
        print(f"--batch must be at least 1, not {a.batch}", file=sys.stderr)
        return 2
    rows = floor.calibration_rows(CAL)
    if a.batch > 1:
        peer = Path(os.environ.get("PEER_RUN", ""))
        if not (peer / "venv" / "bin" / "model_deploy").exists() or not SCORE.exists():
            print("--batch needs PEER_RUN set to a TPU-MLIR 1.30.2 install (../shared/tpu-mlir/install.sh)",
                  file=sys.stderr)
            return 2
        chips = a.chips.split(",")
        cases = ([(m, c) for m in a.models.split(",") for c in chips] if a.models else
                 [(m, c) for c in chips for m in ("resnet18", "mobilenet_v2", "yolov5s_like", "unet_small")
                  if c == "bm1688" or m in ("yolov5s_like", "unet_small")])
        rows += [r for m, c in cases if (r := batch_row(peer, m, c, a.batch)) is not None]
    if a.out.exists():  # what needed the compiler and was not measured again now is kept
        rows = floor.with_kept_rows(rows, pd.read_csv(a.out))
    df = floor.floor_table(rows)
    write_table(df, a.out, f"cycles measured by {SOURCE}")
    n = floor.target_cases(df)
    g = floor.geomean(n.floor_over_opt2)
    print(f"the cases issue 13's 8 % target names ({len(n)}): the measured floor is {g:.3f} of opt2 in geometric "
          f"mean (a grouping saves at most {100 * (1 - g):.1f} %); "
          + ", ".join(f"{r.model} {r.chip} b{r.batch} {r.floor_over_opt2:.3f}" for r in n.itertuples()))
    if a.int8 is not None:
        print(int8_beside_f16(a.int8, df, a.int8_out))
    if a.settings is not None:
        print(settings_floors(a.settings, a.settings_out))
    return 0


def settings_floors(timelines: Path, out: Path) -> str:
    """The batch-1 floors of every setting in ``timelines`` (``benchmarks/timelines.py``'s ``QUANT_Ncore`` folders,
    the shared F16 calibration as ``f16_1core``), the best grouping measured beside each, as a markdown table.
    The rows ``out`` holds of a setting ``timelines`` does not are kept as they are.

    On several cores each core's timeline runs on its own and the total is core 0's end; core 0 runs a part of
    every group and global layer, so its TIU and GDMA sums bound the total as one core's do
    (:mod:`lgopt.tpumlir.floor`), each op at the least core 0 spent on it in any grouping measured, a global
    layer by each engine's own commands (``segments=False``: neither its segment nor its span bounds it there).
    The floor is the joint one (both engines at once) and ``exceeding`` counts the groupings its assumptions fail
    on.  Beside it, where ``benchmarks/room.py --settings`` wrote ``ROOM``, the calibrated model's bound over the
    space TPU-MLIR compiles: op by op, the measured floor knows none of its refusals (a sliced residual block on
    several cores, a one-slice group on core 0 alone), the model's bound knows those lgopt knows and is only as
    good as the model."""
    read = [p for p in sorted(timelines.glob("*_*core")) if (p / "ops.csv.gz").exists()]
    folders = [("f16_1core", CAL), *((p.name, p) for p in read)]
    frames = []
    for name, folder in folders:
        q, cores = name.split("_")
        n = int(cores.removesuffix("core"))
        rows = pd.DataFrame(floor.calibration_rows(folder, segments=n == 1)).assign(quantize=q.upper(), cores=n)
        frames.append(rows.merge(floor.best_measured(folder), on=["model", "chip"], how="left"))
    df = pd.concat(frames, ignore_index=True)
    measured = {setting_key(st) for st in SETTINGS} | {(c, "F16", 1) for c in ("bm1684x", "bm1688")}
    df = df[[k in measured for k in zip(df.chip, df.quantize, df.cores)]]  # not BM1690's 8-core groupings on 1 core
    df["floor_over_opt2"] = df[list(floor.FLOORS)].max(axis=1) / df.opt2_measured
    df["best_over_opt2"] = df.best_measured / df.opt2_measured
    if out.exists():  # a setting whose timelines are not here now keeps its rows (the joint floor: blank if older)
        old = pd.read_csv(out)
        done = set(zip(df.chip, df.quantize, df.cores))
        df = pd.concat([df, old[[k not in done for k in zip(old.chip, old.quantize, old.cores)]]], ignore_index=True)
    df = df.sort_values(["chip", "quantize", "cores", "model"], kind="stable")
    write_table(df[["chip", "quantize", "cores", "model", "groupings", "opt2_measured", *floor.FLOORS, "exceeding",
                    "floor_over_opt2", "best_measured", "best_over_opt2"]], out,
                f"cycles measured by {SOURCE} (several cores: core 0's timeline, whose end is the total)")
    space = pd.read_csv(ROOM) if ROOM.exists() else pd.DataFrame(columns=["chip", "quantize", "cores"])
    lines = ["| chip | quantize | cores | models | floor / opt2, geometric mean (lowest) | best measured / opt2 | "
             "groupings a floor's rows overrule | the model's bound over the compiler's space / opt2 (room.py) |",
             "|---|---|---:|---:|---|---|---:|---|"]
    for (chip, q, n), g in df.groupby(["chip", "quantize", "cores"], sort=False):
        low = g.loc[g.floor_over_opt2.idxmin()]
        b = space[(space.chip == chip) & (space.quantize == q) & (space.cores == n)]
        lines.append(f"| {chip} | {q} | {n} | {len(g)} | {floor.geomean(g.floor_over_opt2):.3f} "
                     f"({low.model} {low.floor_over_opt2:.3f}) | {floor.geomean(g.best_over_opt2):.3f} | "
                     + (f"{int(g.exceeding.sum())} of {int(g.groupings.sum())} |" if g.exceeding.notna().all()
                        else "not read again |")
                     + (f" {floor.geomean(b.bound_over_opt2):.3f} ({len(b)} models) |" if len(b) else " - |"))
    return "\n".join(lines)


def int8_beside_f16(data: Path, f16: pd.DataFrame, out: Path) -> str:
    """The batch-1 floors of INT8 on one core (a calibration-format folder of ``benchmarks/timelines.py``) beside
    F16's, each the joint floor (both engines at once), the TIU and the GDMA one apart beside it
    (``lgopt.tpumlir.floor.calibration_rows``)."""
    if not (data / "ops.csv.gz").exists():
        return f"no INT8 timelines at {data} (python benchmarks/timelines.py)"
    int8 = floor.floor_table(floor.calibration_rows(data))
    f16_rows = floor.floor_table(floor.calibration_rows(CAL))
    both = f16_rows.merge(int8, on=["model", "chip"], how="right", suffixes=("_f16", "_int8"))
    write_table(int8, out, f"cycles measured by {SOURCE}, INT8 on one core")
    lines = ["| model | chip | F16 opt2 | F16 floor / opt2 (TIU, GDMA apart) | INT8 opt2 "
             "| INT8 floor / opt2 (TIU, GDMA apart) |",
             "|---|---|---:|---|---:|---|"]
    def cell(m: float, t: float, d: float, j: float) -> str:
        return "-" if pd.isna(m) else f"{j / m:.3f} ({t / m:.3f}, {d / m:.3f})"

    for r in both.itertuples():
        f16_opt2 = "-" if pd.isna(r.opt2_measured_f16) else f"{int(r.opt2_measured_f16):,}"
        f16_cell = cell(r.opt2_measured_f16, r.floor_f16, r.floor_gdma_f16, r.floor_joint_f16)
        int8_cell = cell(r.opt2_measured_int8, r.floor_int8, r.floor_gdma_int8, r.floor_joint_int8)
        int8_opt2 = f"{int(r.opt2_measured_int8):,}"
        lines.append(f"| {r.model} | {r.chip} | {f16_opt2} | {f16_cell} | {int8_opt2} | {int8_cell} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())

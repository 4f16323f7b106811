"""Calibration data for the settings beyond F16 on one core, made the way ``shared/calibration`` was (issue 34).

Every grouping ``benchmarks/settings.py`` compiled in a one-core setting (INT8 on BM1684X and BM1688 by default) is
compiled again with the scoring tool's ``--keep`` and its timeline read op by op (:mod:`lgopt.tpumlir.timeline`);
the kept folder is removed at once (a bmodel each).  Written: one folder per quantisation, every chip's rows in
it, in the calibration format (``totals.csv``, ``groups.csv``, ``globals.csv``, ``ops.csv.gz``, ``model_ops.csv``,
``onnx/``, ``caches/``), which ``lgopt fit`` reads (its ``totals.csv`` says INT8: the fit prices the models in
INT8).  Resumable: each scoring's rows are kept as they are made.

    python benchmarks/timelines.py                     # needs PEER_RUN (TPU-MLIR 1.30.2) and settings.py's output
    python benchmarks/timelines.py --assemble-only     # the folder from the rows already made
    lgopt fit benchmarks/out/timelines/int8_1core -o lgopt/cost/models/int8 --chips bm1684x,bm1688 \
        --holdout mobilenet_v3_small,resnet50,unet_small --name tpu-mlir-1.30-int8   # the shipped INT8 constants

On several cores each core's timeline is simulated on its own (:mod:`lgopt.tpumlir.timeline`) and the rows are
core 0's, which runs a part of every group and global layer and whose end is the compile's total: what
``benchmarks/floor.py --settings`` needs.  The fit reads one-core folders only (core 0 is not the whole compile).
A chip measured only on several cores (BM1690: 8) is read on one core from the groupings of its several-core
scorings.  Each quantisation's and core count's folder (``int8_1core``, ``int8_2core``...) is written from every
chip's rows made so far, the settings listed compiled first (:func:`made_settings`: a run for one chip once left
the folder with that chip's rows alone, and the next fit without the others).  The shipped data:

    python benchmarks/timelines.py --groupings-cores 8 \
        --settings bm1684x:INT8:1,bm1688:INT8:1,bm1684:INT8:1,bm1690:INT8:1,bm1690:F16:1
    lgopt fit benchmarks/out/timelines/f16_1core -o lgopt/cost/models --chips bm1690 \
        --holdout mobilenet_v3_small,resnet50,unet_small                  # BM1690's F16 constants
    python benchmarks/timelines.py --settings bm1688:INT8:2                 # core 0 on several cores: the floors
    python benchmarks/timelines.py --settings bm1690:INT8:8
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.settings import CAL, SCORE, name_of, setting_key, setting_of  # noqa: E402
from lgopt.tpumlir.judge import find_judge  # noqa: E402
from lgopt.tpumlir.timeline import read_timeline  # noqa: E402

SETTINGS = ("bm1684x:INT8:1", "bm1688:INT8:1")
OUT = ROOT / "benchmarks" / "out"


def source_name(settings_out: Path, setting: str, cores: int | None) -> str:
    """The settings.py folder suffix whose groupings ``setting`` compiles: its own, else (a chip settings.py
    measured on several cores only) the same chip and quantisation's on ``cores`` cores."""
    if cores is None or any(settings_out.glob(f"*_{name_of(setting)}")):
        return name_of(setting)
    chip, q, _ = setting_key(setting)
    return name_of(f"{chip}:{q}:{cores}")


def make_parts(peer: Path, folder: Path, setting: str, parts: Path) -> None:
    """Each compiled scoring of one model (``folder``: settings.py's, in ``setting`` or the same chip on several
    cores), compiled again in ``setting`` kept and read.  A scoring from another core count is checked against
    nothing but its own compile (its total is that count's)."""
    model, source = setting_of(folder)
    chip, q, n = setting_key(setting)
    same = setting_key(source) == (chip, q, n)
    judge = find_judge(peer / "models" / f"{model}.onnx", chip, script=SCORE, peer_run=peer, quantize=q, cores=n)
    parts.mkdir(parents=True, exist_ok=True)
    for score in sorted((folder / "scores").glob("*.json")):
        variant, first = score.stem, json.loads(score.read_text())
        done = parts / f"{model}__{variant}.json"
        if first.get("status") != "ok" or done.exists():
            continue
        tmp = parts / f"{model}__{variant}.score.json"
        cache = json.loads((folder / "caches" / f"{variant}.layer_group_cache.json").read_text())
        m = judge.measure(cache, keep=tmp, keep_run=True)
        r = json.loads(tmp.read_text()) if tmp.exists() else {}
        work = Path(r.get("workdir", "")) if r.get("workdir") else None
        try:
            if m.status != "ok" or work is None or (same and r.get("total_cycles") != first.get("total_cycles")):
                why = f"{m.status}, {r.get('total_cycles')} cycles against {first.get('total_cycles')} first"
                print(f"  {model} {variant}: not read ({why})", file=sys.stderr)
                continue
            t = read_timeline(work, r, {"model": model, "chip": chip, "variant": variant}, core=0, cores=n)
            t.ops.to_csv(parts / f"{model}__{variant}.ops.csv.gz", index=False)
            t.glob.to_csv(parts / f"{model}__{variant}.globals.csv", index=False)
            done.write_text(json.dumps({"score": r, "uneven": list(t.uneven), "model_cache": str(judge.model_cache)}))
            print(f"  {model} {variant}: {len(t.ops)} rows, {len(t.uneven)} uneven", file=sys.stderr)
        finally:
            if work is not None and work.is_dir():
                shutil.rmtree(work)
            tmp.unlink(missing_ok=True)


def version_of(text: str | None) -> str | None:
    """The version in the scoring tool's ``tpu_mlir`` line (``... for TPU v1.30.2-gecc9dd6-20260831``), as the shared
    calibration records it."""
    m = re.search(r"v\d[\w.-]*", text or "")
    return m.group(0) if m else text


def assemble(settings_out: Path, settings: list[str], out: Path, dest: Path, onnx: Path,
             cores: int | None = None) -> Path:
    """The calibration-format folder of ``settings`` (one quantisation and core count, each chip's) from their
    parts; ``cores``: the groupings came from settings.py's folders of that many cores."""
    meta_of: dict[Path, dict[str, dict[str, str]]] = {}
    totals: list[dict[str, object]] = []
    groups: list[dict[str, object]] = []
    ops, glob, mops = [], [], []
    for setting, done in ((st, f) for st in settings for f in sorted((out / "parts" / name_of(st)).glob("*__*.json"))):
        chip, q, n = setting_key(setting)
        parts = done.parent
        if done.name.endswith(".score.json"):
            continue
        model, variant = done.stem.split("__")
        d = json.loads(done.read_text())
        r = d["score"]
        folder = settings_out / f"{model}_{source_name(settings_out, setting, cores)}"
        if folder not in meta_of:  # settings.py writes it when a model's scorings are done
            v = folder / "variants.json"
            meta_of[folder] = json.loads(v.read_text()) if v.exists() else {}
        kind = meta_of[folder].get(variant, {}).get("kind", variant.split("_")[-1])
        cache = dest / "caches" / f"{model}_{chip}" / f"{variant}.layer_group_cache.json"
        cache.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / "caches" / f"{variant}.layer_group_cache.json", cache)
        totals.append({"model": model, "chip": chip, "variant": variant, "kind": kind, "status": "ok",
                       "total_cycles": r["total_cycles"], "tpu_mlir": version_of(r.get("tpu_mlir")), "quantize": q,
                       "cores": n,
                       "uneven_ops": len(d["uneven"]), "cache_file": str(cache.relative_to(dest))})
        for pos, g in enumerate(r.get("groups", ())):
            secs = g.get("compiled_secs") or [1] * 5
            groups.append({"model": model, "chip": chip, "variant": variant, "group_pos": pos,
                           "func_start_idx": g.get("func_start_idx"), "func_end_idx": g.get("func_end_idx"),
                           "n_slices": secs[0] * secs[3] * secs[4], "comp_nsecs": secs[0], "comp_hsecs": secs[3],
                           "cycles": g.get("cycles")})
        ops.append(pd.read_csv(parts / f"{model}__{variant}.ops.csv.gz"))
        glob.append(pd.read_csv(parts / f"{model}__{variant}.globals.csv"))
        if not any(m["model"] == model and m["chip"] == chip for m in mops):
            listed = json.loads((Path(d["model_cache"]) / "ops.json").read_text())
            mops += [{"model": model, "chip": chip, "subfunc": sub, "idx": o["idx"], "name": o["name"],
                      "type": o["type"], "onnx_outputs": ""} for sub, v in listed.items() for o in v]
    dest.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(totals).to_csv(dest / "totals.csv", index=False)
    pd.DataFrame(groups).to_csv(dest / "groups.csv", index=False)
    pd.DataFrame(mops).to_csv(dest / "model_ops.csv", index=False)
    pd.concat(glob, ignore_index=True).to_csv(dest / "globals.csv", index=False)
    pd.concat(ops, ignore_index=True).to_csv(dest / "ops.csv.gz", index=False)
    (dest / "onnx").mkdir(exist_ok=True)
    for m in sorted({t["model"] for t in totals}):
        link = dest / "onnx" / f"{m}.weightless.onnx"
        if not link.exists():
            shutil.copyfile(onnx / f"{m}.weightless.onnx", link)
    return dest


def made_settings(parts: Path, quantize: str, cores: int) -> list[str]:
    """The settings of one quantisation and core count whose rows are made (``parts/bm1688_int8_1core``...).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> for n in ("bm1688_int8_1core", "bm1690_int8_1core", "bm1688_int8_2core", "bm1688_f16_2core"):
    ...     (d / n).mkdir()
    >>> made_settings(d, "INT8", 1), made_settings(d, "F16", 2)
    (['bm1688:INT8:1', 'bm1690:INT8:1'], ['bm1688:F16:2'])
    """
    suffix = f"_{quantize.lower()}_{cores}core"
    return [f"{p.name.removesuffix(suffix)}:{quantize.upper()}:{cores}"
            for p in sorted(parts.glob(f"*{suffix}")) if p.is_dir()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", default=",".join(SETTINGS), help="CHIP:QUANTIZE:CORES, comma-separated")
    ap.add_argument("--models", default="", help="comma-separated (default: every model settings.py measured)")
    ap.add_argument("--settings-out", type=Path, default=OUT / "settings", help="benchmarks/settings.py's output")
    ap.add_argument("--out", type=Path, default=OUT / "timelines")
    ap.add_argument("--peer-run", type=Path, help="TPU-MLIR's install (default $PEER_RUN)")
    ap.add_argument("--groupings-cores", type=int, help="compile the groupings settings.py scored on this many "
                    "cores (a chip it measured on several cores only)")
    ap.add_argument("--assemble-only", action="store_true", help="no compile: the folders from the rows made")
    ap.add_argument("--calibration", type=Path, default=CAL,
                    help="the shared calibration folder (its onnx/ holds the weightless models)")
    a = ap.parse_args(argv)
    peer = a.peer_run or Path(os.environ.get("PEER_RUN", ""))
    settings = a.settings.split(",")
    for setting in settings:
        if not a.assemble_only:
            for folder in sorted(a.settings_out.glob(f"*_{source_name(a.settings_out, setting, a.groupings_cores)}")):
                if (folder / "scores").is_dir() and (not a.models or setting_of(folder)[0] in a.models.split(",")):
                    make_parts(peer, folder, setting, a.out / "parts" / name_of(setting))
    for q, n in sorted({setting_key(s)[1:] for s in settings}):
        same = [s for s in settings if setting_key(s)[1:] == (q, n)]
        same += [s for s in made_settings(a.out / "parts", q, n) if s not in same]
        dest = assemble(a.settings_out, same, a.out, a.out / f"{q.lower()}_{n}core", a.calibration / "onnx",
                        a.groupings_cores)
        print(f"{', '.join(same)}: {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What TPU-MLIR's own timeline says any grouping can gain: every op's cheapest measured cost, summed.

    python benchmarks/floor.py                       # batch 1, from ../shared/calibration (seconds)
    PEER_RUN=/path/to/tpu-mlir-run python benchmarks/floor.py --batch 4 [--models M,..] [--chips C,..]
                                                     # also batch 4, by compiling (a few minutes)

``benchmarks/room.py`` bounds the gain with lgopt's model; this bounds it with the compiler's measurements,
so it does not depend on the model being right.  In a compiled grouping every op is either local, in a
group, where its compute is TIU commands that run one at a time, or a global layer, which has the timeline to
itself (a group's and a global op's segments partition the total).  So a grouping's total is at least the sum,
over its ops, of the op's TIU cycles (local) or its segment (global).  Each op's *floor* is the least that sum
term was in any grouping TPU-MLIR compiled, and the model's floor is the sum of its ops' floors: no grouping in
the measured set, and none that does not make some op cheaper than every measured grouping did, beats it.

It is an empirical floor, not a proof: a grouping never measured could run an op cheaper (fewer H slices
recompute fewer halo rows, a layout with more lanes), and a little of a group's work can spill into its
neighbour's segment (``cycles_span``).  Across the 419 calibration groupings the floor of a compute-bound model
is within 1-2 % of the op costs in TPU-MLIR's own grouping, which is why it is useful there.

Batch 1: every compiled grouping in ``../shared/calibration`` (``ops.csv.gz``, ``globals.csv``).  A larger batch
(``--batch N``): the model with its batch set to N (written beside ``$PEER_RUN/models/MODEL.onnx``), TPU-MLIR's
own grouping of it (compiled once by the scoring tool), every distinct batch-N cache the round trips left
(``benchmarks/roundtrip/**/caches/MODEL_CHIP_bN_*``) and the calibration's batch-1 caches of the model and chip,
as they are and with N times their N slices (they name the same ops; slice counts that do not fit are refused
and skipped), compiled once each with ``score_grouping.sh --keep`` and read from the kept timeline.  Writes
``benchmarks/calibration/floor.csv`` (the rows already in it that this run does not measure again are kept)
and prints the floors over the cases issue 13's 8 % target names.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

from lgopt.io.tpumlir_judge import cache_digest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
CAL = SHARED / "calibration"
SCORE = SHARED / "tpu-mlir" / "score_grouping.sh"
SOURCE = "TPU-MLIR 1.30.2 codegen timeline (compiler_profile_0.txt)"
FREE_WHEN_GLOBAL = ("tpu.Reshape", "tpu.Slice", "tpu.Buffer", "tpu.Concat")


def named(df: pd.DataFrame) -> pd.DataFrame:
    """The cases issue 13's 8 % target names: opt2 makes more than one group, and BM1688 at batch 4, YOLO or UNet."""
    multi = df[df.groups > 1]
    return multi[((multi.chip == "bm1688") & (multi.batch == 4)) | multi.model.isin(["yolov5s_like", "unet_small"])]


def geomean(xs: pd.Series) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if len(xs) else 1.0


def write_table(df: pd.DataFrame, out: Path, source: str) -> None:
    """Write ``df`` to ``out`` and print it, headed by where its numbers come from."""
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    print(f"{source}; written to {out}")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}" if abs(v) < 10 else f"{v:,.0f}"))


def op_costs(local_tiu: pd.DataFrame, global_wall: pd.DataFrame) -> pd.DataFrame:
    """One row per (grouping, op): its TIU cycles when local, its segment when global (``key``, ``op``, ``cycles``).

    A global op with no commands has no segment.  For a view (reshape, slice, buffer) or a concat whose inputs
    were written in place that is real: it costs 0.  For any other type the timeline's attribution missed it,
    and the row is no measurement.
    """
    free = global_wall.type.isin(FREE_WHEN_GLOBAL)
    g = global_wall.assign(cycles=global_wall.cycles.where(~(free & global_wall.cycles.isna()), 0)).dropna(
        subset=["cycles"])
    return pd.concat([local_tiu.assign(kind="local"), g.drop(columns="type").assign(kind="global")],
                     ignore_index=True)


def floor_of(costs: pd.DataFrame, own: str) -> dict:
    """The floor over every grouping in ``costs`` of the ops of grouping ``own`` (TPU-MLIR's opt2), and ``own``'s sum.

    Only ops that ``own`` has count: a grouping with an op more (a cast TPU-MLIR inserts in one grouping and not
    another) must not raise the floor.
    """
    mine = costs[costs.key == own]
    ops = set(mine.op)
    least = costs[costs.op.isin(ops)].groupby("op").cycles.min()
    return {"groupings": costs.key.nunique(), "opt2_op_sum": int(mine.groupby("op").cycles.sum().sum()),
            "floor": int(least.sum())}


def calibration_rows() -> list[dict]:
    """Batch-1 floors from the calibration's compiled groupings."""
    tot = pd.read_csv(CAL / "totals.csv")
    ok = tot[tot.status == "ok"][["model", "chip", "variant"]]
    ops = pd.read_csv(CAL / "ops.csv.gz").merge(ok, on=["model", "chip", "variant"])
    loc = (ops[(ops.engine == "TIU") & (ops.group_pos >= 0)].groupby(["model", "chip", "variant", "op_name"])
           .cycles.sum().reset_index())
    glob = pd.read_csv(CAL / "globals.csv").merge(ok, on=["model", "chip", "variant"])
    glob = glob.rename(columns={"variant": "key", "name": "op"})[["model", "chip", "key", "op", "type", "cycles"]]
    costs = op_costs(loc.rename(columns={"variant": "key", "op_name": "op"}), glob)
    groups = pd.read_csv(CAL / "groups.csv")
    rows = []
    for (model, chip), c in costs.groupby(["model", "chip"]):
        o2 = tot[(tot.model == model) & (tot.chip == chip) & (tot.variant == "opt2")]
        if o2.empty or o2.status.iloc[0] != "ok":
            continue
        n_groups = int(((groups.model == model) & (groups.chip == chip) & (groups.variant == "opt2")).sum())
        rows.append({"model": model, "chip": chip, "batch": 1, "groups": n_groups,
                     "opt2_measured": int(o2.total_cycles.iloc[0]), **floor_of(c, "opt2")})
    return rows


# ------------------------------------------------------------------ other batch sizes: compile, read the timeline
def read_run(workdir: Path, score: dict) -> pd.DataFrame:
    """Per-op costs of one kept compile: TIU cycles of each local op, the segment of each global op."""
    if str(SHARED / "tpu-mlir") not in sys.path:
        sys.path.insert(0, str(SHARED / "tpu-mlir"))
    import lg_roundtrip  # noqa: PLC0415  (the scoring tool's reader, plain python)

    final = next(workdir.glob("*_final.mlir"))
    groups, _ = lg_roundtrip.read_final(str(final))
    name_of = {op["line"]: op["name"] for g in groups for op in g["ops"]}
    cmds, _, _ = lg_roundtrip.read_profile(str(workdir / "compiler_profile_0.txt"))
    tiu: dict[str, int] = {}
    for line, start, end, kind, _optype in cmds:
        if not kind.startswith("GDMA") and line in name_of:
            tiu[name_of[line]] = tiu.get(name_of[line], 0) + end - start + 1
    rows = [{"op": n, "cycles": c} for n, c in tiu.items()]
    loc = pd.DataFrame(rows, columns=["op", "cycles"])
    glob = pd.DataFrame([{"op": g["name"], "type": g.get("type"), "cycles": g.get("cycles")}
                         for g in score.get("global_ops", ())], columns=["op", "type", "cycles"])
    return op_costs(loc, glob)


def compile_kept(onnx: Path, chip: str, cache: Path) -> pd.DataFrame | None:
    """Compile one cache with ``--keep``; its per-op costs, or None when TPU-MLIR refused it."""
    from roundtrip import compile_cache

    with tempfile.TemporaryDirectory(prefix="lgopt-floor-") as tmp:
        score = compile_cache(onnx, chip, cache, Path(tmp) / "score.json", "--keep")
    workdir = Path(score["workdir"]) if score.get("workdir") else None
    try:
        if score.get("status") != "ok" or not score.get("honoured_exactly", True) or workdir is None:
            return None
        return read_run(workdir, score).assign(total=int(score["total_cycles"]),
                                               n_groups=int(score.get("n_groups_compiled") or 0))
    finally:
        if workdir is not None and workdir.is_dir():
            shutil.rmtree(workdir, ignore_errors=True)


def n_sliced(cache: dict, n: int) -> dict:
    """``cache`` with every forced group's N slice count multiplied by ``n``: a batch-1 grouping at batch ``n``,
    each slice as large as before."""
    out = json.loads(json.dumps(cache))
    for key, sub in out.items():
        if key.startswith("subfunc_"):
            for g in sub.get("GroupLayer", ()):
                if any(g.get("shape_secs", ())):
                    g["shape_secs"][0] *= n
    return out


def batch_caches(model: str, chip: str, batch: int, own: Path, tmp: Path) -> list[Path]:
    """Distinct caches to compile at ``batch``: TPU-MLIR's own (``own``) first, the round trips' caches of that
    batch, then the calibration's batch-1 groupings of the model and chip as they are and with ``batch`` times
    their N slices (written to ``tmp``)."""
    rt = sorted(ROOT.glob(f"benchmarks/roundtrip/**/caches/{model}_{chip}_b{batch}_*.layer_group_cache.json"))
    cal = sorted((CAL / "caches" / f"{model}_{chip}").glob("*.layer_group_cache.json"))
    for p in list(cal):
        q = tmp / f"{p.name.split('.')[0]}_n{batch}.layer_group_cache.json"
        q.write_text(json.dumps(n_sliced(json.loads(p.read_text()), batch)))
        cal.append(q)
    seen, out = set(), []
    for p in [own, *rt, *cal]:
        digest = cache_digest(json.loads(p.read_text()))
        if digest not in seen:
            seen.add(digest)
            out.append(p)
    return out


def batch_row(peer: Path, model: str, chip: str, batch: int) -> dict | None:
    """The floor of one model and chip at ``batch``, over every cache :func:`batch_caches` finds that compiles."""
    from roundtrip import with_batch_onnx

    from lgopt.errors import LgoptError
    from lgopt.io.tpumlir_judge import find_judge

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
           **floor_of(pd.concat(costs, ignore_index=True), "opt2")}
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
    a = ap.parse_args(argv)
    if not (CAL / "ops.csv.gz").exists():
        print(f"no calibration data at {CAL}", file=sys.stderr)
        return 2
    if a.batch < 1:
        print(f"--batch must be at least 1, not {a.batch}", file=sys.stderr)
        return 2
    rows = calibration_rows()
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
        done = {(r["model"], r["chip"], r["batch"]) for r in rows}
        rows += [r for r in pd.read_csv(a.out)[list(rows[0])].to_dict("records")
                 if r["batch"] != 1 and (r["model"], r["chip"], r["batch"]) not in done]
    df = pd.DataFrame(rows).sort_values(["batch", "model", "chip"], kind="stable")
    df["floor_over_opt2"] = df.floor / df.opt2_measured
    df["opt2_ops_over_total"] = df.opt2_op_sum / df.opt2_measured
    write_table(df, a.out, f"cycles measured by {SOURCE}")
    n = named(df)
    print(f"the cases issue 13's 8 % target names ({len(n)}): the measured floor is {geomean(n.floor_over_opt2):.3f} "
          f"of opt2 in geometric mean (a grouping saves at most {100 * (1 - geomean(n.floor_over_opt2)):.1f} %); "
          + ", ".join(f"{r.model} {r.chip} b{r.batch} {r.floor_over_opt2:.3f}" for r in n.itertuples()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""INT8 and several cores measured (issue 34): TPU-MLIR's own groupings and variants of them, per setting.

    python benchmarks/settings.py [--settings bm1688:INT8:2,...] [--models resnet18,...] [--limit 20]
        [--out benchmarks/out/settings] [--peer-run DIR] [--summary-only]

A *setting* is a chip, a quantisation and a core count (``bm1688:INT8:2``: ``model_deploy --chip bm1688
--quantize INT8 --num_core 2``).  For each model of ``$PEER_RUN/models`` (the shared calibration models, with
weights) and setting, the scoring tool (``../shared/tpu-mlir/score_grouping.sh``; INT8 calibrated on two random
inputs) measures on codegen's timeline:

- TPU-MLIR's own groupings: ``opt2`` (its default), and ``opt1`` and ``opt3`` (``model_deploy --opt N``, its
  cache then forced back, so every number comes from the same forced compile);
- up to ``--limit`` variants of opt2 (:mod:`lgopt.tpumlir.variants`: a group cut, other slice counts including
  H = the core count, neighbours merged, random runs), the way the shared F16 calibration was drawn.

Everything lands in ``OUT/MODEL_SETTING/`` (``caches/NAME.layer_group_cache.json``, ``scores/NAME.json``: the
scoring tool's whole result, per core included; after a judged round trip ``judge.json``, every grouping the
judge compiled, predicted and measured) and is resumable: a scoring already there is not redone.
``OUT/totals.csv`` has one row per scoring; the summary goes to ``benchmarks/results/settings.md``.  A refused
variant (``lg_failed``, also when TPU-MLIR exits 0 after a failed allocation) is a label of infeasibility,
kept like the compiled ones.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
from common import CAL, OUT, RESULTS, SCORE, write_section

from lgopt.errors import LgoptError
from lgopt.tpumlir.compiler import deploy, find_toolchain, front_end
from lgopt.tpumlir.export import read_base_groups
from lgopt.tpumlir.floor import geomean
from lgopt.tpumlir.judge import find_judge
from lgopt.tpumlir.variants import draw

SETTINGS = ("bm1684x:INT8:1", "bm1688:INT8:1", "bm1688:INT8:2", "bm1688:F16:2", "bm1690:F16:8", "bm1690:INT8:8",
            "bm1684:INT8:1")
MODELS = ("resnet18", "mobilenet_v2", "yolov5s_like", "unet_small", "resnet50", "mnasnet1_0", "mobilenet_v3_small",
          "shufflenet_v2_x1_0", "vgg16", "convnext_tiny", "vit_b_16")
SOURCE = "TPU-MLIR 1.30.2 codegen timeline (API_END total_cycle; per group: core 0's profile), measured"


def setting_key(text: str) -> tuple[str, str, int]:
    chip, q, n = text.split(":")
    return chip, q.upper(), int(n)


def name_of(setting: str) -> str:
    """A setting's folder suffix: ``bm1688_int8_2core``."""
    chip, q, n = setting_key(setting)
    return f"{chip}_{q.lower()}_{n}core"


def folder_of(out: Path, model: str, setting: str) -> Path:
    """Where one model's scorings in one setting go: ``OUT/resnet18_bm1688_int8_2core``."""
    return out / f"{model}_{name_of(setting)}"


def setting_of(folder: Path) -> tuple[str, str]:
    """The model and setting (``bm1688:INT8:2``) of a folder :func:`folder_of` named."""
    model, rest = folder.name.split("_bm", 1)
    chip, q, n = f"bm{rest}".rsplit("_", 2)
    return model, f"{chip}:{q.upper()}:{n.removesuffix('core')}"


def own_at_opt(judge: Any, opt: int, tmp: Path) -> dict[str, Any] | None:
    """TPU-MLIR's own cache at ``--opt opt``, or None: a front end of its own in ``tmp`` (the scoring tool's model
    cache is only read: a compile beside it would write through its files) and the scoring tool's INT8 table."""
    tc = find_toolchain(judge.peer_run / "venv")
    mlir = front_end(tc, judge.onnx, judge.onnx.stem, tmp / "front")
    table = None
    for t in sorted(judge.model_cache.glob("*_cali_table"))[:1]:
        table = tmp / "front" / t.name
        shutil.copyfile(t, table)
    c = deploy(tc, mlir, judge.chip, judge.quantize, judge.cores, table, tmp / f"opt{opt}", opt=opt)
    if c.cache is None:
        return None
    return json.loads(c.cache.read_text())


def caches_of(judge: Any, own: Path, folder: Path, limit: int) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """Every cache to score for one model and setting: name -> (kind, description, cache)."""
    out: dict[str, tuple[str, str, dict[str, Any]]] = {}
    own_cache = json.loads(own.read_text())
    out["opt2"] = ("opt2", "TPU-MLIR's own grouping (model_deploy, its default --opt 2)", own_cache)
    for opt in (1, 3):
        saved = folder / "caches" / f"opt{opt}.layer_group_cache.json"
        if not saved.exists() and not (folder / f"opt{opt}.refused").exists():
            with tempfile.TemporaryDirectory(prefix="lgopt-settings-") as tmp:
                c = own_at_opt(judge, opt, Path(tmp))
            if c is None:
                (folder / f"opt{opt}.refused").write_text("model_deploy wrote no layer-group cache\n")
            else:
                saved.write_text(json.dumps(c, indent=1))
        if saved.exists():
            out[f"opt{opt}"] = (f"opt{opt}", f"TPU-MLIR's own grouping at --opt {opt}", json.loads(saved.read_text()))
    ops_json = json.loads((judge.model_cache / "ops.json").read_text())
    ops = {sub: [o["name"] for o in sorted(v, key=lambda o: o["idx"])] for sub, v in ops_json.items()}
    base = judge.base_groups()
    for v in draw(own_cache, ops, read_base_groups(base) if base else {}, cores=judge.cores, limit=limit):
        out[v.name] = (v.kind, v.description, v.cache)
    return out


def run_one(peer: Path, model: str, setting: str, out: Path, limit: int) -> None:
    chip, q, n = setting_key(setting)
    folder = folder_of(out, model, setting)
    (folder / "caches").mkdir(parents=True, exist_ok=True)
    (folder / "scores").mkdir(exist_ok=True)
    judge = find_judge(peer / "models" / f"{model}.onnx", chip, script=SCORE, peer_run=peer, quantize=q, cores=n)
    try:
        own = judge.prepare()
    except LgoptError as e:
        (folder / "refused.txt").write_text(str(e) + "\n")
        print(f"  {model} {setting}: {e}", file=sys.stderr)
        return
    todo = caches_of(judge, own, folder, limit)
    meta = {}
    for name, (kind, why, cache) in todo.items():
        meta[name] = {"kind": kind, "description": why}
        score = folder / "scores" / f"{name}.json"
        if score.exists():
            continue
        (folder / "caches" / f"{name}.layer_group_cache.json").write_text(json.dumps(cache, indent=1))
        m = judge.measure(cache, keep=score)
        if not score.exists():
            score.write_text(json.dumps({"status": m.status, "lg_error": m.error}))
        print(f"  {model} {setting} {name}: {m.status} {m.total_cycles or ''}", file=sys.stderr)
    (folder / "variants.json").write_text(json.dumps(meta, indent=1))


def totals(out: Path) -> pd.DataFrame:
    """One row per scoring found under ``out``."""
    rows = []
    for folder in sorted(p for p in out.iterdir() if (p / "variants.json").exists()):
        model, setting = setting_of(folder)
        chip, q, n = setting_key(setting)
        meta = json.loads((folder / "variants.json").read_text())
        for name, info in meta.items():
            f = folder / "scores" / f"{name}.json"
            if not f.exists():
                continue
            r = json.loads(f.read_text())
            per_core = (r.get("profiles") or {}).get("per_core") or []
            rows.append({"model": model, "chip": chip, "quantize": q, "cores": n,
                         "variant": name, "kind": info["kind"], "description": info["description"],
                         "status": r.get("status"), "honoured": bool(r.get("honoured_exactly", False)),
                         "total_cycles": r.get("total_cycles") if r.get("status") == "ok" else None,
                         "groups": r.get("n_groups_compiled"),
                         "tiu_busy_per_core": ";".join(str(c.get("bdc_busy_cycles")) for c in per_core),
                         "gdma_busy_per_core": ";".join(str(c.get("gdma_busy_cycles")) for c in per_core),
                         "cache_file": str((folder / "caches" / f"{name}.layer_group_cache.json").relative_to(out))})
    return pd.DataFrame(rows)


def read_rows(df: pd.DataFrame, out: Path, cal: Path) -> pd.DataFrame:
    """Every scoring read into lgopt (``lgopt.tpumlir.grouping.score``, exact) on its chip, dtype and cores, priced
    by the default cost model for that chip and dtype: built or not (why), verified, predicted cycles."""
    from dataclasses import replace

    from lgopt.cost.registry import default_cost_model
    from lgopt.hw.chip import get_chip
    from lgopt.io.problem import load_model
    from lgopt.report.verdict import verify
    from lgopt.tpumlir.grouping import score

    nets: dict[tuple[str, str], Any] = {}
    rows = []
    for r in df.itertuples():
        dtype = "int8" if r.quantize == "INT8" else "f16"
        key = (r.model, dtype)
        if key not in nets:
            nets[key] = load_model(str(cal / "onnx" / f"{r.model}.weightless.onnx"), dtype=dtype)
        net = nets[key]
        chip = get_chip(r.chip, {"used_cores": r.cores})
        chip = replace(chip, cost_model=default_cost_model(chip, dtype))
        row = {"model": r.model, "chip": r.chip, "quantize": r.quantize, "cores": r.cores, "variant": r.variant,
               "cost_model": chip.cost_model}
        try:
            plan, _ = score(net, chip, str(out / r.cache_file))
            bad = verify(net, plan)
            row.update(read="ok" if not bad else "verify", why=str(bad[0]) if bad else "",
                       predicted=int(plan.cost["cycles"]))
        except LgoptError as e:
            row.update(read="infeasible", why=" ".join(str(e).split())[:200], predicted=None)
        rows.append(row)
    return pd.DataFrame(rows)


HELD_OUT = ("mobilenet_v3_small", "resnet50", "unet_small")  # held out of every fit (lgopt/cost/models, models/int8)


def one_core_globals(cal: Path, chip: str, q: str) -> pd.DataFrame:
    """Every global op's cycles on one core of ``chip`` in ``q`` (model, name, cycles, out_shape): the shared
    calibration's F16 timelines and ``benchmarks/timelines.py``'s (INT8, and BM1690 compiled on one core)."""
    files = [OUT / "timelines" / f"{q.lower()}_1core" / "globals.csv"] + ([cal / "globals.csv"] if q == "F16" else [])
    parts = [pd.read_csv(f) for f in files if f.exists()]
    g = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["model", "chip", "name", "cycles", "out_shape"])
    return g[g.chip == chip][["model", "name", "cycles", "out_shape"]]


def core_zero_of(out: Path, setting: str) -> pd.DataFrame:
    """Every global op core 0 ran in ``setting``'s compiled scorings (model, name, type, parallel, cycles)."""
    from lgopt.tpumlir.corefit import core_zero_globals

    rows = []
    for f in sorted(out.glob(f"*_{name_of(setting)}/scores/*.json")):
        score = json.loads(f.read_text())
        if score.get("status") == "ok":
            model = setting_of(f.parent.parent)[0]
            rows += [(model, *g) for g in core_zero_globals(score)]
    return pd.DataFrame(rows, columns=["model", "name", "type", "parallel", "cycles"])


def fit_file(setting: str, flag: str) -> tuple[Any, Path]:
    """The fitted model whose one-core constants cover ``setting``'s chip and dtype (F16's or INT8's) and its
    ``CHIP.json``, where the several-core terms and their search's check are written; exits naming ``flag`` when
    the setting is on one core or no such model was fitted."""
    from lgopt.cost.fitted import CALIBRATION_DIR
    from lgopt.cost.registry import FITTED, FITTED_INT8

    chip_name, q, n = setting_key(setting)
    base = next((m for m in (FITTED, FITTED_INT8) if m.covers(chip_name, q.lower())), None)
    if base is None or n < 2:
        raise SystemExit(f"{flag} {setting}: a setting on several cores whose one-core constants were fitted")
    return base, (Path(base.directory) if base.directory else CALIBRATION_DIR) / f"{chip_name}.json"


def write_fit(path: Path, doc: dict[str, Any]) -> None:
    """Write a fitted model's file; the cost models read it again (their constants are cached)."""
    from lgopt.cost.fitted import forget_constants

    path.write_text(json.dumps(doc, indent=1) + "\n")
    forget_constants()


def fit_cores_of(df: pd.DataFrame, out: Path, cal: Path, setting: str, command: str) -> str:
    """The several-core terms of the fitted model of ``setting``'s chip and dtype (its one-core constants: F16's,
    or INT8's), written into that model's ``CHIP.json``: each global layer kind's measured speed-up
    (:func:`lgopt.tpumlir.corefit.global_speedups`), then the groups' slowdown and sync fitted on the compiled
    scorings with :data:`HELD_OUT` held out, kept only where they beat the speed-ups alone on them; the whole
    section only where it beats, on them, both the analytic terms and the section the file had (else it is
    reported, and the file keeps what it had: hand-set terms are not lost to a fit that cannot beat them)."""
    import datetime as dt
    from dataclasses import replace

    from lgopt.hw.chip import get_chip
    from lgopt.io.problem import load_model
    from lgopt.tpumlir.corefit import Measured, fit_cores, fit_exponents, global_speedups, price, row_run_bytes
    from lgopt.tpumlir.grouping import score
    from lgopt.tpumlir.lowering import network_of

    chip_name, q, n = setting_key(setting)
    base, path = fit_file(setting, "--fit-cores")
    chip = replace(get_chip(chip_name, {"used_cores": n}), cost_model=base.name)
    doc = json.loads(path.read_text())

    def write() -> None:  # each step is priced through the file, so the model reads it again
        write_fit(path, doc)

    before = doc.pop("cores", None)  # the one-core constants alone: what the terms are fitted beside
    write()
    rows, nets = [], {}
    sel = df[(df.chip == chip_name) & (df.quantize == q) & (df.cores == n) & (df.status == "ok") & df.honoured]
    for r in sel.itertuples():
        if r.model not in nets:
            nets[r.model] = load_model(str(cal / "onnx" / f"{r.model}.weightless.onnx"), dtype=q.lower())
        try:
            plan, _ = score(nets[r.model], chip, str(out / r.cache_file))
        except LgoptError:
            continue
        rows.append(Measured(r.model, network_of(nets[r.model], plan), plan, int(r.total_cycles)))
    held = [r for r in rows if r.model in HELD_OUT]

    def held_error() -> float:
        return statistics.median(abs(x - 1) for x in price(chip, held, base.name)) if held else float("nan")

    analytic = held_error()
    previous = float("inf")
    if before is not None:  # the terms the file had, priced on the same held-out groupings
        doc["cores"] = before
        write()
        previous = held_error()
        doc.pop("cores")
        write()
    one, many = one_core_globals(cal, chip_name, q), core_zero_of(out, setting)
    speed = global_speedups(one, many, n)
    heads = row_run_bytes(chip, one, many, 1 if q == "INT8" else 2)  # a check of the line's, not written
    doc["cores"] = {"measured_cores": n, "global_speedup": {k: v["speedup"] for k, v in sorted(speed.items())
                                                            if k not in ("conv", "matmul")}}  # those: exponents
    write()
    doc["cores"]["channel_exponent"] = fit_exponents(chip, base, rows, HELD_OUT, speed)
    write()
    with_speedups = held_error()
    f = fit_cores(chip, base, rows, HELD_OUT)
    keep = f.held_error is not None and f.held_error < with_speedups
    if keep:
        doc["cores"].update({"slowdown": f.slowdown, "sync": f.sync})
    error = f.held_error if keep and f.held_error is not None else with_speedups
    shipped = error <= min(analytic, previous)
    doc["cores"]["held_out_error"] = round(error, 4)  # what lgopt.tpumlir.space trusts a several-core search by
    doc["cores"]["source"] = {
        "fitted_on": sorted({r.model for r in rows} - set(HELD_OUT)), "held_out": list(HELD_OUT), "setting": setting,
        "global_ops": {k: v for k, v in sorted(speed.items())},  # each kind's median speed-up, op by op
        "one_row_matmuls": heads,  # their per-row overhead (bytes) measured op by op: a check of the line's
        "groupings": {"train": f.n_train, "held_out": f.n_held},
        "median_error_held_out": {"analytic_terms": round(analytic, 4), "global_speedups": round(with_speedups, 4),
                                  "fitted_slowdown_sync": None if f.held_error is None else round(f.held_error, 4)},
        "date": dt.date.today().isoformat(), "command": command}
    exps = ", ".join(f"{k} {v}" for k, v in doc["cores"]["channel_exponent"].items())
    if not shipped:  # worse on the models never looked at than what the file had: not kept, only reported
        doc.pop("cores")
        if before is not None and previous <= analytic:
            doc["cores"] = before
    write()
    kinds = ", ".join(f"{k} {v['speedup']:.2f} ({v['n']} ops)" for k, v in sorted(speed.items()))
    kept = "the terms the file had stay" if "cores" in doc else "the analytic terms stay"
    terms = (f"slowdown {f.slowdown} and sync {f.sync:,} cycles fitted and kept ({f.held_error:.1%})" if keep else
             f"the groups' slowdown and sync left analytic (fitted {f.slowdown} / {f.sync:,}: "
             f"{f.held_error:.1%} held out)")
    return (f"Several-core terms of `{base.name}` for {chip_name}, fitted on {setting} (`{command}`): global layers' "
            f"speed-up on {n} cores by kind, measured op by op against the one-core timelines: "
            f"{kinds}; a conv and a weighted matmul as the cores their channels spread over to the power "
            f"(fitted on the training groupings; 0 for a kind that runs on one core op by op) {exps}; {terms}. "
            f"Held-out median \\|pred/meas - 1\\| ({', '.join(HELD_OUT)}, {len(held)} groupings): analytic terms "
            f"{analytic:.1%}, {'' if before is None else f'the terms the file had {previous:.1%}, '}"
            f"with the measured speed-ups {with_speedups:.1%}: "
            f"{'written' if shipped else 'not written (' + kept + ')'} in `{path.name}`.")


def record_search(rt: pd.DataFrame, setting: str, command: str) -> str:
    """Write into the fitted model of ``setting`` (its ``CHIP.json``, F16's or INT8's) whether lgopt's search at
    the default margin is trusted on its cores: ``search_checked``, from this setting's ``--trust-search`` round
    trips, set where every model's plan compiled (or opt2 was kept) and none measured slower than opt2, removed
    otherwise (:func:`lgopt.tpumlir.space._unmeasured_setting` reads it).  Returns what it did, in a line."""
    import datetime as dt

    chip_name, q, n = setting_key(setting)
    base, path = fit_file(setting, "--record-search")
    doc = json.loads(path.read_text())
    if "cores" not in doc:
        raise SystemExit(f"--record-search {setting}: no fitted several-core terms to record a search for")
    g = rt[(rt.chip == chip_name) & (rt.quantize == q) & (rt.cores == n) & (rt.judge_budget == 0)]
    g = g[g.get("trust_search", pd.Series(False, index=g.index)).astype(str) == "True"]
    if g.empty:
        raise SystemExit(f"--record-search {setting}: no round trip with --trust-search of that setting")
    bad = g[~g.outcome.isin(["compiled", "kept opt2"]) | (g.measured > g.opt2)]
    ratio = geomean(g.measured / g.opt2)
    what = (f"{len(g)} models at the default margin: {int((g.outcome == 'compiled').sum())} compiled, "
            f"{int((g.outcome == 'kept opt2').sum())} kept opt2, geomean {ratio:.3f} of opt2")
    if bad.empty:
        doc["cores"]["search_checked"] = f"{dt.date.today()}: {what}, none refused or slower ({command})"
    else:
        doc["cores"].pop("search_checked", None)
    write_fit(path, doc)
    return (f"`{path.name}` ({base.name}): " + (f"search_checked written ({what})" if bad.empty else
            f"no search_checked ({what}; {', '.join(f'{r.model} {r.outcome}' for r in bad.itertuples())})"))


def setting_case(peer: Path, cal: Path, model: str, setting: str) -> tuple[Any, Any, Any]:
    """One model in one setting as lgopt and the judge see it: the weightless network (``cal``'s) in the setting's
    dtype, the chip on its cores priced by the default cost model of that dtype, and TPU-MLIR's judge of the model
    with weights (``peer``'s), which holds its base groups."""
    from dataclasses import replace

    from lgopt.cost.registry import default_cost_model
    from lgopt.hw.chip import get_chip
    from lgopt.io.problem import load_model

    chip_name, q, n = setting_key(setting)
    dtype = "int8" if q == "INT8" else "f16"
    net = load_model(str(cal / "onnx" / f"{model}.weightless.onnx"), dtype=dtype)
    chip = get_chip(chip_name, {"used_cores": n})
    chip = replace(chip, cost_model=default_cost_model(chip, dtype))
    judge = find_judge(peer / "models" / f"{model}.onnx", chip_name, script=SCORE, peer_run=peer, quantize=q, cores=n)
    return net, chip, judge


def roundtrip_one(peer: Path, cal: Path, folder: Path, model: str, setting: str, time_limit: float,
                  judge_budget: int = 0, trust_search: bool = False, judge_time: float | None = None) -> dict[str, Any]:
    """``solve --reference`` (cpsat, TPU-MLIR's space, the default margin) of one model and setting against its own
    opt2, exported and compiled by the judge: the measured cycles over opt2's, or opt2's when lgopt kept it.  With
    ``judge_budget`` compiles, ``--judge``: TPU-MLIR measures lgopt's candidates and the best measured is kept (for
    ``judge_time`` wall seconds, default ``time_limit``, the search's own).
    Where TPU-MLIR's allocator refuses the grouping, the search runs once more with banks left empty, as ``lgopt
    deploy`` does (``first``: what the first search got).  ``trust_search``: searched where lgopt keeps opt2 for
    want of a measured check of its several-core search (what makes that check: ``search_checked`` in the fit)."""
    from dataclasses import replace

    from lgopt.tpumlir.deploy import RETRY_RESERVE_BANKS
    from lgopt.tpumlir.judged import JudgeSettings as JudgedSettings
    from lgopt.tpumlir.space import REFERENCE_MARGIN, ReferenceSpace

    chip_name, q, n = setting_key(setting)
    own = folder / "caches" / "opt2.layer_group_cache.json"
    opt2 = json.loads((folder / "scores" / "opt2.json").read_text()).get("total_cycles")
    row: dict[str, Any] = {"model": model, "chip": chip_name, "quantize": q, "cores": n, "judge_budget": judge_budget,
                           "trust_search": trust_search, "opt2": opt2, "time_limit": time_limit,
                           "judge_time": (time_limit if judge_time is None else judge_time) if judge_budget else None}
    net, chip, judge = setting_case(peer, cal, model, setting)
    judged = {"judge": judge, "judge_settings": JudgedSettings(budget=judge_budget, time_limit=row["judge_time"])} \
        if judge_budget else {}
    space = ReferenceSpace(str(own), margin=REFERENCE_MARGIN, base_groups=str(judge.base_groups() or "") or None,
                           trust_search=trust_search, **judged)
    got = _search_and_compile(net, chip, space, judge, folder, time_limit, {**row, "cost_model": chip.cost_model})
    if got.get("outcome") != "compile:lg_failed":
        return got
    again = _search_and_compile(net, chip, replace(space, reserve_banks=RETRY_RESERVE_BANKS), judge, folder,
                                time_limit, {**row, "cost_model": chip.cost_model})
    if again.get("outcome") == "compile:lg_failed":  # deploy delivers TPU-MLIR's own then
        again = {**again, "outcome": "refused twice, opt2 delivered", "measured": opt2}
    return {**again, "first": f"{got['outcome']} (predicted {got.get('predicted')})"}


def _search_and_compile(net: Any, chip: Any, space: Any, judge: Any, folder: Path, time_limit: float,
                        row: dict[str, Any]) -> dict[str, Any]:
    """One search in ``space``, verified, exported with the space's base groups and compiled (``row`` filled)."""
    from lgopt.report.verdict import verify
    from lgopt.strategies.cpsat.common import CpsatSettings
    from lgopt.strategies.registry import StrategyOptions, parse_strategy

    try:
        plan, _ = parse_strategy("cpsat").run(net, chip, StrategyOptions(
            cpsat=CpsatSettings(time_limit=time_limit, workers=2), space=space))
    except LgoptError as e:
        return {**row, "outcome": "lgopt refused", "why": str(e)[:200]}
    planned = space.lowered(net, chip)[0]
    bad = verify(planned, plan)
    if bad:
        return {**row, "outcome": "lgopt:verify", "why": str(bad[0])[:200]}
    row = {**row, "predicted": plan.cost["cycles"], "reference_predicted": plan.solver.get("reference_cycles")}
    if plan.solver.get("kept_reference"):
        return {**row, "outcome": "kept opt2", "why": str(plan.solver["kept_reference"])[:200], "measured": row["opt2"]}
    row["judge_compiles"] = (plan.solver.get("judge") or {}).get("compiles")
    if plan.solver.get("judge"):  # every trial the judge compiled, what it predicted and measured
        (folder / "judge.json").write_text(json.dumps(plan.solver["judge"], indent=1, default=str))
    return compile_plan(plan, planned, space, judge, folder, row)


def compile_plan(plan: Any, planned: Any, space: Any, judge: Any, folder: Path, row: dict[str, Any],
                 name: str = "lgopt") -> dict[str, Any]:
    """``plan`` (on ``planned``, the network as ``space`` lowered it) exported with the space's base groups and
    compiled by ``judge``: ``row`` with the outcome and the measured cycles; the cache and the scoring kept in
    ``folder`` as ``name``."""
    from lgopt.tpumlir.compiler import ALLOC_FAILED
    from lgopt.tpumlir.export import compile_edge_casts, edge_cast_order, export_tpumlir

    try:  # with the base groups the search's space was built on: ops TPU-MLIR can run in LMEM; the other edge-cast
        # rule after an allocation refusal, as lgopt deploy does
        rule, cache, m = compile_edge_casts(
            plan, lambda r: export_tpumlir(plan, planned, space.reference, base_groups=space.base_groups, edge_casts=r),
            lambda c, _: judge.measure(c, keep=folder / "scores" / f"{name}.json"),
            lambda got: any(s in (got.error or "") for s in ALLOC_FAILED))
    except LgoptError as e:
        return {**row, "outcome": "export refused", "why": str(e)[:200]}
    row = {**row, "edge_casts": rule if rule == edge_cast_order(plan)[0] else f"{rule} (after a refusal)"}
    (folder / "caches" / f"{name}.layer_group_cache.json").write_text(json.dumps(cache, indent=1))
    return {**row, "outcome": "compiled" if m.ok else f"compile:{m.status}", "why": m.error,
            "measured": m.total_cycles if m.ok else None}


RT_KEY = ["model", "chip", "quantize", "cores", "judge_budget", "trust_search"]


def keep_row(path: Path, row: dict[str, Any]) -> None:
    """Add ``row`` to the round trips' CSV, replacing the one of the same model, setting and judge budget."""
    old = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=RT_KEY)
    for key, default in (("judge_budget", 0), ("trust_search", False)):
        if key not in old.columns:
            old[key] = default
    same = (old[RT_KEY].astype(str) == pd.Series({k: str(row[k]) for k in RT_KEY})).all(axis=1)
    pd.concat([old[~same], pd.DataFrame([row])], ignore_index=True).sort_values(RT_KEY).to_csv(path, index=False)


def roundtrip_summary(rt: pd.DataFrame) -> str:
    """Per setting and mode: what the round trips delivered.  ``refused first``: TPU-MLIR refused the first search's
    grouping (``lgopt deploy`` then searches again with banks left empty; ``refused twice``: it delivers opt2)."""
    lines = ["| setting | models | kept opt2 | compiled | refused first | refused twice | geomean measured / opt2 | "
             "worst | best |", "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    if "trust_search" not in rt:
        rt = rt.assign(trust_search=False)
    for (chip, q, n, jb, trusted), g in rt.groupby(["chip", "quantize", "cores", "judge_budget", "trust_search"],
                                                   sort=True):
        ok = g[g.measured.notna() & g.opt2.notna()]
        r = ok.measured / ok.opt2
        geo = geomean(r) if len(r) else float("nan")
        worst = ok.loc[r.idxmax()] if len(r) else None
        best = ok.loc[r.idxmin()] if len(r) else None
        how = f"judge, {jb} compiles" if jb else "default margin" + (", searched (--trust-search)" if trusted else "")
        first = g["first"].astype("string").fillna("").str.startswith("compile:") if "first" in g \
            else pd.Series(False, index=g.index)
        refused = g.outcome.str.startswith("compile:")
        twice = refused | (g.outcome == "refused twice, opt2 delivered")
        lines.append(f"| {chip} {q} {n} core(s), {how} | {len(g)} | {(g.outcome == 'kept opt2').sum()} | "
                     f"{(g.outcome == 'compiled').sum()} | {int((first | refused).sum())} | {int(twice.sum())} | "
                     f"{geo:.3f} | "
                     + (f"{worst.model} {worst.measured / worst.opt2:.3f}" if worst is not None else "-") + " | "
                     + (f"{best.model} {best.measured / best.opt2:.3f}" if best is not None else "-") + " |")
    return "\n".join(lines)


def read_summary(df: pd.DataFrame, read: pd.DataFrame) -> str:
    """Per setting: compiled scorings lgopt loads and verifies, feasibility agreement, prediction error."""
    m = df.merge(read, on=["model", "chip", "quantize", "cores", "variant"])
    m["compiled"] = (m.status == "ok") & m.honoured & m.total_cycles.notna()
    m["err"] = (m.predicted / m.total_cycles - 1).abs()
    lines = ["| setting | cost model | compiled | of them loaded and verified | feasibility agreement | "
             r"median \|pred/meas - 1\| (whole model, compiled) | the same, models held out of every fit | "
             "opt2 pred/meas by model |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for (chip, q, n), g in m.groupby(["chip", "quantize", "cores"], sort=True):
        comp = g[g.compiled]
        loaded = comp[comp.read == "ok"]
        agree = ((g.compiled & (g.read == "ok")) | (~g.compiled & (g.status == "lg_failed") & (g.read == "infeasible")))
        judged = g[g.compiled | (g.status == "lg_failed")]
        o2 = loaded[loaded.variant == "opt2"]
        per = ", ".join(f"{x.model} {x.predicted / x.total_cycles:.2f}" for x in o2.itertuples())
        held = loaded[loaded.model.isin(HELD_OUT)]
        lines.append(f"| {chip} {q} {n} core(s) | {g.cost_model.iloc[0]} | {len(comp)} | {len(loaded)} "
                     f"({len(loaded) / max(1, len(comp)):.0%}) | {agree[judged.index].mean():.1%} of {len(judged)} | "
                     f"{loaded.err.median():.1%} | {held.err.median():.1%} ({len(held)}) | {per} |")
    return "\n".join(lines)


def summary(df: pd.DataFrame) -> str:
    """Per setting and model: TPU-MLIR's own opt1 / opt2 / opt3 and the best scoring found, over opt2."""
    lines = [f"Every number: {SOURCE}; INT8 calibrated on two random inputs (the scoring tool's). `best` is the "
             "fastest scoring of that model and setting that compiled with its groups honoured (own or variant).", "",
             "| setting | model | scorings (compiled) | opt1 | opt2 | opt3 | best / opt2 (which) |",
             "|---|---|---|---:|---:|---:|---|"]
    for (chip, q, n, model), g in df.groupby(["chip", "quantize", "cores", "model"], sort=True):
        ok = g[(g.status == "ok") & g.honoured & g.total_cycles.notna()]

        def own(v: str, ok: pd.DataFrame = ok) -> str:
            r = ok[ok.variant == v]
            return f"{int(r.total_cycles.iloc[0]):,}" if len(r) else "fails"
        o2 = ok[ok.variant == "opt2"]
        best = ok.loc[ok.total_cycles.idxmin()] if len(ok) else None
        ratio = (f"{best.total_cycles / o2.total_cycles.iloc[0]:.3f} ({best.variant})"
                 if best is not None and len(o2) else "-")
        lines.append(f"| {chip} {q} {n} core(s) | {model} | {len(g)} ({len(ok)}) | {own('opt1')} | {own('opt2')} | "
                     f"{own('opt3')} | {ratio} |")
    return "\n".join(lines)


def cores_summary(df: pd.DataFrame, cal: Path) -> str:
    """Per several-core setting and model, how TPU-MLIR's own grouping (opt2) uses the cores: each core's TIU and GDMA
    busy cycles over the total (core 0 first; the scoring tool's per-core profiles), and the speed-up over the same
    model on one core (this benchmark's INT8 scorings, the shared calibration's F16 ones).  A group of one slice runs
    on core 0 alone, so the other cores' shares say how much of the model opt2's slicing gave them."""
    one = {(r.model, r.chip, r.quantize): r.total_cycles for r in df.itertuples()
           if r.cores == 1 and r.variant == "opt2" and r.status == "ok"}
    if (cal / "totals.csv").exists():
        f16 = pd.read_csv(cal / "totals.csv")
        one.update({(r.model, r.chip, "F16"): r.total_cycles for r in f16.itertuples()
                    if r.variant == "opt2" and r.status == "ok"})
    lines = ["| setting | model | opt2 cycles | vs 1 core | TIU busy / total, per core | GDMA busy / total, per core |",
             "|---|---|---:|---:|---|---|"]
    rows = df[(df.cores > 1) & (df.variant == "opt2") & (df.status == "ok") & df.total_cycles.notna()]
    for r in rows.sort_values(["chip", "quantize", "cores", "model"]).itertuples():
        def shares(col: str, total: float = float(r.total_cycles)) -> str:
            vals = [float(v) for v in str(col).split(";") if v not in ("", "None", "nan")]
            return " / ".join(f"{v / total:.2f}" for v in vals) or "-"
        single = one.get((r.model, r.chip, r.quantize))
        speed = f"{single / r.total_cycles:.2f}x" if single else "-"
        lines.append(f"| {r.chip} {r.quantize} {r.cores} cores | {r.model} | {int(r.total_cycles):,} | {speed} | "
                     f"{shares(r.tiu_busy_per_core)} | {shares(r.gdma_busy_per_core)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", default=",".join(SETTINGS), help="CHIP:QUANTIZE:CORES, comma-separated")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--limit", type=int, default=20, help="variants per model and setting (default 20)")
    ap.add_argument("--out", type=Path, default=OUT / "settings")
    ap.add_argument("--peer-run", type=Path, help="TPU-MLIR's install (default $PEER_RUN)")
    ap.add_argument("--summary-only", action="store_true", help="no compile: the tables from what OUT holds")
    ap.add_argument("--results", type=Path, default=RESULTS / "settings.md",
                    help=f"the results document whose section the tables go to (default {RESULTS / 'settings.md'})")
    ap.add_argument("--no-read", action="store_true", help="do not read the scorings into lgopt")
    ap.add_argument("--partial", action="store_true",
                    help="write the tables into --results even when OUT lacks some models or settings")
    ap.add_argument("--roundtrip", action="store_true",
                    help="also solve --reference against each own opt2 of --settings and --models, compile, measure")
    ap.add_argument("--time-limit", type=float, default=30.0, help="the round trips' search (default 30 s)")
    ap.add_argument("--judge-time", type=float, default=None,
                    help="round trips with --judge-budget: the judge's wall seconds (default: --time-limit)")
    ap.add_argument("--trust-search", action="store_true",
                    help="round trips: search at the margin on several cores whose fit carries no measured check of "
                         "it (search_checked), to make that check")
    ap.add_argument("--record-search", metavar="CHIP:QUANTIZE:N",
                    help="after --trust-search round trips of that setting: write whether the search at the margin is "
                         "trusted there (search_checked in the fitted model's CHIP.json)")
    ap.add_argument("--judge-budget", type=int, default=0,
                    help="round trips with --judge: TPU-MLIR compiles this many of lgopt's candidates (default 0)")
    ap.add_argument("--fit-cores", metavar="CHIP:QUANTIZE:N",
                    help="fit the fitted model's several-core terms on that setting's scorings and write them into "
                         "the fitted model's CHIP.json, F16's or INT8's (before the reading, which then uses them)")
    ap.add_argument("--calibration", type=Path, default=CAL,
                    help="the shared calibration folder (its onnx/ holds the weightless models lgopt reads)")
    a = ap.parse_args(argv)
    import os

    peer = a.peer_run or Path(os.environ.get("PEER_RUN", ""))
    if not a.summary_only:
        for setting in a.settings.split(","):
            for model in a.models.split(","):
                run_one(peer, model, setting, a.out, a.limit)
    df = totals(a.out)
    df.to_csv(a.out / "totals.csv", index=False)
    text = summary(df)
    if (df.cores > 1).any():
        text += ("\n\n## How opt2 uses the cores\n\nTPU-MLIR's own grouping on several cores, each core's engines busy "
                 "over the compile's total (its per-core timelines), and the speed-up over one core of the same chip "
                 "and dtype.\n\n" + cores_summary(df, a.calibration))
    if a.fit_cores:
        text += "\n\n" + fit_cores_of(df, a.out, a.calibration, a.fit_cores,
                                       "python benchmarks/settings.py --summary-only --fit-cores " + a.fit_cores)
    if a.roundtrip:
        for folder in sorted(p for p in a.out.iterdir() if (p / "scores" / "opt2.json").exists()):
            model, setting = setting_of(folder)
            if setting in a.settings.split(",") and model in a.models.split(","):
                row = roundtrip_one(peer, a.calibration, folder, model, setting, a.time_limit, a.judge_budget,
                                    a.trust_search, a.judge_time)
                keep_row(a.out / "roundtrip.csv", row)  # at once: a round trip may have taken minutes of compiles
                print(f"  round trip {model} {setting}: {row.get('outcome')} {row.get('measured')}", file=sys.stderr)
    if (a.out / "roundtrip.csv").exists():
        rt = pd.read_csv(a.out / "roundtrip.csv")
        text += ("\n\n## Round trips\n\n`solve --reference` (cpsat, TPU-MLIR's space) against each model's own "
                 "opt2 in that setting, exported and compiled (`--roundtrip`): at the default margin, or with "
                 "`--judge` (`--judge-budget K`: TPU-MLIR measures K of lgopt's candidates and the best measured "
                 "is kept, never one slower than opt2). A kept opt2 is the same bmodel.\n\n" + roundtrip_summary(rt))
    if a.record_search:
        text += "\n\n" + record_search(pd.read_csv(a.out / "roundtrip.csv"), a.record_search,
                                        "python benchmarks/settings.py --roundtrip --trust-search --settings "
                                        f"{a.record_search} --record-search {a.record_search}")
    if not a.no_read:
        read = read_rows(df, a.out, a.calibration)
        read.to_csv(a.out / "read.csv", index=False)
        text += ("\n\n## TPU-MLIR's groupings read into lgopt\n\nEach scoring's cache read by lgopt "
                 "(`lgopt.tpumlir.grouping.score`, exact) on its chip, dtype and cores, verified, and priced by the "
                 "default cost model for that chip and dtype (column `cost model`). *Feasibility agreement*: "
                 "lgopt builds exactly the scorings TPU-MLIR compiles and refuses those it refuses.\n\n"
                 + read_summary(df, read))
    print(text)
    missing = missing_cases(a.out)
    if missing and not a.partial:
        print(f"{a.results} left as it is: {a.out} holds no opt2 of {len(missing)} of the "
              f"{len(SETTINGS) * len(MODELS)} models and settings it tabulates (first: {missing[0]}); "
              "--partial writes these tables anyway",
              file=sys.stderr)
        return 0
    write_section(a.results, "settings", "# INT8 and several cores: TPU-MLIR's groupings measured\n\n"
                  "`benchmarks/settings.py` (issue 34).\n\n" + text)
    return 0


def missing_cases(out: Path) -> list[str]:
    """The models and settings of the results' tables that ``out`` holds no opt2 scoring of: the tables are
    rewritten from complete data only, so a run on a fresh machine (a model or two scored) does not replace them.

    >>> missing_cases(Path("/nonexistent"))[:1]
    ['resnet18 bm1684x:INT8:1']
    """
    return [f"{m} {s}" for s in SETTINGS for m in MODELS
            if not (folder_of(out, m, s) / "scores" / "opt2.json").exists()]


if __name__ == "__main__":
    sys.exit(main())

"""The zoo in the loop (issue 37): every exported model through lgopt's import, TPU-MLIR's own grouping read
into lgopt, and the cpsat round trip in the compiled space; one table, every failure classified by cause.

    python benchmarks/zoo/run.py EXPORT_DIR [-o OUT] [--chips bm1684x,bm1688] [--only a,b] [--redo | --reread]
        [--time-limit 60] [--workers 2] [--tpu-mlir VENV] [--summary benchmarks/results/zoo.md] [--summary-only]

``EXPORT_DIR`` is what ``export.py`` wrote (``manifest.csv``, ``ID.onnx``, ``ID.weightless.onnx``).  For each
exported case and chip (F16, one core):

a. **import**: ``lgopt import`` of the full and of the weightless file, in-process (``lgopt.cli.main``): its exit
   status, and the cause when not 0;
b. **TPU-MLIR's own grouping** (``model_deploy``'s LayerGroup search at its default ``--opt 2``, "opt2"),
   measured on codegen's timeline, then read into lgopt (``lgopt.tpumlir.grouping.score``, exact) and priced
   by the chip's default cost model (``lgopt.cost.registry.default_cost_model``: column ``cost_model``): its
   predicted cycles against the measured ones, and whether the plan verifies (``lgopt.report.verdict.verify``);
c. **the cpsat round trip**: exactly ``lgopt deploy`` (``lgopt.tpumlir.deploy.run_deploy``): lgopt's grouping
   compiled by TPU-MLIR and measured; ``lgopt/opt2`` is its cycles over TPU-MLIR's own, ``kept`` which was
   delivered.  (b) reads the compile ``run_deploy`` made of TPU-MLIR's own grouping (``DIR/work/tpu-mlir``), so
   each case and chip costs one front end and two ``model_deploy`` runs.

A row per case and chip is appended to ``OUT/zoo.csv`` (default ``EXPORT_DIR/run``) as soon as it is done; a
run skips the rows already there (``--redo`` runs them again), so it can be stopped and resumed.  ``--reread``
compiles nothing: it reads each row's kept TPU-MLIR grouping again with the lgopt checked out (a new rule of the
reader, a cost-model change) and appends the row with its reading columns replaced and ``read_commit`` set.  The work
folders stay in ``OUT/work/ID/CHIP`` without their bmodels and weight files (``--keep-work`` keeps them).
The summary (``--summary``, default ``benchmarks/results/zoo.md``) is written from the whole CSV at the end,
or alone with ``--summary-only``: one table of the tuning part of the zoo, one of the held-out part
(``models.py``: never used to tune lgopt), the counts per failure class and issue 37's targets, each met or not.

Failure classes (column ``failure``, ``;``-separated, in pipeline order):

- ``export:build|refused|no-onnxscript|strip``: from ``manifest.csv`` (nothing else runs);
- ``import:internal-error(exit 3)``, ``import:needs-stripped-data`` (the weightless file lacks the data of an
  initializer the graph's shapes depend on: axes, shapes), ``import:unsupported-op``, ``import:shape-inference``,
  ``import:unreadable``, ``import:refused(exit 2)``, ``import:interrupted``; ``import-weightless:...`` the same
  for the weightless file;
- ``tpu-mlir:front-end`` (``model_transform`` refused the file), ``tpu-mlir:own-alloc-failed``,
  ``tpu-mlir:own-compile`` (its own ``model_deploy`` failed), ``tpu-mlir:no-timeline``;
- ``read:unmapped-ops`` (the cache names ops lgopt's import lacks), ``read:bad-cache``,
  ``read:infeasible(global-op|split-op|not-contiguous|secs|lmem|other)`` (a group lgopt cannot build under its
  rules), ``read:internal-error``, ``read:skipped(import)``; ``verify`` (the plan read fails lgopt's verifier);
- ``roundtrip:skipped(import)``: lgopt's side of ``lgopt deploy`` failed because lgopt cannot import the model;
- ``lgopt:search-refused`` (the compiled space refused the model or the reference), ``lgopt:verify`` (lgopt's
  plan fails verification: a bug), ``lgopt:internal-error``, ``compile:alloc-failed`` (TPU-MLIR could not
  allocate lgopt's grouping), ``compile:crashed`` (a TPU-MLIR tool died on lgopt's cache: bus error, segmentation
  fault, abort), ``compile:failed``; ``roundtrip:slower-than-opt2`` (compiled and measured, but
  slower than TPU-MLIR's own: never delivered, yet a miss of the target).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import math
import statistics
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

from models import ZOO, cases

from lgopt.cli import main as lgopt_main
from lgopt.cost.fitted import load_constants
from lgopt.cost.registry import default_cost_model
from lgopt.errors import LgoptError
from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_model
from lgopt.report.document import write_section
from lgopt.report.verdict import verify
from lgopt.tpumlir.compiler import ALLOC_FAILED, find_toolchain, timeline_cycles
from lgopt.tpumlir.deploy import DeployRequest, run_deploy
from lgopt.tpumlir.grouping import GroupingInfeasible, score

ROOT = Path(__file__).resolve().parents[2]
KEPT_WHY = (("faster, so the reference", "margin"), ("fitted on no", "unfitted op"), ("cannot build", "unbuildable"),
            ("proven bound", "bound"))  # why lgopt deploy kept TPU-MLIR's grouping (report's lgopt_kept_reference)
CRASHES = ("Bus error", "Segmentation fault", "Aborted", "Stack dump")  # a TPU-MLIR tool died (its log)
SUMMARY = ROOT / "benchmarks" / "results" / "zoo.md"
FIELDS = ("id", "model", "family", "held_out", "variant", "opset_written", "chip", "import_full", "import_weightless",
          "ops", "opt2_cycles", "cost_model", "predicted_cycles", "predicted_over_measured", "read", "verify",
          "lgopt_cycles", "lgopt_over_opt2", "kept", "kept_why", "roundtrip", "roundtrip_cost_model", "failure",
          "detail", "import_s", "front_end_s", "opt2_compile_s", "read_s", "search_s", "lgopt_compile_s", "total_s",
          "lgopt_commit", "date", "read_commit")


def lgopt_commit() -> str:
    """The commit lgopt ran at, ``+dirty`` when ``lgopt/`` has uncommitted changes (others edit it meanwhile)."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "lgopt"], capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


# ---------------------------------------------------------------------------------------------- classification

def import_class(rc: int, err: str) -> str:
    """The cause of a failed ``lgopt import`` from its exit status and stderr line."""
    if rc == 3:
        return "import:internal-error(exit 3)"
    if rc == 130:
        return "import:interrupted"
    low = err.lower()
    if "weights.absent.bin" in low or "should be stored in" in low:
        return "import:needs-stripped-data"
    if "unsupported" in low or "not supported" in low or "unknown op" in low:
        return "import:unsupported-op"
    if "shape inference" in low or "after shape inference" in low:
        return "import:shape-inference"
    if "not a readable onnx" in low or "does not exist" in low:
        return "import:unreadable"
    return f"import:refused(exit {rc})"


def infeasible_class(reason: str) -> str:
    for key, cls in (("only be a global layer", "global-op"), ("splits lgopt op", "split-op"),
                     ("not contiguous", "not-contiguous"), ("no slice counts fit", "lmem"), ("lmem", "lmem"),
                     ("alloc", "lmem"), ("shape_secs", "secs"), ("secs", "secs")):
        if key in reason.lower():
            return f"read:infeasible({cls})"
    return "read:infeasible(other)"


def read_class(e: LgoptError) -> str:
    msg = str(e)
    if "op names are not in model" in msg or "cache of another model" in msg:
        return "read:unmapped-ops"
    return "read:bad-cache"


def deploy_error_class(msg: str) -> str:
    if "front end refused" in msg:
        return "tpu-mlir:front-end"
    if "could not compile" in msg:
        return "tpu-mlir:own-alloc-failed" if any(a in msg for a in ALLOC_FAILED) else "tpu-mlir:own-compile"
    if "no TPU-MLIR" in msg or "needs TPU-MLIR" in msg:
        return "tpu-mlir:missing"
    return "lgopt:deploy-refused"


def _one_line(text: str, n: int = 200) -> str:
    return " ".join(str(text).split())[:n]


# ---------------------------------------------------------------------------------------------------- steps

def run_import(path: Path, out_json: Path) -> tuple[int, str, str, float]:
    """``lgopt import`` in-process: (exit status, last stderr line, stdout, seconds)."""
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = lgopt_main(["import", str(path), "-o", str(out_json)])
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    return rc, _one_line(lines[-1] if lines else "", 240), out.getvalue().strip(), time.perf_counter() - t0


def own_reading(model: Path, chip_name: str, folder: Path) -> dict[str, Any]:
    """TPU-MLIR's own grouping (compiled in ``folder``) read into lgopt and verified: predicted cycles, status."""
    res: dict[str, Any] = {}
    caches = sorted(folder.glob("*.layer_group_cache.json"))
    if not caches:
        return {"read": "no cache", "failure": "tpu-mlir:own-compile"}
    cm = ""
    t0 = time.perf_counter()
    try:
        net = load_model(str(model), dtype="f16")
        base = get_chip(chip_name)
        cm = default_cost_model(base, "f16")
        chip = replace(base, cost_model=cm)
        plan, _ = score(net, chip, str(caches[0]))
        res.update(predicted_cycles=int(round(float(plan.cost["cycles"]))), read="loaded")
        bad = verify(net, plan)
        res["verify"] = "ok" if not bad else f"{len(bad)} violations"
        if bad:
            res["failure"] = "verify"
            res["detail"] = _one_line(f"verify: {bad[0]}")
    except GroupingInfeasible as e:
        res.update(read="infeasible", failure=infeasible_class(e.reason), detail=_one_line(f"read: {e}"))
    except LgoptError as e:
        res.update(read="refused", failure=read_class(e), detail=_one_line(f"read: {e}"))
    except Exception as e:  # noqa: BLE001 - a bug in lgopt is a row, not a crash
        res.update(read="error", failure="read:internal-error", detail=_one_line(f"read: {type(e).__name__}: {e}"))
    res.update(cost_model=cm, read_s=round(time.perf_counter() - t0, 1))
    return res


def run_case(case_row: dict[str, str], chip: str, export_dir: Path, out: Path, tc, args, imports: dict) -> dict:
    """One case on one chip: the row for ``zoo.csv``."""
    cid = case_row["id"]
    row: dict[str, Any] = {"id": cid, "model": case_row["model"], "family": case_row["family"],
                           "held_out": case_row["held_out"],
                           "variant": f"{case_row['exporter']}-o{case_row['opset']}-b{case_row['batch']}",
                           "opset_written": case_row.get("opset_written", ""), "chip": chip}
    failures: list[str] = []
    details: list[str] = []
    t_all = time.perf_counter()
    if case_row["status"] != "ok":
        row.update(failure=case_row["error_class"], detail=_one_line(case_row["error"]))
        return row
    full, light = export_dir / f"{cid}.onnx", export_dir / f"{cid}.weightless.onnx"
    work = out / "work" / cid
    work.mkdir(parents=True, exist_ok=True)
    # (a) import, once per case
    if cid not in imports:
        got = {}
        for kind, path in (("full", full), ("weightless", light)):
            rc, err, text, secs = run_import(path, work / f"{kind}.json")
            got[kind] = (rc, err, text, secs)
        imports[cid] = got
    got = imports[cid]
    row["import_s"] = round(sum(v[3] for v in got.values()), 1)
    for kind in ("full", "weightless"):
        rc, err, text, _ = got[kind]
        if rc == 0:
            row[f"import_{kind}"] = "ok"
            if kind == "full" and ":" in text:
                row["ops"] = text.split(":", 1)[1].split(" ops")[0].strip()
        else:
            cls = import_class(rc, err)
            row[f"import_{kind}"] = cls.split(":", 1)[1]
            failures.append(cls if kind == "full" else cls.replace("import:", "import-weightless:"))
            details.append(f"import {kind}: {err}")
    imported = got["full"][0] == 0
    # (c) the round trip (its first two steps are (b)'s compile of TPU-MLIR's own grouping)
    folder = work / chip
    req = DeployRequest(full, chip, folder, time_limit=args.time_limit, workers=args.workers)
    report: dict[str, Any] = {}
    deploy_failure = ""
    try:
        report = run_deploy(req, tc, verify, lambda line: None)
    except LgoptError as e:
        deploy_failure = deploy_error_class(str(e))
        details.append(f"deploy: {_one_line(e)}")
    except RuntimeError as e:
        deploy_failure = "lgopt:verify" if "fails verification" in str(e) else "lgopt:internal-error"
        details.append(f"deploy: {_one_line(e)}")
    except Exception as e:  # noqa: BLE001
        deploy_failure = "lgopt:internal-error"
        details.append(f"deploy: {type(e).__name__}: {_one_line(e)}")
        (folder / "run-error.txt").parent.mkdir(parents=True, exist_ok=True)
        (folder / "run-error.txt").write_text(traceback.format_exc())
    steps = _step_seconds(folder, report)
    row.update(steps)
    # (b) TPU-MLIR's own grouping, measured and read
    own = folder / "work" / "tpu-mlir"
    cycles = timeline_cycles(own) if own.is_dir() else None
    if deploy_failure.startswith("tpu-mlir:"):
        failures.append(deploy_failure)
    elif cycles is None:
        failures.append("tpu-mlir:no-timeline")
    else:
        row["opt2_cycles"] = cycles
        if imported:
            res = own_reading(full, chip, own)
            row.update({k: v for k, v in res.items() if k in FIELDS and k not in ("failure", "detail")})
            if res.get("failure"):
                failures.append(res["failure"])
                details.append(res.get("detail", ""))
            if res.get("predicted_cycles"):
                row["predicted_over_measured"] = round(res["predicted_cycles"] / cycles, 4)
        else:
            row["read"] = "skipped"
            failures.append("read:skipped(import)")
        # (c) continued: without lgopt's import, lgopt's side cannot run (the import's class says why)
        if deploy_failure:
            failures.append(deploy_failure if imported else "roundtrip:skipped(import)")
            row["roundtrip"] = "failed"
        elif report:
            _roundtrip(report, row, failures, details, folder)
            if not imported and "lgopt:search-refused" in failures:
                failures[failures.index("lgopt:search-refused")] = "roundtrip:skipped(import)"
    row["failure"] = ";".join(dict.fromkeys(f for f in failures if f))
    row["detail"] = " | ".join(d for d in details if d)[:600]
    row["total_s"] = round(time.perf_counter() - t_all, 1)
    row["lgopt_commit"] = lgopt_commit()
    row["date"] = time.strftime("%Y-%m-%d %H:%M")
    if not args.keep_work:
        for p in list(folder.rglob("*.bmodel")) + list(folder.rglob("*.npz")):
            if p.is_file() and not p.is_symlink():
                p.unlink()
    return row


def _roundtrip(report: dict[str, Any], row: dict[str, Any], failures: list[str], details: list[str],
               folder: Path) -> None:
    row.update(kept=report.get("kept", ""), roundtrip_cost_model=report.get("cost_model", ""))
    ours, ref = report.get("lgopt_cycles"), report.get("tpu_mlir_cycles")
    why = str(report.get("lgopt_kept_reference") or "")
    if why:
        row["kept_why"] = next((tag for key, tag in KEPT_WHY if key in why), "other")
    elif report.get("kept") == "tpu-mlir" and ours and ref and ours >= ref:
        row["kept_why"] = "not faster measured"
    if ours:
        row["lgopt_cycles"] = ours
        row["lgopt_over_opt2"] = round(ours / ref, 4) if ref else ""
        row["roundtrip"] = "kept-reference" if report.get("lgopt_kept_reference") else "compiled"
        if ref and ours > ref:
            failures.append("roundtrip:slower-than-opt2")
    elif report.get("lgopt_error"):
        row["roundtrip"] = "refused"
        failures.append("lgopt:search-refused")
        details.append(f"search: {_one_line(report['lgopt_error'])}")
    elif report.get("lgopt_compile_error"):
        err = report["lgopt_compile_error"]
        log = folder / "work" / "lgopt" / "deploy.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        crash = next((c for c in CRASHES if c in text), "")
        row["roundtrip"] = "compile failed"
        failures.append("compile:alloc-failed" if any(a in err for a in ALLOC_FAILED)
                        else "compile:crashed" if crash else "compile:failed")
        details.append(f"lgopt compile: {crash + ' in ' if crash else ''}{_one_line(err)}")
    elif report.get("interrupted"):
        row["roundtrip"] = "interrupted"
        failures.append("lgopt:interrupted")


def _step_seconds(folder: Path, report: dict[str, Any]) -> dict[str, Any]:
    names = {"1.": "front_end_s", "2.": "opt2_compile_s", "3.": "search_s", "4.": "lgopt_compile_s"}
    out: dict[str, Any] = {}
    for s in report.get("steps", []):
        key = names.get(str(s["step"])[:2])
        if key:
            out[key] = round(float(s["seconds"]), 1)
    return out


# -------------------------------------------------------------------------------------------------- the CSV

def read_rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Append ``row`` to ``path``; a file written with other columns is rewritten with these first."""
    new = not path.exists()
    if not new:
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
        if tuple(header) != FIELDS:
            old = read_rows(path)
            with open(path, "w", newline="") as f:
                w = csv.DictWriter(f, FIELDS, extrasaction="ignore")
                w.writeheader()
                w.writerows(old)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, FIELDS, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerow(row)


READ_FIELDS = ("cost_model", "predicted_cycles", "predicted_over_measured", "read", "verify", "read_s")


def reread(row: dict[str, str], export_dir: Path, out: Path) -> dict[str, str] | None:
    """``row`` with TPU-MLIR's own grouping read again, by the lgopt checked out now, from the compile the row's run
    kept (``OUT/work/ID/CHIP/work/tpu-mlir``): its reading columns and read classes replaced, ``read_commit`` set;
    the round trip's columns (and ``lgopt_commit``, the commit that ran them) as they were.  None without that
    compile."""
    own = out / "work" / row["id"] / row["chip"] / "work" / "tpu-mlir"
    if not row.get("opt2_cycles") or row.get("import_full") != "ok" or not own.is_dir():
        return None
    res = own_reading(export_dir / f"{row['id']}.onnx", row["chip"], own)
    new = {**row, **{k: "" for k in READ_FIELDS}, **{k: v for k, v in res.items() if k in READ_FIELDS}}
    if res.get("predicted_cycles"):
        new["predicted_over_measured"] = str(round(res["predicted_cycles"] / float(row["opt2_cycles"]), 4))
    kept = [f for f in (row.get("failure") or "").split(";") if f and not f.startswith("read:") and f != "verify"]
    failures = ([res["failure"]] if res.get("failure") else []) + kept
    new["failure"] = ";".join(dict.fromkeys(failures))
    details = [d for d in (row.get("detail") or "").split(" | ") if d and not d.startswith(("read:", "verify:"))]
    new["detail"] = " | ".join(([res["detail"]] if res.get("detail") else []) + details)[:600]
    new["read_commit"] = lgopt_commit()
    return new


def latest(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The last row of each (id, chip): a redone row replaces the earlier one."""
    by: dict[tuple[str, str], dict[str, str]] = {}
    for r in rows:
        by[(r["id"], r["chip"])] = r
    order = {c.id: i for i, c in enumerate(cases())}
    return sorted(by.values(), key=lambda r: (order.get(r["id"], 1 << 30), r["chip"]))


# ---------------------------------------------------------------------------------------------- the summary

def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def _cyc(v: Any) -> str:
    x = _num(v)
    return f"{int(x):,}" if x is not None else "-"


def _ratio(v: Any) -> str:
    x = _num(v)
    return f"{x:.3f}" if x is not None else "-"


def table(rows: list[dict[str, str]], fitted: set[str]) -> list[str]:
    head = ("| model | family | variant | chip | import full / weightless | opt2 cycles | predicted / measured "
            "| lgopt measured / opt2 | kept | failure class |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        name = r["id"] + (" (in fit)" if r["model"] in fitted else "")
        variant = r["variant"] + (f" (wrote o{r['opset_written']})" if r.get("opset_written")
                                  and f"-o{r['opset_written']}-" not in r["variant"] else "")
        imp = f"{r.get('import_full') or '-'} / {r.get('import_weightless') or '-'}"
        kept = (r.get("kept") or "-") + (f" ({r['kept_why']})" if r.get("kept_why") else "")
        ours = _ratio(r.get("lgopt_over_opt2")) + (" (kept opt2)" if r.get("roundtrip") == "kept-reference" else "")
        lines.append(f"| {name} | {r['family']} | {variant} | {r['chip']} | {imp} | {_cyc(r.get('opt2_cycles'))} "
                     f"| {_ratio(r.get('predicted_over_measured'))} | {ours} "
                     f"| {kept} | {r.get('failure') or '-'} |")
    if not rows:
        lines.append("| (no case of this part in this run) |" + " |" * 9)
    return lines


def median_error(rows: list[dict[str, str]]) -> str:
    errs = [abs((_num(r["predicted_over_measured"]) or 0) - 1) for r in rows
            if _num(r.get("predicted_over_measured")) is not None]
    return f"{100 * statistics.median(errs):.2f} % over {len(errs)}" if errs else "- (none loaded)"


def timing(rows: list[dict[str, str]]) -> list[str]:
    """Where the time went: the run's rows, and the median row's steps."""
    tot = [x for r in rows if (x := _num(r.get("total_s"))) is not None]
    if not tot:
        return []
    parts = []
    for key, what in (("import_s", "import"), ("front_end_s", "front end"), ("opt2_compile_s", "opt2 compile"),
                      ("read_s", "read"), ("search_s", "search"), ("lgopt_compile_s", "lgopt's compile")):
        xs = [x for r in rows if (x := _num(r.get(key))) is not None]
        if xs:
            parts.append(f"{what} {statistics.median(xs):.0f} s")
    return [f"Time: {len(tot)} rows, {sum(tot) / 60:.1f} min in all, {statistics.median(tot):.0f} s the median row "
            f"(median steps: {', '.join(parts)}; wall seconds on a shared 2-core machine)."]


def targets(rows: list[dict[str, str]], held: list[dict[str, str]]) -> list[str]:
    def met(ok: bool, n: int = 1) -> str:
        return "no data" if not n else "**met**" if ok else "**not met**"

    cases_seen = {r["id"]: r for r in rows}
    exported = [r for r in cases_seen.values() if r.get("import_full")]
    imp_ok = [r for r in exported if r.get("import_full") == "ok" and r.get("import_weightless") == "ok"]
    compiled = [r for r in rows if _num(r.get("opt2_cycles")) is not None]
    loaded = [r for r in compiled if r.get("read") == "loaded" and r.get("verify") == "ok"]
    measured = [r for r in rows if _num(r.get("lgopt_over_opt2")) is not None]
    tried = [r for r in compiled if r.get("roundtrip")]
    within = [r for r in measured if (_num(r["lgopt_over_opt2"]) or 0) <= 1.0]
    same = sum(r.get("roundtrip") == "kept-reference" for r in measured)
    errs = [abs((_num(r["predicted_over_measured"]) or 0) - 1) for r in held
            if _num(r.get("predicted_over_measured")) is not None]
    med = statistics.median(errs) if errs else None
    pct = lambda a, b: f"{100 * a / b:.1f} %" if b else "-"
    reads = bool(compiled) and len(loaded) >= 0.98 * len(compiled)
    out = [
        f"- import 100 % (full and weightless): {len(imp_ok)} of {len(exported)} exported cases, "
        f"{pct(len(imp_ok), len(exported))}: {met(len(imp_ok) == len(exported), len(exported))}",
        f"- at least 98 % of TPU-MLIR's groupings load and verify: {len(loaded)} of {len(compiled)} compiled "
        f"(case, chip), {pct(len(loaded), len(compiled))}: {met(reads, len(compiled))}",
        f"- every round trip at most opt2: {len(within)} of {len(measured)} measured round trips at most opt2 "
        f"({same} of them lgopt's search kept TPU-MLIR's grouping, the same bmodel; {len(tried)} attempted, "
        f"the {len(tried) - len(measured)} others failed: classes below): "
        f"{met(len(within) == len(tried), len(tried))}",
        (f"- held-out prediction median error at most 5 %: {100 * med:.2f} % over {len(errs)} held-out "
         f"(case, chip) loaded: {met(med <= 0.05)}") if med is not None else
        "- held-out prediction median error at most 5 %: no held-out grouping loaded: no data",
    ]
    return out


def summary(rows: list[dict[str, str]], chips_asked: list[str]) -> str:
    rows = latest(rows)
    fitted = {m for c in ("bm1684x", "bm1688") for m in load_constants(c).source.get("fitted_on", [])}
    tune = [r for r in rows if r["held_out"] != "True"]
    held = [r for r in rows if r["held_out"] == "True"]
    all_cases = cases()
    ran = {r["id"] for r in rows}
    models = {r["cost_model"] for r in rows if r.get("cost_model")} | {r["roundtrip_cost_model"] for r in rows
                                                                        if r.get("roundtrip_cost_model")}
    chips = ", ".join(sorted({r["chip"] for r in rows}) or chips_asked)
    commits = ", ".join(sorted({r.get("lgopt_commit") or "unknown" for r in rows})) or "-"
    rereads = ", ".join(sorted({r["read_commit"] for r in rows if r.get("read_commit")}))
    dates = sorted(r["date"] for r in rows if r.get("date"))
    when = f", {dates[0]} to {dates[-1]}" if dates else ""
    counts: dict[str, int] = {}
    for r in rows:
        for f in filter(None, (r.get("failure") or "").split(";")):
            counts[f] = counts.get(f, 0) + 1
    lines = [
        "# The zoo in the loop",
        "",
        f"`benchmarks/zoo/run.py` on the exports of `benchmarks/zoo/export.py` (TPU-MLIR 1.30.2, F16, one core). "
        f"This run: {len(ran)} of the zoo's {len(all_cases)} cases ({len(ZOO)} architectures, "
        f"{sum(e.held_out for e in ZOO)} held out), chips {chips}; lgopt at {commits}{when}"
        + (f"; TPU-MLIR's groupings read again (`--reread`, no compile) at {rereads}." if rereads else "."),
        "",
        "Columns: *opt2 cycles* is TPU-MLIR's own grouping (`model_deploy`, its default `--opt 2`) measured on "
        "codegen's timeline; *predicted / measured* is lgopt's price of that same grouping read from its cache "
        "(`lgopt.tpumlir.grouping.score`, exact) over the measured cycles; *lgopt measured / opt2* is the cpsat "
        "round trip of `lgopt deploy` (lgopt's grouping compiled by TPU-MLIR and measured) over opt2; *kept* is "
        "what `lgopt deploy` delivered. *(in fit)* marks architectures the shipped cost-model constants were "
        "fitted on (from another export of the same torchvision model).",
        "",
        f"Every predicted number is by the chip's default cost model for F16 "
        f"(`lgopt.cost.registry.default_cost_model`): {', '.join(f'`{m}`' for m in sorted(models)) or '-'}.",
        "",
        "## Tuning part",
        "",
        *table(tune, fitted),
        "",
        f"Median |predicted / measured - 1| of the tuning part: {median_error(tune)}.",
        "",
        "## Held-out part",
        "",
        "Never used to tune lgopt's rules or fits (`benchmarks/zoo/models.py`).",
        "",
        *table(held, fitted),
        "",
        f"Median |predicted / measured - 1| of the held-out part: {median_error(held)}.",
        "",
        *timing(rows),
        "",
        "## Failures by class",
        "",
        "A (case, chip) row counts once per class it shows (`benchmarks/zoo/run.py` lists the classes).",
        "",
        "| class | rows |",
        "|---|---:|",
        *[f"| {k} | {v} |" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))],
        *([] if counts else ["| (none) | 0 |"]),
        "",
        "## Issue 37's targets",
        "",
        "All rows:",
        "",
        *targets(rows, held),
        "",
        "Held-out part alone:",
        "",
        *targets(held, held),
        "",
    ]
    return "\n".join(lines)



# ------------------------------------------------------------------------------------------------------ main

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export_dir", type=Path, help="what export.py wrote (manifest.csv and the ONNX files)")
    ap.add_argument("-o", "--out", type=Path, help="results folder (default EXPORT_DIR/run)")
    ap.add_argument("--chips", default="bm1684x,bm1688")
    ap.add_argument("--only", help="comma-separated case ids or model names")
    ap.add_argument("--redo", action="store_true", help="run again the rows already in zoo.csv")
    ap.add_argument("--time-limit", type=float, default=60.0, help="lgopt deploy's search, wall seconds (default 60)")
    ap.add_argument("--workers", type=int, default=2, help="lgopt deploy's CP-SAT workers (default 2)")
    ap.add_argument("--tpu-mlir", help="TPU-MLIR's environment (default $LGOPT_TPU_MLIR)")
    ap.add_argument("--keep-work", action="store_true", help="keep the bmodels and weight files of the work folders")
    ap.add_argument("--summary", type=Path, default=SUMMARY, help=f"results document (default {SUMMARY})")
    ap.add_argument("--summary-only", action="store_true", help="write the summary from zoo.csv and stop")
    ap.add_argument("--reread", action="store_true",
                    help="read each row's kept TPU-MLIR grouping again with this lgopt (no compile: the predictions "
                         "and read classes of a rule or cost change), then write the summary")
    args = ap.parse_args(argv)
    out = args.out or args.export_dir / "run"
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "zoo.csv"
    chips = [c.strip() for c in args.chips.split(",") if c.strip()]
    if not args.summary_only and not args.reread:
        manifest = {r["id"]: r for r in read_rows(args.export_dir / "manifest.csv")}
        if not manifest:
            ap.error(f"{args.export_dir}/manifest.csv: no exports (run export.py first)")
        todo = [c.id for c in cases() if c.id in manifest]
        if args.only:
            want = {w.strip() for w in args.only.split(",") if w.strip()}
            todo = [i for i in todo if i in want or manifest[i]["model"] in want]
        done = {(r["id"], r["chip"]) for r in read_rows(csv_path)}
        tc = find_toolchain(args.tpu_mlir)
        imports: dict[str, Any] = {}
        for cid in todo:
            for chip in chips:
                if (cid, chip) in done and not args.redo:
                    continue
                print(f"{cid} on {chip} ...", flush=True)
                row = run_case(manifest[cid], chip, args.export_dir, out, tc, args, imports)
                append_row(csv_path, row)
                print(f"  {row.get('failure') or 'ok'}: opt2 {_cyc(row.get('opt2_cycles'))}, predicted/measured "
                      f"{_ratio(row.get('predicted_over_measured'))}, lgopt/opt2 {_ratio(row.get('lgopt_over_opt2'))}"
                      f", kept {row.get('kept') or '-'} [{row.get('total_s', 0)} s]", flush=True)
    if args.reread:
        want = {w.strip() for w in (args.only or "").split(",") if w.strip()}
        for r in latest(read_rows(csv_path)):
            if r["chip"] in chips and (not want or r["id"] in want or r["model"] in want):
                new = reread(r, args.export_dir, out)
                if new is not None:
                    append_row(csv_path, new)
                    print(f"{r['id']} on {r['chip']}: predicted/measured {_ratio(r.get('predicted_over_measured'))}"
                          f" ({r.get('cost_model') or '-'}) -> {_ratio(new.get('predicted_over_measured'))}"
                          f" ({new.get('cost_model') or '-'})", flush=True)
    rows = read_rows(csv_path)
    write_section(args.summary, "zoo", summary(rows, chips))
    print(f"{len(latest(rows))} rows in {csv_path}; summary in {args.summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

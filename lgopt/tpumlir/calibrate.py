"""``lgopt fit``: a fitted cost model made from TPU-MLIR's measured timelines, reproducibly.

The fitted model (:mod:`lgopt.cost.fitted`) is only as good as its constants, and those are only as good as
their provenance: each ``<chip>.json`` this writes records the compiler, the data, the models fitted on and
held out, the date and the exact command that makes it again (``source.command``).  Given the same
measurements and options the constants come out the same, bit for bit (the date is an option for that
reason).  The steps: read the measurements (:mod:`.measurements`), map them onto lgopt's ops, fit each chip
on the models not held out (:mod:`lgopt.cost.fit`), fit the global layers' scales with those constants in
place, write; then, apart (:func:`evaluate_fit`), price the held-out models with the result
(:mod:`.heldout`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from lgopt.cost.fit import ChipTables, constants_document, fit_chip, fit_global_local, fitted_model, global_local_table
from lgopt.cost.fitted import MODEL_NAME, ChipConstants
from lgopt.errors import LgoptError
from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_model
from lgopt.tpumlir.heldout import Check, HeldOut, evaluate
from lgopt.tpumlir.measurements import FitTables, Measurements, chip_tables, fit_tables, global_rows, read_measurements
from lgopt.tpumlir.timeline import PROFILES

TIMELINE = f"codegen simulated command timeline ({' or '.join(p.format(core=0) for p in PROFILES)})"


@dataclass(frozen=True)
class FitOptions:
    """What a fit is made from; every field that changes the constants is recorded in them
    (:meth:`command`)."""

    data: Path  # a folder in the calibration format
    out: Path  # the folder the <chip>.json files are written to
    chips: tuple[str, ...] = ()  # empty: every chip measured
    models: tuple[str, ...] = ()  # empty: every model measured (fitted on and held out)
    holdout: tuple[str, ...] = ()  # models left out of the fit, to measure its error on
    batch_runs: Path | None = None  # a batch > 1 round trip's output: a global Gemm's further rows
    date: str = ""  # YYYY-MM-DD recorded as the fit's date (empty: today)
    name: str = MODEL_NAME  # the cost model's name recorded in the files

    def command(self, chips: tuple[str, ...], date: str) -> str:
        """The ``lgopt fit`` command line that makes these constants again."""
        parts = ["lgopt", "fit", str(self.data), "-o", str(self.out), "--chips", ",".join(chips)]
        for flag, value in (("--models", ",".join(self.models)), ("--holdout", ",".join(self.holdout)),
                            ("--batch-runs", str(self.batch_runs or "")),
                            ("--name", self.name if self.name != MODEL_NAME else "")):
            if value:
                parts += [flag, value]
        return shlex.join([*parts, "--date", date])


@dataclass(frozen=True)
class Fit:
    """A fit made and written: what it read, and where it wrote."""

    options: FitOptions
    measurements: Measurements
    tables: FitTables
    fitted_on: tuple[str, ...]
    held_out: tuple[str, ...]
    files: tuple[Path, ...]
    command: str  # recorded in every file: the command line that makes them again


def fit_model(opts: FitOptions, say: Callable[[str], None] = lambda _: None) -> Fit:
    """Fit and write ``<opts.out>/<chip>.json`` for every chip; ``say`` is told what was read and written."""
    date = _date(opts.date)
    _check_paths(opts)
    meas = read_measurements(opts.data, opts.chips, opts.models)
    held, train = _split(meas, opts.holdout)
    tables = fit_tables(meas)
    say(f"data: {len(tables.tiu)} TIU op slices, {len(tables.transfers)} transfers, {len(tables.global_layers)} "
        f"global layers of {', '.join(meas.models)} on {', '.join(meas.chips)}; fit on {', '.join(train)}; "
        f"held out {', '.join(held) or 'none'}")
    per_chip = {c: chip_tables(meas, tables, c, train, opts.batch_runs) for c in meas.chips}
    command = opts.command(meas.chips, date)
    source = {"compiler": meas.compiler, "data": str(opts.data), "timeline": TIMELINE, "fitted_on": list(train),
              "held_out": list(held), "date": date, "command": command,
              "op_types_seen": op_types_seen(opts.data, train, meas.dtype)}
    constants = {c: _fit_one(c, t) for c, t in per_chip.items()}
    if meas.dtype != "f16":  # a file says which deployment it measured; an F16 one keeps its bytes without
        constants = {c: {"dtype": meas.dtype, **k} for c, k in constants.items()}
    docs = {c: constants_document(opts.name, c, k, _counts(source, per_chip[c])) for c, k in constants.items()}
    scales = _global_local(docs, meas, tables, train)
    opts.out.mkdir(parents=True, exist_ok=True)
    files = [_write(opts.out / f"{c}.json", _kept_cores(opts.out / f"{c}.json",
                                                        constants_document(opts.name, c, constants[c],
                                                                           docs[c]["source"], scales[c])))
             for c in meas.chips]
    say(f"wrote {', '.join(map(str, files))}")
    return Fit(opts, meas, tables, train, held, tuple(files), command)


def op_types_seen(data: Path, models: tuple[str, ...], dtype: str = "f16") -> dict[str, list[str]]:
    """The op types the fitted-on models run in groups (``local``) and as global layers (``global``), as lgopt
    imports them: what the fit saw.  A model with others is one the fit cannot vouch for
    (:meth:`lgopt.cost.fitted.CalibratedModel.unfitted`)."""
    local: set[str] = set()
    glob: set[str] = set()
    for m in models:
        net = load_model(str(data / "onnx" / f"{m}.weightless.onnx"), dtype=dtype)
        for op in net.ops:
            (local if op.local else glob).add(op.type)
    return {"local": sorted(local), "global": sorted(glob)}


def evaluate_fit(fit: Fit, eval_limit: int | None = None, check: Check | None = None) -> HeldOut:
    """The held-out error of the constants ``fit`` wrote, next to the analytic model's.  The fitted model is
    registered as ``NAME@OUT`` meanwhile, so that it is never confused with the shipped one."""
    if not fit.held_out:
        raise LgoptError("no model was held out of the fit (--holdout): there is no error to measure")
    opts = fit.options
    with fitted_model(f"{opts.name}@{opts.out}", opts.out) as model:
        return evaluate(fit.measurements, fit.tables, model, fit.fitted_on, fit.held_out, eval_limit, check,
                        opts.name, fit.command)


def record_held_out(fit: Fit, held: HeldOut) -> list[Path]:
    """Each chip's file with what its held-out models measured (``source.held_out_error``: the median
    ``|pred/meas - 1|`` of whole models and of groups, fitted model): a search that replaces TPU-MLIR's grouping
    trusts a model no further than that (:func:`lgopt.tpumlir.space.untrusted_fit`)."""
    files = []
    for path in fit.files:
        doc = json.loads(path.read_text())
        chip = doc.get("chip", path.stem)
        doc["source"]["held_out_error"] = {"model_total": _median_error(held.groupings, chip),
                                          "group": _median_error(held.groups, chip), "models": list(fit.held_out)}
        files.append(_write(path, doc))
    return files


def _median_error(df: pd.DataFrame, chip: str) -> float | None:
    """Median ``|calibrated / measured - 1|`` of ``chip``'s rows (None without any)."""
    d = df[(df.chip == chip) & df.calibrated.notna() & (df.meas_cycles > 0)]
    return round(float((d.calibrated / d.meas_cycles - 1).abs().median()), 4) if len(d) else None


def _kept_cores(path: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with the several-core terms the file at ``path`` holds: they are fitted by a command of their own
    (:mod:`lgopt.tpumlir.corefit`, recorded in them) on top of the one-core constants this fit makes."""
    if path.exists():
        old = json.loads(path.read_text())
        if "cores" in old:
            return {**doc, "cores": old["cores"]}
    return doc


def _write(path: Path, doc: dict[str, Any]) -> Path:
    """Write ``doc`` whole or not at all: the folder may be the one a running model reads (the shipped one)."""
    scratch = path.parent / f".{path.name}.{os.getpid()}"
    scratch.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(scratch, path)
    return path


def _date(text: str) -> str:
    if not text:
        return dt.date.today().isoformat()
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise LgoptError(f"--date {text!r}: expected YYYY-MM-DD") from None


def _check_paths(opts: FitOptions) -> None:
    """Refuse outputs that cannot be written and a batch-run folder without scores, before any work."""
    if opts.out.exists() and not opts.out.is_dir():
        raise LgoptError(f"-o {opts.out}: not a directory (the fit writes one <chip>.json per chip into it)")
    nearest = next(p for p in (opts.out.absolute(), *opts.out.absolute().parents) if p.exists())
    if not nearest.is_dir() or not os.access(nearest, os.W_OK | os.X_OK):
        raise LgoptError(f"-o {opts.out}: cannot write in {nearest}")
    if opts.batch_runs is not None and not (opts.batch_runs / "scores").is_dir():
        raise LgoptError(f"--batch-runs {opts.batch_runs}: no scores/ folder (a round trip's output at batch > 1)")
    if not opts.name or any(ch.isspace() for ch in opts.name):
        raise LgoptError(f"--name {opts.name!r}: a cost model's name is one word")


def _split(meas: Measurements, holdout: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(held out, fitted on): every held-out model must be measured, and at least one model left to fit."""
    unknown = [m for m in holdout if m not in meas.models]
    if unknown:
        raise LgoptError(f"--holdout {', '.join(unknown)}: not among the models fitted "
                         f"({', '.join(meas.models)})")
    train = tuple(m for m in meas.models if m not in holdout)
    if not train:
        raise LgoptError("every model is held out: nothing to fit on")
    return tuple(dict.fromkeys(holdout)), train


def _fit_one(chip: str, tables: ChipTables) -> dict[str, Any]:
    """One chip's constants, refused when the measurements cannot make a model that keeps the contract (a chip
    with no transfer of some kind measured, say)."""
    constants = fit_chip(tables)
    doc = constants_document(MODEL_NAME, chip, constants, {})
    try:
        ChipConstants.from_json(doc).check(chip)
    except LgoptError as e:
        raise LgoptError(f"the measurements cannot make a valid model for {chip}: {e}") from None
    return constants


def _counts(source: dict[str, Any], tables: ChipTables) -> dict[str, Any]:
    return {**source, "n_tiu_slices": int(len(tables.tiu)), "n_transfers": int(len(tables.transfers))}


def _global_local(docs: dict[str, dict[str, Any]], meas: Measurements, tables: FitTables,
                  train: tuple[str, ...]) -> dict[str, dict[str, Any] | None]:
    """Per chip the scales of layer-group op types TPU-MLIR ran as global layers (``global_local``), fitted
    against the model's own price of those layers, which needs the other constants in place: they are written
    to a scratch folder and priced as a model of their own (None: no such layer measured)."""
    rows = global_rows(meas.glob[meas.glob.model.isin(train)], tables.mapped.maps, local=True)
    out: dict[str, dict[str, Any] | None] = {}
    with tempfile.TemporaryDirectory(prefix="lgopt-fit-") as tmp:
        for c, doc in docs.items():
            (Path(tmp) / f"{c}.json").write_text(json.dumps(doc, indent=1) + "\n")
        with fitted_model(f"{MODEL_NAME}@{tmp}", Path(tmp)) as model:
            for c in docs:
                x = rows[rows.chip == c]
                chip = get_chip(c, {"cost_model": model.name})
                out[c] = fit_global_local(global_local_table(chip, tables.mapped.nets, x)) if len(x) else None
    return out

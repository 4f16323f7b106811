"""How well a fitted cost model predicts TPU-MLIR's timeline on models it was not fitted on.

A fit that is only judged on its own data says little: the measurements hold some models out
(``lgopt fit --holdout``), and this module prices them with the fitted constants and with the analytic model,
at every level a plan is priced at: op slices, transfers, global layers, groups and whole groupings, the last
two through lgopt's reader of TPU-MLIR's caches (:func:`run_one`), as a plan read from the compiler is priced.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import pandas as pd

from lgopt.cost.analytic import AnalyticModel
from lgopt.cost.cycles import global_layer_cost
from lgopt.cost.fitted import CalibratedModel, load_constants, tiu_price
from lgopt.errors import LgoptError
from lgopt.hw.chip import Chip, get_chip
from lgopt.model.network import Network
from lgopt.model.plan import Plan
from lgopt.tpumlir.grouping import GroupingInfeasible, build_groups, score
from lgopt.tpumlir.measurements import FitTables, Measurements, global_rows

Check = Callable[[Network, Plan], Sequence[object]]  # a plan's violations (empty: it holds)


class Scored(NamedTuple):
    """A grouping read from a TPU-MLIR cache: ``loaded`` (a plan, its predicted cycles), ``infeasible`` (a group
    lgopt cannot build under its rules; ``reason`` says which and why) or ``error`` (the reader refused it)."""

    status: str
    reason: str
    cycles: float | None
    plan: Plan | None


def run_one(net: Network, chip: Chip, cache: str, exact: bool, check: Check | None = None) -> Scored:
    """TPU-MLIR's grouping in ``cache`` as an lgopt plan on ``chip`` (``exact=False``: ops lgopt only runs as
    global layers moved to the group's edge), checked by ``check`` when given.  The verifier lives in a layer
    this one may not import (:mod:`lgopt.check`), hence the callable: ``lgopt.report.verdict.verify``."""
    try:
        plan, _ = score(net, chip, cache, exact=exact)
    except GroupingInfeasible as e:
        return Scored("infeasible", f"group {e.group_index}: {e.reason}", None, None)
    except LgoptError as e:
        return Scored("error", str(e), None, None)
    bad = check(net, plan) if check is not None else ()
    if bad:
        return Scored("error", f"plan fails verification: {bad[0]}", None, None)
    return Scored("loaded", "", float(plan.cost["cycles"]), plan)


@dataclass(frozen=True)
class HeldOut:
    """The fitted model's (column ``calibrated``) and the analytic model's (``analytic``) predictions for the
    held-out models beside the measured cycles (``cycles``, ``meas_cycles`` for groups and groupings)."""

    model: str  # the fitted cost model's name
    constants: str  # the folder its constants were read from
    fitted_on: tuple[str, ...]
    held_out: tuple[str, ...]
    chips: tuple[str, ...]
    tiu: pd.DataFrame  # op slices
    transfers: pd.DataFrame
    global_layers: pd.DataFrame  # non-local ops run as global layers, their whole cost
    global_local: pd.DataFrame  # layer-group op types TPU-MLIR ran as global layers
    groups: pd.DataFrame
    groupings: pd.DataFrame  # whole models
    command: str = ""  # the command that made the constants, when known

    def summary(self) -> list[str]:
        """Markdown: the median ``|pred/meas - 1|`` per chip and level, and per held-out model."""
        return _summary(self)

    def write(self, folder: Path) -> list[Path]:
        """``ops.csv`` (op slices and transfers), ``groups.csv``, ``groupings.csv`` and ``summary.md``."""
        folder.mkdir(parents=True, exist_ok=True)
        ops = pd.concat([self.tiu.assign(what="tiu"), self.transfers.assign(what="gdma")], ignore_index=True)
        files = [folder / n for n in ("ops.csv", "groups.csv", "groupings.csv", "summary.md")]
        ops.to_csv(files[0], index=False)
        self.groups.to_csv(files[1], index=False)
        self.groupings.to_csv(files[2], index=False)
        files[3].write_text("\n".join(self.summary()) + "\n")
        return files


def evaluate(meas: Measurements, tables: FitTables, model: CalibratedModel, fitted_on: Sequence[str],
             held_out: Sequence[str], eval_limit: int | None = None, check: Check | None = None,
             name: str = "", command: str = "") -> HeldOut:
    """Price the ``held_out`` models with ``model`` (registered under its name, its constants in its
    directory; ``name``: what to call it, default its registered name) and with the analytic model.
    ``eval_limit``: at most that many groupings per chip."""
    hold = list(held_out)
    fitted = {c: get_chip(c, {"cost_model": model.name}) for c in meas.chips}
    plain = {c: get_chip(c) for c in meas.chips}
    tiu = tables.tiu[tables.tiu.model.isin(hold)].copy()
    tiu["calibrated"] = [_fitted_tiu(r, Path(model.directory) if model.directory else None)
                         for r in tiu.itertuples()]
    dma = tables.transfers[tables.transfers.model.isin(hold)].copy()
    dma["analytic"] = [AnalyticModel().gdma_cycles(plain[r.chip], int(r.bytes)) for r in dma.itertuples()]
    dma["calibrated"] = [model.gdma_cycles(plain[r.chip], int(r.bytes), int(r.runs), r.kind, bool(r.point))
                         for r in dma.itertuples()]
    nets = tables.mapped.nets
    layers = _priced_globals(tables.global_layers[tables.global_layers.model.isin(hold)], nets, plain, fitted)
    local = global_rows(meas.glob[meas.glob.model.isin(hold)], tables.mapped.maps, local=True)
    local = _priced_globals(local, nets, plain, fitted)
    tot = meas.totals[meas.totals.model.isin(hold)]
    if eval_limit:
        tot = tot.groupby("chip").head(eval_limit)
    groupings, groups = score_groupings(meas, nets, tot, {"analytic": plain, "calibrated": fitted}, check)
    return HeldOut(name or model.name, str(model.directory), tuple(fitted_on), tuple(hold), meas.chips, tiu, dma,
                   layers, local, groups, groupings, command)


def _fitted_tiu(r: Any, directory: Path | None) -> int:
    """The fitted model's TIU cycles of an op slice from its features (category, work, fused passes)."""
    return tiu_price(load_constants(r.chip, directory), r.cat, r.fam, r.work, r.passes, r.fused)


def _priced_globals(rows: pd.DataFrame, nets: dict[str, Network], plain: dict[str, Chip],
                    fitted: dict[str, Chip]) -> pd.DataFrame:
    """Global layers with their whole cost (compute and transfers) by both models, as a plan is charged it."""
    rows = rows.copy()
    if len(rows):
        for col, chips in (("analytic", plain), ("calibrated", fitted)):
            rows[col] = [global_layer_cost(chips[r.chip], nets[r.model], nets[r.model].op(r.lg))["cycles"]
                         for r in rows.itertuples()]
    return rows


# --- groupings and groups through the reader ------------------------------------------------------------

GroupPrediction = tuple[float, str, int]  # cycles, "exact" / "relaxed", the group's func_start_idx


def score_groupings(meas: Measurements, nets: dict[str, Network], totals: pd.DataFrame,
                    chips: dict[str, dict[str, Chip]], check: Check | None = None
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every grouping of ``totals`` through lgopt's reader, priced on each of ``chips`` (label -> chip name ->
    chip): one row per grouping (whole model) and one per compiled group TPU-MLIR measured."""
    measured = pd.read_csv(meas.path / "groups.csv")
    by_scoring = {k: v for k, v in measured.groupby(["model", "chip", "variant"])}
    rows, grows = [], []
    for r in totals.itertuples(index=False):
        rec, preds = _score_grouping(r, nets[r.model], str(meas.path / r.cache_file), chips, check)
        rows.append(rec)
        m = by_scoring.get((r.model, r.chip, r.variant))
        if m is not None and r.status == "ok":
            grows += _group_rows(r, m, preds)
    return pd.DataFrame(rows), pd.DataFrame(grows)


def _score_grouping(r: Any, net: Network, cache: str, chips: dict[str, dict[str, Chip]], check: Check | None
                    ) -> tuple[dict[str, Any], dict[str, dict[int, GroupPrediction]]]:
    """One grouping by each labelled model: its whole-model prediction (exact build, relaxed where the exact one
    is infeasible) and each group's (exact, else relaxed)."""
    rec: dict[str, Any] = {"model": r.model, "chip": r.chip, "variant": r.variant, "kind": r.kind,
                           "meas_cycles": r.total_cycles if r.status == "ok" else None}
    preds: dict[str, dict[int, GroupPrediction]] = {}
    for label, by_name in chips.items():
        chip = by_name[r.chip]
        got, mode = run_one(net, chip, cache, exact=True, check=check), "exact"
        if got.status == "infeasible":
            got, mode = run_one(net, chip, cache, exact=False, check=check), "relaxed"
        rec[f"{label}_status"], rec[f"{label}_mode"], rec[label] = got.status, mode, got.cycles
        try:
            ex = build_groups(net, chip, cache, exact=True)
            rx = build_groups(net, chip, cache, exact=False)
        except LgoptError:
            continue
        gp = preds.setdefault(label, {})
        for g, h in zip(ex.groups, rx.groups):
            use = g if g.plan is not None else (h if h.plan is not None else None)
            if use is not None and use.plan is not None:
                gp[g.index] = (float(use.plan.cost["cycles"]), "exact" if use is g else "relaxed",
                               ex.cmap.cache.groups[g.index].start)
    return rec, preds


def _group_rows(r: Any, measured: pd.DataFrame, preds: dict[str, dict[int, GroupPrediction]]
                ) -> list[dict[str, Any]]:
    """The measured groups of one compiled grouping both models priced, matched by position and first op."""
    out = []
    for x in measured.itertuples(index=False):
        a = preds.get("analytic", {}).get(int(x.group_pos))
        c = preds.get("calibrated", {}).get(int(x.group_pos))
        if a is None or c is None or a[2] != int(x.func_start_idx) or pd.isna(x.cycles):
            continue
        out.append({"model": r.model, "chip": r.chip, "variant": r.variant, "group_pos": int(x.group_pos),
                    "mode": a[1], "n_slices": x.n_slices, "meas_cycles": float(x.cycles),
                    "analytic": a[0], "calibrated": c[0]})
    return out


# --- the summary ----------------------------------------------------------------------------------------

def med_err(pred: Sequence[Any], meas: Sequence[Any]) -> float | None:
    """Median ``|pred/meas - 1|`` over the pairs with both (None: none)."""
    e = [abs(p / m - 1) for p, m in zip(pred, meas) if m and not pd.isna(p) and not pd.isna(m)]
    return statistics.median(e) if e else None


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _row(chip: str, what: str, df: pd.DataFrame | None, mcol: str = "cycles") -> str:
    if df is None or not len(df):
        return f"| {chip} | {what} | 0 | - | - |"
    return (f"| {chip} | {what} | {len(df)} | {_pct(med_err(df['analytic'], df[mcol]))} | "
            f"{_pct(med_err(df['calibrated'], df[mcol]))} |")


def _compiled(groupings: pd.DataFrame) -> pd.DataFrame:
    """Groupings TPU-MLIR compiled that both models priced."""
    if not len(groupings):
        return groupings
    return groupings[groupings.meas_cycles.notna() & groupings.analytic.notna() & groupings.calibrated.notna()]


def _chip_rows(h: HeldOut, c: str) -> list[str]:
    def of(df: pd.DataFrame) -> pd.DataFrame:
        return df[df.chip == c] if len(df) else df

    g = of(h.groups)
    lines = [_row(c, "op slice TIU", of(h.tiu)), _row(c, "transfer GDMA", of(h.transfers))]
    if len(h.global_layers):
        lines.append(_row(c, "global layer (non-local op)", of(h.global_layers)))
    if len(h.global_local):
        lines.append(_row(c, "global layer (layer-group op type)", of(h.global_local)))
    lines.append(_row(c, "group (exact build)", g[g["mode"] == "exact"] if len(g) else g, mcol="meas_cycles"))
    lines.append(_row(c, "group (exact + relaxed)", g, mcol="meas_cycles"))
    lines.append(_row(c, "model total (exact or relaxed)", _compiled(of(h.groupings)), mcol="meas_cycles"))
    return lines


def _summary(h: HeldOut) -> list[str]:
    lines = [f"Cost model {h.model} (constants in {h.constants}), held-out models: "
             f"{', '.join(h.held_out)} (fitted on {', '.join(h.fitted_on)}).", "",
             *([f"Constants made by `{h.command}`.", ""] if h.command else []),
             "median |pred/meas - 1| (n)", "",
             f"| chip | what | n | analytic | {h.model} |", "|---|---|---:|---:|---:|"]
    for c in h.chips:
        lines += _chip_rows(h, c)
    lines += ["", "per held-out model (model total, median |pred/meas-1|; median pred/meas):", "",
              f"| chip | model | groupings | analytic | {h.model} | analytic ratio | {h.model} ratio |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for (c, m), x in _compiled(h.groupings).groupby(["chip", "model"]) if len(h.groupings) else ():
        lines.append(f"| {c} | {m} | {len(x)} | {_pct(med_err(x.analytic, x.meas_cycles))} | "
                     f"{_pct(med_err(x.calibrated, x.meas_cycles))} | "
                     f"{statistics.median(x.analytic / x.meas_cycles):.2f} | "
                     f"{statistics.median(x.calibrated / x.meas_cycles):.2f} |")
    return lines

"""Chip-parameter sweeps (``lgopt sweep``): every model on every chip under the cross product of ``--set``
values, each configuration one task on a joblib backend (:mod:`lgopt.report.parallel`: local processes,
this process, or a Dask cluster), cached on disk one file per configuration; table, plots, Pareto front,
knee and the configurations that could not place a model.

The cache lives with the report, not in the workers, so any backend (a cluster without a shared file
system included) fills the same cache: the parent writes each result as it arrives, atomically (a
temporary file renamed over the name), so an interrupted sweep keeps every finished configuration, two
sweeps writing the same folder never leave half a file, and a rerun submits only what is missing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from lgopt.errors import LgoptError
from lgopt.hw.chip import Chip
from lgopt.model.network import Network, network_digest
from lgopt.report.compare import _png, run_strategy, write_html
from lgopt.report.parallel import Backend, run_tasks
from lgopt.strategies.cpsat.common import CpsatSettings
from lgopt.strategies.registry import StrategyOptions, parse_strategy
from lgopt.strategies.settings import Progress, SearchSettings

CACHE_VERSION = 2  # bump when a row's meaning changes: older files are then simply not found


def parse_sweep(sets: Sequence[str]) -> dict[str, list[str]]:
    axes: dict[str, list[str]] = {}
    for item in sets:
        if "=" not in item:
            raise LgoptError(f"bad --set {item!r}: expected key=v1,v2,...")
        k, v = item.split("=", 1)
        vals = [x.strip() for x in v.split(",") if x.strip()]
        if not vals:
            raise LgoptError(f"--set {k} has no values")
        axes[k.strip()] = vals
    return axes


REPORT_SECONDS = 2.0  # what the table, plots and pages take after the last configuration
TASK_SECONDS = 0.5  # what a configuration spends outside its strategy's search (loading, the final check)


@dataclass(frozen=True)
class SweepTask:
    """One configuration as plain data: CP-SAT objects do not pickle, so the worker builds its own model.
    ``workers`` is CP-SAT's worker count, always explicit (its default, every core, oversubscribes a
    pool); ``seed`` fixes its search.  ``budget`` is seconds of search, not part of the result's key (it
    only spreads the sweep's wall-clock limit over its configurations), or, ``deterministic``, work units
    (part of the key: with them the result is the same on any backend)."""

    key: str
    model: dict[str, Any]
    chip: dict[str, Any]
    point: tuple[tuple[str, str], ...]
    strategy: str
    seed: int
    workers: int
    budget: float
    deterministic: bool = False


def config_key(net_digest: str, chip: Chip, strategy: str, time_limit: Any, seed: int, workers: int) -> str:
    """The content hash naming a configuration's cache file: everything its result depends on."""
    blob = json.dumps([CACHE_VERSION, net_digest, chip.to_dict(), strategy, time_limit, seed, workers],
                      sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def read_cached(cache: Path, key: str) -> dict[str, Any] | None:
    f = cache / f"{key}.json"
    try:
        return dict(json.loads(f.read_text()))
    except (OSError, ValueError):  # absent, or (never written by lgopt) unreadable: solve it again
        return None


def write_cached(cache: Path, key: str, row: Mapping[str, Any]) -> None:
    """Write ``row`` as ``KEY.json`` atomically: a temporary file in the same folder renamed over the name,
    so a reader (another sweep, a rerun) sees either nothing or the whole row."""
    fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=cache)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(row, fh, sort_keys=True)
        os.replace(tmp, cache / f"{key}.json")
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def solve_config(task: SweepTask) -> dict[str, Any]:
    """Solve one configuration (runs in a worker).  A configuration lgopt refuses (its chip cannot hold
    what the model needs) is a row saying why, not a failed sweep."""
    from lgopt.hw.chip import chip_from_dict, with_overrides
    from lgopt.io.problem import network_from_dict

    net = network_from_dict(task.model)
    chip = with_overrides(chip_from_dict(task.chip), dict(task.point))
    options = StrategyOptions(SearchSettings(), CpsatSettings(time_limit=task.budget, workers=task.workers,
                                                              deterministic=task.deterministic, seed=task.seed))
    row: dict[str, Any] = {"model": net.name, "chip": chip.name, **dict(task.point), "strategy": task.strategy,
                           "cost model": chip.cost_model}
    try:
        plan, secs, _ = run_strategy(net, chip, parse_strategy(task.strategy), options)
    except LgoptError as e:
        return {**row, "cycles": None, "traffic MB": None, "groups": 0, "global layers": None,
                "status": "failed", "placed": False, "why not placed": str(e), "seconds": None}
    placed = bool(plan.groups)
    return {**row, "cycles": int(plan.cost["cycles"]), "traffic MB": round(plan.cost["traffic_bytes"] / 1e6, 3),
            "groups": len(plan.groups), "global layers": len(plan.global_layers), "status": plan.status,
            "placed": placed, "why not placed": "" if placed else "no group fits: every op runs as a global layer",
            "seconds": round(secs, 2)}


def pareto(df: pd.DataFrame, costs: Sequence[str]) -> pd.DataFrame:
    """Points no other point beats on every column of ``costs`` (smaller is better on each: fewer cycles,
    less LMEM, fewer lanes), in the order of ``costs``.

    >>> d = pd.DataFrame({"lmem": [1, 2, 1, 2], "lanes": [1, 1, 2, 2], "cycles": [9, 5, 6, 5]})
    >>> pareto(d, ["lmem", "lanes", "cycles"])["cycles"].tolist()
    [9, 6, 5]
    """
    pts = df.sort_values(list(costs)).reset_index(drop=True)
    vals = pts[list(costs)].to_numpy(dtype=float)
    keep = [i for i in range(len(pts))
            if not any((vals[j] <= vals[i]).all() and (vals[j] < vals[i]).any() for j in range(len(pts)))]
    return pts.iloc[keep]


def _eta(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def sweep(models: Sequence[tuple[str, Network]], chips: Sequence[Chip], axes: dict[str, list[str]],
          strategies: Sequence[str], out: str, time_limit: float = 10.0, backend: Backend = Backend(),
          seed: int = 0, workers: int = 1, progress: Progress | None = None,
          started: float | None = None, deterministic: float | None = None) -> pd.DataFrame:
    """Every model (``(path, network)`` pairs) on every chip with every configuration and strategy.

    ``time_limit`` is wall-clock seconds per configuration, the sweep's own work included: ``C``
    configurations to solve on ``W`` workers end within ``ceil(C / W) * time_limit`` seconds of
    ``started`` (``time.perf_counter()``, default now).  ``workers`` is CP-SAT's worker count in each
    task (1: the backend supplies the parallelism); with ``seed`` it fixes each configuration's result,
    whichever backend runs it, when the search ends on its own.  ``deterministic`` gives each
    configuration's search that many work units instead (:mod:`lgopt.strategies.cpsat.budget`): a search
    its budget stops then stops at the same point on every backend, and ``time_limit`` is not used."""
    from lgopt.hw.chip import with_overrides
    from lgopt.model.network import network_to_dict

    started = time.perf_counter() if started is None else started
    keys = list(axes)
    points = [tuple(zip(keys, combo)) for combo in itertools.product(*(axes[k] for k in keys))]
    configs = []
    for c in chips:
        for p in points:  # validate every configuration up front: one bad value is a one-line error
            configs.append((c, p, with_overrides(c, dict(p))))
    d = Path(out)
    cache = d / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any] | None] = []
    todo: list[SweepTask] = []
    slots: list[int] = []
    for _path, m in models:
        mdict, digest = network_to_dict(m), network_digest(m)
        for base, p, full in configs:
            for s in strategies:
                limit: Any = time_limit if deterministic is None else ["deterministic", deterministic]
                key = config_key(digest, full, s, limit, seed, workers)
                hit = read_cached(cache, key)
                if hit is not None:
                    rows.append({**hit, "cached": True})
                    continue
                slots.append(len(rows))
                rows.append(None)
                todo.append(SweepTask(key, mdict, base.to_dict(), p, s, seed, workers, 0.0))
    width = 1 if backend.kind == "sequential" else backend.jobs
    if todo:
        rounds = math.ceil(len(todo) / width)
        if deterministic is not None:  # work units: each configuration its own, whatever the backend
            budget = deterministic
        elif backend.scheduler:  # a cluster of unknown size: each configuration gets its own limit
            budget = max(0.1, time_limit - TASK_SECONDS)
        else:
            left = time_limit * rounds - (time.perf_counter() - started) - REPORT_SECONDS
            budget = max(0.1, left / rounds - TASK_SECONDS)
        todo = [SweepTask(t.key, t.model, t.chip, t.point, t.strategy, t.seed, t.workers, budget,
                          deterministic is not None) for t in todo]
    cached = len(rows) - len(todo)
    t0 = time.perf_counter()
    done = 0
    try:
        for i, row in run_tasks(solve_config, todo, backend):
            write_cached(cache, todo[i].key, row)
            rows[slots[i]] = {**row, "cached": False}
            done += 1
            if progress:
                spent = time.perf_counter() - t0
                progress(f"sweep: {cached + done}/{len(rows)} configurations ({cached} cached), "
                         f"{_eta(spent)} elapsed, ETA {_eta(spent / done * (len(todo) - done))}")
    except KeyboardInterrupt:
        import sys

        print(f"\nlgopt: sweep interrupted: {cached + done} of {len(rows)} configurations kept in {cache}; "
              "run the same command again to resume", file=sys.stderr)
        raise
    df = pd.DataFrame([r for r in rows if r is not None])
    order = ["model", "chip", *keys, "strategy", "cycles", "cost model", "traffic MB", "groups", "global layers",
             "status", "placed", "why not placed", "seconds", "cached"]
    df = df[[c for c in order if c in df] + [c for c in df if c not in order]]
    return _report(df, keys, list(strategies), d, cache, backend, models, chips)


def _num(v: Any) -> float | None:
    from lgopt.hw.chip import parse_size

    try:
        return float(parse_size(str(v)))
    except LgoptError:
        try:
            return float(v)
        except ValueError:
            return None


def size_label(n: float) -> str:
    """Bytes as an architect writes them.

    >>> size_label(32768), size_label(2 * 1024 ** 2), size_label(1536), size_label(100)
    ('32 KiB', '2 MiB', '1.5 KiB', '100 B')
    """
    for unit, f in (("MiB", 1024**2), ("KiB", 1024)):
        if n >= f:
            return f"{n / f:g} {unit}"
    return f"{n:g} B"


def _label(key: str, raw: Any, value: float | None) -> str:
    return size_label(value) if key.endswith("_bytes") and value is not None else str(raw)


def _knee(line: pd.DataFrame, lmem: str, others: list[str]) -> dict[str, Any]:
    """Where one model on one chip (the other parameters fixed) stops gaining from LMEM: the smallest size
    within 5 % of the best cycles any size reaches."""
    best = line.sort_values(["cycles", lmem]).iloc[0]
    knee = line[line["cycles"] <= 1.05 * best["cycles"]].sort_values(lmem).iloc[0]
    return {"model": knee["model"], "chip": knee["chip"], **{k: knee[k] for k in others},
            "strategy": knee["strategy"], "knee LMEM": size_label(knee[lmem]), "cycles at knee": int(knee["cycles"]),
            "best cycles": int(best["cycles"]), "best at LMEM": size_label(best[lmem]),
            "smallest LMEM swept": size_label(line[lmem].min()),
            "cycles there": int(line.sort_values(lmem).iloc[0]["cycles"]), "cost model": knee["cost model"]}


def _report(df: pd.DataFrame, keys: list[str], strategies: list[str], d: Path, cache: Path, backend: Backend,
            models: Sequence[tuple[str, Network]], chips: Sequence[Chip]) -> pd.DataFrame:
    for k in keys:
        num = pd.to_numeric(df[k].map(_num), errors="coerce")
        if num.notna().all():
            df[k + " (value)"] = num
    numeric = [k + " (value)" for k in keys if k + " (value)" in df]
    shown = df.drop(columns=["cached"])
    shown.to_csv(d / "sweep.csv", index=False)
    cost_models = ", ".join(sorted(set(df["cost model"])))
    names = [m.name for _, m in models]
    title = f"lgopt sweep: {', '.join(names)} on {', '.join(c.name for c in chips)}"
    tables: list[tuple[str, pd.DataFrame]] = [("every configuration", shown.drop(columns=numeric))]
    notes = [f"every cycle count is lgopt's {cost_models} cost model (column 'cost model'), not a measurement",
             f"{int(df['cached'].sum())} of {len(df)} configurations served from the cache in {cache}; "
             f"the rest ran on {backend.describe()}"]
    placed = df[df["placed"]] if "placed" in df else df
    knees = []
    lmem = "lmem_bytes (value)" if "lmem_bytes (value)" in df else None
    if numeric:
        named = ", ".join(c.removesuffix(" (value)") for c in numeric)
        for (model, chipname, s), sub in placed.groupby(["model", "chip", "strategy"], sort=True):
            front = pareto(sub, numeric + ["cycles"])  # every swept parameter, not just the first
            tables.append((f"Pareto front of {model} on {chipname} ({s}): {named} vs cycles ({cost_models} cost "
                           "model; smaller is better on each)",
                           front.drop(columns=["cached", "placed", "why not placed"] + numeric)))
            if lmem:
                others = [k for k in keys if k != "lmem_bytes"]
                for _, line in (sub.groupby(others, sort=False) if others else [((), sub)]):
                    knees.append(_knee(line, lmem, others))
    if knees:
        others = [k for k in keys if k != "lmem_bytes"]
        knees.sort(key=lambda r: (names.index(r["model"]), r["chip"], r["strategy"],
                                  tuple(_num(r[k]) or 0.0 for k in others)))
        tables.insert(1, ("knee: the smallest LMEM within 5 % of the best cycles at the same other parameters "
                          "(where more LMEM stops gaining)", pd.DataFrame(knees)))
    failed = df[~df["placed"]] if "placed" in df else df.iloc[0:0]
    if len(failed):
        tables.append(("configurations that could not place a model",
                       failed[["model", "chip", *keys, "strategy", "status", "why not placed"]]))
    else:
        notes.append("every configuration placed every model (at least one layer group)")
    images = []
    for name in names:
        sub = df[df["model"] == name]
        images += [(f"{name}: {cap}", png) for cap, png in _plots_sweep(sub, keys)]
    md = ([f"# {title}\n"] + [f"- {n}" for n in notes] + [""]
          + [f"## {h}\n\n{t.astype(object).fillna('-').to_markdown(index=False)}\n" for h, t in tables])
    (d / "sweep.md").write_text("\n".join(md) + "\n")
    write_html(d / "sweep.html", title, tables, images, notes)
    return df


def _plots_sweep(df: pd.DataFrame, keys: list[str]) -> list[tuple[str, str]]:
    """Cost against each swept parameter, one line per setting of the others (and chip and strategy).  An
    axis spanning an order of magnitude or more is logarithmic; sizes read in KiB/MiB; everything sorts by
    the number a value stands for (32K before 128K), legends included."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def value(k: str) -> str:
        return k + " (value)" if k + " (value)" in df else k

    if "placed" in df:
        df = df[df["placed"].astype(bool)]
    if df.empty:
        return []
    cost_model = ", ".join(sorted(set(df["cost model"]))) if "cost model" in df else ""
    chip_col = ["chip"] if "chip" in df and df["chip"].nunique() > 1 else []
    out = []
    for k in keys:
        col = value(k)
        for metric in ("cycles", "traffic MB"):
            fig, ax = plt.subplots(figsize=(6.4, 3.8))
            others = [x for x in keys if x != k]
            lines = []
            for group, sub in df.groupby(chip_col + ["strategy"] + [value(o) for o in others]):
                agg = sub.groupby(col)[metric].min().sort_index()
                head = [str(sub[c].iloc[0]) for c in chip_col + ["strategy"]]
                label = ", ".join(head) + "".join(
                    f", {o}={_label(o, sub[o].iloc[0], _num(sub[o].iloc[0]))}" for o in others)
                lines.append((group, agg, label))
            for _, agg, label in sorted(lines, key=lambda x: x[0]):
                ax.plot(agg.index, agg.values, marker="o", label=label)
            ax.set_xlabel(k)
            ax.set_ylabel(f"{metric} ({cost_model} cost model)" if metric == "cycles" and cost_model else metric)
            if col.endswith("(value)"):
                ticks = sorted(df[col].unique())
                if ticks[0] > 0 and ticks[-1] / ticks[0] >= 8:
                    ax.set_xscale("log", base=2)
                ax.set_xticks(ticks)
                ax.set_xticklabels([_label(k, df.loc[df[col] == t, k].iloc[0], t) for t in ticks])
                ax.minorticks_off()
            vals = df[metric].astype(float)
            if vals.min() > 0 and vals.max() / vals.min() >= 10:
                ax.set_yscale("log")
            ax.legend(fontsize=7)
            ax.set_title(f"{metric} against {k}")
            out.append((f"{metric} against {k}", _png(fig)))
    return out

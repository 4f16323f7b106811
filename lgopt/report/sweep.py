"""Chip-parameter sweeps (``lgopt sweep``): the cross product of ``--set`` values, solved in parallel
worker processes, cached on disk by configuration; table, plots, Pareto front and knee."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from lgopt.errors import LgoptError
from lgopt.hw.chip import Chip
from lgopt.model.network import Network, network_digest
from lgopt.report.compare import _png, run_strategy, write_html
from lgopt.strategies.cpsat.common import CpsatSettings
from lgopt.strategies.registry import StrategyOptions, parse_strategy
from lgopt.strategies.settings import Progress, SearchSettings

# --- sweeps -------------------------------------------------------------------------------------------

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


def _init_task() -> None:
    """Ctrl-C is the parent's: it stops the pool (finished configurations are cached) without a traceback
    from every worker."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _sweep_one(args: tuple[str, dict[str, Any], dict[str, str], str, float, int, str, float]) -> dict[str, Any]:
    model_json, chip_base, point, strategy, time_limit, workers, cache_dir, budget = args
    from lgopt.hw.chip import chip_from_dict, with_overrides
    from lgopt.io.problem import network_from_dict

    net = network_from_dict(json.loads(model_json))
    chip = with_overrides(chip_from_dict(chip_base), point)  # the chip file's values too, not just the preset's
    key = hashlib.sha256(json.dumps([network_digest(net), chip.to_dict(), strategy, time_limit],
                                    sort_keys=True).encode()).hexdigest()[:20]
    cfile = Path(cache_dir) / f"{key}.json"
    if cfile.exists():
        return {**json.loads(cfile.read_text()), "cached": True}
    options = StrategyOptions(SearchSettings(), CpsatSettings(time_limit=budget, workers=workers))
    plan, secs, _ = run_strategy(net, chip, parse_strategy(strategy), options)
    row = {**point, "strategy": strategy, "cycles": int(plan.cost["cycles"]), "cost model": chip.cost_model,
           "traffic MB": round(plan.cost["traffic_bytes"] / 1e6, 3), "groups": len(plan.groups),
           "global layers": len(plan.global_layers), "status": plan.status, "seconds": round(secs, 2)}
    cfile.write_text(json.dumps(row))
    return {**row, "cached": False}


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


def sweep(path: str, net: Network, chip: Chip, axes: dict[str, list[str]], strategies: Sequence[str], out: str,
          time_limit: float = 10.0, workers: int = 1, jobs: int = 2, progress: Progress | None = None,
          started: float | None = None) -> pd.DataFrame:
    """Every configuration with every strategy.  ``time_limit`` is wall-clock seconds per configuration,
    the sweep's own work included: ``C`` configurations on ``jobs`` processes end within
    ``ceil(C / jobs) * time_limit`` seconds of ``started`` (``time.perf_counter()``, default now)."""
    import math
    import multiprocessing as mp
    import time
    from concurrent.futures import ProcessPoolExecutor

    from lgopt.hw.chip import with_overrides
    from lgopt.model.network import network_to_dict

    keys = list(axes)
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(axes[k] for k in keys))]
    for p in points:  # validate every configuration up front: one bad value is a one-line error
        with_overrides(chip, p)
    d = Path(out)
    cache = d / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    model_json = json.dumps(network_to_dict(net))
    started = time.perf_counter() if started is None else started
    rounds = math.ceil(len(points) * len(strategies) / max(1, jobs))
    left = time_limit * rounds - (time.perf_counter() - started) - REPORT_SECONDS
    budget = max(0.1, left / rounds - TASK_SECONDS)
    tasks = [(model_json, chip.to_dict(), p, s, time_limit, workers, str(cache), budget) for p in points
             for s in strategies]
    rows = []
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=mp.get_context("fork"),
                             initializer=_init_task) as ex:
        for i, row in enumerate(ex.map(_sweep_one, tasks)):
            rows.append(row)
            if progress:
                progress(f"sweep: {i + 1}/{len(tasks)} configurations")
    df = pd.DataFrame(rows)
    for k in keys:
        num = pd.to_numeric(df[k].map(_num), errors="coerce")
        if num.notna().all():
            df[k + " (value)"] = num
    df.drop(columns=["cached"]).to_csv(d / "sweep.csv", index=False)
    tables = [("sweep", df.drop(columns=["cached"]))]
    notes = [f"{int(df['cached'].sum())} of {len(df)} configurations served from the cache in {cache}"]
    images = _plots_sweep(df, keys)
    numeric = [k + " (value)" for k in keys if k + " (value)" in df]
    lmem = "lmem_bytes (value)" if "lmem_bytes (value)" in df else None
    if numeric:
        for s in strategies:
            sub = df[df["strategy"] == s]
            front = pareto(sub, numeric + ["cycles"])  # every swept parameter, not just the first
            named = ", ".join(c.removesuffix(" (value)") for c in numeric)
            tables.append((f"Pareto front, {named} vs cycles ({s}; smaller is better on each)",
                           front.drop(columns=["cached"])))
            if lmem:
                best = sub["cycles"].min()
                knee = sub[sub["cycles"] <= 1.05 * best].sort_values([lmem] + [c for c in numeric if c != lmem]).iloc[0]
                notes.append(f"{s}: knee = smallest LMEM within 5 % of the best cycles ({best:,}): "
                             f"lmem_bytes={knee['lmem_bytes']} at {int(knee['cycles']):,} cycles"
                             + "".join(f", {k}={knee[k]}" for k in keys if k != "lmem_bytes"))
    md = ([f"# lgopt sweep: {net.name} on {chip.name}\n"]
          + [f"## {h}\n\n{t.astype(object).fillna('-').to_markdown(index=False)}\n" for h, t in tables]
          + [f"- {n}" for n in notes])
    (d / "sweep.md").write_text("\n".join(md) + "\n")
    write_html(d / "sweep.html", f"lgopt sweep: {net.name} on {chip.name}", tables, images, notes)
    return df


def _num(v: str) -> float | None:
    from lgopt.hw.chip import parse_size

    try:
        return float(parse_size(v))
    except LgoptError:
        try:
            return float(v)
        except ValueError:
            return None


def _plots_sweep(df: pd.DataFrame, keys: list[str]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def value(k: str) -> str:  # sort by the number a value stands for: 32K before 128K
        return k + " (value)" if k + " (value)" in df else k

    out = []
    for k in keys:
        col = value(k)
        for metric in ("cycles", "traffic MB"):
            fig, ax = plt.subplots(figsize=(6, 3.6))
            others = [x for x in keys if x != k]
            lines = []
            for (strat, *rest), sub in df.groupby(["strategy"] + [value(o) for o in others]):
                agg = sub.groupby(col)[metric].min().sort_index()
                shown = [sub[o].iloc[0] for o in others]
                label = strat + "".join(f", {o}={v}" for o, v in zip(others, shown))
                lines.append(((strat, *rest), agg, label))
            for _, agg, label in sorted(lines, key=lambda x: x[0]):
                ax.plot(agg.index, agg.values, marker="o", label=label)
            ax.set_xlabel(k)
            ax.set_ylabel(metric)
            if col.endswith("(value)"):
                ax.set_xscale("log", base=2)
                ticks = sorted(df[col].unique())
                ax.set_xticks(ticks)
                ax.set_xticklabels([df.loc[df[col] == t, k].iloc[0] for t in ticks])
                ax.minorticks_off()
            ax.legend(fontsize=7)
            ax.set_title(f"{metric} against {k}")
            out.append((f"{metric} against {k}", _png(fig)))
    return out

"""Strategies side by side: one pandas table per run, written as Markdown, CSV and a self-contained HTML
page with its plots embedded (``lgopt compare``), plus chip-parameter sweeps (``lgopt sweep``)."""

from __future__ import annotations

import base64
import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from lgopt.hw.chip import Chip
from lgopt.model.network import Network
from lgopt.model.plan import Plan
from lgopt.report.parallel import Backend, run_tasks
from lgopt.report.tables import grouped_fraction
from lgopt.report.verdict import verify
from lgopt.strategies.cpsat.common import CpsatSettings
from lgopt.strategies.registry import StrategyChoice, StrategyOptions
from lgopt.strategies.settings import Progress, SearchSettings
from lgopt.tpumlir.space import REFERENCE_MARGIN, REFERENCE_RESERVE_BANKS, ReferenceSpace


def run_strategy(net: Network, chip: Chip, choice: StrategyChoice, options: StrategyOptions
                 ) -> tuple[Plan, float, dict[str, Any]]:
    """Run one strategy, time it, and check its plan with the independent verifier (a plan that breaks a
    constraint is an lgopt bug, whichever strategy built it)."""
    t0 = time.perf_counter()
    plan, extra = choice.run(net, chip, options)
    seconds = time.perf_counter() - t0
    bad = verify(net, plan)
    if bad:
        raise RuntimeError(f"{choice.label} plan for {net.name} fails verification: {bad[0]}")
    return plan, seconds, extra


def _slices(plan: Plan) -> str:
    if not plan.groups:
        return "-"
    ns = sorted({g.n_slices for g in plan.groups})
    hs = sorted({g.h_slices for g in plan.groups})
    return f"N {ns[0]}-{ns[-1]}, H {hs[0]}-{hs[-1]}"


def plan_row(net: Network, chip: Chip, s: StrategyChoice, plan: Plan, seconds: float) -> dict[str, Any]:
    c = plan.cost
    return {
        "model": net.name, "chip": chip.name, "strategy": s.label,
        "groups": len(plan.groups), "ops in groups": sum(len(g.ops) for g in plan.groups),
        "grouped %": round(100 * grouped_fraction(net, plan), 1),
        "global layers": len(plan.global_layers), "slices": _slices(plan),
        "cycles": int(c["cycles"]), "cost model": chip.cost_model, "traffic MB": round(c["traffic_bytes"] / 1e6, 3),
        "peak LMEM %": round(100 * c.get("lmem_peak", 0) / chip.lmem_bytes, 1),
        "bank conflicts": int(c.get("bank_conflicts", 0)), "seconds": round(seconds, 2),
        "status": plan.status, "gap %": round(100 * plan.solver["gap"], 2) if "gap" in plan.solver else None,
        "lower bound": int(c["lower_bound_cycles"]),
        "x LB": round(c["cycles"] / max(1, c["lower_bound_cycles"]), 3),
    }


def add_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """cycles relative to the greedy plan of the same model and chip."""
    base = df[df["strategy"] == "greedy"].set_index(["model", "chip"])["cycles"]
    key = list(zip(df["model"], df["chip"]))
    df["x greedy"] = [round(c / base[k], 4) if k in base.index else None for c, k in zip(df["cycles"], key)]
    return df


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _plots_compare(df: pd.DataFrame, plans: dict[tuple[str, str, str], Plan], nets: dict[str, Network]
                   ) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    for metric, unit in (("cycles", "cycles"), ("traffic MB", "MB")):
        piv = df.pivot_table(index=["model", "chip"], columns="strategy", values=metric)
        fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(piv) + 3), 4))
        piv.plot.bar(ax=ax)
        ax.set_yscale("log")  # models differ by orders of magnitude: a linear axis flattens the small ones
        ax.set_ylabel(f"{unit} (log scale)")
        ax.set_xticklabels([f"{model}\n{chip}" for model, chip in piv.index], rotation=30, ha="right")
        ax.set_xlabel("")
        ax.set_title(f"{metric} per strategy")
        out.append((f"{metric} per strategy", _png(fig)))
    # each plan's groups along the network
    for (model, chip), sub in df.groupby(["model", "chip"]):
        net = nets[model]
        n = len(net.ops)
        fig, ax = plt.subplots(figsize=(10, 0.5 * len(sub) + 1.2))
        for y, strat in enumerate(sub["strategy"]):
            plan = plans[(model, chip, strat)]
            ax.broken_barh([(net.op_index[o], 1) for o in plan.global_layers], (y - 0.4, 0.8), color="#bbbbbb")
            for k, g in enumerate(plan.groups):
                idx = sorted(net.op_index[o] for o in g.ops)
                ax.broken_barh([(i, 1) for i in idx], (y - 0.4, 0.8), color=plt.cm.tab20(k % 20))
        ax.set_yticks(range(len(sub)))
        ax.set_yticklabels(list(sub["strategy"]))
        ax.set_xlim(0, n)
        ax.set_xlabel("op index in the network's order (grey: global layers; a colour per group)")
        ax.set_title(f"groups along {model} on {chip}")
        out.append((f"groups along {model} on {chip}", _png(fig)))
    return out


def _allocation_pictures(plans: dict[tuple[str, str, str], Plan], limit: int = 4) -> list[tuple[str, str]]:
    from lgopt.report.tables import draw_group

    cands = []
    for key, plan in plans.items():
        for k, g in enumerate(plan.groups):
            cands.append((len(g.ops) * g.num_slices, key, k))
    out = []
    for _, (model, chip, strat), k in sorted(cands, key=lambda x: (-x[0], x[1], x[2]))[:limit]:
        buf = io.BytesIO()
        draw_group(plans[(model, chip, strat)], k, buf)
        out.append((f"LMEM allocation: {model} on {chip}, {strat}, group {k}",
                    base64.b64encode(buf.getvalue()).decode()))
    return out


def write_html(path: Path, title: str, tables: list[tuple[str, pd.DataFrame]], images: list[tuple[str, str]],
               notes: list[str]) -> None:
    css = ("body{font-family:system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;"
           "font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f0f0f0}"
           "td:nth-child(-n+3){text-align:left}img{margin:8px 0}.plot{overflow-x:auto}h2{margin-top:28px}")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>{css}</style></head>"
             f"<body><h1>{title}</h1>"]
    for h, df in tables:
        parts.append(f"<h2>{h}</h2>" + df.to_html(index=False, na_rep="-", border=0))
    if notes:
        parts.append("<h2>notes</h2><ul>" + "".join(f"<li>{n}</li>" for n in notes) + "</ul>")
    for caption, b64 in images:
        # shown at its own size (a wide picture scrolls) rather than shrunk to the page until unreadable
        parts.append(f"<h2>{caption}</h2><div class='plot'><img alt='{caption}' src='data:image/png;base64,{b64}'>"
                     "</div>")
    parts.append("</body></html>")
    path.write_text("\n".join(parts))


@dataclass(frozen=True)
class CompareTask:
    """One model with one strategy as plain data, solved in a worker (CP-SAT objects do not pickle); the
    CP-SAT worker count and seed travel in ``options``, explicit in every task."""

    model: dict[str, Any]
    chip: dict[str, Any]
    strategy: str
    options: StrategyOptions


def compare_one(task: CompareTask) -> tuple[dict[str, Any], Plan, dict[str, Any]]:
    """Solve one (model, strategy) pair: its table row, its plan and the strategy's notes."""
    from lgopt.hw.chip import chip_from_dict
    from lgopt.io.problem import network_from_dict
    from lgopt.strategies.registry import parse_strategy

    net = network_from_dict(task.model)
    chip = chip_from_dict(task.chip)
    s = parse_strategy(task.strategy)
    plan, secs, extra = run_strategy(net, chip, s, task.options)
    return plan_row(net, chip, s, plan, secs), plan, extra


def compare(models: Sequence[tuple[str, Network]], chip: Chip, strategies: Sequence[StrategyChoice], out: str | None,
            search: SearchSettings = SearchSettings(), time_limit: float = 60.0, workers: int = 2,
            progress: Progress | None = None, save_plans: bool = False, reference: str | None = None,
            base_groups: str | None = None, margin: float = REFERENCE_MARGIN,
            reserve_banks: int = REFERENCE_RESERVE_BANKS, backend: Backend = Backend("sequential", 1),
            seed: int = 0, deterministic: float | None = None) -> pd.DataFrame:
    """Every model with every strategy, each pair one task on ``backend``; rows in the order of
    ``models`` then ``strategies`` whatever order the tasks finish in.  ``deterministic`` (units) replaces
    ``time_limit`` (wall seconds) as cpsat's budget: the same rows on any backend or machine."""
    from lgopt.model.network import network_to_dict

    notes: list[str] = []
    plans: dict[tuple[str, str, str], Plan] = {}
    nets: dict[str, Network] = {}
    # a given grouping lgopt cannot build exactly is relaxed (and each change noted), so it still has a row
    cpsat = CpsatSettings(time_limit=time_limit if deterministic is None else deterministic, workers=workers,
                          seed=seed, deterministic=deterministic is not None)
    space = None if reference is None else ReferenceSpace(reference, base_groups, margin, reserve_banks)
    options = StrategyOptions(search, cpsat, exact=False, space=space)
    tasks: list[CompareTask] = []
    for _path, net in models:
        nets[net.name] = net
        mdict = network_to_dict(net)
        for s in strategies:
            if s.label == "tpu-mlir" and not _cache_fits(s.arg, net):
                if len(models) == 1:
                    notes.append(f"{net.name}: no op of TPU-MLIR cache {Path(str(s.arg)).name} is in this model")
                continue
            spec = s.label if s.arg is None else f"{s.label}={s.arg}"
            tasks.append(CompareTask(mdict, chip.to_dict(), spec, options))
    results: list[Any] = [None] * len(tasks)
    for done, (i, res) in enumerate(run_tasks(compare_one, tasks, backend), 1):
        results[i] = res
        if progress:
            t = tasks[i]
            progress(f"compare: {done}/{len(tasks)} done ({t.model['name']} with {t.strategy})")
    rows = []
    for (row, plan, extra), t in zip(results, tasks):
        name = row["model"]
        rows.append(row)
        plans[(name, chip.name, row["strategy"])] = plan
        if extra:
            un = extra["unmapped"]
            arg = t.strategy.split("=", 1)[1] if "=" in t.strategy else ""
            notes.append(f"{name}: TPU-MLIR cache {Path(arg).name}: {extra['groups_scored']} of "
                         f"{extra['groups_in_cache']} groups scored, {extra['ops_mapped']} ops mapped, "
                         f"{len(un)} names not found{(': ' + ', '.join(un[:8])) if un else ''}, "
                         f"{extra['casts_skipped']} inserted casts skipped")
            notes += [f"{name}: {x}" for x in extra["adjusted"] + extra["dropped"]]
    df = add_ratios(pd.DataFrame(rows))
    if out:
        d = Path(out)
        d.mkdir(parents=True, exist_ok=True)
        df.to_csv(d / "results.csv", index=False)
        md = [f"# lgopt compare on {chip.name}\n", df.astype(object).fillna("-").to_markdown(index=False), ""]
        md += [f"- {n}" for n in notes]
        (d / "report.md").write_text("\n".join(md) + "\n")
        images = _plots_compare(df, plans, nets) + _allocation_pictures(plans)
        write_html(d / "report.html", f"lgopt: strategies on {chip.name}", [("results", df)], images, notes)
        if save_plans:
            from lgopt.io.planfile import save_plan

            for (model, chipname, strat), plan in plans.items():
                save_plan(plan, d / "plans" / f"{model}.{chipname}.{strat}.json")
    return df


def _cache_fits(cache: str | None, net: Network) -> bool:
    """A cache belongs to a model when most of its (non-cast) op names are the model's tensors."""
    from lgopt.tpumlir.cache import map_groups, read_cache

    m = map_groups(net, read_cache(str(cache)))
    return sum(len(ops) for ops, _ in m.groups) > len(m.unmapped)

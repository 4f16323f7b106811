"""Tables and pictures of plans (pandas for every table, matplotlib for pictures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from lgopt.hw.chip import changes, chip_from_dict
from lgopt.model import ops as opsem
from lgopt.model.network import Network
from lgopt.model.plan import Plan


def _short(name: str, width: int = 28) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1):]


def group_table(net: Network, plan: Plan) -> pd.DataFrame:
    """One row per step (group or global layer), in execution order; then, where the cost model has them, the
    global Casts of the graph's f32 inputs and outputs (:func:`lgopt.cost.cycles.io_cast_cost`), so that the
    rows add up to the plan's total."""
    chip = chip_from_dict(plan.chip)
    from lgopt.cost.cycles import global_layer_cost, io_cast_cost

    rows: list[dict[str, Any]] = []
    w_col = any(g.w_slices > 1 for g in plan.groups)  # a W column only for plans that slice columns
    c_col = any(g.c_slices > 1 for g in plan.groups)  # a C column only for plans that slice channels (heads)
    for kind, v in plan.steps:
        if kind == "group":
            g = plan.groups[v]
            rows.append({"step": f"group {v}", "ops": len(g.ops), "first op": _short(g.ops[0]),
                         "last op": _short(g.ops[-1]), "N": g.n_slices, **({"C": g.c_slices} if c_col else {}),
                         "H": g.h_slices,
                         **({"W": g.w_slices} if w_col else {}),
                         "LMEM %": round(100 * g.cost.get("lmem_peak", 0) / chip.lmem_bytes, 1),
                         "cycles": int(g.cost.get("cycles", 0)),
                         "traffic MB": round(g.cost.get("traffic_bytes", 0) / 1e6, 3),
                         "bank conflicts": int(g.cost.get("bank_conflicts", 0)),
                         "LMEM hand-over": "/".join(k for k, x in (("in", g.kept_in), ("out", g.kept_out)) if x),
                         **({"weights": "by columns" if g.weight_cols else ""} if w_col else {})})
        else:
            c = global_layer_cost(chip, net, net.op(v))
            rows.append({"step": "global", "ops": 1, "first op": _short(v), "last op": net.op(v).type, "N": 1,
                         **({"C": 1} if c_col else {}), "H": 1, **({"W": 1} if w_col else {}), "LMEM %": float("nan"),
                         "cycles": c["cycles"],
                         "traffic MB": round(c["traffic_bytes"] / 1e6, 3), "bank conflicts": 0,
                         "LMEM hand-over": "", **({"weights": ""} if w_col else {})})
    casts = io_cast_cost(chip, net, plan)
    if casts["cycles"]:  # the graph's f32 inputs and outputs no group converts: global Casts beside the steps
        rows.append({"step": "global casts", "ops": 0, "first op": "(f32 inputs / outputs)", "last op": "Cast",
                     "N": 1, **({"C": 1} if c_col else {}), "H": 1, **({"W": 1} if w_col else {}),
                     "LMEM %": float("nan"),
                     "cycles": casts["cycles"], "traffic MB": round(casts["traffic_bytes"] / 1e6, 3),
                     "bank conflicts": 0, "LMEM hand-over": "", **({"weights": ""} if w_col else {})})
    return pd.DataFrame(rows)


def collapse_globals(df: pd.DataFrame) -> pd.DataFrame:
    """Runs of consecutive global layers as one row, so a terminal table stays short."""
    out: list[dict[str, Any]] = []
    for rec in df.to_dict("records"):
        if rec["step"] == "global" and out and out[-1]["step"].startswith("global"):
            last = out[-1]
            last["ops"] += 1
            last["step"] = f"global x{last['ops']}"
            last["last op"] = rec["last op"]
            last["cycles"] += rec["cycles"]
            last["traffic MB"] = round(last["traffic MB"] + rec["traffic MB"], 3)
        else:
            out.append(dict(rec))
    return pd.DataFrame(out)


def global_reasons(net: Network, plan: Plan) -> list[str]:
    """How many ops the plan groups, then why the others run as global layers, one line per cause, most
    frequent first: a plan that groups little (or nothing) says so and why, instead of reporting an optimum
    over a space with nothing in it.  A cause is the reason up to its first ``": "`` (the shapes after it
    differ from op to op; the first op's are shown as an example); an op the chip's compiler keeps out of
    groups gives the chip's reason."""
    from collections import Counter

    layers = plan.global_layers
    grouped = sum(len(g.ops) for g in plan.groups)
    head = f"grouped: {grouped} of {len(net.ops)} ops ({100 * grouped / max(1, len(net.ops)):.1f}%) " \
           f"in {len(plan.groups)} groups"
    if not layers:
        return [head]
    chip = chip_from_dict(plan.chip)
    causes: Counter[str] = Counter()
    example: dict[str, str] = {}
    for v in layers:
        op = net.op(v)
        reason = (op.reason or opsem.global_type_reason(op.type)) if not op.local else \
            chip.group_rule(op.type) or f"{op.type}, a local op the search left out of its groups (none fits, " \
                                        "or each costs more by the cost model)"
        cause, _, detail = reason.partition(": ")
        causes[cause] += 1
        example.setdefault(cause, f"{detail}, {v}" if detail else v)
    head = f"nothing grouped: all {len(layers)} ops run as global layers" if not plan.groups else \
        f"{head}; {len(layers)} run as global layers"
    return [head + ":"] + [f"  {n:>4} {cause} (e.g. {example[cause]})" for cause, n in causes.most_common()]


def grouped_fraction(net: Network, plan: Plan) -> float:
    """The fraction of the network's ops that run inside a group."""
    return sum(len(g.ops) for g in plan.groups) / max(1, len(net.ops))


def summary(net: Network, plan: Plan, seconds: float | None = None) -> dict[str, Any]:
    c = plan.cost
    chip = chip_from_dict(plan.chip)
    return {
        "model": plan.model,
        "chip": chip.name,
        "strategy": plan.strategy,
        "status": plan.status,
        "cycles": int(c["cycles"]),
        "cost_model": chip.cost_model,  # what produced the cycle counts
        "time_ms": round(c["cycles"] / (chip.tiu_mhz * 1e3), 4),
        "traffic_bytes": int(c["traffic_bytes"]),
        "groups": len(plan.groups),
        "ops_in_groups": sum(len(g.ops) for g in plan.groups),
        "grouped_fraction": round(grouped_fraction(net, plan), 4),
        "global_layers": len(plan.global_layers),
        "lmem_peak_bytes": int(c.get("lmem_peak", 0)),
        "bank_conflicts": int(c.get("bank_conflicts", 0)),
        "lower_bound_cycles": int(c["lower_bound_cycles"]),
        "lower_bound_traffic_bytes": int(c["lower_bound_traffic_bytes"]),
        "ratio_to_lower_bound": round(c["cycles"] / max(1, c["lower_bound_cycles"]), 4),
        "seconds": seconds if seconds is not None else plan.solver.get("seconds"),
        **{k: v for k, v in plan.solver.items() if k in ("bound", "solver_status")},
        # a percentage, as every other place shows the gap (the plan file's solver record keeps the fraction)
        **({"gap_percent": round(100 * float(plan.solver["gap"]), 4)} if "gap" in plan.solver else {}),
        **({"chip_changes": {k: [a, b] for k, (a, b) in changes(chip).items()}} if changes(chip) else {}),
        "global_reasons": global_reasons(net, plan),
    }


MAX_PICTURE_INCHES = 18.0  # about 2,000 pixels at the pictures' 110 dpi


def _buffer_label(b: Any, inches: float) -> str:
    """What a block says: its id and what it holds (``w:`` weights of an op, ``s:`` its scratch), the name cut
    from the left to what the block's width shows."""
    prefix = {"weight": "w:", "scratch": "s:", "convert": "f32:"}.get(b.kind, "")
    room = max(0, int(inches * 12) - len(str(b.id)) - 1 - len(prefix))  # about 12 characters an inch at 6 pt
    name = b.name if len(b.name) <= room else ("…" + b.name[-(room - 1):] if room > 4 else "")
    return f"{b.id} {prefix}{name}".strip() if name else str(b.id)


def draw_group(plan: Plan, k: int, path: Any, title: str | None = None) -> Any:
    """The seed's picture of squares: timesteps across, per-lane LMEM addresses up, bank lines dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    if not 0 <= k < len(plan.groups):
        from lgopt.errors import LgoptError

        raise LgoptError(f"plan has {len(plan.groups)} groups; --group {k} does not exist")
    g = plan.groups[k]
    chip = chip_from_dict(plan.chip)
    T = len(g.rows)
    colors = {"activation": "#4c8bd6", "weight": "#e0a030", "scratch": "#9a9a9a", "convert": "#7fb3e8"}
    width = min(MAX_PICTURE_INCHES, max(7.0, 0.6 * T + 4))  # a long table narrows its columns, not the page
    fig, ax = plt.subplots(figsize=(width, 6))
    top = max([b.offset + b.size for b in g.buffers] + [1])
    col = (width - 3) / max(1, T)  # inches per timestep
    for b in g.buffers:
        for x0, x1 in b.spans(T):
            ax.add_patch(Rectangle((x0, b.offset), x1 - x0, b.size, facecolor=colors.get(b.kind, "#ccc"),
                                   edgecolor="black", linewidth=0.6, alpha=0.85))
            if b.size > top * 0.03:
                ax.text((x0 + x1) / 2, b.offset + b.size / 2, _buffer_label(b, (x1 - x0) * col), ha="center",
                        va="center", fontsize=6)
    bank = chip.bank_bytes
    limit = min(chip.lmem_bytes, ((top // bank) + 1) * bank)
    for y in range(0, limit + 1, bank):
        ax.axhline(y, color="red", linestyle="--", linewidth=0.5)
    ax.set_xlim(0, T)
    ax.set_ylim(0, limit)
    every = max(1, -(-T // 40))  # at most 40 tick labels, however long the table
    ax.set_xticks([r + 0.5 for r in range(0, T, every)])
    ax.set_xticklabels([f"T{r}" for r in range(0, T, every)], fontsize=7)
    ax.set_xlabel("timestep (rows of the pipelined table)")
    ax.set_ylabel(f"LMEM offset per lane (bytes; banks of {bank} B)")
    handles = [Rectangle((0, 0), 1, 1, facecolor=c) for c in colors.values()]
    ax.legend(handles, list(colors), loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.set_title(title or f"{plan.model} on {chip.name}: group {k} ({len(g.ops)} ops, N/H slices "
                           f"{g.n_slices}/{g.h_slices}, peak {g.cost.get('lmem_peak', top)} B)", fontsize=9)
    fig.tight_layout()
    if isinstance(path, (str, Path)):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path

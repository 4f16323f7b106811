"""Greedy vs CP-SAT on every bundled problem and chip of the issue (not a test: it measures).

    python benchmarks/run.py [--chips bm1684x,bm1688,cv181x] [--problems resnet18,...] [--time-limit 60]

Writes the table, one row per problem x chip, to its section of benchmarks/results/solver.md (and every
column to benchmarks/out/greedy_vs_cpsat.csv, not tracked), and prints
the geometric-mean ratio cpsat/greedy over the rows where greedy is not already at the lower bound.
Every plan is checked by the independent verifier; a failing plan aborts the run.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import pandas as pd
from common import OUT, RESULTS, write_section

from lgopt.check.verify import verify_plan
from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_problem
from lgopt.strategies.cpsat.optimise import CpsatSettings, optimise
from lgopt.strategies.greedy import greedy

ROOT = Path(__file__).resolve().parents[1]


def cold_caches() -> None:
    """Forget lgopt's memoised per-op figures: each run is timed as if it were the process's first (otherwise
    a problem solved after an identical one, e.g. a fixture and its bundled twin, runs faster)."""
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("lgopt."):
            for obj in list(vars(mod).values()):
                if callable(getattr(obj, "cache_clear", None)):
                    obj.cache_clear()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chips", default="bm1684x,bm1688,cv181x")
    ap.add_argument("--problems", default=",".join(sorted(p.stem for p in (ROOT / "problems").glob("*.json"))))
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(OUT / "greedy_vs_cpsat"), help="OUT.csv: every column")
    args = ap.parse_args()
    rows = []
    for name in args.problems.split(","):
        net = load_problem(ROOT / "problems" / f"{name}.json")
        for chip_name in args.chips.split(","):
            chip = get_chip(chip_name)
            cold_caches()
            t0 = time.perf_counter()
            g = greedy(net, chip)
            tg = time.perf_counter() - t0
            cold_caches()
            t0 = time.perf_counter()
            c = optimise(net, chip, st=CpsatSettings(time_limit=args.time_limit, workers=args.workers))
            tc = time.perf_counter() - t0
            for plan in (g, c):
                bad = verify_plan(net, plan)
                if bad:
                    raise SystemExit(f"{name} {chip_name} {plan.strategy}: plan fails verification: {bad[0]}")
            lb = c.cost["lower_bound_cycles"]
            rows.append({
                "problem": name, "chip": chip_name,
                "greedy cycles": g.cost["cycles"], "cpsat cycles": c.cost["cycles"],
                "greedy traffic MB": round(g.cost["traffic_bytes"] / 1e6, 2),
                "cpsat traffic MB": round(c.cost["traffic_bytes"] / 1e6, 2),
                "greedy groups": len(g.groups), "cpsat groups": len(c.groups),
                "status": c.status, "gap %": round(100 * c.solver["gap"], 2),
                "greedy s": round(tg, 2), "cpsat s": round(tc, 2),
                "cpsat/greedy": round(c.cost["cycles"] / g.cost["cycles"], 4),
                "greedy/LB": round(g.cost["cycles"] / lb, 3), "cpsat/LB": round(c.cost["cycles"] / lb, 3),
            })
            print(pd.DataFrame(rows[-1:]).to_string(index=False, header=len(rows) == 1), flush=True)
    df = pd.DataFrame(rows)
    improvable = df[df["greedy/LB"] > 1.0001]
    geo = math.exp(sum(math.log(r) for r in improvable["cpsat/greedy"]) / max(1, len(improvable)))
    out = Path(f"{args.out}.csv")
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    summary = (f"\n{len(df)} runs; cpsat <= greedy in {int((df['cpsat/greedy'] <= 1).sum())}; "
               f"proven optimal in {int((df['status'] == 'optimal').sum())}; geometric mean cpsat/greedy over the "
               f"{len(improvable)} runs where greedy is above the lower bound: {geo:.4f} "
               f"({100 * (1 - geo):.1f}% fewer cycles); time limit {args.time_limit:g} s, {args.workers} workers\n")
    write_section(RESULTS / "solver.md", "greedy vs cpsat",
                  "## greedy vs cpsat (`python benchmarks/run.py`)\n\n" + df.to_markdown(index=False) + "\n" + summary)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())

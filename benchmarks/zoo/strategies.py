"""lgopt's own strategies on every model of the zoo (issue 37: "every plan lgopt's own strategies produce on every
zoo model passes its verifier"): greedy and cpsat, in lgopt's own space (no TPU-MLIR), each plan verified.

    python benchmarks/zoo/strategies.py EXPORT_DIR [--chips bm1684x,bm1688] [--time-limit 10] [--workers 2]
        [--summary benchmarks/results/zoo.md]

``EXPORT_DIR`` is what ``export.py`` wrote.  For each exported case and chip, the weightless file is imported (F16)
and solved with ``greedy`` and with ``cpsat`` (``--time-limit`` seconds, ``--workers`` CP-SAT workers), and each
plan goes through the independent verifier.  A plan the verifier rejects is a bug, whichever strategy made it; a
strategy that fails is counted apart from a model lgopt cannot import (exit 2 with one line).  The table goes into
its own section of the zoo's results document; the rows into ``EXPORT_DIR/run/strategies.csv``.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from models import by_id

from lgopt.cost.registry import default_cost_model
from lgopt.errors import LgoptError
from lgopt.hw.chip import get_chip
from lgopt.io.problem import load_model
from lgopt.report.document import write_section
from lgopt.report.verdict import verify
from lgopt.strategies.cpsat.common import CpsatSettings
from lgopt.strategies.registry import StrategyOptions, parse_strategy

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = ROOT / "benchmarks" / "results" / "zoo.md"
STRATEGIES = ("greedy", "cpsat")


def solve_case(onnx: Path, chip_name: str, time_limit: float, workers: int) -> list[dict[str, Any]]:
    """One row per strategy: its status, the plan's cycles and whether the verifier accepts it."""
    try:
        net = load_model(str(onnx), dtype="f16")
    except LgoptError as e:
        return [{"strategy": s, "outcome": "import refused", "why": str(e)[:200]} for s in STRATEGIES]
    chip = get_chip(chip_name)
    chip = replace(chip, cost_model=default_cost_model(chip, "f16"))
    rows = []
    for s in STRATEGIES:
        t0 = time.perf_counter()
        try:
            plan, _ = parse_strategy(s).run(net, chip, StrategyOptions(
                cpsat=CpsatSettings(time_limit=time_limit, workers=workers)))
        except Exception as e:  # noqa: BLE001 - any failure of a strategy is a finding, recorded with its type
            rows.append({"strategy": s, "outcome": f"failed ({type(e).__name__})", "why": str(e)[:200],
                         "seconds": round(time.perf_counter() - t0, 1)})
            continue
        bad = verify(net, plan)
        rows.append({"strategy": s, "outcome": "verified" if not bad else "REJECTED by the verifier",
                     "why": str(bad[0])[:200] if bad else "", "status": plan.status,
                     "cycles": plan.cost.get("cycles"), "groups": len(plan.groups),
                     "seconds": round(time.perf_counter() - t0, 1)})
    return rows


def summary(rows: list[dict[str, Any]]) -> str:
    cases = {(r["id"], r["chip"]) for r in rows}
    lines = ["## lgopt's own strategies on every zoo model", "",
             "`benchmarks/zoo/strategies.py`: greedy and cpsat in lgopt's own space (no TPU-MLIR), on each exported "
             "weightless model, F16, each plan through the independent verifier; cycles by the chip's default cost "
             "model. A rejected plan would be a bug of lgopt's.", "",
             "| strategy | (case, chip) | verified | rejected by the verifier | strategy failed | import refused |",
             "|---|---:|---:|---:|---:|---:|"]
    for s in STRATEGIES:
        mine = [r for r in rows if r["strategy"] == s]
        count = {k: sum(1 for r in mine if r["outcome"].startswith(k)) for k in ("verified", "REJECTED", "failed",
                                                                                  "import")}
        lines.append(f"| {s} | {len(mine)} | {count['verified']} | {count['REJECTED']} | {count['failed']} | "
                     f"{count['import']} |")
    odd = [r for r in rows if r["outcome"] != "verified"]
    lines += ["", f"{len(cases)} (case, chip) pairs."]
    if odd:
        lines += ["", "Not verified:", ""] + [f"- {r['id']} / {r['chip']} / {r['strategy']}: {r['outcome']}: {r['why']}"
                                              for r in odd]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export_dir", type=Path)
    ap.add_argument("--chips", default="bm1684x,bm1688")
    ap.add_argument("--time-limit", type=float, default=10.0, help="cpsat's wall seconds (default 10)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--summary", type=Path, default=SUMMARY)
    a = ap.parse_args(argv)
    cases = by_id()
    with open(a.export_dir / "manifest.csv", newline="") as f:
        exported = [r for r in csv.DictReader(f) if r["status"] == "ok" and r["id"] in cases]
    rows: list[dict[str, Any]] = []
    for r in exported:
        for chip in a.chips.split(","):
            for row in solve_case(a.export_dir / f"{r['id']}.weightless.onnx", chip, a.time_limit, a.workers):
                rows.append({"id": r["id"], "chip": chip, **row})
                print(f"  {r['id']} {chip} {row['strategy']}: {row['outcome']}", file=sys.stderr)
    out = a.export_dir / "run" / "strategies.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    fields = sorted({k for r in rows for k in r})
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    write_section(a.summary, "zoo-strategies", summary(rows))
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

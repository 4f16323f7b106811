"""Are the plans the same before and after a change?  Bit for bit, through the command line only.

    python benchmarks/same_plans.py record DIR [--src PATH]     # solve everything, write DIR/*.plan.json
    python benchmarks/same_plans.py compare DIR [--src PATH]    # solve again, diff against DIR

It drives ``lgopt solve`` in a subprocess, so it works across any refactoring of lgopt's modules (``--src``
puts another checkout first on ``PYTHONPATH``, e.g. a ``git worktree`` of the commit before the change).
Every bundled problem runs on bm1684x, bm1688 and cv181x with the greedy strategy, and with cpsat where
that strategy proves optimality well inside its limit (a run stopped by a wall-clock limit depends on the
machine's speed, so it cannot be compared bit for bit; those pairs are listed in ``TIMED``).  The plan
JSON is compared whole except for the wall-clock fields (``solver.seconds``).  Exit 0 when every plan
is identical, 1 naming each difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHIPS = ("bm1684x", "bm1688", "cv181x")
# cpsat runs that end at the time limit on this project's 2-core machine: their plan depends on wall time
TIMED = {("yolov5s", "bm1684x"), ("yolov5s", "bm1688"), ("fixture_yolov5s_like", "bm1684x"),
         ("fixture_yolov5s_like", "bm1688"), ("mobilenet_v2", "bm1684x")}
CPSAT_LIMIT = "60"
COST_MODEL = "analytic"  # every plan is priced by the same model before and after (the default before 2026-11-27)


def runs() -> list[tuple[str, str, str]]:
    out = []
    for problem in sorted(p.stem for p in (ROOT / "problems").glob("*.json")):
        for chip in CHIPS:
            out.append((problem, chip, "greedy"))
            if (problem, chip) not in TIMED:
                out.append((problem, chip, "cpsat"))
    return out


def normalise(plan: dict) -> dict:
    """The plan without the fields that measure wall-clock time."""
    solver = dict(plan.get("solver", {}))
    solver.pop("seconds", None)
    return {**plan, "solver": solver}


def solve(problem: str, chip: str, strategy: str, out: Path, src: str | None) -> dict:
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-c", "import sys; from lgopt.cli import main; sys.exit(main())", "solve",
           str(ROOT / "problems" / f"{problem}.json"), "--chip", chip, "--strategy", strategy,
           "--workers", "2", "--seed", "0", "--json", "-o", str(out),
           "--set", f"cost_model={COST_MODEL}"]  # named: the CLI's default depends on the chip and the dtype
    if strategy == "cpsat":
        cmd += ["--time-limit", CPSAT_LIMIT]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=src or ROOT)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[3:])}: exit {r.returncode}: {r.stderr.strip()}")
    return normalise(json.loads(out.read_text()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("record", "compare"))
    ap.add_argument("dir")
    ap.add_argument("--src", help="checkout whose lgopt package to run (default: the installed one)")
    ap.add_argument("--only", help="comma-separated problem names")
    args = ap.parse_args()
    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    differ = 0
    for problem, chip, strategy in runs():
        if only and problem not in only:
            continue
        name = f"{problem}.{chip}.{strategy}"
        if args.mode == "record":
            plan = solve(problem, chip, strategy, base / f"{name}.plan.json", args.src)
            print(f"recorded {name}: {plan['cost']['cycles']:,} cycles, {plan['status']}", flush=True)
            continue
        want = normalise(json.loads((base / f"{name}.plan.json").read_text()))
        if want.get("status") == "time_limit":  # stopped by the wall clock when recorded: not comparable
            print(f"skipped {name} (recorded at its time limit)", flush=True)
            continue
        got = solve(problem, chip, strategy, base / f"{name}.new.plan.json", args.src)
        if got == want:
            print(f"same {name}", flush=True)
        else:
            differ += 1
            keys = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
            print(f"DIFFERENT {name}: {', '.join(keys)}", flush=True)
    if args.mode == "compare":
        print(f"{differ} of the compared plans differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

"""The exact packer on lgopt's own groups, before and after the search (not a test: it measures).

    python benchmarks/pack_groups.py [--problems resnet18,...] [--chips bm1684x,bm1688,cv181x]
                                     [--time-limit 5] [--repeat 2] [--out benchmarks/pack_groups]

Every group of the greedy plan of each bundled problem and chip is packed three ways, each into the
chip's LMEM and into tighter capacities (the group's peak live bytes, the lower bound, and halfway
between it and the height the plan's allocation uses), with bank rule ``off`` and ``hard``:

* ``before``: what the packer did before the search: lowest fit, then CP-SAT's NoOverlap2D;
* ``after``: :func:`lgopt.group.pack.pack` as it is now (lowest fit, the search, CP-SAT if needed).

``time-limit`` is the packer's effort (5 is what ``lgopt solve`` gives a group that the greedy orders
cannot place), with one CP-SAT worker.  Every packing is checked by the independent validator (and the
hard bank pairs).  Each instance is timed ``--repeat`` times and the fastest run counts (the machine
is shared; the answers are deterministic).  Instances the lowest fit answers are the same both ways:
they are counted, not timed.  Writes OUT.csv (every instance) and OUT.md (a summary by bank rule and
capacity, the instances ``after`` takes longer to pack than ``before`` beyond 20 ms of noise or no
longer packs, and the largest gains).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lgopt.group.alloc import conflict_pairs, pack_items  # noqa: E402
from lgopt.group.handover import without_kept  # noqa: E402
from lgopt.group.pack import check_packing, first_fit, pack, peak_live_bytes, shared_banks  # noqa: E402
from lgopt.group.packsearch import PackItem, PackProblem  # noqa: E402
from lgopt.group.packsearch.solver import solve  # noqa: E402
from lgopt.hw.chip import get_chip  # noqa: E402
from lgopt.hw.layout import align_up  # noqa: E402
from lgopt.io.problem import load_problem  # noqa: E402
from lgopt.strategies.greedy import greedy  # noqa: E402

NOISE = 0.02  # seconds: a difference below this is timer noise, not a slower packer
FOUND = ("optimal", "feasible")


def timed(items, cap, engine: str, pairs, bank_bytes: int, rule: str, kw: dict, repeat: int):
    """(result, fastest seconds) of ``repeat`` runs; the packing is validated (hard pairs included)."""
    best = None
    res = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = pack(items, cap, engine=engine, **kw)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    assert res is not None and best is not None
    if res.found:
        bad = check_packing(items, res.offsets, cap, kw["align"])
        if bad is None and rule == "hard" and shared_banks(items, res.offsets, pairs, bank_bytes):
            bad = "a hard bank pair shares a bank"
        if bad:
            raise SystemExit(f"invalid packing: {bad}")
    return res, best


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default=",".join(sorted(p.stem for p in (ROOT / "problems").glob("*.json"))))
    ap.add_argument("--chips", default="bm1684x,bm1688,cv181x")
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "pack_groups"))
    args = ap.parse_args()
    solve(PackProblem((PackItem("a", 1, ((0, 1),)),), 1))  # load the compiled search before anything is timed
    pack([PackItem("a", 1, ((0, 1),)), PackItem("b", 1, ((0, 1),))], 1, engine="cpsat")  # and OR-tools
    rows = []
    easy = 0
    for name in args.problems.split(","):
        net = load_problem(ROOT / "problems" / f"{name}.json")
        for chip_name in args.chips.split(","):
            chip = get_chip(chip_name)
            plan = greedy(net, chip)
            for gi, g in enumerate(plan.groups):
                inner = without_kept(g)
                items = pack_items(inner)
                if not items:
                    continue
                a = chip.align_bytes
                low = peak_live_bytes(items, a)
                used = max(b.offset + b.size for b in inner.buffers)
                kinds = {low: "peak live", align_up((low + used) // 2, a): "halfway", chip.lmem_bytes: "LMEM"}
                pairs = [(str(x), str(y)) for x, y in map(sorted, conflict_pairs(net, inner))]
                for cap, kind in sorted(kinds.items()):
                    for rule in ("off", "hard"):
                        if rule == "off" and first_fit(items, cap, a) is not None:
                            easy += 1
                            continue
                        kw = dict(align=a, conflicts=pairs, bank_bytes=chip.bank_bytes, bank_rule=rule,
                                  time_limit=args.time_limit, workers=1)
                        before, tb = timed(items, cap, "cpsat", pairs, chip.bank_bytes, rule, kw, args.repeat)
                        after, ta = timed(items, cap, "auto", pairs, chip.bank_bytes, rule, kw, args.repeat)
                        rows.append({"problem": name, "chip": chip_name, "group": gi, "buffers": len(items),
                                     "capacity": cap, "kind": kind, "banks": rule,
                                     "before": before.status, "before s": round(tb, 3),
                                     "after": after.status, "after s": round(ta, 3),
                                     "answered by": after.engine, "search work": after.work})
                        print(pd.DataFrame(rows[-1:]).to_string(index=False, header=len(rows) == 1), flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(f"{args.out}.csv", index=False)
    packs_before = df["before"].isin(FOUND)
    slower = df[packs_before & (df["after s"] > df["before s"] + NOISE)]
    lost = df[packs_before & ~df["after"].isin(FOUND)]

    def counts(d: pd.DataFrame, col: str) -> str:
        return (f"{int(d[col].isin(FOUND).sum())} / {int((d[col] == 'infeasible').sum())} / "
                f"{int((d[col] == 'unknown').sum())}")

    summary = pd.DataFrame([{"banks": rule, "capacity": kind, "instances": len(d),
                             "before: packed / infeasible / unknown": counts(d, "before"),
                             "after: packed / infeasible / unknown": counts(d, "after"),
                             "before s": round(d["before s"].sum(), 2), "after s": round(d["after s"].sum(), 2),
                             "after slower": int((d["before"].isin(FOUND)
                                                  & (d["after s"] > d["before s"] + NOISE)).sum())}
                            for (rule, kind), d in df.groupby(["banks", "kind"], sort=False)])
    gains = df.assign(gain=df["before s"] - df["after s"]).nlargest(15, "gain").drop(columns="gain")
    line = (f"{len(df)} instances the lowest fit does not answer (and {easy} it does, the same both ways). "
            f"Before: {counts(df, 'before')} packed / proved infeasible / unknown; after: {counts(df, 'after')}. "
            f"Of the {int(packs_before.sum())} packed before, {len(slower)} take longer after (beyond "
            f"{NOISE * 1000:.0f} ms) and {len(lost)} are no longer packed.  Total seconds: before "
            f"{df['before s'].sum():.1f}, after {df['after s'].sum():.1f}.")
    Path(f"{args.out}.md").write_text(
        "# The exact packer on lgopt's groups, before and after the search\n\n"
        f"`python benchmarks/pack_groups.py --time-limit {args.time_limit:g} --repeat {args.repeat}` (2 cores, "
        "shared; one CP-SAT worker; the fastest of the repeats).  Every group of the greedy plans of the bundled "
        "problems on bm1684x, bm1688 and cv181x, packed into the chip's LMEM, into its peak live bytes and "
        "halfway between; before = lowest fit then CP-SAT, after = lowest fit, the search and CP-SAT "
        "(`lgopt.group.pack.pack`).  Every instance: `pack_groups.csv`.\n\n"
        f"{line}\n\n" + summary.to_markdown(index=False)
        + "\n\n## Packed before, slower or not packed after\n\n"
        + (pd.concat([slower, lost]).drop_duplicates().to_markdown(index=False) if len(slower) or len(lost)
           else "None.") + "\n\n## The largest gains\n\n" + gains.to_markdown(index=False) + "\n")
    print("\n" + line)
    print(summary.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

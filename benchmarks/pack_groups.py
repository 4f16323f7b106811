"""The exact packer on lgopt's own groups, before and after the search (not a test: it measures).

    python benchmarks/pack_groups.py [--problems resnet18,...] [--chips bm1684x,bm1688,cv181x]
                                     [--time-limit 5] [--out benchmarks/pack_groups]

Every group of the greedy plan of each bundled problem and chip is packed three ways, each into the
chip's LMEM and into tighter capacities (the group's peak live bytes, the lower bound, and halfway
between it and the height the plan's allocation uses), with bank rule ``off`` and ``hard``:

* ``before``: what the packer did before the search: lowest fit, then CP-SAT's NoOverlap2D;
* ``after``: :func:`lgopt.group.pack.pack` as it is now (lowest fit, the search, CP-SAT if needed).

``time-limit`` is the packer's effort (5 is what ``lgopt solve`` gives a group that the greedy orders
cannot place).  Every packing is checked by the independent validator.  Rows where the lowest fit
answers both ways are counted but not listed.  Writes OUT.csv and OUT.md (pandas) and prints the
instances that ``before`` packs and ``after`` takes longer to pack (beyond 20 ms of noise).
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", default=",".join(sorted(p.stem for p in (ROOT / "problems").glob("*.json"))))
    ap.add_argument("--chips", default="bm1684x,bm1688,cv181x")
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "pack_groups"))
    args = ap.parse_args()
    solve(PackProblem((PackItem("a", 1, ((0, 1),)),), 1))  # load the compiled search before anything is timed
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
                caps = sorted({chip.lmem_bytes, low, align_up((low + used) // 2, a)})
                pairs = [(str(x), str(y)) for x, y in map(sorted, conflict_pairs(net, inner))]
                for cap in caps:
                    for rule in ("off", "hard"):
                        if rule == "off" and first_fit(items, cap, a) is not None:
                            easy += 1
                            continue
                        kw = dict(align=a, conflicts=pairs, bank_bytes=chip.bank_bytes, bank_rule=rule,
                                  time_limit=args.time_limit, workers=1)
                        res = {}
                        for label, engine in (("before", "cpsat"), ("after", "auto")):
                            t0 = time.perf_counter()
                            r = pack(items, cap, engine=engine, **kw)  # type: ignore[arg-type]
                            dt = time.perf_counter() - t0
                            if r.found:
                                bad = check_packing(items, r.offsets, cap, a)
                                if bad is None and rule == "hard":
                                    bad = "bank pair shared" if shared_banks(items, r.offsets, pairs,
                                                                            chip.bank_bytes) else None
                                if bad:
                                    raise SystemExit(f"{name}/{chip_name} group {gi}: invalid packing: {bad}")
                            res[label] = (r.status, dt, r.engine, r.work)
                        rows.append({"problem": name, "chip": chip_name, "group": gi, "buffers": len(items),
                                     "capacity": cap, "peak live": low, "banks": rule,
                                     "before": res["before"][0], "before s": round(res["before"][1], 3),
                                     "after": res["after"][0], "after s": round(res["after"][1], 3),
                                     "answered by": res["after"][2], "search work": res["after"][3]})
                        print(pd.DataFrame(rows[-1:]).to_string(index=False, header=len(rows) == 1), flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(f"{args.out}.csv", index=False)
    found = ("optimal", "feasible")
    packs_before = df["before"].isin(found)
    slower = df[packs_before & (df["after s"] > df["before s"] + NOISE)]
    lost = df[packs_before & ~df["after"].isin(found)]
    summary = (f"{len(df)} instances the lowest fit does not answer (and {easy} it does, the same both ways); "
               f"before: {int(packs_before.sum())} packed, {int((df['before'] == 'infeasible').sum())} proved "
               f"infeasible, {int((df['before'] == 'unknown').sum())} unknown; after: "
               f"{int(df['after'].isin(found).sum())} packed, {int((df['after'] == 'infeasible').sum())} proved "
               f"infeasible, {int((df['after'] == 'unknown').sum())} unknown.  Of those packed before, "
               f"{len(slower)} take longer after (beyond {NOISE * 1000:.0f} ms) and {len(lost)} are no longer "
               f"packed.  Total seconds: before {df['before s'].sum():.1f}, after {df['after s'].sum():.1f}.")
    Path(f"{args.out}.md").write_text(
        "# The exact packer on lgopt's groups, before and after the search\n\n"
        f"`python benchmarks/pack_groups.py --time-limit {args.time_limit:g}` (2 cores, one worker).\n\n"
        f"{summary}\n\n" + df.to_markdown(index=False) + "\n")
    print("\n" + summary)
    if len(slower) or len(lost):
        print(pd.concat([slower, lost]).drop_duplicates().to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

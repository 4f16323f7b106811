"""lgopt's exact packer on a static-allocation benchmark suite (not a test: it measures).

    python benchmarks/pack_suite.py DIR [--time-limit 60]

DIR holds CSVs in the MiniMalloc / TelaMalloc format, named NAME.CAPACITY.csv (e.g. the public
minimalloc benchmarks/asplos2024/A.1048576.csv); the suites are not bundled.  Every answer is checked
by an independent validator (lgopt.group.pack.check_packing).  Writes DIR/lgopt-pack.csv and prints a table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lgopt.group.pack import check_packing, pack, peak_live_bytes  # noqa: E402
from lgopt.group.pack_csv import read_csv  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--time-limit", type=float, default=60.0, help="CP-SAT deterministic time per instance")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    rows = []
    for path in sorted(Path(args.dir).glob("*.csv")):
        parts = path.name.split(".")
        if len(parts) < 3 or not parts[-2].isdigit():
            continue
        capacity = int(parts[-2])
        items = read_csv(path)
        res = pack(items, capacity, time_limit=args.time_limit, workers=args.workers)
        valid = check_packing(items, res.offsets, capacity) is None if res.found else None
        if valid is False:
            raise SystemExit(f"{path.name}: the packer returned an invalid packing")
        rows.append({"instance": path.name, "buffers": len(items), "capacity": capacity,
                     "peak live": peak_live_bytes(items), "status": res.status,
                     "seconds": round(res.seconds, 2), "validated": valid})
        print(pd.DataFrame(rows[-1:]).to_string(index=False, header=len(rows) == 1), flush=True)
    df = pd.DataFrame(rows)
    df.to_csv(Path(args.dir) / "lgopt-pack.csv", index=False)
    print(f"\nsolved {int(df['status'].isin(['optimal', 'feasible']).sum())} of {len(df)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

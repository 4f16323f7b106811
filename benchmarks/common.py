"""Helpers the benchmark scripts share: writing a result table, and a script's section of a results document.

Each topic has one results document under ``benchmarks/results/``; a script that measures rewrites only its
own section there (between ``<!-- NAME: begin -->`` and ``<!-- NAME: end -->``), so the notes around it stay.
Bulk raw tables go to ``benchmarks/out/`` (not tracked: the script writes them again).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lgopt.report.document import write_section

__all__ = ["BENCHMARKS", "CAL", "OUT", "RESULTS", "SCORE", "SHARED", "write_section", "write_table"]

BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results"
OUT = BENCHMARKS / "out"
SHARED = BENCHMARKS.parent.parent / "shared"  # the project's shared data, beside the checkout
CAL = SHARED / "calibration"  # the shared models (weightless ONNX), their caches and measured cycles
SCORE = SHARED / "tpu-mlir" / "score_grouping.sh"  # the judge's scoring tool


def write_table(df: pd.DataFrame, out: Path, source: str) -> None:
    """Write ``df`` to ``out`` (CSV) and print it, headed by where its numbers come from."""
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    print(f"{source}; written to {out}")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}" if abs(v) < 10 else f"{v:,.0f}"))


"""How TPU-MLIR 1.30.2 spreads one global weighted matmul over a chip's cores: a one-Gemm ONNX model per case
(with and without a fused Relu, two sizes), compiled by the scoring tool on one core and on several, and each
core's codegen timeline read (:mod:`lgopt.tpumlir.timeline`): the cycles and the weight bytes each core loads.

The evidence for :func:`lgopt.cost.work.one_core_matmul`: on BM1690 F16 a Gemm with its Relu fused runs on core 0
alone, the same Gemm without it is split eight ways.  Needs PEER_RUN (TPU-MLIR 1.30.2, ``../shared/tpu-mlir``).

    python benchmarks/core_split.py                       # BM1690, F16, 8 cores
    python benchmarks/core_split.py --chip bm1688 --cores 2 --quantize INT8
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
from common import RESULTS, SCORE, write_section
from onnx import TensorProto, helper, numpy_helper

from lgopt.errors import LgoptError
from lgopt.tpumlir.judge import find_judge
from lgopt.tpumlir.timeline import profile_of, read_commands

CASES = (("4096x4096, Relu", 4096, 4096, True), ("4096x4096", 4096, 4096, False), ("4096x1000, Relu", 4096, 1000, True))
NO_GROUPS = {"opt": 2, "total subfunc": 1, "subfunc_0": {"subfunc idx": 0, "GroupLayer": [], "GlobalLayer": [],
                                                         "CyclePrefixSum": []}}


def gemm_model(path: Path, k: int, n: int, relu: bool) -> Path:
    """``x [1, k] -> Gemm (k x n, random weights, seed 0) [-> Relu] -> y``: a classifier head alone."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((n, k)) * 0.01).astype(np.float32), "W")
    b = numpy_helper.from_array(np.zeros(n, np.float32), "B")
    nodes = [helper.make_node("Gemm", ["x", "W", "B"], ["g" if relu else "y"], transB=1)]
    if relu:
        nodes.append(helper.make_node("Relu", ["g"], ["y"]))
    graph = helper.make_graph(nodes, path.stem, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def per_core(score: dict, cores: int) -> list[tuple[int, int]]:
    """(cycles, GDMA bytes) of the matmul's commands on each core: the timeline line that moves the most bytes."""
    work = Path(score["workdir"])
    out = []
    for core in range(cores):
        try:
            cmds = read_commands(profile_of(work, core))
        except StopIteration:
            out.append((0, 0))
            continue
        cycles: dict[int, int] = defaultdict(int)
        moved: dict[int, int] = defaultdict(int)
        for c in cmds:
            cycles[c.line] += c.cycles
            moved[c.line] += c.nbytes or 0
        line = max(moved, key=moved.__getitem__, default=None)
        out.append((0, 0) if line is None else (cycles[line], moved[line]))
    return out


def measure(tmp: Path, chip: str, quantize: str, cores: int) -> list[dict]:
    """Each case compiled by the judge on one core and on ``cores``, every op a global layer."""
    rows = []
    for name, k, n, relu in CASES:
        onnx_path = gemm_model(tmp / f"gemm_{k}x{n}{'_relu' if relu else ''}.onnx", k, n, relu)
        for c in sorted({1, cores}):
            out = tmp / f"{onnx_path.stem}_{c}.json"
            judge = find_judge(onnx_path, chip, script=SCORE, quantize=quantize, cores=c)
            judge.measure(NO_GROUPS, keep=out, keep_run=True)
            score = json.loads(out.read_text()) if out.exists() else {}
            if score.get("status") != "ok":
                rows.append({"case": name, "cores": c, "total": None, "cores_loading": None, "core0_bytes": None})
                continue
            split = per_core(score, c)
            rows.append({"case": name, "cores": c, "total": score["total_cycles"],
                         "cores_loading": sum(1 for _, b in split if b > k * n // (4 * c)),
                         "core0_bytes": split[0][1]})
            shutil.rmtree(score["workdir"], ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chip", default="bm1690")
    ap.add_argument("--cores", type=int, default=8)
    ap.add_argument("--quantize", default="F16")
    a = ap.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory() as d:
            rows = measure(Path(d), a.chip, a.quantize, a.cores)
    except LgoptError as e:  # no TPU-MLIR, no scoring tool: one line
        print(f"core_split: {e}", file=sys.stderr)
        return 2
    lines = [f"`python benchmarks/core_split.py --chip {a.chip} --cores {a.cores} --quantize {a.quantize}`: one "
             "global Gemm per model, TPU-MLIR 1.30.2's codegen timeline (total cycles; the cores whose timeline "
             "loads a share of the weight; the bytes core 0 loads).", "",
             "| case | cores | total cycles | cores loading the weight | bytes on core 0 |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        cells = ("fails", "-", "-") if r["total"] is None else (
            f"{r['total']:,}", str(r["cores_loading"]), f"{r['core0_bytes']:,}")
        lines.append(f"| {r['case']} | {r['cores']} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    write_section(RESULTS / "settings.md", f"core_split_{a.chip}_{a.quantize.lower()}_{a.cores}", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

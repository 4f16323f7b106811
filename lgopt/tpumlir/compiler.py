"""TPU-MLIR 1.30.2's command-line tools, run as a user deploys with them: its front end (``model_transform``),
INT8 calibration (``run_calibration``), and ``model_deploy`` with its own LayerGroup search or with a grouping
forced through its layer-group cache (``LOAD_TPU_GROUP=1``).  Each compile is read back from codegen's
simulated timeline (``compiler_profile_0.txt``, ``_0.dat`` on BM1684): the total cycles the bmodel schedules.

A compile whose log says its LMEM allocation failed is a failure even when TPU-MLIR exits 0 (it does, and the
bmodel it then writes is broken: ``../shared/tpu-mlir/README.md`` section 6 in the project's notes).

Where TPU-MLIR is: ``--tpu-mlir VENV`` or ``LGOPT_TPU_MLIR``, a Python 3.10 environment holding ``tpu_mlir``
(``scripts/install-tpu-mlir.sh`` makes one; ``docs/deploy.md``).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from lgopt.errors import LgoptError

VENV_ENV = "LGOPT_TPU_MLIR"
INSTALL_HINT = ("install it with `scripts/install-tpu-mlir.sh DIR` (its own Python 3.10 environment, docs/deploy.md) "
                "and pass --tpu-mlir DIR/venv or set LGOPT_TPU_MLIR")
ALLOC_FAILED = ("local memory allocate failed", "LocalMemoryAllocationPass pass failed")
TOTAL = re.compile(r"API_END total_cycle:(\d+)")


@dataclass(frozen=True)
class Toolchain:
    """A TPU-MLIR install: the environment whose ``bin/`` holds its tools."""

    venv: Path

    def env(self) -> dict[str, str]:
        bin_dir = str(self.venv / "bin")
        return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "VIRTUAL_ENV": str(self.venv)}

    def run(self, args: list[str], cwd: Path, log: str, extra_env: dict[str, str] | None = None,
            timeout: float = 3600.0) -> tuple[int, str]:
        """Run one tool in ``cwd``, its output kept in ``cwd/log``: (exit status, output)."""
        env = {**self.env(), **(extra_env or {})}
        try:
            p = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
            out, rc = p.stdout + p.stderr, p.returncode
        except subprocess.TimeoutExpired:
            out, rc = f"timed out after {timeout:g} s", 124
        (cwd / log).write_text(out)
        return rc, out


def find_toolchain(venv: str | Path | None = None) -> Toolchain:
    """The TPU-MLIR install ``venv`` (or ``$LGOPT_TPU_MLIR``) names, or one line saying how to get one."""
    text = str(venv or os.environ.get(VENV_ENV, ""))
    if not text:
        raise LgoptError(f"lgopt deploy needs TPU-MLIR 1.30.2: {INSTALL_HINT}")
    path = Path(text).expanduser().resolve()
    if not (path / "bin" / "model_deploy").exists():
        raise LgoptError(f"no TPU-MLIR in {path} (no bin/model_deploy): {INSTALL_HINT}")
    return Toolchain(path)


@dataclass(frozen=True)
class Compiled:
    """One ``model_deploy``: its bmodel and layer-group cache, the cycles its timeline schedules, its time."""

    ok: bool
    folder: Path
    bmodel: Path | None
    cache: Path | None
    cycles: int | None
    seconds: float
    error: str = ""


def input_shapes(onnx_path: Path) -> str:
    """``model_transform --input_shapes`` of a model: its graph inputs (initializers aside), dynamic dims as 1."""
    import onnx

    m = onnx.load(str(onnx_path), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    dims = [[d.dim_value if d.dim_value > 0 else 1 for d in i.type.tensor_type.shape.dim]
            for i in m.graph.input if i.name not in inits]
    return str(dims).replace(" ", "")


def front_end(tc: Toolchain, onnx_path: Path, name: str, work: Path) -> Path:
    """TPU-MLIR's front end: the model as its top-level MLIR (``NAME.mlir``)."""
    work.mkdir(parents=True, exist_ok=True)
    rc, out = tc.run(["model_transform", "--model_name", name, "--model_def", str(onnx_path.resolve()),
                      "--input_shapes", input_shapes(onnx_path), "--mlir", f"{name}.mlir"], work, "transform.log")
    if rc != 0 or not (work / f"{name}.mlir").exists():
        raise LgoptError(f"TPU-MLIR's front end refused {onnx_path.name}: {_last_line(out)} ({work}/transform.log)")
    return work / f"{name}.mlir"


def calibrate(tc: Toolchain, mlir: Path, data: Path, name: str) -> Path:
    """An INT8 calibration table from the user's inputs in ``data`` (``run_calibration``, max method)."""
    files = sorted(p for p in data.iterdir() if p.suffix in (".npz", ".npy", ".jpg", ".jpeg", ".png"))
    if not files:
        raise LgoptError(f"--calibration-data {data}: no .npz, .npy or image files to calibrate INT8 on")
    rc, out = tc.run(["run_calibration", mlir.name, "--dataset", str(data.resolve()), "--input_num",
                      str(len(files)), "--cali_method", "max", "--tune_num", "0", "-o", f"{name}_cali_table"],
                     mlir.parent, "calibration.log")
    table = mlir.parent / f"{name}_cali_table"
    if rc != 0 or not table.exists():
        raise LgoptError(f"TPU-MLIR's INT8 calibration failed: {_last_line(out)} ({mlir.parent}/calibration.log)")
    return table


def deploy(tc: Toolchain, mlir: Path, chip: str, quantize: str, cores: int, table: Path | None, folder: Path,
           forced: dict[str, object] | None = None, opt: int | None = None) -> Compiled:
    """``model_deploy`` of ``mlir`` in ``folder``: TPU-MLIR's own grouping (its search at ``--opt opt``, default
    its own default, 2), or ``forced`` (a layer-group cache) loaded in place of its search."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    _link_front_end(mlir, folder)  # model_deploy reads the front end's weights by a name relative to its folder
    name = mlir.stem
    prefix = f"{name}_{chip}_{quantize.lower()}"
    extra: dict[str, str] = {}
    if forced is not None:
        (folder / f"{prefix}.layer_group_cache.json").write_text(json.dumps(forced, indent=1))
        extra["LOAD_TPU_GROUP"] = "1"
    args = ["model_deploy", "--mlir", mlir.name, "--chip", chip, "--quantize", quantize,
            "--num_core", str(cores), "--model", f"{prefix}.bmodel", "--skip_validation"]
    if table is not None:
        args += ["--calibration_table", str(table.resolve())]
    if opt is not None:
        args += ["--opt", str(opt)]
    t0 = time.perf_counter()
    rc, out = tc.run(args, folder, "deploy.log", extra)
    secs = time.perf_counter() - t0
    return _read_back(folder, prefix, rc, out, secs)


def _link_front_end(mlir: Path, folder: Path) -> None:
    """The front end's MLIR and weight files beside each compile (links; one front end serves every compile)."""
    for f in mlir.parent.iterdir():
        if f.is_file() and f.name.startswith(mlir.stem) and f.suffix in (".mlir", ".npz", ".json"):
            link = folder / f.name
            if not link.exists():
                link.symlink_to(f.resolve())


def _read_back(folder: Path, prefix: str, rc: int, out: str, secs: float) -> Compiled:
    """What a ``model_deploy`` left in ``folder``: refused when it failed, or when its log says the LMEM
    allocation failed (TPU-MLIR may exit 0 then, with a broken bmodel)."""
    bmodel, cache = folder / f"{prefix}.bmodel", folder / f"{prefix}.layer_group_cache.json"
    failed = next((m for m in ALLOC_FAILED if m in out), "")
    if rc != 0 or failed or not bmodel.exists():
        why = failed or _last_line(out)
        return Compiled(False, folder, None, cache if cache.exists() else None, None, secs, why)
    cycles = timeline_cycles(folder)
    if cycles is None:
        return Compiled(False, folder, bmodel, cache, None, secs, "codegen wrote no timeline (compiler_profile_0.txt)")
    return Compiled(True, folder, bmodel, cache if cache.exists() else None, cycles, secs)


def timeline_cycles(folder: Path) -> int | None:
    """The total cycles of codegen's timeline in ``folder`` (every core's profile holds the same total)."""
    for pattern in ("compiler_profile_*.txt", "_[0-9]*.dat"):
        for p in sorted(folder.glob(pattern)):
            m = TOTAL.search(p.read_text(errors="replace"))
            if m:
                return int(m.group(1))
    return None


def _last_line(out: str) -> str:
    lines = [ln.strip() for ln in out.strip().splitlines() if ln.strip()]
    return " ".join((lines[-1] if lines else "no output").split())[:240]

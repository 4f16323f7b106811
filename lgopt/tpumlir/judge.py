"""TPU-MLIR as the judge: compile a layer-group cache with the real compiler and read the cycles it schedules.

lgopt's cost models predict; this module measures.  It runs ``score_grouping.sh`` (the project's scoring tool
beside a TPU-MLIR 1.30.2 install: ``docs/tpu-mlir.md``), which forces the cache into TPU-MLIR's LayerGroup pass
(``opt=4``: no search of its own), runs codegen and splits codegen's simulated command timeline
(``compiler_profile_0.txt``) into groups and global layers.  A cache the compiler refuses (its LMEM allocator
fails, codegen asserts) is a :class:`Measurement` with status ``lg_failed`` / ``codegen_failed``, never an
exception: refusal is an answer a search uses.

Nothing here is needed by the tests or by lgopt's own strategies; :func:`find_judge` says in one line what is
missing when TPU-MLIR is not installed.  The compiler is deterministic, so a measurement is cached by the
cache's content for the life of the :class:`Judge`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from lgopt.errors import LgoptError

SCORE_ENV = "LGOPT_TPU_MLIR_SCORE"  # path of score_grouping.sh
PEER_ENV = "PEER_RUN"  # the folder holding TPU-MLIR's venv (../shared/tpu-mlir/install.sh)
SOURCE = "TPU-MLIR 1.30.2 codegen timeline (compiler_profile_0.txt), measured"


def cache_body(cache: Mapping[str, Any]) -> dict[str, Any]:
    """What TPU-MLIR reads of a layer-group cache: all but lgopt's own ``lgopt`` record."""
    return {k: v for k, v in cache.items() if k != "lgopt"}


def cache_digest(cache: Mapping[str, Any]) -> str:
    """Two caches with the same digest compile alike (lgopt's record aside)."""
    return hashlib.sha256(json.dumps(cache_body(cache), sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Measurement:
    """What the compiler did with one cache: ``status`` ``ok`` with its cycles, or why it refused."""

    status: str  # ok | lg_failed | codegen_failed | no_result
    total_cycles: int | None
    group_cycles: tuple[int, ...] = ()  # per compiled group, in load order
    global_cycles: int = 0
    honoured: bool = True  # every group compiled with exactly the ops and slice counts asked for
    error: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.total_cycles is not None and self.honoured


def measurement_of(r: Mapping[str, Any], seconds: float = 0.0) -> Measurement:
    """A scoring tool's JSON result as a :class:`Measurement` (also for results stored by a benchmark)."""
    status = str(r.get("status", "no_result"))
    total = r.get("total_cycles")
    err = r.get("lg_error") or r.get("codegen_error") or ("" if status == "ok" else status)
    groups = tuple(int(g.get("cycles") or 0) for g in r.get("groups", ()))
    return Measurement(status, int(total) if status == "ok" and total else None, groups,
                       int(r.get("cycles_in_global_ops") or 0), bool(r.get("honoured_exactly", True)),
                       " ".join(str(err).split())[:300], seconds)


@dataclass
class Judge:
    """One model on one chip, compiled by TPU-MLIR: :meth:`measure` a cache, get the cycles it schedules.

    ``onnx`` is the model with weights (TPU-MLIR needs them; their values do not change the cycles); the
    first measurement of a model builds the scoring tool's per-model cache (12-60 s), later ones take about
    a second.
    """

    script: Path
    peer_run: Path
    onnx: Path
    chip: str
    quantize: str = "F16"
    timeout: float = 1800.0
    cores: int = 1  # model_deploy --num_core
    _memo: dict[str, Measurement] = field(default_factory=dict, repr=False)

    @property
    def model_cache(self) -> Path:
        """The scoring tool's per-model folder: TPU-MLIR's op list, base groups and own opt2 cache."""
        md5 = hashlib.md5(self.onnx.read_bytes()).hexdigest()[:10]
        name = "".join(c if c.isalnum() or c == "_" else "_" for c in self.onnx.stem)
        cores = f"{self.cores}core_" if self.cores > 1 else ""
        return self.peer_run / "score_cache" / f"{name}_{self.chip}_{self.quantize.lower()}_{cores}{md5}"

    def base_groups(self) -> Path | None:
        p = self.model_cache / "base_groups.json"
        return p if p.exists() and p.stat().st_size > 2 else None

    def own_cache(self) -> Path | None:
        """TPU-MLIR's own (opt2) cache of this model and chip, written by the scoring tool's first run."""
        found = sorted((self.model_cache / "ref").glob("*.layer_group_cache.json"))
        return found[0] if found else None

    def prepare(self) -> Path:
        """TPU-MLIR's own cache of the model, compiling the model once first if the scoring tool has not
        (a cache of no groups: TPU-MLIR's own run comes with it)."""
        if self.own_cache() is None:
            m = self.measure({"opt": 2})
            if self.own_cache() is None:
                raise LgoptError(f"TPU-MLIR could not compile {self.onnx.name} for {self.chip}: {m.error or m.status}")
        found = self.own_cache()
        assert found is not None
        return found

    def measure(self, cache: Mapping[str, Any], keep: Path | None = None, keep_run: bool = False) -> Measurement:
        """Compile ``cache`` (a layer-group cache as :func:`lgopt.tpumlir.export.export_tpumlir` writes it);
        ``keep`` receives the scoring tool's whole JSON result (per-group and per-core numbers); ``keep_run``
        keeps the compile's folder too (its ``workdir``: ``final.mlir`` and the timeline, for
        :mod:`lgopt.tpumlir.timeline`; the caller removes it)."""
        body = cache_body(cache)
        key = cache_digest(body)
        if key in self._memo and keep is None:
            return self._memo[key]
        with tempfile.TemporaryDirectory(prefix="lgopt-judge-") as tmp:
            cpath, out = Path(tmp) / "candidate.layer_group_cache.json", Path(tmp) / "score.json"
            cpath.write_text(json.dumps(body, indent=1))
            t0 = time.perf_counter()
            env = {**os.environ, PEER_ENV: str(self.peer_run)}
            try:
                p = subprocess.run(["bash", str(self.script), str(self.onnx), self.chip, str(cpath), str(out),
                                    "--quantize", self.quantize, "--num-core", str(self.cores),
                                    *(["--keep"] if keep_run else [])],
                                   capture_output=True, text=True, env=env, timeout=self.timeout)
                stderr = p.stderr
            except subprocess.TimeoutExpired:
                stderr = f"timed out after {self.timeout:g} s"
            secs = time.perf_counter() - t0
            try:
                m = measurement_of(json.loads(out.read_text()), secs)
                if keep is not None:
                    shutil.copyfile(out, keep)
            except (OSError, ValueError):
                last = (stderr.strip().splitlines() or ["no output"])[-1]
                m = Measurement("no_result", None, error=last[:300], seconds=secs)
        self._memo[key] = m
        return m

    @property
    def compiles(self) -> int:
        """How many distinct caches were compiled so far."""
        return len(self._memo)


def find_judge(onnx: str | Path, chip: str, *, script: str | Path | None = None, peer_run: str | Path | None = None,
               quantize: str = "F16", cores: int = 1) -> Judge:
    """A :class:`Judge`, or one LgoptError line naming what is missing (TPU-MLIR, the scoring tool, the model)."""
    peer_text, script_text = str(peer_run or os.environ.get(PEER_ENV, "")), str(script or os.environ.get(SCORE_ENV, ""))
    peer, s = Path(peer_text), Path(script_text)
    if not peer_text or not (peer / "venv" / "bin" / "model_deploy").exists():
        raise LgoptError(f"the TPU-MLIR judge needs {PEER_ENV} set to a TPU-MLIR 1.30.2 install (its venv/bin/"
                         "model_deploy): see docs/tpu-mlir.md")
    if not script_text or not s.is_file():
        raise LgoptError(f"the TPU-MLIR judge needs the scoring tool score_grouping.sh: pass --judge-script or set "
                         f"{SCORE_ENV} (docs/tpu-mlir.md)")
    o = Path(onnx)
    if not o.is_file():
        raise LgoptError(f"the TPU-MLIR judge needs the model with weights, {o}: not found")
    if shutil.which("bash") is None:
        raise LgoptError("the TPU-MLIR judge needs bash")
    return Judge(s.resolve(), peer.resolve(), o.resolve(), chip, quantize, cores=cores)

"""``lgopt deploy``: one command from a model file to the faster bmodel, TPU-MLIR's or lgopt's grouping.

The steps, each timed and shown as it runs:

1. TPU-MLIR's front end (``model_transform``), and for INT8 its calibration table (given, or made from the
   user's inputs);
2. TPU-MLIR's own grouping: a normal ``model_deploy`` (its LayerGroup search), measured on codegen's
   timeline: the reference, and the bmodel a user would get without lgopt;
3. lgopt's search in the space TPU-MLIR compiles (:class:`lgopt.tpumlir.space.ReferenceSpace`, the fitted cost
   model where one exists), verified; with ``judge_budget`` compiles, TPU-MLIR measures and refines it;
4. its export as a layer-group cache, compiled with ``LOAD_TPU_GROUP=1 model_deploy`` and measured the same way.

The faster of the two is delivered: lgopt's only when it compiled and measured fewer cycles, so the result is
never slower than TPU-MLIR alone.  ``DIR`` gets the bmodel, both caches, lgopt's plan, ``report.json`` and
``report.md``; all are written at the end, each to a temporary name then renamed, so an interrupted run
leaves ``DIR`` as it was or (interrupted after step 2) with TPU-MLIR's own bmodel and a report saying so.
Scratch files stay in ``DIR/work``.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from lgopt.cost.registry import default_cost_model
from lgopt.errors import LgoptError
from lgopt.hw.chip import get_chip
from lgopt.io.planfile import save_plan
from lgopt.io.problem import load_model
from lgopt.model.network import Network
from lgopt.model.plan import Plan
from lgopt.strategies.cpsat.common import CpsatSettings
from lgopt.strategies.registry import StrategyOptions, parse_strategy
from lgopt.tpumlir.compiler import ALLOC_FAILED, Compiled, Toolchain, calibrate, deploy, front_end
from lgopt.tpumlir.export import compile_edge_casts, edge_cast_order, export_tpumlir
from lgopt.tpumlir.judge import Measurement, cache_body, cache_digest
from lgopt.tpumlir.judged import JudgeSettings
from lgopt.tpumlir.space import REFERENCE_MARGIN, ReferenceSpace

Progress = Callable[[str], None]
Verify = Callable[[Network, Plan], list[Any]]


@dataclass(frozen=True)
class DeployRequest:
    """What ``lgopt deploy`` was asked (its flags)."""

    model: Path
    chip: str
    out: Path
    quantize: str = "F16"
    cores: int = 1
    calibration_table: Path | None = None
    calibration_data: Path | None = None
    judge_budget: int = 0
    time_limit: float = 60.0  # lgopt's search, wall seconds
    workers: int = 2
    margin: float = REFERENCE_MARGIN

    @property
    def name(self) -> str:
        return "".join(c if c.isalnum() or c == "_" else "_" for c in self.model.stem)


@dataclass
class _Clock:
    """Each step's wall time, shown as it ends."""

    progress: Progress
    steps: list[dict[str, Any]] = field(default_factory=list)

    def run(self, what: str, fn: Callable[[], Any]) -> Any:
        self.progress(f"{what} ...")
        t0 = time.perf_counter()
        out = fn()
        secs = round(time.perf_counter() - t0, 2)
        self.steps.append({"step": what, "seconds": secs})
        self.progress(f"{what}: {secs:.1f} s")
        return out


@dataclass
class DeployJudge:
    """TPU-MLIR measuring a cache the way the delivered model is built (a forced ``model_deploy``), for the
    judged search (:func:`lgopt.tpumlir.judged.judged_search`); each distinct cache is compiled once."""

    tc: Toolchain
    mlir: Path
    req: DeployRequest
    table: Path | None
    _memo: dict[str, Measurement] = field(default_factory=dict)

    def measure(self, cache: Mapping[str, Any]) -> Measurement:
        key = cache_digest(cache)
        if key not in self._memo:
            folder = self.mlir.parent / f"judge-{len(self._memo)}"
            c = deploy(self.tc, self.mlir, self.req.chip, self.req.quantize, self.req.cores, self.table, folder,
                       cache_body(cache))
            self._memo[key] = Measurement("ok" if c.ok else "lg_failed", c.cycles, error=c.error, seconds=c.seconds)
            shutil.rmtree(folder, ignore_errors=True)
        return self._memo[key]

    @property
    def compiles(self) -> int:
        return len(self._memo)


def run_deploy(req: DeployRequest, tc: Toolchain, verify: Verify, progress: Progress) -> dict[str, Any]:
    """Deploy ``req.model``; returns the report (also written to ``req.out``).  ``verify`` is the independent
    verifier every plan lgopt emits passes (handed in: this layer may not import the checker)."""
    _check_request(req)
    work = req.out / "work"
    clock = _Clock(progress)
    report: dict[str, Any] = {"model": str(req.model), "chip": req.chip, "quantize": req.quantize, "cores": req.cores}
    mlir = clock.run("1. TPU-MLIR front end (model_transform)", lambda: front_end(tc, req.model, req.name, work))
    table = _table(req, tc, mlir, clock)
    ref = clock.run("2. TPU-MLIR's own grouping (model_deploy)",
                    lambda: deploy(tc, mlir, req.chip, req.quantize, req.cores, table, work / "tpu-mlir"))
    if not ref.ok or ref.cache is None:
        raise LgoptError(f"TPU-MLIR could not compile {req.model.name} for {req.chip} itself: {ref.error}")
    report.update(tpu_mlir_cycles=ref.cycles, tpu_mlir_compile_seconds=round(ref.seconds, 2))
    try:
        mine = _lgopt_side(req, tc, mlir, table, ref, verify, clock, report)
    except KeyboardInterrupt:
        report["interrupted"] = "during lgopt's search or compile: TPU-MLIR's own model is delivered"
        mine = None
    _deliver(req, ref, mine, report, clock)
    return report


def _check_request(req: DeployRequest) -> None:
    if not req.model.is_file():
        raise LgoptError(f"{req.model}: no such model file")
    if req.quantize not in ("F16", "INT8"):
        raise LgoptError(f"--quantize {req.quantize}: lgopt deploy takes F16 or INT8")
    if req.cores < 1 or req.judge_budget < 0:
        raise LgoptError("--cores must be at least 1 and --judge-budget at least 0")
    if req.quantize == "INT8" and req.calibration_table is None and req.calibration_data is None:
        raise LgoptError("INT8 needs a calibration table (--calibration-table T) or inputs to make one from "
                         "(--calibration-data DIR: .npz files keyed by input name, or images)")
    if req.out.exists() and not req.out.is_dir():
        raise LgoptError(f"-o {req.out}: not a directory")
    get_chip(req.chip, {"used_cores": req.cores})  # an unknown chip, or more cores than it has, is refused before
    # TPU-MLIR runs


def _table(req: DeployRequest, tc: Toolchain, mlir: Path, clock: _Clock) -> Path | None:
    if req.quantize != "INT8":
        return None
    if req.calibration_table is not None:
        if not req.calibration_table.is_file():
            raise LgoptError(f"--calibration-table {req.calibration_table}: no such file")
        return req.calibration_table
    data = req.calibration_data
    assert data is not None
    if not data.is_dir():
        raise LgoptError(f"--calibration-data {data}: not a directory")
    return clock.run("1b. INT8 calibration (run_calibration)", lambda: calibrate(tc, mlir, data, req.name))


RETRY_RESERVE_BANKS = 4  # banks left empty in a second search after TPU-MLIR refused to allocate lgopt's grouping


def _lgopt_side(req: DeployRequest, tc: Toolchain, mlir: Path, table: Path | None, ref: Compiled, verify: Verify,
                clock: _Clock, report: dict[str, Any]) -> tuple[Plan, Compiled | None, dict[str, Any]] | None:
    """lgopt's search against the reference, its export and compile; None where lgopt cannot read the model or
    the reference (the report says why; TPU-MLIR's own model is delivered).  When TPU-MLIR's allocator refuses
    lgopt's grouping, the same grouping is compiled with the other edge-cast rule
    (:func:`lgopt.tpumlir.export.edge_cast_order`); refused again (its packing is less tight than lgopt's, by
    more than the banks the search leaves empty), the search runs once more with :data:`RETRY_RESERVE_BANKS`
    banks empty, and that grouping is compiled: compiles beyond the first only after a refusal."""
    assert ref.cache is not None
    try:
        plan, mine, cache = _attempt(req, tc, mlir, table, ref, verify, clock, report, None)
        if mine is not None and _alloc_refused(mine) and req.judge_budget == 0:
            report["lgopt_refused_first"] = mine.error
            plan, mine, cache = _attempt(req, tc, mlir, table, ref, verify, clock, report, RETRY_RESERVE_BANKS)
    except LgoptError as e:
        report["lgopt_error"] = str(e)
        return None
    return plan, mine, cache


def _attempt(req: DeployRequest, tc: Toolchain, mlir: Path, table: Path | None, ref: Compiled, verify: Verify,
             clock: _Clock, report: dict[str, Any], reserve: int | None
             ) -> tuple[Plan, Compiled | None, dict[str, Any]]:
    """One search (``reserve`` banks left empty by new groups, None: the space's default), verified, exported and
    compiled, or (plan, None, cache) where the search kept TPU-MLIR's own grouping."""
    again = "" if reserve is None else f" again, {reserve} banks reserved"
    net, plan = clock.run(f"3. lgopt's search in TPU-MLIR's space{again}",
                          lambda: _search(req, tc, mlir, table, ref, reserve))
    report["lgopt_search_seconds"] = round(report.get("lgopt_search_seconds", 0) + clock.steps[-1]["seconds"], 2)
    report["cost_model"] = plan.chip.get("cost_model", "analytic")
    violations = verify(net, plan)
    if violations:  # a plan that breaks a rule is an lgopt bug: never deployed
        raise RuntimeError(f"lgopt's plan fails verification: {violations[0]}")
    if plan.solver.get("kept_reference"):
        report["lgopt_kept_reference"] = plan.solver["kept_reference"]
        return plan, None, export_tpumlir(plan, net, ref.cache)
    return _compile(req, tc, mlir, table, ref, plan, net, clock, again)


def _compile(req: DeployRequest, tc: Toolchain, mlir: Path, table: Path | None, ref: Compiled, plan: Plan,
             net: Network, clock: _Clock, again: str) -> tuple[Plan, Compiled | None, dict[str, Any]]:
    """``plan`` exported and compiled under its edge-cast rule, and under the other one only after TPU-MLIR's
    allocator refused the first (:func:`lgopt.tpumlir.export.edge_cast_order`); the plan records the rule of
    the last compile, which ``lgopt export`` then writes again."""
    first = edge_cast_order(plan)[0]

    def compile_(cache: dict[str, Any], rule: str) -> Compiled:
        step = f"4. compile with lgopt's grouping (LOAD_TPU_GROUP=1 model_deploy){again}"
        return clock.run(step + (f", edge casts {rule}" if rule != first else ""),
                         lambda: deploy(tc, mlir, req.chip, req.quantize, req.cores, table, req.out / "work" / "lgopt",
                                        cache_body(cache)))

    rule, cache, mine = compile_edge_casts(plan, lambda r: export_tpumlir(plan, net, ref.cache, edge_casts=r),
                                           compile_, _alloc_refused)
    return replace(plan, solver={**plan.solver, "edge_casts": rule}), mine, cache


def _alloc_refused(c: Compiled) -> bool:
    """TPU-MLIR's LMEM allocator refused the grouping (not a crash, not a missing file)."""
    return not c.ok and any(m in (c.error or "") for m in ALLOC_FAILED)


def _search(req: DeployRequest, tc: Toolchain, mlir: Path, table: Path | None, ref: Compiled,
            reserve: int | None = None) -> tuple[Network, Plan]:
    dtype = "int8" if req.quantize == "INT8" else "f16"
    net = load_model(str(req.model), dtype=dtype)
    chip = get_chip(req.chip, {"used_cores": req.cores})
    chip = replace(chip, cost_model=default_cost_model(chip, dtype))
    judge = DeployJudge(tc, mlir, req, table) if req.judge_budget > 0 else None
    js = JudgeSettings(budget=req.judge_budget, time_limit=max(req.time_limit, 60.0 * req.judge_budget))
    space = ReferenceSpace(str(ref.cache), margin=req.margin, judge=judge, judge_settings=js if judge else None)
    if reserve is not None:
        space = replace(space, reserve_banks=reserve)
    cpsat = CpsatSettings(time_limit=req.time_limit, workers=req.workers)
    plan, _ = parse_strategy("cpsat").run(net, chip, StrategyOptions(cpsat=cpsat, space=space))
    planned = space.lowered(net, chip)[0]
    return planned, plan


def _deliver(req: DeployRequest, ref: Compiled, mine: tuple[Plan, Compiled | None, dict[str, Any]] | None,
             report: dict[str, Any], clock: _Clock) -> None:
    """Choose the faster compiled model and write ``req.out``."""
    plan, compiled, cache = mine if mine is not None else (None, None, None)
    ours = compiled.cycles if compiled is not None and compiled.ok else None
    if compiled is not None and not compiled.ok:
        report["lgopt_compile_error"] = compiled.error
    if plan is not None and compiled is None and "lgopt_kept_reference" in report:
        ours = ref.cycles  # lgopt's search kept TPU-MLIR's own grouping: the same model
    chosen = ref  # never slower than TPU-MLIR alone: lgopt's only when it compiled and measured fewer cycles
    if compiled is not None and compiled.cycles is not None and ref.cycles is not None and compiled.cycles < ref.cycles:
        chosen = compiled
    kept = "lgopt" if chosen is not ref else "tpu-mlir"
    report.update(lgopt_cycles=ours, kept=kept, delivered_cycles=chosen.cycles, steps=clock.steps,
                  speedup=round(ref.cycles / chosen.cycles, 4) if ref.cycles and chosen.cycles else None,
                  source="TPU-MLIR 1.30.2 codegen timeline (compiler_profile_0.txt), total cycles")
    out = req.out
    out.mkdir(parents=True, exist_ok=True)
    prefix = f"{req.name}_{req.chip}_{req.quantize.lower()}"
    assert chosen.bmodel is not None and ref.cache is not None
    _put(out / f"{prefix}.bmodel", chosen.bmodel.read_bytes())
    _put(out / "tpu-mlir.layer_group_cache.json", ref.cache.read_bytes())
    if cache is not None:
        _put(out / "lgopt.layer_group_cache.json", (json.dumps(cache, indent=1) + "\n").encode())
    if plan is not None:
        save_plan(plan, out / "plan.json")
    report["files"] = sorted(p.name for p in out.iterdir() if p.is_file() and p.name != "report.json") + ["report.json"]
    _put(out / "report.md", report_markdown(report).encode())
    _put(out / "report.json", (json.dumps(report, indent=1) + "\n").encode())


def _put(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(data)
    tmp.replace(path)


def report_markdown(r: Mapping[str, Any]) -> str:
    """The report a person reads: what was compared, measured by whom, what was kept, and how long each took."""
    ours = f"{r['lgopt_cycles']:,}" if r.get("lgopt_cycles") else "not compiled"
    lines = [f"# lgopt deploy: {Path(str(r['model'])).name} on {r['chip']} ({r['quantize']}, {r['cores']} core(s))", "",
             f"Cycles measured by {r['source']}.", "",
             "| grouping | cycles |", "|---|---:|",
             f"| TPU-MLIR's own (its LayerGroup search) | {r['tpu_mlir_cycles']:,} |",
             f"| lgopt's (cost model {r.get('cost_model', '-')}) | {ours} |", "",
             f"**Delivered: {r['kept']}'s grouping**, {r['delivered_cycles']:,} cycles "
             f"({r['speedup']:.3f}x TPU-MLIR alone).", ""]
    if r.get("lgopt_refused_first"):
        lines.append(f"- TPU-MLIR refused lgopt's first grouping ({r['lgopt_refused_first']}); searched again with "
                     f"{RETRY_RESERVE_BANKS} LMEM banks left empty")
    for key in ("lgopt_kept_reference", "lgopt_compile_error", "lgopt_error", "interrupted"):
        if r.get(key):
            lines.append(f"- {key.replace('_', ' ')}: {r[key]}")
    lines += ["", "| step | seconds |", "|---|---:|"] + [f"| {s['step']} | {s['seconds']:.1f} |" for s in r["steps"]]
    lines += ["", f"TPU-MLIR's own compile took {r['tpu_mlir_compile_seconds']:.1f} s; lgopt's search "
              f"{r.get('lgopt_search_seconds', 0):.1f} s.", ""]
    return "\n".join(lines)

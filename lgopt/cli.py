"""The ``lgopt`` command.

Bad input is one line on stderr and exit status 2; a failed verification is
exit status 1; an lgopt bug is one line naming it and exit status 3
(``LGOPT_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence, get_args

from lgopt import __version__
from lgopt.errors import LgoptError
from lgopt.strategies.cpsat.common import Formulation, Objective


def stderr_progress(msg: str) -> None:
    if sys.stderr.isatty():
        print(f"\r{msg:<70}", end="", file=sys.stderr, flush=True)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other input error
        raise LgoptError(f"{self.prog}: {message}")


def _positive_seconds(value: float, flag: str) -> float:
    """A time limit: finite and positive (nan, inf, 0 and negatives mean nothing as seconds)."""
    import math

    if not math.isfinite(value) or value <= 0:
        raise LgoptError(f"{flag} must be a positive number of seconds, got {value!r}")
    return value


def _workers(value: int, flag: str = "--workers") -> int:
    """At least one; more than this machine's cores only slows every worker down (each CP-SAT worker and
    evaluation process wants a core), so the count is capped at the cores, saying so."""
    if value < 1:
        raise LgoptError(f"{flag} must be at least 1, got {value}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if value > cores:
        print(f"lgopt: note: {flag} {value} capped at {cores}, the cores this machine has", file=sys.stderr)
        return cores
    return value


def _check_output(path: str | None) -> None:
    """Refuse an output path that cannot be written before any work is done (not after a long solve)."""
    if not path:
        return
    p = Path(path)
    if p.is_dir():
        raise LgoptError(f"-o {path} is a directory; give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        raise LgoptError(f"-o {path}: {parent} is not a directory")
    if p.exists() and not os.access(p, os.W_OK):
        raise LgoptError(f"-o {path}: the file is read-only")
    if parent.is_dir():  # write a scratch file where the plan will go: the one test that cannot lie
        import tempfile

        try:
            with tempfile.TemporaryFile(dir=parent):
                pass
        except OSError as e:
            raise LgoptError(f"-o {path}: cannot write in {parent}: {e.strerror or e}") from None
    else:
        probe = next((a for a in parent.parents if a.exists()), Path("."))
        if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
            raise LgoptError(f"-o {path}: cannot create {parent}")


def _positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1 (a zero or negative alignment has no meaning)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return value


def _positive(unit: str) -> Callable[[str], float]:
    """An argparse type: a finite positive number of ``unit``, else one clear error."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = 0.0
        if not value > 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(f"expected a positive number of {unit}, not {text!r}")
        return value
    return parse


_positive_float = _positive("seconds")
_positive_units = _positive("deterministic units")


DETERMINISTIC_HELP = ("cpsat's budget in deterministic work units instead of wall seconds (CP-SAT's deterministic "
                      "time and lgopt's own counted work; about a second of one idle core each): the same model, "
                      "seed and workers give the same plan on any machine, load or backend")


def _limit_args(p: argparse.ArgumentParser, default: float, help: str) -> None:
    """``--time-limit`` (wall seconds) or ``--deterministic-time`` (work units), not both."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--time-limit", type=float, default=default, help=help)
    g.add_argument("--deterministic-time", type=_positive_units, metavar="UNITS", help=DETERMINISTIC_HELP)


def _input_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for item in items or []:
        name, _, dims = item.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            shape = ()
        if not name or not shape or any(d <= 0 for d in shape):
            raise LgoptError(f"bad --input-shape {item!r}: expected NAME=N,C,H,W with positive integers")
        out[name] = shape
    return out


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", help="compute dtype for an ONNX model's float tensors (f32, f16, bf16, int8, ...; "
                                   f"default {DEFAULT_DTYPE}: what these chips are deployed in and what the fitted "
                                   "cost model was measured in)")
    p.add_argument("--no-fuse", action="store_true", help="keep BatchNorm and activations as separate ops")
    p.add_argument("--input-shape", action="append", metavar="NAME=N,C,H,W", help="fix a dynamic input shape")


def _reference_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reference", metavar="REF.layer_group_cache.json",
                   help="search only groupings TPU-MLIR compiles as planned: its op order and base groups, from a "
                        "cache it wrote for this model and chip (see docs/tpu-mlir.md)")
    p.add_argument("--base-groups", metavar="BASE.json",
                   help="with --reference: TPU-MLIR's base groups (base_groups.json or model_ops.csv), so ops it left "
                        "global but can run in LMEM may be grouped")
    p.add_argument("--margin", type=float, default=None,
                   help="with --reference: keep TPU-MLIR's own grouping unless lgopt's is predicted at least this "
                        "fraction faster (default 0.05, the calibrated model's per-group error; 0: whenever it is "
                        "predicted no slower)")
    p.add_argument("--reserve-banks", type=int, default=2, metavar="N",
                   help="with --reference: a group of lgopt's search that TPU-MLIR's own grouping does not have "
                        "leaves N of LMEM's banks empty by lgopt's packing (default 2: TPU-MLIR packs less tightly; 0: "
                        "plan new groups to the last byte; --judge's own moves are not held to it)")


def _judge_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--judge", metavar="FULL.onnx",
                   help="TPU-MLIR measures: compile candidate groupings with TPU-MLIR 1.30.2 (PEER_RUN: its install) "
                        "and keep the fastest it measures, searching from its own grouping and lgopt's, with the "
                        "cautions for new groups, with the packing one only and without them (three searches of "
                        "--time-limit each; FULL.onnx: the model with weights, which TPU-MLIR needs; "
                        "docs/tpu-mlir.md)")
    p.add_argument("--judge-script", metavar="score_grouping.sh",
                   help="with --judge: the scoring tool (default: $LGOPT_TPU_MLIR_SCORE)")
    p.add_argument("--judge-budget", type=int, default=40, metavar="N",
                   help="with --judge: compiles of the local search after its start points (default 40, ~1 s each)")


def _space(args: argparse.Namespace, chip: Any, time_limit: float, margin: float) -> Any:
    """The search space ``--reference`` (and ``--judge``, which implies one) asks for: a
    :class:`lgopt.tpumlir.space.ReferenceSpace`, or None."""
    from lgopt.tpumlir.space import ReferenceSpace

    refs = {"reference": args.reference, "base_groups": args.base_groups, **_judge(args, chip, time_limit)}
    if refs["reference"] is None:
        return None
    return ReferenceSpace(margin=margin, reserve_banks=_reserve(args, chip), **refs)


def _judge(args: argparse.Namespace, chip: Any, time_limit: float) -> dict[str, Any]:
    """ReferenceSpace fields for ``--judge``: the judge (compiling in the plan's dtype, INT8 or F16, on its cores),
    and the reference and base groups it implies."""
    if not getattr(args, "judge", None):
        return {}
    from lgopt.tpumlir.judge import find_judge
    from lgopt.tpumlir.judged import JudgeSettings

    if args.judge_budget < 0:
        raise LgoptError(f"--judge-budget must be at least 0, got {args.judge_budget}")
    quantize = "INT8" if str(getattr(args, "dtype", "") or "").lower() == "int8" else "F16"
    judge = find_judge(args.judge, chip.name, script=args.judge_script, quantize=quantize, cores=chip.used_cores)
    reference, base = args.reference, args.base_groups
    if reference is None:
        reference = str(judge.prepare())
    if base is None and judge.base_groups() is not None:
        base = str(judge.base_groups())
    return {"judge": judge, "reference": reference, "base_groups": base,
            "judge_settings": JudgeSettings(budget=args.judge_budget, time_limit=time_limit)}


def _margin(args: argparse.Namespace) -> float:
    """``--margin``, or the reference space's own default (lgopt.tpumlir.space.REFERENCE_MARGIN)."""
    from lgopt.tpumlir.space import REFERENCE_MARGIN

    m = REFERENCE_MARGIN if args.margin is None else float(args.margin)
    if not 0 <= m < 1:
        raise LgoptError(f"--margin must be in [0, 1), got {args.margin}")
    return m


def _reserve(args: argparse.Namespace, chip: Any) -> int:
    if not 0 <= args.reserve_banks < chip.lmem_banks:
        raise LgoptError(f"--reserve-banks must be in [0, {chip.lmem_banks}) ({chip.name} has {chip.lmem_banks} "
                         f"banks), got {args.reserve_banks}")
    return int(args.reserve_banks)


def _chip_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chip", default=None, help="chip preset (default bm1684x, or the chip file's base)")
    p.add_argument("--chip-file", help="TOML or JSON chip parameters (key 'base' names the preset)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a chip parameter, e.g. lmem_bytes=64K; cost_model=analytic|tpu-mlir-1.30 picks the "
                        "cost model (default: the model fitted on TPU-MLIR's timeline where one exists for the chip "
                        "and dtype, bm1684x and bm1688 in f16, 2-3 %% held-out error against 5-18 %%; else analytic)")
    _cores_arg(p)


def _cores_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cores", type=_positive_int, default=1,
                   help="cores each group's slices are shared over, as TPU-MLIR's --num_core shares them (default 1, "
                        "as TPU-MLIR's; at most the chip's cores: bm1688 2, bm1690 8)")


def _with_cores(chip: Any, cores: int) -> Any:
    """``chip`` run on ``cores`` cores; more than it has is an input error (one line)."""
    from lgopt.hw.chip import with_overrides

    return chip if cores == chip.used_cores else with_overrides(chip, {"used_cores": cores})


DEFAULT_DTYPE = "f16"  # an ONNX model's float tensors computed in: TPU-MLIR's F16 deployment, the fitted model's


def _dtype_hint(args: argparse.Namespace, plan: Any) -> str:
    """When an ONNX model read in the default dtype is not the plan's model but the same file read in another
    dtype is (a plan solved with ``--dtype int8``, checked without it), what to type; else ``""``."""
    from lgopt.io.problem import load_model
    from lgopt.model.dtype import COMPUTE_DTYPES
    from lgopt.model.network import network_digest
    from lgopt.tpumlir.lowering import network_of

    if getattr(args, "dtype", None) or not str(args.model).lower().endswith(".onnx") or not plan.model_digest:
        return ""
    for dtype in (d for d in COMPUTE_DTYPES if d != DEFAULT_DTYPE):
        try:
            same = network_digest(network_of(load_model(args.model, dtype=dtype), plan)) == plan.model_digest
        except LgoptError:  # the model cannot be read so: not the one
            continue
        if same:
            return f" -- it was made for {args.model} in {dtype}: pass --dtype {dtype}"
    return ""


def _load_model(args: argparse.Namespace, path: str):
    from lgopt.io.problem import load_model

    opts = {}
    if getattr(args, "dtype", None):
        opts["dtype"] = args.dtype
    elif str(path).lower().endswith(".onnx") and hasattr(args, "dtype"):
        opts["dtype"] = DEFAULT_DTYPE
    if getattr(args, "no_fuse", False):
        opts["fuse"] = False
    if getattr(args, "input_shape", None):
        opts["input_shapes"] = _input_shapes(args.input_shape)
    return load_model(path, **opts)


def _chip(args: argparse.Namespace, net: Any = None):
    """The chip the flags name; given the network, priced by the best cost model lgopt has for it unless the
    user named one (``--set cost_model=...`` or a chip file's): the fitted one where it exists for the chip and
    the network's dtype (:func:`lgopt.cost.registry.default_cost_model`)."""
    from dataclasses import replace

    from lgopt.cost.registry import default_cost_model
    from lgopt.hw.chip import get_chip, parse_set

    sets = parse_set(args.set)
    chip = _with_cores(get_chip(args.chip, sets, args.chip_file), getattr(args, "cores", 1))
    if net is None or "cost_model" in sets or _file_sets_cost_model(args.chip_file):
        return chip
    dtypes = {net.tensor(t).dtype for t in net.inputs if t in net.tensors} or {"f16"}
    return replace(chip, cost_model=default_cost_model(chip, dtypes.pop())) if len(dtypes) == 1 else chip


def _file_sets_cost_model(chip_file: str | None) -> bool:
    if not chip_file:
        return False
    from lgopt.hw.chip import load_chip_file

    return "cost_model" in load_chip_file(chip_file)


def cmd_import(args: argparse.Namespace) -> int:
    from lgopt.io.problem import save_problem

    net = _load_model(args, args.model)
    if args.name:
        from dataclasses import replace

        net = replace(net, name=args.name)
    out = args.output or str(Path(args.model).with_suffix(".json").name)
    save_problem(net, out)
    n_local = len(net.local_ops)
    print(f"{net.name}: {len(net.ops)} ops ({n_local} local, {len(net.ops) - n_local} global), "
          f"{len(net.tensors)} tensors, inputs {', '.join(f'{t}{list(net.tensor(t).orig_shape)}' for t in net.inputs)}"
          f" -> {out}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from lgopt.io.planfile import load_plan
    from lgopt.report.verdict import verify

    plan = load_plan(args.plan)
    net = _load_model(args, args.model)
    vs = verify(net, plan)
    if vs:
        print(f"FAIL {args.plan}: {vs[0]}" + (f" (+{len(vs) - 1} more)" if len(vs) > 1 else "")
              + _dtype_hint(args, plan))
        if args.all:
            for v in vs[1:]:
                print(f"  {v}")
        return 1
    print(f"OK {args.plan}: {len(plan.groups)} groups, {len(plan.global_layers)} global layers hold every "
          "constraint; recorded costs recomputed")
    return 0


class _Incumbents:
    """Keeps the best plan a solve has reported so far, verified, and writes it at once (atomically) to the
    output file, so an interrupted run loses nothing it found."""

    def __init__(self, net: Any, output: str | None, objective: str) -> None:
        self.net, self.output, self.objective = net, output, objective
        self.best: Any = None
        self.value: int | None = None

    def __call__(self, plan: Any, final: bool = False) -> None:
        from lgopt.io.planfile import save_plan
        from lgopt.report.verdict import verify
        from lgopt.strategies.cpsat.common import objective_value

        value = objective_value(plan.cost, self.objective)
        if not final and self.value is not None and value >= self.value:
            return
        violations = verify(self.net, plan)
        if violations:  # a plan that breaks a constraint is an lgopt bug, whoever built it
            raise RuntimeError(f"the {plan.strategy} plan fails verification: {violations[0]}")
        if self.output:
            save_plan(plan, self.output)
        self.best, self.value = plan, value

    def interrupted(self) -> int:
        """One line on stderr saying what was kept; exit status 130."""
        if self.best is None:
            print("lgopt: interrupted before any plan was found; nothing written", file=sys.stderr)
        else:
            where = f"written to {self.output}" if self.output else "not written (no -o given)"
            print(f"lgopt: interrupted; the best plan so far ({self.best.strategy}, {self.objective} {self.value:,}, "
                  f"verified) is {where}", file=sys.stderr)
        return 130


def _solve_settings(args: argparse.Namespace, budget: float) -> tuple[Any, Any]:
    """The search and CP-SAT settings the flags ask for, checked; ``budget`` is the CP-SAT share of the
    command's time limit."""
    import math

    from lgopt.group.solver import check_params
    from lgopt.strategies.cpsat.common import CpsatSettings
    from lgopt.strategies.settings import SearchSettings

    if not math.isfinite(args.h_ratio) or args.h_ratio < 0:
        raise LgoptError(f"--h-ratio must be a finite number at least 0, got {args.h_ratio}")
    settings = SearchSettings(h_ratio=args.h_ratio, bank_rule=args.bank_rule)
    cpsat = CpsatSettings(objective=args.objective, time_limit=budget, workers=args.workers,
                          deterministic=args.deterministic_time is not None, seed=args.seed,
                          formulation=args.formulation, orders=args.orders,
                          handover=not args.no_handover, cp_sat_params=check_params(args.cp_sat_params or ""))
    return settings, cpsat


RESERVE = 0.5  # seconds of a solve's time limit kept for what follows the search: the final check and writing


def cmd_solve(args: argparse.Namespace) -> int:
    import time

    from lgopt.model.network import with_batch
    from lgopt.strategies.registry import StrategyOptions, parse_strategy
    from lgopt.tpumlir.grouping import GroupingInfeasible
    from lgopt.tpumlir.lowering import network_of

    started = getattr(args, "started", time.perf_counter())
    _positive_seconds(args.time_limit, "--time-limit")
    args.workers = _workers(args.workers)
    if args.batch is not None and args.batch < 1:
        raise LgoptError(f"--batch must be at least 1, got {args.batch}")
    margin = _margin(args)
    _check_output(args.output)
    choice = parse_strategy(args.strategy)
    net = _load_model(args, args.model)
    if args.batch:
        net = with_batch(net, args.batch)
    chip = _chip(args, net)
    # the time limit is the whole command's: what loading took, and a reserve for the final check, come off
    budget = max(0.05, args.time_limit - (time.perf_counter() - started) - RESERVE)
    if args.deterministic_time is not None:  # work units: loading and checking do not count
        budget = args.deterministic_time
    settings, cpsat = _solve_settings(args, budget)
    t0 = time.perf_counter()
    progress = None if args.json else stderr_progress
    space = _space(args, chip, budget, margin)
    # the network every plan of this run is of: with a reference, lowered once as its cache lowered it
    planned = net if space is None else space.lowered(net, chip)[0]
    keep = _Incumbents(planned, args.output, args.objective)
    try:
        plan, extra = choice.run(net, chip, StrategyOptions(settings, cpsat, progress=progress, incumbent=keep,
                                                            space=space))
        seconds = round(time.perf_counter() - t0, 3)
        _clear_progress(progress)
        keep(plan, final=True)
    except GroupingInfeasible as e:  # a given grouping lgopt's rules cannot build: a verdict, not an input error
        if args.json:
            print(json.dumps({"model": net.name, "chip": chip.name, "strategy": choice.label, "status": "infeasible",
                              "group": e.group_index, "reason": e.reason, "verified": False}))
        else:
            print(f"{net.name} on {chip.name} ({choice.label}): infeasible: group {e.group_index}: {e.reason}")
        return 1
    except KeyboardInterrupt:
        _clear_progress(progress)
        return keep.interrupted()
    _print_solve(args, network_of(planned, plan), plan, extra, seconds)  # no second lowering: same digest
    return 0


def _clear_progress(progress: Any) -> None:
    if progress and sys.stderr.isatty():
        print("\r" + " " * 72 + "\r", end="", file=sys.stderr)


def _print_solve(args: argparse.Namespace, net: Any, plan: Any, extra: dict[str, Any], seconds: float) -> None:
    from lgopt.hw.chip import chip_from_dict, label
    from lgopt.report.tables import collapse_globals, global_reasons, group_table, summary

    s = summary(net, plan, seconds)
    s["verified"] = True
    if args.json:
        print(json.dumps(s))
        return
    df = collapse_globals(group_table(net, plan))
    print(df.to_string(index=False, na_rep="-"))
    print(f"\n{s['model']} on {label(chip_from_dict(plan.chip))} ({args.strategy}; cycles by the {s['cost_model']} "
          f"cost model): {s['cycles']:,} cycles ({s['time_ms']} ms), "
          f"{s['traffic_bytes'] / 1e6:.2f} MB GMEM traffic, {s['groups']} groups, {s['global_layers']} global layers")
    for line in global_reasons(net, plan):
        print(line)
    for line in extra.get("searched", []) + extra.get("adjusted", []):
        print(f"tpu-mlir: {line}")
    if "groups_in_cache" in extra:
        print(f"tpu-mlir: {extra['groups_scored']} of {extra['groups_in_cache']} cache groups built exactly, "
              f"{extra['ops_mapped']} ops mapped, {extra['casts_skipped']} inserted casts skipped, "
              f"{len(extra.get('fused', []))} lgopt ops folded into a TPU-MLIR op; cost model: {s['cost_model']}")
        if extra.get("lowered"):
            print(f"tpu-mlir: the model lowered as TPU-MLIR compiles it, {len(extra['lowered'])} changes (ops it "
                  "fuses that lgopt's importer keeps apart, MatMul chains it cuts into column pieces run in different "
                  "steps; lgopt.tpumlir.lowering): the plan is of the model so lowered, which verify, simulate and "
                  "export rebuild from the cache it records")
    sv = plan.solver
    if plan.strategy == "cpsat" and "value" in sv:
        print(f"cpsat: {sv.get('status', plan.status)} ({sv.get('formulation')}), {sv['objective']} {sv['value']:,}, "
              f"best bound {sv['bound']:,} (by the {s['cost_model']} cost model), gap {100 * sv['gap']:.2f}% over "
              f"{sv.get('space', 'the candidate space')}")
        for note in ("outside_space", "bound_exceeded"):
            if sv.get(note):
                print(f"cpsat: {sv[note]}")
        if sv.get("resliced"):
            print(f"cpsat: kept {sv['resliced']}")
    if sv.get("stopped"):
        print(f"cpsat: stopped early: {sv['stopped']}")
    if sv.get("judge"):
        j = sv["judge"]
        ref = j.get("reference_measured_cycles")
        print(f"judge: {j['measured_cycles']:,} cycles measured by {j['source']}"
              + (f"; TPU-MLIR's own grouping {ref:,} ({100 * (1 - j['measured_cycles'] / ref):.2f}% fewer)" if ref
                 else "") + f"; {j['compiles']} compiles in {j['seconds']:g} s, stopped: {j['stopped']}")
        if j.get("reference_faster"):
            print(f"judge: {j['reference_faster']}")
    elif sv.get("kept_reference"):
        print(f"reference: {sv['kept_reference']} (--margin {sv['margin']:g}; cycles by the {s['cost_model']} "
              "cost model)")
    elif sv.get("reference_cycles"):
        print(f"reference: its own grouping is predicted at {sv['reference_cycles']:,.0f} cycles; this plan is "
              f"{100 * (1 - s['cycles'] / sv['reference_cycles']):.1f}% faster by the {s['cost_model']} cost model"
              + (f"; its groups TPU-MLIR's does not have leave {sv['reserve_banks']} banks of LMEM empty "
                 "(--reserve-banks)" if sv.get("reserve_banks") else ""))
    if sv.get("io_converted_in_groups"):
        print(f"f32 casts: {', '.join(sv['io_converted_in_groups'])} converted in the group next to it (TPU-MLIR "
              "keeps the graph's inputs and outputs f32; the exporter puts those Casts in the group)")
    print(f"lower bound {s['lower_bound_cycles']:,} cycles ({s['cost_model']}), "
          f"{s['lower_bound_traffic_bytes'] / 1e6:.2f} MB: "
          f"plan is {s['ratio_to_lower_bound']:.3f}x the bound; verified OK; {seconds:.2f} s"
          + (f"; plan written to {args.output}" if args.output else ""))


def cmd_pack(args: argparse.Namespace) -> int:
    """Wall-clock ``--time-limit`` for the whole command (from :func:`main`): reading, solving, checking
    and writing."""
    t_start = getattr(args, "started", time.perf_counter())
    from lgopt.group.pack import check_packing, pack, peak_live_bytes
    from lgopt.group.pack_csv import check_writable, read_csv, write_csv
    from lgopt.hw.chip import parse_size

    capacity = parse_size(args.capacity)
    out = check_writable(args.output or str(args.csv).rsplit(".", 1)[0] + ".out.csv")
    items = read_csv(args.csv)
    # what is left of the limit, less a margin for the independent check and the writing
    deadline = t_start + args.time_limit - min(0.25, 0.05 * args.time_limit)
    res = pack(items, capacity, align=args.align, minimize="peak" if args.min_peak else "none", time_limit=None,
               deadline=deadline, workers=args.workers, seed=args.seed)
    if not res.found:
        why = f": {res.why}" if res.why else ""
        print(f"{args.csv}: {len(items)} buffers, capacity {capacity}: {res.status} after {res.seconds:.2f} s{why} "
              f"(peak live bytes {peak_live_bytes(items, args.align)})")
        return 1
    problem = check_packing(items, res.offsets, capacity, args.align)
    if problem:  # the packer's answer is checked independently before it is written
        raise RuntimeError(f"packer produced an invalid packing: {problem}")
    write_csv(out, items, res.offsets)
    peak = f"; lowest possible: {res.bound}" if args.min_peak and res.status != "optimal" else ""
    print(f"{args.csv}: {len(items)} buffers packed into {res.peak} of {capacity} bytes ({res.status}{peak}) by "
          f"{res.engine} in {time.perf_counter() - t_start:.2f} s -> {out}")
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from lgopt.check.simulate import simulate
    from lgopt.io.planfile import load_plan
    from lgopt.tpumlir.lowering import network_of

    plan = load_plan(args.plan)
    model = _load_model(args, args.model)
    net = network_of(model, plan)  # as the TPU-MLIR cache it was read from lowered it, where it split ops
    from lgopt.model.network import network_digest

    if plan.model_digest and plan.model_digest != network_digest(net):
        raise LgoptError(f"{args.plan} was made for another model than {args.model}{_dtype_hint(args, plan)}")
    t0 = time.perf_counter()
    res = simulate(net, plan, args.seed)
    print(f"{res.summary()} ({time.perf_counter() - t0:.1f} s, seed {args.seed})")
    if net is not model:
        print("the model as its TPU-MLIR cache lowered it (ops it fuses, MatMul column pieces): not cross-checked "
              "with onnxruntime, whose graph has them apart")
    elif str(args.model).lower().endswith(".onnx"):
        from lgopt.check.simulate import check_with_onnxruntime

        verdict = check_with_onnxruntime(net, args.model, args.seed, _input_shapes(args.input_shape))
        print(verdict)
        if verdict.startswith("MISMATCH"):
            return 1
    if res.opaque and args.verbose:
        print("opaque: " + ", ".join(res.opaque))
    return 0 if res.ok else 1


def cmd_compare(args: argparse.Namespace) -> int:
    from lgopt.cli import stderr_progress
    from lgopt.report.compare import compare
    from lgopt.strategies.registry import parse_strategies
    from lgopt.strategies.settings import SearchSettings

    _positive_seconds(args.time_limit, "--time-limit")
    args.workers = _workers(args.workers)
    strategies = parse_strategies(args.strategies)
    models = [(m, _load_model(args, m)) for m in args.models]
    chip = _chip(args, models[0][1])
    if args.reference and len(models) > 1:
        raise LgoptError("--reference is a cache of one model: compare one model with it")
    df = compare(models, chip, strategies, args.output, SearchSettings(bank_rule=args.bank_rule), args.time_limit,
                 args.workers, stderr_progress, args.save_plans, reference=args.reference,
                 base_groups=args.base_groups, margin=_margin(args), reserve_banks=_reserve(args, chip),
                 backend=_backend(args), seed=args.seed,
                 deterministic=args.deterministic_time)
    if sys.stderr.isatty():
        print("\r" + " " * 72 + "\r", end="", file=sys.stderr)
    cols = ["model", "strategy", "groups", "global layers", "slices", "cycles", "cost model", "traffic MB",
            "peak LMEM %", "status", "gap %", "seconds", "x greedy", "x LB"]
    print(df[[c for c in cols if c in df]].to_string(index=False, na_rep="-"))
    if args.output:
        print(f"\nwrote {args.output}/report.md, results.csv, report.html" + (" and plans/" if args.save_plans else ""))
    return 0


def _backend(args: argparse.Namespace) -> Any:
    """``--backend``, ``--scheduler`` and ``--jobs`` as a :class:`lgopt.report.parallel.Backend`; local
    process counts are capped at the cores (a remote scheduler brings its own workers)."""
    from lgopt.report.parallel import Backend

    if args.scheduler and args.backend == "processes" and not args.backend_given:
        args.backend = "dask"  # --scheduler alone says where to run
    jobs = args.jobs if args.scheduler else _workers(args.jobs, "--jobs")
    return Backend(args.backend, jobs, args.scheduler)


def cmd_sweep(args: argparse.Namespace) -> int:
    from lgopt.cli import stderr_progress
    from lgopt.hw.chip import get_chip
    from lgopt.report.sweep import parse_sweep, sweep
    from lgopt.strategies.registry import parse_strategies

    _positive_seconds(args.time_limit, "--time-limit")
    if args.cpsat_workers < 1:
        raise LgoptError(f"--workers must be at least 1, got {args.cpsat_workers}")
    backend = _backend(args)
    paths = list(args.model or []) + list(args.models or [])
    if not paths:
        raise LgoptError("sweep needs a model: lgopt sweep MODEL... or --models A B ...")
    if len(set(paths)) != len(paths):
        raise LgoptError("a model is named twice")
    axes = parse_sweep(args.set or [])
    if not axes:
        raise LgoptError("sweep needs at least one --set key=v1,v2,...")
    names = [c.strip() for c in (args.chip or "").split(",") if c.strip()]
    chips = [_with_cores(get_chip(n or None, {}, args.chip_file), args.cores) for n in names or [""]]
    if len({c.name for c in chips}) != len(chips):
        raise LgoptError("a chip is named twice in --chip")
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    parse_strategies(args.strategies)  # every name registered, with its argument where it needs one
    models = [(m, _load_model(args, m)) for m in paths]
    if len({n.name for _, n in models}) != len(models):
        raise LgoptError("two models have the same name: the report tells models apart by name")
    tag = (models[0][1].name if len(models) == 1 else f"{len(models)}models") + "-" + \
        (chips[0].name if len(chips) == 1 else f"{len(chips)}chips")
    out = args.output or f"reports/sweep-{tag}"
    df = sweep(models, chips, axes, strategies, out, args.time_limit, backend, args.seed, args.cpsat_workers,
               stderr_progress, started=getattr(args, "started", None), deterministic=args.deterministic_time)
    if sys.stderr.isatty():
        print("\r" + " " * 72 + "\r", end="", file=sys.stderr)
    drop = [c for c in df if c.endswith("(value)")] + (["chip"] if len(chips) == 1 else []) + \
        (["model"] if len(models) == 1 else []) + (["why not placed"] if df["placed"].all() else [])
    print(df.drop(columns=drop).to_string(index=False, na_rep="-"))
    print(f"\n{int(df['cached'].sum())} of {len(df)} configurations served from cache; wrote {out}/sweep.md, "
          "sweep.csv, sweep.html")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from lgopt.io.planfile import load_plan
    from lgopt.report.tables import draw_group

    plan = load_plan(args.plan)
    out = draw_group(plan, args.group, args.output)
    print(f"group {args.group} of {plan.model}: {out}")
    return 0


def cmd_chips(args: argparse.Namespace) -> int:
    import pandas as pd

    from lgopt.hw.chip import PRESETS, get_chip, label, parse_set, source_of_value

    if args.chip or args.set or args.chip_file:
        chip = get_chip(args.chip, parse_set(args.set), args.chip_file)
        rows = [{"parameter": k, "value": v, "source": source_of_value(chip, k)} for k, v in chip.to_dict().items()]
        print(f"chip {label(chip)}")
        print(pd.DataFrame(rows).to_string(index=False))
        return 0
    df = pd.DataFrame([{k: v for k, v in c.to_dict().items() if k != "macs_per_lane"} for c in PRESETS.values()])
    print(df.to_string(index=False))
    return 0


def cmd_deploy(args: argparse.Namespace) -> int:
    """``lgopt deploy``: TPU-MLIR's grouping and lgopt's, both compiled and measured; the faster delivered."""
    from lgopt.report.verdict import verify
    from lgopt.tpumlir.compiler import find_toolchain
    from lgopt.tpumlir.deploy import DeployRequest, run_deploy

    tc = find_toolchain(args.tpu_mlir)
    _positive_seconds(args.time_limit, "--time-limit")
    req = DeployRequest(Path(args.model), args.chip, Path(args.output), args.quantize.upper(), args.cores,
                        Path(args.calibration_table) if args.calibration_table else None,
                        Path(args.calibration_data) if args.calibration_data else None, args.judge_budget,
                        args.time_limit, _workers(args.workers), _margin(args))

    def progress(line: str) -> None:
        print(f"[lgopt deploy] {line}", file=sys.stderr, flush=True)

    r = run_deploy(req, tc, verify, progress)
    if args.json:
        print(json.dumps(r))
        return 0
    ours = f"{r['lgopt_cycles']:,}" if r.get("lgopt_cycles") else "not compiled"
    print(f"{req.model.name} on {req.chip} ({req.quantize}, {req.cores} core(s)): TPU-MLIR's grouping "
          f"{r['tpu_mlir_cycles']:,} cycles, lgopt's {ours} (measured by TPU-MLIR's codegen timeline); delivered "
          f"{r['kept']}'s, {r['speedup']:.3f}x; bmodel, caches, plan and report in {req.out}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from lgopt.io.exporters import export, get, write
    from lgopt.io.planfile import load_plan
    from lgopt.tpumlir.lowering import network_of

    ex = get(args.format)
    plan = load_plan(args.plan)
    planned = int(plan.chip.get("used_cores", 1))
    if args.cores is not None and args.cores != planned:
        raise LgoptError(f"{args.plan} was planned for {planned} core(s), not --cores {args.cores}: solve it again "
                         f"with --cores {args.cores} (the slices each core runs are part of the plan)")
    net = network_of(_load_model(args, args.model), plan)
    opts = {"reference": args.reference, "base_groups": args.base_groups, "groups_only": args.groups_only or None,
            "edge_casts": args.edge_casts}
    if args.format == "tpu-mlir" and args.model.endswith(".onnx"):
        opts["onnx_model"] = args.model
    result = export(args.format, plan, net, **opts)
    out = args.output or str(Path(args.plan).name).removesuffix(".json").removesuffix(".plan") + ex.suffix
    write(result, out)
    meta = result.get("lgopt", {}) if isinstance(result, dict) else {}
    n = meta.get("groups", len(plan.groups))
    print(f"{plan.model} ({plan.strategy}) -> {out}: {args.format}, {n} groups"
          + (f", reference {args.reference}" if args.reference else ""))
    for w in meta.get("warnings", []):
        print(f"  warning: {w}", file=sys.stderr)
    return 0


def _names(text: str | None, flag: str) -> tuple[str, ...]:
    """A comma-separated list of names (empty: none given); a name twice is a typo, not a wish."""
    names = tuple(n.strip() for n in (text or "").split(",") if n.strip())
    if len(set(names)) != len(names):
        raise LgoptError(f"{flag}: a name is given twice")
    return names


def cmd_fit(args: argparse.Namespace) -> int:
    from lgopt.report.verdict import verify
    from lgopt.tpumlir.calibrate import FitOptions, evaluate_fit, fit_model, record_held_out

    if args.eval_limit is not None and args.eval_limit < 1:
        raise LgoptError(f"--eval-limit must be at least 1, got {args.eval_limit}")
    opts = FitOptions(Path(args.measurements), Path(args.output), _names(args.chips, "--chips"),
                      _names(args.models, "--models"), _names(args.holdout, "--holdout"),
                      Path(args.batch_runs) if args.batch_runs else None, args.date or "", args.name)
    fit = fit_model(opts, say=print)
    if args.no_eval:
        return 0
    if not fit.held_out:
        print("no model held out (--holdout M1,M2): no held-out error to report")
        return 0
    held = evaluate_fit(fit, args.eval_limit, check=lambda net, plan: verify(net, plan, stop_at_first=True))
    print("\n".join(held.summary()))
    if args.eval_limit is None:  # the whole held-out set measured: what a search may trust the files for
        print(f"held-out error recorded in {', '.join(map(str, record_held_out(fit, held)))}")
    if args.report:
        print(f"wrote {', '.join(map(str, held.write(Path(args.report))))}")
    return 0


def strategy_names() -> str:
    from lgopt.strategies.registry import names

    return names()


def _add_import(sub: Any) -> None:
    """``lgopt import``."""
    s = sub.add_parser("import", help="read an ONNX model into an lgopt problem file")
    s.add_argument("model")
    s.add_argument("-o", "--output", help="problem file to write (default: MODEL name with .json)")
    s.add_argument("--name", help="network name to record")
    _model_args(s)
    s.set_defaults(func=cmd_import)


def _add_verify(sub: Any) -> None:
    """``lgopt verify``."""
    s = sub.add_parser("verify", help="check a plan against its model without trusting the planner")
    s.add_argument("plan")
    s.add_argument("--model", required=True, help="the model (.onnx or problem .json) the plan is for")
    s.add_argument("--all", action="store_true", help="list every violation, not just the first")
    _model_args(s)
    s.set_defaults(func=cmd_verify)


def _add_solve(sub: Any) -> None:
    """``lgopt solve``."""
    s = sub.add_parser("solve", help="group, slice and allocate a model; write a verified plan")
    s.add_argument("model")
    _chip_args(s)
    _reference_args(s)
    _judge_args(s)
    s.add_argument("--strategy", default="cpsat", metavar="NAME[=ARG]",
                   help=f"a registered strategy: {strategy_names()} (default cpsat: never worse than greedy, whose "
                        "plan is its start, and it says how far from optimal its plan can be)")
    s.add_argument("--cp-sat-params", metavar="TEXT",
                   help="extra CP-SAT parameters for cpsat's master and monolithic models, in SatParameters "
                        "text format, e.g. 'linearization_level:2'")
    s.add_argument("--objective", default="cycles", choices=get_args(Objective), help="what cpsat minimises")
    _limit_args(s, 60.0, "wall-clock seconds for the whole command, loading and checking included (default 60)")
    s.add_argument("--workers", type=int, default=2, help="CP-SAT workers (default 2)")
    s.add_argument("--seed", type=int, default=0, help="CP-SAT random seed")
    s.add_argument("--formulation", default="auto", choices=get_args(Formulation))
    s.add_argument("--no-handover", action="store_true",
                   help="cpsat: consecutive groups always meet in GMEM (no tensor kept in LMEM between them)")
    s.add_argument("--orders", type=int, default=1, choices=[1, 2, 3],
                   help="topological orders cpsat searches: 1 the given one, 3 adds depth- and breadth-first")
    s.add_argument("-o", "--output", help="plan file to write")
    s.add_argument("--json", action="store_true", help="print a machine-readable summary")
    s.add_argument("--batch", type=int, help="solve at this batch size")
    s.add_argument("--h-ratio", type=float, default=0.5, help="h/2 rule ratio (default 0.5)")
    s.add_argument("--bank-rule", default="soft", choices=["soft", "hard", "off"])
    _model_args(s)
    s.set_defaults(func=cmd_solve)


def _add_pack(sub: Any) -> None:
    """``lgopt pack``."""
    s = sub.add_parser("pack", help="exact static allocation of a CSV of buffers (id,lower,upper,size)")
    s.add_argument("csv")
    s.add_argument("--capacity", required=True, help="bytes available, e.g. 256K")
    s.add_argument("--align", type=_positive_int, default=1, help="offsets are multiples of this (bytes)")
    s.add_argument("--min-peak", action="store_true", help="also minimise the highest address used")
    s.add_argument("--time-limit", type=_positive_float, default=60.0,
                   help="wall-clock seconds for the whole command (default 60)")
    s.add_argument("--workers", type=_positive_int, default=2, help="CP-SAT workers, where CP-SAT runs")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("-o", "--output", help="CSV to write (default: CSV name with .out.csv)")
    s.set_defaults(func=cmd_pack)


def _add_simulate(sub: Any) -> None:
    """``lgopt simulate``."""
    s = sub.add_parser("simulate", help="execute a plan on a simulated LMEM and compare with the unsliced network")
    s.add_argument("plan")
    s.add_argument("--model", required=True)
    s.add_argument("--seed", type=int, default=0, help="seed of the generated inputs and weights")
    s.add_argument("-v", "--verbose", action="store_true", help="list the ops simulated as opaque")
    _model_args(s)
    s.set_defaults(func=cmd_simulate)


def _add_compare(sub: Any) -> None:
    """``lgopt compare``."""
    s = sub.add_parser("compare", help="strategies side by side: report.md, results.csv, report.html")
    s.add_argument("models", nargs="+")
    _reference_args(s)
    s.add_argument("--strategies", default="greedy,cpsat", help=f"comma-separated: {strategy_names()}")
    _chip_args(s)
    s.add_argument("-o", "--output", help="report folder, e.g. reports/NAME")
    _limit_args(s, 60.0, "wall-clock seconds per model and strategy (default 60)")
    s.add_argument("--workers", type=int, default=2)
    s.add_argument("--bank-rule", default="soft", choices=["soft", "hard", "off"])
    s.add_argument("--save-plans", action="store_true", help="also write every plan under OUTPUT/plans/")
    s.add_argument("--seed", type=int, default=0, help="CP-SAT's random seed")
    _backend_args(s, jobs_default=1)
    _model_args(s)
    s.set_defaults(func=cmd_compare)


class _BackendAction(argparse.Action):
    """Stores --backend and remembers it was given (so --scheduler alone can imply dask)."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: Any = None) -> None:
        namespace.backend = values
        namespace.backend_given = True


def _backend_args(p: argparse.ArgumentParser, jobs_default: int) -> None:
    p.add_argument("--backend", default="processes", choices=["processes", "sequential", "dask"],
                   action=_BackendAction,
                   help="where configurations run: local worker processes (default), this process (debugging), "
                        "or a Dask cluster (--scheduler tcp://HOST:8786; without it a local cluster of --jobs workers)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="address of a running Dask scheduler")
    p.add_argument("--jobs", type=int, default=jobs_default, help=f"local worker processes (default {jobs_default})")
    p.set_defaults(backend_given=False)


def _add_sweep(sub: Any) -> None:
    """``lgopt sweep``."""
    s = sub.add_parser("sweep", help="cross product of chip parameters: table, plots, Pareto front, knee")
    s.add_argument("model", nargs="*", help="models (.onnx or problem .json)")
    s.add_argument("--models", nargs="+", metavar="MODEL", help="more models, swept together")
    s.add_argument("--chip", default=None,
                   help="chip preset, or several separated by commas (default bm1684x, or the chip file's base)")
    s.add_argument("--chip-file")
    s.add_argument("--set", action="append", metavar="KEY=V1,V2,...",
                   help="a swept chip parameter (used_cores=1,2 sweeps the cores a deployment uses)")
    _cores_arg(s)
    s.add_argument("--strategies", default="greedy", help=f"comma-separated: {strategy_names()}")
    s.add_argument("-o", "--output", help="report folder (default reports/sweep-MODEL-CHIP)")
    _limit_args(s, 10.0, "wall-clock seconds per configuration (all its strategies, checks included; default 10)")
    s.add_argument("--seed", type=int, default=0, help="CP-SAT's random seed in every configuration")
    s.add_argument("--workers", dest="cpsat_workers", type=int, default=1,
                   help="CP-SAT workers per configuration (default 1: the backend runs configurations in parallel)")
    _backend_args(s, jobs_default=2)
    _model_args(s)
    s.set_defaults(func=cmd_sweep)


def _add_show(sub: Any) -> None:
    """``lgopt show``."""
    s = sub.add_parser("show", help="draw a group's LMEM allocation (timesteps x addresses)")
    s.add_argument("plan")
    s.add_argument("--group", type=int, default=0)
    s.add_argument("-o", "--output", default="group.png")
    s.set_defaults(func=cmd_show)


def _add_export(sub: Any) -> None:
    """``lgopt export``."""
    s = sub.add_parser("export", help="write a plan in another format (tpu-mlir: a layer_group_cache.json)")
    s.add_argument("plan")
    s.add_argument("--model", required=True, help="the model (.onnx or problem .json) the plan is for")
    s.add_argument("--format", default="tpu-mlir", help="lgopt-plan or tpu-mlir (default tpu-mlir)")
    s.add_argument("--reference", metavar="REF.layer_group_cache.json",
                   help="tpu-mlir: a cache TPU-MLIR wrote for the same model and chip (op names, order, casts)")
    s.add_argument("--base-groups", metavar="BASE.json",
                   help="tpu-mlir: base_groups.json (or model_ops.csv) of the model: ops TPU-MLIR can run in LMEM")
    s.add_argument("--edge-casts", choices=("global", "reference"),
                   help="tpu-mlir: casts TPU-MLIR inserted at a group's edge join the group where the reference has "
                        "them (default: a global cast moves its tensor through GMEM twice, which no plan charges) "
                        "or run as global layers; a network input's or output's Cast goes with the group that "
                        "converts it either way")
    s.add_argument("--groups-only", action="store_true",
                   help="tpu-mlir: export the groups and slice counts of a plan whose schedule goes beyond what the "
                        "cache can say (lgopt's weight load rows, hand-over); TPU-MLIR then schedules them itself")
    s.add_argument("-o", "--output", help="file to write (default: PLAN name with the format's suffix)")
    s.add_argument("--cores", type=_positive_int, default=None,
                   help="the cores the compile runs on (TPU-MLIR's --num_core): the plan's (default: the plan's)")
    _model_args(s)
    s.set_defaults(func=cmd_export)


def _add_chips(sub: Any) -> None:
    """``lgopt chips``."""
    s = sub.add_parser("chips", help="list chip presets, or one chip's parameters and their sources")
    s.add_argument("--chip", default=None)
    s.add_argument("--chip-file")
    s.add_argument("--set", action="append", metavar="KEY=VALUE")
    s.set_defaults(func=cmd_chips)


FIT_HELP = """Fit the constants of the fitted cost model (lgopt.cost.fitted, shipped as tpu-mlir-1.30 for F16 and
tpu-mlir-1.30-int8 for INT8) on measured TPU-MLIR timelines in the calibration format (shared/calibration/README.md:
totals.csv, groups.csv, globals.csv, ops.csv.gz, model_ops.csv, onnx/, caches/; a quantize column in totals.csv
says the deployment, F16 without one; benchmarks/timelines.py makes INT8's), on every model but the held-out
ones, then print its error on those next to the analytic model's.  Writes OUT_DIR/<chip>.json for every chip:
the folder layout the fitted model reads (lgopt/cost/models and models/int8 are the shipped ones; elsewhere,
register CalibratedModel(name=..., directory=OUT_DIR) in a plugin, docs/cost-model.md).  Each file records its
data, models, date and the command that makes it again (source.command): the same measurements and options give
the same constants."""


def _add_fit(sub: Any) -> None:
    """``lgopt fit``."""
    s = sub.add_parser("fit", help="fit the cost model on measured compiler timelines; write <chip>.json files",
                       description=FIT_HELP)
    s.add_argument("measurements", metavar="MEASUREMENTS_DIR", help="a folder in the calibration format")
    s.add_argument("-o", "--output", required=True, metavar="OUT_DIR",
                   help="folder to write <chip>.json into, one per chip (created if missing; files replaced)")
    s.add_argument("--chips", help="comma-separated chips to fit (default: every chip measured)")
    s.add_argument("--models", help="comma-separated models to use, fitted on and held out (default: all)")
    s.add_argument("--holdout", help="comma-separated models left out of the fit, to report its error on "
                                     "(default: none; the shipped models hold out mobilenet_v3_small,resnet50,"
                                     "unet_small)")
    s.add_argument("--batch-runs", metavar="DIR",
                   help="a batch > 1 round trip's output (benchmarks/roundtrip.py --batch 4: DIR/scores/"
                        "MODEL_CHIP_bB_opt2.json): its opt2 timelines price a global Gemm's further rows "
                        "(without it, each row costs a full one)")
    s.add_argument("--date", metavar="YYYY-MM-DD", help="the date recorded in the files (default: today)")
    s.add_argument("--name", default="tpu-mlir-1.30", help="the cost model's name recorded in the files")
    s.add_argument("--no-eval", action="store_true", help="fit and write the constants only")
    s.add_argument("--eval-limit", type=int, metavar="N", help="score at most N held-out groupings per chip")
    s.add_argument("--report", metavar="DIR",
                   help="also write the held-out comparison there: ops.csv, groups.csv, groupings.csv, summary.md")
    s.set_defaults(func=cmd_fit)


DEPLOY_HELP = """Compile MODEL.onnx with TPU-MLIR 1.30.2 twice, with its own grouping and with lgopt's (searched in the
space TPU-MLIR compiles, against its grouping, with the fitted cost model where one exists), measure both on
codegen's timeline and deliver the faster bmodel: never slower than TPU-MLIR alone.  Needs TPU-MLIR
(--tpu-mlir VENV or LGOPT_TPU_MLIR; scripts/install-tpu-mlir.sh installs it, docs/deploy.md) and the model
with its weights.  Writes DIR/NAME_CHIP_Q.bmodel, tpu-mlir.layer_group_cache.json,
lgopt.layer_group_cache.json, plan.json, report.json and report.md; scratch files in DIR/work."""


def _add_deploy(sub: Any) -> None:
    """``lgopt deploy``."""
    s = sub.add_parser("deploy", help="compile a model with TPU-MLIR's grouping and lgopt's; keep the faster bmodel",
                       description=DEPLOY_HELP)
    s.add_argument("model", metavar="MODEL.onnx", help="the model with its weights")
    s.add_argument("--chip", required=True, help="TPU-MLIR's chip name (bm1684x, bm1688, ...)")
    s.add_argument("-o", "--output", required=True, metavar="DIR", help="where the bmodel and the report go")
    s.add_argument("--quantize", default="F16", type=str.upper, choices=("F16", "INT8"),
                   help="default F16 (lgopt's cost model is fitted on F16; INT8 needs a calibration table or data)")
    s.add_argument("--cores", type=_positive_int, default=1,
                   help="TPU-MLIR's --num_core (default 1, as TPU-MLIR's)")
    s.add_argument("--calibration-table", metavar="T", help="INT8: TPU-MLIR's calibration table")
    s.add_argument("--calibration-data", metavar="DIR", help="INT8 without a table: inputs to calibrate on (.npz)")
    s.add_argument("--judge-budget", type=int, default=0, metavar="K",
                   help="compiles TPU-MLIR may spend refining lgopt's grouping (default 0: each is a whole "
                        "model_deploy, seconds to a minute; the final grouping is measured either way)")
    s.add_argument("--tpu-mlir", metavar="VENV", help="TPU-MLIR's Python environment (default $LGOPT_TPU_MLIR)")
    s.add_argument("--margin", type=float, default=None,
                   help="keep TPU-MLIR's grouping unless lgopt's is predicted this much faster (default 0.05: "
                        "the fitted model's per-group error on held-out models)")
    s.add_argument("--time-limit", type=_positive_float, default=60.0, help="lgopt's search, wall seconds (default 60)")
    s.add_argument("--workers", type=_positive_int, default=2, help="CP-SAT workers")
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.set_defaults(func=cmd_deploy)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="lgopt", description="LayerGroup optimiser for Sophgo-style TPUs")
    p.add_argument("--version", action="version", version=f"lgopt {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    _add_import(sub)
    _add_verify(sub)
    _add_solve(sub)
    _add_pack(sub)
    _add_simulate(sub)
    _add_compare(sub)
    _add_sweep(sub)
    _add_show(sub)
    _add_export(sub)
    _add_chips(sub)
    _add_fit(sub)
    _add_deploy(sub)
    return p


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM is handled as Ctrl-C: a long solve keeps its best plan either way."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    import signal
    import threading
    import time

    started = time.perf_counter()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        args = build_parser().parse_args(argv)
        args.started = started
        return int(args.func(args) or 0)
    except LgoptError as e:
        print(f"lgopt: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lgopt: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``lgopt ... | head``): say so once, and write no more
        _silence_stdout()
        print("lgopt: error: output closed before everything was written (broken pipe)", file=sys.stderr)
        return 2
    except SystemExit as e:  # --help / --version
        return int(e.code or 0)
    except Exception as e:  # a bug in lgopt, not in the input
        if os.environ.get("LGOPT_DEBUG"):
            traceback.print_exc()
        msg = " ".join(str(e).split())[:300]
        print(f"lgopt: internal error: {type(e).__name__}: {msg} (set LGOPT_DEBUG=1 for the traceback)",
              file=sys.stderr)
        return 3
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (captured output)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

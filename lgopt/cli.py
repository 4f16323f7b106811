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
from typing import Any, NoReturn, Sequence, get_args

from lgopt import __version__
from lgopt.errors import LgoptError
from lgopt.strategies.cpsat.common import Formulation, Objective


def stderr_progress(msg: str) -> None:
    if sys.stderr.isatty():
        print(f"\r{msg:<70}", end="", file=sys.stderr, flush=True)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other input error
        raise LgoptError(f"{self.prog}: {message}")


def _positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1 (a zero or negative alignment has no meaning)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {text!r}")
    return value


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
    p.add_argument("--dtype", help="compute dtype for an ONNX model's float tensors (f32, f16, bf16, int8, ...)")
    p.add_argument("--no-fuse", action="store_true", help="keep BatchNorm and activations as separate ops")
    p.add_argument("--input-shape", action="append", metavar="NAME=N,C,H,W", help="fix a dynamic input shape")


def _reference_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reference", metavar="REF.layer_group_cache.json",
                   help="search only groupings TPU-MLIR compiles as planned: its op order and base groups, from a "
                        "cache it wrote for this model and chip (see docs/tpu-mlir.md)")
    p.add_argument("--base-groups", metavar="BASE.json",
                   help="with --reference: TPU-MLIR's base groups (base_groups.json or model_ops.csv), so ops it left "
                        "global but can run in LMEM may be grouped")


def _chip_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chip", default="bm1684x", help="chip preset (default bm1684x)")
    p.add_argument("--chip-file", help="TOML or JSON chip parameters (key 'base' names the preset)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a chip parameter, e.g. lmem_bytes=64K")


def _load_model(args: argparse.Namespace, path: str):
    from lgopt.io.problem import load_model

    opts = {}
    if getattr(args, "dtype", None):
        opts["dtype"] = args.dtype
    if getattr(args, "no_fuse", False):
        opts["fuse"] = False
    if getattr(args, "input_shape", None):
        opts["input_shapes"] = _input_shapes(args.input_shape)
    return load_model(path, **opts)


def _chip(args: argparse.Namespace):
    from lgopt.hw.chip import get_chip, parse_set

    return get_chip(args.chip, parse_set(args.set), args.chip_file)


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
    from lgopt.check.verify import verify_plan
    from lgopt.io.planfile import load_plan

    plan = load_plan(args.plan)
    net = _load_model(args, args.model)
    vs = verify_plan(net, plan)
    if vs:
        print(f"FAIL {args.plan}: {vs[0]}" + (f" (+{len(vs) - 1} more)" if len(vs) > 1 else ""))
        if args.all:
            for v in vs[1:]:
                print(f"  {v}")
        return 1
    print(f"OK {args.plan}: {len(plan.groups)} groups, {len(plan.global_layers)} global layers hold every "
          "constraint")
    return 0


def cmd_solve(args: argparse.Namespace) -> int:
    from lgopt.check.verify import verify_plan
    from lgopt.cli import stderr_progress
    from lgopt.group.solver import check_params
    from lgopt.io.planfile import save_plan
    from lgopt.model.network import with_batch
    from lgopt.report.tables import collapse_globals, group_table, summary
    from lgopt.strategies.cpsat.common import CpsatSettings
    from lgopt.strategies.registry import StrategyOptions, parse_strategy
    from lgopt.strategies.settings import SearchSettings

    choice = parse_strategy(args.strategy)
    net = _load_model(args, args.model)
    if args.batch:
        net = with_batch(net, args.batch)
    chip = _chip(args)
    if not 0 <= args.h_ratio:
        raise LgoptError(f"--h-ratio must not be negative, got {args.h_ratio}")
    settings = SearchSettings(h_ratio=args.h_ratio, bank_rule=args.bank_rule)
    if args.time_limit <= 0 or args.workers < 1:
        raise LgoptError("--time-limit must be positive and --workers at least 1")
    t0 = time.perf_counter()
    progress = None if args.json else stderr_progress
    cpsat = CpsatSettings(objective=args.objective, time_limit=args.time_limit, workers=args.workers,
                          seed=args.seed, formulation=args.formulation, orders=args.orders,
                          handover=not args.no_handover, cp_sat_params=check_params(args.cp_sat_params or ""))
    from lgopt.strategies.tpumlir import GroupingInfeasible

    try:
        plan, extra = choice.run(net, chip, StrategyOptions(settings, cpsat, progress=progress,
                                                        reference=args.reference, base_groups=args.base_groups))
    except GroupingInfeasible as e:  # a given grouping lgopt's rules cannot build: a verdict, not an input error
        if args.json:
            print(json.dumps({"model": net.name, "chip": chip.name, "strategy": choice.label, "status": "infeasible",
                              "group": e.group_index, "reason": e.reason, "verified": False}))
        else:
            print(f"{net.name} on {chip.name} ({choice.label}): infeasible: group {e.group_index}: {e.reason}")
        return 1
    seconds = round(time.perf_counter() - t0, 3)
    if progress and sys.stderr.isatty():
        print("\r" + " " * 72 + "\r", end="", file=sys.stderr)
    violations = verify_plan(net, plan)
    if violations:  # a plan that breaks a constraint is an lgopt bug, whoever built it
        raise RuntimeError(f"the {args.strategy} plan fails verification: {violations[0]}")
    if args.output:
        save_plan(plan, args.output)
    s = summary(net, plan, seconds)
    s["verified"] = True
    if args.json:
        print(json.dumps(s))
        return 0
    df = collapse_globals(group_table(net, plan))
    print(df.to_string(index=False, na_rep="-"))
    print(f"\n{s['model']} on {s['chip']} ({args.strategy}; cycles by the {s['cost_model']} cost model): "
          f"{s['cycles']:,} cycles ({s['time_ms']} ms), "
          f"{s['traffic_bytes'] / 1e6:.2f} MB GMEM traffic, {s['groups']} groups, {s['global_layers']} global layers")
    for line in extra.get("searched", []) + extra.get("adjusted", []):
        print(f"tpu-mlir: {line}")
    if "groups_in_cache" in extra:
        print(f"tpu-mlir: {extra['groups_scored']} of {extra['groups_in_cache']} cache groups built exactly, "
              f"{extra['ops_mapped']} ops mapped, {extra['casts_skipped']} inserted casts skipped, "
              f"{len(extra.get('fused', []))} lgopt ops folded into a TPU-MLIR op; cost model: lgopt's analytic model")
    if plan.strategy == "cpsat":
        sv = plan.solver
        print(f"cpsat: {plan.status} ({sv.get('formulation')}), {sv['objective']} {sv['value']:,}, best bound "
              f"{sv['bound']:,}, gap {100 * sv['gap']:.2f}% over {sv.get('space', 'the candidate space')}")
    print(f"lower bound {s['lower_bound_cycles']:,} cycles, {s['lower_bound_traffic_bytes'] / 1e6:.2f} MB: "
          f"plan is {s['ratio_to_lower_bound']:.3f}x the bound; verified OK; {seconds:.2f} s"
          + (f"; plan written to {args.output}" if args.output else ""))
    return 0


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

    plan = load_plan(args.plan)
    net = _load_model(args, args.model)
    from lgopt.model.network import network_digest

    if plan.model_digest and plan.model_digest != network_digest(net):
        raise LgoptError(f"{args.plan} was made for another model than {args.model}")
    t0 = time.perf_counter()
    res = simulate(net, plan, args.seed)
    print(f"{res.summary()} ({time.perf_counter() - t0:.1f} s, seed {args.seed})")
    if str(args.model).lower().endswith(".onnx"):
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

    strategies = parse_strategies(args.strategies)
    models = [(m, _load_model(args, m)) for m in args.models]
    chip = _chip(args)
    if args.reference and len(models) > 1:
        raise LgoptError("--reference is a cache of one model: compare one model with it")
    df = compare(models, chip, strategies, args.output, SearchSettings(bank_rule=args.bank_rule), args.time_limit,
                 args.workers, stderr_progress, args.save_plans, reference=args.reference,
                 base_groups=args.base_groups)
    if sys.stderr.isatty():
        print("\r" + " " * 72 + "\r", end="", file=sys.stderr)
    cols = ["model", "strategy", "groups", "global layers", "slices", "cycles", "cost model", "traffic MB",
            "peak LMEM %", "status", "gap %", "seconds", "x greedy", "x LB"]
    print(df[[c for c in cols if c in df]].to_string(index=False, na_rep="-"))
    if args.output:
        print(f"\nwrote {args.output}/report.md, results.csv, report.html" + (" and plans/" if args.save_plans else ""))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from lgopt.cli import stderr_progress
    from lgopt.report.sweep import parse_sweep, sweep

    net = _load_model(args, args.model)
    from lgopt.hw.chip import get_chip

    chip = get_chip(args.chip, {}, args.chip_file)
    axes = parse_sweep(args.set or [])
    if not axes:
        raise LgoptError("sweep needs at least one --set key=v1,v2,...")
    from lgopt.strategies.registry import parse_strategies

    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    parse_strategies(args.strategies)  # every name registered, with its argument where it needs one
    out = args.output or f"reports/sweep-{net.name}-{chip.name}"
    df = sweep(args.model, net, chip, axes, strategies, out, args.time_limit, 1, args.jobs, stderr_progress)
    if sys.stderr.isatty():
        print("\r" + " " * 72 + "\r", end="", file=sys.stderr)
    print(df.drop(columns=[c for c in df if c.endswith("(value)")]).to_string(index=False))
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

    from lgopt.hw.chip import PRESETS, get_chip, parse_set, source_of

    if args.chip or args.set or args.chip_file:
        chip = get_chip(args.chip or "bm1684x", parse_set(args.set), args.chip_file)
        rows = [{"parameter": k, "value": v, "source": source_of(chip.name, k)} for k, v in chip.to_dict().items()]
        print(pd.DataFrame(rows).to_string(index=False))
        return 0
    df = pd.DataFrame([{k: v for k, v in c.to_dict().items() if k != "macs_per_lane"} for c in PRESETS.values()])
    print(df.to_string(index=False))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from lgopt.io.exporters import export, get, write
    from lgopt.io.planfile import load_plan

    ex = get(args.format)
    plan = load_plan(args.plan)
    net = _load_model(args, args.model)
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
    s.add_argument("--strategy", default="greedy", metavar="NAME[=ARG]",
                   help=f"a registered strategy: {strategy_names()} (default greedy)")
    s.add_argument("--cp-sat-params", metavar="TEXT",
                   help="extra CP-SAT parameters for cpsat's master and monolithic models, in SatParameters "
                        "text format, e.g. 'linearization_level:2'")
    s.add_argument("--objective", default="cycles", choices=get_args(Objective), help="what cpsat minimises")
    s.add_argument("--time-limit", type=float, default=60.0, help="cpsat wall-clock seconds (default 60)")
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
    s.add_argument("--time-limit", type=float, default=60.0)
    s.add_argument("--workers", type=int, default=2)
    s.add_argument("--bank-rule", default="soft", choices=["soft", "hard", "off"])
    s.add_argument("--save-plans", action="store_true", help="also write every plan under OUTPUT/plans/")
    _model_args(s)
    s.set_defaults(func=cmd_compare)


def _add_sweep(sub: Any) -> None:
    """``lgopt sweep``."""
    s = sub.add_parser("sweep", help="cross product of chip parameters: table, plots, Pareto front, knee")
    s.add_argument("model")
    s.add_argument("--chip", default="bm1684x")
    s.add_argument("--chip-file")
    s.add_argument("--set", action="append", metavar="KEY=V1,V2,...", help="a swept chip parameter")
    s.add_argument("--strategies", default="greedy", help=f"comma-separated: {strategy_names()}")
    s.add_argument("-o", "--output", help="report folder (default reports/sweep-MODEL-CHIP)")
    s.add_argument("--time-limit", type=float, default=10.0, help="cpsat seconds per configuration")
    s.add_argument("--jobs", type=int, default=2, help="worker processes")
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
                   help="tpu-mlir: casts TPU-MLIR inserted at a group's edge run as global layers (default for lgopt's "
                        "plans: lgopt does not budget their f32 buffers) or join the group where the reference has "
                        "them (default for TPU-MLIR's own grouping)")
    s.add_argument("--groups-only", action="store_true",
                   help="tpu-mlir: export the groups and slice counts of a plan whose schedule goes beyond what the "
                        "cache can say (lgopt's weight load rows, hand-over); TPU-MLIR then schedules them itself")
    s.add_argument("-o", "--output", help="file to write (default: PLAN name with the format's suffix)")
    _model_args(s)
    s.set_defaults(func=cmd_export)


def _add_chips(sub: Any) -> None:
    """``lgopt chips``."""
    s = sub.add_parser("chips", help="list chip presets, or one chip's parameters and their sources")
    s.add_argument("--chip", default=None)
    s.add_argument("--chip-file")
    s.add_argument("--set", action="append", metavar="KEY=VALUE")
    s.set_defaults(func=cmd_chips)


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
    return p


def main(argv: Sequence[str] | None = None) -> int:
    started = time.perf_counter()
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
    except SystemExit as e:  # --help / --version
        return int(e.code or 0)
    except Exception as e:  # a bug in lgopt, not in the input
        if os.environ.get("LGOPT_DEBUG"):
            traceback.print_exc()
        msg = " ".join(str(e).split())[:300]
        print(f"lgopt: internal error: {type(e).__name__}: {msg} (set LGOPT_DEBUG=1 for the traceback)",
              file=sys.stderr)
        return 3


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

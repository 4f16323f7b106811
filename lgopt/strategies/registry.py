"""Strategies by name: the one list ``solve``, ``compare``, ``sweep`` and the benchmarks choose from.

A strategy is a function ``(network, chip, options) -> (plan, extra)``; ``extra`` is whatever it wants a
report to show (for ``tpu-mlir``, what was mapped).  Some take an argument after ``=``
(``tpu-mlir=CACHE.json``).  Registering a new one is one :func:`register` call::

    register(StrategySpec("mine", my_solve, "what it does"))

after which ``lgopt solve MODEL --strategy mine`` and ``lgopt compare --strategies greedy,mine`` run it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from lgopt.errors import LgoptError
from lgopt.hw.chip import Chip
from lgopt.model.network import Network, network_digest, reorder
from lgopt.model.plan import Plan
from lgopt.strategies.cpsat.common import CpsatSettings
from lgopt.strategies.settings import Incumbent, Progress, SearchSettings, shape_of

REFERENCE_MARGIN = 0.05  # the calibrated model's per-group error on held-out models (docs/cost-model.md)
# banks of LMEM a group the reference does not have leaves empty, without a judge: lgopt's packing is tighter than
# TPU-MLIR's (more rows, greedy placement, f32 copies), and every new group the round trip saw refused filled more
# than 14 of 16 banks by lgopt's count (docs/tpu-mlir.md, "Headroom for new groups")
REFERENCE_RESERVE_BANKS = 2


@dataclass(frozen=True)
class StrategyOptions:
    """What every strategy is handed; each reads the part that concerns it."""

    search: SearchSettings = field(default_factory=SearchSettings)
    cpsat: CpsatSettings = field(default_factory=CpsatSettings)
    arg: str | None = None  # the text after "=" in "name=arg"
    progress: Progress | None = None
    incumbent: Incumbent | None = None  # told of every better complete plan while a long search runs
    exact: bool = True  # a given grouping (tpu-mlir=CACHE) is built exactly, or infeasible; False relaxes it as
    # documented in lgopt.strategies.tpumlir (ops lgopt runs only globally at a group's ends run beside it)
    reference: str | None = None  # a TPU-MLIR cache of this model and chip: search only what TPU-MLIR compiles
    base_groups: str | None = None  # its base groups (base_groups.json or model_ops.csv): ops it can put in LMEM
    margin: float = REFERENCE_MARGIN  # with a reference: keep its grouping unless ours is predicted this much better
    reserve_banks: int = REFERENCE_RESERVE_BANKS  # with a reference: banks a new group of lgopt's search leaves empty
    judge: Any = None  # a lgopt.io.tpumlir_judge.Judge: with a reference, TPU-MLIR measures and the search refines
    judge_settings: Any = None  # its lgopt.strategies.judged.JudgeSettings (None: the defaults)


Solve = Callable[[Network, Chip, StrategyOptions], tuple[Plan, dict[str, Any]]]


@dataclass(frozen=True)
class StrategySpec:
    name: str
    solve: Solve
    description: str
    arg: str | None = None  # what the "=ARG" part names, when the strategy needs one


STRATEGIES: dict[str, StrategySpec] = {}


def register(spec: StrategySpec) -> StrategySpec:
    if spec.name in STRATEGIES:
        raise ValueError(f"strategy {spec.name!r} is already registered")
    STRATEGIES[spec.name] = spec
    return spec


@dataclass(frozen=True)
class StrategyChoice:
    """A strategy as a user named it: ``greedy``, ``cpsat`` or ``tpu-mlir=CACHE.json``."""

    spec: StrategySpec
    arg: str | None = None

    @property
    def label(self) -> str:
        return self.spec.name

    def run(self, net: Network, chip: Chip, options: StrategyOptions) -> tuple[Plan, dict[str, Any]]:
        options = replace(options, arg=self.arg)
        if options.reference is not None and self.spec.name != "tpu-mlir":
            return _in_compiler_space(self.spec, net, chip, options)
        return self.spec.solve(net, chip, options)


COMPILER_SPACE = ("groups contiguous in TPU-MLIR 1.30.2's op order within its base groups (from {ref}); its slicing "
                  "rule (no h/2 limit); the pipelined timestep table with the seed's weight-load rule; no tensor "
                  "handed over in LMEM: the "
                  "groupings `lgopt export --reference` writes")


def _in_compiler_space(spec: StrategySpec, net: Network, chip: Chip, o: StrategyOptions
                       ) -> tuple[Plan, dict[str, Any]]:
    """``spec`` over what TPU-MLIR can compile: the network in its op order, groups within its base groups,
    weights loaded by the table's own rule, no hand-over (the cache it loads can say none of these)."""
    from lgopt.group.calibrated import min_slice_rows
    from lgopt.io.tpumlir_cache import load_cache
    from lgopt.io.tpumlir_export import compiler_space
    from lgopt.io.tpumlir_lowering import lower_like
    from lgopt.strategies.io_casts import convert_io_in_groups

    # the MatMul chains the reference runs as column pieces in different steps are cut the same way, so that each
    # piece can be grouped within its own base group (ConvNeXt's GELU halves on BM1684X); network_of redoes it
    net, lowered = lower_like(net, load_cache(str(o.reference)))
    as_lowered = {"tpu_mlir": {"cache": str(o.reference), "lowered": list(lowered)}} if lowered else {}
    space = compiler_space(net, str(o.reference), o.base_groups)
    onet = reorder(net, list(space.order))
    outer = o.incumbent
    ref_plan, ref_error = _reference_plan(net, chip, o)
    # the reference's groups compile as they are; a new one keeps reserve_banks free and packs as TPU-MLIR's
    # allocator would need (moved weight loads, a greedy allocator).  With a judge too: its start point is
    # lgopt's plan, and one that compiles is worth more than one predicted faster that does not
    reserve = o.reserve_banks
    trusted = frozenset() if ref_plan is None else frozenset(
        shape_of(g) for g in ref_plan.groups)
    # no channel slices: none of the calibration's 4,455 compiled groups uses csecs, so whether TPU-MLIR 1.30
    # compiles them as lgopt plans them is unmeasured
    inner = replace(o, reference=None, search=replace(o.search, runs=space.runs, h_ratio=None, max_c_slices=1,
                                                      reserve_banks=reserve, compiler_packing=True,
                                                      trusted=trusted, f32_tensors=f32_tensors(net, o.reference),
                                                      min_slice_rows=min_slice_rows(chip)),
                    cpsat=replace(o.cpsat, handover=False, free_loads=False, orders=1),
                    incumbent=None if outer is None else lambda p: outer(_on(net, p, as_lowered)))
    plan, extra = spec.solve(onet, chip, inner)
    plan = convert_io_in_groups(onet, chip, plan, inner.search)
    described = COMPILER_SPACE.format(ref=Path(str(o.reference)).name)
    solver = {**plan.solver, "space": described, "reference": str(o.reference), "beyond_compiler": [],
              "compiler_notes": list(lowered) + list(space.notes), "reserve_banks": reserve, **as_lowered}
    plan = replace(plan, model_digest=network_digest(net), solver=solver)
    if o.judge is not None:
        # the judge's own moves are free of the cautions: TPU-MLIR measures every one
        free = replace(inner.search, reserve_banks=0, compiler_packing=False, min_slice_rows=0)
        return _judged(net, onet, chip, o, free, plan, described, ref_plan, ref_error), extra
    return _against_reference(plan, o, ref_plan, ref_error), extra


def f32_tensors(net: Network, reference: str | Path | None) -> frozenset[str]:
    """The tensors inside the network that TPU-MLIR's F16 lowering casts (the operands of the casts its
    reference cache lists, in groups or global): it holds them as f32 too where a group computes with them.
    Network inputs and outputs are left out: a group converting them says so itself (``f32_in``, ``f32_out``)."""
    if reference is None:
        return frozenset()
    from lgopt.io.tpumlir_cache import cast_operands, load_cache

    cache = load_cache(str(reference))
    locs = [loc for g in cache.groups for loc in g.locs] + [loc for _, _, loc in cache.globals]
    return frozenset(cast_operands(net, locs)) - set(net.inputs) - set(net.outputs)


def _reference_plan(net: Network, chip: Chip, o: StrategyOptions) -> tuple[Plan | None, str]:
    """The reference's own grouping built by lgopt's reader (as ``solve --strategy tpu-mlir=REF`` builds it), or
    (None, why lgopt cannot build it)."""
    from lgopt.strategies.tpumlir import score

    try:
        return score(net, chip, str(o.reference), o.search)[0], ""
    except LgoptError as e:
        return None, str(e)


def _on(net: Network, plan: Plan, as_lowered: dict[str, Any]) -> Plan:
    """A plan of the reordered (and lowered) network an inner search returns, as one of ``net``: its digest,
    and the lowering ``network_of`` redoes."""
    return replace(plan, model_digest=network_digest(net), solver={**plan.solver, **as_lowered})


def _judged(net: Network, onet: Network, chip: Chip, o: StrategyOptions, st: SearchSettings, plan: Plan,
            described: str, ref: Plan | None, unreadable: str) -> Plan:
    """TPU-MLIR measures the reference's grouping (``ref``, as lgopt's reader builds it; None when it cannot,
    ``unreadable`` says why) and ``plan`` and judges a local search from the faster
    (:mod:`lgopt.strategies.judged`); the plan returned is the fastest it measured."""
    import json

    from lgopt.strategies.judged import JudgeSettings, judged_search

    starts: list[tuple[str, Plan]] = [] if ref is None else [("TPU-MLIR's own grouping", ref)]
    starts.append((plan.strategy, plan))
    ref_cache = json.loads(Path(str(o.reference)).read_text())
    as_lowered = {"tpu_mlir": plan.solver["tpu_mlir"]} if "tpu_mlir" in plan.solver else {}  # net is lowered so
    outer = o.incumbent
    js = o.judge_settings or JudgeSettings(time_limit=o.cpsat.time_limit)
    out = judged_search(net, onet, chip, st, o.judge, str(o.reference), o.base_groups, starts, js, o.progress,
                        plan.strategy, measure_reference=lambda: o.judge.measure(ref_cache),
                        incumbent=None if outer is None else lambda p: outer(_on(net, p, as_lowered)))
    solver = {**out.solver, "space": described, "reference": str(o.reference), "beyond_compiler": [],
              "compiler_notes": list(plan.solver.get("compiler_notes", [])),
              "own_cycles": float(plan.cost["cycles"]), **as_lowered}
    if unreadable:
        solver["reference_unreadable"] = unreadable
    return replace(out, solver=solver)


def _against_reference(plan: Plan, o: StrategyOptions, ref: Plan | None, ref_error: str) -> Plan:
    """``plan``, or the reference's own grouping when ``plan`` is not predicted at least ``o.margin`` faster.

    A prediction is only as good as the cost model: where lgopt's best is within the model's error of what
    the compiler already does, deploying it risks a slower program for a gain the model cannot see, so the
    compiler's grouping is kept (built by lgopt's reader, as ``solve --strategy tpu-mlir=REF`` builds it) and
    ``solver["kept_reference"]`` says why.  A reference lgopt cannot build (``ref`` None) changes nothing."""
    if ref is None:
        return replace(plan, solver={**plan.solver, "reference_cycles": None, "reference_unreadable": ref_error})
    ours, theirs = float(plan.cost["cycles"]), float(ref.cost["cycles"])
    solver = {**plan.solver, "reference_cycles": theirs, "margin": o.margin}
    if ours <= theirs * (1 - o.margin):
        return replace(plan, solver=solver)
    solver.pop("io_converted_in_groups", None)  # that was our plan's; the reference's are its own
    theirs_io = [t for g in ref.groups for t in g.f32_in + g.f32_out]
    if theirs_io:
        solver["io_converted_in_groups"] = theirs_io
    why = (f"{plan.strategy}'s best grouping is predicted at {ours:,.0f} cycles, the reference's at {theirs:,.0f}: "
           f"not {100 * o.margin:g}% faster, so the reference grouping is kept")
    return replace(ref, strategy=plan.strategy, model_digest=plan.model_digest,
                   solver={**solver, "kept_reference": why, "own_cycles": ours})


def names() -> str:
    """The registered strategies as a user types them."""
    return ", ".join(s.name + (f"={s.arg}" if s.arg else "") for s in STRATEGIES.values())


def parse_strategy(text: str) -> StrategyChoice:
    """``name`` or ``name=arg``, checked against the registry (one clear error otherwise)."""
    name, eq, arg = text.strip().partition("=")
    spec = STRATEGIES.get(name)
    if spec is None:
        raise LgoptError(f"unknown strategy {name!r} (registered: {names()})")
    if spec.arg and not arg:
        raise LgoptError(f"strategy {name} needs its argument: {name}={spec.arg}")
    if eq and not spec.arg:
        raise LgoptError(f"strategy {name} takes no argument (got {text.strip()!r})")
    return StrategyChoice(spec, arg or None)


def parse_strategies(text: str) -> list[StrategyChoice]:
    """A comma-separated list of strategies."""
    out = [parse_strategy(item) for item in text.split(",") if item.strip()]
    if not out:
        raise LgoptError("no strategies given")
    return out


# --- the built-in strategies ------------------------------------------------------------------------

def _greedy(net: Network, chip: Chip, o: StrategyOptions) -> tuple[Plan, dict[str, Any]]:
    from lgopt.strategies.greedy import greedy

    return greedy(net, chip, o.search, o.progress), {}


def _cpsat(net: Network, chip: Chip, o: StrategyOptions) -> tuple[Plan, dict[str, Any]]:
    from lgopt.strategies.cpsat.optimise import optimise

    return optimise(net, chip, o.search, o.cpsat, o.progress, o.incumbent), {}


def _tpu_mlir(net: Network, chip: Chip, o: StrategyOptions) -> tuple[Plan, dict[str, Any]]:
    from lgopt.strategies.tpumlir import score

    return score(net, chip, str(o.arg), o.search, exact=o.exact)


register(StrategySpec("greedy", _greedy, "the tail-to-head greedy baseline (the LayerGroup seed's rule)"))
register(StrategySpec("cpsat", _cpsat, "CP-SAT over groups, slicings, load rows and offsets; optimal with a proof "
                                       "or a bound and gap"))
register(StrategySpec("tpu-mlir", _tpu_mlir, "TPU-MLIR's own grouping, read from its layer-group cache and built "
                                             "by lgopt", arg="CACHE.json"))

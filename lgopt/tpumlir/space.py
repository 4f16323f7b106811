"""Searching within what TPU-MLIR compiles (``--reference``): the network in its op order, groups within its
base groups, weights loaded by the table's own rule, no hand-over, new groups packed as its allocator needs; and
against its own grouping, kept unless lgopt's is predicted ``margin`` faster (or, with a judge, measured).

:class:`ReferenceSpace` is the :class:`lgopt.strategies.registry.SearchSpace` the CLI and ``compare`` hand a
strategy; the strategies themselves know nothing of TPU-MLIR.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from lgopt.cost.cycles import edge_cast_cost
from lgopt.cost.fitted import CalibratedModel
from lgopt.cost.registry import cost_model, min_slice_rows
from lgopt.errors import LgoptError
from lgopt.hw.chip import Chip
from lgopt.model.network import Network, network_digest, reorder
from lgopt.model.plan import Plan
from lgopt.strategies.cpsat.result import with_value
from lgopt.strategies.registry import StrategyOptions, StrategySpec
from lgopt.strategies.settings import SearchSettings, shape_of
from lgopt.tpumlir.cache import Cache, cast_operands, load_cache
from lgopt.tpumlir.casts import convert_io_in_groups
from lgopt.tpumlir.export import compiler_space
from lgopt.tpumlir.grouping import score
from lgopt.tpumlir.judged import JudgeSettings, judged_search
from lgopt.tpumlir.lowering import lower_like
from lgopt.tpumlir.reslice import resliced
from lgopt.tpumlir.rules import TPU_MLIR_RULES

REFERENCE_MARGIN = 0.05  # the calibrated model's per-group error on held-out models (docs/cost-model.md)
# banks of LMEM a group the reference does not have leaves empty, without a judge: lgopt's packing is tighter than
# TPU-MLIR's (more rows, greedy placement, f32 copies), and every new group the round trip saw refused filled more
# than 14 of 16 banks by lgopt's count (docs/tpu-mlir.md, "Headroom for new groups")
REFERENCE_RESERVE_BANKS = 2


@dataclass(frozen=True)
class ReferenceSpace:
    """What TPU-MLIR compiles as planned, given a cache it wrote for this model and chip (``reference``)."""

    reference: str
    base_groups: str | None = None  # its base groups (base_groups.json or model_ops.csv): ops it can put in LMEM
    margin: float = REFERENCE_MARGIN  # keep the reference's grouping unless ours is predicted this much better
    reserve_banks: int = REFERENCE_RESERVE_BANKS  # banks a new group of lgopt's search leaves empty
    judge: Any = None  # a lgopt.tpumlir.judge.Judge: TPU-MLIR measures and the search refines
    judge_settings: Any = None  # its lgopt.tpumlir.judged.JudgeSettings (None: the defaults)
    trust_search: bool = False  # search several cores whose terms carry no measured check (to make that check)
    # search and keep lgopt's grouping whatever lgopt's trust in its model: the room the model sees in the space
    # (benchmarks/room.py --settings), not a plan to deploy (the reference is still kept when priced no faster)
    ungated: bool = False
    # False: the search packs free of lgopt's cautions (:func:`free_of_cautions`), so its space holds every grouping
    # of these runs TPU-MLIR compiles and its bound bounds them all (benchmarks/room.py)
    cautions: bool = True
    _lowered: dict[tuple[str, Chip], tuple[Network, tuple[str, ...]]] = field(default_factory=dict, compare=False,
                                                                              repr=False)

    @cached_property
    def cache(self) -> Cache:
        """The reference, read once however often the space is asked."""
        return load_cache(str(self.reference))

    def lowered(self, net: Network, chip: Chip) -> tuple[Network, tuple[str, ...]]:
        """``net`` lowered as the reference lowered it (MatMul chains it runs as column pieces cut the same
        way, its small-C groups held as on ``chip``) and what was cut: once per network and chip, so the search,
        the verifier and the report share one."""
        key = (network_digest(net), chip)
        if key not in self._lowered:
            self._lowered[key] = lower_like(net, self.cache, chip)
        return self._lowered[key]

    def run(self, spec: StrategySpec, net: Network, chip: Chip, options: StrategyOptions
            ) -> tuple[Plan, dict[str, Any]]:
        return _in_compiler_space(spec, net, chip, options, self)


COMPILER_SPACE = ("groups contiguous in TPU-MLIR 1.30.2's op order within its base groups (from {ref}); its slicing "
                  "rule (no h/2 limit); the pipelined timestep table with the seed's weight-load rule; no tensor "
                  "handed over in LMEM: the "
                  "groupings `lgopt export --reference` writes")


def _in_compiler_space(spec: StrategySpec, net: Network, chip: Chip, o: StrategyOptions, r: ReferenceSpace
                       ) -> tuple[Plan, dict[str, Any]]:
    """``spec`` over what TPU-MLIR can compile: the network in its op order, groups within its base groups,
    weights loaded by the table's own rule, no hand-over (the cache it loads can say none of these).  The
    reference is read once here, and the network lowered once, as its cache lowered it."""
    cache = r.cache
    # the MatMul chains the reference runs as column pieces in different steps are cut the same way, so that each
    # piece can be grouped within its own base group (ConvNeXt's GELU halves on BM1684X); network_of redoes it
    net, lowered = r.lowered(net, chip)
    as_lowered = {"tpu_mlir": {"cache": str(r.reference), "lowered": list(lowered)}} if lowered else {}
    space = compiler_space(net, str(r.reference), r.base_groups)
    onet = reorder(net, list(space.order))
    outer = o.incumbent
    ref_plan, ref_error = _reference_plan(net, chip, o.search, r)
    described = COMPILER_SPACE.format(ref=Path(str(r.reference)).name) + \
        ("" if r.cautions else "; free of lgopt's cautions (no bank reserved, its exact packer, any slice height)")
    untrusted = "" if r.ungated and ref_plan is not None else _untrusted(chip, net, ref_plan, ref_error,
                                                                         r.trust_search)
    if untrusted and ref_plan is not None and r.judge is None:  # whatever the search found, the reference is kept
        return _unsearched(spec.name, net, ref_plan, r, untrusted, described, list(lowered) + list(space.notes),
                           as_lowered), {}
    search = _compiler_settings(net, chip, o.search, cache, space.runs, ref_plan, r.reserve_banks)
    inner = replace(o, search=search if r.cautions else free_of_cautions(search),
                    cpsat=replace(o.cpsat, handover=False, free_loads=False, orders=1,
                                  stop_bound=_goal(chip, net, o, r, ref_plan)),
                    incumbent=None if outer is None else lambda p: outer(_on(net, p, as_lowered)))
    plan, extra = spec.solve(onet, chip, inner)
    plan = _or_resliced(net, chip, o.search, r, ref_plan, convert_io_in_groups(onet, chip, plan, inner.search))
    solver = {**plan.solver, "space": described, "reference": str(r.reference), "beyond_compiler": [],
              "compiler_notes": list(lowered) + list(space.notes), "reserve_banks": inner.search.reserve_banks,
              **as_lowered}
    plan = replace(plan, model_digest=network_digest(net), solver=solver)
    if r.judge is not None:
        # TPU-MLIR measures every candidate, so the judge also starts from the spaces with fewer cautions, and its
        # own moves leave out what a rule says TPU-MLIR refuses too
        free = replace(free_of_cautions(inner.search), compiler=None)
        more = _looser_starts(spec, onet, chip, inner, plan) if r.cautions else []
        return _judged(net, onet, chip, o, r, free, plan, described, ref_plan, ref_error, more), extra
    return _against_reference(plan, r, ref_plan, ref_error, untrusted), extra


def free_of_cautions(st: SearchSettings) -> SearchSettings:
    """``st`` without what lgopt adds to stay clear of an allocation TPU-MLIR might refuse or of rates its model
    does not know: no banks reserved, lgopt's exact packer on the group's own lifetimes (not only the greedy orders
    on the lifetimes TPU-MLIR's timestep pass moves), slices of any height.  The refusal rules stay
    (:mod:`lgopt.tpumlir.rules`: none named a grouping TPU-MLIR compiled), and so do whole held weights.  A
    superset of what TPU-MLIR compiles in these runs, so a bound over it bounds every grouping it compiles there
    (``benchmarks/room.py``)."""
    return replace(st, reserve_banks=0, min_slice_rows=0, compiler_allocator=False)


def packing_caution_only(st: SearchSettings) -> SearchSettings:
    """``st`` with one caution left: a new group packs as TPU-MLIR's allocator would need (lgopt's greedy orders on
    the lifetimes its timestep pass moves); no bank reserved, slices of any height.  Between the cautious plan and
    the free one: the free one's tight packings are what TPU-MLIR's allocator refuses (BM1688 INT8 on 2 cores:
    4 of 11 models' plans), the reserved banks and the slice height what the cautious one pays (VGG-16 there:
    5,432,933 cycles measured, against 5,549,503 for the cautious plan)."""
    return replace(st, reserve_banks=0, min_slice_rows=0)


def _looser_starts(spec: StrategySpec, onet: Network, chip: Chip, inner: StrategyOptions, plan: Plan
                   ) -> list[tuple[str, Plan]]:
    """The best plans of the spaces with fewer cautions (:func:`packing_caution_only`, :func:`free_of_cautions`),
    each searched as ``plan`` was, as labelled starts for the judge where their groups are neither ``plan``'s nor
    each other's: the cautions keep short slices and tight packings out of a plan deployed unmeasured, and on
    several cores they are much of the room (UNet / BM1690 INT8 8 cores, by ``tpu-mlir-1.30-int8``: 258,790
    cycles with them at 200 units, 213,492 proven optimal without)."""
    seen = [[shape_of(g) for g in plan.groups]]
    out = []
    for label, loosen in (("packed as the compiler's allocator needs", packing_caution_only),
                          ("free of the cautions", free_of_cautions)):
        search = loosen(inner.search)
        loose, _ = spec.solve(onet, chip, replace(inner, search=search))
        loose = convert_io_in_groups(onet, chip, loose, search)
        shapes = [shape_of(g) for g in loose.groups]
        if shapes not in seen:
            seen.append(shapes)
            out.append((f"{loose.strategy}, {label}", loose))
    return out


def _or_resliced(net: Network, chip: Chip, st: SearchSettings, r: ReferenceSpace, ref: Plan | None, plan: Plan
                 ) -> Plan:
    """``plan``, or the reference's groups sliced anew for the cores (:func:`lgopt.tpumlir.reslice.resliced`)
    where the cost model prices that lower: a search stopped by its time limit can miss it, and the judge starts
    from what this returns.  Its slice counts (one a core, 16, 32) need not be among those the search offers, so
    the search's bound holds only where the resliced plan is not below it; below, the bound is the plan's own
    cycles (a bound over the search's space and that plan, no more: BM1690 INT8, ShuffleNet-V2 resliced at 135,132
    against the search's bound of 140,086)."""
    if ref is None:
        return plan
    better, n = resliced(net, chip, Path(str(r.reference)), st, ref)
    cycles = int(better.cost["cycles"])
    if n == 0 or cycles >= plan.cost["cycles"]:
        return plan
    solver = {**plan.solver, "resliced": f"TPU-MLIR's own groups, {n} of them sliced anew for the {chip.used_cores} "
              f"cores (lgopt.tpumlir.reslice): {cycles:,} cycles against the search's {int(plan.cost['cycles']):,}"}
    return replace(better, strategy=plan.strategy, status=plan.status, solver=with_value(solver, cycles))


def _unsearched(strategy: str, net: Network, ref: Plan, r: ReferenceSpace, untrusted: str, described: str,
                notes: list[str], as_lowered: dict[str, Any]) -> Plan:
    """The reference's own grouping, kept without a search: lgopt could not predict a grouping of this model
    well enough to replace it (``untrusted`` says why), so searching would only spend the user's time."""
    solver = {"space": described, "reference": str(r.reference), "beyond_compiler": [], "compiler_notes": notes,
              "reference_cycles": float(ref.cost["cycles"]), "margin": r.margin, **as_lowered}
    return _kept(ref, strategy, network_digest(net), solver, f"{untrusted}, so the reference grouping is kept "
                 "(not searched)")


def _compiler_settings(net: Network, chip: Chip, st: SearchSettings, cache: Cache,
                       runs: tuple[tuple[str, ...], ...], ref_plan: Plan | None, reserve: int) -> SearchSettings:
    """``st`` within TPU-MLIR's space: its runs and slicing rule, no channel slices (none of the calibration's
    4,455 compiled groups uses csecs, so whether TPU-MLIR 1.30 compiles them as lgopt plans them is unmeasured).
    The reference's groups compile as they are; a new one keeps ``reserve`` banks free and packs as TPU-MLIR's
    allocator would need (its rules, moved weight loads, a greedy allocator, the f32 copies of its casts)."""
    trusted = frozenset() if ref_plan is None else frozenset(shape_of(g) for g in ref_plan.groups)
    return replace(st, runs=runs, h_ratio=None, max_c_slices=1, reserve_banks=reserve,
                   compiler=TPU_MLIR_RULES, trusted=trusted, f32_tensors=f32_tensors(net, cache),
                   min_slice_rows=min_slice_rows(chip))


def _goal(chip: Chip, net: Network, o: StrategyOptions, r: ReferenceSpace, ref: Plan | None) -> int | None:
    """The bound at which the search may stop: once nothing in the space can be predicted ``margin`` faster than
    the reference, the reference is what ``_against_reference`` keeps.  Its casts at the graph's edges are added
    back (a group that converts them itself, after the search, saves at most that), so stopping is never wrong.
    None with a judge (it measures what the model cannot rule out) or another objective."""
    if ref is None or r.judge is not None or o.cpsat.objective != "cycles":
        return None
    casts = edge_cast_cost(chip, net)["cycles"]
    return int(ref.cost["cycles"] * (1 - r.margin)) + int(casts) + 1


def f32_tensors(net: Network, cache: Cache | None) -> frozenset[str]:
    """The tensors inside the network that TPU-MLIR's F16 lowering casts (the operands of the casts its
    reference cache lists, in groups or global): it holds them as f32 too where a group computes with them.
    Network inputs and outputs are left out: a group converting them says so itself (``f32_in``, ``f32_out``)."""
    if cache is None:
        return frozenset()
    return frozenset(cast_operands(net, cache.locs)) - set(net.inputs) - set(net.outputs)


def _reference_plan(net: Network, chip: Chip, st: SearchSettings, r: ReferenceSpace) -> tuple[Plan | None, str]:
    """The reference's own grouping built by lgopt's reader (as ``solve --strategy tpu-mlir=REF`` builds it), or
    (None, why lgopt cannot build it)."""
    try:
        return score(net, chip, str(r.reference), st)[0], ""
    except LgoptError as e:
        return None, str(e)


def _on(net: Network, plan: Plan, as_lowered: dict[str, Any]) -> Plan:
    """A plan of the reordered (and lowered) network an inner search returns, as one of ``net``: its digest,
    and the lowering ``network_of`` redoes."""
    return replace(plan, model_digest=network_digest(net), solver={**plan.solver, **as_lowered})


def _judged(net: Network, onet: Network, chip: Chip, o: StrategyOptions, r: ReferenceSpace, st: SearchSettings,
            plan: Plan, described: str, ref: Plan | None, unreadable: str, more: Sequence[tuple[str, Plan]] = ()
            ) -> Plan:
    """TPU-MLIR measures the reference's grouping (``ref``, as lgopt's reader builds it; None when it cannot,
    ``unreadable`` says why), ``plan`` and the labelled plans ``more``, and judges a local search from the fastest
    (:mod:`lgopt.tpumlir.judged`); the plan returned is the fastest it measured."""
    starts: list[tuple[str, Plan]] = [] if ref is None else [("TPU-MLIR's own grouping", ref)]
    starts += [(plan.strategy, plan), *more]
    ref_cache = json.loads(Path(str(r.reference)).read_text())  # as the judge hands it to TPU-MLIR, byte for byte
    as_lowered = {"tpu_mlir": plan.solver["tpu_mlir"]} if "tpu_mlir" in plan.solver else {}  # net is lowered so
    outer = o.incumbent
    js = r.judge_settings or JudgeSettings(time_limit=o.cpsat.time_limit)
    out = judged_search(net, onet, chip, st, r.judge, str(r.reference), r.base_groups, starts, js, o.progress,
                        plan.strategy, measure_reference=lambda: r.judge.measure(ref_cache),
                        incumbent=None if outer is None else lambda p: outer(_on(net, p, as_lowered)))
    solver = {**out.solver, "space": described, "reference": str(r.reference), "beyond_compiler": [],
              "compiler_notes": list(plan.solver.get("compiler_notes", [])),
              "own_cycles": float(plan.cost["cycles"]), **as_lowered}
    if unreadable:
        solver["reference_unreadable"] = unreadable
    return replace(out, solver=solver)


def _untrusted(chip: Chip, net: Network, ref: Plan | None, ref_error: str, trust_search: bool = False) -> str:
    """Why lgopt cannot predict the reference well enough to replace it ("" when it can): it cannot build the
    reference's grouping (ops TPU-MLIR groups that lgopt runs globally, fusions it does not share), or the
    fitted model was fitted on none of some op's kind.  Fresh architectures measured 1.31x opt2 where lgopt's
    prediction of their own plan was 2.36x off (issue 37): an unseen architecture gets at worst the reference."""
    if ref is None:
        return f"lgopt cannot build the reference grouping ({ref_error.splitlines()[0][:200] if ref_error else '?'})"
    model = cost_model(chip)
    unmeasured = _unmeasured_setting(chip, net, trust_search)
    if unmeasured:
        return unmeasured
    unseen = model.unfitted(chip, net) if isinstance(model, CalibratedModel) else []
    if unseen:
        kinds = sorted({net.op(o).type for o in unseen})
        return (f"the {model.name} cost model was fitted on no {', '.join(kinds)} op like this model's "
                f"({len(unseen)} ops, e.g. {unseen[0]})")
    return ""


def _unmeasured_setting(chip: Chip, net: Network, trust_search: bool = False) -> str:
    """Why no cost model of lgopt's was fitted for the setting (dtype, cores) ``net`` runs in on ``chip`` ("" when
    one was): INT8 where the chip's model has no INT8 constants (BM1684X and BM1688 have), and several cores
    without fitted core terms.  Read from TPU-MLIR's own groupings of the shared models, the analytic model misses
    INT8 on BM1688 with 2 cores by a median 19 % (``benchmarks/settings.py``), far beyond any margin a search
    could trust.  On several cores the held-out error on TPU-MLIR's groupings did not carry to lgopt's (session
    16: plans at 1.12-1.20x of opt2), so the search is trusted at the margin only where the fitted terms carry a
    measured check of it (``search_checked``: every model's plan at the margin compiled at or below opt2, BM1688
    F16 and INT8 on 2 cores, BM1690 F16 on 8; ``trust_search`` measures one); elsewhere, as on BM1690 INT8
    (ConvNeXt's plan refused by TPU-MLIR twice), only a judged search replaces the reference
    (``docs/cost-model.md``, "Several cores")."""
    model = cost_model(chip)
    dtypes = {net.tensor(t).dtype for t in net.outputs if t in net.tensors}
    def fitted(d: str) -> bool:  # F16 as ever: the analytic model stands where none was fitted
        return d == "f16" or (isinstance(model, CalibratedModel) and model.covers(chip.name, d))

    unfitted = sorted(d for d in dtypes if not fitted(d))
    if unfitted:
        return (f"lgopt's cost models were fitted on no {'/'.join(d.upper() for d in unfitted)} deployment on "
                f"{chip.name} (the {model.name} model's predictions are not TPU-MLIR's there)")
    if isinstance(model, CalibratedModel) and (why := untrusted_fit(model, chip)):
        return why
    if chip.used_cores > 1:
        c = model.constants(chip).cores if isinstance(model, CalibratedModel) else None
        if c is None or c.measured_cores != chip.used_cores or c.held_out_error is None:
            return f"the {model.name} cost model was fitted on no deployment over {chip.used_cores} cores"
        if not c.search_checked and not trust_search:
            return (f"the {model.name} cost model's several-core terms predict TPU-MLIR's groupings on {chip.name} "
                    f"over {chip.used_cores} cores within {c.held_out_error:.1%} held out, but lgopt's own plans "
                    "priced by them were never measured at or below opt2 on every model with none refused: a search "
                    "there is trusted only when judged")
    return ""


TRUSTED_ERROR = 0.10  # the held-out whole-model error up to which a fit may replace the compiler's grouping


def untrusted_fit(model: CalibratedModel, chip: Chip) -> str:
    """Why ``model``'s fit for ``chip`` is not to be trusted over TPU-MLIR's own grouping ("" when it is): its held-out
    models measured a median whole-model error above :data:`TRUSTED_ERROR` (``source.held_out_error``, which ``lgopt
    fit`` records).  BM1684's INT8 fit of session 13 missed by 17.6 % (its groups 24.9 %; 7.0 % since its 4N
    transfers are charged), where the margin a search must beat the reference by is 5 %; BM1684X's INT8 fit, 8.1 %,
    kept its round trips at or below opt2 (``benchmarks/results/settings.md``).  A file without the record is as
    its documented error says."""
    err = model.constants(chip).source.get("held_out_error", {}).get("model_total")
    if err is None or err <= TRUSTED_ERROR:
        return ""
    return (f"the {model.name} cost model's held-out models measured {err:.1%} median whole-model error on "
            f"{chip.name}, above the {TRUSTED_ERROR:.0%} lgopt trusts a search with")


def _against_reference(plan: Plan, r: ReferenceSpace, ref: Plan | None, ref_error: str, untrusted: str = ""
                       ) -> Plan:
    """``plan``, or the reference's own grouping when ``plan`` is not predicted at least ``r.margin`` faster.

    A prediction is only as good as the cost model: where lgopt's best is within the model's error of what
    the compiler already does, deploying it risks a slower program for a gain the model cannot see, so the
    compiler's grouping is kept (built by lgopt's reader, as ``solve --strategy tpu-mlir=REF`` builds it) and
    ``solver["kept_reference"]`` says why.  So is it wherever lgopt cannot predict the reference well
    (``untrusted``, :func:`_untrusted`); one lgopt cannot build (``ref`` None) is exported as TPU-MLIR wrote it."""
    if ref is None:  # nothing to compare with: the reference is exported as it is (reference_verbatim)
        why = f"{untrusted}, so the reference grouping is kept as TPU-MLIR wrote it"
        return replace(plan, solver={**plan.solver, "reference_cycles": None, "reference_unreadable": ref_error,
                                     "kept_reference": why, "reference_verbatim": True})
    ours, theirs = float(plan.cost["cycles"]), float(ref.cost["cycles"])
    solver = {**plan.solver, "reference_cycles": theirs, "margin": r.margin}
    if ours <= theirs * (1 - r.margin) and not untrusted:
        return replace(plan, solver=solver)
    why = (f"{plan.strategy}'s best grouping is predicted at {ours:,.0f} cycles, the reference's at {theirs:,.0f}: "
           + (f"{untrusted}, so the reference grouping is kept" if untrusted else
              f"not {100 * r.margin:g}% faster, so the reference grouping is kept"))
    return _kept(ref, plan.strategy, plan.model_digest, {**solver, "own_cycles": ours}, why)


def _kept(ref: Plan, strategy: str, digest: str, solver: dict[str, Any], why: str) -> Plan:
    """The reference's own grouping as the plan ``strategy`` returns, ``why`` recorded; the f32 casts at the
    graph's edges its groups take in are its own (a search's plan may have taken others)."""
    solver = {k: v for k, v in solver.items() if k != "io_converted_in_groups"}
    theirs_io = [t for g in ref.groups for t in g.f32_in + g.f32_out]
    if theirs_io:
        solver["io_converted_in_groups"] = theirs_io
    return replace(ref, strategy=strategy, model_digest=digest, solver={**solver, "kept_reference": why})



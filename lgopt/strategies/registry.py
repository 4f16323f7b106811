"""Strategies by name: the one list ``solve``, ``compare``, ``sweep`` and the benchmarks choose from.

A strategy is a function ``(network, chip, options) -> (plan, extra)``; ``extra`` is whatever it wants a
report to show (for ``tpu-mlir``, what was mapped).  Some take an argument after ``=``
(``tpu-mlir=CACHE.json``).  Registering a new one is one :func:`register` call::

    register(StrategySpec("mine", my_solve, "what it does"))

after which ``lgopt solve MODEL --strategy mine`` and ``lgopt compare --strategies greedy,mine`` run it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol

from lgopt.errors import LgoptError
from lgopt.hw.chip import Chip
from lgopt.model.network import Network
from lgopt.model.plan import Plan
from lgopt.plugins import load_plugins
from lgopt.strategies.cpsat.common import CpsatSettings
from lgopt.strategies.settings import Incumbent, Progress, SearchSettings


class SearchSpace(Protocol):
    """A restriction of every search to what some compiler can carry, which runs a strategy within it
    (TPU-MLIR's: :class:`lgopt.tpumlir.space.ReferenceSpace`, ``--reference``)."""

    def run(self, spec: StrategySpec, net: Network, chip: Chip, options: StrategyOptions
            ) -> tuple[Plan, dict[str, Any]]: ...


@dataclass(frozen=True)
class StrategyOptions:
    """What every strategy is handed; each reads the part that concerns it."""

    search: SearchSettings = field(default_factory=SearchSettings)
    cpsat: CpsatSettings = field(default_factory=CpsatSettings)
    arg: str | None = None  # the text after "=" in "name=arg"
    progress: Progress | None = None
    incumbent: Incumbent | None = None  # told of every better complete plan while a long search runs
    exact: bool = True  # a given grouping (tpu-mlir=CACHE) is built exactly, or infeasible; False relaxes it as
    # documented in lgopt.tpumlir.grouping (ops lgopt runs only globally at a group's ends run beside it)
    space: SearchSpace | None = None  # search only there (None: everything lgopt's own rules allow)


Solve = Callable[[Network, Chip, StrategyOptions], tuple[Plan, dict[str, Any]]]


@dataclass(frozen=True)
class StrategySpec:
    name: str
    solve: Solve
    description: str
    arg: str | None = None  # what the "=ARG" part names, when the strategy needs one
    searches: bool = True  # False: it builds a grouping it is given, so a search space does not apply


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
        """The strategy on ``net``, within ``options.space`` where one is given and the strategy searches."""
        options = replace(options, arg=self.arg)
        if options.space is not None and self.spec.searches:
            return options.space.run(self.spec, net, chip, replace(options, space=None))
        return self.spec.solve(net, chip, options)


def names() -> str:
    """The registered strategies as a user types them (the plugins' included)."""
    load_plugins()
    return ", ".join(s.name + (f"={s.arg}" if s.arg else "") for s in STRATEGIES.values())


def parse_strategy(text: str) -> StrategyChoice:
    """``name`` or ``name=arg``, checked against the registry (one clear error otherwise)."""
    name, eq, arg = text.strip().partition("=")
    load_plugins()
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


register(StrategySpec("greedy", _greedy, "the tail-to-head greedy baseline (the LayerGroup seed's rule)"))
register(StrategySpec("cpsat", _cpsat, "CP-SAT over groups, slicings, load rows and offsets; optimal with a proof "
                                       "or a bound and gap"))

"""Cost models by name: a chip names its model (``Chip.cost_model``, ``--set cost_model=NAME``) and
:func:`cost_model` finds it.  A new model is one module and one :func:`register_cost_model` call
(``docs/extending.md``); the built-in ones are registered here."""

from __future__ import annotations

from lgopt.cost.analytic import AnalyticModel
from lgopt.cost.fitted import CALIBRATION_DIR, INT8_MODEL_NAME, CalibratedModel
from lgopt.cost.model import CostModel
from lgopt.errors import LgoptError
from lgopt.hw.chip import Chip, changes

COST_MODELS: dict[str, CostModel] = {}


def register_cost_model(model: CostModel) -> CostModel:
    """Make ``model`` selectable as ``Chip.cost_model`` (``--set cost_model=NAME``)."""
    if model.name in COST_MODELS:
        raise ValueError(f"cost model {model.name!r} is already registered")
    COST_MODELS[model.name] = model
    return model


def unregister_cost_model(name: str) -> None:
    """Forget a model registered for a while (a fit prices with the constants it is making, under a name of
    their own, and drops that name when done)."""
    COST_MODELS.pop(name, None)


register_cost_model(AnalyticModel())
FITTED = CalibratedModel()
register_cost_model(FITTED)
FITTED_INT8 = CalibratedModel(name=INT8_MODEL_NAME, directory=str(CALIBRATION_DIR / "int8"))
register_cost_model(FITTED_INT8)


def cost_model(chip: Chip) -> CostModel:
    """The model ``chip`` names."""
    model = COST_MODELS.get(chip.cost_model)
    if model is None:
        raise LgoptError(f"unknown cost model {chip.cost_model!r} (registered: {', '.join(COST_MODELS)})")
    return model


def min_slice_rows(chip: Chip) -> int:
    """The fewest rows an activation slice keeps the fitted transfer rates at on ``chip`` (``slice_rows`` in its
    constants; 0 where the chip's cost model is not this one or the fit found no such height)."""
    model = cost_model(chip)
    return model.constants(chip).min_slice_rows if isinstance(model, CalibratedModel) else 0


def default_cost_model(chip: Chip, dtype: str) -> str:
    """The best model lgopt has for ``chip`` computing in ``dtype``: the one fitted on the compiler's timeline
    where it was fitted for this chip and dtype (the shipped ones: BM1684X, BM1688 and BM1690 in F16, 2-6 % median
    error on held-out models against the analytic model's 5-18 %, and in INT8 on these and BM1684,
    ``docs/cost-model.md``), else the chip's own (the analytic one).  A chip changed from its preset keeps its
    own: the fit measured the real chip.

    >>> from lgopt.hw.chip import get_chip
    >>> default_cost_model(get_chip("bm1684x"), "f16"), default_cost_model(get_chip("bm1684x"), "int8")
    ('tpu-mlir-1.30', 'tpu-mlir-1.30-int8')
    >>> default_cost_model(get_chip("cv181x"), "f16"), default_cost_model(get_chip("bm1684x", {"npu_num": "32"}), "f16")
    ('analytic', 'analytic')
    """
    if changes(chip):
        return chip.cost_model
    return next((m.name for m in (FITTED, FITTED_INT8) if m.covers(chip.name, dtype)), chip.cost_model)

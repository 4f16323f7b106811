"""Extensions that register themselves: a strategy, a cost model or an exporter from another package.

A plugin is a module that calls the registries' ``register`` functions when imported
(:func:`lgopt.strategies.registry.register`, :func:`lgopt.cost.registry.register_cost_model`,
:func:`lgopt.io.exporters.register`).  lgopt imports every module named in the entry-point group
``lgopt.plugins`` of any installed package the first time a name is looked up, so a team adds its own by
declaring, in its package's ``pyproject.toml``::

    [project.entry-points."lgopt.plugins"]
    mine = "mypackage.lgopt_plugin"

lgopt's own knowledge of TPU-MLIR is such a plugin (:mod:`lgopt.tpumlir.plugin`): the layers below it
never import it, and it is loaded the same way, also from a source tree that was not installed.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from lgopt.errors import LgoptError

BUILT_IN = ("lgopt.tpumlir.plugin",)
_loaded = False


def load_plugins() -> None:
    """Import lgopt's built-in plugins and every ``lgopt.plugins`` entry point once (later calls do nothing)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in BUILT_IN:
        importlib.import_module(name)
    for ep in entry_points(group="lgopt.plugins"):
        if ep.module in BUILT_IN:
            continue
        try:
            importlib.import_module(ep.module)
        except Exception as e:  # a broken third-party plugin is named, not a traceback
            raise LgoptError(f"plugin {ep.name} ({ep.module}) failed to load: {type(e).__name__}: {e}") from None

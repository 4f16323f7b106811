"""lgopt: LayerGroup optimisation for Sophgo-style TPUs.

Data flows one way: model file -> :mod:`lgopt.model.network` -> candidate groups
(:mod:`lgopt.group.slicing`) -> schedule and allocation -> :mod:`lgopt.model.plan` ->
:mod:`lgopt.check.verify` -> report.
"""

__version__ = "0.1.0"

"""lgopt: LayerGroup optimisation for Sophgo-style TPUs.

Data flows one way: model file -> :mod:`lgopt.network` -> candidate groups
(:mod:`lgopt.slicing`) -> schedule and allocation -> :mod:`lgopt.plan` ->
:mod:`lgopt.verify` -> report.
"""

__version__ = "0.1.0"

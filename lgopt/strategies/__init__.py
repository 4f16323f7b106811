"""How groups are chosen: the greedy baseline (:mod:`.greedy`), the CP-SAT optimiser
(:mod:`.cpsat`), TPU-MLIR's own grouping scored by lgopt (:mod:`.tpumlir`), and the registry that
names them (:mod:`.registry`).

May import :mod:`lgopt.group`, :mod:`lgopt.io`, :mod:`lgopt.hw` and :mod:`lgopt.model`; never
:mod:`lgopt.check` (a plan is checked by someone who did not build it).
"""

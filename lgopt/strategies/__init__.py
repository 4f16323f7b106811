"""How groups are chosen: the greedy baseline (:mod:`.greedy`), the CP-SAT optimiser
(:mod:`.cpsat`), the rules every plan obeys (:mod:`.settings`) and the registry that names them
(:mod:`.registry`; a compiler's own strategies and search space come from its plugin, :mod:`lgopt.tpumlir`).

May import :mod:`lgopt.group`, :mod:`lgopt.io`, :mod:`lgopt.hw` and :mod:`lgopt.model`; never
:mod:`lgopt.check` (a plan is checked by someone who did not build it).
"""
